"""The stage driver: Position -> Velocity -> Dynamics -> Acceleration, as pure functions.

``realize(model, state, stage)`` runs each stage above ``state.stage`` in order, each one a
named function of the State and the caches below it (:mod:`simjax.dynamics.stages` for the
tree, :mod:`simjax.constraints.kernels` for constraint errors, G and multipliers, user
subsystems' hooks last). It is compiled once per (Model, State structure, stage) and
inlines inside a user's ``jit``. A profile reads like Simbody's stages: every stage runs
under ``jax.named_scope("realize_<stage>")``.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _batching
from .._stage import Stage
from ..constraints import kernels as cn
from ..constraints import soft
from ..dynamics import stages as rz
from ..dynamics.forces import calc_zdot
from ..model.context import Context
from ..model.model import Model, classical_acceleration
from ..model.state import AccelerationCache, Cache, DynamicsCache, PositionCache, State, VelocityCache


def realize(model: Model, state: State, stage: Stage) -> State:
    """Realize ``state`` to ``stage`` (pure; see ``MultibodySystem.realize``).

    Compiled once per (Model, State structure, stage); inside a user's ``jit`` it inlines.
    Outside ``jit``, inconsistent constraints (no accelerations, or no velocities, satisfy
    them all) raise."""
    stage = Stage(stage)
    if stage > Stage.REPORT:
        raise ValueError("realize: the highest stage is Stage.REPORT")
    if stage <= state.stage:
        return state
    # The compiled function is keyed by (Model, State structure, stage): the State's owner
    # (system uid, topology version) is left out of that key so that a second, identical
    # System reuses it; it is restored on the result, and visible while tracing.
    # Only the cache comes back from the compiled program (realization changes nothing
    # else): returning the whole State made XLA copy every unchanged leaf into new buffers.
    token = _OWNER.set((state.system_uid, state.topology_version))
    try:
        plain = state.replace(system_uid=0, topology_version=0)
        cache = _realize_cache(model, plain, stage, _batching.chunking())
    finally:
        _OWNER.reset(token)
    out = state.with_stage(stage, cache)
    if stage >= Stage.ACCELERATION and state.stage < Stage.ACCELERATION and model.constraint_records:
        _check_consistent(out, model)
    return out


# (system_uid, topology_version) of the State being realized, for code traced inside
# ``_realize_cache`` (a user hook may pass ``ctx.state`` to the System, which checks them).
_OWNER: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar("simjax_state_owner")


# A plain ``jax.jit`` with the Model and the stage static (the Model hashes its structure,
# cached): its dispatch runs in JAX's C++ fast path, where ``eqx.filter_jit`` partitioned
# and recombined the State in Python on every call. Every leaf of a State is an array, so
# nothing needs filtering.
@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def _realize_cache(model: Model, state: State, stage: Stage, chunking: bool) -> Cache:
    uid, version = _OWNER.get((state.system_uid, state.topology_version))
    leaves, treedef = jax.tree.flatten(state.replace(system_uid=uid, topology_version=version))

    # Under a plain ``jax.vmap`` of more than ``sj.vmap``'s chunk of States on a single CPU
    # device, the realization runs in chunks (``_batching.chunked_jvp``; one ``vmap``
    # elsewhere), its derivatives unchanged: the working set stays in cache.
    # ``chunking`` (static) is whether it does: not inside ``_batching.unchunked``.
    def cache_of(*leaves: jax.Array) -> Cache:
        return realize_eager(model, jax.tree.unflatten(treedef, leaves), stage).cache

    return _batching.chunked_jvp(cache_of)(*leaves)


def with_cache_dependence(model: Model, state: State) -> State:
    """``state`` whose realized cache carries its derivatives with respect to the State's
    variables and parameters (q, u, z, t, Instance parameters, discrete variables).

    A State realized outside a differentiated function holds its cache entries as plain
    values: differentiated as they stand, a function reading them would see them constant in
    q, u and the masses (and put the derivative on the cache instead). Through this, its
    value is the cache as it is (nothing is computed again) and its derivative is that of
    the realization from the State's variables, recomputed only when differentiated. So
    any function of a State has the same derivative whatever stage the State was realized
    to. A no-op where nothing is traced or nothing is cached above Stage.MODEL.
    """
    if state.stage <= Stage.MODEL or not _is_traced(state):
        return state
    return state.with_stage(state.stage, _dependent_cache(model, state))


def _is_traced(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def _unrealized(state: State) -> State:
    """``state`` with its cache above Stage.MODEL dropped (its variables and parameters kept)."""
    stage = Stage(min(int(state.stage), int(Stage.MODEL)))
    return state.with_stage(stage, state.cache.up_to(stage))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _dependent_cache(model: Model, state: State) -> Cache:
    return state.cache


@_dependent_cache.defjvp
def _dependent_cache_jvp(model: Model, primals: tuple[State], tangents: tuple[State]) -> tuple[Cache, Cache]:
    # Realized again from the variables, primal included: a second derivative then sees the
    # primal's dependence too.
    (state,), (dstate,) = primals, tangents
    return jax.jvp(
        lambda s: realize_eager(model, s, state.stage).cache, (_unrealized(state),), (_unrealized(dstate),)
    )


def realize_eager(model: Model, state: State, stage: Stage) -> State:
    """``realize`` without the outer ``jit`` (for code that is traced already)."""
    cur = state
    if cur.stage < Stage.MODEL:
        cur = cur.with_stage(Stage.MODEL, cur.cache)
    for st in range(int(cur.stage) + 1, int(stage) + 1):
        with jax.named_scope(f"realize_{Stage(st).name.lower()}"):
            cur = _realize_one(model, cur, Stage(st))
    return cur


def realize_acceleration(
    model: Model, state: State, pos: PositionCache, vel: VelocityCache, dyn: DynamicsCache
) -> AccelerationCache:
    """Forward dynamics: ``M udot + G^T lambda = -bias``, ``G udot = b``; body
    accelerations and qdotdot."""
    # (named scopes inside the stage, so a profile splits it)
    mp, mv, ma = model.constraint_counts(state.use_euler_angles)
    extra: dict[str, jax.Array] = {}
    if mp + mv + ma == 0:
        with jax.named_scope("solve"):
            # Batched, the articulated-body recursion takes the bias terms whole (and -bias,
            # with the RNEA passes that made it, goes unused); one state solves -bias.
            terms = (dyn.mobility_forces, rz.bias_forces(model, state, pos, vel, dyn), dyn.velocity_products)
            udot = rz.forward_solve(model, state, pos, -dyn.bias, terms)
        lam = err = vres = jnp.zeros(0, udot.dtype)
        if model.mujoco is not None:
            # MuJoCo's soft contact and limit rows: its primal problem from the
            # unconstrained accelerations (its qacc_smooth).
            with jax.named_scope("mujoco_constraints"):
                M = rz.mass_matrix(model, state, pos)
                sol = soft.model_solve(model, state, pos, M, udot, (dyn.a_bias, vel.V_O))
            udot = sol.qacc
            extra = {
                "efc_force": sol.force,
                "solver_status": jnp.stack([sol.iterations, sol.converged.astype(jnp.int32)]),
            }
    elif model.mujoco is not None:
        raise NotImplementedError(
            "MuJoCo's soft constraint solve (contact=True) with simjax's exact constraints "
            "(MJCF equalities) is not supported yet: disable the constraints or load without contact"
        )
    else:
        with jax.named_scope("mass_matrix"):
            M = rz.mass_matrix(model, state, pos)
        A0 = classical_acceleration(dyn.a_bias, vel.V_O, pos.p_GB)
        with jax.named_scope("constraint_rows"):
            G, b = cn.g_and_b(model, state, A0)
        with jax.named_scope("solve"):
            udot, lam, err, vres = cn.solve_constrained(M, -dyn.bias, G, b, vel.uerr[: mp + mv])
    with jax.named_scope("accelerations"):
        A, qdd = rz.accelerations_from_udot(model, state, pos, dyn.a_bias, udot)
    return AccelerationCache(
        udot=udot,
        qdotdot=qdd,
        A_O=A,
        zdot=jnp.zeros_like(state.z),
        udoterr=err,
        multipliers=lam,
        uerr_residual=vres,
        **extra,
    )


def _realize_one(model: Model, state: State, st: Stage) -> State:
    cache = state.cache
    if st == Stage.POSITION:
        pos = rz.realize_position(model, state)
        if model.constraint_records:
            perr = cn.position_errors(model, state.with_stage(st, cache.replace(position=pos)))
            pos = pos.replace(qerr=jnp.concatenate([perr, pos.qerr]))
        cache = cache.replace(position=pos)
    elif st == Stage.VELOCITY:
        vel = rz.realize_velocity(model, state, state.position_cache)
        if model.constraint_records:
            uerr = cn.velocity_errors(model, state.with_stage(st, cache.replace(velocity=vel)))
            vel = vel.replace(uerr=uerr)
        cache = cache.replace(velocity=vel)
    elif st == Stage.DYNAMICS:
        cache = cache.replace(
            dynamics=rz.realize_dynamics(model, state, state.position_cache, state.velocity_cache),
        )
    elif st == Stage.ACCELERATION:
        acc = realize_acceleration(
            model, state, state.position_cache, state.velocity_cache, state.dynamics_cache
        )
        # zdot needs the accelerations realized (a subsystem may read them).
        tmp = state.with_stage(st, cache.replace(acceleration=acc))
        zdot = calc_zdot(model, tmp)
        cache = cache.replace(acceleration=acc.replace(zdot=zdot))
    out = state.with_stage(st, cache)
    # User subsystems: their realize hooks and non-lazy cache entries of this stage.
    entries: dict[str, dict[str, Any]] = {}
    for sub in model.subsystems:
        vals = sub._realize_stage(Context(model, out, sub.name), st)
        if vals:
            entries[sub.name] = vals
    if entries:
        subs = dict(out.cache.subsystems)
        subs[int(st)] = entries
        out = out.with_stage(st, out.cache.replace(subsystems=subs))
    return out


_INCONSISTENT = (
    "the constraints are inconsistent: no accelerations satisfy them all (acceleration "
    "error {err} after the least-squares solve). Two constraints demand different motions of "
    "the same coordinates; disable or remove one"
)


_INCONSISTENT_VELOCITY = (
    "the velocity constraints are inconsistent: no velocities satisfy them all (a velocity "
    "error of {err} remains whatever u is{names}). Two constraints demand different speeds "
    "of the same motion (two ConstantSpeeds on one coordinate, a speed demanded of a "
    "coordinate a holonomic constraint holds); disable or remove one"
)


def _consistency_tol(dtype) -> float:
    return 1e-6 if dtype == np.float64 else 1e-2


def _velocity_scale(state: State, xp: Any = jnp) -> Any:
    """``1 + max |u| + max |uerr|``: what a velocity residual is measured against."""
    uerr = state.velocity_cache.uerr
    big = xp.maximum(xp.max(xp.abs(state.u), initial=0.0), xp.max(xp.abs(uerr), initial=0.0))
    return 1.0 + big


def _check_consistent(state: State, model: Model | None = None) -> None:
    """Raise for inconsistent constraints when the result is concrete (outside jit)."""
    ac = state.acceleration_cache
    if isinstance(ac.udoterr, jax.core.Tracer) or ac.udoterr.size == 0:
        return
    err = np.asarray(ac.udoterr)
    if err.ndim != 1:
        return
    scale = 1.0 + float(np.max(np.abs(np.asarray(ac.udot)), initial=0.0))
    worst = int(np.argmax(np.abs(err)))
    if not np.isfinite(err).all() or abs(err[worst]) > _consistency_tol(err.dtype) * scale:
        raise ValueError(_INCONSISTENT.format(err=f"{err[worst]:.3g} in row {worst}"))
    res = np.asarray(ac.uerr_residual)
    if res.size == 0:
        return
    tol = _consistency_tol(res.dtype) * float(_velocity_scale(state, np))
    if np.isfinite(res).all() and np.max(np.abs(res)) <= tol:
        return
    worst = int(np.argmax(np.abs(res)))
    names = ""
    if model is not None:
        mp, _, _ = model.constraint_counts(state.use_euler_angles)
        bad = set(np.flatnonzero(~(np.abs(res) <= tol)).tolist())
        hit = [
            model.constraint_records[c.index].name
            for c in model.constraints(state.use_euler_angles)
            if bad & set(np.concatenate([c.rows[0], mp + c.rows[1]]).tolist())
        ]
        names = f"; rows of {', '.join(hit)}" if hit else ""
    raise ValueError(_INCONSISTENT_VELOCITY.format(err=f"{res[worst]:.3g} in row {worst}", names=names))


def consistent_or_error(state: State) -> State:
    """``state`` (realized to Acceleration), through ``equinox.error_if`` when its results
    are traced: under ``jit``/``vmap``/``grad`` inconsistent constraints (no accelerations,
    or no velocities, satisfy them all) raise at run time
    (a ``RuntimeError``, or JAX's ``ValueError`` on some calls; under ``vmap`` if any
    member's are) instead of returning the
    least-squares accelerations. A no-op where the eager check already ran."""
    ac = state.acceleration_cache
    if not isinstance(ac.udoterr, jax.core.Tracer) or ac.udoterr.shape[-1] == 0:
        return state
    err = jnp.max(jnp.abs(ac.udoterr))
    scale = 1.0 + jnp.max(jnp.abs(ac.udot), initial=0.0)
    bad = ~jnp.isfinite(err) | (err > _consistency_tol(ac.udoterr.dtype) * scale)
    msg = _INCONSISTENT.format(err="above tolerance") + " (outside jit the error names the row)"
    state = eqx.error_if(state, bad, msg)
    if ac.uerr_residual.shape[-1] == 0:
        return state
    res = jnp.max(jnp.abs(ac.uerr_residual))
    bad = ~jnp.isfinite(res) | (res > _consistency_tol(ac.uerr_residual.dtype) * _velocity_scale(state))
    msg = _INCONSISTENT_VELOCITY.format(err="above tolerance", names="")
    return eqx.error_if(state, bad, msg + " (outside jit the error names the constraints)")
