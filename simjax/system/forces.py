"""Force elements (Simbody ``Force::*``): the handles users construct.

Each element is constructed with its ``GeneralForceSubsystem`` as in Simbody. At
``realize_topology()`` all elements of one kind in one subsystem are stacked into one
frozen record (``model.ForceGroup``): their numbers become Instance-stage arrays in the
State (differentiable, settable per State), their body indices static data of the
record. Each kind's equations are its ``kernel``, in ``simjax.dynamics.forces`` (one
evaluation per group). Body forces are ``[torque about the body origin; force]`` in
Ground, Simbody's convention.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from .._stage import Stage
from ..dynamics.contact import HuntCrossleyParams, SmoothContactParams
from ..dynamics.contact import check_field as _check_field
from ..dynamics.contact import check_hunt_crossley as _check_hc
from ..dynamics.contact import check_smooth as _check_smooth
from ..dynamics.forces import actuators as _actuators
from ..dynamics.forces import bushing as _bushing
from ..dynamics.forces import contact as _contact
from ..dynamics.forces import custom as _custom
from ..dynamics.forces import gravity as _gravity
from ..dynamics.forces import limits as _limits
from ..dynamics.forces import paths as _path_forces
from ..dynamics.forces import springs as _springs
from ..dynamics.forces import tendons as _tendon_forces
from ..dynamics.forces.kernel import ForceKernel, calc_group, group_params, potential_group
from ..model.context import Context
from ..model.model import ForceGroup, Identity, Model
from ..model.state import State
from . import contact as _ct
from ._compiled import reads_cache
from .paths import GeometryPath
from .system import GeneralForceSubsystem
from .tendons import Tendon


def _bi(x: Any) -> int:
    if isinstance(x, int):
        return x
    return int(x.index)


class Force:
    """Base of every force element; construct a kind, e.g. ``Force.UniformGravity``."""

    # the kinds (assigned at the end of this module)
    UniformGravity: ClassVar[type[UniformGravity]]
    Gravity: ClassVar[type[Gravity]]
    TwoPointLinearSpring: ClassVar[type[TwoPointLinearSpring]]
    TwoPointLinearDamper: ClassVar[type[TwoPointLinearDamper]]
    TwoPointConstantForce: ClassVar[type[TwoPointConstantForce]]
    ConstantForce: ClassVar[type[ConstantForce]]
    ConstantTorque: ClassVar[type[ConstantTorque]]
    GlobalDamper: ClassVar[type[GlobalDamper]]
    MobilityLinearSpring: ClassVar[type[MobilityLinearSpring]]
    MobilityLinearDamper: ClassVar[type[MobilityLinearDamper]]
    MobilityConstantForce: ClassVar[type[MobilityConstantForce]]
    MobilityLinearStop: ClassVar[type[MobilityLinearStop]]
    CoordinateActuator: ClassVar[type[CoordinateActuator]]
    TendonActuator: ClassVar[type[TendonActuator]]
    CoordinateLimitForce: ClassVar[type[CoordinateLimitForce]]
    LinearBushing: ClassVar[type[LinearBushing]]
    DiscreteForces: ClassVar[type[DiscreteForces]]
    Custom: ClassVar[type[Custom]]

    kernel: ClassVar[ForceKernel]
    """The kind's equations (``simjax.dynamics.forces``), stored in its ``ForceGroup``."""

    def __init__(self, forces: GeneralForceSubsystem):
        if not isinstance(forces, GeneralForceSubsystem):
            raise TypeError(
                f"Force.{type(self).__name__}: the first argument must be a "
                f"GeneralForceSubsystem, got {type(forces).__name__}"
            )
        self._subsystem = forces
        self._slot: tuple[str, str, int] | None = None  # (subsystem, record prefix, row)
        self._disabled_by_default = False
        # Position among this subsystem's elements of the same kind: names the State keys of
        # kinds grouped one element per group (``Custom0``), the same in every process.
        self._ordinal = sum(type(e).__name__ == type(self).__name__ for e in forces._elements)
        forces._add(self)

    # -- grouping and parameters ---------------------------------------------------------
    def _group_key(self) -> Any:
        return type(self)

    @classmethod
    def _key_name(cls, key: Any) -> str:
        """Prefix of the group's Instance-parameter keys in the State. Never an ``id()``: the
        State's pytree structure, hence jit's cache key, must not depend on object ids."""
        return cls.__name__

    def _values(self) -> dict[str, Any]:
        """Default values of this element's Instance parameters (override)."""
        return {}

    def _instance_params(self) -> dict[str, np.ndarray]:
        vals = {k: np.asarray(v, dtype=float) for k, v in self._values().items()}
        vals["enabled"] = np.asarray(0.0 if self._disabled_by_default else 1.0)
        return vals

    def _static(self) -> Any:
        """This element's static data in its record (hashable: body indices, flags)."""
        return None

    def _declare(self, sub: GeneralForceSubsystem) -> None:
        """Allocate discrete variables at ``realize_topology`` (override; most kinds have none)."""

    # -- per-element queries ---------------------------------------------------------------
    def _slot_index(self) -> int:
        """This element's index in its group (set by ``realize_topology``)."""
        if self._slot is None:
            raise ValueError("this force was added after realize_topology(); realize it again")
        return self._slot[2]

    def _model_grp(self, state: State) -> tuple[Model, ForceGroup]:
        """The realized Model of ``state`` and this element's record in it."""
        model = self._subsystem._system.model_for(state)
        if self._slot is None:
            raise ValueError("this force was added after realize_topology(); realize it again")
        sub, prefix, i = self._slot
        for g in model.force_groups:
            if g.subsystem == sub and g.prefix == prefix and i < g.size and g.kernel == type(self).kernel:
                return model, g
        raise ValueError("force element not found in the realized System")

    def _param_name(self, name: str) -> str:
        return f"{type(self)._key_name(self._group_key())}.{name}"

    def _get(self, state: State, name: str) -> jax.Array:
        return state.instance[self._subsystem.name][self._param_name(name)][self._slot_index()]

    def _set(self, state: State, name: str, value: Any) -> State:
        self._model_grp(state)
        key = self._param_name(name)
        arr = state.instance[self._subsystem.name][key]
        return state.with_instance(
            self._subsystem.name, key, arr.at[self._slot_index()].set(jnp.asarray(value, arr.dtype))
        )

    @reads_cache
    def calc_potential_energy(self, state: State) -> jax.Array:
        """This element's potential energy (needs Position)."""
        state.require(Stage.POSITION, f"{type(self).__name__}.calc_potential_energy")
        model, g = self._model_grp(state)
        return potential_group(Context(model, state, g.subsystem), g, self._slot_index())

    @reads_cache
    def calc_force_contribution(self, state: State) -> tuple[jax.Array, jax.Array]:
        """This element's ``(body_forces (nb, 6), mobility_forces (nu,))`` (Velocity)."""
        state.require(Stage.VELOCITY, f"{type(self).__name__}.calc_force_contribution")
        model, g = self._model_grp(state)
        return calc_group(Context(model, state, g.subsystem), g, self._slot_index())

    @reads_cache
    def calc_power(self, state: State) -> jax.Array:
        """Power this element delivers to the system, ``sum F.V + tau.u`` (Velocity)."""
        F, tau = self.calc_force_contribution(state)
        model = self._subsystem._system.model_for(state)
        V = model.body_velocities(state)
        return jnp.sum(F * V) + tau @ state.u

    def disable(self, state: State) -> State:
        """New State with this element disabled (Instance stage)."""
        return self._set(state, "enabled", 0.0)

    def enable(self, state: State) -> State:
        """New State with this element enabled (Instance stage)."""
        return self._set(state, "enabled", 1.0)

    def is_disabled(self, state: State) -> jax.Array:
        """Whether the element is disabled in this State."""
        return self._get(state, "enabled") == 0

    def set_disabled_by_default(self, disabled: bool) -> None:
        """Topology-stage default of the enabled flag."""
        self._disabled_by_default = bool(disabled)
        self._subsystem._system.invalidate_topology()


# ------------------------------------------------------------------------------ gravity


