"""Single-instance spatial algebra: rotations, transforms, spatial vectors, inertias.

Conventions are Simbody's: spatial vectors are ``[angular; linear]``, spatial forces are
``[torque; force]``, quaternions are ``[w, x, y, z]``, ``X_AB`` is frame B measured in A.
Every function works on one instance; use ``jax.vmap`` at the call site for batches.
NaN-safe gradients at singular points use the double-``where`` trick, kept here only.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

# ----------------------------------------------------------------------------- safe maths


def safe_norm(x: Float[Array, " ..."], axis: int = -1) -> Float[Array, " ..."]:
    """Euclidean norm whose gradient is zero (not NaN) at ``x = 0``. Over up to four entries
    (vectors, quaternions) the squares are added, not reduced: on XLA:CPU a reduction is a
    kernel of its own, a fixed cost in a single-state call."""
    n = x.shape[axis]
    if n <= 4:
        parts = jnp.split(x * x, n, axis=axis) if n else [jnp.sum(x * x, axis=axis, keepdims=True)]
        sq = sum(parts[1:], parts[0])
    else:
        sq = jnp.sum(x * x, axis=axis, keepdims=True)
    is_zero = sq == 0
    sq_safe = jnp.where(is_zero, 1.0, sq)
    return jnp.squeeze(jnp.where(is_zero, 0.0, jnp.sqrt(sq_safe)), axis=axis)


def safe_normalize(x: Float[Array, " ..."], axis: int = -1) -> Float[Array, " ..."]:
    """``x / |x|``, returning ``x`` unchanged (and finite gradients) where ``|x| = 0``."""
    n = jnp.expand_dims(safe_norm(x, axis=axis), axis)
    return x / jnp.where(n == 0, 1.0, n)


# Above this many contiguous runs a static row selection stays one gather.
TAKE_MAX_RUNS = 3


def take_rows(x: jax.Array, rows: ArrayLike) -> jax.Array:
    """``x[rows]`` for a static integer index array ``rows`` (any shape; along the first axis
    of ``x``).

    Where the flattened ``rows`` is a few contiguous runs (a chain's levels and jumps, a kind
    group's coordinates mostly are), the selection is static slices, concatenated: no
    index constant and no gather kernel. On XLA:CPU every constant of a program costs time
    on every call (the runtime wraps each one afresh), and a gather is a kernel of its own
    where slices fuse with their consumers. More runs than ``TAKE_MAX_RUNS``: one gather."""
    rows = np.asarray(rows)
    flat = rows.reshape(-1)
    if flat.size == 0 or not np.issubdtype(flat.dtype, np.integer):
        return x[rows]
    flat = np.where(flat < 0, flat + x.shape[0], flat)
    starts = np.concatenate([[0], np.nonzero(np.diff(flat) != 1)[0] + 1])
    if len(starts) > TAKE_MAX_RUNS:
        return x[rows]
    ends = np.concatenate([starts[1:], [flat.size]])
    parts = [x[int(flat[a]) : int(flat[a]) + int(b - a)] for a, b in zip(starts, ends)]
    out = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return out.reshape(rows.shape + x.shape[1:])


def small_matmul(a: Float[Array, "... n k"], b: Float[Array, "... k m"]) -> Float[Array, "... n m"]:
    """``a @ b`` for a small inner dimension ``k``, written as ``k`` broadcast products summed.

    XLA fuses it with its neighbours (no separate ``dot`` kernel, no reduction). Used where
    that measured faster: the pose products of ``compose_outward``'s doubling rounds, whose
    cost at one state is the number of kernels. It is not a general replacement for ``@``:
    applied to every 3x3 and 6x6 product of the tree passes it made batched forward
    dynamics slower (``benchmarks/HISTORY.md``)."""
    k = a.shape[-1]
    out = a[..., :, 0:1] * b[..., 0:1, :]
    for i in range(1, k):
        out = out + a[..., :, i : i + 1] * b[..., i : i + 1, :]
    return out


def matmul_fused(a: Float[Array, "... n k"], b: Float[Array, "... k m"]) -> Float[Array, "... n m"]:
    """``a @ b`` as a broadcast product summed over ``k``: a reduction XLA:CPU fuses with its
    neighbours, not a ``dot`` kernel of its own. For the per-body 3x3 and 3x6 products of the
    Position stage under a ``vmap``, where it is faster than a ``dot`` in batched forward
    dynamics (with ``sj.configure()``'s YNNPACK setting; ``benchmarks/HISTORY.md``)."""
    return (a[..., :, :, None] * b[..., None, :, :]).sum(-2)


def matmul_const(a: Float[Array, "... n k"], c: np.ndarray) -> Float[Array, "... n m"]:
    """``a @ c`` for a constant ``c`` (k, m) with at most one nonzero entry per column (a
    signed selection: a rotation about an axis's terms, an identity, a zero), as ``a``'s
    columns picked and scaled: no products with zeros, no reduction."""
    c = np.asarray(c)
    if (np.count_nonzero(c, axis=0) > 1).any():
        return jnp.einsum("...ik,kj->...ij", a, jnp.asarray(c, a.dtype))
    cols = []
    for j in range(c.shape[1]):
        (nz,) = np.nonzero(c[:, j])
        if nz.size == 0:
            cols.append(jnp.zeros_like(a[..., 0]))
        else:
            v = float(c[nz[0], j])
            col = a[..., nz[0]]
            cols.append(col if v == 1.0 else -col if v == -1.0 else v * col)
    return jnp.stack(cols, axis=-1)


def matvec_fused(a: Float[Array, "... n k"], v: Float[Array, "... k"]) -> Float[Array, "... n"]:
    """``a @ v`` as ``matmul_fused`` computes it (a broadcast product summed)."""
    return (a * v[..., None, :]).sum(-1)


def cross(a: Float[Array, "... 3"], b: Float[Array, "... 3"]) -> Float[Array, "... 3"]:
    """``jnp.cross`` of 3-vectors (broadcast), from one ``unstack`` of each operand. Reverse
    mode then gathers each operand's cotangent with one ``stack``; ``jnp.cross`` indexes
    each component, whose transposes are a zero-padded copy per component, added up, and on
    XLA:CPU each pad ended a fused kernel."""
    a, b = jnp.broadcast_arrays(a, b)
    a0, a1, a2 = jnp.unstack(a, axis=-1)
    b0, b1, b2 = jnp.unstack(b, axis=-1)
    return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def skew(v: Float[Array, "... 3"]) -> Float[Array, "... 3 3"]:
    """Cross-product matrix: ``skew(a) @ b == cross(a, b)`` (leading axes broadcast)."""
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    o = jnp.zeros_like(x)
    rows = ([o, -z, y], [z, o, -x], [-y, x, o])
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def vee(m: Float[Array, "3 3"]) -> Float[Array, " 3"]:
    """Inverse of ``skew`` (uses the antisymmetric part)."""
    return 0.5 * jnp.stack([m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1]])


# ----------------------------------------------------------------------------- rotations


def _split_half_pi(bits: int) -> tuple[float, ...]:
    """pi/2 as three floats of ``bits`` significant bits each and a rounded remainder:
    ``k * part`` is exact for integers ``k`` below ``2**(p - bits)`` (p the significand's
    bits), so ``x - k pi/2`` is reduced without cancellation error (Cody and Waite)."""
    # pi/2 to 60 digits, as an exact fraction.
    rest = Fraction("1.57079632679489661923132169163975144209858469968755291048747")
    parts = []
    for _ in range(3):
        _, e = math.frexp(float(rest))
        part = math.floor(rest * 2 ** (bits - e)) / Fraction(2 ** (bits - e))
        parts.append(float(part))
        rest -= part
    parts.append(float(rest))
    return tuple(parts)


# Exact products for |k| < 2**33 in float64, so angles up to 2**33 pi/2 (1.35e10 rad).
_HALF_PI_PARTS = _split_half_pi(20)
COS_SIN_LIMIT = 2.0**33 * math.pi / 2
# Taylor coefficients of sin and cos in r^2, highest first: on |r| <= pi/4 the first
# omitted terms (r^19/19!, r^20/20!) are below 1e-19, far under double precision's 1.1e-16.
_SIN_TAYLOR = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(8, 0, -1))
_COS_TAYLOR = tuple((-1) ** k / math.factorial(2 * k) for k in range(9, 0, -1))


