"""``sj.io.load_osim``: OpenSim 3.x and 4.x ``.osim`` models as simjax Systems.

OpenSim builds its Simbody system from the file in a fixed way, and so does this loader:

* every Joint becomes the mobilizer of its child body, with the parent frame as the inboard
  frame F and the child frame as the outboard frame M (frames are PhysicalOffsetFrames given
  by a translation and body-fixed X-Y-Z angles);
* PinJoint → Pin (about z), SliderJoint → Slider (along x), BallJoint → Ball and FreeJoint →
  Free in Euler-angle mode (OpenSim's coordinates are body-fixed X-Y-Z angles and the speeds
  are Simbody's u), UniversalJoint, GimbalJoint, PlanarJoint, EllipsoidJoint, WeldJoint →
  the Simbody kinds of the same name, CustomJoint → ``MobilizedBody.FunctionBased`` with the
  SpatialTransform's six axes and functions;
* CoordinateCouplerConstraint → ``Constraint.CoordinateCoupler`` (``dependent = scale ·
  f(independent)``), WeldConstraint → ``Constraint.Weld``, PointConstraint →
  ``Constraint.Ball``; locked coordinates → ``Constraint.ConstantCoordinate``, prescribed
  ones → ``Constraint.PrescribedMotion``.

Paths (``GeometryPath`` with its points and its ``WrapCylinder``/``WrapSphere``/
``WrapEllipsoid``/``WrapTorus`` wraps),
``PathSpring``, contact and the coordinate actuators and forces are read; what is not
modelled (muscles, other wrap kinds, controllers, probes, ...) is counted in
``model.ignored`` and reported in one warning line.
"""

from __future__ import annotations

import math
import os
import warnings
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .. import _osim_functions as fn
from .. import _spatial as sp
from .._functions import Constant, Linear, Polynomial
from ..dynamics.forces.millard import CURVE_PARAMS as _MILLARD_CURVE_PARAMS
from ..system.bodies import Body, MobilizedBody
from ..system.constraints import Constraint
from ..system.contact import ContactGeometry, ContactSurface, registry
from ..system.forces import Force, HuntCrossleyForce, PathSpring, SmoothSphereHalfSpaceForce
from ..system.matter import SimbodyMatterSubsystem
from ..system.muscles import DeGrooteFregly2016Muscle, Millard2012EquilibriumMuscle, Thelen2003Muscle
from ..system.paths import GeometryPath, WrapCylinder, WrapEllipsoid, WrapSphere, WrapTorus
from ..system.system import GeneralForceSubsystem, MultibodySystem
from ._loaded import Coordinate, LoadedModel, Marker, ModelFileError, VisualGeometry, add_coordinate_limits
from ._paths import ModelFiles, model_folders
from ._xml import XmlDoc, model_folder, read_model_source

FUNCTION_TAGS = (
    "Constant",
    "LinearFunction",
    "PolynomialFunction",
    "SimmSpline",
    "NaturalCubicSpline",
    "PiecewiseLinearFunction",
    "PiecewiseConstantFunction",
    "MultiplierFunction",
    "Sine",
    "GCVSpline",
    "StepFunction",
)

JOINT_KINDS = {
    "WeldJoint": ("Weld", []),
    "PinJoint": ("Pin", ["rotational"]),
    "SliderJoint": ("Slider", ["translational"]),
    "BallJoint": ("Ball", ["rotational"] * 3),
    "FreeJoint": ("Free", ["rotational"] * 3 + ["translational"] * 3),
    "UniversalJoint": ("Universal", ["rotational"] * 2),
    "GimbalJoint": ("Gimbal", ["rotational"] * 3),
    "PlanarJoint": ("Planar", ["rotational", "translational", "translational"]),
    "EllipsoidJoint": ("Ellipsoid", ["rotational"] * 3),
    "CustomJoint": ("FunctionBased", None),
}


_SIGNIFICANT = float(np.finfo(float).eps ** (7 / 8))  # SimTK's "significant" for double


def rotation_body_xyz(angles: np.ndarray) -> np.ndarray:
    """``Rx(a) Ry(b) Rz(c)``: OpenSim's frame orientations (body-fixed X-Y-Z)."""
    a, b, c = (float(x) for x in angles)
    ca, sa, cb, sb, cc, sc = np.cos(a), np.sin(a), np.cos(b), np.sin(b), np.cos(c), np.sin(c)
    Rx = np.array([[1, 0, 0], [0, ca, -sa], [0, sa, ca]])
    Ry = np.array([[cb, 0, sb], [0, 1, 0], [-sb, 0, cb]])
    Rz = np.array([[cc, -sc, 0], [sc, cc, 0], [0, 0, 1]])
    return Rx @ Ry @ Rz


@dataclass
class _X:
    """A rigid transform as NumPy arrays (frame in its parent)."""

    R: np.ndarray = field(default_factory=lambda: np.eye(3))
    p: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def __matmul__(self, other: _X) -> _X:
        return _X(self.R @ other.R, self.R @ other.p + self.p)

    def transform(self) -> sp.Transform:
        return sp.Transform(self.R, self.p)


@dataclass
class _Coord:
    name: str
    el: ET.Element
    default: float = 0.0
    speed: float = 0.0
    range: tuple[float, float] = (-np.inf, np.inf)
    clamped: bool = False
    locked: bool = False
    prescribed: bool = False
    prescribed_fn: Any = None
    motion_type: str | None = None


@dataclass
class _Joint:
    name: str
    kind: str
    el: ET.Element
    parent: tuple[str, _X]
    child: tuple[str, _X]
    coords: list[_Coord]
    axes: list[tuple[list[str], np.ndarray, Any, ET.Element]] = field(default_factory=list)
    radii: np.ndarray | None = None


def load_osim(
    path: str | os.PathLike[str],
    *,
    warn_ignored: bool = True,
    limits: bool = False,
    allow_outside: bool = False,
) -> LoadedModel:
    """Load an OpenSim model (``.osim``, format 3.x or 4.x) as a simjax System.

    Args:
        path: The ``.osim`` file, or the model's XML text (a ``str`` starting with ``<``),
            or an open file.
        warn_ignored: Emit one warning line summarising the parts simjax does not model
            (muscles, actuators, contact, ...); they are always listed in ``model.ignored``.
        limits: Enforce the ranges of ``clamped`` coordinates as hard limits
            (``sj.Constraint.CoordinateLimit``, stepped by ``simulate(...,
            integrator="euler")``). Off by default, as in OpenSim, whose forward dynamics do
            not enforce ``clamped`` (only IK and assembly do; the Assembler's bounds here).
        allow_outside: Accept geometry files anywhere. By default a ``<mesh_file>`` (or 3.x
            ``<geometry_files>``) is looked for in the model's folder, its ``Geometry``
            folder and the ``Geometry`` folder beside it (the working directory's for a
            model given as text) and must lie, symlinks followed, inside the model's folder,
            that sibling ``Geometry`` folder or the package the model lies in (a ROS
            ``package.xml`` or a Python package above it); others (``../x.vtp``, absolute paths
            elsewhere) are left out with one warning and drawn as stand-ins.

    Returns:
        A :class:`LoadedModel`: ``model.system``, ``model.state`` (the default State:
        coordinate default values and speeds, Euler-angle mode, constraints assembled),
        handles by name in ``model.bodies``, ``model.joints``, ``model.coordinates``,
        ``model.markers``, ``model.constraints``. Coordinate values are OpenSim's (radians
        and metres), so ``model.q_from_table(sj.io.read_mot(...))`` applies an OpenSim
        motion.

    Raises:
        FileNotFoundError: The file does not exist.
        ModelFileError: Malformed XML, a DTD or entity declaration, elements nested deeper
            than 500 levels, a file over 256 MB, or an element simjax cannot build (the
            message names the file, line and element).
    """
    name, data = read_model_source(path, "OpenSim model")
    doc = XmlDoc(name, text=data, what="OpenSim model")
    model = _OsimReader(doc, warn_ignored, limits, allow_outside).build()
    if not os.path.isfile(name):  # given as text or a file object: keep it for scale_osim
        model._xml = data.decode("utf-8")
    return model


