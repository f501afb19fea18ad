"""The proof a plan passes without its model: the rules the plan alone can be held to.

:func:`prove_plan_alone`: a lower bound no higher than the arena, each tensor named once in
its graph level, each tensor's size the one its dtype and shape give (a body's region aside),
every offset aligned, every tensor inside the arena (a body's tensors inside
their owner's region), and no two alias groups of one graph level sharing a byte while the
plan's own lifetimes say both are live (members of one group are one buffer, their union;
shared objects the same). What needs the graph is not checked: that the lifetimes are the
true ones and that members of a group may share bytes; the whole proof with the model is
:func:`onnxmem.proof.plan.prove_plan`. This module imports no graph (no onnx).
"""

from __future__ import annotations

from collections.abc import Sequence

from onnxmem.core.errors import show_name
from onnxmem.core.problem import Buffer, Problem, validate
from onnxmem.core.sizes import dense_bytes
from onnxmem.plans.point import MemoryPlan, PlannedTensor
from onnxmem.proof.finding import Finding, bound_findings, order_bound_findings

__all__ = ["prove_plan_alone"]


def prove_plan_alone(plan: MemoryPlan, *, limit: int | None = None) -> list[Finding]:
    """The rules ``plan`` breaks that need no model: alignment, bounds, live overlap of groups."""
    found = bound_findings(plan)
    align = max(plan.alignment, 1)
    levels: dict[str, list[PlannedTensor]] = {}
    for t in plan.tensors:
        levels.setdefault(t.graph, []).append(t)
    bounds = _level_bounds(plan)
    for graph, tensors in levels.items():
        lo, hi = bounds.get(graph, (0, plan.arena_size))
        space = (f"the region of its owner in graph {show_name(graph)}, bytes [{lo}, {hi})" if graph
                 else f"the arena of {plan.arena_size} B")
        seen: set[str] = set()
        for t in tensors:
            if t.name in seen:
                found.append(Finding("mismatch", t.name, f"tensor {show_name(t.name)} appears twice in the plan",
                                     graph=graph))
            seen.add(t.name)
            dense = None if t.kind == "region" else dense_bytes(t.dtype, t.shape)
            if dense is not None and dense != t.size:
                found.append(Finding("mismatch", t.name, f"tensor {show_name(t.name)} has size {t.size} B but "
                                     f"its dtype and shape give {dense} B ({t.dtype}{list(t.shape)})",
                                     graph=graph))
            if t.offset % align:
                found.append(Finding("alignment", t.name, f"tensor {show_name(t.name)} at offset {t.offset} is "
                                     f"not a multiple of the alignment {align}", graph=graph))
            if t.offset < lo or t.offset + t.size > hi:
                found.append(Finding("arena", t.name, f"tensor {show_name(t.name)} occupies bytes [{t.offset}, "
                                     f"{t.offset + t.size}) outside {space}", graph=graph))
        found += _overlaps(tensors, _joined(plan, graph), graph)
        if limit is not None and len(found) >= limit:
            return found[:limit]
    if not found:
        found = order_bound_findings(plan)
    return found[:limit] if limit else found


def _level_bounds(plan: MemoryPlan) -> dict[str, tuple[int, int]]:
    """``{body path: (lo, hi)}``: the bytes of the region of each planned body's owner."""
    regions = {(t.graph, t.producer): (t.offset, t.offset + t.size) for t in plan.tensors if t.kind == "region"}
    return {s.path: regions.get((s.parent, s.owner), (0, plan.arena_size)) for s in plan.subgraphs}


def _joined(plan: MemoryPlan, graph: str) -> set[str | None]:
    """Owners in ``graph`` of bodies planned with ``outputs: inside``: their region and the
    outputs placed in it (its alias group) share bytes by design, so they are judged as one buffer."""
    return {s.owner for s in plan.subgraphs if s.parent == graph and s.outputs == "inside"}


def _overlaps(tensors: Sequence[PlannedTensor], joined: set[str | None], graph: str) -> list[Finding]:
    """Pairs of buffers (a group's members joined into one) live at one step and sharing a byte."""
    spans: dict[str, tuple[int, int, int, int]] = {}  # buffer -> (lo, hi, start, end)
    named: dict[str, str] = {}  # buffer -> the name of its first tensor, for the message
    # the alias group of each such owner's region: its outputs, and a value written over one in place
    inside = {t.group: t.producer for t in tensors if t.kind == "region" and t.producer in joined}
    for t in tensors:
        key = (f"owner {inside[t.group]}" if t.group in inside else
               f"object {t.object}" if t.object is not None else f"group {t.group}")
        lo, hi, start, end = spans.get(key, (t.offset, t.offset + t.size, t.start, t.end))
        spans[key] = (min(lo, t.offset), max(hi, t.offset + t.size), min(start, t.start), max(end, t.end))
        named.setdefault(key, t.name)
    bufs = tuple(Buffer(k, s[2], s[3], s[1] - s[0]) for k, s in spans.items())
    bad = validate(Problem(bufs), [s[0] for s in spans.values()], limit=1)
    out = []
    for v in bad:
        if v.kind == "overlap" and len(v.buffers) == 2:
            (a, b) = (spans[k] for k in v.buffers)
            lo, hi = max(a[0], b[0]), min(a[1], b[1])
            out.append(Finding("overlap", named[v.buffers[0]],
                               f"tensors {show_name(named[v.buffers[0]])} and {show_name(named[v.buffers[1]])} "
                               f"are both live at step {max(a[2], b[2])} and share bytes [{lo}, {hi})",
                               other=named[v.buffers[1]], byte_range=(lo, hi), graph=graph))
    return out
