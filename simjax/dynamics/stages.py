"""Realization stages as pure functions of (model, state, earlier caches).

Frames: tree quantities are in Ground axes about Ground's origin (spatial vectors
``[angular; linear]``), so outward and inward passes are plain sums (see ``_tree``).
Per-mobilizer work (X_FM, H, N and their derivatives) is joint-local: it is done for all
bodies of one kind at once with ``vmap``, outside the tree recursion.

Algorithm (Featherstone (2008), chs. 5-7), in Ground coordinates as in MJX: recursive
Newton-Euler bias forces, then ``udot = M^-1 (tau - bias)`` (``forward_solve``): for a
single state by the dense Cholesky of the composite-rigid-body mass matrix, which also
serves where ``M`` itself is needed (constraints, derivatives); for a batch by the
articulated-body recursion (``simjax.tree.articulated``), which then takes the bias terms
itself (each body's gyroscopic and applied force, ``bias_forces``, and velocity product,
``velocity_products``) in place of the RNEA's outward and inward sums.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _batching
from .. import _spatial as sp
from ..model.model import Model
from ..model.state import (
    DynamicsCache,
    PositionCache,
    State,
    VelocityCache,
)
from ..tree import articulated as _articulated
from ..tree import traversal as _tree
from ..tree.kinds import joint_inputs, map_kinds, no_q, place
from .forces import calc_forces


def _X_FM(mob, q, params):
    """``mob.X_FM``; for kinds with ``X_FM_terms`` their weighted sum, each weight computed
    once (``sp.computed_once``) rather than once per matrix entry."""
    if not mob.has_X_FM_terms:
        return mob.X_FM(q, params)
    R_k, p_k = mob.X_FM_terms(params)
    R, p = _weighted_poses(mob, q[None], R_k[None], p_k[None])  # as a group of one
    return R[0], p[0]


def _joint_local(mob, q, params, X_PF_R, X_PF_p, X_BM_R, X_BM_p, *, terms: bool = True):
    """One mobilizer: X_PB and the motion subspace S_B (6, nu) in B at B's origin. Kinds whose
    rotation terms are constants (``X_FM_rotation_terms``) go by ``_X_PM_from_terms`` unless
    ``terms=False`` (the general products, which hold for every kind)."""
    # X_PB = X_PF X_FM X_MB, X_MB = inverse(X_BM).
    R_MB = X_BM_R.T
    p_MB = -sp.matvec_fused(R_MB, X_BM_p)
    if terms and mob.no_velocity_product and mob.X_FM_rotation_terms is not None:
        R_PM, p_PM, R_FB, H = _X_PM_from_terms(mob, q, params, X_PF_R, X_PF_p, R_MB)
    else:
        R_FM, p_FM = _X_FM(mob, q, params)
        H = mob.H_FM(q, params)  # (6, nu) in F at M origin
        # Products of a rotation with a rotation and a vector side by side, as one [R | p]
        # (3, 4): on XLA:CPU each reduction costs a single-state call a fixed time besides its kernel.
        X_PM = sp.matmul_fused(X_PF_R, jnp.concatenate([R_FM, p_FM[:, None]], axis=1))
        R_PM, p_PM = X_PM[:, :3], X_PF_p + X_PM[:, 3]
        R_FB = sp.matmul_fused(R_FM, R_MB)
    X_PB = sp.matmul_fused(R_PM, jnp.concatenate([R_MB, p_MB[:, None]], axis=1))
    R_PB, p_PB = X_PB[:, :3], p_PM + X_PB[:, 3]
    # Relative velocity in B axes at B origin: w_B = R_FB^T w_F; v_B = R_FB^T v_F - w_B x p_BM.
    nu = H.shape[1]
    WV = sp.matmul_fused(R_FB.T, jnp.concatenate([H[:3], H[3:]], axis=1))
    w_B = WV[:, :nu]
    v_B = WV[:, nu:] - sp.cross(w_B.T, X_BM_p).T
    S_B = jnp.concatenate([w_B, v_B], axis=0)
    return R_PB, p_PB, S_B


def _X_PM_from_terms(mob, q, params, X_PF_R, X_PF_p, R_MB):
    """``(R_PM, p_PM, R_FB, H)`` of a kind whose rotation terms are constants
    (``X_FM_rotation_terms``), joint by joint: ``R_PF R_FM = sum_k w_k (R_PF R_k)`` as
    ``R_PF``'s columns picked, scaled and summed (``sp.matmul_const``; no 3x3 product). These
    kinds' ``H_FM`` is invariant under their ``R_FM`` (a rotation about the axis it moves
    along), so the motion subspace takes ``R_MB`` for ``R_FB``. Each member of a batch of
    whole States pays this (its own frames); for large batches of long chains it is faster
    than the general products."""
    R_k = mob.X_FM_rotation_terms
    w = _weights_once(mob.X_FM_weights(q))
    R_PM = sp.matmul_const(X_PF_R, R_k[0])
    for k, wk in enumerate(w, start=1):
        R_PM = R_PM + wk * sp.matmul_const(X_PF_R, R_k[k])
    p_FM = _weighted(w, mob.X_FM_terms(params)[1][None])[0]
    return R_PM, X_PF_p + sp.matvec_fused(X_PF_R, p_FM), R_MB, mob.H_FM(q, params)


def _joint_terms(mob, params, X_PF_R, X_PF_p, X_BM_R, X_BM_p):
    """A kind with ``X_FM_terms``: ``X_PB = X_PF X_FM(q) X_MB`` as (k, 3, 3) and (k, 3) terms
    weighted by ``mob.X_FM_weights(q)``, and its motion subspace ``S_B``, fixed in B for these
    kinds (``no_velocity_product``). None of it depends on q: for a batch of states sharing
    the model it is computed once, and each state pays a weighted sum of k terms."""
    R_k, p_k = mob.X_FM_terms(params)
    R_MB = X_BM_R.T
    p_MB = -R_MB @ X_BM_p
    R_PB = X_PF_R @ R_k @ R_MB
    # p_PB = p_PF + R_PF (p_FM + R_FM p_MB), the constant p_PF with the first weight (1).
    p_PB = jnp.einsum("ij,kj->ki", X_PF_R, p_k + R_k @ p_MB).at[0].add(X_PF_p)
    q0 = jnp.asarray(mob.default_q(), p_PB.dtype)
    S_B = _joint_local(mob, q0, params, X_PF_R, X_PF_p, X_BM_R, X_BM_p)[2]
    return R_PB, p_PB, S_B


def _weighted(w: list[jax.Array], terms: jax.Array) -> jax.Array:
    """``terms[:, 0] + sum_k w[k - 1] terms[:, k]`` for weights (n,) each and terms
    (n, k, ...), as elementwise products and additions (one fused kernel; no reduction)."""
    out = terms[:, 0]
    for k, wk in enumerate(w, start=1):
        out = out + wk.reshape((-1,) + (1,) * (terms.ndim - 2)) * terms[:, k]
    return out


def _weighted_poses(mob, q, R_k, p_k):
    """``(R_PB, p_PB)`` of a kind group from its terms and coordinates (``_joint_terms``)."""
    w = _weights_once(jax.vmap(mob.X_FM_weights)(q))
    return _weighted(w, R_k), _weighted(w, p_k)


def _weights_once(w: jax.Array) -> list[jax.Array]:
    """The weights ``w[..., k]`` past the first (which is 1), each through ``sp.computed_once``
    so that it is computed once rather than inside every kernel that broadcasts it."""
    return [sp.computed_once(w[..., k]) for k in range(1, w.shape[-1])]


def _terms_poses(mob, q, params, *frames):
    """A kind group's ``(R_PB, p_PB, S_B)`` from the constant terms (``_joint_terms``)."""
    R_k, p_k, S_B = jax.vmap(partial(_joint_terms, mob))(params, *frames)
    return (*_weighted_poses(mob, q, R_k, p_k), S_B)


