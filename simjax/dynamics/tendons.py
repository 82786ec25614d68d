"""Tendon lengths (MuJoCo's ``mj_tendon``): every tendon of a Model at once.

A fixed tendon's length is ``sum coef q``. A spatial tendon's is the sum of its segments'
lengths, each divided by its pulley branch's divisor; a segment runs from a site to a site,
straight, or wrapped around a sphere or a cylinder as MuJoCo's ``mju_wrap`` does it (the
circle wrap in the plane through the sphere's centre and both sites, or in the cylinder's
cross-section with the height spread along the unrolled path; a side site picks the side,
and a side site inside the geom MuJoCo's inside wrap). Every branch of ``mju_wrap`` is a
mask, so shapes are static and the lengths are pure functions of q and the body poses.

Derivatives follow MuJoCo's definition of the tendon Jacobian ``ten_J``: the tangent points
are held fixed on the wrap geom's body (``stop_gradient`` of their place in the geom's frame
and of the arc length). For the circle wraps this is the exact derivative of the length (the
tangent points make the wrapped path locally shortest); for the inside wrap, which MuJoCo
solves by Newton's method to 1e-6, it is MuJoCo's Jacobian rather than the derivative of its
approximate length.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..model.tendons import CYLINDER, TendonSet
from ..model.topology import Topology

_MINVAL = 1e-15  # MuJoCo's mjMINVAL


def _sqrt(x: jax.Array) -> jax.Array:
    """sqrt with a finite derivative where a masked branch reaches x <= 0."""
    ok = x > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, x, 1.0)), 0.0)


def _norm(v: jax.Array) -> jax.Array:
    return _sqrt(jnp.sum(v * v, axis=-1))


def _normalize(v: jax.Array) -> jax.Array:
    """MuJoCo's ``mju_normalize``: v / |v|, or the first unit vector when |v| < mjMINVAL."""
    n = _norm(v)
    small = n < _MINVAL
    e0 = jnp.zeros_like(v).at[..., 0].set(1.0)
    return jnp.where(small[..., None], e0, v / jnp.where(small, 1.0, n)[..., None])


def _intersect(p1: jax.Array, p2: jax.Array, p3: jax.Array, p4: jax.Array) -> jax.Array:
    """Whether the 2D segments p1-p2 and p3-p4 cross (MuJoCo's ``is_intersect``)."""
    det = (p4[..., 1] - p3[..., 1]) * (p2[..., 0] - p1[..., 0]) - (p4[..., 0] - p3[..., 0]) * (
        p2[..., 1] - p1[..., 1]
    )
    ok = jnp.abs(det) >= _MINVAL
    det = jnp.where(ok, det, 1.0)
    a = (
        (p4[..., 0] - p3[..., 0]) * (p1[..., 1] - p3[..., 1])
        - (p4[..., 1] - p3[..., 1]) * (p1[..., 0] - p3[..., 0])
    ) / det
    b = (
        (p2[..., 0] - p1[..., 0]) * (p1[..., 1] - p3[..., 1])
        - (p2[..., 1] - p1[..., 1]) * (p1[..., 0] - p3[..., 0])
    ) / det
    return ok & (a >= 0) & (a <= 1) & (b >= 0) & (b <= 1)


def _length_circle(p0: jax.Array, p1: jax.Array, ind: jax.Array, radius: jax.Array) -> jax.Array:
    c = jnp.clip(jnp.sum(_normalize(p0) * _normalize(p1), axis=-1), -1.0, 1.0)
    inner = jnp.abs(c) < 1
    angle = jnp.where(inner, jnp.arccos(jnp.where(inner, c, 0.0)), jnp.where(c > 0, 0.0, jnp.pi))
    cross = p0[..., 1] * p1[..., 0] - p0[..., 0] * p1[..., 1]
    flip = ((cross > 0) & ind) | ((cross < 0) & ~ind)
    return radius * jnp.where(flip, 2 * jnp.pi - angle, angle)


