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
   the writer reads it: a view (an op whose rule in ``onnxmem.aliasing.RULES``
   is ``view``) of a member at the output's bytes changes nothing; a Concat
   whose input is one contiguous run of the output
   (:func:`onnxmem.aliasing.concat_slices`) and sits at that run changes
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
   (:func:`onnxmem.graph.bound_outputs` must allow it): tensors of the parent,
   live from the If's step, kept apart from everything live then by rule 6.

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

from .aliasing import RULES, alias_rule, concat_slices
from .graph import Body, GraphView, bound_outputs, child_path
from .plan import MemoryPlan, PlannedTensor

__all__ = ["VIEW_OPS", "Finding", "plan_regions", "prove_plan", "true_lifetimes", "walk_bodies"]

#: ops whose output holds the same bytes as their first input
VIEW_OPS = frozenset(op for (d, op), r in RULES.items() if r.kind == "view" and d == "")

Lifetimes = Mapping[str, tuple[int, int, "int | None"]]


@dataclass(frozen=True, slots=True)
class Finding:
    """One way the plan is wrong.

    ``kind``: ``order``, ``mismatch``, ``alignment``, ``arena``, ``lifetime``,
    ``alias``, ``overlap``, ``object`` (static); ``clobber``, ``address``,
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
    """``{owner path: region size}`` of the plan's regions (for :func:`onnxmem.graph.with_regions`)."""
    return {child_path(t.graph, t.producer): t.size for t in plan.tensors
            if t.kind == "region" and t.producer is not None}


def prove_plan(plan: MemoryPlan, view: GraphView, *, limit: int | None = None) -> list[Finding]:
    """Every rule ``plan`` breaks for the model ``view``; empty means proven.

    ``view`` carries the regions of its bodies (:func:`onnxmem.graph.with_regions`).
    See the module docstring for the rules. ``limit`` stops after that many.
    """
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
    found += _prove_level(replace(plan, tensors=tuple(by_graph.get("", ()))), view, limit, (0, plan.arena_size))
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
            if bound_outputs(parent, body, plan.io if not parent.path else "internal") is None:
                found.append(Finding("mismatch", None, f"subgraph {body.path!r} writes its outputs into the outputs "
                                     f"of node {owner.name!r}, which cannot hold them (not planned there, or of "
                                     "another size); re-plan the model", node=owner.name, graph=body.path))
                continue
            io = "external"
        level = replace(plan, order=sp.order, tensors=tuple(by_graph.get(body.path, ())), io=io,
                        form="offsets", objects=())
        found += [replace(f, message=f"in subgraph {body.path!r}: {f.message}", graph=body.path)
                  for f in _prove_level(level, body.view, None if limit is None else limit - len(found), where,
                                        f"the region of node {owner.name!r}")]
    return found[:limit] if limit else found


def _prove_level(plan: MemoryPlan, view: GraphView, limit: int | None, bounds: tuple[int, int],
                 space: str = "") -> list[Finding]:
    """Rules 1 to 7 for one graph level: ``plan`` holds that level's order and tensors;
    every tensor must lie in bytes ``bounds`` (``space`` names them: the arena, or a region)."""
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

    alias, overlap = _sharing_findings(plan, view, names, life, limit=(limit - len(found)) if limit else None)
    found.extend(alias + overlap)
    if full():
        return done()
    if plan.form == "shared-objects":
        found.extend(_object_findings(plan, life))
    return done()


class _Sharing:
    """Rules 5 and 6: one sweep over the steps with an active set sorted by offset."""

    def __init__(self, plan: MemoryPlan, view: GraphView, names: list[str], life: Lifetimes) -> None:
        self.view = view
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
    plan: MemoryPlan, view: GraphView, names: list[str], life: Lifetimes, *, limit: int | None
) -> tuple[list[Finding], list[Finding]]:
    """``(alias findings, overlap findings)``: rules 5 and 6."""
    sharing = _Sharing(plan, view, names, life)
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