def _group_poses(mob, q, params, *frames):
    """A kind group's ``(R_PB, p_PB, S_B)``. For kinds with ``X_FM_terms``, which way depends
    on the batch, known to a ``custom_vmap`` rule: from the constant terms where the model's
    numbers (``params``, the joint frames) are shared by the batch (computed once, each
    state a weighted sum of them), joint by joint where every member has its own (a batch
    of whole States), whose terms would cost each member more than its joint. Derivatives
    go through the terms (``jax.jvp``): the same numbers to round-off."""
    by_joint = lambda *a: jax.vmap(partial(_joint_local, mob))(*a)
    if not (mob.has_X_FM_terms and mob.no_velocity_product):
        return by_joint(q, params, *frames)
    by_terms = partial(_terms_poses, mob)
    if not _batching.chunking():  # no batching rules here (``_batching.unchunked``)
        return by_terms(q, params, *frames)
    primal = jax.custom_batching.custom_vmap(by_terms)

    @primal.def_vmap
    def _batched(axis_size, in_batched, q, params, *frames):
        axes = tuple(0 if b else None for b in in_batched)
        if any(in_batched[1:]):
            return jax.vmap(by_joint, in_axes=axes)(q, params, *frames), (True, True, True)
        R_k, p_k, S_B = jax.vmap(partial(_joint_terms, mob))(params, *frames)  # once
        R, p = jax.vmap(lambda qq: _weighted_poses(mob, qq, R_k, p_k))(q)
        return (R, p, S_B), (True, True, False)

    @jax.custom_jvp
    def poses(*args):
        return primal(*args)

    @poses.defjvp
    def _jvp(primals, tangents):
        return jax.jvp(by_terms, primals, tangents)

    return poses(q, params, *frames)


