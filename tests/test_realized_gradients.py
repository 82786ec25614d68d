"""Derivatives of functions of a State do not depend on the stage it was realized to.

A State realized outside ``jax.grad`` holds its cache as plain values. Every public entry
point that reads the cache (``system.realize`` on a State realized already, the System's,
the matter's, the bodies', the force elements' and the constraints' methods) must give the
derivative of the realization from the State's variables (q, u, masses, force parameters):
the same as on an unrealized State, and the same as finite differences. Before the fix the
README's own line, ``jax.grad(lambda s: system.calc_energy(system.realize(s, VELOCITY)))``
on a State realized to Acceleration, gave dE/dq = 0, dE/du = 0 and dE/d(mass of link 2) =
-17.218 where finite differences give -16.634.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj

jax.config.update("jax_enable_x64", True)

ACC = sj.Stage.ACCELERATION


def _model():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    gravity = sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.1, 0, 0], sj.Inertia(0.1, 0.2, 0.3)))
    link1 = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    link2 = sj.MobilizedBody.Ball(link1, sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    spring = sj.Force.TwoPointLinearSpring(forces, matter.Ground(), [1, 0, 0], link2, [0, 0, 0], 10.0, 0.5)
    rod = sj.Constraint.Rod(matter.Ground(), [0.5, -1.0, 0.2], link2, [0, 0, 0], 1.3)
    state = system.realize_topology()
    state = link1.set_q(state, 0.5).with_u(jnp.array([0.3, 1.0, -0.5, 0.2]))
    parts = dict(system=system, matter=matter, gravity=gravity, link2=link2, spring=spring, rod=rod)
    return parts, state


PARTS, STATE = _model()
S, M = PARTS["system"], PARTS["matter"]

# Each: (name, f(state) -> array), reading what a user reads from a realized State.
ENTRY_POINTS = [
    ("realize(VELOCITY) then calc_energy (README)", lambda s: S.calc_energy(S.realize(s, sj.Stage.VELOCITY))),
    ("calc_energy", lambda s: S.calc_energy(s)),
    ("realize(ACCELERATION).udot", lambda s: S.realize(s, ACC).udot),
    ("realize(ACCELERATION).multipliers", lambda s: S.realize(s, ACC).multipliers),
    ("calc_mass_matrix", lambda s: M.calc_mass_matrix(s)),
    ("get_body_transforms", lambda s: M.get_body_transforms(s)[1]),
    ("get_body_velocities", lambda s: M.get_body_velocities(s)),
    ("get_body_accelerations", lambda s: M.get_body_accelerations(s)),
    ("MobilizedBody.get_body_transform", lambda s: PARTS["link2"].get_body_transform(s).p),
    ("Force.calc_potential_energy", lambda s: PARTS["spring"].calc_potential_energy(s)),
    ("Force.calc_force_contribution", lambda s: PARTS["gravity"].calc_force_contribution(s)[0]),
    ("Force.calc_power", lambda s: PARTS["spring"].calc_power(s)),
    ("Constraint.get_multipliers_as_vector", lambda s: PARTS["rod"].get_multipliers_as_vector(s)),
    ("Constraint.get_position_errors_as_vector", lambda s: PARTS["rod"].get_position_errors_as_vector(s)),
    ("Constraint.get_velocity_errors_as_vector", lambda s: PARTS["rod"].get_velocity_errors_as_vector(s)),
]


def _scalar(f):
    """A scalar of f's output: a fixed random weighting, so every entry counts."""

    def g(s):
        out = jnp.asarray(f(s))
        w = jnp.asarray(np.random.default_rng(out.size).normal(size=out.shape))
        return jnp.sum(w * out)

    return g


def _variables(g: sj.State):
    return {"q": g.q, "u": g.u, "instance": g.instance}


@pytest.mark.parametrize("name,f", ENTRY_POINTS, ids=[n for n, _ in ENTRY_POINTS])
def test_gradient_is_the_same_whatever_stage_the_state_was_realized_to(name, f):
    fs = _scalar(f)

    @jax.jit  # one program: the States realized inside it are still realized before grad
    def gradients(s):
        ref = jax.grad(lambda x: fs(S.realize(x, ACC)))(s)  # an unrealized State
        # realized to Position before grad and to Acceleration inside; or wholly before
        on_position = jax.grad(lambda x: fs(S.realize(x, ACC)))(S.realize(s, sj.Stage.POSITION))
        on_acceleration = jax.grad(fs)(S.realize(s, ACC))
        return ref, on_position, on_acceleration

    ref, *got = gradients(STATE)
    for stage, g in zip((sj.Stage.POSITION, ACC), got, strict=True):
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10, err_msg=f"{name}, {stage}"),
            _variables(g),
            _variables(ref),
        )
        # nothing flows into the cache: it is not a variable of the State
        assert all(float(jnp.max(jnp.abs(x), initial=0.0)) == 0.0 for x in jax.tree.leaves(g.cache))


def test_readme_energy_gradient_matches_finite_differences_on_a_realized_state():
    state = S.realize(STATE, ACC)
    dE = jax.jit(jax.grad(lambda s: S.calc_energy(S.realize(s, sj.Stage.VELOCITY))))(state)
    energy = jax.jit(lambda s: S.calc_energy(S.realize(s, sj.Stage.VELOCITY)))
    E = lambda s: float(energy(s))
    h = 1e-6
    mass = state.instance["matter"]["mass"]
    for i in (1, 2):
        up = state.with_instance("matter", "mass", mass.at[i].add(h))
        dn = state.with_instance("matter", "mass", mass.at[i].add(-h))
        fd = (E(up) - E(dn)) / (2 * h)
        assert abs(float(dE.instance["matter"]["mass"][i]) - fd) < 1e-7 * max(1.0, abs(fd))
    for j in range(state.nq):
        fd = (E(state.with_q(state.q.at[j].add(h))) - E(state.with_q(state.q.at[j].add(-h)))) / (2 * h)
        assert abs(float(dE.q[j]) - fd) < 1e-7 * max(1.0, abs(fd))
    for j in range(state.nu):
        fd = (E(state.with_u(state.u.at[j].add(h))) - E(state.with_u(state.u.at[j].add(-h)))) / (2 * h)
        assert abs(float(dE.u[j]) - fd) < 1e-7 * max(1.0, abs(fd))


def test_realized_state_gradients_compose_with_jit_vmap_and_second_order():
    f = _scalar(lambda s: S.realize(s, ACC).udot)
    realized = S.realize(STATE, ACC)
    ref = jax.grad(f)(STATE)
    for g in (jax.jit(jax.grad(f)), jax.grad(jax.jit(f))):
        np.testing.assert_allclose(g(realized).q, ref.q, rtol=1e-10, atol=1e-12)
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), realized)
    np.testing.assert_allclose(jax.vmap(jax.grad(f))(batch).q[1], ref.q, rtol=1e-10, atol=1e-12)
    # second order: the Hessian in q of the energy of a State realized outside the trace
    energy_of_q = lambda q: S.calc_energy(S.realize(STATE.with_q(q), sj.Stage.VELOCITY))
    H_ref = jax.jit(jax.hessian(energy_of_q))(STATE.q)
    H = jax.jit(jax.hessian(lambda s: S.calc_energy(s)))(S.realize(STATE, sj.Stage.VELOCITY)).q.q
    np.testing.assert_allclose(H, H_ref, rtol=1e-9, atol=1e-10)
