"""Read-only view of a State for user code (custom forces, subsystems, cache entries)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _spatial as sp
from .._stage import Stage
from .model import Model
from .state import State


class Context:
    """What user callables see: time, variables, kinematics, parameters of one State.

    Kinematic reads check the stage (a ``StageError`` names what to realize first).
    Spatial quantities use Simbody's conventions: ``V_GB = [w; v of B's origin]`` and
    body forces ``[torque about B's origin; force]``, all in Ground.
    """

    def __init__(self, model: Model, state: State, subsystem: str | None = None):
        self._model = model
        self.state = state
        self._subsystem = subsystem

    # variables --------------------------------------------------------------------
    @property
    def time(self) -> Float[Array, ""]:
        """Simulation time."""
        return self.state.t

    @property
    def q(self) -> Float[Array, " nq"]:
        """Generalized coordinates."""
        return self.state.q

    @property
    def u(self) -> Float[Array, " nu"]:
        """Generalized speeds."""
        return self.state.u

    @property
    def z(self) -> Float[Array, " nz"]:
        """Auxiliary continuous variables (all subsystems)."""
        return self.state.z

    @property
    def stage(self) -> Stage:
        """Stage the viewed State is realized to."""
        return self.state.stage

    @property
    def num_bodies(self) -> int:
        """Number of bodies including Ground."""
        return self._model.nb

    @property
    def nu(self) -> int:
        """Number of generalized speeds."""
        return self.state.nu

    def discrete(self, name: str, subsystem: str | None = None) -> Any:
        """A discrete variable of this (or the named) subsystem."""
        return self.state.discrete[subsystem or self._subsystem][name]  # type: ignore[index]

    def instance(self, name: str, subsystem: str | None = None) -> Any:
        """An Instance-stage parameter of this (or the named) subsystem."""
        return self.state.instance[subsystem or self._subsystem][name]  # type: ignore[index]

    def get_z(self, subsystem: str | None = None) -> jax.Array:
        """The z block of this (or the named) subsystem (empty when it has none)."""
        sl = self._model.z_slices.get(subsystem or self._subsystem)  # type: ignore[arg-type]
        return self.state.z[sl] if sl is not None else self.state.z[:0]

    def mobilizer_q(self, body: Any) -> jax.Array:
        """q block of a mobilized body (a handle or an index)."""
        return self._model.body_q(self.state, _index(body))

    def mobilizer_u(self, body: Any) -> jax.Array:
        """u block of a mobilized body (a handle or an index)."""
        return self._model.body_u(self.state, _index(body))

    # kinematics ---------------------------------------------------------------------
    @property
    def R_GB(self) -> Float[Array, "nb 3 3"]:
        """All body orientations (nb, 3, 3); needs Position."""
        return self.state.position_cache.R_GB

    @property
    def p_GB(self) -> Float[Array, "nb 3"]:
        """All body origin locations in Ground (nb, 3); needs Position."""
        return self.state.position_cache.p_GB

    @property
    def V_GB(self) -> Float[Array, "nb 6"]:
        """All body spatial velocities ``[w; v_origin]`` in Ground (nb, 6); needs Velocity."""
        return self._model.body_velocities(self.state)

    def body_transform(self, body: Any) -> sp.Transform:
        """``X_GB`` of one body."""
        b = _index(body)
        pc = self.state.position_cache
        return sp.Transform(pc.R_GB[b], pc.p_GB[b])

    def body_origin_location(self, body: Any) -> Float[Array, " 3"]:
        """Location of a body's origin in Ground."""
        return self.state.position_cache.p_GB[_index(body)]

    def body_rotation(self, body: Any) -> Float[Array, "3 3"]:
        """``R_GB`` of one body."""
        return self.state.position_cache.R_GB[_index(body)]

    def body_velocity(self, body: Any) -> Float[Array, " 6"]:
        """``V_GB = [w; v of B's origin]`` in Ground."""
        return self.V_GB[_index(body)]

    def station_location(self, body: Any, station: Any) -> Float[Array, " 3"]:
        """Ground location of a station fixed on a body (given in the body frame)."""
        b = _index(body)
        pc = self.state.position_cache
        return pc.p_GB[b] + pc.R_GB[b] @ jnp.asarray(station, pc.p_GB.dtype)

    def station_velocity(self, body: Any, station: Any) -> Float[Array, " 3"]:
        """Ground velocity of a station fixed on a body."""
        b = _index(body)
        pc = self.state.position_cache
        V = self.V_GB[b]
        r = pc.R_GB[b] @ jnp.asarray(station, pc.p_GB.dtype)
        return V[3:] + sp.cross(V[:3], r)

    def cache_entry(self, name: str, subsystem: str | None = None) -> Any:
        """Value of a subsystem cache entry (lazy ones are computed on demand)."""
        sub = self._model.subsystem_by_name(subsystem or self._subsystem)  # type: ignore[arg-type]
        return sub.get_cache_entry(self.state, name)


def _index(body: Any) -> int:
    if isinstance(body, int):
        return body
    idx = getattr(body, "index", None)
    if idx is None:
        raise TypeError(f"expected a MobilizedBody or a body index, got {type(body).__name__}")
    return int(idx)
