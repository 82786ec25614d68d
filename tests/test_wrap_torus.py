"""Paths over a torus (``sj.WrapTorus``: OpenSim's ``WrapTorus``) against OpenSim 4.6: the
six obturator internus paths of GPK_generic at random hip poses (lengths, moment arms by
autodiff against central differences and against OpenSim's ``computeMomentArm``), a cable
through a torus's hole built in both (quadrants), scaling, the drawn path, and bad input.

OpenSim's torus is not a geodesic construction: it finds the point c of the torus's centre
circle nearest the straight segment by a Levenberg-Marquardt search (MINPACK's ``lmdif`` as
OpenSim changed it: a fixed finite-difference step, tolerances 1e-4, and a residual whose
radius term carries a factor 2) from each end, then wraps the segment over a cylinder of the
tube's radius tangent to the circle at c, on its side towards the torus's axis. simjax
replays that search step by step, so its lengths equal OpenSim's to roundoff.

Measured outside the tests (a 150 s compile): MoBL_ARMS's 11 paths over its 11 tori (one
to four wraps each, the tori among cylinders and ellipsoids) equal OpenSim's to 3.4e-15 m
at 12 random poses.
"""

from __future__ import annotations

import re
import warnings
import xml.etree.ElementTree as ET

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


@pytest.fixture(scope="module")
def gpk(tmp_path_factory):
    """GPK_generic with only its six muscles over a torus (pelvisOITorus1-3, left and right),
    each with its torus wrap alone (the file's second wrap, a sphere on the femoral head,
    removed: two wraps per path cost a long compile; the sphere is checked elsewhere)."""
    text = open(model_path("GPK_generic")).read()

    def keep(m):
        g = m.group(0)
        if "OITorus" not in g:
            return ""
        return re.sub(r"<PathWrap name=\"pathwrap_0\">.*?</PathWrap>", "", g, flags=re.S)

    text = re.sub(r"<(\w+Muscle\w*) name=\"[^\"]+\">.*?</\1>", keep, text, flags=re.S)
    path = tmp_path_factory.mktemp("torus") / "gpk_torus.osim"
    path.write_text(text)
    m = _load(str(path))
    om = osim.Model(str(path))
    s = om.initSystem()
    return m, om, s


def _engaged(gp, s):
    cp = gp.getCurrentPath(s)
    return sum(cp.get(i).getConcreteClassName() == "PathWrapPoint" for i in range(cp.getSize())) > 0


