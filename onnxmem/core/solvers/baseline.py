"""The ``naive`` baseline, and the numpy engine of the greedy placement.

``naive`` stacks every buffer on top of the previous one, as a runtime without
a planner would; its height is the sum of the (aligned) sizes. It proves
nothing: above a capacity it says ``over-capacity``.

:func:`place_in_order` is the greedy family's placement rule (see
:mod:`.greedy`) in plain numpy, one buffer at a time: ``greedy`` and ``auto``
use it on small problems so that they never load compiled code; it gives the
same offsets as the compiled :func:`._kernels.place` (a test checks this).
"""

from __future__ import annotations

import numpy as np

from onnxmem.core.problem import Problem, Solution, align_up, lower_bound
from onnxmem.core.solvers.registry import SolveOptions, judge, register

__all__ = ["naive", "place_in_order", "size_order"]


@register("naive", "no reuse: every buffer gets its own bytes (the baseline)", conflicts=True)
def naive(problem: Problem, options: SolveOptions) -> Solution:
    offsets: list[int] = []
    top = 0
    for b in problem.buffers:
        off = b.offset if b.offset is not None else align_up(top, b.alignment)
        offsets.append(off)
        top = max(top, off + b.size)
    status = judge(top, lower_bound(problem), options.capacity)
    return Solution(tuple(offsets), top, "naive", status)


def place_in_order(problem: Problem, order: np.ndarray, best_fit: bool = True) -> list[int]:
    """Place buffers one by one in ``order``; returns offsets in buffer order.

    Each buffer goes into the smallest (``best_fit``; ties: the lowest) or the
    lowest gap among the placed buffers that overlap it in time, else on top
    of them. Pinned buffers are placed first, at their offsets; empty buffers
    at offset 0.
    """
    n = len(problem.buffers)
    start, end, size, align = problem.arrays()
    offsets = np.full(n, -1, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    for i, b in enumerate(problem.buffers):
        if b.offset is not None:
            offsets[i] = b.offset
            placed[i] = True
    for i in order.tolist():
        if placed[i]:
            continue
        placed[i] = True
        need = int(size[i])
        if need == 0:
            offsets[i] = 0
            continue
        idx = np.nonzero(placed & (start < end[i]) & (start[i] < end) & (size > 0))[0]
        idx = idx[idx != i]
        a = int(align[i])
        best = -1
        best_gap = -1
        top = 0
        if idx.size:
            lo = offsets[idx]
            o = np.argsort(lo, kind="stable")
            lo, hi = lo[o], lo[o] + size[idx][o]
            # running max of block tops gives the gap starts
            tops = np.maximum.accumulate(hi)
            gap_start = np.concatenate(([0], tops[:-1]))
            for gs, ge in zip(gap_start.tolist(), lo.tolist()):
                cand = align_up(gs, a)
                if ge > gs and cand + need <= ge:
                    gap = ge - gs
                    if best < 0 or (best_fit and gap < best_gap):
                        best, best_gap = cand, gap
                        if not best_fit:
                            break
            top = int(tops[-1])
        offsets[i] = best if best >= 0 else align_up(top, a)
    return [int(v) for v in offsets]


def size_order(problem: Problem) -> np.ndarray:
    """Largest first; ties by earlier start, then longer life, then index."""
    start, end, size, _ = problem.arrays()
    return np.lexsort((np.arange(len(size)), -(end - start), start, -size))
