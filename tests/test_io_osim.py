"""``sj.io.load_osim`` against OpenSim itself on real published models.

The models come from PyPI packages (``osim-rl`` sdist: arm26, gait14dof22musc, MoBL_ARMS;
``msk-modelling-python`` wheel: Full_Body, GPK_generic), fetched once into a cache; the
tests skip with a message when offline. OpenSim (the ``opensim`` package, Simbody 3.9) loads
the same file with its forces removed (also a small OpenSim-written model,
``data/synthetic_joints.osim``, with the joint kinds, functions and constraints the real
models lack); at random in-range states both must give the same
body transforms, marker locations, mass matrix and constrained forward dynamics.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch

import simjax as sj
from simjax import _osim_functions as ofn
from simjax.io import ModelFileError

jax.config.update("jax_enable_x64", True)

osim = pytest.importorskip("opensim")

MODELS = {
    "arm26": ("osim-rl", "3.0.11", "osim/models/arm26.osim"),
    "gait14dof22musc": ("osim-rl", "3.0.11", "osim/models/gait14dof22musc_20170320.osim"),
    "MoBL_ARMS": ("osim-rl", "3.0.11", "osim/models/MoBL_ARMS_J.osim"),
    "GPK_generic": ("msk-modelling-python", "0.4.2", "msk_modelling_python/models/GPK_generic.osim"),
    "Full_Body": ("msk-modelling-python", "0.4.2", "msk_modelling_python/models/Full_Body_with_ball.osim"),
}

MOTION = {0: "undefined", 1: "rotational", 2: "translational", 3: "coupled"}


SYNTHETIC = Path(__file__).with_name("data") / "synthetic_joints.osim"


def model_path(key: str) -> str:
    if key == "synthetic":
        return str(SYNTHETIC)
    dist, version, member = MODELS[key]
    return str(fetch(dist, version, [member])[member])


def _vec(v) -> np.ndarray:
    return np.array([v.get(i) for i in range(v.size())])


def _mat(m, n) -> np.ndarray:
    return np.array([[m.get(i, j) for j in range(n)] for i in range(n)])


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sj.io.load_osim(path)


# ----------------------------------------------------------------------------- functions


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_spline_functions_equal_opensims(n):
    rng = np.random.default_rng(n)
    x = np.cumsum(rng.uniform(0.2, 1.0, n))
    y = rng.normal(size=n)
    ts = np.concatenate([np.linspace(x[0] - 1, x[-1] + 1, 31), x + 1e-3])
    for ours, theirs in [
        (ofn.SimmSpline, osim.SimmSpline),
        (ofn.PiecewiseLinearFunction, osim.PiecewiseLinearFunction),
        (ofn.PiecewiseConstantFunction, osim.PiecewiseConstantFunction),
    ]:
        f = theirs()
        for a, b in zip(x, y, strict=True):
            f.addPoint(float(a), float(b))
        g = ours(x, y)
        v = np.array([float(g(np.array([t]))) for t in ts])
        vo = np.array([f.calcValue(osim.Vector(1, float(t))) for t in ts])
        np.testing.assert_allclose(v, vo, rtol=0, atol=1e-13, err_msg=ours.__name__)
        if ours is not ofn.PiecewiseConstantFunction:
            d = np.array([float(jax.grad(lambda t: g(t[None]))(t)) for t in ts])
            do = np.array([f.calcDerivative((0,), osim.Vector(1, float(t))) for t in ts])
            np.testing.assert_allclose(d, do, rtol=0, atol=1e-12, err_msg=ours.__name__)


def test_natural_cubic_spline_is_natural_and_interpolates():
    # (OpenSim's NaturalCubicSpline is not in its Python API: check the defining properties.)
    x = np.array([0.0, 0.4, 1.1, 1.5, 2.6])
    y = np.array([0.2, -0.3, 0.8, 0.1, 0.5])
    g = ofn.NaturalCubicSpline(x, y)
    f = lambda t: g(jnp.reshape(t, (1,)))
    np.testing.assert_allclose([float(f(t)) for t in x], y, atol=1e-14)
    d2 = jax.grad(jax.grad(f))
    assert abs(float(d2(x[0] + 1e-9))) < 1e-6 and abs(float(d2(x[-1] - 1e-9))) < 1e-6
    # C2 at an interior knot
    k = x[2]
    assert float(d2(k - 1e-9)) == pytest.approx(float(d2(k + 1e-9)), abs=1e-6)


# ----------------------------------------------------------------------------- real models


def _without_muscles(path: str, names: tuple[str, ...]) -> str:
    """A copy of a model file (in the temporary folder) without the named muscles."""
    import re
    import tempfile

    text = Path(path).read_text()
    for name in names:
        text = re.sub(rf'<(\w+Muscle) name="{name}">.*?</\1>', "", text, flags=re.S)
    out = Path(tempfile.gettempdir()) / f"simjax_{Path(path).stem}_without_{'_'.join(names)}.osim"
    out.write_text(text)
    return str(out)


def _opensim_side(path):
    om = osim.Model(path)
    om.updForceSet().clearAndDestroy()
    s = om.initSystem()
    cs = om.getCoordinateSet()
    coords = [cs.get(i) for i in range(cs.getSize())]
    nu = s.getNU()
    uslot = {}
    for c in coords:  # the U slot of each coordinate's speed
        s.setU(osim.Vector(nu, 0.0))
        c.setSpeedValue(s, 1.0)
        uslot[c.getName()] = int(np.argmax(np.abs(_vec(s.getU()))))
    s.setU(osim.Vector(nu, 0.0))
    return om, s, coords, uslot


@pytest.mark.oracle
@pytest.mark.parametrize(
    "key",
    # Full_Body (54 bodies, 27 constraints) compiles for ~2 min: opt in with `pytest -m slow`.
    ["synthetic", *(pytest.param(k, marks=pytest.mark.slow) if k == "Full_Body" else k for k in MODELS)],
)
def test_real_model_matches_opensim(key, tmp_path):
    path = model_path(key)
    _load(path)  # the whole file loads (its forces too)
    om, s, coords, uslot = _opensim_side(path)
    # both sides then read OpenSim's copy without the ForceSet: only gravity acts on either
    # side, and forces that would be disabled anyway (GPK_generic's 100 muscles on wrapped
    # paths) cost no compilation
    path = str(tmp_path / "no_forces.osim")
    om.printToXML(path)
    m = _load(path)
    names = [c.getName() for c in coords]

    # names, motion types, defaults, ranges and flags as OpenSim reads them
    assert names == m.coordinate_names
    for c in coords:
        mc = m.coordinates[c.getName()]
        assert MOTION[int(c.getMotionType())] == mc.motion_type, c.getName()
        assert (c.getRangeMin(), c.getRangeMax()) == pytest.approx(mc.range, abs=1e-15)
        assert c.getDefaultValue() == pytest.approx(mc.default_value, abs=1e-15)
        assert (bool(c.getDefaultClamped()), bool(c.getDefaultLocked())) == (mc.clamped, mc.locked)
    ms = om.getMarkerSet()
    assert [ms.get(i).getName() for i in range(ms.getSize())] == list(m.markers)
    assert om.getNumBodies() == len(m.bodies) - 1

    ou = np.array([uslot[n] for n in names])
    su = m.coordinate_u_indices(m.default_state, names)
    body_names = [b for b in m.bodies if m.bodies[b].index != 0]
    body_idx = np.array([m.bodies[b].index for b in body_names])
    marker_names = list(m.markers)

    @jax.jit
    def ours(state):
        r = m.system.realize(state, sj.Stage.ACCELERATION)
        R, p = m.matter.get_body_transforms(r)
        mk = (
            jnp.stack([m.markers[n].find_location_in_ground(r) for n in marker_names])
            if marker_names
            else None
        )
        return r.udot, m.matter.calc_mass_matrix(r), R[body_idx], p[body_idx], mk

    rng = np.random.default_rng(7)
    nu = s.getNU()
    worst = dict.fromkeys(("X", "markers", "M", "udot", "udot_loops", "cond_M"), 0.0)
    osim_cons = [om.getConstraintSet().get(i) for i in range(om.getConstraintSet().getSize())]
    loops = [c for n, c in m.constraints.items() if not n.endswith("_locked")]

    def compare(st, key_udot):
        om.realizeAcceleration(s)
        udot, M, R, p, mk = (None if a is None else np.asarray(a) for a in ours(st))
        Mo = osim.Matrix()
        om.getMatterSubsystem().calcM(s, Mo)
        Mo = _mat(Mo, nu)[np.ix_(ou, ou)]
        worst["M"] = max(worst["M"], np.abs(M[np.ix_(su, su)] - Mo).max() / np.abs(Mo).max())
        worst["cond_M"] = max(worst["cond_M"], float(np.linalg.cond(Mo)))
        ud = _vec(s.getUDot())[ou]
        err = np.abs(udot[su] - ud).max() / max(1.0, np.abs(ud).max())
        worst[key_udot] = max(worst[key_udot], err)
        for k, bn in enumerate(body_names):
            T = om.getBodySet().get(bn).getTransformInGround(s)
            Ro = np.array([[T.R().get(i, j) for j in range(3)] for i in range(3)])
            worst["X"] = max(worst["X"], np.abs(R[k] - Ro).max(), np.abs(p[k] - _vec(T.p())).max())
        if marker_names:
            mo = np.array([_vec(ms.get(n).getLocationInGround(s)) for n in marker_names])
            worst["markers"] = max(worst["markers"], np.abs(mk - mo).max())

    base = m.default_state
    for e in m.forces._elements:  # OpenSim's ForceSet was cleared: gravity only on both sides
        if not isinstance(e, sj.Force.UniformGravity):
            base = e.disable(base)

    def ours_state(disabled: bool):
        st = m.set_coordinate_values(base, {c.getName(): c.getValue(s) for c in coords})
        st = m.set_coordinate_speeds(st, {c.getName(): c.getSpeedValue(s) for c in coords})
        for c in loops if disabled else ():
            st = c.disable(st)
        return st

    for _ in range(5):
        # (a) random in-range q and u, the model's constraints (couplers, welds) off in both:
        # all of the tree kinematics and dynamics, velocity terms included
        for c in coords:
            locked = c.getLocked(s)
            if not locked:
                lo, hi = max(c.getRangeMin(), -2.0), min(c.getRangeMax(), 2.0)
                c.setValue(s, float(rng.uniform(lo, hi)), False)
            c.setSpeedValue(s, 0.0 if locked else float(rng.normal()))
        for c in osim_cons:
            c.setIsEnforced(s, False)
        compare(ours_state(True), "udot")
        if not loops:
            continue
        # (b) the same q assembled by OpenSim onto its constraints, at rest: constrained
        # forward dynamics with the couplers and welds on
        for c in osim_cons:
            c.setIsEnforced(s, True)
        om.assemble(s)
        for c in coords:
            c.setSpeedValue(s, 0.0)
        compare(ours_state(False), "udot_loops")
    print(key, {k: f"{v:.1e}" for k, v in worst.items()})
    assert worst["X"] < 1e-12 and worst["markers"] < 1e-12
    assert worst["M"] < 1e-12
    # (measured: <= 3e-9 although cond(M) reaches 8e8 on GPK/Full_Body's light bodies)
    assert worst["udot"] < 1e-8 and worst["udot_loops"] < 1e-8


# ----------------------------------------------------------------------------- bad files

GOOD = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="40000">
  <Model name="tiny">
    <gravity>0 -9.8 0</gravity>
    <Ground name="ground"/>
    <BodySet name="bodyset"><objects>
      <Body name="link"><mass>1</mass><mass_center>0 -0.5 0</mass_center>
        <inertia>0.1 0.01 0.1 0 0 0</inertia></Body>
    </objects></BodySet>
    <JointSet name="jointset"><objects>
      <PinJoint name="hinge">
        <socket_parent_frame>/ground</socket_parent_frame>
        <socket_child_frame>/bodyset/link</socket_child_frame>
        <coordinates><Coordinate name="q1"><default_value>0.3</default_value></Coordinate></coordinates>
      </PinJoint>
    </objects></JointSet>
    <ConstraintSet name="constraintset"><objects>COUPLER</objects></ConstraintSet>
    <MarkerSet name="markerset"><objects>
      <Marker name="tip"><socket_parent_frame>/bodyset/link</socket_parent_frame>
        <location>0 -1 0</location></Marker>
    </objects></MarkerSet>
  </Model>
</OpenSimDocument>
"""