class UniformGravity(Force):
    """Uniform gravity ``g`` (a vector in Ground) on every mobilized body.

    Potential energy ``-sum m (g . p_com + zero_height)`` (Simbody's formula: the zero
    height is not scaled by ``|g|``)."""

    kernel = _gravity.UniformGravity()

    def __init__(self, forces: GeneralForceSubsystem, matter: Any, g: Any, zero_height: float = 0.0):
        self._g = np.asarray(g, dtype=float).reshape(3)
        self._z0 = float(zero_height)
        super().__init__(forces)

    def _values(self):
        return {"g": self._g, "zero_height": self._z0}

    def set_gravity(self, state: State, g: Any) -> State:
        """New State with the gravity vector changed."""
        return self._set(state, "g", g)

    def get_gravity(self, state: State) -> jax.Array:
        """The gravity vector."""
        return self._get(state, "g")

    def set_zero_height(self, state: State, h: Any) -> State:
        """New State with the zero height changed."""
        return self._set(state, "zero_height", h)


class Gravity(Force):
    """Gravity of ``magnitude`` along ``direction`` on every body not excluded.

    ``Force.Gravity(forces, matter, direction, magnitude, zero_height=0)`` or
    ``Force.Gravity(forces, matter, g_vector)``. Bodies are excluded per State with
    ``set_body_is_excluded`` (Instance stage) or by default with
    ``set_default_body_is_excluded``."""

    kernel = _gravity.Gravity()

    def __init__(
        self,
        forces: GeneralForceSubsystem,
        matter: Any,
        direction: Any,
        magnitude: float | None = None,
        zero_height: float = 0.0,
    ):
        d = np.asarray(direction, dtype=float)
        if d.shape != (3,) or not np.all(np.isfinite(d)):
            raise ValueError(
                f"Force.Gravity: direction must be a finite 3-vector (x, y, z) in Ground, got "
                f"{np.asarray(direction).tolist()}; e.g. (0, -9.81, 0)"
            )
        if magnitude is None:
            magnitude = float(np.linalg.norm(d))
            d = d / magnitude if magnitude > 0 else np.array([0.0, -1.0, 0.0])
        else:
            n = np.linalg.norm(d)
            if n == 0:
                raise ValueError("Force.Gravity: direction must be non-zero")
            d = d / n
        self._dir, self._mag, self._z0 = d, float(magnitude), float(zero_height)
        self._matter = matter
        self._excluded: set[int] = set()
        super().__init__(forces)

    def _group_key(self):
        return self  # the exclusion mask is per body: one element per group

    @classmethod
    def _key_name(cls, key):
        return f"{cls.__name__}{key._ordinal}"  # one group per element

    def _values(self):
        nb = self._matter.get_num_bodies()
        mask = np.ones(nb)
        mask[0] = 0.0
        for b in self._excluded:
            mask[b] = 0.0
        return {"direction": self._dir, "magnitude": self._mag, "zero_height": self._z0, "included": mask}

    def set_default_body_is_excluded(self, body: Any, excluded: bool) -> None:
        """Topology-stage default: exclude (or include) one body."""
        (self._excluded.add if excluded else self._excluded.discard)(_bi(body))
        self._subsystem._system.invalidate_topology()

    def set_body_is_excluded(self, state: State, body: Any, excluded: bool) -> State:
        """New State with one body excluded from (or included in) gravity."""
        key = self._param_name("included")
        arr = state.instance[self._subsystem.name][key]
        arr = arr.at[0, _bi(body)].set(0.0 if excluded else 1.0)
        return state.with_instance(self._subsystem.name, key, arr)

    def get_body_is_excluded(self, state: State, body: Any) -> jax.Array:
        """Whether a body is excluded."""
        return self._get(state, "included")[_bi(body)] == 0

    def set_magnitude(self, state: State, g: Any) -> State:
        """New State with the magnitude changed."""
        return self._set(state, "magnitude", g)

    def set_direction(self, state: State, d: Any) -> State:
        """New State with the (unit-normalised) direction changed."""
        return self._set(state, "direction", sp.safe_normalize(jnp.asarray(d)))


# ------------------------------------------------------------------------------ two-point


class _TwoPoint(Force):
    def __init__(self, forces, body1, station1, body2, station2):
        b1, b2 = _bi(body1), _bi(body2)
        if b1 == b2:
            raise ValueError(f"Force.{type(self).__name__}: body1 and body2 must differ (both are body {b1})")
        self._b = (b1, b2)
        self._s1 = np.asarray(station1, dtype=float).reshape(3)
        self._s2 = np.asarray(station2, dtype=float).reshape(3)
        super().__init__(forces)

    def _static(self):
        return self._b

    def _pts(self) -> dict[str, Any]:
        return {"station1": self._s1, "station2": self._s2}


class TwoPointLinearSpring(_TwoPoint):
    """Spring between two stations: tension ``k (d - x0)``; energy ``k (d - x0)^2 / 2``."""

    kernel = _springs.TwoPointLinearSpring()

    def __init__(self, forces, body1, station1, body2, station2, stiffness: float, x0: float):
        if stiffness < 0:
            raise ValueError("Force.TwoPointLinearSpring: stiffness must be >= 0")
        self._k, self._x0 = float(stiffness), float(x0)
        super().__init__(forces, body1, station1, body2, station2)

    def _values(self):
        return {**self._pts(), "stiffness": self._k, "x0": self._x0}

    def set_stiffness(self, state: State, k: Any) -> State:
        """New State with the stiffness changed."""
        return self._set(state, "stiffness", k)

    def set_rest_length(self, state: State, x0: Any) -> State:
        """New State with the rest length changed."""
        return self._set(state, "x0", x0)


class TwoPointLinearDamper(_TwoPoint):
    """Damper between two stations: force ``-c * (rate of separation)`` along the line."""

    kernel = _springs.TwoPointLinearDamper()

    def __init__(self, forces, body1, station1, body2, station2, damping: float):
        if damping < 0:
            raise ValueError("Force.TwoPointLinearDamper: damping must be >= 0")
        self._c = float(damping)
        super().__init__(forces, body1, station1, body2, station2)

    def _values(self):
        return {**self._pts(), "damping": self._c}

    def set_damping(self, state: State, c: Any) -> State:
        """New State with the damping changed."""
        return self._set(state, "damping", c)


class TwoPointConstantForce(_TwoPoint):
    """Constant-magnitude force along the line between two stations; positive pushes them
    apart. Like Simbody it reports no potential energy (``calc_power`` gives its power)."""

    kernel = _springs.TwoPointConstantForce()

    def __init__(self, forces, body1, station1, body2, station2, force: float):
        self._f = float(force)
        super().__init__(forces, body1, station1, body2, station2)

    def _values(self):
        return {**self._pts(), "force": self._f}

    def set_force(self, state: State, f: Any) -> State:
        """New State with the force magnitude changed."""
        return self._set(state, "force", f)


# ------------------------------------------------------------------------------ body-fixed


class ConstantForce(Force):
    """A constant force (in Ground) applied at a station of one body. No energy."""

    kernel = _springs.ConstantForce()

    def __init__(self, forces, body, station, force):
        self._b = _bi(body)
        self._s = np.asarray(station, dtype=float).reshape(3)
        self._f = np.asarray(force, dtype=float).reshape(3)
        super().__init__(forces)

    def _values(self):
        return {"station": self._s, "force": self._f}

    def _static(self):
        return self._b

    def set_force(self, state: State, f: Any) -> State:
        """New State with the force vector changed."""
        return self._set(state, "force", f)


class ConstantTorque(Force):
    """A constant torque (in Ground) on one body. No energy."""

    kernel = _springs.ConstantTorque()

    def __init__(self, forces, body, torque):
        self._b = _bi(body)
        self._t = np.asarray(torque, dtype=float).reshape(3)
        super().__init__(forces)

    def _values(self):
        return {"torque": self._t}

    def _static(self):
        return self._b

    def set_torque(self, state: State, t: Any) -> State:
        """New State with the torque changed."""
        return self._set(state, "torque", t)


