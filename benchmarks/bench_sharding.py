"""One batch split over host devices (issue 20): forward dynamics and a rollout with 1, 2
and 8 CPU host devices, side by side.

Each device count runs in its own process (``XLA_FLAGS=--xla_force_host_platform_device_count=N``
is read when JAX starts): the humanoid of ``tests/oracle_models.py`` (free pelvis + 20 pins,
nu = 26), B random States split over the devices with ``sj.shard`` (one device: unsplit),
timed for ``jit(vmap(realize(..., ACCELERATION)))`` and for an RK4 rollout of ``--steps``
steps (``jit(vmap(simulate))``); compile time apart; the results are checked against the
one-device run. ``--threads`` sets ``SIMJAX_CPU_THREADS`` (XLA:CPU's intra-op threads) in
the child processes; by default simjax's choice: one, or one more than the host devices
(with N or fewer, a split batch hangs).

    python benchmarks/bench_sharding.py
    python benchmarks/bench_sharding.py --devices 1 2 8 --batch 1024 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()

CHILD = """
import json, statistics, sys, time
sys.path.insert(0, {tests!r})
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import oracle_models as om
import simjax as sj
sj.configure()

n, B, steps, repeats = {n}, {batch}, {steps}, {repeats}
assert len(jax.devices()) == n
system, matter, bodies = om.to_simjax(om.humanoid())
st = system.realize_topology()
rng = np.random.default_rng(0)
q = np.tile(np.asarray(st.q), (B, 1)) + 0.2 * rng.normal(size=(B, st.q.size))
q[:, :4] /= np.linalg.norm(q[:, :4], axis=1, keepdims=True)
u = jnp.asarray(rng.normal(size=(B, st.u.size)))
states = jax.vmap(lambda q, u: st.with_q(q).with_u(u))(jnp.asarray(q), u)
if n > 1:
    states = sj.shard(states, sj.make_mesh())
fd = jax.jit(jax.vmap(lambda s: system.realize(s, sj.Stage.ACCELERATION).udot))
def rollout(s):
    return sj.simulate(system, s, steps * 1e-3, integrator="rk4", dt=1e-3, t0=0.0, save_at=2).final_state.q
roll = jax.jit(jax.vmap(rollout))
out = {{"devices": n, "batch": B, "steps": steps}}
for name, f in (("fd", fd), ("rollout", roll)):
    t = time.perf_counter()
    r = jax.block_until_ready(f(states))
    out[name + "_first_s"] = time.perf_counter() - t
    ts = []
    for _ in range(repeats):
        t = time.perf_counter(); jax.block_until_ready(f(states)); ts.append(time.perf_counter() - t)
    out[name + "_s"] = statistics.median(ts)
    out[name + "_checksum"] = np.asarray(r).tolist()[:4]
print("RESULT " + json.dumps(out))
"""


def run(n: int, batch: int, steps: int, repeats: int, threads: int | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC")}
    env["JAX_PLATFORMS"] = "cpu"
    flag = f"--xla_force_host_platform_device_count={n}"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flag).strip()
    if threads is not None:
        env["SIMJAX_CPU_THREADS"] = str(threads)
    code = CHILD.format(tests=str(HERE.parents[1] / "tests"), n=n, batch=batch, steps=steps, repeats=repeats)
    cmd = [sys.executable, "-c", code]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"{n} devices: {r.stderr[-2000:]}")
    out = json.loads(line[7:])
    out["threads"] = threads if threads is not None else ("1" if n == 1 else f"{n + 1}")
    return out


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 8])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[None])
    p.add_argument("--json", type=str, default=None)
    a = p.parse_args(argv)
    cpu = platform.processor() or platform.machine()
    print(f"# {cpu}, {os.cpu_count()} cores, float64, humanoid (nu=26)")
    print(f"# B = {a.batch}, rollout {a.steps} RK4 steps; median of {a.repeats}; compile apart")
    rows = []
    for threads in a.threads:
        base = None
        for n in a.devices:
            r = run(n, a.batch, a.steps, a.repeats, threads)
            base = base or r
            for k in ("fd", "rollout"):
                diff = np.abs(np.asarray(r[k + "_checksum"]) - np.asarray(base[k + "_checksum"]))
                r[k + "_diff_vs_first"] = float(diff.max())
            rows.append(r)
            fd_us = r["fd_s"] / a.batch * 1e6
            ro_us = r["rollout_s"] / (a.batch * a.steps) * 1e6
            print(
                f"threads {r['threads']}  devices {n}:  FD {fd_us:7.2f} us/state"
                f" ({base['fd_s'] / r['fd_s']:.2f}x)"
                f"  rollout {ro_us:7.2f} us/state/step ({base['rollout_s'] / r['rollout_s']:.2f}x)"
                f"  first call FD {r['fd_first_s']:.1f} s, rollout {r['rollout_first_s']:.1f} s"
                f"  |diff| {max(r['fd_diff_vs_first'], r['rollout_diff_vs_first']):.1e}",
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
