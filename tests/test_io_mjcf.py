"""MJCF import (``load_mjcf``) against MuJoCo itself.

Real models come from PyPI wheels through ``tests/data_fetch.py`` (never vendored):
dm_control's ``humanoid_CMU.xml`` (with its ``<include>``d common files) and MJX's test model
``pendula.xml`` (free, ball, slide and hinge joints, stacked joints in one body, mocap bodies);
a small gripper written here has two four-bar loops closed by ``connect`` equalities (one by
bodies and anchor, one by sites), a ``joint`` equality and an inactive ``weld``.

The oracle is MuJoCo with everything simjax does not model switched off: constraints,
contacts and actuation disabled, ``body_gravcomp`` zeroed (joint damping, springs and
armature stay on: simjax models them). At random
states the mass matrix equals ``mj_fullM`` and the forward dynamics ``qacc`` to 1e-9 relative,
the body poses ``xpos``/``xmat``; masses, centers of mass and inertias equal MuJoCo's compiled
ones (which checks inertia-from-geom and default classes); the connect anchors coincide after
projection and the constraint residuals equal MuJoCo's ``efc_pos``.

q/u mapping (see ``simjax/io/_mjcf.py``): hinge and slide q = qpos, u = qvel; ball q = qpos,
``qvel = R^T u``; free q = [quat, p] against qpos = [p, quat], ``qvel = [u[3:], R^T u[:3]]``.
That ``qvel = T u`` has no ``T-dot`` term in the accelerations (``qacc = T udot``).

Run ``pytest tests/test_io_mjcf.py -s`` to print the largest errors and the load times.
"""

import functools
import re
import time
import warnings
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch

import simjax as sj
from simjax.io._loaded import Coordinate, ModelFileError
from simjax.io._mjcf import load_mjcf

RTOL = 1e-9
N_STATES = 5
HUMANOID = "dm_control/suite/humanoid_CMU.xml"
PENDULA = "mujoco/mjx/test_data/pendula.xml"

#: (model, quantity) -> largest relative error; model -> load time (s); printed at the end
ERRORS: dict[tuple[str, str], float] = {}
TIMES: dict[str, float] = {}

GRIPPER = """<mujoco model="gripper">
  <compiler angle="degree" eulerseq="zyx"/>
  <option gravity="0.5 -1 -9.81"/>
  <default>
    <joint type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" size="0.01" density="800"/>
    <default class="finger">
      <geom density="1200"/>
      <joint range="-90 90"/>
    </default>
  </default>
  <worldbody>
    <body name="palm" pos="0 0 0.5" euler="10 5 -3">
      <joint name="lift" type="slide" axis="0 0 1" ref="0.05" range="-0.2 0.2"/>
      <joint name="roll" axis="1 0 0" pos="0 0.01 0.02" ref="-10"/>
      <geom type="box" size="0.08 0.03 0.02" axisangle="0 0 1 15"/>
      <geom type="ellipsoid" size="0.03 0.02 0.01" pos="0 0 0.03" xyaxes="0 1 0 -1 0 0" mass="0.05"/>
      <site name="palm_site" pos="0 0 0.02"/>
      <frame pos="0.04 0 0" zaxis="0 0.1 1">
        <body name="crank_r" childclass="finger" pos="0 0 -0.02">
          <joint name="crank_r" ref="20"/>
          <geom fromto="0 0 0 0.06 0 -0.06"/>
          <body name="coupler_r" pos="0.06 0 -0.06">
            <joint name="coupler_r"/>
            <geom fromto="0 0 0 0 0 -0.1"/>
            <geom type="sphere" size="0.015" pos="0 0 -0.1" mass="0.02"/>
            <site name="tip_r" pos="0 0 -0.1"/>
          </body>
        </body>
        <body name="rocker_r" childclass="finger" pos="0.03 0 -0.02">
          <joint name="rocker_r"/>
          <geom type="cylinder" fromto="0 0 0 0.06 0 -0.09" size="0.008" shellinertia="true"/>
        </body>
      </frame>
      <body name="crank_l" childclass="finger" pos="-0.04 0 -0.02">
        <joint name="crank_l"/>
        <geom fromto="0 0 0 -0.06 0 -0.06"/>
        <body name="coupler_l" pos="-0.06 0 -0.06">
          <joint name="coupler_l"/>
          <inertial pos="0 0 -0.05" mass="0.04" fullinertia="4e-5 4.2e-5 3e-6 1e-7 -2e-7 3e-7"/>
          <site name="link_l" pos="0 0 -0.03"/>
        </body>
      </body>
      <body name="rocker_l" childclass="finger" pos="-0.07 0 -0.02">
        <joint name="rocker_l"/>
        <inertial pos="-0.03 0 -0.045" quat="0.9 0.1 0.3 0" mass="0.03" diaginertia="2e-5 2.1e-5 1e-6"/>
        <site name="rocker_l_end" pos="-0.03 0 -0.0905"/>
      </body>
    </body>
    <body name="cube" pos="0.3 0 0.2" euler="20 0 10">
      <freejoint/><geom type="box" size=".02 .02 .02"/><site name="cube_site" pos="0.02 0 0" euler="0 0 30"/>
    </body>
    <body name="puck" pos="-0.3 0 0.2"><freejoint/><geom type="cylinder" size=".03 .01"/></body>
    <body name="probe" pos="0 0.3 0.2">
      <freejoint/><geom type="sphere" size=".01"/><site name="probe_site" pos="0 0 0.01"/>
    </body>
  </worldbody>
  <equality>
    <connect name="loop_r" body1="coupler_r" body2="rocker_r" anchor="0 0 -0.03"/>
    <connect name="loop_l" site1="link_l" site2="rocker_l_end"/>
    <joint name="mirror" joint1="crank_l" joint2="crank_r" polycoef="0 -1 0 0 0"/>
    <weld name="lock" body1="palm" body2="coupler_l" active="false"/>
    <weld name="glue" body1="palm" body2="cube" anchor="0.01 0 0"/>
    <weld name="park" body1="puck" relpose="0.25 0 -0.2 1 0 0 0.1"/>
    <weld name="stick" site1="probe_site" site2="cube_site"/>
  </equality>
  <actuator>
    <position joint="crank_r" kp="10"/>
  </actuator>
</mujoco>
"""


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def mujoco():
    """MuJoCo, the oracle (tests that need it skip without it)."""
    return pytest.importorskip("mujoco")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """The gripper, and its tree alone (``<equality>`` removed: the unconstrained dynamics is
    the same, and the jitted comparison compiles without the disabled constraints)."""
    d = tmp_path_factory.mktemp("mjcf")
    (d / "gripper_loops.xml").write_text(GRIPPER)
    (d / "gripper.xml").write_text(re.sub(r"<equality>.*</equality>", "", GRIPPER, flags=re.S))
    return {"gripper_loops": d / "gripper_loops.xml", "gripper": d / "gripper.xml"}


