"""OpenSim's ``InverseDynamicsTool`` and ``ExternalLoads``, read from their setup files and
run on simjax's dynamics (:class:`simjax.InverseDynamicsSolver`).

The tool, as OpenSim runs it:

1. the coordinates file (an IK ``.mot``) is, when ``lowpass_cutoff_frequency_for_coordinates``
   is non-negative, padded at both ends by half its length (mirrored and negated, so value
   and slope carry on), resampled at its smallest time step where its steps differ (by a
   quintic spline, as OpenSim's ``Storage::resample``) and low-pass filtered by OpenSim's
   third-order Butterworth filter run forwards and backwards (zero lag); rotations in
   degrees become radians;
2. each coordinate becomes an interpolating natural quintic spline of its samples
   (OpenSim's ``GCVSplineSet(5, ...)`` with zero error variance), giving q, u = dq/dt and
   udot = d2q/dt2 at each frame; coordinates the file lacks keep their default values;
3. each ``ExternalForce`` of the external loads file is an interpolating natural cubic
   spline of its data columns (force, point, torque; ``GCVSpline(3, ...)``), evaluated at
   the frames, expressed in Ground through its frames and applied to its body (the point,
   when given, is where the force acts);
4. every frame's generalized forces are ``M udot + C - applied`` with all the model's
   forces applied except those in ``forces_to_exclude`` (OpenSim's setups usually name
   "Muscles"; "All" excludes the external loads too), constraints ignored; one batched
   call over all frames;
5. the result is written as OpenSim writes it: one column per coordinate in the order of
   the model's mobilities, named ``<coordinate>_moment`` (rotational) or ``_force``.

The frames are the rows of the (padded) coordinates file within ``time_range``: with the
default unbounded range and filtering on, that includes OpenSim's padded rows, as OpenSim's
own output does.

Where the result differs from OpenSim's, on purpose: a CustomJoint whose rotations share a
coordinate (the walker knee of Pose2Sim's full-body model, whose three rotations are
splines of the knee angle). OpenSim's Coriolis terms there come from Simbody's
``MobilizedBody::FunctionBased``, whose ``buildHdot`` is exact only when rotation k is a
function of the joint's k-th coordinate alone; otherwise it adds ``th2' th3' u^2 (W3 x W2)``
to the child's angular acceleration. simjax's equal Lagrange's equations from OpenSim's own
mass matrix and gravity (to 1e-11 of the largest on a synthetic motion, where OpenSim's
tool is 1.4e-4 off, ``tests/test_inverse_dynamics.py``; 9e-9 against 4e-3 on the IK
motion of Pose2Sim's demo), so on such a model the ankle, knee and hip moments differ from
OpenSim's by up to 0.7% of their largest value while the knees move.
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
from ..studies.inverse_dynamics import InverseDynamicsSolver
from ._loaded import LoadedModel, ModelFileError, _coordinate_label
from ._motion import CoordinateTable, read_mot, write_sto
from ._setup import _bool, _file, _float, _text, _time_range, _tool_root, tool_model

# ------------------------------------------------------------------------------ signals


def pad_signal(x: np.ndarray, n: int) -> np.ndarray:
    """OpenSim's ``Signal::Pad``: ``n`` rows prepended and appended to each column of
    ``x`` (T, ...) by reflecting about the end rows and negating (``2 x[0] - x[j]``), which
    keeps the value and slope at the ends. ``n`` must be below T."""
    x = np.asarray(x, dtype=float)
    if n <= 0:
        return x
    if n >= x.shape[0]:
        raise ValueError(f"pad_signal: the pad ({n}) must be smaller than the number of rows ({x.shape[0]})")
    head = 2.0 * x[0] - x[n:0:-1]
    tail = 2.0 * x[-1] - x[-2 : -n - 2 : -1]
    return np.concatenate([head, x, tail])


def lowpass_iir(x: np.ndarray, dt: float, cutoff: float) -> np.ndarray:
    """OpenSim's ``Signal::LowpassIIR`` on each column of ``x`` (T, ...): a third-order
    Butterworth low-pass filter (bilinear transform with frequency warping) run forwards
    and then backwards, the first three samples of each pass copied from its input. A
    cutoff at or above half the sampling frequency becomes 0.49 of it, with a warning,
    as OpenSim does."""
    x = np.asarray(x, dtype=float)
    fs = 1.0 / dt
    if cutoff >= 0.5 * fs:
        cutoff = 0.49 * fs
        warnings.warn(
            f"lowpass_iir: the cutoff frequency must be below half the sampling frequency ({0.5 * fs:g} Hz); "
            f"using {cutoff:g} Hz, as OpenSim does",
            stacklevel=2,
        )
    wa = math.tan(2.0 * math.pi * cutoff * dt / 2.0)
    wa2, wa3 = wa * wa, wa * wa * wa
    den = (wa + 1.0) * (wa2 + wa + 1.0)
    a = np.array([wa3, 3 * wa3, 3 * wa3, wa3]) / den
    b1 = (3 * wa3 + 2 * wa2 - 2 * wa - 3) / den
    b2 = (3 * wa3 - 2 * wa2 - 2 * wa + 3) / den
    b3 = (wa - 1.0) * (wa2 - wa + 1.0) / den

    def once(s: np.ndarray) -> np.ndarray:
        f = s.copy()
        for i in range(3, s.shape[0]):
            f[i] = (
                a[0] * s[i] + a[1] * s[i - 1] + a[2] * s[i - 2] + a[3] * s[i - 3]
                - b1 * f[i - 1] - b2 * f[i - 2] - b3 * f[i - 3]
            )  # fmt: skip
        return f

    if x.shape[0] < 4:
        raise ValueError(f"lowpass_iir: at least 4 samples are needed to filter, got {x.shape[0]}")
    return once(once(x)[::-1])[::-1]


def natural_spline(t: np.ndarray, y: np.ndarray, degree: int) -> Any:
    """The interpolating natural spline of odd ``degree`` (3 or 5) through ``(t, y)``
    (y (T, ...)), knots at the samples: OpenSim's ``GCVSpline`` with zero error variance
    (derivatives ``(degree+1)/2 .. degree-1`` vanish at both ends). Returns a SciPy
    ``BSpline``; ``.derivative(k)`` gives its derivatives."""
    from scipy.interpolate import make_interp_spline  # noqa: PLC0415 (scipy is imported on first use)

    m = (degree + 1) // 2
    bc = [(k, 0.0) for k in range(m, degree)]
    yy = np.asarray(y, dtype=float)
    zeros = [(k, np.zeros(yy.shape[1:])) for k, _ in bc]
    return make_interp_spline(np.asarray(t, dtype=float), yy, k=degree, bc_type=(zeros, zeros), axis=0)


# ------------------------------------------------------------------------------ loads


@dataclass
class ExternalForce:
    """One OpenSim ``ExternalForce``: a force (and/or torque) from data columns applied to
    a body. ``force_identifier`` etc. are column-name prefixes (three columns each, x y z
    in file order); empty when not applied. Forces and torques are expressed in
    ``force_expressed_in_body``, the point in ``point_expressed_in_body`` (``ground`` when
    the named frame is not a body, as OpenSim assumes)."""

    name: str
    applied_to_body: str
    force_expressed_in_body: str = "ground"
    point_expressed_in_body: str = "ground"
    force_identifier: str = ""
    point_identifier: str = ""
    torque_identifier: str = ""
    data_source_name: str = ""
    applies_force: bool = True  # the file's appliesForce / not isDisabled

    def columns(self, labels: list[str], which: str) -> list[int]:
        """The data columns of ``which`` ("force", "point", "torque"): those whose labels
        start with the identifier; exactly three, else a clear error."""
        ident = getattr(self, f"{which}_identifier")
        found = [i for i, lb in enumerate(labels) if lb.startswith(ident)]
        if len(found) != 3:
            raise ModelFileError(
                f"ExternalForce {self.name!r}: the {which}_identifier {ident!r} must start the names of "
                f"exactly 3 data columns (x, y, z), found {len(found)}: {[labels[i] for i in found]}"
            )
        return found


@dataclass(frozen=True)
class LoadSeries:
    """External loads at the frames of a trial, ready to apply: per load ``k`` the body
    it acts on (``body``), the bodies its force/torque and its point are expressed in
    (``force_frame``, ``point_frame``; 0 is Ground), and per frame the force, point and
    torque in those frames ((T, K, 3) each; a load without a point acts at its body's
    origin, one without a torque has zeros)."""

    body: np.ndarray
    force_frame: np.ndarray
    point_frame: np.ndarray
    force: np.ndarray
    point: np.ndarray
    torque: np.ndarray

    def data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-frame arrays ``(force, point, torque)``, each (T, K, 3)."""
        return self.force, self.point, self.torque

    def apply(self, R_GB: Any, p_GB: Any, force: Any, point: Any, torque: Any) -> jax.Array:
        """One frame's body forces (nb, 6) from the body poses ``R_GB`` (nb, 3, 3),
        ``p_GB`` (nb, 3) and the frame's ``force``, ``point``, ``torque`` (K, 3)."""
        nb = R_GB.shape[0]
        F = jnp.einsum("kij,kj->ki", R_GB[self.force_frame], force)
        P = jnp.einsum("kij,kj->ki", R_GB[self.point_frame], point) + p_GB[self.point_frame]
        tq = jnp.cross(P - p_GB[self.body], F) + jnp.einsum("kij,kj->ki", R_GB[self.force_frame], torque)
        out = jnp.zeros((nb, 6), dtype=R_GB.dtype)
        return out.at[self.body, :3].add(tq).at[self.body, 3:].add(F)


