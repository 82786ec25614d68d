"""One-sided (unilateral) constraints, as ArtiSynth defines them (seed 001, 4.9.1–4.9.2).

A unilateral row ``l`` watches a scalar ``phi_l`` of the configuration (a coordinate for a
``CoordinateLimit``) against an admissible range ``[lower_l, upper_l]``. Its *engaged*
value ``E_l`` in ``{0, +1, -1}`` says whether it acts and in which direction: ``+1`` holds
the lower bound (``N_l u >= 0``), ``-1`` the upper (``-N_l u >= 0``). ``E_l``, the number of
steps it has been engaged and its last force are discrete variables of the State, so a
batch with different engagements is one compiled program; every row is always present,
masked when not engaged.

This module holds the numerics, vectorised over all rows at once:

* ``limit_rows``: the rows' values ``phi``, their speed rows ``N`` (``phidot = N u``) and
  their distances to the engaged bound (negative inside the inadmissible region);
* ``update_engaged``: ArtiSynth's engagement rule (engage on entering the region, with
  the sign that points out of it; disengage only outside it, moving away, and after at
  least two steps);
* ``deadband_rhs``: the right-hand side of the position correction with the deadband
  (correct by ``-d - tol``, so a joint rests just inside its region);
* ``solve_qp``: the velocity-level problem of a step,
  ``min 1/2 x^T M x - c^T x`` subject to ``A x = a`` (bilateral rows) and ``B_l x >= b_l``
  (engaged unilateral rows), whose multipliers satisfy complementarity
  ``theta >= 0, B x - b >= 0, theta . (B x - b) = 0``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics.stages import cho_solve_lower, cholesky_lower
from ..model.model import Model
from ..model.state import State
from . import kernels as cn
from . import kinds
from .kernels import min_norm_solve

# ============================================================================ static data


@dataclass(frozen=True, eq=False)
class LimitRows:
    """Static description of the Model's unilateral rows in one Model mode (quaternion or
    Euler-angle): coordinate limits (which q each watches and which u is its speed) and
    groups of constraints that own unilateral rows (custom couplings), each evaluated with
    one ``vmap`` like the bilateral constraint groups."""

    n: int  # number of rows, L
    coord_rows: np.ndarray  # (Lc,) rows that are coordinate limits
    q_index: np.ndarray  # (Lc,)
    u_index: np.ndarray  # (Lc,)
    groups: tuple[tuple[cn.ConstraintGroup, np.ndarray], ...]  # (group, rows (n, n_u))

    @property
    def constant(self) -> bool:
        """Whether every row is a coordinate limit (rows of N constant, values linear in q)."""
        return not self.groups

    @property
    def independent(self) -> bool:
        """Whether the rows of N are linearly independent whatever the configuration
        (coordinate limits on distinct speeds): then ``N M^-1 N^T`` is positive definite
        and every subset of it can be factored without regularisation."""
        return self.constant and len(set(self.u_index.tolist())) == len(self.u_index)


def build_limit_rows(
    records: tuple[Any, ...],
    compiled: tuple[cn.CompiledConstraint, ...],
    limits: tuple[Any, ...],
    euler: bool,
) -> LimitRows:
    """The unilateral rows of a Model option, from its constraint records and compiled
    constraints and its limit records (``model.LimitRecord``): a limit with a q index is a
    coordinate limit; a constraint with ``unilateral_rows`` (indices among the limits) owns
    unilateral rows, whose values its kernel's ``unilateral_phi`` gives."""
    rows, qi, ui = [], [], []
    for k, lim in enumerate(limits):
        if lim.q_index is not None:
            rows.append(k)
            qi.append(lim.q_index[int(euler)])
            ui.append(lim.u_index[int(euler)])
    by_key: dict[Any, list[cn.CompiledConstraint]] = {}
    for c in compiled:
        rec = records[c.index]
        if rec.unilateral_rows:
            by_key.setdefault((rec.key, c.mobs, len(c.bodies)), []).append(c)
    groups = []
    for members in by_key.values():
        kernel = kinds.UnilateralValues(records[members[0].index].kernel)
        r = np.stack([np.asarray(records[c.index].unilateral_rows, int) for c in members])
        # the group's rows are its unilateral values, all at the position level
        g = replace(cn.make_group(records, members, kernel), mp=r.shape[1], mv=0, ma=0)
        groups.append((g, r))
    return LimitRows(
        n=len(limits),
        coord_rows=np.asarray(rows, dtype=int),
        q_index=np.asarray(qi, dtype=int),
        u_index=np.asarray(ui, dtype=int),
        groups=tuple(groups),
    )


