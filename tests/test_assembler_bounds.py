"""Bounded assembly: q's that start on a bound leave it when the goal prefers the
interior (the interior-point barrier), q's that belong on a bound end exactly there and
are reported (``sj.RESULTS.assembly_on_bounds``, ``info.on_bounds``, ``describe_bounds``),
settings are runtime data (no recompile), and time-warm-started tracking.

The arm: shoulder and elbow Pins about z, upper arm and forearm 0.3 m along x, elbow
range [0, 2.6] rad (no hyperextension), one marker at the wrist. Started straight
(elbow 0, on its bound) and pointing at a reachable target, the straight arm is a
stationary point (the wrist's error lies along the arm, the gradient with respect to the
elbow is zero): a projected Gauss-Newton/active-set method stops there with a 0.24 m
error; the exact answer bends the elbow to ``acos((d^2 - 2 L^2) / (2 L^2))``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj

jax.config.update("jax_enable_x64", True)

L = 0.3


def arm():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0.15, 0, 0], sj.Inertia(0.01, 0.04, 0.04))
    shoulder = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), mp, sj.Transform())
    elbow = sj.MobilizedBody.Pin(shoulder, sj.Transform(p=[L, 0, 0]), mp, sj.Transform())
    return system, shoulder, elbow


def make(target, station=(L, 0.0, 0.0)):
    system, shoulder, elbow = arm()
    asm = sj.Assembler(system)
    asm.restrict_q(elbow, 0, 0.0, 2.6)
    mk = sj.Markers()
    mk.add_marker("wrist", elbow, list(station))
    asm.adopt_assembly_goal(mk)
    mk.move_all_observations(np.array([target]))
    return system, asm, mk


def test_a_q_that_starts_on_its_bound_leaves_it():
    target = np.array([0.3, 0.2, 0.0])
    d = float(np.linalg.norm(target))
    system, asm, _ = make(target)
    straight = system.realize_topology().with_q([np.arctan2(target[1], target[0]), 0.0])
    asm.set_accuracy(1e-8)
    out, info = asm.assemble(straight)
    elbow_exact = np.arccos((d**2 - 2 * L**2) / (2 * L**2))
    assert bool(info.result == sj.RESULTS.successful) and bool(info.success)
    assert float(out.q[1]) == pytest.approx(elbow_exact, abs=1e-6)
    assert float(info.goal) < 1e-12 and not np.any(np.asarray(info.on_bounds))
    # Without the barrier the solver only stops short of the bounds: still a better
    # answer than the stationary straight arm (it starts 1% inside the range) ...
    asm.set_initial_barrier(0.0)
    out0, info0 = asm.assemble(straight)
    assert float(info0.goal) < 1e-12
    with pytest.raises(ValueError, match="finite weight >= 0"):
        asm.set_initial_barrier(-1.0)


def test_a_q_that_belongs_on_its_bound_is_put_there_and_reported():
    # The wrist marker 5 cm off the forearm's axis and a target out of reach: the longest
    # reach would hyperextend the elbow, so the answer is the straight arm, the elbow on
    # its lower bound with a multiplier pushing into it.
    target = np.array([0.8, 0.1, 0.0])
    system, asm, _ = make(target, station=(L, 0.05, 0.0))
    s = system.realize_topology().with_q([0.3, 1.0])
    asm.set_accuracy(1e-10)  # relative accuracy of the goal: q's to about its square root
    out, info = asm.assemble(s)
    assert bool(info.result == sj.RESULTS.assembly_on_bounds) and bool(info.success)
    assert float(out.q[1]) == 0.0  # exactly on the bound
    reach = np.hypot(2 * L, 0.05)
    assert float(out.q[0]) == pytest.approx(np.arctan2(0.1, 0.8) - np.arctan2(0.05, 2 * L), abs=1e-5)
    assert float(info.goal) == pytest.approx(0.5 * (np.linalg.norm(target) - reach) ** 2, rel=1e-8)
    assert np.asarray(info.on_bounds).tolist() == [0, -1]
    (desc,) = asm.describe_bounds(info)
    assert desc.endswith("q0 at lower 0")
    assert "bounds" in sj.RESULTS[info.result] and "bounds" in info.status_message()


def test_settings_are_data_and_track_uses_time():
    target = np.array([0.3, 0.2, 0.0])
    system, asm, mk = make(target)
    s0 = system.realize_topology().with_q([0.6, 0.0])
    T = 23
    t = np.linspace(0, 1, T)
    # a wrist path that bends and straightens the elbow
    ang = 0.4 + 0.6 * t
    rad = 0.45 + 0.1 * np.sin(2 * np.pi * t)
    frames = np.stack([rad * np.cos(ang), rad * np.sin(ang), 0 * t], axis=1)[:, None, :]
    asm.set_accuracy(1e-8)
    states, infos = asm.track(s0, frames)
    assert np.all(np.asarray(infos.result == sj.RESULTS.successful))
    el = np.arccos((rad**2 - 2 * L**2) / (2 * L**2))
    np.testing.assert_allclose(np.asarray(states.q[:, 1]), el, atol=1e-6)
    # warm starts: after each segment's first frame a few iterations per frame
    it = np.asarray(infos.iterations)
    assert np.median(it) <= 6, it
    # settings change without a new compile
    n_fns = len(asm._fns)
    asm.set_accuracy(1e-4)
    asm.set_max_iterations(50)
    asm.restrict_q(asm.get_multibody_system().get_matter_subsystem().get_mobilized_body(2), 0, 0.0, 2.5)
    asm.track(s0, frames)
    assert len(asm._fns) == n_fns and asm.get_num_initializations() == 1
    # one segment (fully sequential) and one frame per segment (all from s0) agree
    for n in (1, T):
        asm.set_track_batch_size(n)
        st_n, inf_n = asm.track(s0, frames)
        np.testing.assert_allclose(np.asarray(st_n.q[:, 1]), el, atol=1e-3)
    with pytest.raises(ValueError, match="no frames"):
        asm.track(s0, frames[:0])


def test_track_gradients_match_finite_differences():
    target = np.array([0.3, 0.2, 0.0])
    system, asm, mk = make(target)
    s0 = system.realize_topology().with_q([0.6, 0.3])
    asm.set_accuracy(1e-10)
    frames = jnp.asarray(np.array([[[0.3, 0.2, 0.0]], [[0.32, 0.21, 0.0]], [[0.33, 0.25, 0.0]]]))

    def loss(fr):
        st, _ = asm.track(s0, fr)
        return jnp.sum(jnp.sin(st.q))

    g = jax.grad(loss)(frames)
    h = 1e-6
    dfr = np.zeros(frames.shape)
    dfr[1, 0, 0] = 1.0
    fd = (loss(frames + h * dfr) - loss(frames - h * dfr)) / (2 * h)
    assert float(g[1, 0, 0]) == pytest.approx(float(fd), rel=1e-5, abs=1e-9)


def test_track_progress_bar_reports_frames_and_is_off_when_not_a_terminal(capsys, monkeypatch):
    """``track(..., progress=True)`` draws a tqdm bar on stderr that reaches every frame
    and says how many converged; by default (stderr not a terminal, as under pytest) and
    under tracing there is none."""
    system, asm, mk = make(np.array([0.3, 0.2, 0.0]))
    state = system.realize_topology().with_q([0.6, 0.0])
    t = np.linspace(0, 1, 9)
    frames = np.stack([0.5 * np.cos(t), 0.5 * np.sin(t), 0 * t], axis=1)[:, None, :]
    _, infos = asm.track(state, frames, progress=True)
    err = capsys.readouterr().err
    T = frames.shape[0]
    assert f"{T}/{T}" in err and "converged" in err and "IK track" in err
    asm.track(state, frames)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("SIMJAX_PROGRESS", "1")
    jax.jit(lambda s: asm.track(s, frames)[1].goal)(state)  # traced: never a bar
    assert capsys.readouterr().err == ""


def test_track_retry_leaves_a_local_minimum_held_by_a_bound():
    """One hinge, range [0, 4] rad, a marker on its link. Frame 0's target is at angle 0,
    frame 1's at pi + 0.1: warm-started from 0 the descent direction points into the lower
    bound, a local minimum the bound holds. The second start, 0.25 rad inside, is past the
    ridge and descends to the target."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0.15, 0, 0], sj.Inertia(0.01, 0.04, 0.04))
    hinge = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), mp, sj.Transform())
    asm = sj.Assembler(system)
    asm.restrict_q(hinge, 0, 0.0, 4.0)
    mk = sj.Markers()
    mk.add_marker("tip", hinge, [L, 0.0, 0.0])
    asm.adopt_assembly_goal(mk)
    asm.set_track_batch_size(1)  # one segment: frame 1 warm-started from frame 0
    s0 = system.realize_topology()
    target = np.pi + 0.1
    frames = np.array([[[L, 0, 0]], [[L * np.cos(target), L * np.sin(target), 0]]])
    asm.set_track_retry(None)
    _, once = asm.track(s0, frames)
    assert float(once.goal[1]) > 1e-3 and bool((once.result == sj.RESULTS.assembly_on_bounds)[1])
    asm.set_track_retry(0.25)
    states, infos = asm.track(s0, frames)
    assert float(infos.goal[1]) < 1e-9 and bool((infos.result == sj.RESULTS.successful)[1])
    assert float(states.q[1, 0]) == pytest.approx(target, abs=1e-4)
    with pytest.raises(ValueError, match="push must be in"):
        asm.set_track_retry(0.7)


