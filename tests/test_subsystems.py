"""User subsystems and custom forces: the seed's repulsion example (sections 2.2-2.4, 3.1).

The seed's C++ writes the potential energy as -strength/r while its force pushes the bodies
apart (force = strength r/|r|^3 on body i); that pair is not consistent (d/dr of -k/r is an
attraction). Here the energy is +strength/r, so that force = -grad(energy) and the total
energy is conserved, which the tests check.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import rk4_rollout

import simjax as sj

MB = sj.MobilizedBody


def _pairs(ctx):
    """Pair vectors r_ij = p_i - p_j for i > j over all bodies (Ground included)."""
    p = ctx.p_GB  # (nb, 3) body origins in Ground
    nb = p.shape[0]
    i, j = np.tril_indices(nb, k=-1)
    return i, j, p[i] - p[j]


def repulsion_forces(ctx, strength):
    i, j, r = _pairs(ctx)
    d = jnp.linalg.norm(r, axis=1, keepdims=True)
    f = strength * r / d**3
    F = jnp.zeros((ctx.num_bodies, 6), r.dtype)
    F = F.at[i, 3:].add(f).at[j, 3:].add(-f)
    return F


def repulsion_energy(ctx, strength):
    _, _, r = _pairs(ctx)
    return jnp.sum(strength / jnp.linalg.norm(r, axis=1))


class Repulsion(sj.ForceSubsystem):
    """Section 2.4: force strength as a discrete variable that invalidates Dynamics."""

    def __init__(self, system, default_strength=1.0):
        self.default_strength = default_strength
        super().__init__(system, name="Repulsion")

    def set_default_force_strength(self, k):
        self.default_strength = k
        self.invalidate_subsystem_topology_cache()

    def realize_topology(self):
        self.allocate_discrete_variable("strength", sj.Stage.DYNAMICS, self.default_strength)
        # computed during realize(Position)
        self.allocate_cache_entry(
            "distances",
            sj.Stage.POSITION,
            sj.Stage.POSITION,
            lambda ctx: jnp.linalg.norm(_pairs(ctx)[2], axis=1),
        )
        # lazy: computed only when asked for
        self.allocate_cache_entry(
            "closest", sj.Stage.POSITION, sj.Stage.INFINITY, lambda ctx: jnp.min(ctx.cache_entry("distances"))
        )

    def get_force_strength(self, state):
        return self.get_discrete_variable(state, "strength")

    def set_force_strength(self, state, k):
        return self.set_discrete_variable(state, "strength", k)

    def realize_dynamics(self, ctx):
        return {"strength_used": ctx.discrete("strength")}

    def calc_force(self, ctx):
        return repulsion_forces(ctx, ctx.discrete("strength")), None

    def calc_potential_energy(self, ctx):
        return repulsion_energy(ctx, ctx.discrete("strength"))


class RepulsionForce:
    """Section 3.1: the same force as a Force.Custom implementation."""

    def calc_force(self, ctx):
        return repulsion_forces(ctx, 1.0), None

    def calc_potential_energy(self, ctx):
        return repulsion_energy(ctx, 1.0)

    def depends_only_on_positions(self):
        return True


def three_bodies():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.1, 0, 0], sj.Inertia(0.05, 0.06, 0.07)))
    b1 = MB.Free(matter.Ground(), sj.Transform(p=[1.0, 0, 0]), body, sj.Transform())
    b2 = MB.Free(matter.Ground(), sj.Transform(p=[0, 1.2, 0]), body, sj.Transform())
    b3 = MB.Ball(b1, sj.Transform(p=[0.5, 0.5, 0.3]), body, sj.Transform(p=[0.3, 0, 0]))
    return system, matter, forces, (b1, b2, b3)


def _start(system):
    s = system.realize_topology()
    return s.with_u(jnp.asarray(np.random.default_rng(0).normal(size=s.nu)) * 0.3)


def test_repulsion_subsystem_forces_energy_and_discrete_strength():
    system, matter, forces, bodies = three_bodies()
    rep = Repulsion(system)
    s = _start(system)
    assert float(rep.get_force_strength(s)) == 1.0
    a = system.realize(s, sj.Stage.ACCELERATION)
    # forces are what the subsystem computed, and they add to zero (action = reaction)
    F = a.dynamics_cache.body_forces
    np.testing.assert_allclose(F, repulsion_forces(system.context(a), 1.0), atol=1e-14)
    np.testing.assert_allclose(F[:, 3:].sum(0), 0.0, atol=1e-12)
    # force = -grad(potential energy) w.r.t. each body's origin: check through q with the
    # system Jacobian (generalized force = J^T F)
    pe = lambda q: system.calc_potential_energy(system.realize(s.with_q(q), sj.Stage.POSITION))
    dpe = jax.grad(pe)(s.q)
    P = system.realize(s, sj.Stage.POSITION)
    N = jax.jacfwd(lambda u: matter.calc_qdot(P, u))(s.u)  # qdot = N u
    gen = matter.multiply_by_system_jacobian_transpose(a, F)
    np.testing.assert_allclose(gen, -(N.T @ dpe), atol=1e-10)

    # the discrete variable invalidates Dynamics: the State falls back to Velocity
    s2 = rep.set_force_strength(a, 2.5)
    assert s2.stage == sj.Stage.VELOCITY
    a2 = system.realize(s2, sj.Stage.ACCELERATION)
    np.testing.assert_allclose(a2.dynamics_cache.body_forces, 2.5 * F, rtol=1e-12)
    assert float(rep.get_cache_entry(a2, "strength_used")) == 2.5
    np.testing.assert_allclose(
        system.calc_potential_energy(a2), 2.5 * system.calc_potential_energy(a), rtol=1e-12
    )
    # and the strength can be batched and differentiated like any State leaf
    ks = jnp.array([0.5, 1.0, 2.0])
    batch = jax.vmap(lambda k: rep.set_force_strength(s, k))(ks)
    ud = jax.vmap(lambda st: system.realize(st, sj.Stage.ACCELERATION).udot)(batch)
    np.testing.assert_allclose(
        ud[2], system.realize(rep.set_force_strength(s, 2.0), sj.Stage.ACCELERATION).udot
    )
    g = jax.grad(
        lambda k: system.calc_potential_energy(
            system.realize(rep.set_force_strength(s, k), sj.Stage.POSITION)
        )
    )(1.0)
    np.testing.assert_allclose(g, system.calc_potential_energy(P), rtol=1e-12)


def test_repulsion_conserves_energy():
    system, matter, forces, bodies = three_bodies()
    Repulsion(system, default_strength=0.7)
    s = _start(system)
    E = lambda st: system.calc_energy(system.realize(st, sj.Stage.VELOCITY))
    s1 = jax.jit(lambda st: rk4_rollout(system, st, 2e-3, 200))(s)
    assert abs(E(s1) - E(s)) < 1e-8 * abs(E(s))
    # energy is exchanged between KE and PE
    ke0 = system.calc_kinetic_energy(system.realize(s, sj.Stage.VELOCITY))
    ke1 = system.calc_kinetic_energy(system.realize(s1, sj.Stage.VELOCITY))
    assert abs(ke1 - ke0) > 1e-3


def test_cache_entries_eager_and_lazy():
    system, matter, forces, bodies = three_bodies()
    rep = Repulsion(system)
    s = system.realize_topology()
    with pytest.raises(sj.StageError, match="Repulsion.distances needs Stage.POSITION"):
        rep.get_cache_entry(s, "distances")
    p = system.realize(s, sj.Stage.POSITION)
    assert rep.is_cache_value_current(p, "distances")
    assert not rep.is_cache_value_current(p, "closest")  # lazy: never stored
    d = rep.get_cache_entry(p, "distances")
    assert d.shape == (6,)
    np.testing.assert_allclose(rep.get_cache_entry(p, "closest"), d.min())
    # a new q invalidates the stored entry
    moved = p.with_q(p.q * 1.1)
    assert not rep.is_cache_value_current(moved, "distances")
    with pytest.raises(sj.StageError):
        rep.get_cache_entry(moved, "distances")
    with pytest.raises(KeyError, match="no cache entry 'nope'"):
        rep.get_cache_entry(p, "nope")


def test_changing_a_default_invalidates_old_states():
    system, matter, forces, bodies = three_bodies()
    rep = Repulsion(system)
    old = system.realize_topology()
    rep.set_default_force_strength(3.0)
    with pytest.raises(sj.TopologyError, match="realize_topology"):
        system.realize(old, sj.Stage.POSITION)
    new = system.realize_topology()
    assert float(rep.get_force_strength(new)) == 3.0


def test_force_custom_matches_subsystem():
    system, matter, forces, bodies = three_bodies()
    custom = sj.Force.Custom(forces, RepulsionForce())
    assert custom.depends_only_on_positions()
    s = _start(system)
    a = system.realize(s, sj.Stage.ACCELERATION)

    system2, _, _, _ = three_bodies()
    Repulsion(system2)
    a2 = system2.realize(_start(system2), sj.Stage.ACCELERATION)
    np.testing.assert_allclose(a.udot, a2.udot, atol=1e-12)
    np.testing.assert_allclose(system.calc_potential_energy(a), system2.calc_potential_energy(a2), atol=1e-12)
    # a disabled force contributes nothing
    s_off = custom.disable(s)
    a_off = system.realize(s_off, sj.Stage.ACCELERATION)
    np.testing.assert_allclose(a_off.dynamics_cache.body_forces, 0.0, atol=1e-15)
    assert float(system.calc_potential_energy(a_off)) == 0.0
