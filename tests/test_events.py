"""Events: a ball bouncing on a floor (triggered, velocity reversal), energy reporter,
termination, and a scheduled handler changing the seed's force-strength discrete variable."""

from __future__ import annotations

import jax
import jax.numpy as jnp
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


class EventLog(sj.Subsystem):
    """Discrete variables a handler writes each event's time and witness into, in the order
    the handlers run."""

    def __init__(self, system, n=256):
        self.n = n
        super().__init__(system, name="EventLog")

    def realize_topology(self):
        self.allocate_discrete_variable("times", sj.Stage.REPORT, np.full(self.n, np.nan))
        self.allocate_discrete_variable("which", sj.Stage.REPORT, np.full(self.n, -1.0))
        self.allocate_discrete_variable("count", sj.Stage.REPORT, 0.0)


def logger(which=0):
    def log(st):
        d = st.discrete["EventLog"]
        k = d["count"].astype(int)
        st = st.with_discrete("EventLog", "times", d["times"].at[k].set(st.t))
        st = st.with_discrete("EventLog", "which", d["which"].at[k].set(which))
        return st.with_discrete("EventLog", "count", d["count"] + 1)

    return log


def logged(tr):
    d = tr.final_state.discrete["EventLog"]
    c = int(d["count"])
    return np.asarray(d["times"])[:c], np.asarray(d["which"])[:c]


def logged_pendulum(n=256):
    from helpers import pendulum

    system, _, _, _ = pendulum(1)
    EventLog(system, n)
    return system, system.realize_topology().with_q([0.3])


def test_a_zero_on_a_step_boundary_is_one_crossing():
    """Zeros of sin(pi t / dt) fall exactly on the steps' boundaries, where round-off gives
    the witness either sign (1e-16), and evaluating it again at the next step's start could
    give the other one: 142 or 58 events for 100 crossings before. The value carried from
    the end of a step is the next step's "before" value, so each zero is one crossing (and
    a zero exactly 0 follows Simbody: arriving at it is the crossing, leaving it is not)."""
    system, s = logged_pendulum()
    dt = 1e-2
    wave = lambda st: jnp.sin(jnp.pi * st.t / dt)  # noqa: E731
    exact = lambda st: jnp.where(jnp.abs(st.t / dt - jnp.round(st.t / dt)) < 1e-9, 0.0, wave(st))  # noqa: E731
    # zeros at k dt, k = 1..100, all inside the run (the last step ends at 1.005)
    run = dict(save_at=[1.0, 1.0 + dt / 2], integrator="rk4", dt=dt)
    for direction, n in (("both", 100), ("rising", 50), ("falling", 50)):
        ev = sj.TriggeredEvent(wave, direction=direction)
        tr = sj.simulate(system, s, 1.0 + dt / 2, events=[ev], **run)
        assert int(tr.num_events) == n and bool(tr.result == sj.RESULTS.successful), direction
    # the same with a handler (each event located on the integrator's own sub-steps, the
    # rest of the step taken again from it): the times are the zeros
    tr = sj.simulate(system, s, 1.0 + dt / 2, events=[sj.TriggeredEvent(wave, logger())], **run)
    times, _ = logged(tr)
    assert int(tr.num_events) == len(times) == 100
    np.testing.assert_allclose(times, dt * np.arange(1, 101), rtol=0, atol=1e-12)
    # a witness exactly 0 on the boundaries: once each (its rate is wrong there, so it is
    # flagged as unresolved, not silently successful)
    with pytest.warns(UserWarning, match="changed faster"):
        tr = sj.simulate(system, s, 1.0 + dt / 2, events=[sj.TriggeredEvent(exact)], **run)
    assert int(tr.num_events) == 100
    # an adaptive integrator
    tr = sj.simulate(
        system, s, 1.0 + dt / 2, integrator="tsit5", max_step=dt, events=[ev], save_at=[1.0, 1.005]
    )
    assert int(tr.num_events) == 50


