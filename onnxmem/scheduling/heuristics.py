"""Fast orders: a memory-aware list scheduler and memonger's longest-path traversal.

``greedy`` (list scheduling with lookahead), on a :class:`~.cost.Piece`:

1. keep the set of ready nodes (every producer they depend on has run);
2. score each ready node by the peak so far if it ran next, then by the bytes
   it leaves resident (its kept outputs minus the inputs it reads last), then
   by file position;
3. for the best few, play the rule forward ``depth`` more steps and undo;
   run the node whose look-ahead reaches the lowest peak, then the lowest
   resident bytes;
4. repeat until every node has run. Two scoring rules are tried (peak first,
   freed bytes first) and the order with the lower peak is kept.

Cost: O(n * width * k * depth) for ``k`` candidates; no optimality guarantee.

``longest-path`` (caffe2 memonger's ``topological_sort_traversal_longest_path``):

1. join every sink to one virtual target;
2. from each source follow the successor with the longest path to the
   target; these paths form a tree rooted at the target, sources as leaves;
3. list the leaves depth-first, children by ascending height;
4. return the reverse post-order of a depth-first search started from the
   sources in that list (the source with the longest path comes first).

It shortens live ranges of long chains; it does not look at sizes.
"""

from __future__ import annotations

from typing import Sequence

from ..graph import GraphView
from . import OrderOptions, register
from .cost import Piece, build_order_graph, simulate

__all__ = ["greedy_order", "longest_path_order"]

NEG = -(1 << 62)


class _Sim:
    """The state of a partial order of a piece, with apply and undo."""

    __slots__ = ("p", "rem", "indeg", "ready", "r", "peak", "first")

    def __init__(self, piece: Piece) -> None:
        self.p = piece
        self.rem = list(piece.rem0)
        self.indeg = [len(x) for x in piece.preds]
        self.ready = [v for v in range(piece.n) if not self.indeg[v]]
        self.r = 0
        self.peak = NEG
        self.first = True

    def mem(self, v: int) -> int:
        m = self.r + self.p.alloc[v]
        return m + self.p.first_extra if self.first else m

    def delta(self, v: int) -> int:
        d = self.p.keep[v]
        rem = self.rem
        for s, size in self.p.frees[v]:
            if rem[s] == 1:
                d -= size
        return d

    def apply(self, v: int) -> tuple[int, bool]:
        p = self.p
        undo = (self.peak, self.first)
        m = self.mem(v)
        if m > self.peak:
            self.peak = m
        self.first = False
        r = self.r + p.keep[v]
        rem = self.rem
        for s, size in p.frees[v]:
            rem[s] -= 1
            if rem[s] == 0:
                r -= size
        self.r = r
        self.ready.remove(v)
        indeg = self.indeg
        for s in p.succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                self.ready.append(s)
        return undo

    def undo(self, v: int, undo: tuple[int, bool]) -> None:
        p = self.p
        indeg = self.indeg
        for s in p.succs[v]:
            if indeg[s] == 0:
                self.ready.remove(s)
            indeg[s] += 1
        rem = self.rem
        r = self.r
        for s, size in p.frees[v]:
            if rem[s] == 0:
                r += size
            rem[s] += 1
        self.r = r - p.keep[v]
        self.ready.append(v)
        self.peak, self.first = undo

    def key(self, v: int, rule: int) -> tuple[int, int, int]:
        m = self.mem(v)
        if rule == 0:
            return (max(m, self.peak), self.delta(v), v)
        return (self.delta(v), max(m, self.peak), v)


def _pick(sim: _Sim, rule: int) -> int:
    ready = sim.ready
    if len(ready) == 1:
        return ready[0]
    return min(ready, key=lambda v: sim.key(v, rule))


def greedy_piece(piece: Piece, *, depth: int = 2, width: int = 4, rules: Sequence[int] = (0, 1)) -> list[int]:
    """The best of the greedy list schedules of ``piece`` under ``rules``."""
    best: list[int] | None = None
    best_peak = 0
    for rule in rules:
        order = _greedy_run(piece, rule, depth, width)
        peak, _ = simulate(piece, order)
        if best is None or peak < best_peak:
            best, best_peak = order, peak
    return best or []