class GlobalDamper(Force):
    """Mobility force ``-c u`` on every generalized speed."""

    kernel = _springs.GlobalDamper()

    def __init__(self, forces, matter, damping: float):
        if damping < 0:
            raise ValueError("Force.GlobalDamper: damping must be >= 0")
        self._c = float(damping)
        super().__init__(forces)

    def _values(self):
        return {"damping": self._c}

    def set_damping(self, state: State, c: Any) -> State:
        """New State with the damping changed."""
        return self._set(state, "damping", c)


# ------------------------------------------------------------------------------ mobility


class _Mobility(Force):
    """Acts on one coordinate/speed ``which`` of one mobilizer."""

    def __init__(self, forces, body, which: int):
        self._body = body
        self._which = int(which)
        mob = body.mobilizer
        if not 0 <= self._which < mob.nu:
            raise ValueError(
                f"Force.{type(self).__name__}: {body.name} has {mob.nu} speeds; which={which} is out of range"
            )
        super().__init__(forces)

    def _static(self):
        return (self._body.index, self._which)


def _check_q_is_u(body: Any, which: int, what: str) -> None:
    mob = body.mobilizer
    N = mob.N(jnp.asarray(mob.default_q()), jnp.asarray(mob.default_params()))
    if mob.nq != mob.nu or N is not None:
        raise ValueError(
            f"Force.{what}: {body.name}'s {mob.kind} mobilizer has qdot != u, so its coordinate "
            f"{which} has no matching speed; use a mobilizer whose speeds are coordinate rates"
        )


class MobilityLinearSpring(_Mobility):
    """Generalized force ``-k (q - q0)`` on one coordinate; energy ``k (q - q0)^2 / 2``."""

    kernel = _springs.MobilityLinearSpring()

    def __init__(self, forces, body, which: int, stiffness: float, q_zero: float):
        _check_q_is_u(body, which, "MobilityLinearSpring")
        self._k, self._q0 = float(stiffness), float(q_zero)
        super().__init__(forces, body, which)

    def _values(self):
        return {"stiffness": self._k, "q_zero": self._q0}

    def set_stiffness(self, state: State, k: Any) -> State:
        """New State with the stiffness changed."""
        return self._set(state, "stiffness", k)

    def set_q_zero(self, state: State, q0: Any) -> State:
        """New State with the zero position changed."""
        return self._set(state, "q_zero", q0)


class MobilityLinearDamper(_Mobility):
    """Generalized force ``-c u`` on one speed."""

    kernel = _springs.MobilityLinearDamper()

    def __init__(self, forces, body, which: int, damping: float):
        if damping < 0:
            raise ValueError("Force.MobilityLinearDamper: damping must be >= 0")
        self._c = float(damping)
        super().__init__(forces, body, which)

    def _values(self):
        return {"damping": self._c}

    def set_damping(self, state: State, c: Any) -> State:
        """New State with the damping changed."""
        return self._set(state, "damping", c)


class MobilityConstantForce(_Mobility):
    """Constant generalized force on one speed."""

    kernel = _springs.MobilityConstantForce()

    def __init__(self, forces, body, which: int, force: float):
        self._f = float(force)
        super().__init__(forces, body, which)

    def _values(self):
        return {"force": self._f}

    def set_force(self, state: State, f: Any) -> State:
        """New State with the force changed."""
        return self._set(state, "force", f)


class MobilityLinearStop(_Mobility):
    """Stop on one coordinate between ``q_low`` and ``q_high``: past a bound by ``x``,
    generalized force ``-k x (1 + d xdot)`` pushing back (never pulling);
    energy ``k x^2 / 2``. Simbody's ``MobilityLinearStop``."""

    kernel = _springs.MobilityLinearStop()

    def __init__(
        self, forces, body, which: int, stiffness: float, dissipation: float, q_low: float, q_high: float
    ):
        _check_q_is_u(body, which, "MobilityLinearStop")
        if q_low > q_high:
            raise ValueError(f"Force.MobilityLinearStop: q_low={q_low} > q_high={q_high}")
        if stiffness < 0 or dissipation < 0:
            raise ValueError("Force.MobilityLinearStop: stiffness and dissipation must be >= 0")
        self._v = {
            "stiffness": float(stiffness),
            "dissipation": float(dissipation),
            "q_low": float(q_low),
            "q_high": float(q_high),
        }
        super().__init__(forces, body, which)

    def _values(self):
        return dict(self._v)

    def set_bounds(self, state: State, q_low: Any, q_high: Any) -> State:
        """New State with the bounds changed."""
        return self._set(self._set(state, "q_low", q_low), "q_high", q_high)

    def set_material_properties(self, state: State, stiffness: Any, dissipation: Any) -> State:
        """New State with stiffness and dissipation changed."""
        return self._set(self._set(state, "stiffness", stiffness), "dissipation", dissipation)


