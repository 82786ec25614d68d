"""Coordinate limits: hard, one-sided constraints stepped with complementarity (ArtiSynth's
unilateral constraints, seed 001 4.9.1–4.9.2), checked against closed forms: inelastic
arrival, static resting forces, complementarity at every step, the deadband, the
two-overlapping-limits corner of Figure 4.23, batches and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj

M, LEN, G = 1.0, 0.5, 9.81
DT = 1e-3


def _rot_z(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def pendulum(lower=-0.5, upper=1.0, **kw):
    """A rod on a Pin about z, com at (LEN, 0, 0), gravity -y: q = 0 is horizontal."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    I = 1e-3 + M * LEN**2
    body = sj.Body.Rigid(sj.MassProperties(M, [LEN, 0, 0], sj.Inertia(1e-3, I, I)))
    pend = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    sj.Force.UniformGravity(forces, matter, [0, -G, 0])
    lim = sj.Constraint.CoordinateLimit(pend, 0, lower=lower, upper=upper, **kw)
    return system, matter, pend, lim


def chain(n=4, half=0.3, gravity=(0, -G, 0)):
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    parent, bodies, lims = matter.Ground(), [], []
    for i in range(n):
        L = 0.3
        mp = sj.MassProperties.from_com_inertia(1.0, [L / 2, 0, 0], sj.Inertia(1e-3, 8e-3, 8e-3))
        X_PF = sj.Transform() if i == 0 else sj.Transform(p=[0.3, 0, 0])
        b = sj.MobilizedBody.Pin(parent, X_PF, sj.Body.Rigid(mp), sj.Transform())
        bodies.append(b)
        lims.append(sj.Constraint.CoordinateLimit(b, 0, -half, half))
        parent = b
    sj.Force.UniformGravity(forces, matter, list(gravity))
    return system, matter, bodies, lims


def test_pendulum_arrives_inelastically_and_rests_with_the_static_torque():
    system, matter, pend, lim = pendulum()
    state = system.realize_topology()
    tol = float(lim.get_tolerance(state))
    assert tol == matter.get_rotary_limit_tol() == 1e-4
    state = state.with_q(jnp.array([0.3]))
    traj = sj.simulate(system, state, 1.5, integrator="euler", dt=DT, save_at=1500)
    q, u = np.asarray(traj.q[:, 0]), np.asarray(traj.u[:, 0])
    E = np.asarray(traj.discrete["matter"]["limit_engaged"])
    # never past the stop by more than the rotary tolerance (after each step's correction)
    assert q.min() >= -0.5 - tol - 1e-12
    k = int(np.argmax(E != 0))
    assert k > 0 and E[k] == 1 and u[k] < -5.0  # arrives fast ...
    assert abs(u[k + 1]) < 1e-12  # ... and stops in one step: inelastic
    assert np.all(E[k:] == 1)  # no chatter while resting
    fs = traj.final_state
    assert int(lim.is_engaged(fs)) == 1
    qf = float(fs.q[0])
    np.testing.assert_allclose(qf, -0.5 - tol, atol=1e-12)  # resting just inside (the deadband)
    np.testing.assert_allclose(float(lim.get_distance(fs)), -tol, atol=1e-12)
    torque = float(lim.get_multipliers(fs)[0])
    np.testing.assert_allclose(torque, M * G * LEN * np.cos(qf), rtol=1e-6)
    np.testing.assert_allclose(float(lim.get_generalized_force(fs)), torque)


def test_upper_limit_engages_with_negative_sign_and_releases_moving_away():
    system, _, _, lim = pendulum(lower=-1.2, upper=0.6)
    state = system.realize_topology().with_q(jnp.array([0.4])).with_u(jnp.array([6.0]))
    traj = sj.simulate(system, state, 1.0, integrator="euler", dt=DT, save_at=1000)
    E = np.asarray(traj.discrete["matter"]["limit_engaged"])
    F = np.asarray(traj.discrete["matter"]["limit_force"])
    q = np.asarray(traj.q[:, 0])
    up = np.flatnonzero(E == -1)
    assert len(up) >= 2  # held the upper stop for at least two steps
    assert q.max() <= 0.6 + 1e-4 + 1e-12
    # it released once gravity pulled it away, and later rests on the lower stop
    assert E[up[-1] + 1] == 0 and E[-1] == 1
    assert np.all(F >= 0)


