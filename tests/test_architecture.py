"""The package's layers: each module imports only from its own layer or below, never in a
circle, never inside a function and never under ``TYPE_CHECKING``.

Layers, lowest first (the documentation's "Architecture and layout" page, docs/architecture.md)::

    _spatial, _functions,            pure math (OpenSim's functions included), the Stage enum,
    _osim_functions, _stage,         the RESULTS enum,
    _results, _config, _sharding,    process settings (XLA flags, compilation cache), meshes,
    _lazy                            modules imported on first use
    model/        State, Topology, mobilizer kinds, Model (frozen records, no handle), Context
    tree/         traversal of the tree by levels
    dynamics/     kinematics, mass matrix, bias forces, applied forces (forces/: one
                  kernel per force kind, one file per family)
    constraints/  constraint kernels (each kind's errors, G, b, multipliers)
    forward/      the stage driver and projection
    system/       MultibodySystem, subsystems, handles users construct
    studies/      simulate, Assembler, assembly conditions
    io/           model and motion files
    viz/          figures
    simjax        the public names
"""

import ast
import dataclasses
import pathlib

import numpy as np
import pytest

import simjax as sj

ROOT = pathlib.Path(sj.__file__).parent
LAYERS = [
    {
        "simjax._config",
        "simjax._spatial",
        "simjax._functions",
        "simjax._osim_functions",
        "simjax._stage",
        "simjax._results",
        "simjax._sharding",
        "simjax._lazy",
        "simjax._batching",
    },
    {"simjax.model"},
    {"simjax.tree"},
    {"simjax.dynamics"},
    {"simjax.constraints"},
    {"simjax.forward"},
    {"simjax.system"},
    {"simjax.studies"},
    {"simjax.io"},
    {"simjax.viz"},
    {"simjax"},
]


def _module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(mod: str) -> int:
    best = None
    for i, names in enumerate(LAYERS):
        for n in names:
            if (mod == n or mod.startswith(n + ".")) and (best is None or len(n) > best[1]):
                best = (i, len(n))
    assert best is not None, f"{mod} belongs to no layer; add it to LAYERS and docs/architecture.md"
    return best[0]


def _imports(path: pathlib.Path, root: pathlib.Path = ROOT):
    """(target module, line, where) for every simjax import of a file."""
    mod = _module_name(path, root)
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text())
    out = []

    def visit(node, where):
        for child in ast.iter_child_nodes(node):
            w = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                w = "function"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                w = "TYPE_CHECKING"
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == "simjax":  # a name or a submodule of target
                    for a in child.names:
                        out.append((f"{target}.{a.name}", child.lineno, w))
            elif isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.split(".")[0] == "simjax":
                        out.append((a.name, child.lineno, w))
            visit(child, w)

    visit(tree, "top")
    return mod, out


def _all(root: pathlib.Path = ROOT):
    return [_imports(p, root) for p in sorted(root.rglob("*.py"))]


def _resolve(target: str, modules: set[str]) -> str:
    """``simjax.system.forces`` stays; ``simjax.system.Force`` (a name) becomes ``simjax.system``."""
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def _nested(root=ROOT):
    return [f"{m}:{line} ({w})" for m, imps in _all(root) for _t, line, w in imps if w != "top"]


def _upward(root=ROOT):
    bad = []
    for mod, imps in _all(root):
        for target, line, _ in imps:
            if _layer(target) > _layer(mod):
                bad.append(f"{mod}:{line} imports {target} (a higher layer)")
    return bad


def test_every_import_is_at_top_level():
    bad = _nested()
    assert not bad, "simjax imports inside functions or under TYPE_CHECKING: " + ", ".join(bad)


def test_layers_import_only_downwards():
    bad = _upward()
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    _check_acyclic()


