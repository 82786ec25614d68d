"""The mutable builder (System and Subsystems) that ``realize_topology()`` freezes.

As in Simbody, a ``MultibodySystem`` owns a ``SimbodyMatterSubsystem`` and force
subsystems; parts are added by constructing them with their owner. ``realize_topology()``
validates the parts, freezes them into a ``Model`` and returns the default ``State``. Any
later change to the System bumps its topology version: States made before are refused.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._results import RESULTS
from .._stage import Stage
from ..constraints.options import build_options
from ..dynamics.forces import calc_potential_energy
from ..dynamics.forces.kernel import calc_group_zdot
from ..forward import projection as pj
from ..forward.realize import consistent_or_error, realize, with_cache_dependence
from ..model.context import Context
from ..model.mobilizers import GIMBAL_LOCK_TOLERANCE
from ..model.model import ForceGroup, Identity, Model, constraint_param_slots, stack_transforms
from ..model.state import StageError, State
from ..model.topology import Topology
from . import diagnose as dg
from ._compiled import compiled_outside_traces, reads_cache
from .contact import contact_candidates, registry
from .paths import build_path_set
from .tendons import build_tendon_set

_uids = itertools.count(1)


class TopologyError(RuntimeError):
    """A State does not belong to the System's current topology."""


class MultibodySystem:
    """A System made of a matter subsystem, force subsystems and user subsystems."""

    def __init__(self) -> None:
        self._uid = next(_uids)
        self._subsystems: list[Subsystem] = []
        self._version = 0
        self._traced = False  # used inside a jax trace since the last topology change
        self._model: Model | None = None
        self._matter: Any = None
        self._checked_instance: list = []  # the Instance values _check_instance last accepted
        self._warned_inertia: set[int] = set()  # bodies whose non-physical inertia was reported

    # ------------------------------------------------------------------ building
    def _adopt(self, sub: Subsystem) -> None:
        if any(s.name == sub.name for s in self._subsystems):
            raise ValueError(
                f"a subsystem named {sub.name!r} is already in this System; give the new one another name"
            )
        self._subsystems.append(sub)
        self.invalidate_topology()

    def invalidate_topology(self) -> None:
        """Mark the topology changed: existing States become invalid (Simbody's
        ``invalidateSubsystemTopologyCache``).

        If the System was used inside a ``jit`` (or any trace) since its last topology
        change, JAX's caches are cleared too (``jax.clear_caches()``): a compiled function
        closes over the old model, and a cache hit with an old State would otherwise run it
        silently; now it retraces and the old State is refused."""
        if self._model is not None:
            self._version += 1
        self._model = None
        if self._traced:
            self._traced = False
            jax.clear_caches()

    @property
    def topology_version(self) -> int:
        """Incremented by every change made after a ``realize_topology()``."""
        return self._version

    def get_matter_subsystem(self) -> Any:
        """The System's ``SimbodyMatterSubsystem``."""
        if self._matter is None:
            raise ValueError("this System has no SimbodyMatterSubsystem; create one first")
        return self._matter

    @property
    def matter(self) -> Any:
        """The System's ``SimbodyMatterSubsystem``."""
        return self.get_matter_subsystem()

    def realize_topology(self) -> State:
        """Validate and freeze the System; return its default State (realized to Model)."""
        self._model = self._build_model()
        _check_held_within_limits(self.get_matter_subsystem())
        return self._model.default_state(euler=False)

    def get_default_state(self) -> State:
        """The default State of the current topology (realizing the topology if needed)."""
        if self._model is None:
            return self.realize_topology()
        return self._model.default_state(euler=False)

    def _build_model(self) -> Model:
        matter = self.get_matter_subsystem()
        mob = matter._mobods
        mp_len = max([m._mobilizer.n_params for m in mob[1:]] + [1])
        nb = len(mob)
        mass = np.array([m._mass_props.mass for m in mob])
        com = np.stack([m._mass_props.com for m in mob])
        unit_inertia = np.stack([m._mass_props.unit_inertia() for m in mob])
        _check_massless_subtrees(mob, mass)
        XPF_R, XPF_p = stack_transforms([m._X_PF for m in mob])
        XBM_R, XBM_p = stack_transforms([m._X_BM for m in mob])
        mparams = np.zeros((nb, mp_len))
        for m in mob[1:]:
            mparams[m.index, : m._mobilizer.n_params] = m._params
        instance: dict[str, dict[str, np.ndarray]] = {
            "matter": dict(
                mass=mass,
                com=com,
                unit_inertia=unit_inertia,
                X_PF_R=XPF_R,
                X_PF_p=XPF_p,
                X_BM_R=XBM_R,
                X_BM_p=XBM_p,
                mobilizer_params=mparams,
            )
        }
        instance["matter"]["armature"] = np.concatenate(
            [np.zeros(0)] + [m.get_default_armature() for m in mob[1:]]
        )
        stacked: dict[str, list[np.ndarray]] = {}
        slots = constraint_param_slots([(type(c).__name__, c._param_shapes()) for c in matter._constraints])
        for c, (prefix, _) in zip(matter._constraints, slots, strict=True):
            for k, v in c._defaults.items():
                stacked.setdefault(f"{prefix}.{k}", []).append(v)
        instance["matter"].update({k: np.stack(v) for k, v in stacked.items()})
        instance["matter"]["constraint_enabled"] = np.array(
            [0.0 if c._disabled_by_default else 1.0 for c in matter._constraints]
        )
        discrete: list[tuple[str, str, int, np.ndarray]] = []
        if matter._limits:
            lin, rot = matter.get_penetration_tol(), matter.get_rotary_limit_tol()
            lims = matter._limits
            instance["matter"]["limit_lower"] = np.array([lim._lower for lim in lims])
            instance["matter"]["limit_upper"] = np.array([lim._upper for lim in lims])
            instance["matter"]["limit_tol"] = np.array(
                [lim._tol if lim._tol is not None else (rot if lim._rotary else lin) for lim in lims]
            )
            for name in ("limit_engaged", "limit_engaged_count", "limit_force", "limit_value"):
                discrete.append((matter.name, name, int(Stage.REPORT), np.zeros(len(lims))))
        groups: list[ForceGroup] = []
        zdecl: list[tuple[str, np.ndarray]] = []
        for sub in self._subsystems:
            sub._declared_discrete = {}
            sub._declared_cache = {}
            sub._declared_z = None
            sub.realize_topology()
            for name, (st, val) in sub._declared_discrete.items():
                discrete.append((sub.name, name, int(st), val))
            if sub._declared_z is not None:
                zdecl.append((sub.name, sub._declared_z))
            if isinstance(sub, GeneralForceSubsystem):
                instance[sub.name] = {}
                groups.extend(sub._compile(instance[sub.name]))
        if matter._mobods[0].index != 0:
            raise ValueError("Ground must be body 0")
        parent = tuple(-1 if m._parent is None else m._parent.index for m in mob)
        mobilizers = tuple(None if m.index == 0 else m._mobilizer for m in mob)
        names = tuple(m.name for m in mob)
        records = tuple(c._record(slot) for c, slot in zip(matter._constraints, slots, strict=True))
        topologies = tuple(
            Topology(
                parent,
                tuple(None if m is None else (m.with_euler_angles() if e else m) for m in mobilizers),
                names,
            )
            for e in (False, True)
        )
        limits = tuple(lim._record(topologies) for lim in matter._limits)
        return Model(
            parent=parent,
            mobilizers=mobilizers,
            names=names,
            instance_defaults=instance,
            default_q_body=tuple(m._default_q for m in mob),
            default_u_body=tuple(m._default_u for m in mob),
            force_groups=tuple(groups),
            subsystems=tuple(self._subsystems),
            discrete_decl=tuple(discrete),
            z_decl=tuple(zdecl),
            version=self._version,
            uid=self._uid,
            options=build_options(parent, mobilizers, names, records, limits),
            constraint_records=records,
            limits=limits,
            force_subsystems=tuple(s for s in self._subsystems if isinstance(s, ForceSubsystem)),
            contact=contact_candidates(
                matter,
                tuple(-1 if m._parent is None else m._parent.index for m in mob),
                [m._mobilizer.nu if m.index else 0 for m in mob],
                mass,
            ),
            paths=build_path_set(matter),
            tendons=build_tendon_set(matter),
            mujoco=registry(matter).mujoco,
        )

    def summary(self, state: State | None = None) -> str:
        """A readable description: bodies with their mobilizer kind, parent, mass and q/u
        slots (in ``state``'s quaternion/Euler mode; default: quaternion), constraints,
        force elements and other subsystems. Print it in a notebook or a terminal."""
        if self._model is None:
            self.realize_topology()
        assert self._model is not None
        euler = bool(state.use_euler_angles) if state is not None else False
        topo = self._model.topology(euler)
        matter = self.get_matter_subsystem()
        mobs = matter._mobods
        lines = [
            f"MultibodySystem: {len(mobs) - 1} bodies, nq={int(topo.nq_body.sum())}, "
            f"nu={int(topo.nu_body.sum())}, {len(matter._constraints)} constraints"
            + (" (Euler-angle mode)" if euler else "")
        ]
        w = max([len(m.name) for m in mobs] + [4])

        def slots(start: int, n: int) -> str:
            return "-" if n == 0 else (f"{start}" if n == 1 else f"{start}:{start + n}")

        lines.append(f"  {'#':>3} {'body':<{w}} {'mobilizer':<16} {'parent':<{w}} {'mass':>10}  q       u")
        for m in mobs[1:]:
            b = m.index
            lines.append(
                f"  {b:>3} {m.name:<{w}} {m.mobilizer.kind:<16} {m._parent.name if m._parent else '':<{w}} "
                f"{m._mass_props.mass:>10.4g}  {slots(int(topo.q_start[b]), int(topo.nq_body[b])):<7} "
                f"{slots(int(topo.u_start[b]), int(topo.nu_body[b]))}"
            )
        if matter._constraints:
            counts = self._model.constraint_counts(euler)
            lines.append(
                f"constraints ({counts[0]} position, {counts[1]} velocity, {counts[2]} acceleration rows):"
            )
            for c in matter._constraints:
                on = " (disabled by default)" if c._disabled_by_default else ""
                who = ", ".join(b.name for b in (*c._bodies, *c._mobilizers)) or "-"
                lines.append(f"  {c.index:>3} {type(c).__name__:<20} on {who}{on}")
        if matter._limits:
            lines.append(f"coordinate limits ({len(matter._limits)} unilateral rows, hard):")
            for lim in matter._limits:
                lo, hi = lim.get_default_range()
                kind = "rotary" if lim._rotary else "linear"
                lines.append(f"  {lim.index:>3} {lim.name:<24} [{lo:.6g}, {hi:.6g}] {kind}")
        for sub in self._subsystems:
            if isinstance(sub, GeneralForceSubsystem):
                kinds: dict[str, int] = {}
                for e in sub._elements:
                    kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
                desc = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none"
                lines.append(f"forces ({sub.name}): {desc}")
            elif sub is not matter:
                lines.append(f"subsystem {sub.name!r}: {type(sub).__name__}")
        return "\n".join(lines)

    def model_for(self, state: State) -> Model:
        """The frozen Model a State belongs to; a clear error for stale or foreign States."""
        if not isinstance(state, State):
            raise TypeError(f"expected a simjax State, got {type(state).__name__}")
        if state.system_uid != self._uid:
            raise TopologyError(
                "this State was made by a different System; use the State returned by this "
                "System's realize_topology()"
            )
        if not self._traced and not dg._concrete(state):
            self._traced = True
        if self._model is None or state.topology_version != self._version:
            raise TopologyError(
                f"this State belongs to topology version {state.topology_version} but the "
                f"System is now at version {self._version} (it was changed after "
                "realize_topology()); call system.realize_topology() again and use the new "
                "default State"
            )
        return self._model

    # ------------------------------------------------------------------ realization
    def realize(self, state: State, stage: Stage = Stage.ACCELERATION) -> State:
        """Return ``state`` realized to ``stage`` (pure; jit/vmap/grad friendly).

        Stages already realized are reused; the cache gains every entry up to ``stage``.
        Constraints that contradict each other (no accelerations, or no velocities, satisfy
        them all) raise, outside ``jit`` at once and inside it at run time
        (``equinox.error_if``).
        """
        model = self.model_for(state)
        self._check_values(model, state)
        self._warn_gimbal_lock(model, state, Stage(stage))
        state = with_cache_dependence(model, state)
        out = realize(model, state, Stage(stage))
        to_acc = Stage(stage) >= Stage.ACCELERATION and state.stage < Stage.ACCELERATION
        if to_acc and model.constraint_records:
            out = consistent_or_error(out)
        if dg.debug_nans_enabled() and dg._concrete(out) and not dg.all_finite(out.cache):
            why = dg.find_nonfinite(self, state, Stage(stage))
            raise dg.NonFiniteError(f"realize to {Stage(stage).name}: {why or 'a non-finite result'}")
        return out

    def _check_values(self, model: Model, state: State) -> None:
        """Refuse, where they are concrete (not traced), a State's q or u holding NaN/inf
        and a quaternion of (near) zero length, naming the body: otherwise they would flow
        silently into NaN results or be read as the identity rotation."""
        q, u = state.q, state.u
        if isinstance(q, jax.core.Tracer) or isinstance(u, jax.core.Tracer):
            return
        topo = model.topology(state.use_euler_angles)
        mobods = self.get_matter_subsystem()._mobods

        def body_of(i: int, start: np.ndarray) -> str:
            b = int(np.searchsorted(start[1:], i, side="right"))
            return f"MobilizedBody {mobods[b].name!r} ({type(mobods[b]).__name__})"

        for name, x, start in (("q", q, topo.q_start), ("u", u, topo.u_start)):
            xn = np.asarray(x).reshape(-1, x.shape[-1]) if x.shape[-1] else None
            if xn is not None and not np.all(np.isfinite(xn)):
                i = int(np.argwhere(~np.isfinite(xn))[0, 1])
                raise ValueError(
                    f"realize: the State's {name}[{i}] ({body_of(i, start)}) is {float(xn[0, i])}; set "
                    f"finite values (state.with_{name}(...)) before realizing"
                )
        t = state.t
        if not isinstance(t, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(t))):
            raise ValueError(
                f"realize: the State's time is {np.asarray(t)}; set a finite time (state.with_time(t))"
            )
        self._check_instance(state, mobods, topo)
        slots = np.asarray(topo.quaternion_slots)
        if len(slots):
            qn = np.asarray(q).reshape(-1, q.shape[-1])
            norms = np.linalg.norm(qn[:, slots], axis=-1)
            if np.any(norms < 1e-12):
                k = int(np.argwhere(norms < 1e-12)[0, 1])
                raise ValueError(
                    f"realize: the quaternion q[{slots[k, 0]}:{slots[k, 0] + 4}] of "
                    f"{body_of(int(slots[k, 0]), topo.q_start)} is zero, which is no rotation; "
                    "set a unit quaternion (e.g. [1, 0, 0, 0] for the identity)"
                )

    def _warn_gimbal_lock(self, model: Model, state: State, stage: Stage) -> None:
        """Warn, where q is concrete, that a mobilizer with Euler angles is at gimbal lock
        (its middle angle within ``GIMBAL_LOCK_TOLERANCE`` of +-90 degrees) when ``stage``
        needs what is singular there: a Gimbal's mass matrix (Acceleration), the qdot of a
        quaternion kind in Euler-angle mode (Velocity). Names the body and the fix: a
        quaternion (Simbody's advice). Poses are fine there (lower stages do not warn)."""
        q = state.q
        if stage < Stage.VELOCITY or isinstance(q, jax.core.Tracer):
            return
        topo = model.topology(state.use_euler_angles)
        if not len(topo.euler_lock_q):
            return
        qn = np.asarray(q).reshape(-1, q.shape[-1])
        with jax.ensure_compile_time_eval():  # a concrete q inside a trace (a parameter traced)
            locked = np.asarray(topo.at_gimbal_lock(jnp.asarray(qn)))
        mobods = self.get_matter_subsystem()._mobods
        for k, (b, m) in enumerate(topo.lock_bodies()):
            need = Stage.ACCELERATION if m.qdot_is_u else Stage.VELOCITY
            if stage < need or not locked[:, k].any():
                continue
            i = int(topo.euler_lock_q[k])
            value = float(qn[int(np.argmax(locked[:, k])), i])
            head = (
                f"realize: MobilizedBody {mobods[b].name!r} ({m.kind}) is at gimbal lock: its middle "
                f"Euler angle q[{i}] = {value:.9g} rad is within {GIMBAL_LOCK_TOLERANCE:g} of +-90 degrees, "
            )
            if m.qdot_is_u:
                why = (
                    "where two of its speeds turn the body about the same axis and the mass matrix is "
                    "singular: the accelerations are NaN or meaningless there. Use a Ball "
                    "(sj.MobilizedBody.Ball, a quaternion: no singular orientation) instead of the "
                    "Gimbal, or keep the middle angle away from +-90 degrees"
                )
            else:
                why = (
                    "where qdot = N(q) u is singular (infinite or meaningless qdot). Use quaternions, "
                    "Simbody's default: matter.set_use_euler_angles(state, False)"
                )
            warnings.warn(head + why, RuntimeWarning, stacklevel=3)

    def _check_instance(self, state: State, mobods: list, topo: Any) -> None:
        """Refuse concrete Instance parameters that no physical model has: NaN anywhere (a
        gravity, a stiffness, a frame), a negative mass, a massless body with mobilities and
        no children (its mass matrix is singular), and a unit inertia that is not symmetric
        positive semi-definite or breaks the triangle inequality (I1 + I2 >= I3). Each
        error names the parameter or the body and the fix. Checked once per set of values."""
        leaves = jax.tree.leaves(state.instance)
        last = self._checked_instance
        if len(last) == len(leaves) and all(a is b for a, b in zip(last, leaves, strict=True)):
            return
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return
        for sub, params in state.instance.items():
            for name, x in params.items():
                xn = np.asarray(x)
                if np.issubdtype(xn.dtype, np.floating) and np.isnan(xn).any():
                    i = np.argwhere(np.isnan(xn))[0]
                    raise ValueError(
                        f"realize: Instance parameter {sub}.{name}{list(map(int, i))} is NaN; set a "
                        "number (the element's set_... method, or state.with_instance)"
                    )
        matter = state.instance.get("matter", {})
        if "mass" in matter and "unit_inertia" in matter:
            mass = np.asarray(matter["mass"])
            G = np.asarray(matter["unit_inertia"])
            children = {m.get_parent_mobilized_body().index for m in mobods[1:]}
            for b in range(1, len(mobods)):
                name = f"MobilizedBody {mobods[b].name!r}"
                mb = mass[..., b]
                if np.any(mb < 0):
                    raise ValueError(
                        f"realize: {name} has a negative mass {float(np.min(mb))}; set a mass >= 0"
                    )
                u0, nu = int(topo.u_start[b]), int(topo.nu_body[b])
                armature = np.asarray(matter["armature"])[..., u0 : u0 + nu] if "armature" in matter else None
                held = armature is not None and bool(np.all(armature > 0))  # armature keeps M regular
                if nu and b not in children and np.any(mb == 0) and not held:
                    raise ValueError(
                        f"realize: {name} has mass 0, mobilities and no children: its mass matrix is "
                        "singular (Simbody refuses a massless terminal body); give it a mass or its "
                        "mobilities an armature, or weld it"
                    )
                Gb = G[..., b, :, :].reshape(-1, 3, 3)
                scale = 1.0 + np.max(np.abs(Gb))
                if np.max(np.abs(Gb - np.swapaxes(Gb, -1, -2))) > 1e-9 * scale:
                    raise ValueError(
                        f"realize: the inertia of {name} is not symmetric; set a symmetric inertia"
                    )
                ev = np.linalg.eigvalsh(Gb)  # ascending: I1 <= I2 <= I3
                tol = 1e-9 * scale
                moments = np.round(ev.reshape(-1, 3)[0], 9)
                if np.any(ev[..., 0] < -tol):
                    raise ValueError(
                        f"realize: the inertia of {name} has principal moments {moments}: a negative "
                        "one, which no mass distribution has (the mass matrix is then indefinite); set "
                        "a physical inertia (sj.Inertia, sj.MassProperties)"
                    )
                if np.any(ev[..., 0] + ev[..., 1] < ev[..., 2] - tol) and b not in self._warned_inertia:
                    # Real models carry such inertias (Pose2Sim's toes) and Simbody runs them:
                    # said once per body, not refused.
                    self._warned_inertia.add(b)
                    warnings.warn(
                        f"realize: the inertia of {name} has principal moments {moments}, which break "
                        "the triangle inequality (the two smaller sum to less than the largest): no "
                        "mass distribution has it. simjax runs it, as Simbody does; fix the model's "
                        "inertia if it is a typo",
                        stacklevel=3,
                    )
        self._checked_instance = leaves

    def realize_model(self, state: State) -> State:
        """``realize(state, Stage.MODEL)``."""
        return self.realize(state, Stage.MODEL)

    def realize_position(self, state: State) -> State:
        """``realize(state, Stage.POSITION)``."""
        return self.realize(state, Stage.POSITION)

    def realize_velocity(self, state: State) -> State:
        """``realize(state, Stage.VELOCITY)``."""
        return self.realize(state, Stage.VELOCITY)

    def realize_dynamics(self, state: State) -> State:
        """``realize(state, Stage.DYNAMICS)``."""
        return self.realize(state, Stage.DYNAMICS)

    def realize_acceleration(self, state: State) -> State:
        """``realize(state, Stage.ACCELERATION)``."""
        return self.realize(state, Stage.ACCELERATION)

    # ------------------------------------------------------------------ projection
    def project_q(
        self,
        state: State,
        tol: float = 1e-4,
        iterations: int = 10,
        *,
        throw: bool = True,
        return_result: bool = False,
    ) -> State | tuple[State, RESULTS]:
        """Move q onto the position constraints (Simbody ``projectQ``): the minimum-norm
        Gauss-Newton correction in u-space, ``iterations`` steps, quaternions normalised.
        Damped for far starts: a step that would raise the error is retried with
        Levenberg-Marquardt damping and no step moves a u by more than 1 (rad or m), so
        the error never rises and joints are not wound up by many turns.

        Differentiable (a static number of steps). The returned State is realized to
        Position. If the RMS position error is still above ``tol`` (or non-finite):

        * ``throw=True`` raises: outside ``jit`` a ``ValueError`` naming the worst
          constraint; under ``jit``/``vmap``/``grad`` a runtime error through
          ``equinox.error_if`` naming the error's size and the tolerance.
        * ``throw=False`` never raises.

        A ``tol`` below what the dtype resolves for this model (``2 eps (1 + max |p_GB|)``,
        the round-off of the largest body distance from Ground: about 1e-15 in float64,
        1e-6 in float32 for a metre-sized model) fails the same way, whatever error is
        computed (as Simbody reports an accuracy it cannot reach as a failure): a
        computed error below it, even 0, does not show that the true error is.

        ``return_result=True`` returns ``(state, result)``, ``result`` an ``sj.RESULTS``
        item: ``successful`` or ``projection_failed`` (batched under ``vmap``).
        """
        model = self.model_for(state)
        out = realize(model, pj.project_q(model, state, iterations, damped=True), Stage.POSITION)
        mp, _, _ = model.constraint_counts(state.use_euler_angles)
        err = out.position_cache.qerr[:mp]
        return _finish_projection(model, out, err, tol, "position", 0, throw, return_result)

    def project_u(
        self, state: State, tol: float = 1e-4, *, throw: bool = True, return_result: bool = False
    ) -> State | tuple[State, RESULTS]:
        """Move u onto the velocity constraints (Simbody ``projectU``): the minimum-norm
        change of u that zeroes ``uerr`` (one exact least-squares step). Realized to
        Velocity; ``throw``, ``return_result`` and the smallest ``tol`` as in
        :meth:`project_q` (that one times ``1 + max |u|``)."""
        model = self.model_for(state)
        out = realize(model, pj.project_u(model, state), Stage.VELOCITY)
        err = out.velocity_cache.uerr
        return _finish_projection(model, out, err, tol, "velocity", 1, throw, return_result)

    def project(
        self,
        state: State,
        tol: float = 1e-4,
        iterations: int = 10,
        *,
        throw: bool = True,
        return_result: bool = False,
    ) -> State | tuple[State, RESULTS]:
        """``project_q`` then ``project_u`` (Simbody ``System::project``); ``throw`` and
        ``return_result`` as in :meth:`project_q` (the result is the first failure)."""
        s, rq = cast(
            tuple[State, RESULTS], self.project_q(state, tol, iterations, throw=throw, return_result=True)
        )
        s, ru = cast(tuple[State, RESULTS], self.project_u(s, tol, throw=throw, return_result=True))
        if not return_result:
            return s
        return s, RESULTS.where(rq == RESULTS.successful, ru, rq)

    @compiled_outside_traces
    def calc_constraint_error_norms(self, state: State) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """RMS of the position errors and of the velocity errors (Simbody's default norm;
        quaternion rows excluded). Needs Velocity."""
        model = self.model_for(state)
        mp, _, _ = model.constraint_counts(state.use_euler_angles)
        return pj.rms(state.qerr[:mp]), pj.rms(state.uerr)

    # ------------------------------------------------------------------ controls
    def get_actuators(self) -> list[Any]:
        """Every actuator (``Force.CoordinateActuator``, muscles), in control order: force
        subsystem by subsystem, in each the coordinate actuators then the muscles, each in
        the order they were created."""
        return [
            e
            for sub in self._subsystems
            if isinstance(sub, GeneralForceSubsystem)
            for e in sub._control_elements()
        ]

    def get_num_controls(self) -> int:
        """Number of controls (one per actuator)."""
        return len(self.get_actuators())

    def _control_subsystems(self) -> list[tuple[str, int]]:
        out = []
        for sub in self._subsystems:
            if isinstance(sub, GeneralForceSubsystem):
                n = sum(hasattr(e, "set_control") for e in sub._elements)
                if n:
                    out.append((sub.name, n))
        return out

    def get_controls(self, state: State) -> Float[Array, " ncontrols"]:
        """The controls of every actuator, as set (OpenSim's ``getControls``, MuJoCo's ``ctrl``)."""
        parts = [state.discrete[name]["controls"] for name, _ in self._control_subsystems()]
        return jnp.concatenate([jnp.zeros(0, state.q.dtype), *parts])

    def set_controls(self, state: State, controls: Any) -> State:
        """New State with the controls of every actuator replaced (``(ncontrols,)``, in
        ``get_actuators()`` order); the stage falls back below Dynamics. Controls outside an
        actuator's ``control_range`` are clamped when used, as MuJoCo clamps ``ctrl``."""
        subs = self._control_subsystems()
        n = sum(k for _, k in subs)
        c = jnp.asarray(controls)
        if c.ndim != 1 or c.shape[0] != n:
            names = [a.name for a in self.get_actuators()]
            shown = f" ({', '.join(names[:8])}{' ...' if n > 8 else ''})" if n else ""
            hint = (
                "; under vmap, map over a batch of control vectors and pass one per call"
                if c.ndim > 1
                else ""
            )
            raise ValueError(
                f"set_controls: got controls of shape {c.shape}, but this System has {n} actuators"
                f"{shown}: pass a vector of length {n}{hint}"
            )
        if not jnp.issubdtype(c.dtype, jnp.floating):
            c = c.astype(state.q.dtype)
        start = 0
        for name, k in subs:
            state = state.with_discrete(name, "controls", c[start : start + k])
            start += k
        return state

    # ------------------------------------------------------------------ reports
    @compiled_outside_traces
    def calc_kinetic_energy(self, state: State) -> Float[Array, ""]:
        """Kinetic energy ``1/2 u^T M u`` (needs Velocity)."""
        return self.get_matter_subsystem().calc_kinetic_energy(state)

    @compiled_outside_traces
    def calc_potential_energy(self, state: State) -> Float[Array, ""]:
        """Potential energy of every force element and force subsystem (needs Position)."""
        return calc_potential_energy(self.model_for(state), state)

    @compiled_outside_traces
    def calc_energy(self, state: State) -> Float[Array, ""]:
        """Kinetic plus potential energy (needs Velocity)."""
        return self.calc_kinetic_energy(state) + self.calc_potential_energy(state)

    def get_system_stage(self, state: State) -> Stage:
        """Stage the State is realized to."""
        return state.stage

    def context(self, state: State, subsystem: str | None = None) -> Context:
        """A read-only ``Context`` view of a State (what user callables receive)."""
        return Context(self.model_for(state), state, subsystem)


