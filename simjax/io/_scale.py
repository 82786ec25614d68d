"""OpenSim's scaling workflow (``ScaleTool``: ``ModelScaler`` then ``MarkerPlacer``) on
``.osim`` files.

``read_scale_setup(path)`` reads a Scale setup file into a :class:`ScaleSetup`.
``setup.compute_scale_factors(model, static)`` takes the setup's measurements on a static
trial: for each marker pair, the mean over the setup's frames of the experimental distance
divided by the model's distance at its default pose, averaged over the measurement's
pairs, given to the measurement's bodies along its axes; then the manual scales, in the
setup's ``scaling_order``. :func:`scale_osim` writes the scaled model as OpenSim's
``Model::scale`` does, from OpenSim 4 and 3.x files alike: joint and offset frames (3.x
``location_in_parent``/``location``), markers, path points (``MovingPathPoint`` functions
too), centres of mass, CustomJoint translation functions, coupler scale factors, wrap
objects and geometry scaled by the factors of the body they are fixed on; each muscle's
optimal fibre and tendon slack lengths (a PathSpring's or Ligament's resting length) times
its path's change of length at the default pose (OpenSim's ``postScale``); inertias scaled
exactly for uniform factors and by OpenSim's cylinder rule otherwise; masses kept
(``preserve_mass_distribution``) or scaled by volume, then all scaled to the subject's
mass. :func:`place_markers` is OpenSim's ``MarkerPlacer``: inverse kinematics on the
static trial averaged over its time range, then every marker that is not ``fixed`` moved
onto its observation. ``setup.run()`` does the whole tool and returns a
:class:`ScaleResult`.
"""

from __future__ import annotations

import math
import os
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._results import RESULTS
from .._stage import Stage
from ..studies import _traces
from ._loaded import LoadedModel, ModelFileError
from ._motion import MarkerTable, read_trc
from ._osim import _X, FUNCTION_TAGS, _OsimReader, load_osim, rotation_body_xyz
from ._setup import CoordinateTask, IKSetup, _bool, _file, _float, _read_tasks, _text, _time_range, _tool_root
from ._xml import XmlDoc

_SIGNIFICANT = float(np.finfo(float).eps ** 0.875)  # SimTK::SignificantReal


# ----------------------------------------------------------------------------- setup
@dataclass
class Measurement:
    """One ``Measurement`` of a Scale setup: marker pairs whose distances give one factor,
    applied to ``body_scales`` (body name -> axes, e.g. ``"XYZ"``)."""

    name: str
    marker_pairs: list[tuple[str, str]] = field(default_factory=list)
    body_scales: dict[str, str] = field(default_factory=dict)


@dataclass
class MeasurementResult:
    """A measurement taken: its factor (NaN if a marker was missing) and, per pair,
    ``(marker1, marker2, model_distance, experimental_distance)`` in metres."""

    name: str
    factor: float
    pairs: list[tuple[str, str, float, float]]


@dataclass
class MarkerPlacerSetup:
    """The ``MarkerPlacer`` part of a Scale setup (see :func:`place_markers`)."""

    apply: bool = False
    marker_weights: dict[str, float] = field(default_factory=dict)
    coordinate_tasks: dict[str, CoordinateTask] = field(default_factory=dict)
    marker_file: str | None = None
    coordinate_file: str | None = None
    time_range: tuple[float, float] = (-math.inf, math.inf)
    output_model_file: str | None = None
    output_motion_file: str | None = None
    max_marker_movement: float = -1.0
    move_model_markers: bool = True
    accuracy: float = 1e-5


@dataclass
class ScaleSetup:
    """An OpenSim Scale setup (``ScaleTool`` XML, see :func:`read_scale_setup`).

    ``manual_scales`` holds the applied manual scale factors by body; ``scaling_order``
    lists ``"measurements"`` and ``"manualScale"`` in the order they are applied (a later
    one overwrites an earlier one's factors for the same body, as in OpenSim). File names
    are resolved relative to the setup file.
    """

    path: str
    mass: float = -1.0
    model_file: str | None = None
    model_scaler_apply: bool = True
    scaling_order: list[str] = field(default_factory=lambda: ["measurements"])
    measurements: list[Measurement] = field(default_factory=list)
    manual_scales: dict[str, np.ndarray] = field(default_factory=dict)
    marker_file: str | None = None
    time_range: tuple[float, float] = (-math.inf, math.inf)
    preserve_mass_distribution: bool = False
    output_model_file: str | None = None
    output_scale_file: str | None = None
    placer: MarkerPlacerSetup = field(default_factory=MarkerPlacerSetup)

    def _static(self, static: MarkerTable | str | None, file: str | None, what: str) -> MarkerTable:
        if static is None:
            if file is None:
                raise ModelFileError(f"{self.path}: {what} names no marker file; pass the static trial")
            static = file
        if isinstance(static, (str, os.PathLike)):
            static = read_trc(static)
        return static.in_units("m")

    def measure(self, model: LoadedModel, static: MarkerTable | str | None = None) -> list[MeasurementResult]:
        """Take the applied measurements (see the module docstring) on ``static`` (a
        MarkerTable or a .trc path; default the setup's marker file) and the model at its
        default pose (``model.state``)."""
        table = self._static(static, self.marker_file, "ModelScaler")
        lo, hi = _frame_range(np.asarray(table.time), self.time_range)
        idx = {n: k for k, n in enumerate(table.marker_names)}
        needed = {m for ms in self.measurements for pr in ms.marker_pairs for m in pr}
        pos = _model_marker_positions(model, sorted(m for m in needed if m in model.markers))
        out = []
        for ms in self.measurements:
            pairs, factor = [], 0.0
            for a, b in ms.marker_pairs:
                where = next(
                    (
                        (m, place)
                        for place, have in (("model", pos), ("static trial", idx))
                        for m in (a, b)
                        if m not in have
                    ),
                    None,
                )
                if where is not None:
                    warnings.warn(
                        f"{self.path}: measurement {ms.name!r}: marker {where[0]!r} is not in the "
                        f"{where[1]}; the measurement is not used",
                        stacklevel=3,
                    )
                    factor = math.nan
                    break
                d_model = float(np.linalg.norm(pos[a] - pos[b]))
                seg = table.data[lo : hi + 1]
                d_exp = float(np.mean(np.linalg.norm(seg[:, idx[b]] - seg[:, idx[a]], axis=-1)))
                pairs.append((a, b, d_model, d_exp))
                factor += d_exp / d_model
            if not ms.marker_pairs:
                factor = math.nan
            elif not math.isnan(factor):
                factor /= len(ms.marker_pairs)
            if math.isnan(factor) and ms.marker_pairs and pairs and len(pairs) == len(ms.marker_pairs):
                warnings.warn(
                    f"{self.path}: measurement {ms.name!r} has a marker missing in the static "
                    "trial's frames; the measurement is not used",
                    stacklevel=3,
                )
            out.append(MeasurementResult(ms.name, factor, pairs))
        return out

    def compute_scale_factors(
        self,
        model: LoadedModel,
        static: MarkerTable | str | None = None,
        measurements: list[MeasurementResult] | None = None,
    ) -> dict[str, np.ndarray]:
        """Scale factors ``(3,)`` for every body of ``model``, as OpenSim's ModelScaler
        computes them: 1 unless a measurement or manual scale sets them. ``measurements``:
        the results of :meth:`measure`, when already taken."""
        factors = {n: np.ones(3) for n in model.bodies}
        results = measurements
        for step in self.scaling_order:
            if step == "measurements":
                if results is None:
                    results = self.measure(model, static) if self.measurements else []
                for ms, res in zip(self.measurements, results, strict=True):
                    if math.isnan(res.factor):
                        continue
                    for body, axes in ms.body_scales.items():
                        if body in factors:
                            f = factors[body].copy()
                            for ax in axes.upper():
                                f["XYZ".index(ax)] = res.factor
                            factors[body] = f
            elif step == "manualScale":
                for body, f in self.manual_scales.items():
                    if body in factors:
                        factors[body] = np.asarray(f, float).copy()
            else:
                raise ModelFileError(
                    f"{self.path}: unknown scaling_order entry {step!r}; "
                    "use 'measurements' and/or 'manualScale'"
                )
        return factors

    def run(
        self,
        model: LoadedModel | str | None = None,
        static: MarkerTable | str | None = None,
        *,
        output_dir: str | os.PathLike[str] | None = None,
    ) -> ScaleResult:
        """OpenSim's ScaleTool: scale (if the ModelScaler applies) then place markers (if
        the MarkerPlacer applies). ``model``: a LoadedModel, a path, or the setup's
        model file; ``static``: the static trial (default the setup's marker files).
        With ``output_dir`` the setup's output model files are written there."""
        if model is None:
            if self.model_file is None:
                raise ModelFileError(f"{self.path}: names no model_file; pass the model")
            model = self.model_file
        if not isinstance(model, LoadedModel):
            model = load_osim(model, warn_ignored=False)
        factors: dict[str, np.ndarray] = {}
        measurements: list[MeasurementResult] = []
        scaled = model
        if self.model_scaler_apply:
            if "measurements" in self.scaling_order and self.measurements:
                measurements = self.measure(model, static)
            factors = self.compute_scale_factors(model, static, measurements)
            out = None
            if output_dir is not None and self.output_model_file:
                out = Path(output_dir) / Path(self.output_model_file).name
            scaled = scale_osim(
                model,
                factors,
                mass=self.mass,
                preserve_mass_distribution=self.preserve_mass_distribution,
                output=out,
            )
        result = ScaleResult(scaled, factors, measurements)
        if self.placer.apply:
            st = static if static is not None else self.placer.marker_file or self.marker_file
            if st is None:
                raise ModelFileError(f"{self.path}: MarkerPlacer names no marker file; pass the static trial")
            out = None
            if output_dir is not None and self.placer.output_model_file:
                out = Path(output_dir) / Path(self.placer.output_model_file).name
            placed = place_markers(scaled, st, self.placer, output=out)
            result.model, result.static_state = placed.model, placed.state
            result.marker_errors, result.static_info = placed.marker_errors, placed.info
        return result


