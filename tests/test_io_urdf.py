"""URDF import (``load_urdf``) against Pinocchio's own URDF parser.

Real robots come from ``example-robot-data`` (UR5, Panda with its mimic finger, Talos
reduced on a free-flyer base). The package is a 131 MB wheel, so it is never vendored: the
``robots_dir`` fixture uses an installed copy, else a cache (``$SIMJAX_TEST_DATA`` or
``~/.cache/simjax-test-data``) filled once by ``pip download`` with only the URDFs kept,
and skips when neither works (offline). At random states within the joint limits, the
mass matrix and forward dynamics with gravity equal Pinocchio's (``crba``, ``aba``) to
1e-9 relative, joints matched by name. Small hand-written files check the inertial frame,
axis signs and every error message.

Run ``pytest tests/test_io_urdf.py -s`` to print the largest errors and the load times.
"""

import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj
from simjax.io._loaded import ModelFileError
from simjax.io._urdf import load_urdf

RTOL = 1e-9
N_STATES = 5
ERD_VERSION = "6.0.0"
#: where the robots live inside the example-robot-data wheel (cmeel layout)
ERD_PREFIX = "cmeel.prefix/share/example-robot-data/robots"
ROBOTS = {
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False),
    "panda": ("panda_description/urdf/panda.urdf", False),
    "talos": ("talos_data/robots/talos_reduced.urdf", True),  # floating base
    # 1 ug antenna links whose inertias are not PSD by 3.5e-8 kg m^2 (refused before)
    "tiago": ("tiago_description/robots/tiago.urdf", False),
    "bolt": ("bolt_description/robots/bolt.urdf", True),
    "solo12": ("solo_description/robots/solo12.urdf", True),
}

#: (robot, quantity) -> largest relative error; robot -> load time (s); printed at the end
ERRORS: dict[tuple[str, str], float] = {}
TIMES: dict[str, float] = {}


# ----------------------------------------------------------------------------- test data


def _has_all(root: Path) -> bool:
    return all((root / rel).is_file() for rel, _ in ROBOTS.values())


def _installed_robots() -> Path | None:
    """The robots directory of an installed example-robot-data, if any."""
    from importlib import metadata

    try:
        dist = metadata.distribution("example-robot-data")
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        root = Path(str(dist.locate_file(ERD_PREFIX)))
        if _has_all(root):
            return root
    try:  # older releases ship a Python module that knows its model directory
        import example_robot_data as erd  # type: ignore[import-not-found]
    except ImportError:
        return None
    for mod in (erd, getattr(erd, "robots_loader", None)):
        d = getattr(mod, "EXAMPLE_ROBOT_DATA_MODEL_DIR", None)
        if d and _has_all(Path(d)):
            return Path(d)
    return None


def _cached_robots() -> Path:
    """URDFs unzipped from a pinned example-robot-data wheel into the test-data cache: a
    wheel already in the cache directory, else one downloaded once into a temporary
    directory (deleted after the few files are taken out)."""
    cache = Path(os.environ.get("SIMJAX_TEST_DATA") or Path.home() / ".cache" / "simjax-test-data")
    root = cache / f"example-robot-data-{ERD_VERSION}" / "robots"
    if _has_all(root):
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        wheels = glob.glob(str(cache / f"example_robot_data-{ERD_VERSION}-*.whl"))
        if not wheels:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
            cmd += [f"example-robot-data=={ERD_VERSION}", "-d", tmp]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as e:
                pytest.skip(f"example-robot-data not available offline: pip download failed ({e})")
            wheels = glob.glob(os.path.join(tmp, "example_robot_data-*.whl"))
            if r.returncode != 0 or not wheels:
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no wheel"]
                pytest.skip(f"example-robot-data not available offline: pip download failed ({tail[0]})")
        staged = Path(tmp) / "robots"
        with zipfile.ZipFile(wheels[0]) as z:
            for rel, _ in ROBOTS.values():
                dst = staged / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                with z.open(f"{ERD_PREFIX}/{rel}") as src, open(dst, "wb") as out:
                    shutil.copyfileobj(src, out)
        root.parent.mkdir(parents=True, exist_ok=True)
        if not _has_all(root):  # another process may have finished first
            shutil.rmtree(root, ignore_errors=True)
            os.replace(staged, root)
    return root