_PROJECTION_FIX = (
    "The constraints may be unsatisfiable from this state: start from a configuration closer to "
    "satisfying them (assemble it with sj.Assembler), raise `iterations`, or loosen `tol`",
    "The velocity constraints may contradict each other at this configuration: check them (and "
    "that q satisfies the position constraints: project_q first), or loosen `tol`",
)
_DECADES = (-15, 15)  # error sizes named under jit: 1e-15 .. 1e15 by decade


def _check_held_within_limits(matter: Any) -> None:
    """Refuse a ConstantCoordinate (enabled by default) whose default value lies outside
    the default range of a CoordinateLimit on the same coordinate by more than its deadband:
    no configuration meets both (values changed per State are caught by ``simulate``'s
    status, ``RESULTS.constraints_unsatisfiable``)."""
    for c in matter._constraints:  # (ConstantCoordinate says so: its module imports this one)
        if not getattr(c, "holds_a_coordinate", False) or c.is_disabled_by_default():
            continue
        value = float(c._defaults["position"])
        for lim in matter._limits:
            if lim._mobod is not c._mobilizers[0] or lim._which != c._which:
                continue
            tol = lim._tol
            if tol is None:
                tol = matter.get_rotary_limit_tol() if lim.is_rotary() else matter.get_penetration_tol()
            if value < lim._lower - tol or value > lim._upper + tol:
                raise ValueError(
                    f"Constraint.ConstantCoordinate(index={c.index}) holds {lim._mobod.name!r} q[{c._which}] "
                    f"at {value:g}, outside the range [{lim._lower:g}, {lim._upper:g}] of {lim!r}: no "
                    "configuration meets both. Hold it inside the range, widen the limit, or remove "
                    "one of them"
                )


