"""Both traversal paths of ``simjax.tree`` (dense ancestor matmuls for small trees, level
scans above ``DENSE_MAX_BODIES``) give the same sums and poses, and a model above the
threshold (which takes the scan path) has the dynamics of the same model forced dense."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_state, random_tree

import simjax as sj
from simjax._spatial import quat_to_rot
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


def _random_rotations(n: int, seed: int) -> np.ndarray:
    q = np.random.default_rng(seed).normal(size=(n, 4))
    return np.stack([np.asarray(quat_to_rot(jnp.asarray(x / np.linalg.norm(x)))) for x in q])


@pytest.mark.parametrize(
    "parent",
    [
        (-1, 0),  # one body
        (-1, 0, 0, 0),  # every body on Ground: no doubling round
        (-1,) + tuple(range(9)),  # a chain of 9: four rounds
        _random_parent(40, 1),
        _random_parent(17, 5),
    ],
)
def test_pose_composition_by_doubling_and_by_levels_agree(parent):
    """Ground poses by pointer doubling and by a scan over levels equal the sequential
    products ``X_GB = X_GP X_PB`` (Ground's own input row ignored), to round-off."""
    nb = len(parent)
    topo = Topology(parent, (None,) + (mz.Pin(),) * (nb - 1), tuple(f"b{i}" for i in range(nb)))
    R_PB = jnp.asarray(_random_rotations(nb, nb))
    p_PB = jax.random.normal(jax.random.PRNGKey(nb), (nb, 3), R_PB.dtype)
    R_want, p_want = [np.eye(3)], [np.zeros(3)]
    for b in range(1, nb):
        a = parent[b]
        R_want.append(R_want[a] @ np.asarray(R_PB[b]))
        p_want.append(p_want[a] + R_want[a] @ np.asarray(p_PB[b]))
    for fn in (traversal._compose_doubling, traversal._compose_levels, traversal.compose_outward):
        R, p = fn(topo, R_PB, p_PB)
        np.testing.assert_allclose(R, np.stack(R_want), atol=1e-13)
        np.testing.assert_allclose(p, np.stack(p_want), atol=1e-13)
    # Rounds of doubling: the 2**k-th ancestors, until every body has reached Ground.
    depth = int(topo.depth.max())
    assert len(topo.jumps) == (int(np.ceil(np.log2(depth))) if depth > 1 else 0)


def test_deep_chains_compose_by_levels_and_small_trees_by_doubling(monkeypatch):
    """The choice follows the work: doubling for a chain of 7 (14 products against 7
    levels' 7) and a wide tree, the level scan for a chain of 50 (237 against 50)."""
    calls, chosen = [], []
    monkeypatch.setattr(traversal, "_compose_doubling", lambda *a: calls.append("doubling"))
    monkeypatch.setattr(traversal, "_compose_levels", lambda *a: calls.append("levels"))
    for parent in [(-1,) + tuple(range(7)), (-1,) + tuple(range(50)), (-1, 0, 1, 1, 0, 4, 4, 2, 3), (-1,)]:
        nb = len(parent)
        topo = Topology(parent, (None,) + (mz.Pin(),) * (nb - 1), tuple(f"b{i}" for i in range(nb)))
        traversal.compose_outward(topo, jnp.zeros((nb, 3, 3)), jnp.zeros((nb, 3)))
        chosen.append(topo.compose_by_doubling)
    assert calls == ["doubling", "levels", "doubling", "levels"]
    assert chosen == [True, False, True, False]  # Ground alone: nothing to compose


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
