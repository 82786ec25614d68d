"""The static contact candidate list a Model holds (frozen records built by
``realize_topology()`` from the contact surfaces on the bodies, see
:mod:`simjax.system.contact`), read by the collision driver
(:mod:`simjax.dynamics.detection`)."""

from __future__ import annotations

from dataclasses import dataclass

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
