"""From an ONNX file to a validated memory plan: the steps in one place.

load -> infer shapes -> view -> plan the bodies (:mod:`onnxmem.planning.bodies`) ->
order -> liveness -> problem -> solve -> validate -> plan. The CLI, the zoo job and the benchmarks call
:func:`plan_model`; each step is also usable on its own. The order, liveness and solve
steps are :func:`onnxmem.planning.compose.compose`, which the bodies, range plans and
programs call too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np
import onnx

from onnxmem.analysis.liveness import Liveness
from onnxmem.core.errors import ModelError, PlanInvalid, ShapeError, show_name
from onnxmem.core.memory import release_freed
from onnxmem.core.problem import Problem, Solution, check_limits, live_bytes
from onnxmem.core.solvers import SOLVERS
from onnxmem.core.workclock import now, session
from onnxmem.graph import (
    BRANCH_NAMES,
    Decision,
    GraphView,
    assumed_record,
    build_view,
    child_path,
    decide_branches,
    excluded_branches,
    read_assumed,
    with_regions,
)
from onnxmem.model import (
    NodeFields,
    caller_state,
    check_tensor_inputs,
    file_sha256,
    load_model,
    read_nodes,
    with_values,
)
from onnxmem.planning.bodies import (
    BodyPlan,
    InsideOption,
    aliased_liveness,
    body_tensors,
    choose_inside,
    level_tensors,
    nested_bound,
    outside_values,
    plan_bodies,
    region_bounds,
)
from onnxmem.planning.checkpoint import checkpoint_known
from onnxmem.planning.compose import compose, solve_layout
from onnxmem.planning.given import (
    check_decided,
    infer_given,
    sizing_candidates,
    sizing_record,
    sizing_warnings,
    static_input_shapes,
)
from onnxmem.plans.point import MemoryPlan, SharedObject, SubgraphPlan
from onnxmem.proof.plan import prove_plan, walk_bodies
from onnxmem.scheduling import ORDERS, stable_topological_order
from onnxmem.scheduling.anyorder import any_order_bound
from onnxmem.scheduling.cost import order_peak
from onnxmem.shapes import ShapeInfo, infer_shapes
from onnxmem.shapes.pieces import PIECE_NODES

if TYPE_CHECKING:
    from onnxmem.runtime.optimize import Optimized

__all__ = [
    "PlanOptions",
    "with_checkpoint",
    "Planned",
    "aliased_liveness",
    "default_solver",
    "branch_record",
    "check_decided",
    "fold_record",
    "loop_trips_record",
    "plan_branches",
    "plan_max_trips",
    "plan_fold",
    "plan_liveness",
    "plan_loaded",
    "plan_model",
    "plan_optimized",
    "optimized_record",
]

Progress = Callable[[str], None]


def default_solver() -> str:
    return "auto" if "auto" in SOLVERS else "greedy"


def default_order() -> str:
    return "auto" if "auto" in ORDERS else "file"


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """Everything ``onnxmem plan`` can be told; the defaults are the CLI's."""

    solver: str = field(default_factory=default_solver)
    order: str = field(default_factory=default_order)
    alignment: int = 64
    io: str = "internal"
    dims: Mapping[str, int] = field(default_factory=dict)
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    measure_shapes: bool = False
    timeout: float | None = None
    seed: int = 0
    inplace: bool = True  # views and in-place outputs share bytes (onnxmem.analysis.aliasing)
    strict_dims: bool = True  # a dims name the model does not declare is an error
    fold: bool = True  # nodes computed only from weights are folded into weights (onnxmem.graph.view)
    #: values of some graph inputs (--inputs): used when measuring shapes; their shapes bind dims
    inputs: Mapping[str, np.ndarray] | None = field(default=None, compare=False)
    concurrency: str = "sequential"  # "dag": safe under every schedule the graph allows (onnxmem.analysis.happens_before)
    #: If branches runs take (``--branch``): ``{If node path: "then_branch"|"else_branch"}``; the
    #: other branch of each is left out of the plan (:func:`onnxmem.graph.view.excluded_branches`)
    branches: Mapping[str, str] = field(default_factory=dict)
    #: If nodes whose condition the given values, constants or shapes decide (set by planning,
    #: :func:`onnxmem.graph.decide_branches`): each planned for its branch alone, as ``--branch`` would
    decided: Mapping[str, Decision] = field(default_factory=dict)
    #: the graph planned (``--optimize``): the model as written (``none``), or the graph onnxruntime
    #: builds from it at that level for ``device``'s provider (:mod:`onnxmem.runtime.optimize`)
    optimize: str = "none"
    device: str = "cpu"
    #: the NCHWc block size of the session that built the graph (set by :func:`plan_optimized`)
    nchwc_block: int | None = None
    #: the graph inputs that are the caller's state (set by :func:`plan_optimized`: those of the
    #: model as written; ``None``: the planned graph's own, :func:`onnxmem.model.caller_state`)
    caller: Mapping[str, str] | None = None
    #: the most iterations a Loop whose carried values grow runs, where its trip count is not a
    #: constant (``--max-trips``; :mod:`onnxmem.shapes.loops`)
    max_trips: int | None = None
    #: a training checkpoint (``--checkpoint``) whose frozen integer parameters shape inference
    #: reads; without it, the generator's ``checkpoint`` beside the model (:mod:`onnxmem.planning.checkpoint`)
    checkpoint: str | None = None
    #: the values read from it and what the plan records of it (set by planning)
    known: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)
    known_record: Mapping[str, object] = field(default_factory=dict, compare=False)
    #: the given values (--inputs) that sized tensors inference could not size without them (set by
    #: planning, :mod:`onnxmem.planning.given`): read as known values, and recorded
    sizing: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:  # past these the planning passes' sums and deadlines overflowed
        check_limits(self.alignment, self.timeout)

    @property
    def kernels(self) -> str:
        """:attr:`onnxmem.graph.GraphView.kernels` of the graph planned: every provider's
        declarations for the graph as written, ``device``'s own for onnxruntime's graph."""
        return "" if self.optimize == "none" else self.device


