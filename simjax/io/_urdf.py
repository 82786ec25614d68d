"""URDF reader: links, inertials and joints into a simjax System.

What is read (the ROS URDF specification, http://wiki.ros.org/urdf/XML):

- ``<link>``: its ``<inertial>`` (``<origin xyz rpy>`` is the center of mass and the
  orientation of the frame in which ``<inertia>`` is given, about the center of mass). A
  link without ``<inertial>`` is massless. ``<visual>`` and ``<collision>`` are counted
  and skipped (meshes are never opened).
- ``<joint>``: ``revolute``, ``continuous``, ``prismatic``, ``fixed``, ``floating`` and
  ``planar``, with ``<origin xyz rpy>`` (the joint frame in the parent link's frame; rpy
  is fixed-axis roll-pitch-yaw, ``R = Rz(yaw) Ry(pitch) Rx(roll)``), ``<axis xyz>``
  (default ``1 0 0``, normalized), ``<limit lower upper>`` (a coordinate's range, a hard
  ``CoordinateLimit`` on revolute and prismatic joints unless ``limits=False``) and
  ``<mimic joint multiplier offset>`` (a ``Constraint.CoordinateCoupler``). The child
  link's frame is the joint frame (at zero joint angle).
- ``<dynamics damping>`` of revolute, continuous and prismatic joints: a
  ``Force.MobilityLinearDamper`` (``passive=False`` leaves it out).
- Everything else (``<transmission>``, ``<gazebo>``, joint friction, ...) is
  counted in ``LoadedModel.ignored``; one warning lists what carries physics that simjax
  leaves out.

How joints become mobilizers. Simbody's Pin turns about the common z axis of its F and M
frames and Slider moves along x; a URDF joint turns about (moves along) ``axis``. With
``R_a`` a rotation taking z (x) onto the axis, ``X_PF = X_origin R_a`` and ``X_BM = R_a``
give ``X_PB = X_origin Rot(axis, q)``, so q is the URDF joint value with the URDF's sign.
``fixed`` is a Weld, and the welded link's mass properties are merged into the body it is
welded to (as Pinocchio and MuJoCo merge such links): the Weld's body is massless, and a
massless link's inertia (Bolt's feet) counts as part of that body. A link inertia that is
not positive semi-definite by at most ``_PSD_SLACK`` (1e-6 kg m², round-off in the file:
TIAGo's 1 µg antennas) is clipped to the nearest valid one, with a note. The root link is
welded to Ground, or moved by a Free mobilizer with ``floating_base=True`` (Pinocchio's
``JointModelFreeFlyer``).

Parsing uses the standard library's expat so that every error names the file, the line
and the element.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from .. import _spatial as sp
from .. import system as sj
from ..system.bodies import MobilizedBody
from ._loaded import (
    Coordinate,
    LoadedModel,
    ModelFileError,
    VisualGeometry,
    add_coordinate_limits,
    collect_visuals,
    realize_with_contact,
)
from ._paths import ModelFiles, is_inside, model_folders, path_list
from ._xml import model_folder, parse_with_lines, read_model_source

__all__ = ["load_urdf"]

#: URDF joint types simjax reads, and the number of coordinates each has.
SUPPORTED_JOINTS = {"revolute": 1, "continuous": 1, "prismatic": 1, "fixed": 0, "floating": 6, "planar": 3}
_ROOT_JOINTS = {"fixed": "fixed", "weld": "fixed", "free": "free", "floating": "free", "freeflyer": "free"}
#: Parts of a file that carry no dynamics: counted in ``ignored`` without a warning.
#: (A ``<limit>`` on another joint type carries nothing simjax uses: quiet too.)
_MIMIC_OFF = "<mimic> (mimic=False: loaded independent)"
_QUIET = {"visual", "collision", "material", "safety_controller", "calibration", _MIMIC_OFF}


# ----------------------------------------------------------------------------- XML with line numbers


class _Element:
    """A parsed XML element that remembers the line it starts on."""

    __slots__ = ("tag", "attrib", "children", "line")

    def __init__(self, tag: str, attrib: dict[str, str], line: int):
        self.tag = tag
        self.attrib = attrib
        self.children: list[_Element] = []
        self.line = line

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.attrib.get(key, default)

    def find(self, tag: str) -> _Element | None:
        return next((c for c in self.children if c.tag == tag), None)

    def findall(self, tag: str) -> list[_Element]:
        return [c for c in self.children if c.tag == tag]


class _Doc:
    """A URDF file: its root element and error messages that point into it."""

    def __init__(self, path: str, data: bytes | None = None):
        self.path = path
        self.root = parse_with_lines(
            path, _Element, "a URDF is plain XML: check for unclosed or mismatched tags", data
        )

    def where(self, el: _Element) -> str:
        name = el.get("name")
        tag = f'<{el.tag} name="{name}">' if name is not None else f"<{el.tag}>"
        return f"{self.path}:{el.line}: {tag}"

    def error(self, el: _Element, msg: str) -> ModelFileError:
        return ModelFileError(f"{self.where(el)}: {msg}")

    def name(self, el: _Element) -> str:
        name = el.get("name")
        if not name:
            raise self.error(el, f'<{el.tag}> needs a name attribute, e.g. <{el.tag} name="...">')
        return name

    def floats(self, el: _Element | None, attr: str, n: int, default: Sequence[float] | None) -> np.ndarray:
        """Attribute ``attr`` of ``el`` as ``n`` floats (``default`` when el/attr is absent)."""
        text = None if el is None else el.get(attr)
        if text is None:
            if default is None:
                assert el is not None
                raise self.error(el, f"missing attribute {attr}= ({n} number{'s' if n > 1 else ''})")
            return np.asarray(default, dtype=float)
        assert el is not None
        try:
            v = np.array([float(x) for x in text.split()], dtype=float)
        except ValueError:
            raise self.error(el, f"{attr}={text!r} must be {n} number{'s' if n > 1 else ''}") from None
        if v.size != n or not np.all(np.isfinite(v)):
            raise self.error(el, f"{attr}={text!r} must be {n} finite number{'s' if n > 1 else ''}")
        return v

    def number(self, el: _Element, attr: str, default: float | None) -> float:
        return float(self.floats(el, attr, 1, None if default is None else [default])[0])

    def origin(self, el: _Element) -> tuple[np.ndarray, np.ndarray]:
        """``(R, p)`` of the ``<origin>`` child of ``el`` (identity if absent)."""
        o = el.find("origin")
        p = self.floats(o, "xyz", 3, (0.0, 0.0, 0.0))
        rpy = self.floats(o, "rpy", 3, (0.0, 0.0, 0.0))
        return rpy_to_rotation(rpy), p


# ----------------------------------------------------------------------------- geometry


def rpy_to_rotation(rpy: Sequence[float] | np.ndarray) -> np.ndarray:
    """URDF roll-pitch-yaw (fixed axes X, Y, Z): ``R = Rz(yaw) Ry(pitch) Rx(roll)``."""
    r, p, y = (float(a) for a in rpy)
    cr, sr, cp, spi, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    Rx = np.array([[1.0, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, spi], [0, 1.0, 0], [-spi, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1.0]])
    return Rz @ Ry @ Rx


def align_axis(e: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The smallest rotation taking unit vector ``e`` onto unit vector ``a`` (so
    ``R @ e == a``); exactly the identity when they are equal."""
    c = float(e @ a)
    if c > 1.0 - 1e-15 and np.allclose(e, a, rtol=0, atol=1e-15):
        return np.eye(3)
    if c < -1.0 + 1e-12:  # opposite: half a turn about any axis perpendicular to e
        k = np.cross(e, np.eye(3)[int(np.argmin(np.abs(e)))])
        k /= np.linalg.norm(k)
        return 2.0 * np.outer(k, k) - np.eye(3)
    v = np.cross(e, a)
    K = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
    return np.eye(3) + K + K @ K / (1.0 + c)


