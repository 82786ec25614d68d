"""Muscle handles: ``sj.DeGrooteFregly2016Muscle``, ``sj.Thelen2003Muscle`` and
``sj.Millard2012EquilibriumMuscle``, forces
along a ``sj.GeometryPath`` with their states (activation; the normalized tendon force or
the fibre length for a compliant tendon) in the State's z and their excitations among the
subsystem's controls. The equations are the kernels in
:mod:`simjax.dynamics.forces.muscles`, :mod:`simjax.dynamics.forces.thelen` and
:mod:`simjax.dynamics.forces.millard`; this
module registers muscles and gets and sets their numbers, with OpenSim's method names in
snake_case."""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._stage import Stage
from ..dynamics.forces import millard as _millard
from ..dynamics.forces import muscles as _muscles
from ..dynamics.forces import thelen as _thelen
from ..dynamics.forces.kernel import group_params
from ..model.context import Context
from ..model.state import State
from ._compiled import reads_cache
from .diagnose import _concrete
from .forces import Force
from .paths import GeometryPath
from .system import GeneralForceSubsystem


def _muscles_of(sub: GeneralForceSubsystem) -> list[Muscle]:
    """The subsystem's muscles (every model), in creation order: the order of every
    per-muscle array below."""
    return [e for e in sub._elements if isinstance(e, Muscle)]


def _groups(sub: GeneralForceSubsystem, model: Any) -> tuple[list[Any], np.ndarray]:
    """The subsystem's muscle groups (one per muscle model) and, per muscle in creation
    order, its index in the groups' concatenation."""
    kinds = _muscles.MuscleKernel
    groups = [g for g in model.force_groups if g.subsystem == sub.name and isinstance(g.kernel, kinds)]
    offset = np.cumsum([0] + [g.size for g in groups])
    order = []
    for m in _muscles_of(sub):
        if m._slot is None:
            raise ValueError("a muscle was added after realize_topology(); realize it again")
        _, prefix, i = m._slot
        j = next(k for k, g in enumerate(groups) if g.prefix == prefix and g.kernel == type(m).kernel)
        order.append(offset[j] + i)
    return groups, np.asarray(order, dtype=int)


def calc_muscle_info(sub: GeneralForceSubsystem, state: State) -> _muscles.MuscleInfo:
    """Every quantity of a force subsystem's muscles (every model) at once, each field
    (n_muscles,) in creation order: what each muscle's getters read (needs Velocity)."""
    model = sub._system.model_for(state)
    groups, order = _groups(sub, model)
    if not groups:
        raise ValueError(f"no muscle in force subsystem {sub.name!r}")
    ctx = Context(model, state, sub.name)
    parts = [g.kernel.info(group_params(ctx, g), ctx, g.statics) for g in groups]
    return _muscles.MuscleInfo(*(jnp.concatenate(xs)[order] for xs in zip(*parts)))


_group_info_compiled = jax.jit(calc_muscle_info, static_argnums=0)


def calc_inextensible_tendon_active_fiber_forces(
    sub: GeneralForceSubsystem, state: State, activation: Any = 1.0
) -> jax.Array:
    """Every muscle's active fibre force with its tendon taken as rigid at ``activation``
    (scalar or (n_muscles,)), in creation order (OpenSim's
    ``calcInextensibleTendonActiveFiberForce``, static optimization's force per unit
    activation at ``activation=1``; needs Velocity)."""
    model = sub._system.model_for(state)
    groups, order = _groups(sub, model)
    if not groups:
        raise ValueError(f"no muscle in force subsystem {sub.name!r}")
    ctx = Context(model, state, sub.name)
    a_all = jnp.broadcast_to(jnp.asarray(activation, state.q.dtype), order.shape)
    a_grp = jnp.zeros(order.shape, a_all.dtype).at[order].set(a_all)
    out, start = [], 0
    for g in groups:
        P = group_params(ctx, g)
        m = g.kernel.info(P, ctx, g.statics)
        a = a_grp[start : start + g.size]
        out.append(g.kernel.inextensible_tendon_active_fiber_force(P, m.length, m.lengthening_speed, a))
        start += g.size
    return jnp.concatenate(out)[order]


def _equilibrium(sub: GeneralForceSubsystem, state: State) -> tuple[State, jax.Array]:
    """``state`` with every compliant muscle's tendon state at equilibrium, and every
    muscle's path length minus its tendon slack length (n_muscles, creation order)."""
    model = sub._system.model_for(state)
    st = sub._system.realize(state, Stage.VELOCITY)
    groups, order = _groups(sub, model)
    ctx = Context(model, st, sub.name)
    z = state.z
    rooms = []
    for g in groups:
        s = np.asarray(g.statics, dtype=int).reshape(-1, 4)
        ten = np.flatnonzero(s[:, 3] >= 0)
        P = group_params(ctx, g)
        m = g.kernel.info(P, ctx, g.statics)
        rooms.append(m.length - P["tendon_slack_length"])
        if len(ten):
            Pt = {k: v[ten] for k, v in P.items()}
            x = g.kernel.equilibrium_tendon_state(
                Pt, m.length[ten], m.lengthening_speed[ten], m.activation[ten]
            )
            sl = model.z_slices[sub.name]
            z = z.at[sl.start + s[ten, 3]].set(x.astype(z.dtype))
    if not groups:
        return state, jnp.zeros(0, state.q.dtype)
    return state.with_z(z), jnp.concatenate(rooms)[order]


_equilibrium_compiled = jax.jit(_equilibrium, static_argnums=0)


def equilibrate_muscles(system: Any, state: State) -> State:
    """A copy of ``state`` with every compliant-tendon muscle's tendon state (the
    normalized tendon force of a DeGrooteFregly2016Muscle, the fibre length of a Thelen or
    Millard muscle) at fibre-tendon equilibrium at its q, u and activation (OpenSim's
    ``Model.equilibrateMuscles``; realizes what it needs; the State returned is below
    Velocity stage). A muscle with no equilibrium at that pose (its path too short or too
    long for its fibre and tendon) gets NaN under a trace; on a concrete State that raises a
    ValueError naming the muscles, as OpenSim raises, and a muscle whose path is no longer
    than its tendon slack length is named in a warning."""
    for sub in system._subsystems:
        if isinstance(sub, GeneralForceSubsystem) and _muscles_of(sub):
            if _concrete(state):
                state, room = _equilibrium_compiled(sub, state)
                _warn_slack(sub, np.asarray(room))
                z = np.asarray(state.z)
                start = int(system.model_for(state).z_slices[sub.name].start)
                mus = [e for e in _muscles_of(sub) if e._z_ten >= 0]
                bad = [e.name for e in mus if np.isnan(z[start + e._z_ten])]
                if bad:
                    named = ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
                    raise ValueError(
                        f"equilibrate_muscles: no fibre-tendon equilibrium state for {named} at this pose "
                        "and activation: check the pose, tendon_slack_length and optimal_fiber_length "
                        "(OpenSim's equilibrateMuscles raises here too)"
                    )
            else:
                state, _ = _equilibrium(sub, state)
    return state


