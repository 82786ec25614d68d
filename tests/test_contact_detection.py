"""Contact geometry on bodies, the static candidate list and ``matter.find_contacts``.

Oracle: MuJoCo C (``data.contact`` after ``mj_forward``) on dm_control's hopper, cheetah,
walker and humanoid, at random States and at States dropped onto the floor: the same geom
pairs in the same order (geometry 1 first), ``dist``/``pos``/``frame`` to 1e-9, and the
pair's ``dim``, ``friction``, ``solref``, ``solimp`` and ``includemargin``. All their pair
kinds have kernels (plane, sphere and capsule pairs). On the hopper, the gradient of the
in-range distances in q equals central differences.
"""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from test_actuators import _path
from test_io_mjcf import Case

import simjax as sj

TOL = 1e-9


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


def _geom_id(mujoco, m, name):
    return int(name[5:]) if name.startswith("geom#") else mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, name)


def _simjax_contacts(c, mujoco, m, fn, ct, q):
    """The active contacts by MuJoCo geom pair (``ct``: a find_contacts result, for the
    static fields)."""
    dist, pos, frame, active = (np.asarray(x) for x in fn(jnp.asarray(q)))
    names = c.lm.matter.get_contact_candidates(c.state).surface_names
    out = {}
    for k in np.flatnonzero(active):
        g = tuple(_geom_id(mujoco, m, names[s]) for s in ct.surface[k])
        out.setdefault(g, []).append(
            (
                dist[k],
                pos[k],
                frame[k],
                ct.condim[k],
                ct.friction[k],
                ct.solref[k],
                ct.solimp[k],
                ct.includemargin[k],
            )
        )
    return out


def _mujoco_contacts(d):
    out = {}
    for i in range(d.ncon):
        k = d.contact[i]
        out.setdefault(tuple(int(g) for g in k.geom), []).append(
            (k.dist, k.pos.copy(), k.frame.reshape(3, 3).copy(), k.dim, k.friction.copy(), k.solref.copy(),
             k.solimp.copy(), k.includemargin)
        )  # fmt: skip
    return out


def _drop(mujoco, m, d, qp):
    """qpos moved down (free root z, or a slide joint named rootz) so that the lowest geom
    is 5 mm into the floor (geom 0)."""
    d.qpos[:] = qp
    mujoco.mj_forward(m, d)
    low = min(mujoco.mj_geomDistance(m, d, 0, g, 10.0, None) for g in range(1, m.ngeom))
    j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "rootz")
    adr = m.jnt_qposadr[j if j >= 0 else 0] + (0 if j >= 0 else 2)
    out = qp.copy()
    out[adr] -= low + 0.005
    return out


@pytest.mark.parametrize("name", ["hopper", "cheetah", "walker", "humanoid"])
def test_contacts_match_mujoco(name, mujoco):
    path = _path(name)
    c = Case(name, path, mujoco)
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    system, matter, s0 = c.lm.system, c.lm.matter, c.state

    @jax.jit
    def fn(q):
        ct = matter.find_contacts(system.realize(s0.with_q(q), sj.Stage.POSITION))
        return ct.dist, ct.pos, ct.frame, ct.active

    ct = matter.find_contacts(system.realize(s0, sj.Stage.POSITION))
    rng = np.random.default_rng(7)
    n_touch = 0
    for k in range(24):
        q, _ = c.random_state(rng)
        if k % 2:  # dropped onto the floor: simjax's q from MuJoCo's moved qpos
            qp, _ = c.to_mujoco(q)
            qp = _drop(mujoco, m, d, qp)
            q = _from_mujoco(c, q, qp)
        qp, _ = c.to_mujoco(q)
        d.qpos[:] = qp
        mujoco.mj_forward(m, d)
        ref = _mujoco_contacts(d)
        got = _simjax_contacts(c, mujoco, m, fn, ct, q)
        assert sorted(got) == sorted(ref), (name, k)
        for g, cons in ref.items():
            assert len(got[g]) == len(cons), (name, k, g)
            n_touch += any(x[0] < 0 and g[0] == 0 for x in cons)
            for a, b in zip(got[g], cons):
                for x, y in zip(a, b):
                    np.testing.assert_allclose(x, y, atol=TOL, rtol=0, err_msg=f"{name} state {k} pair {g}")
    assert n_touch >= 12  # every dropped State has a geom in the floor
    if name != "hopper":  # (a reverse-mode compile per model: one is enough)
        return
    # the distances of the contacts in range are differentiable in q (last dropped State):
    # the gradient of their sum equals central differences
    active = np.asarray(fn(jnp.asarray(q))[3])
    g = np.asarray(jax.jit(jax.grad(lambda x: jnp.sum(jnp.where(active, fn(x)[0], 0.0))))(jnp.asarray(q)))
    steps = 1e-6 * np.eye(q.size)
    dist = jax.jit(jax.vmap(lambda x: fn(x)[0]))
    fd = (np.asarray(dist(q + steps)) - np.asarray(dist(q - steps)))[:, active].sum(axis=1) / 2e-6
    assert active.any() and np.all(np.isfinite(g))
    np.testing.assert_allclose(g, fd, atol=1e-7)


