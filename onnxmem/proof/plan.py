"""The static proof of a memory plan: pure, no onnxruntime.

:func:`prove_plan` checks a plan against the model's graph view, independently
of the planner's own code (it recomputes lifetimes and alias legality itself;
this is the one deliberate second copy of those rules):

1. the plan's order names every node of the model once and is topological;
2. the plan holds exactly the model's arena tensors (every non-weight value;
   with ``io="external"`` graph inputs and outputs are left out), each with the
   model's dtype, shape and size;
3. every offset is a multiple of the plan's alignment and every tensor ends
   inside the arena;
4. lifetimes are recomputed from the graph and the plan's order (a value is
   live from its producer's step to its last reader's step, graph inputs from
   step 0, graph outputs to the end); a plan lifetime that misses a step where
   the value is live is an error;
5. members of one alias group lie in one buffer (``offset - group_offset``
   is the same for all), and a member may be written over bytes of another
   that is live then only when the write leaves those bytes as they are, or
   the writer reads it: a view (an op whose rule in ``onnxmem.analysis.aliasing.RULES``
   is ``view``) of a member at the output's bytes changes nothing; a Concat
   whose input is one contiguous run of the output
   (:func:`onnxmem.analysis.aliasing.concat_slices`) and sits at that run changes
   nothing there; an op whose rule is ``inplace`` may write over an input it
   reads at an input the rule lists, at exactly the output's bytes, that dies
   at that step; any other op (one that reads neighbours: Conv, MatMul,
   Softmax, ...) never;
6. no two tensors of different groups that are live at one step share a byte;
7. shared-objects plans: tensors of one object sit at the object's offset,
   fit in it, and are never live at the same step unless they alias;
8. every If branch, Loop body and Scan body of the model (at every depth) is
   planned (a ``subgraphs`` entry, and rules 1 to 6 hold for its tensors
   under its own order), and every tensor of a body lies inside its owning
   node's *region*: a tensor of the parent graph written by the owning node,
   so rules 4 and 6 of the parent keep it apart from everything live during
   that node's step. Tensors of one body are judged against each other; a
   body's tensors never meet another level's, because they stay in the
   region and the region stays apart from its level (and an If's two
   branches, or a Loop's iterations, never run together). An If branch
   planned with ``outputs: owner`` writes its outputs at the If's outputs
   (:func:`onnxmem.graph.view.bound_outputs` must allow it): tensors of the parent,
   live from the If's step, kept apart from everything live then by rule 6.
   One planned with ``outputs: inside`` computes every output and writes each
   at exactly the bytes of its If output, which lies in the If's region: that
   region and those outputs are the only pairs of the parent allowed to share
   bytes while both are live. A Loop or Scan body planned with ``outputs:
   inside`` does the same for its carried (state) outputs
   (:func:`onnxmem.graph.inside_outputs`): each is computed in the body and
   sits at exactly the bytes of the owner output it becomes after the last
   iteration (the body keeps its outputs live to its end, rule 4, so the
   last iteration leaves them there); its scan outputs and condition never
   share the region.
9. plans for concurrent execution (``--concurrency dag``, recorded in the
   plan's ``extra``; the main graph: a body runs inside its owner's step): the rules above hold for the plan's order, and every
   pair of tensors that share a byte is kept apart by the graph itself, under
   every schedule it allows. Node ``a`` happens before ``b`` when a path of
   dependences (values a subgraph captures included) leads from ``a`` to
   ``b``; the relation is recomputed here, as bits, from the nodes' reads.
   Tensors of two groups may share bytes only when every node that writes
   or reads one happens before the node that writes the other (a graph
   input is written before everything, a graph output read after
   everything). Within a group, a node that writes a member over the bytes
   of another (not a view, nor a Concat over its own input) must happen
   after that member's writer and after every other node that reads it; two
   writers of shared bytes must be ordered. A pair that breaks the rule is
   named with a schedule that breaks it: the writers of both and what they
   need first, after which both are live (or the two writers run at once).

10. Loops whose carried values grow per iteration (``extra.loop_trips``, :mod:`onnxmem.shapes.loops`):
    the plan records exactly the model's growing Loops, each with the bound its sizes were
    inferred for (a plan that claims more iterations than its buffers were sized for is
    refused), and every tensor of such a Loop's body (and of the bodies nested in it) fits
    its buffer at every iteration ``0 .. bound - 1``: its bytes at each iteration, inferred
    again for that iteration, are at most its planned size. Offsets do not change from one
    iteration to the next, so rules 3 to 8 hold for every iteration once they hold for the
    largest sizes.

11. the plan's lower bound is no higher than its arena (no plan uses less than the bytes
    live at its fullest step: a plan that claims it reports figures that are not its own).

Where each rule lives: rules 1 to 4 and 8 here, 11 in :mod:`onnxmem.proof.finding`; rules 5 to 7 (one sweep over the steps,
``O((n + p) log n)`` for ``n`` tensors and ``p`` pairs that are live together and share
bytes) in :mod:`onnxmem.proof.sharing`; rule 9 in :mod:`onnxmem.proof.concurrency`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from onnxmem.analysis.aliasing import RULES
from onnxmem.graph import Body, GraphView, Tensor, bound_outputs, child_path, inside_outputs
from onnxmem.plans.point import MemoryPlan, PlannedTensor
from onnxmem.proof.concurrency import concurrency_findings
from onnxmem.proof.finding import Finding, Lifetimes, bound_findings, order_bound_findings
from onnxmem.proof.sharing import object_findings, sharing_findings

__all__ = ["VIEW_OPS", "Finding", "plan_regions", "prove_plan", "true_lifetimes", "walk_bodies"]

#: ops whose output holds the same bytes as their first input
VIEW_OPS = frozenset(op for (d, op), r in RULES.items() if r.kind == "view" and d == "")

def true_lifetimes(view: GraphView, order: Sequence[int]) -> dict[str, tuple[int, int, int | None]]:
    """``{value: (start, end, last_reader)}`` of every non-weight value under ``order``.

    ``[start, end)`` in steps; ``last_reader`` is the node index of the last
    step that reads the value (``None`` when nothing reads it).
    """
    horizon = max(len(order), 1)
    step = {op: k for k, op in enumerate(order)}
    last: dict[str, tuple[int, int]] = {}
    ops = view.ops
    for k, op_index in enumerate(order):
        op = ops[op_index]
        at = (k, op_index)
        for name in op.inputs:
            last[name] = at
        for name in op.captures:  # a body's reads of the outer scope: most nodes have none
            last[name] = at
    outs = set(view.outputs)
    out: dict[str, tuple[int, int, int | None]] = {}
    for name, t in view.tensors.items():
        if t.kind == "weight":
            continue
        start = 0 if t.producer is None else step[t.producer]
        k, reader = last.get(name, (start, None))
        end = horizon if name in outs else k + 1
        out[name] = (start, end if end > start else start + 1, reader)
    return out


def _order_findings(plan: MemoryPlan, view: GraphView) -> tuple[list[Finding], list[int]]:
    by_name = {op.name: op.index for op in view.ops}
    found: list[Finding] = []
    seen: set[str] = set()
    order: list[int] = []
    for name in plan.order:
        if name not in by_name:
            found.append(Finding("order", None, f"the plan orders node {name!r}, which the model does not have", node=name))
        elif name in seen:
            found.append(Finding("order", None, f"the plan orders node {name!r} twice", node=name))
        else:
            seen.add(name)
            order.append(by_name[name])
    for op in view.ops:
        if op.name not in seen:
            found.append(Finding("order", None, f"node {op.name!r} ({op.op_type}) is missing from the plan's order", node=op.name))
    if found:
        return found, order
    step = {op: k for k, op in enumerate(order)}
    for k, op_index in enumerate(order):
        op = view.ops[op_index]
        for name in op.reads:
            t = view.tensors.get(name)
            if t is None or t.producer is None:
                continue
            if step[t.producer] >= k:
                found.append(
                    Finding(
                        "order",
                        name,
                        f"the order is not topological: node {op.name!r} at step {k} reads {name!r}, "
                        f"which node {view.ops[t.producer].name!r} writes at step {step[t.producer]}",
                        node=op.name,
                    )
                )
    return found, order


def walk_bodies(view: GraphView) -> Iterable[tuple[GraphView, Body]]:
    """``(parent view, body)`` for every body nested in ``view``, outermost first."""
    stack: list[GraphView] = [view]
    while stack:
        v = stack.pop(0)
        for index in sorted(v.bodies):
            for body in v.bodies[index]:
                yield v, body
                stack.append(body.view)


def plan_regions(plan: MemoryPlan) -> dict[str, int]:
    """``{owner path: region size}`` of the plan's regions (for :func:`onnxmem.graph.view.with_regions`)."""
    return {child_path(t.graph, t.producer): t.size for t in plan.tensors
            if t.kind == "region" and t.producer is not None}


