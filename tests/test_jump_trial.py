"""The countermovement jump of notebook 09 (a real Vicon trial with a force plate, from the
``biomdp`` 0.11.2 wheel; the model gait14dof22musc, an OpenSim 3.x file with 22 Thelen
muscles, with the trial's markers, the left leg coupled to the right and reserve actuators;
see ``notebooks/jump/prepare.py``): the steps of OpenSim's chain that the notebook does not
check itself, against OpenSim 4.6 on the same files.

* Scaling a 3.x model with muscles: the model simjax's ``scale_osim`` writes and the one
  OpenSim's ScaleTool writes (its ModelScaler step) are read back by OpenSim and compared
  at random poses: body poses, mass matrix, marker and path-point positions, path lengths,
  and each muscle's optimal fibre and tendon slack lengths (OpenSim's ``postScale``).
* Static optimization of a model whose coordinates are coupled: the coupled, locked and
  independent coordinates are told apart.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj
from simjax.io._static_optimization import dependent_speeds

jax.config.update("jax_enable_x64", True)

osim = pytest.importorskip("opensim")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "notebooks" / "jump"))
import prepare  # noqa: E402


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    """The trial's files, and OpenSim's ScaleTool run on them in a copy (``opensim/``)."""
    d = prepare.prepare(tmp_path_factory.mktemp("jump"))
    o = d / "opensim"
    o.mkdir()
    for f in d.iterdir():
        if f.is_file():
            shutil.copy(f, o / f.name)
    osim.ScaleTool(str(o / "Setup_Scale.xml")).run()
    return d


COUPLED_R = {f"{c}_r" for c in prepare.COUPLED}


def _opensim_numbers(path, poses):
    """What OpenSim computes from a model file at the given coordinate values (by name)."""
    m = osim.Model(str(path))
    s = m.initSystem()
    cs = m.getCoordinateSet()
    out = {"mass": m.getTotalMass(s)}
    out["names"] = tuple(
        [x.getName() for x in xs] for xs in (m.getBodySet(), m.getMarkerSet(), m.getMuscles())
    )
    out["muscles"] = np.array(
        [
            [mu.getOptimalFiberLength(), mu.getTendonSlackLength(), mu.getMaxIsometricForce()]
            for mu in m.getMuscles()
        ]
    )
    rows = []
    for pose in poses:
        for name, v in pose.items():  # the couplers hold exactly: no assembly
            for side in (name, name.replace("_r", "_l")) if name in COUPLED_R else (name,):
                cs.get(side).setValue(s, v, False)
        m.realizePosition(s)
        bodies = np.concatenate(
            [
                np.concatenate(
                    [
                        b.getPositionInGround(s).to_numpy(),
                        np.array(
                            [[b.getTransformInGround(s).R().get(i, j) for j in range(3)] for i in range(3)]
                        ).ravel(),
                    ]
                )
                for b in m.getBodySet()
            ]
        )
        markers = np.concatenate([mk.getLocationInGround(s).to_numpy() for mk in m.getMarkerSet()])
        lengths = np.array([mu.getLength(s) for mu in m.getMuscles()])
        M = osim.Matrix()
        m.getMatterSubsystem().calcM(s, M)
        rows.append((bodies, markers, lengths, M.to_numpy()))
    for k, key in enumerate(("bodies", "markers", "lengths", "M")):
        out[key] = np.array([r[k] for r in rows])
    return out


def _simjax_numbers(model, poses, names):
    """The same from simjax's own reading of a model (``names``: OpenSim's bodies, markers
    and muscles, in its order)."""
    system = model.system
    bodies, markers, muscles = names

    @jax.jit
    def one(state):
        st = system.realize(state, sj.Stage.POSITION)
        X = [model.bodies[b].get_body_transform(st) for b in bodies]
        return (
            jnp.concatenate([jnp.concatenate([x.p, x.R.ravel()]) for x in X]),
            jnp.concatenate([model.markers[m].find_location_in_ground(st) for m in markers]),
            jnp.stack([model.paths[m].get_length(st) for m in muscles]),
        )

    rows = []
    for pose in poses:
        values = dict(pose)
        values |= {k.replace("_r", "_l"): v for k, v in pose.items() if k in COUPLED_R}
        rows.append(one(model.set_coordinate_values(model.state, values)))
    return {
        k: np.array([np.asarray(r[i]) for r in rows]) for i, k in enumerate(("bodies", "markers", "lengths"))
    }


@pytest.mark.oracle
def test_scaling_a_3x_model_with_muscles_equals_opensims_scale_tool(trial, tmp_path):
    """OpenSim's ModelScaler output read by OpenSim, and simjax's scaled model read by
    simjax, at 8 random poses: body poses, marker positions and muscle path lengths agree
    to 1e-12 m, each muscle's optimal fibre and tendon slack lengths to 1e-12 relative
    (OpenSim's postScale: the lengths times the path's change of length at the default
    pose). simjax writes the scaled model in its source's 3.x layout; OpenSim reads it back
    with the same muscles and masses, mass matrices to 1e-6 of the largest entry and poses
    to 1e-6 m: OpenSim's conversion of a 3.x file keeps 6 significant digits of each joint
    location and inertia (measured 4e-7 m)."""
    setup = sj.io.read_scale_setup(trial / "Setup_Scale.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the model's left-out parts
        model = sj.io.load_osim(trial / "jump_model.osim")
        factors = setup.compute_scale_factors(model)
        ours = tmp_path / "scaled.osim"
        scaled = sj.io.scale_osim(
            model, factors, mass=setup.mass, preserve_mass_distribution=True, output=ours
        )
    rng = np.random.default_rng(0)
    ranges = {"hip_flexion_r": (-0.3, 1.5), "hip_adduction_r": (-0.3, 0.2), "knee_angle_r": (-1.8, 0.0)}
    ranges |= {"ankle_angle_r": (-0.5, 0.4), "pelvis_tilt": (-0.3, 0.3), "pelvis_list": (-0.2, 0.2)}
    poses = [{k: rng.uniform(*r) for k, r in ranges.items()} for _ in range(8)]
    ref = _opensim_numbers(trial / "opensim" / "jump_scaled_only.osim", poses)
    got = _simjax_numbers(scaled, poses, ref["names"])
    for key in ("bodies", "markers", "lengths"):
        err = np.abs(got[key] - ref[key]).max()
        print(f"simjax vs OpenSim, {key}: {err:.1e}")
        assert err < 1e-12, key
    back = _opensim_numbers(ours, poses)  # simjax's file, read by OpenSim
    assert abs(back["mass"] - ref["mass"]) < 1e-10
    np.testing.assert_allclose(back["muscles"], ref["muscles"], rtol=1e-12)
    generic = _opensim_numbers(trial / "jump_model.osim", [])["muscles"]
    assert np.abs(ref["muscles"][:, :2] / generic[:, :2] - 1).max() > 0.03  # lengths were scaled
    for key in ("bodies", "markers", "lengths"):
        assert np.abs(back[key] - ref[key]).max() < 1e-6, key
    np.testing.assert_allclose(back["M"], ref["M"], rtol=0, atol=1e-6 * np.abs(ref["M"]).max())


def test_static_optimization_tells_coupled_and_locked_coordinates_apart(trial):
    """The left leg's four coupled coordinates (each coupler's dependent one) and the three
    locked ones are the constrained speeds, not the pelvis's (the coupler's own mobilizer
    numbering was taken for the body's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sj.io.load_osim(trial / "jump_model.osim")
    state = model.matter.set_use_euler_angles(model.default_state, True)
    got = {n for n, c in model.coordinates.items() if c.u_index(state) in dependent_speeds(model, state)}
    assert got == {
        "hip_flexion_l",
        "hip_adduction_l",
        "knee_angle_l",
        "ankle_angle_l",
        "hip_rotation_r",
        "hip_rotation_l",
        "lumbar_extension",
    }