def limit_data(model: Model, euler: bool) -> LimitRows:
    """The Model's unilateral rows in a Model option (built by ``realize_topology()``)."""
    return model.option(euler).limits


# ============================================================================ rows


def with_unilateral_prev(kin: cn.Kin, prev: jax.Array | None) -> cn.Kin:
    """``kin`` (leading axis n) with the members' last unilateral values ``prev`` (n, k) as
    the parameter ``unilateral_prev`` (angles are taken nearest them); (n, 0) when None."""
    params = dict(kin.params)
    n = kin.p.shape[0]
    params["unilateral_prev"] = jnp.zeros((n, 0), kin.p.dtype) if prev is None else prev
    return eqx.tree_at(lambda k: k.params, kin, params)


def limit_rows(model: Model, state: State, q: jax.Array | None = None):
    """``(phi, N)`` of every unilateral row: values (L,) and speed rows (L, nu)
    (``phidot = N u``). Coordinate limits read ``q`` (default the State's); rows of custom
    couplings need ``state`` realized to Position (at that ``q``)."""
    data = limit_data(model, state.use_euler_angles)
    q = state.q if q is None else q
    nu = state.u.shape[-1]
    phi = jnp.zeros(data.n, q.dtype).at[data.coord_rows].set(q[data.q_index])
    N = jnp.zeros((data.n, nu), q.dtype).at[data.coord_rows, data.u_index].set(1.0)
    if data.groups:
        prev = state.discrete["matter"]["limit_value"]
        for g, rows in data.groups:
            kin = with_unilateral_prev(cn.gather_kin(model, state, g, 0), prev[rows])
            vals = jax.vmap(g.funcs[0])(kin)
            Ng = cn.group_G(model, state, g, cn.group_coefficients(model, state, g, kin=kin))
            phi = phi.at[rows.reshape(-1)].set(vals.reshape(-1))
            N = N.at[rows.reshape(-1)].set(Ng.reshape(-1, nu))
    return phi, N


def distances(phi: jax.Array, lower: jax.Array, upper: jax.Array, engaged: jax.Array) -> jax.Array:
    """Distance of each row to the bound it holds (``E = +1``: ``phi - lower``; ``E = -1``:
    ``upper - phi``; negative inside the inadmissible region); 0 where not engaged."""
    return jnp.where(engaged > 0, phi - lower, jnp.where(engaged < 0, upper - phi, 0.0))


def update_engaged(phi, speed, lower, upper, engaged, count):
    """ArtiSynth's engagement rule (seed 4.9.2), one step, every row at once.

    Engage with ``E = +1`` when ``phi <= lower`` and ``E = -1`` when ``phi >= upper`` (the
    count restarts when the sign changes); an engaged row disengages only when it is out of
    the region (``d > 0``), moving away from it (``E N u > 0``) and has been engaged for at
    least two steps. ``count`` is the number of steps a row has been engaged."""
    below = phi <= lower
    above = phi >= upper
    new = jnp.where(below, 1.0, jnp.where(above, -1.0, engaged))
    count = jnp.where(new != engaged, 0.0, count)
    d = distances(phi, lower, upper, engaged)
    release = (engaged != 0) & ~below & ~above & (d > 0) & (engaged * speed > 0) & (count > 1)
    new = jnp.where(release, 0.0, new)
    count = jnp.where(release, 0.0, count)
    count = jnp.where(new != 0, count + 1.0, count)
    return new, count


def deadband_rhs(d: jax.Array, tol: jax.Array, engaged: jax.Array) -> jax.Array:
    """Right side ``b`` of the position correction ``E N dq >= b`` with ArtiSynth's
    deadband: a row deeper than ``tol`` is brought back to ``-tol`` (``b = -(d + tol)``);
    one within ``tol`` is left alone (``b = 0``)."""
    return jnp.where((engaged != 0) & (d < -tol), -(d + tol), 0.0)


