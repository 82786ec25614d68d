"""MJCF reader: MuJoCo's bodies, inertias, joints and equalities into a simjax System.

What is read (MuJoCo's XML reference, https://mujoco.readthedocs.io/en/stable/XMLreference.html),
and computed the way MuJoCo's compiler does it (``user_objects.cc``), so that the mass matrix
and the unconstrained forward dynamics equal MuJoCo's ``mj_fullM`` and ``qacc`` (contacts and
constraints left out; joint damping, springs, armature and joint actuators in):

- ``<include file>``: the included file's ``<mujoco>`` children replace the element (the file
  is looked up next to the including file, then next to the main file).
- ``<compiler>``: ``angle`` (``degree`` by default: ``euler``, ``axisangle``, hinge
  ``range`` and ``ref`` are in degrees), ``eulerseq`` (lower case: axes that move with the
  frame, post-multiplied; upper case: fixed axes, pre-multiplied), ``inertiafromgeom``
  (``auto``: from the geoms when a body has no ``<inertial>``; ``true``: always; ``false``:
  never), ``inertiagrouprange``, ``boundmass``, ``boundinertia``, ``balanceinertia``,
  ``settotalmass``, ``autolimits`` and ``alignfree``.
- ``<option gravity>`` (default ``0 0 -9.81``) and ``<flag gravity="disable">``.
- ``<default>`` classes (nested; ``class=`` on an element, ``childclass`` on bodies and
  frames) for ``joint``, ``geom``, ``site`` and ``equality``.
- ``<body>`` frames: ``pos`` and one of ``quat``, ``axisangle``, ``xyaxes``, ``zaxis``,
  ``euler``; ``<frame>`` elements compose onto what they hold.
- ``<inertial pos quat mass diaginertia | fullinertia>``; without it (or with
  ``inertiafromgeom="true"``) mass and inertia come from the geoms: sphere, capsule,
  ellipsoid, cylinder and box, solid or ``shellinertia``, ``density`` (default 1000) or
  ``mass``, ``fromto``; mesh geoms from their ``<asset><mesh>`` (binary STL, OBJ, MSH or
  inline ``vertex``/``face``; ``scale``, ``refpos``, ``refquat``, ``inertia`` legacy, exact,
  convex or shell; ``<compiler meshdir assetdir>``), and primitive geoms fitted to a mesh
  (its inertia box, or with ``fitaabb`` its bounding box; ``fitscale``), computed as
  MuJoCo's compiler does (:mod:`simjax.io._mesh`). Height fields are refused in a moving
  body (give it an ``<inertial>``); a body welded to the world reads no mesh (it does not
  move; a note says so).
- ``<joint>`` ``hinge``, ``slide``, ``ball``, ``free`` (and ``<freejoint>``), with ``axis``,
  ``pos``, ``ref``, ``range``/``limited`` (a Coordinate's range, enforced as a hard
  ``CoordinateLimit`` unless ``load_mjcf(..., limits=False)``).
  Mocap bodies are welded where the file puts them.
- ``<site>``: a :class:`Marker` on its body (``model.markers``).
- ``<equality>``: ``connect`` → ``Constraint.Ball``, ``weld`` → ``Constraint.Weld``,
  ``joint`` → ``Constraint.CoordinateCoupler`` (``polycoef``), ``tendon`` on fixed tendons →
  ``Constraint.CoordinateCoupler`` on their joints (``polycoef``; on a spatial tendon
  without ``contact=True`` it is left out and named in the warning); ``active="false"`` →
  disabled by default. With ``contact=True``, joint, tendon (fixed or spatial) and connect
  equalities are MuJoCo's soft equality rows instead (below); weld is refused there
  (``NotImplementedError``).
- ``<joint damping stiffness springref>``: ``Force.MobilityLinearDamper`` on each of the
  joint's dofs and ``Force.MobilityLinearSpring`` (hinge and slide), as MuJoCo's passive
  forces (``passive=False`` leaves them out); ``springdamper="timeconst dampratio"`` sets
  them from the joint's inertia at qpos0, as MuJoCo's compiler does.
- ``<joint armature>``: added to the mass matrix's diagonal at the joint's speeds
  (``MobilizedBody.set_default_armature``), as MuJoCo does.
- ``<actuator>``: ``motor``, ``position`` (``kp``, ``kv``, ``timeconst``), ``velocity``,
  ``intvelocity``, ``damper`` and ``general`` (``gaintype``/``biastype`` fixed or affine,
  ``dyntype`` none, integrator, filter or filterexact; muscle below) on a hinge or slide joint (``joint`` or
  ``jointinparent``), with ``gear``, ``ctrlrange``/``ctrllimited``, ``forcerange``/
  ``forcelimited``, ``actrange``/``actlimited``, ``inheritrange`` (the control range, or an
  ``intvelocity``'s activation range, is the joint's ``range`` scaled about its midpoint, as
  MuJoCo's compiler sets it) and default classes, each a
  ``Force.CoordinateActuator`` whose control is in the State (``model.actuators``, in the
  file's order; ``<flag actuation="disable">`` disables them); the same on a tendon
  (``tendon=``) is a ``Force.TendonActuator`` (length and velocity the tendon's times
  ``gear``, force along the tendon; no ``inheritrange``).
- MuJoCo's muscles: ``<muscle>`` (``timeconst``, ``tausmooth``, ``range``, ``force``,
  ``scale``, ``lmin``, ``lmax``, ``vmax``, ``fpmax``, ``fvmax``, set onto ``gainprm``/
  ``biasprm``/``dynprm`` as ``mjs_setToMuscle`` sets them) and ``<general>`` with
  ``gaintype``/``biastype``/``dyntype="muscle"``, on joints and tendons: MuJoCo's
  force-length-velocity gain, passive bias and activation dynamics (smooth with
  ``tausmooth``). The compiler's ``actuator_acc0`` (``force="-1"``: ``scale / acc0``) is
  computed at qpos0; the length range is ``lengthrange`` when given (``<compiler><lengthrange
  useexisting>``), or with ``uselimit="true"`` the limited joint's or tendon's ``range``
  (as MuJoCo copies it); a muscle whose length range MuJoCo's compiler would find by
  simulation (``mj_setLengthRange``) is left out and named in the warning (give it
  ``lengthrange``). MuJoCo's compiler checks (range[0] < range[1], lmin < 1 < lmax,
  positive scale, vmax, fpmax, fvmax, tausmooth >= 0) are errors naming the actuator.
- Not modelled: an actuator on a site, body or ball/free joint, a cylinder or adhesion
  actuator, ``dampratio``, ``actearly``, an actuator's own ``damping``, ``armature`` or
  ``delay``, and any attribute simjax does not know: the warning names each one (attributes
  that do not change the dynamics, such as ``group`` or ``user``, are accepted; so is
  ``lengthrange`` on an actuator that is not a muscle).

- Contact (``load_mjcf(..., contact=True)``): MuJoCo's soft constraint rows for the
  colliding geoms (``condim``, ``friction``, ``solref``/``solimp``, ``margin``/``gap``,
  ``priority``/``solmix`` mixing, ``<pair>``, ``<exclude>``, ``filterparent``) and for the
  limited hinge and slide joints (``solreflimit``, ``solimplimit``, ``margin``), ``<option
  timestep cone impratio iterations>`` and ``<flag contact limit refsafe>``, solved as
  MuJoCo's primal problem by Newton's method (``simjax.constraints.soft``): ``udot``
  equals MuJoCo's ``qacc`` with contacts and limits active. The rows' regulariser uses
  MuJoCo's ``body_invweight0``/``dof_invweight0`` at ``qpos0``, with its shortcut for
  "simple" slide-only bodies (``1/mass``). ``<equality><joint>`` and ``<equality><tendon>``
  are MuJoCo's equality rows (one each: ``x1 - x1(qpos0) - polycoef(x2 - x2(qpos0))`` with
  x a joint's q or a tendon's length; ``solref``/``solimp`` per equality and its default
  class; regulariser from the two objects' ``dof_invweight0``/``tendon_invweight0``;
  two-sided, always active); ``<equality><connect>`` (bodies and anchor, or sites) is
  MuJoCo's three rows (the anchors' difference in Ground, the translational
  ``body_invweight0`` of the two bodies, impedance at the distance, and MuJoCo 4's ``dJ/dt
  qvel`` in ``aref``); ``active="false"`` and ``<flag equality="disable">`` give no row, as
  in MuJoCo.
  Geom pairs with a collision kernel
  (:mod:`simjax.dynamics.collision`): plane with sphere, capsule, ellipsoid, cylinder and
  box; sphere with sphere, capsule, cylinder and box; capsule with capsule and box; box
  with box. Other colliding pairs (ellipsoids with anything but a plane, cylinders with
  capsules, cylinders and boxes, meshes: MuJoCo's general convex collider) are left out
  and named in the warning.

- ``<tendon>``: ``<fixed>`` (``<joint joint coef>`` on hinge and slide joints) and
  ``<spatial>`` (``<site>``, ``<geom>`` wraps on spheres and cylinders with ``sidesite``,
  ``<pulley divisor>``) as ``sj.Tendon`` handles (``model.tendons``), with ``stiffness``,
  ``springlength`` (-1: the length at ``qpos_spring``; two values: a deadband) and
  ``damping`` as ``sj.TendonSpringDamper`` (``passive=True``); ``default`` classes. Not
  modelled, and named in the warning: tendon ``frictionloss``, ``armature``, and without
  ``contact=True`` ``<equality><tendon>`` on a spatial tendon and limits (``range``) (with
  it, tendon equalities are MuJoCo's soft equality rows and a limited tendon has its soft
  limit rows: ``solreflimit``, ``solimplimit``, ``margin``, ``tendon_invweight0``).

Everything else (sensors, joint stiffness of ball and
free joints, friction loss, gravity compensation, fluid forces, weld ``torquescale``,
keyframes, cameras, lights, assets, ...) is counted in ``LoadedModel.ignored``; one warning
lists what carries physics that simjax leaves out. ``<composite>``, ``<flexcomp>``,
``<replicate>`` and ``<attach>`` are refused (save MuJoCo's expanded XML first).

How MuJoCo bodies become mobilized bodies. MuJoCo places a body at ``pos``/``quat`` in its
parent and then applies its joints in order, each about (along) its own axis through its own
``pos``, all in the body frame. A body with no joint is a Weld; a ``free`` joint is a
``MobilizedBody.Free`` on Ground; one hinge, slide or ball joint is a Pin, Slider or Ball;
several joints are a chain of such mobilizers through massless intermediate bodies (named
``"<body>/<joint>"``), the last one carrying the body. A hinge's Pin has
``X_PF = X_body T(pos) R_a Rz(-ref)`` and ``X_BM = T(pos) R_a`` with ``R_a`` taking z onto
the axis, so q *is* MuJoCo's qpos (``ref`` included) and u its qvel; a slide likewise.

simjax's q and u against MuJoCo's qpos and qvel, joint by joint:

- hinge, slide: the same numbers (one :class:`Coordinate` per joint, named as the joint);
- ball: q = qpos (quaternion w, x, y, z); u is the angular velocity in the parent-side frame
  F, MuJoCo's qvel is the same vector in the body frame: ``qvel = R_FM^T u``;
- free: q = [quaternion, position] while qpos = [position, quaternion]; u = [w, v] in
  Ground while qvel = [v in world, w in the body frame]: ``qvel = [u[3:], R^T u[:3]]``.

Ball and free joints have no :class:`Coordinate`; find their mobilized body in
``model.joints``. Unnamed bodies, joints, sites and equalities are named ``"body#<id>"``,
``"joint#<id>"``, ``"site#<id>"``, ``"<tag>#<id>"`` with MuJoCo's id (file order). The
world body is in ``model.bodies`` as ``"world"`` (Ground).

Parsing uses the standard library's expat so that every error names the file, the line and
the element. The reader never imports ``mujoco``.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import numpy as np

from .. import _spatial as sp
from .. import system as sj
from .._stage import Stage
from ..constraints import soft
from ..model.contact import MujocoConstraintOptions
from ..system.bodies import MobilizedBody
from ._loaded import (
    Coordinate,
    LoadedModel,
    Marker,
    ModelFileError,
    VisualGeometry,
    add_coordinate_limits,
    collect_visuals,
    realize_with_contact,
)
from ._mesh import INERTIA_KINDS, MeshInertia, mesh_inertia, quat_to_rot, read_mesh
from ._paths import ModelFiles, model_folders
from ._urdf import align_axis
from ._xml import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_INCLUDES,
    model_folder,
    parse_with_lines,
    read_bounded,
    read_model_source,
)

__all__ = ["load_mjcf"]

#: MJCF joint types simjax reads, and their numbers of qpos and qvel.
SUPPORTED_JOINTS = {"hinge": (1, 1), "slide": (1, 1), "ball": (4, 3), "free": (7, 6)}
_ALT = ("axisangle", "xyaxes", "zaxis", "euler")
_EPS = 1e-14  # MuJoCo's mjEPS (user code)
_MINVAL = 1e-15  # mjMINVAL
_FRAME_EPS = 1e-6  # MuJoCo's compiler kFrameEps (same-frame and null-pose tests)
#: geom type -> number of size parameters that must be positive (MuJoCo's mjGEOMINFO)
_GEOM_SIZES = {"plane": 0, "hfield": 0, "sphere": 1, "capsule": 2, "ellipsoid": 3, "cylinder": 2}
_GEOM_SIZES.update({"box": 3, "mesh": 0, "sdf": 0})
#: Parts of a file that carry no dynamics simjax could model: counted without a warning.
_QUIET = {
    "asset",
    "visual",
    "statistic",
    "size",
    "custom",
    "extension",
    "keyframe",
    "sensor",
    "camera",
    "light",
    "geom (visual shape)",
    "contact exclude",
    "joint range (limit constraint)",
    "mocap body (welded to ground)",
    "geom that collides (MuJoCo's soft contact, solved with the limits)",
}
#: Geoms that collide in MuJoCo: without ``contact=True`` simjax detects their contact only.
_COLLIDING = (
    "geom that collides (its contact is detected, matter.find_contacts, but produces no force: "
    "bodies pass through the floor and each other; load_mjcf(..., contact=True) gives MuJoCo's "
    "soft contact)"
)
#: With ``contact=True``: counted quietly (they produce MuJoCo's contact).
_COLLIDING_SOLVED = "geom that collides (MuJoCo's soft contact, solved with the limits)"
#: Colliding geoms whose shape has no contact geometry in simjax yet.
_COLLIDING_MESH = "colliding mesh/hfield/sdf geom (no contact geometry for it yet: left out of contact)"
#: MuJoCo's equalities are soft (solref/solimp); simjax's are exact.
_SOFT_EQ = "equality solref/solimp (soft in MuJoCo, an exact constraint here)"
#: Top-level sections read or expanded by the loader.
_READ = {"compiler", "option", "default", "worldbody", "equality", "actuator", "tendon"}
_UNSUPPORTED = {
    "composite": "a <composite> is a macro MuJoCo expands when compiling",
    "flexcomp": "a <flexcomp> is a deformable body",
    "replicate": "<replicate> is a macro MuJoCo expands when compiling",
    "attach": "<attach> inserts another model",
}


# ----------------------------------------------------------------------------- XML with line numbers


class _El:
    """A parsed XML element that remembers its file and the line it starts on."""

    __slots__ = ("tag", "attrib", "children", "line", "file")

    def __init__(self, tag: str, attrib: dict[str, str], line: int, file: str):
        self.tag = tag
        self.attrib = attrib
        self.children: list[_El] = []
        self.line = line
        self.file = file

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.attrib.get(key, default)


def _where(el: _El) -> str:
    name = el.get("name")
    tag = f'<{el.tag} name="{name}">' if name is not None else f"<{el.tag}>"
    return f"{el.file}:{el.line}: {tag}"


def _error(el: _El, msg: str) -> ModelFileError:
    return ModelFileError(f"{_where(el)}: {msg}")


def _parse_xml(path: str, data: bytes | None = None) -> _El:
    return parse_with_lines(
        path,
        lambda tag, attrib, line: _El(tag, attrib, line, path),
        "an MJCF model is plain XML: check for unclosed or mismatched tags",
        data,
    )


def _read_with_includes(path: str, data: bytes | None, files: ModelFiles) -> _El:
    """The main file's root with every ``<include>`` replaced by the included file's
    ``<mujoco>`` children (recursively). Refused: a file outside ``files``' folders, a
    cycle, more than ``MAX_INCLUDES`` includes or ``MAX_BYTES`` of included files, and
    elements nested deeper than ``MAX_DEPTH`` once the includes are in place."""
    main_dir = os.path.dirname(os.path.abspath(path))
    read = [0, 0]  # includes expanded, bytes read

    def include(c: _El, file: str, stack: tuple[str, ...]) -> _El:
        rel = c.get("file")
        if not rel:
            raise _error(c, '<include> needs file="..." naming the file to include')
        here = os.path.join(os.path.dirname(file), rel)
        candidates = [here, os.path.join(main_dir, rel)]
        allowed = [p for p in candidates if files.allows(p)]
        if not allowed:
            files.check(rel, here, "the included file", _where(c))
        target = next((p for p in allowed if os.path.isfile(p)), None)
        if target is None:
            raise _error(
                c,
                f"included file {rel!r} not found (looked for {os.path.abspath(here)!r} and in "
                f"the main file's directory {main_dir!r})",
            )
        real = os.path.realpath(target)
        if real in stack:
            raise _error(c, f"include cycle: {target!r} includes itself (through {list(stack)})")
        read[0] += 1
        if read[0] > MAX_INCLUDES:
            raise _error(c, f"more than {MAX_INCLUDES} <include>s expanded (simjax.io._xml.MAX_INCLUDES)")
        text = read_bounded(target)
        read[1] += len(text)
        if read[1] > MAX_BYTES:
            raise _error(c, f"the included files add up to more than {MAX_BYTES // 2**20} MB")
        sub = _parse_xml(target, text)
        if sub.tag != "mujoco":
            raise _error(
                c, f"included file {target!r} must have <mujoco> as its top element, found <{sub.tag}>"
            )
        return sub

    def expand(el: _El, file: str, stack: tuple[str, ...], depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _error(
                el,
                f"nested {depth} elements deep once its <include>s are in place; simjax reads models at "
                f"most {MAX_DEPTH} levels deep (simjax.io._xml.MAX_DEPTH)",
            )
        out: list[_El] = []
        for c in el.children:
            if c.tag != "include":
                expand(c, file, stack, depth + 1)
                out.append(c)
                continue
            sub = include(c, file, stack)
            expand(sub, sub.file, (*stack, os.path.realpath(sub.file)), depth)
            out.extend(sub.children)
        el.children = out

    root = _parse_xml(path, data)
    expand(root, path, (os.path.realpath(path),), 1)
    return root


# ----------------------------------------------------------------------------- values


def _floats(
    el: _El,
    attrs: dict[str, str],
    key: str,
    n: int,
    default: Sequence[float] | np.ndarray | None = None,
    *,
    at_most: bool = False,
) -> np.ndarray:
    """Attribute ``key`` (from the element or its default class) as ``n`` finite floats;
    ``at_most``: fewer are allowed and the rest come from ``default`` (MuJoCo's rule for
    ``size``)."""
    text = attrs.get(key)
    if text is None:
        if default is None:
            raise _error(el, f"missing attribute {key}= ({n} number{'s' if n > 1 else ''})")
        return np.array(default, dtype=float)
    try:
        v = np.array([float(x) for x in text.split()], dtype=float)
    except ValueError:
        raise _error(el, f"{key}={text!r} must be {n} number{'s' if n > 1 else ''}") from None
    if at_most and 0 < v.size <= n and default is not None:
        v = np.concatenate([v, np.asarray(default, dtype=float)[v.size :]])
    if v.size != n or not np.all(np.isfinite(v)):
        what = f"{'at most ' if at_most else ''}{n} finite number{'s' if n > 1 else ''}"
        raise _error(el, f"{key}={text!r} must be {what}")
    return v


def _number(el: _El, attrs: dict[str, str], key: str, default: float | None) -> float:
    return float(_floats(el, attrs, key, 1, None if default is None else [default])[0])


def _flag(el: _El, attrs: dict[str, str], key: str, default: bool) -> bool:
    text = attrs.get(key)
    if text is None:
        return default
    if text in ("true", "false"):
        return text == "true"
    raise _error(el, f'{key}="{text}" must be "true" or "false"')


def _choice(el: _El, attrs: dict[str, str], key: str, options: Sequence[str], default: str) -> str:
    text = attrs.get(key, default)
    if text not in options:
        raise _error(el, f'{key}="{text}" must be one of {", ".join(options)}')
    return text


# ----------------------------------------------------------------------------- rotations


def _rot_to_quat(R: np.ndarray) -> np.ndarray:
    """Unit quaternion ``[w, x, y, z]`` with ``w >= 0`` (Shepperd's method)."""
    t = float(np.trace(R))
    if t > max(R[0, 0], R[1, 1], R[2, 2]):
        w = 0.5 * math.sqrt(1.0 + t)
        q = np.array(
            [w, (R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w), (R[1, 0] - R[0, 1]) / (4 * w)]
        )
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(max(1.0 + R[i, i] - R[j, j] - R[k, k], 0.0))
        q = np.empty(4)
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (R[j, i] + R[i, j]) / s
        q[1 + k] = (R[k, i] + R[i, k]) / s
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rotation by ``angle`` about the unit vector ``axis`` (through a quaternion, as MuJoCo)."""
    s = math.sin(angle / 2)
    return quat_to_rot(np.array([math.cos(angle / 2), s * axis[0], s * axis[1], s * axis[2]]))


def _z_to(vec: np.ndarray) -> np.ndarray:
    """MuJoCo's ``mjuu_z2quat``: the smallest rotation taking z onto ``vec`` (half a turn
    about x when ``vec`` points along -z)."""
    v = vec / np.linalg.norm(vec)
    axis = np.cross([0.0, 0.0, 1.0], v)
    s = float(np.linalg.norm(axis))
    axis = np.array([1.0, 0.0, 0.0]) if s < 1e-10 else axis / s
    return _axis_angle(axis, math.atan2(s, v[2]))


class _Compiler:
    """The ``<compiler>`` settings the loader uses (MuJoCo's defaults)."""

    def __init__(self) -> None:
        self.degree = True
        self.eulerseq = "xyz"
        self.inertiafromgeom = "auto"
        self.inertiagrouprange = (0, 5)
        self.boundmass = 0.0
        self.boundinertia = 0.0
        self.balanceinertia = False
        self.settotalmass = -1.0
        self.autolimits = True
        self.alignfree = False
        self.meshdir: str | None = None
        self.assetdir: str | None = None
        self.fitaabb = False
        #: ``<compiler><lengthrange>``: mode, useexisting, uselimit (MuJoCo's defaults)
        self.lr_mode = "muscle"
        self.lr_useexisting = True
        self.lr_uselimit = False

    def read(self, el: _El, notes: list[str]) -> None:
        a = el.attrib
        if "angle" in a:
            self.degree = _choice(el, a, "angle", ("degree", "radian"), "degree") == "degree"
        if "eulerseq" in a:
            seq = a["eulerseq"]
            if len(seq) != 3 or any(ch not in "xyzXYZ" for ch in seq):
                raise _error(el, f'eulerseq="{seq}" must be 3 characters from x, y, z, X, Y, Z')
            self.eulerseq = seq
        if "coordinate" in a and a["coordinate"] != "local":
            raise _error(
                el,
                f'coordinate="{a["coordinate"]}" is not supported (MuJoCo 2.3.3 removed global '
                "coordinates); convert the model to local coordinates",
            )
        if "inertiafromgeom" in a:
            self.inertiafromgeom = _choice(el, a, "inertiafromgeom", ("false", "true", "auto"), "auto")
        if "inertiagrouprange" in a:
            lo, hi = _floats(el, a, "inertiagrouprange", 2)
            self.inertiagrouprange = (int(lo), int(hi))
        self.boundmass = _number(el, a, "boundmass", self.boundmass)
        self.boundinertia = _number(el, a, "boundinertia", self.boundinertia)
        self.settotalmass = _number(el, a, "settotalmass", self.settotalmass)
        self.balanceinertia = _flag(el, a, "balanceinertia", self.balanceinertia)
        self.autolimits = _flag(el, a, "autolimits", self.autolimits)
        self.alignfree = _flag(el, a, "alignfree", self.alignfree)
        self.fitaabb = _flag(el, a, "fitaabb", self.fitaabb)
        self.meshdir = a.get("meshdir", self.meshdir)
        self.assetdir = a.get("assetdir", self.assetdir)
        for c in (c for c in el.children if c.tag == "lengthrange"):
            ca = c.attrib
            self.lr_mode = _choice(c, ca, "mode", ("none", "muscle", "muscleuser", "all"), self.lr_mode)
            self.lr_useexisting = _flag(c, ca, "useexisting", self.lr_useexisting)
            self.lr_uselimit = _flag(c, ca, "uselimit", self.lr_uselimit)
        if _flag(el, a, "fusestatic", False):
            notes.append("compiler fusestatic: static bodies are kept as welded bodies (same dynamics)")


def _rotation(el: _El, own: dict[str, str], dflt: dict[str, str], comp: _Compiler) -> np.ndarray:
    """The orientation an element gives its frame: its own ``quat`` or alternative if it has
    one, else its default class's (an alternative wins over ``quat``, as in MuJoCo)."""
    mine = [k for k in ("quat", *_ALT) if k in own]
    if len(mine) > 1:
        raise _error(el, f"multiple orientation specifiers are not allowed ({', '.join(mine)})")
    src = own if mine else dflt
    alts = [k for k in _ALT if k in src]
    if len(alts) > 1:
        raise _error(el, f"multiple orientation specifiers in its default class ({', '.join(alts)})")
    if alts:
        kind = alts[0]
        if kind == "axisangle":
            v = _floats(el, src, kind, 4)
            n = float(np.linalg.norm(v[:3]))
            if n < _EPS:
                raise _error(el, f"axisangle={src[kind]!r}: the axis is too small")
            return _axis_angle(v[:3] / n, math.radians(v[3]) if comp.degree else v[3])
        if kind == "xyaxes":
            v = _floats(el, src, kind, 6)
            x, y = v[:3], v[3:]
            if np.linalg.norm(x) < _EPS:
                raise _error(el, f"xyaxes={src[kind]!r}: the x axis is too small")
            x = x / np.linalg.norm(x)
            y = y - x * float(x @ y)
            if np.linalg.norm(y) < _EPS:
                raise _error(el, f"xyaxes={src[kind]!r}: the y axis is too small or parallel to x")
            y = y / np.linalg.norm(y)
            z = np.cross(x, y)
            return np.column_stack([x, y, z / np.linalg.norm(z)])
        if kind == "zaxis":
            v = _floats(el, src, kind, 3)
            if np.linalg.norm(v) < _EPS:
                raise _error(el, f"zaxis={src[kind]!r} is too small")
            return _z_to(v)
        v = _floats(el, src, kind, 3)
        if comp.degree:
            v = np.radians(v)
        q = np.array([1.0, 0.0, 0.0, 0.0])
        for ang, ch in zip(v, comp.eulerseq, strict=True):
            k = "xyz".index(ch.lower())
            r = np.zeros(4)
            r[0], r[1 + k] = math.cos(ang / 2), math.sin(ang / 2)
            # lower case: axes moving with the frame (post-multiply); upper case: fixed axes
            q = _quat_mul(q, r) if ch.islower() else _quat_mul(r, q)
        return quat_to_rot(q / np.linalg.norm(q))
    if "quat" in src:
        q = _floats(el, src, "quat", 4)
        n = float(np.linalg.norm(q))
        if n < _EPS:
            raise _error(el, f"quat={src['quat']!r} is zero")
        return quat_to_rot(q / n)
    return np.eye(3)


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


_Frame = tuple[np.ndarray, np.ndarray]  # (R, p) of a frame in its parent


def _compose(a: _Frame, b: _Frame) -> _Frame:
    return a[0] @ b[0], a[0] @ b[1] + a[1]


def _invert(a: _Frame) -> _Frame:
    return a[0].T, -(a[0].T @ a[1])


_IDENTITY: _Frame = (np.eye(3), np.zeros(3))


# ----------------------------------------------------------------------------- defaults


class _Defaults:
    """Default classes: for each class, the attributes it sets per element tag (its
    ancestors' included)."""

    def __init__(self, sections: list[_El]):
        self.classes: dict[str, dict[str, dict[str, str]]] = {"main": {}}
        self.where: dict[str, _El] = {}
        for d in sections:  # top-level <default>: the "main" class
            self._fill(d, "main", self.classes["main"])

    def _fill(self, el: _El, name: str, base: dict[str, dict[str, str]]) -> None:
        merged = {tag: dict(v) for tag, v in base.items()}
        for c in el.children:
            if c.tag != "default":
                merged.setdefault(c.tag, {}).update(c.attrib)
        self.classes[name] = merged
        self.where.setdefault(name, el)
        for c in el.children:
            if c.tag != "default":
                continue
            cname = c.get("class")
            if not cname:
                raise _error(c, 'a nested <default> needs class="..." (its class name)')
            if cname in self.classes:
                first = self.where[cname]
                raise _error(
                    c, f"default class {cname!r} is defined twice (first at {first.file}:{first.line})"
                )
            self._fill(c, cname, merged)

    def of(self, el: _El, tag: str, cls: str) -> dict[str, str]:
        """Attributes of class ``cls`` for elements of kind ``tag``."""
        if cls not in self.classes:
            raise _error(el, f"unknown default class {cls!r}; defined classes: {sorted(self.classes)[:12]}")
        return self.classes[cls].get(tag, {})


# ----------------------------------------------------------------------------- the file, read


class _Joint:
    __slots__ = (
        "el", "name", "type", "axis", "pos", "ref", "range", "limited", "id", "align",
        "damping", "stiffness", "springref", "armature", "springdamper", "given_range",
        "solreflimit", "solimplimit", "margin",
    )  # fmt: skip

    def __init__(self, el: _El, name: str, type_: str, jid: int):
        self.el, self.name, self.type, self.id = el, name, type_, jid
        self.axis = np.array([0.0, 0.0, 1.0])
        self.pos = np.zeros(3)
        self.ref = 0.0
        self.range = (-math.inf, math.inf)
        self.limited = False
        self.align = "auto"
        self.damping = self.stiffness = self.springref = self.armature = 0.0
        self.springdamper: tuple[float, float] | None = None
        #: the ``range`` as MuJoCo's compiler keeps it (converted to radians only when the
        #: joint is limited); None without one. ``inheritrange`` reads it.
        self.given_range: tuple[float, float] | None = None
        #: MuJoCo's soft limit parameters (used by ``load_mjcf(..., contact=True)``)
        self.solreflimit = np.array([0.02, 1.0])
        self.solimplimit = np.array([0.9, 0.95, 0.001, 0.5, 2.0])
        self.margin = 0.0


class _Body:
    __slots__ = (
        "el",
        "name",
        "id",
        "parent",
        "X",
        "joints",
        "geoms",
        "sites",
        "inertial",
        "children",
        "mocap",
        "mass",
        "com",
        "I_com",
        "iR",
        "sameframe",
    )

    def __init__(self, el: _El, name: str, bid: int, parent: _Body | None, X: _Frame):
        self.el, self.name, self.id, self.parent, self.X = el, name, bid, parent, X
        self.joints: list[_Joint] = []
        self.geoms: list[tuple[_El, dict[str, str], dict[str, str], _Frame]] = []
        self.sites: list[tuple[str, np.ndarray, _El, _Frame]] = []  # name, pos in body, el, frame
        self.inertial: _El | None = None
        self.children: list[_Body] = []
        self.mocap = False
        self.mass = 0.0
        self.com = np.zeros(3)
        self.I_com = np.zeros((3, 3))
        self.iR = np.eye(3)  # the inertial frame's orientation, as MuJoCo's body_iquat
        #: MuJoCo's ``body_sameframe == mjSAMEFRAME_BODY``: the inertial frame is the body frame
        self.sameframe = False


def _count(ignored: dict[str, int], what: str, n: int = 1) -> None:
    if n:
        ignored[what] = ignored.get(what, 0) + n


class _Reader:
    """Reads the expanded file into bodies (MuJoCo's depth-first order), joints and sites."""

    def __init__(
        self, root: _El, comp: _Compiler, defaults: _Defaults, ignored: dict[str, int], passive: bool = True
    ):
        self.comp, self.defaults, self.ignored, self.passive = comp, defaults, ignored, passive
        self.bodies: list[_Body] = []
        self.joints: list[_Joint] = []
        self.n_sites = 0
        self.names: dict[str, dict[str, _El]] = {"body": {}, "joint": {}, "site": {}}
        world = _Body(root, "world", 0, None, _IDENTITY)
        self.bodies.append(world)
        self.names["body"]["world"] = root
        worldbodies = [c for c in root.children if c.tag == "worldbody"]
        # Bodies are numbered depth-first, children in file order (MuJoCo's body ids).
        stack: list[tuple[_El, _Body, _Frame, str, bool]] = []
        for wb in worldbodies:  # several <worldbody> sections (e.g. from includes), in file order
            sub: list = []
            self._content(wb, world, _IDENTITY, "main", sub, is_world=True)
            stack[:0] = sub
        while stack:
            el, parent, X_frame, cls, _ = stack.pop()
            body = self._body(el, parent, X_frame, cls, stack)
            parent.children.append(body)

    def _unique(self, kind: str, el: _El, name: str | None, index: int) -> str:
        if not name:
            return f"{kind}#{index}"
        first = self.names[kind].get(name)
        if first is not None:
            raise _error(el, f"repeated {kind} name {name!r} (first at {first.file}:{first.line})")
        self.names[kind][name] = el
        return name

    def _body(self, el: _El, parent: _Body, X_frame: _Frame, cls: str, stack: list) -> _Body:
        bid = len(self.bodies)
        name = self._unique("body", el, el.get("name"), bid)
        a = el.attrib
        X = _compose(X_frame, (_rotation(el, a, {}, self.comp), _floats(el, a, "pos", 3, (0.0, 0.0, 0.0))))
        body = _Body(el, name, bid, parent, X)
        body.mocap = _flag(el, a, "mocap", False)
        if _number(el, a, "gravcomp", 0.0) != 0.0:
            _count(self.ignored, "gravcomp (gravity compensation)")
        self.bodies.append(body)
        childclass = a.get("childclass", cls)
        if childclass not in self.defaults.classes:
            raise _error(
                el,
                f"unknown childclass {childclass!r}; defined classes: {sorted(self.defaults.classes)[:12]}",
            )
        self._content(el, body, _IDENTITY, childclass, stack, is_world=False)
        self._check_joints(body)
        return body

    def _content(
        self, el: _El, body: _Body, X_frame: _Frame, cls: str, stack: list, *, is_world: bool
    ) -> None:
        """Read what ``el`` (a body, the worldbody or a frame) holds; child bodies are pushed
        on ``stack`` in reverse so they pop in file order."""
        kids: list[tuple[_El, _Body, _Frame, str, bool]] = []
        for c in el.children:
            tag = c.tag
            if tag == "body":
                kids.append((c, body, X_frame, cls, False))
            elif tag == "frame":
                fcls = c.attrib.get("childclass", cls)
                X_f = _compose(
                    X_frame,
                    (_rotation(c, c.attrib, {}, self.comp), _floats(c, c.attrib, "pos", 3, (0.0, 0.0, 0.0))),
                )
                # a frame's bodies are its parent body's children, in file order
                sub: list = []
                self._content(c, body, X_f, fcls, sub, is_world=is_world)
                kids.extend(reversed(sub))
            elif tag == "inertial":
                if is_world:
                    raise _error(c, "the world body cannot have an <inertial>")
                if body.inertial is not None:
                    raise _error(c, f"body {body.name!r} has two <inertial> elements")
                body.inertial = c
            elif tag in ("joint", "freejoint"):
                if is_world:
                    raise _error(c, "joints are not allowed in the world body; put them in a <body>")
                body.joints.append(self._joint(c, X_frame, cls))
            elif tag == "geom":
                own = c.attrib
                dflt = self.defaults.of(c, "geom", own.get("class", cls))
                body.geoms.append((c, own, dflt, X_frame))
                # MuJoCo's contype/conaffinity (default 1/1): a geom with either set collides
                collides = any(int(own.get(k, dflt.get(k, "1")) or 0) for k in ("contype", "conaffinity"))
                if not collides:
                    _count(self.ignored, "geom (visual shape)")
            elif tag == "site":
                self._site(c, body, X_frame, cls)
            elif tag in _UNSUPPORTED:
                raise _error(
                    c,
                    f"{_UNSUPPORTED[tag]}; simjax does not read it: compile the model with MuJoCo and "
                    "save the expanded XML (mujoco.mj_saveLastXML) to load it",
                )
            elif tag in ("camera", "light"):
                _count(self.ignored, tag)
            else:
                _count(self.ignored, f"<{tag}> in a body")
        stack.extend(reversed(kids))

    def _site(self, el: _El, body: _Body, X_frame: _Frame, cls: str) -> None:
        own = el.attrib
        dflt = self.defaults.of(el, "site", own.get("class", cls))
        attrs = {**dflt, **own}
        sid = self.n_sites
        self.n_sites += 1
        name = self._unique("site", el, own.get("name"), sid)
        R = _rotation(el, own, dflt, self.comp)
        if "fromto" in attrs:
            ft = _floats(el, attrs, "fromto", 6)
            pos, R = 0.5 * (ft[:3] + ft[3:]), _z_to(ft[:3] - ft[3:]) if np.any(ft[:3] != ft[3:]) else R
        else:
            pos = _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0))
        R, pos = _compose(X_frame, (R, pos))
        body.sites.append((name, pos, el, (R, pos)))

    def _joint(self, el: _El, X_frame: _Frame, cls: str) -> _Joint:
        jid = len(self.joints)
        own = el.attrib
        if el.tag == "freejoint":
            attrs, jtype = dict(own), "free"
        else:
            attrs = {**self.defaults.of(el, "joint", own.get("class", cls)), **own}
            jtype = attrs.get("type", "hinge")
        name = self._unique("joint", el, own.get("name"), jid)
        if jtype not in SUPPORTED_JOINTS:
            raise _error(
                el,
                f"joint {name!r}: unknown joint type {jtype!r}; "
                f"supported types: {', '.join(SUPPORTED_JOINTS)}",
            )
        j = _Joint(el, name, jtype, jid)
        self.joints.append(j)
        j.damping = _number(el, attrs, "damping", 0.0)
        j.stiffness = _number(el, attrs, "stiffness", 0.0)
        if j.damping < 0 or j.stiffness < 0:
            raise _error(el, f"joint {name!r}: damping and stiffness must be >= 0")
        if self.passive:  # modelled: damping on every dof, stiffness on hinge and slide joints
            if j.stiffness and jtype in ("ball", "free"):
                _count(self.ignored, f"joint stiffness on a {jtype} joint")
                j.stiffness = 0.0
        else:
            for key in ("damping", "stiffness"):
                if getattr(j, key):
                    _count(self.ignored, f"joint {key}")
            j.damping = j.stiffness = 0.0
        j.armature = _number(el, attrs, "armature", 0.0)
        if j.armature < 0:
            raise _error(el, f"joint {name!r}: armature must be >= 0")
        if _number(el, attrs, "frictionloss", 0.0) != 0.0:
            _count(self.ignored, "joint frictionloss")
        j.solreflimit = _floats(el, attrs, "solreflimit", 2, (0.02, 1.0), at_most=True)
        j.solimplimit = _floats(el, attrs, "solimplimit", 5, (0.9, 0.95, 0.001, 0.5, 2.0), at_most=True)
        j.margin = _number(el, attrs, "margin", 0.0)
        if "springdamper" in attrs and np.any(sd := _floats(el, attrs, "springdamper", 2)):
            if np.any(sd <= 0):
                raise _error(el, f"joint {name!r}: when defined, springdamper values must be positive")
            if self.passive:  # stiffness and damping from the joint's inertia at qpos0 (load_mjcf)
                j.springdamper = (float(sd[0]), float(sd[1]))
            else:
                _count(self.ignored, "joint springdamper")
        if jtype == "free":
            j.align = _choice(el, attrs, "align", ("false", "true", "auto"), "auto")
            if attrs.get("limited") == "true":
                raise _error(el, f"joint {name!r}: limits should not be defined in free joint")
            return j
        R_f, p_f = X_frame
        if jtype in ("hinge", "slide"):
            axis = R_f @ _floats(el, attrs, "axis", 3, (0.0, 0.0, 1.0))
            n = float(np.linalg.norm(axis))
            if n < _EPS:
                raise _error(el, f"joint {name!r}: axis too small (axis={attrs.get('axis')!r})")
            j.axis = axis / n
        j.pos = R_f @ _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0)) + p_f
        scale = math.pi / 180.0 if (self.comp.degree and jtype == "hinge") else 1.0
        j.ref = _number(el, attrs, "ref", 0.0) * scale if jtype != "ball" else 0.0
        j.springref = _number(el, attrs, "springref", 0.0) * scale if jtype != "ball" else 0.0
        rng = _floats(el, attrs, "range", 2, (0.0, 0.0))
        limited = _choice(el, attrs, "limited", ("true", "false", "auto"), "auto")
        if limited == "auto":
            has_range = not (rng[0] == 0 and rng[1] == 0)
            if not self.comp.autolimits and has_range:
                raise _error(
                    el,
                    f'joint {name!r} has range but not limited; set <compiler autolimits="true">, '
                    'give limited="true" or "false", or remove the range',
                )
            j.limited = bool(rng[0] < rng[1])
        else:
            j.limited = limited == "true"
        if j.limited:
            if jtype != "ball" and rng[0] >= rng[1]:
                raise _error(
                    el,
                    f"joint {name!r}: range[0] should be smaller than range[1] "
                    f"(range={attrs.get('range')!r})",
                )
            j.range = (float(rng[0] * scale), float(rng[1] * scale))
            _count(self.ignored, "joint range (limit constraint)")
        if j.limited:
            j.given_range = j.range
        elif not (rng[0] == 0 and rng[1] == 0):
            j.given_range = (float(rng[0]), float(rng[1]))
        return j

    def _check_joints(self, body: _Body) -> None:
        """MuJoCo's rules: at most 6 dofs, a free joint alone and only in a child of the world,
        no rotation after a ball joint."""
        js = body.joints
        if not js:
            return
        dofs = sum(SUPPORTED_JOINTS[j.type][1] for j in js)
        if dofs > 6:
            raise _error(
                body.el, f"body {body.name!r}: more than 6 dofs ({dofs}) in its joints {[j.name for j in js]}"
            )
        free = [j for j in js if j.type == "free"]
        if free and body.parent is not None and body.parent.id != 0:
            raise _error(
                free[0].el, f"joint {free[0].name!r}: a free joint can only be used in a top-level body"
            )
        seen_ball = False
        for j in js:
            if seen_ball and j.type in ("ball", "hinge"):
                raise _error(j.el, f"body {body.name!r}: joint {j.name!r} is a rotation after a ball joint")
            seen_ball = seen_ball or j.type == "ball"
        if body.mocap:
            raise _error(body.el, f"mocap body {body.name!r} must be a fixed child of the world (no joints)")


