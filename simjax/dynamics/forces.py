"""Applied forces, potential energy and z derivatives: every force element and subsystem.

Force elements are evaluated one kind at a time (a whole group vectorised); user force
subsystems are called once each with a read-only :class:`~simjax.model.context.Context`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._stage import Stage
from ..model.context import Context
from ..model.model import Model
from ..model.state import State


def calc_forces(model: Model, state: State) -> tuple[jax.Array, jax.Array]:
    """Sum of every force element and force subsystem: body forces (nb, 6) and mobility
    forces (nu,)."""
    topo = model.topology(state.use_euler_angles)
    dt = state.q.dtype if jnp.issubdtype(state.q.dtype, jnp.floating) else jnp.result_type(float)
    F = jnp.zeros((topo.nb, 6), dt)
    tau = jnp.zeros(topo.nu, dt)
    for grp in model.force_groups:
        with jax.named_scope(f"force_{grp.cls.__name__}"):
            f, t = grp.cls.calc_group(Context(model, state, grp.subsystem), grp, None)
        F = F + f
        tau = tau + t
    for sub in model.force_subsystems:
        out: Any = sub.calc_force(Context(model, state, sub.name))
        fs, ts = out if out is not None else (None, None)
        if fs is not None:
            F = F + jnp.asarray(fs, dt).reshape(topo.nb, 6)
        if ts is not None:
            tau = tau + jnp.asarray(ts, dt).reshape(topo.nu)
    return F, tau


def calc_potential_energy(model: Model, state: State) -> jax.Array:
    """Potential energy of every force element and subsystem (needs Position)."""
    state.require(Stage.POSITION, "potential energy")
    pe = jnp.zeros((), state.q.dtype)
    for grp in model.force_groups:
        pe = pe + grp.cls.potential_group(Context(model, state, grp.subsystem), grp, None)
    for sub in model.subsystems:
        pe = pe + jnp.asarray(sub.calc_potential_energy(Context(model, state, sub.name)))
    return pe


def calc_zdot(model: Model, state: State) -> jax.Array:
    """Derivatives of every subsystem's block of z."""
    parts = [jnp.zeros(0, state.z.dtype)]
    for name, z0 in model.z_decl:
        sub = model.subsystem_by_name(name)
        zd = sub.calc_zdot(Context(model, state, name))
        parts.append(jnp.asarray(zd, state.z.dtype).reshape(len(z0)))
    return jnp.concatenate(parts)