def _find_file(name: str, dirs: list[str], files: ModelFiles) -> dict[str, Any]:
    """``mesh_file``: ``name`` found in the first of ``dirs`` that has it (as OpenSim looks
    for geometry: the model's folder, then its ``Geometry`` folder); as written when none
    has it (``searched``: those folders), and ``""`` (remembered by ``files`` for its
    warning) when it lies outside ``files``' folders."""
    if not name:
        return {"mesh_file": name}
    cands = [name] if os.path.isabs(name) else [os.path.normpath(os.path.join(d, name)) for d in dirs]
    if not files.allows(cands[0]):  # the file named from the model's folder lies outside
        return {"mesh_file": files.visual(name, cands[0])}
    found = next((c for c in cands if files.allows(c) and os.path.isfile(c)), None)
    if found is not None:
        return {"mesh_file": found}
    searched = () if os.path.isabs(name) else tuple(os.path.normpath(os.path.abspath(d)) for d in dirs)
    return {"mesh_file": name, "searched": searched}


class _OsimReader:
    def __init__(self, doc: XmlDoc, warn: bool = True, limits: bool = False, allow_outside: bool = False):
        self.doc, self.warn, self.limits = doc, warn, limits
        model_dir = model_folder(doc.path)
        self.geometry_dirs = [
            model_dir,
            os.path.join(model_dir, "Geometry"),
            os.path.join(model_dir, "..", "Geometry"),
        ]
        folders = [*model_folders(model_dir), self.geometry_dirs[2]]
        self.files = ModelFiles(doc.path, "load_osim", folders, allow_outside=allow_outside)
        root = doc.root
        if root.tag == "OpenSimDocument":
            try:
                self.version = int(root.get("Version", "40000"))
            except ValueError:
                self.version = 40000
            model = root.find("Model")
        elif root.tag == "Model":
            self.version = 40000
            model = root
        else:
            raise doc.error(
                root, "not an OpenSim model: the root element must be <OpenSimDocument> or <Model>"
            )
        if model is None:
            raise doc.error(root, "no <Model> element inside <OpenSimDocument>")
        self.model = model
        self.old = self.version < 40000 and model.find("JointSet") is None
        self.ignored: Counter[str] = Counter()
        self.notes: list[str] = []
        self.contact_forces: dict[str, Any] = {}
        self.control_ranges: dict[str, tuple[float, float]] = {}
        self.frames: dict[str, tuple[ET.Element, str | None, _X]] = {}  # path -> (el, parent path, X)
        self.body_els: dict[str, ET.Element] = {}
        self.ground_name = "ground"

    # ------------------------------------------------------------------ helpers
    def _set_objects(self, set_tag: str) -> list[ET.Element]:
        s = self.model.find(set_tag)
        if s is None:
            return []
        objs = s.find("objects")
        return list(objs) if objs is not None else []

    def _function(self, owner: ET.Element, wrapper: str) -> Any:
        """The function stored under ``owner`` as ``<wrapper><Kind>`` (3.x) or
        ``<Kind name="wrapper">`` (4.x)."""
        doc = self.doc
        w = owner.find(wrapper)
        if w is not None:
            kids = [
                c
                for c in w
                if c.tag in FUNCTION_TAGS or c.tag.endswith("Function") or c.tag.endswith("Spline")
            ]
            if not kids:
                kids = list(w)
            if not kids:
                raise doc.error(w, f"<{wrapper}> holds no function")
            return self._parse_function(kids[0])
        for c in owner:
            if c.get("name") == wrapper or (c.tag in FUNCTION_TAGS and c.get("name") in (None, "", wrapper)):
                return self._parse_function(c)
        raise doc.error(owner, f"missing the function <{wrapper}>")

    def _parse_function(self, el: ET.Element) -> Any:
        doc, tag = self.doc, el.tag
        if tag == "Constant":
            return Constant(doc.float(el, "value", 0.0))
        if tag == "LinearFunction":
            c = doc.floats(el, "coefficients", default=[1.0, 0.0])
            if c.size != 2:
                raise doc.error(
                    el,
                    f"<coefficients> of a LinearFunction needs 2 numbers (slope, intercept), found {c.size}",
                )
            return Linear(c)
        if tag == "PolynomialFunction":
            return Polynomial(doc.floats(el, "coefficients", default=[0.0]))
        if tag in (
            "SimmSpline",
            "NaturalCubicSpline",
            "PiecewiseLinearFunction",
            "PiecewiseConstantFunction",
        ):
            x, y = doc.floats(el, "x"), doc.floats(el, "y")
            try:
                return getattr(fn, tag)(x, y)
            except ValueError as e:
                raise doc.error(el, str(e)) from None
        if tag == "MultiplierFunction":
            inner = self._function(el, "function")
            return fn.MultiplierFunction(inner, doc.float(el, "scale", 1.0))
        if tag == "Sine":
            return fn.Sine(
                doc.float(el, "amplitude", 1.0),
                doc.float(el, "omega", 1.0),
                doc.float(el, "phase", 0.0),
                doc.float(el, "offset", 0.0),
            )
        raise doc.error(
            el,
            f"function type {tag} is not supported; supported: Constant, LinearFunction, PolynomialFunction, "
            "SimmSpline, NaturalCubicSpline, PiecewiseLinearFunction, PiecewiseConstantFunction, "
            "MultiplierFunction, Sine (refit it as a SimmSpline in OpenSim)",
        )

    # ------------------------------------------------------------------ frames
    def _register(self, el: ET.Element, path: str, parent: str | None, X: _X) -> None:
        self.frames[path] = (el, parent, X)

    def _offset(self, el: ET.Element, owner_path: str) -> None:
        """Register a PhysicalOffsetFrame owned by ``owner_path``."""
        name = el.get("name") or ""
        path = f"{owner_path}/{name}"
        parent = self.doc.text(el, "socket_parent")
        if parent is None:
            raise self.doc.error(el, "a PhysicalOffsetFrame needs <socket_parent> (its parent frame)")
        X = _X(
            rotation_body_xyz(self.doc.floats(el, "orientation", 3, [0, 0, 0])),
            self.doc.floats(el, "translation", 3, [0, 0, 0]),
        )
        self._register(el, path, self._resolve(parent, path, el), X)
        for sub in self._owned_frames(el):
            self._offset(sub, path)

    def _owned_frames(self, el: ET.Element) -> list[ET.Element]:
        out = []
        for cont in ("frames", "components"):
            c = el.find(cont)
            if c is not None:
                out += [f for f in c if f.tag == "PhysicalOffsetFrame"]
        return out

    def _resolve(self, path: str, relative_to: str, el: ET.Element) -> str:
        """An absolute component path for a socket's ``path`` seen from ``relative_to``."""
        path = path.strip()
        if path.startswith("/"):
            return path.rstrip("/") or "/"
        parts = [p for p in relative_to.split("/") if p]
        for seg in path.split("/"):
            if seg in ("", "."):
                continue
            if seg == "..":
                if parts:
                    parts.pop()
            else:
                parts.append(seg)
        return "/" + "/".join(parts)

    def _frame_on_body(self, path: str, el: ET.Element, seen: tuple[str, ...] = ()) -> tuple[str, _X]:
        """``(body name, X_B_frame)`` of the frame at ``path`` (follows offset frames)."""
        entry = self.frames.get(path)
        if entry is None:
            # OpenSim accepts a bare name that is unique in the model.
            tail = path.rstrip("/").split("/")[-1]
            cands = [p for p in self.frames if p.split("/")[-1] == tail]
            if len(cands) == 1:
                entry, path = self.frames[cands[0]], cands[0]
            else:
                raise self.doc.error(
                    el,
                    f"refers to frame {path!r}, which is not in the model"
                    + (f" (ambiguous: {cands})" if cands else "")
                    + "; name a body (/bodyset/NAME), /ground or a PhysicalOffsetFrame",
                )
        fel, parent, X = entry
        if fel.tag in ("Body", "Ground"):
            return fel.get("name") or "", _X()
        if path in seen:
            raise self.doc.error(fel, "PhysicalOffsetFrames refer to each other in a loop")
        body, X_B_parent = self._frame_on_body(parent or "", fel, (*seen, path))
        return body, X_B_parent @ X

    # ------------------------------------------------------------------ geometry
    def _visuals(self, bodies: dict[str, MobilizedBody]) -> list[VisualGeometry]:
        """The bodies' and frames' ``attached_geometry`` (4.x) or ``VisibleObject`` (3.x)."""
        dirs = self.geometry_dirs
        out: list[VisualGeometry] = []
        for path, (el, _, _) in self.frames.items():
            if path == "/ground" and self.old:
                continue
            try:
                body_name, X_B = self._frame_on_body(path, el)
            except ModelFileError:
                continue
            body = bodies.get(body_name if body_name in bodies else self.ground_name)
            if body is None:
                continue
            ag = el.find("attached_geometry")
            for g in ag if ag is not None else ():
                v = self._geometry(g, body, X_B, dirs)
                if v is not None:
                    out.append(v)
            vo = el.find("VisibleObject")
            if vo is not None:
                out += self._visible_object(vo, body, X_B, dirs, path.split("/")[-1])
        return out

    def _appearance(self, g: ET.Element) -> tuple[float, float, float, float] | None:
        """``(r, g, b, opacity)``; None when the geometry is hidden."""
        doc = self.doc
        app = g.find("Appearance")
        if app is None:
            return 1.0, 1.0, 1.0, 1.0
        if (doc.text(app, "visible") or "true").strip().lower() == "false":
            return None
        r, gr, b = doc.floats(app, "color", 3, [1.0, 1.0, 1.0])
        return float(r), float(gr), float(b), doc.float(app, "opacity", 1.0)

    def _geometry(
        self, g: ET.Element, body: MobilizedBody, X_B: _X, dirs: list[str]
    ) -> VisualGeometry | None:
        doc = self.doc
        rgba = self._appearance(g)
        if rgba is None:
            return None
        kw: dict[str, Any] = {"name": g.get("name") or g.tag, "body": body, "R": X_B.R, "p": X_B.p}
        kw["rgba"] = rgba
        kw["scale"] = doc.floats(g, "scale_factors", 3, [1.0, 1.0, 1.0])
        if g.tag == "Mesh":
            return VisualGeometry(
                shape="mesh", **_find_file(doc.text(g, "mesh_file") or "", dirs, self.files), **kw
            )
        if g.tag == "Sphere":
            return VisualGeometry(shape="sphere", size=np.array([doc.float(g, "radius", 1.0), 0, 0]), **kw)
        if g.tag == "Brick":
            return VisualGeometry(shape="box", size=doc.floats(g, "half_lengths", 3, [0.1, 0.1, 0.1]), **kw)
        if g.tag == "Ellipsoid":
            return VisualGeometry(shape="ellipsoid", size=doc.floats(g, "radii", 3, [0.5, 0.5, 0.5]), **kw)
        if g.tag == "Cylinder":  # OpenSim's cylinders lie along y; simjax's along z
            kw["R"] = X_B.R @ rotation_body_xyz(np.array([-np.pi / 2, 0.0, 0.0]))
            size = np.array([doc.float(g, "radius", 0.5), doc.float(g, "half_height", 0.5), 0.0])
            return VisualGeometry(shape="cylinder", size=size, **kw)
        return None  # FrameGeometry, Arrow, LineGeometry, Cone, Torus: decorations, not drawn

    def _visible_object(
        self, vo: ET.Element, body: MobilizedBody, X_B: _X, dirs: list[str], owner: str
    ) -> list[VisualGeometry]:
        """OpenSim 3.x display geometry: ``<geometry_files>`` and ``<GeometrySet>``."""
        doc = self.doc

        def placed(base: _X, el: ET.Element) -> _X:  # <transform>: rX rY rZ (body-fixed) tx ty tz
            t = doc.floats(el, "transform", 6, [0.0] * 6)
            return base @ _X(rotation_body_xyz(t[:3]), t[3:])

        out = []
        X_vo, scale = placed(X_B, vo), doc.floats(vo, "scale_factors", 3, [1.0, 1.0, 1.0])
        for k, f in enumerate((doc.text(vo, "geometry_files") or "").split()):
            out.append(
                VisualGeometry(
                    f"{owner}_geom{k}", body, "mesh", R=X_vo.R, p=X_vo.p, scale=scale,
                    **_find_file(f, dirs, self.files), rgba=(1.0, 1.0, 1.0, 1.0),
                )
            )  # fmt: skip
        gs = vo.find("GeometrySet")
        objs = gs.find("objects") if gs is not None else None
        for dg in objs if objs is not None else ():
            f = doc.text(dg, "geometry_file") or ""
            if dg.tag != "DisplayGeometry" or not f or doc.float(dg, "display_preference", 4.0) == 0:
                continue
            X = placed(X_vo, dg)
            r, g, b = doc.floats(dg, "color", 3, [1.0, 1.0, 1.0])
            out.append(
                VisualGeometry(
                    f"{owner}_{os.path.splitext(f)[0]}", body, "mesh", R=X.R, p=X.p,
                    scale=scale * doc.floats(dg, "scale_factors", 3, [1.0, 1.0, 1.0]),
                    **_find_file(f, dirs, self.files),
                    rgba=(float(r), float(g), float(b), doc.float(dg, "opacity", 1.0)),
                )
            )  # fmt: skip
        return out

    # ------------------------------------------------------------------ reading
    def _read_bodies(self) -> dict[str, sp.MassProperties]:
        doc = self.doc
        masses: dict[str, sp.MassProperties] = {}
        ground = self.model.find("Ground")
        if ground is not None:
            self.ground_name = ground.get("name") or "ground"
            self._register(ground, "/ground", None, _X())
            for f in self._owned_frames(ground):
                self._offset(f, "/ground")
        for b in self._set_objects("BodySet"):
            name = b.get("name")
            if not name:
                raise doc.error(b, "a Body needs a name")
            if name in self.body_els:
                raise doc.error(b, f"a second body named {name!r}; body names must be unique")
            self.body_els[name] = b
            self._register(b, f"/bodyset/{name}", None, _X())
            if self.old and name == "ground":
                self.ground_name = name
                continue
            m = doc.float(b, "mass", 0.0)
            com = doc.floats(b, "mass_center", 3, [0, 0, 0])
            if b.find("inertia") is not None:
                I6 = doc.floats(b, "inertia", 6)
            else:
                # OpenSim's 3.x -> 4.x update passes these through a stream with 6
                # significant digits; do the same so the model matches OpenSim's.
                I6 = np.array(
                    [
                        float(f"{doc.float(b, f'inertia_{k}', 0.0):.6g}")
                        for k in ("xx", "yy", "zz", "xy", "xz", "yz")
                    ]
                )
            if m < 0 or not np.isfinite(m):
                raise doc.error(b, f"mass must be finite and >= 0, found {m}")
            if abs(m) <= _SIGNIFICANT:
                if np.abs(I6).max() > 0:
                    self.notes.append(
                        f"body {name!r} is massless: its inertia is taken as zero (as OpenSim does)"
                    )
                masses[name] = sp.MassProperties(0.0, com, sp.Inertia(0.0))
                continue
            xx, yy, zz, xy, xz, yz = I6
            Ic = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
            Io = Ic + m * (float(com @ com) * np.eye(3) - np.outer(com, com))
            try:  # OpenSim (a release build of Simbody) runs inertias that break the triangle
                # inequality, as some published models have: keep them as they are.
                masses[name] = sp.MassProperties(m, com, Io, strict=False)
            except ValueError as e:
                raise doc.error(b, f"invalid mass properties: {e}") from None
        for name, b in self.body_els.items():
            for f in self._owned_frames(b):
                self._offset(f, f"/bodyset/{name}")
        return masses

    def _read_coordinate(self, c: ET.Element) -> _Coord:
        doc = self.doc
        rng = doc.floats(c, "range", 2, [-10.0, 10.0])  # OpenSim's default range
        co = _Coord(
            name=c.get("name") or "",
            el=c,
            default=doc.float(c, "default_value", 0.0),
            speed=doc.float(c, "default_speed_value", 0.0),
            range=(float(rng[0]), float(rng[1])),
            clamped=doc.bool(c, "clamped", False),
            locked=doc.bool(c, "locked", False),
            prescribed=doc.bool(c, "prescribed", False),
            motion_type=None,  # OpenSim 4 derives it from the joint (3.x files may list one)
        )
        if not co.name:
            raise doc.error(c, "a Coordinate needs a name")
        if co.prescribed:
            pf = c.find("prescribed_function")
            if pf is not None and len(pf):
                co.prescribed_fn = self._parse_function(pf[0])
            else:
                co.prescribed = False
        return co

    def _joint_coords(self, j: ET.Element) -> list[_Coord]:
        if self.old:
            cs = j.find("CoordinateSet/objects")
            els = list(cs) if cs is not None else []
        else:
            cs = j.find("coordinates")
            els = list(cs) if cs is not None else []
        return [self._read_coordinate(c) for c in els if c.tag == "Coordinate"]

    def _read_joints(self) -> list[_Joint]:
        doc = self.doc
        joints: list[_Joint] = []
        if self.old:
            for bname, b in self.body_els.items():
                holder = b.find("Joint")
                if holder is None or not len(holder):
                    continue
                j = holder[0]
                if doc.bool(j, "reverse", False):
                    raise doc.error(
                        j,
                        "reversed joints (<reverse>true</reverse>) are not supported; re-save the "
                        "model in OpenSim 4 with the joint's parent and child swapped",
                    )
                parent = doc.text(j, "parent_body")
                if not parent:
                    raise doc.error(j, "missing <parent_body>")
                if parent not in self.body_els:
                    raise doc.error(j, f"<parent_body> {parent!r} is not a body of the model")
                Xp = _X(
                    rotation_body_xyz(doc.floats(j, "orientation_in_parent", 3, [0, 0, 0])),
                    doc.floats(j, "location_in_parent", 3, [0, 0, 0]),
                )
                Xc = _X(
                    rotation_body_xyz(doc.floats(j, "orientation", 3, [0, 0, 0])),
                    doc.floats(j, "location", 3, [0, 0, 0]),
                )
                joints.append(self._joint(j, (parent, Xp), (bname, Xc)))
        else:
            for j in self._set_objects("JointSet"):
                name = j.get("name") or ""
                jpath = f"/jointset/{name}"
                for f in self._owned_frames(j):
                    self._offset(f, jpath)
            for j in self._set_objects("JointSet"):
                name = j.get("name") or ""
                jpath = f"/jointset/{name}"
                sp_, sc_ = doc.text(j, "socket_parent_frame"), doc.text(j, "socket_child_frame")
                if not sp_ or not sc_:
                    raise doc.error(j, "a joint needs <socket_parent_frame> and <socket_child_frame>")
                pa = self._frame_on_body(self._resolve(sp_, jpath, j), j)
                ch = self._frame_on_body(self._resolve(sc_, jpath, j), j)
                joints.append(self._joint(j, pa, ch))
        return joints

    def _joint(self, j: ET.Element, parent: tuple[str, _X], child: tuple[str, _X]) -> _Joint:
        doc = self.doc
        if j.tag not in JOINT_KINDS:
            raise doc.error(
                j,
                f"joint type {j.tag} is not supported; supported: {', '.join(JOINT_KINDS)}",
            )
        kind, motion = JOINT_KINDS[j.tag]
        coords = self._joint_coords(j)
        jt = _Joint(j.get("name") or "", kind, j, parent, child, coords)
        if motion is not None and len(coords) != len(motion):
            raise doc.error(j, f"a {j.tag} has {len(motion)} coordinates, found {len(coords)}")
        if motion is not None:
            for c, mt in zip(coords, motion, strict=True):
                c.motion_type = mt
        if j.tag == "EllipsoidJoint":
            jt.radii = doc.floats(j, "radii_x_y_z", 3)
        if j.tag == "CustomJoint":
            st = j.find("SpatialTransform")
            if st is None:
                raise doc.error(j, "a CustomJoint needs a <SpatialTransform>")
            axes = {a.get("name"): a for a in st.findall("TransformAxis")}
            names = [c.name for c in coords]
            for k, an in enumerate(
                ("rotation1", "rotation2", "rotation3", "translation1", "translation2", "translation3")
            ):
                a = axes.get(an)
                if a is None:
                    jt.axes.append(([], np.eye(3)[k % 3], Constant(0.0, arg_size=0), st))
                    continue
                cn = (doc.text(a, "coordinates") or "").split()
                for n in cn:
                    if n not in names:
                        raise doc.error(
                            a,
                            f"TransformAxis uses coordinate {n!r}, which is not a coordinate of "
                            f"joint {jt.name!r} (its coordinates: {names})",
                        )
                axis = doc.floats(a, "axis", 3)
                if np.linalg.norm(axis) == 0:
                    raise doc.error(a, "<axis> must not be zero")
                has_fn = a.find("function") is not None or any(c.tag in FUNCTION_TAGS for c in a)
                f = self._function(a, "function") if has_fn else (Linear([1.0, 0.0]) if cn else Constant(0.0))
                if isinstance(f, Constant):
                    f = Constant(float(f.value), arg_size=len(cn))
                elif not cn:
                    f = Constant(float(f(np.zeros(1))), arg_size=0)
                jt.axes.append((cn, axis, f, a))
            # OpenSim: the first axis using a coordinate decides; a linear function of slope
            # +-1 there
            # makes it rotational or translational, any other function coupled.
            for c in coords:
                if c.motion_type is not None:
                    continue
                for k, (cn, _axis, f, _el) in enumerate(jt.axes):
                    if c.name in cn:
                        lin = isinstance(f, Linear) and abs(float(f.coefficients[0])) == 1.0
                        c.motion_type = ("rotational" if k < 3 else "translational") if lin else "coupled"
                        break
                else:
                    c.motion_type = "coupled"
        return jt

    # ------------------------------------------------------------------ building
    def build(self) -> LoadedModel:
        doc = self.doc
        masses = self._read_bodies()
        joints = self._read_joints()

        system = MultibodySystem()
        matter = SimbodyMatterSubsystem(system)
        forces = GeneralForceSubsystem(system)
        g = doc.floats(self.model, "gravity", 3, [0.0, -9.80665, 0.0])
        if np.any(g != 0):
            Force.UniformGravity(forces, matter, g)

        bodies: dict[str, MobilizedBody] = {self.ground_name: matter.Ground()}
        joint_of: dict[str, MobilizedBody] = {}
        coordinates: dict[str, Coordinate] = {}
        by_child: dict[str, _Joint] = {}
        for jt in joints:
            cb = jt.child[0]
            if cb == self.ground_name:
                raise doc.error(
                    jt.el, "a joint's child frame is on ground; simjax needs ground as the parent"
                )
            if cb in by_child:
                raise doc.error(
                    jt.el,
                    f"body {cb!r} is the child of two joints ({by_child[cb].name!r} and "
                    f"{jt.name!r}); close loops with a constraint instead",
                )
            if cb not in masses:
                raise doc.error(jt.el, f"the child frame is on {cb!r}, which is not a body of the model")
            by_child[cb] = jt
        # Bodies without a joint get a free joint to ground, as OpenSim does.
        for name in masses:
            if name not in by_child:
                el = self.body_els[name]
                free_coords = [
                    _Coord(f"{name}_{s}", el, motion_type=mt)
                    for s, mt in zip(
                        ("rx", "ry", "rz", "tx", "ty", "tz"),
                        ["rotational"] * 3 + ["translational"] * 3,
                        strict=True,
                    )
                ]
                by_child[name] = _Joint(
                    f"{name}_free", "Free", el, (self.ground_name, _X()), (name, _X()), free_coords
                )
                self.ignored["missing joint (Free added)"] += 1

        # Parents before children, in the file's order where possible.
        order: list[_Joint] = []
        placed = {self.ground_name}
        pending = list(by_child.values())
        while pending:
            ready = [jt for jt in pending if jt.parent[0] in placed]
            if not ready:
                bad = pending[0]
                raise doc.error(
                    bad.el,
                    f"the parent {bad.parent[0]!r} of joint {bad.name!r} is never connected to "
                    "ground (a loop of joints or a missing joint); close loops with a constraint",
                )
            for jt in ready:
                order.append(jt)
                placed.add(jt.child[0])
            pending = [jt for jt in pending if jt.child[0] not in placed]

        for jt in order:
            parent = bodies[jt.parent[0]]
            X_PF, X_BM = jt.parent[1].transform(), jt.child[1].transform()
            body = Body(masses[jt.child[0]])
            name = jt.child[0]
            mob: MobilizedBody
            if jt.kind == "FunctionBased":
                functions = [a[2] for a in jt.axes]
                cidx = [[[c.name for c in jt.coords].index(n) for n in a[0]] for a in jt.axes]
                mob = MobilizedBody.FunctionBased(
                    parent,
                    X_PF,
                    body,
                    X_BM,
                    n_mobilities=len(jt.coords),
                    functions=functions,
                    coordinate_indices=cidx,
                    axes=[a[1] for a in jt.axes],
                    name=name,
                )
            elif jt.kind == "Ellipsoid":
                mob = MobilizedBody.Ellipsoid(parent, X_PF, body, X_BM, radii=jt.radii, name=name)
            else:
                mob = getattr(MobilizedBody, jt.kind)(parent, X_PF, body, X_BM, name=name)
            bodies[name] = mob
            joint_of[jt.name] = mob

        # Coordinates in the file's order (OpenSim's CoordinateSet order).
        for jt in [*joints, *(j for j in by_child.values() if j not in joints)]:
            mob = bodies[jt.child[0]]
            for k, c in enumerate(jt.coords):
                if c.name in coordinates:
                    raise doc.error(
                        c.el, f"a second coordinate named {c.name!r}; coordinate names must be unique"
                    )
                coordinates[c.name] = Coordinate(
                    name=c.name,
                    body=mob,
                    which=k,
                    motion_type=c.motion_type or "rotational",
                    default_value=c.default,
                    default_speed_value=c.speed,
                    range=c.range,
                    clamped=c.clamped,
                    locked=c.locked,
                    prescribed=c.prescribed,
                    joint=jt.name,
                )

        constraints: dict[str, Any] = {}
        for jt in joints:
            for k, c in enumerate(jt.coords):
                mob = bodies[jt.child[0]]
                if c.prescribed and c.prescribed_fn is not None:
                    constraints[f"{c.name}_prescribed"] = Constraint.PrescribedMotion(
                        matter, c.prescribed_fn, mob, k
                    )
                elif c.locked:
                    constraints[f"{c.name}_locked"] = Constraint.ConstantCoordinate(mob, k, c.default)
        self._read_constraints(matter, bodies, coordinates, constraints)
        markers = self._read_markers(bodies)
        actuators = self._read_forces(forces, coordinates)
        self._count_ignored()
        self._read_contact(matter, forces, bodies)
        paths = self._read_paths(matter, forces, bodies, coordinates)
        muscles = self._read_muscles(forces, paths)
        actuators.update(muscles)
        if self.limits:
            add_coordinate_limits(coordinates, self.notes, select=lambda c: c.clamped)

        state = system.realize_topology()
        state = matter.set_use_euler_angles(state, True)
        q = np.asarray(state.q, dtype=float).copy()
        u = np.asarray(state.u, dtype=float).copy()
        for coord in coordinates.values():
            q[coord.q_index(state)] = coord.default_value
            u[coord.u_index(state)] = coord.default_speed_value
        state = state.with_q(q).with_u(u)
        model = LoadedModel(
            system=system,
            matter=matter,
            forces=forces,
            default_state=state,
            bodies=bodies,
            joints=joint_of,
            coordinates=coordinates,
            markers=markers,
            constraints=constraints,
            actuators=actuators,
            paths=paths,
            muscles=muscles,
            control_ranges=self.control_ranges,
            contact_forces=self.contact_forces,
            ignored=dict(sorted(self.ignored.items())),
            notes=self.notes,
            geometry=self._visuals(bodies),
            path=doc.path,
            source="osim",
        )
        if (self.ignored or self.notes) and self.warn:
            msg = [f"load_osim({doc.name}):"]
            if self.ignored:
                msg.append(
                    "not modelled by simjax (left out): "
                    + ", ".join(f"{n} {k}" for k, n in sorted(self.ignored.items()))
                )
            msg += self.notes
            warnings.warn(" ".join(msg[:1]) + " " + "; ".join(msg[1:]), stacklevel=3)
        self.files.warn(stacklevel=4)
        return model

    def _coord_ref(self, el: ET.Element, name: str, coordinates: dict[str, Coordinate]) -> Coordinate:
        c = coordinates.get(name)
        if c is None:
            raise self.doc.error(
                el,
                f"names coordinate {name!r}, which is not in the model "
                f"(coordinates: {list(coordinates)[:10]}...)",
            )
        return c

    def _read_constraints(self, matter, bodies, coordinates, out) -> None:
        doc = self.doc
        for c in self._set_objects("ConstraintSet"):
            name = c.get("name") or f"constraint{len(out)}"
            if c.find("isEnforced") is not None:
                enabled = doc.bool(c, "isEnforced", True)
            else:
                enabled = not doc.bool(c, "isDisabled", False)
            cpath = f"/constraintset/{name}"
            for f in self._owned_frames(c):
                self._offset(f, cpath)
            con: Constraint
            if c.tag == "CoordinateCouplerConstraint":
                ind = (doc.text(c, "independent_coordinate_names") or "").split()
                dep = (doc.text(c, "dependent_coordinate_name") or "").strip()
                if not ind or not dep:
                    raise doc.error(c, "needs <independent_coordinate_names> and <dependent_coordinate_name>")
                cs = [self._coord_ref(c, n, coordinates) for n in [*ind, dep]]
                f = self._function(c, "coupled_coordinates_function")
                scale = doc.float(c, "scale_factor", 1.0)
                con = Constraint.CoordinateCoupler(
                    matter,
                    fn.CoupledFunction(f, scale, len(ind)),
                    [x.body for x in cs],
                    [x.which for x in cs],
                )
            elif c.tag in ("WeldConstraint", "PointConstraint"):
                if self.old or c.find("body_1") is not None:
                    b1, b2 = doc.text(c, "body_1"), doc.text(c, "body_2")
                    for b in (b1, b2):
                        if b not in bodies:
                            raise doc.error(c, f"names body {b!r}, which is not in the model")
                    X1 = _X(
                        rotation_body_xyz(doc.floats(c, "orientation_body_1", 3, [0, 0, 0])),
                        doc.floats(c, "location_body_1", 3, [0, 0, 0]),
                    )
                    X2 = _X(
                        rotation_body_xyz(doc.floats(c, "orientation_body_2", 3, [0, 0, 0])),
                        doc.floats(c, "location_body_2", 3, [0, 0, 0]),
                    )
                    f1, f2 = (b1, X1), (b2, X2)
                elif c.tag == "WeldConstraint":
                    s1, s2 = doc.text(c, "socket_frame1"), doc.text(c, "socket_frame2")
                    if not s1 or not s2:
                        raise doc.error(c, "a WeldConstraint needs <socket_frame1> and <socket_frame2>")
                    f1 = self._frame_on_body(self._resolve(s1, cpath, c), c)
                    f2 = self._frame_on_body(self._resolve(s2, cpath, c), c)
                else:
                    s1, s2 = doc.text(c, "socket_body_1"), doc.text(c, "socket_body_2")
                    if not s1 or not s2:
                        raise doc.error(c, "a PointConstraint needs <socket_body_1> and <socket_body_2>")
                    b1, X1 = self._frame_on_body(self._resolve(s1, cpath, c), c)
                    b2, X2 = self._frame_on_body(self._resolve(s2, cpath, c), c)
                    p1, p2 = (
                        doc.floats(c, "location_body_1", 3, [0, 0, 0]),
                        doc.floats(c, "location_body_2", 3, [0, 0, 0]),
                    )
                    f1, f2 = (b1, X1 @ _X(p=p1)), (b2, X2 @ _X(p=p2))
                m1, m2 = bodies[f1[0]], bodies[f2[0]]
                if c.tag == "WeldConstraint":
                    con = Constraint.Weld(m1, f1[1].transform(), m2, f2[1].transform())
                else:
                    con = Constraint.Ball(m1, f1[1].p, m2, f2[1].p)
            else:
                self.ignored[c.tag] += 1
                continue
            if not enabled:
                con.set_disabled_by_default(True)
            out[name] = con

    def _read_markers(self, bodies: dict[str, MobilizedBody]) -> dict[str, Marker]:
        doc = self.doc
        markers: dict[str, Marker] = {}
        for m in self._set_objects("MarkerSet"):
            name = m.get("name") or ""
            loc = doc.floats(m, "location", 3, [0, 0, 0])
            if self.old or m.find("body") is not None:
                b = doc.text(m, "body") or ""
                if b not in bodies:
                    raise doc.error(m, f"marker {name!r} is on body {b!r}, which is not in the model")
                body, X = b, _X()
            else:
                s = doc.text(m, "socket_parent_frame")
                if not s:
                    raise doc.error(m, "a Marker needs <socket_parent_frame>")
                body, X = self._frame_on_body(self._resolve(s, f"/markerset/{name}", m), m)
                if body not in bodies:
                    raise doc.error(m, f"marker {name!r} is on {body!r}, which is not a body of the model")
            station = X.R @ loc + X.p
            markers[name] = Marker(name, bodies[body], station, fixed=doc.bool(m, "fixed", False))
        return markers

    #: The ForceSet elements read (the others are counted as left out).
    _FORCES = ("CoordinateActuator", "CoordinateLimitForce", "SpringGeneralizedForce")

    def _read_forces(self, forces: Any, coordinates: dict[str, Coordinate]) -> dict[str, Any]:
        """``CoordinateActuator`` (optimal force x control), ``CoordinateLimitForce`` and
        ``SpringGeneralizedForce`` of the ForceSet; returns the actuators by name."""
        doc = self.doc
        actuators: dict[str, Any] = {}
        for f in self._set_objects("ForceSet"):
            if f.tag not in self._FORCES:
                continue
            name = f.get("name") or f.tag
            c = self._coord_ref(f, doc.text(f, "coordinate") or "", coordinates)
            w = math.pi / 180 if c.motion_type == "rotational" else 1.0  # OpenSim's per-degree units
            made: list[Any] = []
            if f.tag == "CoordinateActuator":
                made.append(
                    Force.CoordinateActuator(
                        forces,
                        c.body,
                        c.which,
                        gain=(doc.float(f, "optimal_force", 1.0), 0.0, 0.0),
                        name=name,
                    )
                )
                actuators[name] = made[0]
                self.control_ranges[name] = (
                    doc.float(f, "min_control", -math.inf),
                    doc.float(f, "max_control", math.inf),
                )
            elif f.tag == "CoordinateLimitForce":
                made.append(
                    Force.CoordinateLimitForce(
                        forces,
                        c.body,
                        c.which,
                        upper_stiffness=doc.float(f, "upper_stiffness", 1.0) / w,
                        upper_limit=doc.float(f, "upper_limit", 0.0) * w,
                        lower_stiffness=doc.float(f, "lower_stiffness", 1.0) / w,
                        lower_limit=doc.float(f, "lower_limit", 0.0) * w,
                        damping=doc.float(f, "damping", 0.001) / w,
                        transition=doc.float(f, "transition", 0.1) * w,
                        name=name,
                    )
                )
            else:  # SpringGeneralizedForce: -(stiffness (q - rest_length) + viscosity qdot)
                k, visc = doc.float(f, "stiffness", 0.0), doc.float(f, "viscosity", 0.0)
                made.append(
                    Force.MobilityLinearSpring(forces, c.body, c.which, k, doc.float(f, "rest_length", 0.0))
                )
                made.append(Force.MobilityLinearDamper(forces, c.body, c.which, visc))
            off = doc.bool(f, "isDisabled", False) or not doc.bool(f, "appliesForce", True)
            for e in made if off else ():
                e.set_disabled_by_default(True)
        return actuators

    # ------------------------------------------------------------------ paths
    def _read_paths(
        self,
        matter: SimbodyMatterSubsystem,
        forces: GeneralForceSubsystem,
        bodies: dict[str, MobilizedBody],
        coordinates: dict[str, Coordinate],
    ) -> dict[str, GeometryPath]:
        """The ``GeometryPath`` of every force that has one (muscles, path actuators,
        ligaments, path springs), named after its force, and each ``PathSpring`` on its
        path: ``PathPoint``,
        ``ConditionalPathPoint`` and ``MovingPathPoint`` on their frames (3.x ``<body>`` or
        4.x ``socket_parent_frame``), and its ``<PathWrapSet>``: each ``PathWrap``'s
        ``wrap_object`` (a ``WrapCylinder``, ``WrapSphere``, ``WrapEllipsoid`` or
        ``WrapTorus`` of a body's ``<WrapObjectSet>``) and ``range``. A path over another kind
        of wrap object, or over an ellipsoid by a ``method`` other than "hybrid", is left out
        (counted by kind): its length would be wrong without it."""
        doc = self.doc
        out: dict[str, GeometryPath] = {}
        wrap_objects: dict[str, Any] = {}  # name -> handle, or the unsupported kind's tag
        for f in self._set_objects("ForceSet"):
            gp = f.find("GeometryPath")
            if gp is None:
                continue
            name = f.get("name") or f.tag
            wraps = gp.find("PathWrapSet/objects")
            path_wraps: list[tuple[Any, tuple[int, int]]] = []
            left_out = None
            for pw in wraps if wraps is not None else ():
                if not wrap_objects:
                    wrap_objects.update(self._read_wrap_objects(matter, bodies))
                wname = (doc.text(pw, "wrap_object") or "").strip()
                if wname not in wrap_objects:
                    raise doc.error(
                        pw,
                        f"the path wrap {pw.get('name')!r} of {name!r} names wrap object {wname!r}, which no "
                        f"body's <WrapObjectSet> has (known: {sorted(wrap_objects)}); fix <wrap_object>",
                    )
                wo = wrap_objects[wname]
                if isinstance(wo, str):
                    left_out = wo
                    break
                method = (doc.text(pw, "method") or "hybrid").strip() or "hybrid"
                if isinstance(wo, WrapEllipsoid) and method != "hybrid":
                    left_out = f"WrapEllipsoid by method {method!r}"
                    break
                if wo is not None:  # None: an inactive wrap object, which OpenSim skips
                    a, b = doc.floats(pw, "range", 2, [-1, -1])
                    path_wraps.append((wo, (int(a), int(b))))
            if left_out is not None:
                self.ignored[f"GeometryPath wrapping over a {left_out} (not modelled yet: left out)"] += 1
                if f.tag == "PathSpring":
                    self.ignored["PathSpring (its path wraps over an unsupported object: left out)"] += 1
                continue
            points = gp.find("PathPointSet/objects")
            if points is None or len(points) < 2:
                raise doc.error(gp, f"the path of {name!r} needs at least two points in <PathPointSet>")
            path = GeometryPath(matter, name)
            base = f"/forceset/{name}/{gp.get('name') or 'path'}"
            for pt in points:
                where = f"path point {pt.get('name')!r} of {name!r}"
                if pt.tag not in ("PathPoint", "ConditionalPathPoint", "MovingPathPoint"):
                    raise doc.error(
                        pt,
                        f"{where}: {pt.tag} is not supported in a path "
                        "(PathPoint, ConditionalPathPoint, MovingPathPoint)",
                    )
                if pt.find("body") is not None:
                    body_name, X = doc.text(pt, "body") or "", _X()
                else:
                    sock = doc.text(pt, "socket_parent_frame")
                    if not sock:
                        raise doc.error(pt, f"{where} needs <socket_parent_frame> (or <body>)")
                    body_name, X = self._frame_on_body(
                        self._resolve(sock, f"{base}/{pt.get('name')}", pt), pt
                    )
                body = bodies.get(body_name if body_name in bodies else self.ground_name)
                if body is None or (body_name not in bodies and body_name != self.ground_name):
                    raise doc.error(pt, f"{where} is on {body_name!r}, which is not a body of the model")
                loc = doc.floats(pt, "location", 3, [0, 0, 0])
                station = X.R @ loc + X.p
                if pt.tag == "PathPoint":
                    path.append_path_point(body, station)
                elif pt.tag == "ConditionalPathPoint":
                    cname = doc.text(pt, "coordinate") or doc.text(pt, "socket_coordinate") or ""
                    coord = self._coord_ref(pt, cname.strip().split("/")[-1], coordinates)
                    path.append_conditional_path_point(body, station, coord, doc.floats(pt, "range", 2))
                else:
                    axes: dict[str, Any] = {}
                    for ax in ("x", "y", "z"):
                        ref = doc.text(pt, f"{ax}_coordinate") or doc.text(pt, f"socket_{ax}_coordinate")
                        if not ref:
                            continue
                        coord = self._coord_ref(pt, ref.strip().split("/")[-1], coordinates)
                        f_loc = self._function(pt, f"{ax}_location")
                        if np.any(X.R != np.eye(3)) or np.any(X.p != 0):
                            raise doc.error(
                                pt,
                                f"{where}: a MovingPathPoint on an offset frame is not supported",
                            )
                        axes[ax] = (f_loc, coord)
                    path.append_moving_path_point(body, station, **axes)
            for wo, rng in path_wraps:
                path.add_path_wrap(wo, rng)
            out[name] = path
            if f.tag == "PathSpring":
                try:
                    spring = PathSpring(
                        forces,
                        path,
                        stiffness=doc.float(f, "stiffness", math.nan),
                        resting_length=doc.float(f, "resting_length", math.nan),
                        dissipation=doc.float(f, "dissipation", math.nan),
                    )
                except ValueError as err:
                    raise doc.error(f, f"{err} (<stiffness>, <resting_length>, <dissipation>)") from None
                if doc.bool(f, "isDisabled", False) or not doc.bool(f, "appliesForce", True):
                    spring.set_disabled_by_default(True)
        return out

    #: DeGrooteFregly2016Muscle's properties read as numbers, with OpenSim's defaults.
    _DGF_PROPERTIES = (
        ("max_isometric_force", 1000.0),
        ("optimal_fiber_length", 0.1),
        ("tendon_slack_length", 0.2),
        ("pennation_angle_at_optimal", 0.0),
        ("max_contraction_velocity", 10.0),
        ("activation_time_constant", 0.015),
        ("deactivation_time_constant", 0.060),
        ("default_activation", 0.5),
        ("default_normalized_tendon_force", 0.5),
        ("active_force_width_scale", 1.0),
        ("fiber_damping", 0.0),
        ("passive_fiber_strain_at_one_norm_force", 0.6),
        ("tendon_strain_at_one_norm_force", 0.049),
        ("activation_dynamics_smoothing", 0.1),
    )

    def _dgf_keywords(self, f: Any) -> dict[str, Any]:
        """A ``<DeGrooteFregly2016Muscle>``'s keyword arguments (``sj.DeGrooteFregly2016Muscle``)."""
        doc = self.doc
        kw: dict[str, Any] = {k: doc.float(f, k, d) for k, d in self._DGF_PROPERTIES}
        for flag in ("ignore_passive_fiber_force", "ignore_tendon_compliance", "ignore_activation_dynamics"):
            kw[flag] = doc.bool(f, flag, False)
        kw["tendon_compliance_dynamics_mode"] = (
            doc.text(f, "tendon_compliance_dynamics_mode") or "explicit"
        ).strip()
        return kw

    #: Thelen2003Muscle's properties read as numbers: (keyword, element, OpenSim's default).
    _THELEN_PROPERTIES = (
        ("max_isometric_force", "max_isometric_force", 1000.0),
        ("optimal_fiber_length", "optimal_fiber_length", 0.1),
        ("tendon_slack_length", "tendon_slack_length", 0.2),
        ("pennation_angle_at_optimal", "pennation_angle_at_optimal", 0.0),
        ("max_contraction_velocity", "max_contraction_velocity", 10.0),
        ("activation_time_constant", "activation_time_constant", 0.015),
        ("deactivation_time_constant", "deactivation_time_constant", 0.050),
        ("fmax_tendon_strain", "FmaxTendonStrain", 0.04),
        ("fmax_muscle_strain", "FmaxMuscleStrain", 0.6),
        ("kshape_active", "KshapeActive", 0.45),
        ("kshape_passive", "KshapePassive", 5.0),
        ("af", "Af", 0.25),
        ("flen", "Flen", 1.4),
        ("fv_linear_extrap_threshold", "fv_linear_extrap_threshold", 0.95),
        ("maximum_pennation_angle", "maximum_pennation_angle", math.acos(0.1)),
        ("minimum_activation", "minimum_activation", 0.01),
        ("default_activation", "default_activation", 0.05),
        ("default_fiber_length", "default_fiber_length", 0.1),
    )

    def _thelen_keywords(self, f: Any) -> dict[str, Any]:
        """A ``<Thelen2003Muscle>``'s keyword arguments (``sj.Thelen2003Muscle``; OpenSim
        4.6 refuses its ``ignore_*`` flags, simjax reads them)."""
        doc = self.doc
        kw: dict[str, Any] = {k: doc.float(f, el, d) for k, el, d in self._THELEN_PROPERTIES}
        for flag in ("ignore_tendon_compliance", "ignore_activation_dynamics"):
            kw[flag] = doc.bool(f, flag, False)
        return kw

    #: Millard2012EquilibriumMuscle's properties read as numbers, with OpenSim's defaults
    #: (``default_fiber_length``: the optimal fibre length).
    _MILLARD_PROPERTIES = (
        ("max_isometric_force", 1000.0),
        ("optimal_fiber_length", 0.1),
        ("tendon_slack_length", 0.2),
        ("pennation_angle_at_optimal", 0.0),
        ("max_contraction_velocity", 10.0),
        ("fiber_damping", 0.1),
        ("default_activation", 0.05),
        ("activation_time_constant", 0.010),
        ("deactivation_time_constant", 0.040),
        ("minimum_activation", 0.01),
        ("maximum_pennation_angle", math.acos(0.1)),
    )

    def _millard_keywords(self, f: Any) -> dict[str, Any]:
        """A ``<Millard2012EquilibriumMuscle>``'s keyword arguments
        (``sj.Millard2012EquilibriumMuscle``), its four curves from their child elements
        (an optional curve property left empty: NaN, OpenSim's fitted value)."""
        doc = self.doc
        kw: dict[str, Any] = {k: doc.float(f, k, d) for k, d in self._MILLARD_PROPERTIES}
        kw["default_fiber_length"] = doc.float(f, "default_fiber_length", kw["optimal_fiber_length"])
        for flag in ("ignore_tendon_compliance", "ignore_activation_dynamics"):
            kw[flag] = doc.bool(f, flag, False)
        curves: dict[str, dict[str, float]] = {}
        for _, tag, prop, default in _MILLARD_CURVE_PARAMS:
            el = f.find(tag)
            curves.setdefault(tag, {})[prop] = default if el is None else doc.float(el, prop, default)
        kw["active_force_length_curve"] = curves["ActiveForceLengthCurve"]
        kw["force_velocity_curve"] = curves["ForceVelocityCurve"]
        kw["fiber_force_length_curve"] = curves["FiberForceLengthCurve"]
        kw["tendon_force_length_curve"] = curves["TendonForceLengthCurve"]
        return kw

    #: The muscle models read: tag -> (handle class, the reader of its element's keyword
    #: arguments). Others are counted as left out.
    _MUSCLE_KINDS: ClassVar[dict[str, tuple[type, str]]] = {
        "DeGrooteFregly2016Muscle": (DeGrooteFregly2016Muscle, "_dgf_keywords"),
        "Thelen2003Muscle": (Thelen2003Muscle, "_thelen_keywords"),
        "Millard2012EquilibriumMuscle": (Millard2012EquilibriumMuscle, "_millard_keywords"),
    }
    _MUSCLES = tuple(_MUSCLE_KINDS)
    #: The forces along paths read by ``_read_paths`` and ``_read_muscles``.
    _PATH_FORCES = ("PathSpring", *_MUSCLES)

    def _read_muscles(self, forces: GeneralForceSubsystem, paths: dict[str, GeometryPath]) -> dict[str, Any]:
        """Each muscle of a model in ``_MUSCLE_KINDS`` of the ForceSet on its path (read by
        ``_read_paths``), with every property (``isDisabled`` / ``appliesForce`` false ->
        disabled by default); a muscle whose path was left out (wrapping) is counted as
        left out. Returns the muscles by name, in the file's order."""
        doc = self.doc
        out: dict[str, Any] = {}
        for f in self._set_objects("ForceSet"):
            if f.tag not in self._MUSCLE_KINDS:
                continue
            name = f.get("name") or f.tag
            path = paths.get(name)
            if path is None:
                self.ignored[f"{f.tag} (its path wraps over an unsupported object: left out)"] += 1
                continue
            cls, reader = self._MUSCLE_KINDS[f.tag]
            try:
                muscle = cls(forces, path, name=name, **getattr(self, reader)(f))
            except (ValueError, NotImplementedError) as err:
                raise doc.error(f, f"{err} (in the file: <{f.tag} name={name!r}>)") from None
            if doc.bool(f, "isDisabled", False) or not doc.bool(f, "appliesForce", True):
                muscle.set_disabled_by_default(True)
            out[name] = muscle
            lo = doc.float(f, "min_control", 0.0)
            if f.tag == "Thelen2003Muscle":
                # OpenSim's floor: the minimum activation (an old file's 0 is dropped on reading)
                lo = max(lo, float(muscle._v["minimum_activation"]))
            self.control_ranges[name] = (lo, doc.float(f, "max_control", 1.0))
        return out

    _WRAPS = {
        "WrapCylinder": WrapCylinder,
        "WrapSphere": WrapSphere,
        "WrapEllipsoid": WrapEllipsoid,
        "WrapTorus": WrapTorus,
    }

    def _read_wrap_objects(
        self, matter: SimbodyMatterSubsystem, bodies: dict[str, MobilizedBody]
    ) -> dict[str, Any]:
        """Every body's (and Ground's) ``<WrapObjectSet>``: ``WrapCylinder``, ``WrapSphere``,
        ``WrapEllipsoid`` and ``WrapTorus`` as handles on their bodies (``xyz_body_rotation``,
        ``translation``, ``quadrant``, ``radius``, ``length``, ``dimensions``,
        ``inner_radius``, ``outer_radius``); an inactive one as None; another kind as its
        tag."""
        doc = self.doc
        owners = list(self.body_els.items())
        ground = self.model.find("Ground")
        if ground is not None:
            owners.append((self.ground_name, ground))
        out: dict[str, Any] = {}
        for body_name, el in owners:
            objs = el.find("WrapObjectSet/objects")
            for w in objs if objs is not None else ():
                wname = w.get("name") or w.tag
                if w.tag not in self._WRAPS:
                    out[wname] = w.tag
                    continue
                if not doc.bool(w, "active", True):
                    out[wname] = None
                    continue
                body = bodies.get(body_name)
                if body is None:
                    raise doc.error(
                        w, f"wrap object {wname!r} is on {body_name!r}, which is not a body of the model"
                    )
                quadrant = (doc.text(w, "quadrant") or "all").strip() or "all"
                quadrant = "all" if quadrant.lower() == "unassigned" else quadrant
                dims: dict[str, Any] = {"radius": doc.float(w, "radius", math.nan)}
                if w.tag == "WrapEllipsoid":
                    dims = {"radii": doc.floats(w, "dimensions", 3, [0.05, 0.05, 0.05])}
                if w.tag == "WrapCylinder":
                    dims["length"] = doc.float(w, "length", 1.0)
                if w.tag == "WrapTorus":  # OpenSim's defaults
                    dims = {
                        "inner_radius": doc.float(w, "inner_radius", 0.01),
                        "outer_radius": doc.float(w, "outer_radius", 0.05),
                    }
                try:
                    out[wname] = self._WRAPS[w.tag](
                        matter,
                        body,
                        **dims,
                        xyz_body_rotation=doc.floats(w, "xyz_body_rotation", 3, [0, 0, 0]),
                        translation=doc.floats(w, "translation", 3, [0, 0, 0]),
                        quadrant=quadrant,
                        name=wname,
                    )
                except ValueError as err:
                    fields = {
                        "WrapCylinder": "<radius>/<length>",
                        "WrapSphere": "<radius>",
                        "WrapEllipsoid": "<dimensions>",
                        "WrapTorus": "<inner_radius>/<outer_radius>",
                    }[w.tag]
                    raise doc.error(w, f"{err} (fix {fields}/<quadrant> of {w.tag} {wname!r})") from None
        return out

    def _count_ignored(self) -> None:
        for set_tag in ("ForceSet", "ControllerSet", "ContactGeometrySet", "ProbeSet", "ComponentSet"):
            for f in self._set_objects(set_tag):
                if set_tag == "ContactGeometrySet" and f.tag in ("ContactSphere", "ContactHalfSpace"):
                    continue  # read by _read_contact
                if set_tag == "ContactGeometrySet" and f.tag == "ContactMesh":
                    self.ignored["ContactMesh (no mesh contact geometry yet: left out)"] += 1
                elif not (
                    set_tag == "ForceSet"
                    and f.tag in (*self._FORCES, *self._CONTACT_FORCES, *self._PATH_FORCES)
                ):
                    self.ignored[f.tag] += 1

    def _read_contact(
        self, matter: SimbodyMatterSubsystem, forces: Any, bodies: dict[str, MobilizedBody]
    ) -> None:
        """``ContactSphere`` and ``ContactHalfSpace`` as contact surfaces on their frames
        (``location``, body-fixed X-Y-Z ``orientation``), named as in the file. They have
        no dynamic pairs (contype = conaffinity = 0): the candidates are the pairs a force
        names, as in OpenSim: every two geometries of one ``HuntCrossleyForce`` (all its
        ContactParameters) on different bodies, and each ``SmoothSphereHalfSpaceForce``'s
        half-space and sphere. Each force becomes a ``sj.HuntCrossleyForce`` or
        ``sj.SmoothSphereHalfSpaceForce`` with every parameter of the file (in
        ``LoadedModel.contact_forces``)."""
        doc = self.doc
        index: dict[str, int] = {}
        for el in self._set_objects("ContactGeometrySet"):
            if el.tag not in ("ContactSphere", "ContactHalfSpace"):
                continue
            name = el.get("name") or f"{el.tag}#{len(index)}"
            frame = el.findtext("socket_frame") or el.findtext("body_name") or el.findtext("body")
            if not frame:
                raise doc.error(
                    el, "a contact geometry needs <socket_frame> (or <body_name>): the frame it is on"
                )
            body_name, X_BF = self._frame_on_body(frame.strip(), el)
            body = bodies.get(body_name if body_name in bodies else self.ground_name)
            if body is None:
                raise doc.error(el, f"contact geometry on {body_name!r}, which is not a body of the model")
            X_FS = _X(
                rotation_body_xyz(doc.floats(el, "orientation", 3, [0, 0, 0])),
                doc.floats(el, "location", 3, [0, 0, 0]),
            )
            if el.tag == "ContactSphere":
                radius = doc.float(el, "radius", 0.0)
                if not radius > 0:
                    raise doc.error(el, f"a ContactSphere needs a positive <radius>, got {radius}")
                geometry = ContactGeometry.Sphere(radius)
            else:
                geometry = ContactGeometry.HalfSpace()
            surface = ContactSurface(geometry, name=name, contype=0, conaffinity=0)
            index[name] = body.add_contact_surface((X_BF @ X_FS).transform(), surface)
        if not index:
            return
        made = 0
        for f in self._set_objects("ForceSet"):
            if f.tag not in self._CONTACT_FORCES:
                continue
            name = f.get("name") or f.tag
            try:
                force = self._contact_force(f, name, forces, matter, index)
            except ValueError as e:
                raise doc.error(f, str(e)) from e
            if force is None:
                continue
            if doc.bool(f, "isDisabled", False) or not doc.bool(f, "appliesForce", True):
                force.set_disabled_by_default(True)
            self.contact_forces[name] = force
            made += 1
        self.notes.append(
            f"{len(index)} contact geometries read and {len(registry(matter).pairs)} pairs named by "
            f"the forces, {made} contact forces (HuntCrossleyForce, SmoothSphereHalfSpaceForce) made"
        )

    #: The contact forces read by ``_read_contact``.
    _CONTACT_FORCES = ("HuntCrossleyForce", "SmoothSphereHalfSpaceForce")
    #: Every ForceSet element some reader makes (the others are counted as left out).
    _READ_FORCES = (*_FORCES, *_CONTACT_FORCES, "PathSpring", *_MUSCLES)

    def _contact_force(
        self, f: ET.Element, name: str, forces: Any, matter: Any, index: dict[str, int]
    ) -> Any:
        """One ``HuntCrossleyForce`` (its transition velocity and each ContactParameters'
        geometry, stiffness, dissipation and frictions) or ``SmoothSphereHalfSpaceForce``
        (its sphere and half-space sockets and its nine properties); None, counted as left
        out, when it names a geometry that was not read."""
        doc = self.doc
        if f.tag == "HuntCrossleyForce":
            blocks = []
            for params in f.iter("HuntCrossleyForce::ContactParameters"):
                names = (params.findtext("geometry") or "").split()
                values = [
                    doc.float(params, k, 0.0)
                    for k in (
                        "stiffness",
                        "dissipation",
                        "static_friction",
                        "dynamic_friction",
                        "viscous_friction",
                    )
                ]
                blocks.append((names, values))
            missing = [g for names, _ in blocks for g in names if g not in index]
            if missing:
                self.ignored[
                    f"HuntCrossleyForce with geometry {missing[0]!r} (unknown or not read: left out)"
                ] += 1
                return None
            hc = HuntCrossleyForce(forces, matter, doc.float(f, "transition_velocity", 0.01), name=name)
            for names, values in blocks:
                for g in names:
                    hc.set_body_parameters(index[g], *values)
            return hc
        ends = [(f.findtext(k) or "").strip().split("/")[-1] for k in ("socket_sphere", "socket_half_space")]
        missing = [g for g in ends if g not in index]
        if missing:
            self.ignored[
                f"SmoothSphereHalfSpaceForce with geometry {missing[0]!r} (unknown or not read: left out)"
            ] += 1
            return None
        defaults = {
            "stiffness": 1.0,
            "dissipation": 0.0,
            "static_friction": 0.0,
            "dynamic_friction": 0.0,
            "viscous_friction": 0.0,
            "transition_velocity": 0.01,
            "constant_contact_force": 1e-5,
            "hertz_smoothing": 300.0,
            "hunt_crossley_smoothing": 50.0,
        }
        props = {k: doc.float(f, k, v) for k, v in defaults.items()}
        return SmoothSphereHalfSpaceForce(forces, matter, index[ends[0]], index[ends[1]], name=name, **props)


_HC_PARAMETERS = ("stiffness", "dissipation", "static_friction", "dynamic_friction", "viscous_friction")