@dataclass(frozen=True, slots=True)
class Planned:
    """A plan and the objects it was made from (for annotation and verification).
    ``view`` carries the regions of its bodies; ``bodies``: each body's plan, by path;
    ``proof_seconds``: how long the static proof of ``plan`` against ``view`` took as it was made
    (every plan made is proven: ``PlanInvalid`` otherwise)."""

    plan: MemoryPlan
    model: onnx.ModelProto
    view: GraphView
    liveness: Liveness
    solution: Solution
    shapes: ShapeInfo
    bodies: Mapping[str, BodyPlan] = field(default_factory=dict)
    proof_seconds: float = 0.0


def plan_model(
    path: str | os.PathLike[str], options: PlanOptions | None = None, progress: Progress | None = None
) -> Planned:
    """Plan the model at ``path``; raises ``OnnxmemError`` for bad input.

    With ``options.optimize`` other than ``none`` the graph planned is the one onnxruntime
    builds (:func:`plan_optimized`); the returned ``model`` is that graph, whose external data
    was in a temporary folder that is gone (plan inside :func:`onnxmem.runtime.optimize.optimized_model`
    to run it).
    """
    say = progress or (lambda _msg: None)
    say("reading model")
    model = load_model(path)
    opts = options or PlanOptions()
    if opts.optimize == "none":
        return plan_loaded(model, path, opts, progress)
    from onnxmem.runtime.optimize import optimized_model

    say(f"optimizing with onnxruntime (--optimize {opts.optimize}, --device {opts.device})")
    with optimized_model(path, opts.optimize, opts.device, model=model) as built:
        return plan_optimized(built, opts, progress)


