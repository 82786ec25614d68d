"""Process-wide JAX settings simjax makes on import (each with an opt-out).

* **XLA:CPU scheduler.** On a CPU with few cores, programs with nested while loops (a
  batched ``Assembler.track``, batched constrained dynamics) can hang for ever under
  XLA:CPU's concurrency-optimised scheduler: the main thread waits for a result, every
  XLA thread idles (seen with jax 0.10 on 2 cores; never with the scheduler off).
  simjax appends ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to
  ``XLA_FLAGS`` unless that flag is already there. It takes effect only if JAX's CPU
  backend has not started yet (import simjax before running JAX computations); opt out
  with ``SIMJAX_XLA_FLAGS=0``.
* **Persistent compilation cache.** Compiled programs are kept on disk so a second
  process (a notebook restart, the next trial) skips XLA compilation: JAX's cache in
  ``$SIMJAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/simjax/jax``, else
  ``~/.cache/simjax/jax``, unless a JAX cache directory is already configured. Opt out
  with ``SIMJAX_COMPILATION_CACHE=0``; ``compilation_cache_dir()`` tells where it is.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"


def _off(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("0", "false", "no", "off")


def configure_xla_flags() -> None:
    """Turn XLA:CPU's concurrency-optimised scheduler off (see the module docstring)."""
    if _off("SIMJAX_XLA_FLAGS"):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if _SCHEDULER_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_SCHEDULER_FLAG}=false".strip()


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


configure_xla_flags()
configure_compilation_cache()
