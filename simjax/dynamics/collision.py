"""Collision primitives: one pure, vmappable kernel per pair of geometry kinds.

Each kernel takes two geometries in MuJoCo's conventions and returns a fixed number of
candidate contacts as a :class:`Contact` (static shapes, no Python branching on values), so
that a driver can ``jax.vmap`` it over every candidate pair of that kind and keep the same
compiled program whatever is touching.

Geometry arguments (the layout of MuJoCo's ``geom_xpos``, ``geom_xmat`` and ``geom_size``):

- ``pos``: (3,) world position of the geometry's frame origin (m).
- ``mat``: (3, 3) rotation matrix, geometry frame to world (columns are the local axes).
- ``size``: (3,) size parameters: plane — ignored (the plane is the local x-y plane, its
  outward normal local +z, infinite); sphere — ``(radius, _, _)``; capsule —
  ``(radius, half-length, _)`` with the segment along local z; ellipsoid — the semi-axes;
  cylinder — ``(radius, half-length, _)`` along local z; box — the half-sizes.

Kernel ``<kind1>_<kind2>(pos1, mat1, size1, pos2, mat2, size2, margin=inf)`` follows
MuJoCo's geom order (plane < sphere < capsule < ellipsoid < cylinder < box): the
contact normal points from geometry 1 into geometry 2, as MuJoCo's ``contact.frame``
does. Per contact:

- ``dist``: signed distance between the surfaces (m), negative when they overlap.
  Contacts that do not exist (a box corner turned away from the plane, a second capsule
  contact that a configuration lacks) have ``dist = +inf``. A driver keeps a contact when
  ``dist <= margin``, MuJoCo's rule, with MuJoCo's pair margin: the *sum* of the two
  geoms' margins (or the ``<pair>``'s). ``margin`` is passed to the kernels only because
  MuJoCo chooses *which* contacts to report among those within it (the first four box
  corners; a cylinder's other points only with its nearest one).
- ``pos``: the midpoint between the two surfaces along the normal, MuJoCo's
  ``contact.pos``.
- ``frame``: (3, 3) rows ``[normal, tangent1, tangent2]``, orthonormal and right-handed,
  completed from the normal (and, for plane–capsule, the capsule axis) exactly as MuJoCo's
  ``mju_makeFrame`` completes ``contact.frame``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# MuJoCo's mjMINVAL: below this a norm or a determinant counts as zero.
MINVAL = 1e-15


class Contact(NamedTuple):
    """Fixed-size contacts of one geometry pair (add a leading axis under ``vmap``).

    Attributes:
        dist: (n,) signed surface distance (m), negative in penetration; ``+inf`` for a
            contact slot that does not exist in this configuration.
        pos: (n, 3) contact point in world (m): the midpoint between the surfaces.
        frame: (n, 3, 3) contact frames, rows ``[normal, tangent1, tangent2]``; the normal
            points from geometry 1 to geometry 2.
    """

    dist: jax.Array
    pos: jax.Array
    frame: jax.Array


# NumPy, not jnp: a JAX array made at import would start JAX's backend before the user's
# sj.configure(); float32 so that they take the dtype of what they meet (float32 or float64)
_EX = np.array([1.0, 0.0, 0.0], dtype=np.float32)
_EY = np.array([0.0, 1.0, 0.0], dtype=np.float32)
_EZ = np.array([0.0, 0.0, 1.0], dtype=np.float32)


def _normalize(v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``v / |v|`` and ``|v|``; ``(1, 0, 0)`` and 0 where ``|v| < MINVAL`` (MuJoCo's
    ``mju_normalize3``), with finite gradients there."""
    n2 = v @ v
    small = n2 < MINVAL * MINVAL
    n = jnp.sqrt(jnp.where(small, 1.0, n2))
    return jnp.where(small, _EX, v / n), jnp.where(small, 0.0, n)


def make_frame(normal: jax.Array, tangent: jax.Array | None = None) -> jax.Array:
    """Complete a contact frame from its normal, as MuJoCo's ``mju_makeFrame`` does.

    Args:
        normal: (3,) contact normal (normalised here).
        tangent: (3,) optional preferred first tangent (MuJoCo uses the capsule axis for
            plane–capsule contacts); ignored when shorter than 0.5.

    Returns:
        (3, 3) rows ``[normal, tangent1, tangent2]``, orthonormal, ``tangent2 = normal x
        tangent1``. Without a usable ``tangent``, ``tangent1`` starts from world y (world z
        when the normal's y component is 0.5 or more in magnitude).
    """
    x, _ = _normalize(normal)
    default = jnp.where(jnp.abs(x[1]) < 0.5, _EY, _EZ)
    if tangent is None:
        y = default
    else:
        y = jnp.where(tangent @ tangent < 0.25, default, tangent)
    y, _ = _normalize(y - x * (x @ y))
    return jnp.stack([x, y, jnp.cross(x, y)])


def _one(dist, pos, normal, tangent=None) -> Contact:
    return Contact(dist[None], pos[None], make_frame(normal, tangent)[None])


def _stack(contacts: list[Contact]) -> Contact:
    return Contact(*(jnp.concatenate(f) for f in zip(*contacts)))


def _first(c: Contact, valid: jax.Array, k: int) -> Contact:
    """The first ``k`` contacts of ``c`` (in slot order) that are ``valid``; slots beyond
    the valid ones get ``dist = +inf``."""
    n = valid.shape[0]
    order = jnp.argsort(jnp.where(valid, jnp.arange(n), n + jnp.arange(n)))[:k]
    dist = jnp.where(valid[order], c.dist[order], jnp.inf)
    return Contact(dist, c.pos[order], c.frame[order])


