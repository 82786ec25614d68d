"""The package's layers: each module imports only from its own layer or below, never in a
circle, never inside a function and never under ``TYPE_CHECKING``.

Layers, lowest first (the documentation's "Architecture and layout" page, docs/architecture.md)::

    _spatial, _functions, _stage,    pure math, the Stage enum, the RESULTS enum,
    _results, _config, _sharding,    process settings (XLA flags, compilation cache), meshes,
    _lazy                            modules imported on first use
    model/        State, Topology, mobilizer kinds, Model (frozen data), Context
    tree/         traversal of the tree by levels
    dynamics/     kinematics, mass matrix, bias forces, applied forces
    constraints/  constraint kernels (errors, G, b, multipliers)
    forward/      the stage driver and projection
    system/        MultibodySystem, subsystems, handles users construct
    studies/      simulate, Assembler, assembly conditions
    io/           model and motion files
    viz/          figures
    simjax        the public names
"""

import ast
import pathlib

import pytest

import simjax as sj

ROOT = pathlib.Path(sj.__file__).parent
LAYERS = [
    {
        "simjax._config",
        "simjax._spatial",
        "simjax._functions",
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
