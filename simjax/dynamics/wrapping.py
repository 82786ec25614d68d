"""Wrapping of path segments over surfaces fixed on bodies (OpenSim's ``WrapCylinder`` and
``WrapSphere`` as its ``GeometryPath`` applies them), as pure JAX functions of the two
points a segment joins, expressed in the wrap object's frame.

OpenSim's wrap algorithms are geometric constructions with case analysis (which tangent
point, which side of the quadrant, near or far side); here every case is computed and the
one OpenSim takes is selected by masks (``jnp.where``), so the functions are traceable,
vmap over segments and differentiate away from the switches between cases. Each returns
``(code, r1, r2, arc)``: OpenSim's ``WrapAction`` code (0 no wrap, 1 a point inside the
surface, 2 wrapped, 3 mandatory wrap: the straight segment passes through the object), the
tangent points and the length along the surface between them.

A path applies its wraps in order (:func:`wrap_path_length`): each wrap looks at the
segments of the current path within its point range, takes the first one it must wrap
(mandatory) or else the one it lengthens least, and inserts its two tangent points there;
with two or more wraps the sweep repeats (at most 8 times) until the length changes by
less than 0.5 mm between sweeps, as OpenSim does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NO_WRAP, INSIDE_RADIUS, WRAPPED, MANDATORY = 0, 1, 2, 3
_EPS = float(np.finfo(float).eps)
_LINE_EPSILON = 1e-5
_ROUNDOFF = 2e-13
_TANGENCY = 0.1 * np.pi / 180  # OpenSim's tangency tolerance when it slides tangent points
_MAX_SLIDES = 100


def _sgn(x: jax.Array) -> jax.Array:
    """OpenSim's DSIGN: +1 for x >= 0, -1 otherwise."""
    return jnp.where(x >= 0.0, 1, -1)


def _norm(v: jax.Array) -> jax.Array:
    n2 = jnp.sum(v * v, axis=-1)
    ok = n2 > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)


def _unit(v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """v / |v| and |v|, zero where |v| < machine epsilon (OpenSim's NormalizeOrZero)."""
    m = _norm(v)
    ok = m >= _EPS
    return jnp.where(ok, v / jnp.where(ok, m, 1.0), 0.0), m


def _closest_on_line(pt: jax.Array, line_pt: jax.Array, line: jax.Array) -> jax.Array:
    """The point of the line through ``line_pt`` along ``line`` closest to ``pt``."""
    v1, mag = _unit(pt - line_pt)
    v2, _ = _unit(line)
    return line_pt + jnp.dot(v1, v2) * mag * v2


def _intersect_lines(p1, p2, p3, p4):
    """The closest points of lines p1-p2 and p3-p4: (on the first, its fraction along
    p1-p2, on the second, whether they are not parallel)."""
    vec1, mag1 = _unit(p2 - p1)
    vec2, _ = _unit(p4 - p3)
    cross = jnp.cross(vec1, vec2)
    denom = jnp.dot(cross, cross)
    ok = denom > _ROUNDOFF
    d = jnp.where(ok, denom, 1.0)
    t = jnp.dot(p3 - p1, jnp.cross(vec1, cross)) / d
    s = jnp.dot(p3 - p1, jnp.cross(vec2, cross)) / d
    return p1 + s * vec1, s / jnp.where(mag1 > 0, mag1, 1.0), p3 + t * vec2, ok


def _segment_plane(a: jax.Array, b: jax.Array, normal: jax.Array, d: jax.Array):
    """Where segment a-b crosses the plane ``normal . x + d = 0``, and whether it does."""
    vec = b - a
    dp = jnp.dot(vec, normal)
    ok = jnp.abs(dp) >= _LINE_EPSILON
    t = (-d - jnp.dot(normal, a)) / jnp.where(ok, dp, 1.0)
    ok = ok & (t >= -_LINE_EPSILON) & (t <= 1.0 + _LINE_EPSILON)
    return a + t * vec, ok


def _sqrt(x: jax.Array) -> jax.Array:
    """sqrt(max(x, 0)) with a zero (not NaN) derivative where x <= 0."""
    ok = x > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, x, 1.0)), 0.0)


def _acos(x: jax.Array) -> jax.Array:
    """arccos of x clipped to [-1, 1], with a zero derivative at and beyond the ends."""
    ok = jnp.abs(x) < 1.0
    return jnp.where(ok, jnp.arccos(jnp.where(ok, x, 0.0)), jnp.where(x > 0, 0.0, jnp.pi))


def _asin(x: jax.Array) -> jax.Array:
    ok = jnp.abs(x) < 1.0
    return jnp.where(ok, jnp.arcsin(jnp.where(ok, x, 0.0)), jnp.where(x > 0, 0.5 * jnp.pi, -0.5 * jnp.pi))


