"""What is drawn, independent of how: each body's shapes in its own frame (the model file's
geometry, or stand-ins), the markers, and the bodies' poses for a State or a batch of them."""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._stage import Stage
from ..io._loaded import LoadedModel, VisualGeometry
from ..io._urdf import align_axis
from ..model.state import State
from ..studies.conditions import Markers
from ..studies.simulate import Trajectory
from ..system.forces import GeneralForceSubsystem
from ..system.muscles import _muscles_of
from ..system.system import MultibodySystem
from ._meshes import MeshProblems, load_mesh

#: mobilizers that let a body move freely (a floating base): no bone is drawn from Ground to it
_FLOATING = {"Free", "Planar", "Translation", "FreeLine", "Bushing", "FunctionBased", "Custom"}

#: colours (0-255) of what simjax adds to a model's own geometry
STANDIN_RGB = (150, 170, 200)
MARKER_RGB = (230, 60, 200)
OBSERVED_RGB = (40, 120, 255)
LIMIT_RGB = (230, 30, 30)
CONTACT_RGB = (255, 150, 0)
PATH_RGB = (170, 170, 150)  # a path that is not a muscle's (a ligament, a PathSpring)


@dataclass
class Drawable:
    """One shape fixed to body ``body`` (index), placed at ``(R, p)`` in the body frame;
    ``vertices`` (scaled, in the shape's frame) and ``faces`` for meshes."""

    body: int
    name: str
    shape: str
    size: np.ndarray
    R: np.ndarray
    p: np.ndarray
    rgba: tuple[float, float, float, float]
    vertices: np.ndarray | None = None
    faces: np.ndarray | None = None
    standin: bool = False


@dataclass
class Scene:
    """Everything drawn for one model."""

    system: MultibodySystem
    body_names: list[str]
    parents: list[int]
    joint_points: list[np.ndarray]  # each body's inboard joint location in its parent's frame
    drawables: list[Drawable]
    markers: list[tuple[str, int, np.ndarray]] = field(default_factory=list)
    up: str = "+y"
    extent: float = 1.0
    center: np.ndarray = field(default_factory=lambda: np.zeros(3))
    floating: list[bool] = field(default_factory=list)  # moves freely relative to Ground (no bone)
    outboard_points: list[np.ndarray] = field(default_factory=list)  # each body's own joint, in its frame
    lo: np.ndarray = field(default_factory=lambda: np.zeros(3))  # the default pose's lowest corner
    hi: np.ndarray = field(default_factory=lambda: np.zeros(3))

    @property
    def marker_radius(self) -> float:
        return 0.012 * self.extent


def system_of(model: Any) -> tuple[MultibodySystem, LoadedModel | None]:
    if isinstance(model, LoadedModel):
        return model.system, model
    if isinstance(model, MultibodySystem):
        return model, None
    raise TypeError(
        f"sj.viz needs a model from sj.io.load_osim/load_urdf/load_mjcf or a sj.MultibodySystem, "
        f"got {type(model).__name__}"
    )


def check_state(system: MultibodySystem, state: Any, what: str) -> State:
    """``state`` if it is a State of ``system`` (batched or not); a clear error if not."""
    if not isinstance(state, State):
        raise TypeError(f"{what}: expected a simjax State (or a batch of States), got {type(state).__name__}")
    if state.system_uid != system._uid:
        raise ValueError(
            f"{what}: this State belongs to another model (System); draw it with a View of the model "
            "it came from (sj.viz.View(model) with the same model object that made the State)"
        )
    return state


def _default_state(system: MultibodySystem, loaded: LoadedModel | None) -> State:
    return loaded.default_state if loaded is not None else system.realize_topology()


