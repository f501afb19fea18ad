"""Compiled (numba) kernels of the greedy family.

Imported only when a compiled placement is needed (see :class:`.greedy.Placer`),
so that importing :mod:`onnxmem.solvers`, and solving small problems the
plain greedy already solves, never loads numba. The kernels are cached on
disk (``cache=True``): the first call after an install compiles them once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["cover_lists", "place"]


@njit(cache=True)
def cover_lists(start: np.ndarray, end: np.ndarray, size: np.ndarray):  # type: ignore[no-untyped-def]
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
    order: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    size: np.ndarray,
    align: np.ndarray,
    fixed: np.ndarray,
    best_fit: bool,
    ss: np.ndarray,
    pos: np.ndarray,
    cover_ptr: np.ndarray,
    cover: np.ndarray,
) -> np.ndarray:
    n = size.shape[0]
    off = fixed.copy()
    placed = off >= 0
    blo = np.empty(n, dtype=np.int64)
    bhi = np.empty(n, dtype=np.int64)
    key = np.empty(n, dtype=np.int64)
    for t in range(order.shape[0]):
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
    return off
