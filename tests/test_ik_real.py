"""Inverse kinematics on a real trial, against OpenSim's IK on the same model, weights and start.

Data (fetched from PyPI and cached, see ``data_fetch``): Pose2Sim 0.4.0's demo, a full-body
OpenSim model (Model_Pose2Sim_Body25b: 62 coordinates, CustomJoints with splines, 24
coupler/constant constraints, clamped ranges), a real trial of 21 triangulated video
keypoints (OpenPose BODY_25B, 60 Hz, the subject 1.4 m from the model's origin) and
OpenSim's IK setup for it (marker weights, a coordinate task, accuracy 1e-5).

Both start from the model's default pose (the elbows on their lower bound). OpenSim
assembles frame 0 and tracks the rest; simjax's ``track`` solves every frame in one call.
simjax's weighted objective must be no worse than OpenSim's (+ 1e-3 relative) in every
frame, and its angles must be usable as they are (issue 65): continuous, in range, on
OpenSim's turn and Euler branch.
"""

from __future__ import annotations

import jax
import numpy as np
import oracle_osim_ik as ook
import pytest
from data_fetch import fetch

import simjax as sj
from simjax.io import ModelFileError

jax.config.update("jax_enable_x64", True)

pytest.importorskip("opensim")

DEMO = "Pose2Sim/Demo/opensim/"
MEMBERS = [
    DEMO + f
    for f in (
        "Model_Pose2Sim_Body25b.osim",
        "Balancing_for_IK.trc",
        "IK_Setup_Pose2Sim_Body25b.xml",
        "Standing_for_Scaling.trc",
    )
]
# frames compared: the balancing trial has 100 (the first 40 include its fastest motion);
# the T-pose trial (arms out, far from the model's default pose) has 25 (its header says 50).
MAX_FRAMES = 40


@pytest.fixture(scope="module")
def trial():
    files = fetch("pose2sim", "0.4.0", MEMBERS)
    model_path, trc_path, setup_path, static_path = (files[m] for m in MEMBERS)
    setup = sj.io.read_ik_setup(setup_path)
    model = sj.io.load_osim(str(model_path))
    trc = sj.io.read_trc(str(trc_path)).in_units("m")
    static = sj.io.read_trc(str(static_path)).in_units("m")
    return dict(
        setup=setup,
        model=model,
        trc=trc,
        trials={"balancing": trc, "tpose": static},
        model_path=str(model_path),
        setup_path=setup_path,
    )


def test_read_ik_setup(trial, tmp_path):
    setup = trial["setup"]
    assert setup.accuracy == pytest.approx(1e-5) and setup.constraint_weight == np.inf
    assert setup.time_range == pytest.approx((1 / 60, 100 / 60))
    assert len(setup.marker_weights) == 21 and setup.marker_weights["Nose"] == pytest.approx(0.1)
    task = setup.coordinate_tasks["L5_S1_Flex_Ext"]
    assert (task.weight, task.value_type) == (1.0, "default_value")
    assert setup.marker_file.endswith("Balancing_for_IK.trc")
    assert len(setup.frames_in_range(trial["trc"].time)) == 100
    # bad input names the file and the fix
    bad = tmp_path / "bad.xml"
    bad.write_text("<OpenSimDocument><Model/></OpenSimDocument>")
    with pytest.raises(ModelFileError, match="no <InverseKinematicsTool>"):
        sj.io.read_ik_setup(bad)
    text = setup_path_text(trial).replace('name="Nose"', 'name="NoSuchMarker"')
    bad.write_text(text)
    with pytest.warns(UserWarning, match="NoSuchMarker"):  # skipped, as OpenSim skips it
        asm = sj.io.read_ik_setup(bad).make_assembler(trial["model"])
    assert asm.get_assembly_condition(1).get_num_markers() == 20


