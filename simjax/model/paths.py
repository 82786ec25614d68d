"""The paths a Model holds (OpenSim's ``GeometryPath`` of path points): one frozen record of
every path's points, stacked, built by ``realize_topology()`` from the ``sj.GeometryPath``
handles (:mod:`simjax.system.paths`) and evaluated by :mod:`simjax.dynamics.paths`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class MovingPoint:
    """A path point whose station coordinates are functions of coordinates (OpenSim's
    ``MovingPathPoint``): ``point`` its index in the path set; ``axes`` per station axis
    x, y, z either None (the station's value) or ``(function, body, which, lower,
    upper)``: a function of one argument and the mobilizer coordinate it reads, clamped to
    ``[lower, upper]`` (the coordinate's range, as OpenSim evaluates it)."""

    point: int
    axes: tuple[tuple[Any, int, int, float, float] | None, ...]


@dataclass(frozen=True, eq=False)
class WrapSet:
    """The wrap objects paths wrap over (OpenSim's ``WrapCylinder``, ``WrapSphere``,
    ``WrapEllipsoid``, ``WrapTorus``) and which path uses which (static NumPy).

    Per object: ``names``, ``kind`` ("cylinder", "sphere", "ellipsoid" or "torus"), ``body`` (O,) the
    body it is fixed on, ``R`` (O, 3, 3) and ``p`` (O, 3) its frame in the body (X_BW),
    ``dims`` (O, 3): (radius, length, 0) of a cylinder, (radius, 0, 0) of a sphere, the three
    semi-axes of an ellipsoid, (inner radius, outer radius, 0) of a torus, ``quadrant`` (O, 2): (axis,
    sign) with sign 0 for all. ``path_wraps`` per path, its wraps in order: ``(object,
    first, last)`` with ``first``/``last`` the 0-based indices, within the path, of the
    point range the wrap applies to (OpenSim's ``range``, resolved)."""

    names: tuple[str, ...]
    kind: tuple[str, ...]
    body: np.ndarray
    R: np.ndarray
    p: np.ndarray
    dims: np.ndarray
    quadrant: np.ndarray
    path_wraps: tuple[tuple[tuple[int, int, int], ...], ...]

    @property
    def key(self) -> tuple:
        """What a compiled program depends on (the kernel holds all of it as constants)."""
        arrays = (self.body, self.R, self.p, self.dims, self.quadrant)
        return (self.kind, tuple((a.shape, a.tobytes()) for a in arrays), self.path_wraps)


@dataclass(frozen=True, eq=False)
class PathSet:
    """Every path of a Model, points stacked path after path (``P`` points, static NumPy).

    ``names`` per path; ``start`` (n_paths + 1,) each path's first point (its points are
    ``start[k]:start[k+1]``); ``path`` (P,) the path of each point; ``body`` (P,) and
    ``station`` (P, 3) where each point is fixed; ``cond_point`` (C,) the conditional
    points (OpenSim's ``ConditionalPathPoint``), active while the coordinate ``cond_coord``
    (C, 2: body, slot in its mobilizer's q) lies in ``cond_range`` (C, 2), bounds
    included; ``moving`` the moving points; ``wraps`` the wrap objects (None without).
    """

    names: tuple[str, ...]
    start: np.ndarray
    path: np.ndarray
    body: np.ndarray
    station: np.ndarray
    cond_point: np.ndarray
    cond_coord: np.ndarray
    cond_range: np.ndarray
    moving: tuple[MovingPoint, ...]
    wraps: WrapSet | None = None

    @property
    def num_paths(self) -> int:
        """Number of paths."""
        return len(self.names)

    @property
    def key(self) -> tuple:
        """What a compiled program depends on: counts, indices, stations, ranges and the
        moving points' functions (the kernel holds them as constants)."""
        arrays = (self.start, self.body, self.station, self.cond_point, self.cond_coord, self.cond_range)
        return (
            len(self.names),
            tuple((a.shape, a.dtype.str, a.tobytes()) for a in arrays),
            tuple((m.point, m.axes) for m in self.moving),
            None if self.wraps is None else self.wraps.key,
        )