def _horner(coeffs: tuple[float, ...], x: jax.Array) -> jax.Array:
    out = jnp.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        out = out * x + c
    return out


@jax.custom_jvp
def cos_sin(a: Any) -> tuple[jax.Array, jax.Array]:
    """``(cos a, sin a)`` elementwise, in float64 by arithmetic only: ``a`` reduced by
    multiples of pi/2 (``_HALF_PI_PARTS``), then Taylor polynomials on ``|r| <= pi/4`` and
    the quadrant's signs and swap. Within 2 ulps of the exact values; NaN at or beyond
    ``COS_SIN_LIMIT`` (2**33 pi/2, 1.35e10 rad), where the reduction would be meaningless.
    Float32 and narrower use ``jnp.cos``/``jnp.sin``.

    Why: XLA:CPU evaluates its float64 sine and cosine one element at a time (a scalar libm
    call each); these polynomials vectorise. Used for the joint angles of the kinds with
    ``X_FM_terms`` (Pin, Screw, Cylinder), under ``computed_once``: XLA counts the
    polynomials as cheap and would otherwise compute them again in every kernel that reads
    them (``benchmarks/HISTORY.md``)."""
    a = jnp.asarray(a)
    a = a.astype(jnp.result_type(a, float))  # (an integer angle: the default float)
    if a.dtype.itemsize < 8:  # float32 and narrower: XLA's own (fast on a GPU)
        return jnp.cos(a), jnp.sin(a)
    k = jnp.round(a * (2 / math.pi))
    r = a
    for part in _HALF_PI_PARTS:
        r = r - k * part
    r2 = r * r
    s = r * _horner(_SIN_TAYLOR + (1.0,), r2)
    c = _horner(_COS_TAYLOR + (1.0,), r2)
    # The quadrant k mod 4, exactly, by floor (a float remainder is a scalar libm call).
    q = k - 4.0 * jnp.floor(k * 0.25)
    swap = (q == 1) | (q == 3)
    cos_a = jnp.where(swap, s, c) * jnp.where((q == 1) | (q == 2), -1.0, 1.0)
    sin_a = jnp.where(swap, c, s) * jnp.where(q >= 2, -1.0, 1.0)
    # Beyond COS_SIN_LIMIT the reduction would lose every digit: NaN, not a wrong number
    # (such an angle is a simulation that diverged; ``simulate`` then reports it).
    within = jnp.abs(a) < COS_SIN_LIMIT
    return jnp.where(within, cos_a, jnp.nan), jnp.where(within, sin_a, jnp.nan)


