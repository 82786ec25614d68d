"""What a model loader returns: the System plus handles by name (bodies, coordinates, markers,
constraints) and a default State, with the glue between coordinate tables and States."""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from .._stage import Stage
from ..model.state import State
from ..studies.assembler import Assembler
from ..studies.conditions import Markers
from ..system.bodies import MobilizedBody
from ..system.constraints import CoordinateLimit
from ..system.contact import KINDS, registry
from ..system.muscles import equilibrate_muscles
from ._motion import CoordinateTable


class ModelFileError(ValueError):
    """A model or data file that cannot be loaded; the message names the file, the line and
    the element, and says what to change."""


@dataclass(eq=False)
class Coordinate:
    """One named generalized coordinate (OpenSim ``Coordinate``, URDF/MJCF joint).

    ``which`` is the coordinate's slot within its mobilizer's q (and u): read and write it
    with :meth:`get_value`/:meth:`set_value`. ``motion_type`` is ``"rotational"`` (radians),
    ``"translational"`` (metres) or ``"coupled"``.
    """

    name: str
    body: MobilizedBody
    which: int
    motion_type: str = "rotational"
    default_value: float = 0.0
    default_speed_value: float = 0.0
    range: tuple[float, float] = (-math.inf, math.inf)
    clamped: bool = False
    locked: bool = False
    prescribed: bool = False
    joint: str = ""
    limit: CoordinateLimit | None = None  # the hard limit enforcing ``range``, if the loader made one
    #: URDF ``<limit effort velocity>``: the largest generalized force (N m or N) and speed
    #: (rad/s or m/s) the file allows; recorded for actuation, not enforced (inf: none given)
    effort_limit: float = math.inf
    velocity_limit: float = math.inf

    def get_value(self, state: State) -> jax.Array:
        """This coordinate's q in ``state`` (one per State of a batch, e.g. from ``track``)."""
        return state.q[..., self.q_index(state)]

    def set_value(self, state: State, value: Any) -> State:
        """A copy of ``state`` with this coordinate's q set (no constraint projection)."""
        return self.body.set_one_q(state, self.which, value)

    def get_speed_value(self, state: State) -> jax.Array:
        """This coordinate's generalized speed u (batched like ``get_value``)."""
        return state.u[..., self.u_index(state)]

    def set_speed_value(self, state: State, value: Any) -> State:
        """A copy of ``state`` with this coordinate's u set."""
        return self.body.set_one_u(state, self.which, value)

    def q_index(self, state: State) -> int:
        """Index of this coordinate in ``state.q``."""
        topo = self.body._topo(state)
        return int(topo.q_start[self.body.index]) + self.which

    def u_index(self, state: State) -> int:
        """Index of this coordinate's speed in ``state.u``."""
        topo = self.body._topo(state)
        return int(topo.u_start[self.body.index]) + self.which

    def __repr__(self) -> str:
        return f"Coordinate({self.name!r}, body={self.body.name!r}, which={self.which}, {self.motion_type})"


@dataclass(eq=False)
class Marker:
    """A named station fixed on a body (OpenSim ``Marker``), ``station`` in the body frame."""

    name: str
    body: MobilizedBody
    station: np.ndarray
    fixed: bool = False

    def find_location_in_ground(self, state: State) -> jax.Array:
        """Ground location of the marker (needs Position stage)."""
        return self.body.find_station_location_in_ground(state, self.station)

    def __repr__(self) -> str:
        return f"Marker({self.name!r}, body={self.body.name!r}, station={self.station.tolist()})"


#: the shapes of :class:`VisualGeometry` and what ``size`` holds for each
GEOMETRY_SHAPES = {
    "box": "half-lengths along x, y, z",
    "sphere": "radius",
    "capsule": "radius, half-length of the cylinder part along z",
    "cylinder": "radius, half-length along z",
    "ellipsoid": "semi-axes along x, y, z",
    "plane": "half-lengths along x, y (0: drawn as a finite floor)",
    "mesh": "unused (the mesh file or vertices give the shape)",
}


