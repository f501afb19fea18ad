"""``hierarchical`` and ``auto``: divide the graph, order each part, join them.

``hierarchical`` (after HMCOS), on a set of nodes:

1. cut at forced nodes (every other node is an ancestor or a descendant: all
   paths pass through them); the parts between cuts are independent, and
   are ordered one after the other;
2. a part that does not cut further is split into its weakly connected
   components (parallel branches between two cuts); each is ordered
   recursively; the branches run one after another, the one with the
   largest ``peak - residual`` first (Liu's rule, optimal for running whole
   branches in sequence), and then the best interleaving of the branches'
   orders is searched (``exact`` with each branch kept in its order; the
   whole part when it has at most ``LEAF`` nodes);
3. a part that splits neither way is ordered by ``exact`` when it has at
   most ``LEAF`` nodes and time is left, otherwise by ``greedy``.

Cost: near-linear in the graph plus the leaves' searches. Cuts lose nothing;
running branches whole can, so this is a heuristic.

``auto`` (the default), within ``options.timeout`` (default 2 s):

1. cut the graph at forced nodes; simulate the file order part by part and
   take, per part, a lower bound on any order's peak (the largest single
   step: a node's outputs and the inputs it reads), highest file-order peak
   first and no further once the bound reaches the next peak. When the file
   order's peak equals the largest bound, the file order is optimal and is
   returned at once (linear time; most feed-forward models end here, and a
   deep network of alike layers bounds one of them);
2. each part whose peak is above that bound, highest first, is ordered by
   ``greedy`` (and, above ``LEAF`` nodes, ``hierarchical``) within a share of
   30% of the budget; identical parts (same sizes and wiring) are ordered once, and
   the greedy pass that ``hierarchical`` runs on a part that is one piece is the one
   ``greedy`` ran (:class:`_GreedyRuns`: the same order and the same work counted);
3. the rest of the budget goes to ``exact`` on the part that sets the peak
   (in slices when other parts could still lower it); a part proven optimal
   raises the bound, and parts at or below the bound are left alone; it
   stops when the part that sets the peak is proven, does not improve in
   its slice, or has more than ``AUTO_EXACT`` nodes;
4. the result is returned only if its peak is strictly below the file
   order's; otherwise the file order. ``auto`` is never worse than ``file``.

With ``options.inplace`` every peak above is the one with views and
in-place outputs counted (:mod:`.cost`), and step 4 compares the two orders
by the exact bound of the plan, :func:`.cost.order_peak` with
``inplace=True`` (Concat placements included); the time that takes for the
file order is kept back from the budget for the chosen one.

Every stage reads the clock: the greedy pass stops looking ahead at its
deadline, and the compiled search checks the cycle counter every 64 sets
it expands, so ``auto`` ends within a few percent of its budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from onnxmem.core.workclock import UNITS_PER_SECOND, charge, is_wall_clock, now
from onnxmem.graph import GraphView
from onnxmem.scheduling.cost import (
    Cuts,
    OrderGraph,
    Piece,
    RanBefore,
    build_order_graph,
    order_graph,
    order_peak,
    simulate,
)
from onnxmem.scheduling.exact import exact_piece, forced_segments
from onnxmem.scheduling.heuristics import greedy_piece
from onnxmem.scheduling.registry import OrderOptions, register, stable_topological_order

__all__ = ["AUTO_TIMEOUT", "LEAF", "auto_order", "hierarchical_local"]

#: largest part ``hierarchical`` hands to ``exact``
LEAF = 40
#: default seconds for ``--order auto`` and ``--order hierarchical``
AUTO_TIMEOUT = 2.0
#: largest part ``auto`` searches exactly
AUTO_EXACT = 400
#: work units (:mod:`onnxmem.core.workclock`) per node of an exact peak evaluation
PEAK_COST = 20.0


def _components(piece: Piece) -> list[list[int]]:
    parent = list(range(piece.n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for v in range(piece.n):
        for p in piece.preds[v]:
            a, b = find(v), find(p)
            if a != b:
                parent[a] = b
    comps: dict[int, list[int]] = {}
    for v in range(piece.n):
        comps.setdefault(find(v), []).append(v)
    return list(comps.values())


def _chained(piece: Piece, chains: list[list[int]]) -> Piece:
    """``piece`` with each chain's nodes forced to run in the chain's order."""
    preds = [list(p) for p in piece.preds]
    succs = [list(x) for x in piece.succs]
    for chain in chains:
        for a, b in zip(chain, chain[1:]):
            if a not in preds[b]:
                preds[b].append(a)
                succs[a].append(b)
    return replace(piece, preds=preds, succs=succs)


class _GreedyRuns:
    """The greedy passes of one part's heuristics (:func:`_heuristic_part`), each kept for an
    identical piece (every field of it the pass reads) when no deadline touched it: it ended
    before its deadline, so every reading of the clock in it was too, and it gave the order it
    gives without one. On the same piece, a pass that would end before its own deadline as well
    (the same work counted from now) gives that order again: it is returned and its work
    charged, so the clock reads what it would have after the pass, and every later decision is
    the same. Under the wall clock every pass runs."""

    def __init__(self) -> None:
        self.done: dict[tuple[object, ...], tuple[tuple[int, ...], int]] = {}

    def order(self, piece: Piece, deadline: float) -> list[int]:
        """:func:`greedy_piece` of ``piece`` within ``deadline``."""
        if is_wall_clock():
            return greedy_piece(piece, deadline=deadline)
        key = _piece_key(piece)
        start = now()
        found = self.done.get(key)
        if found is not None and start + found[1] / UNITS_PER_SECOND < deadline:
            charge(found[1])
            return list(found[0])
        order = greedy_piece(piece, deadline=deadline)
        end = now()
        if end < deadline:  # readings are exact binary fractions of units (UNITS_PER_SECOND)
            self.done[key] = (tuple(order), round((end - start) * UNITS_PER_SECOND))
        return order


def _piece_key(piece: Piece) -> tuple[object, ...]:
    """Every field of ``piece`` a greedy pass reads (all of them: its graph by identity)."""
    rows = (piece.preds, piece.succs, piece.frees, piece.ip)
    return (id(piece.graph), tuple(piece.nodes), *(tuple(tuple(r) for r in f) for f in rows), tuple(piece.alloc),
            tuple(piece.keep), tuple(piece.rem0), piece.ext_bytes, tuple(piece.held), tuple(piece.ext_read),
            tuple(piece.slot_prod), tuple(piece.disc), piece.first_extra)


class _Clock:
    def __init__(self, budget: float) -> None:
        self.end = now() + budget

    def left(self) -> float:
        return self.end - now()


def _order_nodes(
    graph: OrderGraph, nodes: list[int], clock: _Clock, ran: list[bool], first_extra: int = 0,
    runs: _GreedyRuns | None = None,
) -> list[int]:
    """Graph-local nodes ``nodes`` (convex) in the hierarchical order.

    ``ran[v]``: node ``v`` runs before ``nodes``; parts are marked as they are
    placed, and the caller marks ``nodes``. ``runs``: greedy passes already made on
    these nodes (the whole of them: the parts below are other pieces).
    """
    if len(nodes) <= 1:
        return list(nodes)
    piece = Piece.of(graph, nodes, ran)
    piece.first_extra = first_extra
    segs = forced_segments(piece)
    if len(segs) > 1:
        out: list[int] = []
        for k, seg in enumerate(segs):
            part = [piece.nodes[v] for v in seg]
            out.extend(_order_nodes(graph, part, clock, ran, first_extra if k == 0 else 0))
            for g in part:
                ran[g] = True
        return out
    comps = _components(piece)
    if len(comps) > 1:
        parts: list[tuple[int, list[int]]] = []
        for comp in comps:
            part = [piece.nodes[v] for v in comp]
            sub = _order_nodes(graph, part, clock, ran)
            for g in part:
                ran[g] = False
            sp = Piece.of(graph, sub, ran)
            loc = {g: i for i, g in enumerate(sp.nodes)}
            peak, residual = simulate(sp, [loc[g] for g in sub])
            parts.append((peak - residual, sub))
        parts.sort(key=lambda x: -x[0])
        joined = [g for _, sub in parts for g in sub]
        if clock.left() <= 0:
            return joined
        # interleave the branches: search the piece with each branch kept in its order
        loc = {g: i for i, g in enumerate(piece.nodes)}
        upper = [loc[g] for g in joined]
        target = piece if piece.n <= LEAF else _chained(piece, [[loc[g] for g in sub] for _, sub in parts])
        res = exact_piece(target, now() + min(clock.left(), 0.5), upper=upper)
        return [piece.nodes[v] for v in res.order]
    local = runs.order(piece, clock.end) if runs is not None else greedy_piece(piece, deadline=clock.end)
    if piece.n <= LEAF and clock.left() > 0:
        res = exact_piece(piece, now() + min(clock.left(), 0.5), upper=local)
        local = res.order
    return [piece.nodes[v] for v in local]


def hierarchical_local(graph: OrderGraph, timeout: float | None) -> list[int]:
    """A local order of every node of ``graph`` by the hierarchical rules."""
    clock = _Clock(AUTO_TIMEOUT if timeout is None else timeout)
    ran = [False] * graph.n
    return _order_nodes(graph, list(range(graph.n)), clock, ran, 0 if graph.free else graph.first_extra)


@register("hierarchical", "cut at single-path points and parallel branches, order parts exactly or greedily (HMCOS)")
def hierarchical_order(view: GraphView, options: OrderOptions) -> Sequence[int]:
    graph = build_order_graph(view, options.io, options.alignment, options.inplace)
    return graph.full_order(hierarchical_local(graph, options.timeout))


def _signature(piece: Piece) -> tuple[object, ...]:
    """Everything the orders of ``piece`` and their relative peaks depend on."""
    return (
        tuple(piece.alloc), tuple(piece.keep), tuple(tuple(f) for f in piece.frees), tuple(piece.rem0),
        tuple(tuple(p) for p in piece.preds), piece.first_extra, tuple(tuple(x) for x in piece.ip),
        tuple(piece.disc),
    )


def _heuristic_part(
    graph: OrderGraph, piece: Piece, current: list[int], ran_before: RanBefore, clock: _Clock, share: float
) -> list[int]:
    """The best of the part's current order, greedy and (for large parts) hierarchical,
    within about ``share`` seconds."""
    end = min(now() + max(share, 0.0), clock.end)
    runs = _GreedyRuns()
    candidates = [current, runs.order(piece, end)]
    if piece.n > LEAF and now() < end:
        sub = _Clock((end - now()) * 0.5)
        loc = {g: i for i, g in enumerate(piece.nodes)}
        ran = [ran_before[v] for v in range(graph.n)]
        hier = _order_nodes(graph, list(piece.nodes), sub, ran, piece.first_extra, runs)
        candidates.append([loc[g] for g in hier])
    return min(candidates, key=lambda o: simulate(piece, o)[0])


def auto_order(view: GraphView, options: OrderOptions) -> tuple[int, ...]:
    """The lowest-peak order ``auto`` finds; see the module docstring."""
    budget = AUTO_TIMEOUT if options.timeout is None else options.timeout
    clock = _Clock(budget)
    file_order = stable_topological_order(view)
    graph = order_graph(view, options.io, options.alignment, options.inplace)
    if graph.n <= 1:
        return file_order
    local_of = {g: i for i, g in enumerate(graph.real)}
    file_local = [local_of[g] for g in file_order if g in local_of]
    cuts = Cuts.of(graph)
    parts = _Parts.of_file_order(graph, cuts, file_local)
    if parts.file_peak <= parts.lower:
        return file_order  # no order has a lower peak
    file_shared = 0
    if graph.inplace:
        # the file order's exact bound with every sharing rule (Concat placement too),
        # and as much time kept back to evaluate the chosen order the same way
        t0 = now()
        file_shared = order_peak(view, file_order, options.io, options.alignment, inplace=True)
        charge(len(file_order) * PEAK_COST)
        clock.end -= now() - t0
    # parts above the floor, highest first; a part proven optimal raises the floor
    work = sorted((i for i in range(len(cuts.segs)) if len(cuts.segs[i]) > 1 and parts.peaks[i] > parts.lower),
                  key=lambda i: -parts.peaks[i])
    parts.heuristics(graph, work, cuts.seg_of, clock)
    parts.exact(work, cuts.segs, clock)
    for i, local in parts.locals_.items():
        parts.orders[i] = [parts.pieces[i].nodes[v] for v in local]
    best = [v for o in parts.orders for v in o]
    chosen = graph.full_order(best)
    if chosen == file_order:
        return file_order
    if graph.inplace:
        better = order_peak(view, chosen, options.io, options.alignment, inplace=True) < file_shared
    else:
        better = graph.peak(best) < graph.peak(file_local)
    return chosen if better else file_order


@dataclass
class _Parts:
    """The parts of :func:`auto_order` as the search goes: each part's order (global
    nodes), its peak in absolute bytes, its piece (parts of more than one node), the
    lower bound on the whole peak, and for the parts searched their local order, the
    bytes resident when they start, and whether their order is proven optimal."""

    orders: list[list[int]]
    peaks: list[int]
    pieces: dict[int, Piece]
    lower: int
    file_peak: int
    locals_: dict[int, list[int]] = field(default_factory=dict)
    starts: dict[int, int] = field(default_factory=dict)
    proven: set[int] = field(default_factory=set)

    @staticmethod
    def of_file_order(graph: OrderGraph, cuts: Cuts, file_local: list[int]) -> _Parts:
        """Each part in file order, its peak and a lower bound, in absolute bytes: one
        run of the whole file order gives every part's steps (parts run one after
        another); only parts of more than one node above the bound need a piece of
        their own (kept: a 100,000-node graph has thousands of parts).

        The parts of more than one node are bounded highest peak first, and none once
        the bound reaches its peak: a part's bound is at most its own file-order peak,
        so the parts left could not raise it, and they are never searched (a deep
        network whose file order is optimal builds the piece of one layer, not of
        each)."""
        pos = {v: k for k, v in enumerate(file_local)}
        steps = _PartSteps([len(seg) for seg in cuts.segs])
        simulate(cuts.root, file_local, steps)
        floor = graph.base + graph.first_extra if graph.free else 0
        orders: list[list[int]] = []
        peaks: list[int] = []
        lower = floor
        multi: list[int] = []
        for i, seg in enumerate(cuts.segs):
            orders.append(sorted(seg, key=pos.__getitem__))
            peak = graph.base + steps.most[i]
            peaks.append(peak)
            if len(seg) == 1:
                lower = max(lower, peak)
            else:
                multi.append(i)
        pieces: dict[int, Piece] = {}
        for i in sorted(multi, key=lambda i: (-peaks[i], i)):
            if peaks[i] <= lower:
                break  # this part and every one after it: at most the bound
            piece = cuts.piece(i)
            lower = max(lower, graph.base + steps.resident[i] + piece.bound())
            if peaks[i] > lower:
                pieces[i] = piece
        for i in [i for i in pieces if peaks[i] <= lower]:
            del pieces[i]
        return _Parts(orders, peaks, pieces, lower, max(floor, max(peaks)))

    def heuristics(self, graph: OrderGraph, work: list[int], seg_of: Sequence[int], clock: _Clock) -> None:
        """First pass: the fast heuristics on every part of ``work`` (identical parts once)."""
        cache: dict[tuple[object, ...], list[int]] = {}
        for k, i in enumerate(work):
            part = self.pieces[i]
            loc = {g: j for j, g in enumerate(part.nodes)}
            current = [loc[g] for g in self.orders[i]]
            self.starts[i] = self.peaks[i] - simulate(part, current)[0]
            if clock.left() <= 0:
                self.locals_[i] = current
                continue
            key = _signature(part)
            if key not in cache:
                share = clock.left() * 0.3 / (len(work) - k)
                cache[key] = _heuristic_part(graph, part, current, RanBefore(seg_of, i), clock, share)
            self.locals_[i] = cache[key]
            self.peaks[i] = self.starts[i] + simulate(part, self.locals_[i])[0]
            if self.peaks[i] <= self.starts[i] + part.bound():
                self.proven.add(i)
                self.lower = max(self.lower, self.peaks[i])

    def exact(self, work: list[int], segs: Sequence[Sequence[int]], clock: _Clock) -> None:
        """Then exact search, in time slices, on the part that sets the peak."""
        peaks, proven = self.peaks, self.proven
        while work and clock.left() > 0:
            top = max(work, key=lambda i: (peaks[i], -i))
            if top in proven or peaks[top] <= self.lower or len(segs[top]) > AUTO_EXACT:
                break
            part = self.pieces[top]
            others = [i for i in work if i != top and i not in proven and peaks[i] > self.lower]
            left = clock.left()
            res = exact_piece(part, now() + (left * 0.5 if others else left), upper=self.locals_[top])
            peak = self.starts[top] + res.peak
            improved = peak < peaks[top]
            if improved:
                self.locals_[top], peaks[top] = res.order, peak
            if res.proven:
                proven.add(top)
                self.lower = max(self.lower, peaks[top])
            elif not improved:
                break  # the part that sets the peak is stuck: nothing else can lower it


class _PartSteps:
    """:func:`~onnxmem.scheduling.cost.simulate`'s trace of a run of parts one after another,
    kept per part: ``most[i]``, the most bytes while a step of part ``i`` runs, and
    ``resident[i]``, the bytes resident before its first step (not a list of every step)."""

    __slots__ = ("lengths", "most", "resident", "left")

    def __init__(self, lengths: Sequence[int]) -> None:
        self.lengths = lengths
        self.most: list[int] = []
        self.resident: list[int] = []
        self.left = 0

    def append(self, step: tuple[int, int]) -> None:
        running, resident = step
        if self.left == 0:
            self.left = self.lengths[len(self.most)]
            self.most.append(running)
            self.resident.append(resident)
        elif running > self.most[-1]:
            self.most[-1] = running
        self.left -= 1


@register("auto", "file order when provably optimal, else greedy then exact on the part that sets the peak, in budget")
def _auto(view: GraphView, options: OrderOptions) -> Sequence[int]:
    return auto_order(view, options)
