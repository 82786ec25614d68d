"""Assembler: assembly from a bad start, locks, bounds, weights, free-q bookkeeping,
statistics, conditions (QValue, OrientationSensors, custom), implicit gradients, and bad
input. Inverse kinematics against OpenSim's InverseKinematicsSolver is in
``test_ik_oracle.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import fourbar

import simjax as sj

jax.config.update("jax_enable_x64", True)

MB = sj.MobilizedBody


def test_fourbar_assembles_from_a_bad_start_with_locks_bounds_and_weights():
    system, matter, ball = fourbar()
    crank, coupler, rocker = (matter.get_mobilized_body(i) for i in (1, 2, 3))
    bad = system.realize_topology().with_q([2.5, 1.0, 2.0])  # loop wide open (~1.8 m)
    asm = sj.Assembler(system)
    assert asm.get_error_tolerance_in_use() == 1e-4 and asm.get_accuracy_in_use() == 1e-3
    assert asm.get_system_constraints_weight() == np.inf
    out, info = asm.assemble(bad)
    assert bool(info.status == sj.RESULTS.successful) and float(info.error_norm) <= 1e-4
    assert float(jnp.max(jnp.abs(out.qerr))) <= 1e-7  # iterated to accuracy x tolerance
    assert float(asm.calc_current_error_norm()) == pytest.approx(float(info.error_norm), abs=1e-15)
    assert asm.get_num_free_qs() == 3
    assert asm.get_num_goal_evals() > 0 and asm.get_num_assembly_steps() == 1

    # Locked crank: it does not move, the other two close the loop.
    asm.lock_mobilizer(crank)
    assert asm.get_num_free_qs() == 2
    assert asm.get_q_index_of_free_q(0) == 1 and asm.get_free_q_index_of_q(0) is None
    out, info = asm.assemble(bad.with_q([0.3, 0.0, 0.0]))
    assert float(out.q[0]) == 0.3 and float(jnp.max(jnp.abs(out.qerr))) <= 1e-7
    asm.unlock_mobilizer(crank)
    asm.lock_q(crank, 0)
    assert asm.get_num_free_qs() == 2
    asm.unlock_q(crank, 0)

    # Two assemblies exist for a given crank angle (elbow up/down); a bound on the
    # rocker selects one, and the result respects it.
    asm.adopt_assembly_error(sj.QValue(crank, 0, 0.3))
    asm.restrict_q(rocker, 0, -np.pi, -0.2)
    assert asm.get_free_q_bounds(2) == (-np.pi, -0.2)
    out_a, _ = asm.assemble(bad.with_q([0.3, 0.5, 1.0]))
    assert (
        -np.pi <= float(out_a.q[2]) <= -0.2 and float(jnp.max(jnp.abs(out_a.qerr))) <= 1e-7
    )  # accuracy x tol
    asm.restrict_q(rocker, 0, 0.2, np.pi)
    out_b, _ = asm.assemble(bad.with_q([0.3, 0.5, -1.0]))
    assert 0.2 <= float(out_b.q[2]) <= np.pi and float(jnp.max(jnp.abs(out_b.qerr))) <= 1e-7
    assert abs(float(out_a.q[1] - out_b.q[1])) > 0.1  # really the other branch
    asm.unrestrict_q(rocker, 0)
    assert asm.get_free_q_bounds(2) == (-np.inf, np.inf)

    # Goal weights: two conflicting QValue goals on a 1-dof mechanism; the heavier wins.
    asm2 = sj.Assembler(system)
    g1 = asm2.adopt_assembly_goal(sj.QValue(crank, 0, 0.6), 1.0)
    g2 = asm2.adopt_assembly_goal(sj.QValue(rocker, 0, -2.0), 1e-3)
    ref, _ = asm.assemble(bad.with_q([0.6, 0.5, 1.0]))  # exact assembly at crank 0.6
    out1, i1 = asm2.assemble(bad.with_q([0.6, 0.5, 1.0]))
    asm2.set_assembly_condition_weight(g2, 1e3)
    assert asm2.get_assembly_condition_weight(g2) == 1e3
    out2, i2 = asm2.assemble(bad.with_q([0.6, 0.5, 1.0]))
    assert abs(float(out1.q[0]) - 0.6) < abs(float(out2.q[0]) - 0.6)
    assert abs(float(out2.q[2]) + 2.0) < abs(float(out1.q[2]) + 2.0)
    assert abs(float(out1.q[0]) - 0.6) < 0.01 and float(jnp.max(jnp.abs(out2.qerr))) <= 1e-7
    # the goal value is Simbody's: sum of w * (q - value)^2
    want = (float(out2.q[0]) - 0.6) ** 2 + 1e3 * (float(out2.q[2]) + 2.0) ** 2
    assert float(i2.goal) == pytest.approx(want, rel=1e-10)
    assert float(asm2.calc_current_goal()) == pytest.approx(want, rel=1e-10)
    del ref, g1

    # System constraints as a goal, or off: with weight 0 the QValue goals are met exactly
    # and the loop opens.
    asm2.set_system_constraints_weight(0.0)
    out3, _ = asm2.assemble(bad)
    assert float(out3.q[0]) == pytest.approx(0.6, abs=1e-6) and float(out3.q[2]) == pytest.approx(
        -2.0, abs=1e-6
    )
    assert float(jnp.max(jnp.abs(out3.qerr))) > 0.1
    asm2.set_system_constraints_weight(1e6)
    out4, _ = asm2.assemble(bad)
    assert 1e-8 < float(jnp.max(jnp.abs(out4.qerr))) < 1e-2  # a heavy goal: nearly closed

    # Statistics and settings.
    n0 = asm.get_num_initializations()
    asm.set_accuracy(1e-6)
    assert asm.get_error_tolerance_in_use() == pytest.approx(1e-7)
    asm.set_error_tolerance(1e-5)
    assert asm.get_error_tolerance_in_use() == 1e-5
    asm.set_use_rms_error_norm(True)
    assert asm.is_using_rms_error_norm()
    asm.reset_stats()
    assert asm.get_num_goal_evals() == 0 and asm.get_num_assembly_steps() == 0
    asm.assemble(bad.with_q([0.3, 0.5, 1.0]))
    # settings are runtime data: no new problem, no recompile
    assert asm.get_num_initializations() == n0 and asm.get_num_error_jacobian_evals() > 0
    # one solver (its plain and top-level jit), and the analysis of whole turns and branches
    assert len({k[:-1] for k in asm._fns if k[0] != "branches"}) == 1


def test_bad_input_and_contradictory_conditions():
    system, matter, ball = fourbar()
    crank = matter.get_mobilized_body(1)
    s = system.realize_topology().with_q([0.3, 0.5, 1.0])
    asm = sj.Assembler(system)
    asm.adopt_assembly_error(sj.QValue(crank, 0, 0.7))
    asm.adopt_assembly_error(sj.QValue(crank, 0, 0.9))
    with pytest.raises(sj.AssemblyFailed, match=r"tolerance.*worst error is in condition \d+ 'QValue'"):
        asm.assemble(s)
    # under jit/vmap: a status, no exception
    _, info = jax.jit(asm.solve)(s)
    assert bool(info.status == sj.RESULTS.assembly_infeasible) and not bool(info.success)

    markers = sj.Markers()
    markers.add_marker("tip", "no_such_body", [0, 0, 0])
    with pytest.raises(ValueError, match="no mobilized body named 'no_such_body'"):
        sj.Assembler(system).adopt_assembly_goal(markers)
    with pytest.raises(ValueError, match="station must be 3 finite numbers"):
        sj.Markers().add_marker("m", crank, [0, 0])
    other, omatter, _ = fourbar()
    with pytest.raises(ValueError, match="not part of this Assembler's System"):
        m2 = sj.Markers()
        m2.add_marker("m", omatter.get_mobilized_body(1), [0, 0, 0])
        sj.Assembler(system).adopt_assembly_goal(m2)

    asm = sj.Assembler(system)
    mk = sj.Markers()
    mk.add_marker("a", crank, [1, 0, 0])
    mk.add_marker("b", matter.get_mobilized_body(2), [1, 0, 0])
    asm.adopt_assembly_goal(mk)
    with pytest.raises(ValueError, match=r"expected observations of shape \(2, 3\)"):
        mk.move_all_observations(np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"expected observations of shape \(T, 2, 3\)"):
        asm.track(s, np.zeros((4, 3, 3)))
    mk.move_all_observations(np.full((2, 3), np.nan))
    with pytest.raises(sj.AssemblyFailed, match="nothing to fit"):
        asm.assemble(s)
    frames = np.stack([np.full((2, 3), np.nan), [[0.9, 0.3, 0], [2.5, 0.6, 0]]])
    _, infos = asm.track(s, frames)
    no_data = np.asarray(infos.result == sj.RESULTS.assembly_no_data)
    R = sj.RESULTS
    ok = np.asarray((infos.result == R.successful) | (infos.result == R.assembly_max_iterations))
    assert no_data.tolist() == [True, False] and bool(ok[1])

    with pytest.raises(ValueError, match="q index 1 out of range"):
        asm.lock_q(crank, 1)
    with pytest.raises(ValueError, match="lower <= upper"):
        asm.restrict_q(crank, 0, 1.0, -1.0)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        asm.adopt_assembly_goal(sj.QValue(crank, 0, 0.0), -1.0)
    with pytest.raises(ValueError, match="q index 3 out of range"):
        sj.Assembler(system).adopt_assembly_goal(sj.QValue(crank, 3, 0.0))
    with pytest.raises(TypeError, match="AssemblyCondition"):
        asm.adopt_assembly_goal("markers")


def _chain(n=3, seed=0):
    """n Pin links in a vertical plane, 0.4 m each, a marker pair on each link."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0, -0.2, 0], sj.Inertia(0.05, 0.01, 0.05))
    bodies, parent = [], matter.Ground()
    for i in range(n):
        X_PF = sj.Transform(p=[0, -0.4, 0] if i else [0, 0, 0])
        parent = MB.Pin(parent, X_PF, mp, sj.Transform(), name=f"link{i}")
        bodies.append(parent)
    return system, matter, bodies


