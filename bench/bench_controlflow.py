"""Plan and verify models with If, Loop and Scan bodies: every body tensor in the arena.

Usage: python bench/bench_controlflow.py [--out DIR] [--ml]

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

The decoder Loops (``tests/nested_models.py`` ``decoder_loop``: a carried sequence that grows by
one row per iteration, attention over it) are planned for their trip bound: ``decoder_loop``
its constant 6 iterations, ``decoder_loop_n`` (trip count the input ``n``) and
``decoder_loop_until`` (stopped by its condition after ``limit`` iterations) ``--max-trips 32``;
they run 32 and 20 iterations. ``emit_loop`` carries a state of one shape and stacks a token per
iteration over the trip count ``n`` (``--max-trips 32``, run with n=32).

``if_sample_rate`` is planned with ``--inputs`` ``sr=16000``: its condition ``Equal(sr, 16000)``
decides the branch, so the plan holds the network branch alone (its other branch cannot run
at these shapes). With ``--ml``, a second table: scikit-learn pipelines converted by skl2onnx
(``zipmap: False``, batch 16 of 8 features; both packages must be installed), planned with
no ``--measure-shapes`` on the ai.onnx.ml shape rules and verified.
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

from onnxmem.planning.pipeline import PlanOptions, check_decided, plan_model  # noqa: E402
from onnxmem.runtime.peak import comparable_peak, ort_peak  # noqa: E402
from onnxmem.verify.run import VerifyOptions, verify_plan  # noqa: E402
from tests.nested_models import CONTROL_FLOW_MODELS, decoder_loop, emit_loop, if_sample_rate  # noqa: E402

SR = {"sr": np.array(16000, np.int64)}
ROW = {"x": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}
INPUTS = {"network_in_if": {"x": np.ones((8, 64), np.float32), **SR}, "if_sample_rate": SR,
          "decoder_loop_n": {**ROW, "n": np.array(32, np.int64)},
          "decoder_loop_until": {**ROW, "limit": np.array(20, np.int64)},
          "emit_loop": {**ROW, "n": np.array(32, np.int64)}}
#: plan options per model (the rest default)
OPTIONS = {"if_sample_rate": PlanOptions(input_shapes={"x": (8, 64)}, inputs=SR),
           "decoder_loop_n": PlanOptions(max_trips=32), "decoder_loop_until": PlanOptions(max_trips=32),
           "emit_loop": PlanOptions(max_trips=32)}
#: the decoder Loops whose carried sequence grows per iteration
DECODERS = {"decoder_loop": lambda: decoder_loop("const"), "decoder_loop_n": lambda: decoder_loop("input"),
            "decoder_loop_until": lambda: decoder_loop("cond"), "emit_loop": emit_loop}
HEADER = ("| model | arena B | bound B | naive B | subgraphs | body tensors | regions B | nodes run | verify "
          "| plan s | verify s | onnxruntime / arena |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")


def row(name: str, path: Path, options: PlanOptions | None = None,
        inputs: dict[str, np.ndarray] | None = None) -> str:
    """One table row: plan, verify and onnxruntime's peak of the model at ``path``."""
    t0 = time.perf_counter()
    planned = plan_model(path, options)
    plan_s = time.perf_counter() - t0
    plan = planned.plan
    t1 = time.perf_counter()
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view, options=VerifyOptions(inputs=inputs))
    verify_s = time.perf_counter() - t1
    body = sum(1 for t in plan.tensors if t.graph)
    regions = sum(t.size for t in plan.tensors if t.kind == "region")
    ran = report.execution.nodes_run if report.execution else 0
    result = "verified" if report.ok else f"FAILED: {report.first}"
    feeds = check_decided(planned.model, plan, inputs)
    peak = ort_peak(planned.model, planned.view, level="disable", model_path=path, inputs=feeds).peak
    same = comparable_peak(peak, planned.view, plan.io)
    ratio = f"{same / plan.arena_size:.2f}" if same is not None and plan.arena_size else "-"
    return (f"| {name} | {plan.arena_size:,} | {plan.lower_bound:,} | {plan.naive_size:,} | {len(plan.subgraphs)} "
            f"| {body} | {regions:,} | {ran} | {result} | {plan_s:.3f} | {verify_s:.3f} | {ratio} |")


def sklearn_models(out: Path) -> dict[str, Path]:
    """scikit-learn pipelines fitted on seeded data and converted by skl2onnx without ZipMap."""
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    x, y = make_classification(200, 8, n_informative=5, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    fitted = {
        "StandardScaler+LogisticRegression": make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
        "RandomForest (10 trees, depth 5)": RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0),
        "GradientBoosting (10 stages, depth 3)": GradientBoostingClassifier(n_estimators=10, max_depth=3,
                                                                            random_state=0),
        "SVC (rbf, probabilities)": SVC(probability=True, random_state=0),
    }
    paths = {}
    for i, (name, est) in enumerate(fitted.items()):
        est.fit(x, y)
        onx = to_onnx(est, x[:1], options={id(est): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
        onx.ir_version = 10
        paths[name] = out / f"sklearn_{i}.onnx"
        onnx.save(onx, paths[name])
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for the built models (default: a temporary one)")
    ap.add_argument("--ml", action="store_true", help="also scikit-learn pipelines (skl2onnx)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="onnxmem-controlflow-"))
    out.mkdir(parents=True, exist_ok=True)
    paths = {"control_flow (shipped)": ROOT / "models" / "control_flow.onnx"}
    for name, build in {**CONTROL_FLOW_MODELS, "if_sample_rate": if_sample_rate, **DECODERS}.items():
        paths[name] = out / f"{name}.onnx"
        onnx.save(build(), paths[name])
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, onnx {onnx.__version__}")
    print()
    plan_model(paths["if_peaks"])  # warm-up, untimed
    print(HEADER)
    for name, path in paths.items():
        print(row(name, path, OPTIONS.get(name), INPUTS.get(name)))
    if args.ml:
        print()
        print(HEADER)
        for name, path in sklearn_models(out).items():
            batch = PlanOptions(input_shapes={onnx.load(path).graph.input[0].name: (16, 8)})
            print(row(name, path, batch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
