"""MuJoCo's soft constraint model: contact, limit and equality rows, and the primal Newton solve.

MuJoCo (its Computation chapter) finds the accelerations ``a`` minimising

    0.5 (a - a0)' M (a - a0) + sum_rows s(J a - aref)

where ``a0`` are the unconstrained accelerations, ``J`` the constraint rows, ``aref`` their
reference accelerations (from ``solref`` and the impedance of ``solimp``) and ``s`` a convex,
piecewise-quadratic cost with weights ``D = 1/R`` (``R``: the regulariser). The constraint
forces are ``-ds/djar``; ``M a = M a0 + J' force``.

Here:

* :func:`contact_rows` / :func:`limit_rows`: the rows of every contact slot of the static
  candidate list (frictionless ``condim`` 1, pyramidal or elliptic cones for ``condim``
  3, 4 and 6) and of every limited hinge or slide joint (a lower and an upper row each),
  with MuJoCo's impedance, reference acceleration (standard and direct ``solref``, refsafe
  ``timeconst >= 2 timestep``), ``includemargin`` and regulariser (its diagonal
  approximation of ``J M^-1 J'`` from the bodies' and dofs' ``invweight0``, ``impratio``).
  Rows of slots out of range (or joints away from their limits) stay, with ``D = 0``: the
  shapes are static, one compiled program for any set of contacts.
* :func:`equality_rows` / :func:`connect_rows`: MuJoCo's joint and tendon equalities
  (``polycoef``), one row each, and connects, three rows each: two-sided (``Layout.eq``:
  cost ``D jar^2 / 2`` whatever its sign), always active.
* :func:`solve`: the primal problem by Newton's method (Hessian by Cholesky, an exact line
  search on the piecewise-quadratic cost along the Newton direction), a fixed iteration cap
  inside ``jit``/``vmap``; differentiable by implicit differentiation at the optimum.

Written from MuJoCo's documentation and C source semantics (``engine_core_constraint.c``:
``getimpedance``, ``mj_makeImpedance``, ``mj_diagApprox``, ``mj_instantiateEquality``;
``engine_solver.c``), checked against MuJoCo 4.0.1's ``qacc`` and ``efc_force`` in
``tests/test_contact_mujoco.py`` and ``tests/test_equality_mujoco.py``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from ..dynamics import stages as rz
from ..dynamics.detection import Contacts, find_contacts
from ..dynamics.tendons import fixed_terms, tendon_body_gradients, tendon_lengths

MINVAL = 1e-15  # MuJoCo's mjMINVAL
MINIMP = 0.0001  # mjMINIMP
MAXIMP = 0.9999  # mjMAXIMP


@dataclass(frozen=True)
class Layout:
    """The static structure of a row set: ``uni`` the rows with a one-sided cost (limits,
    frictionless and pyramidal contact rows), ``cones`` per elliptic cone size ``d`` the rows
    of each cone ``(d, rows)`` with ``rows`` a tuple of tuples (n, d), ``eq`` the rows with
    a two-sided (quadratic) cost: equalities, always in the problem. Hashable."""

    m: int
    uni: tuple[int, ...]
    cones: tuple[tuple[int, tuple[tuple[int, ...], ...]], ...] = ()
    eq: tuple[int, ...] = ()


class Rows(NamedTuple):
    """Constraint rows (``m`` rows over ``nu`` speeds).

    Attributes:
        J: (m, nu) the rows' Jacobian: ``J u`` their velocities.
        aref: (m,) reference accelerations ``-B J u - K imp (pos - margin)``.
        R: (m,) MuJoCo's regulariser; D: (m,) ``1/R`` where the row is active, else 0.
        active: (m,) whether the row is in the problem.
        mu: per cone group (``Layout.cones``) the cones' regularised friction (n,)
            ``friction[0] / sqrt(impratio)``; friction: (n, d-1) their friction.
    """

    J: jax.Array
    aref: jax.Array
    R: jax.Array
    D: jax.Array
    active: jax.Array
    mu: tuple[jax.Array, ...]
    friction: tuple[jax.Array, ...]


# ----------------------------------------------------------------------------- parameters


def clamp_solimp(solimp: np.ndarray) -> np.ndarray:
    """``solimp`` (..., 5) clamped as MuJoCo does before use."""
    s = np.array(solimp, dtype=float, copy=True)
    s[..., 0] = np.clip(s[..., 0], MINIMP, MAXIMP)
    s[..., 1] = np.clip(s[..., 1], MINIMP, MAXIMP)
    s[..., 2] = np.maximum(0.0, s[..., 2])
    s[..., 3] = np.clip(s[..., 3], MINIMP, MAXIMP)
    s[..., 4] = np.maximum(1.0, s[..., 4])
    return s


def safe_solref(solref: np.ndarray, timestep: float, refsafe: bool = True) -> np.ndarray:
    """``solref`` (..., 2) with MuJoCo's integrator safety: a standard (positive) time
    constant at least ``2 timestep``; mixed signs replaced by the default (0.02, 1)."""
    s = np.array(solref, dtype=float, copy=True).reshape(-1, 2)
    mixed = (s[:, 0] > 0) ^ (s[:, 1] > 0)
    s[mixed] = (0.02, 1.0)
    if refsafe:
        s[:, 0] = np.where(s[:, 0] > 0, np.maximum(s[:, 0], 2.0 * timestep), s[:, 0])
    return s.reshape(np.shape(solref))


def impedance(solimp: Any, pos: jax.Array, margin: Any) -> jax.Array:
    """MuJoCo's impedance ``d(r)`` in (0, 1) at violation ``r = pos - margin``: ``dmin``
    at ``r = 0`` to ``dmax`` at ``|r| >= width``, a power-``p`` sigmoid with midpoint
    ``mid`` between (``solimp = (dmin, dmax, width, mid, p)``, clamped already). Flat
    ``(dmin + dmax)/2`` when ``dmin == dmax`` or ``width <= 1e-15``."""
    si = jnp.asarray(solimp)
    d0, d1, w, mid, p = (si[..., k] for k in range(5))
    flat = (d0 == d1) | (w <= MINVAL)
    x = jnp.abs((pos - margin) / jnp.where(flat, 1.0, w))
    xs = jnp.clip(x, 1e-300, 1.0 - 1e-16)  # in (0, 1): the power's derivative stays finite
    lo = xs**p / mid ** (p - 1.0)
    hi = 1.0 - (1.0 - xs) ** p / (1.0 - mid) ** (p - 1.0)
    y = jnp.where(p == 1.0, xs, jnp.where(xs <= mid, lo, hi))
    y = jnp.where(x >= 1.0, 1.0, jnp.where(x <= 0.0, 0.0, y))
    return jnp.where(flat, 0.5 * (d0 + d1), d0 + y * (d1 - d0))


def _kb(solref: np.ndarray, dmax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo's stiffness K and damping B per row (static): standard ``solref =
    (timeconst, dampratio)`` or direct ``(-stiffness, -damping)``."""
    tc, dr = solref[..., 0], solref[..., 1]
    K = np.where(
        tc > 0,
        1.0 / np.maximum(MINVAL, dmax**2 * tc**2 * dr**2),
        -tc / np.maximum(MINVAL, dmax**2),
    )
    B = np.where(dr > 0, 2.0 / np.maximum(MINVAL, dmax * tc), -dr / np.maximum(MINVAL, dmax))
    return K, B


