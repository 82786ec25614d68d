"""Both traversal paths of ``simjax.tree`` (dense ancestor matmuls for small trees, level
scans above ``DENSE_MAX_BODIES``) give the same sums and poses, and a model above the
threshold (which takes the scan path) has the dynamics of the same model forced dense."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_state, random_tree

import simjax as sj
from simjax.model import mobilizers as mz
from simjax.model.topology import Topology
from simjax.tree import traversal


def _random_parent(n: int, seed: int) -> tuple[int, ...]:
    rng = np.random.default_rng(seed)
    return (-1,) + tuple(int(rng.integers(0, b)) for b in range(1, n))


@pytest.mark.parametrize("nb", [2, 7, 40])
def test_dense_and_scan_sums_agree(nb):
    parent = _random_parent(nb, nb)
    topo = Topology(parent, (None,) + (mz.Pin(),) * (nb - 1), tuple(f"b{i}" for i in range(nb)))
    x = jax.random.normal(jax.random.PRNGKey(nb), (nb, 2, 3))
    for fn in (traversal.outward_sum, traversal.inward_sum):
        np.testing.assert_allclose(fn(topo, x, dense=True), fn(topo, x, dense=False), atol=1e-13)
    # outward_sum by definition: b and its ancestors, Ground excluded
    want = np.zeros_like(np.asarray(x))
    for b in range(1, nb):
        a = b
        while a > 0:
            want[b] += np.asarray(x[a])
            a = parent[a]
    np.testing.assert_allclose(traversal.outward_sum(topo, x, dense=False), want, atol=1e-13)


def test_model_above_the_dense_threshold_matches_dense(monkeypatch):
    """A tree with every mobilizer kind realized with the threshold at 4 bodies (scan path)
    equals the default (dense) path: poses, mass matrix and accelerations."""
    system, *_ = random_tree(seed=3)
    s = random_state(system, seed=2)
    dense = system.realize(s, sj.Stage.ACCELERATION)
    M_dense = system.get_matter_subsystem().calc_mass_matrix(dense)
    monkeypatch.setattr(traversal, "DENSE_MAX_BODIES", 4)
    jax.clear_caches()
    scan = system.realize(s, sj.Stage.ACCELERATION)
    M_scan = system.get_matter_subsystem().calc_mass_matrix(scan)
    np.testing.assert_allclose(M_scan, M_dense, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(scan.udot, dense.udot, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(jnp.asarray(scan.position_cache.p_GB), dense.position_cache.p_GB, atol=1e-13)


def test_place_equals_a_scatter_per_group():
    """``place`` (one concatenation and one static gather) writes the rows a scatter per
    group would, the fill elsewhere, and the later part where rows repeat."""
    from simjax.tree.kinds import place

    rng = np.random.default_rng(0)
    parts = [
        (np.array([[4, 1]]), rng.standard_normal((1, 2, 3))),
        (np.array([2, 6]), rng.standard_normal((2, 3))),
    ]
    fill = jnp.asarray([7.0, 8.0, 9.0])
    want = jnp.broadcast_to(fill, (8, 3))
    for idx, v in parts:
        want = want.at[idx.reshape(-1)].set(jnp.asarray(v).reshape(-1, 3))
    np.testing.assert_array_equal(place(8, parts, fill), want)
    again = place(3, [(np.array([0, 1]), jnp.ones(2)), (np.array([1]), 5 * jnp.ones(1))], jnp.zeros(()))
    np.testing.assert_array_equal(again, [1.0, 5.0, 0.0])
