"""Coordinate limits in the time step: the ``euler`` step with a hard limit on every hinge vs
the same model without limits (issue 12's speed goal: at most 2x the time per step).

Model: the free-pelvis humanoid of ``tests/oracle_models.py`` (20 hinges, nu = 26) falling
under gravity from random poses and speeds, so limits engage and release during the run;
each hinge limited to ``[-0.4, 0.4]`` rad around its start. Times
``jit(vmap(simulate(..., integrator="euler", dt)))`` over B States for ``--steps`` steps,
with and without the limits, side by side (median of ``--repeats``), compile time apart.
``--compile-scan`` times the compile of chains with 10, 25 and 50 limited pins.
``--coupling`` times one 5 s run (``--dt`` steps, compile apart, best of ``--repeats``) of
``examples/slotted_hinge.py``'s joint both ways: the ``sj.Coupling`` on a Free body (four
bilateral rows, two limits on the coupling's coordinates) and the 2-dof Custom mobilizer
with two CoordinateLimits.

    python benchmarks/bench_limits.py
    python benchmarks/bench_limits.py --batch 1024 --steps 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def build(spec, limits: bool, half_range: float = 0.4):
    import oracle_models as om

    import simjax as sj

    system, matter, bodies = om.to_simjax(spec)
    lims = []
    if limits:
        for b, s in zip(bodies, spec.bodies, strict=True):
            if s.joint == "pin":
                lims.append(sj.Constraint.CoordinateLimit(b, 0, -half_range, half_range))
    return system, system.realize_topology(), lims


def timed(f, x, repeats: int) -> float:
    import jax

    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(x))
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--dt", type=float, default=1e-3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--compile-scan", action="store_true")
    p.add_argument("--coupling", action="store_true")
    p.add_argument("--json", type=str, default=None)
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    import simjax

    simjax.configure()  # before the backend starts
    jax.config.update("jax_enable_x64", True)
    import oracle_models as om

    import simjax as sj

    out: dict = {
        "machine": platform.platform(),
        "cpus": __import__("os").cpu_count(),
        "jax": jax.__version__,
        "dtype": "float64",
    }
    if args.coupling:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
        import slotted_hinge as sh

        for key, make in (("coupling", sh.build_coupled), ("custom", sh.build_custom)):
            system, _, state = make()

            def one(s, system=system):
                return sj.simulate(system, s, 5.0, integrator="euler", dt=args.dt, save_at=50).q

            g = jax.jit(one).lower(state).compile()
            best = min(timed(g, state, 1) for _ in range(args.repeats))
            out[f"{key}_5s_run_s"] = best
            print(f"slotted hinge as {key}: 5 s run {best:.3f} s")
        out["coupling_over_custom"] = out["coupling_5s_run_s"] / out["custom_5s_run_s"]
        print(f"coupling / custom: {out['coupling_over_custom']:.1f}x")
        return out
    if args.compile_scan:
        for n in (10, 25, 50):
            spec = om.pin_chain(n) if hasattr(om, "pin_chain") else om.MODELS[f"pin_chain_{n}"]()
            system, state, _ = build(spec, True)
            f = jax.jit(
                lambda s, system=system: sj.simulate(system, s, 0.01, integrator="euler", dt=1e-3, t0=0.0).q
            )
            t = time.perf_counter()
            f.lower(state).compile()
            out[f"compile_chain{n}_s"] = time.perf_counter() - t
            print(f"chain of {n} limited pins: compile {out[f'compile_chain{n}_s']:.1f} s")
        return out

    spec = om.humanoid()
    rng = np.random.default_rng(0)
    B = args.batch
    t1 = args.steps * args.dt
    res = {}
    for limits in (False, True):
        system, state, lims = build(spec, limits)
        q0 = np.asarray(state.q)
        qs = np.tile(q0, (B, 1))
        pins = [i for i, s in enumerate(spec.bodies) if s.joint == "pin"]
        topo = system.model_for(state).topology(False)
        qi = [int(topo.q_start[b + 1]) for b in pins]
        qs[:, qi] = rng.uniform(-0.35, 0.35, (B, len(qi)))
        us = rng.normal(0, 2.0, (B, state.u.shape[0]))

        def run(q, u, system=system, state=state):
            s = state.with_q(q).with_u(u)
            return sj.simulate(system, s, t1, integrator="euler", dt=args.dt, t0=0.0).final_state.q

        f = jax.jit(jax.vmap(run))
        x = (jnp.asarray(qs), jnp.asarray(us))
        t = time.perf_counter()
        g = f.lower(*x).compile()
        comp = time.perf_counter() - t
        per = timed(lambda xx, g=g: g(*xx), x, args.repeats) / (B * args.steps)
        key = "limits" if limits else "free"
        res[key] = {"compile_s": comp, "us_per_state_step": per * 1e6}
        print(f"{key:>6}: compile {comp:5.1f} s, {per * 1e6:7.2f} us per state per step (B={B})")
    ratio = res["limits"]["us_per_state_step"] / res["free"]["us_per_state_step"]
    print(f"limits / free: {ratio:.2f}x per step")
    out.update(res, ratio=ratio, batch=B, steps=args.steps, nlimits=20)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
