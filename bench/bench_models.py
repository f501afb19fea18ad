"""Plan the nine onnx-wheel models and the shipped models; print a Markdown table.

    python bench/bench_models.py [--solver NAME] [--order NAME] [--repeat 3] [--verify]

Plan time excludes reading the file (median of ``--repeat`` runs). With
``--verify``, each plan is also executed in one arena with onnxruntime on CPU
and the verify time is shown next to a plain whole-model onnxruntime run.
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
from onnxmem.pipeline import PlanOptions, default_order, default_solver, plan_loaded

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
    ap.add_argument("--verify", action="store_true", help="also verify each plan on CPU")
    args = ap.parse_args(argv)
    head = "| model | nodes | tensors | naive | lower bound | arena | gap | status | plan s |"
    sep = "|---|---:|---:|---:|---:|---:|---:|---|---:|"
    if args.verify:
        head += " verify s | onnxruntime s | verify |"
        sep += "---:|---:|---|"
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
        if args.verify:
            from onnxmem.verify import verify_planned  # type: ignore[attr-defined]

            rep = verify_planned(result)
            row += f" {rep.seconds:.3f} | {rep.reference_seconds:.3f} | {'ok' if rep.ok else 'FAIL'} |"
        print(row, flush=True)
    print(f"\nslowest plan: {worst:.3f} s (target < 0.2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
