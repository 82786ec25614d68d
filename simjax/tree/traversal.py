"""Tree passes. The ONLY module that knows how the tree is traversed.

Kinematics are expressed in Ground axes about Ground's origin, so every pass except the
composition of transforms is a plain sum over ancestors (outward) or descendants
(inward). Small trees do those sums as one dense matmul with a static 0/1 ancestor
matrix; large trees use ``lax.scan`` over depth levels padded to a common width, where
padding writes to a scratch "sink" row ``nb``. Either way compile time does not grow with
depth (no Python loop over bodies or levels in traced code).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from ..model.topology import Topology

# Above this many bodies the O(nb^2) dense ancestor sums give way to level scans. The
# choice is made per call from the (static) topology, so it is part of what jit traces.
DENSE_MAX_BODIES = 160


def _use_dense(topo: Topology, dense: bool | None) -> bool:
    return topo.nb <= DENSE_MAX_BODIES if dense is None else bool(dense)


def _pad(x: jax.Array, row: jax.Array) -> jax.Array:
    return jnp.concatenate([x, row[None]], axis=0)


def compose_outward(topo: Topology, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Ground poses ``X_GB = X_GP X_PB`` root to leaves. Inputs/outputs (nb, 3, 3), (nb, 3).

    Row 0 of the inputs (Ground) is ignored; Ground's pose is the identity. Two ways, chosen
    from the (static) topology (``Topology.compose_by_doubling``): by pointer doubling
    (``_compose_doubling``: a few rounds, no loop) when that at most doubles the number of
    pose products a pass over the depth levels makes (padded), else by a ``lax.scan`` over
    the levels (``_compose_levels``; deep chains, where doubling would multiply the work).
    """
    if topo.compose_by_doubling:
        return _compose_doubling(topo, R_PB, p_PB)
    return _compose_levels(topo, R_PB, p_PB)


def _compose_doubling(topo: Topology, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``compose_outward`` by pointer doubling (``topo.jumps``): in round k every body
    deeper than ``2**k`` composes its pose relative to its ``2**k``-th ancestor with that
    ancestor's, so ``ceil(log2(depth))`` rounds of one gather and one product replace a
    sequential pass over the levels, whose iterations cost far more than their arithmetic
    at small batches (a single-state time step). The products associate differently from
    the sequential pass (round-off only)."""
    dt = p_PB.dtype
    # X = [R | p] (nb, 3, 4): X_GB = X_GA X_AB is [R_GA R_AB | p_GA + R_GA p_AB].
    X = jnp.concatenate([R_PB, p_PB[:, :, None]], axis=-1)
    X = jnp.concatenate([jnp.eye(3, 4, dtype=dt)[None], X[1:]], axis=0)
    last = (np.arange(4) == 3)[None, None]
    for jump in np.asarray(topo.jumps):
        idx = np.nonzero(jump)[0]
        Xa = X[jump[idx]]
        # The bodies that move on this round take their new row from the products' rows
        # (a concatenation and a static gather, which XLA fuses; no scatter).
        rows = np.arange(len(jump))
        rows[idx] = len(jump) + np.arange(len(idx))
        Xn = sp.small_matmul(Xa[..., :3], X[idx]) + jnp.where(last, Xa, 0.0)
        X = jnp.concatenate([X, Xn])[rows]
    return X[..., :3], X[..., 3]


def _compose_levels(topo: Topology, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``compose_outward`` by a ``lax.scan`` over the depth levels (padded to a common
    width; padding writes to the sink row)."""
    nb = topo.nb
    dt = p_PB.dtype
    eye = jnp.eye(3, dtype=dt)
    R = jnp.broadcast_to(eye, (nb + 1, 3, 3))
    p = jnp.zeros((nb + 1, 3), dt)
    if nb == 1:
        return R[:1], p[:1]
    # Sink row: identity (valid values: padded lanes are differentiated too).
    R_loc = _pad(R_PB, eye)
    p_loc = _pad(p_PB, jnp.zeros(3, dt))
    body, par = topo.levels

    def step(carry, slots):
        R, p = carry
        b, pa = slots
        Rp, pp = R[pa], p[pa]
        Rn = jnp.einsum("wij,wjk->wik", Rp, R_loc[b])
        pn = pp + jnp.einsum("wij,wj->wi", Rp, p_loc[b])
        return (R.at[b].set(Rn), p.at[b].set(pn)), None

    (R, p), _ = jax.lax.scan(step, (R, p), (np.asarray(body), np.asarray(par)))
    return R[:nb], p[:nb]


def _body_matmul(A: np.ndarray, x: jax.Array) -> jax.Array:
    """``A @ x`` over the body axis (the first) of ``x``, computed with that axis last."""
    xt = jnp.moveaxis(x, 0, -1)
    return jnp.moveaxis(xt @ jnp.asarray(A.T, dtype=x.dtype), -1, 0)


def outward_sum(topo: Topology, x: jax.Array, dense: bool | None = None) -> jax.Array:
    """``out[b] = sum of x[a]`` over a = b and its ancestors (Ground excluded). x: (nb, ...).

    ``dense``: one matmul with the 0/1 ancestor matrix (True) or a scan over depth levels
    (False); by default dense up to ``DENSE_MAX_BODIES`` bodies."""
    nb = topo.nb
    if _use_dense(topo, dense):
        return _body_matmul(np.asarray(topo.ancestor), x)
    body, par = topo.levels
    xp = _pad(x, jnp.zeros_like(x[0]))
    out = jnp.zeros_like(xp)

    def step(out, slots):
        b, pa = slots
        return out.at[b].set(out[pa] + xp[b]), None

    out, _ = jax.lax.scan(step, out, (np.asarray(body), np.asarray(par)))
    return out[:nb].at[0].set(0)


def inward_sum(topo: Topology, x: jax.Array, dense: bool | None = None) -> jax.Array:
    """``out[b] = sum of x[c]`` over c = b and its descendants. x: (nb, ...).

    ``out[0]`` (Ground) is the sum over every body. ``dense`` as in ``outward_sum``.
    """
    nb = topo.nb
    if _use_dense(topo, dense):
        return _body_matmul(topo.inward_ancestor, x)
    body, par = topo.levels
    out = _pad(x, jnp.zeros_like(x[0]))

    def step(out, slots):
        b, pa = slots
        return out.at[pa].add(out[b] * (b < nb).reshape((-1,) + (1,) * (x.ndim - 1))), None

    out, _ = jax.lax.scan(step, out, (np.asarray(body)[::-1], np.asarray(par)[::-1]))
    return out[:nb]


def gather_dofs(topo: Topology, x: jax.Array) -> jax.Array:
    """Per-body array (nb, ...) -> per-dof array (nu, ...) of each dof's body."""
    return x[np.asarray(topo.dof_body)]


def sum_dofs(topo: Topology, x: jax.Array) -> jax.Array:
    """Per-dof array (nu, ...) -> per-body sums (nb, ...)."""
    return jax.ops.segment_sum(x, np.asarray(topo.dof_body), num_segments=topo.nb)
