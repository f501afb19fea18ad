"""The compiled lowest-first dive: :func:`onnxmem.core.solvers.skyline.dive`'s loop.

The same steps as the numpy dive (its module docstring), on the non-empty buffers'
arrays, with the same keys and the same choices, so that both give the same plan or
both fail (``tests/test_solvers.py`` holds them to each other). Where the numpy dive
keeps an n x n overlap matrix and sorts the keys of every unplaced buffer, this
tests the overlaps of the buffer just placed and keeps the ``tries`` lowest keys in
a small sorted array: O(n + sections) a buffer placed, and no n x n memory.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _lowest_keys(cand: np.ndarray, tries: int, minoff: np.ndarray, sz: np.ndarray, rank: np.ndarray,
                 unplaced: np.ndarray, scale: int) -> tuple[int, int]:
    """The unplaced buffers of the ``tries`` lowest keys ``minoff * scale + rank`` into
    ``cand``, lowest first: ``(how many, the lowest top any unplaced buffer could have)``."""
    keys = np.empty(tries, dtype=np.int64)
    ncand = 0
    lowest_top = np.int64(2**62)
    for j in range(minoff.shape[0]):
        if not unplaced[j]:
            continue
        top = minoff[j] + sz[j]
        if top < lowest_top:
            lowest_top = top
        key = minoff[j] * scale + rank[j]
        if ncand == tries and key >= keys[ncand - 1]:
            continue
        i = ncand if ncand < tries else tries - 1  # insert, dropping the last when full
        while i > 0 and keys[i - 1] > key:
            keys[i] = keys[i - 1]
            cand[i] = cand[i - 1]
            i -= 1
        keys[i] = key
        cand[i] = j
        if ncand < tries:
            ncand += 1
    return ncand, int(lowest_top)


@njit(cache=True)
def _fits(b: int, o: int, capacity: int, sz: np.ndarray, slo: np.ndarray, shi: np.ndarray, ptop: np.ndarray,
          total: np.ndarray) -> bool:
    """The cross-section check of ``b`` at offset ``o`` (step 3)."""
    top = o + sz[b]
    for s in range(ptop.shape[0]):
        if slo[b] <= s < shi[b]:
            need = max(ptop[s], top) + total[s] - sz[b]
        else:
            need = max(ptop[s], o) + total[s]
        if need > capacity:
            return False
    return True


@njit(cache=True)
def dive(st: np.ndarray, en: np.ndarray, sz: np.ndarray, al: np.ndarray, rank: np.ndarray, slo: np.ndarray,
         shi: np.ndarray, nsec: int, capacity: int, tries: int, scale: int) -> tuple[np.ndarray, bool]:
    """``(offsets, placed)`` of the non-empty buffers ``st, en, sz, al`` (ranks ``rank``, time
    sections ``[slo, shi)`` of ``nsec``): ``placed`` false where the dive fails."""
    m = sz.shape[0]
    total = np.zeros(nsec, dtype=np.int64)  # bytes still unplaced per section
    for b in range(m):
        for s in range(slo[b], shi[b]):
            total[s] += sz[b]
    ptop = np.zeros(nsec, dtype=np.int64)  # highest placed top per section
    minoff = np.zeros(m, dtype=np.int64)
    loc = np.full(m, -1, dtype=np.int64)
    unplaced = np.ones(m, dtype=np.bool_)
    cand = np.empty(max(tries, 1), dtype=np.int64)
    for _ in range(m):
        ncand, lowest_top = _lowest_keys(cand, tries, minoff, sz, rank, unplaced, scale)
        chosen = -1
        for c in range(ncand):
            b = cand[c]
            o = minoff[b]
            if o >= lowest_top:
                break
            if o + sz[b] > capacity:
                continue
            if _fits(b, o, capacity, sz, slo, shi, ptop, total):
                chosen = b
                break
        if chosen < 0:
            return loc, False
        b = chosen
        top = minoff[b] + sz[b]
        loc[b] = minoff[b]
        unplaced[b] = False
        for s in range(slo[b], shi[b]):
            total[s] -= sz[b]
            if ptop[s] < top:
                ptop[s] = top
        for j in range(m):
            if unplaced[j] and st[b] < en[j] and st[j] < en[b]:
                a = al[j]
                up = -(-top // a) * a
                if minoff[j] < up:
                    minoff[j] = up
    return loc, True
