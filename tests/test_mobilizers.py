"""User-defined mobilizers against the built-ins they imitate; fitting q and u per kind."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ALL_KINDS, make_mobod, random_body, random_transform

import simjax as sj
from simjax import _spatial as sp
from simjax.model import mobilizers as mz

MB = sj.MobilizedBody
F = sj.Function


def sandwich(make_middle, seed=0):
    """Ground -Pin-> A -middle-> B -Pin-> C, with random frames and masses (same for every
    ``make_middle`` at one seed), so a mobilizer is tested with a parent and a child."""
    rng = np.random.default_rng(seed)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0.2, -9.81, 0.4])
    a = MB.Pin(matter.Ground(), random_transform(rng), random_body(rng), random_transform(rng))
    X_PF, body, X_BM = random_transform(rng), random_body(rng), random_transform(rng)
    b = make_middle(a, X_PF, body, X_BM)
    MB.Pin(b, random_transform(rng), random_body(rng), random_transform(rng))
    return system, matter, b


def realize_all(system, q, u):
    s = system.realize_topology().with_q(q).with_u(u)
    return system.realize(s, sj.Stage.ACCELERATION)


def assert_same_dynamics(sys_a, sys_b, q_a, u, q_b=None):
    a = realize_all(sys_a, q_a, u)
    b = realize_all(sys_b, q_a if q_b is None else q_b, u)
    np.testing.assert_allclose(sys_a.matter.calc_mass_matrix(a), sys_b.matter.calc_mass_matrix(b), atol=1e-12)
    np.testing.assert_allclose(a.udot, b.udot, atol=1e-10)
    np.testing.assert_allclose(a.position_cache.R_GB, b.position_cache.R_GB, atol=1e-13)
    np.testing.assert_allclose(a.position_cache.p_GB, b.position_cache.p_GB, atol=1e-13)
    np.testing.assert_allclose(sys_a.calc_energy(a), sys_b.calc_energy(b), rtol=1e-13)
    return a, b


def test_custom_translation_matches_translation():
    """The seed's CustomTranslation (section 3.5): X_FM = (I, q); H and Hdot by autodiff."""

    def custom(p, X_PF, body, X_BM):
        return MB.Custom(p, X_PF, body, X_BM, nq=3, nu=3, n_angles=0, X_FM=lambda q: sj.Transform(p=q))

    sys_c, _, mc = sandwich(custom)
    sys_t, _, mt = sandwich(lambda p, *a: MB.Translation(p, *a))
    rng = np.random.default_rng(1)
    q, u = jnp.asarray(rng.normal(size=5)), jnp.asarray(rng.normal(size=5))
    a, _ = assert_same_dynamics(sys_c, sys_t, q, u)
    # set_q_to_fit_transform / set_u_to_fit_velocity work for a Custom mobilizer too
    X = sj.Transform(sj.Rotation.about_z(0.3), jnp.array([0.1, -0.2, 0.7]))
    s = mc.set_q_to_fit_transform(a, X)
    np.testing.assert_allclose(mc.get_q(s), X.p, atol=1e-12)
    s = mc.set_u_to_fit_velocity(s, jnp.array([0.5, 0.0, 0.0, 1.0, 2.0, 3.0]))
    np.testing.assert_allclose(mc.get_u(s), [1.0, 2.0, 3.0], atol=1e-12)


def quat_N(q):
    """qdot = N(q) w for w expressed in F (Simbody's Ball): qdot = 1/2 [0, w] (x) q."""
    w, x, y, z = q
    return 0.5 * jnp.array([[-x, -y, -z], [w, z, -y], [-z, w, x], [y, -x, w]])


