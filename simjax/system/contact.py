"""Contact geometry on bodies (Simbody's ``ContactGeometry`` and ``ContactSurface``, with
MuJoCo's per-geom contact properties) and the static candidate list built from it at
``realize_topology()``.

A :class:`ContactGeometry` is a shape in its own frame (MuJoCo's conventions, see
:mod:`simjax.dynamics.collision`); a :class:`ContactSurface` is a geometry with its contact
properties; ``body.add_contact_surface(X_BS, surface)`` fixes it on a body at the frame
``X_BS``. Which surface pairs are tested (the *candidates*) is decided once, from the
topology, by MuJoCo's rules (``contact_candidates``); ``matter.find_contacts(state)``
evaluates them at a State.

Detection applies no force: compliant contact forces are the force elements
``sj.HuntCrossleyForce`` and ``sj.SmoothSphereHalfSpaceForce`` (on sphere and half-space
pairs); MuJoCo-style contact produces no force yet.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _spatial as sp
from ..model.contact import ContactCandidates, ContactGroup

#: Geometry kinds in MuJoCo's order (a pair's geometry 1 has the lower kind).
KINDS = ("plane", "sphere", "capsule", "ellipsoid", "cylinder", "box")
#: Pair kinds with a collision kernel (``simjax.dynamics.collision.<kind1>_<kind2>``).
SUPPORTED_PAIRS = frozenset(
    {
        ("plane", "sphere"),
        ("plane", "capsule"),
        ("plane", "ellipsoid"),
        ("plane", "cylinder"),
        ("plane", "box"),
        ("sphere", "sphere"),
        ("sphere", "capsule"),
        ("sphere", "cylinder"),
        ("sphere", "box"),
        ("capsule", "capsule"),
        ("capsule", "box"),
        ("box", "box"),
    }
)
MINVAL = 1e-15  # MuJoCo's mjMINVAL


class ContactGeometry:
    """A contact shape in its own frame S (Simbody's ``ContactGeometry``).

    Made by the factories ``Sphere``, ``HalfSpace``, ``Plane``, ``Capsule``, ``Box``,
    ``Ellipsoid`` and ``Cylinder``. Attributes: ``kind`` (one of :data:`KINDS`), ``size``
    (3,) as MuJoCo's ``geom_size`` and ``R_SG`` (3, 3), the orientation of the kernel's
    frame in S (the identity except for ``HalfSpace``).
    """

    __slots__ = ("kind", "size", "R_SG")

    def __init__(self, kind: str, size: Any, R_SG: Any = None):
        if kind not in KINDS:
            raise ValueError(f"ContactGeometry: unknown kind {kind!r}; use one of {KINDS}")
        s = np.zeros(3)
        v = np.atleast_1d(np.asarray(size, dtype=float))
        s[: v.size] = v
        if not np.all(np.isfinite(s)) or np.any(s[: _NSIZE[kind]] <= 0):
            raise ValueError(
                f"ContactGeometry.{_FACTORY[kind]}: sizes must be finite and positive, got {v.tolist()}"
            )
        self.kind = kind
        self.size = s
        self.R_SG = np.eye(3) if R_SG is None else np.asarray(R_SG, dtype=float)

    def __repr__(self) -> str:
        return f"ContactGeometry.{_FACTORY[self.kind]}(size={self.size[: _NSIZE[self.kind]].tolist()})"

    @staticmethod
    def Sphere(radius: float) -> ContactGeometry:  # noqa: N802 (Simbody name)
        """A sphere of ``radius`` centred at S's origin."""
        return ContactGeometry("sphere", [radius])

    @staticmethod
    def HalfSpace() -> ContactGeometry:  # noqa: N802
        """Simbody's and OpenSim's half-space: it fills ``x > 0`` of S, its outward normal
        is ``-x``."""
        # kernel frame: z = -x_S, x = z_S, y = y_S (right-handed)
        return ContactGeometry("plane", [], np.array([[0.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))

    @staticmethod
    def Plane() -> ContactGeometry:  # noqa: N802
        """MuJoCo's plane: the x-y plane of S, filling ``z < 0``, outward normal ``+z``
        (infinite, whatever MuJoCo's drawing size)."""
        return ContactGeometry("plane", [])

    @staticmethod
    def Capsule(radius: float, half_length: float) -> ContactGeometry:  # noqa: N802
        """A capsule: the points within ``radius`` of the segment ``|z| <= half_length``."""
        return ContactGeometry("capsule", [radius, half_length])

    @staticmethod
    def Box(half_lengths: Any) -> ContactGeometry:  # noqa: N802
        """A box with the given half-lengths along S's axes."""
        return ContactGeometry("box", np.broadcast_to(np.asarray(half_lengths, float), (3,)))

    @staticmethod
    def Ellipsoid(radii: Any) -> ContactGeometry:  # noqa: N802
        """An ellipsoid with semi-axes ``radii`` along S's axes."""
        return ContactGeometry("ellipsoid", np.broadcast_to(np.asarray(radii, float), (3,)))

    @staticmethod
    def Cylinder(radius: float, half_length: float) -> ContactGeometry:  # noqa: N802
        """A solid cylinder of ``radius`` along S's z, ``|z| <= half_length``."""
        return ContactGeometry("cylinder", [radius, half_length])


_NSIZE = {"plane": 0, "sphere": 1, "capsule": 2, "ellipsoid": 3, "cylinder": 2, "box": 3}
_FACTORY = {
    "plane": "Plane",
    "sphere": "Sphere",
    "capsule": "Capsule",
    "ellipsoid": "Ellipsoid",
    "cylinder": "Cylinder",
    "box": "Box",
}


@dataclass(frozen=True)
class ContactProperties:
    """MuJoCo's contact properties of a geom or a ``<pair>`` (its defaults).

    ``contype``/``conaffinity``: 32-bit masks, two surfaces are candidates when
    ``contype1 & conaffinity2`` or ``contype2 & conaffinity1`` is non-zero; ``condim``: 1,
    3, 4 or 6; ``friction``: (sliding, torsional, rolling); ``solref`` (2,), ``solimp``
    (5,); ``solmix``: the weight of this surface's solref/solimp when mixed; ``margin``
    and ``gap``: a pair's are the sums of its surfaces'; contacts are reported within
    ``margin + gap`` and take part in the constraint within ``margin`` (MuJoCo 4.0.1's
    collision driver); ``priority``: a pair takes condim, friction, solref and solimp from
    its surface of higher priority.
    """

    contype: int = 1
    conaffinity: int = 1
    condim: int = 3
    friction: tuple[float, float, float] = (1.0, 0.005, 0.0001)
    solref: tuple[float, float] = (0.02, 1.0)
    solimp: tuple[float, float, float, float, float] = (0.9, 0.95, 0.001, 0.5, 2.0)
    solmix: float = 1.0
    margin: float = 0.0
    gap: float = 0.0
    priority: int = 0


def check_properties(p: ContactProperties, who: str) -> None:
    """Refuse the values MuJoCo refuses (``ValueError`` naming ``who`` and the field)."""
    if p.condim not in (1, 3, 4, 6):
        raise ValueError(f"{who}: condim must be 1, 3, 4 or 6 (MuJoCo's values), got {p.condim}")
    if len(p.friction) != 3 or any(not np.isfinite(f) or f < 0 for f in p.friction):
        raise ValueError(f"{who}: friction must be 3 finite values >= 0, got {p.friction}")
    if len(p.solref) != 2 or not all(np.isfinite(p.solref)):
        raise ValueError(f"{who}: solref must be 2 finite values, got {p.solref}")
    if len(p.solimp) != 5 or not all(np.isfinite(p.solimp)):
        raise ValueError(f"{who}: solimp must be 5 finite values, got {p.solimp}")
    if not (0 <= p.solimp[0] <= 1 and 0 <= p.solimp[1] <= 1):
        # MuJoCo clips them into (0, 1) when it builds the constraint (dm_control uses 0)
        raise ValueError(f"{who}: solimp dmin and dmax must lie in [0, 1], got {p.solimp[:2]}")
    for k in ("margin", "gap", "solmix"):
        v = getattr(p, k)
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"{who}: {k} must be finite and >= 0, got {v}")


class ContactSurface:
    """A contact geometry with its contact properties (Simbody's ``ContactSurface``).

    Args:
        geometry: The :class:`ContactGeometry`.
        name: Optional name (the loaders use the geom's name).
        **properties: The :class:`ContactProperties` fields (MuJoCo's defaults).
    """

    def __init__(self, geometry: ContactGeometry, *, name: str | None = None, **properties: Any):
        if not isinstance(geometry, ContactGeometry):
            raise TypeError(
                f"ContactSurface: geometry must be a sj.ContactGeometry, got {type(geometry).__name__}"
            )
        self.geometry = geometry
        self.name = name
        try:
            self.properties = ContactProperties(**_tupled(properties))
        except TypeError as e:
            raise TypeError(
                f"ContactSurface {name or ''}: {e}; the fields are those of ContactProperties"
            ) from e
        check_properties(self.properties, f"ContactSurface {name or geometry!r}")


def _tupled(d: dict[str, Any]) -> dict[str, Any]:
    return {
        k: tuple(float(x) for x in v) if isinstance(v, (list, tuple, np.ndarray)) else v for k, v in d.items()
    }


@dataclass(eq=False)
class _Attached:
    body: int
    R_BS: np.ndarray
    p_BS: np.ndarray
    surface: ContactSurface


class ContactRegistry:
    """What a matter subsystem holds about contact: the surfaces on its bodies, the body
    pairs excluded, the explicit pairs and MuJoCo's ``filterparent`` switch."""

    def __init__(self) -> None:
        self.surfaces: list[_Attached] = []
        self.excluded: set[tuple[int, int]] = set()
        self.pairs: list[tuple[int, int, ContactProperties]] = []
        self.filter_parent = True
        self.mujoco: Any = None  # MujocoConstraintOptions: solved MuJoCo's way


def registry(matter: Any) -> ContactRegistry:
    """The matter subsystem's contact registry (made on first use)."""
    reg = getattr(matter, "_contact_registry", None)
    if reg is None:
        reg = ContactRegistry()
        matter._contact_registry = reg
    return reg


def add_surface(matter: Any, body: int, X_BS: Any, surface: ContactSurface) -> int:
    """Fix ``surface`` on body ``body`` at ``X_BS``; returns the surface's index."""
    if not isinstance(surface, ContactSurface):
        if isinstance(surface, ContactGeometry):
            surface = ContactSurface(surface)
        else:
            raise TypeError(
                "add_contact_surface: expected a sj.ContactSurface (or sj.ContactGeometry), "
                f"got {type(surface).__name__}"
            )
    X = X_BS if isinstance(X_BS, sp.Transform) else sp.Transform() if X_BS is None else None
    if X is None:
        raise TypeError("add_contact_surface: X_BS must be a sj.Transform (the surface frame in the body)")
    reg = registry(matter)
    reg.surfaces.append(_Attached(body, np.asarray(X.R, float), np.asarray(X.p, float), surface))
    matter._system.invalidate_topology()
    return len(reg.surfaces) - 1


# --------------------------------------------------------------------------- candidates


def _mix(a: ContactProperties, b: ContactProperties) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """MuJoCo's ``mj_contactParam``: condim, friction (5,), solref, solimp of a pair."""
    if a.priority != b.priority:
        w = a if a.priority > b.priority else b
        condim, sr, si, fr = w.condim, np.array(w.solref), np.array(w.solimp), np.array(w.friction)
    else:
        condim = max(a.condim, b.condim)
        if a.solmix >= MINVAL and b.solmix >= MINVAL:
            mix = a.solmix / (a.solmix + b.solmix)
        elif a.solmix < MINVAL and b.solmix < MINVAL:
            mix = 0.5
        else:
            mix = 0.0 if a.solmix < MINVAL else 1.0
        r1, r2 = np.array(a.solref), np.array(b.solref)
        sr = mix * r1 + (1 - mix) * r2 if (r1[0] > 0 and r2[0] > 0) else np.minimum(r1, r2)
        si = mix * np.array(a.solimp) + (1 - mix) * np.array(b.solimp)
        fr = np.maximum(np.array(a.friction), np.array(b.friction))
    return condim, np.array([fr[0], fr[0], fr[1], fr[2], fr[2]]), sr, si


def contact_candidates(
    matter: Any, parent: tuple[int, ...], nu_body: Any, mass: Any
) -> ContactCandidates | None:
    """The candidate pairs of a matter subsystem's surfaces, MuJoCo's filters applied.

    Dynamic pairs: two surfaces are candidates when their contype/conaffinity masks match,
    they are on different *weld groups* (a body joined to its parent by a mobilizer with
    no mobilities belongs to its parent's group; Ground's group is static, so two static
    surfaces never pair), their bodies' pair is not excluded, and, with ``filter_parent``
    on (MuJoCo's ``filterparent``, default), neither group is the parent group of the other
    unless that parent is Ground's. The parent group skips massless bodies with
    mobilities whose group has no mass (the links the loaders insert to chain several
    joints of one MuJoCo body). Explicit pairs are always candidates, with their own
    properties, and replace a dynamic pair of the same two surfaces. Planes never pair
    with planes. Returns None when the subsystem has no surface.
    """
    reg: ContactRegistry | None = getattr(matter, "_contact_registry", None)
    if reg is None or not reg.surfaces:
        return None
    nb = len(parent)
    weld = list(range(nb))
    for b in range(1, nb):
        if int(nu_body[b]) == 0:
            weld[b] = weld[parent[b]]
    group_mass = np.zeros(nb)
    for b in range(nb):
        group_mass[weld[b]] += float(mass[b])

    def parent_group(w: int) -> int:
        p = parent[w]
        while p > 0:
            g = weld[p]
            if group_mass[g] > 0 or g == 0:
                return g
            p = parent[g]
        return 0

    surfs = reg.surfaces
    pairs: dict[tuple[int, int], ContactProperties | None] = {}
    explicit: dict[tuple[int, int], tuple[int, int, ContactProperties | None]] = {}
    for i, j, own in reg.pairs:
        explicit[(min(i, j), max(i, j))] = (i, j, own)
    for i in range(len(surfs)):
        for j in range(i + 1, len(surfs)):
            if (i, j) in explicit:
                continue
            sa, sb = surfs[i], surfs[j]
            qa, qb = sa.surface.properties, sb.surface.properties
            if not ((qa.contype & qb.conaffinity) or (qb.contype & qa.conaffinity)):
                continue
            wa, wb = weld[sa.body], weld[sb.body]
            if wa == wb:
                continue
            if (min(sa.body, sb.body), max(sa.body, sb.body)) in reg.excluded:
                continue
            if (
                reg.filter_parent
                and wa != 0
                and wb != 0
                and (wa == parent_group(wb) or wb == parent_group(wa))
            ):
                continue
            pairs[(i, j)] = None
    ordered: list[tuple[int, int, ContactProperties | None]] = list(explicit.values())
    ordered += [(i, j, None) for (i, j) in pairs]
    by_kind: dict[tuple[str, str], list[tuple[int, int, ContactProperties | None]]] = {}
    unsupported = []
    for i, j, props in ordered:
        ki, kj = surfs[i].surface.geometry.kind, surfs[j].surface.geometry.kind
        if KINDS.index(ki) > KINDS.index(kj):
            i, j, ki, kj = j, i, kj, ki
        if ki == "plane" and kj == "plane":
            continue
        if (ki, kj) not in SUPPORTED_PAIRS:
            unsupported.append((i, j))
            continue
        by_kind.setdefault((ki, kj), []).append((i, j, props))
    groups = []
    for kind in sorted(by_kind, key=lambda k: (KINDS.index(k[0]), KINDS.index(k[1]))):
        rows = sorted(by_kind[kind], key=lambda r: (r[0], r[1]))
        cols: dict[str, list] = {
            k: [] for k in ContactGroup.__dataclass_fields__ if k not in ("kind1", "kind2")
        }
        for i, j, given in rows:
            sa, sb = surfs[i], surfs[j]
            qa, qb = sa.surface.properties, sb.surface.properties
            if given is None:
                condim, fr, sr, si = _mix(qa, qb)
                margin, gap = qa.margin + qb.margin, qa.gap + qb.gap
            else:
                condim, sr, si = given.condim, np.array(given.solref), np.array(given.solimp)
                f = given.friction
                fr = np.array(f if len(f) == 5 else [f[0], f[0], f[1], f[2], f[2]])
                margin, gap = given.margin, given.gap
            for k, v in (
                ("surf1", i),
                ("surf2", j),
                ("body1", sa.body),
                ("body2", sb.body),
                ("R1", sa.R_BS @ sa.surface.geometry.R_SG),
                ("p1", sa.p_BS),
                ("size1", sa.surface.geometry.size),
                ("R2", sb.R_BS @ sb.surface.geometry.R_SG),
                ("p2", sb.p_BS),
                ("size2", sb.surface.geometry.size),
                ("margin", margin),
                ("gap", gap),
                ("condim", condim),
                ("friction", fr),
                ("solref", sr),
                ("solimp", si),
            ):
                cols[k].append(v)
        groups.append(ContactGroup(kind[0], kind[1], **{k: np.asarray(v) for k, v in cols.items()}))
    names = tuple(s.surface.name or f"surface#{k}" for k, s in enumerate(surfs))
    if unsupported:
        kinds = sorted(
            {(surfs[i].surface.geometry.kind, surfs[j].surface.geometry.kind) for i, j in unsupported}
        )
        warnings.warn(
            f"contact: {len(unsupported)} candidate surface pairs of kinds without a collision kernel "
            f"yet ({', '.join(f'{a}-{b}' for a, b in kinds)}) are left out of find_contacts, e.g. "
            f"{names[unsupported[0][0]]!r} and {names[unsupported[0][1]]!r}",
            stacklevel=4,
        )
    return ContactCandidates(tuple(groups), names, tuple(s.body for s in surfs), tuple(unsupported))