@dataclass
class ExternalLoads:
    """OpenSim's ``ExternalLoads``: external forces and the data they read (see
    :func:`read_external_loads`).

    Attributes:
        path: The setup file.
        forces: The :class:`ExternalForce` entries, in file order.
        data: The data file's table (``<datafile>``).
        datafile: Its path.
    """

    path: str
    forces: list[ExternalForce]
    data: CoordinateTable
    datafile: str = ""

    def get(self, name: str) -> ExternalForce:
        """The external force called ``name`` (a ``KeyError`` listing the names otherwise)."""
        for f in self.forces:
            if f.name == name:
                return f
        names = ", ".join(f.name for f in self.forces)
        raise KeyError(f"{self.path}: no ExternalForce named {name!r}; the file has: {names}")

    def _series(self, f: ExternalForce, which: str, times: np.ndarray) -> np.ndarray:
        """Columns of ``which`` interpolated at ``times`` as OpenSim's ExternalForce does:
        a constant for one sample, piecewise linear for 2 or 3, else a natural cubic
        spline."""
        cols = f.columns(self.data.labels, which)
        t = np.asarray(self.data.time, dtype=float)
        y = np.asarray(self.data.data, dtype=float)[:, cols]
        if np.isnan(y).any():
            raise ModelFileError(
                f"ExternalForce {f.name!r}: its {which} columns in {Path(self.datafile).name} have missing "
                "values (NaN); fill them (zeros where no force acts)"
            )
        if t.size == 1:
            return np.repeat(y, times.size, axis=0)
        if t.size <= 3:  # OpenSim's PiecewiseLinearFunction: extrapolates its end segments
            i = np.clip(np.searchsorted(t, times) - 1, 0, t.size - 2)
            w = ((times - t[i]) / (t[i + 1] - t[i]))[:, None]
            return (1 - w) * y[i] + w * y[i + 1]
        spline = natural_spline(t, y, 3)
        inside = np.asarray(spline(np.clip(times, t[0], t[-1])))
        # a natural cubic spline goes on as a straight line beyond its ends (GCVSPL's)
        slope = np.asarray(spline.derivative(1)(np.clip(times, t[0], t[-1])))
        beyond = (times - np.clip(times, t[0], t[-1]))[:, None]
        return inside + slope * beyond

    def series(self, model: LoadedModel, times: Any) -> LoadSeries:
        """The loads' data at ``times`` (T,) as OpenSim interpolates it, with the bodies
        they act on and are expressed in (see :class:`LoadSeries`)."""
        times = np.asarray(times, dtype=float).reshape(-1)
        lo, hi = float(np.min(self.data.time)), float(np.max(self.data.time))
        if times.size and (times.min() < lo - 1e-9 or times.max() > hi + 1e-9):
            warnings.warn(
                f"{self.path}: the frames (t = {times.min():g}..{times.max():g} s) reach outside the load "
                f"data of {Path(self.datafile).name} (t = {lo:g}..{hi:g} s); the loads there are "
                "extrapolated, as OpenSim extrapolates them (narrow the time range to avoid it)",
                stacklevel=3,
            )
        on = [f for f in self.forces if f.applies_force]
        T, K = times.size, len(on)
        force, point, torque = (np.zeros((T, K, 3)) for _ in range(3))
        body, force_frame, point_frame = (np.zeros(K, dtype=int) for _ in range(3))
        for k, f in enumerate(on):
            body[k] = self._body_index(model, f.applied_to_body, f, "applied_to_body", required=True)
            force_frame[k] = self._body_index(model, f.force_expressed_in_body, f, "force_expressed_in_body")
            point_frame[k] = body[k]  # no point: the body's origin
            if f.force_identifier:
                force[:, k] = self._series(f, "force", times)
                if f.point_identifier:
                    point[:, k] = self._series(f, "point", times)
                    point_frame[k] = self._body_index(
                        model, f.point_expressed_in_body, f, "point_expressed_in_body"
                    )
            if f.torque_identifier:
                torque[:, k] = self._series(f, "torque", times)
        return LoadSeries(body, force_frame, point_frame, force, point, torque)

    def body_forces(self, model: LoadedModel, states: Any, times: Any) -> jax.Array:
        """The loads as body forces (T, nb, 6), ``[torque about the body origin; force]``
        in Ground, at batched States (T frames) and their ``times`` (T,): what
        :meth:`simjax.InverseDynamicsSolver.solve` takes as ``applied_body_forces``.
        One compiled, batched call."""
        ser = self.series(model, times)
        system = model.system

        def frame(s: Any, force: Any, point: Any, torque: Any) -> jax.Array:
            pc = system.realize(s, Stage.POSITION).position_cache
            return ser.apply(pc.R_GB, pc.p_GB, force, point, torque)

        return jax.jit(jax.vmap(frame))(states, *ser.data())

    def _body_index(
        self, model: LoadedModel, name: str, f: ExternalForce, what: str, required: bool = False
    ) -> int:
        """Index of the named body (Ground is 0); a frame that is no body means Ground,
        with a warning, as OpenSim assumes (for ``applied_to_body``: an error)."""
        mb = model.bodies.get(name.strip().split("/")[-1])
        if mb is not None:
            return int(mb.get_mobilized_body_index())
        if required:
            raise ModelFileError(
                f"{self.path}: ExternalForce {f.name!r} is applied to {name!r}, which is not a body of "
                f"{Path(model.path).name or 'the model'} (bodies: {list(model.bodies)[:8]} ...)"
            )
        warnings.warn(
            f"{self.path}: ExternalForce {f.name!r}: {what} {name!r} is not a body of the model; Ground is "
            "assumed, as OpenSim assumes it",
            stacklevel=3,
        )
        return 0


