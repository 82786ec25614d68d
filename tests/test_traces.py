"""Traced IK solvers kept on disk (``simjax.studies._traces``): a second process solves
without tracing, gets the very same answer, and nothing user-defined is ever reused.

Also the compilation cache's own safety: simjax gives JAX's cache a size limit, which makes
JAX lock its files, so parallel processes never read a half-written entry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import simjax as sj
from simjax.model.model import Identity
from simjax.studies import _traces
from simjax.studies.assembler import _size_plan

jax.config.update("jax_enable_x64", True)

HERE = Path(__file__).parent
MB = sj.MobilizedBody


def build(body_of_second: str = "fore", extra=None):
    """A planar two-link arm with two markers, an OrientationSensor, a QValue goal and a
    closed loop (a Ball pinning the tip to a slider), and 6 frames of marker data."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    mp = sj.MassProperties(1.0, [0.2, 0, 0], sj.Inertia(0.05, 0.1, 0.1))
    b1 = MB.Pin(matter.Ground(), sj.Transform(), mp, sj.Transform(), name="upper")
    b2 = MB.Pin(b1, sj.Transform(p=[0.4, 0, 0]), mp, sj.Transform(), name="fore")
    sl = MB.Slider(matter.Ground(), sj.Transform(p=[0, -0.2, 0]), mp, sj.Transform(), name="slider")
    sj.Constraint.Ball(b2, [0.3, 0, 0], sl, [0, 0, 0])
    asm = sj.Assembler(system)
    mk = sj.Markers()
    mk.add_marker("tip", b2, [0.3, 0, 0])
    mk.add_marker("mid", body_of_second, [0.1, 0.05, 0])
    asm.adopt_assembly_goal(mk)
    imu = sj.OrientationSensors()
    imu.add_osensor("imu", b1, np.eye(3))
    imu.move_all_observations(np.eye(3)[None])
    asm.adopt_assembly_goal(imu, 0.1)
    asm.adopt_assembly_goal(sj.QValue(b1, 0, 0.3), 0.01)
    if extra is not None:
        asm.adopt_assembly_goal(extra)
    state = system.realize_topology()
    t = np.linspace(0.0, 1.0, 6)
    tip = np.stack([0.5 + 0.05 * t, -0.2 + 0 * t, 0 * t], axis=1)
    mid = np.stack([0.25 + 0.0 * t, 0.25 + 0.02 * t, 0 * t], axis=1)
    frames = {mk: np.stack([tip, mid], axis=1)}
    return system, asm, state, frames


CHILD = r"""
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import simjax as sj
sj.configure()
import simjax.forward.realize as rm
calls = {"position": 0}
inner = rm.realize_eager
def counted(model, state, stage):
    if stage >= sj.Stage.POSITION:
        calls["position"] += 1
    return inner(model, state, stage)
rm.realize_eager = counted
sys.path.insert(0, sys.argv[1])
import test_traces as t
system, asm, state, frames = t.build()
states, infos = asm.track(state, frames)
out, info = asm.solve(state)
print(json.dumps(dict(q=states.q.tolist(), status=infos.result._value.tolist(), goal=infos.goal.tolist(),
                      q1=out.q.tolist(), traced=calls["position"])))
"""


def _child(cache: Path, **env: str) -> dict:
    e = dict(os.environ, SIMJAX_CACHE_DIR=str(cache), SIMJAX_PROGRESS="0", **env)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(HERE)], capture_output=True, text=True, timeout=900, env=e
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_process_solves_without_tracing_and_gets_the_same_answer(tmp_path):
    cache = tmp_path / "cache"
    first = _child(cache)
    kept = sorted(p.name for p in (cache / "simjax-traces").iterdir())
    # track's solver, track's States (realized in a program of their own), solve, and the
    # moves (whole turns, Euler branches) allowed in the model, which both take as data
    assert len(kept) == 4 and all(n.endswith(".jaxexport") for n in kept), kept
    assert first["traced"] > 0
    assert set(first["status"]) <= {0, 5}
    second = _child(cache)
    assert second["traced"] == 0, "the second process traced the kinematics again"
    assert second["q"] == first["q"] and second["q1"] == first["q1"]
    assert second["goal"] == first["goal"] and second["status"] == first["status"]
    assert sorted(p.name for p in (cache / "simjax-traces").iterdir()) == kept
    # opted out: traced again, nothing kept
    third = _child(tmp_path / "other", SIMJAX_TRACE_CACHE="0")
    assert third["traced"] > 0 and not (tmp_path / "other" / "simjax-traces").exists()
    assert third["q"] == first["q"]


def test_keys_follow_the_structure_and_refuse_user_code():
    _, a1, _, _ = build()
    _, a2, _, _ = build()
    k1, k2 = (_traces.fingerprint(a._trace_key("batched", 2, 3)) for a in (a1, a2))
    assert k1 is not None and k1 == k2  # a second, identical build: same key
    _, a3, _, _ = build(body_of_second="upper")  # a marker on another body: another program
    assert _traces.fingerprint(a3._trace_key("batched", 2, 3)) != k1
    assert _traces.fingerprint(a1._trace_key("batched", 2, 4)) != k1  # another segment length
    # user code is never fingerprinted: a custom condition, a lambda, an object by identity
    _, a4, _, _ = build(extra=sj.AssemblyCondition.Custom(lambda st: st.q[:1], name="user"))
    assert a4._trace_key("batched", 2, 3) is None
    assert _traces.fingerprint((1, lambda x: x)) is None
    assert _traces.fingerprint(Identity(object())) is None

    class Mine(sj.Markers):
        pass

    assert Mine()._trace_key() is None
    # numbers, arrays, dicts and simjax functions have stable keys
    assert _traces.fingerprint({"a": np.arange(3), "b": (1.0, "x")}) == _traces.fingerprint(
        {"b": (1.0, "x"), "a": np.arange(3)}
    )
    assert _traces.fingerprint(np.arange(3)) != _traces.fingerprint(np.arange(3.0))


