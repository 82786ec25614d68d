"""Forward-dynamics throughput on real robot files: simjax vs Pinocchio (issue 17).

Robots from example-robot-data's URDFs (the wheel the URDF tests fetch and cache): Panda
(fixed base, nu = 9), Solo12, TALOS reduced and TALOS full (floating base, nu = 18, 38 and
50), loaded with ``sj.io.load_urdf(..., mimic=False)`` and with
``pinocchio.buildModelFromUrdf`` (its default ``mimic=False``): mimic joints independent,
no couplers on either side. For each batch size B, side by side in one process, implementations in turn:

* simjax: ``jit(vmap((q, u) -> realize(state, Stage.ACCELERATION).udot))`` over B states;
  compile time (first call) reported apart;
* Pinocchio: ``pin.aba(model, data, q, v, -damping * v)`` in a Python loop over the same B
  states (the URDFs' joint damping, which simjax models as mobility dampers); with
  ``--pinocchio-cpp`` also the same ``pinocchio::aba`` looped in C++ (``pinocchio_cpp.py``),
  without the binding's cost per call;
* MuJoCo's own C loop ("mujoco C", where ``mujoco`` is installed): the same URDF compiled by
  MuJoCo (its visual and collision geometry left out, a free joint added to the root link of
  a floating robot, constraints off; the joints' damping kept, as on the other sides), one
  ``mj_step`` from each state by ``mujoco.rollout`` (forward dynamics plus the model's Euler
  update, which costs little beside it), one thread, the whole batch in one call.

simjax's ``udot`` is checked against Pinocchio's at the first 8 states, and against MuJoCo's
``qacc`` at the last. ``--chunk N`` also
times ``jit(sj.vmap(..., chunk_size=N))`` (the batch in chunks of N states) and its ratio.

    python benchmarks/bench_robots.py --batches 1 64 1024 --json benchmarks/results/robots_f64.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROBOT_KEYS = ["panda", "solo12", "talos", "talos_full"]
# Benchmark-only robots (beside the test suite's ``ROBOTS``): TALOS with its hands and
# grippers (50 dofs with the floating base; its gripper couplers are disabled like the others').
EXTRA_ROBOTS = {"talos_full": ("talos_data/robots/talos_full_v2.urdf", True)}


def mujoco_robot(path: Path, floating: bool):
    """MuJoCo's model of the URDF at ``path``: its geometry left out (the dynamics does not
    read it, and its meshes' package paths do not resolve here), a free joint on the root link
    if ``floating``, constraints and contacts off."""
    import re

    import mujoco

    text = path.read_text()
    for tag in ("visual", "collision"):
        text = re.sub(rf"<{tag}\b.*?</{tag}>", "", text, flags=re.S)
    spec = mujoco.MjSpec.from_string(text)
    if floating:
        spec.worldbody.first_body().add_freejoint()
    m = spec.compile()
    m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT) | int(
        mujoco.mjtDisableBit.mjDSBL_CONTACT
    )
    return m


def mujoco_maps(m, lm, floating: bool):
    """``(to_mujoco, udot_from_qacc)`` between simjax's ``(q, u)`` of the loaded robot ``lm`` and
    MuJoCo's model ``m`` of the same file, joints matched by name. simjax's Free joint has
    ``q = [quaternion | p]``, ``u = [w | v]`` in Ground; MuJoCo's ``qpos = [p | quaternion]``,
    ``qvel = [v in the world | w in the body]``, so its ``qacc`` is ``[dv | R^T dw]``."""
    from test_io_urdf import _rot_from_quat

    s0 = lm.state
    idx = [
        (int(m.joint(n).qposadr[0]), int(m.joint(n).dofadr[0]), c.q_index(s0), c.u_index(s0))
        for n, c in lm.coordinates.items()
    ]

    def to_mujoco(q, u):
        qpos, qvel = np.zeros(m.nq), np.zeros(m.nv)
        for a, v, sq, su in idx:
            qpos[a], qvel[v] = q[sq], u[su]
        if floating:
            qpos[:7] = np.r_[q[4:7], q[:4]]
            qvel[:6] = np.r_[u[3:6], _rot_from_quat(q[:4]).T @ u[0:3]]
        return qpos, qvel

    def udot_from_qacc(qacc, q):
        udot = np.zeros(s0.u.size)
        for _, v, _, su in idx:
            udot[su] = qacc[v]
        if floating:
            udot[0:3], udot[3:6] = _rot_from_quat(q[:4]) @ qacc[3:6], qacc[0:3]
        return udot

    return to_mujoco, udot_from_qacc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robots", nargs="+", default=ROBOT_KEYS)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64, 1024])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="where JAX runs simjax")
    ap.add_argument("--chunk", type=int, default=None, help="also time sj.vmap in chunks of CHUNK states")
    ap.add_argument(
        "--pinocchio-cpp",
        action="store_true",
        help="also time pinocchio::aba looped in C++ (needs a C++ compiler and pip install cmeel-eigen)",
    )
    args = ap.parse_args(argv)

    import jax
    from bench_forward import (
        machine_info,
        max_rel_err,
        mujoco_rollout_loop,
        pinocchio_cpp_info,
        select_device,
        time_interleaved,
    )

    select_device(args.device)
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import pinocchio as pin
    from data_fetch import fetch
    from test_io_urdf import (
        ERD_PREFIX,
        ERD_VERSION,
        ROBOTS,
        Robot,
        _cached_robots,
        _installed_robots,
        _quiet_load,
    )

    import simjax as sj

    cpp_info = pinocchio_cpp_info() if args.pinocchio_cpp else None
    if cpp_info:
        import pinocchio_cpp
    root = _installed_robots() or _cached_robots()
    rng = np.random.default_rng(0)
    rows = []
    for key in args.robots:
        if key in EXTRA_ROBOTS:  # not among the test suite's files: fetched on its own
            rel, floating = EXTRA_ROBOTS[key]
            path = fetch("example-robot-data", ERD_VERSION, [f"{ERD_PREFIX}/{rel}"])[f"{ERD_PREFIX}/{rel}"]
        else:
            rel, floating = ROBOTS[key]
            path = root / rel
        r = Robot(key, path, floating)
        # The robot as Pinocchio's model has it (mimic=False): mimic joints independent and
        # no couplers in the System (disabling them in the State would keep their rows in
        # the compiled program: TALOS full's 12 gripper couplers cost ~20% of its time).
        lm = _quiet_load(path, floating_base=floating, mimic=False)
        assert list(lm.coordinates) == list(r.lm.coordinates) and lm.state.q.shape == r.state.q.shape
        s0, system = lm.state, lm.system

        def one(q, u, s0=s0, system=system):
            return system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot

        f = jax.jit(jax.vmap(one))
        fc = jax.jit(sj.vmap(one, chunk_size=args.chunk)) if args.chunk else None
        states = [r.random_state(rng) for _ in range(max(args.batches))]
        Q = np.stack([q for q, _ in states])
        U = np.stack([u for _, u in states])
        pins = [r.to_pin(q, u) for q, u in states]
        try:
            mj = mujoco_robot(path, floating)
        except ImportError:
            mj = None
        if mj is not None:
            to_mujoco, udot_from_qacc = mujoco_maps(mj, lm, floating)
            mjs = [to_mujoco(q, u) for q, u in states]
        for B in args.batches:
            q, u = jnp.asarray(Q[:B]), jnp.asarray(U[:B])
            t0 = time.perf_counter()
            udot = np.asarray(jax.block_until_ready(f(q, u)))
            t_first = time.perf_counter() - t0
            # the URDF's joint damping (TALOS) on both sides: Pinocchio's tau = -damping * v
            taus = [-np.asarray(r.pin.damping) * vp for _, vp, _, _ in pins[:B]]

            def pin_loop(B=B, taus=taus):
                for (qp, vp, _, _), tau in zip(pins[:B], taus):
                    pin.aba(r.pin, r.data, qp, vp, tau)

            n = min(B, 8)
            refs = [
                np.linalg.solve(T, np.array(pin.aba(r.pin, r.data, qp, vp, taus[i])) - c)
                for i, (qp, vp, T, c) in enumerate(pins[:n])
            ]
            err = max_rel_err(np.asarray(udot[:n]), np.stack(refs))
            fns = {"simjax": lambda q=q, u=u: jax.block_until_ready(f(q, u)), "pinocchio": pin_loop}
            if cpp_info:
                Qp = np.stack([qp for qp, _, _, _ in pins[:B]])
                Vp = np.stack([vp for _, vp, _, _ in pins[:B]])
                loop = pinocchio_cpp.checked_loop(r.pin, r.data, Qp, Vp, damping=r.pin.damping)
                fns["pinocchio_cpp"] = lambda loop=loop, a=Qp, b=Vp: loop(a, b)
            mj_err = None
            if mj is not None:
                Qm = np.stack([qm for qm, _ in mjs[:B]])
                Vm = np.stack([vm for _, vm in mjs[:B]])
                fns["mujoco_c"], _, mj_data = mujoco_rollout_loop(mj, Qm, Vm, 1)
                mj_udot = udot_from_qacc(mj_data.qacc, Q[B - 1])  # the data of the last state
                mj_err = max_rel_err(np.asarray(udot[B - 1 : B]), mj_udot[None])
            if fc is not None and B > args.chunk:
                np.testing.assert_allclose(np.asarray(fc(q, u)), udot, rtol=1e-9, atol=1e-9)
                fns["chunked"] = lambda q=q, u=u: jax.block_until_ready(fc(q, u))
            t = time_interleaved(fns, args.repeats, args.min_time)
            row = {
                "robot": key,
                "nu": r.nu,
                "batch": B,
                "simjax_first_call_s": t_first,
                "simjax_us_per_state": 1e6 * t["simjax"] / B,
                "pinocchio_us_per_state": 1e6 * t["pinocchio"] / B,
                "ratio_vs_pinocchio": t["pinocchio"] / t["simjax"],
                "max_rel_err_vs_pinocchio": err,
            }
            if "chunked" in t:
                row.update(
                    chunk=args.chunk,
                    chunked_us_per_state=1e6 * t["chunked"] / B,
                    chunked_ratio_vs_pinocchio=t["pinocchio"] / t["chunked"],
                )
            if "pinocchio_cpp" in t:
                row.update(
                    pinocchio_cpp_us_per_state=1e6 * t["pinocchio_cpp"] / B,
                    ratio_vs_pinocchio_cpp=t["pinocchio_cpp"] / t["simjax"],
                )
                if "chunked" in t:
                    row["chunked_ratio_vs_pinocchio_cpp"] = t["pinocchio_cpp"] / t["chunked"]
            if "mujoco_c" in t:
                row.update(
                    mujoco_c_us_per_state=1e6 * t["mujoco_c"] / B,
                    ratio_vs_mujoco_c=t["mujoco_c"] / t["simjax"],
                    max_rel_err_mujoco_c_vs_simjax=mj_err,
                )
                if "chunked" in t:
                    row["chunked_ratio_vs_mujoco_c"] = t["mujoco_c"] / t["chunked"]
            rows.append(row)
            print(
                f"{key:7s} nu={r.nu:3d} B={B:5d}: first call {t_first:5.1f} s, simjax "
                f"{row['simjax_us_per_state']:8.2f} us/state, pinocchio {row['pinocchio_us_per_state']:6.2f}"
                f" us/state, throughput vs pinocchio {row['ratio_vs_pinocchio']:.2f}x, udot err {err:.1e}",
                flush=True,
            )
            if "chunked" in t:
                print(
                    f"{'':7s} sj.vmap in chunks of {args.chunk}: "
                    f"{row['chunked_us_per_state']:8.2f} us/state, "
                    f"throughput vs pinocchio {row['chunked_ratio_vs_pinocchio']:.2f}x",
                    flush=True,
                )
            if "pinocchio_cpp" in t:
                best = row.get("chunked_ratio_vs_pinocchio_cpp", row["ratio_vs_pinocchio_cpp"])
                print(
                    f"{'':7s} pinocchio looped in C++: {row['pinocchio_cpp_us_per_state']:6.2f} us/state; "
                    f"throughput vs it: simjax {row['ratio_vs_pinocchio_cpp']:.2f}x"
                    + (f", sj.vmap in chunks {best:.2f}x" if "chunked" in t else ""),
                    flush=True,
                )
            if "mujoco_c" in t:
                best = row.get("chunked_ratio_vs_mujoco_c", row["ratio_vs_mujoco_c"])
                print(
                    f"{'':7s} MuJoCo's C loop: {row['mujoco_c_us_per_state']:6.2f} us/state; "
                    f"throughput vs it: simjax {row['ratio_vs_mujoco_c']:.2f}x"
                    + (f", sj.vmap in chunks {best:.2f}x" if "chunked" in t else "")
                    + f"; udot vs its qacc {mj_err:.1e}",
                    flush=True,
                )
    if args.json:
        info = machine_info("float64")
        if cpp_info:
            info["pinocchio_cpp"] = cpp_info
        args.json.write_text(json.dumps({"info": info, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
