"""The State: one immutable pytree holding every variable and the realization cache.

Setting a variable returns a new State whose stage has fallen back exactly as Simbody's
invalidation rules say (q -> Time, u -> Position, z -> Velocity, t -> Instance, an
Instance parameter -> Model, a discrete variable -> the stage below its own) and whose
cache above that stage is dropped. Reading a cache entry above the realized stage is a
``StageError`` raised at trace time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _spatial as sp
from .._stage import Stage


class _Fields(eqx.Module):
    """A frozen record whose ``replace`` copies it with fields replaced, without the Module
    constructor's checks (fast in Python loops)."""

    if not TYPE_CHECKING:
        # Plain attribute lookup: ``eqx.Module``'s own wraps every method it returns in a
        # bound-method Module, whose constructor flattens the whole record (tens of
        # microseconds per ``state.with_q`` or ``state.udot`` in a user's Python loop).
        __getattribute__ = object.__getattribute__

    def replace(self, **changes: Any) -> Self:
        """A copy with the named fields replaced as given: no check, no invalidation. The
        realization driver and solvers use it to build what they return, keeping stage and
        cache consistent themselves; users change a State's variables with its ``with_*``
        methods."""
        return _replace(self, **changes)


class StageError(RuntimeError):
    """A cache entry was read from a State not realized far enough."""


class PositionCache(_Fields):
    """Position-stage results (Ground frame, about Ground's origin where spatial).

    Attributes:
        R_GB: Body orientations (nb, 3, 3).
        p_GB: Body origin locations (nb, 3).
        R_PB: Orientation of each body in its parent (nb, 3, 3).
        p_PB: Origin of each body in its parent (nb, 3).
        S_B: Motion subspace of each dof in its own body frame, at the body origin (nu, 6).
        cdof: Motion subspace of each dof in Ground, about Ground's origin (nu, 6).
        inertia_O: Spatial inertia of each body in Ground, about Ground's origin, as its
            ten dynamic parameters ``[m, m c, Jxx, Jxy, Jyy, Jxz, Jyz, Jzz]`` (nb, 10);
            ``I_O`` gives the 6x6 matrices.
        com_G: Mass-center locations in Ground (nb, 3).
        moving_R_GB, moving_p_GB: The poses of Ground and the bodies with mobilities
            (``Topology.moving``), (nm, 3, 3) and (nm, 3): what the dynamics passes read.
        moving_inertia_O: Their spatial inertias as ``inertia_O``, each with its welded
            descendants' folded in (bodies that move with it), (nm, 10).
        com_M: Each body's mass center in the frame of its moving ancestor
            (``Topology.moving_row``; its own frame for a body that moves), (nb, 3): fixed
            by the model, so forces on welded bodies fold without their Ground poses.
        qerr: Position errors: the holonomic constraint errors (mp,) then one per
            quaternion (its norm minus one, Simbody's), (mp + n_quat,).
    """

    R_GB: Float[Array, "nb 3 3"]
    p_GB: Float[Array, "nb 3"]
    R_PB: Float[Array, "nb 3 3"]
    p_PB: Float[Array, "nb 3"]
    S_B: Float[Array, "nu 6"]
    cdof: Float[Array, "nu 6"]
    inertia_O: Float[Array, "nb 10"]
    com_G: Float[Array, "nb 3"]
    moving_R_GB: Float[Array, "nm 3 3"]
    moving_p_GB: Float[Array, "nm 3"]
    moving_inertia_O: Float[Array, "nm 10"]
    com_M: Float[Array, "nb 3"]
    qerr: Float[Array, " nqerr"]

    @property
    def I_O(self) -> Float[Array, "nb 6 6"]:
        """Spatial inertia of each body in Ground about Ground's origin, 6x6 (nb, 6, 6)."""
        return sp.inertia_matrix(self.inertia_O)


