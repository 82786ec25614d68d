"""Forward-dynamics throughput: simjax ``jit(vmap(realize))`` vs Pinocchio ``aba`` and MuJoCo.

For each model and batch size B, times (side by side, in one process):

* simjax: ``jax.jit(jax.vmap(lambda s: system.realize(s, Stage.ACCELERATION).udot))`` over a
  batch of B States (every leaf stacked, instance parameters included). Compile time is
  measured separately: trace + lower (``f.lower(batch)``) and XLA compile (``.compile()``),
  each from cold JAX caches (``jax.clear_caches()``; simjax's persistent compilation cache is
  off in this process and in the benchmarks that import this module, so that a compile is
  never a cache hit: set ``SIMJAX_COMPILATION_CACHE=1`` to measure a warm cache).
* Pinocchio: ``pin.aba(model, data, q, v, tau)`` in a Python loop over the B states; with
  ``--pinocchio-cpp`` also the same ``pinocchio::aba`` looped in C++ (``pinocchio_cpp.py``:
  Pinocchio's headers compiled here with ``-O3``, called once per batch), the
  peer without the binding's cost per call (about 0.5 µs here).
* MuJoCo: ``d.qpos[:] = q; d.qvel[:] = v; mujoco.mj_forward(m, d)`` in a Python loop, and
  MuJoCo's own C loop ("mujoco C"): ``mujoco.rollout.rollout`` of one ``mj_step`` from each
  state (forward dynamics plus the model's Euler update, which costs little beside it), one
  thread, all B in one call; its last state's ``qacc`` is checked against simjax's ``udot``.
* MJX (``--mjx``; ``pip install mujoco-mjx``): the same MuJoCo model (contacts, equality
  constraints, springs and dampers off: the models are contact-free) under
  ``jax.jit(jax.vmap(lambda q, v: mjx.forward(mx, d.replace(qpos=q, qvel=v)).qacc))``, on
  the same device and in the same dtype as simjax; its compile time is reported beside
  simjax's and its ``qacc`` is checked against simjax's ``udot``.

``--device gpu`` runs simjax (and MJX) on the first GPU JAX sees (the peers' loops stay
on the host CPU, as a user would run them); ``--device cpu`` (the default) keeps JAX on the
CPU. A missing GPU is an error that says so, not a silent CPU run.

Run times are the median over ``--repeats`` repeats; a repeat makes enough calls to last at
least ``--min-time`` seconds, and the implementations take turns within each repeat so that
a change of machine load hits them alike. The same random states are used by all three
(mapped between layouts by ``tests/oracle_models.py``), and simjax's ``udot`` is checked
against Pinocchio's. ``--chunk N`` also times ``jit(sj.vmap(f, chunk_size=N))`` (a loop
over chunks of N states, each a vmap: ``lax.map(f, batch, batch_size=N)``), with its ratio
to Pinocchio too, and the same chunks over ``(q, u)`` with one State's model numbers shared
by the batch (``in_axes=(0, 0, None)``; "model shared"): a batch of whole States gives every
member its own copy of the joint frames and inertias, which simjax must then treat as
different per member.

``--compile-scan`` instead measures compile time of the batched call for pin chains of
``--depths`` links (default 5 10 20 50 100) at batch ``--scan-batch`` (default 1024).

``--rollout STEPS`` instead times one state (B = 1) stepped ``STEPS`` times with
semi-explicit Euler (``u += dt udot; q += dt N(q) u``, dt = 1e-4): simjax as one
``jit(lax.scan)`` of the steps, against Pinocchio's ``aba`` plus ``integrate`` in a Python
loop (how a Python user steps it), per step; and one jitted forward-dynamics call at B = 1
(``jit(lambda q, u: udot)``), synced after every call and pipelined, and an eager
``system.realize(state, Stage.ACCELERATION)`` (how a Simbody or OpenSim user writes it; against
one ``pin.aba`` call). The per-step dynamics is
the one the throughput mode checks against Pinocchio. ``--rollout-grad`` (with ``--rollout``)
also times ``jax.grad`` of ``sum(q(t1)^2)`` w.r.t. the start through ``sj.simulate``'s RK4
(dt 1e-3, STEPS steps, B = 1) against that rollout, with a central-difference check
(``bench_constrained.py --parts grad`` does the same for constrained models).
``--batched-rollout SECONDS`` instead times B (the first of ``--batches``) RK4 rollouts
(dt 1e-3) at once, against Pinocchio's RK4 (Python loop; C++ with ``--pinocchio-cpp``),
MuJoCo's C rollout loop and (``--mjx``) MJX's, final states checked between them
(``bench_batched_rollout``).
``--sync-dispatch`` runs JAX's CPU
programs on the calling thread (``jax_cpu_enable_async_dispatch=False``; by default JAX hands
each one to a worker thread, which costs a cross-core wake-up per synced call).

Examples::

    python benchmarks/bench_forward.py
    python benchmarks/bench_forward.py --models chain7 humanoid --batches 1 1024 --json out.json
    python benchmarks/bench_forward.py --compile-scan
    python benchmarks/bench_forward.py --rollout 1000 --models chain7 chain50
    python benchmarks/bench_forward.py --device gpu --mjx --batches 1024 4096 16384 65536
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# Compile times are measured from cold: simjax must not read them from its persistent cache
# (set before simjax is imported; bench_constrained, bench_ik, bench_robots, profile_stages
# import this module first).
os.environ.setdefault("SIMJAX_COMPILATION_CACHE", "0")

MODELS = {
    "chain7": "pin_chain_7",
    "chain20": "pin_chain_20",
    "chain50": "pin_chain_50",
    "humanoid": "humanoid",
}


# ----------------------------------------------------------------------------- helpers


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64, 1024])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--repeats", type=int, default=7, help="timed repeats (median reported)")
    p.add_argument("--min-time", type=float, default=0.05, help="seconds per repeat, at least")
    p.add_argument("--float32", action="store_true", help="simjax in float32 (peers stay float64)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--no-peers", action="store_true", help="time simjax only")
    p.add_argument(
        "--pinocchio-cpp",
        action="store_true",
        help="also time pinocchio::aba looped in C++ (needs a C++ compiler and pip install cmeel-eigen)",
    )
    p.add_argument("--compile-scan", action="store_true", help="compile time vs chain depth only")
    p.add_argument("--depths", type=int, nargs="+", default=[5, 10, 20, 50, 100])
    p.add_argument("--scan-batch", type=int, default=1024)
    p.add_argument("--rollout", type=int, default=None, metavar="STEPS", help="B = 1 rollout per step only")
    p.add_argument(
        "--rollout-grad",
        action="store_true",
        help="with --rollout: also time jax.grad through sj.simulate's RK4 rollout of STEPS steps",
    )
    p.add_argument(
        "--batched-rollout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="time B (the first of --batches) rollouts of SECONDS of RK4 (dt 1e-3), side by side",
    )
    p.add_argument(
        "--sync-dispatch",
        action="store_true",
        help="run JAX's CPU programs on the calling thread (jax_cpu_enable_async_dispatch=False)",
    )
    p.add_argument("--compile-repeats", type=int, default=1, help="compiles per case (median reported)")
    p.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="also time jit(lambda b: lax.map(f, b, batch_size=CHUNK)) (vmap over chunks of the batch)",
    )
    p.add_argument(
        "--device", choices=["cpu", "gpu"], default="cpu", help="where JAX runs simjax and MJX (default cpu)"
    )
    p.add_argument("--mjx", action="store_true", help="also time MJX (mujoco-mjx) on the same device")
    p.add_argument(
        "--distinct",
        type=int,
        default=None,
        metavar="N",
        help="draw at most N distinct random states and repeat them to fill larger batches (every "
        "state still has its own memory); saves minutes of Python set-up at B = 65536",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def select_device(kind: str):
    """Point JAX at ``kind`` (``"cpu"`` or ``"gpu"``) before its first computation and return
    the device simjax (and MJX) will run on; a GPU that JAX cannot see is an error."""
    import jax

    import simjax

    simjax.configure()  # its XLA:CPU settings must precede the backend's start

    jax.config.update("jax_platforms", "cuda,cpu" if kind == "gpu" else "cpu")
    fix = (
        "Install a CUDA build of jax (pip install 'jax[cuda12]') on a machine with an NVIDIA GPU, "
        "or run with --device cpu."
    )
    try:
        dev = jax.devices()[0]
    except RuntimeError as e:  # no backend for the requested platforms
        raise SystemExit(f"--device {kind}: JAX found no such device ({e}). {fix}") from None
    if kind == "gpu" and dev.platform != "gpu":
        raise SystemExit(f"--device gpu: JAX sees no GPU (its first device is {dev}). {fix}")
    return dev


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(dtype: str) -> dict:
    import jax
    import jaxlib

    import simjax

    info = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "jax_devices": [str(d) for d in jax.devices()],
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "simjax": simjax.__version__,
        "dtype": dtype,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "loadavg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    for mod, key in (("pinocchio", "pinocchio"), ("mujoco", "mujoco")):
        try:
            info[key] = __import__(mod).__version__
        except ImportError:
            info[key] = None
    try:
        from importlib.metadata import version

        info["mujoco_mjx"] = version("mujoco-mjx")
    except Exception:  # not installed
        info["mujoco_mjx"] = None
    info["device"] = str(jax.devices()[0])
    info["device_kind"] = jax.devices()[0].device_kind
    return info


def _calls_per_repeat(fn, min_time: float) -> int:
    fn()  # warm-up
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    return max(1, int(np.ceil(min_time / once)))


def time_call(fn, repeats: int, min_time: float) -> float:
    """Median seconds per ``fn()`` call; each repeat loops until ``min_time`` has passed."""
    return time_interleaved({"f": fn}, repeats, min_time)["f"]


def time_interleaved(fns: dict, repeats: int, min_time: float) -> dict:
    """Median seconds per call of each function. The functions take turns within every repeat
    (round robin), so a change of machine load hits them all alike."""
    inner = {k: _calls_per_repeat(f, min_time) for k, f in fns.items()}
    samples: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner[k]):
                f()
            samples[k].append((time.perf_counter() - t0) / inner[k])
    return {k: statistics.median(v) for k, v in samples.items()}


# ----------------------------------------------------------------------------- simjax


def simjax_forward(system, chunk: int | None = None):
    """A fresh ``jit(vmap(...))`` (fresh so that its compile time is measured from cold).

    With ``chunk``: ``jit(sj.vmap(..., chunk_size=chunk))``, i.e. vmap over chunks of the
    batch in a loop (intermediates of one chunk stay in cache)."""
    import jax

    import simjax as sj

    def one(s):
        return system.realize(s, sj.Stage.ACCELERATION).udot

    if chunk is None:
        return jax.jit(jax.vmap(one))
    return jax.jit(sj.vmap(one, chunk_size=chunk))


def simjax_forward_shared(system, chunk: int):
    """``jit(sj.vmap(f, in_axes=(0, 0, None)))`` of ``f(q, u, s0)``: a batch over the
    coordinates and speeds only, one State's model numbers (joint frames, inertias) shared
    by every member, as when a user maps over ``q`` and ``u`` with one model."""
    import jax

    import simjax as sj

    def one(q, u, s0):
        return system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot

    return jax.jit(sj.vmap(one, in_axes=(0, 0, None), chunk_size=chunk))


def batch_states(s0, Q, U):
    """Batch of States (every leaf stacked) from arrays Q (B, nq), U (B, nu)."""
    import jax
    import jax.numpy as jnp

    dt = s0.q.dtype
    return jax.jit(jax.vmap(lambda q, u: s0.with_q(q).with_u(u)))(jnp.asarray(Q, dt), jnp.asarray(U, dt))


def compile_simjax(system, batch, repeats: int = 1, chunk: int | None = None) -> tuple[object, float, float]:
    """``(compiled, trace+lower seconds, compile seconds)`` from cold caches (medians)."""
    import jax

    lower_s, compile_s = [], []
    for _ in range(repeats):
        jax.clear_caches()
        f = simjax_forward(system, chunk)
        t0 = time.perf_counter()
        lowered = f.lower(batch)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        lower_s.append(t1 - t0)
        compile_s.append(t2 - t1)
    return compiled, statistics.median(lower_s), statistics.median(compile_s)


def warm_up() -> None:
    """Compile a 2-link chain once so one-time JAX start-up costs don't land on the first case."""
    import jax
    import oracle_models as om

    spec = om.pin_chain(2)
    system, _, _ = om.to_simjax(spec)
    s0 = system.realize_topology()
    q, u = np.zeros((2, 2)), np.zeros((2, 2))
    jax.block_until_ready(simjax_forward(system)(batch_states(s0, q, u)))