def _kind_poses(topo, state):
    """``[(group, (R_PB, p_PB, S_B))]`` for every kind group (``_group_poses``)."""
    inputs = lambda g: joint_inputs(state, g, "q", "params", "frames")
    return [(g, _group_poses(g.mobilizer, *inputs(g))) for g in topo.groups]


def _phi(R: jax.Array, p: jax.Array, m: jax.Array) -> jax.Array:
    """Body-frame motion vector(s) m (..., 6) at the body origin -> Ground about origin."""
    wv = sp.matmul_fused(R, jnp.stack(jnp.split(m, 2, axis=-1), axis=-1))  # one reduction
    w, v = jnp.unstack(wv, axis=-1)
    return jnp.concatenate([w, v - sp.cross(w, p)], axis=-1)


def realize_position(model: Model, state: State) -> PositionCache:
    """Kinematics at Position stage: poses, motion subspaces, spatial inertias."""
    topo = model.topology(state.use_euler_angles)
    inst = state.instance["matter"]
    q = state.q
    nb, nu = topo.nb, topo.nu
    dt = q.dtype if jnp.issubdtype(q.dtype, jnp.floating) else jnp.result_type(float)
    kinds = _kind_poses(topo, state)
    R_PB = place(nb, [(g.bodies, R) for g, (R, _, _) in kinds], jnp.eye(3, dtype=dt))
    p_PB = place(nb, [(g.bodies, p) for g, (_, p, _) in kinds], jnp.zeros(3, dt))
    S_parts = [(g.u_idx, jnp.swapaxes(S, 1, 2)) for g, (_, _, S) in kinds if g.mobilizer.nu]
    S_B = place(nu, S_parts, jnp.zeros(6, dt))
    mass, com, G_Bo = inst["mass"], inst["com"], inst["unit_inertia"]

    def body_inertia(R, p, m, c, G):
        """Spatial inertia about the origin of the frame where B has pose (R, p), and the
        mass center there."""
        Ic_B = m * (G + sp.matmul_fused(sp.skew(c), sp.skew(c)))  # inertia about com, in B
        RIc = sp.matmul_fused(R, jnp.concatenate([Ic_B, c[:, None]], axis=1))  # [R Ic_B | R c]
        c_G = p + RIc[:, 3]
        return sp.inertia_parameters(m, c_G, sp.matmul_fused(RIc[:, :3], R.T)), c_G

    if topo.has_welds:
        # The moving tree (``Topology.moving``): welded bodies' poses relative to their
        # moving ancestor, and their mass properties folded into it, depend on no
        # coordinate (computed once for a batch sharing the model).
        # Moving and welded rows placed apart (a batch over q reaches the moving rows only).
        nm, row = len(topo.moving), topo.moving_row
        moving = [(row[g.bodies], R, p) for g, (R, p, _) in kinds if g.mobilizer.nu]
        welds = [(g.bodies, R, p) for g, (R, p, _) in kinds if not g.mobilizer.nu]
        R_PM = place(nm, [(b, R) for b, R, _ in moving], jnp.eye(3, dtype=dt))
        p_PM = place(nm, [(b, p) for b, _, p in moving], jnp.zeros(3, dt))
        R_PW = place(nb, [(b, R) for b, R, _ in welds], jnp.eye(3, dtype=dt))
        p_PW = place(nb, [(b, p) for b, _, p in welds], jnp.zeros(3, dt))
        R_m, p_m, R_rel, p_rel = _tree.compose_moving(topo, R_PM, p_PM, R_PW, p_PW)
        R_GB, p_GB = _tree.from_moving_poses(topo, R_m, p_m, R_rel, p_rel)
        P_rel, c_rel = jax.vmap(body_inertia)(R_rel, p_rel, mass, com, G_Bo)
        moving_inertia = jax.vmap(sp.transform_inertia_parameters)(R_m, p_m, _tree.fold_welded(topo, P_rel))
        com_G = sp.take_rows(p_m, row) + jnp.einsum("bij,bj->bi", sp.take_rows(R_m, row), c_rel)
        inertia_O = jax.vmap(body_inertia)(R_GB, p_GB, mass, com, G_Bo)[0]
        com_M = c_rel
    else:
        R_GB, p_GB = R_m, p_m = _tree.compose_outward(topo, R_PB, p_PB)
        inertia_O, com_G = jax.vmap(body_inertia)(R_GB, p_GB, mass, com, G_Bo)  # about Ground's origin
        moving_inertia, com_M = inertia_O, com
    db = np.asarray(topo.moving_tree.dof_body)
    cdof = jax.vmap(_phi)(sp.take_rows(R_m, db), sp.take_rows(p_m, db), S_B) if nu else S_B
    qs = np.asarray(topo.quaternion_slots)
    qerr = (sp.safe_norm(q[qs]) - 1.0) if len(qs) else jnp.zeros(0, dt)
    return PositionCache(
        R_GB=R_GB,
        p_GB=p_GB,
        R_PB=R_PB,
        p_PB=p_PB,
        S_B=S_B,
        cdof=cdof,
        inertia_O=inertia_O,
        com_G=com_G,
        moving_R_GB=R_m,
        moving_p_GB=p_m,
        moving_inertia_O=moving_inertia,
        com_M=com_M,
        qerr=qerr,
    )


