"""Constraints (Simbody ``Constraint::*``) with every time derivative from autodiff.

A constraint is defined by its *lowest-level* error only: position errors ``perr`` for
holonomic equations, velocity errors ``verr`` for nonholonomic ones, acceleration errors
``aerr`` for acceleration-only ones. Each is a function of a ``ConstraintContext``: the
poses, velocities and accelerations of the constrained bodies *relative to their ancestor
body, expressed in the ancestor frame* (as in Simbody), the q, u and udot of the
constrained mobilizers, time, and the constraint's Instance-stage parameters.

Everything else is derived exactly:

* ``d/dt`` of an error is a forward-mode JVP along the trajectory's tangent
  (``Rdot = [w]x R``, ``pdot = v``, ``wdot = alpha``, ``vdot = a``, ``qdot = N(q) u``,
  ``udot``, ``tdot = 1``), so ``uerr = d/dt perr`` and ``udotErr = d/dt uerr`` hold to
  round-off for every kind, built-in or custom.
* The acceleration errors are affine in the body accelerations and udot; their
  coefficients (a small forward Jacobian) times the body Jacobians give the rows of
  ``G = [P; V; A]`` and the rhs ``b`` of ``G udot = b``.
* The constraint forces of multipliers are ``G^T lambda`` split into body forces
  ``[torque about the body origin; force]`` (Ground) and mobility forces.

Equations of motion (Simbody): ``M udot + G^T lambda = f``, ``G udot = b``. Rows are
ordered as Simbody orders them: all holonomic rows (constraint order), then all
nonholonomic, then all acceleration-only. A disabled constraint keeps its rows, zeroed
(its errors read 0 and its multipliers 0), so enabling and disabling never changes array
shapes (vmap-friendly); Simbody instead removes the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from .._stage import Stage
from ..model.model import Model
from ..model.state import State

# ============================================================================ kinematics


class Kin(eqx.Module):
    """Ground-frame kinematics of one constraint's bodies (index 0 is the ancestor) and
    the variables of its constrained mobilizers. A pytree: time derivatives are JVPs."""

    R: jax.Array  # (k, 3, 3)
    p: jax.Array  # (k, 3)
    w: jax.Array  # (k, 3)
    v: jax.Array  # (k, 3) velocity of the body origin
    alpha: jax.Array  # (k, 3)
    a: jax.Array  # (k, 3) acceleration of the body origin
    q: tuple[jax.Array, ...]
    u: tuple[jax.Array, ...]
    udot: tuple[jax.Array, ...]
    t: jax.Array
    params: dict[str, jax.Array]
    mparams: tuple[jax.Array, ...]


def _time_tangent(kin: Kin, mobs: tuple[Any, ...]) -> Kin:
    """d/dt of every field of ``kin`` along the motion (accelerations are held fixed)."""
    qdot = tuple(
        u if m.N(q, mp) is None else m.N(q, mp) @ u
        for m, q, u, mp in zip(mobs, kin.q, kin.u, kin.mparams, strict=True)
    )
    z = jnp.zeros_like
    return Kin(
        R=jnp.einsum("kij,kjl->kil", jax.vmap(sp.skew)(kin.w), kin.R) if kin.R.shape[0] else z(kin.R),
        p=kin.v,
        w=kin.alpha,
        v=kin.a,
        alpha=z(kin.alpha),
        a=z(kin.a),
        q=tuple(qd.astype(q.dtype) for qd, q in zip(qdot, kin.q, strict=True)),
        u=kin.udot,
        udot=tuple(z(x) for x in kin.udot),
        t=jnp.ones_like(kin.t),
        params=jax.tree.map(z, kin.params),
        mparams=tuple(z(x) for x in kin.mparams),
    )


def _ddt(fn: Callable[[Kin], jax.Array], mobs: tuple[Any, ...]) -> Callable[[Kin], jax.Array]:
    """The exact time derivative of ``fn`` along the motion, as a function of ``kin``."""

    def d(kin: Kin) -> jax.Array:
        return jax.jvp(fn, (kin,), (_time_tangent(kin, mobs),))[1]

    return d


class ConstraintContext:
    """What a constraint's error function sees (Simbody ``Constraint::Custom``'s view).

    Bodies are numbered by the order they were given to the constraint (Simbody's
    ``ConstrainedBodyIndex``); mobilizers likewise. Poses, velocities and accelerations
    are of each body *relative to the ancestor body and expressed in its frame*; when
    the ancestor is Ground (the common case) that is just Ground.
    """

    def __init__(self, kin: Kin, mobs: tuple[Any, ...]):
        self._kin = kin
        self._mobs = mobs

    def _bi(self, body: int) -> int:
        n = self._kin.R.shape[0] - 1
        if not (isinstance(body, (int, np.integer)) and 0 <= body < n):
            raise IndexError(
                f"constrained body {body!r} does not exist: this constraint has bodies 0..{n - 1}"
            )
        return int(body)

    def _mi(self, mobilizer: int) -> int:
        n = len(self._kin.q)
        if not (isinstance(mobilizer, (int, np.integer)) and 0 <= mobilizer < n):
            raise IndexError(
                f"constrained mobilizer {mobilizer!r} does not exist: this constraint has "
                f"mobilizers 0..{n - 1}"
            )
        return int(mobilizer)

    # --------------------------------------------------------------- variables
    @property
    def time(self) -> jax.Array:
        """Time."""
        return self._kin.t

    def param(self, name: str) -> jax.Array:
        """An Instance-stage parameter of this constraint."""
        return self._kin.params[name]

    def q(self, mobilizer: int) -> jax.Array:
        """q of the constrained mobilizer ``mobilizer``."""
        return self._kin.q[self._mi(mobilizer)]

    def u(self, mobilizer: int) -> jax.Array:
        """u of the constrained mobilizer ``mobilizer``."""
        return self._kin.u[self._mi(mobilizer)]

    def udot(self, mobilizer: int) -> jax.Array:
        """udot of the constrained mobilizer ``mobilizer`` (acceleration level only)."""
        return self._kin.udot[self._mi(mobilizer)]

    def one_q(self, mobilizer: int, which: int) -> jax.Array:
        """One q of a constrained mobilizer."""
        return self._kin.q[self._mi(mobilizer)][which]

    def one_u(self, mobilizer: int, which: int) -> jax.Array:
        """One u of a constrained mobilizer."""
        return self._kin.u[self._mi(mobilizer)][which]

    def one_udot(self, mobilizer: int, which: int) -> jax.Array:
        """One udot of a constrained mobilizer."""
        return self._kin.udot[self._mi(mobilizer)][which]

    def qdot(self, mobilizer: int) -> jax.Array:
        """qdot = N(q) u of a constrained mobilizer."""
        k = self._kin
        m = self._mobs[mobilizer]
        Nq = m.N(k.q[mobilizer], k.mparams[mobilizer])
        return k.u[mobilizer] if Nq is None else Nq @ k.u[mobilizer]

    # --------------------------------------------------------------- positions (in A)
    def _rel(self, kin: Kin, i: int) -> tuple[jax.Array, jax.Array]:
        RA, pA = kin.R[0], kin.p[0]
        j = self._bi(i) + 1
        return RA.T @ kin.R[j], RA.T @ (kin.p[j] - pA)

    def body_transform(self, body: int) -> sp.Transform:
        """``X_AB`` of constrained body ``body``."""
        R, p = self._rel(self._kin, body)
        return sp.Transform(R, p)

    def body_rotation(self, body: int) -> jax.Array:
        """``R_AB``."""
        return self._rel(self._kin, body)[0]

    def body_origin_location(self, body: int) -> jax.Array:
        """Location of the body's origin in A."""
        return self._rel(self._kin, body)[1]

    def station_location(self, body: int, station: Any) -> jax.Array:
        """Location in A of a station fixed on the body (given in the body frame)."""
        R, p = self._rel(self._kin, body)
        return p + R @ jnp.asarray(station, p.dtype)

    def express_in_ancestor(self, body: int, vec: Any) -> jax.Array:
        """A body-fixed vector re-expressed in A."""
        return self.body_rotation(body) @ jnp.asarray(vec, self._kin.p.dtype)

    # --------------------------------------------------------------- velocities (in A)
    def _rel_vel(self, kin: Kin, i: int) -> jax.Array:
        RA, pA, wA, vA = kin.R[0], kin.p[0], kin.w[0], kin.v[0]
        j = self._bi(i) + 1
        w = RA.T @ (kin.w[j] - wA)
        v = RA.T @ (kin.v[j] - vA - jnp.cross(wA, kin.p[j] - pA))
        return jnp.concatenate([w, v])

    def body_velocity(self, body: int) -> jax.Array:
        """``V_AB = [w; v of the origin]`` in A."""
        return self._rel_vel(self._kin, body)

    def body_angular_velocity(self, body: int) -> jax.Array:
        """Angular velocity of the body in A."""
        return self._rel_vel(self._kin, body)[:3]

    def body_origin_velocity(self, body: int) -> jax.Array:
        """Velocity of the body origin in A."""
        return self._rel_vel(self._kin, body)[3:]

    def station_velocity(self, body: int, station: Any) -> jax.Array:
        """Velocity in A of a station fixed on the body."""
        V = self._rel_vel(self._kin, body)
        r = self.body_rotation(body) @ jnp.asarray(station, V.dtype)
        return V[3:] + jnp.cross(V[:3], r)

    # --------------------------------------------------------------- accelerations (in A)
    def body_acceleration(self, body: int) -> jax.Array:
        """``A_AB = [alpha; a of the origin]``: the A-frame time derivative of ``V_AB``."""
        return _ddt(lambda k: self._rel_vel(k, body), self._mobs)(self._kin)

    def station_acceleration(self, body: int, station: Any) -> jax.Array:
        """Acceleration in A of a station fixed on the body."""
        sub = ConstraintContext

        def vel(k: Kin) -> jax.Array:
            return sub(k, self._mobs).station_velocity(body, station)

        return _ddt(vel, self._mobs)(self._kin)