# ----------------------------------------------------------------------------- benchmark


def pinocchio_loop(pm, Q, V):
    import pinocchio as pin

    model, data = pm.model, pm.data
    tau = np.zeros(model.nv)
    qs, vs = list(Q), list(V)

    def run():
        for q, v in zip(qs, vs):
            pin.aba(model, data, q, v, tau)

    return run


def pinocchio_cpp_loop(pm, Qp, Vp, batch: int):
    """``pinocchio::aba`` over the first ``batch`` states, looped in C++ (``pinocchio_cpp.py``);
    its accelerations are checked against ``pin.aba``'s from Python first."""
    import pinocchio_cpp

    Q, V = np.ascontiguousarray(Qp[:batch]), np.ascontiguousarray(Vp[:batch])
    loop = pinocchio_cpp.checked_loop(pm.model, pm.data, Q, V)
    return lambda: loop(Q, V)


def pinocchio_cpp_info() -> str:
    """Build the C++ peer now (once; cached) and say how; exits with the reason if it cannot."""
    import pinocchio_cpp

    try:
        lib = pinocchio_cpp.build()
    except pinocchio_cpp.Unavailable as e:
        sys.exit(f"--pinocchio-cpp: {e}")
    return f"{lib.name}, built with {pinocchio_cpp.compile_flags()}"