@pytest.mark.parametrize("integrator", ["rk4", "tsit5"])
def test_several_crossings_in_one_step_are_all_found_in_time_order(integrator):
    """Two witnesses of time, crossing 200 and 100 times in one second, twice and once in
    every fixed step (dt = 1e-2; none was found in a step before, and tsit5 found 8 of 200):
    every crossing is found at its time, and the handlers run in time order. A state
    witness crossed twice within one RK4 step is found twice, at the times a fine run
    locates."""
    system, s = logged_pendulum(400)
    dt = 1e-2
    c = np.cos(0.6 * np.pi)  # zeros at 0.3 dt and 0.7 dt of every step
    two = sj.TriggeredEvent(lambda st: jnp.cos(2 * jnp.pi * st.t / dt) - c, logger(0))
    one = sj.TriggeredEvent(lambda st: jnp.sin(2 * jnp.pi * st.t / dt), logger(1), direction="falling")
    tr = sj.simulate(system, s, 1.0, integrator=integrator, dt=dt, events=[two, one])
    times, which = logged(tr)
    assert int(tr.num_events) == len(times) == 300 and bool(tr.result == sj.RESULTS.successful)
    k = np.arange(100)
    expect_two = np.sort(np.concatenate([(k + 0.3) * dt, (k + 0.7) * dt]))
    expect_one = (k + 0.5) * dt  # sin(2 pi t / dt) falls through zero mid-step
    np.testing.assert_allclose(times[which == 0], expect_two, rtol=0, atol=1e-10)
    np.testing.assert_allclose(times[which == 1], expect_one, rtol=0, atol=1e-10)
    assert np.all(np.diff(times) > 0)  # the handlers ran in time order
    if integrator != "rk4":
        return
    # released from q = 0.3, the pendulum turns at its lowest angle near t = 2.7 s; a level
    # 1e-5 above it is crossed down and back up 43 ms apart, both within one step of 54.5 ms
    ref = sj.simulate(system, s, 3.0, save_at=3001, integrator="rk4", dt=1e-3)
    level = float(np.min(ref.q[:, 0])) + 1e-5

    def crossing(direction):
        ev = sj.TriggeredEvent(lambda st: st.q[0] - level, direction=direction, terminate=True)
        return float(sj.simulate(system, s, 3.0, integrator="rk4", dt=1e-4, events=[ev]).termination_time)

    fine = np.array([crossing("falling"), crossing("rising")])
    h = 2.7 / 49.5
    assert np.all(np.floor(fine / h) == 49)  # one step holds both
    ev = sj.TriggeredEvent(lambda st: st.q[0] - level, logger())
    times, _ = logged(sj.simulate(system, s, 3.0, integrator="rk4", dt=h, events=[ev]))
    np.testing.assert_allclose(times, fine, rtol=0, atol=1e-5)


def test_a_witness_faster_than_the_samples_is_flagged_not_silently_successful():
    """sin(3000 pi t + 0.3) crosses zero 30 times in one step of 1e-2 (0 found before, the
    run 'successful'). A fixed step cannot find them: the result says so (a warning naming
    the witness eagerly; traj.result and traj.events_unresolved under jit), and more
    samples per step find all 30 at their times. An adaptive integrator shortens its steps
    until the witness is resolved."""
    system, s = logged_pendulum()
    fast = lambda st: jnp.sin(3000 * jnp.pi * st.t + 0.3)  # noqa: E731
    expect = (np.arange(1, 31) * np.pi - 0.3) / (3000 * np.pi)
    with pytest.warns(
        UserWarning, match=r"TriggeredEvent #0 \(<lambda>\) changed faster.*dt, now 0.01.*event_samples"
    ):
        tr = sj.simulate(system, s, 1e-2, integrator="rk4", dt=1e-2, events=[sj.TriggeredEvent(fast)])
    assert bool(tr.result == sj.RESULTS.events_unresolved) and bool(tr.events_unresolved[0])
    assert int(tr.num_events) < 30 and "event_samples" in sj.RESULTS[tr.result]
    # under jit: no warning, the same result (not a failure: throw=True does not raise)
    run = jax.jit(
        lambda st: sj.simulate(
            system, st, 1e-2, integrator="rk4", dt=1e-2, events=[sj.TriggeredEvent(fast)], t0=0.0
        )
    )
    tr = run(s)
    assert bool(tr.result == sj.RESULTS.events_unresolved) and bool(tr.events_unresolved[0])
    # enough samples (4 per period) resolve it
    ev = sj.TriggeredEvent(fast, logger())
    tr = sj.simulate(system, s, 1e-2, integrator="rk4", dt=1e-2, events=[ev], event_samples=64)
    assert bool(tr.result == sj.RESULTS.successful) and not bool(tr.events_unresolved[0])
    np.testing.assert_allclose(logged(tr)[0], expect, rtol=0, atol=1e-12)
    for integrator in ("tsit5", "kvaerno5"):
        tr = sj.simulate(system, s, 1e-2, integrator=integrator, events=[ev])
        assert bool(tr.result == sj.RESULTS.successful), integrator
        np.testing.assert_allclose(logged(tr)[0], expect, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="event_samples"):
        sj.simulate(system, s, 1e-2, dt=1e-2, events=[ev], event_samples=0)


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