@pytest.fixture(scope="session")
def robots_dir() -> Path:
    """Directory holding the example-robot-data URDFs used here."""
    return _installed_robots() or _cached_robots()


@pytest.fixture(scope="session")
def pin():
    """Pinocchio, the oracle (tests that need it skip without it)."""
    return pytest.importorskip("pinocchio")


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if ERRORS or TIMES:
        print("\nlargest relative errors against Pinocchio (max|simjax - pin| / max(1, max|pin|)):")
        for (robot, what), e in sorted(ERRORS.items()):
            print(f"  {robot:14s} {what:22s} {e:.2e}")
        for robot, t in TIMES.items():
            print(f"  load_urdf({robot}): {t * 1e3:.0f} ms")
    _case.cache_clear()


def _check(actual, desired, key):
    actual, desired = np.asarray(actual), np.asarray(desired)
    scale = max(1.0, float(np.abs(desired).max()))
    err = float(np.abs(actual - desired).max()) / scale
    ERRORS[key] = max(ERRORS.get(key, 0.0), err)
    np.testing.assert_allclose(actual, desired, rtol=RTOL, atol=RTOL * scale, err_msg=str(key))


# ----------------------------------------------------------------------------- simjax <-> Pinocchio


def _quiet_load(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_urdf(path, **kw)


def _quat_from_rot(R):
    """``[w, x, y, z]`` of a rotation matrix (w >= 0)."""
    w = 0.5 * np.sqrt(max(1.0 + np.trace(R), 1e-300))
    if w > 0.1:
        q = np.array(
            [w, (R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w), (R[1, 0] - R[0, 1]) / (4 * w)]
        )
    else:  # near half a turn: go through the largest diagonal entry
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        q = np.empty(4)
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i], q[1 + j], q[1 + k] = 0.25 * s, (R[j, i] + R[i, j]) / s, (R[k, i] + R[i, k]) / s
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


class Robot:
    """A loaded robot, the Pinocchio model of the same file and the maps between them."""

    def __init__(self, name: str, path: Path, floating: bool, mimic: bool = False):
        import pinocchio as pin

        self.name, self.floating = name, floating
        t0 = time.perf_counter()
        self.lm = _quiet_load(path, floating_base=floating)
        TIMES.setdefault(name, time.perf_counter() - t0)
        self.state = self.lm.state
        self.nq, self.nu = self.state.q.size, self.state.u.size
        args = (str(path), pin.JointModelFreeFlyer()) if floating else (str(path),)
        self.pin = pin.buildModelFromUrdf(*args, mimic=mimic)
        self.data = self.pin.createData()
        # (pin q address, pin v address, pin nq, simjax q index, simjax u index) per named joint
        self.joints = []
        for jid in range(1, self.pin.njoints):
            jn = self.pin.names[jid]
            if jn not in self.lm.coordinates:
                assert floating and jid == 1, jn  # only the free flyer has no URDF name
                continue
            c = self.lm.coordinates[jn]
            self.joints.append(
                (
                    self.pin.idx_qs[jid],
                    self.pin.idx_vs[jid],
                    self.pin.nqs[jid],
                    c.q_index(self.state),
                    c.u_index(self.state),
                )
            )

    def random_state(self, rng):
        """simjax ``(q, u)`` with every coordinate inside its limits (or in (-pi, pi))."""
        q = np.array(self.state.q, dtype=float)
        for c in self.lm.coordinates.values():
            lo, hi = c.range
            lo, hi = (lo, hi) if np.isfinite(lo) and np.isfinite(hi) else (-np.pi, np.pi)
            q[c.q_index(self.state)] = rng.uniform(lo, hi)
        if self.floating:
            a = rng.uniform(-np.pi, np.pi, 4)
            q[:4] = a / np.linalg.norm(a)
            q[4:7] = rng.uniform(-1, 1, 3)
        return q, rng.normal(0, 1.0, self.nu)

    def to_pin(self, q, u):
        """Pinocchio ``(q, v, T, c)`` with ``v = T u`` and ``a_pin = T udot + c``."""
        qp = np.zeros(self.pin.nq)
        T = np.zeros((self.pin.nv, self.nu))
        c = np.zeros(self.pin.nv)
        for iq, iv, nq, sq, su in self.joints:
            if iq < 0 or iv < 0:
                continue
            if nq == 2:  # continuous joint: (cos, sin)
                qp[iq : iq + 2] = np.cos(q[sq]), np.sin(q[sq])
            elif nq == 1:
                qp[iq] = q[sq]
            T[iv, su] = 1.0
        if self.floating:  # simjax Free q = [w x y z | p], u = [w_G | v_G]; FreeFlyer in the body frame
            R = _rot_from_quat(q[:4])
            qp[:7] = np.r_[q[4:7], q[1:4], q[0]]
            T[0:3, 3:6] = R.T
            T[3:6, 0:3] = R.T
            c[0:3] = -R.T @ np.cross(u[0:3], u[3:6])
        return qp, T @ u, T, c

    def pin_mass_matrix(self, qp):
        import pinocchio as pin

        M = np.array(pin.crba(self.pin, self.data, qp))
        return np.triu(M) + np.triu(M, 1).T

    @functools.cached_property
    def compiled(self):
        """``(q, u) -> (M, udot)`` jitted once for this robot (its default State)."""
        system, matter, s0 = self.lm.system, self.lm.matter, self.state
        for con in self.lm.constraints.values():  # the unconstrained tree
            s0 = con.disable(s0)

        def f(q, u):
            s = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
            return matter.calc_mass_matrix(s), s.udot

        return jax.jit(f)


