"""Plan the nine onnx-wheel models and the shipped models; print a Markdown table.

    python bench/bench_models.py [--solver NAME] [--order NAME] [--repeat 3]

Plan time excludes reading the file: the median of ``--repeat`` runs after one
warm-up run (which may compile solver code and load lazy imports).
``bench/bench_verify.py`` times verification next to a plain onnxruntime run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import onnx

from onnxmem.model import load_model
from onnxmem.planning.pipeline import PlanOptions, default_order, default_solver, plan_loaded

ROOT = Path(__file__).resolve().parent.parent
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
DIMS = {"transformer_block": {"batch": 1, "seq": 128}}


def models() -> list[Path]:
    return sorted(LIGHT.glob("light_*.onnx")) + sorted((ROOT / "models").glob("*.onnx"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--solver", default=default_solver())
    ap.add_argument("--order", default=default_order())
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    head = "| model | nodes | tensors | naive | lower bound | arena | gap | status | plan s |"
    sep = "|---|---:|---:|---:|---:|---:|---:|---|---:|"
    print(f"machine: {platform.machine()}, {platform.system()}, python {platform.python_version()}; "
          f"solver {args.solver}, order {args.order}\n")
    print(head)
    print(sep)
    worst = 0.0
    for path in models():
        name = path.stem.replace("light_", "")
        model = load_model(path)
        opts = PlanOptions(solver=args.solver, order=args.order, dims=DIMS.get(name, {}))
        times = []
        result = None
        if args.repeat > 1:
            plan_loaded(model, path, opts)  # warm-up: compiled solver code, lazy imports
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = plan_loaded(model, path, opts)
            times.append(time.perf_counter() - t0)
        assert result is not None
        p = result.plan
        t = statistics.median(times)
        worst = max(worst, t)
        row = (f"| {name} | {len(p.order)} | {len(p.tensors)} | {p.naive_size:,} | {p.lower_bound:,} | "
               f"{p.arena_size:,} | {p.gap * 100:+.2f}% | {p.solver['status']} | {t:.3f} |")
        print(row, flush=True)
    print(f"\nslowest plan: {worst:.3f} s (target < 0.2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