def _finish_projection(
    model: Model, state: State, err: jax.Array, tol: float, what: str, level: int, throw: bool, want: bool
) -> State | tuple[State, RESULTS]:
    """Check a projection's RMS error against ``tol``: raise (``throw``) and/or return the
    ``RESULTS`` item (``want``)."""
    norm = pj.rms(err)
    floor = pj.resolvable_tolerance(state, level)
    # an error the dtype cannot resolve below tol does not show that tol is met
    unresolved = (tol < floor) & (err.shape[-1] > 0)
    failed = ~(norm <= tol) | unresolved  # NaN fails
    if throw and isinstance(err, jax.core.Tracer):
        state = _projection_error_if(state, failed, norm, tol, what, level, unresolved)
    elif throw:
        _check_accuracy(model, state, err, tol, what, level, floor)
    if not want:
        return state
    # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
    return state, RESULTS.where(failed, RESULTS.projection_failed, RESULTS.successful)  # type: ignore[arg-type]


def _projection_error_if(
    state: State,
    failed: jax.Array,
    norm: jax.Array,
    tol: float,
    what: str,
    level: int,
    unresolved: jax.Array,
) -> State:
    """``equinox.error_if`` for a traced projection: runtime messages can't hold runtime
    values, so the message is picked by the error's decade."""
    lo, hi = _DECADES
    fn = "project_q" if level == 0 else "project_u"
    head = f"projection failed ({fn}): the RMS {what} constraint error is "
    tail = f" > tolerance {tol:g}. {_PROJECTION_FIX[level]} (outside jit the error names the worst "
    tail += "constraint)"
    msgs = [head + "non-finite (NaN/inf)" + tail]
    for k in range(lo, hi + 1):
        size = f"between 1e{k} and 1e{k + 1}"
        size = f"below 1e{lo + 1}" if k == lo else f"above 1e{hi}" if k == hi else size
        msgs.append(head + size + tail)
    times_u = " x (1 + max |u|)" if level else ""
    msgs.append(
        f"projection failed ({fn}): the tolerance {tol:g} is below what {state.q.dtype.name} "
        f"resolves for this model (2 eps x (1 + the largest body distance from Ground){times_u}), "
        "so the computed error cannot show it is met. Loosen `tol`, or compute in float64 "
        "(jax.config.update('jax_enable_x64', True))"
    )
    decade = jnp.clip(jnp.floor(jnp.log10(jnp.where(norm > 0, norm, 1.0))), lo, hi)
    index = jnp.where(jnp.isfinite(norm), (decade - lo).astype(jnp.int32) + 1, 0)
    index = jnp.where(jnp.isfinite(norm) & (norm <= tol) & unresolved, len(msgs) - 1, index)
    # under vmap the message is the largest index of the batch: count failures only
    return eqx.branched_error_if(state, failed, jnp.where(failed, index, 0), msgs)