# ============================================================================ base class


@dataclass(eq=False)
class _Compiled:
    """Static per-constraint data fixed at ``realize_topology()``."""

    index: int
    bodies: np.ndarray  # (k+1,) ancestor first
    mob_bodies: tuple[int, ...]
    mobs: tuple[Any, ...]
    q_idx: tuple[np.ndarray, ...]
    u_idx: tuple[np.ndarray, ...]
    mp: int
    mv: int
    ma: int
    rows: tuple[np.ndarray, np.ndarray, np.ndarray]  # global row indices per level


def _common_ancestor(parent: tuple[int, ...], bodies: list[int]) -> int:
    """The deepest common ancestor (one of the bodies if it is inboard of the others);
    Ground when a single body is constrained (its motion relative to itself is nil)."""
    if len(set(bodies)) == 1:
        return 0

    def path(b: int) -> list[int]:
        out = [b]
        while b > 0:
            b = parent[b]
            out.append(b)
        return out

    common = set(path(bodies[0]))
    for b in bodies[1:]:
        common &= set(path(b))
    # the deepest common one
    return max(common, key=lambda x: len(path(x)))


def _dummy_kin(k: int, mobs: tuple[Any, ...], params: dict[str, np.ndarray]) -> Kin:
    f = jnp.result_type(float)
    z3 = jax.ShapeDtypeStruct((k, 3), f)
    return Kin(
        R=jax.ShapeDtypeStruct((k, 3, 3), f),
        p=z3,
        w=z3,
        v=z3,
        alpha=z3,
        a=z3,
        q=tuple(jax.ShapeDtypeStruct((m.nq,), f) for m in mobs),
        u=tuple(jax.ShapeDtypeStruct((m.nu,), f) for m in mobs),
        udot=tuple(jax.ShapeDtypeStruct((m.nu,), f) for m in mobs),
        t=jax.ShapeDtypeStruct((), f),
        params={n: jax.ShapeDtypeStruct(v.shape, f) for n, v in params.items()},
        mparams=tuple(jax.ShapeDtypeStruct((max(m.n_params, 1),), f) for m in mobs),
    )