def test_coordinate_tasks_from_a_file_match_opensim(trial, tmp_path):
    """The setup's coordinate task made ``from_file``: a lumbar flexion that sweeps
    +-3 degrees over the trial, written as a .mot (degrees) at the trial's times. simjax
    tracks it per frame (``setup.make_frames``); OpenSim's IK (quintic GCV spline of the
    same file) finds no lower objective in any frame."""
    import dataclasses

    setup, model, trc = trial["setup"], trial["model"], trial["trc"]
    T = 40
    t = np.asarray(trc.time)
    wave = 3.0 * np.sin(2 * np.pi * (t - t[0]) / (t[-1] - t[0]))
    mot = tmp_path / "lumbar.mot"
    sj.io.write_mot(mot, sj.io.CoordinateTable(t, ["L5_S1_Flex_Ext"], wave[:, None], in_degrees=True))
    task = dataclasses.replace(setup.coordinate_tasks["L5_S1_Flex_Ext"], value_type="from_file", weight=10.0)
    fs = dataclasses.replace(setup, coordinate_file=str(mot), coordinate_tasks={task.name: task})
    asm = fs.make_assembler(model)
    names = list(fs.marker_weights)
    obs = trc.observations(names)[:T]
    frames = fs.make_frames(model, asm, obs, t[:T])
    (qv,) = [i for i in frames if i != 1]
    np.testing.assert_allclose(np.asarray(frames[qv]), np.deg2rad(wave[:T]), rtol=1e-12)
    states, infos = asm.track(model.default_state, frames)
    assert np.all(np.asarray(infos.success))
    lumbar = np.asarray(model.coordinates["L5_S1_Flex_Ext"].get_value(states))
    assert np.corrcoef(lumbar, np.deg2rad(wave[:T]))[0, 1] > 0.9  # it follows the file
    ref = ook.opensim_ik_file(
        trial["model_path"],
        names,
        obs,
        times=t[:T],
        weights=fs.marker_weights,
        accuracy=fs.accuracy,
        coordinate_tasks=fs.coordinate_tasks,
        coordinate_file=str(mot),
    )
    g_os, _ = ook.goals_under_simjax(asm, model, ref["coords"], obs, per_frame={qv: frames[qv]})
    ratio = np.asarray(infos.goal) / g_os
    assert np.all(ratio <= 1 + 1e-3), np.round(ratio, 4)
    # errors name the fix
    with pytest.raises(ModelFileError, match="names no <coordinate_file>"):
        dataclasses.replace(fs, coordinate_file=None).make_assembler(model)
    short = tmp_path / "short.mot"
    sj.io.write_mot(short, sj.io.CoordinateTable(t[:5], ["L5_S1_Flex_Ext"], wave[:5, None], in_degrees=True))
    with pytest.raises(ModelFileError, match="covers t ="):
        dataclasses.replace(fs, coordinate_file=str(short)).make_frames(model, asm, obs, t[:T])
    with pytest.raises(ValueError, match="different numbers of frames"):
        asm.track(model.default_state, {1: obs, qv: frames[qv][:5]})


def setup_path_text(trial) -> str:
    return open(trial["setup_path"]).read()


def angle_report(model, q, ref=None) -> dict:
    """The rotational coordinates of ``q`` (T, nq) in degrees: the largest frame-to-frame
    jump, the largest difference from ``ref`` ({name: (T,) rad}, OpenSim's), the names
    outside their range where a whole turn would put them inside, and those outside the
    range of a clamped coordinate."""
    st = model.default_state
    rot = {n: c for n, c in model.coordinates.items() if c.motion_type == "rotational"}
    a = np.stack([np.asarray(q)[:, c.q_index(st)] for c in rot.values()], axis=1)
    lo, hi = (np.array([c.range[k] for c in rot.values()]) for k in (0, 1))
    tol = 1e-9 * (1 + np.abs(a))
    outside = (a < lo - tol) | (a > hi + tol)
    fits = np.ceil((lo - a) / (2 * np.pi)) <= np.floor((hi - a) / (2 * np.pi))  # a turn puts it inside
    clamped = np.array([c.clamped for c in rot.values()])
    names = list(rot)
    out = dict(
        jump=np.rad2deg(np.abs(np.diff(a, axis=0))).max(initial=0.0),
        misplaced=sorted({names[j] for j in np.nonzero(np.any(outside & fits, axis=0))[0]}),
        out_of_clamp=sorted({names[j] for j in np.nonzero(np.any(outside & clamped, axis=0))[0]}),
    )
    if ref is not None:
        r = np.stack([np.asarray(ref[n]) for n in rot], axis=1)
        off = np.rad2deg(np.abs(a - r))
        out.update(off=off, ref_jump=np.rad2deg(np.abs(np.diff(r, axis=0))).max(initial=0.0))
    return out


def check_angles(model, q, ref, max_off: float) -> dict:
    """The angles ``q`` are OpenSim's ``ref`` as a user would use them: jumps no larger than
    30 deg or 1.5x OpenSim's largest on the trial, every angle in its range where a whole
    turn would put it there (clamped ones always), half the angles within 0.1 deg of
    OpenSim's, 95% within 3 deg, all within ``max_off`` deg."""
    rep = angle_report(model, q, ref)
    assert rep["jump"] <= max(30.0, 1.5 * rep["ref_jump"]), (rep["jump"], rep["ref_jump"])
    assert rep["misplaced"] == [] and rep["out_of_clamp"] == [], rep
    off = rep["off"]
    assert np.median(off) < 0.1 and np.percentile(off, 95) < 3.0, (np.median(off), np.percentile(off, 95))
    assert off.max() < max_off, off.max()
    return rep


