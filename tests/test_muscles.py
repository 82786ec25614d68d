"""Muscles (``sj.DeGrooteFregly2016Muscle``) against OpenSim 4.6.

The oracle model is gait14dof22musc (its 22 muscle paths have conditional and moving points
but no wrap objects) with its Thelen2003 muscles converted by OpenSim's own
``DeGrooteFregly2016Muscle.replaceMuscles`` and then varied so that every branch runs:
pennation at optimal length 0-0.4 rad, fibre damping, a wider active curve, other passive
and tendon strains, rigid tendons (``ignore_tendon_compliance``) and muscles without
activation dynamics. OpenSim's other forces (limit forces, contact) are removed from the file
both sides read, so both sides apply gravity and the muscles alone. (The activation time
constants and smoothing stay equal across muscles: OpenSim 4.6 keeps them in function-static
variables, so every DeGrooteFregly2016Muscle of a process uses the first one's.)
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_io_osim import model_path

import simjax as sj
from simjax.system.muscles import calc_muscle_info

jax.config.update("jax_enable_x64", True)

osim = pytest.importorskip("opensim")

FIELDS = (
    ("fiber_length", "getFiberLength"),
    ("normalized_fiber_length", "getNormalizedFiberLength"),
    ("fiber_velocity", "getFiberVelocity"),
    ("pennation_angle", "getPennationAngle"),
    ("tendon_length", "getTendonLength"),
    ("tendon_force", "getTendonForce"),
    ("active_fiber_force", "getActiveFiberForce"),
    ("passive_fiber_elastic_force", "getPassiveFiberElasticForce"),
    ("passive_fiber_damping_force", "getPassiveFiberDampingForce"),
    ("fiber_force", "getFiberForce"),
    ("active_force_length_multiplier", "getActiveForceLengthMultiplier"),
    ("force_velocity_multiplier", "getForceVelocityMultiplier"),
)


def _varied(i: int, mus) -> None:
    """Vary muscle ``i``'s properties (every branch of the equations runs somewhere)."""
    mus.setPennationAngleAtOptimalFiberLength(0.1 * (i % 5))
    mus.set_fiber_damping(0.05 * (i % 3 == 1))
    mus.set_active_force_width_scale(1.0 + 0.5 * (i % 4 == 2))
    mus.set_passive_fiber_strain_at_one_norm_force(0.6 - 0.1 * (i % 2))
    mus.set_tendon_strain_at_one_norm_force(0.049 + 0.02 * (i % 3 == 2))
    mus.set_ignore_tendon_compliance(i % 6 == 5)
    mus.set_ignore_activation_dynamics(i % 7 == 3)


@pytest.fixture(scope="module")
def gait(tmp_path_factory):
    """(simjax model, OpenSim model, its State, the OpenSim muscles, coordinates)."""
    om = osim.Model(model_path("gait14dof22musc"))
    om.finalizeConnections()
    osim.DeGrooteFregly2016Muscle.replaceMuscles(om)
    fs = om.updForceSet()
    for i in reversed(range(fs.getSize())):
        if fs.get(i).getConcreteClassName() != "DeGrooteFregly2016Muscle":
            fs.remove(i)
    for i in range(fs.getSize()):
        _varied(i, osim.DeGrooteFregly2016Muscle.safeDownCast(fs.get(i)))
    path = tmp_path_factory.mktemp("muscles") / "gait_dgf.osim"
    om.printToXML(str(path))
    om = osim.Model(str(path))
    s = om.initSystem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sj.io.load_osim(str(path))
    fs = om.getForceSet()
    muscles = [osim.DeGrooteFregly2016Muscle.safeDownCast(fs.get(i)) for i in range(fs.getSize())]
    cs = om.getCoordinateSet()
    coords = [cs.get(i) for i in range(cs.getSize())]
    return m, om, s, muscles, coords


