"""Identities between algorithms on random trees with every mobilizer kind."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ALL_KINDS, fd_jacobian, random_state, random_tree, rk4_rollout
from jax.test_util import check_grads

import simjax as sj


@pytest.fixture(scope="module")
def tree():
    return random_tree(seed=0)


@pytest.fixture(scope="module")
def realized(tree):
    system = tree[0]
    return system.realize(random_state(system, seed=3), sj.Stage.ACCELERATION)


def test_every_kind_present(tree):
    system, matter, _, mobods = tree
    kinds = {m.mobilizer.kind for m in mobods[1:]}
    assert kinds == set(ALL_KINDS)


def test_mass_matrix_is_hessian_of_kinetic_energy(tree, realized):
    system, matter, _, _ = tree
    M = matter.calc_mass_matrix(realized)
    ke = lambda u: system.calc_kinetic_energy(system.realize(realized.with_u(u), sj.Stage.VELOCITY))
    H = jax.jit(jax.hessian(ke))(realized.u)  # (eager, the hessian compiles for much longer)
    np.testing.assert_allclose(M, H, atol=1e-11 * np.abs(H).max())
    np.testing.assert_allclose(M, M.T, atol=1e-13)
    assert np.linalg.eigvalsh(np.asarray(M)).min() > 0


def test_mass_matrix_upper_and_its_solve(tree, realized):
    """Forward dynamics factors M from its upper triangle (``mass_matrix_upper``, no
    symmetrising pass): that triangle is M's, and its solve equals the symmetric one, with
    derivatives to second order against finite differences."""
    from simjax.dynamics import stages as rz

    system, matter, _, _ = tree
    M = matter.calc_mass_matrix(realized)
    U = rz.mass_matrix_upper(system.model_for(realized), realized, realized.position_cache)
    # M comes from a compiled program (calc_mass_matrix), U op by op: equal to round-off
    np.testing.assert_allclose(U, jnp.triu(M), rtol=1e-13, atol=1e-14 * float(jnp.abs(M).max()))
    np.testing.assert_array_equal(jnp.tril(U, -1), 0.0)
    np.testing.assert_allclose(
        realized.udot, rz.solve_mass_matrix(M, -realized.dynamics_cache.bias), rtol=1e-12
    )
    rhs = jnp.linspace(-1.0, 2.0, M.shape[0])
    np.testing.assert_allclose(rz.solve_mass_matrix_upper(U, rhs), jnp.linalg.solve(M, rhs), rtol=1e-10)
    n = 5  # a leading block keeps second derivatives affordable
    solve = lambda U, r: rz.solve_mass_matrix_upper(jnp.triu(U), r)
    check_grads(solve, (U[:n, :n], rhs[:n]), order=2, eps=1e-4)
    R = jnp.linspace(0.5, 1.5, 3 * n).reshape(n, 3)  # a matrix right side
    check_grads(solve, (U[:n, :n], R), order=2, eps=1e-4)


def test_inverse_dynamics_undoes_forward_dynamics(tree, realized):
    system, matter, _, _ = tree
    dc = realized.dynamics_cache
    r = matter.calc_residual_force(realized, dc.mobility_forces, dc.body_forces, realized.udot)
    np.testing.assert_allclose(r, 0.0, atol=1e-10)
    # and forward of an arbitrary torque reproduces it
    tau = jnp.linspace(-1, 1, realized.nu)
    udot = matter.calc_acceleration(realized, applied_mobility_forces=tau)
    back = matter.calc_residual_force(realized, known_udot=udot)
    np.testing.assert_allclose(back, tau, atol=1e-10)
    np.testing.assert_allclose(
        matter.multiply_by_m(realized, matter.multiply_by_m_inv(realized, tau)), tau, atol=1e-10
    )


def test_euler_lagrange_by_autodiff(tree, realized):
    """M udot + C = Q from d/dt(dL/du) - dL/dq with the Lagrangian differentiated by JAX.

    Valid for qdot == u only, so use a tree of such kinds."""
    kinds = (
        "Pin",
        "Slider",
        "Universal",
        "Cylinder",
        "BendStretch",
        "Planar",
        "Gimbal",
        "Translation",
        "SphericalCoords",
        "Bushing",
        "Screw",
        "Weld",
    )
    system, matter, _, _ = random_tree(seed=5, kinds=kinds)
    s = system.realize(random_state(system, seed=2, scale=0.3), sj.Stage.ACCELERATION)

    def L(q, u):
        st = system.realize(s.with_q(q).with_u(u), sj.Stage.VELOCITY)
        return system.calc_kinetic_energy(st) - system.calc_potential_energy(st)

    dLdu = jax.grad(L, argnums=1)

    @jax.jit  # (eager, the second derivatives compile for much longer)
    def lagrange(q, u, udot):
        # d/dt dL/du = (d2L/du dq) qdot + (d2L/du2) udot
        _, t1 = jax.jvp(lambda qq: dLdu(qq, u), (q,), (u,))
        _, t2 = jax.jvp(lambda uu: dLdu(q, uu), (u,), (udot,))
        return t1 + t2 - jax.grad(L, argnums=0)(q, u)

    np.testing.assert_allclose(lagrange(s.q, s.u, s.udot), 0.0, atol=1e-9)


def test_station_and_frame_jacobians_match_autodiff(tree, realized):
    system, matter, _, mobods = tree
    station = jnp.array([0.1, -0.2, 0.3])
    for b in mobods[1:]:
        J = matter.calc_station_jacobian(realized, b, station)

        def pos(q, b=b):
            return b.find_station_location_in_ground(
                system.realize(realized.with_q(q), sj.Stage.POSITION), station
            )

        Jq = jax.jacfwd(pos)(realized.q)
        np.testing.assert_allclose(J @ realized.u, Jq @ realized.qdot, atol=1e-11)
        v = b.find_station_velocity_in_ground(realized, station)
        np.testing.assert_allclose(J @ realized.u, v, atol=1e-11)
        # bias: station acceleration at udot = 0 equals Jdot u
        a = b.find_station_acceleration_in_ground(realized, station)
        np.testing.assert_allclose(
            matter.calc_bias_for_station_jacobian(realized, b, station) + J @ realized.udot, a, atol=1e-10
        )
    Js = matter.calc_system_jacobian(realized)
    np.testing.assert_allclose(
        (Js @ realized.u).reshape(-1, 6), matter.get_body_velocities(realized), atol=1e-11
    )
    F = jnp.asarray(np.random.default_rng(0).normal(size=(len(mobods), 6)))
    np.testing.assert_allclose(
        matter.multiply_by_system_jacobian_transpose(realized, F), Js.T @ F.reshape(-1), atol=1e-10
    )


def test_body_acceleration_is_derivative_of_velocity(tree, realized):
    system, matter, _, mobods = tree
    h = 1e-6

    def V_at(t):
        s = realized.with_q(realized.q + t * realized.qdot + 0.5 * t * t * realized.qdotdot).with_u(
            realized.u + t * realized.udot
        )
        return matter.get_body_velocities(system.realize(s, sj.Stage.VELOCITY))

    dV = (V_at(h) - V_at(-h)) / (2 * h)
    np.testing.assert_allclose(matter.get_body_accelerations(realized), dV, atol=2e-6)

    # qdotdot is the derivative of qdot along the motion
    def qdot_at(t):
        s = realized.with_q(realized.q + t * realized.qdot).with_u(realized.u + t * realized.udot)
        return system.realize(s, sj.Stage.VELOCITY).qdot

    np.testing.assert_allclose(realized.qdotdot, (qdot_at(h) - qdot_at(-h)) / (2 * h), atol=2e-6)


def test_energy_conserved_rk4(tree):
    system = tree[0]
    s = random_state(system, seed=4, scale=0.2)
    E = lambda st: system.calc_energy(system.realize(st, sj.Stage.VELOCITY))
    s1 = jax.jit(lambda st: rk4_rollout(system, st, 1e-3, 300))(s)
    E0, E1 = E(s), E(s1)
    assert abs(E1 - E0) < 1e-8 * abs(E0) + 1e-9


def test_momentum_conserved_without_gravity():
    system, matter, _, _ = random_tree(
        seed=7, kinds=("Free", "Pin", "Ball", "Slider", "Universal", "Gimbal"), gravity=None
    )
    # make body 1 (Free) the root of everything: random_tree picks parents at random, so
    # rebuild as a floating chain
    import helpers

    rng = np.random.default_rng(0)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    root = helpers.make_mobod("Free", matter.Ground(), rng)
    mobs = [root]
    for k in ("Pin", "Ball", "Slider", "Universal", "Gimbal", "Pin"):
        mobs.append(helpers.make_mobod(k, mobs[int(rng.integers(len(mobs)))], rng))
    s = random_state(system, seed=1)
    p0 = matter.calc_system_momentum_about_ground_origin(system.realize(s, sj.Stage.VELOCITY))
    s1 = rk4_rollout(system, s, 1e-3, 200)
    p1 = matter.calc_system_momentum_about_ground_origin(system.realize(s1, sj.Stage.VELOCITY))
    np.testing.assert_allclose(p1, p0, atol=1e-9)


def test_check_grads_forward_dynamics():
    """Forward and reverse derivatives of udot against finite differences, with respect to
    q, u and Instance parameters (masses, joint frames, mobilizer parameters) at once.

    A tree of the kinds with distinct derivative code paths (autodiff H, quaternion N,
    Euler-angle N, parameterized kinds) keeps the compile affordable."""
    kinds = ("Pin", "Ball", "Gimbal", "Screw", "Ellipsoid", "Free", "SphericalCoords")
    system, matter, _, _ = random_tree(seed=11, kinds=kinds)
    s = system.realize(random_state(system, seed=5), sj.Stage.ACCELERATION)

    def udot(q, u, mass, X_PF_p, mob_params):
        st = (
            s.with_q(q)
            .with_u(u)
            .with_instance("matter", "mass", mass)
            .with_instance("matter", "X_PF_p", X_PF_p)
            .with_instance("matter", "mobilizer_params", mob_params)
        )
        return system.realize(st, sj.Stage.ACCELERATION).udot

    inst = s.instance["matter"]
    args = (s.q, s.u, inst["mass"], inst["X_PF_p"], inst["mobilizer_params"])
    eps = float(np.finfo(np.float64).resolution ** (1 / 3))
    check_grads(udot, args, order=1, modes=("fwd", "rev"), eps=eps, atol=1e-4, rtol=1e-4)


def test_grad_of_energy_wrt_whole_state(tree):
    system = tree[0]
    s = random_state(system, seed=9)
    g = jax.grad(lambda st: system.calc_energy(system.realize(st, sj.Stage.VELOCITY)))(s)
    # d energy / d u = M u
    M = system.matter.calc_mass_matrix(system.realize(s, sj.Stage.POSITION))
    np.testing.assert_allclose(g.u, M @ s.u, atol=1e-10)
    fd = fd_jacobian(
        lambda m: system.calc_energy(system.realize(s.with_instance("matter", "mass", m), sj.Stage.VELOCITY)),
        s.instance["matter"]["mass"],
    )
    np.testing.assert_allclose(g.instance["matter"]["mass"], fd, atol=1e-6)


def test_vmap_equals_loop_and_no_retrace(tree):
    system = tree[0]
    states = [random_state(system, seed=k) for k in range(4)]
    # different masses per copy too
    states = [
        st.with_instance("matter", "mass", st.instance["matter"]["mass"] * (1 + 0.1 * k))
        for k, st in enumerate(states)
    ]
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *states)
    traces = []

    def f(st):
        traces.append(1)
        return system.realize(st, sj.Stage.ACCELERATION).udot

    jf = jax.jit(jax.vmap(f))
    out = jf(batch)
    out2 = jf(jax.tree_util.tree_map(lambda x: x * 1.0, batch))
    assert len(traces) == 1
    for k, st in enumerate(states):
        np.testing.assert_allclose(out[k], f(st), atol=1e-10)
    np.testing.assert_allclose(out, out2)
    # jit equals no-jit
    np.testing.assert_allclose(
        jax.jit(f)(states[0]), system.realize(states[0], sj.Stage.ACCELERATION).udot, atol=1e-12
    )


def test_float32_runs_and_is_close():
    system, matter, _, _ = random_tree(seed=1, kinds=("Pin", "Ball", "Slider", "Free", "Gimbal"))
    s = random_state(system, seed=2)
    ref = system.realize(s, sj.Stage.ACCELERATION).udot
    s32 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), s)
    out = system.realize(s32, sj.Stage.ACCELERATION).udot
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-3 * float(jnp.abs(ref).max()))


def test_spatial_inertias_about_ground_origin(tree, realized):
    """``inertia_O`` (ten parameters per body) and the 6x6 ``I_O`` built from it equal the
    spatial inertia assembled by hand from each body's mass properties and Ground pose:
    ``[[J_O, m skew(c)], [-m skew(c), m 1]]`` with ``J_O = R I_B R^T + m (|c|^2 1 - c c^T)``
    (``I_B`` about the body origin, ``c`` the Ground mass center)."""
    _, _, _, mobods = tree
    pc = realized.position_cache
    skew = lambda v: np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    for b in mobods[1:]:
        mp = b.get_default_mass_properties()
        R, p = np.asarray(pc.R_GB[b.index]), np.asarray(pc.p_GB[b.index])
        m, c = mp.mass, p + R @ np.asarray(mp.com)
        Ic_G = R @ np.asarray(mp.inertia_about_com()) @ R.T
        J = Ic_G + m * (c @ c * np.eye(3) - np.outer(c, c))
        want = np.block([[J, m * skew(c)], [-m * skew(c), m * np.eye(3)]])
        np.testing.assert_allclose(pc.I_O[b.index], want, atol=1e-12 * max(1.0, np.abs(want).max()))
        params = np.r_[m, m * c, J[0, 0], J[0, 1], J[1, 1], J[0, 2], J[1, 2], J[2, 2]]
        np.testing.assert_allclose(pc.inertia_O[b.index], params, atol=1e-12 * max(1.0, np.abs(params).max()))