def correction_rows(phi, lower, upper, tol, engaged):
    """Rows of the position correction ``sign N dq >= b`` (on ``mask``): engaged rows with
    their deadband (``sign = E``, ``b = deadband_rhs``), and free rows kept from crossing
    the bound they are nearer to (``b = -d``, ``d >= 0`` the distance to it), so that one
    limit's correction does not push a neighbour into its region."""
    below = phi - lower
    above = upper - phi
    near_lower = below <= above
    d_free = jnp.where(near_lower, below, above)
    sign = jnp.where(engaged != 0, engaged, jnp.where(near_lower, 1.0, -1.0))
    d = distances(phi, lower, upper, engaged)
    finite = jnp.isfinite(d_free)
    mask = (engaged != 0) | finite
    b = jnp.where(
        engaged != 0, deadband_rhs(d, tol, engaged), jnp.where(finite, -jnp.maximum(d_free, 0.0), 0.0)
    )
    return sign, b, mask


# ============================================================================ solver


def _masked_solve(W: jax.Array, r: jax.Array, act: jax.Array, pd: bool = False) -> jax.Array:
    """``theta`` with ``W_AA theta_A = r_A`` on the active set ``A`` and 0 elsewhere
    (minimum-norm on a singular block: redundant rows share their force). ``pd``: ``W`` is
    known to be positive definite, so a plain Cholesky solve is exact."""
    D = act.astype(W.dtype)
    Wm = W * D[:, None] * D[None, :] + jnp.diag(1.0 - D)
    if pd:
        return cho_solve_lower(jnp.linalg.cholesky(Wm), r * D) * D
    return min_norm_solve(Wm, r * D, refinements=1) * D


def solve_lcp(W: jax.Array, q: jax.Array, mask: jax.Array, max_iter: int = 50, pd: bool = False):
    """``theta >= 0`` with ``w = W theta + q >= 0`` and ``theta . w = 0`` on the rows of
    ``mask`` (``theta = 0`` elsewhere), for a symmetric positive semi-definite ``W``.

    A primal-dual active-set method (semi-smooth Newton on ``min(theta, w) = 0``): guess the
    rows that push (those whose gap would close), solve them as equalities, drop rows whose
    force came out negative and add rows whose gap came out negative, until the set
    repeats; exact to round-off when it stops. Derivatives are those of the implicit
    function with the final set held (``dtheta_A = -W_AA^-1 (dW theta + dq)_A``).
    ``pd``: ``W`` is positive definite (independent rows), so no regularisation is needed.
    Returns ``(theta, converged)``."""
    if W.shape[0] == 0:
        return jnp.zeros_like(q), jnp.asarray(True)
    theta, ok, _ = _lcp(W, q, mask, max_iter, pd)
    return theta, ok


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _lcp(W, q, mask, max_iter, pd):
    rel = 1e-12 if W.dtype == jnp.float64 else 1e-5
    tol = rel * jnp.maximum(jnp.max(jnp.abs(jnp.where(mask, q, 0.0))), jnp.finfo(W.dtype).tiny)
    act0 = mask & (q < 0)
    c = _lcp_update(W, q, mask, tol, pd, (act0, act0, jnp.zeros_like(q), jnp.asarray(0)))
    act, prev, theta, _ = _lcp_iterate(max_iter, pd)(W, q, mask, tol, *c)
    return theta, jnp.all(act == prev), prev


def _lcp_update(W, q, mask, tol, pd, c):
    """One active-set update: solve the guessed set, then keep the rows that push and add
    the rows whose gap is negative. ``c = (set, previous set, theta, count)``."""
    act, _, _, k = c
    th = _masked_solve(W, -q, act, pd)
    w = W @ th + q
    # an active row stays while it pushes; an inactive one joins when its gap is negative
    new = mask & ((act & (th > 0)) | (~act & (w < -tol)))
    return new, act, th, k + 1


def _lcp_loop(W, q, mask, tol, act, prev, th, k, *, max_iter, pd):
    """Active-set updates until the set repeats (or ``max_iter`` updates)."""

    def cond(c):
        a, p, _, kk = c
        return jnp.any(a != p) & (kk < max_iter)

    return jax.lax.while_loop(cond, lambda c: _lcp_update(W, q, mask, tol, pd, c), (act, prev, th, k))


# Members of a batch that need more active-set updates than the first, as a fraction of it.
_STRAGGLERS = 8


