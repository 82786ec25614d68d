"""Which of the equivalent values of an assembly solution is reported: whole turns and
Euler branches (issue 65).

An angle q and ``q + 2 pi n`` give the same pose when q enters the kinematics only
through a rotation about an axis, and a three-rotation joint reaches the same orientation
with ``(a, b, c)`` and ``(a + pi, pi - b, c + pi)`` (orthogonal successive axes; a
``(a + pi, -b, c + pi)`` for a repeated axis). The solver may end on any of them: a cold
start can travel whole turns, a frame solved apart from its neighbours can land on the
other branch. Among the equivalents of a solution the one reported is

(a) inside the q's range where one is (its bounds, else the range given by
    ``Assembler.prefer_q_range``: OpenSim's ``<range>`` of unclamped coordinates);
(b) otherwise nearest the reference: the solve's start (the initial guess, or the previous
    frame when warm-started), or in ``track`` the previous frame's reported value;
(c) of the two Euler branches, the one (a) then (b) prefer.

What counts as equivalent is found numerically, never assumed from a joint's name: a move
(``q + 2 pi`` on one free q; a branch flip of a joint's three rotation coordinates) is
allowed only where, at a few configurations spread about the State's q, it leaves every
mobilizer's transform ``X_FM`` (hence every body's pose and every marker) unchanged to
1e-9 and every constraint's position error unchanged (a coordinate coupler, a
``ConstantCoordinate``, anything reading q itself), and no condition reads the q's value
(a ``QValue``). A coordinate coupled through a spline, a screw's angle, a coordinate that
also drives a translation: none is moved. Under a custom condition (whose use of q is
unknown) nothing is moved.

Everything here is traced (jit/vmap-friendly); the analysis is a handful of ``X_FM`` and
constraint-error evaluations, part of the solver's program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..constraints import kernels as cn
from ..model import mobilizers as mb
from ..model.state import State
from ..tree.kinds import joint_inputs
from .conditions import Markers, OrientationSensors, QValue, SystemConstraints

TWO_PI = 2.0 * math.pi
# The analysis checks every move at this many configurations, the State's q plus normal
# offsets of this spread (rad or m), with this tolerance (relative where the value is large).
SAMPLES = 3
SPREAD = 0.3
TOL = 1e-9

# Conditions whose value depends on the State only through body poses, the constraints'
# errors and (QValue) the q's they name: the only ones a move is checked against.
_KNOWN_CONDITIONS = (Markers, OrientationSensors, QValue, SystemConstraints)


def _triple(mob: Any) -> tuple[int, int, int] | None:
    """The local q's of a mobilizer's three successive rotations (the middle one second),
    where it has them: a FunctionBased (CustomJoint) whose three rotation functions each
    read one distinct q, or a kind with three Euler angles first (Ball, Free, Gimbal,
    Bushing in Euler form). Whether a branch flip holds is then checked numerically."""
    if isinstance(mob, mb.FunctionBased):
        ci = mob.coordinate_indices[:3]
        if len(ci) == 3 and all(len(c) == 1 for c in ci) and len({c[0] for c in ci}) == 3:
            return (ci[0][0], ci[1][0], ci[2][0])
        return None
    if isinstance(mob, mb.Custom) or mob.n_angles < 3 or mob.nq < 3:
        return None
    return (0, 1, 2)


def _moves(nq: int, tri: tuple[int, int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """A mobilizer's candidate moves ``q -> q * scale + offset``, (C, nq) each: ``+2 pi``
    on each q, then (with a rotation triple) the flips with the middle angle ``pi - b``
    and ``-b``."""
    scale = np.ones((nq, nq))
    offset = TWO_PI * np.eye(nq)
    if tri is not None:
        a, b, c = tri
        for mid in (math.pi, 0.0):
            s, o = np.ones(nq), np.zeros(nq)
            o[a] = o[c] = math.pi
            s[b], o[b] = -1.0, mid
            scale, offset = np.vstack([scale, s]), np.vstack([offset, o])
    return scale, offset


@dataclass(frozen=True, eq=False)
class _KindMoves:
    """The moves of one kind group and where their verdicts go (index n: nowhere)."""

    mobilizer: Any
    group: Any  # the KindGroup
    scale: np.ndarray  # (C, nq)
    offset: np.ndarray
    shift_pos: np.ndarray  # (nq, nb): free position of each shifted q
    flip_tri: np.ndarray  # (nb,): the triple of each body (n_tri if none)


@dataclass(frozen=True, eq=False)
class _ConstraintMoves:
    """The moves of each constrained mobilizer slot of one constraint group."""

    group: Any  # the ConstraintGroup
    slots: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool], ...]
    # per slot: scale (C, nq), offset (C, nq), shift_pos (nq, n), flip_tri (n,), any free q
    R: np.ndarray  # (n, k, 3, 3) fixed rotations standing for the bodies' poses
    p: np.ndarray  # (n, k, 3)


@dataclass(frozen=True, eq=False)
class BranchPlan:
    """Static description of the moves of one assembly problem (free q's in Euler form)."""

    n: int
    kinds: tuple[_KindMoves, ...]
    constraints: tuple[_ConstraintMoves, ...]
    triples: np.ndarray  # (n_tri, 3) free positions of each rotation triple
    excluded: np.ndarray  # (n,) q's whose value a condition reads
    enabled: bool  # False: a condition of unknown kind; nothing moves
    noise: np.ndarray  # (SAMPLES, nq) offsets of the sample configurations
    free: np.ndarray  # (n,) Euler q index of each free q
    body_of_free: np.ndarray  # (n,) body of each free q
    local_of_free: np.ndarray  # (n,) its slot in the body's q

    @property
    def any(self) -> bool:
        """Whether anything can move at all."""
        return self.enabled and self.n > 0

    def user_positions(self, topo_user: Any, topo_euler: Any) -> np.ndarray:
        """(n,) index of each free q in a State of ``topo_user``'s form (a quaternion
        State: -1 for the q's of quaternion mobilizers, whose Euler angles it has not)."""
        b, k = self.body_of_free, self.local_of_free
        same = np.asarray(topo_user.nq_body)[b] == np.asarray(topo_euler.nq_body)[b]
        return np.where(same, np.asarray(topo_user.q_start)[b] + k, -1).astype(int)


def branch_plan(model: Any, free: np.ndarray, conditions: list[Any]) -> BranchPlan:
    """The moves to check for the free q's ``free`` (Euler-form indices) of ``model``
    under the goal and error ``conditions``."""
    topo = model.topology(True)
    free = np.asarray(free, dtype=int)
    n = len(free)
    pos = np.full(topo.nq, n, dtype=int)
    pos[free] = np.arange(n)
    body_of_q = np.repeat(np.arange(topo.nb), topo.nq_body)
    triples: list[np.ndarray] = []
    tri_of_body: dict[int, int] = {}
    for b in range(1, topo.nb):
        tri = _triple(topo.mobilizers[b])
        if tri is None:
            continue
        idx = pos[int(topo.q_start[b]) + np.asarray(tri)]
        if np.all(idx < n):
            tri_of_body[b] = len(triples)
            triples.append(idx)
    n_tri = len(triples)
    kinds = []
    for g in topo.groups:
        mob = g.mobilizer
        if mob.nq == 0:
            continue
        scale, offset = _moves(mob.nq, _triple(mob))
        shift_pos = pos[np.asarray(g.q_idx).T]
        flip_tri = np.array([tri_of_body.get(int(b), n_tri) for b in g.bodies], dtype=int)
        if np.all(shift_pos == n):  # every q of the kind locked: nothing to check
            continue
        kinds.append(_KindMoves(mob, g, scale, offset, shift_pos, flip_tri))
    rng = np.random.default_rng(0)
    cons = []
    mp_total = model.constraint_counts(True)[0]
    for cg in cn.constraint_groups(model, True) if mp_total else ():
        if cg.mp == 0:
            continue
        slots = []
        for j, mob in enumerate(cg.mobs):
            if mob.nq == 0:
                continue
            scale, offset = _moves(mob.nq, _triple(mob))
            flip = np.array([tri_of_body.get(int(b), n_tri) for b in cg.mob_bodies[:, j]], dtype=int)
            shift_pos = pos[np.asarray(cg.q_idx[j]).T]
            slots.append((scale, offset, shift_pos, flip, bool(np.any(shift_pos < n))))
        if not any(slot[-1] for slot in slots):  # constrains locked q's only
            continue
        k = max(cg.bodies.shape[1] - 1, 0)
        Q, _ = np.linalg.qr(rng.normal(size=(cg.n, k, 3, 3)))
        cons.append(_ConstraintMoves(group=cg, slots=tuple(slots), R=Q, p=rng.normal(size=(cg.n, k, 3))))
    excluded = np.zeros(n, dtype=bool)
    enabled = True
    for c in conditions:
        if type(c) not in _KNOWN_CONDITIONS:
            enabled = False
        if isinstance(c, QValue) and c._q_index is not None and pos[c._q_index] < n:
            excluded[pos[c._q_index]] = True
    return BranchPlan(
        n=n,
        kinds=tuple(kinds),
        constraints=tuple(cons),
        triples=np.asarray(triples, dtype=int).reshape(n_tri, 3),
        excluded=excluded,
        enabled=enabled,
        noise=rng.normal(0.0, SPREAD, (SAMPLES, topo.nq)),
        free=free,
        body_of_free=body_of_q[free],
        local_of_free=free - np.asarray(topo.q_start)[body_of_q[free]],
    )


def _same(a: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """Where ``a[1:]`` equals ``a[0]`` to TOL (relative where large) all along ``axes``
    (NaN: not equal)."""
    ok = jnp.abs(a[1:] - a[:1]) <= TOL * (1 + jnp.abs(a[:1]))
    return jnp.all(ok, axis=axes)


def _moved(q: jax.Array, scale: np.ndarray, offset: np.ndarray) -> jax.Array:
    """``q`` (..., nq) and its moves: (1 + C, ..., nq)."""
    extra = (slice(None),) + (None,) * (q.ndim - 1)
    s, o = jnp.asarray(scale, q.dtype)[extra], jnp.asarray(offset, q.dtype)[extra]
    return jnp.concatenate([q[None], q[None] * s + o])


def _record(verdict: jax.Array, where: np.ndarray, ok: jax.Array) -> jax.Array:
    """``verdict`` (int, one more entry than used) with ``ok`` and-ed in at ``where``."""
    return verdict.at[where.reshape(-1)].min(ok.reshape(-1).astype(verdict.dtype), mode="drop")


def branch_data(bp: BranchPlan, model: Any, state: State) -> dict[str, jax.Array]:
    """The moves allowed in this State's model (its Instance numbers: axes, spline knots),
    as data: ``period`` (n,) 2 pi where a free q may take whole turns (else 0);
    ``tri_ok`` (n_tri,) where a rotation triple may flip; ``tri_mid`` (n_tri,) its middle
    angle's ``pi - b`` (pi) or ``-b`` (0). ``state``: Euler form. Not differentiated."""
    state = jax.lax.stop_gradient(state)
    n, n_tri = bp.n, len(bp.triples)
    dt = state.q.dtype
    if not bp.any:
        return dict(period=jnp.zeros(n, dt), tri_ok=jnp.zeros(n_tri, bool), tri_mid=jnp.zeros(n_tri, dt))
    shift = jnp.ones(n + 1, jnp.int32)
    flip_pi = jnp.ones(n_tri + 1, jnp.int32)
    flip_0 = jnp.ones(n_tri + 1, jnp.int32)
    qs = state.q[None] + jnp.asarray(bp.noise, dt)  # (K, nq)

    def verdicts(ok: jax.Array, nq: int, shift_pos: np.ndarray, flip_tri: np.ndarray) -> None:
        nonlocal shift, flip_pi, flip_0
        shift = _record(shift, shift_pos, ok[:nq])
        if ok.shape[0] > nq:
            flip_pi = _record(flip_pi, flip_tri, ok[nq])
            flip_0 = _record(flip_0, flip_tri, ok[nq + 1])

    for km in bp.kinds:
        mob, g = km.mobilizer, km.group
        Q = _moved(qs[:, g.q_idx], km.scale, km.offset)  # (1 + C, K, nb, nq)
        _, params = joint_inputs(state, g, "q", "params")
        lead = Q.shape[:-1]
        # one vmap over every (move, sample, body), each row with its body's numbers
        rows = int(np.prod(lead))
        P = jnp.broadcast_to(params, (*lead[:2], *params.shape)).reshape(rows, params.shape[-1])
        R, p = jax.vmap(mob.X_FM)(Q.reshape(rows, mob.nq), P)
        R, p = R.reshape(*lead, 3, 3), p.reshape(*lead, 3)
        ok = _same(R, (1, 3, 4)) & _same(p, (1, 3))  # (C, nb)
        verdicts(ok, mob.nq, km.shift_pos, km.flip_tri)

    inst = state.instance["matter"]
    for cm in bp.constraints:
        cg = cm.group
        take = (lambda x: x) if cg.param_rows is None else (lambda x: x[cg.param_rows])  # noqa: E731
        cparams = {name: take(inst[f"{cg.param_prefix}.{name}"]) for name in cg.params}
        mp = inst["mobilizer_params"]
        mparams = tuple(mp[cg.mob_bodies[:, j]][:, : max(m.n_params, 1)] for j, m in enumerate(cg.mobs))
        R, p = jnp.asarray(cm.R, dt), jnp.asarray(cm.p, dt)
        base = tuple(qs[:, i] for i in cg.q_idx)  # each (K, n, nq_j)
        slot = 0
        for j, mob in enumerate(cg.mobs):
            if mob.nq == 0:
                continue
            scale, offset, shift_pos, flip_tri, free = cm.slots[slot]
            slot += 1
            if not free:
                continue
            Qj = _moved(base[j], scale, offset)  # (1 + C, K, n, nq_j)
            lead = Qj.shape[:-1]
            rows = int(np.prod(lead))
            # one vmap over every (move, sample, member): the other slots' q's as sampled
            q = tuple(
                (Qj if i == j else jnp.broadcast_to(b, (*lead[:1], *b.shape))).reshape(rows, b.shape[-1])
                for i, b in enumerate(base)
            )
            per = lambda x: jnp.broadcast_to(x, (*lead[:2], *x.shape)).reshape(rows, *x.shape[1:])  # noqa: E731
            z = jnp.zeros((rows, *cm.p.shape[1:]), dt)
            kin = cn.Kin(
                R=per(R), p=per(p), w=z, v=z, alpha=z, a=z, q=q,
                u=tuple(jnp.zeros((rows, m.nu), dt) for m in cg.mobs),
                udot=tuple(jnp.zeros((rows, m.nu), dt) for m in cg.mobs),
                t=jnp.broadcast_to(state.t, (rows,)).astype(dt),
                params=jax.tree.map(per, cparams), mparams=tuple(per(x) for x in mparams),
            )  # fmt: skip
            e = jax.vmap(cg.funcs[0])(kin).reshape(*lead, -1)  # (1 + C, K, n, mp)
            verdicts(_same(e, (1, 3)), mob.nq, shift_pos, flip_tri)

    period = (shift[:n] > 0) & ~jnp.asarray(bp.excluded)
    tri = jnp.asarray(bp.triples).reshape(n_tri, 3)
    free_tri = ~jnp.any(jnp.asarray(bp.excluded)[tri], axis=1)
    ok_pi, ok_0 = (flip_pi[:n_tri] > 0) & free_tri, (flip_0[:n_tri] > 0) & free_tri
    return dict(
        period=jnp.where(period, TWO_PI, 0.0).astype(dt),
        tri_ok=ok_pi | ok_0,
        tri_mid=jnp.where(ok_pi, math.pi, 0.0).astype(dt),
    )


def _turns(x, ref, lo, hi, period, keep):
    """``x + period * n`` nearest ``ref`` among those in ``[lo, hi]`` (all of them where
    none is): elementwise; and whether it lies in ``[lo, hi]``."""
    moves = (period > 0) & ~keep
    P = jnp.where(moves, period, 1.0)
    n_ref = jnp.round((ref - x) / P)
    n_lo = jnp.ceil((lo - x) / P - TOL)
    n_hi = jnp.floor((hi - x) / P + TOL)
    fits = n_lo <= n_hi
    n = jnp.where(fits, jnp.clip(n_ref, n_lo, n_hi), n_ref)
    n = jnp.where(moves & jnp.isfinite(n), n, 0.0)
    y = x + P * n
    slack = TOL * (1 + jnp.abs(y))
    return y, (y >= lo - slack) & (y <= hi + slack)


def nearest_branch(
    x: jax.Array,
    ref: jax.Array,
    data: dict[str, jax.Array],
    lo: jax.Array,
    hi: jax.Array,
    keep: jax.Array,
    triples: np.ndarray,
) -> jax.Array:
    """The equivalent of the free q's ``x`` that the module docstring's rules pick, with
    ``ref`` the reference, ``[lo, hi]`` each q's range (``+-inf``: none) and ``keep``
    the q's not to move (on a bound, fixed). Not differentiated (the pose is the same)."""
    x, ref = jax.lax.stop_gradient((x, ref))
    period = data["period"]
    y, inside = _turns(x, ref, lo, hi, period, keep)
    if len(triples) == 0:
        return y
    t = np.asarray(triples)
    i, j, k = t.T
    ok = data["tri_ok"] & ~(keep[i] | keep[j] | keep[k])
    alt = jnp.stack([x[i] + math.pi, data["tri_mid"] - x[j], x[k] + math.pi], axis=1)  # (n_tri, 3)
    ya, ina = _turns(alt, ref[t], lo[t], hi[t], period[t], keep[t])
    yb, inb = y[t], inside[t]
    cost_a = jnp.sum(jnp.abs(ya - ref[t]), axis=1)
    cost_b = jnp.sum(jnp.abs(yb - ref[t]), axis=1)
    all_a, all_b = jnp.all(ina, axis=1), jnp.all(inb, axis=1)
    better = ok & ((all_a & ~all_b) | ((all_a == all_b) & (cost_a < cost_b - TOL)))
    return y.at[t].set(jnp.where(better[:, None], ya, yb))


def ranges(lo: jax.Array, hi: jax.Array, rlo: jax.Array, rhi: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Each q's range for the choice: its bounds where it has any, else its preferred range."""
    bounded = jnp.isfinite(lo) | jnp.isfinite(hi)
    return jnp.where(bounded, lo, rlo), jnp.where(bounded, hi, rhi)


def continuity(
    bp: BranchPlan,
    q: jax.Array,
    q0: jax.Array,
    data: dict[str, jax.Array],
    lo: jax.Array,
    hi: jax.Array,
    keep: jax.Array,
    user: np.ndarray,
) -> jax.Array:
    """Every frame of ``q`` (T, nq) (a ``track``'s q's, in the form whose free-q indices
    are ``user``, -1 where that form has no such q) moved to the equivalent nearest the
    frame before (the first frame: nearest ``q0``), by :func:`nearest_branch`; ``keep``
    (T, n) the q's on their bounds."""
    user = np.asarray(user)
    mapped = user >= 0
    data = dict(data, period=jnp.where(jnp.asarray(mapped), data["period"], 0.0))
    t = bp.triples
    tri_mapped = np.all(mapped[t], axis=1) if len(t) else np.zeros(0, bool)
    data["tri_ok"] = data["tri_ok"] & jnp.asarray(tri_mapped)
    take = np.where(mapped, user, 0)
    put = np.where(mapped, user, q.shape[1])  # unmapped: dropped

    def step(ref, xk):
        x, kp = xk
        y = nearest_branch(x, ref, data, lo, hi, kp, t)
        return y, y

    xs = q[:, take]
    _, ys = jax.lax.scan(step, q0[take], (xs, keep))
    return q.at[:, put].set(ys.astype(q.dtype), mode="drop")