@cos_sin.defjvp
def _cos_sin_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    c, s = cos_sin(a)
    return (c, s), (-s * da, c * da)


def computed_once(x: jax.Array) -> jax.Array:
    """``x`` itself (bit for bit where finite; NaN where infinite), ending in a division by
    one: XLA counts a division as expensive and so computes it in a kernel of its own,
    rather than again inside every kernel that broadcasts ``x``, as it does with cheap
    elementwise work (``cos_sin``'s polynomials, a joint's rotation from them)."""
    return x / (1.0 + 0.0 * x)


def rot_x(a: Any) -> Float[Array, "3 3"]:
    """Rotation matrix of angle ``a`` about the x axis."""
    a = jnp.asarray(a)
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.stack([jnp.stack([o, z, z]), jnp.stack([z, c, -s]), jnp.stack([z, s, c])])


def rot_y(a: Any) -> Float[Array, "3 3"]:
    """Rotation matrix of angle ``a`` about the y axis."""
    a = jnp.asarray(a)
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.stack([jnp.stack([c, z, s]), jnp.stack([z, o, z]), jnp.stack([-s, z, c])])


def rot_z(a: Any) -> Float[Array, "3 3"]:
    """Rotation matrix of angle ``a`` about the z axis."""
    a = jnp.asarray(a)
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(a), jnp.zeros_like(a)
    return jnp.stack([jnp.stack([c, -s, z]), jnp.stack([s, c, z]), jnp.stack([z, z, o])])


_ROT = (rot_x, rot_y, rot_z)
_AXIS = {"x": 0, "y": 1, "z": 2, "X": 0, "Y": 1, "Z": 2}


def axis_index(axis: int | str) -> int:
    """Map ``0/1/2`` or ``'x'/'y'/'z'`` to a coordinate-axis index."""
    if isinstance(axis, str):
        if axis not in _AXIS:
            raise ValueError(f"unknown coordinate axis {axis!r}; use 'x', 'y' or 'z'")
        return _AXIS[axis]
    if axis not in (0, 1, 2):
        raise ValueError(f"unknown coordinate axis {axis!r}; use 0, 1 or 2")
    return int(axis)


def _unit_constant(axis: Any) -> np.ndarray | None:
    """A constant (non-traced) axis normalised with NumPy, None for a traced one: constant
    axes (joint definitions) then cost no traced operations."""
    if isinstance(axis, jax.Array) and not isinstance(axis, jax.core.Tracer):
        axis = np.asarray(axis)
    if isinstance(axis, (tuple, list, np.ndarray)):
        a = np.asarray(axis, dtype=float)
        n = float(np.linalg.norm(a))
        return a / n if n > 0 else a
    return None


