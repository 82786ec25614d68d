"""Bodies and MobilizedBody handles (Simbody's ``Body`` and ``MobilizedBody::*``).

A ``MobilizedBody`` is a body plus the mobilizer joining it to its parent. Constructing
one adds it to the parent's matter subsystem. Handles are light: every state-dependent
query takes the State and reads its cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _spatial as sp
from .._stage import Stage
from ..model import mobilizers as mz
from ..model.model import Model
from ..model.state import State
from ..model.topology import Topology
from ._compiled import compiled_outside_traces
from .contact import add_surface


class Body:
    """A body's mass properties (Simbody ``Body``); reusable for many mobilized bodies."""

    def __init__(self, mass_properties: sp.MassProperties):
        if not isinstance(mass_properties, sp.MassProperties):
            raise TypeError(
                f"Body needs a MassProperties, got {type(mass_properties).__name__}; "
                "e.g. sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1)))"
            )
        self.mass_properties = mass_properties

    @staticmethod
    def Rigid(mass_properties: sp.MassProperties) -> Body:  # noqa: N802 (Simbody name)
        """A rigid body with the given mass properties."""
        return Body(mass_properties)

    @staticmethod
    def Massless() -> Body:  # noqa: N802
        """A massless body (only valid where it is not a terminal body)."""
        return Body(sp.MassProperties(0.0))


def _as_transform(X: Any, what: str) -> sp.Transform:
    if X is None:
        return sp.Transform()
    if isinstance(X, sp.Transform):
        if not isinstance(X.R, jax.core.Tracer):  # a frame built inside jit cannot be checked
            sp.check_rotation(X.R, what)
        return X
    raise TypeError(f"{what} must be a sj.Transform, got {type(X).__name__}")


