"""Solvers for problems with explicit conflicts (buffers that conflict along a graph).

A problem with ``conflicts`` (:class:`onnxmem.core.problem.Problem`) says which
buffers may not share a byte; steps say nothing. Two solvers, and ``auto``'s
path for such problems:

``conflict-greedy``:

1. pinned buffers go first, at their offsets;
2. buffers are taken in several orders, each in turn: largest first (ties:
   more conflicts, then index); most conflicting bytes first (the sizes of
   the buffers it conflicts with, plus its own); earliest step first (the
   order the plan's schedule writes them), then largest;
3. each buffer goes into the lowest gap, at an aligned offset, between the
   placed buffers it conflicts with (*first fit*), and into the smallest such
   gap that holds it in a second pass (*best fit*);
4. the lowest arena of all is kept; it is ``optimal`` when it meets the
   lower bound (the heaviest set of pairwise-conflicting buffers,
   :func:`onnxmem.core.problem.lower_bound`).

``auto`` then keeps trying, until the caller's deadline or the bound: the
largest-first order with each size scaled by a random factor in [0.5, 1.5)
(a generator seeded by ``options.seed``), both fits.

``conflict-exact``: depth-first search over canonical placements: the next
buffer is any unplaced one, at offset 0 or on top of a placed buffer it
conflicts with, no lower than the previous placement (every plan can be
lowered into such a plan without growing, so the search is complete); a
branch whose height reaches the best plan is cut. It starts from the greedy
plan and stops at the caller's deadline with the best plan (``timeout``), or
when the space is exhausted (``optimal``). Exponential: cheap only for a few
dozen buffers; ``auto`` runs it for problems of at most
:data:`EXACT_AUTO_MAX` buffers. A problem without explicit conflicts (live at
one step is the conflict) is the interval special case, which the interval
``exact`` search solves with far stronger pruning: ``conflict-exact`` hands it
that problem and reports its answer under its own name.

Cost of the greedy: per buffer, a sort of the placed buffers it conflicts
with; ``O(orders * (n + p) log n)`` for ``n`` buffers and ``p`` conflicts.
Guarantee: every plan is valid (no conflicting buffers share a byte, offsets
aligned, pinned buffers where pinned).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from onnxmem.core.conflict_graph import MAX_BUFFERS, Conflicts
from onnxmem.core.errors import ProblemError
from onnxmem.core.problem import Problem, Solution, Status, align_up, lower_bound
from onnxmem.core.solvers.registry import SOLVERS, SolveOptions, judge, register
from onnxmem.core.workclock import charge, now

__all__ = ["EXACT_AUTO_MAX", "conflict_auto", "conflict_exact", "conflict_greedy", "place_conflicts"]

#: problems of at most this many buffers get ``conflict-exact`` from ``auto``
EXACT_AUTO_MAX = 12
#: the default budget of ``conflict-exact`` (seconds)
CONFLICT_EXACT_TIMEOUT = 10.0
#: work units (:mod:`onnxmem.core.workclock`) per buffer a greedy placement places,
#: and per node of the depth-first search
PLACE_COST = 5.0
STEP_COST = 20.0


def _conflicts(problem: Problem) -> Conflicts:
    """The problem's conflicts; for an interval problem, the pairs live at one step."""
    c = problem.conflicts
    if c is None:
        if len(problem) > MAX_BUFFERS:
            raise ProblemError(f"the conflict solvers take interval problems of at most {MAX_BUFFERS:,} buffers "
                               f"(this one has {len(problem):,}); use --solver greedy or auto")
        start, end, _, _ = problem.arrays()
        live = (start[:, None] < end[None, :]) & (start[None, :] < end[:, None])
        c = Conflicts.from_matrix(live)
    return c