def _path(name: str, written: dict[str, Path]) -> Path:
    """A model file by short name; the PyPI ones are fetched once (the test skips offline)."""
    if name == "humanoid_CMU":
        common = [f"dm_control/suite/common/{f}.xml" for f in ("materials", "skybox", "visual")]
        return fetch("dm_control", "1.0.50", [HUMANOID, *common])[HUMANOID]
    if name == "pendula":
        return fetch("mujoco-mjx", "3.17.0", [PENDULA])[PENDULA]
    return written[name]


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if ERRORS or TIMES:
        print("\nlargest relative errors against MuJoCo (max|simjax - mujoco| / max(1, max|mujoco|)):")
        for (model, what), e in sorted(ERRORS.items()):
            print(f"  {model:14s} {what:22s} {e:.2e}")
        for model, t in TIMES.items():
            print(f"  load_mjcf({model}): {t * 1e3:.0f} ms")
    _case.cache_clear()


def _check(actual, desired, key, rtol=RTOL):
    actual, desired = np.asarray(actual, dtype=float), np.asarray(desired, dtype=float)
    scale = max(1.0, float(np.abs(desired).max(initial=0.0)))
    err = float(np.abs(actual - desired).max(initial=0.0)) / scale
    ERRORS[key] = max(ERRORS.get(key, 0.0), err)
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale, err_msg=str(key))


def _quiet_load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_mjcf(path)


def _rot(q):
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _mj_name(m, kind: str, i: int) -> str:
    """simjax's name of MuJoCo object ``i`` (unnamed ones are ``"<kind>#<id>"``)."""
    return getattr(m, kind)(i).name or f"{kind}#{i}"


def _oracle(mujoco, path):
    """MuJoCo's model of the file with what simjax does not model switched off."""
    m = mujoco.MjModel.from_xml_path(str(path))
    off = mujoco.mjtDisableBit
    m.opt.disableflags |= (
        off.mjDSBL_CONSTRAINT | off.mjDSBL_CONTACT | off.mjDSBL_ACTUATION
    )  # joint springs and dampers stay on: simjax models them (load_mjcf(passive=True))
    # nor the stiffness of ball and free joints (a quaternion spring; listed as ignored)
    ball_or_free = (m.jnt_type == mujoco.mjtJoint.mjJNT_BALL) | (m.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
    m.jnt_stiffness[ball_or_free] = 0.0
    m.tendon_armature[:] = 0.0  # tendon armature: not modelled (listed as ignored)
    m.body_gravcomp[:] = 0.0
    return m, mujoco.MjData(m)


class Case:
    """A loaded model, MuJoCo's model of the same file and the maps between them."""

    def __init__(self, name: str, path: Path, mujoco):
        self.name = name
        t0 = time.perf_counter()
        self.lm = _quiet_load(path)
        TIMES.setdefault(name, time.perf_counter() - t0)
        self.state = self.lm.default_state
        self.m, self.d = _oracle(mujoco, path)
        m, st = self.m, self.state
        # (type, qpos adr, dof adr, simjax q start, simjax u start) per MuJoCo joint
        self.joints = []
        for j in range(m.njnt):
            c = Coordinate("probe", self.lm.joints[_mj_name(m, "joint", j)], 0)
            self.joints.append(
                (int(m.jnt_type[j]), m.jnt_qposadr[j], m.jnt_dofadr[j], c.q_index(st), c.u_index(st))
            )
        self.body_names = [_mj_name(m, "body", i) for i in range(m.nbody)]

    def to_mujoco(self, q):
        """MuJoCo ``(qpos, T)`` with ``qvel = T u`` (and ``qacc = T udot``)."""
        m = self.m
        qp, T = np.zeros(m.nq), np.zeros((m.nv, self.state.u.size))
        for t, qa, da, sq, su in self.joints:
            if t in (2, 3):  # slide, hinge
                qp[qa], T[da, su] = q[sq], 1.0
            elif t == 1:  # ball
                qp[qa : qa + 4] = q[sq : sq + 4]
                T[da : da + 3, su : su + 3] = _rot(q[sq : sq + 4]).T
            else:  # free
                qp[qa : qa + 3], qp[qa + 3 : qa + 7] = q[sq + 4 : sq + 7], q[sq : sq + 4]
                T[da : da + 3, su + 3 : su + 6] = np.eye(3)
                T[da + 3 : da + 6, su : su + 3] = _rot(q[sq : sq + 4]).T
        return qp, T

    def random_state(self, rng):
        """simjax ``(q, u)``: hinge and slide joints inside their ranges (else ±pi rad, ref
        ± 0.3 m), random unit quaternions, free bodies near the origin."""
        q = np.array(self.state.q, dtype=float)
        for c in self.lm.coordinates.values():
            lo, hi = c.range
            if not (np.isfinite(lo) and np.isfinite(hi)):
                w = np.pi if c.motion_type == "rotational" else 0.3
                lo, hi = c.default_value - w, c.default_value + w
            q[c.q_index(self.state)] = rng.uniform(lo, hi)
        for t, _, _, sq, _ in self.joints:
            if t in (0, 1):
                a = rng.normal(size=4)
                q[sq : sq + 4] = a / np.linalg.norm(a)
            if t == 0:
                q[sq + 4 : sq + 7] = rng.normal(size=3)
        return q, rng.normal(0.0, 1.0, self.state.u.size)

    @functools.cached_property
    def compiled(self):
        """``(q, u) -> (M, udot, R_GB, p_GB)`` jitted once for this model (constraints
        disabled: the unconstrained tree), poses of the MuJoCo bodies in MuJoCo's order."""
        system, matter, s0 = self.lm.system, self.lm.matter, self.state
        for con in self.lm.constraints.values():
            s0 = con.disable(s0)
        for act in self.lm.actuators.values():  # actuation is off in the oracle
            s0 = act.disable(s0)
        mobs = [self.lm.bodies[n] for n in self.body_names]

        def f(q, u):
            s = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
            X = [b.get_body_transform(s) for b in mobs]
            return (
                matter.calc_mass_matrix(s),
                s.udot,
                jnp.stack([x.R for x in X]),
                jnp.stack([x.p for x in X]),
            )

        return jax.jit(f)


def _mujoco_at(c: Case, mujoco, q, u):
    """MuJoCo at simjax's ``(q, u)``: ``(M, udot, d)`` in simjax's speeds (``M = T^T M_mj T``,
    ``udot = T^-1 qacc``), after ``mj_forward``."""
    m, d = c.m, c.d
    qp, T = c.to_mujoco(q)
    d.qpos[:], d.qvel[:] = qp, T @ u
    mujoco.mj_forward(m, d)
    M_mj = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, M_mj)
    return T.T @ M_mj @ T, np.linalg.solve(T, d.qacc), d


