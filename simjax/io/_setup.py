"""OpenSim's inverse-kinematics setup file (``InverseKinematicsTool`` XML) as simjax data.

``read_ik_setup(path)`` returns an :class:`IKSetup`: the marker tasks (applied ones, with
their weights), the coordinate tasks (by coordinate name, with weight and target), the
accuracy, the constraint weight, the time range, what to report and the file names it
points to (resolved relative to the setup file, as OpenSim does). ``setup.make_assembler(model)``
builds the ``sj.Assembler`` OpenSim's IK would solve: the model's constraints (or a finite
constraint weight), clamped ranges as bounds, locked coordinates held, a ``Markers`` goal
with the weights (every model marker with weight 1 when no marker task is applied, as
OpenSim), and one ``QValue`` goal per coordinate task, numbered correctly for every joint
type. ``setup.run()`` is OpenSim's ``InverseKinematicsTool.run()``: the frames in the time
range solved, the motion and the marker-error report written where the setup says.
"""

from __future__ import annotations

import math
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

import jax
import jax.numpy as jnp
import numpy as np

from ..studies.conditions import Markers, QValue
from ._loaded import LoadedModel, ModelFileError, _coordinate_label
from ._motion import CoordinateTable, read_mot, read_trc, write_mot, write_sto
from ._osim import load_osim
from ._xml import parse_tree, read_bounded


@dataclass
class CoordinateTask:
    """An ``IKCoordinateTask``: hold ``name`` near ``value`` with ``weight``.

    ``value_type`` is OpenSim's: ``"default_value"`` (the coordinate's default),
    ``"manual_value"`` (``value``) or ``"from_file"`` (the setup's coordinate file).
    """

    name: str
    weight: float
    value_type: str = "default_value"
    value: float = 0.0


