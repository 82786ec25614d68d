"""Mesh files for drawing: trimesh for the formats it reads (STL, OBJ, DAE, PLY, GLB, OFF),
simjax's own readers for OpenSim's VTK PolyData (``.vtp``) and MuJoCo's ``.msh``."""

from __future__ import annotations

import base64
import os
import struct
import warnings
import xml.etree.ElementTree as ET
import zlib
from functools import lru_cache
from typing import Any
from xml.parsers import expat

import numpy as np

from ..io._loaded import ModelFileError
from ..io._mesh import read_mesh
from ..io._xml import parse_tree, read_bounded

_DTYPES = {
    "Float32": "<f4",
    "Float64": "<f8",
    "Int8": "<i1",
    "UInt8": "<u1",
    "Int16": "<i2",
    "UInt16": "<u2",
    "Int32": "<i4",
    "UInt32": "<u4",
    "Int64": "<i8",
    "UInt64": "<u8",
}


class MeshReadError(ValueError):
    """A mesh file that cannot be drawn (missing, unreadable, or a format needing a package)."""


def _vtp_array(el: ET.Element, header: str, compressed: bool) -> np.ndarray:
    dtype = np.dtype(_DTYPES.get(el.get("type", "Float32"), "<f4"))
    fmt = el.get("format", "ascii")
    text = (el.text or "").strip()
    if fmt == "ascii":
        return np.array(text.split(), dtype=float).astype(dtype)
    if fmt != "binary":
        raise MeshReadError(f"VTK DataArray format {fmt!r} is not read (ascii or inline binary only)")
    raw = base64.b64decode(text)
    hsize = 8 if header == "UInt64" else 4
    hfmt = "<Q" if hsize == 8 else "<I"
    if not compressed:
        (n,) = struct.unpack(hfmt, raw[:hsize])
        return np.frombuffer(raw[hsize : hsize + n], dtype=dtype)
    nblocks = struct.unpack(hfmt, raw[:hsize])[0]
    # the header (block count, sizes) is base64-encoded on its own, then the blocks
    hlen = hsize * (3 + nblocks)
    hb64 = 4 * ((hlen + 2) // 3)
    head = base64.b64decode(text[:hb64])
    sizes = struct.unpack(f"<{3 + nblocks}{hfmt[1]}", head[:hlen])[3:]
    body = base64.b64decode(text[hb64:])
    out, pos = [], 0
    for s in sizes:
        out.append(zlib.decompress(body[pos : pos + s]))
        pos += s
    return np.frombuffer(b"".join(out), dtype=dtype)


def read_vtp(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Vertices and triangles of a VTK PolyData file (OpenSim's geometry format); polygons
    are split into triangle fans."""
    try:  # parsed without DTDs or entities, at most MAX_DEPTH deep and MAX_BYTES long
        root = parse_tree(read_bounded(path), path)
    except (expat.ExpatError, ModelFileError, OSError) as e:
        raise MeshReadError(f"{path}: not a readable VTK XML file ({e})") from None
    header = root.get("header_type", "UInt32")
    compressed = root.get("compressor") is not None
    piece = root.find("PolyData/Piece")
    pts = piece.find("Points/DataArray") if piece is not None else None
    if piece is None or pts is None:
        raise MeshReadError(f"{path}: no PolyData <Piece> with <Points>")
    v = _vtp_array(pts, header, compressed).astype(float).reshape(-1, 3)
    conn = off = None
    for a in piece.findall("Polys/DataArray"):
        if a.get("Name") == "connectivity":
            conn = _vtp_array(a, header, compressed).astype(np.int64)
        elif a.get("Name") == "offsets":
            off = _vtp_array(a, header, compressed).astype(np.int64)
    if conn is None or off is None:
        return v, np.zeros((0, 3), dtype=np.int64)
    tris = []
    start = 0
    for end in off:
        poly = conn[start:end]
        tris += [(poly[0], poly[k], poly[k + 1]) for k in range(1, len(poly) - 1)]
        start = end
    return v, np.asarray(tris, dtype=np.int64).reshape(-1, 3)


def _trimesh() -> Any:
    try:  # an optional dependency (simjax[viz]), loaded on use; STL/OBJ still read without it
        import trimesh  # noqa: PLC0415
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return trimesh


@lru_cache(maxsize=256)
def _load(path: str, mtime: float) -> tuple[np.ndarray, np.ndarray]:
    ext = os.path.splitext(path)[1].lower()
    trimesh = _trimesh() if ext not in (".vtp", ".msh") else None
    if ext == ".vtp":
        return read_vtp(path)
    if ext == ".msh" or (trimesh is None and ext in (".stl", ".obj")):
        return read_mesh(path)
    if trimesh is None:
        raise MeshReadError(f"{path}: reading {ext} files needs trimesh: pip install 'simjax[viz]'")
    try:
        m = trimesh.load(path, force="mesh", process=False)
    except Exception as e:  # trimesh raises many kinds; all mean "cannot draw this file"
        hint = " (DAE files need pycollada: pip install pycollada)" if ext == ".dae" else ""
        raise MeshReadError(f"{path}: {type(e).__name__}: {e}{hint}") from None
    v = np.asarray(m.vertices, dtype=float)
    f = np.asarray(m.faces, dtype=np.int64).reshape(-1, 3)
    if len(v) == 0:
        raise MeshReadError(f"{path}: the file holds no vertices")
    return v, f


#: How many file names (and folders) one warning lists before "and N more".
_LISTED = 5


class MeshProblems:
    """The mesh files a scene could not draw, gathered for one warning (:meth:`warn`):
    files not found (with the folders they were looked for in), geometry whose file the
    loader left out, and files that could not be read."""

    def __init__(self) -> None:
        self.absent: list[str] = []
        self.folders: list[str] = []
        self.unnamed: list[str] = []
        self.unreadable: list[tuple[str, str]] = []

    def warn(self, where: str, stacklevel: int = 2) -> None:
        """One warning (none when every mesh was drawn) naming the count, the first few
        files, where they were looked for and how to supply them."""
        parts = []
        if self.absent:
            n = len(self.absent)
            files = _some([os.path.basename(f) if not f.startswith("package://") else f for f in self.absent])
            folders = self.folders or sorted({os.path.dirname(f) for f in self.absent if os.path.isabs(f)})
            looked = f" (looked for in {_some(folders)})" if folders else ""
            how = "put the files where the model names them (beside it, or in a folder listed)"
            if any(f.lower().endswith(".vtp") for f in self.absent):
                how += (
                    "; OpenSim's bone meshes come in the Geometry folder of an OpenSim install or of "
                    "the model's download: copy that folder beside the model"
                )
            if any(f.startswith("package://") for f in self.absent):
                how += "; for package:// URIs set ROS_PACKAGE_PATH or give load_urdf(..., package_dirs=[...])"
            parts.append(f"{n} mesh file{'s' * (n > 1)} not found{looked}: {files}; to draw them, {how}")
        if self.unnamed:
            n = len(self.unnamed)
            parts.append(
                f"{n} mesh{'es' * (n > 1)} with no file (the loader left {'them' if n > 1 else 'it'} out: "
                f"see its warning): {_some(self.unnamed)}"
            )
        if self.unreadable:
            n = len(self.unreadable)
            listed = "; ".join(f"{f!r}: {why}" for f, why in self.unreadable[:_LISTED])
            more = f" and {n - _LISTED} more" if n > _LISTED else ""
            parts.append(f"cannot read {n} mesh file{'s' * (n > 1)} ({listed}{more})")
        if parts:
            msg = f"sj.viz: {where}: drawn as stand-ins: " + "; ".join(parts)
            warnings.warn(msg, stacklevel=stacklevel + 1)


def _some(items: list[str]) -> str:
    shown = ", ".join(repr(x) for x in items[:_LISTED])
    return shown + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def load_mesh(
    path: str, what: str, problems: MeshProblems, searched: tuple[str, ...] = ()
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(vertices, faces)`` of a mesh file; None when it is missing or unreadable (the
    caller draws a stand-in), recorded in ``problems`` (``what`` names the geometry; the
    file was looked for in the folders ``searched``) for one warning."""
    if not path:
        problems.unnamed.append(what)
        return None
    if not os.path.isfile(path):
        problems.absent.append(path)
        problems.folders += [f for f in searched if f not in problems.folders]
        return None
    try:
        v, f = _load(os.path.abspath(path), os.path.getmtime(path))
    except (MeshReadError, ValueError) as e:
        problems.unreadable.append((path, str(e)))
        return None
    if not np.all(np.isfinite(v)):
        problems.unreadable.append((path, "non-finite vertices"))
        return None
    return v, f