class MobilizedBody:
    """Base handle of every mobilized body. Use a kind: ``MobilizedBody.Pin(parent,
    X_PF, body, X_BM)`` or ``MobilizedBody.Pin(parent, body)``."""

    # the kinds (assigned at the end of this module); Cartesian first, so that its annotation
    # names the module's Translation class, not the class attribute declared below
    Cartesian: ClassVar[type[Translation]]
    Pin: ClassVar[type[Pin]]
    Slider: ClassVar[type[Slider]]
    Screw: ClassVar[type[Screw]]
    Universal: ClassVar[type[Universal]]
    Cylinder: ClassVar[type[Cylinder]]
    BendStretch: ClassVar[type[BendStretch]]
    Planar: ClassVar[type[Planar]]
    Gimbal: ClassVar[type[Gimbal]]
    Ball: ClassVar[type[Ball]]
    Ellipsoid: ClassVar[type[Ellipsoid]]
    Translation: ClassVar[type[Translation]]
    SphericalCoords: ClassVar[type[SphericalCoords]]
    Bushing: ClassVar[type[Bushing]]
    Free: ClassVar[type[Free]]
    LineOrientation: ClassVar[type[LineOrientation]]
    FreeLine: ClassVar[type[FreeLine]]
    Weld: ClassVar[type[Weld]]
    FunctionBased: ClassVar[type[FunctionBased]]
    Custom: ClassVar[type[Custom]]
    Ground: ClassVar[type[Ground]]

    # the mobilizer a simple kind (Pin, Ball, ...) builds; None for the base and kinds with arguments
    _mobilizer_kind: ClassVar[type[mz.AbstractMobilizer] | None] = None
    _mobilizer: mz.AbstractMobilizer
    _matter: Any  # the SimbodyMatterSubsystem (system.matter imports this module)
    index: int
    name: str

    def __init__(
        self,
        parent: MobilizedBody,
        *args: Any,
        name: str | None = None,
        mobilizer: mz.AbstractMobilizer | None = None,
        params: Any = None,
    ):
        kind = type(self).__name__
        if len(args) == 1:
            X_PF, body, X_BM = None, args[0], None
        elif len(args) == 3:
            X_PF, body, X_BM = args
        else:
            raise TypeError(
                f"MobilizedBody.{kind}(parent, X_PF, body, X_BM) or "
                f"MobilizedBody.{kind}(parent, body); got {1 + len(args)} positional arguments"
            )
        if not isinstance(parent, MobilizedBody):
            raise TypeError(
                f"MobilizedBody.{kind}: unknown parent {parent!r}; pass matter.Ground() or a "
                "MobilizedBody already added to the same matter subsystem"
            )
        matter = parent._matter
        if parent.index >= len(matter._mobods) or matter._mobods[parent.index] is not parent:
            raise ValueError(f"MobilizedBody.{kind}: unknown parent (not in its matter subsystem)")
        if isinstance(body, sp.MassProperties):
            body = Body(body)
        if not isinstance(body, Body):
            raise TypeError(
                f"MobilizedBody.{kind}: body must be a sj.Body (e.g. sj.Body.Rigid(...)), "
                f"got {type(body).__name__}"
            )
        self._matter = matter
        self._parent: MobilizedBody | None = parent
        self._X_PF = _as_transform(X_PF, f"MobilizedBody.{kind} X_PF")
        self._X_BM = _as_transform(X_BM, f"MobilizedBody.{kind} X_BM")
        self._mass_props = body.mass_properties
        self._mobilizer = mobilizer if mobilizer is not None else self._make_mobilizer()
        self._params = (
            np.asarray(params, dtype=float) if params is not None else self._mobilizer.default_params()
        )
        self._default_q: np.ndarray | None = None
        self._default_u: np.ndarray | None = None
        self._armature: np.ndarray | None = None
        self.index = len(matter._mobods)
        self.name = name or f"body{self.index}"
        if any(m.name == self.name for m in matter._mobods):
            raise ValueError(
                f"a body named {self.name!r} was already added to this matter subsystem; "
                "each mobilized body needs its own name"
            )
        matter._mobods.append(self)
        matter._system.invalidate_topology()

    def _make_mobilizer(self) -> mz.AbstractMobilizer:
        if self._mobilizer_kind is None:
            raise TypeError(f"{type(self).__name__} is not a mobilizer kind")
        return self._mobilizer_kind()

    # ------------------------------------------------------------------ topology info
    def get_mobilized_body_index(self) -> int:
        """Index of this body (Ground is 0)."""
        return self.index

    def get_parent_mobilized_body(self) -> MobilizedBody:
        """The parent (inboard) mobilized body."""
        if self._parent is None:
            raise ValueError("Ground has no parent")
        return self._parent

    @property
    def mobilizer(self) -> mz.AbstractMobilizer:
        """This body's mobilizer kind (static configuration)."""
        return self._mobilizer

    def is_ground(self) -> bool:
        """Whether this is Ground."""
        return self.index == 0

    def get_num_q(self, state: State) -> int:
        """Number of q of this mobilizer in this State (depends on the Euler option)."""
        return len(self.get_q(state))

    def get_num_u(self, state: State) -> int:
        """Number of u of this mobilizer."""
        return len(self.get_u(state))

    def _model(self, state: State) -> Model:
        return self._matter._system.model_for(state)

    def _topo(self, state: State) -> Topology:
        return self._model(state).topology(state.use_euler_angles)

    # ------------------------------------------------------------------ defaults (topology)
    def set_default_q(self, q: Any) -> MobilizedBody:
        """Default coordinates (Topology stage: existing States become invalid)."""
        q = np.atleast_1d(np.asarray(q, dtype=float))
        if q.shape != (self._mobilizer.nq,):
            raise ValueError(
                f"{self.name}: default q must have length {self._mobilizer.nq} for a "
                f"{self._mobilizer.kind} mobilizer, got {q.shape}"
            )
        self._default_q = q
        self._matter._system.invalidate_topology()
        return self

    def set_default_u(self, u: Any) -> MobilizedBody:
        """Default speeds (Topology stage)."""
        u = np.atleast_1d(np.asarray(u, dtype=float))
        if u.shape != (self._mobilizer.nu,):
            raise ValueError(f"{self.name}: default u must have length {self._mobilizer.nu}, got {u.shape}")
        self._default_u = u
        self._matter._system.invalidate_topology()
        return self

    def set_default_armature(self, armature: Any) -> MobilizedBody:
        """Reflected rotor inertia added to the mass matrix's diagonal at each of this body's
        speeds (MuJoCo's and Pinocchio's joint ``armature``): a scalar for every speed, or one
        per speed. Topology stage; per State: ``matter.set_armature``."""
        nu = self._mobilizer.nu
        a = (
            np.broadcast_to(np.asarray(armature, dtype=float), (nu,)).copy()
            if np.ndim(armature) == 0
            else (np.asarray(armature, dtype=float))
        )
        if a.shape != (nu,):
            raise ValueError(
                f"{self.name}: armature must be a scalar or have length {nu}, got shape {a.shape}"
            )
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"{self.name}: armature must be finite and >= 0, got {a}")
        self._armature = a
        self._matter._system.invalidate_topology()
        return self

    def get_default_armature(self) -> np.ndarray:
        """Default armature of each of this body's speeds (zeros unless set)."""
        return np.zeros(self._mobilizer.nu) if self._armature is None else self._armature

    def get_default_q(self) -> np.ndarray:
        """Default coordinates."""
        return self._mobilizer.default_q() if self._default_q is None else self._default_q

    def get_default_mass_properties(self) -> sp.MassProperties:
        """Mass properties given at construction."""
        return self._mass_props

    def set_default_mass_properties(self, mp: sp.MassProperties) -> MobilizedBody:
        """Change the default mass properties (Topology stage)."""
        self._mass_props = mp
        self._matter._system.invalidate_topology()
        return self

    # ------------------------------------------------------------------ instance variables
    def _inst(self, state: State, name: str) -> jax.Array:
        return state.instance["matter"][name][self.index]

    def _set_inst(self, state: State, name: str, value: Any) -> State:
        arr = state.instance["matter"][name]
        return state.with_instance("matter", name, arr.at[self.index].set(jnp.asarray(value, arr.dtype)))

    def get_mass(self, state: State) -> Float[Array, ""]:
        """Mass (Instance variable)."""
        return self._inst(state, "mass")

    def set_mass(self, state: State, mass: Any) -> State:
        """New State with this body's mass changed (falls back to Model); the unit inertia
        is kept, so the inertia scales with the mass (Simbody's semantics)."""
        _check_concrete_positive(mass, f"{self.name}: mass")
        return self._set_inst(state, "mass", mass)

    def get_mass_center(self, state: State) -> Float[Array, " 3"]:
        """Mass center in the body frame."""
        return self._inst(state, "com")

    def get_inertia_about_body_origin(self, state: State) -> Float[Array, "3 3"]:
        """Inertia about the body origin, in the body frame (3, 3): mass x unit inertia."""
        return self._inst(state, "mass") * self._inst(state, "unit_inertia")

    def get_unit_inertia_about_body_origin(self, state: State) -> Float[Array, "3 3"]:
        """Gyration matrix about the body origin (Instance variable ``unit_inertia``)."""
        return self._inst(state, "unit_inertia")

    def set_mass_properties(self, state: State, mp: sp.MassProperties) -> State:
        """New State with this body's mass properties (checked) changed."""
        if not isinstance(mp, sp.MassProperties):
            raise TypeError("set_mass_properties needs a sj.MassProperties")
        s = self._set_inst(state, "mass", mp.mass)
        s = self._set_inst(s, "com", mp.com)
        return self._set_inst(s, "unit_inertia", mp.unit_inertia())

    def get_inboard_frame(self, state: State) -> sp.Transform:
        """``X_PF`` (Instance variable)."""
        return sp.Transform(self._inst(state, "X_PF_R"), self._inst(state, "X_PF_p"))

    def get_outboard_frame(self, state: State) -> sp.Transform:
        """``X_BM`` (Instance variable)."""
        return sp.Transform(self._inst(state, "X_BM_R"), self._inst(state, "X_BM_p"))

    def set_inboard_frame(self, state: State, X_PF: sp.Transform) -> State:
        """New State with ``X_PF`` changed."""
        return self._set_inst(self._set_inst(state, "X_PF_R", X_PF.R), "X_PF_p", X_PF.p)

    def set_outboard_frame(self, state: State, X_BM: sp.Transform) -> State:
        """New State with ``X_BM`` changed."""
        return self._set_inst(self._set_inst(state, "X_BM_R", X_BM.R), "X_BM_p", X_BM.p)

    def get_mobilizer_params(self, state: State) -> jax.Array:
        """Kind-specific parameters (Screw pitch, Ellipsoid radii)."""
        return self._inst(state, "mobilizer_params")[: self._mobilizer.n_params]

    # ------------------------------------------------------------------ q and u
    @compiled_outside_traces
    def get_q(self, state: State) -> Float[Array, " nq_body"]:
        """This mobilizer's q block."""
        return self._model(state).body_q(state, self.index)

    @compiled_outside_traces
    def get_u(self, state: State) -> Float[Array, " nu_body"]:
        """This mobilizer's u block."""
        return self._model(state).body_u(state, self.index)

    def get_one_q(self, state: State, which: int) -> Float[Array, ""]:
        """One coordinate of this mobilizer."""
        return self.get_q(state)[which]

    def get_one_u(self, state: State, which: int) -> Float[Array, ""]:
        """One speed of this mobilizer."""
        return self.get_u(state)[which]

    def set_q(self, state: State, q: Any) -> State:
        """New State with this mobilizer's q block replaced."""
        topo = self._topo(state)
        s, n = int(topo.q_start[self.index]), int(topo.nq_body[self.index])
        q = jnp.atleast_1d(jnp.asarray(q, state.q.dtype))
        if q.shape != (n,):
            raise ValueError(f"{self.name}: q must have length {n} in this State, got {q.shape}")
        return state.with_q(state.q.at[s : s + n].set(q))

    def set_u(self, state: State, u: Any) -> State:
        """New State with this mobilizer's u block replaced."""
        topo = self._topo(state)
        s, n = int(topo.u_start[self.index]), int(topo.nu_body[self.index])
        u = jnp.atleast_1d(jnp.asarray(u, state.u.dtype))
        if u.shape != (n,):
            raise ValueError(f"{self.name}: u must have length {n}, got {u.shape}")
        return state.with_u(state.u.at[s : s + n].set(u))

    def set_one_q(self, state: State, which: int, value: Any) -> State:
        """New State with one coordinate changed."""
        return self.set_q(state, self.get_q(state).at[which].set(value))

    def set_one_u(self, state: State, which: int, value: Any) -> State:
        """New State with one speed changed."""
        return self.set_u(state, self.get_u(state).at[which].set(value))

    def _mob(self, state: State) -> mz.AbstractMobilizer:
        return self._topo(state).mobilizers[self.index]  # type: ignore[return-value]

    def set_q_to_fit_transform(self, state: State, X_FM: sp.Transform) -> State:
        """New State whose q best reproduces the mobilizer transform ``X_FM``."""
        q = self._mob(state).q_to_fit_transform(X_FM.R, X_FM.p, self.get_mobilizer_params(state))
        return self.set_q(state, q)

    def set_u_to_fit_velocity(self, state: State, V_FM: Any) -> State:
        """New State whose u best reproduces the cross-mobilizer velocity ``V_FM``."""
        u = self._mob(state).u_to_fit_velocity(
            self.get_q(state), jnp.asarray(V_FM, state.u.dtype), self.get_mobilizer_params(state)
        )
        return self.set_u(state, u)

    # ------------------------------------------------------------------ contact
    def add_contact_surface(self, X_BS: sp.Transform, surface: Any) -> int:
        """Fix a contact surface (``sj.ContactSurface``, or a bare ``sj.ContactGeometry``
        with MuJoCo's default properties) on this body at the frame ``X_BS`` (Simbody's
        ``Body::addContactSurface``); returns its index among the matter subsystem's
        surfaces. A topology change."""
        return add_surface(self._matter, self.index, X_BS, surface)

    # ------------------------------------------------------------------ kinematics
    @compiled_outside_traces
    def get_body_transform(self, state: State) -> sp.Transform:
        """``X_GB`` (needs Position)."""
        pc = state.position_cache
        return sp.Transform(pc.R_GB[self.index], pc.p_GB[self.index])

    @compiled_outside_traces
    def get_body_rotation(self, state: State) -> Float[Array, "3 3"]:
        """``R_GB`` (needs Position)."""
        return state.position_cache.R_GB[self.index]

    @compiled_outside_traces
    def get_body_origin_location(self, state: State) -> Float[Array, " 3"]:
        """Location of the body origin in Ground (needs Position)."""
        return state.position_cache.p_GB[self.index]

    @compiled_outside_traces
    def get_body_velocity(self, state: State) -> Float[Array, " 6"]:
        """``V_GB = [w; v of origin]`` in Ground (needs Velocity)."""
        state.require(Stage.VELOCITY, f"{self.name}.get_body_velocity")
        return self._model(state).body_velocities(state)[self.index]

    @compiled_outside_traces
    def get_body_angular_velocity(self, state: State) -> Float[Array, " 3"]:
        """Angular velocity in Ground (needs Velocity)."""
        return self.get_body_velocity(state)[:3]

    @compiled_outside_traces
    def get_body_origin_velocity(self, state: State) -> Float[Array, " 3"]:
        """Velocity of the body origin in Ground (needs Velocity)."""
        return self.get_body_velocity(state)[3:]

    @compiled_outside_traces
    def get_body_acceleration(self, state: State) -> Float[Array, " 6"]:
        """``A_GB = [alpha; a of origin]`` in Ground (needs Acceleration)."""
        state.require(Stage.ACCELERATION, f"{self.name}.get_body_acceleration")
        return self._model(state).body_accelerations(state)[self.index]

    @compiled_outside_traces
    def get_mobilizer_transform(self, state: State) -> sp.Transform:
        """``X_FM(q)`` (needs Position)."""
        state.require(Stage.POSITION, f"{self.name}.get_mobilizer_transform")
        R, p = self._mob(state).X_FM(self.get_q(state), self.get_mobilizer_params(state))
        return sp.Transform(R, p)

    @compiled_outside_traces
    def get_mobilizer_velocity(self, state: State) -> Float[Array, " 6"]:
        """``V_FM = H_FM(q) u``, in F at M's origin (needs Velocity)."""
        state.require(Stage.VELOCITY, f"{self.name}.get_mobilizer_velocity")
        H = self._mob(state).H_FM(self.get_q(state), self.get_mobilizer_params(state))
        return H @ self.get_u(state)

    @compiled_outside_traces
    def find_station_location_in_ground(self, state: State, station: Any) -> Float[Array, " 3"]:
        """Ground location of a station given in this body's frame (needs Position)."""
        pc = state.position_cache
        return pc.p_GB[self.index] + pc.R_GB[self.index] @ jnp.asarray(station, pc.p_GB.dtype)

    @compiled_outside_traces
    def find_station_velocity_in_ground(self, state: State, station: Any) -> Float[Array, " 3"]:
        """Ground velocity of a station on this body (needs Velocity)."""
        V = self.get_body_velocity(state)
        r = self.get_body_rotation(state) @ jnp.asarray(station, V.dtype)
        return V[3:] + sp.cross(V[:3], r)

    @compiled_outside_traces
    def find_station_acceleration_in_ground(self, state: State, station: Any) -> Float[Array, " 3"]:
        """Ground acceleration of a station on this body (needs Acceleration)."""
        A = self.get_body_acceleration(state)
        V = self.get_body_velocity(state)
        r = self.get_body_rotation(state) @ jnp.asarray(station, V.dtype)
        return A[3:] + sp.cross(A[:3], r) + sp.cross(V[:3], sp.cross(V[:3], r))

    def find_body_transform_in_another_body(self, state: State, other: MobilizedBody) -> sp.Transform:
        """``X_AB`` with A the other body's frame."""
        return other.get_body_transform(state).invert().compose(self.get_body_transform(state))

    def __repr__(self) -> str:
        return f"MobilizedBody.{type(self).__name__}({self.name!r}, index={self.index})"


