"""``M^-1 rhs`` by the articulated-body recursion over the dof tree, in Ground's frame.

Forward dynamics knows the generalized bias forces (the Dynamics stage's recursive
Newton-Euler pass) before it solves, so what remains is ``x = M^-1 rhs`` with
``M = sum of cdof_a . Ic cdof_k`` over the tree. Featherstone's articulated-body algorithm
(*Rigid Body Dynamics Algorithms*, ch. 7) with no velocity and no gravity is exactly that
solve, in work linear in the number of bodies where a dense Cholesky takes ``nu^3 / 3``.

Every spatial quantity here is in Ground's axes about Ground's origin, as the tree passes
have them (``simjax.dynamics.stages``): the recursion needs no transform between a body
and its parent. Each dof is a node of the dof tree (``Topology.dof_tree``): a body with
several dofs is a chain of nodes, the body's spatial inertia (its welded descendants folded
in) on its last dof and none on the others. With ``s_k`` the dof's motion (``cdof``):

* inward, deepest level first: ``IA_k = I_k + sum_c P_c`` and ``z_k = sum_c zc_c`` over its
  children c; ``U_k = IA_k s_k``, ``D_k = s_k . U_k + armature_k``,
  ``v_k = rhs_k - s_k . z_k``; the parent takes ``P_k = IA_k - U_k U_k^T / D_k`` and
  ``zc_k = z_k + U_k v_k / D_k``;
* outward, root first: ``x_k = (v_k - U_k . a_p) / D_k`` and ``a_k = a_p + s_k x_k`` (``a_p``
  the parent's, zero at a root).

Forward dynamics passes the bias terms in whole (``solve``'s ``forces`` and ``products``),
Featherstone's recursion as he writes it: each body's gyroscopic and applied force starts
its node's ``z``, its velocity product ``c`` enters as ``v -= U . c`` and ``zc += IA c``
inward and ``a = a_p + c + s x`` outward, so the RNEA's outward sum of the velocity
products, inward sum of the forces and projection on ``cdof`` are not computed at all.

The levels are unrolled (static slices, no gathers over the tree) with an
``optimization_barrier`` after each. The barriers keep the program smaller and its compile
shorter, at the same run time, and they do not stop XLA fusing a level's arithmetic into
its consumers (a reduction does: ``_combine``). The program grows with the depth of the dof
tree, not with the batch. For batches it is faster than the dense Cholesky on deep chains
and than a tree-sparse ``L^T L`` factorization on branched trees (measurements:
``benchmarks/HISTORY.md``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from ..model.topology import Topology

# A pivot at or below this many machine epsilons of the largest marks M singular.
SINGULAR_RTOL = 64


def _sum(rows: list[jax.Array], like: jax.Array) -> jax.Array:
    return sum(rows[1:], rows[0]) if rows else jnp.zeros_like(like)


def _sum_axis(x: jax.Array, axis: int) -> jax.Array:
    """``x.sum(axis)`` over a short axis as a chain of additions: elementwise, so it fuses
    with its neighbours, where XLA:CPU runs a small reduction as a kernel of its own.
    ``U = IA s`` stays a reduction: written out it made long chains' batches slower."""
    parts = [jax.lax.index_in_dim(x, i, axis, keepdims=False) for i in range(x.shape[axis])]
    return sum(parts[1:], parts[0])


def _dot6(s: jax.Array, x: jax.Array) -> jax.Array:
    """``s . x`` over the spatial axis: s (w, 6), x (w, 6, ...) -> (w, ...)."""
    return _sum_axis(s.reshape(s.shape + (1,) * (x.ndim - 2)) * x, 1)


def _times(s: jax.Array, x: jax.Array) -> jax.Array:
    """``s x``: s (w, 6), x (w, ...) -> (w, 6, ...)."""
    return s.reshape(s.shape + (1,) * (x.ndim - 1)) * x[:, None]


