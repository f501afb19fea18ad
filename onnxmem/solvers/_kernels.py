"""Compiled (numba) kernels of the greedy family.

Imported only when a compiled placement is needed (see :class:`.greedy.Placer`),
so that importing :mod:`onnxmem.solvers`, and solving small problems the
plain greedy already solves, never loads numba. The kernels are cached on
disk (``cache=True``): the first call after an install compiles them once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._cyclecounter import cycles

__all__ = ["Bufs", "Covers", "cover_lists", "lowest_first", "place"]

#: ``(start, end, size, align)``, int64, one entry per buffer
Bufs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: ``(ss, pos, cover_ptr, cover)`` from :func:`cover_lists`
Covers = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@njit(cache=True)
def cover_lists(start: np.ndarray, end: np.ndarray, size: np.ndarray) -> Covers:
    """Start-sorted order, and for each buffer the earlier ones still live at its start.

    Returns ``(ss, pos, cover_ptr, cover)``: ``ss`` sorts buffers by start
    (stable), ``pos[i]`` is buffer i's place in it, and ``cover[cover_ptr[i]:
    cover_ptr[i + 1]]`` lists the buffers before i in ``ss`` (non-empty) that
    are live at ``start[i]``. Cost: O(n log n + overlapping pairs).
    """
    n = size.shape[0]
    ss = np.argsort(start, kind="mergesort")
    pos = np.empty(n, dtype=np.int64)
    for p in range(n):
        pos[ss[p]] = p
    cover_ptr = np.zeros(n + 1, dtype=np.int64)
    active = np.empty(n, dtype=np.int64)
    na = 0
    for p in range(n):
        i = ss[p]
        k = 0
        for q in range(na):
            j = active[q]
            if end[j] > start[i]:
                active[k] = j
                k += 1
        na = k
        cover_ptr[i + 1] = na
        if size[i] > 0:
            active[na] = i
            na += 1
    for i in range(n):
        cover_ptr[i + 1] += cover_ptr[i]
    cover = np.empty(cover_ptr[n], dtype=np.int32)
    na = 0
    for p in range(n):
        i = ss[p]
        k = 0
        for q in range(na):
            j = active[q]
            if end[j] > start[i]:
                active[k] = j
                k += 1
        na = k
        base = cover_ptr[i]
        for q in range(na):
            cover[base + q] = active[q]
        if size[i] > 0:
            active[na] = i
            na += 1
    return ss, pos, cover_ptr, cover


@njit(cache=True)
def place(
    order: np.ndarray, best_fit: bool, fixed: np.ndarray, bufs: Bufs, covers: Covers, deadline: int,
) -> tuple[np.ndarray, bool]:
    """Offsets from placing buffers in ``order`` (see :mod:`.greedy`), and
    whether the plan is complete (past ``deadline``, on
    :func:`onnxmem._compiled.cycles`, it stops early with partial offsets).

    ``fixed``: the pinned offset of each buffer, -1 where free; ``bufs``:
    ``(start, end, size, align)``; ``covers``: :func:`cover_lists`'s answer.
    """
    start, end, size, align = bufs
    ss, pos, cover_ptr, cover = covers
    n = size.shape[0]
    off = fixed.copy()
    placed = off >= 0
    blo = np.empty(n, dtype=np.int64)
    bhi = np.empty(n, dtype=np.int64)
    key = np.empty(n, dtype=np.int64)
    for t in range(order.shape[0]):
        if (t & 255) == 255 and cycles() > deadline:
            return off, False
        i = order[t]
        if placed[i]:
            continue
        placed[i] = True
        sz = size[i]
        if sz == 0:
            off[i] = 0
            continue
        a = align[i]
        k = 0
        for c in range(cover_ptr[i], cover_ptr[i + 1]):
            j = cover[c]
            if placed[j]:
                blo[k] = off[j]
                bhi[k] = off[j] + size[j]
                k += 1
        for p in range(pos[i] + 1, n):
            j = ss[p]
            if start[j] >= end[i]:
                break
            if placed[j] and size[j] > 0:
                blo[k] = off[j]
                bhi[k] = off[j] + size[j]
                k += 1
        best = -1
        best_gap = -1
        top = 0
        if k > 0:
            # sort (low, high) pairs by low: pack the pair's slot into the key
            for q in range(k):
                key[q] = (blo[q] << 22) | q
            ks = np.sort(key[:k])
            for q in range(k):
                r = ks[q] & 0x3FFFFF
                low = blo[r]
                if low > top:
                    cand = top if a <= 1 else -(-top // a) * a
                    if cand + sz <= low:
                        gap = low - top
                        if best < 0 or gap < best_gap:
                            best = cand
                            best_gap = gap
                            if not best_fit:
                                break
                if bhi[r] > top:
                    top = bhi[r]
        if best < 0:
            best = top if a <= 1 else -(-top // a) * a
        off[i] = best
    return off, True


@njit(cache=True)
def _heap_push(heap: np.ndarray, count: int, key: int) -> int:
    heap[count] = key
    i = count
    while i > 0:
        parent = (i - 1) >> 1
        if heap[parent] <= heap[i]:
            break
        heap[parent], heap[i] = heap[i], heap[parent]
        i = parent
    return count + 1


@njit(cache=True)
def _heap_pop(heap: np.ndarray, count: int) -> tuple[np.int64, int]:
    top = heap[0]
    count -= 1
    heap[0] = heap[count]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= count:
            break
        if child + 1 < count and heap[child + 1] < heap[child]:
            child += 1
        if heap[i] <= heap[child]:
            break
        heap[i], heap[child] = heap[child], heap[i]
        i = child
    return top, count


@njit(cache=True)
def lowest_first(
    ranked: np.ndarray, shift: int, bufs: Bufs, covers: Covers, off0: np.ndarray, deadline: int,
) -> tuple[np.ndarray, bool]:
    """Offsets of a lowest-first plan: the buffer that can sit lowest goes next.

    ``off0`` gives the buffers already placed (their offsets) and the ones to
    place (-1); ``ranked`` lists the ones to place, best rank first (ties
    between equal lowest offsets go to the better rank). A buffer's lowest
    offset ``minoff`` starts at the top of the highest placed buffer it
    overlaps in time (so a plan is only rebuilt above the buffers kept, as
    :mod:`.repair` does). A heap holds one key ``minoff << shift | rank`` per
    unplaced buffer; ``minoff`` only grows, so a popped key that is out of date
    is pushed back with the current value (lazy update), and a key that is up
    to date is the true minimum. The caller guarantees that every offset fits
    in ``62 - shift`` bits. Returns the offsets and whether the plan is
    complete: past ``deadline`` (on :func:`onnxmem._compiled.cycles`) it stops
    early and the offsets are partial.
    """
    start, end, size, align = bufs
    ss, pos, cover_ptr, cover = covers
    n = size.shape[0]
    m = ranked.shape[0]
    off = off0.copy()
    minoff = np.zeros(n, dtype=np.int64)
    heap = np.empty(m + 1, dtype=np.int64)
    count = 0
    for q in range(m):
        b = ranked[q]
        low = np.int64(0)
        for c in range(cover_ptr[b], cover_ptr[b + 1]):
            j = cover[c]
            if off[j] >= 0 and off[j] + size[j] > low:
                low = off[j] + size[j]
        for p in range(pos[b] + 1, n):
            j = ss[p]
            if start[j] >= end[b]:
                break
            if size[j] > 0 and off[j] >= 0 and off[j] + size[j] > low:
                low = off[j] + size[j]
        a = align[b]
        minoff[b] = low if a <= 1 else -(-low // a) * a
        count = _heap_push(heap, count, (minoff[b] << shift) | q)
    mask = (np.int64(1) << shift) - 1
    pops = 0
    while count > 0:
        pops += 1
        if (pops & 1023) == 0 and cycles() > deadline:
            return off, False
        key, count = _heap_pop(heap, count)
        r = key & mask
        b = ranked[r]
        o = key >> shift
        if o != minoff[b]:
            count = _heap_push(heap, count, (minoff[b] << shift) | r)
            continue
        if size[b] == 0:
            off[b] = 0
            continue
        off[b] = o
        top = o + size[b]
        for c in range(cover_ptr[b], cover_ptr[b + 1]):
            j = cover[c]
            if off[j] < 0 and minoff[j] < top:
                a = align[j]
                minoff[j] = top if a <= 1 else -(-top // a) * a
        for p in range(pos[b] + 1, n):
            j = ss[p]
            if start[j] >= end[b]:
                break
            if size[j] > 0 and off[j] < 0 and minoff[j] < top:
                a = align[j]
                minoff[j] = top if a <= 1 else -(-top // a) * a
    return off, True
