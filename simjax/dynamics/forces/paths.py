"""Forces along paths (OpenSim's ``PathSpring``): a tension in a path pulls each segment's
end points toward each other.

Statics per element: the index of its path in the Model's ``PathSet``. The tension acts
as point forces at the active points (each point pulled along its two segments), plus,
at a moving point, the generalized force on the coordinates that move its station
(virtual work of the point force through the station's derivative). Together they are
``-T dL/dq``: the tension times the path's moment arms. A path that wraps (over
``sj.WrapCylinder`` / ``sj.WrapSphere``) gets the same ``-T dL/dq`` from the reverse-mode
derivative of its length with respect to the body poses (each body's force and moment
are the tension's virtual work per unit translation and rotation of that body) and to the
moving stations' coordinates: exact for whatever the wrap does, its tangent points and the
bodies the wrap objects are on included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ... import _spatial as sp
from ...model.context import Context
from ...model.paths import PathSet
from ..paths import path_lengths, point_activity, point_stations, segments, wrapped_paths
from .kernel import ForceKernel, Params, scatter_point_forces


def _unit(d: jax.Array) -> tuple[jax.Array, jax.Array]:
    n2 = jnp.sum(d * d, axis=-1)
    ok = n2 > 0
    n = jnp.where(ok, jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)
    return jnp.where(ok[:, None], d / jnp.where(ok, n, 1.0)[:, None], 0.0), n


@dataclass(frozen=True)
class PathGeometry:
    """Every path's state at a Context: lengths (n_paths,), lengthening speeds (n_paths,),
    and what applying tensions needs."""

    length: jax.Array
    speed: jax.Array
    e: jax.Array  # (P, 3) unit vector from each segment's start to its end (0 where none)
    nxt: jax.Array  # (P,) each point's next active point
    starts: jax.Array  # (P,) whether a point starts a segment
    r: jax.Array  # (P, 3) each point's offset from its body origin, in Ground


def path_geometry(paths: PathSet, ctx: Context) -> PathGeometry:
    """Lengths and lengthening speeds of every path from the State's Position and Velocity
    caches (point velocities from the body velocities, plus the moving stations' rates)."""
    state = ctx.state
    topo = ctx._model.topology(state.use_euler_angles)
    pc, q = state.position_cache, state.q
    body = paths.body
    R = pc.R_GB[body]
    station, dstation = jax.jvp(
        lambda q_: point_stations(paths, topo, q_), (q,), (state.velocity_cache.qdot,)
    )
    r = jnp.einsum("pij,pj->pi", R, station)
    x = pc.p_GB[body] + r
    active = point_activity(paths, topo, q)
    nxt, starts = segments(paths, active)
    e, n = _unit(x[nxt] - x)
    V = ctx.V_GB
    v = V[body, 3:] + sp.cross(V[body, :3], r) + jnp.einsum("pij,pj->pi", R, dstation)
    seg_len = jnp.where(starts, n, 0.0)
    seg_speed = jnp.where(starts, jnp.sum(e * (v[nxt] - v), axis=-1), 0.0)
    ids = jnp.asarray(paths.path)
    length = jax.ops.segment_sum(seg_len, ids, num_segments=paths.num_paths)
    speed = jax.ops.segment_sum(seg_speed, ids, num_segments=paths.num_paths)
    e = jnp.where(starts[:, None], e, 0.0)
    wrapped = wrapped_paths(paths)
    if wrapped.any():  # their lengths and speeds through the wraps
        R_GB, p_GB = pc.R_GB, pc.p_GB
        dR = jnp.einsum("bij,bjk->bik", jax.vmap(sp.skew)(V[:, :3]), R_GB)
        L, dL = jax.jvp(
            lambda q_, R_, p_: path_lengths(paths, topo, q_, R_, p_),
            (q, R_GB, p_GB),
            (state.velocity_cache.qdot, dR, V[:, 3:]),
        )
        length = jnp.where(wrapped, L, length)
        speed = jnp.where(wrapped, dL, speed)
    return PathGeometry(length, speed, e, nxt, starts, r)


def apply_tensions(
    paths: PathSet, ctx: Context, g: PathGeometry, T: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Body forces (nb, 6) and mobility forces (nu,) of tensions ``T`` (n_paths,) in the
    paths: ``-T dL/dq`` as point forces plus the moving stations' generalized forces."""
    state = ctx.state
    wrapped = wrapped_paths(paths)
    T_wrapped = jnp.where(wrapped, T, 0.0)
    T = jnp.where(wrapped, 0.0, T)
    t = T[paths.path]  # each point's path tension
    pull = t[:, None] * g.e  # on each segment's start, toward its end
    P = len(paths.body)
    f = pull - jnp.zeros((P, 3), pull.dtype).at[g.nxt].add(jnp.where(g.starts[:, None], pull, 0.0))
    F = scatter_point_forces(ctx.num_bodies, paths.body, g.r, f)
    tau = jnp.zeros(ctx.nu, state.q.dtype)
    if paths.moving:
        topo = ctx._model.topology(state.use_euler_angles)
        R = state.position_cache.R_GB[paths.body]
        f_body = jnp.einsum("pji,pj->pi", R, f)  # the point forces in their bodies' frames
        _, vjp = jax.vjp(lambda q_: point_stations(paths, topo, q_), state.q)
        (Q_q,) = vjp(f_body)
        qi, ui = _moving_slots(paths, topo)
        tau = tau.at[ui].add(Q_q[qi])
    if wrapped.any():
        F_w, Q_w = _wrapped_forces(paths, ctx, T_wrapped)
        F = F + F_w
        tau = tau + Q_w
    return F, tau


def _wrapped_forces(paths: PathSet, ctx: Context, T: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``-T dL/dq`` of the wrapped paths as body forces (nb, 6: moment about the body
    origin and force, in Ground) and mobility forces on the moving stations' coordinates."""
    state = ctx.state
    topo = ctx._model.topology(state.use_euler_angles)
    pc = state.position_cache
    _, vjp = jax.vjp(lambda q_, R_, p_: path_lengths(paths, topo, q_, R_, p_), state.q, pc.R_GB, pc.p_GB)
    G_q, G_R, G_p = vjp(-T)
    M = jnp.einsum("bij,bkj->bik", pc.R_GB, G_R)  # R G^T per body
    moment = jnp.stack([M[:, 1, 2] - M[:, 2, 1], M[:, 2, 0] - M[:, 0, 2], M[:, 0, 1] - M[:, 1, 0]], axis=1)
    F = jnp.concatenate([moment, G_p], axis=1)
    tau = jnp.zeros(ctx.nu, state.q.dtype)
    if paths.moving:
        qi, ui = _moving_slots(paths, topo)
        tau = tau.at[ui].add(G_q[qi])
    return F, tau


def _moving_slots(paths: PathSet, topo: Any) -> tuple[np.ndarray, np.ndarray]:
    """The q and u slots of the coordinates that move the moving points' stations
    (static), where their generalized forces go."""
    slots = sorted(
        {
            (int(topo.q_start[b]) + w, int(topo.u_start[b]) + w)
            for m in paths.moving
            for spec in m.axes
            if spec is not None
            for (_, b, w, _, _) in [spec]
        }
    )
    qi, ui = (np.asarray(x, dtype=int) for x in zip(*slots, strict=True))
    return qi, ui


@dataclass(frozen=True)
class PathSpring(ForceKernel):
    """OpenSim's ``PathSpring``: tension ``k (L - L0) (1 + c dL/dt)`` while the path is
    longer than its resting length ``L0``, none while it is slack; potential energy
    ``k (L - L0)^2 / 2`` (taut)."""

    def calc(self, P: Params, ctx: Context, S: tuple, w: jax.Array):
        paths = ctx._model.paths
        assert paths is not None  # a path force's Model has its path
        idx = np.asarray(S, dtype=int).reshape(-1)
        g = path_geometry(paths, ctx)
        stretch = jnp.maximum(g.length[idx] - P["resting_length"], 0.0)
        tension = w * P["stiffness"] * stretch * (1.0 + P["dissipation"] * g.speed[idx])
        T = jnp.zeros(paths.num_paths, tension.dtype).at[idx].add(tension)
        return apply_tensions(paths, ctx, g, T)

    def potential(self, P: Params, ctx: Context, S: tuple) -> jax.Array:
        paths = ctx._model.paths
        assert paths is not None  # a path force's Model has its path
        idx = np.asarray(S, dtype=int).reshape(-1)
        state = ctx.state
        pc = state.position_cache
        topo = ctx._model.topology(state.use_euler_angles)
        length = path_lengths(paths, topo, state.q, pc.R_GB, pc.p_GB)
        stretch = jnp.maximum(length[idx] - P["resting_length"], 0.0)
        return 0.5 * P["stiffness"] * stretch**2
