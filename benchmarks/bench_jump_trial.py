"""OpenSim's whole chain on a real trial: scale -> IK -> ID -> SO, simjax against OpenSim,
from the same setup files.

The trial is notebook 09's (``notebooks/jump/``): biomdp 0.11.2's countermovement jump
(Vicon markers on the pelvis and the right leg at 200 Hz, one force plate) with
gait14dof22musc (22 Thelen muscles, the left leg coupled to the right, reserves): the
ScaleTool (3 measurements, the marker placer on 301 static frames), IK over 341 frames, ID
and static optimization over 241. Times what a user waits for, each in a fresh Python
process: imports, loading, the four tools and their files; for simjax the JAX compile, and
again with ``sj.configure()``'s persistent compilation cache filled by an earlier process;
and simjax's IK, ID and SO again in the same process on the same scaled model (compiled
programs reused; scaling makes a new model, whose programs compile anew).

    python benchmarks/bench_jump_trial.py [--repeats 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks" / "jump"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_inverse_dynamics import _run  # noqa: E402 (the same fresh-process runner)

OPENSIM = """
import os, sys, time
t0 = time.perf_counter()
import opensim as osim
osim.Logger.setLevelString("error")
os.chdir(sys.argv[1])
osim.ScaleTool("Setup_Scale.xml").run()
osim.InverseKinematicsTool("Setup_IK.xml").run()
osim.InverseDynamicsTool("Setup_ID.xml").run()
osim.AnalyzeTool("Setup_SO.xml").run()
print(time.perf_counter() - t0)
"""

SIMJAX = """
import sys, time, warnings
from pathlib import Path
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import simjax as sj
if sys.argv[2] == "cache":
    sj.configure()  # JAX's persistent compilation cache (SIMJAX_CACHE_DIR)
warnings.simplefilter("ignore")
d = Path(sys.argv[1])


def tools(model):
    sj.io.read_ik_setup(d / "Setup_IK.xml").run(model)
    sj.io.read_id_setup(d / "Setup_ID.xml").run(model)
    return sj.io.read_analyze_setup(d / "Setup_SO.xml").run(model)


model = sj.io.read_scale_setup(d / "Setup_Scale.xml").run(output_dir=d).model
tools(model)
t1 = time.perf_counter()
tools(model)
print(t1 - t0, time.perf_counter() - t1)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import jax
    import prepare

    tmp = Path(tempfile.mkdtemp())
    d = prepare.prepare(tmp / "simjax")
    o = tmp / "opensim"
    shutil.copytree(d, o)
    env = {**os.environ, "SIMJAX_CACHE_DIR": str(tmp / "cache")}
    _run(SIMJAX, str(d), "cache", env=env)  # fills the persistent cache
    osim_s, cold, warm, cached = [], [], [], []
    for _ in range(args.repeats):
        osim_s += _run(OPENSIM, str(o))
        c, w = _run(SIMJAX, str(d), "plain", env=env)
        cold.append(c)
        warm.append(w)
        cached.append(_run(SIMJAX, str(d), "cache", env=env)[0])
    result = {
        "info": {
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "dtype": "float64",
            "repeats": args.repeats,
        },
        "opensim_fresh_process_s": min(osim_s),
        "simjax_fresh_process_s": min(cold),
        "simjax_fresh_process_cached_s": min(cached),
        "simjax_warm_ik_id_so_s": min(warm),
        "cold_ratio_simjax_over_opensim": min(cold) / min(osim_s),
        "cached_ratio_simjax_over_opensim": min(cached) / min(osim_s),
        "warm_ik_id_so_ratio_simjax_over_opensim_whole_chain": min(warm) / min(osim_s),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