def _warn_slack(sub: GeneralForceSubsystem, room: np.ndarray) -> None:
    """Warn, naming them, about muscles whose path is no longer than their tendon slack
    length (their fibres have no length left: the muscle buckles, as OpenSim logs)."""
    mus = _muscles_of(sub)
    short = [
        f"{m.name} (path {r:+.4g} m longer than its tendon slack length)" for m, r in zip(mus, room) if r <= 0
    ]
    if short:
        warnings.warn(
            f"{len(short)} muscle(s) with a tendon slack length longer than the path at this pose: "
            f"{', '.join(short[:5])}{' ...' if len(short) > 5 else ''}; check tendon_slack_length (or the "
            "path's points)",
            stacklevel=3,
        )


_RANGES: dict[str, tuple[float, float, bool, bool, str]] = {
    # name: (low, high, low included, high included, what it means)
    "max_isometric_force": (0.0, math.inf, True, False, "N"),
    "optimal_fiber_length": (0.0, math.inf, False, False, "m; the fibre length at peak active force"),
    "tendon_slack_length": (0.0, math.inf, False, False, "m"),
    "pennation_angle_at_optimal": (0.0, math.pi / 2, True, False, "rad"),
    "max_contraction_velocity": (0.0, math.inf, False, False, "optimal fibre lengths per second"),
    "activation_time_constant": (0.0, math.inf, False, False, "s"),
    "deactivation_time_constant": (0.0, math.inf, False, False, "s"),
    "active_force_width_scale": (1.0, math.inf, True, False, ""),
    "fiber_damping": (0.0, math.inf, True, False, ""),
    "passive_fiber_strain_at_one_norm_force": (0.0, math.inf, False, False, ""),
    "tendon_strain_at_one_norm_force": (0.0, math.inf, False, False, ""),
    "activation_dynamics_smoothing": (0.0, math.inf, False, False, ""),
    "ignore_passive_fiber_force": (0.0, 1.0, True, True, "0 or 1"),
    "default_activation": (0.0, 1.0, False, True, "the initial activation"),
    "default_normalized_tendon_force": (
        0.0,
        5.0,
        True,
        True,
        "the initial tendon force / max isometric force",
    ),
}


def _check_range(who: str, name: str, x: float, rng: tuple[float, float, bool, bool, str]) -> None:
    """A ValueError naming ``who``, ``name`` and the range unless ``x`` lies in ``rng``
    ``(low, high, low included, high included, what it means)``."""
    lo, hi, lo_in, hi_in, what = rng
    ok = math.isfinite(x) or (hi == math.inf and x == math.inf)
    ok = ok and (x >= lo if lo_in else x > lo) and (x <= hi if hi_in else x < hi)
    if not ok:
        span = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
        unit = f" ({what})" if what else ""
        raise ValueError(f"{who}: {name} must lie in {span}{unit}, got {x:g}; set it in that range")


