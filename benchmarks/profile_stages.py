"""Where simjax's batched forward dynamics spends its time: cumulative cost per realization stage.

For one model and batch sizes, times (round robin, in one process) ``jit(vmap(...))`` of
realize-to-Position, -Velocity, -Dynamics and -Acceleration, each returning only what that
stage adds (XLA prunes the rest, so a row costs what its outputs need, earlier stages
included), a batched dense Cholesky factor-and-solve of the model's size alone, and
Pinocchio's ``aba`` loop for reference; also XLA's own cost estimate (flops and bytes accessed
per state) of the full call.

    python benchmarks/profile_stages.py --model chain50 --batches 64 1024
"""

from __future__ import annotations

import argparse
import sys

import bench_forward as bf
import numpy as np


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="chain50", choices=list(bf.MODELS))
    p.add_argument("--batches", type=int, nargs="+", default=[64, 1024])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--min-time", type=float, default=0.05)
    args = p.parse_args(argv)

    import jax

    import simjax

    simjax.configure()  # before the backend starts
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import oracle_models as om

    import simjax as sj

    script = {"script": "profile_stages.py", "argv": sys.argv[1:] if argv is None else list(argv)}
    print(bf.info_block({**bf.machine_info("float64"), **script}))
    spec = om.ALL_MODELS[bf.MODELS[args.model]]()
    system, _, _ = om.to_simjax(spec)
    s0 = system.realize_topology()
    rng = np.random.default_rng(0)
    states = [om.random_state(spec, rng) for _ in range(max(args.batches))]
    Q = np.stack([s[1] for s in states])
    U = np.stack([s[2] for s in states])
    pm = om.to_pinocchio(spec)
    peer = [pm.map.qv(spec, q, u) for q, u in zip(Q, U)]
    Qp, Vp = np.stack([r[0] for r in peer]), np.stack([r[1] for r in peer])

    stages = {
        "Position (outputs cdof, inertia_O)": (
            sj.Stage.POSITION,
            lambda s: (s.position_cache.cdof, s.position_cache.inertia_O),
        ),
        "Velocity (outputs V_O)": (sj.Stage.VELOCITY, lambda s: s.velocity_cache.V_O),
        "Dynamics (outputs bias forces)": (sj.Stage.DYNAMICS, lambda s: s.dynamics_cache.bias),
        "Acceleration (outputs udot)": (sj.Stage.ACCELERATION, lambda s: s.udot),
    }
    nu = spec.nu
    for B in args.batches:
        batch = bf.batch_states(s0, Q[:B], U[:B])
        fns, cost = {}, None
        for name, (stage, get) in stages.items():
            c = jax.jit(jax.vmap(lambda s, st=stage, g=get: g(system.realize(s, st)))).lower(batch).compile()
            fns[name] = lambda c=c: jax.block_until_ready(c(batch))
            cost = c.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        A = rng.normal(size=(B, nu, nu))
        M = jnp.asarray(A @ np.swapaxes(A, 1, 2) + nu * np.eye(nu))
        rhs = jnp.asarray(rng.normal(size=(B, nu, 1)))
        chol = jax.jit(jax.vmap(lambda m, b: jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(m), True), b)))
        chol = chol.lower(M, rhs).compile()
        fns[f"Cholesky factor+solve alone ({nu}x{nu})"] = lambda: jax.block_until_ready(chol(M, rhs))
        fns["Pinocchio aba loop"] = bf.pinocchio_loop(pm, Qp[:B], Vp[:B])
        t = bf.time_interleaved(fns, args.repeats, args.min_time)
        print(
            f"\n{args.model}, batch {B}: XLA cost estimate of the full call per state: "
            f"{cost.get('flops', 0) / B:.0f} flops, "
            f"{cost.get('bytes accessed', 0) / B / 1e3:.0f} kB accessed "
            "(custom calls such as the Cholesky not counted)\n"
        )
        print("| computation | µs/state |\n|---|---|")
        for k, v in t.items():
            print(f"| {k} | {1e6 * v / B:.2f} |")


if __name__ == "__main__":
    main()
