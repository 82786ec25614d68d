"""Loaders read only inside the model's folder, parse XML without DTDs or entities, and
bound depth and size (issue 65, item 7).

Every file a model names (URDF ``<mesh filename>``, MJCF ``<mesh file>`` and ``<include>``,
OpenSim ``<mesh_file>``) must lie, symlinks followed, inside the model file's folder or a
folder the user names; ``allow_outside=True`` lifts it. A refused mesh that only draws the
model is left out with one warning; a refused file that changes the model is a
``ModelFileError``. Each test here failed before: the loaders read ``../x``, absolute paths
and ``file://`` URLs, DTD entities were expanded by whatever expat was linked, and 3000
nested MJCF bodies ended in a ``RecursionError``.
"""

import os
import struct
import time
import warnings

import numpy as np
import pytest
from helpers import ONE_PIN_OSIM

from simjax.io import ModelFileError, _xml, load_mjcf, load_osim, load_urdf
from simjax.viz._meshes import MeshReadError, read_vtp

OUTSIDE = r"outside the model's folder.*allow_outside=True"


def _stl(path, scale: float = 0.1) -> str:
    """A closed binary STL (a cube of side ``scale``), returned as a string path."""
    v = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], float) * scale
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    tris = [t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))]
    data = b"\0" * 80 + struct.pack("<I", len(tris))
    for t in tris:
        p = v[list(t)]
        n = np.cross(p[1] - p[0], p[2] - p[0])
        data += struct.pack("<12fH", *n, *p.ravel(), 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def _load(loader, path, **kw):
    """``loader(path)`` and the warnings it gave that are about files outside the folder."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model = loader(path, warn_ignored=False, **kw)
    return model, [str(x.message) for x in w if "not read, drawn as stand-ins" in str(x.message)]


def _meshes(model) -> list[str]:
    return [g.mesh_file for g in model.geometry if g.shape == "mesh"]


# ----------------------------------------------------------------------------- URDF

URDF = """<robot name="r">
  <link name="base"><visual><geometry><mesh filename="{mesh}"/></geometry></visual></link>
  <link name="arm"><inertial><mass value="1"/>
    <inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>
  <joint name="j" type="revolute"><parent link="base"/><child link="arm"/>
    <limit lower="-1" upper="1"/></joint>
</robot>"""


def _urdf(folder, mesh: str, name: str = "robot.urdf"):
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(URDF.format(mesh=mesh))
    return p


@pytest.mark.parametrize("how", ["../", "absolute", "file://", "symlink"])
def test_urdf_mesh_outside_the_folder_is_refused_with_a_warning(tmp_path, how):
    secret = _stl(tmp_path / "secret.stl")
    model_dir = tmp_path / "robot"
    model_dir.mkdir()
    mesh = {"../": "../secret.stl", "absolute": secret, "file://": "file://" + secret}.get(how, "link.stl")
    if how == "symlink":
        os.symlink(secret, model_dir / "link.stl")
    path = _urdf(model_dir, mesh)
    model, refused = _load(load_urdf, path)
    assert _meshes(model) == [""]  # drawn as a stand-in
    assert len(refused) == 1
    assert "load_urdf(robot.urdf): 1 mesh file not read" in refused[0]
    assert "secret.stl" in refused[0] and "package_dirs=" in refused[0]
    with pytest.warns(UserWarning, match=OUTSIDE):
        load_urdf(path, warn_ignored=False)
    # the opt-out
    model, refused = _load(load_urdf, path, allow_outside=True)
    assert not refused
    assert os.path.realpath(_meshes(model)[0]) == os.path.realpath(secret)


def test_urdf_meshes_inside_the_folder_and_named_packages_resolve(tmp_path, monkeypatch):
    monkeypatch.delenv("ROS_PACKAGE_PATH", raising=False)
    ws, robot = tmp_path / "ws", tmp_path / "ws" / "robot"
    inside = _stl(robot / "meshes" / "a.stl")
    model, refused = _load(load_urdf, _urdf(robot, "meshes/a.stl"))
    assert not refused and _meshes(model) == [inside]

    # another package of the workspace: found above the model, but named by the user only
    pkg_mesh = _stl(ws / "parts" / "meshes" / "b.stl")
    path = _urdf(robot, "package://parts/meshes/b.stl")
    model, refused = _load(load_urdf, path)
    assert refused and _meshes(model) == [""]
    model, refused = _load(load_urdf, path, package_dirs=[ws])
    assert not refused and _meshes(model) == [pkg_mesh]
    monkeypatch.setenv("ROS_PACKAGE_PATH", str(ws))
    model, refused = _load(load_urdf, path)
    assert not refused and _meshes(model) == [pkg_mesh]
    # a file:// URL or absolute path inside a named package folder is accepted too
    model, refused = _load(load_urdf, _urdf(robot, "file://" + pkg_mesh))
    assert not refused and _meshes(model) == [pkg_mesh]
    monkeypatch.delenv("ROS_PACKAGE_PATH")
    # ... but not a package URI that climbs out of the named folders
    _stl(tmp_path / "c.stl")
    path = _urdf(robot, "package://parts/../../c.stl")
    model, refused = _load(load_urdf, path, package_dirs=[ws])
    assert refused and _meshes(model) == [""]


def test_urdf_model_in_its_own_package_reaches_the_package(tmp_path):
    """A ROS package ``pkg/urdf/r.urdf`` names ``package://pkg/meshes/...`` (found above it,
    example-robot-data's layout) or ``../meshes/...`` (with a ``package.xml``)."""
    mesh = _stl(tmp_path / "share" / "pkg" / "meshes" / "m.stl")
    urdf_dir = tmp_path / "share" / "pkg" / "robots" / "urdf"
    model, refused = _load(load_urdf, _urdf(urdf_dir, "package://pkg/meshes/m.stl"))
    assert not refused and _meshes(model) == [mesh]
    rel = "../../meshes/m.stl"
    model, refused = _load(load_urdf, _urdf(urdf_dir, rel))
    assert refused and _meshes(model) == [""]  # no package.xml: the package is not known
    (tmp_path / "share" / "pkg" / "package.xml").write_text("<package/>")
    model, refused = _load(load_urdf, _urdf(urdf_dir, rel))
    assert not refused and _meshes(model) == [mesh]


# ----------------------------------------------------------------------------- MJCF

MJCF = """<mujoco>{compiler}
  <asset><mesh name="m" file="{mesh}"/></asset>
  <worldbody>{body}</worldbody>
</mujoco>"""
MOVING = '<body name="b"><joint/><geom type="mesh" mesh="m"/></body>'
DRAWN = '<geom type="mesh" mesh="m"/><body name="b"><joint/><geom size="0.1"/></body>'


def _mjcf(folder, mesh: str, body: str = MOVING, compiler: str = "", name: str = "model.xml"):
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(MJCF.format(mesh=mesh, body=body, compiler=compiler))
    return p


@pytest.mark.parametrize("how", ["../", "absolute", "meshdir", "symlink"])
def test_mjcf_mesh_read_for_inertia_outside_the_folder_is_an_error(tmp_path, how):
    secret = _stl(tmp_path / "secret.stl")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    mesh = {"../": "../secret.stl", "absolute": secret}.get(how, "secret.stl")
    if how == "symlink":
        os.symlink(secret, model_dir / "secret.stl")
    compiler = '<compiler meshdir=".."/>' if how == "meshdir" else ""
    path = _mjcf(model_dir, mesh, compiler=compiler)
    with pytest.raises(
        ModelFileError, match=r"model\.xml:2: <mesh name=\"m\">: mesh 'm': the file .*" + OUTSIDE
    ):
        load_mjcf(path)
    model = load_mjcf(path, allow_outside=True, warn_ignored=False)
    assert float(model.bodies["b"].get_default_mass_properties().mass) == pytest.approx(1.0, rel=1e-6)


def test_mjcf_mesh_only_drawn_outside_the_folder_is_left_out_with_a_warning(tmp_path):
    secret = _stl(tmp_path / "secret.stl")
    path = _mjcf(tmp_path / "model", "../secret.stl", body=DRAWN)
    model, refused = _load(load_mjcf, path)
    assert _meshes(model) == [""] and len(refused) == 1 and "secret.stl" in refused[0]
    model, refused = _load(load_mjcf, path, allow_outside=True)
    assert not refused and _meshes(model) == [secret]
    # inside the folder (meshdir included): read as before
    inside = _stl(tmp_path / "model" / "assets" / "a.stl")
    path = _mjcf(tmp_path / "model", "a.stl", compiler='<compiler meshdir="assets"/>')
    model = load_mjcf(path, warn_ignored=False)
    assert float(model.bodies["b"].get_default_mass_properties().mass) == pytest.approx(1.0, rel=1e-6)
    path = _mjcf(tmp_path / "model", "a.stl", body=DRAWN, compiler='<compiler meshdir="assets"/>')
    model, refused = _load(load_mjcf, path)
    assert not refused and _meshes(model) == [inside]


def test_mjcf_in_a_python_package_reaches_the_package(tmp_path):
    """dm_control's ``walkers/assets/dog_v2/dog.xml`` names ``meshdir="../../../../suite/dog_assets"``:
    inside the installed package (the folders above it with an ``__init__.py``), not beyond."""
    site = tmp_path / "site-packages"
    for d in ("pkg", "pkg/walkers"):
        (site / d).mkdir(parents=True, exist_ok=True)
        (site / d / "__init__.py").write_text("")
    _stl(site / "pkg" / "assets" / "m.stl")
    model_dir = site / "pkg" / "walkers" / "assets" / "dog"
    path = _mjcf(model_dir, "m.stl", compiler='<compiler meshdir="../../../assets"/>')
    model = load_mjcf(path, warn_ignored=False)
    assert float(model.bodies["b"].get_default_mass_properties().mass) == pytest.approx(1.0, rel=1e-6)
    _stl(site / "other" / "m.stl")  # another package beside it: outside
    path = _mjcf(model_dir, "m.stl", compiler='<compiler meshdir="../../../../other"/>')
    with pytest.raises(ModelFileError, match=r"outside the model's folders .*site-packages/pkg'"):
        load_mjcf(path)


INCLUDING = (
    '<mujoco><include file="{file}"/>'
    '<worldbody><body name="b"><joint/><geom size="0.1"/></body></worldbody></mujoco>'
)
PART = '<mujoco><worldbody><body name="p" pos="1 0 0"><joint/><geom size="0.1"/></body></worldbody></mujoco>'


@pytest.mark.parametrize("how", ["../", "absolute"])
def test_mjcf_include_outside_the_folder_is_an_error(tmp_path, how):
    (tmp_path / "part.xml").write_text(PART)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    path = model_dir / "model.xml"
    path.write_text(INCLUDING.format(file="../part.xml" if how == "../" else tmp_path / "part.xml"))
    with pytest.raises(
        ModelFileError, match=r"model\.xml:1: <include>: the included file .*part\.xml.*" + OUTSIDE
    ):
        load_mjcf(path)
    model = load_mjcf(path, allow_outside=True, warn_ignored=False)
    assert set(model.bodies) == {"world", "b", "p"}
    # inside the folder: as before
    (model_dir / "part.xml").write_text(PART)
    path.write_text(INCLUDING.format(file="part.xml"))
    assert set(load_mjcf(path, warn_ignored=False).bodies) == {"world", "b", "p"}


def test_mjcf_include_cycles_and_include_bombs_are_errors(tmp_path):
    (tmp_path / "a.xml").write_text('<mujoco><include file="b.xml"/></mujoco>')
    (tmp_path / "b.xml").write_text('<mujoco><include file="a.xml"/></mujoco>')
    with pytest.raises(ModelFileError, match=r"include cycle"):
        load_mjcf(tmp_path / "a.xml")
    # each file includes the next twice: 2**12 includes, refused at MAX_INCLUDES, quickly
    for k in range(12):
        (tmp_path / f"i{k}.xml").write_text(
            f'<mujoco><include file="i{k + 1}.xml"/><include file="i{k + 1}.xml"/></mujoco>'
        )
    (tmp_path / "i12.xml").write_text("<mujoco/>")
    t0 = time.perf_counter()
    with pytest.raises(ModelFileError, match=rf"more than {_xml.MAX_INCLUDES} <include>s"):
        load_mjcf(tmp_path / "i0.xml")
    assert time.perf_counter() - t0 < 10


def test_deeply_nested_mjcf_is_a_model_file_error_naming_the_limit():
    n = 3000
    body = '<body pos="0 0 0.1"><joint/><geom size="0.1"/>'
    xml = f"<mujoco><worldbody>{body * n}{'</body>' * n}</worldbody></mujoco>"
    with pytest.raises(
        ModelFileError, match=rf"nested {_xml.MAX_DEPTH + 1} elements deep; .*at most {_xml.MAX_DEPTH} levels"
    ):
        load_mjcf(xml)


def test_deep_mjcf_through_includes_is_refused(tmp_path):
    """Each file is under the limit; together they are over it."""
    half = _xml.MAX_DEPTH // 2 + 5
    nest = '<body><joint/><geom size="0.1"/>' * half
    (tmp_path / "deep.xml").write_text(f"<mujoco><worldbody>{nest}{'</body>' * half}</worldbody></mujoco>")
    outer = '<body><geom size="0.1"/>' * half
    top = f'<mujoco><worldbody>{outer}<include file="deep.xml"/>{"</body>" * half}</worldbody></mujoco>'
    (tmp_path / "top.xml").write_text(top)
    with pytest.raises(
        ModelFileError, match=rf"once its <include>s are in place; .*at most {_xml.MAX_DEPTH} levels"
    ):
        load_mjcf(tmp_path / "top.xml")


# ----------------------------------------------------------------------------- OpenSim


def _osim(folder, mesh: str):
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "m.osim"
    p.write_text(
        ONE_PIN_OSIM.format(name="tiny", geometry=f'<Mesh name="shape"><mesh_file>{mesh}</mesh_file></Mesh>')
    )
    return p


@pytest.mark.parametrize("how", ["../", "absolute"])
def test_osim_mesh_file_outside_the_folder_is_refused_with_a_warning(tmp_path, how):
    secret = tmp_path / "secret.vtp"
    secret.write_text("<VTKFile/>")
    path = _osim(tmp_path / "model", "../secret.vtp" if how == "../" else str(secret))
    model, refused = _load(load_osim, path)
    assert _meshes(model) == [""] and len(refused) == 1
    assert refused[0].startswith("load_osim(m.osim): 1 mesh file not read") and "secret.vtp" in refused[0]
    model, refused = _load(load_osim, path, allow_outside=True)
    assert not refused and _meshes(model) == [str(secret)]


def test_osim_geometry_folders_are_inside(tmp_path):
    """OpenSim's own search path: the model's folder, its Geometry folder, the Geometry
    folder beside it."""
    for d in ("model", "model/Geometry", "Geometry"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "model" / "Geometry" / "a.vtp").write_text("<VTKFile/>")
    (tmp_path / "Geometry" / "b.vtp").write_text("<VTKFile/>")
    for name, where in (("a.vtp", "model/Geometry"), ("b.vtp", "Geometry")):
        model, refused = _load(load_osim, _osim(tmp_path / "model", name))
        assert not refused and _meshes(model) == [str(tmp_path / where / name)]


# ----------------------------------------------------------------------------- XML: DTDs, entities, size

LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE {root} [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<{root} name="&lol9;"/>"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE {root} [<!ENTITY secret SYSTEM "file://{secret}">]>
<{root} name="&secret;"/>"""
PARAMETER = """<?xml version="1.0"?>
<!DOCTYPE {root} [<!ENTITY % dtd SYSTEM "file://{secret}"> %dtd;]>
<{root}/>"""
EXTERNAL_DTD = """<?xml version="1.0"?>
<!DOCTYPE {root} SYSTEM "file://{secret}">
<{root}/>"""
LOADERS = {
    "urdf": (load_urdf, "robot"),
    "mjcf": (load_mjcf, "mujoco"),
    "osim": (load_osim, "OpenSimDocument"),
}


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("doc", ["laughs", "external", "parameter", "external dtd"])
def test_entities_and_dtds_are_refused_without_expanding(tmp_path, loader, doc):
    load, root = LOADERS[loader]
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    template = {"laughs": LAUGHS, "external": EXTERNAL, "parameter": PARAMETER, "external dtd": EXTERNAL_DTD}[
        doc
    ]
    path = tmp_path / "model" / "m.xml"
    path.parent.mkdir()
    path.write_text(template.format(root=root, secret=secret))
    t0 = time.perf_counter()
    with pytest.raises(
        ModelFileError, match=r"m\.xml:\d+: .*(entity|DTD|declares).*without DTDs or entities"
    ) as e:
        load(path)
    assert time.perf_counter() - t0 < 5
    assert "TOP-SECRET" not in str(e.value)
    with pytest.raises(ModelFileError, match=r"without DTDs or entities"):  # as text, too
        load(path.read_text())


def test_a_plain_doctype_is_read(tmp_path):
    p = tmp_path / "r.urdf"
    p.write_text("<!DOCTYPE robot>\n" + URDF.format(mesh="m.stl"))
    assert "j" in load_urdf(p, warn_ignored=False).coordinates


def test_files_over_the_size_limit_are_refused(tmp_path, monkeypatch):
    p = _urdf(tmp_path, "m.stl")
    monkeypatch.setattr(_xml, "MAX_BYTES", 100)
    with pytest.raises(ModelFileError, match=r"robot\.urdf: the file is \d+ bytes; .*at most 100 bytes"):
        load_urdf(p)
    with pytest.raises(ModelFileError, match=r"at most 100 bytes"):
        load_urdf(p.read_text())
    with pytest.raises(ModelFileError, match=r"at most 100 bytes"), open(p, "rb") as fh:
        load_urdf(fh)


def test_vtp_meshes_are_parsed_without_entities(tmp_path):
    p = tmp_path / "bomb.vtp"
    p.write_text(LAUGHS.format(root="VTKFile"))
    with pytest.raises(MeshReadError, match=r"without DTDs or entities"):
        read_vtp(str(p))