class Muscle(Force):
    """What every muscle model shares (OpenSim's ``Muscle``): a force along a
    ``sj.GeometryPath`` whose activation (unless ``ignore_activation_dynamics``) and tendon
    state (unless ``ignore_tendon_compliance``: a rigid tendon) are auxiliary variables in
    the State's z, and whose excitation is its control (muscles' controls come after the
    coordinate actuators' in their subsystem). The getters below read every quantity of
    OpenSim's MuscleLengthInfo, FiberVelocityInfo and MuscleDynamicsInfo. A model subclasses
    it with its ``kernel`` (an ``_muscles.MuscleKernel``), ``_params`` (its Instance-stage
    parameters), ``_ranges`` (their admissible ranges) and an ``__init__`` that sets
    ``_v``, ``_path``, ``ignore_tendon_compliance``, ``ignore_activation_dynamics``,
    ``_default_activation`` and ``_default_tendon_state`` before ``super().__init__``."""

    kernel: ClassVar[_muscles.MuscleKernel]
    _params: ClassVar[tuple[str, ...]]
    _ranges: ClassVar[dict[str, tuple[float, float, bool, bool, str]]]
    _control_rank: ClassVar[int] = 1  # after the coordinate actuators
    name: str
    _path: GeometryPath
    _v: dict[str, float]
    _default_activation: float
    _default_tendon_state: float
    ignore_tendon_compliance: bool
    ignore_activation_dynamics: bool

    def __init__(self, forces: GeneralForceSubsystem) -> None:
        self._z_act = -1
        self._z_ten = -1
        super().__init__(forces)

    @property
    def _who(self) -> str:
        return f"{type(self).__name__} {self.name!r}"

    def _check(self, name: str, x: float) -> None:
        _check_range(self._who, name, x, self._ranges[name])

    # -- registration --------------------------------------------------------------------
    def _values(self) -> dict[str, Any]:
        return dict(self._v)

    def _declare(self, sub: GeneralForceSubsystem) -> None:
        muscles = _muscles_of(sub)
        if muscles[0] is not self:
            return  # the first muscle reserves the states of all
        z: list[float] = []
        for m in muscles:
            m._z_act = m._z_ten = -1
            if not m.ignore_activation_dynamics:
                m._z_act = len(z)
                z.append(m._default_activation)
            if not m.ignore_tendon_compliance:
                m._z_ten = len(z)
                z.append(m._default_tendon_state)
        if z:
            off = sub.reserve_z(np.asarray(z))
            for m in muscles:
                m._z_act += off if m._z_act >= 0 else 0
                m._z_ten += off if m._z_ten >= 0 else 0

    def _static(self) -> Any:
        ctrl = self._subsystem._control_elements().index(self)
        return (self._path.index, ctrl, self._z_act, self._z_ten)

    # -- properties ----------------------------------------------------------------------
    def get_geometry_path(self) -> GeometryPath:
        """The path the muscle acts along."""
        return self._path

    def get_property(self, state: State, name: str) -> jax.Array:
        """One of the muscle's Instance-stage properties in the State (e.g.
        ``"optimal_fiber_length"``)."""
        self._check_name(name)
        return self._get(state, name)

    def set_property(self, state: State, name: str, value: Any) -> State:
        """New State with one of the muscle's Instance-stage properties changed (checked
        when the value is concrete)."""
        self._check_name(name)
        if _concrete(value) and np.ndim(value) == 0:
            self._check(name, float(value))
        return self._set(state, name, value)

    def _check_name(self, name: str) -> None:
        if name not in self._params:
            raise KeyError(
                f"{self._who} has no property {name!r}; the properties in the State are {list(self._params)}"
            )

    def get_max_isometric_force(self, state: State) -> jax.Array:
        """Max isometric force (N)."""
        return self._get(state, "max_isometric_force")

    def set_max_isometric_force(self, state: State, value: Any) -> State:
        """New State with the max isometric force changed (N)."""
        return self.set_property(state, "max_isometric_force", value)

    def get_optimal_fiber_length(self, state: State) -> jax.Array:
        """Optimal fibre length (m)."""
        return self._get(state, "optimal_fiber_length")

    def set_optimal_fiber_length(self, state: State, value: Any) -> State:
        """New State with the optimal fibre length changed (m)."""
        return self.set_property(state, "optimal_fiber_length", value)

    def get_tendon_slack_length(self, state: State) -> jax.Array:
        """Tendon slack length (m)."""
        return self._get(state, "tendon_slack_length")

    def set_tendon_slack_length(self, state: State, value: Any) -> State:
        """New State with the tendon slack length changed (m)."""
        return self.set_property(state, "tendon_slack_length", value)

    def get_pennation_angle_at_optimal(self, state: State) -> jax.Array:
        """Pennation angle at the optimal fibre length (rad)."""
        return self._get(state, "pennation_angle_at_optimal")

    def get_max_contraction_velocity(self, state: State) -> jax.Array:
        """Max contraction velocity (optimal fibre lengths per second)."""
        return self._get(state, "max_contraction_velocity")

    # -- states and controls -------------------------------------------------------------
    def _z_index(self, state: State, slot: int) -> int:
        model = self._subsystem._system.model_for(state)
        return int(model.z_slices[self._subsystem.name].start) + slot

    def _get_z(self, state: State, slot: int) -> jax.Array:
        """This muscle's state in z slot ``slot`` (its ``_z_act`` or ``_z_ten``)."""
        self._model_grp(state)
        return state.z[self._z_index(state, slot)]

    def _set_z(self, state: State, slot: int, value: Any) -> State:
        """New State with this muscle's z slot ``slot`` set to ``value``."""
        self._model_grp(state)
        i = self._z_index(state, slot)
        return state.with_z(state.z.at[i].set(jnp.asarray(value, state.z.dtype)))

    def get_excitation(self, state: State) -> jax.Array:
        """The excitation (this muscle's control, as set)."""
        self._model_grp(state)
        return state.discrete[self._subsystem.name]["controls"][self._static()[1]]

    def set_excitation(self, state: State, e: Any) -> State:
        """New State with the excitation (this muscle's control) set."""
        self._model_grp(state)
        cur = state.discrete[self._subsystem.name]["controls"]
        return state.with_discrete(self._subsystem.name, "controls", cur.at[self._static()[1]].set(e))

    get_control = get_excitation
    set_control = set_excitation

    def get_activation(self, state: State) -> jax.Array:
        """The activation (the excitation under ``ignore_activation_dynamics``)."""
        if self.ignore_activation_dynamics:
            return self.get_excitation(state)
        return self._get_z(state, self._z_act)

    def set_activation(self, state: State, a: Any) -> State:
        """New State with the activation set (the excitation under
        ``ignore_activation_dynamics``, as OpenSim's ``setActivation``); a concrete value
        must lie in [0, 1]."""
        if _concrete(a) and not np.all((np.asarray(a) >= 0) & (np.asarray(a) <= 1)):
            raise ValueError(f"{self._who}: activation must lie in [0, 1], got {a}")
        if self.ignore_activation_dynamics:
            return self.set_excitation(state, a)
        return self._set_z(state, self._z_act, a)

    # -- muscle quantities ---------------------------------------------------------------
    @reads_cache
    def _info(self, state: State) -> _muscles.MuscleInfo:
        state.require(Stage.VELOCITY, self._who)
        self._model_grp(state)
        sub = self._subsystem
        i = _muscles_of(sub).index(self)
        info = _group_info_compiled(sub, state) if _concrete(state) else calc_muscle_info(sub, state)
        return _muscles.MuscleInfo(*(x[i] for x in info))

    def calc_inextensible_tendon_active_fiber_force(self, state: State, activation: Any) -> jax.Array:
        """The active fibre force at ``activation`` with the tendon taken as rigid, at the
        State's path length and speed (OpenSim's ``calcInextensibleTendonActiveFiberForce``;
        static optimization's force per unit activation; needs Velocity)."""
        state.require(Stage.VELOCITY, self._who)
        i = _muscles_of(self._subsystem).index(self)
        return calc_inextensible_tendon_active_fiber_forces(self._subsystem, state, activation)[i]

    def get_length(self, state: State) -> jax.Array:
        """The muscle-tendon length: its path's (needs Position)."""
        return self._path.get_length(state)

    def get_lengthening_speed(self, state: State) -> jax.Array:
        """The muscle-tendon lengthening speed (needs Velocity)."""
        return self._path.get_lengthening_speed(state)

    def compute_moment_arm(self, state: State, coordinate: Any) -> jax.Array:
        """The path's moment arm about ``coordinate`` (``GeometryPath.compute_moment_arm``)."""
        return self._path.compute_moment_arm(state, coordinate)

    def get_fiber_length(self, state: State) -> jax.Array:
        """Fibre length (m) (needs Velocity, as every quantity below)."""
        return self._info(state).fiber_length

    def get_normalized_fiber_length(self, state: State) -> jax.Array:
        """Fibre length over the optimal fibre length."""
        return self._info(state).normalized_fiber_length

    def get_fiber_length_along_tendon(self, state: State) -> jax.Array:
        """Fibre length projected on the tendon (m)."""
        return self._info(state).fiber_length_along_tendon

    def get_pennation_angle(self, state: State) -> jax.Array:
        """Pennation angle (rad)."""
        return self._info(state).pennation_angle

    def get_cos_pennation_angle(self, state: State) -> jax.Array:
        """Cosine of the pennation angle."""
        return self._info(state).cos_pennation_angle

    def get_tendon_length(self, state: State) -> jax.Array:
        """Tendon length (m)."""
        return self._info(state).tendon_length

    def get_tendon_strain(self, state: State) -> jax.Array:
        """Tendon strain (normalized tendon length - 1)."""
        return self._info(state).normalized_tendon_length - 1.0

    def get_fiber_velocity(self, state: State) -> jax.Array:
        """Fibre velocity (m/s, lengthening positive)."""
        return self._info(state).fiber_velocity

    def get_normalized_fiber_velocity(self, state: State) -> jax.Array:
        """Fibre velocity over the max contraction velocity (m/s)."""
        return self._info(state).normalized_fiber_velocity

    def get_fiber_velocity_along_tendon(self, state: State) -> jax.Array:
        """Fibre velocity projected on the tendon (m/s)."""
        return self._info(state).fiber_velocity_along_tendon

    def get_tendon_velocity(self, state: State) -> jax.Array:
        """Tendon lengthening velocity (m/s)."""
        return self._info(state).tendon_velocity

    def get_active_force_length_multiplier(self, state: State) -> jax.Array:
        """Active force-length multiplier."""
        return self._info(state).active_force_length_multiplier

    def get_passive_force_multiplier(self, state: State) -> jax.Array:
        """Passive force-length multiplier."""
        return self._info(state).passive_force_multiplier

    def get_force_velocity_multiplier(self, state: State) -> jax.Array:
        """Force-velocity multiplier."""
        return self._info(state).force_velocity_multiplier

    def get_active_fiber_force(self, state: State) -> jax.Array:
        """Active fibre force (N)."""
        return self._info(state).active_fiber_force

    def get_passive_fiber_force(self, state: State) -> jax.Array:
        """Passive fibre force (N): elastic plus damping, as OpenSim reports it."""
        m = self._info(state)
        return m.passive_fiber_elastic_force + m.passive_fiber_damping_force

    def get_passive_fiber_elastic_force(self, state: State) -> jax.Array:
        """Passive elastic fibre force (N)."""
        return self._info(state).passive_fiber_elastic_force

    def get_passive_fiber_damping_force(self, state: State) -> jax.Array:
        """Fibre damping force (N)."""
        return self._info(state).passive_fiber_damping_force

    def get_fiber_force(self, state: State) -> jax.Array:
        """Total fibre force (N)."""
        return self._info(state).fiber_force

    def get_fiber_force_along_tendon(self, state: State) -> jax.Array:
        """Fibre force projected on the tendon (N)."""
        return self._info(state).fiber_force_along_tendon

    def get_tendon_force(self, state: State) -> jax.Array:
        """Tendon force (N): the tension the muscle applies along its path."""
        return self._info(state).tendon_force

    get_tension = get_tendon_force
    get_actuation = get_tendon_force

    def get_activation_derivative(self, state: State) -> jax.Array:
        """d activation / dt (zero under ``ignore_activation_dynamics``)."""
        if self.ignore_activation_dynamics:
            return jnp.zeros((), state.q.dtype)
        return self._info(state).activation_derivative

    def get_tendon_state_derivative(self, state: State) -> jax.Array:
        """d/dt of the tendon state (the normalized tendon force of a DeGrooteFregly2016Muscle,
        the fibre length of a Thelen or Millard muscle); zero for a rigid tendon."""
        return self._info(state).normalized_tendon_force_derivative

    def compute_initial_fiber_equilibrium(self, state: State) -> State:
        """New State with the tendon state of every compliant muscle of this subsystem at
        fibre-tendon equilibrium (OpenSim's ``computeInitialFiberEquilibrium``
        solves one muscle; solving all at once is as cheap)."""
        return equilibrate_muscles(self._subsystem._system, state)