def _from_mujoco(c, q, qp):
    """simjax q with MuJoCo's qpos (hinge, slide and free joints)."""
    q = q.copy()
    for t, qa, _, sq, _ in c.joints:
        if t in (2, 3):
            q[sq] = qp[qa]
        elif t == 0:
            q[sq + 4 : sq + 7], q[sq : sq + 4] = qp[qa : qa + 3], qp[qa + 3 : qa + 7]
    return q


_SCENE = """<mujoco><option{option}>{flags}</option>
  <default><geom solmix="1"/><pair margin="0.01"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1" friction="0.8 0.01 0.001" priority="1" solref="0.01 0.9"/>
    <body name="a" pos="0 0 0.1"><freejoint name="fa"/>
      <geom name="ga" type="sphere" size="0.12" solmix="2" solref="0.03 1.1" solimp="0.8 0.9 0.01 0.4 3"
            margin="0.02" gap="0.01" condim="4" friction="1.2 0.02 0.002"/>
      <body name="a2" pos="0.2 0 0"><joint name="h" type="hinge" axis="0 1 0"{limit}/>
        <geom name="ca" type="capsule" size="0.05 0.15" condim="6" euler="0 90 0"/></body>
    </body>
    <body name="b" pos="0.1 0 0.15"><freejoint name="fb"/>
      <geom name="gb" type="sphere" size="0.1" contype="2" conaffinity="2"/>
      <geom name="cb" type="capsule" fromto="0 0 0 0.2 0.1 0" size="0.04" margin="0.01"{cb}/></body>
  </worldbody>
  <contact>{contact}
    <pair geom1="gb" geom2="floor" condim="1" friction="0.5 0.6 0.01 0.001 0.002" solref="0.05 1"/>
  </contact>
</mujoco>"""


def small_scene(option="", flags="", limit="", cb="", contact="") -> str:
    """A small MJCF scene for MuJoCo's pair rules: two free bodies (a sphere with a
    hinged capsule, a sphere only in an explicit ``<pair>`` and a capsule) over a plane;
    extra attributes of ``<option>``, the hinge and the capsule ``cb``, ``<option>``'s
    children and ``<contact>``'s go in as given."""
    return _SCENE.format(option=option, flags=flags, limit=limit, cb=cb, contact=contact)


