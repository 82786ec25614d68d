"""Tree passes. The ONLY module that knows how the tree is traversed.

Kinematics are expressed in Ground axes about Ground's origin, so every pass except the
composition of transforms is a plain sum over ancestors (outward) or descendants
(inward). Those sums take one of four forms, chosen from the static topology: up to
``SUM_BY_ROWS_MAX`` bodies, each result row a sum of static slices (one fused kernel);
chains and small trees, one matmul with a static 0/1 ancestor matrix; branched trees of
``UNROLLED_MIN_BODIES`` or more, level by level, unrolled; beyond ``DENSE_MAX_BODIES``, a
``lax.scan`` over depth levels padded to a common width, where padding writes to a
scratch "sink" row ``nb``. Only the unrolled forms loop over bodies or levels in Python,
once per trace.

Welded bodies (no mobility: URDF fixed links, sensor frames) move with their parent, so the
dynamics passes run over the *moving tree* (``Topology.moving_tree``: Ground and the bodies
with mobilities): welds fold their inertias and forces into their moving ancestor's row and
read its velocity and acceleration (``compose_moving``, ``fold_welded``,
``outward_from_moving``, ``inward_to_dofs``). On TALOS (60 bodies, 33 moving) that made
forward dynamics ~25% faster; trees without welds run exactly the full-tree passes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _batching
from .. import _spatial as sp
from ..model.topology import Topology

# Above this many bodies the O(nb^2) dense ancestor sums give way to level scans. The
# choice is made per call from the (static) topology, so it is part of what jit traces.
DENSE_MAX_BODIES = 160
# Branched trees of at least this many bodies (at least two per depth level on average) sum
# level by level, unrolled (``_unrolled``); chains and small trees keep the dense product.
UNROLLED_MIN_BODIES = 12
# Dense sums over at most this many bodies are additions of rows, not a matmul (``_sum_rows``).
SUM_BY_ROWS_MAX = 12


def _use_dense(topo: Topology, dense: bool | None) -> bool:
    return topo.nb <= DENSE_MAX_BODIES if dense is None else bool(dense)


def _unrolled(topo: Topology, dense: bool | None) -> bool:
    """Whether the default sums (``dense=None``) run level by level, unrolled: one kernel per
    depth level against the dense product's ``nb^2`` work, which pays on branched trees
    (shallow for their size) and not on chains (measurements: ``benchmarks/HISTORY.md``)."""
    nb = topo.nb
    return dense is None and UNROLLED_MIN_BODIES <= nb <= DENSE_MAX_BODIES and 2 * int(topo.depth.max()) <= nb


def _linear(levels, dense):
    """``levels`` (the unrolled evaluation of a linear map) with ``dense``'s derivative, so
    derivative programs keep the dense product (compact, and its transpose is one product)."""
    return _batching.chunked_jvp(levels, lambda primals, tangents: (levels(*primals), dense(*tangents)))


def _outward_levels(topo: Topology, x: jax.Array) -> jax.Array:
    t = topo.body_tree
    take = sp.take_rows
    out = [jnp.zeros((1,) + x.shape[1:], x.dtype), take(x, t.levels[1])]
    for lev in t.levels[2:]:
        out.append(jax.lax.optimization_barrier(take(x, lev) + take(out[-1], t.pos[t.parent[lev]])))
    return take(jnp.concatenate(out), t.row)


def _inward_levels(topo: Topology, x: jax.Array) -> jax.Array:
    t = topo.body_tree
    out: list[jax.Array] = [x[:0]] * len(t.levels)
    for d in range(len(t.levels) - 1, -1, -1):
        sums = [sum((out[d + 1][t.pos[c]] for c in t.children[b]), x[b]) for b in t.levels[d]]
        out[d] = jax.lax.optimization_barrier(jnp.stack(sums))
    return sp.take_rows(jnp.concatenate(out), t.row)


def _pad(x: jax.Array, row: jax.Array) -> jax.Array:
    return jnp.concatenate([x, row[None]], axis=0)


def compose_outward(topo: Topology, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Ground poses ``X_GB = X_GP X_PB`` root to leaves. Inputs/outputs (nb, 3, 3), (nb, 3).

    Row 0 of the inputs (Ground) is ignored; Ground's pose is the identity. Two ways, chosen
    from the (static) topology (``Topology.compose_by_doubling``): by pointer doubling
    (``_compose_doubling``: a few rounds, no loop) when that at most doubles the number of
    pose products a pass over the depth levels makes (padded), else by a ``lax.scan`` over
    the levels (``_compose_levels``; deep chains, where doubling would multiply the work).
    With welded bodies, through ``compose_moving``.
    """
    if topo.has_welds:
        mv = topo.moving
        R_PM, p_PM = sp.take_rows(R_PB, mv), sp.take_rows(p_PB, mv)
        R_m, p_m, R_rel, p_rel = compose_moving(topo, R_PM, p_PM, R_PB, p_PB)
        return from_moving_poses(topo, R_m, p_m, R_rel, p_rel)
    if topo.compose_by_doubling:
        return _compose_doubling(topo, R_PB, p_PB)
    return _compose_levels(topo, R_PB, p_PB)