class CoordinateActuator(_Mobility):
    """An actuator on one speed of one mobilizer, driven by one control held in the State.

    OpenSim's ``CoordinateActuator`` and MuJoCo's ``general`` actuator on a joint. With
    control ``c`` (clamped to ``control_range`` when given), activation ``a`` (``a = c``
    without activation dynamics), length ``l = gear q`` and velocity ``v = gear u``, the
    actuator's force is

        ``s = (g0 + g1 l + g2 v) a + (b0 + b1 l + b2 v)``  (``gain``, ``bias``)

    clamped to ``force_range`` when given, and the generalized force on the speed is
    ``gear s``. On a speed that is not its coordinate's rate (a Free or Ball body's angular
    velocity) there is no length: the gain and bias may depend on the velocity only. An
    OpenSim ``CoordinateActuator`` of optimal force ``F`` is ``gain=(F, 0, 0)``; MuJoCo's
    ``motor`` is ``gain=(1, 0, 0)`` with its ``gear``, ``position`` (kp, kv) is
    ``gain=(kp, 0, 0), bias=(0, -kp, -kv)``, ``velocity`` (kv) ``gain=(kv, 0, 0),
    bias=(0, 0, -kv)``.

    Activation dynamics (MuJoCo's ``dyntype``), the activation being an auxiliary variable
    in the State's ``z``: ``"integrator"``, ``da/dt = c``; ``"filter"`` (and
    ``"filterexact"``, the same differential equation), ``da/dt = (c - a) / time_constant``.
    With ``activation_range`` the activation stops at its bounds (its rate is zeroed there
    when it points out).

    MuJoCo's muscle: ``gain="muscle"`` makes the gain ``-F0 FL(L) FV(V)`` and
    ``bias="muscle"`` the bias the passive ``-F0 fpmax FP(L)`` (``mju_muscleGain``,
    ``mju_muscleBias``; :mod:`simjax.dynamics.forces.actuators`), from ``muscle``, MuJoCo's
    nine ``gainprm`` (range0, range1, force, scale, lmin, lmax, vmax, fpmax, fvmax;
    ``force`` < 0: ``F0 = scale / acc0``), the actuator's ``length_range`` (the lengths that
    map onto range0..range1) and ``acc0`` (MuJoCo's ``actuator_acc0``, ``|M^-1 moment|`` at
    qpos0); ``muscle_bias`` gives the bias its own nine (MuJoCo's ``biasprm``) when they
    differ. ``dynamics="muscle"``: ``da/dt`` is ``mju_muscleDynamics`` with
    ``muscle_dynamics=(tau_act, tau_deact, tausmooth)``. The muscle's force is negative
    (it pulls, shortening the actuator's length).

    The controls of every actuator of a ``GeneralForceSubsystem`` are one discrete variable
    of the State (Dynamics stage; in the order the actuators were created), so a batch of
    control vectors ``vmap``s and ``grad`` flows to them: set them all with
    ``system.set_controls(state, c)`` or one with ``set_control``. Every number above is an
    Instance-stage parameter of the State.
    """

    kernel = _actuators.CoordinateActuator()

    _DYNAMICS: ClassVar[dict[str, int]] = _actuators.DYNAMICS

    def __init__(
        self,
        forces,
        body,
        which: int,
        *,
        gear: float = 1.0,
        gain: Any = (1.0, 0.0, 0.0),
        bias: Any = (0.0, 0.0, 0.0),
        control_range: Any = None,
        force_range: Any = None,
        dynamics: str = "none",
        time_constant: float = 1.0,
        activation_range: Any = None,
        name: str | None = None,
        muscle: Any = None,
        muscle_bias: Any = None,
        length_range: Any = (0.0, 1.0),
        acc0: float = 1.0,
        muscle_dynamics: Any = (0.01, 0.04, 0.0),
    ):
        what = f"Force.CoordinateActuator {name!r}" if name else "Force.CoordinateActuator"
        gain_kind = int(isinstance(gain, str) and gain == "muscle")
        bias_kind = int(isinstance(bias, str) and bias == "muscle")
        for k, v in (("gain", gain), ("bias", bias)):
            if isinstance(v, str) and v != "muscle":
                raise ValueError(f"{what}: {k} must be three numbers or 'muscle', got {v!r}")
        g3 = np.zeros(3) if gain_kind else _three(gain, "gain", what)
        b3 = np.zeros(3) if bias_kind else _three(bias, "bias", what)
        mg = _muscle_params(muscle if gain_kind else None, what)
        mb = _muscle_params((muscle if muscle_bias is None else muscle_bias) if bias_kind else None, what)
        lr = np.asarray(length_range, dtype=float).reshape(-1)
        if lr.shape != (2,) or not np.all(np.isfinite(lr)):
            raise ValueError(f"{what}: length_range must be two finite numbers, got {length_range!r}")
        md = np.asarray(muscle_dynamics, dtype=float).reshape(-1)
        if md.shape != (3,) or not np.all(np.isfinite(md)) or md[2] < 0:
            raise ValueError(
                f"{what}: muscle_dynamics must be (tau_act, tau_deact, tausmooth >= 0), "
                f"got {muscle_dynamics!r}"
            )
        if not (np.isfinite(acc0) and acc0 >= 0):
            raise ValueError(f"{what}: acc0 must be >= 0, got {acc0}")
        self._gain_kind, self._bias_kind = gain_kind, bias_kind
        tendon = getattr(self, "_tendon", None)
        if tendon is not None:
            self._q_is_u = True  # the length is the tendon's
        else:
            try:
                _check_q_is_u(body, which, "CoordinateActuator")
                self._q_is_u = True
            except ValueError:
                if g3[1] or b3[1] or gain_kind or bias_kind:
                    raise
                self._q_is_u = False  # no length: the actuator acts on the speed alone
        if dynamics not in self._DYNAMICS:
            raise ValueError(f"{what}: dynamics must be one of {list(self._DYNAMICS)}, got {dynamics!r}")
        self.name = name or f"actuator{sum(isinstance(e, CoordinateActuator) for e in forces._elements)}"
        self._dyn = self._DYNAMICS[dynamics]
        self._v: dict[str, Any] = {
            "gear": float(gear),
            "gain": g3,
            "bias": b3,
            "control_range": _range(control_range, "control_range", what),
            "force_range": _range(force_range, "force_range", what),
            "activation_range": _range(activation_range, "activation_range", what),
            "time_constant": float(time_constant),
            "muscle_gain": mg,
            "muscle_bias": mb,
            "length_range": lr,
            "acc0": float(acc0),
            "muscle_dynamics": md,
        }
        if self._dyn == 2 and not float(time_constant) > 0:
            raise ValueError(f"{what}: a filter needs time_constant > 0, got {time_constant}")
        if tendon is not None:
            self._body, self._which = body, 0
            Force.__init__(self, forces)
        else:
            super().__init__(forces, body, which)

    def _values(self):
        return dict(self._v)

    _control_rank: ClassVar[int] = 0  # the coordinate actuators' controls come first

    def _static(self):
        z_slot = -1
        if self._dyn:
            acts = [e for e in self._subsystem._elements if isinstance(e, CoordinateActuator) and e._dyn]
            z_slot = self._subsystem._actuator_z_offset + acts.index(self)
        tendon = getattr(self, "_tendon", None)
        t = -1 if tendon is None else tendon.index
        return (self._body.index, self._which, self._dyn, z_slot, int(self._q_is_u), t, self._gain_kind,
                self._bias_kind)  # fmt: skip

    def _declare(self, sub: GeneralForceSubsystem) -> None:
        acts = [e for e in sub._elements if isinstance(e, CoordinateActuator)]
        if acts[0] is not self:
            return  # the first actuator reserves the activations of all
        n_act = sum(1 for e in acts if e._dyn)
        if n_act:
            sub._actuator_z_offset = sub.reserve_z(np.zeros(n_act))

    # -- per-element access --------------------------------------------------------------
    def get_control(self, state: State) -> jax.Array:
        """This actuator's control (unclamped, as set)."""
        return state.discrete[self._subsystem.name][_CONTROLS][self._slot_index()]

    def set_control(self, state: State, c: Any) -> State:
        """New State with this actuator's control set."""
        cur = state.discrete[self._subsystem.name][_CONTROLS]
        return state.with_discrete(self._subsystem.name, _CONTROLS, cur.at[self._slot_index()].set(c))

    def get_activation(self, state: State) -> jax.Array:
        """The activation (the clamped control when the actuator has no dynamics)."""
        model, g = self._model_grp(state)
        ctx = Context(model, state, g.subsystem)
        return _actuators.activations(group_params(ctx, g), ctx, g.statics)[self._slot_index()]

    def get_actuation(self, state: State) -> jax.Array:
        """The actuator's force ``s`` (before the gear; OpenSim's actuation, MuJoCo's
        ``actuator_force``) (needs Velocity)."""
        state.require(Stage.VELOCITY, "CoordinateActuator.get_actuation")
        model, g = self._model_grp(state)
        ctx = Context(model, state, g.subsystem)
        return _actuators.actuation(group_params(ctx, g), ctx, g.statics)[self._slot_index()]


def _muscle_params(x: Any, who: str) -> np.ndarray:
    """MuJoCo's nine muscle parameters, checked as its compiler checks them (MuJoCo's
    defaults when None)."""
    if x is None:
        return np.array([0.75, 1.05, -1.0, 200.0, 0.5, 1.6, 1.5, 1.3, 1.2])
    a = np.asarray(x, dtype=float).reshape(-1)
    if a.shape != (9,) or not np.all(np.isfinite(a)):
        raise ValueError(
            f"{who}: muscle must be nine finite numbers (range0, range1, force, scale, lmin, lmax, vmax, "
            f"fpmax, fvmax), got {x!r}"
        )
    if a[0] >= a[1]:
        raise ValueError(f"{who}: the muscle's range[0] < range[1] is required, got {a[:2]}")
    if a[4] >= 1 or a[5] <= 1:
        raise ValueError(f"{who}: the muscle's lmin < 1 < lmax is required, got lmin={a[4]}, lmax={a[5]}")
    if min(a[3], a[6], a[7], a[8]) <= 0:
        raise ValueError(
            f"{who}: the muscle's scale, vmax, fpmax and fvmax must be > 0, "
            f"got {a[3]}, {a[6]}, {a[7]}, {a[8]}"
        )
    return a


class TendonActuator(CoordinateActuator):
    """MuJoCo's actuator on a tendon: a ``CoordinateActuator`` (the same controls,
    activation dynamics, gain and bias) whose length and velocity are ``gear`` times the
    ``sj.Tendon``'s length and lengthening speed, and whose force ``s`` pulls along the
    tendon: generalized forces ``J^T gear s`` (``J = dL/du``, MuJoCo's ``actuator_moment``
    over ``gear``). Its controls share the subsystem's control vector with the other
    actuators, in the order of creation."""

    def __init__(self, forces: Any, tendon: Tendon, **kwargs: Any):
        if not isinstance(tendon, Tendon):
            raise TypeError(f"TendonActuator: tendon must be an sj.Tendon, got {type(tendon).__name__}")
        self._tendon = tendon
        super().__init__(forces, tendon._matter.Ground(), 0, **kwargs)

    def _group_key(self) -> Any:
        return CoordinateActuator  # one group with the joint actuators: one control vector

    @classmethod
    def _key_name(cls, key: Any) -> str:
        return CoordinateActuator.__name__

    def get_tendon(self) -> Tendon:
        """The tendon the actuator pulls along."""
        return self._tendon