def test_implicit_gradients_match_finite_differences():
    """d(assembled q)/d(observations, stations, weights, model parameters), by implicit
    differentiation, vs central differences of the whole solve (accuracy 1e-14)."""
    system, matter, bodies = _chain(3)
    s = system.realize_topology()
    asm = sj.Assembler(system)
    asm.set_accuracy(1e-14)
    mk = sj.Markers()
    rng = np.random.default_rng(0)
    for i, b in enumerate(bodies):
        mk.add_marker(f"m{i}a", b, [0.05, -0.1, 0.02])
        mk.add_marker(f"m{i}b", b, [-0.03, -0.35, 0.0], weight=0.5 + i)
    asm.adopt_assembly_goal(mk)
    q_true = np.array([0.4, -0.7, 0.5])
    truth = system.realize(s.with_q(q_true), sj.Stage.POSITION)
    obs = np.stack([mk.find_current_marker_location(k, truth) for k in range(6)])
    obs = obs + rng.normal(0, 0.01, obs.shape)  # nonzero residuals: the Hessian matters
    mk.move_all_observations(obs)
    s0 = s.with_q(q_true + 0.05)
    P = asm.get_parameters()

    def solve_q(p, state=s0):
        out, info = asm.solve(state, p)
        return out.q

    # One direction in (observations, stations, weights) together, forward and reverse.
    keys = ("observations", "stations", "weights")
    direction = {k: jnp.asarray(rng.normal(size=np.shape(P["conditions"][1][k]))) for k in keys}

    def along(t):
        p = jax.tree.map(lambda a: a, P)
        p["conditions"][1] = dict(
            p["conditions"][1], **{k: P["conditions"][1][k] + t * direction[k] for k in keys}
        )
        return solve_q(p)

    _, d = jax.jvp(along, (0.0,), (1.0,))
    fd = (along(1e-4) - along(-1e-4)) / 2e-4
    np.testing.assert_allclose(np.asarray(d), np.asarray(fd), rtol=1e-5, atol=1e-8)
    w = jnp.array([1.0, 2.0, 3.0])
    g = jax.grad(lambda p: solve_q(p) @ w)(P)
    g_dir = sum(jnp.sum(g["conditions"][1][k] * direction[k]) for k in keys)
    assert float(g_dir) == pytest.approx(float(d @ w), rel=1e-8)
    for k in keys:  # each part on its own matters
        assert float(jnp.max(jnp.abs(g["conditions"][1][k]))) > 1e-3

    # a model parameter: the length of link 1 (its child's inboard frame offset)
    def by_length(L):
        st = bodies[2].set_inboard_frame(s0, sj.Transform(p=jnp.array([0.0, -L, 0.0])))
        return solve_q(P, st)

    _, d = jax.jvp(by_length, (0.4,), (1.0,))
    fd = (by_length(0.4 + 1e-4) - by_length(0.4 - 1e-4)) / 2e-4
    np.testing.assert_allclose(np.asarray(d), np.asarray(fd), rtol=1e-5, atol=1e-8)

    # through the batched track: d(sum of q over frames)/d(observations)
    frames = np.stack([obs, obs + 0.01, obs - 0.02])
    loss = lambda fr: jnp.sum(asm.track(s0, fr)[0].q ** 2)
    g = jax.grad(loss)(jnp.asarray(frames))
    v = rng.normal(size=frames.shape)
    fd = (loss(frames + 1e-4 * v) - loss(frames - 1e-4 * v)) / 2e-4
    assert float(jnp.sum(g * v)) == pytest.approx(float(fd), rel=1e-5)


