"""Inverse dynamics of a trial: OpenSim's InverseDynamicsTool against simjax's, side by side.

The trial is ``tests/test_inverse_dynamics.py``'s: gait14dof22musc (osim-rl), a 1 s
gait-like motion at 100 Hz with two force plates at 200 Hz, OpenSim's 6 Hz filter, frames
0.1..0.9 s (81). Times what a user waits for, each in a fresh Python process (imports,
model loading, the run and writing the .sto; the JAX compile for simjax, and again with
``sj.configure()``'s persistent compilation cache filled by an earlier process), and
simjax's run again in the same process (the compiled program reused), with the largest difference
between the two tools' outputs (relative to each column's largest value).

    python benchmarks/bench_inverse_dynamics.py [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

OPENSIM = """
import sys, time
t0 = time.perf_counter()
import opensim as osim
osim.Logger.setLevelString("error")
osim.InverseDynamicsTool(sys.argv[1]).run()
print(time.perf_counter() - t0)
"""

SIMJAX = """
import sys, time, warnings
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import simjax as sj
if sys.argv[2] == "cache":
    sj.configure()  # JAX's persistent compilation cache (SIMJAX_CACHE_DIR)
warnings.simplefilter("ignore")
setup = sj.io.read_id_setup(sys.argv[1])
model = sj.io.load_osim(setup.model_file)
setup.run(model, output_dir=sys.argv[3])
t1 = time.perf_counter()
setup.run(model, output_dir=sys.argv[3])
print(t1 - t0, time.perf_counter() - t1)
"""


def _run(code: str, setup: Path, *extra: str, env: dict | None = None) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", code, str(setup), *extra],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
        env=env,
    )
    words = out.stdout.split()
    return [float(x) for x in words[-2:]] if "simjax" in code else [float(words[-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import numpy as np
    from test_inverse_dynamics import write_trial
    from test_io_osim import model_path

    import simjax as sj

    d = write_trial(Path(tempfile.mkdtemp()), model_path("gait14dof22musc"))
    setup = d / "filtered.xml"
    out = str(d / "simjax")
    env = {**os.environ, "SIMJAX_CACHE_DIR": str(d / "cache")}
    osim_s, cold, warm, cached = [], [], [], []
    _run(SIMJAX, setup, "cache", out, env=env)  # fills the persistent cache
    for _ in range(args.repeats):
        osim_s += _run(OPENSIM, setup)
        c, w = _run(SIMJAX, setup, "plain", out, env=env)
        cold.append(c)
        warm.append(w)
        cached.append(_run(SIMJAX, setup, "cache", out, env=env)[0])
    ref = sj.io.read_sto(d / "results" / "filtered.sto")
    import jax

    jax.config.update("jax_enable_x64", True)
    mine = sj.io.read_id_setup(setup).run(write=False).generalized_forces
    err = float((np.abs(mine.data - ref.data) / np.maximum(np.abs(ref.data).max(axis=0), 1.0)).max())
    res = {
        "info": {
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "dtype": "float64",
            "frames": len(ref.time),
            "repeats": args.repeats,
        },
        "opensim_fresh_process_s": min(osim_s),
        "simjax_fresh_process_s": min(cold),
        "simjax_fresh_process_cached_s": min(cached),
        "simjax_warm_run_s": min(warm),
        "cold_ratio_simjax_over_opensim": min(cold) / min(osim_s),
        "cached_ratio_simjax_over_opensim": min(cached) / min(osim_s),
        "warm_ratio_simjax_over_opensim": min(warm) / min(osim_s),
        "max_rel_diff_vs_opensim": err,
    }
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