def rot_axis(angle: Any, axis: Any) -> Float[Array, "3 3"]:
    """Rotation of ``angle`` about a unit (or not) axis vector (Rodrigues' formula)."""
    dt = jnp.result_type(angle, float)
    kc = _unit_constant(axis)
    s, c = jnp.sin(angle), jnp.cos(angle)
    if kc is not None:
        # A constant axis (a joint's definition): K and K^2 are NumPy constants, so the
        # rotation is two scaled constant matrices (a CustomJoint has three per evaluation).
        Kc = np.cross(np.eye(3), kc)  # row i: e_i x k, which is row i of skew(k)
        return jnp.asarray(np.eye(3), dt) + s * jnp.asarray(Kc, dt) + (1 - c) * jnp.asarray(Kc @ Kc, dt)
    K = skew(safe_normalize(jnp.asarray(axis, dtype=dt)))
    return jnp.eye(3, dtype=K.dtype) + s * K + (1 - c) * (K @ K)


def body_fixed(angles: Any, seq: str = "xyz") -> Float[Array, "3 3"]:
    """Body-fixed Euler sequence: ``R = R_a(q0) @ R_b(q1) @ R_c(q2)``."""
    R = _ROT[axis_index(seq[0])](angles[0])
    for i in range(1, len(seq)):
        R = R @ _ROT[axis_index(seq[i])](angles[i])
    return R


def space_fixed(angles: Any, seq: str = "xyz") -> Float[Array, "3 3"]:
    """Space-fixed Euler sequence: first about ``seq[0]`` of the fixed frame, and so on."""
    R = _ROT[axis_index(seq[0])](angles[0])
    for i in range(1, len(seq)):
        R = _ROT[axis_index(seq[i])](angles[i]) @ R
    return R


def quat_to_rot(q: Float[Array, " 4"]) -> Float[Array, "3 3"]:
    """Rotation matrix of a quaternion ``[w, x, y, z]``; it is normalised first."""
    w, x, y, z = jnp.unstack(safe_normalize(q))
    return jnp.stack(
        [
            jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)]),
            jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)]),
            jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]),
        ]
    )


def rot_to_quat(R: Float[Array, "3 3"]) -> Float[Array, " 4"]:
    """Quaternion ``[w, x, y, z]`` (with ``w >= 0``) of a rotation matrix.

    Uses all four branches of Shepperd's method selected with ``jnp.where`` so it is
    jittable and differentiable everywhere except the branch switch points.
    """
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    cands = jnp.stack(
        [
            jnp.stack([1 + tr, R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]),
            jnp.stack([R[2, 1] - R[1, 2], 1 + 2 * R[0, 0] - tr, R[0, 1] + R[1, 0], R[0, 2] + R[2, 0]]),
            jnp.stack([R[0, 2] - R[2, 0], R[0, 1] + R[1, 0], 1 + 2 * R[1, 1] - tr, R[1, 2] + R[2, 1]]),
            jnp.stack([R[1, 0] - R[0, 1], R[0, 2] + R[2, 0], R[1, 2] + R[2, 1], 1 + 2 * R[2, 2] - tr]),
        ]
    )
    diag = jnp.stack([tr, R[0, 0], R[1, 1], R[2, 2]])
    k = jnp.argmax(diag)
    v = cands[k]
    q = v / (2 * jnp.sqrt(jnp.maximum(v[k], 1e-300)))
    return q * jnp.where(q[0] < 0, -1.0, 1.0)


def quat_mul(a: Float[Array, " 4"], b: Float[Array, " 4"]) -> Float[Array, " 4"]:
    """Hamilton product ``a * b`` of ``[w, x, y, z]`` quaternions."""
    aw, av = a[0], a[1:]
    bw, bv = b[0], b[1:]
    return jnp.concatenate([jnp.stack([aw * bw - av @ bv]), aw * bv + bw * av + cross(av, bv)])


def quat_N_parent(q: Float[Array, " 4"]) -> Float[Array, "4 3"]:
    """Matrix N with ``qdot = N w`` for ``w`` in the parent (F) frame."""
    w, x, y, z = q
    return 0.5 * jnp.stack(
        [
            jnp.stack([-x, -y, -z]),
            jnp.stack([w, z, -y]),
            jnp.stack([-z, w, x]),
            jnp.stack([y, -x, w]),
        ]
    )