def mujoco_loop(mm, Q, V):
    import mujoco

    m, d = mm.model, mm.data
    qs, vs = list(Q), list(V)

    def run():
        for q, v in zip(qs, vs):
            d.qpos[:] = q
            d.qvel[:] = v
            mujoco.mj_forward(m, d)

    return run


def mujoco_rollout_loop(m, Q, V, steps: int):
    """MuJoCo's own C loop over the states: ``mujoco.rollout.rollout`` of ``steps`` ``mj_step``s
    of the model ``m`` from each ``(qpos, qvel)``, one thread, all B in one call. Returns
    ``(run, states, data)``: ``states`` (B, steps, n) is what ``run`` fills (each row starts
    with the time, then qpos and qvel) and ``data`` holds the last rollout's."""
    import mujoco
    import mujoco.rollout

    d = mujoco.MjData(m)
    full = mujoco.mjtState.mjSTATE_FULLPHYSICS
    init = np.zeros((len(Q), mujoco.mj_stateSize(m, full)))
    for i, (q, v) in enumerate(zip(Q, V)):
        d.qpos[:], d.qvel[:] = q, v
        mujoco.mj_getState(m, d, init[i], full)
    states = np.empty((len(Q), steps, init.shape[1]))
    run = lambda: mujoco.rollout.rollout(m, d, init, nstep=steps, state=states)
    run()
    return run, states, d


def mujoco_c_loop(mm, Q, V):
    """One ``mj_step`` (forward dynamics, then the model's Euler integration, which costs
    little beside it) from each state in MuJoCo's C loop. Returns ``(run, qacc of the last
    state)``."""
    run, _, d = mujoco_rollout_loop(mm.model, Q, V, 1)
    return run, d.qacc.copy()


