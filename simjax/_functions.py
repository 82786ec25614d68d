"""``sj.Function``: Simbody's ``Function`` family as JAX callables (derivatives by autodiff).

Each is called with a 1-D array of arguments and returns a scalar. ``calc_derivative``
exists for Simbody users but comes from autodiff; no user ever writes a derivative.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike


class Function:
    """Base of the function family: ``f(x)`` with ``x`` a 1-D array of arguments."""

    arg_size: int = 1
    # Built-in kinds evaluate with any array in place of their float attributes, so their
    # numbers can be data (``_split``/``_bind``): mobilizers whose functions differ only in
    # numbers (knots, coefficients) then share one traced kind. A user subclass may do
    # Python control flow on its attributes, so it stays one kind per instance.
    _numbers_as_data: bool = False

    def __call__(self, x: Any) -> jax.Array:
        return self.calc_value(x)

    # Equal by definition (kind and attribute values), so that two models built with equal
    # functions (e.g. one file loaded twice) compare equal and share compiled code.
    def _definition(self) -> tuple:
        return (type(self), tuple(sorted((k, _frozen(v)) for k, v in vars(self).items())))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Function) or type(other) is not type(self):
            return NotImplemented
        return self._definition() == other._definition()

    def __hash__(self) -> int:
        return hash(self._definition())

    def calc_value(self, x: Any) -> jax.Array:
        """Value at ``x``."""
        raise TypeError(f"{type(self).__name__} does not define calc_value")

    def _split(self) -> tuple[Any, list[np.ndarray]]:
        """``(structure, numbers)``: the structure (kind, array shapes, other attributes) is
        hashable and static; the numbers (float arrays and floats, nested functions' too)
        are the data ``_bind`` puts back."""
        if not type(self)._numbers_as_data:
            return ("value", self), []  # the whole function is the structure (eq by definition)
        meta: list[Any] = []
        data: list[np.ndarray] = []
        for k, v in sorted(vars(self).items()):
            if isinstance(v, Function):
                m, d = v._split()
                meta.append((k, "fn", m))
                data += d
            elif isinstance(v, np.ndarray) and v.dtype.kind == "f":
                meta.append((k, "array", v.shape))
                data.append(v)
            elif isinstance(v, float):
                meta.append((k, "float", ()))
                data.append(np.asarray(v, float))
            else:
                meta.append((k, "static", _frozen(v)))
        return (type(self), tuple(meta)), data

    def _bind(self, arrays: Any) -> Function:
        """A copy whose numbers are taken, in ``_split``'s order, from the iterator
        ``arrays`` (e.g. traced slices of a parameter vector)."""
        if not type(self)._numbers_as_data:
            return self
        new = object.__new__(type(self))
        new.__dict__.update(vars(self))
        for k, v in sorted(vars(self).items()):
            if isinstance(v, Function):
                new.__dict__[k] = v._bind(arrays)
            elif (isinstance(v, np.ndarray) and v.dtype.kind == "f") or isinstance(v, float):
                new.__dict__[k] = next(arrays)
        return new

    def get_argument_size(self) -> int:
        """Number of arguments."""
        return self.arg_size

    def get_max_derivative_order(self) -> int:
        """Autodiff gives every order."""
        return 1 << 30

    def calc_derivative(self, components: Sequence[int], x: Any) -> jax.Array:
        """Partial derivative with respect to the listed argument indices (any order)."""
        f = self.calc_value
        for c in reversed(list(components)):
            f = (lambda g, c: lambda xx: jax.grad(g)(xx)[c])(f, c)
        return f(jnp.asarray(x, dtype=jnp.result_type(float)))

    @staticmethod
    def Constant(value: float, arg_size: int = 1) -> Function:  # noqa: N802
        """``f(x) = value``."""
        return Constant(value, arg_size)

    @staticmethod
    def Linear(coefficients: ArrayLike) -> Function:  # noqa: N802
        """``f(x) = sum a_i x_i + a_n``."""
        return Linear(coefficients)

    @staticmethod
    def Polynomial(coefficients: ArrayLike) -> Function:  # noqa: N802
        """``f(x) = a_0 x^n + ... + a_n`` (highest power first, as Simbody)."""
        return Polynomial(coefficients)

    @staticmethod
    def Sinusoid(amplitude: float, frequency: float, phase: float = 0.0) -> Function:  # noqa: N802
        """``f(x) = A sin(w x + phi)``."""
        return Sinusoid(amplitude, frequency, phase)

    @staticmethod
    def Step(y0: float, y1: float, x0: float, x1: float) -> Function:  # noqa: N802
        """Smooth (quintic) step from ``y0`` at ``x0`` to ``y1`` at ``x1``."""
        return Step(y0, y1, x0, x1)

    @staticmethod
    def Spline(x: ArrayLike, y: ArrayLike) -> Function:  # noqa: N802
        """Natural cubic spline through the points."""
        return Spline(x, y)


def _x(x: Any) -> jax.Array:
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return jnp.atleast_1d(x)


class _Same:
    """An attribute value compared by identity (callables, arbitrary objects)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return hash(id(self.obj))


def _frozen(v: Any) -> Any:
    """A hashable stand-in for an attribute value: arrays by dtype, shape and bytes."""
    if isinstance(v, (np.ndarray, jax.Array, np.generic)):
        a = np.asarray(v)
        return ("array", a.dtype.str, a.shape, a.tobytes())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_frozen(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _frozen(x)) for k, x in v.items())))
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes, Function)):
        return v
    return _Same(v)


