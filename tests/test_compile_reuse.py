"""Compiled code is shared between identical models, in one process and across processes.

``realize`` is compiled once per (Model, State structure, stage). A Model compares by
structure (parents, mobilizer kinds, force and constraint kinds, parameter names and
shapes; user objects by identity), never by the numbers that live in the State, and the
State's structure holds no object ids: a second System built by the same code reuses the
first one's compiled function, and JAX's persistent compilation cache hits in a new process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch  # skips the test when the model cannot be fetched (offline)

import simjax as sj
import simjax.forward.realize as realize_module
from simjax._spatial import rot_axis
from simjax.model.mobilizers import FunctionBased

jax.config.update("jax_enable_x64", True)

MB = sj.MobilizedBody
HERE = Path(__file__).parent


class Drag:
    """A ``Force.Custom`` implementation that counts how often it is traced."""

    def __init__(self, c: float):
        self.c = c
        self.calls = 0

    def calc_force(self, ctx):
        self.calls += 1  # runs only while tracing (the compiled function has no Python)
        return None, -self.c * ctx.u


DRAG1, DRAG2 = Drag(0.1), Drag(0.2)


def build(n: int = 3, constraint: str = "Ball", mass: float = 1.0, custom=(), extra=True):
    """An n-link pendulum with gravity, a spring, a constraint on its tip and, optionally,
    ``Force.Custom`` elements, a ``Force.Gravity`` and a ``Force.DiscreteForces``."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body.Rigid(sj.MassProperties(mass, [0, -0.5, 0], sj.Inertia(0.5 * mass)))
    b, links = matter.Ground(), []
    for i in range(n):
        b = MB.Pin(b, sj.Transform(p=[0, -1.0, 0]) if i else sj.Transform(), body, sj.Transform())
        links.append(b)
    sj.Force.TwoPointLinearSpring(forces, matter.Ground(), [1, 0, 0], links[-1], [0, 0, 0], 10.0, 0.5)
    for impl in custom:
        sj.Force.Custom(forces, impl)
    if extra:
        sj.Force.Gravity(forces, matter, [0, -1, 0], 1.0)
        sj.Force.DiscreteForces(forces, matter)
    if constraint == "Ball":
        sj.Constraint.Ball(matter.Ground(), [0, -n, 0], links[-1], [0, 0, 0])
    elif constraint == "Rod":
        sj.Constraint.Rod(matter.Ground(), [0, -n, 0], links[-1], [0, 0, 0], 0.1)
    state = system.realize_topology()
    return system, matter, state.with_q(jnp.linspace(0.3, 0.1, state.nq))


def _count_traces(monkeypatch) -> dict[str, int]:
    """Counts the traces of the compiled ``realize`` (its body runs only when tracing)."""
    count = {"n": 0}
    inner = realize_module.realize_eager

    def counted(*args, **kw):
        count["n"] += 1
        return inner(*args, **kw)

    monkeypatch.setattr(realize_module, "realize_eager", counted)
    return count


@pytest.fixture
def traces(monkeypatch):
    """Trace counter, starting from empty compilation caches (so the first build traces)."""
    jax.clear_caches()
    return _count_traces(monkeypatch)


def _acc(system, state):
    t = time.perf_counter()
    out = system.realize(state, sj.Stage.ACCELERATION)
    out.udot.block_until_ready()
    return out, time.perf_counter() - t


def test_a_second_identical_model_reuses_the_compiled_realize(traces):
    sys1, _, s1 = build(custom=(DRAG1,))
    out1, t1 = _acc(sys1, s1)
    n1 = traces["n"]
    assert n1 >= 1
    sys2, _, s2 = build(custom=(DRAG1,))
    assert sys2._model == sys1._model and hash(sys2._model) == hash(sys1._model)
    assert sys2._model is not sys1._model
    out2, t2 = _acc(sys2, s2)
    assert traces["n"] == n1, "the second, identical model traced realize again"
    for a, b in [(out1.udot, out2.udot), (out1.multipliers, out2.multipliers), (out1.qerr, out2.qerr)]:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert t2 < t1
    # masses are State data: another mass shares the compiled function too
    sys3, _, s3 = build(mass=2.5, custom=(DRAG1,))
    out3, _ = _acc(sys3, s3)
    assert traces["n"] == n1
    assert not np.allclose(out3.multipliers, out1.multipliers)  # the new masses are used
    # the result belongs to its own System: States are still checked against their owner
    assert out2.system_uid == s2.system_uid != s1.system_uid
    sys2.realize(out2.with_u(jnp.ones(3)), sj.Stage.VELOCITY)
    with pytest.raises(sj.TopologyError, match="different System"):
        sys2.realize(out1.with_u(jnp.ones(3)), sj.Stage.VELOCITY)