# ----------------------------------------------------------------------------- meshes


class _Meshes:
    """The ``<asset><mesh>`` elements by name, read and processed (MuJoCo's mass
    properties, :mod:`simjax.io._mesh`) the first time a geom of a moving body needs one."""

    def __init__(self, root: _El, defaults: _Defaults, comp: _Compiler, model_dir: str, files: ModelFiles):
        self.comp, self.model_dir, self.files = comp, model_dir, files
        self.elements: dict[str, tuple[_El, dict[str, str]]] = {}
        self.done: dict[str, MeshInertia] = {}
        for sec in root.children:
            if sec.tag != "asset":
                continue
            for el in sec.children:
                if el.tag != "mesh":
                    continue
                attrs = {**defaults.of(el, "mesh", el.attrib.get("class", "main")), **el.attrib}
                name = attrs.get("name") or os.path.splitext(os.path.basename(attrs.get("file", "")))[0]
                if not name:
                    raise _error(el, "a <mesh> needs a name or a file")
                if name in self.elements:
                    raise _error(el, f"mesh {name!r} is defined twice")
                self.elements[name] = (el, attrs)

    def _file(self, el: _El, file: str) -> str:
        """Where MuJoCo looks for a mesh file: ``meshdir`` (or ``assetdir``), relative to
        the main model file's directory unless absolute."""
        if os.path.isabs(file):
            return file
        d = self.comp.meshdir if self.comp.meshdir is not None else self.comp.assetdir
        base = self.model_dir if d is None else os.path.join(self.model_dir, d)
        return os.path.normpath(os.path.join(base, file))

    def visual(self, name: str, geom: _El) -> dict[str, Any]:
        """How a mesh geom is drawn: its file and scale, or (inline vertices, or a
        ``refpos``/``refquat``) its vertices in the geom's frame."""
        if name not in self.elements:
            known = sorted(self.elements)[:8]
            raise _error(geom, f"mesh {name!r} is not defined in <asset>; defined: {known}")
        el, a = self.elements[name]
        scale = _floats(el, a, "scale", 3, (1.0, 1.0, 1.0))
        refpos = _floats(el, a, "refpos", 3, (0.0, 0.0, 0.0))
        refquat = _floats(el, a, "refquat", 4, (1.0, 0.0, 0.0, 0.0))
        moved = np.any(refpos != 0) or np.any(refquat != np.array([1.0, 0.0, 0.0, 0.0]))
        if "file" in a and not moved:
            return {"mesh_file": self.files.visual(a["file"], self._file(el, a["file"])), "scale": scale}
        if self.refused(name):
            return {"mesh_file": ""}  # drawn as a stand-in
        vert, face = self._vertices(name, el, a)
        v = (vert - refpos) @ quat_to_rot(refquat / np.linalg.norm(refquat))  # rows: R^T (v - refpos)
        return {"mesh_file": a.get("file", ""), "vertices": v * scale, "faces": face}

    def refused(self, name: str) -> bool:
        """Whether the mesh's file lies outside the model's folder (remembered for the
        warning): a geom drawing it is drawn as a stand-in."""
        if name in self.done or name not in self.elements:
            return False
        el, a = self.elements[name]
        return "file" in a and not self.files.visual(a["file"], self._file(el, a["file"]))

    def _vertices(self, name: str, el: _El, a: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
        if "file" in a:
            path = self.files.check(
                a["file"], self._file(el, a["file"]), f"mesh {name!r}: the file", _where(el)
            )
            if not os.path.exists(path):
                raise _error(
                    el,
                    f"mesh {name!r}: file not found: {path!r} (mesh files are found from the main model "
                    "file's directory and <compiler meshdir>; load the model from its file, not from text, "
                    "or give the body an <inertial>)",
                )
            try:
                return read_mesh(path)
            except ModelFileError as e:
                raise _error(el, f"mesh {name!r}: {e}") from None
        if "vertex" in a:
            vals = np.asarray([float(x) for x in a["vertex"].split()])
            if len(vals) % 3:
                raise _error(el, f"mesh {name!r}: vertex data must be a multiple of 3")
            vert = vals.reshape(-1, 3).astype(np.float32).astype(np.float64)
            fv = [int(x) for x in a.get("face", "").split()]
            if len(fv) % 3:
                raise _error(el, f"mesh {name!r}: face data must be a multiple of 3")
            return vert, np.asarray(fv, dtype=np.int64).reshape(-1, 3)
        raise _error(el, f"mesh {name!r} has neither a file nor vertex data")

    def get(self, name: str, geom: _El) -> MeshInertia:
        """The mesh's mass properties, read (for a body's inertia, or to fit a primitive)."""
        if name in self.done:
            return self.done[name]
        if name not in self.elements:
            known = sorted(self.elements)[:8]
            raise _error(geom, f"mesh {name!r} is not defined in <asset>; defined: {known}")
        el, a = self.elements[name]
        if "builtin" in a and a["builtin"] != "none":
            raise _error(el, f"mesh {name!r}: builtin meshes are not read; give the body an <inertial>")
        kind = _choice(el, a, "inertia", INERTIA_KINDS, "legacy")
        vert, face = self._vertices(name, el, a)
        try:
            mi = mesh_inertia(
                vert,
                face,
                name=name,
                inertia=kind,
                scale=_floats(el, a, "scale", 3, (1.0, 1.0, 1.0)),
                refpos=_floats(el, a, "refpos", 3, (0.0, 0.0, 0.0)),
                refquat=_floats(el, a, "refquat", 4, (1.0, 0.0, 0.0, 0.0)),
            )
        except ModelFileError as e:
            raise _error(el, str(e)) from None
        self.done[name] = mi
        return mi


# ----------------------------------------------------------------------------- inertia


def _geom_size(el: _El, own: dict[str, str], dflt: dict[str, str]) -> np.ndarray:
    base = _floats(el, dflt, "size", 3, (0.0, 0.0, 0.0), at_most=True)
    return _floats(el, own, "size", 3, base, at_most=True) if "size" in own else base


def _fit_to_mesh(gtype: str, mesh: MeshInertia, aabb: bool) -> tuple[np.ndarray, np.ndarray]:
    """Size of a primitive geom fitted to a mesh and its centre in the mesh's principal
    frame (MuJoCo's ``mjCMesh::FitGeom``): from the equivalent inertia box, or with
    ``<compiler fitaabb="true">`` the smallest primitive holding the bounding box."""
    size, center = np.zeros(3), np.zeros(3)
    if not aabb:
        b = mesh.boxsz
        if gtype == "sphere":
            size[0] = b.sum() / 3
        elif gtype == "capsule":
            size[0] = (b[0] + b[1]) / 2
            size[1] = max(0.0, b[2] - size[0] / 2)
        elif gtype == "cylinder":
            size[:2] = (b[0] + b[1]) / 2, b[2]
        else:
            size[:] = b
        return size, center
    lo, hi = mesh.aamm[:3], mesh.aamm[3:]
    center = (lo + hi) / 2
    half = hi - center
    if gtype == "sphere":
        size[0] = half.max()
    elif gtype in ("capsule", "cylinder"):
        size[:2] = max(half[0], half[1]), half[2]
        if gtype == "capsule":
            size[1] -= size[0]
    else:
        size[:] = half
    return size, center


def _fromto(el: _El, own: dict[str, str], dflt: dict[str, str], gtype: str) -> tuple[np.ndarray, ...]:
    """``(size, R, pos)`` of a geom placed by ``fromto`` (its z axis along the segment)."""
    attrs = {**dflt, **own}
    size = _geom_size(el, own, dflt)
    if gtype not in ("capsule", "cylinder", "ellipsoid", "box"):
        raise _error(el, f"fromto requires a capsule, cylinder, box or ellipsoid geom, not {gtype}")
    pos = _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0))
    if np.any(pos != 0):
        raise _error(el, "both pos and fromto defined in geom")
    ft = _floats(el, attrs, "fromto", 6)
    vec = ft[:3] - ft[3:]
    half = float(np.linalg.norm(vec)) / 2
    if half < _EPS:
        raise _error(el, "fromto points too close in geom")
    size = size.copy()
    if gtype in ("ellipsoid", "box"):
        size[2], size[1] = half, size[0]
    else:
        size[1] = half
    return size, _z_to(vec), 0.5 * (ft[:3] + ft[3:])


