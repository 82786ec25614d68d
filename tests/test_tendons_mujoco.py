"""MuJoCo's tendons in ``load_mjcf`` (issue 64): lengths, Jacobians and passive forces
against MuJoCo 4.0.1.

Models: dm_control's ``ball_in_cup`` (a spatial tendon between two sites on slide-jointed
bodies) and ``fish`` (fixed tendons, one with stiffness, on a free-floating body); MJX's
test models ``pulley_fixed_site_wrap`` (fixed tendons, sites, sphere and cylinder wraps,
pulleys), ``wrap_sidesite`` (side sites inside the wrap geoms: MuJoCo's inside wrap) and
``pendula`` (fixed tendons with stiffness, damping and a ``springlength`` deadband); and a
model written here: a free box hanging by a spatial tendon over a sphere and around a
cylinder on a hinged arm, a pulley tendon and a fixed tendon with stiffness,
damping and a deadband.

At random states (hinge and slide joints within their ranges, random quaternions):
``ten_length``, ``ten_velocity`` and ``ten_J`` (in simjax's speeds, ``J_u = ten_J T`` with
``qvel = T u``) to 1e-12 (the inside wrap's speeds and Jacobians to 1e-8: its tangent point
is MuJoCo's Newton solve to 1e-6, and the two agree to ~5e-9 there); with contact,
constraints and actuation off, ``qacc`` to 1e-10
relative (measured ~1e-13); with ``contact=True`` on ball_in_cup, the string's limit row
and the ball's contacts with the cup and the floor: ``qacc`` and ``efc_force`` to 1e-9
(measured ~1e-15 in qacc). The Jacobian equals central differences of the length. Bad
input: an unknown joint, site or geom, a tendon on a ball joint, a wrap geom that is not a
sphere or cylinder, a tendon mixing joints and sites: errors naming the element.
"""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch
from test_io_mjcf import Case, _mujoco_at, _oracle

import simjax as sj
from simjax.constraints import soft
from simjax.io._loaded import ModelFileError
from simjax.io._mjcf import load_mjcf

DMC = ("dm_control", "1.0.50")
MJX = ("mujoco-mjx", "3.17.0")
FILES = {
    "ball_in_cup": (DMC, "dm_control/suite/ball_in_cup.xml"),
    "fish": (DMC, "dm_control/suite/fish.xml"),
    "pulley_fixed_site_wrap": (MJX, "mujoco/mjx/test_data/tendon/pulley_fixed_site_wrap.xml"),
    "wrap_sidesite": (MJX, "mujoco/mjx/test_data/tendon/wrap_sidesite.xml"),
    "pendula": (MJX, "mujoco/mjx/test_data/pendula.xml"),
}

HANGING = """<mujoco model="hanging">
  <default><tendon stiffness="30" damping="0.7"/></default>
  <worldbody>
    <site name="anchor" pos="0 0 1"/>
    <geom name="post" type="sphere" pos="0.05 0 0.6" size="0.3" contype="0" conaffinity="0"/>
    <body name="box" pos="0.1 0.05 0.2">
      <freejoint name="free"/>
      <geom type="box" size="0.05 0.04 0.03" mass="1.3"/>
      <site name="hook" pos="0.02 0.01 0.03"/>
      <body name="arm" pos="0 0 -0.05">
        <joint name="hinge" type="hinge" axis="0 1 0" springref="20"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.4"/>
        <geom name="drum" type="cylinder" pos="0.1 0 0" zaxis="0 1 0" size="0.03 0.02"
              contype="0" conaffinity="0"/>
        <site name="tip" pos="0.2 0 0.01"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="rope" springlength="0.5 0.6">
      <site site="anchor"/>
      <geom geom="post"/>
      <site site="hook"/>
      <geom geom="drum"/>
      <site site="tip"/>
    </spatial>
    <spatial name="pulleyed" stiffness="5" damping="0.1">
      <site site="hook"/>
      <site site="anchor"/>
      <pulley divisor="2"/>
      <site site="anchor"/>
      <site site="tip"/>
    </spatial>
    <fixed name="coupler" springlength="0.1" stiffness="2" damping="0.3">
      <joint joint="hinge" coef="1.5"/>
    </fixed>
  </tendon>
  <actuator>
    <motor name="pull" tendon="rope" gear="2" ctrlrange="-1 1"/>
    <position name="hold" tendon="pulleyed" kp="40" kv="3"/>
    <general name="slow" tendon="coupler" dyntype="filter" dynprm="0.1" gainprm="5"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    out = {name: fetch(*pkg, [f])[f] for name, (pkg, f) in FILES.items()}
    out["hanging"] = tmp_path_factory.mktemp("tendons") / "hanging.xml"
    out["hanging"].write_text(HANGING)
    return out


def _case(name, path, mujoco):
    """The loaded model and MuJoCo's with tendon springs and dampers on (what simjax does
    not model, as in test_io_mjcf, off)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = Case(name, path, mujoco)
    m0 = mujoco.MjModel.from_xml_path(str(path))
    c.m, c.d = _oracle(mujoco, path)
    c.m.opt.density = c.m.opt.viscosity = 0.0  # fluid forces: not modelled (listed as ignored)
    np.testing.assert_array_equal(c.m.tendon_stiffness, m0.tendon_stiffness)  # kept on
    return c


