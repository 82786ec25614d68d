"""Path lengths (OpenSim's ``GeometryPath`` of path points): every path of a Model at once.

A path runs through its active points in order; its length is the sum of the straight
segments between consecutive active points. A conditional point is active while its
coordinate lies in its range; a moving point's station follows functions of coordinates.
Shapes are static (inactive points are masked, never dropped), so lengths are pure
functions of q and the body poses: ``jit``, ``vmap`` and ``grad`` apply, and moment arms
are ``-dL/dq`` by autodiff.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..model.paths import PathSet
from ..model.topology import Topology


def _slot(topo: Topology, body: int, which: int) -> int:
    return int(topo.q_start[body]) + int(which)


def point_stations(paths: PathSet, topo: Topology, q: jax.Array) -> jax.Array:
    """Every point's station in its body (P, 3): the fixed ones', and the moving points'
    functions evaluated at their coordinates clamped to the coordinates' ranges."""
    station = jnp.asarray(paths.station, dtype=q.dtype)
    for m in paths.moving:
        for axis, spec in enumerate(m.axes):
            if spec is not None:
                fn, body, which, lo, hi = spec
                arg = jnp.clip(q[_slot(topo, body, which)], lo, hi)
                value = fn(jnp.reshape(arg, (1,)))
                station = station.at[m.point, axis].set(jnp.asarray(value, dtype=q.dtype))
    return station


def point_activity(paths: PathSet, topo: Topology, q: jax.Array) -> jax.Array:
    """Which points are active (P,): all but the conditional points whose coordinate lies
    outside their range (bounds included)."""
    active = jnp.ones(len(paths.body), dtype=bool)
    if len(paths.cond_point):
        slots = np.array([_slot(topo, b, w) for b, w in paths.cond_coord], dtype=int)
        v = q[slots]
        on = (v >= paths.cond_range[:, 0]) & (v <= paths.cond_range[:, 1])
        active = active.at[paths.cond_point].set(on)
    return active


def point_locations(
    paths: PathSet, topo: Topology, q: jax.Array, R_GB: jax.Array, p_GB: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Every point's location in Ground (P, 3) and whether it is active (P,)."""
    station = point_stations(paths, topo, q)
    x = jnp.einsum("pij,pj->pi", R_GB[paths.body], station) + p_GB[paths.body]
    return x, point_activity(paths, topo, q)


def _norm(v: jax.Array) -> jax.Array:
    """|v| with a finite derivative at v = 0 (a zero-length segment adds nothing)."""
    n2 = jnp.sum(v * v, axis=-1)
    safe = jnp.where(n2 > 0, n2, 1.0)
    return jnp.where(n2 > 0, jnp.sqrt(safe), 0.0)


def segments(paths: PathSet, active: jax.Array) -> tuple[jax.Array, jax.Array]:
    """For each point, the next active point of its path (P,) and whether the point starts
    a segment: it is active and such a next point exists."""
    P = len(paths.body)
    idx = jnp.arange(P)
    cand = jnp.where(active, idx, P)
    after = jnp.concatenate([cand[1:], jnp.array([P])])
    nxt = jax.lax.cummin(after, reverse=True)  # the first active index after each point
    end = jnp.asarray(paths.start[1:][paths.path])  # each point's path's end
    starts = active & (nxt < end)
    return jnp.minimum(nxt, P - 1), starts


def path_lengths(paths: PathSet, topo: Topology, q: jax.Array, R_GB: jax.Array, p_GB: jax.Array) -> jax.Array:
    """Every path's length (n_paths,) at coordinates ``q`` and body poses ``R_GB`` (nb, 3,
    3), ``p_GB`` (nb, 3) (those of ``q``)."""
    if not len(paths.body):
        return jnp.zeros((paths.num_paths,), dtype=q.dtype)
    x, active = point_locations(paths, topo, q, R_GB, p_GB)
    nxt, starts = segments(paths, active)
    seg = jnp.where(starts, _norm(x[nxt] - x), 0.0)
    return jax.ops.segment_sum(seg, jnp.asarray(paths.path), num_segments=paths.num_paths)