def _geom_visual(
    el: _El,
    own: dict[str, str],
    dflt: dict[str, str],
    X_frame: _Frame,
    comp: _Compiler,
    meshes: _Meshes,
    materials: dict[str, tuple[float, ...]],
    body: MobilizedBody,
    name: str,
) -> VisualGeometry | None:
    """The geom as drawn (MuJoCo's geom frame before a mesh's recentring; sizes as MuJoCo's
    ``geom_size``); None for height fields and SDFs (not drawn)."""
    attrs = {**dflt, **own}
    gtype = attrs.get("type", "sphere")
    if gtype in ("hfield", "sdf"):
        return None
    if "rgba" in attrs:
        rgba = tuple(_floats(el, attrs, "rgba", 4))
    else:
        rgba = materials.get(attrs.get("material", ""), (0.5, 0.5, 0.5, 1.0))
    kw: dict[str, Any] = {
        "name": own.get("name") or name,
        "body": body,
        "rgba": tuple(float(x) for x in rgba),
    }
    kw["group"] = int(_number(el, attrs, "group", 0.0))
    R = _rotation(el, own, dflt, comp)
    pos = _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0))
    if gtype == "mesh" or (attrs.get("mesh") and gtype not in _GEOM_SIZES):
        if not attrs.get("mesh"):
            raise _error(el, 'a mesh geom needs mesh="..." (the name of an <asset><mesh>)')
        R, pos = _compose(X_frame, (R, pos))
        return VisualGeometry(shape="mesh", R=R, p=pos, **kw, **meshes.visual(attrs["mesh"], el))
    if attrs.get("mesh") and meshes.refused(attrs["mesh"]):  # drawn as a stand-in
        R, pos = _compose(X_frame, (R, pos))
        return VisualGeometry(shape="mesh", R=R, p=pos, mesh_file="", **kw)
    _, size, R, pos = _geom_placement(el, own, dflt, X_frame, comp, meshes)  # a primitive
    return VisualGeometry(shape=gtype, size=size, R=R, p=pos, **kw)


def _materials(root: _El, defaults: _Defaults) -> dict[str, tuple[float, ...]]:
    """``<asset><material>`` colours by name."""
    out: dict[str, tuple[float, ...]] = {}
    for sec in root.children:
        for el in sec.children if sec.tag == "asset" else ():
            if el.tag == "material" and el.attrib.get("name"):
                a = {**defaults.of(el, "material", el.attrib.get("class", "main")), **el.attrib}
                out[a["name"]] = tuple(_floats(el, a, "rgba", 4, (1.0, 1.0, 1.0, 1.0)))
    return out


def _visuals(
    bodies: list[_Body], by_id: list[MobilizedBody], comp: _Compiler, meshes: _Meshes, root: _El,
    defaults: _Defaults, notes: list[str],
) -> list[VisualGeometry]:  # fmt: skip
    """Every geom of every body, in MuJoCo's geom order (height fields and SDFs left out)."""
    materials = _materials(root, defaults)
    makers = (
        partial(
            _geom_visual, el, own, dflt, X_frame, comp, meshes, materials, by_id[b.id], f"{b.name}_geom{k}"
        )
        for b in bodies
        for k, (el, own, dflt, X_frame) in enumerate(b.geoms)
    )
    return collect_visuals(makers, notes, "geom(s)")