def test_quaternion_custom_ball_matches_ball():
    def custom(p, X_PF, body, X_BM):
        return MB.Custom(
            p,
            X_PF,
            body,
            X_BM,
            nq=4,
            nu=3,
            n_angles=4,
            X_FM=lambda q: sj.Transform(sj.Rotation.from_quaternion(q)),
            N=quat_N,
            default_q=[1.0, 0, 0, 0],
        )

    sys_c, _, _ = sandwich(custom)
    sys_b, _, _ = sandwich(lambda p, *a: MB.Ball(p, *a))
    rng = np.random.default_rng(2)
    quat = rng.normal(size=4)
    quat /= np.linalg.norm(quat)
    q = jnp.concatenate([jnp.array([0.3]), jnp.asarray(quat), jnp.array([-0.4])])
    u = jnp.asarray(rng.normal(size=5))
    a, b = assert_same_dynamics(sys_c, sys_b, q, u)
    np.testing.assert_allclose(a.qdot, b.qdot, atol=1e-13)
    np.testing.assert_allclose(a.qdotdot, b.qdotdot, atol=1e-10)


def test_function_based_seed_example_matches_custom():
    """Seed section 3.4: q0 a rotation about Y, q1 a translation along X."""
    lin = F.Linear([1.0, 0.0])
    functions = [F.Constant(0, 0), lin, F.Constant(0, 0), lin, F.Constant(0, 0), F.Constant(0, 0)]
    coords = [[], [0], [], [1], [], []]

    def fb(p, X_PF, body, X_BM):
        return MB.FunctionBased(
            p, X_PF, body, X_BM, n_mobilities=2, functions=functions, coordinate_indices=coords
        )

    def custom(p, X_PF, body, X_BM):
        return MB.Custom(
            p,
            X_PF,
            body,
            X_BM,
            nq=2,
            n_angles=1,
            X_FM=lambda q: sj.Transform(sj.Rotation.about_y(q[0]), jnp.stack([q[1], 0.0 * q[1], 0.0 * q[1]])),
        )

    sys_f, _, _ = sandwich(fb)
    sys_c, _, _ = sandwich(custom)
    rng = np.random.default_rng(3)
    q, u = jnp.asarray(rng.normal(size=4)), jnp.asarray(rng.normal(size=4))
    assert_same_dynamics(sys_f, sys_c, q, u)


def test_function_based_pin_matches_pin():
    functions = [F.Constant(0, 0), F.Constant(0, 0), F.Linear([1.0, 0.0])] + [F.Constant(0, 0)] * 3
    coords = [[], [], [0], [], [], []]
    sys_f, _, _ = sandwich(
        lambda p, *a: MB.FunctionBased(p, *a, n_mobilities=1, functions=functions, coordinate_indices=coords)
    )
    sys_p, _, _ = sandwich(lambda p, *a: MB.Pin(p, *a))
    rng = np.random.default_rng(4)
    assert_same_dynamics(sys_f, sys_p, jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=3)))


