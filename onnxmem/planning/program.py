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

**The file** (:func:`render_program`, :func:`program_from_dict`): one JSON object
``{"schema_version": 1, "program": {"mode", "arena_size", "lower_bound", "handovers":
[{"name", "from"}], "solver": {"name", "status"}, "plans": [...]}}``, each of ``plans`` a
plan as :mod:`onnxmem.plans.point` writes it (read back by its reader) whose ``extra.program``
says its place. ``mode`` is ``one-at-a-time`` (no handovers) or ``pipeline``.

**The joint proof** (:func:`prove_program`): each member plan passes the static proof
(:func:`onnxmem.proof.plan.prove_plan`) in the one arena, and every handed-over tensor has the
same offset and size in the plan of the model that writes it and of the model that reads
it. That covers the joint arena: a lifetime crosses from one model to the next only
through a handover, which is live to the end of its writer (a graph output) and from the
start of its reader (a graph input), so the two members' proofs check it against every
tensor of both models.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from onnxmem.core.errors import OnnxmemError, PlanError, PlanInvalid, show_name
from onnxmem.core.problem import Buffer, Problem, lower_bound, validate
from onnxmem.core.solvers import SolveOptions, solve
from onnxmem.planning.pipeline import Planned
from onnxmem.plans.point import MAX_VALUE, MemoryPlan, check_schema, plan_from_dict, read_plan_data
from onnxmem.proof.plan import Finding, prove_plan

if TYPE_CHECKING:
    import onnx

    from onnxmem.graph import GraphView
    from onnxmem.runtime.arena import Execution
    from onnxmem.verify.run import VerifyOptions

__all__ = ["MODES", "PROGRAM_SCHEMA_VERSION", "Program", "ProgramReport", "is_program_data", "pipeline_handovers",
           "plan_program", "program_from_dict", "program_to_dict", "prove_program", "read_program",
           "render_program", "verify_program"]

#: the version of the program plan file (its own; each member plan keeps plan.py's)
PROGRAM_SCHEMA_VERSION = 1
#: how the models of a program run: one at a time (nothing crosses), or a pipeline (handovers)
MODES = ("one-at-a-time", "pipeline")
#: most models one program plan may hold
MAX_MODELS = 64


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

    @property
    def mode(self) -> str:
        """``pipeline`` when a tensor passes from one model to the next, else ``one-at-a-time``."""
        return MODES[1] if self.handovers else MODES[0]


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


def program_to_dict(program: Program) -> dict[str, Any]:
    """The program plan's JSON object (the module doc)."""
    return {
        "schema_version": PROGRAM_SCHEMA_VERSION,
        "program": {
            "mode": program.mode,
            "arena_size": program.arena_size,
            "lower_bound": program.lower_bound,
            "handovers": [{"name": n, "from": k} for n, k in sorted(program.handovers.items())],
            "solver": {"name": program.solver, "status": program.status},
            "plans": [p.to_dict() for p in program.plans],
        },
    }


def render_program(program: Program) -> bytes:
    """The program plan's JSON bytes, each member plan checked against the plan schema."""
    data = program_to_dict(program)
    for k, member in enumerate(data["program"]["plans"]):
        check_schema(member, f"plan {k} of the program")
    return (json.dumps(data, indent=1) + "\n").encode("utf-8")


def is_program_data(data: Any) -> bool:
    """Whether parsed plan JSON is a program plan (it has a ``program`` object)."""
    return isinstance(data, dict) and isinstance(data.get("program"), dict)


def _field(obj: Any, key: str, kind: type | tuple[type, ...], where: str, path: str) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        name = kind.__name__ if isinstance(kind, type) else " or ".join(t.__name__ for t in kind)
        raise PlanError(f"{where}: field {show_name(path + key)} is missing or not a JSON {name}; give the "
                        "program plan that 'onnxmem plan A.onnx B.onnx -o' wrote")
    if isinstance(value, int) and not 0 <= value < MAX_VALUE:
        raise PlanError(f"{where}: field {show_name(path + key)} is {value:,}, not in [0, 2^62); re-plan the models")
    if isinstance(value, str) and len(value) > 4096:
        raise PlanError(f"{where}: field {show_name(path + key)} is longer than 4096 characters; re-plan the models")
    return value