# ----------------------------------------------------------------------------- the file, read


class _Link:
    __slots__ = ("el", "name", "mass_props", "mass", "com", "I_com")

    def __init__(
        self,
        el: _Element,
        name: str,
        mass_props: sp.MassProperties,
        inertial: tuple[float, np.ndarray, np.ndarray] | None = None,
    ):
        self.el, self.name, self.mass_props = el, name, mass_props
        # the file's mass, com and inertia about the com (link frame); a massless link's
        # inertia is kept here for merging into the body it is welded to
        m, c, I_c = inertial if inertial is not None else (0.0, np.zeros(3), np.zeros((3, 3)))
        self.mass, self.com, self.I_com = float(m), np.asarray(c, float), np.asarray(I_c, float)


#: A link inertia whose most negative principal moment is at most this (kg m^2) is taken
#: as round-off in the file: clipped to the nearest valid inertia, with a note.
_PSD_SLACK = 1e-6


class _Joint:
    __slots__ = (
        "el",
        "name",
        "type",
        "parent",
        "child",
        "R",
        "p",
        "axis",
        "range",
        "mimic",
        "effort",
        "velocity",
        "damping",
    )

    def __init__(self, el: _Element, name: str, type_: str):
        self.el, self.name, self.type = el, name, type_
        self.parent = self.child = ""
        self.R = np.eye(3)
        self.p = np.zeros(3)
        self.axis = np.array([1.0, 0.0, 0.0])
        self.range = (-math.inf, math.inf)
        self.effort = self.velocity = math.inf
        self.mimic: tuple[str, float, float, _Element] | None = None
        self.damping = 0.0


def _count(ignored: dict[str, int], what: str, n: int = 1) -> None:
    ignored[what] = ignored.get(what, 0) + n