@pytest.mark.oracle
def test_gpk_torus_paths_lengths_and_moment_arms_equal_opensims(gpk):
    """GPK_generic's six obturator internus paths over their tori (inner radius 0.019,
    outer 0.02, quadrant "all"), at 24 random hip poses (both sides, wide ranges so that
    some paths do not wrap: 139 of 144 path-poses wrap): lengths equal OpenSim's getLength
    to 1e-12 m (measured 1.0e-15); moment arms (-dL/dq by autodiff, through the replayed
    search's implicit derivative) finite at every pose. At 3 of the poses, every hip
    coordinate: the moment arms equal central differences of simjax's own length to 1e-8 m
    (measured 2.1e-10) and of OpenSim's length (measured 3.8e-10). OpenSim's
    computeMomentArm (the tension's forces at its tangent points) is not the derivative of
    its own length over a torus: measured 8.2e-3 m apart where the arms reach 4.6e-2 m,
    because it misses how the cylinder it wraps over moves with the pose (with that
    cylinder held still, simjax's derivative comes within 3.3e-3 m of it; the rest is its
    cylinder's constructed tangent points, as over a plain cylinder). Compared at 2e-2 m:
    a bound on OpenSim's construction, not on simjax."""
    m, om, s = gpk
    assert not any("Wrap" in k for k in m.ignored)
    mus = om.getMuscles()
    names = [mus.get(i).getName() for i in range(mus.getSize())]
    assert len(names) == 6
    st0 = m.default_state
    paths = m.system.model_for(m.system.realize(st0, sj.Stage.POSITION)).paths
    assert {paths.wraps.kind[pw[0][0]] for pw in paths.wraps.path_wraps} == {"torus"}
    idx = np.asarray([paths.names.index(n) for n in names])
    coords = [om.getCoordinateSet().get(i) for i in range(om.getCoordinateSet().getSize())]
    hip = [c for c in coords if c.getName().startswith("hip") and not c.getLocked(s)]
    assert len(hip) == 6

    def at(values):
        for c, v in zip(hip, values, strict=True):
            c.setValue(s, float(v), False)
        om.realizePosition(s)
        return m.set_coordinate_values(st0, {c.getName(): c.getValue(s) for c in coords})

    rng = np.random.default_rng(3)
    poses = [
        [rng.uniform(max(c.getRangeMin(), -2.0), min(c.getRangeMax(), 2.0)) for c in hip] for _ in range(24)
    ]
    states, theirs, engaged = [], [], []
    for v in poses:
        states.append(at(v))
        gps = [mus.get(n).getGeometryPath() for n in names]
        theirs.append([gp.getLength(s) for gp in gps])
        engaged.append([_engaged(gp, s) for gp in gps])
    engaged = np.asarray(engaged)
    print("engaged", engaged.sum(), "of", engaged.size)
    assert 0 < engaged.sum() < engaged.size

    # three poses and their central-difference neighbours in one batch
    h = 1e-6
    ma_poses = poses[:3]
    for v in ma_poses:
        for k in range(len(hip)):
            for sgn in (1.0, -1.0):
                w = list(v)
                w[k] += sgn * h
                states.append(at(w))
    batch = jax.tree.map(lambda *a: jnp.stack(a), *states)
    lengths = jax.jit(
        jax.vmap(lambda st: m.matter.calc_path_lengths(m.system.realize(st, sj.Stage.POSITION)))
    )
    L = np.asarray(lengths(batch))[:, idx]
    err = np.abs(L[:24] - np.asarray(theirs)).max()
    print(f"lengths vs OpenSim {err:.1e}")
    assert err < 1e-12

    arms = jax.jit(jax.vmap(m.matter.calc_path_moment_arms))
    r = np.asarray(arms(jax.tree.map(lambda a: a[:24], batch)))[:, idx]
    assert np.isfinite(r).all()  # every pose, wrapped or not
    Lfd = L[24:].reshape(3, len(hip), 2, len(names))
    worst = {"fd": 0.0, "osim_fd": 0.0, "osim": 0.0, "osim_self": 0.0}
    for i, v in enumerate(ma_poses):
        at(v)
        for k, c in enumerate(hip):
            ui = m.coordinates[c.getName()].u_index(states[i])
            fd = -(Lfd[i, k, 0] - Lfd[i, k, 1]) / (2 * h)
            worst["fd"] = max(worst["fd"], np.abs(r[i, :, ui] - fd).max())
            val = c.getValue(s)
            Lo = []
            for sgn in (1.0, -1.0):
                c.setValue(s, val + sgn * h, False)
                om.realizePosition(s)
                Lo.append([mus.get(n).getGeometryPath().getLength(s) for n in names])
            c.setValue(s, val, False)
            om.realizePosition(s)
            fdo = -(np.asarray(Lo[0]) - np.asarray(Lo[1])) / (2 * h)
            ma = np.asarray([mus.get(n).getGeometryPath().computeMomentArm(s, c) for n in names])
            worst["osim_fd"] = max(worst["osim_fd"], np.abs(r[i, :, ui] - fdo).max())
            worst["osim"] = max(worst["osim"], np.abs(r[i, :, ui] - ma).max())
            worst["osim_self"] = max(worst["osim_self"], np.abs(ma - fdo).max())
    print({k: f"{v:.1e}" for k, v in worst.items()}, f"largest arm {np.abs(r[:3]).max():.1e}")
    assert worst["fd"] < 1e-8 and worst["osim_fd"] < 1e-8
    assert worst["osim"] < 2e-2 and worst["osim_self"] < 2e-2


