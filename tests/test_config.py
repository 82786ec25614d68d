"""Process settings simjax makes on import (``simjax._config``) and their opt-outs, each
checked in a fresh Python process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = (
    "import json, os, jax, simjax; "
    "print(json.dumps([jax.config.values.get('jax_compilation_cache_dir'), os.environ.get('XLA_FLAGS', '')]))"
)


def probe(**env: str) -> tuple[str | None, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SIMJAX_", "XLA_FLAGS", "XDG_CACHE"))}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=e, check=True)
    cache, flags = json.loads(out.stdout.strip().splitlines()[-1])
    return cache, flags


def test_cache_dir_and_scheduler_flag_defaults(tmp_path):
    cache, flags = probe(SIMJAX_CACHE_DIR=str(tmp_path / "c"))
    assert cache == str(tmp_path / "c") and (tmp_path / "c").is_dir()
    assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in flags
    cache, _ = probe(XDG_CACHE_HOME=str(tmp_path / "x"))
    assert cache == str(tmp_path / "x" / "simjax" / "jax")


def test_opt_outs_and_user_settings_win(tmp_path):
    cache, flags = probe(SIMJAX_COMPILATION_CACHE="0", SIMJAX_XLA_FLAGS="0")
    assert cache is None and "concurrency_optimized_scheduler" not in flags
    # a flag the user set is left as it is
    _, flags = probe(XLA_FLAGS="--xla_cpu_enable_concurrency_optimized_scheduler=true")
    assert flags == "--xla_cpu_enable_concurrency_optimized_scheduler=true"
    # a cache directory the user configured through JAX's own variable wins
    cache, _ = probe(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"), SIMJAX_CACHE_DIR=str(tmp_path / "c"))
    assert cache == str(tmp_path / "mine")