def _keys(obj: dict[str, Any], want: set[str], where: str, path: str) -> None:
    if set(obj) != want:
        odd = sorted(set(obj) ^ want)[0]
        raise PlanError(f"{where}: {path or 'the top level'} has {'an unknown' if odd in obj else 'no'} field "
                        f"{show_name(odd)}; give the program plan that 'onnxmem plan A.onnx B.onnx -o' wrote")


def program_from_dict(data: Any, where: str = "program plan") -> Program:
    """The program plan in ``data`` (parsed JSON, hostile): every field checked, each member by
    :func:`onnxmem.plans.point.plan_from_dict`; raises ``PlanError`` with one line."""
    if not is_program_data(data):
        raise PlanError(f"{where} is a plan for one model, not a program plan; verify it with its one model, "
                        "or plan several with 'onnxmem plan A.onnx B.onnx -o PLAN'")
    _keys(data, {"schema_version", "program"}, where, "")
    if _field(data, "schema_version", int, where, "") != PROGRAM_SCHEMA_VERSION:
        raise PlanError(f"{where} has program schema_version {data['schema_version']}; this onnxmem reads version "
                        f"{PROGRAM_SCHEMA_VERSION}: re-plan the models")
    prog = data["program"]
    _keys(prog, {"mode", "arena_size", "lower_bound", "handovers", "solver", "plans"}, where, "program")
    mode = _field(prog, "mode", str, where, "program/")
    if mode not in MODES:
        raise PlanError(f"{where}: field program/mode is {show_name(mode)}, not one of {', '.join(MODES)}; "
                        "re-plan the models")
    arena = _field(prog, "arena_size", int, where, "program/")
    bound = _field(prog, "lower_bound", int, where, "program/")
    if bound > arena:
        raise PlanError(f"{where}: lower_bound {bound:,} is above arena_size {arena:,}; re-plan the models")
    solver = _field(prog, "solver", dict, where, "program/")
    _keys(solver, {"name", "status"}, where, "program/solver")
    members = _field(prog, "plans", list, where, "program/")
    if not 2 <= len(members) <= MAX_MODELS:
        raise PlanError(f"{where} holds {len(members)} plans; a program plan holds 2 to {MAX_MODELS}: "
                        "re-plan the models")
    plans = tuple(plan_from_dict(m, f"{where}: plan {k}") for k, m in enumerate(members))
    handed: dict[str, int] = {}
    planned = [{t.name for t in p.tensors if not t.graph} for p in plans]  # each model's main-graph tensors
    for i, h in enumerate(_field(prog, "handovers", list, where, "program/")):
        at = f"program/handovers/{i}/"
        _keys(h if isinstance(h, dict) else {}, {"name", "from"}, where, at[:-1])
        name, k = _field(h, "name", str, where, at), _field(h, "from", int, where, at)
        if name in handed or k > len(plans) - 2:
            raise PlanError(f"{where}: handover {show_name(name)} is listed twice or passes from model {k}, which "
                            "has no next model; re-plan the models")
        if not all(name in names for names in planned[k:k + 2]):
            raise PlanError(f"{where}: handover {show_name(name)} is not planned in models {k} and {k + 1}; "
                            "re-plan the models")
        handed[name] = k
    if (mode == MODES[1]) != bool(handed):
        raise PlanError(f"{where}: mode {mode} with {len(handed)} handovers; a pipeline hands tensors over and "
                        "models one at a time do not: re-plan the models")
    for k, p in enumerate(plans):
        place = p.extra.get("program")
        if not isinstance(place, dict) or place.get("index") != k or place.get("models") != len(plans):
            raise PlanError(f"{where}: plan {k} does not say it is model {k} of {len(plans)} (extra/program); "
                            "re-plan the models")
    return Program(plans, arena, bound, handed, _field(solver, "name", str, where, "program/solver/"),
                   _field(solver, "status", str, where, "program/solver/"))