def _set_opensim(om, s, muscles, coords, rng):
    """A random state: q in range, u ~ N(0, 1), activations and excitations in [0.05, 1],
    tendon forces at equilibrium then perturbed by up to 30%. Returns the excitations and
    OpenSim's equilibrium normalized tendon forces."""
    for c in coords:
        if c.getLocked(s):
            continue
        lo, hi = max(c.getRangeMin(), -1.5), min(c.getRangeMax(), 1.5)
        c.setValue(s, float(rng.uniform(lo, hi)), False)
        c.setSpeedValue(s, float(rng.normal()))
    e = rng.uniform(0.05, 1.0, len(muscles))
    om.realizeVelocity(s)
    cv = om.getControls(s)
    for i in range(len(muscles)):
        cv.set(i, float(e[i]))
    om.setControls(s, cv)
    for mus in muscles:
        if not mus.get_ignore_activation_dynamics():
            mus.setActivation(s, float(rng.uniform(0.05, 1.0)))
    try:
        om.equilibrateMuscles(s)
    except RuntimeError:  # a pose with no equilibrium in [0, 5] for some muscle: draw again
        return _set_opensim(om, s, muscles, coords, rng)
    f_eq = np.array(
        [np.nan if mus.get_ignore_tendon_compliance() else mus.getNormalizedTendonForce(s) for mus in muscles]
    )
    for mus, f in zip(muscles, f_eq, strict=True):
        if not mus.get_ignore_tendon_compliance():
            mus.setNormalizedTendonForce(s, float(f * rng.uniform(0.7, 1.3)))
    om.realizeAcceleration(s)
    return e, f_eq


@pytest.fixture(scope="module")
def ours(gait):
    """Jitted simjax evaluations: (state builder, all-quantities function)."""
    m, om, s, muscles, coords = gait
    names = [c.getName() for c in coords]
    handles = [m.muscle(mus.getName()) for mus in muscles]
    system = m.system
    forces = handles[0]._subsystem

    def build(q_vals, u_vals, e, a, f):
        st = m.set_coordinate_values(m.default_state, dict(zip(names, q_vals, strict=True)))
        st = m.set_coordinate_speeds(st, dict(zip(names, u_vals, strict=True)))
        st = system.set_controls(st, e)
        for i, h in enumerate(handles):
            if not h.ignore_activation_dynamics:
                st = h.set_activation(st, a[i])
            if not h.ignore_tendon_compliance:
                st = h.set_normalized_tendon_force(st, f[i])
        return st

    @jax.jit
    def evaluate(q_vals, u_vals, e, a, f):
        """Everything at once (one compilation): every muscle's quantities, the State
        realized to Acceleration, and the equilibrium tendon forces at its q, u, a."""
        st0 = build(q_vals, u_vals, e, a, f)
        st = system.realize(st0, sj.Stage.ACCELERATION)
        eq = m.equilibrate_muscles(st0)
        f_eq = jnp.stack(
            [h.get_normalized_tendon_force(eq) for h in handles if not h.ignore_tendon_compliance]
        )
        return calc_muscle_info(forces, st), st, f_eq

    return build, evaluate, handles, names


def _read_opensim_state(s, muscles, coords):
    q = np.array([c.getValue(s) for c in coords])
    u = np.array([c.getSpeedValue(s) for c in coords])
    a = np.array([mus.getActivation(s) for mus in muscles])
    f = np.array(
        [1.0 if mus.get_ignore_tendon_compliance() else mus.getNormalizedTendonForce(s) for mus in muscles]
    )
    return q, u, a, f


def _rel(ours, theirs):
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    return np.max(np.abs(ours - theirs) / np.maximum(1e-3, np.abs(theirs)))


@pytest.mark.oracle
def test_muscle_quantities_and_accelerations_equal_opensim(gait, ours):
    """At 3 random states (q, u, excitation, activation, tendon force off equilibrium) of
    the varied gait14dof22musc: every muscle's fibre length and velocity, pennation, tendon
    length and force, active, passive and damping fibre forces, force-length and
    force-velocity multipliers, the activation and tendon-force derivatives equal OpenSim's
    to 1e-9 relative, and the generalized accelerations (gravity plus the 22 muscles) to
    1e-9 of the largest; the equilibrium tendon forces equal ``equilibrateMuscles``' to its
    bisection's tolerance (1e-10)."""
    m, om, s, muscles, coords = gait
    build, evaluate, handles, names = ours
    assert len(m.muscles) == 22 and not m.ignored
    assert m.control_names == [mus.getName() for mus in muscles]
    rigid = np.array([h.ignore_tendon_compliance for h in handles])
    no_act = np.array([h.ignore_activation_dynamics for h in handles])
    assert rigid.any() and no_act.any() and (~rigid).any()
    su = np.array([m.coordinates[n].u_index(m.default_state) for n in names])
    rng = np.random.default_rng(11)
    worst: dict[str, float] = {}
    for _ in range(3):
        e, f_eq = _set_opensim(om, s, muscles, coords, rng)
        q, u, a, f = _read_opensim_state(s, muscles, coords)
        info, st, f_ours = evaluate(q, u, e, a, f)
        for ours_name, theirs_name in FIELDS:
            theirs = [getattr(mus, theirs_name)(s) for mus in muscles]
            worst[ours_name] = max(worst.get(ours_name, 0.0), _rel(getattr(info, ours_name), theirs))
        adot = [
            mus.getStateVariableDerivativeValue(s, "activation") for mus, n in zip(muscles, no_act) if not n
        ]
        worst["activation_derivative"] = _rel(np.asarray(info.activation_derivative)[~no_act], adot)
        fdot = [mus.getNormalizedTendonForceDerivative(s) for mus, r in zip(muscles, rigid) if not r]
        worst["normalized_tendon_force_derivative"] = max(
            worst.get("normalized_tendon_force_derivative", 0.0),
            _rel(np.asarray(info.normalized_tendon_force_derivative)[~rigid], fdot),
        )
        theirs_udot = np.array([c.getAccelerationValue(s) for c in coords])
        ours_udot = np.asarray(st.udot)[su]
        worst["udot"] = max(
            worst.get("udot", 0.0), np.max(np.abs(ours_udot - theirs_udot)) / np.max(np.abs(theirs_udot))
        )
        # equilibrium from the same q, u, a (OpenSim's bisection stops at 1e-10)
        f_ours = np.asarray(f_ours)
        worst["equilibrium"] = max(worst.get("equilibrium", 0.0), np.max(np.abs(f_ours - f_eq[~rigid])))
    print({k: f"{v:.1e}" for k, v in worst.items()})
    assert worst.pop("equilibrium") < 1e-9
    assert max(worst.values()) < 1e-9, worst


