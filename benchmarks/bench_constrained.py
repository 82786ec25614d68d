"""Constrained dynamics and rollouts: simjax vs Simbody (through OpenSim) and MuJoCo.

Two closed-loop models, each built from one ``tests/oracle_models.py`` spec in all three
engines, so every implementation evaluates the same states:

* ``fourbar``: three Pin links (crank on Ground, coupler, rocker), the rocker's tip closed
  to Ground by a Ball (the four-bar of ``tests/test_constraints_oracle.py``; OpenSim
  ``PointConstraint``, MuJoCo ``connect`` between two sites). nu = 3, 3 constraint rows
  (one redundant: the loop is planar), 1 dof.
* ``humanoid``: the free-pelvis humanoid (nu = 26), both feet welded to Ground where they
  are at the default configuration (simjax ``Constraint.Weld``, OpenSim
  ``WeldConstraint``, MuJoCo ``weld`` between two sites). 12 constraint rows.

Three parts, each from cold JAX caches with compile time (trace + lower, XLA compile)
reported apart from run time:

* ``forward``: ``jit(vmap(realize(., Stage.ACCELERATION) -> (udot, multipliers)))`` over a
  batch of B states, vs OpenSim ``model.realizeAcceleration(state)`` and MuJoCo
  ``mj_forward`` in a Python loop. simjax's ``udot`` and multipliers are checked against
  Simbody's; MuJoCo's constraints are soft, so its ``udot`` differs (reported).
* ``rollout``: ``jit(vmap(lambda s: simulate(system, s, 1.0, integrator="rk4", dt=1e-3,
  t0=0.0)))`` (coordinate projection after every step) over B initial states (random
  perturbations projected with ``system.project``), vs OpenSim's ``Manager`` (Runge-Kutta-
  Merson with a fixed 1e-3 step, and with its default error control) and MuJoCo's
  ``mj_step`` loop (dt 1e-3, RK4 and Euler integrators), one rollout at a time.
* ``grad``: ``jit(vmap(grad(q0 -> sum(q(t=1)**2))))`` through the rollout, against the
  rollout itself at the same batch; checked against a central difference.

Timing: the median over repeats, implementations in turn within each repeat (round robin).
Rollouts and gradients at B > 1 are long, so those are timed ``--big-repeats`` times
(default 1) with no warm-up call (the executable is compiled ahead of time, so the first
call compiles nothing).

Examples::

    python benchmarks/bench_constrained.py --json out.json
    python benchmarks/bench_constrained.py --models fourbar --parts rollout --rollout-batches 1 1024
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_forward as bf

PARTS = ("forward", "rollout", "grad")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["fourbar", "humanoid"], choices=["fourbar", "humanoid"])
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    p.add_argument("--fd-batches", type=int, nargs="+", default=[1, 1024], help="forward-dynamics batches")
    p.add_argument("--rollout-batches", type=int, nargs="+", default=[1, 256], help="four-bar rollouts")
    p.add_argument("--humanoid-rollout-batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--grad-batches", type=int, nargs="+", default=[1])
    p.add_argument("--repeats", type=int, default=5, help="forward-dynamics repeats (median)")
    p.add_argument("--min-time", type=float, default=0.05, help="forward: seconds per repeat, at least")
    p.add_argument("--rollout-repeats", type=int, default=3, help="repeats of B = 1 rollouts/gradients")
    p.add_argument("--big-repeats", type=int, default=1, help="repeats of B > 1 rollouts/gradients")
    p.add_argument("--peer-rollouts", type=int, default=2, help="peer rollouts (states) per repeat")
    p.add_argument("--t1", type=float, default=1.0)
    p.add_argument("--dt", type=float, default=1e-3)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="where JAX runs simjax")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- models


@dataclass
class Case:
    name: str
    spec: object  # oracle_models.ModelSpec
    system: object
    s0: object  # default State (Topology)
    q_ref: np.ndarray  # an assembled configuration (simjax layout)
    u_ref: np.ndarray
    add_osim: object  # callback(model, bodies, joints) adding the constraints in OpenSim
    mj_sites: list  # (site name, body index or -1, R, p in that body's B frame)
    mj_equality: str
    mp: int


def _x_mb(b):
    """Pose of body frame B in MuJoCo's body frame (the mobilizer's M frame)."""
    import oracle_models as om

    return om._inv((b.R_BM, b.p_BM))


def fourbar_case() -> Case:
    import oracle_models as om

    import simjax as sj

    spec, tip, gp = om.fourbar_spec()
    system, matter, bodies = om.to_simjax(spec)
    sj.Constraint.Ball(matter.Ground(), gp, bodies[2], tip)
    q, u = om.fourbar_assemble(0.9, 1.3)

    def add(model, obodies, joints):
        import opensim as osim

        _set_defaults(spec, joints, q)
        c = osim.PointConstraint(model.getGround(), osim.Vec3(*gp), obodies[2], osim.Vec3(*tip))
        c.setName("tip")
        model.addConstraint(c)

    sites = [("g_tip", -1, np.eye(3), gp), ("tip", 2, np.eye(3), tip)]
    return Case(
        "fourbar",
        spec,
        system,
        system.realize_topology(),
        q,
        u,
        add,
        sites,
        '<connect site1="g_tip" site2="tip"/>',
        3,
    )


def humanoid_case() -> Case:
    import oracle_models as om

    import simjax as sj

    spec = om.humanoid()
    system, matter, bodies = om.to_simjax(spec)
    s = system.realize(system.realize_topology(), sj.Stage.POSITION)
    q = np.asarray(s.q)
    feet = [i for i, b in enumerate(spec.bodies) if b.name.startswith("foot_")]
    X = {}
    for i in feet:
        Xf = bodies[i].get_body_transform(s)
        X[i] = (np.asarray(Xf.R), np.asarray(Xf.p))
        sj.Constraint.Weld(matter.Ground(), sj.Transform(*X[i]), bodies[i], sj.Transform())

    def add(model, obodies, joints):
        import opensim as osim

        _set_defaults(spec, joints, q)
        for i in feet:
            R, p = X[i]
            zero = osim.Vec3(0, 0, 0)
            c = osim.WeldConstraint(
                f"weld_{spec.bodies[i].name}",
                model.getGround(),
                osim.Vec3(*p),
                osim.Vec3(*om.xyz_from_rot(R)),
                obodies[i],
                zero,
                zero,
            )
            model.addConstraint(c)

    sites, eq = [], []
    for i in feet:
        n = spec.bodies[i].name
        sites += [(f"g_{n}", -1, *X[i]), (f"s_{n}", i, np.eye(3), np.zeros(3))]
        eq.append(f'<weld site1="g_{n}" site2="s_{n}"/>')
    return Case(
        "humanoid", spec, system, system.realize_topology(), q, np.zeros(spec.nu), add, sites, "".join(eq), 12
    )


def _set_defaults(spec, joints, q):
    """OpenSim coordinate defaults at an assembled q, so initSystem() has nothing to assemble."""
    import oracle_models as om

    for J, (_, _, coords) in zip(joints, om.joint_poses(spec, q, euler=False)):
        for k, v in enumerate(coords):
            J.upd_coordinates(k).setDefaultValue(float(v))


# ----------------------------------------------------------------------------- peers


@dataclass
class MjModel:
    model: object
    data: object
    map: object  # oracle_models.PeerMap


def build_mujoco(case: Case) -> MjModel:
    """``oracle_models.to_mujoco_xml`` with constraints enabled, the sites and the equality."""
    import mujoco
    import oracle_models as om

    xml = om.to_mujoco_xml(case.spec).replace(' constraint="disable"', "")
    site = lambda name, R, p: (
        f'<site name="{name}" pos="{om._fmt(p)}" quat="{om._fmt(om.quat_from_rot(R))}"/>'
    )
    out = []
    for line in xml.split("\n"):
        out.append(line)
        for name, body, R, p in case.mj_sites:
            if body < 0 and line.strip() == "<worldbody>":
                out.append("    " + site(name, R, p))
            elif body >= 0 and line.strip().startswith(f'<body name="{case.spec.bodies[body].name}" '):
                R_MB, p_MB = _x_mb(case.spec.bodies[body])  # the site in MuJoCo's body frame (M)
                out.append("      " + site(name, R_MB @ R, p_MB + R_MB @ p))
    out.insert(len(out) - 1, f"  <equality>{case.mj_equality}</equality>")
    m = mujoco.MjModel.from_xml_string("\n".join(out))
    return MjModel(m, mujoco.MjData(m), om.to_mujoco(case.spec).map)


def build_peers(case: Case, no_peers: bool) -> dict:
    import oracle_models as om

    peers: dict = {}
    if no_peers:
        return peers
    try:
        import opensim as osim

        osim.Logger.setLevelString("Warn")
        peers["opensim"] = om.to_opensim(case.spec, add_forces=case.add_osim)
    except ImportError:
        print("  (opensim not installed: skipped)", file=sys.stderr)
    try:
        peers["mujoco"] = build_mujoco(case)
    except ImportError:
        print("  (mujoco not installed: skipped)", file=sys.stderr)
    return peers


def osim_vectors(osm, spec, q, u):
    """OpenSim ``(Q, U)`` Vectors of a simjax ``(q, u)``."""
    import opensim as osim
    import oracle_models as om

    Q, U = np.zeros(osm.nQ), np.zeros(osm.nU)
    for slots, (_, _, coords) in zip(osm.q_slots, om.joint_poses(spec, q, euler=False)):
        Q[slots] = coords
    for slots, sl in zip(osm.u_slots, spec.u_blocks()):
        U[slots] = u[sl]
    return osim.Vector.createFromMat(Q), osim.Vector.createFromMat(U)


def pin_slots(spec, peer: str, pm):
    """Per Pin body: (simjax q index, peer q index), to compare rollouts' final angles."""
    qb = spec.q_blocks()
    out = []
    for i, b in enumerate(spec.bodies):
        if b.joint == "pin":
            out.append((qb[i].start, pm.q_slots[i][0] if peer == "opensim" else pm.map.q_adr[i]))
    return np.array(out)


