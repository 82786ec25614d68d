"""Constraints: every kind's derivative chain, G, workless forces, enable/disable, errors.

Checks that don't need a peer: the velocity errors are the time derivatives of the
position errors and the acceleration errors those of the velocity errors (central finite
differences along the motion), G is the autodiff Jacobian of the velocity errors, the
multipliers' forces do no work, and a closed chain built from a free body plus a Ball
constraint moves exactly like the equivalent Ball joint.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import fourbar

import simjax as sj
from simjax.model.topology import Topology

jax.config.update("jax_enable_x64", True)


def _mp(seed: int) -> sj.MassProperties:
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.1, 0.15, 3)
    return sj.MassProperties(rng.uniform(0.5, 2.0), rng.uniform(-0.1, 0.1, 3), sj.Inertia(*d))


def build(kinds: tuple[str, ...] | None = None):
    """A tree with every mobilizer family constrained by every constraint kind."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    G = matter.Ground()
    A = sj.MobilizedBody.Pin(G, sj.Transform(p=[0, 0.5, 0]), _mp(1), sj.Transform(p=[0, 0.4, 0]), name="A")
    B = sj.MobilizedBody.Ball(
        A, sj.Transform(p=[0, -0.3, 0.1]), _mp(2), sj.Transform(p=[0.1, 0.3, 0]), name="B"
    )
    C = sj.MobilizedBody.Slider(B, sj.Transform(p=[0.2, 0, 0]), _mp(3), sj.Transform(), name="C")
    D = sj.MobilizedBody.Free(G, sj.Transform(p=[1, 0, 0]), _mp(4), sj.Transform(), name="D")
    E = sj.MobilizedBody.Universal(
        D, sj.Transform(p=[0, -0.2, 0]), _mp(5), sj.Transform(p=[0, 0.2, 0]), name="E"
    )
    H = sj.MobilizedBody.Free(E, sj.Transform(p=[0.1, -0.2, 0]), _mp(6), sj.Transform(), name="H")
    cons = {}
    k = lambda name: kinds is None or name in kinds
    if k("Ball"):
        cons["Ball"] = sj.Constraint.Ball(B, [0.1, -0.2, 0.05], E, [0.0, -0.3, 0.1])
    if k("Rod"):
        cons["Rod"] = sj.Constraint.Rod(A, [0.1, 0, 0], D, [0, 0.1, 0], 0.9)
    if k("ConstantCoordinate"):
        cons["ConstantCoordinate"] = sj.Constraint.ConstantCoordinate(C, 0, 0.1)
    if k("ConstantSpeed"):
        cons["ConstantSpeed"] = sj.Constraint.ConstantSpeed(A, 0, 0.5)
    if k("ConstantAcceleration"):
        cons["ConstantAcceleration"] = sj.Constraint.ConstantAcceleration(E, 1, -0.3)
    if k("CoordinateCoupler"):
        cons["CoordinateCoupler"] = sj.Constraint.CoordinateCoupler(
            matter, lambda x: jnp.sin(x[0]) * x[1] - 0.2 * x[2] ** 2, [A, D, D], [0, 4, 5]
        )
    if k("SpeedCoupler"):
        cons["SpeedCoupler"] = sj.Constraint.SpeedCoupler(
            matter, lambda x: x[0] + 2.0 * x[1] * jnp.cos(x[2]) - 0.1, [D, E], [2, 0], [A], [0]
        )
    if k("PrescribedMotion"):
        cons["PrescribedMotion"] = sj.Constraint.PrescribedMotion(
            matter, lambda t: 0.3 * jnp.sin(2.0 * t[0]), E, 0
        )
    if k("Custom"):
        # The seed's ExampleConstraint: distance between two body origins, (r.r - d^2)/2.
        cons["Custom"] = sj.Constraint.Custom(
            matter,
            bodies=[C, E],
            position_errors=lambda ctx: (
                (
                    jnp.sum((ctx.body_origin_location(1) - ctx.body_origin_location(0)) ** 2)
                    - ctx.param("d") ** 2
                )
                / 2
            ),
            params={"d": 0.7},
        )
    if k("CustomNonholonomic"):
        # velocity-level: a station of E moves with no velocity along B's x axis (in B's frame)
        cons["CustomNonholonomic"] = sj.Constraint.Custom(
            matter,
            bodies=[B, H],
            velocity_errors=lambda ctx: ctx.body_rotation(0)[:, 0] @ ctx.station_velocity(1, [0.1, 0, 0]),
        )
    if k("CustomAcceleration"):
        cons["CustomAcceleration"] = sj.Constraint.Custom(
            matter, bodies=[H], acceleration_errors=lambda ctx: ctx.body_acceleration(0)[3:5] - ctx.time
        )
    state = system.realize_topology()
    return system, matter, cons, state, dict(A=A, B=B, C=C, D=D, E=E, H=H)