def _combine(columns: list[jax.Array], weights: list[jax.Array]) -> jax.Array:
    """``sum_i columns[i] @ weights[i]`` per node: columns (w, 6, k_i), weights (w, k_i) ->
    (w, 6), as one product summed over the concatenated last axis. A reduction is where
    XLA:CPU ends a kernel: written as additions, the levels' ``zc`` (or ``a``) chain with
    the velocity products in it fused into each consumer over every deeper level, and a long
    chain's program grew threefold and ran an order of magnitude slower."""
    return (jnp.concatenate(columns, -1) * jnp.concatenate(weights, -1)[:, None, :]).sum(-1)


def _carried_rows(tm: Topology) -> list[list[int]]:
    """For each dof, the rows of ``tm`` (the moving tree) whose inertia it carries: its
    body's if it is the body's last dof, and those of bodies without dofs below that body
    (none in a moving tree proper; every body of a full tree forced through this path)."""
    dof_body = np.asarray(tm.dof_body)
    last = {int(b): k for k, b in enumerate(dof_body)}
    carried: list[list[int]] = [[] for _ in dof_body]
    for r in range(1, tm.nb):
        b = r
        while b > 0 and b not in last:
            b = tm.parent[b]
        if b > 0:  # (a body welded to Ground moves nothing)
            carried[last[b]].append(r)
    return carried


