"""Baselines: ``naive`` (no reuse) and ``greedy`` (largest first, best fit).

``naive`` stacks every buffer on top of the previous one, as a runtime without
a planner would; its height is the sum of the (aligned) sizes.

``greedy`` is the size-sorted best-fit placement of TFLite's arena planner and
the MiniMalloc paper's baseline:

1. order buffers by size, largest first (ties: earlier start, then id order);
2. for each buffer, take the already placed buffers whose lifetimes overlap
   it, sorted by offset, and list the gaps between them (and above the top);
3. place it in the smallest gap that holds it at an aligned offset (ties: the
   lowest), or on top of the overlapping buffers when none does.

It guarantees a valid plan, not an optimal one: the result can be well above
the lower bound on hard instances.
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem, Solution, align_up, lower_bound
from . import SolveOptions, register


def _status(problem: Problem, height: int, capacity: int | None) -> str:
    if capacity is not None and height > capacity:
        return "timeout"
    return "optimal" if height <= lower_bound(problem) else "feasible"


@register("naive", "no reuse: every buffer gets its own bytes (the baseline)")
def naive(problem: Problem, options: SolveOptions) -> Solution:
    offsets: list[int] = []
    top = 0
    for b in problem.buffers:
        off = b.offset if b.offset is not None else align_up(top, b.alignment)
        offsets.append(off)
        top = max(top, off + b.size)
    status = _status(problem, top, options.capacity)
    return Solution(tuple(offsets), top if status != "timeout" else top, "naive", status)


def place_in_order(problem: Problem, order: np.ndarray, best_fit: bool = True) -> list[int]:
    """Place buffers one by one in ``order``; returns offsets in buffer order.

    Each buffer goes into the smallest (``best_fit``) or lowest gap among the
    placed buffers that overlap it in time, else on top of them. Pinned
    buffers are placed first, at their offsets.
    """
    n = len(problem.buffers)
    start, end, size, align = problem.arrays()
    offsets = np.full(n, -1, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    pinned = [i for i, b in enumerate(problem.buffers) if b.offset is not None]
    for i in pinned:
        offsets[i] = problem.buffers[i].offset  # type: ignore[assignment]
        placed[i] = True
    for i in order:
        i = int(i)
        if placed[i]:
            continue
        mask = placed & (start < end[i]) & (start[i] < end) & (size > 0)
        idx = np.nonzero(mask)[0]
        a = int(align[i])
        need = int(size[i])
        best = -1
        best_gap = -1
        if idx.size:
            lo = offsets[idx]
            hi = lo + size[idx]
            o = np.argsort(lo, kind="stable")
            lo, hi = lo[o], hi[o]
            # running max of block tops gives the gap starts
            tops = np.maximum.accumulate(hi)
            gap_start = np.concatenate(([0], tops[:-1]))
            gap_end = lo
            for gs, ge in zip(gap_start.tolist(), gap_end.tolist()):
                cand = align_up(gs, a)
                if cand + need <= ge:
                    gap = ge - gs
                    if best < 0 or (best_fit and gap < best_gap):
                        best, best_gap = cand, gap
                        if not best_fit:
                            break
            if best < 0:
                best = align_up(int(tops[-1]), a)
        else:
            best = 0
        offsets[i] = best
        placed[i] = True
    return offsets.tolist()


def size_order(problem: Problem) -> np.ndarray:
    start, end, size, _ = problem.arrays()
    # largest first; ties by earlier start, then longer life, then index
    return np.lexsort((np.arange(len(size)), -(end - start), start, -size))


@register("greedy", "largest first, best fit into the lowest gap (TFLite's arena planner)")
def greedy(problem: Problem, options: SolveOptions) -> Solution:
    offsets = place_in_order(problem, size_order(problem), best_fit=True)
    _, _, size, _ = problem.arrays()
    height = int((np.asarray(offsets, dtype=np.int64) + size).max(initial=0))
    return Solution(tuple(offsets), height, "greedy", _status(problem, height, options.capacity))