def _planar_arm(L1=0.4, L2=0.3, mid=False, accuracy=1e-14):
    """Two Pin links in the xy-plane (lengths L1, L2), a marker at the tip (and one on the
    upper arm with ``mid``); returns the State and ``solve(observations) -> q``."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0.2, 0, 0], sj.Inertia(0.05, 0.1, 0.1))
    b1 = MB.Pin(matter.Ground(), sj.Transform(), mp, sj.Transform(), name="upper")
    b2 = MB.Pin(b1, sj.Transform(p=[L1, 0, 0]), mp, sj.Transform(), name="fore")
    asm = sj.Assembler(system)
    asm.set_accuracy(accuracy)
    mk = sj.Markers()
    mk.add_marker("tip", b2, [L2, 0, 0])
    if mid:
        mk.add_marker("mid", b1, [L1 / 2, 0.05, 0])
    asm.adopt_assembly_goal(mk)
    P = asm.get_parameters()
    s = system.realize_topology()

    def solve(obs, q0):
        p = jax.tree.map(lambda a: a, P)
        p["conditions"][1] = dict(p["conditions"][1], observations=obs)
        return asm.solve(s.with_q(q0), p)[0].q

    return solve


def _two_link_ik(t, L1=0.4, L2=0.3):
    """Closed-form IK of the planar arm (elbow q2 > 0) for a tip target t = (x, y)."""
    x, y = t[0], t[1]
    q2 = jnp.arccos((x * x + y * y - L1**2 - L2**2) / (2 * L1 * L2))
    return jnp.stack([jnp.arctan2(y, x) - jnp.arctan2(L2 * jnp.sin(q2), L1 + L2 * jnp.cos(q2)), q2])


@pytest.mark.parametrize(
    "target", [(0.45, 0.25), (0.1, -0.5), (0.6985, 0.01)], ids=["random", "other", "near-straight"]
)
def test_assembler_second_derivatives_match_the_closed_form_ik(target):
    """Implicit differentiation to second order (issue 16): d2q/dt2 of the assembled pose
    w.r.t. the observed tip position equals the closed form's, forward-over-forward and
    forward-over-reverse, also near the straight-arm singularity (elbow ~0.2 rad), where
    the derivatives are large. Before, the Hessian of q1 was not even symmetric."""
    solve = _planar_arm()
    t0 = jnp.array(target)
    q_closed = _two_link_ik(t0)
    obs = lambda t: jnp.concatenate([t, jnp.zeros(1)])[None]  # noqa: E731
    f = lambda t: solve(obs(t), q_closed + 0.05)  # noqa: E731
    np.testing.assert_allclose(np.asarray(f(t0)), np.asarray(q_closed), atol=1e-10)
    np.testing.assert_allclose(
        np.asarray(jax.jacfwd(f)(t0)), np.asarray(jax.jacfwd(_two_link_ik)(t0)), rtol=1e-6
    )
    H = jax.jacfwd(jax.jacfwd(f))(t0)
    H_rev = jax.hessian(f)(t0)  # jacfwd of jacrev
    H_closed = jax.hessian(_two_link_ik)(t0)
    # Near the straight arm the entries reach 1.6e4 and the solve's last 1e-10 in q is
    # amplified by the third derivatives: 1.2e-6 of the scale was measured there.
    scale = float(jnp.max(jnp.abs(H_closed)))
    np.testing.assert_allclose(np.asarray(H), np.asarray(H_closed), atol=5e-6 * scale)
    np.testing.assert_allclose(np.asarray(H_rev), np.asarray(H_closed), atol=5e-6 * scale)


def test_assembler_gradients_at_the_default_accuracy_and_check_grads_order_2():
    """With a residual left (two markers, not both reachable) the solve stops at its
    tolerance (default accuracy 1e-3 leaves q ~7e-3 rad short); the derivative is taken
    at the optimum all the same (a Newton polish inside the implicit rule), so it equals
    the tightly converged solve's (it was off by 2.7e-2 before). ``check_grads`` to
    second order against central differences of the converged solve."""
    from jax.test_util import check_grads

    obs = jnp.array([[0.45, 0.25, 0.0], [0.15, 0.1, 0.02]])
    q0 = jnp.array([0.3, 1.0])
    tight = _planar_arm(mid=True)
    loose = _planar_arm(mid=True, accuracy=1e-3)
    assert float(jnp.max(jnp.abs(tight(obs, q0) - loose(obs, q0)))) > 1e-3  # really loose
    J_tight = jax.jacfwd(tight)(obs, q0)
    np.testing.assert_allclose(np.asarray(jax.jacfwd(loose)(obs, q0)), np.asarray(J_tight), atol=1e-7)
    H = jax.hessian(lambda o: tight(o, q0)[0])(obs).reshape(6, 6)
    np.testing.assert_allclose(np.asarray(H), np.asarray(H.T), atol=1e-12)
    check_grads(lambda o: tight(o, q0), (obs,), order=2, modes=["fwd", "rev"], eps=1e-4, atol=1e-5, rtol=1e-5)


def test_constrained_ik_keeps_the_coupler_exact_and_is_optimal():
    """Markers on a chain whose joints 1 and 2 are coupled (q2 = 0.5 q1 + 0.1): the coupler
    holds to machine precision and the solution is the minimum of the reduced problem."""
    from scipy.optimize import minimize

    system, matter, bodies = _chain(3)
    sj.Constraint.CoordinateCoupler(matter, lambda q: q[1] - 0.5 * q[0] - 0.1, [bodies[1], bodies[2]], [0, 0])
    s = system.realize_topology()
    asm = sj.Assembler(system)
    asm.set_accuracy(1e-10)
    mk = sj.Markers()
    for i, b in enumerate(bodies):
        mk.add_marker(f"m{i}", b, [0.05, -0.3, 0.0])
    asm.adopt_assembly_goal(mk)
    rng = np.random.default_rng(1)
    obs = np.array([[0.2, -0.3, 0.0], [0.5, -0.5, 0.0], [0.7, -0.9, 0.05]]) + rng.normal(0, 0.01, (3, 3))
    mk.move_all_observations(obs)
    out, info = asm.assemble(s)
    assert abs(float(out.q[2] - 0.5 * out.q[1] - 0.1)) < 1e-12

    def reduced(a):
        q = np.array([a[0], a[1], 0.5 * a[1] + 0.1])
        st = system.realize(s.with_q(q), sj.Stage.POSITION)
        return float(asm.calc_current_goal(st))

    ref = minimize(
        reduced, [0.0, 0.0], method="Nelder-Mead", options=dict(xatol=1e-10, fatol=1e-16, maxiter=4000)
    )
    np.testing.assert_allclose(np.asarray(out.q[:2]), ref.x, atol=1e-5)
    assert float(info.goal) <= ref.fun * (1 + 1e-9)
    # stationary on the constraint manifold: the reduced gradient vanishes
    a, h = np.asarray(out.q[:2]), 1e-5
    grad = [(reduced(a + h * ei) - reduced(a - h * ei)) / (2 * h) for ei in np.eye(2)]
    assert np.max(np.abs(grad)) < 1e-6  # goal converged to accuracy 1e-10


def test_orientation_sensors_custom_conditions_and_quaternion_states():
    """IMU-style sensors on a Ball chain (quaternions in the user's State, Euler angles
    inside the Assembler); a custom error condition and a custom scalar goal."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0, -0.2, 0], sj.Inertia(0.05, 0.01, 0.05))
    b1 = MB.Ball(matter.Ground(), sj.Transform(), mp, sj.Transform(), name="upper")
    b2 = MB.Ball(b1, sj.Transform(p=[0, -0.4, 0]), mp, sj.Transform(), name="lower")
    s = system.realize_topology()
    assert s.nq == 8
    R1 = np.asarray(sj.Rotation.body_fixed([0.3, -0.2, 0.5]))
    R2 = np.asarray(sj.Rotation.body_fixed([-0.4, 0.6, 0.1]))
    asm = sj.Assembler(system)
    os_ = sj.OrientationSensors()
    R_BS = np.asarray(sj.Rotation.about_z(0.3))
    os_.add_osensor("imu1", b1, R_BS)
    os_.add_osensor("imu2", "lower", R_BS, weight=2.0)
    asm.adopt_assembly_goal(os_)
    os_.move_all_observations(np.stack([R1 @ R_BS, R2 @ R_BS]))
    out, info = asm.assemble(s)
    assert out.nq == 8 and bool(info.status == sj.RESULTS.successful)
    pos = system.realize(out, sj.Stage.POSITION)
    np.testing.assert_allclose(np.asarray(b1.get_body_rotation(pos)), R1, atol=1e-7)
    np.testing.assert_allclose(np.asarray(b2.get_body_rotation(pos)), R2, atol=1e-7)
    assert float(jnp.max(os_.find_current_osensor_errors())) < 1e-7
    # the Assembler's internal State uses Euler angles; updating a quaternion State
    st = asm.update_from_internal_state(s)
    assert st.nq == 8 and asm.get_internal_state().nq == 6
    np.testing.assert_allclose(np.asarray(st.q), np.asarray(out.q), atol=1e-12)

    # custom error: the lower body's origin at height -0.3 (a plain JAX function)
    height = sj.AssemblyCondition.Custom(lambda st: b2.get_body_origin_location(st)[1:2] + 0.3, name="height")
    asm.adopt_assembly_error(height)
    out, info = asm.assemble(s)
    p = system.realize(out, sj.Stage.POSITION)
    assert abs(float(b2.get_body_origin_location(p)[1]) + 0.3) <= 1e-7
    # custom scalar goal with parameters: pull the lower body's origin toward a point
    pull = sj.AssemblyCondition.Custom(
        lambda st, prm: jnp.sum((b2.get_body_origin_location(st) - prm) ** 2),
        params=jnp.array([0.1, -0.3, 0.1]),
        name="pull",
    )
    asm.adopt_assembly_goal(pull, 10.0)
    out2, info2 = asm.assemble(s)
    p2 = system.realize(out2, sj.Stage.POSITION)
    d_before = np.linalg.norm(np.asarray(b2.get_body_origin_location(p)) - [0.1, -0.3, 0.1])
    d_after = np.linalg.norm(np.asarray(b2.get_body_origin_location(p2)) - [0.1, -0.3, 0.1])
    assert d_after < 0.6 * d_before and abs(float(b2.get_body_origin_location(p2)[1]) + 0.3) <= 1e-7