def solve(
    topo: Topology,
    cdof: jax.Array,
    inertia: jax.Array,
    armature: jax.Array,
    rhs: jax.Array,
    forces: jax.Array | None = None,
    products: jax.Array | None = None,
) -> jax.Array:
    """``M^-1 rhs`` for the mass matrix of the motions ``cdof`` (nu, 6) and the moving bodies'
    spatial inertias ``inertia`` (nm, 10: ``PositionCache.moving_inertia_O``, parameters as
    ``simjax._spatial.inertia_parameters``), both in Ground's frame about its origin, with
    ``armature`` (nu,) on the diagonal; ``rhs`` a vector (nu,) or a matrix (nu, k). NaN where
    ``M`` is singular to working precision (a pivot within ``SINGULAR_RTOL`` epsilons of the
    largest: ``cond(M)`` at least ``1 / (SINGULAR_RTOL eps)``) or not positive definite.
    Differentiable as written (forward dynamics differentiates the dense Cholesky's rule
    instead: ``simjax.dynamics.stages.forward_solve``).

    With ``forces`` and ``products`` (each (nm, 6), rows as ``inertia``'s; ``rhs`` a vector)
    it is the whole of forward dynamics, Featherstone's recursion with its bias terms:
    ``rhs`` the mobility forces, ``forces`` each body's bias force ``V x* (I V)`` less its
    applied force, ``products`` the velocity-product acceleration across its mobilizer
    (``aJ``, before the outward sum). Then ``x = M^-1 (rhs - C)`` with ``C`` the RNEA's
    ``cdof . (inward sum of I a_bias + forces)``, without the outward sum of ``products``,
    the inward sum of the forces and their projection on ``cdof``: the forces start each
    node's ``z`` and the products enter as ``v -= U . c``, ``zc += IA c`` inward and
    ``a = a_p + c + s x`` outward (``c`` on each body's last dof)."""
    tree, nu = topo.dof_tree, topo.nu
    if nu == 0:
        return rhs
    carried = _carried_rows(topo.moving_tree)
    # Each body's velocity product ``c`` on the node that carries its inertia (its last dof).
    dof_body = [int(b) for b in topo.moving_tree.dof_body]
    c_row = [b if products is not None and b in carried[k] else None for k, b in enumerate(dof_body)]
    n_lev = len(tree.levels)
    rows = lambda x: [jax.lax.index_in_dim(x, i, keepdims=False) for i in range(x.shape[0])]
    P: list[list[jax.Array]] = [[] for _ in range(n_lev)]
    Z: list[list[jax.Array]] = [[] for _ in range(n_lev)]
    kept: list[tuple[jax.Array, ...]] = [() for _ in range(n_lev)]
    pivots: list[jax.Array] = [jnp.zeros(0)] * n_lev
    velocity_products: list[jax.Array | None] = [None] * n_lev
    z0 = jnp.zeros((6,) + rhs.shape[1:], rhs.dtype)
    for lev in range(n_lev - 1, -1, -1):
        dofs = tree.levels[lev]
        # The level's own inertias as 6x6 matrices here, from their ten parameters (linear in
        # them): XLA builds them inside the level's kernel rather than writing every body's
        # 36 entries to memory first.
        IA = sp.inertia_matrix(jnp.stack([_sum([inertia[r] for r in carried[k]], inertia[0]) for k in dofs]))
        kids = [[P[lev + 1][tree.pos[c]] for c in tree.children[k]] for k in dofs]
        if any(kids):
            IA = IA + jnp.stack([_sum(kc, IA[0]) for kc in kids])
        own = [[forces[r] for r in carried[k]] if forces is not None else [] for k in dofs]
        kid_z = [[Z[lev + 1][tree.pos[c]] for c in tree.children[k]] for k in dofs]
        z = jnp.stack([_sum(f + kz, z0) for f, kz in zip(own, kid_z)])
        s = cdof[dofs]
        U = (IA * s[:, None, :]).sum(-1)
        D = _sum_axis(s * U, 1) + armature[dofs]
        v = rhs[dofs] - _dot6(s, z)
        c = None
        if products is not None and any(c_row[k] is not None for k in dofs):
            c = jnp.stack([z0 if c_row[k] is None else products[c_row[k]] for k in dofs])
            v = v - _sum_axis(U * c, 1)
        Di = 1.0 / D
        y = v * Di.reshape(D.shape + (1,) * (v.ndim - 1))  # v / D
        W = U * Di[:, None]  # U / D
        if c is None:
            zc = z + _times(U, y)
        else:  # z + IA c + U y, as one reduction (see _combine)
            zc = _combine([IA, U[..., None], z[..., None]], [c, y[:, None], jnp.ones_like(y)[:, None]])
        out = (IA - U[:, :, None] * W[:, None, :], zc, W, y, D)
        out = jax.lax.optimization_barrier(out)
        P[lev], Z[lev] = rows(out[0]), rows(out[1])
        kept[lev], pivots[lev] = out[2:4], out[4]
        velocity_products[lev] = c
    xs = []
    a = jnp.zeros((0, 6) + rhs.shape[1:], rhs.dtype)
    for lev in range(n_lev):
        dofs = tree.levels[lev]
        W, y = kept[lev]
        if lev:
            a_p = a[np.asarray([tree.pos[tree.parent[k]] for k in dofs])]
        else:
            a_p = jnp.zeros((len(dofs),) + z0.shape, rhs.dtype)
        x = y - _dot6(W, a_p)  # (``v`` holds ``- U . c`` already)
        c = velocity_products[lev]
        if c is None:
            a = a_p + _times(cdof[dofs], x)
        else:  # a_p + c + s x, as one reduction (see _combine)
            one = jnp.ones_like(x)[:, None]
            cols = [a_p[..., None], c[..., None], cdof[dofs][..., None]]
            a = _combine(cols, [one, one, x[:, None]])
        x, a = jax.lax.optimization_barrier((x, a))
        xs.append(x)
    x = jnp.concatenate(xs)[tree.row]
    # The pivots are those of an LDL^T factorization of M, so each lies between M's
    # smallest and largest eigenvalues: a pivot at or below SINGULAR_RTOL epsilons of the
    # largest means cond(M) >= 1 / (SINGULAR_RTOL eps), M singular to working precision
    # (a gimbal at lock, a massless leaf). NaN then, as a Cholesky's non-positive pivot
    # gives, not a huge finite result. (A test against each dof's own M[k, k] cost a
    # 50-link chain 10-15% of its forward dynamics.)
    D = jnp.concatenate(pivots)
    singular = jnp.min(D) <= SINGULAR_RTOL * jnp.finfo(D.dtype).eps * jnp.max(D)
    return jnp.where(singular, jnp.nan, x)
