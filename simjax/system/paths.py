"""Paths through points on bodies (OpenSim's ``GeometryPath``): the handle a user or a
loader builds, and the frozen :class:`simjax.model.paths.PathSet` it becomes at
``realize_topology()``.

A path's length, lengthening speed and moment arms are evaluated for every path at once
(:mod:`simjax.dynamics.paths`); the moment arms come from autodiff, ``r = -dL/dq`` (per
generalized speed: ``-dL/dq N(q)``, which is ``dL/dq`` negated for a coordinate with
``qdot = u``). A path wraps over cylinders, spheres, ellipsoids and tori fixed on bodies
(:class:`WrapCylinder`, :class:`WrapSphere`, :class:`WrapEllipsoid`, :class:`WrapTorus`;
OpenSim's wrap objects), added to it with
:meth:`GeometryPath.add_path_wrap`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _spatial as sp
from .._stage import Stage
from ..dynamics.paths import path_lengths, path_nodes
from ..dynamics.stages import calc_qdot
from ..model.paths import MovingPoint, PathSet, WrapSet
from ..model.state import State
from ._compiled import reads_cache
from .bodies import MobilizedBody


def _body_index(body: Any, who: str) -> int:
    if isinstance(body, MobilizedBody):
        return body.index
    if isinstance(body, int | np.integer) and not isinstance(body, bool):
        return int(body)
    raise TypeError(f"{who}: expected a MobilizedBody (or its index), got {type(body).__name__}")


def _coordinate(coordinate: Any, who: str) -> tuple[int, int]:
    """``(body index, slot in its mobilizer's q)`` of a coordinate given as an
    ``sj.io`` Coordinate (anything with ``body`` and ``which``) or ``(body, which)``."""
    if hasattr(coordinate, "body") and hasattr(coordinate, "which"):
        return _body_index(coordinate.body, who), int(coordinate.which)
    if isinstance(coordinate, tuple) and len(coordinate) == 2:
        return _body_index(coordinate[0], who), int(coordinate[1])
    raise TypeError(
        f"{who}: a coordinate is a loaded model's Coordinate (model.coordinates[name]) or a "
        f"(MobilizedBody, which) pair, got {coordinate!r}"
    )


def _station(station: Any, who: str) -> np.ndarray:
    s = np.asarray(station, dtype=float)
    if s.shape != (3,) or not np.all(np.isfinite(s)):
        raise ValueError(f"{who}: a station is 3 finite numbers (metres, in the body frame), got {station!r}")
    return s


_QUADRANTS = {
    "all": (0, 0), "x": (0, 1), "+x": (0, 1), "-x": (0, -1), "y": (1, 1), "+y": (1, 1),
    "-y": (1, -1), "z": (2, 1), "+z": (2, 1), "-z": (2, -1),
}  # fmt: skip


class WrapObject:
    """A surface fixed on a body that paths wrap over (OpenSim's ``WrapObject``): its frame
    W on ``body`` given by ``transform`` (an ``sj.Transform`` X_BW) or OpenSim's
    ``xyz_body_rotation`` (body-fixed X-Y-Z angles, radians) and ``translation``, and its
    ``quadrant`` ("all", "+x", "-x", "+y", "-y", "+z", "-z": the side of W's axis that a path
    may wrap on). A topology change."""

    kind = ""

    def __init__(
        self,
        matter: Any,
        body: MobilizedBody | int,
        *,
        transform: Any = None,
        xyz_body_rotation: Any = (0.0, 0.0, 0.0),
        translation: Any = (0.0, 0.0, 0.0),
        quadrant: str = "all",
        name: str | None = None,
    ):
        self._matter = matter
        objects = matter._wrap_objects
        self.index = len(objects)
        self.name = name if name is not None else f"wrap{self.index}"
        who = f"{type(self).__name__} {self.name!r}"
        self.body = _body_index(body, who)
        if not 0 <= self.body < matter.get_num_bodies():
            raise ValueError(f"{who}: body {self.body} is not a body of this matter subsystem")
        if transform is not None:
            self.R = np.asarray(transform.R, dtype=float)
            self.p = np.asarray(transform.p, dtype=float)
        else:
            a = _station(xyz_body_rotation, f"{who}: xyz_body_rotation")
            self.R = np.asarray(sp.rot_x(a[0]) @ sp.rot_y(a[1]) @ sp.rot_z(a[2]), dtype=float)
            self.p = _station(translation, f"{who}: translation")
        q = str(quadrant).strip().lower()
        if q not in _QUADRANTS:
            raise ValueError(f"{who}: quadrant must be one of {sorted(set(_QUADRANTS))}, got {quadrant!r}")
        self.quadrant = q
        objects.append(self)
        matter._system.invalidate_topology()

    def _dims(self) -> tuple[float, float, float]:
        """The shape's dimensions for the WrapSet (each wrap kind defines them)."""
        raise TypeError(
            f"{type(self).__name__} is not a wrap shape: use WrapCylinder, WrapSphere, WrapEllipsoid or "
            "WrapTorus"
        )

    @staticmethod
    def _positive(value: Any, what: str, who: str) -> float:
        v = float(value)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{who}: {what} must be finite and > 0 (metres), got {value!r}")
        return v

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, body {self.body}, quadrant {self.quadrant!r})"


class WrapCylinder(WrapObject):
    """A cylinder about the z axis of its frame, centred on its origin (OpenSim's
    ``WrapCylinder``): ``radius`` and ``length`` (a path wraps where its tangent points lie
    within the length). See :class:`WrapObject` for the frame and quadrant."""

    kind = "cylinder"

    def __init__(self, matter: Any, body: MobilizedBody | int, radius: float, length: float, **kw: Any):
        who = f"WrapCylinder {kw.get('name')!r}"
        self.radius = self._positive(radius, "radius", who)
        self.length = self._positive(length, "length", who)
        super().__init__(matter, body, **kw)

    def _dims(self) -> tuple[float, float, float]:
        return self.radius, self.length, 0.0


class WrapSphere(WrapObject):
    """A sphere centred on its frame's origin (OpenSim's ``WrapSphere``) of ``radius``.
    See :class:`WrapObject` for the frame and quadrant."""

    kind = "sphere"

    def __init__(self, matter: Any, body: MobilizedBody | int, radius: float, **kw: Any):
        self.radius = self._positive(radius, "radius", f"WrapSphere {kw.get('name')!r}")
        super().__init__(matter, body, **kw)

    def _dims(self) -> tuple[float, float, float]:
        return self.radius, 0.0, 0.0


class WrapEllipsoid(WrapObject):
    """An ellipsoid centred on its frame's origin with semi-axes ``radii`` = (rx, ry, rz)
    along its frame's axes (OpenSim's ``WrapEllipsoid``, its ``dimensions``; a path wraps
    by OpenSim's ``hybrid`` method). See :class:`WrapObject` for the frame and quadrant."""

    kind = "ellipsoid"

    def __init__(self, matter: Any, body: MobilizedBody | int, radii: Any, **kw: Any):
        who = f"WrapEllipsoid {kw.get('name')!r}"
        r = np.asarray(radii, dtype=float).reshape(-1)
        if r.shape != (3,):
            raise ValueError(f"{who}: radii must be three semi-axes (metres), got {radii!r}")
        self.radii = tuple(self._positive(v, "radii", who) for v in r)
        super().__init__(matter, body, **kw)

    def _dims(self) -> tuple[float, float, float]:
        return self.radii  # type: ignore[return-value]


class WrapTorus(WrapObject):
    """A torus about the z axis of its frame, centred on its origin (OpenSim's
    ``WrapTorus``): a tube of radius ``inner_radius`` about the circle of radius
    ``outer_radius`` (OpenSim's names), ``0 < inner_radius < outer_radius``. A path wraps
    on the tube's side towards the torus's axis (through its hole), as OpenSim computes it:
    over a cylinder of radius ``inner_radius`` tangent to the circle at the circle's point
    nearest the straight line. See :class:`WrapObject` for the frame and quadrant."""

    kind = "torus"

    def __init__(
        self, matter: Any, body: MobilizedBody | int, inner_radius: float, outer_radius: float, **kw: Any
    ):
        who = f"WrapTorus {kw.get('name')!r}"
        self.inner_radius = self._positive(inner_radius, "inner_radius", who)
        self.outer_radius = self._positive(outer_radius, "outer_radius", who)
        if not self.outer_radius > self.inner_radius:
            raise ValueError(
                f"{who}: outer_radius (the circle the tube runs round, {outer_radius!r}) must be greater "
                f"than inner_radius (the tube's radius, {inner_radius!r})"
            )
        super().__init__(matter, body, **kw)

    def _dims(self) -> tuple[float, float, float]:
        return self.inner_radius, self.outer_radius, 0.0


class GeometryPath:
    """A path through points fixed on bodies (OpenSim's ``GeometryPath`` with its
    ``PathPoint``, ``ConditionalPathPoint`` and ``MovingPathPoint``).

    Build it with ``sj.GeometryPath(matter, name)`` and ``append_*`` calls in the path's
    order (a topology change). Its length runs through the active points in order:
    :meth:`get_length` (Position), :meth:`get_lengthening_speed` (Velocity),
    :meth:`compute_moment_arm` (Position), and for every path of the System at once
    :func:`calc_path_lengths`, :func:`calc_path_lengthening_speeds`,
    :func:`calc_path_moment_arms`. All are pure JAX (``jit``, ``vmap``, ``grad``).
    """

    def __init__(self, matter: Any, name: str | None = None):
        self._matter = matter
        self.index = len(matter._paths)
        self.name = name if name is not None else f"path{self.index}"
        # (kind, body, station, extra): extra None, (coordinate, lo, hi) or the moving axes
        self._points: list[tuple[str, int, np.ndarray, Any]] = []
        self._wraps: list[tuple[WrapObject, int, int]] = []
        matter._paths.append(self)
        matter._system.invalidate_topology()

    def __repr__(self) -> str:
        return f"GeometryPath({self.name!r}, {len(self._points)} points)"

    # ------------------------------------------------------------------ building
    def append_path_point(self, body: MobilizedBody | int, station: Any) -> int:
        """A point fixed at ``station`` (body frame, metres) on ``body``; returns its index."""
        who = f"GeometryPath {self.name!r}: append_path_point"
        self._points.append(("fixed", _body_index(body, who), _station(station, who), None))
        self._matter._system.invalidate_topology()
        return len(self._points) - 1

    def append_conditional_path_point(
        self, body: MobilizedBody | int, station: Any, coordinate: Any, range: Any
    ) -> int:
        """A point on ``body`` that is part of the path only while ``coordinate`` lies in
        ``range = (lower, upper)`` (bounds included; OpenSim's ``ConditionalPathPoint``)."""
        who = f"GeometryPath {self.name!r}: append_conditional_path_point"
        lo, hi = (float(x) for x in range)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(f"{who}: range must be finite with lower <= upper, got {range!r}")
        coord = _coordinate(coordinate, who)
        self._points.append(("conditional", _body_index(body, who), _station(station, who), (coord, lo, hi)))
        self._matter._system.invalidate_topology()
        return len(self._points) - 1

    def append_moving_path_point(
        self,
        body: MobilizedBody | int,
        station: Any,
        *,
        x: tuple[Any, Any] | None = None,
        y: tuple[Any, Any] | None = None,
        z: tuple[Any, Any] | None = None,
    ) -> int:
        """A point on ``body`` whose station coordinates follow functions of coordinates
        (OpenSim's ``MovingPathPoint``): ``x``, ``y``, ``z`` each ``(function,
        coordinate)`` (an ``sj.Function`` of one argument) or None to keep ``station``'s.
        As in OpenSim, a function reads its coordinate's value clamped to the coordinate's
        ``range`` (a loaded model's Coordinate has one; a ``(body, which)`` pair has none)."""
        who = f"GeometryPath {self.name!r}: append_moving_path_point"
        axes: list[tuple[Any, int, int, float, float] | None] = []
        for name, spec in (("x", x), ("y", y), ("z", z)):
            if spec is None:
                axes.append(None)
                continue
            fn, coordinate = spec
            if not callable(fn):
                raise TypeError(f"{who}: {name} must be (function, coordinate), got {spec!r}")
            lo, hi = (float(v) for v in getattr(coordinate, "range", (-math.inf, math.inf)))
            axes.append((fn, *_coordinate(coordinate, who), lo, hi))
        self._points.append(("moving", _body_index(body, who), _station(station, who), tuple(axes)))
        self._matter._system.invalidate_topology()
        return len(self._points) - 1

    def add_path_wrap(self, wrap_object: WrapObject, range: Any = (-1, -1)) -> None:
        """Wrap the path over ``wrap_object`` (OpenSim's ``PathWrap``), after the wraps
        added before it. ``range = (first, last)``: the 1-based path points between which
        it may wrap, -1 (or anything < 1) for the first / the last point (OpenSim's
        convention)."""
        who = f"GeometryPath {self.name!r}: add_path_wrap"
        if not isinstance(wrap_object, WrapObject):
            raise TypeError(
                f"{who}: expected an sj.WrapCylinder, sj.WrapSphere, sj.WrapEllipsoid or sj.WrapTorus, "
                f"got {wrap_object!r}"
            )
        if wrap_object._matter is not self._matter:
            raise ValueError(f"{who}: {wrap_object.name!r} belongs to another matter subsystem")
        a, b = (int(v) for v in range)
        self._wraps.append((wrap_object, a, b))
        self._matter._system.invalidate_topology()

    def get_num_path_points(self) -> int:
        """Number of points (active or not)."""
        return len(self._points)

    # ------------------------------------------------------------------ evaluation
    @reads_cache
    def get_length(self, state: State) -> Float[Array, ""]:
        """The path's length (needs Position)."""
        return self._matter.calc_path_lengths(state)[self.index]

    @reads_cache
    def get_lengthening_speed(self, state: State) -> Float[Array, ""]:
        """d length / dt (needs Velocity)."""
        return self._matter.calc_path_lengthening_speeds(state)[self.index]

    def compute_moment_arm(self, state: State, coordinate: Any) -> Float[Array, ""]:
        """The moment arm ``-dL/dq`` about ``coordinate`` (a loaded model's Coordinate or
        ``(MobilizedBody, which)``), the other generalized coordinates held (OpenSim's
        ``computeMomentArm`` also moves coordinates coupled to this one by constraints)."""
        body, which = _coordinate(coordinate, f"GeometryPath {self.name!r}: compute_moment_arm")
        topo = self._matter._system.model_for(state).topology(state.use_euler_angles)
        return self._matter.calc_path_moment_arms(state)[self.index, int(topo.u_start[body]) + which]

    def get_current_path(self, state: State) -> np.ndarray:
        """The path as drawn, in Ground (k, 3): its active points in order with, at each
        wrap, the two tangent points and points on the surface between them (OpenSim's
        current path plus the arcs; ``matter.calc_path_points``). Needs Position; a host
        array, not for tracing."""
        pts, ok = self._matter.calc_path_points(state)
        return np.asarray(pts[self.index])[np.asarray(ok[self.index])]


# ---------------------------------------------------------------------- every path at once


def _system(matter: Any) -> Any:
    return matter._system


def calc_path_points(matter: Any, state: State) -> tuple[jax.Array, jax.Array]:
    """Every path as a polyline in Ground (``simjax.dynamics.paths.path_nodes``):
    ``(n_paths, S, 3)`` points, real ones first in path order, and ``(n_paths, S)`` which
    are real (needs Position)."""
    state.require(Stage.POSITION, "calc_path_points")
    model = _system(matter).model_for(state)
    if model.paths is None:
        return jnp.zeros((0, 1, 3), state.q.dtype), jnp.zeros((0, 1), bool)
    topo = model.topology(state.use_euler_angles)
    pc = state.position_cache
    return path_nodes(model.paths, topo, state.q, pc.R_GB, pc.p_GB)


def calc_path_lengths(matter: Any, state: State) -> jax.Array:
    """Every path's length (n_paths,), in the order of creation (needs Position)."""
    state.require(Stage.POSITION, "calc_path_lengths")
    model = _system(matter).model_for(state)
    if model.paths is None:
        return jnp.zeros((0,), dtype=state.q.dtype)
    pc = state.position_cache
    return path_lengths(model.paths, model.topology(state.use_euler_angles), state.q, pc.R_GB, pc.p_GB)


def _lengths_at(matter: Any, state: State, q: jax.Array) -> jax.Array:
    return calc_path_lengths(matter, _system(matter).realize(state.with_q(q), Stage.POSITION))


def calc_path_lengthening_speeds(matter: Any, state: State) -> jax.Array:
    """Every path's lengthening speed dL/dt (n_paths,) (needs Velocity)."""
    state.require(Stage.VELOCITY, "calc_path_lengthening_speeds")
    qdot = state.velocity_cache.qdot
    return jax.jvp(lambda q: _lengths_at(matter, state, q), (state.q,), (qdot,))[1]


def calc_path_moment_arms(matter: Any, state: State) -> jax.Array:
    """Every path's moment arms about every generalized speed, ``-dL/dq N(q)`` (n_paths,
    nu): for a coordinate with ``qdot = u``, ``-dL/dq``. Needs only q (realizes what it
    needs)."""
    model = _system(matter).model_for(state)
    # N(q) = dqdot/du (the kinematic equations alone, no Velocity stage), then dL/dq N
    N = jax.jacfwd(lambda u: calc_qdot(model, state.with_u(u)))(jnp.zeros_like(state.u))
    dL = jax.jacfwd(lambda q: _lengths_at(matter, state, q))(state.q)
    return -(dL @ N.astype(dL.dtype))


def build_path_set(matter: Any) -> PathSet | None:
    """The frozen record of a matter subsystem's paths (None without paths)."""
    handles: list[GeometryPath] = list(getattr(matter, "_paths", ()))
    if not handles:
        return None
    start: list[int] = [0]
    path: list[int] = []
    body: list[int] = []
    station: list[np.ndarray] = []
    cond_point: list[int] = []
    cond_coord: list[tuple[int, int]] = []
    cond_range: list[tuple[float, float]] = []
    moving: list[MovingPoint] = []
    for k, h in enumerate(handles):
        if len(h._points) < 2:
            raise ValueError(
                f"GeometryPath {h.name!r} has {len(h._points)} point(s); a path needs at least two "
                "(append_path_point)"
            )
        for kind, b, s, extra in h._points:
            i = len(body)
            path.append(k)
            body.append(b)
            station.append(s)
            if kind == "conditional":
                coord, lo, hi = extra
                cond_point.append(i)
                cond_coord.append(coord)
                cond_range.append((lo, hi))
            elif kind == "moving":
                moving.append(MovingPoint(i, extra))
        start.append(len(body))
    objects: list[WrapObject] = list(getattr(matter, "_wrap_objects", ()))
    wraps = None
    if any(h._wraps for h in handles):
        path_wraps = []
        for h in handles:
            n = len(h._points)
            row = []
            for wo, a, b in h._wraps:
                first = 0 if a < 1 else a - 1
                last = n - 1 if b < 1 else b - 1
                if not (0 <= first <= last < n):
                    raise ValueError(
                        f"GeometryPath {h.name!r}: the range ({a}, {b}) of its wrap over {wo.name!r} is "
                        f"not within its {n} points (1-based first <= last, or -1 for the ends)"
                    )
                row.append((wo.index, first, last))
            path_wraps.append(tuple(row))
        wraps = WrapSet(
            names=tuple(o.name for o in objects),
            kind=tuple(o.kind for o in objects),
            body=np.asarray([o.body for o in objects], dtype=int),
            R=np.asarray([o.R for o in objects], dtype=float).reshape(-1, 3, 3),
            p=np.asarray([o.p for o in objects], dtype=float).reshape(-1, 3),
            dims=np.asarray([o._dims() for o in objects], dtype=float).reshape(-1, 3),
            quadrant=np.asarray([_QUADRANTS[o.quadrant] for o in objects], dtype=int).reshape(-1, 2),
            path_wraps=tuple(path_wraps),
        )
    return PathSet(
        names=tuple(h.name for h in handles),
        start=np.asarray(start, dtype=int),
        path=np.asarray(path, dtype=int),
        body=np.asarray(body, dtype=int),
        station=np.asarray(station, dtype=float).reshape(-1, 3),
        cond_point=np.asarray(cond_point, dtype=int),
        cond_coord=np.asarray(cond_coord, dtype=int).reshape(-1, 2),
        cond_range=np.asarray(cond_range, dtype=float).reshape(-1, 2),
        moving=tuple(moving),
        wraps=wraps,
    )
