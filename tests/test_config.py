"""Process settings simjax makes when asked (``sj.configure()``, ``simjax._config``), and
nothing on import; each checked in a fresh Python process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = (
    "import json, os, jax, simjax; simjax.configure(); "
    "print(json.dumps([jax.config.values.get('jax_compilation_cache_dir'), os.environ.get('XLA_FLAGS', ''), "
    "os.environ.get('PJRT_NPROC'), simjax._config._ynn_off_by_simjax]))"
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


def probe_all(probe: str = PROBE, **env: str) -> list:
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=clean_env(**env), check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_simjax_changes_nothing_outside_it(tmp_path):
    """No XLA flag, no thread count, no compilation cache, no file written: the process is
    as JAX left it until the user calls ``sj.configure()``."""
    home = tmp_path / "home"
    home.mkdir()
    plain = (
        "import json, os, jax; print(json.dumps([jax.config.values.get('jax_compilation_cache_dir'), "
        "os.environ.get('XLA_FLAGS', ''), os.environ.get('PJRT_NPROC'), "
        "repr(sorted(jax.config.values.items()))]))"
    )
    with_simjax = plain.replace("import json, os, jax;", "import json, os, jax, simjax;")
    env = {"HOME": str(home), "XLA_FLAGS": "--xla_dump_to=/nowhere"}
    assert probe_all(with_simjax, **env) == probe_all(plain, **env)
    assert not any(home.iterdir())


def test_configure_reports_and_takes_arguments(tmp_path):
    code = (
        "import json, simjax as sj; c = sj.configure(cpu_threads=3, compilation_cache={cache!r}); "
        "print(json.dumps([c.cpu_threads, c.compilation_cache_dir, c.backend_was_running, "
        "sj.configure() == c]))"
    ).format(cache=str(tmp_path / "mine"))
    assert probe_all(code) == ["3", str(tmp_path / "mine"), False, True]
    off = (
        "import json, simjax as sj; c = sj.configure(xla_flags=False, compilation_cache=False); "
        "print(json.dumps([c.xla_flags, c.compilation_cache_dir]))"
    )
    assert probe_all(off) == ["", None]


def test_configure_after_jax_started_says_it_is_too_late():
    code = (
        "import json, warnings, jax, jax.numpy as jnp, simjax as sj; jnp.ones(2).block_until_ready()\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always'); c = sj.configure(compilation_cache=False)\n"
        "print(json.dumps([c.backend_was_running, [str(x.message) for x in w]]))"
    )
    running, messages = probe_all(code)
    assert running is True and len(messages) == 1
    assert "already started" in messages[0] and "before the first JAX computation" in messages[0]


def test_configure_refuses_a_bad_thread_count():
    import pytest

    import simjax as sj

    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="cpu_threads"):
            sj.configure(cpu_threads=bad, xla_flags=False, compilation_cache=False)  # type: ignore[arg-type]


def test_cache_dir_and_scheduler_flag_defaults(tmp_path):
    cache, flags = probe(SIMJAX_CACHE_DIR=str(tmp_path / "c"))
    assert cache == str(tmp_path / "c") and (tmp_path / "c").is_dir()
    assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in flags
    from simjax import _config

    tested = _config._jaxlib_version() in _config._TESTED_JAXLIB  # jaxlib 0.10 here
    assert ("--xla_cpu_use_fusion_emitters=false" in flags) == tested
    assert ("--xla_cpu_experimental_ynn_fusion_type=" in flags.split()) == tested
    assert probe_all()[3] == tested  # the solver's programs get XLA's default fusions back
    cache, _ = probe(XDG_CACHE_HOME=str(tmp_path / "x"))
    assert cache == str(tmp_path / "x" / "simjax" / "jax")


def test_opt_outs_and_user_settings_win(tmp_path):
    cache, flags = probe(SIMJAX_COMPILATION_CACHE="0", SIMJAX_XLA_FLAGS="0")
    assert cache is None and flags == ""
    # a flag the user set is left as it is
    _, flags = probe(XLA_FLAGS="--xla_cpu_enable_concurrency_optimized_scheduler=true")
    assert flags.split()[0] == "--xla_cpu_enable_concurrency_optimized_scheduler=true"
    assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" not in flags
    _, flags = probe(XLA_FLAGS="--xla_cpu_use_fusion_emitters=true")
    assert "--xla_cpu_use_fusion_emitters=false" not in flags
    _, flags = probe(XLA_FLAGS="--xla_cpu_experimental_ynn_fusion_type=individual_dot")
    assert flags.split().count("--xla_cpu_experimental_ynn_fusion_type=individual_dot") == 1
    assert "--xla_cpu_experimental_ynn_fusion_type=" not in flags.split()
    assert probe_all(XLA_FLAGS="--xla_cpu_experimental_ynn_fusion_type=")[3] is False  # the user's own
    assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in flags
    # a cache directory the user configured through JAX's own variable wins
    cache, _ = probe(JAX_COMPILATION_CACHE_DIR=str(tmp_path / "mine"), SIMJAX_CACHE_DIR=str(tmp_path / "c"))
    assert cache == str(tmp_path / "mine")


def test_one_xla_cpu_thread_by_default_and_the_users_choice_wins():
    """simjax sizes XLA:CPU's intra-op pool to one thread (``PJRT_NPROC=1``): with two, the
    batched limit step hangs (``benchmarks/repro_cpu_hang.py``)."""
    assert probe_all()[2] == "1"
    assert probe_all(SIMJAX_CPU_THREADS="4")[2] == "4"
    assert probe_all(SIMJAX_CPU_THREADS="0")[2] is None  # JAX's own choice
    assert probe_all(SIMJAX_CPU_THREADS="")[2] == "1"  # set but empty: the default
    assert probe_all(PJRT_NPROC="3")[2] == "3"
    assert probe_all(NPROC="2")[2] is None  # JAX reads NPROC itself
    # several host devices: one thread more than devices (N or fewer hang a split batch)
    assert probe_all(XLA_FLAGS="--xla_force_host_platform_device_count=8")[2] == "9"
    assert probe_all(JAX_NUM_CPU_DEVICES="2")[2] == "3"
    assert probe_all(XLA_FLAGS="--xla_force_host_platform_device_count=2", SIMJAX_CPU_THREADS="5")[2] == "5"
    bad = subprocess.run(
        [sys.executable, "-c", "import simjax; simjax.configure()"],
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


def test_classic_emitters_only_on_a_tested_jaxlib(monkeypatch):
    """The emitters and YNN flags are appended for the jaxlib versions they were measured
    with (XLA aborts the process on a flag it does not know), never for others."""
    from simjax import _config

    for version, added in (((0, 10), True), ((0, 11), False), ((0, 4), False), ((), False)):
        monkeypatch.setattr(_config, "_jaxlib_version", lambda v=version: v)
        monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nowhere")
        monkeypatch.delenv("SIMJAX_XLA_FLAGS", raising=False)
        monkeypatch.setattr(_config, "_ynn_off_by_simjax", False)
        _config.configure_xla_flags()
        assert _config._ynn_off_by_simjax == added
        flags = os.environ["XLA_FLAGS"].split()
        sched = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
        assert flags[:2] == ["--xla_dump_to=/nowhere", sched]
        assert ("--xla_cpu_use_fusion_emitters=false" in flags) == added, version
        assert ("--xla_cpu_experimental_ynn_fusion_type=" in flags) == added, version


def test_solver_compiler_options_keep_the_users_disabled_passes(monkeypatch):
    """The Assembler's programs run without loop-invariant code motion; passes the user's
    ``XLA_FLAGS`` disables stay disabled in them (a program's option overrides the flag);
    ``SIMJAX_XLA_FLAGS=0`` gives XLA's defaults."""
    from simjax import _config

    monkeypatch.delenv("SIMJAX_XLA_FLAGS", raising=False)
    monkeypatch.setattr(_config, "_ynn_off_by_simjax", True)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nowhere")
    # YNNPACK fusions that simjax turned off come back in the solver's programs
    assert _config.solver_compiler_options() == {
        "xla_disable_hlo_passes": "while-loop-invariant-code-motion",
        "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
    }
    monkeypatch.setattr(_config, "_ynn_off_by_simjax", False)  # the user's setting is kept
    assert _config.solver_compiler_options() == {"xla_disable_hlo_passes": "while-loop-invariant-code-motion"}
    monkeypatch.setenv("XLA_FLAGS", "--xla_disable_hlo_passes=algsimp,cse --xla_dump_to=/x")
    assert _config.solver_compiler_options() == {
        "xla_disable_hlo_passes": "algsimp,cse,while-loop-invariant-code-motion"
    }
    monkeypatch.setenv("XLA_FLAGS", "--xla_disable_hlo_passes=while-loop-invariant-code-motion")
    assert _config.solver_compiler_options() == {"xla_disable_hlo_passes": "while-loop-invariant-code-motion"}
    assert _config.light_compiler_options() == {"xla_backend_optimization_level": 0}
    monkeypatch.setenv("SIMJAX_XLA_FLAGS", "0")
    assert _config.solver_compiler_options() == {} and _config.light_compiler_options() == {}


def test_the_assemblers_top_level_programs_get_the_options_nested_calls_do_not():
    """A top-level solve compiles with the solver options; the same solve inside a user's
    ``jit`` (where a ``jit`` with compiler options may not be nested) still works and agrees."""
    import jax
    import numpy as np

    sys.path.insert(0, str(Path(__file__).parent))
    import test_traces

    jax.config.update("jax_enable_x64", True)
    _, asm, state, frames = test_traces.build()
    top = asm._get_fn("single", top=True)
    plain = asm._get_fn("single")
    assert top is not plain and asm._get_fn("single", top=True) is top
    out, _ = asm.solve(state)
    q_nested = jax.jit(lambda s: asm.solve(s)[0].q)(state)
    np.testing.assert_allclose(np.asarray(q_nested), np.asarray(out.q), atol=1e-12)
    states, infos = jax.jit(lambda s: asm.track(s, frames))(state)
    states2, _ = asm.track(state, frames)
    np.testing.assert_allclose(np.asarray(states.q), np.asarray(states2.q), atol=1e-10)