def prove_plan(plan: MemoryPlan, view: GraphView, *, limit: int | None = None,
               concurrency: str | None = None) -> list[Finding]:
    """Every rule ``plan`` breaks for the model ``view``; empty means proven.

    ``view`` carries the regions of its bodies (:func:`onnxmem.graph.view.with_regions`).
    See the module docstring for the rules. ``limit`` stops after that many.
    ``concurrency``: ``dag`` checks rule 9 too, ``sequential`` does not;
    ``None``: what the plan records (``extra["concurrency"]``, else sequential).
    """
    mode = concurrency if concurrency is not None else str(plan.extra.get("concurrency", "sequential"))
    found: list[Finding] = bound_findings(plan)
    by_graph: dict[str, list[PlannedTensor]] = {}
    for pt in plan.tensors:
        by_graph.setdefault(pt.graph, []).append(pt)
    subplans = {s.path: s for s in plan.subgraphs}
    pairs = list(walk_bodies(view))
    paths = {""} | {b.path for _, b in pairs}
    for path in list(by_graph) + list(subplans):
        if path not in paths:
            found.append(Finding("mismatch", None, f"the plan has a subgraph {path!r}, which the model does not "
                                 "have; re-plan the model"))
    found += _trip_findings(plan, pairs)
    inside = _inside_pairs(pairs, subplans, plan.io)
    found += _prove_level(replace(plan, tensors=tuple(by_graph.get("", ()))), view, limit, (0, plan.arena_size),
                          mode=mode, inside=inside.get("", frozenset()))
    for parent, body in pairs:
        if limit is not None and len(found) >= limit:
            break
        sp = subplans.get(body.path)
        owner = parent.ops[body.owner]
        if sp is None:
            found.append(Finding("mismatch", None, f"subgraph {body.path!r} of node {owner.name!r} "
                                 f"({owner.op_type}) is not in the plan; re-plan the model", node=owner.name))
            continue
        found += _iteration_findings(body, by_graph.get(body.path, ()), owner.name)
        region = parent.regions.get(body.owner)
        where = (0, 0)
        for pt in by_graph.get(parent.path, ()):
            if pt.name == region:
                where = (pt.offset, pt.offset + pt.size)
        io = "internal"
        if sp.outputs == "owner":  # the branch's outputs are the If's outputs, planned in the parent
            if bound_outputs(parent, body, plan.io) is None:
                found.append(Finding("mismatch", None, f"subgraph {body.path!r} writes its outputs into the outputs "
                                     f"of node {owner.name!r}, which cannot hold them (not planned there, or of "
                                     "another size); re-plan the model", node=owner.name, graph=body.path))
                continue
            io = "external"
        elif sp.outputs == "inside":  # the body writes its outputs where the owner's outputs sit
            found += _inside_findings(parent, body, owner, by_graph, plan.io)
        level = replace(plan, order=sp.order, tensors=tuple(by_graph.get(body.path, ())), io=io,
                        form="offsets", objects=())
        found += [replace(f, message=f"in subgraph {body.path!r}: {f.message}", graph=body.path)
                  for f in _prove_level(level, body.view, None if limit is None else limit - len(found), where,
                                        f"the region of node {owner.name!r}",
                                        inside=inside.get(body.path, frozenset()))]
    if not found:
        found = order_bound_findings(plan)
    return found[:limit] if limit else found


