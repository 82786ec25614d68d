"""A live 3D view in the browser or a notebook, on viser (``pip install 'simjax[viz]'``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from ..io._motion import MarkerTable
from ._scene import (
    CONTACT_RGB,
    LIMIT_RGB,
    MARKER_RGB,
    OBSERVED_RGB,
    PATH_RGB,
    Drawable,
    Scene,
    body_poses,
    check_state,
    contact_points,
    limit_engagement,
    make_scene,
    marker_locations,
    num_paths,
    path_points,
    path_segments,
    states_of,
)


def _viser() -> Any:
    try:
        import viser  # noqa: PLC0415 - an optional dependency, loaded on use
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("sj.viz.View needs viser: pip install 'simjax[viz]'") from None
    return viser


_ROT_TO_QUAT = jax.jit(jax.vmap(sp.rot_to_quat))


def _wxyz(R: np.ndarray) -> np.ndarray:
    """Unit quaternions (w, x, y, z) of rotation matrices ``(..., 3, 3)``."""
    R = np.asarray(R, dtype=float)
    return np.asarray(_ROT_TO_QUAT(jnp.asarray(R.reshape(-1, 3, 3)))).reshape((*R.shape[:-2], 4))


def _rgb(rgba: Sequence[float]) -> tuple[int, int, int]:
    return int(round(255 * rgba[0])), int(round(255 * rgba[1])), int(round(255 * rgba[2]))


def _error_rgb(err: np.ndarray, scale: float) -> np.ndarray:
    """Green (0) to red (>= ``scale``) per error; grey where missing (NaN)."""
    t = np.clip(np.nan_to_num(err, nan=0.0) / scale, 0.0, 1.0)[..., None]
    rgb = (1 - t) * np.array([40, 200, 80]) + t * np.array([230, 40, 40])
    rgb = np.where(np.isnan(err)[..., None], np.array([150, 150, 150]), rgb)
    return rgb.astype(np.uint8)


class View:
    """A 3D scene of a model served on localhost (viser): open :attr:`url` in a browser, or
        call :meth:`display` in a notebook.

        ``View(model)`` draws every body with the model file's geometry (MJCF geoms, URDF visual
        meshes, OpenSim attached geometry; stand-ins where a mesh file is missing, and for models
        with no geometry: a ball at each body and a capsule along each bone), the markers as
        spheres, optionally each body's frame as axes, and a red ball on each joint while its
        coordinate limit (``sj.Constraint.CoordinateLimit``) is engaged, and each contact the
    model's contact surfaces make (``matter.find_contacts``) as an orange point with a line
    along its normal. With ``copies=N`` it draws N members
        of a batch side by side (or overlaid with ``spacing=0``).

        Args:
            model: A ``LoadedModel`` (``sj.io.load_osim``/``load_urdf``/``load_mjcf``) or a
                ``sj.MultibodySystem``.
            host, port: Where the server listens (``port=0``: a free port).
            frames: Draw each body's frame as axes.
            markers: ``True``: the model's markers; ``False``: none; or an ``sj.Markers`` goal
                (for a System built by hand), whose markers are drawn.
            groups: MJCF geom groups drawn (MuJoCo's viewer shows 0-2).
            standins: Force stand-ins on (True) or off (False) for every body.
            up: The up direction (``"+y"``, ``"+z"``, ...); default: ``+z`` for MJCF and URDF,
                ``+y`` for OpenSim and hand-built models (Simbody's convention).
            copies: How many members of a batch to draw (``show`` and ``animate`` of a batch).
            spacing: Distance between copies, sideways (default: 1.2 x the model's size; 0
                overlays them, drawn translucent).
            contacts: Draw the contacts (points and normals) of a model with contact surfaces.
            paths: Draw the paths (``sj.GeometryPath``: muscles, ligaments, path springs)
                through their points and around their wrap objects; a muscle coloured by
                its activation, from blue (0) to red (1) as OpenSim draws it, other paths
                grey.
    """

    def __init__(
        self,
        model: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        frames: bool = False,
        markers: Any = True,
        groups: Sequence[int] = (0, 1, 2),
        standins: bool | None = None,
        up: str | None = None,
        copies: int = 1,
        spacing: float | None = None,
        contacts: bool = True,
        paths: bool = True,
    ):
        if not (isinstance(copies, int) and copies >= 1):
            raise ValueError(f"View: copies must be a positive int, got {copies!r}")
        self.scene: Scene = make_scene(model, groups=groups, standins=standins, markers=markers)
        sc = self.scene
        self._system = sc.system
        self.copies = copies
        up_dir = up or sc.up
        if up_dir not in ("+x", "+y", "+z", "-x", "-y", "-z"):
            raise ValueError(f"View: up must be one of +x, +y, +z, -x, -y, -z, got {up!r}")
        k = "xyz".index(up_dir[-1])
        upv = np.eye(3)[k] * (-1.0 if up_dir[0] == "-" else 1.0)
        front = np.eye(3)[2] if k == 1 else np.eye(3)[0]  # the camera's side: +z for y-up, +x for z-up
        side = np.cross(upv, front)
        ext = sc.extent
        gap = 1.2 * ext if spacing is None else float(spacing)
        self._offsets = [c * gap * side for c in range(copies)]
        viser = _viser()
        self.server = viser.ViserServer(host=host, port=port, verbose=False)
        self.server.gui.configure_theme(show_logo=False, show_share_button=False)
        self.server.gui.main_panel.minimize()  # the canvas first; the panel opens with a click
        self.server.scene.set_up_direction(up_dir)
        self._nodes: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._playing = threading.Event()
        self._anim: dict[str, Any] = {}
        api = self.server.scene
        matter = sc.system.get_matter_subsystem()
        self._limits = [matter.get_limit(i) for i in range(matter.get_num_limits())]
        self._contacts = bool(contacts) and matter.get_num_contact_surfaces() > 0
        self._paths = bool(paths) and num_paths(sc.system) > 0
        width = 3 * ext + gap * (copies - 1)
        grid_center = sc.center + self._offsets[-1] / 2
        # the floor: Ground's origin, or below it when the model hangs lower (a pendulum)
        floor = min(0.0, float(min(np.dot(sc.lo, upv), np.dot(sc.hi, upv)))) - 0.02 * ext
        self._nodes["/grid"] = api.add_grid(
            "/grid", width=width, height=width, cell_size=ext / 10, section_size=ext / 2,
            plane="xz" if up_dir[-1] == "y" else ("xy" if up_dir[-1] == "z" else "yz"),
            position=tuple(float(x) for x in grid_center + (floor - np.dot(grid_center, upv)) * upv),
        )  # fmt: skip
        opacity = 0.5 if copies > 1 and gap == 0 else None
        for k, d in enumerate(sc.drawables):
            if d.body == 0:  # scenery (floors, fixed parts) once
                self._add_drawable(f"/ground/g{k}", d, None)
        for c in range(copies):
            root = f"/copy{c}"
            self._nodes[root] = api.add_frame(root, show_axes=False, position=tuple(self._offsets[c]))
            for b in range(1, len(sc.body_names)):
                path = self._body_path(c, b)
                self._nodes[path] = api.add_frame(
                    path, show_axes=frames, axes_length=0.08 * ext, axes_radius=0.004 * ext, origin_radius=0.0
                )
            for k, d in enumerate(sc.drawables):
                if d.body != 0:
                    self._add_drawable(f"{self._body_path(c, d.body)}/g{k}", d, opacity)
            for i, lim in enumerate(self._limits):  # a red ball on the joint while its limit holds
                b = lim.get_mobilized_body().index
                path = f"{self._body_path(c, b)}/limit{i}"
                self._nodes[path] = api.add_icosphere(
                    path,
                    radius=0.03 * ext,
                    color=LIMIT_RGB,
                    position=tuple(sc.outboard_points[b]),
                    visible=False,
                )
            if self._contacts:  # filled by show/animate; hidden while nothing touches
                self._nodes[f"{root}/contacts/points"] = api.add_point_cloud(
                    f"{root}/contacts/points", np.zeros((1, 3), np.float32), CONTACT_RGB,
                    point_size=0.02 * ext, point_shape="circle", precision="float32", visible=False,
                )  # fmt: skip
                self._nodes[f"{root}/contacts/normals"] = api.add_line_segments(
                    f"{root}/contacts/normals", np.zeros((1, 2, 3), np.float32), CONTACT_RGB,
                    thickness=0.004 * ext, visible=False,
                )  # fmt: skip
            if self._paths:  # filled by show/animate
                self._nodes[f"{root}/paths"] = api.add_line_segments(
                    f"{root}/paths", np.zeros((1, 2, 3), np.float32), PATH_RGB, thickness=0.006 * ext,
                    visible=False,
                )  # fmt: skip
            for name, _, _ in sc.markers:
                path = f"{root}/markers/{_safe(name)}"
                self._nodes[path] = api.add_icosphere(
                    path, radius=sc.marker_radius, color=MARKER_RGB, subdivisions=2
                )
        # look at the model (the middle of the copies) from the front and a little above
        center = sc.center + self._offsets[-1] / 2
        dist = 1.1 * ext + 0.6 * gap * (copies - 1)
        eye = center + dist * (front + 0.3 * upv - 0.5 * side)
        self.server.initial_camera.position = tuple(float(x) for x in eye)
        self.server.initial_camera.look_at = tuple(float(x) for x in center)
        self.server.initial_camera.up = tuple(float(x) for x in upv)

    # ------------------------------------------------------------------ building
    def _body_path(self, c: int, b: int) -> str:
        return f"/copy{c}/b{b}_{_safe(self.scene.body_names[b])}"

    def _add_drawable(self, path: str, d: Drawable, opacity: float | None) -> None:
        api = self.server.scene
        rgb = _rgb(d.rgba)
        if d.rgba[3] < 1:
            opacity = float(d.rgba[3]) if opacity is None else opacity * float(d.rgba[3])
        kw: dict[str, Any] = {"wxyz": _wxyz(d.R), "position": d.p}
        s, ext = d.size, self.scene.extent
        if d.shape == "box":
            h = api.add_box(path, color=rgb, dimensions=tuple(2 * s[:3]), opacity=opacity, **kw)
        elif d.shape == "sphere":
            h = api.add_icosphere(path, radius=float(s[0]), color=rgb, opacity=opacity, **kw)
        elif d.shape == "ellipsoid":
            h = api.add_icosphere(path, radius=1.0, color=rgb, scale=tuple(s[:3]), opacity=opacity, **kw)
        elif d.shape == "cylinder":
            h = api.add_cylinder(
                path, radius=float(s[0]), height=float(2 * s[1]), color=rgb, opacity=opacity, **kw
            )
        elif d.shape == "capsule":
            v, f = _capsule(float(s[0]), float(s[1]))
            h = api.add_mesh_simple(path, v, f, color=rgb, opacity=opacity, **kw)
        elif d.shape == "plane":  # MuJoCo's size 0 is an infinite plane: drawn as a finite floor
            hx = float(s[0]) if s[0] > 0 else 2 * ext
            hy = float(s[1]) if s[1] > 0 else 2 * ext
            h = api.add_box(path, color=rgb, dimensions=(2 * hx, 2 * hy, 1e-3 * ext), opacity=opacity, **kw)
        elif d.shape == "mesh" and d.vertices is not None and d.faces is not None and len(d.faces):
            v32, f32 = d.vertices.astype(np.float32), d.faces.astype(np.uint32)
            h = api.add_mesh_simple(path, v32, f32, color=rgb, opacity=opacity, **kw)
        elif d.vertices is not None and len(d.vertices):  # a mesh without faces: its points
            pts = d.vertices.astype(np.float32)
            h = api.add_point_cloud(path, pts, colors=rgb, point_size=0.01 * ext, **kw)
        else:
            return
        self._nodes[path] = h

    # ------------------------------------------------------------------ public
    @property
    def url(self) -> str:
        """Where to open the view, e.g. ``http://127.0.0.1:8080``."""
        return f"http://{self.server.get_host()}:{self.server.get_port()}"

    @property
    def node_names(self) -> list[str]:
        """The scene nodes this view added (copies, bodies, shapes, markers, observations)."""
        return sorted(self._nodes)

    def display(self, height: int = 480) -> None:
        """Show the live view inline in a Jupyter notebook (an iframe of :attr:`url`, which
        the notebook's browser must reach: the same machine, or a forwarded port); outside
        a notebook, print the URL."""
        try:
            from IPython import get_ipython  # noqa: PLC0415 - only inside notebooks
            from IPython.display import IFrame, display  # noqa: PLC0415
        except ImportError:  # pragma: no cover - depends on the environment
            get_ipython = None
        if get_ipython is None or get_ipython() is None:
            print(f"3D view: {self.url}")
            return
        display(IFrame(self.url, width="100%", height=height))

    def _set_pose(self, c: int, R: np.ndarray, p: np.ndarray, q: np.ndarray) -> None:
        """Place copy ``c``'s bodies (poses ``(nb, 3, 3), (nb, 3)``, orientations as
        quaternions ``q`` (nb, 4)) and markers."""
        sc = self.scene
        with self.server.atomic():
            for b in range(1, len(sc.body_names)):
                h = self._nodes[self._body_path(c, b)]
                h.wxyz, h.position = q[b], p[b]
            for (name, _, _), x in zip(sc.markers, marker_locations(sc, R, p), strict=True):
                h = self._nodes.get(f"/copy{c}/markers/{_safe(name)}")
                if h is not None:
                    h.position = x

    def _set_limits(self, c: int, engaged: np.ndarray) -> None:
        for i, e in enumerate(engaged):
            self._nodes[
                f"{self._body_path(c, self._limits[i].get_mobilized_body().index)}/limit{i}"
            ].visible = bool(e)

    def _set_contacts(self, c: int, pos: np.ndarray, nrm: np.ndarray, active: np.ndarray) -> None:
        """Copy ``c``'s contacts: the active slots' points ``(n, 3)`` and normals."""
        if not self._contacts:
            return
        pts = self._nodes[f"/copy{c}/contacts/points"]
        seg = self._nodes[f"/copy{c}/contacts/normals"]
        on = np.asarray(active, dtype=bool)
        if not on.any():
            pts.visible = seg.visible = False
            return
        x = np.asarray(pos, dtype=np.float32)[on]
        tip = x + np.float32(0.1 * self.scene.extent) * np.asarray(nrm, dtype=np.float32)[on]
        pts.points, pts.colors = x, np.tile(np.array(CONTACT_RGB, np.uint8), (len(x), 1))
        seg.points = np.stack([x, tip], axis=1)
        seg.colors = np.tile(np.array(CONTACT_RGB, np.uint8), (len(x), 2, 1))
        pts.visible = seg.visible = True

    def _set_paths(self, c: int, pts: np.ndarray, ok: np.ndarray, act: np.ndarray) -> None:
        """Copy ``c``'s paths (one State's ``path_points``)."""
        if not self._paths:
            return
        h = self._nodes[f"/copy{c}/paths"]
        seg, col = path_segments(pts, ok, act)
        if not len(seg):
            h.visible = False
            return
        h.points, h.colors = seg, col
        h.visible = True

    def _members(self, n: int, what: str) -> int:
        if n > 1 and self.copies == 1:
            raise ValueError(
                f"{what}: a batch of {n} members; draw some side by side with View(model, copies=k), "
                "or pick one member"
            )
        return min(n, self.copies)

    def show(self, state: Any, *, observed: Any = None) -> View:
        """Draw the model at ``state``, or the first ``copies`` members of a batch of States
        side by side. ``observed``: marker locations ``(n_markers, 3)`` in metres (``(N,
        n_markers, 3)`` for a batch) in the order of the view's markers, NaN where missing;
        each model marker is then coloured by its distance to its observation."""
        state = check_state(self._system, state, "View.show")
        if state.q.ndim > 2:
            raise ValueError(f"View.show takes a State or a batch of them, got q {tuple(state.q.shape)}")
        self._stop()
        R, p = body_poses(self._system, state)
        R, p = (R[None], p[None]) if state.q.ndim == 1 else (R, p)
        n = self._members(R.shape[0], "View.show")
        obs = None
        if observed is not None:
            obs = np.asarray(observed, dtype=float)
            obs = obs[None] if state.q.ndim == 1 else obs
            want = (R.shape[0], len(self.scene.markers), 3)
            if obs.shape != want:
                raise ValueError(
                    f"View.show: observed markers must be {want[1:] if state.q.ndim == 1 else want} (the "
                    f"view's {want[1]} markers, in metres), got {np.shape(observed)}"
                )
        engaged = limit_engagement(self._system, state).reshape(R.shape[0], -1)
        cts = contact_points(self._system, state) if self._contacts else None
        if cts is not None and state.q.ndim == 1:
            cts = (cts[0][None], cts[1][None], cts[2][None])
        pth = path_points(self._system, state) if self._paths else None
        if pth is not None and state.q.ndim == 1:
            pth = (pth[0][None], pth[1][None], pth[2][None])
        Q = _wxyz(R)
        for c in range(n):
            self._set_pose(c, R[c], p[c], Q[c])
            self._set_limits(c, engaged[c])
            if cts is not None:
                self._set_contacts(c, cts[0][c], cts[1][c], cts[2][c])
            if pth is not None:
                self._set_paths(c, pth[0][c], pth[1][c], pth[2][c])
            if obs is not None:
                self._show_observed(c, obs[c], marker_locations(self.scene, R[c], p[c]))
        return self

    def _show_observed(self, c: int, obs: np.ndarray, model: np.ndarray) -> None:
        sc = self.scene
        err = np.linalg.norm(obs - model, axis=-1)
        colors = _error_rgb(err, max(0.05 * sc.extent, 1e-9))
        api = self.server.scene
        for k, (name, _, _) in enumerate(sc.markers):
            path = f"/copy{c}/observed/{_safe(name)}"
            if path not in self._nodes:
                self._nodes[path] = api.add_icosphere(
                    path, radius=0.8 * sc.marker_radius, color=OBSERVED_RGB, subdivisions=1, opacity=0.6
                )
            h = self._nodes[path]
            h.visible = bool(np.all(np.isfinite(obs[k])))
            if h.visible:
                h.position = obs[k]
            mk = self._nodes.get(f"/copy{c}/markers/{_safe(name)}")
            if mk is not None:
                mk.color = tuple(int(x) for x in colors[k])

    def animate(
        self, motion: Any, *, fps: float | None = None, observed: Any = None, play: bool = True
    ) -> View:
        """Play a motion with a time slider and a play checkbox in the view's panel.

        Args:
            motion: A ``Trajectory`` (``sj.simulate``) or a batch of States over time
                (``Assembler.track``'s); a vmapped batch of either (``(N, T)``) plays its
                first ``copies`` members side by side.
            fps: Frames per second (default: the motion's own times, at most 60).
            observed: Marker locations ``(T, n_markers, 3)`` in metres (``(N, T, ...)`` for a
                batch), in the order of the view's markers: drawn, and each model marker
                coloured by its error (green: 0, red: 5% of the model's size or more).
            play: Start playing (else show the first frame).
        """
        states, t = states_of(self._system, motion, "View.animate")
        R, p = body_poses(self._system, states)
        engaged = limit_engagement(self._system, states)
        cts = contact_points(self._system, states) if self._contacts else None
        pth = path_points(self._system, states) if self._paths else None
        if states.q.ndim == 2:
            R, p, engaged = R[None], p[None], engaged[None]
            cts = None if cts is None else (cts[0][None], cts[1][None], cts[2][None])
            pth = None if pth is None else (pth[0][None], pth[1][None], pth[2][None])
        n = self._members(R.shape[0], "View.animate")
        obs = None
        if observed is not None:
            obs = np.asarray(observed, dtype=float)
            obs = obs[None] if states.q.ndim == 2 else obs
            if obs.shape[:2] != R.shape[:2] or obs.shape[2:] != (len(self.scene.markers), 3):
                raise ValueError(
                    f"View.animate: observed must be {(len(t), len(self.scene.markers), 3)} (frames, the "
                    f"view's markers, metres) for this motion, got {np.shape(observed)}"
                )
        self._stop()
        gui = self.server.gui
        if "slider" not in self._anim:
            self._anim["slider"] = gui.add_slider(
                "frame", min=0, max=max(1, len(t) - 1), step=1, initial_value=0
            )
            self._anim["play"] = gui.add_checkbox("play", initial_value=play)
            self._anim["time"] = gui.add_number("time (s)", initial_value=float(t[0]), disabled=True)

            @self._anim["slider"].on_update
            def _(_: Any) -> None:
                self._frame(int(self._anim["slider"].value))

            @self._anim["play"].on_update
            def _(_: Any) -> None:
                self._start() if self._anim["play"].value else self._stop()

        self._anim["slider"].max = max(1, len(t) - 1)
        self._anim.update(R=R[:n], p=p[:n], Q=_wxyz(R[:n]), t=t, engaged=engaged[:n])
        self._anim["obs"] = None if obs is None else obs[:n]
        self._anim["contacts"] = None if cts is None else tuple(x[:n] for x in cts)
        self._anim["paths"] = None if pth is None else tuple(x[:n] for x in pth)
        dt = float(np.median(np.diff(t))) if len(t) > 1 and np.all(np.diff(t) > 0) else 1 / 30
        self._anim["period"] = 1.0 / fps if fps else min(max(dt, 1 / 60), 0.5)
        self.frame(0)
        self._anim["play"].value = play
        if play:
            self._start()
        return self

    def compare_markers(self, states: Any, observed: Any) -> View:
        """Step through IK ``states`` with the observed markers: ``observed`` is a
        ``MarkerTable`` (``sj.io.read_trc``: matched to the view's markers by name, converted
        to metres) or an array ``(T, n_markers, 3)`` in metres in the view's marker order.
        Each model marker is coloured by its distance to its observation."""
        if isinstance(observed, MarkerTable):
            tab = observed.in_units("m")
            names = [m[0] for m in self.scene.markers]
            obs = np.full((len(tab.time), len(names), 3), np.nan)
            for k, name in enumerate(names):
                if name in tab.marker_names:
                    obs[:, k] = tab.marker(name)
            observed = obs
        return self.animate(states, observed=observed, play=False)

    def frame(self, k: int) -> None:
        """Show frame ``k`` of the animation."""
        if "R" not in self._anim:
            raise RuntimeError("View.frame: nothing to show; call View.animate first")
        self._anim["slider"].value = int(k)
        self._frame(int(k))

    def _frame(self, k: int) -> None:
        a = self._anim
        k = int(np.clip(k, 0, len(a["t"]) - 1))
        with self._lock:
            for c in range(a["R"].shape[0]):
                R, p = a["R"][c, k], a["p"][c, k]
                self._set_pose(c, R, p, a["Q"][c, k])
                self._set_limits(c, a["engaged"][c, k])
                if a.get("contacts") is not None:
                    cpos, cnrm, con = a["contacts"]
                    self._set_contacts(c, cpos[c, k], cnrm[c, k], con[c, k])
                if a.get("paths") is not None:
                    ppts, pok, pact = a["paths"]
                    self._set_paths(c, ppts[c, k], pok[c, k], pact[c, k])
                if a.get("obs") is not None:
                    self._show_observed(c, a["obs"][c, k], marker_locations(self.scene, R, p))
            a["time"].value = float(a["t"][k])

    def _start(self) -> None:
        if self._playing.is_set():
            return
        self._playing.set()

        def loop() -> None:
            while self._playing.is_set():
                a = self._anim
                a["slider"].value = (int(a["slider"].value) + 1) % len(a["t"])  # on_update draws it
                time.sleep(a["period"])

        threading.Thread(target=loop, daemon=True).start()

    def _stop(self) -> None:
        self._playing.clear()

    def close(self) -> None:
        """Stop the server."""
        self._stop()
        self.server.stop()

    def __enter__(self) -> View:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"View({self.url}, {len(self.scene.body_names) - 1} bodies, {len(self._nodes)} nodes)"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name) or "_"


def _capsule(r: float, half: float, n: int = 16, m: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """A capsule mesh along z: radius ``r``, cylinder half-length ``half``."""
    rings = []
    for i in range(m + 1):  # lower cap, from the pole up
        a = -np.pi / 2 + (np.pi / 2) * i / m
        rings.append((r * np.cos(a), -half + r * np.sin(a)))
    for i in range(m + 1):  # upper cap
        a = (np.pi / 2) * i / m
        rings.append((r * np.cos(a), half + r * np.sin(a)))
    th = 2 * np.pi * np.arange(n) / n
    v = np.array([[rad * np.cos(t), rad * np.sin(t), z] for rad, z in rings for t in th], dtype=np.float32)
    f = []
    for i in range(len(rings) - 1):
        for j in range(n):
            a, b = i * n + j, i * n + (j + 1) % n
            c, d = a + n, b + n
            f += [(a, b, d), (a, d, c)]
    return v, np.asarray(f, dtype=np.uint32)