@functools.cache
def _case(name: str, path: str) -> Case:
    import mujoco

    return Case(name, Path(path), mujoco)


MODELS = ["humanoid_CMU", "pendula", "gripper"]


# ----------------------------------------------------------------------------- against MuJoCo


@pytest.mark.oracle
@pytest.mark.parametrize("name", MODELS)
def test_mass_matrix_forward_dynamics_and_poses_equal_mujoco(name, written, mujoco):
    c = _case(name, str(_path(name, written)))
    m, d = c.m, c.d
    assert c.state.u.size == m.nv and c.state.q.size == m.nq
    rng = np.random.default_rng(11)
    for _ in range(N_STATES):
        q, u = c.random_state(rng)
        M, udot, R, p = (np.asarray(x) for x in c.compiled(jnp.asarray(q), jnp.asarray(u)))
        M_mj, a_mj, d = _mujoco_at(c, mujoco, q, u)
        _check(M, M_mj, (name, "M"))
        _check(udot, a_mj, (name, "udot"))
        _check(p, d.xpos, (name, "xpos"))
        _check(R, d.xmat.reshape(-1, 3, 3), (name, "xmat"))


@pytest.mark.oracle
@pytest.mark.parametrize("name", MODELS)
def test_mass_properties_sites_and_qpos0_equal_mujoco(name, written, mujoco):
    """Masses, centers of mass, inertias (about the com, body frame), the default State
    (qpos0: hinge/slide ``ref``, free bodies where the file puts them) and site stations."""
    c = _case(name, str(_path(name, written)))
    m, lm = c.m, c.lm
    for i in range(1, m.nbody):
        mp = lm.bodies[c.body_names[i]].get_default_mass_properties()
        _check(mp.mass, m.body_mass[i], (name, "body_mass"), rtol=1e-12)
        if mp.mass > 0:
            R = _rot(m.body_iquat[i])
            _check(mp.com, m.body_ipos[i], (name, "body_ipos"), rtol=1e-12)
            _check(
                mp.inertia_about_com(), R @ np.diag(m.body_inertia[i]) @ R.T, (name, "inertia"), rtol=1e-12
            )
    qp0, _ = c.to_mujoco(np.asarray(c.state.q))
    _check(qp0, m.qpos0, (name, "qpos0"), rtol=1e-12)
    assert len(lm.markers) == m.nsite
    for i in range(m.nsite):
        mk = lm.markers[_mj_name(m, "site", i)]
        assert mk.body is lm.bodies[c.body_names[m.site_bodyid[i]]]
        _check(mk.station, m.site_pos[i], (name, "site_pos"), rtol=1e-12)


# ----------------------------------------------------------------------------- structure