def _cable_models(quadrants, rot=(0.0, np.pi / 2, 0.0), tr=(0.0, 0.01, 0.0), inner=0.03, outer=0.05):
    """A cable from Ground to a swinging rod (a pin about z) through the hole of a torus on
    Ground, one cable per quadrant, in OpenSim 4.6 and in simjax."""
    om = osim.Model()
    g = om.getGround()
    b = osim.Body("rod", 1.0, osim.Vec3(0), osim.Inertia(0.1))
    om.addBody(b)
    om.addJoint(osim.PinJoint("pin", g, osim.Vec3(0), osim.Vec3(0), b, osim.Vec3(0), osim.Vec3(0)))
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)))
    rod = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    gps, paths = [], []
    for i, quadrant in enumerate(quadrants):
        spring = osim.PathSpring(f"cable{i}", 0.1, 10.0, 0.0)
        gp = spring.updGeometryPath()
        gp.appendNewPathPoint("p1", g, osim.Vec3(-0.4, 0.0, 0.08))
        gp.appendNewPathPoint("p2", b, osim.Vec3(0.4, 0.0, -0.05))
        w = osim.WrapTorus()
        w.setName(f"ring{i}")
        w.set_inner_radius(inner)
        w.set_outer_radius(outer)
        w.set_xyz_body_rotation(osim.Vec3(*rot))
        w.set_translation(osim.Vec3(*tr))
        w.set_quadrant(quadrant)
        g.addWrapObject(w)
        gp.addPathWrap(w)
        om.addForce(spring)
        gps.append(gp)
        path = sj.GeometryPath(matter, f"cable{i}")
        path.append_path_point(matter.Ground(), [-0.4, 0, 0.08])
        path.append_path_point(rod, [0.4, 0, -0.05])
        kw = dict(xyz_body_rotation=rot, translation=tr, quadrant=quadrant, name=f"ring{i}")
        path.add_path_wrap(sj.WrapTorus(matter, matter.Ground(), inner, outer, **kw))
        paths.append(path)
    return om, om.initSystem(), gps, system, matter, paths


TURNED = {"rot": (0.2, 1.3, 0.1), "tr": (0.02, 0.0, 0.03), "inner": 0.02, "outer": 0.06}


@pytest.mark.oracle
@pytest.mark.parametrize(
    "quadrants, kw",
    [
        (["+z", "-y"], {}),
        pytest.param(["all", "+y", "-x"], {}, marks=pytest.mark.slow),
        pytest.param(["all"], TURNED, marks=pytest.mark.slow),
    ],
    ids=["+z -y", "all +y -x", "turned"],
)
def test_a_cable_through_a_torus_equals_opensims(quadrants, kw):
    """A cable through a torus's hole (tube 0.03 about a circle of 0.05, its axis along
    the cable) swung through engagement, one cable per quadrant of the torus (OpenSim keeps
    the search's end whose line point lies on the quadrant's side, the nearer if both, no
    wrap if neither): lengths equal OpenSim's to 1e-12 m (measured 1.1e-16 over "+z", "-y",
    "all", "+y", "-x"; 2.2e-16 with the torus turned and moved off the cable's line, tube
    0.02 about 0.06). Quadrants "+z" and "-y" run by default (the others: ``-m slow``)."""
    om, s, gps, system, matter, paths = _cable_models(quadrants, **kw)
    state = system.realize_topology()
    angles = np.linspace(-0.6, 0.6, 25)
    run = jax.jit(
        jax.vmap(lambda q: matter.calc_path_lengths(system.realize(state.with_q(q[None]), sj.Stage.POSITION)))
    )
    ours = np.asarray(run(jnp.asarray(angles)))
    theirs, engaged = [], []
    for q in angles:
        om.getCoordinateSet().get(0).setValue(s, float(q))
        om.realizePosition(s)
        theirs.append([gp.getLength(s) for gp in gps])
        engaged.append([_engaged(gp, s) for gp in gps])
    engaged = np.asarray(engaged)
    print(quadrants, engaged.sum(axis=0), f"{np.abs(ours - theirs).max():.1e}")
    assert engaged.any(axis=0).all() and (~engaged).any(axis=0).all()
    np.testing.assert_allclose(ours, theirs, atol=1e-12, rtol=0)