@pytest.mark.oracle
def test_muscle_handles_read_what_opensim_reads(gait, ours):
    """The handles' getters (OpenSim's names in snake_case) on one State equal OpenSim's
    (``compute_moment_arm`` is the path's, checked against OpenSim in test_paths)."""
    m, om, s, muscles, coords = gait
    build, evaluate, handles, names = ours
    rng = np.random.default_rng(2)
    e, _ = _set_opensim(om, s, muscles, coords, rng)
    q, u, a, f = _read_opensim_state(s, muscles, coords)
    _, st, _ = evaluate(q, u, e, a, f)
    mus = muscles[7]  # vasti_r
    h = m.muscle(mus.getName())
    getters = (
        "activation", "excitation", "length", "lengthening_speed", "fiber_length", "normalized_fiber_length",
        "fiber_velocity", "pennation_angle", "tendon_length", "tendon_force", "active_fiber_force",
        "passive_fiber_force", "normalized_tendon_force",
    )  # fmt: skip

    theirs = [getattr(mus, "get" + "".join(w.title() for w in g.split("_")))(s) for g in getters]
    # on a concrete State each getter runs compiled (the muscles' quantities: one program)
    for g, t in zip(getters, theirs, strict=True):
        mine = getattr(h, f"get_{g}")(st)
        assert float(mine) == pytest.approx(t, rel=1e-9, abs=1e-12), g
    assert float(h.get_optimal_fiber_length(st)) == mus.getOptimalFiberLength()
    with pytest.raises(KeyError, match="no muscle 'vasti'|'vasti'"):
        m.muscle("vasti")


def test_gradients_equal_central_differences():
    """Through a compliant, pennate, damped muscle and a rigid-tendon one on the arm: the
    derivatives of their tendon forces, fibre velocities and state derivatives with respect
    to the optimal fibre length, q, u, the activation and the tendon-force state by forward-mode
    autodiff equal central differences (1e-6 relative; measured 1e-8)."""
    system, arm, muscle = _arm(pennation_angle_at_optimal=0.3, fiber_damping=0.05)
    rigid = sj.DeGrooteFregly2016Muscle(
        muscle._subsystem,
        _second_path(system, arm),
        name="rigid",
        ignore_tendon_compliance=True,
        optimal_fiber_length=0.15,
        tendon_slack_length=0.12,
        max_isometric_force=200.0,
    )
    s0 = system.realize_topology()
    s0 = rigid.set_activation(muscle.set_activation(arm.set_one_q(s0, 0, -0.4), 0.6), 0.3)
    s0 = system.set_controls(
        sj.equilibrate_muscles(system, s0).with_u(jnp.array([0.7])), jnp.array([0.8, 0.2])
    )
    forces = muscle._subsystem

    def outputs(x):
        st = muscle.set_optimal_fiber_length(s0, x[0])
        st = arm.set_one_q(st, 0, x[1]).with_u(x[2:3])
        st = muscle.set_normalized_tendon_force(muscle.set_activation(st, x[3]), x[4])
        m = calc_muscle_info(forces, system.realize(st, sj.Stage.VELOCITY))  # [flexor, rigid]
        return jnp.concatenate(
            [
                m.tendon_force,
                m.fiber_velocity,
                m.activation_derivative[:1],
                m.normalized_tendon_force_derivative[:1],
            ]
        )

    x0 = jnp.array(
        [muscle.get_optimal_fiber_length(s0), -0.4, 0.7, 0.6, muscle.get_normalized_tendon_force(s0) * 1.1]
    )
    h = 1e-6
    X = jnp.concatenate([x0[None] + h * jnp.eye(5), x0[None] - h * jnp.eye(5)])
    # one compilation: the outputs and their directional derivatives at x0 +- h e_k; the
    # mean of the two derivatives is J(x0) e_k to O(h^2)
    V = jnp.concatenate([jnp.eye(5), jnp.eye(5)])
    Y, T = jax.jit(jax.vmap(lambda x, v: jax.jvp(outputs, (x,), (v,))))(X, V)
    Y, T = np.asarray(Y), np.asarray(T)
    J_fd = (Y[:5] - Y[5:]).T / (2 * h)
    J_fwd = (T[:5] + T[5:]).T / 2
    assert np.all(np.abs(J_fd) < 1e9)  # a state inside the curves' domain
    scale = np.maximum(np.abs(J_fd), np.maximum(1e-3 * np.max(np.abs(J_fd), axis=1, keepdims=True), 1e-6))
    print(f"jacfwd vs central differences {np.max(np.abs(J_fwd - J_fd) / scale):.1e}")
    assert np.max(np.abs(J_fwd - J_fd) / scale) < 1e-6