def _trip_findings(plan: MemoryPlan, pairs: Sequence[tuple[GraphView, Body]]) -> list[Finding]:
    """Rule 10, the bounds: ``extra.loop_trips`` names each growing Loop once, with the bound its
    sizes were inferred for."""
    want = {child_path(parent.path, parent.ops[b.owner].name): b.bound.bound for parent, b in pairs
            if b.bound is not None}
    found = plan.extra.get("loop_trips") or {}
    got = {str(k): v.get("bound") if isinstance(v, dict) else None for k, v in found.items()} \
        if isinstance(found, dict) else {}
    out: list[Finding] = []
    for path, bound in want.items():
        if got.get(path) != bound:
            said = "no bound" if path not in got else f"a bound of {got[path]!r} iterations"
            out.append(Finding("mismatch", None, f"Loop {path!r} grows per iteration and its values are sized for "
                               f"{bound} iterations, but the plan records {said} (extra.loop_trips); re-plan the "
                               "model", node=path.rsplit("/", 1)[-1]))
    for path in got.keys() - want.keys():
        out.append(Finding("mismatch", None, f"the plan records a trip bound for Loop {path!r} (extra.loop_trips), "
                           "which is not a Loop whose values grow in this model; re-plan the model"))
    return out


def _iteration_findings(body: Body, tensors: Iterable[PlannedTensor], owner: str) -> list[Finding]:
    """Rule 10, the sizes: every tensor of a growing Loop's body fits its buffer at every iteration."""
    out: list[Finding] = []
    for pt in tensors:
        for i, size in enumerate(body.iterations.get(pt.name, ())):
            if size > pt.size:
                out.append(Finding("arena", pt.name, f"in subgraph {body.path!r}: tensor {pt.name!r} takes {size} B "
                                   f"at iteration {i} but the plan gives it {pt.size} B at bytes [{pt.offset}, "
                                   f"{pt.offset + pt.size}); re-plan the model", node=owner, graph=body.path,
                                   byte_range=(pt.offset, pt.offset + pt.size)))
                break
    return out


