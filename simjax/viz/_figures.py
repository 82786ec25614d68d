"""The figures (see ``simjax.viz``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._stage import Stage
from ..io._motion import CoordinateTable
from ..studies.simulate import Trajectory
from ._scene import (
    MARKER_RGB,
    OBSERVED_RGB,
    Drawable,
    body_poses,
    check_state,
    make_scene,
    marker_locations,
    num_paths,
    path_points,
    path_segments,
    per_system,
    system_of,
)

_SUMMARY = ("total_squared_error", "marker_error_RMS", "marker_error_max")


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt  # noqa: PLC0415 - an optional dependency, loaded on use
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("simjax.viz needs matplotlib: pip install matplotlib") from None
    return plt


def plot_marker_errors(
    table: CoordinateTable,
    *,
    markers: Sequence[str] | None = None,
    ax: Any = None,
    units: str = "mm",
) -> Any:
    """Each marker's distance to its observation over time, plus the RMS and the maximum
    over markers (dashed, black and grey).

    Args:
        table: Marker errors with one ``<marker>_error`` column per marker
            (``sj.io.marker_error_table(..., per_marker=True)``); a table with only the
            three summary columns draws just the RMS and maximum.
        markers: Markers to draw (default: all in the table).
        ax: A matplotlib Axes to draw into (default: a new figure).
        units: ``"mm"`` or ``"m"``.

    Returns:
        The matplotlib Figure.
    """
    if units not in ("mm", "m"):
        raise ValueError(f"plot_marker_errors: units must be 'mm' or 'm', got {units!r}")
    k = 1e3 if units == "mm" else 1.0
    per = {lb[: -len("_error")]: lb for lb in table.labels if lb.endswith("_error") and lb not in _SUMMARY}
    if markers is not None:
        unknown = [m for m in markers if m not in per]
        if unknown:
            raise ValueError(
                f"plot_marker_errors: no error column for {unknown}; the table has {sorted(per)[:8]} "
                "(make it with sj.io.marker_error_table(..., per_marker=True))"
            )
        per = {m: per[m] for m in markers}
    summary = [lb for lb in _SUMMARY[1:] if lb in table.labels]
    if not per and not summary:
        raise ValueError(
            "plot_marker_errors: the table has neither per-marker '<name>_error' columns nor "
            "marker_error_RMS/marker_error_max; make it with sj.io.marker_error_table"
        )
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.5))
    else:
        fig = ax.figure
    t = np.asarray(table.time)
    for name, lb in per.items():
        ax.plot(t, k * table.column(lb), lw=1, label=name)
    styles = {"marker_error_RMS": ("k", "RMS"), "marker_error_max": ("0.5", "max")}
    for lb in summary:
        color, label = styles[lb]
        ax.plot(t, k * table.column(lb), "--", color=color, lw=1.5, label=label)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"marker error ({units})")
    ax.legend(fontsize="x-small", ncol=max(1, math.ceil((len(per) + len(summary)) / 12)), loc="upper right")
    return fig


def plot_coordinates(
    table: CoordinateTable,
    reference: CoordinateTable | None = None,
    *,
    model: Any = None,
    names: Sequence[str] | None = None,
    degrees: Sequence[str] | bool = True,
    labels: tuple[str, str] = ("simjax", "reference"),
    ncols: int = 4,
) -> Any:
    """Coordinates over time, one panel each, with a reference motion dashed; each panel's
    axis says its unit (deg or rad for angles, m for translations).

    Which columns are angles is not in a table (a .mot's ``inDegrees`` says only that its
    angles are in degrees), so it comes from ``model`` (each coordinate's ``motion_type``, as
    OpenSim's ``Coordinate.getMotionType()``: only rotational ones are angles) or from a list
    given as ``degrees``. Each table's angles are converted from its own unit
    (``in_degrees``) to the one drawn, so a table in degrees is never converted twice and a
    radian table and a degree table are drawn alike; translations and coupled coordinates
    are drawn as stored.

    Args:
        table: Coordinates over time (``model.table_from_q(time, states.q)`` or
            ``sj.io.read_mot``).
        reference: Another motion over the same coordinates (e.g. OpenSim's IK ``.mot``);
            its columns are matched by name and drawn at its own times.
        model: The ``LoadedModel`` the coordinates belong to: its rotational coordinates
            are the angles.
        names: Coordinates to draw (default: every column of ``table``; with a reference,
            the columns both have).
        degrees: ``True``: angles in degrees; ``False``: in radians; a list: these columns
            are the angles (over ``model``), drawn in degrees. Without ``model`` or a list,
            tables whose angles are in another unit than the one drawn are refused (which
            columns to convert is unknown).
        labels: Legend names of ``table`` and ``reference``.
        ncols: Panels per row.

    Returns:
        The matplotlib Figure.

    Raises:
        TypeError: ``model`` is not a model from ``sj.io.load_*``.
        ValueError: A named column is missing, or a table needs converting and which columns
            are angles is unknown.
    """
    if names is None:
        names = [n for n in table.labels if reference is None or n in reference.labels]
    missing = [n for n in names if n not in table.labels]
    if reference is not None:
        missing += [f"{n} (reference)" for n in names if n not in reference.labels]
    if missing:
        raise ValueError(f"plot_coordinates: no column for {missing[:6]}")
    if not names:
        raise ValueError("plot_coordinates: no coordinate to draw (no column in common with the reference?)")
    to_deg = degrees is not False
    tables = [table] if reference is None else [table, reference]
    kind: dict[str, str] = {}  # column -> "rotational" / "translational" / "coupled"
    if model is not None:
        _, loaded = system_of(model)
        if loaded is None:
            raise TypeError(
                "plot_coordinates: model must be the LoadedModel from sj.io.load_osim/load_urdf/load_mjcf "
                "(its coordinates say which columns are angles), got a MultibodySystem"
            )
        kind = {n: c.motion_type for n, c in loaded.coordinates.items()}
    if not isinstance(degrees, bool):
        kind = {n: k for n, k in kind.items() if k != "rotational"}
        kind.update({n: "rotational" for n in degrees})
    elif model is None and any(tab.in_degrees != to_deg for tab in tables):
        which = [lab for lab, tab in zip(labels, tables, strict=False) if tab.in_degrees != to_deg]
        raise ValueError(
            f"plot_coordinates: {' and '.join(which)} stores its angles in "
            f"{'radians' if to_deg else 'degrees'}, and which columns are angles is not in a table; "
            "pass model=<the LoadedModel> (its rotational coordinates are the angles), "
            "degrees=[the angular columns], or " + ("degrees=False" if to_deg else "degrees=True")
        )

    def values(tab: CoordinateTable, n: str) -> np.ndarray:
        v = tab.column(n)
        if kind.get(n) != "rotational" or tab.in_degrees == to_deg:
            return v
        return np.rad2deg(v) if to_deg else np.deg2rad(v)

    units = {"rotational": "deg" if to_deg else "rad", "translational": "m"}
    plt = _pyplot()
    nc = max(1, min(ncols, len(names)))
    nr = math.ceil(len(names) / nc)
    fig, axes = plt.subplots(nr, nc, figsize=(3.2 * nc, 2.2 * nr), squeeze=False, sharex=True)
    for i, n in enumerate(names):
        ax = axes[i // nc][i % nc]
        ax.plot(np.asarray(table.time), values(table, n), lw=1.2, label=labels[0])
        if reference is not None:
            ax.plot(np.asarray(reference.time), values(reference, n), "--", lw=1.2, label=labels[1])
        ax.set_title(n, fontsize="small")
        if n in kind:
            ax.set_ylabel(units.get(kind[n], "as stored"), fontsize="small")
    for j in range(len(names), nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    if reference is not None:
        axes[0][0].legend(fontsize="x-small")
    for ax in axes[-1]:
        ax.set_xlabel("time (s)")
    fig.tight_layout()
    return fig


#: The unit of each MuscleAnalysis quantity (OpenSim's file keys), by key or key prefix.
_MUSCLE_UNITS = {
    "Length": "m",
    "FiberLength": "m",
    "NormalizedFiberLength": "optimal lengths",
    "FiberVelocity": "m/s",
    "NormFiberVelocity": "max. velocities",
    "PennationAngle": "rad",
    "MomentArm_": "m (N m/N)",
    "Moment_": "N m",
    "activation": "activation",
    "force": "N",
}


def plot_muscles(
    analysis: Any,
    quantity: str = "TendonForce",
    reference: Any = None,
    *,
    muscles: Sequence[str] | None = None,
    labels: tuple[str, str] = ("simjax", "reference"),
    ncols: int = 4,
) -> Any:
    """One muscle quantity over a trial, one panel per muscle, with a reference dashed:
    forces, lengths, velocities, moment arms and moments from OpenSim's MuscleAnalysis, or
    static optimization's activations and forces.

    Args:
        analysis: ``sj.io.muscle_analysis``'s tables (a dict by OpenSim's file key), an
            ``sj.io.AnalyzeResult`` (its muscle analysis, and ``"activation"`` / ``"force"``
            from its static optimization), or one ``CoordinateTable`` whose columns are
            muscles (e.g. a ``_StaticOptimization_activation.sto`` read back).
        quantity: The file key: ``"TendonForce"``, ``"FiberLength"``, ``"ActiveFiberForce"``,
            ``"MomentArm_<coordinate>"``, ``"Moment_<coordinate>"``, ``"activation"``, ... (all
            of ``sj.io.MUSCLE_ANALYSIS`` and the moment-arm keys); ignored for a single table.
        reference: The same quantity from elsewhere, in one of the same forms (e.g.
            OpenSim's ``_MuscleAnalysis_TendonForce.sto`` read with ``sj.io.read_sto``), its
            columns matched by name and drawn at its own times.
        muscles: The muscles to draw (default: every column; with a reference, the columns
            both have).
        labels: Legend names of ``analysis`` and ``reference``.
        ncols: Panels per row.

    Returns:
        The matplotlib Figure.

    Raises:
        ValueError: The quantity or a named muscle is missing (the message lists what is
            there).
    """
    table = _muscle_table(analysis, quantity, "analysis")
    ref = None if reference is None else _muscle_table(reference, quantity, "reference")
    if muscles is None:
        muscles = [n for n in table.labels if ref is None or n in ref.labels]
    missing = [n for n in muscles if n not in table.labels]
    if ref is not None:
        missing += [f"{n} (reference)" for n in muscles if n not in ref.labels]
    if missing:
        raise ValueError(f"plot_muscles: no column for {missing[:6]}; the muscles are {table.labels[:8]} ...")
    if not muscles:
        raise ValueError("plot_muscles: no muscle to draw (no column in common with the reference?)")
    unit = next(
        (
            u
            for k, u in _MUSCLE_UNITS.items()
            if quantity == k or (k.endswith("_") and quantity.startswith(k))
        ),
        "N",
    )
    plt = _pyplot()
    nc = max(1, min(ncols, len(muscles)))
    nr = math.ceil(len(muscles) / nc)
    fig, axes = plt.subplots(nr, nc, figsize=(3.2 * nc, 2.2 * nr), squeeze=False, sharex=True)
    for i, n in enumerate(muscles):
        ax = axes[i // nc][i % nc]
        ax.plot(np.asarray(table.time), table.column(n), lw=1.2, label=labels[0])
        if ref is not None:
            ax.plot(np.asarray(ref.time), ref.column(n), "--", lw=1.2, label=labels[1])
        ax.set_title(n, fontsize="small")
        ax.set_ylabel(unit, fontsize="small")
    for j in range(len(muscles), nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    if ref is not None:
        axes[0][0].legend(fontsize="x-small")
    for ax in axes[-1]:
        ax.set_xlabel("time (s)")
    fig.suptitle(quantity, fontsize="medium")
    fig.tight_layout()
    return fig


def _muscle_table(x: Any, quantity: str, what: str) -> CoordinateTable:
    """``plot_muscles``' table of ``quantity`` from one of its input forms."""
    if isinstance(x, CoordinateTable):
        return x
    if not isinstance(x, dict) and not hasattr(x, "muscle_analysis"):
        raise TypeError(
            f"plot_muscles: {what} must be sj.io.muscle_analysis's tables (a dict), an sj.io.AnalyzeResult "
            f"or a CoordinateTable, got {type(x).__name__}"
        )
    tables = dict(x if isinstance(x, dict) else x.muscle_analysis)
    for key in ("activation", "force"):
        if getattr(x, key, None) is not None:
            tables[key] = getattr(x, key)
    if quantity not in tables:
        raise ValueError(
            f"plot_muscles: {what} has no {quantity!r}; it has {sorted(tables)[:12]}"
            f"{' ...' if len(tables) > 12 else ''}"
        )
    return tables[quantity]


def _surface_points(d: Drawable, n: int = 200) -> np.ndarray:
    """Points on a drawable's surface in its body frame (for a light scatter)."""
    if d.shape == "mesh" and d.vertices is not None:
        v = d.vertices
        if len(v) > n:
            v = v[np.linspace(0, len(v) - 1, n).astype(int)]
    else:
        u = np.random.default_rng(0).normal(size=(min(n, 60), 3))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        s = np.asarray(d.size, dtype=float)
        if d.shape in ("sphere",):
            v = s[0] * u
        elif d.shape in ("ellipsoid", "box"):
            v = s[:3] * (u if d.shape == "ellipsoid" else np.sign(u) * np.abs(u) ** 0.2)
        elif d.shape in ("capsule", "cylinder"):
            v = np.column_stack(
                [s[0] * u[:, 0], s[0] * u[:, 1], s[1] * np.sign(u[:, 2]) * np.abs(u[:, 2]) ** 0.3]
            )
        else:
            return np.zeros((0, 3))
    return np.asarray(d.p) + v @ np.asarray(d.R).T


def plot_pose(
    state: Any,
    model: Any,
    *,
    ax: Any = None,
    observed: Any = None,
    geometry: bool = True,
    markers: Any = True,
    paths: bool = True,
    title: str | None = None,
) -> Any:
    """A pose as a static 3D figure (matplotlib; works headless): the skeleton (a line from
    each body to each child joint and on to the child; none from Ground to a floating base),
    the model's geometry as a light point cloud, the paths (muscles from blue, activation 0,
    to red, 1; other paths grey), the markers (magenta) and, optionally, observed markers
    (blue crosses).

    Args:
        state: One State of ``model``.
        model: The ``LoadedModel`` or ``MultibodySystem`` the State belongs to.
        ax: A matplotlib 3D Axes (``projection="3d"``) to draw into (default: a new figure).
        observed: Observed marker locations ``(n_markers, 3)`` in metres, in the order of
            the markers drawn (NaN where missing).
        geometry: Draw the geometry's points.
        markers: ``True``: the model's markers; ``False``: none; or an ``sj.Markers`` goal
            (for a System built by hand), whose markers are drawn.
        paths: Draw the paths (muscles, ligaments, path springs) around their wraps.
        title: The axes' title.

    Returns:
        The matplotlib Figure. The model's up axis is drawn up (z for MJCF and URDF, y for
        OpenSim and hand-built models); axis labels name the model's axes.
    """
    scene = make_scene(model, markers=markers)
    st = check_state(scene.system, state, "plot_pose")
    if st.q.ndim != 1:
        raise ValueError(
            f"plot_pose draws one State; got a batch (q {tuple(st.q.shape)}): pick one, e.g. states[k]"
        )
    R, p = body_poses(scene.system, st)
    perm = [0, 1, 2] if scene.up.endswith("z") else [2, 0, 1]  # a cyclic permutation keeps handedness
    labels = ["x", "y", "z"]
    plt = _pyplot()
    if ax is None:
        fig = plt.figure(figsize=(5, 5))
        ax = fig.add_subplot(projection="3d")
    else:
        fig = ax.figure

    def P(x: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(x).reshape(-1, 3)
        return [x[:, perm[0]], x[:, perm[1]], x[:, perm[2]]]

    pts = [p]
    drawn = 0
    for c in range(1, len(scene.body_names)):
        par = scene.parents[c]
        if scene.floating[c]:  # a floating base: no bone from Ground
            continue
        joint = p[par] + R[par] @ scene.joint_points[c]
        seg = np.array([p[par], joint, p[c]])
        ax.plot(*P(seg), color="0.25", lw=2, marker="o", ms=2.5, label=None if drawn else "skeleton")
        drawn += 1
        pts.append(seg)
    if geometry:
        for d in scene.drawables:
            if d.standin:
                continue
            v = _surface_points(d)
            if len(v):
                g = p[d.body] + v @ R[d.body].T
                rgb = np.minimum(np.asarray(d.rgba[:3]), 0.6)  # white bones stay visible on white
                ax.scatter(*P(g), s=1, color=rgb, alpha=0.35, depthshade=False)
    if paths and num_paths(scene.system):
        segs, cols = path_segments(*path_points(scene.system, st))
        for k, (seg, col) in enumerate(zip(segs, cols)):
            ax.plot(*P(seg), color=col[0] / 255, lw=1.5, label=None if k else "paths")
        pts.append(segs.reshape(-1, 3))
    if scene.markers:
        mk = marker_locations(scene, R, p)
        ax.scatter(*P(mk), s=14, color=np.array(MARKER_RGB) / 255, label="model markers", depthshade=False)
        pts.append(mk)
    if observed is not None:
        obs = np.asarray(observed, dtype=float)
        if obs.shape != (len(scene.markers), 3):
            raise ValueError(
                f"plot_pose: observed must be ({len(scene.markers)}, 3) (the model's markers, metres), "
                f"got {obs.shape}"
            )
        ax.scatter(*P(obs), s=18, marker="x", color=np.array(OBSERVED_RGB) / 255, label="observed")
    allp = np.concatenate([x.reshape(-1, 3) for x in pts])
    lo, hi = np.nanmin(allp, axis=0), np.nanmax(allp, axis=0)
    c, r = (lo + hi) / 2, max(float(np.max(hi - lo)) / 2, 1e-3) * 1.1
    for i, (setter, lab) in enumerate(
        ((ax.set_xlim, ax.set_xlabel), (ax.set_ylim, ax.set_ylabel), (ax.set_zlim, ax.set_zlabel))
    ):
        setter(c[perm[i]] - r, c[perm[i]] + r)
        lab(f"{labels[perm[i]]} (m)")
    ax.set_box_aspect((1, 1, 1))
    if title:
        ax.set_title(title)
    ax.legend(fontsize="x-small", loc="upper left")
    return fig


def _energy(system: Any) -> Any:
    return lambda s: system.calc_energy(system.realize(s, Stage.VELOCITY))


def _constraint_rms(system: Any) -> Any:
    return lambda s: jnp.sqrt(jnp.mean(system.realize(s, Stage.POSITION).position_cache.qerr ** 2))


def plot_trajectory(
    traj: Any,
    model: Any,
    *,
    coordinates: Sequence[str] | None = None,
    energy: bool = True,
    constraint_error: bool = True,
) -> Any:
    """A simulation over time: chosen coordinates (degrees for rotational ones), the total
    energy's change from its start, and the position-constraint error (RMS), one panel each.

    Args:
        traj: A ``Trajectory`` from ``sj.simulate``.
        model: The ``LoadedModel`` or ``MultibodySystem`` it came from.
        coordinates: Coordinate names (a ``LoadedModel``; default: up to six) or, for a
            System, q indices as strings or ints (default: the first six q's).
        energy: Draw ``E(t) - E(0)`` (kinetic + potential, ``system.calc_energy``).
        constraint_error: Draw the RMS position-constraint error (if the model has constraints).

    Returns:
        The matplotlib Figure.
    """
    system, loaded = system_of(model)
    if not isinstance(traj, Trajectory):
        raise TypeError(f"plot_trajectory needs a Trajectory from sj.simulate, got {type(traj).__name__}")
    check_state(system, traj.final_state, "plot_trajectory")
    t, q = np.asarray(traj.t), np.asarray(traj.q)
    series: list[tuple[str, np.ndarray]] = []
    if loaded is not None:
        names = list(coordinates) if coordinates is not None else list(loaded.coordinates)[:6]
        for n in names:
            c = loaded.coordinate(n)
            v = q[:, c.q_index(traj.final_state)]
            series.append(
                (
                    f"{n} (deg)" if c.motion_type == "rotational" else f"{n} (m)",
                    np.rad2deg(v) if c.motion_type == "rotational" else v,
                )
            )
    else:
        idx = [int(i) for i in coordinates] if coordinates is not None else list(range(min(6, q.shape[1])))
        bad = [i for i in idx if not 0 <= i < q.shape[1]]
        if bad:
            raise ValueError(f"plot_trajectory: q indices {bad} out of range (nq = {q.shape[1]})")
        series += [(f"q[{i}]", q[:, i]) for i in idx]
    states = jax.vmap(lambda qq, uu: traj.final_state.with_q(qq).with_u(uu))(
        jnp.asarray(traj.q), jnp.asarray(traj.u)
    )
    if energy:
        e = np.asarray(jax.vmap(per_system(system, "energy", _energy))(states))
        series.append(("energy change (J)", e - e[0]))
    if constraint_error and system.get_matter_subsystem().get_num_constraints():
        err = np.asarray(jax.vmap(per_system(system, "constraint_rms", _constraint_rms))(states))
        series.append(("constraint error (RMS)", err))
    if not series:
        raise ValueError(
            "plot_trajectory: nothing to draw (no coordinates, energy=False, constraint_error=False)"
        )
    plt = _pyplot()
    fig, axes = plt.subplots(len(series), 1, figsize=(7, 1.9 * len(series)), sharex=True, squeeze=False)
    for ax, (label, v) in zip(axes[:, 0], series, strict=True):
        ax.plot(t, v, lw=1.2)
        ax.set_ylabel(label, fontsize="small")
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    return fig
