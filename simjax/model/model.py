"""The frozen result of ``realize_topology()``: static topology, defaults, force groups,
constraint and limit records, and what both Model-stage options (quaternions or Euler
angles) compile them to."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from .._stage import Stage
from .contact import ContactCandidates, MujocoConstraintOptions
from .mobilizers import AbstractMobilizer
from .paths import PathSet
from .state import Cache, State
from .tendons import TendonSet
from .topology import Topology


class Identity:
    """Wraps a user object so that it compares (and hashes) by identity inside a structural
    key: its methods may read any attribute, and it may define an ``__eq__`` without a hash."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return hash(id(self.obj))  # in-process only: never part of a name or of the State


class ForceKernel(Protocol):
    """The equations of one force kind (``simjax.dynamics.forces``): frozen, field-less,
    evaluated over a whole group. ``P`` are the group's stacked Instance parameters by
    name, ``ctx`` a read-only ``Context``, ``S`` the record's statics, ``w`` the elements'
    weights (n,)."""

    def calc(
        self, P: dict[str, jax.Array], ctx: Any, S: tuple, w: jax.Array
    ) -> tuple[jax.Array | None, jax.Array | None]:
        """Body forces (nb, 6) and mobility forces (nu,), weighted; None for a part not applied."""
        ...

    def calc_moving(self, P: dict[str, jax.Array], ctx: Any, S: tuple, w: jax.Array) -> jax.Array | None:
        """The body forces about Ground's origin on the moving rows (nm, 6), where the kind
        has a cheaper form there than its body forces; else None."""
        ...

    def potential(self, P: dict[str, jax.Array], ctx: Any, S: tuple) -> jax.Array:
        """Potential energy per element (n,) or of the whole group, unweighted."""
        ...

    def calc_zdot(self, P: dict[str, jax.Array], ctx: Any, S: tuple) -> jax.Array | None:
        """Rates of the subsystem's z the group owns, or None."""
        ...


@dataclass(frozen=True)
class ForceGroup:
    """The frozen record of all force elements of one kind in one force subsystem,
    evaluated together by ``kernel``. Element ``i``'s parameter ``name`` is row ``i`` of
    ``state.instance[subsystem][f"{prefix}.{name}"]``; ``statics[i]`` is its static data
    (body indices, flags; a user object wrapped in ``Identity``). Holds no handle: records
    compare equal when they compute the same thing."""

    kernel: ForceKernel
    subsystem: str
    prefix: str
    params: tuple[str, ...]
    statics: tuple[Hashable, ...]

    @property
    def size(self) -> int:
        """Number of elements in the group."""
        return len(self.statics)


@dataclass(frozen=True, eq=False)
class ConstraintRecord:
    """One constraint as the Model holds it, fixed at ``realize_topology()``: its kernel
    (its equations: a ``simjax.constraints.kinds`` kernel), the indices of its constrained
    bodies and mobilizers (in the order given), its parameters' names and shapes and where
    they are stacked in the State (``param_slot``: ``(prefix, row)``, see
    ``constraint_param_slots``), its unilateral rows among the Model's limits (a custom
    coupling's), and its name for messages."""

    name: str
    kernel: Any
    bodies: tuple[int, ...]
    mobilizers: tuple[int, ...]
    param_shapes: tuple[tuple[str, tuple[int, ...]], ...]  # sorted by name
    param_slot: tuple[str, int]
    unilateral_rows: tuple[int, ...] = ()

    @property
    def key(self) -> tuple:
        """Constraints with equal keys have the same equations for the same numbers of
        bodies and mobilizers and the same parameter shapes: one ``vmap`` evaluates them."""
        return (self.kernel, len(self.bodies), len(self.mobilizers), self.param_shapes)

    @property
    def param_names(self) -> tuple[str, ...]:
        """The parameters' names, sorted."""
        return tuple(n for n, _ in self.param_shapes)


