"""The generated CLI reference and the shipped models are current, and the docs name
only module paths that exist."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_cli_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_shipped_models_are_current():
    r = subprocess.run([sys.executable, str(ROOT / "models" / "build_models.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_onnxruntime_requirement_covers_every_platform_once():
    """onnxruntime-gpu where its wheels exist, plain onnxruntime everywhere else."""
    import configparser

    from packaging.requirements import Requirement

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    reqs = [Requirement(line) for line in cfg["options"]["install_requires"].split("\n") if line.strip()]
    ort = [r for r in reqs if r.name in ("onnxruntime", "onnxruntime-gpu")]
    assert {r.name for r in ort} == {"onnxruntime", "onnxruntime-gpu"}
    platforms = [("Linux", "x86_64", "onnxruntime-gpu"), ("Windows", "AMD64", "onnxruntime-gpu"),
                 ("Linux", "aarch64", "onnxruntime"), ("Darwin", "arm64", "onnxruntime"),
                 ("Darwin", "x86_64", "onnxruntime"), ("Windows", "ARM64", "onnxruntime")]
    for system, machine, want in platforms:
        env = {"platform_system": system, "platform_machine": machine}
        chosen = [r.name for r in ort if r.marker is not None and r.marker.evaluate(env)]
        assert chosen == [want], (system, machine, chosen)


#: a source path (``onnxmem/core/problem.py``, ``onnxmem/export/``) or a dotted name
#: (``onnxmem.planning.pipeline.plan_model``) written in the docs
_PATH = re.compile(r"(?<![\w/.-])onnxmem/[\w./*-]*[\w/*]")
_DOTTED = re.compile(r"(?<![\w/.-])onnxmem(?:\.[A-Za-z_]\w*)+")


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _top_level_names(path: Path) -> set[str]:
    """What a module defines at its top level (functions, classes, assignments,
    imports, and the names of its ``__all__``), read from its syntax tree."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                          and isinstance(c.value, str)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _dotted_exists(name: str) -> bool:
    """``onnxmem.a.b.c``: the longest prefix that is a module, then one name it defines
    (``Class.method`` is checked as far as ``Class``)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        path = _module_file(parts[:k])
        if path is not None:
            return k == len(parts) or parts[k] in _top_level_names(path)
    return False


def _path_exists(ref: str) -> bool:
    if "*" in ref:  # a build output (onnxmem/core/_aot*.so): its folder
        return (ROOT / ref).parent.is_dir()
    return (ROOT / ref).exists()


def _metadata_keys(tmp_path: Path) -> set[str]:
    """The ``onnxmem.*`` keys an annotated model carries: names in the docs, not modules."""
    from onnxmem.export.annotate import annotate_model
    from tests.helpers import chain, plan_file_order

    model = chain()
    plan = plan_file_order(model, tmp_path).plan
    return {p.key for p in annotate_model(model, plan).metadata_props}


def test_docs_name_only_module_paths_that_exist(tmp_path):
    keys = _metadata_keys(tmp_path)
    assert "onnxmem.arena_size" in keys
    missing, seen = [], 0
    for doc in _doc_files():
        for lineno, line in enumerate(doc.read_text().splitlines(), 1):
            where = f"{doc.relative_to(ROOT)}:{lineno}"
            seen += len(_PATH.findall(line)) + len(_DOTTED.findall(line))
            missing += [f"{where}: {m}" for m in _PATH.findall(line) if not _path_exists(m)]
            missing += [f"{where}: {m}" for m in _DOTTED.findall(line) if m not in keys and not _dotted_exists(m)]
    assert seen > 50, seen  # the docs do name modules: the patterns still find them
    assert not missing, "module paths in the docs that do not exist:\n" + "\n".join(missing)


def test_the_docs_check_tells_real_paths_from_stale_ones():
    assert _dotted_exists("onnxmem.planning.pipeline.plan_model")
    assert _dotted_exists("onnxmem.core.solvers")
    assert _dotted_exists("onnxmem.zoo.materialize")  # listed in the package's __all__
    assert not _dotted_exists("onnxmem.pipeline.plan_model")  # the flat layout's path
    assert not _dotted_exists("onnxmem.planning.pipeline.no_such_function")
    assert _path_exists("onnxmem/core/problem.py") and _path_exists("onnxmem/export/")
    assert not _path_exists("onnxmem/problem.py")
    assert _PATH.findall("see `onnxmem/core/dimexpr.py`: the grammar") == ["onnxmem/core/dimexpr.py"]
    assert _DOTTED.findall("(`onnxmem.runtime.arena.ArenaRun`).") == ["onnxmem.runtime.arena.ArenaRun"]
    assert _DOTTED.findall("onnxmem plan model.onnxmem.json") == []