@pytest.mark.parametrize(
    ("flags", "contact"),
    [("", ""), ('<flag filterparent="disable"/>', '<exclude body1="a2" body2="b"/>')],
)
def test_filters_pairs_and_parameters_match_mujoco(flags, contact, mujoco, tmp_path):
    """MuJoCo's candidate rules and parameter mixing on a small scene: contype/conaffinity
    (``gb`` collides only through its explicit ``<pair>``, with the pair's properties and
    margin), parent-child filtering (``ga``-``ca``, unless ``filterparent`` is off),
    ``<exclude>``, priority (the floor's friction and solref win), solmix-weighted
    solref/solimp, summed margins and gaps (``includemargin``), and condim's maximum."""
    path = tmp_path / "small.xml"
    path.write_text(small_scene(flags=flags, contact=contact))
    c = Case("small", path, mujoco)
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    system, matter, s0 = c.lm.system, c.lm.matter, c.state
    fn = jax.jit(lambda q: tuple(matter.find_contacts(system.realize(s0.with_q(q), sj.Stage.POSITION))[1:5]))
    ct = matter.find_contacts(system.realize(s0, sj.Stage.POSITION))
    rng = np.random.default_rng(3)
    seen = set()
    for k in range(40):
        q, _ = c.random_state(rng)
        qp, _ = c.to_mujoco(q)
        qp[2] = rng.uniform(-0.05, 0.2)  # the free bodies near the floor and each other
        qp[8:11] = qp[0:3] + rng.uniform(-0.2, 0.2, 3)
        q = _from_mujoco(c, q, qp)
        d.qpos[:] = c.to_mujoco(q)[0]
        mujoco.mj_forward(m, d)
        ref = _mujoco_contacts(d)
        got = _simjax_contacts(c, mujoco, m, fn, ct, q)
        assert sorted(got) == sorted(ref), k
        seen |= set(ref)
        for g, cons in ref.items():
            assert len(got[g]) == len(cons)
            for a, b in zip(got[g], cons):
                for x, y in zip(a, b):
                    np.testing.assert_allclose(x, y, atol=TOL, rtol=0, err_msg=f"state {k} pair {g}")
    name = {mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n): n for n in ("floor", "ga", "ca", "gb", "cb")}
    pairs = {tuple(sorted(name[i] for i in g)) for g in seen}
    assert ("floor", "gb") in pairs and ("floor", "ga") in pairs  # the explicit pair, priority
    assert (("ca", "ga") in pairs) == bool(flags)  # parent-child filtered unless disabled
    assert (("ca", "cb") in pairs) != bool(contact) and ("ga", "gb") not in pairs  # exclude, contype