@dataclass(eq=False)
class VisualGeometry:
    """A shape drawn fixed to a body: an MJCF ``<geom>``, a URDF ``<visual>`` or an OpenSim
    ``attached_geometry``/``VisibleObject`` (for ``sj.viz``; no physics).

    Attributes:
        name: The element's name in the file (or ``<body>_geom<k>``).
        body: The mobilized body it moves with (Ground for the scenery).
        shape: One of :data:`GEOMETRY_SHAPES`; primitives are centred at ``p`` with their
            axis (capsule, cylinder) along the frame's z.
        size: See :data:`GEOMETRY_SHAPES`.
        R, p: The shape's frame in the body frame (rotation 3x3, position).
        mesh_file: The mesh file, resolved to a path when it was found (a ``package://``
            URI or bare name that was not found stays as written).
        scale: Per-axis scale of the mesh's vertices (applied first).
        vertices, faces: A mesh given inline (MJCF ``<mesh vertex=...>``), in the shape's frame
            before ``scale``.
        rgba: Colour, components in [0, 1].
        group: MJCF ``group`` (MuJoCo's viewer shows groups 0-2); 0 elsewhere.
        searched: The folders a mesh file named by a relative path was looked for in, when
            it was found in none (OpenSim's model folder and ``Geometry`` folders); empty
            otherwise.
    """

    name: str
    body: MobilizedBody
    shape: str
    size: np.ndarray = field(default_factory=lambda: np.zeros(3))
    R: np.ndarray = field(default_factory=lambda: np.eye(3))
    p: np.ndarray = field(default_factory=lambda: np.zeros(3))
    mesh_file: str = ""
    scale: np.ndarray = field(default_factory=lambda: np.ones(3))
    vertices: np.ndarray | None = None
    faces: np.ndarray | None = None
    rgba: tuple[float, float, float, float] = (0.7, 0.7, 0.7, 1.0)
    group: int = 0
    searched: tuple[str, ...] = ()

    def __repr__(self) -> str:
        what = self.mesh_file or self.shape
        return f"VisualGeometry({self.name!r}, body={self.body.name!r}, {what})"


def collect_visuals(
    makers: Iterable[Callable[[], VisualGeometry | None]], notes: list[str], what: str
) -> list[VisualGeometry]:
    """The shapes the ``makers`` read; one that fails (a :class:`ModelFileError`) is left
    out and counted in a note (no physics is lost), the first failure quoted."""
    out: list[VisualGeometry] = []
    bad: list[str] = []
    for make in makers:
        try:
            g = make()
        except ModelFileError as e:
            bad.append(str(e))
            continue
        if g is not None:
            out.append(g)
    if bad:
        notes.append(f"{len(bad)} {what} not drawn (no physics is lost): {bad[0]}")
    return out


