"""The compiled core of the ``exact`` solver: a depth-first branch and bound.

Everything here works on local integer arrays (see :mod:`.exact` for the
problem layer around it). Time is cut into *sections*, the intervals between
consecutive lifetime end points; buffer ``b`` covers sections
``[slo[b], shi[b])``. The search state is:

- ``off[b]``: the offset of a placed buffer, ``-1`` while unplaced;
- ``minoff[b]``: the lowest offset an unplaced buffer can still take: the top
  of the highest placed buffer it overlaps, aligned up;
- ``floor[s]``: no buffer yet to be placed in section ``s`` can sit below it;
- ``total[s]``: bytes of the unplaced buffers in section ``s``;
- ``cuts[s]``: unplaced buffers that cover both section ``s`` and ``s + 1``.

Every change is pushed on an undo stack and popped when the search backs up.
The rules that keep the search small, each keeping at least one solution
whenever one exists:

1. canonical placement: a buffer is only ever placed at its ``minoff`` (on
   the floor or on top of a buffer it overlaps), and buffers are placed in
   non-decreasing (offset, preorder rank) order;
2. dominance: a buffer whose offset is at or above the lowest top any
   unplaced buffer could reach would leave a gap another buffer fits, so it
   is not tried (the candidates are sorted, so the loop stops there);
3. cross sections: in every section, ``max(floor, offset) + total`` must fit
   the capacity; a section's floor is raised to the lowest ``minoff`` of its
   unplaced buffers;
4. decomposition: when no unplaced buffer crosses a section boundary, the two
   sides are independent; each is searched on its own (with a fresh preorder)
   and the node fails as soon as one side does.

The search returns at the first plan that fits the capacity. It counts nodes
and stops with ``ABORTED`` past a node limit (for restarts with other
preorders) and with ``TIMEOUT`` past a deadline on the cycle counter.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._clock import cycles

FOUND = 0
NOT_FOUND = 1
ABORTED = 2
TIMEOUT = 3

# ctr slots
_NODES, _LIMIT, _DEADLINE, _MO_TOP, _FL_TOP, _STAMP, _BACKTRACKS = range(7)

#: preordering heuristics: keys in priority order, all descending
#: (0: lifetime width, 1: area, 2: largest section total over the lifetime)
HEURISTICS = np.array([[0, 1, 2], [2, 1, 0], [2, 0, 1]], dtype=np.int64)


@njit(cache=True)
def preorder(
    bufs: np.ndarray,
    heur: np.ndarray,
    size: np.ndarray,
    width: np.ndarray,
    slo: np.ndarray,
    shi: np.ndarray,
    total: np.ndarray,
) -> np.ndarray:
    """``bufs`` sorted by the heuristic's keys (descending), ties by index."""
    bufs = np.sort(bufs)
    k = bufs.shape[0]
    order = np.arange(k)
    for h in range(heur.shape[0] - 1, -1, -1):
        code = heur[h]
        key = np.empty(k, dtype=np.int64)
        for q in range(k):
            b = bufs[q]
            if code == 0:
                key[q] = width[b]
            elif code == 1:
                key[q] = size[b] * width[b]
            else:
                m = 0
                for s in range(slo[b], shi[b]):
                    if total[s] > m:
                        m = total[s]
                key[q] = m
        neg = np.empty(k, dtype=np.int64)
        for q in range(k):
            neg[q] = -key[order[q]]
        order = order[np.argsort(neg, kind="mergesort")]
    return bufs[order]


