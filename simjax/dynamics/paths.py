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

from ..model.paths import PathSet, WrapSet
from ..model.topology import Topology
from .wrapping import MANDATORY, WRAPPED, cylinder_wrap, ellipsoid_wrap_compiled, sphere_wrap, torus_wrap


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
    lengths = jax.ops.segment_sum(seg, jnp.asarray(paths.path), num_segments=paths.num_paths)
    if paths.wraps is not None:
        seg = _single_wraps(paths, x, nxt, starts, seg, R_GB, p_GB)
        lengths = jax.ops.segment_sum(seg, jnp.asarray(paths.path), num_segments=paths.num_paths)
        for k, wraps in enumerate(paths.wraps.path_wraps):
            if len(wraps) > 1:
                lo, hi = int(paths.start[k]), int(paths.start[k + 1])
                L = wrapped_path_length(paths.wraps, wraps, x[lo:hi], active[lo:hi], R_GB, p_GB)
                lengths = lengths.at[k].set(L)
    return lengths


def wrapped_paths(paths: PathSet) -> np.ndarray:
    """Which paths have wraps (n_paths,) bool."""
    w = np.zeros(paths.num_paths, dtype=bool)
    if paths.wraps is not None:
        w[:] = [bool(pw) for pw in paths.wraps.path_wraps]
    return w


def _single_wraps(
    paths: PathSet,
    x: jax.Array,
    nxt: jax.Array,
    starts: jax.Array,
    seg: jax.Array,
    R_GB: jax.Array,
    p_GB: jax.Array,
) -> jax.Array:
    """The segment lengths (P,) with every one-wrap path's wrap applied, all such paths at
    once: each segment within its path's wrap range is tried on the path's wrap object
    (vectorized over segments, per kind); per path the first segment the wrap must take
    (mandatory) or else the wrapped one it lengthens least becomes tangent lines plus the
    arc (OpenSim's choice for a single wrap)."""
    ws = paths.wraps
    assert ws is not None
    P = len(paths.body)
    obj = np.full(P, -1, dtype=int)
    first = np.zeros(P, dtype=int)
    last = np.full(P, -1, dtype=int)
    for k, pw in enumerate(ws.path_wraps):
        if len(pw) == 1:
            lo, hi = int(paths.start[k]), int(paths.start[k + 1])
            obj[lo:hi], first[lo:hi], last[lo:hi] = pw[0][0], lo + pw[0][1], lo + pw[0][2]
    if not (obj >= 0).any():
        return seg
    dtype = x.dtype
    idx = np.arange(P)
    o = np.maximum(obj, 0)
    valid = starts & jnp.asarray(obj >= 0) & jnp.asarray(idx >= first) & (nxt <= jnp.asarray(last))
    b = ws.body[o]
    R_GW = jnp.einsum("pij,pjk->pik", R_GB[b], jnp.asarray(ws.R[o], dtype))
    o_GW = p_GB[b] + jnp.einsum("pij,pj->pi", R_GB[b], jnp.asarray(ws.p[o], dtype))
    PA = jnp.einsum("pji,pj->pi", R_GW, x - o_GW)
    PB = jnp.einsum("pji,pj->pi", R_GW, x[nxt] - o_GW)
    PA = jnp.where(valid[:, None], PA, jnp.asarray([1e3, 0.0, 0.0], dtype)[None])
    PB = jnp.where(valid[:, None], PB, jnp.asarray([0.0, 1e3, 1.0], dtype)[None])
    code = jnp.zeros(P, int)
    r1 = r2 = jnp.zeros((P, 3), dtype)
    arc = jnp.zeros(P, dtype)
    # one vectorised call per (kind, quadrant), on the points it serves only: the quadrant
    # static, so that one of its branches is traced and its axis indexes statically
    combo = [(ws.kind[i], int(ws.quadrant[i, 0]), int(ws.quadrant[i, 1])) for i in o]
    for kind, ax, sg in sorted({combo[i] for i in np.flatnonzero(obj >= 0)}):
        sel = np.flatnonzero((obj >= 0) & np.array([c == (kind, ax, sg) for c in combo]))
        if kind == "ellipsoid":
            res = jax.vmap(ellipsoid_wrap_compiled)(
                PA[sel],
                PB[sel],
                jnp.asarray(ws.dims[o[sel], :3], dtype),
                jnp.full(len(sel), ax),
                jnp.full(len(sel), sg),
            )
            code = code.at[sel].set(res[0])
            r1, r2 = r1.at[sel].set(res[1]), r2.at[sel].set(res[2])
            arc = arc.at[sel].set(res[3])
            continue
        radius, length = (jnp.asarray(ws.dims[o[sel], j], dtype) for j in (0, 1))
        if kind == "cylinder":
            res = jax.vmap(lambda a, b_, r, h, ax=ax, sg=sg: cylinder_wrap(a, b_, r, h, ax, sg, True))(
                PA[sel], PB[sel], radius, length
            )
        elif kind == "torus":  # dims: (inner, outer, 0)
            res = jax.vmap(lambda a, b_, r, h, ax=ax, sg=sg: torus_wrap(a, b_, r, h, ax, sg, True))(
                PA[sel], PB[sel], radius, length
            )
        else:
            res = jax.vmap(lambda a, b_, r, ax=ax, sg=sg: sphere_wrap(a, b_, r, ax, sg))(
                PA[sel], PB[sel], radius
            )
        code = code.at[sel].set(res[0])
        r1 = r1.at[sel].set(res[1])
        r2 = r2.at[sel].set(res[2])
        arc = arc.at[sel].set(res[3])
    r1g = jnp.einsum("pij,pj->pi", R_GW, r1) + o_GW
    r2g = jnp.einsum("pij,pj->pi", R_GW, r2) + o_GW
    wrapped_len = _norm(r1g - x) + arc + _norm(x[nxt] - r2g)
    change = wrapped_len - seg
    path = jnp.asarray(paths.path)
    n = paths.num_paths
    mand = valid & (code == MANDATORY)
    wrapped = valid & (code == WRAPPED)
    first_mand = jax.ops.segment_min(jnp.where(mand, idx, P), path, num_segments=n)
    best = jax.ops.segment_min(jnp.where(wrapped, change, jnp.inf), path, num_segments=n)
    at_best = wrapped & (change == best[path])
    first_best = jax.ops.segment_min(jnp.where(at_best, idx, P), path, num_segments=n)
    pick = jnp.where(first_mand < P, first_mand, first_best)
    chosen = jnp.asarray(idx) == pick[path]
    return jnp.where(chosen, wrapped_len, seg)


