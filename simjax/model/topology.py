"""Static, hashable topology of a multibody tree, built with NumPy once per System/Model.

Body 0 is Ground. Everything here is plain Python/NumPy; in traced code its arrays are
constants (static gathers and scatters).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .mobilizers import GIMBAL_LOCK_TOLERANCE, AbstractMobilizer


@dataclass(frozen=True, eq=False)
class KindGroup:
    """All bodies sharing one mobilizer kind (same static configuration).

    Attributes:
        mobilizer: The shared mobilizer kind.
        bodies: Body indices, shape (g,).
        q_idx: Indices into q, shape (g, nq).
        u_idx: Indices into u, shape (g, nu).
    """

    mobilizer: AbstractMobilizer
    bodies: np.ndarray
    q_idx: np.ndarray
    u_idx: np.ndarray


@dataclass(frozen=True, eq=False)
class LevelTree:
    """A tree by depth levels, for passes unrolled level by level: the bodies
    (``Topology.body_tree``, Ground the root) or the generalized speeds
    (``Topology.dof_tree``: a dof's parent is the dof before it on its body, or the last
    dof of its nearest ancestor body that has any; in a tree ``M[i, j]`` is nonzero only
    where one of i, j is an ancestor-or-self of the other).

    Attributes:
        parent: Each node's parent, -1 at a root, (n,); parents come before children.
        depth: Each node's depth (0 at a root), (n,).
        levels: The nodes of each depth, ``levels[d]`` (W_d,), in increasing order.
        pos: Each node's position on its level, (n,).
        children: Each node's children, in increasing order.
        row: Each node's row in the levels' concatenation ``levels[0], levels[1], ...``.
    """

    parent: np.ndarray
    depth: np.ndarray
    levels: tuple[np.ndarray, ...]
    pos: np.ndarray
    children: tuple[tuple[int, ...], ...]
    row: np.ndarray

    @classmethod
    def of(cls, parent: Any) -> LevelTree:
        """The levels of the tree with these parents (each before its children)."""
        parent = np.asarray(parent, dtype=int)
        n = len(parent)
        depth = np.zeros(n, dtype=int)
        for k in range(n):
            depth[k] = depth[parent[k]] + 1 if parent[k] >= 0 else 0
        levels = tuple(np.nonzero(depth == d)[0] for d in range(int(depth.max()) + 1 if n else 0))
        pos = np.zeros(n, dtype=int)
        for lev in levels:
            pos[lev] = np.arange(len(lev))
        children = tuple(tuple(int(c) for c in np.nonzero(parent == k)[0]) for k in range(n))
        start = np.cumsum([0] + [len(lev) for lev in levels])
        return cls(parent, depth, levels, pos, children, start[depth] + pos)


@dataclass(frozen=True, eq=False)
class Topology:
    """Parent array, coordinate slots, kind groups, levels and ancestor masks.

    Attributes:
        parent: Parent of each body; ``parent[0] == -1`` (Ground).
        mobilizers: Mobilizer of each body (``None`` for Ground).
        names: Body names.
    """

    parent: tuple[int, ...]
    mobilizers: tuple[AbstractMobilizer | None, ...]
    names: tuple[str, ...]

    @property
    def nb(self) -> int:
        """Number of bodies, Ground included."""
        return len(self.parent)

    @cached_property
    def nq_body(self) -> np.ndarray:
        """Number of q of each body's mobilizer."""
        return np.array([0] + [m.nq for m in self.mobilizers[1:]], dtype=int)  # type: ignore[union-attr]

    @cached_property
    def nu_body(self) -> np.ndarray:
        """Number of u of each body's mobilizer."""
        return np.array([0] + [m.nu for m in self.mobilizers[1:]], dtype=int)  # type: ignore[union-attr]

    @cached_property
    def q_start(self) -> np.ndarray:
        """First q index of each body."""
        return np.concatenate([[0], np.cumsum(self.nq_body)[:-1]]).astype(int)

    @cached_property
    def u_start(self) -> np.ndarray:
        """First u index of each body."""
        return np.concatenate([[0], np.cumsum(self.nu_body)[:-1]]).astype(int)

    @property
    def nq(self) -> int:
        """Total number of generalized coordinates."""
        return int(self.nq_body.sum())

    @property
    def nu(self) -> int:
        """Total number of generalized speeds."""
        return int(self.nu_body.sum())

    @cached_property
    def euler_lock_q(self) -> np.ndarray:
        """q index of the middle Euler angle of every mobilizer that has one
        (``AbstractMobilizer.euler_middle_angle``), in body order."""
        return np.array(
            [self.q_start[b] + m.euler_middle_angle for b, m in self.lock_bodies()], dtype=int
        ).reshape(-1)

    def lock_bodies(self) -> list[tuple[int, AbstractMobilizer]]:
        """``(body, mobilizer)`` of every mobilizer with a middle Euler angle (``euler_lock_q``)."""
        return [
            (b, m)
            for b, m in enumerate(self.mobilizers)
            if m is not None and m.euler_middle_angle is not None
        ]

    def at_gimbal_lock(self, q: jax.Array) -> jax.Array:
        """(k,) bools, one per ``euler_lock_q``: within ``GIMBAL_LOCK_TOLERANCE`` of gimbal
        lock in ``q``."""
        return jnp.abs(jnp.cos(q[..., self.euler_lock_q])) <= GIMBAL_LOCK_TOLERANCE

    @cached_property
    def dof_body(self) -> np.ndarray:
        """Body owning each generalized speed, shape (nu,)."""
        return np.repeat(np.arange(self.nb), self.nu_body).astype(int)

    @cached_property
    def body_dofs(self) -> np.ndarray:
        """``body_dofs[j, b]``: the j-th generalized speed of body b, or ``nu`` past its last
        (Ground and welded bodies have none), shape (max dofs of a body, nb)."""
        start = np.concatenate([[0], np.cumsum(self.nu_body)[:-1]]).astype(int)
        j = np.arange(int(self.nu_body.max(initial=0)))[:, None]
        return np.where(j < self.nu_body[None, :], start[None, :] + j, self.nu)

    @cached_property
    def dof_tree(self) -> LevelTree:
        """The generalized speeds as a tree (``LevelTree``)."""
        db = self.dof_body
        last: dict[int, int] = {int(b): k for k, b in enumerate(db)}
        parent = np.full(len(db), -1, dtype=int)
        for k in range(len(db)):
            if k > 0 and db[k - 1] == db[k]:
                parent[k] = k - 1
            else:
                b = self.parent[db[k]]
                while b > 0 and b not in last:
                    b = self.parent[b]
                parent[k] = last[b] if b > 0 else -1
        return LevelTree.of(parent)

    @cached_property
    def body_tree(self) -> LevelTree:
        """The bodies as a tree by depth levels (``LevelTree``; Ground the root)."""
        return LevelTree.of(self.parent)

    @cached_property
    def depth(self) -> np.ndarray:
        """Depth of each body (Ground 0)."""
        d = np.zeros(self.nb, dtype=int)
        for b in range(1, self.nb):
            d[b] = d[self.parent[b]] + 1
        return d

    @cached_property
    def qdot_is_u(self) -> bool:
        """Every mobilizer has ``qdot == u`` (no quaternions, no Euler-angle rates)."""
        return all(m.qdot_is_u for m in self.mobilizers[1:] if m is not None)

    @cached_property
    def levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Bodies per depth level, padded with the sink row ``nb``: (body, parent), (D, W)."""
        D = int(self.depth.max()) if self.nb > 1 else 0
        rows = [np.nonzero(self.depth == d)[0] for d in range(1, D + 1)]
        W = max((len(r) for r in rows), default=0)
        body = np.full((D, W), self.nb, dtype=int)
        par = np.zeros((D, W), dtype=int)
        for i, r in enumerate(rows):
            body[i, : len(r)] = r
            par[i, : len(r)] = [self.parent[b] for b in r]
        return body, par

    @cached_property
    def jumps(self) -> np.ndarray:
        """Ancestor indices for composing poses by pointer doubling, (R, nb): row k holds
        each body's ``2**k``-th ancestor (Ground, 0, once past the root), for the
        ``R = ceil(log2(max depth))`` rounds after which every body has reached Ground."""
        return _jump_table(self.parent)

    # -------------------------------------------------------------- welded bodies
    # A body whose mobilizer has no mobility (Weld) moves with its parent: in Ground's frame
    # about Ground's origin it has its parent's spatial velocity and acceleration, and its
    # inertia and applied forces simply add to the parent's. The tree passes therefore run
    # over the *moving* tree (Ground and the bodies with mobilities) only; welded bodies
    # (URDF fixed links, sensor frames) share their moving ancestor's rows.

    @cached_property
    def moving(self) -> np.ndarray:
        """Ground (0) and every body whose mobilizer has mobilities, in body order (nm,)."""
        return np.array([0] + [b for b in range(1, self.nb) if self.nu_body[b] > 0], dtype=int)

    @property
    def has_welds(self) -> bool:
        """Some body other than Ground has no mobility (a Weld)."""
        return len(self.moving) < self.nb

    @cached_property
    def moving_row(self) -> np.ndarray:
        """Each body's row in ``moving``: its own if it moves, else its nearest moving
        ancestor's (Ground's, 0, for bodies welded to Ground), (nb,)."""
        row = np.zeros(self.nb, dtype=int)
        where = {int(b): i for i, b in enumerate(self.moving)}
        for b in range(1, self.nb):
            row[b] = where[b] if b in where else row[self.parent[b]]
        return row

    @cached_property
    def moving_tree(self) -> Topology:
        """The tree of ``moving`` bodies alone, each a child of its nearest moving ancestor
        (``self`` when there are no welds). Its dofs are this tree's, in the same order."""
        if not self.has_welds:
            return self
        mv = self.moving
        parent = (-1,) + tuple(int(self.moving_row[self.parent[b]]) for b in mv[1:])
        return Topology(parent, tuple(self.mobilizers[b] for b in mv), tuple(self.names[b] for b in mv))

    @cached_property
    def welded(self) -> np.ndarray:
        """Bodies other than Ground without mobility (Welds), in body order (nw,)."""
        return np.setdiff1d(np.arange(1, self.nb), self.moving)

    @cached_property
    def weld_index(self) -> np.ndarray:
        """Each body's row in the compact index of the weld chains (nb,): i for the i-th
        welded body (1-based), 0 for moving bodies (the chains' common root)."""
        index = np.zeros(self.nb, dtype=int)
        index[self.welded] = np.arange(1, len(self.welded) + 1)
        return index

    @cached_property
    def weld_jumps(self) -> np.ndarray:
        """Pointer-doubling table (``jumps``) over the chains of welds, in ``weld_index``:
        row 0 the moving ancestor, row i the i-th welded body, whose parent is its welded
        parent's row or 0. Composes each welded body's pose relative to its moving ancestor."""
        index = self.weld_index
        return _jump_table((-1,) + tuple(int(index[self.parent[w]]) for w in self.welded))

    @cached_property
    def body_order(self) -> np.ndarray:
        """Row of each body in ``moving`` rows followed by ``welded`` rows (nb,): the static
        gather that puts arrays of that form back in body order."""
        src = np.empty(self.nb, dtype=int)
        src[self.moving] = np.arange(len(self.moving))
        src[self.welded] = len(self.moving) + np.arange(len(self.welded))
        return src

    @cached_property
    def below_weld(self) -> np.ndarray:
        """Moving bodies whose parent is welded (nk,): their pose relative to their moving
        ancestor passes through the weld chain."""
        moves = np.zeros(self.nb, dtype=bool)
        moves[self.moving] = True
        return np.array([b for b in self.moving[1:] if not moves[self.parent[b]]], dtype=int)

    @cached_property
    def fold_welded(self) -> np.ndarray:
        """``F[m, b] = 1`` if body b's row is moving row m's (``moving_row``), (nm, nb): ``F @ x``
        adds each welded body's row into its moving ancestor's."""
        F = np.zeros((len(self.moving), self.nb))
        F[self.moving_row, np.arange(self.nb)] = 1.0
        return F

    @cached_property
    def compose_by_doubling(self) -> bool:
        """Whether ground poses are composed by pointer doubling (``jumps``) rather than a
        pass over the depth levels: when doubling's pose products (the moved bodies of
        every round) are at most twice the level pass's padded ones. Deep chains fail it
        (doubling would multiply their work)."""
        body, _ = self.levels
        work = sum(int(np.count_nonzero(j)) for j in self.jumps)
        return self.nb > 1 and work <= 2 * body.size

    @cached_property
    def ancestor(self) -> np.ndarray:
        """``A[b, a] = 1`` if a is b or an ancestor of b (Ground excluded), (nb, nb)."""
        A = np.zeros((self.nb, self.nb))
        for b in range(1, self.nb):
            a = b
            while a > 0:
                A[b, a] = 1.0
                a = self.parent[a]
        return A

    @cached_property
    def inward_ancestor(self) -> np.ndarray:
        """``M[a, b] = 1`` if a is b or an ancestor of b, Ground (a = 0) included: the
        matrix of inward sums, ``out = M @ x`` (nb, nb)."""
        A = self.ancestor.copy()
        A[:, 0] = 1.0  # Ground is every body's ancestor for inward sums.
        return A.T

    @cached_property
    def mass_matrix_mask(self) -> np.ndarray:
        """Lower mask for the composite-rigid-body formula: dof j's body is a strict
        ancestor of dof i's body, or the same body with ``j <= i``. (nu, nu) bool."""
        db = self.dof_body
        A = self.ancestor
        strict = (A[db][:, db] > 0) & (db[:, None] != db[None, :])
        same = (db[:, None] == db[None, :]) & (np.arange(self.nu)[None, :] <= np.arange(self.nu)[:, None])
        return strict | same

    @cached_property
    def dof_ancestor(self) -> np.ndarray:
        """``D[b, d] = 1`` if dof d moves body b (d's body is b or an ancestor), (nb, nu)."""
        return self.ancestor[:, self.dof_body] if self.nu else np.zeros((self.nb, 0))

    @cached_property
    def groups(self) -> tuple[KindGroup, ...]:
        """Bodies grouped by mobilizer kind and static configuration (in first-seen order)."""
        order: dict[AbstractMobilizer, list[int]] = {}
        for b in range(1, self.nb):
            order.setdefault(self.mobilizers[b], []).append(b)  # type: ignore[arg-type]
        out = []
        for mob, bodies in order.items():
            bs = np.asarray(bodies, dtype=int)
            q_idx = self.q_start[bs][:, None] + np.arange(mob.nq)[None, :]
            u_idx = self.u_start[bs][:, None] + np.arange(mob.nu)[None, :]
            out.append(KindGroup(mob, bs, q_idx.astype(int), u_idx.astype(int)))
        return tuple(out)

    @cached_property
    def quaternion_slots(self) -> np.ndarray:
        """q indices of every quaternion, shape (n_quat, 4)."""
        rows = []
        for b in range(1, self.nb):
            m = self.mobilizers[b]
            if m is not None and m.uses_quaternion:
                rows.append(self.q_start[b] + np.arange(4))
        return np.asarray(rows, dtype=int).reshape(-1, 4)


def _jump_table(parent: tuple[int, ...] | np.ndarray) -> np.ndarray:
    """Pointer-doubling table of a parent array (``parent[0] == -1``): row k holds each
    body's ``2**k``-th ancestor (0 once past the root), for ``ceil(log2(max depth))`` rows."""
    nb = len(parent)
    depth = np.zeros(nb, dtype=int)
    for b in range(1, nb):
        depth[b] = depth[parent[b]] + 1
    rows = []
    jump = np.array([max(int(p), 0) for p in parent], dtype=int)
    span, deepest = 1, (int(depth.max()) if nb > 1 else 0)
    while span < deepest:
        rows.append(jump)
        jump = jump[jump]
        span *= 2
    return np.array(rows, dtype=int).reshape(len(rows), nb)
