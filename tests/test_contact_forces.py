"""Compliant contact force elements: ``sj.HuntCrossleyForce`` and
``sj.SmoothSphereHalfSpaceForce``, against OpenSim 4.6 (Simbody 3.9) itself.

- gait14dof22musc (osim-rl; two HuntCrossleyForces, a floor and six foot spheres, eight
  CoordinateLimitForces, 22 Thelen muscles): OpenSim loads the file with its muscles
  removed from the ForceSet and simjax disables them, so gravity, the coordinate limit
  forces and contact act on both sides. At random States with the feet in the floor,
  touching or above it, slow and fast (contacts that release, ending Simbody's walk over
  a force's contacts), each force's body forces (``getRecordValues``) and every
  coordinate's acceleration (``getAccelerationValue``, by name) to 1e-9 relative.
- A ball on a PlanarJoint over a half-space with two spheres, a HuntCrossleyForce (floor
  and spheres with different parameters) and a SmoothSphereHalfSpaceForce, written by
  OpenSim: loaded with ``load_osim`` and built by hand with the builder API, both equal to
  OpenSim.
- vmap over States with different contacts active compiles once; gradients of the
  accelerations in q, u and the stiffness equal central differences; bad parameters are
  refused naming the force and the fix.
"""

from __future__ import annotations

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import hc_params_xml, osim_vec, splice_hc_parameters

import simjax as sj
from simjax.io import ModelFileError

TOL = 1e-9
G = 9.80665


def _load(path):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        lm = sj.io.load_osim(str(path))
    return lm, " ".join(str(w.message) for w in rec)


class Oracle:
    """OpenSim's side of a model: set coordinates and speeds by name, realize, read each
    coordinate's acceleration and each force's record values."""

    def __init__(self, path, drop=("Thelen2003Muscle",)):
        import opensim as osim

        self.osim = osim
        m = osim.Model(str(path))
        fs = m.updForceSet()
        for i in reversed(range(fs.getSize())):
            if fs.get(i).getConcreteClassName() in drop:
                fs.remove(i)
        self.m, self.s = m, m.initSystem()
        cs = m.getCoordinateSet()
        self.coords = {cs.get(i).getName(): cs.get(i) for i in range(cs.getSize())}

    def set(self, q, u):
        for n, c in self.coords.items():
            if not c.getLocked(self.s):
                c.setValue(self.s, float(q[n]), False)
            c.setSpeedValue(self.s, float(u[n]))
        self.m.realizeAcceleration(self.s)

    def values(self):
        return (
            {n: c.getValue(self.s) for n, c in self.coords.items()},
            {n: c.getSpeedValue(self.s) for n, c in self.coords.items()},
        )

    def udot(self):
        return {n: c.getAccelerationValue(self.s) for n, c in self.coords.items()}

    def records(self, name):
        return osim_vec(self.m.getForceSet().get(name).getRecordValues(self.s))

    def sphere_bottoms(self):
        """Lowest point height (Ground y) of each ContactSphere, by name."""
        gs = self.m.getContactGeometrySet()
        out = {}
        for k in range(gs.getSize()):
            g = gs.get(k)
            if g.getConcreteClassName() == "ContactSphere":
                c = g.getFrame().findStationLocationInGround(self.s, g.get_location())
                out[g.getName()] = c.get(1) - self.osim.ContactSphere.safeDownCast(g).getRadius()
        return out


def _ours(lm):
    """Compiled simjax side: udot by coordinate and each contact force's body forces."""
    names = list(lm.coordinates)
    su = np.asarray(lm.coordinate_u_indices(lm.default_state, names))
    forces = list(lm.contact_forces.values())
    model_forces = [f for f in forces]

    @jax.jit
    def run(state):
        for muscle in lm.muscles.values():  # the oracle's ForceSet has none
            state = muscle.disable(state)
        r = lm.system.realize(state, sj.Stage.ACCELERATION)
        return r.udot[su], [f.calc_force_contribution(r)[0] for f in model_forces]

    return names, run


