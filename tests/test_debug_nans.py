"""``sj.debug_nans()`` and ``sj.find_nonfinite``: the first stage and element that made a
NaN or inf is named (issue 16), instead of a NaN surfacing later with no origin."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import pendulum

import simjax as sj

jax.config.update("jax_enable_x64", True)
MB = sj.MobilizedBody


class _Sqrt:
    """A torque sqrt(q0 - 0.5): NaN once q0 < 0.5 (a user's function with a hole)."""

    def calc_force(self, ctx):
        tau = jnp.zeros_like(ctx.u).at[0].set(jnp.sqrt(ctx.q[0] - 0.5))
        return None, tau


def _with_custom():
    system, matter, forces, mobods = pendulum(2)
    sj.Force.Custom(forces, _Sqrt())
    return system, mobods


def test_finite_states_give_none_and_nothing_changes_outside_the_mode():
    system, mobods = _with_custom()
    s = system.realize_topology().with_q([0.9, 0.1])
    assert sj.find_nonfinite(system, s) is None
    bad = s.with_q([0.2, 0.1])
    # outside the mode a NaN result is returned, as before
    assert not bool(jnp.all(jnp.isfinite(system.realize(bad).udot)))
    with sj.debug_nans():
        system.realize(s)  # finite: no error


def test_a_custom_force_with_a_hole_is_named_at_the_dynamics_stage():
    system, mobods = _with_custom()
    bad = system.realize_topology().with_q([0.2, 0.1])
    why = sj.find_nonfinite(system, bad)
    assert "Dynamics stage" in why and "force element Custom" in why
    with (
        sj.debug_nans(),
        pytest.raises(
            sj.NonFiniteError, match="realize to ACCELERATION: Dynamics stage: force element Custom"
        ),
    ):
        system.realize(bad)
    # realizing only to Position is fine: the force is not computed there
    with sj.debug_nans():
        system.realize(bad, sj.Stage.POSITION)


def test_a_non_finite_instance_variable_is_named_before_anything_is_computed():
    system, matter, forces, mobods = pendulum(2)
    spring = sj.Force.MobilityLinearSpring(forces, mobods[1], 0, 5.0, 0.0)
    s = spring.set_stiffness(system.realize_topology(), jnp.nan)
    why = sj.find_nonfinite(system, s)
    assert "Instance variable" in why and "stiffness" in why
    s0 = system.realize_topology()
    com = s0.instance["matter"]["com"].at[2, 1].set(jnp.nan)
    why = sj.find_nonfinite(system, s0.with_instance("matter", "com", com))
    assert "Instance variable matter.com" in why and repr(mobods[2].name) in why


def test_a_singular_mass_matrix_is_named():
    """A Gimbal's Euler-angle rates at gimbal lock (middle angle pi/2): M is singular."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    sj.Force.UniformGravity(sj.GeneralForceSubsystem(system), matter, [0, -9.81, 0])
    mp = sj.MassProperties(1.0, [0, -0.5, 0], sj.Inertia(0.3, 0.01, 0.3))
    g = MB.Gimbal(matter.Ground(), sj.Transform(), mp, sj.Transform())
    s = system.realize_topology().with_q([0.3, np.pi / 2, 0.2]).with_u([0.1, 0.2, 0.3])
    assert not bool(jnp.all(jnp.isfinite(system.realize(s).udot)))
    why = sj.find_nonfinite(system, s)
    assert "mass matrix is singular" in why or f"udot of {g!r}" in why


def test_simulate_in_debug_mode_names_the_origin_or_says_the_step_diverged():
    # the custom force's hole is reached during the run (q0 falls below 0.5)
    system, mobods = _with_custom()
    s = system.realize_topology().with_q([0.9, 0.0]).with_u([-4.0, 0.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        sj.simulate(system, s, 1.0, integrator="rk4", dt=1e-2)
    ahead = "in the step after t =.*one explicit step of 0.01 ahead: Dynamics stage: force element Custom"
    with sj.debug_nans(), pytest.raises(sj.NonFiniteError, match=ahead):
        sj.simulate(system, s, 1.0, integrator="rk4", dt=1e-2)
    # a stiff spring with far too large a step: the run grows until it overflows, and the
    # message shows how large the last good State was
    system, matter, forces, mobods = pendulum(1)
    sj.Force.MobilityLinearSpring(forces, mobods[1], 0, 1e9, 0.0)
    s = system.realize_topology().with_q([0.3])
    with (
        sj.debug_nans(),
        pytest.raises(
            sj.NonFiniteError, match=r"largest \|q\|, \|u\| at the last good State: \d\.\d+e\+\d\d"
        ),
    ):
        sj.simulate(system, s, 5.0, integrator="euler", dt=0.05)


def test_find_nonfinite_refuses_traced_states():
    system, mobods = _with_custom()
    s = system.realize_topology()
    with pytest.raises(TypeError, match="outside jit"):
        jax.jit(lambda st: sj.find_nonfinite(system, st) or 0)(s)