def mjx_forward(mm, batch: int):
    """MJX's batched forward dynamics of the MuJoCo model ``mm.model``: ``(f, lower s, compile s)``
    with ``f(Q, V) -> qacc`` compiled for ``batch`` states (cold caches, like simjax's)."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    dt = jnp.zeros(()).dtype  # float64 with jax_enable_x64, as simjax
    mx = mjx.put_model(mm.model)
    d0 = mjx.make_data(mx)
    f = jax.jit(jax.vmap(lambda q, v: mjx.forward(mx, d0.replace(qpos=q, qvel=v)).qacc))
    args = (jnp.zeros((batch, mm.model.nq), dt), jnp.zeros((batch, mm.model.nv), dt))
    jax.clear_caches()
    t0 = time.perf_counter()
    lowered = f.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    return compiled, t1 - t0, time.perf_counter() - t1


def peer_layout(peer, spec, Q, U):
    """The states ``(Q, U)`` in a peer model's layout (``oracle_models.PeerMap.qv``):
    ``(q, v, (q, v, T, c) per state)``."""
    maps = [peer.map.qv(spec, q, u) for q, u in zip(Q, U)]
    return np.stack([r[0] for r in maps]), np.stack([r[1] for r in maps]), maps


def state_gap(dq: np.ndarray, dv: np.ndarray, v_ref: np.ndarray) -> float:
    """A final state's distance to a reference one: the largest of the position difference
    taken on the configuration space (a peer's ``difference``: a quaternion and its negative
    are one pose) and the speed difference, relative to the reference speeds' size as in
    ``max_rel_err``."""
    return float(np.abs(np.concatenate([dq, dv])).max() / max(1.0, np.abs(v_ref).max()))


def build_peers(spec, no_peers: bool) -> dict:
    import oracle_models as om

    peers = {}
    if not no_peers:
        for name, build in (("pinocchio", om.to_pinocchio), ("mujoco", om.to_mujoco)):
            try:
                peers[name] = build(spec)
            except ImportError:
                print(f"  ({name} not installed: skipped)", file=sys.stderr)
    return peers


def bench_model(key: str, batches: list[int], args, rng) -> list[dict]:
    import jax
    import oracle_models as om

    spec = om.ALL_MODELS[MODELS[key]]()
    system, _, _ = om.to_simjax(spec)
    s0 = system.realize_topology()
    n = max(batches) if args.distinct is None else min(max(batches), max(args.distinct, 8))
    states = [om.random_state(spec, rng) for _ in range(n)]
    Q = np.stack([qq for _, qq, _ in states])
    U = np.stack([u for _, _, u in states])
    peers = build_peers(spec, args.no_peers)
    mjx_model = None
    if args.mjx:
        mjx_model = peers["mujoco"] if "mujoco" in peers else om.to_mujoco(spec)
    # Peer layouts of the same states: (q, v, (q, v, T, c) per state).
    peer_qv = {}
    for name, pm in peers.items():
        peer_qv[name] = peer_layout(pm, spec, Q, U)
    if mjx_model is not None and "mujoco" not in peer_qv:
        peer_qv["mujoco"] = peer_layout(mjx_model, spec, Q, U)
    if n < max(batches):  # --distinct: repeat the n states (copies: each has its own memory)
        idx = np.arange(max(batches)) % n
        Q, U = Q[idx], U[idx]
        peer_qv = {k: (qv[0][idx], qv[1][idx], qv[2]) for k, qv in peer_qv.items()}

    rows_out = []
    for B in batches:
        batch = batch_states(s0, Q[:B], U[:B])
        jax.block_until_ready(batch)
        compiled, t_lower, t_compile = compile_simjax(system, batch, args.compile_repeats)
        udot = np.asarray(jax.block_until_ready(compiled(batch)))
        fns = {"simjax": lambda c=compiled, b=batch: jax.block_until_ready(c(b))}
        if args.chunk is not None and args.chunk < B:
            chunked, _, _ = compile_simjax(system, batch, 1, args.chunk)
            np.testing.assert_allclose(np.asarray(chunked(batch)), udot, rtol=1e-6, atol=1e-6)
            fns["chunked"] = lambda c=chunked, b=batch: jax.block_until_ready(c(b))
            # The same chunks over (q, u) only, the model's numbers shared by the batch (an
            # unbatched argument): what a user mapping over coordinates with one model runs.
            shared = simjax_forward_shared(system, args.chunk)
            qb, ub = batch.q, batch.u
            np.testing.assert_allclose(np.asarray(shared(qb, ub, s0)), udot, rtol=1e-6, atol=1e-6)
            fns["shared"] = lambda c=shared, a=qb, b=ub: jax.block_until_ready(c(a, b, s0))
        if "pinocchio" in peers:
            fns["pinocchio"] = pinocchio_loop(
                peers["pinocchio"], peer_qv["pinocchio"][0][:B], peer_qv["pinocchio"][1][:B]
            )
        if "pinocchio" in peers and args.pinocchio_cpp:
            fns["pinocchio_cpp"] = pinocchio_cpp_loop(peers["pinocchio"], *peer_qv["pinocchio"][:2], B)
        mujoco_c_err: dict = {}
        if "mujoco" in peers:
            mq, mv, mmaps = peer_qv["mujoco"]
            fns["mujoco"] = mujoco_loop(peers["mujoco"], mq[:B], mv[:B])
            fns["mujoco_c"], qacc_last = mujoco_c_loop(peers["mujoco"], mq[:B], mv[:B])
            mine = peers["mujoco"].map.udot_to_simjax(qacc_last, *mmaps[(B - 1) % len(mmaps)][2:])
            mujoco_c_err = {"max_rel_err_mujoco_c_vs_simjax": max_rel_err(mine[None], udot[B - 1 : B])}
        mjx_row: dict = {}
        if mjx_model is not None:
            mf, m_lower, m_compile = mjx_forward(mjx_model, B)
            dt = batch.q.dtype
            Qm = jax.device_put(peer_qv["mujoco"][0][:B].astype(dt))
            Vm = jax.device_put(peer_qv["mujoco"][1][:B].astype(dt))
            qacc = np.asarray(jax.block_until_ready(mf(Qm, Vm)))
            n = min(B, 8)
            mine = [mjx_model.map.udot_to_simjax(qacc[i], *peer_qv["mujoco"][2][i][2:]) for i in range(n)]
            err = max_rel_err(np.stack(mine), udot[:n])
            mjx_row = {"mjx_lower_s": m_lower, "mjx_compile_s": m_compile, "max_rel_err_mjx_vs_simjax": err}
            fns["mjx"] = lambda f=mf, a=Qm, b=Vm: jax.block_until_ready(f(a, b))
        t = time_interleaved(fns, args.repeats, args.min_time)

        row = {
            "model": key,
            "nb": len(spec.bodies),
            "nu": spec.nu,
            "batch": B,
            "simjax_lower_s": t_lower,
            "simjax_compile_s": t_compile,
            **mjx_row,
            **mujoco_c_err,
        }
        for name, sec in t.items():
            row[f"{name}_us_per_state"] = 1e6 * sec / B
            row[f"{name}_states_per_s"] = B / sec
            if name in peers or name in ("mjx", "pinocchio_cpp", "mujoco_c"):
                row[f"ratio_vs_{name}"] = sec / t["simjax"]
        if "chunked" in t:
            row["chunk"] = args.chunk
            for peer in ("pinocchio", "pinocchio_cpp", "mujoco_c"):
                if peer in t:
                    row[f"chunked_ratio_vs_{peer}"] = t[peer] / t["chunked"]
                    row[f"shared_ratio_vs_{peer}"] = t[peer] / t["shared"]
        if "pinocchio" in peers:
            # Accuracy check of simjax against Pinocchio at up to 8 of the states.
            pm = peers["pinocchio"]
            Qp, Vp, maps = peer_qv["pinocchio"]
            n = min(B, 8)
            ref = [pm.map.udot_to_simjax(om.pinocchio_aba(pm, Qp[i], Vp[i]), *maps[i][2:]) for i in range(n)]
            row["max_rel_err_vs_pinocchio"] = max_rel_err(udot[:n], np.stack(ref))
        if batch.q.devices() != {jax.devices("cpu")[0]}:
            row["max_rel_err_vs_cpu"] = _err_vs_cpu(system, batch, udot)
        rows_out.append(row)
        print(f"  done {key} B={B}", file=sys.stderr, flush=True)
    return rows_out


def _err_vs_cpu(system, batch, udot) -> float:
    """Largest relative difference between the accelerator's ``udot`` and the same program's
    on the host CPU (same dtype), over up to 8 states: the check a run without peers keeps."""
    import jax

    cpu = jax.devices("cpu")[0]
    n = min(8, udot.shape[0])
    few = jax.device_put(jax.tree.map(lambda x: x[:n], batch), cpu)
    return max_rel_err(udot[:n], np.asarray(simjax_forward(system)(few)))


def max_rel_err(a: np.ndarray, ref: np.ndarray) -> float:
    """Largest ``max |a_i - ref_i| / max(1, max |ref_i|)`` over the states ``i`` (rows): the
    accuracy check every comparison of ``udot`` in this module reports."""
    scale = np.maximum(1.0, np.max(np.abs(ref), axis=1))
    return float(np.max(np.max(np.abs(a - ref), axis=1) / scale))


def bench_rollout(key: str, args, rng) -> dict:
    """B = 1: simjax's ``jit(lax.scan)`` of ``args.rollout`` steps against Pinocchio's
    ``aba`` + ``integrate`` loop, per step; one jitted call synced and pipelined."""
    import jax
    import oracle_models as om
    import pinocchio as pin

    import simjax as sj

    spec = om.ALL_MODELS[MODELS[key]]()
    system, _, _ = om.to_simjax(spec)
    matter = system.get_matter_subsystem()
    s0 = system.realize_topology()
    _, q0, u0 = om.random_state(spec, rng)
    dt, steps = 1e-4, args.rollout

    def step(carry, _):
        q, u = carry
        s = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
        u = u + dt * s.udot
        return (q + dt * matter.calc_qdot(s, u), u), None

    roll = jax.jit(lambda q, u: jax.lax.scan(step, (q, u), None, length=steps)[0])
    one = jax.jit(lambda q, u: system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot)
    q, u = jax.device_put(np.asarray(q0, float)), jax.device_put(np.asarray(u0, float))
    jax.block_until_ready((roll(q, u), one(q, u)))
    fns = {"simjax": lambda: jax.block_until_ready(roll(q, u))}
    row = {"model": key, "nu": spec.nu, "steps": steps}
    if not args.no_peers:
        pm = om.to_pinocchio(spec)
        qp, vp, _, _ = pm.map.qv(spec, np.asarray(q0), np.asarray(u0))
        model, data = pm.model, pm.data
        tau = np.zeros(model.nv)

        def pin_roll():
            qq, vv = qp, vp
            for _ in range(steps):
                vv = vv + dt * pin.aba(model, data, qq, vv, tau)
                qq = pin.integrate(model, qq, dt * vv)

        fns["pinocchio"] = pin_roll
    t = time_interleaved(fns, args.repeats, args.min_time)
    for name, sec in t.items():
        row[f"{name}_us_per_step"] = 1e6 * sec / steps
    if "pinocchio" in t:
        row["simjax_over_pinocchio"] = t["simjax"] / t["pinocchio"]
    synced = lambda: jax.block_until_ready(one(q, u))
    row["call_synced_us"] = 1e6 * time_call(synced, args.repeats, args.min_time)
    n = 100

    def pipelined():
        for _ in range(n):
            r = one(q, u)
        jax.block_until_ready(r)

    row["call_pipelined_us"] = 1e6 * time_call(pipelined, args.repeats, args.min_time) / n
    # What a Simbody/OpenSim user writes in Python: realize a State, read udot.
    s1 = s0.with_q(q).with_u(u)
    eager = lambda: jax.block_until_ready(system.realize(s1, sj.Stage.ACCELERATION).udot)
    eager()
    row["realize_eager_us"] = 1e6 * time_call(eager, args.repeats, args.min_time)
    if not args.no_peers:
        one_pin = lambda: pin.aba(model, data, qp, vp, tau)
        row["pinocchio_call_us"] = 1e6 * time_call(one_pin, args.repeats, args.min_time)
    if args.rollout_grad:
        row.update(rollout_gradient(system, s0.with_q(q).with_u(u), steps, args))
    print(f"  done {key} rollout", file=sys.stderr, flush=True)
    return row


def bench_batched_rollout(key: str, args, rng) -> dict:
    """B rollouts at once (B = the first of ``--batches``): ``sj.simulate``'s RK4 (dt 1e-3,
    ``--batched-rollout`` seconds, no torques) under a plain ``jax.vmap`` (each chunk's whole
    rollout in turn, ``_batching.chunked_jvp``), under ``sj.vmap``, and with one State's
    model shared (a ``jax.vmap`` over ``(q, u)``), against the same RK4 with Pinocchio
    (``aba`` at each stage, ``integrate``): a C++ loop over the states (``--pinocchio-cpp``)
    and a Python loop (timed on ``PY_STATES`` states, per state times B), and against MuJoCo's
    RK4 on the same model: its C rollout loop and, with ``--mjx``, MJX's
    (``mujoco_rollouts``). simjax's final states and the C++ loop's are checked against the
    Python loop's, MuJoCo's and MJX's against simjax's."""
    import jax
    import oracle_models as om

    import simjax as sj

    spec = om.ALL_MODELS[MODELS[key]]()
    system, _, _ = om.to_simjax(spec)
    s0 = system.realize_topology()
    B, dt = args.batches[0], 1e-3
    steps = int(round(args.batched_rollout / dt))
    n = B if args.distinct is None else min(B, max(args.distinct, 8))
    states = [om.random_state(spec, rng) for _ in range(n)]
    Q = np.stack([qq for _, qq, _ in states])[np.arange(B) % n]
    U = np.stack([u for _, _, u in states])[np.arange(B) % n]
    batch = batch_states(s0, Q, U)
    t1 = steps * dt

    def final(s):
        f = sj.simulate(system, s, t1, t0=0.0, dt=dt, integrator="rk4").final_state
        return f.q, f.u

    shared = lambda q, u: final(s0.with_q(q).with_u(u))
    progs = {
        "jax_vmap": (jax.jit(jax.vmap(final)), (batch,)),
        "sj_vmap": (jax.jit(sj.vmap(final)), (batch,)),
        "shared": (jax.jit(jax.vmap(shared)), (batch.q, batch.u)),
    }
    row: dict = {"model": key, "nu": spec.nu, "batch": B, "steps": steps}
    fns, out = {}, {}
    for name, (f, a) in progs.items():
        t0 = time.perf_counter()
        out[name] = jax.tree.map(np.asarray, jax.block_until_ready(f(*a)))
        row[f"{name}_first_call_s"] = time.perf_counter() - t0
        fns[name] = lambda f=f, a=a: jax.block_until_ready(f(*a))
    for name in ("sj_vmap", "shared"):
        row[f"max_abs_diff_{name}_vs_jax_vmap"] = float(
            max(np.abs(x - y).max() for x, y in zip(out[name], out["jax_vmap"]))
        )
    if not args.no_peers:
        import pinocchio as pin

        pm = om.to_pinocchio(spec)
        Qp, Vp, _ = peer_layout(pm, spec, Q, U)
        model, data, tau = pm.model, pm.data, np.zeros(pm.model.nv)

        def rk4_py(q, v):
            for _ in range(steps):
                a1 = pin.aba(model, data, q, v, tau)
                v2 = v + 0.5 * dt * a1
                a2 = pin.aba(model, data, pin.integrate(model, q, 0.5 * dt * v), v2, tau)
                v3 = v + 0.5 * dt * a2
                a3 = pin.aba(model, data, pin.integrate(model, q, 0.5 * dt * v2), v3, tau)
                v4 = v + dt * a3
                a4 = pin.aba(model, data, pin.integrate(model, q, dt * v3), v4, tau)
                q = pin.integrate(model, q, dt / 6 * (v + 2 * v2 + 2 * v3 + v4))
                v = v + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
            return q, v

        n_py = min(B, PY_STATES)
        fns["pinocchio"] = lambda: [rk4_py(Qp[i], Vp[i]) for i in range(n_py)]
        # simjax's final states in Pinocchio's layout, against its Python loop's
        mine = [pm.map.qv(spec, out["jax_vmap"][0][i], out["jax_vmap"][1][i]) for i in range(min(B, 4))]
        ref = [rk4_py(Qp[i], Vp[i]) for i in range(len(mine))]

        gap = lambda q, v, r: state_gap(pin.difference(model, r[0], q), v - r[1], r[1])

        row["max_rel_err_vs_pinocchio"] = max(gap(*m[:2], r) for m, r in zip(mine, ref))
        if args.pinocchio_cpp:
            import pinocchio_cpp

            loop = pinocchio_cpp.checked_loop(model, data, Qp, Vp)
            qc, vc = loop.rk4(Qp[: len(ref)], Vp[: len(ref)], steps, dt)
            row["max_rel_err_cpp_vs_python"] = max(gap(qc[i], vc[i], r) for i, r in enumerate(ref))
            fns["pinocchio_cpp"] = lambda: loop.rk4(Qp, Vp, steps, dt)
    if args.mjx or not args.no_peers:
        mujoco_rollouts(spec, Q, U, out["jax_vmap"], steps, dt, args, row, fns)
    t = time_interleaved(fns, args.repeats, args.min_time)
    if "pinocchio" in t:
        t["pinocchio"] *= B / min(B, PY_STATES)
    for name, sec in t.items():
        row[f"{name}_ms"] = 1e3 * sec
    for peer in ("pinocchio", "pinocchio_cpp", "mujoco_c", "mjx"):
        for name in progs:
            if peer in t:
                row[f"{name}_ratio_vs_{peer}"] = t[peer] / t[name]
    print(f"  done {key} batched rollout", file=sys.stderr, flush=True)
    return row


# Pinocchio's Python RK4 loop is timed on this many states (it costs the same per state).
PY_STATES = 32


def mujoco_rollouts(spec, Q, U, mine, steps: int, dt: float, args, row: dict, fns: dict) -> None:
    """MuJoCo's RK4 (``opt.integrator = RK4``, ``opt.timestep = dt``) on the same contact-free
    model and states, for ``bench_batched_rollout``: its C rollout loop (``mujoco.rollout``,
    one thread, all B rollouts in one call; unless ``--no-peers``) and, with ``--mjx``, MJX's
    ``jit(vmap(lax.scan(mjx.step)))`` on simjax's device and dtype. Adds their timed calls to
    ``fns`` and to ``row`` the gaps of simjax's final states (``mine``: (q, u)) to theirs."""
    import jax
    import jax.numpy as jnp
    import oracle_models as om

    try:
        import mujoco
    except ImportError:
        if args.mjx:
            raise
        print("  (mujoco not installed: skipped)", file=sys.stderr)
        return
    mm = om.to_mujoco(spec)
    m = mm.model
    m.opt.integrator, m.opt.timestep = mujoco.mjtIntegrator.mjINT_RK4, dt
    Qm, Vm, _ = peer_layout(mm, spec, Q, U)
    n = min(len(Q), 4)
    ref = [mm.map.qv(spec, mine[0][i], mine[1][i])[:2] for i in range(n)]

    def gap(q, v, r) -> float:
        dq = np.zeros(m.nv)
        mujoco.mj_differentiatePos(m, dq, 1.0, r[0], q)
        return state_gap(dq, v - r[1], r[1])

    if not args.no_peers:
        run, states, _ = mujoco_rollout_loop(m, Qm, Vm, steps)
        o = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_TIME)  # the state starts with the time
        last = states[:, -1]
        row["max_rel_err_mujoco_c_vs_simjax"] = max(
            gap(last[i, o : o + m.nq], last[i, o + m.nq : o + m.nq + m.nv], r) for i, r in enumerate(ref)
        )
        fns["mujoco_c"] = run
    if args.mjx:
        from mujoco import mjx

        mx = mjx.put_model(m)
        d0 = mjx.make_data(mx)

        def final(q, v):
            step = lambda d, _: (mjx.step(mx, d), None)
            d, _ = jax.lax.scan(step, d0.replace(qpos=q, qvel=v), None, length=steps)
            return d.qpos, d.qvel

        f = jax.jit(jax.vmap(final))
        a = (jnp.asarray(Qm, d0.qpos.dtype), jnp.asarray(Vm, d0.qvel.dtype))
        t0 = time.perf_counter()
        qm, vm = jax.tree.map(np.asarray, jax.block_until_ready(f(*a)))
        row["mjx_first_call_s"] = time.perf_counter() - t0
        row["max_rel_err_mjx_vs_simjax"] = max(gap(qm[i], vm[i], r) for i, r in enumerate(ref))
        fns["mjx"] = lambda: jax.block_until_ready(f(*a))