def _ten_J(mujoco, m, d):
    J = np.zeros((m.ntendon, m.nv))
    mujoco.mju_sparse2dense(J, d.ten_J, m.ten_J_rownnz, m.ten_J_rowadr, m.ten_J_colind)
    return J


def _geometry(c):
    """``(q, u) -> (lengths, lengthening speeds, dL/du)``, jitted."""
    system, matter = c.lm.system, c.lm.matter

    def f(q, u):
        s = system.realize(c.state.with_q(q).with_u(u), sj.Stage.VELOCITY)
        return (
            matter.calc_tendon_lengths(s),
            matter.calc_tendon_lengthening_speeds(s),
            matter.calc_tendon_jacobians(s),
        )

    return jax.jit(f)


#: model -> the tendons compared (wrap_sidesite: the one whose side sites lie inside their
#: geoms; MuJoCo 4.0.1 wraps around outside side sites differently from its published code)
GEOMETRY = {"ball_in_cup": None, "pulley_fixed_site_wrap": None, "wrap_sidesite": [0], "hanging": None}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(GEOMETRY))
def test_tendon_lengths_speeds_and_jacobians_equal_mujoco(name, paths, mujoco):
    c = _case(name, paths[name], mujoco)
    m = c.m
    assert list(c.lm.tendons) == [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_TENDON, i) or f"tendon#{i}"
                                  for i in range(m.ntendon)]  # fmt: skip
    keep = GEOMETRY[name] if GEOMETRY[name] is not None else list(range(m.ntendon))
    f = _geometry(c)
    rng = np.random.default_rng(7)
    wrapped = 0
    for _ in range(3):
        q, u = c.random_state(rng)
        L, V, J = (np.asarray(x)[keep] for x in f(jnp.asarray(q), jnp.asarray(u)))
        d = _mujoco_at(c, mujoco, q, u)[2]
        _, T = c.to_mujoco(q)
        np.testing.assert_allclose(L, d.ten_length[keep], rtol=0, atol=1e-12)
        # the inside wrap's tangent point is a Newton solve to 1e-6 (mju_wrap): the lengths
        # are stationary in it, the Jacobians are not (measured 5e-9 there, 1e-16 elsewhere)
        tol = 1e-8 if name == "wrap_sidesite" else 1e-12
        np.testing.assert_allclose(V, d.ten_velocity[keep], rtol=0, atol=tol)
        np.testing.assert_allclose(J, (_ten_J(mujoco, m, d) @ T)[keep], rtol=0, atol=tol)
        wrapped += int(np.sum(d.wrap_obj.ravel()[: d.ten_wrapnum.sum()] >= 0))
    if name in ("pulley_fixed_site_wrap", "wrap_sidesite", "hanging"):
        assert wrapped > 0  # the states do wrap around geoms
    if name == "hanging":  # the handles; the Jacobian against central differences of the length
        q, u = c.random_state(rng)
        rope = c.lm.tendons["rope"]
        s = c.lm.system.realize(c.state.with_q(jnp.asarray(q)), sj.Stage.POSITION)
        hinge = c.lm.coordinates["hinge"]
        i, ui = hinge.q_index(c.state), hinge.u_index(c.state)
        h = 1e-6
        qp, qm = q.copy(), q.copy()
        qp[i] += h
        qm[i] -= h
        z = jnp.zeros_like(jnp.asarray(u))
        fd = (f(jnp.asarray(qp), z)[0][0] - f(jnp.asarray(qm), z)[0][0]) / (2 * h)
        arm = float(rope.compute_moment_arm(s, hinge))
        assert abs(-arm - float(fd)) < 1e-8 and abs(arm) > 1e-3
        assert float(rope.get_length(s)) == pytest.approx(float(f(jnp.asarray(q), z)[0][0]), abs=1e-14)
        assert float(rope.get_jacobian(s)[ui]) == pytest.approx(-arm, abs=1e-14)


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["fish", "pendula", "hanging"])
def test_tendon_springs_and_dampers_equal_mujoco_qacc(name, paths, mujoco):
    """Contact, constraints and actuation off: ``udot`` equals MuJoCo's ``qacc`` with its
    tendon stiffness, ``springlength`` (-1: the length at ``qpos_spring``; deadbands) and
    damping on."""
    c = _case(name, paths[name], mujoco)
    assert c.m.tendon_stiffness.any()
    kinds = [type(e).__name__ for e in c.lm.forces._elements]
    assert kinds.count("TendonSpringDamper") == int(
        np.sum((c.m.tendon_stiffness > 0) | (c.m.tendon_damping > 0))
    )
    rng = np.random.default_rng(3)
    for _ in range(2):
        q, u = c.random_state(rng)
        _, udot, _, _ = (np.asarray(x) for x in c.compiled(jnp.asarray(q), jnp.asarray(u)))
        _, a_mj, d = _mujoco_at(c, mujoco, q, u)
        assert np.abs(d.qfrc_passive).max() > 0
        assert np.abs(udot - a_mj).max() <= 1e-10 * max(1.0, np.abs(a_mj).max())