def _joint_qdot(mob, q, u, params):
    """``qdot = N(q) u`` for one mobilizer."""
    Nq = mob.N(q, params)
    return u if Nq is None else Nq @ u


def _joint_bias(mob, q, u, params, XPF_R, XPF_p, XBM_R, XBM_p):
    """Apparent joint bias ``Sdot_B u`` (6,) in B, by a jvp of S_B along ``qdot``."""
    qdot = _joint_qdot(mob, q, u, params)

    def S_of(qq):
        return _joint_local(mob, qq, params, XPF_R, XPF_p, XBM_R, XBM_p)[2]

    _, dS = jax.jvp(S_of, (q,), (qdot.astype(q.dtype),))
    return dS @ u


def calc_qdot(model: Model, state: State) -> jax.Array:
    """``qdot = N(q) u`` for the whole system."""
    topo = model.topology(state.use_euler_angles)
    inputs = lambda g: joint_inputs(state, g, "q", "u", "params")
    parts = [(g.q_idx, qd) for g, qd in map_kinds(topo, _joint_qdot, inputs, skip=no_q)]
    return place(topo.nq, parts, jnp.zeros((), state.q.dtype))


def velocity_bias(model: Model, state: State, pos: PositionCache, vel: VelocityCache) -> jax.Array:
    """Body spatial accelerations at ``udot = 0`` (velocity products), (nb, 6) about Ground's
    origin. Computed on demand (Dynamics stage caches it); Position/Velocity don't pay for it."""
    topo = model.topology(state.use_euler_angles)
    return _tree.outward_from_moving(topo, velocity_products(model, state, pos, vel))


