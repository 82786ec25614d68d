"""The mass matrix factored with the tree's sparsity: ``M = L^T L`` over the dof tree.

In a tree, ``M[i, j]`` is nonzero only where one of the two dofs is an ancestor-or-self
of the other (``Topology.dof_tree``), and the factor ``L`` of ``M = L^T L`` (Featherstone's
"LTL" factorization, *Rigid Body Dynamics Algorithms*, 6.3) has exactly that pattern. So
``M`` is kept in *path form*: ``Hp[k, t] = M[k, a]`` for ``a`` the ancestor ``t`` levels above
dof k (``t = 0``: the diagonal), ``(nu, D)`` instead of ``(nu, nu)``, and factored and solved
in ``sum(m_k^2) / 2`` multiply-adds (``m_k`` the length of k's path to the root) instead of a
dense Cholesky's ``nu^3 / 3``: for a floating humanoid 0.9k against 5.9k, TALOS with its
hands 3.7k against 42k.

The work runs level by level (deepest first to factor and for ``L^-T``, root first for
``L^-1``): the dofs of one depth are independent, and each level is one fused kernel.
What keeps XLA from recomputing a level inside every deeper consumer is the division by
that level's pivots, which XLA does not copy into consumers (so it must stay a division:
``_batched_like``); the ``optimization_barrier`` after each level marks the intent (the
program measured the same size without them). Within a level the arithmetic is written
row by row with static slices (no gathers, no reductions, which XLA:CPU would run as
kernels of their own). The program grows with ``sum(depth)``, so long chains keep the dense
Cholesky (``use_tree_factorization``).
Measured in ``benchmarks/RESULTS.md`` (2026-11-29).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..model.topology import DofTree, Topology

# The sparse factorization is used where it takes at most MAX_PATH_FLOPS multiply-adds
# (``DofTree.path_flops``) and either saves most of a dense Cholesky's work (branched trees:
# at most SPARSE_RATIO of ``nu^3 / 3``) or the tree is small (at most SMALL_NU dofs). Its
# program grows with the tree (XLA:CPU compiles a 20-dof chain's 2.3 s longer for 1.1x
# the throughput, a 50-dof chain's runs slower than LAPACK's dense Cholesky); on branched
# trees it pays (a floating humanoid 1.27x, TALOS 1.35x; ``benchmarks/RESULTS.md``).
MAX_PATH_FLOPS = 4000
SPARSE_RATIO = 0.35
SMALL_NU = 12


def use_tree_factorization(topo: Topology) -> bool:
    """Whether forward dynamics factors ``M`` in path form (``solve_paths``) rather than
    densely (the criteria above, from the static topology)."""
    nu = topo.nu
    if nu == 0:
        return False
    flops = topo.dof_tree.path_flops
    return flops <= MAX_PATH_FLOPS and (nu <= SMALL_NU or flops <= SPARSE_RATIO * nu**3 / 3)


def _rows(A: jax.Array) -> list[jax.Array]:
    return [jax.lax.index_in_dim(A, i, keepdims=False) for i in range(A.shape[0])]


def _scalar(v: jax.Array, i: int) -> jax.Array:
    return jax.lax.index_in_dim(v, i, keepdims=False)


def _batched_like(d: jax.Array, acc: jax.Array) -> jax.Array:
    """The pivot ``d`` with ``acc``'s shape (``d + 0 * acc``), to divide by. Where only the
    right-hand side is batched (``vmap`` over forces or velocities at one q, or a matrix
    right-hand side) the pivots are unbatched scalars, and XLA turns a division by a
    broadcast scalar into a multiplication by its reciprocal: cheap enough that its fusion
    copies each level's arithmetic into every deeper consumer (the humanoid's solve of 16
    right-hand sides compiled to 34k HLO lines instead of 6k; its forward dynamics over 16
    velocities at one q took 4.5 s to compile instead of 1.6 s). A division by a batched
    value stays a division, which XLA computes once."""
    return d + jax.lax.stop_gradient(0.0 * acc)


def _factor(tree: DofTree, Hp: jax.Array) -> list[list[jax.Array]]:
    """``L`` in path form, as rows per level: ``L[l][w]`` is the row (l + 1,) of the dof at
    position w of level l (``L[k, k]`` first, then the entries at k's ancestors)."""
    D = len(tree.levels)
    H_rows = _rows(jax.lax.optimization_barrier(Hp))
    L: list[list[jax.Array]] = [[] for _ in range(D)]
    for lev in range(D - 1, -1, -1):
        out = []
        for k in tree.levels[lev]:
            h = jax.lax.slice_in_dim(H_rows[k], 0, lev + 1)
            # Every descendant j (already factored) takes L[j, i] L[j, a] from M[i, a] for
            # each pair of its ancestors i (this dof) and a (an ancestor-or-self of i).
            for d, js in tree.descendants[k].items():
                s = d - lev
                for j in js:
                    Lj = L[d][j]
                    h = h - jax.lax.slice_in_dim(Lj, s, s + 1) * jax.lax.slice_in_dim(Lj, s, s + lev + 1)
            out.append(h)
        H = jax.lax.optimization_barrier(jnp.stack(out))
        diag = jnp.sqrt(H[:, :1])
        Lev = jax.lax.optimization_barrier(jnp.concatenate([diag, H[:, 1:] / diag], axis=1))
        L[lev] = _rows(Lev)
    return L


def _solve_factored(tree: DofTree, L: list[list[jax.Array]], b: jax.Array) -> jax.Array:
    """``M^-1 b = L^-1 L^-T b`` for b a vector (nu,) or a matrix (nu, k), from ``_factor``'s rows."""
    D = len(tree.levels)
    b = jax.lax.optimization_barrier(b)
    # y = L^-T b: each dof after its descendants.
    y: list[list[jax.Array]] = [[] for _ in range(D)]
    for lev in range(D - 1, -1, -1):
        out = []
        for w, k in enumerate(tree.levels[lev]):
            acc = _scalar(b, int(k))
            for d, js in tree.descendants[k].items():
                for j in js:
                    acc = acc - _scalar(L[d][j], d - lev) * y[d][j]
            out.append(acc / _batched_like(_scalar(L[lev][w], 0), acc))
        y[lev] = jax.lax.optimization_barrier(out)
    # x = L^-1 y: each dof after its ancestors.
    x: list[list[jax.Array]] = [[] for _ in range(D)]
    for lev in range(D):
        out = []
        for w, k in enumerate(tree.levels[lev]):
            acc = y[lev][w]
            for t in range(1, lev + 1):
                a = int(tree.paths[k, t])
                acc = acc - _scalar(L[lev][w], t) * x[lev - t][int(tree.pos[a])]
            out.append(acc / _batched_like(_scalar(L[lev][w], 0), acc))
        x[lev] = jax.lax.optimization_barrier(out)
    return jnp.stack([x[int(tree.depth[k])][int(tree.pos[k])] for k in range(len(tree.depth))])


def dense_from_paths(topo: Topology, Hp: jax.Array) -> jax.Array:
    """The symmetric ``M`` (nu, nu) from its path form (for checks and derivatives)."""
    return jnp.concatenate([Hp.ravel(), jnp.zeros(1, Hp.dtype)])[topo.dof_tree.dense_index]


def solve_paths(topo: Topology, Hp: jax.Array, rhs: jax.Array) -> jax.Array:
    """``M^-1 rhs`` for ``M`` in path form ``Hp`` (nu, D) (row k: ``M[k, a]`` for the
    ancestors-or-self ``a = topo.dof_tree.paths[k, t]``, zero past k's root) and ``rhs`` a
    vector (nu,) or a matrix (nu, k), by the sparse ``L^T L`` factorization (NaN where ``M`` is not positive
    definite). Differentiable as written; forward dynamics differentiates it through the
    dense Cholesky's rule instead (``simjax.dynamics.stages.forward_solve``)."""
    tree = topo.dof_tree
    return _solve_factored(tree, _factor(tree, Hp), rhs)