def _soft_parameters(
    solref: Any, solimp: Any, n: int, timestep: float, refsafe: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` rows' clamped ``solimp`` (n, 5) and their stiffness K and damping B from
    ``solref`` (refsafe applied): the static data every one-row-per-entry kind shares."""
    sr = safe_solref(np.asarray(solref, float).reshape(n, 2), timestep, refsafe)
    si = clamp_solimp(np.asarray(solimp, float).reshape(n, 5))
    K, B = _kb(sr, si[:, 1])
    return si, K, B


# ----------------------------------------------------------------------------- rows


@dataclass(frozen=True, eq=False)
class ContactLayout:
    """Static row data of the contact slots (built once per candidate list by
    :func:`contact_layout`): per row its slot, its coefficients on the slot's 6 frame rows
    ``[normal, tangent1, tangent2, spin, roll1, roll2]``, ``diagA`` (MuJoCo's diagonal
    approximation) and kind; per slot its first row and row count."""

    slot: np.ndarray  # (m,)
    coef: np.ndarray  # (m, 6)
    diagA: np.ndarray  # (m,) before the per-contact R adjustment
    R_scale: np.ndarray  # (m,) R of the row = R_scale * R(first row of the slot)
    first: np.ndarray  # (m,) the slot's first row
    friction_row: np.ndarray  # (m,) an elliptic cone's friction row (K = 0, pos = 0)
    start: np.ndarray  # (n,)
    count: np.ndarray  # (n,)
    layout_uni: tuple[int, ...]
    layout_cones: tuple[tuple[int, tuple[tuple[int, ...], ...]], ...]
    cone_mu: tuple[np.ndarray, ...]
    cone_friction: tuple[np.ndarray, ...]
    solref: np.ndarray  # (n, 2) after refsafe
    solimp: np.ndarray  # (n, 5) clamped
    K: np.ndarray  # (m,)
    B: np.ndarray  # (m,)


def contact_layout(
    ct: Contacts, surface_bodies: Any, body_invweight: np.ndarray, cone: str, impratio: float,
    timestep: float, refsafe: bool = True,
) -> ContactLayout:  # fmt: skip
    """The static rows of the contact slots of ``ct`` (its static fields only are read):
    ``cone`` ``"pyramidal"`` (MuJoCo's default) or ``"elliptic"``, ``body_invweight``
    (nb, 2) MuJoCo's ``body_invweight0`` (translation, rotation) per body."""
    if cone not in ("pyramidal", "elliptic"):
        raise ValueError(f"cone must be 'pyramidal' or 'elliptic', got {cone!r}")
    n = len(ct.condim)
    bodies = np.asarray(surface_bodies, dtype=int)[np.asarray(ct.surface, dtype=int).reshape(-1, 2)]
    iw = np.asarray(body_invweight, float)
    tran = iw[bodies[:, 0], 0] + iw[bodies[:, 1], 0]
    rot = iw[bodies[:, 0], 1] + iw[bodies[:, 1], 1]
    solref = safe_solref(np.asarray(ct.solref, float).reshape(n, 2), timestep, refsafe)
    solimp = clamp_solimp(np.asarray(ct.solimp, float).reshape(n, 5))
    K0, B0 = _kb(solref, solimp[:, 1])
    imp_ratio = max(MINVAL, float(impratio))
    slot, coef, diagA, rscale, fric, K, B = ([] for _ in range(7))
    start, count = np.zeros(n, int), np.zeros(n, int)
    uni: list[int] = []
    cones: dict[int, list[tuple[int, ...]]] = {}
    cmu: dict[int, list[float]] = {}
    cfr: dict[int, list[np.ndarray]] = {}
    row = 0
    for k in range(n):
        d = int(ct.condim[k])
        fr = np.asarray(ct.friction[k], float)
        start[k] = row
        if d == 1:
            rows = [(np.eye(6)[0], tran[k], 1.0, False)]
        elif cone == "pyramidal":
            mu2 = fr[0] ** 2 / imp_ratio
            rows = []
            for j in range(1, d):
                e = np.zeros(6)
                e[0], e[j] = 1.0, fr[j - 1]
                f = np.zeros(6)
                f[0], f[j] = 1.0, -fr[j - 1]
                dA = tran[k] + fr[j - 1] ** 2 * (tran[k] if j < 3 else rot[k])
                rows += [(e, dA, 2.0 * mu2, False), (f, dA, 2.0 * mu2, False)]
        else:
            rows = [(np.eye(6)[0], tran[k], 1.0, False)]
            for j in range(1, d):
                scale = 1.0 / imp_ratio * (1.0 if j == 1 else fr[0] ** 2 / fr[j - 1] ** 2)
                rows.append((np.eye(6)[j], tran[k] if j < 3 else rot[k], scale, True))
        for c, dA, rs, fri in rows:
            slot.append(k)
            coef.append(c)
            diagA.append(dA)
            rscale.append(rs)
            fric.append(fri)
            K.append(0.0 if fri else K0[k])
            B.append(B0[k])
        count[k] = len(rows)
        idx = tuple(range(row, row + len(rows)))
        if d > 1 and cone == "elliptic":
            cones.setdefault(d, []).append(idx)
            cmu.setdefault(d, []).append(fr[0] / np.sqrt(imp_ratio))
            cfr.setdefault(d, []).append(fr[: d - 1])
        else:
            uni += list(idx)
        row += len(rows)
    m = row
    first_arr = np.repeat(start, count) if n else np.zeros(0, int)
    dims = sorted(cones)
    return ContactLayout(
        slot=np.asarray(slot, int).reshape(m),
        coef=np.asarray(coef, float).reshape(m, 6),
        diagA=np.asarray(diagA, float).reshape(m),
        R_scale=np.asarray(rscale, float).reshape(m),
        first=first_arr,
        friction_row=np.asarray(fric, bool).reshape(m),
        start=start,
        count=count,
        layout_uni=tuple(uni),
        layout_cones=tuple((d, tuple(cones[d])) for d in dims),
        cone_mu=tuple(np.asarray(cmu[d], float) for d in dims),
        cone_friction=tuple(np.asarray(cfr[d], float).reshape(-1, d - 1) for d in dims),
        solref=solref,
        solimp=solimp,
        K=np.asarray(K, float).reshape(m),
        B=np.asarray(B, float).reshape(m),
    )


def contact_rows(cl: ContactLayout, ct: Contacts, cdof: jax.Array, moves: np.ndarray, u: jax.Array) -> Rows:
    """The contact rows at a State. A row's Jacobian is that of the relative velocity of
    the contact point on body 2 and on body 1 along its direction ``t`` (a combination of
    the contact frame's rows, ``ContactLayout.coef``), plus the relative angular velocity
    along its ``r`` (torsion, rolling): with ``cdof`` (nu, 6) the dofs' motion ``[w; v]``
    about Ground's origin, ``J = t . v + (p x t + r) . w`` over the dofs that move body 2
    minus those that move body 1 (``moves`` (n, nu), static: -1, 0, 1). ``u`` the speeds.
    A row is active when its slot is (``ct.active``) and ``dist < includemargin``."""
    m = cl.slot.size
    dt = cdof.dtype
    if m == 0:
        z = jnp.zeros(0, dt)
        return Rows(jnp.zeros((0, u.size), dt), z, z, z, jnp.zeros(0, bool), (), ())
    frame = jnp.where(jnp.isfinite(ct.frame), ct.frame, 0.0)[cl.slot]  # (m, 3, 3)
    point = jnp.where(jnp.isfinite(ct.pos), ct.pos, 0.0)[cl.slot]
    coef = jnp.asarray(cl.coef, dt)
    t = jnp.einsum("rk,rkj->rj", coef[:, :3], frame)
    r = jnp.einsum("rk,rkj->rj", coef[:, 3:], frame)
    J = t @ cdof[:, 3:].T + (jnp.cross(point, t) + r) @ cdof[:, :3].T
    J = J * jnp.asarray(moves[cl.slot], dt)
    dist = ct.dist[cl.slot]
    margin = jnp.asarray(ct.includemargin, dt)[cl.slot]
    on = ct.active[cl.slot] & (dist < margin)
    dist = jnp.where(on, dist, margin)  # (out of range: +inf; kept finite for gradients)
    imp = impedance(jnp.asarray(cl.solimp[cl.slot], dt), dist, margin)
    R0 = jnp.maximum(MINVAL, (1.0 - imp) * jnp.asarray(cl.diagA[cl.first], dt) / imp)
    R = jnp.asarray(cl.R_scale, dt) * R0
    fr = jnp.asarray(cl.friction_row)
    pos = jnp.where(fr, 0.0, dist - margin)
    aref = -jnp.asarray(cl.B, dt) * (J @ u) - jnp.asarray(cl.K, dt) * imp * pos
    D = jnp.where(on, 1.0 / R, 0.0)
    return Rows(
        J, aref, R, D, on,
        tuple(jnp.asarray(x, dt) for x in cl.cone_mu),
        tuple(jnp.asarray(x, dt) for x in cl.cone_friction),
    )  # fmt: skip


@dataclass(frozen=True, eq=False)
class LimitLayout:
    """Static data of the joint-limit rows: per limited hinge or slide joint its q and u
    index, range, margin, ``solref`` (refsafe applied), ``solimp`` (clamped) and
    ``dof_invweight0``; two rows each (lower, upper)."""

    q: np.ndarray
    u: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    margin: np.ndarray
    solimp: np.ndarray
    K: np.ndarray
    B: np.ndarray
    invweight: np.ndarray


def limit_layout(
    q: Any, u: Any, lower: Any, upper: Any, margin: Any, solref: Any, solimp: Any, invweight: Any,
    timestep: float, refsafe: bool = True,
) -> LimitLayout:  # fmt: skip
    """The static data of limit rows (one entry per limited joint)."""
    n = len(q)
    si, K, B = _soft_parameters(solref, solimp, n, timestep, refsafe)
    return LimitLayout(
        np.asarray(q, int), np.asarray(u, int), np.asarray(lower, float), np.asarray(upper, float),
        np.asarray(margin, float), si, K, B, np.asarray(invweight, float),
    )  # fmt: skip


def limit_rows(ll: LimitLayout, q: jax.Array, u: jax.Array) -> Rows:
    """Rows ``2i`` (lower: ``dist = q - lower``, ``J = +1``) and ``2i+1`` (upper: ``dist =
    upper - q``, ``J = -1``) of limited joint ``i``; active when ``dist < margin``."""
    n = ll.q.size
    dt = q.dtype
    nu = u.size
    if n == 0:
        z = jnp.zeros(0, dt)
        return Rows(jnp.zeros((0, nu), dt), z, z, z, jnp.zeros(0, bool), (), ())
    v = q[ll.q]
    lower, upper = jnp.asarray(ll.lower, dt), jnp.asarray(ll.upper, dt)
    dist = jnp.stack([v - lower, upper - v], axis=1).reshape(-1)
    sign = np.tile([1.0, -1.0], n)
    uu = np.repeat(ll.u, 2)
    J = jnp.zeros((2 * n, nu), dt).at[np.arange(2 * n), uu].set(jnp.asarray(sign, dt))
    margin = jnp.asarray(np.repeat(ll.margin, 2), dt)
    on = dist < margin
    imp = impedance(jnp.asarray(np.repeat(ll.solimp, 2, axis=0), dt), dist, margin)
    R = jnp.maximum(MINVAL, (1.0 - imp) * jnp.asarray(np.repeat(ll.invweight, 2), dt) / imp)
    B, K = (jnp.asarray(np.repeat(x, 2), dt) for x in (ll.B, ll.K))
    aref = -B * (jnp.asarray(sign, dt) * u[uu]) - K * imp * (dist - margin)
    D = jnp.where(on, 1.0 / R, 0.0)
    return Rows(J, aref, R, D, on, (), ())


def stack_rows(parts: list[tuple[Rows, Layout]]) -> tuple[Rows, Layout]:
    """Row sets one after the other (their layouts' indices shifted)."""
    off = 0
    uni: list[int] = []
    eq: list[int] = []
    cones: dict[int, list[tuple[int, ...]]] = {}
    mus: dict[int, list[jax.Array]] = {}
    frs: dict[int, list[jax.Array]] = {}
    for rows, lay in parts:
        uni += [off + i for i in lay.uni]
        eq += [off + i for i in lay.eq]
        for (d, idx), mu, fr in zip(lay.cones, rows.mu, rows.friction):
            cones.setdefault(d, []).extend(tuple(off + i for i in r) for r in idx)
            mus.setdefault(d, []).append(mu)
            frs.setdefault(d, []).append(fr)
        off += lay.m
    dims = sorted(cones)
    cat = functools.partial(jnp.concatenate, axis=0)
    rows = Rows(
        cat([r.J for r, _ in parts]),
        cat([r.aref for r, _ in parts]),
        cat([r.R for r, _ in parts]),
        cat([r.D for r, _ in parts]),
        cat([r.active for r, _ in parts]),
        tuple(cat(mus[d]) for d in dims),
        tuple(cat(frs[d]) for d in dims),
    )
    return rows, Layout(off, tuple(uni), tuple((d, tuple(cones[d])) for d in dims), tuple(eq))


# ----------------------------------------------------------------------------- cost


def _cone_terms(
    jar: jax.Array, D: jax.Array, mu: jax.Array, fr: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Cost (n,), force (n, d) and Hessian (n, d, d) in jar-space of elliptic cones (n, d):
    MuJoCo's three zones (top: free; bottom: every row quadratic; middle: the distance to
    the cone, quadratic)."""
    s = jnp.concatenate([mu[:, None], fr], axis=1)  # (n, d): U = s * jar
    U = s * jar
    N = U[:, 0]
    T2 = jnp.sum(U[:, 1:] ** 2, axis=1)
    T = jnp.sqrt(jnp.where(T2 > 0, T2, 1.0)) * (T2 > 0)
    top = (N >= mu * T) | ((T <= 0) & (N >= 0))
    bottom = ~top & ((mu * N + T <= 0) | ((T <= 0) & (N < 0)))
    mid = ~top & ~bottom
    Ts = jnp.where(mid, T, 1.0)
    Dm = D[:, 0] / (mu * mu * (1.0 + mu * mu))
    NmT = N - mu * Ts
    f0 = -Dm * NmT * mu
    f_mid = jnp.concatenate([f0[:, None], -(f0 / Ts)[:, None] * U[:, 1:] * fr], axis=1)
    d = jar.shape[1]
    # middle zone's Hessian in U-space, then scaled by s s' Dm
    Ut = U[:, 1:]
    Hu = jnp.zeros((jar.shape[0], d, d), jar.dtype)
    Hu = Hu.at[:, 0, 0].set(1.0)
    Hu = Hu.at[:, 0, 1:].set(-(mu / Ts)[:, None] * Ut)
    Hu = Hu.at[:, 1:, 0].set(-(mu / Ts)[:, None] * Ut)
    blk = (mu * N / Ts**3)[:, None, None] * Ut[:, :, None] * Ut[:, None, :]
    blk = blk + ((mu * mu - mu * N / Ts)[:, None, None] * jnp.eye(d - 1, dtype=jar.dtype)[None])
    Hu = Hu.at[:, 1:, 1:].set(blk)
    H_mid = Dm[:, None, None] * s[:, :, None] * s[:, None, :] * Hu
    cost = jnp.where(bottom, 0.5 * jnp.sum(D * jar * jar, axis=1), jnp.where(mid, 0.5 * Dm * NmT**2, 0.0))
    force = jnp.where(bottom[:, None], -D * jar, jnp.where(mid[:, None], f_mid, 0.0))
    H = jnp.where(
        bottom[:, None, None],
        D[:, :, None] * jnp.eye(d, dtype=jar.dtype)[None],
        jnp.where(mid[:, None, None], H_mid, 0.0),
    )
    return cost, force, H


def _take(x: jax.Array, idx: Any) -> jax.Array:
    """``x[idx]`` for static indices: a slice (no gather) when they are a contiguous run."""
    ix = np.asarray(idx, int)
    if ix.size and np.array_equal(ix.ravel(), np.arange(ix.flat[0], ix.flat[0] + ix.size)):
        return x[int(ix.flat[0]) : int(ix.flat[0]) + ix.size].reshape(ix.shape + x.shape[1:])
    return x[ix]


def _contiguous(layout: Layout) -> bool:
    """The one-sided rows first, then the two-sided ones, then each cone group's rows in
    order (what ``solve`` works in): the terms are then assembled by concatenation, not
    scatters."""
    return list(_order(layout)) == list(range(layout.m))


def _order(layout: Layout) -> np.ndarray:
    return np.asarray(
        list(layout.uni) + list(layout.eq) + [i for _, idx in layout.cones for r in idx for i in r], int
    )


def _terms(
    layout: Layout, jar: jax.Array, D: jax.Array, mu: tuple, fr: tuple
) -> tuple[jax.Array, jax.Array, jax.Array, tuple[jax.Array, ...]]:
    """Constraint cost, force (m,) = -d cost / d jar, the Hessian's diagonal over the
    one-sided and two-sided rows (m,) and its blocks per cone group."""
    uni = np.asarray(layout.uni, int)
    ju, Du = _take(jar, uni), _take(D, uni)
    on = ju < 0
    cost = 0.5 * jnp.sum(jnp.where(on, Du * ju * ju, 0.0))
    fu = jnp.where(on, -Du * ju, 0.0)
    hu = jnp.where(on, Du, 0.0)
    eq = np.asarray(layout.eq, int)
    je, he = _take(jar, eq), _take(D, eq)  # two-sided: quadratic whatever the sign
    cost = cost + 0.5 * jnp.sum(he * je * je)
    fe = -he * je
    parts = []
    blocks = []
    for (_, idx), m_, f_ in zip(layout.cones, mu, fr):
        c, f, H = _cone_terms(_take(jar, idx), _take(D, idx), m_, f_)
        cost = cost + jnp.sum(c)
        parts.append(f)
        blocks.append(H)
    if _contiguous(layout):
        force = jnp.concatenate([fu, fe, *(f.reshape(-1) for f in parts)])
        hd = jnp.concatenate([hu, he, jnp.zeros(layout.m - uni.size - eq.size, jar.dtype)])
    else:
        force = jnp.zeros_like(jar).at[uni].set(fu).at[eq].set(fe)
        hd = jnp.zeros_like(jar).at[uni].set(hu).at[eq].set(he)
        for (_, idx), f in zip(layout.cones, parts):
            force = force.at[np.asarray(idx, int)].set(f)
    return cost, force, hd, tuple(blocks)


def _hessian(layout: Layout, M: jax.Array, J: jax.Array, hd: jax.Array, blocks: tuple) -> jax.Array:
    H = M + (J.T * hd[None, :]) @ J
    for (_, idx), Hb in zip(layout.cones, blocks):
        Jb = _take(J, idx)  # (n, d, nu)
        H = H + jnp.einsum("nia,nij,njb->ab", Jb, Hb, Jb)
    return H


def _quad(layout: Layout, v: jax.Array, hd: jax.Array, blocks: tuple) -> jax.Array:
    """``v' W v`` with W the constraint Hessian in jar-space."""
    out = jnp.sum(hd * v * v)
    for (_, idx), Hb in zip(layout.cones, blocks):
        vb = _take(v, idx)
        out = out + jnp.einsum("ni,nij,nj->", vb, Hb, vb)
    return out


def gradient(
    layout: Layout, x: jax.Array, M: jax.Array, a0: jax.Array, J: jax.Array, aref: jax.Array,
    D: jax.Array, mu: tuple, fr: tuple,
) -> jax.Array:  # fmt: skip
    """The primal cost's gradient ``M (x - a0) - J' force(J x - aref)``."""
    _, f, _, _ = _terms(layout, J @ x - aref, D, mu, fr)
    return M @ (x - a0) - J.T @ f


def cost(
    layout: Layout, x: jax.Array, M: jax.Array, a0: jax.Array, J: jax.Array, aref: jax.Array,
    D: jax.Array, mu: tuple, fr: tuple,
) -> jax.Array:  # fmt: skip
    """The primal cost ``0.5 (x - a0)' M (x - a0) + s(J x - aref)``."""
    c, _, _, _ = _terms(layout, J @ x - aref, D, mu, fr)
    dx = x - a0
    return 0.5 * dx @ (M @ dx) + c


# ----------------------------------------------------------------------------- solver


class Solution(NamedTuple):
    """``qacc`` (nu,), ``force`` (m,) MuJoCo's ``efc_force``, ``iterations`` the Newton
    iterations taken and ``converged`` whether the gradient met the tolerance (else the
    iteration cap stopped it)."""

    qacc: jax.Array
    force: jax.Array
    iterations: jax.Array
    converged: jax.Array


LINE_SEARCH_ITERATIONS = 30


def _newton(layout: Layout, iterations: int, tol: float, M, a0, J, aref, D, mu, fr):  # noqa: ANN001, ANN202
    nu = a0.size
    scale = 1.0 / jnp.maximum(MINVAL, jnp.trace(M) / max(1, nu))  # 1 / MuJoCo's meaninertia
    tol = max(tol, 64.0 * float(jnp.finfo(a0.dtype).eps))  # reachable in the State's precision
    Ma0 = M @ a0

    def grad_hess(x):  # noqa: ANN001, ANN202
        _, f, hd, blocks = _terms(layout, J @ x - aref, D, mu, fr)
        g = M @ x - Ma0 - J.T @ f
        return g, _hessian(layout, M, J, hd, blocks)

    def small(g, x):  # noqa: ANN001, ANN202
        return scale * jnp.linalg.norm(g) <= tol * (1.0 + jnp.linalg.norm(x))

    def line_search(x, p):  # noqa: ANN001, ANN202
        jar0, jv = J @ x - aref, J @ p
        pMp = p @ (M @ p)
        c1 = p @ (M @ x - Ma0)

        def d12(a):  # noqa: ANN001, ANN202
            _, f, hd, blocks = _terms(layout, jar0 + a * jv, D, mu, fr)
            return a * pMp + c1 - f @ jv, pMp + _quad(layout, jv, hd, blocks)

        d1_0 = c1 - _terms(layout, jar0, D, mu, fr)[1] @ jv
        eps = 1e-14 * (jnp.abs(d1_0) + MINVAL)

        def body(st):  # noqa: ANN001, ANN202
            i, lo, hi, a, _ = st
            d1, d2 = d12(a)
            an = a - d1 / jnp.maximum(d2, MINVAL)
            # converged: the slope is round-off, or Newton's step no longer moves
            stop = (jnp.abs(d1) <= eps) | (jnp.abs(an - a) <= 1e-15 * (1.0 + jnp.abs(a)))
            lo2 = jnp.where(d1 < 0, a, lo)
            hi2 = jnp.where(d1 >= 0, a, hi)
            ok = (an > lo2) & (an < hi2)
            fb = jnp.where(jnp.isfinite(hi2), 0.5 * (lo2 + hi2), 2.0 * a)
            return i + 1, lo2, hi2, jnp.where(stop, a, jnp.where(ok, an, fb)), stop

        def more(st):  # noqa: ANN001, ANN202
            i, _, _, _, done = st
            return (i < LINE_SEARCH_ITERATIONS) & ~done

        one = jnp.ones((), x.dtype)
        init = (jnp.zeros((), jnp.int32), 0.0 * one, jnp.inf * one, one, d1_0 >= 0)
        _, _, _, a, _ = jax.lax.while_loop(more, body, init)
        return jnp.where(d1_0 >= 0, 0.0, a)

    def cond(st):  # noqa: ANN001, ANN202
        return (st[3] < iterations) & ~st[4]

    def step(st):  # noqa: ANN001, ANN202
        x, g, H, it, _ = st
        p = -jsl.cho_solve((jnp.linalg.cholesky(H), True), g)
        x2 = x + line_search(x, p) * p
        g2, H2 = grad_hess(x2)
        return x2, g2, H2, it + 1, small(g2, x2)

    g0, H0 = grad_hess(a0)
    x, _, _, it, done = jax.lax.while_loop(cond, step, (a0, g0, H0, jnp.zeros((), jnp.int32), small(g0, a0)))
    return x, it, done


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _solve_x(layout, iterations, tol, M, a0, J, aref, D, mu, fr):  # noqa: ANN001, ANN202
    x, it, done = _newton(layout, iterations, tol, M, a0, J, aref, D, mu, fr)
    return x, jnp.stack([it.astype(x.dtype), done.astype(x.dtype)])


@_solve_x.defjvp
def _solve_x_jvp(layout, iterations, tol, primals, tangents):  # noqa: ANN001, ANN202
    # Implicit differentiation at the optimum: grad(x*, theta) = 0, so
    # H dx = -(d grad / d theta) dtheta, with H the Hessian at x* (active set held).
    x, info = _solve_x(layout, iterations, tol, *primals)
    _, dg = jax.jvp(lambda *p: gradient(layout, x, *p), primals, tangents)
    M, _, J, aref, D, mu, fr = primals
    _, _, hd, blocks = _terms(layout, J @ x - aref, D, mu, fr)
    H = _hessian(layout, M, J, hd, blocks)
    dx = -jsl.cho_solve((jnp.linalg.cholesky(H), True), dg)
    return (x, info), (dx, jnp.zeros_like(info))


def _sorted(layout: Layout) -> tuple[np.ndarray, Layout]:
    """The row order that makes ``layout`` contiguous, and the layout in that order."""
    perm = _order(layout)
    k = len(layout.uni) + len(layout.eq)
    cones = []
    for d, idx in layout.cones:
        cones.append((d, tuple(tuple(range(k + j * d, k + (j + 1) * d)) for j in range(len(idx)))))
        k += d * len(idx)
    nu, ne = len(layout.uni), len(layout.eq)
    return perm, Layout(layout.m, tuple(range(nu)), tuple(cones), tuple(range(nu, nu + ne)))


def solve(
    layout: Layout, M: jax.Array, a0: jax.Array, rows: Rows, iterations: int = 100, tolerance: float = 1e-10
) -> Solution:
    """MuJoCo's primal problem at one State: minimise ``0.5 (a - a0)' M (a - a0) +
    s(J a - aref)`` by Newton's method from ``a0`` (at most ``iterations``; stops when
    ``|gradient| / meaninertia <= tolerance (1 + |a|)``, ``meaninertia = trace(M)/nu``).

    Pure, static shapes: ``jit``, ``vmap`` and ``grad`` apply. Derivatives are those of
    the exact optimum (implicit differentiation with the Hessian there; the set of active
    rows held), whatever the iterations did. The rows are solved in an order where each
    cone's rows are contiguous (one gather in, one out, when they are not already)."""
    perm, lay = _sorted(layout)
    same = np.array_equal(perm, np.arange(layout.m))
    J, aref, D = (rows.J, rows.aref, rows.D) if same else (rows.J[perm], rows.aref[perm], rows.D[perm])
    x, info = _solve_x(lay, int(iterations), float(tolerance), M, a0, J, aref, D, rows.mu, rows.friction)
    _, force, _, _ = _terms(lay, J @ x - aref, D, rows.mu, rows.friction)
    if not same:
        force = force[np.argsort(perm)]
    return Solution(x, force, info[0].astype(jnp.int32), info[1] > 0.5)


# ----------------------------------------------------------------------------- a Model's rows


def model_rows(
    model: Any, state: Any, pos: Any, bias: tuple[jax.Array, jax.Array] | None = None
) -> tuple[Rows, Layout, ContactLayout | None, Contacts | None]:
    """The rows of a Model solved MuJoCo's way (``model.mujoco``) at a State realized to
    Velocity (``pos`` its Position cache): the limit rows (lower, upper per limited joint),
    the tendon limit rows (lower, upper per limited tendon), the contact slots' rows (in
    slot order, ``ContactLayout.start``/``count`` each), then one row per joint or tendon
    equality and three per connect (last; MuJoCo puts them first). ``bias``: the bodies'
    ``(A_O, V_O)`` at zero ``udot`` (the Dynamics stage's ``a_bias`` and the velocities),
    needed by connect rows.
    Also the contact layout and ``find_contacts``' result (None without contact)."""
    opt = model.mujoco
    if state.use_euler_angles:
        raise NotImplementedError("MuJoCo's constraint rows are built in quaternion mode only")
    ll = limit_layout(
        opt.limit_q, opt.limit_u, opt.limit_lower, opt.limit_upper, opt.limit_margin,
        opt.limit_solref, opt.limit_solimp, opt.limit_invweight, opt.timestep, opt.refsafe,
    )  # fmt: skip
    nl = 2 * ll.q.size
    parts = [(limit_rows(ll, state.q, state.u), Layout(nl, tuple(range(nl))))]
    ne = len(opt.eq_obj1)
    dt = state.q.dtype
    L, Jt = jnp.zeros(0, dt), jnp.zeros((0, state.u.size), dt)
    if len(opt.tendon_index) or (ne and np.any(opt.eq_tendon)):
        L, Jt = tendon_jacobians(model, state, pos)
    if len(opt.tendon_index):
        tl = limit_layout(
            opt.tendon_index, opt.tendon_index, opt.tendon_lower, opt.tendon_upper, opt.tendon_margin,
            opt.tendon_solref, opt.tendon_solimp, opt.tendon_invweight, opt.timestep, opt.refsafe,
        )  # fmt: skip
        nt = 2 * tl.q.size
        parts.append((tendon_limit_rows(tl, L, Jt, state.u), Layout(nt, tuple(range(nt)))))
    cl = ct = None
    cand = model.contact
    if opt.contact and cand is not None and cand.groups:
        ct = find_contacts(cand, pos.R_GB, pos.p_GB)
        dt = pos.cdof.dtype  # (detection's static frames are float64: the State's precision)
        ct = ct._replace(dist=ct.dist.astype(dt), pos=ct.pos.astype(dt), frame=ct.frame.astype(dt))
        cl = contact_layout(
            ct, cand.surface_bodies, opt.body_invweight, opt.cone, opt.impratio, opt.timestep, opt.refsafe
        )
        sb = np.asarray(cand.surface_bodies, int)
        anc = np.asarray(model.topology(False).dof_ancestor, float)  # (nb, nu): dof moves body
        moves = anc[sb[ct.surface[:, 1]]] - anc[sb[ct.surface[:, 0]]]
        rows = contact_rows(cl, ct, pos.cdof, moves, state.u)
        parts.append((rows, Layout(cl.slot.size, cl.layout_uni, cl.layout_cones)))
    if ne:
        el = equality_layout(
            opt.eq_tendon, opt.eq_obj1, opt.eq_obj2, opt.eq_u1, opt.eq_u2, opt.eq_ref1, opt.eq_ref2,
            opt.eq_polycoef, opt.eq_solref, opt.eq_solimp, opt.eq_invweight, opt.timestep, opt.refsafe,
        )  # fmt: skip
        parts.append((equality_rows(el, state.q, state.u, L, Jt), Layout(ne, (), (), tuple(range(ne)))))
    nc = 3 * len(opt.connect_body1)
    if nc:
        kl = connect_layout(
            opt.connect_body1, opt.connect_body2, opt.connect_anchor1, opt.connect_anchor2,
            opt.connect_solref, opt.connect_solimp, opt.connect_invweight, opt.timestep, opt.refsafe,
        )  # fmt: skip
        anc = np.asarray(model.topology(False).dof_ancestor, float)
        if bias is None:
            raise ValueError("connect rows need the bodies' bias accelerations (model_rows(..., bias=))")
        rows = connect_rows(kl, pos, pos.cdof, anc, state.u, bias)
        parts.append((rows, Layout(nc, (), (), tuple(range(nc)))))
    rows, layout = stack_rows(parts)
    return rows, layout, cl, ct


def tendon_jacobians(model: Any, state: Any, pos: Any) -> tuple[jax.Array, jax.Array]:
    """Every tendon's length (n_t,) and Jacobian ``dL/du`` (n_t, nu) at a State realized to
    Position (``pos`` its cache): the length's body gradients through the bodies'
    Jacobians, plus the fixed tendons' coefficients (MuJoCo's ``ten_length``, ``ten_J``)."""
    tendons = model.tendons
    topo = model.topology(state.use_euler_angles)
    _, G = tendon_body_gradients(tendons, topo, state.q, pos.R_GB, pos.p_GB)
    # (the lengths again, with the fixed tendons' dependence on q, which G leaves out)
    L = tendon_lengths(tendons, topo, state.q, pos.R_GB, pos.p_GB)
    nb = pos.p_GB.shape[0]
    Jb = rz.frame_jacobians(model, state, np.arange(nb))  # (nb, 6, nu), [w; v of the origin]
    J = jnp.einsum("tbk,bkn->tn", G, Jb)
    ten, u, coef = fixed_terms(tendons, topo)
    if len(ten):
        J = J.at[np.asarray(ten), u].add(jnp.asarray(coef, J.dtype))
    return L, J


def tendon_limit_rows(tl: LimitLayout, L: jax.Array, Jt: jax.Array, u: jax.Array) -> Rows:
    """MuJoCo's tendon limit rows: ``2i`` (lower: ``dist = L - lower``, ``J = +J_t``) and
    ``2i+1`` (upper: ``dist = upper - L``, ``J = -J_t``) of limited tendon ``i`` (``tl.q``
    holds the tendon indices)."""
    n = tl.q.size
    dt = L.dtype
    v = L[tl.q]
    lower, upper = jnp.asarray(tl.lower, dt), jnp.asarray(tl.upper, dt)
    dist = jnp.stack([v - lower, upper - v], axis=1).reshape(-1)
    sign = jnp.asarray(np.tile([1.0, -1.0], n), dt)
    J = sign[:, None] * Jt[np.repeat(tl.q, 2)]
    margin = jnp.asarray(np.repeat(tl.margin, 2), dt)
    on = dist < margin
    imp = impedance(jnp.asarray(np.repeat(tl.solimp, 2, axis=0), dt), dist, margin)
    R = jnp.maximum(MINVAL, (1.0 - imp) * jnp.asarray(np.repeat(tl.invweight, 2), dt) / imp)
    B, K = (jnp.asarray(np.repeat(x, 2), dt) for x in (tl.B, tl.K))
    aref = -B * (J @ u) - K * imp * (dist - margin)
    D = jnp.where(on, 1.0 / R, 0.0)
    return Rows(J, aref, R, D, on, (), ())


@dataclass(frozen=True, eq=False)
class EqualityLayout:
    """Static data of MuJoCo's joint and tendon equality rows (one row each): per equality
    whether it couples tendons (``tendon``; else hinge or slide joints), its objects
    ``obj1``/``obj2`` (q indices of the joints or indices in the Model's TendonSet; ``obj2
    = -1``: none), the joints' u indices ``u1``/``u2`` (-1 for tendons), ``ref1``/``ref2``
    (qpos0, or the tendon's length there), ``polycoef`` (n, 5), ``solimp`` (clamped),
    ``K``/``B`` (from ``solref``, refsafe applied) and ``invweight`` (MuJoCo's
    ``dof_invweight0`` or ``tendon_invweight0`` of the two objects, summed)."""

    tendon: np.ndarray
    obj1: np.ndarray
    obj2: np.ndarray
    u1: np.ndarray
    u2: np.ndarray
    ref1: np.ndarray
    ref2: np.ndarray
    polycoef: np.ndarray
    solimp: np.ndarray
    K: np.ndarray
    B: np.ndarray
    invweight: np.ndarray


def equality_layout(
    tendon: Any, obj1: Any, obj2: Any, u1: Any, u2: Any, ref1: Any, ref2: Any, polycoef: Any,
    solref: Any, solimp: Any, invweight: Any, timestep: float, refsafe: bool = True,
) -> EqualityLayout:  # fmt: skip
    """The static data of equality rows (one entry per joint or tendon equality)."""
    n = len(obj1)
    si, K, B = _soft_parameters(solref, solimp, n, timestep, refsafe)
    i = functools.partial(np.asarray, dtype=int)
    f = functools.partial(np.asarray, dtype=float)
    return EqualityLayout(
        np.asarray(tendon, bool).reshape(n), i(obj1), i(obj2), i(u1), i(u2), f(ref1), f(ref2),
        f(polycoef).reshape(n, 5), si, K, B, f(invweight),
    )  # fmt: skip


def equality_rows(el: EqualityLayout, q: jax.Array, u: jax.Array, L: jax.Array, Jt: jax.Array) -> Rows:
    """MuJoCo's equality rows for joints and tendons: ``pos = x1 - p(x2)`` with ``x`` a
    joint's q or a tendon's length, each less its value at qpos0, and ``p`` the
    polynomial ``polycoef`` (``p = polycoef[0]`` without a second object); ``J = J1 -
    p'(x2) J2`` (a joint's unit row, a tendon's ``dL/du``). Impedance at ``|pos|``
    (no margin), ``aref = -B J u - K imp pos``; always active, two-sided (``Layout.eq``).
    ``L``, ``Jt``: the tendons' lengths and Jacobians (:func:`tendon_jacobians`)."""
    n = el.obj1.size
    dt = q.dtype
    nu = u.size
    if n == 0:
        z = jnp.zeros(0, dt)
        return Rows(jnp.zeros((0, nu), dt), z, z, z, jnp.zeros(0, bool), (), ())
    if L.size == 0:  # (no tendons: placeholders the joint rows never pick)
        L, Jt = jnp.zeros(1, dt), jnp.zeros((1, nu), dt)
    ten, has2 = el.tendon, el.obj2 >= 0
    o1, o2 = el.obj1, np.where(has2, el.obj2, 0)

    def value(o: np.ndarray, uu: np.ndarray, ref: np.ndarray) -> tuple[jax.Array, jax.Array]:
        unit = np.zeros((n, nu))
        unit[np.flatnonzero(~ten & (uu >= 0)), uu[~ten & (uu >= 0)]] = 1.0
        x = jnp.where(ten, L[np.where(ten, o, 0)], q[np.where(ten, 0, o)]) - jnp.asarray(ref, dt)
        J = jnp.where(ten[:, None], Jt[np.where(ten, o, 0)], jnp.asarray(unit, dt))
        return x, J

    x1, J1 = value(o1, el.u1, el.ref1)
    x2, J2 = value(o2, np.where(has2, el.u2, -1), el.ref2)
    d = jnp.where(has2, x2, 0.0)
    c = jnp.asarray(el.polycoef, dt)
    p = c[:, 0] + d * (c[:, 1] + d * (c[:, 2] + d * (c[:, 3] + d * c[:, 4])))
    dp = c[:, 1] + d * (2.0 * c[:, 2] + d * (3.0 * c[:, 3] + d * 4.0 * c[:, 4]))
    pos = x1 - p
    J = J1 - jnp.where(has2, dp, 0.0)[:, None] * J2
    imp = impedance(jnp.asarray(el.solimp, dt), pos, 0.0)
    R = jnp.maximum(MINVAL, (1.0 - imp) * jnp.asarray(el.invweight, dt) / imp)
    aref = -jnp.asarray(el.B, dt) * (J @ u) - jnp.asarray(el.K, dt) * imp * pos
    return Rows(J, aref, R, 1.0 / R, jnp.ones(n, bool), (), ())


@dataclass(frozen=True, eq=False)
class ConnectLayout:
    """Static data of MuJoCo's connect equality rows (three each): per connect its bodies
    (mobilized body indices; 0 is Ground), the anchor points in their frames, ``solimp``
    (clamped), ``K``/``B`` and ``invweight`` (the bodies' translational
    ``body_invweight0``, summed)."""

    body1: np.ndarray
    body2: np.ndarray
    anchor1: np.ndarray
    anchor2: np.ndarray
    solimp: np.ndarray
    K: np.ndarray
    B: np.ndarray
    invweight: np.ndarray


def connect_layout(
    body1: Any, body2: Any, anchor1: Any, anchor2: Any, solref: Any, solimp: Any, invweight: Any,
    timestep: float, refsafe: bool = True,
) -> ConnectLayout:  # fmt: skip
    """The static data of connect rows (one entry per connect)."""
    n = len(body1)
    si, K, B = _soft_parameters(solref, solimp, n, timestep, refsafe)
    return ConnectLayout(
        np.asarray(body1, int), np.asarray(body2, int), np.asarray(anchor1, float).reshape(n, 3),
        np.asarray(anchor2, float).reshape(n, 3), si, K, B, np.asarray(invweight, float),
    )  # fmt: skip


def connect_rows(
    cl: ConnectLayout,
    pos: Any,
    cdof: jax.Array,
    anc: np.ndarray,
    u: jax.Array,
    bias: tuple[jax.Array, jax.Array],
) -> Rows:
    """MuJoCo's connect rows ``3i .. 3i+2``: ``pos = p1 - p2`` (the anchors in Ground),
    ``J`` the difference of the anchors' translational Jacobians (``cdof`` (nu, 6) the
    dofs' motion ``[w; v]`` about Ground's origin, ``anc`` (nb, nu) which dofs move each
    body); the impedance at ``|p1 - p2|`` for all three rows; two-sided, always active.
    As MuJoCo 4 does, ``aref`` also subtracts ``dJ/dt u``, the anchors' relative
    acceleration at zero ``udot`` (``bias``: the bodies' spatial acceleration at zero
    ``udot`` and velocity, both about Ground's origin, (nb, 6) ``[angular; linear]``)."""
    n = cl.body1.size
    dt = cdof.dtype
    nu = u.size
    if n == 0:
        z = jnp.zeros(0, dt)
        return Rows(jnp.zeros((0, nu), dt), z, z, z, jnp.zeros(0, bool), (), ())
    R, o = pos.R_GB, pos.p_GB
    p1 = jnp.einsum("nij,nj->ni", R[cl.body1], jnp.asarray(cl.anchor1, dt)) + o[cl.body1]
    p2 = jnp.einsum("nij,nj->ni", R[cl.body2], jnp.asarray(cl.anchor2, dt)) + o[cl.body2]
    w, v = cdof[:, :3], cdof[:, 3:]

    def jac(p: jax.Array, b: np.ndarray) -> jax.Array:  # (n, 3, nu)
        jv = v[None] + jnp.cross(w[None], p[:, None, :])  # (n, nu, 3)
        return jnp.swapaxes(jv * jnp.asarray(anc[b], dt)[:, :, None], 1, 2)

    J = (jac(p1, cl.body1) - jac(p2, cl.body2)).reshape(3 * n, nu)
    A, V = bias

    def acc(p: jax.Array, b: np.ndarray) -> jax.Array:  # a point's acceleration at udot = 0
        w_, v_ = V[b, :3], V[b, 3:]
        return A[b, 3:] + jnp.cross(A[b, :3], p) + jnp.cross(w_, v_ + jnp.cross(w_, p))

    jdot_u = (acc(p1, cl.body1) - acc(p2, cl.body2)).reshape(-1)
    d = p1 - p2
    d2 = jnp.sum(d * d, axis=1)
    dist = jnp.where(d2 > 0, jnp.sqrt(jnp.where(d2 > 0, d2, 1.0)), 0.0)
    imp = jnp.repeat(impedance(jnp.asarray(cl.solimp, dt), dist, 0.0), 3)
    iw = jnp.asarray(np.repeat(cl.invweight, 3), dt)
    Rr = jnp.maximum(MINVAL, (1.0 - imp) * iw / imp)
    B, K = (jnp.asarray(np.repeat(x, 3), dt) for x in (cl.B, cl.K))
    aref = -B * (J @ u) - K * imp * d.reshape(-1) - jdot_u
    return Rows(J, aref, Rr, 1.0 / Rr, jnp.ones(3 * n, bool), (), ())


def model_solve(
    model: Any,
    state: Any,
    pos: Any,
    M: jax.Array,
    a0: jax.Array,
    bias: tuple[jax.Array, jax.Array] | None = None,
) -> Solution:
    """MuJoCo's constrained accelerations of a Model solved its way, from the mass matrix
    ``M`` and the unconstrained accelerations ``a0`` (MuJoCo's ``qacc_smooth``); ``bias``
    as :func:`model_rows` takes it."""
    rows, layout, _, _ = model_rows(model, state, pos, bias)
    opt = model.mujoco
    return solve(layout, M, a0, rows, opt.iterations, opt.tolerance)


def invweights(model: Any, state: Any) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo's ``body_invweight0`` (nb, 2) and the dofs' ``dof_invweight0`` (nu,) for
    one-dof joints, at a State realized to Position (``qpos0`` for MuJoCo's): the mean
    diagonal of ``J M^-1 J'`` over each body's mass-center translation and its rotation,
    and ``(M^-1)_ii``. MuJoCo's shortcut for "simple" slide-only bodies (``body_simple ==
    2``: ``(1/mass, 0)`` and ``1/mass``) depends on how the model file placed the inertial
    frame: ``load_mjcf`` applies it (``simjax.io._mjcf._simple_slide_bodies``)."""
    pc = state.position_cache
    M = rz.mass_matrix(model, state, pc)
    Minv = np.linalg.inv(np.asarray(M, float))
    nb = pc.p_GB.shape[0]
    J = np.asarray(rz.frame_jacobians(model, state, np.arange(nb), pc.com_G), float)  # (nb, 6, nu)
    A = np.einsum("bin,nm,bjm->bij", J, Minv, J)
    body = np.stack(
        [np.trace(A[:, 3:, 3:], axis1=1, axis2=2) / 3, np.trace(A[:, :3, :3], axis1=1, axis2=2) / 3], 1
    )
    return body, np.diag(Minv).copy()
