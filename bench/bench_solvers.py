"""Benchmark the offset solvers on the peer instances and models; print Markdown tables.

Usage::

    python bench/bench_solvers.py [--shared DIR] [--runs 3] [--timeout 30] [--only A,B] [--models-only]

``DIR`` holds ``benchmarks/minimalloc-challenging`` and ``benchmarks/idealloc``
(default: ``../shared`` beside the repository, or ``$ONNXMEM_SHARED``). Every
measurement runs in a fresh Python process, so its time includes loading the
compiled kernels from numba's cache, and its memory is that process's peak
resident set. Times are medians over ``--runs`` runs.

Columns per instance: buffers, max-live lower bound, then for each solver the
height, the gap to the bound, the median seconds and the status
(``opt``: proven optimal). ``exact@cap`` decides MiniMalloc's capacity
(1,048,576; challenging instances only), ``exact min`` minimizes the arena.

The models section solves the problems of the nine models that ship with the
onnx wheel (``onnx/backend/test/data/light``), planned in file order with
in-place aliasing on (the default) and off. Its ``auto`` columns also say
whether the solve loaded numba.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, resource, sys, time
from onnxmem.problem import read_csv, lower_bound, validate
from onnxmem.solvers import solve, SolveOptions
path, solver, cap, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
problem, _ = read_csv(path)
cap = None if cap == "none" else int(cap)
sol = solve(problem, solver, SolveOptions(capacity=cap, timeout=timeout))
ok = (not validate(problem.with_capacity(cap), sol, limit=1)) if sol.found else None
print(json.dumps({"n": len(problem), "lb": lower_bound(problem), "height": sol.height,
    "status": sol.status, "seconds": sol.seconds, "valid": ok,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_MODEL_CHILD = r"""
import json, resource, sys, time
from onnxmem.pipeline import plan_model, PlanOptions
from onnxmem.problem import lower_bound, validate
path, inplace, solver = sys.argv[1], sys.argv[2] == "on", sys.argv[3]
problem = plan_model(path, PlanOptions(order="file", solver="greedy", inplace=inplace)).liveness.problem
had_numba = "numba" in sys.modules
from onnxmem.solvers import solve, SolveOptions
sol = solve(problem, solver, SolveOptions())
ok = (not validate(problem, sol, limit=1)) if sol.found else None
print(json.dumps({"n": len(problem), "lb": lower_bound(problem), "height": sol.height,
    "status": sol.status, "seconds": sol.seconds, "valid": ok,
    "numba": (not had_numba) and "numba" in sys.modules,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CAPACITY = 1048576


def measure(path: Path, solver: str, cap: int | None, timeout: float, runs: int,
            model_inplace: str | None = None) -> dict:
    out = []
    for _ in range(runs):
        if model_inplace is None:
            args = [_CHILD, str(path), solver, str(cap or "none"), str(timeout)]
        else:
            args = [_MODEL_CHILD, str(path), model_inplace, solver]
        res = subprocess.run(
            [sys.executable, "-c", *args], cwd=ROOT, capture_output=True, text=True, check=True,
        )
        out.append(json.loads(res.stdout.strip().splitlines()[-1]))
    rec = dict(out[-1])
    rec["seconds"] = statistics.median(r["seconds"] for r in out)
    rec["rss_mb"] = max(r["rss_mb"] for r in out)
    rec["statuses"] = sorted({r["status"] for r in out})
    rec["heights"] = sorted({r["height"] for r in out})
    return rec


def cell(rec: dict) -> str:
    if rec["status"] == "infeasible" or rec["valid"] is False:
        return f"{rec['status']} | - | {rec['seconds']:.2f} | -"
    lb = rec["lb"]
    gap = 100.0 * (rec["height"] - lb) / lb if lb else 0.0
    st = "opt" if rec["status"] == "optimal" else rec["status"]
    if len(rec["heights"]) > 1:
        st += " (heights vary: " + ", ".join(f"{h:,}" for h in rec["heights"]) + ")"
    return f"{rec['height']:,} | {gap:+.3f}% | {rec['seconds']:.2f} | {st}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default=os.environ.get("ONNXMEM_SHARED", str(ROOT.parent / "shared")))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds for exact minimize")
    ap.add_argument("--only", default="", help="comma-separated instance names")
    ap.add_argument("--models-only", action="store_true", help="only the models section")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    if args.models_only:
        return models(args.runs, only)
    bench = Path(args.shared) / "benchmarks"
    if not bench.is_dir():
        print(f"no benchmarks at {bench}; pass --shared DIR or set ONNXMEM_SHARED", file=sys.stderr)
        return models(args.runs, only)
    print(f"Solvers on the peer instances (median of {args.runs} runs; "
          f"`exact min` timeout {args.timeout:g} s).\n")
    for folder, solvers in (
        ("minimalloc-challenging", [("greedy", None), ("best-greedy", None),
                                    ("exact", CAPACITY), ("exact", None)]),
        ("idealloc", [("greedy", None), ("best-greedy", None), ("exact", None),
                      ("auto", None)]),
    ):
        files = sorted((bench / folder).glob("*.csv"))
        if not files:
            continue
        heads = [f"{s}@cap" if c else (f"{s} min" if s == "exact" else s) for s, c in solvers]
        print(f"### {folder}\n")
        cols = ["instance", "buffers", "lower bound"]
        for h in heads:
            cols += [f"{h} height", "gap", "s", "status"]
        cols.append("peak RSS MB")
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for f in files:
            name = f.name.split(".")[0]
            if only and name not in only:
                continue
            cells = []
            rss = 0.0
            rec = None
            for solver, cap in solvers:
                timeout = args.timeout if solver == "exact" else 30.0
                rec = measure(f, solver, cap, timeout, args.runs)
                cells.append(cell(rec))
                rss = max(rss, rec["rss_mb"])
            assert rec is not None
            print(f"| {name} | {rec['n']:,} | {rec['lb']:,} | " + " | ".join(cells)
                  + f" | {rss:.0f} |", flush=True)
        print()
    return models(args.runs, only)


MODEL_SOLVERS = ("greedy", "best-greedy", "auto")


def models(runs: int, only: set[str]) -> int:
    """The models section: every model, in-place aliasing on and off."""
    try:
        import onnx
    except ImportError:
        print("onnx is not installed; no models section", file=sys.stderr)
        return 0
    light = Path(onnx.__file__).parent / "backend/test/data/light"
    files = sorted(light.glob("light_*.onnx"))
    print(f"### models (onnx wheel, file order; median of {runs} runs)\n")
    cols = ["model", "in-place", "buffers", "lower bound"]
    for s in MODEL_SOLVERS:
        cols += [f"{s} height", "gap", "s", "status"]
    cols += ["auto loaded numba", "peak RSS MB"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for f in files:
        name = f.stem.removeprefix("light_")
        if only and name not in only:
            continue
        for inplace in ("on", "off"):
            cells = []
            rss = 0.0
            rec = None
            for solver in MODEL_SOLVERS:
                rec = measure(f, solver, None, 0.0, runs, model_inplace=inplace)
                cells.append(cell(rec))
                rss = max(rss, rec["rss_mb"])
            assert rec is not None
            print(f"| {name} | {inplace} | {rec['n']:,} | {rec['lb']:,} | " + " | ".join(cells)
                  + f" | {'yes' if rec['numba'] else 'no'} | {rss:.0f} |", flush=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