# ============================================================================ assembly


def gather_kin(model: Model, state: State, c: _Compiled, level: int, udot: Any = None) -> Kin:
    """The Kin of constraint ``c`` from a State realized to Position (level 0), Velocity
    (1) or Dynamics (2, accelerations at ``udot = 0`` unless ``udot`` given with the body
    accelerations it implies)."""
    pc = state.position_cache
    b = c.bodies
    dt = pc.p_GB.dtype
    R, p = pc.R_GB[b], pc.p_GB[b]
    z = jnp.zeros((len(b), 3), dt)
    w = v = alpha = a = z
    inst = state.instance["matter"]
    q = tuple(state.q[i] for i in c.q_idx)
    u = tuple(jnp.zeros(len(i), dt) for i in c.u_idx)
    ud = tuple(jnp.zeros(len(i), dt) for i in c.u_idx)
    if level >= 1:
        V = model.body_velocities(state)[b]
        w, v = V[:, :3], V[:, 3:]
        u = tuple(state.u[i] for i in c.u_idx)
    if level >= 2:
        A = udot  # classical accelerations of all bodies, given by the caller
        alpha, a = A[b, :3], A[b, 3:]
    params = {
        n[len(f"constraint{c.index}.") :]: val
        for n, val in inst.items()
        if n.startswith(f"constraint{c.index}.")
    }
    mparams = tuple(
        inst["mobilizer_params"][mb][: max(m.n_params, 1)] for mb, m in zip(c.mob_bodies, c.mobs, strict=True)
    )
    return Kin(
        R=R, p=p, w=w, v=v, alpha=alpha, a=a, q=q, u=u, udot=ud, t=state.t, params=params, mparams=mparams
    )


