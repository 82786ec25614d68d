"""OpenSim inverse kinematics as an oracle for simjax's marker-tracking IK.

Builds an OpenSim model from an ``oracle_models.ModelSpec`` with markers fixed on its bodies, runs
OpenSim's ``InverseKinematicsSolver`` on marker trajectories, and returns the solution in simjax's
``q`` layout so it can be compared directly with simjax results (and timed for benchmarks).

Coordinate map (OpenSim runs Simbody in Euler-angle mode, see ``shared/PEERS.md``): for every joint
kind the OpenSim coordinate values, read from the probed ``OpenSimModel.q_slots``, are exactly the
simjax Euler-mode ``q`` block that ``oracle_models.joint_poses(spec, q, euler=True)`` maps them from.
In particular a FreeJoint's ``[rx, ry, rz, tx, ty, tz]`` are simjax's Free ``q`` in Euler mode:
body-fixed X-Y-Z angles of ``R_FM`` (``R_FM = Rx(rx) Ry(ry) Rz(rz)``) and ``p_FM`` expressed in F.
So :func:`q_from_opensim` is a gather, and quaternion-mode ``q`` is obtained from it by converting
the Ball/Free angle triples to quaternions. ``python tests/oracle_ik.py`` checks the map and the IK.

Example::

    spec = oracle_models.humanoid()
    markers = [("pelvis_a", 0, [0.1, 0.0, 0.05]), ...]  # (name, spec body index, station in B)
    out = opensim_ik(spec, markers, frames)  # frames: (T, n_markers, 3) in Ground, NaN = missing
    out["q"]  # (T, spec.nq(euler=True))
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import oracle_models as om
import oracle_osim_ik as ook

#: ``(name, spec body index, station xyz in that body's frame B)``
MarkerSpec = tuple[str, int, Sequence[float]]

#: joint kinds whose OpenSim coordinates are the simjax Euler-mode q block, in the same order
_SUPPORTED = ("pin", "slider", "universal", "gimbal", "planar", "ball", "free", "weld")


def _check_kinds(spec: om.ModelSpec) -> None:
    for b in spec.bodies:
        if b.joint not in _SUPPORTED:
            raise ValueError(f"oracle_ik: joint kind {b.joint!r} of body {b.name!r} is not supported")


# ----------------------------------------------------------------------------- coordinate maps


def q_from_opensim(spec: om.ModelSpec, osim_model: om.OpenSimModel, Q, euler: bool = True) -> np.ndarray:
    """simjax ``q`` from OpenSim's full ``Q`` vector (``state.getQ()``); inverse of
    ``OpenSimModel.set_state(spec, q, u, euler)``.

    Euler mode: each body's block is its coordinates in OpenSim's order (Pin/Slider: the angle or
    displacement; Ball: X-Y-Z body-fixed angles; Free: those angles then ``p_FM`` in F; Universal,
    Gimbal and Planar likewise). Quaternion mode (``euler=False``): Ball/Free angles become a
    ``[w, x, y, z]`` quaternion with ``w >= 0``.
    """
    _check_kinds(spec)
    Q = np.asarray(Q, float)
    blocks = [Q[np.asarray(slots, int)] for slots in osim_model.q_slots]
    q = np.concatenate(blocks) if blocks else np.zeros(0)
    return q if euler else quat_q_from_euler(spec, q)


def quat_q_from_euler(spec: om.ModelSpec, q_euler) -> np.ndarray:
    """simjax quaternion-mode ``q`` of the same configuration as Euler-mode ``q_euler``."""
    blocks = []
    for b, sl in zip(spec.bodies, spec.q_blocks(euler=True)):
        qb = np.asarray(q_euler[sl], float)
        if b.joint in ("ball", "free"):
            qb = np.r_[om.quat_from_rot(om.body_xyz(qb[:3])), qb[3:]]
        blocks.append(qb)
    return np.concatenate(blocks) if blocks else np.zeros(0)


def opensim_q(state) -> np.ndarray:
    """OpenSim's ``Q`` vector of ``state`` as a numpy array."""
    return np.asarray(state.getQ().to_numpy(), float).copy()


# ----------------------------------------------------------------------------- model


