"""Per-kind evaluation: every body of one mobilizer kind at once, with one ``vmap``.

Bodies whose mobilizers compare equal (same kind, same definition) form a
:class:`~simjax.model.topology.KindGroup`; joint-local work (``X_FM``, ``H``, ``N`` and
their derivatives) runs once per group, so the traced program grows with the number of
kinds, not of bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from ..model.state import State
from ..model.topology import KindGroup, Topology


def joint_inputs(state: State, g: KindGroup, *names: str) -> tuple[jax.Array, ...]:
    """The stacked inputs of a group's bodies, by name: ``q``, ``u``, ``params`` (the
    mobilizer parameters), ``frames`` (``X_PF_R, X_PF_p, X_BM_R, X_BM_p``: four arrays), or
    any per-u array given as ``("u", x)``."""
    inst = state.instance["matter"]
    b = g.bodies
    out: list[jax.Array] = []
    for n in names:
        if n == "q":
            out.append(sp.take_rows(state.q, g.q_idx))
        elif n == "u":
            out.append(sp.take_rows(state.u, g.u_idx))
        elif n == "params":
            out.append(sp.take_rows(inst["mobilizer_params"], b)[:, : g.mobilizer.n_params])
        elif n == "frames":
            out += [sp.take_rows(inst[k], b) for k in ("X_PF_R", "X_PF_p", "X_BM_R", "X_BM_p")]
        else:
            raise ValueError(f"joint_inputs: unknown input {n!r}")
    return tuple(out)


def map_kinds(
    topo: Topology,
    fn: Callable[..., Any],
    inputs: Callable[[KindGroup], tuple[Any, ...]],
    *,
    skip: Callable[[Any], bool] | None = None,
) -> Iterator[tuple[KindGroup, Any]]:
    """``(group, jax.vmap(fn(mobilizer, ...))(*inputs(group)))`` for every kind group,
    skipping groups whose mobilizer ``skip`` rejects (e.g. Weld, with no q)."""
    for g in topo.groups:
        if skip is not None and skip(g.mobilizer):
            continue
        yield g, jax.vmap(partial(fn, g.mobilizer))(*inputs(g))


def no_q(mob: Any) -> bool:
    """A mobilizer with no coordinates (Weld)."""
    return mob.nq == 0


def place(n: int, parts: list[tuple[np.ndarray, jax.Array]], fill: jax.Array) -> jax.Array:
    """An (n, ...) array whose rows ``idx`` hold ``values`` for each ``(idx, values)`` of
    ``parts`` (values one row per index, in the order of ``idx.reshape(-1)``) and ``fill``
    (one row) elsewhere; a later part wins where rows repeat. One concatenation and one
    static gather, where a scatter per kind group would compile to a kernel each."""
    idx = [np.asarray(i, dtype=int).reshape(-1) for i, _ in parts]
    flat = np.concatenate(idx) if idx else np.zeros(0, dtype=int)
    src = np.full(n, flat.size, dtype=int)  # the fill row
    src[flat] = np.arange(flat.size)
    rows = [jnp.reshape(v, (len(i),) + fill.shape).astype(fill.dtype) for i, (_, v) in zip(idx, parts)]
    if rows and np.array_equal(src, np.arange(n)):  # the parts fill every row, in order: no gather
        return jnp.concatenate(rows) if len(rows) > 1 else rows[0]
    return sp.take_rows(jnp.concatenate([*rows, fill[None]]), src)