def test_builder_surfaces_candidates_and_bad_input():
    """Surfaces built by hand: a Simbody half-space (fills x > 0 of its frame) rotated into a
    floor, a sphere on a free body, two capsules on a parent and child; the candidate list
    and the distances at a known pose; vmap over States keeps the shapes; bad properties
    are refused naming the field."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    ground = matter.Ground()
    mp = sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1))
    ball = sj.MobilizedBody.Free(ground, sj.Transform(), sj.Body.Rigid(mp), sj.Transform())
    arm = sj.MobilizedBody.Pin(ground, sj.Transform(), sj.Body.Rigid(mp), sj.Transform())
    fore = sj.MobilizedBody.Pin(arm, sj.Transform(p=[0, 1, 0]), sj.Body.Rigid(mp), sj.Transform())
    R_GS = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # x_S = -y_G: fills y < 0
    floor = ground.add_contact_surface(sj.Transform(R_GS, [0, 0, 0]), sj.ContactGeometry.HalfSpace())
    s = ball.add_contact_surface(sj.Transform(), sj.ContactSurface(sj.ContactGeometry.Sphere(0.1), name="s"))
    arm.add_contact_surface(sj.Transform(), sj.ContactGeometry.Capsule(0.05, 0.2))
    fore.add_contact_surface(sj.Transform(), sj.ContactGeometry.Capsule(0.05, 0.2))
    state = system.realize_topology()
    cand = matter.get_contact_candidates(state)
    kinds = {(g.kind1, g.kind2): list(zip(g.surf1.tolist(), g.surf2.tolist())) for g in cand.groups}
    # arm-fore: parent and child (filtered); floor-arm, floor-fore: plane-capsule
    assert kinds == {("plane", "sphere"): [(floor, s)], ("plane", "capsule"): [(0, 2), (0, 3)],
                     ("sphere", "capsule"): [(1, 2), (1, 3)]}  # fmt: skip
    q = np.array(state.q)
    q[4:7] = [3.0, 0.25, 0.0]  # the ball 0.15 above the floor, far from the arm
    st = system.realize(state.with_q(jnp.asarray(q)), sj.Stage.POSITION)
    ct = matter.find_contacts(st)
    k = int(np.flatnonzero((ct.surface[:, 0] == floor) & (ct.surface[:, 1] == s))[0])
    assert float(ct.dist[k]) == pytest.approx(0.15, abs=1e-14) and bool(ct.active[k]) is False
    np.testing.assert_allclose(np.asarray(ct.frame[k, 0]), [0, 1, 0], atol=1e-15)  # out of the half-space

    def dist(y):
        st = system.realize(state.with_q(jnp.asarray(q).at[5].set(y)), sj.Stage.POSITION)
        return matter.find_contacts(st).dist

    batch = jax.vmap(dist)(jnp.array([0.05, 0.1, 0.3]))
    np.testing.assert_allclose(np.asarray(batch[:, k]), [-0.05, 0.0, 0.2], atol=1e-14)
    bad_input = [
        ({"condim": 2}, "condim"),
        ({"friction": (1, -1, 0)}, "friction"),
        ({"solimp": (0.9, 1.2, 0.001, 0.5, 2)}, "solimp"),
        ({"margin": -1.0}, "margin"),
    ]
    for bad, field in bad_input:
        with pytest.raises(ValueError, match=field):
            sj.ContactSurface(sj.ContactGeometry.Sphere(0.1), **bad)
    with pytest.raises(ValueError, match="positive"):
        sj.ContactGeometry.Sphere(0.0)


def test_opensim_contact_spheres_on_their_bodies():
    """gait14dof22musc's ContactSpheres and its ContactHalfSpace floor (``orientation 0 0
    -pi/2`` on ground: y = 0, +y out) load on their bodies: at the default pose and at
    random coordinate values, each sphere-floor distance equals OpenSim's sphere centre
    height minus its radius, and each sphere-sphere distance OpenSim's centre distance
    minus the radii, to 1e-12. The candidates are the pairs the HuntCrossleyForces name."""
    osim = pytest.importorskip("opensim")
    from test_io_osim import model_path

    path = model_path("gait14dof22musc")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        lm = sj.io.load_osim(path)
    msg = " ".join(str(w.message) for w in rec)
    assert "7 contact geometries read and 10 pairs named by the forces, 2 contact forces" in msg
    om = osim.Model(path)
    s = om.initSystem()
    spheres = {}
    for k in range(om.getContactGeometrySet().getSize()):
        g = om.getContactGeometrySet().get(k)
        if g.getConcreteClassName() == "ContactSphere":
            spheres[g.getName()] = (g, osim.ContactSphere.safeDownCast(g).getRadius())
    names = lm.matter.get_contact_candidates(lm.state).surface_names
    system, matter = lm.system, lm.matter
    find = jax.jit(lambda q: matter.find_contacts(system.realize(lm.state.with_q(q), sj.Stage.POSITION)).dist)
    surf = matter.find_contacts(system.realize(lm.state, sj.Stage.POSITION)).surface
    rng = np.random.default_rng(5)
    coords = list(lm.coordinates.values())
    for trial in range(4):
        values = {}
        for c in coords:
            oc = om.getCoordinateSet().get(c.name)
            lo, hi = max(oc.getRangeMin(), -2.0), min(oc.getRangeMax(), 2.0)
            locked = oc.getLocked(s)  # OpenSim keeps a locked coordinate's value
            values[c.name] = c.default_value if trial == 0 or locked else rng.uniform(lo, hi)
            oc.setValue(s, float(values[c.name]), False)
        om.realizePosition(s)
        dist = np.asarray(find(lm.set_coordinate_values(lm.state, values).q))
        centre = {
            n: np.array(g.getFrame().findStationLocationInGround(s, g.get_location()).to_numpy())
            for n, (g, _) in spheres.items()
        }
        for (i, j), d in zip(surf, dist):
            a, b = names[i], names[j]
            if a == "platform":
                ref = centre[b][1] - spheres[b][1]
            else:
                ref = np.linalg.norm(centre[a] - centre[b]) - spheres[a][1] - spheres[b][1]
            assert d == pytest.approx(ref, abs=1e-12), (trial, a, b)


INERTIAL = '<inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial>'
URDF = """<robot name="r">
  <link name="base">{inertial}
    <collision><origin xyz="0 0 -0.05"/><geometry><box size="1 1 0.1"/></geometry></collision>
    <collision><geometry><mesh filename="base.stl"/></geometry></collision></link>
  <link name="l1">{inertial}
    <collision name="ball1"><origin xyz="0 0 0.5"/>
      <geometry><sphere radius="0.1"/></geometry></collision></link>
  <link name="l2">{inertial}
    <collision><origin xyz="0.3 0 0" rpy="0 1.5707963267948966 0"/>
      <geometry><cylinder radius="0.05" length="0.4"/></geometry></collision></link>
  <link name="l3">{inertial}
    <collision name="ball3"><geometry><sphere radius="0.2"/></geometry></collision></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" effort="1" velocity="1"/></joint>
  <joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0 0 0.5"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="1" velocity="1"/></joint>
  <joint name="j3" type="revolute"><parent link="l2"/><child link="l3"/><origin xyz="0.6 0 0"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="1" velocity="1"/></joint>