@dataclass
class ScaleResult:
    """What :meth:`ScaleSetup.run` returns: the scaled (and marker-placed) model, the
    scale factors by body, the measurements taken and, when markers were placed, the
    static pose, its solver info and each marker's error there (m, before moving)."""

    model: LoadedModel
    factors: dict[str, np.ndarray]
    measurements: list[MeasurementResult]
    static_state: Any = None
    static_info: Any = None
    marker_errors: dict[str, float] | None = None


def _vec3(s: str | None, sp: str, what: str) -> np.ndarray:
    parts = (s or "").split()
    if len(parts) != 3:
        raise ModelFileError(f"{sp}: {what} needs 3 numbers, got {s!r}")
    return np.array([_float(p, 1.0, sp, what) for p in parts])


def read_scale_setup(path: str | os.PathLike[str]) -> ScaleSetup:
    """Read an OpenSim ``ScaleTool`` setup file (see :class:`ScaleSetup`)."""
    p = Path(path)
    tool = _tool_root(p, "ScaleTool", "read_scale_setup", "a Scale setup file")
    base, sp = p.parent, str(p)
    setup = ScaleSetup(path=sp, mass=_float(_text(tool, "mass"), -1.0, sp, "mass"))
    gmm = tool.find("GenericModelMaker")
    if gmm is not None:
        setup.model_file = _file(base, _text(gmm, "model_file"))
        if _file(base, _text(gmm, "marker_set_file")) is not None:
            raise ModelFileError(
                f"{sp}: <marker_set_file> is not supported; add the markers to the model file"
            )
    ms = tool.find("ModelScaler")
    if ms is not None:
        setup.model_scaler_apply = _bool(_text(ms, "apply"))
        order = (_text(ms, "scaling_order") or "measurements").split()
        setup.scaling_order = order
        for m in ms.findall("MeasurementSet/objects/Measurement"):
            if not _bool(_text(m, "apply")):
                continue
            meas = Measurement(m.get("name", ""))
            for pair in m.findall("MarkerPairSet/objects/MarkerPair"):
                names = (_text(pair, "markers") or "").split()
                if len(names) != 2:
                    raise ModelFileError(
                        f"{sp}: measurement {meas.name!r}: a MarkerPair needs two marker names"
                    )
                meas.marker_pairs.append((names[0], names[1]))
            for bs in m.findall("BodyScaleSet/objects/BodyScale"):
                axes = "".join((_text(bs, "axes") or "X Y Z").split()).upper()
                if not axes or set(axes) - set("XYZ"):
                    raise ModelFileError(f"{sp}: measurement {meas.name!r}: <axes> must be letters of X Y Z")
                meas.body_scales[bs.get("name", "")] = axes
            setup.measurements.append(meas)
        for s in ms.findall("ScaleSet/objects/Scale"):
            if _bool(_text(s, "apply")):
                seg = _text(s, "segment") or ""
                setup.manual_scales[seg] = _vec3(_text(s, "scales"), sp, f"scales of {seg!r}")
        setup.marker_file = _file(base, _text(ms, "marker_file"))
        setup.time_range = _time_range(ms, sp)
        setup.preserve_mass_distribution = _bool(_text(ms, "preserve_mass_distribution") or "false")
        setup.output_model_file = _file(base, _text(ms, "output_model_file"))
        setup.output_scale_file = _file(base, _text(ms, "output_scale_file"))
    mp = tool.find("MarkerPlacer")
    if mp is not None:
        pl = setup.placer
        pl.apply = _bool(_text(mp, "apply"))
        pl.marker_weights, pl.coordinate_tasks = _read_tasks(mp, sp)
        pl.marker_file = _file(base, _text(mp, "marker_file"))
        pl.coordinate_file = _file(base, _text(mp, "coordinate_file"))
        pl.time_range = _time_range(mp, sp)
        pl.output_model_file = _file(base, _text(mp, "output_model_file"))
        pl.output_motion_file = _file(base, _text(mp, "output_motion_file"))
        pl.max_marker_movement = _float(_text(mp, "max_marker_movement"), -1.0, sp, "max_marker_movement")
        pl.move_model_markers = _bool(_text(mp, "move_model_markers"))
    return setup


