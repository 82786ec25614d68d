"""``sj.RESULTS``: one result enumeration for assembly (``AssemblyInfo.result``), projection
(``project_q/project_u/project(..., return_result=True)``) and simulation
(``Trajectory.result``), and the ``throw=`` options that raise through ``equinox.error_if``,
also under ``jit``/``vmap``/``grad``.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import fourbar, pendulum

import simjax as sj

jax.config.update("jax_enable_x64", True)

R = sj.RESULTS
NAN = float("nan")


def test_the_enumeration():
    assert bool(R.successful == R.successful) and not bool(R.successful == R.simulation_nonfinite)
    # through jit, and selected with where
    pick = jax.jit(lambda x: R.where(x > 0, R.max_steps_reached, R.successful))
    assert bool(pick(1.0) == R.max_steps_reached) and bool(pick(-1.0) == R.successful)
    # every failure says what happened and what to change
    for name in (
        "assembly_infeasible",
        "assembly_no_data",
        "assembly_nonfinite",
        "projection_failed",
        "max_steps_reached",
        "step_size_too_small",
        "simulation_nonfinite",
        "gimbal_lock",
    ):
        msg = R[getattr(R, name)]
        assert "failed" in msg and re.search(r"raise|use|check|provide|start", msg, re.I), (name, msg)
    with pytest.raises(RuntimeError, match="Simulation failed: the state became non-finite"):
        R.simulation_nonfinite.error_if(jnp.ones(2), jnp.asarray(True))


# ----------------------------------------------------------------------------- assembly


def test_assembler_results():
    system, matter, ball = fourbar()
    crank, coupler = matter.get_mobilized_body(1), matter.get_mobilized_body(2)
    bad = system.realize_topology().with_q([2.5, 1.0, 2.0])
    s = bad.with_q([0.3, 0.5, 1.0])

    asm = sj.Assembler(system)
    out, info = asm.assemble(bad)
    assert bool(info.result == R.successful) and bool(info.status == R.successful)

    # feasible within a loose tolerance, but one iteration can't converge the goal: usable
    asm1 = sj.Assembler(system)
    asm1.set_error_tolerance(1.0)
    asm1.set_max_iterations(1)
    asm1.adopt_assembly_goal(sj.QValue(crank, 0, 0.4))
    _, info = asm1.assemble(out)  # no exception
    assert bool(info.result == R.assembly_max_iterations) and bool(info.feasible) and not bool(info.success)
    # one vocabulary: status is the same RESULTS item (it held integer codes before, which
    # LEGACY_STATUS_CODES maps; comparing an item with an integer raises)
    assert bool(info.status == R.assembly_max_iterations) and info.status_message() == R[info.result]
    assert sj.studies.assembler.LEGACY_STATUS_CODES[1] is R.assembly_max_iterations
    with pytest.raises(ValueError, match="enumerations of the same type"):
        _ = info.status == 1
    assert "set_max_iterations" in R[info.result]

    # infeasible: contradictory error conditions; a result from the (jitted) solve,
    # AssemblyFailed from assemble
    asm2 = sj.Assembler(system)
    asm2.adopt_assembly_error(sj.QValue(crank, 0, 0.7))
    asm2.adopt_assembly_error(sj.QValue(crank, 0, 0.9))
    _, info = asm2.solve(s)
    assert bool(info.result == R.assembly_infeasible)
    with pytest.raises(sj.AssemblyFailed, match=r"exceeds the tolerance 0\.0001.*make one a goal"):
        asm2.assemble(s)
    # out of iterations: the message says so and names the fix
    asm.set_max_iterations(1)
    with pytest.raises(sj.AssemblyFailed, match=r"maximum of 1 iterations: raise Assembler\.set_max_it"):
        asm.assemble(bad)

    # non-finite start
    nan_start = s.with_q([NAN, 0.5, 1.0])
    _, info = asm.solve(nan_start)
    assert bool(info.result == R.assembly_nonfinite)
    with pytest.raises(sj.AssemblyFailed, match=r"non-finite value \(NaN/inf\).*check the initial q's"):
        asm.assemble(nan_start)

    # no data (every marker missing), batched along the frames
    asm3 = sj.Assembler(system)
    mk = sj.Markers()
    mk.add_marker("a", crank, [1, 0, 0])
    mk.add_marker("b", coupler, [1, 0, 0])
    asm3.adopt_assembly_goal(mk)
    frames = np.stack([np.full((2, 3), np.nan), [[0.9, 0.3, 0], [2.5, 0.6, 0]]])
    _, infos = asm3.track(s, frames)
    assert np.asarray(infos.result == R.assembly_no_data).tolist() == [True, False]
    assert np.asarray(infos.result == R.successful).tolist() == [False, True]
    assert infos.status_message() == [R[R.assembly_no_data], R[R.successful]]
    assert np.asarray(infos.feasible).tolist() == [False, True]
    mk.move_all_observations(np.full((2, 3), np.nan))
    with pytest.raises(sj.AssemblyFailed, match="nothing to fit: every observation is missing"):
        asm3.assemble(s)


# ----------------------------------------------------------------------------- projection


def test_projection_throw_and_result():
    system, matter, ball = fourbar()
    s = system.realize_topology().with_q([1.2, -1.0, -1.0]).with_u([1.0, 0, 0])
    far = ball.set_point_on_body1(s, [10.0, 0, 0])  # unreachable

    # eagerly: the ValueError naming the worst constraint and the fix
    with pytest.raises(
        ValueError, match=r"RMS position constraint error is \S+ > tolerance 1e-06; worst is .*Ball"
    ):
        system.project_q(far, tol=1e-6)
    # under jit: through equinox.error_if, naming the error's size, the tolerance and the fix
    with pytest.raises(
        RuntimeError,
        match=r"projection failed \(project_q\): the RMS position constraint error is between 1e0 and 1e1 "
        r"> tolerance 1e-06\. .*assemble it with sj\.Assembler\), raise `iterations`, or loosen `tol`",
    ):
        jax.jit(lambda st: system.project_q(st, tol=1e-6).q)(far)
    with pytest.raises(RuntimeError, match=r"project_u\): the RMS velocity constraint error is non-finite"):
        jax.jit(lambda st: system.project_u(st).u)(s.with_u([NAN, 0.0, 0.0]))

    # throw=False never raises; return_result tells
    project = jax.jit(lambda st: system.project(st, tol=1e-6, throw=False, return_result=True))
    _, res = project(far)
    assert bool(res == R.projection_failed)
    out, res = project(s)
    assert bool(res == R.successful)
    pe, ve = system.calc_constraint_error_norms(system.realize(out, sj.Stage.VELOCITY))
    assert float(pe) < 1e-6 and float(ve) < 1e-6
    far_out, res = system.project_q(far, tol=1e-6, throw=False, return_result=True)  # eagerly
    assert isinstance(far_out, sj.State) and bool(res == R.projection_failed)

    # batched under vmap: one iteration is enough from an assembled start only
    qs = jnp.stack([out.q, s.q])
    one_step = lambda q, **kw: system.project_q(s.with_q(q), tol=1e-6, iterations=1, **kw)
    res = jax.jit(jax.vmap(lambda q: one_step(q, throw=False, return_result=True)[1]))(qs)
    assert np.asarray(res == R.projection_failed).tolist() == [False, True]
    with pytest.raises(RuntimeError, match=r"projection failed \(project_q\)"):
        jax.jit(jax.vmap(lambda q: one_step(q).q))(qs)  # throw=True: any member fails -> raise

    # (gradients through the traced check: test_constraints.py's jax.grad of project_q)


# ----------------------------------------------------------------------------- simulation


def stiff_pendulum():
    """A pendulum with a 1e9 N m/rad spring: RK4 at dt = 0.01 is far outside its stability
    region and blows up to inf/NaN."""
    system, matter, forces, mobods = pendulum(1)
    sj.Force.MobilityLinearSpring(forces, mobods[1], 0, 1e9, 0.0)
    return system, system.realize_topology().with_q([0.3])


def test_simulate_nonfinite_fixed_step():
    system, s = stiff_pendulum()
    tr = sj.simulate(system, s, 1.0, dt=0.01, save_at=10, throw=False)
    assert bool(tr.result == R.simulation_nonfinite) and not bool(tr.terminated)
    t_fail = float(tr.termination_time)
    assert 0.0 < t_fail < 0.5
    assert np.all(np.isnan(np.asarray(tr.q)[np.asarray(tr.t) > t_fail]))  # outputs not reached
    assert float(tr.final_state.t) == t_fail and np.all(np.isfinite(tr.final_state.q))  # last good

    # throw=True (default): raises, naming the time reached and the fix
    with pytest.raises(
        RuntimeError,
        match=rf"simulate failed at t = {t_fail:.6g} \(of t1=1\): the state became non-finite "
        r"\(NaN/inf\)\. Fix: use a smaller step than dt=0\.01",
    ):
        sj.simulate(system, s, 1.0, dt=0.01, save_at=10)
    # ... also under jit (the time to 1/100 of the run)
    with pytest.raises(RuntimeError, match=r"simulate failed at t between \S+ and \S+ \(of t1=1\)") as exc:
        jax.jit(lambda st: sj.simulate(system, st, 1.0, dt=0.01, save_at=10, t0=0.0).q)(s)
    lo, hi = map(float, re.search(r"at t between (\S+) and (\S+) ", str(exc.value)).groups())
    assert lo <= t_fail <= hi and hi - lo == pytest.approx(0.01)
    assert "state became non-finite" in str(exc.value)
    # ... and from TimeStepper.step_to
    with pytest.raises(RuntimeError, match="simulate failed at t = .*non-finite"):
        sj.TimeStepper(system, dt=0.01).step_to(s, 1.0)


def test_simulate_adaptive_failures():
    system, s = stiff_pendulum()
    opts = dict(integrator="tsit5", max_steps=20)
    # too few steps for the stiff spring
    tr = sj.simulate(system, s, 1.0, throw=False, **opts)
    assert bool(tr.result == R.max_steps_reached) and 0.0 < float(tr.termination_time) < 1.0
    assert np.isnan(float(tr.q[-1, 0]))
    with pytest.raises(
        RuntimeError,
        match=r"simulate failed at t = \S+ \(of t1=1\): the 'tsit5' integrator used up max_steps=20 step "
        r"attempts in one output interval\. Fix: raise max_steps",
    ):
        sj.simulate(system, s, 1.0, **opts)
    # NaN initial velocity: stops at once instead of shrinking the step max_steps times
    tr = sj.simulate(system, s.with_u([NAN]), 1.0, throw=False, **opts)
    assert bool(tr.result == R.simulation_nonfinite) and float(tr.termination_time) == 0.0
    assert int(tr.num_steps) == 0
    with pytest.raises(RuntimeError, match=r"simulate failed at t = 0 .*non-finite.*initial q, u and z"):
        sj.simulate(system, s.with_u([NAN]), 1.0, **opts)


class _Chatter:
    """A huge torque switched on past q = 0.35: started there moving up, every step crosses
    the switch and no step size makes the error estimate acceptable."""

    def calc_force(self, ctx):
        return None, jnp.where(ctx.state.q[0] > 0.35, -1e9, 0.0)[None]


def test_simulate_step_size_too_small():
    system, matter, forces, mobods = pendulum(1)
    sj.Force.Custom(forces, _Chatter())
    s = system.realize_topology().with_q([0.35]).with_u([1.0])
    tr = sj.simulate(system, s, 1.0, integrator="tsit5", accuracy=1e-10, throw=False)
    assert bool(tr.result == R.step_size_too_small)
    with pytest.raises(
        RuntimeError, match=r"simulate failed at t = 0 .*step size shrank to the time resolution.*kvaerno5"
    ):
        sj.simulate(system, s, 1.0, integrator="tsit5", accuracy=1e-10)


def test_simulate_success_event_vmap_and_grad():
    system, matter, forces, mobods = pendulum(1)
    s = system.realize_topology().with_q([0.3])
    tr = sj.simulate(system, s, 0.5, dt=0.01)
    assert bool(tr.result == R.successful) and float(tr.termination_time) == 0.5
    assert float(tr.final_state.t) == 0.5 and np.all(np.isfinite(tr.q))

    # a terminating event is not a failure: no exception, result event_occurred
    stop = sj.TriggeredEvent(lambda st: st.q[0] - 0.28, direction="falling", terminate=True)  # at ~0.9 s
    tr = sj.simulate(system, s, 2.0, dt=0.01, events=[stop])
    assert bool(tr.terminated) and bool(tr.result == R.event_occurred)
    assert 0.0 < float(tr.termination_time) < 2.0 and np.all(np.isfinite(tr.q))

    # batched: a result per member with throw=False; throw=True raises if any member failed
    u0 = jnp.array([[0.0], [NAN]])
    run = lambda u, throw: sj.simulate(system, s.with_u(u), 0.5, dt=0.01, t0=0.0, throw=throw)
    res = jax.jit(jax.vmap(lambda u: run(u, False).result))(u0)
    assert np.asarray(res == R.successful).tolist() == [True, False]
    assert np.asarray(res == R.simulation_nonfinite).tolist() == [False, True]
    with pytest.raises(RuntimeError, match=r"simulate failed at t between 0 and 0\.005 \(of t1=0\.5\)"):
        jax.jit(jax.vmap(lambda u: run(u, True).q))(u0)

    # gradients flow through the check (throw=True)
    def final_angle(q0):
        return sj.simulate(system, s.with_q(jnp.reshape(q0, (1,))), 0.5, dt=0.01, t0=0.0).q[-1, 0]

    g = jax.grad(final_angle)(0.3)
    h = 1e-6
    fd = (final_angle(0.3 + h) - final_angle(0.3 - h)) / (2 * h)
    assert float(g) == pytest.approx(float(fd), rel=1e-5)