def rot_to_body_fixed_xyz(R: Float[Array, "3 3"]) -> Float[Array, " 3"]:
    """Angles ``[a, b, c]`` with ``R = Rx(a) Ry(b) Rz(c)`` (the one with ``|b| <= pi/2``)."""
    b = jnp.arcsin(jnp.clip(R[0, 2], -1.0, 1.0))
    a = jnp.arctan2(-R[1, 2], R[2, 2])
    c = jnp.arctan2(-R[0, 1], R[0, 0])
    return jnp.stack([a, b, c])


def axis_angle_to_rot(v: Float[Array, " 3"]) -> Float[Array, "3 3"]:
    """Rotation of ``|v|`` radians about ``v`` (exponential map), smooth at ``v = 0``."""
    th2 = v @ v
    small = th2 < 1e-8
    th2s = jnp.where(small, 1.0, th2)
    th = jnp.sqrt(th2s)
    a = jnp.where(small, 1 - th2 / 6, jnp.sin(th) / th)
    b = jnp.where(small, 0.5 - th2 / 24, (1 - jnp.cos(th)) / th2s)
    K = skew(v)
    return jnp.eye(3, dtype=K.dtype) + a * K + b * (K @ K)


def rot_to_axis_angle(R: Float[Array, "3 3"]) -> Float[Array, " 3"]:
    """Rotation vector (axis times angle in ``[0, pi]``) of ``R``, smooth at identity."""
    q = rot_to_quat(R)
    s = safe_norm(q[1:])
    ang = 2 * jnp.arctan2(s, q[0])
    small = s < 1e-7
    scale = jnp.where(small, 2.0 / jnp.where(q[0] == 0, 1.0, q[0]), ang / jnp.where(small, 1.0, s))
    return q[1:] * scale


# ----------------------------------------------------------------------------- frames


class Transform(eqx.Module):
    """A rigid transform ``X_AB``: frame B's orientation ``R`` and origin ``p`` in frame A.

    Attributes:
        R: Rotation matrix ``R_AB`` (3, 3).
        p: Position of B's origin measured from A's origin, in A (3,).
    """

    R: Float[Array, "3 3"]
    p: Float[Array, " 3"]

    def __init__(self, R: ArrayLike | None = None, p: ArrayLike | None = None):
        if R is None:
            R = np.eye(3)
        if p is None:
            p = np.zeros(3)
        R_arr = _as_float(R)
        p_arr = _as_float(p)
        if R_arr.shape[-2:] != (3, 3):
            raise ValueError(f"Transform: R must have shape (3, 3), got {R_arr.shape}")
        if p_arr.shape[-1:] != (3,):
            raise ValueError(f"Transform: p must have shape (3,), got {p_arr.shape}")
        self.R = R_arr
        self.p = p_arr

    def compose(self, other: Transform) -> Transform:
        """``X_AC = X_AB * X_BC``."""
        return Transform(self.R @ other.R, self.p + self.R @ other.p)

    def __mul__(self, other: Transform) -> Transform:
        return self.compose(other)

    def invert(self) -> Transform:
        """``X_BA`` from ``X_AB``."""
        Rt = jnp.swapaxes(self.R, -1, -2)
        return Transform(Rt, -(Rt @ self.p))

    def apply(self, station: Any) -> Float[Array, " 3"]:
        """Re-measure a station given in B into A: ``p_A = R p_B + p``."""
        return self.R @ jnp.asarray(station) + self.p


def _as_float(x: Any) -> jax.Array:
    a = jnp.asarray(x)
    return a if jnp.issubdtype(a.dtype, jnp.floating) else a.astype(jnp.result_type(float))


def check_rotation(R: Any, what: str, tol: float = 1e-6) -> np.ndarray:
    """``R`` as a NumPy array if it is a proper rotation (finite 3x3, ``max |R^T R - I| <=
    tol``, ``|det R - 1| <= tol``), else a ValueError naming ``what`` and the fix. For
    fixed frames and data given at build time (not traced values)."""
    Rn = np.asarray(R, dtype=float)
    if Rn.shape != (3, 3) or not np.all(np.isfinite(Rn)):
        raise ValueError(f"{what}: R must be a finite 3x3 matrix, got shape {Rn.shape}")
    err = float(np.max(np.abs(Rn.T @ Rn - np.eye(3))))
    det = float(np.linalg.det(Rn))
    if err > tol or abs(det - 1.0) > tol:
        raise ValueError(
            f"{what}: R is not a rotation (a proper rotation has R^T R = I and det R = +1; here "
            f"max |R^T R - I| = {err:.3g}, det R = {det:.6g}); build it with sj.Rotation (e.g. "
            "sj.Rotation.about_axis / from_quaternion) or orthonormalise it "
            "(scipy.spatial.transform.Rotation.from_matrix(R).as_matrix())"
        )
    return Rn


