"""``LinearBushing``: a six-dof linear spring-damper between frame F on body 1 and frame M
on body 2.

Coordinates are body-fixed X-Y-Z angles of ``R_FM`` and ``p_FM`` in F (as Simbody's
Bushing mobilizer); generalized force ``-(k q + c qdot)`` per coordinate, mapped to the two
bodies through the exact kinematics. Energy ``sum k q^2 / 2``. Parameters ``XF_R``,
``XF_p``, ``XM_R``, ``XM_p`` (the frames on their bodies), ``stiffness`` and ``damping``
(``[rx, ry, rz, px, py, pz]``); statics per element ``(body1, body2)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ... import _spatial as sp
from ...model.context import Context
from ...model.mobilizers import velocity_jacobian
from .kernel import ForceKernel, Params


def frames(P: Params, ctx: Context, S: tuple):
    """``(b, R_GF, p_GF, p_GM, q)``: body pairs, frame F in Ground, M's origin in Ground and
    the six bushing coordinates (n, 6)."""
    b = np.asarray(S, dtype=int).reshape(-1, 2)
    pc = ctx.state.position_cache
    R_GF = jnp.einsum("nij,njk->nik", pc.R_GB[b[:, 0]], P["XF_R"])
    p_GF = pc.p_GB[b[:, 0]] + jnp.einsum("nij,nj->ni", pc.R_GB[b[:, 0]], P["XF_p"])
    R_GM = jnp.einsum("nij,njk->nik", pc.R_GB[b[:, 1]], P["XM_R"])
    p_GM = pc.p_GB[b[:, 1]] + jnp.einsum("nij,nj->ni", pc.R_GB[b[:, 1]], P["XM_p"])
    R_FM = jnp.einsum("nji,njk->nik", R_GF, R_GM)
    p_FM = jnp.einsum("nji,nj->ni", R_GF, p_GM - p_GF)
    q = jnp.concatenate([jax.vmap(sp.rot_to_body_fixed_xyz)(R_FM), p_FM], axis=1)
    return b, R_GF, p_GF, p_GM, q


def _jacobian(q: jax.Array) -> jax.Array:
    def X(qq):
        return sp.body_fixed(qq[:3], "xyz"), qq[3:]

    return velocity_jacobian(X, q)


@dataclass(frozen=True)
class LinearBushing(ForceKernel):
    """The module's equations over a group of bushings."""

    def calc(self, P, ctx, S, w):
        b, R_GF, p_GF, p_GM, q = frames(P, ctx, S)
        V = ctx.V_GB
        w1, w2 = V[b[:, 0], :3], V[b[:, 1], :3]
        vM = V[b[:, 1], 3:] + sp.cross(w2, p_GM - ctx.p_GB[b[:, 1]])
        vF_at_M = V[b[:, 0], 3:] + sp.cross(w1, p_GM - ctx.p_GB[b[:, 0]])
        # Velocity of M relative to F as seen in F: [w2 - w1; d/dt_F p_FM], in F axes.
        w_rel = jnp.einsum("nji,nj->ni", R_GF, w2 - w1)
        v_rel = jnp.einsum("nji,nj->ni", R_GF, vM - vF_at_M)
        J = jax.vmap(_jacobian)(q)
        qdot = jnp.linalg.solve(J, jnp.concatenate([w_rel, v_rel], axis=1)[..., None])[..., 0]
        fq = -(P["stiffness"] * q + P["damping"] * qdot) * w[:, None]
        # Spatial force on M (about M's origin, in F) with the same power: F = J^-T fq.
        FM = jnp.linalg.solve(jnp.swapaxes(J, 1, 2), fq[..., None])[..., 0]
        tq = jnp.einsum("nij,nj->ni", R_GF, FM[:, :3])
        fo = jnp.einsum("nij,nj->ni", R_GF, FM[:, 3:])
        nb = ctx.num_bodies
        F2 = jnp.concatenate([tq + sp.cross(p_GM - ctx.p_GB[b[:, 1]], fo), fo], axis=1)
        F1 = jnp.concatenate([-tq - sp.cross(p_GM - ctx.p_GB[b[:, 0]], fo), -fo], axis=1)
        F = jnp.zeros((nb, 6), fo.dtype).at[b[:, 1]].add(F2).at[b[:, 0]].add(F1)
        return F, None

    def potential(self, P, ctx, S):
        _, _, _, _, q = frames(P, ctx, S)
        return 0.5 * jnp.sum(P["stiffness"] * q**2, axis=1)
