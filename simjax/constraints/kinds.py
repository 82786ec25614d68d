"""The equations of every constraint kind (Simbody ``Constraint::*``), as frozen kernels.

A kernel is a frozen dataclass whose fields are the static data its equations read (which
coordinate a ``ConstantCoordinate`` holds, the function of a ``CoordinateCoupler``); two
kernels are equal when they compute the same equations, and constraints with equal kernels
(and the same numbers of bodies, mobilizers and parameter shapes) are stacked and
evaluated with one ``vmap`` (``kernels.constraint_groups``). Numbers that may differ per
constraint (stations, lengths, frames) are Instance parameters, read with ``ctx.param``.

A kernel defines its *lowest-level* errors only, as functions of a ``ConstraintContext``:
``perr`` (holonomic), ``verr`` (nonholonomic) or ``aerr`` (acceleration-only); None where a
level has no rows. Optionally it writes out ``perr``'s first and second time derivatives
(``pverr``, ``paerr``: Simbody's position-dot and position-dot-dot errors; without them
autodiff derives both) and, for a kind with only ``perr`` and no constrained mobilizers,
the coefficients (mp, bodies, 6) of ``pverr`` with respect to each constrained body's
``[w; v]`` in the ancestor frame (``pvcoef``: ``G``'s rows written out). Each written-out
derivative is checked against autodiff by ``tests/test_constraint_groups.py``.

User objects a kernel calls (the function of a coupler, a ``Custom`` constraint's error
functions, a custom coupling) are held wrapped in ``Identity``: they count by identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from .. import _spatial as sp
from ..model.model import Identity
from . import couplings as cpl
from .kernels import ConstraintContext

ErrorFunction = Callable[[ConstraintContext], Any]


@dataclass(frozen=True)
class ConstraintKernel:
    """Base of the kernels: every level without rows, no written-out derivative."""

    # Numbers of holonomic, nonholonomic and acceleration-only equations, where a kind's
    # never change (skips tracing its error functions to count them).
    fixed_counts: ClassVar[tuple[int, int, int] | None] = None
    # a kind defines some of these as methods (or properties giving a user's functions)
    perr: ClassVar[Any] = None
    verr: ClassVar[Any] = None
    aerr: ClassVar[Any] = None
    pverr: ClassVar[Any] = None
    paerr: ClassVar[Any] = None
    pvcoef: ClassVar[Any] = None


# ============================================================================ helpers


def station_rate(ctx: ConstraintContext, s1: str, s2: str, order: int) -> jax.Array:
    """The first (``order`` 1) or second (2) time derivative of ``p_S2 - p_S1`` in A alone
    (stations named by parameters, on constrained bodies 0 and 1)."""
    p1, p2 = ctx.param(s1), ctx.param(s2)
    f = ctx.station_velocity if order == 1 else ctx.station_acceleration
    return f(1, p2) - f(0, p1)


def station_difference(ctx: ConstraintContext, s1: str, s2: str, order: int):
    """``r = p_S2 - p_S1`` in A and, up to ``order``, its first and second time derivatives
    (None above it)."""
    p1, p2 = ctx.param(s1), ctx.param(s2)
    r = ctx.station_location(1, p2) - ctx.station_location(0, p1)
    rd = station_rate(ctx, s1, s2, 1) if order >= 1 else None
    rdd = station_rate(ctx, s1, s2, 2) if order >= 2 else None
    return r, rd, rdd


def station_rate_coefficients(ctx: ConstraintContext, s1: str, s2: str) -> jax.Array:
    """(3, 2, 6) coefficients of ``d/dt (p_S2 - p_S1) = v_2 + w_2 x r_2 - v_1 - w_1 x r_1``
    (``r_i`` the station re-expressed in A) with respect to ``[w; v]`` of constrained bodies 0
    and 1: ``[[r_1]x, -I]`` and ``[-[r_2]x, I]``."""
    r1 = ctx.express_in_ancestor(0, ctx.param(s1))
    r2 = ctx.express_in_ancestor(1, ctx.param(s2))
    eye = jnp.eye(3, dtype=r1.dtype)
    C1 = jnp.concatenate([sp.skew(r1), -eye], axis=1)
    C2 = jnp.concatenate([-sp.skew(r2), eye], axis=1)
    return jnp.stack([C1, C2], axis=1)


def rot_rows(RB: jax.Array, RF: jax.Array) -> jax.Array:
    """Simbody's three orientation errors ``[F.x . B.y, F.y . B.z, F.z . B.x]``."""
    return jnp.stack([RF[:, 0] @ RB[:, 1], RF[:, 1] @ RB[:, 2], RF[:, 2] @ RB[:, 0]])


