"""Assembly conditions (Simbody ``AssemblyCondition``): what the Assembler satisfies or
minimises.

A condition is static structure (which bodies, how many markers) plus traced data (observed
locations, stations, weights, target values) kept in a plain dict, so the Assembler can
``vmap`` over frames and differentiate with respect to any of it. Every condition gives:

* ``_errors(state, data)``: the error vector used when the condition is an *error*
  (weight infinity): driven to the error tolerance;
* ``_goal_terms(state, data)``: ``(r, g, ok)`` with the condition's goal ``1/2 |r|^2 + g``
  when it is a *goal* (finite weight). Most built-ins are least squares (``g = 0``), which is
  what lets the Assembler take Gauss-Newton steps; ``ok`` is False when there is nothing to
  fit (every marker missing).

Both are evaluated on the Assembler's internal State (Euler angles for Ball-like joints,
realized to Position). The goals follow Simbody: Markers ``1/2 sum w_i |p_i - o_i|^2 /
sum w_i``, OrientationSensors ``1/2 sum w_i a_i^2 / sum w_i`` (``a_i`` the rotation angle
between sensor and observation), QValue ``(q - value)^2``, the System's constraints
``1/2 |qerr|^2``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from .._stage import Stage
from ..model.state import State


class AssemblyCondition:
    """Base class of the Assembler's conditions (Simbody ``AssemblyCondition``).

    Build-time structure lives on the object; numbers the Assembler may batch over or
    differentiate live in ``get_data()`` (a dict of arrays). Subclass it, or use
    :meth:`AssemblyCondition.Custom` for a condition written as a plain JAX function.
    """

    # The get_data() entry Assembler.track varies per frame (None: none).
    _frame_key: str | None = None

    def _check_frames(self, frames: Any) -> Any:
        """Per-frame data for ``Assembler.track``, shape-checked (batched along T)."""
        raise ValueError(f"{type(self).__name__} {self.name!r} takes no per-frame data")

    def __init__(self, name: str):
        self.name = name
        self._assembler: Any = None
        self._index: int | None = None

    # ------------------------------------------------------------------ binding
    def _bind(self, assembler: Any, index: int) -> None:
        if self._assembler is not None and self._assembler is not assembler:
            raise ValueError(f"assembly condition {self.name!r} already belongs to another Assembler")
        self._assembler = assembler
        self._index = index
        self._resolve(assembler.get_multibody_system())

    def _resolve(self, system: Any) -> None:
        """Check the condition against the System (bodies, coordinates)."""

    def _changed(self) -> None:
        """Structure changed: the Assembler must recompile."""
        if self._assembler is not None:
            self._assembler.uninitialize()

    def get_assembler(self) -> Any:
        """The Assembler that adopted this condition."""
        if self._assembler is None:
            raise ValueError(f"assembly condition {self.name!r} was not adopted by an Assembler yet")
        return self._assembler

    def get_name(self) -> str:
        """The condition's name."""
        return self.name

    # ------------------------------------------------------------------ data + math
    def get_data(self) -> dict[str, Any]:
        """Traced numbers of this condition (observations, stations, weights, ...)."""
        return {}

    def _errors(self, state: State, data: dict[str, Any]) -> jax.Array:
        raise NotImplementedError  # pragma: no cover (every condition overrides)

    def _goal_terms(self, state: State, data: dict[str, Any]):
        e = self._errors(state, data)
        return e, None, jnp.asarray(True)

    def _error_names(self) -> list[str] | None:
        """Optional names of the error entries (for failure messages)."""
        return None

    def _trace_key(self) -> Any:
        """Everything of this condition that shapes the traced solver, besides
        ``get_data()`` (None: not known, e.g. a user's subclass; the Assembler's solver is
        then traced in every process rather than reused from disk, see
        ``simjax.studies._traces``)."""
        return None

    def _sizes(self, model: Any) -> tuple[int, int] | None:
        """Sizes of the residual vector (as a goal, no scalar term) and of the errors,
        known without tracing (None: found by an abstract evaluation instead)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @staticmethod
    def Custom(  # noqa: N802 (Simbody-style factory)
        fn: Callable[..., Any],
        *,
        params: Any = None,
        name: str = "Custom",
        num_errors: int | None = None,
    ) -> CustomCondition:
        """A condition written as a plain JAX function of the State.

        ``fn(state)`` (or ``fn(state, params)`` when ``params`` is given) receives the
        Assembler's State realized to Position and returns either a vector of errors (as an
        error: driven to tolerance; as a goal: ``1/2 |e|^2`` is minimised) or a scalar goal
        (goal only). Gradients and Jacobians come from autodiff. ``params`` is any pytree of
        arrays; it is part of the Assembler's data, so it can be changed per frame and
        differentiated.
        """
        return CustomCondition(fn, params=params, name=name)


class CustomCondition(AssemblyCondition):
    """A user condition from a JAX function; see :meth:`AssemblyCondition.Custom`."""

    def __init__(self, fn: Callable[..., Any], *, params: Any = None, name: str = "Custom"):
        super().__init__(name)
        if not callable(fn):
            raise TypeError(f"AssemblyCondition.Custom: fn must be callable, got {type(fn).__name__}")
        self._fn = fn
        self._params = params
        self._with_params = params is not None
        if not self._with_params:
            try:
                n = len(inspect.signature(fn).parameters)
            except (TypeError, ValueError):  # pragma: no cover
                n = 1
            if n >= 2:
                raise TypeError(
                    f"AssemblyCondition.Custom {name!r}: fn takes {n} arguments but no params= were "
                    "given; write fn(state) or pass params= for fn(state, params)"
                )

    def get_data(self) -> dict[str, Any]:
        """Traced numbers of this condition: its ``params`` (if it takes any)."""
        return {"params": self._params} if self._with_params else {}

    def set_params(self, params: Any) -> None:
        """Replace the params pytree (same structure)."""
        if not self._with_params:
            raise ValueError(f"custom condition {self.name!r} was made without params=")
        self._params = params

    def get_params(self) -> Any:
        """The params pytree."""
        return self._params

    def _call(self, state: State, data: dict[str, Any]) -> jax.Array:
        out = self._fn(state, data["params"]) if self._with_params else self._fn(state)
        out = jnp.asarray(out)
        if out.ndim > 1:
            raise ValueError(
                f"custom condition {self.name!r} returned shape {out.shape}; return a vector of "
                "errors or a scalar goal"
            )
        return out

    def _errors(self, state: State, data: dict[str, Any]) -> jax.Array:
        return jnp.atleast_1d(self._call(state, data))

    def _goal_terms(self, state: State, data: dict[str, Any]):
        out = self._call(state, data)
        if out.ndim == 0:
            return None, out, jnp.asarray(True)
        return out, None, jnp.asarray(True)


class SystemConstraints(AssemblyCondition):
    """The System's enabled holonomic constraints (Simbody's built-in condition, index 0):
    errors are the position errors ``qerr``; the goal is ``1/2 |qerr|^2``."""

    def __init__(self) -> None:
        super().__init__("System Constraints")

    def _errors(self, state: State, data: dict[str, Any]) -> jax.Array:
        model = self.get_assembler()._model
        mp, _, _ = model.constraint_counts(state.use_euler_angles)
        return state.position_cache.qerr[:mp]

    def _trace_key(self) -> Any:
        return (type(self),)  # the Model's constraints are in the Model's key

    def _sizes(self, model: Any) -> tuple[int, int] | None:
        mp = model.constraint_counts(True)[0]  # the Assembler works in Euler angles
        return (mp, mp) if type(self) is SystemConstraints else None

    def _error_names(self) -> list[str] | None:
        model = self.get_assembler()._model
        names = []
        for c in model.constraints(True):
            names += [model.constraint_records[c.index].name] * c.mp
        return names


def _as_body_index(system: Any, body: Any, what: str) -> int:
    matter = system.get_matter_subsystem()
    if isinstance(body, str):
        for m in matter._mobods:
            if m.name == body:
                return m.index
        names = ", ".join(repr(m.name) for m in matter._mobods)
        raise ValueError(f"{what}: no mobilized body named {body!r} in this System; bodies are {names}")
    idx = getattr(body, "index", None)
    if idx is None or not hasattr(body, "_matter"):
        raise TypeError(f"{what}: body must be a MobilizedBody or a body name, got {type(body).__name__}")
    if body._matter is not matter or idx >= len(matter._mobods) or matter._mobods[idx] is not body:
        raise ValueError(f"{what}: body {body!r} is not part of this Assembler's System")
    return int(idx)


class _Observed(AssemblyCondition):
    """Shared bookkeeping of Markers and OrientationSensors: named items on bodies, an
    observation order, observations (NaN = missing), weights."""

    _item = "marker"
    _obs_shape: tuple[int, ...] = (3,)
    _frame_key = "observations"

    def __init__(self, name: str):
        super().__init__(name)
        self._names: list[str] = []
        self._bodies: list[Any] = []
        self._body_index: list[int] | None = None
        self._frames: list[np.ndarray] = []  # station (3,) or rotation (3, 3)
        self._weights: list[float] = []
        self._order: list[int] | None = None  # observation ox -> item index
        self._obs: np.ndarray | None = None  # (n_obs, *obs_shape)

    # ------------------------------------------------------------------ items
    def _add(self, name: str | None, body: Any, frame: np.ndarray, weight: float) -> int:
        n = len(self._names)
        name = f"_UNNAMED_{n}" if name is None else str(name)
        if name in self._names:
            raise ValueError(f"{type(self).__name__}: a {self._item} named {name!r} already exists")
        w = float(weight)
        if not np.isfinite(w) or w < 0:
            raise ValueError(
                f"{type(self).__name__}: {self._item} {name!r} weight must be finite and >= 0, got {w}"
            )
        self._names.append(name)
        self._bodies.append(body)
        self._frames.append(frame)
        self._weights.append(w)
        self._obs = None
        if self._assembler is not None:
            self._resolve(self._assembler.get_multibody_system())
        self._changed()
        return n

    def _resolve(self, system: Any) -> None:
        self._body_index = [
            _as_body_index(system, b, f"{type(self).__name__} {self._item} {n!r}")
            for n, b in zip(self._names, self._bodies)
        ]

    def _n(self) -> int:
        return len(self._names)

    def _trace_key(self) -> Any:
        if type(self) not in (Markers, OrientationSensors):
            return None
        body = None if self._body_index is None else tuple(self._body_index)
        return (type(self), body, tuple(self._order_or_default()), self._n(), self._obs_shape)

    def _sizes(self, model: Any) -> tuple[int, int] | None:
        return (3 * self._n(), 3 * self._n()) if type(self) in (Markers, OrientationSensors) else None

    def _check_ix(self, ix: int, what: str) -> int:
        if not 0 <= int(ix) < self._n():
            raise IndexError(f"{type(self).__name__}: {what} {ix} out of range (have {self._n()})")
        return int(ix)

    def _index_of(self, name: str) -> int:
        try:
            return self._names.index(name)
        except ValueError:
            raise KeyError(f"{type(self).__name__}: no {self._item} named {name!r}") from None

    # ------------------------------------------------------------------ observation order
    def define_observation_order(self, order: Sequence[Any] | None = None) -> None:
        """Say which item each observation refers to (names or indices, in the order the
        observations will come). ``None``: the order the items were added. Items not
        listed are treated as missing."""
        if order is None:
            self._order = None
        else:
            idx = []
            for o in order:
                idx.append(
                    self._index_of(o) if isinstance(o, str) else self._check_ix(o, f"{self._item} index")
                )
            if len(set(idx)) != len(idx):
                raise ValueError(f"{type(self).__name__}.define_observation_order: an item is listed twice")
            self._order = idx
        self._obs = None
        self._changed()

    def _order_or_default(self) -> list[int]:
        return list(range(self._n())) if self._order is None else self._order

    def get_num_observations(self) -> int:
        """Number of observations (the length of the observation order)."""
        return len(self._order_or_default())

    def get_observation_index_for(self, ix: int) -> int | None:
        """The observation slot of an item (None if it is never observed)."""
        order = self._order_or_default()
        return order.index(ix) if ix in order else None

    def get_index_for_observation(self, ox: int) -> int:
        """The item an observation slot refers to."""
        return self._order_or_default()[ox]

    def _obs_array(self) -> np.ndarray:
        if self._obs is None:
            self._obs = np.full((self.get_num_observations(), *self._obs_shape), np.nan)
        return self._obs

    def _check_obs(self, obs: Any, batched: bool) -> Any:
        shape = tuple(np.shape(obs))
        n = self.get_num_observations()
        want = (n, *self._obs_shape)
        got = shape[-len(want) :] if len(shape) >= len(want) else shape
        if (
            got != want
            or (not batched and len(shape) != len(want))
            or (batched and len(shape) != len(want) + 1)
        ):
            lead = "(T, " if batched else "("
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: expected observations of shape {lead}"
                f"{', '.join(map(str, want))}) ({n} observations in observation order), got {shape}"
            )
        return obs

    def _check_frames(self, frames: Any) -> Any:
        return self._check_obs(frames, batched=True)

    def move_one_observation(self, ox: int, value: Any) -> None:
        """Set observation ``ox`` (NaN entries mark it missing)."""
        n = self.get_num_observations()
        if not 0 <= int(ox) < n:
            raise IndexError(f"{type(self).__name__}: observation {ox} out of range (have {n})")
        v = np.asarray(value, float)
        if v.shape != self._obs_shape:
            raise ValueError(
                f"{type(self).__name__}: observation must have shape {self._obs_shape}, got {v.shape}"
            )
        self._obs_array()[int(ox)] = v

    def move_all_observations(self, values: Any) -> None:
        """Set every observation at once (observation order; NaN = missing)."""
        v = self._check_obs(values, batched=False)
        if isinstance(v, jax.core.Tracer):
            raise TypeError(
                f"{type(self).__name__}.move_all_observations needs concrete numbers; to trace or "
                "differentiate observations pass them to Assembler.solve/track instead"
            )
        self._obs = np.array(v, float)

    def get_all_observations(self) -> np.ndarray:
        """A copy of the observations (observation order)."""
        return self._obs_array().copy()

    def get_weight(self, ix: int) -> float:
        """Weight of one item."""
        return self._weights[self._check_ix(ix, f"{self._item} index")]

    def change_weight(self, ix: int, weight: float) -> None:
        """Change one item's weight (0 ignores it)."""
        w = float(weight)
        if not np.isfinite(w) or w < 0:
            raise ValueError(f"{type(self).__name__}: weight must be finite and >= 0, got {w}")
        self._weights[self._check_ix(ix, f"{self._item} index")] = w

    # ------------------------------------------------------------------ data
    def _item_obs(self, obs: jax.Array) -> jax.Array:
        """Observations (n_obs, ...) -> per item (n, ...), NaN where not observed."""
        order = np.asarray(self._order_or_default(), int)
        if len(order) == self._n() and np.array_equal(order, np.arange(self._n())):
            return obs
        out = jnp.full((self._n(), *self._obs_shape), jnp.nan, obs.dtype)
        return out.at[order].set(obs) if len(order) else out

    def _weights_and_mask(self, data: dict[str, Any]):
        obs = self._item_obs(jnp.asarray(data["observations"]))
        axes = tuple(range(1, obs.ndim))
        present = jnp.all(jnp.isfinite(obs), axis=axes)
        w = jnp.where(present, data["weights"], 0.0)
        obs = jnp.where(jnp.expand_dims(present, axes), obs, 0.0)
        return obs, w, present

    def _error_names(self) -> list[str] | None:
        return [f"{self._item} {n!r}" for n in self._names for _ in range(3)]


