"""Traced programs kept on disk, so that a second process skips tracing as well.

JAX's persistent compilation cache (``simjax._config``) spares a new process the XLA
compilation, but not the tracing and lowering that come before it: for a full-body IK
``track`` those are ~6.5 s of a ~9.5 s warm start. Here the lowered program of a top-level
call is exported (``jax.export``: StableHLO, serialised) into ``simjax-traces/`` beside the
compilation cache; a later process with the same key deserialises and calls it, and its
compilation then hits the persistent cache.

The key is a fingerprint of everything the trace depends on: the function's static
description (the Model's structure, the solver plan, static arguments), the arguments'
tree structure, shapes and dtypes, the versions of JAX, jaxlib and simjax's own source,
``jax_enable_x64`` and the backend. It is built only from values simjax knows how to
fingerprint (numbers, strings, arrays, simjax classes and functions); anything else (a
user's Python function, a custom condition, an object compared by identity) means no key,
and the call is traced as usual. Calls under ``jit``, ``vmap`` or ``grad`` (traced
arguments), calls with host callbacks (progress bars) and processes with several devices
(whose batches may be split over them) are traced as usual too.

``compile_ahead`` prepares a call's program before the call: traced and lowered in the
calling thread, compiled on a background thread (XLA releases the GIL while it compiles),
so that the Assembler's ``track`` compiles the program realizing its States while it
traces the solver's.

Turned off with the compilation cache (``SIMJAX_COMPILATION_CACHE=0``) or on its own with
``SIMJAX_TRACE_CACHE=0``. Needs ``flatbuffers`` (a dependency of simjax) for serialisation.
"""

from __future__ import annotations

import concurrent.futures
import copyreg
import dataclasses
import enum
import hashlib
import os
import pickle
import types
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jax
import jaxlib
import numpy as np

from .._config import compilation_cache_dir
from ..model.model import Identity
from ..model.state import State

FORMAT = "simjax-traces-1"

# Equinox marks absent fields in a Module's tree structure with a singleton; it must stay
# that singleton through pickling (the output structures are pickled beside the programs).
try:
    from equinox._module._flatten import MISSING as _EQX_MISSING
except ImportError:  # another Equinox: output structures that hold it are not kept
    _EQX_MISSING = None  # type: ignore[assignment]


def _eqx_missing() -> Any:
    return _EQX_MISSING


if _EQX_MISSING is not None:
    copyreg.pickle(type(_EQX_MISSING), lambda _: (_eqx_missing, ()))


class _NoKey(Exception):
    """A value that cannot be fingerprinted across processes."""


def directory() -> Path | None:
    """Where exported programs are kept (None: off)."""
    if os.environ.get("SIMJAX_TRACE_CACHE", "").strip().lower() in ("0", "false", "no", "off"):
        return None
    base = compilation_cache_dir()
    return None if base is None else Path(base) / "simjax-traces"


