"""Triangle meshes and their mass properties, the way MuJoCo's compiler computes them.

MuJoCo gives a body without an ``<inertial>`` the mass and inertia of its geoms; a mesh
geom's come from its mesh. This module reads the mesh files MuJoCo reads (binary ``.stl``,
``.obj`` with triangles and quads, MuJoCo's own ``.msh``, or the ``vertex``/``face`` data
of an ``<asset><mesh>``), and computes what ``mjCMesh::Process`` computes
(https://mujoco.readthedocs.io/en/stable/XMLreference.html#asset-mesh):

- the mesh's volume (``inertia="legacy"``, the default: each face's pyramid to the mesh's
  centre counted with its absolute volume; ``"exact"``: signed volumes of a closed,
  consistently oriented surface; ``"convex"``: the convex hull's; ``"shell"``: the surface
  area, mass on the surface),
- its centre of mass and principal axes of inertia (MuJoCo 4's compiler finds them to
  round-off at every scale; MuJoCo 3's Jacobi iteration stopped at an absolute 1e-12 of
  the unit-density inertia, which for small meshes dropped products of inertia),
- the sizes of the equivalent inertia box, which MuJoCo uses for the geom's inertia and to
  fit a primitive geom to a mesh (``<geom type="box" mesh="...">``).

Vertices are read as 32-bit floats, as MuJoCo stores them, then computed with in float64.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from simjax._lazy import LazyModule
from simjax.io._loaded import ModelFileError

spatial = LazyModule("scipy.spatial")  # scipy: a dependency of JAX; imported by the first hull

_MINVAL = 1e-15  # MuJoCo's mjMINVAL
#: ``<mesh inertia=...>``: how the mass is spread
INERTIA_KINDS = ("legacy", "exact", "convex", "shell")


# ----------------------------------------------------------------------------- quaternions


def quat_to_rot(q: np.ndarray) -> np.ndarray:
    """Rotation matrix of a unit quaternion ``[w, x, y, z]``."""
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def principal_axes(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Principal moments (decreasing) and axes (the columns of a rotation matrix) of a
    symmetric 3x3 inertia, as MuJoCo's compiler orders them."""
    ev, V = np.linalg.eigh(0.5 * (A + A.T))
    ev, V = ev[::-1].copy(), V[:, ::-1].copy()
    if np.linalg.det(V) < 0:
        V[:, 2] = -V[:, 2]
    return ev, V


# ----------------------------------------------------------------------------- files


def _bad(path: str, msg: str) -> ModelFileError:
    return ModelFileError(f"{path}: {msg}")