class DeGrooteFregly2016Muscle(Muscle):
    """OpenSim's ``DeGrooteFregly2016Muscle`` on a path: a smooth Hill-type muscle (De
    Groote et al. 2016), the one OpenSim Moco optimises with.

    The tendon force pulls along ``path`` as a ``PathSpring``'s tension does (``-T dL/dq``).
    Activation (unless ``ignore_activation_dynamics``: then the activation is the
    excitation) and the normalized tendon force (unless ``ignore_tendon_compliance``: a
    rigid tendon) are auxiliary variables in the State's z; the excitation is this muscle's
    control (``set_excitation`` or the System's ``set_controls``; muscles' controls come
    after the coordinate actuators' in their subsystem). The equations are in
    :mod:`simjax.dynamics.forces.muscles`. Every number is an Instance-stage parameter of
    the State (differentiable, settable per State) but the ``ignore_*`` flags and
    ``tendon_compliance_dynamics_mode`` (only OpenSim's ``"explicit"``), which set the
    State's layout, and ``default_*``, the initial values of the states. The keyword
    arguments after ``name`` are OpenSim's properties, with OpenSim's defaults:
    ``max_isometric_force``, ``optimal_fiber_length``, ``tendon_slack_length``,
    ``pennation_angle_at_optimal``, ``max_contraction_velocity`` (optimal fibre lengths per
    second), ``activation_time_constant``, ``deactivation_time_constant``,
    ``default_activation``, ``default_normalized_tendon_force``,
    ``active_force_width_scale``, ``fiber_damping``,
    ``passive_fiber_strain_at_one_norm_force``, ``tendon_strain_at_one_norm_force``,
    ``activation_dynamics_smoothing``, ``ignore_passive_fiber_force``,
    ``ignore_tendon_compliance``, ``ignore_activation_dynamics``,
    ``tendon_compliance_dynamics_mode``.

    Args:
        forces: The ``GeneralForceSubsystem``.
        path: The ``sj.GeometryPath`` it acts along.
        name: Its name (as in the .osim file).

    Raises:
        ValueError: A property outside its range (the message names the muscle).
        NotImplementedError: ``tendon_compliance_dynamics_mode="implicit"``.
    """

    kernel = _muscles.DeGrooteFregly2016Muscle()
    _params = _muscles.PARAMS
    _ranges = _RANGES

    def __init__(
        self,
        forces: GeneralForceSubsystem,
        path: GeometryPath,
        *,
        name: str | None = None,
        max_isometric_force: float = 1000.0,
        optimal_fiber_length: float = 0.1,
        tendon_slack_length: float = 0.2,
        pennation_angle_at_optimal: float = 0.0,
        max_contraction_velocity: float = 10.0,
        activation_time_constant: float = 0.015,
        deactivation_time_constant: float = 0.060,
        default_activation: float = 0.5,
        default_normalized_tendon_force: float = 0.5,
        active_force_width_scale: float = 1.0,
        fiber_damping: float = 0.0,
        passive_fiber_strain_at_one_norm_force: float = 0.6,
        tendon_strain_at_one_norm_force: float = 0.049,
        activation_dynamics_smoothing: float = 0.1,
        ignore_passive_fiber_force: bool = False,
        ignore_tendon_compliance: bool = False,
        ignore_activation_dynamics: bool = False,
        tendon_compliance_dynamics_mode: str = "explicit",
    ):
        if not isinstance(path, GeometryPath):
            raise TypeError(
                f"DeGrooteFregly2016Muscle: path must be an sj.GeometryPath, got {type(path).__name__}"
            )
        self.name = name or path.name
        who = f"DeGrooteFregly2016Muscle {self.name!r}"
        v = {
            "max_isometric_force": max_isometric_force,
            "optimal_fiber_length": optimal_fiber_length,
            "tendon_slack_length": tendon_slack_length,
            "pennation_angle_at_optimal": pennation_angle_at_optimal,
            "max_contraction_velocity": max_contraction_velocity,
            "activation_time_constant": activation_time_constant,
            "deactivation_time_constant": deactivation_time_constant,
            "active_force_width_scale": active_force_width_scale,
            "fiber_damping": fiber_damping,
            "passive_fiber_strain_at_one_norm_force": passive_fiber_strain_at_one_norm_force,
            "tendon_strain_at_one_norm_force": tendon_strain_at_one_norm_force,
            "activation_dynamics_smoothing": activation_dynamics_smoothing,
            "ignore_passive_fiber_force": 1.0 if ignore_passive_fiber_force else 0.0,
        }
        self._v = {k: float(x) for k, x in v.items()}
        for k in v:
            self._check(k, self._v[k])
        if tendon_compliance_dynamics_mode != "explicit":
            raise NotImplementedError(
                f"{who}: tendon_compliance_dynamics_mode {tendon_compliance_dynamics_mode!r} is not "
                "supported; use 'explicit' (OpenSim's default; the implicit mode is for Moco's "
                "direct collocation)"
            )
        self._check("default_activation", float(default_activation))
        self._check("default_normalized_tendon_force", float(default_normalized_tendon_force))
        self._path = path
        self._default_activation = float(default_activation)
        self._default_tendon_state = float(default_normalized_tendon_force)
        self.ignore_tendon_compliance = bool(ignore_tendon_compliance)
        self.ignore_activation_dynamics = bool(ignore_activation_dynamics)
        super().__init__(forces)

    def get_normalized_tendon_force(self, state: State) -> jax.Array:
        """The normalized tendon force: the state for a compliant tendon, else the tendon
        force over the max isometric force (needs Velocity then)."""
        if self.ignore_tendon_compliance:
            return self.get_tendon_force(state) / self.get_max_isometric_force(state)
        return self._get_z(state, self._z_ten)

    def set_normalized_tendon_force(self, state: State, f: Any) -> State:
        """New State with the normalized tendon force state set (compliant tendons only;
        a concrete value must lie in [0, 5])."""
        who = self._who
        if self.ignore_tendon_compliance:
            raise ValueError(
                f"{who} has a rigid tendon (ignore_tendon_compliance): no tendon force state to set"
            )
        if _concrete(f) and not np.all((np.asarray(f) >= 0) & (np.asarray(f) <= 5)):
            raise ValueError(f"{who}: the normalized tendon force must lie in [0, 5], got {f}")
        return self._set_z(state, self._z_ten, f)

    def get_normalized_tendon_force_derivative(self, state: State) -> jax.Array:
        """d normalized tendon force / dt (zero for a rigid tendon)."""
        return self._info(state).normalized_tendon_force_derivative


