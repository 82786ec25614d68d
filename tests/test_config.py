"""Process settings simjax makes on import (``simjax._config``) and their opt-outs, each
checked in a fresh Python process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = (
    "import json, os, jax, simjax; "
    "print(json.dumps([jax.config.values.get('jax_compilation_cache_dir'), os.environ.get('XLA_FLAGS', ''), "
    "os.environ.get('PJRT_NPROC')]))"
)


def clean_env(**env: str) -> dict[str, str]:
    e = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SIMJAX_", "XLA_FLAGS", "XDG_CACHE", "PJRT_NPROC")) and k != "NPROC"
    }
    e.update(env)
    return e


def probe(**env: str) -> tuple[str | None, str]:
    return tuple(probe_all(**env)[:2])  # type: ignore[return-value]


def probe_all(**env: str) -> list:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=clean_env(**env), check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def test_one_xla_cpu_thread_by_default_and_the_users_choice_wins():
    """simjax sizes XLA:CPU's intra-op pool to one thread (``PJRT_NPROC=1``): with two, the
    batched limit step hangs (``benchmarks/repro_cpu_hang.py``)."""
    assert probe_all()[2] == "1"
    assert probe_all(SIMJAX_CPU_THREADS="4")[2] == "4"
    assert probe_all(SIMJAX_CPU_THREADS="0")[2] is None  # JAX's own choice
    assert probe_all(PJRT_NPROC="3")[2] == "3"
    assert probe_all(NPROC="2")[2] is None  # JAX reads NPROC itself
    # several host devices: one thread more than devices (N or fewer hang a split batch)
    assert probe_all(XLA_FLAGS="--xla_force_host_platform_device_count=8")[2] == "9"
    assert probe_all(JAX_NUM_CPU_DEVICES="2")[2] == "3"
    assert probe_all(XLA_FLAGS="--xla_force_host_platform_device_count=2", SIMJAX_CPU_THREADS="5")[2] == "5"
    bad = subprocess.run(
        [sys.executable, "-c", "import simjax"],
        capture_output=True,
        text=True,
        env=clean_env(SIMJAX_CPU_THREADS="many"),
    )
    assert bad.returncode != 0 and "SIMJAX_CPU_THREADS='many' is not a whole number" in bad.stderr


def test_batched_limit_step_does_not_hang():
    """The reproducer of the XLA:CPU hang (a batched euler step with 20 coordinate limits at
    B = 1024, called repeatedly; with two XLA threads it never returned within the first
    few calls on this 2-core machine) runs to the end with simjax's settings."""
    repro = Path(__file__).resolve().parents[1] / "benchmarks" / "repro_cpu_hang.py"
    out = subprocess.run(
        [sys.executable, str(repro), "--batch", "1024", "--calls", "10"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done: no hang" in out.stdout


def test_solver_compile_options_their_fallback_and_opt_out(monkeypatch):
    """The Assembler's programs compile with XLA:CPU's classic fusion emitters (quicker
    compiles); an option the installed jaxlib does not know is left out, and
    ``SIMJAX_COMPILER_OPTIONS=0`` leaves them all out."""
    from simjax import _config

    try:
        _config.solver_compiler_options.cache_clear()
        assert _config.solver_compiler_options() == {"xla_cpu_use_fusion_emitters": False}
        _config.solver_compiler_options.cache_clear()
        monkeypatch.setattr(_config, "SOLVER_COMPILER_OPTIONS", {"xla_no_such_option": False})
        assert _config.solver_compiler_options() == {}
        monkeypatch.undo()
        _config.solver_compiler_options.cache_clear()
        monkeypatch.setenv("SIMJAX_COMPILER_OPTIONS", "0")
        assert _config.solver_compiler_options() == {}
    finally:
        monkeypatch.undo()
        _config.solver_compiler_options.cache_clear()


def test_assembler_programs_get_the_solver_options(tmp_path):
    """An option reaches the compile of ``assemble`` and ``track`` (a bogus one fails it),
    in a fresh process with empty caches."""
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "import jax, numpy as np, simjax as sj; from simjax import _config; from helpers import fourbar\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "_config.solver_compiler_options = lambda: {'xla_no_such_option': False}\n"
        "system, matter, _ = fourbar(); asm = sj.Assembler(system); mk = sj.Markers()\n"
        "mk.add_marker('a', matter.get_mobilized_body(1), [1, 0, 0]); asm.adopt_assembly_goal(mk)\n"
        "s = system.realize_topology().with_q([0.1, 0.0, 0.0])\n"
        "for call in (lambda: asm.assemble(s), lambda: asm.track(s, np.ones((2, 1, 3)))):\n"
        "    try:\n"
        "        call(); print('compiled')\n"
        "    except Exception as e:\n"
        "        print('refused' if 'No such compile option' in str(e) else repr(e))\n"
    ) % str(Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_env(SIMJAX_CACHE_DIR=str(tmp_path)),
        check=True,
    )
    assert out.stdout.split() == ["refused", "refused"], out.stdout + out.stderr


def test_solver_jit_at_the_top_level_and_nested():
    """Compile options go to top-level calls only; nested (constants under an outer jit,
    tracers under jit, vmap or grad) it is a plain jit, same values."""
    import jax
    import jax.numpy as jnp

    from simjax import _config

    f = _config.solver_jit(lambda x: jnp.sin(x) * 2.0)
    x = jnp.linspace(0.0, 1.0, 3)
    want = jnp.sin(x) * 2.0
    for got in (f(x), jax.jit(lambda: f(x))(), jax.jit(f)(x), jax.vmap(f)(x)):
        assert jnp.allclose(got, want, rtol=0, atol=1e-15)
    assert jnp.allclose(jax.grad(lambda y: f(y).sum())(x), 2.0 * jnp.cos(x), rtol=0, atol=1e-15)
