"""The Assembler's solver: a damped primal-dual interior-point method for

    minimise 1/2 |r(x)|^2 + g(x)  subject to  e(x) = 0,  lo <= x <= hi

(``simjax.studies.assembler`` describes the method and what it is for). One solve is the
shape of an optimistix solver::

    carry = init(problem, nr, ne)
    while not terminate(problem, carry):
        carry = step(linearize, problem, carry)
    solution = finish(problem, carry)

(``solve`` writes that loop as one ``lax.while_loop``), where ``problem`` (a
:class:`Problem`: bounds, tolerances, start) and ``carry`` (a :class:`Carry`) are arrays
only, so they batch under ``vmap``, and ``linearize(x)`` gives the residuals, errors and
their derivatives at ``x`` (a :class:`Linearization`). What the solution means for the
assembly (which equivalent angles to report, the multipliers for implicit
differentiation, the ``RESULTS`` item) is the Assembler's.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

#: Fraction to the boundary: a step stops 0.5% of the slack short of a bound.
_TAU = 0.995


class Linearization(eqx.Module):
    """The goals and errors at one point and their derivatives (``goal = 1/2 |r|^2 + g``)."""

    r: Float[Array, " nr"]  # weighted least-squares residuals
    e: Float[Array, " ne"]  # error conditions (kept = 0)
    g: Float[Array, ""]  # scalar goals
    ok: Bool[Array, ""]  # every goal has data
    J: Float[Array, "nr n"]  # dr/dx
    A: Float[Array, "ne n"]  # de/dx
    gg: Float[Array, " n"]  # gradient of g
    gH: Float[Array, "n n"]  # Hessian of g, its negative curvature clipped

    @staticmethod
    def zeros(nr: int, ne: int, n: int, dt) -> Linearization:
        return Linearization(
            r=jnp.zeros(nr, dt),
            e=jnp.zeros(ne, dt),
            g=jnp.zeros((), dt),
            ok=jnp.asarray(True),
            J=jnp.zeros((nr, n), dt),
            A=jnp.zeros((ne, n), dt),
            gg=jnp.zeros(n, dt),
            gH=jnp.zeros((n, n), dt),
        )

    def goal(self) -> jax.Array:
        return 0.5 * self.r @ self.r + self.g

    def error_norm(self, rms: jax.Array) -> jax.Array:
        return error_norm(self.e, rms)


class Step(eqx.Module):
    """The planned step from the current point and what the model predicts of it."""

    dx: Float[Array, " n"]
    lam: Float[Array, " ne"]  # multipliers of the linearised errors
    pred: Float[Array, ""]  # predicted decrease of goal + barrier
    grad: Float[Array, " n"]  # gradient of the goal
    H: Float[Array, "n n"]  # Gauss-Newton Hessian of the goal

    @staticmethod
    def zeros(ne: int, n: int, dt) -> Step:
        zeros = jnp.zeros(n, dt)
        return Step(
            dx=zeros, lam=jnp.zeros(ne, dt), pred=jnp.zeros((), dt), grad=zeros, H=jnp.zeros((n, n), dt)
        )


class Problem(eqx.Module):
    """One solve's bounds, tolerances and start (arrays only: batches under ``vmap``)."""

    lo: Float[Array, " n"]
    hi: Float[Array, " n"]
    tol: Float[Array, ""]  # error tolerance
    acc: Float[Array, ""]  # accuracy (relative)
    rms: Bool[Array, ""]  # RMS error norm (else the infinity norm)
    barrier0: Float[Array, ""]  # starting barrier weight, relative to the starting goal
    max_it: Int[Array, ""]
    has_lo: Bool[Array, " n"]
    fixed: Bool[Array, " n"]  # lo == hi (to round-off): not a variable
    bl: Bool[Array, " n"]  # a lower bound the barrier keeps
    bh: Bool[Array, " n"]  # an upper bound the barrier keeps
    m_free: Float[Array, " n"]  # 1 where not fixed
    x0: Float[Array, " n"]  # the start, strictly inside the bounds