@dataclass(frozen=True, eq=False)
class LimitRecord:
    """One unilateral row as the Model holds it: ``key`` (its structure), ``name`` (for
    messages) and, for a coordinate limit, the q it watches and the u that is its speed in
    each Model option (``(quaternion, euler)``; None for a row of a custom coupling, whose
    value its constraint's kernel gives)."""

    name: str
    key: tuple
    q_index: tuple[int, int] | None = None
    u_index: tuple[int, int] | None = None


@dataclass(frozen=True, eq=False)
class ModelOption:
    """What one Model-stage option (quaternions or Euler angles) compiles to: the Topology,
    each constraint's static data (bodies, q/u indices, rows:
    ``simjax.constraints.kernels.CompiledConstraint``), the constraint groups each
    evaluated with one ``vmap`` (``ConstraintGroup``), the unilateral rows
    (``simjax.constraints.unilateral.LimitRows``) and the numbers ``(mp, mv, ma)`` of
    holonomic, nonholonomic and acceleration-only rows."""

    topology: Topology
    constraints: tuple[Any, ...]
    groups: tuple[Any, ...]
    limits: Any
    counts: tuple[int, int, int]


@dataclass(frozen=True, eq=False)
class Model:
    """Compiled, immutable description of a System (its Topology-stage data), built whole
    by ``realize_topology()``: nothing writes into it afterwards.

    Two Models are equal (and hash alike) when everything the realized computation depends
    on is equal (see ``structure_key``), so a second identical System reuses the first one's
    compiled ``realize``. Numbers that live in the State (masses, parameters, defaults) do
    not count; ``version`` and ``uid`` do not either (stale or foreign States are refused
    outside ``jit``, by ``MultibodySystem.model_for``)."""

    parent: tuple[int, ...]
    mobilizers: tuple[AbstractMobilizer | None, ...]
    names: tuple[str, ...]
    instance_defaults: dict[str, dict[str, np.ndarray]]
    default_q_body: tuple[np.ndarray | None, ...]  # user defaults per body (base mode)
    default_u_body: tuple[np.ndarray | None, ...]
    force_groups: tuple[ForceGroup, ...]
    subsystems: tuple[Any, ...]  # every Subsystem after matter (simjax.system.system)
    discrete_decl: tuple[tuple[str, str, int, np.ndarray], ...]
    z_decl: tuple[tuple[str, np.ndarray], ...]
    version: int
    uid: int
    options: tuple[ModelOption, ModelOption]  # (quaternion, Euler angles)
    constraint_records: tuple[ConstraintRecord, ...] = ()
    force_subsystems: tuple[Any, ...] = ()  # subsystems with a calc_force (ForceSubsystem)
    limits: tuple[LimitRecord, ...] = ()  # unilateral rows (coordinate limits, couplings')
    contact: ContactCandidates | None = None  # the static contact candidate list
    paths: PathSet | None = None  # every GeometryPath's points, stacked
    tendons: TendonSet | None = None  # every MuJoCo tendon (sj.Tendon)
    mujoco: MujocoConstraintOptions | None = None  # MuJoCo's soft contact and limit rows

    # ------------------------------------------------------------------ equality
    @cached_property
    def structure_key(self) -> tuple:
        """Everything the traced computation depends on: parents, mobilizer kinds, names,
        force groups (the records: kernel, subsystem, parameter names, statics), subsystems, constraints'
        structure and bodies, discrete and z declarations, Instance parameters' names and
        shapes. User objects (subsystems with hooks, Custom forces) count by identity. If a
        part cannot be hashed, the Model is only equal to itself."""
        inst = tuple(
            (sub, tuple(sorted((k, np.shape(v)) for k, v in d.items())))
            for sub, d in sorted(self.instance_defaults.items())
        )
        cons = tuple((c.key, c.bodies, c.mobilizers) for c in self.constraint_records)
        key = (
            self.parent,
            self.mobilizers,
            self.names,
            inst,
            self.force_groups,
            tuple(_key_of(s) for s in self.subsystems),
            tuple(s.name for s in self.force_subsystems),
            tuple((sub, name, st, np.shape(v)) for sub, name, st, v in self.discrete_decl),
            tuple((name, np.shape(z0)) for name, z0 in self.z_decl),
            cons,
            tuple(lim.key for lim in self.limits),
            None if self.contact is None else self.contact.key,
            None if self.paths is None else self.paths.key,
            None if self.tendons is None else self.tendons.key,
            None if self.mujoco is None else self.mujoco.key,
        )
        try:
            hash(key)
        except TypeError:
            return (Identity(self),)
        return key

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Model):
            return NotImplemented
        return self._hash == other._hash and self.structure_key == other.structure_key

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash(self.structure_key)

    def option(self, euler: bool) -> ModelOption:
        """What a Model-stage option compiles to (quaternions: False; Euler angles: True)."""
        return self.options[bool(euler)]

    def constraints(self, euler: bool) -> tuple[Any, ...]:
        """Compiled constraints (static bodies, q/u indices, row blocks) for a Model option."""
        return self.options[bool(euler)].constraints

    @property
    def constraint_slots(self) -> tuple[tuple[str, int], ...]:
        """Per constraint, where its parameters are stacked (``constraint_param_slots``)."""
        return tuple(c.param_slot for c in self.constraint_records)

    def constraint_counts(self, euler: bool) -> tuple[int, int, int]:
        """``(mp, mv, ma)``: numbers of holonomic, nonholonomic, acceleration-only rows."""
        return self.options[bool(euler)].counts

    @property
    def nb(self) -> int:
        """Number of bodies (Ground included)."""
        return len(self.parent)

    def topology(self, euler: bool) -> Topology:
        """Topology for the given Model-stage option."""
        return self.options[bool(euler)].topology

    @cached_property
    def z_slices(self) -> dict[str, slice]:
        """Slice of the global z owned by each subsystem."""
        out, k = {}, 0
        for name, z0 in self.z_decl:
            out[name] = slice(k, k + len(z0))
            k += len(z0)
        return out

    def subsystem_by_name(self, name: str) -> Any:
        """Look up a subsystem by name."""
        for s in self.subsystems:
            if s.name == name:
                return s
        raise KeyError(f"no subsystem named {name!r}")

    # ------------------------------------------------------------------ default state
    def default_q(self, euler: bool) -> np.ndarray:
        """Default q vector for a Model option."""
        topo = self.topology(euler)
        parts = [np.zeros(0)]
        for b in range(1, self.nb):
            m = topo.mobilizers[b]
            user = self.default_q_body[b]
            if user is not None and euler and self.mobilizers[b].uses_quaternion:  # type: ignore[union-attr]
                # Convert the user's quaternion-mode default to Euler angles.
                base = self.mobilizers[b]
                par = jnp.asarray(self.instance_defaults["matter"]["mobilizer_params"][b][: base.n_params])  # type: ignore[union-attr]
                R, p = base.X_FM(jnp.asarray(user), par)  # type: ignore[union-attr]
                parts.append(np.asarray(m.q_to_fit_transform(R, p, par)))  # type: ignore[union-attr]
            elif user is not None:
                parts.append(np.asarray(user, dtype=float))
            else:
                parts.append(m.default_q())  # type: ignore[union-attr]
        return np.concatenate(parts)

    def default_u(self, euler: bool) -> np.ndarray:
        """Default u vector."""
        topo = self.topology(euler)
        parts = [np.zeros(0)]
        for b in range(1, self.nb):
            user = self.default_u_body[b]
            parts.append(np.zeros(topo.nu_body[b]) if user is None else np.asarray(user, float))
        return np.concatenate(parts)

    def default_state(self, euler: bool = False) -> State:
        """The default State, realized through Model stage."""
        dt = jnp.result_type(float)
        inst = {
            k: {n: jnp.asarray(v, dtype=dt) for n, v in d.items()} for k, d in self.instance_defaults.items()
        }
        disc: dict[str, dict[str, Any]] = {}
        for sub, name, _st, val in self.discrete_decl:
            disc.setdefault(sub, {})[name] = jnp.asarray(val, dtype=dt)
        z = np.concatenate([np.zeros(0)] + [z0 for _, z0 in self.z_decl])
        return State(
            t=jnp.asarray(0.0, dt),
            q=jnp.asarray(self.default_q(euler), dt),
            u=jnp.asarray(self.default_u(euler), dt),
            z=jnp.asarray(z, dt),
            instance=inst,
            discrete=disc,
            cache=Cache(),
            stage=Stage.MODEL,
            topology_version=self.version,
            system_uid=self.uid,
            use_euler_angles=euler,
            discrete_stages=tuple((s, n, int(st)) for s, n, st, _ in self.discrete_decl),
        )

    # ------------------------------------------------------------------ helpers
    def body_q(self, state: State, b: int) -> jax.Array:
        """q block of body b."""
        topo = self.topology(state.use_euler_angles)
        s = int(topo.q_start[b])
        return state.q[s : s + int(topo.nq_body[b])]

    def body_u(self, state: State, b: int) -> jax.Array:
        """u block of body b."""
        topo = self.topology(state.use_euler_angles)
        s = int(topo.u_start[b])
        return state.u[s : s + int(topo.nu_body[b])]

    def body_velocities(self, state: State) -> jax.Array:
        """Simbody-convention ``V_GB = [w; v of B's origin]`` in Ground, (nb, 6)."""
        pc, vc = state.position_cache, state.velocity_cache
        w = vc.V_O[:, :3]
        return jnp.concatenate([w, vc.V_O[:, 3:] + sp.cross(w, pc.p_GB)], axis=1)

    def body_accelerations(self, state: State) -> jax.Array:
        """Simbody-convention ``A_GB = [alpha; a of B's origin]`` in Ground, (nb, 6)."""
        pc, vc, ac = state.position_cache, state.velocity_cache, state.acceleration_cache
        return classical_acceleration(ac.A_O, vc.V_O, pc.p_GB)


