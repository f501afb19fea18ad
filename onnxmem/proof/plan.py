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
   bytes while both are live.
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

Rules 5 and 6 are one sweep over the steps: at each step the tensors that
died are dropped from an active set sorted by offset, and each tensor written
there is looked up in it (every active tensor whose bytes meet its bytes is a
pair to judge) before it joins. The cost is ``O((n + p) log n)`` for ``n``
tensors and ``p`` pairs that are live together and share bytes (in a valid
plan only the members of one alias group do). Rule 7 is the same sweep per
shared object.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from onnxmem.analysis.aliasing import RULES, alias_rule, concat_slices
from onnxmem.graph import Body, GraphView, bound_outputs, child_path
from onnxmem.plans.point import MemoryPlan, PlannedTensor

__all__ = ["VIEW_OPS", "Finding", "plan_regions", "prove_plan", "true_lifetimes", "walk_bodies"]

#: ops whose output holds the same bytes as their first input
VIEW_OPS = frozenset(op for (d, op), r in RULES.items() if r.kind == "view" and d == "")

Lifetimes = Mapping[str, tuple[int, int, "int | None"]]


@dataclass(frozen=True, slots=True)
class Finding:
    """One way the plan is wrong.

    ``kind``: ``order``, ``mismatch``, ``alignment``, ``arena``, ``lifetime``,
    ``alias``, ``overlap``, ``object``, ``concurrency`` (static); ``clobber``, ``address``,
    ``shape``, ``output`` (execution). ``tensor`` is the bad tensor, ``node``
    the node involved, ``byte_range`` arena bytes ``[lo, hi)``.
    """

    kind: str
    tensor: str | None
    message: str
    node: str | None = None
    other: str | None = None
    byte_range: tuple[int, int] | None = None
    graph: str = ""  # the (sub)graph of ``tensor`` and ``node``
    #: rule 9: node names in an order the graph allows that breaks the plan
    schedule: tuple[str, ...] | None = None

    def __str__(self) -> str:
        return self.message


def true_lifetimes(view: GraphView, order: Sequence[int]) -> dict[str, tuple[int, int, int | None]]:
    """``{value: (start, end, last_reader)}`` of every non-weight value under ``order``.

    ``[start, end)`` in steps; ``last_reader`` is the node index of the last
    step that reads the value (``None`` when nothing reads it).
    """
    horizon = max(len(order), 1)
    step = {op: k for k, op in enumerate(order)}
    last: dict[str, tuple[int, int]] = {}
    for k, op_index in enumerate(order):
        op = view.ops[op_index]
        for name in op.inputs + op.captures:
            last[name] = (k, op_index)
    outs = set(view.outputs)
    out: dict[str, tuple[int, int, int | None]] = {}
    for t in view.tensors.values():
        if t.kind == "weight":
            continue
        start = 0 if t.producer is None else step[t.producer]
        k, reader = last.get(t.name, (start, None))
        end = horizon if t.name in outs else k + 1
        out[t.name] = (start, max(end, start + 1), reader)
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
    by_graph: dict[str, list[PlannedTensor]] = {}
    for pt in plan.tensors:
        by_graph.setdefault(pt.graph, []).append(pt)
    subplans = {s.path: s for s in plan.subgraphs}
    pairs = list(walk_bodies(view))
    paths = {""} | {b.path for _, b in pairs}
    found: list[Finding] = []
    for path in list(by_graph) + list(subplans):
        if path not in paths:
            found.append(Finding("mismatch", None, f"the plan has a subgraph {path!r}, which the model does not "
                                 "have; re-plan the model"))
    inside = _inside_pairs(pairs, subplans)
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
        elif sp.outputs == "inside":  # the branch writes its outputs where the If's outputs sit
            found += _inside_findings(parent, body, owner, by_graph, plan.io)
        level = replace(plan, order=sp.order, tensors=tuple(by_graph.get(body.path, ())), io=io,
                        form="offsets", objects=())
        found += [replace(f, message=f"in subgraph {body.path!r}: {f.message}", graph=body.path)
                  for f in _prove_level(level, body.view, None if limit is None else limit - len(found), where,
                                        f"the region of node {owner.name!r}",
                                        inside=inside.get(body.path, frozenset()))]
    return found[:limit] if limit else found


