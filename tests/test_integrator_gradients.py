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

    # jitted: an eager simulate compiles its run at every call (4 central differences of
    # kvaerno5 took 107 s eager, 11 s jitted)
    q0, at, fwd = jnp.array([0.3, -0.2]), jax.jit(f), jax.jit(lambda q: f(q, "forward"))
    J_rev = jax.jit(jax.jacrev(f))(q0)
    J_fwd = jax.jit(jax.jacfwd(fwd))(q0)
    np.testing.assert_allclose(np.asarray(J_fwd), np.asarray(J_rev), rtol=1e-12, atol=1e-12)
    h = 1e-6
    J_fd = jnp.stack([(at(q0 + h * e) - at(q0 - h * e)) / (2 * h) for e in jnp.eye(2)], axis=1)
    np.testing.assert_allclose(np.asarray(J_rev), np.asarray(J_fd), atol=1e-6 if adaptive else 1e-8)
    if adaptive:
        if integrator != "kvaerno3":  # kvaerno5 takes the same implicit path, at 1/2 the CI time
            check_grads(fwd, (q0,), order=2, modes=["fwd"], eps=1e-4, atol=1e-4, rtol=1e-4)
        with pytest.raises(TypeError, match="adjoint='forward'"):
            jax.jacfwd(f)(q0)
    else:
        check_grads(at, (q0,), order=2, modes=["fwd", "rev"], eps=1e-4, atol=1e-6, rtol=1e-6)


def test_bad_adjoint_is_refused():
    system, *_ = pendulum(1)
    with pytest.raises(ValueError, match="adjoint must be .reverse."):
        sj.simulate(system, system.realize_topology(), 0.1, integrator="tsit5", adjoint="backward")


def test_rollout_second_derivatives_near_gimbal_lock_and_the_lock_named():
    """A Gimbal (Euler-angle rates as u) 1e-3 rad from gimbal lock: M's condition number
    is 4.5e6 and a 20-step rk4 rollout still passes ``check_grads`` to second order in both
    modes; at the lock itself M is singular, the run reports ``gimbal_lock`` (issue 65; it
    was ``simulation_nonfinite``) and ``sj.find_nonfinite`` names the singular mass matrix
    (issue 16)."""
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

    check_grads(jax.jit(f), (q0,), order=2, modes=["fwd", "rev"], eps=1e-6, atol=1e-5, rtol=1e-5)
    at_lock = s.with_q([0.3, np.pi / 2, 0.2])
    tr = sj.simulate(system, at_lock, 0.02, integrator="rk4", dt=1e-3, throw=False)
    assert tr.result == sj.RESULTS.gimbal_lock
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


def _second_derivative_against_differences(f, J, x, h=1e-5):
    """``f`` (a second derivative, (n, n, n)) against central differences of ``J`` (the
    first, (n, n)): the largest difference and the largest entry."""
    H = np.asarray(f(x))
    fd = np.stack(
        [(np.asarray(J(x + h * e)) - np.asarray(J(x - h * e))) / (2 * h) for e in np.eye(x.size)], -1
    )
    return np.max(np.abs(H - fd)), np.max(np.abs(H))


def test_projection_in_a_scan_differentiates_twice_in_reverse():
    """Issue 65: a second reverse pass through the constraint projection inside a
    ``lax.scan`` (every constrained fixed-step rollout) failed with JAX's "Linearization
    failed to produce known values": the scan's reverse mode hoists its loop invariants by
    partially evaluating its body, which replaced the realizations inside the projection's
    custom rule by their primals, ``custom_vmap``s with no reverse mode. The projection now
    realizes without batching rules; ``jacrev(jacrev)`` equals central differences of
    ``jacrev`` (the four-bar, two projections of two Gauss-Newton steps)."""
    from helpers import fourbar

    from simjax.forward import projection as pj

    system, *_ = fourbar()
    s0 = system.project(system.realize_topology().with_q([0.3, 0.5, -0.8]))
    model = system.model_for(s0)

    def f(q):
        step = lambda c, _: (pj.project_q(model, s0.with_q(c + 1e-3 * jnp.sin(c)), 2).q, None)
        return jax.lax.scan(step, q, None, length=2)[0]

    J = jax.jit(jax.jacrev(f))
    err, size = _second_derivative_against_differences(jax.jit(jax.jacrev(jax.jacrev(f))), J, s0.q + 1e-3)
    assert size > 1e-2 and err < 1e-8, (err, size)