def test_the_drawn_path_follows_the_torus():
    """``calc_path_points`` over a torus: the path's two points, the tangent points and 8
    points between them pushed onto the tube (at the inner radius from the centre circle);
    the polyline's length is within 1% of the path's length."""
    om, s, gps, system, matter, paths = _cable_models(["all"])
    state = system.realize(system.realize_topology().with_q(jnp.asarray([0.4])), sj.Stage.POSITION)
    pts, ok = jax.jit(matter.calc_path_points)(state)
    pts = np.asarray(pts[0])[np.asarray(ok[0])]
    L = float(paths[0].get_length(state))
    assert len(pts) == 12
    poly = np.sum(np.linalg.norm(np.diff(pts, axis=0), axis=1))
    print(f"polyline {poly:.6f} path {L:.6f}")
    assert abs(poly - L) < 0.01 * L
    # interior points on the tube: the torus frame is Ground turned by 90 degrees about y
    # and moved by (0, 0.01, 0): its z axis is Ground's x
    w = pts[3:-3] - np.array([0.0, 0.01, 0.0])
    rho = np.hypot(w[:, 1], w[:, 2])
    np.testing.assert_allclose(np.hypot(rho - 0.05, w[:, 0]), 0.03, atol=1e-12)


def test_bad_tori_are_refused_naming_the_element(tmp_path):
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    with pytest.raises(ValueError, match="WrapTorus 'ring': inner_radius must be finite and > 0"):
        sj.WrapTorus(matter, matter.Ground(), 0.0, 0.05, name="ring")
    with pytest.raises(ValueError, match="WrapTorus 'ring': outer_radius must be finite and > 0"):
        sj.WrapTorus(matter, matter.Ground(), 0.01, -0.05, name="ring")
    with pytest.raises(
        ValueError, match="WrapTorus 'ring': outer_radius .* must be greater than inner_radius"
    ):
        sj.WrapTorus(matter, matter.Ground(), 0.05, 0.05, name="ring")
    with pytest.raises(ValueError, match="quadrant must be one of"):
        sj.WrapTorus(matter, matter.Ground(), 0.01, 0.05, quadrant="in", name="ring")
    text = open(model_path("GPK_generic")).read()
    i = text.index('<WrapTorus name="pelvisOITorus2_l">')
    j = text.index("<outer_radius>", i)
    k = text.index("</outer_radius>", j)
    (tmp_path / "bad.osim").write_text(text[:j] + "<outer_radius>0.01" + text[k:])
    with pytest.raises(
        sj.io.ModelFileError,
        match=r"greater than inner_radius.*fix <inner_radius>/<outer_radius>/<quadrant> of WrapTorus "
        r"'pelvisOITorus2_l'",
    ):
        _load(str(tmp_path / "bad.osim"))


