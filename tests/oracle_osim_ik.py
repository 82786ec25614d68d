"""OpenSim's inverse kinematics on an ``.osim`` file: the oracle for IK on real models.

``opensim_ik_file(path, names, frames, times, weights, accuracy, start)`` runs OpenSim's
``InverseKinematicsSolver`` (Simbody's Assembler, IPOPT for bounded problems) on marker
data, as OpenSim's IK tool does (``assemble`` on the first frame, ``track`` on the
others), and returns every frame's coordinate values by name (OpenSim's units: rad and m)
with the time its solver calls took.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np


def marker_table(names: Sequence[str], frames: np.ndarray, times: np.ndarray):
    """An OpenSim ``TimeSeriesTableVec3`` in metres (NaN = missing marker)."""
    import opensim as osim

    table = osim.TimeSeriesTableVec3()
    table.setColumnLabels(tuple(names))
    table.addTableMetaDataString("Units", "m")
    for t, frame in zip(times, frames):
        row = osim.RowVectorVec3(len(names))
        for j, p in enumerate(frame):
            row[j] = osim.Vec3(*map(float, p))
        table.appendRow(float(t), row)
    return table


def opensim_ik_file(
    path: str,
    names: Sequence[str],
    frames: np.ndarray,
    times: np.ndarray | None = None,
    weights: Mapping[str, float] | None = None,
    accuracy: float = 1e-5,
    start: Mapping[str, float] | None = None,
    coordinate_tasks: Mapping[str, object] | None = None,
    coordinate_file: str | None = None,
) -> dict:
    """OpenSim IK of ``frames`` ``(T, n, 3)`` (m) of the markers ``names`` on the model file.

    ``start``: coordinate values by name for the first frame (default: the model's
    defaults, as the IK tool). ``coordinate_tasks``: ``{name: task}`` with ``task.weight``
    and ``task.value_type`` ``"default_value"``/``"manual_value"`` (``task.value``) or
    ``"from_file"`` (``coordinate_file``, splined as OpenSim's IK tool does: a quintic GCV
    spline set, degrees converted), as ``sj.io.read_ik_setup`` reads them. Returns
    ``dict(coords={name: (T,)}, time_solve=s, time_setup=s)``.
    """
    import opensim as osim

    t_setup = time.perf_counter()
    frames = np.asarray(frames, float)
    T = frames.shape[0]
    times = 0.01 * np.arange(T) if times is None else np.asarray(times, float)
    model = osim.Model(str(path))
    state = model.initSystem()
    wset = osim.SetMarkerWeights()
    for n in names:
        wset.cloneAndAppend(osim.MarkerWeight(n, float((weights or {}).get(n, 1.0))))
    mref = osim.MarkersReference(marker_table(names, frames, times), wset)
    cref = osim.SimTKArrayCoordinateReference()
    cs0 = model.getCoordinateSet()
    splines = None
    if coordinate_file is not None:
        sto = osim.Storage(str(coordinate_file))
        if sto.isInDegrees():
            model.getSimbodyEngine().convertDegreesToRadians(sto)
        splines = osim.GCVSplineSet(5, sto)
    for n, task in (coordinate_tasks or {}).items():
        if task.value_type == "from_file":
            assert splines is not None, "from_file coordinate tasks need coordinate_file"
            ref = osim.CoordinateReference(n, splines.get(n))
            ref.setWeight(float(task.weight))
            cref.push_back(ref)
            continue
        v = cs0.get(n).getDefaultValue() if task.value_type == "default_value" else task.value
        ref = osim.CoordinateReference(n, osim.Constant(float(v)))
        ref.setWeight(float(task.weight))
        cref.push_back(ref)
    solver = osim.InverseKinematicsSolver(model, mref, cref, float("inf"))
    solver.setAccuracy(float(accuracy))
    cs = model.getCoordinateSet()
    cnames = [cs.get(i).getName() for i in range(cs.getSize())]
    for n, v in (start or {}).items():
        cs.get(n).setValue(state, float(v), False)
    t_setup = time.perf_counter() - t_setup
    out = {n: np.empty(T) for n in cnames}
    t_solve = 0.0
    for k in range(T):
        state.setTime(float(times[k]))
        t0 = time.perf_counter()
        if k == 0:
            solver.assemble(state)
        else:
            solver.track(state)
        t_solve += time.perf_counter() - t0
        for i, n in enumerate(cnames):
            out[n][k] = cs.get(i).getValue(state)
    return dict(coords=out, time_solve=t_solve, time_setup=t_setup)


def goals_under_simjax(
    asm,
    model,
    coords: Mapping[str, Sequence[float]],
    obs: np.ndarray,
    marker_condition: int = 1,
    per_frame: Mapping[int, np.ndarray] | None = None,
):
    """OpenSim's answer scored by simjax's objective: for every frame, the goal
    (1/2 sum w |e|^2 + coordinate tasks) of ``asm`` at OpenSim's coordinate values
    ``coords[name][k]``, with frame ``k``'s observations ``obs[k]`` set on the marker
    condition (index ``marker_condition`` in ``asm.get_parameters()["conditions"]``) and
    any other per-frame data ``per_frame`` (``{condition index: (T, ...)}``, as
    ``IKSetup.make_frames`` gives). Returns the goals ``(T,)`` and the largest
    error-condition residual of each frame (OpenSim's answer must satisfy the couplers)."""
    import jax.numpy as jnp

    from simjax.studies import assembler as A

    asm.initialize()
    plan = asm._plan
    data = {marker_condition: np.asarray(obs)} | {int(i): np.asarray(v) for i, v in (per_frame or {}).items()}
    goals, errs = [], []
    for k in range(len(obs)):
        s = model.set_coordinate_values(model.default_state, {n: coords[n][k] for n in model.coordinates})
        p = asm.get_parameters()
        for i, arr in data.items():
            key = asm.get_assembly_condition(i)._frame_key
            p["conditions"][i] = dict(p["conditions"][i], **{key: jnp.asarray(arr[k])})
        sc = asm._canonical(s)
        r, e, g, _ = A._evaluate(plan, sc.q[plan.free], sc, p)
        goals.append(float(0.5 * r @ r + g))
        errs.append(float(jnp.max(jnp.abs(e), initial=0.0)))
    return np.asarray(goals), np.asarray(errs)
