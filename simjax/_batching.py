"""``sj.vmap``: ``jax.vmap`` that evaluates a large batch in cache-sized chunks on a CPU.

One ``jax.vmap`` over thousands of States makes every intermediate of the program an
array over the whole batch (chain50's mass matrices alone: 20 MB at B = 1024), so XLA:CPU
streams each kernel's operands through memory and time per state *rises* past B ~ 1024.
A loop over chunks of the batch, each chunk a ``vmap``, keeps one chunk's intermediates
in cache: ``jax.lax.map(f, batch, batch_size=n)``. :func:`vmap` does that for
you where it pays (a CPU) and is ``jax.vmap`` elsewhere (a GPU wants the whole batch at
once). With several CPU host devices, each device's block of the batch is looped over on
its own, so a batch split by ``sj.shard`` stays where it lies.

It is differentiable in both modes, composes with ``jit`` and nests under ``jax.vmap``
like ``lax.map``; on a CPU it outruns one ``jax.vmap`` of thousands of States
(``benchmarks/RESULTS.md``). ``realize`` and ``simulate`` themselves run through
:func:`chunked_jvp`, so a plain ``jax.vmap`` of a realization is chunked the same way, and
so is a plain ``jax.vmap`` of a whole rollout (each chunk's run in turn); ``sj.vmap`` chunks
the rest of a user's function too.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

__all__ = ["vmap", "AUTO_CHUNK_SIZE"]

# Chosen by measurement (benchmarks/RESULTS.md, "sj.vmap"): at B = 4096, chunks of 32, 64,
# 128 and 256 states were within ~10% of each other on four models, and 128 was best or
# within noise on three of them.
AUTO_CHUNK_SIZE = 128


# Whether :func:`chunked` wraps its function in a ``custom_vmap`` (read while tracing).
_CHUNKING: contextvars.ContextVar[bool] = contextvars.ContextVar("simjax_chunking", default=True)


def chunking() -> bool:
    """Whether :func:`chunked` (so ``chunked_jvp``, ``chunked_vjp``) chunks here: false
    inside :func:`unchunked`. A traced function whose program depends on it (a jit cache)
    keys on it."""
    return _CHUNKING.get()


@contextlib.contextmanager
def unchunked() -> Iterator[None]:
    """Trace without batching rules: the functions made by :func:`chunked` (so
    ``chunked_jvp``'s) are their function itself (their ``custom_jvp`` rules kept), and the
    kind groups' poses (``dynamics.stages``) take their constant terms whatever the batch.
    The numbers are the same; under ``vmap`` only the chunking and the choice of form
    are lost.

    For code differentiated inside a custom rule: ``lax.scan``'s reverse mode partially
    evaluates its body's known part to hoist loop invariants, and partial evaluation
    replaces a ``custom_jvp`` whose inputs it does not know by its primal function. A
    ``custom_jvp`` called on primal values inside another's rule (a realization inside the
    projection's rule) stays in that known part, so in a scan its primal, a
    ``custom_vmap`` with no reverse mode, came out, and a second reverse pass failed
    ("Linearization failed to produce known values")."""
    token = _CHUNKING.set(False)
    try:
        yield
    finally:
        _CHUNKING.reset(token)


def _auto_chunk_size() -> int | None:
    """The chunk ``chunk_size="auto"`` uses: ``AUTO_CHUNK_SIZE`` on a CPU (per host device
    when there are several), else ``None`` (one ``jax.vmap``)."""
    if jax.default_backend() != "cpu":
        return None
    return AUTO_CHUNK_SIZE


def _host_parts(n: int) -> int:
    """How many equal parts a batch of ``n`` is looped over separately: the number of CPU
    host devices when there are several and they divide ``n`` (a batch ``sj.shard`` split
    over them lies in that many contiguous blocks, one per device), else 1."""
    d = jax.device_count()
    if d > 1 and jax.default_backend() == "cpu" and n % d == 0:
        return d
    return 1


def _chunk_loop(one: Callable[..., Any], xs: tuple[Any, ...], n: int, size: int) -> Any:
    """``jax.vmap(one)(xs)`` over a batch of ``n`` as a loop over chunks of at most ``size``.

    ``lax.map(batch_size=...)``'s loop, written out so that arrays with a zero-size axis (a
    State's empty groups) reshape too. The batch is cut into ``k = ceil(n / size)`` equal
    chunks, the last padded with copies of the last member (fewer than ``k``) and the
    padding dropped after: one program for every chunk (a smaller remainder chunk would
    be a second copy of the program, doubling the compile time)."""
    k = -(-n // size)
    size = -(-n // k)
    pad = k * size - n
    if pad:
        xs = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]), xs)
    chunks = jax.tree.map(lambda x: x.reshape((k, size, *x.shape[1:])), xs)
    ys = jax.lax.map(lambda c: jax.vmap(one)(*c), chunks)
    return jax.tree.map(lambda y: y.reshape((k * size, *y.shape[2:]))[:n], ys)


def vmap(
    fun: Callable[..., Any],
    in_axes: int | None | Sequence[int | None] = 0,
    *,
    chunk_size: int | str | None = "auto",
) -> Callable[..., Any]:
    """``jax.vmap(fun, in_axes)`` evaluated in chunks of ``chunk_size`` batch members.

    Args:
        fun: The function of one batch member (any pytrees in and out, a ``State`` too).
        in_axes: ``0`` (every positional argument batched along its leading axis), or one
            entry per positional argument, ``0`` (batched) or ``None`` (shared by every
            member). Other axes: move them first (``jnp.moveaxis``) or use ``jax.vmap``.
        chunk_size: ``"auto"`` (default): chunks of ``AUTO_CHUNK_SIZE`` (128) states on a
            CPU (per host device where there are several), one ``jax.vmap`` on a GPU/TPU. An
            int: chunks of that many members on any device. ``None``: plain ``jax.vmap``.

    Returns:
        The batched function: its outputs have the batch as their leading axis, exactly
        as ``jax.vmap``'s (``out_axes=0``). A batch that is not a multiple of the chunk
        size is cut into equal chunks (the last padded with copies of the last member,
        dropped after), so one program serves every chunk.

    Example::

        f = jax.jit(sj.vmap(lambda s: system.realize(s, sj.Stage.ACCELERATION).udot))
        udots = f(batch_of_states)
    """
    if chunk_size is not None and chunk_size != "auto":
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(
                f"sj.vmap: chunk_size must be a positive int, 'auto' or None (plain jax.vmap), "
                f"not {chunk_size!r}"
            )

    @functools.wraps(fun)
    def batched(*args: Any) -> Any:
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(
                f"sj.vmap: in_axes has {len(axes)} entries for {len(args)} positional arguments; "
                "give one entry (0 or None) per argument"
            )
        if any(a not in (0, None) for a in axes):
            raise ValueError(
                f"sj.vmap: in_axes entries must be 0 or None, got {axes}; move the batch axis to the "
                "front (jnp.moveaxis) or use jax.vmap"
            )
        mapped = [i for i, a in enumerate(axes) if a == 0]
        if not mapped:
            raise ValueError("sj.vmap: no argument is batched (every in_axes entry is None)")
        sizes = set()
        for i in mapped:
            for leaf in jax.tree.leaves(args[i]):
                shape: tuple[int, ...] = tuple(getattr(leaf, "shape", ()))
                if len(shape) == 0:
                    raise ValueError(
                        f"sj.vmap: positional argument {i} is batched along axis 0 but holds a "
                        "scalar; give it in_axes None, or a leading batch axis"
                    )
                sizes.add(shape[0])
        if len(sizes) != 1:
            raise ValueError(
                f"sj.vmap: the batched arguments' leading axes differ in size ({sorted(sizes)}); "
                "every batched array needs the same batch size"
            )
        n = sizes.pop()
        size = _auto_chunk_size() if isinstance(chunk_size, str) else chunk_size
        if size is None or n <= size:
            return jax.vmap(fun, in_axes=axes)(*args)

        def one(*xs: Any) -> Any:
            full = list(args)
            for i, x in zip(mapped, xs):
                full[i] = x
            return fun(*full)

        xs = tuple(args[i] for i in mapped)
        parts = _host_parts(n) if isinstance(chunk_size, str) else 1
        if parts == 1:
            return _chunk_loop(one, xs, n, size)
        # Several CPU host devices: each device's contiguous block of the batch is looped
        # over in chunks on its own (the device axis is a vmap, so XLA keeps a sharded
        # batch where it lies; a loop over chunks of the whole batch would gather it).
        m = n // parts
        blocks = jax.tree.map(lambda x: x.reshape((parts, m, *x.shape[1:])), xs)
        if m <= size:
            out = jax.vmap(jax.vmap(one))(*blocks)
        else:
            out = jax.vmap(lambda *b: _chunk_loop(one, b, m, size))(*blocks)
        return jax.tree.map(lambda y: y.reshape((n, *y.shape[2:])), out)

    return batched


def chunked(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``fun`` (of arrays) whose ``jax.vmap`` runs as ``sj.vmap`` does, in chunks of
    ``AUTO_CHUNK_SIZE`` on a CPU (a ``custom_vmap`` rule): for kernels whose
    intermediates outgrow the cache when a plain ``jax.vmap`` batches them whole.
    ``custom_vmap`` functions have no reverse mode, so use it as a ``custom_jvp``'s primal
    (whose rule differentiates something else), never differentiated itself. Inside
    :func:`unchunked` it is ``fun`` itself."""
    if not chunking():
        return fun
    f = jax.custom_batching.custom_vmap(fun)

    @f.def_vmap
    def _rule(axis_size: int, in_batched: Sequence[Any], *args: Any) -> tuple[Any, Any]:
        axes = tuple(0 if b else None for b in in_batched)  # (array arguments: one flag each)
        out = vmap(fun, in_axes=axes)(*args)
        return out, jax.tree.map(lambda _: True, out)

    return f


def chunked_jvp(
    fun: Callable[..., Any], rule: Callable[[tuple[Any, ...], tuple[Any, ...]], Any] | None = None
) -> Callable[..., Any]:
    """``fun`` (of arrays) whose ``jax.vmap`` runs in chunks as :func:`chunked`'s does, as a
    ``custom_jvp`` whose ``rule(primals, tangents) -> (out, tangent_out)`` differentiates it
    (default ``jax.jvp(fun)``: differentiated, in either mode and batched or not, it is
    ``fun``, whole). ``realize`` and ``simulate`` run through it, so a plain ``jax.vmap`` of
    a realization or a rollout over thousands of States keeps its working set in cache as
    ``sj.vmap`` does; so do the unrolled tree sums,
    with the dense product's derivative (``tree.traversal``).

    With the default rule ``fun`` may close over traced values (a controller's batched
    gains, a force's parameter under the caller's ``vmap``/``grad``): it is traced once to a
    jaxpr and the traced values it closed over become arguments of their own, batched and
    differentiated like the others (``custom_vmap`` and ``custom_jvp`` refuse closed-over
    batched values). With a ``rule``, ``fun`` must close over none."""

    def jvp_of(body: Callable[..., Any], own: Callable[..., Any] | None = None) -> Callable[..., Any]:
        g = jax.custom_jvp(chunked(body))
        g.defjvp(own or (lambda primals, tangents: jax.jvp(body, primals, tangents)))
        return g

    return jvp_of(fun, rule) if rule is not None else _closure_converted(fun, jvp_of)


def chunked_forward(fun: Callable[..., Any], refusal: Callable[[], Exception]) -> Callable[..., Any]:
    """:func:`chunked_jvp` with the default rule for a ``fun`` that forward mode alone
    differentiates (a plain while loop: ``simulate``'s adaptive integrators with
    ``adjoint='forward'``): its tangents pass through an identity that cannot be transposed,
    so reverse mode (``jax.grad``, ``jax.vjp``), even around a ``jit`` that encloses the
    call, raises ``refusal()`` rather than JAX's message about while loops."""

    def jvp_of(body: Callable[..., Any]) -> Callable[..., Any]:
        def rule(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
            out, t_out = jax.jvp(body, primals, tangents)
            return out, jax.tree.map(functools.partial(_forward_only, refusal), t_out)

        g = jax.custom_jvp(chunked(body))
        g.defjvp(rule)
        return g

    return _closure_converted(fun, jvp_of)


def _forward_only(refusal: Callable[[], Exception], t: Any) -> Any:
    """``t`` (a tangent), whose transposition (reverse mode) raises ``refusal()``."""
    if not isinstance(t, jax.Array) or not jnp.issubdtype(t.dtype, jnp.inexact):
        return t
    return _forward_only_p.bind(t, refusal=refusal)


def _forward_only_transpose(ct: Any, x: Any, *, refusal: Callable[[], Exception]) -> Any:
    raise refusal()


_forward_only_p = Primitive("simjax_forward_only")
_forward_only_p.def_impl(lambda x, *, refusal: x)
_forward_only_p.def_abstract_eval(lambda x, *, refusal: x)
mlir.register_lowering(_forward_only_p, lambda ctx, x, *, refusal: [x])
ad.deflinear2(_forward_only_p, _forward_only_transpose)
batching.primitive_batchers[_forward_only_p] = lambda args, dims, *, refusal: (
    _forward_only_p.bind(args[0], refusal=refusal),
    dims[0],
)


def chunked_vjp(fun: Callable[..., Any], again: Callable[[], Exception] | None = None) -> Callable[..., Any]:
    """:func:`chunked_jvp` for a ``fun`` that reverse mode alone differentiates (it holds a
    ``custom_vjp``: ``simulate``'s adaptive integrators with their checkpointed loop): a
    ``custom_vjp`` whose primal is :func:`chunked` and whose rule is ``jax.vjp(fun)``, whole.
    Closed-over traced values become arguments as there. ``again()``: the error to raise
    when the backward pass is differentiated in turn (a second reverse pass), while it is
    traced; default: let JAX try."""

    def bwd(pullback: Callable[..., Any], ct: Any) -> Any:
        out = pullback(ct)
        return out if again is None else jax.tree.map(functools.partial(_refused, again), out)

    def vjp_of(body: Callable[..., Any]) -> Callable[..., Any]:
        g = jax.custom_vjp(chunked(body))
        g.defvjp(lambda *xs: jax.vjp(body, *xs), bwd)
        return g

    return _closure_converted(fun, vjp_of)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _refused(error: Callable[[], Exception], x: Any) -> Any:
    """``x``, whose derivative raises ``error()`` while it is traced."""
    return x


@_refused.defjvp
def _refused_jvp(error: Callable[[], Exception], primals: Any, tangents: Any) -> Any:
    raise error()


def _closure_converted(fun: Callable[..., Any], wrap: Callable[..., Any]) -> Callable[..., Any]:
    """``fun`` evaluated as ``wrap(body)`` of its closure-converted jaxpr (``_converted``)."""

    def call(*args: Any) -> Any:
        body, flat, out_tree = _converted(fun, args)
        return jax.tree.unflatten(out_tree, wrap(body)(*flat))

    return call


def _converted(fun: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Callable[..., Any], list[Any], Any]:
    """``fun(*args)`` as ``(body, flat, out_tree)``: ``body(*flat)`` evaluates ``fun``'s jaxpr
    (traced once here) on ``args``' leaves followed by the traced values ``fun`` closes over,
    and returns its flat outputs (``out_tree`` rebuilds them)."""
    leaves, in_tree = jax.tree.flatten(args)
    trace = jax.make_jaxpr(lambda *xs: fun(*jax.tree.unflatten(in_tree, xs)), return_shape=True)
    closed, shape = trace(*leaves)
    traced = [isinstance(c, jax.core.Tracer) for c in closed.consts]
    hoisted = [c for c, t in zip(closed.consts, traced) if t]
    n = len(leaves)

    def body(*xs: jax.Array) -> list[jax.Array]:
        rest = iter(xs[n:])
        consts = [next(rest) if t else c for c, t in zip(closed.consts, traced)]
        return jax.core.eval_jaxpr(closed.jaxpr, consts, *xs[:n])

    return body, [*leaves, *hoisted], jax.tree.structure(shape)
