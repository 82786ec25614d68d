"""Simulation: projection keeps loops closed, energy is conserved, jit/vmap/grad work."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import fourbar

import simjax as sj

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def loop():
    system, matter, ball = fourbar()
    s = system.realize_topology().with_q([1.2, -1.0, -1.0]).with_u([1.0, 0, 0])
    return system, matter, ball, system.project(s, tol=1e-10)


def test_closed_loop_stays_closed_for_10_s_and_conserves_energy(loop):
    system, matter, ball, s = loop
    E0 = float(system.calc_energy(system.realize(s, sj.Stage.VELOCITY)))
    tr = sj.simulate(system, s, 10.0, save_at=50, integrator="rk4", dt=2e-3)
    assert int(tr.num_steps) == 5000
    assert float(tr.max_position_error) < 1e-12
    states = jax.vmap(lambda st: system.realize(st, sj.Stage.VELOCITY))(tr.states)
    pe, ve = jax.vmap(system.calc_constraint_error_norms)(states)
    assert float(pe.max()) < 1e-12 and float(ve.max()) < 1e-12
    E = jax.vmap(system.calc_energy)(states)
    assert float(jnp.abs(E - E0).max()) < 1e-7 * max(1.0, abs(E0))
    # the motion is not trivial: the crank turns
    assert float(jnp.ptp(tr.q[:, 0])) > 1.0
    # adaptive Tsit5 at tight accuracy reaches the same state
    ta = sj.simulate(system, s, 10.0, integrator="tsit5", accuracy=1e-10)
    np.testing.assert_allclose(ta.q[-1], tr.q[-1], atol=1e-6)


def _count_primitive(jaxpr, name: str) -> int:
    """How many times primitive ``name`` occurs in ``jaxpr``, nested jaxprs included."""
    n = 0
    for e in jaxpr.eqns:
        n += e.primitive.name == name
        for v in e.params.values():
            for sub in v if isinstance(v, (tuple, list)) else [v]:
                if hasattr(sub, "jaxpr") and hasattr(sub, "consts"):
                    n += _count_primitive(sub.jaxpr, name)
                elif hasattr(sub, "eqns"):
                    n += _count_primitive(sub, name)
    return n


def test_rk4_traces_forward_dynamics_once_per_step(loop):
    """RK4's four stages are one loop over a single forward-dynamics evaluation, so its
    program holds the mass matrix's Cholesky factorisation as often as semi-explicit
    Euler's (one evaluation per step); written out, it held it four times and XLA compiled
    forward dynamics four times (``benchmarks/HISTORY.md``: rollouts compile in half the
    time)."""
    system, _, _, s = loop

    def chol(integrator):
        f = lambda st: sj.simulate(system, st, 0.01, integrator=integrator, dt=1e-3, t0=0.0).q
        return _count_primitive(jax.make_jaxpr(f)(s).jaxpr, "cholesky")

    assert chol("rk4") == chol("euler") >= 1


def test_integrators_agree_and_semi_explicit_euler_is_first_order(loop):
    system, matter, ball, s = loop
    ref = sj.simulate(system, s, 0.5, integrator="rk4", dt=1e-3).q[-1]
    e1 = jnp.abs(sj.simulate(system, s, 0.5, integrator="euler", dt=2e-3).q[-1] - ref).max()
    e2 = jnp.abs(sj.simulate(system, s, 0.5, integrator="euler", dt=1e-3).q[-1] - ref).max()
    assert 1.6 < float(e1 / e2) < 2.5  # first order
    k = sj.simulate(system, s, 0.5, integrator="kvaerno5", accuracy=1e-9).q[-1]
    np.testing.assert_allclose(k, ref, atol=1e-6)


def test_vmap_over_initial_states_and_grad_through_constrained_rollout(loop):
    system, matter, ball, s = loop

    def final_angle(q0):
        st = system.project_q(s.with_q(s.q.at[0].set(q0)), tol=1e-8)
        st = system.project_u(st, tol=1e-8)
        return sj.simulate(system, st, 0.3, integrator="rk4", dt=5e-3, t0=0.0).q[-1, 2]

    # one compiled program: a batch of values and gradients (FD points ride in the batch)
    h = 1e-5
    qs = jnp.array([1.0, 1.2, 1.4, 1.2 + h, 1.2 - h])
    vals, grads = jax.jit(jax.vmap(jax.value_and_grad(final_angle)))(qs)
    assert len(set(np.round(np.asarray(vals[:3]), 6))) == 3  # different starts, different ends
    fd = (vals[3] - vals[4]) / (2 * h)
    assert float(grads[1]) == pytest.approx(float(fd), rel=1e-5)


def test_time_stepper_matches_simulate_and_bad_input(loop):
    system, matter, ball, s = loop
    ts = sj.TimeStepper(system, integrator="rk4", dt=5e-3)
    st = ts.initialize(s)
    st = ts.step_to(st, 0.1)
    st = ts.step_to(st, 0.2)
    ref = sj.simulate(system, s, 0.2, save_at=[0.1, 0.2], integrator="rk4", dt=5e-3)
    np.testing.assert_allclose(st.q, ref.q[-1], atol=1e-13)
    assert float(st.t) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="unknown integrator"):
        sj.simulate(system, s, 1.0, integrator="rk45")
    with pytest.raises(ValueError, match="give dt"):
        sj.simulate(system, s, 1.0, integrator="rk4")
    with pytest.raises(ValueError, match="strictly increasing"):
        sj.simulate(system, s, 1.0, save_at=[0.5, 0.2], dt=1e-2)
    with pytest.raises(ValueError, match="after"):
        sj.simulate(system, s, 0.0, dt=1e-2)
    with pytest.raises(ValueError, match="t0="):
        jax.vmap(lambda st: sj.simulate(system, st, 1.0, dt=1e-2).q)(
            jax.tree.map(lambda x: jnp.stack([x, x]), s)
        )
