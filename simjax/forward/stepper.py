"""The velocity-level time step with unilateral constraints (ArtiSynth's scheme, seed 001).

One step of size ``h`` from ``(q0, u0)`` with the engagement ``E`` held in the State:

1. **Velocity solve with complementarity.** The new speeds ``u1`` minimise
   ``1/2 (u1 - u0)^T M (u1 - u0) - h f^T u1`` subject to the System's bilateral
   constraints ``G (u1 - u0) = h b - uerr`` (Simbody's acceleration-level rows, with the
   velocity error fed back) and, for every engaged unilateral row, ``E N u1 >= 0``; so
   ``M (u1 - u0) = h f + G^T lam + N^T E theta`` with ``theta >= 0`` and
   ``theta . (E N u1) = 0`` (inelastic). The limit force is ``theta / h``.
2. **Positions** ``q1 = q0 + h N(q0) u1`` (semi-explicit Euler; quaternions normalised).
3. **Engagement** is updated at ``(q1, u1)`` by ArtiSynth's rule
   (:func:`simjax.constraints.unilateral.update_engaged`).
4. **Position correction** (``iterations`` times): the smallest mass-weighted ``du`` with
   ``P du = -perr`` (holonomic rows) and ``E N du >= -(d + tol)`` for rows deeper than
   their deadband ``tol``; ``q += N(q) du``. Joints come to rest ``tol`` inside. Rows not
   engaged may not be pushed past their nearer bound by the correction (beyond ArtiSynth,
   which lets a correction push a free neighbour into its region, to be corrected a step
   later).
5. With bilateral constraints, a velocity projection onto ``uerr = 0`` that keeps the
   engaged rows' ``E N u >= 0``.

Shapes never depend on the engagement (rows are masked), so a batch with different
contacts is one compiled program.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._stage import Stage
from ..constraints import kernels as cn
from ..constraints import unilateral as uni
from ..dynamics import stages as rz
from ..model.model import Model, classical_acceleration
from ..model.state import State
from .realize import realize


def initial_engagement(model: Model, state: State) -> dict[str, Any]:
    """The matter discrete variables with rows that start inside their inadmissible region
    engaged (ArtiSynth engages them before the first step)."""
    dm = dict(state.discrete["matter"])
    inst = state.instance["matter"]
    if not uni.limit_data(model, state.use_euler_angles).constant:
        state = realize(model, state, Stage.POSITION)
    phi, _ = uni.limit_rows(model, state)
    E = dm["limit_engaged"]
    dm["limit_value"] = phi
    new = jnp.where(phi <= inst["limit_lower"], 1.0, jnp.where(phi >= inst["limit_upper"], -1.0, E))
    dm["limit_engaged_count"] = jnp.where(new != E, 1.0, dm["limit_engaged_count"])
    dm["limit_engaged"] = new
    return dm


def _bilateral_rows(model: Model, s: State, u0: jax.Array, h: Any):
    """``G`` and the right side ``G u0 + h b - uerr`` of the bilateral velocity rows."""
    mp, mv, ma = model.constraint_counts(s.use_euler_angles)
    nu = u0.shape[0]
    if mp + mv + ma == 0:
        return jnp.zeros((0, nu), u0.dtype), jnp.zeros(0, u0.dtype)
    pos, vel, dyn = s.position_cache, s.velocity_cache, s.dynamics_cache
    A0 = classical_acceleration(dyn.a_bias, vel.V_O, pos.p_GB)
    G, b = cn.g_and_b(model, s, A0)
    uerr = jnp.concatenate([vel.uerr, jnp.zeros(ma, u0.dtype)])
    return G, G @ u0 + h * b - uerr


def velocity_step(model: Model, base: State, t: Any, y: Any, h: Any):
    """Steps 1–2: ``(q1, u1, z1)``, the limit forces (L,) and whether the complementarity
    solve converged, with the engagement of ``base`` (no engagement update, no correction)."""
    q0, u0, z0 = y
    s = realize(model, base.with_time(t).with_q(q0).with_u(u0).with_z(z0), Stage.DYNAMICS)
    M = rz.mass_matrix(model, s, s.position_cache)
    f = -s.dynamics_cache.bias
    G, a = _bilateral_rows(model, s, u0, h)
    E = s.discrete["matter"]["limit_engaged"]
    _, N = uni.limit_rows(model, s)
    chol = rz.cholesky_lower(M)
    # One solve for the free speeds and M^-1 N^T (N is constant for coordinate limits, so
    # the correction reuses YN and W = N M^-1 N^T).
    Y = rz.cho_solve_lower(chol, jnp.concatenate([f[:, None], N.T], axis=1))
    YN = Y[:, 1:]
    W = N @ YN
    u1, _, theta, ok = uni.solve_qp(
        M,
        M @ u0 + h * f,
        G,
        a,
        E[:, None] * N,
        jnp.zeros_like(E),
        E != 0,
        chol=chol,
        YB=YN * E[None, :],
        independent=uni.limit_data(model, s.use_euler_angles).independent,
        x0=u0 + h * Y[:, 0],
        W=W * E[:, None] * E[None, :],
    )
    q1 = rz.normalize_quaternions(model, s, q0 + h * rz.calc_qdot(model, s.with_u(u1)))
    z1 = z0
    if z0.shape[0]:
        z1 = z0 + h * realize(model, s, Stage.ACCELERATION).zdot
    return (q1, u1, z1), theta / h, ok, (M, chol, YN, W)


def correct_positions(model: Model, base: State, q: jax.Array, E: jax.Array, Mc: Any, iterations: int):
    """Step 4: ``iterations`` mass-weighted corrections onto the holonomic constraints and
    out of the engaged rows' regions (to within their deadband). Coordinate limits alone are
    linear in q: one correction is exact for them."""
    M, chol, YN, WN = Mc
    mp, _, _ = model.constraint_counts(base.use_euler_angles)
    inst = base.instance["matter"]
    lo, hi, tol = inst["limit_lower"], inst["limit_upper"], inst["limit_tol"]
    data = uni.limit_data(model, base.use_euler_angles)
    constant = data.constant

    def step(q, _):
        s = base.with_q(q)
        if mp:
            s = realize(model, s, Stage.POSITION)
            P = cn.constraint_matrix(model, s, 1)
            rhs = -s.position_cache.qerr[:mp]
        else:
            P, rhs = jnp.zeros((0, M.shape[0]), M.dtype), jnp.zeros(0, M.dtype)
        phi, N = uni.limit_rows(model, s, q)
        Y = YN if constant else rz.cho_solve_lower(chol, N.T)
        sign, bn, mask = uni.correction_rows(phi, lo, hi, tol, E)
        du, _, _, _ = uni.solve_qp(
            M,
            jnp.zeros(M.shape[0], M.dtype),
            P,
            rhs,
            sign[:, None] * N,
            bn,
            mask,
            chol=chol,
            YB=Y * sign[None, :],
            independent=data.independent,
            x0=jnp.zeros(M.shape[0], M.dtype),  # M^-1 0
            W=WN * sign[:, None] * sign[None, :] if constant else None,
        )
        dq = rz.calc_qdot(model, s.with_u(du.astype(q.dtype)))
        return rz.normalize_quaternions(model, s, q + dq), None

    q, _ = jax.lax.scan(step, q, None, length=max(int(iterations), 1) if mp else 1)
    return q


def limit_step(model: Model, base: State, t: Any, y: Any, h: Any, iterations: int):
    """One full step (1–5) with the engagement of ``base``; returns ``(y1, matter discrete
    variables, RMS position error, solver converged)``."""
    inst = base.instance["matter"]
    dm = dict(base.discrete["matter"])
    E, count = dm["limit_engaged"], dm["limit_engaged_count"]
    (q1, u1, z1), force, ok, Mc = velocity_step(model, base, t, y, h)
    constant = uni.limit_data(model, base.use_euler_angles).constant
    b1 = base.with_time(t + h)
    s1 = b1 if constant else realize(model, b1.with_q(q1).with_u(u1), Stage.POSITION)
    phi1, N1 = uni.limit_rows(model, s1, q1)
    E1, count1 = uni.update_engaged(phi1, N1 @ u1, inst["limit_lower"], inst["limit_upper"], E, count)
    b1 = _with_matter_discrete(b1, {**dm, "limit_engaged": E1})
    q1 = correct_positions(model, b1, q1, E1, Mc, iterations)
    mp, mv, _ = model.constraint_counts(base.use_euler_angles)
    err = jnp.zeros((), q1.dtype)
    s = b1.with_q(q1)
    if mp + mv:
        s = realize(model, s.with_u(u1), Stage.VELOCITY)
        _, N = uni.limit_rows(model, s, q1)
        Bv = E1[:, None] * N
        PV = cn.constraint_matrix(model, s, 2)
        Y = Mc[2] if constant else rz.cho_solve_lower(Mc[1], N.T)
        du, _, _, ok2 = uni.solve_qp(
            Mc[0],
            jnp.zeros_like(u1),
            PV,
            -s.velocity_cache.uerr,
            Bv,
            -Bv @ u1,
            E1 != 0,
            chol=Mc[1],
            YB=Y * E1[None, :],
        )
        u1 = u1 + du
        ok = ok & ok2
        if mp:
            err = jnp.sqrt(jnp.mean(s.position_cache.qerr[:mp] ** 2))
    elif not constant:
        s = realize(model, s, Stage.POSITION)
    phi, _ = uni.limit_rows(model, s, q1)
    dm.update(
        limit_engaged=E1,
        limit_engaged_count=count1,
        limit_force=jnp.where(E1 == E, force, 0.0),
        limit_value=phi,
    )
    return (q1, u1, z1), dm, err, ok


def _with_matter_discrete(state: State, dm: dict[str, Any]) -> State:
    out = state
    for name, v in dm.items():
        if v is not state.discrete["matter"][name]:
            out = out.with_discrete("matter", name, v)
    return out


def limits_penetrated(state: State, dm: dict[str, Any], slack: float) -> jax.Array:
    """Whether a unilateral row's value (``dm["limit_value"]``, after a step's correction)
    lies inside its inadmissible region deeper than twice its deadband plus ``slack``: the
    correction could not bring it back, so the row contradicts the bilateral constraints
    (or another row)."""
    inst = state.instance["matter"]
    phi = dm["limit_value"]
    depth = jnp.maximum(inst["limit_lower"] - phi, phi - inst["limit_upper"])
    return jnp.any(depth > 2 * inst["limit_tol"] + slack)
