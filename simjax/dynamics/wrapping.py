"""Wrapping of path segments over surfaces fixed on bodies (OpenSim's ``WrapCylinder``,
``WrapSphere``, ``WrapEllipsoid`` and ``WrapTorus`` as its ``GeometryPath`` applies them),
as pure JAX functions of the two points a segment joins, expressed in the wrap object's
frame.

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


# ---------------------------------------------------------------------------- ellipsoid
_MU_BLEND_MIN, _MU_BLEND_MAX = 0.7073, 0.9  # OpenSim's blend of the fan and axial ("Frans") planes
_FAN = 300  # fan samples (OpenSim uses the 298 interior ones)
_SV_BLEND = 0.3
_TANGENT_STEPS = 200  # budget of the flattened tangent-point search (OpenSim's loops, step by step)
_MAX_ARC_SEGMENTS = 499


def _newton_closest(u: jax.Array, a: jax.Array, on: jax.Array) -> jax.Array:
    """OpenSim's closest point on the ellipsoid with semi-axes ``a`` to ``u`` (Graphics
    Gems IV; ``on`` all True), or on the ellipse of the axes where ``on`` is True, the
    other coordinate kept (its special case for points near a coordinate plane): Newton on
    the Lagrange parameter from 0 (inside) or max(a)|u| (outside), stopped when the
    polynomial's value is below 1e-9 (64 steps at most), the point from the parameter it
    stopped at."""
    a2 = a * a
    k = jnp.where(on, a2 * u * u, 0.0)
    inside = jnp.sum(jnp.where(on, (u / a) ** 2, 0.0)) < 1.0
    t0 = jnp.where(inside, 0.0, jnp.max(jnp.where(on, a, 0.0)) * _norm(jnp.where(on, u, 0.0)))

    def f_fp(t):
        P = jnp.where(on, t + a2, 1.0)
        inv = jnp.where(on, 1.0 / P, 0.0)
        prod = jnp.prod(P)
        others = (prod / P) ** 2
        f = prod * prod - jnp.sum(k * others)
        # d/dt of prod^2 - sum_i k_i prod_{j != i} P_j^2
        fp = 2.0 * prod * prod * jnp.sum(inv) - jnp.sum(k * 2.0 * others * (jnp.sum(inv) - inv))
        return f, fp

    def body(_, c):
        t, done = c
        f, fp = f_fp(t)
        stop = done | (jnp.abs(f) < 1e-9)
        return jnp.where(stop, t, t - f / jnp.where(fp != 0, fp, 1.0)), stop

    t, _ = jax.lax.fori_loop(0, 64, body, (t0, jnp.array(False)))
    return jnp.where(on, a2 * u / (t + a2), u)


_ALL = np.array([True, True, True])


def _closest_on_ellipsoid(u: jax.Array, a: jax.Array) -> jax.Array:
    return _newton_closest(u, a, jnp.asarray(_ALL))


def _tangent_residual(z, p, vs, vs4, a):
    """OpenSim's four conditions on a tangent point r (z = r, d): in the wrap plane, on the
    ellipsoid, and the ellipsoid's tangent plane (normal 2r/a^2, offset d) through r and p."""
    r, d = z[:3], z[3]
    nr = 2.0 * r / (a * a)
    return jnp.stack(
        [jnp.dot(vs, r) + vs4, jnp.sum((r / a) ** 2) - 1.0, jnp.dot(nr, r) + d, jnp.dot(nr, p) + d]
    )


