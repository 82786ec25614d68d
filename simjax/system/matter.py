"""``SimbodyMatterSubsystem``: the bodies and the matter operators (Simbody names)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _spatial as sp
from .._stage import Stage
from ..constraints import kernels as cn
from ..dynamics import stages as rz
from ..dynamics.detection import Contacts, find_contacts
from ..dynamics.forces import fold_body_forces
from ..model.contact import MujocoConstraintOptions
from ..model.model import Model, classical_acceleration
from ..model.state import Cache, State
from ..model.topology import Topology
from ..tree import traversal as _tree
from . import contact as ct
from . import paths as pa
from . import tendons as tn
from ._compiled import compiled_outside_traces, reads_cache
from .bodies import Ground, MobilizedBody
from .system import MultibodySystem, Subsystem


class SimbodyMatterSubsystem(Subsystem):
    """The mobilized bodies of a System and the operators on them.

    Operators take a State realized far enough (each says which stage) and never
    change it. Spatial results follow Simbody: ``[angular; linear]`` in Ground, linear
    parts at the body origin (or the given station).
    """

    def __init__(self, system: MultibodySystem, name: str = "matter"):
        if system._matter is not None:
            raise ValueError("this System already has a SimbodyMatterSubsystem")
        self._mobods: list[MobilizedBody] = []
        self._constraints: list[Any] = []
        self._limits: list[Any] = []  # Constraint.CoordinateLimit, in order of creation
        self._paths: list[Any] = []  # GeometryPath, in order of creation
        self._wrap_objects: list[Any] = []  # WrapCylinder, WrapSphere, in order of creation
        self._tendons: list[Any] = []  # Tendon (MuJoCo's), in order of creation
        self._penetration_tol: float | None = None
        self._rotary_limit_tol: float | None = None
        super().__init__(system, name)
        system._matter = self
        Ground(self)

    # ------------------------------------------------------------------ unilateral
    def set_penetration_tol(self, tol: float | None) -> None:
        """Default deadband of linear unilateral rows (ArtiSynth's ``penetrationTol``); ``None``:
        1e-4 times the model's size (its reach from Ground at the default frames). A topological
        setting: it fills each limit's ``tol`` in the default State."""
        if tol is not None and not (np.isfinite(tol) and tol >= 0):
            raise ValueError(f"set_penetration_tol: give a finite tolerance >= 0 (or None), got {tol}")
        self._penetration_tol = None if tol is None else float(tol)
        self._system.invalidate_topology()

    def set_rotary_limit_tol(self, tol: float | None) -> None:
        """Default deadband of rotary unilateral rows in radians (ArtiSynth's
        ``rotaryLimitTol``); ``None``: 1e-4 rad."""
        if tol is not None and not (np.isfinite(tol) and tol >= 0):
            raise ValueError(f"set_rotary_limit_tol: give a finite tolerance >= 0 (or None), got {tol}")
        self._rotary_limit_tol = None if tol is None else float(tol)
        self._system.invalidate_topology()

    def get_penetration_tol(self) -> float:
        """Default deadband of linear unilateral rows (see ``set_penetration_tol``)."""
        if self._penetration_tol is not None:
            return self._penetration_tol
        reach = np.zeros(len(self._mobods))
        extent = 0.0
        for m in self._mobods[1:]:
            parent = 0 if m._parent is None else m._parent.index
            reach[m.index] = reach[parent] + np.linalg.norm(m._X_PF.p) + np.linalg.norm(m._X_BM.p)
            extent = max(extent, reach[m.index] + float(np.linalg.norm(m._mass_props.com)))
        return 1e-4 * extent if extent > 0 else 1e-4

    def get_rotary_limit_tol(self) -> float:
        """Default deadband of rotary unilateral rows, radians (see ``set_rotary_limit_tol``)."""
        return 1e-4 if self._rotary_limit_tol is None else self._rotary_limit_tol

    def get_num_limits(self) -> int:
        """Number of coordinate limits (unilateral constraints)."""
        return len(self._limits)

    def get_limit(self, index: int) -> Any:
        """A coordinate limit by its index."""
        return self._limits[index]

    # ------------------------------------------------------------------ paths
    def get_num_paths(self) -> int:
        """Number of paths (``sj.GeometryPath``)."""
        return len(self._paths)

    def get_path(self, index: int) -> Any:
        """A path by its index (order of creation)."""
        return self._paths[index]

    @compiled_outside_traces
    def calc_path_lengths(self, state: State) -> jax.Array:
        """Every path's length (n_paths,) in order of creation (needs Position)."""
        return pa.calc_path_lengths(self, state)

    @compiled_outside_traces
    def calc_path_points(self, state: State) -> tuple[jax.Array, jax.Array]:
        """Every path as a polyline in Ground, as a viewer draws it: ``(n_paths, S, 3)``
        points (each path's active points, its wraps' tangent points and points along each
        wrap's arc), the real ones first in path order, and ``(n_paths, S)`` which are real
        (needs Position)."""
        return pa.calc_path_points(self, state)

    def calc_path_lengthening_speeds(self, state: State) -> jax.Array:
        """Every path's lengthening speed (n_paths,) (needs Velocity)."""
        return pa.calc_path_lengthening_speeds(self, state)

    @compiled_outside_traces
    def calc_path_moment_arms(self, state: State) -> jax.Array:
        """Every path's moment arms about every generalized speed (n_paths, nu):
        ``-dL/dq N(q)``, i.e. ``-dL/dq`` for a coordinate with ``qdot = u`` (needs only q)."""
        return pa.calc_path_moment_arms(self, state)

    # ------------------------------------------------------------------ tendons
    def get_num_tendons(self) -> int:
        """Number of tendons (``sj.Tendon``)."""
        return len(self._tendons)

    def get_tendon(self, index: int) -> Any:
        """A tendon by its index (order of creation)."""
        return self._tendons[index]

    @compiled_outside_traces
    def calc_tendon_lengths(self, state: State) -> jax.Array:
        """Every tendon's length (n_tendons,) in order of creation (needs Position;
        MuJoCo's ``ten_length``)."""
        return tn.calc_tendon_lengths(self, state)

    @compiled_outside_traces
    def calc_tendon_lengthening_speeds(self, state: State) -> jax.Array:
        """Every tendon's lengthening speed (n_tendons,) (needs Velocity; MuJoCo's
        ``ten_velocity``)."""
        return tn.calc_tendon_lengthening_speeds(self, state)

    @compiled_outside_traces
    def calc_tendon_jacobians(self, state: State) -> jax.Array:
        """Every tendon's ``dL/du`` (n_tendons, nu): MuJoCo's ``ten_J`` in simjax's speeds
        (needs only q)."""
        return tn.calc_tendon_jacobians(self, state)

    # ------------------------------------------------------------------ structure
    def Ground(self) -> MobilizedBody:  # noqa: N802 (Simbody name)
        """Ground, body 0."""
        return self._mobods[0]

    def get_ground(self) -> MobilizedBody:
        """Ground, body 0."""
        return self._mobods[0]

    def get_num_bodies(self) -> int:
        """Number of mobilized bodies including Ground."""
        return len(self._mobods)

    def get_mobilized_body(self, index: int | str) -> MobilizedBody:
        """A mobilized body by index or name."""
        if isinstance(index, str):
            for m in self._mobods:
                if m.name == index:
                    return m
            raise KeyError(f"no mobilized body named {index!r}")
        return self._mobods[index]

    def _model(self, state: State) -> Model:
        return self._system.model_for(state)

    def _topo(self, state: State) -> Topology:
        return self._model(state).topology(state.use_euler_angles)

    def get_nq(self, state: State) -> int:
        """Number of generalized coordinates in this State."""
        return state.nq

    def get_nu(self, state: State) -> int:
        """Number of generalized speeds."""
        return state.nu

    # ------------------------------------------------------------------ constraints
    def get_num_constraints(self) -> int:
        """Number of constraints (enabled or not)."""
        return len(self._constraints)

    def get_constraint(self, index: int) -> Any:
        """A constraint by index."""
        return self._constraints[index]

    def get_num_constraint_equations(self, state: State) -> tuple[int, int, int]:
        """``(mp, mv, ma)`` rows of ``G`` (disabled constraints keep zero rows)."""
        return self._model(state).constraint_counts(state.use_euler_angles)

    @compiled_outside_traces
    def calc_g_and_b(self, state: State) -> tuple[Float[Array, "m nu"], Float[Array, " m"]]:
        """``G = [P; V; A]`` (m, nu) and ``b`` (m,) with ``G udot = b`` (needs Velocity)."""
        state.require(Stage.VELOCITY, "calc_g_and_b")
        model = self._model(state)
        pc, vc = state.position_cache, state.velocity_cache
        A0 = classical_acceleration(self._velocity_bias(state), vc.V_O, pc.p_GB)
        return cn.g_and_b(model, state, A0)

    @compiled_outside_traces
    def calc_g(self, state: State) -> Float[Array, "m nu"]:
        """The constraint matrix ``G = [P; V; A]`` (m, nu) (needs Velocity)."""
        return self.calc_g_and_b(state)[0]

    @compiled_outside_traces
    def calc_bias_for_acceleration_constraints(self, state: State) -> Float[Array, " m"]:
        """``b`` of ``G udot = b``: minus the acceleration errors at ``udot = 0``."""
        return self.calc_g_and_b(state)[1]

    @compiled_outside_traces
    def multiply_by_g(self, state: State, ulike: Any) -> Float[Array, " m"]:
        """``G v`` (needs Velocity)."""
        return self.calc_g(state) @ jnp.asarray(ulike)

    @compiled_outside_traces
    def multiply_by_g_transpose(self, state: State, lam: Any) -> Float[Array, " nu"]:
        """``G^T lambda`` (needs Velocity)."""
        return self.calc_g(state).T @ jnp.asarray(lam)

    @compiled_outside_traces
    def calc_constraint_forces_from_multipliers(
        self, state: State, multipliers: Any
    ) -> tuple[Float[Array, "nb 6"], Float[Array, " nu"]]:
        """Body forces (nb, 6) and mobility forces (nu,) equivalent to ``G^T lambda`` for the
        complete multiplier vector (the constraints apply their negatives)."""
        state.require(Stage.POSITION, "calc_constraint_forces_from_multipliers")
        return cn.constraint_forces(self._model(state), state, jnp.asarray(multipliers, state.q.dtype))

    # ------------------------------------------------------------------ model options
    def set_use_euler_angles(self, state: State, use: bool) -> State:
        """Model-stage option: Euler angles (True) or quaternions for Ball-like joints.

        Returns a State of the other structure (nq changes, so jitted code recompiles) at
        Stage.TOPOLOGY, with the same configuration and speeds; time, Instance and
        discrete variables are kept.
        """
        use = bool(use)
        if use == state.use_euler_angles:
            return state
        model = self._model(state)
        old, new = model.topology(state.use_euler_angles), model.topology(use)
        parts = []
        for b in range(1, old.nb):
            mo, mn = old.mobilizers[b], new.mobilizers[b]
            qb = state.q[int(old.q_start[b]) : int(old.q_start[b]) + int(old.nq_body[b])]
            if mo is mn or type(mo) is not type(mn) or mo.nq == mn.nq:  # type: ignore[union-attr]
                parts.append(qb)
            else:
                par = state.instance["matter"]["mobilizer_params"][b][: mo.n_params]  # type: ignore[union-attr]
                R, p = mo.X_FM(qb, par)  # type: ignore[union-attr]
                parts.append(jnp.asarray(mn.q_to_fit_transform(R, p, par), state.q.dtype))  # type: ignore[union-attr]
        q = jnp.concatenate([jnp.zeros(0, state.q.dtype)] + parts)
        return state.replace(q=q, use_euler_angles=use, stage=Stage.TOPOLOGY, cache=Cache())

    def get_use_euler_angles(self, state: State) -> bool:
        """Whether the State uses Euler angles."""
        return state.use_euler_angles

    # ------------------------------------------------------------------ mass matrix
    @compiled_outside_traces
    def calc_mass_matrix(self, state: State) -> Float[Array, "nu nu"]:
        """Mass matrix ``M(q)`` (nu, nu) (needs Position). Simbody ``calcM``."""
        state.require(Stage.POSITION, "calc_mass_matrix")
        return rz.mass_matrix(self._model(state), state, state.position_cache)

    calc_m = calc_mass_matrix

    def _solve_m(self, state: State, rhs: jax.Array, caller: str) -> jax.Array:
        """``M^-1 rhs`` (a vector or a matrix) by forward dynamics' solve (``rz.forward_solve``:
        the articulated-body recursion for a batch, a dense Cholesky for one state)."""
        state.require(Stage.POSITION, caller)
        return rz.forward_solve(self._model(state), state, state.position_cache, rhs)

    def get_armature(self, state: State) -> Float[Array, " nu"]:
        """The armature (reflected rotor inertia) of every speed, added to M's diagonal."""
        return state.instance["matter"]["armature"]

    def set_armature(self, state: State, armature: Any) -> State:
        """New State with the armature of every speed replaced (nu,) (Instance stage)."""
        return state.with_instance("matter", "armature", armature)

    @compiled_outside_traces
    def calc_m_inverse(self, state: State) -> Float[Array, "nu nu"]:
        """``M(q)^-1`` (needs Position). Simbody ``calcMInv``."""
        nu = self._topo(state).nu
        return self._solve_m(state, jnp.eye(nu, dtype=state.q.dtype), "calc_m_inverse")

    @compiled_outside_traces
    def multiply_by_m(self, state: State, a: Any) -> Float[Array, " nu"]:
        """``M a`` (needs Position)."""
        return self.calc_mass_matrix(state) @ jnp.asarray(a)

    @compiled_outside_traces
    def multiply_by_m_inv(self, state: State, v: Any) -> Float[Array, " nu *k"]:
        """``M^-1 v`` (needs Position): v a vector (nu,) or a matrix (nu, k), solved as forward
        dynamics solves (the articulated-body recursion over the tree for a batch).
        Simbody ``multiplyByMInv``."""
        return self._solve_m(state, jnp.asarray(v, state.q.dtype), "multiply_by_m_inv")

    # ------------------------------------------------------------------ dynamics operators
    def _applied_bias(self, state: State, mobility_forces: Any, body_forces: Any, a_extra=None):
        model = self._model(state)
        topo = model.topology(state.use_euler_angles)
        dt = state.q.dtype
        tau = jnp.zeros(topo.nu, dt) if mobility_forces is None else jnp.asarray(mobility_forces, dt)
        pc = state.position_cache
        F_O = jnp.zeros((topo.moving_tree.nb, 6), dt)
        if body_forces is not None:
            F_B = jnp.asarray(body_forces, dt).reshape(topo.nb, 6)
            F_O = fold_body_forces(topo, F_B, pc.p_GB)
        return rz.generalized_bias(
            model, state, pc, state.velocity_cache, self._velocity_bias(state), F_O, tau, a_extra
        )

    def _velocity_bias(self, state: State) -> jax.Array:
        """Velocity-product body accelerations: from the Dynamics cache when realized, else
        computed now (a lazy cache entry, as Simbody computes it at Velocity on demand)."""
        state.require(Stage.VELOCITY, "velocity-dependent bias terms")
        if state.stage >= Stage.DYNAMICS:
            return state.dynamics_cache.a_bias
        return rz.velocity_bias(self._model(state), state, state.position_cache, state.velocity_cache)

    @compiled_outside_traces
    def calc_residual_force(
        self,
        state: State,
        applied_mobility_forces: Any = None,
        applied_body_forces: Any = None,
        known_udot: Any = None,
    ) -> Float[Array, " nu"]:
        """Inverse dynamics ignoring constraints: ``M udot + C(q,u) - applied`` (needs
        Velocity). Simbody ``calcResidualForceIgnoringConstraints``; the applied forces are
        only those passed in."""
        state.require(Stage.VELOCITY, "calc_residual_force")
        topo = self._topo(state)
        udot = jnp.zeros(topo.nu, state.u.dtype) if known_udot is None else jnp.asarray(known_udot)
        pos = state.position_cache
        a = _tree.outward_from_moving(topo, _tree.sum_moving_dofs(topo, pos.cdof * udot[:, None]))
        armature = state.instance["matter"]["armature"]
        return self._applied_bias(state, applied_mobility_forces, applied_body_forces, a) + armature * udot

    calc_residual_force_ignoring_constraints = calc_residual_force

    @compiled_outside_traces
    def calc_acceleration(
        self, state: State, applied_mobility_forces: Any = None, applied_body_forces: Any = None
    ) -> Float[Array, " nu"]:
        """Forward dynamics with only the given applied forces (needs Velocity)."""
        state.require(Stage.VELOCITY, "calc_acceleration")
        bias = self._applied_bias(state, applied_mobility_forces, applied_body_forces)
        return self._solve_m(state, -bias, "calc_acceleration")

    @compiled_outside_traces
    def calc_bias_forces(self, state: State) -> Float[Array, " nu"]:
        """Coriolis, centrifugal and gyroscopic generalized forces ``C(q, u)`` (Velocity)."""
        state.require(Stage.VELOCITY, "calc_bias_forces")
        return self._applied_bias(state, None, None)

    @compiled_outside_traces
    def calc_gravity_and_applied_generalized_forces(self, state: State) -> Float[Array, " nu"]:
        """Applied forces of every force element mapped to u: ``J^T F + tau`` (Dynamics)."""
        dc = state.dynamics_cache
        return self.multiply_by_system_jacobian_transpose(state, dc.body_forces) + dc.mobility_forces

    # ------------------------------------------------------------------ jacobians
    @compiled_outside_traces
    def calc_system_jacobian(self, state: State) -> Float[Array, "nb*6 nu"]:
        """``J`` (nb*6, nu): body spatial velocities ``V_GB = J u`` stacked by body, each
        ``[w; v of body origin]`` in Ground (needs Position)."""
        state.require(Stage.POSITION, "calc_system_jacobian")
        topo = self._topo(state)
        J = rz.frame_jacobians(self._model(state), state, np.arange(topo.nb))
        return J.reshape(topo.nb * 6, topo.nu)

    @compiled_outside_traces
    def multiply_by_system_jacobian_transpose(self, state: State, body_forces: Any) -> Float[Array, " nu"]:
        """``J^T F`` for body forces ``[torque about origin; force]`` (nb, 6) (Position)."""
        state.require(Stage.POSITION, "multiply_by_system_jacobian_transpose")
        pc = state.position_cache
        topo = self._topo(state)
        F_O = fold_body_forces(topo, jnp.asarray(body_forces, pc.p_GB.dtype), pc.p_GB)
        return jnp.einsum("di,di->d", pc.cdof, _tree.inward_to_dofs(topo, F_O))

    calc_tree_equivalent_mobility_forces = multiply_by_system_jacobian_transpose

    @compiled_outside_traces(static=("body",))
    def calc_frame_jacobian(
        self, state: State, body: MobilizedBody | int, frame_origin: Any = None
    ) -> Float[Array, "6 nu"]:
        """``J_F`` (6, nu): ``[w_B; v of the frame origin]`` in Ground = ``J_F u``.

        ``frame_origin`` is given in the body frame (default: the body origin)."""
        state.require(Stage.POSITION, "calc_frame_jacobian")
        pc = state.position_cache
        b = _idx(body)
        st = jnp.zeros(3, pc.p_GB.dtype) if frame_origin is None else jnp.asarray(frame_origin, pc.p_GB.dtype)
        r = pc.p_GB[b] + pc.R_GB[b] @ st
        return rz.frame_jacobians(self._model(state), state, np.array([b]), r[None])[0]

    @compiled_outside_traces(static=("body",))
    def calc_station_jacobian(
        self, state: State, body: MobilizedBody | int, station: Any
    ) -> Float[Array, "3 nu"]:
        """``J_S`` (3, nu): Ground velocity of a body station = ``J_S u`` (Position)."""
        return self.calc_frame_jacobian(state, body, station)[3:]

    @compiled_outside_traces(static=("body",))
    def calc_bias_for_frame_jacobian(
        self, state: State, body: MobilizedBody | int, frame_origin: Any = None
    ) -> Float[Array, " 6"]:
        """``Jdot u`` (6,) for the frame Jacobian: the frame's acceleration at ``udot = 0``."""
        state.require(Stage.VELOCITY, "calc_bias_for_frame_jacobian")
        b = _idx(body)
        pc, vc = state.position_cache, state.velocity_cache
        st = jnp.zeros(3, pc.p_GB.dtype) if frame_origin is None else jnp.asarray(frame_origin, pc.p_GB.dtype)
        r = pc.p_GB[b] + pc.R_GB[b] @ st
        A = classical_acceleration(self._velocity_bias(state)[b][None], vc.V_O[b][None], r[None])[0]
        return A

    @compiled_outside_traces(static=("body",))
    def calc_bias_for_station_jacobian(
        self, state: State, body: MobilizedBody | int, station: Any
    ) -> Float[Array, " 3"]:
        """``Jdot_S u`` (3,): the station's acceleration at ``udot = 0``."""
        return self.calc_bias_for_frame_jacobian(state, body, station)[3:]

    @compiled_outside_traces
    def calc_bias_for_system_jacobian(self, state: State) -> Float[Array, " nb*6"]:
        """``Jdot u`` (nb*6,): body accelerations at ``udot = 0``, stacked (Velocity)."""
        state.require(Stage.VELOCITY, "calc_bias_for_system_jacobian")
        pc, vc = state.position_cache, state.velocity_cache
        return classical_acceleration(self._velocity_bias(state), vc.V_O, pc.p_GB).reshape(-1)

    # ------------------------------------------------------------------ kinematic maps
    @compiled_outside_traces
    def calc_qdot(self, state: State, u: Any = None) -> Float[Array, " nq"]:
        """``qdot = N(q) u`` (needs Position); default ``u`` is the State's."""
        state.require(Stage.POSITION, "calc_qdot")
        s = state if u is None else state.with_u(u)
        return rz.calc_qdot(self._model(s), s)

    multiply_by_n = calc_qdot

    @compiled_outside_traces
    def calc_qdotdot(self, state: State, udot: Any) -> Float[Array, " nq"]:
        """``qdotdot = Ndot u + N udot`` (needs Velocity)."""
        state.require(Stage.VELOCITY, "calc_qdotdot")
        return rz.qdotdot(self._model(state), state, jnp.asarray(udot))

    # ------------------------------------------------------------------ mass, momentum, energy
    def calc_system_mass(self, state: State) -> Float[Array, ""]:
        """Total mass of the mobilized bodies."""
        return jnp.sum(state.instance["matter"]["mass"][1:])

    @compiled_outside_traces
    def calc_system_mass_center_location_in_ground(self, state: State) -> Float[Array, " 3"]:
        """System center of mass in Ground (needs Position)."""
        pc = state.position_cache
        m = state.instance["matter"]["mass"]
        return jnp.sum(m[1:, None] * pc.com_G[1:], axis=0) / jnp.sum(m[1:])

    @compiled_outside_traces
    def calc_system_mass_center_velocity_in_ground(self, state: State) -> Float[Array, " 3"]:
        """Velocity of the system center of mass (needs Velocity)."""
        return self.calc_system_momentum_about_ground_origin(state)[3:] / self.calc_system_mass(state)

    @compiled_outside_traces
    def calc_system_momentum_about_ground_origin(self, state: State) -> Float[Array, " 6"]:
        """``[angular momentum about Ground's origin; linear momentum]`` (Velocity)."""
        pc, vc = state.position_cache, state.velocity_cache
        return jnp.sum(sp.inertia_times(pc.inertia_O[1:], vc.V_O[1:]), axis=0)

    @compiled_outside_traces
    def calc_system_central_momentum(self, state: State) -> Float[Array, " 6"]:
        """Momentum with the angular part about the system center of mass (Velocity)."""
        h = self.calc_system_momentum_about_ground_origin(state)
        c = self.calc_system_mass_center_location_in_ground(state)
        return jnp.concatenate([h[:3] - sp.cross(c, h[3:]), h[3:]])

    @compiled_outside_traces
    def calc_kinetic_energy(self, state: State) -> Float[Array, ""]:
        """Kinetic energy ``1/2 sum V^T I V`` plus the armature's ``1/2 sum a u^2``, which is
        ``1/2 u^T M u`` (needs Velocity)."""
        state.require(Stage.VELOCITY, "calc_kinetic_energy")
        pc, vc = state.position_cache, state.velocity_cache
        rotors = 0.5 * jnp.sum(state.instance["matter"]["armature"] * state.u**2)
        return 0.5 * jnp.sum(vc.V_O * sp.inertia_times(pc.inertia_O, vc.V_O)) + rotors

    # ------------------------------------------------------------------ contact geometry
    def get_num_contact_surfaces(self) -> int:
        """Number of contact surfaces on this subsystem's bodies."""
        return len(ct.registry(self).surfaces)

    def exclude_contact(self, body1: MobilizedBody | int, body2: MobilizedBody | int) -> None:
        """No dynamic contact between the surfaces of these two bodies (MuJoCo's
        ``<contact><exclude>``); explicit pairs still count. A topology change."""
        a, b = _idx(body1), _idx(body2)
        ct.registry(self).excluded.add((min(a, b), max(a, b)))
        self._system.invalidate_topology()

    def add_contact_pair(self, surface1: int, surface2: int, **properties: Any) -> None:
        """Make two surfaces (indices from ``add_contact_surface``) a candidate pair with
        their own contact properties, whatever the filters say (MuJoCo's
        ``<contact><pair>``). ``properties``: ``condim``, ``friction`` (3 or MuJoCo's 5
        values), ``solref``, ``solimp``, ``margin``, ``gap`` (MuJoCo's pair defaults). A
        topology change."""
        reg = ct.registry(self)
        n = len(reg.surfaces)
        for s in (surface1, surface2):
            if not 0 <= int(s) < n:
                raise ValueError(f"add_contact_pair: no contact surface {s} (this subsystem has {n})")
        if surface1 == surface2:
            raise ValueError("add_contact_pair: a surface cannot pair with itself")
        fr = tuple(float(x) for x in properties.pop("friction", (1.0, 1.0, 0.005, 0.0001, 0.0001)))
        if len(fr) not in (3, 5):
            raise ValueError(f"add_contact_pair: friction takes 3 or 5 values, got {len(fr)}")
        props = ct.ContactProperties(**ct._tupled(properties))
        ct.check_properties(props, f"add_contact_pair({surface1}, {surface2})")
        if any(not np.isfinite(f) or f < 0 for f in fr):
            raise ValueError(
                f"add_contact_pair({surface1}, {surface2}): friction must be finite and >= 0, got {fr}"
            )
        object.__setattr__(props, "friction", fr)
        reg.pairs.append((int(surface1), int(surface2), props))
        self._system.invalidate_topology()

    def set_contact_filter_parent(self, on: bool) -> None:
        """MuJoCo's ``filterparent`` flag (on by default): no dynamic contact between a
        body's surfaces and its parent's, unless the parent is Ground. A topology change."""
        ct.registry(self).filter_parent = bool(on)
        self._system.invalidate_topology()

    def set_mujoco_constraints(self, options: Any) -> None:
        """Solve this System's accelerations MuJoCo's way (``sj.MujocoConstraintOptions``, or
        None to stop): soft contact rows for the contact candidates and soft limit rows,
        MuJoCo's primal problem by Newton's method at the Acceleration stage
        (``simjax.constraints.soft``). ``load_mjcf(..., contact=True)`` sets it. A
        topology change."""
        if options is not None and not isinstance(options, MujocoConstraintOptions):
            raise TypeError("set_mujoco_constraints takes a MujocoConstraintOptions or None")
        ct.registry(self).mujoco = options
        self._system.invalidate_topology()

    def get_contact_candidates(self, state: State) -> ct.ContactCandidates | None:
        """The static candidate list the State's topology was built with (None without
        surfaces)."""
        return self._model(state).contact

    @reads_cache
    def find_contacts(self, state: State) -> Contacts:
        """Every candidate pair's contacts at the State's body poses (needs Position).

        Returns a :class:`simjax.dynamics.detection.Contacts`: fixed-size slots in the
        candidate list's order, ``active`` marking those MuJoCo reports in ``data.contact``
        (``dist <= margin + gap``), with their surfaces, distance, point and frame, and the
        pair's contact parameters. Pure and static in shape (``jit``, ``vmap``, ``grad``).
        Pair kinds without a kernel (listed in the candidates' ``unsupported``) are left out.
        Detection only: it applies no force (``sj.HuntCrossleyForce`` and
        ``sj.SmoothSphereHalfSpaceForce`` do, on sphere and half-space pairs).
        """
        state.require(Stage.POSITION, "find_contacts")
        pc = state.position_cache
        return find_contacts(self._model(state).contact, pc.R_GB, pc.p_GB)

    # ------------------------------------------------------------------ batched conveniences
    @reads_cache
    def get_body_transforms(self, state: State) -> tuple[Float[Array, "nb 3 3"], Float[Array, "nb 3"]]:
        """``(R_GB (nb,3,3), p_GB (nb,3))`` for every body (needs Position)."""
        pc = state.position_cache
        return pc.R_GB, pc.p_GB

    @reads_cache
    def get_body_velocities(self, state: State) -> Float[Array, "nb 6"]:
        """``V_GB`` of every body (nb, 6) (needs Velocity)."""
        state.require(Stage.VELOCITY, "get_body_velocities")
        return self._model(state).body_velocities(state)

    @reads_cache
    def get_body_accelerations(self, state: State) -> Float[Array, "nb 6"]:
        """``A_GB`` of every body (nb, 6) (needs Acceleration)."""
        state.require(Stage.ACCELERATION, "get_body_accelerations")
        return self._model(state).body_accelerations(state)

    def normalize_quaternions(self, state: State) -> State:
        """New State with every quaternion normalised (a Position-level projection)."""
        return state.with_q(rz.normalize_quaternions(self._model(state), state, state.q))


def _idx(body: MobilizedBody | int) -> int:
    return body if isinstance(body, int) else body.index
