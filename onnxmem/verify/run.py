"""Verification of a memory plan, as the CLI runs it: identity, proof, execution, report.

:func:`verify_plan` checks that the plan belongs to the model
(:func:`check_plan_identity`: the model's sha256, or the same planned tensors
when the model was merely re-saved), proves it statically
(:func:`onnxmem.proof.plan.prove_plan`) and, when that holds, runs the model inside
one arena laid out by the plan (:func:`onnxmem.runtime.arena.execute_plan`). The
rules of each step are documented in those modules; :class:`VerifyReport`
gathers what they found.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx

from onnxmem.analysis.happens_before import check_concurrency
from onnxmem.core.errors import (
    OnnxmemError,
    PlanError,
    RuntimeBackendError,
    ShapeError,
    one_line,
    show_name,
)
from onnxmem.graph import GraphView, bound_outputs, build_view, iter_views, with_regions
from onnxmem.model import check_loops_end, read_nodes, recorded_values, with_values
from onnxmem.planning.given import check_decided, read_sizing
from onnxmem.plans.point import MemoryPlan
from onnxmem.proof.plan import (
    VIEW_OPS,
    Finding,
    plan_regions,
    prove_plan,
    true_lifetimes,
    walk_bodies,
)
from onnxmem.runtime.arena import DEVICES, Execution, ExecutionOptions, OutputCheck, execute_plan
from onnxmem.runtime.concurrent import ConcurrentExecution, ConcurrentOptions, run_concurrent
from onnxmem.runtime.folding import compute_weights, fold_weights
from onnxmem.runtime.inputs import read_inputs
from onnxmem.runtime.isolation import run_isolated
from onnxmem.runtime.sessions import cuda_available
from onnxmem.runtime.training import TrainingRun, is_training_view, no_kernel_error

__all__ = [
    "DEVICES",
    "VIEW_OPS",
    "Execution",
    "Finding",
    "OutputCheck",
    "VerifyOptions",
    "VerifyReport",
    "check_plan_identity",
    "compute_weights",
    "cuda_available",
    "execute_plan",
    "fold_weights",
    "prove_plan",
    "read_inputs",
    "true_lifetimes",
    "verify_plan",
    "view_for_plan",
]


@dataclass(frozen=True, slots=True)
class VerifyOptions(ExecutionOptions):
    """How to verify: how to run the plan (:class:`onnxmem.runtime.arena.ExecutionOptions`), and
    ``execute=False`` for the static proof alone. ``concurrency="dag"``: the
    static proof checks the happens-before rule too (rule 9 of
    :mod:`onnxmem.proof.plan`) and execution is ``trials`` concurrent runs on
    ``threads`` threads (:mod:`onnxmem.runtime.concurrent`) in place of the sequential one."""

    execute: bool = True
    concurrency: str = "sequential"
    trials: int = 10
    threads: int = 2


@dataclass(frozen=True, slots=True)
class VerifyReport:
    model: str
    static: tuple[Finding, ...]
    execution: Execution | None
    tensors: int
    nodes: int
    arena_size: int
    static_seconds: float
    warnings: tuple[str, ...] = ()
    concurrent: ConcurrentExecution | None = None

    @property
    def findings(self) -> tuple[Finding, ...]:
        return (self.static + (self.execution.findings if self.execution else ())
                + (self.concurrent.findings if self.concurrent else ()))

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        f = self.findings
        return f[0] if f else None


def view_for_plan(model: onnx.ModelProto, plan: MemoryPlan, model_path: str | os.PathLike[str] | None,
                  inputs: Mapping[str, np.ndarray] | None = None,
                  caller: Mapping[str, str] | None = None) -> GraphView:
    """The graph view at the plan's dims, folding and If branches (measured shapes when
    inference cannot say, on ``inputs`` where given); ``caller``: as :func:`onnxmem.graph.build_view`
    takes it (the caller's state of the model as written, for the graph onnxruntime built)."""
    from onnxmem.graph import excluded_branches
    from onnxmem.planning.pipeline import plan_branches, plan_fold, plan_max_trips
    from onnxmem.plans.optimization import plan_optimization
    from onnxmem.runtime.ort import infer_measured_shapes
    from onnxmem.shapes import infer_shapes

    dims = dict(plan.dims)
    ishapes = {k: tuple(v) for k, v in plan.input_shapes.items()}
    for name, arr in (inputs or {}).items():
        if name in ishapes and tuple(np.shape(arr)) != ishapes[name]:
            raise ShapeError(f"--inputs: array {show_name(name)} has shape {list(np.shape(arr))}; the plan was made "
                             f"for {list(ishapes[name])}: give the plan's shape, or plan with these inputs (plan --inputs)")
    excluded = excluded_branches(model, plan_branches(plan))
    trips = plan_max_trips(plan)
    # a training checkpoint's values the plan read, and the given values that sized it
    sizing = read_sizing(plan.extra)
    values = {**recorded_values(plan.extra), **sizing}
    known = with_values(model, values)
    ishapes = {k: v for k, v in ishapes.items() if k not in values}  # an initializer of ``known`` now
    # the main graph's nodes read once, for the inference and the view, where the inference reads this graph
    nodes = read_nodes(model.graph) if known is model else None
    try:
        shapes = infer_shapes(known, dims=dims, input_shapes=ishapes, strict_dims=False, excluded=excluded,
                              nchwc_block=plan_optimization(plan.model).nchwc_block, max_trips=trips, nodes=nodes)
    except ShapeError as exc:
        if sizing:  # planned by inference at these values: a run would not say more
            names = ", ".join(map(show_name, sorted(sizing)))
            raise PlanError(f"the values the plan records under extra.sizing_inputs ({names}) size no tensors here "
                            f"({one_line(str(exc)).split('; ')[0]}): the plan is damaged or of another model; plan "
                            "the model again") from None
        nodes = None  # measured: the view takes the names of these shapes
        shapes = infer_measured_shapes(known, dims=dims, input_shapes=ishapes, model_path=model_path,
                                       strict_dims=False, inputs=inputs, excluded=excluded, max_trips=trips)
    kernels = plan_optimization(plan.model).kernels
    return with_regions(build_view(model, shapes, fold=plan_fold(plan), kernels=kernels, caller=caller, nodes=nodes),
                        plan_regions(plan))


def check_plan_identity(
    plan: MemoryPlan,
    model: onnx.ModelProto,
    model_path: str | os.PathLike[str],
    *,
    plan_name: str,
    view: GraphView | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    action: str = "verifying",
) -> tuple[GraphView | None, tuple[str, ...]]:
    """Whether ``plan`` was made for the model file at ``model_path``: ``(view, warnings)``.

    The plan records the sha256 of the model it was made for. The same sha256:
    no warning. Another one: the model may have been re-saved (its bytes
    differ, its graph does not), so the plan is accepted, with a warning, when
    the model at the plan's dims has exactly the plan's arena tensors (the same
    names, each with the same size); otherwise ``PlanError`` says whose plan it
    is. ``view`` is the graph view at the plan's dims when it was built here
    (or given; ``inputs``: graph input values to measure shapes on), else ``None``.
    ``action`` names what the caller goes on to do in the warning (``showing``). A plan that records no sha256 is not checked.

    Example: a plan made for ``a.onnx`` and given with ``b.onnx`` raises
    ``plan 'p.json' was made for a model with sha256 1234abcd…, not 'b.onnx'
    (sha256 9f00e1c2…); plan this model again``.
    """
    from onnxmem.model import file_sha256

    want = str(plan.model.get("sha256") or "")
    if not want:
        return view, ()
    try:
        have = file_sha256(model_path)
    except OSError as exc:
        raise OnnxmemError(f"cannot read model {str(model_path)!r}: {exc.strerror or exc}") from None
    if have == want:
        return view, ()
    refused = PlanError(
        f"plan {plan_name!r} was made for a model with sha256 {want[:8]}…, not {str(model_path)!r} "
        f"(sha256 {have[:8]}…); plan this model again"
    )
    if view is None:
        try:
            view = view_for_plan(model, plan, model_path, inputs)
        except OnnxmemError:
            raise refused from None
    io_out = set(view.inputs) | set(view.outputs) if plan.io == "external" else set()
    expected = {(v.path, t.name): t.size for v in iter_views(view) for t in v.activations()
                if v.path or t.name not in io_out}
    owner_out = {s.path for s in plan.subgraphs if s.outputs == "owner"}
    for parent, body in walk_bodies(view):  # If-branch outputs written into the If's outputs
        if body.path in owner_out:
            for o in bound_outputs(parent, body, plan.io) or {}:
                expected.pop((body.path, o), None)
    planned = {(t.graph, t.name): t.size for t in plan.tensors}
    if len(planned) != len(plan.tensors) or planned != expected:
        raise refused
    return view, (
        f"plan {plan_name!r} was made for a model with sha256 {want[:8]}…; {str(model_path)!r} has sha256 "
        f"{have[:8]}… but the same planned tensors and sizes (re-saved?): {action} it anyway",
    )


def _trials_reason(view: GraphView) -> str | None:
    """Why the concurrent trials cannot run ``view`` (its plan then runs once in its order), or ``None``:
    a body's tensors need the sequential run; a training step needs its labels, seeded dropout and
    stand-in kernels (:class:`onnxmem.runtime.training.TrainingRun`), which the trials do not give."""
    if view.bodies:
        return "this model has bodies"
    if is_training_view(view):
        return "this is a training graph"
    return None


def execute(plan: MemoryPlan, model: onnx.ModelProto, view: GraphView, opts: VerifyOptions,
            model_path: str | os.PathLike[str] | None) -> tuple[Execution | None, ConcurrentExecution | None]:
    """The execution step of :func:`verify_plan` (run in the command's onnxruntime child process,
    :mod:`onnxmem.runtime.isolation`): ``(execution, None)``, or ``(None, concurrent)`` for a concurrent
    plan of a graph without bodies or training steps (:func:`_trials_reason`)."""
    if opts.concurrency == "dag" and _trials_reason(view) is None:
        return None, run_concurrent(plan, model, view, options=opts, model_path=model_path,
                                    concurrent=ConcurrentOptions(trials=opts.trials, threads=opts.threads))
    if is_training_view(view):
        try:
            return TrainingRun(plan, model, view, opts, model_path).run(), None  # labels, dropout, gradients
        except RuntimeBackendError as exc:  # no kernel for a gradient op: one line that says so
            raise no_kernel_error(exc, opts.device) from None
    return execute_plan(plan, model, view, options=opts, model_path=model_path), None


def verify_plan(
    model: onnx.ModelProto,
    plan: MemoryPlan,
    *,
    model_path: str | os.PathLike[str] | None = None,
    view: GraphView | None = None,
    options: VerifyOptions | None = None,
    plan_name: str | None = None,
    proven: float | None = None,
) -> VerifyReport:
    """Prove ``plan`` for ``model`` statically, then (unless it failed) by execution.

    ``plan_name`` (the plan file, as the user named it): check first that the
    plan was made for the model at ``model_path`` (:func:`check_plan_identity`).
    ``proven``: the seconds of the static proof of ``plan`` against ``view`` that the planner
    ran as it made it in this process, with no finding
    (:attr:`onnxmem.planning.pipeline.Planned.proof_seconds`): that proof is the report's, not
    run again; unless ``options`` asks for rule 9 (``concurrency="dag"``) and the plan was made
    without it. Never give it for a plan read from a file.
    """
    opts = options or VerifyOptions()
    check_concurrency(opts.concurrency)
    # the values that decided an If's branch: fed where not given, refused where they take another
    opts = replace(opts, inputs=check_decided(model, plan, opts.inputs))
    warnings: list[str] = []
    if plan_name is not None and model_path is not None:
        view, said = check_plan_identity(plan, model, model_path, plan_name=plan_name, view=view,
                                         inputs=opts.inputs)
        warnings.extend(said)
    v = view if view is not None else view_for_plan(model, plan, model_path, opts.inputs)
    # a plan made for concurrent execution is always held to rule 9
    made = str(plan.extra.get("concurrency", "sequential"))  # the mode the planner proved it in
    mode = "dag" if opts.concurrency == "dag" else made
    if proven is not None and view is not None and mode == made:
        static: tuple[Finding, ...] = ()  # the planner's proof, of this plan and view, in this mode
        static_s = proven
    else:
        t0 = time.perf_counter()  # the proof alone (the view may have needed a measuring run)
        static = tuple(prove_plan(plan, v, concurrency=mode))
        static_s = time.perf_counter() - t0
    if opts.device == "cuda" and plan.alignment % 256:
        warnings.append(
            f"the plan aligns offsets to {plan.alignment} B; CUDA kernels expect 256: re-plan with --alignment 256"
        )
    execution = None
    concurrent = None
    no_trials = _trials_reason(v)
    if opts.execute and not static and opts.concurrency == "dag" and no_trials is not None:
        warnings.append(f"concurrent trials run graphs without If/Loop/Scan bodies or training steps; {no_trials}, "
                        "so the plan ran once in its own order (one of the schedules the graph allows), and the "
                        "static proof checked every schedule")
    if opts.execute and not static:
        check_loops_end(model.graph)  # a Loop that never ends: no run, rather than one stopped at --time-limit
        execution, concurrent = run_isolated(execute, plan, model, v, opts, model_path)
    return VerifyReport(
        model=str(model_path) if model_path is not None else "",
        static=static,
        execution=execution,
        tensors=len(plan.tensors),
        nodes=len(plan.order),
        arena_size=plan.arena_size,
        static_seconds=static_s,
        warnings=tuple(warnings),
        concurrent=concurrent,
    )
