"""Pinocchio's ``aba`` looped in C++: the peer without Python's cost per call.

The benchmarks' Pinocchio column loops ``pin.aba`` from Python, as a Python user does; each
call also pays the binding's conversion of its arguments. This module compiles
``pinocchio_aba_loop.cpp`` (Pinocchio's own headers, from the ``pin`` wheel, instantiated
and inlined in one shared library) and calls its loop through ``ctypes`` once per batch, so
that it can be timed in turn with simjax and the Python loop (``--pinocchio-cpp`` in
``bench_forward.py`` and ``bench_robots.py``).

Needs a C++17 compiler (``c++``, or ``$CXX``), the ``pin`` wheel and Eigen's headers
(``pip install cmeel-eigen``). The library is built once (about a minute) and cached under
``$XDG_CACHE_HOME/simjax/bench`` (default ``~/.cache``), keyed by the source, the flags and
Pinocchio's version.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("pinocchio_aba_loop.cpp")
# A release build; hidden visibility keeps these instantiations apart from the Python module's
# library. (`-march=native` measured no faster here: chain7 2.07 against 1.99 µs per state.)
FLAGS = ["-std=c++17", "-O3", "-DNDEBUG", "-fPIC", "-shared", "-fvisibility=hidden"]
# Pinocchio's CMake interface definitions (a joint variant longer than Boost's default limit).
DEFINES = [
    "-DBOOST_MPL_LIMIT_LIST_SIZE=30",
    "-DBOOST_MPL_LIMIT_VECTOR_SIZE=30",
    "-DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS",
    "-DBOOST_FUSION_INVOKE_MAX_ARITY=12",
]


class Unavailable(RuntimeError):
    """The C++ peer cannot be built here; the message says what is missing."""


def _prefix() -> Path:
    try:
        import pinocchio
    except ImportError as e:
        raise Unavailable("Pinocchio is not installed: pip install pin") from e
    for parent in Path(pinocchio.__file__).resolve().parents:
        if (parent / "include" / "pinocchio").is_dir():
            return parent
    raise Unavailable(f"Pinocchio's headers were not found above {pinocchio.__file__}")


def _toolchain() -> tuple[Path, Path, str]:
    """Pinocchio's install prefix, Eigen's include folder and the compiler, or :class:`Unavailable`."""
    prefix = _prefix()
    eigen = prefix / "include" / "eigen3"
    if not (eigen / "Eigen" / "Core").is_file():
        raise Unavailable(f"Eigen's headers are not in {eigen}: pip install cmeel-eigen")
    want = os.environ.get("CXX")
    cxx = shutil.which(want) if want else shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise Unavailable(f"no C++ compiler ({want or 'c++ or g++'} not found): install g++ or set CXX")
    return prefix, eigen, cxx


def missing() -> str | None:
    """Why the C++ peer cannot be built here (without building it), or None."""
    try:
        _toolchain()
    except Unavailable as e:
        return str(e)
    return None


def build() -> Path:
    """The compiled library's path, building it if this source, these flags and this
    Pinocchio have not been built before; :class:`Unavailable` says why it cannot be."""
    import pinocchio

    prefix, eigen, cxx = _toolchain()
    cmd = [cxx, *FLAGS, *DEFINES, f"-I{prefix / 'include'}", f"-I{eigen}", str(SOURCE)]
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(cmd).encode() + pinocchio.__version__.encode())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "simjax" / "bench"
    lib = cache / f"pinocchio_aba_loop_{key.hexdigest()[:16]}.so"
    if not lib.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        done = subprocess.run([*cmd, "-o", str(tmp)], capture_output=True, text=True)
        if done.returncode != 0:
            raise Unavailable(f"compiling {SOURCE.name} failed:\n{done.stderr[-3000:]}")
        tmp.replace(lib)
    return lib


def compile_flags() -> str:
    """The flags the library is built with (for the benchmarks' machine record)."""
    return " ".join(FLAGS + DEFINES)


def _dump(model, path: Path) -> None:
    """Write ``model``'s joints, placements, inertias and gravity in the loop's text format."""
    lines = [f"{model.njoints - 1} {model.nq} {model.nv}"]
    for j in range(1, model.njoints):
        jm = model.joints[j]
        kind = jm.shortname()
        X = model.jointPlacements[j]
        Y = model.inertias[j]
        Ic = np.asarray(Y.inertia)
        sym = [Ic[0, 0], Ic[0, 1], Ic[1, 1], Ic[0, 2], Ic[1, 2], Ic[2, 2]]
        nums = [*np.asarray(X.rotation).ravel(), *np.asarray(X.translation)]
        nums += [Y.mass, *np.asarray(Y.lever), *sym]
        if kind in ("JointModelRevoluteUnaligned", "JointModelPrismaticUnaligned"):
            nums += list(np.asarray(jm.extract().axis))
        lines.append(f"{kind} {model.parents[j]} " + " ".join(repr(float(x)) for x in nums))
    lines.append(" ".join(repr(float(x)) for x in np.asarray(model.gravity.linear)))
    path.write_text("\n".join(lines) + "\n")


class AbaLoop:
    """``pinocchio::aba`` over a batch in C++: ``loop(Q, V) -> A`` with ``Q`` (B, nq) and ``V``
    (B, nv) in Pinocchio's layout, like ``pin.aba`` in a Python loop; the joint torques are
    ``-damping * v`` (zero without ``damping``)."""

    def __init__(self, model, damping=None):
        lib = ctypes.CDLL(str(build()))
        lib.sj_pin_load.restype = ctypes.c_void_p
        lib.sj_pin_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        lib.sj_pin_aba.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 4
        lib.sj_pin_rk4.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_double]
        lib.sj_pin_rk4.argtypes += [ctypes.c_void_p] * 2
        lib.sj_pin_free.argtypes = [ctypes.c_void_p]
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "model.txt"
            _dump(model, path)
            err = ctypes.create_string_buffer(1000)
            handle = lib.sj_pin_load(str(path).encode(), err, len(err))
        if not handle:
            raise Unavailable(f"the C++ loop could not build the model: {err.value.decode()}")
        self._lib, self._handle = lib, handle
        self.nq, self.nv = model.nq, model.nv
        self._damping = None if damping is None else np.ascontiguousarray(damping, dtype=np.float64)
        if self._damping is not None and self._damping.shape != (self.nv,):
            raise ValueError(f"AbaLoop: damping must have shape ({self.nv},), got {self._damping.shape}")

    def __call__(self, Q: np.ndarray, V: np.ndarray) -> np.ndarray:
        Q, V = self._states(Q, V, "AbaLoop", copy=False)
        A = np.empty_like(V)
        d = None if self._damping is None else self._damping.ctypes.data
        self._lib.sj_pin_aba(self._handle, Q.shape[0], Q.ctypes.data, V.ctypes.data, d, A.ctypes.data)
        return A

    def rk4(self, Q: np.ndarray, V: np.ndarray, steps: int, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """``steps`` RK4 steps of ``dt`` from each state (no joint torques; each stage one
        ``aba``, positions by ``pinocchio::integrate``), state after state: the final
        ``(Q, V)``."""
        Q, V = self._states(Q, V, "AbaLoop.rk4", copy=True)  # the loop writes the final states
        self._lib.sj_pin_rk4(self._handle, Q.shape[0], int(steps), float(dt), Q.ctypes.data, V.ctypes.data)
        return Q, V

    def _states(self, Q: np.ndarray, V: np.ndarray, who: str, copy: bool) -> tuple[np.ndarray, np.ndarray]:
        """``Q``, ``V`` as C-contiguous float64 (copies if ``copy``), their shapes checked."""
        as_c = (lambda x: np.array(x, dtype=np.float64, order="C")) if copy else np.ascontiguousarray
        Q, V = as_c(Q), as_c(V)
        if Q.ndim != 2 or Q.shape[1] != self.nq or V.shape != (Q.shape[0], self.nv):
            want = f"Q must be (B, {self.nq}) and V (B, {self.nv})"
            raise ValueError(f"{who}: {want}; got {Q.shape}, {V.shape}")
        return Q, V

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.sj_pin_free(self._handle)
            self._handle = None


def checked_loop(model, data, Q: np.ndarray, V: np.ndarray, damping=None, n: int = 8, rtol: float = 1e-11):
    """An :class:`AbaLoop` whose accelerations at the first ``n`` states equal ``pin.aba``'s
    from Python (``tau = -damping * v``) to ``rtol`` (relative to the largest); an error
    otherwise, so a benchmark never times a loop that computes something else."""
    import pinocchio as pin

    loop = AbaLoop(model, damping=damping)
    n = min(n, len(Q))
    d = np.zeros(model.nv) if damping is None else np.asarray(damping)
    ref = np.stack([np.asarray(pin.aba(model, data, Q[i], V[i], -d * V[i])) for i in range(n)])
    err = np.abs(loop(Q[:n], V[:n]) - ref).max() / max(np.abs(ref).max(), 1e-300)
    if err > rtol:
        raise RuntimeError(f"Pinocchio's C++ loop differs from pin.aba by {err:.1e} (relative)")
    return loop