def rot_rows_derivatives(ctx: ConstraintContext, RB: jax.Array, RF: jax.Array, order: int) -> jax.Array:
    """The ``order``-th (1 or 2) time derivative of ``rot_rows(RB, RF)``, frame B fixed on
    constrained body 0 and F on body 1: each row is ``f . b`` with ``f' = w_F x f``,
    ``b' = w_B x b``, so its rate is ``(w_F - w_B) . (f x b)``, and that rate's rate
    ``(alpha_F - alpha_B) . (f x b) + (w_F - w_B) . ((w_F x f) x b + f x (w_B x b))``."""
    f, b = RF.T, RB[:, [1, 2, 0]].T  # rows: the paired axes
    wB, wF = ctx.body_angular_velocity(0), ctx.body_angular_velocity(1)
    fb = sp.cross(f, b)
    if order == 1:
        return fb @ (wF - wB)
    alB, alF = ctx.body_acceleration(0)[:3], ctx.body_acceleration(1)[:3]
    return fb @ (alF - alB) + (sp.cross(sp.cross(wF, f), b) + sp.cross(f, sp.cross(wB, b))) @ (wF - wB)


def rot_rate_coefficients(RB: jax.Array, RF: jax.Array) -> jax.Array:
    """(3, 2, 6) coefficients of ``rot_rows``' rates, ``(w_F - w_B) . (f x b)``, with respect
    to ``[w; v]`` of constrained bodies 0 (frame B) and 1 (frame F)."""
    fb = sp.cross(RF.T, RB[:, [1, 2, 0]].T)
    z = jnp.zeros_like(fb)
    return jnp.stack([jnp.concatenate([-fb, z], axis=1), jnp.concatenate([fb, z], axis=1)], axis=1)


def frame_pair(ctx: ConstraintContext, R0: str, R1: str) -> tuple[jax.Array, jax.Array]:
    """The orientations (in A) of the frames fixed on constrained bodies 0 and 1 whose
    rotations in their bodies are the parameters named ``R0`` and ``R1``."""
    return ctx.body_rotation(0) @ ctx.param(R0), ctx.body_rotation(1) @ ctx.param(R1)


# ============================================================================ points


@dataclass(frozen=True)
class Ball(ConstraintKernel):
    """``perr = p_S2 - p_S1`` in A (parameters ``point1``, ``point2``)."""

    fixed_counts = (3, 0, 0)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        return ctx.station_location(1, ctx.param("point2")) - ctx.station_location(0, ctx.param("point1"))

    def pverr(self, ctx: ConstraintContext) -> jax.Array:
        """``d/dt perr``, written out."""
        return station_rate(ctx, "point1", "point2", 1)

    def paerr(self, ctx: ConstraintContext) -> jax.Array:
        """``d2/dt2 perr``, written out."""
        return station_rate(ctx, "point1", "point2", 2)

    def pvcoef(self, ctx: ConstraintContext) -> jax.Array:
        """``pverr``'s coefficients of the bodies' ``[w; v]`` (mp, bodies, 6)."""
        return station_rate_coefficients(ctx, "point1", "point2")


@dataclass(frozen=True)
class Rod(ConstraintKernel):
    """``perr = |p_S2 - p_S1| - length`` (parameters ``point1``, ``point2``, ``length``)."""

    fixed_counts = (1, 0, 0)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        r = ctx.station_location(1, ctx.param("point2")) - ctx.station_location(0, ctx.param("point1"))
        return sp.safe_norm(r) - ctx.param("length")

    def pverr(self, ctx: ConstraintContext) -> jax.Array:
        """``d/dt perr``, written out."""
        r, rd, _ = station_difference(ctx, "point1", "point2", 1)
        return sp.safe_normalize(r) @ rd

    def paerr(self, ctx: ConstraintContext) -> jax.Array:
        """``d2/dt2 perr``, written out."""
        # d2/dt2 |r| = e . r'' + (|r'|^2 - (e . r')^2) / |r|, e = r / |r| (0 where r = 0)
        r, rd, rdd = station_difference(ctx, "point1", "point2", 2)
        n = sp.safe_norm(r)
        e = sp.safe_normalize(r)
        return e @ rdd + jnp.where(n > 0, (rd @ rd - (e @ rd) ** 2) / jnp.where(n > 0, n, 1.0), 0.0)

    def pvcoef(self, ctx: ConstraintContext) -> jax.Array:
        """``pverr``'s coefficients of the bodies' ``[w; v]`` (mp, bodies, 6)."""
        r = station_difference(ctx, "point1", "point2", 0)[0]
        C = station_rate_coefficients(ctx, "point1", "point2")
        return jnp.einsum("i,ikc->kc", sp.safe_normalize(r), C)[None]


@dataclass(frozen=True)
class PointInPlane(ConstraintKernel):
    """``perr = p_BS . n - height``, ``p_BS`` the follower station in the plane body's frame
    (parameters ``normal``, ``height``, ``point``)."""

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        X = ctx.body_transform(0)
        p_BS = X.R.T @ (ctx.station_location(1, ctx.param("point")) - X.p)
        return p_BS @ ctx.param("normal") - ctx.param("height")


