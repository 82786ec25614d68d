"""Which files a model may name: those inside its folder and the folders the user names.

A model file names other files: meshes (URDF ``<mesh filename>``, MJCF ``<mesh file>``,
OpenSim ``<mesh_file>``) and, in MJCF, ``<include>``d models. A loader reads or records
such a file only when its real path (symlinks followed) lies inside one of the model's
folders: the folder of the model file (the working directory for a model given as text),
the package folders the user names (URDF ``package_dirs=``, ``ROS_PACKAGE_PATH``) and the
folders the loader itself searches by its format's convention (the model's own ROS
package, OpenSim's sibling ``Geometry`` folder). A model downloaded from elsewhere thus
cannot make the loader read ``../../secret``, an absolute path or a ``file://`` URL.
A refused file that only draws the model is left out with one warning (drawn as a
stand-in); one that changes the model (an MJCF ``<include>``, a mesh a body's inertia
comes from) is a :class:`ModelFileError`. ``allow_outside=True`` on a loader lifts this.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

from ._loaded import ModelFileError


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def is_inside(path: str, folder: str) -> bool:
    """Whether ``path`` (symlinks followed) lies in ``folder`` (symlinks followed)."""
    p, f = _real(path), _real(folder)
    try:
        return os.path.commonpath([p, f]) == f
    except ValueError:  # different drives
        return False


class ModelFiles:
    """The folders the files a model names must lie in, and the refused visual meshes.

    Args:
        model: The model file's path, or the name a model given as text goes by.
        loader: The loader's name, for messages (``"load_urdf"``).
        folders: The folders files may lie in, the model's own folder first.
        allow_outside: Accept every file (the loader's ``allow_outside=True``).
        fix: How the user can name another folder with this loader (e.g. "name its package
            folder with package_dirs=[...]"), or "" when there is none.
    """

    def __init__(
        self, model: str, loader: str, folders: Sequence[str], *, allow_outside: bool = False, fix: str = ""
    ):
        self.model, self.loader = model, loader
        self.folders = list(dict.fromkeys(_real(f) for f in folders if f))
        self.allow_outside = allow_outside
        self.fix = fix
        self.refused: list[tuple[str, str]] = []

    def add_folder(self, folder: str) -> None:
        real = _real(folder)
        if real not in self.folders:
            self.folders.append(real)

    def allows(self, path: str) -> bool:
        return self.allow_outside or any(is_inside(path, f) for f in self.folders)

    def _fix(self) -> str:
        named = f"{self.fix}, " if self.fix else ""
        return (
            f"move the file into the model's folder, {named}or, if you trust the model, load it with "
            f"{self.loader}(..., allow_outside=True)"
        )

    def _where(self, ref: str, path: str) -> str:
        real = _real(path)
        shown = repr(ref) if ref == real else f"{ref!r} ({real})"
        folders = ", ".join(repr(f) for f in self.folders)
        return f"{shown} lies outside the model's folder{'s' if len(self.folders) > 1 else ''} {folders}"

    def check(self, ref: str, path: str, what: str, where: str) -> str:
        """``path`` (the file ``ref`` names, found) if allowed, else a ModelFileError that
        starts with ``where`` (the element's file and line) and names the fix."""
        if self.allows(path):
            return path
        raise ModelFileError(
            f"{where}: {what} {self._where(ref, path)}; simjax does not read files outside it "
            f"(a model could name any file): {self._fix()}"
        )

    def visual(self, ref: str, path: str) -> str:
        """``path`` if allowed, else ``""`` (drawn as a stand-in), remembered for :meth:`warn`."""
        if self.allows(path):
            return path
        if (ref, path) not in self.refused:
            self.refused.append((ref, path))
        return ""

    def warn(self, stacklevel: int = 3) -> None:
        """One warning listing the mesh files :meth:`visual` refused (none: no warning)."""
        if not self.refused:
            return
        ref, path = self.refused[0]
        n = len(self.refused)
        more = f" and {n - 1} more" if n > 1 else ""
        warnings.warn(
            f"{self.loader}({os.path.basename(self.model)}): {n} mesh file{'s' if n > 1 else ''} not "
            f"read, drawn as stand-ins: {self._where(ref, path)}{more}; {self._fix()}",
            stacklevel=stacklevel,
        )


def model_folders(model_dir: str) -> list[str]:
    """The folders a model in ``model_dir`` may take files from: ``model_dir`` and the
    packages it is part of, whose other folders models name (dm_control's ``dog_v2`` its
    ``../../../../suite/dog_assets``, a ROS package's ``urdf/`` its ``../meshes``): the
    nearest ROS package above it (a folder with a ``package.xml``) and the Python package
    it lies in (the nearest folder above with an ``__init__.py``, and up while the folder
    above has one too: the installed package's top folder, never ``site-packages``)."""
    out = [model_dir]
    up = _ancestors(model_dir)
    ros = next((d for d in up if os.path.isfile(os.path.join(d, "package.xml"))), None)
    if ros is not None:
        out.append(ros)
    py = next((d for d in up if os.path.isfile(os.path.join(d, "__init__.py"))), None)
    while py is not None and os.path.isfile(os.path.join(os.path.dirname(py), "__init__.py")):
        py = None if os.path.dirname(py) == py else os.path.dirname(py)
    if py is not None:
        out.append(py)
    return out


def _ancestors(folder: str) -> list[str]:
    """``folder`` (absolute) and every folder above it, nearest first."""
    d = os.path.abspath(folder)
    out = [d]
    while os.path.dirname(d) != d:
        d = os.path.dirname(d)
        out.append(d)
    return out


def path_list(env: str) -> list[str]:
    """The folders of an ``os.pathsep``-separated environment variable (e.g. ROS_PACKAGE_PATH)."""
    return [p for p in os.environ.get(env, "").split(os.pathsep) if p]