def read_external_loads(path: str | Path) -> ExternalLoads:
    """Read an OpenSim ``ExternalLoads`` file and its ``<datafile>`` (a .mot/.sto of force,
    point and torque columns; relative paths from the file's folder)."""
    p = Path(path)
    root = _tool_root(p, "ExternalLoads", "read_external_loads", "an external loads file")
    sp = str(p)
    forces = []
    objs = root.find("objects")
    for el in [] if objs is None else list(objs):
        if el.tag != "ExternalForce":
            raise ModelFileError(f"{sp}: <{el.tag}> in <ExternalLoads> is not supported (ExternalForce)")
        name = el.get("name", "")

        def ident(tag: str, el: Any = el) -> str:
            v = (_text(el, tag) or "").strip()
            return "" if v == "Unassigned" else v

        applied = ident("applied_to_body")
        if not applied:
            raise ModelFileError(f"{sp}: ExternalForce {name!r} names no <applied_to_body>")
        on = _bool(_text(el, "appliesForce")) and (
            _text(el, "isDisabled") or "false"
        ).strip().lower() not in ("true", "1")
        ef = ExternalForce(
            name=name,
            applied_to_body=applied,
            force_expressed_in_body=ident("force_expressed_in_body") or "ground",
            point_expressed_in_body=ident("point_expressed_in_body") or "ground",
            force_identifier=ident("force_identifier"),
            point_identifier=ident("point_identifier"),
            torque_identifier=ident("torque_identifier"),
            data_source_name=ident("data_source_name"),
            applies_force=on,
        )
        if not ef.force_identifier and not ef.torque_identifier:
            raise ModelFileError(
                f"{sp}: ExternalForce {name!r} applies neither a force nor a torque (give <force_identifier> "
                "and/or <torque_identifier>)"
            )
        if ef.point_identifier and not ef.force_identifier:
            raise ModelFileError(f"{sp}: ExternalForce {name!r} gives a point but no force")
        forces.append(ef)
    datafile = _file(p.parent, _text(root, "datafile"))
    if datafile is None:
        raise ModelFileError(f"{sp}: the external loads name no <datafile> of force data")
    if not Path(datafile).is_file():
        raise ModelFileError(f"{sp}: the <datafile> {datafile} does not exist")
    loads = ExternalLoads(sp, forces, read_mot(datafile), datafile)
    for f in forces:  # the columns exist (three per identifier)
        for which in ("force", "point", "torque"):
            if getattr(f, f"{which}_identifier"):
                f.columns(loads.data.labels, which)
    return loads


