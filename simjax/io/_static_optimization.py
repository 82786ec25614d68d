"""OpenSim's ``AnalyzeTool`` with its ``StaticOptimization`` and ``MuscleAnalysis``
analyses, read from its setup file and run on :class:`simjax.StaticOptimization` and the
muscles' own quantities.

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
   and ``<name>_StaticOptimization_force.sto``, one column per actuator;
5. a ``MuscleAnalysis`` writes ``<name>_MuscleAnalysis_<quantity>.sto`` at the same frames,
   one column per muscle: lengths, fibre lengths and velocities, pennation, fibre and
   tendon forces (:data:`MUSCLE_ANALYSIS`), and per coordinate ``MomentArm_<coordinate>``
   and ``Moment_<coordinate>`` (moment arm times tendon force), with the muscles' states
   (activation) at the model's defaults, as OpenSim's states from a coordinates file
   hold them.

Where simjax differs: OpenSim's IPOPT stops at ``optimizer_convergence_criterion`` (1e-4
by default); simjax solves each frame to round-off (the setting is read and not needed),
so activations agree with OpenSim's to about that criterion. A frame OpenSim cannot
solve (a model too weak) is reported in :attr:`AnalyzeResult.converged` and warned about,
naming the frames and the coordinates left short. The force file holds the actuators'
forces only (OpenSim's also lists the model's other forces). OpenSim clamps coordinates
to their ranges while making the states (``Coordinate.setValue``); simjax does not. The
muscle analysis leaves out OpenSim's power and pennation-velocity files.
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._stage import Stage
from ..studies.static_optimization import StaticOptimization
from ..system.constraints import CoordinateCoupler
from ..system.muscles import _muscles_of, calc_muscle_info
from ._inverse_dynamics import (
    LoadSeries,
    coordinate_trajectories,
    load_series,
    motion_inputs,
    read_external_loads,
)
from ._loaded import LoadedModel, ModelFileError
from ._motion import CoordinateTable, read_mot, write_sto
from ._setup import _float, _text, _tool_root, tool_model


def dependent_speeds(model: LoadedModel, state: Any) -> list[int]:
    """The u indices of the coordinates a constraint determines (OpenSim's
    ``Coordinate.isConstrained``): locked and prescribed coordinates and the dependent
    coordinate of each enabled ``CoordinateCoupler``."""
    out = {c.u_index(state) for c in model.coordinates.values() if c.locked or c.prescribed}
    by_slot = {(c.body.index, c.which): c for c in model.coordinates.values()}
    for con in model.constraints.values():
        if isinstance(con, CoordinateCoupler) and not bool(con.is_disabled(state)):
            mob, k = con._sel[-1]  # (the constraint's own mobilizer number, q number)
            c = by_slot.get((int(con._mobilizers[mob].index), int(k)))
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


#: OpenSim's ``MuscleAnalysis`` files (``<name>_MuscleAnalysis_<key>.sto``) and what each
#: holds per muscle, by its getter (``sj.Muscle.get_<value>``)
MUSCLE_ANALYSIS = {
    "Length": "length",
    "FiberLength": "fiber_length",
    "NormalizedFiberLength": "normalized_fiber_length",
    "FiberVelocity": "fiber_velocity",
    "NormFiberVelocity": "normalized_fiber_velocity",
    "PennationAngle": "pennation_angle",
    "ActiveFiberForce": "active_fiber_force",
    "PassiveFiberForce": "passive_fiber_force",
    "FiberForce": "fiber_force",
    "ActiveFiberForceAlongTendon": "active_fiber_force_along_tendon",
    "PassiveFiberForceAlongTendon": "passive_fiber_force_along_tendon",
    "TendonForce": "tendon_force",
}


def muscle_analysis(
    model: LoadedModel, time: Any, q: Any, u: Any, state: Any = None
) -> dict[str, CoordinateTable]:
    """OpenSim's ``MuscleAnalysis`` at every frame (one compiled, batched call): a table per
    quantity of :data:`MUSCLE_ANALYSIS` (one column per muscle), and per coordinate
    ``MomentArm_<coordinate>`` and ``Moment_<coordinate>`` (N m or N: moment arm times
    tendon force). ``q`` (T, nq) and ``u`` (T, nu) in ``state``'s form (default: the
    model's default State in Euler-angle form, whose z gives the muscles' states)."""
    if not model.muscles:
        raise ValueError(f"muscle_analysis: {model.path or 'the model'} has no muscles simjax models")
    if state is None:
        state = model.matter.set_use_euler_angles(model.default_state, True)
    out = _compiled_analysis(model)(state, jnp.asarray(q), jnp.asarray(u))
    values, arms = (np.asarray(x) for x in out)
    names = list(model.muscles)
    t = np.asarray(time, dtype=float)

    def table(data: np.ndarray, label: str) -> CoordinateTable:
        return CoordinateTable(time=t, labels=list(names), data=data, in_degrees=False, name=label)

    tables = {key: table(values[:, k], key) for k, key in enumerate(MUSCLE_ANALYSIS)}
    tendon = values[:, list(MUSCLE_ANALYSIS).index("TendonForce")]
    for c in sorted(model.coordinates.values(), key=lambda c: c.u_index(state)):
        r = arms[:, :, c.u_index(state)]
        tables[f"MomentArm_{c.name}"] = table(r, f"MomentArm_{c.name}")
        tables[f"Moment_{c.name}"] = table(r * tendon, f"Moment_{c.name}")
    return tables


_ANALYSIS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _compiled_analysis(model: LoadedModel) -> Any:
    """``(state, q, u) -> (values (T, k, n_muscles), moment arms (T, n_muscles, nu))``,
    compiled once per model."""
    if model not in _ANALYSIS:
        system, matter = model.system, model.matter
        muscles = list(model.muscles.values())
        paths = np.array([m.get_geometry_path().index for m in muscles])
        sub = muscles[0]._subsystem
        first = _muscles_of(sub)
        order = np.array([first.index(m) for m in muscles])

        def frame(state: Any, qq: Any, uu: Any) -> Any:
            s = system.realize(state.with_q(qq).with_u(uu), Stage.VELOCITY)
            info = calc_muscle_info(sub, s)
            cos = info.cos_pennation_angle
            passive = info.passive_fiber_elastic_force + info.passive_fiber_damping_force
            v = {
                **info._asdict(),
                "passive_fiber_force": passive,
                "active_fiber_force_along_tendon": info.active_fiber_force * cos,
                "passive_fiber_force_along_tendon": passive * cos,
            }
            values = jnp.stack([v[k][order] for k in MUSCLE_ANALYSIS.values()])
            return values, matter.calc_path_moment_arms(s)[paths]

        _ANALYSIS[model] = jax.jit(jax.vmap(frame, in_axes=(None, 0, 0)))
    return _ANALYSIS[model]


@dataclass
class AnalyzeResult:
    """What :meth:`AnalyzeSetup.run` computed and wrote.

    Attributes:
        time: The frames' times (T,).
        activation: Static optimization's activations (OpenSim's table: one column per
            actuator: muscles' activations, coordinate actuators' controls); None without
            a StaticOptimization.
        force: The actuators' forces (N; N m for a coordinate actuator on a rotation), or
            None.
        converged: Per frame, whether the actuators produce the target accelerations, or
            None.
        residual: Per frame, the generalized forces left unproduced on the free
            coordinates (T, nfree), or None.
        generalized_forces: Per frame, what the actuators must supply on the free
            coordinates (T, nfree): the scale of ``residual``; or None.
        muscle_analysis: The MuscleAnalysis tables by OpenSim's file key
            (``"FiberLength"``, ``"MomentArm_knee_angle_r"``, ...); empty without one.
        q, u, udot: The states and target accelerations at the frames ((T, nq), (T, nu),
            (T, nu), simjax's State order, Euler-angle form).
        files: The paths written, by key (``"activation"``, ``"force"``, the muscle
            analysis keys).
    """

    time: np.ndarray
    activation: CoordinateTable | None
    force: CoordinateTable | None
    converged: np.ndarray | None
    residual: np.ndarray | None
    generalized_forces: np.ndarray | None
    muscle_analysis: dict[str, CoordinateTable]
    q: np.ndarray
    u: np.ndarray
    udot: np.ndarray
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class AnalyzeSetup:
    """An OpenSim ``AnalyzeTool`` setup with a ``StaticOptimization`` and/or a
    ``MuscleAnalysis`` (see :func:`read_analyze_setup`)."""

    path: str
    model_file: str | None = None
    coordinates_file: str | None = None
    external_loads_file: str | None = None
    lowpass_cutoff_frequency_for_coordinates: float = -1.0
    time_range: tuple[float, float] = (-math.inf, math.inf)
    results_directory: str | None = None
    name: str = ""
    static_optimization: bool = True
    muscle_analysis: bool = False
    activation_exponent: float = 2.0
    use_muscle_physiology: bool = True
    step_interval: int = 1

    def run(
        self,
        model: LoadedModel | str | Path | None = None,
        *,
        output_dir: str | Path | None = None,
        write: bool = True,
    ) -> AnalyzeResult:
        """OpenSim's ``AnalyzeTool.run()`` (see the module docstring): the static
        optimization's activations and forces and the muscle analysis at every frame,
        written to ``<results_directory>/<name>_StaticOptimization_{activation,force}.sto``
        and ``<name>_MuscleAnalysis_<key>.sto`` (relative to the setup's folder;
        ``output_dir`` overrides) unless ``write=False``."""
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
        tables: dict[str, CoordinateTable] = {}
        a_tab = f_tab = None
        converged = residual = required = None
        if self.static_optimization:
            a_tab, f_tab, converged, residual, required = self._static_optimization(
                model, state, time, q, u, udot
            )
            tables["activation"], tables["force"] = a_tab, f_tab
        analysis = muscle_analysis(model, time, q, u, state) if self.muscle_analysis else {}
        files: dict[str, str] = {}
        if write:
            if output_dir is not None:
                folder = Path(output_dir)
            else:
                folder = Path(self.results_directory or ".")
                folder = folder if folder.is_absolute() else Path(self.path).parent / folder
            folder.mkdir(parents=True, exist_ok=True)
            for key, tab in tables.items():
                out = folder / f"{self.name}_StaticOptimization_{key}.sto"
                write_sto(out, tab)
                files[key] = str(out)
            for key, tab in analysis.items():
                out = folder / f"{self.name}_MuscleAnalysis_{key}.sto"
                write_sto(out, tab)
                files[key] = str(out)
        return AnalyzeResult(time, a_tab, f_tab, converged, residual, required, analysis, q, u, udot, files)

    def _static_optimization(
        self, model: LoadedModel, state: Any, time: np.ndarray, q: Any, u: Any, udot: Any
    ) -> tuple[CoordinateTable, CoordinateTable, np.ndarray, np.ndarray, np.ndarray]:
        loads = read_external_loads(self.external_loads_file) if self.external_loads_file else None
        ser = load_series(loads, model, time)
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
            dep = set(so._dependent.tolist()) if so._dependent is not None else set()
            ordered = sorted(model.coordinates.values(), key=lambda c: c.u_index(state))
            free = [c for c in ordered if c.u_index(state) not in dep]
            worst = np.abs(residual[bad]).max(0)
            ranked = sorted(zip(free, worst), key=lambda x: -x[1])[:4]
            short = [f"{c.name} ({w:.3g})" for c, w in ranked if w > 0]
            warnings.warn(
                f"{self.path}: static optimization could not produce the accelerations at {bad.size} of "
                f"{time.size} frames (t = {time[bad[0]]:g} s ...); the model is too weak there: the "
                f"activations sit on their bounds and these coordinates are left short (N m or N): "
                f"{', '.join(short)}. Add reserve actuators (CoordinateActuator) or widen min/max_control",
                stacklevel=3,
            )
        a_tab = CoordinateTable(
            time=time, labels=names, data=act, in_degrees=False, name="Static Optimization"
        )
        f_tab = CoordinateTable(
            time=time, labels=names, data=frc, in_degrees=False, name="Static Optimization"
        )
        return a_tab, f_tab, converged, residual, np.asarray(sol.generalized_forces)


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


def read_analyze_setup(path: str | Path) -> AnalyzeSetup:
    """Read an OpenSim ``AnalyzeTool`` setup file whose ``AnalysisSet`` holds a
    ``StaticOptimization`` and/or a ``MuscleAnalysis`` that is on (see
    :class:`AnalyzeSetup`); other analyses are ignored with a warning."""
    p = Path(path)
    tool = _tool_root(p, "AnalyzeTool", "read_analyze_setup", "an analyze tool setup file")
    base = p.parent
    sp = str(p)
    so = ma = None
    others = []
    objs = tool.find("AnalysisSet/objects")
    for el in objs if objs is not None else ():
        on = (_text(el, "on") or "true").strip().lower() != "false"
        if el.tag == "StaticOptimization" and on:
            so = el
        elif el.tag == "MuscleAnalysis" and on:
            ma = el
        elif on:
            others.append(el.tag)
    if so is None and ma is None:
        raise ModelFileError(
            f"{sp}: the AnalyzeTool's <AnalysisSet> holds no StaticOptimization or MuscleAnalysis that is "
            "on; add one (or use read_id_setup for inverse dynamics)"
        )
    if others:
        warnings.warn(f"{sp}: analyses simjax does not run are ignored: {', '.join(others)}", stacklevel=2)
    if so is not None and (_text(so, "use_model_force_set") or "true").strip().lower() == "false":
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
    lo = _float(_text(tool, "initial_time"), -math.inf, sp, "initial_time")
    hi = _float(_text(tool, "final_time"), math.inf, sp, "final_time")
    main = so if so is not None else ma
    assert main is not None
    lo = max(lo, _float(_text(main, "start_time"), -math.inf, sp, "start_time"))
    hi = min(hi, _float(_text(main, "end_time"), math.inf, sp, "end_time"))
    kw: dict[str, Any] = {}
    if so is not None:
        kw["activation_exponent"] = _float(_text(so, "activation_exponent"), 2.0, sp, "activation_exponent")
        kw["use_muscle_physiology"] = (
            _text(so, "use_muscle_physiology") or "true"
        ).strip().lower() != "false"
    step = _float(_text(main, "step_interval"), 1.0, sp, "step_interval")
    return AnalyzeSetup(
        path=sp,
        **motion_inputs(tool, base, sp),
        time_range=(lo, hi),
        results_directory=_text(tool, "results_directory"),
        name=tool.get("name", ""),
        static_optimization=so is not None,
        muscle_analysis=ma is not None,
        step_interval=int(step),
        **kw,
    )
