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

Two more cuts keep a node cheap without changing the tree: a node's
candidates stop at the highest offset the cross-section check can pass
(``capacity - total`` in the fullest section: the check fails above it
whichever buffer goes there), and the affected sections' floors are raised
as the check reaches them, so a failing check stops scanning early.

The search returns at the first plan that fits the capacity. It counts nodes
and stops with ``ABORTED`` past a node limit, keeping its state so that a
later call goes on from there (preorders take turns without redoing work),
and with ``TIMEOUT`` past a deadline on the cycle counter.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from onnxmem.core._cyclecounter import cycles
from onnxmem.core.solvers._searchdefs import (
    ABORTED,
    FOUND,
    FRAME_FIELDS,
    HEURISTICS,
    NCTR,
    NOT_FOUND,
    TIMEOUT,
)

__all__ = [
    "ABORTED", "FOUND", "FRAME_FIELDS", "HEURISTICS", "NCTR", "NOT_FOUND", "TIMEOUT", "preorder", "search",
]

#: the problem, read only: ``(size, align, width, slo, shi, sec_ptr, sec_mem,
#: ov_ptr, ov_idx)``: per buffer its size, alignment, lifetime length and
#: sections ``[slo, shi)``; the buffers of each section (CSR ``sec_ptr``,
#: ``sec_mem``) and the buffers each overlaps (CSR ``ov_ptr``, ``ov_idx``)
Arrays = tuple[np.ndarray, ...]
#: the search state, restored on return: ``(off, minoff, floor, total, cuts,
#: best)`` (see the module docstring; ``best``: the plan found)
State = tuple[np.ndarray, ...]
#: scratch: ``(mo_b, mo_v, fl_s, fl_v, mark, aff, pool)``: the undo stacks of
#: ``minoff`` and ``floor``, section marks, affected sections, and a pool for
#: candidate lists and partitions
Work = tuple[np.ndarray, ...]

# ctr slots
_NODES, _LIMIT, _DEADLINE, _MO_TOP, _FL_TOP, _STAMP, _BACKTRACKS, _DEPTH, _PTOP, _WORK, _WORK_LIMIT = range(NCTR)


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


# frame fields
(_PART, _PLEN, _SLO, _SHI, _MINOFF, _MINPRE, _ORD, _OLEN, _CAND, _M, _Q, _B, _O, _PRE,
 _MO0, _FL0, _PTS, _NPTS, _SUBI, _POOL0, _MINH, _OMAX, _STATE) = range(FRAME_FIELDS)
_ENTER, _LOOP, _WAIT = 0, 1, 2


@njit(cache=True)
def _launch_sub(
    F: np.ndarray, d: int, ptop: int, heur: np.ndarray, arrays: Arrays, state: State, work: Work,
) -> int:
    """Push the next non-empty sub-partition of frame ``d`` as frame ``d + 1``.

    Returns the new pool top, or -1 when no sub-partition is left.
    """
    size, width, slo, shi = arrays[0], arrays[2], arrays[3], arrays[4]
    off, total = state[0], state[3]
    pool = work[6]
    pts = F[d, _PTS]
    while F[d, _SUBI] < F[d, _NPTS] - 1:
        p = F[d, _SUBI]
        F[d, _SUBI] = p + 1
        lo_s = pool[pts + p]
        hi_s = pool[pts + p + 1]
        part = F[d, _PART]
        nsub = 0
        sub = np.empty(F[d, _PLEN], dtype=np.int64)
        for q in range(F[d, _PLEN]):
            j = pool[part + q]
            if off[j] < 0 and slo[j] < hi_s and lo_s < shi[j]:
                sub[nsub] = j
                nsub += 1
        if nsub == 0:
            continue
        sub = preorder(sub[:nsub], heur, size, width, slo, shi, total)
        e = d + 1
        F[e, _POOL0] = ptop
        F[e, _PART] = ptop
        F[e, _PLEN] = nsub
        pool[ptop : ptop + nsub] = sub
        ptop += nsub
        F[e, _SLO] = lo_s
        F[e, _SHI] = hi_s
        F[e, _MINOFF] = 0
        F[e, _MINPRE] = 0
        F[e, _ORD] = -1
        F[e, _OLEN] = nsub
        F[e, _STATE] = _ENTER
        return ptop
    return -1


