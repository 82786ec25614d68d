"""The traversal paths of ``simjax.tree`` (sums of rows up to ``SUM_BY_ROWS_MAX`` bodies,
dense ancestor matmuls for small trees, unrolled levels, level scans above
``DENSE_MAX_BODIES``) give the same sums and poses, and a model above the
threshold (which takes the scan path) has the dynamics of the same model forced dense."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import MB, make_mobod, random_state, random_tree
from jax.test_util import check_grads

import simjax as sj
from simjax._spatial import quat_to_rot
from simjax.dynamics.forces import body_forces_to_origin, calc_forces
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
    # Up to SUM_BY_ROWS_MAX bodies the dense form is sums of rows (no dot), and differentiates
    # as the matmul with the ancestor matrix does.
    dense = lambda x: traversal.outward_sum(topo, x, dense=True)
    assert ("dot_general" in str(jax.make_jaxpr(dense)(x))) == (nb > traversal.SUM_BY_ROWS_MAX)
    A = jnp.asarray(topo.ancestor, x.dtype)
    g = jax.grad(lambda x: jnp.sum(jnp.sin(dense(x))))(x)
    g_want = jax.grad(lambda x: jnp.sum(jnp.sin(jnp.einsum("ab,b...->a...", A, x))))(x)
    np.testing.assert_allclose(g, g_want, atol=1e-13)


@pytest.mark.parametrize("nb", [12, 40])
def test_unrolled_level_sums_equal_the_dense_ones_and_differentiate_like_them(nb):
    """On branched trees the default sums run level by level, unrolled; they equal the dense
    products, and their derivatives (the dense products' by a custom JVP) equal them too, in
    both modes."""
    parent = (-1,) + tuple((b - 1) // 3 for b in range(1, nb))  # Ground, then three children each
    topo = Topology(parent, (None,) + (mz.Pin(),) * (nb - 1), tuple(f"b{i}" for i in range(nb)))
    assert traversal._unrolled(topo, None) and not traversal._unrolled(topo, True)
    x = jax.random.normal(jax.random.PRNGKey(nb), (nb, 2, 3))
    dense = {
        traversal.outward_sum: lambda x: traversal.outward_sum(topo, x, dense=True),
        traversal.inward_to_dofs: lambda x: traversal.inward_to_dofs(topo, x, dense=True),
    }
    for fn, want in dense.items():
        got = jax.jit(lambda x, fn=fn: fn(topo, x))
        np.testing.assert_allclose(got(x), want(x), atol=1e-13)
        dx = jax.random.normal(jax.random.PRNGKey(nb + 1), x.shape)
        np.testing.assert_allclose(jax.jvp(got, (x,), (dx,))[1], want(dx), atol=1e-13)
        w = jax.random.normal(jax.random.PRNGKey(nb + 2), want(x).shape)
        g = jax.grad(lambda x, fn=fn: jnp.vdot(w, fn(topo, x)))(x)
        np.testing.assert_allclose(g, jax.grad(lambda x: jnp.vdot(w, want(x)))(x), atol=1e-13)
    chain = Topology(
        tuple(range(-1, nb - 1)), (None,) + (mz.Pin(),) * (nb - 1), tuple(f"b{i}" for i in range(nb))
    )
    assert not traversal._unrolled(chain, None)  # chains keep the dense product


def _random_rotations(n: int, seed: int) -> np.ndarray:
    q = np.random.default_rng(seed).normal(size=(n, 4))
    return np.stack([np.asarray(quat_to_rot(jnp.asarray(x / np.linalg.norm(x)))) for x in q])


def _sequential_poses(parent, R_PB, p_PB):
    """Ground poses by the sequential products ``X_GB = X_GP X_PB``, (nb, 3, 3), (nb, 3)."""
    R, p = [np.eye(3)], [np.zeros(3)]
    for b in range(1, len(parent)):
        a = parent[b]
        R.append(R[a] @ np.asarray(R_PB[b]))
        p.append(p[a] + R[a] @ np.asarray(p_PB[b]))
    return np.stack(R), np.stack(p)


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
    R_want, p_want = _sequential_poses(parent, R_PB, p_PB)
    for fn in (traversal._compose_doubling, traversal._compose_levels, traversal.compose_outward):
        R, p = fn(topo, R_PB, p_PB)
        np.testing.assert_allclose(R, R_want, atol=1e-13)
        np.testing.assert_allclose(p, p_want, atol=1e-13)
    # Rounds of doubling: the 2**k-th ancestors, until every body has reached Ground.
    depth = int(topo.depth.max())
    assert len(topo.jumps) == (int(np.ceil(np.log2(depth))) if depth > 1 else 0)


@pytest.mark.parametrize("parent", [(-1,) + tuple(range(20)), _random_parent(17, 5), (-1, 0)])
def test_level_composition_differentiates_without_the_scan(parent):
    """``_compose_levels``' custom JVP (an outward sum of each body's term, no scan) equals
    autodiff through the level scan in both modes, and checks against finite differences
    to second order; Ground's row gets no tangent."""
    nb = len(parent)
    topo = Topology(parent, (None,) + (mz.Pin(),) * (nb - 1), tuple(f"b{i}" for i in range(nb)))
    R_PB = jnp.asarray(_random_rotations(nb, nb + 1))
    p_PB = jax.random.normal(jax.random.PRNGKey(nb), (nb, 3), R_PB.dtype)
    key = jax.random.PRNGKey(1)
    dR, dp = jax.random.normal(key, R_PB.shape, R_PB.dtype), jax.random.normal(key, p_PB.shape, R_PB.dtype)
    custom = lambda R, p: traversal._compose_levels(topo, R, p)
    scan = lambda R, p: traversal._compose_levels_scan(topo, R, p)
    (R, p), t = jax.jvp(custom, (R_PB, p_PB), (dR, dp))
    (R2, p2), t2 = jax.jvp(scan, (R_PB, p_PB), (dR, dp))
    np.testing.assert_array_equal(R, R2)
    for a, b in zip(t, t2, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13 * float(jnp.max(jnp.abs(b))))
        assert not np.any(np.asarray(a[0]))
    w = (jax.random.normal(key, R.shape, R.dtype), jax.random.normal(key, p.shape, R.dtype))
    loss = lambda f: lambda R, p: sum(jnp.sum(x * y) for x, y in zip(f(R, p), w, strict=True))
    for a, b in zip(jax.grad(loss(custom), (0, 1))(R_PB, p_PB), jax.grad(loss(scan), (0, 1))(R_PB, p_PB)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    check_grads(custom, (R_PB, p_PB), order=2, modes=("fwd", "rev"))


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


# ------------------------------------------------------------------ welded bodies
# Parent arrays with Weld bodies (W) among Pin bodies (P): chains of welds, a weld on
# Ground, moving bodies below welds, welded leaves.
_WELDED = [
    ((-1, 0, 1, 2, 3, 4), "PWPWW"),  # weld between moving bodies, then a chain of two
    ((-1, 0, 0, 2, 3, 1, 5, 6), "WPWPPWW"),  # welded to Ground, chains under both
    ((-1, 0, 1, 2, 3, 4, 5, 6, 7, 8), "PWWWPWPWW"),  # a chain of three welds mid-tree
]


def _welded_topology(parent, kinds):
    mobs = (None,) + tuple(mz.Weld() if k == "W" else mz.Pin() for k in kinds)
    return Topology(parent, mobs, tuple(f"b{i}" for i in range(len(parent))))


@pytest.mark.parametrize("parent, kinds", _WELDED)
def test_moving_tree_of_a_tree_with_welds(parent, kinds):
    """``moving`` holds Ground and the Pins; each body's ``moving_row`` is its nearest moving
    ancestor-or-self; the moving tree's parents are those rows; ``below_weld`` are the Pins
    under a weld; the dofs keep their order."""
    topo = _welded_topology(parent, kinds)
    moves = [0] + [b for b in range(1, len(parent)) if kinds[b - 1] == "P"]
    np.testing.assert_array_equal(topo.moving, moves)
    assert topo.has_welds
    for b in range(len(parent)):
        a = b
        while a not in moves:
            a = parent[a]
        assert moves[topo.moving_row[b]] == a
    mt = topo.moving_tree
    assert mt.nb == len(moves) and mt.nu == topo.nu
    for i, b in enumerate(moves[1:], start=1):
        assert moves[mt.parent[i]] == moves[topo.moving_row[parent[b]]]
    np.testing.assert_array_equal(topo.below_weld, [b for b in moves[1:] if parent[b] not in moves])
    np.testing.assert_array_equal(np.asarray(topo.moving)[mt.dof_body], topo.dof_body)


@pytest.mark.parametrize("parent, kinds", _WELDED)
def test_pose_composition_through_welds(parent, kinds):
    """``compose_outward`` on a tree with welds (through ``compose_moving``: the weld chains,
    then the moving tree, then the welded bodies) equals the sequential products, by pointer
    doubling and by the level scan of the moving tree."""
    topo = _welded_topology(parent, kinds)
    nb = len(parent)
    R_PB = jnp.asarray(_random_rotations(nb, nb + 1))
    p_PB = jax.random.normal(jax.random.PRNGKey(nb), (nb, 3), R_PB.dtype)
    R_want, p_want = _sequential_poses(parent, R_PB, p_PB)
    for by_doubling in (True, False):
        topo = _welded_topology(parent, kinds)
        topo.moving_tree.__dict__["compose_by_doubling"] = by_doubling
        R, p = traversal.compose_outward(topo, R_PB, p_PB)
        np.testing.assert_allclose(R, R_want, atol=1e-13)
        np.testing.assert_allclose(p, p_want, atol=1e-13)
        # The relative poses: each body's in its nearest moving ancestor's frame.
        mv = topo.moving
        _, _, R_rel, p_rel = traversal.compose_moving(topo, R_PB[mv], p_PB[mv], R_PB, p_PB)
        for b in range(nb):
            a = mv[topo.moving_row[b]]
            np.testing.assert_allclose(R_rel[b], R_want[a].T @ R_want[b], atol=1e-13)
            np.testing.assert_allclose(p_rel[b], R_want[a].T @ (p_want[b] - p_want[a]), atol=1e-13)


@pytest.mark.parametrize("parent, kinds", _WELDED)
@pytest.mark.parametrize("dense", [True, False])
def test_moving_tree_sums_equal_the_full_tree_sums(parent, kinds, dense):
    """Outward sums of quantities that vanish on welds (joint velocities) and inward sums
    of additive ones (inertias, forces) folded into the moving rows equal the full tree's
    sums, dense and by level scans."""
    topo = _welded_topology(parent, kinds)
    nb, nm = len(parent), len(topo.moving)
    x_m = jax.random.normal(jax.random.PRNGKey(0), (nm, 2, 3))
    x = traversal.moving_to_bodies(topo, x_m)
    np.testing.assert_array_equal(np.asarray(x)[topo.welded], 0.0)
    np.testing.assert_allclose(
        traversal.outward_from_moving(topo, x_m, dense=dense), traversal.outward_sum(topo, x), atol=1e-13
    )
    y = jax.random.normal(jax.random.PRNGKey(1), (nb, 2, 3))
    want = traversal.gather_dofs(topo, traversal.inward_sum(topo, y))
    got = traversal.inward_to_dofs(topo, traversal.fold_welded(topo, y), dense=dense)
    np.testing.assert_allclose(got, want, atol=1e-13)
    np.testing.assert_allclose(traversal.moving_rows(topo, y), np.asarray(y)[topo.moving])


def test_sum_dofs_adds_each_bodys_dofs_and_is_zero_on_bodies_without():
    """``sum_dofs`` (static slices) equals a scatter-add by ``dof_body`` on a tree with
    bodies of one, two, three and six dofs, welds and Ground; its derivative is the
    transposed gather."""
    parent = (-1, 0, 1, 1, 3, 2, 5)
    mobs = (None, mz.Free(), mz.Weld(), mz.Ball(), mz.Pin(), mz.Universal(), mz.Weld())
    topo = Topology(parent, mobs, tuple(f"b{i}" for i in range(len(parent))))
    x = jax.random.normal(jax.random.PRNGKey(3), (topo.nu, 2, 3))
    want = jax.ops.segment_sum(x, np.asarray(topo.dof_body), num_segments=topo.nb)
    np.testing.assert_allclose(traversal.sum_dofs(topo, x), want, atol=1e-14)
    assert topo.body_dofs.shape == (6, topo.nb)
    y = jax.random.normal(jax.random.PRNGKey(4), (topo.nb, 2, 3))
    _, vjp = jax.vjp(lambda x: traversal.sum_dofs(topo, x), x)
    np.testing.assert_allclose(vjp(y)[0], np.asarray(y)[topo.dof_body], atol=1e-14)


def test_transform_inertia_parameters():
    """An inertia moved by (R, p) equals the one built from the moved mass center and
    rotated central inertia; composite (summed) and massless inertias transform linearly."""
    from simjax import _spatial as sp

    rng = np.random.default_rng(3)
    R = jnp.asarray(_random_rotations(1, 3)[0])
    p = jnp.asarray(rng.normal(size=3))
    bodies = []
    for m in (1.7, 0.4, 0.0):
        c = jnp.asarray(rng.normal(size=3))
        A = rng.normal(size=(3, 3))
        Ic = jnp.asarray(A @ A.T + np.eye(3)) * (m > 0)
        bodies.append((jnp.asarray(m), c, Ic))
    for m, c, Ic in bodies:
        want = sp.inertia_parameters(m, p + R @ c, R @ Ic @ R.T)
        got = sp.transform_inertia_parameters(R, p, sp.inertia_parameters(m, c, Ic))
        np.testing.assert_allclose(got, want, atol=1e-12)
    total = sum(sp.inertia_parameters(*b) for b in bodies)
    want = sum(sp.transform_inertia_parameters(R, p, sp.inertia_parameters(*b)) for b in bodies)
    np.testing.assert_allclose(sp.transform_inertia_parameters(R, p, total), want, atol=1e-12)


def _welded_system(seed: int = 4):
    """A tree of several mobilizer kinds with welded bodies hung on it: chains of welds, one
    on Ground, massless and massive, and moving bodies below welds. Uniform gravity on every
    body, a second gravity that excludes one welded and one moving body, and a constant
    force on a welded body."""
    kinds = (
        "Free",
        "Pin",
        "Ball",
        "Slider",
        "Weld",
        "Universal",
        "Pin",
        "Gimbal",
        "Pin",
        "Slider",
        "Ball",
        "Pin",
    )
    system, matter, forces, mobods = random_tree(seed=seed, kinds=kinds)
    rng = np.random.default_rng(seed)
    massless = sj.Body.Rigid(sj.MassProperties.from_com_inertia(0.0, np.zeros(3), np.zeros((3, 3))))
    w = MB.Weld(matter.Ground(), sj.Transform(p=[0.1, 0.2, 0.3]), massless, sj.Transform())
    mobods.append(make_mobod("Pin", w, rng))
    for i in (3, 7, 12):
        w1 = make_mobod("Weld", mobods[i], rng)
        w2 = MB.Weld(w1, sj.Transform(p=[0.0, -0.2, 0.1]), massless, sj.Transform())
        mobods += [w1, w2, make_mobod("Ball", w2, rng)]
    gravity = sj.Force.Gravity(forces, matter, [0.0, 0.0, -1.0], 2.5)
    gravity.set_default_body_is_excluded(mobods[15], True)
    gravity.set_default_body_is_excluded(mobods[2], True)
    sj.Force.ConstantForce(forces, mobods[16], [0.1, 0.0, -0.2], [1.0, 2.0, -3.0])
    return system, matter


def test_applied_forces_on_the_moving_rows_equal_the_body_forces_folded():
    """``AppliedForces.moving_O`` (gravity from the folded mass properties, other forces
    folded from their body forces) equals every body force, shifted to Ground's origin and
    folded onto the moving rows; and its derivative along q matches central differences."""
    system, matter = _welded_system()
    s = system.realize(random_state(system, seed=6), sj.Stage.POSITION)
    model = system.model_for(s)
    topo = model.topology(False)
    assert {13, 15, 16} <= set(topo.welded.tolist()) and 2 in topo.moving  # excluded, forced

    def moving_O(q):
        st = system.realize(s.with_q(q), sj.Stage.POSITION)
        return calc_forces(model, st).moving_O

    applied = calc_forces(model, s)
    expected = traversal.fold_welded(topo, body_forces_to_origin(applied.body, s.position_cache.p_GB))
    assert applied.moving_O.shape == (len(topo.moving), 6)
    np.testing.assert_allclose(applied.moving_O, expected, rtol=1e-12, atol=1e-12)
    dq = jnp.asarray(np.random.default_rng(7).normal(size=s.q.shape))
    _, jvp = jax.jvp(moving_O, (s.q,), (dq,))
    eps = 1e-6
    fd = (moving_O(s.q + eps * dq) - moving_O(s.q - eps * dq)) / (2 * eps)
    np.testing.assert_allclose(jvp, fd, rtol=1e-6, atol=1e-6)


def test_dynamics_through_the_moving_tree_equal_the_full_tree(monkeypatch):
    """A model with welded bodies realized through the moving tree (the default) equals
    the same model forced through the full tree: poses, inertias, velocities, the mass
    matrix, udot and body accelerations; and udot's derivatives through the moving tree
    match central differences."""
    system, matter = _welded_system()
    s = random_state(system, seed=5)
    moving = system.realize(s, sj.Stage.ACCELERATION)
    M_moving = matter.calc_mass_matrix(moving)
    monkeypatch.setattr(Topology, "has_welds", property(lambda self: False))
    jax.clear_caches()
    system2, matter2 = _welded_system()
    full = system2.realize(random_state(system2, seed=5), sj.Stage.ACCELERATION)
    monkeypatch.undo()
    jax.clear_caches()
    pm, pf = moving.position_cache, full.position_cache
    for name in ("R_GB", "p_GB", "com_G", "inertia_O"):
        np.testing.assert_allclose(getattr(pm, name), getattr(pf, name), atol=1e-12, err_msg=name)
    assert len(pm.moving_inertia_O) < len(pf.moving_inertia_O) == len(pf.inertia_O)
    np.testing.assert_allclose(moving.velocity_cache.V_O, full.velocity_cache.V_O, atol=1e-12)
    np.testing.assert_allclose(M_moving, matter2.calc_mass_matrix(full), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(moving.udot, full.udot, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(moving.acceleration_cache.A_O, full.acceleration_cache.A_O, atol=1e-9)

    def udot(q):
        return system.realize(s.with_q(q), sj.Stage.ACCELERATION).udot

    # Forward mode along a random direction against central differences (reverse mode
    # through the same path: the gradient tests of ``random_tree``, which has a Weld).
    dq = jnp.asarray(np.random.default_rng(6).normal(size=s.nq))
    _, jv = jax.jvp(udot, (s.q,), (dq,))
    eps = 1e-6
    fd = (udot(s.q + eps * dq) - udot(s.q - eps * dq)) / (2 * eps)
    np.testing.assert_allclose(jv, fd, rtol=1e-6, atol=1e-6 * float(jnp.abs(fd).max()))
