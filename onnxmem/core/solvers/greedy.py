"""The greedy family: one placement rule, several buffer orders.

Every member places buffers one at a time, in a fixed order, and never moves
a placed buffer:

1. pinned buffers go first, at their offsets;
2. buffers are taken in the member's order:

   - ``size``: largest first (ties: earlier start, longer life, index) --
     TFLite's and MiniMalloc's baseline; the family's default order, so its
     members are named ``greedy`` (best fit) and ``greedy-ff`` (first fit),
     and the others ``greedy-ORDER`` and ``greedy-ORDER-ff``;
   - ``breadth``: TFLite's greedy-by-breadth: the time steps are ranked by the
     bytes live at them, largest first, and each buffer is ordered by the
     best-ranked step of its lifetime, then by size, largest first;
   - ``lifetime``: longest lifetime first, then largest;
   - ``area``: largest ``size x lifetime`` first;

3. for each buffer, the placed buffers live at the same time as it are sorted
   by offset and the gaps between them listed; the buffer goes into the
   smallest gap that holds it at an aligned offset (*best fit*; ties: the
   lowest) or into the lowest such gap (*first fit*), and on top of them all
   when no gap holds it.

The inner loop is compiled (numba; loaded on the first placement, not on
import, and cached on disk); problems of up to :data:`NUMPY_MAX` buffers are
placed by the same rule in numpy (:func:`.baseline.place_in_order`), so that
they never load compiled code. Finding the buffers live at the same time
uses the start-sorted order and the longest lifetime, so one placement costs
O(m log m) for the m buffers it overlaps, plus a scan of the buffers starting
within one longest lifetime before it: a whole plan of 10^5 buffers takes
seconds, not minutes.

``best-greedy`` runs, until the caller's deadline, every order with both fits, and the *lowest-first*
placement with three preorders, and keeps the lowest arena; then it tries to
lower the best gap-filling plan further: the buffers that reach the top of the
arena are moved to the front of the order and the placement is rerun, a few
times. Lowest-first is the exact search's first descent without backing up:
the buffer that can sit lowest (on top of the placed buffers it overlaps) goes
next, ties by the preorder (see :func:`._kernels.lowest_first`). Where
best fit stacks small long-lived buffers on top of the arena, it builds the
arena from the bottom up; each placement costs O(log sections) on a segment tree of
the skyline (see :func:`._kernels.lowest_first`).

Guarantee: every plan is valid (no two buffers live at one step share a byte,
offsets aligned, pinned buffers where pinned). A plan is reported ``optimal``
only when its height meets the max-live lower bound; greedy placement can be
far above it on hard instances.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from onnxmem.core._compiled import kernel_stop
from onnxmem.core.problem import Problem, Solution, lower_bound, time_sections
from onnxmem.core.solvers.baseline import place_in_order
from onnxmem.core.solvers.registry import SolveOptions, judge, register
from onnxmem.core.workclock import UNITS_PER_SECOND, charge, charge_to, now

__all__ = [
    "BEST_GREEDY_TIMEOUT", "GreedyResult", "NUMPY_MAX", "ORDERS", "PREORDERS", "Placer", "RESTART_FIRST",
    "RESTART_MOVES", "best_greedy_offsets", "greedy_offsets", "order_by", "place", "preorder", "restarts",
    "share_pick",
]

#: ``best-greedy``'s default budget in seconds (at least one member always runs;
#: on 10^4+ buffers one placement takes 0.5-2 s)
BEST_GREEDY_TIMEOUT = 3.0
#: one-pass members place with numpy (no compiled code loaded) up to this many buffers
NUMPY_MAX = 2000


class Placer:
    """A problem's arrays and overlap lists, built once for many placements."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.start, self.end, self.size, self.align = problem.arrays()
        #: the highest offset any placement gives (:func:`reach`); past :data:`PLACE_REACH`, what the
        #: compiled placement's keys hold, placements run in numpy
        self.reach = reach(self.size, self.align)
        self.far = self.reach >= PLACE_REACH
        self.fixed = np.array(
            [-1 if b.offset is None else b.offset for b in problem.buffers], dtype=np.int64
        )
        cover_lists = _greedy_kernels().cover_lists

        #: seconds spent compiling (or loading) the kernels on first use in
        #: this process; callers move their deadlines by it
        self.compile_seconds = _warm_kernels()
        self.bufs = (self.start, self.end, self.size, self.align)
        self.cover = cover_lists(self.start, self.end, self.size)
        overlaps = float(self.cover[2][-1]) / max(1, len(self.size))
        #: work units per buffer each kernel places (see :data:`PLACE_COST`)
        self.place_cost = PLACE_COST[0] + PLACE_COST[1] * overlaps
        self.lowest_cost = LOWEST_FIRST_COST[0] + LOWEST_FIRST_COST[1] * overlaps
        _, slo, shi = time_sections(self.start, self.end)
        #: each buffer's time sections ``[slo, shi)``, for lowest-first
        self.secs = (slo, shi)

    def place(self, order: np.ndarray, best_fit: bool = True) -> np.ndarray:
        """Offsets (int64, buffer order) from placing buffers in ``order``."""
        offs = self.place_by(order, best_fit, None)
        assert offs is not None  # no deadline: always complete
        return offs

    def place_by(self, order: np.ndarray, best_fit: bool, deadline: float | None) -> np.ndarray | None:
        """:meth:`place`, or ``None`` when ``deadline`` (``workclock.now()``) passes first."""
        if self.far:  # the same rule, in numpy: no key to overflow
            offs = np.asarray(place_in_order(self.problem, np.asarray(order, dtype=np.int64), best_fit), dtype=np.int64)
            return _charged(offs, True, len(order) * self.place_cost, deadline)
        place_kernel = _greedy_kernels().place
        stop = kernel_stop(deadline, self.place_cost)
        offs, complete = place_kernel(
            np.asarray(order, dtype=np.int64), best_fit, self.fixed, self.bufs, self.cover, stop
        )
        return _charged(offs, complete, len(order) * self.place_cost, deadline)

    def lowest_first(
        self, ranked: np.ndarray, keep: np.ndarray | None = None, deadline: float | None = None,
    ) -> np.ndarray | None:
        """Offsets of a lowest-first plan (see :func:`._kernels.lowest_first`).

        ``keep``: offsets of the buffers that stay where they are, -1 for the
        ones to place (pinned buffers must be kept); ``None`` places every
        buffer. ``ranked`` ranks the buffers (those kept are skipped).
        ``None`` when it does not apply (pinned buffers without ``keep``, or
        offsets too large for the heap keys) or when ``deadline`` (a
        ``workclock.now()`` value) passed before the plan was complete.
        """
        n = len(self.size)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if keep is None:
            if (self.fixed >= 0).any():
                return None
            keep = np.full(n, -1, dtype=np.int64)
        shift = max(1, int(n).bit_length())
        if self.reach >= 1 << (62 - shift):
            return None
        lowest_first = _greedy_kernels().lowest_first
        ranked = np.asarray(ranked, dtype=np.int64)
        todo = ranked[keep[ranked] < 0]
        stop = kernel_stop(deadline, self.lowest_cost)
        offs, complete = lowest_first(todo, shift, self.bufs, self.secs, keep, stop)
        return _charged(offs, complete, len(todo) * self.lowest_cost, deadline)

    def height(self, offsets: np.ndarray) -> int:
        return int((offsets + self.size).max()) if len(offsets) else 0