@dataclass(frozen=True)
class PointOnLine(ConstraintKernel):
    """The components of ``p_BS - P`` along two directions perpendicular to the line, in the
    line body's frame (parameters ``perp`` (2, 3), ``line_point``, ``point``)."""

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        X = ctx.body_transform(0)
        p_BS = X.R.T @ (ctx.station_location(1, ctx.param("point")) - X.p)
        return ctx.param("perp") @ (p_BS - ctx.param("line_point"))


@dataclass(frozen=True)
class NoSlip1D(ConstraintKernel):
    """``verr = (v_P1 - v_P0) . n``: the material velocities of moving bodies 1 and 2 at the
    contact point P on the case body 0, along n (parameters ``point``, ``direction``)."""

    def verr(self, ctx: ConstraintContext) -> jax.Array:
        """Velocity errors."""
        P = ctx.station_location(0, ctx.param("point"))
        n = ctx.express_in_ancestor(0, ctx.param("direction"))

        def material_velocity(i: int) -> jax.Array:
            V = ctx.body_velocity(i)
            return V[3:] + sp.cross(V[:3], P - ctx.body_origin_location(i))

        return (material_velocity(2) - material_velocity(1)) @ n


# ============================================================================ orientations


@dataclass(frozen=True)
class ConstantAngle(ConstraintKernel):
    """``perr = b . f - cos(angle)``, both unit vectors in A (parameters ``base_axis``,
    ``follower_axis``, ``cos_angle``)."""

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        b = ctx.express_in_ancestor(0, ctx.param("base_axis"))
        f = ctx.express_in_ancestor(1, ctx.param("follower_axis"))
        return b @ f - ctx.param("cos_angle")


@dataclass(frozen=True)
class ConstantOrientation(ConstraintKernel):
    """Simbody's ``[F.x . B.y, F.y . B.z, F.z . B.x]`` (parameters ``R_B``, ``R_F``)."""

    fixed_counts = (3, 0, 0)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        return rot_rows(*frame_pair(ctx, "R_B", "R_F"))

    def pverr(self, ctx: ConstraintContext) -> jax.Array:
        """``d/dt perr``, written out."""
        return rot_rows_derivatives(ctx, *frame_pair(ctx, "R_B", "R_F"), 1)

    def paerr(self, ctx: ConstraintContext) -> jax.Array:
        """``d2/dt2 perr``, written out."""
        return rot_rows_derivatives(ctx, *frame_pair(ctx, "R_B", "R_F"), 2)

    def pvcoef(self, ctx: ConstraintContext) -> jax.Array:
        """``pverr``'s coefficients of the bodies' ``[w; v]`` (mp, bodies, 6)."""
        return rot_rate_coefficients(*frame_pair(ctx, "R_B", "R_F"))


@dataclass(frozen=True)
class Weld(ConstraintKernel):
    """Three orientation rows (as ``ConstantOrientation``) then ``p_F2 - p_F1`` (as
    ``Ball``), in A (parameters ``R1``, ``p1``, ``R2``, ``p2``)."""

    fixed_counts = (6, 0, 0)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        dp = station_difference(ctx, "p1", "p2", 0)[0]
        return jnp.concatenate([rot_rows(*frame_pair(ctx, "R1", "R2")), dp])

    def pverr(self, ctx: ConstraintContext) -> jax.Array:
        """``d/dt perr``, written out."""
        rot = rot_rows_derivatives(ctx, *frame_pair(ctx, "R1", "R2"), 1)
        return jnp.concatenate([rot, station_rate(ctx, "p1", "p2", 1)])

    def paerr(self, ctx: ConstraintContext) -> jax.Array:
        """``d2/dt2 perr``, written out."""
        rot = rot_rows_derivatives(ctx, *frame_pair(ctx, "R1", "R2"), 2)
        return jnp.concatenate([rot, station_rate(ctx, "p1", "p2", 2)])

    def pvcoef(self, ctx: ConstraintContext) -> jax.Array:
        """``pverr``'s coefficients of the bodies' ``[w; v]`` (mp, bodies, 6)."""
        rot = rot_rate_coefficients(*frame_pair(ctx, "R1", "R2"))
        return jnp.concatenate([rot, station_rate_coefficients(ctx, "p1", "p2")])


# ============================================================================ coordinates


@dataclass(frozen=True)
class ConstantCoordinate(ConstraintKernel):
    """``perr = q_which - position`` of constrained mobilizer 0."""

    which: int
    fixed_counts = (1, 0, 0)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        return ctx.one_q(0, self.which) - ctx.param("position")


