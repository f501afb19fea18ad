"""The import graph inside ``onnxmem``: acyclic, layered, and ``core`` pure.

Every ``import`` and ``from ... import`` in every module is read from the
source's syntax tree (module level, inside functions, under
``TYPE_CHECKING``: all of them), relative imports resolved, and an edge drawn
from the module to each ``onnxmem`` module it names: ``from .a import b``
names ``a``, and ``a.b`` too when that is a module. Importing a submodule
also runs its package's ``__init__``; that implicit edge is not counted (a
package that imports its strategy modules to fill a registry is fine).

The layer order itself is declared once, in ``.importlinter``, and checked by
import-linter (``lint-imports``, ``make check``); the test here runs it where
it is installed. That ``onnxmem.core`` imports neither onnx nor onnxruntime is
also checked here without it, from the syntax trees.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "onnxmem"

#: the top-level packages that ``onnxmem.core`` never imports
ONNX_PACKAGES = {"onnx", "onnxruntime"}

#: imports that break the layer contract in .importlinter and are still to be
#: moved: (importer, imported). A new violation fails the test; so does an entry
#: here that no longer breaks it (then remove it).
KNOWN_LAYER_VIOLATIONS: set[tuple[str, str]] = set()

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


def _external_roots(path: Path, runtime: bool = False) -> set[str]:
    """The top-level names of the absolute imports of one file (``onnx`` for ``onnx.helper``)."""
    names: set[str] = set()
    for n in _import_nodes(path, runtime):
        if isinstance(n, ast.Import):
            names |= {a.name.split(".")[0] for a in n.names}
        elif not n.level:
            names.add((n.module or "").split(".")[0])
    return names


def test_core_imports_neither_onnx_nor_onnxruntime():
    """Every file of ``onnxmem.core``, every import in it (module level, in a
    function, under TYPE_CHECKING): no onnx, no onnxruntime, and of onnxmem only
    ``onnxmem.core`` itself, so the rule holds for what core reaches too."""
    modules = _modules()
    core = {name: path for name, path in modules.items() if name.startswith("onnxmem.core")}
    assert "onnxmem.core.problem" in core and "onnxmem.core.solvers.greedy" in core
    for name, path in core.items():
        reached = _external_roots(path) & ONNX_PACKAGES
        assert not reached, f"{name} imports {sorted(reached)}: onnxmem.core is pure"
        outside = {m for m in _imports(name, path, modules) if not m.startswith("onnxmem.core")}
        assert not outside, f"{name} imports {sorted(outside)}: onnxmem.core imports only onnxmem.core"


def test_the_onnx_check_reads_imports_in_functions_and_type_checking(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import onnx.helper\n"
                   "def f():\n    from onnxruntime import InferenceSession\n")
    assert _external_roots(src) >= ONNX_PACKAGES
    assert "onnx" not in _external_roots(src, runtime=True)


@pytest.mark.parametrize("module", ["onnxmem.analysis.lifetimes"])
def test_pure_modules_do_not_reach_onnx(module):
    """The lifetime rule imports neither onnx nor onnxruntime at run time,
    directly or through another onnxmem module."""
    graph = import_graph(runtime=True)
    modules = _modules()
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    for m in seen:
        reached = _external_roots(modules[m], runtime=True) & ONNX_PACKAGES
        assert not reached, f"{m} imports {sorted(reached)}"


def _run_contract() -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on this checkout (.importlinter), no cache, lines unwrapped."""
    env = dict(os.environ, COLUMNS="1000", TERM="dumb",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache", "--no-logo", "--config", str(ROOT / ".importlinter")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_layer_contract():
    """The contracts of .importlinter hold, but for the imports in KNOWN_LAYER_VIOLATIONS."""
    pytest.importorskip("importlinter")
    r = _run_contract()
    out = r.stdout + r.stderr
    if r.returncode == 0:
        assert not KNOWN_LAYER_VIOLATIONS, (
            "no longer violations, remove from KNOWN_LAYER_VIOLATIONS: " + "; ".join(
                f"{a} -> {b}" for a, b in sorted(KNOWN_LAYER_VIOLATIONS)))
        assert "BROKEN" not in out and "KEPT" in out, out
        return
    broken = out[out.index("Broken contracts"):] if "Broken contracts" in out else ""
    found = set(re.findall(r"(onnxmem[\w.]*) -> ([\w.]+) \(l\.", broken))
    assert found, "lint-imports failed without naming an import:\n" + out
    new = found - KNOWN_LAYER_VIOLATIONS
    assert not new, "imports that break the layer contract:\n" + "\n".join(f"{a} -> {b}" for a, b in sorted(new))
    gone = KNOWN_LAYER_VIOLATIONS - found
    assert not gone, "no longer violations, remove from KNOWN_LAYER_VIOLATIONS: " + "; ".join(
        f"{a} -> {b}" for a, b in sorted(gone))


def test_tools_do_not_import_tests():
    """tools/ are run on their own (make fuzz, make check-plans ...): what they share with the
    tests lives in tools/ or in the package, never in tests/."""
    test_modules = {"tests"} | {p.stem for p in (ROOT / "tests").glob("*.py") if p.stem != "__init__"}
    for path in sorted((ROOT / "tools").rglob("*.py")):
        found = _external_roots(path) & test_modules
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)} of tests/"