def velocity_products(model: Model, state: State, pos: PositionCache, vel: VelocityCache) -> jax.Array:
    """Each moving body's velocity-product acceleration across its own mobilizer,
    ``d/dt(cdof u)`` at ``udot = 0``, (nm, 6) about Ground's origin: ``velocity_bias`` is its
    outward sum."""
    topo = model.topology(state.use_euler_angles)
    dt = pos.p_GB.dtype
    inputs = lambda g: joint_inputs(state, g, "q", "u", "params", "frames")
    skip = lambda mob: no_q(mob) or mob.no_velocity_product  # their Sdot_B u is zero
    parts = [(g.bodies, c) for g, c in map_kinds(topo, _joint_bias, inputs, skip=skip)]
    # V_B x vJ_B + Phi(X_GB) Sdot_B u (the last term only where some joint has it: XLA
    # cannot drop products with zeros), on the moving bodies (a weld's is zero).
    rows = lambda x: _tree.moving_rows(topo, x)
    aJ = jax.vmap(sp.cross_motion)(rows(vel.V_O), rows(vel.vJ))
    if parts:
        Sdot = rows(place(topo.nb, parts, jnp.zeros(6, dt)))
        aJ = aJ + jax.vmap(_phi)(pos.moving_R_GB, pos.moving_p_GB, Sdot)
    return aJ


def bias_forces(
    model: Model, state: State, pos: PositionCache, vel: VelocityCache, dyn: DynamicsCache
) -> jax.Array:
    """Each moving body's gyroscopic force ``V x* (I V)`` less its applied body forces,
    (nm, 6) about Ground's origin (welded bodies folded in)."""
    topo = model.topology(state.use_euler_angles)
    return _gyroscopic(pos.moving_inertia_O, _tree.moving_rows(topo, vel.V_O)) - dyn.moving_forces


def _gyroscopic(inertia: jax.Array, V: jax.Array) -> jax.Array:
    """``V x* (I V)`` per row: the moving bodies' gyroscopic forces about Ground's origin."""
    return jax.vmap(sp.cross_force)(V, sp.inertia_times(inertia, V))


def realize_velocity(model: Model, state: State, pos: PositionCache) -> VelocityCache:
    """Velocities: qdot, body spatial velocities and velocity-product accelerations."""
    topo = model.topology(state.use_euler_angles)
    vJ_m = _tree.sum_moving_dofs(topo, pos.cdof * state.u[:, None])  # (nm, 6)
    V = _tree.outward_from_moving(topo, vJ_m)
    return VelocityCache(
        qdot=calc_qdot(model, state).astype(V.dtype),
        V_O=V,
        vJ=_tree.moving_to_bodies(topo, vJ_m),
        uerr=jnp.zeros(0, V.dtype),
    )


def generalized_bias(
    model: Model,
    state: State,
    pos: PositionCache,
    vel: VelocityCache,
    a_bias: jax.Array,
    moving_forces_O: jax.Array,
    mobility_forces: jax.Array,
    a_extra: jax.Array | None = None,
) -> jax.Array:
    """``C(q,u) - applied``: residual of ``M udot + C = tau`` at ``udot = 0`` (RNEA).

    ``a_bias`` are the velocity-product accelerations (``velocity_bias``); the applied body
    forces come about Ground's origin on the moving rows (``AppliedForces.moving_O``);
    ``a_extra`` (nb, 6) adds known body accelerations (for inverse dynamics).
    """
    topo = model.topology(state.use_euler_angles)
    a = a_bias if a_extra is None else a_bias + a_extra
    # On the moving bodies, each with its welded descendants' inertias and forces folded in
    # (they share its spatial velocity and acceleration about Ground's origin).
    inertia = pos.moving_inertia_O
    V, a = _tree.moving_rows(topo, vel.V_O), _tree.moving_rows(topo, a)
    f = sp.inertia_times(inertia, a) + _gyroscopic(inertia, V) - moving_forces_O
    C = jnp.einsum("di,di->d", pos.cdof, _tree.inward_to_dofs(topo, f))
    return C - mobility_forces


def realize_dynamics(model: Model, state: State, pos: PositionCache, vel: VelocityCache) -> DynamicsCache:
    """Forces from every force subsystem, and the generalized bias forces."""
    forces = calc_forces(model, state)
    aJ = velocity_products(model, state, pos, vel)
    a_bias = _tree.outward_from_moving(model.topology(state.use_euler_angles), aJ)
    bias = generalized_bias(model, state, pos, vel, a_bias, forces.moving_O, forces.mobility)
    return DynamicsCache(
        body_forces=forces.body,
        mobility_forces=forces.mobility,
        bias=bias,
        a_bias=a_bias,
        velocity_products=aJ,
        moving_forces=forces.moving_O,
    )