def test_slider_on_a_slope_rests_on_its_end_stop_with_m_g_sin_alpha():
    alpha = 0.4
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(2.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)))
    s = sj.MobilizedBody.Slider(matter.Ground(), sj.Transform(R=_rot_z(alpha)), body, sj.Transform())
    sj.Force.UniformGravity(forces, matter, [0, -G, 0])
    lim = sj.Constraint.CoordinateLimit(s, 0, lower=-0.2, upper=0.5)
    state = system.realize_topology()
    assert not lim.is_rotary()
    tol = float(lim.get_tolerance(state))
    assert tol == matter.get_penetration_tol()
    traj = sj.simulate(system, state, 1.0, integrator="euler", dt=DT)
    fs = traj.final_state
    np.testing.assert_allclose(float(fs.q[0]), -0.2 - tol, atol=1e-12)
    np.testing.assert_allclose(float(lim.get_multipliers(fs)[0]), 2.0 * G * np.sin(alpha), rtol=1e-6)


def test_chain_with_every_joint_limited_is_complementary_at_every_step():
    system, matter, bodies, lims = chain(4)
    state = system.realize_topology()
    traj = sj.simulate(system, state, 2.0, integrator="euler", dt=DT, save_at=2000)
    E = np.asarray(traj.discrete["matter"]["limit_engaged"])  # (n, L)
    F = np.asarray(traj.discrete["matter"]["limit_force"])
    u = np.asarray(traj.u)
    theta = F[1:] * DT  # impulses of step k (solved with the engagement after step k-1)
    Nv = E[:-1] * u[1:]  # E N u of the rows engaged during step k (N = identity rows here)
    on = E[:-1] != 0
    assert on.sum() > 100
    assert theta.min() >= -1e-9
    assert Nv[on].min() >= -1e-9
    assert np.abs(theta * Nv)[on].max() <= 1e-9
    # resting: the engaged set does not chatter over the last half second, nothing moves
    assert np.all(E[-500:] == E[-1]) and np.all(E[-1] != 0)
    assert np.abs(u[-1]).max() < 1e-9
    q = np.asarray(traj.q)
    tol = matter.get_rotary_limit_tol()
    assert np.all(np.abs(q) <= 0.3 + tol + 1e-12)


def test_two_overlapping_limits_reach_their_corner_and_stay():
    """Figure 4.23: correcting limit 1 (mass-weighted) moves joint 2 towards its region. In
    ArtiSynth that correction overshoots into region 2 and, limit 1 kept engaged, the next
    step reaches the corner; simjax's correction also keeps free rows out of their regions,
    so joint 2 stops on its boundary, engages there, and the pair holds the corner."""
    system, matter, bodies, lims = chain(2, half=0.3, gravity=(0, 0, 0))
    state = system.realize_topology()
    tol = matter.get_rotary_limit_tol()
    Minv = np.linalg.inv(np.asarray(matter.calc_mass_matrix(system.realize(state, sj.Stage.POSITION))))
    # correcting q0 upwards moves q1 by Minv[1,0]/Minv[0,0] per unit: start just outside limit 2
    # on the side that correction pushes it towards
    ratio = Minv[1, 0] / Minv[0, 0]
    assert abs(ratio) > 0.5
    q1 = -0.3 + 0.002 if ratio < 0 else 0.3 - 0.002
    state = state.with_q(jnp.array([-0.31, q1]))
    traj = sj.simulate(system, state, 0.05, integrator="euler", dt=DT, save_at=50)
    E = np.asarray(traj.discrete["matter"]["limit_engaged"])
    q = np.asarray(traj.q)
    d0 = q[:, 0] + 0.3
    d1 = (q[:, 1] + 0.3) if ratio < 0 else (0.3 - q[:, 1])
    # without the neighbour's row the correction would have moved q1 by ratio * 0.0099
    assert abs(ratio) * (0.01 - tol) > 0.002
    at_corner = (np.abs(d0 + tol) < 1e-9) & (d1 >= -tol - 1e-9) & (d1 <= 1e-12)
    first = int(np.argmax(at_corner))
    assert at_corner[first] and first == 0  # at the corner after the first step
    assert np.all(at_corner[first:])  # and it stays
    assert np.all(E[1:] != 0)  # both limits engaged from the second step on