def make_problem(xq, lo, hi, tol, acc, rms, barrier, max_iterations, push) -> Problem:
    """The :class:`Problem` starting from ``xq``: q's with bounds start strictly inside
    them (IPOPT's bound push: a fraction ``push`` of the range, at most ``push * max(1,
    |bound|)``); q's whose bounds coincide are fixed on them."""
    dt = xq.dtype
    eps = float(jnp.finfo(dt).eps)
    lo, hi = jnp.asarray(lo, dt), jnp.asarray(hi, dt)
    has_lo, has_hi = jnp.isfinite(lo), jnp.isfinite(hi)
    fixed = has_lo & has_hi & (hi - lo <= 1e3 * eps * (1 + jnp.abs(lo)))
    bl, bh = has_lo & ~fixed, has_hi & ~fixed
    push = jnp.asarray(push, dt)
    span = jnp.where(bl & bh, hi - lo, jnp.inf)
    push_lo = push * jnp.minimum(jnp.maximum(1.0, jnp.abs(jnp.where(bl, lo, 0.0))), span)
    push_hi = push * jnp.minimum(jnp.maximum(1.0, jnp.abs(jnp.where(bh, hi, 0.0))), span)
    x0 = jnp.where(bl, jnp.maximum(xq, lo + push_lo), xq)
    x0 = jnp.where(bh, jnp.minimum(x0, hi - push_hi), x0)
    x0 = jnp.where(fixed, lo, x0)
    return Problem(
        lo=lo,
        hi=hi,
        tol=jnp.asarray(tol, dt),
        acc=jnp.asarray(acc, dt),
        rms=jnp.asarray(rms),
        barrier0=jnp.asarray(barrier, dt),
        max_it=jnp.asarray(max_iterations, jnp.int32),
        has_lo=has_lo,
        fixed=fixed,
        bl=bl,
        bh=bh,
        m_free=jnp.where(fixed, 0.0, 1.0).astype(dt),
        x0=x0,
    )


class Carry(eqx.Module):
    """The iteration's state: the point, its linearization and planned step, the bound
    multipliers, the damping and the barrier."""

    x: Float[Array, " n"]
    lin: Linearization  # at x
    step: Step  # planned from x
    zl: Float[Array, " n"]  # lower-bound multipliers
    zh: Float[Array, " n"]  # upper-bound multipliers
    mu: Float[Array, ""]  # Levenberg-Marquardt damping
    nu: Float[Array, ""]  # its growth factor on rejection (Nielsen)
    radius: Float[Array, ""]  # trust radius on the step length
    rho: Float[Array, ""]  # penalty floor of the merit
    mu_b: Float[Array, ""]  # barrier weight
    fref: Float[Array, ""]  # |goal| at the start (scales the barrier)
    dscale: Float[Array, ""]  # largest Gauss-Newton diagonal at the start (scales mu)
    it: Int[Array, ""]  # iterations (the first evaluation is not one)
    nlin: Int[Array, ""]  # linearizations
    first: Bool[Array, ""]  # before the first evaluation
    done: Bool[Array, ""]
    stall: Bool[Array, ""]  # stopped by a step that makes no progress


class Solution(eqx.Module):
    """Where the solve ended (not differentiated: the Assembler's implicit rule is)."""

    x: Float[Array, " n"]
    lin: Linearization
    step: Step
    on_lo: Bool[Array, " n"]  # bounds active at the solution
    on_hi: Bool[Array, " n"]
    converged: Bool[Array, ""]
    stalled: Bool[Array, ""]
    iterations: Int[Array, ""]
    evaluations: Int[Array, ""]


# ----------------------------------------------------------------------------- numbers


