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
   freed bytes first);
5. on pieces of at most ``BEAM_MAX`` nodes, also a beam search over the sets
   of nodes run (:func:`beam_piece`, ``BEAM_WIDTH`` sets per round, ranked by
   peak so far, then resident bytes per node run); the order with the lowest
   peak is kept. ``greedy`` cuts the graph at forced nodes first (lossless).

Cost: O(n * width * k * depth) for ``k`` candidates, plus O(n * BEAM_WIDTH *
ready * degree) for the beam; no optimality guarantee.

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

import itertools
import math
from typing import Sequence, cast

import numpy as np

from onnxmem.core.workclock import UNITS_PER_SECOND, charge, is_wall_clock, now, units_now
from onnxmem.graph import GraphView
from onnxmem.scheduling._searchdefs import CYCLE_STOP, NO_STOP, WORK_STOP
from onnxmem.scheduling.cost import Piece, build_order_graph, segment_pieces, simulate
from onnxmem.scheduling.registry import OrderOptions, register

__all__ = ["greedy_order", "longest_path_order"]

NEG = -(1 << 62)
#: beam width, and the largest piece the beam search runs on
BEAM_WIDTH = 16
BEAM_MAX = 400
#: work units (:mod:`onnxmem.core.workclock`) per node a list schedule places and
#: per state a beam layer keeps
STEP_COST = 20.0
#: work units of one node's key evaluated in a greedy pick (about 2 us of Python on an idle core)
KEY_COST = 2.0


class _Sim:
    """The state of a partial order of a piece, with apply and undo."""

    __slots__ = ("p", "rem", "indeg", "ready", "r", "peak", "first", "lazy", "lazy_left")

    def __init__(self, piece: Piece) -> None:
        self.p = piece
        self.rem = list(piece.rem0)
        self.indeg = [len(x) for x in piece.preds]
        self.ready = [v for v in range(piece.n) if not self.indeg[v]]
        self.r = 0
        self.peak = NEG
        self.first = True
        self.lazy = lazy_sources(piece)
        # per node: its predecessors that are lazy sources and have not run
        self.lazy_left = [sum(self.lazy[u] for u in piece.preds[v]) for v in range(piece.n)]

    def premature(self, v: int) -> bool:
        """Whether ``v`` is a lazy source none of whose successors waits on lazy sources alone."""
        indeg, left = self.indeg, self.lazy_left
        return self.lazy[v] and all(indeg[s] > left[s] for s in self.p.succs[v])

    def mem(self, v: int) -> int:
        p = self.p
        m = self.r + (p.step(v, self.rem) if p.disc[v] else p.alloc[v])
        return m + self.p.first_extra if self.first else m

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
            self.lazy_left[s] -= self.lazy[v]
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
            self.lazy_left[s] += self.lazy[v]
        rem = self.rem
        r = self.r
        for s, size in p.frees[v]:
            if rem[s] == 0:
                r += size
            rem[s] += 1
        self.r = r - p.keep[v]
        self.ready.append(v)
        self.peak, self.first = undo

    def keys(self, nodes: Sequence[int], rule: int) -> list[tuple[bool, int, int, int]]:
        """Each of ``nodes``' score (step 2 of the module docstring), lowest best: whether it is
        :meth:`premature`; with ``rule`` 0 the peak so far if it ran next (:meth:`mem`), then the
        bytes it leaves resident (its kept outputs less the inputs it reads last), with ``rule`` 1
        those two the other way round; then the node. The state is read once for all the nodes:
        a pick scores every ready node, and the look-ahead ``depth * width`` picks more
        (pnasnet5large_legacy's greedy orders score 240,430 nodes)."""
        p, rem, indeg, left, lazy = self.p, self.rem, self.indeg, self.lazy_left, self.lazy
        disc, alloc, keep, frees, succs = p.disc, p.alloc, p.keep, p.frees, p.succs
        r, peak, extra = self.r, self.peak, p.first_extra if self.first else 0
        out = []
        for v in nodes:
            m = r + (p.step(v, rem) if disc[v] else alloc[v]) + extra
            if m < peak:
                m = peak
            d = keep[v]
            for t, size in frees[v]:
                if rem[t] == 1:
                    d -= size
            late = lazy[v] and all(indeg[t] > left[t] for t in succs[v])
            out.append((late, m, d, v) if rule == 0 else (late, d, m, v))
        return out


