"""Events: a ball bouncing on a floor (triggered, velocity reversal), energy reporter,
termination, and a scheduled handler changing the seed's force-strength discrete variable."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from test_subsystems import Repulsion, _start, three_bodies

import simjax as sj

jax.config.update("jax_enable_x64", True)

G = 9.81


def ball_system():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -G, 0])
    up = sj.Transform(sj.Rotation.about_z(np.pi / 2))  # the slider's x axis points up
    ball = sj.MobilizedBody.Slider(
        matter.Ground(), up, sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)), up
    )
    return system, ball


def height(ball):
    return lambda st: ball.get_body_origin_location(st)[1]


def test_bouncing_ball_with_energy_reporter():
    system, ball = ball_system()
    s = ball.set_q(system.realize_topology(), 1.0)
    bounce = sj.TriggeredEvent(height(ball), lambda st: st.with_u(-0.9 * st.u), direction="falling")
    tr = sj.simulate(
        system,
        s,
        3.0,
        save_at=300,
        integrator="rk4",
        dt=1e-2,
        events=[bounce],
        reporters={"E": system.calc_energy},
    )
    # impacts at t1 = sqrt(2h/g), then flights of 2 v_k / g with v_k = 0.9^k v0
    v0 = np.sqrt(2 * G)
    t_hits = np.sqrt(2 / G) + np.cumsum([0] + [2 * 0.9**k * v0 / G for k in range(1, 5)])
    assert int(tr.num_events) == int(np.sum(t_hits < 3.0)) == 4
    # energy drops by 0.81 at each bounce and is conserved in flight (RK4 is exact here)
    E = np.asarray(tr.reports["E"])
    t = np.asarray(tr.t)
    k = np.searchsorted(t_hits, t)  # bounces before each output time
    np.testing.assert_allclose(E, G * 1.0 * 0.81**k, rtol=1e-9)
    assert float(tr.q.min()) > -1e-9


def test_terminating_event_and_adaptive_integrator():
    system, ball = ball_system()
    s = ball.set_q(system.realize_topology(), 1.0)
    stop = sj.TriggeredEvent(height(ball), direction="falling", terminate=True)
    for integ, kw in (("rk4", dict(dt=1e-2)), ("tsit5", dict(accuracy=1e-9))):
        tr = sj.simulate(system, s, 2.0, save_at=20, integrator=integ, events=[stop], **kw)
        assert bool(tr.terminated)
        assert float(tr.termination_time) == pytest.approx(np.sqrt(2 / G), abs=1e-9)
        # later outputs repeat the state at termination (height 0, falling at sqrt(2 g h))
        assert float(tr.q[-1, 0]) == pytest.approx(0.0, abs=1e-8)
        assert float(tr.u[-1, 0]) == pytest.approx(-np.sqrt(2 * G), rel=1e-8)


def test_scheduled_event_changes_a_discrete_variable():
    system, matter, forces, bodies = three_bodies()
    rep = Repulsion(system, default_strength=1.0)
    s = _start(system)
    quadruple = sj.ScheduledEvent(
        [0.2], lambda st: rep.set_force_strength(st, 4.0 * rep.get_force_strength(st))
    )
    tr = sj.simulate(
        system,
        s,
        0.4,
        save_at=4,
        integrator="rk4",
        dt=1e-3,
        events=[quadruple],
        reporters={"E": system.calc_energy},
    )
    k = np.asarray(tr.discrete["Repulsion"]["strength"])
    # an output at an event's time shows the State after its handler (as Simbody reports)
    np.testing.assert_allclose(k, [1.0, 4.0, 4.0, 4.0])
    assert int(tr.num_events) == 1
    # energy is conserved between events; the handler changes it (the potential scales)
    E = np.asarray(tr.reports["E"])
    assert abs(E[2] - E[1]) < 1e-8 and abs(E[3] - E[2]) < 1e-8 and abs(E[1] - E[0]) > 1e-3
    # equals two runs with the strength changed by hand in between
    a = sj.simulate(system, s, 0.2, integrator="rk4", dt=1e-3).final_state
    b = sj.simulate(system, rep.set_force_strength(a, 4.0), 0.4, integrator="rk4", dt=1e-3).final_state
    np.testing.assert_allclose(tr.final_state.q, b.q, atol=1e-12)


def test_event_input_errors():
    system, ball = ball_system()
    s = system.realize_topology()
    with pytest.raises(ValueError, match="direction"):
        sj.TriggeredEvent(height(ball), direction="down")
    with pytest.raises(TypeError, match="events must be"):
        sj.simulate(system, s, 1.0, dt=0.1, events=[lambda st: 0.0])
    with pytest.raises(TypeError, match="reporter"):
        sj.simulate(system, s, 1.0, dt=0.1, reporters={"E": 3.0})
    with pytest.raises(TypeError, match="return the"):
        ev = sj.ScheduledEvent([0.5], lambda st: st.u)
        sj.simulate(system, s, 1.0, dt=0.1, events=[ev])


def test_scheduled_events_are_never_dropped_silently():
    system, matter, forces, bodies = three_bodies()
    rep = Repulsion(system, default_strength=1.0)
    s = _start(system)
    times3 = sj.ScheduledEvent([0.1], lambda st: rep.set_force_strength(st, 3.0 * rep.get_force_strength(st)))
    plus1 = sj.ScheduledEvent([0.1], lambda st: rep.set_force_strength(st, rep.get_force_strength(st) + 1.0))
    # two handlers due at one time both run, in the order given: (1 * 3) + 1, not 1 + 1
    tr = sj.simulate(system, s, 0.2, integrator="rk4", dt=1e-2, events=[times3, plus1])
    assert float(tr.final_state.discrete["Repulsion"]["strength"]) == 4.0
    assert int(tr.num_events) == 2
    tr = sj.simulate(system, s, 0.2, integrator="rk4", dt=1e-2, events=[plus1, times3])
    assert float(tr.final_state.discrete["Repulsion"]["strength"]) == 6.0
    # times outside (t0, t1] are named; the run is the one without them
    early_late = sj.ScheduledEvent([0.0, 0.5], lambda st: rep.set_force_strength(st, 9.0))
    with pytest.warns(UserWarning, match=r"scheduled event times \[0.0, 0.5\] lie outside .*\(0, 0.2\]"):
        tr = sj.simulate(system, s, 0.2, integrator="rk4", dt=1e-2, events=[early_late])
    assert float(tr.final_state.discrete["Repulsion"]["strength"]) == 1.0 and int(tr.num_events) == 0


@pytest.mark.parametrize("integrator", ["dopri5", "kvaerno5"])
def test_two_crossings_in_one_adaptive_step_are_both_found(integrator):
    """Zero at t = 0.51 and 0.52: a smooth pendulum lets the integrator step over both
    (same sign at both ends of a step; none was found before, issue 16). The step's dense
    output is sampled inside the step, the first crossing is located and the step ends
    there; the next step finds the second. A witness of the state (the angle crossing a
    level twice within one step) too, with each event time located to the integrator's
    accuracy; max_step still works."""
    from helpers import pendulum

    system, _, _, mobods = pendulum(1)
    state = system.realize_topology()
    ev = sj.TriggeredEvent(lambda st: (st.t - 0.51) * (st.t - 0.52), direction="both")
    tr = sj.simulate(system, state, 1.0, integrator=integrator, dt=0.1, events=[ev])
    assert int(tr.num_events) == 2
    tr = sj.simulate(system, state, 1.0, integrator=integrator, dt=0.1, events=[ev], max_step=5e-3)
    assert int(tr.num_events) == 2
    # a state witness crossed twice in one step: released at rest from q = 0.3, this
    # pendulum turns at its lowest angle near t = 2.7 s; a level 1e-6 above it is crossed
    # down and back up 11 ms apart. Both are found, each at the time a fine fixed-step
    # run (1e-4 s steps) locates
    s = state.with_q([0.3])
    ref = sj.simulate(system, s, 3.0, save_at=3001, integrator="rk4", dt=1e-3)
    level = float(np.min(ref.q[:, 0])) + 1e-6

    def crossing(direction, integ, **kw):
        ev = sj.TriggeredEvent(lambda st: st.q[0] - level, direction=direction, terminate=True)
        return float(sj.simulate(system, s, 3.0, integrator=integ, events=[ev], **kw).termination_time)

    t_down, t_up = crossing("falling", "rk4", dt=1e-4), crossing("rising", "rk4", dt=1e-4)
    assert 1e-3 < t_up - t_down < 0.05
    assert abs(crossing("falling", integrator, dt=0.1, accuracy=1e-10) - t_down) < 1e-5
    assert abs(crossing("rising", integrator, dt=0.1, accuracy=1e-10) - t_up) < 1e-5
    both = sj.TriggeredEvent(lambda st: st.q[0] - level, direction="both")
    tr = sj.simulate(system, s, 3.0, integrator=integrator, dt=0.1, accuracy=1e-8, events=[both])
    assert int(tr.num_events) == 2


def test_integrator_tolerances_are_validated():
    from helpers import pendulum

    system, _, _, _ = pendulum(1)
    state = system.realize_topology()
    for kw, msg in (
        ({"accuracy": 0.0}, "accuracy must be finite and > 0"),
        ({"accuracy": float("nan")}, "accuracy must be finite and > 0"),
        ({"atol": -1.0}, "atol must be finite and > 0"),
        ({"max_step": 0.0}, "max_step must be finite and > 0"),
        ({"max_steps": 0}, "max_steps must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=msg):
            sj.simulate(system, state, 1.0, integrator="dopri5", **kw)
