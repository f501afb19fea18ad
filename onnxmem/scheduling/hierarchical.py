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

1. order the graph with ``hierarchical`` and with ``greedy``; when a part
   between forced nodes is small enough, search it with ``exact`` and keep
   that result when it is better;
2. compute each candidate's peak exactly as liveness does, and return the
   lowest; if none is strictly below the file order's peak, return the file
   order itself. ``auto`` is never worse than ``file``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from ..graph import GraphView
from . import OrderOptions, register, stable_topological_order
from .cost import OrderGraph, Piece, RanBefore, build_order_graph, order_peak, simulate
from .exact import exact_piece, forced_segments
from .heuristics import greedy_piece

__all__ = ["AUTO_TIMEOUT", "LEAF", "auto_order", "hierarchical_local"]

#: largest part ``hierarchical`` hands to ``exact``
LEAF = 40
#: default seconds for ``--order auto`` and ``--order hierarchical``
AUTO_TIMEOUT = 2.0
#: largest part ``auto`` searches exactly
AUTO_EXACT = 400


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


class _Clock:
    def __init__(self, budget: float) -> None:
        self.end = time.perf_counter() + budget

    def left(self) -> float:
        return self.end - time.perf_counter()


def _order_nodes(
    graph: OrderGraph, nodes: list[int], clock: _Clock, ran: list[bool], first_extra: int = 0
) -> list[int]:
    """Graph-local nodes ``nodes`` (convex) in the hierarchical order.

    ``ran[v]``: node ``v`` runs before ``nodes``; parts are marked as they are
    placed, and the caller marks ``nodes``.
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
        res = exact_piece(target, time.perf_counter() + min(clock.left(), 0.5), upper=upper)
        return [piece.nodes[v] for v in res.order]
    local = greedy_piece(piece)
    if piece.n <= LEAF and clock.left() > 0:
        res = exact_piece(piece, time.perf_counter() + min(clock.left(), 0.5), upper=local)
        local = res.order
    return [piece.nodes[v] for v in local]


def hierarchical_local(graph: OrderGraph, timeout: float | None) -> list[int]:
    """A local order of every node of ``graph`` by the hierarchical rules."""
    clock = _Clock(AUTO_TIMEOUT if timeout is None else timeout)
    ran = [False] * graph.n
    return _order_nodes(graph, list(range(graph.n)), clock, ran, 0 if graph.free else graph.first_extra)


@register("hierarchical", "cut at single-path points and parallel branches, order parts exactly or greedily (HMCOS)")
def hierarchical_order(view: GraphView, options: OrderOptions) -> Sequence[int]:
    graph = build_order_graph(view, options.io, options.alignment)
    return graph.full_order(hierarchical_local(graph, options.timeout))


def _improve_segments(graph: OrderGraph, local: list[int], clock: _Clock) -> list[int]:
    """Search each part between forced nodes exactly, smallest first, while time is left."""
    root = graph.root()
    segs = forced_segments(root)
    pos = {v: i for i, v in enumerate(local)}
    seg_of = [0] * graph.n
    for i, seg in enumerate(segs):
        for v in seg:
            seg_of[v] = i
    todo = sorted((i for i, s in enumerate(segs) if 1 < len(s) <= AUTO_EXACT), key=lambda i: len(segs[i]))
    orders = [sorted(s, key=pos.__getitem__) for s in segs]
    for k, i in enumerate(todo):
        if clock.left() <= 0:
            break
        piece = Piece.of(graph, segs[i], RanBefore(seg_of, i))
        if i == 0 and not graph.free:
            piece.first_extra = graph.first_extra
        loc = {g: j for j, g in enumerate(piece.nodes)}
        current = [loc[g] for g in orders[i]]
        share = clock.left() / max(len(todo) - k, 1)
        res = exact_piece(piece, time.perf_counter() + share, upper=current)
        orders[i] = [piece.nodes[v] for v in res.order]
    return [v for o in orders for v in o]


def auto_order(view: GraphView, options: OrderOptions) -> tuple[int, ...]:
    """The lowest-peak order ``auto`` finds; see the module docstring."""
    budget = AUTO_TIMEOUT if options.timeout is None else options.timeout
    clock = _Clock(budget)
    file_order = stable_topological_order(view)
    graph = build_order_graph(view, options.io, options.alignment)
    if graph.n <= 1:
        return file_order
    candidates: list[list[int]] = []
    hier = hierarchical_local(graph, budget * 0.3)
    candidates.append(hier)
    candidates.append(greedy_piece(graph.root()))
    best = min(candidates, key=graph.peak)
    if clock.left() > 0:
        best = _improve_segments(graph, best, clock)
    chosen = graph.full_order(best)
    peak_file = order_peak(view, file_order, options.io, options.alignment)
    peak_new = order_peak(view, chosen, options.io, options.alignment)
    return chosen if peak_new < peak_file else file_order


@register("auto", "exact where the search fits the time budget, hierarchical otherwise; never above the file order")
def _auto(view: GraphView, options: OrderOptions) -> Sequence[int]:
    return auto_order(view, options)
