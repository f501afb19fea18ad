"""Benchmark the exact search's decision alone: nodes and seconds per instance.

Usage::

    python bench/bench_search.py [--shared DIR] [--runs 3] [--capacity 1048576] [--timeout 60]

For each MiniMalloc challenging instance (``DIR/benchmarks/minimalloc-challenging``;
default ``../shared`` beside the repository, or ``$ONNXMEM_SHARED``), the
decision at ``--capacity`` is searched in this process from the numpy best
fit, with the searches at the max-live bound beside those at the capacity
(as ``onnxmem pack --capacity`` does), after one warm-up decision, so
the time is the search's own: no interpreter start, imports or compiled-code
loading (``bench/bench_solvers.py`` measures those). Printed per instance:
the buffers, the search nodes (of every search, at the capacity and at the
bound; the same on every machine and every run: the
search is deterministic, so this column compares search strategies on a
busy machine), the median seconds over ``--runs`` runs, the nodes per
millisecond, and the answer (``found``, ``infeasible`` or ``timeout``).
Every plan found is checked by the independent validator.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from onnxmem.core.problem import Solution, lower_bound, read_csv, validate  # noqa: E402
from onnxmem.core.solvers.baseline import place_in_order, size_order  # noqa: E402
from onnxmem.core.solvers.exact import ExactSearch  # noqa: E402
from onnxmem.core.workclock import now  # noqa: E402

ANSWERS = {0: "found", 1: "infeasible", 3: "timeout"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", default=os.environ.get("ONNXMEM_SHARED", str(ROOT.parent / "shared")))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--capacity", type=int, default=1048576)
    parser.add_argument("--timeout", type=float, default=60.0, help="budget seconds of counted work")
    args = parser.parse_args()
    folder = Path(args.shared) / "benchmarks" / "minimalloc-challenging"
    files = sorted(folder.glob("*.csv"))
    if not files:
        print(f"no instances in {folder}; pass --shared DIR or set ONNXMEM_SHARED", file=sys.stderr)
        return 1
    print(f"Exact search, decision at capacity {args.capacity:,} (median of {args.runs} runs, "
          f"in-process, compiled code already loaded)\n")
    print("| instance | buffers | nodes | search s | nodes / ms | answer |")
    print("|---|---|---|---|---|---|")
    for path in files:
        problem, _ = read_csv(path)
        problem = problem.with_capacity(None)
        ex = ExactSearch(problem)
        best_fit = np.asarray(place_in_order(problem, size_order(problem)), dtype=np.int64)
        incumbent = best_fit[ex.free].copy()
        bound = lower_bound(problem)
        ex.decide(args.capacity, incumbent, now() + args.timeout, bound=bound)  # warm-up
        times: list[float] = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            code, plan, nodes = ex.decide(args.capacity, incumbent, now() + args.timeout, bound=bound)
            times.append(time.perf_counter() - t0)
        if code == 0:
            offsets = ex.expand(plan)
            sol = Solution(tuple(int(o) for o in offsets), ex.height(plan), "exact", "feasible")
            bad = validate(problem.with_capacity(args.capacity), sol, limit=1)
            if bad:
                print(f"{path.name}: invalid plan: {bad[0]}", file=sys.stderr)
                return 3
        sec = statistics.median(times)
        rate = nodes / (1000 * sec) if sec > 0 else float("nan")
        print(f"| {path.name.split('.')[0]} | {len(problem):,} | {nodes:,} | {sec:.3f} | {rate:.0f} | "
              f"{ANSWERS.get(code, code)} |")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