def test_custom_forces_trace_once_and_parameter_keys_are_stable(traces):
    DRAG1.calls = DRAG2.calls = 0
    sys1, _, s1 = build(custom=(DRAG1, DRAG2), constraint="none")
    out1, _ = _acc(sys1, s1)
    assert DRAG1.calls == DRAG2.calls == 1
    sys2, _, s2 = build(custom=(DRAG1, DRAG2), constraint="none")
    out2, _ = _acc(sys2, s2)
    assert DRAG1.calls == DRAG2.calls == 1, "a Force.Custom of an identical model was traced again"
    np.testing.assert_array_equal(np.asarray(out1.udot), np.asarray(out2.udot))
    # Instance parameters and discrete variables are named by kind and order, never id()
    inst, disc = s1.instance["forces"], s1.discrete["forces"]
    assert {"Custom0.enabled", "Custom1.enabled", "Gravity0.magnitude", "DiscreteForces0.enabled"} <= set(
        inst
    )
    assert set(disc) == {"DiscreteForces0.body_forces", "DiscreteForces0.mobility_forces"}
    assert jax.tree.structure((s1.instance, s1.discrete)) == jax.tree.structure((s2.instance, s2.discrete))
    # each element still reads its own parameters and variables
    forces2 = [sub for sub in sys2._subsystems if isinstance(sub, sj.GeneralForceSubsystem)]
    elements = {type(e).__name__ + str(e._ordinal): e for sub in forces2 for e in sub._elements}
    custom2 = elements["Custom1"]
    assert custom2.implementation is DRAG2
    assert custom2.is_disabled(custom2.disable(s2)) and not elements["Custom0"].is_disabled(
        custom2.disable(s2)
    )
    dforces = elements["DiscreteForces0"]
    s2f = dforces.set_all_mobility_forces(s2, jnp.array([1.0, 0.0, 0.0]))
    assert float(dforces.get_all_mobility_forces(s2f)[0]) == 1.0
    # a different implementation object is a different model (it may compute anything)
    sys3, _, s3 = build(custom=(DRAG1, Drag(0.2)), constraint="none")
    assert sys3._model != sys1._model
    n = traces["n"]
    _acc(sys3, s3)
    assert traces["n"] == n + 1


def test_different_models_do_not_share(monkeypatch):
    count = _count_traces(monkeypatch)
    sys1, _, s1 = build()
    _acc(sys1, s1)
    for other in [dict(constraint="Rod"), dict(n=4), dict(constraint="none"), dict(extra=False)]:
        assert build(**other)[0]._model != sys1._model, other
    for other in [dict(constraint="Rod"), dict(n=4)]:  # another constraint kind, another topology
        sys2, _, s2 = build(**other)
        n = count["n"]
        _acc(sys2, s2)
        assert count["n"] == n + 1, other


def test_functions_compare_by_definition():
    F = sj.Function
    assert F.Linear([1.0, 2.0]) == F.Linear([1.0, 2.0])
    assert hash(F.Spline([0, 1, 2], [0, 1, 0])) == hash(F.Spline([0, 1, 2], [0, 1, 0]))
    assert F.Linear([1.0, 2.0]) != F.Linear([1.0, 3.0])
    assert F.Constant(1.0) != F.Linear([1.0])
    # FunctionBased mobilizers (OpenSim's CustomJoint) compare by their functions' kinds and
    # sizes: the numbers are Instance data, so joints differing only in them are one kind
    spl = lambda n: F.Spline(np.arange(n), np.arange(n) ** 2)
    fb = lambda c, n=3: FunctionBased(
        n=1,
        functions=(
            F.Linear([c, 0.0]),
            F.Constant(0.0),
            F.Constant(0.0),
            spl(n),
            F.Constant(0.0),
            F.Constant(0.0),
        ),
        coordinate_indices=((0,), (), (), (0,), (), ()),
    )
    assert fb(1.0) == fb(2.0) and hash(fb(1.0)) == hash(fb(2.0))
    assert fb(1.0) != fb(1.0, n=4)  # another spline size: another kind
    assert not np.array_equal(fb(1.0).default_params(), fb(2.0).default_params())
    # ... and evaluate with their own numbers
    q = jnp.array([0.7])
    for c in (1.0, 2.0):
        R, p = fb(c).X_FM(q, jnp.asarray(fb(c).default_params()))
        np.testing.assert_allclose(np.asarray(R), np.asarray(rot_axis(c * 0.7, [1.0, 0.0, 0.0])), atol=1e-15)
        np.testing.assert_allclose(np.asarray(p), [float(spl(3)(q)), 0, 0], atol=1e-15)


def test_one_osim_file_loaded_twice_shares_the_compiled_realize(traces):
    path = _arm26()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m1, m2 = sj.io.load_osim(path), sj.io.load_osim(path)
    out1, _ = _acc(m1.system, m1.default_state)
    n = traces["n"]
    assert m1.system._model == m2.system._model
    out2, _ = _acc(m2.system, m2.default_state)
    assert traces["n"] == n
    np.testing.assert_array_equal(np.asarray(out1.udot), np.asarray(out2.udot))