def _frame_range(t: np.ndarray, time_range: tuple[float, float]) -> tuple[int, int]:
    """OpenSim's MarkerData::findFrameRange: from the last frame at or before the start
    to the first frame at or after the end (inclusive)."""
    n = len(t)
    lo, hi = 0, n - 1
    start, end = time_range
    for i in range(n - 1, -1, -1):
        if t[i] <= start:
            lo = i
            break
    for i in range(lo, n):
        if t[i] >= end:
            hi = i
            break
    return lo, hi


def _model_marker_positions(model: LoadedModel, names: list[str]) -> dict[str, np.ndarray]:
    """Ground positions of the named markers at the model's default pose, assembled onto
    its constraints as OpenSim's ``initSystem`` does (the projection is skipped when the
    default coordinates already satisfy them). The program is kept on disk (``_traces``):
    a second process does not trace the model's realization again."""
    if not names:
        return {}
    markers = [model.markers[n] for n in names]
    system = model.system
    index = tuple(int(m.body.index) for m in markers)
    stations = jnp.asarray(np.stack([np.asarray(m.station, float) for m in markers]))

    @jax.jit
    def where(state: Any, stations: jax.Array) -> Any:
        rs = system.realize(state, Stage.POSITION)
        pc = rs.position_cache
        idx = jnp.asarray(index)
        R, p = pc.R_GB[idx], pc.p_GB[idx]
        pos = p + jnp.einsum("nij,nj->ni", R, stations.astype(p.dtype))
        return pos, jnp.max(jnp.abs(rs.qerr), initial=0.0)

    def at(state: Any) -> Any:
        key = _traces.fingerprint(("io.marker_positions", system.model_for(state).structure_key, index))
        return _traces.call(where, key, (state, stations), state)

    pos, err = at(model.default_state if model._assembled is None else model.state)
    if float(err) > 1e-10:
        pos, err = at(model.state)
    return {n: np.asarray(p) for n, p in zip(names, pos, strict=True)}


# ----------------------------------------------------------------------------- scaling
def _fmt(v: Any) -> str:
    return " ".join(repr(float(x)) for x in np.atleast_1d(v))


def _numbers(el: ET.Element | None, n: int, default: list[float]) -> np.ndarray:
    if el is None or el.text is None or not el.text.split():
        return np.array(default, float)
    v = np.array([float(x) for x in el.text.split()])
    return v if v.size == n else np.array(default, float)


def _set(el: ET.Element, tag: str, value: Any) -> None:
    c = el.find(tag)
    if c is None:
        c = ET.SubElement(el, tag)
    c.text = _fmt(value)


def _is_equal(a: float, b: float) -> bool:
    """SimTK::isNumericallyEqual at the default tolerance."""
    scale = max(abs(a), abs(b), 1.0)
    return abs(a - b) <= scale * _SIGNIFICANT


def scale_inertia(
    I6: np.ndarray, mass: float, new_mass: float, f: np.ndarray, scale_mass: bool
) -> np.ndarray:
    """OpenSim's Body::scaleInertialProperties on an inertia ``[xx yy zz xy xz yz]`` about
    the centre of mass: exact for uniform factors, a cylinder fit to the smallest principal
    moment otherwise. ``mass`` is the unscaled mass, ``new_mass`` the scaled one."""
    xx, yy, zz, xy, xz, yz = (float(v) for v in I6)
    inertia = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    msf = abs(float(f[0] * f[1] * f[2]))
    if new_mass <= np.finfo(float).eps:
        inertia = inertia * 0.0
    elif _is_equal(f[0], f[1]) and _is_equal(f[1], f[2]):
        if scale_mass:
            inertia = inertia * msf
        inertia = inertia * (f[0] * f[0])
    else:
        d = np.diag(inertia)
        if d[0] <= d[1]:
            axis = 0 if d[0] <= d[2] else 2
        else:
            axis = 1 if d[1] <= d[2] else 2
        term = 2.0 * inertia[axis, axis] / mass
        radius = math.sqrt(term) if term >= 0 else 0.0
        oa = 1 if axis == 0 else 0
        term = 12.0 * (inertia[oa, oa] - 0.25 * mass * radius * radius) / mass
        length = math.sqrt(term) if term >= 0 else 0.0
        length *= f[axis]
        others = [k for k in range(3) if k != axis]
        rad_sqr = radius * f[others[0]] * radius * f[others[1]]
        for k in range(3):
            if k == axis:
                inertia[k, k] = 0.5 * new_mass * rad_sqr
            else:
                inertia[k, k] = new_mass * ((length * length / 12.0) + 0.25 * rad_sqr)
        for i in range(3):
            for j in range(3):
                if i != j:
                    inertia[i, j] *= f[i] * f[j]
                    if scale_mass:
                        inertia[i, j] *= msf
    return np.array(
        [inertia[0, 0], inertia[1, 1], inertia[2, 2], inertia[0, 1], inertia[0, 2], inertia[1, 2]]
    )


def _function_child(axis_el: ET.Element) -> tuple[ET.Element, ET.Element] | None:
    """``(holder, function element)`` of a TransformAxis (4.x ``<Kind name="function">``
    or 3.x ``<function><Kind>``)."""
    w = axis_el.find("function")
    if w is not None:
        kids = [c for c in w if c.tag in FUNCTION_TAGS or c.tag.endswith(("Function", "Spline"))]
        return (w, kids[0]) if kids else None
    for c in axis_el:
        if c.tag in FUNCTION_TAGS or c.tag.endswith(("Function", "Spline")):
            return axis_el, c
    return None


_INERTIA_3X = ("inertia_xx", "inertia_yy", "inertia_zz", "inertia_xy", "inertia_xz", "inertia_yz")


def _get_inertia(b: ET.Element) -> np.ndarray:
    """A body's inertia ``[xx yy zz xy xz yz]``: OpenSim 4's ``<inertia>`` or 3.x's six
    ``<inertia_xx>``... elements (which OpenSim reads to 6 significant digits)."""
    if b.find("inertia") is not None or b.find("inertia_xx") is None:
        return _numbers(b.find("inertia"), 6, [0] * 6)
    return np.array([float(f"{float(_numbers(b.find(k), 1, [0])[0]):.6g}") for k in _INERTIA_3X])


def _set_inertia(b: ET.Element, I6: np.ndarray) -> None:
    if b.find("inertia") is not None or b.find("inertia_xx") is None:
        _set(b, "inertia", I6)
    else:
        for k, v in zip(_INERTIA_3X, I6, strict=True):
            _set(b, k, v)


def _anchor(r: _OsimReader, el: ET.Element, path: str) -> tuple[str, Any]:
    """``(body, X_B_frame)`` of a marker or path point: its 3.x ``<body>`` or its 4.x
    ``socket_parent_frame`` (followed through offset frames)."""
    if el.find("body") is not None:
        return (r.doc.text(el, "body") or "").strip(), _X()
    return r._frame_on_body(r._resolve(r.doc.text(el, "socket_parent_frame") or "", path, el), el)