@pytest.mark.oracle
def test_humanoid_structure(written, mujoco):
    """Includes, default classes, several hinges in one body, ranges in degrees, the free root."""
    path = _path("humanoid_CMU", written)
    c = _case("humanoid_CMU", str(path))
    lm, m = c.lm, c.m
    hinges = [m.joint(j).name for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    assert list(lm.coordinates) == hinges and len(hinges) == 56
    for j in range(m.njnt):
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE:
            co = lm.coordinates[m.joint(j).name]
            assert co.motion_type == "rotational" and m.jnt_limited[j]
            np.testing.assert_allclose(co.range, m.jnt_range[j], rtol=1e-15)
    assert lm.bodies["root"].mobilizer.kind == "Free" and "root" not in lm.coordinates
    assert lm.bodies["lhipjoint"].mobilizer.kind == "Weld"  # a body without joints
    # lfemur's three hinges: two massless intermediate bodies, the last one carries the body
    assert lm.joints["lfemurrz"].name == "lfemur/lfemurrz" and lm.joints["lfemurrx"] is lm.bodies["lfemur"]
    assert float(lm.joints["lfemurry"].get_default_mass_properties().mass) == 0.0
    assert len(lm.actuators) == 56 and not any("actuator" in k for k in lm.ignored)
    assert "joint armature" not in lm.ignored
    # armature on M's diagonal, dof by dof (a hinge's u is its qvel)
    arm = np.asarray(lm.matter.get_armature(c.state))
    for t, _, da, _, su in c.joints:
        if t == mujoco.mjtJoint.mjJNT_HINGE:
            assert arm[su] == m.dof_armature[da] == 0.01
    assert lm.source == "mjcf" and lm.bodies["world"].is_ground()
    with pytest.warns(UserWarning, match=r"load_mjcf\(humanoid_CMU.xml\).*50 geom that collides") as rec:
        load_mjcf(path)
    assert len(rec) == 1  # one summary line
    t = min(_timed(load_mjcf, path, warn_ignored=False) for _ in range(3))
    TIMES["humanoid_CMU (best of 3)"] = t
    assert t < 1.0, f"loading humanoid_CMU took {t:.2f} s"


def _timed(f, *args, **kw):
    t0 = time.perf_counter()
    f(*args, **kw)
    return time.perf_counter() - t0


@pytest.mark.oracle
def test_pendula_structure(written, mujoco):
    """Ball and free joints (no Coordinate), stacked joints, unnamed elements, mocap bodies,
    and what is left out."""
    c = _case("pendula", str(_path("pendula", written)))
    lm, m = c.lm, c.m
    assert lm.joints["joint1"].mobilizer.kind == "Ball" and "joint1" not in lm.coordinates
    assert lm.joints["freejoint"].mobilizer.kind == "Free" and lm.joints["joint#0"].mobilizer.kind == "Free"
    # body 6: slide then an unnamed ball, a chain Slider -> Ball
    assert lm.joints["joint6"].mobilizer.kind == "Slider" and lm.joints["joint#7"] is lm.bodies["body#6"]
    assert lm.joints["joint#7"].get_parent_mobilized_body() is lm.joints["joint6"]
    assert lm.coordinates["joint2"].motion_type == "translational"
    np.testing.assert_allclose(lm.coordinates["joint3"].range, np.radians([-35, 50]))
    mocap = [i for i in range(m.nbody) if m.body_mocapid[i] >= 0]
    assert len(mocap) == 2 and all(lm.bodies[c.body_names[i]].mobilizer.kind == "Weld" for i in mocap)
    assert lm.ignored["camera"] == 7 and list(lm.tendons) == ["tendon_1", "tendon_2"]
    assert lm.ignored["tendon range (MuJoCo's soft limit row; load_mjcf(..., contact=True))"] == 2
    # 11 actuators: 5 on hinges and slides and 1 on a tendon modelled, the others named and counted
    assert lm.control_names == ["act4", "act5", "act6", "act7", "act8", "actuator#8"]
    assert lm.ignored["actuator on a ball joint"] == 4 and lm.ignored["actuator on a free joint"] == 1
    assert isinstance(lm.actuators["actuator#8"], sj.Force.TendonActuator)
    assert lm.ignored["gravcomp (gravity compensation)"] == 3 and not lm.constraints


# ----------------------------------------------------------------------------- equalities


#: The gripper's equalities in MuJoCo's order, the inactive weld "lock" (id 3) left out.
EQUALITIES = {"loop_r": 0, "loop_l": 1, "mirror": 2, "glue": 4, "park": 5, "stick": 6}


@pytest.mark.oracle
def test_gripper_equalities_hold_after_projection_and_match_mujoco(written, mujoco):
    """connect (bodies + anchor, and sites) -> Ball, joint -> CoordinateCoupler, weld (bodies,
    relpose, sites) -> Weld, inactive -> disabled by default. At a random q the residuals
    equal MuJoCo's ``efc_pos`` (connect and weld: point on body 1 minus point on body 2, in the
    world; joint: the polynomial's residual); after the projection of the default State
    (``model.state``) the anchors coincide and MuJoCo sees no residual either (the weld
    orientation rows included)."""
    c = _case("gripper_loops", str(written["gripper_loops"]))
    lm = c.lm
    m = mujoco.MjModel.from_xml_path(str(written["gripper_loops"]))  # constraints on
    d = mujoco.MjData(m)
    kinds = {n: type(k).__name__ for n, k in lm.constraints.items()}
    assert kinds == {
        "loop_r": "Ball",
        "loop_l": "Ball",
        "mirror": "CoordinateCoupler",
        "lock": "Weld",
        "glue": "Weld",
        "park": "Weld",
        "stick": "Weld",
    }
    assert [n for n, k in lm.constraints.items() if k.is_disabled_by_default()] == ["lock"]
    system = lm.system

    def residuals(s):
        out = {}
        for n in EQUALITIES:
            k = lm.constraints[n]
            if kinds[n] == "CoordinateCoupler":
                out[n] = k.get_position_errors_as_vector(s)
                continue
            b1, b2 = (k.get_mobilized_body_from_constrained_body(i) for i in (0, 1))
            if kinds[n] == "Ball":
                p1, p2 = k.get_point_on_body1(s), k.get_point_on_body2(s)
            else:
                p1, p2 = k.get_frame_on_body1(s).p, k.get_frame_on_body2(s).p
            out[n] = b1.find_station_location_in_ground(s, p1) - b2.find_station_location_in_ground(s, p2)
        return out

    @jax.jit
    def f(q):
        return residuals(system.realize(c.state.with_q(q), sj.Stage.POSITION))

    def mujoco_residuals(q):
        d.qpos[:] = c.to_mujoco(q)[0]
        mujoco.mj_forward(m, d)
        rows = d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        ids, pos = d.efc_id[rows], d.efc_pos[rows]
        assert 3 not in ids  # the weld "lock" is inactive
        return {n: pos[ids == i] for n, i in EQUALITIES.items()}

    rng = np.random.default_rng(5)
    q0 = np.asarray(c.state.q)
    for _ in range(3):
        q = q0 + rng.normal(0.0, 0.05, q0.size)
        for t, _, _, sq, _ in c.joints:
            if t == 0:  # free bodies: a unit quaternion
                q[sq : sq + 4] /= np.linalg.norm(q[sq : sq + 4])
        r, mj = f(jnp.asarray(q)), mujoco_residuals(q)
        for n in EQUALITIES:
            k = 1 if kinds[n] == "CoordinateCoupler" else 3  # weld: MuJoCo's 3 position rows first
            _check(r[n], mj[n][:k], ("gripper", f"{kinds[n]} residual"))
    # Bodies + anchor hold at qpos0 by construction; the site connect is 0.5 mm open and the
    # relpose and site welds are far off: model.state projects q onto them (lazily, on first use).
    r = f(jnp.asarray(q0))
    assert max(float(jnp.abs(r[n]).max()) for n in ("loop_r", "mirror", "glue")) < 1e-12
    assert 4e-4 < float(jnp.abs(r["loop_l"]).max()) < 6e-4 and float(jnp.abs(r["park"]).max()) > 0.01
    q1 = np.asarray(lm.state.q)
    r, mj = f(jnp.asarray(q1)), mujoco_residuals(q1)
    for n in EQUALITIES:
        _check(r[n], np.zeros_like(r[n]), ("gripper", "after projection"))
        _check(mj[n], np.zeros_like(mj[n]), ("gripper", "mujoco after projection"))  # weld rotation too


def test_satisfied_equalities_need_no_assembly(tmp_path):
    """Equalities by bodies (connect with anchor, weld without relpose) and joint couplers
    without offset hold at qpos0 by construction, so the default State is the State."""
    text = GRIPPER.replace(
        'site1="link_l" site2="rocker_l_end"', 'body1="coupler_l" body2="rocker_l" anchor="0 0 -0.03"'
    )
    text = re.sub(r'<weld name="(park|stick)".*?/>', "", text)
    lm = _quiet_load(_write(tmp_path, text, "closed.xml"))
    assert set(lm.constraints) == {"loop_r", "loop_l", "mirror", "lock", "glue"}
    assert lm.state is lm.default_state


# ----------------------------------------------------------------------------- compiler options, inertias

ZOO = """<mujoco model="zoo">
  {compiler}
  <default>
    <geom density="500"/>
    <default class="big"><geom type="box" size="0.1 0.2 0.3" group="3"/></default>
    <default class="cap"><geom type="capsule" size="0.05 0.2"/><site type="box" size=".1 .1 .1"/></default>
  </default>
  <worldbody>
    <geom type="plane" size="1 1 0.1"/>
    <site name="w"/>
    <body name="ball" pos="0.1 0.2 0.3" euler="10 20 30"><freejoint/><geom size="0.1" pos="0.01 0 0"/></body>
    <body name="caps" pos="1 0 0" axisangle="1 1 0 40" childclass="cap">
      <freejoint/><geom/><geom size="0.03" pos="0 0.1 0" euler="90 0 0"/><site name="s_cap" pos="0 0 .1"/>
    </body>
    <body name="cyl" xyaxes="0 1 0 -1 0 0.2"><freejoint/>
      <geom type="cylinder" fromto="0 0 0 0.1 0.2 0.3" size="0.04"/>
      <geom type="cylinder" size="0.05 0.1" shellinertia="true" pos="0 0 0.2"/>
    </body>
    <body name="ell" zaxis="1 1 1"><freejoint/>
      <geom type="ellipsoid" size="0.1 0.2 0.05" quat="1 2 3 4"/>
      <geom type="ellipsoid" fromto="0 0 0 0 0.1 0.3" size="0.05" shellinertia="true"/>
    </body>
    <body name="boxes" quat="0 0 0 1"><freejoint/>
      <geom class="big"/><geom type="box" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.3"/>
      <geom type="box" size=".1 .1 .1" shellinertia="true" pos="0.3 0 0"/>
      <geom type="box" size=".1 .05 .02" shellinertia="true" pos="0 0.3 0" euler="0 0 30"/>
    </body>
    <body name="shells" pos="0 0 1"><freejoint/>
      <geom type="sphere" size="0.1" shellinertia="true"/>
      <geom type="capsule" size="0.05 0.1" shellinertia="true" euler="0 90 0" pos="0 0 .2"/>
    </body>
    <body name="explicit" euler="0 0 45"><freejoint/>
      <inertial pos="0.1 0 0" euler="30 0 0" mass="2" diaginertia="0.1 0.2 0.25"/><geom size="0.1"/>
    </body>
    <body name="full"><freejoint align="true"/>
      <inertial pos="0 0.1 0" mass="1" fullinertia="0.1 0.12 0.15 0.01 -0.02 0.005"/>
    </body>
    <body name="aligned" pos="0 1 0"><freejoint align="true"/>
      <geom type="box" size=".1 .2 .3" euler="10 20 30" pos=".1 0 0"/><site name="s_al" pos="0.2 0 0"/>
    </body>
    <frame pos="0 0 1" euler="0 0 90">
      <body name="framed" pos="1 0 0"><freejoint/><geom size=".1"/><site name="s_fr" pos="0 0.1 0"/></body>
    </frame>
    {extra}
    <body name="hinged" pos="0 0 2">
      <joint name="hz" axis="1 1 0" ref="30" pos="0.1 0 0"/>
      <joint name="hs" type="slide" axis="0 1 1" ref="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/>
    </body>
  </worldbody>
</mujoco>
"""

COMPILERS = {
    "defaults": ("", ""),
    "radian_ZYX": ('<compiler angle="radian" eulerseq="ZYX"/>', ""),
    "geoms_total_mass": ('<compiler eulerseq="zxY" inertiafromgeom="true" settotalmass="7"/>', ""),
    "bounds_groups_alignfree": (
        '<compiler boundmass="0.6" boundinertia="0.002" inertiagrouprange="0 2" alignfree="true"/>',
        "",
    ),
    "balanceinertia": (
        '<compiler balanceinertia="true"/>',
        '<body name="unbalanced"><freejoint/>'
        '<inertial pos="0 0 0" mass="1" diaginertia="0.1 0.2 0.35"/></body>',
    ),
}


@pytest.mark.oracle
@pytest.mark.parametrize("variant", list(COMPILERS))
def test_compiler_options_and_geom_inertias_equal_mujoco(variant, tmp_path, mujoco):
    """Orientation specifiers (euler sequences, axisangle, xyaxes, zaxis, frames), angle units,
    every primitive geom solid and shell, ``fromto``, ``mass``/``density``, default classes
    with partial ``size``, inertiafromgeom, settotalmass, boundmass/boundinertia, group ranges,
    balanceinertia and free-joint alignment: each free body's center of mass and inertia in
    the world at qpos0, its mass and its sites equal MuJoCo's (invariant to how the principal
    axes are ordered, which alignment may choose differently)."""
    compiler, extra = COMPILERS[variant]
    path = tmp_path / "zoo.xml"
    path.write_text(ZOO.format(compiler=compiler, extra=extra))
    lm = _quiet_load(path)
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    st, key = lm.default_state, ("zoo", variant)
    q = np.asarray(st.q)
    for i in range(1, m.nbody):
        name = _mj_name(m, "body", i)
        mob = lm.bodies[name]
        mp = mob.get_default_mass_properties()
        _check(mp.mass, m.body_mass[i], key, rtol=1e-12)
        if mob.mobilizer.kind != "Free":
            R = _rot(m.body_iquat[i])
            _check(mp.com, m.body_ipos[i], key, rtol=1e-12)
            _check(mp.inertia_about_com(), R @ np.diag(m.body_inertia[i]) @ R.T, key, rtol=1e-12)
            continue
        k = Coordinate("probe", mob, 0).q_index(st)
        R, p = _rot(q[k : k + 4]), q[k + 4 : k + 7]
        _check(R @ mp.com + p, d.xipos[i], key, rtol=1e-12)
        Ri = d.ximat[i].reshape(3, 3)
        _check(R @ mp.inertia_about_com() @ R.T, Ri @ np.diag(m.body_inertia[i]) @ Ri.T, key, rtol=1e-12)
        for s in range(m.nsite):
            if m.site_bodyid[s] == i:
                _check(R @ lm.markers[_mj_name(m, "site", s)].station + p, d.site_xpos[s], key, rtol=1e-12)
    for name in ("hz", "hs"):
        j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
        co = lm.coordinates[name]
        assert co.default_value == pytest.approx(m.qpos0[m.jnt_qposadr[j]], rel=1e-14)
        assert float(co.get_value(st)) == pytest.approx(co.default_value, rel=1e-14)
    if variant == "defaults":  # the free bodies' qpos0 match one to one (but "full"'s principal
        # axes, which alignment takes from an eigen-decomposition that may order them differently)
        for j in range(m.njnt):
            if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE and _mj_name(m, "body", m.jnt_bodyid[j]) != "full":
                k = Coordinate("probe", lm.joints[_mj_name(m, "joint", j)], 0).q_index(st)
                a = m.jnt_qposadr[j]
                _check(q[k + 4 : k + 7], m.qpos0[a : a + 3], key, rtol=1e-12)
                quat = q[k : k + 4] * np.sign(q[k : k + 4] @ m.qpos0[a + 3 : a + 7])  # q and -q: one rotation
                _check(quat, m.qpos0[a + 3 : a + 7], key, rtol=1e-12)


# ----------------------------------------------------------------------------- bad files


def _write(tmp_path, text, name="bad.xml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _model(body="", extra=""):
    return (
        "<mujoco>\n<worldbody>\n"
        + body
        + '\n<body name="ok" pos="0 0 1"><joint name="j_ok"/><geom size=".1"/></body>\n</worldbody>\n'
        + extra
        + "\n</mujoco>\n"
    )


BAD = {
    "malformed": ("<mujoco>\n<worldbody>\n<body>\n</worldbody>\n</mujoco>", r"bad\.xml:4:\d+: malformed XML"),
    "top element": ("<robot/>", r"bad\.xml:1: <robot>: .*must be <mujoco>"),
    "joint type": (
        _model('<body name="b"><joint name="j" type="screw"/><geom size=".1"/></body>'),
        r"bad\.xml:3: <joint name=\"j\">: joint 'j': unknown joint type 'screw'; supported types: hinge",
    ),
    "connect body": (
        _model(extra='<equality><connect body1="ok" body2="nope" anchor="0 0 0"/></equality>'),
        r"bad\.xml:6: <connect>: body2='nope' is not a body of this model",
    ),
    "joint equality": (
        _model(extra='<equality>\n<joint joint1="j_ok" joint2="missing"/></equality>'),
        r"bad\.xml:7: <joint>: joint2='missing' is not a joint of this model",
    ),
    "ball in joint equality": (
        _model(
            '<body name="b"><joint name="jb" type="ball"/><geom size=".1"/></body>',
            '<equality><joint joint1="j_ok" joint2="jb"/></equality>',
        ),
        r"bad\.xml:6: <joint>: joint2='jb' is a ball joint; a joint equality needs hinge or slide",
    ),
    "weld site": (
        _model(extra='<equality><weld site1="s" site2="t"/></equality>'),
        r"bad\.xml:6: <weld>: site1='s' is not a site of this model",
    ),
    "include": (
        '<mujoco>\n  <include file="nowhere/defaults.xml"/>\n</mujoco>',
        r"bad\.xml:2: <include>: included file 'nowhere/defaults.xml' not found",
    ),
    "default class": (
        _model('<body name="b"><joint class="arm"/><geom size=".1"/></body>'),
        r"bad\.xml:3: <joint>: unknown default class 'arm'",
    ),
    "undefined mesh": (
        _model('<body name="b"><joint/><geom type="mesh" mesh="m"/></body>'),
        r"bad\.xml:3: <geom>: mesh 'm' is not defined in <asset>",
    ),
    "hfield inertia": (
        _model('<body name="b"><joint/><geom type="hfield"/></body>'),
        r"bad\.xml:3: <geom>: body 'b' takes its mass and inertia from this hfield geom.*<inertial>",
    ),
    "springdamper": (
        _model('<body name="b"><joint springdamper="0.1 -1"/><geom size="1"/></body>'),
        r"bad\.xml:3: <joint>: joint 'joint#0': when defined, springdamper values must be positive",
    ),
    "massless": (
        _model('<body name="b"><joint/><site/></body>'),
        r"bad\.xml:3: <body name=\"b\">: body 'b' moves .* but has no mass",
    ),
    "nested free": (
        _model(
            '<body name="b"><joint/><geom size=".1"/>'
            '<body><freejoint name="f"/><geom size=".1"/></body></body>'
        ),
        r"bad\.xml:3: <freejoint name=\"f\">: joint 'f': a free joint can only be used in a top-level body",
    ),
    "composite": (
        _model('<body name="b"><composite type="grid" count="2 2 1"/></body>'),
        r"bad\.xml:3: <composite>: a <composite> is a macro .*mj_saveLastXML",
    ),
    "repeated name": (
        _model('<body name="ok"><geom size=".1"/></body>'),
        r"bad\.xml:4: <body name=\"ok\">: repeated body name 'ok' \(first at .*bad\.xml:3\)",
    ),
    "bad number": (
        _model('<body name="b" pos="0 zero 1"><joint/><geom size=".1"/></body>'),
        r"bad\.xml:3: <body name=\"b\">: pos='0 zero 1' must be 3 numbers",
    ),
}


@pytest.mark.parametrize("what", list(BAD))
def test_bad_files_name_file_line_and_element(what, tmp_path):
    text, pattern = BAD[what]
    with pytest.raises(ModelFileError, match=pattern):
        load_mjcf(_write(tmp_path, text))


def test_missing_file_and_nested_include(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"MJCF file not found: .*nothing\.xml"):
        load_mjcf(tmp_path / "nothing.xml")
    # an included file that includes a missing one: the error names the inner file and line
    (tmp_path / "parts").mkdir()
    _write(tmp_path, "<mujoco>\n<include file='more.xml'/>\n</mujoco>", "parts/defaults.xml")
    main = _write(tmp_path, "<mujoco><include file='parts/defaults.xml'/></mujoco>", "main.xml")
    with pytest.raises(ModelFileError, match=r"parts/defaults\.xml:2: <include>: included file 'more\.xml'"):
        load_mjcf(main)
    _write(tmp_path, "<mujoco><option gravity='0 0 -1'/></mujoco>", "parts/more.xml")
    lm = load_mjcf(main)
    assert not lm.coordinates and len(lm.bodies) == 1  # just the world


@pytest.mark.oracle
def test_static_mesh_bodies_planes_and_worldbody_sections(tmp_path, mujoco):
    """Bodies welded to the world may hold mesh and plane geoms (their mass does not matter:
    a note says so); several <worldbody> sections keep MuJoCo's body order."""
    text = """<mujoco>
  <asset><mesh name="tet" vertex="0 0 0 1 0 0 0 1 0 0 0 1"/></asset>
  <worldbody>
    <body name="table" pos="0 0 0.5"><geom type="mesh" mesh="tet"/>
      <body name="top"><geom type="plane" size="0 0 1"/></body>
    </body>
  </worldbody>
  <worldbody>
    <body name="arm" pos="0 0 1"><joint name="j"/><geom size=".1"/></body>
  </worldbody>
</mujoco>"""
    path = _write(tmp_path, text, "scene.xml")
    with pytest.warns(
        UserWarning, match=r"1 static bodies take no mass from their mesh/hfield geoms.*'table'"
    ):
        lm = load_mjcf(path)
    m = mujoco.MjModel.from_xml_path(str(path))
    assert list(lm.bodies) == [_mj_name(m, "body", i) for i in range(m.nbody)]
    assert lm.bodies["table"].get_default_mass_properties().mass == 0.0 < m.body_mass[1]
    assert lm.bodies["top"].mobilizer.kind == "Weld" and lm.bodies["arm"].mobilizer.kind == "Pin"
    _check(lm.bodies["arm"].get_default_mass_properties().mass, m.body_mass[3], ("scene", "mass"), rtol=1e-12)


def test_what_simjax_does_not_model_is_said_not_dropped(tmp_path):
    """Issue 17: colliding geoms (MuJoCo's default contype/conaffinity) lost the floor
    without a word, ``<flag equality="disable">`` was ignored (simjax still enforced the
    equality), and soft (solref/solimp) equalities became exact silently. Now each is in
    the load warning and ``summary()``; the disabled equalities are disabled by default,
    and a visual-only geom (contype = conaffinity = 0) stays quiet."""
    import warnings

    text = """<mujoco><option><flag equality="disable"/></option><worldbody>
      <geom name="floor" type="plane" size="5 5 0.1"/>
      <body name="a" pos="0 0 1"><joint name="j" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05"/>
        <geom type="sphere" size="0.02" contype="0" conaffinity="0"/></body>
      <body name="b" pos="0.5 0 1"><joint name="k" type="hinge" axis="0 1 0"/>
        <geom type="ellipsoid" size="0.1 0.1 0.1"/></body>
    </worldbody><equality><joint joint1="j" joint2="k"/></equality></mujoco>"""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m = sj.io.load_mjcf(text)
    msg = " ".join(str(w.message) for w in rec)
    assert "3 geom that collides (its contact is detected, matter.find_contacts, but produces no force" in msg
    assert "1 colliding pair of a kind with no collision kernel yet (capsule-ellipsoid: left out)" in msg
    assert "1 equality solref/solimp (soft in MuJoCo, an exact constraint here)" in msg
    assert '<flag equality="disable">' in msg
    assert "visual shape" not in msg  # quiet, but in the summary
    summary = m.summary()
    assert "1 geom (visual shape)" in summary and "3 geom that collides" in summary
    (con,) = m.constraints.values()
    assert con.is_disabled_by_default()
    # without the flag the equality is on
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m2 = sj.io.load_mjcf(text.replace('<option><flag equality="disable"/></option>', ""))
    assert not next(iter(m2.constraints.values())).is_disabled_by_default()


@pytest.mark.oracle
def test_joint_damping_and_springs_equal_mujoco_passive_forces(written, mujoco):
    """Issue 19's passive joint properties: MJX's pendula (default class damping 0.25 and
    stiffness 0.1 on every joint, 0.5/0.75 on some; ball, hinge, slide and stacked joints)
    loaded with its joint dampers and springs gives MuJoCo's ``qfrc_passive`` (ball-joint
    springs off in the oracle: not modelled, and listed as ignored; its two fixed tendons'
    springs and dampers on, issue 64) to 1e-12;
    ``passive=False`` leaves them out and lists them."""
    import warnings

    c = _case("pendula", str(_path("pendula", written)))
    m, d = c.m, c.d
    system = c.lm.system
    s0 = c.state
    for act in c.lm.actuators.values():  # actuation is off in the oracle (a position servo's bias pulls)
        s0 = act.disable(s0)
    rng = np.random.default_rng(3)
    for _ in range(3):
        q, u = c.random_state(rng)
        qp, T = c.to_mujoco(q)
        d.qpos[:], d.qvel[:] = qp, T @ u
        mujoco.mj_forward(m, d)
        s = system.realize(s0.with_q(jnp.asarray(q)).with_u(jnp.asarray(u)), sj.Stage.DYNAMICS)
        _check(np.asarray(s.dynamics_cache.mobility_forces), T.T @ d.qfrc_passive, ("pendula", "passive"))
    assert "joint damping" not in c.lm.ignored and c.lm.ignored.get("joint stiffness on a ball joint")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = sj.io.load_mjcf(_path("pendula", written), passive=False)
    assert bare.ignored["joint damping"] > 0 and bare.ignored["joint stiffness"] > 0
    sb = bare.system.realize(bare.default_state.with_u(jnp.ones(bare.default_state.nu)), sj.Stage.DYNAMICS)
    assert not np.any(np.asarray(sb.dynamics_cache.mobility_forces))


SPRINGDAMPER = """<mujoco>
  <default><joint springdamper="0.05 0.7" armature="0.02"/></default>
  <worldbody>
    <body name="a" pos="0 0 1"><joint name="h" axis="0 1 0" springref="10"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05"/>
      <body name="b" pos="0 0 -0.5"><joint name="s" type="slide" axis="1 0 0" springdamper="0.2 1.5"/>
        <geom type="box" size="0.1 0.05 0.02"/>
        <body name="c" pos="0 0 -0.2"><joint name="ball" type="ball" stiffness="0"/>
          <geom type="ellipsoid" size="0.1 0.05 0.03"/></body>
      </body>
    </body>
    <body name="d" pos="1 0 1"><freejoint name="f"/><geom type="box" size="0.1 0.2 0.3"/></body>
    <body name="e" pos="2 0 1"><joint name="sx" type="slide" axis="1 0 0"/><geom size="0.1"/></body>
  </worldbody>
</mujoco>"""


@pytest.mark.oracle
def test_springdamper_sets_stiffness_and_damping_as_mujoco(tmp_path, mujoco):
    """``springdamper="timeconst dampratio"`` (dm_control's dog uses it): stiffness and damping
    from each joint's inverse inertia at qpos0, as MuJoCo's compiler sets them (it was
    ignored, with a warning); ``jnt_stiffness``, ``dof_damping`` and ``qfrc_passive``."""
    path = _write(tmp_path, SPRINGDAMPER, "sd.xml")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        lm = load_mjcf(path)
    assert not any("springdamper" in str(w.message) for w in rec)
    assert "joint springdamper" not in lm.ignored and lm.ignored["joint stiffness on a ball joint"] == 1
    m = mujoco.MjModel.from_xml_path(str(path))
    elements = lm.forces._elements
    springs = {e._body.name: e._k for e in elements if isinstance(e, sj.Force.MobilityLinearSpring)}
    dampers = [e._c for e in elements if isinstance(e, sj.Force.MobilityLinearDamper)]
    # e: a "simple" slide-only body (body_simple == 2), whose inverse inertia MuJoCo takes
    # as 1/mass, its armature left out
    assert m.body_simple[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "e")] == 2
    for jname, body in (("h", "a"), ("s", "b"), ("sx", "e")):
        jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, jname)
        _check(springs[body], m.jnt_stiffness[jid], ("springdamper", "stiffness"), rtol=1e-12)
    got = sorted(dampers)
    _check(got, sorted(m.dof_damping[m.dof_damping > 0]), ("springdamper", "damping"), rtol=1e-12)
    # the passive forces themselves, at a random state (armature on: qacc too)
    c = Case("springdamper", path, mujoco)
    q, u = c.random_state(np.random.default_rng(2))
    _, udot, _, _ = (np.asarray(x) for x in c.compiled(jnp.asarray(q), jnp.asarray(u)))
    _check(udot, _mujoco_at(c, mujoco, q, u)[1], ("springdamper", "udot"))