def _check_concrete_positive(x: Any, what: str) -> None:
    if isinstance(x, jax.core.Tracer):
        return
    a = np.asarray(x)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{what} must be finite and >= 0, got {a}")


class Ground(MobilizedBody):
    """Ground (body 0): immobile, infinite mass, the root of the tree."""

    def __init__(self, matter: Any):  # noqa: D107
        self._matter = matter
        self._parent = None
        self._X_PF = sp.Transform()
        self._X_BM = sp.Transform()
        self._mass_props = sp.MassProperties(0.0)
        self._mobilizer = mz.Weld()
        self._params = np.zeros(0)
        self._default_q = None
        self._default_u = None
        self._armature = None
        self.index = 0
        self.name = "ground"
        matter._mobods.append(self)


class Pin(MobilizedBody):
    """Rotation about the common z axis of F and M."""

    _mobilizer_kind = mz.Pin


class Slider(MobilizedBody):
    """Translation along the common x axis of F and M."""

    _mobilizer_kind = mz.Slider


class Universal(MobilizedBody):
    """Rotation about x then the new y."""

    _mobilizer_kind = mz.Universal


class Cylinder(MobilizedBody):
    """Rotation about and translation along z."""

    _mobilizer_kind = mz.Cylinder


class BendStretch(MobilizedBody):
    """Rotation about z, then translation along the new x."""

    _mobilizer_kind = mz.BendStretch