class CoordinateLimitForce(_Mobility):
    """OpenSim's ``CoordinateLimitForce``: a soft stop past each end of a coordinate's range.

    With ``S(x) = 10x^3 - 15x^4 + 6x^5`` (Simbody's smooth step, clamped to [0, 1]) rising
    over ``transition`` past each limit, ``k_up = upper_stiffness S((q - upper_limit) /
    transition)`` and ``k_lo = lower_stiffness S((lower_limit - q) / transition)``, the
    generalized force is

        ``-k_up (q - upper_limit) + k_lo (lower_limit - q) - damping (S_up + S_lo) qdot``

    (zero inside the range), and the potential energy is the integral of the elastic part.
    Units are SI (N m/rad, rad; ``load_osim`` converts OpenSim's per-degree values).
    """

    kernel = _limits.CoordinateLimitForce()

    def __init__(
        self,
        forces,
        body,
        which: int,
        upper_stiffness: float,
        upper_limit: float,
        lower_stiffness: float,
        lower_limit: float,
        damping: float,
        transition: float,
        name: str | None = None,
    ):
        what = f"Force.CoordinateLimitForce {name!r}" if name else "Force.CoordinateLimitForce"
        _check_q_is_u(body, which, "CoordinateLimitForce")
        if not (upper_stiffness >= 0 and lower_stiffness >= 0 and damping >= 0):
            raise ValueError(f"{what}: stiffnesses and damping must be >= 0")
        if not transition > 0:
            raise ValueError(f"{what}: transition must be > 0, got {transition}")
        if lower_limit > upper_limit:
            raise ValueError(f"{what}: lower_limit {lower_limit} is above upper_limit {upper_limit}")
        self.name = name or "coordinate_limit_force"
        self._v = {
            "upper_stiffness": float(upper_stiffness),
            "upper_limit": float(upper_limit),
            "lower_stiffness": float(lower_stiffness),
            "lower_limit": float(lower_limit),
            "damping": float(damping),
            "transition": float(transition),
        }
        super().__init__(forces, body, which)

    def _values(self):
        return dict(self._v)


_CONTROLS = _actuators.CONTROLS


def _three(x: Any, what: str, who: str) -> np.ndarray:
    a = np.asarray(x, dtype=float).reshape(-1)
    if a.size > 3 and np.any(a[3:] != 0):
        raise ValueError(
            f"{who}: {what} has terms past the third ({a}); only (c0, c_length, c_velocity) exist"
        )
    out = np.zeros(3)
    out[: min(3, a.size)] = a[:3]
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{who}: {what} must be finite, got {out}")
    return out


def _range(x: Any, what: str, who: str) -> np.ndarray:
    if x is None:
        return np.array([-np.inf, np.inf])
    a = np.asarray(x, dtype=float).reshape(-1)
    if a.shape != (2,) or np.isnan(a).any() or a[0] > a[1]:
        raise ValueError(f"{who}: {what} must be (low, high) with low <= high, got {x!r}")
    return a


# ------------------------------------------------------------------------------ bushing


class LinearBushing(Force):
    """Six-dof linear spring-damper between frame F on body 1 and frame M on body 2.

    Coordinates are body-fixed X-Y-Z angles of ``R_FM`` and ``p_FM`` in F (as Simbody's
    Bushing mobilizer); generalized force ``-(k q + c qdot)`` per coordinate, mapped to the
    two bodies through the exact kinematics. Energy ``sum k q^2 / 2``. Stiffness and
    damping are ``[rx, ry, rz, px, py, pz]``.
    """

    kernel = _bushing.LinearBushing()

    def __init__(self, forces, body1, X_B1F, body2, X_B2M, stiffness, damping):
        b1, b2 = _bi(body1), _bi(body2)
        if b1 == b2:
            raise ValueError("Force.LinearBushing: body1 and body2 must differ")
        self._b = (b1, b2)
        self._XF, self._XM = X_B1F, X_B2M
        self._k = np.asarray(stiffness, dtype=float).reshape(6)
        self._c = np.asarray(damping, dtype=float).reshape(6)
        super().__init__(forces)

    def _values(self):
        return {
            "XF_R": np.asarray(self._XF.R),
            "XF_p": np.asarray(self._XF.p),
            "XM_R": np.asarray(self._XM.R),
            "XM_p": np.asarray(self._XM.p),
            "stiffness": self._k,
            "damping": self._c,
        }

    def _static(self):
        return self._b


# ------------------------------------------------------------------------------ contact


def _concrete(value: Any) -> bool:
    return not isinstance(value, jax.core.Tracer)


def _surface_of(matter: Any, surface: Any, who: str) -> Any:
    reg = _ct.registry(matter)
    i = int(surface)
    if not 0 <= i < len(reg.surfaces):
        raise ValueError(
            f"{who}: no contact surface {surface} (the matter subsystem has {len(reg.surfaces)}); "
            "use the index body.add_contact_surface(...) returned"
        )
    return reg.surfaces[i]


def _add_pair(matter: Any, a: int, b: int) -> None:
    """Make surfaces ``a`` and ``b`` an explicit candidate pair (once)."""
    if any({i, j} == {a, b} for i, j, _ in _ct.registry(matter).pairs):
        return
    matter.add_contact_pair(a, b, margin=0.0)


