"""Inverse kinematics: simjax ``Assembler`` (batched and sequential ``track``) vs OpenSim's
``InverseKinematicsSolver`` (Simbody's Assembler) on the same marker data.

Problem: the free-pelvis humanoid of ``tests/oracle_models.py`` (26 q in Euler form), 2
markers per body (42) at random stations (``tests/oracle_ik._random_markers``). Data: a
smooth random trajectory of ``--frames`` frames at 100 Hz (pelvis rotating ~0.3 rad and
translating ~0.3 m, every joint swinging 0.05-0.2 rad), exact marker positions from
OpenSim's kinematics, Gaussian noise ``--noise`` (m) and, in a fraction ``--missing`` of
the frames, 1-3 markers missing (NaN). Both solvers start frame 0 from the same perturbed
pose (true q + N(0, 0.05)).

What is timed (all in one process, the implementations taking turns within every repeat;
the median over ``--repeats`` repeats is reported):

* simjax, float64, one ``sj.Assembler`` with a ``Markers`` goal per accuracy setting
  (``asm.set_accuracy(acc)``): frame 0 by ``asm.assemble(start)``, then every frame by
  ``asm.track(first, frames)`` (one compiled call; ``set_track_batch_size`` segments
  solved side by side, ``--batch-sizes``; ``all`` = one segment per frame, every frame
  from ``first``), timed with
  ``jax.block_until_ready``; and Simbody's sequential use (``set_internal_state(first)``;
  per frame ``move_all_observations(frames[k]); asm.track(0.01 * k)``). The first call of
  each compiled function is reported apart (compile + one run).
* OpenSim: ``tests/oracle_ik.opensim_ik`` (``solver.assemble`` on frame 0, ``solver.track``
  on the others; only the solver calls are timed) at each of ``--osim-accuracies``.

ms/frame is (assemble + track) / frames for every implementation. Accuracy: the optimum
``q_opt`` is simjax's batched ``track`` at ``--ref-accuracy`` (1e-12; cross-checked against
its sequential ``track``); every row reports the max and median ``|q - q_opt|`` over all
frames and coordinates (rad, and m for the pelvis translation), the RMS marker error and
how far its least-squares goal is above the optimum's. Speed-ups are given at the same
accuracy setting and at matched achieved accuracy (the fastest simjax batched row whose
max ``|q - q_opt|`` is no larger than the OpenSim row's).

Examples::

    python benchmarks/bench_ik.py --json benchmarks/results/ik_f64.json
    python benchmarks/bench_ik.py --frames 1000 --batch-sizes 32 128 all --repeats 3
    python benchmarks/bench_ik.py --no-peers --accuracies 1e-5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_forward as bf


def _batch_size(v: str):
    if v.lower() in ("all", "none"):
        return None
    n = int(v)
    if n < 1:
        raise argparse.ArgumentTypeError("batch sizes are positive integers or 'all'")
    return n


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=200, help="frames (100 Hz)")
    p.add_argument("--noise", type=float, default=1e-3, help="marker noise std (m)")
    p.add_argument("--missing", type=float, default=0.1, help="fraction of frames with 1-3 markers NaN")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    p.add_argument("--accuracies", type=float, nargs="+", default=[1e-3, 1e-5, 1e-8, 1e-10], help="simjax")
    p.add_argument("--osim-accuracies", type=float, nargs="+", default=[1e-5, 1e-8])
    p.add_argument("--ref-accuracy", type=float, default=1e-12, help="simjax accuracy of the optimum")
    p.add_argument(
        "--batch-sizes",
        type=_batch_size,
        nargs="+",
        default=[32, None, 16, 64],
        help="track batch sizes ('all': every frame vmapped at once); the first one is the default",
    )
    p.add_argument("--no-sequential", action="store_true", help="skip simjax's sequential track")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _code(info):
    """The index of ``info.result`` in ``sj.RESULTS`` (0: successful), batched or not."""
    v = np.asarray(info.result._value).astype(int)
    return v if v.ndim else int(v)


def _bs_name(bs) -> str:
    return "all" if bs is None else str(bs)


# ----------------------------------------------------------------------------- problem


def make_problem(args):
    """Humanoid, markers, true trajectory, noisy gappy frames and the perturbed start."""
    import oracle_ik as oik
    import oracle_models as om

    rng = np.random.default_rng(args.seed)
    spec = om.humanoid()
    markers = oik._random_markers(spec, rng)
    osm = oik.build_ik_model(spec, markers)
    T, nq = args.frames, spec.nq(True)
    q_base = rng.uniform(-0.5, 0.5, nq)
    q_base[3:6] = [0.3, 0.9, -0.2]
    tt = 0.01 * np.arange(T)[:, None]
    amp, freq = rng.uniform(0.05, 0.2, nq), rng.uniform(0.5, 1.5, nq)
    phase = rng.uniform(0, 2 * np.pi, nq)
    amp[:3], amp[3:6] = 0.3, 0.15  # pelvis rotates ~0.3 rad and translates ~0.3 m peak to peak
    q_true = q_base + amp * np.sin(2 * np.pi * freq * tt + phase)
    exact = oik.marker_positions(spec, markers, q_true, osim_model=osm)
    frames = exact + rng.normal(0, args.noise, exact.shape)
    gappy = np.flatnonzero(rng.random(T) < args.missing)
    gappy = gappy[gappy > 0]  # keep frame 0 complete (assembled from the perturbed start)
    n_missing = 0
    for k in gappy:
        idx = rng.choice(len(markers), size=rng.integers(1, 4), replace=False)
        frames[k, idx] = np.nan
        n_missing += len(idx)
    q_start = q_true[0] + rng.normal(0, 0.05, nq)
    return dict(
        spec=spec,
        markers=markers,
        osm=osm,
        q_true=q_true,
        exact=exact,
        frames=frames,
        q_start=q_start,
        gappy_frames=len(gappy),
        missing_markers=n_missing,
    )


class SimjaxIK:
    """One accuracy setting: a single-frame Assembler (assemble + sequential track) and one
    Assembler per track batch size (each compiles its own batched ``track``)."""

    def __init__(self, prob, acc: float, batch_sizes):
        import jax
        import oracle_ik as oik
        import oracle_models as om

        import simjax as sj

        self.acc = acc
        system, matter, bodies = om.to_simjax(prob["spec"])
        self.s = system.realize_topology()  # quaternion pelvis: the Assembler converts both ways
        self.frames = prob["frames"]

        def make(bs):
            asm = sj.Assembler(system)
            asm.set_accuracy(acc)
            asm.set_track_batch_size(len(self.frames) if bs is None else bs)
            mk = sj.Markers()
            for name, b, station in prob["markers"]:
                mk.add_marker(name, bodies[b], station)
            asm.adopt_assembly_goal(mk)
            mk.move_all_observations(self.frames[0])
            return asm, mk

        self.asm, self.mk = make(batch_sizes[0] if batch_sizes else 32)
        self.batched = {bs: make(bs)[0] for bs in batch_sizes}
        self.start = self.s.with_q(oik.quat_q_from_euler(prob["spec"], prob["q_start"]))
        se = matter.set_use_euler_angles(self.s, True)
        mk = self.mk
        self.to_euler = jax.jit(jax.vmap(lambda q: matter.set_use_euler_angles(self.s.with_q(q), True).q))
        self.locations = jax.jit(jax.vmap(lambda q: mk.find_current_marker_locations(se.with_q(q))))
        self.first = None

    def assemble(self):
        import jax

        self.mk.move_all_observations(self.frames[0])
        first, info = self.asm.assemble(self.start)
        jax.block_until_ready(first.q)
        self.first = first
        return _code(info)

    def track(self, bs):
        import jax

        states, infos = self.batched[bs].track(self.first, self.frames)
        jax.block_until_ready((states.q, infos.goal))
        return states, infos

    def sequential(self):
        asm, mk = self.asm, self.mk
        asm.set_internal_state(self.first)
        qs, status, its = [], [], []
        for k in range(len(self.frames)):
            mk.move_all_observations(self.frames[k])
            info = asm.track(0.01 * k)
            qs.append(asm.get_internal_state().q)
            status.append(_code(info))
            its.append(info.iterations)
        return np.asarray(qs), np.asarray(status), np.asarray(its)


# ----------------------------------------------------------------------------- accuracy


def accuracy_stats(q, q_opt, locs, locs_opt, frames) -> dict:
    dq = np.abs(q - q_opt)
    err2 = np.sum((locs - frames) ** 2, axis=-1)  # (T, n) NaN where missing
    err2_opt = np.sum((locs_opt - frames) ** 2, axis=-1)
    goal, goal_opt = np.nanmean(err2, axis=1), np.nanmean(err2_opt, axis=1)
    return {
        "max_dq": float(dq.max()),
        "median_dq": float(np.median(dq)),
        "max_dq_angles": float(np.delete(dq, [3, 4, 5], axis=1).max()),
        "rms_marker_err": float(np.sqrt(np.nanmean(err2))),
        "max_rel_goal_excess": float(np.max((goal - goal_opt) / goal_opt)),
        "min_rel_goal_excess": float(np.min((goal - goal_opt) / goal_opt)),
    }


# ----------------------------------------------------------------------------- report


def _c(r, k, fmt):
    return format(r[k], fmt) if r.get(k) is not None else "–"


def main_table(rows) -> str:
    head = (
        "| solver | accuracy | mode | ms/frame | track ms/frame | assemble ms "
        "| first call s (compile + run) | iterations (mean / max) | status ≠ 0 "
        "| max \\|q − q_opt\\| | median \\|q − q_opt\\| | RMS marker err mm "
        "| max goal excess |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - head.count("\\|") - 1)]
    for r in rows:
        its = f"{r['iter_mean']:.1f} / {r['iter_max']}" if r.get("iter_mean") is not None else "–"
        lines.append(
            f"| {r['solver']} | {r['accuracy']:.0e} | {r['mode']} | {r['ms_per_frame']:.3f} "
            f"| {r['track_ms_per_frame']:.3f} | {_c(r, 'assemble_ms', '.1f')} "
            f"| {_c(r, 'first_call_s', '.1f')} | {its} "
            f"| {_c(r, 'status_nonzero', 'd')} | {r['max_dq']:.1e} | {r['median_dq']:.1e} "
            f"| {r['rms_marker_err'] * 1e3:.4f} | {r['max_rel_goal_excess']:.1e} |"
        )
    return "\n".join(lines)


def speedup_table(sp) -> str:
    head = (
        "| OpenSim accuracy | OpenSim ms/frame | OpenSim max \\|q − q_opt\\| | comparison | simjax row "
        "| simjax ms/frame | simjax max \\|q − q_opt\\| | OpenSim / simjax | ≥ 10x |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - head.count("\\|") - 1)]
    for s in sp:
        if s["simjax_row"] is None:
            lines.append(
                f"| {s['osim_accuracy']:.0e} | {s['osim_ms_per_frame']:.3f} | {s['osim_max_dq']:.1e} "
                f"| {s['comparison']} | (none) | – | – | – | – |"
            )
            continue
        lines.append(
            f"| {s['osim_accuracy']:.0e} | {s['osim_ms_per_frame']:.3f} | {s['osim_max_dq']:.1e} "
            f"| {s['comparison']} | {s['simjax_row']} | {s['simjax_ms_per_frame']:.3f} "
            f"| {s['simjax_max_dq']:.1e} | {s['ratio']:.1f}x | {'yes' if s['ratio'] >= 10 else 'no'} |"
        )
    return "\n".join(lines)


def speedups(rows, default_bs) -> list[dict]:
    osim = [r for r in rows if r["solver"] == "OpenSim"]
    sj_batched = [r for r in rows if r["solver"] == "simjax" and r["mode"].startswith("batched")]
    out = []

    def add(o, comparison, cand):
        s = {
            "osim_accuracy": o["accuracy"],
            "osim_ms_per_frame": o["ms_per_frame"],
            "osim_max_dq": o["max_dq"],
            "comparison": comparison,
            "simjax_row": None,
        }
        if cand:
            best = min(cand, key=lambda r: r["ms_per_frame"])
            s.update(
                simjax_row=f"{best['accuracy']:.0e} {best['mode']}",
                simjax_ms_per_frame=best["ms_per_frame"],
                simjax_max_dq=best["max_dq"],
                ratio=o["ms_per_frame"] / best["ms_per_frame"],
            )
        out.append(s)

    for o in osim:
        same = [r for r in sj_batched if r["accuracy"] == o["accuracy"]]
        add(o, "same setting, default batch", [r for r in same if r["batch"] == _bs_name(default_bs)])
        add(o, "same setting, fastest batch", same)
        add(o, "matched max dq, fastest", [r for r in sj_batched if r["max_dq"] <= o["max_dq"]])
    return out


# ----------------------------------------------------------------------------- main


def main(argv=None) -> None:
    args = parse_args(argv)
    import jax

    import simjax

    simjax.configure()  # before the backend starts
    jax.config.update("jax_enable_x64", True)
    t_start = time.perf_counter()
    info = bf.machine_info("float64")
    info.pop("pinocchio", None)
    info.pop("mujoco", None)
    try:
        import opensim

        info["opensim"] = opensim.__version__
        opensim.Logger.setLevelString("Warn")
    except ImportError:
        raise SystemExit("bench_ik.py needs opensim, also for the marker data (tests/oracle_ik.py)") from None
    info["argv"] = sys.argv[1:] if argv is None else list(argv)
    print(
        f"date {info['date']}, CPU {info['cpu']} ({info['cores']} cores), load {info['loadavg_at_start']}, "
        f"jax {info['jax']}, simjax {info['simjax']}, opensim {info['opensim']}, float64, "
        f"XLA_FLAGS={info['XLA_FLAGS'] or '(unset)'}",
        flush=True,
    )
    bf.warm_up()
    import oracle_ik as oik

    prob = make_problem(args)
    T = args.frames
    frames = prob["frames"]
    nq = prob["spec"].nq(True)
    print(
        f"humanoid IK: {T} frames at 100 Hz, {len(prob['markers'])} markers, nq = {nq} (Euler), "
        f"noise {args.noise * 1e3:g} mm, {prob['missing_markers']} markers missing in "
        f"{prob['gappy_frames']} frames",
        flush=True,
    )
    bss = list(dict.fromkeys(args.batch_sizes))

    # --- simjax: build, compile (first calls), reference optimum
    res: dict = {}  # (solver, acc, mode) -> dict(times=[], q=..., ...)
    sims: dict = {}

    def first_calls(acc, batch_sizes, sequential):
        sim = SimjaxIK(prob, acc, batch_sizes)
        sims[acc] = sim
        t0 = time.perf_counter()
        st0 = sim.assemble()
        t_asm = time.perf_counter() - t0
        if st0 != 0:
            print(f"  simjax {acc:.0e}: assemble status {st0}", file=sys.stderr)
        for bs in batch_sizes:
            t0 = time.perf_counter()
            states, infos = sim.track(bs)
            first = time.perf_counter() - t0
            res[("simjax", acc, f"batched {_bs_name(bs)}")] = dict(
                batch=_bs_name(bs),
                first_call_s=first,
                assemble_first_s=t_asm,
                q=np.asarray(sim.to_euler(states.q)),
                status=_code(infos),
                iterations=np.asarray(infos.iterations),
                times=[],
            )
            print(f"  simjax {acc:.0e} batch {_bs_name(bs)}: first call {first:.1f} s", file=sys.stderr)
        if sequential:
            t0 = time.perf_counter()
            q, status, its = sim.sequential()
            res[("simjax", acc, "sequential")] = dict(
                batch=None,
                first_call_s=time.perf_counter() - t0 + t_asm,
                q=q,
                status=status,
                iterations=its,
                times=[],
            )
        print(f"  simjax {acc:.0e}: assemble first call {t_asm:.1f} s", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    first_calls(args.ref_accuracy, bss[:1], True)
    ref = res.pop(("simjax", args.ref_accuracy, f"batched {_bs_name(bss[0])}"))
    ref_seq = res.pop(("simjax", args.ref_accuracy, "sequential"))
    ref_sim = sims.pop(args.ref_accuracy)
    q_opt = ref["q"]
    locs_opt = np.asarray(ref_sim.locations(q_opt))
    reference = {
        "accuracy": args.ref_accuracy,
        "batch": ref["batch"],
        "status_nonzero": int(np.sum(ref["status"] != 0)),
        "iter_mean": float(ref["iterations"].mean()),
        "seq_status_nonzero": int(np.sum(ref_seq["status"] != 0)),
        "max_dq_batched_vs_sequential": float(np.abs(ref_seq["q"] - q_opt).max()),
        "max_dq_vs_truth": float(np.abs(q_opt - prob["q_true"]).max()),
        "median_dq_vs_truth": float(np.median(np.abs(q_opt - prob["q_true"]))),
        "setup_s": time.perf_counter() - t0,
    }
    for acc in args.accuracies:
        first_calls(acc, bss, not args.no_sequential)

    # --- OpenSim: one untimed call per accuracy for the results (the timed ones below agree)
    osim_acc = [] if args.no_peers else list(args.osim_accuracies)

    def run_osim(acc):
        return oik.opensim_ik(
            prob["spec"],
            prob["markers"],
            frames,
            osim_model=prob["osm"],
            accuracy=acc,
            q_init=prob["q_start"],
        )

    for acc in osim_acc:
        t0 = time.perf_counter()
        out = run_osim(acc)
        res[("OpenSim", acc, "assemble + track")] = dict(
            batch=None, q=out["q"], osim_errors=out["marker_errors"], times=[], first_call_s=None
        )
        print(f"  OpenSim {acc:.0e}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    # --- timing, round robin
    def timed(key):
        solver, acc, mode = key
        if solver == "OpenSim":
            out = run_osim(acc)
            return out["time_total"], out["time_assemble"]
        sim = sims[acc]
        t0 = time.perf_counter()
        sim.assemble()
        t1 = time.perf_counter()
        if mode == "sequential":
            sim.sequential()
        else:
            sim.track(_bs_name_inv(mode))
        return time.perf_counter() - t0, t1 - t0

    for rep in range(args.repeats):
        for key, r in res.items():
            total, asm_s = timed(key)
            r["times"].append(total)
            r.setdefault("asm_times", []).append(asm_s)
        print(f"  repeat {rep + 1}/{args.repeats} done", file=sys.stderr, flush=True)

    # --- rows
    rows = []
    for (solver, acc, mode), r in res.items():
        locs = np.asarray(ref_sim.locations(r["q"]))
        row = {
            "solver": solver,
            "accuracy": acc,
            "mode": mode,
            "batch": r["batch"],
            "ms_per_frame": statistics.median(r["times"]) / T * 1e3,
            "assemble_ms": statistics.median(r["asm_times"]) * 1e3,
            # per tracked frame: simjax tracks all T frames (frame 0 again), OpenSim frames 1..T-1
            "track_ms_per_frame": statistics.median(np.subtract(r["times"], r["asm_times"]))
            / (T - 1 if solver == "OpenSim" else T)
            * 1e3,
            "total_s": statistics.median(r["times"]),
            "times_s": r["times"],
            "first_call_s": r["first_call_s"],
        }
        if "status" in r:
            row.update(
                status_nonzero=int(np.sum(r["status"] != 0)),
                iter_mean=float(r["iterations"].mean()),
                iter_max=int(r["iterations"].max()),
            )
        if solver == "OpenSim":  # its own marker errors vs ours at its q (kinematics agree)
            e = np.linalg.norm(locs - frames, axis=-1)
            row["marker_err_diff_vs_opensim"] = float(np.nanmax(np.abs(e - r["osim_errors"])))
        row.update(accuracy_stats(r["q"], q_opt, locs, locs_opt, frames))
        rows.append(row)
    sp = speedups(rows, bss[0])
    total_wall = time.perf_counter() - t_start

    print(
        f"\nIK of {T} frames, {len(prob['markers'])} markers, {nq} q; median of {args.repeats} repeats. "
        f"ms/frame = (assemble frame 0 + track all frames) / {T}; track ms/frame leaves the assemble "
        "out (OpenSim tracks frames 1.., simjax every frame); first call = compile + one run of the "
        "batched track (sequential: of assemble + all frames); iterations per frame; q_opt = simjax "
        f"batched track at accuracy {args.ref_accuracy:g} (rad, m for the pelvis translation); goal "
        "excess = max over frames of (mean squared marker error − q_opt's) / q_opt's:\n"
    )
    print(main_table(rows))
    ref_line = (
        f"\nq_opt: status ≠ 0 in {reference['status_nonzero']} frames, {reference['iter_mean']:.1f} "
        f"iterations per frame; max |q_opt(batched) − q_opt(sequential, accuracy {args.ref_accuracy:g})| "
        f"{reference['max_dq_batched_vs_sequential']:.1e}; |q_opt − q_true| max "
        f"{reference['max_dq_vs_truth']:.1e}, median {reference['median_dq_vs_truth']:.1e} (the noise)"
    )
    kin = [r["marker_err_diff_vs_opensim"] for r in rows if "marker_err_diff_vs_opensim" in r]
    if kin:
        ref_line += (
            f"; marker errors at OpenSim's q, simjax kinematics vs OpenSim's computeCurrentMarkerErrors: "
            f"max diff {max(kin):.1e} m"
        )
    print(ref_line)
    if sp:
        print("\nSpeed-up, OpenSim ms/frame over simjax batched track ms/frame (target ≥ 10x):\n")
        print(speedup_table(sp))
    print(f"\ntotal wall time {total_wall:.0f} s")
    if args.json is not None:
        result = {
            "info": {**info, "total_wall_s": total_wall},
            "problem": {
                "frames": T,
                "markers": len(prob["markers"]),
                "nq": nq,
                "noise_m": args.noise,
                "gappy_frames": prob["gappy_frames"],
                "missing_markers": prob["missing_markers"],
            },
            "reference": reference,
            "rows": rows,
            "speedups": sp,
        }
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


def _bs_name_inv(mode: str):
    return _batch_size(mode.split()[-1])


if __name__ == "__main__":
    main()