def _check_acyclic(root=ROOT):
    graph = {}
    mods = {m for m, _ in _all(root)}
    for mod, imps in _all(root):
        graph[mod] = {_resolve(t, mods) for t, _, _ in imps} - {mod}
    # A package's __init__ that re-exports its own submodules is not a cycle with them.
    for mod in list(graph):
        graph[mod] = {t for t in graph[mod] if not (t.startswith(mod + ".") and mod in mods)}
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t) :] + [t]))
            if t not in state:
                dfs(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)


def _every_force_kind():
    """A small System with one element (or two) of every ``sj.Force`` kind."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    F, G = sj.Force, matter.Ground()
    body = sj.Body(sj.MassProperties(1.0, [0.1, 0, 0], np.eye(3)))
    free = sj.MobilizedBody.Free(G, sj.Transform(), body, sj.Transform())
    pin = sj.MobilizedBody.Pin(free, sj.Transform(p=[0.3, 0, 0]), body, sj.Transform())

    class Drag:  # a user's Custom implementation
        def calc_force(self, ctx):
            return None, -0.1 * ctx.u

    F.UniformGravity(forces, matter, [0, -9.81, 0])
    F.Gravity(forces, matter, [0, -1, 0], 9.81).set_default_body_is_excluded(pin, True)
    F.TwoPointLinearSpring(forces, G, [0, 1, 0], free, [0, 0, 0], 10.0, 0.5)
    F.TwoPointLinearDamper(forces, G, [0, 1, 0], pin, [0, 0, 0], 1.0)
    F.TwoPointConstantForce(forces, free, [0, 1, 0], pin, [0, 0, 0], 1.0)
    F.ConstantForce(forces, free, [0, 0.1, 0], [1.0, 0, 0])
    F.ConstantTorque(forces, pin, [0, 0, 1.0])
    F.GlobalDamper(forces, matter, 0.1)
    F.MobilityLinearSpring(forces, pin, 0, 2.0, 0.1)
    F.MobilityLinearDamper(forces, pin, 0, 0.2)
    F.MobilityConstantForce(forces, free, 3, 0.5)
    F.MobilityLinearStop(forces, pin, 0, 100.0, 0.1, -0.5, 0.5)
    F.CoordinateActuator(forces, pin, 0, dynamics="filter", time_constant=0.1)
    F.CoordinateLimitForce(forces, pin, 0, 10.0, 0.5, 10.0, -0.5, 0.1, 0.05)
    F.LinearBushing(forces, free, sj.Transform(), pin, sj.Transform(), np.ones(6), np.ones(6))
    F.DiscreteForces(forces, matter)
    F.Custom(forces, Drag())
    system.realize_topology()
    return system._model


def test_force_records_hold_nothing_of_a_higher_layer():
    """The Model's force records (``ForceGroup``) are frozen data: a kernel from
    ``simjax.dynamics.forces``, names and static indices; no handle and no class of
    ``simjax.system`` (or above), so evaluating forces never calls up into a higher layer.
    Every ``sj.Force`` kind is in the model, and its handle names its record's kernel."""
    model = _every_force_kind()
    kinds = [k for k in vars(sj.Force).values() if isinstance(k, type) and issubclass(k, sj.Force)]
    assert len(kinds) == 18  # TendonActuator shares CoordinateActuator's kernel (one control vector)
    assert {type(k.kernel) for k in kinds} == {type(g.kernel) for g in model.force_groups}
    for g in model.force_groups:
        assert dataclasses.is_dataclass(g) and g.__dataclass_params__.frozen
        assert type(g.kernel).__module__.startswith("simjax.dynamics.forces.")
        hash(g)  # static data only
    bad = _higher_layer_objects(model.force_groups, "force_groups")
    assert not bad, f"the Model's force records hold objects of a higher layer: {bad}"
    # the check sees one, a class too
    assert _higher_layer_objects((model.force_groups[0], {"x": sj.Force}), "r") == [
        ("r[1]['x']", "simjax.system.forces.Force")
    ]


