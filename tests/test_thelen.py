"""Thelen2003Muscle (``simjax.dynamics.forces.thelen``) against OpenSim 4.6.

The oracle is gait14dof22musc (22 Thelen2003Muscle paths, no wrap objects) with its other
forces removed and its muscles' properties varied so that every branch runs: pennation at
optimal length 0-0.4 rad, other curve shapes (KshapeActive, FmaxMuscleStrain,
FmaxTendonStrain, Af, Flen). States are drawn far from equilibrium: activations in
[-0.05, 1.05] (below the minimum activation and above 1: clamped), fibre lengths 0.3-1.7
optimal and some below the minimum fibre length (clamped; held when shortening), slack and
stretched tendons, shortening and lengthening beyond the force-velocity curve's linear
extrapolation.
"""

from __future__ import annotations

import multiprocessing
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_io_osim import model_path

import simjax as sj
from simjax.dynamics.forces import thelen as th
from simjax.system.muscles import calc_muscle_info

jax.config.update("jax_enable_x64", True)

osim = pytest.importorskip("opensim")

# simjax parameter: OpenSim property
PROPS = dict(
    zip(
        th.PARAMS,
        (
            "max_isometric_force",
            "optimal_fiber_length",
            "tendon_slack_length",
            "pennation_angle_at_optimal",
            "max_contraction_velocity",
            "activation_time_constant",
            "deactivation_time_constant",
            "FmaxTendonStrain",
            "FmaxMuscleStrain",
            "KshapeActive",
            "KshapePassive",
            "Af",
            "Flen",
            "fv_linear_extrap_threshold",
            "maximum_pennation_angle",
            "minimum_activation",
        ),  # fmt: skip
        strict=True,
    )
)

# MuscleInfo field: OpenSim getter
FIELDS = (
    ("fiber_length", "getFiberLength"),
    ("normalized_fiber_length", "getNormalizedFiberLength"),
    ("fiber_length_along_tendon", "getFiberLengthAlongTendon"),
    ("pennation_angle", "getPennationAngle"),
    ("cos_pennation_angle", "getCosPennationAngle"),
    ("tendon_length", "getTendonLength"),
    ("fiber_velocity", "getFiberVelocity"),
    ("normalized_fiber_velocity", "getNormalizedFiberVelocity"),
    ("fiber_velocity_along_tendon", "getFiberVelocityAlongTendon"),
    ("tendon_velocity", "getTendonVelocity"),
    ("tendon_force", "getTendonForce"),
    ("active_fiber_force", "getActiveFiberForce"),
    ("passive_fiber_elastic_force", "getPassiveFiberForce"),
    ("fiber_force", "getFiberForce"),
    ("fiber_force_along_tendon", "getFiberForceAlongTendon"),
    ("active_force_length_multiplier", "getActiveForceLengthMultiplier"),
    ("passive_force_multiplier", "getPassiveForceMultiplier"),
    ("force_velocity_multiplier", "getForceVelocityMultiplier"),
    ("activation", "getActivation"),
)


FIELDS_ALL = (*(f for f, _ in FIELDS), "activation_derivative", "normalized_tendon_force_derivative")


def _varied(i: int, mus) -> None:
    mus.setPennationAngleAtOptimalFiberLength(0.1 * (i % 5))
    mus.set_KshapeActive(0.45 + 0.1 * (i % 3 == 1))
    mus.set_FmaxMuscleStrain(0.6 - 0.1 * (i % 2))
    mus.set_FmaxTendonStrain(0.033 + 0.02 * (i % 3 == 2))
    mus.set_Af(0.25 + 0.05 * (i % 4 == 1))
    mus.set_Flen(1.4 + 0.4 * (i % 4 == 2))
    if i in (1, 6):  # a slack tendon for a fibre at its minimum length: held there
        mus.setTendonSlackLength(1.3 * mus.getTendonSlackLength())


