"""Process-wide JAX settings simjax makes on import (each with an opt-out).

* **XLA:CPU scheduler.** On a CPU with few cores, programs with nested while loops (a
  batched ``Assembler.track``, batched constrained dynamics) can hang for ever under
  XLA:CPU's concurrency-optimised scheduler: the main thread waits for a result, every
  XLA thread idles (seen with jax 0.10 on 2 cores; never with the scheduler off).
  simjax appends ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to
  ``XLA_FLAGS`` unless that flag is already there. It takes effect only if JAX's CPU
  backend has not started yet (import simjax before running JAX computations); opt out
  with ``SIMJAX_XLA_FLAGS=0``.
* **XLA:CPU's classic fusion emitters.** With jaxlib 0.10, simjax also appends
  ``--xla_cpu_use_fusion_emitters=false`` (unless ``XLA_FLAGS`` names that flag already):
  XLA:CPU then emits its fusions with the classic (elemental) emitters instead of the
  newer MLIR ones. Measured on a 2-core machine (float64): programs compile about twice as
  fast (an OpenSim model's IK ``track``: XLA compile 20.3 -> 13.7 s; batched forward
  dynamics 0.9 -> 0.45 s) and batched forward dynamics runs 1.1-1.6x faster (B = 1024).
  Other jaxlib versions are left alone (XLA stops the process on a flag it does not know,
  and the classic path is being retired upstream); same opt-out, same caveat.
* **No YNNPACK library fusions.** With jaxlib 0.10, simjax also appends
  ``--xla_cpu_experimental_ynn_fusion_type=`` (an empty list; unless ``XLA_FLAGS`` names
  that flag already): XLA:CPU then emits its dots itself instead of handing each one to
  YNNPACK, whose per-call cost dominates simjax's many small batched products (3x3 and 6x6
  blocks, small mass matrices). Measured on a 2-core machine (float64, B = 1024, chunks
  of 128): batched forward dynamics 1.2-1.4x faster (the 20-link chain 17.7 -> 12.4,
  the humanoid 23.3 -> 16.3 µs per state; real robots 1.2x), constrained forward
  dynamics 1.1x; single-state programs unchanged within the noise. Compiling is ~8%
  slower (``tests/test_dynamics.py`` without caches: 237-239 -> 254-259 s).
  The price, for other code in the process: large dense matmuls go to Eigen instead of
  YNNPACK (a 512 x 512 product 4.4 -> 5.9 ms); XLA's own default
  (``--xla_cpu_experimental_ynn_fusion_type=individual_dot``) in ``XLA_FLAGS`` restores it.
  The Assembler's own programs (below) get XLA's default back as a compiler option: a
  full-body IK ``track`` compiled ~2 s (8%) slower without YNNPACK and solved no faster.
* **No loop-invariant code motion in the IK solver's programs.** The Assembler compiles
  its solve and track programs with XLA's ``while-loop-invariant-code-motion`` pass off
  (a per-program compiler option, ``solver_compiler_options()``; nothing else is touched).
  That pass ran over the solver's nested while loops again and again: measured on a
  2-core machine (jax 0.10.2, float64), body25b's 100-frame ``track`` compiled in 5.2-5.3 s
  without it against 6.8-7.1 s with it, and ran in 1.6 s against 1.8-1.9 s (the answers
  agree to 2e-13). A ``--xla_disable_hlo_passes`` in the user's ``XLA_FLAGS`` is kept
  (the passes it names stay off too); ``SIMJAX_XLA_FLAGS=0`` opts out. The program that
  realizes the States a ``track`` returns (brief work: 8 ms for 100 frames of a full-body
  model) is compiled with LLVM's optimisations off (``light_compiler_options()``):
  1.9 instead of 4.1 CPU-seconds to compile, 23 instead of 8 ms to run.
* **One XLA:CPU intra-op thread.** With two or more threads in XLA:CPU's intra-op pool,
  batched programs that run loops whose bodies XLA splits across threads (a batched
  time step with coordinate limits, a batched ``Assembler.track``, constrained dynamics of
  robots with couplers at B >= 512) hang for ever, intermittently: the main thread waits
  for the result while every XLA and Eigen thread waits for work (jax/jaxlib 0.10.2,
  2 cores; the scheduler flag above, ``--xla_cpu_multi_thread_eigen=false`` and XNNPACK
  off do not prevent it; a pool of one thread does, as does pinning the process to one
  core). ``benchmarks/repro_cpu_hang.py`` reproduces it. simjax sets ``PJRT_NPROC=1``
  (the size of that pool) unless ``PJRT_NPROC`` or ``NPROC`` is already set.
  ``SIMJAX_CPU_THREADS=N`` asks for N threads instead (``0``: JAX's default, one per
  core) at the risk of the hang; measured on 2 cores at B = 1024, the second thread gave
  1.0x (humanoid) to 1.3x (50-link chain) in forward dynamics. With several host devices
  (``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS``, or
  ``JAX_NUM_CPU_DEVICES=N``), a pool of N threads or fewer hangs a batch split over the
  devices (the humanoid at B = 256 and 1024 over 2 devices with 1 or 2 threads: 5 runs of
  6 hung; none of 9 with N + 1), so simjax then sets ``PJRT_NPROC=N+1``. Like the
  flag, it takes effect only if JAX's CPU backend has not started yet (a device count set
  through ``jax.config`` after importing simjax is not seen: set ``PJRT_NPROC`` too).
* **Persistent compilation cache.** Compiled programs are kept on disk so a second
  process (a notebook restart, the next trial) skips XLA compilation: JAX's cache in
  ``$SIMJAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/simjax/jax``, else
  ``~/.cache/simjax/jax``, unless a JAX cache directory is already configured. Opt out
  with ``SIMJAX_COMPILATION_CACHE=0``; ``compilation_cache_dir()`` tells where it is. The
  cache is limited to 4 GiB (least recently used entries go first), which also makes JAX
  lock its files, so parallel processes sharing it never read a half-written entry.
  Traced IK solvers are kept beside it (``simjax.studies._traces``; opt out with
  ``SIMJAX_TRACE_CACHE=0``).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import time
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


def configure_cpu_threads() -> None:
    """Size XLA:CPU's intra-op thread pool (see the module docstring): one thread, or one
    more than the host devices when there are several, unless the user chose
    (``PJRT_NPROC``/``NPROC``, or ``SIMJAX_CPU_THREADS``)."""
    if "PJRT_NPROC" in os.environ or "NPROC" in os.environ:
        return
    n = host_device_count()
    # set but empty (``SIMJAX_CPU_THREADS= python ...``) means unset, as for the other variables
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


def configure_compilation_cache() -> None:
    """Point JAX's persistent compilation cache at simjax's user cache directory."""
    if _off("SIMJAX_COMPILATION_CACHE") or jax.config.values.get("jax_compilation_cache_dir") is not None:
        return
    base = os.environ.get("SIMJAX_CACHE_DIR")
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


configure_xla_flags()
configure_cpu_threads()
configure_compilation_cache()