def _records_from(F, bodies):
    """OpenSim's record layout: per geometry, the force then the torque on its body."""
    return np.concatenate([np.concatenate([F[b, 3:], F[b, :3]]) for b in bodies])


def _compare(lm, oracle, run, names, state_values, stats):
    q, u = state_values
    oracle.set(q, u)
    q, u = oracle.values()  # locked coordinates keep their value
    st = lm.set_coordinate_values(lm.default_state, q)
    st = lm.set_coordinate_speeds(st, u)
    udot, Fs = run(st)
    ref = oracle.udot()
    ref_u = np.array([ref[n] for n in names])
    err = np.abs(np.asarray(udot) - ref_u).max() / max(1.0, np.abs(ref_u).max())
    stats["udot"] = max(stats["udot"], err)
    cand = lm.matter.get_contact_candidates(lm.default_state)
    for (name, f), F in zip(lm.contact_forces.items(), Fs, strict=True):
        rec = oracle.records(name)
        F = np.asarray(F)
        if isinstance(f, sj.HuntCrossleyForce):
            bodies = [cand.surface_bodies[s] for s in f.get_surfaces()]
        else:
            s_sphere, s_half = f.get_surfaces()
            bodies = [cand.surface_bodies[s_sphere], cand.surface_bodies[s_half]][: len(rec) // 6]
        got = _records_from(F, bodies)
        scale = max(1.0, np.abs(rec).max())
        stats["records"] = max(stats["records"], np.abs(got - rec).max() / scale)
        stats["touching"] += bool(np.any(rec))
    return udot, ref_u


# ----------------------------------------------------------------------- gait14dof22musc


@pytest.mark.oracle
def test_gait14dof22musc_contact_matches_opensim():
    pytest.importorskip("opensim")
    from test_io_osim import model_path

    path = model_path("gait14dof22musc")
    lm, msg = _load(path)
    assert len(lm.muscles) == 22 and "2 contact forces" in msg and "no force" not in msg
    assert "left out" not in msg and not lm.ignored  # muscles, contact and limit forces: all read
    assert set(lm.contact_forces) == {"foot_r", "foot_l"}
    hc = lm.contact_forces["foot_r"]
    st = lm.default_state
    assert float(hc.get_stiffness(st, hc.get_surfaces()[0])) == 5e5
    assert float(hc.get_dissipation(st, hc.get_surfaces()[1])) == 1.0
    assert float(hc.get_static_friction(st, hc.get_surfaces()[2])) == 0.8
    assert float(hc.get_transition_velocity(st)) == 0.1
    oracle = Oracle(path)
    names, run = _ours(lm)
    rng = np.random.default_rng(3)
    stats = {"udot": 0.0, "records": 0.0, "touching": 0, "released": 0}
    for k in range(16):
        q = {}
        for n, c in oracle.coords.items():
            lo, hi = max(c.getRangeMin(), -1.0), min(c.getRangeMax(), 1.0)
            q[n] = c.getDefaultValue() if c.getLocked(oracle.s) else rng.uniform(lo, hi)
        u = {n: 0.0 if c.getLocked(oracle.s) else rng.normal() * (0.1 if k % 2 else 1.0)
             for n, c in oracle.coords.items()}  # fmt: skip
        oracle.set(q, u)
        # move the pelvis so that the lowest sphere is 2 cm into the floor ... 5 mm above it
        q["pelvis_ty"] += -min(oracle.sphere_bottoms().values()) + rng.uniform(-0.02, 0.005)
        _compare(lm, oracle, run, names, (q, u), stats)
        bottoms = oracle.sphere_bottoms()
        for side in "rl":  # a foot with a sphere in the floor and no force: a release
            deep = any(v < 0 for n, v in bottoms.items() if n.startswith(side + "_"))
            stats["released"] += deep and not np.any(oracle.records(f"foot_{side}"))
    print(stats)
    # (measured: udot 3e-14, records 1e-13)
    assert stats["udot"] < TOL and stats["records"] < TOL
    assert stats["touching"] >= 10 and stats["released"] >= 1


# ----------------------------------------------------------------------- the synthetic ball

_FLOOR = dict(stiffness=2e6, dissipation=0.8, static_friction=0.9, dynamic_friction=0.6, viscous_friction=0.1)
_BALLS = dict(stiffness=5e5, dissipation=1.5, static_friction=0.7, dynamic_friction=0.5, viscous_friction=0.0)
_SMOOTH = dict(
    stiffness=1e6,
    dissipation=2.0,
    static_friction=0.8,
    dynamic_friction=0.6,
    viscous_friction=0.2,
    transition_velocity=0.2,
    constant_contact_force=1e-5,
    hertz_smoothing=300.0,
    hunt_crossley_smoothing=50.0,
)
_VT = 0.1
_MASS, _I = 2.0, (0.02, 0.03, 0.025)
_S1, _S2 = ((0.05, -0.02, 0.0), 0.06), ((-0.07, 0.01, 0.0), 0.04)
_NAMES = ("planar_coord_0", "planar_coord_1", "planar_coord_2")


@pytest.fixture(scope="module")
def ball_osim(tmp_path_factory):
    """The ball on a PlanarJoint, written by OpenSim (the two ContactParameters blocks are
    put in by hand: the Python API has one block per force)."""
    osim = pytest.importorskip("opensim")
    m = osim.Model()
    m.setName("planar_ball")
    b = osim.Body("ball", _MASS, osim.Vec3(0), osim.Inertia(*_I))
    m.addBody(b)
    m.addJoint(osim.PlanarJoint("planar", m.getGround(), b))
    floor = osim.ContactHalfSpace(osim.Vec3(0), osim.Vec3(0, 0, -np.pi / 2), m.getGround(), "floor")
    s1 = osim.ContactSphere(_S1[1], osim.Vec3(*_S1[0]), b, "s1")
    s2 = osim.ContactSphere(_S2[1], osim.Vec3(*_S2[0]), b, "s2")
    for g in (floor, s1, s2):
        m.addContactGeometry(g)
    hc = osim.HuntCrossleyForce()
    hc.setName("hc")
    hc.addGeometry("floor")
    hc.setTransitionVelocity(_VT)
    m.addForce(hc)
    sm = osim.SmoothSphereHalfSpaceForce("smooth", s1, floor)
    for k, v in _SMOOTH.items():
        getattr(sm, "set_" + k)(v)
    m.addForce(sm)
    m.finalizeConnections()
    path = tmp_path_factory.mktemp("osim") / "planar_ball.osim"
    m.printToXML(str(path))
    blocks = hc_params_xml("floor", _FLOOR) + hc_params_xml("s1 s2", _BALLS)
    path.write_text(splice_hc_parameters(path.read_text(), blocks))
    return path


def _build_ball(stop_at_release=True):
    """The same ball with simjax's builder API: (system, matter, state, hc, smooth)."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0.0, -G, 0.0])
    ground = matter.Ground()
    mp = sj.MassProperties(_MASS, [0, 0, 0], sj.Inertia(*_I))
    ball = sj.MobilizedBody.Planar(ground, sj.Transform(), sj.Body.Rigid(mp), sj.Transform())
    R = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # Rz(-pi/2): floor y = 0
    floor = ground.add_contact_surface(sj.Transform(R, [0, 0, 0]), sj.ContactGeometry.HalfSpace())
    s1 = ball.add_contact_surface(sj.Transform(p=list(_S1[0])), sj.ContactGeometry.Sphere(_S1[1]))
    s2 = ball.add_contact_surface(sj.Transform(p=list(_S2[0])), sj.ContactGeometry.Sphere(_S2[1]))
    hc = sj.HuntCrossleyForce(forces, matter, _VT, name="hc", stop_at_release=stop_at_release)
    hc.set_body_parameters(floor, **_FLOOR)
    hc.set_body_parameters(s1, **_BALLS)
    hc.set_body_parameters(s2, **_BALLS)
    sm = sj.SmoothSphereHalfSpaceForce(forces, matter, s1, floor, name="smooth", **_SMOOTH)
    return system, matter, system.realize_topology(), hc, sm


def _ball_states(rng, n):
    """(q, u) by coordinate name: the lower sphere 3 cm into the floor ... 1 cm above it;
    slow and fast, spinning both ways (the spheres press and release)."""
    out = []
    for k in range(n):
        rz = rng.uniform(-np.pi, np.pi)
        c, s = np.cos(rz), np.sin(rz)
        low = min(s_y - r for s_y, r in ((s * x + c * y, r) for (x, y, _), r in (_S1, _S2)))
        ty = -low + rng.uniform(-0.03, 0.01)
        scale = 0.05 if k % 3 == 0 else 1.0
        u = rng.normal(size=3) * scale
        q = {"planar_coord_0": rz, "planar_coord_1": rng.uniform(-1, 1), "planar_coord_2": ty}
        out.append((q, dict(zip(_NAMES, u, strict=True))))
    return out


@pytest.mark.oracle
def test_planar_ball_loaded_and_built_match_opensim(ball_osim):
    """Both forces on the ball: load_osim of OpenSim's file and the builder-API model give
    OpenSim's accelerations and each force's body forces to 1e-9 relative, in and out of
    contact, sliding, sticking and releasing."""
    lm, msg = _load(ball_osim)
    assert "no force" not in msg and "2 contact forces" in msg
    oracle = Oracle(ball_osim)
    assert set(oracle.coords) == {"planar_coord_0", "planar_coord_1", "planar_coord_2"}
    names, run = _ours(lm)
    system, matter, s0, hc, sm = _build_ball()

    @jax.jit
    def built(q, u):
        r = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
        return r.udot, hc.calc_force_contribution(r)[0], sm.calc_force_contribution(r)[0]

    sys_all, _, s_all, hc_all, _ = _build_ball(stop_at_release=False)
    every = jax.jit(lambda q, u: hc_all.calc_force_contribution(
        sys_all.realize(s_all.with_q(q).with_u(u), sj.Stage.VELOCITY))[0])  # fmt: skip
    stats = {"udot": 0.0, "records": 0.0, "touching": 0}
    worst_built = 0.0
    released = stopped = 0
    for q, u in _ball_states(np.random.default_rng(11), 30) + _release_states():
        _, ref = _compare(lm, oracle, run, names, (q, u), stats)
        qv = jnp.array([q[n] for n in names])
        uv = jnp.array([u[n] for n in names])
        udot, F_hc, F_sm = (np.asarray(x) for x in built(qv, uv))
        scale = max(1.0, np.abs(ref).max())
        worst_built = max(worst_built, np.abs(udot - ref).max() / scale)
        for F, name in ((F_hc, "hc"), (F_sm, "smooth")):
            rec = oracle.records(name)
            got = _records_from(F, [0, 1, 1] if name == "hc" else [1, 0][: len(rec) // 6])
            worst_built = max(worst_built, np.abs(got - rec).max() / max(1.0, np.abs(rec).max()))
        # a sphere in the floor with no Hunt-Crossley force: released, or after a release
        depth = -np.array([_bottom(q, p) for p in (_S1, _S2)])
        released += bool(np.any(depth > 0) and not np.any(oracle.records("hc")))
        # without Simbody's end of the walk: the contact after the releasing one keeps its
        # force, and differs from OpenSim
        stopped += not np.allclose(_records_from(np.asarray(every(qv, uv)), [0, 1, 1]), oracle.records("hc"))
    print(stats, worst_built, released, stopped)
    # (measured: 6e-14)
    assert stats["udot"] < TOL and stats["records"] < TOL and worst_built < TOL
    assert stats["touching"] >= 20 and released >= 2 and stopped >= 2


@pytest.mark.oracle
def test_potential_energy_matches_opensim(ball_osim):
    """Simbody's potential energies ``2/5 fH d`` per Hunt–Crossley contact and per smooth
    force (its smoothed fH), plus gravity's: OpenSim's ``calcPotentialEnergy`` at rest,
    one or both spheres in the floor, to 1e-12 relative. (Moving, Simbody counts only the
    Hunt–Crossley contacts before a releasing one; simjax's, a Position-stage quantity,
    counts all.)"""
    oracle = Oracle(ball_osim)
    system, _, s0, hc, _ = _build_ball()
    pe = jax.jit(lambda q: system.calc_potential_energy(system.realize(s0.with_q(q), sj.Stage.POSITION)))
    hc_pe = jax.jit(lambda q: hc.calc_potential_energy(system.realize(s0.with_q(q), sj.Stage.POSITION)))
    n_in = 0
    for q, _ in _ball_states(np.random.default_rng(2), 8) + _release_states():
        oracle.set(q, dict.fromkeys(_NAMES, 0.0))
        ref = oracle.m.calcPotentialEnergy(oracle.s)
        qv = jnp.array([q[n] for n in _NAMES])
        assert float(pe(qv)) == pytest.approx(ref, rel=1e-12, abs=1e-12)
        n_in += float(hc_pe(qv)) > 0
    assert n_in >= 4


def _release_states():
    """Both spheres 1 cm into the floor, the ball spinning so that one sphere rises faster
    than 2/(3c) (releases) while the other presses: which one Simbody's walk meets first
    decides whether the other gets a force."""
    from scipy.optimize import brentq

    (x1, y1, _), r1 = _S1
    (x2, y2, _), r2 = _S2
    rz = brentq(lambda a: np.sin(a) * (x1 - x2) + np.cos(a) * (y1 - y2) - r1 + r2, -1.0, 1.0)
    out = []
    for tx, wz in ((0.3, 15.0), (0.3, -15.0), (-0.6, 12.0), (-0.6, -12.0)):
        q = {"planar_coord_0": rz, "planar_coord_1": tx, "planar_coord_2": 0.0}
        q["planar_coord_2"] = -_bottom(q, _S1) - 0.01
        out.append((q, dict(zip(_NAMES, (wz, 0.2, 0.0), strict=True))))
    return out


def _bottom(q, sphere):
    (x, y, _), r = sphere
    rz = q["planar_coord_0"]
    return q["planar_coord_2"] + np.sin(rz) * x + np.cos(rz) * y - r


@pytest.mark.oracle
def test_half_space_on_a_moving_body_matches_opensim(tmp_path):
    """A tilted half-space on a moving platform (PlanarJoint) and a ball (PlanarJoint)
    with a HuntCrossleyForce and a SmoothSphereHalfSpaceForce: both bodies' forces
    (records) and the accelerations equal OpenSim's to 1e-9 relative (measured 6e-14)."""
    osim = pytest.importorskip("opensim")
    m = osim.Model()
    m.setName("moving")
    plat = osim.Body("plat", 3.0, osim.Vec3(0.1, 0, 0), osim.Inertia(0.05, 0.06, 0.07))
    ball = osim.Body("ball", 1.0, osim.Vec3(0), osim.Inertia(0.01, 0.01, 0.01))
    m.addBody(plat)
    m.addBody(ball)
    m.addJoint(osim.PlanarJoint("pj", m.getGround(), plat))
    m.addJoint(osim.PlanarJoint("bj", m.getGround(), ball))
    hs = osim.ContactHalfSpace(osim.Vec3(0.02, 0.05, 0), osim.Vec3(0, 0, -np.pi / 2 + 0.1), plat, "hs")
    sp = osim.ContactSphere(0.05, osim.Vec3(0.01, 0, 0), ball, "sp")
    m.addContactGeometry(hs)
    m.addContactGeometry(sp)
    hc = osim.HuntCrossleyForce()
    hc.setName("hc")
    hc.addGeometry("hs")
    hc.addGeometry("sp")
    for k, v in dict(Stiffness=1e6, Dissipation=0.7, StaticFriction=0.8, DynamicFriction=0.5,
                     ViscousFriction=0.1, TransitionVelocity=0.1).items():  # fmt: skip
        getattr(hc, "set" + k)(v)
    m.addForce(hc)
    sm = osim.SmoothSphereHalfSpaceForce("smooth", sp, hs)
    for k, v in _SMOOTH.items():
        getattr(sm, "set_" + k)(v)
    m.addForce(sm)
    m.finalizeConnections()
    path = tmp_path / "moving.osim"
    m.printToXML(str(path))
    lm, _ = _load(path)
    o = Oracle(path)
    names, run = _ours(lm)
    hs = o.m.getContactGeometrySet().get("hs")
    sp = o.m.getContactGeometrySet().get("sp")
    rng = np.random.default_rng(0)
    stats = {"udot": 0.0, "records": 0.0, "touching": 0}
    for _ in range(20):
        q = {n: rng.uniform(-0.3, 0.3) for n in o.coords}
        u = {n: rng.normal() for n in o.coords}
        o.set(q, u)
        # the ball moved along the half-space's normal: 2 cm in ... 5 mm out
        X = hs.getFrame().getTransformInGround(o.s).compose(hs.getTransform())
        normal = -np.array([X.R().get(i, 0) for i in range(3)])
        c = np.array(sp.getFrame().findStationLocationInGround(o.s, sp.get_location()).to_numpy())
        d = (c - osim_vec(X.p())) @ normal - 0.05 - rng.uniform(-0.005, 0.02)
        q["bj_coord_1"] -= d * normal[0]
        q["bj_coord_2"] -= d * normal[1]
        _compare(lm, o, run, names, (q, u), stats)
    print(stats)
    assert stats["udot"] < TOL and stats["records"] < TOL and stats["touching"] >= 12


def test_dropped_ball_rests_at_the_hertz_depth():
    """sj.simulate (Tsit5) of a ball on a PlanarJoint dropped from 5 cm above the floor,
    sliding: it comes to rest, rolling, at the static Hertz depth ``d`` where ``4/3 k
    sqrt(R k) d^(3/2) = m g`` (two equal surfaces, ``k = E^(2/3)/2``), to 1e-8 m."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    m, R, E = 2.0, 0.05, 1e6
    sj.Force.UniformGravity(forces, matter, [0.0, -G, 0.0])
    ground = matter.Ground()
    mp = sj.MassProperties(m, [0, 0, 0], sj.Inertia(0.002, 0.002, 0.002))
    ball = sj.MobilizedBody.Planar(ground, sj.Transform(), sj.Body.Rigid(mp), sj.Transform())
    Rz = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    floor = ground.add_contact_surface(sj.Transform(Rz, [0, 0, 0]), sj.ContactGeometry.HalfSpace())
    sphere = ball.add_contact_surface(sj.Transform(), sj.ContactGeometry.Sphere(R))
    hc = sj.HuntCrossleyForce(forces, matter, 0.1)
    for s in (floor, sphere):
        hc.set_body_parameters(s, E, 2.0, 0.8, 0.6, 0.0)
    s0 = system.realize_topology().with_q(jnp.array([0.0, 0.0, 0.1])).with_u(jnp.array([0.0, 0.3, 0.0]))
    tr = sj.simulate(system, s0, 1.5, integrator="tsit5", save_at=10)
    k = 0.5 * E ** (2 / 3)
    d = (3 * m * G / (4 * k * np.sqrt(R * k))) ** (2 / 3)
    q, u = np.asarray(tr.q[-1]), np.asarray(tr.u[-1])
    assert q[2] == pytest.approx(R - d, abs=1e-8) and abs(u[2]) < 1e-6
    assert abs(u[1] + u[0] * (R - d / 2)) < 0.01 * abs(u[1])  # rolling: the slip is under vt


# ----------------------------------------------------------------------- vmap, grad, errors


def test_vmap_over_states_with_different_contacts_compiles_once():
    """64 States, some with no sphere in the floor, some with one, some with both: one
    trace of the batched accelerations, each equal to the State evaluated alone."""
    system, _, s0, _, _ = _build_ball()
    traces = []

    def udot(q, u):
        traces.append(1)
        return system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot

    states = _ball_states(np.random.default_rng(5), 64)
    names = ("planar_coord_0", "planar_coord_1", "planar_coord_2")
    Q = jnp.array([[q[n] for n in names] for q, _ in states])
    U = jnp.array([[u[n] for n in names] for _, u in states])
    batched = jax.jit(jax.vmap(udot))
    out = np.asarray(batched(Q, U))
    out2 = np.asarray(batched(Q[::-1], U[::-1]))
    assert len(traces) == 1
    touching = {tuple(_bottom(q, s) < 0 for s in (_S1, _S2)) for q, _ in states}
    assert len(touching) >= 3  # none, one, both
    single = jax.jit(udot)
    for k in (0, 7, 21, 40):
        np.testing.assert_allclose(out[k], np.asarray(single(Q[k], U[k])), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out2, out[::-1], rtol=1e-12, atol=1e-12)


def test_float32_state_stays_float32():
    """A float32 State of the ball (both forces) gives float32 accelerations, equal to
    float64's to float32 precision (measured 4e-6 relative)."""
    system, _, s0, _, _ = _build_ball()
    acc = jax.jit(lambda s: system.realize(s, sj.Stage.ACCELERATION).udot)
    worst = 0.0
    for q, u in _ball_states(np.random.default_rng(4), 6) + _release_states():
        s = s0.with_q(jnp.array([q[n] for n in _NAMES])).with_u(jnp.array([u[n] for n in _NAMES]))
        s32 = jax.tree_util.tree_map(
            lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, s
        )
        a64, a32 = acc(s), acc(s32)
        assert a32.dtype == jnp.float32
        worst = max(worst, float(jnp.abs(a32 - a64).max() / max(1.0, float(jnp.abs(a64).max()))))
    assert worst < 1e-4


def _fd(f, x, h):
    x = np.asarray(x, float)
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (float(f(x + e)) - float(f(x - e))) / (2 * h)
    return g


@pytest.mark.parametrize("which", ["smooth", "hunt_crossley"])
def test_gradients_of_accelerations_equal_finite_differences(which):
    """jax.grad of a weighted sum of the accelerations in q, u and the stiffness equals
    central differences: the smooth force in and out of contact, Hunt–Crossley in contact
    away from its switches (touch, release, slip = transition velocity)."""
    system, _, s0, hc, sm = _build_ball()
    if which == "smooth":
        s0 = hc.disable(s0)
    else:
        s0 = sm.disable(s0)
    force = sm if which == "smooth" else hc
    wts = jnp.array([0.3, -1.1, 0.7])

    def loss(q, u, E):
        st = force.set_stiffness(s0, E)
        return system.realize(st.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot @ wts

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    f = jax.jit(loss)
    E0 = 1e6
    cases = [
        (np.array([0.3, 0.1, 0.045]), np.array([0.2, 0.5, -0.3])),  # s1 sliding in the floor
        (np.array([-0.2, 0.4, 0.07]), np.array([-0.4, 0.3, -0.2])),  # s2 in the floor
    ]
    if which == "smooth":
        cases.append((np.array([0.1, 0.0, 0.2]), np.array([0.1, 0.2, 0.3])))  # in the air
    for q, u in cases:
        depth = -np.array([_bottom(dict(zip(("planar_coord_0", "planar_coord_1", "planar_coord_2"), q)), s)
                           for s in (_S1, _S2)])  # fmt: skip
        if which == "hunt_crossley" or depth.max() > 0:
            assert depth.max() > 1e-3
        gq, gu, gE = grad(jnp.asarray(q), jnp.asarray(u), E0)
        fq = _fd(lambda x: f(jnp.asarray(x), jnp.asarray(u), E0), q, 1e-6)
        fu = _fd(lambda x: f(jnp.asarray(q), jnp.asarray(x), E0), u, 1e-6)
        fE = _fd(lambda x: f(jnp.asarray(q), jnp.asarray(u), x[0]), np.array([E0]), 1.0)[0]
        for g, r in ((gq, fq), (gu, fu)):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(r).max()))
        assert np.isfinite(float(gE))
        np.testing.assert_allclose(float(gE), fE, rtol=1e-5, atol=1e-12)
        if depth.max() > 0:
            assert abs(float(gE)) > 0