def test_observation_order_weights_numerical_derivatives_and_reporters():
    system, matter, bodies = _chain(3)
    s = system.realize_topology()
    q_true = np.array([0.3, -0.5, 0.4])
    truth = system.realize(s.with_q(q_true), sj.Stage.POSITION)
    mk = sj.Markers()
    for i, b in enumerate(bodies):
        mk.add_marker(f"m{i}", b, [0.05, -0.3, 0.0])
    mk.add_marker(bodies[0], [0.0, -0.1, 0.05], weight=0.0)  # unnamed, ignored (weight 0)
    assert mk.get_marker_name(3) == "_UNNAMED_3" and mk.get_marker_weight(3) == 0.0
    asm = sj.Assembler(system)
    asm.adopt_assembly_goal(mk)
    asm.set_accuracy(1e-10)
    seen = []
    asm.add_reporter(lambda st: seen.append(float(st.q[0])))
    # observations arrive in a different order and without marker m1
    mk.define_observation_order(["m2", "m0", 3])
    assert mk.get_num_observations() == 3 and mk.get_observation_index_for_marker(1) is None
    assert mk.get_marker_index_for_observation(0) == 2
    loc = np.asarray(mk.find_current_marker_locations(truth))
    mk.move_one_observation(0, loc[2])
    mk.move_one_observation(1, loc[0])
    mk.move_one_observation(2, [9.0, 9.0, 9.0])  # weight 0: no effect
    out, info = asm.assemble(s)
    assert len(seen) == 1 and seen[0] == pytest.approx(float(out.q[0]))
    errs = np.asarray(mk.find_current_marker_errors())
    assert np.isnan(errs[1]) and errs[0] < 1e-8 and errs[2] < 1e-8
    # autodiff and central-difference derivatives give the same answer
    asm.set_force_numerical_jacobian(True)
    assert not asm.is_initialized()
    out_fd, info_fd = asm.assemble(s)
    assert asm.is_initialized()
    np.testing.assert_allclose(np.asarray(out_fd.q), np.asarray(out.q), atol=1e-7)
    # the System changes after the Assembler was made: it follows the new topology
    sj.Constraint.CoordinateCoupler(matter, lambda q: q[0] - 0.1, [bodies[0]], [0])
    out2, _ = asm.assemble(system.realize_topology())
    assert float(out2.q[0]) == pytest.approx(0.1, abs=1e-9)