def rms(x) -> float:
    x = np.asarray(x, float)
    return float(np.sqrt(np.mean(x * x))) if x.size else 0.0


def rel_err(a, ref) -> float:
    """``max |a - ref| / max(1, max |ref|)``."""
    ref = np.asarray(ref, float)
    return float(np.max(np.abs(np.asarray(a) - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def mj_equality_rms(mm: MjModel) -> float:
    import mujoco

    d = mm.data
    rows = d.efc_type[: d.nefc] == mujoco.mjtConstraint.mjCNSTR_EQUALITY
    return rms(d.efc_pos[: d.nefc][rows])


# ----------------------------------------------------------------------------- simjax


def project_states(case: Case, Q, U):
    """``system.project`` of each ``(q, u)`` (vmapped); returns projected (Q, U) and the
    largest RMS position / velocity error left."""
    import jax

    import simjax as sj

    system, s0 = case.system, case.s0

    def one(q, u):
        s = system.project(s0.with_q(q).with_u(u), iterations=20)
        s = system.realize(s, sj.Stage.VELOCITY)
        pe, ve = system.calc_constraint_error_norms(s)
        return s.q, s.u, pe, ve

    q, u, pe, ve = jax.jit(jax.vmap(one))(Q, U)
    return np.asarray(q), np.asarray(u), float(np.max(pe)), float(np.max(ve))


def random_states(case: Case, B: int, rng, q_scale: float, u_scale: float):
    """B random assembled states near the reference one: ``q_ref`` plus uniform noise (only
    on the Pin angles, and 1/10 of it on the free pelvis), ``u`` normal, then projected."""
    spec = case.spec
    qs = np.zeros(spec.nq())
    for b, sl in zip(spec.bodies, spec.q_blocks()):
        qs[sl] = q_scale if b.joint == "pin" else 0.1 * q_scale
    Q = case.q_ref + rng.uniform(-1, 1, (B, spec.nq())) * qs
    U = case.u_ref + rng.normal(0, u_scale, (B, spec.nu))
    Q, U, pe, ve = project_states(case, Q, U)
    if pe > 1e-9 or ve > 1e-9:
        raise RuntimeError(f"{case.name}: projection left errors {pe:.1e} / {ve:.1e}")
    return Q, U


def aot(fn, *args) -> tuple[object, float, float]:
    """``(compiled, trace+lower s, XLA compile s)`` of ``jax.jit(fn)`` from cold caches."""
    import jax

    jax.clear_caches()
    f = jax.jit(fn)
    t0 = time.perf_counter()
    lowered = f.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    return compiled, t1 - t0, time.perf_counter() - t1


def time_rounds(fns: dict, repeats: int, warm: bool) -> dict:
    """Median seconds per call, one call of each function per repeat (round robin)."""
    if warm:
        for f in fns.values():
            f()
    samples: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


# ----------------------------------------------------------------------------- forward


def bench_forward(case: Case, peers: dict, args, rng) -> list[dict]:
    import jax
    import mujoco

    import simjax as sj

    system, spec = case.system, case.spec
    Bmax = max(args.fd_batches)
    # (project's Gauss-Newton steps don't always converge from humanoid perturbations > ~0.3 rad)
    Q, U = random_states(case, Bmax, rng, q_scale=0.6 if case.name == "fourbar" else 0.2, u_scale=1.0)

    def one(s):
        s = system.realize(s, sj.Stage.ACCELERATION)
        return s.udot, s.multipliers

    # Simbody's udot and multipliers at up to 8 states (accuracy check)
    ref = []
    if "opensim" in peers:
        osm = peers["opensim"]
        for i in range(min(Bmax, 8)):
            s = osm.set_state(spec, Q[i], U[i], euler=False)
            osm.model.realizeAcceleration(s)
            ref.append((s.getUDot().to_numpy()[osm.u_perm], s.getMultipliers().to_numpy()))
    rows = []
    for B in args.fd_batches:
        batch = bf.batch_states(case.s0, Q[:B], U[:B])
        jax.block_until_ready(batch)
        compiled, t_lower, t_compile = aot(jax.vmap(one), batch)
        udot, lam = (np.asarray(x) for x in jax.block_until_ready(compiled(batch)))
        fns = {"simjax": lambda c=compiled, b=batch: jax.block_until_ready(c(b))}
        if "opensim" in peers:
            osm = peers["opensim"]
            vecs = [osim_vectors(osm, spec, Q[i], U[i]) for i in range(B)]

            def run_osim(osm=osm, vecs=vecs):
                s, model = osm.state, osm.model
                for Qv, Uv in vecs:
                    s.setQ(Qv)
                    s.setU(Uv)
                    model.realizeAcceleration(s)

            fns["opensim"] = run_osim
        if "mujoco" in peers:
            mm = peers["mujoco"]
            mj_qv = [mm.map.qv(spec, Q[i], U[i]) for i in range(B)]

            def run_mj(m=mm.model, d=mm.data, qv=tuple((a, b) for a, b, _, _ in mj_qv)):
                for qp, vp in qv:
                    d.qpos[:] = qp
                    d.qvel[:] = vp
                    mujoco.mj_forward(m, d)

            fns["mujoco"] = run_mj
        t = bf.time_interleaved(fns, args.repeats, args.min_time)
        row = {
            "model": case.name,
            "nu": spec.nu,
            "m": case.mp,
            "batch": B,
            "simjax_lower_s": t_lower,
            "simjax_compile_s": t_compile,
        }
        for name, sec in t.items():
            row[f"{name}_us_per_state"] = 1e6 * sec / B
            if name != "simjax":
                row[f"ratio_vs_{name}"] = sec / t["simjax"]
        if ref:
            n = min(B, len(ref))
            row["udot_rel_err_vs_simbody"] = max(rel_err(udot[i], ref[i][0]) for i in range(n))
            row["lambda_rel_err_vs_simbody"] = max(rel_err(lam[i], ref[i][1]) for i in range(n))
            if "mujoco" in peers:
                mm = peers["mujoco"]
                err = 0.0
                for i in range(n):
                    qp, vp, T, c = mm.map.qv(spec, Q[i], U[i])
                    mm.data.qpos[:] = qp
                    mm.data.qvel[:] = vp
                    mujoco.mj_forward(mm.model, mm.data)
                    a = mm.map.udot_to_simjax(mm.data.qacc.copy(), T, c)
                    err = max(err, rel_err(a, ref[i][0]))
                row["mujoco_udot_rel_diff_vs_simbody"] = err
        rows.append(row)
        print(f"  done forward {case.name} B={B}", file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------------- rollouts


def rollout_fn(case: Case, args):
    import simjax as sj

    def roll(s):
        tr = sj.simulate(case.system, s, args.t1, integrator="rk4", dt=args.dt, t0=0.0)
        return tr.final_state.q, tr.max_position_error

    return roll


def peer_rollouts(case: Case, peers: dict, Q, U, args) -> tuple[dict, dict]:
    """Functions doing ``args.peer_rollouts`` rollouts each, and a check of their results:
    final Pin angles vs OpenSim fixed-step RKM, constraint RMS error at the end."""
    import mujoco
    import opensim as osim

    spec, n = case.spec, args.peer_rollouts
    nsteps = int(round(args.t1 / args.dt))
    fns, finals = {}, {}
    if "opensim" in peers:
        osm = peers["opensim"]
        vecs = [osim_vectors(osm, spec, Q[i], U[i]) for i in range(n)]

        def run_osim(fixed: bool, keep=None):
            for Qv, Uv in vecs:
                s = osm.state
                s.setTime(0.0)
                s.setQ(Qv)
                s.setU(Uv)
                man = osim.Manager(osm.model)
                man.setIntegratorMethod(osim.Manager.IntegratorMethod_RungeKuttaMerson)
                if fixed:
                    man.setIntegratorFixedStepSize(args.dt)
                man.setWriteToStorage(False)
                man.setRecordStatesTrajectory(False)
                man.initialize(s)
                sf = man.integrate(args.t1)
                if keep is not None:
                    osm.model.realizePosition(sf)
                    keep.append((sf.getQ().to_numpy().copy(), rms(sf.getQErr().to_numpy())))

        fns["opensim_rkm_fixed"] = lambda: run_osim(True)
        fns["opensim_default"] = lambda: run_osim(False)
        for key, fixed in (("opensim_rkm_fixed", True), ("opensim_default", False)):
            finals[key] = []
            run_osim(fixed, finals[key])
    if "mujoco" in peers:
        mm = peers["mujoco"]
        qv = [mm.map.qv(spec, Q[i], U[i])[:2] for i in range(n)]

        def run_mj(integrator, keep=None):
            m, d = mm.model, mm.data
            m.opt.integrator = integrator
            m.opt.timestep = args.dt
            for qp, vp in qv:
                mujoco.mj_resetData(m, d)
                d.qpos[:] = qp
                d.qvel[:] = vp
                for _ in range(nsteps):
                    mujoco.mj_step(m, d)
                if keep is not None:
                    mujoco.mj_forward(m, d)
                    keep.append((d.qpos.copy(), mj_equality_rms(mm)))

        integrators = mujoco.mjtIntegrator
        for key, integ in (("mujoco_rk4", integrators.mjINT_RK4), ("mujoco_euler", integrators.mjINT_EULER)):
            fns[key] = lambda integ=integ: run_mj(integ)
            finals[key] = []
            run_mj(integ, finals[key])
    return fns, finals


def bench_rollout(case: Case, peers: dict, batches: list[int], args, rng, store: dict) -> list[dict]:
    import jax

    spec = case.spec
    Bmax = max(batches)
    Q, U = random_states(case, max(Bmax, args.peer_rollouts), rng, q_scale=0.1, u_scale=0.5)
    roll = rollout_fn(case, args)
    pfns, finals = peer_rollouts(case, peers, Q, U, args) if peers else ({}, {})
    rows = []
    for B in batches:
        batch = bf.batch_states(case.s0, Q[:B], U[:B])
        jax.block_until_ready(batch)
        compiled, t_lower, t_compile = aot(jax.vmap(roll), batch)
        store[(case.name, B)] = (compiled, batch, t_lower, t_compile)
        fns = {"simjax": lambda c=compiled, b=batch: jax.block_until_ready(c(b))}
        fns.update(pfns)
        big = B > 1  # no warm-up call: compiled ahead of time (the peers ran above)
        t = time_rounds(fns, args.big_repeats if big else args.rollout_repeats, warm=not big)
        qf, err = (np.asarray(x) for x in compiled(batch))
        row = {
            "model": case.name,
            "nu": spec.nu,
            "batch": B,
            "simjax_lower_s": t_lower,
            "simjax_compile_s": t_compile,
            "simjax_ms_per_rollout": 1e3 * t["simjax"] / B,
            "simjax_max_position_error": float(np.max(err)),
            "repeats": args.big_repeats if big else args.rollout_repeats,
        }
        for k in pfns:
            row[f"{k}_ms_per_rollout"] = 1e3 * t[k] / args.peer_rollouts
            row[f"ratio_vs_{k}"] = (t[k] / args.peer_rollouts) / (t["simjax"] / B)
        if "opensim_rkm_fixed" in finals:
            ref = finals["opensim_rkm_fixed"]
            n = min(B, len(ref))
            sl = pin_slots(spec, "opensim", peers["opensim"])
            row["simjax_pin_q_diff_vs_simbody_fixed"] = max(
                float(np.max(np.abs(qf[i][sl[:, 0]] - ref[i][0][sl[:, 1]]))) for i in range(n)
            )
            for k, res in finals.items():
                row[f"{k}_final_constraint_rms"] = max(e for _, e in res)
                if k == "opensim_default":
                    row["opensim_default_pin_q_diff_vs_simbody_fixed"] = max(
                        float(np.max(np.abs(res[i][0][sl[:, 1]] - ref[i][0][sl[:, 1]]))) for i in range(n)
                    )
                if k.startswith("mujoco"):
                    ms = pin_slots(spec, "mujoco", peers["mujoco"])
                    row[f"{k}_pin_q_diff_vs_simbody_fixed"] = max(
                        float(np.max(np.abs(res[i][0][ms[:, 1]] - ref[i][0][sl[:, 1]]))) for i in range(n)
                    )
        rows.append(row)
        print(f"  done rollout {case.name} B={B}", file=sys.stderr, flush=True)
    store[(case.name, "states")] = (Q, U)
    return rows


# ----------------------------------------------------------------------------- gradients


def bench_grad(case: Case, batches: list[int], args, rng, store: dict) -> list[dict]:
    import jax
    import jax.numpy as jnp

    roll = rollout_fn(case, args)

    def loss(q0, s):
        return jnp.sum(roll(s.with_q(q0))[0] ** 2)

    grad_one = jax.grad(loss)
    if (case.name, "states") in store:
        Q, U = store[(case.name, "states")]
    else:
        Q, U = random_states(case, max(batches), rng, q_scale=0.1, u_scale=0.5)
    rows = []
    for B in batches:
        batch = bf.batch_states(case.s0, Q[:B], U[:B])
        jax.block_until_ready(batch)
        if (case.name, B) in store:
            rcomp, _, r_lower, r_compile = store[(case.name, B)]
        else:
            rcomp, r_lower, r_compile = aot(jax.vmap(roll), batch)
        gcomp, g_lower, g_compile = aot(jax.vmap(grad_one), batch.q, batch)
        big = B > 1
        t = time_rounds(
            {
                "rollout": lambda: jax.block_until_ready(rcomp(batch)),
                "grad": lambda: jax.block_until_ready(gcomp(batch.q, batch)),
            },
            args.big_repeats if big else args.rollout_repeats,
            warm=not big,
        )
        # check: directional derivative of state 0 against a central difference
        g = np.asarray(gcomp(batch.q, batch))[0]
        v = rng.normal(0, 1, g.shape)

        def loss0(q0):
            Qh = Q[:B].copy()
            Qh[0] = q0
            return np.sum(np.asarray(rcomp(bf.batch_states(case.s0, Qh, U[:B]))[0])[0] ** 2)

        fd = bf.central_difference(loss0, Q[0], v)
        rows.append(
            {
                "model": case.name,
                "batch": B,
                "rollout_lower_s": r_lower,
                "rollout_compile_s": r_compile,
                "grad_lower_s": g_lower,
                "grad_compile_s": g_compile,
                "rollout_s": t["rollout"],
                "grad_s": t["grad"],
                "grad_over_rollout": t["grad"] / t["rollout"],
                "grad_compile_over_rollout_compile": (g_lower + g_compile) / (r_lower + r_compile),
                "dir_deriv": float(g @ v),
                "dir_deriv_fd": float(fd),
                "dir_deriv_rel_diff": float(abs(g @ v - fd) / max(abs(fd), 1e-12)),
                "repeats": args.big_repeats if big else args.rollout_repeats,
            }
        )
        print(f"  done grad {case.name} B={B}", file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------------- report


def _c(r, k, fmt):
    return format(r[k], fmt) if k in r else "–"


def forward_table(rows) -> str:
    head = (
        "| model | nu | m | B | simjax µs/state | OpenSim µs/state | MuJoCo µs/state | simjax/OpenSim "
        "| simjax/MuJoCo | compile s (lower + XLA) | udot err vs Simbody | λ err vs Simbody "
        "| MuJoCo udot diff vs Simbody |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['nu']} | {r['m']} | {r['batch']} | {r['simjax_us_per_state']:.2f} "
            f"| {_c(r, 'opensim_us_per_state', '.2f')} | {_c(r, 'mujoco_us_per_state', '.2f')} "
            f"| {_c(r, 'ratio_vs_opensim', '.2f')}x | {_c(r, 'ratio_vs_mujoco', '.2f')}x "
            f"| {r['simjax_lower_s']:.1f} + {r['simjax_compile_s']:.1f} "
            f"| {_c(r, 'udot_rel_err_vs_simbody', '.1e')} | {_c(r, 'lambda_rel_err_vs_simbody', '.1e')} "
            f"| {_c(r, 'mujoco_udot_rel_diff_vs_simbody', '.1e')} |"
        )
    return "\n".join(lines)


def rollout_table(rows) -> str:
    peers = ("opensim_rkm_fixed", "opensim_default", "mujoco_rk4", "mujoco_euler")
    head = (
        "| model | B | simjax ms/rollout | OpenSim RKM fixed | OpenSim default | MuJoCo RK4 | MuJoCo Euler "
        "| simjax/OpenSim fixed | simjax/OpenSim default | simjax/MuJoCo RK4 | simjax/MuJoCo Euler "
        "| compile s (lower + XLA) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["model"], str(r["batch"]), f"{r['simjax_ms_per_rollout']:.1f}"]
        cells += [_c(r, f"{p}_ms_per_rollout", ".1f") for p in peers]
        cells += [_c(r, f"ratio_vs_{p}", ".2f") + "x" for p in peers]
        cells.append(f"{r['simjax_lower_s']:.1f} + {r['simjax_compile_s']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rollout_check_table(rows) -> str:
    lines = [
        "| model | simjax | OpenSim default | MuJoCo RK4 | MuJoCo Euler |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if r["batch"] != 1:
            continue
        dq = "pin_q_diff_vs_simbody_fixed"
        cells = [f"{_c(r, f'simjax_{dq}', '.1e')} ({r['simjax_max_position_error']:.0e})"]
        for p in ("opensim_default", "mujoco_rk4", "mujoco_euler"):
            cells.append(f"{_c(r, f'{p}_{dq}', '.1e')} ({_c(r, f'{p}_final_constraint_rms', '.0e')})")
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def grad_table(rows) -> str:
    head = (
        "| model | B | rollout s | grad s | grad/rollout | rollout compile s (lower + XLA) "
        "| grad compile s (lower + XLA) | compile ratio | dir. deriv. vs central diff. |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['rollout_s']:.3f} | {r['grad_s']:.3f} "
            f"| {r['grad_over_rollout']:.2f}x | {r['rollout_lower_s']:.1f} + {r['rollout_compile_s']:.1f} "
            f"| {r['grad_lower_s']:.1f} + {r['grad_compile_s']:.1f} "
            f"| {r['grad_compile_over_rollout_compile']:.1f}x | {r['dir_deriv_rel_diff']:.1e} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    import jax

    bf.select_device(args.device)
    jax.config.update("jax_enable_x64", True)
    t_start = time.perf_counter()
    info = bf.machine_info("float64")
    info.pop("pinocchio", None)
    try:
        import opensim

        info["opensim"] = opensim.__version__
    except ImportError:
        info["opensim"] = None
    info["argv"] = sys.argv[1:] if argv is None else list(argv)
    load = info.get("loadavg_at_start")
    print(
        f"date {info['date']}, CPU {info['cpu']} ({info['cores']} cores), load {load}, jax {info['jax']}, "
        f"simjax {info['simjax']} on {info['device']}, opensim {info['opensim']}, mujoco {info['mujoco']}, "
        "float64, "
        f"XLA_FLAGS={info['XLA_FLAGS'] or '(unset)'}",
        flush=True,
    )
    bf.warm_up()
    rng = np.random.default_rng(args.seed)
    result: dict = {"info": info, "forward": [], "rollout": [], "grad": []}
    store: dict = {}
    for name in args.models:
        case = fourbar_case() if name == "fourbar" else humanoid_case()
        peers = build_peers(case, args.no_peers)
        if "forward" in args.parts:
            result["forward"] += bench_forward(case, peers, args, rng)
        if "rollout" in args.parts:
            batches = args.rollout_batches if name == "fourbar" else args.humanoid_rollout_batches
            result["rollout"] += bench_rollout(case, peers, batches, args, rng, store)
        if "grad" in args.parts:
            result["grad"] += bench_grad(case, args.grad_batches, args, rng, store)
        store.clear()
    result["info"]["total_wall_s"] = time.perf_counter() - t_start
    if result["forward"]:
        print("\nConstrained forward dynamics (ratios: simjax states/s over the peer's):\n")
        print(forward_table(result["forward"]))
    if result["rollout"]:
        print(f"\n{args.t1:g} s rollouts, dt {args.dt:g} (ratios: peer time per rollout over simjax's):\n")
        print(rollout_table(result["rollout"]))
        print(
            "\nFinal Pin angles: max |q - q(OpenSim RKM fixed step)| (rad), and (in brackets) the "
            "constraint RMS error (simjax: largest after any step's projection; peers: at t1):\n"
        )
        print(rollout_check_table(result["rollout"]))
    if result["grad"]:
        print("\njax.grad of sum(q(t1)^2) w.r.t. the initial q, vs the rollout (seconds per batch call):\n")
        print(grad_table(result["grad"]))
    print(f"\ntotal wall time {result['info']['total_wall_s']:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