def test_limits_with_a_bilateral_coupler():
    """Two joints coupled q1 = q0 (a CoordinateCoupler) with a lower stop on q0: the pair
    rests on the stop, the coupler holds, and the stop carries the coupled gravity torque."""
    system, matter, bodies, _ = chain(2, half=5.0)
    sj.Constraint.CoordinateCoupler(matter, lambda x: x[1] - x[0], bodies, [0, 0])
    lim = sj.Constraint.CoordinateLimit(bodies[0], 0, lower=-0.4)
    state = system.realize_topology()
    traj = sj.simulate(system, state, 1.0, integrator="euler", dt=DT)
    fs = system.realize(traj.final_state, sj.Stage.DYNAMICS)
    q = np.asarray(fs.q)
    assert abs(q[1] - q[0]) < 1e-9
    np.testing.assert_allclose(q[0], -0.4 - matter.get_rotary_limit_tol(), atol=1e-9)
    assert np.abs(np.asarray(fs.u)).max() < 1e-9
    f = np.asarray(matter.calc_gravity_and_applied_generalized_forces(fs))
    np.testing.assert_allclose(float(lim.get_multipliers(fs)[0]), -(f[0] + f[1]), rtol=1e-6)


def test_batch_with_different_limits_and_engagements_compiles_once():
    system, _, _, lim = pendulum()
    state = system.realize_topology()

    def run(lo, q0):
        s = lim.set_range(state, lo, 1.0).with_q(jnp.array([q0]))
        tr = sj.simulate(system, s, 0.3, integrator="euler", dt=DT, t0=0.0)
        return tr.final_state.q[0], lim.is_engaged(tr.final_state), lim.get_multipliers(tr.final_state)[0]

    B = 1024
    los = jnp.linspace(-1.2, -0.05, B)
    q0s = jnp.linspace(-0.2, 0.5, B)
    q, e, f = jax.jit(jax.vmap(run))(los, q0s)
    assert set(np.unique(np.asarray(e)).tolist()) == {0, 1}  # some resting, some still falling
    for i in (0, 500, B - 1):
        qi, ei, fi = run(los[i], q0s[i])
        np.testing.assert_allclose(q[i], qi, rtol=1e-12, atol=1e-14)
        assert int(e[i]) == int(ei)
        np.testing.assert_allclose(f[i], fi, rtol=1e-12, atol=1e-12)


def test_gradient_of_a_rollout_resting_on_a_stop_matches_finite_differences():
    system, _, pend, lim = pendulum()
    state = system.realize_topology()

    def resting_torque(p):
        lo, q0, mass = p
        s = lim.set_range(state, lo, 1.0).with_q(jnp.array([q0]))
        s = s.with_instance("matter", "mass", s.instance["matter"]["mass"].at[1].set(mass))
        tr = sj.simulate(system, s, 0.6, integrator="euler", dt=DT, t0=0.0)
        return lim.get_multipliers(tr.final_state)[0] + tr.final_state.q[0]

    p = jnp.array([-0.5, 0.3, 1.0])
    g = jax.grad(resting_torque)(p)
    eps = 1e-6
    fd = np.array(
        [(resting_torque(p.at[i].add(eps)) - resting_torque(p.at[i].add(-eps))) / (2 * eps) for i in range(3)]
    )
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    th = -0.5 - 1e-4  # closed form: torque = m g l cos(lower - tol), q = lower - tol
    np.testing.assert_allclose(g[0], -M * G * LEN * np.sin(th) + 1.0, rtol=1e-6)
    np.testing.assert_allclose(g[2], G * LEN * np.cos(th), rtol=1e-6)


