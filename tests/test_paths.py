"""Paths (``sj.GeometryPath``, OpenSim's ``GeometryPath`` of path points): lengths,
lengthening speeds and moment arms against OpenSim 4.6 on real models over their range of
motion (gait14dof22musc: 22 muscle paths with conditional and moving points; arm26: its
paths without wrapping; wrapped paths: test_wrapping.py), by hand on a small model, batched
and differentiated; bad input.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_io_osim import model_path

import simjax as sj

jax.config.update("jax_enable_x64", True)

osim = pytest.importorskip("opensim")


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sj.io.load_osim(path)


def _random_poses(om, s, rng, n, conditional_edges=()):
    """Yield n OpenSim states at random in-range coordinates and speeds (some put exactly
    on the conditional points' range bounds)."""
    coords = [om.getCoordinateSet().get(i) for i in range(om.getCoordinateSet().getSize())]
    for k in range(n):
        for c in coords:
            lo, hi = max(c.getRangeMin(), -2.0), min(c.getRangeMax(), 2.0)
            c.setValue(s, float(rng.uniform(lo, hi)), False)
            c.setSpeedValue(s, float(rng.normal()))
        if k < len(conditional_edges):  # a coordinate exactly on a conditional point's bound
            name, value = conditional_edges[k]
            om.getCoordinateSet().get(name).setValue(s, value, False)
        om.realizeVelocity(s)
        yield coords


def _without_wrapped_muscles(path, tmp_path):
    """A copy of the model file without the muscles whose paths wrap (both sides read it)."""
    import re

    text = open(path).read()
    text = re.sub(
        r"<(\w+Muscle\w*) name=\"[^\"]+\">.*?</\1>",
        lambda mt: "" if "<wrap_object>" in mt.group(0) else mt.group(0),
        text,
        flags=re.S,
    )
    out = tmp_path / "unwrapped.osim"
    out.write_text(text)
    return str(out)


def _ours(m, s, coords):
    st = m.set_coordinate_values(m.default_state, {c.getName(): c.getValue(s) for c in coords})
    st = m.set_coordinate_speeds(st, {c.getName(): c.getSpeedValue(s) for c in coords})
    return m.system.realize(st, sj.Stage.VELOCITY)


@pytest.mark.parametrize("key", ["gait14dof22musc", "arm26"])
def test_lengths_speeds_and_moment_arms_equal_opensims(key, tmp_path):
    """Every path simjax reads (all 22 of gait14dof22musc; arm26's one path without wrap
    objects, BICshort: the other five are compared in test_wrapping.py) at 8 random in-range poses and
    speeds, 4 of them with a knee or hip exactly on a conditional point's bound: length and
    lengthening speed to 1e-12 m (m/s), moment arms about every coordinate to 1e-12 m,
    against OpenSim's GeometryPath.

    A moving point's functions read their coordinate clamped to its range, in OpenSim as
    here (measured: rect_fem_r's point at knee 0.3 rad sits where it does at the range's
    end, 0.17453293). Beyond the range OpenSim's lengthening speed and moment arm are not
    the derivative of its own length (rect_fem_r at knee 0.3: moment arm 0.0292, central
    differences of OpenSim's length 0.0693); simjax's are (autodiff of the length), so
    there the derivatives of paths with moving points are not compared."""
    path = model_path(key)
    if key == "arm26":  # every path read; the wrapped ones are compared in test_wrapping.py
        full = _load(path)
        assert len(full.paths) == 6 and not any("Wrap" in k for k in full.ignored)
        path = _without_wrapped_muscles(path, tmp_path)
    m = _load(path)
    om = osim.Model(path)
    s = om.initSystem()
    muscles = om.getMuscles()
    names = [muscles.get(i).getName() for i in range(muscles.getSize())]
    ours = [n for n in names if n in m.paths]
    if key == "gait14dof22musc":
        assert ours == names  # every path read: no wrap objects in this model
        edges = [("knee_angle_r", -0.558505), ("knee_angle_r", 0.174533), ("hip_flexion_r", 0.785398)]
        edges.append(("knee_angle_l", -0.558505))
    else:  # arm26 without its wrapped muscles (over cylinders and ellipsoids: compared in
        # test_wrapping.py, where OpenSim's moment arms are not -dL/dq)
        assert ours == names == ["BICshort"]
        edges = []
    rng = np.random.default_rng(7)
    worst = {"L": 0.0, "v": 0.0, "r": 0.0}
    moving = {
        muscles.get(i).getName()
        for i in range(muscles.getSize())
        for pts in [muscles.get(i).getGeometryPath().getPathPointSet()]
        if any(pts.get(j).getConcreteClassName() == "MovingPathPoint" for j in range(pts.getSize()))
    }
    for coords in _random_poses(om, s, rng, 8, edges):
        inside = all(c.getRangeMin() <= c.getValue(s) <= c.getRangeMax() for c in coords)
        st = _ours(m, s, coords)
        L = np.asarray(m.matter.calc_path_lengths(st))
        v = np.asarray(m.matter.calc_path_lengthening_speeds(st))
        r = np.asarray(m.matter.calc_path_moment_arms(st))
        order = [m.matter.get_path(i).name for i in range(m.matter.get_num_paths())]
        for name in ours:
            gp = muscles.get(name).getGeometryPath()
            k = order.index(name)
            worst["L"] = max(worst["L"], abs(L[k] - gp.getLength(s)))
            if not inside and name in moving:
                continue
            worst["v"] = max(worst["v"], abs(v[k] - gp.getLengtheningSpeed(s)))
            for c in coords:
                theirs = gp.computeMomentArm(s, c)
                mine = r[k, m.coordinates[c.getName()].u_index(st)]
                worst["r"] = max(worst["r"], abs(mine - theirs))
        # the handle's own methods give the same numbers
        h = m.paths[ours[0]]
        assert float(h.get_length(st)) == pytest.approx(float(L[order.index(ours[0])]), abs=1e-15)
    print(key, {k: f"{x:.1e}" for k, x in worst.items()})
    assert worst["L"] < 1e-12 and worst["v"] < 1e-12 and worst["r"] < 1e-12


def _pendulum_path():
    """A pin (about z) with a rod along x; a path from Ground (0, 1, 0) to the rod's tip,
    through a conditional point active for q in [0, 1] and a moving point."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.5, 0, 0], sj.Inertia(0.01, 0.3, 0.3)))
    rod = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    path = sj.GeometryPath(matter, "cable")
    path.append_path_point(matter.Ground(), [0.0, 1.0, 0.0])
    path.append_conditional_path_point(rod, [0.5, 0.2, 0.0], (rod, 0), (0.0, 1.0))
    path.append_moving_path_point(rod, [1.0, 0.0, 0.0], y=(sj.Function.Linear([0.1, 0.0]), (rod, 0)))
    return system, matter, rod, path


def test_a_small_path_by_hand_batched_and_differentiated():
    """Lengths by hand (through the conditional point inside its range, straight past it
    outside), the moment arm equal to -dL/dq by central differences, the lengthening speed
    equal to dL/dt, one compile for a vmapped batch, gradients finite."""
    system, matter, rod, path = _pendulum_path()
    state = system.realize_topology()

    def by_hand(q):
        c, s_ = np.cos(q), np.sin(q)
        R = np.array([[c, -s_, 0], [s_, c, 0], [0, 0, 1]])
        a, mid, tip = np.array([0, 1.0, 0]), R @ [0.5, 0.2, 0], R @ [1.0, 0.1 * q, 0]
        if 0.0 <= q <= 1.0:
            return np.linalg.norm(mid - a) + np.linalg.norm(tip - mid)
        return np.linalg.norm(tip - a)

    for q in (-0.5, 0.0, 0.3, 1.0, 1.4):
        st = system.realize(rod.set_one_q(state, 0, q).with_u(jnp.array([0.7])), sj.Stage.VELOCITY)
        assert float(path.get_length(st)) == pytest.approx(by_hand(q), abs=1e-14)
        h = 1e-6
        if abs(q) > 1e-3 and abs(q - 1.0) > 1e-3:  # away from the conditional point's switch
            dL = (by_hand(q + h) - by_hand(q - h)) / (2 * h)
            assert float(path.compute_moment_arm(st, (rod, 0))) == pytest.approx(-dL, abs=1e-8)
            assert float(path.get_lengthening_speed(st)) == pytest.approx(0.7 * dL, abs=1e-8)
        pts = path.get_current_path(st)
        assert pts.shape == ((3, 3) if 0.0 <= q <= 1.0 else (2, 3))
    qs = jnp.linspace(-0.5, 1.5, 64)
    lengths = jax.jit(
        jax.vmap(lambda q: matter.calc_path_lengths(system.realize(state.with_q(q[None]), sj.Stage.POSITION)))
    )(qs)
    np.testing.assert_allclose(np.asarray(lengths)[:, 0], [by_hand(float(q)) for q in qs], atol=1e-14)
    g = jax.grad(lambda q: path.get_length(system.realize(state.with_q(q[None]), sj.Stage.POSITION)))(0.3)
    assert np.isfinite(g) and float(g) == pytest.approx(
        float(
            -path.compute_moment_arm(
                system.realize(state.with_q(jnp.array([0.3])), sj.Stage.POSITION), (rod, 0)
            )
        )
    )


def test_bad_paths_are_refused_naming_the_path():
    system, matter, rod, path = _pendulum_path()
    with pytest.raises(ValueError, match="station is 3 finite numbers"):
        path.append_path_point(rod, [0.0, np.nan, 0.0])
    with pytest.raises(ValueError, match="lower <= upper"):
        path.append_conditional_path_point(rod, [0, 0, 0], (rod, 0), (1.0, 0.0))
    with pytest.raises(TypeError, match="coordinate"):
        path.append_conditional_path_point(rod, [0, 0, 0], "knee", (0.0, 1.0))
    with pytest.raises(TypeError, match="MobilizedBody"):
        path.append_path_point("rod", [0, 0, 0])
    lonely = sj.GeometryPath(matter, "lonely")
    lonely.append_path_point(rod, [0, 0, 0])
    with pytest.raises(ValueError, match="'lonely' has 1 point"):
        system.realize_topology()


def _spring_models(tmp_path):
    """gait14dof22musc with every muscle replaced by a PathSpring on the muscle's path
    (resting lengths 0.10-0.25 m, some taut, some slack; stiffness 1-3 kN/m; dissipation
    0.3 s/m) and its contact forces removed, as an OpenSim 3.x file and as OpenSim 4.6
    writes it back (4.x sockets)."""
    import re

    text = open(model_path("gait14dof22musc")).read()
    text = re.sub(r"<HuntCrossleyForce\b.*?</HuntCrossleyForce>", "", text, flags=re.S)
    count = [0]

    def spring(m):
        i = count[0]
        count[0] += 1
        gp = re.search(r"<GeometryPath\b.*?</GeometryPath>", m.group(0), flags=re.S).group(0)
        return (
            f'<PathSpring name="{m.group(1)}">{gp}<resting_length>{0.1 + 0.05 * (i % 4)}</resting_length>'
            f"<stiffness>{1000.0 * (1 + i % 3)}</stiffness><dissipation>0.3</dissipation></PathSpring>"
        )

    text = re.sub(r'<Thelen2003Muscle name="([^"]+)">.*?</Thelen2003Muscle>', spring, text, flags=re.S)
    v3 = tmp_path / "springs3.osim"
    v3.write_text(text)
    v4 = tmp_path / "springs4.osim"
    osim.Model(str(v3)).printToXML(str(v4))
    return [str(v3), str(v4)]


def test_path_springs_move_the_model_as_opensim_does(tmp_path):
    """22 PathSprings on gait14dof22musc's muscle paths (conditional and moving points
    included), read from the 3.x file and from OpenSim 4.6's 4.x rewrite: at 5 random
    states every spring's tension equals OpenSim's (getTension) to 1e-9 relative and the
    generalized accelerations (gravity, the model's other forces and the springs) to 1e-10
    of the largest (measured: 2e-11; one coordinate's near-zero acceleration differs by
    1e-8 absolute with the springs off too, as in test_io_osim: the mass matrix's
    conditioning)."""
    for path in _spring_models(tmp_path):
        m = _load(path)
        assert len(m.paths) == 22 and not any("PathSpring" in k for k in m.ignored)
        springs = [f for f in m.forces._elements if isinstance(f, sj.PathSpring)]
        assert len(springs) == 22
        om = osim.Model(path)
        s = om.initSystem()
        fs = om.getForceSet()
        rng = np.random.default_rng(3)
        worst_T, worst_a, taut = 0.0, 0.0, 0
        for coords in _random_poses(om, s, rng, 5):
            om.realizeAcceleration(s)
            st = m.system.realize(_ours(m, s, coords), sj.Stage.ACCELERATION)
            for sp_ in springs:
                theirs = osim.PathSpring.safeDownCast(fs.get(sp_.get_geometry_path().name)).getTension(s)
                mine = float(sp_.get_tension(st))
                worst_T = max(worst_T, abs(mine - theirs) / max(1.0, abs(theirs)))
                taut += theirs > 0
            ours = np.array([float(st.udot[m.coordinates[c.getName()].u_index(st)]) for c in coords])
            theirs = np.array([c.getAccelerationValue(s) for c in coords])
            worst_a = max(worst_a, np.max(np.abs(ours - theirs)) / max(1.0, np.max(np.abs(theirs))))
        print(path.rsplit("/", 1)[-1], f"tension {worst_T:.1e}, udot {worst_a:.1e}, taut {taut} of 110")
        assert 20 < taut < 110  # both regimes exercised
        assert worst_T < 1e-9 and worst_a < 1e-10


def test_a_path_spring_does_the_work_its_tension_does():
    """On the small path (a moving point included), the spring's power F.V + tau.u equals
    -T dL/dt at random speeds: its forces are -T dL/dq, moving station included."""
    system, matter, rod, path = _pendulum_path()
    forces = sj.GeneralForceSubsystem(system)
    spring = sj.PathSpring(forces, path, stiffness=50.0, resting_length=0.05, dissipation=0.2)
    state = system.realize_topology()
    for q, u in ((0.3, 0.7), (1.3, -2.0), (0.8, 1.5)):
        st = system.realize(rod.set_one_q(state, 0, q).with_u(jnp.array([u])), sj.Stage.VELOCITY)
        T = float(spring.get_tension(st))
        assert T > 0
        P = float(spring.calc_power(st))
        assert P == pytest.approx(-T * float(path.get_lengthening_speed(st)), rel=1e-12)
    with pytest.raises(ValueError, match="stiffness must be finite and >= 0"):
        sj.PathSpring(forces, path, stiffness=-1.0, resting_length=0.5)
    with pytest.raises(TypeError, match="sj.GeometryPath"):
        sj.PathSpring(forces, "cable", stiffness=1.0, resting_length=0.5)
