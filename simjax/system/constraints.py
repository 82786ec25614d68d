"""Constraint handles (Simbody ``Constraint::*``): the builder side of every kind.

Each kind's equations are a kernel in :mod:`simjax.constraints.kinds` (custom couplings':
:mod:`simjax.constraints.couplings`); the numerics (kinematics seen by a constraint, error
derivatives by autodiff, G, b and the multipliers) live in
:mod:`simjax.constraints.kernels`. This module holds what users construct and query: each
handle registers its constraint with the matter subsystem, names its kernel, and gets and
sets its parameters and results in a State."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from .._functions import Function
from .._stage import Stage
from ..constraints import couplings as cpl
from ..constraints import kernels as cn
from ..constraints import kinds
from ..constraints import unilateral as uni
from ..constraints.kernels import CompiledConstraint, ConstraintContext, _common_ancestor
from ..forward.realize import realize
from ..model.model import ConstraintRecord, Identity, LimitRecord
from ..model.state import State
from ._compiled import reads_cache
from .bodies import MobilizedBody
from .couplings import Coupling
from .matter import SimbodyMatterSubsystem


class Constraint:
    """Base of every constraint; construct a kind, e.g. ``Constraint.Ball(b1, p1, b2, p2)``.

    A kind declares its bodies, mobilizers and Instance parameters and names its kernel
    (its equations, a ``simjax.constraints.kinds`` kernel); a user constraint is a
    ``Constraint.Custom``.
    """

    # the kinds (assigned at the end of this module); the aliases first, so that their
    # annotations name the module's classes, not the class attributes declared below
    ConstantDistance: ClassVar[type[Rod]]
    CoincidentPoints: ClassVar[type[Ball]]
    Spherical: ClassVar[type[Ball]]
    Ball: ClassVar[type[Ball]]
    Rod: ClassVar[type[Rod]]
    ConstantCoordinate: ClassVar[type[ConstantCoordinate]]
    ConstantSpeed: ClassVar[type[ConstantSpeed]]
    ConstantAcceleration: ClassVar[type[ConstantAcceleration]]
    CoordinateCoupler: ClassVar[type[CoordinateCoupler]]
    SpeedCoupler: ClassVar[type[SpeedCoupler]]
    PrescribedMotion: ClassVar[type[PrescribedMotion]]
    Custom: ClassVar[type[Custom]]
    PointInPlane: ClassVar[type[PointInPlane]]
    PointOnLine: ClassVar[type[PointOnLine]]
    ConstantAngle: ClassVar[type[ConstantAngle]]
    ConstantOrientation: ClassVar[type[ConstantOrientation]]
    Weld: ClassVar[type[Weld]]
    NoSlip1D: ClassVar[type[NoSlip1D]]
    CoordinateLimit: ClassVar[type[CoordinateLimit]]
    Coupling: ClassVar[type[CouplingJoint]]

    _param_names: tuple[str, ...] = ()

    def __init__(
        self,
        matter: Any,
        bodies: Sequence[MobilizedBody] = (),
        mobilizers: Sequence[MobilizedBody] = (),
        params: dict[str, Any] | None = None,
        *,
        kernel: kinds.ConstraintKernel,
    ):
        kind = type(self).__name__
        if not isinstance(matter, SimbodyMatterSubsystem):
            raise TypeError(
                f"Constraint.{kind}: expected the SimbodyMatterSubsystem, got {type(matter).__name__}"
            )
        for b in list(bodies) + list(mobilizers):
            if getattr(b, "_matter", None) is not matter:
                raise ValueError(f"Constraint.{kind}: {b!r} is not a mobilized body of this matter subsystem")
        for m in mobilizers:
            if m.is_ground():
                raise ValueError(f"Constraint.{kind}: Ground has no mobilizer to constrain")
        self._matter = matter
        self._bodies = tuple(bodies)
        self._mobilizers = tuple(mobilizers)
        self._defaults = {k: np.asarray(v, dtype=float) for k, v in (params or {}).items()}
        self._disabled_by_default = False
        self._kernel = kernel  # its equations (simjax.constraints.kinds)
        self.index = len(matter._constraints)
        try:  # evaluate the error functions once (shapes only) before adopting the constraint
            self._counts(tuple(m.mobilizer for m in mobilizers))
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 (re-raised with what the function sees)
            raise ValueError(
                f"Constraint.{kind}: evaluating an error function failed ({type(e).__name__}: {e}); it "
                f"sees {len(self._bodies)} bodies (0..{len(self._bodies) - 1}) and "
                f"{len(self._mobilizers)} mobilizers"
            ) from None
        matter._constraints.append(self)
        matter._system.invalidate_topology()

    def __repr__(self) -> str:
        return f"Constraint.{type(self).__name__}(index={self.index})"

    # --------------------------------------------------------------- the Model's record
    def _counts(self, mobs: tuple[Any, ...]) -> tuple[int, int, int]:
        """Numbers of holonomic, nonholonomic and acceleration-only equations (by shape)."""
        shapes = {k: v.shape for k, v in self._defaults.items()}
        return cn.equation_counts(self._kernel, len(self._bodies), mobs, shapes, repr(self))

    def _param_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return tuple(sorted((k, v.shape) for k, v in self._defaults.items()))

    def _record(self, slot: tuple[str, int]) -> ConstraintRecord:
        """What the Model holds of this constraint (``slot``: where its parameters are
        stacked)."""
        return ConstraintRecord(
            name=repr(self),
            kernel=self._kernel,
            bodies=tuple(b.index for b in self._bodies),
            mobilizers=tuple(m.index for m in self._mobilizers),
            param_shapes=self._param_shapes(),
            param_slot=slot,
            unilateral_rows=tuple(getattr(self, "_unilateral_rows", ())),
        )

    # --------------------------------------------------------------- enabling
    def set_disabled_by_default(self, disabled: bool) -> Constraint:
        """Whether the constraint starts disabled (a topological change)."""
        self._disabled_by_default = bool(disabled)
        self._matter._system.invalidate_topology()
        return self

    def is_disabled_by_default(self) -> bool:
        """Whether the constraint is disabled in the default State."""
        return self._disabled_by_default

    def disable(self, state: State) -> State:
        """New State with this constraint disabled (an Instance-stage change)."""
        return self._set_enabled(state, 0.0)

    def enable(self, state: State) -> State:
        """New State with this constraint enabled (not necessarily satisfied)."""
        return self._set_enabled(state, 1.0)

    def _set_enabled(self, state: State, value: float) -> State:
        self._check(state)
        en = state.instance["matter"]["constraint_enabled"]
        return state.with_instance("matter", "constraint_enabled", en.at[self.index].set(value))

    def is_disabled(self, state: State) -> jax.Array:
        """Whether the constraint is disabled in ``state`` (a boolean array under jit)."""
        self._check(state)
        return state.instance["matter"]["constraint_enabled"][self.index] == 0

    # --------------------------------------------------------------- parameters
    def _param_slot(self, state: State, name: str) -> tuple[str, int]:
        """The State key of parameter ``name`` (stacked over this kind's constraints) and
        this constraint's row in it."""
        compiled = self._check(state)
        if name not in self._defaults:
            raise KeyError(f"{self!r} has no parameter {name!r}; it has {sorted(self._defaults)}")
        prefix, row = self._matter._system.model_for(state).constraint_slots[compiled.index]
        return f"{prefix}.{name}", row

    def get_param(self, state: State, name: str) -> jax.Array:
        """An Instance-stage parameter of this constraint in ``state``."""
        key, row = self._param_slot(state, name)
        return state.instance["matter"][key][row]

    def set_param(self, state: State, name: str, value: Any) -> State:
        """New State with one of this constraint's parameters changed (Instance stage)."""
        key, row = self._param_slot(state, name)
        arr = state.instance["matter"][key]
        value = jnp.asarray(value, arr.dtype)
        if value.shape != arr.shape[1:]:
            raise ValueError(
                f"{self!r}.set_param({name!r}): expected a value of shape {arr.shape[1:]}, got {value.shape}"
            )
        return state.with_instance("matter", key, arr.at[row].set(value))

    # --------------------------------------------------------------- structure queries
    def _check(self, state: State) -> CompiledConstraint:
        model = self._matter._system.model_for(state)
        cs = model.constraints(state.use_euler_angles)
        if self.index >= len(cs) or cs[self.index].index != self.index:
            raise ValueError(f"{self!r} was added after realize_topology(); realize the topology again")
        return cs[self.index]

    def get_matter_subsystem(self) -> Any:
        """The matter subsystem holding this constraint."""
        return self._matter

    def get_constraint_index(self) -> int:
        """Index of this constraint in its matter subsystem."""
        return self.index

    def get_num_constrained_bodies(self) -> int:
        """Number of bodies this constraint acts on directly."""
        return len(self._bodies)

    def get_mobilized_body_from_constrained_body(self, i: int) -> MobilizedBody:
        """The mobilized body of constrained body ``i``."""
        return self._bodies[i]

    def get_ancestor_mobilized_body(self) -> MobilizedBody:
        """The outmost common ancestor of the constrained bodies (Ground if none)."""
        parent = tuple(-1 if m._parent is None else m._parent.index for m in self._matter._mobods)
        anc = _common_ancestor(parent, [b.index for b in self._bodies]) if self._bodies else 0
        return self._matter._mobods[anc]

    def get_num_constrained_mobilizers(self) -> int:
        """Number of mobilizers this constraint acts on directly."""
        return len(self._mobilizers)

    def get_mobilized_body_from_constrained_mobilizer(self, i: int) -> MobilizedBody:
        """The mobilized body of constrained mobilizer ``i``."""
        return self._mobilizers[i]

    def get_num_constrained_q(self, state: State) -> int:
        """Number of q of the constrained mobilizers."""
        return int(sum(len(i) for i in self._check(state).q_idx))

    def get_num_constrained_u(self, state: State) -> int:
        """Number of u of the constrained mobilizers."""
        return int(sum(len(i) for i in self._check(state).u_idx))

    def get_q_index_of_constrained_q(self, state: State, i: int) -> int:
        """Index in the global q of constrained q ``i``."""
        return int(np.concatenate((np.zeros(0, int),) + self._check(state).q_idx)[i])

    def get_u_index_of_constrained_u(self, state: State, i: int) -> int:
        """Index in the global u of constrained u ``i``."""
        return int(np.concatenate((np.zeros(0, int),) + self._check(state).u_idx)[i])

    def get_num_constraint_equations_in_use(self, state: State) -> tuple[int, int, int]:
        """``(mp, mv, ma)``; all zero when disabled (needs a concrete State)."""
        c = self._check(state)
        if bool(self.is_disabled(state)):
            return 0, 0, 0
        return c.mp, c.mv, c.ma

    def get_index_of_multipliers_in_use(self, state: State) -> tuple[int, int, int]:
        """Start of this constraint's holonomic, nonholonomic and acceleration-only rows in
        the global multiplier (and udotErr) vector."""
        c = self._check(state)
        model = self._matter._system.model_for(state)
        mp, mv, _ = model.constraint_counts(state.use_euler_angles)
        return (
            int(c.rows[0][0]) if c.mp else -1,
            mp + int(c.rows[1][0]) if c.mv else -1,
            (mp + mv + int(c.rows[2][0]) if c.ma else -1),
        )

    # --------------------------------------------------------------- errors, multipliers
    def _rows(self, state: State, level: int) -> np.ndarray:
        c = self._check(state)
        model = self._matter._system.model_for(state)
        mp, mv, _ = model.constraint_counts(state.use_euler_angles)
        if level == 0:
            return c.rows[0]
        if level == 1:
            return np.concatenate([c.rows[0], mp + c.rows[1]])
        return np.concatenate([c.rows[0], mp + c.rows[1], mp + mv + c.rows[2]])

    @reads_cache
    def get_position_errors_as_vector(self, state: State) -> jax.Array:
        """This constraint's position errors (needs Position)."""
        state.require(Stage.POSITION, f"{self!r}.get_position_errors")
        return state.position_cache.qerr[self._rows(state, 0)]

    @reads_cache
    def get_velocity_errors_as_vector(self, state: State) -> jax.Array:
        """This constraint's velocity errors ``[pverr; verr]`` (needs Velocity)."""
        state.require(Stage.VELOCITY, f"{self!r}.get_velocity_errors")
        return state.velocity_cache.uerr[self._rows(state, 1)]

    @reads_cache
    def get_acceleration_errors_as_vector(self, state: State) -> jax.Array:
        """This constraint's acceleration errors (needs Acceleration)."""
        state.require(Stage.ACCELERATION, f"{self!r}.get_acceleration_errors")
        return state.acceleration_cache.udoterr[self._rows(state, 2)]

    @reads_cache
    def get_multipliers_as_vector(self, state: State) -> jax.Array:
        """This constraint's Lagrange multipliers (needs Acceleration).

        Reading them from a disabled constraint is an error (they do not exist)."""
        state.require(Stage.ACCELERATION, f"{self!r}.get_multipliers")
        self._require_enabled(state, "multipliers")
        return state.acceleration_cache.multipliers[self._rows(state, 2)]

    get_position_errors = get_position_errors_as_vector
    get_velocity_errors = get_velocity_errors_as_vector
    get_acceleration_errors = get_acceleration_errors_as_vector
    get_multipliers = get_multipliers_as_vector

    def _require_enabled(self, state: State, what: str) -> None:
        dis = self.is_disabled(state)
        if not isinstance(dis, jax.core.Tracer) and bool(dis):
            raise ValueError(
                f"{self!r} is disabled in this State, so it has no {what}; enable it with "
                "constraint.enable(state) and realize again"
            )

    def calc_position_error_from_q(self, state: State, q: Any) -> jax.Array:
        """Position errors for another q (same State otherwise)."""
        s = self._matter._system.realize(state.with_q(q), Stage.POSITION)
        return self.get_position_errors_as_vector(s)

    def calc_velocity_error_from_u(self, state: State, u: Any) -> jax.Array:
        """Velocity errors for another u (same q)."""
        s = self._matter._system.realize(state.with_u(u), Stage.VELOCITY)
        return self.get_velocity_errors_as_vector(s)

    @reads_cache
    def calc_acceleration_error_from_udot(self, state: State, udot: Any) -> jax.Array:
        """Acceleration errors ``G udot - b`` of this constraint for a given udot."""
        state.require(Stage.VELOCITY, f"{self!r}.calc_acceleration_error_from_udot")
        G, b = self._matter.calc_g_and_b(state)
        rows = self._rows(state, 2)
        return G[rows] @ jnp.asarray(udot) - b[rows]

    # --------------------------------------------------------------- matrices
    def _G_rows(self, state: State, level: int) -> jax.Array:
        state.require(Stage.POSITION, f"{self!r} constraint matrices")
        model = self._matter._system.model_for(state)
        c = self._check(state)
        g = cn.single_group(model, state.use_euler_angles, self.index)
        G = cn.group_G(model, state, g, cn.group_coefficients(model, state, g))[0]
        mp_c, mv_c = c.mp, c.mv
        sel = {0: slice(0, mp_c), 1: slice(mp_c, mp_c + mv_c), 2: slice(mp_c + mv_c, None)}[level]
        return G[sel] * state.instance["matter"]["constraint_enabled"][self.index]

    def calc_position_constraint_matrix_p(self, state: State) -> jax.Array:
        """P (mp, nu): ``d(pverr)/du`` (needs Position)."""
        return self._G_rows(state, 0)

    def calc_position_constraint_matrix_pt(self, state: State) -> jax.Array:
        """P transposed."""
        return self.calc_position_constraint_matrix_p(state).T

    def calc_velocity_constraint_matrix_v(self, state: State) -> jax.Array:
        """V (mv, nu): ``d(verr)/du`` of the nonholonomic rows (needs Position)."""
        return self._G_rows(state, 1)

    def calc_velocity_constraint_matrix_vt(self, state: State) -> jax.Array:
        """V transposed."""
        return self.calc_velocity_constraint_matrix_v(state).T

    @reads_cache
    def calc_acceleration_constraint_matrix_a(self, state: State) -> jax.Array:
        """A (ma, nu): ``d(aerr)/d(udot)`` of the acceleration-only rows (Position)."""
        return self._G_rows(state, 2)

    def calc_acceleration_constraint_matrix_at(self, state: State) -> jax.Array:
        """A transposed."""
        return self.calc_acceleration_constraint_matrix_a(state).T

    def calc_position_constraint_matrix_pn_inv(self, state: State) -> jax.Array:
        """``P N^-1`` (mp, nq): the position-error Jacobian ``d(perr)/dq``."""
        s = state
        model = self._matter._system.model_for(s)
        self._check(s)
        g = cn.single_group(model, s.use_euler_angles, self.index)
        s.require(Stage.POSITION, f"{self!r}.calc_position_constraint_matrix_pn_inv")

        def f(q):
            st = realize(model, s.with_q(q), Stage.POSITION)
            return g.funcs[0](jax.tree.map(lambda x: x[0], cn.gather_kin(model, st, g, 0)))

        return jax.jacfwd(f)(s.q) * s.instance["matter"]["constraint_enabled"][self.index]

    # --------------------------------------------------------------- forces and power
    @reads_cache
    def calc_constraint_forces_from_multipliers(
        self, state: State, multipliers: Any
    ) -> tuple[jax.Array, jax.Array]:
        """Body forces (nb, 6) ``[torque about body origin; force]`` in Ground and mobility
        forces (nu,) that these multipliers (this constraint's, in row order) produce:
        together they equal ``G_c^T lambda_c``. The forces the constraint *applies* to
        the system are their negatives (``M udot = f - G^T lambda``)."""
        state.require(Stage.POSITION, f"{self!r}.calc_constraint_forces_from_multipliers")
        model = self._matter._system.model_for(state)
        self._check(state)
        g = cn.single_group(model, state.use_euler_angles, self.index)
        lam = (
            jnp.asarray(multipliers, state.q.dtype)
            * state.instance["matter"]["constraint_enabled"][self.index]
        )
        return cn.group_forces(model, state, g, cn.group_coefficients(model, state, g), lam[None])

    def get_constraint_forces_as_vectors(self, state: State) -> tuple[jax.Array, jax.Array]:
        """The forces this constraint applies to the system, ``-(G_c^T lambda_c)`` as body
        forces (nb, 6) in Ground and mobility forces (nu,) (needs Acceleration).

        This is what Simbody's documentation promises; Simbody 3.x's implementation (and
        OpenSim's ``calcConstraintForces``) returns ``+G_c^T lambda_c``, the opposite sign.
        ``calc_constraint_forces_from_multipliers`` gives that one."""
        F, tau = self.calc_constraint_forces_from_multipliers(state, self.get_multipliers_as_vector(state))
        return -F, -tau

    def get_constrained_body_forces_as_vector(self, state: State) -> jax.Array:
        """Body forces applied by this constraint (nb, 6), Ground frame."""
        return self.get_constraint_forces_as_vectors(state)[0]

    def get_constrained_mobility_forces_as_vector(self, state: State) -> jax.Array:
        """Mobility forces applied by this constraint (nu,)."""
        return self.get_constraint_forces_as_vectors(state)[1]

    def calc_power(self, state: State) -> jax.Array:
        """Power the constraint forces deliver to the system, ``-(lambda . G u)``; zero
        for workless constraints (needs Acceleration)."""
        F, tau = self.get_constraint_forces_as_vectors(state)
        V = self._matter.get_body_velocities(state)
        return jnp.sum(F * V) + tau @ state.u


def _vec3(x: Any, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=float).reshape(-1)
    if a.shape != (3,):
        raise ValueError(f"{what} must be a 3-vector, got shape {np.shape(x)}")
    return a


def _unit(x: Any, what: str) -> np.ndarray:
    a = _vec3(x, what)
    n = np.linalg.norm(a)
    if n == 0:
        raise ValueError(f"{what} must be a nonzero direction")
    return a / n


def _distinct(kind: str, b1: Any, b2: Any) -> None:
    if b1 is b2:
        raise ValueError(
            f"Constraint.{kind}: body 1 and body 2 are the same body ({b1!r}); a constraint "
            "must connect two different bodies"
        )


def _check_function(kind: str, fn: Any, n: int, what: str) -> Callable[[jax.Array], jax.Array]:
    """A plain JAX callable or ``sj.Function`` of a length-``n`` vector returning a scalar."""
    if not callable(fn):
        raise TypeError(f"Constraint.{kind}: the function must be callable (a JAX function or sj.Function)")
    size = getattr(fn, "get_argument_size", None)
    if isinstance(fn, Function) and size is not None and size() != n:
        raise ValueError(
            f"Constraint.{kind}: the function takes {size()} arguments but {n} {what} were given; "
            f"pass {size()} {what} or a function of {n}"
        )
    try:
        # NumPy indexing raises for an out-of-range argument where JAX would clamp (an
        # sj.Function states its arity, checked above)
        if not isinstance(fn, Function):
            fn(np.full(n, 0.5))
    except IndexError as e:
        raise ValueError(
            f"Constraint.{kind}: the function reads more arguments than the {n} {what} given ({e}); "
            f"pass as many {what} as the function takes"
        ) from None
    except Exception:  # noqa: BLE001 (only the arity is probed here)
        pass
    try:
        out = jax.eval_shape(fn, jax.ShapeDtypeStruct((n,), jnp.result_type(float)))
    except Exception as e:  # noqa: BLE001 (re-raised with the fix)
        raise ValueError(
            f"Constraint.{kind}: calling the function with a vector of {n} {what} failed ({e}); "
            f"it must take one array of length {n} and return a scalar"
        ) from None
    if getattr(out, "shape", None) not in ((), (1,)):
        raise ValueError(f"Constraint.{kind}: the function must return a scalar, got shape {out.shape}")
    return fn


def _coord_list(matter: Any, kind: str, bodies: Sequence[Any], indices: Sequence[int], what: str):
    if len(bodies) != len(indices):
        raise ValueError(f"Constraint.{kind}: {len(bodies)} bodies but {len(indices)} {what} indices")
    uniq: list[Any] = []
    for b in bodies:
        if not any(b is x for x in uniq):
            uniq.append(b)
    sel = [
        (next(i for i, x in enumerate(uniq) if x is b), int(k)) for b, k in zip(bodies, indices, strict=True)
    ]
    return uniq, sel


class Ball(Constraint):
    """A station on body 1 coincides with a station on body 2 (3 holonomic equations).

    ``perr = p_S2 - p_S1`` in the ancestor frame A; the multipliers are the force the
    constraint applies to body 2 at its station, negated (``F_2 = -lambda`` in A).
    """

    def __init__(self, body1: MobilizedBody, *args: Any):
        if len(args) == 1:
            p1, body2, p2 = np.zeros(3), args[0], np.zeros(3)
        elif len(args) == 3:
            p1, body2, p2 = args
        else:
            raise TypeError("Constraint.Ball(body1, body2) or Constraint.Ball(body1, point1, body2, point2)")
        _distinct("Ball", body1, body2)
        super().__init__(
            body1._matter,
            bodies=(body1, body2),
            params=dict(point1=_vec3(p1, "Ball point1"), point2=_vec3(p2, "Ball point2")),
            kernel=kinds.Ball(),
        )

    def set_point_on_body1(self, state: State, point: Any) -> State:
        """Station on body 1 (body frame) in this State (Instance stage)."""
        return self.set_param(state, "point1", point)

    def set_point_on_body2(self, state: State, point: Any) -> State:
        """Station on body 2 (body frame) in this State (Instance stage)."""
        return self.set_param(state, "point2", point)

    def get_point_on_body1(self, state: State) -> jax.Array:
        """Station on body 1 in this State."""
        return self.get_param(state, "point1")

    def get_point_on_body2(self, state: State) -> jax.Array:
        """Station on body 2 in this State."""
        return self.get_param(state, "point2")

    def set_default_point_on_body1(self, point: Any) -> Ball:
        """Default station on body 1 (a topological change)."""
        self._defaults["point1"] = _vec3(point, "Ball point1")
        self._matter._system.invalidate_topology()
        return self

    def set_default_point_on_body2(self, point: Any) -> Ball:
        """Default station on body 2 (a topological change)."""
        self._defaults["point2"] = _vec3(point, "Ball point2")
        self._matter._system.invalidate_topology()
        return self

    def get_default_point_on_body1(self) -> np.ndarray:
        """Default station on body 1."""
        return self._defaults["point1"]

    def get_default_point_on_body2(self) -> np.ndarray:
        """Default station on body 2."""
        return self._defaults["point2"]

    def get_body1_mobilized_body_index(self) -> int:
        """Index of body 1."""
        return self._bodies[0].index

    def get_body2_mobilized_body_index(self) -> int:
        """Index of body 2."""
        return self._bodies[1].index

    def _force_in_ground_on_body2(self, state: State) -> jax.Array:
        lam = self.get_multipliers_as_vector(state)
        anc = self._check(state).bodies[0]
        return -(state.position_cache.R_GB[anc] @ lam)

    @reads_cache
    def get_ball_reaction_force_on_body1(self, state: State) -> jax.Array:
        """Force the constraint applies to body 1 at the point coincident with body 2's
        station, in body 1's frame (needs Acceleration)."""
        b = self._bodies[0].index
        return -(state.position_cache.R_GB[b].T @ self._force_in_ground_on_body2(state))

    @reads_cache
    def get_ball_reaction_force_on_body2(self, state: State) -> jax.Array:
        """Force the constraint applies to body 2 at its station, in body 2's frame
        (``-lambda`` re-expressed). Simbody 3.x's code returns ``+lambda`` here despite its
        documentation; simjax returns the physical force its documentation describes."""
        b = self._bodies[1].index
        return state.position_cache.R_GB[b].T @ self._force_in_ground_on_body2(state)


class Rod(Constraint):
    """Constant distance between a station on body 1 and one on body 2 (1 equation).

    ``perr = |p_S2 - p_S1| - length``; the multiplier is the rod's tension (the force on
    body 2 along the unit vector from S1 to S2 is ``-lambda``), as in Simbody.
    """

    def __init__(self, body1: MobilizedBody, *args: Any):
        if len(args) == 2:
            p1, body2, p2, length = np.zeros(3), args[0], np.zeros(3), args[1]
        elif len(args) == 4:
            p1, body2, p2, length = args
        else:
            raise TypeError(
                "Constraint.Rod(body1, body2, length) or Constraint.Rod(body1, point1, body2, point2, length)"
            )
        _distinct("Rod", body1, body2)
        if not float(length) > 0:
            raise ValueError(f"Constraint.Rod: the length must be positive, got {length}")
        super().__init__(
            body1._matter,
            bodies=(body1, body2),
            params=dict(
                point1=_vec3(p1, "Rod point1"),
                point2=_vec3(p2, "Rod point2"),
                length=np.asarray(float(length)),
            ),
            kernel=kinds.Rod(),
        )

    def set_length(self, state: State, length: Any) -> State:
        """Rod length in this State (Instance stage)."""
        return self.set_param(state, "length", length)

    def get_length(self, state: State) -> jax.Array:
        """Rod length in this State."""
        return self.get_param(state, "length")

    def get_rod_tension(self, state: State) -> jax.Array:
        """Tension in the rod (positive pulls the stations together); needs Acceleration."""
        return self.get_multipliers_as_vector(state)[0]


def _which(kind: str, mobod: Any, which: int, n: int, what: str) -> int:
    if mobod.is_ground():
        raise ValueError(f"Constraint.{kind}: Ground has no mobilizer to constrain; pass a mobilized body")
    if not 0 <= int(which) < n:
        raise ValueError(f"Constraint.{kind}: {mobod!r} has {n} {what}; index {which} is out of range")
    return int(which)


class ConstantCoordinate(Constraint):
    """One generalized coordinate held at a value: ``perr = q_i - value`` (1 holonomic)."""

    holds_a_coordinate = True  # (read by the System's check against CoordinateLimits)

    def __init__(self, mobod: MobilizedBody, which_q: int, default_position: float = 0.0):
        self._which = _which("ConstantCoordinate", mobod, which_q, mobod.mobilizer.nq, "q's")
        super().__init__(
            mobod._matter,
            mobilizers=(mobod,),
            params=dict(position=np.asarray(float(default_position))),
            kernel=kinds.ConstantCoordinate(self._which),
        )

    def set_position(self, state: State, value: Any) -> State:
        """Held value in this State (Instance stage)."""
        return self.set_param(state, "position", value)

    def get_position(self, state: State) -> jax.Array:
        """Held value in this State."""
        return self.get_param(state, "position")


class ConstantSpeed(Constraint):
    """One generalized speed held at a value: ``verr = u_i - speed`` (1 nonholonomic)."""

    def __init__(self, mobod: MobilizedBody, which_u: int, default_speed: float = 0.0):
        self._which = _which("ConstantSpeed", mobod, which_u, mobod.mobilizer.nu, "u's")
        super().__init__(
            mobod._matter,
            mobilizers=(mobod,),
            params=dict(speed=np.asarray(float(default_speed))),
            kernel=kinds.ConstantSpeed(self._which),
        )

    def set_speed(self, state: State, value: Any) -> State:
        """Held speed in this State (Instance stage)."""
        return self.set_param(state, "speed", value)

    def get_speed(self, state: State) -> jax.Array:
        """Held speed in this State."""
        return self.get_param(state, "speed")


class ConstantAcceleration(Constraint):
    """One generalized acceleration held: ``aerr = udot_i - acceleration`` (1 acc-only)."""

    def __init__(self, mobod: MobilizedBody, which_u: int, default_acceleration: float = 0.0):
        self._which = _which("ConstantAcceleration", mobod, which_u, mobod.mobilizer.nu, "u's")
        super().__init__(
            mobod._matter,
            mobilizers=(mobod,),
            params=dict(acceleration=np.asarray(float(default_acceleration))),
            kernel=kinds.ConstantAcceleration(self._which),
        )

    def set_acceleration(self, state: State, value: Any) -> State:
        """Held acceleration in this State (Instance stage)."""
        return self.set_param(state, "acceleration", value)

    def get_acceleration(self, state: State) -> jax.Array:
        """Held acceleration in this State."""
        return self.get_param(state, "acceleration")


class CoordinateCoupler(Constraint):
    """``f(q_sel) = 0`` for a function of selected coordinates (1 holonomic equation).

    ``function`` is any JAX callable of one array (or an ``sj.Function``); its
    derivatives come from autodiff. ``coordinate_bodies[i]`` and
    ``coordinate_indices[i]`` pick the i-th argument: q number ``coordinate_indices[i]``
    of that body's mobilizer.
    """

    def __init__(
        self,
        matter: Any,
        function: Callable[[jax.Array], Any],
        coordinate_bodies: Sequence[MobilizedBody],
        coordinate_indices: Sequence[int],
    ):
        uniq, sel = _coord_list(
            matter, "CoordinateCoupler", coordinate_bodies, coordinate_indices, "coordinate"
        )
        for (_m, k), b in zip(sel, coordinate_bodies, strict=True):
            _which("CoordinateCoupler", b, k, b.mobilizer.nq, "q's")
        self._fn = _check_function("CoordinateCoupler", function, len(sel), "coordinates")
        self._sel = tuple(sel)
        # The numbers of a built-in sj.Function (spline knots, coefficients) are Instance
        # parameters, so couplers whose functions differ only in them form one group.
        split = getattr(self._fn, "_split", None)
        self._structure, data = split() if split is not None else (("callable", Identity(self._fn)), [])
        self._n_data = len(data)
        super().__init__(
            matter,
            mobilizers=tuple(uniq),
            params={f"fn{i}": d for i, d in enumerate(data)} or None,
            kernel=kinds.CoordinateCoupler(self._structure, self._sel, self._n_data, Identity(self._fn)),
        )


class SpeedCoupler(Constraint):
    """``f(u_sel, q_sel) = 0`` (1 nonholonomic equation); q is held fixed.

    The function takes one array: the selected speeds followed by the selected
    coordinates (Simbody's argument order)."""

    def __init__(
        self,
        matter: Any,
        function: Callable[[jax.Array], Any],
        speed_bodies: Sequence[MobilizedBody],
        speed_indices: Sequence[int],
        coordinate_bodies: Sequence[MobilizedBody] = (),
        coordinate_indices: Sequence[int] = (),
    ):
        allb = list(speed_bodies) + list(coordinate_bodies)
        uniq, _ = _coord_list(
            matter, "SpeedCoupler", allb, list(speed_indices) + list(coordinate_indices), "x"
        )
        pos = lambda b: next(i for i, x in enumerate(uniq) if x is b)
        for b, k in zip(speed_bodies, speed_indices, strict=True):
            _which("SpeedCoupler", b, k, b.mobilizer.nu, "u's")
        for b, k in zip(coordinate_bodies, coordinate_indices, strict=True):
            _which("SpeedCoupler", b, k, b.mobilizer.nq, "q's")
        self._usel = tuple((pos(b), int(k)) for b, k in zip(speed_bodies, speed_indices, strict=True))
        self._qsel = tuple(
            (pos(b), int(k)) for b, k in zip(coordinate_bodies, coordinate_indices, strict=True)
        )
        n = len(self._usel) + len(self._qsel)
        self._fn = _check_function("SpeedCoupler", function, n, "speeds and coordinates")
        super().__init__(
            matter,
            mobilizers=tuple(uniq),
            kernel=kinds.SpeedCoupler(Identity(self._fn), self._usel, self._qsel),
        )


class PrescribedMotion(Constraint):
    """One coordinate follows a function of time: ``perr = q_i - f(t)`` (1 holonomic)."""

    def __init__(self, matter: Any, function: Callable[[jax.Array], Any], mobod: MobilizedBody, which_q: int):
        self._which = _which("PrescribedMotion", mobod, which_q, mobod.mobilizer.nq, "q's")
        self._fn = _check_function("PrescribedMotion", function, 1, "time argument")
        super().__init__(
            matter, mobilizers=(mobod,), kernel=kinds.PrescribedMotion(self._which, Identity(self._fn))
        )


class Custom(Constraint):
    """A user constraint written as its lowest-level errors only.

    Give ``position_errors(ctx)`` for holonomic equations, ``velocity_errors(ctx)`` for
    nonholonomic ones and/or ``acceleration_errors(ctx)`` for acceleration-only ones;
    each returns a scalar or a vector. ``ctx`` is a ``ConstraintContext``: kinematics of
    the listed ``bodies`` relative to their ancestor (in its frame), the q/u/udot of the
    listed ``mobilizers``, time and ``params`` (Instance-stage, settable per State).
    simjax derives the velocity and acceleration errors, ``G`` and the constraint forces
    by autodiff.
    """

    def __init__(
        self,
        matter: Any,
        bodies: Sequence[MobilizedBody] = (),
        mobilizers: Sequence[MobilizedBody] = (),
        position_errors: Callable[[ConstraintContext], Any] | None = None,
        velocity_errors: Callable[[ConstraintContext], Any] | None = None,
        acceleration_errors: Callable[[ConstraintContext], Any] | None = None,
        params: dict[str, Any] | None = None,
    ):
        if position_errors is None and velocity_errors is None and acceleration_errors is None:
            raise ValueError(
                "Constraint.Custom: give position_errors, velocity_errors or acceleration_errors"
            )
        wrap = lambda f: None if f is None else Identity(f)
        kernel = kinds.Custom(wrap(position_errors), wrap(velocity_errors), wrap(acceleration_errors))
        super().__init__(matter, bodies=bodies, mobilizers=mobilizers, params=params, kernel=kernel)


def _perp_simbody(z: np.ndarray) -> np.ndarray:
    """Simbody's ``UnitVec3::perp``: ``normalize(z x e_k)`` for the axis ``k`` with the
    smallest ``|z_k|`` (ties to the lower index)."""
    a = np.abs(z)
    k = (0 if a[0] <= a[2] else 2) if a[0] <= a[1] else (1 if a[1] <= a[2] else 2)
    e = np.zeros(3)
    e[k] = 1.0
    x = np.cross(z, e)
    return x / np.linalg.norm(x)


class PointInPlane(Constraint):
    """A station on the follower stays in a plane fixed on the plane body (1 equation):
    ``perr = p_BS . n - height`` with ``p_BS`` the follower station in the plane body's
    frame B and ``n`` the plane normal (in B)."""

    def __init__(
        self, plane_body: MobilizedBody, normal: Any, height: float, follower: MobilizedBody, point: Any
    ):
        _distinct("PointInPlane", plane_body, follower)
        super().__init__(
            plane_body._matter,
            bodies=(plane_body, follower),
            params=dict(
                normal=_unit(normal, "PointInPlane normal"),
                height=np.asarray(float(height)),
                point=_vec3(point, "PointInPlane follower point"),
            ),
            kernel=kinds.PointInPlane(),
        )

    def get_plane_normal(self, state: State) -> jax.Array:
        """Plane normal in the plane body's frame."""
        return self.get_param(state, "normal")

    def get_plane_height(self, state: State) -> jax.Array:
        """Plane height along the normal from the plane body's origin."""
        return self.get_param(state, "height")

    def get_follower_point(self, state: State) -> jax.Array:
        """The follower station."""
        return self.get_param(state, "point")

    def set_plane_height(self, state: State, h: Any) -> State:
        """Plane height in this State (Instance stage)."""
        return self.set_param(state, "height", h)

    def set_follower_point(self, state: State, p: Any) -> State:
        """Follower station in this State (Instance stage)."""
        return self.set_param(state, "point", p)


class PointOnLine(Constraint):
    """A station on the follower stays on a line fixed on the line body (2 equations):
    the components of ``p_BS - P`` along two directions perpendicular to the line (the
    same directions Simbody picks), in the line body's frame B."""

    def __init__(
        self,
        line_body: MobilizedBody,
        direction: Any,
        point_on_line: Any,
        follower: MobilizedBody,
        point: Any,
    ):
        _distinct("PointOnLine", line_body, follower)
        z = _unit(direction, "PointOnLine direction")
        x = _perp_simbody(z)
        y = np.cross(z, x)
        super().__init__(
            line_body._matter,
            bodies=(line_body, follower),
            params=dict(
                perp=np.stack([x, y / np.linalg.norm(y)]),
                line_point=_vec3(point_on_line, "PointOnLine point_on_line"),
                point=_vec3(point, "PointOnLine follower point"),
            ),
            kernel=kinds.PointOnLine(),
        )

    def get_follower_point(self, state: State) -> jax.Array:
        """The follower station."""
        return self.get_param(state, "point")

    def get_point_on_line(self, state: State) -> jax.Array:
        """A point of the line, in the line body's frame."""
        return self.get_param(state, "line_point")


class ConstantAngle(Constraint):
    """The angle between a unit vector on the base body and one on the follower is held
    (1 equation): ``perr = b . f - cos(angle)``, both vectors in the ancestor frame."""

    def __init__(
        self,
        base: MobilizedBody,
        axis_on_base: Any,
        follower: MobilizedBody,
        axis_on_follower: Any,
        angle: float = np.pi / 2,
    ):
        _distinct("ConstantAngle", base, follower)
        super().__init__(
            base._matter,
            bodies=(base, follower),
            params=dict(
                base_axis=_unit(axis_on_base, "ConstantAngle base axis"),
                follower_axis=_unit(axis_on_follower, "ConstantAngle follower axis"),
                cos_angle=np.asarray(np.cos(float(angle))),
            ),
            kernel=kinds.ConstantAngle(),
        )

    def get_angle(self, state: State) -> jax.Array:
        """The held angle."""
        return jnp.arccos(self.get_param(state, "cos_angle"))

    def set_angle(self, state: State, angle: Any) -> State:
        """The held angle in this State (Instance stage)."""
        return self.set_param(state, "cos_angle", jnp.cos(jnp.asarray(angle)))


def _rotation(x: Any, what: str) -> np.ndarray:
    if isinstance(x, sp.Transform):
        x = x.R
    return sp.check_rotation(getattr(x, "R", x), what, tol=1e-9)


class ConstantOrientation(Constraint):
    """Frame F on the follower keeps the orientation of frame B on the base (3
    equations, Simbody's ``[F.x . B.y, F.y . B.z, F.z . B.x]``, zero when aligned)."""

    def __init__(self, base: MobilizedBody, R_B: Any, follower: MobilizedBody, R_F: Any):
        _distinct("ConstantOrientation", base, follower)
        super().__init__(
            base._matter,
            bodies=(base, follower),
            params=dict(
                R_B=_rotation(R_B, "ConstantOrientation R_B"), R_F=_rotation(R_F, "ConstantOrientation R_F")
            ),
            kernel=kinds.ConstantOrientation(),
        )


class Weld(Constraint):
    """Frame F2 on body 2 coincides with frame F1 on body 1 (6 equations): three
    orientation rows (as ``ConstantOrientation``) then ``p_F2 - p_F1`` (as ``Ball``),
    in the ancestor frame. Multipliers: three "torques" then three forces."""

    def __init__(self, body1: MobilizedBody, *args: Any):
        if len(args) == 1:
            X1, body2, X2 = sp.Transform(), args[0], sp.Transform()
        elif len(args) == 3:
            X1, body2, X2 = args
        else:
            raise TypeError("Constraint.Weld(body1, body2) or Constraint.Weld(body1, X_B1F1, body2, X_B2F2)")
        _distinct("Weld", body1, body2)
        X1 = X1 if isinstance(X1, sp.Transform) else sp.Transform(*X1)
        X2 = X2 if isinstance(X2, sp.Transform) else sp.Transform(*X2)
        super().__init__(
            body1._matter,
            bodies=(body1, body2),
            params=dict(
                R1=_rotation(np.asarray(X1.R), "Weld frame on body 1"),
                p1=_vec3(X1.p, "Weld frame origin on body 1"),
                R2=_rotation(np.asarray(X2.R), "Weld frame on body 2"),
                p2=_vec3(X2.p, "Weld frame origin on body 2"),
            ),
            kernel=kinds.Weld(),
        )

    def get_frame_on_body1(self, state: State) -> sp.Transform:
        """Frame F1 on body 1."""
        return sp.Transform(self.get_param(state, "R1"), self.get_param(state, "p1"))

    def get_frame_on_body2(self, state: State) -> sp.Transform:
        """Frame F2 on body 2."""
        return sp.Transform(self.get_param(state, "R2"), self.get_param(state, "p2"))


class NoSlip1D(Constraint):
    """No relative slip along a direction at a contact point (1 nonholonomic equation).

    The contact point P and direction n are fixed on the case body; ``verr =
    (v_P1 - v_P0) . n`` with ``v_Pi`` the velocity of moving body i's material point at
    P. Its acceleration error is the exact time derivative (Simbody's differs from it
    by ``(w1 x (Pdot - v_P1) - w0 x (Pdot - v_P0)) . n``, which lets the velocity
    constraint drift). The force on moving body 1 at P along n is ``-lambda``."""

    def __init__(
        self, case: MobilizedBody, point: Any, direction: Any, moving0: MobilizedBody, moving1: MobilizedBody
    ):
        _distinct("NoSlip1D", moving0, moving1)
        super().__init__(
            case._matter,
            bodies=(case, moving0, moving1),
            params=dict(
                point=_vec3(point, "NoSlip1D contact point"), direction=_unit(direction, "NoSlip1D direction")
            ),
            kernel=kinds.NoSlip1D(),
        )

    def set_contact_point(self, state: State, point: Any) -> State:
        """Contact point on the case body in this State (Instance stage)."""
        return self.set_param(state, "point", point)

    def set_direction(self, state: State, direction: Any) -> State:
        """No-slip direction on the case body in this State (Instance stage)."""
        d = jnp.asarray(direction, state.q.dtype)
        return self.set_param(state, "direction", d / jnp.linalg.norm(d))

    def get_force_at_contact_point(self, state: State) -> jax.Array:
        """Force along n the constraint applies to moving body 1 (needs Acceleration)."""
        return -self.get_multipliers_as_vector(state)[0]


# The kinds as attributes of the base (Simbody's Constraint::Ball style); declared above.
Constraint.Ball = Ball
Constraint.Rod = Rod
Constraint.ConstantCoordinate = ConstantCoordinate
Constraint.ConstantSpeed = ConstantSpeed
Constraint.ConstantAcceleration = ConstantAcceleration
Constraint.CoordinateCoupler = CoordinateCoupler
Constraint.SpeedCoupler = SpeedCoupler
Constraint.PrescribedMotion = PrescribedMotion
Constraint.Custom = Custom
Constraint.PointInPlane = PointInPlane
Constraint.PointOnLine = PointOnLine
Constraint.ConstantAngle = ConstantAngle
Constraint.ConstantOrientation = ConstantOrientation
Constraint.Weld = Weld
Constraint.NoSlip1D = NoSlip1D
Constraint.ConstantDistance = Rod
Constraint.CoincidentPoints = Ball
Constraint.Spherical = Ball


# ============================================================================ unilateral


def _speed_offset(mob: Any, which: int, params: np.ndarray, where: str) -> int:
    """The u (within the mobilizer) whose value is ``qdot[which]`` identically; refuses a
    coordinate whose rate is a mixture of speeds (a quaternion, an Euler angle of a Ball)."""
    if mob.N(jnp.asarray(mob.default_q(), float), jnp.asarray(params, float)) is None:
        return which
    rng = np.random.default_rng(0)
    rows = []
    for k in range(3):
        q = np.asarray(mob.default_q(), float) + (0.0 if k == 0 else 0.3 * rng.standard_normal(mob.nq))
        if mob.uses_quaternion:
            q[:4] = q[:4] / np.linalg.norm(q[:4])
        rows.append(np.asarray(mob.N(jnp.asarray(q), jnp.asarray(params, float)))[which])
    j = int(np.argmax(np.abs(rows[0])))
    unit = np.zeros(mob.nu)
    unit[j] = 1.0
    if not all(np.allclose(r, unit, atol=1e-12) for r in rows):
        raise ValueError(
            f"{where}: the rate of q[{which}] of this {mob.kind} mobilizer is not one of its speeds "
            "(qdot = N(q) u mixes them), so it cannot carry a coordinate limit. Limit a coordinate "
            "whose qdot is a speed (Pin, Slider, Universal, Gimbal, a Free's translation, a "
            "FunctionBased/CustomJoint coordinate), or use the mobilizer in that form"
        )
    return j


class CoordinateLimit:
    """A hard, one-sided limit on one mobilizer coordinate: ``lower <= q <= upper``
    (ArtiSynth's coordinate limit, a unilateral constraint; seed 001, 4.9.1–4.9.2).

    ``sj.Constraint.CoordinateLimit(knee, 0, lower=-2.0, upper=0.0)`` limits q[0] of the
    knee's mobilizer (linear or rotary). It owns one unilateral row whose engaged value
    ``E`` (``is_engaged``) is ``+1`` while it holds the lower bound, ``-1`` the upper and 0
    when free; ``E``, the steps it has been engaged and its last force are discrete
    variables of the State. The limit acts in ``sj.simulate(..., integrator="euler")``,
    which then steps at the velocity level with complementarity (inelastic, as ArtiSynth):
    it engages when the coordinate enters the inadmissible region, disengages only out of
    it, moving away and after two steps, and the position correction leaves the joint
    resting ``tol`` inside (the deadband). ``realize`` (forward dynamics) and the smooth
    integrators do not see it.

    Args:
        mobod: The mobilized body whose mobilizer's coordinate is limited.
        which_q: Index of the coordinate in that mobilizer's q (quaternion mode numbering).
        lower: The admissible range's lower end (may be ``-inf``). Instance data:
            ``set_range`` changes it per State (a batch may hold different limits).
        upper: Its upper end (may be ``inf``), Instance data as ``lower``.
        tol: Penetration tolerance of this limit (the deadband); default the matter
            subsystem's ``rotary_limit_tol`` for a rotary coordinate, ``penetration_tol``
            for a linear one.
        rotary: Whether the coordinate is an angle (default: from the mobilizer's motion).
        name: A name for ``summary()``.
    """

    def __init__(
        self,
        mobod: MobilizedBody,
        which_q: int,
        lower: float = -np.inf,
        upper: float = np.inf,
        *,
        tol: float | None = None,
        rotary: bool | None = None,
        name: str | None = None,
    ):
        if not isinstance(mobod, MobilizedBody):
            raise TypeError(
                f"Constraint.CoordinateLimit: expected a MobilizedBody, got {type(mobod).__name__}"
            )
        mob = mobod.mobilizer if not mobod.is_ground() else None
        where = f"Constraint.CoordinateLimit on {mobod.name!r} q[{which_q}]"
        if mob is None:
            raise ValueError(f"{where}: Ground has no coordinates; pass a mobilized body")
        self._which = _which("CoordinateLimit", mobod, which_q, mob.nq, "q's")
        if mob.uses_quaternion and self._which < 4:
            raise ValueError(
                f"{where}: q[0:4] of a {mob.kind} mobilizer is a quaternion, which has no range "
                "to limit. Limit an angle instead: build the joint from Pins or a FunctionBased "
                "(CustomJoint) mobilizer with angle coordinates, or limit a translation q[4:]"
            )
        lo, hi = float(lower), float(upper)
        if np.isnan(lo) or np.isnan(hi) or lo > hi:
            raise ValueError(
                f"{where}: lower={lo} must not exceed upper={hi}; give the range as (lower, upper)"
            )
        if tol is not None and not (np.isfinite(tol) and tol >= 0):
            raise ValueError(f"{where}: tol must be a finite number >= 0, got {tol}")
        self._mobod = mobod
        self._matter = mobod._matter
        self.where = where
        self._lower, self._upper = lo, hi
        self._tol = None if tol is None else float(tol)
        self._speed = {
            False: _speed_offset(mob, self._which, mobod._params, where),
        }
        euler_mob = mob.with_euler_angles()
        self._which_euler = (
            self._which - 1 if (mob.uses_quaternion and not euler_mob.uses_quaternion) else self._which
        )
        self._speed[True] = _speed_offset(euler_mob, self._which_euler, mobod._params, where)
        if rotary is None:
            H = np.asarray(mob.H_FM(jnp.asarray(mob.default_q(), float), jnp.asarray(mobod._params, float)))
            rotary = bool(np.linalg.norm(H[:3, self._speed[False]]) > 1e-12)
        self._rotary = bool(rotary)
        self.name = name or f"{mobod.name}.q{self._which}"
        self.index = len(self._matter._limits)
        self._matter._limits.append(self)
        self._matter._system.invalidate_topology()

    def __repr__(self) -> str:
        return f"Constraint.CoordinateLimit({self.name!r}, [{self._lower:g}, {self._upper:g}])"

    def _record(self, topologies: tuple[Any, Any]) -> LimitRecord:
        """What the Model holds of this limit (``topologies``: quaternion, Euler)."""
        (q0, u0), (q1, u1) = (self._indices(t, bool(e)) for e, t in enumerate(topologies))
        key = ("CoordinateLimit", self._mobod.index, self._which, self._rotary)
        return LimitRecord(name=self.name, key=key, q_index=(q0, q1), u_index=(u0, u1))

    def _indices(self, topo: Any, euler: bool) -> tuple[int, int]:
        b = self._mobod.index
        w = self._which_euler if euler else self._which
        return int(topo.q_start[b]) + w, int(topo.u_start[b]) + self._speed[euler]

    def _check(self, state: State) -> None:
        model = self._matter._system.model_for(state)
        if self.index >= len(model.limits) or model.limits[self.index].name != self.name:
            raise ValueError(f"{self!r} was added after realize_topology(); realize the topology again")

    def _get(self, state: State, kind: str, name: str) -> jax.Array:
        self._check(state)
        src = state.instance if kind == "instance" else state.discrete
        return src["matter"][name][self.index]

    # ------------------------------------------------------------------ queries
    def get_mobilized_body(self) -> MobilizedBody:
        """The body whose mobilizer coordinate is limited."""
        return self._mobod

    def get_which_q(self) -> int:
        """Index of the limited coordinate in its mobilizer's q."""
        return self._which

    def is_rotary(self) -> bool:
        """Whether the rotary tolerance applies (else the linear penetration tolerance)."""
        return self._rotary

    def get_coordinate(self, state: State) -> jax.Array:
        """The limited coordinate's value."""
        self._check(state)
        q, _ = self._indices(
            self._matter._system.model_for(state).topology(state.use_euler_angles), state.use_euler_angles
        )
        return state.q[q]

    def get_default_range(self) -> tuple[float, float]:
        """``(lower, upper)`` of the default State."""
        return self._lower, self._upper

    def get_range(self, state: State) -> tuple[jax.Array, jax.Array]:
        """``(lower, upper)`` in ``state``."""
        return self._get(state, "instance", "limit_lower"), self._get(state, "instance", "limit_upper")

    def set_range(self, state: State, lower: Any, upper: Any) -> State:
        """New State with the range changed (Instance stage; ``lower <= upper``)."""
        self._check(state)
        lo, hi = jnp.asarray(lower, state.q.dtype), jnp.asarray(upper, state.q.dtype)
        if not isinstance(lo, jax.core.Tracer) and not isinstance(hi, jax.core.Tracer):
            if bool(jnp.any(jnp.isnan(lo) | jnp.isnan(hi) | (lo > hi))):
                raise ValueError(f"{self.where}: set_range lower={lo} must not exceed upper={hi}")
        inst = state.instance["matter"]
        state = state.with_instance("matter", "limit_lower", inst["limit_lower"].at[self.index].set(lo))
        return state.with_instance("matter", "limit_upper", inst["limit_upper"].at[self.index].set(hi))

    def get_tolerance(self, state: State) -> jax.Array:
        """The deadband (penetration tolerance) of this limit in ``state``."""
        return self._get(state, "instance", "limit_tol")

    def set_tolerance(self, state: State, tol: Any) -> State:
        """New State with this limit's tolerance changed (Instance stage)."""
        self._check(state)
        t = state.instance["matter"]["limit_tol"]
        return state.with_instance("matter", "limit_tol", t.at[self.index].set(jnp.asarray(tol, t.dtype)))

    def is_engaged(self, state: State) -> jax.Array:
        """``E`` in ``{0, +1, -1}``: free, holding the lower bound, holding the upper."""
        return self._get(state, "discrete", "limit_engaged").astype(jnp.int32)

    def get_distance(self, state: State) -> jax.Array:
        """Distance to the bound it holds (negative inside the region; 0 when free)."""
        lo, hi = self.get_range(state)
        e = self._get(state, "discrete", "limit_engaged")
        q = self.get_coordinate(state)
        return jnp.where(e > 0, q - lo, jnp.where(e < 0, hi - q, 0.0))

    def get_multipliers(self, state: State) -> jax.Array:
        """The limit's force (torque for a rotary coordinate) during the last step, (1,):
        ``>= 0``, pushing the coordinate out of the region it holds (up from ``lower``
        when ``E = +1``, down from ``upper`` when ``E = -1``)."""
        return self._get(state, "discrete", "limit_force").reshape(1)

    def get_generalized_force(self, state: State) -> jax.Array:
        """The limit's signed generalized force on its coordinate during the last step."""
        return self.get_multipliers(state)[0] * self._get(state, "discrete", "limit_engaged")


class _CouplingRow:
    """One unilateral row of a custom coupling (a coordinate limit or another one-sided
    constraint of the coupling), kept with the System's limits."""

    def __init__(self, joint: CouplingJoint, k: int, lower: float, upper: float, rotary: bool, name: str):
        self._joint = joint
        self._k = k
        self._lower, self._upper = lower, upper
        self._tol: float | None = None
        self._rotary = rotary
        self.name = name
        self._matter = joint._matter
        self.index = len(self._matter._limits)
        self._matter._limits.append(self)

    def get_default_range(self) -> tuple[float, float]:
        """``(lower, upper)`` of the default State."""
        return self._lower, self._upper

    def _record(self, topologies: tuple[Any, Any]) -> LimitRecord:
        """What the Model holds of this row (its value comes from its joint's kernel)."""
        return LimitRecord(name=self.name, key=("CouplingRow", self._joint.index, self._k, self._rotary))


class CouplingJoint(Constraint):
    """A custom joint written the ArtiSynth way: ``coupling`` (an ``sj.Coupling``) between
    frame C on ``body_a`` (``X_AC``) and frame D on ``body_b`` (``X_BD``); ArtiSynth's
    ``JointBase`` with its ``RigidBodyCoupling``.

    The bilateral constraints are holonomic rows of the System (``perr_k = G_k . err``, the
    pose error twist from G to C weighted by the constraint's wrench in G), so forward
    dynamics, every integrator, projection and the Assembler see them; the unilateral ones
    (coordinate limits, and one-sided rows whose distance ``unilateral_distances`` gives)
    are limits stepped by ``sj.simulate(..., integrator="euler")``. ``X_AC`` and ``X_BD`` are
    Instance parameters.

    Queries: ``get_coordinates(state)``, ``set_coordinates(state, coords)`` (moves body A
    when its mobilizer can fit the pose), ``is_engaged(state)`` and ``get_multipliers
    (state)`` of the unilateral rows, ``get_multipliers_as_vector(state)`` of the bilateral
    rows (Simbody's sign: ``M udot + G^T lambda = f``), ``get_wrenches(state)``."""

    def __init__(
        self,
        coupling: Coupling,
        body_a: MobilizedBody,
        X_AC: Any,
        body_b: MobilizedBody,
        X_BD: Any,
        *,
        name: str | None = None,
        check: bool = True,
    ):
        if not isinstance(coupling, Coupling):
            raise TypeError(
                f"Constraint.Coupling: expected an sj.Coupling instance, got {type(coupling).__name__}"
            )
        kind = type(coupling).__name__
        self._coupling = coupling
        self.name = name or f"{kind}({body_a.name}, {body_b.name})"
        if not coupling._bilateral():
            raise ValueError(
                f"Constraint.Coupling {self.name}: {kind} declares no bilateral constraint; a joint "
                "removes at least one degree of freedom (add_constraint(sj.Coupling.BILATERAL | ...))"
            )
        if body_a is body_b:
            raise ValueError(f"Constraint.Coupling {self.name}: body_a and body_b must differ")
        Xac = _transform(X_AC, f"Constraint.Coupling {self.name}: X_AC")
        Xbd = _transform(X_BD, f"Constraint.Coupling {self.name}: X_BD")
        self._check_wrenches()
        self._data = cpl.coupling_data(coupling)
        self._uni = coupling._unilateral()
        self._lim_coord = {k: coupling._constraints[k].get("coordinate") for k in self._uni}
        for k in self._uni:
            if (
                self._lim_coord[k] is None
                and type(coupling).unilateral_distances is Coupling.unilateral_distances
            ):
                raise ValueError(
                    f"Constraint.Coupling {self.name}: unilateral constraint {k} of {kind} limits no "
                    "coordinate; "
                    "give its distance (negative inside the inadmissible region) in unilateral_distances, or "
                    "tie it to a coordinate with add_coordinate(..., lim_con=...)"
                )
        super().__init__(
            body_a._matter,
            bodies=(body_a, body_b),
            params={"X_AC_R": Xac.R, "X_AC_p": Xac.p, "X_BD_R": Xbd.R, "X_BD_p": Xbd.p},
            kernel=kinds.CouplingJoint(self._data, Identity(coupling)),
        )
        if check and coupling._coordinates:
            self._check_inverse()
        rows = []
        for k in self._uni:
            c = coupling._constraints[k]
            i = self._lim_coord[k]
            if i is not None:
                lo, hi = coupling._coordinates[i]["min"], coupling._coordinates[i]["max"]
                label = f"{self.name}.coord{i}"
            else:
                lo, hi, label = 0.0, np.inf, f"{self.name}.con{k}"
            if c["flags"] & Coupling.ROTARY:
                rotary = True
            elif c["flags"] & Coupling.LINEAR:
                rotary = False
            else:
                rotary = i is not None and self._coordinate_is_rotary(i)
            rows.append(_CouplingRow(self, k, lo, hi, rotary, label))
        self._limit_rows = tuple(rows)
        self._unilateral_rows = tuple(r.index for r in rows)

    # ------------------------------------------------------------------ build-time checks
    def _sample_coords(self, n: int = 4) -> list[np.ndarray]:
        rng = np.random.default_rng(7)
        out = []
        for k in range(n):
            c = []
            for info in self._coupling._coordinates:
                lo, hi = max(info["min"], -1.0), min(info["max"], 1.0)
                c.append(0.5 * (lo + hi) if k == 0 else rng.uniform(lo, hi))
            out.append(np.asarray(c, float))
        return out

    def _check_wrenches(self) -> None:
        cp = self._coupling
        kind = type(cp).__name__
        coords = self._sample_coords(1)[0] if cp._coordinates else np.zeros(0)
        T = cp.coordinates_to_tcd(jnp.asarray(coords)) if cp._coordinates else sp.Transform()
        given = cp.update_constraints(T, jnp.asarray(coords))
        missing = [k for k in cp._bilateral() if cp._constraints[k]["wrench"] is None and k not in given]
        nb = len(cp._bilateral())
        if len(missing) > 1 or (missing and cp.num_coordinates() + nb - 1 != 5):
            raise ValueError(
                f"Constraint.Coupling {self.name}: bilateral constraints {missing} of {kind} have no wrench. "
                "Autodiff can find one missing wrench when the coordinates and the other bilateral "
                f"constraints number 5 (here {cp.num_coordinates()} + {nb - 1}); give the others as constant "
                "wrenches (add_constraint(flags, wrench)) or return them from "
                "update_constraints(T_GD, coords)"
            )

    def _coordinate_is_rotary(self, i: int) -> bool:
        c = jnp.asarray(self._sample_coords(1)[0])
        H = np.asarray(cpl.coordinate_twists(self._coupling, c))
        return bool(np.linalg.norm(H[:3, i]) > 1e-12)

    def _check_inverse(self) -> None:
        cp = self._coupling
        kind = type(cp).__name__
        for c in self._sample_coords():
            cj = jnp.asarray(c)
            T = cp.coordinates_to_tcd(cj)
            if not isinstance(T, sp.Transform):
                raise TypeError(
                    f"Constraint.Coupling {self.name}: {kind}.coordinates_to_tcd must return an "
                    "sj.Transform, "
                    f"got {type(T).__name__}"
                )
            back = np.asarray(cpl.coordinates(cp, self._data, T, cj))
            TG = cp.project_to_constraints(T)
            off = max(
                float(np.max(np.abs(np.asarray(TG.R) - np.asarray(T.R)))),
                float(np.max(np.abs(np.asarray(TG.p) - np.asarray(T.p)))),
            )
            if not np.allclose(back, c, atol=1e-9) or off > 1e-9:
                raise ValueError(
                    f"Constraint.Coupling {self.name}: {kind}.tcd_to_coordinates does not invert "
                    f"coordinates_to_tcd (coordinates {np.round(c, 6).tolist()} -> T_CD -> "
                    f"{np.round(back, 6).tolist()}), or project_to_constraints moves a legal T_CD "
                    f"(by {off:.3g}). "
                    "Make tcd_to_coordinates(coordinates_to_tcd(c), c) == c and project_to_constraints "
                    "leave legal poses alone"
                )
            H = np.asarray(cpl.coordinate_twists(cp, cj))
            W = np.asarray(cpl.wrenches(cp, self._data, T, cj))
            if np.max(np.abs(W @ H), initial=0.0) > 1e-9:
                raise ValueError(
                    f"Constraint.Coupling {self.name}: the bilateral wrenches of {kind} do not "
                    "annihilate its "
                    f"coordinate motions (max |G_k . H_i| = {np.max(np.abs(W @ H)):.3g} at coordinates "
                    f"{np.round(c, 6).tolist()}); a bilateral constraint must not restrict a coordinate"
                )

    # ------------------------------------------------------------------ queries
    def get_coupling(self) -> Coupling:
        """The coupling."""
        return self._coupling

    def _eval(self, state: State, fn: Callable[[ConstraintContext], Any]) -> Any:
        """``fn`` of this joint's ``ConstraintContext`` in ``state`` (realized to Position)."""
        cc = self._check(state)
        model = self._matter._system.model_for(state)
        s = realize(model, state, Stage.POSITION)
        g = cn.single_group(model, s.use_euler_angles, cc.index)
        prev = (
            s.discrete["matter"]["limit_value"][np.asarray(self._unilateral_rows, int)][None]
            if self._limit_rows
            else None
        )
        kin = uni.with_unilateral_prev(cn.gather_kin(model, s, g, 0), prev)
        one = jax.tree.map(lambda x: x[0], kin)
        return fn(ConstraintContext(one, g.mobs))

    def get_coordinates(self, state: State) -> jax.Array:
        """The coupling's coordinates in ``state`` (of ``T_GD``, angles nearest their last
        values)."""

        return self._eval(state, lambda ctx: cpl.current_coordinates(self._coupling, self._data, ctx))

    def get_transform_cd(self, state: State) -> tuple[sp.Transform, sp.Transform]:
        """``(T_CD, T_GD)`` in ``state``."""
        return self._eval(state, lambda ctx: cpl.transforms(self._coupling, ctx))

    def get_wrenches(self, state: State) -> jax.Array:
        """The bilateral constraints' wrenches in G, ``[m; f]`` (nb, 6), as used in ``state``."""

        def f(ctx):
            _, T_GD = cpl.transforms(self._coupling, ctx)
            zero = jnp.zeros(self._data.n_coordinates, T_GD.p.dtype)
            coords = cpl.coordinates(self._coupling, self._data, T_GD, zero)
            return cpl.wrenches(self._coupling, self._data, T_GD, coords)

        return self._eval(state, f)

    def get_num_limits(self) -> int:
        """Number of unilateral rows."""
        return len(self._limit_rows)

    def is_engaged(self, state: State) -> jax.Array:
        """``E`` of each unilateral row (in the order the coupling added them)."""
        self._check(state)
        return state.discrete["matter"]["limit_engaged"][np.asarray(self._unilateral_rows, int)].astype(
            jnp.int32
        )

    def get_multipliers(self, state: State) -> jax.Array:
        """Forces (>= 0) of the unilateral rows during the last step."""
        self._check(state)
        return state.discrete["matter"]["limit_force"][np.asarray(self._unilateral_rows, int)]

    def set_coordinates(self, state: State, coords: Any) -> State:
        """New State with body A placed so that the joint has ``coords`` (body B held), when
        A's mobilizer can fit the pose (a Free body, say); the limit rows remember the
        values (for ``nearest_angle``)."""
        cp = self._coupling
        c = jnp.asarray(coords, state.q.dtype).reshape(cp.num_coordinates())
        model = self._matter._system.model_for(state)
        s = realize(model, state, Stage.POSITION)
        X_AC, X_BD = cpl.frames(lambda name: self.get_param(s, name))
        a, b = self._bodies
        Rb, pb = s.position_cache.R_GB[b.index], s.position_cache.p_GB[b.index]
        X_GC = sp.Transform(Rb, pb).compose(X_BD).compose(cp.coordinates_to_tcd(c))
        X_GA = X_GC.compose(X_AC.invert())
        p = a._parent
        if p is None:
            raise ValueError(f"Constraint.Coupling {self.name}: body A is Ground; it cannot be moved")
        Rp, pp = s.position_cache.R_GB[p.index], s.position_cache.p_GB[p.index]
        X_PA = sp.Transform(Rp, pp).invert().compose(X_GA)
        X_FM = a._X_PF.invert().compose(X_PA).compose(a._X_BM)
        out = a.set_q_to_fit_transform(state, X_FM)
        if self._limit_rows:
            val = out.discrete["matter"]["limit_value"]
            for r, k in zip(self._limit_rows, self._uni, strict=True):
                i = self._lim_coord[k]
                if i is not None:
                    val = val.at[r.index].set(c[i])
            out = out.with_discrete("matter", "limit_value", val)
        return out


def _transform(X: Any, what: str) -> sp.Transform:
    if isinstance(X, sp.Transform):
        return X
    if X is None:
        return sp.Transform()
    raise TypeError(f"{what} must be an sj.Transform, got {type(X).__name__}")


Constraint.CoordinateLimit = CoordinateLimit
Constraint.Coupling = CouplingJoint