class Constant(Function):
    """``f(x) = value``."""

    _numbers_as_data = True

    def __init__(self, value: float, arg_size: int = 1):
        self.value = float(value)
        self.arg_size = int(arg_size)

    def calc_value(self, x):
        x = _x(x) if np.size(x) else jnp.zeros(0)
        return jnp.asarray(self.value, dtype=x.dtype) + 0.0 * jnp.sum(x)


class Linear(Function):
    """``f(x) = a_0 x_0 + ... + a_{n-1} x_{n-1} + a_n``."""

    _numbers_as_data = True

    def __init__(self, coefficients: ArrayLike):
        self.coefficients = np.asarray(coefficients, dtype=float)
        if self.coefficients.ndim != 1 or len(self.coefficients) < 1:
            raise ValueError("Function.Linear needs a 1-D list of n+1 coefficients")
        self.arg_size = len(self.coefficients) - 1

    def calc_value(self, x):
        x = _x(x)
        if x.shape[-1] != self.arg_size:
            raise ValueError(f"Function.Linear expects {self.arg_size} arguments, got {x.shape[-1]}")
        a = jnp.asarray(self.coefficients, x.dtype)
        return x @ a[:-1] + a[-1]


class Polynomial(Function):
    """``f(x) = a_0 x^n + ... + a_n`` of one argument."""

    _numbers_as_data = True

    def __init__(self, coefficients: ArrayLike):
        self.coefficients = np.asarray(coefficients, dtype=float)

    def calc_value(self, x):
        x = _x(x)[0]
        return jnp.polyval(jnp.asarray(self.coefficients, x.dtype), x)


class Sinusoid(Function):
    """``f(x) = A sin(w x + phi)`` of one argument."""

    _numbers_as_data = True

    def __init__(self, amplitude: float, frequency: float, phase: float = 0.0):
        self.amplitude, self.frequency, self.phase = float(amplitude), float(frequency), float(phase)

    def calc_value(self, x):
        x = _x(x)[0]
        return self.amplitude * jnp.sin(self.frequency * x + self.phase)


class Step(Function):
    """Smooth step ``y0 -> y1`` between ``x0`` and ``x1`` (quintic, C2)."""

    _numbers_as_data = True

    def __init__(self, y0: float, y1: float, x0: float, x1: float):
        if x1 == x0:
            raise ValueError("Function.Step needs x0 != x1")
        self.y0, self.y1, self.x0, self.x1 = float(y0), float(y1), float(x0), float(x1)

    def calc_value(self, x):
        x = _x(x)[0]
        s = jnp.clip((x - self.x0) / (self.x1 - self.x0), 0.0, 1.0)
        f = s**3 * (10 + s * (6 * s - 15))
        return self.y0 + (self.y1 - self.y0) * f


class Spline(Function):
    """Natural cubic spline through ``(x, y)`` (``x`` strictly increasing), one argument.

    Outside the knots it extrapolates linearly (the natural end condition)."""

    _numbers_as_data = True

    def __init__(self, x: ArrayLike, y: ArrayLike):
        xs = np.asarray(x, dtype=float)
        ys = np.asarray(y, dtype=float)
        if xs.ndim != 1 or xs.shape != ys.shape or len(xs) < 2:
            raise ValueError("Function.Spline needs 1-D x and y of the same length >= 2")
        if np.any(np.diff(xs) <= 0):
            raise ValueError("Function.Spline: x must be strictly increasing")
        n = len(xs)
        h = np.diff(xs)
        A = np.zeros((n, n))
        r = np.zeros(n)
        A[0, 0] = A[-1, -1] = 1.0
        for i in range(1, n - 1):
            A[i, i - 1], A[i, i], A[i, i + 1] = h[i - 1], 2 * (h[i - 1] + h[i]), h[i]
            r[i] = 3 * ((ys[i + 1] - ys[i]) / h[i] - (ys[i] - ys[i - 1]) / h[i - 1])
        c = np.linalg.solve(A, r)
        b = (ys[1:] - ys[:-1]) / h - h * (2 * c[:-1] + c[1:]) / 3
        d = (c[1:] - c[:-1]) / (3 * h)
        self.x, self.y, self.b, self.c, self.d = xs, ys, b, c[:-1], d
        self.b_end = b[-1] + 2 * c[-2] * h[-1] + 3 * d[-1] * h[-1] ** 2

    def calc_value(self, x):
        t = _x(x)[0]
        dt = t.dtype
        xs = jnp.asarray(self.x, dt)
        i = jnp.clip(jnp.searchsorted(xs, t, side="right") - 1, 0, len(self.x) - 2)
        dx = t - xs[i]
        inner = (
            jnp.asarray(self.y[:-1], dt)[i]
            + jnp.asarray(self.b, dt)[i] * dx
            + jnp.asarray(self.c, dt)[i] * dx**2
            + jnp.asarray(self.d, dt)[i] * dx**3
        )
        left = self.y[0] + self.b[0] * (t - self.x[0])
        right = self.y[-1] + self.b_end * (t - self.x[-1])
        return jnp.where(t < self.x[0], left, jnp.where(t > self.x[-1], right, inner))