def _tangent_point(pe, r0, p, vs, vs4, a):
    """OpenSim's ``calcTangentPoint``: from ``r0`` its damped Gauss-Newton search (a step
    1/16 of the Levenberg-Marquardt one, its damping raised x4 until the residual drops,
    then the step doubled while it keeps dropping), stopped when the squared residual is
    below 1e-8 (50 outer steps at most), replayed step by step in a fixed-length loop:
    OpenSim's stopped iterate, differentiated as such (the derivative of the length that
    OpenSim computes)."""
    p_, vs_, vs4_, a_ = p, vs, vs4, a
    a2 = a_ * a_

    def ssq_of(r, d):
        return jnp.sum(_tangent_residual(jnp.concatenate([r, d[None]]), p_, vs_, vs4_, a_) ** 2)

    r = r0
    d = -jnp.dot(2.0 * r / a2, r)
    ssq = ssq_of(r, d)
    pm, _ = _unit(p_)
    z4 = jnp.zeros(4, r.dtype)
    # carry: r, d, ssq, ssqo, alpha, fakt, vt, v, JTJ, dd, phase, nit, nit2
    one = jnp.asarray(1.0, r.dtype)
    i0 = jnp.asarray(0)
    init = (r, d, ssq, ssq, 0.01 * one, 0.5 * one, z4, z4, jnp.zeros((4, 4), r.dtype), one, i0, i0, i0)

    def step(_, c):
        r, d, ssq, ssqo, alpha, fakt, vt, v, JTJ, dd, phase, nit, nit2 = c
        # phase 0: start an outer step (or finish: phase 3)
        go = (ssq > 1e-8) & (nit < 50)
        e = _tangent_residual(jnp.concatenate([r, d[None]]), p_, vs_, vs4_, a_)
        Jt = jnp.zeros((4, 4), r.dtype)
        Jt = Jt.at[:3, 0].set(vs_).at[:3, 1].set(2.0 * r / a2).at[:3, 2].set(4.0 * r / a2)
        Jt = Jt.at[:3, 3].set(2.0 * p_ / a2).at[3, 2].set(1.0).at[3, 3].set(1.0)
        pr, _ = _unit(p_ - r)
        pcos = jnp.dot(pr, pm)
        dd0 = jnp.where(pcos > 0.1, 1.0 - jnp.where(pcos > 0.1, pcos, 0.0) ** 100, 1.0)
        s0 = (r, d, ssq, ssqo, alpha, fakt, vt, -Jt @ e, Jt @ Jt.T, dd0,
              jnp.where(go, 1, 3), nit + 1, jnp.asarray(0))  # fmt: skip
        # phase 1: raise the damping until the residual drops (the steps accumulate)
        c1 = (ssq >= ssqo) & (nit2 < 1000)
        M = JTJ.at[jnp.diag_indices(4)].set(jnp.diag(JTJ) * (1.0 + alpha))
        vt1 = dd * (jnp.linalg.inv(M) @ v) / 16.0
        r1, d1 = r + vt1[:3], d + vt1[3]
        s1_go = (r1, d1, ssq_of(r1, d1), ssq, alpha * 4.0, fakt, vt1, v, JTJ, dd, phase, nit, nit2 + 1)
        half, two = jnp.asarray(0.5, r.dtype), jnp.asarray(2)
        s1_end = (r, d, ssq, ssqo, alpha / 8.0, half, vt, v, JTJ, dd, two, nit, jnp.asarray(0))
        # phase 2: double the step while the residual keeps dropping, then undo the last
        c2 = (ssq <= ssqo) & (nit2 < 1000)
        f2 = fakt * 2.0
        r2, d2 = r + vt[:3] * f2, d + vt[3] * f2
        s2_go = (r2, d2, ssq_of(r2, d2), ssq, alpha, f2, vt, v, JTJ, dd, phase, nit, nit2 + 1)
        r3, d3 = r - vt[:3] * fakt, d - vt[3] * fakt
        q3 = ssq_of(r3, d3)
        s2_end = (r3, d3, q3, q3, alpha, fakt, vt, v, JTJ, dd, jnp.asarray(0), nit, nit2)
        s1 = jax.tree.map(lambda x, y: jnp.where(c1, x, y), s1_go, s1_end)
        s2 = jax.tree.map(lambda x, y: jnp.where(c2, x, y), s2_go, s2_end)
        return jax.tree.map(
            lambda a0, a1, a2_, a3: jnp.select([phase == 0, phase == 1, phase == 2], [a0, a1, a2_], a3),
            s0,
            s1,
            s2,
            c,
        )

    out = jax.lax.fori_loop(0, _TANGENT_STEPS, step, init)
    return jnp.where(jnp.abs(pe) < 1e-4, p, out[0]), out[10] == 3