class Planar(MobilizedBody):
    """Rotation about z plus translation in the x-y plane."""

    _mobilizer_kind = mz.Planar


class Gimbal(MobilizedBody):
    """Body-fixed X-Y-Z Euler angles, u = qdot."""

    _mobilizer_kind = mz.Gimbal


class Ball(MobilizedBody):
    """Spherical joint; quaternion q, u = angular velocity in F."""

    _mobilizer_kind = mz.Ball


class Translation(MobilizedBody):
    """Cartesian translation p_FM = q."""

    _mobilizer_kind = mz.Translation


class SphericalCoords(MobilizedBody):
    """Azimuth, zenith, radius."""

    _mobilizer_kind = mz.SphericalCoords


class Bushing(MobilizedBody):
    """Six dofs: X-Y-Z angles then translation, u = qdot."""

    _mobilizer_kind = mz.Bushing


class Free(MobilizedBody):
    """Six dofs: quaternion and translation; u = [w, v] in F."""

    _mobilizer_kind = mz.Free


class LineOrientation(MobilizedBody):
    """Orientation of a line (M's z)."""

    _mobilizer_kind = mz.LineOrientation


class FreeLine(MobilizedBody):
    """LineOrientation plus translation."""

    _mobilizer_kind = mz.FreeLine