# ----------------------------------------------------------------------------- bad input


def _xml(tendon: str, extra_body: str = "") -> str:
    return f"""<mujoco><worldbody><site name="w" pos="0 0 1"/>
      <body name="b"><joint name="h" axis="0 1 0"/><joint name="ball" type="ball"/>
        <geom name="g" type="sphere" size="0.1" mass="1" contype="0" conaffinity="0"/>
        <geom name="box" type="box" size=".1 .1 .1" contype="0" conaffinity="0"/>
        <site name="s" pos="0.1 0 0"/>{extra_body}</body></worldbody>
      <tendon>{tendon}</tendon></mujoco>"""


@pytest.mark.parametrize(
    "tendon, message",
    [
        ('<fixed name="t"><joint joint="nope" coef="1"/></fixed>', "no joint named 'nope'"),
        (
            '<fixed name="t"><joint joint="ball" coef="1"/></fixed>',
            "ball joint; a fixed tendon needs hinge or slide",
        ),
        ('<spatial name="t"><site site="w"/><site site="zz"/></spatial>', "no site named 'zz'"),
        (
            '<spatial name="t"><site site="w"/><geom geom="box"/><site site="s"/></spatial>',
            "is a box; tendons wrap",
        ),
        ('<spatial name="t"><site site="w"/><geom geom="g"/></spatial>', "ends with a site"),
        (
            '<spatial name="t"><site site="w"/><joint joint="h"/></spatial>',
            "holds <site>, <geom> and <pulley>",
        ),
    ],
)
def test_bad_tendons_name_the_element(tendon, message):
    with pytest.raises(ModelFileError, match=message) as e:
        load_mjcf(_xml(tendon), warn_ignored=False)
    assert "tendon" in str(e.value).lower() or "Tendon" in str(e.value)


