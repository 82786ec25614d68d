"""Reproducer: a batched time step that hangs XLA:CPU when its intra-op pool has two threads.

The humanoid of ``tests/oracle_models.py`` with a hard limit on each of its 20 hinges;
``jit(vmap(simulate(..., integrator="euler")))`` over B random States for ``--steps``
steps, called ``--calls`` times. With two XLA:CPU threads (``--threads 2``) on a 2-core
machine (jax/jaxlib 0.10.2) a call at B >= 512 never returns, typically within the
first few calls: the main thread waits in ``block_until_ready`` and every XLA, Eigen
and LLVM thread waits for work (``gdb -p PID -batch -ex "thread apply all bt"``). The
scheduler flag simjax sets, ``--xla_cpu_multi_thread_eigen=false``, XNNPACK/YNNPACK off
and ``JAX_CPU_ENABLE_ASYNC_DISPATCH=0`` do not prevent it; one thread (simjax's default,
``PJRT_NPROC=1``) or pinning the process to one core (``taskset -c 0``) does. Removing the
loop from the step (the active-set loop of the limit solve) makes it run; replacing the
LAPACK calls inside the loop by plain arithmetic does not.

    python benchmarks/repro_cpu_hang.py                  # simjax's default: runs
    timeout 120 python benchmarks/repro_cpu_hang.py --threads 2   # hangs (exit 124)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=None, help="XLA:CPU threads (PJRT_NPROC)")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args(argv)
    if args.threads is not None:
        os.environ["PJRT_NPROC"] = str(args.threads)

    import jax
    import jax.numpy as jnp
    import numpy as np

    import simjax

    simjax.configure()  # simjax's thread count (the fix), unless --threads chose one
    jax.config.update("jax_enable_x64", True)
    import oracle_models as om

    import simjax as sj

    spec = om.humanoid()
    system, matter, bodies = om.to_simjax(spec)
    for b, s in zip(bodies, spec.bodies, strict=True):
        if s.joint == "pin":
            sj.Constraint.CoordinateLimit(b, 0, -0.4, 0.4)
    state = system.realize_topology()
    rng = np.random.default_rng(0)
    B = args.batch
    q = np.tile(np.asarray(state.q), (B, 1))
    topo = system.model_for(state).topology(False)
    pins = [int(topo.q_start[i + 1]) for i, s in enumerate(spec.bodies) if s.joint == "pin"]
    q[:, pins] = rng.uniform(-0.5, 0.5, (B, len(pins)))
    u = rng.normal(0.0, 2.0, (B, state.u.shape[0]))
    dt = 1e-3

    def run(q, u):
        s = state.with_q(q).with_u(u)
        return sj.simulate(system, s, args.steps * dt, integrator="euler", dt=dt, t0=0.0).final_state.q

    f = jax.jit(jax.vmap(run))
    x = (jnp.asarray(q), jnp.asarray(u))
    print(f"PJRT_NPROC={os.environ.get('PJRT_NPROC')}, B={B}, {args.steps} step(s) per call", flush=True)
    for i in range(args.calls):
        t = time.perf_counter()
        jax.block_until_ready(f(*x))
        print(f"call {i}: {time.perf_counter() - t:.3f} s", flush=True)
    print("done: no hang")


if __name__ == "__main__":
    main()