def error_norm(e: jax.Array, rms: jax.Array) -> jax.Array:
    """The RMS (``rms``) or infinity norm of the errors (0 when there are none)."""
    if e.shape[0] == 0:
        return jnp.zeros((), e.dtype)
    return jnp.where(rms, jnp.sqrt(jnp.mean(e**2)), jnp.max(jnp.abs(e)))


def kkt_delta(dt) -> float:
    """The regularisation ``delta`` of the KKT matrix's (2, 2) block for dtype ``dt``."""
    return 1e-10 if float(jnp.finfo(dt).eps) < 1e-10 else 1e-5


def _tiny(dt) -> float:
    eps = float(jnp.finfo(dt).eps)
    return 100 * eps * eps


def kkt_solve(H, A, rhs_x, rhs_e, delta, refine: int = 3):
    """Solve ``[H, A^T; A, 0] [dx; nu] = [rhs_x; rhs_e]`` through the regularised matrix
    ``[H, A^T; A, -delta I]`` with iterative refinement (handles redundant rows of A)."""
    n, m = H.shape[0], A.shape[0]
    if m == 0:
        return lu_solver(H)(rhs_x), jnp.zeros(0, H.dtype)
    K0 = jnp.block([[H, A.T], [A, jnp.zeros((m, m), H.dtype)]])
    K = K0.at[n:, n:].set(-delta * jnp.eye(m, dtype=H.dtype))
    solve = lu_solver(K)
    b = jnp.concatenate([rhs_x, rhs_e])
    z = solve(b)
    for _ in range(refine):
        z = z + solve(b - K0 @ z)
    return z[:n], z[n:]


def lu_solver(K: jax.Array) -> Callable[[jax.Array], jax.Array]:
    """``b -> K^-1 b`` by one LU factorisation with partial pivoting: the permutation is
    computed once (``jax.scipy.linalg.lu_solve`` rebuilds it from the pivots on every call,
    a loop that compiles to a dozen kernels each time), then two triangular solves."""
    lu, _, perm = jax.lax.linalg.lu(K)
    tri = jax.scipy.linalg.solve_triangular
    return lambda b: tri(lu, tri(lu, b[perm], lower=True, unit_diagonal=True), lower=False)


def _slacks(p: Problem, x):
    one = jnp.ones((), x.dtype)
    return jnp.where(p.bl, x - p.lo, one), jnp.where(p.bh, p.hi - x, one)


def _final_barrier(p: Problem, fref):
    """The barrier weight at which the solve may stop (``accuracy / 100`` x the starting goal)."""
    return jnp.where(p.barrier0 > 0, 1e-2 * p.acc * fref, 0.0)


def _plan_step(p: Problem, x, L: Linearization, zl, zh, mu_b, mu, radius) -> Step:
    """The damped primal-dual barrier KKT step at x."""
    n, dt = x.shape[0], x.dtype
    tiny = _tiny(dt)
    bl, bh, m_free = p.bl, p.bh, p.m_free
    H = L.J.T @ L.J + L.gH
    grad = L.J.T @ L.r + L.gg
    sl, sh = _slacks(p, x)
    sig = jnp.where(bl, zl / sl, 0.0) + jnp.where(bh, zh / sh, 0.0)
    gb = grad - jnp.where(bl, mu_b / sl, 0.0) + jnp.where(bh, mu_b / sh, 0.0)
    Hb = (H + jnp.diag(sig)) * m_free[:, None] * m_free[None, :] + jnp.diag(1.0 - m_free)
    Am = L.A * m_free[None, :]
    dx, lam = kkt_solve(Hb + mu * jnp.eye(n, dtype=dt), Am, -gb * m_free, -L.e, kkt_delta(dt))
    dx = dx * m_free
    # Trust region on the step length (the KKT step keeps the linearised errors exactly,
    # so LM damping alone cannot shorten it).
    size = jnp.max(jnp.abs(dx), initial=0.0)
    dx = dx * jnp.minimum(1.0, radius / jnp.maximum(size, tiny))
    # Fraction to the boundary.
    al = jnp.where(bl & (dx < 0), _TAU * sl / jnp.maximum(-dx, tiny), jnp.inf)
    ah = jnp.where(bh & (dx > 0), _TAU * sh / jnp.maximum(dx, tiny), jnp.inf)
    alpha = jnp.minimum(1.0, jnp.min(jnp.minimum(al, ah), initial=jnp.inf))
    dx = alpha * dx
    pred = -(gb @ dx + 0.5 * dx @ Hb @ dx)
    return Step(dx=dx, lam=lam, pred=pred, grad=grad, H=H)