def _geom_mass(
    el: _El,
    own: dict[str, str],
    dflt: dict[str, str],
    X_frame: _Frame,
    comp: _Compiler,
    meshes: _Meshes,
    body: _Body,
    skipped: list[str],
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(mass, pos, R, principal inertia)`` of a geom in its body frame (MuJoCo's
    ``mjCGeom::Compile``, ``GetVolume`` and ``SetInertia``; a mesh's from the mesh file);
    None if it is outside ``inertiagrouprange``, or is a mesh geom of a static body (not
    read: listed in ``skipped``)."""
    attrs = {**dflt, **own}
    gtype = attrs.get("type", "sphere")
    if gtype not in _GEOM_SIZES:
        raise _error(el, f"unknown geom type {gtype!r}; MuJoCo's types: {', '.join(_GEOM_SIZES)}")
    group = int(_number(el, attrs, "group", 0.0))
    if not comp.inertiagrouprange[0] <= group <= comp.inertiagrouprange[1]:
        return None
    R = _rotation(el, own, dflt, comp)
    static = _is_static(body)
    if gtype == "plane":  # no volume; only allowed in bodies that do not move
        if not static:
            raise _error(el, f"a plane geom is only allowed in static bodies (body {body.name!r} moves)")
        R, pos = _compose(X_frame, (R, _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0))))
        return 0.0, pos, R, np.zeros(3)
    if (
        gtype in ("sdf", "hfield")
        or (gtype == "mesh" and not attrs.get("mesh"))
        or (attrs.get("mesh") and gtype not in ("mesh", "sphere", "capsule", "cylinder", "ellipsoid", "box"))
    ):
        if gtype == "mesh":
            raise _error(el, 'a mesh geom needs mesh="..." (the name of an <asset><mesh>)')
        if "mass" in attrs and _number(el, attrs, "mass", None) == 0.0:
            return None
        if static:
            skipped.append(body.name)
            return None
        raise _error(
            el,
            f"body {body.name!r} takes its mass and inertia from this {gtype} geom, which simjax does "
            "not compute; give the body an <inertial> element (MuJoCo's compiled body_mass/body_inertia)",
        )
    mesh: MeshInertia | None = None
    if attrs.get("mesh"):
        if "mass" in attrs and _number(el, attrs, "mass", None) == 0.0:
            return None
        if static:  # a body welded to the world: its mass does not matter, its mesh is not read
            skipped.append(body.name)
            return None
        if "fromto" in attrs:
            raise _error(el, "fromto cannot be used with a mesh geom")
        mesh = meshes.get(attrs["mesh"], el)
        pos = _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0))
        if gtype == "mesh":
            if _flag(el, attrs, "shellinertia", False):
                raise _error(
                    el, 'for mesh geoms, the inertia type is set on the mesh asset (<mesh inertia="shell">)'
                )
            volume = mesh.volume
            if "mass" in attrs:
                mass = _number(el, attrs, "mass", None)
                mass = mass if volume > _EPS else 0.0
            else:
                mass = _number(el, attrs, "density", 1000.0) * volume
            if mass < 0:
                raise _error(el, "mass, inertia or density are negative in geom")
            b2 = mesh.boxsz**2
            inertia = mass * np.array([b2[1] + b2[2], b2[0] + b2[2], b2[0] + b2[1]]) / 3
            R, pos = _compose(X_frame, _compose((R, pos), (mesh.R, mesh.pos)))
            return mass, pos, R, inertia
        # a primitive fitted to the mesh: its inertia box, or (fitaabb) its bounding box
        size, center = _fit_to_mesh(gtype, mesh, comp.fitaabb)
        size = size * _number(el, attrs, "fitscale", 1.0)
        R, pos = _compose((R, pos), (mesh.R, mesh.pos + mesh.R @ center))
    elif "fromto" in attrs:
        size, R, pos = _fromto(el, own, dflt, gtype)
    else:
        size = _geom_size(el, own, dflt)
        pos = _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0))
    for i in range(_GEOM_SIZES[gtype]):
        if size[i] <= 0:
            raise _error(el, f"size {i} must be positive in a {gtype} geom (size={attrs.get('size')!r})")
    shell = _flag(el, attrs, "shellinertia", False)
    volume = _volume(gtype, size, shell)
    if "mass" in attrs:
        mass = _number(el, attrs, "mass", None)
        if mass == 0 or volume <= _EPS:
            mass = 0.0
    else:
        density = _number(el, attrs, "density", 1000.0)
        mass = density * volume
    if mass < 0:
        raise _error(el, "mass, inertia or density are negative in geom")
    inertia = _principal_inertia(gtype, size, mass, shell) if mass > 0 else np.zeros(3)
    R, pos = _compose(X_frame, (R, pos))
    return mass, pos, R, inertia


def _volume(gtype: str, s: np.ndarray, shell: bool) -> float:
    """Volume (or, for ``shellinertia``, surface area) of a primitive geom."""
    pi = math.pi
    if gtype == "sphere":
        return 4 * pi * s[0] ** 2 if shell else 4 * pi * s[0] ** 3 / 3
    if gtype == "capsule":
        r, h = s[0], 2 * s[1]
        return 4 * pi * r * r + 2 * pi * r * h if shell else pi * (r * r * h + 4 * r**3 / 3)
    if gtype == "cylinder":
        r, h = s[0], 2 * s[1]
        return 2 * pi * r * r + 2 * pi * r * h if shell else pi * r * r * h
    if gtype == "ellipsoid":
        if shell:  # Thomsen's approximation, as MuJoCo
            p = 1.6075
            t = (s[0] * s[1]) ** p + (s[1] * s[2]) ** p + (s[2] * s[0]) ** p
            return 4 * pi * (t / 3) ** (1 / p)
        return 4 * pi * s[0] * s[1] * s[2] / 3
    if gtype == "box":
        return 8 * (s[0] * s[1] + s[1] * s[2] + s[2] * s[0]) if shell else 8 * s[0] * s[1] * s[2]
    return 0.0


def _principal_inertia(gtype: str, s: np.ndarray, m: float, shell: bool) -> np.ndarray:
    """Inertia about the geom's center along its axes (MuJoCo's ``mjCGeom::SetInertia``)."""
    if gtype == "sphere":
        return np.full(3, (2 * m * s[0] ** 2 / 3) if shell else (2 * m * s[0] ** 2 / 5))
    if gtype == "capsule":
        r, hh = s[0], s[1]
        h = 2 * hh
        if not shell:
            ms = m * 4 * r / (4 * r + 3 * h)  # the two hemispheres
            mc = m - ms
            ixx = mc * (3 * r * r + h * h) / 12 + 2 * ms * r * r / 5 + ms * h * (3 * r + 2 * h) / 8
            return np.array([ixx, ixx, mc * r * r / 2 + 2 * ms * r * r / 5])
        a_s, a_c = 4 * math.pi * r * r, 2 * math.pi * r * h
        ms = m * a_s / (a_s + a_c)
        mc = m - ms
        hs_com, hs_pos = r / 2, hh + r / 2
        ixx = mc * (6 * r * r + h * h) / 12 + 2 * ms * r * r / 3 + ms * (hs_pos**2 - hs_com**2)
        return np.array([ixx, ixx, mc * r * r + 2 * ms * r * r / 3])
    if gtype == "cylinder":
        r, hh = s[0], s[1]
        h = 2 * hh
        if not shell:
            ixx = m * (3 * r * r + h * h) / 12
            return np.array([ixx, ixx, m * r * r / 2])
        a_d, a_c = math.pi * r * r, 2 * math.pi * r * h
        md = m * a_d / (2 * a_d + a_c)
        mc = m - 2 * md
        ixx = mc * (6 * r * r + h * h) / 12 + 2 * (md * r * r / 4 + md * hh * hh)
        return np.array([ixx, ixx, mc * r * r + 2 * md * r * r / 2])
    s2 = s * s
    if gtype == "ellipsoid":
        if not shell:
            return m * np.array([s2[1] + s2[2], s2[0] + s2[2], s2[0] + s2[1]]) / 5
        eps = 1e-6  # shell = expanded ellipsoid minus the solid one (MuJoCo's approximation)
        va = 4 * math.pi * s[0] * s[1] * s[2] / 3
        e = s + eps
        vb = 4 * math.pi * e[0] * e[1] * e[2] / 3
        rho = m / (vb - va)
        e2 = e * e
        ia = va * rho * np.array([s2[1] + s2[2], s2[0] + s2[2], s2[0] + s2[1]]) / 5
        ib = vb * rho * np.array([e2[1] + e2[2], e2[0] + e2[2], e2[0] + e2[1]]) / 5
        return ib - ia
    if gtype == "box":
        if not shell:
            return m * np.array([s2[1] + s2[2], s2[0] + s2[2], s2[0] + s2[1]]) / 3
        lx, ly, lz = 2 * s
        a0, a1, a2 = lx * ly, ly * lz, lz * lx
        at = 2 * (a0 + a1 + a2)
        m0, m1, m2 = m * a0 / at, m * a1 / at, m * a2 / at
        i0 = np.array([m0 * ly * ly, m0 * lx * lx, m0 * (lx * lx + ly * ly)]) / 12
        i1 = np.array([m1 * (ly * ly + lz * lz), m1 * lz * lz, m1 * ly * ly]) / 12
        i2 = np.array([m2 * lz * lz, m2 * (lx * lx + lz * lz), m2 * lx * lx]) / 12
        return 2 * np.array(
            [
                m0 * s2[2] + m2 * s2[1] + i0[0] + i1[0] + i2[0],
                m0 * s2[2] + m1 * s2[0] + i0[1] + i1[1] + i2[1],
                m1 * s2[0] + m2 * s2[1] + i0[2] + i1[2] + i2[2],
            ]
        )
    return np.zeros(3)


def _is_static(body: _Body) -> bool:
    """Whether the body is welded to the world (no joint between them)."""
    b: _Body | None = body
    while b is not None and b.id != 0:
        if b.joints:
            return False
        b = b.parent
    return True


def _body_inertia(body: _Body, comp: _Compiler, meshes: _Meshes, skipped: list[str]) -> None:
    """Mass, center of mass and inertia about it (body frame) of a body, as MuJoCo's
    ``mjCBody::Compile`` and ``InertiaFromGeom`` compute them."""
    el = body.inertial
    explicit = el is not None
    mass, com, I_c, iR = 0.0, np.zeros(3), np.zeros((3, 3)), None
    if el is not None:
        a = el.attrib
        com = _floats(el, a, "pos", 3)
        mass = _number(el, a, "mass", None)
        if mass < 0:
            raise _error(
                el, f"body {body.name!r}: <inertial> mass is negative ({mass:g}); masses must be >= 0"
            )
        if "fullinertia" in a:
            if any(k in a for k in ("quat", *_ALT)):
                raise _error(el, "fullinertia and an inertial orientation cannot both be specified")
            if "diaginertia" in a:
                raise _error(el, "fullinertia and diaginertia cannot both be specified")
            xx, yy, zz, xy, xz, yz = _floats(el, a, "fullinertia", 6)
            I_c = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
        else:
            iR = _rotation(el, a, {}, comp)
            I_c = iR @ np.diag(_floats(el, a, "diaginertia", 3, (0.0, 0.0, 0.0))) @ iR.T
    if comp.inertiafromgeom == "true" or (comp.inertiafromgeom == "auto" and not explicit):
        made = (_geom_mass(*geom, comp, meshes, body, skipped) for geom in body.geoms)
        sel = [g for g in made if g is not None]
        if len(sel) == 1:
            mass, com, iR, d = sel[0]
            I_c = iR @ np.diag(d) @ iR.T
        elif len(sel) > 1:
            mass = sum(g[0] for g in sel)
            if mass < _EPS:
                raise _error(body.el, f"body {body.name!r}: mass is too small, cannot compute center of mass")
            com = np.asarray(sum(g[0] * g[1] for g in sel) / mass)
            I_c, iR = np.zeros((3, 3)), None
            for m_g, p_g, R_g, d_g in sel:
                r = p_g - com
                I_c += R_g @ np.diag(d_g) @ R_g.T + m_g * (float(r @ r) * np.eye(3) - np.outer(r, r))
    I_c = 0.5 * (I_c + I_c.T)
    # boundmass, boundinertia, balanceinertia act on the principal moments
    mass = max(mass, comp.boundmass)
    lam, V = np.linalg.eigh(I_c)
    lam = np.maximum(lam, comp.boundinertia) if comp.boundinertia > 0 else lam
    where = el if el is not None else body.el
    if mass < 0 or np.any(lam < -1e-12 * max(1.0, float(np.abs(lam).max()))):
        raise _error(where, f"body {body.name!r}: mass and inertia cannot be negative")
    lam = np.maximum(lam, 0.0)
    tol = 1e-12 * float(lam.sum())
    if lam[0] + lam[1] < lam[2] - tol:
        if not comp.balanceinertia:
            raise _error(
                where, f"body {body.name!r}: inertia must satisfy A + B >= C; use 'balanceinertia' to fix"
            )
        lam = np.full(3, lam.mean())
    body.mass, body.com, body.I_com = float(mass), np.asarray(com, dtype=float), (V * lam) @ V.T
    if iR is None:  # principal axes (MuJoCo's eigen-decomposition may order them differently)
        # MuJoCo's eigen-decomposition keeps the body axes (iquat = 1) only for a diagonal
        # inertia with non-increasing moments (measured, MuJoCo 4.0.1)
        d = np.diag(I_c)
        unit = bool(np.all(np.abs(I_c - np.diag(d)) <= 1e-12 * max(_MINVAL, float(d.sum())))) and bool(
            np.all(np.diff(d) <= 0)
        )
        iR = V if np.linalg.det(V) > 0 else V * np.array([1.0, 1.0, -1.0])
    else:
        unit = bool(np.all(np.abs(iR - np.eye(3)) < 2 * _FRAME_EPS))
    body.iR = iR
    body.sameframe = unit and bool(np.all(np.abs(body.com) < _FRAME_EPS))


# ----------------------------------------------------------------------------- the loader


def load_mjcf(
    path: str | os.PathLike[str],
    *,
    warn_ignored: bool = True,
    limits: bool = True,
    passive: bool = True,
    allow_outside: bool = False,
    contact: bool = False,
) -> LoadedModel:
    """Load a MuJoCo MJCF model as a simjax System.

    Args:
        path: The ``.xml`` file, or the MJCF text itself (a ``str`` starting with ``<``;
            its ``<include>``s are found from the working directory, as MuJoCo's
            ``from_xml_string``), or an open file. ``<include>``d files are read, and the mesh
            files of moving bodies that take their inertia from them (found from the model
            file's directory and ``<compiler meshdir>``); textures are never opened.
        warn_ignored: Emit one warning line summarising what simjax leaves out that carries
            physics (tendons, actuators it does not model, by name, contact pairs, gravity
            compensation, ...); every ignored part, cameras and geoms included, is counted
            in ``model.ignored``.
        limits: Enforce the ranges of limited hinge and slide joints as hard limits
            (``sj.Constraint.CoordinateLimit``, stepped by ``simulate(...,
            integrator="euler")``; MuJoCo's limits are soft, simjax's are hard); each
            Coordinate's ``limit``. ``False``: ranges are only recorded (and bound the
            Assembler).
        passive: Model the joints' ``damping`` (every dof) and ``stiffness`` +
            ``springref`` (hinge and slide) as ``Force.MobilityLinearDamper`` and
            ``Force.MobilityLinearSpring``, as MuJoCo applies them. ``False``: leave them
            out (listed as ignored). ``armature`` is always modelled (it is inertia);
            ``frictionloss`` is not.
        contact: Solve the accelerations MuJoCo's way: its soft contact rows for the geoms
            that collide (pyramidal or elliptic cones from ``<option cone>``, ``impratio``,
            ``condim`` 1, 3, 4, 6, ``solref``/``solimp``/``margin``/``gap``) and, with
            ``limits``, its soft limit rows for limited hinge and slide joints
            (``solreflimit``, ``solimplimit``, ``margin``) instead of hard limits, and
            limited tendons' limit rows, by
            MuJoCo's primal Newton solve at the Acceleration stage
            (``sj.MujocoConstraintOptions``, ``simjax.constraints.soft``); ``udot`` then
            equals MuJoCo's ``qacc``. Off by default: geoms are then detected only
            (``matter.find_contacts``), as the models compare with MuJoCo with contact
            disabled. With it, joint, tendon and connect equalities are MuJoCo's soft
            equality rows (not exact constraints). Not yet with weld equalities, ball-joint limits,
            ``frictionloss``, ``solreffriction``, adhesion or ``noslip``.
        allow_outside: Read files anywhere. By default every file the model names (an
            ``<include>``, a ``<mesh file>``, wherever ``<compiler meshdir assetdir>``
            point) must lie, symlinks followed, inside the main model file's folder (the
            working directory for MJCF text) or the package it lies in (the nearest folder
            above with a ROS ``package.xml``, or the top of its Python package: dm_control's
            dog_v2 takes its meshes from ``../../../../suite``). Outside them, an
            ``<include>`` or a mesh a body's inertia comes from is a ``ModelFileError``, a
            mesh only drawn is left out with one warning (drawn as a stand-in).

    Returns:
        A :class:`LoadedModel`: ``bodies`` by MuJoCo body name (``"world"`` is Ground),
        ``joints`` (the mobilized body each joint moves) by joint name, one
        :class:`Coordinate` per hinge and slide joint (named as the joint; its ``range``
        when the joint is limited, in radians or metres), ``markers`` (the sites),
        ``constraints`` (the equalities, by name), ``actuators`` (by name, in control
        order: ``model.set_controls(state, ctrl)``) and the default State: MuJoCo's ``qpos0``
        (hinge and slide joints at ``ref``, ball joints at the identity, free bodies where
        the file puts them).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ModelFileError: Malformed XML, an ``<include>`` of a missing file, an unknown joint
            or geom type, an unknown default class, repeated names, an equality naming a
            missing body, joint or site, a moving body without mass, a mesh that is missing,
            unreadable or degenerate (as MuJoCo refuses it), or a construct simjax does not read
            (``<composite>``, ``<flexcomp>``, ``<replicate>``, ``<attach>``), a file the model
            names outside its folder (above), an ``<include>`` cycle, a DTD or entity
            declaration, elements nested deeper than 500 levels, or files over 256 MB. The
            message names the file, the line and the element.
        NotImplementedError: ``contact=True`` for a file with weld equalities.
    """
    path, data = read_model_source(path, "MJCF")
    model_dir = model_folder(path)
    files = ModelFiles(path, "load_mjcf", model_folders(model_dir), allow_outside=allow_outside)
    root = _read_with_includes(path, data, files)
    if root.tag != "mujoco":
        raise _error(root, f"an MJCF file's top element must be <mujoco>, found <{root.tag}>")

    ignored: dict[str, int] = {}
    notes: list[str] = []
    comp = _Compiler()
    gravity = np.array([0.0, 0.0, -9.81])
    eq_off = actuation_off = False
    contact_flags = {"contact": True, "filterparent": True}
    for el in root.children:
        if el.tag == "option":
            for c in el.children:
                for k in contact_flags:
                    if c.tag == "flag" and c.get(k) == "disable":
                        contact_flags[k] = False
    for el in root.children:
        if el.tag == "compiler":
            comp.read(el, notes)
        elif el.tag == "option":
            gravity, off, act_off = _read_option(el, gravity, ignored, notes)
            eq_off = eq_off or off
            actuation_off = actuation_off or act_off
        elif el.tag in ("deformable", "asset", "keyframe", "sensor", "custom"):
            _count(ignored, el.tag, len(el.children))
        elif el.tag == "contact":
            for c in el.children:
                if c.tag not in ("pair", "exclude"):
                    _count(ignored, f"contact {c.tag}")
        elif el.tag not in _READ:
            _count(ignored, el.tag if el.tag in _QUIET else f"<{el.tag}>")
    defaults = _Defaults([el for el in root.children if el.tag == "default"])
    reader = _Reader(root, comp, defaults, ignored, passive)
    bodies = reader.bodies

    meshes = _Meshes(root, defaults, comp, model_dir, files)
    skipped: list[str] = []
    for b in bodies[1:]:
        _body_inertia(b, comp, meshes, skipped)
    if skipped:
        names = sorted(set(skipped))
        notes.append(
            f"{len(names)} static bodies take no mass from their mesh/hfield geoms (not read; they do "
            f"not move, so the dynamics is the same): {names[:6]}{' ...' if len(names) > 6 else ''}"
        )
    if comp.settotalmass > 0:
        total = sum(b.mass for b in bodies[1:])
        scale = comp.settotalmass / max(_MINVAL, total)
        for b in bodies[1:]:
            b.mass *= scale
            b.I_com = b.I_com * scale
    for b in bodies[1:]:
        _align_free(b, comp)
        if b.mocap:
            _count(ignored, "mocap body (welded to ground)")
    _check_massive(bodies)

    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [float(g) for g in gravity])

    taken = {"ground"}

    def body_name(name: str) -> str:
        n = name if name not in taken else f"{name}_body"
        while n in taken:
            n += "_"
        taken.add(n)
        return n

    mobods: dict[str, MobilizedBody] = {"world": matter.Ground()}
    by_id: list[MobilizedBody] = [matter.Ground()]
    joint_mobods: dict[str, MobilizedBody] = {}
    coordinates: dict[str, Coordinate] = {}
    for b in bodies[1:]:
        assert b.parent is not None
        mob = _mobilize(sj, b, by_id[b.parent.id], body_name, joint_mobods, coordinates, notes)
        mobods[b.name] = mob
        by_id.append(mob)

    markers: dict[str, Marker] = {}
    for b in bodies:
        for name, pos, _, _ in b.sites:
            markers[name] = Marker(name, by_id[b.id], np.asarray(pos, dtype=float))

    simple = {j.name: b.mass for b in _simple_slide_bodies(bodies) for j in b.joints}
    _auto_spring_damper(system, matter, reader.joints, joint_mobods, ignored, simple)
    _add_passive_forces(sj, forces, reader.joints, joint_mobods)
    tendons = _add_tendons(sj, root, reader, defaults, comp, meshes, matter, by_id, coordinates, notes)
    _add_tendon_forces(sj, system, forces, tendons, passive, contact, ignored, reader.joints, coordinates)
    actuators = _add_actuators(
        sj, root, reader, defaults, comp, forces, joint_mobods, ignored, notes, actuation_off, tendons,
        (system, matter, coordinates),
    )  # fmt: skip
    soft_eqs: list[tuple] | None = [] if contact else None
    constraints, assembled = _add_equalities(
        sj, root, reader, defaults, matter, by_id, joint_mobods, ignored, tendons, soft_eqs
    )
    for con in constraints.values():
        _count(ignored, _SOFT_EQ)
        if eq_off:
            con.set_disabled_by_default(True)
    if limits and not contact:
        add_coordinate_limits(coordinates, notes)
        ignored.pop("joint range (limit constraint)", None)
    _add_contact(sj, root, bodies, by_id, mobods, matter, comp, meshes, defaults, ignored, contact_flags)
    state = realize_with_contact(system, matter, ignored)
    if contact:
        if constraints:
            raise NotImplementedError(
                f"load_mjcf({os.path.basename(str(path))}, contact=True): the file has weld equality "
                f"constraints ({', '.join(constraints)}); MuJoCo's soft rows for them are not "
                "built yet (joint, tendon and connect equalities are); load without contact=True"
            )
        assert soft_eqs is not None
        if eq_off:
            soft_eqs = []
        for e in soft_eqs:
            if not e[-1]:
                notes.append(f'equality {e[1]!r} active="false": no row (MuJoCo leaves it out too)')
        state = _solve_mujoco_way(sj, root, system, matter, state, reader.joints, coordinates, limits,
                                  contact_flags, ignored, notes, tendons, (bodies, by_id),
                                  [e for e in soft_eqs if e[-1]])  # fmt: skip
    model = LoadedModel(
        system=system,
        matter=matter,
        forces=forces,
        default_state=state,
        bodies=mobods,
        joints=joint_mobods,
        coordinates=coordinates,
        markers=markers,
        constraints=constraints,
        actuators=actuators,
        tendons={name: t.handle for name, t in tendons.items()},
        ignored=ignored,
        notes=notes,
        geometry=_visuals(bodies, by_id, comp, meshes, root, defaults, notes),
        path=path,
        source="mjcf",
    )
    if assembled:  # every constraint holds at qpos0 by construction: nothing to assemble
        model.state = state
    loud = [f"{n} {k}" for k, n in ignored.items() if k not in _QUIET]
    if warn_ignored and (loud or notes):
        msg = f"load_mjcf({os.path.basename(path)}):"
        if loud:
            msg += " not modelled and ignored: " + ", ".join(loud)
        warnings.warn("; ".join([msg, *notes]), stacklevel=2)
    files.warn(stacklevel=3)
    return model


def _simple_slide_bodies(bodies: list[_Body]) -> list[_Body]:
    """The bodies MuJoCo's compiler marks ``body_simple == 2`` (a "simple body with no
    rotations"): inertial frame = body frame, a child of the world (or of a dof-less child
    of the world), no child bodies, and only slide joints, each at the body origin along a
    body axis. For these MuJoCo's ``mj_setConst`` takes ``body_invweight0 = (1/mass, 0)``
    and ``dof_invweight0 = 1/mass`` (armature and the number of slides ignored) instead of
    the diagonal of ``J M^-1 J'``."""
    out = []
    for b in bodies[1:]:
        p = b.parent
        if p is None or b.children or not b.joints or not b.sameframe:
            continue
        if not (p.id == 0 or (p.parent is not None and p.parent.id == 0 and not p.joints)):
            continue
        ok = all(
            j.type == "slide"
            and bool(np.all(np.abs(j.pos) < _FRAME_EPS))
            and int(np.sum(np.abs(j.axis) > _EPS)) == 1
            for j in b.joints
        )
        if ok and b.mass > 0:
            out.append(b)
    return out