# ------------------------------------------------------------------------------ the tool


@dataclass
class IDResult:
    """What :meth:`IDSetup.run` computed and wrote.

    Attributes:
        time: The frames' times (T,).
        generalized_forces: OpenSim's output table: one column per coordinate in mobility
            order, ``<name>_moment`` (N m) or ``<name>_force`` (N).
        q, u, udot: The coordinates and their derivatives at the frames, from the splines
            ((T, nq), (T, nu), (T, nu), in simjax's State order, Euler-angle form).
        body_forces: The external loads at the frames (T, nb, 6), or None.
        files: The paths written (``"generalized_forces"``).
    """

    time: np.ndarray
    generalized_forces: CoordinateTable
    q: np.ndarray
    u: np.ndarray
    udot: np.ndarray
    body_forces: Any
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class IDSetup:
    """An OpenSim ``InverseDynamicsTool`` setup (see :func:`read_id_setup`)."""

    path: str
    model_file: str | None = None
    coordinates_file: str | None = None
    external_loads_file: str | None = None
    lowpass_cutoff_frequency_for_coordinates: float = -1.0
    time_range: tuple[float, float] = (-math.inf, math.inf)
    forces_to_exclude: list[str] = field(default_factory=list)
    results_directory: str | None = None
    output_gen_force_file: str = "inverse_dynamics.sto"
    name: str = ""

    def run(
        self,
        model: LoadedModel | str | Path | None = None,
        *,
        output_dir: str | Path | None = None,
        write: bool = True,
    ) -> IDResult:
        """OpenSim's ``InverseDynamicsTool.run()`` (see the module docstring): the
        generalized forces at every frame, written to ``<results_directory>/
        <output_gen_force_file>`` (relative to the setup's folder; ``output_dir``
        overrides) unless ``write=False``."""
        model = tool_model(self.path, self.model_file, model)
        if self.coordinates_file is None:
            raise ModelFileError(f"{self.path}: the setup names no <coordinates_file> (the IK motion)")
        everything = any(n.strip().upper() == "ALL" for n in self.forces_to_exclude)
        loads = (  # "All" excludes the external loads too, as in OpenSim
            read_external_loads(self.external_loads_file)
            if self.external_loads_file and not everything
            else None
        )
        time, q, u, udot, state = coordinate_trajectories(
            model,
            read_mot(self.coordinates_file),
            self.lowpass_cutoff_frequency_for_coordinates,
            self.time_range,
            who=self.path,
        )
        state = exclude_forces(model, state, self.forces_to_exclude, who=self.path)
        ser = load_series(loads, model, time)
        tau_j, F_j = _compiled_frames(model.system, ser)(state, q, u, udot, *ser.data())
        tau, F = np.asarray(tau_j), (None if loads is None else np.asarray(F_j))
        table = generalized_force_table(model, state, time, tau)
        files: dict[str, str] = {}
        if write:
            if output_dir is not None:
                out = Path(output_dir) / Path(self.output_gen_force_file).name
            else:
                folder = Path(self.results_directory or ".")
                folder = folder if folder.is_absolute() else Path(self.path).parent / folder
                out = folder / self.output_gen_force_file
            out.parent.mkdir(parents=True, exist_ok=True)
            write_sto(out, table)
            files["generalized_forces"] = str(out)
        return IDResult(time, table, q, u, udot, F, files)


