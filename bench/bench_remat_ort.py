#!/usr/bin/env python
"""onnxruntime's own peak on a training step before and after ``plan --budget``'s rewrite.

Usage (the training runtime: ``make training-env``)::

    .venv-training/bin/python bench/bench_remat_ort.py                # mobilenet_v2 bert resnet50
    .venv-training/bin/python bench/bench_remat_ort.py mobilenet_v2
    .venv-training/bin/python bench/bench_remat_ort.py --factor 0.3 --keep onnxruntime mobilenet_v2

For each graph of ``models/training``: a runnable copy (weights filled in,
:func:`onnxmem.zoo.fixtures.materialize`) in a temporary folder, ``plan_with_budget`` at 0.5x
(``--factor``) with each ``keep`` (:data:`onnxmem.remat.budget.KEEP`; ``--keep``), and
:func:`onnxmem.runtime.footprint.session_peak` of the original and of the rewrite: the growth
of a fresh process's peak resident size from before the session is made to the end of its
runs, on one training step's inputs (made before the baseline), graph optimizations off. Two
settings: the CPU arena on and memory patterns off (one run), and onnxruntime's defaults
(arena and memory patterns on: the second run allocates the pattern's block, the peak of two
runs). Each rewrite runs in the order it was made for: ``onnxruntime`` in the default
execution order, ``planner`` with ``execution_order = PRIORITY_BASED`` (and, as a rewrite
made without regard to onnxruntime's order, in the default order too); the original in the
default order. Each setting also with ``SessionOptions.enable_mem_reuse = False`` ("reuse off"):
onnxruntime's planner then hands no dead value's buffer to a later output of the same shape
(what keeps a recomputed value's buffer held across its gap; docs/remat.md). "onnxruntime's
order" is the arena onnxmem plans for the original file in the order onnxruntime runs it
(``plan --order onnxruntime``), the one the measured original runs in. The markdown table goes
to stdout.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from onnxmem.model import load_model  # noqa: E402
from onnxmem.planning.pipeline import PlanOptions, plan_model  # noqa: E402
from onnxmem.remat.budget import plan_with_budget  # noqa: E402
from onnxmem.runtime.footprint import session_peak  # noqa: E402
from onnxmem.zoo.fixtures import materialize  # noqa: E402

GRAPHS = ("mobilenet_v2", "bert", "resnet50")
#: (label, session_peak keywords)
SETTINGS = (("arena on, patterns off, 1 run", {"mem_pattern": False, "runs": 1}),
            ("onnxruntime defaults, 2 runs", {"mem_pattern": True, "runs": 2}),
            ("arena on, patterns off, reuse off, 1 run", {"mem_pattern": False, "runs": 1, "mem_reuse": False}),
            ("defaults but reuse off, 2 runs", {"mem_pattern": True, "runs": 2, "mem_reuse": False}))
#: (keep, the execution order its rewrite runs in); the last: a rewrite for the planner's order
#: run in onnxruntime's default order, which does not keep it
RUNS_IN = (("onnxruntime", "default"), ("planner", "priority"), ("planner", "default"))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def measure(name: str, tmp: Path, factor: float = 0.5, keeps: tuple[str, ...] = ("onnxruntime", "planner")) -> list[str]:
    src = materialize(ROOT / "models" / "training" / f"{name}.train.onnx", tmp)
    if Path(src).parent != tmp:  # no weights to fill in: a copy beside the rewrites
        (tmp / Path(src).name).write_bytes(Path(src).read_bytes())
        src = tmp / Path(src).name
    model = load_model(src)
    rows = []
    peaks = {label: session_peak(src, {}, training=True, **kw) for label, kw in SETTINGS}
    in_order = plan_model(src, PlanOptions(order="onnxruntime")).plan.arena_size
    made = {}
    for keep, order in RUNS_IN:
        if keep not in keeps:
            continue
        if keep not in made:
            t = time.perf_counter()
            got = plan_with_budget(model, src, PlanOptions(), factor=factor, keep=keep)
            made[keep] = got, time.perf_counter() - t
            assert got.rewritten is not None, f"{name}: nothing rewritten"
            onnx.save_model(got.rewritten, tmp / f"{name}.{keep}.onnx")
        got, secs = made[keep]
        out = tmp / f"{name}.{keep}.onnx"
        for label, kw in SETTINGS:
            base, new = peaks[label], session_peak(out, {}, training=True, order=order, **kw)
            rows.append(f"| {name} | {factor:g}x | {keep} ({order} order) | {label} | {_mib(got.planned.plan.arena_size)} of "
                        f"{_mib(got.original.plan.arena_size)} ({_mib(in_order)}) | {got.extra_percent:.2f}% | {_mib(base.peak)} "
                        f"({_mib(base.created)}) | {_mib(new.peak)} ({_mib(new.created)}) | "
                        f"{new.peak / base.peak:.3f} | {(new.peak - new.created) / (base.peak - base.created):.3f} "
                        f"| {secs:.1f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("graphs", nargs="*", default=list(GRAPHS))
    parser.add_argument("--factor", type=float, default=0.5, help="the budget, x the arena without one")
    parser.add_argument("--keep", action="append", choices=["onnxruntime", "planner"],
                        help="an order to make rewrites for (repeatable; default both)")
    args = parser.parse_args()
    import onnxruntime

    print(f"Machine: {os.cpu_count()} cores, {platform.machine()}, CPU only; Python {platform.python_version()}, "
          f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.2f}.\n")
    print("| graph | budget | rewrite made for | onnxruntime settings | onnxmem arena MiB (of the original's) | extra FLOPs "
          "| original peak MiB (session made) | rewrite peak MiB (session made) | peak ratio | ratio less the session "
          "| plan s |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="onnxmem-remat-ort-") as tmp:
        for name in args.graphs:
            for row in measure(name, Path(tmp), args.factor, tuple(args.keep or ("onnxruntime", "planner"))):
                print(row, flush=True)


if __name__ == "__main__":
    main()
