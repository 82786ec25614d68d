"""``StaticOptimization``: the actuator activations that produce given accelerations at
least cost, frame by frame (OpenSim's ``StaticOptimization`` analysis).

At a State (q, u) and target accelerations ``udot``, every actuator ``j`` applies
``a_j f_j``: a muscle its tendon force along its path with ``f_j`` its active fibre force
at full activation with the tendon rigid (``use_muscle_physiology``, OpenSim's
``calcInextensibleTendonActiveFiberForce(s, 1)``; else its max isometric force); any
other actuator (``Force.CoordinateActuator``) ``a_j`` times its optimal force, ``a_j``
being its control. The muscles' own (passive) forces are replaced by ``a_j f_j``, as
OpenSim overrides their actuation; every other force of the System (gravity, springs,
limits, contact, measured loads passed in) acts as usual. The activations solve

    minimize  sum_j |a_j|^p   subject to  N^T (tau - A a) = 0,  lo <= a <= hi,

with ``tau = M udot + C - applied`` the generalized forces the actuators must supply
(inverse dynamics with the actuators off), ``A`` (nu, na) the generalized force of each
actuator per unit activation (``-f_j dV_j/du`` for a muscle on a path of lengthening
speed ``V_j``) and ``N`` a basis of the motions the constraints allow: the accelerations
of the free coordinates equal their targets, as OpenSim's acceleration constraints
require, and a locked or coupled (dependent) coordinate follows its constraint.

The problem is solved by Newton's method on its dual (one unknown per free coordinate;
the activations are the clipped minimisers ``a_j(A^T lambda)``), a fixed number of
damped steps with no Python branching, so a trajectory's frames solve in one ``vmap``ped
call and ``grad`` flows through the solution to the State, the targets and any
parameter (muscle properties, path geometry). A frame whose actuators cannot produce the
accelerations (a model too weak) keeps a residual, reported per frame, as OpenSim
reports its failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from .._stage import Stage
from ..model.state import State
from ..system.forces import CoordinateActuator, TendonActuator
from ..system.muscles import Muscle, _muscles_of, calc_inextensible_tendon_active_fiber_forces
from .inverse_dynamics import InverseDynamicsSolver, over_frames


class StaticOptimizationSolution(NamedTuple):
    """One frame's solution (each field gains a leading frame axis from
    :meth:`StaticOptimization.solve_trajectory`).

    Attributes:
        activation: Each actuator's activation (control for a non-muscle actuator), in
            ``StaticOptimization.actuators`` order.
        force: Each actuator's force (tension of a muscle, ``activation x optimal force``
            of a coordinate actuator).
        residual: The generalized forces left unproduced on the free coordinates (N m or
            N): zero where the actuators produce the target accelerations.
        converged: Whether ``|residual|`` is within the solver's tolerance: False where the
            model is too weak for the motion (activations then sit on their bounds), as
            OpenSim's optimizer fails there.
        objective: ``sum_j |a_j|^p`` (OpenSim's "performance").
        generalized_forces: What the actuators must supply on the free coordinates
            (``N^T tau``; inverse dynamics with the actuators off), the scale of
            ``residual``.
    """

    activation: Float[Array, " na"]
    force: Float[Array, " na"]
    residual: Float[Array, " nfree"]
    converged: Bool[Array, ""]
    objective: Float[Array, ""]
    generalized_forces: Float[Array, " nfree"]


class StaticOptimization:
    """OpenSim's ``StaticOptimization``: least-cost activations for given accelerations.

    Args:
        system: The realized System (its actuators: ``Force.CoordinateActuator`` and
            muscle (``sj.Muscle``: any model); a disabled one is left out, as OpenSim removes
            it).
        activation_exponent: ``p`` of the cost ``sum |a|^p`` (OpenSim's default 2; more
            than 1).
        use_muscle_physiology: A muscle's force per unit activation from its
            force-length and force-velocity curves at the State (True, OpenSim's
            default), or its max isometric force.
        min_control: Lower bound of each actuator's activation, in :attr:`actuators`
            order (default: OpenSim's, 0 for a muscle, unbounded otherwise).
        max_control: Upper bound likewise (default: 1 for a muscle, unbounded otherwise).
        dependent_u: The u indices of the coordinates a constraint determines (locked,
            prescribed, the dependent coordinate of a coupler; OpenSim's
            ``Coordinate.isConstrained``): their targets are not imposed. Needed, and only
            allowed, when the System has constraints; ``sj.io`` tools fill it in from the
            model.
        iterations: Newton steps on the dual (a fixed count: vmap-able and
            differentiable).
        tolerance: ``converged`` when every residual is within ``tolerance`` times
            ``1 + max |tau|``.

    Example::

        so = sj.StaticOptimization(system)
        sol = so.solve(state, udot)  # sol.activation, sol.force, sol.converged
        sols = so.solve_trajectory(state, Q, U, UDOT)  # every frame at once
    """

    def __init__(
        self,
        system: Any,
        *,
        activation_exponent: float = 2.0,
        use_muscle_physiology: bool = True,
        min_control: Any = None,
        max_control: Any = None,
        dependent_u: Sequence[int] | None = None,
        iterations: int = 40,
        tolerance: float = 1e-9,
    ):
        p = float(activation_exponent)
        if not p > 1.0 or not np.isfinite(p):
            raise ValueError(
                f"StaticOptimization: activation_exponent must be a finite number above 1 (the cost "
                f"sum |a|^p must be strictly convex), got {activation_exponent!r}"
            )
        self._system = system
        self._p = p
        self._physiology = bool(use_muscle_physiology)
        self._iterations = int(iterations)
        self._tol = float(tolerance)
        self.actuators: list[Any] = list(system.get_actuators())
        """The actuators, in control order (the order of every per-actuator array)."""
        if not self.actuators:
            raise ValueError(
                "StaticOptimization: the System has no actuators (muscles or coordinate actuators)"
            )
        subs = {id(a._subsystem) for a in self.actuators}
        if len(subs) != 1:
            raise ValueError(
                "StaticOptimization: the actuators are spread over several force subsystems; put them in one"
            )
        self._sub = self.actuators[0]._subsystem
        for a in self.actuators:
            joint = (
                isinstance(a, CoordinateActuator)
                and not isinstance(a, TendonActuator)
                and not a._dyn
                and not (a._gain_kind or a._bias_kind)  # a MuJoCo muscle's gain is not a constant
            )
            if not joint and not isinstance(a, Muscle):
                raise ValueError(
                    f"StaticOptimization: actuator {a.name!r} ({type(a).__name__}) is not one static "
                    "optimization handles: it takes muscles (sj.Muscle) and Force.CoordinateActuator "
                    "on a joint without activation dynamics (OpenSim's CoordinateActuator); disable or "
                    "remove it"
                )
        self._is_muscle = np.array([isinstance(a, Muscle) for a in self.actuators])
        na = len(self.actuators)
        lo = (
            np.where(self._is_muscle, 0.0, -np.inf) if min_control is None else np.asarray(min_control, float)
        )
        hi = np.where(self._is_muscle, 1.0, np.inf) if max_control is None else np.asarray(max_control, float)
        for name, b in (("min_control", lo), ("max_control", hi)):
            if b.shape != (na,) or np.isnan(b).any():
                raise ValueError(
                    f"StaticOptimization: {name} must hold one number per actuator ({na}, in "
                    f"StaticOptimization.actuators order), got shape {b.shape}"
                )
        bad = [a.name for a, l_, h_ in zip(self.actuators, lo, hi) if not l_ <= h_]
        if bad:
            raise ValueError(f"StaticOptimization: min_control above max_control for {', '.join(bad[:5])}")
        self._lo, self._hi = lo, hi
        self._dependent = None if dependent_u is None else np.asarray(sorted(set(dependent_u)), dtype=int)
        self._id = InverseDynamicsSolver(system)

    # ---------------------------------------------------------------------------------
    def _problem(self, state: State, udot: jax.Array, applied_body_forces: Any) -> tuple[jax.Array, ...]:
        """``(A, tau, N, f_opt, enabled)`` at one frame."""
        system = self._system
        matter = system.get_matter_subsystem()
        acts = self.actuators
        nc = len(acts)
        # the actuators off: controls zero, muscles disabled (their actuation is replaced)
        enabled = jnp.stack([~a.is_disabled(state) for a in acts])
        base = system.set_controls(state, jnp.zeros(nc, state.q.dtype))
        for a, m in zip(acts, self._is_muscle):
            if m:
                base = a.disable(base)
        sv = system.realize(base, Stage.VELOCITY)
        nu = sv.u.shape[0]
        a_full, N = self._full_accelerations(sv, udot)

        def tau_of(c: jax.Array) -> jax.Array:
            return self._id.solve(system.set_controls(sv, c), a_full, applied_body_forces=applied_body_forces)

        tau = self._id.solve(sv, a_full, applied_body_forces=applied_body_forces)
        A = jnp.zeros((nu, nc), tau.dtype)
        f_opt = jnp.ones(nc, tau.dtype)
        ctrl = np.flatnonzero(~self._is_muscle)
        if len(ctrl):  # OpenSim's override: a x optimal force (gain[0]) on the actuator's speed
            topo = acts[ctrl[0]]._body._topo(sv)
            rows = np.array([int(topo.u_start[acts[i]._body.index]) + acts[i]._which for i in ctrl])
            g0 = jnp.stack([acts[i]._get(sv, "gain")[0] for i in ctrl])
            gear = jnp.stack([acts[i]._get(sv, "gear") for i in ctrl])
            f_opt = f_opt.at[ctrl].set(g0)
            A = A.at[rows, ctrl].set(gear * g0)
        mus = np.flatnonzero(self._is_muscle)
        if len(mus):
            paths = np.array([acts[i].get_geometry_path().index for i in mus])
            every = _muscles_of(self._sub)
            pos = np.array([every.index(acts[i]) for i in mus])  # creation order -> actuator order

            if self._physiology:
                fa = calc_inextensible_tendon_active_fiber_forces(self._sub, sv, 1.0)[pos]
            else:
                fa = jnp.stack([acts[i].get_max_isometric_force(sv) for i in mus])
            dVdu = -matter.calc_path_moment_arms(sv)[paths]  # (n_muscles, nu): dV/du = dL/dq N
            A = A.at[:, mus].set(-(dVdu * fa[:, None]).T)
            f_opt = f_opt.at[mus].set(fa)
        assert A.shape == (nu, nc)
        return A, tau, N, f_opt, enabled

    def _full_accelerations(self, sv: State, udot: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The target accelerations completed by the constraints (the free coordinates'
        as given, the dependent ones as the constraints require), and ``N`` (nu, nfree)
        whose columns span the accelerations the constraints allow."""
        matter = self._system.get_matter_subsystem()
        nu = sv.u.shape[0]
        m = sum(matter.get_num_constraint_equations(sv))
        dep = self._dependent
        if dep is None or not len(dep):
            if m:
                raise ValueError(
                    "StaticOptimization: the System has constraints: pass dependent_u, the u indices of the "
                    "coordinates they determine (locked, prescribed, coupled; sj.io's tools fill it in from "
                    "the model)"
                )
            return udot, jnp.eye(nu, dtype=udot.dtype)
        if np.any((dep < 0) | (dep >= nu)):
            raise ValueError(
                f"StaticOptimization: dependent_u must be u indices in [0, {nu}), got {dep.tolist()}"
            )
        if len(dep) != m:
            raise ValueError(
                f"StaticOptimization: the System's constraints have {m} equations but dependent_u names "
                f"{len(dep)} coordinates; static optimization needs one dependent coordinate per equation "
                "(closed loops other than couplers and locks are not supported)"
            )
        free = np.setdiff1d(np.arange(nu), dep)
        G, b = matter.calc_g_and_b(sv)
        Gd, Gf = G[:, dep], G[:, free]
        X = jnp.linalg.solve(Gd, jnp.concatenate([(b - Gf @ udot[free])[:, None], Gf], axis=1))
        a_full = udot.at[dep].set(X[:, 0])
        N = jnp.zeros((nu, len(free)), udot.dtype).at[free, jnp.arange(len(free))].set(1.0)
        N = N.at[dep].set(-X[:, 1:])
        return a_full, N

    def equations(
        self, state: State, udot: Any, applied_body_forces: Any = None
    ) -> tuple[Float[Array, "nfree na"], Float[Array, " nfree"], Float[Array, " na"]]:
        """The frame's problem: ``(C, d, f)`` with ``C a = d`` the acceleration
        constraints on the free coordinates in generalized-force form (``C = N^T A``,
        ``d = N^T tau``) and ``f`` each actuator's force per unit activation."""
        a_t = jnp.asarray(udot, dtype=state.u.dtype)
        if a_t.shape != state.u.shape:
            raise ValueError(f"StaticOptimization: udot must have shape {state.u.shape}, got {a_t.shape}")
        A, tau, N, f_opt, _ = self._problem(state, a_t, applied_body_forces)
        return N.T @ A, N.T @ tau, f_opt

    def solve(self, state: State, udot: Any, applied_body_forces: Any = None) -> StaticOptimizationSolution:
        """The least-cost activations at ``state`` (q, u, parameters) for the target
        accelerations ``udot`` (nu,) (the dependent coordinates' entries are ignored),
        with measured loads ``applied_body_forces`` (nb, 6) as in
        ``InverseDynamicsSolver.solve``."""
        a_t = jnp.asarray(udot, dtype=state.u.dtype)
        if a_t.shape != state.u.shape:
            raise ValueError(f"StaticOptimization: udot must have shape {state.u.shape}, got {a_t.shape}")
        A, tau, N, f_opt, enabled = self._problem(state, a_t, applied_body_forces)
        C = N.T @ A
        d = N.T @ tau
        lo = jnp.where(enabled, jnp.asarray(self._lo, C.dtype), 0.0)
        hi = jnp.where(enabled, jnp.asarray(self._hi, C.dtype), 0.0)
        act = solve_least_activation(C, d, lo, hi, self._p, self._iterations)
        residual = C @ act - d
        scale = 1.0 + jnp.max(jnp.abs(d), initial=0.0)
        converged = jnp.all(jnp.abs(residual) <= self._tol * scale)
        return StaticOptimizationSolution(
            activation=act,
            force=act * f_opt,
            residual=residual,
            converged=converged,
            objective=jnp.sum(jnp.abs(act) ** self._p),
            generalized_forces=d,
        )

    def solve_trajectory(
        self, state: State, q: Any, u: Any, udot: Any, applied_body_forces: Any = None
    ) -> StaticOptimizationSolution:
        """:meth:`solve` at every frame at once (one batched call): ``q`` (T, nq), ``u``
        and ``udot`` (T, nu), ``applied_body_forces`` (T, nb, 6) or None."""
        return over_frames(self.solve, state, q, u, udot, applied_body_forces)


def solve_least_activation(
    C: jax.Array, d: jax.Array, lo: jax.Array, hi: jax.Array, p: float, iterations: int
) -> jax.Array:
    """``argmin sum |a|^p`` subject to ``C a = d`` and ``lo <= a <= hi``, by damped Newton
    steps on the concave dual ``g(lam) = min_a sum |a|^p - lam^T (C a - d)``, whose
    minimiser is ``a_j = clip(sign(v_j) (|v_j| / p)^(1/(p-1)), lo_j, hi_j)`` with
    ``v = C^T lam``. Each step tries step lengths ``1, 1/2, ..., 2^-23`` (and 0) and keeps
    the best dual value, so the dual never decreases. Where the constraints cannot be met
    within the bounds the dual grows without bound and the residual stays."""
    e = 1.0 / (p - 1.0)
    dt = C.dtype
    eps = jnp.finfo(dt).eps

    def act(v: jax.Array) -> tuple[jax.Array, jax.Array]:
        base = jnp.abs(v) / p
        safe = jnp.where(base > 0, base, 1.0)
        a = jnp.where(base > 0, jnp.sign(v) * safe**e, 0.0)
        inside = (a >= lo) & (a <= hi)  # on a bound counts as inside: Newton can leave it
        # da/dv inside the bounds (p = 2: 1/2; infinite at v = 0 for p > 2: capped)
        at_zero = 0.0 if e > 1.0 else (1.0 / p if e == 1.0 else 1.0 / eps)
        slope = jnp.minimum(jnp.where(base > 0, e / p * safe ** (e - 1.0), at_zero), 1.0 / eps)
        return jnp.clip(a, lo, hi), jnp.where(inside, slope, 0.0)

    def dual(lam: jax.Array) -> jax.Array:
        a, _ = act(C.T @ lam)
        return jnp.sum(jnp.abs(a) ** p) - lam @ (C @ a - d)

    scale = jnp.max(jnp.sum(C * C, axis=1), initial=0.0)
    mu = (1e-13 * scale + jnp.finfo(dt).tiny).astype(dt)
    steps = jnp.concatenate([2.0 ** -jnp.arange(24, dtype=dt), jnp.zeros(1, dt)])

    def step(lam: jax.Array, _: Any) -> tuple[jax.Array, None]:
        a, s = act(C.T @ lam)
        r = d - C @ a
        H = (C * s[None, :]) @ C.T + mu * jnp.eye(C.shape[0], dtype=dt)
        delta = jnp.linalg.solve(H, r)
        vals = jax.vmap(lambda t: dual(lam + t * delta))(steps)
        vals = jnp.where(jnp.isfinite(vals), vals, -jnp.inf)
        best = steps[jnp.argmax(vals)]
        return lam + best * delta, None

    lam0 = jnp.zeros(C.shape[0], dt)
    lam, _ = jax.lax.scan(step, lam0, None, length=iterations)
    return act(C.T @ lam)[0]
