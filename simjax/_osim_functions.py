"""OpenSim's Function family (the ones joint and coupler definitions use) as ``sj.Function``s.

Each evaluates with ``jax.numpy``, so derivatives of any order come from autodiff, and gives
the same numbers as OpenSim's implementation (checked against the ``opensim`` package in
``tests/test_io_osim.py``), including how each one extrapolates outside its knots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._functions import Function, Spline


def _x0(x: Any) -> jax.Array:
    a = jnp.asarray(x)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        a = a.astype(jnp.result_type(float))
    return jnp.reshape(a, (-1,))[0]


def _knots(
    name: str, x: Sequence[float], y: Sequence[float], min_n: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    xs = np.asarray(x, dtype=float).reshape(-1)
    ys = np.asarray(y, dtype=float).reshape(-1)
    if xs.shape != ys.shape:
        raise ValueError(f"{name}: x has {xs.size} values but y has {ys.size}; give one y per x")
    if xs.size < min_n:
        raise ValueError(f"{name}: needs at least {min_n} points, got {xs.size}")
    if np.any(np.diff(xs) <= 0):
        raise ValueError(f"{name}: x must be strictly increasing, got {xs.tolist()}")
    return xs, ys


class _PiecewiseCubic(Function):
    """``y_i + b_i dx + c_i dx^2 + d_i dx^3`` on ``[x_i, x_{i+1})``; linear outside with the
    end slopes ``b_0`` and ``b_{n-1}`` (OpenSim's rule for its splines)."""

    _numbers_as_data = True

    x: np.ndarray
    y: np.ndarray
    b: np.ndarray
    c: np.ndarray
    d: np.ndarray

    def calc_value(self, x):
        t = _x0(x)
        dt = t.dtype
        xs = jnp.asarray(self.x, dt)
        n = self.x.size
        # A handful of knots: one comparison with each (a binary search is a loop), and the
        # segment's five numbers in one gather.
        i = jnp.clip(jnp.searchsorted(xs, t, side="right", method="compare_all") - 1, 0, n - 2)
        table = jnp.stack([xs] + [jnp.asarray(a, dt) for a in (self.y, self.b, self.c, self.d)])
        x_i, y_i, b_i, c_i, d_i = table[:, i]
        dx = t - x_i
        inner = y_i + dx * (b_i + dx * (c_i + dx * d_i))
        left = self.y[0] + self.b[0] * (t - self.x[0])
        right = self.y[-1] + self.b[-1] * (t - self.x[-1])
        return jnp.where(t < self.x[0], left, jnp.where(t > self.x[-1], right, inner))


class SimmSpline(_PiecewiseCubic):
    """OpenSim ``SimmSpline``: the interpolating cubic spline of Forsythe, Malcolm and Moler,
    whose end conditions match the third derivative of the cubic through the first (last)
    four points; two points give a line, three a spline with zero end third derivatives."""

    def __init__(self, x: Sequence[float], y: Sequence[float]):
        xs, ys = _knots("SimmSpline", x, y)
        n = xs.size
        b, c, d = np.zeros(n), np.zeros(n), np.zeros(n)
        if n < 3:
            b[:] = (ys[1] - ys[0]) / (xs[1] - xs[0])
        else:
            nm1 = n - 1
            # Tridiagonal system: b = diagonal, d = off-diagonal, c = right-hand side.
            d[0] = xs[1] - xs[0]
            c[1] = (ys[1] - ys[0]) / d[0]
            for i in range(1, nm1):
                d[i] = xs[i + 1] - xs[i]
                b[i] = 2.0 * (d[i - 1] + d[i])
                c[i + 1] = (ys[i + 1] - ys[i]) / d[i]
                c[i] = c[i + 1] - c[i]
            b[0] = -d[0]
            b[nm1] = -d[n - 2]
            c[0] = c[nm1] = 0.0
            if n > 3:
                c[0] = c[2] / (xs[3] - xs[1]) - c[1] / (xs[2] - xs[0])
                c[nm1] = c[n - 2] / (xs[nm1] - xs[n - 3]) - c[n - 3] / (xs[n - 2] - xs[n - 4])
                c[0] = c[0] * d[0] * d[0] / (xs[3] - xs[0])
                c[nm1] = -c[nm1] * d[n - 2] * d[n - 2] / (xs[nm1] - xs[n - 4])
            for i in range(1, n):
                t = d[i - 1] / b[i - 1]
                b[i] -= t * d[i - 1]
                c[i] -= t * c[i - 1]
            c[nm1] /= b[nm1]
            for i in range(n - 2, -1, -1):
                c[i] = (c[i] - d[i] * c[i + 1]) / b[i]
            b[nm1] = (ys[nm1] - ys[n - 2]) / d[n - 2] + d[n - 2] * (c[n - 2] + 2.0 * c[nm1])
            for i in range(nm1):
                b[i] = (ys[i + 1] - ys[i]) / d[i] - d[i] * (c[i + 1] + 2.0 * c[i])
                d[i] = (c[i + 1] - c[i]) / d[i]
                c[i] = 3.0 * c[i]
            c[nm1] = 3.0 * c[nm1]
            d[nm1] = d[n - 2]
        self.x, self.y, self.b, self.c, self.d = xs, ys, b, c, d


class NaturalCubicSpline(_PiecewiseCubic):
    """OpenSim ``NaturalCubicSpline``: zero second derivative at both ends."""

    def __init__(self, x: Sequence[float], y: Sequence[float]):
        xs, ys = _knots("NaturalCubicSpline", x, y)
        nat = Spline(xs, ys)  # the same natural spline; here with per-knot end slope
        self.x, self.y = xs, ys
        self.b = np.append(nat.b, nat.b_end)
        self.c = np.append(nat.c, 0.0)
        self.d = np.append(nat.d, 0.0)


class PiecewiseLinearFunction(_PiecewiseCubic):
    """OpenSim ``PiecewiseLinearFunction``: straight segments, extended by the end slopes."""

    def __init__(self, x: Sequence[float], y: Sequence[float]):
        xs, ys = _knots("PiecewiseLinearFunction", x, y)
        b = np.empty(xs.size)
        b[:-1] = np.diff(ys) / np.diff(xs)
        b[-1] = b[-2]
        self.x, self.y, self.b = xs, ys, b
        self.c = self.d = np.zeros(xs.size)


class PiecewiseConstantFunction(Function):
    """OpenSim ``PiecewiseConstantFunction``: the value of the nearest knot at or below
    ``x`` (the first value below the first knot); derivatives are zero."""

    _numbers_as_data = True

    def __init__(self, x: Sequence[float], y: Sequence[float]):
        self.x, self.y = _knots("PiecewiseConstantFunction", x, y, min_n=1)

    def calc_value(self, x):
        t = _x0(x)
        i = jnp.clip(jnp.searchsorted(jnp.asarray(self.x, t.dtype), t, side="right") - 1, 0, self.x.size - 1)
        return jnp.asarray(self.y, t.dtype)[i] + 0.0 * t


class MultiplierFunction(Function):
    """OpenSim ``MultiplierFunction``: ``scale * f(x)``."""

    _numbers_as_data = True

    def __init__(self, function: Function, scale: float):
        self.function, self.scale = function, float(scale)
        self.arg_size = function.get_argument_size()

    def calc_value(self, x):
        return self.scale * self.function(x)


class Sine(Function):
    """OpenSim ``Sine``: ``amplitude sin(omega x + phase) + offset``."""

    _numbers_as_data = True

    def __init__(self, amplitude: float, omega: float, phase: float = 0.0, offset: float = 0.0):
        self.amplitude, self.omega, self.phase, self.offset = map(float, (amplitude, omega, phase, offset))

    def calc_value(self, x):
        t = _x0(x)
        return self.amplitude * jnp.sin(self.omega * t + self.phase) + self.offset


class CoupledFunction(Function):
    """``scale * f(independent) - dependent``: OpenSim's coupler equation, argument order
    ``[independent..., dependent]``."""

    _numbers_as_data = True

    def __init__(self, function: Function, scale: float, n_independent: int):
        self.function, self.scale, self.arg_size = function, float(scale), n_independent + 1

    def calc_value(self, x):
        a = jnp.asarray(x)
        return self.scale * self.function(a[:-1]) - a[-1]