class Rotation:
    """Constructors and conversions for 3x3 rotation matrices (Simbody ``Rotation``)."""

    about_x = staticmethod(rot_x)
    about_y = staticmethod(rot_y)
    about_z = staticmethod(rot_z)
    about_axis = staticmethod(rot_axis)
    from_quaternion = staticmethod(quat_to_rot)
    to_quaternion = staticmethod(rot_to_quat)
    from_axis_angle = staticmethod(axis_angle_to_rot)
    to_axis_angle = staticmethod(rot_to_axis_angle)
    body_fixed = staticmethod(body_fixed)
    space_fixed = staticmethod(space_fixed)
    to_body_fixed_xyz = staticmethod(rot_to_body_fixed_xyz)

    @staticmethod
    def identity() -> Float[Array, "3 3"]:
        """The identity rotation."""
        return jnp.eye(3)


# ----------------------------------------------------------------------------- spatial


def cross_motion(v: Float[Array, " 6"], m: Float[Array, " 6"]) -> Float[Array, " 6"]:
    """Spatial motion cross product ``v x m`` (``[angular; linear]``)."""
    w, vl = jnp.split(v, 2)
    ma, ml = jnp.split(m, 2)
    return jnp.concatenate([cross(w, ma), cross(w, ml) + cross(vl, ma)])


def cross_force(v: Float[Array, " 6"], f: Float[Array, " 6"]) -> Float[Array, " 6"]:
    """Spatial force cross product ``v x* f`` (``[torque; force]``)."""
    w, vl = jnp.split(v, 2)
    fa, fl = jnp.split(f, 2)
    return jnp.concatenate([cross(w, fa) + cross(vl, fl), cross(w, fl)])


def _upper_entries(J: Float[Array, "3 3"]) -> Float[Array, " 6"]:
    """``[Jxx, Jxy, Jyy, Jxz, Jyz, Jzz]`` of a symmetric 3x3, as four slices, concatenated."""
    return jnp.concatenate([J[0, :2], J[1, 1:2], J[:2, 2], J[2, 2:]])


def inertia_parameters(
    mass: Float[Array, ""], com: Float[Array, " 3"], I_com: Float[Array, "3 3"]
) -> Float[Array, " 10"]:
    """A spatial inertia about the origin of the frame the arguments are expressed in, as
    its ten dynamic parameters ``[m, m c, Jxx, Jxy, Jyy, Jxz, Jyz, Jzz]`` (``c`` the mass
    center, ``J = I_com + m (|c|^2 1 - c c^T)`` the rotational inertia about the origin;
    Pinocchio's order). The 6x6 matrix (``inertia_matrix``) in 10 numbers
    instead of 36, and linear in them: sums of inertias are sums of parameters."""
    J = I_com + mass * (jnp.dot(com, com) * jnp.eye(3, dtype=com.dtype) - jnp.outer(com, com))
    return jnp.concatenate([mass[None], mass * com, _upper_entries(J)])


def transform_inertia_parameters(
    R: Float[Array, "3 3"], p: Float[Array, " 3"], P: Float[Array, " 10"]
) -> Float[Array, " 10"]:
    """Dynamic parameters (``inertia_parameters``) of an inertia given in a frame F about
    F's origin, re-expressed in the frame where F has orientation ``R`` and origin ``p``,
    about that frame's origin: ``h' = m p + R h``, ``J' = R J R^T + m (|p|^2 1 - p p^T) +
    2 (p . R h) 1 - (p (R h)^T + (R h) p^T)``. No division by the mass, so a massless or
    composite inertia transforms as well as a body's."""
    m, h = P[0], P[1:4]
    Jxx, Jxy, Jyy, Jxz, Jyz, Jzz = _rotational_entries(P)
    J = jnp.stack([jnp.stack([Jxx, Jxy, Jxz]), jnp.stack([Jxy, Jyy, Jyz]), jnp.stack([Jxz, Jyz, Jzz])])
    Rh = R @ h
    eye = jnp.eye(3, dtype=P.dtype)
    J = R @ J @ R.T + m * (jnp.dot(p, p) * eye - jnp.outer(p, p))
    J = J + 2.0 * jnp.dot(p, Rh) * eye - jnp.outer(p, Rh) - jnp.outer(Rh, p)
    return jnp.concatenate([m[None], m * p + Rh, _upper_entries(J)])