def _greedy_run(piece: Piece, rule: int, depth: int, width: int) -> list[int]:
    sim = _Sim(piece)
    order: list[int] = []
    while sim.ready:
        ready = sim.ready
        if len(ready) == 1 or depth <= 0:
            v = _pick(sim, rule)
        else:
            cands = sorted(ready, key=lambda u: sim.key(u, rule))[:width]
            best_score: tuple[int, int, int] | None = None
            v = cands[0]
            for c in cands:
                trail = [(c, sim.apply(c))]
                for _ in range(depth):
                    if not sim.ready:
                        break
                    u = _pick(sim, rule)
                    trail.append((u, sim.apply(u)))
                score = (sim.peak, sim.r, c)
                for u, und in reversed(trail):
                    sim.undo(u, und)
                if best_score is None or score < best_score:
                    best_score, v = score, c
        sim.apply(v)
        order.append(v)
    return order


def greedy_order(view: GraphView, options: OrderOptions) -> list[int]:
    graph = build_order_graph(view, options.io, options.alignment)
    return list(graph.full_order(greedy_piece(graph.root())))


def longest_path_local(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]]) -> list[int]:
    """Memonger's longest-path traversal of a DAG given by local adjacency lists."""
    n = len(preds)
    if n == 0:
        return []
    # topological order (Kahn, by index) to compute heights bottom-up
    indeg = [len(p) for p in preds]
    stack = [v for v in range(n) if not indeg[v]]
    stack.reverse()
    topo: list[int] = []
    while stack:
        v = stack.pop()
        topo.append(v)
        for s in reversed(succs[v]):
            indeg[s] -= 1
            if not indeg[s]:
                stack.append(s)
    sinks = [v for v in range(n) if not succs[v]]
    virtual = len(sinks) > 1
    # longest distance to the (virtual) target and the successor on that path
    dist = [0] * n
    nxt = [-1] * n
    for v in reversed(topo):
        if not succs[v]:
            dist[v] = 1 if virtual else 0
            continue
        best = -1
        for s in succs[v]:
            if dist[s] > best:
                best, nxt[v] = dist[s], s
        dist[v] = best + 1
    root = -2 if virtual else sinks[0]
    # the tree of the sources' longest paths: parent = next node on the path
    children: dict[int, list[int]] = {}
    sources = [v for v in range(n) if not preds[v]]
    in_tree: set[int] = set()
    for src in sources:
        v = src
        while v not in in_tree and v != root:
            in_tree.add(v)
            parent = nxt[v] if nxt[v] != -1 else -2
            children.setdefault(parent, []).append(v)
            v = parent
    height: dict[int, int] = {}
    post: list[int] = []
    stack2 = [(root, False)]
    while stack2:
        v, done = stack2.pop()
        if done:
            post.append(v)
            continue
        stack2.append((v, True))
        for c in children.get(v, ()):
            stack2.append((c, False))
    for v in post:
        height[v] = max((height[c] + 1 for c in children.get(v, ())), default=0)
    leaves: list[int] = []
    stack3 = [root]
    while stack3:
        v = stack3.pop()
        kids = children.get(v)
        if not kids:
            leaves.append(v)
            continue
        ordered = sorted(kids, key=lambda c: height[c])  # stable: ascending height
        stack3.extend(reversed(ordered))
    sorted_sources = [v for v in leaves if v >= 0 and not preds[v]]
    # networkx 1.x topological_sort(g, nbunch): DFS post-order, reversed
    explored = [False] * n
    order: list[int] = []
    for v in sorted_sources:
        if explored[v]:
            continue
        fringe = [v]
        while fringe:
            w = fringe[-1]
            if explored[w]:
                fringe.pop()
                continue
            new = [s for s in succs[w] if not explored[s]]
            if new:
                fringe.extend(new)
            else:
                explored[w] = True
                order.append(w)
                fringe.pop()
    order.reverse()
    return order


@register("greedy", "list scheduler: the ready node that keeps the peak and live bytes lowest, with lookahead")
def _greedy(view: GraphView, options: OrderOptions) -> Sequence[int]:
    return greedy_order(view, options)


@register("longest-path", "caffe2 memonger's traversal: sources with the longest path to the end first")
def longest_path_order(view: GraphView, options: OrderOptions) -> Sequence[int]:
    graph = build_order_graph(view, options.io, options.alignment)
    return graph.full_order(longest_path_local(graph.preds, graph.succs))
