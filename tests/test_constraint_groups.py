"""Constraints of one kind are stacked and evaluated with one ``vmap``
(``simjax.constraints.kernels.constraint_groups``): the grouping is right, the stacked
evaluation equals each constraint's own, and the compiled program does not grow with the
number of constraints (what keeps 40 Ball constraints compiling like one)."""

import dataclasses

import equinox as eqx
import jax
import numpy as np
import pytest

import simjax as sj
from simjax.constraints import kernels as cn
from simjax.constraints import kinds
from simjax.forward.realize import realize_eager
from simjax.model.model import Identity, classical_acceleration


def _chain(n: int, nball: int, extra: bool = False):
    """n Free bodies hanging in a chain; the first ``nball`` tied to their parents by Balls
    (points 0.5 m apart, so the errors are nonzero); optionally one of every other kind."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.1, 0, 0], sj.Inertia(0.1, 0.2, 0.3)))
    parent, bodies = matter.Ground(), []
    for _ in range(n):
        parent = sj.MobilizedBody.Free(parent, sj.Transform(p=[0, -0.5, 0]), body, sj.Transform())
        bodies.append(parent)
    prev, cons = matter.Ground(), []
    for b in bodies[:nball]:
        cons.append(sj.Constraint.Ball(prev, [0.1, -0.4, 0], b, [0, 0.05, 0]))
        prev = b
    if extra:
        pin = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(p=[1, 0, 0]), body, sj.Transform())
        pin2 = sj.MobilizedBody.Pin(pin, sj.Transform(p=[0, -0.5, 0]), body, sj.Transform())
        cons.append(sj.Constraint.Rod(bodies[-1], [0, 0, 0], pin2, [0, 0, 0], 1.3))
        cons.append(sj.Constraint.Rod(bodies[-2], [0, 0, 0], pin, [0, 0, 0], 1.1))
        # (on a pin of its own: on ``pin``, which the coupler ties to the held ``pin2``, the
        # demanded speed would contradict them, an error since the velocity check)
        pin3 = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(p=[2, 0, 0]), body, sj.Transform())
        cons.append(sj.Constraint.ConstantSpeed(pin3, 0, 0.3))
        cons.append(sj.Constraint.ConstantCoordinate(pin2, 0, 0.2))
        cons.append(sj.Constraint.CoordinateCoupler(matter, lambda x: x[0] - 2 * x[1], [pin, pin2], [0, 0]))
    return system, matter, cons


def _state(system, seed=0):
    s = system.realize_topology()
    rng = np.random.default_rng(seed)
    return s.with_q(s.q + 0.2 * rng.normal(size=s.nq)).with_u(rng.normal(size=s.nu))


def test_groups_by_kind_and_equal_per_constraint_evaluation():
    system, matter, cons = _chain(6, 6, extra=True)
    s = system.realize(_state(system), sj.Stage.ACCELERATION)
    model = system.model_for(s)
    groups = cn.constraint_groups(model, False)
    sizes = sorted(g.n for g in groups)
    # 6 Balls, 2 Rods, and one each of ConstantSpeed, ConstantCoordinate, CoordinateCoupler
    assert sizes == [1, 1, 1, 2, 6]
    # stacked errors equal each constraint evaluated alone (a group of one), row by row
    mp, mv, ma = model.constraint_counts(False)
    perr, uerr = np.zeros(mp), np.zeros(mp + mv)
    for c in cons:
        one = cn.single_group(model, False, c.index)
        perr[c._rows(s, 0)] = np.asarray(cn.group_errors(model, s, one, 0))[0][: len(c._rows(s, 0))]
        uerr[c._rows(s, 1)] = np.asarray(cn.group_errors(model, s, one, 1))[0]
    np.testing.assert_allclose(s.qerr[:mp], perr, atol=1e-14)
    np.testing.assert_allclose(s.uerr, uerr, atol=1e-14)
    # and the Balls' errors are p_S2 - p_S1 in the ancestor's frame (here body 1 = the parent)
    for c in cons[:6]:
        b1, b2 = c._bodies
        X1, X2 = b1.get_body_transform(s), b2.get_body_transform(s)
        p1 = X1.p + X1.R @ np.array([0.1, -0.4, 0])
        p2 = X2.p + X2.R @ np.array([0, 0.05, 0])
        np.testing.assert_allclose(c.get_position_errors_as_vector(s), X1.R.T @ (p2 - p1), atol=1e-14)
    # G rows: the system matrix restricted to each constraint equals its own P/V matrices
    G = matter.calc_g(s)
    for c in cons:
        rows_p = c._rows(s, 0)
        if len(rows_p):
            np.testing.assert_allclose(G[rows_p], c.calc_position_constraint_matrix_p(s), atol=1e-13)
    # forces from multipliers: the sum over constraints equals the system's G^T lambda
    lam = s.multipliers
    F, tau = matter.calc_constraint_forces_from_multipliers(s, lam)
    Fs = sum(c.calc_constraint_forces_from_multipliers(s, lam[c._rows(s, 2)])[0] for c in cons)
    np.testing.assert_allclose(F, Fs, atol=1e-12)
    J = matter.calc_system_jacobian(s)
    np.testing.assert_allclose(G.T @ lam, J.T @ F.reshape(-1) + tau, atol=1e-10)
    # the constrained accelerations satisfy G udot = b
    G, b = matter.calc_g_and_b(s)
    np.testing.assert_allclose(G @ s.udot, b, atol=1e-9)


def test_disabled_members_of_a_group_have_zero_rows():
    system, matter, cons = _chain(4, 4)
    s = cons[2].disable(_state(system))
    s = system.realize(s, sj.Stage.ACCELERATION)
    rows = cons[2]._rows(s, 2)
    np.testing.assert_array_equal(np.asarray(s.multipliers)[rows], 0.0)
    np.testing.assert_array_equal(np.asarray(matter.calc_g(s))[rows], 0.0)
    assert np.abs(np.asarray(s.multipliers)[cons[1]._rows(s, 2)]).max() > 0


def _hlo_lines(nbodies: int, nball: int) -> int:
    system, _, _ = _chain(nbodies, nball)
    s = system.realize_topology()
    model = system.model_for(s)
    f = jax.jit(lambda st: realize_eager(model, st, sj.Stage.ACCELERATION).udot)
    return f.lower(s).as_text().count("\n")


def test_program_size_does_not_grow_with_the_number_of_constraints():
    """12 Ball constraints lower to (almost) the same program as 2: one vmap per kind."""
    few, many = _hlo_lines(12, 2), _hlo_lines(12, 12)
    assert many <= 1.1 * few, (few, many)


def _rot(v):
    """Rotation matrix of the rotation vector ``v`` (Rodrigues)."""
    v = np.asarray(v, float)
    t = np.linalg.norm(v)
    K = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]]) / t
    return np.eye(3) + np.sin(t) * K + (1 - np.cos(t)) * K @ K


_WRITTEN_OUT = {
    "Ball": lambda b1, b2: sj.Constraint.Ball(b1, [0.1, -0.4, 0.2], b2, [0, 0.05, -0.1]),
    "Rod": lambda b1, b2: sj.Constraint.Rod(b1, [0.1, -0.4, 0.2], b2, [0, 0.05, -0.1], 0.7),
    "Weld": lambda b1, b2: sj.Constraint.Weld(
        b1,
        sj.Transform(_rot([0.3, -0.2, 0.5]), [0.1, 0, 0.2]),
        b2,
        sj.Transform(_rot([-0.4, 0.1, 0.2]), [0, 0.3, 0]),
    ),
    "ConstantOrientation": lambda b1, b2: sj.Constraint.ConstantOrientation(
        b1, _rot([0.3, -0.2, 0.5]), b2, _rot([-0.4, 0.1, 0.2])
    ),
}


@pytest.mark.parametrize("kind", sorted(_WRITTEN_OUT))
def test_written_out_derivatives_equal_autodiff_ones(kind):
    """Ball, Rod, Weld and ConstantOrientation give their position errors' first and second
    time derivatives by hand (Simbody's position-dot and position-dot-dot errors); they must
    equal what forward-mode autodiff derives from their kernel's ``perr`` alone (the same
    function as a ``Custom`` kernel), here with a moving
    ancestor (two Free bodies on a third) and random accelerations."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.1, 0, 0], sj.Inertia(0.1, 0.2, 0.3)))
    base = sj.MobilizedBody.Free(matter.Ground(), sj.Transform(), body, sj.Transform())
    b1 = sj.MobilizedBody.Free(base, sj.Transform(p=[0.3, 0, 0]), body, sj.Transform())
    b2 = sj.MobilizedBody.Free(base, sj.Transform(p=[0, -0.5, 0]), body, sj.Transform())
    con = _WRITTEN_OUT[kind](b1, b2)
    kernel = con._kernel
    assert kernel.pverr is not None and kernel.paerr is not None
    state = realize_eager(system.model_for(_state(system, 3)), _state(system, 3), sj.Stage.DYNAMICS)
    model = system.model_for(state)
    (g,) = cn.constraint_groups(model, state.use_euler_angles)
    assert g.bodies[0, 0] == base.index  # the ancestor moves
    A = np.random.default_rng(4).normal(size=(model.topology(False).nb, 6))
    kin = cn.gather_kin(model, state, g, 2, A)
    autodiff = kinds.Custom(position_errors=Identity(kernel.perr))
    _, verr, aerr, _ = cn.level_functions(kernel, g.mobs)
    _, verr_ad, aerr_ad, _ = cn.level_functions(autodiff, g.mobs)
    v, v_ad = jax.vmap(verr)(kin), jax.vmap(verr_ad)(kin)
    a, a_ad = jax.vmap(aerr)(kin), jax.vmap(aerr_ad)(kin)
    np.testing.assert_allclose(v, v_ad, rtol=0, atol=1e-13)
    np.testing.assert_allclose(a, a_ad, rtol=0, atol=1e-12)
    assert np.abs(np.asarray(v)).min() > 1e-3 and np.abs(np.asarray(a)).min() > 1e-3  # real checks
    # the written-out coefficients of the velocity errors (G's rows, before the body
    # Jacobians) equal the forward Jacobian of the autodiff velocity errors
    coef = cn.velocity_coefficient_function(kernel, g.mobs)
    assert coef is not None
    C = jax.vmap(coef)(kin)
    fv = lambda k, w, vv: verr_ad(eqx.tree_at(lambda x: (x.w, x.v), k, (w, vv)))
    Cw, Cv = jax.vmap(jax.jacfwd(fv, argnums=(1, 2)))(kin, kin.w, kin.v)
    np.testing.assert_allclose(C, np.concatenate([Cw, Cv], axis=-1), rtol=0, atol=1e-14)
    assert np.abs(np.asarray(C)).max() > 0.1
    # and G built from them is G from autodiff
    grp_ad = dataclasses.replace(g, vcoef=None)  # the same group, coefficients by autodiff
    G = cn.group_G(model, state, g, cn.group_coefficients(model, state, g))
    G_ad = cn.group_G(model, state, grp_ad, cn.group_coefficients(model, state, grp_ad))
    np.testing.assert_allclose(G, G_ad, rtol=0, atol=1e-14)