def _read_stl(path: str, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """A binary STL (MuJoCo reads no ASCII STL)."""
    if len(data) < 84:
        raise _bad(path, "invalid header in STL file (shorter than 84 bytes)")
    (n,) = struct.unpack_from("<i", data, 80)
    if n < 1 or n > 200000 or 84 + 50 * n != len(data):
        ascii_hint = data[:5].lower() == b"solid"
        raise _bad(
            path,
            f"not a binary STL that MuJoCo reads ({n} faces in the header for {len(data)} bytes)"
            + (
                "; this looks like an ASCII STL, which MuJoCo does not read either: convert it to binary"
                if ascii_hint
                else ""
            ),
        )
    record = np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
    rec = np.frombuffer(data, dtype=record, offset=84)
    tri = rec["v"].reshape(-1, 3)
    vert, face = np.unique(tri, axis=0, return_inverse=True)
    return vert.astype(np.float64), face.reshape(-1, 3).astype(np.int64)


def _obj_index(tok: str, n: int, path: str, line: int) -> int:
    i = int(tok.split("/")[0])
    j = i - 1 if i > 0 else n + i
    if not 0 <= j < n:
        raise _bad(path, f"line {line}: face index {i} refers to a missing vertex ({n} so far)")
    return j


def _read_obj(path: str, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """An OBJ's vertices and the faces of its first object (triangles and quads, a quad
    split along its 0-2 diagonal, as MuJoCo's OBJ decoder)."""
    verts: list[list[float]] = []
    faces: list[list[int]] = []
    seen_object = False
    for ln, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        tok = raw.split()
        if not tok:
            continue
        if tok[0] == "v":
            if len(tok) < 4:
                raise _bad(path, f"line {ln}: a vertex needs three coordinates")
            verts.append([float(x) for x in tok[1:4]])
        elif tok[0] in ("o", "g"):
            if faces:
                seen_object = True
        elif tok[0] == "f" and not seen_object:
            idx = [_obj_index(t, len(verts), path, ln) for t in tok[1:]]
            if len(idx) == 3:
                faces.append(idx)
            elif len(idx) == 4:
                faces += [[idx[0], idx[1], idx[2]], [idx[0], idx[2], idx[3]]]
            else:
                msg = f"line {ln}: a face with {len(idx)} vertices; MuJoCo reads triangles and quads"
                raise _bad(path, msg)
    if not verts:
        raise _bad(path, "no vertices in OBJ file")
    v = np.asarray(verts, dtype=np.float64).astype(np.float32).astype(np.float64)
    return v, np.asarray(faces, dtype=np.int64).reshape(-1, 3)


def _read_msh(path: str, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo's binary MSH: four int32 counts, then vertices, normals, texture
    coordinates and faces."""
    if len(data) < 16:
        raise _bad(path, "missing header in MSH file")
    nv, nn, nt, nf = struct.unpack_from("<4i", data, 0)
    need = 16 + 4 * (3 * nv + 3 * nn + 2 * nt + 3 * nf)
    if nv < 4 or nn < 0 or nt < 0 or nf < 0 or need != len(data):
        counts = (nv, nn, nt, nf)
        raise _bad(path, f"unexpected file size in MSH file ({len(data)} bytes for the counts {counts})")
    vert = np.frombuffer(data, "<f4", 3 * nv, 16).reshape(-1, 3).astype(np.float64)
    off = 16 + 4 * (3 * nv + 3 * nn + 2 * nt)
    face = np.frombuffer(data, "<i4", 3 * nf, off).reshape(-1, 3).astype(np.int64)
    return vert, face


def read_mesh(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Vertices ``(n, 3)`` and triangles ``(m, 3)`` of a mesh file MuJoCo reads (binary
    STL, OBJ, MSH), vertices rounded to float32 as MuJoCo stores them."""
    ext = os.path.splitext(path)[1].lower()
    readers = {".stl": _read_stl, ".obj": _read_obj, ".msh": _read_msh}
    if ext not in readers:
        kind = ext or "(none)"
        raise _bad(path, f"mesh files of type {kind!r} are not read; MuJoCo reads .stl, .obj and .msh")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _bad(path, f"cannot read the mesh file ({e.strerror})") from None
    return readers[ext](path, data)


# ----------------------------------------------------------------------------- mass properties


@dataclass(frozen=True)
class MeshInertia:
    """A processed mesh: its volume (surface area for ``shell``), the frame MuJoCo moves it
    into (centre of mass ``pos`` and principal axes, the columns of ``R``, in the mesh file's frame after
    ``scale``/``refpos``/``refquat``), the principal moments of unit density, the half sizes
    of the equivalent inertia box, and the axis-aligned bounds of the vertices in the
    principal frame (``aamm``: min xyz, max xyz)."""

    volume: float
    pos: np.ndarray
    R: np.ndarray
    eigval: np.ndarray
    boxsz: np.ndarray
    aamm: np.ndarray


def _triangles(v: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per face: area, unit normal (zero where the area is below MuJoCo's threshold) and
    centroid."""
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    cr = np.cross(b - a, c - a)
    ln = np.linalg.norm(cr, axis=1)
    ok = ln >= _MINVAL
    area = np.where(ok, 0.5 * ln, 0.0)
    normal = np.where(ok[:, None], cr / np.where(ok, ln, 1.0)[:, None], 0.0)
    return area, normal, (a + b + c) / 3


def _convex_faces(v: np.ndarray, name: str) -> np.ndarray:
    """Outward triangles of the vertices' convex hull (qhull, as MuJoCo)."""
    try:
        hull = spatial.ConvexHull(v)
    except spatial.QhullError as e:
        msg = f"mesh {name!r}: its convex hull cannot be computed (flat or degenerate): {e}"
        raise ModelFileError(msg) from None
    f = hull.simplices.copy()
    cr = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    flip = np.einsum("ij,ij->i", cr, hull.equations[:, :3]) < 0
    f[flip] = f[flip][:, [0, 2, 1]]
    return f


def mesh_inertia(
    vert: np.ndarray,
    face: np.ndarray,
    *,
    name: str,
    inertia: str = "legacy",
    scale: np.ndarray | None = None,
    refpos: np.ndarray | None = None,
    refquat: np.ndarray | None = None,
) -> MeshInertia:
    """Volume, centre of mass, principal axes and inertia box of a mesh, as MuJoCo's
    compiler computes them (``mjCMesh::Process``)."""
    if inertia not in INERTIA_KINDS:
        raise ModelFileError(f"mesh {name!r}: inertia={inertia!r} must be one of {', '.join(INERTIA_KINDS)}")
    v = np.asarray(vert, dtype=np.float64).copy()
    if len(v) < 4:
        raise ModelFileError(f"mesh {name!r}: at least 4 vertices required, got {len(v)}")
    if not np.all(np.isfinite(v)):
        raise ModelFileError(f"mesh {name!r}: a vertex coordinate is not finite")
    f = np.asarray(face, dtype=np.int64).reshape(-1, 3)
    if len(f) and (f.min() < 0 or f.max() >= len(v)):
        raise ModelFileError(f"mesh {name!r}: a face refers to a vertex that does not exist")
    if inertia == "exact" and len(f):  # on the file's vertices, before scale and ref* (as MuJoCo)
        _check_orientation(v, f, name)
    if refpos is not None:
        v -= np.asarray(refpos, dtype=float)
    if refquat is not None and tuple(refquat) != (1.0, 0.0, 0.0, 0.0):
        rq = np.asarray(refquat, dtype=float)
        v = v @ quat_to_rot(rq / np.linalg.norm(rq))  # rows: R^T x
    if scale is not None:
        v *= np.asarray(scale, dtype=float)
    if len(f) == 0 or inertia == "convex":
        f_vol = _convex_faces(v, name)
    else:
        f_vol = f
    if len(f) == 0:
        f = f_vol
    if scale is not None and float(np.prod(scale)) < 0:  # left-handed scaling flips the winding
        f, f_vol = f[:, [0, 2, 1]], f_vol[:, [0, 2, 1]]

    area, _, cen = _triangles(v, f)
    total_area = float(area.sum())
    if total_area < _MINVAL:
        raise ModelFileError(f"mesh {name!r}: mesh surface area is too small")
    facecen = (area[:, None] * cen).sum(0) / total_area

    if inertia == "shell":
        size = total_area
        com = (area[:, None] * (0.75 * cen + 0.25 * facecen)).sum(0) / size
    else:
        a2, n2, c2 = _triangles(v, f_vol)
        vol = np.einsum("ij,ij->i", c2 - facecen, n2) * a2 / 3
        if inertia == "legacy":
            vol = np.abs(vol)
        size = float(vol.sum())
        if size < _MINVAL:
            if size < 0:
                raise ModelFileError(f"mesh {name!r}: mesh volume is negative (misoriented triangles)")
            raise ModelFileError(
                f"mesh {name!r}: mesh volume is too small; for a thin or open surface set "
                'inertia="shell" on the <mesh> (mass on the surface)'
            )
        com = (vol[:, None] * (0.75 * c2 + 0.25 * facecen)).sum(0) / size

    # products of inertia about the centre of mass (unit density)
    vc = v - com
    fi = f if inertia == "shell" else f_vol
    a3, n3, c3 = _triangles(vc, fi)
    if inertia == "shell":
        w, C = a3, 12.0
    else:
        w, C = np.einsum("ij,ij->i", c3, n3) * a3 / 3, 20.0
        if inertia == "legacy":
            w = np.abs(w)
    size = float(w.sum())
    D, E, F = vc[fi[:, 0]], vc[fi[:, 1]], vc[fi[:, 2]]
    P = np.zeros((3, 3))
    for j in range(3):
        for k in range(j, 3):
            s = (
                2 * (D[:, j] * D[:, k] + E[:, j] * E[:, k] + F[:, j] * F[:, k])
                + D[:, j] * E[:, k]
                + D[:, k] * E[:, j]
                + D[:, j] * F[:, k]
                + D[:, k] * F[:, j]
                + E[:, j] * F[:, k]
                + E[:, k] * F[:, j]
            )
            P[j, k] = P[k, j] = float((w / C * s).sum())
    full = np.array(
        [
            [P[1, 1] + P[2, 2], -P[0, 1], -P[0, 2]],
            [-P[0, 1], P[0, 0] + P[2, 2], -P[1, 2]],
            [-P[0, 2], -P[1, 2], P[0, 0] + P[1, 1]],
        ]
    )
    ev, V = principal_axes(full)
    if ev[2] <= 0:
        raise ModelFileError(f"mesh {name!r}: eigenvalue of mesh inertia must be positive")
    at, rt = 1e-9, 1e-6
    if (
        ev[0] + ev[1] < ev[2] * (1 - rt) - at
        or ev[0] + ev[2] < ev[1] * (1 - rt) - at
        or ev[1] + ev[2] < ev[0] * (1 - rt) - at
    ):
        raise ModelFileError(f"mesh {name!r}: eigenvalues of mesh inertia violate A + B >= C")
    sums = np.array([ev[1] + ev[2] - ev[0], ev[0] + ev[2] - ev[1], ev[0] + ev[1] - ev[2]])
    box = 0.5 * np.sqrt(np.maximum(6 * sums / size, 0.0))
    local = vc @ V  # rows: R^T (x - com)
    aamm = np.concatenate([local.min(0), local.max(0)])
    return MeshInertia(volume=size, pos=com, R=V, eigval=ev, boxsz=box, aamm=aamm)


def _check_orientation(v: np.ndarray, f: np.ndarray, name: str) -> None:
    """``inertia="exact"`` needs consistently oriented faces: no directed edge twice."""
    area, _, _ = _triangles(v, f)
    g = f[area > math.sqrt(_MINVAL)]
    edges = np.concatenate([g[:, [0, 1]], g[:, [1, 2]], g[:, [2, 0]]])
    _, counts = np.unique(edges, axis=0, return_counts=True)
    if np.any(counts > 1):
        raise ModelFileError(
            f'mesh {name!r}: faces have inconsistent orientation, which inertia="exact" needs; '
            'use inertia="legacy" or "convex", or fix the mesh'
        )