def _read_link(doc: _Doc, el: _Element, ignored: dict[str, int], notes: list[str]) -> _Link:
    name = doc.name(el)
    for c in el.children:
        if c.tag != "inertial":
            _count(ignored, c.tag)
    inertial = el.find("inertial")
    if inertial is None:
        return _Link(el, name, sp.MassProperties(0.0))
    R, com = doc.origin(inertial)
    m_el = inertial.find("mass")
    if m_el is None:
        raise doc.error(inertial, f'link {name!r}: <inertial> needs <mass value="...">')
    mass = doc.number(m_el, "value", None)
    i_el = inertial.find("inertia")
    if i_el is None:
        raise doc.error(inertial, f"link {name!r}: <inertial> needs <inertia ixx ixy ixz iyy iyz izz>")
    ixx, ixy, ixz, iyy, iyz, izz = (
        doc.number(i_el, k, None) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    )
    # <inertia> is about the com, in the inertial frame (rotated by <origin rpy>): re-express in the link.
    I_c = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    I_link = R @ I_c @ R.T
    if mass < 0:
        raise doc.error(m_el, f"link {name!r}: mass must be >= 0, got {mass}")
    if mass == 0:
        # Simbody stores inertia per unit mass: a massless body keeps no inertia (unless it
        # is welded to a massive one: see _merge_welded).
        return _Link(el, name, sp.MassProperties(0.0, com), (0.0, com, I_link))
    I_link = 0.5 * (I_link + I_link.T)
    ev, V = np.linalg.eigh(I_link) if np.all(np.isfinite(I_link)) else (np.zeros(3), np.eye(3))
    if ev.min() < 0 and -ev.min() <= _PSD_SLACK:
        # a negligible violation (TIAGo's 1 ug antenna links: -3.5e-8 kg m^2); Pinocchio runs
        # the file as is: take the nearest valid inertia and say so
        I_link = (V * np.maximum(ev, 0.0)) @ V.T
        notes.append(
            f"link {name!r}: inertia not positive semi-definite by {-ev.min():.2g} kg m^2 "
            f"(<= {_PSD_SLACK:g}): its negative principal moment is taken as 0"
        )
    I_o = I_link + mass * (float(com @ com) * np.eye(3) - np.outer(com, com))
    I_o = 0.5 * (I_o + I_o.T)
    try:
        mp = sp.MassProperties(mass, com, I_o)
    except ValueError as e:
        if "triangle" not in str(e):
            raise doc.error(i_el, f"link {name!r}: invalid inertia ({e})") from None
        # Pinocchio and most simulators run such files; keep the inertia and say so.
        mp = sp.MassProperties(mass, com, I_o, strict=False)
        notes.append(f"link {name!r}: inertia breaks the triangle inequality (kept as in the file)")
    return _Link(el, name, mp, (mass, com, I_link))


def _merge_welded(
    order: list[_Joint], links: dict[str, _Link], ignored: dict[str, int]
) -> dict[str, sp.MassProperties]:
    """Mass properties of each link's body with every link welded to it (fixed joints, to
    any depth) merged in, as Pinocchio and MuJoCo do: the welded links' bodies are then
    massless, and a massless link's inertia (kept by the file, e.g. Bolt's feet) counts
    once it is part of a massive body. Links with nothing welded keep theirs."""
    comp = {n: (lk.mass, lk.com, lk.I_com) for n, lk in links.items()}
    changed: set[str] = set()
    for j in reversed(order):  # children before parents
        if j.type != "fixed":
            continue
        m2, c2, I2 = comp[j.child]
        if m2 == 0 and not np.any(I2):
            continue
        m1, c1, I1 = comp[j.parent]
        c2, I2 = j.p + j.R @ c2, j.R @ I2 @ j.R.T  # into the parent link's frame
        m = m1 + m2
        c = (m1 * c1 + m2 * c2) / m if m > 0 else c1
        d1, d2 = c1 - c, c2 - c
        steiner = lambda mi, d: mi * (float(d @ d) * np.eye(3) - np.outer(d, d))  # noqa: E731
        comp[j.parent] = (m, c, I1 + steiner(m1, d1) + I2 + steiner(m2, d2))
        comp[j.child] = (0.0, np.zeros(3), np.zeros((3, 3)))
        changed |= {j.parent, j.child}
    out = {n: lk.mass_props for n, lk in links.items()}
    for n in links:
        m, c, I_c = comp[n] if n in changed else (links[n].mass, links[n].com, links[n].I_com)
        if m == 0:
            if np.any(I_c):
                _count(ignored, "inertia of a massless link")
            if n in changed:
                out[n] = sp.MassProperties(0.0, c)
            continue
        if n in changed:
            I_o = I_c + m * (float(c @ c) * np.eye(3) - np.outer(c, c))
            out[n] = sp.MassProperties(m, c, 0.5 * (I_o + I_o.T), strict=False)
    return out


