"""Several models in one arena: a training step and its eval step, or a pipeline.

Models of one program run one at a time in one arena (Caffe's train and test nets sharing
blobs). Each model's plan keeps its own order and alias groups (:class:`~onnxmem.pipeline.
Planned`); :func:`plan_program` places all their groups in one problem, on one time axis
where model ``k``'s steps follow model ``k - 1``'s, and solves it once:

1. every buffer of model ``k`` (one per alias group, :mod:`onnxmem.liveness`) becomes a
   buffer ``"k:group"`` live over its steps shifted by the steps of the models before it;
2. a **handover** (``handovers``: a name that is a graph output of model ``k`` and a graph
   input of model ``k + 1``) joins the output's group and the input's group into one
   buffer, live from the output's first write in model ``k`` to the input's last read in
   model ``k + 1``: the tensor stays where model ``k`` wrote it and model ``k + 1`` reads
   it there (the two must have the same bytes);
3. the joint problem is solved (any solver of :mod:`onnxmem.solvers`) and validated
   (:func:`onnxmem.problem.validate`); each model's plan gets the joint offsets and the
   joint arena size, and passes the static proof on its own.

Without handovers no lifetime crosses from one model to the next, so the arena is the
largest of the models' arenas once the solver meets the joint lower bound (the largest of
their bounds). Cost: one solve over the sum of the models' buffers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..errors import OnnxmemError, PlanInvalid, show_name
from ..pipeline import Planned
from ..plan import MemoryPlan
from ..problem import Buffer, Problem, lower_bound, validate
from ..proof import prove_plan
from ..solvers import SolveOptions, solve

__all__ = ["Program", "plan_program"]


@dataclass(frozen=True, slots=True)
class Program:
    """The models' plans in one arena of ``arena_size`` bytes, in run order.

    ``handovers``: ``{name: model index that writes it}`` for each tensor handed to the
    next model; ``lower_bound``: the joint problem's bound.
    """

    plans: tuple[MemoryPlan, ...]
    arena_size: int
    lower_bound: int
    handovers: Mapping[str, int]
    solver: str
    status: str


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
    solution = solve(problem, solver, SolveOptions(timeout=timeout))
    if not solution.found:
        raise OnnxmemError(f"solver '{solver}' found no plan for the program ({solution.status}); try --solver greedy")
    broken = validate(problem, solution, limit=1)
    if broken:
        raise PlanInvalid(f"solver '{solver}' produced an invalid program plan: {broken[0]}")
    offset = {b.id: int(o) for b, o in zip(buffers, solution.offsets)}
    plans: list[MemoryPlan] = []
    for k, m in enumerate(models):
        tensors = tuple(replace(t, offset=offset[joint_of[k][t.group]] + t.group_offset) for t in m.plan.tensors)
        plan = replace(m.plan, tensors=tensors, arena_size=int(solution.height),
                       extra={**m.plan.extra, "program": {"index": k, "models": len(models),
                                                          "handovers": sorted(handed)}})
        findings = prove_plan(plan, m.view, limit=1)
        if findings:
            raise PlanInvalid(f"model {k} of the program fails the static proof: {findings[0]}")
        plans.append(plan)
    return Program(tuple(plans), int(solution.height), lower_bound(problem), handed, solution.solver,
                   str(solution.status.value))