def test_the_check_sees_violations(tmp_path):
    """The checker itself, on a small fake package: it catches an upward import, an import
    inside a function, one under TYPE_CHECKING, and a cycle."""
    pkg = tmp_path / "simjax"
    (pkg / "model").mkdir(parents=True)
    (pkg / "system").mkdir()
    for d in (pkg, pkg / "model", pkg / "system"):
        (d / "__init__.py").write_text("")
    (pkg / "model" / "a.py").write_text("from ..system import b\n")
    (pkg / "system" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nfrom ..model import a\n"
        "if TYPE_CHECKING:\n    from ..model import a as a2\n"
        "def f():\n    from simjax.model import a\n"
    )
    assert _upward(pkg) == ["simjax.model.a:1 imports simjax.system.b (a higher layer)"]
    assert _nested(pkg) == ["simjax.system.b:4 (TYPE_CHECKING)", "simjax.system.b:6 (function)"]
    with pytest.raises(AssertionError, match="import cycle"):
        _check_acyclic(pkg)


def test_import_leaves_simulation_and_mesh_libraries_for_later():
    """``import simjax`` does not import diffrax or scipy.spatial (~0.4 s of a 0.9 s import
    before); the first simulation or convex hull does, through ``simjax._lazy``."""
    import subprocess
    import sys

    code = (
        "import sys, simjax, simjax.studies.simulate as s, simjax.io._mesh as m\n"
        "before = {n: n in sys.modules for n in ('diffrax', 'scipy.spatial')}\n"
        "assert s.dfx.Tsit5.__name__ == 'Tsit5' and m.spatial.ConvexHull.__name__ == 'ConvexHull'\n"
        "print(before, 'diffrax' in sys.modules, 'scipy.spatial' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["{'diffrax':", "False,", "'scipy.spatial':", "False}", "True", "True"]


# ---------------------------------------------------------------------------- at run time

_HIGHER = ("simjax.system", "simjax.studies", "simjax.io", "simjax.viz")
# Fields of the Model outside this check: the subsystems, whose hooks (calc_force,
# calc_zdot, event handlers) are the user's code, called as the user wrote them.
_NOT_YET = ("subsystems", "force_subsystems")


def _higher_layer_objects(obj, path="model", seen=None):
    """``(path, class)`` of every object reachable from ``obj`` (dataclass and Module fields,
    containers, closures and bound methods of the functions it holds) whose class is
    defined in a layer above ``constraints/``. A user object wrapped in ``Identity`` (a
    ``Custom`` constraint's functions, a coupler's function, a custom ``sj.Coupling``)
    counts by identity and is not entered: it is the user's code."""
    import dataclasses
    import types

    from simjax.model.model import Identity

    seen = set() if seen is None else seen
    if isinstance(obj, type):  # a class (a handle's kind) held as data
        mod = obj.__module__ or ""
        return [(path, f"{mod}.{obj.__qualname__}")] if mod.startswith(_HIGHER) else []
    if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, np.ndarray)):
        return []
    seen.add(id(obj))
    if isinstance(obj, Identity):
        return []
    out = []
    mod = type(obj).__module__ or ""
    if mod.startswith(_HIGHER):
        out.append((path, f"{mod}.{type(obj).__qualname__}"))
    if isinstance(obj, dict):
        items = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (tuple, list, set, frozenset)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, types.MethodType):
        items = [(f"{path}.__self__", obj.__self__), (f"{path}.__func__", obj.__func__)]
    elif isinstance(obj, types.FunctionType):
        cells = obj.__closure__ or ()
        items = [(f"{path}<closure {n}>", c.cell_contents) for n, c in zip(obj.__code__.co_freevars, cells)]
    elif dataclasses.is_dataclass(obj):
        items = [(f"{path}.{f.name}", getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__"):
        items = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
    else:
        items = []
    for p, v in items:
        out += _higher_layer_objects(v, p, seen)
    return out


def test_the_model_holds_no_object_of_a_higher_layer():
    """A realized Model holds records and kernels, never the handles users construct: with
    several constraint kinds, a custom coupling (with unilateral rows) and coordinate limits,
    nothing reachable from its fields (both Model options' constraint groups and limit rows
    included) is an object of ``system/``, ``studies/``, ``io/`` or ``viz/``, so no lower
    layer can call into one at run time. (The subsystems are outside this check: their
    hooks are the user's code.)"""
    import pathlib
    import sys

    import jax.numpy as jnp

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
    import slotted_hinge as sh

    system, joint, state = sh.build_coupled()
    matter = system.get_matter_subsystem()
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0.1, 0, 0], sj.Inertia(0.1, 0.2, 0.3)))
    a = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(p=[3, 0, 0]), body, sj.Transform())
    b = sj.MobilizedBody.Pin(a, sj.Transform(p=[0, -1, 0]), body, sj.Transform())
    c = sj.MobilizedBody.Free(matter.Ground(), sj.Transform(p=[3, -2, 0]), body, sj.Transform())
    sj.Constraint.Ball(b, [0, -1, 0], c, [0, 0, 0])
    sj.Constraint.Rod(a, c, 2.0)
    sj.Constraint.ConstantSpeed(a, 0, 0.1)
    sj.Constraint.CoordinateCoupler(matter, sj.Function.Linear([2.0, 0.0]), [a], [0])
    sj.Constraint.PrescribedMotion(matter, lambda t: jnp.sin(t[0]), b, 0)
    sj.Constraint.Custom(matter, bodies=[a, c], position_errors=lambda ctx: ctx.body_origin_location(1)[2])
    sj.Constraint.CoordinateLimit(b, 0, -1.0, 1.0)
    s = system.realize(system.realize_topology(), sj.Stage.POSITION)
    model = system.model_for(s)
    kinds = {type(r.kernel).__name__ for r in model.constraint_records}
    assert {"Ball", "Rod", "ConstantSpeed", "CoordinateCoupler", "PrescribedMotion", "Custom"} <= kinds
    assert "CouplingJoint" in kinds and len(model.limits) == 3
    assert all(opt.groups for opt in model.options) and all(opt.limits.groups for opt in model.options)
    import dataclasses

    found = []
    for f in dataclasses.fields(model):
        if f.name not in _NOT_YET:
            found += _higher_layer_objects(getattr(model, f.name), f"model.{f.name}")
    assert found == []