def lazy_sources(piece: Piece) -> list[bool]:
    """Per node of ``piece``: whether it is a lazy source, a node with no predecessor in the
    piece that frees nothing and keeps bytes (a value computed from weights at run time,
    such as a weight's DequantizeLinear). Running one later, up to just before its first
    successor (the end of the piece when its readers are all after it), never raises the
    memory of any step, so the list scheduler runs it only when a successor waits on lazy
    sources alone, or when nothing else is ready."""
    return [not piece.preds[v] and not piece.frees[v] and piece.keep[v] > 0 for v in range(piece.n)]


def _pick(sim: _Sim, rule: int) -> int:
    ready = sim.ready
    if len(ready) == 1:
        return ready[0]
    return min(sim.keys(ready, rule))[3]


def greedy_piece(
    piece: Piece,
    *,
    depth: int = 2,
    width: int = 4,
    rules: Sequence[int] = (0, 1),
    deadline: float | None = None,
    beam: bool = True,
) -> list[int]:
    """The best of the greedy list schedules of ``piece`` under ``rules``.

    Past ``deadline`` (a ``workclock.now()`` value) the look-ahead stops and
    the remaining rules are skipped; the order is still complete.
    """
    best: list[int] | None = None
    best_peak = 0
    rows = None
    for rule in rules:
        if best is not None and deadline is not None and now() > deadline:
            break
        if rows is None and piece.n > 1:
            rows = piece_rows(piece)
        order = _greedy_run(piece, rule, depth, width, deadline, rows)
        peak, _ = simulate(piece, order)
        if best is None or peak < best_peak:
            best, best_peak = order, peak
    if beam and 1 < piece.n <= BEAM_MAX and (deadline is None or now() < deadline):
        order = beam_piece(piece, width=BEAM_WIDTH, deadline=deadline)
        peak, _ = simulate(piece, order)
        if best is None or peak < best_peak:
            best, best_peak = order, peak
    return best or []


def _greedy_run(piece: Piece, rule: int, depth: int, width: int, deadline: float | None = None,
                rows: PieceRows | None = None) -> list[int]:
    """One greedy pass (steps 1 to 4 of the module docstring) of ``piece`` under ``rule``.

    Where the kernels are compiled ahead of time (:func:`onnxmem.core._native.mode`), the
    compiled pass (:mod:`onnxmem.scheduling._greedy`) on ``rows`` (:func:`piece_rows`, made
    here when not given); else :func:`_greedy_python`. Both give the same order and count the
    same work. Under the wall clock without a cycle counter, the Python pass.
    """
    from onnxmem.core import _native

    if _native.mode() != "aot":
        return _greedy_python(piece, rule, depth, width, deadline)
    from onnxmem.core._compiled import cycles_per_second, deadline_cycles

    units = units_now()
    if deadline is None:
        stop, limit = NO_STOP, 0
    elif is_wall_clock():
        if cycles_per_second() <= 0:
            return _greedy_python(piece, rule, depth, width, deadline)
        stop, limit = CYCLE_STOP, deadline_cycles(deadline - now())
    else:  # the clock past the deadline: units / UNITS_PER_SECOND > deadline, units an integer
        stop, limit = WORK_STOP, math.floor(deadline * UNITS_PER_SECOND) + 1
    if rows is None:
        rows = piece_rows(piece)
    order, after = _native.kernels("onnxmem.scheduling._greedy").greedy(
        *rows, piece.first_extra, rule, depth, width, int(STEP_COST), int(KEY_COST), stop, limit, units)
    charge(after - units)
    return cast(list[int], order.tolist())

#: a piece's rows as the compiled pass takes them: successors (CSR), in-degrees, bytes allocated,
#: kept and discounted, frees (CSR: slot, bytes), in-place slots (CSR), remaining readers
PieceRows = tuple[np.ndarray, ...]


def piece_rows(piece: Piece) -> PieceRows:
    """``piece``'s rows as int64 arrays, for :mod:`onnxmem.scheduling._greedy`."""
    def csr(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        start = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=start[1:])
        return start, np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(start[-1]))

    succ_start, succ = csr(piece.succs)
    fr_start, fr_slot = csr([[s for s, _ in f] for f in piece.frees])
    fr_size = np.fromiter((size for f in piece.frees for _, size in f), dtype=np.int64, count=len(fr_slot))
    ip_start, ip_slot = csr(piece.ip)

    def vec(xs: Sequence[int]) -> np.ndarray:
        return np.asarray(xs, dtype=np.int64).reshape(-1)

    return (succ_start, succ, vec([len(p) for p in piece.preds]), vec(piece.alloc), vec(piece.keep),
            vec(piece.disc), fr_start, fr_slot, fr_size, ip_start, ip_slot, vec(piece.rem0))


