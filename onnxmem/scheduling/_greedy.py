"""The compiled list scheduler: :func:`onnxmem.scheduling.heuristics.greedy_piece`'s passes.

One pass of the greedy list schedule with look-ahead (steps 1 to 4 of
:mod:`onnxmem.scheduling.heuristics`' docstring) on the integer arrays
:func:`onnxmem.scheduling.heuristics.piece_rows` builds from a
:class:`~.cost.Piece`: the same scores, the same ties broken the same way, the
same work counted at the same steps (:mod:`onnxmem.core.workclock`), so it gives
the order the Python pass (``heuristics._greedy_python``) gives and leaves the
clock where that pass leaves it (``tests/test_greedy_kernel.py`` holds the two
to each other). A score is ``(late, a, b, node)``, compared in that order,
lowest best: ``late`` whether the node is a premature lazy source, ``a`` and
``b`` the peak so far if it ran next and the bytes it leaves resident (rule 0),
or those two the other way round (rule 1).

The set of ready nodes is kept in an array with each node's position, so that a
node leaves it in one step; its order changes nothing, since every score ends
with the node.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from onnxmem.core._cyclecounter import cycles
from onnxmem.scheduling._search import _step  # bytes a node allocates at its step (Piece.step)
from onnxmem.scheduling._searchdefs import NO_STOP, WORK_STOP


@njit(cache=True)
def _less(l1: bool, a1: int, b1: int, v1: int, l2: bool, a2: int, b2: int, v2: int) -> bool:
    """Whether the score ``(l1, a1, b1, v1)`` is below ``(l2, a2, b2, v2)``."""
    if l1 != l2:
        return l2
    if a1 != a2:
        return a1 < a2
    if b1 != b2:
        return b1 < b2
    return v1 < v2


@njit(cache=True)
def _premature(v: int, lazy: np.ndarray, indeg: np.ndarray, left: np.ndarray, succ_start: np.ndarray,
               succ: np.ndarray) -> bool:
    if not lazy[v]:
        return False
    for j in range(succ_start[v], succ_start[v + 1]):
        s = succ[j]
        if indeg[s] <= left[s]:
            return False
    return True


@njit(cache=True)
def _score(v: int, rule: int, r: int, peak: int, first: bool, first_extra: int, alloc: np.ndarray,
           keep: np.ndarray, disc: np.ndarray, fr_start: np.ndarray, fr_slot: np.ndarray, fr_size: np.ndarray,
           ip_start: np.ndarray, ip_slot: np.ndarray, rem: np.ndarray, lazy: np.ndarray, indeg: np.ndarray,
           left: np.ndarray, succ_start: np.ndarray, succ: np.ndarray) -> tuple[bool, int, int]:
    """``v``'s score but the node: ``(late, a, b)``."""
    m = r + _step(v, rem, alloc, disc, ip_start, ip_slot)
    if first:
        m += first_extra
    if m < peak:
        m = peak
    d = keep[v]
    for j in range(fr_start[v], fr_start[v + 1]):
        if rem[fr_slot[j]] == 1:
            d -= fr_size[j]
    late = _premature(v, lazy, indeg, left, succ_start, succ)
    if rule == 0:
        return late, m, d
    return late, d, m


@njit(cache=True)
def _take(ready: np.ndarray, pos: np.ndarray, nready: int, v: int) -> int:
    """``v`` out of the ready set; its new size."""
    i = pos[v]
    nready -= 1
    last = ready[nready]
    ready[i] = last
    pos[last] = i
    pos[v] = -1
    return nready


@njit(cache=True)
def _put(ready: np.ndarray, pos: np.ndarray, nready: int, v: int) -> int:
    ready[nready] = v
    pos[v] = nready
    return nready + 1


@njit(cache=True)
def _run(u: int, r: int, peak: int, first: bool, first_extra: int, alloc: np.ndarray, keep: np.ndarray,
         disc: np.ndarray, fr_start: np.ndarray, fr_slot: np.ndarray, fr_size: np.ndarray, ip_start: np.ndarray,
         ip_slot: np.ndarray, rem: np.ndarray, lazy: np.ndarray, indeg: np.ndarray, left: np.ndarray,
         succ_start: np.ndarray, succ: np.ndarray, ready: np.ndarray, pos: np.ndarray,
         nready: int) -> tuple[int, int, int]:
    """Run ``u`` (``_Sim.apply``): the resident bytes, the peak and the ready set's size after it."""
    m = r + _step(u, rem, alloc, disc, ip_start, ip_slot)
    if first:
        m += first_extra
    if m > peak:
        peak = m
    r += keep[u]
    for j in range(fr_start[u], fr_start[u + 1]):
        s = fr_slot[j]
        rem[s] -= 1
        if rem[s] == 0:
            r -= fr_size[j]
    nready = _take(ready, pos, nready, u)
    for j in range(succ_start[u], succ_start[u + 1]):
        s = succ[j]
        indeg[s] -= 1
        if lazy[u]:
            left[s] -= 1
        if indeg[s] == 0:
            nready = _put(ready, pos, nready, s)
    return r, peak, nready