def _rot_from_quat(q):
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


@functools.cache
def _case(name: str, robots: str) -> Robot:
    rel, floating = ROBOTS[name]
    return Robot(name, Path(robots) / rel, floating)


# ----------------------------------------------------------------------------- real robots


@pytest.mark.parametrize("name", list(ROBOTS))
def test_mass_matrix_and_forward_dynamics_equal_pinocchio(name, robots_dir, pin):
    r = _case(name, str(robots_dir))
    assert r.pin.nv == r.nu, (r.pin.nv, r.nu)
    rng = np.random.default_rng(7)
    for _ in range(N_STATES):
        q, u = r.random_state(rng)
        M, udot = r.compiled(jnp.asarray(q), jnp.asarray(u))
        qp, vp, T, c = r.to_pin(q, u)
        _check(M, T.T @ r.pin_mass_matrix(qp) @ T, (name, "M"))
        # URDF <dynamics damping> (TALOS, TIAGo): -damping * v, Pinocchio's model.damping
        a = np.array(pin.aba(r.pin, r.data, qp, vp, -np.asarray(r.pin.damping) * vp))
        _check(udot, np.linalg.solve(T, a - c), (name, "udot"))


def test_robot_structure(robots_dir):
    """Names, counts, limits, the free-flyer root and the ignored-parts summary."""
    ur5 = _quiet_load(robots_dir / ROBOTS["ur5"][0])
    assert list(ur5.coordinates) == [
        "shoulder_pan_joint",
        "shoulder_lift_joint",
        "elbow_joint",
        "wrist_1_joint",
        "wrist_2_joint",
        "wrist_3_joint",
    ]
    assert ur5.state.q.shape == (6,) and ur5.source == "urdf"
    assert ur5.bodies["base_link"].mobilizer.kind == "Weld"
    assert ur5.ignored["transmission"] == 6 and ur5.ignored["gazebo"] == 8
    with pytest.warns(UserWarning, match=r"ur5_robot.urdf.*transmission") as rec:
        load_urdf(robots_dir / ROBOTS["ur5"][0])
    assert len(rec) == 1  # one summary line

    panda = _quiet_load(robots_dir / ROBOTS["panda"][0])
    c4 = panda.coordinates["panda_joint4"]
    assert c4.range == (-3.0718, -0.0698) and c4.motion_type == "rotational" and c4.clamped
    assert c4.limit is not None and c4.limit.get_default_range() == c4.range
    assert panda.coordinates["panda_finger_joint1"].motion_type == "translational"
    assert list(panda.constraints) == ["panda_finger_joint2"]

    talos = _quiet_load(robots_dir / ROBOTS["talos"][0], floating_base=True)
    assert talos.bodies["base_link"].mobilizer.kind == "Free"
    assert talos.state.q.shape == (7 + 32,) and talos.state.u.shape == (6 + 32,)
    np.testing.assert_array_equal(talos.state.q[:7], [1, 0, 0, 0, 0, 0, 0])
    assert talos.ignored["mimic on a fixed joint"] == 12  # the reduced model's locked grippers
    assert len(talos.bodies) == 60 and len(talos.joints) == 59