@pytest.mark.slow
def test_rk4_rollout_with_projection_differentiates_twice_in_reverse():
    """Issue 65: ``jacrev(jacrev(simulate))`` through RK4 with the projection (the four-bar,
    two steps) failed ("Linearization failed"); now it equals central differences of the
    gradient (2e-11 against entries of 0.2). Slow: the program of a second reverse pass
    through forward dynamics and the projection compiles for minutes on two cores."""
    from helpers import fourbar

    system, *_ = fourbar()
    s0 = system.project(system.realize_topology().with_q([0.3, 0.5, -0.8])).with_u([0.5, 0.0, 0.0])

    def f(q0):
        return sj.simulate(system, s0.with_q(q0), 0.01, integrator="rk4", dt=5e-3).q[-1]

    J = jax.jit(jax.jacrev(f))
    err, size = _second_derivative_against_differences(jax.jit(jax.jacrev(jax.jacrev(f))), J, s0.q)
    assert size > 0.1 and err < 1e-8, (err, size)


@pytest.mark.parametrize("integrator", ["tsit5", "kvaerno5"])
def test_adaptive_modes_the_adjoint_does_not_serve_are_named(integrator):
    """Issue 65: a second reverse pass through an adaptive run with the default
    ``adjoint='reverse'`` died with JAX's "Reverse-mode differentiation does not work for
    lax.while_loop" (from the checkpointed loop's backward pass), and so did any reverse
    mode with ``adjoint='forward'`` (around a ``jit`` too, where the run's tracers do not
    show it). Both are refused while tracing, naming the integrator and the adjoint that
    serves it."""
    system, *_ = pendulum(1)
    s = system.realize_topology().with_u([0.5])

    def f(q0, adjoint):
        return sj.simulate(system, s.with_q(q0), 0.02, integrator=integrator, adjoint=adjoint).q[-1]

    x = jnp.array([0.3])
    if integrator == "tsit5":  # the refusal does not depend on the integrator (kvaerno5's first
        # reverse pass alone takes minutes to trace on two cores)
        with pytest.raises(TypeError, match=rf"a second reverse pass .*{integrator!r} .*adjoint='direct'"):
            jax.jacrev(jax.jacrev(lambda q: f(q, "reverse")))(x)
    fwd = lambda q: f(q, "forward")[0]  # noqa: E731
    # reverse mode around a jit that encloses the call too (was JAX's while-loop message)
    batched = jax.jit(jax.vmap(jax.grad(fwd)))
    refused = rf"reverse-mode .*{integrator!r} .*adjoint='forward': .*'reverse'"
    for g in (jax.grad(fwd), jax.grad(jax.jit(fwd)), lambda q: batched(jnp.stack([q, q]))):
        with pytest.raises(TypeError, match=refused):
            g(x)
    with pytest.raises(TypeError, match=r"jax.hessian.*adjoint='reverse': .*adjoint='direct'"):
        jax.hessian(lambda q: f(q, "reverse")[0])(x)


@pytest.mark.slow
def test_direct_adjoint_differentiates_adaptive_runs_in_every_order():
    """Issue 65: ``adjoint='direct'`` (a bounded loop, diffrax's DirectAdjoint) serves what
    the other two refuse: ``jax.hessian`` (forward over reverse) and ``jacrev(jacrev)``
    through Tsit5 equal central differences of the gradient. Slow: the bounded loop's
    program compiles for minutes on two cores."""
    system, *_ = pendulum(2)
    s = system.realize_topology().with_u([0.5, -0.3])

    def f(q0):
        return sj.simulate(
            system, s.with_q(q0), 0.1, integrator="tsit5", accuracy=1e-10, adjoint="direct", max_steps=16
        ).q[-1]

    x = jnp.array([0.3, -0.2])
    J = jax.jit(jax.jacrev(f))
    for second in (jax.jacfwd(jax.jacrev(f)), jax.jacrev(jax.jacrev(f))):
        err, size = _second_derivative_against_differences(jax.jit(second), J, x)
        assert size > 1e-3 and err < 1e-7, (err, size)