def _ellipsoid_arc(r1, r2, a, vs, vs4, factor, far):
    """OpenSim's ``CalcDistanceOnEllipsoid`` (scaled frame): the chord if shorter than 1 mm,
    else a polyline of int(chord / 1 mm) segments (499 at most) whose points are rays from
    the point a0 where the wrap plane meets the coordinate axis most normal to it, at equal
    angles between r1 and r2 (the far way round when ``far``), met with the ellipsoid."""
    chord = _norm(r1 - r2)
    length_m = chord / factor
    n = jnp.clip(jnp.floor(jax.lax.stop_gradient(length_m) / 0.001), 1.0, _MAX_ARC_SEGMENTS)
    imax = jnp.argmax(jnp.abs(vs))
    u = jax.nn.one_hot(imax, 3, dtype=r1.dtype)
    vsi = jnp.dot(vs, u)
    a0 = u * (-vs4 / jnp.where(vsi != 0, vsi, 1.0))
    ar1, _ = _unit(r1 - a0)
    ar2, _ = _unit(r2 - a0)
    phi0 = _acos(jnp.dot(ar1, ar2))
    dphi = jnp.where(far, -(2.0 * jnp.pi - phi0), phi0) / n
    vsz, _ = _unit(jnp.cross(ar1, ar2))
    vsy = jnp.cross(vsz, ar1)
    k = jnp.arange(1, _MAX_ARC_SEGMENTS, dtype=r1.dtype)  # interior points 1..498
    phi = k * dphi
    ray = jnp.cos(phi)[:, None] * ar1[None] + jnp.sin(phi)[:, None] * vsy[None]
    f1 = ray / a[None]
    f2 = a0 / a
    aa = jnp.sum(f1 * f1, axis=1)
    bb = 2.0 * (f1 @ f2)
    cc = jnp.dot(f2, f2) - 1.0
    mu3 = (-bb + _sqrt(bb * bb - 4.0 * aa * cc)) / (2.0 * aa)
    s = a0[None] + mu3[:, None] * ray
    s = jnp.where((k < n)[:, None], s, r2[None])
    pts = jnp.concatenate([r1[None], s, r2[None]])
    poly = jnp.sum(_norm(pts[1:] - pts[:-1]))
    short = length_m < 0.001
    arc = jnp.where(short, chord, poly)
    # the first and last interior points (OpenSim's wrong-way test), valid when n >= 2
    return arc, s[0], s[jnp.maximum(n.astype(int) - 2, 0)], (~short) & (n >= 2)


