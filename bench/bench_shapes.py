"""Shapes by partial evaluation: how many values each inference step leaves unknown, and the time it takes.

For each TorchScript (``legacy``) export of the zoo catalogue in ``models/zoo``
(with ``--all``, every entry), bound with the catalogue's dims, it infers
shapes as ``plan`` does and counts the top-level values (graph inputs and node
outputs) still unknown after onnx's inference (before the evaluation step of
``onnxmem.shapes.shapeeval``), after the evaluation step, and after onnxruntime's
symbolic inference. It times shape inference and the whole plan with the step
and without it (the step replaced by one that evaluates nothing), best of
``--repeat`` runs. With ``--measure`` it also gives each weight-free fixture
random weights, runs it once in onnxruntime (``infer_shapes(measure=True)``)
and counts the evaluated shapes that differ from the measured ones. It writes
the Markdown table to ``docs/shapes.md`` (``--out -`` prints it instead).

    python bench/bench_shapes.py --measure  # legacy exports -> docs/shapes.md
    python bench/bench_shapes.py --all --out -
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from onnxmem.core.errors import OnnxmemError
from onnxmem.model import load_model
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.shapes import infer_shapes, shapeeval
from onnxmem.zoo import ZooModel, load_zoo, machine_info, materialize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import replace_section, with_errors  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "shapes.md"
BEGIN, END = "<!-- bench_shapes: begin -->", "<!-- bench_shapes: end -->"


@contextlib.contextmanager
def evaluation(on: bool, seen: list[shapeeval.Evaluated]) -> Iterator[None]:
    """The evaluation step as it is (each result appended to ``seen``), or one that evaluates nothing."""
    real = shapeeval.evaluate_shapes

    def recorded(*args: Any, **kwargs: Any) -> shapeeval.Evaluated:
        result = real(*args, **kwargs)
        seen.append(result)
        return result

    def nothing(work: Any, inferred: Any, **_: Any) -> shapeeval.Evaluated:
        return shapeeval.Evaluated(inferred)

    shapeeval.evaluate_shapes = recorded if on else nothing  # type: ignore[assignment]
    try:
        yield
    finally:
        shapeeval.evaluate_shapes = real  # type: ignore[assignment]


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(m: ZooModel, repeat: int, work: Path | None) -> dict[str, Any]:
    row: dict[str, Any] = {"model": m.name, "dims": m.dims}
    model = load_model(m.path)
    opts = PlanOptions(dims=m.dims, input_shapes=m.input_shapes)
    seen: list[shapeeval.Evaluated] = []
    try:
        with evaluation(True, seen):
            info = infer_shapes(model, dims=m.dims, input_shapes=m.input_shapes)
            row["infer_on"] = best(lambda: infer_shapes(model, dims=m.dims, input_shapes=m.input_shapes), repeat)
            row["plan_on"] = best(lambda: plan_model(m.path, opts), repeat)
    except OnnxmemError as exc:
        row["error"] = f"with evaluation: {exc}"
        return row
    counts = Counter(info.sources.values())
    row["values"] = len(info.sources)
    row["after_onnx"] = row["values"] - counts["onnx"]
    row["evaluated"] = counts["evaluated"]
    row["after_eval"] = row["after_onnx"] - counts["evaluated"]
    row["after_symbolic"] = row["after_eval"] - counts["symbolic"] - counts["op-rule"]
    row["rounds"] = seen[0].rounds if seen else 0
    row["folded"] = seen[0].folded if seen else 0
    if work is not None and row["evaluated"]:
        path = materialize(m.path, work, seed=0)
        try:
            measured = infer_shapes(load_model(path), dims=m.dims, input_shapes=m.input_shapes,
                                    measure=True, model_path=path)
        except OnnxmemError as exc:
            row["error"] = f"measuring: {exc}"
        else:
            evaluated = [n for n, s in info.sources.items() if s == "evaluated"]
            row["differ"] = sum(1 for n in evaluated if measured.shapes.get(n) != info.shapes[n])
    with evaluation(False, []):
        try:
            row["infer_off"] = best(lambda: infer_shapes(model, dims=m.dims, input_shapes=m.input_shapes), repeat)
            row["plan_off"] = best(lambda: plan_model(m.path, opts), repeat)
        except OnnxmemError as exc:
            row["error"] = f"without evaluation: {exc}"
    return row


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "dims", "values", "unknown after onnx", "made known by evaluation", "unknown after evaluation",
            "unknown after symbolic", "evaluated ≠ measured", "rounds", "folded", "infer s (off / on)",
            "plan s (off / on)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---" + "|---:" * (len(head) - 2) + "|"]
    for r in rows:
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items()) or "—"
        lines.append("| " + " | ".join([
            r["model"], dims, str(r.get("values", "—")), str(r.get("after_onnx", "—")),
            str(r.get("evaluated", "—")), str(r.get("after_eval", "—")), str(r.get("after_symbolic", "—")),
            str(r.get("differ", "—")),
            str(r.get("rounds", "—")), str(r.get("folded", "—")),
            f"{_s(r.get('infer_off'))} / {_s(r.get('infer_on'))}", f"{_s(r.get('plan_off'))} / {_s(r.get('plan_on'))}",
        ]) + " |")
    return with_errors(lines, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="every catalogue entry, not only the legacy exports")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing; the best is shown")
    ap.add_argument("--measure", action="store_true",
                    help="check the evaluated shapes against one onnxruntime run (random weights and inputs)")
    ap.add_argument("--out", default=str(DOC), help="the Markdown file whose table is replaced, or - to print")
    args = ap.parse_args(argv)
    zoo = load_zoo(ROOT / "models" / "zoo")
    chosen = [m for m in zoo if args.all or m.info.get("exporter") == "legacy"]
    info = machine_info()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in chosen:
            rows.append(measure(m, args.repeat, Path(tmp) if args.measure else None))
            print(f"  {m.name} done", file=sys.stderr)
    command = "python bench/bench_shapes.py" + (" --all" if args.all else "") + (" --measure" if args.measure else "")
    text = (f"`{command}` on {info['platform']}, {info['cpus']} cpus, {info['memory_gib']} GiB, "
            f"python {info['python']}, onnx {info['onnx']}, onnxruntime {info['onnxruntime']}; "
            f"times are the best of {args.repeat} runs.\n\n" + table(rows))
    if args.out == "-":
        print(text)
        return 0
    replace_section(Path(args.out), BEGIN, END, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