def _read_joint(doc: _Doc, el: _Element, ignored: dict[str, int], passive: bool = True) -> _Joint:
    name = doc.name(el)
    jtype = el.get("type")
    if jtype not in SUPPORTED_JOINTS:
        found = "no type attribute" if jtype is None else f"unknown joint type {jtype!r}"
        raise doc.error(el, f"joint {name!r}: {found}; supported types: {', '.join(SUPPORTED_JOINTS)}")
    j = _Joint(el, name, jtype)
    for side in ("parent", "child"):
        s = el.find(side)
        link = None if s is None else s.get("link")
        if not link:
            raise doc.error(el, f'joint {name!r} needs <{side} link="..."/>')
        setattr(j, side, link)
    j.R, j.p = doc.origin(el)
    if jtype in ("revolute", "continuous", "prismatic", "planar"):
        ax = el.find("axis")
        axis = doc.floats(ax, "xyz", 3, (1.0, 0.0, 0.0))
        n = float(np.linalg.norm(axis))
        if n < 1e-12:
            raise doc.error(ax if ax is not None else el, f"joint {name!r}: <axis xyz> must not be zero")
        j.axis = axis / n
    lim = el.find("limit")
    if lim is not None and jtype in ("revolute", "continuous", "prismatic"):
        # effort and velocity (required by the URDF spec; recorded, not enforced)
        j.effort = doc.number(lim, "effort", math.inf)
        j.velocity = doc.number(lim, "velocity", math.inf)
    if lim is not None and jtype in ("revolute", "prismatic"):
        # URDF: lower and upper default to 0 when <limit> is given without them.
        lo, hi = doc.number(lim, "lower", 0.0), doc.number(lim, "upper", 0.0)
        if lo > hi:
            raise doc.error(lim, f"joint {name!r}: lower limit {lo} is above upper limit {hi}")
        j.range = (lo, hi)
    mim = el.find("mimic")
    if mim is not None:
        target = mim.get("joint")
        if not target:
            raise doc.error(mim, f'joint {name!r}: <mimic> needs joint="..." naming the joint it follows')
        j.mimic = (target, doc.number(mim, "multiplier", 1.0), doc.number(mim, "offset", 0.0), mim)
    for c in el.children:
        if c.tag in ("parent", "child", "origin", "axis", "mimic"):
            continue
        if c.tag == "limit":
            if jtype not in ("revolute", "prismatic") and ("lower" in c.attrib or "upper" in c.attrib):
                _count(ignored, f"limit on a {jtype} joint")
            continue
        if c.tag == "dynamics":
            j.damping = doc.number(c, "damping", 0.0)
            if j.damping < 0:
                raise doc.error(c, f"joint {name!r}: damping must be >= 0, got {j.damping}")
            if j.damping and (not passive or jtype not in ("revolute", "continuous", "prismatic")):
                _count(ignored, "joint damping" if not passive else f"damping of a {jtype} joint")
                j.damping = 0.0
            if doc.number(c, "friction", 0.0) != 0.0:
                _count(ignored, "joint friction")
            continue
        _count(ignored, c.tag)
    return j


# ----------------------------------------------------------------------------- the loader