def mass_matrix(model: Model, state: State, pos: PositionCache) -> jax.Array:
    """Composite-rigid-body mass matrix ``M(q)`` (nu, nu), symmetric positive definite."""
    return symmetric_from_upper(mass_matrix_upper(model, state, pos))


def symmetric_from_upper(U: jax.Array) -> jax.Array:
    """The symmetric matrix ``U + U^T - diag(U)`` whose upper triangle is ``U``."""
    return U + U.T - jnp.diag(jnp.diagonal(U))


def mass_matrix_upper(model: Model, state: State, pos: PositionCache) -> jax.Array:
    """The upper triangle ``U`` of the mass matrix (zeros below the diagonal; ``M = U + U^T -
    diag(U)``), what ``solve_mass_matrix_upper`` factors.

    It is made as ``cdof F^T`` (``F = Ic cdof``, row by row the transpose of the lower
    triangle), so in memory ``U`` is ``M``'s lower triangle in column-major order, the
    order LAPACK's Cholesky reads: no symmetrising pass and no layout copy before the
    factorisation (at B = 1024 they cost more than the product itself)."""
    topo = model.topology(state.use_euler_angles)
    return _mass_matrix_upper(topo, pos.cdof, pos.moving_inertia_O, _armature(topo, state, pos.cdof.dtype))


def _armature(topo, state: State, dtype) -> jax.Array:
    return jnp.broadcast_to(jnp.asarray(state.instance["matter"]["armature"], dtype), (topo.nu,))


def _mass_matrix_upper(topo, cdof: jax.Array, inertia: jax.Array, armature: jax.Array) -> jax.Array:
    if topo.nu == 0:
        return jnp.zeros((0, 0), cdof.dtype)
    crb = _tree.inward_to_dofs(topo, inertia)
    F = sp.inertia_times(crb, cdof)  # F_k = Ic_{b(k)} cdof_k, welded bodies folded in
    GT = cdof @ F.T  # GT[j, i] = cdof_j . Ic_{b(i)} cdof_i
    return jnp.where(np.asarray(topo.mass_matrix_mask).T, GT, 0.0) + jnp.diag(armature)


# Batches of at least this many states solve by the articulated-body recursion
# (``forward_solve``); fewer, and single states, by the dense Cholesky.
ARTICULATED_MIN_BATCH = 4