class MassReport(sj.Subsystem):
    """A user subsystem whose hook asks the System about ``ctx.state`` while tracing."""

    def __init__(self, system, matter):
        self.matter = matter
        super().__init__(system, "report")

    def realize_position(self, ctx):
        return {"com": self.matter.calc_system_mass_center_location_in_ground(ctx.state)}


def test_hooks_can_pass_the_traced_state_to_their_system(traces):
    system, matter, _ = build(constraint="none")
    MassReport(system, matter)
    s = system.realize_topology()
    out = system.realize(s, sj.Stage.POSITION)
    stored = out.cache.subsystems[int(sj.Stage.POSITION)]["report"]["com"]
    np.testing.assert_allclose(stored, matter.calc_system_mass_center_location_in_ground(out))
    # a user subsystem with hooks makes its Model equal only to itself
    system2, matter2, _ = build(constraint="none")
    MassReport(system2, matter2)
    system2.realize_topology()
    assert system2._model != system._model


# ------------------------------------------------------------------ persistent cache

_CHILD = """
import json, sys, warnings
import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
import jax.monitoring
import simjax as sj

counts = {"hits": 0, "misses": 0, "on": False}

def listen(event, **kw):
    if counts["on"] and event == "/jax/compilation_cache/cache_hits":
        counts["hits"] += 1
    if counts["on"] and event == "/jax/compilation_cache/cache_misses":
        counts["misses"] += 1

jax.monitoring.register_event_listener(listen)
if sys.argv[2] == "code":
    sys.path.insert(0, sys.argv[3])
    import test_compile_reuse as t
    system, _, state = t.build(custom=(t.DRAG1, t.DRAG2))
else:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sj.io.load_osim(sys.argv[2])
    system, state = m.system, m.default_state
counts["on"] = True
out = system.realize(state, sj.Stage.ACCELERATION)
out.udot.block_until_ready()
counts["on"] = False
print(json.dumps({"hits": counts["hits"], "misses": counts["misses"],
                  "udot": [float(x) for x in out.udot]}))
"""


def _child(cache: Path, model: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(cache), model, str(HERE)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _arm26() -> str:
    """arm26 without its two muscles over WrapEllipsoids (TRIlong, BIClong): compiling their
    wraps would multiply this file's time by ~8 (they are tested in test_wrapping.py)."""
    import re
    import tempfile
    from pathlib import Path

    member = "osim/models/arm26.osim"
    text = Path(fetch("osim-rl", "3.0.11", [member])[member]).read_text()
    for name in ("TRIlong", "BIClong"):
        text = re.sub(rf'<(\w+Muscle) name="{name}">.*?</\1>', "", text, flags=re.S)
    out = Path(tempfile.gettempdir()) / "simjax_arm26_without_ellipsoid_muscles.osim"
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    return str(out)


@pytest.mark.parametrize("model", ["code", "arm26"])
def test_persistent_compilation_cache_hits_in_a_new_process(tmp_path, model):
    path = _arm26() if model == "arm26" else "code"
    cache = tmp_path / "jax-cache"
    cache.mkdir()
    first = _child(cache, path)
    entries = set(p.name for p in cache.iterdir())
    assert first["misses"] >= 1 and first["hits"] == 0, first
    assert entries
    second = _child(cache, path)
    assert second["misses"] == 0 and second["hits"] >= 1, (
        "the second process compiled realize again: the traced program differs between processes",
        second,
    )
    assert set(p.name for p in cache.iterdir()) == entries, "the second process wrote new cache entries"
    assert second["udot"] == first["udot"]


def test_eager_realize_keeps_the_states_own_leaves_and_state_methods_are_plain():
    """The Python side of one realize at B = 1 (a user's control or reporting loop): the
    compiled program returns only the cache, so the realized State holds the input's own
    q, u and parameters (XLA copied every unchanged leaf before, ~0.1 ms a call here), and
    State methods are plain bound methods (equinox's bound-method Modules flattened the
    whole State on every ``state.with_q`` or ``state.udot``: 0.3 ms and 76 µs)."""
    system, _, state = build(n=2, constraint="none", extra=False)
    out = system.realize(state, sj.Stage.ACCELERATION)
    assert out.q is state.q and out.u is state.u and out.t is state.t
    assert out.instance["matter"]["mass"] is state.instance["matter"]["mass"]
    assert out.stage == sj.Stage.ACCELERATION and out.udot.shape == (2,)
    assert type(state.with_q) is types.MethodType
    # the fast paths keep the State's semantics: stages fall, caches above them drop
    lowered = out.with_u(out.u + 1.0)
    assert lowered.stage == sj.Stage.POSITION and lowered.cache.velocity is None
    assert lowered.cache.position is out.cache.position
    with pytest.raises(sj.StageError, match="Stage.ACCELERATION"):
        _ = lowered.udot
    np.testing.assert_allclose(lowered.u, np.asarray(out.u) + 1.0)
