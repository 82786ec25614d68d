"""The benchmarks still run: ``benchmarks/bench_forward.py`` on a tiny case in a fresh
process (its device selection and its MJX peer included), so a change to simjax or to a
benchmark cannot leave ``benchmarks/`` broken until the next measuring session."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_forward.py"


def run_bench(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, env=env, timeout=600, check=check
    )


def run_tiny(out: Path, *mode: str) -> dict:
    """chain7, one quick repeat, against Pinocchio where it is installed; the JSON result."""
    args = [*mode, "--models", "chain7", "--repeats", "1", "--min-time", "0.001", "--json", str(out)]
    if importlib.util.find_spec("pinocchio") is None:
        args.append("--no-peers")
    run_bench(*args)
    return json.loads(out.read_text())


def test_bench_forward_runs_and_checks_udot(tmp_path):
    res = run_tiny(tmp_path / "fd.json", "--batches", "2")
    assert res["info"]["device"].startswith(("cpu", "TFRT_CPU", "CpuDevice"))
    (row,) = res["throughput"]
    assert row["model"] == "chain7" and row["batch"] == 2 and row["simjax_us_per_state"] > 0
    if "max_rel_err_vs_pinocchio" in row:
        assert row["max_rel_err_vs_pinocchio"] < 1e-10
    if "mujoco_c_us_per_state" in row:  # MuJoCo's C loop (mujoco.rollout of one mj_step)
        assert row["max_rel_err_mujoco_c_vs_simjax"] < 1e-10 and row["ratio_vs_mujoco_c"] > 0


def test_bench_forward_rollout_mode_times_a_step_a_call_and_an_eager_realize(tmp_path):
    (row,) = run_tiny(tmp_path / "roll.json", "--rollout", "5")["rollout"]
    assert row["model"] == "chain7" and row["steps"] == 5
    for k in ("simjax_us_per_step", "call_synced_us", "call_pipelined_us", "realize_eager_us"):
        assert row[k] > 0, k


def test_bench_forward_rollout_grad_times_the_gradient_and_checks_it(tmp_path):
    (row,) = run_tiny(tmp_path / "grad.json", "--rollout", "20", "--rollout-grad")["rollout"]
    assert row["rk4_rollout_ms"] > 0 and row["rk4_grad_ms"] > 0 and row["grad_over_rollout"] > 0
    assert row["grad_dir_deriv_rel_diff"] < 1e-6


@pytest.mark.oracle
def test_bench_forward_mjx_peer_agrees(tmp_path):
    pytest.importorskip("mujoco.mjx")
    out = tmp_path / "mjx.json"
    run_bench(
        "--models", "chain7", "--batches", "2", "--repeats", "1", "--min-time", "0.001",
        "--no-peers", "--mjx", "--json", str(out),
    )  # fmt: skip
    (row,) = json.loads(out.read_text())["throughput"]
    assert row["mjx_us_per_state"] > 0 and row["mjx_compile_s"] > 0
    # MJX's qacc (MuJoCo's semantics, its own JAX implementation) against simjax's udot.
    assert row["max_rel_err_mjx_vs_simjax"] < 1e-10


def _pinocchio_cpp():
    spec = importlib.util.spec_from_file_location("pinocchio_cpp", ROOT / "benchmarks" / "pinocchio_cpp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.oracle
@pytest.mark.slow  # builds the C++ peer (96 s in CI): a check of the benchmark's harness, not of simjax
def test_bench_forward_pinocchio_cpp_peer_agrees(tmp_path):
    """Pinocchio's ``aba`` looped in C++ (built once, about a minute; cached): the benchmark
    checks its accelerations against ``pin.aba``'s from Python (1e-11) and fails otherwise.
    On chain7 only: the peer's harness is the same for every model (simjax's accelerations
    on floating-base robots are checked against Pinocchio by ``test_sweep_urdf``)."""
    pytest.importorskip("pinocchio")
    why = _pinocchio_cpp().missing()
    if why is not None:
        pytest.skip(f"the C++ peer cannot be built here: {why}")
    out = tmp_path / "cpp.json"
    run_bench(
        "--models", "chain7", "--batches", "3", "--repeats", "1", "--min-time", "0.001",
        "--pinocchio-cpp", "--json", str(out),
    )  # fmt: skip
    res = json.loads(out.read_text())
    assert "pinocchio_aba_loop" in res["info"]["pinocchio_cpp"]
    for row in res["throughput"]:
        assert row["pinocchio_cpp_us_per_state"] > 0 and row["ratio_vs_pinocchio_cpp"] > 0


@pytest.mark.oracle
def test_bench_forward_batched_rollout_mode_checks_the_runs_against_pinocchio_and_mujoco(tmp_path):
    """``--batched-rollout``: B rollouts under a plain ``jax.vmap``, ``sj.vmap`` and with the
    model shared, against Pinocchio's RK4 in Python and (where it builds) in C++, MuJoCo's
    RK4 in its C rollout loop and MJX's; on a chain the final states agree to round-off."""
    pytest.importorskip("pinocchio")
    pytest.importorskip("mujoco.rollout")
    cpp = _pinocchio_cpp().missing() is None
    mjx = importlib.util.find_spec("mujoco.mjx") is not None
    out = tmp_path / "batched.json"
    run_bench(
        "--batched-rollout", "0.005", "--models", "chain7", "--batches", "3", "--repeats", "1",
        "--min-time", "0.001", *(["--pinocchio-cpp"] if cpp else []), *(["--mjx"] if mjx else []),
        "--json", str(out),
    )  # fmt: skip
    (row,) = json.loads(out.read_text())["batched_rollout"]
    assert row["batch"] == 3 and row["steps"] == 5
    assert row["max_abs_diff_sj_vmap_vs_jax_vmap"] < 1e-14 and row["max_abs_diff_shared_vs_jax_vmap"] < 1e-12
    assert row["max_rel_err_vs_pinocchio"] < 1e-12 and row["jax_vmap_ratio_vs_pinocchio"] > 0
    assert row["max_rel_err_mujoco_c_vs_simjax"] < 1e-12 and row["jax_vmap_ratio_vs_mujoco_c"] > 0
    if cpp:
        assert row["max_rel_err_cpp_vs_python"] < 1e-12 and row["jax_vmap_ratio_vs_pinocchio_cpp"] > 0
    if mjx:
        assert row["max_rel_err_mjx_vs_simjax"] < 1e-12 and row["jax_vmap_ratio_vs_mjx"] > 0