def read_program(path: str | os.PathLike[str]) -> Program | None:
    """The program plan at ``path``; ``None`` when the file holds another kind of plan
    (read it with :func:`onnxmem.plans.point.read_plan` or :func:`onnxmem.planning.ranges.read_any_plan`)."""
    data, where = read_plan_data(path)
    return program_from_dict(data, where) if is_program_data(data) else None


def prove_program(program: Program, views: Sequence[GraphView]) -> list[Finding]:
    """Every rule the program breaks (the module doc, the joint proof); empty means proven."""
    findings: list[Finding] = []
    for k, (plan, view) in enumerate(zip(program.plans, views)):
        if plan.arena_size != program.arena_size:
            findings.append(Finding("arena", None, f"model {k}'s plan has an arena of {plan.arena_size:,} B, the "
                                    f"program's is {program.arena_size:,} B; they must be one arena"))
        findings.extend(replace(f, message=f"model {k}: {f.message}") for f in prove_plan(plan, view))
    for name, k in sorted(program.handovers.items()):
        out, into = program.plans[k].tensor(name), program.plans[k + 1].tensor(name)
        if (out.offset, out.size) != (into.offset, into.size):
            findings.append(Finding(
                "overlap", name, f"handover {show_name(name)} is written at bytes [{out.offset:,}, "
                f"{out.offset + out.size:,}) by model {k} but read at [{into.offset:,}, {into.offset + into.size:,}) "
                f"by model {k + 1}; a handed-over tensor stays where it was written",
                byte_range=(into.offset, into.offset + into.size)))
    return findings


@dataclass(frozen=True, slots=True)
class ProgramReport:
    """What :func:`verify_program` found: the joint static proof, each model's run in the one
    arena (``None`` when not run), and warnings (a re-saved model)."""

    static: tuple[Finding, ...]
    executions: tuple[Execution, ...] | None
    views: tuple[GraphView, ...]
    warnings: tuple[str, ...]

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.static + tuple(f for ex in self.executions or () for f in ex.findings)


def verify_program(program: Program, models: Sequence[tuple[onnx.ModelProto, str]], *,
                   options: VerifyOptions, plan_name: str | None = None,
                   views: Sequence[GraphView | None] | None = None) -> ProgramReport:
    """Prove ``program`` for ``models`` (``(model, path)`` in run order) and, when that holds
    and ``options.execute``, run them one after the other in one arena
    (:func:`onnxmem.runtime.training.execute_in_one_arena`). ``plan_name``: check first
    that each member plan was made for its model (:func:`onnxmem.verify.run.check_plan_identity`)."""
    from onnxmem.runtime.ort import load_with_weights
    from onnxmem.runtime.training import execute_in_one_arena
    from onnxmem.verify.run import check_plan_identity, view_for_plan

    if len(models) != len(program.plans):
        raise PlanError(f"the program plan holds {len(program.plans)} plans, for {len(models)} models given; give "
                        "the models it was made for, in its order")
    given = list(views) if views is not None else [None] * len(models)
    warnings: list[str] = []
    built: list[GraphView] = []
    for k, ((model, path), plan) in enumerate(zip(models, program.plans)):
        view = given[k]
        if plan_name is not None:
            view, said = check_plan_identity(plan, model, path, plan_name=f"{plan_name} (model {k})", view=view)
            warnings.extend(said)
        built.append(view if view is not None else view_for_plan(model, plan, path))
    static = tuple(prove_program(program, built))
    executions = None
    if options.execute and not static:
        runs = [(plan, load_with_weights(model, path), view)
                for (model, path), plan, view in zip(models, program.plans, built)]
        _, done = execute_in_one_arena(runs, options=options, handovers=program.handovers)
        executions = tuple(done)
    return ProgramReport(static, executions, tuple(built), tuple(warnings))