#: work units (:mod:`onnxmem.core.workclock`, about a microsecond each) per buffer
#: placed in order, and per buffer placed lowest-first: a base, and a share per
#: buffer it overlaps on average (what the kernels' inner loops walk)
PLACE_COST = (0.5, 0.06)
LOWEST_FIRST_COST = (1.0, 0.12)


def _charged(offs: np.ndarray, complete: bool, units: float, deadline: float | None) -> np.ndarray | None:
    """A kernel's offsets (``None`` when it stopped early), with its work charged:
    ``units`` for a complete plan, the rest of the budget for a cut-off one."""
    if complete:
        charge(units)
        return offs
    if deadline is not None:
        charge_to(deadline)
    return None


def _greedy_kernels() -> Any:
    """:mod:`._kernels`, compiled ahead of time or by numba (see :mod:`onnxmem.core._native`)."""
    from onnxmem.core._native import kernels

    return kernels("onnxmem.core.solvers._kernels")


def _warm_kernels() -> float:
    """Compile or load the placement kernels on a one-buffer problem; the seconds taken."""
    from onnxmem.core._compiled import NO_DEADLINE, warm_up

    compiled = _greedy_kernels()
    cover_lists, place_kernel, lowest_first = compiled.cover_lists, compiled.place, compiled.lowest_first
    one = np.ones(1, dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    bufs = (zero, one, one, one)
    free = np.full(1, -1, dtype=np.int64)
    spent = warm_up(cover_lists, lambda: cover_lists(zero, one, one))
    covers = cover_lists(zero, one, one)
    spent += warm_up(place_kernel, lambda: place_kernel(zero, True, free, bufs, covers, NO_DEADLINE))
    spent += warm_up(lowest_first, lambda: lowest_first(zero, 2, bufs, (zero, one), free, NO_DEADLINE))
    return spent


#: the bytes the compiled placement reaches at most: it sorts a buffer's neighbours by keys of
#: their offset and their slot (2^22 of them) packed into one 64-bit integer
PLACE_REACH = 1 << 41


def reach(size: np.ndarray, align: np.ndarray) -> int:
    """The highest offset any placement of buffers of ``size`` at ``align`` can give: their sizes
    and one alignment's padding each, added up."""
    return int(size.sum()) + int(align.max()) * len(size) if len(size) else 0


def place(problem: Problem, order: np.ndarray, best_fit: bool = True) -> np.ndarray:
    """Offsets (int64, buffer order) from placing buffers in ``order``."""
    return Placer(problem).place(order, best_fit)


def range_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``values[lo[i]:hi[i]].min()`` for every i (each range non-empty)."""
    return _range_reduce(np.minimum, values, lo, hi)


def range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``values[lo[i]:hi[i]].max()`` for every i (each range non-empty)."""
    return _range_reduce(np.maximum, values, lo, hi)


def _range_reduce(op: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    if len(lo) == 0:
        return np.zeros(0, dtype=values.dtype)
    # reduceat over the interleaved bounds: even slots are the [lo, hi) ranges;
    # one padding element keeps every bound a valid index
    padded = np.concatenate([values, values[-1:]])
    bounds = np.empty(2 * len(lo), dtype=np.int64)
    bounds[0::2] = lo
    bounds[1::2] = hi
    return op.reduceat(padded, bounds)[0::2]


def order_by(problem: Problem, name: str) -> np.ndarray:
    """Buffer indices in the order ``name`` (one of :data:`ORDERS`)."""
    start, end, size, _ = problem.arrays()
    n = len(size)
    idx = np.arange(n)
    life = end - start
    if name == "size":
        return np.lexsort((idx, -life, start, -size))
    if name == "lifetime":
        return np.lexsort((idx, start, -size, -life))
    if name == "area":
        return np.lexsort((idx, start, -size, -(size * life)))
    if name == "breadth":
        if n == 0:
            return idx
        points, sc, ec = time_sections(start, end)
        delta = np.zeros(len(points) + 1, dtype=np.int64)
        np.add.at(delta, sc, size)
        np.add.at(delta, ec, -size)
        breadth = np.cumsum(delta)[: len(points)]
        step_order = np.lexsort((np.arange(len(points)), -breadth))
        rank = np.empty(len(points), dtype=np.int64)
        rank[step_order] = np.arange(len(points))
        first = range_min(rank, sc, ec)
        return np.lexsort((idx, -life, -size, first))
    raise ValueError(f"unknown greedy order {name!r}")


#: preorders, as the exact search's: keys in priority order, all descending
#: (``width``: lifetime length; ``area``: size x width; ``total``: the most
#: bytes live at any step of the buffer's lifetime); ties by index. The first
#: is tried first.
PREORDERS = (("total", "width", "area"), ("width", "area", "total"), ("total", "area", "width"))


def preorder(problem: Problem, keys: tuple[str, ...]) -> np.ndarray:
    """Buffer indices sorted by ``keys`` (each descending), ties by index."""
    start, end, size, _ = problem.arrays()
    n = len(size)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    width = end - start
    points, slo, shi = time_sections(start, end)
    delta = np.zeros(len(points), dtype=np.int64)
    np.add.at(delta, slo, size)
    np.add.at(delta, shi, -size)
    total = range_max(np.cumsum(delta)[:-1], slo, shi)
    columns = {"width": width, "area": size * width, "total": total}
    # lexsort: the last key is the primary one
    return np.lexsort((np.arange(n),) + tuple(-columns[k] for k in reversed(keys)))


#: the buffer orders of the greedy family
ORDERS = ("size", "breadth", "lifetime", "area")


@dataclass(frozen=True, slots=True)
class GreedyResult:
    """The best plan of :func:`best_greedy_offsets`: offsets, height, the member
    that found it, and whether the deadline stopped the members early."""

    offsets: np.ndarray
    height: int
    member: str
    cut_off: bool


def greedy_offsets(problem: Problem, order: str, best_fit: bool = True) -> tuple[np.ndarray, int]:
    """Offsets and height of one greedy member (numpy on small problems, else compiled)."""
    ranked = order_by(problem, order)
    if len(problem) <= NUMPY_MAX:
        offs = np.asarray(place_in_order(problem, ranked, best_fit), dtype=np.int64)
    else:
        offs = place(problem, ranked, best_fit)
    size = problem.arrays()[2]
    return offs, int((offs + size).max(initial=0))


def best_greedy_offsets(
    problem: Problem, *, deadline: float | None, bound: int | None = None, rounds: int = 6,
    placer: Placer | None = None,
) -> GreedyResult:
    """The lowest plan over the members, then improved by promoting peaks.

    Members are tried most promising first until ``deadline`` (a
    ``workclock.now()`` value; the first member always runs): lowest-first
    with the preorders (total, area, width) and (total, width, area), size
    order with best and first fit, lowest-first (width, area, total), then the
    other orders with both fits; where the first lowest-first would take more
    work than the budget, the size order with best fit goes first (the first
    member runs to its end). It stops at the first plan that meets the
    lower bound; ``cut_off`` says whether the deadline stopped it before it
    had tried every member and round. ``placer``: one already built for
    ``problem`` (its compile time is then the caller's to account for);
    otherwise one is built and the deadline moves by its compile time.
    """
    lb = lower_bound(problem) if bound is None else bound
    if placer is None:
        placer = Placer(problem)
        if deadline is not None:
            deadline += placer.compile_seconds

    def late() -> bool:
        return deadline is not None and now() > deadline

    best: GreedyResult | None = None
    best_gap: tuple[np.ndarray, int, np.ndarray] | None = None  # for promotion
    members: list[tuple[str, tuple[str, ...] | bool]] = [
        ("lowest", PREORDERS[2]), ("lowest", PREORDERS[0]), ("size", True), ("size", False),
        ("lowest", PREORDERS[1]),
    ]
    for name in ("lifetime", "breadth", "area"):
        members += [(name, True), (name, False)]
    if _over_budget(len(problem) * placer.lowest_cost, deadline):
        # the first member always completes: where lowest-first would take more than the budget,
        # the cheaper size-sorted best fit goes first (on 65,000 buffers that overlap 10,000
        # others each, 26 s against 80 s, and at the bound where lowest-first was 0.045% over it)
        members.remove(("size", True))
        members.insert(0, ("size", True))
    for name, arg in members:
        if best is not None and late():
            return replace(best, cut_off=True)
        # the first member always completes; the others stop at the deadline
        by = None if best is None else deadline
        order: np.ndarray | None = None
        if isinstance(arg, tuple):
            found = placer.lowest_first(preorder(problem, arg), deadline=by)
            label = "lowest-" + "-".join(arg)
        else:
            order = order_by(problem, name)
            found = placer.place_by(order, arg, by)
            label = f"{name}-{'bf' if arg else 'ff'}"
        if found is None:
            if best is not None and late():
                return replace(best, cut_off=True)
            continue  # lowest-first does not apply
        offs = found
        h = placer.height(offs)
        if best is None or h < best.height:
            best = GreedyResult(offs, h, label, False)
        if order is not None and (best_gap is None or h < best_gap[1]):
            best_gap = (offs, h, order)
        if h <= lb:
            return best
    if best is None:  # no member applied: every buffer pinned or none at all
        offs = placer.place(order_by(problem, "size"), True)
        return GreedyResult(offs, placer.height(offs), "size-bf", False)
    if best_gap is None:
        return best
    return _promote_peaks(placer, best, best_gap, rounds, lb, deadline)


def _over_budget(units: float, deadline: float | None) -> bool:
    """Whether ``units`` of work go past ``deadline`` (a ``workclock.now()`` value) that has not
    passed yet (with none left, the most promising member runs alone)."""
    return deadline is not None and now() < deadline < now() + units / UNITS_PER_SECOND


def _promote_peaks(placer: Placer, best: GreedyResult, best_gap: tuple[np.ndarray, int, np.ndarray], rounds: int,
                   lb: int, deadline: float | None) -> GreedyResult:
    """Peak promotion (the gap-filling members): up to ``rounds`` times, the buffers that
    reach the top of the lowest gap-filling plan ``best_gap`` go first, in their old order,
    placed with best and first fit; the best plan so far (``cut_off`` past ``deadline``)."""
    offs, top, order = best_gap
    for _ in range(rounds):
        if deadline is not None and now() > deadline:
            return replace(best, cut_off=True)
        peak = (offs + placer.size) >= top
        if not peak.any():
            break
        order = np.concatenate([order[peak[order]], order[~peak[order]]])
        for fit in (True, False):
            got = placer.place_by(order, fit, deadline)
            if got is None:
                return replace(best, cut_off=True)
            new = got
            h = placer.height(new)
            if h < top:
                offs, top = new, h
            if h < best.height:
                best = GreedyResult(new, h, "promoted-peaks", False)
        if best.height <= lb:
            break
    return best


#: the order in which :func:`restarts` first tries the preorders (indices
#: into :data:`PREORDERS`): the greedy family's most promising first
RESTART_FIRST = (2, 0, 1)
#: how far :func:`restarts` moves a rank, as a share of the buffers
RESTART_MOVES = (0.001, 0.01, 0.05)


def share_pick(cost: list[float], best: list[float], first: tuple[int, ...] | None = None) -> int:
    """The option (an index) an anytime loop spends its next round on.

    ``cost[i]``: what option ``i``'s rounds have cost so far (seconds, or
    rounds); ``best[i]``: the lowest height they reached (``inf`` while
    untried). Untried options go first, in ``first``'s order (default: by
    index). Then the options are ranked by ``best`` (0 for the lowest) and the
    next round goes to the least ``cost[i] * 2**rank``: the best option gets
    about half the budget, the next a quarter, and so on, so every option
    keeps being tried, the ones that reach low plans most, and cheap rounds
    are many where expensive ones are few. Ties go to the lower index.
    """
    order = range(len(cost)) if first is None else first
    for i in order:
        if best[i] == float("inf"):
            return i
    rank = {i: r for r, i in enumerate(sorted(range(len(best)), key=lambda i: (best[i], i)))}
    return min(range(len(cost)), key=lambda i: (cost[i] * 2 ** rank[i], i))


def restarts(
    problem: Problem, incumbent: GreedyResult, *, deadline: float | None, bound: int,
    seed: int = 0, progress: Callable[[str], None] | None = None, placer: Placer | None = None,
) -> tuple[GreedyResult, int]:
    """Lowest-first plans from perturbed preorders until ``deadline``; the best.

    The anytime phase for problems too large for the exact search. Each round
    takes one of :data:`PREORDERS`, moves every buffer's rank by a random
    amount (up to one of :data:`RESTART_MOVES`, a share of the buffers), and
    runs the lowest-first placement with those ranks, either

    - from scratch (a *restart*), or
    - above a random level ``L`` of the best plan so far (a *rebuild*): its
      buffers below ``L`` stay, the others are placed again. Lowest-first
      places buffers by rising offset, so this is the run whose ranks differ
      only above ``L``; it costs the part of a restart above ``L``.

    Restarts and rebuilds take turns so that each gets half the time (a
    rebuild improves a plan, a restart finds others to improve). A restart's
    preorder and move are chosen by :func:`share_pick`: each is tried once, then
    the preorders share the time (a round with one preorder can cost ten
    times one with another) and the moves the rounds, the larger shares to
    those whose restarts reached the lowest plans. A rebuild takes the
    preorder and the move whose restarts reached the lowest plans. A plan no
    higher than the best replaces it (so rebuilds move along plateaus); a
    lower one is reported to ``progress``.
    It stops at the deadline or at the bound; it never returns a worse plan
    than ``incumbent``. Returns the best plan and the number of rounds. With
    no deadline it runs ``len(PREORDERS)`` rounds. A round the deadline
    interrupts is dropped.
    """
    if placer is None:
        placer = Placer(problem)
        if deadline is not None:
            deadline += placer.compile_seconds
    n = len(problem)
    pres = [preorder(problem, keys) for keys in PREORDERS]
    shares = _Shares(len(pres))
    pinned = placer.fixed >= 0
    first = RESTART_FIRST if len(pres) == len(RESTART_FIRST) else None
    rng = np.random.default_rng(seed)
    best = incumbent
    rounds = 0
    while best.height > bound:
        if deadline is None and rounds >= len(pres):
            break
        if deadline is not None and now() > deadline:
            break
        kind = 0 if shares.kind_spent[0] <= shares.kind_spent[1] else 1  # half the time each
        which, move = shares.pick(kind, first)
        began = now()
        key = np.empty(n, dtype=np.float64)
        key[pres[which]] = np.arange(n)
        key += rng.random(n) * n * RESTART_MOVES[move]
        ranked = np.argsort(key, kind="stable")
        if kind == 0:
            offs = placer.lowest_first(ranked, deadline=deadline)
        else:
            level = int(rng.integers(0, max(1, best.height)))
            keep = np.where((best.offsets < level) | pinned, best.offsets, -1)
            offs = placer.lowest_first(ranked, keep, deadline=deadline)
        rounds += 1
        if offs is None:  # the deadline passed during the round (or it does not apply)
            break
        h = placer.height(offs)
        shares.record(kind, which, move, now() - began, h)
        if h <= best.height:
            lower = h < best.height
            best = GreedyResult(offs, h, "restarts", False)
            if lower and progress is not None:
                gap = 100.0 * (h - bound) / bound if bound else 0.0
                what = "restart" if kind == 0 else "rebuild"
                progress(f"{what} {rounds}: {h:,} (+{gap:.4f}% over the bound {bound:,})")
    return best, rounds


class _Shares:
    """What :func:`restarts` has learned: per preorder the time its restarts took and the
    lowest plan they reached, per move the rounds and the lowest plan, per kind the time."""

    def __init__(self, preorders: int) -> None:
        inf = float("inf")
        self.spent, self.pre_best = [0.0] * preorders, [inf] * preorders
        self.tried, self.move_best = [0.0] * len(RESTART_MOVES), [inf] * len(RESTART_MOVES)
        self.kind_spent = [0.0, 0.0]  # restarts, rebuilds

    def pick(self, kind: int, first: tuple[int, ...] | None) -> tuple[int, int]:
        """``(preorder, move)`` of the next round: a restart's by :func:`share_pick`; a
        rebuild's, the preorder and the move whose restarts reached the lowest plans."""
        if kind == 0:
            return share_pick(self.spent, self.pre_best, first), share_pick(self.tried, self.move_best)
        which = min(range(len(self.pre_best)), key=lambda i: (self.pre_best[i], i))
        move = min(range(len(RESTART_MOVES)), key=lambda i: (self.move_best[i], i))
        return which, move

    def record(self, kind: int, which: int, move: int, took: float, height: int) -> None:
        """A round of ``kind`` took ``took`` and reached ``height``."""
        self.kind_spent[kind] += took
        if kind == 0:  # a rebuild's height owes much to the part it kept
            self.spent[which] += took
            self.tried[move] += 1
            self.pre_best[which] = min(self.pre_best[which], height)
            self.move_best[move] = min(self.move_best[move], height)


_SUMMARIES = {
    "size": "largest first",
    "breadth": "by breadth: buffers of the fullest steps first (TFLite)",
    "lifetime": "longest lifetime first",
    "area": "largest size x lifetime first",
}


def _make(order: str, best_fit: bool) -> tuple[str, Callable[[Problem, SolveOptions], Solution]]:
    # the size order is the family's default: "greedy" and "greedy-ff"
    label = "greedy" + ("" if order == "size" else f"-{order}") + ("" if best_fit else "-ff")

    def solver(problem: Problem, options: SolveOptions) -> Solution:
        offs, h = greedy_offsets(problem, order, best_fit)
        status = judge(h, lower_bound(problem), options.capacity)
        return Solution(tuple(int(o) for o in offs), h, label, status)

    solver.__name__ = label.replace("-", "_")
    return label, solver


for _order in ORDERS:
    for _fit in (True, False):
        _label, _fn = _make(_order, _fit)
        _summary = f"{_SUMMARIES[_order]}, {'best' if _fit else 'first'} fit"
        if _label == "greedy":
            _summary += " (TFLite's arena planner, MiniMalloc's baseline)"
        register(_label, _summary)(_fn)


@register(
    "best-greedy", "the best of every greedy order and fit, then peaks promoted",
    default_timeout=BEST_GREEDY_TIMEOUT,
)
def best_greedy(problem: Problem, options: SolveOptions) -> Solution:
    lb = lower_bound(problem)
    res = best_greedy_offsets(problem, deadline=options.deadline, bound=lb)
    return Solution(
        tuple(int(o) for o in res.offsets),
        res.height,
        "best-greedy",
        judge(res.height, lb, options.capacity, res.cut_off),
        stats={"lower_bound": float(lb)},
    )