@njit(cache=True)
def _raise_floor(s: int, arrays: Arrays, state: State, work: Work, ctr: np.ndarray) -> None:
    """Raise section ``s``'s floor to the lowest ``minoff`` of its unplaced buffers (undoable)."""
    sec_ptr, sec_mem = arrays[5], arrays[6]
    off, minoff, floor = state[0], state[1], state[2]
    fl_s, fl_v = work[2], work[3]
    lo = np.int64(2**62)
    ctr[_WORK] += sec_ptr[s + 1] - sec_ptr[s]
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


@njit(cache=True)
def search(
    part0: np.ndarray,
    query: np.ndarray,
    heur: np.ndarray,
    arrays: Arrays,
    state: State,
    work: Work,
    ctr: np.ndarray,
    F: np.ndarray,
) -> int:
    """Search placements of ``part0`` (buffers in preorder), or go on with one.

    ``query``: ``[sec_lo, sec_hi, capacity, canonical, dominance, sections,
    decomposition]`` (the sections to fill, the capacity, and the pruning
    rules on (1) or off (0)); ``heur``: the preorder's keys for sub-problems;
    ``arrays``, ``state``, ``work``: see :data:`Arrays`, :data:`State`,
    :data:`Work`; ``ctr``: the :data:`NCTR` counters (nodes, node limit,
    deadline, ...; zeros, with the resume depth ``ctr[7]`` at -1, for a new
    search; ``ctr[9]`` counts the work done, the loop iterations a node's
    candidates, sections and overlaps take, and past ``ctr[10]`` the search
    stops as past the node limit); ``F``: the frame stack, ``(n + 2, frame
    fields)``.

    An explicit stack of frames replaces recursion. Past the node limit the
    search stops with ``ABORTED`` and leaves its state, frames and counters
    as they are: called again with the same arguments and a higher limit, it
    goes on from the node where it stopped (so a portfolio of preorders can
    take turns without redoing work). On any other status every state array
    is as it was on entry, and ``best`` holds the plan when it is ``FOUND``."""
    d, ptop = ctr[_DEPTH], ctr[_PTOP]
    if d < 0:  # a new search: frame 0 holds every buffer of part0
        pool, mark = work[6], work[4]
        mark[:] = 0  # section stamps restart with the counters
        k0 = part0.shape[0]
        pool[:k0] = part0
        d, ptop = 0, k0
        F[0, _POOL0] = 0
        F[0, _PART] = 0
        F[0, _PLEN] = k0
        F[0, _SLO] = query[0]
        F[0, _SHI] = query[1]
        F[0, _ORD] = -1
        F[0, _OLEN] = k0
        F[0, _STATE] = _ENTER
    return _run(d, ptop, query, heur, arrays, state, work, ctr, F)


