"""Coordinate limits from model files: MJCF ``limited``/``range`` (on by default, as in MuJoCo,
but hard), URDF ``<limit>``, OpenSim ``clamped`` ranges (off by default, as in OpenSim's
forward dynamics). Each loader records them (``Coordinate.limit``), ``summary()`` lists
them, an option turns them off, and the Assembler's bounds are the same ranges. A limited
MJCF rod resting on its stop is checked against MuJoCo (whose limits are soft)."""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest
from data_fetch import fetch

import simjax as sj

ROD = """<mujoco>
  <option gravity="0 0 -9.81" timestep="0.001" integrator="Euler"/>
  <worldbody>
    <body name="rod">
      <joint name="hinge" type="hinge" axis="0 1 0" range="-30 60" limited="true"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.02" mass="1"/>
      <body name="tip" pos="0.5 0 0">
        <joint name="slide" type="slide" axis="1 0 0" range="-0.05 0.1" limited="true"/>
        <geom type="sphere" size="0.03" mass="0.1"/>
      </body>
    </body>
  </worldbody>
</mujoco>"""


def _rod(tmp_path, **kw):
    p = tmp_path / "rod.xml"
    p.write_text(ROD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return p, sj.io.load_mjcf(p, **kw)


def test_mjcf_limits_are_hard_by_default_and_rest_where_mujoco_rests(tmp_path):
    mujoco = pytest.importorskip("mujoco")
    path, lm = _rod(tmp_path)
    hinge, slide = lm.coordinates["hinge"], lm.coordinates["slide"]
    assert hinge.limit is not None and slide.limit is not None and not slide.limit.is_rotary()
    assert hinge.clamped and hinge.limit.get_default_range() == pytest.approx(np.radians([-30, 60]))
    assert "joint range (limit constraint)" not in lm.ignored
    assert "hard limit" in lm.summary() and "coordinate limits (2 unilateral rows" in lm.system.summary()
    # the Assembler's bounds are the limit's range
    asm = lm.make_assembler()
    assert asm._bounds[(hinge.body.index, 0)] == hinge.limit.get_default_range()
    # the rod falls onto its upper stop, the tip slides out to the end of its slide
    fs = sj.simulate(lm.system, lm.state, 3.0, integrator="euler", dt=1e-3).final_state
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    for _ in range(3000):
        mujoco.mj_step(m, d)
    q_sj, q_mj = float(fs.q[0]), float(d.qpos[0])
    tol = float(hinge.limit.get_tolerance(fs))
    assert int(hinge.limit.is_engaged(fs)) == -1 and int(slide.limit.is_engaged(fs)) == -1
    assert np.radians(60) <= q_sj <= np.radians(60) + tol + 1e-12  # hard: within the deadband
    assert 0.1 <= float(fs.q[1]) <= 0.1 + float(slide.limit.get_tolerance(fs)) + 1e-12
    assert 0 < q_mj - np.radians(60) < 1e-2  # MuJoCo's soft limits sink in further (measured 4e-3)
    assert 0 < float(d.qpos[1]) - 0.1 < 1e-2
    # each holds the static torque of its own rest pose
    s = lm.system.realize(fs, sj.Stage.DYNAMICS)
    g_sj = float(lm.matter.calc_gravity_and_applied_generalized_forces(s)[0])
    np.testing.assert_allclose(float(hinge.limit.get_generalized_force(fs)), -g_sj, rtol=1e-9)
    s_mj = lm.system.realize(fs.with_q(np.asarray(d.qpos)).with_u(0 * fs.u), sj.Stage.DYNAMICS)
    g_mj = np.asarray(lm.matter.calc_gravity_and_applied_generalized_forces(s_mj))
    np.testing.assert_allclose(np.asarray(d.qfrc_constraint), -g_mj, rtol=1e-6)


def test_mjcf_limits_off_records_the_range_only(tmp_path):
    _, lm = _rod(tmp_path, limits=False)
    assert lm.coordinates["hinge"].limit is None and lm.ignored["joint range (limit constraint)"] == 2
    assert lm.matter.get_num_limits() == 0
    sj.simulate(lm.system, lm.state, 0.01, integrator="rk4", dt=1e-3)  # smooth integrators are fine


def test_urdf_limits_on_revolute_and_prismatic_joints(tmp_path):
    urdf = """<robot name="r">
      <link name="base"/>
      <link name="a"><inertial><mass value="1"/>{I}</inertial></link>
      <link name="b"><inertial><mass value="1"/>{I}</inertial></link>
      <link name="c"><inertial><mass value="1"/>{I}</inertial></link>
      <joint name="j1" type="revolute"><parent link="base"/><child link="a"/><axis xyz="0 0 1"/>
        <limit lower="-1" upper="1" effort="10" velocity="1"/></joint>
      <joint name="j2" type="prismatic"><parent link="a"/><child link="b"/><axis xyz="1 0 0"/>
        <limit lower="0" upper="0.2" effort="10" velocity="1"/></joint>
      <joint name="j3" type="continuous"><parent link="b"/><child link="c"/><axis xyz="0 0 1"/></joint>
    </robot>""".replace("{I}", '<inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/>')
    p = tmp_path / "r.urdf"
    p.write_text(urdf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = sj.io.load_urdf(p)
        off = sj.io.load_urdf(p, limits=False)
    c = lm.coordinates
    assert c["j1"].limit.is_rotary() and not c["j2"].limit.is_rotary() and c["j3"].limit is None
    assert c["j2"].limit.get_default_range() == (0.0, 0.2)
    assert off.matter.get_num_limits() == 0 and off.coordinates["j1"].range == (-1.0, 1.0)
    asm = lm.make_assembler()
    for name in ("j1", "j2"):
        assert asm._bounds[(c[name].body.index, 0)] == c[name].limit.get_default_range()


def test_opensim_clamped_ranges_become_limits_on_request():
    pytest.importorskip("opensim")
    path = fetch("pose2sim", "0.4.0", ["Pose2Sim/Demo/opensim/Model_Pose2Sim_Body25b.osim"])
    path = path["Pose2Sim/Demo/opensim/Model_Pose2Sim_Body25b.osim"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = sj.io.load_osim(path)
        lm = sj.io.load_osim(path, limits=True)
    assert plain.matter.get_num_limits() == 0  # OpenSim's forward dynamics do not enforce clamped
    clamped = [c for c in lm.coordinates.values() if c.clamped and not c.locked]
    limited = [c for c in clamped if c.limit is not None]
    refused = [n for n in lm.notes if "range is not enforced" in n]
    assert len(limited) + len(refused) == len(clamped) and len(limited) > 15
    assert lm.matter.get_num_limits() == len(limited)
    asm = lm.make_assembler()
    for c in limited:
        assert asm._bounds[(c.body.index, c.which)] == c.limit.get_default_range() == c.range


def test_a_real_opensim_model_simulates_with_its_clamped_ranges_hard():
    """The Pose2Sim full-body model (62 coordinates, CoordinateCouplers, 21 clamped ranges)
    loaded with ``limits=True``, its joints thrown at +-4 rad/s: limits engage and release,
    no coordinate passes its range by more than its tolerance, and the couplers hold. (The
    default pose has both shoulders in gimbal lock, arm_add = -pi/2, where the mass matrix
    is singular; start the arms off it.)"""
    pytest.importorskip("opensim")
    path = fetch("pose2sim", "0.4.0", ["Pose2Sim/Demo/opensim/Model_Pose2Sim_Body25b.osim"])
    path = path["Pose2Sim/Demo/opensim/Model_Pose2Sim_Body25b.osim"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = sj.io.load_osim(path, limits=True)
    st = lm.default_state
    for n in ("arm_add_r", "arm_add_l"):
        st = lm.coordinates[n].set_value(st, -1.2)
    rng = np.random.default_rng(0)
    u = np.zeros(st.u.shape[0])
    limited = [c for c in lm.coordinates.values() if c.limit is not None]
    for c in limited:
        u[c.u_index(st)] = rng.choice([-4.0, 4.0])
    traj = sj.simulate(lm.system, st.with_u(u), 0.3, integrator="euler", dt=1e-3, save_at=30)
    E = np.asarray(traj.discrete["matter"]["limit_engaged"])
    assert E.any(axis=1).sum() > 10 and (E[:-1] != E[1:]).any()  # engaged, and released
    for c in limited:
        v = np.asarray(c.get_value(traj.states))
        tol = float(c.limit.get_tolerance(traj.final_state))
        assert v.min() >= c.range[0] - tol - 1e-9 and v.max() <= c.range[1] + tol + 1e-9, c.name
    fin = lm.system.realize(traj.final_state, sj.Stage.VELOCITY)
    mp = lm.system.model_for(fin).constraint_counts(True)[0]
    assert np.abs(np.asarray(fin.qerr[:mp])).max() < 1e-10 and np.abs(np.asarray(fin.uerr)).max() < 1e-10
