"""OpenSim's static optimization (an ``AnalyzeTool`` setup with a ``StaticOptimization``
analysis), read from its setup file and run on :class:`simjax.StaticOptimization`.

As OpenSim runs it:

1. the coordinates file becomes the states as the ``AnalyzeTool`` makes them: padded and
   low-pass filtered when ``lowpass_cutoff_frequency_for_coordinates`` is non-negative
   (as in inverse dynamics), q from natural quintic splines of the coordinates and u their
   slopes, at the file's (padded) rows;
2. the target accelerations are the slopes of a second natural quintic spline through
   the speeds of every row (OpenSim's ``GCVSplineSet(5, states)``), at each frame;
3. each frame within the analysis's ``start_time``..``end_time`` (and the tool's
   ``initial_time``..``final_time``) solves for the activations of every enabled actuator
   of the model (its muscles and coordinate actuators, bounded by their ``min_control``
   and ``max_control``), minimising ``sum a^activation_exponent`` so that the free
   coordinates accelerate as the targets say, with the external loads applied; the
   coordinates a constraint determines (locked, prescribed, coupled) are not targets;
4. the activations and forces are written as ``<name>_StaticOptimization_activation.sto``
   and ``<name>_StaticOptimization_force.sto``, one column per actuator.

Where simjax differs: OpenSim's IPOPT stops at ``optimizer_convergence_criterion`` (1e-4
by default); simjax solves each frame to round-off (the setting is read and not needed),
so activations agree with OpenSim's to about that criterion. A frame OpenSim cannot
solve (a model too weak) is reported in :attr:`SOResult.converged` and warned about,
naming the frames and the coordinates left short. The force file holds the actuators'
forces only (OpenSim's also lists the model's other forces). OpenSim clamps coordinates
to their ranges while making the states (``Coordinate.setValue``); simjax does not.
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .._stage import Stage
from ..studies.static_optimization import StaticOptimization
from ..system.constraints import CoordinateCoupler
from ._inverse_dynamics import LoadSeries, coordinate_trajectories, read_external_loads
from ._loaded import LoadedModel, ModelFileError
from ._motion import CoordinateTable, read_mot, write_sto
from ._setup import _file, _float, _text, _tool_root, tool_model


def dependent_speeds(model: LoadedModel, state: Any) -> list[int]:
    """The u indices of the coordinates a constraint determines (OpenSim's
    ``Coordinate.isConstrained``): locked and prescribed coordinates and the dependent
    coordinate of each enabled ``CoordinateCoupler``."""
    out = {c.u_index(state) for c in model.coordinates.values() if c.locked or c.prescribed}
    by_slot = {(c.body.index, c.which): c for c in model.coordinates.values()}
    for con in model.constraints.values():
        if isinstance(con, CoordinateCoupler) and not bool(con.is_disabled(state)):
            mob, k = con._sel[-1]
            c = by_slot.get((int(mob), int(k)))
            if c is not None:
                out.add(c.u_index(state))
    return sorted(out)


def static_optimization(
    model: LoadedModel,
    state: Any = None,
    *,
    activation_exponent: float = 2.0,
    use_muscle_physiology: bool = True,
) -> StaticOptimization:
    """A :class:`simjax.StaticOptimization` of a loaded model with OpenSim's settings: its
    actuators' ``min_control``/``max_control`` as bounds and its locked, prescribed and
    coupled coordinates as the constrained ones (``state``: the default State in
    Euler-angle form unless given)."""
    if state is None:
        state = model.matter.set_use_euler_angles(model.default_state, True)
    acts = model.system.get_actuators()
    ranges = [model.control_ranges.get(a.name) for a in acts]
    lo = [r[0] if r else (0.0 if a.name in model.muscles else -math.inf) for a, r in zip(acts, ranges)]
    hi = [r[1] if r else (1.0 if a.name in model.muscles else math.inf) for a, r in zip(acts, ranges)]
    return StaticOptimization(
        model.system,
        activation_exponent=activation_exponent,
        use_muscle_physiology=use_muscle_physiology,
        min_control=lo,
        max_control=hi,
        dependent_u=dependent_speeds(model, state),
    )


@dataclass
class SOResult:
    """What :meth:`SOSetup.run` computed and wrote.

    Attributes:
        time: The frames' times (T,).
        activation: OpenSim's activation table: one column per actuator (muscles'
            activations, coordinate actuators' controls).
        force: The actuators' forces (N; N m for a coordinate actuator on a rotation).
        converged: Per frame, whether the actuators produce the target accelerations.
        residual: Per frame, the generalized forces left unproduced on the free
            coordinates (T, nfree).
        generalized_forces: Per frame, what the actuators must supply on the free
            coordinates (T, nfree): the scale of ``residual``.
        q, u, udot: The states and target accelerations at the frames ((T, nq), (T, nu),
            (T, nu), simjax's State order, Euler-angle form).
        files: The paths written (``"activation"``, ``"force"``).
    """

    time: np.ndarray
    activation: CoordinateTable
    force: CoordinateTable
    converged: np.ndarray
    residual: np.ndarray
    generalized_forces: np.ndarray
    q: np.ndarray
    u: np.ndarray
    udot: np.ndarray
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class SOSetup:
    """An OpenSim ``AnalyzeTool`` setup with a ``StaticOptimization`` analysis (see
    :func:`read_so_setup`)."""

    path: str
    model_file: str | None = None
    coordinates_file: str | None = None
    external_loads_file: str | None = None
    lowpass_cutoff_frequency_for_coordinates: float = -1.0
    time_range: tuple[float, float] = (-math.inf, math.inf)
    results_directory: str | None = None
    name: str = ""
    activation_exponent: float = 2.0
    use_muscle_physiology: bool = True
    step_interval: int = 1

    def run(
        self,
        model: LoadedModel | str | Path | None = None,
        *,
        output_dir: str | Path | None = None,
        write: bool = True,
    ) -> SOResult:
        """OpenSim's ``AnalyzeTool.run()`` with its static optimization (see the module
        docstring): the activations and forces at every frame, written to
        ``<results_directory>/<name>_StaticOptimization_{activation,force}.sto`` (relative
        to the setup's folder; ``output_dir`` overrides) unless ``write=False``."""
        model = tool_model(self.path, self.model_file, model)
        if self.coordinates_file is None:
            raise ModelFileError(f"{self.path}: the setup names no <coordinates_file> (the IK motion)")
        time, q, u, udot, state = coordinate_trajectories(
            model,
            read_mot(self.coordinates_file),
            self.lowpass_cutoff_frequency_for_coordinates,
            self.time_range,
            who=self.path,
            speeds_spline=True,
        )
        keep = np.arange(0, time.size, max(self.step_interval, 1))
        time, q, u, udot = time[keep], q[keep], u[keep], udot[keep]
        loads = read_external_loads(self.external_loads_file) if self.external_loads_file else None
        if loads is None:
            none, empty = np.zeros(0, dtype=int), np.zeros((time.size, 0, 3))
            ser = LoadSeries(none, none, none, empty, empty, empty)
        else:
            ser = loads.series(model, time)
        so = static_optimization(
            model,
            state,
            activation_exponent=self.activation_exponent,
            use_muscle_physiology=self.use_muscle_physiology,
        )
        sol = _compiled_frames(model.system, so, ser)(state, q, u, udot, *ser.data())
        names = [a.name for a in so.actuators]
        act, frc = np.asarray(sol.activation), np.asarray(sol.force)
        converged, residual = np.asarray(sol.converged), np.asarray(sol.residual)
        if not converged.all():
            bad = np.flatnonzero(~converged)
            free = [c for c in sorted(model.coordinates.values(), key=lambda c: c.u_index(state))]
            dep = set(so._dependent.tolist()) if so._dependent is not None else set()
            free = [c for c in free if c.u_index(state) not in dep]
            worst = np.abs(residual[bad]).max(0)
            short = [
                f"{c.name} ({w:.3g})" for c, w in sorted(zip(free, worst), key=lambda x: -x[1])[:4] if w > 0
            ]
            warnings.warn(
                f"{self.path}: static optimization could not produce the accelerations at {bad.size} of "
                f"{time.size} frames (t = {time[bad[0]]:g} s ...); the model is too weak there: the "
                f"activations sit on their bounds and these coordinates are left short (N m or N): "
                f"{', '.join(short)}. Add reserve actuators (CoordinateActuator) or widen min/max_control",
                stacklevel=2,
            )
        a_tab = CoordinateTable(
            time=time, labels=names, data=act, in_degrees=False, name="Static Optimization"
        )
        f_tab = CoordinateTable(
            time=time, labels=names, data=frc, in_degrees=False, name="Static Optimization"
        )
        files: dict[str, str] = {}
        if write:
            if output_dir is not None:
                folder = Path(output_dir)
            else:
                folder = Path(self.results_directory or ".")
                folder = folder if folder.is_absolute() else Path(self.path).parent / folder
            folder.mkdir(parents=True, exist_ok=True)
            for key, tab in (("activation", a_tab), ("force", f_tab)):
                out = folder / f"{self.name}_StaticOptimization_{key}.sto"
                write_sto(out, tab)
                files[key] = str(out)
        return SOResult(
            time, a_tab, f_tab, converged, residual, np.asarray(sol.generalized_forces), q, u, udot, files
        )


_COMPILED: weakref.WeakKeyDictionary[Any, dict[tuple, Any]] = weakref.WeakKeyDictionary()


def _compiled_frames(system: Any, so: StaticOptimization, ser: LoadSeries) -> Any:
    """``(state, q, u, udot, force, point, torque) -> solution`` over all frames, compiled
    once per System, settings and loads layout."""
    key = (
        ser.body.tobytes(),
        ser.force_frame.tobytes(),
        ser.point_frame.tobytes(),
        so._p,
        so._physiology,
        so._lo.tobytes(),
        so._hi.tobytes(),
        None if so._dependent is None else so._dependent.tobytes(),
    )
    cache = _COMPILED.setdefault(system, {})
    if key not in cache:

        def frame(state: Any, qq: Any, uu: Any, aa: Any, force: Any, point: Any, torque: Any) -> Any:
            s = system.realize(state.with_q(qq).with_u(uu), Stage.POSITION)
            F = ser.apply(s.position_cache.R_GB, s.position_cache.p_GB, force, point, torque)
            return so.solve(s, aa, applied_body_forces=F)

        cache[key] = jax.jit(jax.vmap(frame, in_axes=(None, 0, 0, 0, 0, 0, 0)))
    return cache[key]


def read_so_setup(path: str | Path) -> SOSetup:
    """Read an OpenSim ``AnalyzeTool`` setup file whose ``AnalysisSet`` holds a
    ``StaticOptimization`` (see :class:`SOSetup`); other analyses in it are ignored with
    a warning."""
    p = Path(path)
    tool = _tool_root(p, "AnalyzeTool", "read_so_setup", "an analyze tool setup file")
    base = p.parent
    sp = str(p)
    so = None
    others = []
    objs = tool.find("AnalysisSet/objects")
    for el in objs if objs is not None else ():
        if el.tag == "StaticOptimization" and (_text(el, "on") or "true").strip().lower() != "false":
            so = el
        else:
            others.append(el.tag)
    if so is None:
        raise ModelFileError(
            f"{sp}: the AnalyzeTool's <AnalysisSet> holds no StaticOptimization that is on; add one "
            "(or use read_id_setup for inverse dynamics)"
        )
    if others:
        warnings.warn(
            f"{sp}: analyses other than StaticOptimization are ignored: {', '.join(others)}", stacklevel=2
        )
    if (_text(so, "use_model_force_set") or "true").strip().lower() == "false":
        raise ModelFileError(
            f"{sp}: <use_model_force_set>false</use_model_force_set> (coordinate actuators on every "
            "coordinate instead of the model's muscles) is not supported: add CoordinateActuators to the "
            "model instead"
        )
    if (_text(tool, "replace_force_set") or "false").strip().lower() == "true" or (
        _text(tool, "force_set_files") or ""
    ).strip():
        raise ModelFileError(
            f"{sp}: <force_set_files> (actuators added from other files) are not supported: add the "
            "actuators to the model file"
        )
    if (_text(tool, "states_file") or "").strip():
        raise ModelFileError(
            f"{sp}: a <states_file> is not supported: give the <coordinates_file> (the IK motion)"
        )
    lo = max(
        _float(_text(tool, "initial_time"), -math.inf, sp, "initial_time"),
        _float(_text(so, "start_time"), -math.inf, sp, "start_time"),
    )
    hi = min(
        _float(_text(tool, "final_time"), math.inf, sp, "final_time"),
        _float(_text(so, "end_time"), math.inf, sp, "end_time"),
    )
    p_exp = _float(_text(so, "activation_exponent"), 2.0, sp, "activation_exponent")
    physiology = (_text(so, "use_muscle_physiology") or "true").strip().lower() != "false"
    step = _float(_text(so, "step_interval"), 1.0, sp, "step_interval")
    return SOSetup(
        path=sp,
        model_file=_file(base, _text(tool, "model_file")),
        coordinates_file=_file(base, _text(tool, "coordinates_file")),
        external_loads_file=_file(base, _text(tool, "external_loads_file")),
        lowpass_cutoff_frequency_for_coordinates=_float(
            _text(tool, "lowpass_cutoff_frequency_for_coordinates"),
            -1.0,
            sp,
            "lowpass_cutoff_frequency_for_coordinates",
        ),
        time_range=(lo, hi),
        results_directory=_text(tool, "results_directory"),
        name=tool.get("name", ""),
        activation_exponent=p_exp,
        use_muscle_physiology=physiology,
        step_interval=int(step),
    )