def _greedy_python(piece: Piece, rule: int, depth: int, width: int, deadline: float | None = None) -> list[int]:
    """One greedy pass in Python: the reference :mod:`onnxmem.scheduling._greedy` is held to, and
    what runs where its kernel is not compiled ahead of time."""
    sim = _Sim(piece)
    order: list[int] = []
    work = 0.0
    while sim.ready:
        ready = sim.ready
        # a pick evaluates every ready node's key, and the look-ahead makes depth * width picks more
        work += STEP_COST + KEY_COST * len(ready) * (1 + (depth * width if depth > 0 and len(ready) > 1 else 0))
        if deadline is not None and (len(order) & 63) == 63:
            charge(work)
            work = 0.0
            if now() > deadline:
                depth = 0
        if len(ready) == 1 or depth <= 0:
            v = _pick(sim, rule)
        else:
            cands = [k[3] for k in sorted(sim.keys(ready, rule))[:width]]
            best_score: tuple[bool, int, int, int] | None = None
            v = cands[0]
            for c in cands:
                late = sim.premature(c)
                trail = [(c, sim.apply(c))]
                for _ in range(depth):
                    if not sim.ready:
                        break
                    u = _pick(sim, rule)
                    trail.append((u, sim.apply(u)))
                score = (late, sim.peak, sim.r, c)
                for u, und in reversed(trail):
                    sim.undo(u, und)
                if best_score is None or score < best_score:
                    best_score, v = score, c
        sim.apply(v)
        order.append(v)
    return order


def greedy_order(view: GraphView, options: OrderOptions) -> list[int]:
    """Cut at forced nodes (lossless), then the greedy order of each part."""
    graph = build_order_graph(view, options.io, options.alignment, options.inplace)
    segs, pieces = segment_pieces(graph)
    local: list[int] = []
    for seg, piece in zip(segs, pieces):
        if len(seg) == 1:
            local.extend(seg)
        else:
            local.extend(piece.nodes[v] for v in greedy_piece(piece))
    return list(graph.full_order(local))


def longest_path_local(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]]) -> list[int]:
    """Memonger's longest-path traversal of a DAG given by local adjacency lists."""
    n = len(preds)
    if n == 0:
        return []
    root, children = _longest_path_tree(preds, succs)
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
    return _reversed_postorder(sorted_sources, succs)


def _longest_path_tree(preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]]) -> tuple[int, dict[int, list[int]]]:
    """The tree of the sources' longest paths to the sink (a virtual one, ``-2``, when
    there are several): ``(root, children)``, a node's parent being the next node on its path."""
    n = len(preds)
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
    children: dict[int, list[int]] = {}
    in_tree: set[int] = set()
    for src in (v for v in range(n) if not preds[v]):
        v = src
        while v not in in_tree and v != root:
            in_tree.add(v)
            parent = nxt[v] if nxt[v] != -1 else -2
            children.setdefault(parent, []).append(v)
            v = parent
    return root, children


def _reversed_postorder(sources: Sequence[int], succs: Sequence[Sequence[int]]) -> list[int]:
    """networkx 1.x ``topological_sort(g, nbunch)``: DFS post-order from ``sources``, reversed."""
    explored = [False] * len(succs)
    order: list[int] = []
    for v in sources:
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


@register("greedy", "list scheduler with lookahead and a beam search over run sets, per part between forced nodes")
def _greedy(view: GraphView, options: OrderOptions) -> Sequence[int]:
    return greedy_order(view, options)


@register("longest-path", "caffe2 memonger's traversal: sources with the longest path to the end first")
def longest_path_order(view: GraphView, options: OrderOptions) -> Sequence[int]:
    graph = build_order_graph(view, options.io, options.alignment, options.inplace)
    return graph.full_order(longest_path_local(graph.preds, graph.succs))