def build_ik_model(spec: om.ModelSpec, markers: Sequence[MarkerSpec]) -> om.OpenSimModel:
    """``oracle_models.to_opensim(spec)`` with an ``osim.Marker`` per entry of ``markers`` and every
    coordinate unclamped (IK must not be held back by OpenSim's default coordinate ranges)."""
    import opensim as osim

    _check_kinds(spec)
    names = [m[0] for m in markers]
    if len(set(names)) != len(names):
        raise ValueError("oracle_ik: marker names must be unique")
    for name, i, station in markers:
        if not 0 <= int(i) < len(spec.bodies):
            raise ValueError(f"oracle_ik: marker {name!r} is on body {i}, not in the spec")
        if np.shape(station) != (3,):
            raise ValueError(f"oracle_ik: marker {name!r} station must have 3 components")

    def add_markers(model, bodies, joints):
        for name, i, station in markers:
            model.addMarker(osim.Marker(name, bodies[int(i)], osim.Vec3(*map(float, station))))
        for J in joints:
            for k in range(J.numCoordinates()):
                J.upd_coordinates(k).setDefaultClamped(False)

    return om.to_opensim(spec, add_forces=add_markers)


def marker_positions(
    spec: om.ModelSpec,
    markers: Sequence[MarkerSpec],
    q: np.ndarray,
    euler: bool = True,
    osim_model: om.OpenSimModel | None = None,
) -> np.ndarray:
    """Exact marker positions in Ground, ``(T, n_markers, 3)``, for simjax ``q`` of shape
    ``(T, nq)`` (or ``(nq,)``, giving ``(n_markers, 3)``), from OpenSim's own kinematics."""
    osim_model = osim_model or build_ik_model(spec, markers)
    q = np.asarray(q, float)
    single = q.ndim == 1
    qs = q[None] if single else q
    model = osim_model.model
    mset = model.getMarkerSet()
    handles = [mset.get(name) for name, _, _ in markers]
    out = np.empty((len(qs), len(markers), 3))
    for t, qt in enumerate(qs):
        s = osim_model.set_state(spec, qt, np.zeros(spec.nu), euler)
        model.realizePosition(s)
        for j, mk in enumerate(handles):
            out[t, j] = mk.getLocationInGround(s).to_numpy()
    return out[0] if single else out


# ----------------------------------------------------------------------------- IK