@njit(cache=True)
def _run(
    d: int, ptop: int, query: np.ndarray, heur: np.ndarray, arrays: Arrays, state: State,
    work: Work, ctr: np.ndarray, F: np.ndarray,
) -> int:
    """The loop of :func:`search`, from frame ``d`` with the pool's top at ``ptop``.

    One function by design, longer than the project's 80 lines: it is the
    depth-first search written as one loop over an explicit frame stack ``F``
    (each frame's ``_STATE`` says which phase runs next: enter the node, try
    the next candidate, undo), so that a call can stop at a node limit and a
    later call go on from the saved frames. Every phase reads the 22 arrays
    unpacked above and moves the scalars ``d``, ``ptop``, ``status`` and
    ``ret`` that the next phase reads; a numba function cannot assign its
    caller's scalars, so each phase as a helper would take the arrays and
    return those scalars as a tuple, at every node. The steps that touch
    only arrays are helpers already (:func:`_raise_floor`, :func:`_launch_sub`).
    """
    capacity = query[2]
    canonical, dominance, sections, decomposition = query[3] != 0, query[4] != 0, query[5] != 0, query[6] != 0
    size, align, width, slo, shi, sec_ptr, sec_mem, ov_ptr, ov_idx = arrays
    off, minoff, floor, total, cuts, best = state
    mo_b, mo_v, fl_s, fl_v, mark, aff, pool = work
    ctr[_DEPTH] = -1
    status = NOT_FOUND
    while True:
        ret = False
        if F[d, _STATE] == _ENTER:
            ctr[_NODES] += 1
            if ctr[_NODES] > ctr[_LIMIT] or ctr[_WORK] > ctr[_WORK_LIMIT]:
                # stop here, state kept: a call with a higher limit goes on
                ctr[_NODES] -= 1
                ctr[_DEPTH] = d
                ctr[_PTOP] = ptop
                return ABORTED
            elif (ctr[_NODES] & 255) == 0 and cycles() > ctr[_DEADLINE]:
                status = TIMEOUT
                ret = True
            else:
                part = F[d, _PART]
                ctr[_WORK] += F[d, _OLEN] + F[d, _SHI] - F[d, _SLO]
                # unplaced candidates sorted by (minoff, rank): the previous
                # order is nearly right, so an insertion sort is cheap
                cp = ptop
                m = 0
                for q in range(F[d, _OLEN]):
                    pre = q if F[d, _ORD] < 0 else pool[F[d, _ORD] + q]
                    if off[pool[part + pre]] < 0:
                        pool[cp + m] = pre
                        m += 1
                if m == 0:
                    status = FOUND
                    ret = True
                else:
                    for q in range(1, m):
                        pre = pool[cp + q]
                        o = minoff[pool[part + pre]]
                        r = q - 1
                        while r >= 0:
                            pr = pool[cp + r]
                            po = minoff[pool[part + pr]]
                            if po > o or (po == o and pr > pre):
                                pool[cp + r + 1] = pr
                                r -= 1
                            else:
                                break
                        pool[cp + r + 1] = pre
                    minh = np.int64(2**62)
                    for q in range(m):
                        b = pool[part + pool[cp + q]]
                        h = minoff[b] + size[b]
                        if h < minh:
                            minh = h
                    ptop = cp + m
                    F[d, _CAND] = cp
                    F[d, _M] = m
                    F[d, _Q] = 0
                    F[d, _MINH] = minh
                    # the highest offset the cross-section check can pass: a
                    # buffer at o leaves every section of the frame at least
                    # max(floor, o) + total high, so offsets above the least
                    # capacity - total fail whichever buffer goes there
                    omax = np.int64(2**62)
                    if sections:
                        for s in range(F[d, _SLO], F[d, _SHI]):
                            if capacity - total[s] < omax:
                                omax = capacity - total[s]
                    F[d, _OMAX] = omax
                    F[d, _NPTS] = 0
                    F[d, _STATE] = _LOOP
        if not ret and F[d, _STATE] == _LOOP:
            part = F[d, _PART]
            cp = F[d, _CAND]
            m = F[d, _M]
            pushed = False
            while F[d, _Q] < m:
                pre = pool[cp + F[d, _Q]]
                b = pool[part + pre]
                o = minoff[b]
                if dominance and o >= F[d, _MINH]:
                    F[d, _Q] = m  # dominance: every later candidate is as high
                    break
                if o > F[d, _OMAX]:
                    F[d, _Q] = m  # cross sections: every later candidate fails too
                    break
                if canonical and (o < F[d, _MINOFF] or (o == F[d, _MINOFF] and pre < F[d, _MINPRE])):
                    F[d, _Q] += 1  # canonical order
                    continue
                top = o + size[b]
                if top > capacity:
                    F[d, _Q] += 1
                    continue
                off[b] = o
                F[d, _B] = b
                F[d, _O] = o
                F[d, _PRE] = pre
                F[d, _MO0] = ctr[_MO_TOP]
                F[d, _FL0] = ctr[_FL_TOP]
                # 1. raise the minimum offsets of unplaced buffers it overlaps
                ctr[_STAMP] += 1
                stamp = ctr[_STAMP]
                ctr[_WORK] += ov_ptr[b + 1] - ov_ptr[b] + shi[b] - slo[b]
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
                    ctr[_WORK] += shi[j] - slo[j]
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
                # 3. a section's floor is at least the lowest minoff of its
                # unplaced buffers (affected sections are raised as the check
                # reaches them, so a failing check stops scanning early), and
                # 4. the cross-section check, with the floor rising monotonically
                ok = True
                for s in range(F[d, _SLO], F[d, _SHI] if sections else F[d, _SLO]):
                    if mark[s] == stamp:
                        mark[s] = -1
                        _raise_floor(s, arrays, state, work, ctr)
                    f = floor[s]
                    if o > f:
                        f = o
                    if f + total[s] > capacity:
                        ok = False
                        break
                if ok:
                    for q2 in range(naff):
                        s = aff[q2]
                        if mark[s] == stamp:
                            mark[s] = -1
                            _raise_floor(s, arrays, state, work, ctr)
                if ok:
                    best[b] = o
                    # 5. decomposition at boundaries no unplaced buffer crosses
                    ncut = 0
                    for s in range(slo[b], shi[b] - 1):
                        cuts[s] -= 1
                        if cuts[s] == 0 and s + 1 > F[d, _SLO] and s + 1 < F[d, _SHI]:
                            ncut += 1
                    if not decomposition:
                        ncut = 0
                    F[d, _STATE] = _WAIT
                    if ncut == 0:
                        e = d + 1
                        F[e, _POOL0] = ptop
                        F[e, _PART] = part
                        F[e, _PLEN] = F[d, _PLEN]
                        F[e, _SLO] = F[d, _SLO]
                        F[e, _SHI] = F[d, _SHI]
                        F[e, _MINOFF] = o
                        F[e, _MINPRE] = pre
                        F[e, _ORD] = cp
                        F[e, _OLEN] = m
                        F[e, _STATE] = _ENTER
                        d = e
                    else:
                        pts = ptop
                        pool[pts] = F[d, _SLO]
                        kk = 1
                        for s in range(slo[b], shi[b] - 1):
                            if cuts[s] == 0 and s + 1 > F[d, _SLO] and s + 1 < F[d, _SHI]:
                                pool[pts + kk] = s + 1
                                kk += 1
                        pool[pts + kk] = F[d, _SHI]
                        ptop = pts + kk + 1
                        F[d, _PTS] = pts
                        F[d, _NPTS] = kk + 1
                        F[d, _SUBI] = 0
                        nt = _launch_sub(F, d, ptop, heur, arrays, state, work)
                        if nt >= 0:
                            ptop = nt
                            d = d + 1
                        else:
                            # every side empty: nothing left to place
                            status = FOUND
                            d = d + 1
                            F[d, _POOL0] = ptop
                            ret = True
                    pushed = True
                    break
                # failed check: undo and try the next candidate
                while ctr[_FL_TOP] > F[d, _FL0]:
                    t = ctr[_FL_TOP] - 1
                    floor[fl_s[t]] = fl_v[t]
                    ctr[_FL_TOP] = t
                for s in range(slo[b], shi[b]):
                    total[s] += size[b]
                while ctr[_MO_TOP] > F[d, _MO0]:
                    t = ctr[_MO_TOP] - 1
                    minoff[mo_b[t]] = mo_v[t]
                    ctr[_MO_TOP] = t
                off[b] = -1
                F[d, _Q] += 1
            if not pushed:
                ctr[_BACKTRACKS] += 1
                status = NOT_FOUND
                ret = True
        # return from frame d with `status`, resuming its parents
        while ret:
            ptop = F[d, _POOL0]
            if d == 0:
                return status
            d -= 1
            b = F[d, _B]
            if F[d, _NPTS] > 0 and status == FOUND:
                nt = _launch_sub(F, d, ptop, heur, arrays, state, work)
                if nt >= 0:
                    ptop = nt
                    d = d + 1
                    ret = False
                    break
            # this candidate is finished: undo it
            for s in range(slo[b], shi[b] - 1):
                cuts[s] += 1
            while ctr[_FL_TOP] > F[d, _FL0]:
                t = ctr[_FL_TOP] - 1
                floor[fl_s[t]] = fl_v[t]
                ctr[_FL_TOP] = t
            for s in range(slo[b], shi[b]):
                total[s] += size[b]
            while ctr[_MO_TOP] > F[d, _MO0]:
                t = ctr[_MO_TOP] - 1
                minoff[mo_b[t]] = mo_v[t]
                ctr[_MO_TOP] = t
            off[b] = -1
            if status != NOT_FOUND:
                continue  # pass FOUND / ABORTED / TIMEOUT up
            if F[d, _NPTS] > 0:
                ptop = F[d, _PTS]  # drop the cut points
                F[d, _NPTS] = 0
            F[d, _Q] += 1
            F[d, _STATE] = _LOOP
            ret = False
