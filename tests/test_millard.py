"""Millard2012EquilibriumMuscle (``sj.Millard2012EquilibriumMuscle``) and its curves against
OpenSim 4.6.

The curves are compared with OpenSim's own curve objects over and beyond their domains. The
muscles are twelve Millard muscles on one slider (their paths from Ground to the slider's
body, so each path length is its own offset plus q), varied so that every branch runs: rigid
and elastic tendons, fibre damping 0.1, 0 (classic Hill) and 0.05, pennation 0-0.36 rad,
no activation dynamics, and non-default curves (every optional curve property given). The
model is built with OpenSim's API, written to a .osim file that both sides load.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj
from simjax.dynamics.forces import curves as C
from simjax.dynamics.forces import millard as M
from simjax.system.muscles import calc_muscle_info

jax.config.update("jax_enable_x64", True)

osim = pytest.importorskip("opensim")

# (MuscleInfo field, OpenSim getter)
FIELDS = (
    ("fiber_length", "getFiberLength"),
    ("normalized_fiber_length", "getNormalizedFiberLength"),
    ("pennation_angle", "getPennationAngle"),
    ("cos_pennation_angle", "getCosPennationAngle"),
    ("tendon_length", "getTendonLength"),
    ("fiber_velocity", "getFiberVelocity"),
    ("normalized_fiber_velocity", "getNormalizedFiberVelocity"),
    ("fiber_velocity_along_tendon", "getFiberVelocityAlongTendon"),
    ("tendon_velocity", "getTendonVelocity"),
    ("active_fiber_force", "getActiveFiberForce"),
    ("passive_fiber_elastic_force", "getPassiveFiberElasticForce"),
    ("passive_fiber_damping_force", "getPassiveFiberDampingForce"),
    ("fiber_force", "getFiberForce"),
    ("fiber_force_along_tendon", "getFiberForceAlongTendon"),
    ("tendon_force", "getTendonForce"),
    ("active_force_length_multiplier", "getActiveForceLengthMultiplier"),
    ("passive_force_multiplier", "getPassiveForceMultiplier"),
    ("force_velocity_multiplier", "getForceVelocityMultiplier"),
    ("activation_derivative", "getActivationDerivative"),
)


def _rel(ours, theirs, floor):
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    return float(np.max(np.abs(ours - theirs) / np.maximum(floor, np.abs(theirs))))


# -- curves ----------------------------------------------------------------------------------
CURVES = (
    ("ActiveForceLengthCurve", (), C.active_force_length_curve, (-0.5, 2.5)),
    ("ActiveForceLengthCurve", (0.5, 0.7, 1.6, 0.5, 0.0), C.active_force_length_curve, (-0.5, 2.5)),
    ("ForceVelocityCurve", (), C.force_velocity_curve, (-1.5, 1.5)),
    ("ForceVelocityCurve", (0.1, 0.2, 4.0, 0.05, 0.1, 1.6, 0.5, 0.7), C.force_velocity_curve, (-1.5, 1.5)),
    ("ForceVelocityInverseCurve", (), C.force_velocity_inverse_curve, (-0.3, 1.7)),
    ("FiberForceLengthCurve", (), C.fiber_force_length_curve, (0.5, 2.2)),
    ("FiberForceLengthCurve", (0.1, 0.6, 0.3, 4.0, 0.6), C.fiber_force_length_curve, (0.5, 2.2)),
    ("TendonForceLengthCurve", (), C.tendon_force_length_curve, (0.9, 1.2)),
    ("TendonForceLengthCurve", (0.06, 30.0, 0.5, 0.7), C.tendon_force_length_curve, (0.9, 1.2)),
    ("FiberCompressiveForceLengthCurve", (), C.fiber_compressive_force_length_curve, (-0.2, 1.2)),
)


def test_curves_equal_opensim():
    """Each curve (OpenSim's defaults and other parameters) at 801 points over and beyond
    its domain: value and slope equal OpenSim's curve object's ``calcValue`` and
    ``calcDerivative(x, 1)`` to 1e-12 (value, absolute) and 1e-10 (slope, relative); the
    slope is autodiff through the Bezier solve."""
    value_and_slope = jax.jit(C.value_and_derivative)  # one small program per segment count
    for cls, args, build, (lo, hi) in CURVES:
        xs = np.linspace(lo, hi, 801)
        yo, dyo = value_and_slope(build(*args), jnp.asarray(xs))
        theirs = getattr(osim, cls)(*args)
        y = np.array([theirs.calcValue(float(x)) for x in xs])
        dy = np.array([theirs.calcDerivative(float(x), 1) for x in xs])
        assert np.max(np.abs(np.asarray(yo) - y)) < 1e-12, (cls, args)
        assert _rel(dyo, dy, 1.0) < 1e-10, (cls, args)


# -- the muscles on a slider -----------------------------------------------------------------
def _configs():
    return [
        dict(
            rigid=i % 4 == 3,
            noact=i % 5 == 2,
            damping=(0.1, 0.0, 0.05)[i % 3],
            alpha0=0.12 * (i % 4),
            F=500.0 + 100.0 * i,
            lo=0.05 + 0.01 * i,
            ls=0.1 + 0.02 * (i % 5),
            vmax=10.0 - 0.5 * (i % 3),
            custom=i % 2 == 1,
        )
        for i in range(12)
    ]


def _opensim_model(path):
    model = osim.Model()
    model.setName("millard_slider")
    body = osim.Body("b", 1.0, osim.Vec3(0), osim.Inertia(1))
    model.addBody(body)
    model.addJoint(osim.SliderJoint("j", model.getGround(), body))
    for i, c in enumerate(_configs()):
        m = osim.Millard2012EquilibriumMuscle(f"m{i}", c["F"], c["lo"], c["ls"], c["alpha0"])
        m.set_max_contraction_velocity(c["vmax"])
        m.set_fiber_damping(c["damping"])
        m.set_ignore_tendon_compliance(c["rigid"])
        m.set_ignore_activation_dynamics(c["noact"])
        if c["custom"]:
            fal = m.upd_ActiveForceLengthCurve()
            fal.set_min_norm_active_fiber_length(0.5)
            fal.set_shallow_ascending_slope(0.7)
            fal.set_minimum_value(0.15)
            fpe = m.upd_FiberForceLengthCurve()
            fpe.set_strain_at_one_norm_force(0.6)
            fpe.setOptionalProperties(0.25, 3.5, 0.6)
            fse = m.upd_TendonForceLengthCurve()
            fse.setOptionalProperties(25.0, 0.6, 0.6)
            fse.set_strain_at_one_norm_force(0.06)
            fv = m.upd_ForceVelocityCurve()
            fv.set_concentric_slope_near_vmax(0.2)
            fv.set_eccentric_curviness(0.7)
            fv.set_max_eccentric_velocity_force_multiplier(1.6)
        m.set_activation_time_constant(0.01 + 0.002 * i)
        m.set_minimum_activation(0.01 + 0.005 * (i % 3))
        m.setMinControl(m.get_minimum_activation())
        off = c["lo"] * np.cos(c["alpha0"]) + c["ls"]
        m.addNewPathPoint("o", model.getGround(), osim.Vec3(-off, 0, 0))
        m.addNewPathPoint("i", body, osim.Vec3(0, 0, 0))
        model.addForce(m)
    model.finalizeConnections()
    model.printToXML(str(path))


@pytest.fixture(scope="module")
def slider(tmp_path_factory):
    """(simjax model, OpenSim model, its State, the OpenSim muscles, the slider coordinate)."""
    path = tmp_path_factory.mktemp("millard") / "millard_slider.osim"
    _opensim_model(path)
    om = osim.Model(str(path))
    s = om.initSystem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sj.io.load_osim(str(path))
    fs = om.getForceSet()
    muscles = [osim.Millard2012EquilibriumMuscle.safeDownCast(fs.get(i)) for i in range(fs.getSize())]
    return m, om, s, muscles, om.getCoordinateSet().get(0)


def _draw(om, s, muscles, coord, rng):
    """A random state on both sides' terms: q, u, excitations, activations, fibre lengths
    (0.3-1.6 optimal: some below the minimum, clamped)."""
    coord.setValue(s, float(rng.uniform(-0.05, 0.05)))
    coord.setSpeedValue(s, float(rng.normal() * 0.3))
    om.realizeVelocity(s)
    cv = om.getControls(s)
    e = rng.uniform(0.0, 1.0, len(muscles))
    for i in range(len(muscles)):
        cv.set(i, float(e[i]))
    om.setControls(s, cv)
    for mus in muscles:
        if not mus.get_ignore_activation_dynamics():
            mus.setActivation(s, float(rng.uniform(0.0, 1.0)))
        if not mus.get_ignore_tendon_compliance():
            mus.setFiberLength(s, float(mus.getOptimalFiberLength() * rng.uniform(0.3, 1.6)))
    om.realizeAcceleration(s)
    a = np.array(
        [
            mus.getStateVariableValue(s, "activation") if not mus.get_ignore_activation_dynamics() else 0.0
            for mus in muscles
        ]
    )
    lm = np.array(
        [
            mus.getStateVariableValue(s, "fiber_length") if not mus.get_ignore_tendon_compliance() else 0.0
            for mus in muscles
        ]
    )
    return coord.getValue(s), coord.getSpeedValue(s), e, a, lm


@pytest.fixture(scope="module")
def ours(slider):
    """Jitted: the State from (q, u, e, a, fibre lengths) -> every muscle's quantities, the
    slider's acceleration, static optimization's forces at a = 1 and the equilibrium fibre
    lengths."""
    m, om, s, muscles, coord = slider
    handles = [m.muscle(mus.getName()) for mus in muscles]
    vals = [h._values() for h in handles]
    P = {k: jnp.array([v[k] for v in vals]) for k in vals[0]}
    system = m.system
    forces = handles[0]._subsystem

    def build(q, u, e, a, lm):
        st = m.set_coordinate_values(
            m.default_state,
            {"j_coord_0": q} if "j_coord_0" in m.coordinates else {next(iter(m.coordinates)): q},
        )
        st = m.set_coordinate_speeds(st, {next(iter(m.coordinates)): u})
        st = system.set_controls(st, e)
        for i, h in enumerate(handles):
            if not h.ignore_activation_dynamics:
                st = h.set_activation(st, a[i])
            if not h.ignore_tendon_compliance:
                st = h.set_fiber_length(st, lm[i])
        return st

    @jax.jit
    def evaluate(q, u, e, a, lm):
        st0 = build(q, u, e, a, lm)
        st = system.realize(st0, sj.Stage.ACCELERATION)
        info = calc_muscle_info(forces, st)
        # static optimization's force per unit activation from the same path lengths and
        # speeds; the fibre lengths equilibrate_muscles stores
        one = jnp.ones_like(info.length)
        fa = M.inextensible_tendon_active_fiber_force(P, info.length, info.lengthening_speed, one)
        eq = sj.equilibrate_muscles(system, st0)
        l_eq = jnp.stack([h.get_fiber_length_state(eq) for h in handles])
        return info, st.udot, l_eq, fa, st.zdot

    return build, evaluate, handles


@pytest.mark.oracle
def test_millard_quantities_equal_opensim(slider, ours):
    """At 40 random states: every getter of every muscle (fibre length and velocity,
    pennation, tendon length and velocity, active / elastic / damping / total fibre force,
    tendon force, multipliers, activation derivative) and the fibre-length derivative equal
    OpenSim's: 1e-11 relative where OpenSim computes in closed form, 1e-8 where its damped
    fibre-velocity Newton stops (at 1e-10 of the max isometric force; measured 4e-9); the
    slider's acceleration to 1e-8; ``calcInextensibleTendonActiveFiberForce`` at a = 1 to
    1e-11; the equilibrium fibre lengths (``computeInitialFiberEquilibrium``, its Newton
    stopping at 1e-8 of the max isometric force) to 1e-7 relative (measured 2e-9)."""
    m, om, s, muscles, coord = slider
    build, evaluate, handles = ours
    assert len(m.muscles) == 12 and not m.ignored
    rigid = np.array([h.ignore_tendon_compliance for h in handles])
    damped = np.array([mus.get_fiber_damping() > 0 for mus in muscles])
    rng = np.random.default_rng(3)
    worst: dict[str, float] = {}
    exact = rigid | ~damped  # where OpenSim has no iteration in the velocity
    assert (~exact).any() and (rigid.any()) and (~rigid & ~damped).any()
    for _ in range(40):
        q, u, e, a, lm = _draw(om, s, muscles, coord, rng)
        info, udot, l_eq, fa, zdot = evaluate(q, u, e, a, lm)
        # the z derivatives the integrators see: OpenSim's state derivatives
        for i, mus in enumerate(muscles):
            for slot, var in ((handles[i]._z_act, "activation"), (handles[i]._z_ten, "fiber_length")):
                if slot >= 0:
                    theirs_d = mus.getStateVariableDerivativeValue(s, var)
                    j = handles[i]._z_index(m.default_state, slot)
                    err = abs(float(zdot[j]) - theirs_d) / max(1.0, abs(theirs_d))
                    key = "zdot" + (" (damped)" if var == "fiber_length" and not exact[i] else "")
                    worst[key] = max(worst.get(key, 0.0), err)
        for field, getter in FIELDS + (("normalized_tendon_force_derivative", "getFiberVelocity"),):
            theirs = np.array([getattr(mus, getter)(s) for mus in muscles])
            ours_ = np.asarray(getattr(info, field))
            scale = max(1e-3 * np.max(np.abs(theirs)), 1e-12)
            if field == "normalized_tendon_force_derivative":
                ours_, theirs = ours_[~rigid], theirs[~rigid]
                ex = exact[~rigid]
            else:
                ex = exact
            worst[field] = max(worst.get(field, 0.0), _rel(ours_[ex], theirs[ex], scale))
            worst[field + " (damped)"] = max(
                worst.get(field + " (damped)", 0.0), _rel(ours_[~ex], theirs[~ex], scale)
            )
        worst["udot"] = max(
            worst.get("udot", 0.0), _rel(np.asarray(udot)[:1], [coord.getAccelerationValue(s)], 1.0)
        )
        theirs_fa = [mus.calcInextensibleTendonActiveFiberForce(s, 1.0) for mus in muscles]
        worst["inextensible"] = max(worst.get("inextensible", 0.0), _rel(fa, theirs_fa, 1.0))
        for i, mus in enumerate(muscles):
            if rigid[i]:
                continue
            try:
                mus.computeInitialFiberEquilibrium(s)
            except RuntimeError:  # OpenSim's Newton gave up at this extreme pose
                continue
            worst["equilibrium"] = max(
                worst.get("equilibrium", 0.0),
                _rel(l_eq[i], mus.getStateVariableValue(s, "fiber_length"), 1e-6),
            )
    print({k: f"{v:.1e}" for k, v in worst.items()})
    assert worst.pop("equilibrium") < 1e-5
    assert worst.pop("udot") < 1e-8
    damped_worst = {k: worst.pop(k) for k in list(worst) if k.endswith("(damped)")}
    assert max(damped_worst.values()) < 1e-8, damped_worst
    assert max(worst.values()) < 1e-11, worst


# -- a real model: GPK_generic (msk-modelling-python 0.4.2), 100 Millard muscles --------------
GPK = ("msk-modelling-python", "0.4.2", "msk_modelling_python/models/GPK_generic.osim")
GPK_FIELDS = (
    "fiber_length", "pennation_angle", "tendon_length", "fiber_velocity", "active_fiber_force",
    "passive_fiber_elastic_force", "passive_fiber_damping_force", "tendon_force",
    "active_force_length_multiplier", "passive_force_multiplier", "force_velocity_multiplier",
    "activation_derivative",
)  # fmt: skip


@pytest.mark.oracle
def test_get_activation_is_clamped_as_opensims(slider, ours):
    """``get_activation`` returns OpenSim's ``getActivation``: the activation state (or the
    excitation, under ``ignore_activation_dynamics``) clamped to [minimum_activation, 1]; at
    activations and excitations 0 (below the minimum) and 0.6, to 1e-15."""
    m, om, s, muscles, coord = slider
    build, _, handles = ours
    for value in (0.0, 0.6):
        om.realizeVelocity(s)
        cv = om.getControls(s)
        for i in range(len(muscles)):
            cv.set(i, value)
        om.setControls(s, cv)
        for mus in muscles:
            if not mus.get_ignore_activation_dynamics():
                mus.setActivation(s, value)
        om.realizeDynamics(s)
        ref = np.array([mus.getActivation(s) for mus in muscles])
        n = len(muscles)
        st = build(0.0, 0.0, np.full(n, value), np.full(n, value), np.array([0.1] * n))
        got = np.array([float(h.get_activation(st)) for h in handles])
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-15)
        assert value > 0 or (ref > 0).all()  # the minimum applies


@jax.jit
def _kernel_with_tangent(P, L, V, e, a, lm, comp, act, dlm, dlo):
    """The muscles' quantities and their directional derivative along (fibre length
    ``dlm``, optimal fibre length ``dlo``): one compiled program for the comparison and
    for the central differences."""

    def f(lm, lo):
        return M.millard_equations({**P, "optimal_fiber_length": lo}, L, V, e, a, lm, comp, act)

    return jax.jvp(f, (lm, P["optimal_fiber_length"]), (dlm, dlo))


@pytest.mark.oracle
def test_gpk_generic_muscles_equal_opensim_and_gradients_equal_central_differences():
    """GPK_generic (a gait model: elastic tendons, fibre damping 0.01, its own active
    force-length curves and fitted passive curves given in full) loaded by ``load_osim``:
    at 4 random poses with random activations and fibre lengths, its 100 muscles (6 of them
    over a torus), evaluated from OpenSim's path lengths and speeds with
    the parameters the loader read: every quantity equals OpenSim's getter to 1e-11 where
    computed in closed form and 1e-7 through OpenSim's damped Newton (stopping at 1e-10 F,
    so ~1e-8 at damping 0.01). Then the derivative of every muscle's tendon force, fibre
    velocity and fibre force along its fibre-length state and its optimal fibre length
    (forward-mode autodiff, through the damped Newton's implicit step) equals central
    differences to 1e-6 (measured 1e-9)."""
    from data_fetch import fetch

    path = str(fetch(GPK[0], GPK[1], [GPK[2]])[GPK[2]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sj.io.load_osim(path)
    names = list(m.muscles)
    assert len(names) == 100
    handles = [m.muscles[n] for n in names]
    assert all(isinstance(h, sj.Millard2012EquilibriumMuscle) for h in handles)
    vals = [h._values() for h in handles]
    P = {k: jnp.array([v[k] for v in vals]) for k in vals[0]}
    comp = jnp.array([not h.ignore_tendon_compliance for h in handles])
    act = jnp.array([not h.ignore_activation_dynamics for h in handles])
    om = osim.Model(path)
    s = om.initSystem()
    fs = om.getForceSet()
    mus = [osim.Millard2012EquilibriumMuscle.safeDownCast(fs.get(n)) for n in names]
    coords = [om.getCoordinateSet().get(i) for i in range(om.getCoordinateSet().getSize())]
    rng = np.random.default_rng(5)
    rows = {k: [] for k in ("L", "V", "e", "a", "lm")}
    theirs = {f: [] for f in GPK_FIELDS}
    for _ in range(4):
        for c in coords:
            if not c.getLocked(s):
                c.setValue(
                    s, float(rng.uniform(max(c.getRangeMin(), -1.0), min(c.getRangeMax(), 1.0))), False
                )
                c.setSpeedValue(s, float(rng.normal()))
        om.realizeVelocity(s)
        cv = om.getControls(s)
        for i in range(cv.size()):
            cv.set(i, float(rng.uniform(0.0, 1.0)))
        om.setControls(s, cv)
        for mu in mus:
            mu.setActivation(s, float(rng.uniform(0.0, 1.0)))
            mu.setFiberLength(s, float(mu.getOptimalFiberLength() * rng.uniform(0.5, 1.4)))
        om.realizeVelocity(s)
        rows["L"].append([mu.getLength(s) for mu in mus])
        rows["V"].append([mu.getLengtheningSpeed(s) for mu in mus])
        rows["e"].append([mu.getExcitation(s) for mu in mus])
        rows["a"].append([mu.getStateVariableValue(s, "activation") for mu in mus])
        rows["lm"].append([mu.getStateVariableValue(s, "fiber_length") for mu in mus])
        for f in GPK_FIELDS:
            getter = "get" + "".join(w.title() for w in f.split("_"))
            theirs[f].append([getattr(mu, getter)(s) for mu in mus])
    # the 4 states side by side as 4 x 100 muscles
    Pk = {k: jnp.tile(v, 4) for k, v in P.items()}
    x = {k: jnp.asarray(np.concatenate(v)) for k, v in rows.items()}
    ck, ak = jnp.tile(comp, 4), jnp.tile(act, 4)
    zero = jnp.zeros_like(x["L"])
    info, _ = _kernel_with_tangent(Pk, x["L"], x["V"], x["e"], x["a"], x["lm"], ck, ak, zero, zero)
    for f in GPK_FIELDS:  # every muscle here is damped: the velocity from OpenSim's Newton
        t = np.concatenate(theirs[f])
        newton = f in (
            "fiber_velocity",
            "active_fiber_force",
            "passive_fiber_damping_force",
            "force_velocity_multiplier",
        )
        assert _rel(getattr(info, f), t, max(1e-3 * np.max(np.abs(t)), 1e-12)) < (
            1e-7 if newton else 1e-11
        ), f
    # gradients along (fibre length, optimal fibre length) against central differences
    dlm = jnp.asarray(rng.uniform(0.5, 1.0, zero.shape)) * 1e-2 * x["lm"]
    dlo = jnp.asarray(rng.uniform(0.5, 1.0, zero.shape)) * 1e-2 * Pk["optimal_fiber_length"]
    _, tan = _kernel_with_tangent(Pk, x["L"], x["V"], x["e"], x["a"], x["lm"], ck, ak, dlm, dlo)
    h = 1e-5
    up, _ = _kernel_with_tangent(
        {**Pk, "optimal_fiber_length": Pk["optimal_fiber_length"] + h * dlo}, x["L"], x["V"], x["e"], x["a"],
        x["lm"] + h * dlm, ck, ak, zero, zero,
    )  # fmt: skip
    down, _ = _kernel_with_tangent(
        {**Pk, "optimal_fiber_length": Pk["optimal_fiber_length"] - h * dlo}, x["L"], x["V"], x["e"], x["a"],
        x["lm"] - h * dlm, ck, ak, zero, zero,
    )  # fmt: skip
    for f in ("tendon_force", "fiber_velocity", "fiber_force"):
        fd = (np.asarray(getattr(up, f)) - np.asarray(getattr(down, f))) / (2 * h)
        ad = np.asarray(getattr(tan, f))
        print(f, "autodiff vs central differences", _rel(ad, fd, max(1e-3 * np.max(np.abs(fd)), 1e-9)))
        assert _rel(ad, fd, max(1e-3 * np.max(np.abs(fd)), 1e-9)) < 1e-6, f


def test_bad_millard_input_says_what_to_fix():
    """Properties out of range or curve parameters OpenSim's curve factory refuses: a
    ValueError naming the muscle and what to change; set_fiber_length clamps at the minimum
    fibre length as OpenSim's does; a rigid tendon has no fibre-length state."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    body = sj.Body(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.01)))
    slide = sj.MobilizedBody.Slider(matter.Ground(), sj.Transform(), body, sj.Transform(), name="slide")
    path = sj.GeometryPath(matter, "m")
    path.append_path_point(matter.Ground(), [-0.3, 0.0, 0.0])
    path.append_path_point(slide, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"'m': optimal_fiber_length must lie in \(0, inf\)"):
        sj.Millard2012EquilibriumMuscle(forces, path, optimal_fiber_length=0.0)
    with pytest.raises(ValueError, match="'m': minimum_activation must be >= 0.01 for the undamped"):
        sj.Millard2012EquilibriumMuscle(forces, path, fiber_damping=0.0, minimum_activation=0.0)
    with pytest.raises(ValueError, match="'m': FiberForceLengthCurve's .* all given or all left out"):
        sj.Millard2012EquilibriumMuscle(forces, path, fiber_force_length_curve={"curviness": 0.5})
    with pytest.raises(ValueError, match="'m': tendon_force_length_curve has no \\['stiffness'\\]"):
        sj.Millard2012EquilibriumMuscle(forces, path, tendon_force_length_curve={"stiffness": 30.0})
    with pytest.raises(ValueError, match="'m': ActiveForceLengthCurve needs min_norm_active_fiber_length <"):
        sj.Millard2012EquilibriumMuscle(
            forces, path, active_force_length_curve={"transition_norm_fiber_length": 0.3}
        )
    mus = sj.Millard2012EquilibriumMuscle(
        forces, path, name="m", optimal_fiber_length=0.1, tendon_slack_length=0.15
    )
    s = system.realize_topology()
    with pytest.raises(ValueError, match="'m': fiber_damping must lie in"):
        mus.set_property(s, "fiber_damping", -1.0)
    # the optional curve properties left out hold OpenSim's fitted values (no NaN in the State)
    assert float(mus.get_property(s, "fse_stiffness_at_one_norm_force")) == pytest.approx(1.375 / 0.049)
    assert float(mus.get_property(s, "fpe_stiffness_at_one_norm_force")) == pytest.approx(2.0 / 0.7)
    system.realize(s, sj.Stage.POSITION)  # a concrete State passes realize's checks
    lmin = float(mus.get_minimum_fiber_length(s))
    assert lmin == pytest.approx(0.1 * (0.47 - 0.0259))
    assert float(mus.get_fiber_length_state(mus.set_fiber_length(s, 0.01))) == lmin
