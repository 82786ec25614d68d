"""Spatial algebra: conversions round-trip, and gradients stay finite at singular points."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy.spatial.transform import Rotation as SciRot

import simjax as sj
from simjax import _spatial as sp

RNG = np.random.default_rng(0)
ROTS = [SciRot.from_rotvec(RNG.normal(size=3)).as_matrix() for _ in range(6)] + [
    np.eye(3),
    SciRot.from_rotvec([np.pi, 0, 0]).as_matrix(),
    SciRot.from_rotvec([0, 0.7 * np.pi, 0.7 * np.pi]).as_matrix(),
]


@pytest.mark.parametrize("R", ROTS)
def test_rotation_conversions_round_trip(R):
    q = sp.rot_to_quat(jnp.asarray(R))
    np.testing.assert_allclose(jnp.linalg.norm(q), 1.0, atol=1e-14)
    np.testing.assert_allclose(sp.quat_to_rot(q), R, atol=1e-13)
    # [w, x, y, z] and scipy's [x, y, z, w] describe the same rotation (up to sign)
    qs = SciRot.from_matrix(R).as_quat()
    assert min(np.abs(q - np.r_[qs[3], qs[:3]]).max(), np.abs(q + np.r_[qs[3], qs[:3]]).max()) < 1e-12
    np.testing.assert_allclose(sp.axis_angle_to_rot(sp.rot_to_axis_angle(jnp.asarray(R))), R, atol=1e-12)
    np.testing.assert_allclose(sp.body_fixed(sp.rot_to_body_fixed_xyz(jnp.asarray(R)), "xyz"), R, atol=1e-12)


def test_euler_sequences_match_scipy():
    a = jnp.array([0.3, -1.1, 2.0])
    np.testing.assert_allclose(sp.body_fixed(a, "xyz"), SciRot.from_euler("XYZ", a).as_matrix(), atol=1e-14)
    np.testing.assert_allclose(sp.space_fixed(a, "xyz"), SciRot.from_euler("xyz", a).as_matrix(), atol=1e-14)
    np.testing.assert_allclose(sp.body_fixed(a, "zxz"), SciRot.from_euler("ZXZ", a).as_matrix(), atol=1e-14)
    np.testing.assert_allclose(sp.rot_axis(0.4, jnp.array([0.0, 0.0, 2.0])), sp.rot_z(0.4), atol=1e-15)


def test_gradients_finite_at_singular_points():
    zero = jnp.zeros(3)
    for f in (
        lambda v: jnp.sum(sp.axis_angle_to_rot(v)),
        lambda v: sp.safe_norm(v),
        lambda v: jnp.sum(sp.safe_normalize(v + jnp.array([0.0, 0.0, 1.0]))),
        lambda v: jnp.sum(sp.rot_to_axis_angle(sp.axis_angle_to_rot(v))),
        lambda v: jnp.sum(sp.rot_to_quat(sp.axis_angle_to_rot(v))),
    ):
        g = jax.grad(f)(zero)
        assert np.all(np.isfinite(g)), g
        assert np.all(np.isfinite(jax.jacfwd(jax.grad(f))(zero)))
    # the rotation's derivative at zero is the skew generator: dR/dv_i = skew(e_i)
    J = jax.jacfwd(sp.axis_angle_to_rot)(zero)
    for i in range(3):
        np.testing.assert_allclose(J[..., i], sp.skew(jnp.eye(3)[i]), atol=1e-15)
    # quaternion normalization inside quat_to_rot has a finite gradient at unit norm
    g = jax.grad(lambda q: jnp.sum(sp.quat_to_rot(q)))(jnp.array([1.0, 0, 0, 0]))
    assert np.all(np.isfinite(g))


def test_transform_algebra():
    X = sj.Transform(sp.rot_x(0.3) @ sp.rot_z(-0.4), jnp.array([0.1, 2.0, -1.0]))
    Y = sj.Transform(sp.rot_y(1.2), jnp.array([-0.5, 0.0, 0.3]))
    I = X * X.invert()
    np.testing.assert_allclose(I.R, np.eye(3), atol=1e-15)
    np.testing.assert_allclose(I.p, 0, atol=1e-15)
    s = jnp.array([0.3, 0.2, 0.1])
    np.testing.assert_allclose((X * Y).apply(s), X.apply(Y.apply(s)), atol=1e-15)


def test_mass_properties_shift_and_reexpress():
    Ic = np.array([[0.3, 0.01, -0.02], [0.01, 0.2, 0.03], [-0.02, 0.03, 0.25]])
    c = np.array([0.1, -0.2, 0.3])
    mp = sj.MassProperties.from_com_inertia(2.0, c, Ic)
    # parallel axis theorem: about the origin = about com + m (|c|^2 1 - c c^T)
    np.testing.assert_allclose(mp.inertia, Ic + 2.0 * (c @ c * np.eye(3) - np.outer(c, c)), atol=1e-15)
    np.testing.assert_allclose(mp.inertia_about_com(), Ic, atol=1e-15)
    com = mp.shift_to_com()
    np.testing.assert_allclose(com.com, 0.0)
    np.testing.assert_allclose(com.inertia, Ic, atol=1e-15)
    R = np.asarray(sp.rot_axis(0.7, jnp.array([1.0, 2.0, 3.0])))
    re = mp.reexpress(R)  # same body, quantities expressed in frame C with R_BC = R
    np.testing.assert_allclose(re.com, R.T @ c, atol=1e-15)
    np.testing.assert_allclose(re.inertia, R.T @ mp.inertia @ R, atol=1e-15)
    # the 6x6 spatial inertia about Ground's origin reproduces kinetic energy of a rigid body
    w, v = np.array([0.3, -0.1, 0.2]), np.array([1.0, 0.5, -0.2])  # v: velocity of the origin
    P = sp.inertia_parameters(jnp.asarray(2.0), jnp.asarray(c), jnp.asarray(Ic))
    I6 = np.asarray(sp.inertia_matrix(P))
    V = np.r_[w, v]
    vc = v + np.cross(w, c)
    np.testing.assert_allclose(0.5 * V @ I6 @ V, 0.5 * 2.0 * vc @ vc + 0.5 * w @ Ic @ w, rtol=1e-14)
    # ... and its momentum: [angular about the origin; linear] = [c x m vc + Ic w; m vc]
    np.testing.assert_allclose(I6 @ V, np.r_[np.cross(c, 2.0 * vc) + Ic @ w, 2.0 * vc], rtol=1e-14)
    np.testing.assert_allclose(sp.inertia_times(P, jnp.asarray(V)), I6 @ V, rtol=1e-14)
    np.testing.assert_allclose(I6, I6.T, atol=0)
    # Pinocchio's order of the ten dynamic parameters: m, m c, Ixx, Ixy, Iyy, Ixz, Iyz, Izz
    J = Ic + 2.0 * (c @ c * np.eye(3) - np.outer(c, c))
    want = np.r_[2.0, 2.0 * c, J[0, 0], J[0, 1], J[1, 1], J[0, 2], J[1, 2], J[2, 2]]
    np.testing.assert_allclose(P, want, rtol=1e-14)
    # batched over leading axes
    Pb = jnp.stack([P, 2.0 * P])
    want = np.stack([I6 @ V, 2 * I6 @ V])
    np.testing.assert_allclose(sp.inertia_times(Pb, jnp.asarray(np.stack([V, V]))), want, rtol=1e-14)
    np.testing.assert_allclose(sp.inertia_matrix(Pb)[1], 2 * I6, rtol=1e-14)


def test_skew_is_the_cross_product_and_batches():
    """``skew(a) @ b == a x b``, for one vector and over leading axes."""
    a = jax.random.normal(jax.random.PRNGKey(0), (4, 2, 3))
    b = jax.random.normal(jax.random.PRNGKey(1), (4, 2, 3))
    S = sp.skew(a)
    assert S.shape == (4, 2, 3, 3)
    np.testing.assert_allclose(jnp.einsum("...ij,...j->...i", S, b), jnp.cross(a, b), atol=1e-14)
    np.testing.assert_allclose(S[1, 0], sp.skew(a[1, 0]), atol=0)
    np.testing.assert_allclose(S, -jnp.swapaxes(S, -1, -2), atol=0)


@pytest.mark.parametrize(
    "rows",
    [
        [2, 3, 4],  # one run: a slice
        [0, 1, 5, 6, 7, 3],  # three runs: slices, concatenated
        [[1, 2], [3, 4], [5, 6]],  # a 2-D selection that is one run
        [-1, 0, 1],  # negative indices (the last row, then the first two)
        [7, 0, 1, 2, 3, 4, 5, 6],  # a rotation
        [4, 1, 6, 1, 3, 0],  # more runs than TAKE_MAX_RUNS: one gather
        [3, 3, 3],  # repeats
    ],
)
def test_take_rows_is_indexing_by_slices_where_it_can(rows):
    """``take_rows(x, rows)`` equals ``x[rows]``; a few contiguous runs compile to slices, with
    no gather and no index constant (each constant costs per call on XLA:CPU)."""
    x = jnp.arange(8 * 2 * 3, dtype=jnp.float64).reshape(8, 2, 3)
    r = np.asarray(rows)
    np.testing.assert_array_equal(sp.take_rows(x, r), x[r])
    flat = np.where(r.reshape(-1) < 0, r.reshape(-1) + 8, r.reshape(-1))
    runs = 1 + int(np.sum(np.diff(flat) != 1))
    jaxpr = str(jax.make_jaxpr(lambda x: sp.take_rows(x, r))(x))
    assert ("gather" in jaxpr) == (runs > sp.TAKE_MAX_RUNS), jaxpr
    hlo = jax.jit(lambda x: sp.take_rows(x, r)).lower(x).compile().as_text()
    assert ("s32[" in hlo) == (runs > sp.TAKE_MAX_RUNS)
    # It differentiates as indexing does (the transpose of a selection scatters back).
    g = jax.grad(lambda x: jnp.sum(jnp.sin(sp.take_rows(x, r))))(x)
    np.testing.assert_allclose(g, jax.grad(lambda x: jnp.sum(jnp.sin(x[r])))(x), atol=1e-15)
    # ... and batches under vmap
    xb = jnp.stack([x, 2 * x])
    np.testing.assert_array_equal(jax.vmap(lambda x: sp.take_rows(x, r))(xb), xb[:, r])
    assert sp.take_rows(x, np.zeros(0, int)).shape == (0, 2, 3)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 10.0, 1e3, 1e7])
def test_cos_sin_is_within_a_few_ulps_of_numpy_and_differentiates_exactly(scale):
    """``sp.cos_sin`` (range reduction by pi/2 in four parts, Taylor polynomials) against
    numpy's cos and sin over +-scale: within 3 ulps (numpy's own error included); the
    quadrant boundaries; NaN for non-finite input and beyond ``COS_SIN_LIMIT``; first and
    second derivatives equal -sin/cos and -cos/-sin; float32 (XLA's own) within 2 float32
    epsilons; an integer angle."""
    x = np.random.default_rng(0).uniform(-scale, scale, 100_000)
    c, s = jax.jit(sp.cos_sin)(x)
    for got, want in ((c, np.cos(x)), (s, np.sin(x))):
        ulps = np.abs(np.asarray(got) - want) / np.spacing(np.abs(want))
        assert ulps.max() <= 3
    k = np.arange(-8, 9)
    c, s = sp.cos_sin(k * np.pi / 4)
    np.testing.assert_allclose(c, np.cos(k * np.pi / 4), rtol=0, atol=4e-16)
    np.testing.assert_allclose(s, np.sin(k * np.pi / 4), rtol=0, atol=4e-16)
    assert np.isnan(np.asarray(sp.cos_sin(jnp.asarray([np.inf, -np.inf, np.nan, 1e11, -2e10])))).all()
    assert np.isfinite(np.asarray(sp.cos_sin(jnp.asarray([1.3e10, -1.3e10])))).all()
    t = jnp.asarray(np.linspace(-scale, scale, 9))
    dc = jax.vmap(jax.grad(lambda a: sp.cos_sin(a)[0]))(t)
    ds = jax.vmap(jax.grad(lambda a: sp.cos_sin(a)[1]))(t)
    np.testing.assert_allclose(dc, -np.sin(t), rtol=0, atol=4e-16)
    np.testing.assert_allclose(ds, np.cos(t), rtol=0, atol=4e-16)
    ddc = jax.vmap(jax.grad(jax.grad(lambda a: sp.cos_sin(a)[0])))(t)
    np.testing.assert_allclose(ddc, -np.cos(t), rtol=0, atol=4e-16)
    x32 = np.random.default_rng(1).uniform(-min(scale, 100.0), min(scale, 100.0), 10_000).astype(np.float32)
    c32, s32 = sp.cos_sin(jnp.asarray(x32))
    assert c32.dtype == jnp.float32
    for got, want in ((c32, np.cos(x32.astype(float))), (s32, np.sin(x32.astype(float)))):
        np.testing.assert_allclose(np.asarray(got, float), want, rtol=0, atol=2 * np.finfo(np.float32).eps)
    np.testing.assert_allclose(sp.cos_sin(2), (np.cos(2.0), np.sin(2.0)), rtol=1e-15)


def test_matmul_const_equals_the_product_and_has_no_reduction():
    """``sp.matmul_const(a, c)``: ``a @ c`` for a constant ``c`` with at most one nonzero per
    column (columns of ``a`` picked and scaled; a zero column, a -1, a 2.5), batched, with the
    derivative of the product; a ``c`` with a fuller column falls back to the product."""
    a = jnp.asarray(np.random.default_rng(3).normal(size=(4, 3, 3)))
    sel = np.array([[0.0, -1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.5]])
    for c in (sel, np.diag([1.0, 1.0, 0.0]), np.cross(np.eye(3), [0.0, 0.0, 1.0]), np.ones((3, 2))):
        np.testing.assert_allclose(sp.matmul_const(a, c), np.asarray(a) @ c, rtol=0, atol=1e-15)
        t = jnp.ones_like(a)
        dout = jax.jvp(lambda x: sp.matmul_const(x, c), (a,), (t,))[1]
        np.testing.assert_allclose(dout, np.asarray(t) @ c, rtol=0, atol=1e-15)
    hlo = jax.jit(lambda x: sp.matmul_const(x, sel)).lower(a).as_text()
    assert "reduce" not in hlo and "dot_general" not in hlo


def test_cross_and_inertia_times_reverse_mode_has_no_pads():
    """``sp.cross`` equals ``jnp.cross`` (broadcast operands, values and both derivatives),
    and the reverse pass of it and of ``sp.inertia_times`` gathers each operand's cotangent
    with one stack or concatenation: no ``pad`` (a component's zero-padded cotangent, which
    ended a fused kernel on XLA:CPU per component)."""
    rng = np.random.default_rng(5)
    a, b = jnp.asarray(rng.normal(size=(4, 3))), jnp.asarray(rng.normal(size=(3,)))
    np.testing.assert_allclose(sp.cross(a, b), np.cross(a, b), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sp.cross(b, a), np.cross(b, a), rtol=0, atol=1e-15)
    loss = lambda f: lambda x, y: jnp.sum(jnp.sin(f(x, y)))
    for got, want in zip(jax.grad(loss(sp.cross), (0, 1))(a, b), jax.grad(loss(jnp.cross), (0, 1))(a, b)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    check_grads(sp.cross, (a, b), order=2, modes=("fwd", "rev"))
    P, V = jnp.asarray(rng.normal(size=(5, 10))), jnp.asarray(rng.normal(size=(5, 6)))
    for f, args in ((loss(sp.cross), (a, b)), (loss(sp.inertia_times), (P, V))):
        hlo = jax.jit(jax.grad(f, (0, 1))).lower(*args).as_text()
        assert " pad(" not in hlo and "stablehlo.pad" not in hlo
    mat = jax.vmap(lambda p, v: sp.inertia_matrix(p) @ v)(P, V)
    np.testing.assert_allclose(sp.inertia_times(P, V), mat, rtol=0, atol=1e-14)


def test_computed_once_is_the_value_in_a_kernel_of_its_own():
    """``sp.computed_once(x)`` is ``x`` bit for bit (NaN where infinite), its derivative is
    the identity, and XLA computes the polynomials of ``cos_sin`` under it once, in their own
    kernels, not inside each kernel that broadcasts them into a rotation matrix."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=1000) * 10)
    c, _ = sp.cos_sin(x)
    assert np.array_equal(np.asarray(sp.computed_once(c)), np.asarray(c))
    assert np.isnan(np.asarray(sp.computed_once(jnp.asarray([np.inf, -np.inf, np.nan])))).all()
    np.testing.assert_array_equal(jax.vmap(jax.grad(sp.computed_once))(x), np.ones(1000))

    def rotation(a, once):
        c, s = sp.cos_sin(a)
        if once:
            c, s = sp.computed_once(c), sp.computed_once(s)
        Z, K = np.diag([0.0, 0.0, 1.0])[None], np.cross(np.eye(3), [0.0, 0.0, 1.0])[None]
        return Z + c[:, None, None] * (np.eye(3)[None] - Z) + s[:, None, None] * K

    def kernels_rounding(once):
        hlo = jax.jit(lambda a: rotation(a, once)).lower(x).compile().as_text()
        np.testing.assert_allclose(jax.jit(lambda a: rotation(a, once))(x)[:, 0, 0], np.cos(x), atol=1e-15)
        return [b for b in hlo.split("\n}\n") if "fused_computation" in b and "round-nearest-even" in b]

    once = kernels_rounding(True)
    assert once and all(b.split("->")[1].split("{")[0].strip() == "f64[1000]" for b in once)


def test_point_mass_inertia_is_the_parallel_axis_term():
    """``Inertia.point_mass`` (Simbody's ``Inertia::pointMassAt``): m (|p|^2 1 - p p^T), so a
    point mass's inertia about an axis through the origin is m times its squared distance
    from that axis."""
    m, p = 2.5, np.array([0.3, -0.4, 1.2])
    inertia = sj.Inertia.point_mass(m, p).matrix
    for axis in np.eye(3):
        d = p - (p @ axis) * axis
        assert inertia[np.argmax(axis), np.argmax(axis)] == pytest.approx(m * d @ d, rel=1e-15)
    np.testing.assert_allclose(inertia, m * (p @ p * np.eye(3) - np.outer(p, p)), rtol=1e-15)
    with pytest.raises(ValueError, match="inertia"):
        sj.Inertia.point_mass(-1.0, p)
