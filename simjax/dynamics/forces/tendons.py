"""Forces along MuJoCo tendons (its tendon ``stiffness``, ``springlength`` and ``damping``,
``mj_passive``): a tension ``f`` along a tendon gives the generalized force ``J^T f``.

Statics per element: the index of its tendon in the Model's ``TendonSet``. The tension
acts on the bodies through the gradient of the tendon's length with respect to each body's
pose (:func:`simjax.dynamics.tendons.tendon_body_gradients`), and on the fixed tendons'
coordinates directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ...model.context import Context
from ...model.tendons import TendonSet
from ..tendons import fixed_terms, tendon_body_gradients, tendon_lengths
from .kernel import ForceKernel, Params


@dataclass(frozen=True)
class TendonGeometry:
    """Every tendon's length and lengthening speed (n_tendons,) at a Context, and what
    applying tensions needs: the body gradients ``G`` (n_tendons, nb, 6)."""

    length: jax.Array
    speed: jax.Array
    G: jax.Array


def tendon_geometry(tendons: TendonSet, ctx: Context) -> TendonGeometry:
    """Lengths and lengthening speeds from the State's Position and Velocity caches."""
    state = ctx.state
    topo = ctx._model.topology(state.use_euler_angles)
    pc = state.position_cache
    L, G = tendon_body_gradients(tendons, topo, state.q, pc.R_GB, pc.p_GB)
    speed = jnp.einsum("tbk,bk->t", G, ctx.V_GB)
    ten, u, coef = fixed_terms(tendons, topo)
    if len(ten):
        terms = jnp.asarray(coef, state.q.dtype) * state.u[u]
        speed = speed + jax.ops.segment_sum(terms, jnp.asarray(ten), num_segments=tendons.num_tendons)
    return TendonGeometry(L, speed, G)


def apply_tendon_tensions(
    tendons: TendonSet, ctx: Context, g: TendonGeometry, T: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Body forces (nb, 6) and mobility forces (nu,) of forces ``T`` (n_tendons,) along
    the tendons (positive lengthens): ``J^T T``."""
    topo = ctx._model.topology(ctx.state.use_euler_angles)
    F = jnp.einsum("t,tbk->bk", T, g.G)
    tau = jnp.zeros(ctx.nu, T.dtype)
    ten, u, coef = fixed_terms(tendons, topo)
    if len(ten):
        tau = tau.at[u].add(T[np.asarray(ten)] * jnp.asarray(coef, T.dtype))
    return F, tau


def _spring(P: Params, length: jax.Array) -> jax.Array:
    """The spring's force along the tendon (MuJoCo: ``k (upper - L)`` above the deadband,
    ``k (lower - L)`` below it, none inside)."""
    lo, hi = P["spring_lower"], P["spring_upper"]
    return P["stiffness"] * jnp.where(length > hi, hi - length, jnp.where(length < lo, lo - length, 0.0))


@dataclass(frozen=True)
class TendonSpringDamper(ForceKernel):
    """MuJoCo's tendon spring and damper: force ``k (l0 - L) - b dL/dt`` along the tendon,
    ``l0`` the nearer end of the ``springlength`` deadband ``[lower, upper]`` (no spring
    force inside it); potential ``k d^2 / 2`` with ``d`` the distance to the deadband."""

    def calc(self, P: Params, ctx: Context, S: tuple, w: jax.Array):
        tendons = ctx._model.tendons
        assert tendons is not None  # a tendon force's Model has its tendon
        idx = np.asarray(S, dtype=int).reshape(-1)
        g = tendon_geometry(tendons, ctx)
        f = w * (_spring(P, g.length[idx]) - P["damping"] * g.speed[idx])
        T = jnp.zeros(tendons.num_tendons, f.dtype).at[idx].add(f)
        return apply_tendon_tensions(tendons, ctx, g, T)

    def potential(self, P: Params, ctx: Context, S: tuple) -> jax.Array:
        tendons = ctx._model.tendons
        assert tendons is not None  # a tendon force's Model has its tendon
        idx = np.asarray(S, dtype=int).reshape(-1)
        state = ctx.state
        pc = state.position_cache
        topo = ctx._model.topology(state.use_euler_angles)
        length = tendon_lengths(tendons, topo, state.q, pc.R_GB, pc.p_GB)[idx]
        f = _spring(P, length)
        return 0.5 * jnp.where(
            P["stiffness"] > 0, f * f / jnp.where(P["stiffness"] > 0, P["stiffness"], 1.0), 0.0
        )
