"""What every force kernel shares: the base kernel, a group's parameters and weights, and
the evaluation of one record (``model.ForceGroup``) or of one of its elements.

A kernel is a frozen, field-less object (one per force kind, e.g.
``gravity.UniformGravity()``) whose methods take a group's stacked Instance parameters
``P`` (one row per element, read from the State), a read-only ``Context``, the group's
static data ``S`` (one entry per element, from the record) and, for forces, the weights
``w`` (each element's ``enabled`` flag, zero but for one element when one is asked for).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ... import _spatial as sp
from ...model.context import Context
from ...model.model import ForceGroup

Params = dict[str, jax.Array]


@dataclass(frozen=True)
class ForceKernel:
    """The equations of one force kind over a group of its elements (one evaluation per
    group, the elements stacked). Override ``calc`` and, where the kind has them,
    ``potential``, ``calc_moving`` and ``calc_zdot``."""

    def calc(
        self, P: Params, ctx: Context, S: tuple, w: jax.Array
    ) -> tuple[jax.Array | None, jax.Array | None]:
        """Body forces (nb, 6) and mobility forces (nu,) of the group, each element's scaled
        by its weight; None for a part the kind does not apply."""
        return None, None

    def calc_moving(self, P: Params, ctx: Context, S: tuple, w: jax.Array) -> jax.Array | None:
        """The group's body forces about Ground's origin on the moving rows (welded bodies'
        folded into their moving ancestor's), (nm, 6), for kinds with a cheaper form there
        than their per-body forces (``AppliedForces.moving_O``); None for the others."""
        return None

    def potential(self, P: Params, ctx: Context, S: tuple) -> jax.Array:
        """Potential energy per element (n,), or one value for the whole group, unweighted."""
        return jnp.zeros((), ctx.state.q.dtype)

    def calc_zdot(self, P: Params, ctx: Context, S: tuple) -> jax.Array | None:
        """Rates of the group's auxiliary variables (its subsystem's z), or None."""
        return None


def group_params(ctx: Context, grp: ForceGroup) -> Params:
    """The group's stacked Instance parameters, by name (``instance[sub]["prefix.name"]``)."""
    inst = ctx.state.instance[grp.subsystem]
    return {name: inst[f"{grp.prefix}.{name}"] for name in grp.params}


def weights(P: Params, only: int | None) -> jax.Array:
    """Each element's ``enabled`` flag (n,); zero but for element ``only`` when given."""
    w = P["enabled"]
    if only is not None:
        w = w * (jnp.arange(w.shape[0]) == only)
    return w


def calc_group(ctx: Context, grp: ForceGroup, only: int | None) -> tuple[jax.Array, jax.Array]:
    """Body forces (nb, 6) and mobility forces (nu,) of a group (or of its element ``only``)."""
    P = group_params(ctx, grp)
    F, tau = grp.kernel.calc(P, ctx, grp.statics, weights(P, only))
    dt = ctx.state.q.dtype
    if F is None:
        F = jnp.zeros((ctx.num_bodies, 6), dt)
    if tau is None:
        tau = jnp.zeros(ctx.nu, dt)
    return F, tau


def calc_group_moving(ctx: Context, grp: ForceGroup, only: int | None) -> jax.Array | None:
    """The kernel's ``calc_moving`` of a group (or of one element); None when it has none."""
    P = group_params(ctx, grp)
    return grp.kernel.calc_moving(P, ctx, grp.statics, weights(P, only))


def potential_group(ctx: Context, grp: ForceGroup, only: int | None) -> jax.Array:
    """Potential energy of a group (or of its element ``only``)."""
    P = group_params(ctx, grp)
    w = weights(P, only)
    pe = grp.kernel.potential(P, ctx, grp.statics)
    return jnp.sum(w * pe) if jnp.ndim(pe) else pe * jnp.sum(w)


def calc_group_zdot(ctx: Context, grp: ForceGroup) -> jax.Array | None:
    """The kernel's ``calc_zdot`` of a group (its subsystem's z rates), or None."""
    return grp.kernel.calc_zdot(group_params(ctx, grp), ctx, grp.statics)


# ------------------------------------------------------------------------- shared helpers


def scatter_point_forces(nb: int, bodies: np.ndarray, r_G: jax.Array, f: jax.Array) -> jax.Array:
    """Point forces ``f`` (n, 3) at offsets ``r_G`` from each body origin -> (nb, 6)."""
    F = jnp.concatenate([sp.cross(r_G, f), f], axis=1)
    return jnp.zeros((nb, 6), f.dtype).at[np.asarray(bodies)].add(F)


def no_moving_forces(ctx: Context) -> jax.Array:
    """Zero forces on the moving rows, (nm, 6): for kinds with mobility forces alone."""
    topo = ctx._model.topology(ctx.state.use_euler_angles)
    return jnp.zeros((topo.moving_tree.nb, 6), ctx.state.q.dtype)


def mobility_slots(ctx: Context, S: tuple) -> tuple[np.ndarray, np.ndarray]:
    """q and u indices of each element's ``(body, which)`` (the first two statics)."""
    topo = ctx._model.topology(ctx.state.use_euler_angles)
    bw = np.asarray([s[:2] for s in S], dtype=int).reshape(-1, 2)
    return topo.q_start[bw[:, 0]] + bw[:, 1], topo.u_start[bw[:, 0]] + bw[:, 1]


def mobility_forces(ctx: Context, ui: np.ndarray, f: jax.Array) -> jax.Array:
    """Generalized forces ``f`` (n,) added on speeds ``ui`` -> (nu,)."""
    return jnp.zeros(ctx.nu, f.dtype).at[ui].add(f)
