"""Benchmark the offset solvers on the peer instances and models; print Markdown tables.

Usage::

    python bench/bench_solvers.py [--shared DIR] [--runs 3] [--timeout 30] [--only A,B] [--models-only]
    python bench/bench_solvers.py --pack-only [--kernels auto,jit] [--baseline OTHER_CHECKOUT] [--runs 3]

``DIR`` holds ``benchmarks/minimalloc-challenging`` and ``benchmarks/idealloc``
(default: ``../shared`` beside the repository, or ``$ONNXMEM_SHARED``). Every
measurement runs in a fresh Python process, so its time includes loading the
compiled kernels (the module compiled ahead of time when it is built, else
numba's, from its cache), and its memory is that process's peak resident set. Times are medians over ``--runs`` runs.

Columns per instance: buffers, max-live lower bound, then for each solver the
height, the gap to the bound, the median seconds and the status
(``opt``: proven optimal). ``exact@cap`` decides MiniMalloc's capacity
(1,048,576; challenging instances only), ``exact min`` minimizes the arena.

The ``pack`` columns run the command a user runs, ``python -m onnxmem pack
FILE --capacity 1048576``, in a fresh process: ``solve s`` is the solver's
own time as the command prints it (in-process), ``process s`` the wall-clock
time of the whole process (interpreter start, imports, reading the CSV,
loading the compiled code, solving, printing), both medians over ``--runs``
runs taken alternately with the other columns; the ratios compare them with
MiniMalloc's reference times (its own C++ solver, decision at the same
capacity, median of 3 on a 2-core machine; ``../shared/benchmarks/README.md``).

``--pack-only`` prints only the ``pack`` columns, once per variant: each
value of ``--kernels`` (``ONNXMEM_KERNELS``: ``auto`` runs the kernels compiled
ahead of time when they are built, ``jit`` numba's; see
:mod:`onnxmem.core._native`) and, with ``--baseline``, another checkout (before a
change, say); the variants' runs alternate. Its ``process CPU s`` column is the
process's CPU time (user + system), which load on the machine changes less
than the wall-clock time.

For ``iopddl_S_1`` the ``anytime`` rows run ``exact`` (minimize) with a 10 s
and a 60 s budget, once each, and print the gap each reaches.

The models section solves the problems of the nine models that ship with the
onnx wheel (``onnx/backend/test/data/light``), planned in file order with
in-place aliasing on (the default) and off. Its ``auto`` columns also say
whether the solve loaded numba.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, resource, sys, time
from onnxmem.core.problem import read_csv, lower_bound, validate
from onnxmem.core.solvers import solve, SolveOptions
path, solver, cap, timeout = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
problem, _ = read_csv(path)
cap = None if cap == "none" else int(cap)
timeout = None if timeout == "default" else float(timeout)
sol = solve(problem, solver, SolveOptions(capacity=cap, timeout=timeout))
ok = (not validate(problem.with_capacity(cap), sol, limit=1)) if sol.found else None
print(json.dumps({"n": len(problem), "lb": lower_bound(problem), "height": sol.height,
    "status": sol.status, "seconds": sol.seconds, "valid": ok,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_MODEL_CHILD = r"""