def plan_optimized(built: Optimized, options: PlanOptions | None = None, progress: Progress | None = None) -> Planned:
    """Plan the graph :func:`onnxmem.runtime.optimize.optimized_model` built (inside its ``with``
    block). The plan names the user's file (its path and sha256) and records how the graph was
    built and its digest in its ``model`` object (:func:`optimized_record`). A training
    checkpoint is looked for beside the user's file (the built graph's is a temporary one)."""
    opts = replace(options or PlanOptions(), nchwc_block=built.record.nchwc_block, caller=built.caller)
    opts = with_checkpoint(built.model, built.source, opts)
    planned = plan_loaded(built.model, built.path, opts, progress)
    return replace(planned, plan=replace(planned.plan, model=optimized_record(planned.plan.model, built)))


def optimized_record(model: Mapping[str, object], built: Optimized) -> dict[str, object]:
    """A plan's ``model`` object for the graph ``built``: the user's file's path and sha256, and
    ``optimization`` and ``graph_sha256`` (:mod:`onnxmem.plans.optimization`); unchanged at level
    ``none``."""
    if built.record.level == "none":
        return dict(model)
    return {**model, "path": built.source, "sha256": file_sha256(built.source), **built.model_record()}


def plan_loaded(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    options: PlanOptions | None = None,
    progress: Progress | None = None,
) -> Planned:
    """Plan an already loaded model (``path`` locates its external data)."""
    with session():  # the bodies' and the main graph's searches share one count of work
        return _plan_loaded(model, path, options, progress)


def _plan_loaded(
    model: onnx.ModelProto, path: str | os.PathLike[str], options: PlanOptions | None, progress: Progress | None,
) -> Planned:
    opts = options or PlanOptions()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    check_tensor_inputs(model)  # no flag sizes a sequence or map input, nor does a measuring run
    say("inferring shapes")
    if opts.caller is None:  # the roles of the graph inputs, found once for the checkpoint and the view
        opts = replace(opts, caller=caller_state(model))
    opts = with_checkpoint(model, path, opts)
    if opts.inputs:
        from onnxmem.runtime.inputs import bind_input_shapes

        opts = replace(opts, input_shapes=bind_input_shapes(model, opts.inputs, opts.input_shapes))
    opts = replace(opts, decided=_decide(model, opts, static_input_shapes(model, opts.input_shapes)))
    # the main graph's nodes read once, for the inference and the view (which then share one str per
    # name), where the inference reads this very graph (not a copy with a checkpoint's values, not a run)
    nodes = None if opts.known or opts.measure_shapes else read_nodes(model.graph)
    try:
        shapes = _infer(model, path, opts, nodes)
    except ShapeError:  # sizes inference cannot find: small given values, read as known, may give them
        given = {} if opts.measure_shapes else sizing_candidates(model, opts.inputs, opts.known)
        if not given:
            raise
        shapes, kept = infer_given(lambda v: _infer(model, path, replace(opts, known={**opts.known, **v})), given)
        opts, nodes = replace(opts, known={**opts.known, **kept}, sizing=kept), None
    # conditions that read the shapes inference found (a graph without subgraphs has no If)
    again = {} if shapes.flat else _decide(model, opts, shapes.shapes)
    if again.keys() - opts.decided.keys():
        opts = replace(opts, decided=again)
        shapes = _infer(model, path, opts, nodes)
    view = view_of(model, shapes, opts, nodes)
    del nodes
    base = view
    bodies: dict[str, BodyPlan] = {}
    sizes: dict[str, int] = {}
    inside: dict[str, InsideOption] = {}
    main = opts  # the main graph's options: what is left of --timeout after the bodies
    if view.bodies:
        say("planning subgraph bodies")
        tb = now()
        sizes, bodies = plan_bodies(view, opts, inside)
        view = with_regions(view, sizes)
        if opts.timeout is not None:
            main = replace(opts, timeout=max(opts.timeout - (now() - tb), 0.01))

    def shared(v: GraphView, order: Sequence[int]) -> tuple[GraphView, Liveness]:
        return choose_inside(base, v, order, opts, aliased_liveness(v, order, opts), sizes, bodies, inside,
                             recursive=True)

    made = compose(view, main, shared, say=say)
    planned = _record(model, path, shapes, made.view, made.liveness, made.solution, main, t0, bodies)
    if main is opts:
        return planned
    solver = {**planned.plan.solver, "params": {**planned.plan.solver["params"], "timeout": opts.timeout}}
    return replace(planned, plan=replace(planned.plan, solver=solver))


