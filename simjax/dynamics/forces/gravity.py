"""Gravity: ``UniformGravity`` (one vector for every body) and ``Gravity`` (a magnitude
along a direction, with per-body exclusions).

Body forces are ``[torque about the body origin; force]`` in Ground. Both kinds also give
their forces on the moving rows directly from the folded mass properties
(``calc_moving``), so a welded body costs nothing per state.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from ... import _spatial as sp
from ...model.context import Context
from ...tree import traversal as _tree
from .kernel import ForceKernel


def masses(ctx: Context, mask: jax.Array | None) -> jax.Array:
    """Each body's mass as gravity sees it (nb,): zero for Ground and excluded bodies."""
    m = ctx.state.instance["matter"]["mass"]
    if mask is not None:
        m = m * mask
    return m.at[0].set(0.0)


def body_forces(ctx: Context, g: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Gravity ``m g`` at each body's mass centre, as body forces (nb, 6)."""
    pc = ctx.state.position_cache
    m = masses(ctx, mask)
    f = m[:, None] * g[None, :]
    r = pc.com_G - pc.p_GB
    return jnp.concatenate([sp.cross(r, f), f], axis=1)


def moving_forces(ctx: Context, g: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Gravity about Ground's origin on the moving rows, (nm, 6): ``[h x g; m g]`` with ``m``
    and ``h`` (the first moment ``sum m c`` in Ground) of each moving body and the welded
    bodies folded into it. Their sums in the moving body's frame depend on no coordinate
    (computed once for a batch sharing the model), so a welded body costs nothing per state."""
    pc = ctx.state.position_cache
    topo = ctx._model.topology(ctx.state.use_euler_angles)
    m = masses(ctx, mask)
    mass = _tree.fold_welded(topo, m)
    h_M = _tree.fold_welded(topo, m[:, None] * pc.com_M)
    h = mass[:, None] * pc.moving_p_GB + jnp.einsum("bij,bj->bi", pc.moving_R_GB, h_M)
    return jnp.concatenate([sp.cross(h, g), mass[:, None] * g[None, :]], axis=1)


def potential_energy(
    ctx: Context, g: jax.Array, h0: jax.Array, mask: jax.Array | None, scale_zero: bool = True
) -> jax.Array:
    """``-sum m (g . p_com) - sum m h``, ``h = |g| h0`` (``h0`` itself unless ``scale_zero``)."""
    pc = ctx.state.position_cache
    m = masses(ctx, mask)
    h = sp.safe_norm(g) * h0 if scale_zero else h0
    return -jnp.sum(m * (pc.com_G @ g)) - jnp.sum(m) * h


@dataclass(frozen=True)
class UniformGravity(ForceKernel):
    """Parameters ``g`` (n, 3), ``zero_height`` (n,): the weighted sum of the elements' ``g``
    acts on every mobilized body; energy ``-sum m (g . p_com + zero_height)`` per element
    (Simbody's formula: the zero height is not scaled by ``|g|``)."""

    @staticmethod
    def _g(P, w):
        return jnp.einsum("n,ni->i", w, P["g"])

    def calc(self, P, ctx, S, w):
        return body_forces(ctx, self._g(P, w), None), None

    def calc_moving(self, P, ctx, S, w):
        return moving_forces(ctx, self._g(P, w), None)

    def potential(self, P, ctx, S):
        return jax.vmap(lambda g, h: potential_energy(ctx, g, h, None, scale_zero=False))(
            P["g"], P["zero_height"]
        )


@dataclass(frozen=True)
class Gravity(ForceKernel):
    """One element per group: ``magnitude`` along ``direction`` on the bodies whose
    ``included`` entry (nb,) is 1; energy with the zero height scaled by the magnitude."""

    def calc(self, P, ctx, S, w):
        g = w[0] * P["magnitude"][0] * P["direction"][0]
        return body_forces(ctx, g, P["included"][0]), None

    def calc_moving(self, P, ctx, S, w):
        g = w[0] * P["magnitude"][0] * P["direction"][0]
        return moving_forces(ctx, g, P["included"][0])

    def potential(self, P, ctx, S):
        g = P["magnitude"][0] * P["direction"][0]
        return potential_energy(ctx, g, P["zero_height"][0], P["included"][0])[None]