def compose_moving(
    topo: Topology, R_PM: jax.Array, p_PM: jax.Array, R_PW: jax.Array, p_PW: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Ground poses of the moving bodies (``Topology.moving``: (nm, 3, 3), (nm, 3)) and every
    body's pose in its nearest moving ancestor's frame ((nb, 3, 3), (nb, 3); the identity
    for moving bodies).

    ``R_PM, p_PM`` (nm, ...) are the moving bodies' poses in their parents (row 0, Ground's,
    ignored), ``R_PW, p_PW`` (nb, ...) are read at the welded bodies' rows: a weld's pose in
    its parent depends on no coordinate, so keeping those rows apart keeps the chains of
    welds out of a batch over states (computed once for a shared model). The welds compose
    first (pointer doubling along ``Topology.weld_jumps``), a moving body below a weld takes
    the chain's pose into its local one, and the moving tree composes as a tree of its own
    (``compose_outward``)."""
    dt = p_PM.dtype
    mv, wl, src = topo.moving, topo.welded, topo.weld_index
    take = sp.take_rows
    Rc = jnp.concatenate([jnp.eye(3, dtype=dt)[None], take(R_PW, wl)])
    pc = jnp.concatenate([jnp.zeros((1, 3), dt), take(p_PW, wl)])
    Rc, pc = _compose_jumps(topo.weld_jumps, Rc, pc)  # compact rows: 0, then the welded bodies
    R_rel, p_rel = take(Rc, src), take(pc, src)
    # Local poses of the moving bodies in the moving tree: through the weld chain above.
    R_loc, p_loc = R_PM, p_PM
    below = topo.below_weld
    if len(below):
        w, k = src[np.asarray(topo.parent)[below]], topo.moving_row[below]
        Rw = take(Rc, w)
        R_b = sp.small_matmul(Rw, take(R_PM, k))
        p_b = take(pc, w) + jnp.einsum("kij,kj->ki", Rw, take(p_PM, k))
        rows = np.arange(len(mv))
        rows[k] = len(mv) + np.arange(len(below))
        R_loc = take(jnp.concatenate([R_loc, R_b]), rows)
        p_loc = take(jnp.concatenate([p_loc, p_b]), rows)
    R_m, p_m = compose_outward(topo.moving_tree, R_loc, p_loc)
    return R_m, p_m, R_rel, p_rel


def from_moving_poses(
    topo: Topology, R_m: jax.Array, p_m: jax.Array, R_rel: jax.Array, p_rel: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Every body's Ground pose (nb, 3, 3), (nb, 3) from ``compose_moving``'s results: its
    moving ancestor's pose times its relative one (the moving bodies' own rows as they are)."""
    if not topo.has_welds:
        return R_m, p_m
    wl, row, src = topo.welded, topo.moving_row, topo.body_order
    take = sp.take_rows
    Ra, pa = take(R_m, row[wl]), take(p_m, row[wl])
    R_w = sp.small_matmul(Ra, take(R_rel, wl))
    p_w = pa + jnp.einsum("wij,wj->wi", Ra, take(p_rel, wl))
    # Rows back in body order: one concatenation, then static slices or one gather.
    return take(jnp.concatenate([R_m, R_w]), src), take(jnp.concatenate([p_m, p_w]), src)