@njit(cache=True)
def _unrun(u: int, fr_start: np.ndarray, fr_slot: np.ndarray, rem: np.ndarray, lazy: np.ndarray,
           indeg: np.ndarray, left: np.ndarray, succ_start: np.ndarray, succ: np.ndarray, ready: np.ndarray,
           pos: np.ndarray, nready: int) -> int:
    """Undo :func:`_run` of ``u`` but its scalars: the ready set's size after it."""
    for j in range(succ_start[u], succ_start[u + 1]):
        s = succ[j]
        if indeg[s] == 0:
            nready = _take(ready, pos, nready, s)
        indeg[s] += 1
        if lazy[u]:
            left[s] += 1
    for j in range(fr_start[u], fr_start[u + 1]):
        rem[fr_slot[j]] += 1
    return _put(ready, pos, nready, u)


@njit(cache=True)
def _lowest(rule: int, r: int, peak: int, first: bool, first_extra: int, alloc: np.ndarray, keep: np.ndarray,
            disc: np.ndarray, fr_start: np.ndarray, fr_slot: np.ndarray, fr_size: np.ndarray, ip_start: np.ndarray,
            ip_slot: np.ndarray, rem: np.ndarray, lazy: np.ndarray, indeg: np.ndarray, left: np.ndarray,
            succ_start: np.ndarray, succ: np.ndarray, ready: np.ndarray, nready: int) -> int:
    """The ready node of the lowest score (``heuristics._pick``)."""
    u = ready[0]
    if nready == 1:
        return int(u)
    u_late, u_a, u_b = _score(u, rule, r, peak, first, first_extra, alloc, keep, disc, fr_start, fr_slot, fr_size,
                              ip_start, ip_slot, rem, lazy, indeg, left, succ_start, succ)
    for i in range(1, nready):
        v = ready[i]
        lv, av, bv = _score(v, rule, r, peak, first, first_extra, alloc, keep, disc, fr_start, fr_slot, fr_size,
                            ip_start, ip_slot, rem, lazy, indeg, left, succ_start, succ)
        if _less(lv, av, bv, v, u_late, u_a, u_b, u):
            u, u_late, u_a, u_b = v, lv, av, bv
    return int(u)


@njit(cache=True)
def _candidates(cands: np.ndarray, width: int, rule: int, r: int, peak: int, first: bool, first_extra: int,
                alloc: np.ndarray, keep: np.ndarray, disc: np.ndarray, fr_start: np.ndarray, fr_slot: np.ndarray,
                fr_size: np.ndarray, ip_start: np.ndarray, ip_slot: np.ndarray, rem: np.ndarray, lazy: np.ndarray,
                indeg: np.ndarray, left: np.ndarray, succ_start: np.ndarray, succ: np.ndarray, ready: np.ndarray,
                nready: int) -> int:
    """The ``width`` ready nodes of the lowest scores into ``cands``, lowest first: how many."""
    k_late = np.empty(nready, dtype=np.bool_)
    k_a = np.empty(nready, dtype=np.int64)
    k_b = np.empty(nready, dtype=np.int64)
    chosen = np.zeros(nready, dtype=np.bool_)
    for i in range(nready):
        k_late[i], k_a[i], k_b[i] = _score(ready[i], rule, r, peak, first, first_extra, alloc, keep, disc,
                                           fr_start, fr_slot, fr_size, ip_start, ip_slot, rem, lazy, indeg, left,
                                           succ_start, succ)
    ncand = width if width < nready else nready
    for c in range(ncand):
        low = -1
        for i in range(nready):
            if not chosen[i] and (low < 0 or _less(k_late[i], k_a[i], k_b[i], ready[i], k_late[low], k_a[low],
                                                   k_b[low], ready[low])):
                low = i
        chosen[low] = True
        cands[c] = ready[low]
    return ncand