def ratio_cell(row: dict, key: str) -> str:
    """A table cell for the ratio ``row[key]``, a dash where it was not measured (no peers)."""
    return f"{row[key]:.2f}x" if key in row else "–"


def batched_rollout_table(rows: list[dict]) -> str:
    x = ratio_cell
    ms = lambda r, k: f"{r[k]:.0f}" if k in r else "–"
    head = (
        "| model | jax.vmap ms | sj.vmap ms | model shared ms | Pinocchio Python ms | Pinocchio C++ ms "
        "| jax.vmap vs Python / C++ | shared vs Python / C++ | first call s (jax.vmap) |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['model']} | {ms(r, 'jax_vmap_ms')} | {ms(r, 'sj_vmap_ms')} | {ms(r, 'shared_ms')} "
            f"| {ms(r, 'pinocchio_ms')} | {ms(r, 'pinocchio_cpp_ms')} "
            f"| {x(r, 'jax_vmap_ratio_vs_pinocchio')} / {x(r, 'jax_vmap_ratio_vs_pinocchio_cpp')} "
            f"| {x(r, 'shared_ratio_vs_pinocchio')} / {x(r, 'shared_ratio_vs_pinocchio_cpp')} "
            f"| {r['jax_vmap_first_call_s']:.1f} |"
        )
    if any("mujoco_c_ms" in r or "mjx_ms" in r for r in rows):
        lines += [
            "",
            "| model | jax.vmap ms | MuJoCo C rollout ms | MJX ms | jax.vmap vs MuJoCo C / MJX "
            "| simjax vs MuJoCo / MJX (final state) | first call s (MJX) |",
            "|---|---|---|---|---|---|---|",
        ]
        err = lambda r, k: f"{r[k]:.1e}" if k in r else "–"
        for r in rows:
            first = f"{r['mjx_first_call_s']:.1f}" if "mjx_first_call_s" in r else "–"
            lines.append(
                f"| {r['model']} | {ms(r, 'jax_vmap_ms')} | {ms(r, 'mujoco_c_ms')} | {ms(r, 'mjx_ms')} "
                f"| {x(r, 'jax_vmap_ratio_vs_mujoco_c')} / {x(r, 'jax_vmap_ratio_vs_mjx')} "
                f"| {err(r, 'max_rel_err_mujoco_c_vs_simjax')} / {err(r, 'max_rel_err_mjx_vs_simjax')} "
                f"| {first} |"
            )
    return "\n".join(lines)


