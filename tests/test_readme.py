"""The code blocks of the README and of the documentation's pages run as written.

Every ```python block of the pages in ``PAGES`` is executed, in their order, in a folder
holding the files the blocks name (Pose2Sim 0.4.0's demo, fetched from PyPI and cached, see
``data_fetch``; the OpenSim guide says where to get them):

- the README's short example and the getting-started page's inverse-kinematics block run
  first, in one namespace (the pages marked "short");
- the blocks on models and data made elsewhere (the OpenSim guide's loading, scaling and
  IK setup; the viewer page's) run in order, each continuing from the one before, after
  those two;
- the sharding block (the performance page's) runs after the first two only (its names are
  theirs);
- the multi-process recipe is the one block not run here: it needs several processes
  (``tests/test_sharding.py`` runs it with two).
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from data_fetch import fetch

jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The pages whose blocks run, in order: "short" ones share the first namespace, "chained"
# ones continue from it (see the module docstring).
PAGES = (
    ("README.md", "short"),
    ("docs/getting-started.md", "short"),
    ("docs/guides/opensim.md", "chained"),
    ("docs/guides/viz.md", "chained"),
    ("docs/guides/performance.md", "chained"),
)
DEMO = "Pose2Sim/Demo/opensim/"
FILES = (
    "Model_Pose2Sim_Body25b.osim",
    "Balancing_for_IK.trc",
    "Standing_for_Scaling.trc",
    "IK_Setup_Pose2Sim_Body25b.xml",
    "Scaling_Setup_Pose2Sim_Body25b.xml",
)


def blocks(page: str = "README.md") -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block of a page (path from the root)."""
    text = (ROOT / page).read_text()
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        out.append((text[: m.start()].count("\n") + 2, m.group(1)))
    return out


def _kind(code: str) -> str:
    if "jax.distributed.initialize" in code:
        return "multi-process"
    if "sj.shard(" in code:
        return "sharding"
    return "run"


def test_readme_and_docs_blocks_run_as_written(tmp_path, monkeypatch):
    # as a user runs them: JAX's defaults (the suite raises on rank promotion)
    with jax.numpy_rank_promotion("allow"):
        _run_blocks(tmp_path, monkeypatch)


def _run_blocks(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    files = fetch("pose2sim", "0.4.0", [DEMO + f for f in FILES])
    for f in files.values():
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.chdir(tmp_path)

    found: dict[str, list[tuple[str, str]]] = {"short": [], "chained": []}
    for page, how in PAGES:
        found[how] += [(f"{page}:{line}", code) for line, code in blocks(page)]
    short, rest = found["short"], found["chained"]
    assert len(short) == 2 and len(rest) >= 6, (len(short), len(rest))
    ns: dict = {}
    for where, code in short:
        exec(compile(code, where, "exec"), ns)
    after_short = dict(ns)
    chained = dict(after_short)
    ran, skipped = 0, []
    try:
        for where, code in rest:
            kind = _kind(code)
            if kind == "multi-process":
                skipped.append(where)
                continue
            target = dict(after_short) if kind == "sharding" else chained
            t = time.perf_counter()
            exec(compile(code, where, "exec"), target)
            print(f"{where}: {time.perf_counter() - t:.1f} s")
            ran += 1
    finally:
        for space in (ns, chained):
            for v in list(space.values()):
                if type(v).__name__ == "View":
                    v.close()
    assert len(skipped) == 1 and ran == len(rest) - 1

    # what the blocks promise, checked
    dE = ns["dE"]
    assert np.any(np.asarray(dE.q) != 0) and np.any(np.asarray(dE.u) != 0)  # the realized State's gradient
    assert bool(np.all(np.asarray(ns["infos"].success)))  # the synthetic IK converges in every frame
    result = chained["result"]  # OpenSim's IK tool, from its setup: 100 frames in its time range
    assert len(result.time) == 100 and Path(result.files["motion"]).exists()
    assert Path("subject.osim").exists() and Path("Model_Pose2Sim_Body25b_scaled.osim").exists()
    # inverse dynamics of that IK motion (a real model and trial): every frame, written
    tau = chained["id_result"].generalized_forces
    # (no time range and a filter: the padded rows too, 200, as OpenSim's output has them)
    assert len(tau.time) == 200 and Path(chained["id_result"].files["generalized_forces"]).exists()


def test_set_up_command_1_example_runs_and_leaves_the_readmes_figure_alone(tmp_path):
    """``python examples/pendulum.py`` (the README's first command) runs in a fresh process and
    writes its figure into the current folder, not over the committed examples/pendulum.png."""
    import hashlib
    import os
    import subprocess
    import sys

    example = README.parent / "examples" / "pendulum.py"
    committed = README.parent / "examples" / "pendulum.png"
    before = hashlib.sha256(committed.read_bytes()).hexdigest()
    env = dict(os.environ, MPLBACKEND="Agg", JAX_PLATFORMS="cpu")
    r = subprocess.run(
        [sys.executable, str(example)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "pendulum.png").stat().st_size > 10_000
    assert hashlib.sha256(committed.read_bytes()).hexdigest() == before