class HuntCrossleyForce(Force):
    """Simbody's ``HuntCrossleyForce`` (and OpenSim's): compliant point contact between
    spheres and half-spaces, with Hunt–Crossley dissipation and Simbody's friction law.

    ``sj.HuntCrossleyForce(forces, matter, transition_velocity=0.01)``, then
    ``set_body_parameters(surface, stiffness, dissipation, static_friction,
    dynamic_friction, viscous_friction)`` for each contact surface (an index from
    ``body.add_contact_surface``; a sphere or a half-space) it acts on. The force acts on
    every two of its surfaces on different bodies (Simbody's contact set of the force;
    half-space pairs excepted); they become candidate pairs of the matter subsystem.

    Per contact, with depth ``d``, surfaces 1 and 2 (``ki = Ei^(2/3)`` from the
    stiffnesses ``Ei``): ``s1 = k2/(k1 + k2)``, ``k = k1 s1``, ``c = c1 s1 + c2 (1 - s1)``,
    Hertz force ``fH = 4/3 k d sqrt(R k d)`` (``R``: a sphere's radius against a half-space,
    ``r1 r2/(r1 + r2)`` for two spheres), normal force ``f = fH (1 + 3/2 c vn)`` (``vn``
    the approach speed), friction ``f [min(vs/vt, 1) (ud + 2 (us - ud)/(1 + (vs/vt)^2)) + uv
    vs]`` against the slip velocity, each friction coefficient the harmonic mean ``2 a b/(a +
    b)`` of the two surfaces'; applied at the contact point moved towards the softer surface
    (:func:`simjax.dynamics.contact.hunt_crossley`). No force out of contact or where ``f <=
    0``. Potential energy ``2/5 fH d`` per contact in contact (a Position-stage quantity:
    all of them, where Simbody, moving, counts only those its walk reaches).

    With ``stop_at_release=True`` (default: what Simbody 3.9 and OpenSim 4.6 compute) a
    contact that releases (in contact with ``f <= 0``) also ends the force's walk over its
    contacts: the contacts after it, in Simbody's order
    (:func:`simjax.dynamics.forces.contact.simbody_order`), get no force in that State;
    ``False`` gives each contact its own force.

    Every number is an Instance-stage parameter of the State (``set_stiffness(state, E,
    surface)``, ...): ``jax.grad`` reaches it and a batch of States may hold different
    values. Every pair is evaluated in every State (static shapes: ``vmap`` over States
    with different contacts compiles once). Out-of-range values (negative stiffness or
    friction, non-positive transition velocity, non-finite) raise ``ValueError`` naming
    the force, the surface and the field; traced values are not checked.
    """

    kernel = _contact.HuntCrossley()

    def __init__(
        self,
        forces: GeneralForceSubsystem,
        matter: Any,
        transition_velocity: float = 0.01,
        *,
        name: str | None = None,
        stop_at_release: bool = True,
    ):
        self._matter = matter
        self._surfaces: list[int] = []
        self._params: dict[int, HuntCrossleyParams] = {}
        self._stop = bool(stop_at_release)
        n = sum(isinstance(e, HuntCrossleyForce) for e in forces._elements)
        self.name = name or f"hunt_crossley{n}"
        _check_hc(f"HuntCrossleyForce {self.name!r}", HuntCrossleyParams(1.0), transition_velocity)
        self._vt = float(transition_velocity)
        super().__init__(forces)

    def _group_key(self):
        return self  # surfaces and pairs are per element: one element per group

    @classmethod
    def _key_name(cls, key):
        return f"{cls.__name__}{key._ordinal}"

    def set_body_parameters(
        self,
        surface: int,
        stiffness: float,
        dissipation: float = 0.0,
        static_friction: float = 0.0,
        dynamic_friction: float = 0.0,
        viscous_friction: float = 0.0,
    ) -> None:
        """Add a contact surface to the force (or change its default parameters): Simbody's
        ``setBodyParameters``, OpenSim's ``ContactParameters``. ``stiffness`` ``E`` (N/m^2,
        positive), ``dissipation`` ``c`` (s/m), the static, dynamic (-) and viscous (s/m)
        friction coefficients (non-negative). A topology change (defaults of the State)."""
        who = f"HuntCrossleyForce {self.name!r}"
        att = _surface_of(self._matter, surface, who)
        kind = att.surface.geometry.kind
        if kind not in ("sphere", "plane"):
            raise ValueError(
                f"{who}: surface {surface} ({att.surface.name or kind}) is a {kind}; Hunt-Crossley "
                "contact is modelled for spheres and half-spaces only (Simbody's point contacts)"
            )
        p = HuntCrossleyParams(
            float(stiffness),
            float(dissipation),
            float(static_friction),
            float(dynamic_friction),
            float(viscous_friction),
        )
        _check_hc(f"{who}, surface {att.surface.name or surface!r}", p, self._vt)
        s = int(surface)
        if s not in self._params:
            reg = _ct.registry(self._matter)
            for o in self._surfaces:
                other = reg.surfaces[o]
                if other.body != att.body and not (kind == "plane" == other.surface.geometry.kind):
                    _add_pair(self._matter, o, s)
            self._surfaces.append(s)
        self._params[s] = p
        self._subsystem._system.invalidate_topology()

    def get_surfaces(self) -> tuple[int, ...]:
        """The force's contact surfaces, in the order they were added."""
        return tuple(self._surfaces)

    def _values(self):
        v = {k: np.array([getattr(self._params[s], k) for s in self._surfaces]) for k in _HC_FIELDS}
        return {**v, "transition_velocity": self._vt}

    def _static(self):
        reg = _ct.registry(self._matter)
        att = [reg.surfaces[s] for s in self._surfaces]
        kinds = [a.surface.geometry.kind for a in att]
        pairs = tuple(
            (i, j)
            for i in range(len(att))
            for j in range(i + 1, len(att))
            if att[i].body != att[j].body and not (kinds[i] == "plane" == kinds[j])
        )
        centres = tuple(tuple(float(x) for x in a.p_BS) for a in att)
        radii = tuple(
            float(a.surface.geometry.size[0]) if k == "sphere" else np.inf for a, k in zip(att, kinds)
        )
        return (tuple(self._surfaces), tuple(a.body for a in att), centres, radii, pairs, self._stop)

    def _index(self, surface: Any) -> int:
        s = int(surface)
        if s not in self._params:
            raise ValueError(
                f"HuntCrossleyForce {self.name!r}: surface {surface} is not one of its surfaces "
                f"{self._surfaces}; add it with set_body_parameters"
            )
        return self._surfaces.index(s)

    def _set_surface(self, state: State, field: str, value: Any, surface: Any) -> State:
        if _concrete(value):
            who = f"HuntCrossleyForce {self.name!r}" + ("" if surface is None else f", surface {surface}")
            _check_field(who, field, value, positive=field == "stiffness")
        self._model_grp(state)
        key = self._param_name(field)
        arr = state.instance[self._subsystem.name][key]
        cols = slice(None) if surface is None else self._index(surface)
        arr = arr.at[self._slot_index(), cols].set(jnp.asarray(value, arr.dtype))
        return state.with_instance(self._subsystem.name, key, arr)

    def _get_surface(self, state: State, field: str, surface: Any) -> jax.Array:
        return self._get(state, field)[self._index(surface)]

    def set_stiffness(self, state: State, stiffness: Any, surface: Any = None) -> State:
        """New State with a surface's stiffness ``E`` (every surface's when ``surface`` is
        None, as OpenSim's ``setStiffness``)."""
        return self._set_surface(state, "stiffness", stiffness, surface)

    def get_stiffness(self, state: State, surface: Any) -> jax.Array:
        """A surface's stiffness in the State."""
        return self._get_surface(state, "stiffness", surface)

    def set_dissipation(self, state: State, dissipation: Any, surface: Any = None) -> State:
        """New State with a surface's dissipation ``c`` (every surface's when None)."""
        return self._set_surface(state, "dissipation", dissipation, surface)

    def get_dissipation(self, state: State, surface: Any) -> jax.Array:
        """A surface's dissipation in the State."""
        return self._get_surface(state, "dissipation", surface)

    def set_static_friction(self, state: State, mu: Any, surface: Any = None) -> State:
        """New State with a surface's static friction coefficient (every surface's when None)."""
        return self._set_surface(state, "static_friction", mu, surface)

    def get_static_friction(self, state: State, surface: Any) -> jax.Array:
        """A surface's static friction coefficient in the State."""
        return self._get_surface(state, "static_friction", surface)

    def set_dynamic_friction(self, state: State, mu: Any, surface: Any = None) -> State:
        """New State with a surface's dynamic friction coefficient (every surface's when None)."""
        return self._set_surface(state, "dynamic_friction", mu, surface)

    def get_dynamic_friction(self, state: State, surface: Any) -> jax.Array:
        """A surface's dynamic friction coefficient in the State."""
        return self._get_surface(state, "dynamic_friction", surface)

    def set_viscous_friction(self, state: State, mu: Any, surface: Any = None) -> State:
        """New State with a surface's viscous friction coefficient (every surface's when None)."""
        return self._set_surface(state, "viscous_friction", mu, surface)

    def get_viscous_friction(self, state: State, surface: Any) -> jax.Array:
        """A surface's viscous friction coefficient in the State."""
        return self._get_surface(state, "viscous_friction", surface)

    def set_transition_velocity(self, state: State, vt: Any) -> State:
        """New State with the transition velocity (m/s, positive) changed."""
        if _concrete(vt):
            _check_field(f"HuntCrossleyForce {self.name!r}", "transition_velocity", vt, positive=True)
        return self._set(state, "transition_velocity", vt)

    def get_transition_velocity(self, state: State) -> jax.Array:
        """The transition velocity in the State."""
        return self._get(state, "transition_velocity")


