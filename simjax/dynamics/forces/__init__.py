"""Applied forces, potential energy and z derivatives: every force element and subsystem.

Force elements are evaluated one group at a time (``model.ForceGroup``: one kind's elements
in one subsystem, vectorised) by their kind's kernel, the equations of each family in a
module of this package: ``gravity``, ``springs`` (two-point, one-body and mobility springs,
dampers and constant forces), ``limits`` (``CoordinateLimitForce``), ``bushing``,
``actuators`` (``CoordinateActuator``), ``muscles`` (``DeGrooteFregly2016Muscle``),
``contact`` (``HuntCrossleyForce``, ``SmoothSphereHalfSpaceForce``), ``custom``
(``DiscreteForces``, ``Custom``);
``kernel`` holds the base and the evaluation of one group. User force subsystems are
called once each with a read-only :class:`~simjax.model.context.Context`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ... import _spatial as sp
from ..._stage import Stage
from ...model.context import Context
from ...model.model import Model
from ...model.state import State
from ...model.topology import Topology
from ...tree import traversal as _tree
from .kernel import calc_group, calc_group_moving, calc_group_zdot, potential_group


class AppliedForces(NamedTuple):
    """The applied forces of every force element and subsystem, summed.

    Attributes:
        body: Body forces in Simbody's convention, ``[torque about the body origin; force]``
            in Ground (nb, 6): what the Dynamics cache holds.
        mobility: Mobility forces (nu,).
        moving_O: The same body forces about Ground's origin, each welded body's added into
            its moving ancestor's row (``traversal.fold_welded``), (nm, 6): what the
            dynamics passes read. Force kinds with a cheaper form on those rows (gravity,
            from the folded mass properties) give it directly, so that XLA drops their
            per-body forces where only these are read.
    """

    body: jax.Array
    mobility: jax.Array
    moving_O: jax.Array


def body_forces_to_origin(F_B: jax.Array, p_GB: jax.Array) -> jax.Array:
    """Simbody body forces ``[torque about B origin; force]`` -> about Ground's origin."""
    torque, force = jnp.split(F_B, 2, axis=1)
    return jnp.concatenate([torque + sp.cross(p_GB, force), force], axis=1)


def fold_body_forces(topo: Topology, F_B: jax.Array, p_GB: jax.Array) -> jax.Array:
    """Simbody body forces (nb, 6) -> about Ground's origin on the moving rows (nm, 6), each
    welded body's added into its moving ancestor's (what the dynamics passes read)."""
    return _tree.fold_welded(topo, body_forces_to_origin(F_B, p_GB))


def calc_forces(model: Model, state: State) -> AppliedForces:
    """Sum of every force element and force subsystem (needs Position)."""
    topo = model.topology(state.use_euler_angles)
    dt = state.q.dtype if jnp.issubdtype(state.q.dtype, jnp.floating) else jnp.result_type(float)
    F = jnp.zeros((topo.nb, 6), dt)
    tau = jnp.zeros(topo.nu, dt)
    # Body forces without a form of their own on the moving rows: folded there at the end
    # (None while there are none: XLA cannot drop products with zeros).
    F_rest: jax.Array | None = None
    F_moving = jnp.zeros((topo.moving_tree.nb, 6), dt)
    for grp in model.force_groups:
        ctx = Context(model, state, grp.subsystem)
        with jax.named_scope(f"force_{type(grp.kernel).__name__}"):
            f, t = calc_group(ctx, grp, None)
            f_moving = calc_group_moving(ctx, grp, None)
        F = F + f
        tau = tau + t
        if f_moving is not None:
            F_moving = F_moving + f_moving
        else:
            F_rest = f if F_rest is None else F_rest + f
    for sub in model.force_subsystems:
        out: Any = sub.calc_force(Context(model, state, sub.name))
        fs, ts = out if out is not None else (None, None)
        if fs is not None:
            fs = jnp.asarray(fs, dt).reshape(topo.nb, 6)
            F, F_rest = F + fs, fs if F_rest is None else F_rest + fs
        if ts is not None:
            tau = tau + jnp.asarray(ts, dt).reshape(topo.nu)
    if F_rest is not None:
        F_moving = F_moving + fold_body_forces(topo, F_rest, state.position_cache.p_GB)
    return AppliedForces(F, tau, F_moving)


def calc_potential_energy(model: Model, state: State) -> jax.Array:
    """Potential energy of every force element and subsystem (needs Position)."""
    state.require(Stage.POSITION, "potential energy")
    pe = jnp.zeros((), state.q.dtype)
    for grp in model.force_groups:
        pe = pe + potential_group(Context(model, state, grp.subsystem), grp, None)
    for sub in model.subsystems:
        pe = pe + jnp.asarray(sub.calc_potential_energy(Context(model, state, sub.name)))
    return pe


def calc_zdot(model: Model, state: State) -> jax.Array:
    """Derivatives of every subsystem's block of z: a force subsystem's from its force
    groups' kernels (actuators' activations, muscles' states: each kind's rates over the
    whole block, zero outside its own slots, summed), any other's from its ``calc_zdot``."""
    parts = [jnp.zeros(0, state.z.dtype)]
    for name, z0 in model.z_decl:
        ctx = Context(model, state, name)
        zd = None
        for grp in model.force_groups:
            if grp.subsystem == name:
                zg = calc_group_zdot(ctx, grp)
                if zg is not None:
                    zd = zg if zd is None else zd + zg
        if zd is None:
            zd = model.subsystem_by_name(name).calc_zdot(ctx)
        parts.append(jnp.asarray(zd, state.z.dtype).reshape(len(z0)))
    return jnp.concatenate(parts)
