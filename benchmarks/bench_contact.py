"""Forward dynamics and rollouts with contact (issue 63): simjax vs MuJoCo's C loop and MJX.

dm_control's hopper, cheetah, walker and humanoid loaded with ``sj.io.load_mjcf(path,
contact=True)`` (MuJoCo's soft contact and limit rows, solved by its primal Newton method),
and MuJoCo's own model of the same file. B random States (hinges in their ranges, random
speeds), each moved down until its lowest geom is 5 mm into the floor, so that every
member has contacts, different ones. Side by side in one process, functions taking turns:

* simjax: ``jit(vmap((q, u) -> realize(state, ACCELERATION).udot))`` over the B States;
  compile time apart;
* MuJoCo C: one ``mj_step`` from each State (forward dynamics and its Euler update) by
  ``mujoco.rollout``, one thread, the whole batch in one call;
* MJX (``--mjx``): ``jit(vmap(mjx.forward))`` on the CPU, same States, float64.

``--steps N`` also times rollouts of N semi-explicit Euler steps (simjax
``simulate(..., integrator="euler")``, MuJoCo ``mujoco.rollout`` with its Euler integrator;
joint damping, which MuJoCo's Euler integrates implicitly, stays on, so the trajectories
are not compared, only their cost). simjax's accelerations are checked against MuJoCo's
``qacc`` at 8 of the States.

    python benchmarks/bench_contact.py --batch 1024 --steps 100 --json benchmarks/results/contact.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_forward import machine_info, mujoco_rollout_loop, time_interleaved  # noqa: E402

MODELS = ("hopper", "cheetah", "walker", "humanoid")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=0, help="also time rollouts of this many Euler steps")
    p.add_argument("--mjx", action="store_true", help="also time MJX's forward on the CPU")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def dropped_states(
    case, mujoco, m, d, batch: int, rng
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """simjax (Q, U) and MuJoCo (QPOS, QVEL) of ``batch`` random States dropped 5 mm into
    the floor."""
    from test_contact_detection import _drop, _from_mujoco

    Q, U, QP, QV = [], [], [], []
    for _ in range(batch):
        q, u = case.random_state(rng)
        qp, T = case.to_mujoco(q)
        qp = _drop(mujoco, m, d, qp)
        q = _from_mujoco(case, q, qp)
        Q.append(q)
        U.append(u)
        QP.append(qp)
        QV.append(T @ u)
    return np.array(Q), np.array(U), np.array(QP), np.array(QV)


def bench_model(name: str, args, rng) -> dict:
    import jax
    import jax.numpy as jnp
    import mujoco
    from test_actuators import _path
    from test_io_mjcf import Case

    import simjax as sj

    path = _path(name)
    case = Case(name, path, mujoco)  # contact off: for its maps between simjax and MuJoCo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = sj.io.load_mjcf(path, contact=True)
    system, s0 = lm.system, lm.default_state
    m = mujoco.MjModel.from_xml_path(str(path))
    m.body_gravcomp[:] = 0.0  # simjax leaves gravity compensation out
    d = mujoco.MjData(m)
    Q, U, QP, QV = dropped_states(case, mujoco, m, d, args.batch, rng)
    out: dict = {"model": name, "batch": args.batch, "nv": int(m.nv)}

    fd = jax.jit(jax.vmap(lambda q, u: system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot))
    Qj, Uj = jnp.asarray(Q), jnp.asarray(U)
    t0 = time.perf_counter()
    udot = np.asarray(jax.block_until_ready(fd(Qj, Uj)))
    out["simjax_first_call_s"] = time.perf_counter() - t0
    run_c, _, _ = mujoco_rollout_loop(m, QP, QV, 1)
    fns = {"simjax": lambda: jax.block_until_ready(fd(Qj, Uj)), "mujoco_c": run_c}

    # check: simjax's udot against MuJoCo's qacc at 8 States
    worst = 0.0
    for k in range(min(8, args.batch)):
        d.qpos[:], d.qvel[:] = QP[k], QV[k]
        mujoco.mj_forward(m, d)
        _, T = case.to_mujoco(Q[k])
        mine = T @ udot[k]
        worst = max(worst, float(np.max(np.abs(mine - d.qacc)) / max(1.0, np.max(np.abs(d.qacc)))))
        out["active_contacts_first"] = out.get("active_contacts_first", int(d.ncon))
    out["udot_vs_qacc_max_rel"] = worst

    if args.mjx:
        from mujoco import mjx

        mx = mjx.put_model(m)
        d0 = mjx.make_data(mx)
        f_mjx = jax.jit(jax.vmap(lambda q, v: mjx.forward(mx, d0.replace(qpos=q, qvel=v)).qacc))
        QPj, QVj = jnp.asarray(QP), jnp.asarray(QV)
        t0 = time.perf_counter()
        jax.block_until_ready(f_mjx(QPj, QVj))
        out["mjx_first_call_s"] = time.perf_counter() - t0
        fns["mjx"] = lambda: jax.block_until_ready(f_mjx(QPj, QVj))

    times = time_interleaved(fns, args.repeats, args.min_time)
    for k, v in times.items():
        out[f"{k}_us_per_state"] = 1e6 * v / args.batch
    out["simjax_vs_mujoco_c"] = times["mujoco_c"] / times["simjax"]
    if "mjx" in times:
        out["simjax_vs_mjx"] = times["mjx"] / times["simjax"]

    if args.steps:
        dt = float(m.opt.timestep)
        roll = jax.jit(
            jax.vmap(
                lambda q, u: (
                    sj.simulate(
                        system, s0.with_q(q).with_u(u), args.steps * dt, integrator="euler", dt=dt, t0=0.0
                    ).final_state.q
                )
            )
        )
        t0 = time.perf_counter()
        jax.block_until_ready(roll(Qj, Uj))
        out["rollout_simjax_first_call_s"] = time.perf_counter() - t0
        m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
        run_r, _, _ = mujoco_rollout_loop(m, QP, QV, args.steps)
        rt = time_interleaved(
            {"simjax": lambda: jax.block_until_ready(roll(Qj, Uj)), "mujoco_c": run_r},
            max(2, args.repeats // 2),
            args.min_time,
        )
        n = args.batch * args.steps
        out["rollout_steps"] = args.steps
        out["rollout_simjax_us_per_state_step"] = 1e6 * rt["simjax"] / n
        out["rollout_mujoco_c_us_per_state_step"] = 1e6 * rt["mujoco_c"] / n
        out["rollout_simjax_vs_mujoco_c"] = rt["mujoco_c"] / rt["simjax"]
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    import jax

    import simjax as sj

    sj.configure()
    jax.config.update("jax_enable_x64", True)
    info = machine_info("float64")
    print(
        f"# {info['cpu']}, {info['cores']} cores, float64, B = {args.batch}; "
        f"jax {info['jax']}, mujoco {info['mujoco']}"
    )
    rng = np.random.default_rng(0)
    rows = []
    for name in args.models:
        r = bench_model(name, args, rng)
        rows.append(r)
        line = (
            f"{name:9s} nv={r['nv']:2d}  FD simjax {r['simjax_us_per_state']:8.1f} us/state  "
            f"MuJoCo C {r['mujoco_c_us_per_state']:7.1f}  (simjax {r['simjax_vs_mujoco_c']:.2f}x of C)"
        )
        if "mjx_us_per_state" in r:
            line += f"  MJX {r['mjx_us_per_state']:8.1f} ({r['simjax_vs_mjx']:.2f}x of MJX)"
        line += f"  first call {r['simjax_first_call_s']:.1f} s  |udot-qacc| {r['udot_vs_qacc_max_rel']:.1e}"
        print(line)
        if args.steps:
            print(
                f"{'':9s} rollout {args.steps} steps: simjax {r['rollout_simjax_us_per_state_step']:.1f} "
                f"us/state/step, MuJoCo C {r['rollout_mujoco_c_us_per_state_step']:.1f} "
                f"({r['rollout_simjax_vs_mujoco_c']:.2f}x of C), "
                f"first call {r['rollout_simjax_first_call_s']:.1f} s"
            )
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
