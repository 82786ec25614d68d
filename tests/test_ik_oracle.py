"""Inverse kinematics against OpenSim's InverseKinematicsSolver (Simbody's Assembler).

The free-pelvis humanoid (26 q in Euler form), 42 markers at random stations: exact
synthetic marker data recover the true trajectory; with 1 mm noise and missing markers
simjax's batched ``track`` and OpenSim's IK (accuracy 1e-8, where it stops within ~1e-5
rad of the optimum, see PEERS.md) give the same joint angles; batched and sequential
tracking agree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import oracle_ik as oik
import oracle_models as om
import pytest

import simjax as sj

jax.config.update("jax_enable_x64", True)

pytest.importorskip("opensim")


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    spec = om.humanoid()
    markers = oik._random_markers(spec, rng)
    osm = oik.build_ik_model(spec, markers)
    T, nq = 8, spec.nq(True)
    q_base = rng.uniform(-0.5, 0.5, nq)
    q_base[3:6] = [0.3, 0.9, -0.2]
    tt = np.linspace(0, 0.5, T)[:, None]
    amp, phase = rng.uniform(0.05, 0.2, nq), rng.uniform(0, np.pi, nq)
    amp[:3], amp[3:6] = 0.3, 0.15
    q_true = q_base + amp * np.sin(2 * np.pi * tt + phase)
    exact = oik.marker_positions(spec, markers, q_true, osim_model=osm)
    system, matter, bodies = om.to_simjax(spec)
    asm = sj.Assembler(system)
    asm.set_accuracy(1e-8)
    mk = sj.Markers()
    for name, b, station in markers:
        mk.add_marker(name, bodies[b], station)
    asm.adopt_assembly_goal(mk)
    s = system.realize_topology()  # quaternion pelvis: the Assembler converts both ways
    to_euler = jax.jit(jax.vmap(lambda q: matter.set_use_euler_angles(s.with_q(q), True).q))
    start = s.with_q(oik.quat_q_from_euler(spec, q_true[0] + rng.normal(0, 0.05, nq)))
    return dict(
        spec=spec,
        markers=markers,
        osm=osm,
        q_true=q_true,
        exact=exact,
        rng=rng,
        asm=asm,
        mk=mk,
        s=s,
        start=start,
        to_euler=to_euler,
        matter=matter,
    )


def test_exact_markers_recover_the_trajectory(problem):
    p = problem
    asm, mk = p["asm"], p["mk"]
    mk.move_all_observations(p["exact"][0])
    first, info = asm.assemble(p["start"])
    assert bool(info.result == sj.RESULTS.successful) and first.nq == 27
    states, infos = asm.track(first, p["exact"])
    assert np.all(np.asarray(infos.result == sj.RESULTS.successful))
    q = np.asarray(p["to_euler"](states.q))
    assert np.abs(q - p["q_true"]).max() < 1e-6
    assert float(jnp.max(infos.goal)) < 1e-14


def test_noisy_gappy_markers_match_opensim_and_sequential_tracking(problem):
    p = problem
    asm, mk = p["asm"], p["mk"]
    frames = p["exact"] + p["rng"].normal(0, 0.001, p["exact"].shape)
    frames[3, [2, 17]] = np.nan  # two markers missing in one frame
    mk.move_all_observations(frames[0])
    first, _ = asm.assemble(p["start"])
    states, infos = asm.track(first, frames)
    assert np.all(np.asarray(infos.result == sj.RESULTS.successful))
    q = np.asarray(p["to_euler"](states.q))

    ref = oik.opensim_ik(p["spec"], p["markers"], frames, osim_model=p["osm"], accuracy=1e-8, q_init=q[0])
    assert np.abs(q - ref["q"]).max() < 5e-5
    # per-marker errors agree too (NaN for the missing ones)
    locs = np.asarray(jax.vmap(mk.find_current_marker_locations)(states))
    errs = np.linalg.norm(locs - frames, axis=-1)
    np.testing.assert_allclose(errs, ref["marker_errors"], atol=1e-6)
    assert np.isnan(errs[3, [2, 17]]).all()
    # the least-squares optimum fits no worse than the truth, and stays near it
    assert np.nanmean(errs**2) <= np.nanmean(np.linalg.norm(p["exact"] - frames, axis=-1) ** 2)
    assert np.median(np.abs(q - p["q_true"])) < 0.01

    # Simbody's sequential use: track(frame_time) warm-started from the previous frame
    asm.set_internal_state(first)
    seq = []
    for k in range(4):
        mk.move_all_observations(frames[k])
        info = asm.track(0.01 * k)
        assert bool(info.result == sj.RESULTS.successful)
        seq.append(np.asarray(asm.get_internal_state().q))
    assert float(asm.get_internal_state().t) == pytest.approx(0.03)
    np.testing.assert_allclose(np.array(seq), q[:4], atol=1e-5)
    upd = asm.update_from_internal_state(p["s"])
    np.testing.assert_allclose(np.asarray(p["to_euler"](upd.q[None]))[0], q[3], atol=1e-5)
