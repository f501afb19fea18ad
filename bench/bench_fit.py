"""``onnxmem fit`` against real onnxruntime sessions: tables in docs/fit.md.

For each zoo model with a ranged dim (``MODELS``: a batch range for the vision models, a
sequence or KV-cache range for the transformers), on its seeded random weights
(:func:`onnxmem.zoo.materialize`):

1. the budget is fit's total at the range's geometric middle with ``runtime="rule"`` (the
   session made once, onnxruntime's activations by the rule), rounded up to a MiB, so that
   the answer falls inside the range;
2. ``fit`` at its defaults (:func:`onnxmem.planning.fit.fit_model`: ``--optimize all``,
   ``runtime="measure"``, memory patterns on) gives the largest value that fits, the
   prediction there and at the next value; ``runtime="rule"`` (no run of the model) and
   ``runtime="plan"`` (weights + arena + io + fixed, the plan's own view) are computed at the
   same answer;
3. the reality check: a real default session (``ORT_ENABLE_ALL``, memory patterns on, CPU
   arena on, as ``SessionOptions()`` leaves them) at the answer and at the next value, each in
   a fresh child (:func:`onnxmem.runtime.session_peak`): the growth of the resident size from
   before the session is made to its peak over 2 runs;
4. the formula estimates users rely on, at the same point: weights x 2; weights x 1.2;
   weights + every activation of one forward summed (the no-reuse arena of the graph as
   written).

``--only terms`` gives the second table: each term of onnxruntime's process measured on its
own at the answer of step 2 (prepacking on and off, memory patterns on and off, run 1 and
run 2). ``--only arena`` gives the third: the U-Net at a few batches with onnxruntime's own CPU
arena and with a process-wide arena of each extension strategy (kNextPowerOfTwo, kSameAsRequested).

    python bench/bench_fit.py                       # all models -> docs/fit.md
    python bench/bench_fit.py --only resnet50_batch --out -
    python bench/bench_fit.py --only terms              # the second table alone
    python bench/bench_fit.py --only arena              # the third: the arena's extension strategies
    python bench/bench_fit.py --only scratch            # the fourth: kernel scratch, from the profiler
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
TERMS_BEGIN, TERMS_END = "<!-- bench_fit_terms: begin -->", "<!-- bench_fit_terms: end -->"
ARENA_BEGIN, ARENA_END = "<!-- bench_fit_arena: begin -->", "<!-- bench_fit_arena: end -->"
SCRATCH_BEGIN, SCRATCH_END = "<!-- bench_fit_scratch: begin -->", "<!-- bench_fit_scratch: end -->"
#: the third table: the U-Net over these batches, with each of onnxruntime's arena extension strategies
ARENA_MODEL, ARENA_BATCHES = "unet_batch", (4, 5, 6, 7)
DEFAULT = "ORT_ENABLE_ALL"


def _model(name: str, fixture: str, work: Path) -> Path:
    from bench_range import batch_copy

    from onnxmem.zoo import materialize

    path = materialize(ROOT / "models" / "zoo" / fixture, work)
    return batch_copy(path, work / "unet_batch.onnx") if name == "unet_batch" else path


def run_model(name: str, fixture: str, box: dict[str, tuple[int, int]], bound: dict[str, int],
              work: Path) -> dict[str, Any]:
    from onnxmem.model import load_model
    from onnxmem.planning import PlanOptions, plan_range
    from onnxmem.planning.fit import fit_model
    from onnxmem.planning.process import input_shapes
    from onnxmem.plans.range import instantiate
    from onnxmem.runtime import fixed_cost, session_peak

    path = _model(name, fixture, work)
    model = load_model(path)
    fixed = fixed_cost("cpu").session
    opts = PlanOptions(dims=bound)
    (dim, (lo, hi)), = box.items()
    mid = int(round(math.sqrt(max(lo, 1) * hi)))
    at_mid = fit_model(model, path, 2**62, {dim: (mid, mid)}, opts, fixed=fixed, runtime="rule").answer.at.total
    budget = -(-at_mid // 2**20) * 2**20
    report = fit_model(model, path, budget, box, opts, fixed=fixed)
    fit = report.answer
    process = report.process
    row: dict[str, Any] = {"model": name, "dim": dim, "range": f"{lo}:{hi}", "budget": budget,
                           "answer": fit.value, "predicted": fit.at.total, "weights": fit.at.weights,
                           "arena": fit.at.arena, "fixed": fixed, "planned": report.sizes.plan is not None,
                           "next_predicted": fit.next.total if fit.next else None,
                           "factor": process.factor if process else None,
                           "source": process.source if process else "", "runs": len(report.measured)}
    if fit.value is None:
        row["error"] = fit.reason
        return row
    point = {dim: fit.value}
    one = {dim: (fit.value, fit.value)}
    row["rule"] = fit_model(model, path, 2**62, one, opts, fixed=fixed, runtime="rule").answer.at.total
    row["plan_view"] = fit_model(model, path, 2**62, one, opts, fixed=fixed, runtime="plan").answer.at.total
    for col, value in (("measured", fit.value), ("measured_next", fit.value + 1 if fit.next else None)):
        if value is None:
            row[col] = None
            continue
        got = session_peak(path, input_shapes(model, {**bound, dim: value}), level=DEFAULT)
        row[col] = got.peak + got.inputs
        print(f"  {name} {dim}={value}: {row[col] / 2**20:.1f} MiB", file=sys.stderr)
    naive = instantiate(plan_range(model, path, box, opts), point).naive_size
    row["x2"] = 2 * fit.at.weights
    row["x1.2"] = int(1.2 * fit.at.weights)
    row["sum"] = fit.at.weights + naive
    return row


def terms(rows: list[dict[str, Any]], work: Path) -> str:
    """The second table: at each model's answer, the session made and run with prepacking and
    memory patterns each on and off (all other settings a default session's)."""
    from _common import mib

    from onnxmem.model import load_model
    from onnxmem.planning.process import activation_factor, input_shapes
    from onnxmem.runtime import session_peak

    lines = ["| model | point | weights | arena (plan) | created | held | created, no prepacking | "
             "held, no prepacking | run 1 | run 2 | run 2, patterns off | factor, patterns on | factor, patterns off |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("error") or r["answer"] is None:
            continue
        name, fixture, _, bound, _ = next(m for m in MODELS if m[0] == r["model"])
        path = _model(name, fixture, work)
        shapes = input_shapes(load_model(path), {**bound, r["dim"]: r["answer"]})
        on = session_peak(path, shapes, level=DEFAULT)
        bare = session_peak(path, shapes, level=DEFAULT, prepack=False)
        off = session_peak(path, shapes, level=DEFAULT, mem_pattern=False)
        f_on = activation_factor(on, on.held, on.created, r["arena"])
        f_off = activation_factor(off, off.held, off.created, r["arena"])
        lines.append(f"| {name} | {r['dim']}={r['answer']} | {mib(r['weights'])} | {mib(r['arena'])} | "
                     f"{mib(on.created)} | {mib(on.held)} | {mib(bare.created)} | {mib(bare.held)} | "
                     f"{mib(on.runs[0])} | {mib(on.runs[1])} | {mib(off.runs[1])} | "
                     f"{'—' if f_on is None else f'{f_on:.2f}'} | {'—' if f_off is None else f'{f_off:.2f}'} |")
        print(f"  terms {name}: {lines[-1]}", file=sys.stderr)
    return "\n".join(lines) + "\n"


def arena_table(work: Path) -> str:
    """The third table: the U-Net's default session at a few batches, with its own CPU arena and
    with a process-wide arena of each extension strategy: the peak after its creation and each run."""
    from _common import mib

    from onnxmem.model import load_model
    from onnxmem.planning.process import input_shapes
    from onnxmem.runtime import session_peak

    name, fixture, _, bound, _ = next(m for m in MODELS if m[0] == ARENA_MODEL)
    path = _model(name, fixture, work)
    model = load_model(path)
    kinds = [("the session's own arena", None), ("kNextPowerOfTwo", "next-power-of-two"),
             ("kSameAsRequested", "same-as-requested")]
    lines = ["| batch | " + " | ".join(f"{k}: run 1 | {k}: run 2" for k, _ in kinds) + " |",
             "|---:|" + "---:|" * (2 * len(kinds))]
    for b in ARENA_BATCHES:
        shapes = input_shapes(model, {**bound, "batch": b})
        cells = []
        for _, extend in kinds:
            got = session_peak(path, shapes, level=DEFAULT, arena_extend=extend)
            cells += [mib(got.runs[0]), mib(got.runs[1])]
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
        print(f"  arena {name} batch {b}: {lines[-1]}", file=sys.stderr)
    return "\n".join(lines) + "\n"


def scratch_table(work: Path) -> str:
    """The fourth table: kernel scratch, from onnxruntime's profiler at ORT_ENABLE_ALL (memory patterns
    off, :func:`onnxmem.runtime.peak.ort_peak`) at the range's geometric middle: the arena-rounded
    peak with scratch (``mem_in_use_peak``) less the bytes its allocator held for tensors at its
    fullest kernel (``mem_bytes_in_use``)."""
    from _common import mib

    from onnxmem.planning import PlanOptions, plan_model
    from onnxmem.runtime.peak import ort_peak

    lines = ["| model | point | plan arena (as written) | onnxruntime peak (requested) | held (rounded) | "
             "arena peak (rounded, scratch included) | scratch |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, fixture, box, bound, _ in MODELS:
        path = _model(name, fixture, work)
        (dim, (lo, hi)), = box.items()
        point = {**bound, dim: int(round(math.sqrt(max(lo, 1) * hi)))}
        planned = plan_model(path, PlanOptions(dims=point))
        got = ort_peak(planned.model, planned.view, level="all", model_path=path)
        scratch = None if got.arena_peak is None or got.held is None else got.arena_peak - got.held
        lines.append(f"| {name} | {', '.join(f'{k}={v}' for k, v in point.items())} | "
                     f"{mib(planned.plan.arena_size)} | {mib(got.peak)} | {mib(got.held)} | {mib(got.arena_peak)} | "
                     f"{mib(scratch)} |")
        print(f"  scratch {lines[-1]}", file=sys.stderr)
    return "\n".join(lines) + "\n"


def render(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    from _common import mib, versions, with_errors

    def ratio(x: int | None, r: dict[str, Any]) -> str:
        return "—" if x is None or not r.get("measured") else f"{x / r['measured']:.2f}"

    lines = [
        f"Measured on a 2-core x86 CPU without a GPU ({versions(info)}); `python bench/bench_fit.py` "
        "(`make bench-fit`). MiB; *measured*: a real default session at the answer (ORT_ENABLE_ALL, memory "
        "patterns on, CPU arena on) in a fresh process, the growth of its resident size to its peak over 2 runs, "
        "plus its inputs; ratios are to it.",
        "",
        "| model | dim (range) | budget | fit | graph planned | activation factor | predicted | measured | "
        "predicted / measured | within budget | next predicted | next measured | rule / measured | "
        "plan's view / measured | weights x 2 | weights x 1.2 | weights + activations summed |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.get("error"):
            continue
        within = "yes" if r["measured"] <= r["budget"] else f"no (+{(r['measured'] - r['budget']) / 2**20:.1f})"
        nxt = r["measured_next"]
        nxt_cell = "—" if nxt is None else f"{mib(nxt)} ({'over' if nxt > r['budget'] else 'within'})"
        graph = "range plan" if r["planned"] else "point plans"
        lines.append(
            f"| {r['model']} | {r['dim']} ({r['range']}) | {mib(r['budget'])} | {r['answer']} | {graph} | "
            f"{r['factor']:.2f} ({r['source']}) | {mib(r['predicted'])} | {mib(r['measured'])} | "
            f"{ratio(r['predicted'], r)} | {within} | {mib(r['next_predicted'])} | {nxt_cell} | "
            f"{ratio(r['rule'], r)} | {ratio(r['plan_view'], r)} | {ratio(r['x2'], r)} | {ratio(r['x1.2'], r)} | "
            f"{ratio(r['sum'], r)} |")
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
    if only and "terms" in only and not rows:
        rows = [run_model(*m[:4], work) for m in MODELS]
    if only and only <= {"arena", "scratch"}:
        tables = [(f(work), marks) for k, f, marks in (("arena", arena_table, (ARENA_BEGIN, ARENA_END)),
                                                       ("scratch", scratch_table, (SCRATCH_BEGIN, SCRATCH_END)))
                  if k in only]
        for text, (begin, end) in tables:
            if args.out == "-":
                print(text)
            else:
                replace_section(Path(args.out), begin, end, text)
        return 0
    text = render(rows, machine_info())
    terms_text = terms(rows, work) if not only or "terms" in only else ""
    if args.out == "-":
        print(text + terms_text)
    else:
        if rows:
            replace_section(Path(args.out), BEGIN, END, text)
        if terms_text:
            replace_section(Path(args.out), TERMS_BEGIN, TERMS_END, terms_text)
        if not only:
            replace_section(Path(args.out), ARENA_BEGIN, ARENA_END, arena_table(work))
            replace_section(Path(args.out), SCRATCH_BEGIN, SCRATCH_END, scratch_table(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