def rollout_gradient(system, state, steps: int, args) -> dict:
    """``jax.grad`` of ``sum(q(t1)^2)`` w.r.t. the start through ``sj.simulate``'s RK4
    (dt 1e-3, ``steps`` steps, B = 1, no constraints) against the rollout itself, both
    compiled ahead of time and timed in turn; the gradient's directional derivative against
    a central difference."""
    import jax
    import jax.numpy as jnp

    import simjax as sj

    dt = 1e-3
    roll = lambda s: sj.simulate(system, s, steps * dt, integrator="rk4", dt=dt, t0=0.0).final_state.q
    loss = lambda q0, s: jnp.sum(roll(s.with_q(q0)) ** 2)
    rc = jax.jit(roll).lower(state).compile()
    gc = jax.jit(jax.grad(loss)).lower(state.q, state).compile()
    t = time_interleaved(
        {
            "rollout": lambda: jax.block_until_ready(rc(state)),
            "grad": lambda: jax.block_until_ready(gc(state.q, state)),
        },
        args.repeats,
        args.min_time,
    )
    g = np.asarray(gc(state.q, state))
    v = np.random.default_rng(args.seed).normal(size=g.shape)
    fd = central_difference(lambda q0: np.sum(np.asarray(rc(state.with_q(q0))) ** 2), np.asarray(state.q), v)
    return {
        "rk4_rollout_ms": 1e3 * t["rollout"],
        "rk4_grad_ms": 1e3 * t["grad"],
        "grad_over_rollout": t["grad"] / t["rollout"],
        "grad_dir_deriv_rel_diff": abs(float(g @ v) - fd) / max(abs(fd), 1e-12),
    }