def test_known_sizes_equal_the_traced_ones():
    _, asm, _, _ = build()
    plan = asm._require_plan()
    known = (plan.nr, plan.ne, plan.has_scalar, plan.error_sizes)
    conditions = [c for _, c in (*plan.goals, *plan.errors)]
    # the System's constraints (the Ball), markers, a sensor and a QValue all know theirs
    kinds = {type(c).__name__ for c in conditions}
    assert kinds == {"SystemConstraints", "Markers", "OrientationSensors", "QValue"}
    assert all(c._sizes(plan.model) is not None for c in conditions)
    # the same sizes from an abstract evaluation (as for a user's condition)
    for c in conditions:
        c._sizes = lambda model: None
    _size_plan(plan, asm.get_internal_state(), asm.get_parameters())
    assert (plan.nr, plan.ne, plan.has_scalar, plan.error_sizes) == known
    assert plan.ne == 3 and plan.nr == 6 + 3 + 1


def test_damaged_files_traced_calls_and_bad_keys_fall_back(tmp_path, monkeypatch):
    monkeypatch.setattr(_traces, "directory", lambda: tmp_path)
    monkeypatch.setattr(_traces, "_LOADED", {})
    _, asm, state, frames = build()
    out, info = asm.solve(state)
    files = list(tmp_path.glob("*.jaxexport"))
    assert len(files) == 2  # the solver and the analysis of the moves it takes as data
    for f in files:
        f.write_bytes(b"not a program")  # damaged: traced again and rewritten
    _traces._LOADED.clear()
    _, asm2, state2, _ = build()  # (asm keeps its model's analysis: a new Assembler runs both)
    out2, info2 = asm2.solve(state2)
    np.testing.assert_array_equal(np.asarray(out2.q), np.asarray(out.q))
    assert all(f.read_bytes() != b"not a program" for f in files)
    # under jit, vmap and grad the arguments are traced: nothing is exported for them
    before = set(tmp_path.iterdir())
    q_jit = jax.jit(lambda s: asm.solve(s)[0].q)(state)
    np.testing.assert_allclose(np.asarray(q_jit), np.asarray(out.q), atol=1e-12)
    P = asm.get_parameters()
    g = jax.grad(lambda w: asm.solve(state, dict(P, weights=P["weights"] * w))[1].goal)(jnp.asarray(1.0))
    assert np.isfinite(float(g))
    assert set(tmp_path.iterdir()) == before
    # the returned States belong to the caller's System
    assert out.system_uid == state.system_uid


def test_compile_ahead_prepares_what_call_runs(tmp_path, monkeypatch):
    """A program prepared with placeholders for arrays not computed yet is compiled in the
    background and run by the next ``call`` without tracing again; a call it refuses (other
    argument types) still gets the right answer; traced arguments prepare nothing."""
    monkeypatch.setattr(_traces, "directory", lambda: tmp_path)
    monkeypatch.setattr(_traces, "_LOADED", {})
    monkeypatch.setattr(_traces, "_PENDING", {})
    _, _, state, _ = build()
    traced = []

    def f(s, x):
        traced.append(1)
        return s.with_q(s.q + x.sum()), 2.0 * x

    fn, key = jax.jit(f), _traces.fingerprint(("test", "f"))
    spec = jax.ShapeDtypeStruct((4,), jnp.float64)
    _traces.compile_ahead(fn, key, (state, spec))
    assert len(traced) == 1 and len(_traces._PENDING) == 1
    _traces.compile_ahead(fn, key, (state, spec))  # already under way: nothing new
    assert len(traced) == 1 and len(_traces._PENDING) == 1
    x = jnp.arange(4.0)
    out, y = _traces.call(fn, key, (state, x), state)
    assert len(traced) == 1 and not _traces._PENDING  # the prepared program ran
    np.testing.assert_array_equal(np.asarray(out.q), np.asarray(state.q) + 6.0)
    np.testing.assert_array_equal(np.asarray(y), 2.0 * np.arange(4.0))
    assert out.system_uid == state.system_uid
    assert len(list(tmp_path.glob("*.jaxexport"))) == 1  # kept for the next process
    # an argument the compiled program refuses: the result is still right
    entry = next(iter(_traces._LOADED.values()))
    _traces._LOADED[next(iter(_traces._LOADED))] = (lambda *a: (_ for _ in ()).throw(TypeError()), entry[1])
    out2, _ = _traces.call(fn, key, (state, x), state)
    np.testing.assert_array_equal(np.asarray(out2.q), np.asarray(out.q))
    # traced arguments: nothing is prepared
    jax.jit(lambda xx: _traces.compile_ahead(fn, key, (state, xx)))(x)
    assert not _traces._PENDING


def test_the_compilation_cache_is_locked_and_limited(tmp_path):
    cache = tmp_path / "c"
    cache.mkdir()
    (cache / "jit_f-0123-cache").write_bytes(b"x")  # an entry written without a size limit
    code = (
        "import jax, simjax; simjax.configure(); print(jax.config.values['jax_compilation_cache_max_size'], "
        "simjax._config.compilation_cache_dir())"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, SIMJAX_CACHE_DIR=str(cache)),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    size, where = r.stdout.split()
    assert int(size) == sj._config.CACHE_MAX_BYTES and where == str(cache)
    assert (cache / "jit_f-0123-atime").exists()  # JAX's eviction reads one for every entry