def _check_accuracy(
    model: Model, state: State, err: jax.Array, tol: float, what: str, level: int, floor: Any
) -> None:
    if isinstance(err, jax.core.Tracer) or err.ndim != 1 or err.shape[0] == 0:
        return
    e = np.asarray(err)
    norm = float(np.sqrt(np.mean(e**2)))
    if np.isfinite(norm) and norm <= tol and tol >= float(floor):
        return
    if np.isfinite(norm) and norm <= tol:
        times_u = " x (1 + max |u|)" if level else ""
        raise ValueError(
            f"projection failed: the tolerance {tol:g} is below what {e.dtype.name} resolves for this "
            f"model ({float(floor):.2g}: 2 eps x (1 + the largest body distance from Ground{times_u})), "
            f"so the computed RMS {what} error {norm:.3g} cannot show that it is met. Loosen `tol` to "
            f"at least {float(floor):.2g}, or compute in float64 "
            "(jax.config.update('jax_enable_x64', True))"
        )
    mp, mv, _ = model.constraint_counts(state.use_euler_angles)
    worst = int(np.argmax(np.abs(e)))
    name = "?"
    for c in model.constraints(state.use_euler_angles):
        rows = c.rows[0] if level == 0 else np.concatenate([c.rows[0], mp + c.rows[1]])
        if worst in rows:
            name = model.constraint_records[c.index].name
    raise ValueError(
        f"projection failed: the RMS {what} constraint error is {norm:.3g} > tolerance {tol:g}; "
        f"worst is {name} (error {e[worst]:.3g}). {_PROJECTION_FIX[level]}"
    )