@pytest.mark.parametrize("which", ["balancing", "tpose"])
def test_track_is_no_worse_than_opensim_in_every_frame(trial, which, tmp_path):
    setup, model, trc = trial["setup"], trial["model"], trial["trials"][which]
    T = min(MAX_FRAMES, len(trc))
    asm = setup.make_assembler(model)
    markers = asm.get_assembly_condition(1)
    names = list(setup.marker_weights)
    obs = trc.observations(names)[:T]
    states, infos = asm.track(model.default_state, obs)
    assert np.all(np.asarray(infos.success)), infos.status_message()
    assert np.median(np.asarray(infos.iterations)[1:]) <= 6  # warm starts

    ref = ook.opensim_ik_file(
        trial["model_path"],
        names,
        obs,
        times=np.asarray(trc.time)[:T],
        weights=setup.marker_weights,
        accuracy=setup.accuracy,
        coordinate_tasks=setup.coordinate_tasks,
    )
    # OpenSim's answer under the same objective (simjax's goal: 1/2 sum w |e|^2 + tasks)
    g_os, e_os = ook.goals_under_simjax(asm, model, ref["coords"], obs)
    assert np.max(e_os) < 1e-6  # OpenSim's answer satisfies the couplers
    ratio = np.asarray(infos.goal) / np.array(g_os)
    assert np.all(ratio <= 1 + 1e-3), np.round(ratio, 4)
    assert markers.get_num_markers() == 21
    # The angles as they are: OpenSim's (balancing: within 8.3 deg, arm_rot_l where the
    # straight elbow leaves the humerus' axial rotation nearly free; T-pose: 68 deg on it,
    # in a valley where simjax's objective is 0.2% below OpenSim's; no whole turns or
    # Euler branches anywhere).
    check_angles(model, states.q, ref["coords"], 10.0 if which == "balancing" else 90.0)
    if which != "balancing":
        return

    # Simbody's sequential use: frame 0 assembled from the default pose, then track(t)
    K = 15
    markers.move_all_observations(obs[0])
    first, _ = asm.assemble(model.default_state)
    seq = [np.asarray(first.q)]
    for k in range(1, K):
        markers.move_all_observations(obs[k])
        asm.track(float(trc.time[k]))
        seq.append(np.asarray(asm.update_from_internal_state(model.default_state).q))
    check_angles(model, np.array(seq), {n: v[:K] for n, v in ref["coords"].items()}, 10.0)

    # OpenSim's marker-error report, written as .sto and read back by OpenSim
    table = sj.io.marker_error_table(markers, states, obs, trc.time[:T], per_marker=True)
    d = sj.io.marker_errors(markers, states, obs)
    assert d.shape == (T, 21) and np.all(np.isfinite(d))
    assert table.labels[:3] == ["total_squared_error", "marker_error_RMS", "marker_error_max"]
    np.testing.assert_allclose(table.data[:, 0], np.sum(d**2, axis=1), rtol=1e-12)
    np.testing.assert_allclose(table.data[:, 2], d.max(axis=1), rtol=1e-12)
    assert float(np.median(table.data[:, 1])) < 0.05  # video keypoints on an unscaled model: cm
    path = tmp_path / "trial_ik_marker_errors.sto"
    sj.io.write_sto(path, table)
    import opensim as osim

    back = osim.TimeSeriesTable(str(path))
    assert back.getNumRows() == T and list(back.getColumnLabels())[:3] == table.labels[:3]
    assert back.getDependentColumn("marker_error_max").to_numpy() == pytest.approx(table.data[:, 2], rel=1e-6)


def test_unclamped_track_reports_one_turn_in_range(trial):
    """The balancing trial with no coordinate clamped (OpenSim's ``<range>`` then only says
    where an angle belongs): cold segment starts travel whole turns (the right shoulder
    and elbow ended 1-2 turns away, the elbow at -266 deg for 94). ``track`` reports each
    angle in its range where a whole turn puts it there, else nearest the frame before:
    no jump that whole turns explain, and the pose, hence the objective, the solver's.
    (Unclamped, the right arm also has a minimum with the elbow bent backwards, which a
    segment may start in: a real change of pose, up to ~190 deg, not tested here.)"""
    setup, model, trc = trial["setup"], trial["model"], trial["trc"]
    T = MAX_FRAMES
    asm = setup.make_assembler(model)
    for c in model.coordinates.values():
        if c.clamped and not c.locked:
            asm.unrestrict_q(c.body, c.which)
            asm.prefer_q_range(c.body, c.which, *c.range)
    obs = trc.observations(list(setup.marker_weights))[:T]
    states, infos = asm.track(model.default_state, obs)
    assert np.all(np.asarray(infos.feasible))
    rep = angle_report(model, states.q)
    assert rep["jump"] < 270.0, rep["jump"]
    assert rep["misplaced"] == [], rep["misplaced"]
    coords = {n: np.asarray(c.get_value(states)) for n, c in model.coordinates.items()}
    goal, _ = ook.goals_under_simjax(asm, model, coords, obs)
    np.testing.assert_allclose(goal, np.asarray(infos.goal), rtol=1e-9)