class VelocityCache(_Fields):
    """Velocity-stage results.

    Attributes:
        qdot: ``N(q) u`` (nq,).
        V_O: Body spatial velocities in Ground about Ground's origin (nb, 6).
        vJ: Velocity across each body's mobilizer, same frame (nb, 6).
        uerr: Velocity errors: time derivatives of the holonomic errors (mp,) then the
            nonholonomic errors (mv,).

    The velocity-product accelerations are not computed here (so kinematics, energy and
    assembly don't pay for them); Dynamics caches them as ``DynamicsCache.a_bias``.
    """

    qdot: Float[Array, " nq"]
    V_O: Float[Array, "nb 6"]
    vJ: Float[Array, "nb 6"]
    uerr: Float[Array, " nuerr"]


class DynamicsCache(_Fields):
    """Dynamics-stage results.

    Attributes:
        body_forces: Applied body forces, ``[torque about body origin; force]`` in Ground
            (nb, 6), Simbody's convention.
        mobility_forces: Applied mobility forces (nu,).
        bias: ``C(q, u) - (applied forces mapped to u)``; ``M udot = -bias`` (nu,).
        a_bias: Body spatial accelerations at ``udot = 0`` (velocity products) in Ground
            about Ground's origin (nb, 6).
        velocity_products: Each moving body's velocity-product acceleration across its own
            mobilizer (Simbody's mobilizer Coriolis acceleration), about Ground's origin,
            on the moving tree's rows (nm, 6: Ground and the bodies with mobilities, as
            ``PositionCache.moving_inertia_O``); ``a_bias`` is their outward sum.
        moving_forces: The applied body forces about Ground's origin on the moving rows
            (nm, 6), each welded body's added into its moving ancestor's.
    """

    body_forces: Float[Array, "nb 6"]
    mobility_forces: Float[Array, " nu"]
    bias: Float[Array, " nu"]
    a_bias: Float[Array, "nb 6"]
    velocity_products: Float[Array, "nm 6"]
    moving_forces: Float[Array, "nm 6"]


class AccelerationCache(_Fields):
    """Acceleration-stage results.

    Attributes:
        udot: Generalized accelerations (nu,).
        qdotdot: ``Ndot u + N udot`` (nq,).
        A_O: Body spatial accelerations in Ground about Ground's origin (nb, 6).
        zdot: Derivatives of the auxiliary variables (nz,).
        udoterr: Acceleration errors ``G udot - b`` (mp + mv + ma,): zero to round-off
            after forward dynamics unless the constraints are inconsistent.
        multipliers: Lagrange multipliers ``lambda`` of ``M udot + G^T lambda = f``.
        uerr_residual: The part of the velocity errors ``uerr`` (mp + mv,) that no change
            of u removes (the least-squares residual of the velocity constraints, the same
            whatever u is): zero to round-off unless they are inconsistent, no velocities
            satisfying them all.
        efc_force: MuJoCo's constraint forces (its ``efc_force``) of a Model solved
            MuJoCo's way (``Model.mujoco``): the limit rows (lower, upper per limited
            joint) then the contact slots' rows; None otherwise.
        solver_status: ``[iterations, converged]`` of that Newton solve; None otherwise.
    """

    udot: Float[Array, " nu"]
    qdotdot: Float[Array, " nq"]
    A_O: Float[Array, "nb 6"]
    zdot: Float[Array, " nz"]
    udoterr: Float[Array, " m"]
    multipliers: Float[Array, " m"]
    uerr_residual: Float[Array, " mpv"]
    efc_force: Float[Array, " nefc"] | None = None
    solver_status: Int[Array, " 2"] | None = None