def _multiply_function(holder: ET.Element, fn_el: ET.Element, factor: float) -> None:
    """Multiply the function ``fn_el`` (a child of ``holder``) by ``factor`` as OpenSim does:
    a MultiplierFunction's scale is multiplied, any other function is wrapped in one."""
    if fn_el.tag == "MultiplierFunction":
        _set(fn_el, "scale", float(_numbers(fn_el.find("scale"), 1, [1])[0]) * factor)
        return
    idx = list(holder).index(fn_el)
    mf = ET.Element("MultiplierFunction", {"name": fn_el.get("name") or "function"})
    inner = ET.SubElement(mf, "function")
    holder.remove(fn_el)
    inner.append(fn_el)
    ET.SubElement(mf, "scale").text = _fmt(factor)
    holder.insert(idx, mf)


def _scale_doc(doc: XmlDoc, factors: Mapping[str, Any], mass: float | None, preserve: bool) -> list[str]:
    """Scale the model in ``doc`` in place; returns notes on what was not scaled."""
    r = _OsimReader(doc, warn=False)
    r._read_bodies()
    joints = r._read_joints()
    F: dict[str, np.ndarray] = {}
    for key, v in factors.items():
        arr = np.asarray(v, float)
        if arr.shape != (3,) or not np.all(np.isfinite(arr)):
            raise ValueError(f"scale_osim: the factors of {key!r} must be 3 finite numbers, got {v!r}")
        F[key] = arr
    ground = r.ground_name
    known = set(r.body_els) | {ground}
    unknown = sorted(set(F) - known)
    if unknown:
        raise ValueError(
            f"scale_osim: factors for {unknown[:5]}, which are not bodies of {doc.name} (its bodies: "
            f"{sorted(r.body_els)[:8]}...)"
        )

    def base_of(path: str, el: ET.Element) -> str:
        return r._frame_on_body(path, el)[0]

    def scale_geometry(frame_el: ET.Element, body: str) -> None:
        f = F.get(body)
        ag = frame_el.find("attached_geometry")
        if f is None or ag is None:
            return
        for g in ag:
            sf = g.find("scale_factors")
            if sf is not None:
                sf.text = _fmt(_numbers(sf, 3, [1, 1, 1]) * f)

    # frames: offset frames by their parent's body, geometry by their own body
    for path, (el, parent, _frame) in r.frames.items():
        if el.tag == "PhysicalOffsetFrame":
            body = base_of(parent or "", el)
            f = F.get(body)
            if f is not None:
                _set(el, "translation", _numbers(el.find("translation"), 3, [0, 0, 0]) * f)
            scale_geometry(el, base_of(path, el))
        elif el.tag in ("Body", "Ground"):
            scale_geometry(el, el.get("name") or ground)
    if r.old:  # 3.x: each joint's frames are locations in its parent and child bodies
        for jt in joints:
            for tag, body in (("location_in_parent", jt.parent[0]), ("location", jt.child[0])):
                if body in F and jt.el.find(tag) is not None:
                    _set(jt.el, tag, _numbers(jt.el.find(tag), 3, [0, 0, 0]) * F[body])
        for name, b in r.body_els.items():
            vo = b.find("VisibleObject")
            if name in F and vo is not None:
                _set(vo, "scale_factors", _numbers(vo.find("scale_factors"), 3, [1, 1, 1]) * F[name])
    # markers
    for m in r._set_objects("MarkerSet"):
        body, _ = _anchor(r, m, f"/markerset/{m.get('name')}")
        if body in F:
            _set(m, "location", _numbers(m.find("location"), 3, [0, 0, 0]) * F[body])
    # path points (PathPoint::extendScale, MovingPathPoint's functions times a MultiplierFunction)
    for f_el in r._set_objects("ForceSet"):
        for pt in f_el.findall(".//PathPointSet/objects/*"):
            body, _ = _anchor(r, pt, f"/forceset/{f_el.get('name')}/path/{pt.get('name')}")
            f = F.get(body)
            if f is None:
                continue
            if pt.tag == "MovingPathPoint":
                for k, ax in enumerate("xyz"):
                    holder = pt.find(f"{ax}_location")
                    if holder is None or not len(holder):
                        continue
                    if not (doc.text(pt, f"{ax}_coordinate") or doc.text(pt, f"socket_{ax}_coordinate")):
                        continue
                    _multiply_function(holder, holder[0], float(f[k]))
            if pt.find("location") is not None:
                _set(pt, "location", _numbers(pt.find("location"), 3, [0, 0, 0]) * f)
    # bodies: centre of mass and wrap objects
    for name, b in r.body_els.items():
        f = F.get(name)
        if f is None:
            continue
        _set(b, "mass_center", _numbers(b.find("mass_center"), 3, [0, 0, 0]) * f)
        for w in b.findall("WrapObjectSet/objects/*"):
            _set(w, "translation", _numbers(w.find("translation"), 3, [0, 0, 0]) * f)
            R = rotation_body_xyz(_numbers(w.find("xyz_body_rotation"), 3, [0, 0, 0]))
            n = [float(np.linalg.norm(R[:, k] * f)) for k in range(3)]
            if w.tag == "WrapCylinder":
                _set(w, "radius", float(_numbers(w.find("radius"), 1, [0])[0]) * (n[0] + n[1]) * 0.5)
                _set(w, "length", float(_numbers(w.find("length"), 1, [0])[0]) * n[2])
            elif w.tag == "WrapEllipsoid":
                _set(w, "dimensions", _numbers(w.find("dimensions"), 3, [0, 0, 0]) * np.array(n))
            elif w.tag == "WrapSphere":
                _set(w, "radius", float(_numbers(w.find("radius"), 1, [0])[0]) * float(f.sum()) / 3.0)
            elif w.tag == "WrapTorus":
                avg = (n[0] + n[1]) * 0.5
                _set(w, "inner_radius", float(_numbers(w.find("inner_radius"), 1, [0])[0]) * avg)
                _set(w, "outer_radius", float(_numbers(w.find("outer_radius"), 1, [0])[0]) * avg)
    # CustomJoint translations: functions of the coordinates, scaled along their axes by the
    # parent body's factors (a bare degree of freedom, LinearFunction(1, 0), is not scaled)
    coord_joint: dict[str, Any] = {}
    for jt in joints:
        for co in jt.coords:
            coord_joint[co.name] = (jt, co)
        f = F.get(jt.parent[0])
        if jt.el.tag != "CustomJoint" or f is None:
            continue
        st = jt.el.find("SpatialTransform")
        for a in [] if st is None else st.findall("TransformAxis"):
            if a.get("name") not in ("translation1", "translation2", "translation3"):
                continue
            found = _function_child(a)
            if found is None:
                continue
            holder, fn_el = found
            if fn_el.tag == "LinearFunction":
                coef = _numbers(fn_el.find("coefficients"), 2, [1, 0])
                if coef[0] == 1.0 and coef[1] == 0.0:
                    continue
            _multiply_function(holder, fn_el, float(np.abs(_numbers(a.find("axis"), 3, [1, 0, 0])) @ f))
    # coordinate couplers whose dependent coordinate is a translation
    for cc in r._set_objects("ConstraintSet"):
        if cc.tag != "CoordinateCouplerConstraint":
            continue
        dep = doc.text(cc, "dependent_coordinate_name") or ""
        if dep not in coord_joint:
            continue
        jt, co = coord_joint[dep]
        if co.motion_type != "translational":
            continue
        f = F.get(jt.parent[0])
        if f is None:
            continue
        if not (f[0] == f[1] == f[2]):
            raise ModelFileError(
                f"{doc.where(cc)}: its dependent coordinate {dep!r} is a translation and the "
                f"factors of {jt.parent[0]!r} are not uniform ({f}); OpenSim cannot scale this either: "
                "scale that body uniformly"
            )
        _set(cc, "scale_factor", float(_numbers(cc.find("scale_factor"), 1, [1])[0]) * f[0])
    # inertial properties, then the total mass
    for name, b in r.body_els.items():
        f = F.get(name)
        if f is None:
            continue
        m0 = float(_numbers(b.find("mass"), 1, [0])[0])
        m1 = m0 if preserve else m0 * abs(float(f[0] * f[1] * f[2]))
        _set(b, "mass", m1)
        _set_inertia(b, scale_inertia(_get_inertia(b), m0, m1, f, not preserve))
    if mass is not None and mass > 0:
        total = sum(float(_numbers(b.find("mass"), 1, [0])[0]) for b in r.body_els.values())
        if total > 0:
            ratio = mass / total
            for b in r.body_els.values():
                _set(b, "mass", float(_numbers(b.find("mass"), 1, [0])[0]) * ratio)
                _set_inertia(b, _get_inertia(b) * ratio)
    return []