def _second_path(system, arm):
    matter = system.get_matter_subsystem()
    path = sj.GeometryPath(matter, "extensor")
    path.append_path_point(matter.Ground(), [0.0, -0.2, 0.0])
    path.append_path_point(arm, [0.1, -0.02, 0.0])
    return path


def _arm(**kw):
    """A one-link arm (1 kg, 0.3 m) on a pin, a muscle from ground over the elbow."""
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
    muscle = sj.DeGrooteFregly2016Muscle(forces, path, name="flexor", **{**defaults, **kw})
    return system, arm, muscle


def test_a_batch_of_excitations_moves_the_arm_under_jit_and_vmap():
    """64 constant excitations of the one-muscle arm (compliant tendon), 500 explicit-Euler
    steps of 0.2 ms each (activation and tendon force integrated with q and u; the explicit
    tendon dynamics is stiff at low activation), from the muscle's equilibrium, in one
    jit(vmap) call: more excitation lifts the arm further."""
    system, arm, muscle = _arm(default_activation=0.1)
    s0 = arm.set_one_q(system.realize_topology(), 0, -0.5)
    dt = 2e-4

    def final_angle(e):
        st0 = sj.equilibrate_muscles(system, system.set_controls(s0, jnp.reshape(e, (1,))))

        def step(y, _):
            q, u, z = y
            st = system.realize(st0.with_q(q).with_u(u).with_z(z), sj.Stage.ACCELERATION)
            return (q + dt * st.qdot, u + dt * st.udot, z + dt * st.zdot), None

        (q, _, _), _ = jax.lax.scan(step, (st0.q, st0.u, st0.z), None, length=500)
        return q[0]

    es = jnp.linspace(0.1, 1.0, 64)
    angles = np.asarray(jax.jit(jax.vmap(final_angle))(es))
    print(f"final angles {angles[0]:.3f} .. {angles[-1]:.3f} rad")
    assert np.all(np.isfinite(angles))
    assert np.all(np.diff(angles) > 0)  # a stronger pull lifts the arm higher


def test_muscles_and_coordinate_actuators_share_controls_and_z():
    """A filter-dynamics CoordinateActuator created after a muscle in the same subsystem:
    controls are [actuator, muscle] (coordinate actuators first), z holds the muscle's
    two states then the actuator's activation, and each kind's rates land in its own slots."""
    system, arm, muscle = _arm()
    act = sj.Force.CoordinateActuator(
        muscle._subsystem, arm, 0, gain=(2.0, 0.0, 0.0), dynamics="filter", time_constant=0.1
    )
    assert system.get_actuators() == [act, muscle]
    s = system.realize_topology()
    assert s.z.shape == (3,)
    s = system.set_controls(muscle.set_activation(s, 0.3), jnp.array([0.7, 0.9]))
    assert float(muscle.get_excitation(s)) == 0.9 and float(act.get_control(s)) == 0.7
    st = jax.jit(lambda s: system.realize(s, sj.Stage.ACCELERATION))(s)
    zdot = np.asarray(st.zdot)
    assert zdot[2] == pytest.approx((0.7 - 0.0) / 0.1)  # the actuator's filter, from a = 0
    assert zdot[0] == pytest.approx(float(muscle.get_activation_derivative(st)), rel=1e-14)
    assert zdot[1] == pytest.approx(float(muscle.get_normalized_tendon_force_derivative(st)), rel=1e-14)
    assert zdot[0] > 0  # excitation 0.9 above activation 0.3