def test_what_is_not_modelled_is_named():
    """Frictionloss, armature and limits (without contact=True) are listed; a side site
    outside its geom gets a note."""
    t = """<spatial name="t" frictionloss="1" armature="0.1" limited="true" range="0 2"
             actuatorfrclimited="true" actuatorfrcrange="-1 1">
             <site site="w"/><geom geom="g" sidesite="w"/><site site="s"/></spatial>"""
    with pytest.warns(UserWarning) as rec:
        lm = load_mjcf(_xml(t))
    msg = " ".join(str(r.message) for r in rec)
    for part in (
        "tendon frictionloss",
        "tendon armature",
        "tendon range",
        "tendon actuatorfrcrange",
        "side site 'w'",
    ):
        assert part in msg, part
    assert list(lm.tendons) == ["t"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a modelled tendon warns about nothing
        load_mjcf(_xml('<fixed name="t" stiffness="1" damping="2"><joint joint="h" coef="2"/></fixed>'))


def test_tendon_handle_errors():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    rigid = sj.Body.Rigid(sj.MassProperties(1.0, [0.5, 0, 0], sj.Inertia(0.01, 0.3, 0.3)))
    body = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), rigid, sj.Transform())
    t = sj.Tendon(matter, "t")
    t.append_joint((body, 0), 2.0)
    with pytest.raises(ValueError, match="either fixed .* or spatial"):
        t.append_site(body, [0, 0, 0])
    s = sj.Tendon(matter, "s")
    with pytest.raises(ValueError, match="radius must be finite and > 0"):
        s.append_geom(body, "sphere", -1.0)
    with pytest.raises(ValueError, match="shape must be 'sphere' or 'cylinder'"):
        s.append_geom(body, "box", 1.0)
    s.append_site(body, [0.1, 0, 0])
    with pytest.raises(ValueError, match="at least two sites"):
        system.realize_topology()


@pytest.mark.oracle
def test_tendon_actuators_equal_mujoco(paths, mujoco):
    """Motor, position and filtered general actuators on spatial (wrapped, pulley) and fixed
    tendons: ``actuator_force``, ``act_dot`` and ``qacc`` at random controls and activations,
    to 1e-10."""
    c = _case("hanging", paths["hanging"], mujoco)
    m = c.m
    m.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
    d = mujoco.MjData(m)
    lm = c.lm
    assert lm.control_names == ["pull", "hold", "slow"]
    acts = [lm.actuators[n] for n in lm.control_names]
    assert all(isinstance(a, sj.Force.TendonActuator) for a in acts)
    system = lm.system

    @jax.jit
    def f(q, u, z, ctrl):
        s = system.set_controls(c.state.with_q(q).with_u(u).with_z(z), ctrl)
        s = system.realize(s, sj.Stage.ACCELERATION)
        return s.dynamics_cache.mobility_forces, jnp.stack([a.get_actuation(s) for a in acts]), s.zdot, s.udot

    rng = np.random.default_rng(5)
    for _ in range(2):
        q, u = c.random_state(rng)
        qpos, T = c.to_mujoco(q)
        ctrl = rng.uniform(-1.5, 1.5, 3)
        d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, T @ u, ctrl
        d.act[:] = rng.uniform(-1, 1, m.na)
        mujoco.mj_forward(m, d)
        tau, force, zdot, udot = (
            np.asarray(x) for x in f(jnp.asarray(q), jnp.asarray(u), jnp.asarray(d.act), ctrl)
        )
        # body forces of spatial tendons do not show in mobility_forces: compare through qacc
        np.testing.assert_allclose(
            force, d.actuator_force, rtol=0, atol=1e-10 * max(1, np.abs(d.actuator_force).max())
        )
        np.testing.assert_allclose(zdot, d.act_dot, rtol=0, atol=1e-12)
        a_mj = np.linalg.solve(T, d.qacc)
        assert np.abs(udot - a_mj).max() <= 1e-10 * max(1.0, np.abs(a_mj).max())
        assert np.abs(T.T @ d.qfrc_actuator).max() > 1.0  # the actuators do push