@dataclass(frozen=True)
class ConstantSpeed(ConstraintKernel):
    """``verr = u_which - speed`` of constrained mobilizer 0."""

    which: int
    fixed_counts = (0, 1, 0)

    def verr(self, ctx: ConstraintContext) -> jax.Array:
        """Velocity errors."""
        return ctx.one_u(0, self.which) - ctx.param("speed")


@dataclass(frozen=True)
class ConstantAcceleration(ConstraintKernel):
    """``aerr = udot_which - acceleration`` of constrained mobilizer 0."""

    which: int
    fixed_counts = (0, 0, 1)

    def aerr(self, ctx: ConstraintContext) -> jax.Array:
        """Acceleration-only errors."""
        return ctx.one_udot(0, self.which) - ctx.param("acceleration")


@dataclass(frozen=True)
class CoordinateCoupler(ConstraintKernel):
    """``perr = f(q_sel)``; ``sel`` lists ``(constrained mobilizer, q index)``. An
    ``sj.Function`` with numbers (spline knots, coefficients) reads them from the parameters
    ``fn0, fn1, ...`` (``n_data`` of them), so couplers whose functions differ only in their
    numbers share a kernel (``structure`` is the function's structure; a plain callable
    counts by identity)."""

    structure: Any
    sel: tuple[tuple[int, int], ...]
    n_data: int
    fn: Identity = field(compare=False)
    fixed_counts = (1, 0, 0)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        x = jnp.stack([ctx.one_q(m, k) for m, k in self.sel])
        fn: Any = self.fn.obj
        if self.n_data:
            fn = fn._bind(iter([ctx.param(f"fn{i}") for i in range(self.n_data)]))
        return jnp.reshape(fn(x), (1,))


@dataclass(frozen=True)
class SpeedCoupler(ConstraintKernel):
    """``verr = f([u_usel, q_qsel])`` (speeds first, Simbody's argument order)."""

    fn: Identity
    usel: tuple[tuple[int, int], ...]
    qsel: tuple[tuple[int, int], ...]
    fixed_counts = (0, 1, 0)

    def verr(self, ctx: ConstraintContext) -> jax.Array:
        """Velocity errors."""
        x = [ctx.one_u(m, k) for m, k in self.usel] + [ctx.one_q(m, k) for m, k in self.qsel]
        return jnp.reshape(self.fn.obj(jnp.stack(x)), (1,))


@dataclass(frozen=True)
class PrescribedMotion(ConstraintKernel):
    """``perr = q_which - f(t)`` of constrained mobilizer 0."""

    which: int
    fn: Identity
    fixed_counts = (1, 0, 0)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        return ctx.one_q(0, self.which) - jnp.reshape(self.fn.obj(jnp.reshape(ctx.time, (1,))), ())


# ============================================================================ custom


@dataclass(frozen=True)
class Custom(ConstraintKernel):
    """A user's lowest-level error functions (each a user object, by identity)."""

    position_errors: Identity | None = None
    velocity_errors: Identity | None = None
    acceleration_errors: Identity | None = None

    @property  # type: ignore[misc]
    def perr(self) -> ErrorFunction | None:
        """Position errors."""
        return None if self.position_errors is None else self.position_errors.obj

    @property  # type: ignore[misc]
    def verr(self) -> ErrorFunction | None:
        """Velocity errors."""
        return None if self.velocity_errors is None else self.velocity_errors.obj

    @property  # type: ignore[misc]
    def aerr(self) -> ErrorFunction | None:
        """Acceleration-only errors."""
        return None if self.acceleration_errors is None else self.acceleration_errors.obj


@dataclass(frozen=True)
class UnilateralValues(ConstraintKernel):
    """The values of a kernel's unilateral rows (``unilateral_phi``) as position-level
    errors: what the limit rows' groups evaluate (``unilateral.limit_data``)."""

    kernel: Any

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """The unilateral rows' values."""
        return self.kernel.unilateral_phi(ctx)


@dataclass(frozen=True)
class CouplingJoint(ConstraintKernel):
    """A custom joint (``sj.Coupling``): ``perr_k = G_k . err``, the pose error twist from G
    to C weighted by the bilateral constraints' wrenches in G (``constraints.couplings``).
    Parameters ``X_AC_R``, ``X_AC_p``, ``X_BD_R``, ``X_BD_p``; the unilateral rows' values
    (``unilateral_phi``) read the rows' last values from the parameter ``unilateral_prev``."""

    data: cpl.CouplingData
    coupling: Identity = field(compare=False)

    def perr(self, ctx: ConstraintContext) -> jax.Array:
        """Position errors."""
        return cpl.bilateral_errors(self.coupling.obj, self.data, ctx)

    def unilateral_phi(self, ctx: ConstraintContext) -> jax.Array:
        """The unilateral rows' values (coordinates or distances)."""
        return cpl.unilateral_values(self.coupling.obj, self.data, ctx)