@pytest.mark.oracle
def test_bench_forward_pinocchio_cpp_without_a_compiler_says_so():
    pytest.importorskip("pinocchio")
    env_cxx = {"CXX": "/nonexistent/c++"}
    r = subprocess.run(
        [sys.executable, str(BENCH), "--models", "chain7", "--batches", "2", "--pinocchio-cpp"],
        capture_output=True, text=True, timeout=600, env={**os.environ, **env_cxx},
    )  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "--pinocchio-cpp:" in r.stderr
    assert "/nonexistent/c++" in r.stderr or "cmeel-eigen" in r.stderr, r.stderr[-2000:]


def test_bench_forward_gpu_request_without_gpu_says_so():
    r = run_bench("--device", "gpu", "--models", "chain7", "--batches", "2", check=False)
    if r.returncode == 0:
        pytest.skip("this machine has a GPU: the benchmark ran on it")
    assert "--device gpu" in r.stderr and "--device cpu" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_gpu_run_script_runs_a_step_and_merges_its_json(tmp_path):
    """``benchmarks/gpu_run.sh`` (the prepared run for a lent GPU) on the CPU: one step, tiny
    batches, the larger one beyond ``--distinct``'s pool of 8 states so that the repetition
    runs; its JSON lands merged in ``$OUT/results.json``."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    env.update(OUT=str(tmp_path), DEVICE="cpu", STEPS="f64_deep", DEEP_BATCHES="4 12", DISTINCT="8")
    env.update(BUDGET_S="400", PYTHON=sys.executable)
    script = str(ROOT / "benchmarks" / "gpu_run.sh")
    r = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    log = (tmp_path / "log.txt").read_text()
    assert "== f64_deep: rc=0" in log, log[-3000:]
    assert "f32_small" not in log  # STEPS names the steps that run
    res = json.loads((tmp_path / "results.json").read_text())["f64_deep"]
    rows = res["throughput"]
    cases = [(m, b) for m in ("chain50", "chain20") for b in (4, 12)]
    assert [(r["model"], r["batch"]) for r in rows] == cases
    assert all(r["simjax_us_per_state"] > 0 for r in rows)
    assert "--distinct" in res["info"]["argv"]


@pytest.mark.oracle
def test_bench_robots_checks_udot_against_pinocchio_and_mujocos_c_loop(tmp_path):
    """``bench_robots.py`` on a fixed-base and a floating robot from their URDFs: simjax's
    ``udot`` against Pinocchio's ``aba`` and against the ``qacc`` of MuJoCo's C loop on the
    same file as MuJoCo compiles it (joints matched by name, the free joint's conventions
    mapped)."""
    pytest.importorskip("pinocchio")
    pytest.importorskip("mujoco.rollout")
    from test_io_urdf import _cached_robots, _installed_robots

    _installed_robots() or _cached_robots()  # fetched and cached as the URDF tests do (skips offline)
    out = tmp_path / "robots.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_robots.py"), "--robots", "panda", "solo12",
         "--batches", "3", "--repeats", "1", "--min-time", "0.001", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=True,
        env={k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")},
    )  # fmt: skip
    rows = json.loads(out.read_text())["rows"]
    assert [r["robot"] for r in rows] == ["panda", "solo12"]
    for r in rows:
        assert r["max_rel_err_vs_pinocchio"] < 1e-10 and r["max_rel_err_mujoco_c_vs_simjax"] < 1e-10
        assert r["ratio_vs_pinocchio"] > 0 and r["ratio_vs_mujoco_c"] > 0