@dataclass(eq=False)
class LoadedModel:
    """A System read from a file, with handles by name and its default State.

    Attributes:
        system, matter, forces: The ``MultibodySystem`` and its subsystems.
        state: The default State: coordinate defaults, Euler-angle mode where the source
            tool uses angles for ball and free joints, and (where the model has constraints)
            assembled onto them with the least change of q, as OpenSim's ``initSystem``
            does. It is computed on first access (assembly compiles), so loading stays fast.
        default_state: The same before assembly.
        bodies: Mobilized bodies by body (link) name.
        joints: The mobilized body each joint moves, by joint name.
        coordinates: :class:`Coordinate` handles by name, in the file's order.
        markers: :class:`Marker` handles by name.
        constraints: Constraints by name.
        actuators: Actuators (``Force.CoordinateActuator``) by name, in control order: the
            i-th control of ``set_controls`` drives the i-th.
        paths: ``sj.GeometryPath`` handles by the name of the force that owns them (an
            OpenSim muscle's, ligament's or path actuator's path; the force itself may be
            left out): ``get_length``, ``get_lengthening_speed``, ``compute_moment_arm``.
        muscles: Muscles (``sj.DeGrooteFregly2016Muscle``) by name, in the file's order:
            ``get_fiber_length``, ``get_tendon_force``, ``get_activation``, ... (OpenSim's
            names in snake_case); they are also in ``actuators``, after the coordinate
            actuators (control order).
        tendons: ``sj.Tendon`` handles by name (MuJoCo's tendons, MJCF models):
            ``get_length``, ``get_lengthening_speed``, ``get_jacobian``,
            ``compute_moment_arm``.
        control_ranges: Each actuator's ``(min_control, max_control)`` from the file, by
            name (OpenSim's bounds, which its static optimization uses; [0, 1] for a
            muscle, unbounded for a coordinate actuator unless the file says otherwise).
        contact_forces: Compliant contact force elements (``sj.HuntCrossleyForce``,
            ``sj.SmoothSphereHalfSpaceForce``) by name (OpenSim models).
        ignored: Parts of the file simjax does not model, ``{kind: count}``.
        geometry: :class:`VisualGeometry` of the bodies, for ``sj.viz`` (visual only).
        path: The file it came from.
    """

    system: Any
    matter: Any
    forces: Any
    default_state: State
    bodies: dict[str, MobilizedBody] = field(default_factory=dict)
    joints: dict[str, MobilizedBody] = field(default_factory=dict)
    coordinates: dict[str, Coordinate] = field(default_factory=dict)
    markers: dict[str, Marker] = field(default_factory=dict)
    constraints: dict[str, Any] = field(default_factory=dict)
    actuators: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, Any] = field(default_factory=dict)
    muscles: dict[str, Any] = field(default_factory=dict)
    tendons: dict[str, Any] = field(default_factory=dict)
    control_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    contact_forces: dict[str, Any] = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    geometry: list[VisualGeometry] = field(default_factory=list)
    path: str = ""
    source: str = ""
    _assembled: State | None = field(default=None, repr=False)
    _xml: str | None = field(default=None, repr=False)  # the file's text, when not on disk as read

    @property
    def state(self) -> State:
        """The default State, assembled onto the constraints (computed once, on first use)."""
        if self._assembled is None:
            self._assembled = _assemble_default(self) if self.constraints else self.default_state
        return self._assembled

    @state.setter
    def state(self, value: State) -> None:
        self._assembled = value

    # ------------------------------------------------------------------ coordinates
    @property
    def control_names(self) -> list[str]:
        """The actuators' names in control order (``system.set_controls``)."""
        return list(self.actuators)

    def set_controls(self, state: State, controls: Any) -> State:
        """New State with every actuator's control replaced (``system.set_controls``)."""
        return cast(State, self.system.set_controls(state, controls))

    def get_controls(self, state: State) -> Any:
        """The controls as set (``system.get_controls``)."""
        return self.system.get_controls(state)

    @property
    def coordinate_names(self) -> list[str]:
        """Coordinate names in the file's order."""
        return list(self.coordinates)

    def coordinate(self, name: str) -> Coordinate:
        """The coordinate called ``name`` (clear error listing close names if absent)."""
        return _by_name("coordinate", name, self.coordinates, self.path)

    def body(self, name: str) -> MobilizedBody:
        """The mobilized body called ``name``."""
        return _by_name("body", name, self.bodies, self.path)

    def muscle(self, name: str) -> Any:
        """The muscle called ``name`` (``sj.DeGrooteFregly2016Muscle``)."""
        return _by_name("muscle", name, self.muscles, self.path)

    def geometry_path(self, name: str) -> Any:
        """The path of the force called ``name`` (``sj.GeometryPath``: ``get_length``,
        ``get_lengthening_speed``, ``compute_moment_arm``)."""
        return _by_name("path", name, self.paths, self.path)

    def tendon(self, name: str) -> Any:
        """The MuJoCo tendon called ``name`` (``sj.Tendon``)."""
        return _by_name("tendon", name, self.tendons, self.path)

    def actuator(self, name: str) -> Any:
        """The actuator called ``name`` (``Force.CoordinateActuator`` or a muscle)."""
        known = {**self.actuators, **self.muscles}
        return _by_name("actuator", name, known, self.path)

    def equilibrate_muscles(self, state: State) -> State:
        """A copy of ``state`` with every compliant-tendon muscle's normalized tendon force
        at fibre-tendon equilibrium (OpenSim's ``Model.equilibrateMuscles``)."""
        return equilibrate_muscles(self.system, state)

    def marker(self, name: str) -> Marker:
        """The marker called ``name``."""
        return _by_name("marker", name, self.markers, self.path)

    def coordinate_q_indices(
        self, state: State | None = None, names: Sequence[str] | None = None
    ) -> np.ndarray:
        """Index in ``state.q`` of each named coordinate (default: all, file order)."""
        st = self.default_state if state is None else state
        return np.array([self.coordinate(n).q_index(st) for n in (names or self.coordinates)], dtype=int)

    def coordinate_u_indices(
        self, state: State | None = None, names: Sequence[str] | None = None
    ) -> np.ndarray:
        """Index in ``state.u`` of each named coordinate's speed (default: all)."""
        st = self.default_state if state is None else state
        return np.array([self.coordinate(n).u_index(st) for n in (names or self.coordinates)], dtype=int)

    def get_coordinate_values(self, state: State) -> dict[str, jax.Array]:
        """``{name: q}`` for every coordinate."""
        return {n: c.get_value(state) for n, c in self.coordinates.items()}

    def set_coordinate_values(self, state: State, values: Mapping[str, Any]) -> State:
        """A copy of ``state`` with the named coordinates set (radians and metres)."""
        idx = np.array([self.coordinate(n).q_index(state) for n in values], dtype=int)
        vals = jnp.stack([jnp.asarray(v, dtype=state.q.dtype).reshape(()) for v in values.values()])
        return state.with_q(state.q.at[idx].set(vals))

    def set_coordinate_speeds(self, state: State, values: Mapping[str, Any]) -> State:
        """A copy of ``state`` with the named coordinate speeds set."""
        idx = np.array([self.coordinate(n).u_index(state) for n in values], dtype=int)
        vals = jnp.stack([jnp.asarray(v, dtype=state.u.dtype).reshape(()) for v in values.values()])
        return state.with_u(state.u.at[idx].set(vals))

    def q_from_table(self, table: Any, state: State | None = None) -> np.ndarray:
        """Turn a coordinate table (``sj.io.CoordinateTable``, e.g. from :func:`read_mot`)
        into a ``(T, nq)`` array of q: matching columns by coordinate name (also OpenSim
        state paths such as ``/jointset/knee_r/knee_angle_r/value``), converting rotational
        coordinates from degrees when the table says so, and filling coordinates the table
        lacks with their values in ``state`` (default: the default State). A missing value
        (NaN) in a matched column is refused, naming the column and the row."""
        st = self.default_state if state is None else state
        labels = [_coordinate_label(lb) for lb in table.labels]
        data = np.asarray(table.data, dtype=float)
        q0 = np.asarray(st.q, dtype=float)
        out = np.repeat(q0[None, :], data.shape[0], axis=0)
        found = 0
        for j, lb in enumerate(labels):
            c = self.coordinates.get(lb)
            if c is None:
                continue
            col = data[:, j]
            if np.isnan(col).any():
                i = int(np.argmax(np.isnan(col)))
                raise ValueError(
                    f"q_from_table: column {table.labels[j]!r} is missing (NaN) at row {i} (time "
                    f"{float(np.asarray(table.time)[i]):g}); a q needs a value in every row: fill the gap "
                    "(e.g. interpolate it) or drop the row"
                )
            if table.in_degrees and c.motion_type == "rotational":
                col = np.deg2rad(col)
            out[:, c.q_index(st)] = col
            found += 1
        if found == 0:
            raise ValueError(
                f"q_from_table: no column of the table matches a coordinate of {self.path or 'the model'}; "
                f"table columns start {table.labels[:5]}, coordinates start {self.coordinate_names[:5]}"
            )
        missing = [n for n in self.coordinates if n not in labels]
        if missing:
            warnings.warn(
                f"q_from_table: {len(missing)} coordinate(s) not in the table keep their values in the "
                f"State: {missing[:8]}{' ...' if len(missing) > 8 else ''}",
                stacklevel=2,
            )
        return out

    def table_from_q(self, time: Any, q: Any, in_degrees: bool = False, name: str = "simjax") -> Any:
        """A coordinate table (one column per coordinate, file order) from a ``(T, nq)``
        array of q, e.g. ``traj.q`` of a simulation; write it with ``sj.io.write_mot``."""
        q = np.asarray(q, dtype=float)
        t = np.asarray(time, dtype=float).reshape(-1)
        if q.ndim != 2 or q.shape[0] != t.size:
            raise ValueError(f"table_from_q: q must be (T, nq) with T = len(time) = {t.size}; got {q.shape}")
        idx = self.coordinate_q_indices()
        data = q[:, idx].copy()
        if in_degrees:
            rot = [i for i, c in enumerate(self.coordinates.values()) if c.motion_type == "rotational"]
            data[:, rot] = np.rad2deg(data[:, rot])
        return CoordinateTable(
            time=t, labels=self.coordinate_names, data=data, in_degrees=in_degrees, name=name
        )

    # ------------------------------------------------------------------ markers
    def make_markers(self, names: Sequence[str] | None = None, weights: Mapping[str, float] | None = None):
        """An ``sj.Markers`` assembly condition holding the model's markers (all, or the
        named ones, in that order) with optional weights by name (default 1)."""
        cond = Markers()
        for n in names if names is not None else self.markers:
            m = self.marker(n)
            cond.add_marker(n, m.body, m.station, weight=float((weights or {}).get(n, 1.0)))
        return cond

    def make_assembler(self, markers: Any = None, *, clamp: bool = True, lock: bool = True):
        """An ``sj.Assembler`` for this model: its constraints as errors, the ranges of
        clamped coordinates as bounds (``restrict_q``), locked coordinates held (``lock_q``),
        the ranges of the other rotational coordinates as where their reported values are
        put when a whole turn brings them there (``prefer_q_range``, not a bound), and, if
        given, a Markers condition (or marker names) as the goal."""
        asm = Assembler(self.system)
        for c in self.coordinates.values():
            ranged = any(math.isfinite(x) for x in c.range)
            if lock and c.locked:
                asm.lock_q(c.body, c.which)
            elif clamp and c.clamped and ranged:
                asm.restrict_q(c.body, c.which, c.range[0], c.range[1])
            elif ranged and c.motion_type == "rotational":
                asm.prefer_q_range(c.body, c.which, c.range[0], c.range[1])
        if markers is not None:
            if not hasattr(markers, "add_marker"):
                markers = self.make_markers(markers)
            asm.adopt_assembly_goal(markers)
        return asm

    def summary(self) -> str:
        """The System's summary (q/u layout in the default State's mode), then the
        coordinates with their q index and motion type, the actuators, the markers, and what
        the loader left out. Print it."""
        st = self.default_state
        lines = [f"{self.source or 'model'} file: {self.path}", self.system.summary(st)]
        if self.coordinates:
            lines.append(f"coordinates ({len(self.coordinates)}): name [q index, motion type, range]")
            for c in self.coordinates.values():
                flags = "".join(
                    [
                        " locked" if c.locked else "",
                        " clamped" if c.clamped else "",
                        " hard limit" if c.limit is not None else "",
                        f" effort<={c.effort_limit:.4g}" if math.isfinite(c.effort_limit) else "",
                        f" speed<={c.velocity_limit:.4g}" if math.isfinite(c.velocity_limit) else "",
                    ]
                )
                lines.append(
                    f"  {c.name} [q{c.q_index(st)}, {c.motion_type}, "
                    f"{c.range[0]:.4g}..{c.range[1]:.4g}]{flags}"
                )
        if self.actuators:
            lines.append(
                f"actuators ({len(self.actuators)}, one control each, in this order): "
                "name [speed, gear, gain, bias, control range, activation]"
            )
            dyn = {0: "", 1: ", integrator", 2: ", filter", 3: ", muscle activation"}
            for name, a in self.actuators.items():
                if name in self.muscles:
                    lines.append(
                        f"  {name} [{type(a).__name__} on path {a.get_geometry_path().name!r}, max isometric "
                        f"force {float(a.get_max_isometric_force(st)):.4g}, optimal fibre "
                        f"{float(a.get_optimal_fiber_length(st)):.4g}, tendon slack "
                        f"{float(a.get_tendon_slack_length(st)):.4g}"
                        f"{', rigid tendon' if a.ignore_tendon_compliance else ''}]"
                    )
                    continue
                g, b = np.asarray(a._get(st, "gain")), np.asarray(a._get(st, "bias"))
                gain = "muscle" if a._gain_kind else np.array2string(g, precision=4)
                bias = "muscle" if a._bias_kind else np.array2string(b, precision=4)
                lo, hi = np.asarray(a._get(st, "control_range"))
                rng = f"{lo:.4g}..{hi:.4g}" if np.isfinite([lo, hi]).all() else "unlimited"
                lines.append(
                    f"  {name} [{a._body.name} u{a._which}, gear {float(a._get(st, 'gear')):.4g}, "
                    f"gain {gain}, bias {bias}, {rng}{dyn[a._dyn]}]"
                )
        arm = np.asarray(self.matter.get_armature(st))
        if np.any(arm):
            lines.append(f"armature on {int(np.count_nonzero(arm))} speeds (added to M's diagonal)")
        if self.markers:
            by_body: dict[str, list[str]] = {}
            for mk in self.markers.values():
                by_body.setdefault(mk.body.name, []).append(mk.name)
            lines.append(
                f"markers ({len(self.markers)}): "
                + "; ".join(f"{b}: {', '.join(n)}" for b, n in by_body.items())
            )
        if self.ignored:
            lines.append(
                "left out of the model: " + ", ".join(f"{n} {k}" for k, n in sorted(self.ignored.items()))
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"LoadedModel({self.path!r}: {len(self.bodies)} bodies, {len(self.coordinates)} coordinates, "
            f"{len(self.constraints)} constraints, {len(self.markers)} markers)"
        )


