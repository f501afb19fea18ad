"""The static proof a plan passes before it is exported: no unsafe plan leaves onnxmem.

:func:`prove_for_export` refuses (``PlanInvalid``, exit 3 as ``verify`` gives) a
plan that breaks a rule:

* with the model: :func:`onnxmem.proof.plan.prove_plan`, the whole proof that
  ``onnxmem verify --static-only`` runs (order, tensors, lifetimes recomputed
  from the graph, alias legality, bodies);
* without it, the rules the plan alone can be held to (:func:`plan_alone_findings`):
  every offset aligned, every tensor inside the arena (a body's tensors inside
  their owner's region), and no two alias groups of one graph level sharing a
  byte while the plan's own lifetimes say both are live (members of one group
  are one buffer, their union; shared objects the same). What needs the graph
  is not checked then: that the lifetimes are the true ones and that members
  of a group may share bytes; pass ``--model`` for those.

A range plan: :func:`onnxmem.planning.ranges.prove_range_plan` on its whole box.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from onnxmem.core.errors import PlanInvalid, show_name
from onnxmem.plans.point import MemoryPlan, PlannedTensor

if TYPE_CHECKING:
    import onnx

    from onnxmem.planning.ranges import RangePlan

__all__ = ["plan_alone_findings", "prove_for_export", "prove_range_for_export"]


def prove_for_export(plan: MemoryPlan, model: onnx.ModelProto | None = None,
                     model_path: str | os.PathLike[str] | None = None, plan_name: str = "plan") -> tuple[str, ...]:
    """Raise ``PlanInvalid`` naming the first rule ``plan`` breaks (see the module docstring).

    With ``model``: first ``PlanError`` when the plan was made for another model
    (:func:`onnxmem.verify.run.check_plan_identity`); returns its warnings (a re-saved model).
    """
    said: tuple[str, ...] = ()
    if model is not None and model_path is not None:
        from onnxmem.proof.plan import prove_plan
        from onnxmem.verify.run import check_plan_identity, view_for_plan

        view, said = check_plan_identity(plan, model, model_path, plan_name=plan_name, action="exporting")
        view = view if view is not None else view_for_plan(model, plan, model_path)
        found = [str(f) for f in prove_plan(plan, view, limit=1)]
    else:
        found = plan_alone_findings(plan, limit=1)
    if found:
        raise PlanInvalid(f"the plan is wrong: {found[0]}; it is not exported "
                          "('onnxmem verify MODEL --plan PLAN --static-only' lists every finding): re-plan the model")
    return said


def prove_range_for_export(plan: RangePlan) -> None:
    """Raise ``PlanInvalid`` when the range plan fails its proof on its box."""
    from onnxmem.planning.ranges import prove_range_plan

    found = prove_range_plan(plan, limit=1)
    if found:
        raise PlanInvalid(f"the range plan is wrong: {found[0]}; it is not written: re-plan the model")


def plan_alone_findings(plan: MemoryPlan, *, limit: int | None = None) -> list[str]:
    """The rules ``plan`` breaks that need no model: alignment, bounds, live overlap of groups."""
    found: list[str] = []
    align = max(plan.alignment, 1)
    levels: dict[str, list[PlannedTensor]] = {}
    for t in plan.tensors:
        levels.setdefault(t.graph, []).append(t)
    bounds = _level_bounds(plan)
    for graph, tensors in levels.items():
        lo, hi = bounds.get(graph, (0, plan.arena_size))
        space = (f"the region of its owner in graph {show_name(graph)}, bytes [{lo}, {hi})" if graph
                 else f"the arena of {plan.arena_size} B")
        for t in tensors:
            if t.offset % align:
                found.append(f"tensor {show_name(t.name)} at offset {t.offset} is not a multiple of the "
                             f"alignment {align}")
            if t.offset < lo or t.offset + t.size > hi:
                found.append(f"tensor {show_name(t.name)} occupies bytes [{t.offset}, {t.offset + t.size}) "
                             f"outside {space}")
        found += _overlaps(tensors, _joined(plan, graph))
        if limit is not None and len(found) >= limit:
            return found[:limit]
    return found[:limit] if limit else found


def _level_bounds(plan: MemoryPlan) -> dict[str, tuple[int, int]]:
    """``{body path: (lo, hi)}``: the bytes of the region of each planned body's owner."""
    regions = {(t.graph, t.producer): (t.offset, t.offset + t.size) for t in plan.tensors if t.kind == "region"}
    return {s.path: regions.get((s.parent, s.owner), (0, plan.arena_size)) for s in plan.subgraphs}


def _joined(plan: MemoryPlan, graph: str) -> set[str | None]:
    """Owners in ``graph`` of If branches planned with ``outputs: inside``: their region and
    their outputs share bytes by design, so they are judged as one buffer."""
    return {s.owner for s in plan.subgraphs if s.parent == graph and s.outputs == "inside"}


def _overlaps(tensors: Sequence[PlannedTensor], joined: set[str | None]) -> list[str]:
    """Pairs of buffers (a group's members joined into one) live at one step and sharing a byte."""
    from onnxmem.core.problem import Buffer, Problem, validate  # numpy

    spans: dict[str, tuple[int, int, int, int]] = {}  # buffer -> (lo, hi, start, end)
    named: dict[str, str] = {}  # buffer -> the name of its first tensor, for the message
    for t in tensors:
        key = (f"owner {t.producer}" if t.producer in joined else
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
            out.append(f"tensors {show_name(named[v.buffers[0]])} and {show_name(named[v.buffers[1]])} are both "
                       f"live at step {max(a[2], b[2])} and share bytes [{max(a[0], b[0])}, {min(a[1], b[1])})")
    return out