def test_parameters_are_per_state_and_bad_input_is_refused(tmp_path, ball_osim):
    system, matter, s0, hc, sm = _build_ball()
    floor, s1, s2 = hc.get_surfaces()
    st = hc.set_stiffness(s0, 3e6, floor)
    assert float(hc.get_stiffness(st, floor)) == 3e6 and float(hc.get_stiffness(st, s1)) == 5e5
    st = hc.set_static_friction(st, 0.4)  # every surface
    assert [float(hc.get_static_friction(st, s)) for s in (floor, s1, s2)] == [0.4] * 3
    st = sm.set_hertz_smoothing(st, 500.0)
    assert float(sm.get_hertz_smoothing(st)) == 500.0
    with pytest.raises(
        ValueError, match=r"'hc', surface 1: stiffness must be .* positive.*set stiffness to a pos"
    ):
        hc.set_stiffness(s0, -1.0, s1)
    with pytest.raises(
        ValueError, match=r"HuntCrossleyForce 'hc'.*dynamic_friction must be finite and non-negative"
    ):
        hc.set_dynamic_friction(s0, -0.2)
    with pytest.raises(ValueError, match="transition_velocity must be finite and positive"):
        hc.set_transition_velocity(s0, 0.0)
    with pytest.raises(ValueError, match="is not one of its surfaces"):
        hc.get_stiffness(s0, 7)
    with pytest.raises(
        ValueError, match=r"SmoothSphereHalfSpaceForce 'smooth': constant_contact_force must be"
    ):
        sm.set_constant_contact_force(s0, -1e-5)
    with pytest.raises(ValueError, match="static_friction must be finite and non-negative"):
        sm.set_static_friction(s0, float("nan"))

    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    ground = matter.Ground()
    mp = sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1))
    ball = sj.MobilizedBody.Free(ground, sj.Transform(), sj.Body.Rigid(mp), sj.Transform())
    fl = ground.add_contact_surface(sj.Transform(), sj.ContactGeometry.HalfSpace())
    sp = ball.add_contact_surface(sj.Transform(), sj.ContactGeometry.Sphere(0.1))
    cap = ball.add_contact_surface(sj.Transform(), sj.ContactGeometry.Capsule(0.1, 0.2))
    bad = sj.HuntCrossleyForce(forces, matter, name="bad")
    with pytest.raises(
        ValueError, match=r"HuntCrossleyForce 'bad', surface 0: stiffness must be finite and positive"
    ):
        bad.set_body_parameters(fl, -1e6)
    with pytest.raises(ValueError, match="viscous_friction must be finite and non-negative"):
        bad.set_body_parameters(sp, 1e6, viscous_friction=-1.0)
    with pytest.raises(
        ValueError, match="is a capsule; Hunt-Crossley contact is modelled for spheres and half"
    ):
        bad.set_body_parameters(cap, 1e6)
    with pytest.raises(ValueError, match="no contact surface 9"):
        bad.set_body_parameters(9, 1e6)
    with pytest.raises(ValueError, match="transition_velocity must be finite and positive"):
        sj.HuntCrossleyForce(forces, matter, -0.1)
    with pytest.raises(ValueError, match=r"SmoothSphereHalfSpaceForce 'x': sphere must be a sphere surface"):
        sj.SmoothSphereHalfSpaceForce(forces, matter, fl, sp, name="x")
    with pytest.raises(
        ValueError, match=r"SmoothSphereHalfSpaceForce 'y': hertz_smoothing must be finite and positive"
    ):
        sj.SmoothSphereHalfSpaceForce(forces, matter, sp, fl, hertz_smoothing=0.0, name="y")
    # a file's bad parameter: the loader names the element
    text = ball_osim.read_text().replace("<stiffness>2000000.0<", "<stiffness>-2000000.0<", 1)
    assert text != ball_osim.read_text()
    p = tmp_path / "bad.osim"
    p.write_text(text)
    with pytest.raises(ModelFileError, match=r"HuntCrossleyForce.*stiffness must be finite and positive"):
        _load(p)
