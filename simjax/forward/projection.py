"""Projection onto the constraint manifold (Simbody ``projectQ`` / ``projectU``).

``project_q`` runs a fixed number of Gauss-Newton steps in u-space, as Simbody does:
``du = -P^+ perr`` (the minimum-norm correction, ``P = d(pverr)/du``), ``dq = N(q) du``,
then quaternions are normalised; damped (Levenberg-Marquardt, step cap) for far starts.
``project_u`` is one exact least-squares step ``du = -[P; V]^+ uerr``. Both are plain JAX
(a ``lax.scan`` with a static trip count, no ``while_loop``), so they jit, vmap and
differentiate; the accuracy check is a separate eager step that raises a clear error
outside ``jit``.

The error norm is Simbody's default: the RMS of the raw position (velocity) errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from .. import _batching
from .._stage import Stage
from ..constraints import kernels as cn
from ..dynamics import stages as rz
from ..model.model import Model
from ..model.state import State
from .realize import realize


def min_norm_correction(A: jax.Array, r: jax.Array) -> jax.Array:
    """The minimum-norm ``x`` with ``A x = r`` (least squares if inconsistent), for a
    possibly rank-deficient ``A`` (m, n) (no SVD, so gradients stay finite at redundant
    rows)."""
    if A.shape[0] == 0:
        return jnp.zeros(A.shape[1], A.dtype)
    return A.T @ cn.min_norm_solve(A @ A.T, r)


# The largest change of any u in one damped projection step (radians or metres).
_MAX_STEP = 1.0


def _position_errors_and_matrix(model: Model, base: State, mp: int, q: jax.Array):
    """The position errors at ``q`` and their matrix ``P = d(perr)/du`` (mp, nu)."""
    s = realize(model, base.with_q(q), Stage.POSITION)
    return s.position_cache.qerr[:mp], cn.constraint_matrix(model, s, 1)


def _propose(model: Model, base: State, mp: int, q, perr, P, mu=None) -> jax.Array:
    """One Gauss-Newton step from ``q`` (Levenberg-Marquardt damped with ``mu``)."""
    if mu is None:
        du = min_norm_correction(P, -perr)
    else:
        S = P @ P.T
        scale = jnp.max(jnp.abs(jnp.diag(S)))
        du = -P.T @ cn.min_norm_solve(S + mu * scale * jnp.eye(mp, dtype=S.dtype), perr)
        big = jnp.max(jnp.abs(du))
        du = du * jnp.where(big > _MAX_STEP, _MAX_STEP / jnp.where(big > _MAX_STEP, big, 1.0), 1.0)
    dq = rz.calc_qdot(model, base.with_q(q).with_u(du.astype(base.u.dtype)))
    return rz.normalize_quaternions(model, base, q + dq)


def _materialize(t):
    """A custom rule's tangent, with a symbolic zero made an array of zeros."""
    if not isinstance(t, SymbolicZero):
        return t
    if t.dtype == jax.dtypes.float0:
        return np.zeros(t.shape, jax.dtypes.float0)
    return jnp.zeros(t.shape, t.dtype)


def _gauss_newton(model: Model, mp: int, iterations: int):
    """``(base, q0) -> q``: ``iterations`` undamped steps, differentiated implicitly.

    Its derivative (a custom JVP, so forward and reverse mode and higher orders all work)
    is the projection's on the manifold: ``dq = S (dq0 - N P^+ dperr)``, with ``dperr`` the
    change of the position errors at the result ``q`` (from ``dq0`` and from any parameter
    of ``base``), ``P = d(perr)/du`` and ``N = dq/du`` at ``q``, and ``S`` the derivative of
    the quaternion normalisation. That is the exact derivative of the steps where the start
    lies on the manifold, and within O(start's error) of it elsewhere (time stepping starts
    each projection within a step's error of the manifold). Autodiff through the steps
    instead would differentiate every step's constraint matrix and regularised solve: a
    second derivative of the constraint errors per step, the largest part of a constrained
    rollout's reverse pass.

    Both the steps and the rule realize without batching rules (``_batching.unchunked``):
    in a ``lax.scan`` (a rollout) a second reverse pass meets them with their custom
    rules stripped (the scan's loop-invariant hoisting partially evaluates its body), and
    a ``custom_vmap`` has no reverse mode. There it differentiates the steps themselves,
    as above."""

    @jax.custom_jvp
    def project(base: State, q0: jax.Array) -> jax.Array:
        def gn(q, _):
            return _propose(model, base, mp, q, *_position_errors_and_matrix(model, base, mp, q)), None

        with _batching.unchunked():
            return jax.lax.scan(gn, q0, None, length=iterations)[0]

    def project_jvp(primals, tangents):
        with _batching.unchunked():
            return _project_jvp(primals, tangents)

    def _project_jvp(primals, tangents):
        base, q0 = primals
        dbase, dq0 = tangents
        q = project(base, q0)
        _, P = _position_errors_and_matrix(model, base, mp, q)
        dq0 = _materialize(dq0)
        # what the position errors read besides q (base's q, u, z and stale cache are not)
        moved = jax.tree.leaves((dbase.t, dbase.instance, dbase.discrete))
        qdot_is_u = model.topology(base.use_euler_angles).qdot_is_u
        if qdot_is_u and all(isinstance(t, SymbolicZero) for t in moved):
            # only the start moves and qdot = u (no quaternions): d(perr) = P dq0, and the
            # derivative is the projector dq0 - P^+ P dq0 (no second pass through the
            # kinematics; a rollout's gradient with respect to its start is this case)
            return q, dq0 - min_norm_correction(P, P @ dq0)
        dbase = jax.tree.map(_materialize, dbase)
        perr = lambda b, x: realize(model, b.with_q(x), Stage.POSITION).position_cache.qerr[:mp]
        _, dperr = jax.jvp(perr, (base, q), (dbase, dq0))
        du = min_norm_correction(P, dperr)
        dq = rz.calc_qdot(model, base.with_q(q).with_u(du.astype(base.u.dtype)))
        _, dq = jax.jvp(lambda x: rz.normalize_quaternions(model, base, x), (q,), (dq0 - dq,))
        return q, dq

    project.defjvp(project_jvp, symbolic_zeros=True)
    return project