_THELEN_RANGES: dict[str, tuple[float, float, bool, bool, str]] = {
    **{k: v for k, v in _RANGES.items() if k in _thelen.PARAMS},
    "fmax_tendon_strain": (0.0, math.inf, False, False, "tendon strain at the max isometric force"),
    "fmax_muscle_strain": (0.0, math.inf, False, False, "passive fibre strain at the max isometric force"),
    "kshape_active": (0.0, math.inf, False, False, "width of the active force-length curve"),
    "kshape_passive": (0.0, math.inf, False, False, "exponential shape of the passive curve"),
    "af": (0.0, math.inf, False, False, "force-velocity shape factor"),
    "flen": (1.0, math.inf, False, False, "max lengthening force over the isometric force"),
    "fv_linear_extrap_threshold": (0.0, math.inf, False, False, "above 1 / flen"),
    "maximum_pennation_angle": (0.0, math.pi / 2, True, True, "rad"),
    "minimum_activation": (0.01, 1.0, True, False, "OpenSim's floor is 0.01"),
    "default_activation": (0.0, 1.0, True, True, "the initial activation"),
    "default_fiber_length": (0.0, math.inf, False, False, "m; the initial fibre length"),
}


class Thelen2003Muscle(Muscle):
    """OpenSim's ``Thelen2003Muscle`` on a path: the Hill-type muscle of Thelen (2003) as
    OpenSim 4.6 computes it, the muscle of most of OpenSim's model files.

    The tendon force pulls along ``path`` as a ``PathSpring``'s tension does. Its states
    in the State's z are the activation and the fibre length (OpenSim's
    ``ActivationFiberLengthMuscle``); the excitation is this muscle's control. The
    equations are in :mod:`simjax.dynamics.forces.thelen`. Every number is an
    Instance-stage parameter of the State but the ``ignore_*`` flags, which set the State's
    layout, and ``default_*``, the initial values of the states. The keyword arguments
    after ``name`` are OpenSim's properties in snake_case, with OpenSim's defaults:
    ``max_isometric_force``, ``optimal_fiber_length``, ``tendon_slack_length``,
    ``pennation_angle_at_optimal``, ``max_contraction_velocity`` (optimal fibre lengths per
    second), ``activation_time_constant``, ``deactivation_time_constant``,
    ``fmax_tendon_strain`` (FmaxTendonStrain), ``fmax_muscle_strain`` (FmaxMuscleStrain),
    ``kshape_active`` (KshapeActive), ``kshape_passive`` (KshapePassive), ``af`` (Af),
    ``flen`` (Flen), ``fv_linear_extrap_threshold``, ``maximum_pennation_angle``,
    ``minimum_activation``, ``default_activation``, ``default_fiber_length``,
    ``ignore_tendon_compliance``, ``ignore_activation_dynamics``. OpenSim 4.6 refuses the
    two ``ignore_*`` flags for this muscle; here a rigid tendon is the muscle of OpenSim's
    ``calcInextensibleTendonActiveFiberForce`` (see the kernel) and without activation
    dynamics the activation is the excitation.

    Args:
        forces: The ``GeneralForceSubsystem``.
        path: The ``sj.GeometryPath`` it acts along.
        name: Its name (as in the .osim file).

    Raises:
        ValueError: A property outside its range (the message names the muscle).
    """

    kernel = _thelen.Thelen2003Muscle()
    _params = _thelen.PARAMS
    _ranges = _THELEN_RANGES

    def __init__(
        self,
        forces: GeneralForceSubsystem,
        path: GeometryPath,
        *,
        name: str | None = None,
        max_isometric_force: float = 1000.0,
        optimal_fiber_length: float = 0.1,
        tendon_slack_length: float = 0.2,
        pennation_angle_at_optimal: float = 0.0,
        max_contraction_velocity: float = 10.0,
        activation_time_constant: float = 0.015,
        deactivation_time_constant: float = 0.050,
        fmax_tendon_strain: float = 0.04,
        fmax_muscle_strain: float = 0.6,
        kshape_active: float = 0.45,
        kshape_passive: float = 5.0,
        af: float = 0.25,
        flen: float = 1.4,
        fv_linear_extrap_threshold: float = 0.95,
        maximum_pennation_angle: float = math.acos(0.1),
        minimum_activation: float = 0.01,
        default_activation: float = 0.05,
        default_fiber_length: float = 0.1,
        ignore_tendon_compliance: bool = False,
        ignore_activation_dynamics: bool = False,
    ):
        if not isinstance(path, GeometryPath):
            raise TypeError(f"Thelen2003Muscle: path must be an sj.GeometryPath, got {type(path).__name__}")
        self.name = name or path.name
        loc = locals()
        self._v = {k: float(loc[k]) for k in _thelen.PARAMS}
        for k, x in self._v.items():
            self._check(k, x)
        if self._v["fv_linear_extrap_threshold"] <= 1.0 / self._v["flen"]:
            raise ValueError(
                f"{self._who}: fv_linear_extrap_threshold must be greater than 1 / flen "
                f"({1.0 / self._v['flen']:g}), got {self._v['fv_linear_extrap_threshold']:g}; raise it"
            )
        self._check("default_activation", float(default_activation))
        self._check("default_fiber_length", float(default_fiber_length))
        self._path = path
        self._default_activation = float(default_activation)
        self._default_tendon_state = float(default_fiber_length)
        self.ignore_tendon_compliance = bool(ignore_tendon_compliance)
        self.ignore_activation_dynamics = bool(ignore_activation_dynamics)
        super().__init__(forces)

    def get_activation(self, state: State) -> jax.Array:
        """The activation clamped to [minimum_activation, 1], as OpenSim's getter returns
        it (the equations use it so; the state itself may lie outside)."""
        a = super().get_activation(state)
        return jnp.clip(a, self._get(state, "minimum_activation"), 1.0)

    def set_fiber_length(self, state: State, length: Any) -> State:
        """New State with the fibre length state set (compliant tendons only; a concrete
        value must be positive)."""
        if self.ignore_tendon_compliance:
            raise ValueError(
                f"{self._who} has a rigid tendon (ignore_tendon_compliance): no fibre length state to set"
            )
        if _concrete(length) and not np.all(np.asarray(length) > 0):
            raise ValueError(f"{self._who}: the fibre length must be positive, got {length}")
        return self._set_z(state, self._z_ten, length)

    def get_minimum_fiber_length(self, state: State) -> jax.Array:
        """The pennation model's minimum fibre length (m): the fibre at the maximum
        pennation angle (1% of the optimal length when that angle is zero)."""
        P = {k: self._get(state, k) for k in _thelen.PARAMS}
        return _thelen.minimum_fiber_length(P)

    def get_fiber_length_derivative(self, state: State) -> jax.Array:
        """d fibre length / dt (the fibre velocity; zero for a rigid tendon; needs
        Velocity)."""
        return self.get_tendon_state_derivative(state)


