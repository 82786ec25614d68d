"""OpenSim's IK tool from its setup file, end to end: ``sj.io.read_ik_setup(path).run()``
against ``opensim.InverseKinematicsTool(path).run()`` on the same file.

Data (fetched from PyPI and cached, see ``data_fetch``): Pose2Sim 0.4.0's demo model
(62 coordinates, 21 markers) and its balancing trial. The setup is the demo's own with its
``<IKTaskSet>`` removed and a ``<time_range>`` of ten frames: OpenSim then fits every
marker of the file with weight 1 (checked here: the same as listing each with weight 1,
while a marker left out of a non-empty task set is not fitted) and writes only the frames
in the range. simjax must read the setup the same way, write the same rows and columns
(degrees, as OpenSim's .mot) and the marker-error report, and reach a total squared error
no higher than OpenSim's in every frame.
"""

from __future__ import annotations

import re
import shutil

import jax
import numpy as np
import pytest
from data_fetch import fetch

import simjax as sj
from simjax.io import ModelFileError

jax.config.update("jax_enable_x64", True)

DEMO = "Pose2Sim/Demo/opensim/"
MEMBERS = [
    DEMO + f for f in ("Model_Pose2Sim_Body25b.osim", "Balancing_for_IK.trc", "IK_Setup_Pose2Sim_Body25b.xml")
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    files = fetch("pose2sim", "0.4.0", MEMBERS)
    d = tmp_path_factory.mktemp("ik_setup")
    for m in MEMBERS:
        shutil.copy(files[m], d / files[m].name)
    text = (d / "IK_Setup_Pose2Sim_Body25b.xml").read_text()
    text = text.replace("Model_Pose2Sim_Body25b_scaled.osim", "Model_Pose2Sim_Body25b.osim")
    text = re.sub(r"<time_range>[^<]*</time_range>", "<time_range>0.1 0.25</time_range>", text)
    text = text.replace(
        "<results_directory>./</results_directory>", "<results_directory>results</results_directory>"
    )
    (d / "full.xml").write_text(text)
    (d / "notasks.xml").write_text(
        re.sub(r"<IKTaskSet>.*</IKTaskSet>", "", text, flags=re.S).replace(
            "Balancing_for_IK.mot", "notasks.mot"
        )
    )
    return d


def _storage(path):
    """(labels, rows) of an OpenSim .mot/.sto file, read independently of simjax."""
    head, body = open(path).read().split("endheader")
    lines = body.strip().split("\n")
    return head, lines[0].split("\t"), np.array([[float(x) for x in ln.split("\t")] for ln in lines[1:]])


def test_a_setup_without_tasks_runs_as_opensims_ik_tool(folder):
    osim = pytest.importorskip("opensim")
    setup = sj.io.read_ik_setup(folder / "notasks.xml")
    assert setup.marker_weights == {} and setup.time_range == (0.1, 0.25) and setup.report_errors
    model = sj.io.load_osim(str(folder / "Model_Pose2Sim_Body25b.osim"))
    markers = setup.make_markers(model)  # every model marker, weight 1 (it was refused)
    assert markers.get_num_markers() == len(model.markers) == 21
    assert {markers.get_marker_weight(i) for i in range(21)} == {1.0}

    res = setup.run(model, progress=False)
    assert set(res.files) == {"motion", "marker_errors"}
    assert res.files["motion"] == str(folder / "notasks.mot")
    assert res.files["marker_errors"] == str(folder / "results" / "_ik_marker_errors.sto")

    # OpenSim's tool on the same file, writing into another folder
    ref = folder / "opensim"
    ref.mkdir()
    text = (folder / "notasks.xml").read_text()
    text = text.replace(
        "<results_directory>results</results_directory>", f"<results_directory>{ref}</results_directory>"
    )
    text = text.replace("<output_motion_file>notasks.mot", f"<output_motion_file>{ref}/notasks.mot")
    for f in ("Model_Pose2Sim_Body25b.osim", "Balancing_for_IK.trc"):
        text = text.replace(f">{f}<", f">{folder / f}<")
    (ref / "setup.xml").write_text(text)
    osim.InverseKinematicsTool(str(ref / "setup.xml")).run()

    head, labels, ours = _storage(res.files["motion"])
    _, os_labels, theirs = _storage(ref / "notasks.mot")
    assert "inDegrees=yes" in head
    assert labels == os_labels and ours.shape == theirs.shape == (10, 63)  # OpenSim writes the range only
    np.testing.assert_allclose(ours[:, 0], theirs[:, 0], atol=1e-8)
    # the objective (all weights 1: the total squared marker error) no worse in any frame
    _, err_labels, our_err = _storage(res.files["marker_errors"])
    _, _, os_err = _storage(ref / "_ik_marker_errors.sto")
    assert err_labels == ["time", "total_squared_error", "marker_error_RMS", "marker_error_max"]
    assert np.all(our_err[:, 1] <= os_err[:, 1] * (1 + 1e-3)), (our_err[:, 1], os_err[:, 1])
    # and the same pose: angles within a few degrees (the subtalar joints are barely
    # determined by these keypoints: 3.5 degrees apart at 1e-4 of the objective)
    diff = np.abs(ours[:, 1:] - theirs[:, 1:])
    assert np.max(diff) < 5.0, labels[1 + int(np.argmax(diff.max(axis=0)))]


def test_setups_opensim_fits_with_every_marker(folder):
    """No applied marker task (tasks all ``apply=false``) is OpenSim's every-marker default
    too; a task set naming some markers fits those only."""
    model = sj.io.load_osim(str(folder / "Model_Pose2Sim_Body25b.osim"))
    text = (folder / "full.xml").read_text()
    (folder / "noapply.xml").write_text(text.replace("<apply>true</apply>", "<apply>false</apply>"))
    assert sj.io.read_ik_setup(folder / "noapply.xml").make_markers(model).get_num_markers() == 21
    some = re.sub(r'<IKMarkerTask name="(Nose|Head)">.*?</IKMarkerTask>', "", text, flags=re.S)
    (folder / "some.xml").write_text(some)
    assert sj.io.read_ik_setup(folder / "some.xml").make_markers(model).get_num_markers() == 19


def test_run_refuses_what_it_cannot_do_naming_the_fix(folder):
    model = sj.io.load_osim(str(folder / "Model_Pose2Sim_Body25b.osim"))
    text = (folder / "notasks.xml").read_text()
    (folder / "late.xml").write_text(
        text.replace("<time_range>0.1 0.25</time_range>", "<time_range>5 6</time_range>")
    )
    with pytest.raises(ModelFileError, match="no frame of Balancing_for_IK.trc"):
        sj.io.read_ik_setup(folder / "late.xml").run(model)
    (folder / "nomodel.xml").write_text(re.sub(r"<model_file>[^<]*</model_file>", "", text))
    with pytest.raises(ModelFileError, match="names no <model_file>; pass run"):
        sj.io.read_ik_setup(folder / "nomodel.xml").run()


@pytest.mark.parametrize("read", [sj.io.read_ik_setup, sj.io.read_scale_setup])
def test_tool_setups_are_parsed_without_entities(tmp_path, read):
    """Setup files are parsed as the model files are (no DTD, no entity expansion): an
    entity-expansion document is refused, not expanded."""
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
        "<OpenSimDocument><InverseKinematicsTool><accuracy>&lol2;</accuracy></InverseKinematicsTool>"
        "<ScaleTool/></OpenSimDocument>"
    )
    with pytest.raises(ModelFileError, match="without DTDs or entities"):
        read(bomb)