@pytest.mark.oracle
def test_scaling_scales_the_tori_as_opensim(gpk, tmp_path):
    """``sj.io.scale_osim`` with non-uniform pelvis factors: every torus's inner and outer
    radius (by the mean of the scaled lengths of its frame's x and y axes) and translation
    equal OpenSim's ``Model::scale`` exactly (measured 0.0)."""
    m, _, _ = gpk
    factors = (1.1, 0.85, 1.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = sj.io.scale_osim(m, {"pelvis": factors}, output=str(tmp_path / "ours.osim"))
    om = osim.Model(str(m.path))
    s = om.initSystem()
    scale_set = osim.ScaleSet()
    sc = osim.Scale()
    sc.setSegmentName("pelvis")
    sc.setScaleFactors(osim.Vec3(*factors))
    sc.setApply(True)
    scale_set.cloneAndAppend(sc)
    om.scale(s, scale_set, True, -1.0)
    om.printToXML(str(tmp_path / "theirs.osim"))

    def tori(path):
        root = ET.parse(path).getroot()
        return {
            w.get("name"): [float(w.find(t).text) for t in ("inner_radius", "outer_radius")]
            + [float(x) for x in w.find("translation").text.split()]
            for w in root.iter("WrapTorus")
        }

    ours, theirs = tori(tmp_path / "ours.osim"), tori(tmp_path / "theirs.osim")
    assert len(ours) == 6 and set(ours) == set(theirs)
    for k in ours:
        np.testing.assert_array_equal(ours[k], theirs[k])
    before = {w.name: w for w in m.matter._wrap_objects if isinstance(w, sj.WrapTorus)}
    after = {w.name: w for w in scaled.matter._wrap_objects if isinstance(w, sj.WrapTorus)}
    for k, w in after.items():
        assert (w.inner_radius, w.outer_radius) == tuple(ours[k][:2])
        assert w.outer_radius != before[k].outer_radius


@pytest.mark.oracle
@pytest.mark.slow
def test_gpk_torus_then_sphere_paths_equal_opensims(tmp_path):
    """GPK_generic's six obturator internus paths as the file has them: over the torus,
    then over a sphere on the femoral head (two wraps: OpenSim's repeated sweeps, the
    torus's cylinder sliding its tangent points), at 16 random hip poses: lengths equal
    OpenSim's to 1e-11 relative (measured 1.3e-12: at some poses OpenSim's path runs
    metres the long way round the cylinder, 14.7 m, and simjax's does too). Slow: the
    sweeps compile for ~30 s."""
    text = open(model_path("GPK_generic")).read()
    text = re.sub(
        r"<(\w+Muscle\w*) name=\"[^\"]+\">.*?</\1>",
        lambda g: g.group(0) if "OITorus" in g.group(0) else "",
        text,
        flags=re.S,
    )
    path = tmp_path / "gpk_torus_sphere.osim"
    path.write_text(text)
    m = _load(str(path))
    om = osim.Model(str(path))
    s = om.initSystem()
    mus = om.getMuscles()
    names = [mus.get(i).getName() for i in range(mus.getSize())]
    st0 = m.default_state
    paths = m.system.model_for(m.system.realize(st0, sj.Stage.POSITION)).paths
    assert all(len(paths.wraps.path_wraps[paths.names.index(n)]) == 2 for n in names)
    idx = np.asarray([paths.names.index(n) for n in names])
    coords = [om.getCoordinateSet().get(i) for i in range(om.getCoordinateSet().getSize())]
    hip = [c for c in coords if c.getName().startswith("hip") and not c.getLocked(s)]
    rng = np.random.default_rng(0)
    states, theirs = [], []
    for _ in range(16):
        for c in hip:
            c.setValue(s, float(rng.uniform(max(c.getRangeMin(), -1.5), min(c.getRangeMax(), 1.5))), False)
        om.realizePosition(s)
        states.append(m.set_coordinate_values(st0, {c.getName(): c.getValue(s) for c in coords}))
        theirs.append([mus.get(n).getGeometryPath().getLength(s) for n in names])
    batch = jax.tree.map(lambda *a: jnp.stack(a), *states)
    lengths = jax.jit(
        jax.vmap(lambda st: m.matter.calc_path_lengths(m.system.realize(st, sj.Stage.POSITION)))
    )
    L = np.asarray(lengths(batch))[:, idx]
    theirs = np.asarray(theirs)
    print(f"relative {np.max(np.abs(L - theirs) / theirs):.1e}, longest {theirs.max():.2f} m")
    np.testing.assert_allclose(L, theirs, rtol=1e-11, atol=1e-13)