@dataclass
class IKSetup:
    """An OpenSim IK setup (see :func:`read_ik_setup`)."""

    path: str
    model_file: str | None = None
    marker_file: str | None = None
    coordinate_file: str | None = None
    output_motion_file: str | None = None
    accuracy: float = 1e-5
    constraint_weight: float = math.inf
    time_range: tuple[float, float] = (-math.inf, math.inf)
    marker_weights: dict[str, float] = field(default_factory=dict)
    coordinate_tasks: dict[str, CoordinateTask] = field(default_factory=dict)
    name: str = ""
    results_directory: str | None = None
    report_errors: bool = True

    def make_markers(self, model: LoadedModel) -> Markers:
        """A ``Markers`` goal with the applied marker tasks the model has, weighted. Tasks
        for markers the model lacks are skipped with a warning, as OpenSim's IK skips them
        (Pose2Sim's setups list every keypoint of a family); none left is an error. With no
        applied marker task (no ``<IKTaskSet>``, say) every model marker is fitted with
        weight 1, as OpenSim fits every marker of its marker file (those the file lacks are
        missing in every frame, so they count for nothing)."""
        if not self.marker_weights:
            if not model.markers:
                raise ModelFileError(
                    f"{self.path}: the setup applies no marker task and the model "
                    f"{Path(model.path).name} has no markers: nothing to fit"
                )
            return model.make_markers()
        missing = [n for n in self.marker_weights if n not in model.markers]
        names = [n for n in self.marker_weights if n in model.markers]
        if not names:
            raise ModelFileError(
                f"{self.path}: no marker task names a marker of the model {Path(model.path).name} "
                f"(tasks {list(self.marker_weights)[:6]}, model markers {list(model.markers)[:6]})"
            )
        if missing:
            warnings.warn(
                f"{self.path}: {len(missing)} marker task(s) name markers the model "
                f"{Path(model.path).name} does not have; skipped (as OpenSim does): {missing[:8]}",
                stacklevel=2,
            )
        return model.make_markers(names, self.marker_weights)

    def make_assembler(self, model: LoadedModel) -> Any:
        """The Assembler OpenSim's IK tool solves with this setup (see the module docstring)."""
        asm = model.make_assembler(self.make_markers(model))
        asm.set_accuracy(self.accuracy)
        if math.isfinite(self.constraint_weight):
            asm.set_system_constraints_weight(self.constraint_weight)
        matter = model.system.get_matter_subsystem()
        euler = matter.set_use_euler_angles(model.default_state, True)
        topo = model.system.model_for(euler).topology(True)
        for task in self.coordinate_tasks.values():
            if task.name not in model.coordinates:
                raise ModelFileError(
                    f"{self.path}: coordinate task {task.name!r} names no coordinate of the model"
                )
            c = model.coordinates[task.name]
            if task.value_type == "default_value":
                target = c.default_value
            elif task.value_type == "manual_value":
                target = task.value
            else:  # from_file: a target per frame, given to track by make_frames
                if self.coordinate_file is None:
                    raise ModelFileError(
                        f"{self.path}: coordinate task {task.name!r} takes its value from a file, "
                        "but the setup names no <coordinate_file>; set one or use default_value/manual_value"
                    )
                target = c.default_value
            which = c.q_index(euler) - int(topo.q_start[c.body.index])
            asm.adopt_assembly_goal(
                QValue(c.body, which, float(target), name=_task_name(task.name)), task.weight
            )
        return asm

    def make_frames(self, model: LoadedModel, asm: Any, observations: Any, time: Any) -> dict[int, Any]:
        """What ``asm.track(state, frames)`` takes for this setup: the marker observations
        ``(T, n, 3)`` and, for every coordinate task ``from_file``, its target at each of
        the ``T`` frame ``time``s, read from the setup's coordinate file (radians for
        rotational coordinates; linear interpolation between the file's rows, where OpenSim
        fits a quintic GCV spline: equal at the rows when the file is sampled at the trial's
        times, within the spline's smoothing otherwise)."""
        t = np.asarray(time, float)
        out: dict[int, Any] = {}
        for i in range(asm.get_num_assembly_conditions()):
            if isinstance(asm.get_assembly_condition(i), Markers):
                out[i] = observations
        from_file = [k for k in self.coordinate_tasks.values() if k.value_type == "from_file"]
        if not from_file:
            return out
        table = read_mot(str(self.coordinate_file))
        for task in from_file:
            c = model.coordinates[task.name]
            label = next((lb for lb in table.labels if _coordinate_label(lb) == task.name), None)
            if label is None:
                raise ModelFileError(
                    f"{self.coordinate_file}: no column for coordinate task {task.name!r} "
                    f"(its columns start {table.labels[:6]})"
                )
            v = table.column(label)
            if np.isnan(v).any():
                i = int(np.argmax(np.isnan(v)))
                raise ModelFileError(
                    f"{self.coordinate_file}: column {label!r} of coordinate task {task.name!r} is missing "
                    f"(NaN) at data row {i} (time {float(table.time[i]):g}); fill the gap or drop the row"
                )
            if table.in_degrees and c.motion_type == "rotational":
                v = np.deg2rad(v)
            tt = np.asarray(table.time)
            if t.min() < tt[0] - 1e-9 or t.max() > tt[-1] + 1e-9:
                raise ModelFileError(
                    f"{self.coordinate_file}: covers t = {tt[0]:g}..{tt[-1]:g} s, the frames "
                    f"{t.min():g}..{t.max():g} s; give a file that covers the trial"
                )
            idx = next(
                i
                for i in range(asm.get_num_assembly_conditions())
                if asm.get_assembly_condition(i).name == _task_name(task.name)
            )
            out[idx] = jnp.asarray(np.interp(t, tt, v))
        return out

    def run(
        self,
        model: LoadedModel | str | Path | None = None,
        *,
        output_dir: str | Path | None = None,
        write: bool = True,
        progress: bool | None = None,
    ) -> IKResult:
        """OpenSim's ``InverseKinematicsTool.run()``: solve every frame of the marker file
        within ``time_range`` and write what the setup asks for.

        ``model`` is a loaded model or a path (default: the setup's ``model_file``). The
        motion goes to ``output_motion_file`` (coordinates by name, rotations in degrees,
        as OpenSim writes it) and, with ``report_errors``, the marker errors to
        ``<results_directory>/<name>_ik_marker_errors.sto``; relative paths are taken from
        the setup file's folder, or all files go to ``output_dir`` when given. ``write=False``
        writes nothing. Frames whose solve did not succeed are named in a warning (their
        ``infos``' status says why)."""
        model = tool_model(self.path, self.model_file, model)
        if self.marker_file is None:
            raise ModelFileError(f"{self.path}: the setup names no <marker_file>: nothing to fit")
        trc = read_trc(self.marker_file).in_units("m")
        rows = self.frames_in_range(trc.time)
        if rows.size == 0:
            raise ModelFileError(
                f"{self.path}: no frame of {Path(self.marker_file).name} (t = {trc.time[0]:g}.."
                f"{trc.time[-1]:g} s) lies in the time range {self.time_range[0]:g}..{self.time_range[1]:g} s"
            )
        time = np.asarray(trc.time)[rows]
        asm = self.make_assembler(model)
        markers = next(
            asm.get_assembly_condition(i)
            for i in range(asm.get_num_assembly_conditions())
            if isinstance(asm.get_assembly_condition(i), Markers)
        )
        obs = jnp.asarray(trc.observations(markers)[rows])
        states, infos = asm.track(
            model.default_state, self.make_frames(model, asm, obs, time), progress=progress
        )
        label = Path(self.output_motion_file or "ik").stem
        motion = model.table_from_q(time, states.q, in_degrees=True, name="Coordinates")
        errors = marker_error_table(markers, states, obs, time)
        written: dict[str, str] = {}
        if write:
            if self.output_motion_file:
                written["motion"] = str(self._output_path(self.output_motion_file, output_dir))
                write_mot(written["motion"], motion)
            if self.report_errors:
                folder = self._output_path(self.results_directory or ".", output_dir, folder=True)
                written["marker_errors"] = str(folder / f"{self.name}_ik_marker_errors.sto")
                write_sto(written["marker_errors"], errors.replace(name="Model Marker Errors from IK"))
        bad = np.flatnonzero(~np.asarray(infos.success))
        if bad.size:
            warnings.warn(
                f"{self.path} ({label}): {bad.size} of {len(time)} frame(s) did not converge "
                f"(t = {', '.join(f'{time[i]:g}' for i in bad[:6])}{' ...' if bad.size > 6 else ''}); "
                "their infos' status and error say why",
                stacklevel=2,
            )
        return IKResult(states, infos, time, motion, errors, written)

    def _output_path(self, name: str, output_dir: str | Path | None, folder: bool = False) -> Path:
        if output_dir is not None:
            out = Path(output_dir) if folder else Path(output_dir) / Path(name).name
        else:
            p = Path(name)
            out = p if p.is_absolute() else Path(self.path).parent / p
        (out if folder else out.parent).mkdir(parents=True, exist_ok=True)
        return out

    def frames_in_range(self, times: np.ndarray) -> np.ndarray:
        """Indices of the frames whose times lie in ``time_range`` (as OpenSim selects)."""
        t = np.asarray(times)
        lo, hi = self.time_range
        eps = 1e-9 * max(1.0, abs(hi) if math.isfinite(hi) else 1.0)
        return np.flatnonzero((t >= lo - eps) & (t <= hi + eps))