@pytest.mark.parametrize("noise", [0.0, 1e-3])
def test_a_solved_fit_with_bounds_is_reported_converged_not_stalled(noise):
    """The README's synthetic IK (a pin with a bound and a ball, closed by a Ball constraint;
    markers where a simulation put them, exact or with 1 mm of noise): every frame's fit is
    solved to round-off (error 6e-17) and must say so. A rejected round-off step while the
    barrier could still fall used to end the solve as 'stalled' (``assembly_stalled``) at the segment
    starts, goal 7e-7 (4e-33 on exact data)."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    sj.Force.UniformGravity(sj.GeneralForceSubsystem(system), matter, [0, -9.81, 0])
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)))
    link1 = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    link2 = sj.MobilizedBody.Ball(link1, sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    sj.Constraint.Ball(matter.Ground(), [0, -1.9, 0.1], link2, [0, 0, 0])
    state = system.project(link1.set_q(system.realize_topology(), 0.3), tol=1e-10)
    traj = sj.simulate(system, state, 1.0, save_at=40, integrator="rk4", dt=1e-3)
    asm = sj.Assembler(system)
    asm.set_accuracy(1e-5)
    markers = sj.Markers()
    markers.add_marker("elbow", link1, [0, -0.9, 0], weight=1.0)
    markers.add_marker("wrist", link2, [0, -1.0, 0], weight=2.0)
    asm.adopt_assembly_goal(markers)
    asm.restrict_q(link1, 0, -1.0, 1.0)

    def where(q):
        s = system.realize(state.with_q(q), sj.Stage.POSITION)
        return jnp.stack(
            [
                link1.find_station_location_in_ground(s, [0, -0.9, 0]),
                link2.find_station_location_in_ground(s, [0, -1.0, 0]),
            ]
        )

    frames = jax.vmap(where)(traj.q) + noise * jax.random.normal(jax.random.key(0), (40, 2, 3))
    markers.move_all_observations(frames[0])
    _, info = asm.assemble(state)
    assert bool(info.result == sj.RESULTS.successful), info.status_message()
    _, infos = asm.track(state, frames)
    ok = np.asarray(infos.result == sj.RESULTS.successful)
    assert np.all(ok), [m for m, o in zip(infos.status_message(), ok) if not o]
    assert float(np.max(np.asarray(infos.error_norm))) < 1e-12