def forward_solve(
    model: Model,
    state: State,
    pos: PositionCache,
    rhs: jax.Array,
    recursion: tuple[jax.Array, jax.Array, jax.Array] | None = None,
) -> jax.Array:
    """``M^-1 rhs`` (rhs a vector (nu,) or a matrix (nu, k)) for forward dynamics and the
    matter operators that solve with ``M``.

    Which solve depends on the batch, known to a ``custom_vmap`` rule: under ``vmap`` of at
    least ``ARTICULATED_MIN_BATCH`` states, the articulated-body recursion in Ground's frame
    (``simjax.tree.articulated``), linear in the number of bodies; a single state (or a
    small batch) by a dense Cholesky of the composite-rigid-body ``M``, a few large kernels
    where the recursion is many small ones (``benchmarks/HISTORY.md``). Derivatives go
    through the dense Cholesky's rule (``x' = M^-1 (rhs' - M' x)``, ``M`` from
    ``mass_matrix_upper``) either way: the same numbers to round-off, and a derivative
    program as compact as a dense solve's.

    ``recursion``: forward dynamics' right-hand side ``rhs = tau - C`` once more, as the
    recursion takes it whole, ``(tau, bias_forces, velocity_products)``
    (``articulated.solve``): batched, the recursion then folds the bias forces in itself
    and ``rhs``, with the RNEA's passes that made it, is not computed."""
    topo = model.topology(state.use_euler_angles)
    if topo.nu == 0:
        return rhs
    armature = _armature(topo, state, rhs.dtype)
    extra = () if recursion is None else tuple(recursion)

    def dense(cdof, inertia, armature, rhs, *extra):
        return _cholesky_solve_upper(_mass_matrix_upper(topo, cdof, inertia, armature), rhs)

    @jax.custom_batching.custom_vmap
    def primal(cdof, inertia, armature, rhs, *extra):
        return dense(cdof, inertia, armature, rhs)

    @primal.def_vmap
    def _batched(axis_size, in_batched, *args):
        axes = tuple(0 if b else None for b in in_batched)
        if axis_size < ARTICULATED_MIN_BATCH:
            return jax.vmap(dense, in_axes=axes)(*args), True
        # In chunks of ``sj.vmap``'s size on a CPU, so a plain ``jax.vmap`` over a large
        # batch keeps the recursion's working set in cache as ``sj.vmap`` does.
        if extra:
            one = lambda cdof, inertia, arm, _, *r: _articulated.solve(topo, cdof, inertia, arm, *r)
        else:
            one = lambda *a: _articulated.solve(topo, *a)
        return _batching.vmap(one, in_axes=axes)(*args), True

    @jax.custom_jvp
    def solve(cdof, inertia, armature, rhs, *extra):
        # ``0 * rhs +``: under ``vmap`` the unrolled solve's result can carry its batch
        # axis elsewhere than the rule's, which reverse mode of a batched custom_jvp then
        # mis-broadcasts (jax 0.10); starting from rhs gives it rhs's batch axis. Fused away.
        # Not with the recursion's terms: it would keep the RNEA that makes rhs in the
        # program (XLA keeps ``0 * x``); their batched gradients are tested
        # (``tests/test_articulated.py``).
        start = 0.0 if extra else 0.0 * rhs
        return start + primal(cdof, inertia, armature, rhs, *extra)

    @solve.defjvp
    def _jvp(primals, tangents):
        return jax.jvp(dense, primals[:4], tangents[:4])

    return solve(pos.cdof, pos.moving_inertia_O, armature, rhs, *extra)


def solve_mass_matrix(M: jax.Array, rhs: jax.Array) -> jax.Array:
    """``M^-1 rhs`` by Cholesky (M is symmetric positive definite).

    Derivatives (a custom JVP): ``x' = M^-1 (rhs' - M' x)`` with the primal's factor, so
    neither pass differentiates the factorisation."""
    if M.shape[0] == 0:
        return rhs
    return _cholesky_solve(M, rhs)


def solve_mass_matrix_upper(U: jax.Array, rhs: jax.Array) -> jax.Array:
    """``M^-1 rhs`` from ``M``'s upper triangle ``U`` (``mass_matrix_upper``), by Cholesky;
    derivatives as ``solve_mass_matrix``'s."""
    if U.shape[0] == 0:
        return rhs
    return _cholesky_solve_upper(U, rhs)


def cholesky_lower(M: jax.Array) -> jax.Array:
    """The Cholesky factor ``L`` (``M = L L^T``) of a symmetric positive definite ``M`` from
    its lower triangle (NaN where ``M`` is not positive definite). Unlike
    ``jnp.linalg.cholesky`` it does not average ``M`` with its transpose first (one kernel
    less): for matrices symmetric by construction (the mass matrix, ``Y^T Y``)."""
    return jax.lax.linalg.cholesky(M, symmetrize_input=False)


def solve_lower(L: jax.Array, B: jax.Array, transpose: bool = False) -> jax.Array:
    """``L^-1 B`` (``L^-T B`` with ``transpose``) for a lower-triangular ``L``; ``B`` a vector
    or a matrix. ``lax.linalg.triangular_solve`` itself: ``jax.scipy.linalg``'s wrappers
    trace and lower a nested ``jit`` each, which costs a constrained model ~0.1 s of its
    first compile."""
    X = jax.lax.linalg.triangular_solve(
        L, B[:, None] if B.ndim == 1 else B, left_side=True, lower=True, transpose_a=transpose
    )
    return X[:, 0] if B.ndim == 1 else X


def cho_solve_lower(L: jax.Array, B: jax.Array) -> jax.Array:
    """``(L L^T)^-1 B``: two triangular solves (``jax.scipy.linalg.cho_solve`` without its
    wrapper)."""
    return solve_lower(L, solve_lower(L, B), transpose=True)