def _inside_pairs(pairs: Iterable[tuple[GraphView, Body]],
                  subplans: Mapping[str, Any]) -> dict[str, frozenset[frozenset[str]]]:
    """``{graph path: {{region, If output}}}``: the pairs of an If planned with its outputs
    inside its region (``outputs: inside``), which share bytes by design (rule 8)."""
    out: dict[str, set[frozenset[str]]] = {}
    for parent, body in pairs:
        sp = subplans.get(body.path)
        region = parent.regions.get(body.owner)
        if sp is None or sp.outputs != "inside" or region is None:
            continue
        out.setdefault(parent.path, set()).update(frozenset((region, y)) for y in parent.ops[body.owner].outputs if y)
    return {k: frozenset(v) for k, v in out.items()}


def _inside_findings(parent: GraphView, body: Body, owner: Any, by_graph: Mapping[str, list[PlannedTensor]],
                     io: str) -> list[Finding]:
    """Rule 8 for a branch planned with ``outputs: inside``: it computes every output (each
    once, of its If output's size: :func:`onnxmem.graph.view.bound_outputs`), and each of its
    output tensors sits at exactly the bytes of the If output it is."""
    mapped = bound_outputs(parent, body, io)
    if not mapped or len(mapped) != len(body.view.outputs):
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
                                 f"[{bt.offset}, {bt.offset + bt.size}) but the If output {y!r} it is sits at "
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
    names = [view.ops[i].name for i in order]

    def full() -> bool:
        return limit is not None and len(found) >= limit

    def done() -> list[Finding]:
        return found[:limit] if limit else found

    io_out = set(view.inputs) | set(view.outputs) if plan.io == "external" else set()
    expected = {t.name: t for t in view.activations() if t.name not in io_out}
    planned: dict[str, PlannedTensor] = {}
    for pt in plan.tensors:
        if pt.name in planned:
            found.append(Finding("mismatch", pt.name, f"tensor {pt.name!r} appears twice in the plan"))
        planned[pt.name] = pt
    for name, t in expected.items():
        got = planned.get(name)
        where = f"written by node {view.ops[t.producer].name!r}" if t.producer is not None else "a graph input"
        if got is None:
            found.append(Finding("mismatch", name, f"tensor {name!r} ({where}) is not in the plan; re-plan the model"))
        elif (got.dtype, tuple(got.shape), got.size) != (t.dtype, tuple(t.shape), t.size):
            found.append(
                Finding(
                    "mismatch",
                    name,
                    f"tensor {name!r} ({where}) is {t.dtype}{list(t.shape)} ({t.size} B) in the model but "
                    f"{got.dtype}{list(got.shape)} ({got.size} B) in the plan; re-plan with the same dims",
                )
            )
        if full():
            return done()
    for name in planned:
        if name not in expected:
            why = "a weight" if name in view.tensors else "not a value of the model"
            found.append(Finding("mismatch", name, f"plan tensor {name!r} is {why}; re-plan the model"))
    if found:
        return done()

    align = max(plan.alignment, 1)
    for pt in plan.tensors:
        if pt.offset % align:
            found.append(
                Finding("alignment", pt.name, f"tensor {pt.name!r} at offset {pt.offset} is not a multiple of the alignment {align}")
            )
        if pt.offset < bounds[0] or pt.offset + pt.size > bounds[1]:
            beyond = (f"outside {space}, bytes [{bounds[0]}, {bounds[1]})" if space
                      else f"beyond the arena of {plan.arena_size} B")
            found.append(
                Finding(
                    "arena",
                    pt.name,
                    f"tensor {pt.name!r} occupies bytes [{pt.offset}, {pt.offset + pt.size}) {beyond}",
                    byte_range=(pt.offset, pt.offset + pt.size),
                )
            )
        if full():
            return done()

    life = true_lifetimes(view, order)
    for pt in plan.tensors:
        s, e, reader = life[pt.name]
        if pt.start > s:
            prod = names[s]
            found.append(
                Finding(
                    "lifetime",
                    pt.name,
                    f"tensor {pt.name!r} is written at step {s} (node {prod!r}) but the plan starts its life at step {pt.start}",
                    node=prod,
                )
            )
        elif pt.end < e:
            who = f"node {names[e - 1]!r} reads it" if reader is not None else "it is live"
            found.append(
                Finding(
                    "lifetime",
                    pt.name,
                    f"tensor {pt.name!r} is live until step {e - 1} ({who} there) but the plan ends its life at step {pt.end}",
                    node=names[e - 1] if reader is not None else None,
                )
            )
        if full():
            return done()

    alias, overlap = _sharing_findings(plan, view, names, life, limit=(limit - len(found)) if limit else None,
                                       inside=inside)
    found.extend(alias + overlap)
    if full():
        return done()
    if plan.form == "shared-objects":
        found.extend(_object_findings(plan, life))
    if mode == "dag" and not full():
        found.extend(_dag_findings(plan, view, order, limit=(limit - len(found)) if limit else None))
    return done()


