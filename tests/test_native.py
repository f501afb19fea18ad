"""The kernels compiled ahead of time (onnxmem.core._native): used when current, the
same answers as numba's, never used when built from other sources.

The module fixture builds the extension module when it is absent or stale (as
``make install`` does; about a minute, once: it is kept in the package).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from onnxmem.core import _native
from onnxmem.core.problem import Buffer, Problem, lower_bound, read_csv, validate, write_csv
from onnxmem.core.solvers.exact import ExactSearch
from onnxmem.core.solvers.greedy import PREORDERS, preorder

from .test_imports import import_graph
from .test_solvers import FAST, problems

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "onnxmem"


@pytest.fixture(scope="module")
def aot(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The extension module, built from the present sources (rebuilt when stale).

    Loaded from a copy, so that a stale module this process imported before
    (which stays loaded) is never the one tested.
    """
    if _run(_MODE).stdout.strip() != "aot":
        from onnxmem.core._native_build import build

        build()
    for built in [*_this_python("_aot"), *_this_python("_aot_generic")]:
        module = _load_copy(built, tmp_path_factory.mktemp("aot"))
        if int(module.source_hash()) == _native.source_hash() and _native._mismatch(module) is None:
            return module  # the one this package uses: built here, else the shipped generic one
    raise AssertionError("no current ahead-of-time module after building one")


