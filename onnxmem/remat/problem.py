"""The recomputation problem: which values to drop, and what that costs.

A model and an operator order become a :class:`RematProblem` of integers
(:func:`build_problem`): steps ``0 .. n-1`` (step ``s`` runs ``order[s]``)
and *values*, one per tensor the arena holds, each with its aligned
``size``, the step that writes it and the steps that read it. The lifetime
rule is the planner's (:func:`onnxmem.analysis.lifetimes.tensor_lifetimes`): a value
is live from the step that writes it through the last step that reads it,
graph inputs from step 0, graph outputs to the end; this module writes
lifetimes as inclusive ``[start, end]`` steps. A view's output takes no
bytes and keeps its source alive; a Concat whose inputs sit inside its
output is a group (``RematProblem.groups``).

**The recomputation rule.** A value ``v`` may be *dropped* when it is
droppable (:func:`build_problem` says when). Its reads split at the longest
gap between consecutive reads (the write counts as the first; a gap counts
the steps in it that write into the arena, since one that writes nothing
there, such as an Unsqueeze of a weight, holds no more than the step before,
and a value with no such gap is read without one): the original
copy serves the reads up to ``last_pre[v]`` and is freed there; a second
copy, written by a duplicate of ``v``'s producer, serves the reads from
``first_post[v]`` on. A producer with several outputs (BatchNormalization
in training mode, LayerNormalization with its statistics, Split, MaxPool with
indices) is duplicated whole: the duplicate writes its other outputs too, and
they die at once (``spare[v]`` bytes in the duplicate's block slot). The
duplicate runs right before step ``r[v]``:

* ``r[v] = first_post[v]``, or earlier when a dropped value ``w`` whose
  producer reads ``v`` is recomputed at a step ``r[w] > last_pre[v]`` (the
  original copy is gone by then, so ``v`` must be back first):
  ``r[v] = min(first_post[v], min r[w])``;
* a value the duplicate reads that is kept (or dropped but still in its
  original copy) lives on until ``r[w]``;
* the second copy lives from ``r[v]`` through its last read (a duplicate's
  read counts).

So every dropped value is computed exactly twice (a value read without a
gap, only when something needs it back) and the extra compute is the sum of
its producers' costs, one per producer and step (values of one producer
recomputed at one step share a duplicate: :func:`shared_duplicates`).
Duplicates inserted before one step run in the order of the original
producers (a topological order). :func:`simulate` counts bytes in two slots
per step, the block of duplicates and then the step. It counts the in-place
writes of :mod:`onnxmem.analysis.aliasing` where a node's input dies at it
(``RematProblem.inplace``: the output starts a slot later, in its input's
bytes; the input may be the original copy of a dropped value, which dies at
its ``last_pre``) and, in its walk through a block (``sequential``), those of
the duplicates over a value that dies at them, but no other sharing the
planner finds, so the planner's arena for the rewritten model may come out
below (or, where a Concat group is laid out otherwise, above) it, and
:mod:`onnxmem.remat.budget` plans every rewrite for real.

The exact algorithm, the heuristics and the brute force all search this one
space, the subsets of droppable values; :func:`simulate` is their common
judge, O(values + reads) per call (``sequential=False``: the exact program's
measure, every copy of a block at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from onnxmem.analysis.aliasing import (
    INPLACE,
    VIEW,
    concat_slices,
    every_alias_source,
    group_writable,
    overwritable,
)
from onnxmem.analysis.lifetimes import tensor_lifetimes
from onnxmem.core.problem import align_up
from onnxmem.core.workclock import charge
from onnxmem.graph import RANDOM_OPS, GraphView, Op

__all__ = ["MS_RECOMPUTE", "NO_RECOMPUTE", "RematProblem", "Schedule", "build_problem", "recomputable", "shared_duplicates", "simulate"]

#: ops never recomputed: randomness, side effects, subgraphs (their body could hold either)
#: work units (:mod:`onnxmem.core.workclock`) per step and drop :func:`simulate` walks
SIMULATE_COST = 2.0
NO_RECOMPUTE = RANDOM_OPS | frozenset({
    "Dropout", "If", "Loop", "Scan", "SequenceMap", "SequenceInsert", "SequenceErase", "SequenceConstruct", "Optional",
})

#: onnxruntime's contrib ops (com.microsoft) that are recomputed: deterministic forward ops whose
#: outputs depend on their inputs alone. BatchNormInternal (BatchNormalization in training mode)
#: computes its batch statistics from ``X``; its running-statistics outputs are written under fresh
#: names nothing reads. Absent (never recomputed): the random ops (BiasDropout, BitmaskDropout, ...),
#: the accumulators and every op with side effects
MS_RECOMPUTE = frozenset({
    "BatchNormInternal", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "FusedMatMul", "TransposeMatMul",
    "FusedGemm", "FusedConv", "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization", "BiasSoftmax", "ConcatTraining", "SplitTraining", "Scale",
})


def recomputable(op: Op) -> bool:
    """Whether a duplicate of ``op`` writes the same outputs as ``op`` (module doc, rule 1)."""
    if op.captures:
        return False
    if op.domain in ("", "ai.onnx"):
        return op.op_type not in NO_RECOMPUTE
    return op.domain == "com.microsoft" and op.op_type in MS_RECOMPUTE


@dataclass(frozen=True, slots=True)
class RematProblem:
    """A model under one order, as integers (module doc).

    ``order``: view indices of the nodes by step. Per value
    ``v``: ``size[v]`` (aligned bytes), ``start[v]`` / ``end[v]`` (inclusive
    steps without recomputation), ``name[v]`` (the tensor the producer
    writes), ``producer[v]`` (step, -1 for a graph input), ``droppable[v]``,
    ``last_pre[v]`` / ``first_post[v]`` (the read gap; -1 when not
    droppable; ``first_post`` is ``steps`` for a value read without a gap,
    which comes back only when a recomputed dependant needs it), ``cost[v]`` (the producer's cost). Per step ``s``:
    ``reads[s]`` (values). ``op_type[v]``: the producer's op type ('' for
    a graph input). ``views``: ``(view, source)`` pairs, by decreasing write
    step of the view: the source lives as long as the view does. ``groups``:
    ``(concat, inputs)``: a Concat whose inputs sit inside its output, as the
    planner lays them out; the output's bytes are taken from the first write
    of an input kept (or the recomputation of one dropped) to the output's
    last read, and those inputs take no bytes of their own (a dropped one's
    original copy does). ``spare[v]``: the aligned bytes of the other outputs
    of ``v``'s producer, which its duplicate writes too and which die at once
    (empty: none). ``inplace``: ``(step, u, v)``: the node at ``step``
    may write its output ``v`` over its input ``u``
    (:mod:`onnxmem.analysis.aliasing`'s in-place rule) when ``u``'s copy dies there
    (several inputs of one node in the rule's order, the first that dies
    wins); :func:`simulate` then counts ``v`` from the next slot, or, for a
    duplicate, in ``u``'s bytes.
    """

    order: tuple[int, ...]
    size: tuple[int, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]
    name: tuple[str, ...]
    producer: tuple[int, ...]
    droppable: tuple[bool, ...]
    last_pre: tuple[int, ...]
    first_post: tuple[int, ...]
    cost: tuple[int, ...]
    reads: tuple[tuple[int, ...], ...]
    views: tuple[tuple[int, int], ...] = ()
    op_type: tuple[str, ...] = ()
    groups: tuple[tuple[int, tuple[int, ...]], ...] = ()
    spare: tuple[int, ...] = ()
    inplace: tuple[tuple[int, int, int], ...] = ()
    #: the order the rewrite writes the nodes in the file (view indices; empty: ``order``), when
    #: onnxruntime derives ``order`` from it (:mod:`onnxmem.scheduling.onnxruntime`)
    layout: tuple[int, ...] = ()
    #: numpy copies for :func:`simulate`: sizes, first slots, end slots, grouped mask
    arrays: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        grouped = np.zeros(len(self.size), dtype=bool)
        grouped[list(self.grouped)] = True
        object.__setattr__(self, "arrays", (
            np.asarray(self.size, dtype=np.float64), 2 * np.asarray(self.start, dtype=np.int64) + 1,
            2 * np.asarray(self.end, dtype=np.int64) + 2, grouped))

    @property
    def grouped(self) -> frozenset[int]:
        """The values that sit inside a Concat's output (``groups``)."""
        return frozenset(x for _, parts in self.groups for x in parts)

    @property
    def steps(self) -> int:
        return len(self.order)

    @property
    def candidates(self) -> list[int]:
        """The droppable values, by the step that writes them."""
        return sorted((v for v, d in enumerate(self.droppable) if d), key=lambda v: (self.start[v], v))

    def spare_size(self, v: int) -> int:
        """Bytes a duplicate of ``v``'s producer writes besides ``v`` (``spare``)."""
        return self.spare[v] if self.spare else 0

    def total_cost(self) -> int:
        """The cost of one run of every node (the model's own compute)."""
        seen: dict[int, int] = {}
        for v, p in enumerate(self.producer):
            if p >= 0:
                seen[p] = self.cost[v]
        return sum(seen.values())

    def floor(self) -> tuple[int, int]:
        """``(bytes, step)``: a lower bound on the peak of any set of drops, and the step
        where it is reached. Every value stays live where no drop can free it: a
        value that cannot be dropped over its whole lifetime, a droppable one from
        its write to ``last_pre`` and at each later read. A value that nothing reads
        and that dies where it is written (an unread optional output: MaxPool's
        ``Indices``) is not counted: every rewrite leaves it unnamed
        (:func:`onnxmem.remat.rewrite.omit_unread_outputs`), so no planned arena of a
        rewrite need hold it: the bound is one on :func:`simulate`'s peak and on the
        bytes the planner's arena of a rewrite in this order holds at the step."""
        delta = np.zeros(self.steps + 1, dtype=np.int64)
        inside = {x: self.start[g] for g, parts in self.groups for x in parts}  # a Concat's output holds them
        read = {v for rs in self.reads for v in rs}
        unread = {v for v, p in enumerate(self.producer) if p >= 0 and v not in read and self.end[v] == self.start[v]}
        for v, sz in enumerate(self.size):
            if v in unread:
                continue
            last = self.last_pre[v] if self.droppable[v] else self.end[v]
            last = min(last, inside.get(v, last + 1) - 1)
            if last >= self.start[v]:
                delta[self.start[v]] += sz
                delta[last + 1] -= sz
        curve = np.cumsum(delta[: self.steps])
        for s, rs in enumerate(self.reads):
            curve[s] += sum(self.size[v] for v in rs
                            if self.droppable[v] and s > self.last_pre[v] and v not in inside)
        over: set[int] = set()
        for s, u, v in self.inplace:  # an output written over its input, where the input can die
            if v not in over and v not in unread and (self.end[u] == s or self.droppable[u] and self.last_pre[u] == s):
                over.add(v)
                curve[s] -= self.size[v]
        if not self.steps:
            return 0, 0
        s = int(np.argmax(curve))
        return int(curve[s]), s


@dataclass(frozen=True, slots=True)
class Schedule:
    """The result of dropping ``dropped``: each dropped value's recompute step ``at``
    (``steps`` when nothing needs it back: it is then not recomputed),
    the ``peak`` of the model (bytes), the ``peak_step`` and the extra ``cost``;
    ``curve``: bytes live in each slot (two per step, :func:`simulate`);
    ``ends``: the last step each value's original copy is live when kept."""

    dropped: tuple[int, ...]
    at: Mapping[int, int]
    peak: int
    peak_step: int
    cost: int
    curve: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), compare=False, repr=False)
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), compare=False, repr=False)
    copy_end: Mapping[int, int] = field(default_factory=dict)  # exclusive end slot of each second copy

    def excess(self, budget: int) -> int:
        """Bytes above ``budget``, summed over the steps."""
        return int(np.maximum(self.curve - budget, 0).sum())