def _inside_pairs(pairs: Iterable[tuple[GraphView, Body]], subplans: Mapping[str, Any],
                  io: str) -> dict[str, frozenset[frozenset[str]]]:
    """``{graph path: {{region, owner output}}}``: the pairs of an If, Loop or Scan planned with
    outputs inside its region (``outputs: inside``), which share bytes by design (rule 8): every
    output of an If, the carried (state) outputs of a Loop or Scan, never their scan outputs."""
    out: dict[str, set[frozenset[str]]] = {}
    for parent, body in pairs:
        sp = subplans.get(body.path)
        region = parent.regions.get(body.owner)
        if sp is None or sp.outputs != "inside" or region is None:
            continue
        mapped = inside_outputs(parent, body, io) or {}
        out.setdefault(parent.path, set()).update(frozenset((region, y)) for y in mapped.values())
    return {k: frozenset(v) for k, v in out.items()}


def _inside_findings(parent: GraphView, body: Body, owner: Any, by_graph: Mapping[str, list[PlannedTensor]],
                     io: str) -> list[Finding]:
    """Rule 8 for a body planned with ``outputs: inside``: it computes every output that becomes
    its owner's (an If branch: all of them; a Loop or Scan body: the carried or state ones), each
    once and of its owner output's size (:func:`onnxmem.graph.inside_outputs`), and each of those
    output tensors sits at exactly the bytes of the owner output it is."""
    mapped = inside_outputs(parent, body, io)
    if not mapped:
        return [Finding("mismatch", None, f"subgraph {body.path!r} writes its outputs inside the region of node "
                        f"{owner.name!r}, which cannot hold them (an output it does not compute, or of another "
                        "size); re-plan the model", node=owner.name, graph=body.path)]
    here = {pt.name: pt for pt in by_graph.get(body.path, ())}
    there = {pt.name: pt for pt in by_graph.get(parent.path, ())}
    found: list[Finding] = []
    for o, y in mapped.items():
        bt, yt = here.get(o), there.get(y)
        if bt is None or yt is None:
            continue  # rule 2 names the missing tensor
        if (bt.offset, bt.size) != (yt.offset, yt.size):
            found.append(Finding("alias", o, f"subgraph {body.path!r} writes its output {o!r} at bytes "
                                 f"[{bt.offset}, {bt.offset + bt.size}) but the {owner.op_type} output {y!r} it "
                                 "is sits at "
                                 f"[{yt.offset}, {yt.offset + yt.size})", node=owner.name, other=y, graph=body.path))
    return found


def _prove_level(plan: MemoryPlan, view: GraphView, limit: int | None, bounds: tuple[int, int],
                 space: str = "", mode: str = "sequential",
                 inside: frozenset[frozenset[str]] = frozenset()) -> list[Finding]:
    """Rules 1 to 7 for one graph level: ``plan`` holds that level's order and tensors;
    every tensor must lie in bytes ``bounds`` (``space`` names them: the arena, or a region).
    ``mode="dag"``: rule 9 too. ``inside``: pairs of a region and an If output that its
    branches write inside it (rule 8 checks where), which may share bytes."""
    found, order = _order_findings(plan, view)
    if found:
        return found[:limit] if limit else found

    def left() -> int | None:
        return None if limit is None else limit - len(found)

    def full() -> bool:
        return limit is not None and len(found) >= limit

    found += _tensor_findings(plan, view, limit)
    if found:
        return found[:limit] if limit else found
    found += _placement_findings(plan, bounds, space, limit)
    names = [view.ops[i].name for i in order]
    life = true_lifetimes(view, order)
    if not full():
        found += _lifetime_findings(plan, names, life, left())
    if not full():
        alias, overlap = sharing_findings(plan, view, names, life, limit=left() or None, inside=inside)
        found += alias + overlap
    if not full() and plan.form == "shared-objects":
        found += object_findings(plan, life)
    if mode == "dag" and not full():
        found += concurrency_findings(plan, view, order, limit=left() or None)
    return found[:limit] if limit else found


