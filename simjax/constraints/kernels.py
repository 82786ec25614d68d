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
from ..dynamics.stages import cho_solve_lower, cholesky_lower, frame_jacobians, solve_lower, solve_mass_matrix
from ..model.model import Model
from ..model.state import State
from ..tree.kinds import place

# ============================================================================ kinematics


class Kin(eqx.Module):
    """Kinematics of one constraint's k bodies relative to its ancestor body A and
    expressed in A (``R_AB``, ``p_AB``, ``V_AB``, and ``A_AB``, the A-frame derivative of
    ``V_AB``), and the variables of its constrained mobilizers. A pytree: time derivatives
    are JVPs. The ancestor's own motion is taken out once per group (``gather_kin``), so
    a constraint's error functions, and their derivatives, see no ancestor algebra."""

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
        R=jnp.einsum("kij,kjl->kil", sp.skew(kin.w), kin.R) if kin.R.shape[0] else z(kin.R),
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
        n = self._kin.R.shape[0]
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
    def _rel(self, i: int) -> tuple[jax.Array, jax.Array]:
        j = self._bi(i)
        return self._kin.R[j], self._kin.p[j]

    def body_transform(self, body: int) -> sp.Transform:
        """``X_AB`` of constrained body ``body``."""
        R, p = self._rel(body)
        return sp.Transform(R, p)

    def body_rotation(self, body: int) -> jax.Array:
        """``R_AB``."""
        return self._kin.R[self._bi(body)]

    def body_origin_location(self, body: int) -> jax.Array:
        """Location of the body's origin in A."""
        return self._kin.p[self._bi(body)]

    def station_location(self, body: int, station: Any) -> jax.Array:
        """Location in A of a station fixed on the body (given in the body frame)."""
        R, p = self._rel(body)
        return p + R @ jnp.asarray(station, p.dtype)

    def express_in_ancestor(self, body: int, vec: Any) -> jax.Array:
        """A body-fixed vector re-expressed in A."""
        return self.body_rotation(body) @ jnp.asarray(vec, self._kin.p.dtype)

    # --------------------------------------------------------------- velocities (in A)
    # (each reads only the fields it needs: an error function is traced several times,
    # under nested derivatives, so every slice it does not take is a smaller program)
    def body_velocity(self, body: int) -> jax.Array:
        """``V_AB = [w; v of the origin]`` in A."""
        j = self._bi(body)
        return jnp.concatenate([self._kin.w[j], self._kin.v[j]])

    def body_angular_velocity(self, body: int) -> jax.Array:
        """Angular velocity of the body in A."""
        return self._kin.w[self._bi(body)]

    def body_origin_velocity(self, body: int) -> jax.Array:
        """Velocity of the body origin in A."""
        return self._kin.v[self._bi(body)]

    def station_velocity(self, body: int, station: Any) -> jax.Array:
        """Velocity in A of a station fixed on the body."""
        j = self._bi(body)
        return self._kin.v[j] + sp.cross(self._kin.w[j], self.express_in_ancestor(body, station))

    # --------------------------------------------------------------- accelerations (in A)
    def body_acceleration(self, body: int) -> jax.Array:
        """``A_AB = [alpha; a of the origin]``: the A-frame time derivative of ``V_AB``."""
        j = self._bi(body)
        return jnp.concatenate([self._kin.alpha[j], self._kin.a[j]])

    def station_acceleration(self, body: int, station: Any) -> jax.Array:
        """Acceleration in A of a station fixed on the body: ``a + alpha x r + w x (w x r)``
        with ``r = R_AB station``."""
        j = self._bi(body)
        k = self._kin
        r = self.express_in_ancestor(body, station)
        w = k.w[j]
        return k.a[j] + sp.cross(k.alpha[j], r) + sp.cross(w, sp.cross(w, r))


# ============================================================================ base class


@dataclass(frozen=True, eq=False)
class CompiledConstraint:
    """One constraint's static data in one Model option, fixed at ``realize_topology()``
    (``compile_constraint``): its ancestor and bodies, its constrained mobilizers (their
    bodies, kinds, q and u indices), its numbers of rows per level and their indices."""

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