def _wrap_circle(
    d: jax.Array, sd: jax.Array, has_side: jax.Array, radius: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """MuJoCo's ``wrap_circle``: (length or -1, the two 2D tangent points (S, 4))."""
    e0, e1 = d[:, :2], d[:, 2:]
    sqlen0, sqlen1 = jnp.sum(e0 * e0, -1), jnp.sum(e1 * e1, -1)
    sqrad = radius * radius
    none = (sqlen0 < sqrad) | (sqlen1 < sqrad) | (radius < _MINVAL)
    dif = e1 - e0
    dd = jnp.sum(dif * dif, -1)
    none |= dd < _MINVAL
    a = jnp.clip(-jnp.sum(dif * e0, -1) / jnp.where(dd < _MINVAL, 1.0, dd), 0.0, 1.0)
    tmp = a[:, None] * dif + e0
    none |= (jnp.sum(tmp * tmp, -1) > sqrad) & (~has_side | (jnp.sum(sd * tmp, -1) >= 0))
    s0 = _sqrt(sqlen0 - sqrad)
    s1 = _sqrt(sqlen1 - sqrad)
    l0 = jnp.where(sqlen0 > 0, sqlen0, 1.0)
    l1 = jnp.where(sqlen1 > 0, sqlen1, 1.0)
    sols, goods = [], []
    for sgn in (1.0, -1.0):
        a0 = jnp.stack([(e0[:, 0] * sqrad + sgn * radius * e0[:, 1] * s0) / l0,
                        (e0[:, 1] * sqrad - sgn * radius * e0[:, 0] * s0) / l0], -1)  # fmt: skip
        a1 = jnp.stack([(e1[:, 0] * sqrad - sgn * radius * e1[:, 1] * s1) / l1,
                        (e1[:, 1] * sqrad + sgn * radius * e1[:, 0] * s1) / l1], -1)  # fmt: skip
        g_side = jnp.sum(_normalize(a0 + a1) * sd, -1)
        g_short = -jnp.sum((a0 - a1) ** 2, -1)
        good = jnp.where(has_side, g_side, g_short)
        good = jnp.where(_intersect(e0, a0, e1, a1), -10000.0, good)
        sols.append((a0, a1))
        goods.append(good)
    first = goods[0] > goods[1]
    p0 = jnp.where(first[:, None], sols[0][0], sols[1][0])
    p1 = jnp.where(first[:, None], sols[0][1], sols[1][1])
    none |= _intersect(e0, p0, e1, p1)
    wlen = _length_circle(p0, p1, ~first, radius)
    return jnp.where(none, -1.0, wlen), jnp.concatenate([p0, p1], -1)


def _wrap_inside(d: jax.Array, radius: jax.Array) -> tuple[jax.Array, jax.Array]:
    """MuJoCo's ``wrap_inside`` (side site inside the geom): (0 or -1, the 2D point twice)."""
    e0, e1 = d[:, :2], d[:, 2:]
    len0, len1 = _norm(e0), _norm(e1)
    dif = e1 - e0
    dd = jnp.sum(dif * dif, -1)
    none = (len0 <= radius) | (len1 <= radius) | (radius < _MINVAL) | (len0 < _MINVAL) | (len1 < _MINVAL)
    a = -jnp.sum(dif * e0, -1) / jnp.where(dd > _MINVAL, dd, 1.0)
    near = e0 + a[:, None] * dif
    none |= (dd > _MINVAL) & (a > 0) & (a < 1) & (_norm(near) <= radius)
    avg = radius[:, None] * _normalize(0.5 * (e0 + e1))
    L0 = jnp.where(len0 > 0, len0, 1.0)
    L1 = jnp.where(len1 > 0, len1, 1.0)
    A, B = radius / L0, radius / L1
    cosG = (len0 * len0 + len1 * len1 - dd) / (2 * L0 * L1)
    none |= cosG < -1 + _MINVAL
    use_avg = cosG > 1 - _MINVAL
    G = jnp.arccos(jnp.clip(cosG, -1 + _MINVAL, 1 - _MINVAL))

    def f_of(z: jax.Array) -> jax.Array:
        return jnp.arcsin(A * z) + jnp.arcsin(B * z) - 2 * jnp.arcsin(z) + G

    z = jnp.full_like(radius, 1 - 1e-7)
    f = f_of(z)
    use_avg |= f > 0
    running = ~use_avg
    converged = jnp.zeros_like(use_avg)

    def newton(_: int, carry: tuple) -> tuple:
        z, f, running, converged, use_avg = carry
        converged = converged | (running & (jnp.abs(f) <= 1e-6))
        step = running & ~converged
        df = (A / jnp.maximum(_MINVAL, _sqrt(1 - z * z * A * A))
              + B / jnp.maximum(_MINVAL, _sqrt(1 - z * z * B * B))
              - 2 / jnp.maximum(_MINVAL, _sqrt(1 - z * z)))  # fmt: skip
        bad = step & (df > -_MINVAL)
        z1 = z - f / jnp.where(df > -_MINVAL, -1.0, df)
        bad |= step & (z1 > z)
        use_avg |= bad
        running &= ~bad
        step &= ~bad
        z = jnp.where(step, z1, z)
        f = jnp.where(step, f_of(jnp.clip(z, -1.0, 1.0)), f)
        over = step & (f > 1e-6)
        return z, f, running & ~over, converged, use_avg | over

    # MuJoCo's 20 iterations at most; a lane stops where MuJoCo's loop stops
    z, f, running, converged, use_avg = jax.lax.fori_loop(0, 20, newton, (z, f, running, converged, use_avg))
    converged = converged | (running & (jnp.abs(f) <= 1e-6))
    use_avg |= running & ~converged
    ccw = e0[:, 0] * e1[:, 1] - e0[:, 1] * e1[:, 0] > 0
    z = jnp.clip(z, -1.0, 1.0)
    vec = _normalize(jnp.where(ccw[:, None], e0, e1))
    ang = jnp.arcsin(z) - jnp.arcsin(jnp.where(ccw, A, B) * z)
    c, s = jnp.cos(ang), jnp.sin(ang)
    pnt = radius[:, None] * jnp.stack([c * vec[:, 0] - s * vec[:, 1], s * vec[:, 0] + c * vec[:, 1]], -1)
    pnt = jnp.where(use_avg[:, None], avg, pnt)
    return jnp.where(none, -1.0, 0.0), jnp.concatenate([pnt, pnt], -1)


def _wrap(
    x0: jax.Array, x1: jax.Array, xpos: jax.Array, xmat: jax.Array, radius: jax.Array,
    cyl: jax.Array, has_side: jax.Array, side: jax.Array,
) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """MuJoCo's ``mju_wrap`` for S segments at once: (wrap length or -1 (S,), the two tangent
    points in the geom's frame (S, 2, 3))."""
    p0 = jnp.einsum("sji,sj->si", xmat, x0 - xpos)
    p1 = jnp.einsum("sji,sj->si", xmat, x1 - xpos)
    none = (_norm(p0) < _MINVAL) | (_norm(p1) < _MINVAL)
    ax0 = _normalize(p0)
    normal = jnp.cross(p0, p1)
    nrm = _norm(normal)
    normal = _normalize(normal)
    a = jnp.abs(ax0)
    i = jnp.where((a[:, 1] > a[:, 0]) & (a[:, 1] > a[:, 2]), 1, 0)
    i = jnp.where((a[:, 2] > a[:, 0]) & (a[:, 2] > a[:, 1]), 2, i)
    alt = 1.0 - jax.nn.one_hot(i, 3, dtype=p0.dtype)
    normal = jnp.where((nrm < _MINVAL)[:, None], _normalize(jnp.cross(ax0, alt)), normal)
    ax1 = _normalize(jnp.cross(normal, ax0))
    ex = jnp.zeros_like(p0).at[:, 0].set(1.0)
    ey = jnp.zeros_like(p0).at[:, 1].set(1.0)
    ax0 = jnp.where(cyl[:, None], ex, ax0)
    ax1 = jnp.where(cyl[:, None], ey, ax1)
    d = jnp.stack(
        [jnp.sum(p0 * ax0, -1), jnp.sum(p0 * ax1, -1), jnp.sum(p1 * ax0, -1), jnp.sum(p1 * ax1, -1)], -1
    )
    s = jnp.einsum("sji,sj->si", xmat, side - xpos)
    sd = radius[:, None] * _normalize(jnp.stack([jnp.sum(s * ax0, -1), jnp.sum(s * ax1, -1)], -1))
    inside = has_side & (_norm(s) < radius)
    w_c, pnt_c = _wrap_circle(d, sd, has_side, radius)
    w_i, pnt_i = _wrap_inside(d, radius)
    wlen = jnp.where(inside, w_i, w_c)
    pnt = jnp.where(inside[:, None], pnt_i, pnt_c)
    none |= wlen < 0
    res0 = ax0 * pnt[:, 0:1] + ax1 * pnt[:, 1:2]
    res1 = ax0 * pnt[:, 2:3] + ax1 * pnt[:, 3:4]
    L0 = _norm(p0[:, :2] - res0[:, :2])
    L1 = _norm(p1[:, :2] - res1[:, :2])
    tot = L0 + wlen + L1
    tot = jnp.where(tot > 0, tot, 1.0)
    z0 = p0[:, 2] + (p1[:, 2] - p0[:, 2]) * L0 / tot
    z1 = p0[:, 2] + (p1[:, 2] - p0[:, 2]) * (L0 + wlen) / tot
    res0 = jnp.where(cyl[:, None], res0.at[:, 2].set(z0), res0)
    res1 = jnp.where(cyl[:, None], res1.at[:, 2].set(z1), res1)
    wlen = jnp.where(cyl, _sqrt(wlen * wlen + (z1 - z0) ** 2), wlen)
    return jnp.where(none, -1.0, wlen), jnp.stack([res0, res1], 1)


def _slots(tendons: TendonSet, topo: Topology) -> np.ndarray:
    return np.asarray([int(topo.q_start[b]) + int(w) for b, w in tendons.fixed_coord], dtype=int)


def tendon_lengths(
    tendons: TendonSet, topo: Topology, q: jax.Array, R_GB: jax.Array, p_GB: jax.Array
) -> jax.Array:
    """Every tendon's length (n_tendons,) at coordinates ``q`` and body poses ``R_GB`` (nb,
    3, 3), ``p_GB`` (nb, 3) (those of ``q``; MuJoCo's ``ten_length``)."""
    n = tendons.num_tendons
    out = jnp.zeros((n,), dtype=q.dtype)
    if len(tendons.fixed_tendon):
        terms = jnp.asarray(tendons.fixed_coef, q.dtype) * q[_slots(tendons, topo)]
        out = out + jax.ops.segment_sum(terms, jnp.asarray(tendons.fixed_tendon), num_segments=n)
    if not len(tendons.seg_tendon):
        return out
    sb = tendons.site_body
    x_site = jnp.einsum("nij,nj->ni", R_GB[sb], jnp.asarray(tendons.site_pos, q.dtype)) + p_GB[sb]
    x0, x1 = x_site[tendons.seg_site[:, 0]], x_site[tendons.seg_site[:, 1]]
    straight = _norm(x1 - x0)
    seg = straight
    if np.any(tendons.seg_wrap):
        gb = tendons.seg_geom_body
        xmat = jnp.einsum("sij,sjk->sik", R_GB[gb], jnp.asarray(tendons.seg_geom_rot, q.dtype))
        xpos = jnp.einsum("sij,sj->si", R_GB[gb], jnp.asarray(tendons.seg_geom_pos, q.dtype)) + p_GB[gb]
        has_side = jnp.asarray(tendons.seg_side >= 0)
        side = x_site[np.maximum(tendons.seg_side, 0)]
        radius = jnp.asarray(tendons.seg_radius, q.dtype)
        # MuJoCo's Jacobian: the tangent points ride on the geom's body, the arc is fixed
        # (so the wrap itself is evaluated outside differentiation)
        sg = jax.lax.stop_gradient
        cyl = jnp.asarray(tendons.seg_wrap == CYLINDER)
        wlen, res = _wrap(sg(x0), sg(x1), sg(xpos), sg(xmat), radius, cyl, has_side, sg(side))
        arc = wlen
        t0 = jnp.einsum("sij,sj->si", xmat, res[:, 0]) + xpos
        t1 = jnp.einsum("sij,sj->si", xmat, res[:, 1]) + xpos
        wrapped = _norm(t0 - x0) + arc + _norm(x1 - t1)
        seg = jnp.where(jnp.asarray(tendons.seg_wrap > 0) & (wlen >= 0), wrapped, straight)
    seg = seg / jnp.asarray(tendons.seg_divisor, q.dtype)
    return out + jax.ops.segment_sum(seg, jnp.asarray(tendons.seg_tendon), num_segments=n)


def tendon_body_gradients(
    tendons: TendonSet, topo: Topology, q: jax.Array, R_GB: jax.Array, p_GB: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Lengths (n_tendons,) and each length's gradient with respect to a small rotation
    and translation of each body (n_tendons, nb, 6; ``[about the body origin; of the
    origin]`` in Ground), the q-dependence of the fixed tendons left out: the spatial
    force a unit tension puts on each body is ``-G`` and the lengthening speed is
    ``sum_b G_b . V_GB`` (plus the fixed terms)."""

    def lengths(delta: jax.Array) -> jax.Array:
        th, dp = delta[:, :3], delta[:, 3:]
        zero = jnp.zeros_like(th[:, 0])
        skew = jnp.stack(
            [jnp.stack([zero, -th[:, 2], th[:, 1]], -1),
             jnp.stack([th[:, 2], zero, -th[:, 0]], -1),
             jnp.stack([-th[:, 1], th[:, 0], zero], -1)], 1
        )  # fmt: skip
        R = R_GB + jnp.einsum("bij,bjk->bik", skew, R_GB)
        return tendon_lengths(tendons, topo, jax.lax.stop_gradient(q), R, p_GB + dp)

    delta0 = jnp.zeros((R_GB.shape[0], 6), q.dtype)
    L, vjp = jax.vjp(lengths, delta0)
    G = jax.vmap(lambda e: vjp(e)[0])(jnp.eye(tendons.num_tendons, dtype=q.dtype))
    return L, G


def fixed_terms(tendons: TendonSet, topo: Topology) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixed tendons' terms: (tendon, u slot, coef) arrays (``qdot = u`` there)."""
    u = np.asarray([int(topo.u_start[b]) + int(w) for b, w in tendons.fixed_coord], dtype=int)
    return tendons.fixed_tendon, u, tendons.fixed_coef