INHERITRANGE = """<mujoco>
  <compiler autolimits="true"/>
  <option gravity="0 0 0"/>
  <default>
    <geom type="capsule" size="0.02"/>
    <default class="servo"><position kp="4" inheritrange="0.5"/></default>
  </default>
  <worldbody>
    <body name="a"><joint name="h" axis="0 1 0" range="-30 90"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <body name="b" pos="0.3 0 0"><joint name="s" type="slide" axis="1 0 0" range="-0.1 0.3"/>
        <geom fromto="0 0 0 0.2 0 0"/>
        <body name="c" pos="0.2 0 0"><joint name="free_h" axis="0 0 1" range="0.2 0.6" limited="false"/>
          <geom fromto="0 0 0 0.1 0 0"/></body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="p_h" joint="h" kp="10" kv="0.3" inheritrange="1"/>
    <position name="p_s" joint="s" kp="50" inheritrange="0.8" gear="2"/>
    <position name="p_filtered" joint="s" kp="5" timeconst="0.1" inheritrange="1.2"/>
    <position name="p_unlimited" joint="free_h" kp="3" inheritrange="1"/>
    <position name="p_class" class="servo" joint="h"/>
    <position name="p_own_range" class="servo" joint="h" ctrlrange="-0.1 0.1"/>
    <intvelocity name="iv" joint="h" kp="7" inheritrange="1.5" ctrlrange="-1 1"/>
    <general name="g" joint="s" gainprm="6" biastype="affine" biasprm="0 -6 -0.1" inheritrange="1"/>
    <general name="g_not_servo" joint="s" gainprm="6" biastype="affine" biasprm="0 -5 0" inheritrange="1"/>
  </actuator>
</mujoco>"""