def _spec(shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """A shape-only stand-in for an array, for ``jax.eval_shape`` inputs."""
    return jax.ShapeDtypeStruct(shape, dtype)  # type: ignore[return-value]  # typed as what it stands for


def _dummy_kin(k: int, mobs: tuple[Any, ...], params: dict[str, tuple[int, ...]]) -> Kin:
    f = jnp.result_type(float)
    z3 = _spec((k, 3), f)
    return Kin(
        R=_spec((k, 3, 3), f),
        p=z3,
        w=z3,
        v=z3,
        alpha=z3,
        a=z3,
        q=tuple(_spec((m.nq,), f) for m in mobs),
        u=tuple(_spec((m.nu,), f) for m in mobs),
        udot=tuple(_spec((m.nu,), f) for m in mobs),
        t=_spec((), f),
        params={n: _spec(shape, f) for n, shape in params.items()},
        mparams=tuple(_spec((max(m.n_params, 1),), f) for m in mobs),
    )


def equation_counts(
    kernel: Any, n_bodies: int, mobs: tuple[Any, ...], param_shapes: dict[str, tuple[int, ...]], name: str
) -> tuple[int, int, int]:
    """Numbers of holonomic, nonholonomic and acceleration-only equations of a kernel (its
    ``fixed_counts``, else by the shapes its error functions return); ``name`` (the
    constraint) is what an error names."""
    fixed = getattr(kernel, "fixed_counts", None)
    if fixed is not None:
        return fixed
    kin = _dummy_kin(n_bodies, mobs, param_shapes)
    out = []
    for fn in (kernel.perr, kernel.verr, kernel.aerr):
        if fn is None:
            out.append(0)
            continue
        shp = jax.eval_shape(
            lambda k, fn=fn: jnp.atleast_1d(jnp.asarray(fn(ConstraintContext(k, mobs)))), kin
        )
        if len(shp.shape) != 1:
            raise ValueError(
                f"{name}: an error function must return a scalar or a vector, got shape {shp.shape}"
            )
        out.append(int(shp.shape[0]))
    if sum(out) == 0:
        raise ValueError(f"{name} defines no constraint equations")
    return out[0], out[1], out[2]


def compile_constraint(
    index: int, record: Any, parent: tuple[int, ...], topo: Any, row0: tuple[int, int, int]
) -> CompiledConstraint:
    """Constraint ``index`` (a ``model.ConstraintRecord``) in the Model option of ``topo``,
    its rows starting at ``row0`` per level."""
    bodies = list(record.bodies)
    anc = _common_ancestor(parent, bodies) if bodies else 0
    mobs = tuple(topo.mobilizers[m] for m in record.mobilizers)
    q_idx = tuple(int(topo.q_start[m]) + np.arange(topo.nq_body[m]) for m in record.mobilizers)
    u_idx = tuple(int(topo.u_start[m]) + np.arange(topo.nu_body[m]) for m in record.mobilizers)
    mp, mv, ma = equation_counts(record.kernel, len(bodies), mobs, dict(record.param_shapes), record.name)
    return CompiledConstraint(
        index=index,
        bodies=np.array([anc] + bodies, dtype=int),
        mob_bodies=tuple(record.mobilizers),
        mobs=mobs,
        q_idx=q_idx,
        u_idx=u_idx,
        mp=mp,
        mv=mv,
        ma=ma,
        rows=(row0[0] + np.arange(mp), row0[1] + np.arange(mv), row0[2] + np.arange(ma)),
    )


# ============================================================================ groups


def level_functions(kernel: Any, mobs: tuple[Any, ...]):
    """(position, velocity, acceleration) error functions of one constraint's ``Kin``:
    ``perr``; ``uerr = [d/dt perr; verr]``; ``udoterr = [d2/dt2 perr; d/dt verr; aerr]``
    from a kernel's lowest-level errors ``perr/verr/aerr`` (functions of a
    ``ConstraintContext``; ``simjax.constraints.kinds``), derivatives by forward-mode
    autodiff unless the kernel gives the first and second time derivatives of ``perr``
    itself (``pverr``, ``paerr``: Simbody's ``calcPositionDotErrors``/``calcPositionDotDotErrors``; a
    built-in kind writes them out, which makes a much smaller program to compile); and,
    fourth, the acceleration-only errors ``aerr`` alone."""

    def wrap(fn):
        if fn is None:
            return None
        return lambda k: jnp.atleast_1d(jnp.asarray(fn(ConstraintContext(k, mobs)), k.p.dtype))

    p0, v0, a0 = wrap(kernel.perr), wrap(kernel.verr), wrap(kernel.aerr)
    z = lambda k: jnp.zeros(0, k.p.dtype)
    perr = p0 or z
    pv = (wrap(kernel.pverr) or _ddt(p0, mobs)) if p0 else z
    pa = (wrap(kernel.paerr) or _ddt(pv, mobs)) if p0 else z
    vv = v0 or z
    va = _ddt(v0, mobs) if v0 else z
    aa = a0 or z
    verr = lambda k: jnp.concatenate([pv(k), vv(k)])
    aerr = lambda k: jnp.concatenate([pa(k), va(k), aa(k)])
    return perr, verr, aerr, aa


def velocity_coefficient_function(kernel: Any, mobs: tuple[Any, ...]) -> Callable[[Kin], jax.Array] | None:
    """A kernel's written-out coefficients of its velocity errors ``uerr`` with respect to its
    bodies' ``[w; v]`` (in A), as a function of one ``Kin`` ((m, k, 6)), where it gives them
    (``pvcoef``; only holonomic rows, no constrained mobilizers); None: autodiff derives
    them (a forward Jacobian of ``uerr``)."""
    fn = kernel.pvcoef
    if fn is None or kernel.verr is not None or mobs:
        return None
    return lambda k: jnp.asarray(fn(ConstraintContext(k, mobs)), k.p.dtype)


@dataclass(frozen=True, eq=False)
class ConstraintGroup:
    """Constraints with the same equations and structure, evaluated with one ``vmap``.

    Leading axis ``n`` = number of members. ``rows`` holds each member's global row
    indices per level (holonomic rows among the mp, nonholonomic among the mv,
    acceleration-only among the ma)."""

    funcs: tuple[Callable[[Kin], jax.Array], ...]  # perr, verr, aerr, aerr alone (one Kin)
    vcoef: Callable[[Kin], jax.Array] | None  # verr's body coefficients, written out (or None)
    mobs: tuple[Any, ...]
    index: np.ndarray  # (n,) constraint indices
    bodies: np.ndarray  # (n, k+1) ancestor first
    mob_bodies: np.ndarray  # (n, number of constrained mobilizers)
    q_idx: tuple[np.ndarray, ...]  # per constrained mobilizer: (n, nq)
    u_idx: tuple[np.ndarray, ...]  # per constrained mobilizer: (n, nu)
    mp: int
    mv: int
    ma: int
    rows: tuple[np.ndarray, np.ndarray, np.ndarray]
    params: tuple[str, ...]
    param_prefix: str  # the members' parameters are rows ``param_rows`` of ``f"{prefix}.{name}"``
    param_rows: np.ndarray | None  # (n,); None: all rows, in order

    @property
    def ground_ancestor(self) -> bool:
        """Every member's common ancestor is Ground (static: the kinematics skip it)."""
        return self.bodies.shape[1] > 1 and bool(np.all(self.bodies[:, 0] == 0))

    @property
    def n(self) -> int:
        """Number of member constraints."""
        return len(self.index)

    def all_rows(self, mp: int, mv: int) -> np.ndarray:
        """(n, mp_c + mv_c + ma_c) rows of ``G = [P; V; A]`` of every member."""
        return np.concatenate([self.rows[0], mp + self.rows[1], mp + mv + self.rows[2]], axis=1)


def make_group(
    records: tuple[Any, ...], members: list[CompiledConstraint], kernel: Any = None
) -> ConstraintGroup:
    """A group of compiled constraints with equal keys (``ConstraintRecord.key``) and
    mobilizer kinds; ``kernel``: other equations for the same members (default their
    own)."""
    c0 = members[0]
    rec = records[c0.index]
    stack = lambda xs, w: np.stack(xs).reshape(len(members), w).astype(int)
    prefix = rec.param_slot[0]
    rows = [records[c.index].param_slot[1] for c in members]
    layout_size = sum(r.param_slot[0] == prefix for r in records)
    kernel = rec.kernel if kernel is None else kernel
    return ConstraintGroup(
        funcs=level_functions(kernel, c0.mobs),
        vcoef=velocity_coefficient_function(kernel, c0.mobs),
        mobs=c0.mobs,
        index=np.array([c.index for c in members], dtype=int),
        bodies=stack([c.bodies for c in members], len(c0.bodies)),
        mob_bodies=stack([np.asarray(c.mob_bodies, int) for c in members], len(c0.mob_bodies)),
        q_idx=tuple(stack([c.q_idx[j] for c in members], len(c0.q_idx[j])) for j in range(len(c0.mobs))),
        u_idx=tuple(stack([c.u_idx[j] for c in members], len(c0.u_idx[j])) for j in range(len(c0.mobs))),
        mp=c0.mp,
        mv=c0.mv,
        ma=c0.ma,
        rows=tuple(stack([c.rows[lv] for c in members], len(c0.rows[lv])) for lv in range(3)),  # type: ignore[arg-type]
        params=rec.param_names,
        param_prefix=prefix,
        param_rows=None if rows == list(range(layout_size)) else np.asarray(rows, int),
    )


def group_members(
    records: tuple[Any, ...], compiled: tuple[CompiledConstraint, ...]
) -> list[list[CompiledConstraint]]:
    """The compiled constraints grouped by equations and structure: members of a group share
    their kernel (``ConstraintRecord.key``), mobilizer kinds and numbers of bodies, so one
    ``vmap`` evaluates them all."""
    by_key: dict[Any, list[CompiledConstraint]] = {}
    for c in compiled:
        by_key.setdefault((records[c.index].key, c.mobs, len(c.bodies)), []).append(c)
    return list(by_key.values())


def constraint_groups(model: Model, euler: bool) -> tuple[ConstraintGroup, ...]:
    """The Model's constraint groups in a Model option (built by ``realize_topology()``)."""
    return model.option(euler).groups


def single_group(model: Model, euler: bool, index: int) -> ConstraintGroup:
    """A group holding only constraint ``index`` (per-constraint queries)."""
    return make_group(model.constraint_records, [model.constraints(euler)[index]])


def _relative(R, p, w, v, alpha, a, level: int = 2):
    """Kinematics of bodies relative to an ancestor, in its frame: every argument is
    (..., 1 + k, ...) with the ancestor first (Ground-frame rotation, origin, angular
    velocity, origin velocity and their classical accelerations); returns the k bodies'
    ``R_AB, p_AB, w_AB, v_AB`` and the A-frame derivatives of the last two. Below
    ``level`` 2 the accelerations, below 1 also the velocities, are zeros (not traced)."""
    RAt = jnp.swapaxes(R[..., :1, :, :], -1, -2)  # (..., 1, 3, 3) R_GA^T
    toA = lambda x: jnp.einsum("...ij,...j->...i", RAt, x)
    d = p[..., 1:, :] - p[..., :1, :]
    z = jnp.zeros_like(d)
    out = [RAt @ R[..., 1:, :, :], toA(d), z, z, z, z]
    if level >= 1:
        wA, vA = w[..., :1, :], v[..., :1, :]
        dw = w[..., 1:, :] - wA
        y = v[..., 1:, :] - vA - sp.cross(wA, d)  # origin velocity relative to A, in Ground
        out[2:4] = toA(dw), toA(y)
    if level >= 2:
        alA, aA = alpha[..., :1, :], a[..., :1, :]
        # d/dt (R_GA^T x) = R_GA^T (xdot - w_A x x): the A-frame derivative of a vector
        ydot = a[..., 1:, :] - aA - sp.cross(alA, d) - sp.cross(wA, v[..., 1:, :] - vA)
        out[4:] = toA(alpha[..., 1:, :] - alA - sp.cross(wA, dw)), toA(ydot - sp.cross(wA, y))
    return tuple(out)


def gather_kin(model: Model, state: State, g: ConstraintGroup, level: int, A: Any = None) -> Kin:
    """The members' ``Kin`` (leading axis n, relative to each member's ancestor) from a
    State realized to Position (level 0), Velocity (1) or, with the classical body
    accelerations ``A`` (nb, 6), Dynamics (2); udot is zero (the errors are affine in it)."""
    pc = state.position_cache
    b = g.bodies
    dt = pc.p_GB.dtype
    n = g.n
    z = jnp.zeros(b.shape + (3,), dt)
    w = v = alpha = a = z
    inst = state.instance["matter"]
    q = tuple(state.q[i] for i in g.q_idx)
    u = tuple(jnp.zeros(i.shape, dt) for i in g.u_idx)
    ud = tuple(jnp.zeros(i.shape, dt) for i in g.u_idx)
    if level >= 1:
        u = tuple(state.u[i] for i in g.u_idx)
    if b.shape[1] == 1:  # no body besides the ancestor (e.g. coordinate couplers): no motion
        R, p = jnp.zeros((n, 0, 3, 3), dt), jnp.zeros((n, 0, 3), dt)
        w = v = alpha = a = p
    else:
        # Ground as every member's ancestor (a constraint to Ground): the relative motions are
        # the bodies' own, and nothing of Ground's is gathered (it does not move)
        bb = b[:, 1:] if g.ground_ancestor else b
        if level >= 1:
            V = model.body_velocities(state)[bb]
            w, v = V[..., :3], V[..., 3:]
        if level >= 2:
            alpha, a = A[bb, :3], A[bb, 3:]
        if g.ground_ancestor:
            zk = jnp.zeros(bb.shape + (3,), dt)
            R, p = pc.R_GB[bb], pc.p_GB[bb]
            w, v = (w, v) if level >= 1 else (zk, zk)
            alpha, a = (alpha, a) if level >= 2 else (zk, zk)
        else:
            R, p, w, v, alpha, a = _relative(pc.R_GB[b], pc.p_GB[b], w, v, alpha, a, level)
    take = (lambda x: x) if g.param_rows is None else (lambda x: x[g.param_rows])
    params = {name: take(inst[f"{g.param_prefix}.{name}"]) for name in g.params}
    mparams = tuple(
        inst["mobilizer_params"][g.mob_bodies[:, j]][:, : max(m.n_params, 1)] for j, m in enumerate(g.mobs)
    )
    t = jnp.broadcast_to(state.t, (n,))
    return Kin(R=R, p=p, w=w, v=v, alpha=alpha, a=a, q=q, u=u, udot=ud, t=t, params=params, mparams=mparams)


def _to_ground(state: State, g: ConstraintGroup, C: jax.Array) -> jax.Array:
    """Coefficients (n, m, k, 6) of the relative velocities ``[w_AB; v_AB]`` (in A) of a
    group's bodies as coefficients (n, m, 1 + k, 6) of the Ground-frame ``[w; v]`` of the
    ancestor and the bodies (``w_AB = R_GA^T (w_B - w_A)``,
    ``v_AB = R_GA^T (v_B - v_A + (p_B - p_A) x w_A)``)."""
    pc = state.position_cache
    if g.ground_ancestor:  # already Ground-frame; Ground's own coefficients do not matter
        return jnp.concatenate([jnp.zeros_like(C[:, :, :1]), C], axis=2)
    RA = pc.R_GB[g.bodies[:, 0]]  # (n, 3, 3)
    d = pc.p_GB[g.bodies[:, 1:]] - pc.p_GB[g.bodies[:, :1]]  # (n, k, 3)
    Cw = jnp.einsum("nmki,nli->nmkl", C[..., :3], RA)
    Cv = jnp.einsum("nmki,nli->nmkl", C[..., 3:], RA)
    CwA = jnp.sum(sp.cross(Cv, d[:, None]) - Cw, axis=2, keepdims=True)
    CvA = -jnp.sum(Cv, axis=2, keepdims=True)
    return jnp.concatenate([jnp.concatenate([CwA, CvA], axis=-1), jnp.concatenate([Cw, Cv], axis=-1)], axis=2)


def group_errors(model: Model, state: State, g: ConstraintGroup, level: int, A: Any = None) -> jax.Array:
    """(n, m_level) errors of every member at a level (0 position, 1 velocity, 2
    acceleration at udot = 0 with body accelerations ``A``), disabled members zeroed."""
    fn = g.funcs[level]
    e = jax.vmap(fn)(gather_kin(model, state, g, level, A))
    return e * state.instance["matter"]["constraint_enabled"][g.index][:, None]


def group_coefficients(model: Model, state: State, g: ConstraintGroup, A: Any = None, kin: Kin | None = None):
    """Coefficients of the members' (affine) acceleration errors with respect to the
    Ground-frame ``[alpha; a]`` of the ancestor and the constrained bodies (n, m, 1 + k, 6;
    derived for the relative motions, then mapped by ``_to_ground``) and the constrained udots (per
    mobilizer, (n, m, nu_j)); with body accelerations ``A`` (nb, 6) also the errors
    themselves at udot = 0 (n, m). ``kin``: the members' ``Kin`` where the caller has
    prepared it (e.g. with extra parameters).

    For rows that are time derivatives (``d/dt uerr``) the coefficient of an acceleration
    is the coefficient of the matching velocity in ``uerr`` (``d/dt`` maps ``w -> alpha``,
    ``v -> a``, ``u -> udot``), so one forward Jacobian of the velocity errors gives them
    (or the kind writes them out, ``velocity_coefficient_function``: Ball, Rod, Weld,
    ConstantOrientation); acceleration-only rows are differentiated directly."""
    _, verr, aerr, aonly = g.funcs
    level = 2 if A is not None else (1 if state.stage >= Stage.VELOCITY else 0)

    def one(kin: Kin):
        def fv(w, v, u):
            return verr(eqx.tree_at(lambda k: (k.w, k.v, k.u), kin, (w, v, u)))

        parts = []
        if g.vcoef is not None:
            parts.append((g.vcoef(kin), ()))
        elif g.mp + g.mv:
            Cw, Cv, Cu = jax.jacfwd(fv, argnums=(0, 1, 2))(kin.w, kin.v, kin.u)
            parts.append((jnp.concatenate([Cw, Cv], axis=-1), Cu))
        if g.ma:

            def fa(alpha, a, ud):
                return aonly(eqx.tree_at(lambda k: (k.alpha, k.a, k.udot), kin, (alpha, a, ud)))

            Ca, Cl, Cd = jax.jacfwd(fa, argnums=(0, 1, 2))(kin.alpha, kin.a, kin.udot)
            parts.append((jnp.concatenate([Ca, Cl], axis=-1), Cd))
        Cb = jnp.concatenate([p[0] for p in parts], axis=0)
        Cud = tuple(jnp.concatenate([p[1][j] for p in parts], axis=0) for j in range(len(kin.u)))
        return (Cb, Cud), (aerr(kin) if A is not None else None)

    (Cb, Cud), e0 = jax.vmap(one)(gather_kin(model, state, g, level, A) if kin is None else kin)
    coef = (_to_ground(state, g, Cb), Cud)
    return (coef, e0) if A is not None else coef


def group_G(model: Model, state: State, g: ConstraintGroup, coef: Any) -> jax.Array:
    """Rows of G of every member (n, m_c, nu) from the coefficients (not masked)."""
    Cb, Cud = coef
    bodies = g.bodies
    if g.ground_ancestor:  # Ground's Jacobian is zero
        Cb, bodies = Cb[:, :, 1:], bodies[:, 1:]
    n, k = bodies.shape
    nu = model.topology(state.use_euler_angles).nu
    J = frame_jacobians(model, state, bodies.reshape(-1)).reshape(n, k, 6, nu)
    G = jnp.einsum("nmki,nkiu->nmu", Cb, J)
    m = G.shape[1]
    for cu, idx in zip(Cud, g.u_idx, strict=True):
        G = G.at[np.arange(n)[:, None, None], np.arange(m)[None, :, None], idx[:, None, :]].add(cu)
    return G


def group_forces(model: Model, state: State, g: ConstraintGroup, coef: Any, lam: jax.Array):
    """``sum over members of G_c^T lambda_c`` as body forces (nb, 6) and mobility forces
    (nu,); ``lam`` is (n, m_c)."""
    Cb, Cud = coef
    topo = model.topology(state.use_euler_angles)
    dt = state.q.dtype
    Fk = jnp.einsum("nmki,nm->nki", Cb, lam)
    F = jnp.zeros((topo.nb, 6), dt).at[g.bodies.reshape(-1)].add(Fk.reshape(-1, 6))
    F = F.at[0].set(0.0)  # Ground absorbs reactions
    tau = jnp.zeros(topo.nu, dt)
    for cu, idx in zip(Cud, g.u_idx, strict=True):
        tau = tau.at[idx.reshape(-1)].add(jnp.einsum("nmj,nm->nj", cu, lam).reshape(-1))
    return F, tau


# ---------------------------------------------------------------------------- per stage


def position_errors(model: Model, state: State) -> jax.Array:
    """All holonomic position errors (mp,) (State realized to Position minus the errors)."""
    mp, _, _ = model.constraint_counts(state.use_euler_angles)
    groups = [g for g in constraint_groups(model, state.use_euler_angles) if g.mp]
    parts = [(g.rows[0], group_errors(model, state, g, 0)) for g in groups]
    return place(mp, parts, jnp.zeros((), state.position_cache.p_GB.dtype))


def velocity_errors(model: Model, state: State) -> jax.Array:
    """``uerr = [pverr (mp); verr (mv)]`` (needs Velocity)."""
    mp, mv, _ = model.constraint_counts(state.use_euler_angles)
    groups = [g for g in constraint_groups(model, state.use_euler_angles) if g.mp + g.mv]
    rows = [np.concatenate([g.rows[0], mp + g.rows[1]], axis=1) for g in groups]
    parts = [(r, group_errors(model, state, g, 1)) for r, g in zip(rows, groups, strict=True)]
    return place(mp + mv, parts, jnp.zeros((), state.position_cache.p_GB.dtype))


def constraint_matrix(model: Model, state: State, levels: int = 3) -> jax.Array:
    """The first ``levels`` blocks of ``G = [P; V; A]`` ((mp), (mp + mv) or m rows, nu),
    disabled constraints' rows zero (needs Position)."""
    return _g_and_b(model, state, levels, None)[0]


def g_and_b(model: Model, state: State, A_bias_classical: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``G`` (m, nu) and ``b`` (m,) with ``G udot = b`` (needs Velocity); ``A_bias_classical``
    are the bodies' classical accelerations at ``udot = 0``."""
    return _g_and_b(model, state, 3, A_bias_classical)  # type: ignore[return-value]


def _g_and_b(model: Model, state: State, levels: int, A: Any) -> tuple[jax.Array, jax.Array | None]:
    mp, mv, ma = model.constraint_counts(state.use_euler_angles)
    m = (mp, mp + mv, mp + mv + ma)[levels - 1]
    nu = model.topology(state.use_euler_angles).nu
    en = state.instance["matter"]["constraint_enabled"]
    dt = state.position_cache.p_GB.dtype
    G_parts, b_parts = [], []
    for g in constraint_groups(model, state.use_euler_angles):
        width = (g.mp, g.mp + g.mv, g.mp + g.mv + g.ma)[levels - 1]
        if not width:
            continue
        rows = g.all_rows(mp, mv)[:, :width]
        mask = en[g.index][:, None]
        if A is None:
            coef = group_coefficients(model, state, g)
        else:
            coef, a0 = group_coefficients(model, state, g, A)
            b_parts.append((rows, -(a0 * mask)))
        G_parts.append((rows, group_G(model, state, g, coef)[:, :width] * mask[..., None]))
    G = place(m, G_parts, jnp.zeros(nu, dt))
    b = None if A is None else place(m, b_parts, jnp.zeros((), dt))
    return G, b


def constraint_forces(model: Model, state: State, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``G^T lambda`` for the complete multiplier vector as body forces (nb, 6) and
    mobility forces (nu,) (needs Position); disabled constraints contribute nothing."""
    mp, mv, _ = model.constraint_counts(state.use_euler_angles)
    topo = model.topology(state.use_euler_angles)
    en = state.instance["matter"]["constraint_enabled"]
    F = jnp.zeros((topo.nb, 6), lam.dtype)
    tau = jnp.zeros(topo.nu, lam.dtype)
    for g in constraint_groups(model, state.use_euler_angles):
        lam_g = lam[g.all_rows(mp, mv)] * en[g.index][:, None]
        f, t = group_forces(model, state, g, group_coefficients(model, state, g), lam_g)
        F, tau = F + f, tau + t
    return F, tau


def tikhonov_inverse(S: jax.Array) -> jax.Array:
    """``(S + eps I)^-1`` for a symmetric positive semi-definite ``S`` (by Cholesky; ``eps =
    1e-8 max diag S`` in float64, 1e-4 in float32): the operator ``min_norm_solve`` refines
    with."""
    # max |S_ij| is max diag S for a positive semi-definite S (|S_ij|^2 <= S_ii S_jj), and a
    # plain reduction compiles to less than reading the diagonal (a gather)
    scale = jnp.max(jnp.abs(S))
    scale = jnp.where(scale > 0, scale, 1.0)
    eps = (1e-8 if S.dtype == jnp.float64 else 1e-4) * scale
    eye = jnp.eye(S.shape[0], dtype=S.dtype)
    return cho_solve_lower(cholesky_lower(S + eps * eye), eye)


def refine(S: jax.Array, inv: jax.Array, r: jax.Array, refinements: int = 5) -> jax.Array:
    """``min_norm_solve`` with the regularised inverse given (``tikhonov_inverse(S)``); the
    steps are one rolled loop (a scan under reverse mode), compiled once."""
    return jax.lax.fori_loop(0, refinements, lambda _, y: y + inv @ (r - S @ y), inv @ r)


def min_norm_solve(S: jax.Array, r: jax.Array, refinements: int = 5) -> jax.Array:
    """The minimum-norm ``y`` of ``S y = r`` for a symmetric positive semi-definite ``S``
    that may be singular (redundant rows), by iterated Tikhonov regularisation: the inverse
    of ``S + eps I`` (by Cholesky; ``eps = 1e-8 max diag S`` in float64, 1e-4 in float32)
    and ``refinements`` steps ``y += (S + eps I)^-1 (r - S y)``, each shrinking the error by
    ``eps / sigma``. The steps are products with the inverse, not triangular solves: a
    small program, quick to compile. Differentiable, no eigen-decomposition, exact to
    round-off for consistent systems."""
    return refine(S, tikhonov_inverse(S), r, refinements)


def _kkt_primal(M: jax.Array, f: jax.Array, G: jax.Array, b: jax.Array):
    """``udot, lambda`` and the factors (``L`` with ``M = L L^T``, ``Y = L^-1 G^T``,
    ``S = Y^T Y``, ``S``'s regularised inverse) that solve any other right-hand side."""
    L = cholesky_lower(M)
    ZY = solve_lower(L, jnp.concatenate([f[:, None], G.T], axis=1))
    z, Y = ZY[:, 0], ZY[:, 1:]
    S = Y.T @ Y
    factors = (L, Y, S, tikhonov_inverse(S))
    return _kkt_finish(factors, z, b), factors


def _kkt_finish(factors, z: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``udot, lambda`` from ``z = L^-1 f``."""
    L, Y, S, inv = factors
    lam = refine(S, inv, Y.T @ z - b)
    return solve_lower(L, z - Y @ lam, transpose=True), lam


def _velocity_residual(factors, verr: jax.Array) -> jax.Array:
    """The part of ``verr`` (the first ``k`` rows' velocity errors) outside the range of
    their rows of ``S = G M^-1 G^T``: ``verr - S_kk S_kk^+ verr``, by the same iterated
    Tikhonov solve (the whole ``S``'s inverse when ``k`` is every row)."""
    _, _, S, inv = factors
    k = verr.shape[0]
    if k == 0:
        return verr
    if k < S.shape[0]:
        S = S[:k, :k]
        inv = tikhonov_inverse(S)
    return verr - S @ refine(S, inv, verr)


@jax.custom_jvp
def _kkt_solve(M: jax.Array, f: jax.Array, G: jax.Array, b: jax.Array, verr: jax.Array):
    (udot, lam), factors = _kkt_primal(M, f, G, b)
    return udot, lam, _velocity_residual(factors, verr)


@_kkt_solve.defjvp
def _kkt_solve_jvp(primals, tangents):
    # The tangent solves the same system, K [dudot; dlam] = [df; db] - dK [udot; lam], with
    # the primal's factors: neither pass differentiates a factorisation (the reverse pass
    # is transposed triangular solves and products). The velocity residual is a diagnostic
    # (zero wherever the constraints are consistent): its tangent is zero.
    M, f, G, b, verr = primals
    dM, df, dG, db, _ = tangents
    (udot, lam), factors = _kkt_primal(M, f, G, b)
    dz = solve_lower(factors[0], df - dM @ udot - dG.T @ lam)
    tangent = _kkt_finish(factors, dz, db - dG @ udot)
    vres = _velocity_residual(factors, verr)
    return (udot, lam, vres), (*tangent, jnp.zeros_like(vres))


def solve_constrained(M: jax.Array, f: jax.Array, G: jax.Array, b: jax.Array, verr: jax.Array | None = None):
    """``udot, lambda`` of ``M udot + G^T lambda = f``, ``G udot = b``.

    With ``M = L L^T`` and ``[z, Y] = L^-1 [f, G^T]``, ``S = G M^-1 G^T = Y^T Y`` may be
    singular (redundant constraints): lambda is its minimum-norm solution
    (``min_norm_solve``: iterated Tikhonov regularisation, ``eps = 1e-8 max diag S`` in
    float64, five refinement steps, each shrinking the error by ``eps / sigma``), and
    ``udot = L^-T (z - Y lambda)``. That is differentiable with no eigen-decomposition and
    exact (to round-off) for consistent systems; udot does not depend on how lambda is
    split among redundant rows, and a row that vanishes to round-off
    (``max |G_row| <= 1e-12 max |G|``) gets lambda = 0 exactly (as in Simbody). The split
    among rows that are redundant only in combination is the minimum-norm one to about
    ``1e-8`` relative (Simbody's rank-revealing factorisation gets it to round-off).
    Returns also the acceleration residual ``G udot - b`` (nonzero only for inconsistent
    constraints) and, given ``verr`` (the velocity errors of the first ``k`` rows, the
    holonomic and nonholonomic ones, whose rows of ``G`` are their velocity Jacobian
    ``V``), the velocity residual ``verr - S_kk S_kk^+ verr`` (``S_kk = V M^-1 V^T``): the
    part of the velocity errors no change of u removes, ``-`` the projection of the
    constraints' right side onto the null space of ``V^T``, whatever u is. It is zero to
    round-off unless the velocity constraints are inconsistent (no u satisfies them all:
    two speeds demanded of one coordinate, a speed demanded of a held coordinate). Its
    derivative is taken as zero.

    Derivatives (a custom JVP): the tangent solves the same system with the primal's
    factors, ``K [udot'; lambda'] = [f'; b'] - K' [udot; lambda]``, so neither pass
    differentiates a factorisation. ``udot'`` is exact; with redundant rows ``lambda'`` is
    the minimum-norm tangent (the split of a redundant multiplier's change, like the split
    of the multiplier itself, is a choice).
    """
    verr = jnp.zeros(0, f.dtype) if verr is None else verr
    if G.shape[0] == 0:
        return solve_mass_matrix(M, f), jnp.zeros(0, f.dtype), jnp.zeros(0, f.dtype), verr
    # Rows that vanish to round-off (e.g. the out-of-plane row of a planar loop closed by
    # a Ball) are structurally redundant: drop them exactly so their multipliers are 0.
    G0, b0 = G, b
    rn = jnp.max(jnp.abs(G), axis=1)
    keep = rn > (1e-12 if G.dtype == jnp.float64 else 1e-6) * jnp.max(rn)
    G = jnp.where(keep[:, None], G, 0.0)
    b = jnp.where(keep, b, 0.0)
    udot, lam, vres = _kkt_solve(M, f, G, b, verr)
    return udot, lam, G0 @ udot - b0, vres


# ============================================================================ kinds