def _write(tmp_path, text, name="m.osim"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_small_model_loads_with_handles(tmp_path):
    m = sj.io.load_osim(_write(tmp_path, GOOD.replace("COUPLER", "")))
    assert list(m.coordinates) == ["q1"] and list(m.markers) == ["tip"]
    st = m.system.realize(m.state, sj.Stage.POSITION)
    assert float(m.coordinate("q1").get_value(st)) == pytest.approx(0.3)
    tip = np.asarray(m.marker("tip").find_location_in_ground(st))
    np.testing.assert_allclose(tip, [np.sin(0.3), -np.cos(0.3), 0.0], atol=1e-14)
    with pytest.raises(KeyError, match="did you mean"):
        m.coordinate("q")


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda t: t.replace("<PinJoint", "<HingeJoint").replace("</PinJoint>", "</HingeJoint>"),
            r"m\.osim:\d+ <HingeJoint name=\"hinge\">: joint type HingeJoint is not supported",
        ),
        (lambda t: t.replace("</Model>", "</Modle>"), r"m\.osim:\d+:\d+: malformed XML"),
        (
            lambda t: t.replace("/bodyset/link</socket_parent_frame>", "/bodyset/lnk</socket_parent_frame>"),
            r"<Marker name=\"tip\">: refers to frame '/bodyset/lnk', which is not in the model",
        ),
        (
            lambda t: t.replace(
                "COUPLER",
                '<CoordinateCouplerConstraint name="cc">'
                "<independent_coordinate_names>q1</independent_coordinate_names>"
                "<dependent_coordinate_name>q9</dependent_coordinate_name>"
                '<LinearFunction name="coupled_coordinates_function">'
                "<coefficients>1 0</coefficients></LinearFunction></CoordinateCouplerConstraint>",
            ),
            r"m\.osim:\d+ <CoordinateCouplerConstraint name=\"cc\">: names coordinate 'q9', which is not in",
        ),
        (lambda t: t.replace("<mass>1</mass>", "<mass>-1</mass>"), r"<Body name=\"link\">: mass must be"),
    ],
)
def test_bad_files_name_file_line_and_element(tmp_path, edit, match):
    with pytest.raises(ModelFileError, match=match):
        sj.io.load_osim(_write(tmp_path, edit(GOOD).replace("COUPLER", "")))


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.osim"):
        sj.io.load_osim(tmp_path / "nope.osim")


