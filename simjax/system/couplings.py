"""Custom joints written the ArtiSynth way: ``sj.Coupling`` (ArtiSynth's ``RigidBodyCoupling``,
seed 001, 4.9.3–4.9.5).

A coupling constrains the pose ``T_CD`` of frame C (fixed on body A) relative to frame D
(fixed on body B). Subclass ``sj.Coupling`` and write, as pure JAX functions:

* ``initialize_constraints()``: declare the constraints (``add_constraint(flags,
  wrench=None)``) and coordinates (``add_coordinate(min, max, flags, lim_con)``);
* ``coordinates_to_tcd(coords) -> Transform`` and its inverse
  ``tcd_to_coordinates(T_CD, coords_prev) -> coords`` (use ``nearest_angle`` for angles);
* ``project_to_constraints(T_CD) -> T_GD``: the nearest pose that satisfies the bilateral
  constraints;
* optionally ``update_constraints(T_GD, coords) -> {index: wrench}``: wrenches (in frame G)
  of constraints that are not constant in G.

The equations (errors, wrenches, unilateral values) are functions of the coupling in
:mod:`simjax.constraints.couplings`; this module holds what users subclass.

What the manual asks a coupling to hand-derive comes from autodiff here: the wrench of a
bilateral constraint that is neither constant nor given by ``update_constraints`` is the
direction orthogonal to the coordinate twists ``T_GD^-1 dT_GD/dc_i`` and the constant
wrenches; every wrench's time derivative is a forward-mode derivative along the motion; a
limit row's wrench satisfies ``N_l v_GD = dc_i/dt`` (4.34) by construction, since the row is
the coordinate itself.

Spatial vectors follow simjax's convention, ``[angular; linear]``: a wrench is ``[m; f]``,
so ArtiSynth's ``new Wrench(fx, fy, fz, mx, my, mz)`` is ``Coupling.wrench(f=(fx, fy, fz),
m=(mx, my, mz))``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp


class Coupling:
    """Base class of a custom coupling (ArtiSynth's ``RigidBodyCoupling``); see the module
    docstring. Attach it with ``sj.Constraint.Coupling(coupling, body_a, X_AC, body_b, X_BD)``.

    A coupling's methods may read only what ``initialize_constraints`` sets up (the
    constraint and coordinate lists): joints whose couplings have the same class and the
    same declarations are evaluated together (one ``vmap``). If your methods read other
    attributes, override ``structure_key`` to include them."""

    BILATERAL = 0x01
    ROTARY = 0x02
    LINEAR = 0x04
    CONSTANT = 0x08
    LIMIT = 0x10
    _ALL = BILATERAL | ROTARY | LINEAR | CONSTANT | LIMIT

    def __init__(self) -> None:
        self._constraints: list[dict[str, Any]] = []
        self._coordinates: list[dict[str, Any]] = []
        self.initialize_constraints()
        if not self._constraints:
            raise ValueError(f"{type(self).__name__}.initialize_constraints added no constraints")

    # ------------------------------------------------------------------ declarations
    def add_constraint(self, flags: int, wrench: Any = None) -> int:
        """Add a constraint (ArtiSynth's ``addConstraint``); returns its index.

        ``flags``: ``BILATERAL`` (an equality; otherwise unilateral) or-ed with ``ROTARY`` or
        ``LINEAR`` (which tolerance a unilateral row uses). ``wrench``: its constant value in
        frame G, ``[m; f]`` (sets ``CONSTANT``)."""
        name = type(self).__name__
        if not isinstance(flags, (int, np.integer)) or flags & ~self._ALL:
            raise ValueError(
                f"{name}.add_constraint: unknown flags {flags!r}; combine sj.Coupling.BILATERAL, ROTARY, "
                "LINEAR, CONSTANT (LIMIT is set by add_coordinate)"
            )
        if flags & self.ROTARY and flags & self.LINEAR:
            raise ValueError(f"{name}.add_constraint: a constraint is ROTARY or LINEAR, not both")
        w = None
        if wrench is not None:
            w = np.asarray(wrench, dtype=float).reshape(-1)
            if w.shape != (6,) or not np.all(np.isfinite(w)) or not np.any(w):
                raise ValueError(
                    f"{name}.add_constraint: a wrench is 6 finite numbers [m; f], not all zero; "
                    f"got {wrench!r}"
                )
            flags |= self.CONSTANT
        elif flags & self.CONSTANT:
            raise ValueError(
                f"{name}.add_constraint: CONSTANT needs its wrench: add_constraint(flags, wrench)"
            )
        self._constraints.append({"flags": int(flags), "wrench": w})
        return len(self._constraints) - 1

    def add_coordinate(
        self, min: float = -np.inf, max: float = np.inf, flags: int = 0, lim_con: int | None = None
    ) -> int:
        """Add a coordinate with range ``[min, max]`` (ArtiSynth's ``addCoordinate``);
        ``lim_con``: index of the unilateral constraint that enforces the range. Returns its
        index."""
        name = type(self).__name__
        lo, hi = float(min), float(max)
        if np.isnan(lo) or np.isnan(hi) or lo > hi:
            raise ValueError(f"{name}.add_coordinate: min={lo} must not exceed max={hi}")
        if flags:
            raise ValueError(f"{name}.add_coordinate: flags are reserved; pass 0")
        if lim_con is not None:
            if not (isinstance(lim_con, (int, np.integer)) and 0 <= lim_con < len(self._constraints)):
                raise ValueError(
                    f"{name}.add_coordinate: lim_con={lim_con!r} is not the index of a constraint "
                    "added before"
                )
            c = self._constraints[lim_con]
            if c["flags"] & self.BILATERAL:
                raise ValueError(
                    f"{name}.add_coordinate: lim_con={lim_con} is bilateral; a limit is unilateral"
                )
            if c["flags"] & self.LIMIT:
                raise ValueError(
                    f"{name}.add_coordinate: constraint {lim_con} already limits another coordinate"
                )
            c["flags"] |= self.LIMIT
            c["coordinate"] = len(self._coordinates)
        self._coordinates.append({"min": lo, "max": hi, "lim_con": lim_con})
        return len(self._coordinates) - 1

    @staticmethod
    def wrench(f: Any = (0.0, 0.0, 0.0), m: Any = (0.0, 0.0, 0.0)) -> jax.Array:
        """A wrench ``[m; f]`` from its force and moment (so that ArtiSynth's component order
        cannot be mixed up); JAX values are fine (in ``update_constraints``)."""
        mm = jnp.asarray(m, jnp.result_type(float)).reshape(3)
        ff = jnp.asarray(f, jnp.result_type(float)).reshape(3)
        return jnp.concatenate([mm, ff.astype(mm.dtype)])

    @staticmethod
    def nearest_angle(phi: Any, ref: Any) -> jax.Array:
        """The angle ``phi + 2 pi k`` nearest to ``ref`` (ArtiSynth's ``nearestAngle``, with
        the reference explicit): lets an angle coordinate wrap through a range wider than
        2 pi."""
        return phi + 2 * jnp.pi * jnp.round((ref - phi) / (2 * jnp.pi))

    # ------------------------------------------------------------------ to write
    def initialize_constraints(self) -> None:
        """Declare constraints and coordinates (override)."""
        raise NotImplementedError(f"{type(self).__name__} must define initialize_constraints()")

    def coordinates_to_tcd(self, coords: jax.Array) -> sp.Transform:
        """``T_CD`` from the coordinates (override when the coupling has coordinates)."""
        raise NotImplementedError(f"{type(self).__name__} must define coordinates_to_tcd(coords)")

    def tcd_to_coordinates(self, T_CD: sp.Transform, coords_prev: jax.Array) -> jax.Array:
        """Coordinates of a legal ``T_CD``; ``coords_prev`` are the last known values (for
        ``nearest_angle``). Not clipped to their ranges (override)."""
        raise NotImplementedError(f"{type(self).__name__} must define tcd_to_coordinates(T_CD, coords_prev)")

    def project_to_constraints(self, T_CD: sp.Transform) -> sp.Transform:
        """The nearest ``T_GD`` that satisfies the bilateral constraints (override)."""
        raise NotImplementedError(f"{type(self).__name__} must define project_to_constraints(T_CD)")

    def update_constraints(self, T_GD: sp.Transform, coords: jax.Array) -> dict[int, Any]:
        """Wrenches (in G, ``[m; f]``) of constraints that are not constant in G, by index.
        Optional: by default bilateral wrenches come from autodiff (see the module docstring)."""
        return {}

    def unilateral_distances(
        self, T_GD: sp.Transform, T_CD: sp.Transform, coords: jax.Array
    ) -> dict[int, Any]:
        """Distances (negative inside the inadmissible region) of unilateral constraints that
        limit no coordinate, by index: ArtiSynth's ``setDistance`` in ``updateConstraints``.
        The row engages when its distance is <= 0 and acts along the distance's gradient
        (its wrench and the wrench's derivative come from autodiff). Needed only by
        couplings with such constraints."""
        return {}

    def structure_key(self) -> Any:
        """What the coupling's methods depend on (see the class docstring)."""
        cons = tuple(
            (c["flags"], None if c["wrench"] is None else tuple(c["wrench"])) for c in self._constraints
        )
        coords = tuple(c["lim_con"] for c in self._coordinates)
        return (type(self), cons, coords)

    # ------------------------------------------------------------------ queries
    def num_constraints(self) -> int:
        """Number of constraints (bilateral and unilateral)."""
        return len(self._constraints)

    def num_coordinates(self) -> int:
        """Number of coordinates."""
        return len(self._coordinates)

    def get_constraint_flags(self, index: int) -> int:
        """Flags of constraint ``index``."""
        return int(self._constraints[index]["flags"])

    # ------------------------------------------------------------------ derived (pure)
    def _bilateral(self) -> list[int]:
        return [i for i, c in enumerate(self._constraints) if c["flags"] & self.BILATERAL]

    def _unilateral(self) -> list[int]:
        return [i for i, c in enumerate(self._constraints) if not c["flags"] & self.BILATERAL]