import json, resource, sys, time
from onnxmem.planning.pipeline import plan_model, PlanOptions
from onnxmem.core.problem import lower_bound, validate
path, inplace, solver = sys.argv[1], sys.argv[2] == "on", sys.argv[3]
problem = plan_model(path, PlanOptions(order="file", solver="greedy", inplace=inplace)).liveness.problem
had_numba = "numba" in sys.modules
from onnxmem.core.solvers import solve, SolveOptions
sol = solve(problem, solver, SolveOptions())
ok = (not validate(problem, sol, limit=1)) if sol.found else None
print(json.dumps({"n": len(problem), "lb": lower_bound(problem), "height": sol.height,
    "status": sol.status, "seconds": sol.seconds, "valid": ok,
    "numba": (not had_numba) and "numba" in sys.modules,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CAPACITY = 1048576

#: MiniMalloc's time to a plan at CAPACITY, seconds (../shared/benchmarks/README.md)
MINIMALLOC_S = {"A": 3.51, "B": 2.68, "C": 0.47, "D": 1.88, "E": 2.45, "F": 3.42, "G": 0.70,
                "H": 1.12, "I": 2.48, "J": 0.67, "K": 0.39}


def run_pack(path: Path, cap: int | None, timeout: float | None, root: Path = ROOT,
             kernels: str | None = None) -> dict:
    """One ``python -m onnxmem pack`` process: its printed figures and its wall time.

    ``root``: the checkout whose ``onnxmem`` runs; ``kernels``: ``ONNXMEM_KERNELS``
    for the process (``None``: as inherited).
    """
    cmd = [sys.executable, "-m", "onnxmem", "pack", str(path)]
    cmd += ["--capacity", str(cap)] if cap is not None else ["--minimize"]
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    env = dict(os.environ, PYTHONPATH=str(root))
    if kernels is not None:
        env["ONNXMEM_KERNELS"] = kernels
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode not in (0, 4):
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
    lines = dict(line.split(None, 1) if " " in line else (line, "")
                 for line in (ln.replace("lower bound", "lower_bound") for ln in res.stdout.splitlines()))
    return {"wall": wall, "cpu": cpu, "seconds": float(lines["seconds"]), "status": lines["status"].strip(),
            "height": lines["height"].strip(), "gap": lines["gap"].strip(), "exit": res.returncode}


def pack_cells(path: Path, name: str, runs: int) -> str:
    """The pack columns of one challenging instance: medians of ``runs`` processes."""
    return pack_columns([run_pack(path, CAPACITY, None) for _ in range(runs)], name)


def pack_columns(recs: list[dict], name: str, cpu: bool = False) -> str:
    """Status, median solve and process seconds, MiniMalloc's time and the two ratios
    (``cpu``: then the process's median CPU seconds, user + system)."""
    solve_s = statistics.median(r["seconds"] for r in recs)
    wall = statistics.median(r["wall"] for r in recs)
    ref = MINIMALLOC_S.get(name)
    statuses = sorted({r["status"] for r in recs})
    fits = all(r["exit"] == 0 for r in recs)
    ratio = (f"{solve_s / ref:.2f}x | {wall / ref:.2f}x" if ref else "- | -")
    cells = (f"{'/'.join(statuses)}{'' if fits else ' (no plan)'} | {solve_s:.2f} | {wall:.2f} | "
             f"{ref if ref else '-'} | {ratio}")
    if cpu:
        cells += f" | {statistics.median(r['cpu'] for r in recs):.2f}"
    return cells


def measure(path: Path, solver: str, cap: int | None, timeout: float | None, runs: int,
            model_inplace: str | None = None) -> dict:
    out = []
    for _ in range(runs):
        if model_inplace is None:
            args = [_CHILD, str(path), solver, str(cap or "none"), "default" if timeout is None else str(timeout)]
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
    ap.add_argument("--pack-only", action="store_true",
                    help="only `pack` at capacity on the challenging instances, one column group per variant")
    ap.add_argument("--kernels", default="auto",
                    help="--pack-only: comma-separated ONNXMEM_KERNELS values to compare (auto, jit, aot)")
    ap.add_argument("--baseline", default="",
                    help="--pack-only: another checkout whose `pack` runs as a further variant (e.g. the "
                         "main branch's, to compare before and after a change)")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    if args.models_only:
        return models(args.runs, only)
    bench = Path(args.shared) / "benchmarks"
    if args.pack_only:
        variants: list[tuple[str, Path, str | None]] = [
            (f"kernels={k}", ROOT, k) for k in args.kernels.split(",") if k
        ]
        if args.baseline:
            variants.append((f"baseline {args.baseline}", Path(args.baseline).resolve(), None))
        return pack_table(bench / "minimalloc-challenging", args.runs, only, variants)
    if not bench.is_dir():
        print(f"no benchmarks at {bench}; pass --shared DIR or set ONNXMEM_SHARED", file=sys.stderr)
        return models(args.runs, only)
    print(f"Solvers on the peer instances (median of {args.runs} runs; "
          f"`exact min` timeout {args.timeout:g} s).\n")
    for folder, solvers in (
        ("minimalloc-challenging", [("greedy", None), ("best-greedy", None), ("exact", None)]),
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
        challenging = folder == "minimalloc-challenging"
        if challenging:
            cols += ["pack@cap status", "solve s", "process s", "MiniMalloc s", "solve / MiniMalloc",
                     "process / MiniMalloc"]
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
                # exact gets --timeout; the others their own default budgets
                timeout = args.timeout if solver == "exact" else None
                rec = measure(f, solver, cap, timeout, args.runs)
                cells.append(cell(rec))
                rss = max(rss, rec["rss_mb"])
            assert rec is not None
            extra = f" {pack_cells(f, name, args.runs)} |" if challenging else ""
            print(f"| {name} | {rec['n']:,} | {rec['lb']:,} | " + " | ".join(cells)
                  + f" | {rss:.0f} |" + extra, flush=True)
        print()
        s1 = bench / folder / "iopddl_S_1.csv"
        if folder == "idealloc" and s1.exists() and (not only or "iopddl_S_1" in only):
            anytime(s1)
    return models(args.runs, only)


def pack_table(folder: Path, runs: int, only: set[str],
               variants: list[tuple[str, Path, str | None]]) -> int:
    """``pack`` at capacity on every challenging instance, per variant ``(label, checkout,
    ONNXMEM_KERNELS)``; the variants' runs alternate, so that load changes hit each alike."""
    files = [f for f in sorted(folder.glob("*.csv")) if not only or f.name.split(".")[0] in only]
    if not files:
        print(f"no instances under {folder}; pass --shared DIR", file=sys.stderr)
        return 1
    print(f"`pack --capacity {CAPACITY}`, median of {runs} runs per variant, runs alternating "
          f"(load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}).\n")
    cols = ["instance"]
    for label, _, _ in variants:
        cols += [f"{label}: status", "solve s", "process s", "MiniMalloc s", "solve / MiniMalloc",
                 "process / MiniMalloc", "process CPU s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for f in files:
        name = f.name.split(".")[0]
        recs: list[list[dict]] = [[] for _ in variants]
        for _ in range(runs):
            for k, (_, root, kernels) in enumerate(variants):
                recs[k].append(run_pack(f, CAPACITY, None, root, kernels))
        print(f"| {name} | " + " | ".join(pack_columns(r, name, cpu=True) for r in recs) + " |", flush=True)
    return 0


def anytime(path: Path) -> None:
    """``exact`` minimizing a large instance with a 10 s and a 60 s budget."""
    print("anytime on iopddl_S_1 (`pack --minimize`, one run each):\n")
    print("| budget s | height | gap | status | solve s | process s |")
    print("|---|---|---|---|---|---|")
    for budget in (10.0, 60.0):
        r = run_pack(path, None, budget)
        print(f"| {budget:g} | {r['height']} | +{r['gap']} | {r['status']} | {r['seconds']:.2f} | "
              f"{r['wall']:.2f} |", flush=True)
    print()


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
                rec = measure(f, solver, None, None, runs, model_inplace=inplace)
                cells.append(cell(rec))
                rss = max(rss, rec["rss_mb"])
            assert rec is not None
            print(f"| {name} | {inplace} | {rec['n']:,} | {rec['lb']:,} | " + " | ".join(cells)
                  + f" | {'yes' if rec['numba'] else 'no'} | {rss:.0f} |", flush=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