def test_track_reports_whole_turns_and_euler_branches_continuously():
    """A pin driven through three turns, a ball whose middle Euler angle passes pi/2 and a
    screw (its angle also translates: never moved by whole turns), tracked from markers.
    Segments solved apart start cold, so the solver lands on other turns and on the other
    Euler branch ``(a + pi, pi - b, c + pi)`` of the same pose; ``track`` reports the
    equivalent nearest the frame before (batched and sequential: the truth, continuous),
    single solves the one nearest their start, and in a preferred range where one fits."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0, -0.2, 0], sj.Inertia(0.05, 0.01, 0.05))
    wheel = MB.Pin(matter.Ground(), sj.Transform(), mp, sj.Transform(), name="wheel")
    head = MB.Ball(matter.Ground(), sj.Transform(p=[1, 0, 0]), mp, sj.Transform(), name="head")
    screw = MB.Screw(matter.Ground(), sj.Transform(p=[-1, 0, 0]), mp, sj.Transform(), pitch=0.1)
    s = matter.set_use_euler_angles(system.realize_topology(), True)  # q: pin, ball a b c, screw
    mk = sj.Markers()
    for b in (wheel, head, screw):
        for station in ([0.3, 0, 0], [0, 0.2, 0.05], [0, 0, 0.25]):
            mk.add_marker(b, station)
    asm = sj.Assembler(system)
    asm.adopt_assembly_goal(mk)
    asm.set_accuracy(1e-10)
    T = 24
    t = np.linspace(0, 1, T)
    truth = np.stack([6 * np.pi * t + 0.5, 0.3 * np.sin(3 * t), 2.5 * t, 0.2 * np.cos(2 * t), 8 * t], axis=1)
    locate = jax.jit(
        jax.vmap(lambda q: mk.find_current_marker_locations(system.realize(s.with_q(q), sj.Stage.POSITION)))
    )
    frames = np.asarray(locate(jnp.asarray(truth)))
    states, infos = asm.track(s, frames)  # 5 segments: four cold starts at q = 0
    assert np.all(np.asarray(infos.status == sj.RESULTS.successful))
    np.testing.assert_allclose(np.asarray(states.q), truth, atol=1e-6)
    # Simbody's sequential use: assemble frame 0, then track(t) frame by frame
    mk.move_all_observations(frames[0])
    first, _ = asm.assemble(s)
    seq = [np.asarray(first.q)]
    for k in range(1, T):
        mk.move_all_observations(frames[k])
        asm.track(float(t[k]))
        seq.append(np.asarray(asm.get_internal_state().q))
    np.testing.assert_allclose(np.array(seq), truth, atol=1e-6)
    # single solves: the equivalent nearest the start (the start's turn, the start's branch)
    pose = np.array([6.0, 0.2, 2.5, -0.1, 0.5])  # pin 6.0 = -0.283 + 2 pi; ball past pi/2
    mk.move_all_observations(np.asarray(locate(jnp.asarray(pose[None])))[0])
    out, _ = asm.assemble(s)
    np.testing.assert_allclose(np.asarray(out.q), pose - [2 * np.pi, 0, 0, 0, 0], atol=1e-6)
    other = pose + [4 * np.pi, np.pi, np.pi - 2 * pose[2], np.pi, 0]  # two turns up, other branch
    out, _ = asm.assemble(s.with_q(other + 0.05))
    np.testing.assert_allclose(np.asarray(out.q), other, atol=1e-6)
    # a preferred range (OpenSim's <range> of an unclamped coordinate) wins where a turn fits
    asm.prefer_q_range(wheel, 0, 5.0, 7.0)
    out, _ = asm.assemble(s)
    np.testing.assert_allclose(np.asarray(out.q), pose, atol=1e-6)
    # the same pose throughout: the markers are where the solver put them
    np.testing.assert_allclose(np.asarray(locate(states.q)), frames, atol=1e-6)