def _solve_mujoco_way(
    sj: Any, root: _El, system: Any, matter: Any, state: Any, joints: list[_Joint],
    coordinates: dict[str, Any], limits: bool, flags: dict[str, bool], ignored: dict[str, int],
    notes: list[str], tendons: dict[str, Any] | None = None, bodies: tuple[list[_Body], list[Any]] = ([], []),
    equalities: list[tuple] | None = None,
) -> Any:  # fmt: skip
    """``load_mjcf(..., contact=True)``: MuJoCo's options (``<option timestep cone impratio
    iterations>``, ``<flag limit refsafe>``), the invweights at qpos0 and the limit rows
    set on the matter subsystem; the State of the new topology."""
    opt: dict[str, str] = {}
    off: set[str] = set()
    for el in root.children:
        if el.tag == "option":
            opt.update(el.attrib)
            for c in el.children:
                if c.tag == "flag":
                    off |= {k for k, v in c.attrib.items() if v == "disable"}
    cone = opt.get("cone", "pyramidal")
    if cone not in ("pyramidal", "elliptic"):
        raise _error(root, f'option cone="{cone}" must be pyramidal or elliptic')
    if float(opt.get("noslip_iterations", 0)) > 0:
        _count(ignored, "option noslip_iterations (MuJoCo's noslip pass)")
    n_col = ignored.pop(_COLLIDING, 0)
    if n_col:
        _count(ignored, _COLLIDING_SOLVED, n_col)
    ignored.pop("joint range (limit constraint)", None)
    model = system.model_for(state)
    pos_state = system.realize(state, Stage.POSITION)
    body_iw, dof_iw = soft.invweights(model, pos_state)
    for b in _simple_slide_bodies(bodies[0]):  # MuJoCo's shortcut for simple slide-only bodies
        body_iw[bodies[1][b.id].index] = (1.0 / max(_MINVAL, b.mass), 0.0)
        for j in b.joints:
            dof_iw[coordinates[j.name].u_index(state)] = 1.0 / max(_MINVAL, b.mass)
    rows: list[tuple] = []
    if limits and "limit" not in off:
        for j in joints:
            if not j.limited or j.type not in ("hinge", "slide"):
                if j.limited and j.type == "ball":
                    _count(ignored, "ball joint limit (MuJoCo's soft row not built yet)")
                continue
            c = coordinates[j.name]
            ui = c.u_index(state)
            lo, hi = j.range
            rows.append((c.q_index(state), ui, lo, hi, j.margin, j.solreflimit, j.solimplimit, dof_iw[ui]))
    cols: list[Any] = list(zip(*rows)) if rows else [[] for _ in range(8)]
    trows: list[tuple] = []
    limited = [t for t in (tendons or {}).values() if t.limited]
    if limits and "limit" not in off and limited:
        # MuJoCo's tendon_invweight0: J M^-1 J^T at qpos0
        Jt = np.asarray(matter.calc_tendon_jacobians(pos_state))
        Minv = np.linalg.inv(np.asarray(matter.calc_mass_matrix(pos_state)))
        for t in limited:
            k = t.handle.index
            iw = float(Jt[k] @ Minv @ Jt[k])
            trows.append((k, *t.range, t.margin, t.solreflimit, t.solimplimit, iw))
    tcols: list[Any] = list(zip(*trows)) if trows else [[] for _ in range(7)]
    erows: list[tuple] = []
    if equalities:
        # MuJoCo's equality rows: refs at qpos0, dof_invweight0 / tendon_invweight0 summed
        q0 = np.asarray(state.q)
        L0 = np.asarray(matter.calc_tendon_lengths(pos_state)) if tendons else np.zeros(0)
        Jt0 = np.asarray(matter.calc_tendon_jacobians(pos_state)) if tendons else np.zeros((0, 0))
        Minv0 = np.linalg.inv(np.asarray(matter.calc_mass_matrix(pos_state)))
        for kind, _, o1, o2, poly, sref, simp, _ in (e for e in equalities if e[0] != "connect"):
            ids = []
            for o in (o1, o2):
                if o is None:
                    ids.append((-1, -1, 0.0, 0.0))
                elif kind == "joint":
                    c = coordinates[o.name]
                    qi, ui = c.q_index(state), c.u_index(state)
                    ids.append((qi, ui, float(q0[qi]), float(dof_iw[ui])))
                else:
                    k = o.handle.index
                    ids.append((k, -1, float(L0[k]), float(Jt0[k] @ Minv0 @ Jt0[k])))
            (a1, v1, r1, w1), (a2, v2, r2, w2) = ids
            erows.append((kind == "tendon", a1, a2, v1, v2, r1, r2, poly, sref, simp, w1 + w2))
    ecols: list[Any] = list(zip(*erows)) if erows else [[] for _ in range(11)]
    # connects: three rows each, the bodies' translational body_invweight0 summed
    by_id = bodies[1]
    crows = [
        (by_id[b1.id].index, by_id[b2.id].index, p1, p2, sref, simp,
         body_iw[by_id[b1.id].index, 0] + body_iw[by_id[b2.id].index, 0])
        for _, _, b1, p1, b2, p2, sref, simp, _ in (e for e in equalities or [] if e[0] == "connect")
    ]  # fmt: skip
    ccols: list[Any] = list(zip(*crows)) if crows else [[] for _ in range(7)]
    options = MujocoConstraintOptions(
        body_invweight=body_iw,
        cone=cone,
        impratio=float(opt.get("impratio", 1.0)),
        timestep=float(opt.get("timestep", 0.002)),
        iterations=int(float(opt.get("iterations", 100))),
        refsafe="refsafe" not in off,
        contact=flags["contact"],
        limit_q=np.asarray(cols[0], int),
        limit_u=np.asarray(cols[1], int),
        limit_lower=np.asarray(cols[2], float),
        limit_upper=np.asarray(cols[3], float),
        limit_margin=np.asarray(cols[4], float),
        limit_solref=np.asarray(cols[5], float).reshape(-1, 2),
        limit_solimp=np.asarray(cols[6], float).reshape(-1, 5),
        limit_invweight=np.asarray(cols[7], float),
        tendon_index=np.asarray(tcols[0], int),
        tendon_lower=np.asarray(tcols[1], float),
        tendon_upper=np.asarray(tcols[2], float),
        tendon_margin=np.asarray(tcols[3], float),
        tendon_solref=np.asarray(tcols[4], float).reshape(-1, 2),
        tendon_solimp=np.asarray(tcols[5], float).reshape(-1, 5),
        tendon_invweight=np.asarray(tcols[6], float),
        eq_tendon=np.asarray(ecols[0], bool),
        eq_obj1=np.asarray(ecols[1], int),
        eq_obj2=np.asarray(ecols[2], int),
        eq_u1=np.asarray(ecols[3], int),
        eq_u2=np.asarray(ecols[4], int),
        eq_ref1=np.asarray(ecols[5], float),
        eq_ref2=np.asarray(ecols[6], float),
        eq_polycoef=np.asarray(ecols[7], float).reshape(-1, 5),
        eq_solref=np.asarray(ecols[8], float).reshape(-1, 2),
        eq_solimp=np.asarray(ecols[9], float).reshape(-1, 5),
        eq_invweight=np.asarray(ecols[10], float),
        connect_body1=np.asarray(ccols[0], int),
        connect_body2=np.asarray(ccols[1], int),
        connect_anchor1=np.asarray(ccols[2], float).reshape(-1, 3),
        connect_anchor2=np.asarray(ccols[3], float).reshape(-1, 3),
        connect_solref=np.asarray(ccols[4], float).reshape(-1, 2),
        connect_solimp=np.asarray(ccols[5], float).reshape(-1, 5),
        connect_invweight=np.asarray(ccols[6], float),
    )
    matter.set_mujoco_constraints(options)
    new = system.realize_topology()
    return new.with_q(state.q).with_u(state.u)


def _read_option(
    el: _El, gravity: np.ndarray, ignored: dict[str, int], notes: list[str]
) -> tuple[np.ndarray, bool, bool]:
    """Gravity, and whether ``<flag equality="disable">`` turns every equality off and
    ``<flag actuation="disable">`` every actuator."""
    a = el.attrib
    g = _floats(el, a, "gravity", 3, gravity)
    for key in ("density", "viscosity"):
        if _number(el, a, key, 0.0) != 0.0:
            _count(ignored, f"option {key} (fluid forces)")
    if "wind" in a and np.any(_floats(el, a, "wind", 3) != 0):
        _count(ignored, "option wind (fluid forces)")
    eq_off = act_off = False
    for c in el.children:
        if c.tag == "flag" and c.get("gravity") == "disable":
            g = np.zeros(3)
        if c.tag == "flag" and c.get("equality") == "disable":
            eq_off = True
            notes.append(
                '<flag equality="disable">: every equality constraint is disabled by default '
                "(enable one with constraint.enable(state))"
            )
        if c.tag == "flag" and c.get("actuation") == "disable":
            act_off = True
            notes.append(
                '<flag actuation="disable">: every actuator is disabled by default '
                "(enable one with actuator.enable(state))"
            )
    return g, eq_off, act_off


_CONTACT_KINDS = ("plane", "sphere", "capsule", "ellipsoid", "cylinder", "box")


def _geom_placement(
    el: _El, own: dict[str, str], dflt: dict[str, str], X_frame: _Frame, comp: _Compiler, meshes: _Meshes
) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """``(type, size, R, pos)`` of a primitive geom in its body (a primitive fitted to a
    mesh included), as MuJoCo compiles ``geom_size``, ``geom_quat`` and ``geom_pos``."""
    attrs = {**dflt, **own}
    gtype = attrs.get("type", "sphere")
    R = _rotation(el, own, dflt, comp)
    pos = _floats(el, attrs, "pos", 3, (0.0, 0.0, 0.0))
    if attrs.get("mesh"):
        mesh = meshes.get(attrs["mesh"], el)
        size, center = _fit_to_mesh(gtype, mesh, comp.fitaabb)
        size = size * _number(el, attrs, "fitscale", 1.0)
        R, pos = _compose((R, pos), (mesh.R, mesh.pos + mesh.R @ center))
    elif "fromto" in attrs:
        size, R, pos = _fromto(el, own, dflt, gtype)
    else:
        size = _geom_size(el, own, dflt)
    R, pos = _compose(X_frame, (R, pos))
    return gtype, np.asarray(size, dtype=float), R, pos


def _contact_props(el: _El, attrs: dict[str, str], pair: bool) -> dict[str, Any]:
    """MuJoCo's contact attributes of a geom (or a ``<pair>``), defaults filled in."""
    out: dict[str, Any] = {}
    out["condim"] = int(_number(el, attrs, "condim", 3.0))
    if pair:
        five = (1.0, 1.0, 0.005, 0.0001, 0.0001)
        out["friction"] = tuple(_floats(el, attrs, "friction", 5, five, at_most=True))
    else:
        out["friction"] = tuple(_floats(el, attrs, "friction", 3, (1.0, 0.005, 0.0001), at_most=True))
        out["contype"] = int(_number(el, attrs, "contype", 1.0))
        out["conaffinity"] = int(_number(el, attrs, "conaffinity", 1.0))
        out["priority"] = int(_number(el, attrs, "priority", 0.0))
        out["solmix"] = _number(el, attrs, "solmix", 1.0)
    out["solref"] = tuple(_floats(el, attrs, "solref", 2, (0.02, 1.0), at_most=True))
    out["solimp"] = tuple(_floats(el, attrs, "solimp", 5, (0.9, 0.95, 0.001, 0.5, 2.0), at_most=True))
    out["margin"] = _number(el, attrs, "margin", 0.0)
    out["gap"] = _number(el, attrs, "gap", 0.0)
    return out