def _rotational_entries(P: Float[Array, "... 10"]) -> tuple[Any, ...]:
    """``Jxx, Jxy, Jyy, Jxz, Jyz, Jzz`` of dynamic parameters (``inertia_parameters``)."""
    return tuple(jnp.unstack(P, axis=-1)[4:])


def inertia_times(P: Float[Array, "... 10"], V: Float[Array, "... 6"]) -> Float[Array, "... 6"]:
    """``I V`` for spatial inertias given by their dynamic parameters (``inertia_parameters``):
    ``[J w + h x v; m v - h x w]`` with ``h = m c``. Elementwise (no matrix product), so
    XLA fuses it with its neighbours; at B = 1024 it made forward dynamics ~10% faster than
    products with the 6x6 matrices."""
    m, h, _ = jax.lax.split(P, (1, 3, 6), axis=-1)
    Jxx, Jxy, Jyy, Jxz, Jyz, Jzz = _rotational_entries(P)
    w, v = jax.lax.split(V, (3, 3), axis=-1)
    wx, wy, wz = jnp.unstack(w, axis=-1)
    Jw = jnp.stack(
        [Jxx * wx + Jxy * wy + Jxz * wz, Jxy * wx + Jyy * wy + Jyz * wz, Jxz * wx + Jyz * wy + Jzz * wz],
        axis=-1,
    )
    return jnp.concatenate([Jw + cross(h, v), m * v - cross(h, w)], axis=-1)


def inertia_matrix(P: Float[Array, "... 10"]) -> Float[Array, "... 6 6"]:
    """The 6x6 spatial inertia of dynamic parameters (``inertia_parameters``):
    ``[[J, skew(h)], [-skew(h), m 1]]``."""
    m, h = P[..., 0], P[..., 1:4]
    Jxx, Jxy, Jyy, Jxz, Jyz, Jzz = _rotational_entries(P)
    J = jnp.stack(
        [jnp.stack(r, axis=-1) for r in ([Jxx, Jxy, Jxz], [Jxy, Jyy, Jyz], [Jxz, Jyz, Jzz])], axis=-2
    )
    H = skew(h)
    mI = m[..., None, None] * jnp.broadcast_to(jnp.eye(3, dtype=P.dtype), m.shape + (3, 3))
    top = jnp.concatenate([J, H], axis=-1)
    return jnp.concatenate([top, jnp.concatenate([-H, mI], axis=-1)], axis=-2)


# ----------------------------------------------------------------------------- inertia


def _inertia_matrix(xx: Any, yy: Any, zz: Any, xy: Any = 0.0, xz: Any = 0.0, yz: Any = 0.0) -> np.ndarray:
    return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]], dtype=float)


class Inertia:
    """Rotational inertia matrix (Simbody ``Inertia``), about a point given by its user.

    ``Inertia(xx, yy, zz, xy=0, xz=0, yz=0)``, ``Inertia(I3x3)``, or ``Inertia(moment)`` for
    a scalar ``moment * 1``. Values are checked at construction: symmetric, non-negative
    principal moments obeying the triangle inequality.
    """

    def __init__(self, *args: Any):
        if len(args) == 1 and np.ndim(args[0]) == 2:
            M = np.asarray(args[0], dtype=float)
            if M.shape != (3, 3):
                raise ValueError(f"Inertia: a matrix must be 3x3, got {M.shape}")
        elif len(args) == 1:
            M = float(args[0]) * np.eye(3)
        elif len(args) in (3, 6):
            M = _inertia_matrix(*[float(a) for a in args])
        else:
            raise TypeError("Inertia takes (moment), (xx, yy, zz), (xx, yy, zz, xy, xz, yz) or a 3x3")
        check_inertia(M, "Inertia")
        self.matrix = M

    @staticmethod
    def point_mass(mass: float, position: Any) -> Inertia:
        """Inertia about the origin of a point mass at ``position``."""
        p = np.asarray(position, dtype=float)
        return Inertia(mass * (p @ p * np.eye(3) - np.outer(p, p)))

    def __repr__(self) -> str:
        return f"Inertia({self.matrix.tolist()})"