def _source_doc(model: LoadedModel | str | os.PathLike[str]) -> XmlDoc:
    if isinstance(model, LoadedModel):
        if model.source != "osim":
            raise ValueError(f"scale_osim: the model was loaded from a {model.source} file, not an .osim")
        return XmlDoc(model.path, text=model._xml, what="OpenSim model")
    return XmlDoc(model, what="OpenSim model")


def _load_doc(doc: XmlDoc, path: str, output: str | os.PathLike[str] | None) -> LoadedModel:
    root = doc.root
    ET.indent(root, space="\t")
    text = '<?xml version="1.0" encoding="UTF-8" ?>\n' + ET.tostring(root, encoding="unicode")
    if output is not None:
        Path(output).write_text(text)
        path = os.fspath(output)
    new = _OsimReader(XmlDoc(path, text=text, what="OpenSim model"), False).build()
    new._xml = text
    return new


def scale_osim(
    model: LoadedModel | str | os.PathLike[str],
    factors: Mapping[str, Any],
    *,
    mass: float | None = None,
    preserve_mass_distribution: bool = True,
    output: str | os.PathLike[str] | None = None,
) -> LoadedModel:
    """The model scaled as OpenSim's ``Model::scale`` scales it (see the module docstring).

    Args:
        model: A LoadedModel read from an ``.osim`` file, or the file's path.
        factors: ``(3,)`` scale factors by body name (ground included); bodies not named
            are not scaled.
        mass: The subject's mass (kg): all body masses are then multiplied by one factor so
            they add up to it. ``None`` or ``<= 0`` keeps the scaled masses.
        preserve_mass_distribution: Keep each body's mass (before the total-mass step);
            ``False`` scales it by the product of its factors (its volume).
        output: Also write the scaled model to this ``.osim`` file (OpenSim reads it).

    Returns:
        The scaled model, loaded.
    """
    doc = _source_doc(model)
    name = os.fspath(model.path if isinstance(model, LoadedModel) else model)
    forces = _OsimReader(doc, warn=False)._set_objects("ForceSet")
    has_paths = any(el.find(".//PathPointSet") is not None for el in forces)
    before: dict[str, float] = {}
    if has_paths:
        source = model if isinstance(model, LoadedModel) else load_osim(model, warn_ignored=False)
        before = _path_lengths(source)
    notes = _scale_doc(doc, factors, mass, preserve_mass_distribution)
    if before:
        after = _path_lengths(_load_doc(doc, name, None))
        notes += _post_scale(doc, before, after)
    new = _load_doc(doc, name, output)
    new.notes.extend(notes)
    return new


def _path_lengths(model: LoadedModel) -> dict[str, float]:
    """Every path's length at the model's default pose (as OpenSim's ``preScale`` and
    ``postScale`` take it), by the name of the force that owns it."""
    if not model.paths:
        return {}
    paths = model.paths
    st = model.system.realize(model.state, Stage.POSITION)
    return {n: float(p.get_length(st)) for n, p in paths.items()}


#: Length properties OpenSim's ``extendPostScale`` multiplies by the path's change of length.
_POST_SCALED = ("optimal_fiber_length", "tendon_slack_length", "resting_length")


def _post_scale(doc: XmlDoc, before: Mapping[str, float], after: Mapping[str, float]) -> list[str]:
    """OpenSim's ``extendPostScale`` of path actuators: a muscle's optimal fibre and tendon
    slack lengths, a PathSpring's or Ligament's resting length, times the ratio of its
    path's length after scaling to before (at the default pose). Returns notes naming the
    path forces simjax did not load (left unscaled)."""
    skipped = []
    for f_el in _OsimReader(doc, warn=False)._set_objects("ForceSet"):
        if f_el.find(".//PathPointSet") is None:
            continue
        n = f_el.get("name") or ""
        if n not in before or n not in after:
            skipped.append(n)
            continue
        if before[n] <= 0.0:
            continue
        ratio = after[n] / before[n]
        for tag in _POST_SCALED:
            el = f_el.find(tag)
            if el is not None:
                _set(f_el, tag, float(_numbers(el, 1, [0])[0]) * ratio)
    if not skipped:
        return []
    return [
        f"{len(skipped)} path forces simjax does not load ({', '.join(skipped[:5])}"
        + (", ..." if len(skipped) > 5 else "")
        + "): their lengths (optimal fibre, tendon slack, resting) are not scaled"
    ]


# ----------------------------------------------------------------------------- placing
@dataclass
class PlacedMarkers:
    """What :func:`place_markers` returns."""

    model: LoadedModel
    state: Any
    info: Any
    marker_errors: dict[str, float]


def _average_rows(table: MarkerTable, time_range: tuple[float, float]) -> np.ndarray:
    """TimeSeriesTable::averageRow over the time range clamped to the data."""
    t = np.asarray(table.time)
    lo, hi = max(time_range[0], t[0]), min(time_range[1], t[-1])
    rows = (t >= lo) & (t <= hi)
    if not rows.any():
        raise ValueError(f"place_markers: no frame of the static trial lies in the time range {time_range}")
    return np.asarray(table.data[rows]).mean(axis=0)