def _add_contact(
    sj: Any, root: _El, bodies: list[_Body], by_id: list[MobilizedBody], mobods: dict[str, MobilizedBody],
    matter: Any, comp: _Compiler, meshes: _Meshes, defaults: _Defaults, ignored: dict[str, int],
    flags: dict[str, bool],
) -> None:  # fmt: skip
    """Contact surfaces for the geoms that collide (or that a ``<pair>`` names), in
    MuJoCo's geom order, named as the geom (``geom#<id>`` when unnamed), with their
    contact attributes; ``<contact><pair>`` and ``<exclude>``; ``<flag filterparent>``.
    With ``<flag contact="disable">`` nothing is added."""
    if not flags["contact"]:
        return
    sections = [c for c in root.children if c.tag == "contact"]
    pair_els = [c for sec in sections for c in sec.children if c.tag == "pair"]
    paired = {c.get(k) for c in pair_els for k in ("geom1", "geom2")}
    index: dict[str, int] = {}
    known: set[str] = set()
    gid = 0
    for b in bodies:
        for el, own, dflt, X_frame in b.geoms:
            attrs = {**dflt, **own}
            name = own.get("name") or f"geom#{gid}"
            known.add(name)
            gid += 1
            props = _contact_props(el, attrs, pair=False)
            if not (props["contype"] or props["conaffinity"]) and name not in paired:
                continue
            gtype = attrs.get("type", "sphere")
            if gtype not in _CONTACT_KINDS:
                _count(ignored, _COLLIDING_MESH)
                continue
            if attrs.get("mesh") and meshes.refused(attrs["mesh"]):
                _count(ignored, "colliding geom fitted to a mesh not read (left out)")
                continue
            gtype, size, R, pos = _geom_placement(el, own, dflt, X_frame, comp, meshes)
            geometry = sj.ContactGeometry(gtype, size)
            try:
                surface = sj.ContactSurface(geometry, name=name, **props)
            except ValueError as e:
                raise _error(el, f"geom {name!r}: {e}") from None
            index[name] = by_id[b.id].add_contact_surface(sj.Transform(R, pos), surface)
            _count(ignored, _COLLIDING)
    if not flags["filterparent"]:
        matter.set_contact_filter_parent(False)
    for sec in sections:
        for c in sec.children:
            if c.tag == "exclude":
                b1, b2 = c.get("body1"), c.get("body2")
                if b1 not in mobods or b2 not in mobods:
                    raise _error(c, f"<exclude> names an unknown body ({b1!r}, {b2!r})")
                matter.exclude_contact(mobods[b1], mobods[b2])
            elif c.tag == "pair":
                g1, g2 = c.get("geom1") or "", c.get("geom2") or ""
                for g in (g1, g2):
                    if g not in known:
                        raise _error(c, f"<pair> names an unknown geom {g!r}")
                if g1 not in index or g2 not in index:
                    _count(ignored, "contact pair with a mesh/hfield/sdf geom (left out)")
                    continue
                attrs = {**defaults.of(c, "pair", c.get("class") or "main"), **c.attrib}
                try:
                    matter.add_contact_pair(index[g1], index[g2], **_contact_props(c, attrs, pair=True))
                except ValueError as e:
                    raise _error(c, str(e)) from None


def _align_free(b: _Body, comp: _Compiler) -> None:
    """MuJoCo's free-joint alignment: a childless body moved by one free joint with
    ``align="true"`` (or ``"auto"`` under ``<compiler alignfree="true">``) gets its inertial
    frame as its body frame."""
    js = b.joints
    if not (len(js) == 1 and js[0].type == "free" and not b.children):
        return
    if not (js[0].align == "true" or (js[0].align == "auto" and comp.alignfree)):
        return
    X_i = (b.iR, b.com)
    b.X = _compose(b.X, X_i)
    inv = _invert(X_i)
    b.com, b.I_com, b.iR = np.zeros(3), b.iR.T @ b.I_com @ b.iR, np.eye(3)
    b.sites = [(n, _compose(inv, X)[1], el, _compose(inv, X)) for n, _, el, X in b.sites]


def _check_massive(bodies: list[_Body]) -> None:
    """Every moving body (with its welded descendants) needs mass (MuJoCo's rule; else the
    mass matrix is singular)."""
    for b in bodies[1:]:
        if not b.joints:
            continue
        total, stack = 0.0, [b]
        while stack:
            x = stack.pop()
            total += x.mass
            stack.extend(c for c in x.children if not c.joints)
        if total < _MINVAL:
            raise _error(
                b.el,
                f"body {b.name!r} moves (joints {[j.name for j in b.joints]}) but has no mass: give it "
                "an <inertial> or a geom with volume (mass and inertia of moving bodies must be larger "
                "than mjMINVAL)",
            )


def _mass_properties(b: _Body) -> tuple[sp.MassProperties, str | None]:
    if b.mass <= 0:
        return sp.MassProperties(0.0), None
    c = b.com
    I_o = b.I_com + b.mass * (float(c @ c) * np.eye(3) - np.outer(c, c))
    I_o = 0.5 * (I_o + I_o.T)
    try:
        return sp.MassProperties(b.mass, c, I_o), None
    except ValueError as e:
        if "triangle" not in str(e):
            raise _error(b.inertial or b.el, f"body {b.name!r}: invalid inertia ({e})") from None
        return sp.MassProperties(b.mass, c, I_o, strict=False), (
            f"body {b.name!r}: inertia at the edge of the triangle inequality (kept as MuJoCo has it)"
        )


def _mobilize(
    sj: Any,
    b: _Body,
    parent: MobilizedBody,
    body_name: Callable[[str], str],
    joint_mobods: dict[str, MobilizedBody],
    coordinates: dict[str, Coordinate],
    notes: list[str],
) -> MobilizedBody:
    """The mobilized body (or chain) for one MuJoCo body; returns the one carrying it."""
    mp, note = _mass_properties(b)
    if note:
        notes.append(note)
    R0, p0 = b.X
    T = sj.Transform
    if not b.joints:
        return sj.MobilizedBody.Weld(parent, T(R0, p0), sj.Body(mp), T(), name=body_name(b.name))
    j0 = b.joints[0]
    if j0.type == "free":
        mob = sj.MobilizedBody.Free(parent, T(), sj.Body(mp), T(), name=body_name(b.name))
        mob.set_default_q(np.concatenate([_rot_to_quat(R0), p0]))
        if j0.armature:
            mob.set_default_armature(j0.armature)
        joint_mobods[j0.name] = mob
        return mob
    z, x = np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0])
    cur, R_pre, p_pre = parent, R0, p0
    for k, j in enumerate(b.joints):
        last = k == len(b.joints) - 1
        body = sj.Body(mp) if last else sj.Body.Massless()
        name = body_name(b.name if last else f"{b.name}/{j.name}")
        if j.type == "hinge":
            Ra = align_axis(z, j.axis)
            Rref = _axis_angle(z, -j.ref)
            X_PF, X_BM = T(R_pre @ Ra @ Rref, p_pre + R_pre @ j.pos), T(Ra, j.pos)
            mob = sj.MobilizedBody.Pin(cur, X_PF, body, X_BM, name=name)
        elif j.type == "slide":
            Ra = align_axis(x, j.axis)
            X_PF, X_BM = T(R_pre @ Ra, p_pre - j.ref * (R_pre @ j.axis)), T(Ra)
            mob = sj.MobilizedBody.Slider(cur, X_PF, body, X_BM, name=name)
        else:  # ball
            X_PF, X_BM = T(R_pre, p_pre + R_pre @ j.pos), T(np.eye(3), j.pos)
            mob = sj.MobilizedBody.Ball(cur, X_PF, body, X_BM, name=name)
        if j.type in ("hinge", "slide"):
            if j.ref != 0.0:
                mob.set_default_q([j.ref])
            motion = "rotational" if j.type == "hinge" else "translational"
            coordinates[j.name] = Coordinate(
                j.name, mob, 0, motion, default_value=j.ref, range=j.range, clamped=j.limited, joint=j.name
            )
        if j.armature:
            mob.set_default_armature(j.armature)
        joint_mobods[j.name] = mob
        cur, R_pre, p_pre = mob, np.eye(3), np.zeros(3)
    return cur


def _auto_spring_damper(
    system: Any,
    matter: Any,
    joints: list[_Joint],
    joint_mobods: dict[str, MobilizedBody],
    ignored: dict[str, int],
    simple: dict[str, float] | None = None,
) -> None:
    """MuJoCo's ``springdamper="timeconst dampratio"``: the joint's stiffness and damping
    set from its inverse inertia at qpos0 (``dof_invweight0``: the diagonal of M^-1, averaged
    over a ball's three and a free joint's translational and rotational dofs; ``1/mass`` for
    the joints ``simple`` maps to their body's mass, those of MuJoCo's simple slide-only
    bodies, :func:`_simple_slide_bodies`), as MuJoCo's
    compiler does (``mjCModel::AutoSpringDamper``): with ``I = ndof / sum(invweight0)``,
    stiffness ``I / (timeconst dampratio)^2`` and damping ``2 I / timeconst``."""
    auto = [j for j in joints if j.springdamper is not None]
    if not auto:
        return
    state = system.realize_topology()
    M = matter.calc_mass_matrix(system.realize(state, Stage.POSITION))  # armature included
    Minv = np.linalg.inv(np.asarray(M))
    for j in auto:
        mob = joint_mobods[j.name]
        u0 = Coordinate("probe", mob, 0).u_index(state)
        d = np.diag(Minv)[u0 : u0 + SUPPORTED_JOINTS[j.type][1]].copy()
        if simple and j.name in simple:
            d[:] = 1.0 / max(_MINVAL, simple[j.name])
        elif j.type == "ball":
            d[:] = d.mean()
        elif j.type == "free":  # simjax's u: angular first, then translational
            d[:3], d[3:] = d[:3].mean(), d[3:].mean()
        inertia = len(d) / max(_MINVAL, float(d.sum()))
        tc, dr = j.springdamper  # type: ignore[misc]
        j.damping = 2 * inertia / max(_MINVAL, tc)
        if j.type in ("hinge", "slide"):
            j.stiffness = inertia / max(_MINVAL, tc * tc * dr * dr)
        else:
            _count(ignored, f"joint stiffness on a {j.type} joint")


def _add_passive_forces(
    sj: Any, forces: Any, joints: list[_Joint], joint_mobods: dict[str, MobilizedBody]
) -> None:
    """MuJoCo's joint ``damping`` (``-b qvel`` on every dof of the joint) and ``stiffness``
    (``-k (qpos - springref)``, hinge and slide) as Simbody's mobility dampers and springs.
    A ball's or free joint's dofs are MuJoCo's velocities rotated into the body frame, an
    orthogonal map of simjax's u, so a per-u damper of the same coefficient is the same
    generalized force."""
    for j in joints:
        mob = joint_mobods[j.name]
        if j.damping:
            for i in range(SUPPORTED_JOINTS[j.type][1]):
                sj.Force.MobilityLinearDamper(forces, mob, i, j.damping)
        if j.stiffness:
            sj.Force.MobilityLinearSpring(forces, mob, 0, j.stiffness, j.springref)


#: The actuator elements, and the ones simjax does not model (with why).
_ACTUATORS = ("general", "motor", "position", "velocity", "intvelocity", "damper", "muscle")
_UNMODELLED_ACTUATORS = {
    "cylinder": "a pneumatic cylinder (area, activation dynamics of its own)",
    "adhesion": "an adhesion actuator (it acts through contacts)",
    "plugin": "a plugin actuator",
}


_GAINTYPES = ("fixed", "affine", "muscle")
_BIASTYPES = ("none", "affine", "muscle")
_DYNTYPES = ("none", "integrator", "filter", "filterexact", "muscle")


def _actuator_base() -> dict[str, Any]:
    """MuJoCo's defaults of a ``<general>`` actuator."""
    return {
        "gaintype": "fixed",
        "biastype": "none",
        "dyntype": "none",
        "gainprm": np.array([1.0] + [0.0] * 9),
        "biasprm": np.zeros(10),
        "dynprm": np.array([1.0] + [0.0] * 9),
        "gear": np.array([1.0, 0, 0, 0, 0, 0]),
        "dampratio": 0.0,
        "attrs": {},
        "negative": [],  # muscle attributes given negative (MuJoCo leaves them unset)
    }


def _apply_actuator(tag: str, el: _El, a: dict[str, str], p: dict[str, Any]) -> None:
    """Apply the attributes ``a`` of an actuator element (or default) of kind ``tag`` onto
    the general parameters ``p``, as MuJoCo's shortcuts do (their gains default to the
    class's current ones)."""
    p["attrs"] = {**p["attrs"], **a}
    for key in ("gainprm", "biasprm", "dynprm"):
        if key in a:
            p[key] = _floats(el, a, key, 10, np.zeros(10), at_most=True)
    if "gear" in a:
        p["gear"] = _floats(el, a, "gear", 6, np.zeros(6), at_most=True)
    if tag == "general":
        p["gaintype"] = a.get("gaintype", p["gaintype"])
        p["biastype"] = a.get("biastype", p["biastype"])
        p["dyntype"] = a.get("dyntype", p["dyntype"])
    elif tag == "motor":
        p.update(gaintype="fixed", biastype="none", dyntype="none")
        p["gainprm"], p["biasprm"] = np.array([1.0] + [0.0] * 9), np.zeros(10)
    elif tag == "position":
        kp = _number(el, a, "kp", float(p["gainprm"][0]))
        kv = _number(el, a, "kv", -float(p["biasprm"][2]))
        tc = _number(el, a, "timeconst", 0.0)
        p["dampratio"] = _number(el, a, "dampratio", 0.0)
        if kp < 0 or kv < 0 or tc < 0:
            raise _error(el, "position actuator: kp, kv and timeconst must be >= 0")
        p.update(gaintype="fixed", biastype="affine", dyntype="filterexact" if tc > 0 else "none")
        p["gainprm"] = np.array([kp] + [0.0] * 9)
        p["biasprm"] = np.array([0.0, -kp, -kv] + [0.0] * 7)
        p["dynprm"] = np.array([tc] + [0.0] * 9)
    elif tag == "velocity":
        kv = _number(el, a, "kv", 1.0)
        p.update(gaintype="fixed", biastype="affine", dyntype="none")
        p["gainprm"] = np.array([kv] + [0.0] * 9)
        p["biasprm"] = np.array([0.0, 0.0, -kv] + [0.0] * 7)
    elif tag == "intvelocity":
        kp = _number(el, a, "kp", 1.0)
        kv = _number(el, a, "kv", 0.0)
        p.update(gaintype="fixed", biastype="affine", dyntype="integrator")
        p["gainprm"] = np.array([kp] + [0.0] * 9)
        p["biasprm"] = np.array([0.0, -kp, -kv] + [0.0] * 7)
    elif tag == "damper":
        kv = _number(el, a, "kv", 0.0)
        p.update(gaintype="affine", biastype="none", dyntype="none")
        p["gainprm"] = np.array([0.0, 0.0, -kv] + [0.0] * 7)
        p["biasprm"] = np.zeros(10)
    elif tag == "muscle":
        _apply_muscle(el, a, p)


#: MuJoCo's ``<muscle>`` defaults, set where the class still holds ``<general>``'s
#: (``mjs_setToMuscle``): gainprm (range0, range1, force, scale, lmin, lmax, vmax, fpmax,
#: fvmax) and dynprm (tau_act, tau_deact).
_MUSCLE_GAIN = ((1.0, 0.75), (0.0, 1.05), (0.0, -1.0), (0.0, 200.0), (0.0, 0.5), (0.0, 1.6), (0.0, 1.5),
                (0.0, 1.3), (0.0, 1.2))  # fmt: skip
_MUSCLE_ATTRS = ("range", "force", "scale", "lmin", "lmax", "vmax", "fpmax", "fvmax")


def _apply_muscle(el: _El, a: dict[str, str], p: dict[str, Any]) -> None:
    """MuJoCo's ``<muscle>`` shortcut (``mjs_setToMuscle``): its defaults where the class
    holds ``<general>``'s, then the attributes given; a negative value leaves the parameter
    as it is, as MuJoCo does (listed in ``p["negative"]`` for a note; ``force`` < 0 is the
    documented automatic force), and ``tausmooth`` < 0 is refused as MuJoCo refuses it."""
    gp, dp = p["gainprm"].copy(), p["dynprm"].copy()
    if dp[0] == 1:
        dp[0] = 0.01
    if dp[1] == 0:
        dp[1] = 0.04
    for i, (was, new) in enumerate(_MUSCLE_GAIN):
        if gp[i] == was:
            gp[i] = new
    tausmooth = _number(el, a, "tausmooth", float(dp[2]))
    if tausmooth < 0:
        raise _error(
            el, f"muscle {el.get('name') or '(unnamed)'}: tausmooth cannot be negative (got {tausmooth})"
        )
    dp[2] = tausmooth
    tc = _floats(el, a, "timeconst", 2, (-1.0, -1.0))
    for i in range(2):
        if tc[i] >= 0:
            dp[i] = tc[i]
    rng = _floats(el, a, "range", 2, (-1.0, -1.0))
    vals = [rng[0], rng[1]] + [_number(el, a, k, -1.0) for k in _MUSCLE_ATTRS[1:]]
    for i, v in enumerate(vals):
        if v >= 0:
            gp[i] = v
    names = ["timeconst"] * 2 + ["range"] * 2 + list(_MUSCLE_ATTRS[1:])
    for k, v in zip(names, [tc[0], tc[1], *vals]):
        if v < 0 and k in a and k != "force" and k not in p["negative"]:  # force < 0: the automatic one
            p["negative"] = [*p["negative"], k]
    bp = p["biasprm"].copy()
    bp[:9] = gp[:9]
    p.update(gaintype="muscle", biastype="muscle", dyntype="muscle", gainprm=gp, biasprm=bp, dynprm=dp)