@jax.custom_jvp
def _cholesky_solve(M: jax.Array, rhs: jax.Array) -> jax.Array:
    return cho_solve_lower(cholesky_lower(M), rhs)


@_cholesky_solve.defjvp
def _cholesky_solve_jvp(primals, tangents):
    M, rhs = primals
    dM, drhs = tangents
    L = cholesky_lower(M)
    x = cho_solve_lower(L, rhs)
    return x, cho_solve_lower(L, drhs - dM @ x)


@jax.custom_jvp
def _cholesky_solve_upper(U: jax.Array, rhs: jax.Array) -> jax.Array:
    return cho_solve_lower(cholesky_lower(U.T), rhs)


@_cholesky_solve_upper.defjvp
def _cholesky_solve_upper_jvp(primals, tangents):
    U, rhs = primals
    dU, drhs = tangents
    # The factor of the whole symmetric M (the same numbers as the primal's): differentiated
    # at second order, lax.linalg.cholesky's rule takes the tangent of a symmetric matrix.
    L = cholesky_lower(symmetric_from_upper(U))
    x = cho_solve_lower(L, rhs)
    dd = jnp.diagonal(dU)
    dMx = dU @ x + dU.T @ x - (dd[:, None] if x.ndim == 2 else dd) * x  # dM = dU + dU^T - diag(dU)
    return x, cho_solve_lower(L, drhs - dMx)


def accelerations_from_udot(
    model: Model, state: State, pos: PositionCache, a_bias: jax.Array, udot: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Body spatial accelerations (about Ground's origin) and qdotdot for a given udot."""
    topo = model.topology(state.use_euler_angles)
    aJ = _tree.sum_moving_dofs(topo, pos.cdof * udot[:, None])
    A = a_bias + _tree.outward_from_moving(topo, aJ)
    qdd = qdotdot(model, state, udot)
    return A, qdd


def qdotdot(model: Model, state: State, udot: jax.Array) -> jax.Array:
    """``qdotdot = Ndot u + N udot``, per kind group with autodiff for Ndot."""
    topo = model.topology(state.use_euler_angles)
    q, u = state.q, state.u
    dt = q.dtype

    def one(mob, qq, uu, ud, par):
        Nq = mob.N(qq, par)
        if Nq is None:
            return ud
        qd = Nq @ uu
        _, dN = jax.jvp(lambda x: mob.N(x, par), (qq,), (qd,))
        return dN @ uu + Nq @ ud

    inputs = lambda g: (
        sp.take_rows(q, g.q_idx),
        sp.take_rows(u, g.u_idx),
        sp.take_rows(udot, g.u_idx),
        joint_inputs(state, g, "params")[0],
    )
    parts = [(g.q_idx, r) for g, r in map_kinds(topo, one, inputs, skip=no_q)]
    return place(topo.nq, parts, jnp.zeros((), dt))


def frame_jacobians(
    model: Model, state: State, bodies: np.ndarray, points: jax.Array | None = None
) -> jax.Array:
    """(k, 6, nu) Jacobians of ``[w_B; v of a point]`` in Ground of the given bodies:
    ``V = J u``. ``points`` (k, 3) are Ground-frame locations moving with each body (default:
    the body origins). Needs Position."""
    pc = state.position_cache
    topo = model.topology(state.use_euler_angles)
    r = pc.p_GB[bodies] if points is None else points
    D = jnp.asarray(topo.dof_ancestor[bodies], pc.p_GB.dtype)  # (k, nu): dof moves the body
    w = pc.cdof[None, :, :3]
    v = pc.cdof[None, :, 3:] + sp.cross(w, r[:, None, :])
    J = jnp.concatenate([w * D[..., None], v * D[..., None]], axis=-1)  # (k, nu, 6)
    return jnp.swapaxes(J, 1, 2)


def normalize_quaternions(model: Model, state: State, q: jax.Array) -> jax.Array:
    """``q`` with every quaternion scaled to unit length (a zero quaternion is left as is,
    with finite gradients)."""
    qs = np.asarray(model.topology(state.use_euler_angles).quaternion_slots)
    if not len(qs):
        return q
    return q.at[qs.reshape(-1)].set(sp.safe_normalize(q[qs]).reshape(-1))
