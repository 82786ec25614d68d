"""OpenSim's muscle curves (``SmoothSegmentedFunction``): C2-continuous chains of quintic
Bezier segments built from a few physical parameters, with straight-line extrapolation
outside their domain, as OpenSim's ``SmoothSegmentedFunctionFactory`` builds them.

A curve is a :class:`Curve` of arrays with any leading batch shape (one curve per
muscle): the control points ``px``, ``py`` (..., segments, 6) and the domain ``[x0, x1]``
with the end values and slopes used outside it. Its builders are plain JAX functions of
the parameters, so a curve (and everything computed from it) is differentiable in them.

Evaluation at ``x`` finds the segment whose x-range holds ``x`` (the first ``i`` with
``px[i, 0] <= x < px[i, 5]``, the last segment at its right end, as OpenSim's
``calcIndex``), solves the segment's ``x(u) = x`` for the Bezier parameter ``u`` by
bisection then Newton (x(u) is monotonic on every segment these builders make) and
returns ``y(u)``. The solve carries its own derivative rule, ``du = (dx - dx_p(u)) /
x'(u)`` (``dx_p`` the change of x(u) with the control points), so derivatives of every
order in ``x`` and in the parameters are exact: ``dy/dx = y'(u) / x'(u)``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_ROOT_EPS = float(np.sqrt(np.finfo(np.float64).eps))


class Curve(NamedTuple):
    """Control points and extrapolation data of smooth segmented curves (leading shape
    ``(...)``, one curve per entry).

    Attributes:
        px: x control points (..., segments, 6).
        py: y control points (..., segments, 6).
        x0: left end of the domain (...).
        x1: right end of the domain (...).
        y0: value at and left of ``x0`` (the line ``y0 + dydx0 (x - x0)``).
        y1: value at and right of ``x1``.
        dydx0: slope left of ``x0``.
        dydx1: slope right of ``x1``.
    """

    px: jax.Array
    py: jax.Array
    x0: jax.Array
    x1: jax.Array
    y0: jax.Array
    y1: jax.Array
    dydx0: jax.Array
    dydx1: jax.Array


def _scale_curviness(c):
    return 0.1 + 0.8 * c


def corner(x0, y0, dydx0, x1, y1, dydx1, c):
    """Control points (x, y), each (..., 6), of the quintic Bezier corner from ``(x0,
    y0)`` with slope ``dydx0`` to ``(x1, y1)`` with slope ``dydx1``: its inner points
    pulled towards the intersection of the two end tangents by the (scaled) curviness
    ``c`` (OpenSim's ``calcQuinticBezierCornerControlPoints``)."""
    parallel = jnp.abs(dydx0 - dydx1) <= _ROOT_EPS
    den = jnp.where(parallel, 1.0, dydx0 - dydx1)
    xc = jnp.where(parallel, 0.5 * (x0 + x1), (y1 - y0 - x1 * dydx1 + x0 * dydx0) / den)
    yc = (xc - x1) * dydx1 + y1
    x0m = x0 + c * (xc - x0)
    y0m = y0 + c * (yc - y0)
    x1m = x1 + c * (xc - x1)
    y1m = y1 + c * (yc - y1)
    px = jnp.stack(jnp.broadcast_arrays(x0, x0m, x0m, x1m, x1m, x1), axis=-1)
    py = jnp.stack(jnp.broadcast_arrays(y0, y0m, y0m, y1m, y1m, y1), axis=-1)
    return px, py


def _chain(corners, x0, x1, y0, y1, dydx0, dydx1) -> Curve:
    px = jnp.stack([c[0] for c in corners], axis=-2)
    py = jnp.stack([c[1] for c in corners], axis=-2)
    shape = px.shape[:-2]
    b = [jnp.broadcast_to(jnp.asarray(v, px.dtype), shape) for v in (x0, x1, y0, y1, dydx0, dydx1)]
    return Curve(px, py, *b)


def active_force_length_curve(
    min_norm_active_fiber_length=0.47 - 0.0259,
    transition_norm_fiber_length=0.73,
    max_norm_active_fiber_length=1.8123,
    shallow_ascending_slope=0.8616,
    minimum_value=0.1,
) -> Curve:
    """OpenSim's ``ActiveForceLengthCurve`` (five segments: a shallow then steep ascending
    limb, the plateau peaking at 1 at the optimal length 1 and the descending limb, with
    ``minimum_value`` outside ``[min, max]`` active lengths; curviness 1)."""
    x0, x1, x2, x3 = (
        min_norm_active_fiber_length,
        transition_norm_fiber_length,
        1.0,
        max_norm_active_fiber_length,
    )
    ylow, dydx = minimum_value, shallow_ascending_slope
    c = _scale_curviness(1.0)
    x_delta = 0.05 * x2
    xs = x2 - x_delta
    y1 = 1.0 - dydx * (xs - x1)
    dydx01 = 1.25 * y1 / (x1 - x0)
    x01 = x0 + 0.5 * (x1 - x0)
    y01 = 0.5 * y1
    x1s = x1 + 0.5 * (xs - x1)
    y1s = y1 + 0.5 * (1.0 - y1)
    x23 = (x2 + x_delta) + 0.5 * (x3 - (x2 + x_delta))
    y23 = 0.5
    dydx23 = -1.0 / ((x3 - x_delta) - (x2 + x_delta))
    corners = (
        corner(x0, ylow, 0.0, x01, y01, dydx01, c),
        corner(x01, y01, dydx01, x1s, y1s, dydx, c),
        corner(x1s, y1s, dydx, x2, 1.0, 0.0, c),
        corner(x2, 1.0, 0.0, x23, y23, dydx23, c),
        corner(x23, y23, dydx23, x3, ylow, 0.0, c),
    )
    return _chain(corners, x0, x3, ylow, ylow, 0.0, 0.0)


def _force_velocity_corners(fmax_e, dydx_c, dydx_near_c, dydx_iso, dydx_e, dydx_near_e, curv_c, curv_e):
    cc, ce = _scale_curviness(curv_c), _scale_curviness(curv_e)
    x_near_c = -0.9
    y_near_c = 0.5 * dydx_near_c * (x_near_c + 1.0) + 0.5 * dydx_c * (x_near_c + 1.0)
    x_near_e = 0.9
    y_near_e = fmax_e + 0.5 * dydx_near_e * (x_near_e - 1.0) + 0.5 * dydx_e * (x_near_e - 1.0)
    return (
        corner(-1.0, 0.0, dydx_c, x_near_c, y_near_c, dydx_near_c, cc),
        corner(x_near_c, y_near_c, dydx_near_c, 0.0, 1.0, dydx_iso, cc),
        corner(0.0, 1.0, dydx_iso, x_near_e, y_near_e, dydx_near_e, ce),
        corner(x_near_e, y_near_e, dydx_near_e, 1.0, fmax_e, dydx_e, ce),
    )


def force_velocity_curve(
    concentric_slope_at_vmax=0.0,
    concentric_slope_near_vmax=0.25,
    isometric_slope=5.0,
    eccentric_slope_at_vmax=0.0,
    eccentric_slope_near_vmax=0.15,
    max_eccentric_velocity_force_multiplier=1.4,
    concentric_curviness=0.6,
    eccentric_curviness=0.9,
) -> Curve:
    """OpenSim's ``ForceVelocityCurve`` of the normalized fibre velocity in [-1, 1]
    (lengthening > 0): 0 at -1, 1 at 0, ``max_eccentric_velocity_force_multiplier`` at 1."""
    corners = _force_velocity_corners(
        max_eccentric_velocity_force_multiplier,
        concentric_slope_at_vmax,
        concentric_slope_near_vmax,
        isometric_slope,
        eccentric_slope_at_vmax,
        eccentric_slope_near_vmax,
        concentric_curviness,
        eccentric_curviness,
    )
    fmax = max_eccentric_velocity_force_multiplier
    return _chain(corners, -1.0, 1.0, 0.0, fmax, concentric_slope_at_vmax, eccentric_slope_at_vmax)


def force_velocity_inverse_curve(
    concentric_slope_at_vmax=0.1,
    concentric_slope_near_vmax=0.25,
    isometric_slope=5.0,
    eccentric_slope_at_vmax=0.1,
    eccentric_slope_near_vmax=0.15,
    max_eccentric_velocity_force_multiplier=1.4,
    concentric_curviness=0.6,
    eccentric_curviness=0.9,
) -> Curve:
    """OpenSim's ``ForceVelocityInverseCurve``: the force-velocity curve of the same
    parameters with x and y swapped (the normalized velocity of a multiplier); its end
    slopes are the reciprocals of the at-vmax slopes, which must be > 0."""
    corners = _force_velocity_corners(
        max_eccentric_velocity_force_multiplier,
        concentric_slope_at_vmax,
        concentric_slope_near_vmax,
        isometric_slope,
        eccentric_slope_at_vmax,
        eccentric_slope_near_vmax,
        concentric_curviness,
        eccentric_curviness,
    )
    swapped = tuple((py, px) for px, py in corners)
    fmax = max_eccentric_velocity_force_multiplier
    return _chain(
        swapped, 0.0, fmax, -1.0, 1.0, 1.0 / concentric_slope_at_vmax, 1.0 / eccentric_slope_at_vmax
    )


def fiber_force_length_curve(
    strain_at_zero_force=0.0,
    strain_at_one_norm_force=0.7,
    stiffness_at_low_force=None,
    stiffness_at_one_norm_force=None,
    curviness=None,
) -> Curve:
    """OpenSim's ``FiberForceLengthCurve`` (passive fibre force of the normalized fibre
    length). The three optional parameters are given all or none; none gives OpenSim's
    fitted defaults (``2 / (e1 - e0)``, 0.2, 0.75)."""
    e0, e1 = strain_at_zero_force, strain_at_one_norm_force
    if stiffness_at_low_force is None:
        k_iso, k_low, curv = 2.0 / (e1 - e0), 0.2, 0.75
    else:
        k_iso, k_low, curv = stiffness_at_one_norm_force, stiffness_at_low_force, curviness
    c = _scale_curviness(curv)
    x_zero, x_iso = 1.0 + e0, 1.0 + e1
    delta = jnp.minimum(0.1 / k_iso, 0.1 * (x_iso - x_zero))
    x_low = x_zero + delta
    x_foot = x_zero + 0.5 * (x_low - x_zero)
    y_low = k_low * (x_low - x_foot)
    corners = (
        corner(x_zero, 0.0, 0.0, x_low, y_low, k_low, c),
        corner(x_low, y_low, k_low, x_iso, 1.0, k_iso, c),
    )
    return _chain(corners, x_zero, x_iso, 0.0, 1.0, 0.0, k_iso)


def tendon_force_length_curve(
    strain_at_one_norm_force=0.049,
    stiffness_at_one_norm_force=None,
    norm_force_at_toe_end=None,
    curviness=None,
) -> Curve:
    """OpenSim's ``TendonForceLengthCurve`` (tendon force of the normalized tendon
    length). The three optional parameters are given all or none; none gives OpenSim's
    defaults (``1.375 / strain``, 2/3, 0.5)."""
    e_iso = strain_at_one_norm_force
    if stiffness_at_one_norm_force is None:
        k_iso, f_toe, curv = 1.375 / e_iso, 2.0 / 3.0, 0.5
    else:
        k_iso, f_toe, curv = stiffness_at_one_norm_force, norm_force_at_toe_end, curviness
    c = _scale_curviness(curv)
    x_iso = 1.0 + e_iso
    x_toe = (f_toe - 1.0) / k_iso + x_iso
    x_foot = 1.0 + (x_toe - 1.0) / 10.0
    y_toe_mid = 0.5 * f_toe
    x_toe_mid = (y_toe_mid - 1.0) / k_iso + x_iso
    dydx_toe_mid = y_toe_mid / (x_toe_mid - x_foot)
    x_toe_ctrl = x_foot + 0.5 * (x_toe_mid - x_foot)
    y_toe_ctrl = dydx_toe_mid * (x_toe_ctrl - x_foot)
    corners = (
        corner(1.0, 0.0, 0.0, x_toe_ctrl, y_toe_ctrl, dydx_toe_mid, c),
        corner(x_toe_ctrl, y_toe_ctrl, dydx_toe_mid, x_toe, f_toe, k_iso, c),
    )
    return _chain(corners, 1.0, x_toe, 0.0, f_toe, 0.0, k_iso)


def fiber_compressive_force_length_curve(
    norm_length_at_zero_force=0.5, stiffness_at_zero_length=None, curviness=None
) -> Curve:
    """OpenSim's ``FiberCompressiveForceLengthCurve`` (1 at length 0 falling to 0 at
    ``norm_length_at_zero_force``); defaults ``-2 / lmax`` and 0.5."""
    lmax = norm_length_at_zero_force
    if stiffness_at_zero_length is None:
        k, curv = -2.0 / lmax, 0.5
    else:
        k, curv = stiffness_at_zero_length, curviness
    return _chain((corner(0.0, 1.0, k, lmax, 0.0, 0.0, _scale_curviness(curv)),), 0.0, lmax, 1.0, 0.0, k, 0.0)


# Monomial coefficients of a quintic Bezier: x(u) = sum_i a_i u^i with a = points @ _MONO.T
_MONO = np.array(
    [
        [1, 0, 0, 0, 0, 0],
        [-5, 5, 0, 0, 0, 0],
        [10, -20, 10, 0, 0, 0],
        [-10, 30, -30, 10, 0, 0],
        [5, -20, 30, -20, 5, 0],
        [-1, 5, -10, 10, -5, 1],
    ],
    dtype=float,
)
_SAMPLES = 16


def _monomial(p):
    """Monomial coefficients (..., 6) of the Bezier segments with control points ``p``."""
    return jnp.einsum("...i,ki->...k", p, _MONO)


def _horner(u, a):
    out = a[..., 5]
    for i in range(4, -1, -1):
        out = out * u + a[..., i]
    return out


def _horner_du(u, a):
    out = 5.0 * a[..., 5]
    for i in range(4, 0, -1):
        out = out * u + i * a[..., i]
    return out


def _bezier(u, p):
    return _horner(u, _monomial(p))


def _bezier_du(u, p):
    return _horner_du(u, _monomial(p))


@jax.custom_jvp
def _solve_u(x, p):
    """The u in [0, 1] with ``x(u) = x`` on one increasing Bezier segment ``p`` (..., 6):
    the interval of ``u = k/16`` samples that holds ``x``, linear interpolation in it,
    then Newton steps kept in that interval (no loop: compiles small, vmaps cheaply)."""
    xs, ps = jax.lax.stop_gradient((x, p))
    a = _monomial(ps)
    grid = jnp.asarray(np.linspace(0.0, 1.0, _SAMPLES + 1)[1:-1], xs.dtype)
    grid = jnp.reshape(grid, (1,) * xs.ndim + grid.shape)
    samples = _horner(grid, a[..., None, :])  # (..., 15) interior samples
    j = jnp.sum(samples <= xs[..., None], axis=-1).astype(xs.dtype)
    lo, hi = j / _SAMPLES, (j + 1.0) / _SAMPLES
    xa, xb = _horner(lo, a), _horner(hi, a)
    u = lo + jnp.clip((xs - xa) / jnp.where(xb > xa, xb - xa, 1.0), 0.0, 1.0) / _SAMPLES
    for _ in range(4):
        d = _horner_du(u, a)
        u = jnp.clip(u - (_horner(u, a) - xs) / jnp.where(d == 0, 1.0, d), lo, hi)
    return u


@_solve_u.defjvp
def _solve_u_jvp(primals, tangents):
    x, p = primals
    dx, dp = tangents
    u = _solve_u(x, p)
    du = (dx - _bezier(u, dp)) / _bezier_du(u, p)
    return u, du


def evaluate(curve: Curve, x: jax.Array) -> jax.Array:
    """The curve's value at ``x`` (shape of the curve's batch): the Bezier segment that
    holds ``x`` inside ``[x0, x1]``, the end lines outside (OpenSim's ``calcValue``)."""
    x = jnp.asarray(x)
    shape = jnp.broadcast_shapes(x.shape, curve.x0.shape)
    x = jnp.broadcast_to(x, shape)
    curve = Curve(
        jnp.broadcast_to(curve.px, (*shape, *curve.px.shape[-2:])),
        jnp.broadcast_to(curve.py, (*shape, *curve.py.shape[-2:])),
        *(jnp.broadcast_to(v, shape) for v in curve[2:]),
    )
    # where, not clip: at x0 or x1 themselves the slope is the Bezier's, not half of it
    xin = jnp.where(x < curve.x0, curve.x0, jnp.where(x > curve.x1, curve.x1, x))
    px, py = curve.px, curve.py
    nseg = px.shape[-2]
    inside = (xin[..., None] >= px[..., 0]) & (xin[..., None] < px[..., 5])
    inside = inside.at[..., nseg - 1].set(inside[..., nseg - 1] | (xin >= px[..., nseg - 1, 5]))
    idx = jnp.argmax(inside, axis=-1)
    pick = jax.nn.one_hot(idx, nseg, dtype=px.dtype)[..., None]
    sx = jnp.sum(pick * px, axis=-2)
    sy = jnp.sum(pick * py, axis=-2)
    y = _bezier(_solve_u(xin, sx), sy)
    left = curve.y0 + curve.dydx0 * (x - curve.x0)
    right = curve.y1 + curve.dydx1 * (x - curve.x1)
    return jnp.where(x < curve.x0, left, jnp.where(x > curve.x1, right, y))


def value_and_derivative(curve: Curve, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The curve's value and slope ``dy/dx`` at ``x`` (elementwise)."""
    x = jnp.asarray(x)
    y, dy = jax.jvp(lambda v: evaluate(curve, v), (x,), (jnp.ones_like(x),))
    return y, dy