def test_bad_input_gets_clear_errors():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)))
    pin = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform(), name="knee")
    ball = sj.MobilizedBody.Ball(pin, sj.Transform(), body, sj.Transform(), name="hip")
    free = sj.MobilizedBody.Free(matter.Ground(), sj.Transform(), body, sj.Transform(), name="pelvis")
    with pytest.raises(ValueError, match=r"'knee'.*lower=1.0 must not exceed upper=0.0"):
        sj.Constraint.CoordinateLimit(pin, 0, lower=1.0, upper=0.0)
    with pytest.raises(ValueError, match=r"'hip'.*quaternion"):
        sj.Constraint.CoordinateLimit(ball, 0, lower=-1, upper=1)
    with pytest.raises(ValueError, match="out of range"):
        sj.Constraint.CoordinateLimit(pin, 1, lower=-1, upper=1)
    with pytest.raises(ValueError, match="tol must be"):
        sj.Constraint.CoordinateLimit(pin, 0, lower=-1, upper=1, tol=-1.0)
    with pytest.raises(ValueError, match="Ground"):
        sj.Constraint.CoordinateLimit(matter.Ground(), 0, lower=-1, upper=1)
    # a Free body's translation can be limited, in quaternion and Euler-angle modes alike
    height = sj.Constraint.CoordinateLimit(free, 5, lower=0.0)
    lim = sj.Constraint.CoordinateLimit(pin, 0, lower=-1, upper=1)
    state = system.realize_topology()
    assert not height.is_rotary() and lim.is_rotary()
    model = system.model_for(state)
    for euler in (False, True):
        topo = model.topology(euler)
        q, u = height._indices(topo, euler)
        assert q == int(topo.q_start[free.index]) + (5 if not euler else 4)
        assert u == int(topo.u_start[free.index]) + 4
    with pytest.raises(ValueError, match="must not exceed"):
        lim.set_range(state, 0.5, -0.5)
    with pytest.raises(ValueError, match=r"integrator='euler'"):
        sj.simulate(system, state, 0.1, integrator="rk4", dt=1e-3)
    assert "coordinate limits (2 unilateral rows" in system.summary()


def test_batched_lcp_iterates_only_the_unconverged_members_and_equals_unbatched():
    """Under ``vmap`` the active-set loop runs on chunks of the members that have not
    converged (``custom_vmap``); every member's solution equals its own unbatched solve,
    with a shared W (unbatched axis), nested vmaps and gradients."""
    from simjax.constraints import unilateral as uni

    rng = np.random.default_rng(1)
    B, n = 300, 12
    A = rng.normal(size=(B, n, n))
    W = jnp.asarray(A @ A.transpose(0, 2, 1) / n + 0.1 * np.eye(n))
    q = jnp.asarray(rng.normal(size=(B, n)))
    mask = jnp.asarray(rng.random((B, n)) < 0.8)
    solve = lambda W, q, m: uni.solve_lcp(W, q, m, pd=True)  # noqa: E731
    th, ok = jax.jit(jax.vmap(solve))(W, q, mask)
    assert bool(jnp.all(ok))
    for i in range(0, B, 23):
        np.testing.assert_array_equal(np.asarray(solve(W[i], q[i], mask[i])[0]), np.asarray(th[i]))
    w = jnp.einsum("bij,bj->bi", W, th) + q
    assert float(jnp.min(th)) >= 0 and float(jnp.min(jnp.where(mask, w, 0.0))) > -1e-12
    assert float(jnp.max(jnp.abs(jnp.where(mask, th * w, th)))) < 1e-12
    nested = jax.vmap(jax.vmap(solve))(W.reshape(3, 100, n, n), q.reshape(3, 100, n), mask.reshape(3, 100, n))
    nested = nested[0]
    np.testing.assert_array_equal(np.asarray(nested.reshape(B, n)), np.asarray(th))
    shared = jax.vmap(lambda qq: solve(W[0], qq, mask[0])[0])(q)
    np.testing.assert_allclose(np.asarray(shared[5]), np.asarray(solve(W[0], q[5], mask[0])[0]), atol=1e-15)
    # gradients: the implicit rule with the final set held, also through the batched loop
    f = lambda qq: jnp.sum(jax.vmap(lambda a, b, m: solve(a, b, m)[0])(W[:20], qq, mask[:20]) ** 2)  # noqa: E731
    g = jax.grad(f)(q[:20])
    g1 = jax.grad(lambda b: jnp.sum(solve(W[3], b, mask[3])[0] ** 2))(q[3])
    np.testing.assert_allclose(np.asarray(g[3]), np.asarray(g1), atol=1e-12)