def opensim_ik(
    spec: om.ModelSpec,
    markers: Sequence[MarkerSpec],
    frames,
    times=None,
    weights=None,
    accuracy: float = 1e-8,
    q_init=None,
    euler: bool = True,
    osim_model: om.OpenSimModel | None = None,
) -> dict:
    """Run OpenSim's InverseKinematicsSolver on marker data.

    spec: ``oracle_models.ModelSpec`` (joint kinds pin, slider, universal, gimbal, planar, ball,
        free, weld; anything else raises ``ValueError``).
    markers: list of ``(name, body_index_in_spec, station_xyz_in_body_frame)``, the station in the
        body frame B of spec body ``i`` (the frame simjax uses for MobilizedBody stations).
    frames: ``(T, n_markers, 3)`` observed marker positions in Ground; NaN = missing marker in
        that frame (OpenSim then leaves it out of that frame's objective).
    times: ``(T,)`` frame times, default ``0.01 * k``.
    weights: per-marker weights (default 1).
    accuracy: ``solver.setAccuracy``; 1e-8 lands within ~1e-5 rad of the exact optimum, 1e-10 within
        ~1e-8 (OpenSim's default 1e-5 stops up to ~1e-2 rad short).
    q_init: optional simjax ``q`` (layout chosen by ``euler``) to start the first ``assemble`` from;
        default: all OpenSim coordinates zero.
    euler: layout of ``q_init`` and of the returned ``q``: simjax Euler mode (``spec.nq(True)``)
        or quaternion mode (``spec.nq(False)``).
    osim_model: a model from ``build_ik_model(spec, markers)`` to reuse (its state is overwritten).

    Returns ``dict(q=(T, nq), time_assemble=s for the first frame, time_track=total s for all
    other frames, time_total, marker_errors=(T, n_markers) distances |model marker - observed|
    from ``computeCurrentMarkerErrors`` (which reports 0 for a missing marker; NaN here))``. Timings cover the
    solver calls only (not model/table construction nor reading results back).
    """
    import opensim as osim

    frames = np.asarray(frames, float)
    n = len(markers)
    if frames.ndim != 3 or frames.shape[1:] != (n, 3):
        raise ValueError(f"oracle_ik: frames must be (T, {n}, 3), got {frames.shape}")
    T = frames.shape[0]
    times = 0.01 * np.arange(T) if times is None else np.asarray(times, float)
    if times.shape != (T,):
        raise ValueError(f"oracle_ik: times must be ({T},), got {times.shape}")
    weights = np.ones(n) if weights is None else np.broadcast_to(np.asarray(weights, float), (n,))
    names = [m[0] for m in markers]

    osim_model = osim_model or build_ik_model(spec, markers)
    model = osim_model.model

    table = ook.marker_table(names, frames, times)
    wset = osim.SetMarkerWeights()
    for name, w in zip(names, weights):
        wset.cloneAndAppend(osim.MarkerWeight(name, float(w)))
    mref = osim.MarkersReference(table, wset)
    cref = osim.SimTKArrayCoordinateReference()
    solver = osim.InverseKinematicsSolver(model, mref, cref, float("inf"))
    solver.setAccuracy(float(accuracy))

    nq = spec.nq(euler)
    if q_init is None:  # all OpenSim coordinates zero
        q0 = q_from_opensim(spec, osim_model, np.zeros(osim_model.nQ), euler)
    else:
        q0 = np.asarray(q_init, float)
    if q0.shape != (nq,):
        raise ValueError(f"oracle_ik: q_init must be ({nq},), got {q0.shape}")
    state = osim_model.set_state(spec, q0, np.zeros(spec.nu), euler)

    q_out = np.empty((T, nq))
    err = np.full((T, n), np.nan)
    col = None  # solver marker index -> our column

    def record(k):
        nonlocal col
        q_out[k] = q_from_opensim(spec, osim_model, opensim_q(state), euler)
        e = osim.SimTKArrayDouble()
        solver.computeCurrentMarkerErrors(e)
        if col is None:
            col = [names.index(solver.getMarkerNameForIndex(i)) for i in range(solver.getNumMarkersInUse())]
        for i, j in enumerate(col):
            err[k, j] = e.getElt(i)
        err[k, np.isnan(frames[k]).any(axis=1)] = np.nan

    state.setTime(float(times[0]))
    t0 = time.perf_counter()
    solver.assemble(state)
    time_assemble = time.perf_counter() - t0
    record(0)

    time_track = 0.0
    for k in range(1, T):
        state.setTime(float(times[k]))
        t0 = time.perf_counter()
        solver.track(state)
        time_track += time.perf_counter() - t0
        record(k)

    return dict(
        q=q_out,
        time_assemble=time_assemble,
        time_track=time_track,
        time_total=time_assemble + time_track,
        marker_errors=err,
    )


# ----------------------------------------------------------------------------- self-test


def _fk_check(spec: om.ModelSpec, osim_model: om.OpenSimModel, q: np.ndarray) -> float:
    """Max |X_GB(OpenSim) - X_GB(spec composed by hand)| for Euler-mode ``q`` (checks the meaning of
    the coordinates, not just the round trip)."""
    X_G = []
    err = 0.0
    for b, (R, p, _) in zip(spec.bodies, om.joint_poses(spec, q, True)):
        X_GP = (np.eye(3), np.zeros(3)) if b.parent < 0 else X_G[b.parent]
        X = om._compose(om._compose(X_GP, (b.R_PF, b.p_PF)), om._compose((R, p), om._inv((b.R_BM, b.p_BM))))
        X_G.append(X)
    for (R1, p1), (R2, p2) in zip(X_G, osim_model.body_transforms(spec, q, np.zeros(spec.nu), True)):
        err = max(err, np.abs(R1 - R2).max(), np.abs(p1 - p2).max())
    return err


def _random_markers(spec: om.ModelSpec, rng: np.random.Generator, per_body: int = 2) -> list[MarkerSpec]:
    """``per_body`` markers per body, within ~0.1 m of the body origin plus an offset toward the
    next joint / com (along the segment)."""
    out = []
    for i, b in enumerate(spec.bodies):
        kids = spec.children(i)
        along = b.com if not kids else np.mean([spec.bodies[c].p_PF for c in kids], axis=0)
        for k in range(per_body):
            frac = (k + 1) / (per_body + 1)
            out.append((f"{b.name}_m{k}", i, frac * along + rng.uniform(-0.1, 0.1, 3)))
    return out


