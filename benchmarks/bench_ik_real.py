"""Time to the first IK result on a real trial, cold and warm, simjax vs OpenSim.

What a user waits for: a fresh Python process that imports the library, loads the model,
reads the setup and the trial, and solves IK for every frame. Each measurement runs in
its own subprocess:

* simjax cold: an empty persistent compilation cache (``SIMJAX_CACHE_DIR`` set to a new
  folder): tracing + XLA compilation + the solve;
* simjax warm: a second process on the same cache (tracing + cache load + solve);
* OpenSim: ``InverseKinematicsSolver`` on the same model, weights, coordinate task and
  start (``tests/oracle_osim_ik.py``), whole process (import included) and solver calls.

Data, fetched from PyPI into the test-data cache (Pose2Sim 0.4.0):

* ``body25b``: the demo's ``Model_Pose2Sim_Body25b.osim`` (62 coordinates, 21 markers) and
  its real trial ``Balancing_for_IK.trc`` (100 frames of video keypoints) and IK setup;
* ``halpe26`` and ``body135``: two more of Pose2Sim's models (the same skeleton with 22 and
  27 keypoint markers, their own IK setups; tasks for keypoints a model lacks are
  skipped, as OpenSim does) on a trial made from the real one: OpenSim's IK answer of
  the balancing trial drives each model, whose markers (plus 5 mm noise) are the trial.

Also reported: simjax's objective over OpenSim's per frame.

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
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

DEMO = "Pose2Sim/Demo/opensim/"
MEMBERS = [
    DEMO + f for f in ("Model_Pose2Sim_Body25b.osim", "Balancing_for_IK.trc", "IK_Setup_Pose2Sim_Body25b.xml")
]
EMPTY = "Pose2Sim/Empty_project/opensim/"
MORE = {
    "halpe26": [EMPTY + "Model_Pose2Sim_Halpe26.osim", EMPTY + "IK_Setup_Pose2Sim_Halpe26.xml"],
    "body135": [EMPTY + "Model_Pose2Sim_Body135.osim", EMPTY + "IK_Setup_Pose2Sim_Body135.xml"],
}

SIMJAX = r"""
import time, json, sys
t0 = time.perf_counter()
import numpy as np, jax
jax.config.update("jax_enable_x64", True)
import simjax as sj
sj.configure()
setup = sj.io.read_ik_setup(sys.argv[3])
model = sj.io.load_osim(sys.argv[1])
trc = sj.io.read_trc(sys.argv[2]).in_units("m")
asm = setup.make_assembler(model)
obs = trc.observations(asm.get_assembly_condition(1))[: int(sys.argv[4])]
t1 = time.perf_counter()
states, infos = asm.track(model.default_state, obs)
jax.block_until_ready(states.q)
t2 = time.perf_counter()
states, infos = asm.track(model.default_state, obs)
jax.block_until_ready(states.q)
t3 = time.perf_counter()
print(json.dumps(dict(total=t2 - t0, setup=t1 - t0, first_track=t2 - t1, run=t3 - t2,
                      goal=np.asarray(infos.goal).tolist(), status=np.asarray(infos.result._value).tolist(),
                      q=np.asarray(states.q).tolist())))
"""

OPENSIM = r"""
import time, json, sys
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[5])
import numpy as np
import oracle_osim_ik as ook
import simjax as sj
sj.configure()
setup = sj.io.read_ik_setup(sys.argv[3])
trc = sj.io.read_trc(sys.argv[2]).in_units("m")
names = [n for n in setup.marker_weights if n in trc.marker_names]
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


def bench(model_path: str, trc_path: str, setup_path: str, frames: int) -> dict:
    """Cold, warm and OpenSim runs on one model and trial, and the objective ratio."""
    args = [model_path, trc_path, setup_path, str(frames)]
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

    setup = sj.io.read_ik_setup(setup_path)
    model = sj.io.load_osim(model_path, warn_ignored=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        asm = setup.make_assembler(model)
    obs = sj.io.read_trc(trc_path).in_units("m").observations(asm.get_assembly_condition(1))[:frames]
    g_os, _ = ook.goals_under_simjax(asm, model, osim["coords"], obs)
    ratio = np.asarray(cold["goal"]) / np.asarray(g_os)
    return dict(
        frames=frames,
        markers=int(obs.shape[1]),
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
        _coords=osim["coords"],
    )


def synthetic_trial(model_path: str, coords: dict, time: np.ndarray, out: Path, noise: float = 0.005) -> str:
    """A .trc of the model's markers following ``coords`` (by name), with Gaussian noise."""
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import simjax as sj

    model = sj.io.load_osim(model_path, warn_ignored=False)
    names = list(model.markers)
    system = model.system

    @jax.jit
    def where(q):
        st = system.realize(model.default_state.with_q(q), sj.Stage.POSITION)
        return jax.numpy.stack([model.markers[n].find_location_in_ground(st) for n in names])

    st0 = model.default_state
    T = len(time)
    rng = np.random.default_rng(0)
    data = np.empty((T, len(names), 3))
    for k in range(T):
        st = model.set_coordinate_values(st0, {n: coords[n][k] for n in model.coordinates if n in coords})
        data[k] = np.asarray(where(st.q)) + noise * rng.standard_normal((len(names), 3))
    table = sj.io.MarkerTable(time=np.asarray(time), marker_names=names, data=data, units="m")
    sj.io.write_trc(out, table)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--models", type=str, default="body25b,halpe26,body135")
    ap.add_argument("--json", type=str, default=None)
    a = ap.parse_args()
    import numpy as np
    from data_fetch import fetch

    files = fetch("pose2sim", "0.4.0", MEMBERS + [m for v in MORE.values() for m in v])
    model, trc, setup = (str(files[m]) for m in MEMBERS)
    results = {}
    base = bench(model, trc, setup, a.frames)
    results["body25b"] = base
    import simjax as sj

    time = np.asarray(sj.io.read_trc(trc).time)[: a.frames]
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m for m in a.models.split(",") if m in MORE]:
            mpath, spath = (str(files[m]) for m in MORE[name])
            tpath = synthetic_trial(mpath, base["_coords"], time, Path(tmp) / f"{name}.trc")
            results[name] = bench(mpath, tpath, spath, a.frames)
    keys = [k for k in base if not k.startswith("_")]
    print(f"{'':26s}" + "".join(f"{n:>12s}" for n in results))
    for k in keys:
        row = [results[n][k] for n in results]
        print(f"{k:26s}" + "".join(f"{v:12.3f}" if isinstance(v, float) else f"{v:12d}" for v in row))
    if a.json:
        clean = {n: {k: v for k, v in r.items() if not k.startswith("_")} for n, r in results.items()}
        Path(a.json).write_text(json.dumps(clean, indent=1))


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"(benchmark took {time.perf_counter() - t:.0f} s)")
