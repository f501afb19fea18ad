"""The import graph inside ``onnxmem`` is acyclic.

Every ``import`` and ``from ... import`` in every module is read from the
source's syntax tree (module level, inside functions, under
``TYPE_CHECKING``: all of them), relative imports resolved, and an edge drawn
from the module to each ``onnxmem`` module it names: ``from .a import b``
names ``a``, and ``a.b`` too when that is a module. Importing a submodule
also runs its package's ``__init__``; that implicit edge is not counted (a
package that imports its strategy modules to fill a registry is fine).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "onnxmem"

#: import cycles allowed to remain (none: each registry lives in a module of its
#: own that the strategies import, and the package imports the strategies)
KNOWN_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _import_nodes(path: Path, runtime: bool) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_only(tree) if runtime else set()
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip]


def _imports(name: str, path: Path, modules: dict[str, Path], runtime: bool = False) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _import_nodes(path, runtime):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph(runtime: bool = False) -> dict[str, set[str]]:
    """``{module: onnxmem modules it imports}``; ``runtime``: leave out the
    imports under ``if TYPE_CHECKING:``."""
    modules = _modules()
    return {name: _imports(name, path, modules, runtime) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: set[frozenset[str]] = set()
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.add(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_reader_sees_every_kind_of_import():
    graph = import_graph()
    assert "onnxmem.analysis.lifetimes" in graph["onnxmem.analysis.liveness"]  # module level, relative
    assert "onnxmem.analysis.liveness" in graph["onnxmem.analysis.aliasing"]
    assert "onnxmem.runtime.ort" in graph["onnxmem.verify.run"]  # inside a function
    assert "onnxmem.scheduling.registry" in graph["onnxmem.scheduling.heuristics"]  # from .registry
    assert "onnxmem.scheduling.heuristics" in graph["onnxmem.scheduling"]  # from . import heuristics
    assert "onnxmem.core.errors" in graph["onnxmem.scheduling.registry"]  # from ..errors


def test_type_only_imports_are_told_apart():
    assert "onnxmem.graph" in import_graph()["onnxmem.analysis.lifetimes"]
    assert "onnxmem.graph" not in import_graph(runtime=True)["onnxmem.analysis.lifetimes"]


def test_cycle_finder_on_literal_graphs():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == set()
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == {frozenset({"a", "b"})}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}) == {frozenset({"a", "b", "c"})}


def test_onnxmem_import_graph_is_acyclic():
    found = cycles(import_graph())
    new = found - KNOWN_CYCLES
    assert not new, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in new)
    gone = KNOWN_CYCLES - found
    assert not gone, "no longer cycles, remove from KNOWN_CYCLES: " + "; ".join(" <-> ".join(sorted(c)) for c in gone)


@pytest.mark.parametrize("module", ["onnxmem.core.problem", "onnxmem.core.solvers", "onnxmem.analysis.lifetimes"])
def test_pure_modules_do_not_reach_onnx(module):
    """problem, solvers and the lifetime rule import neither onnx nor onnxruntime
    at run time, directly or through another onnxmem module."""
    graph = import_graph(runtime=True)
    modules = _modules()
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    for m in seen:
        names = set()
        for n in _import_nodes(modules[m], runtime=True):
            if isinstance(n, ast.Import):
                names |= {a.name.split(".")[0] for a in n.names}
            elif not n.level:
                names.add((n.module or "").split(".")[0])
        assert not names & {"onnx", "onnxruntime"}, f"{m} imports {sorted(names & {'onnx', 'onnxruntime'})}"
