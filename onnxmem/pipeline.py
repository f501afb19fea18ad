"""From an ONNX file to a validated memory plan: the steps in one place.

load -> infer shapes -> view -> order -> liveness -> problem -> solve ->
validate -> plan. The CLI, the zoo job and the benchmarks call
:func:`plan_model`; each step is also usable on its own.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

import numpy as np
import onnx

from .aliasing import shared_layout
from .concurrency import check_concurrency, dag_liveness
from .errors import OnnxmemError, PlanInvalid
from .graph import GraphView, build_view
from .liveness import Liveness, build_liveness
from .model import ShapeInfo, file_sha256, infer_shapes, load_model
from .plan import MemoryPlan, PlannedTensor, SharedObject
from .problem import Solution, live_bytes, lower_bound
from .proof import prove_plan
from .scheduling import OrderOptions, reorder, stable_topological_order
from .scheduling.cost import order_peak
from .solvers import SOLVERS, SolveOptions, solve

__all__ = ["PlanOptions", "Planned", "aliased_liveness", "default_solver", "plan_liveness", "plan_loaded", "plan_model"]

Progress = Callable[[str], None]


def default_solver() -> str:
    return "auto" if "auto" in SOLVERS else "greedy"


def default_order() -> str:
    from .scheduling import ORDERS

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
    inplace: bool = True  # views and in-place outputs share bytes (onnxmem.aliasing)
    strict_dims: bool = True  # a dims name the model does not declare is an error
    concurrency: str = "sequential"  # "dag": safe under every schedule the graph allows (onnxmem.concurrency)


@dataclass(frozen=True, slots=True)
class Planned:
    """A plan and the objects it was made from (for annotation and verification)."""

    plan: MemoryPlan
    model: onnx.ModelProto
    view: GraphView
    liveness: Liveness
    solution: Solution
    shapes: ShapeInfo


def plan_model(
    path: str | os.PathLike[str], options: PlanOptions | None = None, progress: Progress | None = None
) -> Planned:
    """Plan the model at ``path``; raises ``OnnxmemError`` for bad input."""
    say = progress or (lambda _msg: None)
    say("reading model")
    model = load_model(path)
    return plan_loaded(model, path, options, progress)


def plan_loaded(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    options: PlanOptions | None = None,
    progress: Progress | None = None,
) -> Planned:
    """Plan an already loaded model (``path`` locates its external data)."""
    opts = options or PlanOptions()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    say("inferring shapes")
    if opts.measure_shapes:
        from .runtime import infer_measured_shapes  # onnxruntime sessions: only when measuring

        shapes = infer_measured_shapes(model, model_path=path, dims=opts.dims, input_shapes=opts.input_shapes,
                                       seed=opts.seed, strict_dims=opts.strict_dims)
    else:
        shapes = infer_shapes(model, dims=opts.dims, input_shapes=opts.input_shapes,
                              strict_dims=opts.strict_dims)
    view = build_view(model, shapes)
    say(f"ordering {len(view.ops)} nodes")
    order = reorder(
        view, opts.order,
        OrderOptions(timeout=opts.timeout, alignment=opts.alignment, io=opts.io, inplace=opts.inplace),
    )
    liveness = aliased_liveness(view, order, opts)
    return plan_liveness(model, path, shapes, view, liveness, opts, progress, started=t0)


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
) -> Planned:
    """Solve ``liveness`` (any order and layout), record the plan and prove it.

    The last steps of :func:`plan_loaded`, for a liveness built elsewhere
    (a hand-made layout, every Concat placement, ...); the static proof
    refuses a layout that breaks the sharing rules with ``PlanInvalid``.
    ``started``: the ``time.perf_counter()`` the plan's time counts from.
    """
    opts = options or PlanOptions()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter() if started is None else started
    order = liveness.order
    problem = liveness.problem
    say(f"assigning {len(problem)} buffers ({opts.solver})")
    solution = solve(problem, opts.solver, SolveOptions(timeout=opts.timeout, seed=opts.seed))
    if not solution.found:
        raise OnnxmemError(
            f"solver '{opts.solver}' found no plan ({solution.status}); try --solver greedy"
        )
    plan = _make_plan(model, path, opts, shapes, view, liveness, solution, time.perf_counter() - t0)
    if opts.concurrency == "sequential":  # the order matters: how the file's own order compares
        file_order = stable_topological_order(view)
        file_bound = (
            plan.lower_bound if file_order == order
            else order_peak(view, file_order, opts.io, opts.alignment, inplace=opts.inplace)
        )
        plan = replace(plan, extra={**plan.extra, "file_order_lower_bound": file_bound})
    else:  # every schedule: no order has a bound of its own
        plan = replace(plan, extra={**plan.extra, "concurrency": opts.concurrency})
    findings = prove_plan(plan, view, limit=5)
    if findings:
        raise PlanInvalid(f"solver '{opts.solver}' produced an invalid plan: {findings[0]}")
    return Planned(plan, model, view, liveness, solution, shapes)


def aliased_liveness(view: GraphView, order: tuple[int, ...] | list[int], opts: PlanOptions) -> Liveness:
    """The liveness of ``order`` with the sharing ``opts.inplace`` allows.

    Off: every tensor its own buffer. On: the layout
    :func:`onnxmem.aliasing.shared_layout` chooses. With ``--concurrency
    dag`` the sharing holds under every schedule and the problem's buffers
    conflict along the graph (:mod:`onnxmem.concurrency`).
    """
    check_concurrency(opts.concurrency)
    if opts.concurrency == "dag":
        return dag_liveness(view, order, io=opts.io, alignment=opts.alignment, inplace=opts.inplace)
    layout = shared_layout(view, order, opts.io, opts.alignment) if opts.inplace else None
    return build_liveness(view, order, layout, io=opts.io, alignment=opts.alignment)


def _make_plan(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    opts: PlanOptions,
    shapes: ShapeInfo,
    view: GraphView,
    liveness: Liveness,
    solution: Solution,
    seconds: float,
) -> MemoryPlan:
    problem = liveness.problem
    buf_index = {b.id: i for i, b in enumerate(problem.buffers)}
    objects: tuple[SharedObject, ...] = ()
    form = SOLVERS[solution.solver].form if solution.solver in SOLVERS else "offsets"
    if solution.objects is not None:
        form = "shared-objects"
        sizes: dict[int, int] = {}
        offs: dict[int, int] = {}
        for i, obj in enumerate(solution.objects):
            b = problem.buffers[i]
            sizes[obj] = max(sizes.get(obj, 0), b.size)
            offs[obj] = solution.offsets[i]
        objects = tuple(SharedObject(k, sizes[k], offs[k]) for k in sorted(sizes))
    tensors: list[PlannedTensor] = []
    for iv in liveness.intervals:
        t = view.tensors[iv.tensor]
        bi = buf_index[iv.group]
        prod = view.ops[t.producer] if t.producer is not None else None
        tensors.append(
            PlannedTensor(
                name=t.name,
                dtype=t.dtype,
                shape=t.shape,
                size=t.size,
                offset=int(solution.offsets[bi]) + iv.offset,
                start=iv.start,
                end=iv.end,
                producer=prod.name if prod else None,
                producer_op=prod.op_type if prod else None,
                kind=t.kind,
                group=iv.group,
                object=(int(solution.objects[bi]) if solution.objects is not None else None),
                group_offset=iv.offset,
            )
        )
    curve = live_bytes(problem)
    naive = sum(b.size for b in problem.buffers)
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
        lower_bound=lower_bound(problem),
        naive_size=int(naive),
        weights_size=int(view.weights_size),
        peak_step=int(np.argmax(curve)) if curve.size else 0,
        solver={
            "name": solution.solver,
            "status": solution.status,
            "seconds": round(solution.seconds, 6),
            "params": {"timeout": opts.timeout, "seed": opts.seed},
        },
        plan_seconds=round(seconds, 6),
        objects=objects,
        warnings=shapes.warnings,
    )