class _Sharing:
    """Rules 5 and 6: one sweep over the steps with an active set sorted by offset."""

    def __init__(self, plan: MemoryPlan, view: GraphView, names: list[str], life: Lifetimes,
                 inside: frozenset[frozenset[str]] = frozenset()) -> None:
        self.view = view
        self.inside = inside
        self.names = names
        self.life = life
        self.alias: list[Finding] = []
        self.overlap: list[Finding] = []
        groups: dict[str, dict[str, PlannedTensor]] = {}
        for pt in plan.tensors:
            groups.setdefault(pt.group, {})[pt.name] = pt
        self.groups = groups
        self.broken: set[str] = set()  # groups not in one buffer: their pairs are not judged
        for gid, members in groups.items():
            if len(members) < 2:
                continue
            bases = {m.offset - m.group_offset for m in members.values()}
            if len(bases) > 1:
                second = list(members)[1]
                self.alias.append(
                    Finding(
                        "alias",
                        second,
                        f"tensors of alias group {gid!r} must lie in one buffer (offset - group_offset the same) "
                        f"but start it at {sorted(bases)}",
                    )
                )
                self.broken.add(gid)
        self._kept: dict[str, list[tuple[int, int]]] = {}

    def sweep(self, tensors: Sequence[PlannedTensor], limit: int | None) -> None:
        """Judge every pair of ``tensors`` that is live at one step and shares bytes."""
        if not tensors:
            return
        life = self.life
        start = [life[t.name][0] for t in tensors]
        widest = max(t.size for t in tensors)
        by_start = sorted(range(len(tensors)), key=start.__getitem__)
        ending: list[tuple[int, int, int]] = []  # (end, offset, index): a min-heap
        active: list[tuple[int, int]] = []  # (offset, index), sorted
        for i in by_start:
            t = tensors[i]
            s = start[i]
            while ending and ending[0][0] <= s:
                _e, off, j = heapq.heappop(ending)
                del active[bisect_left(active, (off, j))]
            lo, hi = t.offset, t.offset + t.size
            # every active tensor that starts below hi and ends above lo; none
            # starts below lo - widest
            k = bisect_left(active, (hi, -1)) - 1
            while k >= 0 and active[k][0] + widest > lo:
                u = tensors[active[k][1]]
                if u.offset + u.size > lo:
                    self._pair(u, t)
                    if limit is not None and len(self.alias) + len(self.overlap) >= limit:
                        return
                k -= 1
            insort(active, (lo, i))
            heapq.heappush(ending, (life[t.name][1], lo, i))

    def _pair(self, u: PlannedTensor, t: PlannedTensor) -> None:
        """``u`` (live already) and ``t`` (written now) share bytes while both are live."""
        if frozenset((u.name, t.name)) in self.inside:
            return  # an If output inside its region, where its branches write it (rule 8)
        if u.group != t.group:
            self.overlap.append(self._overlap(u, t))
            return
        if u.group in self.broken:
            return
        self._write_over(t, u)
        if self.life[u.name][0] == self.life[t.name][0]:
            self._write_over(u, t)

    def _overlap(self, a: PlannedTensor, b: PlannedTensor) -> Finding:
        life, view, names = self.life, self.view, self.names
        if (life[b.name][0], b.name) < (life[a.name][0], a.name):
            a, b = b, a
        lo_t, hi_t = max(life[a.name][0], life[b.name][0]), min(life[a.name][1], life[b.name][1])
        lo, hi = max(a.offset, b.offset), min(a.offset + a.size, b.offset + b.size)
        writer = view.tensors[b.name].producer
        wname = view.ops[writer].name if writer is not None else "(graph input)"
        return Finding(
            "overlap",
            b.name,
            f"tensors {a.name!r} and {b.name!r} (written by node {wname!r}) are both live in steps "
            f"[{lo_t}, {hi_t}) (nodes {names[lo_t]!r} to {names[hi_t - 1]!r}) and share bytes [{lo}, {hi})",
            node=wname,
            other=a.name,
            byte_range=(lo, hi),
        )

    def _write_over(self, y: PlannedTensor, x: PlannedTensor) -> None:
        """The producer of ``y`` writes it over bytes of ``x``, a member of its group live then."""
        view = self.view
        t = view.tensors[y.name]
        if t.producer is None:
            return
        s = self.life[y.name][0]
        xs, xe, _ = self.life[x.name]
        op = view.ops[t.producer]
        gid = y.group
        if xs == s and view.tensors[x.name].producer == t.producer:
            self.alias.append(
                Finding("alias", y.name, f"outputs {x.name!r} and {y.name!r} of node {op.name!r} share bytes "
                        f"(group {gid!r})", node=op.name, other=x.name)
            )
            return
        rule = alias_rule(op)
        dies = x.name in op.inputs and xe <= s + 1 and x.name not in view.outputs
        elementwise = (
            rule is not None
            and rule.kind == "inplace"
            and rule.holds_for(view.tensors[x.name].elem_type)
            and all(j in rule.inputs and (x.offset, x.size) == (y.offset, y.size) for j, n in enumerate(op.inputs) if n == x.name)
        )
        if dies and elementwise:
            return  # written in place, element by element, over an input that dies here
        lo, hi = y.offset, y.offset + y.size
        a, b = max(lo, x.offset), min(hi, x.offset + x.size)
        kept = self._kept.get(y.name)
        if kept is None:
            kept = self._kept[y.name] = _kept_bytes(view, op, y, self.groups[gid])
        if any(klo <= a and b <= khi for klo, khi in kept):
            return  # a view, or a Concat over its own input: those bytes do not change
        why = (
            f"which is still live until step {xe - 1}"
            if not dies
            else f"but {op.op_type} may not write its output over that input in place "
            "(it reads neighbours, reads it at another input, or the bytes differ)"
        )
        self.alias.append(
            Finding(
                "alias",
                x.name,
                f"node {op.name!r} ({op.op_type}) writes {y.name!r} over {x.name!r} (alias group {gid!r}), {why}",
                node=op.name,
                other=y.name,
            )
        )


