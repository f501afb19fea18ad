"""Nested planning: every tensor of every If branch, Loop body and Scan body in the one arena.

Each body is planned like the main graph, bottom-up, and the owning node
gets a *region* in its parent: a block of bytes live during the owning
node's step only, as large as the largest of its bodies' arenas. A body's
tensors sit at ``region offset + body-local offset``. In steps:

1. for each body of a level (recursively first: its own bodies get their
   regions the same way), choose its operator order, build its liveness
   (with views and in-place reuse as the options say) and solve it: the
   body's arena, with its own lower bound and status;
2. the owning node's region is the max over its bodies' arenas: an If's two
   branches never run together, so they share it; a Loop's or Scan's body
   runs once per iteration in the same bytes;
3. the parent level (:func:`onnxmem.graph.view.with_regions`) gains the region as
   a tensor written by the owning node and read by none, so its order search,
   liveness, lower bound and solver see the body's space at that step and
   give it back after;
4. the plan's tensors of a body are its solution's offsets shifted by its
   region's offset in the parent (:func:`level_tensors`).

What lives where, as the operators' semantics require:

* an If branch writes its outputs straight into the If's outputs, which the
  parent plans (live during the If's step, apart from the region), when it can
  (:func:`onnxmem.graph.view.bound_outputs`: each output it computes appears once
  and its If output is an arena tensor of the same size); the branch is then
  planned with its outputs outside its arena (``outputs: owner`` in the plan,
  the outputs listed under ``outside`` as ``owner-output``). Otherwise its
  outputs live in its arena to its end and are copied into the If's outputs.
  Where every branch computes every output, the If may also hold its outputs
  *inside* its region (``outputs: inside``, :class:`InsideOption`): each branch
  planned with its outputs in its arena at offsets all branches share (the
  largest branch first, the others pinned there), the If's outputs in the
  region's group at those offsets, so a branch uses their bytes until it
  writes them; :func:`choose_inside` keeps this where it lowers the parent's
  max-live bound;
* a Loop or Scan body's formal inputs (iteration number, condition, carried
  values, state, scan slices) are its *carried slots*: body tensors pinned
  to the whole body, so no other body tensor shares their bytes. Before an
  iteration the carried values are copied into them (from the node's inputs
  at the first iteration, from the body's outputs after each); the body's
  outputs live to its end too, so the copy never overwrites a value still
  to be copied (a body output that is itself a formal input is read before
  any slot is written); scan-output slices are copied into the node's
  outputs, which the parent plans whole. The final carried values (a Scan's
  final state) may sit *inside* the region (``outputs: inside``,
  :func:`_carried_inside_option`): the body's outputs already live in its
  arena to its end, so after the last iteration they are the node's outputs
  at those bytes, with no copy; the region's group in the parent then lives
  as long as they do (:func:`choose_inside` keeps it where it lowers the
  parent's max-live bound, as for an If).

Values a body reads from enclosing graphs are not in its arena: they live
in their own level, which keeps them live through the owning node's step.
The bound a plan reports is its level's max-live bound with each region at
its bodies' own bounds (:func:`nested_bound`): no plan of this design is
below it; every body level reports its own the same way. Body levels are solved in the
offsets form (a shared-objects solver solves the main graph only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from onnxmem.analysis.aliasing import shared_liveness
from onnxmem.analysis.happens_before import check_concurrency, dag_liveness
from onnxmem.analysis.liveness import Liveness, build_liveness
from onnxmem.core.errors import ModelError, show_name
from onnxmem.core.problem import Problem, Solution, align_up, lower_bound
from onnxmem.core.solvers import SOLVERS
from onnxmem.core.workclock import now
from onnxmem.graph import (
    Body,
    GraphView,
    bound_outputs,
    child_path,
    inside_outputs,
    node_names,
    with_regions,
)
from onnxmem.model import subgraph_attributes
from onnxmem.planning.compose import LivenessStep, compose, order_view, solve_layout
from onnxmem.plans.point import OutsideValue, PlannedTensor

__all__ = ["BodyPlan", "InsideOption", "aliased_liveness", "body_solver", "body_tensors", "choose_inside",
           "level_tensors", "nested_bound", "outside_values", "plan_bodies", "region_bounds"]


@dataclass(frozen=True, slots=True)
class BodyPlan:
    """One planned body: ``view`` with its own regions, its ``liveness`` and ``solution``;
    ``owner``: the owning node's name, ``parent``: the parent graph's path, ``attr`` the
    attribute that holds it, ``kind`` ``if``/``loop``/``scan``."""

    path: str
    parent: str
    owner: str
    attr: str
    kind: str
    view: GraphView
    liveness: Liveness
    solution: Solution
    lower_bound: int  # the body's bound, its own bodies' regions at their bounds (:func:`nested_bound`)
    #: where the body's outputs live: "region" (its arena, copied out), "owner" (an If's own
    #: outputs, planned in the parent), "inside" (its arena, at the If's outputs, which sit there)
    outputs: str = "region"

    @property
    def arena_size(self) -> int:
        return int(self.solution.height)


def region_bounds(plans: Mapping[str, BodyPlan]) -> dict[str, int]:
    """``{owner path: the largest lower bound among its bodies}``: what its region needs at least."""
    out: dict[str, int] = {}
    for bp in plans.values():
        key = child_path(bp.parent, bp.owner)
        out[key] = max(out.get(key, 0), bp.lower_bound)
    return out


def nested_bound(view: GraphView, problem: Problem, bounds: Mapping[str, int], alignment: int) -> int:
    """The max-live bound of ``problem`` (one level's) with each region at its bodies' bound
    (``bounds`` by owner path) instead of their arenas: no plan of this design, whatever the
    solvers find in the bodies, is below it. Equal to the plain bound when every body is
    planned at its own bound."""
    sizes = {name: align_up(bounds.get(child_path(view.path, view.ops[i].name), 0), alignment)
             for i, name in view.regions.items()}
    if not sizes:
        return lower_bound(problem)
    return lower_bound(Problem(tuple(replace(b, size=sizes[b.id]) if b.id in sizes else b
                                     for b in problem.buffers)))


def aliased_liveness(view: GraphView, order: Sequence[int], opts: Any) -> Liveness:
    """The liveness of ``order`` with the sharing ``opts.inplace`` allows.

    Off: every tensor its own buffer. On: the layout
    :func:`onnxmem.analysis.aliasing.shared_layout` chooses. With ``--concurrency
    dag`` the sharing holds under every schedule and the problem's buffers
    conflict along the graph (:mod:`onnxmem.analysis.happens_before`); bodies run inside
    their owner's step, one node at a time, and are planned sequentially.
    """
    check_concurrency(opts.concurrency)
    if opts.concurrency == "dag":
        return dag_liveness(view, order, io=opts.io, alignment=opts.alignment, inplace=opts.inplace)
    if opts.inplace:
        return shared_liveness(view, order, opts.io, opts.alignment)
    return build_liveness(view, order, None, io=opts.io, alignment=opts.alignment)


def body_solver(solver: str) -> str:
    """The solver body levels use: ``solver``, unless it assigns shared objects (then ``auto``)."""
    info = SOLVERS.get(solver)
    if info is not None and info.form == "shared-objects":
        return "auto" if "auto" in SOLVERS else "greedy"
    return solver


@dataclass(frozen=True, slots=True)
class InsideOption:
    """An If (or a Loop, a Scan) whose bodies can write its outputs inside its region instead of beside it.

    ``plans``: one per branch (a Loop's or Scan's one body), planned with their outputs in
    their arena (``outputs="inside"``), each output at the same offset in every branch
    (``positions``: owner output -> offset in the region); ``size``: the region then.
    ``parent``: the path of the graph that holds the owner; ``owner``: the owner's path.
    """

    parent: str
    owner: str
    size: int
    positions: Mapping[str, int]
    plans: tuple[BodyPlan, ...]


def plan_bodies(view: GraphView, opts: Any,
                inside: dict[str, InsideOption] | None = None) -> tuple[dict[str, int], dict[str, BodyPlan]]:
    """Plan every body nested in ``view`` (steps 1 and 2 of the module doc).

    ``opts`` is a :class:`onnxmem.planning.pipeline.PlanOptions`; bodies are planned with
    ``io="internal"``. Returns ``(region sizes by owner path, plans by body path)``;
    both are empty for a graph without bodies. ``opts.timeout`` is shared: each
    body gets what is left of it (and :func:`onnxmem.planning.pipeline.plan_loaded` gives the main
    graph what is left after the bodies). ``inside``: filled with the If nodes of
    ``view`` itself that may hold their outputs in their regions (for
    :func:`choose_inside` on ``view``'s level; nested levels choose their own).
    """
    sizes: dict[str, int] = {}
    plans: dict[str, BodyPlan] = {}
    if not view.bodies:
        return sizes, plans
    deadline = None if opts.timeout is None else now() + opts.timeout
    body_opts = replace(opts, io="internal", solver=body_solver(opts.solver))
    found: dict[str, InsideOption] = {}
    _plan_level_bodies(view, body_opts, deadline, sizes, plans, found, opts.io)
    if inside is not None:
        inside.update((k, o) for k, o in found.items() if o.parent == view.path)
    return sizes, plans


def choose_inside(base: GraphView, view: GraphView, order: Any, opts: Any, liveness: Liveness,
                  sizes: dict[str, int], plans: dict[str, BodyPlan], options: Mapping[str, InsideOption],
                  *, recursive: bool = False) -> tuple[GraphView, Liveness]:
    """``(view, liveness)`` of one level (``base`` without regions, ``view`` with them) with
    the outputs of each of its :class:`InsideOption` (an If's, a Loop's carried ones) placed
    inside the owner's region where that lowers the level's max-live bound under ``order``
    (one owner at a time, kept when it helps): the region grows to hold them and lives as long as they do, in exchange for
    their bytes being free for the branch until it writes them. ``sizes`` and ``plans`` get
    the chosen options' region sizes and branch plans. Only with ``--inplace on`` (this is
    sharing) and a sequential plan."""
    mine = [o for o in options.values() if o.parent == base.path]
    if not mine or not opts.inplace or opts.concurrency != "sequential":
        return view, liveness
    best = lower_bound(liveness.problem)
    chosen: dict[str, InsideOption] = {}
    for opt in mine:
        trial = {**chosen, opt.owner: opt}
        candidate = with_regions(base, {**sizes, **{k: o.size for k, o in trial.items()}}, recursive=recursive,
                                 inside={k: o.positions for k, o in trial.items()})
        try:
            lv = aliased_liveness(candidate, order, opts)
        except ModelError:
            continue  # an output's own group would put a tensor at two offsets
        bound = lower_bound(lv.problem)
        if bound < best:
            best, chosen, view, liveness = bound, trial, candidate, lv
    for key, opt in chosen.items():
        sizes[key] = opt.size
        plans.update((bp.path, bp) for bp in opt.plans)
    return view, liveness


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - now(), 0.01)


def _where(path: str) -> str:
    """Where a body's solver found no plan, for :func:`onnxmem.planning.compose.unsolved`."""
    return f" for subgraph {path!r}" if path else ""


def _solve_body(bv: GraphView, liveness: Liveness, opts: Any, deadline: float | None, path: str) -> Solution:
    return solve_layout(liveness.problem, opts.solver, timeout=_left(deadline), seed=opts.seed, where=_where(path),
                        empty=True)


def _body_liveness(base: GraphView, opts: Any, sizes: dict[str, int], plans: dict[str, BodyPlan],
                   inside: dict[str, InsideOption]) -> LivenessStep:
    """A body's liveness step: its sharing, then its owners' outputs inside their regions where that helps."""

    def step(bv: GraphView, order: Sequence[int]) -> tuple[GraphView, Liveness]:
        return choose_inside(base, bv, order, opts, aliased_liveness(bv, order, opts), sizes, plans, inside)

    return step


def _plan_level_bodies(view: GraphView, opts: Any, deadline: float | None, sizes: dict[str, int],
                       plans: dict[str, BodyPlan], inside: dict[str, InsideOption], io: str = "internal") -> None:
    for index, bodies in view.bodies.items():
        owner = view.ops[index]
        need = 0
        chosen: list[tuple[Body, GraphView]] = []
        for body in bodies:
            _plan_level_bodies(body.view, opts, deadline, sizes, plans, inside)
            bv = with_regions(body.view, sizes, recursive=False)
            # an If branch writes its outputs straight into the If's outputs where it can
            body_io = "external" if bound_outputs(view, body, io) else "internal"
            body_opts = replace(opts, io=body_io, concurrency="sequential")
            made = compose(bv, body_opts, _body_liveness(body.view, body_opts, sizes, plans, inside),
                           budget=lambda: _left(deadline), where=_where(body.path), empty=True)
            bv, liveness, solution = made.view, made.liveness, made.solution
            bound = nested_bound(bv, liveness.problem, region_bounds(plans), opts.alignment)
            plans[body.path] = BodyPlan(body.path, view.path, owner.name, body.attr, body.kind, bv, liveness,
                                        solution, bound, "owner" if body_io == "external" else "region")
            need = max(need, int(solution.height))
            chosen.append((body, bv))
        sizes[child_path(view.path, owner.name)] = need
        option = _inside_option(view, owner, chosen, opts, deadline, plans, io)
        if option is not None:
            inside[option.owner] = option


def _inside_option(view: GraphView, owner: Any, bodies: list[tuple[Body, GraphView]], opts: Any,
                   deadline: float | None, plans: Mapping[str, BodyPlan], io: str) -> InsideOption | None:
    """The :class:`InsideOption` of an If whose every branch writes every output straight into
    the If's outputs (:func:`onnxmem.graph.view.bound_outputs`): each branch planned again with
    its outputs in its arena, the branch with the largest arena first; the others with each
    output's buffer pinned where the first put it. ``None`` when that cannot be."""
    if not bodies or any(inside_outputs(view, body, io) is None for body, _ in bodies):
        return None
    if bodies[0][0].kind != "if":
        return _carried_inside_option(view, owner, bodies[0][0], plans[bodies[0][0].path], io)
    body_opts = replace(opts, io="internal", concurrency="sequential")
    made: list[tuple[Body, GraphView, Liveness]] = []
    for body, bv in bodies:
        order = order_view(bv, body_opts, timeout=_left(deadline))
        made.append((body, bv, aliased_liveness(bv, order, body_opts)))
    solved: list[tuple[Body, GraphView, Liveness, Solution]] = []
    for body, bv, lv in made:
        solved.append((body, bv, lv, _solve_body(bv, lv, opts, deadline, body.path)))
    solved.sort(key=lambda item: -item[3].height)
    first_body, _, first_lv, first_sol = solved[0]
    index = {b.id: i for i, b in enumerate(first_lv.problem.buffers)}
    at = {iv.tensor: int(first_sol.offsets[index[iv.group]]) + iv.offset for iv in first_lv.intervals}
    positions = [at[o] for o in first_body.view.outputs]
    out: list[tuple[Body, GraphView, Liveness, Solution]] = [solved[0]]
    for body, bv, lv, _ in solved[1:]:
        pins: dict[str, int] = {}
        for o, want in zip(body.view.outputs, positions):
            iv = lv.interval(o)
            pin = want - iv.offset
            if pin < 0 or pin % opts.alignment or pins.setdefault(iv.group, pin) != pin:
                return None
        problem = Problem(tuple(replace(b, offset=pins[b.id]) if b.id in pins else b for b in lv.problem.buffers))
        lv = replace(lv, problem=problem)
        out.append((body, bv, lv, _solve_body(bv, lv, opts, deadline, body.path)))
    made_plans: list[BodyPlan] = []
    for body, bv, lv, sol in out:
        bound = nested_bound(bv, lv.problem, region_bounds(plans), opts.alignment)
        made_plans.append(BodyPlan(body.path, view.path, owner.name, body.attr, body.kind, bv, lv, sol, bound,
                                   "inside"))
    size = max(int(sol.height) for *_, sol in out)
    names = {o: y for o, y in zip(first_body.view.outputs, owner.outputs)}
    return InsideOption(view.path, child_path(view.path, owner.name), size,
                        {names[o]: p for o, p in zip(first_body.view.outputs, positions)}, tuple(made_plans))


def _carried_inside_option(view: GraphView, owner: Any, body: Body, plan: BodyPlan, io: str) -> InsideOption:
    """The :class:`InsideOption` of a Loop or Scan: its body as planned (its outputs already live
    in its arena to its end), the owner's carried (state) outputs at the bytes where the body
    writes them (:func:`onnxmem.graph.inside_outputs`), so the last iteration's outputs are the
    owner's, with no copy; the region keeps its size."""
    mapped = inside_outputs(view, body, io) or {}
    index = {b.id: i for i, b in enumerate(plan.liveness.problem.buffers)}
    positions = {}
    for o, y in mapped.items():
        iv = plan.liveness.interval(o)
        positions[y] = int(plan.solution.offsets[index[iv.group]]) + iv.offset
    return InsideOption(view.path, child_path(view.path, owner.name), plan.arena_size, positions,
                        (replace(plan, outputs="inside"),))


def level_tensors(view: GraphView, liveness: Liveness, solution: Solution, base: int = 0) -> list[PlannedTensor]:
    """The plan's tensors of one level: each at ``base`` + its buffer's offset + its
    offset in its group, with ``graph`` set to the level's path."""
    problem: Problem = liveness.problem
    buf_index = {b.id: i for i, b in enumerate(problem.buffers)}
    offsets = [base + int(o) for o in solution.offsets]
    objects = None if solution.objects is None else [int(o) for o in solution.objects]
    tensors_of, ops, path = view.tensors, view.ops, view.path
    tensors: list[PlannedTensor] = []
    for iv in liveness.intervals:
        t = tensors_of[iv.tensor]
        bi = buf_index[iv.group]
        prod = ops[t.producer] if t.producer is not None else None
        tensors.append(  # positional, in PlannedTensor's field order (one per value of the level)
            PlannedTensor(t.name, t.dtype, t.shape, t.size, offsets[bi] + iv.offset, iv.start, iv.end,
                          prod.name if prod else None, prod.op_type if prod else None, t.kind, iv.group,
                          objects[bi] if objects is not None else None, iv.offset, path)
        )
    return tensors


def body_tensors(top: GraphView, top_tensors: Iterable[PlannedTensor],
                 plans: Mapping[str, BodyPlan]) -> list[PlannedTensor]:
    """Every body tensor, placed at its region's offset (step 4), outermost level first."""
    region_at: dict[tuple[str, str], int] = {
        (t.graph, t.producer or ""): t.offset for t in top_tensors if t.kind == "region"
    }
    out: list[PlannedTensor] = []
    for path, bp in plans_outermost_first(plans):
        base = region_at.get((bp.parent, bp.owner), 0)  # no region: the body's tensors have no bytes
        placed = level_tensors(bp.view, bp.liveness, bp.solution, base)
        for t in placed:
            if t.kind == "region":
                region_at[(path, t.producer or "")] = t.offset
        out.extend(placed)
    return out


def plans_outermost_first(plans: Mapping[str, BodyPlan]) -> list[tuple[str, BodyPlan]]:
    """``plans`` ordered so that a body comes after the body that holds it."""
    return sorted(plans.items(), key=lambda item: (item[0].count("/"), item[0]))


def outside_values(graph: Any, view: GraphView, planned: set[tuple[str, str]], io: str,
                   bound: set[tuple[str, str]] | None = None) -> tuple[list[OutsideValue], list[str]]:
    """Every value of ``graph`` (an ``onnx.GraphProto``) and of its subgraphs at every level
    that is not among ``planned`` (``(graph path, name)`` pairs), with its reason
    (:data:`onnxmem.plans.point.OUTSIDE_REASONS`): initializers and node outputs, and with
    ``io="external"`` the main graph's inputs and outputs. Also one warning per node
    whose subgraphs onnxmem does not plan (their values are ``runtime-body``); the values
    of an If branch left out by ``--branch`` are ``excluded-branch``. ``bound``:
    the ``(graph path, name)`` of If-branch outputs written into the If's outputs."""
    bound = bound or set()
    out: list[OutsideValue] = []
    warnings: list[str] = []
    io_names = set(view.inputs) | set(view.outputs) if io == "external" else set()

    def add(path: str, name: str, reason: str) -> None:
        if (path, name) not in planned:
            out.append(OutsideValue(name, path, reason))
            planned.add((path, name))

    def reason_of(v: GraphView, name: str) -> str:
        if (v.path, name) in bound:
            return "owner-output"
        t = v.tensors.get(name)
        if t is not None and t.origin == "folded":
            return "folded"
        if t is None or t.kind == "weight":
            return "weight"  # (absent: a weight nothing reads, whose shape is unknown)
        if not v.path and name in io_names:
            return "external-io"
        raise AssertionError(f"value {name!r} of graph {v.path!r} is neither planned nor outside the arena")

    def unplanned(g: Any, path: str, reason: str = "runtime-body") -> None:
        names = node_names(g)
        for init in g.initializer:
            add(path, init.name, "weight")
        for i, node in enumerate(g.node):
            for o in node.output:
                if o:
                    add(path, o, reason)
            for attr, sub in subgraph_attributes(node):
                unplanned(sub, f"{child_path(path, names[i])}/{attr}", reason)

    def level(g: Any, v: GraphView) -> None:
        for n in v.inputs:
            if not v.path and n in io_names:
                add("", n, "external-io")
        for n, why in v.outside.items():  # a training graph's inputs the caller owns
            add(v.path, n, why)
        for init in g.initializer:
            if init.name not in v.inputs and (v.path, init.name) not in planned:
                add(v.path, init.name, reason_of(v, init.name))
        path = v.path
        nested = None if v.nested is None else set(v.nested)
        nodes = g.node
        for op in v.ops:  # op.index: its node's place in ``g`` (read only where it may hold a subgraph)
            # the node's outputs, as the view holds them (less the region with_regions adds)
            for o in op.outputs[:-1] if op.index in v.regions else op.outputs:
                if o and (path, o) not in planned:
                    add(path, o, reason_of(v, o))
            subs = subgraph_attributes(nodes[op.index]) if nested is None or op.index in nested else ()
            if not subs:
                continue
            bodies = {b.attr: b for b in v.bodies.get(op.index, ())}
            for attr, sub in subs:
                if attr in bodies:
                    level(sub, bodies[attr].view)
                elif bodies:  # an If branch --branch leaves out
                    unplanned(sub, f"{child_path(v.path, op.name)}/{attr}", "excluded-branch")
                else:
                    where = f"{child_path(v.path, op.name)}/{attr}"
                    warnings.append(f"subgraph {show_name(where)} of a {show_name(op.op_type)} node is not planned: "
                                    "onnxruntime allocates its values (outside, reason runtime-body)")
                    unplanned(sub, where)

    level(graph, view)
    return out, warnings