def test_mimic_false_loads_independent_joints_like_pinocchio(robots_dir, pin):
    """``load_urdf(..., mimic=False)``: the mimic finger is an independent joint with no
    coupler in the System (Pinocchio's ``mimic=False``), counted in ``ignored`` without a
    warning; its forward dynamics equals Pinocchio's and the coupled model's with the
    coupler disabled, with the same coordinates."""
    r = _case("panda", str(robots_dir))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm = load_urdf(robots_dir / ROBOTS["panda"][0], mimic=False)
    assert not any("mimic" in str(w.message) for w in caught)
    assert lm.constraints == {} and lm.ignored["<mimic> (mimic=False: loaded independent)"] == 1
    assert list(lm.coordinates) == list(r.lm.coordinates)
    system = lm.system

    @jax.jit
    def udot(q, u):
        return system.realize(lm.state.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot

    rng = np.random.default_rng(11)
    for _ in range(3):
        q, u = r.random_state(rng)
        qp, vp, T, c = r.to_pin(q, u)
        a = np.array(pin.aba(r.pin, r.data, qp, vp, -np.asarray(r.pin.damping) * vp))
        _check(udot(jnp.asarray(q), jnp.asarray(u)), np.linalg.solve(T, a - c), ("panda", "mimic=False udot"))
        np.testing.assert_allclose(
            np.asarray(udot(jnp.asarray(q), jnp.asarray(u))),
            np.asarray(r.compiled(jnp.asarray(q), jnp.asarray(u))[1]),
            rtol=1e-12,
            atol=1e-12,
        )


def test_panda_mimic_finger(robots_dir, pin):
    """The finger coupler holds after projection, and constrained forward dynamics equals
    Pinocchio's reduced model (mimic=True: the second finger is not a coordinate)."""
    r = _case("panda", str(robots_dir))
    lm, system, matter = r.lm, r.lm.system, r.lm.matter
    f1, f2 = lm.coordinates["panda_finger_joint1"], lm.coordinates["panda_finger_joint2"]
    coupler = lm.constraints["panda_finger_joint2"]
    assert f2.get_value(lm.state) == f1.get_value(lm.state) == 0.0

    pm = pin.buildModelFromUrdf(str(robots_dir / ROBOTS["panda"][0]), mimic=True)
    pd = pm.createData()
    pf = pin.buildModelFromUrdf(str(robots_dir / ROBOTS["panda"][0]))  # no mimic: every joint's damping
    assert pm.nv == r.nu - 1 and pf.nv == r.nu and float(pf.damping[-1]) == 0.3

    def f(q, u):
        s = system.project(r.state.with_q(q).with_u(u), tol=1e-10)
        s = system.realize(s, sj.Stage.ACCELERATION)
        G, b = matter.calc_g_and_b(s)
        return s.q, s.u, s.udot, G, b

    f = jax.jit(f)
    rng = np.random.default_rng(3)
    i1, i2 = f1.q_index(r.state), f2.q_index(r.state)
    indep = [i for i in range(r.nu) if i != f2.u_index(r.state)]
    for _ in range(N_STATES):
        q, u = r.random_state(rng)
        q, u, udot, G, b = (np.asarray(x) for x in f(jnp.asarray(q), jnp.asarray(u)))
        assert abs(q[i2] - q[i1]) < 1e-12 and abs(u[i2] - u[i1]) < 1e-12  # projected onto the coupler
        assert G.shape == (1, r.nu)
        _check(G @ udot, b, ("panda", "G udot - b"))
        _check(udot[i2], udot[i1], ("panda", "finger udot coupled"))
        # Pinocchio's reduced model: a = M^-1 (tau - nle(q, v)), with gravity; tau is the URDF
        # <dynamics damping> of every joint (the full model's), mapped through the mimic
        # transmission (finger2's damper acts on finger1's speed too: u2 = 1 * u1)
        qp = np.zeros(pm.nq)
        for jid in range(1, pm.njoints):
            if pm.nqs[jid] == 1:
                qp[pm.idx_qs[jid]] = q[lm.coordinates[pm.names[jid]].q_index(r.state)]
        vp = u[indep]
        fid, rid = pf.getJointId, pm.getJointId
        vfull = np.zeros(pf.nv)
        for jid in range(1, pm.njoints):
            if pm.nvs[jid] == 1:
                vfull[pf.idx_vs[fid(pm.names[jid])]] = vp[pm.idx_vs[jid]]
        n1, n2 = "panda_finger_joint1", "panda_finger_joint2"
        vfull[pf.idx_vs[fid(n2)]] = vp[pm.idx_vs[rid(n1)]]
        tau_full = -np.asarray(pf.damping) * vfull
        tau = np.zeros(pm.nv)
        for jid in range(1, pm.njoints):
            if pm.nvs[jid] == 1:
                tau[pm.idx_vs[jid]] = tau_full[pf.idx_vs[fid(pm.names[jid])]]
        tau[pm.idx_vs[rid(n1)]] += tau_full[pf.idx_vs[fid(n2)]]
        Mp = np.array(pin.crba(pm, pd, qp))
        Mp = np.triu(Mp) + np.triu(Mp, 1).T
        a = np.linalg.solve(Mp, tau - np.array(pin.nonLinearEffects(pm, pd, qp, vp)))
        _check(udot[indep], a, ("panda", "udot with mimic"))
    assert not bool(coupler.is_disabled(lm.state))


def test_talos_load_time(robots_dir):
    """Loading the largest robot (60 links) is quick; the time is printed, not asserted."""
    path = robots_dir / ROBOTS["talos"][0]
    t0 = time.perf_counter()
    lm = _quiet_load(path, floating_base=True)
    TIMES["talos (2nd load)"] = time.perf_counter() - t0
    assert len(lm.bodies) == 60


# ----------------------------------------------------------------------------- hand-written files

LINK = (
    '<link name="{}"><inertial><mass value="1"/>'
    '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>'
)


def _robot(*joints: str, links=("a", "b", "c")) -> str:
    return "\n".join(['<robot name="r">', *(LINK.format(n) for n in links), *joints, "</robot>"])


def _joint(name, kind, parent, child, extra=""):
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>{extra}</joint>'
    )