def _geometry_drawable(g: VisualGeometry, index: int, problems: MeshProblems) -> Drawable:
    R, p = np.asarray(g.R, dtype=float), np.asarray(g.p, dtype=float)
    size = np.asarray(g.size, dtype=float)
    d = Drawable(index, g.name, g.shape, size, R, p, g.rgba)
    if g.shape == "mesh":
        if g.vertices is not None:
            d.vertices = np.asarray(g.vertices, dtype=float)
            d.faces = np.asarray(g.faces if g.faces is not None else np.zeros((0, 3)), dtype=np.int64)
        else:
            what = f"geometry {g.name!r} of body {g.body.name!r}"
            mesh = load_mesh(g.mesh_file, what, problems, g.searched)
            if mesh is None:
                d.shape = "missing"
                return d
            d.vertices = mesh[0] * np.asarray(g.scale, dtype=float)
            d.faces = mesh[1]
    return d


def make_scene(
    model: Any, *, groups: Sequence[int] = (0, 1, 2), standins: bool | None = None, markers: Any = True
) -> Scene:
    """The :class:`Scene` of a loaded model or a System.

    Args:
        model: A ``LoadedModel`` (its ``geometry`` is drawn) or a ``MultibodySystem``.
        groups: MJCF geom groups to draw (MuJoCo's viewer shows 0-2).
        standins: Draw a capsule from each body to each child joint and a sphere at each body
            (default: only for models with no geometry, and for bodies whose mesh could not
            be read).
        markers: ``True``: the model's markers (a ``LoadedModel``'s); ``False``: none; or an
            ``sj.Markers`` goal, whose markers are drawn (in its marker order).
    """
    system, loaded = system_of(model)
    state = _default_state(system, loaded)
    matter = system.get_matter_subsystem()
    nb = matter.get_num_bodies()
    mobods = [matter.get_mobilized_body(i) for i in range(nb)]
    names = [m.name for m in mobods]
    parents = [-1] + [m.get_parent_mobilized_body().index for m in mobods[1:]]
    joint_points = [np.zeros(3)] + [np.asarray(m.get_inboard_frame(state).p, dtype=float) for m in mobods[1:]]
    outboard = [np.zeros(3)] + [np.asarray(m.get_outboard_frame(state).p, dtype=float) for m in mobods[1:]]
    geometry = loaded.geometry if loaded is not None else []
    drawables: list[Drawable] = []
    broken: set[int] = set()
    problems = MeshProblems()
    for g in geometry:
        if g.group not in groups:
            continue
        d = _geometry_drawable(g, g.body.index, problems)
        if d.shape == "missing":
            broken.add(d.body)
        else:
            drawables.append(d)
    name = os.path.basename(loaded.path) if loaded is not None and loaded.path else "the model"
    problems.warn(name, stacklevel=3)  # at the caller of plot_pose or View
    R, p = body_poses(system, state)
    pts = (
        np.concatenate([p, np.einsum("bij,bj->bi", R[parents[1:]], np.asarray(joint_points[1:]))])
        if nb > 1
        else p
    )
    extent = float(np.ptp(pts, axis=0).max()) if len(pts) > 1 else 1.0
    extent = extent if extent > 1e-6 else 1.0
    center = (pts.min(axis=0) + pts.max(axis=0)) / 2
    if standins is None:
        want = set(range(1, nb)) if not drawables else broken
    else:
        want = set(range(1, nb)) if standins else set()
    radius = 0.025 * extent
    for b in sorted(want):
        drawables += _standins(b, parents, joint_points, outboard[b], radius, names[b])
    marks = scene_markers(loaded, markers)
    up = "+z" if loaded is not None and loaded.source in ("mjcf", "urdf") else "+y"
    floating = [False] + [
        parents[b] == 0 and type(mobods[b].mobilizer).__name__ in _FLOATING for b in range(1, nb)
    ]
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    return Scene(
        system, names, parents, joint_points, drawables, marks, up, extent, center, floating, outboard, lo, hi
    )


def scene_markers(loaded: LoadedModel | None, markers: Any) -> list[tuple[str, int, np.ndarray]]:
    """``(name, body index, station)`` of the markers drawn."""
    if isinstance(markers, Markers):
        return [
            (
                markers.get_marker_name(k),
                _body_index(markers.get_marker_body(k)),
                markers.get_marker_station(k),
            )
            for k in range(markers.get_num_markers())
        ]
    if markers is True and loaded is not None:
        return [(m.name, m.body.index, np.asarray(m.station, dtype=float)) for m in loaded.markers.values()]
    if isinstance(markers, bool):
        return []
    raise TypeError(f"markers must be True, False or an sj.Markers goal, got {type(markers).__name__}")


