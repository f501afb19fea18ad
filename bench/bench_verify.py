"""Verify time next to a plain onnxruntime run, for the nine onnx-wheel models.

Usage: python bench/bench_verify.py [--repeat N] [MODEL.onnx ...]

For each model: plan it (default options), then time ``verify_plan`` (static
proof + execution in one arena + the same nodes again outside the arena, the
reference + the whole-model run, for information) and a plain
onnxruntime run (one session, ORT_DISABLE_ALL, one thread: creation and one
run), best of ``--repeat``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import onnx

from onnxmem.pipeline import PlanOptions, plan_model
from onnxmem.runtime import load_with_weights, make_session, random_inputs
from onnxmem.verify import verify_plan

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def plain_run(model: onnx.ModelProto, path: Path, shapes: dict) -> float:
    t0 = time.perf_counter()
    full = load_with_weights(model, path)
    sess = make_session(full)
    sess.run(None, random_inputs(full, shapes, 0))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    models = args.models or sorted(LIGHT.glob("light_*.onnx"))
    print(f"machine: {platform.machine()}, {__import__('os').cpu_count()} cores; onnxruntime "
          f"{__import__('onnxruntime').__version__}, CPU")
    print()
    print("| model | nodes run | arena | static proof | verify (total) | of which in the arena | outside the arena "
          "| whole-model run | plain onnxruntime run | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in models:
        p = plan_model(path, PlanOptions())
        shapes = {n: p.view.tensors[n].shape for n in p.view.inputs}
        best_v = best_loop = best_private = best_whole = best_plain = float("inf")
        static = 0.0
        nodes = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
            took = time.perf_counter() - t0
            if not report.ok:
                raise SystemExit(f"{path.name}: {report.first}")
            assert report.execution is not None
            if took < best_v:
                best_v, best_loop = took, report.execution.seconds
                best_private, best_whole = report.execution.private_seconds, report.execution.reference_seconds
                static, nodes = report.static_seconds, report.execution.nodes_run
            best_plain = min(best_plain, plain_run(p.model, path, shapes))
        print(f"| {path.stem.removeprefix('light_')} | {nodes} | {p.plan.arena_size / 2**20:.2f} MiB | "
              f"{static * 1000:.1f} ms | {best_v:.2f} s | {best_loop:.2f} s | {best_private:.2f} s | "
              f"{best_whole:.2f} s | {best_plain:.2f} s | "
              f"{best_v / best_plain:.1f}x |")


if __name__ == "__main__":
    main()
