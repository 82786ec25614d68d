"""Operators called from Python on concrete States run as one compiled program
(``compiled_outside_traces``).

A reporting loop (energy, stations, M, N(q) u per frame, as OpenSim users write it) ran
every operator op by op, one JAX dispatch per array operation: milliseconds per call, and
a second or so for the first. Now each runs as one compiled program; its results equal the
op-by-op ones, errors stay the same, and inside ``jit``/``grad`` it is traced as before."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj

jax.config.update("jax_enable_x64", True)

MB = sj.MobilizedBody


def _pendulum():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body.Rigid(sj.MassProperties(1.3, [0.0, -0.5, 0], sj.Inertia(0.8, 0.5, 0.9)))
    b1 = MB.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    b2 = MB.Ball(b1, sj.Transform(p=[0, -1.0, 0]), body, sj.Transform())
    sj.Force.TwoPointLinearSpring(forces, matter.Ground(), [1, 0, 0], b2, [0, 0, 0], 10.0, 0.5)
    sj.Constraint.PointInPlane(matter.Ground(), [0, 1, 0], -3.0, b2, [0, -0.5, 0])
    state = system.realize_topology()
    rng = np.random.default_rng(3)
    q = np.concatenate([[0.3], np.array([0.9, 0.1, -0.2, 0.3]) / np.linalg.norm([0.9, 0.1, -0.2, 0.3])])
    state = state.with_q(q).with_u(rng.normal(size=state.nu))
    return system, matter, b2, system.realize(state, sj.Stage.ACCELERATION)


def _operators(system, matter, body):
    station = jnp.array([0.1, -0.2, 0.3])
    return {
        "calc_qdot": (matter.calc_qdot, ()),
        "calc_mass_matrix": (matter.calc_mass_matrix, ()),
        "multiply_by_m_inv": (matter.multiply_by_m_inv, (jnp.arange(4.0),)),
        "calc_g_and_b": (matter.calc_g_and_b, ()),
        "calc_system_jacobian": (matter.calc_system_jacobian, ()),
        "calc_system_central_momentum": (matter.calc_system_central_momentum, ()),
        "calc_energy": (system.calc_energy, ()),
        "get_body_transform": (body.get_body_transform, ()),
        "get_mobilizer_velocity": (body.get_mobilizer_velocity, ()),
        "find_station_acceleration_in_ground": (body.find_station_acceleration_in_ground, (station,)),
        "calc_residual_force": (matter.calc_residual_force, (jnp.ones(4), None, jnp.arange(4.0))),
        "calc_acceleration": (matter.calc_acceleration, (jnp.ones(4),)),
        "calc_station_jacobian (a body)": (matter.calc_station_jacobian, (body, station)),
        "calc_frame_jacobian (an index)": (matter.calc_frame_jacobian, (body.index, station)),
        "calc_bias_for_station_jacobian": (matter.calc_bias_for_station_jacobian, (body, station)),
        "calc_constraint_error_norms": (system.calc_constraint_error_norms, ()),
    }


def test_operators_run_compiled_and_agree_with_their_op_by_op_results():
    system, matter, body, state = _pendulum()
    for name, (op, args) in _operators(system, matter, body).items():
        compiled = op.compiled
        # (the jitted method's cache is shared by every System: count this System's entries,
        # whatever tests ran before in this process)
        before = compiled._cache_size()
        with jax.disable_jit():  # op by op, as the method is written
            eager = op(state, *args)
        for _ in range(3):
            out = op(state, *args)
        assert compiled._cache_size() == before + 1, f"{name}: one program for one State structure"
        for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(out), strict=True):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-13, atol=1e-13, err_msg=name)


def test_a_compiled_operator_still_refuses_a_state_at_too_low_a_stage():
    system, matter, _, state = _pendulum()
    matter.calc_mass_matrix(state)
    low = state.with_q(state.q)  # back to Stage.TIME
    with pytest.raises(sj.StageError, match="calc_mass_matrix needs the State realized to Stage.POSITION"):
        matter.calc_mass_matrix(low)


def test_compiled_operators_are_traced_inside_jit_and_grad():
    system, matter, _, state = _pendulum()
    system.calc_kinetic_energy(state)  # compiled once before being used inside a trace

    def ke(u):
        return system.calc_kinetic_energy(system.realize(state.with_u(u), sj.Stage.VELOCITY))

    g = jax.jit(jax.grad(ke))(state.u)
    M = matter.calc_mass_matrix(state)
    np.testing.assert_allclose(g, M @ state.u, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jax.jit(ke)(state.u), system.calc_kinetic_energy(state), rtol=1e-14)