_COMPILED: weakref.WeakKeyDictionary[Any, dict[tuple, Any]] = weakref.WeakKeyDictionary()


def _compiled_frames(system: Any, ser: LoadSeries) -> Any:
    """``(state, q, u, udot, force, point, torque) -> (tau, body forces)`` over all frames,
    compiled once per System and loads layout (a second run of the tool on a trial of the
    same length reuses the program)."""
    key = (ser.body.tobytes(), ser.force_frame.tobytes(), ser.point_frame.tobytes())
    cache = _COMPILED.setdefault(system, {})
    if key not in cache:
        solver = InverseDynamicsSolver(system)

        def frame(state: Any, qq: Any, uu: Any, aa: Any, force: Any, point: Any, torque: Any) -> Any:
            s = system.realize(state.with_q(qq).with_u(uu), Stage.POSITION)
            F = ser.apply(s.position_cache.R_GB, s.position_cache.p_GB, force, point, torque)
            return solver.solve(s, aa, applied_body_forces=F), F

        cache[key] = jax.jit(jax.vmap(frame, in_axes=(None, 0, 0, 0, 0, 0, 0)))
    return cache[key]


def coordinate_trajectories(
    model: LoadedModel,
    table: CoordinateTable,
    cutoff: float = -1.0,
    time_range: tuple[float, float] = (-math.inf, math.inf),
    who: str = "inverse dynamics",
    speeds_spline: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]:
    """The frames' ``(time, q, u, udot, state)`` from a coordinates table as OpenSim's
    inverse dynamics makes them (padding and filtering when ``cutoff >= 0``, natural
    quintic splines; see the module docstring). ``state`` is the model's default State in
    Euler-angle form (in which each coordinate has one q and one u). With
    ``speeds_spline`` udot is instead the slope of a second quintic spline through the
    speeds at every row, as OpenSim's ``AnalyzeTool`` and ``StaticOptimization`` make
    their states and target accelerations."""
    t = np.asarray(table.time, dtype=float)
    if t.size < 6:
        raise ModelFileError(
            f"{who}: the coordinates file needs at least 6 rows for quintic splines, got {t.size}"
        )
    dts = np.diff(t)
    if np.any(dts <= 0):
        raise ModelFileError(f"{who}: the coordinates file's times must increase strictly")
    matter = model.system.get_matter_subsystem()
    state = matter.set_use_euler_angles(model.default_state, True)
    names = [n for n in model.coordinates if n in _labels(table)]
    if not names:
        raise ModelFileError(
            f"{who}: no column of the coordinates file names a coordinate of the model "
            f"(columns {table.labels[:5]} ..., coordinates {model.coordinate_names[:5]} ...)"
        )
    lab = _labels(table)
    cols = np.asarray(table.data, dtype=float)[:, [lab.index(n) for n in names]]
    if np.isnan(cols).any():
        raise ModelFileError(f"{who}: the coordinates file has missing values (NaN); fill or drop them")
    if table.in_degrees:
        rot = [k for k, n in enumerate(names) if model.coordinates[n].motion_type == "rotational"]
        cols[:, rot] = np.deg2rad(cols[:, rot])
    if cutoff >= 0:
        n = t.size // 2
        t = pad_signal(t, n)
        cols = pad_signal(cols, n)
        dt = float(np.diff(t).min())
        if float(t[-1] - t[0]) / (t.size - 1) - dt > 2.220446049250313e-16:
            # samples not evenly spaced (to the last bit, e.g. 60 Hz times written to a few
            # decimals): OpenSim resamples at the smallest step with quintic splines first
            times = [float(t[0])]
            while times[-1] + dt <= t[-1]:
                times.append(times[-1] + dt)
            cols = np.asarray(natural_spline(t, cols, 5)(np.asarray(times)))
            t = np.asarray(times)
        cols = lowpass_iir(cols, dt, cutoff)
    lo, hi = time_range
    start = max(float(t[0]), lo)
    final = min(float(t[-1]), hi)
    i0, i1 = _find_index(t, start), _find_index(t, final)
    if i1 < i0 or final < start:
        raise ModelFileError(
            f"{who}: the time range {lo:g}..{hi:g} s holds no frame of the coordinates "
            f"(t = {t[0]:g}..{t[-1]:g} s)"
        )
    frames = t[i0 : i1 + 1]
    spline = natural_spline(t, cols, 5)
    Q = np.asarray(spline(frames))
    dQ = np.asarray(spline.derivative(1)(frames))
    if speeds_spline:
        ddQ = np.asarray(natural_spline(t, np.asarray(spline.derivative(1)(t)), 5).derivative(1)(frames))
    else:
        ddQ = np.asarray(spline.derivative(2)(frames))
    q0 = np.asarray(state.q, dtype=float)
    if state.q.size != state.u.size:
        raise ModelFileError(
            f"{who}: the model's State has {state.q.size} q but {state.u.size} u in Euler-angle form"
        )
    T = frames.size
    q = np.repeat(q0[None], T, axis=0)
    u = np.zeros((T, state.u.size))
    udot = np.zeros((T, state.u.size))
    for k, nme in enumerate(names):
        c = model.coordinates[nme]
        q[:, c.q_index(state)] = Q[:, k]
        u[:, c.u_index(state)] = dQ[:, k]
        udot[:, c.u_index(state)] = ddQ[:, k]
    return frames, q, u, udot, state