@dataclass
class IKResult:
    """What :meth:`IKSetup.run` solved and wrote.

    Attributes:
        states: The solved States, one per frame in the time range (batched, as ``track``).
        infos: ``track``'s per-frame solver reports (``success``, ``status``, ``goal``,
            ``error_norm``, ...).
        time: The frames' times (T,).
        motion: The coordinates as OpenSim's ``.mot`` holds them (rotations in degrees).
        marker_errors: OpenSim's ``_ik_marker_errors.sto`` table (total squared error, RMS,
            max per frame).
        files: The paths written, by kind (``"motion"``, ``"marker_errors"``).
    """

    states: Any
    infos: Any
    time: np.ndarray
    motion: CoordinateTable
    marker_errors: CoordinateTable
    files: dict[str, str]


def tool_model(setup_path: str, model_file: str | None, model: Any) -> LoadedModel:
    """The model a tool's ``run(model)`` works on: ``model`` if loaded, else loaded from
    it (a path) or from the setup's ``<model_file>``."""
    if model is None:
        if model_file is None:
            raise ModelFileError(f"{setup_path}: the setup names no <model_file>; pass run(model=...)")
        model = model_file
    return model if isinstance(model, LoadedModel) else load_osim(model)


def _task_name(name: str) -> str:
    return f"coordinate task {name}"


def _text(node: ET.Element, tag: str) -> str | None:
    e = node.find(tag)
    return None if e is None or e.text is None else e.text.strip()


def _float(s: str | None, default: float, path: str, what: str) -> float:
    if s is None or s == "":
        return default
    v = s.strip().lower()
    if v in ("inf", "infinity", "+inf"):
        return math.inf
    try:
        return float(v)
    except ValueError:
        raise ModelFileError(f"{path}: {what} must be a number, got {s!r}") from None


def _bool(s: str | None) -> bool:
    return s is None or s.strip().lower() in ("true", "1", "yes")


def _file(base: Path, s: str | None) -> str | None:
    if s is None or s in ("", "Unassigned"):
        return None
    p = Path(s)
    return str(p if p.is_absolute() else base / p)


def _read_tasks(tool: ET.Element, sp: str) -> tuple[dict[str, float], dict[str, CoordinateTask]]:
    """The applied marker weights and coordinate tasks of ``tool``'s ``IKTaskSet``."""
    weights: dict[str, float] = {}
    coords: dict[str, CoordinateTask] = {}
    tasks = tool.find("IKTaskSet/objects")
    for t in [] if tasks is None else list(tasks):
        name = t.get("name", "")
        if not _bool(_text(t, "apply")):
            continue
        w = _float(_text(t, "weight"), 0.0, sp, f"weight of task {name!r}")
        if w < 0 or math.isnan(w):
            raise ModelFileError(f"{sp}: task {name!r} has a negative weight {w}")
        if t.tag == "IKMarkerTask":
            weights[name] = w
        elif t.tag == "IKCoordinateTask":
            vt = _text(t, "value_type") or "default_value"
            if vt not in ("default_value", "manual_value", "from_file"):
                raise ModelFileError(f"{sp}: coordinate task {name!r} has an unknown value_type {vt!r}")
            value = _float(_text(t, "value"), 0.0, sp, f"value of task {name!r}")
            coords[name] = CoordinateTask(name, w, vt, value)
    return weights, coords