def constraint_coefficients(model: Model, state: State, c: _Compiled):
    """Coefficients of the (affine) acceleration errors of one constraint with respect
    to the constrained bodies' ``[alpha; a]`` (m, k, 6) and the constrained udots."""
    cons = model.constraint_objects[c.index]
    _, _, aerr = cons._funcs(c)
    level = 1 if state.stage >= Stage.VELOCITY else 0
    kin = gather_kin(model, state, c, level=level, udot=None)

    def f(alpha, a, ud):
        return aerr(eqx.tree_at(lambda k: (k.alpha, k.a, k.udot), kin, (alpha, a, ud)))

    Calpha, Ca, Cud = jax.jacfwd(f, argnums=(0, 1, 2))(kin.alpha, kin.a, kin.udot)
    return jnp.concatenate([Calpha, Ca], axis=-1), Cud


def _frame_jacobians(model: Model, state: State, bodies: np.ndarray) -> jax.Array:
    """(k, 6, nu) Jacobians of ``[w; v of origin]`` of the given bodies."""
    pc = state.position_cache
    topo = model.topology(state.use_euler_angles)
    D = jnp.asarray(topo.dof_ancestor[bodies], pc.p_GB.dtype)  # (k, nu)
    w = pc.cdof[None, :, :3]
    v = pc.cdof[None, :, 3:] + jnp.cross(w, pc.p_GB[bodies][:, None, :])
    J = jnp.concatenate([w * D[..., None], v * D[..., None]], axis=-1)  # (k, nu, 6)
    return jnp.swapaxes(J, 1, 2)


def coefficient_rows_to_G(model: Model, state: State, c: _Compiled, coef) -> jax.Array:
    """Rows of G (m_c, nu) from the coefficients."""
    Cb, Cud = coef
    J = _frame_jacobians(model, state, c.bodies)
    G = jnp.einsum("mki,kin->mn", Cb, J)
    for cu, idx in zip(Cud, c.u_idx, strict=True):
        G = G.at[:, idx].add(cu)
    return G


def coefficient_forces(model: Model, state: State, c: _Compiled, coef, lam: jax.Array):
    """``G_c^T lambda`` as body forces (nb, 6) and mobility forces (nu,)."""
    Cb, Cud = coef
    topo = model.topology(state.use_euler_angles)
    dt = state.q.dtype
    Fk = jnp.einsum("mki,m->ki", Cb, lam)
    F = jnp.zeros((topo.nb, 6), dt).at[c.bodies].add(Fk)
    F = F.at[0].set(0.0)  # Ground absorbs reactions
    tau = jnp.zeros(topo.nu, dt)
    for cu, idx in zip(Cud, c.u_idx, strict=True):
        tau = tau.at[idx].add(jnp.einsum("mj,m->j", cu, lam))
    return F, tau


# ---------------------------------------------------------------------------- per stage


def position_errors(model: Model, state: State) -> jax.Array:
    """All holonomic position errors (mp,) (State realized to Position minus the errors)."""
    cs = model.constraints(state.use_euler_angles)
    en = state.instance["matter"]["constraint_enabled"]
    parts = [jnp.zeros(0, state.position_cache.p_GB.dtype)]
    for c in cs:
        if c.mp:
            perr, _, _ = model.constraint_objects[c.index]._funcs(c)
            parts.append(perr(gather_kin(model, state, c, 0)) * en[c.index])
    return jnp.concatenate(parts)