def build_geometric():
    """Free and ball bodies tied by every body-geometry constraint kind (14 rows, nu 27)."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    G = matter.Ground()
    X = lambda *p: sj.Transform(p=list(p))
    P1 = sj.MobilizedBody.Free(G, X(0, 1, 0), _mp(11), X(0, 0, 0), name="P1")
    P2 = sj.MobilizedBody.Free(P1, X(0.3, 0, 0), _mp(12), X(0, 0, 0), name="P2")
    P3 = sj.MobilizedBody.Free(G, X(1, 0, 0), _mp(13), X(0, 0, 0), name="P3")
    P4 = sj.MobilizedBody.Ball(P3, X(0, -0.3, 0), _mp(14), X(0, 0.2, 0), name="P4")
    P5 = sj.MobilizedBody.Free(G, X(-1, 0, 0), _mp(15), X(0, 0, 0), name="P5")
    R1 = np.asarray(sj.Rotation.body_fixed([0.3, -0.2, 0.5], "xyz"))
    cons = dict(
        Weld=sj.Constraint.Weld(P1, sj.Transform(R1, [0.1, 0, 0.2]), P3, sj.Transform(p=[0, 0.1, 0])),
        PointInPlane=sj.Constraint.PointInPlane(P2, [0, 1, 1], 0.2, P4, [0.1, 0.1, 0]),
        PointOnLine=sj.Constraint.PointOnLine(P1, [1, 0.2, 0], [0, 0.1, 0], P5, [0.05, 0, 0.1]),
        ConstantAngle=sj.Constraint.ConstantAngle(P2, [1, 0, 0], P5, [0, 1, 0.5], 1.0),
        ConstantOrientation=sj.Constraint.ConstantOrientation(P4, np.eye(3), P2, R1),
        NoSlip1D=sj.Constraint.NoSlip1D(P3, [0.1, 0.2, 0.3], [0, 0, 1], P2, P5),
    )
    return system, matter, cons, system.realize_topology(), dict(P1=P1, P2=P2, P3=P3, P4=P4, P5=P5)


def random_state(state, seed=0):
    rng = np.random.default_rng(seed)
    q = np.array(state.q) + rng.uniform(-0.6, 0.6, state.nq)
    u = rng.uniform(-1.0, 1.0, state.nu)
    return state.with_q(q).with_u(u).with_time(0.37)


@pytest.fixture(scope="module")
def model():
    return build()


@pytest.fixture(scope="module")
def geometric():
    return build_geometric()


def test_geometric_kinds_derivative_chain_jacobian_and_power(geometric):
    system, matter, cons, state, _ = geometric
    s = random_state(state, 11)
    udot = np.random.default_rng(2).uniform(-1, 1, s.nu)
    mp, mv, ma = matter.get_num_constraint_equations(s)
    assert (mp, mv, ma) == (6 + 1 + 2 + 1 + 3, 1, 0)
    qerr, uerr, aerr, qdot = _errs(system, s, udot)
    h = 1e-6
    shift = lambda e: s.with_q(s.q + e * h * qdot).with_u(s.u + e * h * udot)
    (qp, up, _, _), (qm, um, _, _) = _errs(system, shift(1), udot), _errs(system, shift(-1), udot)
    np.testing.assert_allclose((qp[:mp] - qm[:mp]) / (2 * h), uerr[:mp], atol=2e-8)
    np.testing.assert_allclose((up - um) / (2 * h), aerr, atol=2e-7)
    sv = system.realize(s, sj.Stage.VELOCITY)
    J = jax.jacfwd(lambda u: system.realize(s.with_u(u), sj.Stage.VELOCITY).uerr)(s.u)
    np.testing.assert_allclose(matter.calc_g(sv), J, atol=1e-12)
    # workless: with G u = 0 every constraint's power vanishes
    u = np.asarray(s.u) - np.linalg.pinv(np.asarray(J)) @ np.asarray(sv.uerr)
    sa = system.realize(s.with_u(u), sj.Stage.ACCELERATION)
    assert np.abs(sa.udoterr).max() < 1e-10
    for name, c in cons.items():
        assert abs(float(c.calc_power(sa))) < 1e-10, name
    # Simbody's row definitions at simple configurations
    assert cons["Weld"].get_position_errors(sv).shape == (6,)
    assert cons["PointOnLine"].get_position_errors(sv).shape == (2,)


def _errs(system, s, udot):
    s = system.realize(s, sj.Stage.VELOCITY)
    m = system.get_matter_subsystem()
    G, b = m.calc_g_and_b(s)
    return s.qerr, s.uerr, G @ udot - b, s.qdot


def test_error_chain_is_exact_time_derivative(model):
    system, matter, cons, state, _ = model
    s = random_state(state)
    udot = np.random.default_rng(1).uniform(-1, 1, s.nu)
    mp, mv, ma = matter.get_num_constraint_equations(s)
    assert (mp, mv, ma) == (3 + 1 + 1 + 1 + 1 + 1, 1 + 1 + 1, 1 + 2)
    qerr, uerr, aerr, qdot = _errs(system, s, udot)
    h = 1e-6

    def at(e):
        return _errs(
            system, s.with_q(s.q + e * h * qdot).with_u(s.u + e * h * udot).with_time(s.t + e * h), udot
        )

    (qp, up, _, _), (qm, um, _, _) = at(1), at(-1)
    # d/dt perr == pverr (holonomic rows); quaternion rows are ignored
    np.testing.assert_allclose((qp[:mp] - qm[:mp]) / (2 * h), uerr[:mp], atol=2e-8)
    # d/dt uerr == udotErr for the holonomic and nonholonomic rows
    np.testing.assert_allclose((up - um) / (2 * h), aerr[: mp + mv], atol=2e-7)


def test_g_is_jacobian_of_velocity_errors(model):
    system, matter, cons, state, _ = model
    s = system.realize(random_state(state, 3), sj.Stage.VELOCITY)
    G = matter.calc_g(s)
    mp, mv, ma = matter.get_num_constraint_equations(s)
    J = jax.jacfwd(lambda u: system.realize(s.with_u(u), sj.Stage.VELOCITY).uerr)(s.u)
    np.testing.assert_allclose(G[: mp + mv], J, atol=1e-12)
    # acceleration-only rows: d(udotErr)/d(udot)
    JA = jax.jacfwd(lambda ud: cons["CustomAcceleration"].calc_acceleration_error_from_udot(s, ud))(s.u)
    np.testing.assert_allclose(
        cons["CustomAcceleration"].calc_acceleration_constraint_matrix_a(s), JA, atol=1e-12
    )
    # per-constraint matrices are the global rows
    P = cons["Ball"].calc_position_constraint_matrix_p(s)
    np.testing.assert_allclose(P, G[0:3], atol=1e-14)
    V = cons["SpeedCoupler"].calc_velocity_constraint_matrix_v(s)
    np.testing.assert_allclose(V, G[mp + 1 : mp + 2], atol=1e-14)
    PNinv = cons["Rod"].calc_position_constraint_matrix_pn_inv(s)
    Jq = jax.jacfwd(lambda q: system.realize(s.with_q(q), sj.Stage.POSITION).qerr[3:4])(s.q)
    np.testing.assert_allclose(PNinv, Jq, atol=1e-12)


def test_forward_dynamics_satisfies_constraints_and_forces_are_workless(model):
    system, matter, cons, state, _ = model
    s = system.realize(random_state(state, 5), sj.Stage.VELOCITY)
    # make u satisfy the velocity constraints of the time-independent rows: u -> u - G^+ uerr
    G = np.asarray(matter.calc_g(s))
    mp, mv, ma = matter.get_num_constraint_equations(s)
    Gv = G[: mp + mv]
    u = np.asarray(s.u) - np.linalg.pinv(Gv) @ np.asarray(s.uerr)
    s = system.realize(s.with_u(u), sj.Stage.ACCELERATION)
    # constant speed / prescribed motion rows have a rhs, so only the scleronomic rows are zero
    assert np.abs(s.udoterr).max() < 1e-10
    # M udot + G^T lambda = f
    M = matter.calc_mass_matrix(s)
    f = matter.calc_gravity_and_applied_generalized_forces(s) - matter.calc_bias_forces(s)
    np.testing.assert_allclose(M @ s.udot + matter.calc_g(s).T @ s.multipliers, f, atol=1e-11)
    # the body + mobility force split equals G^T lambda
    F, tau = matter.calc_constraint_forces_from_multipliers(s, s.multipliers)
    np.testing.assert_allclose(
        matter.multiply_by_system_jacobian_transpose(s, F) + tau,
        matter.calc_g(s).T @ s.multipliers,
        atol=1e-11,
    )
    for name in ("Ball", "Rod", "Custom", "ConstantCoordinate", "CoordinateCoupler", "CustomNonholonomic"):
        c = cons[name]
        lam = c.get_multipliers(s)
        assert lam.shape[0] >= 1
        assert abs(float(c.calc_power(s))) < 1e-10, name


def test_disable_zeroes_rows_and_multiplier_read_is_an_error(model):
    system, matter, cons, state, _ = model
    s = random_state(state, 7)
    c = cons["Ball"]
    assert not bool(c.is_disabled(s))
    sd = c.disable(s)
    assert bool(c.is_disabled(sd))
    assert c.get_num_constraint_equations_in_use(sd) == (0, 0, 0)
    sd = system.realize(sd, sj.Stage.ACCELERATION)
    np.testing.assert_array_equal(c.get_position_errors(sd), 0.0)
    np.testing.assert_array_equal(sd.multipliers[0:3], 0.0)
    with pytest.raises(ValueError, match="disabled"):
        c.get_multipliers(sd)
    se = system.realize(c.enable(sd), sj.Stage.ACCELERATION)
    assert np.abs(c.get_multipliers(se)).max() > 0
    # disabled by default
    system2, matter2, cons2, st2, _ = build(("Rod",))
    cons2["Rod"].set_disabled_by_default(True)
    st2 = system2.realize_topology()
    assert bool(cons2["Rod"].is_disabled(st2))


def test_ball_closing_a_free_body_equals_a_ball_joint():
    mp = sj.MassProperties(2.0, [0.05, 0, 0], sj.Inertia(0.1, 0.2, 0.3))
    sys1 = sj.MultibodySystem()
    m1 = sj.SimbodyMatterSubsystem(sys1)
    sj.Force.UniformGravity(sj.GeneralForceSubsystem(sys1), m1, [0, -9.81, 0])
    b1 = sj.MobilizedBody.Free(m1.Ground(), mp)
    c = sj.Constraint.Ball(m1.Ground(), [0, 0, 0], b1, [0, 1.0, 0])
    sys2 = sj.MultibodySystem()
    m2 = sj.SimbodyMatterSubsystem(sys2)
    sj.Force.UniformGravity(sj.GeneralForceSubsystem(sys2), m2, [0, -9.81, 0])
    b2 = sj.MobilizedBody.Ball(m2.Ground(), sj.Transform(), mp, sj.Transform(p=[0, 1.0, 0]))
    quat = np.array([0.9, 0.1, -0.3, 0.2])
    quat /= np.linalg.norm(quat)
    w = np.array([0.1, 0.2, 0.5])
    s2 = sys2.realize(sys2.realize_topology().with_q(quat).with_u(w), sj.Stage.ACCELERATION)
    X = b2.get_body_transform(s2)
    s1 = sys1.realize_topology()
    s1 = b1.set_q_to_fit_transform(s1, X)
    V = m2.get_body_velocities(s2)[1]
    s1 = b1.set_u_to_fit_velocity(s1, V)
    s1 = sys1.realize(s1, sj.Stage.ACCELERATION)
    np.testing.assert_allclose(np.abs(s1.qerr[:3]), 0, atol=1e-15)
    np.testing.assert_allclose(m1.get_body_accelerations(s1)[1], m2.get_body_accelerations(s2)[1], atol=1e-13)
    # the reaction on body 2 balances gravity plus inertia: F = m a_com - m g
    F_on_2_G = X.R @ c.get_ball_reaction_force_on_body2(s1)
    a_com = b1.find_station_acceleration_in_ground(s1, [0.05, 0, 0])
    np.testing.assert_allclose(F_on_2_G, 2.0 * (a_com - np.array([0, -9.81, 0])), atol=1e-12)
    np.testing.assert_allclose(
        c.get_ball_reaction_force_on_body1(s1), -F_on_2_G, atol=1e-12
    )  # body 1 is Ground


def test_constraint_parameters_are_instance_variables_and_differentiable():
    system, matter, cons, state, b = build(("Rod",))
    rod = cons["Rod"]
    s = random_state(state, 2)
    assert float(rod.get_length(s)) == pytest.approx(0.9)
    s2 = rod.set_length(s, 1.2)
    assert s2.stage == sj.Stage.MODEL
    e1 = system.realize(s, sj.Stage.POSITION).qerr[0]
    e2 = system.realize(s2, sj.Stage.POSITION).qerr[0]
    assert float(e1 - e2) == pytest.approx(0.3, abs=1e-14)
    g = jax.grad(lambda L: system.realize(rod.set_length(s, L), sj.Stage.ACCELERATION).udot.sum())(1.1)
    h = 1e-6
    fd = (
        system.realize(rod.set_length(s, 1.1 + h), sj.Stage.ACCELERATION).udot.sum()
        - system.realize(rod.set_length(s, 1.1 - h), sj.Stage.ACCELERATION).udot.sum()
    ) / (2 * h)
    assert float(g) == pytest.approx(float(fd), rel=1e-6, abs=1e-8)


def test_redundant_and_inconsistent_constraints():
    system, matter, cons, state, b = build(("ConstantSpeed",))
    # a second, identical ConstantSpeed is redundant: same motion, lambda split min-norm
    c2 = sj.Constraint.ConstantSpeed(b["A"], 0, 0.5)
    s = system.realize(random_state(system.realize_topology(), 1), sj.Stage.ACCELERATION)
    lam = np.asarray(s.multipliers)
    assert abs(lam[0] - lam[1]) < 1e-7 * max(1.0, abs(lam[0]))
    assert np.abs(s.udoterr).max() < 1e-12
    # the pair carries what one constraint alone carries
    s1 = system.realize(c2.disable(random_state(system.realize_topology(), 1)), sj.Stage.ACCELERATION)
    assert abs(lam[0] + lam[1] - float(s1.multipliers[0])) < 1e-10
    np.testing.assert_allclose(s.udot, s1.udot, atol=1e-12)
    # inconsistent ones: two different accelerations demanded of the same speed
    system, matter, cons, state, b = build(("ConstantAcceleration",))
    c3 = sj.Constraint.ConstantAcceleration(b["E"], 1, -0.3)
    s_ok = system.realize_topology()
    system.realize(s_ok, sj.Stage.ACCELERATION)  # equal values: redundant but consistent
    with pytest.raises(ValueError, match="inconsistent"):
        system.realize(c3.set_acceleration(s_ok, 0.7), sj.Stage.ACCELERATION)
    # under jit and vmap too (a least-squares answer with no word before, issue 16); the
    # consistent State still runs, in the same compiled program
    # (the run-time error is a RuntimeError; JAX reports it as a ValueError for some calls
    # with device-array inputs: either names what happened)
    f = jax.jit(lambda st: system.realize(st, sj.Stage.ACCELERATION).udot)
    assert f(s_ok).shape == (s_ok.nu,)
    with pytest.raises((RuntimeError, ValueError), match="inconsistent"):
        jax.block_until_ready(f(c3.set_acceleration(s_ok, 0.7)))
    batch = jax.tree.map(lambda a, b: jnp.stack([a, b]), s_ok, c3.set_acceleration(s_ok, 0.7))
    with pytest.raises((RuntimeError, ValueError), match="inconsistent"):
        jax.block_until_ready(jax.jit(jax.vmap(f))(batch))


def test_bad_input_errors():
    system, matter, cons, state, b = build(("Rod",))
    with pytest.raises(ValueError, match="same body"):
        sj.Constraint.Ball(b["A"], b["A"])
    with pytest.raises(ValueError, match="arguments"):
        sj.Constraint.CoordinateCoupler(matter, sj.Function.Linear([1.0, -1.0, 0.0]), [b["A"]], [0])
    with pytest.raises(ValueError, match="function"):
        sj.Constraint.CoordinateCoupler(matter, lambda x: x[0] + x[3], [b["A"], b["C"]], [0, 0])
    with pytest.raises(ValueError, match="out of range"):
        sj.Constraint.ConstantCoordinate(b["A"], 1)
    with pytest.raises(ValueError, match="positive"):
        sj.Constraint.Rod(b["A"], b["D"], -1.0)
    with pytest.raises(ValueError, match="Ground has no mobilizer"):
        sj.Constraint.ConstantSpeed(matter.Ground(), 0)
    with pytest.raises(ValueError, match="give position_errors"):
        sj.Constraint.Custom(matter, bodies=[b["A"]])
    with pytest.raises(ValueError, match="bodies"):
        sj.Constraint.Custom(matter, bodies=[b["A"]], position_errors=lambda ctx: ctx.body_origin_location(3))
    # a Function.Linear coupler works and keeps q1 = q2
    s = system.realize_topology()
    cc = sj.Constraint.CoordinateCoupler(
        matter, sj.Function.Linear([1.0, -1.0, 0.0]), [b["A"], b["C"]], [0, 0]
    )
    s = system.realize(system.realize_topology(), sj.Stage.POSITION)
    assert cc.get_position_errors(s).shape == (1,)


@pytest.mark.parametrize("q0", [[0.0, 0.0, 0.0], [0.3, 0.2, -0.4], [2.5, 1.0, 2.0]])
def test_projection_from_far_starts_is_damped(q0):
    """From far starts plain Gauss-Newton raised the error (from [0.3, 0.2, -0.4] it never
    converged) and from q = 0 ended wound up at [-39, 28, 36] rad (issue 16). Damped
    (Levenberg-Marquardt on rejection, steps capped) the error never rises, every joint
    stays within a turn of its start, and it converges in 10 steps."""
    system, matter, ball = fourbar()
    s = system.realize_topology().with_q(q0)
    errs = []
    for it in range(11):
        out = system.project_q(s, iterations=it, throw=False)
        errs.append(float(system.calc_constraint_error_norms(system.realize(out, sj.Stage.VELOCITY))[0]))
    assert all(b <= a for a, b in zip(errs, errs[1:], strict=False)), errs
    assert errs[-1] < 1e-12
    assert float(jnp.max(jnp.abs(out.q - jnp.asarray(q0)))) < 2 * np.pi


def test_projection_second_derivatives_check_grads():
    """``check_grads`` to second order (forward and reverse) of the projected q w.r.t. the
    start, through the damped steps, near the manifold and from a far start."""
    from jax.test_util import check_grads

    system, matter, ball = fourbar()
    s = system.realize_topology()
    # One jitted function for both starts: check_grads's derivatives evaluated op by op
    # compiled thousands of tiny XLA:CPU programs, whose code mappings passed Linux's
    # vm.max_map_count (65530) within this one test and crashed the process in the next
    # compile; jitted, the second start reuses the first one's programs.
    f = jax.jit(lambda q: system.project_q(s.with_q(q), tol=1e-9).q)
    for q0 in ([1.2, -1.0, -1.0], [0.3, 0.2, -0.4]):
        check_grads(f, (jnp.asarray(q0),), order=2, modes=["fwd", "rev"], eps=1e-5, atol=1e-5, rtol=1e-5)


def test_projection_closes_the_loop_and_is_differentiable():
    system, matter, ball = fourbar()
    s = system.realize_topology().with_q([1.2, -1.0, -1.0]).with_u([1.0, 0, 0])
    sp_ = system.project(s, tol=1e-10)
    pe, ve = system.calc_constraint_error_norms(sp_)
    assert float(pe) < 1e-12 and float(ve) < 1e-12
    sa = system.realize(sp_, sj.Stage.ACCELERATION)
    assert float(sa.multipliers[2]) == 0.0  # the planar loop's redundant z row
    # gradient of the projected configuration w.r.t. the starting one matches FD
    proj = lambda q0: system.project_q(s.with_q(s.q.at[0].set(q0)), tol=1e-9).q[1]
    g = jax.grad(proj)(1.2)
    h = 1e-6
    assert float(g) == pytest.approx(float((proj(1.2 + h) - proj(1.2 - h)) / (2 * h)), rel=1e-6)
    # unreachable: the rocker can't reach a point 10 m away -> clear error
    far = ball.set_point_on_body1(s, [10.0, 0, 0])
    with pytest.raises(ValueError, match="projection failed.*Ball"):
        system.project_q(far, tol=1e-6)


def test_constrained_forward_dynamics_derivatives_check_grads(model):
    """``udot`` and the multipliers of the System with every constraint kind, to second
    order in both modes against central differences (``solve_constrained``'s custom JVP
    solves the tangent with the primal's factors), and the redundant pair of
    ``test_redundant_and_inconsistent_constraints``: its ``udot`` and the pair's summed
    multiplier differentiate like the single constraint's."""
    from jax.test_util import check_grads

    system, matter, cons, state, _ = model
    s0 = random_state(state, 5)

    @jax.jit
    def f(q, u):
        s = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
        return jnp.concatenate([s.udot, s.multipliers])

    check_grads(f, (s0.q, s0.u), order=2, modes=["fwd", "rev"], eps=1e-5, atol=1e-5, rtol=1e-5)

    system, matter, cons, state, b = build(("ConstantSpeed",))
    c2 = sj.Constraint.ConstantSpeed(b["A"], 0, 0.5)
    s = random_state(system.realize_topology(), 1)

    def pair(q, st):
        r = system.realize(st.with_q(q), sj.Stage.ACCELERATION)
        return jnp.concatenate([r.udot, jnp.sum(r.multipliers)[None]])

    J2 = jax.jacrev(pair)(s.q, s)
    J1 = jax.jacfwd(pair)(s.q, c2.disable(s))
    np.testing.assert_allclose(J2, J1, atol=1e-9)


def test_time_stepping_projection_derivative_is_the_manifold_projector():
    """The undamped projection of time stepping is differentiated implicitly (a custom JVP:
    ``dq = dq0 - N P^+ dperr`` at the result): at a start on the manifold that is the exact
    derivative, in both modes, w.r.t. the start and w.r.t. a constraint parameter (the Ball's
    point), against central differences of the projection itself; the tangent it returns is
    tangent to the manifold (``P_q dq = 0``)."""
    from simjax.forward import projection as pj

    system, matter, ball = fourbar()
    s = system.project(system.realize_topology().with_q([1.2, -1.0, -1.0]), tol=1e-13)
    model = system.model_for(s)
    p0 = ball.get_point_on_body1(s)

    def f(q, p):
        return pj.project_q(model, ball.set_point_on_body1(s, p).with_q(q), iterations=3).q

    fj = jax.jit(f)
    Jq_f, Jp_f = jax.jit(jax.jacfwd(f, argnums=(0, 1)))(s.q, p0)
    Jq_r, Jp_r = jax.jit(jax.jacrev(f, argnums=(0, 1)))(s.q, p0)
    np.testing.assert_allclose(np.asarray(Jq_f), np.asarray(Jq_r), atol=1e-13)
    np.testing.assert_allclose(np.asarray(Jp_f), np.asarray(Jp_r), atol=1e-13)
    h = 1e-6
    fd_q = np.stack([(fj(s.q + h * e, p0) - fj(s.q - h * e, p0)) / (2 * h) for e in jnp.eye(3)], axis=1)
    fd_p = np.stack([(fj(s.q, p0 + h * e) - fj(s.q, p0 - h * e)) / (2 * h) for e in jnp.eye(3)], axis=1)
    np.testing.assert_allclose(np.asarray(Jq_f), fd_q, atol=1e-8)
    np.testing.assert_allclose(np.asarray(Jp_f), fd_p, atol=1e-8)
    Pq = jax.jacfwd(lambda q: system.realize(s.with_q(q), sj.Stage.POSITION).qerr)(s.q)
    assert float(jnp.max(jnp.abs(Pq @ Jq_f))) < 1e-12
    assert float(jnp.max(jnp.abs(Jq_f))) > 0.1  # not a trivially zero derivative
    # w.r.t. the start alone (the parameters' tangents are symbolic zeros, qdot = u): the
    # rule's short path, the projector ``I - P^+ P``, equals the general one
    fq = lambda q: f(q, p0)
    Jq_short_f, Jq_short_r = jax.jit(jax.jacfwd(fq))(s.q), jax.jit(jax.jacrev(fq))(s.q)
    np.testing.assert_allclose(np.asarray(Jq_short_f), np.asarray(Jq_f), atol=1e-12)
    np.testing.assert_allclose(np.asarray(Jq_short_r), np.asarray(Jq_f), atol=1e-12)
    assert model.topology(False).qdot_is_u
    short = len(str(jax.make_jaxpr(jax.jacrev(fq))(s.q)))
    with pytest.MonkeyPatch.context() as mpatch:
        mpatch.setattr(Topology, "qdot_is_u", property(lambda self: False))
        general = len(str(jax.make_jaxpr(jax.jacrev(fq))(s.q)))
    assert short < general  # the short path was taken


def test_time_stepping_projection_derivative_with_quaternions():
    """The same implicit derivative where the loop runs through Ball mobilizers (quaternions,
    normalised after every step): equal in both modes and to central differences."""
    from helpers import pendulum

    from simjax.forward import projection as pj

    system, matter, _, mobods = pendulum(2, kind="Ball")
    s0 = system.realize_topology()
    q = s0.q + 0.3 * np.random.default_rng(3).normal(size=s0.q.shape)
    pc = system.realize(s0.with_q(q), sj.Stage.POSITION).position_cache
    tip = np.asarray(pc.p_GB[2] + pc.R_GB[2] @ jnp.array([0.0, -0.5, 0.0]))
    g = np.array([0.3, -1.2, 0.2])
    sj.Constraint.Rod(mobods[2], [0, -0.5, 0], matter.Ground(), list(g), float(np.linalg.norm(tip - g)))
    s = system.project(system.realize_topology().with_q(q), tol=1e-13)
    model = system.model_for(s)
    f = jax.jit(lambda q: pj.project_q(model, s.with_q(q), iterations=3).q)
    J, Jr = jax.jacfwd(f)(s.q), jax.jacrev(f)(s.q)
    h = 1e-6
    fd = np.stack([(f(s.q + h * e) - f(s.q - h * e)) / (2 * h) for e in jnp.eye(len(s.q))], axis=1)
    np.testing.assert_allclose(np.asarray(J), np.asarray(Jr), atol=1e-13)
    np.testing.assert_allclose(np.asarray(J), fd, atol=1e-8)
