"""``M^-1 rhs`` by the articulated-body recursion (``simjax.tree.articulated``): against the
dense mass matrix and numpy's solves, on trees with multi-dof joints and welded bodies, with
armature, for vector and matrix right-hand sides; forward dynamics and the matter operators
through it, and their derivatives (the dense Cholesky's rule) against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import oracle_models as om
import pytest
from helpers import fd_jacobian, random_state, random_tree

import simjax as sj
from simjax import _spatial as sp
from simjax.dynamics import stages as rz
from simjax.tree import articulated
from simjax.tree import traversal as _tree


def _tree_model(seed=0):
    system = random_tree(seed=seed)[0]
    state = system.realize(random_state(system, seed=seed + 3), sj.Stage.POSITION)
    model = system.model_for(state)
    return system, model, state, model.topology(state.use_euler_angles)


def _spec_model(name):
    system, _, _ = om.to_simjax(om.ALL_MODELS[name]())
    s0 = system.realize_topology()
    rng = np.random.default_rng(5)
    q = s0.q + jnp.asarray(rng.normal(size=s0.nq)) * 0.5
    state = system.realize(s0.with_q(q).with_u(jnp.asarray(rng.normal(size=s0.nu))), sj.Stage.POSITION)
    model = system.model_for(state)
    return system, model, state, model.topology(state.use_euler_angles)


@pytest.fixture(scope="module", params=["random_tree", "humanoid", "mixed_tree", "pin_chain_20"])
def case(request):
    return _tree_model() if request.param == "random_tree" else _spec_model(request.param)


def test_dof_tree_is_the_mass_matrix_pattern(case):
    _, model, state, topo = case
    t = topo.dof_tree
    M = np.asarray(rz.mass_matrix(model, state, state.position_cache))
    related = np.eye(topo.nu, dtype=bool)
    for k in range(topo.nu):
        a = t.parent[k]
        while a >= 0:
            related[k, a] = related[a, k] = True
            a = t.parent[a]
    assert np.all(M[~related] == 0.0)  # M couples a dof only with its ancestors and descendants
    assert all(t.parent[k] < k for k in range(topo.nu))  # parents first
    assert sorted(np.concatenate(t.levels).tolist()) == list(range(topo.nu))
    assert all(t.parent[c] == k for k in range(topo.nu) for c in t.children[k])
    assert sum(len(c) for c in t.children) == int((t.parent >= 0).sum())


def test_solve_equals_numpy_with_the_dense_matrix(case):
    _, model, state, topo = case
    pos = state.position_cache
    M = np.asarray(rz.mass_matrix(model, state, pos))
    rng = np.random.default_rng(0)
    arm0 = np.broadcast_to(np.asarray(state.instance["matter"]["armature"]), (topo.nu,))
    extra = rng.uniform(0.0, 0.5, size=topo.nu)  # armature on the diagonal
    solve = jax.jit(articulated.solve, static_argnums=0)
    for rhs in (rng.normal(size=topo.nu), rng.normal(size=(topo.nu, 3))):
        for arm, MA in ((arm0, M), (arm0 + extra, M + np.diag(extra))):
            x = solve(topo, pos.cdof, pos.moving_inertia_O, jnp.asarray(arm), jnp.asarray(rhs))
            assert x.shape == rhs.shape
            np.testing.assert_allclose(x, np.linalg.solve(MA, rhs), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(MA @ x, rhs, atol=1e-10 * max(1.0, np.abs(MA).max()))


def test_solve_with_the_bias_terms_is_forward_dynamics(case):
    """With each body's bias force and velocity product inside the recursion, the solve is
    forward dynamics whole: ``M^-1 (tau - C)``, ``C`` the RNEA's ``cdof . (inward sum of
    I a + F)`` with ``a`` the outward sum of the products; on the model's own terms (gravity,
    velocities) it equals the dense solve of ``-bias``, and on random terms (armature,
    mobility forces) numpy's solve. No outward or inward sum or projection is in its
    program."""
    system, model, state, topo = case
    state = system.realize(state, sj.Stage.DYNAMICS)
    pos, vel, dyn = state.position_cache, state.velocity_cache, state.dynamics_cache
    M = np.asarray(rz.mass_matrix(model, state, pos))
    arm0 = jnp.broadcast_to(jnp.asarray(state.instance["matter"]["armature"], pos.cdof.dtype), (topo.nu,))
    solve = jax.jit(articulated.solve, static_argnums=0)
    F, c = rz.bias_forces(model, state, pos, vel, dyn), dyn.velocity_products
    x = solve(topo, pos.cdof, pos.moving_inertia_O, arm0, dyn.mobility_forces, F, c)
    want = np.linalg.solve(M, -np.asarray(dyn.bias))
    np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    rng = np.random.default_rng(4)
    extra = rng.uniform(0.0, 0.5, size=topo.nu)
    tau, F, c = (jnp.asarray(rng.normal(size=a.shape)) for a in (dyn.mobility_forces, F, c))
    a = _tree.outward_from_moving(topo, c)
    f = sp.inertia_times(pos.moving_inertia_O, _tree.moving_rows(topo, a)) + F
    C = np.einsum("di,di->d", pos.cdof, _tree.inward_to_dofs(topo, f))
    x = solve(topo, pos.cdof, pos.moving_inertia_O, arm0 + extra, tau, F, c)
    want = np.linalg.solve(M + np.diag(extra), np.asarray(tau) - C)
    np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    args = (pos.cdof, pos.moving_inertia_O, arm0, tau, F, c)
    assert "dot_general" not in str(jax.make_jaxpr(lambda *a: articulated.solve(topo, *a))(*args))


def test_solve_as_written_differentiates_like_the_dense_solve(case):
    """Reverse and forward mode through the unrolled recursion itself equal central
    differences (forward dynamics uses the dense rule instead; this keeps the function
    honest for anyone who calls it directly)."""
    _, model, state, topo = case
    pos = state.position_cache
    rng = np.random.default_rng(1)
    arm = jnp.broadcast_to(jnp.asarray(state.instance["matter"]["armature"], pos.cdof.dtype), (topo.nu,))
    b, db = jnp.asarray(rng.normal(size=topo.nu)), jnp.asarray(rng.normal(size=topo.nu))
    dI = pos.moving_inertia_O * jnp.asarray(rng.uniform(-0.05, 0.05, size=pos.moving_inertia_O.shape))
    dc = jnp.asarray(rng.normal(size=pos.cdof.shape)) * 0.05
    f = jax.jit(
        lambda e: articulated.solve(topo, pos.cdof + e * dc, pos.moving_inertia_O + e * dI, arm, b + e * db)
    )
    _, tangent = jax.jvp(f, (0.0,), (1.0,))
    fd = fd_jacobian(lambda e: np.asarray(f(e[0])), np.zeros(1), eps=1e-6)[:, 0]
    np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())
    w = jnp.asarray(rng.normal(size=topo.nu))
    np.testing.assert_allclose(jax.jit(jax.grad(lambda e: w @ f(e)))(0.0), w @ tangent, rtol=1e-10)


def test_singular_mass_matrix_is_not_finite(case):
    _, _, state, topo = case
    pos = state.position_cache
    zero = jnp.zeros_like(pos.moving_inertia_O)
    x = articulated.solve(topo, pos.cdof, zero, jnp.zeros(topo.nu), jnp.ones(topo.nu))
    assert not np.isfinite(np.asarray(x)).all()


@pytest.mark.parametrize("name", ["random_tree", "humanoid"])
def test_forward_dynamics_and_its_derivatives(name):
    """``forward_solve`` equals the dense Cholesky (which a single state solves by); forward
    dynamics' JVP (and, on the humanoid, its gradient: the same rule transposed) equals
    central differences."""
    system, model, state, topo = _tree_model() if name == "random_tree" else _spec_model(name)
    pos = state.position_cache
    state = system.realize(state, sj.Stage.DYNAMICS)
    rhs = -state.dynamics_cache.bias
    dense = rz.solve_mass_matrix_upper(rz.mass_matrix_upper(model, state, pos), rhs)
    np.testing.assert_allclose(rz.forward_solve(model, state, pos, rhs), dense, rtol=1e-10, atol=1e-10)
    rng = np.random.default_rng(2)
    v = jnp.asarray(rng.normal(size=state.q.shape))
    f = jax.jit(lambda e: system.realize(state.with_q(state.q + e * v), sj.Stage.ACCELERATION).udot)
    _, tangent = jax.jvp(f, (0.0,), (1.0,))
    fd = fd_jacobian(lambda e: np.asarray(f(e[0])), np.zeros(1), eps=1e-6)[:, 0]
    np.testing.assert_allclose(tangent, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    if name == "humanoid":
        w = jnp.asarray(rng.normal(size=topo.nu))
        np.testing.assert_allclose(jax.jit(jax.grad(lambda e: w @ f(e)))(0.0), w @ tangent, rtol=1e-9)


@pytest.mark.parametrize("batch", [2, 4, 9])
def test_batches_solve_by_the_recursion_and_single_states_by_cholesky(batch):
    """Under ``vmap`` of at least ``ARTICULATED_MIN_BATCH`` states forward dynamics solves by
    the recursion (no Cholesky in its program), a single state and smaller batches by the
    dense Cholesky; the results agree to round-off. The batched JVP equals central
    differences, and a gradient through the batch equals the per-state gradients."""
    system, model, state, topo = _spec_model("humanoid")
    rng = np.random.default_rng(batch)
    Q = state.q[None] + 0.3 * jnp.asarray(rng.normal(size=(batch, state.nq)))
    U = jnp.asarray(rng.normal(size=(batch, topo.nu)))
    f = lambda q, u: system.realize(state.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot
    one = jax.jit(f)
    want = np.stack([one(q, u) for q, u in zip(Q, U)])
    np.testing.assert_allclose(jax.jit(jax.vmap(f))(Q, U), want, rtol=1e-10, atol=1e-10)
    batched_text = str(jax.make_jaxpr(jax.vmap(f))(Q, U))
    assert ("cholesky" in batched_text) == (batch < rz.ARTICULATED_MIN_BATCH)
    assert "cholesky" in str(jax.make_jaxpr(f)(Q[0], U[0]))
    dQ = jnp.asarray(rng.normal(size=Q.shape))
    g = jax.jit(lambda e: jax.vmap(f)(Q + e * dQ, U))
    _, tangent = jax.jvp(g, (0.0,), (1.0,))
    fd = fd_jacobian(lambda e: np.asarray(g(e[0])).ravel(), np.zeros(1), eps=1e-6)[:, 0]
    np.testing.assert_allclose(np.ravel(tangent), fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    W = jnp.asarray(rng.normal(size=U.shape))
    grads = jax.jit(jax.grad(lambda Q: jnp.sum(W * jax.vmap(f)(Q, U))))(Q)
    for i in range(batch):
        gi = jax.grad(lambda q, i=i: W[i] @ f(q, U[i]))(Q[i])
        np.testing.assert_allclose(grads[i], gi, rtol=1e-9, atol=1e-11 * np.abs(gi).max())


def test_matter_operators_solve_through_it(case):
    """``multiply_by_m_inv`` (a vector or a matrix), ``calc_m_inverse`` and
    ``calc_acceleration`` solve as forward dynamics does: equal to numpy's solves with ``M``;
    the matrix solve's JVP against central differences."""
    system, model, state, topo = case
    matter = system.get_matter_subsystem()
    rng = np.random.default_rng(3)
    v, V = rng.normal(size=topo.nu), rng.normal(size=(topo.nu, 3))
    state = system.realize(state, sj.Stage.VELOCITY)
    M = np.asarray(matter.calc_mass_matrix(state))
    tau = rng.normal(size=topo.nu)
    bias = np.asarray(matter.calc_bias_forces(state))
    ops = lambda s: (
        matter.multiply_by_m_inv(s, v),
        matter.multiply_by_m_inv(s, V),
        matter.calc_m_inverse(s),
        matter.calc_acceleration(s, tau),
    )
    solve = np.linalg.solve
    expected = (solve(M, v), solve(M, V), np.linalg.inv(M), solve(M, tau - bias))
    for got, want in zip(jax.jit(ops)(state), expected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    dq = jnp.asarray(rng.normal(size=state.q.shape))
    at = lambda e: system.realize(state.with_q(state.q + e * dq), sj.Stage.POSITION)
    f = jax.jit(lambda e: matter.multiply_by_m_inv(at(e), V))
    _, tangent = jax.jvp(f, (0.0,), (1.0,))
    fd = fd_jacobian(lambda e: np.asarray(f(e[0])).ravel(), np.zeros(1), eps=1e-6)[:, 0]
    np.testing.assert_allclose(np.ravel(tangent), fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())


def test_gimbal_lock_is_singular_and_near_it_is_not():
    """A Gimbal's Euler-angle rates at lock (middle angle pi/2) make M singular: the solve
    gives NaN (the pivots' spread bounds cond(M) from below). A degree away it equals numpy's
    solve."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0, -0.5, 0], sj.Inertia(0.3, 0.01, 0.3))
    sj.MobilizedBody.Gimbal(matter.Ground(), sj.Transform(), mp, sj.Transform())
    rhs = jnp.asarray([0.3, -0.2, 0.5])
    for angle, singular in ((np.pi / 2, True), (np.pi / 2 - 0.02, False)):
        s = system.realize(system.realize_topology().with_q([0.3, angle, 0.2]), sj.Stage.POSITION)
        model = system.model_for(s)
        topo, pos = model.topology(False), s.position_cache
        x = articulated.solve(topo, pos.cdof, pos.moving_inertia_O, jnp.zeros(3), rhs)
        if singular:
            assert np.isnan(np.asarray(x)).all()
        else:
            M = np.asarray(rz.mass_matrix(model, s, pos))
            np.testing.assert_allclose(x, np.linalg.solve(M, rhs), rtol=1e-9)