def view_of(model: onnx.ModelProto, shapes: ShapeInfo, opts: PlanOptions,
            nodes: NodeFields | None = None) -> GraphView:
    """The planning view of ``model`` at ``shapes`` under the options that shape it (``--fold``,
    the kernels' provider and the roles of the graph inputs)."""
    return build_view(model, shapes, fold=opts.fold, kernels=opts.kernels, caller=opts.caller, nodes=nodes)


def with_checkpoint(model: onnx.ModelProto, path: str | os.PathLike[str], opts: PlanOptions) -> PlanOptions:
    """``opts`` with the values of ``model``'s constant frozen parameters read from its training
    checkpoint (``opts.checkpoint``, or the generator's file beside ``path``) and the record the
    plan keeps of it (:func:`onnxmem.planning.checkpoint.checkpoint_known`); ``opts`` as it is
    where they were read already."""
    if opts.known_record:
        return opts
    known, record = checkpoint_known(model, path, opts.checkpoint, opts.caller)
    return replace(opts, known=known, known_record=record)


def _decide(model: onnx.ModelProto, opts: PlanOptions, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Decision]:
    """The If nodes the given values, constants and ``shapes`` decide
    (:func:`onnxmem.graph.decide_branches`); a ``--branch`` that names the other branch of one
    is a ``ModelError``."""
    decided = decide_branches(model, opts.inputs, shapes)
    for k, d in decided.items():
        want = BRANCH_NAMES.get(opts.branches.get(k, ""), d.branch)
        if want != d.branch:
            by = ("the --inputs value of " + ", ".join(map(show_name, d.inputs))) if d.inputs else "these shapes"
            raise ModelError(f"--branch {show_name(k)}={want.split('_')[0]}: the If's condition takes its "
                             f"{d.branch} with {by}; leave out --branch {show_name(k)}, or give inputs that "
                             f"take its {want}")
    return decided


def _infer(model: onnx.ModelProto, path: str | os.PathLike[str], opts: PlanOptions,
           nodes: NodeFields | None = None) -> ShapeInfo:
    """The shapes planned, with the branches ``--branch`` and the decided conditions leave out
    (``nodes``: the main graph's node fields, where read)."""
    taken = {**{k: d.branch for k, d in opts.decided.items()}, **opts.branches}
    excluded = excluded_branches(model, taken)
    if opts.measure_shapes:  # onnxruntime sessions: imported only when measuring
        from onnxmem.runtime.ort import infer_measured_shapes

        return infer_measured_shapes(with_values(model, opts.known), model_path=path, dims=opts.dims, input_shapes=opts.input_shapes,
                                     seed=opts.seed, strict_dims=opts.strict_dims, inputs=opts.inputs,
                                     excluded=excluded, max_trips=opts.max_trips)
    given = {k: v for k, v in opts.input_shapes.items() if k not in opts.known}  # known: an initializer now
    return infer_shapes(with_values(model, opts.known), dims=opts.dims, input_shapes=given,
                        strict_dims=opts.strict_dims, excluded=excluded, nchwc_block=opts.nchwc_block,
                        max_trips=opts.max_trips, nodes=nodes)