def _converged(p: Problem, L: Linearization, S: Step, mu_b, mu_final):
    """Errors well inside the tolerance (``accuracy x tol``: one more Newton step is cheap
    and gives cleanly closed loops), the barrier at its final weight and the model
    predicting less than ``accuracy`` relative improvement of the goal."""
    tiny = _tiny(p.x0.dtype)
    return (
        L.ok
        & (L.error_norm(p.rms) <= p.tol * p.acc)
        & (mu_b <= mu_final * (1 + 1e-9))
        & (S.pred <= p.acc * jnp.abs(L.goal()) + tiny)
    )


def _merit_change(p: Problem, c: Carry, xt, Lt: Linearization, mu_b):
    """The change of the merit from x to the trial point and the decrease its model
    predicted, with the penalty that makes the model predict a decrease.

    The merit is goal + barrier + the step's multipliers on e + penalty (an augmented
    Lagrangian; no Maratos effect near the solution); the penalty is the smallest (above
    a floor) that makes the model predict a decrease. Returns ``(dphi, pred, dgoal, dbar)``.
    """
    tiny = _tiny(xt.dtype)
    x, L, S = c.x, c.lin, c.step
    sl, sh = _slacks(p, x)
    slt, sht = _slacks(p, xt)
    lam = S.lam
    e, et = L.e, Lt.e
    el = e + L.A @ (xt - x)
    P0 = S.pred - lam @ (el - e)
    dc = e @ e - el @ el
    rho = jnp.maximum(c.rho, jnp.where(dc > tiny, -4.0 * P0 / jnp.maximum(dc, tiny), 0.0))
    dbar = -mu_b * (
        jnp.sum(jnp.where(p.bl, jnp.log(slt / sl), 0.0)) + jnp.sum(jnp.where(p.bh, jnp.log(sht / sh), 0.0))
    )
    dgoal = 0.5 * (Lt.r - L.r) @ (Lt.r + L.r) + (Lt.g - L.g)
    dphi = dgoal + dbar + lam @ (et - e) + 0.5 * rho * ((et - e) @ (et + e))
    pred = P0 + 0.5 * rho * dc
    return dphi, pred, dgoal, dbar


def _bound_multipliers(p: Problem, c: Carry, xn, mu_b, accept):
    """The primal-dual update of the bound multipliers, kept positive and within a factor
    1e10 of mu/s (IPOPT's safeguard); started at mu/s."""
    first, x = c.first, c.x
    sl, sh = _slacks(p, x)
    sln, shn = _slacks(p, xn)
    d = xn - x
    zl = mu_b / sl - jnp.where(p.bl, c.zl / sl, 0.0) * d
    zh = mu_b / sh + jnp.where(p.bh, c.zh / sh, 0.0) * d
    zl = jnp.where(first | ~accept, jnp.where(first, mu_b / sln, c.zl), jnp.maximum(zl, 0.005 * c.zl))
    zh = jnp.where(first | ~accept, jnp.where(first, mu_b / shn, c.zh), jnp.maximum(zh, 0.005 * c.zh))
    zl = jnp.clip(zl, mu_b / (1e10 * sln), 1e10 * mu_b / sln)
    zh = jnp.clip(zh, mu_b / (1e10 * shn), 1e10 * mu_b / shn)
    return jnp.where(p.bl, zl, 0.0), jnp.where(p.bh, zh, 0.0)