def build_problem(view: GraphView, order: Sequence[int], costs: Mapping[int, int], *, io: str = "internal",
                  alignment: int = 64) -> RematProblem:
    """The problem of ``view`` under ``order`` (view indices, topological), with
    ``costs`` (view index -> cost of one run of that node).

    Lifetimes are :func:`onnxmem.analysis.lifetimes.tensor_lifetimes`'s. A view's output
    (:mod:`onnxmem.analysis.aliasing`'s view rule) shares its source's bytes: it is a
    value of size 0 and its source lives as long as it does. A value is
    droppable when it is an activation (not a graph input or output) that no
    view reads as its source and no subgraph captures, written by a node that
    :func:`recomputable` accepts (the default domain but :data:`NO_RECOMPUTE`,
    or onnxruntime's :data:`MS_RECOMPUTE`; any number of outputs) and that is no
    view, and its reads leave a gap of at least one step that writes into the
    arena where it need not be live (or none: it then comes back only with a
    recomputed dependant). A Concat whose inputs can sit inside its output
    (:func:`onnxmem.analysis.aliasing.concat_slices`) and are read by no other Concat
    is a group (``RematProblem.groups``); its output is not droppable.
    """
    step_of = {op: s for s, op in enumerate(order)}
    n = len(order)
    lifetimes = tensor_lifetimes(view, order, io)
    ids = {name: k for k, name in enumerate(lifetimes)}
    view_source: dict[str, str] = {}
    for op, found in zip(view.ops, every_alias_source(view, io)):
        if found is not None and found[0].kind == VIEW and op.outputs[0] in ids and found[1][0] in ids:
            view_source[op.outputs[0]] = found[1][0]
    viewed = set(view_source.values())
    captured = {n for op in view.ops for n in op.captures}  # a subgraph reads them by name: never renamed
    concat_parts = _concat_groups(view, ids, view_source)
    concat_step: dict[str, int] = {}
    for c, parts in concat_parts.items():
        cat = view.tensors[c].producer
        if cat is not None:
            concat_step.update((x, step_of[cat]) for x in parts)
    writes = _arena_writes(view, order, ids, view_source)
    reads: list[list[int]] = [[] for _ in range(n)]
    size, start, end, producer, droppable, last_pre, first_post, cost = [], [], [], [], [], [], [], []
    spare: list[int] = []
    op_types: list[str] = []
    for name, (st, stop) in lifetimes.items():
        t = view.tensors[name]
        k = ids[name]
        uses = sorted({step_of[c] for c in view.consumers.get(name, ())})
        for s in uses:
            reads[s].append(k)
        p = step_of[t.producer] if t.producer is not None else -1
        writer: Op | None = view.ops[t.producer] if t.producer is not None else None
        size.append(0 if name in view_source else align_up(t.size, alignment))
        start.append(st)
        end.append(stop - 1)
        producer.append(p)
        shared = name in viewed or name in view_source or name in captured
        ok = writer is not None and t.kind == "activation" and not shared and recomputable(writer) and bool(uses)
        lp = fp = -1
        if ok:
            lp, fp = _drop_gap([st] + uses, writes, n)
            ok = lp < n - 1
        op_types.append(writer.op_type if writer is not None else "")
        spare.append(sum(align_up(view.tensors[o].size, alignment) for o in writer.outputs
                         if o and o != name and o in view.tensors) if writer is not None else 0)
        if ok and name in concat_step and concat_step[name] <= lp:
            ok = False  # the Concat's output would hold the original copy: not dropped
        ok = ok and name not in concat_parts
        droppable.append(ok)
        last_pre.append(lp if ok else -1)
        first_post.append(fp if ok else -1)
        cost.append(int(costs.get(t.producer, 0)) if t.producer is not None else 0)
    pairs = [(ids[v], ids[s]) for v, s in view_source.items()]
    views = sorted(pairs, key=lambda vs: -start[vs[0]])
    groups = tuple((ids[c], tuple(ids[x] for x in parts)) for c, parts in concat_parts.items())
    inplace = _inplace_pairs(view, order, io, ids, set(view_source) | viewed | captured
                             | {x for parts in concat_parts.values() for x in parts} | set(concat_parts))
    return RematProblem(
        order=tuple(order), size=tuple(size), start=tuple(start), end=tuple(end), name=tuple(lifetimes),
        producer=tuple(producer), droppable=tuple(droppable), last_pre=tuple(last_pre),
        first_post=tuple(first_post), cost=tuple(cost), reads=tuple(tuple(r) for r in reads),
        views=tuple(views), op_type=tuple(op_types), groups=groups, spare=tuple(spare),
        inplace=inplace,
    )


