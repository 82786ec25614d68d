"""The equations of a custom joint written the ArtiSynth way (``sj.Coupling``, seed 001,
4.9.3–4.9.5): its bilateral rows' errors, its unilateral rows' values, the wrenches.

A coupling constrains the pose ``T_CD`` of frame C (on body A, ``X_AC``) relative to frame
D (on body B, ``X_BD``). The user's coupling object gives ``coordinates_to_tcd``,
``tcd_to_coordinates``, ``project_to_constraints`` and optionally ``update_constraints``
and ``unilateral_distances``; everything here is a function of that object and the
static ``CouplingData`` read from its declarations when the System is realized.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from .. import _spatial as sp
from .kernels import ConstraintContext


@dataclass(frozen=True)
class CouplingData:
    """A coupling's declarations, fixed at ``realize_topology()``: ``key`` (the coupling's
    ``structure_key()``: joints with equal keys are evaluated together), the bilateral
    constraints' indices and constant wrenches (None where not constant), the number of
    coordinates, the unilateral constraints' indices and the coordinate each limits (None:
    its distance comes from ``unilateral_distances``)."""

    key: Any
    bilateral: tuple[int, ...]
    constant_wrenches: tuple[tuple[float, ...] | None, ...]
    n_coordinates: int
    unilateral: tuple[int, ...]
    limited_coordinate: tuple[int | None, ...]


def coupling_data(coupling: Any) -> CouplingData:
    """The static data of a coupling's declarations (its constraint and coordinate lists)."""
    cons = coupling._constraints
    bil = tuple(i for i, c in enumerate(cons) if c["flags"] & 0x01)
    uni = tuple(i for i, c in enumerate(cons) if not c["flags"] & 0x01)
    return CouplingData(
        key=coupling.structure_key(),
        bilateral=bil,
        constant_wrenches=tuple(
            None if cons[k]["wrench"] is None else tuple(float(x) for x in cons[k]["wrench"]) for k in bil
        ),
        n_coordinates=len(coupling._coordinates),
        unilateral=uni,
        limited_coordinate=tuple(cons[k].get("coordinate") for k in uni),
    )


def rp(T: Any) -> tuple[jax.Array, jax.Array]:
    """``(R, p)`` of a coupling's Transform (a clear error for anything else)."""
    if not isinstance(T, sp.Transform):
        raise TypeError(f"a coupling's transforms must be sj.Transform, got {type(T).__name__}")
    return T.R, T.p


def coordinate_twists(coupling: Any, coords: jax.Array) -> jax.Array:
    """``H`` (6, nc): the twist ``[w; v]`` in G of each coordinate's motion,
    ``T^-1 dT/dc_i`` at ``T = coordinates_to_tcd(coords)``."""
    T = coupling.coordinates_to_tcd(coords)
    dR, dp = jax.jacfwd(lambda c: tuple(rp(coupling.coordinates_to_tcd(c))))(coords)
    w = jax.vmap(lambda d: sp.vee(T.R.T @ d), in_axes=2, out_axes=1)(dR)
    v = T.R.T @ dp
    return jnp.concatenate([w, v], axis=0)


def wrenches(coupling: Any, data: CouplingData, T_GD: sp.Transform, coords: jax.Array) -> jax.Array:
    """(nb, 6) wrenches of the bilateral constraints in G: constant ones, those
    ``update_constraints`` gives, and (at most one other) the direction orthogonal to
    the coordinate twists and the others (a generalized cross product)."""
    given = coupling.update_constraints(T_GD, coords)
    rows: list[Any] = []
    missing = []
    for k, w in zip(data.bilateral, data.constant_wrenches, strict=True):
        if w is not None:
            rows.append(jnp.asarray(w, coords.dtype))
        elif k in given:
            rows.append(jnp.asarray(given[k], coords.dtype).reshape(6))
        else:
            rows.append(None)
            missing.append(len(rows) - 1)
    if missing:
        known = [r for r in rows if r is not None]
        H = coordinate_twists(coupling, coords) if data.n_coordinates else jnp.zeros((6, 0), coords.dtype)
        V = jnp.concatenate([H] + [r[:, None] for r in known], axis=1)  # (6, 5)
        rows[missing[0]] = orthogonal_direction(V)
    return jnp.stack(rows)


def pose_error(T_GD: sp.Transform, T_CD: sp.Transform) -> jax.Array:
    """The small twist ``[w; v]`` from G to C, in G (``T_err = T_GD^-1 T_CD``)."""
    R = T_GD.R.T @ T_CD.R
    p = T_GD.R.T @ (T_CD.p - T_GD.p)
    return jnp.concatenate([0.5 * sp.vee(R - R.T), p])


def frames(param: Any) -> tuple[sp.Transform, sp.Transform]:
    """``(X_AC, X_BD)`` from the joint's parameters (``param(name)``)."""
    return (
        sp.Transform(param("X_AC_R"), param("X_AC_p")),
        sp.Transform(param("X_BD_R"), param("X_BD_p")),
    )