@njit(cache=True)
def _look_ahead(cands: np.ndarray, ncand: int, depth: int, rule: int, r: int, peak: int, first: bool,
                first_extra: int, alloc: np.ndarray, keep: np.ndarray, disc: np.ndarray, fr_start: np.ndarray,
                fr_slot: np.ndarray, fr_size: np.ndarray, ip_start: np.ndarray, ip_slot: np.ndarray, rem: np.ndarray,
                lazy: np.ndarray, indeg: np.ndarray, left: np.ndarray, succ_start: np.ndarray, succ: np.ndarray,
                ready: np.ndarray, pos: np.ndarray, nready: int) -> int:
    """Each candidate run, then ``depth`` picks more, then all undone: the candidate whose run
    ends with the lowest ``(late, peak, resident bytes, node)``. The state is as it was after."""
    t_node = np.empty(depth + 1, dtype=np.int64)  # the trail: each node run, the bytes and peak before it
    t_r = np.empty(depth + 1, dtype=np.int64)
    t_peak = np.empty(depth + 1, dtype=np.int64)
    best = -1
    b_late, b_peak, b_r = False, 0, 0
    for c in range(ncand):
        late_c = _premature(cands[c], lazy, indeg, left, succ_start, succ)
        r0, peak0, f = r, peak, first
        nt = 0
        u = cands[c]
        while True:
            t_node[nt], t_r[nt], t_peak[nt] = u, r, peak
            nt += 1
            r, peak, nready = _run(u, r, peak, f, first_extra, alloc, keep, disc, fr_start, fr_slot, fr_size,
                                   ip_start, ip_slot, rem, lazy, indeg, left, succ_start, succ, ready, pos, nready)
            f = False
            if nt > depth or nready == 0:
                break
            u = _lowest(rule, r, peak, f, first_extra, alloc, keep, disc, fr_start, fr_slot, fr_size, ip_start,
                        ip_slot, rem, lazy, indeg, left, succ_start, succ, ready, nready)
        if best < 0 or _less(late_c, peak, r, cands[c], b_late, b_peak, b_r, best):
            best, b_late, b_peak, b_r = cands[c], late_c, peak, r
        while nt > 0:  # the trail undone, last first
            nt -= 1
            nready = _unrun(t_node[nt], fr_start, fr_slot, rem, lazy, indeg, left, succ_start, succ, ready, pos,
                            nready)
        r, peak = r0, peak0
    return best


@njit(cache=True)
def greedy(
    succ_start: np.ndarray, succ: np.ndarray, indeg0: np.ndarray, alloc: np.ndarray, keep: np.ndarray,
    disc: np.ndarray, fr_start: np.ndarray, fr_slot: np.ndarray, fr_size: np.ndarray, ip_start: np.ndarray,
    ip_slot: np.ndarray, rem0: np.ndarray, first_extra: int, rule: int, depth: int, width: int,
    step_cost: int, key_cost: int, stop: int, limit: int, units: int,
) -> tuple[np.ndarray, int]:
    """One greedy pass: ``(order, units)``, the work clock's units after it.

    ``stop`` (:mod:`._searchdefs`): :data:`NO_STOP`; :data:`WORK_STOP`, the look-ahead ends once the
    clock's ``units`` (charged every 64 nodes placed, as the Python pass does)
    reach ``limit``; :data:`CYCLE_STOP`, once the cycle counter passes ``limit``.
    """
    n = alloc.shape[0]
    rem = rem0.copy()
    indeg = indeg0.copy()
    lazy = np.zeros(n, dtype=np.bool_)  # heuristics.lazy_sources
    left = np.zeros(n, dtype=np.int64)
    ready = np.empty(n, dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)
    nready = 0
    for v in range(n):
        lazy[v] = indeg0[v] == 0 and fr_start[v + 1] == fr_start[v] and keep[v] > 0
        if lazy[v]:
            for j in range(succ_start[v], succ_start[v + 1]):
                left[succ[j]] += 1
        if indeg[v] == 0:
            nready = _put(ready, pos, nready, v)
    r = 0
    peak = -(1 << 62)
    first = True
    cands = np.empty(max(width, 1), dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    placed = 0
    work = 0
    while nready > 0:
        look = depth * width if depth > 0 and nready > 1 else 0
        work += step_cost + key_cost * nready * (1 + look)
        if stop != NO_STOP and (placed & 63) == 63:
            if stop == WORK_STOP:
                units += work
                if units >= limit:
                    depth = 0
            elif cycles() > limit:
                depth = 0
            work = 0
        if nready == 1 or depth <= 0:
            best = _lowest(rule, r, peak, first, first_extra, alloc, keep, disc, fr_start, fr_slot, fr_size,
                           ip_start, ip_slot, rem, lazy, indeg, left, succ_start, succ, ready, nready)
        else:
            ncand = _candidates(cands, width, rule, r, peak, first, first_extra, alloc, keep, disc, fr_start,
                                fr_slot, fr_size, ip_start, ip_slot, rem, lazy, indeg, left, succ_start, succ,
                                ready, nready)
            best = _look_ahead(cands, ncand, depth, rule, r, peak, first, first_extra, alloc, keep, disc, fr_start,
                               fr_slot, fr_size, ip_start, ip_slot, rem, lazy, indeg, left, succ_start, succ,
                               ready, pos, nready)
        r, peak, nready = _run(best, r, peak, first, first_extra, alloc, keep, disc, fr_start, fr_slot, fr_size,
                               ip_start, ip_slot, rem, lazy, indeg, left, succ_start, succ, ready, pos, nready)
        first = False
        order[placed] = best
        placed += 1
    return order[:placed].copy(), units