def velocity_errors(model: Model, state: State) -> jax.Array:
    """``uerr = [pverr (mp); verr (mv)]`` (needs Velocity)."""
    cs = model.constraints(state.use_euler_angles)
    en = state.instance["matter"]["constraint_enabled"]
    mp, mv, _ = model.constraint_counts(state.use_euler_angles)
    out = jnp.zeros(mp + mv, state.position_cache.p_GB.dtype)
    for c in cs:
        if c.mp + c.mv:
            _, verr, _ = model.constraint_objects[c.index]._funcs(c)
            e = verr(gather_kin(model, state, c, 1)) * en[c.index]
            rows = np.concatenate([c.rows[0], mp + c.rows[1]])
            out = out.at[rows].set(e)
    return out


def g_and_b(model: Model, state: State, A_bias_classical: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``G`` (m, nu) and ``b`` (m,) with ``G udot = b`` (needs Velocity)."""
    cs = model.constraints(state.use_euler_angles)
    en = state.instance["matter"]["constraint_enabled"]
    mp, mv, ma = model.constraint_counts(state.use_euler_angles)
    m = mp + mv + ma
    topo = model.topology(state.use_euler_angles)
    dt = state.position_cache.p_GB.dtype
    G = jnp.zeros((m, topo.nu), dt)
    b = jnp.zeros(m, dt)
    for c in cs:
        cons = model.constraint_objects[c.index]
        _, _, aerr = cons._funcs(c)
        coef = constraint_coefficients(model, state, c)
        Gc = coefficient_rows_to_G(model, state, c, coef)
        kin = gather_kin(model, state, c, 2, udot=A_bias_classical)
        a0 = aerr(kin)  # errors at udot = 0
        rows = np.concatenate([c.rows[0], mp + c.rows[1], mp + mv + c.rows[2]])
        G = G.at[rows].set(Gc * en[c.index])
        b = b.at[rows].set(-a0 * en[c.index])
    return G, b


def solve_constrained(M: jax.Array, f: jax.Array, G: jax.Array, b: jax.Array):
    """``udot, lambda`` of ``M udot + G^T lambda = f``, ``G udot = b``.

    ``S = G M^-1 G^T`` may be singular (redundant constraints): lambda is its
    minimum-norm solution, computed by iterated Tikhonov regularisation (Cholesky of
    ``S + eps I``, ``eps = 1e-8 max diag S`` in float64, plus five refinement steps, each
    shrinking the error by ``eps / sigma``). That is differentiable with no eigen-
    decomposition and exact (to round-off) for consistent systems; udot does not depend
    on how lambda is split among redundant rows, and a row that vanishes to round-off
    (``max |G_row| <= 1e-12 max |G|``) gets lambda = 0 exactly (as in Simbody). The split
    among rows that are redundant only in combination is the minimum-norm one to about
    ``1e-8`` relative (Simbody's rank-revealing factorisation gets it to round-off).
    Returns also the acceleration residual ``G udot - b`` (nonzero only for inconsistent
    constraints).
    """
    L = jnp.linalg.cholesky(M)
    cho = lambda r: jax.scipy.linalg.cho_solve((L, True), r)
    udot0 = cho(f)
    if G.shape[0] == 0:
        return udot0, jnp.zeros(0, f.dtype), jnp.zeros(0, f.dtype)
    # Rows that vanish to round-off (e.g. the out-of-plane row of a planar loop closed by
    # a Ball) are structurally redundant: drop them exactly so their multipliers are 0.
    G0, b0 = G, b
    rn = jnp.max(jnp.abs(G), axis=1)
    keep = rn > (1e-12 if G.dtype == jnp.float64 else 1e-6) * jnp.max(rn)
    G = jnp.where(keep[:, None], G, 0.0)
    b = jnp.where(keep, b, 0.0)
    Y = cho(G.T)  # M^-1 G^T
    S = G @ Y
    r = G @ udot0 - b
    scale = jnp.max(jnp.abs(jnp.diag(S)))
    scale = jnp.where(scale > 0, scale, 1.0)
    eps = (1e-8 if S.dtype == jnp.float64 else 1e-4) * scale
    Lr = jnp.linalg.cholesky(S + eps * jnp.eye(S.shape[0], dtype=S.dtype))
    solve = lambda x: jax.scipy.linalg.cho_solve((Lr, True), x)
    lam = solve(r)
    for _ in range(5):
        lam = lam + solve(r - S @ lam)
    udot = udot0 - Y @ lam
    return udot, lam, G0 @ udot - b0


# ============================================================================ kinds