def test_bad_muscle_input_says_what_to_fix(tmp_path):
    """Zero or negative optimal fibre length, an unsupported dynamics mode, activations
    outside [0, 1]: errors naming the muscle; a tendon slack length longer than the path at
    the default pose: a warning naming the muscle from ``equilibrate_muscles`` (the first
    step after loading, as in OpenSim; loading itself stays fast). arm26 converted (less its two
    muscles over ellipsoids, read in test_wrapping.py): all four muscles read, ``appliesForce`` read."""
    with pytest.raises(ValueError, match=r"'flexor': optimal_fiber_length must lie in \(0, inf\)"):
        _arm(optimal_fiber_length=0.0)
    with pytest.raises(ValueError, match="'flexor': optimal_fiber_length"):
        _arm(optimal_fiber_length=-0.1)
    with pytest.raises(ValueError, match="'flexor': default_activation must lie in"):
        _arm(default_activation=1.5)
    with pytest.raises(NotImplementedError, match="'flexor'.*use 'explicit'"):
        _arm(tendon_compliance_dynamics_mode="implicit")
    system, arm, muscle = _arm()
    s = system.realize_topology()
    with pytest.raises(ValueError, match=r"'flexor': activation must lie in \[0, 1\], got 1.2"):
        muscle.set_activation(s, 1.2)
    with pytest.raises(ValueError, match="'flexor': optimal_fiber_length must lie"):
        muscle.set_optimal_fiber_length(s, 0.0)
    with pytest.raises(KeyError, match="no property 'optimal_length'"):
        muscle.get_property(s, "optimal_length")
    # a path far too long for fibre and tendon: no equilibrium, as OpenSim's bisection finds
    with pytest.raises(ValueError, match="no fibre-tendon equilibrium .* for flexor"):
        sj.equilibrate_muscles(system, muscle.set_optimal_fiber_length(s, 0.05))
    # from a file: a bad property is an error naming the muscle; slack too long, a warning
    om = osim.Model(model_path("arm26"))
    om.finalizeConnections()
    osim.DeGrooteFregly2016Muscle.replaceMuscles(om)
    good = tmp_path / "arm26_dgf.osim"
    om.printToXML(str(good))
    text = good.read_text()
    # without the two muscles over WrapEllipsoids (compiling their wraps costs ~30 s here;
    # they are read and compared in test_wrapping.py)
    for name in ("TRIlong", "BIClong"):
        i = text.index(f'<DeGrooteFregly2016Muscle name="{name}">')
        j = text.index("</DeGrooteFregly2016Muscle>", i) + len("</DeGrooteFregly2016Muscle>")
        text = text[:i] + text[j:]
    bad = tmp_path / "bad.osim"
    i = text.index('<DeGrooteFregly2016Muscle name="BICshort">')
    j = text.index("<optimal_fiber_length>", i)
    k = text.index("</optimal_fiber_length>", j)
    bad.write_text(text[:j] + "<optimal_fiber_length>-0.05" + text[k:])
    with pytest.raises(ValueError, match="'BICshort': optimal_fiber_length must lie"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sj.io.load_osim(str(bad))
    j = text.index("<tendon_slack_length>", i)
    k = text.index("</tendon_slack_length>", j)
    bad.write_text(text[:j] + "<tendon_slack_length>5.0" + text[k:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sj.io.load_osim(str(bad))
    short = r"tendon slack length longer than the path at this pose: BICshort \(path"
    with pytest.warns(UserWarning, match=short):
        with pytest.raises(ValueError, match="no fibre-tendon equilibrium .* for BICshort"):
            m.equilibrate_muscles(m.state)
    # every muscle is read (those over wrap cylinders too)
    assert "BICshort" in m.muscles and len(m.muscles) == 4
    assert "BICshort [DeGrooteFregly2016Muscle on path 'BICshort'" in m.summary()
    # appliesForce false: read as disabled (its states still evolve, as in OpenSim)
    i = text.index("<appliesForce>", text.index('<DeGrooteFregly2016Muscle name="BICshort">'))
    bad.write_text(text[:i] + "<appliesForce>false" + text[text.index("</appliesForce>", i) :])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = sj.io.load_osim(str(bad))
    assert bool(off.muscle("BICshort").is_disabled(off.default_state))
    assert not bool(m.muscle("BICshort").is_disabled(m.default_state))
    assert not any("wrap" in k.lower() for k in m.ignored)