def _self_test() -> None:
    rng = np.random.default_rng(0)

    # 1. coordinate map: round trip and forward kinematics, every supported kind
    for spec in (om.humanoid(), om.pin_chain(7, seed=11), om.mixed_tree(), om.small_tree()):
        osm = build_ik_model(spec, [])
        worst_rt = worst_fk = 0.0
        for _ in range(20):
            qe, qq, u = om.random_state(spec, rng)
            s = osm.set_state(spec, qe, u, True)
            worst_rt = max(worst_rt, np.abs(q_from_opensim(spec, osm, opensim_q(s)) - qe).max())
            worst_fk = max(worst_fk, _fk_check(spec, osm, qe))
            s = osm.set_state(spec, qq, u, False)
            qq2 = q_from_opensim(spec, osm, opensim_q(s), euler=False)
            worst_rt = max(worst_rt, np.abs(qq2 - qq).max())
        print(f"{spec.name:12s} q round trip max err {worst_rt:.1e}   FK vs hand-composed {worst_fk:.1e}")
        assert worst_rt < 1e-12 and worst_fk < 1e-12

    # 2. IK on the humanoid: exact markers of a known trajectory
    spec = om.humanoid()
    markers = _random_markers(spec, rng)
    osm = build_ik_model(spec, markers)
    T, nq = 20, spec.nq(True)
    q_base = rng.uniform(-0.5, 0.5, nq)
    q_base[3:6] = [0.3, 0.9, -0.2]
    tt = np.linspace(0, 1, T)[:, None]
    amp, freq, phase = rng.uniform(0.05, 0.2, nq), rng.uniform(0.5, 1.5, nq), rng.uniform(0, np.pi, nq)
    amp[:3], amp[3:6] = 0.3, 0.15  # pelvis rotates ~0.3 rad and translates ~0.15 m
    q_true = q_base + amp * np.sin(2 * np.pi * freq * tt + phase)
    frames = marker_positions(spec, markers, q_true, osim_model=osm)

    def run(label, data, tol, **kw):
        out = opensim_ik(spec, markers, data, osim_model=osm, **kw)
        q_ref = q_true if kw.get("euler", True) else np.array([quat_q_from_euler(spec, q) for q in q_true])
        dq = np.abs(out["q"] - q_ref[: len(data)]).max()
        print(
            f"  {label:40s} max |q - q_true| {dq:.2e}"
            f"   max marker err {np.nanmax(out['marker_errors']):.1e} m"
            f"   assemble {out['time_assemble'] * 1e3:6.2f} ms"
            f"   track {out['time_track'] / max(len(data) - 1, 1) * 1e3:6.2f} ms/frame"
        )
        assert dq < tol, (label, dq)
        return out

    print(f"humanoid IK: {T} frames, {len(markers)} markers, nq={nq}")
    q_start = q_true[0] + rng.normal(0, 0.05, nq)
    run("accuracy 1e-8, perturbed start", frames, 2e-5, q_init=q_start)
    run("accuracy 1e-8, all-zero start", frames, 2e-5)
    run("accuracy 1e-10, perturbed start", frames, 1e-7, q_init=q_start, accuracy=1e-10)

    # one frame with two missing markers: still the true pose, their errors reported as NaN
    gappy = frames.copy()
    gappy[7, [3, 20]] = np.nan
    out = run("accuracy 1e-8, 2 markers NaN in frame 7", gappy, 2e-5, q_init=q_start)
    assert np.flatnonzero(np.isnan(out["marker_errors"]).any(axis=0)).tolist() == [3, 20]
    assert np.isnan(out["marker_errors"][7, [3, 20]]).all()

    # quaternion-mode layout of q_init and of the result
    run(
        "accuracy 1e-8, quaternion-mode q",
        frames[:5],
        2e-5,
        q_init=quat_q_from_euler(spec, q_start),
        euler=False,
    )
    print("self-test passed")


if __name__ == "__main__":
    _self_test()