def transforms(coupling: Any, ctx: ConstraintContext) -> tuple[sp.Transform, sp.Transform]:
    """``(T_CD, T_GD)``: the pose of C relative to D, and its projection onto the bilateral
    constraints."""
    X_AC, X_BD = frames(ctx.param)
    X_GC = ctx.body_transform(0).compose(X_AC)
    X_GD = ctx.body_transform(1).compose(X_BD)
    T_CD = X_GD.invert().compose(X_GC)
    T_GD = coupling.project_to_constraints(T_CD)
    return T_CD, T_GD


def coordinates(coupling: Any, data: CouplingData, T_GD: sp.Transform, prev: jax.Array) -> jax.Array:
    """The coupling's coordinates of ``T_GD`` (angles nearest ``prev``)."""
    if not data.n_coordinates:
        return jnp.zeros(0, T_GD.p.dtype)
    c = coupling.tcd_to_coordinates(T_GD, prev)
    return jnp.asarray(c, T_GD.p.dtype).reshape(data.n_coordinates)


def previous_coordinates(data: CouplingData, prev_rows: jax.Array, dtype: Any) -> jax.Array:
    """The coupling's previous coordinates from its limit rows' last values (0 where a
    coordinate has no limit)."""
    out = jnp.zeros(data.n_coordinates, dtype)
    for j, i in enumerate(data.limited_coordinate):
        if i is not None:
            out = out.at[i].set(prev_rows[j])
    return out


def bilateral_errors(coupling: Any, data: CouplingData, ctx: ConstraintContext) -> jax.Array:
    """``perr_k = G_k . err``: the pose error twist weighted by the bilateral wrenches."""
    T_CD, T_GD = transforms(coupling, ctx)
    coords = coordinates(coupling, data, T_GD, jnp.zeros(data.n_coordinates, T_CD.p.dtype))
    return wrenches(coupling, data, T_GD, coords) @ pose_error(T_GD, T_CD)


def current_coordinates(coupling: Any, data: CouplingData, ctx: ConstraintContext) -> jax.Array:
    """The coordinates, angles nearest the limit rows' last values (``unilateral_prev``)."""
    _, T_GD = transforms(coupling, ctx)
    prev = previous_coordinates(data, ctx.param("unilateral_prev"), T_GD.p.dtype)
    return coordinates(coupling, data, T_GD, prev)


def unilateral_values(coupling: Any, data: CouplingData, ctx: ConstraintContext) -> jax.Array:
    """The unilateral rows' values: the limited coordinate, or the distance
    ``unilateral_distances`` gives (negative inside the inadmissible region)."""
    T_CD, T_GD = transforms(coupling, ctx)
    prev = previous_coordinates(data, ctx.param("unilateral_prev"), T_CD.p.dtype)
    coords = coordinates(coupling, data, T_GD, prev)
    dist = {}
    if any(i is None for i in data.limited_coordinate):
        dist = coupling.unilateral_distances(T_GD, T_CD, coords)
    vals = [
        coords[i] if i is not None else dist[k]
        for k, i in zip(data.unilateral, data.limited_coordinate, strict=True)
    ]
    return jnp.stack([jnp.reshape(jnp.asarray(v, T_CD.p.dtype), ()) for v in vals])


_Terms = tuple[tuple[bool, tuple[int, ...], int], ...]


def _wedge_terms(n: int = 6) -> list[list[tuple[tuple[int, ...], _Terms]]]:
    """The exterior product in R^n as sums of products: a k-vector has components on the
    k-subsets of rows; ``(w ^ v)[S] = sum over i in S of +-w[S - i] v[i]`` (the sign sorts
    ``(S - i, i)``). Entry ``k - 1`` lists, for each (k+1)-subset ``S``, its terms as
    ``(negative, S - i, i)``."""
    out = []
    for k in range(1, n - 1):
        out.append(
            [
                (S, tuple((sum(x > i for x in S) % 2 == 1, tuple(x for x in S if x != i), i) for i in S))
                for S in itertools.combinations(range(n), k + 1)
            ]
        )
    return out


_WEDGE = _wedge_terms()


def orthogonal_direction(V: jax.Array) -> jax.Array:
    """The unit vector orthogonal to the 5 columns of ``V`` (6, 5), signed by the orientation
    of ``[V, x]`` (``det [V, x] > 0``, so continuous in ``V``): the generalized cross product
    of the columns (the cofactors of a sixth column, ``x_j = (-1)^(j+1) det(V without row
    j)``), normalized. The cofactors are the exterior product ``v1 ^ ... ^ v5``, built one
    column at a time as sums of products of entries: a polynomial in ``V``, so every
    derivative is smooth, also where some 5x5 minors are singular, and the program is
    elementwise arithmetic that fuses into a few loops (no matrix factorization, which on
    a CPU is a library call each, in every derivative of the constraint rows)."""
    w: dict[tuple[int, ...], jax.Array] = {(i,): V[i, 0] for i in range(6)}
    for k, table in enumerate(_WEDGE):
        nxt = {}
        for S, terms in table:
            negative, rest, i = terms[0]
            acc = -(w[rest] * V[i, k + 1]) if negative else w[rest] * V[i, k + 1]
            for negative, rest, i in terms[1:]:
                term = w[rest] * V[i, k + 1]
                acc = acc - term if negative else acc + term
            nxt[S] = acc
        w = nxt
    x = jnp.stack([w[tuple(r for r in range(6) if r != j)] * (-1.0) ** (j + 1) for j in range(6)])
    return x / jnp.linalg.norm(x)