class Weld(MobilizedBody):
    """No relative motion."""

    _mobilizer_kind = mz.Weld


Cartesian = Translation


class Screw(MobilizedBody):
    """Rotation about z coupled with translation ``pitch * q`` along z."""

    def __init__(
        self, parent: MobilizedBody, *args: Any, pitch: float | None = None, name: str | None = None
    ):
        if pitch is None and len(args) in (2, 4):
            args, pitch = args[:-1], args[-1]
        if pitch is None:
            raise TypeError("MobilizedBody.Screw needs a pitch: Screw(parent, X_PF, body, X_BM, pitch)")
        super().__init__(
            parent, *args, name=name, mobilizer=mz.Screw(pitch=float(pitch)), params=[float(pitch)]
        )


class Ellipsoid(MobilizedBody):
    """Orientation like a Ball while M's origin slides on an ellipsoid fixed in F."""

    def __init__(self, parent: MobilizedBody, *args: Any, radii: Any = None, name: str | None = None):
        if radii is None and len(args) in (2, 4):
            args, radii = args[:-1], args[-1]
        r = tuple(float(x) for x in (radii if radii is not None else (1.0, 1.0, 1.0)))
        if len(r) != 3 or min(r) <= 0:
            raise ValueError(f"MobilizedBody.Ellipsoid: radii must be 3 positive numbers, got {r}")
        super().__init__(parent, *args, name=name, mobilizer=mz.Ellipsoid(radii=r), params=r)


