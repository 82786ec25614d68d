"""Process settings for simjax's programs, made by an explicit call: :func:`configure`.

Importing simjax changes nothing outside simjax. ``sj.configure()``, called right after
``import simjax`` and before the first JAX computation, makes four process-wide settings
that simjax's programs were measured with (numbers in ``benchmarks/RESULTS.md``):

* ``XLA_FLAGS`` gets ``--xla_cpu_enable_concurrency_optimized_scheduler=false``: with that
  XLA:CPU scheduler on, programs with nested while loops (a batched ``Assembler.track``,
  batched constrained dynamics) can hang on a CPU with few cores.
* On jaxlib 0.10 only (XLA stops the process on a flag it does not know), also
  ``--xla_cpu_use_fusion_emitters=false`` (XLA:CPU's classic fusion emitters: programs
  compile about twice as fast and batched dynamics run 1.1-1.6x faster) and
  ``--xla_cpu_experimental_ynn_fusion_type=`` (XLA emits its small dots itself rather
  than calling YNNPACK per product: batched forward dynamics 1.2-1.4x faster; large dense
  matmuls elsewhere in the process get slower, and the Assembler's own programs get
  XLA's default back as a compiler option).
* XLA:CPU's intra-op thread pool gets one thread (``PJRT_NPROC=1``), or one more than the
  host devices when there are several: with more, batched programs whose loop bodies XLA
  splits across threads hung intermittently (``benchmarks/repro_cpu_hang.py``).
* JAX's persistent compilation cache points at simjax's cache directory, so a second
  process skips compiling (and, beside it, tracing the Assembler's solvers).

Each is kept where the user already chose (a flag already in ``XLA_FLAGS``, ``PJRT_NPROC``
or ``NPROC`` set, a JAX cache directory configured), and each has an argument of
:func:`configure` and an environment opt-out (``SIMJAX_XLA_FLAGS=0``,
``SIMJAX_CPU_THREADS=N``, ``SIMJAX_COMPILATION_CACHE=0``, ``SIMJAX_CACHE_DIR``).

Without the call simjax runs on JAX's defaults: the same answers, slower compiles, and on
a CPU with few cores the risk of the hangs above. Two per-program compiler options are
applied to the Assembler's own programs whether or not :func:`configure` ran (they touch
no other program): XLA's ``while-loop-invariant-code-motion`` pass off (its solve and
track compile ~25% faster and run ~10% faster), and LLVM's optimisations off for the brief
program that realizes the States a ``track`` returns.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import jax

_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"


def _off(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("0", "false", "no", "off")


_EMITTERS_FLAG = "--xla_cpu_use_fusion_emitters"
_YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type"
# The flags appended on a tested jaxlib only (flag, value): the classic fusion emitters and
# no YNNPACK library fusions (see the module docstring).
_TESTED_FLAGS = ((_EMITTERS_FLAG, "false"), (_YNN_FLAG, ""))
# jaxlib (major, minor) versions whose XLA was measured with them (and knows the flags: XLA
# aborts the process on an unknown flag in XLA_FLAGS).
_TESTED_JAXLIB = ((0, 10),)


def _jaxlib_version() -> tuple[int, ...]:
    try:
        text = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return ()
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def configure_xla_flags() -> None:
    """Turn XLA:CPU's concurrency-optimised scheduler off and, on a tested jaxlib, its MLIR
    fusion emitters and YNNPACK library fusions (see the module docstring)."""
    global _ynn_off_by_simjax
    if _off("SIMJAX_XLA_FLAGS"):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if _SCHEDULER_FLAG not in flags:
        flags = f"{flags} {_SCHEDULER_FLAG}=false".strip()
    tested = _jaxlib_version() in _TESTED_JAXLIB
    added = [(flag, value) for flag, value in _TESTED_FLAGS if tested and flag not in flags]
    flags = " ".join([flags, *(f"{flag}={value}" for flag, value in added)])
    _ynn_off_by_simjax = _ynn_off_by_simjax or any(flag == _YNN_FLAG for flag, _ in added)
    os.environ["XLA_FLAGS"] = flags


# Whether ``configure_xla_flags`` turned YNNPACK fusions off (the user's own setting is kept
# everywhere, the solver's programs included).
_ynn_off_by_simjax = False


_DISABLED_PASSES = re.compile(r"--xla_disable_hlo_passes=(\S*)")
_SOLVER_DISABLED_PASSES = ("while-loop-invariant-code-motion",)
# XLA's default YNNPACK fusions, given back to the solver's programs (a compiler option takes
# the enum's full name).
_YNN_SOLVER = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"


def solver_compiler_options() -> dict[str, str]:
    """XLA compiler options for the Assembler's programs (see the module docstring): the
    passes they run without, with any the user's ``XLA_FLAGS`` disables (an option given
    to a program overrides the flag), and XLA's default YNNPACK fusions where simjax turned
    them off for the process."""
    if _off("SIMJAX_XLA_FLAGS"):
        return {}
    found = _DISABLED_PASSES.findall(os.environ.get("XLA_FLAGS", ""))
    user = [p for names in found for p in names.split(",") if p]
    passes = user + [p for p in _SOLVER_DISABLED_PASSES if p not in user]
    opts = {"xla_disable_hlo_passes": ",".join(passes)}
    if _ynn_off_by_simjax:
        opts[_YNN_FLAG.lstrip("-")] = _YNN_SOLVER
    return opts


def light_compiler_options() -> dict[str, int]:
    """XLA compiler options for brief programs, where compiling is most of the cost (see
    the module docstring)."""
    return {} if _off("SIMJAX_XLA_FLAGS") else {"xla_backend_optimization_level": 0}


_DEVICE_COUNT = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


def host_device_count() -> int:
    """The number of CPU host devices JAX will make (``XLA_FLAGS``'
    ``--xla_force_host_platform_device_count`` or ``JAX_NUM_CPU_DEVICES``; default 1)."""
    found = _DEVICE_COUNT.findall(os.environ.get("XLA_FLAGS", ""))
    n = int(found[-1]) if found else 1
    env = os.environ.get("JAX_NUM_CPU_DEVICES", "").strip()
    return max(1, int(env) if env.isdigit() and int(env) > 0 else n)


def configure_cpu_threads(threads: int | None = None) -> None:
    """Size XLA:CPU's intra-op thread pool (see the module docstring): ``threads``, else
    ``SIMJAX_CPU_THREADS``, else one thread, or one more than the host devices when there
    are several; ``0`` leaves JAX's own choice. A ``PJRT_NPROC``/``NPROC`` the user set wins."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
        raise ValueError(
            f"sj.configure: cpu_threads={threads!r}; give a whole number of XLA:CPU threads "
            "(1 is the default, 0 leaves JAX's own choice of one per core)"
        )
    if "PJRT_NPROC" in os.environ or "NPROC" in os.environ:
        return
    n = host_device_count()
    if threads is not None:
        want = str(threads)
    else:
        # set but empty (``SIMJAX_CPU_THREADS= python ...``) means unset, as for the others
        want = os.environ.get("SIMJAX_CPU_THREADS", "").strip() or ("1" if n == 1 else str(n + 1))
    if not want.isdigit():
        raise ValueError(
            f"SIMJAX_CPU_THREADS={want!r} is not a whole number; give the number of XLA:CPU "
            "threads (1 is the default, 0 leaves JAX's own choice of one per core)"
        )
    if int(want) > 0:
        os.environ["PJRT_NPROC"] = str(int(want))