def project_q(model: Model, state: State, iterations: int = 6, damped: bool = False) -> State:
    """``iterations`` Gauss-Newton steps onto ``perr = 0``; returns the State at Time stage
    (or Position if realized), quaternions normalised.

    Each step is Simbody's minimum-norm correction ``du = -P^+ perr``, ``dq = N(q) du``.
    ``damped`` (what ``System.project_q`` uses; time stepping, which starts on the
    manifold, does not): a step that does not lower the error is rejected and retried with
    Levenberg-Marquardt damping ``du = -P^T (P P^T + mu I)^-1 perr`` (``mu`` x10 per
    rejection, relative to ``max diag P P^T``; /10 per success, back to 0), and no step
    moves a u by more than ``_MAX_STEP``, so a far start neither raises the error nor winds
    joints up by many turns. Near the manifold every step is accepted: plain Gauss-Newton.
    It costs one more evaluation (the start's) and returns the best point evaluated.
    Derivatives: of the damped steps, by autodiff through them (valid from a far start);
    of the undamped ones, the projection's derivative on the manifold (``_gauss_newton``)."""
    mp, _, _ = model.constraint_counts(state.use_euler_angles)
    base = state if state.stage < Stage.POSITION else state.with_q(state.q)
    q0 = rz.normalize_quaternions(model, state, state.q)
    if mp == 0:
        return base.with_q(q0)
    at = lambda q: _position_errors_and_matrix(model, base, mp, q)
    propose = lambda q, perr, P, mu=None: _propose(model, base, mp, q, perr, P, mu)

    if not damped:
        return base.with_q(_gauss_newton(model, mp, iterations)(base, q0))

    def step(c: tuple, _: None) -> tuple[tuple, None]:
        q, e, perr, P, mu, q_try = c
        perr_t, P_t = at(q_try)
        e_t = perr_t @ perr_t
        ok = e_t <= e  # NaN is rejected
        q = jnp.where(ok, q_try, q)
        e = jnp.where(ok, e_t, e)
        perr = jnp.where(ok, perr_t, perr)
        P = jnp.where(ok, P_t, P)
        mu = jnp.where(ok, jnp.where(mu > 1e-5, 0.1 * mu, 0.0), jnp.maximum(10.0 * mu, 1e-4))
        return (q, e, perr, P, mu, propose(q, perr, P, mu)), None

    perr0, P0 = at(q0)
    mu0 = jnp.zeros((), perr0.dtype)
    c0 = (q0, perr0 @ perr0, perr0, P0, mu0, propose(q0, perr0, P0, mu0))
    carry, _ = jax.lax.scan(step, c0, None, length=iterations)
    q = carry[0]
    return base.with_q(q)


def project_u(model: Model, state: State) -> State:
    """One exact least-squares step onto ``uerr = 0`` (q unchanged)."""
    mp, mv, _ = model.constraint_counts(state.use_euler_angles)
    if mp + mv == 0:
        return state
    s = realize(model, state, Stage.VELOCITY)
    du = min_norm_correction(cn.constraint_matrix(model, s, 2), -s.velocity_cache.uerr)
    return s.with_u(s.u + du)


def rms(x: jax.Array) -> jax.Array:
    """Root mean square (0 for an empty vector)."""
    return jnp.sqrt(jnp.mean(x**2)) if x.shape[-1] else jnp.zeros((), x.dtype)


#: A projection's tolerance must be at least this many round-offs of the largest body
#: distance (``resolvable_tolerance``).
RESOLVED_EPS = 2.0


def resolvable_tolerance(state: State, level: int = 0) -> jax.Array:
    """The smallest constraint tolerance ``state``'s dtype can show to be met:
    ``2 eps (1 + max |p_GB|)`` for position errors (``level`` 0: the round-off of the
    largest body-origin distance from Ground, which the errors are computed from), times
    ``1 + max |u|`` for velocity errors (``level`` 1). In float64 about 1e-15 for a
    metre-sized model, in float32 about 1e-6: a computed error below a smaller tolerance
    (even 0) does not show that the true error is. Needs Position."""
    eps = float(jnp.finfo(state.q.dtype).eps)
    p = state.position_cache.p_GB
    scale = 1 + jnp.max(jnp.abs(p), initial=0.0)
    if level:
        scale = scale * (1 + jnp.max(jnp.abs(state.u), initial=0.0))
    return jax.lax.stop_gradient(RESOLVED_EPS * eps * scale)