def _tool_root(p: Path, tag: str, who: str, what: str) -> ET.Element:
    """The ``<tag>`` element of an OpenSim tool setup file (at the root or under
    ``<OpenSimDocument>``)."""
    try:  # parsed as the model loaders parse: no DTDs or entities, bounded depth and size
        root = parse_tree(read_bounded(str(p)), str(p))
    except (OSError, ET.ParseError, expat.ExpatError) as e:
        raise ModelFileError(f"{who}: cannot read {p}: {e}") from None
    tool = root if root.tag == tag else root.find(tag)
    if tool is None:
        raise ModelFileError(f"{who}: {p} has no <{tag}>; is it {what}?")
    return tool


def _time_range(node: ET.Element, sp: str) -> tuple[float, float]:
    """A tool's ``<time_range>`` (unbounded when absent)."""
    tr = (_text(node, "time_range") or "").split()
    if len(tr) != 2:
        return (-math.inf, math.inf)
    return (_float(tr[0], -math.inf, sp, "time_range"), _float(tr[1], math.inf, sp, "time_range"))


def read_ik_setup(path: str | Path) -> IKSetup:
    """Read an OpenSim ``InverseKinematicsTool`` setup file (see :class:`IKSetup`)."""
    p = Path(path)
    tool = _tool_root(p, "InverseKinematicsTool", "read_ik_setup", "an IK setup file")
    base = p.parent
    sp = str(p)
    setup = IKSetup(
        path=sp,
        model_file=_file(base, _text(tool, "model_file")),
        marker_file=_file(base, _text(tool, "marker_file")),
        coordinate_file=_file(base, _text(tool, "coordinate_file")),
        output_motion_file=_text(tool, "output_motion_file"),
        accuracy=_float(_text(tool, "accuracy"), 1e-5, sp, "accuracy"),
        constraint_weight=_float(_text(tool, "constraint_weight"), math.inf, sp, "constraint_weight"),
        time_range=_time_range(tool, sp),
        name=tool.get("name", ""),
        results_directory=_text(tool, "results_directory"),
        report_errors=_bool(_text(tool, "report_errors")),
    )
    setup.marker_weights, setup.coordinate_tasks = _read_tasks(tool, sp)
    return setup


def marker_errors(markers: Markers, states: Any, observations: Any) -> np.ndarray:
    """Distances (m) between each model marker and its observation, ``(T, n_markers)``
    (markers in the order they were added) for a batch of ``T`` States (as
    ``Assembler.track`` returns) and observations ``(T, n_obs, 3)`` in the Markers'
    observation order; NaN where a marker is missing."""
    obs = jnp.asarray(observations)
    if obs.ndim != 3 or obs.shape[1:] != (markers.get_num_observations(), 3):
        raise ValueError(
            f"marker_errors: observations must be (T, {markers.get_num_observations()}, 3) in the "
            f"Markers' observation order, got {tuple(obs.shape)}"
        )
    data = markers.get_data()

    def one(s: Any, o: Any) -> Any:
        return jnp.linalg.norm(markers._locations(s, data) - markers._item_obs(o), axis=-1)

    return np.asarray(jax.vmap(one)(states, obs))


def marker_error_table(
    markers: Markers, states: Any, observations: Any, time: Any, *, per_marker: bool = False
) -> CoordinateTable:
    """OpenSim's ``<trial>_ik_marker_errors.sto`` as a table (write it with
    ``sj.io.write_sto``): per frame ``total_squared_error`` (m^2, unweighted),
    ``marker_error_RMS`` and ``marker_error_max`` (m) over the markers observed in that
    frame; with ``per_marker`` also one column per marker (its distance, NaN if missing)."""
    d = marker_errors(markers, states, observations)
    t = np.asarray(time, float)
    if t.shape != (d.shape[0],):
        raise ValueError(f"marker_error_table: time must have shape ({d.shape[0]},), got {t.shape}")
    seen = np.isfinite(d)
    n = np.maximum(seen.sum(axis=1), 1)
    sq = np.where(seen, d, 0.0) ** 2
    cols = [sq.sum(axis=1), np.sqrt(sq.sum(axis=1) / n), np.where(seen, d, -np.inf).max(axis=1)]
    labels = ["total_squared_error", "marker_error_RMS", "marker_error_max"]
    if per_marker:
        labels += [f"{markers.get_marker_name(i)}_error" for i in range(d.shape[1])]
        cols += list(d.T)
    return CoordinateTable(t, labels, np.stack(cols, axis=1), in_degrees=False, name="marker errors")