def _wrap_segment(ws: WrapSet, obj: int, single: bool, p1: jax.Array, p2: jax.Array):
    kind = ws.kind[obj]
    radius, length = (float(v) for v in ws.dims[obj, :2])
    axis, sign = (int(v) for v in ws.quadrant[obj])
    if kind == "ellipsoid":
        return ellipsoid_wrap_compiled(p1, p2, ws.dims[obj, :3], axis, sign)
    if kind == "cylinder":
        return cylinder_wrap(p1, p2, radius, length, axis, sign, single)
    if kind == "torus":
        return torus_wrap(p1, p2, radius, length, axis, sign, single)
    return sphere_wrap(p1, p2, radius, axis, sign)


def wrapped_path_length(
    ws: WrapSet,
    wraps: tuple[tuple[int, int, int], ...],
    x: jax.Array,
    active: jax.Array,
    R_GB: jax.Array,
    p_GB: jax.Array,
    nodes: bool = False,
) -> jax.Array | tuple:
    """One path's length with its wraps applied in order, as OpenSim's GeometryPath does:
    ``x`` (n, 3) its points in Ground, ``active`` (n,) which are. Each wrap inserts its two
    tangent points on the segment (within its range) that it must wrap (the first whose
    straight line passes through it) or else on the one it lengthens least; with two or
    more wraps the sweep repeats up to 8 times until the length changes by < 0.5 mm.

    Shapes are static: the current path is the original points plus two slots per wrap,
    ordered by a key (a wrap's points get keys between those of the segment it wraps) and
    sorted; empty slots are masked.

    Not replicated (rare, state-dependent in OpenSim): its swap of the first two wraps'
    order when after the first sweep the first did not wrap and the second found a point
    inside its surface; its fall back to the previous wrap's tangent points when a line
    passes within 1e-5 of a sphere's centre; its early exit when a wrap's range has no
    active point (here that wrap alone is skipped)."""
    n, W = x.shape[0], len(wraps)
    N = n + 2 * W
    dtype = x.dtype
    owner = np.array([-1] * n + [ws_obj for ws_obj, _, _ in wraps for _ in (0, 1)], dtype=int)
    same_obj = (owner[:, None] == owner[None, :]) & (owner[:, None] >= 0)
    frames = []
    for obj, _, _ in wraps:
        b = int(ws.body[obj])
        R_GW = R_GB[b] @ jnp.asarray(ws.R[obj], dtype)
        frames.append((R_GW, p_GB[b] + R_GB[b] @ jnp.asarray(ws.p[obj], dtype)))
    single = W == 1
    idx = np.arange(n)

    def order(key, act):
        o = jnp.argsort(jnp.where(act, key, jnp.inf))
        ok = act[o]
        return o, ok[:-1] & ok[1:]

    def length(pos, act, key, arc_node, frz=None, fz=None):
        if frz is not None:  # the wrap points' Ground locations as OpenSim first cached them
            pos = jnp.where(fz[:, None], frz, pos)
        o, valid = order(key, act)
        A, B = o[:-1], o[1:]
        same = jnp.asarray(same_obj)[A, B]
        seg = jnp.where(same, arc_node[B], _norm(pos[B] - pos[A]))
        return jnp.sum(jnp.where(valid, seg, 0.0))

    def sweep(carry):
        pos, act, key, arc_node, frz, fz = carry
        eff = jnp.where(fz[:, None], frz, pos)
        for i, (obj, first, last) in enumerate(wraps):
            s1, s2 = n + 2 * i, n + 2 * i + 1
            act = act.at[s1].set(False).at[s2].set(False)
            rng = (idx >= first) & (idx <= last) & active
            any_on = jnp.any(rng)
            k_lo = jnp.min(jnp.where(rng, idx, n)).astype(dtype)
            k_hi = jnp.max(jnp.where(rng, idx, -1)).astype(dtype)
            o, valid = order(key, act)
            A, B = o[:-1], o[1:]
            valid = valid & (key[A] >= k_lo) & (key[B] <= k_hi) & ~jnp.asarray(same_obj)[A, B] & any_on
            R_GW, o_GW = frames[i]
            PA = (pos[A] - o_GW[None]) @ R_GW  # in the wrap frame
            PB = (pos[B] - o_GW[None]) @ R_GW
            # pairs not considered get harmless stand-ins (no NaN in their derivatives)
            PA = jnp.where(valid[:, None], PA, jnp.asarray([1e3, 0.0, 0.0], dtype)[None])
            PB = jnp.where(valid[:, None], PB, jnp.asarray([0.0, 1e3, 1.0], dtype)[None])
            code, r1, r2, arc = jax.vmap(lambda a, b, obj=obj: _wrap_segment(ws, obj, single, a, b))(PA, PB)
            r1g = jnp.einsum("ij,pj->pi", R_GW, r1) + o_GW[None]
            r2g = jnp.einsum("ij,pj->pi", R_GW, r2) + o_GW[None]
            change = _norm(eff[A] - r1g) + arc + _norm(r2g - eff[B]) - _norm(eff[B] - eff[A])
            mand = valid & (code == MANDATORY)
            wrapped = valid & (code == WRAPPED)
            any_mand = jnp.any(mand)
            sel = jnp.where(any_mand, jnp.argmax(mand), jnp.argmin(jnp.where(wrapped, change, jnp.inf)))
            found = any_mand | jnp.any(wrapped)
            kA, kB = key[A[sel]], key[B[sel]]
            pos = pos.at[s1].set(jnp.where(found, R_GW @ r1[sel] + o_GW, pos[s1]))
            pos = pos.at[s2].set(jnp.where(found, R_GW @ r2[sel] + o_GW, pos[s2]))
            key = key.at[s1].set(kA + (kB - kA) / 3.0).at[s2].set(kA + 2.0 * (kB - kA) / 3.0)
            act = act.at[s1].set(found).at[s2].set(found)
            arc_node = arc_node.at[s2].set(jnp.where(found, arc[sel], 0.0))
        # OpenSim caches a point's Ground location the first time it is asked for (at the
        # latest, by the length at the end of this sweep) and later sweeps' moves of its
        # wrap points do not reach that cache: their straight segments keep the first one
        frz = jnp.where((act & ~fz)[:, None], pos, frz)
        return pos, act, key, arc_node, frz, fz | act

    pos0 = jnp.concatenate([x, jnp.zeros((2 * W, 3), dtype)])
    act0 = jnp.concatenate([active, jnp.zeros(2 * W, bool)])
    key0 = jnp.concatenate([jnp.arange(n, dtype=dtype), jnp.zeros(2 * W, dtype)])
    carry = (pos0, act0, key0, jnp.zeros(N, dtype), pos0, jnp.zeros(N, bool))
    if single:
        final = sweep(carry)
        return (length(*final), final) if nodes else length(*final)

    def body(_, c):
        state, last, done = c
        new = sweep(state)
        L = length(*new)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), state, new)
        return state, jnp.where(done, last, L), done | (jnp.abs(L - last) < 0.0005)

    state, L, _ = jax.lax.fori_loop(0, 8, body, (carry, jnp.asarray(jnp.inf, dtype), jnp.array(False)))
    return (L, state) if nodes else L


