"""The mass matrix factored with the tree's sparsity (``simjax.tree.factor``): the path form,
its solve and derivatives against the dense matrix, numpy and finite differences, and forward
dynamics through it against the dense Cholesky path."""

import jax
import jax.numpy as jnp
import numpy as np
import oracle_models as om
import pytest
from helpers import fd_jacobian, random_state, random_tree

import simjax as sj
from simjax.dynamics import stages as rz
from simjax.tree import factor as fa


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


@pytest.fixture(scope="module", params=["random_tree", "humanoid", "mixed_tree"])
def case(request):
    return _tree_model() if request.param == "random_tree" else _spec_model(request.param)


def test_dof_tree_paths_are_the_mass_matrix_pattern(case):
    _, model, state, topo = case
    t = topo.dof_tree
    M = np.asarray(rz.mass_matrix(model, state, state.position_cache))
    related = np.zeros(M.shape, bool)
    for k in range(topo.nu):
        for a in t.paths[k]:
            if a < topo.nu:
                related[k, a] = related[a, k] = True
    assert np.all(M[~related] == 0.0)  # no entry outside the pattern (so no fill-in either)
    assert all(t.parent[k] < k for k in range(topo.nu))  # parents first
    assert sorted(np.concatenate(t.levels).tolist()) == list(range(topo.nu))


def test_path_form_and_its_solve_equal_dense(case):
    _, model, state, topo = case
    pos = state.position_cache
    M = rz.mass_matrix(model, state, pos)
    Hp = rz.mass_matrix_paths(model, state, pos)
    np.testing.assert_allclose(fa.dense_from_paths(topo, Hp), M, rtol=0, atol=1e-13 * np.abs(M).max())
    rng = np.random.default_rng(0)
    b = jnp.asarray(rng.normal(size=topo.nu))
    x = jax.jit(fa.solve_paths, static_argnums=0)(topo, Hp, b)
    np.testing.assert_allclose(x, np.linalg.solve(np.asarray(M), np.asarray(b)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(M @ x, b, atol=1e-11)


def test_path_form_solve_derivatives_against_finite_differences(case):
    _, model, state, topo = case
    Hp = rz.mass_matrix_paths(model, state, state.position_cache)
    rng = np.random.default_rng(1)
    b = jnp.asarray(rng.normal(size=topo.nu))
    # A perturbation of M within its pattern (any path-form tangent is a symmetric one).
    dHp = Hp * jnp.asarray(rng.uniform(-0.1, 0.1, size=Hp.shape))
    db = jnp.asarray(rng.normal(size=topo.nu))
    f = jax.jit(lambda e: fa.solve_paths(topo, Hp + e * dHp, b + e * db))
    _, tangent = jax.jvp(f, (0.0,), (1.0,))
    fd = fd_jacobian(lambda e: np.asarray(f(e[0])), np.zeros(1), eps=1e-6)[:, 0]
    np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())
    # reverse mode equals forward mode
    w = jnp.asarray(rng.normal(size=topo.nu))
    g = jax.jit(jax.grad(lambda e: w @ f(e)))(0.0)
    np.testing.assert_allclose(g, w @ tangent, rtol=1e-10)


@pytest.mark.parametrize("name", ["random_tree", "humanoid"])
def test_forward_dynamics_through_it_equals_the_dense_path(name, monkeypatch):
    system, model, state, topo = _tree_model() if name == "random_tree" else _spec_model(name)
    assert fa.use_tree_factorization(topo)
    rng = np.random.default_rng(2)
    v = jnp.asarray(rng.normal(size=state.q.shape))
    w = jnp.asarray(rng.normal(size=topo.nu))

    def udot_and_derivatives():
        f = lambda q: system.realize(state.with_q(q), sj.Stage.ACCELERATION).udot
        if name == "humanoid":  # reverse mode too (from the same JVP rule, transposed)
            return jax.jit(lambda q: (*jax.jvp(f, (q,), (v,)), jax.grad(lambda q: w @ f(q))(q)))(state.q)
        return jax.jit(lambda q: jax.jvp(f, (q,), (v,)))(state.q)

    sparse = udot_and_derivatives()
    monkeypatch.setattr(fa, "MAX_PATH_FLOPS", 0)
    assert not fa.use_tree_factorization(topo)
    dense = udot_and_derivatives()
    for a, b in zip(sparse, dense):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.abs(b).max())
    if name == "humanoid":
        np.testing.assert_allclose(sparse[2] @ v, w @ sparse[1], rtol=1e-9)


def _topology(name):
    system = om.to_simjax(om.ALL_MODELS[name]())[0]
    return system.model_for(system.realize_topology()).topology(False)


def test_which_trees_use_it():
    assert fa.use_tree_factorization(_topology("humanoid"))  # branched: ~6x less work
    assert fa.use_tree_factorization(_topology("pin_chain_7"))  # small
    assert not fa.use_tree_factorization(_topology("pin_chain_20"))  # a chain saves too little
    topo = _topology("pin_chain_50")
    assert topo.dof_tree.path_flops > fa.MAX_PATH_FLOPS and not fa.use_tree_factorization(topo)


def test_not_positive_definite_gives_nan(case):
    _, model, state, topo = case
    Hp = rz.mass_matrix_paths(model, state, state.position_cache)
    bad = Hp.at[topo.nu - 1, 0].set(-1.0)
    x = jax.jit(fa.solve_paths, static_argnums=0)(topo, bad, jnp.ones(topo.nu))
    assert np.isnan(np.asarray(x)).any()


@pytest.mark.parametrize("sparse", [True, False])
def test_matter_operators_solve_through_it(case, sparse, monkeypatch):
    """``multiply_by_m_inv`` (a vector or a matrix), ``calc_m_inverse`` and
    ``calc_acceleration`` solve as forward dynamics does: equal to numpy's solves with ``M``,
    through the sparse factorization and the dense Cholesky alike; the matrix solve's JVP
    against central differences."""
    system, model, state, topo = case
    if not sparse:
        monkeypatch.setattr(fa, "MAX_PATH_FLOPS", 0)
    assert fa.use_tree_factorization(topo) == sparse
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
    if not sparse:  # (the dense Cholesky's rule is checked elsewhere)
        return
    dq = jnp.asarray(rng.normal(size=state.q.shape))
    at = lambda e: system.realize(state.with_q(state.q + e * dq), sj.Stage.POSITION)
    f = jax.jit(lambda e: matter.multiply_by_m_inv(at(e), V))
    _, tangent = jax.jvp(f, (0.0,), (1.0,))
    fd = fd_jacobian(lambda e: np.asarray(f(e[0])).ravel(), np.zeros(1), eps=1e-6)[:, 0]
    np.testing.assert_allclose(np.ravel(tangent), fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())