def _load_copy(built: Path, folder: Path) -> Any:
    copy = folder / built.name
    shutil.copyfile(built, copy)
    name = _native.AOT_MODULE if built.name.startswith("_aot.") else _native.GENERIC_MODULE
    spec = importlib.util.spec_from_file_location(name, copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _this_python(stem: str) -> list[Path]:
    """The modules named ``stem`` that this interpreter can load (its extension suffixes)."""
    return [PACKAGE / "core" / (stem + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if (PACKAGE / "core" / (stem + suffix)).exists()]


def test_the_shipped_generic_module_is_current(tmp_path: Path) -> None:
    """The modules shipped with the sources (so that installing compiles nothing), one per
    supported Python, were built from the present kernel sources, for any processor: rebuild
    them with `make kernels-generic-all`. This Python's is loaded and asked; the others are
    read from the record the build writes."""
    from onnxmem.core._native_build import GENERIC_RECORD

    record = json.loads((PACKAGE / "core" / GENERIC_RECORD).read_text())
    shipped = sorted(p.name for p in (PACKAGE / "core").glob("_aot_generic.*") if p.suffix == ".so")
    for minor in range(10, 14):  # setup.cfg: python_requires >= 3.10
        assert any(f".cpython-3{minor}-" in name for name in shipped), (
            f"no generic module for Python 3.{minor}: run `make kernels-generic-all` and commit it")
    for name in shipped:
        assert record.get(name) == _native.source_hash(), (
            f"{name} was built from other kernel sources: run `make kernels-generic-all` and commit it")
    mine = _this_python("_aot_generic")
    assert mine, "no generic module for this Python: run `make kernels-generic` and commit it"
    module = _load_copy(mine[0], tmp_path)
    assert int(module.source_hash()) == _native.source_hash() == record[mine[0].name]
    assert int(module.machine_hash()) == 0  # for any processor of the architecture


def _run(code: str, *, env: dict[str, str] | None = None, path: Path = ROOT) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "ONNXMEM_KERNELS"}
    full.update(PYTHONPATH=str(path), **(env or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=path)


def _kernels(built: Any) -> tuple[Any, Any]:
    """``(greedy kernels, search kernels)``: from the extension module ``built``,
    or numba's when it is ``None``."""
    if built is None:
        return (importlib.import_module("onnxmem.core.solvers._kernels"),
                importlib.import_module("onnxmem.core.solvers._search"))
    return (_native.ahead_of_time("onnxmem.core.solvers._kernels", built),
            _native.ahead_of_time("onnxmem.core.solvers._search", built))


def _search_all(search_kernels: object, ex: ExactSearch, cap: int) -> tuple[int, list[int], int, int]:
    """Every preorder's search of the first component, uninterrupted: statuses, plan, nodes, backtracks."""
    from onnxmem.core.solvers._searchdefs import FRAME_FIELDS, HEURISTICS, NCTR

    comp = ex.components[0]
    query = np.array([comp.sec_lo, comp.sec_hi, cap, 1, 1, 1, 1], dtype=np.int64)
    status, plan, nodes, backtracks = 0, [], 0, 0
    for heur in HEURISTICS:
        state, work = ex._state(), ex._work()
        part = search_kernels.preorder(
            comp.bufs.astype(np.int64), heur, ex.size, ex.width, ex.slo, ex.shi, state[3])
        ctr = np.zeros(NCTR, dtype=np.int64)
        ctr[1], ctr[2], ctr[7] = 10**9, 2**62, -1
        frames = np.zeros((ex.n + 2, FRAME_FIELDS), dtype=np.int64)
        s = search_kernels.search(
            part, query, heur, ex._arrays(), state, work, ctr, frames)
        status = status * 4 + int(s)
        plan += state[5][comp.bufs].tolist()
        nodes += int(ctr[0])
        backtracks += int(ctr[6])
    return status, plan, nodes, backtracks


@settings(FAST, max_examples=15)  # numba's kernel is compiled on first use: each example searches twice
@given(problem=problems(max_buffers=10, aligned=True), slack=st.integers(0, 3))
def test_search_same_as_numba(aot: Any, problem: Problem, slack: int) -> None:
    # the compiled-ahead search visits the same nodes and finds the same plans
    ex = ExactSearch(problem)
    assume(ex.n > 0 and ex.searchable)
    cap = lower_bound(problem) + slack
    assert _search_all(_kernels(aot)[1], ex, cap) == _search_all(_kernels(None)[1], ex, cap)


@FAST
@given(problem=problems(max_buffers=12, aligned=True))
def test_placements_same_as_numba(aot: Any, problem: Problem) -> None:
    # greedy placement (best and first fit) and lowest-first: identical offsets
    assume(len(problem) > 0)
    start, end, size, align = problem.arrays()
    bufs = (start, end, size, align)
    free = np.full(len(problem), -1, dtype=np.int64)
    answers = []
    for built in (aot, None):
        k = _kernels(built)[0]
        covers = k.cover_lists(start, end, size)
        out = [np.concatenate(covers).tolist()]
        order = preorder(problem, PREORDERS[0]).astype(np.int64)
        for fit in (True, False):
            offs, done = k.place(order, fit, free, bufs, covers, 2**62)
            out.append((offs.tolist(), bool(done)))
        points = np.unique(np.concatenate([start, end]))
        secs = (np.searchsorted(points, start), np.searchsorted(points, end))
        offs, done = k.lowest_first(order, 6, bufs, secs, free, 2**62)
        out.append((offs.tolist(), bool(done)))
        answers.append(out)
    assert answers[0] == answers[1]


def test_wrong_argument_type_is_refused(aot: Any) -> None:
    # a compiled-ahead kernel reads its arguments' memory as declared: the
    # wrapper refuses an int32 order (numba would recompile; the module cannot)
    k = _kernels(aot)[0]
    one, zero = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    covers = k.cover_lists(zero, one, one)
    free = np.full(1, -1, dtype=np.int64)
    with pytest.raises(TypeError, match=r"place: argument 0 .*int64\[::1\].*int32"):
        k.place(zero.astype(np.int32), True, free, (zero, one, one, one), covers, 0)
    with pytest.raises(TypeError, match="argument 3"):
        k.place(zero, True, free, (zero, one, one), covers, 0)
    with pytest.raises(TypeError, match="read-only"):
        ro = zero.copy()
        ro.flags.writeable = False
        k.place(zero, True, ro, (zero, one, one, one), covers, 0)
    offs, done = k.place(zero, True, free, (zero, one, one, one), covers, 0)
    assert offs.tolist() == [0] and done


_PACK = """
import sys
from onnxmem.core import _native
from onnxmem.core.solvers.pack import pack_csv
cap = None if sys.argv[3] == "min" else int(sys.argv[3])
r = pack_csv(sys.argv[1], capacity=cap, timeout=60, output=sys.argv[2])
print(_native.mode().split()[0], r.solution.status, r.solution.height, "numba" in sys.modules,
      "numpy.ma" in sys.modules)
"""


def _random_csv(path: Path) -> Path:
    # 60 buffers the greedy plans leave above the bound: minimize runs the search
    rng = np.random.default_rng(7)
    bufs = []
    for i in range(60):
        s = int(rng.integers(0, 30))
        bufs.append(Buffer(f"b{i}", s, s + int(rng.integers(1, 8)), int(rng.integers(1, 100))))
    write_csv(Problem(tuple(bufs)), path)
    return path


def _decision_csv(path: Path) -> tuple[Path, str]:
    # 120 buffers, sizes in 16-byte steps, whose cheap plans miss the lower
    # bound: the decision at the bound runs the search (and finds a plan)
    rng = np.random.default_rng(0)
    bufs = []
    for i in range(120):
        s = int(rng.integers(0, 40))
        bufs.append(Buffer(f"b{i}", s, s + int(rng.integers(1, 12)), int(rng.integers(1, 64)) * 16))
    problem = Problem(tuple(bufs))
    write_csv(problem, path)
    return path, str(lower_bound(problem))


@pytest.mark.parametrize("name", ["minimize", "decision"])
def test_pack_uses_built_module(aot: object, tmp_path: Path, name: str) -> None:
    # pack: the built module runs (numba is never imported, nor numpy.ma) and
    # writes the same plan, byte for byte, as numba's kernels
    if name == "minimize":
        csv, cap = _random_csv(tmp_path / "random.csv"), "min"
    else:
        csv, cap = _decision_csv(tmp_path / "decision.csv")
    out = {}
    for kernels in ("auto", "jit"):
        dest = tmp_path / f"{kernels}.csv"
        res = subprocess.run(
            [sys.executable, "-c", _PACK, str(csv), str(dest), cap], capture_output=True,
            text=True, env=dict(os.environ, PYTHONPATH=str(ROOT), ONNXMEM_KERNELS=kernels), cwd=ROOT,
        )
        assert res.returncode == 0, res.stderr
        out[kernels] = (res.stdout.split(), dest.read_bytes())
    assert out["auto"][0][0] == "aot" and out["auto"][0][3:] == ["False", "False"]
    assert out["jit"][0][0] == "jit" and out["jit"][0][3] == "True"  # the compiled search ran
    assert out["auto"][0][1:3] == out["jit"][0][1:3] and out["auto"][1] == out["jit"][1]
    problem, _ = read_csv(csv)
    offsets = [int(line.split(",")[-1]) for line in out["auto"][1].decode().splitlines()[1:]]
    checked = problem.with_capacity(None if cap == "min" else int(cap))
    assert validate(checked, _as_solution(problem, offsets)) == []


def _as_solution(problem: Problem, offsets: list[int]) -> object:
    from onnxmem.core.problem import Solution, Status

    height = max((o + b.size for o, b in zip(offsets, problem.buffers)), default=0)
    return Solution(tuple(offsets), height, "pack", Status.FEASIBLE)


def _copy_package(dest: Path) -> Path:
    shutil.copytree(PACKAGE, dest / "onnxmem", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


_MODE = "from onnxmem.core import _native; print(_native.mode())"


@pytest.mark.heavy
def test_stale_module_not_used(aot: object, tmp_path: Path) -> None:
    # a copy of the package with the built module: used; once a kernel's
    # source changes (a comment will do), it is not, and aot mode refuses
    root = _copy_package(tmp_path)
    assert list((root / "onnxmem" / "core").glob("_aot*")), "the built module was not copied"
    assert _run(_MODE, path=root).stdout.strip() == "aot"
    with open(root / "onnxmem" / "core" / "solvers" / "_search.py", "a") as f:
        f.write("# changed\n")
    res = _run(_MODE, path=root)
    assert res.stdout.strip() == "jit (the ahead-of-time module was built from other kernel sources)"
    res = _run(_MODE, path=root, env={"ONNXMEM_KERNELS": "aot"})
    assert res.returncode != 0 and "ONNXMEM_KERNELS=aot but" in res.stderr
    # the stale package still solves, with numba's kernels
    problem_code = (
        "import sys; from onnxmem.core.problem import Buffer, Problem; from onnxmem.core.solvers import solve, SolveOptions; "
        "p = Problem(tuple(Buffer(f'b{i}', i % 3, i % 3 + 2, 1 + i % 4) for i in range(2500))); "
        "s = solve(p, 'exact', SolveOptions(capacity=None, timeout=20)); "
        "print(s.status, 'numba' in sys.modules)"
    )
    res = _run(problem_code, path=root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[1] == "True"


def test_module_for_another_processor_not_used(aot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # built for this processor (the default); elsewhere it is not used. The generic one runs anywhere.
    assert _native._mismatch(aot) is None
    here = _native.machine_hash()
    monkeypatch.setattr(_native, "machine_hash", lambda: here ^ 1)
    if int(aot.machine_hash()) == 0:
        assert _native._mismatch(aot) is None
        return
    assert int(aot.machine_hash()) == here != 0
    assert _native._mismatch(aot) == "the ahead-of-time module was built for another processor"


def test_absent_module_falls_back(tmp_path: Path) -> None:
    root = _copy_package(tmp_path)
    for built in (root / "onnxmem" / "core").glob("_aot*"):
        built.unlink()
    assert _run(_MODE, path=root).stdout.strip() == "jit (the ahead-of-time module is not built)"
    assert _run(_MODE, path=root, env={"ONNXMEM_KERNELS": "jit"}).stdout.strip() == "jit (ONNXMEM_KERNELS=jit)"
    res = _run(_MODE, path=root, env={"ONNXMEM_KERNELS": "fast"})
    assert res.returncode != 0 and "not one of auto, jit, aot" in res.stderr


def test_kernel_sources_are_hashed() -> None:
    # every onnxmem module a kernel module imports is among the hashed sources,
    # so that no change to what is compiled leaves a stale module in use
    graph = import_graph(runtime=True)
    hashed = {
        "onnxmem." + os.path.normpath("core/" + rel).removesuffix(".py").replace("/", ".")
        for rel in _native.SOURCES
    }
    for module in _native.KERNELS:
        assert module in hashed
        assert graph[module] <= hashed, f"{module} imports {graph[module] - hashed}, not hashed"
    assert "onnxmem.core._native" in hashed  # the declared argument types


def test_numba_signatures() -> None:
    # the declarations turn into the signatures numba.pycc compiles
    prefix, declared = _native.KERNELS["onnxmem.core.solvers._kernels"]
    assert _native.numba_signature(*declared["place"]) == (
        "Tuple((int64[::1], boolean,))(int64[::1], boolean, int64[::1], "
        "Tuple((int64[::1], int64[::1], int64[::1], int64[::1],)), "
        "Tuple((int64[::1], int64[::1], int64[::1], int32[::1],)), int64)"
    )
    assert _native.numba_signature(*_native.KERNELS["onnxmem.core._cyclecounter"][1]["cycles"]) == "int64()"


def test_problem_arrays_fit_the_kernels() -> None:
    # Problem.arrays() is what the placement kernels take: it fits their declared
    # type, and a slice with a step would not
    arrays = Problem(tuple(Buffer(f"b{i}", i, i + 1, 8) for i in range(3))).arrays()
    assert _native._fits(arrays, (_native.VEC,) * 4)
    assert not _native._fits(tuple(a[::2] for a in arrays), (_native.VEC,) * 4)
    assert not _native._fits(arrays[:3], (_native.VEC,) * 4)


_ORDER = (
    "import sys; from onnxmem.core._native import mode; "
    "from onnxmem.planning.pipeline import PlanOptions, plan_model; "
    "p = plan_model(sys.argv[1], PlanOptions(order='auto')).plan; "
    "print(mode().split()[0], 'numba' in sys.modules, p.arena_size, hash(p.order))"
)


@pytest.mark.slow  # two processes plan randwire_ws, one compiling the order search with numba
def test_order_search_uses_built_module(aot: object) -> None:
    # the default plan of a random network runs the compiled order search: from the built
    # module (numba never imported) with the same order as numba's kernel
    model = str(ROOT / "models" / "zoo" / "randwire_ws.onnx")
    out = {}
    for kernels in ("auto", "jit"):
        res = subprocess.run([sys.executable, "-c", _ORDER, model], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT), ONNXMEM_KERNELS=kernels,
                                      PYTHONHASHSEED="0"), cwd=ROOT)
        assert res.returncode == 0, res.stderr
        out[kernels] = res.stdout.split()
    assert out["auto"][:2] == ["aot", "False"] and out["jit"][:2] == ["jit", "True"]
    assert out["auto"][2:] == out["jit"][2:]
