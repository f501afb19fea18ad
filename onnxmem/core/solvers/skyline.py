"""Lowest-first dives: one greedy descent of the ``exact`` search.

Where the greedy family takes buffers in a fixed order and drops each into a
gap, a dive builds the arena from the bottom up, as the exact search's first
descent does (see :mod:`._search`), but never backs up:

1. every unplaced buffer has a lowest offset ``minoff``: the top of the
   highest placed buffer it overlaps in time, aligned up (0 at first);
2. the candidates are the unplaced buffers sorted by ``(minoff, rank)``, where
   the rank comes from one of the search's preorders
   (:data:`.greedy.PREORDERS`);
   a candidate whose ``minoff`` reaches the lowest top any unplaced buffer
   could have is not tried (it would leave a gap that buffer fits);
3. the first of at most ``tries`` candidates that passes the cross-section
   check is placed at its ``minoff``: in every time section, the offset
   below which nothing more can go, plus the bytes still unplaced there, must
   fit the capacity;
4. when no candidate passes, or a top passes the capacity, the dive fails.

A dive costs O(n) operations per buffer (O(n^2) in all), so it is meant for
problems of up to a few thousand buffers. Where the kernels are compiled ahead
of time (:func:`onnxmem.core._native.mode`), the compiled loop
(:mod:`._dive`) runs it; else the numpy loop here (with an n x n overlap
matrix), so that :func:`.exact.auto` runs it before it loads any compiled
code. Both make the same choices (``tests/test_solvers.py``). Guarantee: a
returned plan is valid and fits the capacity; a dive that fails proves nothing.
"""

from __future__ import annotations

import numpy as np

from onnxmem.core.problem import Problem, time_sections
from onnxmem.core.solvers.greedy import PREORDERS, preorder

__all__ = ["PREORDERS", "dive", "preorder"]

def dive(problem: Problem, capacity: int, order: np.ndarray, tries: int = 8) -> np.ndarray | None:
    """Offsets (int64, buffer order) of a lowest-first plan within ``capacity``.

    ``order`` ranks the buffers (a permutation of their indices, best first).
    Returns ``None`` when the dive fails (see the module docstring). Pinned
    buffers are not supported: the caller must not pass them.
    """
    if tries < 1:
        raise ValueError(f"a dive tries at least one candidate a step, not {tries}")
    start, end, size, align = problem.arrays()
    n = len(size)
    off = np.zeros(n, dtype=np.int64)
    live = np.nonzero(size > 0)[0]
    if len(live) == 0:
        return off
    if size.max() > capacity:
        return None
    # work on the non-empty buffers only
    st, en, sz, al = start[live], end[live], size[live], align[live]
    rank_all = np.empty(n, dtype=np.int64)
    rank_all[np.asarray(order, dtype=np.int64)] = np.arange(n)
    rank = rank_all[live]
    points, slo, shi = time_sections(st, en)
    nsec = len(points) - 1
    from onnxmem.core._native import kernels, mode

    if mode() == "aot":  # compiled ahead of time: it loads at no cost
        loc, placed = kernels("onnxmem.core.solvers._dive").dive(
            st, en, sz, al, rank, slo, shi, nsec, int(capacity), int(tries), n)
        if not placed:
            return None
    else:
        found = _numpy_dive(st, en, sz, al, rank, slo, shi, nsec, capacity, tries, n)
        if found is None:
            return None
        loc = found
    off[live] = loc
    return off


def _numpy_dive(st: np.ndarray, en: np.ndarray, sz: np.ndarray, al: np.ndarray, rank: np.ndarray,
                slo: np.ndarray, shi: np.ndarray, nsec: int, capacity: int, tries: int,
                n: int) -> np.ndarray | None:
    """The dive's loop in numpy (steps 1 to 4): the non-empty buffers' offsets, or ``None``."""
    m = len(sz)
    overlap = (st[:, None] < en[None, :]) & (st[None, :] < en[:, None])
    delta = np.zeros(nsec + 1, dtype=np.int64)
    np.add.at(delta, slo, sz)
    np.add.at(delta, shi, -sz)
    total = np.cumsum(delta)[:nsec]  # bytes still unplaced per section
    ptop = np.zeros(nsec, dtype=np.int64)  # highest placed top per section
    minoff = np.zeros(m, dtype=np.int64)
    loc = np.full(m, -1, dtype=np.int64)
    unplaced = np.ones(m, dtype=bool)
    scale = np.int64(n)  # ranks run over all n buffers, the empty ones too
    for _ in range(m):
        idx = np.flatnonzero(unplaced)
        key = minoff[idx] * scale + rank[idx]  # distinct: the ranks are
        if len(idx) > tries:  # only the first ``tries`` are tried: those alone are sorted
            first = np.argpartition(key, tries - 1)[:tries]
            cand = idx[first[np.argsort(key[first])]]
        else:
            cand = idx[np.argsort(key)]
        lowest_top = int((minoff[idx] + sz[idx]).min())
        chosen = -1
        for b in cand.tolist():
            o = int(minoff[b])
            if o >= lowest_top:
                break
            top = o + int(sz[b])
            if top > capacity:
                continue
            lo, hi = slo[b], shi[b]
            need = np.maximum(ptop, o) + total
            need[lo:hi] = np.maximum(ptop[lo:hi], top) + total[lo:hi] - sz[b]
            if int(need.max()) <= capacity:
                chosen = b
                break
        if chosen < 0:
            return None
        b = chosen
        o = int(minoff[b])
        top = o + int(sz[b])
        loc[b] = o
        unplaced[b] = False
        lo, hi = slo[b], shi[b]
        total[lo:hi] -= sz[b]
        np.maximum(ptop[lo:hi], top, out=ptop[lo:hi])
        nb = np.flatnonzero(overlap[b] & unplaced)
        if len(nb):
            a = al[nb]
            minoff[nb] = np.maximum(minoff[nb], -(-top // a) * a)
    return loc
