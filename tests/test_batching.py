"""``sj.vmap``: jax.vmap evaluated in chunks on a CPU (issue 15's large batches)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_tree

import simjax as sj
from simjax import _batching

jax.config.update("jax_enable_x64", True)

KINDS = ("Pin", "Ball", "Slider", "Free")


def _batch(system, n, seed=0):
    rng = np.random.default_rng(seed)
    s0 = system.realize_topology()
    q = s0.q[None] + jnp.asarray(rng.normal(size=(n, s0.nq))) * 0.4
    u = jnp.asarray(rng.normal(size=(n, s0.nu)))
    return s0, jax.vmap(lambda qq, uu: s0.with_q(qq).with_u(uu))(q, u)


def _member(batch, i):
    return jax.tree.map(lambda x: x[i], batch)


def _has_loop(jaxpr) -> bool:
    return any(e.primitive.name in ("scan", "while") for e in jaxpr.jaxpr.eqns)


def test_sj_vmap_equals_jax_vmap_in_chunks_with_a_remainder_and_shared_arguments():
    """Every member of a batch of 300 States of a tree (Pin, Ball, Slider, Free), in three
    chunks of at most 128 (100 each), and of 301 (three of 101, the last padded by two
    copies of the last member), equals one jax.vmap (same program per member: to round-off), with a
    shared (in_axes None) argument; "auto" chunks on a single CPU device; a batch no larger
    than the chunk, and chunk_size=None, are one plain vmap (no loop in the program)."""
    system, *_ = random_tree(3, kinds=KINDS)
    s0, batch = _batch(system, 300)

    def f(s, scale):
        return scale * system.realize(s, sj.Stage.ACCELERATION).udot

    ref = jax.jit(jax.vmap(f, in_axes=(0, None)))(batch, 2.0)
    for chunk in (128, "auto"):
        out = jax.jit(sj.vmap(f, in_axes=(0, None), chunk_size=chunk))(batch, 2.0)
        assert out.shape == ref.shape == (300, s0.nu)
        np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-12, atol=1e-12)
    odd = jax.tree.map(lambda x: jnp.concatenate([x, x[:1]]), batch)
    out = jax.jit(sj.vmap(f, in_axes=(0, None), chunk_size=128))(odd, 2.0)
    assert out.shape == (301, s0.nu)
    np.testing.assert_allclose(np.asarray(out[:300]), np.asarray(ref), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out[300]), np.asarray(ref[0]), rtol=1e-12, atol=1e-12)
    if jax.default_backend() == "cpu" and jax.device_count() == 1:
        assert _has_loop(jax.make_jaxpr(sj.vmap(f, in_axes=(0, None)))(batch, 2.0))
    assert not _has_loop(jax.make_jaxpr(sj.vmap(f, in_axes=(0, None), chunk_size=None))(batch, 2.0))
    small = jax.tree.map(lambda x: x[:100], batch)
    assert not _has_loop(jax.make_jaxpr(sj.vmap(f, in_axes=(0, None), chunk_size=128))(small, 2.0))
    # pytrees out: a whole realized State per member
    st = jax.jit(sj.vmap(lambda s: system.realize(s, sj.Stage.VELOCITY), chunk_size=64))(batch)
    np.testing.assert_allclose(np.asarray(st.u), np.asarray(batch.u), rtol=0, atol=0)


def test_chunked_kernels_run_in_chunks_under_a_plain_jax_vmap():
    """``_batching.chunked(fun)`` (the articulated solve's and the unrolled tree sums'
    primal) under a plain ``jax.vmap`` of 300 members equals ``jax.vmap(fun)``, with an
    unbatched argument too; on a single CPU device its program loops over chunks, and 100
    members are one vmap. As a ``custom_jvp``'s primal it differentiates by the rule in both
    modes, batched."""
    fun = lambda x, y: jnp.sin(x) * y
    f = _batching.chunked(fun)
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.normal(size=(300, 3))), jnp.asarray(rng.normal(size=3))
    batched = jax.vmap(f, in_axes=(0, None))
    np.testing.assert_allclose(batched(x, y), jnp.sin(x) * y[None], rtol=1e-15)
    np.testing.assert_allclose(jax.vmap(f)(x, x), jnp.sin(x) * x, rtol=1e-15)
    if jax.default_backend() == "cpu" and jax.device_count() == 1:
        assert _has_loop(jax.make_jaxpr(batched)(x, y))
    assert not _has_loop(jax.make_jaxpr(batched)(x[:100], y))
    g = jax.custom_jvp(f)
    g.defjvp(lambda p, t: jax.jvp(fun, p, t))
    grad = jax.grad(lambda x: jnp.sum(jax.vmap(g, in_axes=(0, None))(x, y)))(x)
    np.testing.assert_allclose(grad, jnp.cos(x) * y[None], rtol=1e-14)
    _, tangent = jax.jvp(lambda x: jax.vmap(g, in_axes=(0, None))(x, y), (x,), (jnp.ones_like(x),))
    np.testing.assert_allclose(tangent, jnp.cos(x) * y[None], rtol=1e-14)


def test_a_plain_jax_vmap_of_realize_runs_in_chunks_and_differentiates_as_before():
    """``realize`` under a plain ``jax.vmap`` of 300 States (on a single CPU device: three
    equal chunks of 100, at most 128 each, one program; ``_batching.chunked_jvp``) equals
    the same States realized in batches of 100 (one vmap each, no chunking), and so do its
    derivatives in every order of the transforms (vmap of grad, grad of vmap, jvp of vmap,
    vmap of jvp), which go through the realization whole; the jvp also equals a central difference."""
    system, *_ = random_tree(3, kinds=KINDS)
    _, batch = _batch(system, 300, seed=3)
    udot = lambda s: system.realize(s, sj.Stage.ACCELERATION).udot
    loss = lambda q, s: jnp.sum(udot(s.with_q(q)) ** 2)
    d = jnp.asarray(np.random.default_rng(4).normal(size=batch.q.shape))
    parts = [jax.tree.map(lambda x, i=i: x[i : i + 100], (batch, d)) for i in range(0, 300, 100)]
    whole = lambda f: jax.jit(f)(batch, d)
    by_parts = lambda f: jnp.concatenate([jax.jit(f)(*p) for p in parts])
    cases = {
        "udot": lambda b, _: jax.vmap(udot)(b),
        "vmap of grad": lambda b, _: jax.vmap(lambda s: jax.grad(loss)(s.q, s))(b),
        "grad of vmap": lambda b, _: jax.grad(lambda q: jnp.sum(jax.vmap(loss)(q, b)))(b.q),
        "jvp of vmap": lambda b, t: jax.jvp(lambda q: jax.vmap(udot)(b.with_q(q)), (b.q,), (t,))[1],
        "vmap of jvp": lambda b, t: jax.vmap(
            lambda s, ts: jax.jvp(lambda q: udot(s.with_q(q)), (s.q,), (ts,))[1]
        )(b, t),
    }
    for name, f in cases.items():
        np.testing.assert_allclose(
            np.asarray(whole(f)), np.asarray(by_parts(f)), rtol=1e-11, atol=1e-11, err_msg=name
        )
    tangent = whole(cases["jvp of vmap"])
    h = 1e-6
    at = lambda x: jax.jit(jax.vmap(udot))(batch.with_q(x))
    fd = (at(batch.q + h * d) - at(batch.q - h * d)) / (2 * h)
    np.testing.assert_allclose(np.asarray(tangent), np.asarray(fd), rtol=1e-5, atol=1e-6)
    if jax.default_backend() == "cpu" and jax.device_count() == 1:
        # the program works on chunks of 100 States, not on all 300, and has no second copy
        # for a smaller remainder chunk
        text = jax.jit(jax.vmap(udot)).lower(batch).as_text()
        assert text.count("tensor<300x") < text.count("tensor<100x") / 10
        assert text.count("tensor<44x") == 0


@pytest.mark.parametrize("integrator", ["rk4", "tsit5"])
def test_a_plain_jax_vmap_of_simulate_runs_whole_rollouts_in_chunks(integrator):
    """``sj.simulate`` under a plain ``jax.vmap`` of 300 States runs each chunk's whole
    rollout in turn (``_batching.chunked_jvp``; for the adaptive integrators' checkpointed
    loop ``chunked_vjp``), with what the run closes over batched too (a policy's gains
    here): it equals the same runs 100 at a time, so do the gradients with respect to the
    gains (vmap of grad, grad of vmap) and a central difference, and its program works on
    chunks."""
    system, _, forces, mobods = random_tree(3, kinds=KINDS)
    sj.Force.CoordinateActuator(forces, mobods[1], 0, name="servo")
    _, batch = _batch(system, 300, seed=3)
    gains = jnp.linspace(0.5, 3.0, 300)
    kw = dict(dt=5e-3) if integrator == "rk4" else dict(accuracy=1e-8)

    def final_q(s, k):
        policy = lambda t, st: -k * st.u[:1]  # closes over the batched gain
        run = sj.simulate(system, s, 0.05, t0=0.0, integrator=integrator, controls=policy, **kw)
        return run.final_state.q

    loss = lambda k, s: jnp.sum(final_q(s, k) ** 2)
    cases = {
        "final q": lambda b, k: jax.vmap(final_q)(b, k),
        "vmap of grad": lambda b, k: jax.vmap(jax.grad(loss))(k, b),
    }
    if integrator == "rk4":  # (the adaptive one's gradient compiles slowly: one order)
        cases["grad of vmap"] = lambda b, k: jax.grad(lambda kk: jnp.sum(jax.vmap(loss)(kk, b)))(k)
    parts = [jax.tree.map(lambda x, i=i: x[i : i + 100], (batch, gains)) for i in range(0, 300, 100)]
    whole = {}
    for name, f in cases.items():
        whole[name] = jax.jit(f)(batch, gains)
        by_parts = jnp.concatenate([jax.jit(f)(*p) for p in parts])
        np.testing.assert_allclose(
            np.asarray(whole[name]), np.asarray(by_parts), rtol=1e-11, atol=1e-14, err_msg=name
        )
    # against central differences (the adaptive steps are not differentiated: looser)
    h, at = 1e-5, jax.jit(loss)
    fd = [
        (at(gains[i] + h, _member(batch, i)) - at(gains[i] - h, _member(batch, i))) / (2 * h) for i in (0, 1)
    ]
    rtol = 1e-6 if integrator == "rk4" else 1e-4
    np.testing.assert_allclose(np.asarray(whole["vmap of grad"][:2]), np.asarray(fd), rtol=rtol, atol=1e-10)
    if jax.default_backend() == "cpu" and jax.device_count() == 1:
        text = jax.jit(jax.vmap(final_q)).lower(batch, gains).as_text()
        assert text.count("tensor<300x") < text.count("tensor<100x") / 10


def test_sj_vmap_differentiates_in_both_modes_like_jax_vmap():
    """Gradients through the chunked loop (reverse and forward mode) equal those through
    one jax.vmap, and central differences."""
    system, *_ = random_tree(5, kinds=KINDS)
    _, batch = _batch(system, 20, seed=1)

    def loss(q, mapper):
        b = batch.with_q(q)
        return jnp.sum(mapper(lambda s: system.realize(s, sj.Stage.ACCELERATION).udot)(b) ** 2)

    def chunked(x):
        return loss(x, lambda fn: sj.vmap(fn, chunk_size=8))

    q = batch.q
    g_ref = jax.jit(jax.grad(lambda x: loss(x, jax.vmap)))(q)
    g = jax.jit(jax.grad(chunked))(q)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-10, atol=1e-10)
    d = jnp.asarray(np.random.default_rng(2).normal(size=q.shape))
    _, jv = jax.jit(lambda x, t: jax.jvp(chunked, (x,), (t,)))(q, d)
    h = 1e-6
    ref = jax.jit(lambda x: loss(x, jax.vmap))
    fd = (ref(q + h * d) - ref(q - h * d)) / (2 * h)
    np.testing.assert_allclose(float(jv), float(jnp.vdot(g_ref, d)), rtol=1e-10)
    np.testing.assert_allclose(float(jv), float(fd), rtol=1e-6)


def test_sj_vmap_refuses_what_it_cannot_map_and_says_how():
    def f(x, y):
        return x + y

    x = jnp.ones((5, 2))
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        sj.vmap(f, chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        sj.vmap(f, chunk_size="big")
    with pytest.raises(ValueError, match="one entry"):
        sj.vmap(f, in_axes=(0,))(x, x)
    with pytest.raises(ValueError, match="jnp.moveaxis"):
        sj.vmap(f, in_axes=(1, None))(x, x)
    with pytest.raises(ValueError, match="no argument is batched"):
        sj.vmap(f, in_axes=(None, None))(x, x)
    with pytest.raises(ValueError, match=r"differ in size \(\[4, 5\]\)"):
        sj.vmap(f)(x, jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="holds a scalar"):
        sj.vmap(f)(x, jnp.float64(1.0))
    # under an outer jax.vmap it nests like lax.map
    out = jax.vmap(sj.vmap(f, in_axes=(0, None), chunk_size=2), in_axes=(0, None))(
        jnp.ones((3, 5, 2)), jnp.arange(2.0)
    )
    np.testing.assert_allclose(np.asarray(out), np.ones((3, 5, 2)) + np.arange(2.0))