def load_urdf(
    path: str | os.PathLike[str],
    *,
    floating_base: bool = False,
    root_joint: str | None = None,
    gravity: Sequence[float] = (0.0, 0.0, -9.81),
    warn_ignored: bool = True,
    limits: bool = True,
    passive: bool = True,
    mimic: bool = True,
    package_dirs: Sequence[str | os.PathLike[str]] = (),
    allow_outside: bool = False,
) -> LoadedModel:
    """Load a URDF robot as a simjax System (URDF is Z-up: gravity along -z by default).

    Args:
        path: The ``.urdf`` file (plain URDF; run ``xacro`` on ``.xacro`` files first), or
            the URDF text itself (a ``str`` starting with ``<``), or an open file.
            Meshes are never opened; a ``<mesh filename>`` is resolved to a path (for
            ``sj.viz``) only inside the model's folder, the package holding it and the
            ``package_dirs`` (see ``allow_outside``).
        floating_base: Give the root link a ``MobilizedBody.Free`` to Ground (Pinocchio's
            ``JointModelFreeFlyer``: q = [quaternion w, x, y, z, position], u = [angular,
            linear velocity] in Ground) instead of welding it there.
        root_joint: ``"fixed"`` or ``"free"`` (aliases ``"weld"``, ``"floating"``,
            ``"freeflyer"``); overrides ``floating_base``.
        gravity: Gravity vector in Ground (m/s²), a ``Force.UniformGravity``.
        warn_ignored: Emit one warning line summarising what simjax leaves out that carries
            physics (transmissions, gazebo plugins, joint friction, ...); every
            ignored part, visuals and collisions included, is counted in ``model.ignored``.
        limits: Enforce the ``<limit lower upper>`` of revolute and prismatic joints as hard
            limits (``sj.Constraint.CoordinateLimit``, stepped by ``simulate(...,
            integrator="euler")``); each Coordinate's ``limit``. ``False``: the ranges are
            only recorded (and bound the Assembler). Effort and velocity limits are
            recorded on each Coordinate (``effort_limit``, ``velocity_limit``; in
            ``summary()``), not enforced.
        passive: Model ``<dynamics damping>`` of revolute, continuous and prismatic joints
            as ``Force.MobilityLinearDamper`` (``-damping * qdot``). ``False``: leave it out
            (listed as ignored). ``friction`` (Coulomb) is not modelled.
        mimic: Couple each ``<mimic>`` joint to the joint it follows (a
            ``Constraint.CoordinateCoupler``). ``False``: load mimic joints as independent
            joints with no coupler, as Pinocchio's ``buildModelFromUrdf(..., mimic=False)``
            does (counted in ``model.ignored``, without a warning). Disabling the couplers
            in a State (``con.disable(state)``) keeps their rows in every compiled
            program; ``mimic=False`` leaves them out of the System.
        package_dirs: Folders holding ROS packages (each a folder named as the package),
            where ``package://pkg/...`` mesh URIs are looked for before ``ROS_PACKAGE_PATH``
            and the folders above the model's. Meshes in them are accepted.
        allow_outside: Accept mesh files anywhere. By default a mesh a ``<visual>`` names
            must lie (symlinks followed) inside the model file's folder (the working
            directory for URDF text), the package holding the model (the nearest folder above
            it with a ``package.xml``, the top of the Python package it lies in, or the
            ``package://`` package it lies in), a ``package_dirs`` folder or a
            ``ROS_PACKAGE_PATH`` folder; others (``../x.stl``, absolute paths, ``file://``
            URLs elsewhere) are left out with one warning and drawn as stand-ins.

    Returns:
        A :class:`LoadedModel`: ``bodies`` by link name, ``joints`` (the mobilized body of
        each joint's child link) by joint name, one :class:`Coordinate` per revolute,
        continuous or prismatic joint (named as the joint; a planar joint has three,
        ``<name>_rz``, ``<name>_x``, ``<name>_y``), ``constraints`` (the ``<mimic>``
        couplers, by the mimicking joint's name) and the default State (every joint at 0,
        mimic joints at their offset, a floating base at the origin).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ModelFileError: Malformed XML, an unknown joint type, a joint naming a missing link,
            a link with two parent joints, a cycle,
            an invalid inertia, or a joint that moves only massless links (its mass matrix
            would be singular). The message names the file, the line and the element.
    """
    path, data = read_model_source(path, "URDF")
    if root_joint is None:
        root_kind = "free" if floating_base else "fixed"
    else:
        root_kind = _ROOT_JOINTS.get(str(root_joint).lower(), "")
        if not root_kind:
            raise ValueError(
                f"load_urdf: root_joint must be one of {sorted(_ROOT_JOINTS)} or None, got {root_joint!r}"
            )
    doc = _Doc(path, data)
    files = _model_files(path, package_dirs, allow_outside)
    robot = doc.root
    if robot.tag != "robot":
        raise doc.error(robot, f"a URDF file's top element must be <robot>, found <{robot.tag}>")
    _refuse_xacro(doc, robot)

    ignored: dict[str, int] = {}
    notes: list[str] = []
    links: dict[str, _Link] = {}
    joints: dict[str, _Joint] = {}
    for el in robot.children:
        if el.tag == "link":
            link = _read_link(doc, el, ignored, notes)
            if link.name in links:
                first = links[link.name].el.line
                raise doc.error(el, f"duplicate link name {link.name!r} (first on line {first})")
            links[link.name] = link
        elif el.tag == "joint":
            j = _read_joint(doc, el, ignored, passive)
            if j.name in joints:
                first = joints[j.name].el.line
                raise doc.error(el, f"duplicate joint name {j.name!r} (first on line {first})")
            joints[j.name] = j
        else:
            _count(ignored, el.tag)
    if not links:
        raise doc.error(robot, "the robot has no <link>")

    order, root = _tree_order(doc, robot, links, joints)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [float(g) for g in np.asarray(gravity, dtype=float).reshape(3)])

    _check_massive(doc, links, joints, root, root_kind)
    taken = {"ground"}

    def body_name(link: str) -> str:
        n = link if link not in taken else f"{link}_link"
        taken.add(n)
        return n

    bodies: dict[str, MobilizedBody] = {}
    mobod_of_joint: dict[str, MobilizedBody] = {}
    mass_props = _merge_welded(order, links, ignored)
    kind: type[MobilizedBody] = sj.MobilizedBody.Free if root_kind == "free" else sj.MobilizedBody.Weld
    bodies[root] = kind(
        matter.Ground(), sj.Transform(), sj.Body(mass_props[root]), sj.Transform(), name=body_name(root)
    )
    for j in order:
        parent = bodies[j.parent]
        body = sj.Body(mass_props[j.child])
        X_o = (j.R, j.p)
        if j.type in ("revolute", "continuous", "planar"):
            Ra = align_axis(np.array([0.0, 0.0, 1.0]), j.axis)
        elif j.type == "prismatic":
            Ra = align_axis(np.array([1.0, 0.0, 0.0]), j.axis)
        else:
            Ra = np.eye(3)
        X_PF = sj.Transform(R=X_o[0] @ Ra, p=X_o[1])
        X_BM = sj.Transform(R=Ra)
        kind = {
            "revolute": sj.MobilizedBody.Pin,
            "continuous": sj.MobilizedBody.Pin,
            "prismatic": sj.MobilizedBody.Slider,
            "fixed": sj.MobilizedBody.Weld,
            "floating": sj.MobilizedBody.Free,
            "planar": sj.MobilizedBody.Planar,
        }[j.type]
        mob = kind(parent, X_PF, body, X_BM, name=body_name(j.child))
        if j.damping:
            sj.Force.MobilityLinearDamper(forces, mob, 0, j.damping)
        bodies[j.child] = mob
        mobod_of_joint[j.name] = mob

    coordinates: dict[str, Coordinate] = {}
    for j in joints.values():
        mob = mobod_of_joint[j.name]
        if j.type in ("revolute", "continuous", "prismatic"):
            motion = "translational" if j.type == "prismatic" else "rotational"
            limited = math.isfinite(j.range[0]) or math.isfinite(j.range[1])
            coordinates[j.name] = Coordinate(
                j.name, mob, 0, motion, range=j.range, clamped=limited, joint=j.name,
                effort_limit=j.effort, velocity_limit=j.velocity,
            )  # fmt: skip
        elif j.type == "planar":
            planar = (("rz", "rotational"), ("x", "translational"), ("y", "translational"))
            for k, (suffix, motion) in enumerate(planar):
                cn = f"{j.name}_{suffix}"
                coordinates[cn] = Coordinate(cn, mob, k, motion, joint=j.name)

    if mimic:
        constraints = _add_mimics(doc, matter, joints, mobod_of_joint, coordinates, ignored)
    else:
        constraints = {}
        for j in joints.values():
            if j.mimic is not None:  # a fixed joint has nothing to couple, as with mimic=True
                _count(ignored, "mimic on a fixed joint" if j.type == "fixed" else _MIMIC_OFF)
    if limits:
        add_coordinate_limits(coordinates, notes)
    _add_collisions(doc, robot, bodies, ignored)
    state = realize_with_contact(system, matter, ignored)

    model = LoadedModel(
        system=system,
        matter=matter,
        forces=forces,
        default_state=state,
        bodies=bodies,
        joints=mobod_of_joint,
        coordinates=coordinates,
        constraints=constraints,
        ignored=ignored,
        notes=notes,
        geometry=_visuals(doc, robot, bodies, notes, files, [os.fspath(d) for d in package_dirs]),
        path=path,
        source="urdf",
    )
    # The mimic joints' defaults already satisfy their couplers exactly: nothing to assemble.
    model.state = state
    loud = [f"{n} {k}" for k, n in ignored.items() if k not in _QUIET and not k.startswith("limit on")]
    if warn_ignored and (loud or notes):
        msg = f"load_urdf({os.path.basename(path)}):"
        if loud:
            msg += " not modelled and ignored: " + ", ".join(loud)
        warnings.warn("; ".join([msg, *notes]), stacklevel=2)
    files.warn(stacklevel=3)
    return model


