"""Collision driver: every candidate pair of a Model at a State's body poses.

One ``jax.vmap`` of the pair kind's kernel (:mod:`simjax.dynamics.collision`) per group of
the static candidate list (:class:`simjax.model.contact.ContactCandidates`), so the
result has the same shapes whatever touches: pure, ``jit``/``vmap``/``grad`` friendly.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import collision as col


class Contacts(NamedTuple):
    """All contact slots of a Model (``n`` = the candidates' slots, in group order).

    Attributes:
        surface: (n, 2) surface indices of each slot (static NumPy): geometry 1, geometry 2.
        dist: (n,) signed distance (m), ``+inf`` for a slot with no contact.
        pos: (n, 3) contact point in Ground (midpoint between the surfaces).
        frame: (n, 3, 3) rows ``[normal, tangent1, tangent2]``, the normal from surface 1
            to surface 2 (MuJoCo's ``contact.frame``).
        active: (n,) whether the slot holds a contact: ``dist <= margin + gap`` (those
            MuJoCo reports in ``data.contact``).
        includemargin: (n,) the pair's ``margin`` (static), as MuJoCo 4.0.1 sets
            ``contact.includemargin`` (measured: not ``margin - gap``; a contact with
            ``dist >= includemargin`` is excluded from the constraint).
        condim: (n,) static; friction (n, 5), solref (n, 2), solimp (n, 5): the pair's
            contact parameters (static NumPy), as MuJoCo's ``contact.dim/friction/...``.
    """

    surface: np.ndarray
    dist: jax.Array
    pos: jax.Array
    frame: jax.Array
    active: jax.Array
    includemargin: np.ndarray
    condim: np.ndarray
    friction: np.ndarray
    solref: np.ndarray
    solimp: np.ndarray


def find_contacts(candidates: Any, R_GB: jax.Array, p_GB: jax.Array) -> Contacts:
    """Evaluate every candidate of ``candidates`` at the body poses ``R_GB`` (nb, 3, 3),
    ``p_GB`` (nb, 3).

    Each group's geometry frames are composed with their bodies' poses, then its kernel is
    vmapped over the group with the pair's ``margin + gap`` (MuJoCo passes this to its
    collision functions); a slot is ``active`` when its distance is within that bound.
    """
    if candidates is None or not candidates.groups:
        z = np.zeros(0)
        return Contacts(
            np.zeros((0, 2), int),
            jnp.zeros(0),
            jnp.zeros((0, 3)),
            jnp.zeros((0, 3, 3)),
            jnp.zeros(0, bool),
            z,
            np.zeros(0, int),
            np.zeros((0, 5)),
            np.zeros((0, 2)),
            np.zeros((0, 5)),
        )
    dist, pos, frame, active = _evaluate(candidates, R_GB, p_GB)
    static = []
    for g in candidates.groups:
        rep = functools.partial(np.repeat, repeats=g.slots, axis=0)
        static.append(
            (
                np.stack([rep(g.surf1), rep(g.surf2)], axis=1),
                rep(g.margin),
                rep(g.condim),
                rep(g.friction),
                rep(g.solref),
                rep(g.solimp),
            )
        )
    surf, incl, condim, fr, sr, si = (np.concatenate([p[i] for p in static]) for i in range(6))
    return Contacts(surf, dist, pos, frame, active, incl, condim, fr, sr, si)


@functools.partial(jax.jit, static_argnums=0)
def _evaluate(candidates: Any, R_GB: jax.Array, p_GB: jax.Array) -> tuple[jax.Array, ...]:
    """dist, pos, frame, active of every slot (one compiled program per candidate list)."""
    parts = []
    for g in candidates.groups:
        kernel = getattr(col, f"{g.kind1}_{g.kind2}")
        Rb1, Rb2 = R_GB[g.body1], R_GB[g.body2]
        mat1 = jnp.einsum("nij,njk->nik", Rb1, g.R1)
        mat2 = jnp.einsum("nij,njk->nik", Rb2, g.R2)
        pos1 = p_GB[g.body1] + jnp.einsum("nij,nj->ni", Rb1, g.p1)
        pos2 = p_GB[g.body2] + jnp.einsum("nij,nj->ni", Rb2, g.p2)
        bound = g.margin + g.gap
        c = jax.vmap(kernel)(
            pos1, mat1, jnp.asarray(g.size1), pos2, mat2, jnp.asarray(g.size2), jnp.asarray(bound)
        )
        dist = c.dist.reshape(-1)
        parts.append(
            (dist, c.pos.reshape(-1, 3), c.frame.reshape(-1, 3, 3), dist <= np.repeat(bound, g.slots))
        )
    return tuple(jnp.concatenate([p[i] for p in parts]) for i in range(4))


class PairContacts(NamedTuple):
    """Chosen candidate pairs of a Model, one contact slot each (``m`` pairs, in the order
    asked for), with geometry 1 and 2 as the candidate list holds them (a plane first).

    Attributes:
        surface: (m, 2) surface indices (static NumPy), geometry 1 then geometry 2.
        body: (m, 2) their bodies (static).
        size: (m, 2, 3) their sizes (static, MuJoCo's ``geom_size``).
        kind: (m, 2) their geometry kinds (static strings).
        dist: (m,) signed distance (m).
        pos: (m, 3) contact point in Ground (midpoint between the surfaces).
        normal: (m, 3) unit normal from geometry 1 to geometry 2.
    """

    surface: np.ndarray
    body: np.ndarray
    size: np.ndarray
    kind: np.ndarray
    dist: jax.Array
    pos: jax.Array
    normal: jax.Array


def pair_contacts(
    candidates: Any, pairs: Any, R_GB: jax.Array, p_GB: jax.Array, who: str = ""
) -> PairContacts:
    """Evaluate the candidate pairs ``pairs`` (a static sequence of surface-index pairs,
    either order) at the body poses: one vmapped kernel per pair kind, for pair kinds with
    one contact slot (a plane or a sphere with a sphere). Static shapes: a pair out of
    contact keeps its slot with its positive distance. ``ValueError`` naming ``who`` when
    a pair is not a candidate of the Model or has no one-slot kernel."""
    where: dict[frozenset, tuple[int, int]] = {}
    for gi, g in enumerate(candidates.groups if candidates is not None else ()):
        for r, (a, b) in enumerate(zip(g.surf1.tolist(), g.surf2.tolist(), strict=True)):
            where.setdefault(frozenset((a, b)), (gi, r))
    rows: dict[int, list[int]] = {}
    order = []
    for a, b in pairs:
        hit = where.get(frozenset((int(a), int(b))))
        if hit is None:
            raise ValueError(
                f"{who}: surfaces {a} and {b} are not a contact candidate pair of this System; "
                "realize_topology() again after adding the force (it registers its pairs)"
            )
        g = candidates.groups[hit[0]]
        if g.slots != 1:
            raise ValueError(
                f"{who}: surfaces {a} and {b} are a {g.kind1}-{g.kind2} pair; this force models "
                "point contact of a sphere with a sphere or a half-space only"
            )
        rows.setdefault(hit[0], []).append(hit[1])
        order.append((hit[0], len(rows[hit[0]]) - 1))
    parts = []
    for gi, rs in rows.items():
        g, idx = candidates.groups[gi], np.asarray(rs, dtype=int)
        kernel = getattr(col, f"{g.kind1}_{g.kind2}")
        Rb1, Rb2 = R_GB[g.body1[idx]], R_GB[g.body2[idx]]
        dt = R_GB.dtype  # a float32 State stays float32

        def a(x, dt=dt):
            return jnp.asarray(x, dt)

        c = jax.vmap(kernel)(
            p_GB[g.body1[idx]] + jnp.einsum("nij,nj->ni", Rb1, a(g.p1[idx])),
            jnp.einsum("nij,njk->nik", Rb1, a(g.R1[idx])),
            a(g.size1[idx]),
            p_GB[g.body2[idx]] + jnp.einsum("nij,nj->ni", Rb2, a(g.p2[idx])),
            jnp.einsum("nij,njk->nik", Rb2, a(g.R2[idx])),
            a(g.size2[idx]),
            jnp.zeros(len(idx), dt),
        )
        parts.append(
            (
                np.stack([g.surf1[idx], g.surf2[idx]], axis=1),
                np.stack([g.body1[idx], g.body2[idx]], axis=1),
                np.stack([g.size1[idx], g.size2[idx]], axis=1),
                np.array([[g.kind1, g.kind2]] * len(idx)),
                c.dist[:, 0],
                c.pos[:, 0],
                c.frame[:, 0, 0].astype(dt),
            )
        )
    start = dict(zip(rows, np.cumsum([0] + [len(v) for v in rows.values()])[:-1], strict=True))
    perm = np.asarray([start[gi] + k for gi, k in order], dtype=int)
    if not parts:
        z = jnp.zeros(0, R_GB.dtype)
        return PairContacts(
            np.zeros((0, 2), int), np.zeros((0, 2), int), np.zeros((0, 2, 3)), np.zeros((0, 2), str),
            z, jnp.zeros((0, 3), z.dtype), jnp.zeros((0, 3), z.dtype),
        )  # fmt: skip
    static = [np.concatenate([p[i] for p in parts])[perm] for i in range(4)]
    traced = [jnp.concatenate([p[i] for p in parts])[perm] for i in range(4, 7)]
    return PairContacts(*static, *traced)
