"""Plan and verify models with If, Loop and Scan bodies: every body tensor in the arena.

Usage: python bench/bench_controlflow.py [--out DIR]

The models are the small control-flow models of the tests (``tests/nested_models.py``,
written to ``--out``, default a temporary folder) and the shipped ``models/control_flow.onnx``.
For each: plan it with the default options, then ``verify_plan`` (static proof and
execution of every node, the chosen If branch and every Loop iteration and Scan step
included, inside one arena; inputs seeded random, except ``network_in_if``, whose
``sr`` is 16000 so that the network branch runs). Prints a Markdown table: the arena,
the lower bound, naive (no reuse) size, the number of subgraphs and of their tensors,
the bytes of the owners' regions, the nodes executed in the arena, the verify result
and times, and onnxruntime's own peak (``onnxmem compare``'s ORT_DISABLE_ALL figure, one
run on seeded random inputs) over the arena. One model is planned first, untimed, so
that the compiled solvers' start is not in the first row.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnxmem.planning.pipeline import plan_model  # noqa: E402
from onnxmem.runtime.peak import comparable_peak, ort_peak  # noqa: E402
from onnxmem.verify.run import VerifyOptions, verify_plan  # noqa: E402
from tests.nested_models import CONTROL_FLOW_MODELS  # noqa: E402

INPUTS = {"network_in_if": {"x": np.ones((8, 64), np.float32), "sr": np.array(16000, np.int64)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for the built models (default: a temporary one)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="onnxmem-controlflow-"))
    out.mkdir(parents=True, exist_ok=True)
    paths = {"control_flow (shipped)": ROOT / "models" / "control_flow.onnx"}
    for name, build in CONTROL_FLOW_MODELS.items():
        paths[name] = out / f"{name}.onnx"
        onnx.save(build(), paths[name])
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, onnx {onnx.__version__}")
    print()
    plan_model(paths["if_peaks"])  # warm-up, untimed
    print("| model | arena B | bound B | naive B | subgraphs | body tensors | regions B | nodes run | verify "
          "| plan s | verify s | onnxruntime / arena |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for name, path in paths.items():
        t0 = time.perf_counter()
        planned = plan_model(path)
        plan_s = time.perf_counter() - t0
        plan = planned.plan
        opts = VerifyOptions(inputs=INPUTS.get(name))
        t1 = time.perf_counter()
        report = verify_plan(planned.model, plan, model_path=path, view=planned.view, options=opts)
        verify_s = time.perf_counter() - t1
        body = sum(1 for t in plan.tensors if t.graph)
        regions = sum(t.size for t in plan.tensors if t.kind == "region")
        ran = report.execution.nodes_run if report.execution else 0
        result = "verified" if report.ok else f"FAILED: {report.first}"
        peak = ort_peak(planned.model, planned.view, level="disable", model_path=path).peak
        same = comparable_peak(peak, planned.view, plan.io)
        ratio = f"{same / plan.arena_size:.2f}" if same is not None and plan.arena_size else "-"
        print(f"| {name} | {plan.arena_size:,} | {plan.lower_bound:,} | {plan.naive_size:,} | {len(plan.subgraphs)} "
              f"| {body} | {regions:,} | {ran} | {result} | {plan_s:.3f} | {verify_s:.3f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