def _coordinate_label(label: str) -> str:
    """``/jointset/knee_r/knee_angle_r/value`` -> ``knee_angle_r``; plain names unchanged;
    a speed column of a states file (``.../knee_angle_r/speed``) -> ``""`` (not a value)."""
    parts = [p for p in label.split("/") if p]
    if len(parts) >= 2 and parts[-1] == "speed":
        return ""
    if len(parts) >= 2 and parts[-1] == "value":
        return parts[-2]
    return parts[-1] if parts else label


def _by_name(kind: str, name: str, known: Mapping[str, Any], path: str) -> Any:
    """``known[name]``, or a ``KeyError`` naming the close names (:func:`_unknown`)."""
    try:
        return known[name]
    except KeyError:
        raise KeyError(_unknown(kind, name, known, path)) from None


def _unknown(kind: str, name: str, known: Mapping[str, Any], path: str) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f"; did you mean {close}?" if close else f"; known: {list(known)[:8]}"
    return f"no {kind} named {name!r} in {path or 'the model'}{hint}"


def _assemble_default(model: LoadedModel) -> State:
    """Satisfy the constraints at the default State, moving q as little as possible (a
    least-squares projection, as OpenSim's ``initSystem`` assembles); keeps the unassembled
    State, with a warning, when that fails."""
    system, st = model.system, model.default_state
    name = model.path.rsplit("/", 1)[-1] or "model"
    try:

        @jax.jit
        def assemble(s: State) -> tuple[State, jax.Array]:
            out = system.project_q(s, tol=1e-10, iterations=30, throw=False)  # checked below
            return out, jnp.max(jnp.abs(system.realize(out, Stage.POSITION).qerr), initial=0.0)

        out, perr_ = assemble(st)
        perr = float(perr_)
    except Exception as e:  # noqa: BLE001 - any failure is reported, the load still succeeds
        warnings.warn(
            f"{name}: could not assemble the default State ({e}); model.state is unassembled", stacklevel=3
        )
        return st
    if not np.isfinite(perr) or perr > 1e-8:
        warnings.warn(
            f"{name}: the constraints could not be satisfied at the default coordinates (max error "
            f"{perr:.2e}); model.state is left unassembled",
            stacklevel=3,
        )
        return st
    return out