def _tensor_findings(plan: MemoryPlan, view: GraphView, limit: int | None) -> list[Finding]:
    """Rule 2: the plan holds exactly the level's arena tensors, each of the model's dtype, shape and size."""
    found: list[Finding] = []
    io_out = set(view.inputs) | set(view.outputs) if plan.io == "external" else set()
    expected = {t.name: t for t in view.activations() if t.name not in io_out}
    planned: dict[str, PlannedTensor] = {}
    for pt in plan.tensors:
        if pt.name in planned:
            found.append(Finding("mismatch", pt.name, f"tensor {pt.name!r} appears twice in the plan"))
        planned[pt.name] = pt
    def where(t: Tensor) -> str:
        return f"written by node {view.ops[t.producer].name!r}" if t.producer is not None else "a graph input"

    for name, t in expected.items():
        got = planned.get(name)
        if got is None:
            found.append(Finding("mismatch", name, f"tensor {name!r} ({where(t)}) is not in the plan; re-plan the model"))
        elif (got.dtype, tuple(got.shape), got.size) != (t.dtype, tuple(t.shape), t.size):
            found.append(Finding(
                "mismatch", name,
                f"tensor {name!r} ({where(t)}) is {t.dtype}{list(t.shape)} ({t.size} B) in the model but "
                f"{got.dtype}{list(got.shape)} ({got.size} B) in the plan; re-plan with the same dims",
            ))
        if limit is not None and len(found) >= limit:
            return found
    for name in planned:
        if name not in expected:
            why = "a weight" if name in view.tensors else "not a value of the model"
            found.append(Finding("mismatch", name, f"plan tensor {name!r} is {why}; re-plan the model"))
    return found


def _placement_findings(plan: MemoryPlan, bounds: tuple[int, int], space: str, limit: int | None) -> list[Finding]:
    """Rule 3: every offset a multiple of the alignment, every tensor inside ``bounds``."""
    found: list[Finding] = []
    align = max(plan.alignment, 1)
    for pt in plan.tensors:
        if pt.offset % align:
            found.append(Finding("alignment", pt.name, f"tensor {pt.name!r} at offset {pt.offset} is not a "
                                 f"multiple of the alignment {align}"))
        if pt.offset < bounds[0] or pt.offset + pt.size > bounds[1]:
            beyond = (f"outside {space}, bytes [{bounds[0]}, {bounds[1]})" if space
                      else f"beyond the arena of {plan.arena_size} B")
            found.append(Finding("arena", pt.name,
                                 f"tensor {pt.name!r} occupies bytes [{pt.offset}, {pt.offset + pt.size}) {beyond}",
                                 byte_range=(pt.offset, pt.offset + pt.size)))
        if limit is not None and len(found) >= limit:
            break
    return found


def _lifetime_findings(plan: MemoryPlan, names: Sequence[str], life: Lifetimes, limit: int | None) -> list[Finding]:
    """Rule 4: no plan lifetime misses a step where the value is live under the order."""
    found: list[Finding] = []
    for pt in plan.tensors:
        s, e, reader = life[pt.name]
        if pt.start > s:
            prod = names[s]
            found.append(Finding("lifetime", pt.name, f"tensor {pt.name!r} is written at step {s} (node {prod!r}) "
                                 f"but the plan starts its life at step {pt.start}", node=prod))
        elif pt.end < e:
            who = f"node {names[e - 1]!r} reads it" if reader is not None else "it is live"
            found.append(Finding("lifetime", pt.name, f"tensor {pt.name!r} is live until step {e - 1} ({who} "
                                 f"there) but the plan ends its life at step {pt.end}",
                                 node=names[e - 1] if reader is not None else None))
        if limit is not None and len(found) >= limit:
            break
    return found
