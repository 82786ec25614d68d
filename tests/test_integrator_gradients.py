"""Differentiation through every integrator, both modes, to second order (issue 16).

In a file of its own so that ``--dist loadfile`` runs it beside ``test_simulate.py``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import pendulum
from jax.test_util import check_grads

import simjax as sj

jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("integrator", ["tsit5", "dopri5", "kvaerno3", "kvaerno5", "rk4", "euler"])
def test_every_integrator_differentiates_in_both_modes_to_second_order(integrator):
    """Issue 16: ``jax.grad`` through ``kvaerno5`` crashed inside lineax (a NaN cotangent
    through the step-size controller's error norm at zero error) and ``jacfwd`` through
    the adaptive integrators was refused with JAX's bare custom_vjp message. Now: reverse
    mode (the default ``adjoint``) and forward mode (``adjoint='forward'``; the fixed-step
    integrators need no option) give the same derivative, which matches central
    differences; ``check_grads`` to second order (forward-over-forward for the adaptive
    ones but kvaerno3, whose implicit steps go through the same code as kvaerno5's, every
    mode for the fixed-step ones); forward mode with the default adjoint names the option."""
    system, *_ = pendulum(2)
    s = system.realize_topology().with_u([0.5, -0.3])
    adaptive = integrator not in ("rk4", "euler")
    kw = {"accuracy": 1e-11} if adaptive else {"dt": 2e-3}

    def f(q0, adjoint="reverse"):
        return sj.simulate(system, s.with_q(q0), 0.4, integrator=integrator, adjoint=adjoint, **kw).q[-1]

    q0 = jnp.array([0.3, -0.2])
    J_rev = jax.jacrev(f)(q0)
    J_fwd = jax.jacfwd(f)(q0, "forward")
    np.testing.assert_allclose(np.asarray(J_fwd), np.asarray(J_rev), rtol=1e-12, atol=1e-12)
    h = 1e-6
    J_fd = jnp.stack([(f(q0 + h * e) - f(q0 - h * e)) / (2 * h) for e in jnp.eye(2)], axis=1)
    np.testing.assert_allclose(np.asarray(J_rev), np.asarray(J_fd), atol=1e-6 if adaptive else 1e-8)
    if adaptive:
        if integrator != "kvaerno3":  # kvaerno5 takes the same implicit path, at 1/2 the CI time
            check_grads(
                lambda q: f(q, "forward"), (q0,), order=2, modes=["fwd"], eps=1e-4, atol=1e-4, rtol=1e-4
            )
        with pytest.raises(TypeError, match="adjoint='forward'"):
            jax.jacfwd(f)(q0)
    else:
        check_grads(f, (q0,), order=2, modes=["fwd", "rev"], eps=1e-4, atol=1e-6, rtol=1e-6)


def test_bad_adjoint_is_refused():
    system, *_ = pendulum(1)
    with pytest.raises(ValueError, match="adjoint must be 'reverse'"):
        sj.simulate(system, system.realize_topology(), 0.1, integrator="tsit5", adjoint="backward")


def test_rollout_second_derivatives_near_gimbal_lock_and_the_lock_named():
    """A Gimbal (Euler-angle rates as u) 1e-3 rad from gimbal lock: M's condition number
    is 4.5e6 and a 20-step rk4 rollout still passes ``check_grads`` to second order in both
    modes; at the lock itself M is singular, the run reports ``simulation_nonfinite`` and
    ``sj.find_nonfinite`` names the singular mass matrix (issue 16)."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    sj.Force.UniformGravity(sj.GeneralForceSubsystem(system), matter, [0, -9.81, 0])
    mp = sj.MassProperties(1.0, [0.1, -0.5, 0.05], sj.Inertia(0.4, 0.1, 0.4))
    sj.MobilizedBody.Gimbal(matter.Ground(), sj.Transform(), mp, sj.Transform())
    s = system.realize_topology().with_u([0.1, 0.0, 0.3])
    q0 = jnp.array([0.3, np.pi / 2 - 1e-3, 0.2])
    M = matter.calc_mass_matrix(system.realize(s.with_q(q0), sj.Stage.POSITION))
    assert float(jnp.linalg.cond(M)) > 1e6

    def f(q):
        return sj.simulate(system, s.with_q(q), 0.02, integrator="rk4", dt=1e-3).q[-1]

    check_grads(f, (q0,), order=2, modes=["fwd", "rev"], eps=1e-6, atol=1e-5, rtol=1e-5)
    at_lock = s.with_q([0.3, np.pi / 2, 0.2])
    tr = sj.simulate(system, at_lock, 0.02, integrator="rk4", dt=1e-3, throw=False)
    assert tr.result == sj.RESULTS.simulation_nonfinite
    assert "mass matrix is singular" in sj.find_nonfinite(system, at_lock)


def test_adaptive_simulate_under_jit_with_the_default_step():
    """``jit(simulate(..., integrator='dopri5'))`` with no ``dt`` crashed while tracing (the
    traced failure messages formatted ``dt=None`` with ``:g``); found measuring events."""
    system, *_ = pendulum(2)
    s = system.realize_topology().with_q([0.3, -0.2])
    ev = sj.TriggeredEvent(lambda st: st.q[0] - 0.1, direction="both")
    run = jax.jit(lambda st: sj.simulate(system, st, 1.0, integrator="dopri5", events=[ev], t0=0.0))
    tr = run(s)
    eager = sj.simulate(system, s, 1.0, integrator="dopri5", events=[ev])
    np.testing.assert_allclose(np.asarray(tr.q), np.asarray(eager.q), atol=1e-12)
    assert int(tr.num_events) == int(eager.num_events) >= 1