def _select(pred, a, b):
    return jax.tree.map(lambda u, v: jnp.where(pred, u, v), a, b)


# ----------------------------------------------------------------------------- the method


def init(p: Problem, nr: int, ne: int) -> Carry:
    """The carry before the first evaluation (at ``p.x0``)."""
    n, dt = p.x0.shape[0], p.x0.dtype
    zeros = jnp.zeros(n, dt)
    return Carry(
        x=p.x0,
        lin=Linearization.zeros(nr, ne, n, dt),
        step=Step.zeros(ne, n, dt),
        zl=zeros,
        zh=zeros,
        mu=jnp.zeros((), dt),
        nu=jnp.asarray(2.0, dt),
        radius=jnp.asarray(1.0, dt),
        rho=jnp.zeros((), dt),
        mu_b=jnp.zeros((), dt),
        fref=jnp.ones((), dt),
        dscale=jnp.ones((), dt),
        it=jnp.asarray(0),
        nlin=jnp.asarray(0),
        first=jnp.asarray(True),
        done=jnp.asarray(False),
        stall=jnp.asarray(False),
    )


def step(linearize: Callable[[jax.Array], Linearization], p: Problem, c: Carry) -> Carry:
    """One iteration: evaluate the planned step's end (the start, on the first call),
    accept it if the merit falls, update damping, trust radius, bound multipliers and
    barrier, and plan the next step."""
    dt = c.x.dtype
    eps = float(jnp.finfo(dt).eps)
    bl, bh, first = p.bl, p.bh, c.first
    x, L = c.x, c.lin
    xt = jnp.where(first, x, x + c.step.dx)
    xt = jnp.where(bl, jnp.maximum(xt, p.lo), xt)
    xt = jnp.where(bh, jnp.minimum(xt, p.hi), xt)
    Lt = linearize(xt)
    # Scales fixed at the start: the barrier weight is relative to the starting goal.
    f_t = Lt.goal()
    fref = jnp.where(first, jnp.maximum(jnp.abs(f_t), 1e-12), c.fref)
    hd = jnp.sum(Lt.J**2, axis=0) + jnp.diag(Lt.gH)
    dscale = jnp.where(first, jnp.maximum(jnp.max(jnp.abs(hd), initial=0.0), 1e-8), c.dscale)
    any_bound = jnp.any(bl | bh)
    mu_b = jnp.where(first, jnp.where(any_bound, p.barrier0, 0.0) * fref, c.mu_b)
    mu_final = _final_barrier(p, fref)
    mu_b = jnp.where(any_bound, jnp.maximum(mu_b, mu_final), mu_final)
    # Accept on the merit; Nielsen's damping update and the trust radius.
    dphi, pred, dgoal, dbar = _merit_change(p, c, xt, Lt, mu_b)
    finite = jnp.isfinite(dgoal) & jnp.isfinite(dbar) & jnp.all(jnp.isfinite(xt)) & jnp.isfinite(f_t)
    accept = finite & (first | (dphi < 0))
    ratio = -dphi / jnp.maximum(pred, _tiny(dt))
    shrink = jnp.maximum(1 / 3, 1 - (2 * jnp.clip(ratio, 0, 1) - 1) ** 3)
    mu = jnp.where(first, 1e-6 * dscale, jnp.where(accept, c.mu * shrink, c.mu * c.nu)).astype(dt)
    nu = jnp.where(accept, 2.0, c.nu * 2).astype(dt)
    moved = jnp.max(jnp.abs(xt - x), initial=0.0)
    radius = jnp.where(first, 1.0, jnp.where(accept, jnp.maximum(c.radius, 2 * moved), 0.25 * moved))
    radius = jnp.clip(radius, 0.0, 1e3).astype(dt)
    small = moved <= 100 * eps * (1 + jnp.max(jnp.abs(x), initial=0.0))
    stall = ~first & ~accept & ((mu > 1e20 * dscale) | small | ~jnp.isfinite(L.goal()))
    xn = jnp.where(accept, xt, x)
    Ln = _select(accept, Lt, L)
    zl, zh = _bound_multipliers(p, c, xn, mu_b, accept)
    Sn = _plan_step(p, xn, Ln, zl, zh, mu_b, mu, radius)
    # Reduce the barrier once its subproblem is solved: the Newton decrement (the
    # predicted decrease) below mu, errors within tolerance (IPOPT's monotone rule,
    # superlinear, relative to fref); then plan the step again.
    sub_done = (Sn.pred <= mu_b) & (Ln.error_norm(p.rms) <= p.tol) & (mu_b > mu_final)
    mu_rel = mu_b / fref
    mu_b_new = jnp.where(sub_done, jnp.maximum(mu_final, fref * jnp.minimum(0.2 * mu_rel, mu_rel**1.5)), mu_b)
    # A rejected step at round-off size (stall) while the barrier can still fall is not the
    # end: the barrier falls and the damping and radius start afresh for its new subproblem
    # (else a solved subproblem stops as "stalled" at its barrier, short of the converged point).
    reset = sub_done & ~accept
    mu = jnp.where(reset, jnp.minimum(mu, 1e-6 * dscale), mu).astype(dt)
    radius = jnp.where(reset, jnp.maximum(radius, 1.0), radius).astype(dt)
    stall = stall & ~sub_done
    Sn = _select(sub_done, _plan_step(p, xn, Ln, zl, zh, mu_b_new, mu, radius), Sn)
    conv = _converged(p, Ln, Sn, mu_b_new, mu_final)
    return Carry(
        x=xn,
        lin=Ln,
        step=Sn,
        zl=zl,
        zh=zh,
        mu=mu,
        nu=nu,
        radius=radius,
        rho=jnp.where(first, 1e-3 * dscale, c.rho),
        mu_b=mu_b_new,
        fref=fref,
        dscale=dscale,
        it=c.it + jnp.where(first, 0, 1),
        nlin=c.nlin + 1,
        first=jnp.asarray(False),
        done=conv | stall | (first & ~accept),
        stall=stall | (first & ~accept),
    )