def _sharing_findings(
    plan: MemoryPlan, view: GraphView, names: list[str], life: Lifetimes, *, limit: int | None,
    inside: frozenset[frozenset[str]] = frozenset(),
) -> tuple[list[Finding], list[Finding]]:
    """``(alias findings, overlap findings)``: rules 5 and 6 (``inside``: see :func:`_prove_level`)."""
    sharing = _Sharing(plan, view, names, life, inside)
    sharing.sweep([pt for pt in plan.tensors if pt.size > 0], limit)
    return sharing.alias, sharing.overlap


def _kept_bytes(view: GraphView, op: Any, y: PlannedTensor, members: Mapping[str, PlannedTensor]) -> list[tuple[int, int]]:
    """Arena ranges inside ``y`` that ``op`` writes with the bytes already there: all of
    ``y`` for a view of a member at ``y``'s bytes; for a Concat, the slices whose
    input is a member sitting at that slice."""
    lo, hi = y.offset, y.offset + y.size
    rule = alias_rule(op)
    if rule is not None and rule.kind == "view":
        src = members.get(op.inputs[0]) if op.inputs else None
        return [(lo, hi)] if src is not None and (src.offset, src.size) == (y.offset, y.size) else []
    slices = concat_slices(view, op)
    if slices is None:
        return []
    return [(lo + off, lo + off + members[n].size) for n, off in zip(op.inputs, slices)
            if n in members and members[n].offset == lo + off and members[n].size == view.tensors[n].size]