def test_parameters_are_stacked_per_kind():
    """A kind's parameters are one State array per parameter name (rows in constraint
    order), not one leaf per constraint; setting one constraint's value changes its row
    only and acts as the same default would; a wrong shape names the constraint."""
    system, matter, cons = _chain(6, 6)
    s = _state(system)
    inst = s.instance["matter"]
    assert sorted(k for k in inst if k.startswith("constraint.")) == [
        "constraint.Ball.point1",
        "constraint.Ball.point2",
    ]
    assert inst["constraint.Ball.point1"].shape == (6, 3)
    s2 = cons[3].set_point_on_body2(s, [0.2, 0.1, -0.3])
    p2 = np.asarray(s2.instance["matter"]["constraint.Ball.point2"])
    np.testing.assert_array_equal(p2[3], [0.2, 0.1, -0.3])
    np.testing.assert_array_equal(
        np.delete(p2, 3, axis=0), np.delete(np.asarray(inst["constraint.Ball.point2"]), 3, axis=0)
    )
    np.testing.assert_array_equal(cons[3].get_point_on_body2(s2), [0.2, 0.1, -0.3])
    udot = system.realize(s2, sj.Stage.ACCELERATION).udot
    cons[3].set_default_point_on_body2([0.2, 0.1, -0.3])
    s3 = system.realize_topology()
    s3 = s3.with_q(s2.q).with_u(s2.u)
    np.testing.assert_allclose(system.realize(s3, sj.Stage.ACCELERATION).udot, udot, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"Ball\(index=3\).*shape \(3,\)"):
        cons[3].set_point_on_body2(s3, [0.2, 0.1])
    # two parameter layouts of one kind get two stable prefixes
    pin = sj.MobilizedBody.Pin(
        matter.Ground(),
        sj.Transform(),
        sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1))),
        sj.Transform(),
    )
    c1 = sj.Constraint.Custom(
        matter, mobilizers=[pin], position_errors=lambda c: c.one_q(0, 0) - c.param("a"), params={"a": 0.1}
    )
    c2 = sj.Constraint.Custom(
        matter,
        mobilizers=[pin],
        velocity_errors=lambda c: c.one_u(0, 0) - c.param("b")[0],
        params={"b": [0.2, 0.0]},
    )
    s = system.realize_topology()
    assert {"constraint.Custom.a", "constraint.Custom_1.b"} <= set(s.instance["matter"])
    np.testing.assert_array_equal(c2.get_param(c1.set_param(s, "a", 0.4), "b"), [0.2, 0.0])
    assert float(c1.get_param(c1.set_param(s, "a", 0.4), "a")) == 0.4