def compilation_cache_dir() -> str | None:
    """The persistent compilation cache directory in use (None: off)."""
    d = jax.config.values.get("jax_compilation_cache_dir")
    return None if d is None else str(d)


def configure_compilation_cache(directory: str | os.PathLike[str] | None = None) -> None:
    """Point JAX's persistent compilation cache at ``directory``, else ``SIMJAX_CACHE_DIR``,
    else simjax's user cache directory (``$XDG_CACHE_HOME/simjax/jax`` or
    ``~/.cache/simjax/jax``), unless a JAX cache directory is configured already."""
    if jax.config.values.get("jax_compilation_cache_dir") is not None:
        return
    base = os.fspath(directory) if directory is not None else os.environ.get("SIMJAX_CACHE_DIR")
    if base:
        path = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        path = (Path(xdg) if xdg else Path.home() / ".cache") / "simjax" / "jax"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:  # read-only home: run without the cache
        return
    jax.config.update("jax_compilation_cache_dir", str(path))
    # A size limit turns on the cache's file lock: without it, a process can read an entry
    # another process is still writing (both compiling the same program, e.g. pytest-xdist
    # workers) and crash deserialising it (seen: a segmentation fault in
    # get_executable_and_time, jax 0.10.2). The least recently used entries go beyond it.
    if jax.config.values.get("jax_compilation_cache_max_size", -1) == -1 and _has_filelock():
        _stamp_unlimited_entries(path)
        jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)


