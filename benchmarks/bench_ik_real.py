"""Time to the first IK result on a real trial, cold and warm, simjax vs OpenSim.

What a user waits for: a fresh Python process that imports the library, loads the model,
reads the setup and the trial, and solves IK for every frame. Each measurement runs in
its own subprocess:

* simjax cold: an empty persistent compilation cache (``SIMJAX_CACHE_DIR`` set to a new
  folder): tracing + XLA compilation + the solve;
* simjax warm: a second process on the same cache (tracing + cache load + solve);
* OpenSim: ``InverseKinematicsSolver`` on the same model, weights, coordinate task and
  start (``tests/oracle_osim_ik.py``), whole process (import included) and solver calls.

Data: Pose2Sim 0.4.0's demo (``Model_Pose2Sim_Body25b.osim``, 62 coordinates;
``Balancing_for_IK.trc``, 100 frames of 21 video keypoints; its IK setup), fetched from
PyPI into the test-data cache. Also reported: simjax's objective over OpenSim's per frame.

Example::

    python benchmarks/bench_ik_real.py --frames 100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

DEMO = "Pose2Sim/Demo/opensim/"
MEMBERS = [
    DEMO + f for f in ("Model_Pose2Sim_Body25b.osim", "Balancing_for_IK.trc", "IK_Setup_Pose2Sim_Body25b.xml")
]

SIMJAX = r"""
import time, json, sys
t0 = time.perf_counter()
import numpy as np, jax
jax.config.update("jax_enable_x64", True)
import simjax as sj
setup = sj.io.read_ik_setup(sys.argv[3])
model = sj.io.load_osim(sys.argv[1])
trc = sj.io.read_trc(sys.argv[2]).in_units("m")
asm = setup.make_assembler(model)
obs = trc.observations(list(setup.marker_weights))[: int(sys.argv[4])]
t1 = time.perf_counter()
states, infos = asm.track(model.default_state, obs)
jax.block_until_ready(states.q)
t2 = time.perf_counter()
states, infos = asm.track(model.default_state, obs)
jax.block_until_ready(states.q)
t3 = time.perf_counter()
print(json.dumps(dict(total=t2 - t0, setup=t1 - t0, first_track=t2 - t1, run=t3 - t2,
                      goal=np.asarray(infos.goal).tolist(), status=np.asarray(infos.status).tolist(),
                      q=np.asarray(states.q).tolist())))
"""

OPENSIM = r"""
import time, json, sys
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[5])
import numpy as np
import oracle_osim_ik as ook
import simjax as sj
setup = sj.io.read_ik_setup(sys.argv[3])
trc = sj.io.read_trc(sys.argv[2]).in_units("m")
names = list(setup.marker_weights)
T = int(sys.argv[4])
r = ook.opensim_ik_file(sys.argv[1], names, trc.observations(names)[:T], times=np.asarray(trc.time)[:T],
                        weights=setup.marker_weights, accuracy=setup.accuracy,
                        coordinate_tasks=setup.coordinate_tasks)
print(json.dumps(dict(total=time.perf_counter() - t0, solve=r["time_solve"],
                      coords={k: v.tolist() for k, v in r["coords"].items()})))
"""


def run(code: str, args: list[str], env: dict[str, str] | None = None) -> dict:
    import os

    e = dict(os.environ, **(env or {}))
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=e, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--json", type=str, default=None)
    a = ap.parse_args()
    from data_fetch import fetch

    files = fetch("pose2sim", "0.4.0", MEMBERS)
    args = [str(files[m]) for m in MEMBERS] + [str(a.frames)]
    with tempfile.TemporaryDirectory() as cache:
        env = {"SIMJAX_CACHE_DIR": cache}
        cold = run(SIMJAX, args, env)
        warm = run(SIMJAX, args, env)
    osim = run(OPENSIM, [*args, str(ROOT / "tests")])
    # objective of OpenSim's answer under simjax's goal
    import jax
    import numpy as np
    import oracle_osim_ik as ook

    jax.config.update("jax_enable_x64", True)
    import simjax as sj

    setup = sj.io.read_ik_setup(args[2])
    model = sj.io.load_osim(args[0])
    asm = setup.make_assembler(model)
    obs = sj.io.read_trc(args[1]).in_units("m").observations(list(setup.marker_weights))[: a.frames]
    g_os, _ = ook.goals_under_simjax(asm, model, osim["coords"], obs)
    ratio = np.asarray(cold["goal"]) / np.asarray(g_os)
    res = dict(
        frames=a.frames,
        simjax_cold_total=cold["total"],
        simjax_cold_first_track=cold["first_track"],
        simjax_warm_total=warm["total"],
        simjax_warm_first_track=warm["first_track"],
        simjax_run=warm["run"],
        opensim_total=osim["total"],
        opensim_solve=osim["solve"],
        objective_ratio_max=float(ratio.max()),
        objective_ratio_median=float(np.median(ratio)),
        frames_worse=int(np.sum(ratio > 1 + 1e-3)),
    )
    for k, v in res.items():
        print(f"{k:26s} {v:.3f}" if isinstance(v, float) else f"{k:26s} {v}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"(benchmark took {time.perf_counter() - t:.0f} s)")