class SmoothSphereHalfSpaceForce(Force):
    """OpenSim's ``SmoothSphereHalfSpaceForce``: a smooth (infinitely differentiable)
    Hunt–Crossley contact between one sphere and one half-space, made for gradient-based
    optimisation (Serrancoli et al. 2019).

    ``sj.SmoothSphereHalfSpaceForce(forces, matter, sphere, half_space, stiffness=...,
    ...)`` with ``sphere`` and ``half_space`` contact-surface indices (from
    ``body.add_contact_surface``). With indentation ``d``, ``k = E^(2/3)/2``: ``fH = 4/3 k
    sqrt(R k) (d^2 + cf)^(3/4) (1 + tanh(bd d))/2``, normal force ``f = fH (1 + 3/2 c vn) (1
    + tanh(bv (vn + 2/(3c))))/2`` and Simbody's friction with the slip speed ``sqrt(|v_t|^2 +
    cf)`` (:func:`simjax.dynamics.contact.smooth_sphere_half_space`), on the sphere's body at
    the contact point and opposite on the half-space's; potential energy ``2/5 fH d``
    (Simbody's, with the smoothed ``fH``). OpenSim's defaults: ``stiffness``
    1, ``dissipation`` 0, frictions 0, ``transition_velocity`` 0.01,
    ``constant_contact_force`` 1e-5, ``hertz_smoothing`` 300, ``hunt_crossley_smoothing`` 50.

    Every parameter is an Instance-stage parameter of the State (``set_stiffness(state,
    E)``, ...), so ``jax.grad`` reaches it; all elements of a subsystem are evaluated
    together, every State. Out-of-range values (stiffness, transition velocity, the
    contact-force constant and the smoothings must be positive, dissipation and frictions
    non-negative, all finite) raise ``ValueError`` naming the force and the field.
    """

    kernel = _contact.SmoothSphereHalfSpace()

    def __init__(
        self,
        forces: GeneralForceSubsystem,
        matter: Any,
        sphere: int,
        half_space: int,
        *,
        stiffness: float = 1.0,
        dissipation: float = 0.0,
        static_friction: float = 0.0,
        dynamic_friction: float = 0.0,
        viscous_friction: float = 0.0,
        transition_velocity: float = 0.01,
        constant_contact_force: float = 1e-5,
        hertz_smoothing: float = 300.0,
        hunt_crossley_smoothing: float = 50.0,
        name: str | None = None,
    ):
        n = sum(isinstance(e, SmoothSphereHalfSpaceForce) for e in forces._elements)
        self.name = name or f"smooth_sphere_half_space{n}"
        who = f"SmoothSphereHalfSpaceForce {self.name!r}"
        for s, kind, what in ((sphere, "sphere", "sphere"), (half_space, "plane", "half_space")):
            att = _surface_of(matter, s, who)
            if att.surface.geometry.kind != kind:
                raise ValueError(
                    f"{who}: {what} must be a {'sphere' if kind == 'sphere' else 'half-space'} surface, "
                    f"surface {s} ({att.surface.name or att.surface.geometry.kind}) is a "
                    f"{att.surface.geometry.kind}"
                )
        self._p = SmoothContactParams(
            float(stiffness),
            float(dissipation),
            float(static_friction),
            float(dynamic_friction),
            float(viscous_friction),
            float(transition_velocity),
            float(constant_contact_force),
            float(hertz_smoothing),
            float(hunt_crossley_smoothing),
        )
        _check_smooth(who, self._p)
        self._pair = (int(sphere), int(half_space))
        _add_pair(matter, int(half_space), int(sphere))
        super().__init__(forces)

    def get_surfaces(self) -> tuple[int, int]:
        """The force's ``(sphere, half_space)`` contact surfaces."""
        return self._pair

    def _values(self):
        return self._p._asdict()

    def _static(self):
        return self._pair

    def _set_checked(self, state: State, field: str, value: Any) -> State:
        if _concrete(value):
            _check_field(
                f"SmoothSphereHalfSpaceForce {self.name!r}",
                field,
                value,
                positive=not (field.endswith("_friction") or field == "dissipation"),
            )
        return self._set(state, field, value)

    def set_stiffness(self, state: State, stiffness: Any) -> State:
        """New State with the stiffness ``E`` (N/m^2) changed."""
        return self._set_checked(state, "stiffness", stiffness)

    def get_stiffness(self, state: State) -> jax.Array:
        """The stiffness in the State."""
        return self._get(state, "stiffness")

    def set_dissipation(self, state: State, dissipation: Any) -> State:
        """New State with the dissipation ``c`` (s/m) changed."""
        return self._set_checked(state, "dissipation", dissipation)

    def get_dissipation(self, state: State) -> jax.Array:
        """The dissipation in the State."""
        return self._get(state, "dissipation")

    def set_static_friction(self, state: State, mu: Any) -> State:
        """New State with the static friction coefficient changed."""
        return self._set_checked(state, "static_friction", mu)

    def get_static_friction(self, state: State) -> jax.Array:
        """The static friction coefficient in the State."""
        return self._get(state, "static_friction")

    def set_dynamic_friction(self, state: State, mu: Any) -> State:
        """New State with the dynamic friction coefficient changed."""
        return self._set_checked(state, "dynamic_friction", mu)

    def get_dynamic_friction(self, state: State) -> jax.Array:
        """The dynamic friction coefficient in the State."""
        return self._get(state, "dynamic_friction")

    def set_viscous_friction(self, state: State, mu: Any) -> State:
        """New State with the viscous friction coefficient (s/m) changed."""
        return self._set_checked(state, "viscous_friction", mu)

    def get_viscous_friction(self, state: State) -> jax.Array:
        """The viscous friction coefficient in the State."""
        return self._get(state, "viscous_friction")

    def set_transition_velocity(self, state: State, vt: Any) -> State:
        """New State with the transition velocity (m/s) changed."""
        return self._set_checked(state, "transition_velocity", vt)

    def get_transition_velocity(self, state: State) -> jax.Array:
        """The transition velocity in the State."""
        return self._get(state, "transition_velocity")

    def set_constant_contact_force(self, state: State, cf: Any) -> State:
        """New State with the constant contact force ``cf`` (smoothing constant) changed."""
        return self._set_checked(state, "constant_contact_force", cf)

    def get_constant_contact_force(self, state: State) -> jax.Array:
        """The constant contact force in the State."""
        return self._get(state, "constant_contact_force")

    def set_hertz_smoothing(self, state: State, bd: Any) -> State:
        """New State with the Hertz smoothing ``bd`` (1/m) changed."""
        return self._set_checked(state, "hertz_smoothing", bd)

    def get_hertz_smoothing(self, state: State) -> jax.Array:
        """The Hertz smoothing in the State."""
        return self._get(state, "hertz_smoothing")

    def set_hunt_crossley_smoothing(self, state: State, bv: Any) -> State:
        """New State with the Hunt–Crossley smoothing ``bv`` (s/m) changed."""
        return self._set_checked(state, "hunt_crossley_smoothing", bv)

    def get_hunt_crossley_smoothing(self, state: State) -> jax.Array:
        """The Hunt–Crossley smoothing in the State."""
        return self._get(state, "hunt_crossley_smoothing")


_HC_FIELDS = _contact.HC_SURFACE_PARAMS


# ------------------------------------------------------------------------------ discrete


class DiscreteForces(Force):
    """Mobility and body forces held in the State as discrete variables (Dynamics stage):
    set them between steps, e.g. from a controller."""

    kernel = _custom.DiscreteForces()

    def __init__(self, forces, matter):
        self._matter = matter
        super().__init__(forces)

    def _group_key(self):
        return self

    @classmethod
    def _key_name(cls, key):
        return f"{cls.__name__}{key._ordinal}"  # one group per element

    def _var(self, what: str) -> str:
        return f"{self._key_name(self)}.{what}"

    def _static(self):
        return self._key_name(self)  # the prefix of its discrete variables

    def _declare(self, sub: GeneralForceSubsystem) -> None:
        nb = self._matter.get_num_bodies()
        nu = sum(m.mobilizer.nu for m in self._matter._mobods[1:])
        sub.allocate_discrete_variable(self._var("mobility_forces"), Stage.DYNAMICS, np.zeros(nu))
        sub.allocate_discrete_variable(self._var("body_forces"), Stage.DYNAMICS, np.zeros((nb, 6)))

    def set_all_mobility_forces(self, state: State, f: Any) -> State:
        """New State with every mobility force replaced (nu,)."""
        return state.with_discrete(self._subsystem.name, self._var("mobility_forces"), f)

    def get_all_mobility_forces(self, state: State) -> jax.Array:
        """The stored mobility forces."""
        return state.discrete[self._subsystem.name][self._var("mobility_forces")]

    def set_all_body_forces(self, state: State, F: Any) -> State:
        """New State with every body force replaced (nb, 6)."""
        return state.with_discrete(self._subsystem.name, self._var("body_forces"), F)

    def get_all_body_forces(self, state: State) -> jax.Array:
        """The stored body forces."""
        return state.discrete[self._subsystem.name][self._var("body_forces")]

    def set_one_mobility_force(self, state: State, body: Any, which: int, f: Any) -> State:
        """New State with one mobility force set."""
        model = self._subsystem._system.model_for(state)
        i = int(model.topology(state.use_euler_angles).u_start[_bi(body)]) + int(which)
        return self.set_all_mobility_forces(state, self.get_all_mobility_forces(state).at[i].set(f))

    @reads_cache
    def add_force_to_body_point(self, state: State, body: Any, station: Any, force: Any) -> State:
        """New State with a point force (Ground) added at a station; needs Position."""
        b = _bi(body)
        R = state.position_cache.R_GB[b]
        f = jnp.asarray(force)
        F = jnp.concatenate([sp.cross(R @ jnp.asarray(station, f.dtype), f), f])
        return self.set_all_body_forces(state, self.get_all_body_forces(state).at[b].add(F))

    def clear_all_forces(self, state: State) -> State:
        """New State with no stored forces."""
        s = self.set_all_body_forces(state, jnp.zeros_like(self.get_all_body_forces(state)))
        return self.set_all_mobility_forces(s, jnp.zeros_like(self.get_all_mobility_forces(s)))