class Cache(_Fields):
    """Realization cache: built-in entries per stage plus custom subsystems' entries."""

    position: PositionCache | None = None
    velocity: VelocityCache | None = None
    dynamics: DynamicsCache | None = None
    acceleration: AccelerationCache | None = None
    # {stage_value: {subsystem: {entry: value}}} for user subsystems and cache entries.
    subsystems: dict[int, dict[str, dict[str, Any]]] = eqx.field(default_factory=dict)

    def up_to(self, stage: Stage) -> Cache:
        """The cache with every entry of a stage above ``stage`` dropped."""
        return _cache_up_to(self, stage)


class State(_Fields):
    """Every variable of a System, and what realization computed from them.

    Build one with ``system.realize_topology()``; change it with the ``with_*`` methods,
    which return a new State. Under ``jit``/``vmap``/``grad`` a State is one pytree: all
    its leaves are floating arrays.

    Attributes:
        t: Time.
        q: Generalized coordinates (nq,).
        u: Generalized speeds (nu,).
        z: Auxiliary continuous variables (nz,).
        instance: Instance-stage parameters, ``{subsystem: {name: array}}``.
        discrete: Discrete variables, ``{subsystem: {name: array}}``.
        cache: The realization cache.
        stage: The stage the State is realized to (static).
        topology_version: Version of the System topology this State belongs to (static).
        system_uid: Identity of the owning System (static).
        use_euler_angles: Model-stage option; Ball/Free-like mobilizers use Euler angles
            instead of quaternions (static: changing it changes nq).
    """

    t: Float[Array, ""]
    q: Float[Array, " nq"]
    u: Float[Array, " nu"]
    z: Float[Array, " nz"]
    instance: dict[str, dict[str, Any]]
    discrete: dict[str, dict[str, Any]]
    cache: Cache
    stage: Stage = eqx.field(static=True)
    topology_version: int = eqx.field(static=True)
    system_uid: int = eqx.field(static=True)
    use_euler_angles: bool = eqx.field(static=True, default=False)
    # Static per-variable stage of each discrete variable, to drop the right stages.
    discrete_stages: tuple[tuple[str, str, int], ...] = eqx.field(static=True, default=())

    # ------------------------------------------------------------------ invalidation
    def with_stage(self, stage: Stage, cache: Cache) -> State:
        """The State realized to ``stage``, ``cache`` holding what realization computed (the
        stage driver's result; no check that the cache matches the variables)."""
        return _replace(self, stage=stage, cache=cache)

    def _fall_to(self, stage: Stage, **changes: Any) -> State:
        # Top-level fields replaced directly (``_replace``), not with ``eqx.tree_at``:
        # this runs in users' Python loops, where flattening the State cost ~0.3 ms a call.
        new_stage = Stage(min(int(self.stage), int(stage)))
        return _replace(self, stage=new_stage, cache=_cache_up_to(self.cache, new_stage), **changes)

    def with_time(self, t: Any) -> State:
        """New State at time ``t``; the stage falls back to Instance. A concrete ``t`` must
        be a finite real number."""
        _check_real("t", t)
        if not isinstance(t, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(t))):
            raise ValueError(f"with_time: t must be finite, got {np.asarray(t)}")
        return self._fall_to(Stage.INSTANCE, t=jnp.asarray(t, dtype=self.t.dtype))

    def with_q(self, q: Any) -> State:
        """New State with coordinates ``q``; the stage falls back to Time."""
        q = _check_vec("q", q, self.q)
        return self._fall_to(Stage.TIME, q=q)

    def with_u(self, u: Any) -> State:
        """New State with speeds ``u``; the stage falls back to Position."""
        u = _check_vec("u", u, self.u)
        return self._fall_to(Stage.POSITION, u=u)

    def with_z(self, z: Any) -> State:
        """New State with auxiliary variables ``z``; the stage falls back to Velocity."""
        z = _check_vec("z", z, self.z)
        return self._fall_to(Stage.VELOCITY, z=z)

    def with_instance(self, subsystem: str, name: str, value: Any) -> State:
        """New State with one Instance-stage parameter changed; falls back to Model."""
        try:
            old = self.instance[subsystem][name]
        except KeyError:
            raise KeyError(
                f"State has no Instance variable {name!r} in subsystem {subsystem!r}; "
                f"known: { {k: sorted(v) for k, v in self.instance.items()} }"
            ) from None
        value = _check_like(f"Instance variable {subsystem}.{name}", value, old)
        inst = {k: dict(v) for k, v in self.instance.items()}
        inst[subsystem][name] = value
        return self._fall_to(Stage.MODEL, instance=inst)

    def with_discrete(self, subsystem: str, name: str, value: Any) -> State:
        """New State with a discrete variable changed; falls back below its stage."""
        stage = None
        for sub, nm, st in self.discrete_stages:
            if sub == subsystem and nm == name:
                stage = Stage(st)
        if stage is None:
            raise KeyError(
                f"State has no discrete variable {name!r} in subsystem {subsystem!r}; "
                f"known: {[(s, n) for s, n, _ in self.discrete_stages]}"
            )
        old = self.discrete[subsystem][name]
        value = _check_like(f"discrete variable {subsystem}.{name}", value, old)
        disc = {k: dict(v) for k, v in self.discrete.items()}
        disc[subsystem][name] = value
        return self._fall_to(stage.prev(), discrete=disc)

    # ------------------------------------------------------------------ cache reads
    def require(self, stage: Stage, what: str) -> None:
        """Raise ``StageError`` unless this State is realized to ``stage`` or later."""
        _require(self, stage, what)

    @property
    def position_cache(self) -> PositionCache:
        """Position-stage cache (raises ``StageError`` if not realized)."""
        _require(self, Stage.POSITION, "the position cache")
        return _entry(self.cache.position)

    @property
    def velocity_cache(self) -> VelocityCache:
        """Velocity-stage cache."""
        _require(self, Stage.VELOCITY, "the velocity cache")
        return _entry(self.cache.velocity)

    @property
    def dynamics_cache(self) -> DynamicsCache:
        """Dynamics-stage cache."""
        _require(self, Stage.DYNAMICS, "the dynamics cache")
        return _entry(self.cache.dynamics)

    @property
    def acceleration_cache(self) -> AccelerationCache:
        """Acceleration-stage cache."""
        _require(self, Stage.ACCELERATION, "the acceleration cache")
        return _entry(self.cache.acceleration)

    @property
    def qdot(self) -> Float[Array, " nq"]:
        """``N(q) u`` (needs Velocity)."""
        _require(self, Stage.VELOCITY, "state.qdot")
        return _entry(self.cache.velocity).qdot

    @property
    def udot(self) -> Float[Array, " nu"]:
        """Generalized accelerations (needs Acceleration)."""
        _require(self, Stage.ACCELERATION, "state.udot")
        return _entry(self.cache.acceleration).udot

    @property
    def qdotdot(self) -> Float[Array, " nq"]:
        """Second time derivative of q (needs Acceleration)."""
        _require(self, Stage.ACCELERATION, "state.qdotdot")
        return _entry(self.cache.acceleration).qdotdot

    @property
    def zdot(self) -> Float[Array, " nz"]:
        """Time derivative of z (needs Acceleration)."""
        _require(self, Stage.ACCELERATION, "state.zdot")
        return _entry(self.cache.acceleration).zdot

    @property
    def qerr(self) -> Float[Array, " nqerr"]:
        """Position errors: holonomic constraints then quaternion norms (Position)."""
        _require(self, Stage.POSITION, "state.qerr")
        return _entry(self.cache.position).qerr

    @property
    def uerr(self) -> Float[Array, " nuerr"]:
        """Velocity errors: holonomic derivatives then nonholonomic (Velocity)."""
        _require(self, Stage.VELOCITY, "state.uerr")
        return _entry(self.cache.velocity).uerr

    @property
    def udoterr(self) -> Float[Array, " m"]:
        """Acceleration errors ``G udot - b`` (Acceleration)."""
        _require(self, Stage.ACCELERATION, "state.udoterr")
        return _entry(self.cache.acceleration).udoterr

    @property
    def multipliers(self) -> Float[Array, " m"]:
        """Lagrange multipliers of every constraint equation (Acceleration)."""
        _require(self, Stage.ACCELERATION, "state.multipliers")
        return _entry(self.cache.acceleration).multipliers

    @property
    def nq(self) -> int:
        """Number of generalized coordinates."""
        return self.q.shape[-1]

    @property
    def nu(self) -> int:
        """Number of generalized speeds."""
        return self.u.shape[-1]

    @property
    def nz(self) -> int:
        """Number of auxiliary variables."""
        return self.z.shape[-1]

    def get_discrete_variable(self, subsystem: str, name: str) -> Any:
        """Value of a discrete variable."""
        return self.discrete[subsystem][name]


