"""The static contact candidate list a Model holds (frozen records built by
``realize_topology()`` from the contact surfaces on the bodies, see
:mod:`simjax.system.contact`), read by the collision driver
(:mod:`simjax.dynamics.detection`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Contact slots a pair kind's kernel returns.
SLOTS = {
    ("plane", "sphere"): 1,
    ("plane", "capsule"): 2,
    ("plane", "ellipsoid"): 1,
    ("plane", "cylinder"): 4,
    ("plane", "box"): 4,
    ("sphere", "sphere"): 1,
    ("sphere", "capsule"): 1,
    ("sphere", "cylinder"): 1,
    ("sphere", "box"): 1,
    ("capsule", "capsule"): 2,
    ("capsule", "box"): 2,
    ("box", "box"): 8,
}


@dataclass(frozen=True, eq=False)
class ContactGroup:
    """The candidates of one pair kind, stacked (static NumPy arrays, ``n`` candidates).

    ``surf1``/``surf2`` (n,) surface indices (geometry 1 has the lower kind);
    ``body1``/``body2`` (n,); ``R1``, ``R2`` (n, 3, 3) and ``p1``, ``p2`` (n, 3) the
    kernel frames in their bodies; ``size1``, ``size2`` (n, 3); ``margin``, ``gap`` (n,)
    the pair's; ``condim`` (n,), ``friction`` (n, 5), ``solref`` (n, 2), ``solimp`` (n, 5)
    mixed as MuJoCo's ``mj_contactParam`` (or the explicit pair's).
    """

    kind1: str
    kind2: str
    surf1: np.ndarray
    surf2: np.ndarray
    body1: np.ndarray
    body2: np.ndarray
    R1: np.ndarray
    p1: np.ndarray
    size1: np.ndarray
    R2: np.ndarray
    p2: np.ndarray
    size2: np.ndarray
    margin: np.ndarray
    gap: np.ndarray
    condim: np.ndarray
    friction: np.ndarray
    solref: np.ndarray
    solimp: np.ndarray

    @property
    def slots(self) -> int:
        """Contact slots per candidate."""
        return SLOTS[(self.kind1, self.kind2)]


@dataclass(frozen=True, eq=False)
class ContactCandidates:
    """The frozen candidate list of a Model: ``groups`` (one :class:`ContactGroup` per
    pair kind with candidates, in MuJoCo's kind order), ``surface_names`` and
    ``surface_bodies`` per surface, and ``unsupported``: the candidate pairs (surface
    indices) of kinds without a kernel, left out of ``find_contacts``."""

    groups: tuple[ContactGroup, ...]
    surface_names: tuple[str, ...]
    surface_bodies: tuple[int, ...]
    unsupported: tuple[tuple[int, int], ...]

    @property
    def key(self) -> tuple:
        """What a compiled program depends on: kinds, counts, indices and every number
        (frames, sizes, margins, contact parameters), which the kernels hold as constants."""
        return tuple(
            (g.kind1, g.kind2)
            + tuple(
                (f, a.shape, a.dtype.str, a.tobytes())
                for f in g.__dataclass_fields__
                if isinstance(a := getattr(g, f), np.ndarray)
            )
            for g in self.groups
        )

    @property
    def num_candidates(self) -> int:
        """Number of candidate pairs (with a kernel)."""
        return sum(len(g.surf1) for g in self.groups)


@dataclass(frozen=True, eq=False)
class MujocoConstraintOptions:
    """How a Model's accelerations are solved MuJoCo's way (a loader's ``contact=True``):
    soft contact rows for the candidate list's slots (``contact``) and soft limit rows for
    the limited hinge and slide joints and tendons, soft rows for joint and tendon
    equalities, MuJoCo's primal problem solved by Newton's method
    (:mod:`simjax.constraints.soft`).

    ``cone`` ``"pyramidal"`` or ``"elliptic"``; ``impratio``; ``timestep`` (for
    ``refsafe``: a standard ``solref`` time constant at least ``2 timestep``);
    ``iterations`` and ``tolerance`` of the Newton solve; ``body_invweight`` (nb, 2) MuJoCo's
    ``body_invweight0`` per body (translation, rotation) at ``qpos0``; per limited joint
    ``limit_q``/``limit_u`` (quaternion-mode indices), ``limit_lower``/``limit_upper``,
    ``limit_margin``, ``limit_solref`` (n, 2), ``limit_solimp`` (n, 5) and
    ``limit_invweight`` (MuJoCo's ``dof_invweight0``). Static: they compile in."""

    body_invweight: np.ndarray
    cone: str = "pyramidal"
    impratio: float = 1.0
    timestep: float = 0.002
    iterations: int = 100
    tolerance: float = 1e-10
    refsafe: bool = True
    contact: bool = True
    limit_q: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    limit_u: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    limit_lower: np.ndarray = field(default_factory=lambda: np.zeros(0))
    limit_upper: np.ndarray = field(default_factory=lambda: np.zeros(0))
    limit_margin: np.ndarray = field(default_factory=lambda: np.zeros(0))
    limit_solref: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    limit_solimp: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    limit_invweight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: MuJoCo's tendon limit rows: per limited tendon its index in the Model's TendonSet,
    #: range, margin, solref, solimp and ``tendon_invweight0``
    tendon_index: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    tendon_lower: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tendon_upper: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tendon_margin: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tendon_solref: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    tendon_solimp: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    tendon_invweight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: MuJoCo's joint and tendon equality rows (one each, two-sided): per equality whether
    #: it couples tendons, its objects (q indices of hinge/slide joints or tendon indices;
    #: ``eq_obj2 = -1``: none), the joints' u indices (-1 for tendons), their values at
    #: qpos0, ``polycoef`` (n, 5), solref, solimp and the summed ``dof_invweight0`` /
    #: ``tendon_invweight0`` (:func:`simjax.constraints.soft.equality_rows`)
    eq_tendon: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    eq_obj1: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    eq_obj2: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    eq_u1: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    eq_u2: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    eq_ref1: np.ndarray = field(default_factory=lambda: np.zeros(0))
    eq_ref2: np.ndarray = field(default_factory=lambda: np.zeros(0))
    eq_polycoef: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    eq_solref: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    eq_solimp: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    eq_invweight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: MuJoCo's connect rows (three each): the mobilized bodies (0: Ground), the anchors in
    #: their frames (n, 3), solref, solimp, the bodies' translational ``body_invweight0`` summed
    connect_body1: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    connect_body2: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    connect_anchor1: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    connect_anchor2: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    connect_solref: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    connect_solimp: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    connect_invweight: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.cone not in ("pyramidal", "elliptic"):
            raise ValueError(f"cone must be 'pyramidal' or 'elliptic', got {self.cone!r}")
        if not (self.impratio > 0 and self.timestep > 0 and self.iterations >= 1 and self.tolerance > 0):
            raise ValueError("impratio, timestep and tolerance must be > 0 and iterations >= 1")

    @property
    def key(self) -> tuple:
        """Everything the compiled program depends on (the numbers compile in)."""

        def arr(a: np.ndarray) -> tuple:
            a = np.asarray(a)
            return (a.shape, a.tobytes())

        return (
            self.cone, float(self.impratio), float(self.timestep), int(self.iterations),
            float(self.tolerance), bool(self.refsafe), bool(self.contact), arr(self.body_invweight),
            *(arr(getattr(self, f"limit_{k}")) for k in
              ("q", "u", "lower", "upper", "margin", "solref", "solimp", "invweight")),
            *(arr(getattr(self, f"tendon_{k}")) for k in
              ("index", "lower", "upper", "margin", "solref", "solimp", "invweight")),
            *(arr(getattr(self, f"eq_{k}")) for k in
              ("tendon", "obj1", "obj2", "u1", "u2", "ref1", "ref2", "polycoef", "solref", "solimp",
               "invweight")),
            *(arr(getattr(self, f"connect_{k}")) for k in
              ("body1", "body2", "anchor1", "anchor2", "solref", "solimp", "invweight")),
        )  # fmt: skip