def place_markers(
    model: LoadedModel,
    static: MarkerTable | str | os.PathLike[str],
    setup: MarkerPlacerSetup | None = None,
    *,
    output: str | os.PathLike[str] | None = None,
) -> PlacedMarkers:
    """OpenSim's MarkerPlacer: solve inverse kinematics on the static trial averaged over
    ``setup.time_range`` (the setup's marker and coordinate tasks; every model marker with
    weight 1 when ``setup`` is None), then move every marker that is not ``fixed`` onto its
    averaged observation. Markers the static trial lacks are removed from the model, as
    OpenSim does. Returns the new model, the static pose, its solver info and the marker
    errors at that pose (m, before moving). ``output`` also writes the model file."""
    setup = setup or MarkerPlacerSetup(apply=True)
    table = static if isinstance(static, MarkerTable) else read_trc(static)
    table = table.in_units("m")
    avg = _average_rows(table, setup.time_range)
    if setup.max_marker_movement > 0:  # OpenSim warns about markers that moved while averaged
        lo, hi = _frame_range(np.asarray(table.time), setup.time_range)
        seg = np.asarray(table.data[lo : hi + 1])
        with np.errstate(invalid="ignore"):
            extent = np.nanmax(seg, axis=0) - np.nanmin(seg, axis=0)
        for k, n in enumerate(table.marker_names):
            moved = float(np.max(extent[k])) if np.all(np.isfinite(extent[k])) else 0.0
            if moved > setup.max_marker_movement:
                warnings.warn(
                    f"place_markers: marker {n!r} moves {moved:.4g} m in the averaged frames of the static "
                    f"trial (max_marker_movement = {setup.max_marker_movement:g}); is the subject still?",
                    stacklevel=2,
                )
    in_trial = set(table.marker_names)
    doc = _source_doc(model)
    # remove the markers the static trial lacks (OpenSim's deleteUnusedMarkers)
    r = _OsimReader(doc, warn=False)
    ms = r.model.find("MarkerSet/objects")
    removed = []
    if ms is not None:
        for m in list(ms):
            if m.get("name") not in in_trial:
                ms.remove(m)
                removed.append(m.get("name"))
    if removed:
        model = _load_doc(doc, model.path, None)
        doc = _source_doc(model)
    weights = dict(setup.marker_weights) if setup.marker_weights else {n: 1.0 for n in model.markers}
    weights = {n: w for n, w in weights.items() if n in model.markers and n in in_trial}
    if not weights:
        raise ModelFileError(
            "place_markers: no marker task names a marker both in the model and the static trial"
        )
    ik = IKSetup(
        path="MarkerPlacer",
        marker_weights=weights,
        coordinate_tasks=dict(setup.coordinate_tasks),
        accuracy=setup.accuracy,
    )
    names = list(weights)
    col = {n: k for k, n in enumerate(table.marker_names)}
    obs = np.stack([avg[col[n]] for n in names])[None]
    asm = ik.make_assembler(model)
    states, infos = asm.track(model.default_state, jnp.asarray(obs))
    state = jax.tree.map(lambda x: x[0], states)
    rs = model.system.realize(state, Stage.POSITION)
    info = jax.tree.map(lambda x: x[0], infos)
    errors = {}
    pos = {}
    R_GB, p_GB = np.asarray(rs.position_cache.R_GB), np.asarray(rs.position_cache.p_GB)
    for n, marker in model.markers.items():  # on the host: one small program per body otherwise
        b = int(marker.body.index)
        pos[n] = p_GB[b] + R_GB[b] @ np.asarray(marker.station, dtype=np.float64)
    for n in names:
        errors[n] = float(np.linalg.norm(pos[n] - avg[col[n]]))
    if setup.move_model_markers:
        r = _OsimReader(doc, warn=False)
        r._read_bodies()
        r._read_joints()
        for m in r._set_objects("MarkerSet"):
            n = m.get("name") or ""
            if doc.bool(m, "fixed", False) or n not in col:
                continue
            p = avg[col[n]]
            if not np.all(np.isfinite(p)):
                warnings.warn(
                    f"place_markers: marker {n!r} has no valid position in the static trial; not moved",
                    stacklevel=2,
                )
                continue
            body, X = _anchor(r, m, f"/markerset/{n}")
            Xg = model.bodies[body].get_body_transform(rs) if body in model.bodies else None
            if Xg is None:
                R_GB, p_GB = np.eye(3), np.zeros(3)
            else:
                R_GB, p_GB = np.asarray(Xg.R), np.asarray(Xg.p)
            p_B = R_GB.T @ (p - p_GB)
            _set(m, "location", X.R.T @ (p_B - X.p))
    new = _load_doc(doc, model.path, output)
    pose = new.set_coordinate_values(new.default_state, model.get_coordinate_values(state))
    return PlacedMarkers(new, pose, info, errors)


# ----------------------------------------------------------------------------- fitting
@dataclass
class _ScaleMap:
    """How a model's geometry depends on per-body scale factors ``F`` ``(n_bodies, 3)``
    (rows in mobilized-body order): every translation OpenSim's scaling touches is linear
    in the factors of the one body it is fixed on, ``x = A @ F[body]``; the CustomJoint
    translation multipliers are ``c + M @ F[parent]``."""

    pf_body: np.ndarray
    A_PF: np.ndarray
    bm_body: np.ndarray
    A_BM: np.ndarray
    fb_mobod: np.ndarray
    fb_parent: np.ndarray
    fb_M: np.ndarray
    fb_c: np.ndarray
    marker_names: list[str]
    m_body: np.ndarray
    A_m: np.ndarray


def _scale_map(model: LoadedModel) -> _ScaleMap:
    """The map, from three scalings of the file (factors 2 along x, y, z in turn): the
    change of each quantity from the unscaled model is its matrix's column."""
    cached = getattr(model, "_scale_map", None)
    if cached is not None:
        return cached
    mobods = model.matter._mobods
    nb = len(mobods)
    index = {m.name: m.index for m in mobods}
    inst0 = model.default_state.instance["matter"]
    pf0, bm0 = np.asarray(inst0["X_PF_p"]), np.asarray(inst0["X_BM_p"])
    names = list(model.markers)
    st0 = np.stack([model.markers[n].station for n in names]) if names else np.zeros((0, 3))
    A_PF, A_BM, A_m = np.zeros((nb, 3, 3)), np.zeros((nb, 3, 3)), np.zeros((len(names), 3, 3))
    for k in range(3):
        f = np.ones(3)
        f[k] = 2.0
        sk = scale_osim(model, {n: f for n in model.bodies})
        if [m.name for m in sk.matter._mobods] != [m.name for m in mobods]:
            raise RuntimeError("fit_scale_factors: the scaled model's bodies are in another order")
        inst = sk.default_state.instance["matter"]
        A_PF[:, :, k] = np.asarray(inst["X_PF_p"]) - pf0
        A_BM[:, :, k] = np.asarray(inst["X_BM_p"]) - bm0
        if names:
            A_m[:, :, k] = np.stack([sk.markers[n].station for n in names]) - st0
    pf_body = np.array([m._parent.index if m._parent is not None else 0 for m in mobods])
    bm_body = np.arange(nb)
    # CustomJoint translations: a bare coordinate (LinearFunction 1, 0) is not scaled
    doc = _source_doc(model)
    r = _OsimReader(doc, warn=False)
    r._read_bodies()
    fb_mobod, fb_parent, fb_M, fb_c = [], [], [], []
    for jt in r._read_joints():
        if jt.el.tag != "CustomJoint" or jt.child[0] not in index:
            continue
        mob = index[jt.child[0]]
        if mobods[mob]._parent is None or mobods[mob]._parent.name != jt.parent[0]:
            continue  # a joint closed by a constraint: its translations are not in the tree
        M, c = np.zeros((3, 3)), np.zeros(3)
        for k, (cn, axis, fn_, _el) in enumerate(jt.axes[3:]):
            coef = getattr(fn_, "coefficients", None)
            bare = bool(cn) and coef is not None and float(coef[0]) == 1.0 and float(coef[1]) == 0.0
            if bare:
                c[k] = 1.0
            else:
                M[k] = np.abs(np.asarray(axis, float))
        fb_mobod.append(mob)
        fb_parent.append(index[jt.parent[0]])
        fb_M.append(M)
        fb_c.append(c)
    smap = _ScaleMap(
        pf_body,
        A_PF,
        bm_body,
        A_BM,
        np.array(fb_mobod, int),
        np.array(fb_parent, int),
        np.array(fb_M).reshape(-1, 3, 3),
        np.array(fb_c).reshape(-1, 3),
        names,
        np.array([model.markers[n].body.index for n in names], int),
        A_m,
    )
    object.__setattr__(model, "_scale_map", smap)
    return smap