_CURVE_ARGS = {
    "ActiveForceLengthCurve": "active_force_length_curve",
    "ForceVelocityCurve": "force_velocity_curve",
    "FiberForceLengthCurve": "fiber_force_length_curve",
    "TendonForceLengthCurve": "tendon_force_length_curve",
}
_NONNEG = (0.0, math.inf, True, False, "")
_POS = (0.0, math.inf, False, False, "")
_CURVINESS = (0.0, 1.0, True, True, "curviness, 0 to 1; NaN: OpenSim's fitted value")
_MILLARD_RANGES: dict[str, tuple[float, float, bool, bool, str]] = {
    **_RANGES,
    "fiber_damping": (0.0, math.inf, True, False, "below 0.001: the undamped model"),
    "minimum_activation": (0.0, 1.0, True, False, ""),
    "maximum_pennation_angle": (0.0, math.pi / 2, True, True, "rad"),
    "default_activation": (0.0, 1.0, True, True, "the initial activation"),
    "default_fiber_length": (0.0, math.inf, False, False, "m; the initial fibre length"),
    "fal_min_norm_active_fiber_length": _NONNEG,
    "fal_transition_norm_fiber_length": _POS,
    "fal_max_norm_active_fiber_length": (1.0, math.inf, False, False, ""),
    "fal_shallow_ascending_slope": _NONNEG,
    "fal_minimum_value": _NONNEG,
    "fv_concentric_slope_at_vmax": (0.0, 1.0, True, False, ""),
    "fv_concentric_slope_near_vmax": (1.49e-8, 1.0, True, True, ""),
    "fv_isometric_slope": (1.0, math.inf, False, False, ""),
    "fv_eccentric_slope_at_vmax": _NONNEG,
    "fv_eccentric_slope_near_vmax": (1.49e-8, math.inf, True, False, ""),
    "fv_max_eccentric_velocity_force_multiplier": (1.0, math.inf, False, False, ""),
    "fv_concentric_curviness": (0.0, 1.0, True, True, ""),
    "fv_eccentric_curviness": (0.0, 1.0, True, True, ""),
    "fpe_strain_at_zero_force": (-1.0, math.inf, False, False, ""),
    "fpe_strain_at_one_norm_force": (-1.0, math.inf, False, False, ""),
    "fpe_stiffness_at_low_force": _POS,
    "fpe_stiffness_at_one_norm_force": _POS,
    "fpe_curviness": _CURVINESS,
    "fse_strain_at_one_norm_force": _POS,
    "fse_stiffness_at_one_norm_force": _POS,
    "fse_norm_force_at_toe_end": (0.0, 1.0, False, False, ""),
    "fse_curviness": _CURVINESS,
}