class FunctionBased(MobilizedBody):
    """Mobilizer defined by six functions of q (Simbody ``MobilizedBody::FunctionBased``).

    Args:
        parent: As for every mobilized body.
        *args: ``X_PF, body, X_BM`` as for every mobilized body, then (Simbody's order) the
            keyword arguments below may follow positionally.
        n_mobilities: Number of coordinates (and speeds; ``qdot == u``).
        functions: Six callables of a 1-D array (the listed coordinates): three rotation
            angles about ``axes[0:3]`` (applied in order, body fixed) then three
            translations along ``axes[3:6]`` in F. ``sj.Function`` objects work too.
        coordinate_indices: For each function, the mobilizer coordinates it receives.
        axes: Six axes; default x, y, z, x, y, z.
    """

    def __init__(
        self,
        parent: MobilizedBody,
        *args: Any,
        n_mobilities: int | None = None,
        functions: Sequence[Callable[..., Any]] | None = None,
        coordinate_indices: Sequence[Sequence[int]] | None = None,
        axes: Sequence[Any] | None = None,
        name: str | None = None,
    ):
        if n_mobilities is None and functions is None:
            # Simbody order: (parent, X_PF, body, X_BM, n, functions, coordIndices[, axes])
            args, rest = args[:3] if len(args) >= 6 else args[:1], args[3:] if len(args) >= 6 else args[1:]
            n_mobilities, functions, coordinate_indices, *more = rest
            axes = more[0] if more else None
        if functions is None or len(functions) != 6:
            raise ValueError("MobilizedBody.FunctionBased needs exactly six functions")
        if coordinate_indices is None or len(coordinate_indices) != 6:
            raise ValueError("MobilizedBody.FunctionBased needs six coordinate-index lists")
        n = int(n_mobilities)  # type: ignore[arg-type]
        for k, idx in enumerate(coordinate_indices):
            for i in idx:
                if not 0 <= int(i) < n:
                    raise ValueError(f"FunctionBased: function {k} uses coordinate {i}, outside 0..{n - 1}")
            _check_arity(functions[k], len(idx), k)
        ax = tuple(
            (float(x), float(y), float(z))
            for x, y, z in (
                np.asarray(a, dtype=float)
                for a in (axes if axes is not None else np.vstack([np.eye(3), np.eye(3)]))
            )
        )
        n_ang = len({i for k in range(3) for i in coordinate_indices[k]})
        mob = mz.FunctionBased(
            n=n,
            functions=tuple(functions),
            coordinate_indices=tuple(tuple(int(i) for i in idx) for idx in coordinate_indices),
            axes=ax,
            n_angles_=n_ang,
        )
        super().__init__(parent, *args, name=name, mobilizer=mob)