def _object_findings(plan: MemoryPlan, life: Lifetimes) -> list[Finding]:
    """Rule 7; per object, a sweep over its members in step order."""
    objs = {o.id: o for o in plan.objects}
    found: list[Finding] = []
    members: dict[int, list[PlannedTensor]] = {}
    for pt in plan.tensors:
        if pt.object is None:
            found.append(Finding("object", pt.name, f"tensor {pt.name!r} has no shared object in a shared-objects plan"))
            continue
        o = objs.get(pt.object)
        if o is None:
            found.append(Finding("object", pt.name, f"tensor {pt.name!r} names shared object {pt.object}, which the plan lacks"))
            continue
        if pt.offset - pt.group_offset != o.offset or pt.group_offset + pt.size > o.size:
            found.append(
                Finding(
                    "object",
                    pt.name,
                    f"tensor {pt.name!r} ({pt.size} B at {pt.offset}) does not sit inside its object {o.id} "
                    f"({o.size} B at {o.offset})",
                )
            )
        members.setdefault(pt.object, []).append(pt)
    for oid, ms in members.items():
        live: list[tuple[int, int, PlannedTensor]] = []  # (end, position, tensor): a min-heap
        for pos, b in enumerate(sorted(ms, key=lambda m: life[m.name][0])):
            sb = life[b.name][0]
            while live and live[0][0] <= sb:
                heapq.heappop(live)
            for _e, _p, a in sorted(live, key=lambda item: item[1]):
                if a.group != b.group:
                    found.append(
                        Finding(
                            "object",
                            b.name,
                            f"tensors {a.name!r} and {b.name!r} share object {oid} but are both live at step {sb}",
                            other=a.name,
                        )
                    )
            heapq.heappush(live, (life[b.name][1], pos, b))
    return found


class _Dag:
    """Rule 8: happens-before as bits (``before[b]``: the nodes that happen before ``b``)."""

    def __init__(self, view: GraphView, order: Sequence[int]) -> None:
        self.view = view
        self.order = order
        n = len(view.ops)
        self.before = [0] * n
        for op_index in order:  # topological (rule 1)
            bits = 0
            for name in view.ops[op_index].reads:
                t = view.tensors.get(name)
                if t is not None and t.producer is not None and t.kind != "weight":
                    bits |= self.before[t.producer] | (1 << t.producer)
            self.before[op_index] = bits
        self.readers: dict[str, list[int]] = {}
        for op in view.ops:
            for name in op.reads:
                self.readers.setdefault(name, []).append(op.index)
        self.outputs = set(view.outputs)

    def hb(self, a: int | None, b: int | None) -> bool:
        """Node ``a`` happens before node ``b`` (``None``: a graph input's writer, before all)."""
        if b is None:
            return False
        return a is None or bool(self.before[b] >> a & 1)

    def done_before(self, u: str, node: int | None, allow: int | None = None) -> bool:
        """Every node that writes or reads ``u`` (but ``allow``) happens before ``node``."""
        if u in self.outputs or node is None:
            return False
        t = self.view.tensors[u]
        if not self.hb(t.producer, node):
            return False
        return all(r == allow or self.hb(r, node) for r in self.readers.get(u, ()))

    def schedule(self, a: int | None, b: int | None) -> tuple[list[int], int]:
        """An order the graph allows that runs ``a``, ``b`` and what they need first;
        ``(order, length of that prefix)``."""
        need = 0
        for x in (a, b):
            if x is not None:
                need |= self.before[x] | (1 << x)
        first = [i for i in self.order if need >> i & 1]
        rest = [i for i in self.order if not need >> i & 1]
        return first + rest, len(first)

    def live_after(self, u: str, prefix: set[int]) -> bool:
        return u in self.outputs or any(r not in prefix for r in self.readers.get(u, ()))