class Millard2012EquilibriumMuscle(Muscle):
    """OpenSim's ``Millard2012EquilibriumMuscle`` on a path (Millard et al. 2013): the
    Hill-type muscle of most current OpenSim models (Rajagopal 2015 among them), its curves
    OpenSim's quintic Bezier ``SmoothSegmentedFunction``\\ s.

    The tendon force pulls along ``path`` (``-T dL/dq``). Activation (unless
    ``ignore_activation_dynamics``) and the fibre length (unless
    ``ignore_tendon_compliance``: a rigid tendon) are auxiliary variables in the State's z;
    the excitation is this muscle's control. With ``fiber_damping >= 0.001`` the damped
    model (fibre velocity by Newton on the damped equilibrium), else with an elastic tendon
    the classic Hill model (fibre velocity from the inverse force-velocity curve; OpenSim
    then requires ``minimum_activation >= 0.01``). The equations are in
    :mod:`simjax.dynamics.forces.millard`. Every number is an Instance-stage parameter
    (differentiable, settable per State) but the ``ignore_*`` flags, which set the State's
    layout, and ``default_*``, the initial values of the states. The keyword arguments
    after ``name`` are OpenSim's properties with OpenSim's defaults
    (``default_fiber_length`` defaults to ``optimal_fiber_length``); each curve's
    properties are a dict by OpenSim's property names (e.g.
    ``active_force_length_curve={"minimum_value": 0.0}``), held in the State as
    ``fal_``/``fv_``/``fpe_``/``fse_`` + the property name; optional curve properties
    left out (all three of a curve, as in OpenSim) take OpenSim's fitted values, computed
    from the curve's strains at construction (OpenSim recomputes them when a strain
    changes; here set them with ``set_property``).

    Args:
        forces: The ``GeneralForceSubsystem``.
        path: The ``sj.GeometryPath`` it acts along.
        name: Its name (as in the .osim file).

    Raises:
        ValueError: A property outside its range (the message names the muscle).
    """

    kernel = _millard.Millard2012EquilibriumMuscle()
    _params = _millard.PARAMS
    _ranges = _MILLARD_RANGES

    def __init__(
        self,
        forces: GeneralForceSubsystem,
        path: GeometryPath,
        *,
        name: str | None = None,
        max_isometric_force: float = 1000.0,
        optimal_fiber_length: float = 0.1,
        tendon_slack_length: float = 0.2,
        pennation_angle_at_optimal: float = 0.0,
        max_contraction_velocity: float = 10.0,
        fiber_damping: float = 0.1,
        default_activation: float = 0.05,
        default_fiber_length: float | None = None,
        activation_time_constant: float = 0.010,
        deactivation_time_constant: float = 0.040,
        minimum_activation: float = 0.01,
        maximum_pennation_angle: float = math.acos(0.1),
        ignore_tendon_compliance: bool = False,
        ignore_activation_dynamics: bool = False,
        active_force_length_curve: dict[str, float] | None = None,
        force_velocity_curve: dict[str, float] | None = None,
        fiber_force_length_curve: dict[str, float] | None = None,
        tendon_force_length_curve: dict[str, float] | None = None,
    ):
        if not isinstance(path, GeometryPath):
            raise TypeError(
                f"Millard2012EquilibriumMuscle: path must be an sj.GeometryPath, got {type(path).__name__}"
            )
        self.name = name or path.name
        v: dict[str, float] = {
            "max_isometric_force": max_isometric_force,
            "optimal_fiber_length": optimal_fiber_length,
            "tendon_slack_length": tendon_slack_length,
            "pennation_angle_at_optimal": pennation_angle_at_optimal,
            "max_contraction_velocity": max_contraction_velocity,
            "fiber_damping": fiber_damping,
            "activation_time_constant": activation_time_constant,
            "deactivation_time_constant": deactivation_time_constant,
            "minimum_activation": minimum_activation,
            "maximum_pennation_angle": maximum_pennation_angle,
        }
        given = {
            "ActiveForceLengthCurve": active_force_length_curve or {},
            "ForceVelocityCurve": force_velocity_curve or {},
            "FiberForceLengthCurve": fiber_force_length_curve or {},
            "TendonForceLengthCurve": tendon_force_length_curve or {},
        }
        for curve, props in given.items():
            known = {p for _, c, p, _ in _millard.CURVE_PARAMS if c == curve}
            unknown = set(props) - known
            if unknown:
                raise ValueError(
                    f"Millard2012EquilibriumMuscle {self.name!r}: {_CURVE_ARGS[curve]} has no "
                    f"{sorted(unknown)}; its properties are {sorted(known)}"
                )
        for key, curve, prop, default in _millard.CURVE_PARAMS:
            v[key] = given[curve].get(prop, default)
        self._v = {k: float(x) for k, x in v.items()}
        for k, x in self._v.items():
            if not (math.isnan(x) and k.startswith(("fpe_", "fse_")) and k not in _REQUIRED_CURVE_PARAMS):
                self._check(k, x)
        self._check_curves()
        # optional curve properties left out: OpenSim's fitted values (from the strains)
        e0, e1 = self._v["fpe_strain_at_zero_force"], self._v["fpe_strain_at_one_norm_force"]
        et = self._v["fse_strain_at_one_norm_force"]
        fitted = {
            "fpe_stiffness_at_low_force": 0.2,
            "fpe_stiffness_at_one_norm_force": 2.0 / (e1 - e0),
            "fpe_curviness": 0.75,
            "fse_stiffness_at_one_norm_force": 1.375 / et,
            "fse_norm_force_at_toe_end": 2.0 / 3.0,
            "fse_curviness": 0.5,
        }
        for k, x in fitted.items():
            if math.isnan(self._v[k]):
                self._v[k] = x
        lo = float(optimal_fiber_length)
        l0 = lo if default_fiber_length is None else float(default_fiber_length)
        self._check("default_activation", float(default_activation))
        self._check("default_fiber_length", l0)
        self._path = path
        self._default_activation = float(default_activation)
        self._default_tendon_state = l0
        self.ignore_tendon_compliance = bool(ignore_tendon_compliance)
        self.ignore_activation_dynamics = bool(ignore_activation_dynamics)
        if not self.ignore_tendon_compliance and self._v["fiber_damping"] < _millard.MIN_NONZERO_DAMPING:
            if self._v["minimum_activation"] < 0.01:
                raise ValueError(
                    f"{self._who}: minimum_activation must be >= 0.01 for the undamped model with an "
                    f"elastic tendon (a singularity at activation 0), got {self._v['minimum_activation']:g}; "
                    "raise it, or set fiber_damping >= 0.001"
                )
        super().__init__(forces)

    def _check_curves(self) -> None:
        """The relations between curve parameters that OpenSim's curve factory requires."""
        v, who = self._v, self._who

        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"{who}: {what}; change the curve's properties")

        need(
            v["fal_min_norm_active_fiber_length"] < v["fal_transition_norm_fiber_length"] < 1.0,
            "ActiveForceLengthCurve needs min_norm_active_fiber_length < transition_norm_fiber_length < 1",
        )
        e0, e1 = v["fpe_strain_at_zero_force"], v["fpe_strain_at_one_norm_force"]
        need(e1 > e0, "FiberForceLengthCurve needs strain_at_one_norm_force > strain_at_zero_force")
        opt = [
            v[k] for k in ("fpe_stiffness_at_low_force", "fpe_stiffness_at_one_norm_force", "fpe_curviness")
        ]
        need(
            all(map(math.isnan, opt)) or not any(map(math.isnan, opt)),
            "FiberForceLengthCurve's stiffness_at_low_force, stiffness_at_one_norm_force and curviness "
            "must be all given or all left out",
        )
        if not math.isnan(opt[0]):
            need(
                opt[1] > 1.0 / (e1 - e0),
                "FiberForceLengthCurve needs stiffness_at_one_norm_force > 1/(e1-e0)",
            )
            need(opt[0] < 1.0 / (e1 - e0), "FiberForceLengthCurve needs stiffness_at_low_force < 1/(e1-e0)")
        et = v["fse_strain_at_one_norm_force"]
        opt = [
            v[k] for k in ("fse_stiffness_at_one_norm_force", "fse_norm_force_at_toe_end", "fse_curviness")
        ]
        need(
            all(map(math.isnan, opt)) or not any(map(math.isnan, opt)),
            "TendonForceLengthCurve's stiffness_at_one_norm_force, norm_force_at_toe_end and curviness "
            "must be all given or all left out",
        )
        if not math.isnan(opt[0]):
            need(opt[0] > 1.0 / et, "TendonForceLengthCurve needs stiffness_at_one_norm_force > 1/strain")

    def _values(self) -> dict[str, Any]:
        # the tendon's kind chooses the curves OpenSim uses (a flag, not a property to set)
        return {**self._v, "ignore_tendon_compliance": 1.0 if self.ignore_tendon_compliance else 0.0}

    def get_fiber_damping(self, state: State) -> jax.Array:
        """The fibre damping coefficient (below 0.001: the undamped model)."""
        return self._get(state, "fiber_damping")

    def get_activation(self, state: State) -> jax.Array:
        """The activation clamped to [minimum_activation, 1], as OpenSim's getter returns it
        (the state itself may lie outside); under ``ignore_activation_dynamics`` the
        excitation clamped to [0.01, 1] (OpenSim's activation model then keeps its default
        minimum, not the muscle's)."""
        lo: Any = _millard.DEFAULT_MINIMUM_ACTIVATION
        if not self.ignore_activation_dynamics:
            lo = self._get(state, "minimum_activation")
        return jnp.clip(super().get_activation(state), lo, 1.0)

    def get_minimum_activation(self, state: State) -> jax.Array:
        """The activation's lower bound."""
        return self._get(state, "minimum_activation")

    def get_minimum_fiber_length(self, state: State) -> jax.Array:
        """The shortest fibre length (m): the longer of the shortest active length and the
        pennation model's (at ``maximum_pennation_angle``); fibre lengths are clamped to it."""
        P = {k: self._get(state, k) for k in self._params}
        return _millard.minimum_fiber_length(P)

    def set_fiber_length(self, state: State, fiber_length: Any) -> State:
        """New State with the fibre length state set, clamped to the minimum fibre length as
        OpenSim's ``setFiberLength`` does (a rigid tendon has none: the State is returned
        unchanged, as OpenSim does)."""
        if self.ignore_tendon_compliance:
            return state
        if _concrete(fiber_length) and not np.all(np.asarray(fiber_length) > 0):
            raise ValueError(f"{self._who}: the fibre length must be > 0, got {fiber_length}")
        lm = jnp.maximum(jnp.asarray(fiber_length, state.z.dtype), self.get_minimum_fiber_length(state))
        return self._set_z(state, self._z_ten, lm)

    def get_fiber_length_state(self, state: State) -> jax.Array:
        """The fibre length state (z) of an elastic tendon, NaN for a rigid one."""
        if self.ignore_tendon_compliance:
            return jnp.full((), jnp.nan, state.q.dtype)
        return self._get_z(state, self._z_ten)


_REQUIRED_CURVE_PARAMS = (
    "fpe_strain_at_zero_force",
    "fpe_strain_at_one_norm_force",
    "fse_strain_at_one_norm_force",
)