# ---------------------------------------------------------------- sizes

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: functions allowed past MAX_FUNCTION_LINES, with the reason (each says it in its docstring)
LONG_FUNCTIONS = {
    ("onnxmem/core/solvers/_search.py", "_run"): "a compiled (numba) kernel: one loop over an explicit frame "
    "stack whose phases move scalars a helper could not assign",
    ("onnxmem/scheduling/_search.py", "search"): "a compiled (numba) kernel: one loop over an explicit stack "
    "of depths whose phases move scalars a helper could not assign",
}
def _sizes() -> tuple[dict[str, int], dict[tuple[str, str], tuple[int, ast.AST]]]:
    modules: dict[str, int] = {}
    functions: dict[tuple[str, str], tuple[int, ast.AST]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        source = path.read_text(encoding="utf-8")
        modules[rel] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                functions[(rel, node.name)] = max(functions.get((rel, node.name), (0, node)), (length, node),
                                                  key=lambda x: x[0])
    return modules, functions


def test_modules_and_functions_stay_short():
    """No module over 600 lines and no function over 80 (from ``def`` to its last line,
    docstring included), but the compiled kernels of LONG_FUNCTIONS."""
    modules, functions = _sizes()
    assert len(modules) > 50, "the walk found the package"
    long_modules = {m: n for m, n in modules.items() if n > MAX_MODULE_LINES}
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    long_functions = {k: n for k, (n, _) in functions.items() if n > MAX_FUNCTION_LINES and k not in LONG_FUNCTIONS}
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def test_long_function_exceptions_are_current():
    """Each exception is still long (else it leaves the list), and says why in its docstring."""
    _, functions = _sizes()
    for key in LONG_FUNCTIONS:
        assert key in functions, f"{key} no longer exists"
        length, node = functions[key]
        assert length > MAX_FUNCTION_LINES, f"{key} is {length} lines now: drop it from LONG_FUNCTIONS"
        doc = ast.get_docstring(node) or ""  # type: ignore[arg-type]
        assert "One function by design" in doc and "numba" in doc, f"{key}'s docstring does not say why it is long"


def test_layer_interfaces_resolve_without_onnxruntime():
    """runtime, analysis and report declare their interfaces: every name in ``__all__``
    resolves, and none of it (nor importing the packages) loads onnxruntime or numba."""
    code = (
        "import sys, importlib\n"
        "ms = [importlib.import_module(p) for p in ('onnxmem.runtime', 'onnxmem.analysis', 'onnxmem.report')]\n"
        "assert 'onnxmem.runtime.arena' not in sys.modules  # names load their module on first use\n"
        "for m in ms:\n"
        "    for n in m.__all__:\n"
        "        getattr(m, n)\n"
        "print(sorted(x for x in ('onnxruntime', 'numba') if x in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