@pytest.mark.oracle
def test_inheritrange_takes_the_joint_range_as_mujoco(tmp_path, mujoco):
    """Issue 65: ``inheritrange`` was ignored, so a position servo on a hinge of range
    [-30, 90] degrees driven at 4 rad pushed ``kp (4 - q)`` (40 at q = 0) where MuJoCo clamps
    the setpoint to the joint's range (pi/2: 15.7). Now the control (an ``intvelocity``'s
    activation) range is the joint range scaled about its midpoint, as MuJoCo's compiler sets
    it: hinge (degrees converted), slide, an unlimited joint's range, a default class's value
    and a shortcut's own ``ctrlrange`` over it, a position-like ``general``; the actuator
    forces and activation rates equal MuJoCo's at controls past the ranges."""
    path = _write(tmp_path, INHERITRANGE, "inheritrange.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = load_mjcf(path)
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    assert lm.control_names == [m.actuator(i).name for i in range(m.nu)]
    s0 = lm.default_state
    acts = [lm.actuators[n] for n in lm.control_names]
    for i, act in enumerate(acts):
        inf = np.array([-np.inf, np.inf])
        ctrl = m.actuator_ctrlrange[i] if m.actuator_ctrllimited[i] else inf
        actr = m.actuator_actrange[i] if m.actuator_actlimited[i] else inf
        np.testing.assert_allclose(act._get(s0, "control_range"), ctrl, rtol=1e-15, err_msg=act.name)
        np.testing.assert_allclose(act._get(s0, "activation_range"), actr, rtol=1e-15, err_msg=act.name)
    assert m.actuator_ctrllimited[0] and m.actuator_actlimited[6]  # the ranges were inherited
    system = lm.system

    @jax.jit
    def f(q, u, z, c):
        s = system.realize(system.set_controls(s0.with_q(q).with_u(u).with_z(z), c), sj.Stage.ACCELERATION)
        return jnp.stack([a.get_actuation(s) for a in acts]), s.zdot

    rng = np.random.default_rng(65)
    for c in (np.full(m.nu, 4.0), np.full(m.nu, -4.0), rng.uniform(-2, 2, m.nu)):
        q, u = rng.uniform(-0.2, 0.2, m.nq), rng.uniform(-1, 1, m.nv)
        z = np.clip(rng.uniform(-0.5, 0.5, m.na), *m.actuator_actrange[6])
        d.qpos[:], d.qvel[:], d.act[:], d.ctrl[:] = q, u, z, c
        mujoco.mj_forward(m, d)
        force, zdot = f(q, u, z, c)
        _check(force, d.actuator_force, ("inheritrange", "actuator force"), rtol=1e-12)
        _check(zdot, d.act_dot, ("inheritrange", "act_dot"), rtol=1e-12)


def test_inheritrange_errors_and_unmodelled_actuator_attributes_are_named(tmp_path):
    """``inheritrange`` without a joint range, beside the element's own ``ctrlrange``, or on a
    filter is refused as MuJoCo refuses it; actuator attributes simjax does not model
    (``damping``, ``armature``, ``delay``, or one it does not know) leave their actuator out
    with the attribute named in the load warning, instead of being dropped silently."""
    body = '<body name="a"><joint name="h" axis="0 1 0" {}/><geom type="sphere" size="0.1"/></body>'

    def model(act, joint='range="-1 1"'):
        text = f"""<mujoco><compiler autolimits="true" angle="radian"/><worldbody>{body.format(joint)}
          </worldbody><actuator>{act}</actuator></mujoco>"""
        return _write(tmp_path, text)

    with pytest.raises(ModelFileError, match=r"inheritrange takes the range of joint 'h', which has none"):
        load_mjcf(model('<position joint="h" inheritrange="1"/>', joint=""))
    with pytest.raises(ModelFileError, match="ctrlrange and inheritrange cannot both be given"):
        load_mjcf(model('<position joint="h" inheritrange="1" ctrlrange="0 1"/>'))
    with pytest.raises(ModelFileError, match="actrange and inheritrange cannot both be given"):
        load_mjcf(model('<intvelocity joint="h" inheritrange="1" actrange="0 1"/>'))
    with pytest.raises(ModelFileError, match=r"dyntype 'filter'\); give ctrlrange instead"):
        load_mjcf(
            model('<general joint="h" biastype="affine" biasprm="0 -1 0" dyntype="filter" inheritrange="1"/>')
        )
    p = model(
        '<motor name="ok" joint="h" group="2" user="1"/><motor name="d" joint="h" damping="0.5"/>'
        '<motor name="arm" joint="h" armature="0.1"/><motor name="late" joint="h" delay="0.01" nsample="5"/>'
        '<position name="odd" joint="h" frobnicate="1"/>'
    )
    with pytest.warns(UserWarning) as rec:
        lm = load_mjcf(p)
    msg = " ".join(str(w.message) for w in rec)
    assert lm.control_names == ["ok"]
    for part in (
        "d (actuator damping",
        "arm (actuator armature",
        "late (delay",
        "odd (attribute frobnicate not modelled)",
    ):
        assert part in msg, part
