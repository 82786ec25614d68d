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


def project_q(model: Model, state: State, iterations: int = 6) -> State:
    """``iterations`` Gauss-Newton steps onto ``perr = 0``; returns the State at Time stage
    (or Position if realized), quaternions normalised."""
    mp, _, _ = model.constraint_counts(state.use_euler_angles)
    base = state if state.stage < Stage.POSITION else state.with_q(state.q)
    q0 = rz.normalize_quaternions(model, state, state.q)
    if mp == 0:
        return base.with_q(q0)

    def step(q, _):
        s = realize(model, base.with_q(q), Stage.POSITION)
        perr = s.position_cache.qerr[:mp]
        du = min_norm_correction(cn.constraint_matrix(model, s, 1), -perr)
        dq = rz.calc_qdot(model, s.with_u(du.astype(s.u.dtype)))
        return rz.normalize_quaternions(model, s, q + dq), None

    q, _ = jax.lax.scan(step, q0, None, length=iterations)
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