def _model_files(
    path: str, package_dirs: Sequence[str | os.PathLike[str]], allow_outside: bool
) -> ModelFiles:
    """The folders a URDF's meshes may lie in: the model's folder and the packages it lies in,
    ``package_dirs`` and ROS_PACKAGE_PATH."""
    folders = [*model_folders(model_folder(path)), *(os.fspath(d) for d in package_dirs)]
    fix = "name the folder holding its package with load_urdf(..., package_dirs=[...]) or ROS_PACKAGE_PATH"
    return ModelFiles(
        path, "load_urdf", [*folders, *path_list("ROS_PACKAGE_PATH")], allow_outside=allow_outside, fix=fix
    )


def resolve_mesh_path(
    filename: str, model_dir: str, package_dirs: Sequence[str] = (), files: ModelFiles | None = None
) -> str:
    """The file a URDF mesh ``filename`` names: ``package://pkg/rest`` is looked for in
    ``package_dirs``, ``ROS_PACKAGE_PATH`` and the model's folder and its ancestors (a
    folder named ``pkg``, or one holding ``pkg``), ``file://`` is a path, anything else is
    relative to the model's folder. Returns ``filename`` unchanged when nothing is found.

    With ``files``, a path outside its folders is refused (``""``, remembered for its
    warning); a package found above the model that holds the model (the model's own
    package) is added to them."""
    if filename.startswith("file://"):
        path = filename[len("file://") :]
        return files.visual(filename, path) if files is not None else path
    if not filename.startswith("package://"):
        path = os.path.normpath(os.path.join(model_dir, filename))
        return files.visual(filename, path) if files is not None else path
    pkg, _, rest = filename[len("package://") :].partition("/")
    roots = [*package_dirs, *path_list("ROS_PACKAGE_PATH")]
    d = os.path.abspath(model_dir)
    while True:
        roots.append(d)
        up = os.path.dirname(d)
        if up == d:
            break
        d = up
    for r in roots:
        for folder in (os.path.join(r, pkg), r if os.path.basename(r) == pkg else ""):
            cand = os.path.join(folder, rest) if folder else ""
            if not cand or not os.path.exists(cand):
                continue
            path = os.path.normpath(cand)
            if files is None:
                return path
            if is_inside(model_dir, folder):  # the package the model lies in
                files.add_folder(folder)
            return files.visual(filename, path)
    return filename


def _visuals(
    doc: _Doc,
    robot: _Element,
    bodies: dict[str, MobilizedBody],
    notes: list[str],
    files: ModelFiles,
    package_dirs: list[str],
) -> list[VisualGeometry]:
    """The links' ``<visual>`` shapes (URDF sizes are full lengths; a cylinder's axis is z)."""
    colors: dict[str, tuple[float, ...]] = {}
    for m in robot.children:
        c = m.find("color") if m.tag == "material" else None
        if c is not None and m.get("name"):
            colors[m.get("name") or ""] = tuple(doc.floats(c, "rgba", 4, (0.7, 0.7, 0.7, 1.0)))
    model_dir = model_folder(doc.path)
    links = [
        (el, bodies[el.get("name") or ""])
        for el in robot.children
        if el.tag == "link" and el.get("name") in bodies
    ]
    makers = (
        partial(_visual, doc, vis, body, f"{body.name}_visual{k}", colors, (model_dir, package_dirs, files))
        for el, body in links
        for k, vis in enumerate(c for c in el.children if c.tag == "visual")
    )
    return collect_visuals(makers, notes, "<visual> element(s)")


#: A ``<collision>`` read as contact geometry (said in the load warning).
_COLLIDING = (
    "collision shape (its contact is detected, matter.find_contacts, but produces no force yet: "
    "bodies pass through each other)"
)