def _stamp_unlimited_entries(path: Path) -> None:
    """Give entries written without a size limit (no access-time file) one, as JAX's
    eviction reads it for every entry."""
    try:
        now = time.time_ns().to_bytes(8, "little")
        for entry in path.glob("*-cache"):
            stamp = entry.with_name(entry.name.removesuffix("-cache") + "-atime")
            if not stamp.exists():
                stamp.write_bytes(now)
    except OSError:
        pass


CACHE_MAX_BYTES = 4 * 2**30


def _has_filelock() -> bool:
    try:
        import filelock  # noqa: F401, PLC0415 (optional at import time; a dependency of simjax)
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Configuration:
    """What :func:`configure` left in place: ``XLA_FLAGS``, XLA:CPU's thread count
    (``PJRT_NPROC``; None: JAX's own choice), the compilation cache directory (None: off),
    and whether JAX's backend had already started (then the flags and threads apply only
    to a new process)."""

    xla_flags: str
    cpu_threads: str | None
    compilation_cache_dir: str | None
    backend_was_running: bool


def configure(
    *,
    xla_flags: bool = True,
    cpu_threads: int | None = None,
    compilation_cache: bool | str | os.PathLike[str] = True,
) -> Configuration:
    """Make the process settings simjax's programs were measured with (see
    :mod:`simjax._config`): XLA:CPU flags, XLA:CPU's thread count and a persistent
    compilation cache. Call it once, right after ``import simjax`` and before the first JAX
    computation (XLA reads its flags and threads when its CPU backend starts). Calling it
    again changes nothing that is already set.

    Args:
        xla_flags: Append simjax's XLA:CPU flags to ``XLA_FLAGS`` (flags already there are
            kept as they are). ``SIMJAX_XLA_FLAGS=0`` in the environment also says no.
        cpu_threads: XLA:CPU's intra-op threads; default ``SIMJAX_CPU_THREADS`` or one
            (one more than the host devices when there are several). ``0``: JAX's own
            choice, one per core, at the risk of the hangs the module docstring describes.
        compilation_cache: ``True`` (default): JAX's persistent cache in
            ``SIMJAX_CACHE_DIR`` or simjax's user cache directory; a path: there;
            ``False``: no cache. ``SIMJAX_COMPILATION_CACHE=0`` also says no.

    Returns:
        A :class:`Configuration` with what is in place.

    Example::

        import jax
        import simjax as sj

        sj.configure()                              # before the first JAX computation
        jax.config.update("jax_enable_x64", True)
    """
    from jax._src import xla_bridge  # noqa: PLC0415 (private: whether XLA's backend started)

    running = bool(xla_bridge.backends_are_initialized())
    before = (os.environ.get("XLA_FLAGS", ""), os.environ.get("PJRT_NPROC"))
    if xla_flags:
        configure_xla_flags()
    configure_cpu_threads(cpu_threads)
    if compilation_cache is not False and not _off("SIMJAX_COMPILATION_CACHE"):
        configure_compilation_cache(None if compilation_cache is True else compilation_cache)
    after = (os.environ.get("XLA_FLAGS", ""), os.environ.get("PJRT_NPROC"))
    if running and after != before:
        warnings.warn(
            "sj.configure(): JAX's backend has already started in this process, so the XLA "
            "flags and thread count it set take effect only in a new process; call "
            "sj.configure() right after importing simjax, before the first JAX computation",
            stacklevel=2,
        )
    return Configuration(after[0], after[1], compilation_cache_dir(), running)