def _compose_doubling(topo: Topology, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``compose_outward`` by pointer doubling (``topo.jumps``): in round k every body
    deeper than ``2**k`` composes its pose relative to its ``2**k``-th ancestor with that
    ancestor's, so ``ceil(log2(depth))`` rounds of one gather and one product replace a
    sequential pass over the levels, whose iterations cost far more than their arithmetic
    at small batches (a single-state time step). The products associate differently from
    the sequential pass (round-off only)."""
    return _compose_jumps(topo.jumps, R_PB, p_PB)


def _compose_jumps(jumps: np.ndarray, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Pointer doubling along a jump table (``Topology.jumps``); row 0 is the identity."""
    dt = p_PB.dtype
    # X = [R | p] (nb, 3, 4): X_GB = X_GA X_AB is [R_GA R_AB | p_GA + R_GA p_AB].
    X = jnp.concatenate([R_PB, p_PB[:, :, None]], axis=-1)
    X = jnp.concatenate([jnp.eye(3, 4, dtype=dt)[None], X[1:]], axis=0)
    last = (np.arange(4) == 3)[None, None]
    for jump in np.asarray(jumps):
        idx = np.nonzero(jump)[0]
        Xa = sp.take_rows(X, jump[idx])
        # The bodies that move on this round take their new row from the products' rows
        # (a concatenation and static slices or a gather, which XLA fuses; no scatter).
        rows = np.arange(len(jump))
        rows[idx] = len(jump) + np.arange(len(idx))
        Xn = sp.small_matmul(Xa[..., :3], sp.take_rows(X, idx)) + jnp.where(last, Xa, 0.0)
        X = sp.take_rows(jnp.concatenate([X, Xn]), rows)
    return X[..., :3], X[..., 3]


def _compose_levels(topo: Topology, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``compose_outward`` by a ``lax.scan`` over the depth levels (padded to a common
    width; padding writes to the sink row).

    Derivatives (a custom JVP) without the scan, up to ``DENSE_MAX_BODIES`` bodies:
    ``dR_GB = A_B R_GB`` and ``dp_GB = c_B + A_B p_GB``, where ``A`` and ``c`` are sums over
    each body and its ancestors (the dense ancestor product) of ``R_GP dR_PB R_GB^-1`` and
    ``R_GP dp_PB - (R_GP dR_PB R_GB^-1) p_GB``. Each body's term is elementwise (the 3x3
    inverse by cofactors) and the sum one product, so a reverse pass transposes a product
    instead of running the scan backwards with a scatter, gathers and a stacked carry per
    level."""
    if not _use_dense(topo, None):
        return _compose_levels_scan(topo, R_PB, p_PB)
    f = jax.custom_jvp(lambda R, p: _compose_levels_scan(topo, R, p))

    @f.defjvp
    def _jvp(primals, tangents):
        (R_l, p_l), (dR_l, dp_l) = primals, tangents
        R, p = _compose_levels_scan(topo, R_l, p_l)
        R_P = sp.take_rows(R, np.maximum(np.asarray(topo.parent), 0))
        dA = jnp.einsum("bij,bjk,bkl->bil", R_P, dR_l, _inverse3(R))
        dc = jnp.einsum("bij,bj->bi", R_P, dp_l) - jnp.einsum("bij,bj->bi", dA, p)
        anc = np.asarray(topo.ancestor)
        A, c = _body_matmul(anc, dA), _body_matmul(anc, dc)
        return (R, p), (jnp.einsum("bij,bjk->bik", A, R), c + jnp.einsum("bij,bj->bi", A, p))

    return f(R_PB, p_PB)


def _inverse3(R: jax.Array) -> jax.Array:
    """Inverses of 3x3 matrices (..., 3, 3) by cofactors: elementwise, no solve."""
    r0, r1, r2 = jnp.unstack(R, axis=-2)
    C = jnp.stack([sp.cross(r1, r2), sp.cross(r2, r0), sp.cross(r0, r1)], axis=-1)  # adj(R)
    det = jnp.sum(r0 * C[..., :, 0], axis=-1)
    return C / det[..., None, None]


def _compose_levels_scan(topo: Topology, R_PB: jax.Array, p_PB: jax.Array) -> tuple[jax.Array, jax.Array]:
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
    """``A @ x`` over the body axis (the first) of ``x``, computed with that axis last; for a
    0/1 matrix of at most ``SUM_BY_ROWS_MAX`` columns, as sums of rows (``_sum_rows``)."""
    A = np.asarray(A)
    if A.shape[1] <= SUM_BY_ROWS_MAX and np.isin(A, (0, 1)).all():
        return _sum_rows(A, x)
    xt = jnp.moveaxis(x, 0, -1)
    return jnp.moveaxis(xt @ jnp.asarray(A.T, dtype=x.dtype), -1, 0)


def _sum_rows(A: np.ndarray, x: jax.Array) -> jax.Array:
    """``A @ x`` for a small static 0/1 matrix ``A``: each result row is a sum of rows of ``x``
    (one ``unstack``), and the whole one fused kernel, where XLA:CPU would hand a ``dot`` to
    Eigen at a fixed cost per call. Past about a dozen bodies the one-state program grows
    instead, hence ``SUM_BY_ROWS_MAX``. One
    ``unstack`` rather than a slice per row: reverse mode stacks the rows' cotangents once
    (``sp.cross``)."""
    zero = jnp.zeros(x.shape[1:], x.dtype)
    rows = []
    xs = jnp.unstack(x)
    for r in A:
        part = [xs[int(a)] for a in np.nonzero(r)[0]]
        rows.append(sum(part[1:], part[0]) if part else zero)
    return jnp.stack(rows)


def outward_sum(topo: Topology, x: jax.Array, dense: bool | None = None) -> jax.Array:
    """``out[b] = sum of x[a]`` over a = b and its ancestors (Ground excluded). x: (nb, ...).

    ``dense``: one matmul with the 0/1 ancestor matrix (True) or a scan over depth levels
    (False); by default level by level, unrolled, on branched trees (``_unrolled``), else
    dense up to ``DENSE_MAX_BODIES`` bodies."""
    nb = topo.nb
    if _unrolled(topo, dense):
        A = np.asarray(topo.ancestor)
        return _linear(lambda x: _outward_levels(topo, x), lambda x: _body_matmul(A, x))(x)
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
    return sp.take_rows(x, topo.dof_body)


def sum_dofs(topo: Topology, x: jax.Array) -> jax.Array:
    """Per-dof array (nu, ...) -> per-body sums (nb, ...). A body's dofs are consecutive, so
    each body's row is a sum of static slices (``_sum_rows``) and the rows one stack, a single
    elementwise kernel; a ``segment_sum`` is a scatter, which XLA:CPU runs as a loop."""
    dofs = topo.body_dofs
    A = np.zeros((topo.nb, topo.nu + 1))
    A[np.broadcast_to(np.arange(topo.nb), dofs.shape), dofs] = 1.0  # column nu: "no dof"
    return _sum_rows(A[:, : topo.nu], x)


# ----------------------------------------------------------------- the moving tree
# The dynamics passes run over ``Topology.moving_tree``: rows of "moving" arrays (nm, ...)
# are Ground and the bodies with mobilities, in body order. Welded bodies fold into their
# moving ancestor's row (inertias, forces) or read it (velocities, accelerations). Without
# welds every function here is the full-tree one and the folds are no-ops.


def moving_rows(topo: Topology, x: jax.Array) -> jax.Array:
    """Per-body array (nb, ...) -> the moving bodies' rows (nm, ...)."""
    return sp.take_rows(x, topo.moving) if topo.has_welds else x


def moving_to_bodies(topo: Topology, x: jax.Array) -> jax.Array:
    """Moving rows (nm, ...) -> per-body array (nb, ...), zero on welded bodies (for
    quantities across a body's own mobilizer, which a weld has none of)."""
    if not topo.has_welds:
        return x
    zeros = jnp.zeros((len(topo.welded),) + x.shape[1:], x.dtype)
    return sp.take_rows(jnp.concatenate([x, zeros]), topo.body_order)


def fold_welded(topo: Topology, x: jax.Array) -> jax.Array:
    """Per-body array (nb, ...) -> (nm, ...): each welded body's row added into its moving
    ancestor's. For quantities of bodies that move together, additive about Ground's
    origin: spatial inertias (their ten parameters) and forces."""
    return _body_matmul(topo.fold_welded, x) if topo.has_welds else x


def sum_moving_dofs(topo: Topology, x: jax.Array) -> jax.Array:
    """Per-dof array (nu, ...) -> per-moving-body sums (nm, ...)."""
    return sum_dofs(topo.moving_tree, x)


def outward_from_moving(topo: Topology, x: jax.Array, dense: bool | None = None) -> jax.Array:
    """``out[b]`` = sum of ``x`` over b's moving ancestors and b itself if it moves, for
    every body (nb, ...); x has the moving bodies' rows (nm, ...). Welded bodies get their
    moving ancestor's sum: joint velocities and accelerations add up this way (a weld adds
    none). The moving tree's ``outward_sum`` (dense or by levels), gathered to every body."""
    if not topo.has_welds:
        return outward_sum(topo, x, dense)
    return sp.take_rows(outward_sum(topo.moving_tree, x, dense), topo.moving_row)


def inward_to_dofs(topo: Topology, x: jax.Array, dense: bool | None = None) -> jax.Array:
    """For each dof (nu, ...), the sum of ``x`` (nm, ...: moving rows, welded bodies folded
    in with ``fold_welded``) over its body and the body's moving descendants. Dense: one
    (nu, nm) matmul; else a level scan of the moving tree and a gather."""
    mt = topo.moving_tree
    A = mt.inward_ancestor[np.asarray(mt.dof_body)]
    if _unrolled(mt, dense):
        db = np.asarray(mt.dof_body)
        return _linear(lambda x: sp.take_rows(_inward_levels(mt, x), db), lambda x: _body_matmul(A, x))(x)
    if _use_dense(mt, dense):
        return _body_matmul(A, x)
    return gather_dofs(mt, inward_sum(mt, x, dense))