def _pick(c, a, b):
    return jnp.where(c, a, b)


def _by_quadrant(sign, unconstrained, constrained):
    """The unconstrained case for sign 0, the constrained one otherwise (a Python sign picks
    one statically; an array sign computes both and selects)."""
    if isinstance(sign, int | np.integer):
        return unconstrained() if sign == 0 else constrained()
    u, c = unconstrained(), constrained()
    return tuple(jnp.where(sign == 0, a, b) for a, b in zip(u, c, strict=True))


_Z = np.array([0.0, 0.0, 1.0])


def _rot_z(angle: jax.Array, v: jax.Array) -> jax.Array:
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c * v[0] - s * v[1], s * v[0] + c * v[1], v[2]])


def cylinder_wrap(
    p1: jax.Array,
    p2: jax.Array,
    radius: float | jax.Array,
    length: float | jax.Array,
    axis: int | jax.Array,
    sign: int | jax.Array,
    single: bool,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """OpenSim's ``WrapCylinder`` (axis z, centred at the origin, ``length`` long) on the
    segment ``p1``-``p2`` (wrap frame): tangent points from the plane through the two
    points and the cylinder's apex line, then a helix between them. ``axis, sign``: the
    quadrant (sign 0: all). ``single``: the path has one wrap (OpenSim then keeps the
    tangent points as constructed; with several it slides them along the axis until the
    lines meet the helix within 0.1 degree)."""
    r, r2 = radius, radius * radius
    dn = jnp.asarray(_Z, dtype=p1.dtype)

    def axis_d2(p):
        return p[0] * p[0] + p[1] * p[1]

    inside = (axis_d2(p1) < r2) | (axis_d2(p2) < r2)
    near12, t12, near00, _ = _intersect_lines(
        p1, p2, jnp.array([0.0, 0.0, -0.5 * length]), jnp.array([0.0, 0.0, 0.5 * length])
    )
    hits = (jnp.sum((near12 - near00) ** 2) < r2) & (t12 > 0.0) & (t12 < 1.0)

    def candidates(p):
        pa = jnp.array([0.0, 0.0, 1.0]) * p[2]
        vv, dist0 = _unit(p - pa)
        sin_t = r / jnp.where(dist0 > 0, dist0, 1.0)
        dist = r * sin_t
        pp = pa + dist * vv
        h = _sqrt(r2 - dist * dist)
        uu = jnp.cross(dn, vv)
        return pa, dist0, pp + h * uu, pp - h * uu

    p11, d11, r1a, r1b = candidates(p1)
    p22, d22, r2a, r2b = candidates(p2)

    def unconstrained():
        code = jnp.where(hits, MANDATORY, NO_WRAP)
        u1a, u1b, u2a, u2b = (_unit(v)[0] for v in (r1a - p11, r1b - p11, r2a - p22, r2b - p22))
        d1, d2, d3, d4 = (jnp.dot(a, b) for a, b in ((u1a, u2a), (u1a, u2b), (u1b, u2a), (u1b, u2b)))
        c1 = (d1 > d2) & (d1 > d3) & (d1 > d4)
        c2 = ~c1 & (d2 > d3) & (d2 > d4)
        c3 = ~c1 & ~c2 & (d3 > d4)
        w1 = _pick(c1 | c2, r1a, r1b)
        w2 = _pick(c1 | c3, r2a, _pick(c2, r2b, _pick(c3, r2a, r2b)))
        far = jnp.array(False)
        long_wrap = jnp.array(False)
        return code, w1, w2, far, long_wrap

    def constrained():
        s1, s2 = _sgn(p1[axis]) == sign, _sgn(p2[axis]) == sign
        either = s1 | s2
        code = jnp.where(
            either,
            jnp.where(
                hits,
                MANDATORY,
                jnp.where(
                    (_sgn(p1[axis]) != _sgn(p2[axis])) & (_sgn(near12[axis]) != sign), WRAPPED, NO_WRAP
                ),
            ),
            WRAPPED,
        )
        m1a, m1b, m2a, m2b = r1a - p11, r1b - p11, r2a - p22, r2b - p22

        def angle(a, b):
            return _acos(jnp.dot(a, b) / (_norm(a) * _norm(b)))

        gt = angle(m1a, m2b) > angle(m1b, m2a)  # alpha > beta
        A, B = _sgn(r1a[axis]) == sign, _sgn(r1b[axis]) == sign
        C, D = _sgn(r2a[axis]) == sign, _sgn(r2b[axis]) == sign
        # "ab": (r1a, r2b) with far = alpha > beta; "ba": (r1b, r2a) with far = not that
        ab = jnp.where(
            A & B,
            ~C,
            jnp.where(A, True, jnp.where(B, False, jnp.where(C, False, jnp.where(D, True, gt)))),
        )
        neither = ~A & ~B & ~C & ~D
        w1, w2 = _pick(ab, r1a, r1b), _pick(ab, r2b, r2a)
        far = jnp.where(neither, True, jnp.where(ab, gt, ~gt))
        sum_musc = (w1 - p1) + (w2 - p2)
        sum_r = (w1 - p11) + (w2 - p22)
        long_wrap = jnp.dot(sum_r, sum_musc) < 0.0
        return code, w1, w2, far, long_wrap

    code, w1, w2, far, long_wrap = _by_quadrant(sign, unconstrained, constrained)

    # slide the tangent points along the axis onto the plane through p1, p2 and the apex
    t = d11 / (d11 + d22)
    mpt = p1 + t * (p2 - p1)
    axispt = jnp.array([0.0, 0.0, 1.0]) * mpt[2]
    l1, _ = _unit(p1 - axispt)
    l2, _ = _unit(p2 - axispt)
    pn, _ = _unit(jnp.cross(l1, l2))
    pn, _ = _unit(pn)
    vert1, _ = _unit(jnp.cross(dn, pn))
    vert2, _ = _unit(jnp.cross(pn, dn))
    apex1, apex2 = axispt + r * vert1, axispt + r * vert2
    closer1 = jnp.sum((mpt - apex1) ** 2) < jnp.sum((mpt - apex2) ** 2)
    apex = _pick(far, _pick(closer1, apex2, apex1), _pick(closer1, apex1, apex2))
    uu, _ = _unit(p1 - apex)
    vv, _ = _unit(p2 - apex)
    pn, _ = _unit(jnp.cross(uu, vv))
    d = -jnp.dot(p1, pn)
    r1p, ok1 = _segment_plane(w1 - 10.0 * dn, w1 + 10.0 * dn, pn, d)
    r2p, ok2 = _segment_plane(w2 - 10.0 * dn, w2 + 10.0 * dn, pn, d)
    d12 = jnp.sum((p11 - p22) ** 2)
    ok1 = ok1 & (jnp.sum((_closest_on_line(r1p, p11, p22) - p22) ** 2) < d12)
    ok2 = ok2 & (jnp.sum((_closest_on_line(r2p, p11, p22) - p11) ** 2) < d12)
    w1, w2 = _pick(ok1, r1p, w1), _pick(ok2, r2p, w2)
    half = 0.5 * length
    beyond = ((w1[2] < -half) | (w1[2] > half)) & ((w2[2] < -half) | (w2[2] > half))
    code = jnp.where(inside, INSIDE_RADIUS, jnp.where(beyond, NO_WRAP, code))

    def spiral(w1, w2):
        axial = w2[2] - w1[2]
        u = w1 * jnp.array([1.0, 1.0, 0.0])
        v = w2 * jnp.array([1.0, 1.0, 0.0])
        theta = jnp.arctan2(jnp.cross(u, v)[2], jnp.dot(u, v))
        theta = jnp.where(long_wrap, 2.0 * jnp.pi - theta, theta)
        return theta, axial, _sqrt((r * theta) ** 2 + axial * axial)

    if not single:
        sense = jnp.where(long_wrap, -1.0, 1.0)

        def adjust(p, w, wp):
            pr, _ = _unit(w - p)
            rw, _ = _unit(wp - w)
            alpha = _acos(pr[2])
            omega = _acos(rw[2])
            off = jnp.abs(alpha - omega) > _TANGENCY
            p1a = w + (p[2] - w[2]) * dn
            w1a = w + (wp[2] - w[2]) * dn
            _, _, hit, _ = _intersect_lines(p, wp, p1a, w1a)
            return jnp.where(off, w + 1.5 * (hit - w), w), off

        def body(_, carry):
            w1, w2, done = carry
            theta, axial, L = spiral(w1, w2)
            n = jnp.maximum(jnp.floor(jax.lax.stop_gradient(L) / 0.002), 1.0)
            tt = 1.0 / n

            def spiral_pt(w1, t):
                return _rot_z(sense * t * theta, w1) + dn * (t * axial)

            n1, a1 = adjust(p1, w1, spiral_pt(w1, tt))
            n2, a2 = adjust(p2, w2, spiral_pt(n1, 1.0 - tt))
            go = ~done & (n >= 2) & (a1 | a2)
            return _pick(go, n1, w1), _pick(go, n2, w2), done | ~go

        w1, w2, _ = jax.lax.fori_loop(0, _MAX_SLIDES, body, (w1, w2, jnp.array(False)))
    _, _, arc = spiral(w1, w2)
    return code, w1, w2, arc


def sphere_wrap(
    p1: jax.Array, p2: jax.Array, radius: float | jax.Array, axis: int | jax.Array, sign: int | jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """OpenSim's ``WrapSphere`` (centred at the origin) on the segment ``p1``-``p2`` (wrap
    frame): the tangent points in the plane through both points and the centre, and the
    great-circle arc between them; ``axis, sign`` the quadrant (sign 0: all)."""
    R = radius
    n1, n2 = _norm(p1), _norm(p2)
    inside = (n1 < R) | (n2 < R)
    ri = p1 - p2
    mp = -p2
    a = jnp.dot(ri, ri)
    b = -2.0 * jnp.dot(mp, ri)
    c = jnp.dot(mp, mp) - R * R
    disc = b * b - 4.0 * a * c
    sq = _sqrt(disc)
    l1 = (-b + sq) / (2.0 * a)
    l2 = (-b - sq) / (2.0 * a)
    crosses = (disc >= 0.0) & (0.0 < l1) & (l1 < 1.0) & (0.0 < l2) & (l2 < 1.0) & ~(l1 < l2)
    p1p2, _ = _unit(p1 - p2)
    np2, _ = _unit(p2)
    n, _ = _unit(jnp.cross(p1p2, np2))

    def tangents(p, pn):
        y, _ = _unit(-p)
        z = jnp.cross(n, y)
        a_ = _asin(R / jnp.where(pn > 0, pn, 1.0))
        k = pn * jnp.cos(a_)
        ca, sa = jnp.cos(a_), jnp.sin(a_)
        return p + (ca * y - sa * z) * k, p + (ca * y + sa * z) * k

    r1a, r1b = tangents(p1, n1)
    r2a, r2b = tangents(p2, n2)
    u1a, u1b, u2a, u2b = (_unit(v)[0] for v in (r1a, r1b, r2a, r2b))
    j1, j2, j3, j4 = (jnp.dot(x, y) for x, y in ((u1a, u2a), (u1a, u2b), (u1b, u2a), (u1b, u2b)))
    c1 = (j1 > j2) & (j1 > j3) & (j1 > j4)
    c2 = ~c1 & (j2 > j3) & (j2 > j4)
    c3 = ~c1 & ~c2 & (j3 > j4)
    w1 = _pick(c1 | c2, r1a, r1b)
    w2 = _pick(c1 | c3, r2a, r2b)
    code0 = jnp.where(crosses, WRAPPED, NO_WRAP)

    def unconstrained():
        return code0, w1, w2, jnp.array(False)

    def constrained():
        s1, s2 = _sgn(p1[axis]) == sign, _sgn(p2[axis]) == sign
        v1, mag = _unit(-p1)
        t = jnp.dot(v1, p1p2) * mag
        mm = p1 + t * p1p2
        tt = -t
        hits = (jnp.dot(mm, mm) < R * R) & (tt > 0.0) & (tt < 1.0)
        side = (_sgn(p1[axis]) != _sgn(p2[axis])) & (_sgn(mm[axis]) != sign)
        code = jnp.where(
            crosses & (s1 | s2), jnp.where(hits, MANDATORY, jnp.where(side, WRAPPED, NO_WRAP)), code0
        )
        wrapaxis = jnp.zeros(3, p1.dtype).at[axis].set(jnp.asarray(sign, p1.dtype))
        sm, _ = _unit(-p1 - p2)
        k1 = jnp.dot(u1a, sm) > jnp.dot(u1b, sm)
        k2 = jnp.dot(u2a, sm) > jnp.dot(u2b, sm)
        q1, q11 = _pick(k1, r1a, r1b), _pick(k1, r1b, r1a)
        q2, q22 = _pick(k2, r2a, r2b), _pick(k2, r2b, r2a)
        sm2, _ = _unit((q1 - p1) + (q2 - p2))
        flip = jnp.dot(sm2, wrapaxis) < 0.0
        q1, q2 = _pick(flip, q11, q1), _pick(flip, q22, q2)
        far_c = jnp.dot(q1 + q2, (q1 - p1) + (q2 - p2)) < 0.0
        use = ~(s1 & s2)
        return code, _pick(use, q1, w1), _pick(use, q2, w2), use & far_c

    code, w1, w2, far = _by_quadrant(sign, unconstrained, constrained)
    code = jnp.where(inside, INSIDE_RADIUS, code)
    e1, _ = _unit(w1)
    e2, _ = _unit(w2)
    ang = _acos(jnp.dot(e1, e2))
    ang = jnp.where(far, -(2.0 * jnp.pi - ang), ang)
    return code, w1, w2, R * ang