def _body_index(body: Any) -> int:
    return int(body.index) if hasattr(body, "index") else int(body)


def _standins(
    b: int,
    parents: list[int],
    joint_points: list[np.ndarray],
    own_joint: np.ndarray,
    radius: float,
    name: str,
) -> list[Drawable]:
    """A sphere at body ``b``'s origin, a capsule from its own joint (``own_joint``, its
    outboard frame's origin in its frame) to its origin and one to each child's joint."""
    rgba = (STANDIN_RGB[0] / 255, STANDIN_RGB[1] / 255, STANDIN_RGB[2] / 255, 1.0)
    ball = np.array([1.2 * radius, 0.0, 0.0])
    out = [Drawable(b, f"{name}/origin", "sphere", ball, np.eye(3), np.zeros(3), rgba, standin=True)]
    ends = [("joint", own_joint)] + [
        (f"child{c}", joint_points[c]) for c, par in enumerate(parents) if par == b
    ]
    for label, v in ends:
        length = float(np.linalg.norm(v))
        if length >= 2 * radius:
            size = np.array([radius, length / 2, 0.0])
            out.append(
                Drawable(
                    b,
                    f"{name}/bone_{label}",
                    "capsule",
                    size,
                    align_axis(np.array([0.0, 0.0, 1.0]), v / length),
                    v / 2,
                    rgba,
                    standin=True,
                )
            )
    return out


_PER_SYSTEM: weakref.WeakKeyDictionary[MultibodySystem, dict[str, Any]] = weakref.WeakKeyDictionary()


def per_system(system: MultibodySystem, name: str, build: Any) -> Any:
    """The System's jitted ``build(system)`` (a ``State -> ...`` function), made once per
    System and name, so repeated figures and views do not retrace."""
    fns = _PER_SYSTEM.setdefault(system, {})
    if name not in fns:
        fns[name] = jax.jit(build(system))
    return fns[name]


def _poses(system: MultibodySystem) -> Any:
    matter = system.get_matter_subsystem()

    def one(s: State) -> tuple[jax.Array, jax.Array]:
        return matter.get_body_transforms(system.realize(s, Stage.POSITION))

    return one


def body_poses(system: MultibodySystem, states: State) -> tuple[np.ndarray, np.ndarray]:
    """Every body's ``(R_GB, p_GB)`` for a State ``(nb, 3, 3), (nb, 3)`` or a batch of them
    (a vmapped State: its batch axes lead): one compiled function per System."""
    fn = per_system(system, "poses", _poses)
    batch = tuple(states.q.shape[:-1])
    if not batch:
        R, p = fn(states)
    else:  # every leaf of a vmapped State carries the batch axes
        n = int(np.prod(batch))
        flat = jax.tree.map(lambda x: jnp.reshape(x, (n, *jnp.shape(x)[len(batch) :])), states)
        R, p = jax.vmap(fn)(flat)
        R, p = R.reshape((*batch, *R.shape[1:])), p.reshape((*batch, *p.shape[1:]))
    return np.asarray(R), np.asarray(p)


def states_of(system: MultibodySystem, what: Any, name: str) -> tuple[State, np.ndarray]:
    """States over time and their times from a ``Trajectory`` (or a vmapped batch of them:
    ``(N, T)``) or a batched State (``Assembler.track``'s ``(T,)``, or ``(N, T)``)."""
    if isinstance(what, Trajectory):
        # a vmapped batch of Trajectories has q (N, T, nq): its States are (N, T)
        states = jax.vmap(lambda tr: tr.states)(what) if what.q.ndim == 3 else what.states
        return check_state(system, states, name), np.asarray(what.t).reshape(-1, what.t.shape[-1])[0]
    states = check_state(system, what, name)
    if states.q.ndim not in (2, 3):
        raise ValueError(
            f"{name}: expected a Trajectory or a batch of States over time (q of shape (T, nq), or "
            f"(N, T, nq) for N members), got q {tuple(states.q.shape)}; for one State use View.show"
        )
    T = states.q.shape[-2]
    t = np.asarray(states.t).reshape(-1, T)[0] if np.size(states.t) >= T else np.arange(T, dtype=float)
    if np.all(t == t[0]):
        t = np.arange(T, dtype=float)
    return states, t