@cache
def _source_digest() -> str:
    """A digest of simjax's own source files (an edited checkout never reuses old traces)."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _qualified(obj: Any) -> str:
    """``module.qualname`` of a simjax (or builtin/NumPy) class or module-level function."""
    mod, qual = getattr(obj, "__module__", None) or "", getattr(obj, "__qualname__", "")
    if "<" in qual or not qual:  # lambdas, closures, classes defined in functions
        raise _NoKey(qual)
    if mod.split(".")[0] not in ("simjax", "builtins", "numpy"):
        raise _NoKey(f"{mod}.{qual}")
    return f"{mod}.{qual}"


def _fp(x: Any, out: list[str], depth: int = 0) -> None:
    if depth > 200:
        raise _NoKey("too deep")
    d = depth + 1
    t = type(x)
    if x is None or t in (bool, int, float, complex, str, bytes):
        out.append(f"{t.__name__}:{x!r}")
    elif isinstance(x, enum.Enum):
        out.append(f"enum:{_qualified(t)}.{x.name}")
    elif isinstance(x, (np.ndarray, np.generic)):
        a = np.asarray(x)
        if a.dtype.hasobject:
            raise _NoKey("object array")
        out.append(
            f"nd:{a.dtype.str}:{a.shape}:{hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()}"
        )
    elif isinstance(x, (tuple, list)):
        out.append(f"{t.__name__}[")
        for e in x:
            _fp(e, out, d)
        out.append("]")
    elif isinstance(x, (set, frozenset)):
        out.append("set[" + ",".join(sorted(fingerprint_or_raise(e) for e in x)) + "]")
    elif isinstance(x, dict):
        items = sorted((fingerprint_or_raise(k), v) for k, v in x.items())
        out.append("dict[")
        for k, v in items:
            out.append(k)
            _fp(v, out, d)
        out.append("]")
    elif isinstance(x, type):
        out.append(f"type:{_qualified(x)}")
    elif isinstance(x, (types.FunctionType, types.BuiltinFunctionType)):
        out.append(f"fn:{_qualified(x)}")
    elif isinstance(x, Identity):
        raise _NoKey("an object compared by identity")
    elif hasattr(x, "_structure_key"):
        out.append(f"obj:{_qualified(t)}")
        _fp(x._structure_key(), out, d)
    elif hasattr(x, "_definition"):  # sj.Function
        _fp(x._definition(), out, d)
    elif dataclasses.is_dataclass(x):
        out.append(f"dc:{_qualified(t)}[")
        for f in dataclasses.fields(x):
            out.append(f.name)
            _fp(getattr(x, f.name), out, d)
        out.append("]")
    elif hasattr(x, "obj") and getattr(t, "__slots__", None) == ("obj",):  # _functions._Same
        _fp(x.obj, out, d)
    else:
        raise _NoKey(f"{t.__module__}.{t.__qualname__}")


def fingerprint_or_raise(x: Any) -> str:
    out: list[str] = []
    _fp(x, out)
    return hashlib.sha256("\x1f".join(out).encode()).hexdigest()


def fingerprint(x: Any) -> str | None:
    """A digest of ``x`` equal in every process for equal values; None when ``x`` holds
    something that has no such digest (user code, objects compared by identity)."""
    try:
        return fingerprint_or_raise(x)
    except _NoKey:
        return None


def _environment() -> str:
    return "|".join(
        [
            FORMAT,
            jax.__version__,
            jaxlib.__version__,
            str(jax.config.values.get("jax_enable_x64")),
            str(jax.config.values.get("jax_default_matmul_precision")),
            jax.default_backend(),
            _source_digest(),
        ]
    )


def _is_state(x: Any) -> bool:
    return isinstance(x, State)


def _with_owner(tree: Any, uid: int = 0, version: int = 0) -> Any:
    """The States in ``tree`` marked as owned by System ``uid`` at topology ``version``
    (static, per process; 0 and 0 in keys and kept programs)."""

    def mark(s: Any) -> Any:
        return s.replace(system_uid=uid, topology_version=version) if _is_state(s) else s

    return jax.tree.map(mark, tree, is_leaf=_is_state)


# digest -> (jitted call of the exported program, output tree structure), this process
_LOADED: dict[str, tuple[Callable[..., Any], Any]] = {}
_NOT_EXPORTABLE: set[str] = set()
# (environment, static key, argument tree structure, avals) -> digest, this process
_DIGESTS: dict[tuple[Any, ...], str] = {}


def _aval(x: Any) -> Any:
    """The abstract value of an argument leaf (a ShapeDtypeStruct stands for itself)."""
    return x if isinstance(x, jax.ShapeDtypeStruct) else jax.typeof(x)


def _where(static_key: str | None, args: tuple[Any, ...]) -> tuple[Path, str, Any, list[Any]] | None:
    """``(directory, digest, treedef, avals)`` of a top-level call whose program can be kept
    on disk; None when it is traced as usual (cache off, no key, traced or sharded
    arguments, several devices, a program known not to export)."""
    where = directory()
    if where is None or static_key is None or jax.device_count() > 1:
        # With several devices an exported call's results are committed to one device (a
        # plain jit's are not) and would not mix with arrays split over the others.
        return None
    leaves, treedef = jax.tree.flatten(args)
    if any(isinstance(x, jax.core.Tracer) for x in leaves) or any(
        len(x.sharding.device_set) > 1 for x in leaves if isinstance(x, jax.Array)
    ):  # traced (under jit/vmap/grad) or sharded over several devices
        return None
    try:  # the avals jit would give (no conversion of host arrays here: the call does it)
        types_ = [_aval(x) for x in leaves]
    except TypeError:
        return None
    avals = tuple((t.dtype.str, t.shape, bool(t.weak_type)) for t in types_)
    env = _environment()
    seen = (env, static_key, treedef, avals)
    digest = _DIGESTS.get(seen)
    if digest is None:  # once per argument structure (a per-frame loop calls this every frame)
        key_tree = jax.tree.structure(_with_owner(args))  # no per-process System ids
        parts = [env, static_key, str(key_tree), ";".join(f"{d}{sh}{int(w)}" for d, sh, w in avals)]
        digest = _DIGESTS[seen] = hashlib.sha256("\x1e".join(parts).encode()).hexdigest()
    if digest in _NOT_EXPORTABLE:
        return None
    return where, digest, treedef, types_


def _specs(types_: list[Any]) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(t.shape, t.dtype, weak_type=t.weak_type) for t in types_]


def _program(fn: Callable[..., Any], where: Path, digest: str, treedef: Any, types_: list[Any]) -> Any:
    """The exported program and its output tree structure: from disk, else traced and
    written there; None when it cannot be exported (then marked so)."""
    found = _load(where, digest) or _export(fn, treedef, types_, where, digest)
    if found is None:
        _NOT_EXPORTABLE.add(digest)  # do not trace it twice on every call
    return found


def _jitted(exp: Any, options: dict[str, Any] | None) -> Any:
    """An exported program as a ``jit`` function, compiled with ``options``."""
    return jax.jit(exp.call, compiler_options=options)


def _compiled(
    exp: Any, out_tree: Any, types_: list[Any], options: dict[str, Any] | None
) -> tuple[Callable[..., Any], Any]:
    """Compile an exported program now (XLA releases the GIL while it compiles, so this can
    run beside the caller's thread); calls that the compiled program refuses (another
    argument type) go through ``jit`` as usual."""
    jitted = _jitted(exp, options)
    try:
        compiled = jitted.lower(*_specs(types_)).compile()
    except Exception:  # noqa: BLE001 (compiled again, in the foreground, on the first call)
        return jitted, out_tree

    def run(*leaves: Any) -> Any:
        try:
            return compiled(*leaves)
        except (TypeError, ValueError):
            return jitted(*leaves)

    return run, out_tree


# digest -> the background compilation of a program compile_ahead prepared, this process
_PENDING: dict[str, concurrent.futures.Future[tuple[Callable[..., Any], Any]]] = {}
_POOL: list[concurrent.futures.ThreadPoolExecutor] = []


def compile_ahead(
    fn: Callable[..., Any],
    static_key: str | None,
    args: tuple[Any, ...],
    compiler_options: dict[str, Any] | None = None,
    fallback: Callable[..., Any] | None = None,
) -> None:
    """Get ``call(fn, static_key, args)``'s program ready: trace and lower it here (or load
    it from disk) and compile it on a background thread, so that the compilation overlaps
    whatever this thread does next (tracing the next program, compiling another). ``args``
    may hold ``jax.ShapeDtypeStruct`` leaves for arrays not computed yet; the other
    arguments as ``call``'s (``fallback`` is accepted so that one set of keywords serves
    both; nothing runs here, so it is not used). Does nothing where ``call`` would trace
    as usual."""
    found = _where(static_key, args)
    if found is None:
        return
    where, digest, treedef, types_ = found
    if digest in _LOADED or digest in _PENDING:
        return
    program = _program(fn, where, digest, treedef, types_)
    if program is None:
        return
    if not _POOL:
        _POOL.append(concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="simjax-compile"))
    exp, out_tree = program
    _PENDING[digest] = _POOL[0].submit(_compiled, exp, out_tree, types_, compiler_options)


def call(
    fn: Callable[..., Any],
    static_key: str | None,
    args: tuple[Any, ...],
    owner: State,
    compiler_options: dict[str, Any] | None = None,
    fallback: Callable[..., Any] | None = None,
) -> Any:
    """``fn(*args)``, through a program exported to disk when it can be (see the module
    docstring). ``static_key``: the :func:`fingerprint` of everything ``fn`` closes over that
    shapes its trace (None: not known, trace as usual); ``owner``: the State whose System
    the returned States belong to; ``compiler_options``: XLA options to compile the exported
    program with (``fn`` itself, traced inside the export, must be a plain ``jit``);
    ``fallback``: what is called instead of ``fn`` where the program is not kept (e.g. ``fn``
    jitted with those options, at the top level)."""
    run_as_usual = fn if fallback is None else fallback
    found = _where(static_key, args)
    if found is None:
        return run_as_usual(*args)
    where, digest, treedef, types_ = found
    entry = _LOADED.get(digest)
    if entry is None and digest in _PENDING:
        entry = _PENDING.pop(digest).result()
    if entry is None:
        program = _program(fn, where, digest, treedef, types_)
        if program is None:
            return run_as_usual(*args)
        exp, out_tree = program
        entry = (_jitted(exp, compiler_options), out_tree)
    _LOADED[digest] = entry
    run, out_tree = entry
    try:
        out = run(*jax.tree.leaves(args))
    except (TypeError, ValueError):  # e.g. arrays placed on another device than exported for
        return run_as_usual(*args)
    return _with_owner(jax.tree.unflatten(out_tree, out), owner.system_uid, owner.topology_version)


def _load(where: Path, digest: str) -> tuple[Any, Any] | None:
    path = where / f"{digest}.jaxexport"
    if not path.exists():
        return None
    try:
        out_tree, blob = pickle.loads(path.read_bytes())
        exp = jax.export.deserialize(bytearray(blob))
    except Exception:  # noqa: BLE001 (a damaged or foreign file: trace again, overwrite it)
        return None
    if out_tree.num_leaves != len(exp.out_avals):
        return None
    return exp, out_tree


def _export(
    fn: Callable[..., Any], treedef: Any, types_: list[Any], where: Path, digest: str
) -> tuple[Any, Any] | None:
    box: list[Any] = []

    def flat(*lv: jax.Array) -> list[jax.Array]:
        out, tree = jax.tree.flatten(_with_owner(fn(*jax.tree.unflatten(treedef, lv))))
        box.append(tree)
        return out

    try:
        exp = jax.export.export(jax.jit(flat))(*_specs(types_))
        blob = pickle.dumps((box[0], bytes(exp.serialize())))
        if pickle.loads(blob)[0] != box[0]:
            raise ValueError("the output's tree structure does not survive pickling")
    except Exception:  # noqa: BLE001 (not exportable: host callbacks, flatbuffers missing, ...)
        return None
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f"{digest}.{os.getpid()}.tmp"
        tmp.write_bytes(blob)
        os.replace(tmp, where / f"{digest}.jaxexport")
    except OSError:  # a read-only cache: still use the program in this process
        pass
    return exp, box[0]