# ------------------------------------------------------------------------------ custom


class Custom(Force):
    """A user force (Simbody ``Force::Custom``) given by an implementation object with
    ``calc_force(ctx) -> (body_forces (nb, 6) | None, mobility_forces (nu,) | None)``,
    optional ``calc_potential_energy(ctx)`` and ``depends_only_on_positions()``.
    ``ctx`` is a read-only ``sj.Context``."""

    kernel = _custom.Custom()

    def __init__(self, forces, implementation: Any):
        if not hasattr(implementation, "calc_force"):
            raise TypeError("Force.Custom: the implementation must define calc_force(ctx)")
        self.implementation = implementation
        super().__init__(forces)

    def _group_key(self):
        return self

    @classmethod
    def _key_name(cls, key):
        return f"{cls.__name__}{key._ordinal}"  # one group per element

    def _static(self):
        # the user's implementation object, by identity (its methods may read anything)
        return Identity(self.implementation)

    def depends_only_on_positions(self) -> bool:
        """Whether the force ignores u and z (forwarded from the implementation)."""
        f = getattr(self.implementation, "depends_only_on_positions", None)
        return bool(f()) if f is not None else False


# The kinds as attributes of the base (Simbody's Force::Pin style); declared above.
# ---------------------------------------------------------------------- forces along paths


class PathSpring(Force):
    """A spring along a path (OpenSim's ``PathSpring``): tension ``stiffness (L -
    resting_length) (1 + dissipation dL/dt)`` while the path is longer than its resting
    length, none while slack; it pulls every segment's ends toward each other (with the
    moving points' coordinates: ``-T dL/dq`` in all). ``dissipation`` is per unit
    lengthening speed (s/m)."""

    kernel = _path_forces.PathSpring()

    def __init__(
        self,
        forces: Any,
        path: GeometryPath,
        stiffness: float,
        resting_length: float,
        dissipation: float = 0.0,
    ):
        if not isinstance(path, GeometryPath):
            raise TypeError(f"PathSpring: path must be an sj.GeometryPath, got {type(path).__name__}")
        for name, v in (
            ("stiffness", stiffness),
            ("resting_length", resting_length),
            ("dissipation", dissipation),
        ):
            if not (math.isfinite(float(v)) and float(v) >= 0):
                raise ValueError(f"PathSpring on {path.name!r}: {name} must be finite and >= 0, got {v}")
        self._path = path
        self._k, self._L0, self._c = float(stiffness), float(resting_length), float(dissipation)
        super().__init__(forces)

    def _values(self) -> dict[str, Any]:
        return {"stiffness": self._k, "resting_length": self._L0, "dissipation": self._c}

    def _static(self) -> Any:
        return self._path.index

    def get_geometry_path(self) -> GeometryPath:
        """The path the spring acts along."""
        return self._path

    def set_stiffness(self, state: State, k: Any) -> State:
        """New State with the stiffness changed (N/m)."""
        return self._set(state, "stiffness", k)

    def set_resting_length(self, state: State, L0: Any) -> State:
        """New State with the resting length changed (m)."""
        return self._set(state, "resting_length", L0)

    def set_dissipation(self, state: State, c: Any) -> State:
        """New State with the dissipation changed (s/m)."""
        return self._set(state, "dissipation", c)

    def get_tension(self, state: State) -> jax.Array:
        """The tension (needs Velocity)."""
        L = self._path.get_length(state)
        v = self._path.get_lengthening_speed(state)
        stretch = jnp.maximum(L - self._get(state, "resting_length"), 0.0)
        return self._get(state, "stiffness") * stretch * (1.0 + self._get(state, "dissipation") * v)


Force.UniformGravity = UniformGravity
Force.Gravity = Gravity
Force.TwoPointLinearSpring = TwoPointLinearSpring
Force.TwoPointLinearDamper = TwoPointLinearDamper
Force.TwoPointConstantForce = TwoPointConstantForce
Force.ConstantForce = ConstantForce
Force.ConstantTorque = ConstantTorque
Force.GlobalDamper = GlobalDamper
Force.MobilityLinearSpring = MobilityLinearSpring
Force.MobilityLinearDamper = MobilityLinearDamper
Force.MobilityConstantForce = MobilityConstantForce
Force.MobilityLinearStop = MobilityLinearStop
Force.CoordinateActuator = CoordinateActuator
Force.TendonActuator = TendonActuator
Force.CoordinateLimitForce = CoordinateLimitForce
Force.LinearBushing = LinearBushing
Force.DiscreteForces = DiscreteForces
Force.Custom = Custom


# ---------------------------------------------------------------------- forces along tendons


class TendonSpringDamper(Force):
    """MuJoCo's tendon ``stiffness``, ``springlength`` and ``damping``: the force
    ``stiffness (l0 - L) - damping dL/dt`` along an ``sj.Tendon`` (``J^T f`` on the
    generalized speeds), ``l0`` the nearer end of the deadband ``spring_length = (lower,
    upper)`` (a number: no deadband) and no spring force while ``lower <= L <= upper``."""

    kernel = _tendon_forces.TendonSpringDamper()

    def __init__(
        self, forces: Any, tendon: Tendon, stiffness: float, spring_length: Any, damping: float = 0.0
    ):
        if not isinstance(tendon, Tendon):
            raise TypeError(f"TendonSpringDamper: tendon must be an sj.Tendon, got {type(tendon).__name__}")
        who = f"TendonSpringDamper on {tendon.name!r}"
        lo, hi = (float(v) for v in np.broadcast_to(np.asarray(spring_length, dtype=float), (2,)))
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(
                f"{who}: spring_length must be finite with lower <= upper, got {spring_length!r}"
            )
        for name, v in (("stiffness", stiffness), ("damping", damping)):
            if not (math.isfinite(float(v)) and float(v) >= 0):
                raise ValueError(f"{who}: {name} must be finite and >= 0, got {v}")
        self._tendon = tendon
        self._v = {
            "stiffness": float(stiffness),
            "spring_lower": lo,
            "spring_upper": hi,
            "damping": float(damping),
        }
        super().__init__(forces)

    def _values(self) -> dict[str, Any]:
        return dict(self._v)

    def _static(self) -> Any:
        return self._tendon.index

    def get_tendon(self) -> Tendon:
        """The tendon the force acts along."""
        return self._tendon

    def set_stiffness(self, state: State, k: Any) -> State:
        """New State with the stiffness changed (N/m)."""
        return self._set(state, "stiffness", k)

    def set_damping(self, state: State, b: Any) -> State:
        """New State with the damping changed (N s/m)."""
        return self._set(state, "damping", b)

    def get_tension(self, state: State) -> jax.Array:
        """The force along the tendon (positive lengthens; needs Velocity)."""
        L = self._tendon.get_length(state)
        v = self._tendon.get_lengthening_speed(state)
        lo, hi = self._get(state, "spring_lower"), self._get(state, "spring_upper")
        spring = jnp.where(L > hi, hi - L, jnp.where(L < lo, lo - L, 0.0))
        return self._get(state, "stiffness") * spring - self._get(state, "damping") * v