def _dag_findings(plan: MemoryPlan, view: GraphView, order: Sequence[int], *, limit: int | None) -> list[Finding]:
    """Rule 8: a sweep over offsets finds every pair of tensors that share a byte."""
    dag = _Dag(view, order)
    groups: dict[str, dict[str, PlannedTensor]] = {}
    for pt in plan.tensors:
        groups.setdefault(pt.group, {})[pt.name] = pt
    found: list[Finding] = []
    tensors = sorted((pt for pt in plan.tensors if pt.size > 0), key=lambda p: (p.offset, p.name))
    active: list[tuple[int, int, PlannedTensor]] = []  # (end byte, position, tensor): a min-heap
    for pos, t in enumerate(tensors):
        while active and active[0][0] <= t.offset:
            heapq.heappop(active)
        for _e, _p, u in active:
            finding = _dag_pair(dag, view, groups, u, t)
            if finding is not None:
                found.append(finding)
                if limit is not None and len(found) >= limit:
                    return found
        heapq.heappush(active, (t.offset + t.size, pos, t))
    return found


def _dag_pair(dag: _Dag, view: GraphView, groups: Mapping[str, Mapping[str, PlannedTensor]],
              u: PlannedTensor, t: PlannedTensor) -> Finding | None:
    """Rule 8 for one pair sharing bytes; ``None`` when the graph keeps it apart."""
    pu, pt = view.tensors[u.name].producer, view.tensors[t.name].producer
    if u.group != t.group:
        if dag.done_before(u.name, pt) or dag.done_before(t.name, pu):
            return None
        why = "neither is written and read before the other is written"
    else:
        if pu == pt:
            return None  # two outputs of one node: rule 5 judges them
        if dag.hb(pu, pt):
            first, second = u, t
        elif dag.hb(pt, pu):
            first, second = t, u
        else:
            first, second = u, t
            why = "their writers are not ordered"
            return _dag_finding(dag, view, first, second, why)
        writer = view.tensors[second.name].producer
        assert writer is not None
        op = view.ops[writer]
        lo, hi = max(first.offset, second.offset), min(first.offset + first.size, second.offset + second.size)
        kept = _kept_bytes(view, op, second, groups[second.group])
        if any(klo <= lo and hi <= khi for klo, khi in kept):
            return None  # a view, or a Concat over its own input: those bytes do not change
        if dag.done_before(first.name, writer, allow=writer):
            return None  # in place (rule 5 judges the kernel) after every other reader
        why = f"node {op.name!r} writes {second.name!r} over it while another reader may still run"
        return _dag_finding(dag, view, first, second, why)
    return _dag_finding(dag, view, u, t, why)


def _dag_finding(dag: _Dag, view: GraphView, u: PlannedTensor, t: PlannedTensor, why: str) -> Finding:
    pu, pt = view.tensors[u.name].producer, view.tensors[t.name].producer
    order, k = dag.schedule(pu, pt)
    names = tuple(view.ops[i].name for i in order)
    prefix = set(order[:k])
    lo, hi = max(u.offset, t.offset), min(u.offset + u.size, t.offset + t.size)

    def who(p: int | None) -> str:
        return "the graph input" if p is None else f"node {view.ops[p].name!r}"

    if dag.live_after(u.name, prefix) and dag.live_after(t.name, prefix):
        how = (f"run {who(pu)}, {who(pt)} and what they need first ({k} nodes: {', '.join(map(repr, names[:k][:8]))}"
               f"{', ...' if k > 8 else ''}): both are then live")
    else:
        how = f"run {who(pu)} and {who(pt)} at the same time"
    return Finding(
        "concurrency",
        t.name,
        f"tensors {u.name!r} and {t.name!r} share bytes [{lo}, {hi}) but the graph does not order them "
        f"({why}): a schedule that breaks the plan: {how}",
        node=view.ops[pt].name if pt is not None else None,
        other=u.name,
        byte_range=(lo, hi),
        schedule=names,
    )