@pytest.fixture(scope="module")
def gait(tmp_path_factory):
    """(OpenSim model, its State, its muscles, its free coordinates, the muscles'
    parameters for the kernel, the simjax model of the same file)."""
    om = osim.Model(model_path("gait14dof22musc"))
    fs = om.updForceSet()
    for i in reversed(range(fs.getSize())):
        if fs.get(i).getConcreteClassName() != "Thelen2003Muscle":
            fs.remove(i)
    for i in range(fs.getSize()):
        _varied(i, osim.Thelen2003Muscle.safeDownCast(fs.get(i)))
    path = tmp_path_factory.mktemp("thelen") / "gait_thelen.osim"
    om.printToXML(str(path))
    om = osim.Model(str(path))
    s = om.initSystem()
    fs = om.getForceSet()
    muscles = [osim.Thelen2003Muscle.safeDownCast(fs.get(i)) for i in range(fs.getSize())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sj.io.load_osim(str(path))
    cs = om.getCoordinateSet()
    coords = [cs.get(i) for i in range(cs.getSize()) if not cs.get(i).getLocked(s)]
    P = {k: jnp.array([float(getattr(m, f"get_{o}")()) for m in muscles]) for k, o in PROPS.items()}
    return om, s, muscles, coords, P, m


def _pose(om, s, coords, rng, speed=1.0):
    for c in coords:
        lo, hi = max(c.getRangeMin(), -1.5), min(c.getRangeMax(), 1.5)
        c.setValue(s, float(rng.uniform(lo, hi)), False)
        c.setSpeedValue(s, float(speed * rng.normal()))
    om.realizeVelocity(s)


def _lengths(s, muscles):
    L = np.array([m.getLength(s) for m in muscles])
    V = np.array([m.getLengtheningSpeed(s) for m in muscles])
    return L, V


def _rel(ours, theirs, floor):
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    return float(np.max(np.abs(ours - theirs) / np.maximum(floor, np.abs(theirs))))


def _opensim_trials(path: str) -> tuple[list, list]:
    """OpenSim's getters at 12 random states of the model file (run in a fresh process):
    the inputs ``(q, u, excitation, activation, fibre length)`` and OpenSim's values."""
    om = osim.Model(path)
    s = om.initSystem()
    fs = om.getForceSet()
    muscles = [osim.Thelen2003Muscle.safeDownCast(fs.get(i)) for i in range(fs.getSize())]
    cs = om.getCoordinateSet()
    coords = [cs.get(i) for i in range(cs.getSize()) if not cs.get(i).getLocked(s)]
    n = len(muscles)
    lo = np.array([mus.getOptimalFiberLength() for mus in muscles])
    rng = np.random.default_rng(0)
    inputs, theirs = [], []
    for trial in range(12):
        _pose(om, s, coords, rng, speed=2.0)
        e = rng.uniform(0.0, 1.0, n)
        cv = om.getControls(s)
        for i in range(n):
            cv.set(i, float(e[i]))
        om.setControls(s, cv)
        a = rng.uniform(-0.05, 1.05, n)
        lce = lo * rng.uniform(0.3, 1.7, n)
        if trial < 3:
            lce[trial::3] = 1e-4  # below the minimum length of the pennate muscles
        for mus, ai, li in zip(muscles, a, lce, strict=True):
            mus.setActivation(s, float(ai))
            mus.setFiberLength(s, float(li))
        om.realizeAcceleration(s)
        q = np.array([c.getValue(s) for c in coords])
        u = np.array([c.getSpeedValue(s) for c in coords])
        inputs.append((q, u, e, a, lce))
        got = {f: [getattr(mus, g)(s) for mus in muscles] for f, g in FIELDS}
        got["activation_derivative"] = [
            mus.getStateVariableDerivativeValue(s, "activation") for mus in muscles
        ]
        got["normalized_tendon_force_derivative"] = [
            mus.getStateVariableDerivativeValue(s, "fiber_length") for mus in muscles
        ]
        got["udot"] = [c.getAccelerationValue(s) for c in coords]
        theirs.append(got)

    return inputs, theirs


@pytest.mark.oracle
def test_thelen_quantities_and_accelerations_equal_opensim(gait):
    """The model loaded by ``sj.io.load_osim`` at 12 random states (q, u, excitation,
    activation, fibre length): every muscle's lengths, pennation, velocities, forces,
    multipliers, clamped activation, activation derivative and fibre-length derivative equal
    OpenSim's getters to 1e-10 relative (measured 1e-12; forces relative to the larger of
    the value and 1e-9 of the max isometric force, and a fibre force, the sum of active and
    passive forces that cancel when the tendon is slack, relative to their magnitudes), and
    the generalized accelerations (gravity and the 22 muscles) to 1e-10 of the largest."""
    om, s, muscles, coords, P, m = gait
    n = len(muscles)
    assert len(m.muscles) == n and not m.ignored
    assert all(isinstance(h, sj.Thelen2003Muscle) for h in m.muscles.values())
    names = [c.getName() for c in coords]
    handles = [m.muscle(mus.getName()) for mus in muscles]
    system = m.system
    su = np.array([m.coordinates[c].u_index(m.default_state) for c in names])
    lo = np.asarray(P["optimal_fiber_length"])
    # OpenSim's side in a fresh process: in a pytest-xdist worker that had run other OpenSim
    # tests, OpenSim 4.6 returned other passive forces and fibre velocities for this file
    # (a process-wide state of OpenSim's; alone, or in a fresh process, they agree to 1e-12)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        inputs, theirs = pool.apply(_opensim_trials, (str(m.path),))
    # the states set by one scatter each (the handles' setters, checked below, trace slowly)
    st0 = m.default_state
    qi = np.array([m.coordinates[c].q_index(st0) for c in names])
    za = np.array([h._z_index(st0, h._z_act) for h in handles])
    zl = np.array([h._z_index(st0, h._z_ten) for h in handles])
    h = handles[3]
    st = h.set_fiber_length(h.set_activation(st0, 0.25), 0.07)
    assert float(st.z[zl[3]]) == 0.07 and float(st.z[za[3]]) == 0.25
    assert float(h.get_activation(h.set_activation(st0, 0.0))) == 0.01  # clamped as OpenSim's
    assert float(h.get_minimum_fiber_length(st0)) == pytest.approx(
        lo[3] * np.sin(0.3) / np.sin(np.arccos(0.1)), rel=1e-14
    )

    def evaluate(q, u, e, a, lce):
        st = st0.with_q(st0.q.at[qi].set(q)).with_u(st0.u.at[su].set(u))
        st = system.set_controls(st.with_z(st0.z.at[za].set(a).at[zl].set(lce)), e)
        st = system.realize(st, sj.Stage.ACCELERATION)
        return calc_muscle_info(handles[0]._subsystem, st), st.udot[su]

    # one State at a time through one compiled program (cheaper to compile than its vmap)
    run = jax.jit(evaluate)
    outs = [run(*(jnp.asarray(x) for x in xs)) for xs in inputs]
    info = type(outs[0][0])(*(np.stack(f) for f in zip(*(o[0] for o in outs), strict=True)))
    udot = np.stack([o[1] for o in outs])
    Fmax = np.asarray(P["max_isometric_force"])
    worst = {}
    for f in FIELDS_ALL:
        t = np.array([got[f] for got in theirs])
        floor = 1e-9 * Fmax if "force" in f and "multiplier" not in f else 1e-9
        if f.startswith("fiber_force"):  # active + passive: rounding of the larger
            floor = np.maximum(
                np.abs(info.active_fiber_force) + np.abs(info.passive_fiber_elastic_force), 1e-9 * Fmax
            )
        worst[f] = _rel(getattr(info, f), t, floor)
    t = np.array([got["udot"] for got in theirs])
    worst["udot"] = float(np.max(np.abs(np.asarray(udot) - t)) / np.max(np.abs(t)))
    print({k: f"{v:.0e}" for k, v in worst.items()})
    held = np.asarray(info.fiber_velocity == 0) & (np.stack([x[4] for x in inputs]) < lo)
    assert held.any()  # the clamp ran
    assert max(worst.values()) < 1e-10, worst


@pytest.mark.oracle
def test_inextensible_tendon_force_and_equilibrium_equal_opensim(gait):
    """At 6 random poses (half at rest, half moving) and activations in [0, 1]:
    ``calcInextensibleTendonActiveFiberForce`` to 1e-8 relative (OpenSim inverts the
    force-velocity curve by Newton's method to 1e-6 in velocity: measured 1e-10), and
    ``computeInitialFiberEquilibrium``'s fibre lengths. At rest (force-velocity multiplier
    1) our equilibrium's force error is below 1e-12 of the max isometric force and
    OpenSim's below its tolerance 1e-8; their tendon forces agree to 2e-8 of the max
    isometric force. Moving, OpenSim's solution lags its velocity estimate by one Newton
    step: tendon forces agree to 5e-7 of the max isometric force (measured 1.3e-7). Fibres
    at their minimum length (no equilibrium above it) are the same muscles on both sides."""
    om, s, muscles, coords, P, m = gait
    n = len(muscles)
    rng = np.random.default_rng(1)
    rows = []
    for trial in range(6):
        _pose(om, s, coords, rng, speed=float(trial % 2))
        a = rng.uniform(0.0, 1.0, n)
        for m, ai in zip(muscles, a, strict=True):
            m.setActivation(s, float(ai))
        om.realizeVelocity(s)
        L, V = _lengths(s, muscles)
        inext = [
            m.calcInextensibleTendonActiveFiberForce(s, float(ai)) for m, ai in zip(muscles, a, strict=True)
        ]
        for m in muscles:
            m.computeInitialFiberEquilibrium(s)
        lce = np.array([m.getStateVariableValue(s, "fiber_length") for m in muscles])
        rows.append((L, V, a, np.array(inext), lce))
    L, V, a, inext, lce_theirs = (np.stack(x) for x in zip(*rows, strict=True))
    comp = np.ones(n, bool)

    @jax.jit
    def ours(L, V, a, lce_theirs):
        f = jax.vmap(lambda L, V, a: th.inextensible_tendon_active_fiber_force(P, L, V, a))(L, V, a)
        lce = jax.vmap(lambda L, V, a: th.equilibrium_fiber_length(P, L, V, a))(L, V, a)

        def tendon(L, V, a, l):
            return th.thelen_equations(P, L, V, a, a, l, comp).tendon_force

        def err(L, V, a, l):  # the force error at rest (fv = 1)
            a = jnp.clip(a, P["minimum_activation"], 1.0)
            return th._equilibrium_residual(P, L, V, a, l, jnp.ones_like(l))[0]

        return {
            "inext": f,
            "lce": lce,
            "Ft": jax.vmap(tendon)(L, V, a, lce),
            "Ft_theirs": jax.vmap(tendon)(L, V, a, lce_theirs),
            "res": jax.vmap(err)(L, V, a, lce),
            "res_theirs": jax.vmap(err)(L, V, a, lce_theirs),
        }

    o = {k: np.asarray(v) for k, v in ours(L, V, a, lce_theirs).items()}
    Fmax = np.broadcast_to(np.asarray(P["max_isometric_force"]), L.shape)
    lmin = np.broadcast_to(np.asarray(th.minimum_fiber_length(P)), L.shape)
    assert _rel(o["inext"], inext, 1e-9 * Fmax) < 1e-8
    assert (inext == 0).any()  # fibres at their minimum length: no force
    assert np.all(np.isfinite(o["lce"]))
    at_min = o["lce"] <= lmin * (1 + 1e-12)
    assert at_min.any() and np.array_equal(at_min, lce_theirs <= lmin * (1 + 1e-12))
    free = ~at_min
    rest = np.zeros_like(free)
    rest[0::2] = True
    err_ours = np.max(np.abs(o["res"] / Fmax)[rest & free])
    err_theirs = np.max(np.abs(o["res_theirs"] / Fmax)[rest & free])
    dF = np.abs(o["Ft"] - o["Ft_theirs"]) / Fmax
    print(
        f"equilibrium force error at rest: ours {err_ours:.0e}, OpenSim's {err_theirs:.0e} of Fmax; "
        f"tendon forces at rest {dF[rest].max():.0e}, moving {dF[~rest].max():.0e} of Fmax"
    )
    assert err_ours < 1e-12 and err_theirs < 1e-8
    assert dF[rest].max() < 2e-8 and dF[~rest].max() < 5e-7


def test_gradients_equal_central_differences():
    """Forward-mode derivatives of four muscles' tendon force, fibre velocity (the fibre
    length's rate) and activation rate, and of their equilibrium fibre length, with respect
    to the fibre length state, the path length and speed, the activation, the optimal fibre
    length and the tendon slack length, equal central differences (1e-6 relative; measured
    2e-7: the differences' own error). The muscles: parallel and pennate, shortening on the
    curve, lengthening on it and on its linear extrapolation."""
    P = {k: jnp.full(4, v) for k, v in zip(th.PARAMS, (
        1000.0, 0.1, 0.2, 0.0, 10.0, 0.015, 0.05, 0.04, 0.6, 0.45, 5.0, 0.25, 1.4, 0.95, np.arccos(0.1), 0.01,
    ), strict=True)}  # fmt: skip
    P["pennation_angle_at_optimal"] = jnp.array([0.0, 0.3, 0.2, 0.4])
    comp = np.ones(4, bool)
    x0 = jnp.array(
        [
            [0.09, 0.11, 0.10, 0.12],  # fibre length
            [0.296, 0.31, 0.305, 0.322],  # path length
            [-0.3, 0.2, 0.5, 0.05],  # path speed (the curve has a kink at 0)
            [0.5, 0.7, 0.2, 0.9],  # activation
            [0.1, 0.1, 0.1, 0.1],  # optimal fibre length
            [0.2, 0.2, 0.2, 0.2],  # tendon slack length
        ]
    )

    def outputs(x):
        Q = {**P, "optimal_fiber_length": x[4], "tendon_slack_length": x[5]}
        m = th.thelen_equations(Q, x[1], x[2], x[3] * 1.1, x[3], x[0], comp)
        lce = th.equilibrium_fiber_length(Q, x[1], x[2], x[3])
        return jnp.concatenate([m.tendon_force / 1000.0, m.fiber_velocity, m.activation_derivative, lce])

    h = 1e-7
    E = jnp.eye(x0.size).reshape(-1, *x0.shape)
    X = jnp.concatenate([x0[None] + h * E, x0[None] - h * E])
    V = jnp.concatenate([E, E])
    Y, T = jax.jit(jax.vmap(lambda x, v: jax.jvp(outputs, (x,), (v,))))(X, V)
    Y, T = np.asarray(Y), np.asarray(T)
    k = x0.size
    J_fd = (Y[:k] - Y[k:]).T / (2 * h)
    J_fwd = (T[:k] + T[k:]).T / 2
    m = th.thelen_equations(P, x0[1], x0[2], x0[3], x0[3], x0[0], comp)
    dlceN = np.asarray(m.normalized_fiber_velocity)
    assert dlceN.min() < 0 < dlceN.max() and np.all(np.isfinite(J_fd))
    scale = np.maximum(np.abs(J_fd), np.maximum(1e-3 * np.max(np.abs(J_fd), axis=1, keepdims=True), 1e-6))
    err = np.max(np.abs(J_fwd - J_fd) / scale)
    print(f"jacfwd vs central differences {err:.1e}; normalized fibre velocities {dlceN}")
    assert err < 1e-6


@pytest.mark.slow
@pytest.mark.oracle
def test_static_optimization_with_thelen_muscles_equals_opensims(tmp_path):
    """gait14dof22musc with its 22 Thelen2003Muscles and a reserve CoordinateActuator on
    every coordinate, OpenSim's AnalyzeTool StaticOptimization (0.45..0.5 s, 6 frames, the
    trial of test_inverse_dynamics) against the same setup run by simjax: activations
    agree to 1e-5 (measured 7e-7: OpenSim's IPOPT at 1e-8), the costs to 1e-6 (measured
    4e-7), and the MuscleAnalysis files OpenSim wrote to 1e-7 of each file's largest value
    (measured: lengths, velocities, forces and moment arms 1e-13; the pelvis rotations'
    moments 1.3e-8, whose moment arms and tendon forces agree to 1e-13). Slow (simjax's
    compile, ~20 s)."""
    from test_inverse_dynamics import write_trial
    from test_static_optimization import _so_setup

    write_trial(tmp_path, model_path("gait14dof22musc"))
    om = osim.Model(model_path("gait14dof22musc"))
    for c in om.getCoordinateSet():
        act = osim.CoordinateActuator(c.getName())
        act.setName(c.getName() + "_reserve")
        act.setOptimalForce(100.0 if c.getName().startswith("pelvis") else 10.0)
        om.addForce(act)
    om.finalizeConnections()
    om.printToXML(str(tmp_path / "so_model.osim"))
    (tmp_path / "so.xml").write_text(_so_setup("so", 0.45, 0.5, 1e-8))
    osim.AnalyzeTool(str(tmp_path / "so.xml")).run()
    ref = sj.io.read_sto(tmp_path / "results" / "so_StaticOptimization_activation.sto")
    setup = sj.io.read_analyze_setup(tmp_path / "so.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sj.io.load_osim(setup.model_file)
    assert sum(isinstance(a, sj.Thelen2003Muscle) for a in model.actuators.values()) == 22
    res = setup.run(model, output_dir=tmp_path / "ours")
    names = list(res.activation.labels)
    assert len(names) == 22 + 17 and res.converged.all()
    R = np.asarray(ref.data)[:, [list(ref.labels).index(n) for n in names]]
    A = np.asarray(res.activation.data)
    cost_osim, cost_sj = (R**2).sum(1), (A**2).sum(1)
    worst = {}
    for key, tab in res.muscle_analysis.items():
        rf = sj.io.read_sto(tmp_path / "results" / f"so_MuscleAnalysis_{key}.sto")
        RR = np.asarray(rf.data)[:, [list(rf.labels).index(n) for n in tab.labels]]
        worst[key] = np.abs(np.asarray(tab.data) - RR).max() / max(np.abs(RR).max(), 1e-3)
    key = max(worst, key=worst.get)
    print(
        f"activations {np.abs(A - R).max():.1e}; muscle analysis: {len(worst)} files, "
        f"worst {key} {worst[key]:.1e}"
    )
    assert np.abs(A - R).max() < 1e-5
    assert np.all(np.abs(cost_sj - cost_osim) <= 1e-6 * cost_osim)
    assert worst[key] < 1e-7


def _arm(**kw):
    """A one-link arm (1 kg, 0.3 m) on a pin, a Thelen muscle from ground over the elbow."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body(sj.MassProperties(1.0, [0.15, 0, 0], sj.Inertia(0.001, 0.03, 0.03)))
    arm = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform(), name="arm")
    path = sj.GeometryPath(matter, "flexor")
    path.append_path_point(matter.Ground(), [0.0, 0.25, 0.0])
    path.append_path_point(arm, [0.2, 0.02, 0.0])
    defaults = dict(max_isometric_force=300.0, optimal_fiber_length=0.2, tendon_slack_length=0.1)
    muscle = sj.Thelen2003Muscle(forces, path, name="flexor", **{**defaults, **kw})
    return system, arm, muscle


def test_equilibrium_then_a_batch_of_excitations_moves_the_arm():
    """The one-muscle arm (pennate, compliant tendon): ``equilibrate_muscles`` at rest
    leaves the fibre still (its velocity, the fibre length's rate, below 1e-12 m/s) with
    tendon and fibre forces balanced; then 16 constant excitations, 400 explicit-Euler
    steps of 0.5 ms (activation and fibre length integrated with q and u), in one
    jit(vmap) call: more excitation lifts the arm further. Bad properties are refused naming
    the muscle."""
    system, arm, muscle = _arm(pennation_angle_at_optimal=0.2, default_activation=0.1)
    s0 = arm.set_one_q(system.realize_topology(), 0, -0.5)
    dt = 5e-4

    def run(e):
        st0 = sj.equilibrate_muscles(system, system.set_controls(s0, jnp.reshape(e, (1,))))
        m = calc_muscle_info(muscle._subsystem, system.realize(st0, sj.Stage.VELOCITY))

        def step(y, _):
            q, u, z = y
            st = system.realize(st0.with_q(q).with_u(u).with_z(z), sj.Stage.ACCELERATION)
            return (q + dt * st.qdot, u + dt * st.udot, z + dt * st.zdot), None

        (q, _, _), _ = jax.lax.scan(step, (st0.q, st0.u, st0.z), None, length=400)
        return q[0], m.fiber_velocity[0], m.tendon_force[0], m.fiber_force_along_tendon[0]

    angles, v, Ft, Fm = (np.asarray(x) for x in jax.jit(jax.vmap(run))(jnp.linspace(0.1, 1.0, 16)))
    print(f"final angles {angles[0]:.3f} .. {angles[-1]:.3f} rad; at equilibrium |v| {np.abs(v).max():.0e}")
    assert np.all(np.abs(v) < 1e-12) and np.all(Ft > 0)
    np.testing.assert_allclose(Ft, Fm, rtol=1e-10)
    assert np.all(np.isfinite(angles)) and np.all(np.diff(angles) > 0)
    with pytest.raises(ValueError, match="'flexor': flen must lie in"):
        _arm(flen=0.9)
    with pytest.raises(
        ValueError, match="'flexor': fv_linear_extrap_threshold must be greater than 1 / flen"
    ):
        _arm(fv_linear_extrap_threshold=0.5)
    with pytest.raises(ValueError, match="'flexor': minimum_activation must lie in"):
        _arm(minimum_activation=0.0)
    with pytest.raises(ValueError, match="'flexor': the fibre length must be positive"):
        muscle.set_fiber_length(s0, -0.1)