def _require(state: State, stage: Stage, what: str) -> None:
    # A function, not a method: on an ``eqx.Module`` every method lookup builds a bound-method
    # Module, which flattens the whole State (~40 us per property read of a realized State).
    if state.stage < stage:
        raise StageError(
            f"{what} needs the State realized to Stage.{stage.name}, but it is only at "
            f"Stage.{state.stage.name}; call system.realize(state, sj.Stage.{stage.name}) "
            "first (setting q, u, z, t or a parameter lowers the stage)"
        )


_E = TypeVar("_E")


def _entry(entry: _E | None) -> _E:
    assert entry is not None
    return entry


def _cache_up_to(cache: Cache, stage: Stage) -> Cache:
    """``Cache.up_to`` without the Module constructor's checks (a frozen dataclass copy)."""
    return _replace(
        cache,
        position=cache.position if stage >= Stage.POSITION else None,
        velocity=cache.velocity if stage >= Stage.VELOCITY else None,
        dynamics=cache.dynamics if stage >= Stage.DYNAMICS else None,
        acceleration=cache.acceleration if stage >= Stage.ACCELERATION else None,
        subsystems={k: v for k, v in cache.subsystems.items() if k <= stage},
    )


def _replace(module: Any, **kw: Any) -> Any:
    """A copy of a frozen dataclass (an ``eqx.Module``: State, Cache, the stage caches) with
    fields replaced, without the Module constructor's checks (fast in Python loops)."""
    new = object.__new__(type(module))
    for f in type(module).__dataclass_fields__:
        object.__setattr__(new, f, kw.get(f, getattr(module, f)))
    return new


