"""Static optimization of a trial: OpenSim's AnalyzeTool (StaticOptimization) against
simjax's, side by side.

The trial is ``tests/test_static_optimization.py``'s: gait14dof22musc (osim-rl) with its
22 muscles as rigid-tendon DeGrooteFregly2016Muscles and a reserve actuator on each of its
17 coordinates, the 1 s gait-like motion of the inverse-dynamics test with two force
plates, OpenSim's 6 Hz filter, frames 0.1..0.9 s (81), OpenSim's default optimizer
settings (convergence criterion 1e-4, 100 iterations). Times what a user waits for, each
in a fresh Python process (imports, model loading, the run and writing the .sto files; the
JAX compile for simjax, and again with ``sj.configure()``'s persistent compilation cache
filled by an earlier process), and simjax's run again in the same process (the compiled
program reused); with the largest difference between the two tools' activations, and how
far each tool's activations leave the accelerations unmet (OpenSim's solutions are checked
in simjax's equations of the same frames).

    python benchmarks/bench_static_optimization.py [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_inverse_dynamics import _run  # noqa: E402 (the same fresh-process runner)

OPENSIM = """
import sys, time
t0 = time.perf_counter()
import opensim as osim
osim.Logger.setLevelString("error")
osim.AnalyzeTool(sys.argv[1]).run()
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
setup = sj.io.read_analyze_setup(sys.argv[1])
model = sj.io.load_osim(setup.model_file)
setup.run(model, output_dir=sys.argv[3])
t1 = time.perf_counter()
setup.run(model, output_dir=sys.argv[3])
print(t1 - t0, time.perf_counter() - t1)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import warnings

    import jax
    import numpy as np
    from test_static_optimization import write_so_trial

    import simjax as sj

    jax.config.update("jax_enable_x64", True)
    d = write_so_trial(Path(tempfile.mkdtemp()), 0.1, 0.9, 1e-4)
    setup = d / "so.xml"
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
    ref = sj.io.read_sto(d / "results" / "so_StaticOptimization_activation.sto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        so_setup = sj.io.read_analyze_setup(setup)
        model = sj.io.load_osim(so_setup.model_file)
        res = so_setup.run(model, write=False)
    names = list(res.activation.labels)
    R = np.asarray(ref.data)[:, [list(ref.labels).index(n) for n in names]]
    A = np.asarray(res.activation.data)
    # OpenSim's activations in simjax's equations of the same frames
    from simjax.io import _inverse_dynamics as idt
    from simjax.io import _static_optimization as sot

    so = sot.static_optimization(model)
    ser = idt.read_external_loads(so_setup.external_loads_file).series(model, res.time)
    state = model.matter.set_use_euler_angles(model.default_state, True)

    @jax.jit
    def equations(q, u, udot, force, point, torque):
        def frame(qq, uu, aa, f, p, t):
            s = model.system.realize(state.with_q(qq).with_u(uu), sj.Stage.POSITION)
            F = ser.apply(s.position_cache.R_GB, s.position_cache.p_GB, f, p, t)
            return so.equations(s, aa, applied_body_forces=F)[:2]

        return jax.vmap(frame)(q, u, udot, force, point, torque)

    C, dd = (np.asarray(x) for x in equations(res.q, res.u, res.udot, *ser.data()))
    miss_osim = np.abs(np.einsum("tij,tj->ti", C, R) - dd).max(1)
    miss_sj = np.abs(np.einsum("tij,tj->ti", C, A) - dd).max(1)
    result = {
        "info": {
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "dtype": "float64",
            "frames": len(ref.time),
            "actuators": len(names),
            "repeats": args.repeats,
            "opensim_convergence_criterion": 1e-4,
        },
        "opensim_fresh_process_s": min(osim_s),
        "simjax_fresh_process_s": min(cold),
        "simjax_fresh_process_cached_s": min(cached),
        "simjax_warm_run_s": min(warm),
        "cold_ratio_simjax_over_opensim": min(cold) / min(osim_s),
        "cached_ratio_simjax_over_opensim": min(cached) / min(osim_s),
        "warm_ratio_simjax_over_opensim": min(warm) / min(osim_s),
        "max_abs_activation_diff_vs_opensim": float(np.abs(A - R).max()),
        "median_frame_activation_diff_vs_opensim": float(np.median(np.abs(A - R).max(1))),
        "opensim_max_unmet_generalized_force": float(miss_osim.max()),
        "simjax_max_unmet_generalized_force": float(miss_sj.max()),
        "largest_generalized_force": float(np.abs(dd).max()),
        "simjax_frames_converged": int(res.converged.sum()),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
