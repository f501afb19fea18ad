"""``onnxmem show``'s text for a range plan (:class:`onnxmem.plans.range.RangePlan`)."""

from __future__ import annotations

from onnxmem.core.errors import show_name
from onnxmem.plans.range import RangePlan, quotient_name
from onnxmem.report.text import format_bytes

__all__ = ["render_range_summary"]


def render_range_summary(plan: RangePlan, *, width: int = 200) -> list[str]:
    """``onnxmem show``'s lines for a range plan: the box, the pieces, the arena and its value at the corners."""

    def fmt_bytes(n: int) -> str:
        return f"{format_bytes(n)} ({n:,} B)"

    lines = [
        f"model        {show_name(str(plan.model.get('path', '?')))}",
        "range        " + plan.box_text()
        + ("   bound " + " ".join(f"{k}={v}" for k, v in plan.dims.items()) if plan.dims else ""),
        f"pieces       {len(plan.pieces)}   alignment {plan.alignment}   solver {show_name(plan.solver)}   "
        f"plan {plan.plan_seconds:.3f} s",
    ]
    if plan.lattice:
        lines.append("lattice      " + " ".join(f"{k} modulo {st}" for k, st in sorted(plan.lattice.items()))
                     + ": each piece holds one residue, its formulas in the quotients")
    for i, p in enumerate(plan.pieces):
        text = str(p.arena)
        if len(text) > width:
            text = text[:width] + f" ... ({len(p.arena.terms)} terms)"
        box = " ".join([f"{k}={st}*{quotient_name(k)}+{r}" for k, (st, r) in sorted(p.lattice.items())]
                       + [f"{k}={lo}:{hi}" for k, (lo, hi) in sorted(p.box.items())])
        lines.append(f"piece {i:<6} {box}   {len(p.tensors)} tensors   arena = align({text})")
    lines.append("arena at the corners:")
    for c in plan.corners():
        at = " ".join(f"{k}={v}" for k, v in sorted(c.items()))
        lines.append(f"  {at:<30} {fmt_bytes(plan.arena_at(c))}")
    return lines
