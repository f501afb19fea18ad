"""Compiled (numba) kernels of the greedy family.

Imported only when a compiled placement is needed (see :class:`.greedy.Placer`),
so that importing :mod:`onnxmem.core.solvers`, and solving small problems the
plain greedy already solves, never loads numba. The kernels are cached on
disk (``cache=True``): the first call after an install compiles them once.

:func:`lowest_first` places buffers one at a time, the one with the lowest
``minoff`` next (ties to the better rank). A buffer's ``minoff`` is the top of
the highest placed buffer it overlaps in time, aligned up (so a plan is only
rebuilt above the buffers kept); ``secs`` gives each buffer's time sections
``[slo, shi)``, the intervals between consecutive lifetime end points. It
keeps the *skyline* (the highest placed top in each section) in a segment tree
with range raises and range maxima, so a buffer's ``minoff`` is one range
maximum over its sections and a placement one range raise: O(log sections)
each, whatever the number of buffers a long lifetime overlaps. A heap holds
one key ``minoff << shift | rank`` per group of unplaced buffers with the same
lifetime and alignment (the group's best rank; the next one takes its place
when it is placed). ``minoff`` only grows, so a popped key is checked against
the skyline and, when out of date, pushed back with the current value (lazy
update); a key that is up to date is the true minimum.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from onnxmem.core._cyclecounter import past

__all__ = ["Bufs", "Covers", "Sections", "cover_lists", "lowest_first", "place"]

#: ``(start, end, size, align)``, int64, one entry per buffer
Bufs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: ``(ss, pos, cover_ptr, cover)`` from :func:`cover_lists`
Covers = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: ``(slo, shi)``: each buffer's time sections ``[slo, shi)`` (see :func:`lowest_first`)
Sections = tuple[np.ndarray, np.ndarray]


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
    whether the plan is complete (past ``deadline``, a step limit or a
    cycle-counter deadline (:func:`onnxmem.core._cyclecounter.past`), it stops
    early with partial offsets).

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
        if (t & 255) == 255 and past(t, deadline):
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
def _tree_raise(tmax: np.ndarray, tag: np.ndarray, half: int, lo: int, hi: int, value: int) -> None:
    """Raise every entry of ``[lo, hi)`` to at least ``value`` (see :func:`lowest_first`).

    The tree: leaf ``half + s`` is section ``s``; ``tag[x]`` is the largest
    raise applied to all of node ``x``'s range, ``tmax[x]`` the largest entry
    of that range counting the raises at ``x`` and below (the raises at its
    ancestors are read on the way down, :func:`_tree_max`).
    """
    if lo >= hi:
        return
    a = lo + half
    b = hi + half
    while a < b:
        if a & 1:
            if value > tmax[a]:
                tmax[a] = value
            if value > tag[a]:
                tag[a] = value
            a += 1
        if b & 1:
            b -= 1
            if value > tmax[b]:
                tmax[b] = value
            if value > tag[b]:
                tag[b] = value
        a >>= 1
        b >>= 1
    # the ancestors of both ends: their maxima take the raised children in
    for x in (lo + half, hi - 1 + half):
        x >>= 1
        while x >= 1:
            m = tmax[2 * x]
            if tmax[2 * x + 1] > m:
                m = tmax[2 * x + 1]
            if tag[x] > m:
                m = tag[x]
            tmax[x] = m
            x >>= 1


@njit(cache=True)
def _tree_max(tmax: np.ndarray, tag: np.ndarray, half: int, lo: int, hi: int) -> int:
    """The largest entry of ``[lo, hi)`` (0 for an empty range)."""
    out = np.int64(0)
    if lo >= hi:
        return int(out)
    # the raises recorded at the ancestors of both ends cover entries in range
    for x in (lo + half, hi - 1 + half):
        x >>= 1
        while x >= 1:
            if tag[x] > out:
                out = tag[x]
            x >>= 1
    a = lo + half
    b = hi + half
    while a < b:
        if a & 1:
            if tmax[a] > out:
                out = tmax[a]
            a += 1
        if b & 1:
            b -= 1
            if tmax[b] > out:
                out = tmax[b]
        a >>= 1
        b >>= 1
    return int(out)


@njit(cache=True)
def _minoff(tmax: np.ndarray, tag: np.ndarray, half: int, secs: Sections, align: np.ndarray, b: int) -> int:
    """Buffer ``b``'s lowest offset: the skyline's maximum over its sections, aligned up."""
    low = _tree_max(tmax, tag, half, secs[0][b], secs[1][b])
    a = align[b]
    return low if a <= 1 else -(-low // a) * a


@njit(cache=True)
def lowest_first(
    ranked: np.ndarray, shift: int, bufs: Bufs, secs: Sections, off0: np.ndarray, deadline: int,
) -> tuple[np.ndarray, bool]:
    """Offsets of a lowest-first plan: the buffer that can sit lowest goes next
    (the least ``(minoff, rank)``; how it is found: the module docstring).

    ``off0``: the offsets of the buffers kept, -1 for those to place; ``ranked``:
    those to place, best rank first; ``secs``: each buffer's time sections. The
    caller guarantees that every offset fits in ``62 - shift`` bits. Returns the
    offsets and whether the plan is complete (past ``deadline``, a step limit or
    a cycle-counter deadline (:func:`onnxmem.core._cyclecounter.past`), the
    offsets are partial).
    """
    size, align = bufs[2], bufs[3]
    slo, shi = secs
    n = size.shape[0]
    m = ranked.shape[0]
    off = off0.copy()
    nsec = 1
    for b in range(n):
        if shi[b] > nsec:
            nsec = shi[b]
    half = 1
    while half < nsec:
        half *= 2
    tmax = np.zeros(2 * half, dtype=np.int64)
    tag = np.zeros(2 * half, dtype=np.int64)
    for b in range(n):  # the buffers kept
        if off[b] >= 0 and size[b] > 0:
            _tree_raise(tmax, tag, half, slo[b], shi[b], off[b] + size[b])
    # buffers of one lifetime (the same sections) and alignment always have
    # the same minoff, so they wait in the heap as one group, best rank
    # first: only the group's best unplaced buffer holds a key (in a section
    # with many short-lived buffers, each placement would otherwise make the
    # others' keys out of date, and each would be popped and pushed back)
    gkey = np.empty(m, dtype=np.int64)
    akey = np.empty(m, dtype=np.int64)
    for q in range(m):
        gkey[q] = slo[ranked[q]] * (nsec + 1) + shi[ranked[q]]
        akey[q] = align[ranked[q]]
    by_align = np.argsort(akey, kind="mergesort")
    # by lifetime, then alignment, then rank (both sorts are stable)
    by_group = by_align[np.argsort(gkey[by_align], kind="mergesort")]
    after = np.full(m, -1, dtype=np.int64)  # the next rank of the same group
    heap = np.empty(m + 1, dtype=np.int64)
    count = 0
    for t in range(m):
        q = by_group[t]
        if t > 0:
            p = by_group[t - 1]
            if gkey[p] == gkey[q] and akey[p] == akey[q]:
                after[p] = q
                continue  # not the group's best
        low = _minoff(tmax, tag, half, secs, align, ranked[q])
        count = _heap_push(heap, count, (low << shift) | q)
    mask = (np.int64(1) << shift) - 1
    pops = 0
    while count > 0:
        pops += 1
        if (pops & 1023) == 0 and past(pops, deadline):
            return off, False
        key, count = _heap_pop(heap, count)
        r = key & mask
        b = ranked[r]
        o = key >> shift
        if size[b] == 0:
            off[b] = 0
        else:
            low = _minoff(tmax, tag, half, secs, align, b)
            if low != o:
                count = _heap_push(heap, count, (low << shift) | r)
                continue
            off[b] = o
            _tree_raise(tmax, tag, half, slo[b], shi[b], o + size[b])
        r = after[r]
        if r >= 0:  # the group's next buffer takes its place in the heap
            b = ranked[r]
            low = _minoff(tmax, tag, half, secs, align, b)
            count = _heap_push(heap, count, (low << shift) | r)
    return off, True