def _pinned_start(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, placed)`` before any placement: the pinned buffers at their offsets, the rest unplaced."""
    n = len(problem)
    offs = np.zeros(n, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    for i, b in enumerate(problem.buffers):
        if b.offset is not None:
            offs[i] = b.offset
            placed[i] = True
    return offs, placed


def place_conflicts(problem: Problem, order: np.ndarray, best_fit: bool = False) -> np.ndarray:
    """Offsets (buffer order) placing buffers one by one in ``order`` (see the module docstring)."""
    conflicts = _conflicts(problem)
    _, _, size, align = problem.arrays()
    offs, placed = _pinned_start(problem)
    for i in order:
        i = int(i)
        if placed[i]:
            continue
        nb = conflicts.neighbours(i)
        nb = nb[placed[nb] & (size[nb] > 0)]
        lo = offs[nb]
        hi = lo + size[nb]
        srt = np.argsort(lo, kind="stable")
        lo, hi = lo[srt], hi[srt]
        need, a = int(size[i]), int(align[i])
        best: tuple[int, int] | None = None  # (gap size, offset)
        at = 0  # lowest free byte so far
        for k in range(len(lo)):
            cand = align_up(at, a)
            if cand + need <= int(lo[k]):
                gap = int(lo[k]) - cand
                if not best_fit:
                    best = (0, cand)
                    break
                if best is None or gap < best[0]:
                    best = (gap, cand)
            at = max(at, int(hi[k]))
        if best is None or (best_fit and need == 0):
            best = (0, align_up(at, a) if need else 0)
        offs[i] = best[1]
        placed[i] = True
    return offs


def _orders(problem: Problem) -> list[np.ndarray]:
    conflicts = _conflicts(problem)
    start, _, size, _ = problem.arrays()
    n = len(problem)
    degree = np.diff(conflicts.indptr)
    weight = np.array([int(size[conflicts.neighbours(i)].sum()) for i in range(n)], dtype=np.int64) + size
    idx = np.arange(n)
    return [
        np.lexsort((idx, -degree, -size)),
        np.lexsort((idx, -size, -weight)),
        np.lexsort((idx, -size, start)),
    ]


def _solution(name: str, problem: Problem, offs: np.ndarray, bound: int, options: SolveOptions,
              cut_off: bool = False, status: Status | None = None) -> Solution:
    _, _, size, _ = problem.arrays()
    height = int((offs + size).max(initial=0))
    st = status if status is not None else judge(height, bound, options.capacity, cut_off)
    gap = 100.0 * (height - bound) / bound if bound else 0.0
    return Solution(tuple(int(o) for o in offs), height, name, st,
                    stats={"lower_bound": float(bound), "gap_pct": gap})


def _best_greedy(problem: Problem, deadline: float | None, bound: int | None = None, seed: int = 0) -> np.ndarray:
    """The lowest plan of the fixed orders; with ``bound``, random orders until the deadline or the bound."""
    _, _, size, _ = problem.arrays()
    best: np.ndarray | None = None
    best_h = 0

    def late() -> bool:
        return deadline is not None and now() > deadline

    def attempt(order: np.ndarray) -> None:
        nonlocal best, best_h
        for fit in (False, True):
            charge(len(order) * PLACE_COST)
            offs = place_conflicts(problem, order, best_fit=fit)
            h = int((offs + size).max(initial=0))
            if best is None or h < best_h:
                best, best_h = offs, h

    for order in _orders(problem):
        attempt(order)
        if late():
            break
    if bound is not None and deadline is not None:
        rng = np.random.default_rng(seed)
        idx = np.arange(len(problem))
        while best_h > bound and not late():
            attempt(np.lexsort((idx, -(size * rng.uniform(0.5, 1.5, len(problem))))))
    assert best is not None
    return best


@register("conflict-greedy", "conflict graphs (--concurrency dag): first and best fit over three orders",
          conflicts=True)
def conflict_greedy(problem: Problem, options: SolveOptions) -> Solution:
    if not len(problem):
        return Solution((), 0, "conflict-greedy", Status.OPTIMAL)
    bound = lower_bound(problem)
    return _solution("conflict-greedy", problem, _best_greedy(problem, options.deadline), bound, options)


def _search(problem: Problem, incumbent: np.ndarray, bound: int, deadline: float | None,
            stop: Callable[[int], bool]) -> tuple[np.ndarray, bool]:
    """The canonical depth-first search; ``(best offsets, exhausted)``."""
    conflicts = _conflicts(problem)
    _, _, size, align = problem.arrays()
    n = len(problem)
    nbs = [conflicts.neighbours(i) for i in range(n)]
    best = incumbent.copy()
    best_h = int((best + size).max(initial=0))
    offs, placed = _pinned_start(problem)
    steps = 0
    cut = False

    def fits(i: int, off: int) -> bool:
        nb = nbs[i]
        nb = nb[placed[nb] & (size[nb] > 0)]
        return not bool(((offs[nb] < off + size[i]) & (off < offs[nb] + size[nb])).any()) if size[i] else True

    def dfs(left: int, floor: int, height: int, last: int) -> bool:
        nonlocal best, best_h, steps, cut
        if best_h <= bound or stop(best_h):
            return True
        steps += 1
        if deadline is not None and steps % 256 == 0:
            charge(256 * STEP_COST)
            if now() > deadline:
                cut = True
                return True
        if left == 0:
            if height < best_h:
                best, best_h = offs.copy(), height
            return best_h <= bound
        for i in range(n):
            if placed[i]:
                continue
            nb = nbs[i]
            nb = nb[placed[nb]]
            cands = sorted({0, *(int(offs[j] + size[j]) for j in nb)})
            for c in cands:
                off = align_up(c, int(align[i]))
                if off < floor or (off == floor and i < last) or off + int(size[i]) >= best_h \
                        or not fits(i, off):
                    continue  # placements go in rising (offset, index): each layout is searched once
                offs[i] = off
                placed[i] = True
                done = dfs(left - 1, off, max(height, off + int(size[i])), i)
                placed[i] = False
                if done or cut:
                    return True
        return False

    height0 = int((offs[placed] + size[placed]).max(initial=0))
    dfs(n - int(placed.sum()), 0, height0, -1)
    return best, not cut


@register("conflict-exact", "conflict graphs (--concurrency dag): depth-first search; proves optimality",
          default_timeout=CONFLICT_EXACT_TIMEOUT, conflicts=True)
def conflict_exact(problem: Problem, options: SolveOptions) -> Solution:
    if not len(problem):
        return Solution((), 0, "conflict-exact", Status.OPTIMAL)
    if problem.conflicts is None:  # the interval special case: the interval search (module doc)
        return replace(SOLVERS["exact"].fn(problem, options), solver="conflict-exact")
    return _exact(problem, options, "conflict-exact")


def _exact(problem: Problem, options: SolveOptions, name: str) -> Solution:
    bound = lower_bound(problem)
    big = name == "auto" and len(problem) > EXACT_AUTO_MAX  # auto: no exact search on large problems
    greedy = _best_greedy(problem, options.deadline, bound if big else None, options.seed)
    _, _, size, _ = problem.arrays()
    if big or int((greedy + size).max(initial=0)) <= bound:
        return _solution(name, problem, greedy, bound, options)
    cap = options.capacity

    def stop(height: int) -> bool:  # a decision: any plan within the capacity will do
        return cap is not None and height <= cap

    offs, exhausted = _search(problem, greedy, bound, options.deadline, stop)
    height = int((offs + size).max(initial=0))
    if exhausted and (cap is None or height <= cap):
        return _solution(name, problem, offs, bound, options,
                         status=Status.OPTIMAL if cap is None else judge(height, bound, cap))
    if exhausted:
        return Solution((), 0, name, Status.INFEASIBLE, stats={"lower_bound": float(bound)})
    return _solution(name, problem, offs, bound, options, cut_off=True)


def conflict_auto(problem: Problem, options: SolveOptions) -> Solution:
    """``auto`` on a problem with conflicts: the greedy plans, then the exact search on small problems."""
    if not len(problem):
        return Solution((), 0, "auto", Status.OPTIMAL)
    return _exact(problem, options, "auto")