def test_the_model_walk_sees_a_handle():
    """The walk above finds a handle wherever it hides: in a field, a container, or the
    closure of a function a group holds."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(1, 1, 1)))
    mb = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    hidden = lambda: mb  # noqa: E731
    found = _higher_layer_objects({"a": [1, (hidden,)]}, "x")
    assert found[0] == ("x['a'][1][0]<closure mb>", "simjax.system.bodies.Pin")


def test_a_loaded_opensim_model_holds_no_object_of_a_higher_layer():
    """OpenSim's functions (a SimmSpline in a CustomJoint's transform axis, here) are pure
    math in the base layer: a loaded .osim Model holds none of ``io/``'s objects."""
    from simjax import _osim_functions
    from simjax.io import load_osim

    path = pathlib.Path(__file__).parent / "data" / "synthetic_joints.osim"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = load_osim(path)
    model = lm.system.model_for(lm.default_state)
    found = []
    for f in dataclasses.fields(model):
        if f.name not in _NOT_YET:
            found += _higher_layer_objects(getattr(model, f.name), f"model.{f.name}")
    assert found == []
    held = []

    def walk(o, seen):
        if id(o) in seen:
            return
        seen.add(id(o))
        if type(o).__module__ == _osim_functions.__name__:
            held.append(o)
        items = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            items = [getattr(o, f.name) for f in dataclasses.fields(o)]
        elif hasattr(o, "__dict__") and not isinstance(o, type) and type(o).__module__.startswith("simjax"):
            items = list(vars(o).values())
        for v in items:
            walk(v, seen)

    walk(model, set())
    assert held, "the model should hold an OpenSim spline (the walk did not reach it)"