def _labels(table: CoordinateTable) -> list[str]:
    return [_coordinate_label(lb) for lb in table.labels]


def _find_index(t: np.ndarray, value: float) -> int:
    """OpenSim's ``Storage::findIndex``: the last row whose time is at most ``value``."""
    return max(int(np.searchsorted(t, value, side="right")) - 1, 0)


def exclude_forces(model: LoadedModel, state: Any, names: list[str], who: str = "inverse dynamics") -> Any:
    """``state`` with the forces OpenSim's ``forces_to_exclude`` names disabled: the
    keywords ``All``, ``Actuators`` and ``Muscles`` (any case), or forces by name (the
    model's actuators, muscles and contact forces). A name that matches nothing gets a
    warning, as in OpenSim."""
    muscles = dict(getattr(model, "muscles", {}) or {})
    by_name = {**model.actuators, **model.contact_forces, **muscles}
    for nme in names:
        key = nme.strip()
        if not key:
            continue
        if key.upper() == "ALL":  # every force element; gravity is no force in OpenSim
            for e in model.forces._elements:
                if type(e).__name__ != "UniformGravity" and hasattr(e, "disable"):
                    state = e.disable(state)
            return state
        if key.upper() == "ACTUATORS":
            targets = [*model.actuators.values(), *muscles.values()]
        elif key.upper() == "MUSCLES":
            targets = list(muscles.values())
        elif key in by_name:
            targets = [by_name[key]]
        else:
            warnings.warn(f"{who}: could not find a force or group named {key!r} to exclude", stacklevel=3)
            continue
        for e in targets:
            if hasattr(e, "disable"):
                state = e.disable(state)
    return state