def test_summary_mot_round_trip_and_marker_ik(tmp_path):
    m = sj.io.load_osim(_write(tmp_path, GOOD.replace("COUPLER", "")))
    text = m.summary()
    assert "link" in text and "Pin" in text and "q1 [q0, rotational" in text and "tip" in text
    # a trajectory to .mot (degrees) that OpenSim reads with the same values, and back to q
    t = np.linspace(0.0, 1.0, 11)
    q = np.sin(t)[:, None]
    path = tmp_path / "traj.mot"
    sj.io.write_mot(path, m.table_from_q(t, q, in_degrees=True))
    tab = osim.TimeSeriesTable(str(path))
    assert list(tab.getColumnLabels()) == ["q1"]
    assert tab.getTableMetaDataAsString("inDegrees") == "yes"
    np.testing.assert_allclose(tab.getDependentColumn("q1").to_numpy(), np.rad2deg(q[:, 0]), rtol=1e-15)
    np.testing.assert_allclose(m.q_from_table(sj.io.read_mot(path)), q, rtol=1e-15)
    # an OpenSim states file: value and speed columns by state path; speeds are not values
    states = sj.io.CoordinateTable(
        t, ["/jointset/pin/q1/value", "/jointset/pin/q1/speed"], np.c_[q, np.cos(t)], in_degrees=False
    )
    np.testing.assert_array_equal(m.q_from_table(states), q)
    # markers -> Assembler: recover the angle from the marker's location
    markers = m.make_markers()
    asm = m.make_assembler(markers)
    markers.move_all_observations(np.array([[np.sin(0.7), -np.cos(0.7), 0.0]]))
    st, _ = asm.assemble(m.state)
    assert float(m.coordinate("q1").get_value(st)) == pytest.approx(0.7, abs=1e-7)