def central_difference(loss, x: np.ndarray, v: np.ndarray, h: float = 4e-6) -> float:
    """The directional derivative a gradient's ``g . v`` is checked against: central
    differences ``D(h) = (loss(x + h v) - loss(x - h v)) / 2h`` at ``h`` and ``h / 2``,
    Richardson-extrapolated, ``(4 D(h/2) - D(h)) / 3`` (truncation error O(h^4)). A 1 s
    rollout of the welded humanoid curves enough that ``D(1e-6)`` alone is 1.5e-6 off its
    gradient and ``D(1e-5)`` 1.5e-4; extrapolated, 1e-10 to 1e-8 (the four-bar's 5e-9 is
    round-off)."""
    d = lambda h: (loss(x + h * v) - loss(x - h * v)) / (2 * h)
    return float((4 * d(h / 2) - d(h)) / 3)


def rollout_table(rows: list[dict]) -> str:
    lines = [
        "| model | nu | simjax µs/step | Pinocchio µs/step | simjax/Pinocchio time "
        "| one call synced µs | one call pipelined µs | `system.realize` synced µs "
        "| Pinocchio `aba` call µs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pin_t = r.get("pinocchio_us_per_step")
        ratio = r.get("simjax_over_pinocchio")
        pin_call = r.get("pinocchio_call_us")
        lines.append(
            f"| {r['model']} | {r['nu']} | {r['simjax_us_per_step']:.2f} | "
            f"{'–' if pin_t is None else f'{pin_t:.2f}'} | {'–' if ratio is None else f'{ratio:.2f}x'} | "
            f"{r['call_synced_us']:.1f} | {r['call_pipelined_us']:.1f} | {r['realize_eager_us']:.1f} | "
            f"{'–' if pin_call is None else f'{pin_call:.1f}'} |"
        )
    return "\n".join(lines)


def rollout_grad_table(rows: list[dict]) -> str:
    lines = [
        "| model | nu | rollout ms | grad ms | grad / rollout | dir. deriv. vs central diff. |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['nu']} | {r['rk4_rollout_ms']:.1f} | {r['rk4_grad_ms']:.1f} | "
            f"{r['grad_over_rollout']:.2f}x | {r['grad_dir_deriv_rel_diff']:.1e} |"
        )
    return "\n".join(lines)


def compile_scan(args) -> list[dict]:
    import jax
    import oracle_models as om

    rng = np.random.default_rng(args.seed)
    out = []
    for n in args.depths:
        spec = om.pin_chain(n, seed=n)
        system, _, _ = om.to_simjax(spec)
        s0 = system.realize_topology()
        st = [om.random_state(spec, rng) for _ in range(args.scan_batch)]
        batch = batch_states(s0, np.stack([s[1] for s in st]), np.stack([s[2] for s in st]))
        jax.block_until_ready(batch)
        compiled, t_lower, t_compile = compile_simjax(system, batch, args.compile_repeats)
        t_run = time_call(lambda: jax.block_until_ready(compiled(batch)), args.repeats, args.min_time)
        out.append(
            {
                "links": n,
                "batch": args.scan_batch,
                "simjax_lower_s": t_lower,
                "simjax_compile_s": t_compile,
                "simjax_total_s": t_lower + t_compile,
                "simjax_us_per_state": 1e6 * t_run / args.scan_batch,
            }
        )
        print(f"  done chain{n}", file=sys.stderr, flush=True)
    return out


# ----------------------------------------------------------------------------- report


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"


PEER_LABELS = {
    "pinocchio": "pin",
    "pinocchio_cpp": "pin C++",
    "mujoco": "mujoco",
    "mujoco_c": "mujoco C",
    "mjx": "mjx",
}


def throughput_table(rows: list[dict]) -> str:
    peers = [p for p in PEER_LABELS if any(f"{p}_us_per_state" in r for r in rows)] or ["pinocchio", "mujoco"]
    head = "| model | nu | B | simjax µs/state | simjax states/s |"
    for p in peers:
        head += f" {PEER_LABELS[p]} µs/state | {PEER_LABELS[p]} states/s |"
    head += "".join(f" simjax/{PEER_LABELS[p]} |" for p in peers) + " max rel err vs pin |"
    if "mujoco_c" in peers:
        head += " mujoco C vs simjax |"
    if "mjx" in peers:
        head += " mjx vs simjax |"
    on_cpu = not any("max_rel_err_vs_cpu" in r for r in rows)
    if not on_cpu:
        head += " vs simjax on CPU |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [
            r["model"],
            str(r["nu"]),
            str(r["batch"]),
            f"{r['simjax_us_per_state']:.2f}",
            fmt_rate(r["simjax_states_per_s"]),
        ]
        for peer in peers:
            if f"{peer}_us_per_state" in r:
                cells += [f"{r[f'{peer}_us_per_state']:.2f}", fmt_rate(r[f"{peer}_states_per_s"])]
            else:
                cells += ["–", "–"]
        for peer in peers:
            key = f"ratio_vs_{peer}"
            cells.append(f"{r[key]:.2f}x" if key in r else "–")
        keys = ["max_rel_err_vs_pinocchio"]
        keys += ["max_rel_err_mujoco_c_vs_simjax"] if "mujoco_c" in peers else []
        keys += ["max_rel_err_mjx_vs_simjax"] if "mjx" in peers else []
        for key in keys + ([] if on_cpu else ["max_rel_err_vs_cpu"]):
            err = r.get(key)
            cells.append(f"{err:.1e}" if err is not None else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compile_table(rows: list[dict]) -> str:
    scan = "links" in rows[0]
    mjx = any("mjx_compile_s" in r for r in rows)
    lines = [
        "| model | B | trace+lower s | XLA compile s | total s |"
        + (" run µs/state |" if scan else "")
        + (" MJX trace+lower s | MJX XLA compile s |" if mjx else ""),
        "|---|---|---|---|---|" + ("---|" if scan else "") + ("---|---|" if mjx else ""),
    ]
    for r in rows:
        name = r.get("model", f"chain{r.get('links')}")
        t = r["simjax_lower_s"] + r["simjax_compile_s"]
        line = (
            f"| {name} | {r['batch']} | {r['simjax_lower_s']:.2f} | {r['simjax_compile_s']:.2f} | {t:.2f} |"
        )
        if scan:
            line += f" {r['simjax_us_per_state']:.2f} |"
        if mjx:
            nan = float("nan")
            line += f" {r.get('mjx_lower_s', nan):.2f} | {r.get('mjx_compile_s', nan):.2f} |"
        lines.append(line)
    return "\n".join(lines)


def chunk_table(rows: list[dict]) -> str:
    cpp = any("shared_ratio_vs_pinocchio_cpp" in r for r in rows)
    head = (
        "| model | B | jax.vmap µs/state | sj.vmap (chunks) µs/state | chunk | chunked/vmap throughput "
        "| chunked vs Pinocchio | sj.vmap, model shared, µs/state | shared vs Pinocchio |"
    )
    if cpp:
        head += " chunked vs Pinocchio C++ | shared vs Pinocchio C++ |"
    mjc = any("shared_ratio_vs_mujoco_c" in r for r in rows)
    if mjc:
        head += " chunked vs MuJoCo C | shared vs MuJoCo C |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    x = ratio_cell
    for r in rows:
        if "chunked_us_per_state" in r:
            shared = f"{r['shared_us_per_state']:.2f}" if "shared_us_per_state" in r else "–"
            line = (
                f"| {r['model']} | {r['batch']} | {r['simjax_us_per_state']:.2f} "
                f"| {r['chunked_us_per_state']:.2f} | {r['chunk']} "
                f"| {r['simjax_us_per_state'] / r['chunked_us_per_state']:.2f}x "
                f"| {x(r, 'chunked_ratio_vs_pinocchio')} | {shared} | {x(r, 'shared_ratio_vs_pinocchio')} |"
            )
            if cpp:
                line += (
                    f" {x(r, 'chunked_ratio_vs_pinocchio_cpp')} | {x(r, 'shared_ratio_vs_pinocchio_cpp')} |"
                )
            if mjc:
                line += f" {x(r, 'chunked_ratio_vs_mujoco_c')} | {x(r, 'shared_ratio_vs_mujoco_c')} |"
            lines.append(line)
    return "\n".join(lines)


def info_block(info: dict) -> str:
    load = info.get("loadavg_at_start")
    return "\n".join(
        [
            f"- date: {info['date']}",
            f"- CPU: {info['cpu']} ({info['cores']} cores visible); JAX devices: {info['jax_devices']}; "
            f"simjax runs on {info.get('device', '?')} ({info.get('device_kind', '?')})",
            f"- load average at start: {', '.join(f'{x:.2f}' for x in load) if load else 'n/a'}",
            f"- Python {info['python']}, jax {info['jax']}, jaxlib {info['jaxlib']}, "
            f"simjax {info['simjax']}, pinocchio {info['pinocchio']}, mujoco {info['mujoco']}, "
            f"mujoco-mjx {info.get('mujoco_mjx')}",
            f"- simjax dtype: {info['dtype']} (Pinocchio and MuJoCo: float64)",
            *([f"- Pinocchio C++ loop: {info['pinocchio_cpp']}"] if info.get("pinocchio_cpp") else []),
            f"- XLA_FLAGS: {info['XLA_FLAGS'] or '(unset)'}",
            f"- command: python benchmarks/{info.get('script', 'bench_forward.py')} {' '.join(info['argv'])}",
        ]
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    import jax

    if args.sync_dispatch:  # before the CPU client exists: it reads the setting once
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    select_device(args.device)  # starts the backend
    jax.config.update("jax_enable_x64", not args.float32)
    dtype = "float32" if args.float32 else "float64"
    info = machine_info(dtype)
    info["cpu_async_dispatch"] = not args.sync_dispatch
    info["argv"] = sys.argv[1:] if argv is None else list(argv)
    if getattr(args, "pinocchio_cpp", False):
        info["pinocchio_cpp"] = pinocchio_cpp_info()
    print(info_block(info), flush=True)
    warm_up()
    result: dict = {"info": info}
    if args.rollout is not None:
        rng = np.random.default_rng(args.seed)
        rows = [bench_rollout(key, args, rng) for key in args.models]
        result["rollout"] = rows
        print(f"\nOne state stepped {args.rollout} times (B = 1, semi-explicit Euler, per step):\n")
        print(rollout_table(rows))
        if args.rollout_grad:
            what = f"sj.simulate (RK4, {args.rollout} steps)"
            print(f"\njax.grad of sum(q(t1)^2) w.r.t. the start through {what}, vs the rollout:\n")
            print(rollout_grad_table(rows))
    elif args.batched_rollout is not None:
        rng = np.random.default_rng(args.seed)
        rows = [bench_batched_rollout(key, args, rng) for key in args.models]
        result["batched_rollout"] = rows
        steps = rows[0]["steps"] if rows else 0
        print(f"\nB = {args.batches[0]} rollouts of {steps} RK4 steps (dt 1e-3, no torques), ms per batch:\n")
        print(batched_rollout_table(rows))
    elif args.compile_scan:
        rows = compile_scan(args)
        result["compile_scan"] = rows
        print(f"\nsimjax compile time vs chain depth (batch {args.scan_batch}, cold caches):\n")
        print(compile_table(rows))
    else:
        rng = np.random.default_rng(args.seed)
        rows = []
        for key in args.models:
            rows += bench_model(key, args.batches, args, rng)
            if args.json is not None:  # what is done so far survives a time limit
                args.json.write_text(json.dumps({**result, "throughput": rows}, indent=2))
        result["throughput"] = rows
        print("\nForward dynamics throughput (ratios: simjax states/s over the peer's):\n")
        print(throughput_table(rows))
        print("\nsimjax compile time of jit(vmap(realize)) (cold caches):\n")
        print(compile_table(rows))
        if any("chunked_us_per_state" in r for r in rows):
            print("\nsimjax: one jax.vmap over the whole batch vs sj.vmap over chunks:\n")
            print(chunk_table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
