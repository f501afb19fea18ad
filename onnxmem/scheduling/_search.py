"""The compiled core of ``exact``: depth-first search for an order under a peak threshold.

Everything here works on the integer arrays :func:`piece_arrays` builds from a
:class:`~.cost.Piece`. Node sets are bitmasks of ``W`` 64-bit words.

Whether the nodes not yet run can all run with every step at most ``T`` bytes
depends only on the *set* of nodes already run (the resident bytes are a
function of the set), so a set that failed once is recorded and never searched
again. Because a set that fails under ``T`` also fails under any lower
threshold, the record is kept while the threshold goes down:

1. ``T`` starts one below the upper bound (the order given, usually greedy's);
2. depth-first search from the empty set; at each set:

   a. skip it when it is recorded as failed;
   b. run, without branching, any ready node whose step fits under ``T`` and
      that does not raise the resident bytes (some feasible order, if there is
      one, runs it now: running it earlier never raises a later step);
   c. fail when some node not yet run needs more than ``T`` in every order
      from here: its outputs (less what an in-place write may save), the
      resident tensors it or a descendant still
      reads, and the tensors its not-yet-run ancestors will produce for it or
      its descendants (or that are kept past the piece);
   d. branch over the ready nodes whose step fits under ``T``, the one that
      leaves the fewest resident bytes first;

3. a complete order with peak ``p`` becomes the best known; ``T = p - 1``
   and the search restarts (the recorded sets stay valid);
4. when the search from the empty set fails, or ``T`` falls below the lower
   bound, the best order is optimal.

It stops with ``TIMEOUT`` past a deadline on the cycle counter (or past a
limit on sets expanded where the counter is unavailable). The record stops
growing at ``max_states`` sets; the search stays correct, only slower.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from onnxmem.core._cyclecounter import cycles
from onnxmem.scheduling._searchdefs import PROVEN, TIMEOUT

_ENTER = 0
_NEXT = 1
_FAIL = 2


@njit(cache=True)
def _slot(keys: np.ndarray, used: np.ndarray, mask: np.ndarray) -> int:
    """The table slot of ``mask``: where it is, or the empty slot where it goes."""
    cap = used.shape[0]
    w_count = mask.shape[0]
    h = np.uint64(0x9E3779B97F4A7C15)
    for w in range(w_count):
        h = (h ^ mask[w]) * np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(29)
    i = np.int64(h & np.uint64(cap - 1))
    while used[i]:
        same = True
        for w in range(w_count):
            if keys[i, w] != mask[w]:
                same = False
                break
        if same:
            return int(i)
        i = (i + 1) & (cap - 1)
    return int(i)


@njit(cache=True)
def _ctz(x: np.uint64) -> int:
    """Index of the lowest set bit of ``x`` (nonzero)."""
    k = 0
    if not (x & np.uint64(0xFFFFFFFF)):
        x >>= np.uint64(32)
        k += 32
    if not (x & np.uint64(0xFFFF)):
        x >>= np.uint64(16)
        k += 16
    if not (x & np.uint64(0xFF)):
        x >>= np.uint64(8)
        k += 8
    if not (x & np.uint64(0xF)):
        x >>= np.uint64(4)
        k += 4
    if not (x & np.uint64(0x3)):
        x >>= np.uint64(2)
        k += 2
    if not (x & np.uint64(0x1)):
        k += 1
    return k


@njit(cache=True)
def _grow(keys: np.ndarray, used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cap = used.shape[0] * 2
    nk = np.zeros((cap, keys.shape[1]), dtype=np.uint64)
    nu = np.zeros(cap, dtype=np.bool_)
    for i in range(used.shape[0]):
        if used[i]:
            j = _slot(nk, nu, keys[i])
            nk[j] = keys[i]
            nu[j] = True
    return nk, nu


@njit(cache=True)
def _step(v, rem, alloc, disc, ip_ptr, ip_slot):  # type: ignore[no-untyped-def]
    """Bytes ``v`` allocates: ``alloc[v]``, less ``disc[v]`` when a slot it may
    overwrite in place has ``v`` as its last remaining reader."""
    if disc[v]:
        for k in range(ip_ptr[v], ip_ptr[v + 1]):
            if rem[ip_slot[k]] == 1:
                return alloc[v] - disc[v]
    return alloc[v]


@njit(cache=True)
def _apply(v, mask, r, keep, out_ptr, out_slot, free_ptr, free_slot, slot_size, rem, live,  # type: ignore[no-untyped-def]
           inv_ptr, inv_node, inv_size, pending, succ_ptr, succ_node, indeg, rdy):
    one = np.uint64(1)
    mask[v >> 6] |= one << np.uint64(v & 63)
    rdy[v >> 6] &= ~(one << np.uint64(v & 63))
    for k in range(succ_ptr[v], succ_ptr[v + 1]):
        x = succ_node[k]
        indeg[x] -= 1
        if indeg[x] == 0:
            rdy[x >> 6] |= one << np.uint64(x & 63)
    r += keep[v]
    for k in range(out_ptr[v], out_ptr[v + 1]):
        live[out_slot[k]] = True
    for k in range(free_ptr[v], free_ptr[v + 1]):
        s = free_slot[k]
        rem[s] -= 1
        if rem[s] == 0:
            r -= slot_size[s]
            live[s] = False
    for k in range(inv_ptr[v], inv_ptr[v + 1]):
        pending[inv_node[k]] -= inv_size[k]
    return r


@njit(cache=True)
def _undo(v, mask, r, keep, out_ptr, out_slot, free_ptr, free_slot, slot_size, rem, live,  # type: ignore[no-untyped-def]
          inv_ptr, inv_node, inv_size, pending, succ_ptr, succ_node, indeg, rdy):
    one = np.uint64(1)
    for k in range(succ_ptr[v], succ_ptr[v + 1]):
        x = succ_node[k]
        if indeg[x] == 0:
            rdy[x >> 6] &= ~(one << np.uint64(x & 63))
        indeg[x] += 1
    rdy[v >> 6] |= one << np.uint64(v & 63)
    for k in range(inv_ptr[v], inv_ptr[v + 1]):
        pending[inv_node[k]] += inv_size[k]
    for k in range(free_ptr[v], free_ptr[v + 1]):
        s = free_slot[k]
        if rem[s] == 0:
            r += slot_size[s]
            live[s] = True
        rem[s] += 1
    for k in range(out_ptr[v], out_ptr[v + 1]):
        live[out_slot[k]] = False
    r -= keep[v]
    mask[v >> 6] &= ~(np.uint64(1) << np.uint64(v & 63))
    return r


@njit(cache=True)
def search(
    succ_ptr: np.ndarray,  # [n + 1] CSR into succ_node
    succ_node: np.ndarray,  # successors of each node
    indeg0: np.ndarray,  # [n] predecessors of each node
    descself: np.ndarray,  # [n, W] uint64: the node and its descendants
    alloc: np.ndarray,  # [n] bytes allocated at the node's step
    disc: np.ndarray,  # [n] bytes an in-place write saves at the step
    ip_ptr: np.ndarray,  # [n + 1] CSR into ip_slot
    ip_slot: np.ndarray,  # slots the node may overwrite once it is their last reader
    keep: np.ndarray,  # [n] of those, bytes resident after it
    free_ptr: np.ndarray,  # [n + 1] CSR into free_slot
    free_slot: np.ndarray,  # tensor slots the node reads (freed by the last reader)
    out_ptr: np.ndarray,  # [n + 1] CSR into out_slot
    out_slot: np.ndarray,  # tensor slots the node produces
    slot_size: np.ndarray,  # [S] bytes
    slot_cons: np.ndarray,  # [S, W] uint64: readers of the slot in the piece
    rem0: np.ndarray,  # [S] readers in the piece
    live0: np.ndarray,  # [S] bool: resident when the piece starts
    ancself: np.ndarray,  # [n, W] uint64: the node and its ancestors
    inv_ptr: np.ndarray,  # [n + 1] CSR into inv_node/inv_size
    inv_node: np.ndarray,  # a strict descendant of the node ...
    inv_size: np.ndarray,  # ... and bytes the node produces that are live at it
    pending0: np.ndarray,  # [n] sum of inv_size over the node's ancestors
    first_extra: int,
    lower: int,  # a lower bound on the peak
    best_peak: int,  # peak of best_order (the upper bound)
    best_order: np.ndarray,  # [n] in: an order with best_peak; out: the best found
    deadline: int,  # cycle counter value to stop at
    max_expand: int,  # sets to expand at most (0: no limit)
    max_states: int,  # failed sets to record at most
) -> tuple[int, int, int]:
    """``(status, best peak, sets expanded)``; see the module docstring.

    One function by design, longer than the project's 80 lines: the search is
    one loop over an explicit stack of depths (``state`` says which phase runs
    next: enter a set, try its next candidate, fail back), with the per-depth
    candidates in ``cand``/``ncand``/``ci``. Every phase reads the arrays above
    and moves the scalars ``r``, ``plen``, ``depth``, ``state``, ``stored``,
    ``expanded`` and ``threshold`` that the next phase reads; a numba function
    cannot assign its caller's scalars, so each phase as a helper would take
    those arrays and return the scalars as a tuple, at every set. The steps
    that change one scalar at most are helpers already (:func:`_apply`,
    :func:`_step`, :func:`_slot`, ...).
    """
    n, w_count = descself.shape
    nslots = slot_size.shape[0]
    keys = np.zeros((1024, w_count), dtype=np.uint64)
    used = np.zeros(1024, dtype=np.bool_)
    stored = 0
    mask = np.zeros(w_count, dtype=np.uint64)
    rem = rem0.copy()
    live = live0.copy()
    path = np.zeros(n, dtype=np.int64)
    lv_start = np.zeros(n + 1, dtype=np.int64)
    lv_end = np.zeros(n + 1, dtype=np.int64)
    cand = np.zeros((n + 1, n), dtype=np.int64)
    ncand = np.zeros(n + 1, dtype=np.int64)
    ci = np.zeros(n + 1, dtype=np.int64)
    ckey1 = np.zeros(n, dtype=np.int64)
    ckey2 = np.zeros(n, dtype=np.int64)
    need = np.zeros(n, dtype=np.int64)
    hold = np.zeros(w_count, dtype=np.uint64)
    pending = pending0.copy()
    indeg = indeg0.copy()
    rdy = np.zeros(w_count, dtype=np.uint64)
    one = np.uint64(1)
    expanded = 0
    threshold = best_peak - 1
    while threshold >= lower:
        # a fresh descent under ``threshold``
        for w in range(w_count):
            mask[w] = 0
        for s in range(nslots):
            rem[s] = rem0[s]
            live[s] = live0[s]
        for w in range(w_count):
            rdy[w] = 0
        for v in range(n):
            pending[v] = pending0[v]
            indeg[v] = indeg0[v]
            if indeg0[v] == 0:
                rdy[v >> 6] |= one << np.uint64(v & 63)
        r = 0
        plen = 0
        depth = 0
        state = _ENTER
        found = False
        timed_out = False
        while True:
            if state == _ENTER:
                lv_start[depth] = plen
                lv_end[depth] = plen
                j = _slot(keys, used, mask)
                if used[j]:
                    state = _FAIL
                    continue
                # nodes that fit and do not raise the resident bytes: run them now
                progressed = True
                while progressed:
                    progressed = False
                    for w in range(w_count):
                        c = rdy[w]
                        while c:
                            low = c & (~c + one)
                            c ^= low
                            v = (w << 6) + _ctz(low)
                            m = r + _step(v, rem, alloc, disc, ip_ptr, ip_slot) + (first_extra if plen == 0 else 0)
                            if m > threshold:
                                continue
                            d = keep[v]
                            for k in range(free_ptr[v], free_ptr[v + 1]):
                                if rem[free_slot[k]] == 1:
                                    d -= slot_size[free_slot[k]]
                            if d > 0:
                                continue
                            r = _apply(v, mask, r, keep, out_ptr, out_slot, free_ptr, free_slot, slot_size,
                                       rem, live, inv_ptr, inv_node, inv_size, pending, succ_ptr, succ_node,
                                       indeg, rdy)
                            path[plen] = v
                            plen += 1
                            progressed = True
                            break
                        if progressed:
                            break
                lv_end[depth] = plen
                if plen == n:
                    found = True
                    break
                if plen > lv_start[depth]:
                    j = _slot(keys, used, mask)
                    if used[j]:
                        state = _FAIL
                        continue
                expanded += 1
                if (expanded & 63) == 0:
                    if cycles() > deadline or (max_expand > 0 and expanded > max_expand):
                        timed_out = True
                        break
                # lower bound on the steps still to come: per node not yet run,
                # r + its outputs - resident tensors nobody at or after it reads
                # + what its ancestors still have to produce for it
                for v in range(n):
                    need[v] = r + alloc[v] - disc[v] + pending[v]
                for s in range(nslots):
                    if not live[s]:
                        continue
                    # nodes at or before an unrun reader of s still hold it
                    for w in range(w_count):
                        hold[w] = 0
                    for w in range(w_count):
                        c = slot_cons[s, w] & ~mask[w]
                        while c:
                            low = c & (~c + one)
                            u = (w << 6) + _ctz(low)
                            for x in range(w_count):
                                hold[x] |= ancself[u, x]
                            c ^= low
                    for w in range(w_count):
                        c = ~hold[w] & ~mask[w]
                        if w == w_count - 1 and (n & 63):
                            c &= (one << np.uint64(n & 63)) - one
                        while c:
                            low = c & (~c + one)
                            need[(w << 6) + _ctz(low)] -= slot_size[s]
                            c ^= low
                dead = False
                for v in range(n):
                    if not ((mask[v >> 6] >> np.uint64(v & 63)) & one) and need[v] > threshold:
                        dead = True
                        break
                if dead:
                    state = _FAIL
                    continue
                # the ready nodes that fit, fewest resident bytes after first
                k2 = 0
                wq = 0
                cq = rdy[0]
                while True:
                    while cq == 0 and wq + 1 < w_count:
                        wq += 1
                        cq = rdy[wq]
                    if cq == 0:
                        break
                    low = cq & (~cq + one)
                    cq ^= low
                    v = (wq << 6) + _ctz(low)
                    m = r + _step(v, rem, alloc, disc, ip_ptr, ip_slot) + (first_extra if plen == 0 else 0)
                    if m > threshold:
                        continue
                    d = keep[v]
                    for k in range(free_ptr[v], free_ptr[v + 1]):
                        if rem[free_slot[k]] == 1:
                            d -= slot_size[free_slot[k]]
                    # insertion sort by (d, m)
                    i = k2
                    while i > 0 and (ckey1[i - 1] > d or (ckey1[i - 1] == d and ckey2[i - 1] > m)):
                        ckey1[i] = ckey1[i - 1]
                        ckey2[i] = ckey2[i - 1]
                        cand[depth, i] = cand[depth, i - 1]
                        i -= 1
                    ckey1[i] = d
                    ckey2[i] = m
                    cand[depth, i] = v
                    k2 += 1
                ncand[depth] = k2
                ci[depth] = 0
                state = _NEXT
            elif state == _NEXT:
                if ci[depth] < ncand[depth]:
                    v = cand[depth, ci[depth]]
                    ci[depth] += 1
                    r = _apply(v, mask, r, keep, out_ptr, out_slot, free_ptr, free_slot, slot_size,
                               rem, live, inv_ptr, inv_node, inv_size, pending, succ_ptr, succ_node, indeg, rdy)
                    path[plen] = v
                    plen += 1
                    depth += 1
                    state = _ENTER
                else:
                    state = _FAIL
            else:  # _FAIL: record the set (after and before the forced run), back up
                for rep in range(2):
                    if rep == 1 and lv_end[depth] == lv_start[depth]:
                        break
                    if stored < max_states:
                        j = _slot(keys, used, mask)
                        if not used[j]:
                            keys[j] = mask
                            used[j] = True
                            stored += 1
                            if stored * 2 > used.shape[0]:
                                keys, used = _grow(keys, used)
                    while plen > lv_start[depth]:
                        plen -= 1
                        r = _undo(path[plen], mask, r, keep, out_ptr, out_slot, free_ptr, free_slot,
                                  slot_size, rem, live, inv_ptr, inv_node, inv_size, pending, succ_ptr, succ_node, indeg, rdy)
                if depth == 0:
                    break
                depth -= 1
                plen -= 1
                r = _undo(path[plen], mask, r, keep, out_ptr, out_slot, free_ptr, free_slot,
                          slot_size, rem, live, inv_ptr, inv_node, inv_size, pending, succ_ptr, succ_node, indeg, rdy)
                state = _NEXT
        if timed_out:
            return TIMEOUT, best_peak, expanded
        if not found:
            return PROVEN, best_peak, expanded
        # the peak of the order found
        for s in range(nslots):
            rem[s] = rem0[s]
        r = 0
        peak = -(1 << 62)
        for i in range(n):
            v = path[i]
            m = r + _step(v, rem, alloc, disc, ip_ptr, ip_slot) + (first_extra if i == 0 else 0)
            if m > peak:
                peak = m
            r += keep[v]
            for k in range(free_ptr[v], free_ptr[v + 1]):
                s = free_slot[k]
                rem[s] -= 1
                if rem[s] == 0:
                    r -= slot_size[s]
            best_order[i] = v
        best_peak = peak
        threshold = peak - 1
    return PROVEN, best_peak, expanded