SMALL = """<?xml version="1.0"?>
<robot name="small">
  <link name="base">
    <inertial>
      <origin xyz="0.01 -0.02 0.03" rpy="0.3 -0.2 0.5"/>
      <mass value="2.0"/>
      <inertia ixx="0.04" ixy="0.002" ixz="-0.001" iyy="0.05" iyz="0.003" izz="0.06"/>
    </inertial>
  </link>
  <link name="upper">
    <inertial>
      <origin xyz="0.1 0.02 -0.15" rpy="1.1 0.4 -0.7"/>
      <mass value="1.5"/>
      <inertia ixx="0.02" ixy="0.001" ixz="0.0" iyy="0.03" iyz="-0.002" izz="0.025"/>
    </inertial>
    <visual><geometry><mesh filename="package://nowhere/upper.stl"/></geometry></visual>
  </link>
  <link name="slide">
    <inertial>
      <origin xyz="0 0.05 0" rpy="0 0 0.3"/>
      <mass value="0.7"/>
      <inertia ixx="0.003" ixy="0" ixz="0" iyy="0.004" iyz="0" izz="0.005"/>
    </inertial>
  </link>
  <link name="wheel">
    <inertial>
      <origin xyz="0.0 0.0 0.02" rpy="0 1.0 0"/>
      <mass value="0.4"/>
      <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.001" iyz="0" izz="0.0015"/>
    </inertial>
  </link>
  <link name="hand">
    <inertial>
      <origin xyz="0.01 0.0 0.03" rpy="0.2 0 0"/>
      <mass value="0.3"/>
      <inertia ixx="0.0005" ixy="0" ixz="0" iyy="0.0006" iyz="0" izz="0.0004"/>
    </inertial>
  </link>
  <link name="tool"/>
  <link name="tip">
    <inertial>
      <mass value="0.2"/><inertia ixx="1e-4" ixy="0" ixz="0" iyy="1e-4" iyz="0" izz="1e-4"/>
    </inertial>
  </link>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="upper"/>
    <origin xyz="0.1 0.2 0.3" rpy="0.2 -0.4 0.9"/>
    <axis xyz="0 -1 0"/>
    <limit lower="-1" upper="1.5" effort="10" velocity="1"/>
  </joint>
  <joint name="slider" type="prismatic">
    <parent link="upper"/><child link="slide"/>
    <origin xyz="0 0 -0.3" rpy="0 0.3 0"/>
    <axis xyz="1 2 -2"/>
    <limit lower="-0.1" upper="0.2" effort="10" velocity="1"/>
  </joint>
  <joint name="spin" type="continuous">
    <parent link="slide"/><child link="wheel"/>
    <origin xyz="0.05 0 0" rpy="-0.5 0 0"/>
  </joint>
  <joint name="wrist" type="revolute">
    <parent link="wheel"/><child link="hand"/>
    <origin xyz="0 0 0.04" rpy="0 0 0.3"/>
    <axis xyz="0 0 -1"/>
    <limit lower="-2" upper="2" effort="1" velocity="1"/>
  </joint>
  <joint name="tool_joint" type="fixed">
    <parent link="hand"/><child link="tool"/>
    <origin xyz="0 0.1 0" rpy="0 0 1.57"/>
  </joint>
  <joint name="tip_joint" type="fixed">
    <parent link="tool"/><child link="tip"/>
    <origin xyz="0.03 0 0"/>
  </joint>
</robot>
"""