def check_inertia(M: np.ndarray, where: str, triangle: bool = True) -> None:
    """Raise a clear ``ValueError`` if ``M`` is not a physically valid inertia matrix
    (``triangle=False`` skips the triangle inequality, which some published models break)."""
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{where}: inertia contains NaN or infinity: {M.tolist()}")
    if not np.allclose(M, M.T, atol=1e-12 * max(1.0, np.abs(M).max())):
        raise ValueError(f"{where}: inertia matrix must be symmetric, got {M.tolist()}")
    ev = np.linalg.eigvalsh(M)
    tol = 1e-12 * max(1.0, np.abs(ev).max())
    if ev.min() < -tol:
        raise ValueError(
            f"{where}: inertia is not positive semi-definite (principal moments {ev.tolist()}); "
            "give moments >= 0 and products small enough (e.g. Inertia(0.1, 0.1, 0.1))"
        )
    if triangle and ev[0] + ev[1] < ev[2] - tol:
        raise ValueError(
            f"{where}: principal moments {ev.tolist()} violate the triangle inequality "
            "(I1 + I2 >= I3) that every rigid body obeys"
        )


class MassProperties:
    """Mass, center of mass and inertia of a body (Simbody ``MassProperties``).

    Args:
        mass: Mass (> 0 for a body that can move freely; 0 allowed for massless links that
            are not terminal).
        com: Center of mass location in the body frame B.
        inertia: Inertia about the **body origin** (as in Simbody), in B. An
            ``Inertia`` or a 3x3 matrix.
        strict: Also require the triangle inequality of the principal moments about the
            com (``False`` accepts inertias from files that break it, as OpenSim does; the
            inertia must still be symmetric positive semi-definite).

    As in Simbody, a State stores the mass and the *unit* inertia (gyration, ``I / mass``),
    so changing a body's mass in a State scales its inertia with it and the body stays
    physically valid.
    """

    def __init__(self, mass: float, com: Any = (0.0, 0.0, 0.0), inertia: Any = None, strict: bool = True):
        self.mass = float(mass)
        if not math.isfinite(self.mass) or self.mass < 0:
            raise ValueError(f"MassProperties: mass must be finite and >= 0, got {mass}")
        self.com = np.asarray(com, dtype=float).reshape(3)
        if inertia is None:
            inertia = Inertia(0.0)
        M = inertia.matrix if isinstance(inertia, Inertia) else np.asarray(inertia, dtype=float)
        check_inertia(M, "MassProperties", triangle=strict)
        if self.mass == 0 and np.abs(M).max() > 0:
            raise ValueError(
                "MassProperties: a massless body cannot have inertia (Simbody stores inertia as "
                "mass x unit inertia); give mass > 0 or Inertia(0)"
            )
        self.inertia = M
        # The inertia about the com must itself be valid.
        check_inertia(
            self.inertia_about_com(), "MassProperties (inertia shifted to the com)", triangle=strict
        )

    def unit_inertia(self) -> np.ndarray:
        """Gyration matrix ``G = I / mass`` about the body origin (Simbody's ``UnitInertia``);
        zero for a massless body."""
        return self.inertia / self.mass if self.mass > 0 else np.zeros((3, 3))

    def inertia_about_com(self) -> np.ndarray:
        """Inertia about the center of mass, in B."""
        c = self.com
        return self.inertia - self.mass * (c @ c * np.eye(3) - np.outer(c, c))

    @staticmethod
    def from_com_inertia(mass: float, com: Any, inertia_com: Any) -> MassProperties:
        """Build from an inertia given about the center of mass (OpenSim's convention)."""
        c = np.asarray(com, dtype=float)
        Ic = inertia_com.matrix if isinstance(inertia_com, Inertia) else np.asarray(inertia_com)
        return MassProperties(mass, c, Ic + mass * (c @ c * np.eye(3) - np.outer(c, c)))

    def shift_to_com(self) -> MassProperties:
        """The same body with its inertia expressed about the com (com at origin)."""
        return MassProperties(self.mass, np.zeros(3), self.inertia_about_com())

    def reexpress(self, R_BC: Any) -> MassProperties:
        """Re-express in frame C, given ``R_BC`` (C's axes in B), same origin."""
        R = np.asarray(R_BC, dtype=float)
        return MassProperties(self.mass, R.T @ self.com, R.T @ self.inertia @ R)

    def __repr__(self) -> str:
        return f"MassProperties(mass={self.mass}, com={self.com.tolist()})"
