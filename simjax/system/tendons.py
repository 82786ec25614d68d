"""MuJoCo's tendons (``<tendon><fixed>`` and ``<spatial>``): the handle a user or the MJCF
loader builds, and the frozen :class:`simjax.model.tendons.TendonSet` it becomes at
``realize_topology()``.

Every tendon's length is evaluated at once (:mod:`simjax.dynamics.tendons`); its Jacobian
``J = dL/du`` (MuJoCo's ``ten_J`` in simjax's speeds) and lengthening speed ``J u`` come
from autodiff of the length, with the wrap geoms' tangent points riding on their bodies as
MuJoCo defines ``ten_J``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._stage import Stage
from ..dynamics.tendons import tendon_lengths
from ..model.state import State
from ..model.tendons import CYLINDER, NO_WRAP, SPHERE, TendonSet
from ._compiled import reads_cache
from .bodies import MobilizedBody
from .paths import _body_index, _coordinate, _station


class Tendon:
    """A MuJoCo tendon: fixed (:meth:`append_joint` terms, ``L = sum coef q``) or spatial
    (:meth:`append_site`, :meth:`append_geom`, :meth:`append_pulley` in MuJoCo's order: a
    path through sites, wrapping around sphere and cylinder geoms, split into branches by
    pulleys whose ``divisor`` divides the branches' lengths).

    Build it with ``sj.Tendon(matter, name)`` (a topology change). :meth:`get_length`
    (Position), :meth:`get_lengthening_speed` (Velocity), :meth:`get_jacobian` (``dL/du``,
    MuJoCo's ``ten_J`` in simjax's speeds) and :meth:`compute_moment_arm` (``-dL/dq`` about
    a coordinate, OpenSim's sign). All are pure JAX (``jit``, ``vmap``, ``grad``).
    """

    def __init__(self, matter: Any, name: str | None = None):
        self._matter = matter
        self.index = len(matter._tendons)
        self.name = name if name is not None else f"tendon{self.index}"
        # ("joint", (body, which), coef) | ("site", body, station) | ("geom", ...) | ("pulley", divisor)
        self._elements: list[tuple] = []
        matter._tendons.append(self)
        matter._system.invalidate_topology()

    def __repr__(self) -> str:
        return f"Tendon({self.name!r}, {self.kind}, {len(self._elements)} elements)"

    @property
    def kind(self) -> str:
        """``"fixed"``, ``"spatial"`` or ``"empty"``."""
        if not self._elements:
            return "empty"
        return "fixed" if self._elements[0][0] == "joint" else "spatial"

    def _who(self, what: str) -> str:
        return f"Tendon {self.name!r}: {what}"

    def _add(self, element: tuple, fixed: bool) -> None:
        if self._elements and (self.kind == "fixed") != fixed:
            raise ValueError(
                self._who(f"append_{element[0]}")
                + f" on a {self.kind} tendon: a tendon is either fixed (joints) or spatial "
                "(sites, geoms, pulleys), as in MuJoCo"
            )
        self._elements.append(element)
        self._matter._system.invalidate_topology()

    # ------------------------------------------------------------------ building
    def append_joint(self, coordinate: Any, coef: float) -> None:
        """A fixed tendon's term ``coef q`` of a coordinate with ``qdot = u`` (a hinge or
        slide joint: a loaded model's Coordinate or ``(MobilizedBody, which)``)."""
        who = self._who("append_joint")
        c = float(coef)
        if not math.isfinite(c):
            raise ValueError(f"{who}: coef must be finite, got {coef!r}")
        self._add(("joint", _coordinate(coordinate, who), c), True)

    def append_site(self, body: MobilizedBody | int, station: Any) -> None:
        """A site (a point fixed at ``station`` on ``body``) the tendon passes through."""
        who = self._who("append_site")
        self._add(("site", _body_index(body, who), _station(station, who)), False)

    def append_geom(
        self,
        body: MobilizedBody | int,
        shape: str,
        radius: float,
        *,
        position: Any = (0.0, 0.0, 0.0),
        rotation: Any = None,
        side: tuple[MobilizedBody | int, Any] | None = None,
    ) -> None:
        """A wrap geom between two sites: a ``"sphere"`` or a ``"cylinder"`` (infinite,
        along its frame's z axis) of ``radius``, its frame at ``position`` and ``rotation``
        (3x3, the geom frame's axes in the body frame) on ``body``. ``side``, a ``(body,
        station)`` point (MuJoCo's ``sidesite``), picks the side the tendon wraps on; inside
        the geom it makes the tendon wrap from inside (MuJoCo's inside wrap)."""
        who = self._who("append_geom")
        if shape not in ("sphere", "cylinder"):
            raise ValueError(f"{who}: shape must be 'sphere' or 'cylinder', got {shape!r}")
        r = float(radius)
        if not (math.isfinite(r) and r > 0):
            raise ValueError(f"{who}: radius must be finite and > 0, got {radius!r}")
        R = np.eye(3) if rotation is None else np.asarray(rotation, dtype=float)
        if R.shape != (3, 3) or not np.allclose(R @ R.T, np.eye(3), atol=1e-9):
            raise ValueError(f"{who}: rotation must be a 3x3 rotation matrix, got {rotation!r}")
        s = None if side is None else (_body_index(side[0], who), _station(side[1], who))
        kind = SPHERE if shape == "sphere" else CYLINDER
        self._add(("geom", _body_index(body, who), _station(position, who), R, r, kind, s), False)

    def append_pulley(self, divisor: float) -> None:
        """A pulley: the branches after it count ``1 / divisor`` of their length."""
        who = self._who("append_pulley")
        d = float(divisor)
        if not (math.isfinite(d) and d > 0):
            raise ValueError(f"{who}: divisor must be finite and > 0, got {divisor!r}")
        self._add(("pulley", d), False)

    def _check(self) -> None:
        """Raise ValueError naming the problem if the elements do not make a tendon."""
        if self.kind == "empty":
            raise ValueError(f"Tendon {self.name!r} has no elements (append_joint, or append_site twice)")
        if self.kind == "spatial":
            _segments(self, lambda body, station: 0)

    # ------------------------------------------------------------------ evaluation
    @reads_cache
    def get_length(self, state: State) -> Float[Array, ""]:
        """The tendon's length (needs Position; MuJoCo's ``ten_length``)."""
        return self._matter.calc_tendon_lengths(state)[self.index]

    @reads_cache
    def get_lengthening_speed(self, state: State) -> Float[Array, ""]:
        """d length / dt (needs Velocity; MuJoCo's ``ten_velocity``)."""
        return self._matter.calc_tendon_lengthening_speeds(state)[self.index]

    def get_jacobian(self, state: State) -> Float[Array, " nu"]:
        """``dL/du`` (nu,): the lengthening speed per generalized speed (MuJoCo's ``ten_J``
        row, in simjax's speeds: equal to it for hinge and slide joints)."""
        return self._matter.calc_tendon_jacobians(state)[self.index]

    def compute_moment_arm(self, state: State, coordinate: Any) -> Float[Array, ""]:
        """The moment arm ``-dL/dq`` about ``coordinate`` (a loaded model's Coordinate or
        ``(MobilizedBody, which)``), OpenSim's sign: minus the Jacobian's entry."""
        body, which = _coordinate(coordinate, self._who("compute_moment_arm"))
        topo = self._matter._system.model_for(state).topology(state.use_euler_angles)
        return -self.get_jacobian(state)[int(topo.u_start[body]) + which]


# ---------------------------------------------------------------------- every tendon at once


def calc_tendon_lengths(matter: Any, state: State) -> jax.Array:
    """Every tendon's length (n_tendons,) in the order of creation (needs Position)."""
    state.require(Stage.POSITION, "calc_tendon_lengths")
    model = matter._system.model_for(state)
    if model.tendons is None:
        return jnp.zeros((0,), dtype=state.q.dtype)
    pc = state.position_cache
    return tendon_lengths(model.tendons, model.topology(state.use_euler_angles), state.q, pc.R_GB, pc.p_GB)


def _lengths_at(matter: Any, state: State, q: jax.Array) -> jax.Array:
    return calc_tendon_lengths(matter, matter._system.realize(state.with_q(q), Stage.POSITION))


def calc_tendon_lengthening_speeds(matter: Any, state: State) -> jax.Array:
    """Every tendon's lengthening speed (n_tendons,) (needs Velocity)."""
    state.require(Stage.VELOCITY, "calc_tendon_lengthening_speeds")
    qdot = state.velocity_cache.qdot
    return jax.jvp(lambda q: _lengths_at(matter, state, q), (state.q,), (qdot,))[1]


def calc_tendon_jacobians(matter: Any, state: State) -> jax.Array:
    """Every tendon's ``dL/du`` (n_tendons, nu) (MuJoCo's ``ten_J`` in simjax's speeds;
    needs only q)."""
    system = matter._system

    def speeds(u: jax.Array) -> jax.Array:
        s = system.realize(state.with_u(u), Stage.VELOCITY)
        return jax.jvp(lambda q: _lengths_at(matter, state, q), (state.q,), (s.velocity_cache.qdot,))[1]

    return jax.jacfwd(speeds)(jnp.zeros_like(state.u))


def _segments(h: Tendon, site_index: Any) -> list[tuple]:
    """The straight or wrapped segments of a spatial tendon, as MuJoCo's ``mj_tendon``
    walks its elements: (site0, site1, wrap kind, geom, side site, divisor)."""
    el = h._elements
    kinds = [e[0] for e in el]
    if kinds[0] == "geom" or kinds[-1] != "site":
        raise ValueError(
            f"Tendon {h.name!r}: a spatial tendon starts with a site or a pulley and ends with a site "
            "(append_site)"
        )
    if kinds.count("site") < 2:
        raise ValueError(f"Tendon {h.name!r}: a spatial tendon needs at least two sites (append_site)")
    for i, k in enumerate(kinds):
        if k == "geom" and not (0 < i < len(kinds) - 1 and kinds[i - 1] == "site" and kinds[i + 1] == "site"):
            raise ValueError(f"Tendon {h.name!r}: a wrap geom (element {i}) must lie between two sites")
        if k == "pulley" and not (
            i < len(kinds) - 1 and (i == 0 or kinds[i - 1] == "site") and kinds[i + 1] == "site"
        ):
            raise ValueError(f"Tendon {h.name!r}: a pulley (element {i}) must lie between two sites")
    out: list[tuple] = []
    divisor, j = 1.0, 0
    while j < len(el) - 1:
        if kinds[j] == "pulley" or kinds[j + 1] == "pulley":
            if kinds[j] == "pulley":
                divisor = el[j][1]
            j += 1
            continue
        s0 = site_index(el[j][1], el[j][2])
        if kinds[j + 1] == "geom":
            _, b, pos, R, r, kind, side = el[j + 1]
            s1 = site_index(el[j + 2][1], el[j + 2][2])
            sid = -1 if side is None else site_index(*side)
            out.append((s0, s1, kind, (b, pos, R, r), sid, divisor))
            j += 2
        else:
            s1 = site_index(el[j + 1][1], el[j + 1][2])
            out.append((s0, s1, NO_WRAP, None, -1, divisor))
            j += 1
    return out


def build_tendon_set(matter: Any) -> TendonSet | None:
    """The frozen record of a matter subsystem's tendons (None without tendons)."""
    handles: list[Tendon] = list(getattr(matter, "_tendons", ()))
    if not handles:
        return None
    f_ten: list[int] = []
    f_coord: list[tuple[int, int]] = []
    f_coef: list[float] = []
    sites: dict[tuple, int] = {}
    site_body: list[int] = []
    site_pos: list[np.ndarray] = []

    def site_index(body: int, station: np.ndarray) -> int:
        key = (body, *np.asarray(station, float).tolist())
        if key not in sites:
            sites[key] = len(site_body)
            site_body.append(body)
            site_pos.append(np.asarray(station, float))
        return sites[key]

    segs: list[tuple] = []
    for k, h in enumerate(handles):
        h._check()
        if h.kind == "fixed":
            for _, coord, coef in h._elements:
                f_ten.append(k)
                f_coord.append(coord)
                f_coef.append(coef)
        else:
            segs.extend((k, *s) for s in _segments(h, site_index))
    S = len(segs)
    geom = [s[4] if s[4] is not None else (0, np.zeros(3), np.eye(3), 1.0) for s in segs]
    return TendonSet(
        names=tuple(h.name for h in handles),
        fixed_tendon=np.asarray(f_ten, dtype=int),
        fixed_coord=np.asarray(f_coord, dtype=int).reshape(-1, 2),
        fixed_coef=np.asarray(f_coef, dtype=float),
        site_body=np.asarray(site_body, dtype=int),
        site_pos=np.asarray(site_pos, dtype=float).reshape(-1, 3),
        seg_tendon=np.asarray([s[0] for s in segs], dtype=int),
        seg_divisor=np.asarray([s[6] for s in segs], dtype=float),
        seg_site=np.asarray([(s[1], s[2]) for s in segs], dtype=int).reshape(-1, 2),
        seg_wrap=np.asarray([s[3] for s in segs], dtype=int),
        seg_geom_body=np.asarray([g[0] for g in geom], dtype=int),
        seg_geom_pos=np.asarray([g[1] for g in geom], dtype=float).reshape(S, 3),
        seg_geom_rot=np.asarray([g[2] for g in geom], dtype=float).reshape(S, 3, 3),
        seg_radius=np.asarray([g[3] for g in geom], dtype=float),
        seg_side=np.asarray([s[5] for s in segs], dtype=int),
    )