def _rpy(r, p, y):
    cr, sr, cp, sp_, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp_], [0, 1, 0], [-sp_, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def _axis_angle(k, a):
    k = np.asarray(k, float) / np.linalg.norm(k)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * K @ K


def _write(tmp_path, text, name="robot.urdf"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_inertial_frame_and_axes_by_hand(tmp_path):
    """Inertial origin rotation, negative and oblique axes, against a hand computation."""
    lm = load_urdf(_write(tmp_path, SMALL))
    assert lm.ignored == {"visual": 1}
    assert list(lm.coordinates) == ["shoulder", "slider", "spin", "wrist"]
    assert lm.coordinates["spin"].range == (-np.inf, np.inf)
    assert lm.coordinates["slider"].range == (-0.1, 0.2)
    st = lm.state

    # mass properties of "upper": com at xyz, inertia R I R^T shifted to the link origin
    up = lm.bodies["upper"]
    R = _rpy(1.1, 0.4, -0.7)
    c = np.array([0.1, 0.02, -0.15])
    Ic = np.array([[0.02, 0.001, 0.0], [0.001, 0.03, -0.002], [0.0, -0.002, 0.025]])
    I_o = R @ Ic @ R.T + 1.5 * (c @ c * np.eye(3) - np.outer(c, c))
    np.testing.assert_allclose(up.get_mass(st), 1.5)
    np.testing.assert_allclose(up.get_mass_center(st), c, atol=1e-15)
    np.testing.assert_allclose(up.get_inertia_about_body_origin(st), I_o, atol=1e-15)
    assert lm.bodies["tool"].get_mass(st) == 0.0  # no <inertial>: massless (a welded leaf)

    # poses: X_GB = X_origin Rot(axis, q) along the chain; q has the URDF's sign
    q_sh, q_sl, q_sp, q_wr = 0.7, 0.15, -1.2, 0.8
    st = lm.set_coordinate_values(st, {"shoulder": q_sh, "slider": q_sl, "spin": q_sp, "wrist": q_wr})
    st = lm.system.realize(st, sj.Stage.POSITION)
    R1 = _rpy(0.2, -0.4, 0.9) @ _axis_angle([0, -1, 0], q_sh)
    p1 = np.array([0.1, 0.2, 0.3])
    R2 = R1 @ _rpy(0, 0.3, 0)
    p2 = p1 + R1 @ ([0, 0, -0.3] + _rpy(0, 0.3, 0) @ (q_sl * np.array([1, 2, -2]) / 3.0))
    R3 = R2 @ _rpy(-0.5, 0, 0) @ _axis_angle([1, 0, 0], q_sp)
    p3 = p2 + R2 @ np.array([0.05, 0, 0])
    R4 = R3 @ _rpy(0, 0, 0.3) @ _axis_angle([0, 0, -1], q_wr)  # axis opposite to the Pin's z
    p4 = p3 + R3 @ np.array([0, 0, 0.04])
    R5, p5 = R4 @ _rpy(0, 0, 1.57), p4 + R4 @ np.array([0, 0.1, 0])
    for link, (Re, pe) in {
        "upper": (R1, p1),
        "slide": (R2, p2),
        "wheel": (R3, p3),
        "hand": (R4, p4),
        "tip": (R5, p5 + R5 @ [0.03, 0, 0]),
    }.items():
        X = lm.bodies[link].get_body_transform(st)
        np.testing.assert_allclose(X.R, Re, atol=1e-14, err_msg=link)
        np.testing.assert_allclose(X.p, pe, atol=1e-14, err_msg=link)


def test_small_robot_equals_pinocchio(tmp_path, pin):
    """The hand-written file on a free-flyer base against Pinocchio's parser (the fixed
    base is covered by UR5 and Panda)."""
    path = _write(tmp_path, SMALL)
    rng = np.random.default_rng(11)
    r = Robot("small floating", path, True)
    for _ in range(3):
        q, u = r.random_state(rng)
        M, udot = r.compiled(jnp.asarray(q), jnp.asarray(u))
        qp, vp, T, c = r.to_pin(q, u)
        _check(M, T.T @ r.pin_mass_matrix(qp) @ T, (r.name, "M"))
        # URDF <dynamics damping> (TALOS, TIAGo): -damping * v, Pinocchio's model.damping
        a = np.array(pin.aba(r.pin, r.data, qp, vp, -np.asarray(r.pin.damping) * vp))
        _check(udot, np.linalg.solve(T, a - c), (r.name, "udot"))


def test_planar_and_floating_joints(tmp_path):
    text = _robot(
        _joint("plane", "planar", "a", "b", '<axis xyz="1 0 0"/>'),
        _joint("float", "floating", "b", "c", '<origin xyz="0 0 1"/>'),
    )
    lm = load_urdf(_write(tmp_path, text))
    assert list(lm.coordinates) == ["plane_rz", "plane_x", "plane_y"]
    assert lm.joints["plane"].mobilizer.kind == "Planar" and lm.joints["float"].mobilizer.kind == "Free"
    st = lm.set_coordinate_values(lm.state, {"plane_rz": 0.4, "plane_x": 0.3, "plane_y": -0.2})
    st = lm.system.realize(st, sj.Stage.POSITION)
    X = lm.bodies["b"].get_body_transform(st)
    assert abs(float(X.p[0])) < 1e-15 and abs(float(np.hypot(X.p[1], X.p[2])) - np.hypot(0.3, 0.2)) < 1e-15
    np.testing.assert_allclose(X.R, _axis_angle([1, 0, 0], 0.4), atol=1e-15)  # turns about the normal


# ----------------------------------------------------------------------------- errors


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.urdf"):
        load_urdf(tmp_path / "nope.urdf")


def test_malformed_xml(tmp_path):
    p = _write(tmp_path, '<robot name="r">\n  <link name="a">\n</robot>\n', "broken.urdf")
    with pytest.raises(ModelFileError, match=r"broken\.urdf:3:\d+: malformed XML \(mismatched tag\)"):
        load_urdf(p)


def test_unknown_joint_type(tmp_path):
    text = _robot(_joint("j1", "revolute", "a", "b"), _joint("neck", "spherical", "b", "c"))
    p = _write(tmp_path, text, "bad_type.urdf")
    with pytest.raises(ModelFileError) as e:
        load_urdf(p)
    msg = str(e.value)
    line = text.splitlines().index(next(s for s in text.splitlines() if 'name="neck"' in s)) + 1
    for part in (f"bad_type.urdf:{line}:", '<joint name="neck">', "'spherical'", "revolute", "prismatic"):
        assert part in msg, (part, msg)


def test_mimic_naming_a_missing_joint(tmp_path):
    text = _robot(
        _joint("j1", "revolute", "a", "b", '<axis xyz="0 0 1"/>'),
        _joint("j2", "revolute", "b", "c", '\n<mimic joint="j_missing" multiplier="2"/>'),
    )
    p = _write(tmp_path, text, "bad_mimic.urdf")
    # Pinocchio warns and loads j2 as an independent joint; so does simjax (issue 17: the
    # whole load was refused before)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m = load_urdf(p)
    msgs = [str(w.message) for w in rec]
    msg = next(x for x in msgs if "mimics joint 'j_missing'" in x)
    assert any("ignored" in x and "<mimic> naming a missing joint" in x for x in msgs)  # the summary
    line = text.splitlines().index('<mimic joint="j_missing" multiplier="2"/></joint>') + 1
    for part in (f"bad_mimic.urdf:{line}:", "<mimic>", "'j2'", "independent"):
        assert part in msg, (part, msg)
    assert m.state.nq == 2 and not m.constraints


@pytest.mark.parametrize(
    "joints, links, match",
    [
        (
            (_joint("j1", "revolute", "a", "zz"),),
            ("a", "b"),
            r"robot.urdf:\d+: <joint name=\"j1\">.*'zz' is not a <link>",
        ),
        (
            (_joint("j1", "fixed", "a", "c"), _joint("j2", "fixed", "b", "c")),
            ("a", "b", "c"),
            r"two parent joints, 'j1'.*'j2'",
        ),
        (
            (_joint("j1", "fixed", "b", "c"), _joint("j2", "fixed", "c", "b")),
            ("a", "b", "c"),
            r"joints \['j1', 'j2'\] form a cycle",
        ),
        (
            (_joint("j1", "fixed", "a", "b", '<origin xyz="1 2"/>'),),
            ("a", "b"),
            r"<origin>: xyz='1 2' must be 3 finite numbers",
        ),
        (
            (_joint("j1", "revolute", "a", "b", '<axis xyz="0 0 0"/>'),),
            ("a", "b"),
            r"robot.urdf:\d+: <axis>: joint 'j1': <axis xyz> must not be zero",
        ),
        (
            (_joint("j1", "revolute", "a", "b"), _joint("j1", "fixed", "a", "c")),
            ("a", "b", "c"),
            r"robot.urdf:6: <joint name=\"j1\">: duplicate joint name 'j1' \(first on line 5\)",
        ),
        (("<xacro:include filename='x.xacro'/>",), ("a",), r"xacro template"),
    ],
    ids=["unknown-link", "two-parents", "cycle", "bad-numbers", "zero-axis", "duplicate", "xacro"],
)
def test_structural_errors(tmp_path, joints, links, match):
    p = _write(tmp_path, _robot(*joints, links=links))
    with pytest.raises(ModelFileError, match=match):
        load_urdf(p)


def test_massless_moving_link_and_bad_inertia(tmp_path):
    text = _robot(_joint("j1", "revolute", "a", "m"), links=("a",)).replace(
        "</robot>", '<link name="m"/></robot>'
    )
    with pytest.raises(ModelFileError, match=r"revolute joint 'j1' moves only massless links"):
        load_urdf(_write(tmp_path, text))
    bad = LINK.format("b").replace('ixx="1"', 'ixx="-1"')  # not positive semi-definite
    text = _robot(_joint("j1", "revolute", "a", "b"), links=("a",)).replace("</robot>", bad + "</robot>")
    with pytest.raises(ModelFileError, match=r"robot.urdf:\d+: <inertia>: link 'b': invalid inertia"):
        load_urdf(_write(tmp_path, text))
    odd = LINK.format("b").replace('ixx="1"', 'ixx="5"')  # breaks the triangle inequality: kept, noted
    text = _robot(_joint("j1", "revolute", "a", "b"), links=("a",)).replace("</robot>", odd + "</robot>")
    with pytest.warns(UserWarning, match=r"link 'b': inertia breaks the triangle inequality"):
        lm = load_urdf(_write(tmp_path, text))
    assert lm.notes and float(lm.bodies["b"].get_inertia_about_body_origin(lm.state)[0, 0]) == 5.0
    with pytest.raises(ValueError, match="root_joint"):
        load_urdf(_write(tmp_path, _robot(links=("a",))), root_joint="ball")


def test_effort_and_velocity_limits_are_recorded(robots_dir):
    """Issue 17: URDF ``<limit effort velocity>`` was dropped; now each Coordinate keeps them
    (Panda's first joint: 87 N m, 2.175 rad/s, as in the file) and ``summary()`` shows them.
    Pinocchio reads the same numbers (``effortLimit``, ``velocityLimit``) where installed."""
    m = _quiet_load(robots_dir / ROBOTS["panda"][0])
    j1 = m.coordinates["panda_joint1"]
    assert (j1.effort_limit, j1.velocity_limit) == (87.0, 2.175)
    assert "effort<=87 speed<=2.175" in m.summary()
    try:
        import pinocchio as pin
    except ImportError:
        return
    model = pin.buildModelFromUrdf(str(robots_dir / ROBOTS["panda"][0]))
    for name, c in m.coordinates.items():
        jid = model.getJointId(name)
        iv = model.joints[jid].idx_v
        assert c.effort_limit == pytest.approx(model.effortLimit[iv]), name
        assert c.velocity_limit == pytest.approx(model.velocityLimit[iv]), name