@njit(cache=True)
def search(
    part: np.ndarray,
    sec_lo: int,
    sec_hi: int,
    ordering: np.ndarray,
    min_offset: int,
    min_pre: int,
    capacity: int,
    heur: np.ndarray,
    size: np.ndarray,
    align: np.ndarray,
    width: np.ndarray,
    slo: np.ndarray,
    shi: np.ndarray,
    sec_ptr: np.ndarray,
    sec_mem: np.ndarray,
    ov_ptr: np.ndarray,
    ov_idx: np.ndarray,
    off: np.ndarray,
    minoff: np.ndarray,
    floor: np.ndarray,
    total: np.ndarray,
    cuts: np.ndarray,
    best: np.ndarray,
    mo_b: np.ndarray,
    mo_v: np.ndarray,
    fl_s: np.ndarray,
    fl_v: np.ndarray,
    mark: np.ndarray,
    aff: np.ndarray,
    ctr: np.ndarray,
) -> int:
    """Search placements of ``part`` (buffers in preorder) within sections
    ``[sec_lo, sec_hi)``; ``ordering`` lists preorder ranks still to consider."""
    ctr[_NODES] += 1
    if ctr[_NODES] > ctr[_LIMIT]:
        return ABORTED
    if (ctr[_NODES] & 255) == 0 and cycles() > ctr[_DEADLINE]:
        return TIMEOUT
    # unplaced candidates, sorted by (minoff, preorder rank): nearly sorted
    # already, so an insertion sort is cheap.
    m = 0
    cand = np.empty(ordering.shape[0], dtype=np.int64)
    for q in range(ordering.shape[0]):
        pre = ordering[q]
        if off[part[pre]] < 0:
            cand[m] = pre
            m += 1
    if m == 0:
        return FOUND
    cand = cand[:m]
    for q in range(1, m):
        pre = cand[q]
        o = minoff[part[pre]]
        r = q - 1
        while r >= 0:
            po = minoff[part[cand[r]]]
            if po > o or (po == o and cand[r] > pre):
                cand[r + 1] = cand[r]
                r -= 1
            else:
                break
        cand[r + 1] = pre
    min_height = np.int64(2**62)
    for q in range(m):
        b = part[cand[q]]
        h = minoff[b] + size[b]
        if h < min_height:
            min_height = h
    for q in range(m):
        pre = cand[q]
        b = part[pre]
        o = minoff[b]
        if o >= min_height:
            break  # dominance: sorted by offset, every later one is as high
        if o < min_offset or (o == min_offset and pre < min_pre):
            continue  # canonical order
        top = o + size[b]
        if top > capacity:
            continue
        off[b] = o
        mo_top0 = ctr[_MO_TOP]
        fl_top0 = ctr[_FL_TOP]
        # 1. raise the minimum offsets of unplaced buffers it overlaps
        ctr[_STAMP] += 1
        stamp = ctr[_STAMP]
        naff = 0
        for c in range(ov_ptr[b], ov_ptr[b + 1]):
            j = ov_idx[c]
            if off[j] >= 0 or minoff[j] >= top:
                continue
            t = ctr[_MO_TOP]
            mo_b[t] = j
            mo_v[t] = minoff[j]
            ctr[_MO_TOP] = t + 1
            a = align[j]
            minoff[j] = top if a <= 1 else -(-top // a) * a
            for s in range(slo[j], shi[j]):
                if mark[s] != stamp:
                    mark[s] = stamp
                    aff[naff] = s
                    naff += 1
        # 2. its sections: floor up to its top, total down by its size
        for s in range(slo[b], shi[b]):
            t = ctr[_FL_TOP]
            fl_s[t] = s
            fl_v[t] = floor[s]
            ctr[_FL_TOP] = t + 1
            if top > floor[s]:
                floor[s] = top
            total[s] -= size[b]
        # 3. a section's floor is at least the lowest minoff of its unplaced
        for q2 in range(naff):
            s = aff[q2]
            lo = np.int64(2**62)
            for c in range(sec_ptr[s], sec_ptr[s + 1]):
                j = sec_mem[c]
                if off[j] < 0 and minoff[j] < lo:
                    lo = minoff[j]
            if lo != 2**62 and floor[s] < lo:
                t = ctr[_FL_TOP]
                fl_s[t] = s
                fl_v[t] = floor[s]
                ctr[_FL_TOP] = t + 1
                floor[s] = lo
        # 4. cross-section check, with the floor rising monotonically
        ok = True
        for s in range(sec_lo, sec_hi):
            f = floor[s]
            if o > f:
                f = o
            if f + total[s] > capacity:
                ok = False
                break
        status = NOT_FOUND
        if ok:
            best[b] = o
            # 5. decomposition at boundaries no unplaced buffer crosses
            ncut = 0
            for s in range(slo[b], shi[b] - 1):
                cuts[s] -= 1
                if cuts[s] == 0 and s + 1 > sec_lo and s + 1 < sec_hi:
                    ncut += 1
            if ncut == 0:
                status = search(
                    part, sec_lo, sec_hi, cand, o, pre, capacity, heur, size, align, width,
                    slo, shi, sec_ptr, sec_mem, ov_ptr, ov_idx, off, minoff, floor, total,
                    cuts, best, mo_b, mo_v, fl_s, fl_v, mark, aff, ctr,
                )
            else:
                points = np.empty(ncut + 2, dtype=np.int64)
                points[0] = sec_lo
                k = 1
                for s in range(slo[b], shi[b] - 1):
                    if cuts[s] == 0 and s + 1 > sec_lo and s + 1 < sec_hi:
                        points[k] = s + 1
                        k += 1
                points[k] = sec_hi
                status = FOUND
                for p in range(ncut + 1):
                    lo_s = points[p]
                    hi_s = points[p + 1]
                    nsub = 0
                    sub = np.empty(part.shape[0], dtype=np.int64)
                    for q2 in range(part.shape[0]):
                        j = part[q2]
                        if off[j] < 0 and slo[j] < hi_s and lo_s < shi[j]:
                            sub[nsub] = j
                            nsub += 1
                    if nsub == 0:
                        continue
                    sub = preorder(sub[:nsub], heur, size, width, slo, shi, total)
                    status = search(
                        sub, lo_s, hi_s, np.arange(nsub), 0, 0, capacity, heur, size,
                        align, width, slo, shi, sec_ptr, sec_mem, ov_ptr, ov_idx, off,
                        minoff, floor, total, cuts, best, mo_b, mo_v, fl_s, fl_v, mark,
                        aff, ctr,
                    )
                    if status != FOUND:
                        break
            for s in range(slo[b], shi[b] - 1):
                cuts[s] += 1
        # undo
        while ctr[_FL_TOP] > fl_top0:
            t = ctr[_FL_TOP] - 1
            floor[fl_s[t]] = fl_v[t]
            ctr[_FL_TOP] = t
        for s in range(slo[b], shi[b]):
            total[s] += size[b]
        while ctr[_MO_TOP] > mo_top0:
            t = ctr[_MO_TOP] - 1
            minoff[mo_b[t]] = mo_v[t]
            ctr[_MO_TOP] = t
        off[b] = -1
        if status != NOT_FOUND:
            return status
    ctr[_BACKTRACKS] += 1
    return NOT_FOUND