def _check_real(what: str, x: Any) -> None:
    """Refuse complex and boolean values for a real variable (they would be cast silently)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = np.asarray(x).dtype
    if jnp.issubdtype(dtype, jnp.complexfloating) or jnp.issubdtype(dtype, jnp.bool_):
        raise TypeError(
            f"{what} must be real numbers, got {dtype} values; pass floats (for a complex "
            "array, its .real, if that is what you meant)"
        )


def _check_vec(name: str, x: Any, like: jax.Array) -> jax.Array:
    _check_real(name, x)
    x = jnp.asarray(x)
    if x.shape != like.shape:
        raise ValueError(
            f"{name} has shape {x.shape} but this State needs {like.shape} "
            f"(n{name} = {like.shape[-1] if like.ndim else 0}); under vmap pass one State's "
            f"{name} per mapped call"
        )
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(like.dtype)
    return x


def _check_like(what: str, x: Any, like: Any) -> Any:
    if jnp.issubdtype(jnp.asarray(like).dtype, jnp.floating):
        _check_real(what, x)
    x = jnp.asarray(x)
    like = jnp.asarray(like)
    if x.shape != like.shape:
        raise ValueError(f"{what} must have shape {like.shape}, got {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating) and jnp.issubdtype(like.dtype, jnp.floating):
        x = x.astype(like.dtype)
    return x
