"""Compile time as constraints are added: N Free bodies, 0 or N ``Constraint.Ball``.

Constraints of one kind are evaluated with one ``vmap`` (``simjax.constraints.kernels``),
so the compiled program, and the compile time, should not grow with their number. This
measures the forward dynamics ``jit(realize(., Stage.ACCELERATION))`` of a chain of N Free
bodies (each hanging 0.5 m below its parent), with no constraint and with every body's
tip held to its parent's origin by a Ball, from cold JAX caches: trace + lower (HLO lines)
and XLA compile, each in a fresh process so nothing is reused.

    python benchmarks/bench_compile.py --bodies 40 --json benchmarks/results/compile_balls_f64.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

CHILD = r"""
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import simjax as sj
sj.configure()
n, nball = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
system = sj.MultibodySystem()
matter = sj.SimbodyMatterSubsystem(system)
forces = sj.GeneralForceSubsystem(system)
sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1)))
parent = matter.Ground()
bodies = []
for i in range(n):
    parent = sj.MobilizedBody.Free(parent, sj.Transform(p=[0, -0.5, 0]), body, sj.Transform())
    bodies.append(parent)
prev = matter.Ground()
for b in bodies[:nball]:
    sj.Constraint.Ball(prev, [0, -0.5, 0], b, [0, 0, 0])
    prev = b
state = system.realize_topology()
model = system.model_for(state)
build = time.perf_counter() - t0
from simjax.forward.realize import realize_eager
f = jax.jit(lambda s: realize_eager(model, s, sj.Stage.ACCELERATION).udot)
t0, c0 = time.perf_counter(), time.process_time()
lowered = f.lower(state)
t_lower, c_lower = time.perf_counter() - t0, time.process_time() - c0
hlo = lowered.as_text().count("\n")
t0, c0 = time.perf_counter(), time.process_time()
compiled = lowered.compile()
t_compile, c_compile = time.perf_counter() - t0, time.process_time() - c0
t0 = time.perf_counter()
compiled(state).block_until_ready()
t_run = time.perf_counter() - t0
print(json.dumps(dict(bodies=n, balls=nball, build_s=build, lower_s=t_lower, compile_s=t_compile,
                      total_s=t_lower + t_compile, cpu_s=c_lower + c_compile, hlo_lines=hlo,
                      first_run_s=t_run)))
"""


def run(n: int, balls: int) -> dict:
    # No persistent compilation cache: every compile is a cold one.
    env = dict(os.environ, SIMJAX_COMPILATION_CACHE="0")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), str(balls)], capture_output=True, text=True, env=env
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bodies", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import jax  # noqa: PLC0415 (only for the version)

    rows = []
    for _ in range(a.repeats):
        for balls in (0, a.bodies):
            r = run(a.bodies, balls)
            rows.append(r)
            print(
                f"{r['bodies']} Free bodies, {r['balls']:3d} Ball: trace+lower {r['lower_s']:6.2f} s, "
                f"compile {r['compile_s']:6.2f} s, total {r['total_s']:6.2f} s (CPU {r['cpu_s']:6.2f} s), "
                f"HLO {r['hlo_lines']} lines",
                flush=True,
            )
    best = {b: min(r["total_s"] for r in rows if r["balls"] == b) for b in (0, a.bodies)}
    ratio = best[a.bodies] / best[0]
    print(f"compile time with {a.bodies} Ball / with 0: {ratio:.2f}x (best of {a.repeats})")
    if a.json:
        meta = dict(
            machine=platform.processor() or platform.machine(),
            python=platform.python_version(),
            jax=jax.__version__,
            dtype="float64",
        )
        with open(a.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, ratio=ratio), f, indent=1)


if __name__ == "__main__":
    main()