#: Actuator attributes simjax models (or checks and refuses), and the ones that do not change
#: the dynamics of an actuator on a hinge or slide joint (display tags, the declared input,
#: transmissions' own parameters, a PID's ranges, the control history buffer); any other
#: attribute, set, leaves its actuator out with a note naming it.
_ACTUATOR_ATTRS = frozenset(
    "name class joint jointinparent tendon site body cranksite ctrllimited ctrlrange forcelimited "
    "forcerange actlimited actrange gear dyntype gaintype biastype dynprm gainprm biasprm kp kv "
    "timeconst dampratio actearly actdim inheritrange delay damping armature lengthrange tausmooth "
    "range force scale lmin lmax vmax fpmax fvmax".split()
)
_ACTUATOR_ATTRS_NO_EFFECT = frozenset(
    "group user input nsample interp cranklength slidersite refsite velrange ffrange".split()
)


def _inherited_range(el: _El, a: dict[str, str], p: dict[str, Any], j: _Joint, who: str) -> tuple[str, Any]:
    """MuJoCo's ``inheritrange``: the range a position-like actuator takes from its joint's
    ``range``, scaled by ``inheritrange`` about its midpoint; ``("ctrl", range)``, or
    ``("act", range)`` when the setpoint is integrated (``intvelocity``); ``("", None)``
    when there is none to take. Position-like is a fixed gain equal to minus the affine bias's
    position term (what ``position`` and ``intvelocity`` make); MuJoCo leaves the attribute
    unused on other actuators. A shortcut's own ``ctrlrange`` (``actrange``) wins over an
    ``inheritrange`` from its default class, and both on the element are refused, as
    MuJoCo does."""
    r = _number(el, a, "inheritrange", 0.0)
    if r <= 0 or not (
        p["gaintype"] == "fixed" and p["biastype"] == "affine" and p["gainprm"][0] == -p["biasprm"][1]
    ):
        return "", None
    if p["dyntype"] == "integrator":
        what = "act"
    elif p["dyntype"] in ("none", "filterexact"):
        what = "ctrl"
    else:
        raise _error(
            el,
            f"{who}: inheritrange works on position and intvelocity actuators only (this one has "
            f"dyntype {p['dyntype']!r}); give ctrlrange instead",
        )
    if el.tag in ("position", "intvelocity") and f"{what}range" in el.attrib:
        if "inheritrange" in el.attrib:
            raise _error(el, f"{who}: {what}range and inheritrange cannot both be given; keep one")
        return "", None
    if j.given_range is None:
        raise _error(
            el,
            f"{who}: inheritrange takes the range of joint {j.name!r}, which has none; give the "
            f"joint a range or the actuator a {what}range",
        )
    lo, hi = j.given_range
    mean, radius = 0.5 * (hi + lo), 0.5 * (hi - lo) * r
    return what, (mean - radius, mean + radius)


def _limited(
    el: _El,
    a: dict[str, str],
    what: str,
    comp: _Compiler,
    who: str,
    inherited: tuple[float, float] | None = None,
) -> tuple[float, float] | None:
    """``<what>range`` (or the range ``inherited`` from the joint by ``inheritrange``) if
    ``<what>limited`` (``auto``: when a range is given, as MuJoCo's ``autolimits``)."""
    rng = _floats(el, a, f"{what}range", 2, (0.0, 0.0)) if inherited is None else inherited
    limited = _choice(el, a, f"{what}limited", ("true", "false", "auto"), "auto")
    given = inherited is not None or not (rng[0] == 0 and rng[1] == 0)
    if limited == "auto":
        if given and not comp.autolimits:
            how = " (inherited from its joint by inheritrange)" if inherited is not None else ""
            raise _error(
                el,
                f'{who} has {what}range{how} but not {what}limited; set <compiler autolimits="true">, '
                f'give {what}limited="true" or "false", or remove the range',
            )
        on = given
    else:
        on = limited == "true"
    if not on:
        return None
    if rng[0] >= rng[1]:
        raise _error(el, f"{who}: {what}range[0] must be smaller than {what}range[1] (got {rng})")
    return float(rng[0]), float(rng[1])


def _add_actuators(
    sj: Any,
    root: _El,
    reader: _Reader,
    defaults: _Defaults,
    comp: _Compiler,
    forces: Any,
    joint_mobods: dict[str, MobilizedBody],
    ignored: dict[str, int],
    notes: list[str],
    off: bool,
    tendons: dict[str, _TendonSpec] | None = None,
    mechanics: tuple[Any, Any, dict[str, Coordinate]] | None = None,
) -> dict[str, Any]:
    """MuJoCo's actuators on hinge and slide joints as ``Force.CoordinateActuator``s and on
    tendons as ``Force.TendonActuator``s, in the file's order; the others are named in a
    note and counted as ignored. ``mechanics`` (system, matter, coordinates) gives a
    muscle's ``acc0``."""
    tendons = tendons or {}
    at_qpos0: list[Any] = []  # (M, tendon Jacobians, u indices) at qpos0, made once when needed

    def acc0(gear: float, j: _Joint | None, t: _TendonSpec | None) -> float:
        """MuJoCo's ``actuator_acc0``: ``|M^-1 moment|`` at qpos0 (the default State)."""
        assert mechanics is not None
        system, matter, coordinates = mechanics
        if not at_qpos0:  # the mechanics do not change as actuators are added

            def mass_and_jacobians(s: Any) -> tuple[Any, Any]:
                s = system.realize(s, Stage.POSITION)
                return matter.calc_mass_matrix(s), matter.calc_tendon_jacobians(s) if tendons else None

            s0 = system.realize_topology()
            M, J = jax.jit(mass_and_jacobians)(s0)  # one program: compiles in 2/3 of the time
            M, J = np.asarray(M), None if J is None else np.asarray(J)
            at_qpos0.extend((M, J, {k: c.u_index(s0) for k, c in coordinates.items()}))
        M, J, u_index = at_qpos0
        if t is not None:
            moment = gear * J[t.handle.index]
        else:
            assert j is not None
            moment = np.zeros(M.shape[0])
            moment[u_index[j.name]] = gear
        return float(np.linalg.norm(np.linalg.solve(M, moment)))

    joints = {j.name: j for j in reader.joints}
    out: dict[str, Any] = {}
    skipped: list[str] = []
    index = 0
    for sec in (c for c in root.children if c.tag == "actuator"):
        for el in sec.children:
            name = el.get("name") or f"actuator#{index}"
            index += 1
            who = f"actuator {name!r}"
            if el.tag in _UNMODELLED_ACTUATORS or el.tag not in _ACTUATORS:
                why = _UNMODELLED_ACTUATORS.get(el.tag, f"an unknown actuator element <{el.tag}>")
                _count(ignored, f"actuator <{el.tag}>")
                skipped.append(f"{name} ({why})")
                continue
            cls = el.get("class") or "main"
            p = _actuator_base()
            defaults.of(el, el.tag, cls)  # an unknown class: a clear error
            for tag, attrs in defaults.classes[cls].items():
                if tag in _ACTUATORS:
                    _apply_actuator(tag, el, attrs, p)
            _apply_actuator(el.tag, el, el.attrib, p)
            a = p["attrs"]
            if p["negative"]:
                notes.append(
                    f"{who}: negative muscle {', '.join(p['negative'])} left at the default, as MuJoCo "
                    "does (it reads a negative value as not given)"
                )
            target = next((k for k in ("joint", "jointinparent", "tendon") if k in el.attrib), None)
            if target is None:
                kind = next((k for k in ("site", "cranksite", "body") if k in el.attrib), "no target")
                _count(ignored, f"actuator on a {kind}")
                skipped.append(f"{name} (transmission through a {kind}; joints and tendons are modelled)")
                continue
            if target == "tendon":
                tname = el.attrib["tendon"]
                if tname not in tendons:
                    raise _error(el, f"{who}: unknown tendon {tname!r}")
                problem = _tendon_actuator_problem(el, a, p)
                if problem:
                    _count(ignored, "actuator (unmodelled parameters)")
                    skipped.append(f"{name} ({problem})")
                    continue
                t = tendons[tname]
                muscle = _muscle_kwargs(
                    el,
                    a,
                    p,
                    comp,
                    who,
                    (t.range[0], t.range[1]) if t.limited else None,
                    lambda: acc0(float(p["gear"][0]), None, t),
                )
                if isinstance(muscle, str):
                    _count(ignored, "muscle without lengthrange")
                    skipped.append(f"{name} ({muscle})")
                    continue
                out[name] = _tendon_actuator(sj, el, a, p, comp, forces, t.handle, name, off, muscle)
                continue
            jname = el.attrib[target]
            if jname not in joints:
                raise _error(el, f"{who}: unknown joint {jname!r}")
            j = joints[jname]
            problem = None
            if j.type not in ("hinge", "slide"):
                _count(ignored, f"actuator on a {j.type} joint")
                skipped.append(
                    f"{name} (on the {j.type} joint {jname!r}; hinge and slide joints are modelled)"
                )
                continue
            if p["gaintype"] not in _GAINTYPES or p["biastype"] not in _BIASTYPES:
                problem = (
                    f"gaintype {p['gaintype']!r} / biastype {p['biastype']!r}; fixed, affine and muscle "
                    "are modelled"
                )
            elif p["dyntype"] not in _DYNTYPES:
                problem = (
                    f"dyntype {p['dyntype']!r}; none, integrator, filter, filterexact and muscle are modelled"
                )
            elif p["dampratio"]:
                problem = "dampratio (give kv instead: kv = 2 dampratio sqrt(kp m))"
            elif _flag(el, a, "actearly", False):
                problem = 'actearly="true"'
            elif int(_number(el, a, "actdim", -1)) > 1:
                problem = "actdim > 1"
            elif unknown := sorted(set(a) - _ACTUATOR_ATTRS - _ACTUATOR_ATTRS_NO_EFFECT):
                problem = f"attribute{'s' * (len(unknown) > 1)} {', '.join(unknown)} not modelled"
            elif _number(el, a, "delay", 0.0) > 0:
                problem = "delay (a delayed control is not modelled)"
            elif any(_floats(el, a, "damping", 3, np.zeros(3), at_most=True) != 0):
                problem = "actuator damping (give the joint damping instead: damping x gear^2)"
            elif _number(el, a, "armature", 0.0) != 0:
                problem = "actuator armature (give the joint armature instead: armature x gear^2)"
            if problem:
                _count(ignored, "actuator (unmodelled parameters)")
                skipped.append(f"{name} ({problem})")
                continue
            if np.any(p["gainprm"][3:] != 0) and p["gaintype"] == "affine":
                raise _error(el, f"{who}: gainprm terms past the third are not used by an affine gain")
            muscle = _muscle_kwargs(
                el,
                a,
                p,
                comp,
                who,
                j.range if j.limited else None,
                lambda: acc0(float(p["gear"][0]), j, None),
            )
            if isinstance(muscle, str):
                _count(ignored, "muscle without lengthrange")
                skipped.append(f"{name} ({muscle})")
                continue
            dyn = p["dyntype"]
            which, inherited = _inherited_range(el, a, p, j, who)
            ctrl = _limited(el, a, "ctrl", comp, who, inherited if which == "ctrl" else None)
            act = None
            if dyn != "none":
                act = _limited(el, a, "act", comp, who, inherited if which == "act" else None)
            try:
                act_el = sj.Force.CoordinateActuator(
                    forces,
                    joint_mobods[jname],
                    0,
                    gear=float(p["gear"][0]),
                    control_range=ctrl,
                    force_range=_limited(el, a, "force", comp, who),
                    dynamics=dyn,
                    time_constant=max(float(p["dynprm"][0]), _MINVAL)
                    if dyn in ("filter", "filterexact")
                    else 1.0,
                    activation_range=act,
                    name=name,
                    **muscle,
                )
            except ValueError as e:
                raise _error(el, str(e)) from None
            if off:
                act_el.set_disabled_by_default(True)
            out[name] = act_el
    if skipped:
        notes.append(
            f"{len(skipped)} actuators not modelled (no control slot; model.actuators lists the ones "
            f"that are): {'; '.join(skipped[:6])}{' ...' if len(skipped) > 6 else ''}"
        )
    return out


def _add_equalities(
    sj: Any,
    root: _El,
    reader: _Reader,
    defaults: _Defaults,
    matter: Any,
    by_id: list[MobilizedBody],
    joint_mobods: dict[str, MobilizedBody],
    ignored: dict[str, int],
    tendons: dict[str, _TendonSpec] | None = None,
    soft_rows: list[tuple] | None = None,
) -> tuple[dict[str, Any], bool]:
    """``<equality>`` elements as constraints; also whether the default State satisfies
    them all by construction. With ``soft_rows`` (``contact=True``), joint and tendon
    equalities are appended there instead, as ``(kind, name, obj1, obj2, polycoef, solref,
    solimp, active)`` for MuJoCo's soft rows."""
    tendons = tendons or {}
    bodies = {b.name: b for b in reader.bodies}
    joints = {j.name: j for j in reader.joints}
    sites = {name: (b, X) for b in reader.bodies for name, _, _, X in b.sites}
    # body poses in the world at qpos0 (joints contribute nothing there)
    X0: list[_Frame] = [_IDENTITY]
    for b in reader.bodies[1:]:
        assert b.parent is not None
        X0.append(_compose(X0[b.parent.id], b.X))

    def body_of(el: _El, attr: str, default: str | None) -> _Body:
        name = el.get(attr, default)
        if name is None:
            raise _error(el, f'<{el.tag}> needs {attr}="..." naming a body')
        if name not in bodies:
            raise _error(el, f"{attr}={name!r} is not a body of this model ({len(bodies) - 1} bodies)")
        return bodies[name]

    def site_of(el: _El, attr: str) -> tuple[_Body, _Frame]:
        name = el.get(attr)
        if name not in sites:
            raise _error(el, f"{attr}={name!r} is not a site of this model ({len(sites)} sites)")
        return sites[name]

    def joint_of(el: _El, attr: str) -> _Joint:
        name = el.get(attr)
        if name not in joints:
            raise _error(el, f"{attr}={name!r} is not a joint of this model ({len(joints)} joints)")
        j = joints[name]
        if j.type not in ("hinge", "slide"):
            raise _error(
                el, f"{attr}={name!r} is a {j.type} joint; a joint equality needs hinge or slide joints"
            )
        return j

    def tendon_of(el: _El, attr: str) -> _TendonSpec:
        name = el.get(attr)
        if name not in tendons:
            raise _error(el, f"{attr}={name!r} is not a tendon of this model ({len(tendons)} tendons)")
        return tendons[name or ""]

    def fixed_terms(t: _TendonSpec) -> list[tuple[MobilizedBody, float, float]]:
        """A fixed tendon's terms: (the joint's mobilized body, coef, the joint's qpos0)."""
        out = []
        for c in t.el.children:
            j = joints[c.get("joint") or ""]
            out.append((joint_mobods[j.name], _number(c, c.attrib, "coef", 1.0), j.ref))
        return out

    out: dict[str, Any] = {}
    satisfied = True
    eq_id = 0
    for section in (c for c in root.children if c.tag == "equality"):
        for el in section.children:
            own = el.attrib
            attrs = {**defaults.of(el, "equality", own.get("class", "main")), **own}
            name = own.get("name") or f"{el.tag}#{eq_id}"
            eq_id += 1
            if name in out:
                raise _error(el, f"repeated equality name {name!r}")
            try:
                if el.tag == "connect":
                    if "site1" in own or "site2" in own:
                        (b1, X1), (b2, X2) = site_of(el, "site1"), site_of(el, "site2")
                        p1, p2 = X1[1], X2[1]
                        satisfied = False
                    else:
                        b1, b2 = body_of(el, "body1", None), body_of(el, "body2", "world")
                        p1 = _floats(el, attrs, "anchor", 3)
                        # the anchor on body 2 is where body 1's anchor is at qpos0 (MuJoCo's set0)
                        R2, o2 = X0[b2.id]
                        p2 = R2.T @ (X0[b1.id][0] @ p1 + X0[b1.id][1] - o2)
                    if soft_rows is not None:
                        soft_rows.append(("connect", name, b1, p1, b2, p2, *_solparams(el, attrs),
                                          _flag(el, attrs, "active", True)))  # fmt: skip
                        continue
                    con = sj.Constraint.Ball(by_id[b1.id], p1, by_id[b2.id], p2)
                elif el.tag == "weld":
                    if "site1" in own or "site2" in own:
                        (b1, F1), (b2, F2) = site_of(el, "site1"), site_of(el, "site2")
                        satisfied = False
                    else:
                        b1, b2 = body_of(el, "body1", None), body_of(el, "body2", "world")
                        anchor = _floats(el, attrs, "anchor", 3, (0.0, 0.0, 0.0))
                        rel = _floats(el, attrs, "relpose", 7, (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0))
                        if np.any(
                            rel[3:] != 0
                        ):  # user relative pose: body 2's anchor and orientation in body 1
                            F1 = (quat_to_rot(rel[3:] / np.linalg.norm(rel[3:])), rel[:3])
                            satisfied = False
                        else:  # the relative pose at qpos0 (MuJoCo's set0)
                            X_21 = _compose(_invert(X0[b1.id]), X0[b2.id])
                            F1 = (X_21[0], X_21[0] @ anchor + X_21[1])
                        F2 = (np.eye(3), anchor)
                    if _number(el, attrs, "torquescale", 1.0) != 1.0:
                        _count(ignored, "weld torquescale")
                    con = sj.Constraint.Weld(by_id[b1.id], sj.Transform(*F1), by_id[b2.id], sj.Transform(*F2))
                elif el.tag == "joint":
                    j1 = joint_of(el, "joint1")
                    j2 = joint_of(el, "joint2") if el.get("joint2") else None
                    c = _floats(el, attrs, "polycoef", 5, (0.0, 1.0, 0.0, 0.0, 0.0), at_most=True)
                    if j2 is not None and j2.name == j1.name:
                        raise _error(el, f"joint1 and joint2 are the same joint {j1.name!r}")
                    if soft_rows is not None:
                        soft_rows.append(("joint", name, j1, j2, c, *_solparams(el, attrs),
                                          _flag(el, attrs, "active", True)))  # fmt: skip
                        continue
                    if c[0] != 0.0:
                        satisfied = False
                    con = _joint_coupler(sj, matter, c, j1, j2, joint_mobods)
                elif el.tag == "tendon" and tendons:
                    t1 = tendon_of(el, "tendon1")
                    t2 = tendon_of(el, "tendon2") if el.get("tendon2") else None
                    c = _floats(el, attrs, "polycoef", 5, (0.0, 1.0, 0.0, 0.0, 0.0), at_most=True)
                    if t2 is not None and t2.name == t1.name:
                        raise _error(el, f"tendon1 and tendon2 are the same tendon {t1.name!r}")
                    if soft_rows is not None:
                        soft_rows.append(("tendon", name, t1, t2, c, *_solparams(el, attrs),
                                          _flag(el, attrs, "active", True)))  # fmt: skip
                        continue
                    if any(t.handle.kind != "fixed" for t in (t1, t2) if t is not None):
                        _count(
                            ignored,
                            "equality tendon on a spatial tendon (load_mjcf(..., contact=True) models it)",
                        )
                        continue
                    if c[0] != 0.0:
                        satisfied = False
                    con = _tendon_coupler(
                        sj, matter, c, fixed_terms(t1), None if t2 is None else fixed_terms(t2)
                    )
                else:
                    _count(ignored, f"equality {el.tag}")
                    continue
            except ValueError as e:
                if isinstance(e, ModelFileError):
                    raise
                raise _error(el, str(e)) from None
            if not _flag(el, attrs, "active", True):
                con.set_disabled_by_default(True)
            out[name] = con
    return out, satisfied