</robot>""".replace("{inertial}", INERTIAL)


def test_urdf_collisions_load_as_contact_surfaces(tmp_path):
    """A URDF's ``<collision>`` box, sphere and cylinder become contact surfaces on their
    links (``<origin>`` applied, sizes halved), a collision mesh is left out and counted,
    and the load warning says contact is detected without force. Candidates follow MuJoCo's
    rules: parent-child pairs are filtered (``l1``-``l2``, ``l2``-``l3``) except with the
    world-welded ``base``; cylinder-box has no kernel yet (counted as unsupported). At
    ``j2 = 0.6`` ``ball3``'s centre is at ``(0.6 cos 0.6, 0, 0.5 - 0.6 sin 0.6)``, above
    the box (its top at z = 0), 0.6 from ``ball1``'s."""
    path = tmp_path / "r.urdf"
    path.write_text(URDF)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        lm = sj.io.load_urdf(str(path))
    msg = " ".join(str(w.message) for w in rec)
    assert "4 collision shape (its contact is detected" in msg and "1 collision mesh" in msg
    assert "1 colliding pair of a kind with no collision kernel yet (cylinder-box: left out)" in msg
    cand = lm.matter.get_contact_candidates(lm.state)
    names = cand.surface_names
    pairs = {
        (g.kind1, g.kind2): [(names[i], names[j]) for i, j in zip(g.surf1, g.surf2)] for g in cand.groups
    }
    assert pairs == {
        ("sphere", "sphere"): [("ball1", "ball3")],
        ("sphere", "box"): [("ball1", "base_collision0"), ("ball3", "base_collision0")],
    }
    assert [(names[i], names[j]) for i, j in cand.unsupported] == [("l2_collision0", "base_collision0")]
    state = lm.set_coordinate_values(lm.state, {"j2": 0.6})
    ct = lm.matter.find_contacts(lm.system.realize(state, sj.Stage.POSITION))
    got = {(names[i], names[j]): float(d) for (i, j), d in zip(ct.surface, ct.dist)}
    assert got["ball3", "base_collision0"] == pytest.approx(0.5 - 0.6 * np.sin(0.6) - 0.2, abs=1e-12)
    assert got["ball1", "ball3"] == pytest.approx(0.3, abs=1e-12)
    assert got["ball1", "base_collision0"] == pytest.approx(0.4, abs=1e-12)
