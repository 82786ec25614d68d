"""``InverseDynamicsSolver``: the generalized forces that produce given accelerations
(OpenSim's ``InverseDynamicsSolver``, Simbody's ``calcResidualForceIgnoringConstraints``
with the System's own forces applied).

``tau = M(q) udot + C(q, u) - (J^T F + f)``, where ``F``, ``f`` are the body and mobility
forces of every enabled force element at the State (gravity, springs, limits, contact,
actuators at their controls) plus any forces passed in (measured ground reactions, say).
Constraints are ignored, as OpenSim's inverse dynamics ignores them: ``tau`` are the
forces the mobilities must supply. A pure function of the State and ``udot``: ``jit``,
``vmap`` over the frames of a trial and ``grad`` with respect to q, u, udot, the
loads or any parameter in the State apply.

``C`` is exact (autodiff of each mobilizer's transform). OpenSim's differs on CustomJoints
whose rotations share a coordinate, e.g. Pose2Sim's walker knee: Simbody's
``FunctionBased`` mobilizer's derivative of H is exact only when rotation k is a function
of the joint's k-th coordinate alone (the guide's inverse dynamics section has the numbers).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._stage import Stage
from ..model.state import State


class InverseDynamicsSolver:
    """Inverse dynamics of a System (OpenSim's ``InverseDynamicsSolver``).

    Example::

        solver = sj.InverseDynamicsSolver(system)
        tau = solver.solve(state, udot)  # (nu,) generalized forces
        taus = jax.vmap(lambda q, u, a: solver.solve(state.with_q(q).with_u(u), a))(Q, U, A)
    """

    def __init__(self, system: Any):
        self._system = system

    def solve(
        self,
        state: State,
        udot: Any,
        applied_mobility_forces: Any = None,
        applied_body_forces: Any = None,
    ) -> Float[Array, " nu"]:
        """The residual generalized forces ``M udot + C - applied`` (nu,) at ``state``.

        Args:
            state: q, u, time, parameters (any stage; realized here to Dynamics so the
                System's forces are applied).
            udot: The accelerations (nu,).
            applied_mobility_forces: Extra generalized forces (nu,) added to the
                System's.
            applied_body_forces: Extra body forces (nb, 6), ``[torque about the body
                origin; force]`` in Ground, added to the System's (e.g. measured external
                loads).
        """
        system = self._system
        s = system.realize(state, Stage.DYNAMICS)
        dc = s.dynamics_cache
        body = dc.body_forces
        mob = dc.mobility_forces
        body = _plus(
            body,
            applied_body_forces,
            "applied_body_forces",
            " (one [torque; force] row per body, Ground first)",
        )
        mob = _plus(mob, applied_mobility_forces, "applied_mobility_forces", "")
        a = jnp.asarray(udot, dtype=s.u.dtype)
        if a.shape != s.u.shape:
            raise ValueError(f"InverseDynamicsSolver.solve: udot must have shape {s.u.shape}, got {a.shape}")
        matter = system.get_matter_subsystem()
        return matter.calc_residual_force(s, mob, body, a)

    def solve_trajectory(
        self, state: State, q: Any, u: Any, udot: Any, applied_body_forces: Any = None
    ) -> jax.Array:
        """:meth:`solve` at every frame of a trajectory at once (one compiled, batched
        call): ``q`` (T, nq), ``u`` and ``udot`` (T, nu), ``applied_body_forces``
        (T, nb, 6) or None; the other State entries (time, parameters) from ``state``.
        Returns (T, nu)."""
        return over_frames(self.solve, state, q, u, udot, applied_body_forces)


def over_frames(solve: Any, state: State, q: Any, u: Any, udot: Any, applied_body_forces: Any = None) -> Any:
    """``solve(state with frame k's q and u, udot[k], applied_body_forces=F[k])`` over the
    frames at once (``jax.vmap``): the trajectory form of the frame solvers (inverse
    dynamics, static optimization). NumPy frames are made JAX arrays first (vmapped into a
    traced State under ``jit``, NumPy values would reach the realization's ``custom_jvp``
    as constants it refuses)."""
    q, u, udot = (jnp.asarray(x, dtype=state.q.dtype) for x in (q, u, udot))
    if applied_body_forces is None:
        return jax.vmap(lambda qq, uu, aa: solve(state.with_q(qq).with_u(uu), aa))(q, u, udot)
    F = jnp.asarray(applied_body_forces, dtype=state.q.dtype)
    return jax.vmap(lambda qq, uu, aa, ff: solve(state.with_q(qq).with_u(uu), aa, applied_body_forces=ff))(
        q, u, udot, F
    )


def _plus(base: jax.Array, extra: Any, name: str, hint: str) -> jax.Array:
    """``base + extra`` (``extra`` None: ``base``), refusing an ``extra`` of another shape."""
    if extra is None:
        return base
    x = jnp.asarray(extra, dtype=base.dtype)
    if x.shape != base.shape:
        raise ValueError(
            f"InverseDynamicsSolver.solve: {name} must have shape {base.shape}{hint}, got {x.shape}"
        )
    return base + x