def path_nodes(
    paths: PathSet, topo: Topology, q: jax.Array, R_GB: jax.Array, p_GB: jax.Array, arc_points: int = 8
) -> tuple[jax.Array, jax.Array]:
    """Every path as a polyline in Ground, for drawing: ``(n_paths, S, 3)`` points in path
    order and ``(n_paths, S)`` which are real (the rest pad the static shape). A path's
    active points, each wrap's two tangent points and, between them, ``arc_points`` points
    on the wrap surface along the shorter way from one tangent point to the other (a chord
    point pushed radially onto the cylinder, sphere, (scaled) ellipsoid or torus tube: the
    arc's length within a fraction of a per cent of the exact one for arcs up to a half
    turn; on a torus the wrap runs over a cylinder tangent to the tube, drawn on the tube)."""
    if not paths.num_paths:
        return jnp.zeros((0, 1, 3), q.dtype), jnp.zeros((0, 1), bool)
    x, active = point_locations(paths, topo, q, R_GB, p_GB)
    ws = paths.wraps
    dtype = x.dtype
    t = jnp.linspace(0.0, 1.0, arc_points + 2, dtype=dtype)[1:-1]
    per: list[tuple[jax.Array, jax.Array]] = []
    for k in range(paths.num_paths):
        lo, hi = int(paths.start[k]), int(paths.start[k + 1])
        n = hi - lo
        wraps = ws.path_wraps[k] if ws is not None else ()
        if not wraps:
            per.append((x[lo:hi], active[lo:hi]))
            continue
        assert ws is not None
        _, final = wrapped_path_length(ws, wraps, x[lo:hi], active[lo:hi], R_GB, p_GB, nodes=True)
        pos, act, key = final[0], final[1], final[2]
        extra_pos, extra_act, extra_key = [pos], [act], [key]
        for i, (obj, _, _) in enumerate(wraps):
            s1, s2 = n + 2 * i, n + 2 * i + 1
            b = int(ws.body[obj])
            R_GW = R_GB[b] @ jnp.asarray(ws.R[obj], dtype)
            o_GW = p_GB[b] + R_GB[b] @ jnp.asarray(ws.p[obj], dtype)
            a, c = (pos[s1] - o_GW) @ R_GW, (pos[s2] - o_GW) @ R_GW  # in the wrap frame
            m = a[None] + t[:, None] * (c - a)[None]
            radius = float(ws.dims[obj, 0])
            if ws.kind[obj] == "cylinder":  # push onto the surface around the z axis
                rho = _norm(m[:, :2])
                m = m.at[:, :2].multiply((radius / jnp.where(rho > 0, rho, 1.0))[:, None])
            elif ws.kind[obj] == "torus":  # onto the tube about the circle of the outer radius
                rho = _norm(m[:, :2])
                cc = m.at[:, 2].set(0.0) * (float(ws.dims[obj, 1]) / jnp.where(rho > 0, rho, 1.0))[:, None]
                dd = _norm(m - cc)
                m = cc + (m - cc) * (radius / jnp.where(dd > 0, dd, 1.0))[:, None]
            elif ws.kind[obj] == "ellipsoid":  # radially in the frame scaled to a unit sphere
                rho = _norm(m / jnp.asarray(ws.dims[obj, :3], dtype)[None])
                m = m / jnp.where(rho > 0, rho, 1.0)[:, None]
            else:
                rho = _norm(m)
                m = m * (radius / jnp.where(rho > 0, rho, 1.0))[:, None]
            extra_pos.append(m @ R_GW.T + o_GW[None])
            extra_act.append(jnp.broadcast_to(act[s1] & act[s2], t.shape))
            extra_key.append(key[s1] + t * (key[s2] - key[s1]))
        pos, act, key = (jnp.concatenate(v) for v in (extra_pos, extra_act, extra_key))
        o = jnp.argsort(jnp.where(act, key, jnp.inf))
        per.append((pos[o], act[o]))
    S = max([len(p) for p, _ in per] + [1])
    pts = jnp.stack([jnp.concatenate([p, jnp.zeros((S - len(p), 3), dtype)]) for p, _ in per])
    ok = jnp.stack([jnp.concatenate([a, jnp.zeros(S - len(a), bool)]) for _, a in per])
    # the real points first, in path order (a path without wraps keeps its file order)
    o = jnp.argsort(~ok, axis=1, stable=True)
    return jnp.take_along_axis(pts, o[..., None], axis=1), jnp.take_along_axis(ok, o, axis=1)