def _callable_key(fn: Any) -> Any:
    """A user callable by identity; a bound method by its object's identity and function."""
    if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
        return (Identity(fn.__self__), fn.__func__)
    return Identity(fn)


class Subsystem:
    """Base for user subsystems (Simbody's ``Subsystem::Guts``), functional style.

    Override ``realize_topology`` to allocate discrete variables, cache entries and z
    with the ``allocate_*`` methods, and any ``realize_<stage>(ctx)`` hook to compute
    cache entries of that stage (return a dict of values). A hook may only read what is
    realized at its stage.
    """

    def __init__(self, system: MultibodySystem, name: str | None = None):
        self.name = name or type(self).__name__
        self._system = system
        self._declared_discrete: dict[str, tuple[Stage, np.ndarray]] = {}
        self._declared_cache: dict[str, tuple[Stage, Stage, Callable[[Context], Any]]] = {}
        self._declared_z: np.ndarray | None = None
        system._adopt(self)

    def get_system(self) -> MultibodySystem:
        """The owning System."""
        return self._system

    # hooks called while realizing (traced); realize_topology runs at build time only
    _TRACED_HOOKS: ClassVar[tuple[str, ...]] = (
        *(f"realize_{st.name.lower()}" for st in Stage if Stage.MODEL <= st <= Stage.REPORT),
        "calc_zdot",
        "calc_potential_energy",
        "calc_force",
    )

    def _structure_key(self) -> tuple:
        """What of this subsystem the compiled computation depends on (``Model`` equality):
        its kind, name and cache-entry declarations; the object itself (by identity) when
        its class overrides a hook that runs while realizing (user code may read anything)."""
        for hook in self._TRACED_HOOKS:
            owner = next((c for c in type(self).__mro__ if hook in c.__dict__), None)
            if owner is not None and owner not in (Subsystem, ForceSubsystem, GeneralForceSubsystem):
                return (type(self), self.name, Identity(self))
        cache = tuple(
            (n, int(e), int(lt), _callable_key(fn)) for n, (e, lt, fn) in self._declared_cache.items()
        )
        return (type(self), self.name, cache)

    # allocation (call from realize_topology) -------------------------------------------
    def realize_topology(self) -> None:
        """Allocate this subsystem's variables and cache entries (override)."""

    def allocate_discrete_variable(self, name: str, stage: Stage, default: Any) -> None:
        """A discrete variable; changing it drops the State below ``stage``."""
        stage = Stage(stage)
        if stage <= Stage.TOPOLOGY or stage > Stage.REPORT:
            raise ValueError(
                f"{self.name}: a discrete variable's stage must be Model..Report, got {stage.name}"
            )
        self._declared_discrete[name] = (stage, np.asarray(default, dtype=float))

    def allocate_cache_entry(
        self, name: str, earliest: Stage, latest: Stage, fn: Callable[[Context], Any]
    ) -> None:
        """A cache entry computed by ``fn(ctx)``, valid from ``earliest``; computed during
        ``realize(latest)``, or on demand if ``latest`` is ``Stage.INFINITY`` (lazy)."""
        earliest, latest = Stage(earliest), Stage(latest)
        if latest < earliest:
            raise ValueError(f"{self.name}.{name}: latest stage is before earliest")
        self._declared_cache[name] = (earliest, latest, fn)

    def allocate_z(self, default: Any) -> None:
        """This subsystem's block of auxiliary continuous variables z (give ``calc_zdot``)."""
        self._declared_z = np.atleast_1d(np.asarray(default, dtype=float))

    def calc_zdot(self, ctx: Context) -> Any:
        """Time derivative of this subsystem's z block (override when you allocate z)."""
        return jnp.zeros_like(ctx.get_z())

    def calc_potential_energy(self, ctx: Context) -> Any:
        """Potential-energy contribution (override in force subsystems)."""
        return 0.0

    # realize hooks -------------------------------------------------------------------
    def realize_model(self, ctx: Context) -> dict[str, Any] | None:
        """Model-stage hook."""

    def realize_instance(self, ctx: Context) -> dict[str, Any] | None:
        """Instance-stage hook."""

    def realize_time(self, ctx: Context) -> dict[str, Any] | None:
        """Time-stage hook."""

    def realize_position(self, ctx: Context) -> dict[str, Any] | None:
        """Position-stage hook."""

    def realize_velocity(self, ctx: Context) -> dict[str, Any] | None:
        """Velocity-stage hook."""

    def realize_dynamics(self, ctx: Context) -> dict[str, Any] | None:
        """Dynamics-stage hook."""

    def realize_acceleration(self, ctx: Context) -> dict[str, Any] | None:
        """Acceleration-stage hook."""

    def realize_report(self, ctx: Context) -> dict[str, Any] | None:
        """Report-stage hook."""

    def _realize_stage(self, ctx: Context, st: Stage) -> dict[str, Any]:
        hook = getattr(self, f"realize_{st.name.lower()}", None)
        out = dict(hook(ctx) or {}) if hook is not None else {}
        for name, (_e, latest, fn) in self._declared_cache.items():
            if latest == st:
                out[name] = fn(ctx)
        return out

    # state access ----------------------------------------------------------------------
    def get_discrete_variable(self, state: State, name: str) -> Any:
        """Value of one of this subsystem's discrete variables."""
        return state.discrete[self.name][name]

    def set_discrete_variable(self, state: State, name: str, value: Any) -> State:
        """New State with a discrete variable changed (the stage falls back)."""
        return state.with_discrete(self.name, name, value)

    def get_z(self, state: State) -> Float[Array, " nz_sub"]:
        """This subsystem's z block."""
        return state.z[self._system.model_for(state).z_slices[self.name]]

    def set_z(self, state: State, z: Any) -> State:
        """New State with this subsystem's z block replaced."""
        sl = self._system.model_for(state).z_slices[self.name]
        return state.with_z(state.z.at[sl].set(jnp.asarray(z, state.z.dtype)))

    @reads_cache
    def get_cache_entry(self, state: State, name: str) -> Any:
        """A cache entry: stored if realized to its latest stage, else computed (lazy)."""
        if name not in self._declared_cache:
            # a value returned by a realize_<stage> hook
            for st, per_sub in sorted(state.cache.subsystems.items()):
                if name in per_sub.get(self.name, {}) and state.stage >= st:
                    return per_sub[self.name][name]
            raise KeyError(
                f"{self.name} has no cache entry {name!r} in this State (declare it with "
                "allocate_cache_entry, or return it from a realize_<stage> hook and realize "
                "that stage first)"
            )
        earliest, latest, fn = self._declared_cache[name]
        if state.stage < earliest:
            raise StageError(
                f"cache entry {self.name}.{name} needs Stage.{earliest.name} but the State is "
                f"at Stage.{state.stage.name}; realize it first"
            )
        stored = state.cache.subsystems.get(int(latest), {}).get(self.name, {})
        if state.stage >= latest and name in stored:
            return stored[name]
        model = self._system.model_for(state)
        return fn(Context(model, state, self.name))

    def is_cache_value_current(self, state: State, name: str) -> bool:
        """Whether the entry is stored in the State (realized to its latest stage)."""
        _e, latest, _ = self._declared_cache[name]
        return state.stage >= latest and name in state.cache.subsystems.get(int(latest), {}).get(
            self.name, {}
        )

    def invalidate_subsystem_topology_cache(self) -> None:
        """Call after changing a topological property (e.g. a default value)."""
        self._system.invalidate_topology()