# ------------------------------------------------------------------------------ plane


def _plane_point(pos1, n, center, radius):
    """Signed distance, midpoint and normal of a sphere (centre, radius) against the plane
    through ``pos1`` with outward normal ``n``."""
    dist = (center - pos1) @ n - radius
    return dist, center - n * (radius + 0.5 * dist), n


def plane_sphere(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Plane (geometry 1) against sphere (geometry 2): one contact, normal = plane +z.

    MuJoCo's ``mjc_PlaneSphere``: ``dist = (c - p)·n - r``, ``pos = c - n (r + dist/2)``.
    Smooth in both poses everywhere (the distance is affine in the sphere centre).
    """
    del mat2, size1, margin
    d, p, n = _plane_point(pos1, mat1[:, 2], pos2, size2[0])
    return _one(d, p, n)


def plane_capsule(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Plane against capsule: two contacts, one per end of the capsule's segment.

    Slot 0 is the end at ``+half-length`` along the capsule's z, slot 1 the end at
    ``-half-length`` (MuJoCo's ``mjc_PlaneCapsule`` order); each is a plane–sphere contact
    of the end sphere, and its first tangent is the capsule axis (orthogonalised), as
    MuJoCo aligns it. Both slots always exist; a driver keeps those within the margin.
    """
    del size1, margin
    axis = mat2[:, 2]
    seg = axis * size2[1]
    out = []
    for end in (pos2 + seg, pos2 - seg):
        d, p, n = _plane_point(pos1, mat1[:, 2], end, size2[0])
        out.append(_one(d, p, n, axis))
    return _stack(out)


def plane_box(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Plane against box: up to four contacts at the box corners (MuJoCo's ``mjc_PlaneBox``).

    Corners are tested in MuJoCo's order (corner ``i`` has local coordinates ``±size``
    with the sign of x, y, z set by bits 0, 1, 2 of ``i``); a corner counts when it does
    not point away from the plane (its offset from the box centre has a non-positive
    normal component) and lies within ``margin``; the first four that count are returned,
    the remaining slots have ``dist = +inf``. Each contact: ``dist`` = the corner's signed
    height over the plane, ``pos`` = the corner moved by ``-dist/2`` along the normal.
    The set of corners changes discontinuously where a box face is perpendicular to the
    plane; between such poses each distance is smooth.
    """
    del size1
    n = mat1[:, 2]
    bits = jnp.array([[(i >> j) & 1 for j in range(3)] for i in range(8)])
    local = jnp.where(bits == 1, size2[None, :], -size2[None, :])  # (8, 3)
    corners = local @ mat2.T  # world offsets from the box centre
    ldist = corners @ n
    dist = (pos2 - pos1) @ n + ldist
    pos = pos2[None, :] + corners - 0.5 * jnp.outer(dist, n)
    frame = jnp.broadcast_to(make_frame(n), (8, 3, 3))
    valid = (ldist <= 0) & (dist <= margin)
    return _first(Contact(dist, pos, frame), valid, 4)


def plane_ellipsoid(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Plane against ellipsoid (semi-axes ``size2`` along its local axes): one contact at
    the ellipsoid's support point in ``-normal`` (MuJoCo's ``mjc_PlaneConvex``).

    The support point is ``pos2 + R D u`` with ``u = D R^T(-n) / |D R^T(-n)|``,
    ``D = diag(size2)``; ``dist`` is its signed height over the plane and ``pos`` the point
    moved by ``-dist/2`` along the normal. Smooth in both poses.
    """
    del size1, margin
    n = mat1[:, 2]
    u, _ = _normalize((mat2.T @ -n) * size2)
    support = pos2 + mat2 @ (u * size2)
    dist = (support - pos1) @ n
    return _one(dist, support - 0.5 * dist * n, n)


def plane_cylinder(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Plane against cylinder (radius, half-length along local z): up to four contacts,
    MuJoCo's ``mjc_PlaneCylinder``.

    Slot 0: the rim point nearest the plane (on the end disk facing it); slot 1: the
    matching rim point of the other end disk; slots 2 and 3: the other two corners of the
    equilateral triangle inscribed in the near disk with slot 0 as a corner (both at the
    same distance). MuJoCo reports the others only when slot 0 is within ``margin``, and
    each when its own distance is; slots it would not report have ``dist = +inf``. A
    disk parallel to the plane takes its rim direction from the cylinder's local x axis.
    Smooth except where the axis is normal to the plane.
    """
    del size1
    n = mat1[:, 2]
    axis = mat2[:, 2]
    prjaxis = n @ axis
    flip = prjaxis > 0
    axis = jnp.where(flip, -axis, axis)
    prjaxis = jnp.where(flip, -prjaxis, prjaxis)
    dist0 = (pos2 - pos1) @ n
    vec = axis * prjaxis - n
    len2 = vec @ vec
    tilted = len2 >= MINVAL * MINVAL
    vec = jnp.where(tilted, vec * (size2[0] / jnp.sqrt(jnp.where(tilted, len2, 1.0))), mat2[:, 0] * size2[0])
    prjvec = vec @ n
    axis = axis * size2[1]
    prjaxis = prjaxis * size2[1]
    d1 = dist0 + prjaxis + prjvec
    d2 = dist0 - prjaxis + prjvec
    d3 = dist0 + prjaxis - 0.5 * prjvec
    side, _ = _normalize(jnp.cross(vec, axis))
    side = side * (size2[0] * jnp.sqrt(3.0) / 2)
    base = pos2 + axis - 0.5 * vec
    pos = jnp.stack([pos2 + vec + axis, pos2 + vec - axis, base + side, base - side])
    dist = jnp.stack([d1, d2, d3, d3])
    pos = pos - 0.5 * jnp.outer(dist, n)
    first = d1 <= margin
    valid = first & (dist <= margin)
    frame = jnp.broadcast_to(make_frame(n), (4, 3, 3))
    return Contact(jnp.where(valid, dist, jnp.inf), pos, frame)


# ------------------------------------------------------------------ spheres and capsules


def _sphere_sphere(pos1, mat1, r1, pos2, mat2, r2):
    """MuJoCo's ``mjraw_SphereSphere``: distance, midpoint, normal (1 -> 2). Coincident
    centres take the normal ``z1 x z2`` (``(1, 0, 0)`` if those are parallel)."""
    normal, length = _normalize(pos2 - pos1)
    fallback, _ = _normalize(jnp.cross(mat1[:, 2], mat2[:, 2]))
    normal = jnp.where(length < MINVAL, fallback, normal)
    dist = length - r1 - r2
    return dist, pos1 + normal * (r1 + 0.5 * dist), normal


def sphere_sphere(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Sphere against sphere: one contact, normal along the line of centres (1 -> 2).

    ``dist = |c2 - c1| - r1 - r2``, ``pos = c1 + n (r1 + dist/2)``. Smooth except at
    coincident centres, where the normal falls back to ``z1 x z2`` (MuJoCo's rule).
    """
    del margin
    return _one(*_sphere_sphere(pos1, mat1, size1[0], pos2, mat2, size2[0]))


def sphere_capsule(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Sphere (geometry 1) against capsule (geometry 2): one contact.

    The sphere centre is projected on the capsule's segment (clipped to its ends), then
    sphere–sphere with the capsule radius, as MuJoCo's ``mjc_SphereCapsule``. Smooth
    except where the projection meets a segment end (the distance stays C1 there).
    """
    del margin
    axis = mat2[:, 2]
    x = jnp.clip(axis @ (pos1 - pos2), -size2[1], size2[1])
    return _one(*_sphere_sphere(pos1, mat1, size1[0], pos2 + axis * x, mat2, size2[0]))


def capsule_capsule(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Capsule against capsule: two contact slots, as MuJoCo 4.0's ``mjc_CapsuleCapsule``.

    Axes not nearly parallel: slot 0 is the sphere–sphere contact of the closest points of
    the two segments (MuJoCo's clipping sequence, exact for segments), slot 1 has
    ``dist = +inf``. Nearly parallel axes (``|z1 x z2|^2 < 1e-8``, MuJoCo 4.0's switch,
    measured): two contacts at the ends ``lo <= hi`` of the overlap of segment 2's
    projection with segment 1 along ``z1`` (clipped to segment 1), each the sphere–sphere
    contact of that point of segment 1 with its closest point on segment 2; with no
    overlap both slots hold the same end-to-end contact, as MuJoCo reports it twice. The
    switch makes the contact set, not the nearest distance, jump at the threshold.
    Exactly parallel and general axes match MuJoCo 4.0.1 to round-off; for axes within
    ~1e-3 rad of parallel the closest points are ill-conditioned and MuJoCo's contact
    points differ from these by about 0.2 x the angle (distances by < 1e-8).
    ``margin`` is unused (the argument keeps the kernels' common signature).
    """
    del margin
    z1, z2 = mat1[:, 2], mat2[:, 2]
    h1, h2 = size1[1], size2[1]
    a1, a2 = z1 * h1, z2 * h2
    dif = pos1 - pos2
    ma = a1 @ a1
    mb = -(a1 @ a2)
    mc = a2 @ a2
    u = -(a1 @ dif)
    v = a2 @ dif
    det = ma * mc - mb * mb
    parallel = (det < 1e-8 * ma * mc) | (jnp.abs(det) < MINVAL)
    det_s = jnp.where(parallel, 1.0, det)
    ma_s = jnp.where(ma < MINVAL, 1.0, ma)
    mc_s = jnp.where(mc < MINVAL, 1.0, mc)
    r1, r2 = size1[0], size2[0]

    # general configuration: unconstrained minimiser, then MuJoCo's clip sequence
    x1 = (mc * u - mb * v) / det_s
    x2 = (ma * v - mb * u) / det_s
    x2 = jnp.where(x1 > 1, (v - mb) / mc_s, jnp.where(x1 < -1, (v + mb) / mc_s, x2))
    x1 = jnp.clip(x1, -1.0, 1.0)
    x1 = jnp.where(
        x2 > 1,
        jnp.clip((u - mb) / ma_s, -1.0, 1.0),
        jnp.where(x2 < -1, jnp.clip((u + mb) / ma_s, -1.0, 1.0), x1),
    )
    x2 = jnp.clip(x2, -1.0, 1.0)
    general = _one(*_sphere_sphere(pos1 + a1 * x1, mat1, r1, pos2 + a2 * x2, mat2, r2))

    # nearly parallel: the two ends of the overlap along z1
    e_plus, e_minus = (pos2 + a2 - pos1) @ z1, (pos2 - a2 - pos1) @ z1
    lo = jnp.clip(jnp.maximum(-h1, jnp.minimum(e_plus, e_minus)), -h1, h1)
    hi = jnp.clip(jnp.minimum(h1, jnp.maximum(e_plus, e_minus)), -h1, h1)
    ends = []
    for x in (lo, hi):
        p1 = pos1 + z1 * x
        p2 = pos2 + z2 * jnp.clip(z2 @ (p1 - pos2), -h2, h2)
        ends.append(_one(*_sphere_sphere(p1, mat1, r1, p2, mat2, r2)))
    par = _stack(ends)

    gen = Contact(
        jnp.concatenate([general.dist, jnp.array([jnp.inf])]),
        jnp.concatenate([general.pos, general.pos]),
        jnp.concatenate([general.frame, general.frame]),
    )
    return Contact(*(jnp.where(parallel, p, g) for p, g in zip(par, gen)))


def sphere_cylinder(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Sphere (geometry 1) against cylinder (radius, half-length along local z): one
    contact, MuJoCo's ``mjc_SphereCylinder``.

    The sphere centre's axial coordinate ``x`` and radial offset ``rho`` choose the
    feature: the side (``|x| < h``, ``rho >= R``: sphere–sphere with the axis point), an
    end disk (``rho < R``, ``|x| >= h``: plane–sphere with the cap), or the rim circle
    (neither: sphere against the nearest rim point). A centre inside the cylinder takes
    the side or the cap, whichever surface is nearer (the side on a tie). The normal points
    from the sphere towards the cylinder. The feature switches are C1 in the distance
    outside the cylinder; inside, the normal jumps where the nearer surface changes.
    """
    del margin
    r1, rc, h = size1[0], size2[0], size2[1]
    axis = mat2[:, 2]
    vec = pos1 - pos2
    x = axis @ vec
    p_proj = vec - axis * x
    p2 = p_proj @ p_proj
    side = jnp.abs(x) < h
    cap = p2 < rc * rc
    both = side & cap
    rho = jnp.sqrt(jnp.where(p2 > 0, p2, 1.0)) * (p2 > 0)
    cap_first = (h - jnp.abs(x)) < (rc - rho)
    side = side & ~(both & cap_first)
    cap = cap & ~(both & ~cap_first)

    s_dist, s_pos, s_n = _sphere_sphere(pos1, mat1, r1, pos2 + axis * x, mat2, rc)
    zc = jnp.where(x > 0, axis, -axis)
    c_dist, c_pos, c_n = _plane_point(pos2 + zc * h, zc, pos1, r1)
    rim = pos2 + zc * h + p_proj * (rc / jnp.where(p2 > 0, rho, 1.0))
    e_dist, e_pos, e_n = _sphere_sphere(pos1, mat1, r1, rim, mat2, 0.0)

    dist = jnp.where(side, s_dist, jnp.where(cap, c_dist, e_dist))
    pos = jnp.where(side, s_pos, jnp.where(cap, c_pos, e_pos))
    normal = jnp.where(side, s_n, jnp.where(cap, -c_n, e_n))
    return _one(dist, pos, normal)


# ------------------------------------------------------------------------------- boxes


def sphere_box(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Sphere (geometry 1) against box (geometry 2): one contact (MuJoCo's
    ``mjc_SphereBox``).

    Centre outside the box: the box point nearest the centre gives the normal (from the
    centre towards it), ``dist = |nearest - centre| - r`` and ``pos`` halfway between the
    box point and the sphere's deepest point. Centre inside: the nearest face (MuJoCo's
    order -x, +x, -y, +y, -z, +z; first wins a tie) gives the normal (pointing inwards,
    from the sphere towards the box), ``dist = -(distance to that face) - r``.
    Smooth outside the box; the normal jumps where the nearest face changes inside it.
    """
    del mat1, margin
    r = size1[0]
    center = mat2.T @ (pos1 - pos2)
    clamped = jnp.clip(center, -size2, size2)
    tmp, gap = _normalize(clamped - center)
    outside = gap > MINVAL
    pos_out = 0.5 * (clamped + center + tmp * r)

    faces = jnp.abs(jnp.stack([s * size2[i] - center[i] for i in range(3) for s in (-1.0, 1.0)]))
    k = jnp.argmin(faces)
    closest = faces[k]
    nearest = jnp.where(jnp.arange(3) == k // 2, jnp.where(k % 2 == 1, -1.0, 1.0), 0.0)
    pos_in = center + nearest * (0.5 * (r - closest))

    local_normal = jnp.where(outside, tmp, nearest)
    pos = pos2 + mat2 @ jnp.where(outside, pos_out, pos_in)
    dist = jnp.where(outside, gap, -closest) - r
    return _one(dist, pos, mat2 @ local_normal)


def _safe_div(num, den):
    """``num / den``, and ``inf`` where ``den == 0`` (finite gradients there)."""
    zero = den == 0
    return jnp.where(zero, jnp.inf, num / jnp.where(zero, 1.0, den))


def _box_edge_segment(pos, halfaxis, hl, size, j, corner):
    """Closest points of the capsule segment ``pos + x2 halfaxis`` and the box edge
    ``corner + x1 size[j] e_j`` (box frame), with MuJoCo's clip sequence: ``(d2, x1, x2,
    s1, s2, ok)``, ``s`` 0/1/2 = clipped low / free / clipped high (``s1`` kept from the
    first clip, as MuJoCo keeps it), ``ok`` False where the lines are parallel."""
    dif = corner - pos
    ma = size[j] * size[j]
    mb = -size[j] * halfaxis[j]
    mc = hl * hl
    u = -size[j] * dif[j]
    v = halfaxis @ dif
    det = ma * mc - mb * mb
    ok = jnp.abs(det) >= MINVAL
    det_s = jnp.where(ok, det, 1.0)
    x1 = (mc * u - mb * v) / det_s
    x2 = (ma * v - mb * u) / det_s
    s1 = jnp.where(x1 > 1, 2, jnp.where(x1 < -1, 0, 1))
    x2 = jnp.where(x1 > 1, (v - mb) / mc, jnp.where(x1 < -1, (v + mb) / mc, x2))
    x1 = jnp.clip(x1, -1.0, 1.0)
    hi, lo = x2 > 1, x2 < -1
    s2 = jnp.where(hi, 2, jnp.where(lo, 0, 1))
    x1r = jnp.where(hi, (u - mb) / ma, (u + mb) / ma)
    s1 = jnp.where(hi | lo, jnp.where(x1r > 1, 2, jnp.where(x1r < -1, 0, s1)), s1)
    x1 = jnp.where(hi | lo, jnp.clip(x1r, -1.0, 1.0), x1)
    x2 = jnp.clip(x2, -1.0, 1.0)
    e = dif - halfaxis * x2 + jnp.where(jnp.arange(3) == j, size[j] * x1, 0.0)
    return e @ e, x1, x2, s1, s2, ok


def _mul_mat_t(mat, v):
    """``mat.T @ v`` summed term by term in MuJoCo's order (``mju_mulMatTVec3``): the
    signs of round-off-sized components (an axis along a box axis) then agree with it."""
    return mat[0] * v[0] + mat[1] * v[1] + mat[2] * v[2]


def capsule_box(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Capsule (geometry 1) against box (geometry 2): two contact slots, MuJoCo's
    ``mjc_CapsuleBox``.

    In the box frame, the point of the capsule's segment nearest the box is found among
    the two segment ends (each kept only when it lies beyond at most one face pair) and
    the closest points of the segment with the twelve box edges (MuJoCo's order and
    tie rule). A second point along the segment is then chosen as MuJoCo does: from the
    relative orientation of the segment and the nearest box feature (a corner, an edge, or
    a face under a segment end), as far along the segment as it stays over the box. Each
    point is a sphere of the capsule's radius against the box (:func:`sphere_box`): slot 0
    the nearest point, slot 1 the second one (``dist = +inf`` where MuJoCo adds none).
    ``margin`` (the pair's ``margin + gap``) enters MuJoCo's initial best distance only.
    Smooth while the nearest feature and the second point's rule stay the same; the
    choice switches discretely (the second contact may appear or jump). Matches MuJoCo
    4.0.1 to round-off at general poses. With the capsule axis along a box axis to
    round-off, MuJoCo chooses among equally near features by the signs of round-off-sized
    terms, which compiled (XLA) arithmetic does not always reproduce: the nearest distance
    agrees, the contact points in most such poses (measured 93 of 100).
    """
    size2 = jnp.asarray(size2)
    r, hl = size1[0], size1[1]
    pos = _mul_mat_t(mat2, pos1 - pos2)
    axis = _mul_mat_t(mat2, mat1[:, 2])
    halfaxis = axis * hl
    bits = jnp.array([1, 2, 4])
    axisdir = jnp.sum(jnp.where(halfaxis > 0, bits, 0))
    best = margin + 2 * (r + hl + size2[0] + size2[1] + size2[2])
    bsp = jnp.zeros_like(hl)  # best segment position in [-1, 1]
    bbp = jnp.zeros_like(hl)  # best box (edge) position in [-1, 1]
    cltype = jnp.array(-4)
    clface = jnp.array(-1)
    clcorner = jnp.array(0)
    cledge = jnp.array(0)

    # a segment end beyond at most one face pair: its nearest box point
    for i in (-1, 1):
        end = pos + halfaxis * i
        out = (end < -size2) | (end > size2)
        c = jnp.clip(end, -size2, size2) - end
        d2 = c @ c
        face = jnp.max(jnp.where(out, jnp.arange(3), -1))
        take = (jnp.sum(out) <= 1) & (d2 < best)
        best = jnp.where(take, d2, best)
        bsp = jnp.where(take, float(i), bsp)
        cltype = jnp.where(take, -2 + i, cltype)
        clface = jnp.where(take, face, clface)

    # the twelve edges, MuJoCo's order (axis j, then the corner code i with bit j clear)
    for j in range(3):
        for i in range(8):
            if i & (1 << j):
                continue
            sgn = np.array([1.0 if i & (1 << k) else -1.0 for k in range(3)], dtype=np.float32)
            sgn[j] = 0.0
            d2, x1, x2, s1, s2, ok = _box_edge_segment(pos, halfaxis, hl, size2, j, sgn * size2)
            take = ok & (d2 < best - MINVAL)
            best = jnp.where(take, d2, best)
            bsp = jnp.where(take, x2, bsp)
            bbp = jnp.where(take, x1, bbp)
            cltype = jnp.where(take, s1 * 3 + s2, cltype)
            clcorner = jnp.where(take, i + (1 << j) * (s1 // 2), clcorner)
            cledge = jnp.where(take, j, cledge)

    aha = jnp.abs(halfaxis)
    idx = jnp.arange(3)

    # nearest at a box corner: along an edge, or across a face
    c1 = jnp.bitwise_xor(axisdir, clcorner)
    flip = (c1 == 3) | (c1 == 5) | (c1 == 6)
    mul_a = jnp.where(flip, -1.0, 1.0)
    c1f = jnp.where(flip, 7 - c1, c1)
    de = jnp.where(flip, 1 + bsp, 1 - bsp)
    dp = jnp.where(flip, 1 - bsp, 1 + bsp)
    ax = jnp.where(c1f == 1, 0, jnp.where(c1f == 2, 1, 2))
    reach = _safe_div(2 * size2, aha)
    along_edge = axis[ax] * axis[ax] > 0.5
    sp_edge = jnp.minimum(de, reach[ax]) * mul_a
    sp_face = -mul_a * jnp.minimum(dp, jnp.min(jnp.where(idx == ax, jnp.inf, reach)))
    sp_corner = jnp.where(along_edge, sp_edge, sp_face)
    has_corner = (c1 != 0) & (c1 != 7)

    # nearest inside a box edge: a second point only in a cross configuration
    e1 = jnp.bitwise_and(c1, 7 - jnp.left_shift(1, cledge))
    has_edge = (e1 == 1) | (e1 == 2) | (e1 == 4)
    a1, a2 = (cledge + 1) % 3, (cledge + 2) % 3
    a1 = jnp.where(jnp.abs(axis[a1]) > jnp.abs(axis[a2]), a2, a1)
    a2 = 3 - cledge - a1
    up = jnp.bitwise_and(e1, jnp.left_shift(1, a2)) != 0
    mul_e = jnp.where(up, 1.0, -1.0)
    sp = jnp.minimum(jnp.where(up, 1 - bsp, 1 + bsp), reach[a2])
    same = (jnp.bitwise_and(axisdir, jnp.left_shift(1, cledge)) != 0) == up
    e2 = jnp.where(same, 1 - bbp, 1 + bbp)
    sp_edgemid = mul_e * jnp.minimum(sp, _safe_div(size2[cledge] * e2, aha[cledge]))

    # nearest at a segment end over a face: as far as the segment stays over the box
    mul_f = jnp.where(cltype == -3, 1.0, -1.0)
    end = pos - halfaxis * mul_f
    spf = jnp.asarray(2.0, dtype=bsp.dtype)
    for i in range(3):
        for s in (1.0, -1.0):
            e = _safe_div(s * size2[i] - end[i], halfaxis[i]) * mul_f
            spf = jnp.where((i != clface) & (e > 0) & (e < spf), e, spf)
    sp_face_end = spf * mul_f

    corner = (cltype >= 0) & (cltype // 3 != 1)
    edgemid = (cltype >= 0) & (cltype // 3 == 1)
    face = cltype < 0
    second = jnp.where(corner, sp_corner, jnp.where(edgemid, sp_edgemid, sp_face_end))
    has2 = (corner & has_corner) | (edgemid & has_edge) | (face & (clface != -1) & (cltype != -4))

    contacts = []
    for x, ok in ((bsp, cltype != -4), (bsp + second, has2)):
        c = sphere_box(pos2 + mat2 @ (pos + halfaxis * x), mat1, size1, pos2, mat2, size2)
        contacts.append(c._replace(dist=jnp.where(ok, c.dist, jnp.inf)))
    return _stack(contacts)


# MuJoCo's box-box tolerances (double precision): separation slack per unit of box size,
# sin^2 below which an edge-cross axis is noise, an axis component below which a support
# corner is ambiguous, squared relative radius of duplicate clip vertices, edge-axis bias.
_BB_SEPEPS, _BB_PAREPS, _BB_SGNEPS, _BB_DUPEPS, _BB_EDGEBIAS = 1e-13, 1e-16, 1e-9, 1e-14, 1e-6
_BB_MAXVERT = 12  # MuJoCo's clip buffer
_BB_SLOTS = 8  # a quadrilateral clipped by four half-planes keeps at most eight vertices


def _compact(mask: jax.Array, k: int) -> jax.Array:
    """Indices of the first ``k`` entries where ``mask`` holds, in order (then the rest)."""
    n = mask.shape[0]
    return jnp.argsort(jnp.where(mask, jnp.arange(n), n + jnp.arange(n)))[:k]


def _clip_half_plane(poly, n, coord, sign, limit):
    """Sutherland-Hodgman: the polygon ``poly[:n]`` (fixed buffer) clipped to
    ``sign * v[coord] <= limit`` with MuJoCo's emission order and buffer cap; returns the
    new buffer and count."""
    m = poly.shape[0]
    k = jnp.arange(m)
    valid = k < n
    d = sign * poly[:, coord] - limit
    k1 = jnp.where(k + 1 >= n, 0, k + 1)
    dp, dq = d, d[k1]
    emit_p = valid & (dp <= 0)
    emit_x = valid & (((dp < 0) & (dq > 0)) | ((dp > 0) & (dq < 0)))
    den = jnp.where(emit_x, dp - dq, 1.0)
    t = jnp.where(emit_x, dp / den, 0.0)
    x = poly + t[:, None] * (poly[k1] - poly)
    cand = jnp.stack([poly, x], axis=1).reshape(2 * m, 3)
    mask = jnp.stack([emit_p, emit_x], axis=1).reshape(2 * m)
    order = _compact(mask, m)
    return cand[order], jnp.minimum(jnp.sum(mask), m)


def box_box(pos1, mat1, size1, pos2, mat2, size2, margin=jnp.inf) -> Contact:
    """Box against box: eight contact slots, MuJoCo's ``mjc_BoxBox`` (separating axes,
    then face clipping or one edge-edge contact).

    The axis of largest separation among the six face normals and the nine edge-edge
    cross products (MuJoCo's order, its bias towards faces on near-ties and its
    substitution of a face for a nearly parallel edge axis) decides: no contact when the
    boxes are apart by more than ``margin`` along any axis; for a face axis, the incident
    box's face most opposed to it is clipped against the reference face's four side
    planes and every clipped vertex within ``margin`` of the reference face (duplicates
    dropped) is a contact, ``dist`` its height above that face, ``pos`` midway, the
    normal the reference face's (from box 1 to box 2); for an edge axis, one contact at
    the midpoint of the closest points of the two supporting edges. Slots MuJoCo does not
    fill have ``dist = +inf``. ``margin`` (the pair's ``margin + gap``) decides which
    vertices MuJoCo keeps, so it is needed here. Smooth while the winning axis, the
    incident face and the clipped polygon's vertex set stay the same. Matches MuJoCo 4.0.1
    to round-off at general poses; with axes parallel to round-off, ties between axes
    and clip vertices fall as round-off-sized terms decide, which compiled (XLA)
    arithmetic does not always reproduce (measured: the same contacts in 256 of 300 such
    poses; the distances agree).
    """
    size1, size2 = jnp.asarray(size1), jnp.asarray(size2)
    idx = jnp.arange(3)
    rot = (
        mat1[0][:, None] * mat2[0][None, :]
        + mat1[1][:, None] * mat2[1][None, :]
        + mat1[2][:, None] * mat2[2][None, :]
    )  # box 2's axes in box 1's frame (columns), summed as mju_mulMatTMat3
    rabs = jnp.abs(rot)
    pos21 = _mul_mat_t(mat1, pos2 - pos1)
    pos12 = _mul_mat_t(mat2, pos1 - pos2)
    septol = margin + _BB_SEPEPS * (jnp.sum(size1) + jnp.sum(size2))

    # stage 1: separating axes
    sep_a = jnp.abs(pos21) - size1 - (rabs[:, 0] * size2[0] + rabs[:, 1] * size2[1] + rabs[:, 2] * size2[2])
    sep_b = jnp.abs(pos12) - size2 - (rabs[0] * size1[0] + rabs[1] * size1[1] + rabs[2] * size1[2])
    faces = jnp.concatenate([sep_a, sep_b])
    apart = jnp.any(faces > septol)
    code_face = jnp.argmax(faces)
    sep_face = faces[code_face]
    sep_best, code = sep_face, code_face
    edge_list = []
    for i in range(3):
        for j in range(3):
            i1, i2, j1, j2 = (i + 1) % 3, (i + 2) % 3, (j + 1) % 3, (j + 2) % 3
            ax1, ax2 = -rot[i2, j], rot[i1, j]
            edge_list.append(jnp.zeros(3, ax1.dtype).at[i1].set(ax1).at[i2].set(ax2))
            norm2 = ax1 * ax1 + ax2 * ax2
            skip = norm2 < _BB_PAREPS
            inv = 1 / jnp.sqrt(jnp.where(skip, 1.0, norm2))
            ax1, ax2 = ax1 * inv, ax2 * inv
            r1 = size1[i1] * jnp.abs(ax1) + size1[i2] * jnp.abs(ax2)
            b1 = ax1 * rot[i1, j1] + ax2 * rot[i2, j1]
            b2 = ax1 * rot[i1, j2] + ax2 * rot[i2, j2]
            r2 = size2[j1] * jnp.abs(b1) + size2[j2] * jnp.abs(b2)
            sep = jnp.abs(ax1 * pos21[i1] + ax2 * pos21[i2]) - r1 - r2
            apart = apart | (~skip & (sep > septol))
            take = ~skip & (sep - _BB_EDGEBIAS * jnp.abs(sep) > sep_best) & (sep > sep_face)
            sep_best = jnp.where(take, sep, sep_best)
            code = jnp.where(take, 6 + 3 * i + j, code)
    edge_axes = jnp.stack(edge_list)

    # a winning edge axis within ~8 degrees of the best face axis: the face instead
    is_edge = code >= 6
    ei = jnp.where(is_edge, code - 6, 0)
    axis, _ = _normalize(edge_axes[ei])
    fcol = jnp.where(code_face < 3, 0, code_face - 3)
    face_dot = jnp.where(
        code_face < 3, jnp.abs(axis[jnp.minimum(code_face, 2)]), jnp.abs(axis @ rot[:, fcol])
    )
    swap = is_edge & (face_dot > 0.99) & (sep_best < sep_face + 0.05 * jnp.abs(sep_face) + MINVAL)
    code = jnp.where(swap, code_face, code)
    is_edge = code >= 6

    # stage 2a: edge-edge, one contact
    ie, je = ei // 3, ei % 3
    ie1, ie2, je1, je2 = (ie + 1) % 3, (ie + 2) % 3, (je + 1) % 3, (je + 2) % 3
    axis = jnp.where(axis @ pos21 < 0, -axis, axis)
    a2 = axis[0] * rot[0] + axis[1] * rot[1] + axis[2] * rot[2]
    small1, small2 = jnp.abs(axis) < _BB_SGNEPS, jnp.abs(a2) < _BB_SGNEPS  # ambiguous corners
    amb1 = jnp.where(small1[ie1], ie1, jnp.where(small1[ie2], ie2, -1))
    amb2 = jnp.where(small2[je1], je1, jnp.where(small2[je2], je2, -1))
    d2 = rot[:, je]
    b = d2[ie]
    denom = 1 - b * b
    witnesses = []
    for v1 in (0, 1):
        for v2 in (0, 1):
            c1 = jnp.where(idx == ie, 0.0, jnp.where(axis >= 0, size1, -size1))
            c1 = jnp.where((idx == amb1) & bool(v1), -c1, c1)
            cc = jnp.where(idx == je, 0.0, jnp.where(a2 >= 0, -size2, size2))
            cc = jnp.where((idx == amb2) & bool(v2), -cc, cc)
            c2 = rot @ cc + pos21
            e = c2 - c1
            d1e, d2e = e[ie], d2 @ e
            s = jnp.where(denom < MINVAL, 0.0, (d1e - b * d2e) / jnp.where(denom < MINVAL, 1.0, denom))
            s = jnp.clip(s, -size1[ie], size1[ie])
            t = jnp.clip(b * s - d2e, -size2[je], size2[je])
            s = jnp.clip(d1e + b * t, -size1[ie], size1[ie])
            p1 = c1 + jnp.where(idx == ie, s, 0.0)
            p2 = c2 + d2 * t
            g = p2 - p1
            ok = ((v1 == 0) | (amb1 >= 0)) & ((v2 == 0) | (amb2 >= 0))
            witnesses.append((jnp.where(ok, g @ g, jnp.inf), p1, p2))
    best = jnp.argmin(jnp.stack([w[0] for w in witnesses]))
    w1 = jnp.stack([w[1] for w in witnesses])[best]
    w2 = jnp.stack([w[2] for w in witnesses])[best]
    e_dist = (w2 - w1) @ axis
    edge = _one(e_dist, mat1 @ (0.5 * (w1 + w2)) + pos1, mat1 @ axis)
    e_ok = is_edge & ~apart & (e_dist <= septol)

    # stage 2b: face, the incident face clipped to the reference face
    ref1 = code < 3
    a = jnp.where(is_edge, 0, jnp.where(ref1, code, code - 3))
    sref, sinc = jnp.where(ref1, size1, size2), jnp.where(ref1, size2, size1)
    pref, mref = jnp.where(ref1, pos1, pos2), jnp.where(ref1, mat1, mat2)
    poi = jnp.where(ref1, pos21, pos12)
    rinc = jnp.where(ref1, rot, rot.T)
    sgn = jnp.where(poi[a] >= 0, 1.0, -1.0)
    binc = jnp.argmax(jnp.abs(rinc[a]))
    tinc = jnp.where(sgn * rinc[a, binc] > 0, -1.0, 1.0)
    ax, ay = (a + 1) % 3, (a + 2) % 3
    bu, bv = (binc + 1) % 3, (binc + 2) % 3
    rows = jnp.stack([ax, ay, a])
    cx = poi[rows] + tinc * sinc[binc] * rinc[rows, binc]
    du = sinc[bu] * rinc[rows, bu]
    dv = sinc[bv] * rinc[rows, bv]
    zs = jnp.array([1.0, 1.0, 0.0], dtype=np.float32)
    cx = jnp.where(zs == 1, cx, sgn * cx - sref[a])
    du = jnp.where(zs == 1, du, du * sgn)
    dv = jnp.where(zs == 1, dv, dv * sgn)
    corners = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], dtype=np.float32)
    poly = cx[None, :] + corners[:, :1] * du[None, :] + corners[:, 1:] * dv[None, :]
    poly = jnp.concatenate([poly, jnp.zeros((_BB_MAXVERT - 4, 3), poly.dtype)])
    n = jnp.array(4)
    for coord, sign, lim in (
        (0, 1.0, sref[ax]),
        (0, -1.0, sref[ax]),
        (1, 1.0, sref[ay]),
        (1, -1.0, sref[ay]),
    ):
        poly, n = _clip_half_plane(poly, n, coord, sign, lim)
    dupe2 = _BB_DUPEPS * (sref[ax] * sref[ax] + sref[ay] * sref[ay])
    accepted = jnp.zeros(_BB_MAXVERT, bool)
    for k in range(_BB_MAXVERT):
        dxy = poly[:k, :2] - poly[k, None, :2]
        dupe = jnp.any(accepted[:k] & (jnp.sum(dxy * dxy, axis=1) < dupe2))
        accepted = accepted.at[k].set((k < n) & (poly[k, 2] <= margin) & ~dupe)
    order = _compact(accepted, _BB_SLOTS)
    v = poly[order]
    f_ok = accepted[order] & ~is_edge & ~apart
    posc = (
        (idx == ax)[None, :] * v[:, :1]
        + (idx == ay)[None, :] * v[:, 1:2]
        + (idx == a)[None, :] * (sgn * (sref[a] + 0.5 * v[:, 2:3]))
    )
    normal = jnp.where(ref1, sgn, -sgn) * mref[:, a]
    frame = make_frame(normal)
    face = Contact(
        jnp.where(f_ok, v[:, 2], jnp.inf),
        posc @ mref.T + pref[None, :],
        jnp.broadcast_to(frame, (_BB_SLOTS, 3, 3)),
    )
    first = jnp.arange(_BB_SLOTS) == 0
    return Contact(
        jnp.where(is_edge, jnp.where(first & e_ok, edge.dist[0], jnp.inf), face.dist),
        jnp.where(is_edge, jnp.broadcast_to(edge.pos, (_BB_SLOTS, 3)), face.pos),
        jnp.where(is_edge, jnp.broadcast_to(edge.frame, (_BB_SLOTS, 3, 3)), face.frame),
    )