def test_function_based_knee_with_splines_matches_custom():
    """A one-dof 'knee': flexion about an oblique axis with a spline-coupled translation,
    plain JAX callables mixed with sj.Function objects."""
    xs = np.linspace(-2.0, 0.5, 7)
    tx = F.Spline(xs, 0.02 * np.sin(2 * xs))
    ty = F.Spline(xs, -0.4 + 0.01 * xs**2)
    axis = np.array([0.2, 0.1, 1.0]) / np.linalg.norm([0.2, 0.1, 1.0])
    rot_fn = lambda x: 0.9 * x[0]
    functions = [rot_fn, F.Constant(0, 0), F.Constant(0, 0), tx, ty, F.Constant(0, 0)]
    coords = [[0], [], [], [0], [0], []]
    axes = [axis, [0, 1, 0], [1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]

    def fb(p, *a):
        return MB.FunctionBased(
            p, *a, n_mobilities=1, functions=functions, coordinate_indices=coords, axes=axes
        )

    def custom(p, *a):
        def X_FM(q):
            R = sj.Rotation.about_axis(0.9 * q[0], jnp.asarray(axis))
            return sj.Transform(R, jnp.stack([tx(q[:1]), ty(q[:1]), 0.0 * q[0]]))

        return MB.Custom(p, *a, nq=1, n_angles=1, X_FM=X_FM)

    sys_f, _, _ = sandwich(fb)
    sys_c, _, _ = sandwich(custom)
    rng = np.random.default_rng(5)
    q = jnp.array([0.2, -0.7, 0.4])
    assert_same_dynamics(sys_f, sys_c, q, jnp.asarray(rng.normal(size=3)))


def test_function_derivatives_by_autodiff():
    xs = np.linspace(0, 1, 6)
    spl = F.Spline(xs, xs**3)
    for f, x in [
        (F.Polynomial([2.0, -1.0, 0.5]), 0.7),
        (F.Sinusoid(1.5, 2.0, 0.3), 0.4),
        (F.Step(0.0, 2.0, 0.1, 0.9), 0.35),
        (spl, 0.55),
    ]:
        eps = 1e-6
        fd = (f(jnp.array([x + eps])) - f(jnp.array([x - eps]))) / (2 * eps)
        np.testing.assert_allclose(f.calc_derivative([0], jnp.array([x])), fd, rtol=1e-7, atol=1e-9)
    # natural spline: interpolates and has zero curvature at the ends
    np.testing.assert_allclose(jax.vmap(lambda x: spl(x[None]))(jnp.asarray(xs)), xs**3, atol=1e-14)
    np.testing.assert_allclose(spl.calc_derivative([0, 0], jnp.array([0.0])), 0.0, atol=1e-10)
    np.testing.assert_allclose(F.Step(0.0, 2.0, 0.1, 0.9)(jnp.array([0.0])), 0.0)
    np.testing.assert_allclose(F.Step(0.0, 2.0, 0.1, 0.9)(jnp.array([1.0])), 2.0)


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "Weld"])
def test_fit_transform_and_velocity_round_trip(kind):
    rng = np.random.default_rng(abs(hash(kind)) % 2**32)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mob = make_mobod(kind, matter.Ground(), rng)
    s0 = system.realize_topology()
    q = s0.q + jnp.asarray(rng.normal(size=s0.nq)) * 0.4
    s = system.realize(s0.with_q(q), sj.Stage.POSITION)
    X = mob.get_mobilizer_transform(s)
    fit = system.realize(mob.set_q_to_fit_transform(s0, X), sj.Stage.POSITION)
    X2 = mob.get_mobilizer_transform(fit)
    np.testing.assert_allclose(X2.R, X.R, atol=1e-9)
    np.testing.assert_allclose(X2.p, X.p, atol=1e-9)
    # velocity: V_FM = H u is reproduced by the fitted u
    u = jnp.asarray(rng.normal(size=s0.nu))
    v = system.realize(s.with_u(u), sj.Stage.VELOCITY)
    V = mob.get_mobilizer_velocity(v)
    vfit = system.realize(mob.set_u_to_fit_velocity(s, V), sj.Stage.VELOCITY)
    np.testing.assert_allclose(mob.get_mobilizer_velocity(vfit), V, atol=1e-9)
    np.testing.assert_allclose(mob.get_u(vfit), u, atol=1e-9)


def test_default_q_and_u():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    rng = np.random.default_rng(0)
    pin = MB.Pin(matter.Ground(), random_body(rng)).set_default_q(0.3).set_default_u(-1.0)
    ball = MB.Ball(pin, random_body(rng))
    free = MB.Free(ball, random_body(rng))
    s = system.realize_topology()
    np.testing.assert_allclose(pin.get_q(s), [0.3])
    np.testing.assert_allclose(pin.get_u(s), [-1.0])
    np.testing.assert_allclose(ball.get_q(s), [1, 0, 0, 0])
    np.testing.assert_allclose(free.get_q(s), [1, 0, 0, 0, 0, 0, 0])
    assert s.nq == 12 and s.nu == 10