class Markers(_Observed):
    """Track observed marker locations (Simbody ``Markers``).

    Each marker is a station fixed on a body with a weight; observations are Ground
    locations in *observation order* (``define_observation_order``), NaN for a marker
    missing in a frame. As a goal: ``1/2 sum w_i |p_i - o_i|^2 / sum w_i``; as an error:
    the 3 components of every present marker's ``p_i - o_i``.
    """

    _item = "marker"
    _obs_shape = (3,)

    def __init__(self, name: str = "Markers"):
        super().__init__(name)

    def add_marker(self, *args: Any, weight: float = 1.0) -> int:
        """``add_marker(name, body, station, weight=1)`` or ``add_marker(body, station,
        weight=1)``; ``body`` is a MobilizedBody or its name. Returns the marker index."""
        if len(args) == 3:
            name, body, station = args
        elif len(args) == 2:
            name, (body, station) = None, args
        elif len(args) == 4:
            name, body, station, weight = args
        else:
            raise TypeError("Markers.add_marker(name, body, station, weight=1) or add_marker(body, station)")
        st = np.asarray(station, float)
        if st.shape != (3,) or not np.all(np.isfinite(st)):
            raise ValueError(f"Markers.add_marker: station must be 3 finite numbers, got {station!r}")
        return self._add(name, body, st, weight)

    def get_num_markers(self) -> int:
        """Number of markers."""
        return self._n()

    def get_marker_name(self, mx: int) -> str:
        """Name of marker ``mx``."""
        return self._names[self._check_ix(mx, "marker index")]

    def get_marker_index(self, name: str) -> int:
        """Index of the marker with this name."""
        return self._index_of(name)

    def get_marker_station(self, mx: int) -> np.ndarray:
        """Station of marker ``mx`` in its body frame."""
        return self._frames[self._check_ix(mx, "marker index")].copy()

    def get_marker_body(self, mx: int) -> Any:
        """The body marker ``mx`` is on."""
        return self._bodies[self._check_ix(mx, "marker index")]

    def change_marker_station(self, mx: int, station: Any) -> None:
        """Move marker ``mx`` to another station on its body."""
        st = np.asarray(station, float)
        if st.shape != (3,):
            raise ValueError(f"Markers.change_marker_station: station must have shape (3,), got {st.shape}")
        self._frames[self._check_ix(mx, "marker index")] = st

    get_marker_weight = _Observed.get_weight
    change_marker_weight = _Observed.change_weight
    get_observation_index_for_marker = _Observed.get_observation_index_for
    get_marker_index_for_observation = _Observed.get_index_for_observation

    def get_data(self) -> dict[str, Any]:
        """Traced numbers of this condition: observations, marker stations and weights."""
        return {
            "observations": jnp.asarray(self._obs_array()),
            "stations": jnp.asarray(np.array(self._frames).reshape(-1, 3)),
            "weights": jnp.asarray(np.array(self._weights, float)),
        }

    def _locations(self, state: State, data: dict[str, Any]) -> jax.Array:
        b = np.asarray(self._body_index, int)
        pc = state.position_cache
        st = jnp.asarray(data["stations"], pc.p_GB.dtype)
        return pc.p_GB[b] + jnp.einsum("nij,nj->ni", pc.R_GB[b], st)

    def _errors(self, state: State, data: dict[str, Any]) -> jax.Array:
        obs, w, present = self._weights_and_mask(data)
        d = self._locations(state, data) - obs
        return jnp.where(present[:, None], d, 0.0).reshape(-1)

    def _goal_terms(self, state: State, data: dict[str, Any]):
        obs, w, _ = self._weights_and_mask(data)
        W = jnp.sum(w)
        ok = W > 0
        scale = jnp.sqrt(w / jnp.where(ok, W, 1.0))
        r = (self._locations(state, data) - obs) * scale[:, None]
        return r.reshape(-1), None, ok

    # ------------------------------------------------------------------ results
    def find_current_marker_location(self, mx: int, state: State | None = None) -> jax.Array:
        """Ground location of marker ``mx`` in ``state`` (default: the Assembler's
        internal State)."""
        s = self._state(state)
        mx = self._check_ix(mx, "marker index")
        return self._locations(s, self.get_data())[mx]

    def find_current_marker_locations(self, state: State | None = None) -> jax.Array:
        """Ground locations of all markers (n, 3) in ``state`` (default: internal State)."""
        return self._locations(self._state(state), self.get_data())

    def find_current_marker_error(self, mx: int, state: State | None = None) -> jax.Array:
        """Distance between marker ``mx`` and its observation (NaN if missing)."""
        return self.find_current_marker_errors(state)[self._check_ix(mx, "marker index")]

    def find_current_marker_errors(self, state: State | None = None) -> jax.Array:
        """Per-marker distances to the observations (n,), NaN for missing markers."""
        s = self._state(state)
        data = self.get_data()
        obs = self._item_obs(data["observations"])
        return jnp.linalg.norm(self._locations(s, data) - obs, axis=-1)

    def _state(self, state: State | None) -> State:
        asm = self.get_assembler()
        s = asm.get_internal_state() if state is None else state
        return asm.get_multibody_system().realize(s, Stage.POSITION)


