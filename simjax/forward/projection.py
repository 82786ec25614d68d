"""Projection onto the constraint manifold (Simbody ``projectQ`` / ``projectU``).

``project_q`` runs a fixed number of Gauss-Newton steps in u-space, as Simbody does:
``du = -P^+ perr`` (the minimum-norm correction, ``P = d(pverr)/du``), ``dq = N(q) du``,
then quaternions are normalised. ``project_u`` is one exact least-squares step
``du = -[P; V]^+ uerr``. Both are plain JAX (a ``lax.scan`` with a static trip count, no
``while_loop``), so they jit, vmap and differentiate; the accuracy check is a separate
eager step that raises a clear error outside ``jit``.

The error norm is Simbody's default: the RMS of the raw position (velocity) errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._stage import Stage
from ..constraints import kernels as cn
from ..dynamics import stages as rz
from ..model.model import Model
from ..model.state import State
from .realize import realize


def min_norm_correction(A: jax.Array, r: jax.Array) -> jax.Array:
    """The minimum-norm ``x`` with ``A x = r`` (least squares if inconsistent), for a
    possibly rank-deficient ``A`` (m, n); iterated Tikhonov on ``A A^T`` (no SVD, so
    gradients stay finite at redundant rows)."""
    if A.shape[0] == 0:
        return jnp.zeros(A.shape[1], A.dtype)
    S = A @ A.T
    scale = jnp.max(jnp.abs(jnp.diag(S)))
    scale = jnp.where(scale > 0, scale, 1.0)
    eps = (1e-8 if S.dtype == jnp.float64 else 1e-4) * scale
    L = jnp.linalg.cholesky(S + eps * jnp.eye(S.shape[0], dtype=S.dtype))
    solve = lambda x: jax.scipy.linalg.cho_solve((L, True), x)
    y = solve(r)
    for _ in range(5):
        y = y + solve(r - S @ y)
    return A.T @ y


def holonomic_rows(model: Model, state: State) -> jax.Array:
    """``P`` (mp, nu): rows of G of the holonomic constraints (needs Position)."""
    topo = model.topology(state.use_euler_angles)
    mp, _, _ = model.constraint_counts(state.use_euler_angles)
    en = state.instance["matter"]["constraint_enabled"]
    P = jnp.zeros((mp, topo.nu), state.position_cache.p_GB.dtype)
    for c in model.constraints(state.use_euler_angles):
        if not c.mp:
            continue
        coef = cn.constraint_coefficients(model, state, c)
        Gc = cn.coefficient_rows_to_G(model, state, c, coef)[: c.mp]
        P = P.at[c.rows[0]].set(Gc * en[c.index])
    return P


def velocity_rows(model: Model, state: State) -> jax.Array:
    """``[P; V]`` (mp + mv, nu) (needs Velocity)."""
    topo = model.topology(state.use_euler_angles)
    mp, mv, _ = model.constraint_counts(state.use_euler_angles)
    en = state.instance["matter"]["constraint_enabled"]
    out = jnp.zeros((mp + mv, topo.nu), state.position_cache.p_GB.dtype)
    for c in model.constraints(state.use_euler_angles):
        if not (c.mp or c.mv):
            continue
        coef = cn.constraint_coefficients(model, state, c)
        Gc = cn.coefficient_rows_to_G(model, state, c, coef)[: c.mp + c.mv]
        rows = np.concatenate([c.rows[0], mp + c.rows[1]])
        out = out.at[rows].set(Gc * en[c.index])
    return out


def _normalize_quaternions(model: Model, state: State, q: jax.Array) -> jax.Array:
    topo = model.topology(state.use_euler_angles)
    qs = np.asarray(topo.quaternion_slots)
    if not len(qs):
        return q
    qn = q[qs]
    qn = qn / jnp.linalg.norm(qn, axis=-1, keepdims=True)
    return q.at[qs.reshape(-1)].set(qn.reshape(-1))


def project_q(model: Model, state: State, iterations: int = 6) -> State:
    """``iterations`` Gauss-Newton steps onto ``perr = 0``; returns the State at Time stage
    (or Position if realized), quaternions normalised."""
    mp, _, _ = model.constraint_counts(state.use_euler_angles)
    base = state if state.stage < Stage.POSITION else state.with_q(state.q)
    q0 = _normalize_quaternions(model, state, state.q)
    if mp == 0:
        return base.with_q(q0)

    def step(q, _):
        s = realize(model, base.with_q(q), Stage.POSITION)
        perr = s.position_cache.qerr[:mp]
        du = min_norm_correction(holonomic_rows(model, s), -perr)
        dq = rz.calc_qdot(model, s.with_u(du.astype(s.u.dtype)))
        return _normalize_quaternions(model, s, q + dq), None

    q, _ = jax.lax.scan(step, q0, None, length=iterations)
    return base.with_q(q)


def project_u(model: Model, state: State) -> State:
    """One exact least-squares step onto ``uerr = 0`` (q unchanged)."""
    mp, mv, _ = model.constraint_counts(state.use_euler_angles)
    if mp + mv == 0:
        return state
    s = realize(model, state, Stage.VELOCITY)
    du = min_norm_correction(velocity_rows(model, s), -s.velocity_cache.uerr)
    return s.with_u(s.u + du)


def rms(x: jax.Array) -> jax.Array:
    """Root mean square (0 for an empty vector)."""
    return jnp.sqrt(jnp.mean(x**2)) if x.shape[-1] else jnp.zeros((), x.dtype)