def test_function_based_bodies_with_different_axes_keep_their_own_definitions():
    """Regression: two FunctionBased mobilizers with different axes once shared the first
    body's definition. Their axes are Instance data now: one kind, each body with its own
    axes, in the grouped tree pass (R_GB) as in its own transform."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)))
    lin, zero = F.Linear([1.0, 0.0]), F.Constant(0, 0)
    fns = [lin, zero, zero, zero, zero, zero]
    idx = [[0], [], [], [], [], []]
    axes = [np.array([0.0, 0.0, 1.0]), np.array([1.0, 2.0, -2.0]) / 3.0]
    bodies, parent = [], matter.Ground()
    for a in axes:
        ax = [a, [0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]]
        parent = MB.FunctionBased(
            parent,
            sj.Transform(),
            body,
            sj.Transform(p=[0, 1, 0]),
            n_mobilities=1,
            functions=fns,
            coordinate_indices=idx,
            axes=ax,
        )
        bodies.append(parent)
    state = system.realize(system.realize_topology().with_q(jnp.array([0.3, 0.5])), sj.Stage.POSITION)
    for b, a, ang in zip(bodies, axes, [0.3, 0.5], strict=True):
        R = np.asarray(b.get_mobilizer_transform(state).R)
        np.testing.assert_allclose(R @ a, a, atol=1e-14)  # rotates about its own axis
        assert np.arccos((np.trace(R) - 1) / 2) == pytest.approx(ang, abs=1e-12)
    topo = system.model_for(state).topology(state.use_euler_angles)
    assert [len(g.bodies) for g in topo.groups] == [2]  # one kind
    R1, R2 = (np.asarray(sp.rot_axis(t, a)) for t, a in zip([0.3, 0.5], axes, strict=True))
    p2 = (R1 + R1 @ R2) @ np.array([0.0, -1.0, 0.0])  # X_PF = I, X_BM = (I, [0, 1, 0])
    np.testing.assert_allclose(np.asarray(state.position_cache.R_GB[2]), R1 @ R2, atol=1e-14)
    np.testing.assert_allclose(np.asarray(state.position_cache.p_GB[2]), p2, atol=1e-14)


def test_rotation_product_equals_chained_axis_rotations_and_their_derivatives():
    """A CustomJoint's rotation (one weighted sum of constant matrices) equals the product
    of Rodrigues rotations about its axes, values and forward derivatives."""
    from simjax import _spatial as sp
    from simjax.model.mobilizers import _rotation_product, _rotation_table

    rng = np.random.default_rng(3)
    axes = tuple(tuple(float(x) for x in a) for a in rng.standard_normal((3, 3)))
    angles = jnp.asarray(rng.uniform(-2, 2, 3))

    def chained(t):
        R = jnp.eye(3)
        for k in range(3):
            R = R @ sp.rot_axis(t[k], axes[k])
        return R

    table = jnp.asarray(_rotation_table(axes))
    new = lambda t: _rotation_product([t[0], t[1], t[2]], table, t.dtype)  # noqa: E731
    np.testing.assert_allclose(new(angles), chained(angles), atol=1e-14)
    np.testing.assert_allclose(jax.jacfwd(new)(angles), jax.jacfwd(chained)(angles), atol=1e-13)


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "Weld"])
def test_kinds_marked_with_no_velocity_product_have_none(kind):
    """``no_velocity_product`` kinds (their Dynamics-stage bias term is skipped) really have
    ``Sdot_B u = 0`` (the term by autodiff, at random q, u, frames), and every other kind
    has one."""
    from simjax.dynamics.stages import _joint_bias
    from simjax.tree.kinds import joint_inputs

    rng = np.random.default_rng(abs(hash(kind)) % 2**32)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    make_mobod(kind, matter.Ground(), rng)
    marked = kind in ("Pin", "Slider", "Screw", "Cylinder", "Translation", "Ball", "LineOrientation")
    for euler in (False, True):  # quaternion kinds in both modes
        s0 = system.realize_topology()
        if euler:
            s0 = system.realize_model(matter.set_use_euler_angles(s0, True))
        q = s0.q + jnp.asarray(rng.normal(size=s0.nq)) * 0.4
        s = s0.with_q(q).with_u(jnp.asarray(rng.normal(size=s0.nu)))
        (g,) = system.model_for(s).topology(euler).groups
        mob = g.mobilizer
        inputs = joint_inputs(s, g, "q", "u", "params", "frames")
        term = jax.vmap(lambda *a, m=mob: _joint_bias(m, *a))(*inputs)
        assert mob.no_velocity_product == marked
        if marked:
            np.testing.assert_allclose(term, 0.0, atol=1e-14)
        else:
            assert float(jnp.max(jnp.abs(term))) > 1e-6  # the others do have the term


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_qdot_is_u_flag_matches_N(kind):
    """``qdot_is_u`` (static; the projection's short derivative relies on it) is True exactly
    where ``N(q)`` is the identity, in quaternion and Euler-angle mode."""
    rng = np.random.default_rng(7)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    make_mobod(kind, matter.Ground(), rng)
    for euler in (False, True):
        s = system.realize_topology()
        if euler:
            s = system.realize_model(matter.set_use_euler_angles(s, True))
        topo = system.model_for(s).topology(euler)
        mob = topo.mobilizers[1]
        q = s.q + 0.3
        params = s.instance["matter"]["mobilizer_params"][1][: max(mob.n_params, 1)]
        N = mob.N(q, params)
        assert mob.qdot_is_u == (N is None)
        assert topo.qdot_is_u == (N is None)


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "Weld"])
def test_X_FM_terms_weighted_equal_X_FM_and_the_pose_path_equals_the_joint_path(kind):
    """Kinds with ``has_X_FM_terms`` (Pin, Slider, Screw, Cylinder, Translation): the terms
    weighted by ``X_FM_weights`` equal ``X_FM`` at random q (first weight 1), the kinds have
    a fixed motion subspace (``no_velocity_product``, which the pose path relies on), and the
    Position stage's poses and motion subspaces from the terms equal the joint-by-joint ones
    and the general products (``_joint_local(..., terms=False)``), with their q-derivatives.
    Other kinds refuse the methods."""
    from simjax.dynamics.stages import _joint_local, _kind_poses
    from simjax.tree.kinds import joint_inputs

    rng = np.random.default_rng(abs(hash(kind)) % 2**32)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    make_mobod(kind, matter.Ground(), rng)
    s0 = system.realize_topology()
    s = s0.with_q(s0.q + jnp.asarray(rng.normal(size=s0.nq)) * 2.0)
    topo = system.model_for(s).topology(False)
    (g,) = topo.groups
    mob = g.mobilizer
    q, params, *frames = joint_inputs(s, g, "q", "params", "frames")
    marked = kind in ("Pin", "Slider", "Screw", "Cylinder", "Translation")
    assert mob.has_X_FM_terms == marked
    if not marked:
        assert mob.X_FM_rotation_terms is None
        with pytest.raises(TypeError, match="has no X_FM_terms"):
            mob.X_FM_weights(q[0])
        return
    assert mob.no_velocity_product
    w = mob.X_FM_weights(q[0])
    R_k, p_k = mob.X_FM_terms(params[0])
    R, p = mob.X_FM(q[0], params[0])
    assert float(w[0]) == 1.0
    np.testing.assert_allclose(jnp.einsum("k,kij->ij", w, R_k), R, rtol=0, atol=1e-15)
    np.testing.assert_allclose(jnp.einsum("k,ki->i", w, p_k), p, rtol=0, atol=1e-15)

    def by_terms(qq):
        return _kind_poses(topo, s.with_q(qq))[0][1]

    def by_joint(qq, terms=True):
        one = partial(_joint_local, mob, terms=terms)
        return jax.vmap(one)(*joint_inputs(s.with_q(qq), g, "q", "params", "frames"))

    # Against the general products (``terms=False``: X_FM, H_FM at q, 3x3 products), both
    # the shared-model terms and the joint-by-joint columns (``_X_PM_from_terms``).
    general = partial(by_joint, terms=False)
    for f in (by_terms, by_joint):
        for a, b in zip(f(s.q), general(s.q)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)
        for a, b in zip(jax.jacfwd(f)(s.q), jax.jacfwd(general)(s.q)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(mob.X_FM_rotation_terms, R_k)  # constants, for any params
    H = mob.H_FM(q[0], params[0])
    for part in (H[:3], H[3:]):  # H invariant under R_FM, its angular and linear rows
        np.testing.assert_allclose(R.T @ part, part, rtol=0, atol=1e-15)


def test_kind_poses_agree_batched_either_way_and_differentiate():
    """The Position stage's joint poses (``stages._group_poses``) under ``vmap``: with the
    model shared by the batch (terms computed once) and with every member's own copy (a
    batch of whole States: joint by joint) they equal the one-state results, and their
    gradients (reverse mode, batched both ways, and ``vmap`` of ``grad``) equal the
    one-state gradients."""
    rng = np.random.default_rng(3)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    body = matter.Ground()
    for kind in ("Pin", "Slider", "Cylinder", "Pin", "Screw", "Translation", "Ball"):
        body = make_mobod(kind, body, rng)
    s0 = system.realize_topology()
    B = 5
    Q = jnp.asarray(s0.q[None] + rng.normal(size=(B, s0.nq)))
    U = jnp.asarray(rng.normal(size=(B, s0.nu)))

    def udot(q, u):
        return system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot

    def loss(q, u):
        st = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
        return jnp.sum(st.udot**2) + jnp.sum(st.position_cache.p_GB**2)

    one = np.stack([udot(q, u) for q, u in zip(Q, U)])
    np.testing.assert_allclose(jax.vmap(udot)(Q, U), one, rtol=1e-11, atol=1e-11)
    S = jax.vmap(lambda q, u: s0.with_q(q).with_u(u))(Q, U)  # every leaf stacked
    by_state = jax.vmap(lambda s: system.realize(s, sj.Stage.ACCELERATION).udot)(S)
    np.testing.assert_allclose(by_state, one, rtol=1e-11, atol=1e-11)
    g_one = np.stack([jax.grad(loss)(q, u) for q, u in zip(Q, U)])
    np.testing.assert_allclose(jax.vmap(jax.grad(loss))(Q, U), g_one, rtol=1e-10, atol=1e-10)
    g_sum = jax.grad(lambda Q: jnp.sum(jax.vmap(loss)(Q, U)))(Q)
    np.testing.assert_allclose(g_sum, g_one, rtol=1e-10, atol=1e-10)
    eps = 1e-6
    dq = jnp.asarray(rng.normal(size=s0.nq))
    fd = (loss(Q[0] + eps * dq, U[0]) - loss(Q[0] - eps * dq, U[0])) / (2 * eps)
    np.testing.assert_allclose(jnp.dot(g_one[0], dq), fd, rtol=1e-6)


@pytest.mark.parametrize("kind", ["Ball", "Ellipsoid", "LineOrientation", "Free", "FreeLine"])
def test_orientation_kinds_in_both_modes(kind):
    """The quaternion-or-angles kinds (one shared base): nq and the default q in each mode,
    Euler mode keeping the kind's other fields (Ellipsoid's radii), the fit to a transform
    reproducing it, and N's translation block the identity."""
    mob = mz.Ellipsoid(radii=(0.5, 0.7, 0.9)) if kind == "Ellipsoid" else getattr(mz, kind)()
    n_t = 3 if kind in ("Free", "FreeLine") else 0
    eul = mob.with_euler_angles()
    assert type(eul) is type(mob) and eul.euler and not mob.euler
    assert (mob.nq, eul.nq) == (4 + n_t, 3 + n_t)
    assert mob.uses_quaternion and not eul.uses_quaternion
    np.testing.assert_array_equal(mob.default_q(), np.r_[1.0, 0, 0, 0, np.zeros(n_t)])
    np.testing.assert_array_equal(eul.default_q(), np.zeros(3 + n_t))
    if kind == "Ellipsoid":
        assert eul.radii == mob.radii
    rng = np.random.default_rng(4)
    params = jnp.asarray(mob.default_params())
    for m in (mob, eul):
        a = rng.normal(size=3) * 0.4
        angles = a if m.euler else sp.rot_to_quat(sp.body_fixed(a, "xyz"))
        q = jnp.asarray(np.r_[angles, rng.normal(size=n_t)])
        R, p = m.X_FM(q, params)
        R2, p2 = m.X_FM(m.q_to_fit_transform(R, p, params), params)
        np.testing.assert_allclose(R2, R, atol=1e-12)
        np.testing.assert_allclose(p2, p, atol=1e-12)
        N = m.N(q, params)
        assert N.shape == (m.nq, m.nu)
        if n_t:
            np.testing.assert_array_equal(N[-3:, -3:], np.eye(3))
            np.testing.assert_array_equal(N[-3:, :-3], 0.0)
            np.testing.assert_array_equal(N[:-3, -3:], 0.0)