def constraint_param_slots(
    constraints: Sequence[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]],
) -> tuple[tuple[str, int], ...]:
    """Where each constraint's Instance parameters live in the State: ``(prefix, row)``, the
    parameter ``name`` being row ``row`` of ``instance["matter"][f"{prefix}.{name}"]``.
    Constraints of one kind with the same parameter names and shapes share stacked arrays
    (one per parameter), so a kind's parameters are a few State leaves, not one per
    constraint, and a vmapped group reads them with one gather. Prefixes are stable names
    (``constraint.Ball``; ``constraint.Custom_1`` for a second parameter layout of a kind),
    never object ids. ``constraints``: per constraint, its kind's name and its parameters'
    sorted ``(name, shape)``."""
    prefixes: dict[tuple[str, tuple], str] = {}
    sizes: dict[str, int] = {}
    out = []
    for kind, shapes in constraints:
        fam = (kind, shapes)
        if fam not in prefixes:
            j = sum(f[0] == kind for f in prefixes)
            prefixes[fam] = f"constraint.{kind}" + (f"_{j}" if j else "")
        prefix = prefixes[fam]
        out.append((prefix, sizes.get(prefix, 0)))
        sizes[prefix] = sizes.get(prefix, 0) + 1
    return tuple(out)


def _key_of(obj: Any) -> Any:
    """An object's ``_structure_key()`` (subsystems and constraints define one);
    the object itself by identity otherwise."""
    f = getattr(obj, "_structure_key", None)
    return f() if f is not None else Identity(obj)


def classical_acceleration(A_O: jax.Array, V_O: jax.Array, p: jax.Array) -> jax.Array:
    """Spatial acceleration about Ground's origin -> ``[alpha; a of point p]`` (nb, 6)."""
    w, v = jnp.split(V_O, 2, axis=1)
    alpha, a = jnp.split(A_O, 2, axis=1)
    v_p = v + sp.cross(w, p)
    a_p = a + sp.cross(alpha, p) + sp.cross(w, v_p)
    return jnp.concatenate([alpha, a_p], axis=1)


def stack_transforms(ts: list[sp.Transform]) -> tuple[np.ndarray, np.ndarray]:
    """Stack Transforms into (n, 3, 3) and (n, 3) NumPy arrays."""
    R = np.stack([np.asarray(t.R, dtype=float) for t in ts])
    p = np.stack([np.asarray(t.p, dtype=float) for t in ts])
    return R, p