class _Beam:
    """The moves of :func:`beam_piece` over sets of run nodes of ``piece``."""

    def __init__(self, piece: Piece) -> None:
        n = piece.n
        self.pred_mask = [0] * n
        for v in range(n):
            for p in piece.preds[v]:
                self.pred_mask[v] |= 1 << p
        self.slot_cons = [0] * len(piece.rem0)
        for v in range(n):
            for s, _ in piece.frees[v]:
                self.slot_cons[s] |= 1 << v
        self.alloc, self.keep, self.frees, self.succs = piece.alloc, piece.keep, piece.frees, piece.succs
        self.fe = piece.first_extra
        self.full = (1 << n) - 1
        self.ready0 = sum(1 << v for v in range(n) if not self.pred_mask[v])
        self.disc, self.step = piece.disc, piece.set_step(self.slot_cons)  # step(): only where disc[v] is set

    def live(self, v: int, mask: int, r: int) -> int:
        """Bytes live while ``v`` runs after the nodes of ``mask``, ``r`` bytes resident."""
        return r + (self.step(v, mask) if self.disc[v] else self.alloc[v]) + (self.fe if mask == 0 else 0)

    def run(self, v: int, mask: int, r: int, ready: int) -> tuple[int, int, int]:
        """``(mask, resident bytes, ready set)`` once ``v`` has run."""
        slot_cons, pred_mask = self.slot_cons, self.pred_mask
        nm = mask | (1 << v)
        nr = r + self.keep[v]
        for s, size in self.frees[v]:
            if not (slot_cons[s] & ~nm):
                nr -= size
        nready = ready & ~(1 << v)
        for x in self.succs[v]:
            if not (pred_mask[x] & ~nm):
                nready |= 1 << x
        return nm, nr, nready

    def expand(self, mask: int, peak: int, r: int, ready: int, path: object,
               nxt: dict[int, tuple[int, int, int, object]]) -> None:
        """Run the ready nodes that raise neither the peak nor the resident bytes, then add
        each set one more ready node reaches to ``nxt`` (where it is lower than what is there)."""
        moved = True
        while moved:
            moved = False
            rest = ready
            while rest:
                low = rest & -rest
                v = low.bit_length() - 1
                rest ^= low
                if self.live(v, mask, r) > peak:
                    continue
                nm, nr, nready = self.run(v, mask, r, ready)
                if nr <= r:
                    mask, r, ready, path = nm, nr, nready, (v, path)
                    moved = True
                    break
        if mask == self.full:
            old = nxt.get(mask)
            if old is None or (peak, r) < old[:2]:
                nxt[mask] = (peak, r, ready, path)
            return
        rest = ready
        while rest:
            low = rest & -rest
            v = low.bit_length() - 1
            rest ^= low
            m = self.live(v, mask, r)
            np_ = peak if peak >= m else m
            nm, nr, nready = self.run(v, mask, r, ready)
            old = nxt.get(nm)
            if old is None or (np_, nr) < old[:2]:
                nxt[nm] = (np_, nr, nready, (v, path))


def beam_piece(piece: Piece, *, width: int = 16, deadline: float | None = None) -> list[int]:
    """Beam search over the sets of nodes run, keeping the ``width`` best per round.

    A set is ranked by the peak reached so far, then by resident bytes per
    node run (sets further along rank higher at equal bytes); of two paths
    to the same set the lower (peak, resident) is kept. A ready node that
    raises neither the peak nor the resident bytes runs at once. Past
    ``deadline`` the beam narrows to one set.
    """
    if piece.n == 0:
        return []
    beam = _Beam(piece)
    full = beam.full
    # mask -> (peak, resident, ready set, path as nested pairs)
    frontier: dict[int, tuple[int, int, int, object]] = {0: (NEG, 0, beam.ready0, None)}
    while True:
        nxt: dict[int, tuple[int, int, int, object]] = {}
        for mask, (peak, r, ready, path) in frontier.items():
            beam.expand(mask, peak, r, ready, path, nxt)
        if all(m == full for m in nxt):
            break
        charge(len(nxt) * STEP_COST)
        w = width if deadline is None or now() < deadline else 1
        ranked = sorted(nxt.items(), key=lambda kv: (kv[1][0], kv[1][1] - kv[0].bit_count()))
        frontier = dict(ranked[:w])
    peak, r, _, path = min(nxt.values(), key=lambda st: st[:2])
    out: list[int] = []
    while path is not None:
        last, path = cast("tuple[int, object]", path)
        out.append(last)
    out.reverse()
    return out