def generalized_force_table(
    model: LoadedModel, state: Any, time: np.ndarray, tau: np.ndarray
) -> CoordinateTable:
    """OpenSim's inverse dynamics output: one column per coordinate in mobility order,
    ``<name>_moment`` for rotational coordinates, ``<name>_force`` otherwise."""
    coords = sorted(model.coordinates.values(), key=lambda c: c.u_index(state))
    labels = [f"{c.name}_{'moment' if c.motion_type == 'rotational' else 'force'}" for c in coords]
    data = np.asarray(tau)[:, [c.u_index(state) for c in coords]]
    return CoordinateTable(time=time, labels=labels, data=data, in_degrees=False, name="Inverse Dynamics")


_CUTOFF = "lowpass_cutoff_frequency_for_coordinates"


def motion_inputs(tool: Any, base: Path, sp: str) -> dict[str, Any]:
    """The inputs OpenSim's motion tools (inverse dynamics, analyze) share: the model,
    coordinates and external loads files (resolved against ``base``) and the coordinates'
    low-pass cutoff (-1: none)."""
    return {
        "model_file": _file(base, _text(tool, "model_file")),
        "coordinates_file": _file(base, _text(tool, "coordinates_file")),
        "external_loads_file": _file(base, _text(tool, "external_loads_file")),
        _CUTOFF: _float(_text(tool, _CUTOFF), -1.0, sp, _CUTOFF),
    }


def load_series(loads: ExternalLoads | None, model: LoadedModel, time: np.ndarray) -> LoadSeries:
    """``loads`` at the frames ``time``, or an empty series (no forces) when None."""
    if loads is None:
        none, empty = np.zeros(0, dtype=int), np.zeros((time.size, 0, 3))
        return LoadSeries(none, none, none, empty, empty, empty)
    return loads.series(model, time)


def read_id_setup(path: str | Path) -> IDSetup:
    """Read an OpenSim ``InverseDynamicsTool`` setup file (see :class:`IDSetup`)."""
    p = Path(path)
    tool = _tool_root(p, "InverseDynamicsTool", "read_id_setup", "an inverse dynamics setup file")
    base = p.parent
    sp = str(p)
    excl = (_text(tool, "forces_to_exclude") or "").split()
    return IDSetup(
        path=sp,
        **motion_inputs(tool, base, sp),
        time_range=_time_range(tool, sp),
        forces_to_exclude=excl,
        results_directory=_text(tool, "results_directory"),
        output_gen_force_file=_text(tool, "output_gen_force_file") or "inverse_dynamics.sto",
        name=tool.get("name", ""),
    )