class OrientationSensors(_Observed):
    """Track observed body orientations, e.g. IMUs (Simbody ``OrientationSensors``).

    Each sensor is a frame ``R_BS`` fixed on a body; observations are Ground rotations
    ``R_GO`` (3x3), NaN for missing. The error of one sensor is the rotation vector of
    ``R_GO^T R_GS`` (its norm is the angle between sensor and observation); the goal is
    ``1/2 sum w_i a_i^2 / sum w_i``.
    """

    _item = "orientation sensor"
    _obs_shape = (3, 3)

    def __init__(self, name: str = "OrientationSensors"):
        super().__init__(name)

    def add_osensor(self, *args: Any, weight: float = 1.0) -> int:
        """``add_osensor(name, body, R_BS, weight=1)`` or ``add_osensor(body, R_BS)``."""
        if len(args) == 3:
            name, body, R = args
        elif len(args) == 2:
            name, (body, R) = None, args
        elif len(args) == 4:
            name, body, R, weight = args
        else:
            raise TypeError("OrientationSensors.add_osensor(name, body, R_BS, weight=1)")
        R = np.asarray(R, float)
        if R.shape != (3, 3) or not np.allclose(R @ R.T, np.eye(3), atol=1e-6):
            raise ValueError("OrientationSensors.add_osensor: R_BS must be a 3x3 rotation matrix")
        return self._add(name, body, R, weight)

    def get_num_osensors(self) -> int:
        """Number of orientation sensors."""
        return self._n()

    def get_osensor_name(self, ix: int) -> str:
        """Name of sensor ``ix``."""
        return self._names[self._check_ix(ix, "sensor index")]

    def get_osensor_index(self, name: str) -> int:
        """Index of the sensor with this name."""
        return self._index_of(name)

    get_osensor_weight = _Observed.get_weight
    change_osensor_weight = _Observed.change_weight
    get_observation_index_for_osensor = _Observed.get_observation_index_for
    get_osensor_index_for_observation = _Observed.get_index_for_observation

    def get_data(self) -> dict[str, Any]:
        """Traced numbers of this condition: observations, sensor orientations and weights."""
        return {
            "observations": jnp.asarray(self._obs_array()),
            "orientations": jnp.asarray(np.array(self._frames).reshape(-1, 3, 3)),
            "weights": jnp.asarray(np.array(self._weights, float)),
        }

    def _rotvecs(self, state: State, data: dict[str, Any], obs: jax.Array) -> jax.Array:
        b = np.asarray(self._body_index, int)
        R_GS = state.position_cache.R_GB[b] @ jnp.asarray(data["orientations"])
        R_err = jnp.swapaxes(obs, -1, -2) @ R_GS
        return jax.vmap(sp.rot_to_axis_angle)(R_err)

    def _errors(self, state: State, data: dict[str, Any]) -> jax.Array:
        obs, _, present = self._weights_and_mask(data)
        obs = jnp.where(present[:, None, None], obs, jnp.eye(3, dtype=obs.dtype))
        v = self._rotvecs(state, data, obs)
        return jnp.where(present[:, None], v, 0.0).reshape(-1)

    def _goal_terms(self, state: State, data: dict[str, Any]):
        obs, w, present = self._weights_and_mask(data)
        obs = jnp.where(present[:, None, None], obs, jnp.eye(3, dtype=obs.dtype))
        W = jnp.sum(w)
        ok = W > 0
        scale = jnp.sqrt(w / jnp.where(ok, W, 1.0))
        return (self._rotvecs(state, data, obs) * scale[:, None]).reshape(-1), None, ok

    def find_current_osensor_errors(self, state: State | None = None) -> jax.Array:
        """Per-sensor angles (rad) between sensor and observation, NaN for missing."""
        asm = self.get_assembler()
        s = asm.get_multibody_system().realize(
            asm.get_internal_state() if state is None else state, Stage.POSITION
        )
        data = self.get_data()
        obs = self._item_obs(data["observations"])
        present = jnp.all(jnp.isfinite(obs), axis=(1, 2))
        v = self._rotvecs(s, data, jnp.where(present[:, None, None], obs, jnp.eye(3)))
        return jnp.where(present, jnp.linalg.norm(v, axis=-1), jnp.nan)