def plan_liveness(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    shapes: ShapeInfo,
    view: GraphView,
    liveness: Liveness,
    options: PlanOptions | None = None,
    progress: Progress | None = None,
    *,
    started: float | None = None,
    bodies: Mapping[str, BodyPlan] | None = None,
) -> Planned:
    """Solve ``liveness`` (any order and layout), record the plan and prove it.

    The last steps of :func:`plan_loaded`, for a liveness built elsewhere
    (a hand-made layout, every Concat placement, ...); the static proof
    refuses a layout that breaks the sharing rules with ``PlanInvalid``.
    ``started``: the ``time.perf_counter()`` the plan's time counts from.
    ``bodies``: the plans of the view's bodies (:func:`onnxmem.planning.bodies.plan_bodies`),
    whose regions ``view`` carries; planned here when not given."""
    opts = options or PlanOptions()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter() if started is None else started
    if bodies is None:
        sizes, bodies = plan_bodies(view, opts)
        if any(size and view.path == "" and not view.regions for size in sizes.values()):
            raise ValueError("plan_liveness: the view lacks the regions of its bodies; plan with plan_loaded")
    say(f"assigning {len(liveness.problem)} buffers ({opts.solver})")
    solution = solve_layout(liveness.problem, opts.solver, timeout=opts.timeout, seed=opts.seed)
    return _record(model, path, shapes, view, liveness, solution, opts, t0, bodies)


def _record(model: onnx.ModelProto, path: str | os.PathLike[str], shapes: ShapeInfo, view: GraphView,
            liveness: Liveness, solution: Solution, opts: PlanOptions, t0: float,
            bodies: Mapping[str, BodyPlan]) -> Planned:
    """The plan of a solved liveness, with what it records of the order, folding and branches,
    proven (``PlanInvalid`` when the proof fails); ``t0``: when planning started."""
    order = liveness.order
    plan = _make_plan(model, path, opts, shapes, view, liveness, solution, time.perf_counter() - t0, bodies)
    if opts.concurrency == "sequential":  # the order matters: how the file's own order compares
        file_order = stable_topological_order(view)
        file_bound = (
            plan.lower_bound if file_order == order
            else order_peak(view, file_order, opts.io, opts.alignment, inplace=opts.inplace)
        )
        every = any_order_bound(view, opts.io, opts.alignment, inplace=opts.inplace)
        plan = replace(plan, extra={**plan.extra, "file_order_lower_bound": file_bound,
                                    **({"any_order_lower_bound": every} if every is not None else {})})
    else:  # every schedule: no order has a bound of its own
        plan = replace(plan, extra={**plan.extra, "concurrency": opts.concurrency})
    plan = replace(plan, extra={**plan.extra, **fold_record(view, opts.fold), **outside_extra(view),
                                **branch_record(opts.branches), **assumed_record(opts.decided, opts.inputs),
                                **sizing_record(opts.sizing), **loop_trips_record(view),
                                **sizing_record(sizing_candidates(model, opts.inputs, opts.known)
                                                if opts.measure_shapes else {}, "measured_inputs"),
                                **({"checkpoint": dict(opts.known_record)} if opts.known_record else {})})
    if len(view.ops) >= PIECE_NODES:  # the search's freed pages handed back before the proof takes its own
        release_freed()
    t1 = time.perf_counter()
    findings = prove_plan(plan, view, limit=5)
    if findings:
        raise PlanInvalid(f"solver '{opts.solver}' produced an invalid plan: {findings[0]}")
    return Planned(plan, model, view, liveness, solution, shapes, bodies, time.perf_counter() - t1)


def loop_trips_record(view: GraphView) -> dict[str, object]:
    """What the plan records of the Loops whose carried values grow: ``{"loop_trips": {Loop node
    path: {"bound": N, "source": "model"|"user"}}}`` (the bound it assumed; :func:`plan_max_trips`
    reads it back); nothing without such a Loop."""
    found = {child_path(parent.path, parent.ops[b.owner].name): {"bound": b.bound.bound, "source": b.bound.source}
             for parent, b in walk_bodies(view) if b.bound is not None}
    return {"loop_trips": dict(sorted(found.items()))} if found else {}


