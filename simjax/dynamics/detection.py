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