def _solparams(el: _El, attrs: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """An equality's ``solref`` and ``solimp`` (MuJoCo's defaults; fewer numbers allowed)."""
    return (
        _floats(el, attrs, "solref", 2, (0.02, 1.0), at_most=True),
        _floats(el, attrs, "solimp", 5, (0.9, 0.95, 0.001, 0.5, 2.0), at_most=True),
    )


def _joint_coupler(
    sj: Any, matter: Any, c: np.ndarray, j1: _Joint, j2: _Joint | None, joint_mobods: dict[str, MobilizedBody]
) -> Any:
    """``q1 - ref1 = c0 + c1 d + c2 d^2 + c3 d^3 + c4 d^4`` with ``d = q2 - ref2`` (MuJoCo's
    joint equality, measured from qpos0)."""
    y0 = j1.ref
    c0, c1, c2, c3, c4 = (float(v) for v in c)
    if j2 is None:
        return sj.Constraint.CoordinateCoupler(matter, lambda q: q[0] - y0 - c0, [joint_mobods[j1.name]], [0])
    x0 = j2.ref

    def f(q: Any) -> Any:
        d = q[1] - x0
        return q[0] - y0 - (c0 + d * (c1 + d * (c2 + d * (c3 + d * c4))))

    return sj.Constraint.CoordinateCoupler(matter, f, [joint_mobods[j1.name], joint_mobods[j2.name]], [0, 0])


def _tendon_coupler(
    sj: Any,
    matter: Any,
    c: np.ndarray,
    t1: list[tuple[MobilizedBody, float, float]],
    t2: list[tuple[MobilizedBody, float, float]] | None,
) -> Any:
    """``L1 - L1_0 = c0 + c1 d + c2 d^2 + c3 d^3 + c4 d^4`` with ``d = L2 - L2_0`` for fixed
    tendons ``L = sum coef q`` (MuJoCo's tendon equality, lengths measured from qpos0;
    without tendon 2, ``L1 - L1_0 = c0``), as a ``CoordinateCoupler`` on their joints."""
    c0, c1, c2, c3, c4 = (float(v) for v in c)
    mobods: list[MobilizedBody] = []
    for b, _, _ in t1 + (t2 or []):
        if b not in mobods:
            mobods.append(b)

    def terms(t: list[tuple[MobilizedBody, float, float]]) -> tuple[np.ndarray, np.ndarray, float]:
        idx = np.array([mobods.index(b) for b, _, _ in t], dtype=int)
        coef = np.array([k for _, k, _ in t], dtype=float)
        return idx, coef, float(sum(k * r for _, k, r in t))

    i1, k1, L10 = terms(t1)
    second = None if t2 is None else terms(t2)

    def f(q: Any) -> Any:
        r = q[i1] @ k1 - L10 - c0
        if second is None:
            return r
        i2, k2, L20 = second
        d = q[i2] @ k2 - L20
        return r - d * (c1 + d * (c2 + d * (c3 + d * c4)))

    return sj.Constraint.CoordinateCoupler(matter, f, mobods, [0] * len(mobods))


# ----------------------------------------------------------------------------- tendons


class _TendonSpec:
    """A ``<tendon>`` child's attributes (defaults applied) next to its ``sj.Tendon``."""

    __slots__ = ("el", "name", "handle", "stiffness", "damping", "springlength", "limited", "range",
                 "margin", "solreflimit", "solimplimit", "frictionloss", "armature",
                 "force_limited")  # fmt: skip

    def __init__(self, el: _El, name: str, handle: Any, attrs: dict[str, str], comp: _Compiler):
        self.el, self.name, self.handle = el, name, handle
        self.stiffness = _number(el, attrs, "stiffness", 0.0)
        self.damping = _number(el, attrs, "damping", 0.0)
        if self.stiffness < 0 or self.damping < 0:
            raise _error(el, f"tendon {name!r}: stiffness and damping must be >= 0")
        sl = _floats(el, attrs, "springlength", 2, (-1.0, -1.0), at_most=True)
        if "springlength" in attrs and len(attrs["springlength"].split()) == 1:
            sl = sl[:1]
        self.springlength = (float(sl[0]), float(sl[-1]))
        if self.springlength[0] != -1 and self.springlength[0] > self.springlength[1]:
            raise _error(el, f"tendon {name!r}: springlength's lower value exceeds its upper one")
        self.range = tuple(float(x) for x in _floats(el, attrs, "range", 2, (0.0, 0.0)))
        lim = attrs.get("limited", "auto")
        if lim == "auto":
            self.limited = bool(comp.autolimits) and "range" in attrs
        else:
            self.limited = _flag(el, attrs, "limited", False)
        self.margin = _number(el, attrs, "margin", 0.0)
        self.solreflimit = _floats(el, attrs, "solreflimit", 2, (0.02, 1.0))
        self.solimplimit = _floats(el, attrs, "solimplimit", 5, (0.9, 0.95, 0.001, 0.5, 2.0))
        self.frictionloss = _number(el, attrs, "frictionloss", 0.0)
        self.armature = _number(el, attrs, "armature", 0.0)
        frc = _floats(el, attrs, "actuatorfrcrange", 2, (0.0, 0.0))
        flim = attrs.get("actuatorfrclimited", "auto")
        self.force_limited = flim == "true" or (
            flim == "auto" and bool(comp.autolimits) and bool(np.any(frc))
        )


def _add_tendons(
    sj: Any, root: _El, reader: _Reader, defaults: _Defaults, comp: _Compiler, meshes: _Meshes,
    matter: Any, by_id: list[MobilizedBody], coordinates: dict[str, Coordinate], notes: list[str],
) -> dict[str, _TendonSpec]:  # fmt: skip
    """MuJoCo's ``<tendon>`` section: an ``sj.Tendon`` per ``<fixed>`` (joint terms) and
    ``<spatial>`` (sites, wrap geoms with side sites, pulleys), in file order. A side site
    outside its wrap geom gets a note: simjax wraps as MuJoCo's published ``mju_wrap``
    does, and MuJoCo 4.0.1 decides some of those wraps differently (measured: about a
    quarter of random planar poses)."""
    sites: dict[str, tuple[int, np.ndarray]] = {}
    geoms: dict[str, tuple[int, _El, dict[str, str], dict[str, str], _Frame]] = {}
    for body in reader.bodies:
        for name, pos, _, _ in body.sites:
            sites[name] = (body.id, np.asarray(pos, float))
        for el, own, dflt, X_frame in body.geoms:
            if own.get("name"):
                geoms[own["name"]] = (body.id, el, own, dflt, X_frame)
    joints = {j.name: j for j in reader.joints}
    specs: dict[str, _TendonSpec] = {}
    for sec in (c for c in root.children if c.tag == "tendon"):
        for el in sec.children:
            if el.tag not in ("fixed", "spatial"):
                raise _error(el, f"unknown tendon element <{el.tag}> (MuJoCo has <fixed> and <spatial>)")
            own = el.attrib
            attrs = {**defaults.of(el, "tendon", own.get("class", "main")), **own}
            name = own.get("name") or f"tendon#{len(specs)}"
            if name in specs:
                raise _error(el, f"repeated tendon name {name!r}")
            h = sj.Tendon(matter, name)
            for c in el.children:
                who = f"tendon {name!r} <{c.tag}>"
                if el.tag == "fixed":
                    if c.tag != "joint":
                        raise _error(c, f"{who}: a fixed tendon holds <joint joint coef> elements only")
                    j = joints.get(c.get("joint") or "")
                    if j is None:
                        raise _error(c, f"{who}: no joint named {c.get('joint')!r}")
                    if j.type not in ("hinge", "slide"):
                        raise _error(
                            c,
                            f"{who}: joint {j.name!r} is a {j.type} joint; "
                            "a fixed tendon needs hinge or slide joints",
                        )
                    h.append_joint(coordinates[j.name], _number(c, c.attrib, "coef", 1.0))
                elif c.tag == "site":
                    if c.get("site") not in sites:
                        raise _error(c, f"{who}: no site named {c.get('site')!r}")
                    b, pos = sites[c.get("site") or ""]
                    h.append_site(by_id[b], pos)
                elif c.tag == "geom":
                    if c.get("geom") not in geoms:
                        raise _error(c, f"{who}: no geom named {c.get('geom')!r}")
                    b, gel, gown, gdflt, X_frame = geoms[c.get("geom") or ""]
                    gtype, size, R, pos = _geom_placement(gel, gown, gdflt, X_frame, comp, meshes)
                    if gtype not in ("sphere", "cylinder"):
                        raise _error(
                            c,
                            f"{who}: geom {c.get('geom')!r} is a {gtype}; "
                            "tendons wrap spheres and cylinders only",
                        )
                    side = None
                    if c.get("sidesite"):
                        if c.get("sidesite") not in sites:
                            raise _error(c, f"{who}: no site named {c.get('sidesite')!r} (sidesite)")
                        sb, spos = sites[c.get("sidesite") or ""]
                        side = (by_id[sb], spos)
                        if sb != b or np.linalg.norm(R.T @ (spos - pos)) >= size[0]:
                            notes.append(
                                f"tendon {name!r}: side site {c.get('sidesite')!r} of wrap geom "
                                f"{c.get('geom')!r} lies outside the geom (or on another body): wrapped as "
                                "MuJoCo's published mju_wrap does; MuJoCo 4.0.1 wraps some poses "
                                "differently (side sites inside the geom, and geoms without one, agree)"
                            )
                    h.append_geom(by_id[b], gtype, float(size[0]), position=pos, rotation=R, side=side)
                elif c.tag == "pulley":
                    divisor = _number(c, c.attrib, "divisor", 0.0)
                    if not divisor > 0:
                        raise _error(c, f"{who}: a pulley's divisor must be > 0")
                    h.append_pulley(divisor)
                else:
                    raise _error(c, f"{who}: a spatial tendon holds <site>, <geom> and <pulley> elements")
            try:
                h._check()
            except ValueError as e:
                raise _error(el, str(e)) from None
            specs[name] = _TendonSpec(el, name, h, attrs, comp)
    return specs


def _add_tendon_forces(
    sj: Any, system: Any, forces: Any, specs: dict[str, _TendonSpec], passive: bool, contact: bool,
    ignored: dict[str, int], joints: list[_Joint], coordinates: dict[str, Coordinate],
) -> None:  # fmt: skip
    """MuJoCo's tendon ``stiffness``/``springlength``/``damping`` as ``sj.TendonSpringDamper``
    (a ``springlength`` of -1: the tendon's length at MuJoCo's ``qpos_spring``, hinge and
    slide joints at their ``springref``, as MuJoCo's compiler sets it);
    what is not modelled is counted in ``ignored``, naming the part."""
    springs = [s for s in specs.values() if s.stiffness > 0 or s.damping > 0]
    for s in specs.values():
        if s.frictionloss > 0:
            _count(ignored, "tendon frictionloss (MuJoCo's friction-loss row)")
        if s.armature > 0:
            _count(ignored, "tendon armature (inertia along the tendon)")
        if s.force_limited:
            _count(ignored, "tendon actuatorfrcrange (the clamp of its actuators' total force)")
        if s.limited and not contact:
            _count(ignored, "tendon range (MuJoCo's soft limit row; load_mjcf(..., contact=True))")
    if not springs:
        return
    if not passive:
        _count(ignored, "tendon stiffness/damping (passive=False)", len(springs))
        return
    lengths = None
    if any(s.springlength[0] == -1 for s in springs):
        state = system.realize_topology()
        q = np.array(state.q)
        for j in joints:
            if j.type in ("hinge", "slide"):
                q[coordinates[j.name].q_index(state)] = j.springref
        state = system.realize(state.with_q(q), Stage.POSITION)
        lengths = np.asarray(system.get_matter_subsystem().calc_tendon_lengths(state))
    for s in springs:
        lo, hi = s.springlength
        if lo == -1:
            assert lengths is not None
            lo = hi = float(lengths[s.handle.index])
        sj.TendonSpringDamper(forces, s.handle, s.stiffness, (lo, hi), s.damping)


def _muscle_kwargs(
    el: _El, a: dict[str, str], p: dict[str, Any], comp: _Compiler, who: str,
    limit: tuple[float, float] | None, acc0: Callable[[], float],
) -> dict[str, Any] | str:  # fmt: skip
    """The gain, bias and muscle keywords of ``Force.CoordinateActuator`` for the general
    parameters ``p``; for a muscle (gain or bias ``muscle``) its ``length_range`` as MuJoCo's
    compiler sets it (``mj_setLengthRange``: the ``lengthrange`` given when it is increasing
    and ``useexisting``; with ``uselimit`` the joint's or tendon's range ``limit`` when it is
    limited, copied as it is, gear not applied) and ``acc0`` (``|M^-1 moment|`` at qpos0);
    a string saying why not where MuJoCo would find the length range by simulation."""
    out: dict[str, Any] = {
        "gain": p["gainprm"][:3] if p["gaintype"] == "affine" else np.array([p["gainprm"][0], 0.0, 0.0]),
        "bias": p["biasprm"][:3] if p["biastype"] == "affine" else np.zeros(3),
    }
    if p["dyntype"] == "muscle":
        out["muscle_dynamics"] = p["dynprm"][:3]
    if "muscle" not in (p["gaintype"], p["biastype"]):
        return out
    for kind, prm in (("gain", p["gainprm"]), ("bias", p["biasprm"])):
        if p[f"{kind}type"] != "muscle":
            continue
        if prm[0] >= prm[1]:
            raise _error(el, f"{who}: range[0]<range[1] required in muscle (got {prm[0]:g}, {prm[1]:g})")
        if prm[4] >= 1 or prm[5] <= 1:
            raise _error(el, f"{who}: lmin<1<lmax required in muscle (got lmin={prm[4]:g}, lmax={prm[5]:g})")
        if min(prm[3], prm[6], prm[7], prm[8]) <= 0:
            raise _error(
                el,
                f"{who}: positive scale, vmax, fpmax, fvmax required in muscle (got {prm[3]:g}, {prm[6]:g}, "
                f"{prm[7]:g}, {prm[8]:g})",
            )
        out[kind] = "muscle"
    out["muscle"] = p["gainprm"][:9] if p["gaintype"] == "muscle" else p["biasprm"][:9]
    out["muscle_bias"] = p["biasprm"][:9] if p["biastype"] == "muscle" else None
    given = tuple(float(x) for x in _floats(el, a, "lengthrange", 2, (0.0, 0.0)))
    if comp.lr_mode == "none" or (comp.lr_useexisting and given[0] < given[1]):
        lr = given
    elif comp.lr_uselimit and limit is not None:
        lr = limit
    else:
        return (
            "a muscle without lengthrange: MuJoCo's compiler finds it by simulation (mj_setLengthRange), "
            'which simjax does not do; give lengthrange="lo hi" (MuJoCo\'s m.actuator_lengthrange), or '
            '<compiler><lengthrange uselimit="true"/> for a muscle on a limited joint or tendon'
        )
    out["length_range"] = lr
    out["acc0"] = acc0()
    return out


def _tendon_actuator_problem(el: _El, a: dict[str, str], p: dict[str, Any]) -> str | None:
    """Why an actuator on a tendon is not modelled (None: it is)."""
    if p["gaintype"] not in _GAINTYPES or p["biastype"] not in _BIASTYPES:
        return (
            f"gaintype {p['gaintype']!r} / biastype {p['biastype']!r}; fixed, affine and muscle are modelled"
        )
    if p["dyntype"] not in _DYNTYPES:
        return f"dyntype {p['dyntype']!r}; none, integrator, filter, filterexact and muscle are modelled"
    if p["dampratio"]:
        return "dampratio (give kv instead)"
    if _flag(el, a, "actearly", False):
        return 'actearly="true"'
    if int(_number(el, a, "actdim", -1)) > 1:
        return "actdim > 1"
    if unknown := sorted(set(a) - _ACTUATOR_ATTRS - _ACTUATOR_ATTRS_NO_EFFECT):
        return f"attribute{'s' * (len(unknown) > 1)} {', '.join(unknown)} not modelled"
    if _number(el, a, "delay", 0.0) > 0:
        return "delay (a delayed control is not modelled)"
    if any(_floats(el, a, "damping", 3, np.zeros(3), at_most=True) != 0) or _number(el, a, "armature", 0.0):
        return "actuator damping/armature on a tendon"
    if _number(el, a, "inheritrange", 0.0):
        return "inheritrange on a tendon actuator"
    return None


def _tendon_actuator(
    sj: Any, el: _El, a: dict[str, str], p: dict[str, Any], comp: _Compiler, forces: Any, tendon: Any,
    name: str, off: bool, muscle: dict[str, Any],
) -> Any:  # fmt: skip
    """``Force.TendonActuator`` of a ``general``-like actuator on a tendon (``muscle``: the
    gain, bias and muscle keywords from :func:`_muscle_kwargs`)."""
    who = f"actuator {name!r}"
    dyn = p["dyntype"]
    act = _limited(el, a, "act", comp, who) if dyn != "none" else None
    try:
        element = sj.Force.TendonActuator(
            forces,
            tendon,
            gear=float(p["gear"][0]),
            control_range=_limited(el, a, "ctrl", comp, who),
            force_range=_limited(el, a, "force", comp, who),
            dynamics=dyn,
            time_constant=max(float(p["dynprm"][0]), _MINVAL) if dyn in ("filter", "filterexact") else 1.0,
            activation_range=act,
            name=name,
            **muscle,
        )
    except ValueError as e:
        raise _error(el, str(e)) from None
    if off:
        element.set_disabled_by_default(True)
    return element