def _trip_warnings(view: GraphView) -> tuple[str, ...]:
    """The assumption a plan makes for each Loop whose values grow and whose bound the user gave."""
    return tuple(f"Loop {show_name(child_path(parent.path, parent.ops[b.owner].name))}: its values grow per "
                 f"iteration and are planned for at most {b.bound.bound} iterations (--max-trips); verify "
                 "refuses a run of more" for parent, b in walk_bodies(view)
                 if b.bound is not None and b.bound.source == "user")


def plan_max_trips(plan: MemoryPlan) -> int | None:
    """The ``--max-trips`` ``plan`` was made with (the largest bound the user gave a Loop), or ``None``."""
    found = plan.extra.get("loop_trips")
    given = [int(v["bound"]) for v in found.values() if v.get("source") == "user"] if isinstance(found, dict) else []
    return max(given) if given else None


def branch_record(branches: Mapping[str, str]) -> dict[str, object]:
    """What the plan records of ``--branch`` under ``extra``: ``{"branches": {If node path:
    the branch runs take}}`` (:func:`plan_branches` reads it back); nothing without it."""
    return {"branches": {k: BRANCH_NAMES[v] for k, v in sorted(branches.items())}} if branches else {}


def plan_branches(plan: MemoryPlan) -> dict[str, str]:
    """The If branches ``plan`` assumes runs take: those of ``--branch`` (see :func:`branch_record`)
    and those the values it was given decided (``branches_decided``); ``{}`` for none."""
    found = plan.extra.get("branches")
    given = ({str(k): str(v) for k, v in found.items() if isinstance(k, str) and v in BRANCH_NAMES}
             if isinstance(found, dict) else {})
    decided, _ = read_assumed(plan.extra)
    return {**{k: d.branch for k, d in decided.items()}, **given}


def fold_record(view: GraphView, fold: bool) -> dict[str, object]:
    """What the plan records of constant folding, under ``extra``.

    ``fold``: ``"on"`` or ``"off"`` (:func:`plan_fold` reads it back; plans
    without it were made before folding existed, as with ``"off"``).
    ``folded``: the values computed once from weights (origin ``folded`` in
    :class:`onnxmem.graph.view.Tensor`), kept out of the arena and counted in
    ``weights_size``, in node order. Each is a value of the main graph that
    the plan keeps outside the arena for the reason ``folded``.
    """
    return {"fold": "on" if fold else "off", "folded": view.folded()}


def plan_fold(plan: MemoryPlan) -> bool:
    """Whether ``plan`` was made with constant folding on (see :func:`fold_record`)."""
    return plan.extra.get("fold") == "on"


def outside_extra(view: GraphView) -> dict[str, object]:
    """``{"outside": [...]}`` for a view with caller-owned tensors (a training graph's
    parameters, gradient accumulation buffers, ...), each ``{name, reason, dtype, shape,
    size}``; empty otherwise. The plan's ``extra`` carries it."""
    if not view.outside:
        return {}
    rows = []
    for name, reason in view.outside.items():
        t = view.tensors.get(name)
        if t is not None:
            rows.append({"name": name, "reason": reason, "dtype": t.dtype, "shape": list(t.shape), "size": t.size})
    return {"outside": rows}


def _form(problem: Problem, solution: Solution) -> tuple[str, tuple[SharedObject, ...]]:
    """The plan's form and, for a shared-objects solution, its objects."""
    if solution.objects is None:
        return (SOLVERS[solution.solver].form if solution.solver in SOLVERS else "offsets"), ()
    sizes: dict[int, int] = {}
    offs: dict[int, int] = {}
    for i, obj in enumerate(solution.objects):
        b = problem.buffers[i]
        sizes[obj] = max(sizes.get(obj, 0), b.size)
        offs[obj] = solution.offsets[i]
    return "shared-objects", tuple(SharedObject(k, sizes[k], offs[k]) for k in sorted(sizes))