@pytest.mark.oracle
def test_tendon_limit_and_contact_rows_equal_mujoco(paths, mujoco):
    """``load_mjcf(..., contact=True)`` on ball_in_cup, contacts on: the string (a spatial
    tendon limited to 0.3 m) is MuJoCo's tendon limit row (``mjCNSTR_LIMIT_TENDON``,
    ``tendon_invweight0``) and the ball's contacts with the cup's capsules and the floor are
    MuJoCo's contact rows: ``qacc`` to 1e-9 relative, the string's ``efc_force`` and every
    contact's (matched by geom pair) to 1e-9 of the largest force, at random states with the
    string slack and taut and at states with the ball pressed into the cup's bottom, its
    wall and its rim, and onto the floor with the string taut.

    The ball is a "simple" body (``body_simple == 2``: inertial frame = body frame, slide
    joints only), for which MuJoCo takes ``body_invweight0 = 1/mass`` (15.28) where the
    diagonal of ``J M^-1 J'`` averaged over x, y, z gives 2/3 of it (10.19); without that
    shortcut the contact rows' regulariser ``R`` was 1.5 times too small and qacc 0.8% off
    (measured at the cup-bottom state)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = load_mjcf(paths["ball_in_cup"], contact=True)
    m = mujoco.MjModel.from_xml_path(str(paths["ball_in_cup"]))
    opt = lm.system.model_for(lm.default_state).mujoco
    np.testing.assert_allclose(opt.tendon_invweight, m.tendon_invweight0, rtol=1e-12)
    assert list(m.body_simple) == [1, 0, 2]
    for name in ("cup", "ball"):
        b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
        mine = opt.body_invweight[lm.bodies[name].index]
        np.testing.assert_allclose(mine, m.body_invweight0[b], rtol=1e-12)
    d = mujoco.MjData(m)
    st = lm.default_state
    nl = 2 * opt.limit_q.size
    assert np.allclose(np.asarray(st.q), m.qpos0)  # slide joints: q = qpos
    cand = lm.system.model_for(st).contact
    names = cand.surface_names

    def geom(name):
        return mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, name)

    @jax.jit
    def f(q, u):
        s = lm.system.realize(st.with_q(q).with_u(u), sj.Stage.ACCELERATION)
        ct = lm.matter.find_contacts(s)
        on = ct.active & (ct.dist < jnp.asarray(ct.includemargin))
        return s.udot, s.acceleration_cache.efc_force, on

    ct0 = lm.matter.find_contacts(lm.system.realize(st, sj.Stage.POSITION))
    iw = opt.body_invweight
    cl = soft.contact_layout(ct0, cand.surface_bodies, iw, opt.cone, opt.impratio, opt.timestep)
    rng = np.random.default_rng(2)
    # (cup_x, cup_z, ball_x, ball_z): the ball on the cup's bottom, against its wall, on its
    # rim, and pressed onto the floor with the string taut
    pressed = [(0.0, 0.0, 0.004, 0.328), (0.01, -0.02, 0.03, 0.35), (0.0, 0.0, 0.055, 0.43),
               (0.0, -0.15, 0.02, -0.178)]  # fmt: skip
    states = [(m.qpos0 + rng.normal(0.0, 0.2, m.nq), rng.normal(0.0, 1.0, m.nv)) for _ in range(4)]
    states += [(np.asarray(q), rng.normal(0.0, 0.5, m.nv)) for q in pressed]
    taut = touching = 0
    seen = set()
    for q, u in states:
        d.qpos[:], d.qvel[:] = q, u
        mujoco.mj_forward(m, d)
        udot, force, on = (np.asarray(x) for x in f(jnp.asarray(q), jnp.asarray(u)))
        scale = max(1.0, np.abs(d.qacc).max())
        np.testing.assert_allclose(udot, d.qacc, rtol=0, atol=1e-9 * scale)
        fscale = max(1.0, np.abs(d.efc_force).max(initial=0.0))
        rows = np.flatnonzero(d.efc_type == mujoco.mjtConstraint.mjCNSTR_LIMIT_TENDON)
        mine = force[nl : nl + 2]  # lower, upper rows of the string
        if len(rows):
            taut += 1
            upper = d.ten_length[0] > 0.15
            np.testing.assert_allclose(mine[int(upper)], d.efc_force[rows[0]], rtol=0, atol=1e-9 * fscale)
            assert mine[1 - int(upper)] == 0.0
        else:
            assert not np.any(mine)
        # contacts by geom pair (one slot each here) against d.contact
        ref = {}
        for i in range(d.ncon):
            c = d.contact[i]
            if c.efc_address >= 0:
                ref[tuple(sorted(int(g) for g in c.geom))] = (c.efc_address, int(c.dim))
        got = {}
        for k in np.flatnonzero(on):
            g = tuple(sorted(geom(names[s]) for s in ct0.surface[k]))
            got[g] = k
        assert sorted(got) == sorted(ref)
        for g, k in got.items():
            a, n = ref[g][0], int(cl.count[k])
            assert n == 2 * (ref[g][1] - 1)  # pyramidal: two rows per friction direction
            start = nl + 2 + cl.start[k]
            np.testing.assert_allclose(force[start : start + n], d.efc_force[a : a + n], rtol=0,
                                       atol=1e-9 * fscale, err_msg=str(g))  # fmt: skip
            seen.add(g)
        touching += bool(got)
    assert 0 < taut < len(states) and touching >= len(pressed)
    ball, floor = geom("ball"), geom("ground")
    assert (floor, ball) in seen and len({g for g in seen if floor not in g}) >= 2, seen  # cup parts


COUPLED = """<mujoco model="coupled">
  <worldbody>
    <body name="a"><joint name="j1" axis="0 1 0" ref="0.2"/>
      <geom type="capsule" fromto="0 0 0 .3 0 0" size=".02"/>
      <body name="b" pos=".3 0 0"><joint name="j2" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".02"/>
        <body name="c" pos=".3 0 0"><joint name="j3" type="slide" axis="1 0 0"/>
          <geom type="sphere" size=".03"/></body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="sum"><joint joint="j1" coef=".5"/><joint joint="j2" coef=".5"/></fixed>
    <fixed name="diff"><joint joint="j2" coef="1"/><joint joint="j3" coef="-2"/></fixed>
  </tendon>
  <equality>
    <tendon name="poly" tendon1="sum" tendon2="diff" polycoef="0.01 0.5 0.3 -0.2 0.1"/>
    <tendon name="held" tendon1="diff" active="false"/>
  </equality>