def test_constraints_hanging_from_ground_skip_grounds_kinematics(monkeypatch):
    """A group whose members all have Ground as their common ancestor (static) uses the
    bodies' own kinematics instead of taking out Ground's (identity) motion: errors, G, b,
    accelerations, multipliers and constraint forces equal the general path's."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0.2, -9.81, 0.1])
    body = sj.Body.Rigid(sj.MassProperties(1.3, [0.1, -0.05, 0.02], sj.Inertia(0.2, 0.25, 0.3)))
    a = sj.MobilizedBody.Free(matter.Ground(), sj.Transform(p=[0, -0.5, 0]), body, sj.Transform())
    b = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(p=[1, 0, 0]), body, sj.Transform())
    c = sj.MobilizedBody.Ball(b, sj.Transform(p=[0, -0.5, 0]), body, sj.Transform())
    d = sj.MobilizedBody.Free(a, sj.Transform(p=[0, -0.5, 0]), body, sj.Transform())
    sj.Constraint.Ball(matter.Ground(), [0.1, -0.4, 0], a, [0, 0.05, 0])  # Ground's own
    sj.Constraint.Rod(a, [0, 0.1, 0], c, [0.1, 0, 0], 1.2)  # two branches: ancestor Ground
    sj.Constraint.PointInPlane(matter.Ground(), [0, 1, 0], -1.4, d, [0.1, 0, 0.2])
    sj.Constraint.Ball(a, [0.1, -0.5, 0], d, [0, 0.05, 0])  # ancestor a
    s = _state(system, seed=3)
    model = system.model_for(s)
    groups = cn.constraint_groups(model, False)
    assert {g.ground_ancestor for g in groups} == {True, False}

    def everything():
        r = realize_eager(model, s, sj.Stage.ACCELERATION)
        c = r.cache
        A0 = classical_acceleration(c.dynamics.a_bias, c.velocity.V_O, c.position.p_GB)
        G, bb = cn.g_and_b(model, r, A0)
        F, tau = cn.constraint_forces(model, r, r.acceleration_cache.multipliers)
        return (c.position.qerr, c.velocity.uerr, G, bb, r.udot, r.acceleration_cache.multipliers, F, tau)

    calls = []
    relative = cn._relative
    monkeypatch.setattr(cn, "_relative", lambda *a, **k: calls.append(1) or relative(*a, **k))
    fast = everything()
    n_fast = len(calls)
    monkeypatch.setattr(cn.ConstraintGroup, "ground_ancestor", property(lambda self: False))
    general = everything()
    assert len(calls) - n_fast > n_fast  # the general path ran, for every group
    for x, y in zip(fast, general, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-13, atol=1e-13)
    assert float(np.max(np.abs(np.asarray(fast[2])))) > 0.1  # not trivially zero