def _make_plan(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    opts: PlanOptions,
    shapes: ShapeInfo,
    view: GraphView,
    liveness: Liveness,
    solution: Solution,
    seconds: float,
    bodies: Mapping[str, BodyPlan],
) -> MemoryPlan:
    problem = liveness.problem
    form, objects = _form(problem, solution)
    tensors = level_tensors(view, liveness, solution)
    tensors += body_tensors(view, tensors, bodies)
    bound = {(bp.path, o) for bp in bodies.values() if bp.outputs == "owner" for o in bp.view.outputs
             if bp.view.tensors[o].producer is not None and bp.view.tensors[o].kind != "weight"}
    outside, warnings = outside_values(model.graph, view, {(t.graph, t.name) for t in tensors}, opts.io, bound)
    regions = {(t.graph, t.name) for t in tensors if t.kind == "region"}
    status = str(solution.status.value)
    if status == "optimal" and (warnings or any(not b.solution.optimal for b in bodies.values())):
        status = "feasible"  # the main graph is at its bound; some body is not, or is not planned
    naive = sum(b.size for b in problem.buffers if ("", b.id) not in regions)
    naive += sum(b.size for bp in bodies.values() for b in bp.liveness.problem.buffers
                 if (bp.path, b.id) not in regions)
    subgraphs = tuple(
        SubgraphPlan(bp.path, bp.parent, bp.owner, bp.attr, bp.kind,
                     tuple(bp.view.ops[i].name for i in bp.liveness.order),
                     tuple(bp.view.ops[i].op_type for i in bp.liveness.order),
                     bp.arena_size, bp.lower_bound,
                     {"name": bp.solution.solver, "status": bp.solution.status,
                      "seconds": round(bp.solution.seconds, 6)}, bp.outputs)
        for bp in bodies.values()
    )
    curve = live_bytes(problem)
    return MemoryPlan(
        model={
            "path": str(path),
            "sha256": file_sha256(path),
            "ir_version": int(model.ir_version),
            "opset": {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import},
        },
        dims={k: int(v) for k, v in sorted(opts.dims.items())},
        input_shapes={k: list(v) for k, v in sorted(opts.input_shapes.items())},
        order=tuple(view.ops[i].name for i in liveness.order),
        op_types=tuple(view.ops[i].op_type for i in liveness.order),
        order_strategy=opts.order,
        io=opts.io,
        alignment=opts.alignment,
        inplace=opts.inplace,
        form=form,
        tensors=tuple(tensors),
        arena_size=int(solution.height),
        lower_bound=nested_bound(view, problem, region_bounds(bodies), opts.alignment),
        naive_size=int(naive),
        weights_size=int(view.weights_size),
        peak_step=int(np.argmax(curve)) if curve.size else 0,
        solver={
            "name": solution.solver,
            "status": status,
            "seconds": round(solution.seconds, 6),
            "params": {"timeout": opts.timeout, "seed": opts.seed},
        },
        plan_seconds=round(seconds, 6),
        objects=objects,
        warnings=shapes.warnings + tuple(warnings) + tuple(
            f"If {show_name(k)}: the plan assumes runs take its {BRANCH_NAMES[v]} (--branch); the other branch "
            "is not planned (outside, reason excluded-branch) and verify refuses a run that takes it"
            for k, v in sorted(opts.branches.items())) + tuple(
            f"If {show_name(k)}: its condition takes its {d.branch} "
            + (f"at the --inputs value of {', '.join(map(show_name, d.inputs))}" if d.inputs else "at these shapes")
            + "; the plan holds that branch alone (the other: outside, reason excluded-branch) and verify "
            "refuses inputs that take the other"
            for k, d in sorted(opts.decided.items()) if k not in opts.branches) + _trip_warnings(view)
        + sizing_warnings(opts.sizing),
        subgraphs=subgraphs,
        outside=tuple(outside),
    )