def terminate(p: Problem, c: Carry) -> jax.Array:
    """True once the solve is over: converged, stalled, or out of iterations (never before
    the first evaluation)."""
    return ~c.first & (c.done | (c.it >= p.max_it))


def finish(p: Problem, c: Carry) -> Solution:
    """The solution: where the loop ended (not differentiated) and the bounds active there.

    A bound is active where its multiplier would push the unconstrained Newton step past
    it (``z > s h``) and the goal's gradient points into it."""
    tiny = _tiny(c.x.dtype)
    sg = jax.lax.stop_gradient
    x, L, S = sg(c.x), jax.tree.map(sg, c.lin), jax.tree.map(sg, c.step)
    sl, sh = _slacks(p, x)
    hdiag = jnp.maximum(jnp.diag(S.H), tiny)
    on_lo = p.bl & (c.zl > sl * hdiag) & (S.grad > 0)
    on_hi = p.bh & (c.zh > sh * hdiag) & (S.grad < 0)
    on_lo = on_lo | (p.fixed & p.has_lo)
    return Solution(
        x=x,
        lin=L,
        step=S,
        on_lo=on_lo,
        on_hi=on_hi,
        converged=_converged(p, c.lin, c.step, c.mu_b, _final_barrier(p, c.fref)),
        stalled=c.stall,
        iterations=c.it,
        evaluations=c.nlin,
    )


def solve(linearize: Callable[[jax.Array], Linearization], p: Problem, nr: int, ne: int) -> Solution:
    """``init``, ``step`` until ``terminate``, ``finish``: one ``lax.while_loop``."""
    carry = jax.lax.while_loop(lambda c: ~terminate(p, c), lambda c: step(linearize, p, c), init(p, nr, ne))
    return finish(p, carry)
