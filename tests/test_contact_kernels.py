"""Contact kernels against MuJoCo C (collision primitives) and OpenSim 4.6 (force laws).

Collision: random poses of each geometry pair, in and out of penetration, all within the
pair's margin so MuJoCo reports every contact it finds; ``contact.dist``, ``.pos`` and the
whole ``.frame`` compared per contact, in MuJoCo's order, to round-off.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from simjax.dynamics import collision as col

MARGIN = 10.0


def _scene(t1, s1, t2, s2, margin):
    """Two geometries; a plane is static (MuJoCo's rule), anything else is on a free body.
    MuJoCo's pair margin is the sum of the two geoms' margins: all of it on geometry 1."""

    def body(name, t, s, mg):
        return (
            f'<body name="{name}"><freejoint/>'
            '<inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>'
            f'<geom name="{name}" type="{t}" size="{s}" margin="{mg}"/></body>'
        )

    first = (
        f'<geom name="a" type="plane" size="{s1}" margin="{margin}"/>'
        if t1 == "plane"
        else body("a", t1, s1, margin)
    )
    return (
        '<mujoco><option gravity="0 0 0"/><worldbody>'
        f"{first}{body('b', t2, s2, 0)}</worldbody></mujoco>"
    )


def _random_quat(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def _mujoco_cases(t1, s1, t2, s2, n, margin, seed, spread=0.6, same_axes=False):
    """Geometry poses and MuJoCo's contacts for ``n`` random poses of the pair."""
    m = mujoco.MjModel.from_xml_string(_scene(t1, s1, t2, s2, margin))
    d = mujoco.MjData(m)
    rng = np.random.default_rng(seed)
    poses, ref = [], []
    for _ in range(n):
        if t1 == "plane":
            m.geom_pos[0] = rng.uniform(-spread, spread, 3)
            m.geom_quat[0] = _random_quat(rng)
        q = np.zeros(m.nq)
        for k in range(0, m.nq, 7):
            q[k : k + 3] = rng.uniform(-spread, spread, 3)
            q[k + 3 : k + 7] = q[3:7] if (same_axes and k) else _random_quat(rng)
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        poses.append(
            (d.geom_xpos[0].copy(), d.geom_xmat[0].reshape(3, 3).copy(),
             d.geom_xpos[1].copy(), d.geom_xmat[1].reshape(3, 3).copy())
        )
        cons = []
        for i in range(d.ncon):
            c = d.contact[i]
            assert tuple(c.geom) == (0, 1)
            cons.append((c.dist, c.pos.copy(), c.frame.reshape(3, 3).copy()))
        ref.append(cons)
    return m.geom_size.copy(), [np.stack(p) for p in zip(*poses)], ref


PAIRS = [
    ("plane", "0 0 1", "sphere", "0.3", col.plane_sphere, {}),
    ("sphere", "0.2", "sphere", "0.3", col.sphere_sphere, {}),
    ("plane", "0 0 1", "capsule", "0.2 0.4", col.plane_capsule, {}),
    ("sphere", "0.2", "capsule", "0.15 0.4", col.sphere_capsule, {}),
    ("capsule", "0.2 0.3", "capsule", "0.15 0.4", col.capsule_capsule, {}),
    ("plane", "0 0 1", "box", "0.2 0.3 0.4", col.plane_box, {}),
    # a margin that cuts some corners: which four MuJoCo keeps
    ("plane", "0 0 1", "box", "0.2 0.3 0.4", col.plane_box, dict(margin=0.05)),
]


@pytest.mark.parametrize("case", PAIRS, ids=lambda c: f"{c[0]}-{c[2]}-{len(c[5])}")
def test_collision_matches_mujoco(case):
    t1, s1, t2, s2, kernel, opts = case
    margin = opts.get("margin", MARGIN)
    size, (p1, m1, p2, m2), ref = _mujoco_cases(
        t1, s1, t2, s2, 60, margin, seed=len(opts), spread=opts.get("spread", 0.6),
        same_axes=opts.get("same_axes", False),
    )
    f = jax.jit(jax.vmap(lambda a, b, c, e: kernel(a, b, size[0], c, e, size[1], margin)))
    out = f(p1, m1, p2, m2)
    assert out.dist.shape[0] == 60 and out.frame.shape[-2:] == (3, 3)
    n_pen = n_sep = 0
    for i, cons in enumerate(ref):
        keep = np.flatnonzero(np.asarray(out.dist[i]) <= margin)
        assert len(keep) == len(cons), (i, out.dist[i], [c[0] for c in cons])
        for j, (dist, pos, frame) in zip(keep, cons):
            np.testing.assert_allclose(out.dist[i, j], dist, rtol=0, atol=1e-12)
            np.testing.assert_allclose(out.pos[i, j], pos, rtol=0, atol=1e-12)
            np.testing.assert_allclose(out.frame[i, j], frame, rtol=0, atol=1e-12)
            n_pen += dist < 0
            n_sep += dist >= 0
    assert n_pen > 5 and n_sep > 5  # both regimes covered


def test_plane_box_face_parallel_ties():
    """A box resting flat on an axis-aligned plane has four corners with a zero normal
    offset besides the four below: MuJoCo's first four within the margin, in its order."""
    m = mujoco.MjModel.from_xml_string(_scene("plane", "0 0 1", "box", "0.2 0.3 0.4", 0.1))
    m.geom_pos[0], m.geom_quat[0] = 0, (1, 0, 0, 0)
    d = mujoco.MjData(m)
    d.qpos[:] = (0.1, -0.2, 0.395, 1, 0, 0, 0)
    mujoco.mj_forward(m, d)
    out = col.plane_box(np.zeros(3), np.eye(3), m.geom_size[0], d.geom_xpos[1],
                        d.geom_xmat[1].reshape(3, 3), m.geom_size[1], 0.1)
    assert d.ncon == 4
    np.testing.assert_allclose(out.dist, [c.dist for c in d.contact], atol=1e-12)
    np.testing.assert_allclose(out.pos, [c.pos for c in d.contact], atol=1e-12)


def _rot(w):
    """Cayley rotation: exactly orthonormal, derivative at w = 0 is skew(w)."""
    s = 0.5 * jnp.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
    return jnp.linalg.solve(jnp.eye(3) - s, jnp.eye(3) + s)


GRAD_CASES = [
    # (kernel, size1, size2, pos1, pos2, slots whose dist is differentiated)
    (col.plane_sphere, [0, 0, 1], [0.3, 0, 0], [0.1, 0.2, 0.0], [0.3, -0.1, 0.25], [0]),
    (col.sphere_sphere, [0.2, 0, 0], [0.3, 0, 0], [0.0, 0.0, 0.0], [0.3, 0.2, 0.1], [0]),
    (col.plane_capsule, [0, 0, 1], [0.2, 0.4, 0], [0.0, 0.0, 0.0], [0.1, 0.0, 0.3], [0, 1]),
    (col.sphere_capsule, [0.2, 0, 0], [0.15, 0.4, 0], [0.1, 0.2, 0.0], [0.3, -0.1, 0.2], [0]),
    (col.capsule_capsule, [0.2, 0.3, 0], [0.15, 0.4, 0], [0.0, 0.1, 0.0], [0.2, -0.1, 0.3], [0]),
    (col.plane_box, [0, 0, 1], [0.2, 0.3, 0.4], [0.0, 0.0, 0.0], [0.1, 0.0, 0.3], [0, 1, 2, 3]),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c[0].__name__)
def test_collision_distance_gradients(case):
    """d(dist)/d(pose) of both geometries (position, rotation vector) equals central
    differences, at a generic pose."""
    kernel, s1, s2, p1, p2, slots = case
    r1 = _rot(jnp.array([0.3, -0.2, 0.1]))
    r2 = _rot(jnp.array([-0.4, 0.5, 0.7]))

    def f(x):
        c = kernel(jnp.array(p1) + x[0:3], _rot(x[3:6]) @ r1, jnp.array(s1, float),
                   jnp.array(p2) + x[6:9], _rot(x[9:12]) @ r2, jnp.array(s2, float))
        return c.dist[jnp.array(slots)].sum()

    x0 = jnp.zeros(12)
    h = 1e-6
    steps = h * jnp.eye(12)
    g = jax.jit(jax.grad(f))(x0)
    fv = jax.jit(jax.vmap(f))
    fd = (fv(steps) - fv(-steps)) / (2 * h)  # x0 = 0
    assert np.isfinite(f(x0))
    np.testing.assert_allclose(g, fd, rtol=0, atol=1e-8)


def test_collision_gradients_finite_at_touch_and_degenerate():
    """Touching spheres and planes (dist = 0) have the smooth gradient; coincident sphere
    centres (MuJoCo's fallback normal) and parallel capsules give finite ones."""
    e = jnp.eye(3)
    r = jnp.array([0.5, 0, 0])

    def d_ss(p):
        return col.sphere_sphere(jnp.zeros(3), e, r, p, e, r).dist[0]

    np.testing.assert_allclose(jax.grad(d_ss)(jnp.array([1.0, 0, 0])), [1, 0, 0], atol=1e-15)
    assert d_ss(jnp.array([1.0, 0, 0])) == 0
    assert np.all(np.isfinite(jax.grad(d_ss)(jnp.zeros(3))))

    def d_ps(p):
        return col.plane_sphere(jnp.zeros(3), e, r, p, e, r).dist[0]

    np.testing.assert_allclose(jax.grad(d_ps)(jnp.array([0.2, 0.1, 0.5])), [0, 0, 1])

    cap = jnp.array([0.1, 0.3, 0])

    def d_cc(p):  # parallel axes, side by side: the line distance along x
        return col.capsule_capsule(jnp.zeros(3), e, cap, p, e, cap, 0.5).dist[0]

    g = jax.grad(d_cc)(jnp.array([0.5, 0.0, 0.1]))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, [1, 0, 0], atol=1e-12)
