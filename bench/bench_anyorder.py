#!/usr/bin/env python
"""The bound for every order against each plan: how far any reordering could take it.

For each model of up to ``onnxmem.scheduling.anyorder.MAX_NODES`` nodes (the shipped examples,
the training sets of models/training, and the zoo, whose weights are filled in as
``onnxmem.zoo.fixtures.materialize`` does), ``plan`` with its defaults (``auto`` order, in-place
on, 64-byte alignment): the bound every order must reach (``extra.any_order_lower_bound``), the
bound of the plan's order (``lower_bound``), the file order's, and the arena. Where the plan's
bound equals the bound for every order, no order of the graph needs less: the order is proven
optimal. Every figure is computed, none is timed, so the table is the same on any machine.

    python bench/bench_anyorder.py             # the table, and docs/order.md's section (make bench-anyorder)
    python bench/bench_anyorder.py --no-doc
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import replace_section  # noqa: E402

from onnxmem.core.errors import OnnxmemError  # noqa: E402
from onnxmem.planning.pipeline import PlanOptions, plan_model  # noqa: E402
from onnxmem.scheduling.anyorder import MAX_NODES  # noqa: E402

DOC = ROOT / "docs" / "order.md"
BEGIN, END = "<!-- bench-anyorder:begin -->", "<!-- bench-anyorder:end -->"


def models(tmp: Path) -> list[tuple[str, Path, dict[str, int]]]:
    """``(label, path, dims)`` of every model the table covers."""
    from onnxmem.zoo import load_zoo
    from onnxmem.zoo.fixtures import materialize

    out: list[tuple[str, Path, dict[str, int]]] = []
    shipped = {"transformer_block": {"batch": 1, "seq": 128}}  # its free dims, as the README plans it
    for p in sorted((ROOT / "models").glob("*.onnx")):
        out.append((p.stem, p, shipped.get(p.stem, {})))
    for p in sorted((ROOT / "models" / "training").glob("*.train.onnx")):
        out.append((f"training/{p.name.removesuffix('.train.onnx')} (TorchScript)", p, {}))
    for p in sorted((ROOT / "models" / "training" / "dynamo").glob("*/training_model.onnx")):
        out.append((f"training/{p.parent.name} (torch.export)", p, {}))
    for entry in load_zoo(ROOT / "models" / "zoo"):
        out.append((f"zoo/{entry.name}", materialize(entry.path, tmp / entry.name), dict(entry.dims)))
    return out


def kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-doc", action="store_true", help="print the table only")
    opts = ap.parse_args(argv)
    lines = [
        "| model | nodes | every order KiB | plan's order KiB | file order KiB | arena KiB | plan's order / every order | "
        "plan's order above every order, B | order proven optimal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    errors: list[str] = []
    over: list[str] = []
    proven = bounded = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, dims in models(Path(tmp)):
            try:
                plan = plan_model(path, PlanOptions(dims=dims)).plan
            except OnnxmemError as exc:
                errors.append(f"- {label}: {exc}")
                continue
            nodes = len(plan.order)
            every = plan.extra.get("any_order_lower_bound")
            if not isinstance(every, int):
                over.append(f"{label} ({nodes:,})")
                continue
            bounded += 1
            at = every >= plan.lower_bound
            proven += at
            lines.append(
                f"| {label} | {nodes:,} | {kib(every)} | {kib(plan.lower_bound)} | "
                f"{kib(plan.extra['file_order_lower_bound'])} | {kib(plan.arena_size)} | "
                f"{plan.lower_bound / every:.3f} | {plan.lower_bound - every:,} | {'yes' if at else 'no'} |"
            )
            print(lines[-1], flush=True)
    lines.append(f"| **proven optimal** | | | | | | | | **{proven} of {bounded}** |")
    notes = [f"Not bounded (more than {MAX_NODES:,} nodes, or subgraphs): {', '.join(over)}." if over else ""]
    if errors:
        notes += ["", "Not planned:", "", *errors]
    machine = (f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()} "
               "(figures are computed, not timed: the same on any machine).")
    text = "\n".join([machine, "", *lines, "", *notes]).rstrip() + "\n"
    print(text)
    if not opts.no_doc:
        replace_section(DOC, BEGIN, END, text)


if __name__ == "__main__":
    main()
