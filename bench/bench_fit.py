"""``onnxmem fit`` against real onnxruntime sessions: a table in docs/fit.md.

For each zoo model with a ranged dim (``MODELS``: a batch range for the vision models, a
sequence or KV-cache range for the transformers):

1. the budget is the fit total at the range's geometric middle, rounded up to a MiB, so that
   the answer falls inside the range; ``fit`` (:func:`onnxmem.planning.fit.fit_model`, fixed
   cost measured by :func:`onnxmem.runtime.fixed_cost`) gives the largest value that fits
   and the prediction at the next value (which must exceed the budget);
2. at the answer, real onnxruntime CPU sessions of the model with its seeded random weights
   (:func:`onnxmem.zoo.materialize`), each in a fresh child
   (:func:`onnxmem.runtime.session_peak`): the growth of the resident size from before the
   session is created to its peak over 2 runs, at ``ORT_ENABLE_BASIC`` (the graph onnxmem
   plans, with the constants folded as onnxmem's ``--fold on`` folds them) with memory
   patterns off and on (onnxruntime's default), and at ``ORT_ENABLE_ALL`` (onnxruntime's
   default level: a fused graph);
3. the formula estimates users rely on, at the same point: weights x 2; weights x 1.2 (the
   "20% overhead" rule of thumb for inference); weights + every activation of one forward
   summed (the plan's no-reuse arena).

Each estimate is shown as its ratio to the measured peak at ``ORT_ENABLE_BASIC`` with memory
patterns off (the measurement closest to what the plan models), and the prediction also
against the other two measurements.

    python bench/bench_fit.py                       # all models -> docs/fit.md
    python bench/bench_fit.py --only resnet50_batch --out -
    python bench/bench_fit.py --only why              # the second table alone
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
DOC = ROOT / "docs" / "fit.md"
BEGIN, END = "<!-- bench_fit: begin -->", "<!-- bench_fit: end -->"
WHY_BEGIN, WHY_END = "<!-- bench_fit_why: begin -->", "<!-- bench_fit_why: end -->"
#: the model and batches of the second table: onnxruntime's arena and memory patterns on and off
WHY_MODEL, WHY_BATCHES = "resnet50_batch.onnx", (1, 8, 32)

#: (name, fixture, the searched dim's range, dims bound to one value, note)
MODELS: list[tuple[str, str, dict[str, tuple[int, int]], dict[str, int], str]] = [
    ("resnet50_batch", "resnet50_batch.onnx", {"batch": (1, 64)}, {}, ""),
    ("vit_base_batch", "vit_base_batch.onnx", {"batch": (1, 64)}, {}, ""),
    ("unet_batch", "unet.onnx", {"batch": (1, 16)}, {}, "batch dim named in a copy"),
    ("bert_base_dynamic", "bert_base_dynamic.onnx", {"sequence": (1, 512)}, {"batch": 8}, "batch 8"),
    ("llama_4l_dynamic", "llama_4l_dynamic.onnx", {"sequence": (1, 2048)}, {}, "prompt length"),
    ("gpt2_past_dynamic", "gpt2_past_dynamic.onnx", {"past_sequence": (0, 1023)}, {}, "KV cache"),
    ("llama_4l_past_dynamic", "llama_4l_past_dynamic.onnx", {"past_sequence": (0, 4095)}, {}, "KV cache"),
]
#: the sessions measured at the answer: (column, optimization level, memory patterns)
SESSIONS = [("basic", "ORT_ENABLE_BASIC", True), ("basic_nopattern", "ORT_ENABLE_BASIC", False),
            ("all", "ORT_ENABLE_ALL", True)]
REFERENCE = "basic_nopattern"


def _shapes(model: Any, point: dict[str, int]) -> dict[str, tuple[int, ...]]:
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        out[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else point[d.dim_param]
                             for d in vi.type.tensor_type.shape.dim)
    return out


def run_model(name: str, fixture: str, box: dict[str, tuple[int, int]], bound: dict[str, int],
              work: Path) -> dict[str, Any]:
    from bench_range import batch_copy

    from onnxmem.model import load_model
    from onnxmem.planning import PlanOptions
    from onnxmem.planning.fit import fit_model
    from onnxmem.plans.range import instantiate
    from onnxmem.runtime import fixed_cost, session_peak
    from onnxmem.zoo import materialize

    src = ROOT / "models" / "zoo" / fixture
    path = materialize(src, work)
    if name == "unet_batch":
        path = batch_copy(path, work / "unet_batch.onnx")
    model = load_model(path)
    fixed = fixed_cost("cpu").session
    opts = PlanOptions(dims=bound)
    (dim, (lo, hi)), = box.items()
    probe = fit_model(model, path, 2**62, box, opts, fixed=fixed)
    mid = int(round(math.sqrt(max(lo, 1) * hi)))
    budget = -(-probe.footprint({**bound, dim: mid}).total // 2**20) * 2**20
    report = fit_model(model, path, budget, box, opts, fixed=fixed)
    fit = report.answer
    row: dict[str, Any] = {"model": name, "dim": dim, "range": f"{lo}:{hi}", "budget": budget,
                           "answer": fit.value, "predicted": fit.at.total, "weights": fit.at.weights,
                           "arena": fit.at.arena, "fixed": fixed,
                           "next_predicted": fit.next.total if fit.next else None}
    if fit.value is None:
        row["error"] = fit.reason
        return row
    point = {**bound, dim: fit.value}
    shapes = _shapes(model, point)
    for col, level, pattern in SESSIONS:
        peak = session_peak(path, shapes, level=level, mem_pattern=pattern)
        row[col] = peak.peak
        print(f"  {name} {dim}={fit.value} {col}: {peak.peak / 2**20:.1f} MiB", file=sys.stderr)
    naive = instantiate(report.plan, {dim: fit.value}).naive_size
    row["x2"] = 2 * fit.at.weights
    row["x1.2"] = int(1.2 * fit.at.weights)
    row["sum"] = fit.at.weights + naive
    return row


def why(work: Path) -> str:
    """The second table: resnet50 at a few batches, the prediction against sessions with
    onnxruntime's CPU arena and memory patterns each on and off (ORT_ENABLE_BASIC)."""
    from _common import mib

    from onnxmem.model import load_model
    from onnxmem.planning.fit import fit_model
    from onnxmem.runtime import fixed_cost, session_peak
    from onnxmem.zoo import materialize

    path = materialize(ROOT / "models" / "zoo" / WHY_MODEL, work)
    report = fit_model(load_model(path), path, 2**62, {"batch": (1, max(WHY_BATCHES))},
                       fixed=fixed_cost("cpu").session)
    lines = ["| batch | predicted | arena (plan) | session created | arena on, patterns on | arena on, patterns off "
             "| arena off, patterns on | arena off, patterns off |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in WHY_BATCHES:
        feet = report.footprint({"batch": b})
        cells = []
        created = 0
        for arena in (True, False):
            for pattern in (True, False):
                got = session_peak(path, {"image": (b, 3, 224, 224)}, level="ORT_ENABLE_BASIC",
                                   mem_pattern=pattern, arena=arena)
                created = max(created, got.created)
                cells.append(f"{mib(got.peak)} ({got.peak / feet.total:.2f}x)")
        lines.append(f"| {b} | {mib(feet.total)} | {mib(feet.arena)} | {mib(created)} | {' | '.join(cells)} |")
        print(f"  why batch {b}: {cells}", file=sys.stderr)
    return "\n".join(lines) + "\n"


def render(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    from _common import mib, versions, with_errors

    ref = REFERENCE

    def ratio(x: int | None, r: dict[str, Any]) -> str:
        return "—" if x is None or not r.get(ref) else f"{x / r[ref]:.2f}"

    lines = [
        f"Measured on a 2-core x86 CPU without a GPU ({versions(info)}); `python bench/bench_fit.py` "
        "(`make bench-fit`). MiB; ratios are to the measured peak at ORT_ENABLE_BASIC with memory patterns "
        "off (*measured*).",
        "",
        "| model | dim (range) | budget | fit | predicted | next predicted | measured | "
        "measured, patterns on | measured, ORT_ENABLE_ALL | predicted / measured | within budget | "
        "weights x 2 | weights x 1.2 | weights + activations summed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        if r.get("error"):
            continue
        within = "yes" if r[ref] <= r["budget"] else f"no (+{(r[ref] - r['budget']) / 2**20:.1f})"
        lines.append(
            f"| {r['model']} | {r['dim']} ({r['range']}) | {mib(r['budget'])} | {r['answer']} | "
            f"{mib(r['predicted'])} | {mib(r['next_predicted'])} | {mib(r[ref])} | {mib(r['basic'])} | "
            f"{mib(r['all'])} | {ratio(r['predicted'], r)} | {within} | {ratio(r['x2'], r)} | "
            f"{ratio(r['x1.2'], r)} | {ratio(r['sum'], r)} |")
    return with_errors(lines, rows)


def main(argv: list[str] | None = None) -> int:
    from _common import replace_section

    from onnxmem.zoo.results import machine_info

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated model names")
    ap.add_argument("--work", default=str(ROOT / "results" / "bench-fit"), help="folder for materialized models")
    ap.add_argument("--out", default=str(DOC), help="document to update, or - to print")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, fixture, box, bound, _note in MODELS:
        if only and name not in only:
            continue
        print(f"{name} ...", file=sys.stderr)
        rows.append(run_model(name, fixture, box, bound, work))
    text = render(rows, machine_info())
    why_text = why(work) if not only or "why" in only else ""
    if args.out == "-":
        print(text + why_text)
    else:
        if rows:
            replace_section(Path(args.out), BEGIN, END, text)
        if why_text:
            replace_section(Path(args.out), WHY_BEGIN, WHY_END, why_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