def limit_engagement(system: MultibodySystem, states: State) -> np.ndarray:
    """Each coordinate limit's engagement (``+1`` on its lower bound, ``-1`` its upper, 0
    free; ArtiSynth's E) in a State or a batch of them: ``(..., n_limits)``."""
    matter = system.get_matter_subsystem()
    limits = [matter.get_limit(i) for i in range(matter.get_num_limits())]
    batch = tuple(states.q.shape[:-1])
    if not limits:
        return np.zeros((*batch, 0))

    def one(s: State) -> jax.Array:
        return jnp.stack([jnp.asarray(lim.is_engaged(s), dtype=float) for lim in limits])

    if not batch:
        return np.asarray(one(states))
    n = int(np.prod(batch))
    flat = jax.tree.map(lambda x: jnp.reshape(x, (n, *jnp.shape(x)[len(batch) :])), states)
    return np.asarray(jax.vmap(one)(flat)).reshape((*batch, len(limits)))


def _contacts(system: MultibodySystem) -> Any:
    matter = system.get_matter_subsystem()

    def one(s: State) -> tuple[jax.Array, jax.Array, jax.Array]:
        c = matter.find_contacts(system.realize(s, Stage.POSITION))
        return c.pos, c.frame[..., 0, :], c.active

    return one


def contact_points(system: MultibodySystem, states: State) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every contact slot's point in Ground, its normal (from surface 1 to surface 2) and
    whether it holds a contact (``matter.find_contacts``), for a State or a batch of them:
    ``(..., n, 3), (..., n, 3), (..., n)``; ``n = 0`` for a model without contact surfaces."""
    batch = tuple(states.q.shape[:-1])
    if system.get_matter_subsystem().get_num_contact_surfaces() == 0:
        return np.zeros((*batch, 0, 3)), np.zeros((*batch, 0, 3)), np.zeros((*batch, 0), dtype=bool)
    fn = per_system(system, "contacts", _contacts)
    if not batch:
        out = fn(states)
    else:
        n = int(np.prod(batch))
        flat = jax.tree.map(lambda x: jnp.reshape(x, (n, *jnp.shape(x)[len(batch) :])), states)
        out = jax.vmap(fn)(flat)
        out = tuple(x.reshape((*batch, *x.shape[1:])) for x in out)
    pos, nrm, active = (np.asarray(x) for x in out)
    return pos, nrm, active.astype(bool)


def num_paths(system: MultibodySystem) -> int:
    """How many paths (``sj.GeometryPath``) the System has."""
    paths = None if system._model is None else system._model.paths
    return 0 if paths is None else paths.num_paths


def _paths(system: MultibodySystem) -> Any:
    matter = system.get_matter_subsystem()
    subs = [sub for sub in system._subsystems if isinstance(sub, GeneralForceSubsystem)]
    muscles = [m for sub in subs for m in _muscles_of(sub)]

    def one(s: State) -> tuple[jax.Array, jax.Array, jax.Array]:
        pts, ok = matter.calc_path_points(system.realize(s, Stage.POSITION))
        act = jnp.full(pts.shape[0], jnp.nan, pts.dtype)
        for m in muscles:
            act = act.at[m.get_geometry_path().index].set(jnp.asarray(m.get_activation(s), pts.dtype))
        return pts, ok, act

    return one


def path_points(system: MultibodySystem, states: State) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every path as drawn (``matter.calc_path_points``) and its muscle's activation (NaN
    for a path no muscle pulls along) in a State or a batch of them: ``(..., n_paths, S,
    3), (..., n_paths, S), (..., n_paths)``."""
    batch = tuple(states.q.shape[:-1])
    fn = per_system(system, "paths", _paths)
    if not batch:
        out = fn(states)
    else:
        n = int(np.prod(batch))
        flat = jax.tree.map(lambda x: jnp.reshape(x, (n, *jnp.shape(x)[len(batch) :])), states)
        out = jax.vmap(fn)(flat)
        out = tuple(x.reshape((*batch, *x.shape[1:])) for x in out)
    pts, ok, act = (np.asarray(x) for x in out)
    return pts, ok.astype(bool), act