class ForceSubsystem(Subsystem):
    """Base for user force subsystems: override ``calc_force`` and
    ``calc_potential_energy`` (both receive a read-only ``Context`` at Velocity stage or
    Position stage respectively)."""

    def calc_force(self, ctx: Context) -> tuple[Any, Any] | None:
        """Return ``(body_forces (nb, 6), mobility_forces (nu,))``; either may be None.

        Body forces are ``[torque about the body origin; force]`` in Ground."""
        return None


class GeneralForceSubsystem(Subsystem):
    """Holds force elements (``sj.Force.*``); each type is evaluated vectorised."""

    def __init__(self, system: MultibodySystem, name: str | None = None):
        self._elements: list[Any] = []
        self._z_parts: list[np.ndarray] = []
        self._actuator_z_offset = 0  # where the coordinate actuators' activations start in z
        if name is None:
            n = sum(isinstance(s, GeneralForceSubsystem) for s in system._subsystems)
            name = "forces" if n == 0 else f"forces{n}"
        super().__init__(system, name)

    def _add(self, element: Any) -> None:
        self._elements.append(element)
        self._system.invalidate_topology()

    def realize_topology(self) -> None:
        """Let each element allocate what it keeps in the State (e.g. DiscreteForces); the
        z blocks the elements reserve (``reserve_z``) become this subsystem's z, and the
        actuators' controls (coordinate actuators first, then muscles) its ``controls``."""
        self._z_parts = []
        for e in self._elements:
            e._declare(self)
        if self._z_parts:
            self.allocate_z(np.concatenate(self._z_parts))
        n = len(self._control_elements())
        if n:
            self.allocate_discrete_variable("controls", Stage.DYNAMICS, np.zeros(n))

    def reserve_z(self, default: Any) -> int:
        """Append a block to this subsystem's z (during ``realize_topology``); returns its
        offset in the block."""
        off = sum(len(p) for p in self._z_parts)
        self._z_parts.append(np.atleast_1d(np.asarray(default, dtype=float)))
        return off

    def _control_elements(self) -> list[Any]:
        """The elements driven by a control, in control order: each kind's ``_control_rank``
        (coordinate actuators 0, muscles 1), then creation order."""
        els = [e for e in self._elements if hasattr(e, "set_control")]
        return sorted(els, key=lambda e: getattr(e, "_control_rank", 0))

    def _compile(self, instance: dict[str, np.ndarray]) -> list[ForceGroup]:
        """The frozen records of this subsystem's elements, one per kind (or per element
        for kinds grouped alone); their stacked parameters go into ``instance``."""
        by_cls: dict[Any, list[Any]] = {}
        for e in self._elements:
            by_cls.setdefault(e._group_key(), []).append(e)
        groups = []
        for key, els in by_cls.items():
            cls = type(els[0])
            prefix = cls._key_name(key)
            for i, e in enumerate(els):
                e._slot = (self.name, prefix, i)
            params = [e._instance_params() for e in els]
            for pname in params[0]:
                instance[f"{prefix}.{pname}"] = np.stack([p[pname] for p in params])
            grp = ForceGroup(
                kernel=cls.kernel,
                subsystem=self.name,
                prefix=prefix,
                params=tuple(params[0]),
                statics=tuple(e._static() for e in els),
            )
            groups.append(grp)
        return groups

    def calc_zdot(self, ctx: Context) -> Any:
        """The rates of this subsystem's z: actuators' activations, muscles' states (each
        kind's rates over the whole block, summed)."""
        out = jnp.zeros_like(ctx.get_z())
        for g in ctx._model.force_groups:
            if g.subsystem == self.name:
                zd = calc_group_zdot(ctx, g)
                if zd is not None:
                    out = out + zd
        return out

    def get_num_forces(self) -> int:
        """Number of force elements."""
        return len(self._elements)


def _check_massless_subtrees(mob: Sequence[Any], mass: np.ndarray) -> None:
    """Refuse a moving body whose whole subtree (it and everything outboard) is massless
    (a massless body has no inertia either): its mobilities have no inertia, M is singular
    and every acceleration would come out NaN (Simbody: a massless body must not be
    terminal)."""
    carried = np.array(mass, dtype=float)
    for m in reversed(mob[1:]):
        if m._parent is not None:
            carried[m._parent.index] += carried[m.index]
    for m in mob[1:]:
        if m._mobilizer.nu > 0 and carried[m.index] <= 0:
            raise ValueError(
                f"MobilizedBody {m.name!r} ({type(m).__name__}) moves but neither it nor any body "
                "outboard of it has mass or inertia, so its accelerations are undefined (M is "
                "singular). Give it (or a child) mass properties, weld it "
                "(MobilizedBody.Weld), or remove it"
            )