def scale_state(model: LoadedModel, factors: Any, state: Any = None) -> Any:
    """``state`` (default: the model's default State) with the model's geometry scaled by
    ``factors`` ``(n_bodies, 3)`` (rows in ``model.bodies`` order, ground first): joint
    frames, CustomJoint translations (their multipliers) as OpenSim's ``Model::scale``
    scales them. Differentiable in ``factors`` (JAX); mass properties are not changed
    (use :func:`scale_osim` for the final model). Markers: :func:`scale_stations`."""
    smap = _scale_map(model)
    st = model.default_state if state is None else state
    F = _factor_rows(model, factors)
    pf = jnp.einsum("bij,bj->bi", smap.A_PF, F[smap.pf_body])
    bm = jnp.einsum("bij,bj->bi", smap.A_BM, F[smap.bm_body])
    st = st.with_instance("matter", "X_PF_p", pf.astype(st.q.dtype))
    st = st.with_instance("matter", "X_BM_p", bm.astype(st.q.dtype))
    if len(smap.fb_mobod):
        par = jnp.asarray(st.instance["matter"]["mobilizer_params"])
        mult = smap.fb_c + jnp.einsum("bij,bj->bi", smap.fb_M, F[smap.fb_parent])
        par = par.at[smap.fb_mobod, :3].set(mult.astype(par.dtype))
        st = st.with_instance("matter", "mobilizer_params", par)
    return st


def scale_stations(model: LoadedModel, factors: Any, names: list[str]) -> Any:
    """The named markers' stations ``(n, 3)`` (in their body frames) on the model scaled by
    ``factors`` (see :func:`scale_state`); differentiable in ``factors``."""
    smap = _scale_map(model)
    F = _factor_rows(model, factors)
    pos = {n: k for k, n in enumerate(smap.marker_names)}
    idx = np.array([pos[n] for n in names], int)
    return jnp.einsum("nij,nj->ni", smap.A_m[idx], F[smap.m_body[idx]])


def _factor_rows(model: LoadedModel, factors: Any) -> Any:
    nb = len(model.matter._mobods)
    if isinstance(factors, Mapping):
        rows = np.ones((nb, 3))
        for n, f in factors.items():
            rows[model.bodies[n].index] = np.asarray(f, float)
        return jnp.asarray(rows)
    F = jnp.asarray(factors)
    if F.shape != (nb, 3):
        raise ValueError(
            f"scale_state: factors must be ({nb}, 3) (one row per body, ground first), got {F.shape}"
        )
    return F


@dataclass
class ScaleFit:
    """What :func:`fit_scale_factors` returns.

    ``group_factors``: the fitted factor of each group; ``factors``: per body (for
    :func:`scale_osim`); ``marker_offsets``: the fitted change of each free marker's
    station (m, in its body frame); ``state``: the static pose at the fit (on the scaled
    geometry, see :func:`scale_state`); ``rms_error``: the weighted RMS marker error
    there (m); ``history``: the RMS error per iteration; ``converged``: whether the
    relative change of the parameters fell below ``tol``; ``status``: the static IK's
    result at the fit, an ``sj.RESULTS`` item (``successful`` or ``assembly_on_bounds``:
    converged).
    """

    group_factors: dict[str, float]
    factors: dict[str, np.ndarray]
    marker_offsets: dict[str, np.ndarray]
    state: Any
    rms_error: float
    history: list[float]
    iterations: int
    converged: bool
    status: RESULTS = field(default_factory=lambda: RESULTS.successful)  # type: ignore[assignment]