def _check_arity(fn: Any, n: int, k: int) -> None:
    arg_size = getattr(fn, "get_argument_size", None)
    if arg_size is not None and arg_size() != n:
        raise ValueError(
            f"FunctionBased: function {k} takes {arg_size()} arguments but is given {n} coordinates"
        )


class Custom(MobilizedBody):
    """A user mobilizer (Simbody ``MobilizedBody::Custom``), H and derivatives by autodiff.

    Args:
        parent: As for every mobilized body.
        *args: ``X_PF, body, X_BM`` as for every mobilized body.
        nq: Number of coordinates.
        nu: Number of speeds (default ``nq``).
        n_angles: How many of the q are angles.
        X_FM: ``q -> sj.Transform`` or ``(R_FM, p_FM)``.
        N: ``q -> (nq, nu)`` matrix with ``qdot = N u``; omit when ``qdot == u``.
        default_q: Default coordinates (zeros if omitted).
    """

    def __init__(
        self,
        parent: MobilizedBody,
        *args: Any,
        nq: int,
        nu: int | None = None,
        X_FM: Callable[[jax.Array], Any],
        N: Callable[[jax.Array], Any] | None = None,
        n_angles: int = 0,
        default_q: Any = None,
        q_fit: Callable[..., Any] | None = None,
        name: str | None = None,
    ):
        nu = nq if nu is None else nu
        if N is None and nq != nu:
            raise ValueError(f"MobilizedBody.Custom: nq={nq} != nu={nu}, so give N(q) with qdot = N u")
        mob = mz.Custom(
            nq_=int(nq),
            nu_=int(nu),
            n_angles_=int(n_angles),
            x_fm=X_FM,
            n_matrix=N,
            default_q_=None if default_q is None else tuple(np.asarray(default_q, float)),
            q_fit=q_fit,
        )
        super().__init__(parent, *args, name=name, mobilizer=mob)


# The kinds as attributes of the base (Simbody's MobilizedBody::Pin style); declared above.
MobilizedBody.Pin = Pin
MobilizedBody.Slider = Slider
MobilizedBody.Screw = Screw
MobilizedBody.Universal = Universal
MobilizedBody.Cylinder = Cylinder
MobilizedBody.BendStretch = BendStretch
MobilizedBody.Planar = Planar
MobilizedBody.Gimbal = Gimbal
MobilizedBody.Ball = Ball
MobilizedBody.Ellipsoid = Ellipsoid
MobilizedBody.Translation = Translation
MobilizedBody.SphericalCoords = SphericalCoords
MobilizedBody.Bushing = Bushing
MobilizedBody.Free = Free
MobilizedBody.LineOrientation = LineOrientation
MobilizedBody.FreeLine = FreeLine
MobilizedBody.Weld = Weld
MobilizedBody.FunctionBased = FunctionBased
MobilizedBody.Custom = Custom
MobilizedBody.Cartesian = Translation
MobilizedBody.Ground = Ground