def path_segments(pts: np.ndarray, ok: np.ndarray, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One State's paths (``path_points``) as line segments ``(N, 2, 3)`` and their colours
    ``(N, 2, 3)`` (uint8): a muscle from blue (activation 0) to red (1), as OpenSim draws
    them, any other path grey."""
    segs, cols = [], []
    for p, k, a in zip(pts, ok, act):
        x = p[k]
        if len(x) < 2:
            continue
        segs.append(np.stack([x[:-1], x[1:]], axis=1))
        if np.isnan(a):
            rgb = np.array(PATH_RGB, float)
        else:
            a = float(np.clip(a, 0.0, 1.0))
            rgb = np.array([255.0 * a, 0.0, 255.0 * (1.0 - a)])
        cols.append(np.broadcast_to(rgb, (len(x) - 1, 2, 3)))
    if not segs:
        return np.zeros((0, 2, 3), np.float32), np.zeros((0, 2, 3), np.uint8)
    return np.concatenate(segs).astype(np.float32), np.concatenate(cols).astype(np.uint8)


def geometry_poses(model: LoadedModel, state: State) -> tuple[np.ndarray, np.ndarray]:
    """The Ground pose ``(R, p)`` of each of ``model.geometry``'s shapes at ``state``:
    ``(n, 3, 3), (n, 3)`` (what a viewer places; compare with MuJoCo's ``geom_xmat``/``geom_xpos``
    or Pinocchio's visual placements).

    Raises:
        TypeError: ``model`` is not a ``LoadedModel`` (a ``MultibodySystem`` has no visual
            geometry; the arguments swapped), or ``state`` is not a State.
        ValueError: ``state`` belongs to another model.
    """
    if isinstance(model, State):
        raise TypeError(
            "geometry_poses(model, state): the first argument is a State; the model comes first: "
            "sj.viz.geometry_poses(model, state) with model from sj.io.load_osim/load_urdf/load_mjcf"
        )
    if isinstance(model, MultibodySystem):
        raise TypeError(
            "geometry_poses needs the LoadedModel from sj.io.load_osim/load_urdf/load_mjcf (its "
            "model.geometry lists the shapes it places), got a MultibodySystem, which holds no visual "
            "geometry: pass the loaded model rather than model.system; for a System's body poses use "
            "system.get_matter_subsystem().get_body_transforms(system.realize(state, sj.Stage.POSITION))"
        )
    system, _ = system_of(model)
    check_state(system, state, "geometry_poses")
    R_GB, p_GB = body_poses(system, state)
    idx = np.array([g.body.index for g in model.geometry], dtype=int)
    R_BG = np.array([g.R for g in model.geometry]).reshape(-1, 3, 3)
    p_BG = np.array([g.p for g in model.geometry]).reshape(-1, 3)
    R = np.einsum("gij,gjk->gik", R_GB[idx], R_BG)
    p = p_GB[idx] + np.einsum("gij,gj->gi", R_GB[idx], p_BG)
    return R, p


def marker_locations(scene: Scene, R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ground locations ``(..., n_markers, 3)`` of the scene's markers for body poses ``(R, p)``."""
    if not scene.markers:
        return np.zeros((*p.shape[:-2], 0, 3))
    idx = np.array([m[1] for m in scene.markers])
    st = np.array([m[2] for m in scene.markers])
    return p[..., idx, :] + np.einsum("...mij,mj->...mi", R[..., idx, :, :], st)
