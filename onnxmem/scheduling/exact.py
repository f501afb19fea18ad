"""``exact``: the order with the lowest peak, by search over partial schedules.

As in Serenity, a state is the *set* of nodes already run: the bytes resident
after it do not depend on the order they ran in. Steps:

1. split the graph at *forced* nodes (every other node is an ancestor or a
   descendant of them): every topological order runs the nodes between two
   forced nodes between them, so the pieces are independent and the peak is
   the largest of theirs (no loss of optimality);
2. take the greedy order's peak as an upper bound ``U`` and the largest
   single step any order must take (a node's outputs and the inputs it
   reads) as a lower bound ``L``; stop when ``U <= L``;
3. pieces of more than ``COMPILED_MIN`` nodes: the compiled depth-first
   search of :mod:`._search` under a threshold that falls below each order
   found, with a record of the sets that cannot finish under it and a lower
   bound per set (for each node not yet run: the bytes that must still be
   live when it runs); smaller pieces: best-first search in increasing
   ``max(peak so far, L)``, each set kept with the lowest peak that reached it;
4. in both, a ready node that fits and does not raise the resident bytes is
   run at once, without branching (moving it earlier never raises a later
   step, so some optimal order does so).

Guarantee: the order returned is never worse than the greedy one; when the
search ends before ``options.timeout`` (default 30 s) it is proven optimal
for the peak (with ``options.inplace``, the peak with views and in-place
outputs counted; Concat placement is not searched). The work grows with the number of downward-closed node sets
the bounds do not cut off; RandWire stages of 32 random-graph nodes (about 85
ONNX nodes in one piece) are proven in well under a second.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from onnxmem.core.workclock import charge, is_wall_clock, now, steps_left
from onnxmem.graph import GraphView
from onnxmem.scheduling.cost import (
    OrderGraph,
    Piece,
    build_order_graph,
    forced_segments,
    segment_pieces,
    simulate,
    topological,
)
from onnxmem.scheduling.heuristics import greedy_piece
from onnxmem.scheduling.registry import OrderOptions, register

__all__ = ["ExactResult", "exact_piece", "exact_search", "forced_segments"]

#: default seconds for ``--order exact``
EXACT_TIMEOUT = 30.0
#: pieces of more nodes than this go to the compiled search
COMPILED_MIN = 20
#: work units (:mod:`onnxmem.core.workclock`) per set the best-first search expands,
#: and per set and node of the piece the compiled search expands
EXPAND_COST = 10.0
COMPILED_EXPAND_COST = 0.12


@dataclass(frozen=True, slots=True)
class ExactResult:
    """``order``: local node order; ``peak``: its relative peak; ``proven``:
    whether the search finished; ``states``: sets expanded."""

    order: list[int]
    peak: int
    proven: bool
    states: int


def exact_piece(
    piece: Piece,
    deadline: float | None = None,
    upper: Sequence[int] | None = None,
    max_states: int = 3_000_000,
    method: str = "auto",
) -> ExactResult:
    """The order of ``piece`` with the lowest peak, or the best known at ``deadline``.

    ``method``: ``"compiled"`` (the depth-first search of :mod:`._search`),
    ``"python"`` (best-first search), or ``"auto"``: compiled for pieces of
    more than :data:`COMPILED_MIN` nodes.
    """
    n = piece.n
    ub_order = list(upper) if upper is not None else greedy_piece(piece)
    ub, _ = simulate(piece, ub_order)
    if n <= 1:
        return ExactResult(ub_order, ub, True, 0)
    lb = piece.bound()
    if piece.first_extra:
        lb = max(lb, min(piece.alloc[v] - piece.disc[v] for v in range(n) if not piece.preds[v]) + piece.first_extra)
    if ub <= lb:
        return ExactResult(ub_order, ub, True, 0)
    if method == "compiled" or (method == "auto" and n > COMPILED_MIN):
        return _exact_compiled(piece, deadline, ub_order, ub, lb, max_states)
    return _exact_best_first(piece, deadline, ub_order, ub, lb, max_states)


def _exact_compiled(
    piece: Piece, deadline: float | None, ub_order: list[int], ub: int, lb: int, max_states: int
) -> ExactResult:
    from onnxmem.core._compiled import warm_up
    from onnxmem.core._native import kernels
    from onnxmem.scheduling._searchdefs import PROVEN

    search = kernels("onnxmem.scheduling._search").search

    a = piece_arrays(piece)
    head = (
        a["succ_ptr"], a["succ_node"], a["indeg0"], a["descself"], a["alloc"], a["disc"], a["ip_ptr"], a["ip_slot"],
        a["keep"], a["free_ptr"], a["free_slot"],
        a["out_ptr"], a["out_slot"], a["slot_size"], a["slot_cons"], a["rem0"], a["live0"],
        a["ancself"], a["inv_ptr"], a["inv_node"], a["inv_size"], a["pending0"], piece.first_extra, lb, ub,
    )
    best = np.array(ub_order, dtype=np.int64)
    # first use in this process: compile the search (or load it from the cache) in a
    # call stopped at once, and move the deadline by the time that took
    compiling = warm_up(search, lambda: search(*head, best.copy(), 0, 1, max_states))
    if deadline is not None:
        deadline += compiling
    cost = COMPILED_EXPAND_COST * piece.n
    dl, limit = _search_stop(deadline, cost)
    status, peak, expanded = search(*head, best, dl, limit, max_states)
    charge(int(expanded) * cost)
    order = [int(v) for v in best]
    return ExactResult(order, simulate(piece, order)[0], status == PROVEN, int(expanded))


def _search_stop(deadline: float | None, cost: float) -> tuple[int, int]:
    """The compiled search's cycle-counter deadline and limit on sets expanded (0: none).

    On the work clock the limit is the sets of ``cost`` units left in the budget; under the wall
    clock, a deadline (and, without a cycle counter, a limit at about 200,000
    sets a second).
    """
    from onnxmem.core._compiled import NO_DEADLINE, cycles_per_second, deadline_cycles

    if deadline is None:
        return NO_DEADLINE, 0
    if not is_wall_clock():
        return NO_DEADLINE, max(1, steps_left(deadline, cost))
    rate = cycles_per_second()  # measured once per process: before reading the time left
    left = deadline - now()
    return deadline_cycles(left), 0 if rate > 0 else max(1000, int(left * 200_000))


def charged(units: float) -> float:
    """Count ``units`` of work; the planning clock after."""
    charge(units)
    return now()


def piece_arrays(piece: Piece) -> dict[str, np.ndarray]:
    """The arrays :func:`._search.search` reads, for ``piece``."""
    n = piece.n
    words = max(1, (n + 63) // 64)
    anc, desc = _closures(piece)
    slot_size, cons, free_ptr, free_slot = _freed_slots(piece)
    outs: list[list[int]] = [[] for _ in range(n)]
    for s, p in enumerate(piece.slot_prod):
        if p >= 0:
            outs[p].append(s)
    perm = [piece.keep[v] - sum(slot_size[s] for s in outs[v]) for v in range(n)]
    out_ptr = [0]
    out_slot: list[int] = []
    for v in range(n):
        out_slot.extend(outs[v])
        out_ptr.append(len(out_slot))
    inv_ptr, inv_node, inv_size, pend = _held_for_descendants(anc, desc, perm, outs, slot_size, cons)

    def masks(values: Sequence[int]) -> np.ndarray:
        return _masks(values, words)

    succ = [sorted(set(piece.succs[v])) for v in range(n)]
    i64 = np.int64
    return {
        "succ_ptr": np.cumsum([0] + [len(x) for x in succ], dtype=i64),
        "succ_node": np.array([x for xs in succ for x in xs], dtype=i64),
        "indeg0": np.array([len(set(piece.preds[v])) for v in range(n)], dtype=i64),
        "descself": masks(desc),
        "alloc": np.array(piece.alloc, dtype=i64),
        "disc": np.array(piece.disc, dtype=i64),
        "ip_ptr": np.cumsum([0] + [len(x) for x in piece.ip], dtype=i64),
        "ip_slot": np.array([s for xs in piece.ip for s in xs], dtype=i64),
        "keep": np.array(piece.keep, dtype=i64),
        "free_ptr": np.array(free_ptr, dtype=i64),
        "free_slot": np.array(free_slot, dtype=i64),
        "out_ptr": np.array(out_ptr, dtype=i64),
        "out_slot": np.array(out_slot, dtype=i64),
        "slot_size": np.array(slot_size, dtype=i64),
        "slot_cons": masks(cons),
        "rem0": np.array(piece.rem0, dtype=i64),
        "live0": np.array([p < 0 for p in piece.slot_prod], dtype=np.bool_),
        "ancself": masks([anc[v] | (1 << v) for v in range(n)]),
        "inv_ptr": np.array(inv_ptr, dtype=i64),
        "inv_node": np.array(inv_node, dtype=i64),
        "inv_size": np.array(inv_size, dtype=i64),
        "pending0": np.array(pend, dtype=i64),
    }


def _closures(piece: Piece) -> tuple[list[int], list[int]]:
    """``(ancestors, the node and its descendants)`` of each node, as bitmasks."""
    n = piece.n
    topo = topological(piece)
    anc = [0] * n
    for v in topo:
        m = 0
        for p in piece.preds[v]:
            m |= anc[p] | (1 << p)
        anc[v] = m
    desc = [0] * n
    for v in reversed(topo):
        m = 1 << v
        for s in piece.succs[v]:
            m |= desc[s]
        desc[v] = m
    return anc, desc


def _freed_slots(piece: Piece) -> tuple[list[int], list[int], list[int], list[int]]:
    """``(bytes of each slot, its readers as a bitmask, CSR of the slots each node reads)``."""
    nslots = len(piece.rem0)
    slot_size = [0] * nslots
    cons = [0] * nslots
    free_ptr = [0]
    free_slot: list[int] = []
    for v in range(piece.n):
        for s, size in piece.frees[v]:
            slot_size[s] = size
            cons[s] |= 1 << v
            free_slot.append(s)
        free_ptr.append(len(free_slot))
    return slot_size, cons, free_ptr, free_slot


def _held_for_descendants(anc: Sequence[int], desc: Sequence[int], perm: Sequence[int], outs: Sequence[list[int]],
                          slot_size: Sequence[int], cons: Sequence[int]) -> tuple[list[int], ...]:
    """Bytes each ancestor p produces that are still live when its descendant v runs:
    ``(CSR pointer by p, v, bytes, and per v their sum)``."""
    n = len(anc)
    pend = [0] * n
    inv: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for v in range(n):
        m = anc[v]
        d = desc[v]
        while m:
            low = m & -m
            p = low.bit_length() - 1
            m ^= low
            size = perm[p] + sum(slot_size[s] for s in outs[p] if cons[s] & d)
            if size:
                inv[p].append((v, size))
                pend[v] += size
    inv_ptr = [0]
    inv_node: list[int] = []
    inv_size: list[int] = []
    for p in range(n):
        for v, size in inv[p]:
            inv_node.append(v)
            inv_size.append(size)
        inv_ptr.append(len(inv_node))
    return inv_ptr, inv_node, inv_size, pend


def _masks(values: Sequence[int], words: int) -> np.ndarray:
    """Python-int bitmasks as rows of ``words`` uint64 words, lowest word first."""
    out = np.zeros((len(values), words), dtype=np.uint64)
    for i, x in enumerate(values):
        for w in range(words):
            out[i, w] = (x >> (64 * w)) & 0xFFFFFFFFFFFFFFFF
    return out


class _Moves:
    """The moves of the best-first search over sets of run nodes of ``piece``."""

    def __init__(self, piece: Piece) -> None:
        n = piece.n
        self.pred_mask = [0] * n
        for v in range(n):
            m = 0
            for p in piece.preds[v]:
                m |= 1 << p
            self.pred_mask[v] = m
        self.slot_cons = [0] * len(piece.rem0)
        for v in range(n):
            for s, _ in piece.frees[v]:
                self.slot_cons[s] |= 1 << v
        self.alloc, self.keep, self.frees = piece.alloc, piece.keep, piece.frees
        self.first_extra = piece.first_extra
        self.full = (1 << n) - 1
        self.disc, self.step = piece.disc, piece.set_step(self.slot_cons)  # step(): only where disc[v] is set

    def ready(self, mask: int) -> Iterator[tuple[int, int]]:
        """The nodes not in ``mask`` whose predecessors all are, lowest first, with their bit."""
        pred_mask = self.pred_mask
        rest = self.full & ~mask
        while rest:
            low = rest & -rest
            rest ^= low
            v = low.bit_length() - 1
            if not pred_mask[v] & ~mask:
                yield v, low

    def live_while(self, v: int, mask: int, r: int) -> int:
        """Bytes live while ``v`` runs after the nodes of ``mask``, ``r`` bytes resident."""
        return r + (self.step(v, mask) if self.disc[v] else self.alloc[v]) + (self.first_extra if mask == 0 else 0)

    def resident_after(self, v: int, done: int, r: int) -> int:
        """Bytes resident once ``v`` has run (``done``: the nodes run by then)."""
        slot_cons = self.slot_cons
        nr = r + self.keep[v]
        for s, size in self.frees[v]:
            if not (slot_cons[s] & ~done):
                nr -= size
        return nr

    def chain(self, mask: int, r: int, peak: int, bound: int) -> tuple[list[int], int, int, int]:
        """Run nodes that neither raise the peak above ``bound`` nor the resident bytes,
        without branching: ``(those nodes, mask, resident bytes, peak)`` after them."""
        chain: list[int] = []
        progressed = True
        while progressed:
            progressed = False
            for v, low in self.ready(mask):
                m = self.live_while(v, mask, r)
                if m > bound:
                    continue
                nm = mask | low
                nr = self.resident_after(v, nm, r)
                if nr <= r:
                    chain.append(v)
                    mask, r = nm, nr
                    if m > peak:
                        peak = m
                    progressed = True
                    break
        return chain, mask, r, peak


def _exact_best_first(
    piece: Piece, deadline: float | None, ub_order: list[int], ub: int, lb: int, max_states: int
) -> ExactResult:
    moves = _Moves(piece)
    full, ready, live_while, resident_after = moves.full, moves.ready, moves.live_while, moves.resident_after
    best: dict[int, int] = {0: -(1 << 62)}
    parent: dict[int, tuple[int, tuple[int, ...]]] = {}
    heap: list[tuple[int, int, int, int, int, int]] = [(lb, 0, 0, 0, 0, -(1 << 62))]
    counter = 0
    expanded = 0
    proven = False
    found_order: list[int] | None = None
    stopped = False
    while heap:
        key, negd, _, mask, r, peak = heapq.heappop(heap)
        if best.get(mask, 1 << 62) < peak:
            continue
        if mask == full:
            found_order = _path(parent, mask)
            ub = peak
            proven = True
            break
        if key >= ub:
            proven = True
            break
        expanded += 1
        if (expanded & 255) == 0 and deadline is not None and charged(256 * EXPAND_COST) > deadline:
            stopped = True
            break
        if len(best) > max_states:
            stopped = True
            break
        depth = -negd
        chain, mask, r, peak = moves.chain(mask, r, peak, key)
        if chain:
            depth += len(chain)
            old = best.get(mask)
            if old is not None and old <= peak:
                continue
            best[mask] = peak
            parent[mask] = (mask & ~_bits(chain), tuple(chain))
            counter += 1
            heapq.heappush(heap, (max(peak, lb), -depth, counter, mask, r, peak))
            continue
        for v, low in ready(mask):
            m = live_while(v, mask, r)
            np_ = peak if peak >= m else m
            if np_ >= ub:
                continue
            nm = mask | low
            if best.get(nm, 1 << 62) <= np_:
                continue
            nr = resident_after(v, nm, r)
            best[nm] = np_
            parent[nm] = (mask, (v,))
            counter += 1
            heapq.heappush(heap, (max(np_, lb), -(depth + 1), counter, nm, nr, np_))
    if not heap and not stopped:
        proven = True  # every state below the upper bound was expanded
    if found_order is not None:
        return ExactResult(found_order, ub, proven, expanded)
    return ExactResult(ub_order, simulate(piece, ub_order)[0], proven, expanded)


def _bits(nodes: Sequence[int]) -> int:
    m = 0
    for v in nodes:
        m |= 1 << v
    return m


def _path(parent: dict[int, tuple[int, tuple[int, ...]]], mask: int) -> list[int]:
    steps: list[tuple[int, ...]] = []
    while mask:
        prev, nodes = parent[mask]
        steps.append(nodes)
        mask = prev
    out: list[int] = []
    for nodes in reversed(steps):
        out.extend(nodes)
    return out


def exact_search(graph: OrderGraph, timeout: float | None) -> tuple[list[int], bool, int]:
    """``(local order, proven optimal, states expanded)`` for the whole graph.

    Splits at forced nodes and searches each segment; small segments go first
    and pass the time they leave to the larger ones.
    """
    t0 = now()
    budget = EXACT_TIMEOUT if timeout is None else timeout
    segs, pieces = segment_pieces(graph)
    orders: list[list[int]] = [[] for _ in segs]
    proven = True
    states = 0
    todo = sorted(range(len(segs)), key=lambda i: len(segs[i]))
    for k, i in enumerate(todo):
        seg = segs[i]
        if len(seg) == 1:
            orders[i] = seg
            continue
        piece = pieces[i]
        left = budget - (now() - t0)
        share = max(left, 0.0) / max(len(todo) - k, 1)
        res = exact_piece(piece, now() + share)
        proven = proven and res.proven
        states += res.states
        orders[i] = [piece.nodes[v] for v in res.order]
    local: list[int] = []
    for o in orders:
        local.extend(o)
    return local, proven, states


@register("exact", "search over sets of run nodes (Serenity), compiled, with per-set bounds; optimal peak when it ends")
def exact_order(view: GraphView, options: OrderOptions) -> Sequence[int]:
    graph = build_order_graph(view, options.io, options.alignment, options.inplace)
    local, _, _ = exact_search(graph, options.timeout)
    return graph.full_order(local)