def _add_collisions(
    doc: _Doc, robot: _Element, bodies: dict[str, MobilizedBody], ignored: dict[str, int]
) -> None:
    """Each link's ``<collision>`` box, sphere, cylinder or capsule (URDF sizes are full
    lengths, the axis z; a capsule's ``length`` is its cylinder part's, as MuJoCo reads it)
    as a contact surface with MuJoCo's default properties, named as the element (else
    ``<link>_collision<k>``); meshes are left out (counted)."""
    for el in robot.children:
        if el.tag != "link" or el.get("name") not in bodies:
            continue
        body = bodies[el.get("name") or ""]
        for k, col in enumerate(c for c in el.children if c.tag == "collision"):
            geo = col.find("geometry")
            shape_el = None if geo is None else next(iter(geo.children), None)
            tag = "" if shape_el is None else shape_el.tag
            if shape_el is None or tag not in ("box", "sphere", "cylinder", "capsule", "mesh"):
                _count(ignored, "collision without a box, sphere, cylinder, capsule or mesh (left out)")
                ignored["collision"] -= 1
                continue
            try:
                if tag == "box":
                    geometry = sj.ContactGeometry.Box(doc.floats(shape_el, "size", 3, None) / 2)
                elif tag == "sphere":
                    geometry = sj.ContactGeometry.Sphere(doc.number(shape_el, "radius", None))
                elif tag in ("cylinder", "capsule"):
                    r, length = doc.number(shape_el, "radius", None), doc.number(shape_el, "length", None)
                    make = sj.ContactGeometry.Cylinder if tag == "cylinder" else sj.ContactGeometry.Capsule
                    geometry = make(r, length / 2)
            except ModelFileError:  # a missing or malformed size: the file loads as before
                _count(ignored, "collision shape with a missing or malformed size (left out)")
                ignored["collision"] -= 1
                continue
            except ValueError:  # a zero size: Pinocchio loads the file, the shape cannot touch
                _count(ignored, "collision shape of zero size (left out)")
                ignored["collision"] -= 1
                continue
            if tag == "mesh":
                _count(ignored, "collision mesh (no mesh contact geometry yet: left out)")
                ignored["collision"] -= 1
                continue
            name = col.get("name") or f"{body.name}_collision{k}"
            body.add_contact_surface(sj.Transform(*doc.origin(col)), sj.ContactSurface(geometry, name=name))
            ignored["collision"] -= 1
            _count(ignored, _COLLIDING)
    if ignored.get("collision") == 0:
        del ignored["collision"]


def _visual(
    doc: _Doc,
    vis: _Element,
    body: MobilizedBody,
    default_name: str,
    colors: dict[str, tuple[float, ...]],
    mesh_dirs: tuple[str, list[str], ModelFiles],
) -> VisualGeometry | None:
    """One ``<visual>``; ``mesh_dirs``: the model's folder, the ``package_dirs`` and the
    folders its mesh files may lie in (``resolve_mesh_path``'s arguments)."""
    R, p = doc.origin(vis)
    geo = vis.find("geometry")
    shape_el = None if geo is None else next(iter(geo.children), None)
    if shape_el is None:
        raise doc.error(vis, "a <visual> needs a <geometry> with a box, cylinder, sphere or mesh")
    rgba: tuple[float, ...] = (0.7, 0.7, 0.7, 1.0)
    mat = vis.find("material")
    if mat is not None:
        c = mat.find("color")
        named = colors.get(mat.get("name") or "", rgba)
        rgba = tuple(doc.floats(c, "rgba", 4, None)) if c is not None else named
    kw: dict[str, Any] = {"name": vis.get("name") or default_name, "body": body, "R": R, "p": p}
    kw["rgba"] = tuple(float(x) for x in rgba)
    tag = shape_el.tag
    if tag == "box":
        return VisualGeometry(shape="box", size=doc.floats(shape_el, "size", 3, None) / 2, **kw)
    if tag == "sphere":
        radius = doc.number(shape_el, "radius", None)
        return VisualGeometry(shape="sphere", size=np.array([radius, 0.0, 0.0]), **kw)
    if tag in ("cylinder", "capsule"):
        r, length = doc.number(shape_el, "radius", None), doc.number(shape_el, "length", None)
        return VisualGeometry(shape=tag, size=np.array([r, length / 2, 0.0]), **kw)
    if tag == "mesh":
        fname = shape_el.get("filename")
        if not fname:
            raise doc.error(shape_el, '<mesh> needs filename="..."')
        scale = doc.floats(shape_el, "scale", 3, (1.0, 1.0, 1.0))
        path = resolve_mesh_path(fname, *mesh_dirs)
        return VisualGeometry(shape="mesh", mesh_file=path, scale=scale, **kw)
    raise doc.error(shape_el, f"unknown visual geometry <{tag}> (box, cylinder, sphere, capsule or mesh)")


def _refuse_xacro(doc: _Doc, robot: _Element) -> None:
    stack = [robot]
    while stack:
        el = stack.pop()
        if el.tag.startswith("xacro:"):
            raise doc.error(
                el,
                "this is a xacro template, not a URDF; expand it first: xacro model.urdf.xacro > model.urdf",
            )
        stack.extend(el.children)