def ellipsoid_wrap(
    p1: jax.Array, p2: jax.Array, radii: jax.Array, axis: int | jax.Array, sign: int | jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """OpenSim's ``WrapEllipsoid`` (centred at the origin, semi-axes ``radii``; its
    ``hybrid`` method) on the segment ``p1``-``p2`` (wrap frame), in the frame scaled by
    3 / sum(radii) as OpenSim does: a wrap only where the straight segment passes through
    the ellipsoid (then always "mandatory"); the wrap plane through p1, p2 and a point c1
    on the surface (the closest point to where the segment crosses the coordinate plane
    most normal to it, blended with the average direction of a fan of 298 closest-point
    directions along the chord when the segment is less than 25 degrees from that plane's
    normal; moved to the allowed side for a quadrant); the tangent points by OpenSim's
    iterative search within that plane; the length along the surface as OpenSim's polyline
    (1 mm segments), the far way round when the near way leaves a quadrant's tangent
    points backwards."""
    dtype = p1.dtype
    radii = jnp.asarray(radii, dtype)
    factor = 3.0 / jnp.sum(radii)
    P1, P2, a = p1 * factor, p2 * factor, radii * factor
    p1e = jnp.sum((P1 / a) ** 2) - 1.0
    p2e = jnp.sum((P2 / a) ** 2) - 1.0
    inside = (p1e < -1e-4) | (p2e < -1e-4)
    p1m, _ = _unit(P1)
    p2m, _ = _unit(P2)
    collinear = jnp.abs(jnp.dot(p1m, p2m) - 1.0) < 1e-4
    p1p2 = P1 - P2
    f1, f2 = p1p2 / a, P2 / a
    aa, bb, cc = jnp.dot(f1, f1), 2.0 * jnp.dot(f1, f2), jnp.dot(f2, f2) - 1.0
    disc = bb * bb - 4.0 * aa * cc
    sq = _sqrt(disc)
    aa_ = jnp.where(aa > 0, aa, 1.0)
    l1, l2 = (-bb + sq) / (2.0 * aa_), (-bb - sq) / (2.0 * aa_)
    hits = (disc >= 0.0) & (0.0 < l1) & (l1 < 1.0) & (0.0 < l2) & (l2 < 1.0)
    code = jnp.where(inside, INSIDE_RADIUS, jnp.where(collinear | ~hits, NO_WRAP, MANDATORY))
    # stand-ins where it does not wrap (no NaN in the unused branch's derivatives)
    l1 = jnp.where(hits, l1, 0.75)
    l2 = jnp.where(hits, l2, 0.25)
    q1, q2 = P2 + l1 * p1p2, P2 + l2 * p1p2
    q12 = q2 - q1
    mu, _ = _unit(p1p2)
    mu = jnp.abs(mu)
    best = jnp.argmax(mu)
    qb = q12[best]
    tb = -q1[best] / jnp.where(qb != 0, qb, 1.0)
    sv_frans = q1 + tb * q12
    mub = mu[best]
    edge = jnp.where(tb > 1.0 - _SV_BLEND, (1.0 - tb) / _SV_BLEND, 1.0)
    s = jnp.where((tb < 0.0) | (tb > 1.0), 0.0, jnp.where(tb < _SV_BLEND, tb / _SV_BLEND, edge))
    mub = jnp.where((mub > _MU_BLEND_MIN) & (s < 1.0), _MU_BLEND_MIN + s * (mub - _MU_BLEND_MIN), mub)
    # the fan: directions from chord points to their closest surface points, averaged
    tt = jnp.arange(1, _FAN - 1, dtype=dtype) / _FAN
    svs = q1[None] + tt[:, None] * q12[None]
    # one batch of closest points: the fan's, and the axial one in the plane normal to `best`
    us = jnp.concatenate([svs, sv_frans[None]])
    ons = jnp.concatenate([jnp.ones((len(tt), 3), bool), (jnp.arange(3) != best)[None]])
    cs = jax.vmap(_newton_closest, in_axes=(0, None, 0))(us, a, ons)
    c_frans = cs[-1]
    blades = jax.vmap(lambda c, u: _unit(c - u)[0])(cs[:-1], svs)
    vsum, _ = _unit(jnp.sum(blades, axis=0))
    mid = q1 + 0.5 * q12
    c_fan = _closest_on_ellipsoid(mid + vsum, a)
    w = (mub - _MU_BLEND_MIN) / (_MU_BLEND_MAX - _MU_BLEND_MIN)
    c_blend = _closest_on_ellipsoid(w * c_frans + (1.0 - w) * c_fan, a)
    frans_only = mub >= _MU_BLEND_MAX
    fan_only = mub <= _MU_BLEND_MIN
    c1 = jnp.where(frans_only, c_frans, jnp.where(fan_only, c_fan, c_blend))
    fan_weight = jnp.where(frans_only, -jnp.inf, jnp.where(fan_only, 1.0, 1.0 - w))
    start = c1
    if not (isinstance(sign, int | np.integer) and sign == 0):
        flip = (sign != 0) & (_sgn(c1[axis]) != sign)
        flipped = c1.at[axis].multiply(-1.0)
        fw = jnp.minimum(fan_weight, 1.0)
        moved = _closest_on_ellipsoid(flipped.at[axis].multiply(1.0 - jnp.where(fw > 0, fw, 0.0)), a)
        start = jnp.where(flip, flipped, c1)
        c1 = jnp.where(flip, jnp.where(fw > 0, moved, flipped), c1)
    vs, _ = _unit(jnp.cross(p1p2, P1 - c1))
    vs4 = -jnp.dot(vs, c1)
    rr, _ = jax.vmap(_tangent_point, in_axes=(0, None, 0, None, None, None))(
        jnp.stack([p1e, p2e]), start, jnp.stack([P1, P2]), vs, vs4, a
    )
    r1, r2 = rr[0], rr[1]
    if isinstance(sign, int | np.integer) and sign == 0:
        arc = _ellipsoid_arc(r1, r2, a, vs, vs4, factor, jnp.array(False))[0]
    else:  # both ways round at once; the far one where the near one runs backwards
        arcs, w1, w2, interior = jax.vmap(_ellipsoid_arc, in_axes=(None,) * 6 + (0,))(
            r1, r2, a, vs, vs4, factor, jnp.array([False, True])
        )
        d1, _ = _unit(P1 - r1)
        e1, _ = _unit(w1[0] - r1)
        d2, _ = _unit(P2 - r2)
        e2, _ = _unit(w2[0] - r2)
        wrong = (sign != 0) & interior[0] & ((jnp.dot(d1, e1) > 0.0) | (jnp.dot(d2, e2) > 0.0))
        arc = jnp.where(wrong, arcs[1], arcs[0])
    return code, r1 / factor, r2 / factor, arc / factor


_ellipsoid_jit = jax.jit(lambda p1, p2, radii, axis, sign: ellipsoid_wrap(p1, p2, radii, axis, sign))


def ellipsoid_wrap_compiled(p1, p2, radii, axis, sign):
    """:func:`ellipsoid_wrap` through one ``jax.jit`` (quadrant as data), so that eager
    callers reuse its compiled program; inlined when traced."""
    return _ellipsoid_jit(p1, p2, jnp.asarray(radii, p1.dtype), jnp.asarray(axis), jnp.asarray(sign))


# -------------------------------------------------------------------------------- torus
_TORUS_CYL_LENGTH = 10000.0  # the length of the cylinder OpenSim puts on the torus's tube
_LM_TRIALS = 48  # budget of the replayed search (20000 random segments about a torus: all stop by 24)
_DWARF = 1.0e-38


def _circle_resid(u: jax.Array, p: jax.Array, n: jax.Array, r: jax.Array) -> jax.Array:
    """OpenSim's residual of its search for the point of the line ``p + u n`` nearest the
    circle of radius ``r`` about the z axis: ``d/du (|x|^2 - 4 r rho)`` (its factor 2 on
    the radius term included: the stationary points are those of the distance to the
    circle of radius 2r)."""
    c2 = 2.0 * jnp.dot(p, n)
    c3 = p[0] * n[0] + p[1] * n[1]
    c4 = n[0] * n[0] + n[1] * n[1]
    c5 = p[0] * p[0] + p[1] * p[1]
    g = u * u * c4 + 2.0 * c3 * u + c5
    sg = jnp.sqrt(jnp.where(g > 0, g, 1.0))
    return c2 + 2.0 * u - 2.0 * r * (2.0 * c4 * u + 2.0 * c3) / sg


def _lmdif_1d(f):
    """OpenSim's ``lmdif_C`` (MINPACK's Levenberg-Marquardt as OpenSim changed it: a
    forward-difference Jacobian with a fixed step 1e-5, the initial step bound 0.2 where
    0.2 |x0| <= 1e-4) on one residual of one unknown from x = 0 with ftol = xtol = 1e-4,
    gtol = 0, factor 0.2, replayed trial step by trial step (MINPACK's ``lmpar`` for one
    unknown, its trust-region updates and tests) in a fixed-length loop: the iterate
    OpenSim stops at. Returns it and whether the search stopped within the budget."""
    zero = jnp.zeros(())
    f0 = f(zero)

    def jac(x, fx):
        return (f(x + 1e-5) - fx) / 1e-5

    J0 = jac(zero, f0)
    diag0 = jnp.where(J0 == 0, 1.0, jnp.abs(J0))
    # carry: x, fx, fnorm, diag, delta, par, first, xnorm, done
    init = (zero, f0, jnp.abs(f0), diag0, jnp.asarray(0.2), zero, jnp.array(True), zero, jnp.array(False))

    def lmpar(J, fx, d, delta, par_in):
        R, qtb = -J, -fx
        Rs = jnp.where(R != 0, R, 1.0)
        x_gn = qtb / Rs
        dx = jnp.abs(d * x_gn)
        fp0 = dx - delta
        gn = fp0 <= 0.1 * delta
        dxs = jnp.where(dx > 0, dx, 1.0)
        w = d * (d * x_gn / dxs) / Rs
        parl0 = (fp0 / delta) / (w * w)
        gnorm = jnp.abs(R * qtb / d)
        paru0 = gnorm / delta
        paru0 = jnp.where(paru0 == 0, _DWARF / jnp.minimum(delta, 0.1), paru0)
        par0 = jnp.minimum(jnp.maximum(par_in, parl0), paru0)
        par0 = jnp.where(par0 == 0, gnorm / dxs, par0)

        def it(_, c):
            par, parl, paru, fp, x, stop = c
            par1 = jnp.where(par == 0, jnp.maximum(_DWARF, 0.001 * paru), par)
            s2 = R * R + par1 * d * d
            xp = R * qtb / s2
            dxp = jnp.abs(d * xp)
            fpn = dxp - delta
            brk = (jnp.abs(fpn) <= 0.1 * delta) | ((parl == 0) & (fpn <= fp) & (fp < 0))
            ww = d * (d * xp / jnp.where(dxp > 0, dxp, 1.0)) / jnp.sqrt(s2)
            parc = (fpn / delta) / (ww * ww)
            parl1 = jnp.where(fpn > 0, jnp.maximum(parl, par1), parl)
            paru1 = jnp.where(fpn < 0, jnp.minimum(paru, par1), paru)
            par2 = jnp.where(brk, par1, jnp.maximum(parl1, par1 + parc))
            new = (par2, parl1, paru1, fpn, xp, brk)
            return jax.tree.map(lambda a, b: jnp.where(stop, a, b), c, new)

        out = jax.lax.fori_loop(0, 10, it, (par0, parl0, paru0, fp0, x_gn, jnp.array(False)))
        return jnp.where(gn, x_gn, out[4]), jnp.where(gn, 0.0, out[0])

    def trial(_, c):
        x, fx, fnorm, diag, delta, par, first, xnorm, done = c
        J = jac(x, fx)
        diag = jnp.maximum(diag, jnp.abs(J))
        stop = done | (fx == 0) | (J == 0)  # gnorm <= gtol = 0
        xs, par = lmpar(J, fx, diag, delta, par)
        p = -xs
        pnorm = jnp.abs(diag * p)
        delta = jnp.where(first, jnp.minimum(delta, pnorm), delta)
        f1 = f(x + p)
        fnorm1 = jnp.abs(f1)
        fn = jnp.where(fnorm > 0, fnorm, 1.0)
        actred = jnp.where(0.1 * fnorm1 < fnorm, 1.0 - (fnorm1 / fn) ** 2, -1.0)
        t1 = jnp.abs(J * p) / fn
        t2 = jnp.sqrt(par) * pnorm / fn
        prered = t1 * t1 + t2 * t2 / 0.5
        dirder = -(t1 * t1 + t2 * t2)
        ratio = jnp.where(prered != 0, actred / jnp.where(prered != 0, prered, 1.0), 0.0)
        temp = jnp.where(actred >= 0, 0.5, 0.5 * dirder / (dirder + 0.5 * actred))
        temp = jnp.where((0.1 * fnorm1 >= fnorm) | (temp < 0.1), 0.1, temp)
        low = ratio <= 0.25
        grow = ~low & ((par == 0) | (ratio >= 0.75))
        delta = jnp.where(low, temp * jnp.minimum(delta, pnorm / 0.1), jnp.where(grow, pnorm / 0.5, delta))
        par = jnp.where(low, par / temp, jnp.where(grow, 0.5 * par, par))
        ok = ratio >= 1e-4
        x = jnp.where(ok, x + p, x)
        fx = jnp.where(ok, f1, fx)
        xnorm = jnp.where(ok, jnp.abs(diag * x), xnorm)
        fnorm = jnp.where(ok, fnorm1, fnorm)
        first = first & ~ok
        conv = ((jnp.abs(actred) <= 1e-4) & (prered <= 1e-4) & (0.5 * ratio <= 1.0)) | (delta <= 1e-4 * xnorm)
        new = (x, fx, fnorm, diag, delta, par, first, xnorm, conv)
        keep = c[:-1] + (jnp.array(True),)
        return jax.tree.map(lambda a, b: jnp.where(stop, a, b), keep, new)

    out = jax.lax.fori_loop(0, _LM_TRIALS, trial, init)
    return out[0], out[-1]


def _torus_closest(p1, p2, radius):
    """One pass of OpenSim's ``findClosestPoint``: the stopped iterate u of its search from
    ``p1`` towards ``p2``, with the derivative of the residual's root (implicit function
    theorem at u), the point ``p1 + u n`` and its distance to the circle of ``radius``."""
    d = p2 - p1
    mag = _norm(d)
    n = d / jnp.where(mag > 0, mag, 1.0)
    ps, ns, rs = (jax.lax.stop_gradient(v) for v in (p1, n, radius))
    u0, _ = _lmdif_1d(lambda u: _circle_resid(u, ps, ns, rs))
    u0 = jax.lax.stop_gradient(u0)
    slope = jax.lax.stop_gradient(jax.grad(_circle_resid)(u0, ps, ns, rs))
    step = -_circle_resid(u0, p1, n, radius) / jnp.where(slope != 0, slope, 1.0)
    u = u0 + step - jax.lax.stop_gradient(step)
    a = p1 + u * n
    rho = _norm(a[:2])
    dist = _sqrt(jnp.dot(a, a) + radius * radius - 2.0 * radius * rho)
    return a, dist


def torus_wrap(
    p1: jax.Array,
    p2: jax.Array,
    inner: float | jax.Array,
    outer: float | jax.Array,
    axis: int | jax.Array,
    sign: int | jax.Array,
    single: bool,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """OpenSim's ``WrapTorus`` (about the z axis, centred at the origin: a tube of radius
    ``inner`` about the circle of radius ``outer``) on the segment ``p1``-``p2`` (wrap
    frame), as OpenSim computes it: the point c of that circle nearest the line (its
    Levenberg-Marquardt search from each end, replayed; the pass whose line point is nearer
    the circle, or for a quadrant the one on its side, none if neither is), then OpenSim's
    ``WrapCylinder`` of radius ``inner`` tangent to the circle at c (axis along the
    circle's tangent, 10000 long) wrapping on its side towards the torus's axis (its
    quadrant "+x"). The code is 2 (wrapped) where that cylinder wraps, mandatory or not
    (OpenSim's torus reports either as "wrapped"), 0 otherwise."""
    dtype = p1.dtype
    inner = jnp.asarray(inner, dtype)
    outer = jnp.asarray(outer, dtype)
    a1, dist1 = _torus_closest(p1, p2, outer)
    a2, dist2 = _torus_closest(p2, p1, outer)
    nearer1 = dist1 < dist2
    if isinstance(sign, int | np.integer) and sign == 0:
        use1, found = nearer1, jnp.array(True)
    else:
        s1, s2 = _sgn(a1[axis]) == sign, _sgn(a2[axis]) == sign
        use1 = jnp.where(s1 & s2, nearer1, s1)
        found = (sign == 0) | s1 | s2
        use1 = jnp.where(sign == 0, nearer1, use1)
    a = jnp.where(use1, a1, a2)
    rho = _norm(a[:2])
    c = jnp.concatenate([a[:2] * (outer / jnp.where(rho > 0, rho, 1.0)), jnp.zeros(1, dtype)])
    # the cylinder's frame: x from c towards the torus's axis, y = -z, z = x cross y
    ex, _ = _unit(-c)
    ey = jnp.asarray([0.0, 0.0, -1.0], dtype)
    Rc = jnp.stack([ex, ey, jnp.cross(ex, ey)])  # rows: the cylinder's axes in the torus frame
    o = jnp.stack([outer, jnp.zeros((), dtype), jnp.zeros((), dtype)])
    q1, q2 = Rc @ p1 + o, Rc @ p2 + o
    code, w1, w2, arc = cylinder_wrap(q1, q2, inner, _TORUS_CYL_LENGTH, 0, 1, single)
    code = jnp.where(found & ((code == WRAPPED) | (code == MANDATORY)), WRAPPED, NO_WRAP)
    return code, Rc.T @ (w1 - o), Rc.T @ (w2 - o), arc