def add_coordinate_limits(coordinates: Mapping[str, Coordinate], notes: list[str], select: Any = None) -> int:
    """Hard limits (``Constraint.CoordinateLimit``) on the coordinates whose range is finite
    at either end (and that ``select(c)`` accepts; locked and prescribed ones never). A
    coordinate whose rate is not one of its mobilizer's speeds (an Euler angle of a ball,
    say) gets none and a note. Returns how many were made."""
    n = 0
    for c in coordinates.values():
        if c.locked or c.prescribed or (select is not None and not select(c)):
            continue
        lo, hi = c.range
        if not (math.isfinite(lo) or math.isfinite(hi)):
            continue
        rotary = {"rotational": True, "translational": False}.get(c.motion_type)
        try:
            c.limit = CoordinateLimit(c.body, c.which, lo, hi, rotary=rotary, name=c.name)
        except ValueError as e:
            notes.append(f"coordinate {c.name!r}: its range is not enforced ({e})")
            continue
        n += 1
    return n


def realize_with_contact(system: Any, matter: Any, ignored: dict[str, int]) -> Any:
    """``system.realize_topology()`` for a loader: the candidate contact pairs of kinds
    without a collision kernel are counted in ``ignored`` (by kind, for the load warning)
    instead of warned about on their own."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="contact: ", category=UserWarning)
        state = system.realize_topology()
    cand = matter.get_contact_candidates(state)
    if cand is not None:
        surfaces = registry(matter).surfaces
        for i, j in cand.unsupported:
            kind = sorted((surfaces[k].surface.geometry.kind for k in (i, j)), key=KINDS.index)
            what = f"colliding pair of a kind with no collision kernel yet ({'-'.join(kind)}: left out)"
            ignored[what] = ignored.get(what, 0) + 1
    return state