def _arena_writes(view: GraphView, order: Sequence[int], ids: Mapping[str, int],
                  view_source: Mapping[str, str]) -> list[int]:
    """``writes[s]``: the steps before ``s`` that write a value of the arena (of some bytes)."""
    wrote = [any(o in ids and o not in view_source for o in view.ops[op].outputs) for op in order]
    return [int(x) for x in np.concatenate(([0], np.cumsum(wrote)))]


def _concat_groups(view: GraphView, ids: Mapping[str, int], view_source: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The Concats whose inputs can sit inside their output (the output is their bytes):
    ``{output: inputs}``. An input of two Concats can sit inside one of them only: those
    Concats stay ordinary ops, as do Concats of Concats or of views."""
    concat_parts: dict[str, tuple[str, ...]] = {}
    for node in view.ops:
        if node.op_type == "Concat" and node.outputs[0] in ids and concat_slices(view, node) is not None:
            parts = tuple(dict.fromkeys(x for x in node.inputs if x in ids and view.tensors[x].kind == "activation"))
            if len(parts) == len(node.inputs):
                concat_parts[node.outputs[0]] = parts
    readers: dict[str, int] = {}
    for parts in concat_parts.values():
        for x in parts:
            readers[x] = readers.get(x, 0) + 1
    return {c: parts for c, parts in concat_parts.items()
            if all(readers[x] == 1 and x not in concat_parts and x not in view_source for x in parts)}


def _drop_gap(pos: Sequence[int], writes: Sequence[int], n: int) -> tuple[int, int]:
    """``(last step before, first step after)`` the gap a value is dropped over, ``pos``
    being its write step and its read steps: the longest gap with a step between that
    writes into the arena (a step that writes nothing there, such as an Unsqueeze of a
    weight, holds no more than the step before); with no such gap, from its last read to
    the end (recomputed only when a recomputed dependant needs it later)."""
    width, _span, i = max((writes[pos[j + 1]] - writes[pos[j] + 1], pos[j + 1] - pos[j], -j)
                          for j in range(len(pos) - 1))
    if width >= 1:
        return pos[-i], pos[-i + 1]
    return pos[-1], n


def _inplace_pairs(view: GraphView, order: Sequence[int], io: str, ids: Mapping[str, int],
                   shared: set[str]) -> tuple[tuple[int, int, int], ...]:
    """``(step, u, v)`` per node and input whose output ``v`` may take the input ``u``'s bytes
    by :mod:`onnxmem.analysis.aliasing`'s in-place rule once ``u`` dies there (by step, in the rule's
    order); values that share bytes otherwise (views, Concat groups, captures) are left out.
    Whether ``u`` dies at the node depends on what is dropped: :func:`simulate` asks."""
    found = every_alias_source(view, io)
    pairs: list[tuple[int, int, int]] = []
    for step, k in enumerate(order):
        op = view.ops[k]
        got = found[k]
        if got is None or got[0].kind != INPLACE or op.outputs[0] not in ids or op.outputs[0] in shared:
            continue
        rule, sources = got
        pairs.extend((step, ids[src], ids[op.outputs[0]]) for src in sources
                     if src in ids and src not in shared and group_writable(view, [src])
                     and overwritable(op, rule, src, {src: (0, view.tensors[src].size)}))
    return tuple(pairs)


def simulate(problem: RematProblem, dropped: Sequence[int] | set[int], *, sequential: bool = True) -> Schedule:
    """The peak and extra cost of dropping ``dropped`` (module doc), O(values + reads).

    Time has two slots per step ``t``: ``2t``, while the duplicates inserted
    before ``t`` run, and ``2t + 1``, while node ``t`` runs. A value is live
    in the step slots from its write through its last read by a node, and in
    the block slots in between; a read by a duplicate keeps it to that block
    slot only. ``sequential=False`` counts every copy a block writes at once
    in its slot (the exact algorithm's program); ``True`` walks the block
    duplicate by duplicate and frees each value that the block reads last
    after the last duplicate that reads it, in place where the rule allows
    (:func:`_walk_blocks`).
    """
    p = problem
    n = p.steps
    charge((n + len(dropped)) * SIMULATE_COST)  # the work clock of the searches that call this
    drop = set(dropped)
    at: dict[int, int] = {}
    # recompute steps: dropped values by decreasing write step (a dependant is always written later)
    order = sorted(drop, key=lambda v: -p.start[v])
    need: dict[int, int] = {}  # dropped value -> earliest demand after its original copy is gone
    size_arr, first_arr, end_arr, grouped_arr = p.arrays
    ext = end_arr.copy()  # exclusive end slot of each original copy when kept
    copy_end: dict[int, int] = {}  # exclusive end slot of each second copy
    for v in order:
        r = min(p.first_post[v], need.get(v, p.first_post[v]))
        at[v] = r
        if r >= n:
            continue
        if p.first_post[v] < n:
            copy_end[v] = max(copy_end.get(v, 0), 2 * p.end[v] + 2)
        copy_end[v] = max(copy_end.get(v, 0), 2 * r + 1)
        for u in p.reads[p.producer[v]]:
            if u in drop and r > p.last_pre[u]:
                if r < need.get(u, 1 << 60):
                    need[u] = r
                copy_end[u] = max(copy_end.get(u, 0), 2 * r + 1)
            elif u not in drop and 2 * r + 1 > ext[u]:
                ext[u] = 2 * r + 1
    for vw, src in p.views:
        if src in drop:
            copy_end[src] = max(copy_end.get(src, 0), ext[vw])
        elif ext[vw] > ext[src]:
            ext[src] = ext[vw]
    keep = ~grouped_arr
    if drop:
        keep[list(drop)] = False
    delta = (np.bincount(first_arr[keep], weights=size_arr[keep], minlength=2 * n + 1)
             - np.bincount(ext[keep], weights=size_arr[keep], minlength=2 * n + 1)).astype(np.int64)
    grouped = p.grouped
    for v in drop:
        sz = p.size[v]
        delta[2 * p.start[v] + 1] += sz
        delta[2 * p.last_pre[v] + 2] -= sz
        if at[v] < n and v not in grouped:
            delta[2 * at[v]] += sz
            delta[copy_end[v]] -= sz
    over: set[int] = set()
    for s, u, v in p.inplace:  # the output takes its input's bytes where the input's original copy dies
        if v not in over and ((p.last_pre[u] == s) if u in drop else (ext[u] == 2 * s + 2)):
            over.add(v)
            delta[2 * s + 1] -= p.size[v]
            delta[2 * s + 2] += p.size[v]
    spare = shared_duplicates(p, drop, at)
    for v, extra in spare.items():  # the duplicate's other outputs, dead once it ran
        delta[2 * at[v]] += extra
        delta[2 * at[v] + 1] -= extra
    for g, parts in p.groups:  # the output's bytes from its first input on
        first = min([2 * p.start[g] + 1] + [2 * at[x] if x in drop else 2 * p.start[x] + 1 for x in parts])
        delta[first] += p.size[g]
        delta[2 * p.start[g] + 1] -= p.size[g]
    curve = np.cumsum(delta[: 2 * n]) if n else np.zeros(1, dtype=np.int64)
    if sequential and at:
        _walk_blocks(p, drop, at, copy_end, ext, curve, spare)
    s = int(np.argmax(curve))
    cost = sum(p.cost[v] for v in spare)
    return Schedule(tuple(sorted(drop, key=lambda v: (p.start[v], v))), at, int(curve[s]), s // 2, cost, curve,
                    (ext - 2) // 2, copy_end)


def shared_duplicates(p: RematProblem, drop: set[int], at: Mapping[int, int]) -> dict[int, int]:
    """One duplicate per producer and step: ``{v: spare bytes}`` for the first (lowest) dropped
    value of each producer recomputed at one step, which writes the others too; its spare bytes
    are the producer's outputs that are no dropped value recomputed there."""
    lead: dict[tuple[int, int], list[int]] = {}
    for v in sorted(drop):
        if at[v] < p.steps:
            lead.setdefault((p.producer[v], at[v]), []).append(v)
    return {vs[0]: max(0, p.spare_size(vs[0]) - sum(p.size[w] for w in vs[1:])) for vs in lead.values()}


def _walk_blocks(p: RematProblem, drop: set[int], at: Mapping[int, int], copy_end: Mapping[int, int],
                 ext: np.ndarray, curve: np.ndarray, spare: Mapping[int, int]) -> None:
    """Replace each block slot of ``curve`` by the most bytes live while its duplicates run
    one after another (:func:`simulate`, ``sequential``). A value a duplicate of the block
    reads last (a second copy only duplicates read, or a kept value whose last read is
    there) is freed after that duplicate, and the duplicate may write its output over it
    (``RematProblem.inplace``), as the planner does for the rewritten model."""
    blocks: dict[int, list[int]] = {}
    for v, r in at.items():
        if r < p.steps:
            blocks.setdefault(r, []).append(v)
    sources = {src for _, src in p.views}  # a view's reads keep its source: never freed early
    grouped = p.grouped
    over: dict[int, list[int]] = {}
    if blocks:
        for _, u, v in p.inplace:
            if v in drop:
                over.setdefault(v, []).append(u)
    for t, vs in blocks.items():
        vs.sort(key=lambda v: (p.start[v], v))
        cur = int(curve[2 * t]) - sum(p.size[v] + spare.get(v, 0) for v in vs)
        last: dict[int, int] = {}
        for i, v in enumerate(vs):
            for u in p.reads[p.producer[v]]:
                if u in sources or u in grouped:
                    continue
                if (copy_end.get(u) == 2 * t + 1) if u in drop else (ext[u] == 2 * t + 1):
                    last[u] = i
        top = cur
        for i, v in enumerate(vs):
            inside = next((u for u in over.get(v, ()) if last.get(u) == i and p.size[u] == p.size[v]
                           and v not in grouped), None)
            cur += 0 if inside is not None else p.size[v]
            top = max(top, cur + spare.get(v, 0))
            for u in p.reads[p.producer[v]]:
                if last.get(u) == i:
                    last.pop(u)
                    cur -= 0 if u == inside else p.size[u]
        curve[2 * t] = top