def _tree_order(
    doc: _Doc, robot: _Element, links: dict[str, _Link], joints: dict[str, _Joint]
) -> tuple[list[_Joint], str]:
    """Joints parents-first (depth-first, children in file order) and the root link."""
    parent_joint: dict[str, _Joint] = {}
    children: dict[str, list[_Joint]] = {n: [] for n in links}
    for j in joints.values():
        for side, link in (("parent", j.parent), ("child", j.child)):
            if link not in links:
                raise doc.error(j.el, f"joint {j.name!r}: {side} link {link!r} is not a <link> of this robot")
        if j.parent == j.child:
            raise doc.error(j.el, f"joint {j.name!r} joins link {j.child!r} to itself")
        if j.child in parent_joint:
            other = parent_joint[j.child]
            raise doc.error(
                j.el,
                f"link {j.child!r} has two parent joints, {other.name!r} (line {other.el.line}) and "
                f"{j.name!r}; a URDF must be a tree (close loops with a constraint after loading)",
            )
        parent_joint[j.child] = j
        children[j.parent].append(j)
    roots = [n for n in links if n not in parent_joint]
    if len(roots) != 1:
        if not roots:
            raise doc.error(robot, "no root link: every link has a parent joint, so the joints form a cycle")
        raise doc.error(
            robot,
            f"a URDF needs exactly one root link (one without a parent joint); found {len(roots)}: "
            f"{roots[:6]}; connect them with joints",
        )
    order: list[_Joint] = []
    stack = list(reversed(children[roots[0]]))
    while stack:
        j = stack.pop()
        order.append(j)
        stack.extend(reversed(children[j.child]))
    if len(order) != len(joints):
        seen = {j.name for j in order}
        cyc = [j for j in joints.values() if j.name not in seen]
        raise doc.error(
            cyc[0].el,
            f"joints {[j.name for j in cyc][:8]} form a cycle not connected to the root link "
            f"{roots[0]!r}; a URDF must be a tree",
        )
    return order, roots[0]


def _check_massive(
    doc: _Doc, links: dict[str, _Link], joints: dict[str, _Joint], root: str, root_kind: str
) -> None:
    """Every moving joint must carry some mass (else the mass matrix is singular)."""
    kids: dict[str, list[str]] = {n: [] for n in links}
    for j in joints.values():
        kids[j.parent].append(j.child)
    memo: dict[str, float] = {}

    def subtree_mass(link: str) -> float:
        # iterative post-order (deep chains must not hit the recursion limit)
        stack = [(link, False)]
        while stack:
            n, done = stack.pop()
            if n in memo:
                continue
            if done:
                memo[n] = links[n].mass_props.mass + sum(memo[c] for c in kids[n])
            else:
                stack.append((n, True))
                stack.extend((c, False) for c in kids[n] if c not in memo)
        return memo[link]

    for j in joints.values():
        if j.type != "fixed" and subtree_mass(j.child) == 0.0:
            raise doc.error(
                j.el,
                f"{j.type} joint {j.name!r} moves only massless links (link {j.child!r} and its "
                "descendants have no <inertial> mass), so the mass matrix would be singular; give one "
                "of them an <inertial> or make the joint fixed",
            )
    if root_kind == "free" and subtree_mass(root) == 0.0:
        raise doc.error(links[root].el, f"floating base: the robot (root link {root!r}) has no mass")


def _add_mimics(
    doc: _Doc,
    matter: Any,
    joints: dict[str, _Joint],
    mobods: dict[str, MobilizedBody],
    coordinates: dict[str, Coordinate],
    ignored: dict[str, int],
) -> dict[str, Any]:
    """One ``CoordinateCoupler`` per ``<mimic>``: ``q_self = multiplier * q_joint + offset``;
    the mimicking joints' default q is set so the default State satisfies them."""
    one_dof = ("revolute", "continuous", "prismatic")
    mimics: dict[str, tuple[str, float, float, _Element]] = {}
    for j in joints.values():
        if j.mimic is None:
            continue
        target, mult, off, el = j.mimic
        if target not in joints:  # Pinocchio warns and loads the joint as independent
            warnings.warn(
                f"{doc.where(el)}: joint {j.name!r} mimics joint {target!r}, which is not a joint "
                f"of this robot ({len(joints)} joints); {j.name!r} is loaded as an independent "
                "joint (as Pinocchio loads it). Fix the <mimic> to couple them",
                stacklevel=4,
            )
            _count(ignored, "<mimic> naming a missing joint (loaded independent)")
            continue
        if j.type == "fixed":
            _count(ignored, "mimic on a fixed joint")
            continue
        if j.type not in one_dof:
            raise doc.error(el, f"joint {j.name!r}: <mimic> needs a one-coordinate joint, not {j.type}")
        if target == j.name:
            raise doc.error(el, f"joint {j.name!r} mimics itself")
        if joints[target].type not in one_dof:
            raise doc.error(
                el,
                f"joint {j.name!r} mimics joint {target!r}, a {joints[target].type} joint; the followed "
                "joint must be revolute, continuous or prismatic",
            )
        mimics[j.name] = (target, mult, off, el)

    # Default q of the followers (chains of mimics resolved, cycles refused).
    value: dict[str, float] = {}

    def default(name: str, seen: tuple[str, ...] = ()) -> float:
        if name in value:
            return value[name]
        if name in seen:
            raise doc.error(mimics[name][3], f"<mimic> joints follow each other in a cycle: {list(seen)}")
        if name not in mimics:
            return 0.0
        target, mult, off, _ = mimics[name]
        value[name] = mult * default(target, (*seen, name)) + off
        return value[name]

    out: dict[str, Any] = {}
    for name, (target, mult, off, _) in mimics.items():
        q0 = default(name)
        if q0 != 0.0:
            mobods[name].set_default_q([q0])
            coordinates[name].default_value = q0

        def f(x, m=mult, o=off):
            return m * x[0] + o - x[1]

        out[name] = sj.Constraint.CoordinateCoupler(matter, f, [mobods[target], mobods[name]], [0, 0])
    return out
