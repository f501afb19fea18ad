"""Planning under a memory budget: ``onnxmem plan MODEL --budget SIZE``.

:func:`plan_with_budget`:

1. plan the model as usual (order, aliasing, assignment); if its arena fits
   the budget, that plan is the answer and the model is unchanged;
2. otherwise build the recomputation problem (:func:`~onnxmem.remat.problem.build_problem`)
   for the orders ``keep`` (:data:`KEEP`) names: with ``onnxruntime`` (the default), the
   order onnxruntime runs the model in when its nodes sit in the file's order, in the
   planned order, or in that with its sinks early (:func:`sinks_early`: a gradient's
   accumulator right after the gradient); with ``planner``, those three orders themselves;
   those that differ, with the chosen cost model,
   and let the algorithm choose what to drop under a *target* peak, at
   first the budget plus what the model counts above the unbudgeted arena
   (the cheaper order that fits wins);
3. rewrite the model (:func:`~onnxmem.remat.rewrite.rewrite_model`) and plan
   it in the order it runs in (onnxruntime's, or the written one); the problem's model of the peak knows only some of
   the planner's sharing, so the arena can land above or below the target: when it is above
   the budget, the target becomes the model's peak of that choice less the
   difference and step 2 runs again (at most :data:`ROUNDS` times); drops
   that do not fit the target in the model (the lowest peak an algorithm
   found) are planned for real once too;
4. when no round fits, the rewrite with the smallest arena (every
   droppable value dropped, or ``greedy`` toward 0, under each order;
   algorithm ``smallest``) is the answer if it fits;
   else :class:`~onnxmem.core.errors.OnnxmemError` with one line naming the
   smallest arena reached, its peak node, and the node that sets the floor
   (its inputs and outputs and what no recomputation frees).

:func:`sweep` runs steps 2-3 over a range of budgets for several
algorithms: the frontier of arena against extra compute.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import onnx

from onnxmem.core.errors import OnnxmemError, show_name
from onnxmem.core.problem import align_up
from onnxmem.core.sizes import MAX_SIZE, parse_size
from onnxmem.graph import GraphView
from onnxmem.planning import Planned, PlanOptions, plan_loaded
from onnxmem.remat.cost import flops_costs, measured_costs, model_cost
from onnxmem.remat.problem import RematProblem, build_problem, simulate
from onnxmem.remat.registry import ALGORITHMS, Choice, RematOptions, choose
from onnxmem.remat.rewrite import left_out, rewrite_model
from onnxmem.scheduling import stable_topological_order
from onnxmem.scheduling.onnxruntime import laid_out_order

__all__ = ["KEEP", "Budgeted", "SweepPoint", "arena_limit", "extra_cost", "parse_budget", "plan_with_budget", "sinks_early", "sweep"]

#: graphs of more steps try the file order only when the planned one found nothing
LARGE = 1000

#: rounds of step 3 (target lowered after the arena came out above the budget)
ROUNDS = 6

#: ``keep``: the order a rewrite is made for, and planned in
KEEP = {
    "onnxruntime": "onnxruntime's default execution order: the problem is stated over the order onnxruntime "
                   "runs the model in, the rewrite keeps the file's node order with each block of duplicates "
                   "right before its reader and waiting for the reader's other inputs, and is planned in the "
                   "order onnxruntime runs it in",
    "planner": "the planner's order (and two others): the rewrite is written in it and planned in file order; "
               "onnxruntime keeps it with SessionOptions.execution_order = PRIORITY_BASED",
}


def _check_keep(keep: str) -> None:
    if keep not in KEEP:
        raise OnnxmemError(f"--remat-order {show_name(keep)} is not one of {', '.join(KEEP)}")

def parse_budget(text: str) -> tuple[int | None, float | None]:
    """``'64MiB'`` -> ``(67108864, None)``; ``'0.5x'`` -> ``(None, 0.5)``; bytes or a factor
    of the arena planned without a budget. Bad text is a one-line ``OnnxmemError``."""
    t = text.strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*x", t)
    if m:
        f = float(m.group(1))
        if not 0 < f < math.inf:
            raise OnnxmemError(f"--budget {show_name(text)}: a factor must be above 0 and finite, e.g. 0.5x")
        return None, f
    return parse_size(text, "--budget", " or a factor of the unbudgeted arena (0.5x)"), None


@dataclass(frozen=True, slots=True)
class Budgeted:
    """The answer to a budget: ``planned`` (the rewritten model's plan, or the original's when
    it fitted), ``original`` (the plan without a budget), ``budget`` (bytes), ``choice``
    (``None`` when nothing was recomputed), the ``extra`` cost, the ``model_cost`` and the
    ``cost_model``; ``rewritten``: the rewritten model (``None`` when unchanged)."""

    planned: Planned
    original: Planned
    budget: int
    choice: Choice | None
    extra: int
    model_cost: int
    cost_model: str
    rewritten: onnx.ModelProto | None
    seconds: float

    @property
    def extra_percent(self) -> float:
        return 100.0 * self.extra / self.model_cost if self.model_cost else 0.0


def arena_limit(arena: int, budget: int | None, factor: float | None, overhead: int = 0) -> int:
    """The largest arena a budget allows: ``budget`` bytes, or ``factor`` x the unbudgeted
    ``arena``, for the arena and the runtime's ``overhead`` beside it together (a ratio of
    ``arena + overhead``, less ``overhead``). A budget the overhead alone fills is a one-line
    ``OnnxmemError``."""
    if overhead < 0:
        raise OnnxmemError(f"--runtime-overhead {overhead:,} B: give the bytes the runtime asks for beside the "
                           "arena, 0 or more")
    scaled = (factor or 1.0) * (arena + overhead)
    if budget is None and not scaled < MAX_SIZE:
        raise OnnxmemError(f"--budget {factor:g}x of the {arena + overhead:,} B planned without a budget is over 2^62 "
                           "bytes; give a factor that leaves a size below 2^62 bytes (1.0x plans the arena as it is)")
    total = budget if budget is not None else int(scaled)
    if total - overhead <= 0:
        raise OnnxmemError(f"--budget of {total:,} B for the arena and the runtime's {overhead:,} B beside it leaves "
                           "no room for the arena; give a larger budget or a smaller --runtime-overhead")
    return total - overhead


def node_costs(planned: Planned, path: str | os.PathLike[str], cost_model: str) -> dict[int, int]:
    """``{view node index: cost}`` under ``cost_model`` (``flops`` or ``measured``)."""
    if cost_model == "measured":
        return measured_costs(planned.view, planned.model, path)
    if cost_model != "flops":
        raise OnnxmemError(f"--cost '{cost_model}' is not one of flops, measured")
    return flops_costs(planned.view, planned.model)


def _rewrite(original: Planned, problem: RematProblem, drops: Sequence[int], path: str | os.PathLike[str],
             opts: PlanOptions, keep: str) -> tuple[onnx.ModelProto, Planned]:
    """The rewrite of ``drops`` and its plan, in the order ``keep`` names (:data:`KEEP`)."""
    rewritten = rewrite_model(original.model, original.view, problem, simulate(problem, drops))
    return rewritten, _plan_rewritten(rewritten, path, opts, "onnxruntime" if keep == "onnxruntime" else "file")


def _plan_rewritten(rewritten: onnx.ModelProto, path: str | os.PathLike[str], opts: PlanOptions, order: str) -> Planned:
    planned = plan_loaded(rewritten, path, replace(opts, order=order, measure_shapes=False))
    data = rewritten.SerializeToString()
    model_info = {**planned.plan.model, "sha256": hashlib.sha256(data).hexdigest()}
    return replace(planned, plan=replace(planned.plan, model=model_info))


def sinks_early(view: GraphView, order: Sequence[int]) -> tuple[int, ...]:
    """``order`` with every *sink* (a node no other node reads: a gradient accumulator, a graph
    output's writer) moved to right after the last writer of what it reads, in order.

    Still topological (nothing reads a sink; its inputs are written before). Without a budget
    it rarely matters where a sink runs; with one, a weight gradient that waits for its
    accumulator holds its bytes past the point recomputation lowered the peak to.
    """
    pos = {op: s for s, op in enumerate(order)}
    sink = [not any(view.consumers.get(o) for o in view.ops[op].outputs if o) for op in order]
    after: dict[int, list[int]] = {}
    kept: list[int] = []
    for s, op in enumerate(order):
        if not sink[s]:
            kept.append(op)
            continue
        writers = [pos[t.producer] for n in view.ops[op].inputs
                   if n and (t := view.tensors.get(n)) is not None and t.producer is not None and t.producer in pos]
        after.setdefault(max(writers, default=-1), []).append(op)
    out = list(after.get(-1, []))
    for op in kept:
        out.append(op)
        out.extend(after.get(pos[op], []))
    return tuple(out)


def _problems(original: Planned, costs: dict[int, int], options: PlanOptions, keep: str) -> list[RematProblem]:
    """``keep`` ``onnxruntime``: the problem under the order onnxruntime runs the model in, with
    its nodes in the file's order, in the planned order and in that with its sinks early. Else
    the problem under the planned order, under it with its sinks early (:func:`sinks_early`),
    and under the file order when those differ (an order chosen for the peak without
    recomputation can hold values a recomputing order would not)."""
    planned = tuple(original.liveness.order)
    if keep == "onnxruntime":  # each layout's nodes in the order onnxruntime derives from it
        layouts = [tuple(stable_topological_order(original.view)), planned, sinks_early(original.view, planned)]
        return [replace(build_problem(original.view, tuple(laid_out_order(original.view, layout)), costs,
                                      io=options.io, alignment=options.alignment), layout=layout)
                for layout in dict.fromkeys(layouts)]
    orders = [planned]
    for o in (sinks_early(original.view, orders[0]), stable_topological_order(original.view)):
        if o not in orders:
            orders.append(o)
    return [build_problem(original.view, o, costs, io=options.io, alignment=options.alignment) for o in orders]


def _best_attempt(original: Planned, problems: Sequence[RematProblem], path: str | os.PathLike[str],
                  opts: PlanOptions, budget: int, algorithm: str, ropts: RematOptions, keep: str
                  ) -> tuple[tuple[Choice, onnx.ModelProto, Planned] | None, RematProblem]:
    """The cheapest fitting :func:`_attempt` over ``problems`` (each order gets the whole timeout;
    past :data:`LARGE` steps, the next order only when none fitted yet)."""
    best: tuple[Choice, onnx.ModelProto, Planned] | None = None
    best_problem = problems[0]
    for problem in problems:
        if best is not None and problem.steps > LARGE:
            break
        got = _attempt(original, problem, path, opts, budget, algorithm, ropts, keep)
        if got is not None and (best is None or got[0].cost < best[0].cost):
            best, best_problem = got, problem
    return best, best_problem


def _attempt(original: Planned, problem: RematProblem, path: str | os.PathLike[str], opts: PlanOptions,
             budget: int, algorithm: str, ropts: RematOptions, keep: str) -> tuple[Choice, onnx.ModelProto, Planned] | None:
    """Steps 2-3 of the module doc: the first rewrite whose arena fits, else ``None``."""
    # the model knows only some of the planner's sharing: where it sees more bytes, the target starts higher
    target = budget + max(0, simulate(problem, ()).peak - original.plan.arena_size)
    for _ in range(ROUNDS):
        choice = choose(problem, target, algorithm, ropts)
        if not choice.fits and not choice.dropped:
            return None
        rewritten, planned = _rewrite(original, problem, choice.dropped, path, opts, keep)
        if planned.plan.arena_size <= budget:  # a set over the target can fit: the planner shares more
            return replace(choice, status=choice.status if choice.fits else "feasible"), rewritten, planned
        if not choice.fits:
            return None
        target = min(target, choice.peak) - align_up(planned.plan.arena_size - budget, opts.alignment)
        if target <= 0:
            return None
    return None


def plan_with_budget(model: onnx.ModelProto, path: str | os.PathLike[str], options: PlanOptions, *,
                     budget: int | None = None, factor: float | None = None, algorithm: str = "auto",
                     cost_model: str = "flops", timeout: float | None = None, keep: str = "onnxruntime",
                     progress: Callable[[str], None] | None = None, overhead: int = 0) -> Budgeted:
    """Plan ``model`` to fit ``budget`` bytes (or ``factor`` x its unbudgeted arena); module doc.
    ``keep``: which order the rewrite must hold in (:data:`KEEP`). ``overhead``: bytes the
    runtime asks for beside the arena, the same with and without recomputation; the budget
    then governs the arena and it together (:func:`arena_limit`)."""
    _check_keep(keep)
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    original = _with_nodes(plan_loaded(model, path, options, progress), path)
    limit = arena_limit(original.plan.arena_size, budget, factor, overhead)
    if original.plan.arena_size <= limit:
        return Budgeted(original, original, limit, None, 0, 0, cost_model, None, time.perf_counter() - t0)
    say(f"costing {len(original.view.ops)} nodes ({cost_model})")
    costs = node_costs(original, path, cost_model)
    problems = _problems(original, costs, options, keep)
    total = model_cost(costs)
    ropts = RematOptions(timeout=timeout, seed=options.seed)
    say(f"choosing what to recompute ({algorithm})")
    got, problem = _best_attempt(original, problems, path, options, limit, algorithm, ropts, keep)
    if got is None:  # the rewrite with the smallest arena (over the orders) may still fit
        for candidate in problems[:1] if problems[0].steps > LARGE else problems:
            small = _smallest(original, candidate, path, options, keep)
            if small is not None and (got is None or small[2].plan.arena_size < got[2].plan.arena_size):
                got, problem = small, candidate
        if got is None or got[2].plan.arena_size > limit:
            raise OnnxmemError(_no_fit_line(original, got[2] if got else None,
                                            _floor_problem(original, problems, costs, options), limit))
    choice, rewritten, planned = got
    at = simulate(problem, choice.dropped).at
    gone = set(left_out(original.view, rewritten))
    cost = extra_cost(problem, choice, original.view, rewritten, costs)
    again = [v for v in choice.dropped if at[v] < problem.steps]
    extra = {"budget": limit, "algorithm": choice.algorithm, "status": choice.status, "cost_model": cost_model,
             "extra_cost": cost, "model_cost": total, "original_arena": original.plan.arena_size,
             "recomputed": [problem.name[v] for v in again],
             "moved": [problem.name[v] for v in again if problem.order[problem.producer[v]] in gone]}
    planned = replace(planned, plan=replace(planned.plan, extra={**planned.plan.extra, "remat": extra}))
    return Budgeted(planned, original, limit, choice, cost, total, cost_model, rewritten,
                    time.perf_counter() - t0)


def extra_cost(problem: RematProblem, choice: Choice, view: GraphView, rewritten: onnx.ModelProto,
               costs: dict[int, int]) -> int:
    """What the rewritten model computes beyond the original: the cost of every duplicated node
    (one per producer and step, as the rewrite writes them) less that of the originals it left
    out (each runs once, as its duplicate, later). ``choice.cost`` is the algorithm's own
    measure, which may count a node with several dropped outputs once per value."""
    duplicated = simulate(problem, choice.dropped).cost
    return duplicated - sum(costs.get(k, 0) for k in left_out(view, rewritten))


def _smallest(original: Planned, problem: RematProblem, path: str | os.PathLike[str], opts: PlanOptions,
              keep: str) -> tuple[Choice, onnx.ModelProto, Planned] | None:
    """The rewrite with the smallest arena of two: every droppable value dropped, and
    ``greedy`` toward an arena of 0 (``None`` when neither is below the unbudgeted arena)."""
    best: tuple[Choice, onnx.ModelProto, Planned] | None = None
    every = [v for v, ok in enumerate(problem.droppable) if ok]
    for drops in (every, list(choose(problem, 0, "greedy", RematOptions(timeout=5.0)).dropped)):
        sched = simulate(problem, drops)
        rewritten, planned = _rewrite(original, problem, drops, path, opts, keep)
        top = best[2].plan.arena_size if best is not None else original.plan.arena_size
        if planned.plan.arena_size < top:
            best = (Choice(sched.dropped, sched.cost, sched.peak, "feasible", "smallest"), rewritten, planned)
    return best


def _floor_problem(original: Planned, problems: Sequence[RematProblem], costs: dict[int, int],
                   options: PlanOptions) -> RematProblem:
    """The problem of lowest floor among ``problems`` and the one in the order ``original`` was
    planned in: the arenas reached are ``original``'s and those of rewrites in the orders of
    ``problems``, so only the lowest of the orders' floors bounds them all (with ``keep``
    ``onnxruntime`` the problems' orders are onnxruntime's, which may hold more at a step than
    the planner's order of ``original``)."""
    planned = tuple(original.liveness.order)
    own = [q for q in problems if q.order == planned] or [
        build_problem(original.view, planned, costs, io=options.io, alignment=options.alignment)]
    return min([*own, *problems], key=lambda q: q.floor()[0])


def _no_fit_line(original: Planned, smallest: Planned | None, problem: RematProblem, limit: int) -> str:
    """One line: the smallest arena recomputation reached and the node that sets it."""
    floor, step = problem.floor()
    best = smallest if smallest is not None else original
    plan = best.plan
    k = min(plan.peak_step, len(plan.order) - 1)
    at_peak = next(o for o in best.view.ops if o.name == plan.order[k])
    floor_op = original.view.ops[problem.order[step]] if problem.steps else at_peak
    return (f"no plan fits --budget {limit:,} B: the smallest arena recomputation reached is "
            f"{plan.arena_size:,} B (its peak at node {show_name(at_peak.name)}, {at_peak.op_type}); at node "
            f"{show_name(floor_op.name)} ({floor_op.op_type}) its inputs, outputs and the values no recomputation "
            f"frees take {floor:,} B (in the order that holds the least there, with every in-place write the rules allow "
            f"and no output nothing reads); raise --budget to at least {plan.arena_size:,}")


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One point of the frontier: ``algorithm`` at ``budget`` reached ``arena`` for ``extra``
    cost (``extra_percent`` of the model's); ``fits`` False when it found nothing."""

    algorithm: str
    budget: int
    factor: float
    arena: int
    extra: int
    extra_percent: float
    status: str
    seconds: float
    fits: bool


def _with_nodes(planned: Planned, path: str | os.PathLike[str]) -> Planned:
    """``planned``, refused in one line where its graph has no node: nothing to recompute."""
    if not planned.view.ops:
        raise OnnxmemError(f"model {show_name(str(path))} has no node: there is nothing to recompute; plan it "
                           "without --budget or --budget-sweep")
    return planned


def sweep(model: onnx.ModelProto, path: str | os.PathLike[str], options: PlanOptions, *,
          factors: Sequence[float] = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3),
          algorithms: Sequence[str] = ("greedy", "mirror", "sqrt", "exact"), cost_model: str = "flops",
          timeout: float | None = None, keep: str = "onnxruntime",
          progress: Callable[[str], None] | None = None) -> tuple[Planned, list[SweepPoint]]:
    """Every algorithm at every ``factor`` x the unbudgeted arena: the frontier (module doc)."""
    _check_keep(keep)
    say = progress or (lambda _m: None)
    original = _with_nodes(plan_loaded(model, path, options, progress), path)
    costs = node_costs(original, path, cost_model)
    problems = _problems(original, costs, options, keep)
    total = model_cost(costs)
    points: list[SweepPoint] = []
    for f in factors:
        limit = int(f * original.plan.arena_size)
        for name in algorithms:
            if name not in ALGORITHMS:
                raise OnnxmemError(f"recomputation algorithm '{name}' is not one of {', '.join(ALGORITHMS)}")
            say(f"{name} at {f:g}x")
            t = time.perf_counter()
            if original.plan.arena_size <= limit:
                points.append(SweepPoint(name, limit, f, original.plan.arena_size, 0, 0.0, "unchanged",
                                         time.perf_counter() - t, True))
                continue
            got, problem = _best_attempt(original, problems, path, options, limit, name, RematOptions(timeout=timeout),
                                         keep)
            secs = time.perf_counter() - t
            if got is None:
                points.append(SweepPoint(name, limit, f, 0, 0, 0.0, "none", secs, False))
                continue
            choice, rewritten, planned = got
            cost = extra_cost(problem, choice, original.view, rewritten, costs)
            points.append(SweepPoint(name, limit, f, planned.plan.arena_size, cost,
                                     100.0 * cost / total if total else 0.0, choice.status, secs, True))
    return original, points


def plot_sweep(points: Sequence[SweepPoint], original_arena: int, title: str) -> bytes:
    """The frontier as a PNG: arena (x the unbudgeted one) against extra compute (%), per algorithm."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for name in dict.fromkeys(p.algorithm for p in points):
        pts = sorted((p.arena / original_arena, p.extra_percent) for p in points if p.algorithm == name and p.fits)
        if pts:
            ax.plot([a for a, _ in pts], [e for _, e in pts], marker="o", label=name)
    ax.set_xlabel("arena / arena without a budget")
    ax.set_ylabel("extra compute (% of the model)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