</mujoco>"""


@pytest.mark.oracle
def test_tendon_equalities_are_couplers_with_mujocos_residual(tmp_path, mujoco):
    """``<equality><tendon>`` on fixed tendons (with a polynomial of a second tendon, or
    alone) becomes a CoordinateCoupler whose residual is MuJoCo's ``efc_pos`` at random q
    (1e-14; lengths measured from qpos0, a hinge's ``ref`` included); ``active="false"``
    is disabled by default; dm_control's quadruped's four couplings likewise (no longer
    listed as left out); after projection the residuals vanish."""
    path = tmp_path / "coupled.xml"
    path.write_text(COUPLED)
    lm = sj.io.load_mjcf(str(path))
    assert {n: type(k).__name__ for n, k in lm.constraints.items()} == {
        "poly": "CoordinateCoupler",
        "held": "CoordinateCoupler",
    }
    assert lm.constraints["held"].is_disabled_by_default()
    quad = fetch(*DMC, ["dm_control/suite/quadruped.xml"])["dm_control/suite/quadruped.xml"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lq = sj.io.load_mjcf(str(quad))
    assert not any("equality tendon" in k for k in lq.ignored), lq.ignored
    rng = np.random.default_rng(3)
    for model, file, names in ((lm, path, ["poly"]), (lq, quad, [f"coupling_{s}" for s in
                               ("front_left", "front_right", "back_right", "back_left")])):  # fmt: skip
        m = mujoco.MjModel.from_xml_path(str(file))
        d = mujoco.MjData(m)
        eq_ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_EQUALITY, n) for n in names]
        system = model.system
        f = jax.jit(
            lambda q, system=system, model=model: jnp.concatenate(
                [
                    model.constraints[n].get_position_errors_as_vector(
                        system.realize(model.default_state.with_q(q), sj.Stage.POSITION)
                    )
                    for n in names
                ]
            )
        )
        for _ in range(3):
            d.qpos[:] = m.qpos0 + rng.normal(0.0, 0.3, m.nq)
            if m.nq > 7:  # the quadruped's free joint: a unit quaternion
                d.qpos[3:7] /= np.linalg.norm(d.qpos[3:7])
            mujoco.mj_forward(m, d)
            rows = d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
            mj = np.array([d.efc_pos[rows][d.efc_id[rows] == i][0] for i in eq_ids])
            assert m.nq == model.default_state.q.size  # hinge, slide, free: simjax's q is MuJoCo's qpos
            q = jnp.asarray(d.qpos)
            np.testing.assert_allclose(np.asarray(f(q)), mj, atol=1e-14, rtol=0)
        st = system.project(model.default_state.with_q(q), tol=1e-12)
        assert float(jnp.abs(f(st.q)).max()) < 1e-10
