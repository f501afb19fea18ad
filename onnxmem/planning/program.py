"""Several models in one arena: a training step and its eval step, or a pipeline.

Models of one program run one at a time in one arena (Caffe's train and test nets sharing
blobs). Each model's plan keeps its own order and alias groups (:class:`~onnxmem.planning.pipeline.
Planned`); :func:`plan_program` places all their groups in one problem, on one time axis
where model ``k``'s steps follow model ``k - 1``'s, and solves it once:

1. every buffer of model ``k`` (one per alias group, :mod:`onnxmem.analysis.liveness`) becomes a
   buffer ``"k:group"`` live over its steps shifted by the steps of the models before it;
2. a **handover** (``handovers``: a name that is a graph output of model ``k`` and a graph
   input of model ``k + 1``) joins the output's group and the input's group into one
   buffer, live from the output's first write in model ``k`` to the input's last read in
   model ``k + 1``: the tensor stays where model ``k`` wrote it and model ``k + 1`` reads
   it there (the two must have the same bytes);
3. the joint problem is solved (any solver of :mod:`onnxmem.core.solvers`) and validated
   (:func:`onnxmem.core.problem.validate`); each model's plan gets the joint offsets and the
   joint arena size, and passes the static proof on its own.

Without handovers no lifetime crosses from one model to the next, so the arena is the
largest of the models' arenas once the solver meets the joint lower bound (the largest of
their bounds). Cost: one solve over the sum of the models' buffers.

The program's record and file are :mod:`onnxmem.plans.program`; its joint proof is
:func:`onnxmem.proof.program.prove_program`; running it is :func:`onnxmem.verify.program.verify_program`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from onnxmem.core.errors import OnnxmemError, PlanInvalid, show_name
from onnxmem.core.problem import Buffer, Problem, lower_bound
from onnxmem.planning.compose import solve_layout
from onnxmem.planning.pipeline import Planned
from onnxmem.plans.point import MemoryPlan
from onnxmem.plans.program import Program
from onnxmem.proof.plan import prove_plan

__all__ = ["pipeline_handovers", "plan_program"]


def _group_of(planned: Planned, name: str) -> str:
    for iv in planned.liveness.intervals:
        if iv.tensor == name:
            return iv.group
    raise OnnxmemError(f"tensor {show_name(name)} is not in the arena of its model; plan it with --io internal")


def plan_program(models: Sequence[Planned], handovers: Sequence[str] = (), *, solver: str = "auto",
                 timeout: float | None = None) -> Program:
    """One arena for ``models`` run in this order (module doc); ``handovers`` name the
    tensors each model hands to the next. Raises ``OnnxmemError`` for a handover that is
    not an output of one model and an input of the next with the same bytes."""
    handed: dict[str, int] = {}
    for name in handovers:
        k = next((i for i, m in enumerate(models[:-1]) if name in m.view.outputs
                  and name in models[i + 1].view.inputs), None)
        if k is None:
            raise OnnxmemError(f"handover {show_name(name)} is not a graph output of one model and a graph "
                               "input of the next; name a tensor the pipeline passes on")
        out, into = models[k].view.tensors[name], models[k + 1].view.tensors[name]
        if out.size != into.size:
            raise OnnxmemError(f"handover {show_name(name)} has {out.size} B as an output and {into.size} B as "
                               "an input; the models must agree on its dtype and shape")
        handed[name] = k
    shift = 0
    spans: dict[str, list[Buffer]] = {}  # joint id -> the model buffers it covers
    joint_of: list[dict[str, str]] = []
    for k, m in enumerate(models):
        own: dict[str, str] = {}
        for b in m.liveness.problem.buffers:
            own[b.id] = f"{k}:{b.id}"
        for name, at in handed.items():
            if at == k - 1:  # the input's group joins the output's group of the model before
                own[_group_of(m, name)] = joint_of[k - 1][_group_of(models[k - 1], name)]
        for b in m.liveness.problem.buffers:
            spans.setdefault(own[b.id], []).append(replace(b, start=b.start + shift, end=b.end + shift))
        joint_of.append(own)
        shift += max(len(m.plan.order), 1)
    buffers = tuple(
        Buffer(jid, min(b.start for b in bs), max(b.end for b in bs), max(b.size for b in bs),
               max(b.alignment for b in bs))
        for jid, bs in spans.items()
    )
    problem = Problem(buffers)
    solution = solve_layout(problem, solver, timeout=timeout, where=" for the program", check=True)
    offset = {b.id: int(o) for b, o in zip(buffers, solution.offsets)}
    plans: list[MemoryPlan] = []
    for k, m in enumerate(models):
        tensors = tuple(replace(t, offset=offset[joint_of[k][t.group]] + t.group_offset) for t in m.plan.tensors)
        plan = replace(m.plan, tensors=tensors, arena_size=int(solution.height),
                       extra={**m.plan.extra, "program": {"index": k, "models": len(models),
                                                          "handovers": sorted(handed),
                                                          "alone": m.plan.arena_size}})
        findings = prove_plan(plan, m.view, limit=1)
        if findings:
            raise PlanInvalid(f"model {k} of the program fails the static proof: {findings[0]}")
        plans.append(plan)
    return Program(tuple(plans), int(solution.height), lower_bound(problem), handed, solution.solver,
                   str(solution.status.value))


def pipeline_handovers(models: Sequence[Planned], names: Sequence[str]) -> list[str]:
    """The tensors a pipeline of ``models`` hands on: every graph output of model ``k`` that
    is a graph input of model ``k + 1``, by name (``names``: how the user named each model).
    Raises ``OnnxmemError`` for a step that hands nothing over, for a tensor whose dtype or
    shape differs on the two sides, and for a name handed over twice."""
    handed: list[str] = []
    for k in range(len(models) - 1):
        a, b = models[k].view, models[k + 1].view
        step = [n for n in a.outputs if n in b.inputs]
        if not step:
            raise OnnxmemError(f"pipeline step {k} -> {k + 1}: no graph output of {show_name(names[k])} is a graph "
                               f"input of {show_name(names[k + 1])}; name the tensor the same in both models, or "
                               "plan them without --pipeline (one at a time)")
        for n in step:
            out, into = a.tensors[n], b.tensors[n]
            if (out.dtype, out.shape) != (into.dtype, into.shape):
                raise OnnxmemError(
                    f"handover {show_name(n)} is {out.dtype} {list(out.shape)} as an output of {show_name(names[k])} "
                    f"but {into.dtype} {list(into.shape)} as an input of {show_name(names[k + 1])}; the models must "
                    "agree on its dtype and shape (bind their dims with --dim)")
            if n in handed:
                raise OnnxmemError(f"handover {show_name(n)} passes between more than two models; give each "
                                   "step's tensor a name of its own")
            handed.append(n)
    return handed