class QValue(AssemblyCondition):
    """Bring one generalized coordinate to a value (Simbody ``QValue``): error
    ``q - value``, goal ``(q - value)^2``. The coordinate is numbered as in the
    Assembler's internal (Euler-angle) State. ``Assembler.track(state, {markers: obs,
    qvalue: values})`` gives it a target per frame (``values`` of shape ``(T,)``, as
    OpenSim's coordinate tasks from a file)."""

    _frame_key = "value"

    def __init__(self, mobod: Any, qx: int, value: float, name: str = "QValue"):
        super().__init__(name)
        self._mobod = mobod
        self._qx = int(qx)
        self._value = float(value)
        self._q_index: int | None = None

    def _resolve(self, system: Any) -> None:
        b = _as_body_index(system, self._mobod, f"QValue {self.name!r}")
        topo = system.model_for(system.get_default_state()).topology(True)
        nq = int(topo.nq_body[b])
        if not 0 <= self._qx < nq:
            raise ValueError(
                f"QValue {self.name!r}: q index {self._qx} out of range; the mobilizer of body {b} "
                f"has {nq} q's in the Assembler's Euler-angle State"
            )
        self._q_index = int(topo.q_start[b]) + self._qx

    def get_value(self) -> float:
        """Target value."""
        return self._value

    def set_value(self, value: float) -> None:
        """Change the target (can be done between tracking frames)."""
        self._value = float(value)

    def get_data(self) -> dict[str, Any]:
        """Traced numbers of this condition: the target value."""
        return {"value": jnp.asarray(self._value)}

    def _check_frames(self, frames: Any) -> Any:
        shape = tuple(np.shape(frames))
        if len(shape) != 1:
            raise ValueError(f"QValue {self.name!r}: per-frame targets must have shape (T,), got {shape}")
        return frames

    def _errors(self, state: State, data: dict[str, Any]) -> jax.Array:
        return (state.q[self._q_index] - data["value"])[None]

    def _trace_key(self) -> Any:
        return (type(self), self._q_index)

    def _sizes(self, model: Any) -> tuple[int, int] | None:
        return (1, 1) if type(self) is QValue else None

    def _goal_terms(self, state: State, data: dict[str, Any]):
        return jnp.sqrt(2.0) * self._errors(state, data), None, jnp.asarray(True)
