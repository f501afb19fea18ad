"""The peak of an operator order, exactly as liveness computes it, and fast.

The *peak* of an order is the max-live lower bound of the problem
:func:`onnxmem.analysis.liveness.build_liveness` builds from it: the most arena bytes
live at one step, each tensor rounded up to the alignment. Every ordering
strategy minimizes it; :func:`order_peak` computes it from the liveness rules
themselves, so it always agrees with what ``onnxmem plan`` reports.

Searching needs something cheaper than rebuilding liveness per candidate.
:class:`OrderGraph` compacts the view into integers once, and a :class:`Piece`
(any convex set of its nodes, the whole graph included) evaluates a step in
O(degree):

* running node ``v`` with ``R`` bytes resident needs ``R + alloc[v]`` bytes
  (its outputs are allocated while its inputs are still held);
* after it, ``keep[v]`` of those bytes stay (outputs something still reads, and
  graph outputs, which live to the end), and each tensor ``v`` read for the
  last time is freed.

These are the rules of :func:`onnxmem.analysis.lifetimes.tensor_lifetimes`: graph inputs
live from step 0, graph outputs to the end, an output nothing reads occupies
its producer's step only, weights are never in the arena, and with
``io="external"`` graph inputs and outputs are left out. Nodes that read and
write only weights (``Constant`` and friends) have no arena effect: the
strategies put them first, in file order, and search over the rest.

With ``inplace=True`` the evaluator counts the sharing of
:mod:`onnxmem.analysis.aliasing` (its rule table, :func:`~onnxmem.analysis.aliasing.alias_sources`,
:func:`~onnxmem.analysis.aliasing.group_writable` and :func:`~onnxmem.analysis.aliasing.overwritable`), as ``alias_layout(...,
concat=False)`` applies it under the order:

* a view's output and its source are one tensor (a *class*): the view costs
  no bytes, and the class lives until the last read of any member (this does
  not depend on the order);
* an in-place node whose reusable input's class dies at its step (every other
  reader ran before) writes its output over that class: the step costs
  ``alloc[v] - disc[v]``. The bytes resident after the step are the same
  either way (the dying class's bytes become the output's), so only the
  step itself changes.

The peak of an order under these rules equals the max-live bound of
``build_liveness`` over the groups ``alias_layout(view, order, io,
concat=False)`` finds (checked by test). Concat inputs placed inside their
output are left to the final evaluation, :func:`order_peak` with
``inplace=True``, which is exactly ``plan.lower_bound`` of a plan with
``--inplace on``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol, Sequence

from onnxmem.analysis.aliasing import (
    INPLACE,
    VIEW,
    AliasRule,
    every_alias_source,
    group_writable,
    overwritable,
    shared_liveness,
)
from onnxmem.analysis.lifetimes import arena_tensors, live_profile, tensor_lifetimes
from onnxmem.core.problem import align_up, lower_bound
from onnxmem.core.rows import Rows, row_max, transpose
from onnxmem.core.toposort import stable_order
from onnxmem.graph import GraphView, Op
from onnxmem.scheduling.forced import forced_segments

__all__ = ["KEPT_NODES", "Cuts", "OrderGraph", "Piece", "RanBefore", "build_order_graph", "forced_segments",
           "order_graph", "order_peak", "segment_pieces", "simulate", "topological"]

#: remaining-reader count of a tensor a piece never frees
NEVER = 1 << 30


def order_peak(view: GraphView, order: Sequence[int], io: str = "internal", alignment: int = 64,
               inplace: bool = False) -> int:
    """The max-live bound of ``build_liveness(view, order, ...)`` (bytes); with
    ``inplace``, over the layout :func:`onnxmem.analysis.aliasing.shared_layout` chooses
    (``plan.lower_bound`` with ``--inplace on``). The view keeps the bounds of its last few
    orders: the planner asks again for the file order's and the chosen one's."""
    bounds: dict[tuple[int, ...], int] = view.memo(("order peaks", io, alignment, inplace), dict)
    key = tuple(order)
    if key not in bounds:
        if len(bounds) >= _PEAKS_KEPT:
            bounds.clear()
        bounds[key] = _order_peak(view, order, io, alignment, inplace)
    return bounds[key]


#: the bounds of the last orders :func:`order_peak` computed that a view keeps: the search's
#: file order and its chosen one, each asked for again when the plan records them
_PEAKS_KEPT = 4


def _order_peak(view: GraphView, order: Sequence[int], io: str, alignment: int, inplace: bool) -> int:
    if inplace:  # the liveness kept for the planner, which plans the order the search chose
        return lower_bound(shared_liveness(view, order, io, alignment, keep=True).problem)
    lifetimes = tensor_lifetimes(view, order, io)
    spans = ((s, e, align_up(view.tensors[name].size, alignment)) for name, (s, e) in lifetimes.items())
    return int(live_profile(spans, max(len(order), 1)).max(initial=0))


@dataclass(slots=True)
class OrderGraph:
    """A view compacted to integers for search.

    ``real``: view indices of the nodes that matter, in file order (local node
    ``i`` is ``real[i]``); ``free``: view indices of nodes without arena effect.
    ``preds``/``succs``: local dependency rows. Tensor ``t`` has ``size[t]``
    bytes (aligned), ``producer[t]`` (local node, -1 for a graph input),
    ``consumers[t]`` (local nodes) and ``pinned[t]`` (a graph output).
    ``outs[v]``/``reads[v]``: the tensors node ``v`` writes and reads. Every
    row list is a :class:`~onnxmem.core.rows.Rows` (flat, read only).
    ``base``: bytes of graph inputs that someone reads or that are outputs;
    ``first_extra``: bytes of inputs nothing reads (live in step 0 only).

    With ``inplace``, a tensor is a class of tensors joined by views (see the
    module doc), ``ip[v]`` lists the classes node ``v`` may write its output
    over once they die at its step, and ``disc[v]`` is the bytes that saves
    (0 when ``ip[v]`` is empty).
    """

    view: GraphView
    io: str
    alignment: int
    real: list[int]
    free: list[int]
    preds: Rows
    succs: Rows
    size: list[int]
    producer: list[int]
    consumers: Rows
    pinned: list[bool]
    outs: Rows
    reads: Rows
    base: int
    first_extra: int
    ip: Rows
    disc: list[int]
    inplace: bool = False

    @property
    def n(self) -> int:
        return len(self.real)

    def full_order(self, local_order: Iterable[int]) -> tuple[int, ...]:
        """A view order: the free nodes, then ``local_order`` mapped to view indices."""
        return tuple(self.free) + tuple(self.real[v] for v in local_order)

    def root(self) -> "Piece":
        """The piece of every node, charged with the unread inputs in its first
        step when no weight-only node runs before it."""
        piece = Piece.of(self, range(self.n))
        if not self.free:
            piece.first_extra = self.first_extra
        return piece

    def peak(self, local_order: Sequence[int]) -> int:
        """Peak of ``full_order(local_order)``, by the incremental rules."""
        if self.n == 0:
            return self.base + self.first_extra
        floor = self.base + self.first_extra if self.free else 0
        rel, _ = simulate(self.root(), local_order)
        return max(floor, self.base + rel)


KEPT_NODES = 4096  # graphs of at most this many nodes keep their search graph on the view (:func:`order_graph`)


def order_graph(view: GraphView, io: str = "internal", alignment: int = 64, inplace: bool = False) -> OrderGraph:
    """:func:`build_order_graph`, kept on the view for graphs of at most :data:`KEPT_NODES` nodes (the
    order search and :mod:`onnxmem.scheduling.anyorder` ask for the same one); larger ones: built anew."""
    if len(view.ops) > KEPT_NODES:
        return build_order_graph(view, io, alignment, inplace)
    return view.memo(("order_graph", io, alignment, inplace), lambda: build_order_graph(view, io, alignment, inplace))


def build_order_graph(view: GraphView, io: str = "internal", alignment: int = 64,
                      inplace: bool = False) -> OrderGraph:
    """Compact ``view`` for search under the liveness rules of ``io`` and
    ``alignment``, and with ``inplace`` the sharing rules (module doc)."""
    out_set = set(view.outputs)
    source, sharing = _sharing(view, io, inplace)
    tid, size, pinned, members = _classes(view, io, alignment, source)
    # whether a class may be written over: asked only of the classes an in-place node reads
    writable = functools.cache(lambda k: group_writable(view, members[k], out_set))
    real, free, at = _memory_ops(view)
    n = len(real)
    producer = [-1] * len(size)
    outs, reads, preds, ip = Rows(), Rows(), Rows(), Rows()
    disc = [0] * n
    # each row appended straight to its flat arrays (Rows.append, inlined: one row per node)
    o_data, o_start, r_data, r_start = outs.data, outs.start, reads.data, reads.start
    i_data, i_start = ip.data, ip.start
    ops, predecessors = view.ops, view.all_predecessors()
    for v, gi in enumerate(real):
        op = ops[gi]
        row: list[int] = []
        for o in op.outputs:
            k = tid.get(o)
            if k is not None and o not in source and k not in row:
                producer[k] = v
                row.append(k)
        o_data.extend(row)
        o_start.append(len(o_data))
        row = []
        for r in op.reads:
            k = tid.get(r)
            if k is not None and k not in row:
                row.append(k)
        r_data.extend(row)
        r_start.append(len(r_data))
        found = sharing.get(gi)
        if found is not None and found[0].kind == INPLACE:
            over = _overwritable_classes(view, op, found, tid, writable)
            if over:
                disc[v] = size[tid[op.outputs[0]]]
                i_data.extend(over)
        i_start.append(len(i_data))
        preds.append([at[p] for p in predecessors[gi]])
    del tid, at, sharing, writable
    consumers, succs = transpose(reads, len(size)), transpose(preds, n)
    base = 0
    first_extra = 0
    for k in range(len(size)):
        if producer[k] == -1:
            if consumers[k] or pinned[k]:
                base += size[k]
            else:
                first_extra += size[k]
    return OrderGraph(view, io, alignment, real, free, preds, succs, size, producer, consumers,
                      pinned, outs, reads, base, first_extra, ip, disc, inplace)


def _sharing(view: GraphView, io: str, inplace: bool) -> tuple[dict[str, str], dict[int, tuple[AliasRule, tuple[str, ...]]]]:
    """``(view output -> its source, node -> its alias rule and sources)``; empty without ``inplace``."""
    source: dict[str, str] = {}
    sharing: dict[int, tuple[AliasRule, tuple[str, ...]]] = {}
    if inplace:
        for op, found in zip(view.ops, every_alias_source(view, io)):
            if found is not None:
                sharing[op.index] = found
                if found[0].kind == VIEW:
                    source[op.outputs[0]] = found[1][0]
    return source, sharing


def _classes(view: GraphView, io: str, alignment: int,
             source: Mapping[str, str]) -> tuple[dict[str, int], list[int], list[bool], list[list[str]]]:
    """The tensor classes: a view's output joins its source's class (the same bytes under
    any order). ``(tensor -> class, aligned size, pinned (holds a graph output), members)``."""
    out_set = set(view.outputs)
    resolved: dict[str, str] = {}

    def root(name: str) -> str:
        if name not in source:  # most tensors are no view's output: their own root
            return resolved.get(name, name)
        path = [name]
        seen = {name}
        while name in source and name not in resolved and source[name] not in seen:
            name = source[name]  # a cycle is reported by the topological check
            path.append(name)
            seen.add(name)
        end = resolved.get(name, name)
        for p in path:
            resolved[p] = end
        return end

    tid: dict[str, int] = {}
    size: list[int] = []
    pinned: list[bool] = []
    members: list[list[str]] = []
    for t in arena_tensors(view, io):
        r = root(t.name)
        if r not in tid:
            tid[r] = len(size)
            size.append(align_up(view.tensors[r].size, alignment))
            pinned.append(False)
            members.append([])
        k = tid[r]
        tid[t.name] = k
        pinned[k] = pinned[k] or t.name in out_set
        members[k].append(t.name)
    return tid, size, pinned, members


def _memory_ops(view: GraphView) -> tuple[list[int], list[int], list[int]]:
    """``(nodes that touch an activation, nodes that touch only weights, node -> its local
    index)``: the last a list by node index (-1 for a node that touches only weights)."""
    real: list[int] = []
    free: list[int] = []
    at = [-1] * len(view.ops)
    # the names of the values that are no weight (no value is named "": an omitted output is no tensor)
    memory = {name for name, t in view.tensors.items() if t.kind != "weight"}.isdisjoint
    for op in view.ops:
        if memory(op.reads) and memory(op.outputs):
            free.append(op.index)
        else:
            at[op.index] = len(real)
            real.append(op.index)
    return real, free, at


def _overwritable_classes(view: GraphView, op: Op, found: tuple[AliasRule, tuple[str, ...]],
                          tid: Mapping[str, int], writable: Callable[[int], bool]) -> list[int]:
    """The classes an in-place node may write its output over (when one dies at its step)."""
    rule, sources = found
    over: list[int] = []
    for src in sources:
        k = tid[src]
        if k in over or not writable(k):
            continue
        ranges = {x: (0, view.tensors[x].size) for x in op.inputs if x in tid and tid[x] == k}
        if overwritable(op, rule, src, ranges):
            over.append(k)
    return over


class RanBefore:
    """``ran[v]`` for pieces cut in sequence: node ``v`` is in an earlier part.

    ``last[t]`` (optional): the latest part that reads tensor ``t``, so that
    whether every reader of ``t`` ran before part ``k`` or is in it is one
    lookup instead of a scan over the readers.
    """

    __slots__ = ("part", "k", "last")

    def __init__(self, part: Sequence[int], k: int, last: Sequence[int] | None = None) -> None:
        self.part, self.k, self.last = part, k, last

    def __getitem__(self, v: int) -> bool:
        return self.part[v] < self.k

    def __len__(self) -> int:
        return len(self.part)


@dataclass(slots=True)
class Piece:
    """A convex set of nodes of an :class:`OrderGraph`, evaluated on its own.

    Local node ``i`` is ``nodes[i]``. Memory is relative to what is resident
    when the piece starts: a tensor from outside that only this piece reads
    is freed inside it (``R`` goes below zero); one that others read later
    stays, and costs nothing here. ``alloc[i]``: bytes allocated at the step;
    ``keep[i]``: of those, bytes still resident after it; ``frees[i]``:
    ``(tensor slot, size)`` of the tensors it may free, each freed when its
    remaining-reader count ``rem0[slot]`` reaches zero. ``ip[i]``: slots
    node ``i`` may write its output over when one dies at its step, saving
    ``disc[i]`` bytes there (:meth:`step`).
    """

    graph: OrderGraph
    nodes: list[int]
    preds: Sequence[Sequence[int]]  # the graph's own rows for the whole graph (read only)
    succs: Sequence[Sequence[int]]
    alloc: list[int]
    keep: list[int]
    frees: list[Sequence[tuple[int, int]]]
    rem0: list[int]
    ext_bytes: int
    held: list[int]  # bytes of the node's reads produced inside the piece
    ext_read: list[int]  # bytes of the node's reads that are freeable outside tensors
    slot_prod: list[int]  # producer of each tensor slot (local node; -1: from outside)
    ip: list[Sequence[int]]  # slots the node may overwrite in place
    disc: list[int]  # bytes an in-place write saves at the node's step
    first_extra: int = 0  # bytes live in the piece's first step only

    @property
    def n(self) -> int:
        return len(self.nodes)

    @staticmethod
    def of(graph: OrderGraph, nodes: Iterable[int], ran: Sequence[bool] | RanBefore | None = None) -> "Piece":
        """The piece of ``nodes``; ``ran[v]`` says node ``v`` outside it runs before it
        (a tensor whose other readers all ran is freed here)."""
        nodes = sorted(nodes)
        loc = {g: i for i, g in enumerate(nodes)}
        whole = len(loc) == len(nodes) == graph.n
        preds: Sequence[Sequence[int]]
        succs: Sequence[Sequence[int]]
        if whole:  # the whole graph: its rows as they are (read only)
            preds, succs = graph.preds, graph.succs
        else:
            preds = [[loc[p] for p in graph.preds[g] if p in loc] for g in nodes]
            succs = [[loc[s] for s in graph.succs[g] if s in loc] for g in nodes]
        slot: dict[int, int] = {}
        slot_prod: list[int] = []
        rem0: list[int] = []
        alloc: list[int] = []
        keep: list[int] = []
        frees: list[Sequence[tuple[int, int]]] = []
        ext = 0
        held: list[int] = []
        ext_read: list[int] = []
        ip: list[Sequence[int]] = []
        disc: list[int] = []
        last = ran.last if isinstance(ran, RanBefore) else None
        kept: dict[int, bool] = {}  # tensor -> a reader outside the piece runs after it

        def read_later(t: int) -> bool:
            if last is not None:
                return last[t] > ran.k  # type: ignore[union-attr]
            found = kept.get(t)
            if found is None:
                found = kept[t] = any(c not in loc and not (ran is not None and ran[c]) for c in graph.consumers[t])
            return found

        # the graph's rows read as slices of their flat arrays, its lists held in locals: this
        # loop runs once per node of every piece the search evaluates
        size, producer, pinned, disc_of = graph.size, graph.producer, graph.pinned, graph.disc
        c_data, c_start, o_data, o_start = graph.consumers.data, graph.consumers.start, graph.outs.data, graph.outs.start
        r_data, r_start, i_data, i_start = graph.reads.data, graph.reads.start, graph.ip.data, graph.ip.start
        for g in nodes:
            a = k = 0
            for t in o_data[o_start[g]:o_start[g + 1]]:
                a += size[t]
                if c_start[t + 1] > c_start[t] or pinned[t]:
                    k += size[t]
            alloc.append(a)
            keep.append(k)
            fr: list[tuple[int, int]] = []
            h = e = 0
            for t in r_data[r_start[g]:r_start[g + 1]]:
                inside = producer[t] in loc
                if inside:
                    h += size[t]
                if pinned[t] or (not whole and read_later(t)):  # the whole graph: every reader is in it
                    continue
                if t not in slot:
                    slot[t] = len(rem0)
                    lo, hi = c_start[t], c_start[t + 1]
                    rem0.append(hi - lo if whole else sum(1 for c in c_data[lo:hi] if c in loc))
                    slot_prod.append(loc.get(producer[t], -1))
                    if not inside:
                        ext += size[t]
                if not inside:
                    e += size[t]
                fr.append((slot[t], size[t]))
            frees.append(fr or ())  # empty rows share one tuple
            held.append(h)
            ext_read.append(e)
            over = [slot[t] for t in i_data[i_start[g]:i_start[g + 1]] if t in slot]  # classes that can die here
            ip.append(over or ())
            disc.append(disc_of[g] if over else 0)
        return Piece(graph, nodes, preds, succs, alloc, keep, frees, rem0, ext, held, ext_read, slot_prod,
                     ip, disc)

    def step(self, v: int, rem: Sequence[int]) -> int:
        """Bytes node ``v`` allocates at its step, given remaining-reader counts ``rem``:
        ``alloc[v]``, less ``disc[v]`` when a class it may overwrite dies there."""
        d = self.disc[v]
        if d:
            for s in self.ip[v]:
                if rem[s] == 1:
                    return self.alloc[v] - d
        return self.alloc[v]

    def set_step(self, slot_cons: Sequence[int]) -> Callable[[int, int], int]:
        """:meth:`step` for searches over sets of run nodes: ``f(v, mask)`` with
        ``mask`` the nodes run before ``v`` and ``slot_cons[s]`` the readers
        of slot ``s`` in the piece, as bitmasks."""
        alloc, disc, ip = self.alloc, self.disc, self.ip

        def step(v: int, mask: int) -> int:
            if disc[v]:
                rest = ~(mask | (1 << v))
                for s in ip[v]:
                    if not (slot_cons[s] & rest):
                        return alloc[v] - disc[v]
            return alloc[v]

        return step

    def node_bound(self, v: int) -> int:
        """A lower bound on the (relative) bytes live while ``v`` runs, in any order."""
        return self.alloc[v] - self.disc[v] + self.held[v] - self.ext_bytes + self.ext_read[v]

    def bound(self) -> int:
        """A lower bound on the peak of any order of the piece."""
        return max((self.node_bound(v) for v in range(self.n)), default=0)


class Trace(Protocol):
    """Where :func:`simulate` puts each step: a list, or anything with its ``append``."""

    def append(self, step: tuple[int, int], /) -> None: ...


def simulate(piece: Piece, order: Sequence[int], trace: Trace | None = None) -> tuple[int, int]:
    """``(peak, residual)`` of running ``order`` (local nodes), relative to the start.

    ``trace``: when given, gets ``(bytes while the step runs, bytes resident
    before it)`` for each step, in order.
    """
    rem = list(piece.rem0)
    r = 0
    peak = -(1 << 62)
    alloc, keep, frees, disc = piece.alloc, piece.keep, piece.frees, piece.disc
    first = True
    for v in order:
        m = r + (piece.step(v, rem) if disc[v] else alloc[v])
        if first:
            m += piece.first_extra
            first = False
        if m > peak:
            peak = m
        if trace is not None:
            trace.append((m, r))
        r += keep[v]
        for s, size in frees[v]:
            rem[s] -= 1
            if rem[s] == 0:
                r -= size
    if not order:
        peak = 0
    return peak, r


def topological(piece: "Piece") -> list[int]:
    """The piece's local nodes in a topological order, lowest index first
    (:func:`onnxmem.core.toposort.stable_order`: the numbering itself where it is one)."""
    return stable_order(piece.succs)


@dataclass(slots=True)
class Cuts:
    """The graph's nodes cut at forced nodes: ``segs`` in execution order,
    ``seg_of[v]`` the part of node ``v``, ``root`` the piece of the whole
    graph. :meth:`piece` builds one part as a :class:`Piece` on demand."""

    graph: OrderGraph
    root: Piece
    segs: list[list[int]]
    seg_of: list[int]
    last: list[int]  # tensor -> the latest part that reads it (-1: none)

    @staticmethod
    def of(graph: OrderGraph) -> "Cuts":
        root = graph.root()
        segs = forced_segments(root)
        seg_of = [0] * graph.n
        for i, seg in enumerate(segs):
            for v in seg:
                seg_of[v] = i
        return Cuts(graph, root, segs, seg_of, row_max(graph.consumers, seg_of))

    def piece(self, i: int) -> Piece:
        """Part ``i`` in the context of the parts before it (the first one
        charged with the unread inputs when no weight-only node runs before it).
        A graph that does not cut is its root piece."""
        if len(self.segs) == 1:
            return self.root
        piece = Piece.of(self.graph, self.segs[i], RanBefore(self.seg_of, i, self.last))
        if i == 0 and not self.graph.free:
            piece.first_extra = self.graph.first_extra
        return piece


def segment_pieces(graph: OrderGraph) -> tuple[list[list[int]], list[Piece]]:
    """The graph's nodes cut at forced nodes, and each part as a :class:`Piece`
    in the context of the parts before it (:class:`Cuts`)."""
    cuts = Cuts.of(graph)
    return cuts.segs, [cuts.piece(i) for i in range(len(cuts.segs))]