def fit_scale_factors(
    model: LoadedModel,
    static: MarkerTable | str | os.PathLike[str] | None,
    groups: Mapping[str, Mapping[str, str] | list[str]] | ScaleSetup,
    *,
    weights: Mapping[str, float] | None = None,
    coordinate_tasks: Mapping[str, CoordinateTask] | None = None,
    free_markers: list[str] | tuple[str, ...] = (),
    time_range: tuple[float, float] | None = None,
    init: Mapping[str, float] | None = None,
    max_iterations: int = 50,
    tol: float = 1e-10,
) -> ScaleFit:
    """Scale factors (and marker stations) fitted to a static trial by gradient, beyond
    OpenSim's marker-pair measurements: minimise the weighted marker error of the static
    pose, where the pose itself is the inverse-kinematics solution for the current
    geometry (a bilevel fit; derivatives through the IK by implicit differentiation).

    Args:
        model: The generic model (an ``.osim``).
        static: The static trial (MarkerTable or .trc path); its frames in ``time_range``
            are averaged (as OpenSim's MarkerPlacer does).
        groups: One factor per group, given to its bodies along their axes:
            ``{"thigh": {"femur_r": "XYZ", "femur_l": "XYZ"}, ...}`` (a list of bodies
            means all axes); or a ScaleSetup, whose measurements are the groups (and its
            MarkerPlacer's tasks and time range the defaults).
        weights: Marker weights (default: the setup's placer tasks, else 1 for every model
            marker the trial has).
        coordinate_tasks: Coordinate tasks of the static IK (default: the setup's).
        free_markers: Markers whose stations are fitted too (3 numbers each). Free only
            markers whose body's pose the other markers determine: a marker that alone
            fixes a joint angle (a wrist keypoint and pronation) trades off with it.
        time_range: Frames averaged (default: the setup's placer time range, else all).
        init: Starting factors by group (default 1).
        max_iterations: Levenberg-Marquardt iterations.
        tol: Stop when the parameters change by less than this (relative).

    Returns:
        A :class:`ScaleFit`. Build the final model with
        ``sj.io.scale_osim(model, fit.factors, mass=...)``.
    """
    setup = groups if isinstance(groups, ScaleSetup) else None
    if setup is not None:
        group_map: dict[str, dict[str, str]] = {m.name: dict(m.body_scales) for m in setup.measurements}
        weights = weights if weights is not None else (setup.placer.marker_weights or None)
        if coordinate_tasks is None:
            coordinate_tasks = setup.placer.coordinate_tasks
        if time_range is None:
            time_range = setup.placer.time_range if setup.placer.marker_file else setup.time_range
        if static is None:
            file = setup.placer.marker_file or setup.marker_file
            if file is None:
                raise ModelFileError(f"{setup.path}: names no static trial; pass it")
            static = file
    else:
        assert not isinstance(groups, ScaleSetup)
        group_map = {
            g: (
                {b: "XYZ" for b in v}
                if not isinstance(v, Mapping)
                else {b: str(a).upper() for b, a in v.items()}
            )
            for g, v in groups.items()
        }
    if static is None:
        raise ValueError("fit_scale_factors: pass the static trial")
    table = static if isinstance(static, MarkerTable) else read_trc(static)
    table = table.in_units("m")
    avg = _average_rows(table, time_range or (-math.inf, math.inf))
    col = {n: k for k, n in enumerate(table.marker_names)}
    nb = len(model.matter._mobods)
    # the groups as a (n_groups, nb, 3) mask: F = 1 + sum_g (theta_g - 1) mask_g
    mask = np.zeros((len(group_map), nb, 3))
    for g, (gname, bodies) in enumerate(group_map.items()):
        for b, axes in bodies.items():
            if b not in model.bodies:
                raise ValueError(
                    f"fit_scale_factors: group {gname!r} names body {b!r}, which the model lacks"
                )
            for ax in axes:
                mask[g, model.bodies[b].index, "XYZ".index(ax)] = 1.0
    if np.any(mask.sum(axis=0) > 1):
        raise ValueError("fit_scale_factors: a body axis is in two groups; give each to one group")
    w = dict(weights) if weights else {n: 1.0 for n in model.markers}
    w = {n: v for n, v in w.items() if n in model.markers and n in col and v > 0}
    if not w:
        raise ModelFileError(
            "fit_scale_factors: no weighted marker is both in the model and the static trial"
        )
    free = list(free_markers)
    for n in free:
        if n not in w:
            raise ValueError(f"fit_scale_factors: free marker {n!r} is not a weighted marker of the trial")
    names = list(w)
    _scale_map(model)  # built before tracing
    ik = IKSetup(path="fit_scale_factors", marker_weights=w, coordinate_tasks=dict(coordinate_tasks or {}))
    asm = ik.make_assembler(model)
    asm.set_accuracy(1e-8)
    asm.initialize(model.default_state)
    params = asm.get_parameters()
    mk = next(i for i, c in enumerate(asm._conditions) if hasattr(c, "get_marker_index"))
    obs = jnp.asarray(np.stack([avg[col[n]] for n in names]))
    seen = np.all(np.isfinite(np.asarray(obs)), axis=1)
    sqw = jnp.asarray(np.sqrt(np.array([w[n] for n in names]) * seen))
    params["conditions"][mk] = dict(params["conditions"][mk], observations=obs)
    free_ix = np.array([names.index(n) for n in free], int)
    markers_cond = asm._conditions[mk]
    n_g = len(group_map)
    system = model.system
    maskj = jnp.asarray(mask)

    def unpack(theta: Any) -> tuple[Any, Any]:
        F = 1.0 + jnp.einsum("g,gbk->bk", theta[:n_g] - 1.0, maskj)
        off = theta[n_g:].reshape(-1, 3)
        return F, off

    def residuals(theta: Any, q_start: Any, data: dict[str, Any]) -> tuple[Any, Any]:
        F, off = unpack(theta)
        st = scale_state(model, F, model.default_state.with_q(q_start))
        stations = scale_stations(model, F, names)
        if len(free_ix):
            stations = stations.at[free_ix].add(off)
        p = dict(data["params"])
        p["conditions"] = list(p["conditions"])
        p["conditions"][mk] = dict(p["conditions"][mk], stations=stations)
        out, info = asm.solve(st, p)
        rs = system.realize(out, Stage.POSITION)
        target = jnp.where(data["seen"][:, None], data["obs"], 0.0)
        r = ((markers_cond._locations(rs, p["conditions"][mk]) - target) * data["sqw"][:, None]).reshape(-1)
        return r, (jax.lax.stop_gradient(out.q), info.result, out)

    @jax.jit
    def lin_data(theta: Any, q_start: Any, data: dict[str, Any]) -> Any:
        J, (r, aux) = jax.jacfwd(lambda t: _pair(residuals(t, q_start, data)), has_aux=True)(theta)
        return r, J, aux

    data = {"params": params, "sqw": sqw, "seen": jnp.asarray(seen), "obs": obs}

    def lin(theta: Any, q_start: Any) -> Any:
        return lin_data(theta, q_start, data)

    start = np.ones(n_g)
    for gname, v in (init or {}).items():
        if gname not in group_map:
            raise ValueError(
                f"fit_scale_factors: init names group {gname!r}; the groups are {list(group_map)}"
            )
        start[list(group_map).index(gname)] = float(v)
    theta = jnp.concatenate([jnp.asarray(start), jnp.zeros(3 * len(free))])
    q = model.default_state.q
    wsum = float(np.sum(np.asarray(sqw) ** 2))
    r, J, (q, status, out) = lin(theta, q)
    lam, history, converged, it = 1e-3, [], False, 0
    cost = float(r @ r)
    history.append(math.sqrt(cost / wsum))
    for it in range(1, max_iterations + 1):  # noqa: B007 - the count is reported
        JtJ, g = J.T @ J, J.T @ r
        step = -jnp.linalg.solve(JtJ + lam * (jnp.diag(jnp.diag(JtJ)) + 1e-12 * jnp.eye(len(theta))), g)
        r_n, J_n, aux_n = lin(theta + step, q)
        cost_n = float(r_n @ r_n)
        if np.isfinite(cost_n) and cost_n <= cost:
            theta, r, J, (q, status, out), cost = theta + step, r_n, J_n, aux_n, cost_n
            lam = max(lam / 3, 1e-12)
            history.append(math.sqrt(cost / wsum))
            if float(jnp.max(jnp.abs(step))) <= tol * (1 + float(jnp.max(jnp.abs(theta)))):
                converged = True
                break
        else:
            lam *= 4
            if lam > 1e12:
                break
    F, off = unpack(theta)
    Fn = np.asarray(F)
    return ScaleFit(
        group_factors={g: float(theta[i]) for i, g in enumerate(group_map)},
        factors={n: Fn[b.index].copy() for n, b in model.bodies.items()},
        marker_offsets={n: np.asarray(off[i]) for i, n in enumerate(free)},
        state=out,
        rms_error=history[-1],
        history=history,
        iterations=it,
        converged=converged,
        status=status,
    )


def _pair(x: tuple[Any, Any]) -> tuple[Any, tuple[Any, Any]]:
    r, aux = x
    return r, (r, aux)