@functools.cache
def _lcp_iterate(max_iter: int, pd: bool):
    """``_lcp_loop`` whose ``vmap`` runs only the members that have not converged.

    A plain ``vmap`` of a while loop runs every member for as many updates as the slowest
    one needs, which on a batch of limited humanoids is more than twice the solves per step a
    member needs on average. Here the batch rule runs the loop on chunks of at most
    ``B / _STRAGGLERS`` unconverged members, gathered to the front, until none is left;
    the result is the same, member by member."""
    loop = functools.partial(_lcp_loop, max_iter=max_iter, pd=pd)

    @jax.custom_batching.custom_vmap
    def iterate(W, q, mask, tol, act, prev, th, k):
        return loop(W, q, mask, tol, act, prev, th, k)

    @iterate.def_vmap
    def _rule(axis_size, in_batched, *args):
        full = [a if b else jnp.broadcast_to(a, (axis_size, *jnp.shape(a))) for a, b in zip(args, in_batched)]
        data, c = full[:4], tuple(full[4:])
        chunk = max(1, -(-axis_size // _STRAGGLERS))

        def todo(c):
            act, prev, _, k = c
            return jnp.any(act != prev, axis=-1) & (k < max_iter)

        def body(c):
            idx = jnp.argsort(~todo(c), stable=True)[:chunk]  # unconverged members first
            sub = jax.vmap(loop)(*(x[idx] for x in data), *(x[idx] for x in c))
            return tuple(x.at[idx].set(y) for x, y in zip(c, sub, strict=True))

        out = jax.lax.while_loop(lambda c: jnp.any(todo(c)), body, c)
        return out, (True,) * 4

    return iterate


@_lcp.defjvp
def _lcp_jvp(max_iter, pd, primals, tangents):
    W, q, mask = primals
    dW, dq, _ = tangents
    theta, ok, act = _lcp(W, q, mask, max_iter, pd)
    dtheta = _masked_solve(W, -(dW @ theta + dq), act, pd)
    zero = np.zeros(np.shape(ok), dtype=jax.dtypes.float0)
    return (theta, ok, act), (dtheta, zero, np.zeros(np.shape(act), dtype=jax.dtypes.float0))


def solve_qp(
    M, c, A, a, B, b, mask, max_iter: int = 50, chol=None, YB=None, independent: bool = False, x0=None, W=None
):
    """``x`` minimising ``1/2 x^T M x - c^T x`` subject to ``A x = a`` and, for the rows of
    ``mask``, ``B x >= b``; with ``M x = c + A^T lam + B^T theta``.

    ``M`` is symmetric positive definite; ``A`` may have redundant rows (minimum-norm
    ``lam``). The bilateral rows are eliminated exactly (a Schur complement), which leaves
    the complementarity problem of ``solve_lcp`` in ``theta``. Returns
    ``(x, lam, theta, converged)``. Where the caller has them: ``chol``, the Cholesky
    factor of ``M``; ``YB``, ``M^-1 B^T``; ``x0``, ``M^-1 c``; ``W``, ``B M^-1 B^T``.
    ``independent``: the rows of ``B`` are linearly independent (then, with no ``A``, the
    LCP needs no regularisation)."""
    L = cholesky_lower(M) if chol is None else chol

    def cho(r):
        return cho_solve_lower(L, r)

    x0 = cho(c) if x0 is None else x0
    YB = cho(B.T) if YB is None else YB  # (n, nb)
    W = B @ YB if W is None else W
    qv = B @ x0 - b
    if A.shape[0]:
        YA = cho(A.T)
        SAA = A @ YA
        SAB = A @ YB
        rA = a - A @ x0
        sol = min_norm_solve(SAA, jnp.concatenate([rA[:, None], SAB], axis=1))
        lam0, Kb = sol[:, 0], sol[:, 1:]
        W = W - SAB.T @ Kb
        qv = qv + SAB.T @ lam0
    W = 0.5 * (W + W.T)
    theta, ok = solve_lcp(W, qv, mask, max_iter, pd=independent and A.shape[0] == 0)
    if A.shape[0]:
        lam = lam0 - Kb @ theta
        x = x0 + YA @ lam + YB @ theta
    else:
        lam = jnp.zeros(0, x0.dtype)
        x = x0 + YB @ theta
    return x, lam, theta, ok
