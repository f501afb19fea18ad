"""``exact`` and ``auto``: branch and bound over canonical placements.

``exact`` answers two questions:

- at a fixed capacity (``options.capacity``): is there a plan whose arena fits
  it? It returns one (``feasible``, or ``optimal`` when its height meets the
  lower bound), proves there is none (``infeasible``, empty offsets), or runs
  out of time (``timeout``, with the best greedy plan, which does not fit);
- with no capacity (minimize): the smallest arena it can prove or find.

Steps:

1. a capacity below the max-live lower bound is rejected (in ``solve``);
2. the best greedy plan is computed first, within :data:`GREEDY_SHARE` of
   the budget (a decision on at most :data:`DECIDE_NUMPY_MAX` buffers takes
   the numpy size-sorted best fit instead, so that the compiled greedy
   family is not loaded where the search is fast), and kept as the
   incumbent (the search is anytime: every answer carries the best plan
   found so far); if it already fits the capacity, or meets the lower
   bound, it is returned;
3. zero-size buffers go at offset 0; time is cut into sections and the
   problem into *components* at section boundaries no buffer crosses;
4. a decision at capacity ``C`` searches each component whose incumbent does
   not fit ``C`` with the compiled depth-first search of :mod:`._search`
   (canonical bottom-left placement, dominance, cross-section bounds, dynamic
   decomposition). Three searches, one per static preorder, each with its
   own state, take turns under a node limit that doubles each round; a turn
   goes on from where the search's last turn stopped (no work is redone),
   until one finds a plan, one exhausts its search space (``C`` is
   infeasible) or the deadline passes (:mod:`.turns`). When ``C`` is above
   the max-live bound, three more searches at the bound take their turns
   after those, with half their node limit: a tighter capacity prunes more, and a plan at the bound fits
   ``C``; one of them that exhausts its space only leaves the turns. Each
   pruning rule can be turned off (``options.switches``, :class:`.SearchSwitches`);
5. minimize: the proven bound starts at the max-live bound and the incumbent
   at the greedy height. A decision at the bound comes first, with
   :data:`FIRST_SHARE` of the budget (on these problems the bound is often
   the optimum); then capacities between the two are bisected: a plan lowers
   the incumbent to its height, an exhausted search raises the bound past
   the capacity, a timeout moves the next try up. These decisions also run
   *probes*, short searches from randomly perturbed preorders
   (:mod:`.turns`; drawn from ``options.seed``, so the same plan on every
   run). The result is ``optimal`` when the bound meets the incumbent, else
   ``timeout`` (the deadline ended the bisection before a proof).

The budget is the caller's (``options.deadline``, set by :func:`.solve`);
nothing here has a budget of its own. Guarantee: every returned plan is valid; ``optimal`` is only reported with a
proof (the lower bound is met, or every smaller capacity was exhausted);
``infeasible`` only when the search space at that capacity was exhausted.
Problems with pinned buffers get the best greedy plan with its honest
status; problems too large for the search's undo stacks spend the rest of the
budget on lowest-first restarts and rebuilds (:func:`.greedy.restarts`), which keep
improving the plan until the deadline.

``auto`` (the default of ``plan``) tries the cheap answers before the search,
so that small model problems never load numba (they run compiled only where the
kernels are compiled ahead of time and load at no cost, :func:`onnxmem.core._native.mode`;
else in numpy, with the same answers):

1. on problems of up to :data:`AUTO_NUMPY_MAX` buffers, none pinned: the plain
   size-sorted best fit (:func:`_size_best_fit`); if it
   meets the lower bound (or fits the capacity) it is returned at once;
2. then the lowest-first dives of :mod:`.skyline`, one per preorder,
   at the lower bound (or the capacity); the first that succeeds is returned;
3. otherwise ``exact`` under the caller's budget (by default a short one,
   :data:`AUTO_TIMEOUT` seconds): the proof when it comes in time, else the
   best plan found. Every answer
   carries its gap to the bound in ``stats``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from onnxmem.core.problem import Problem, Solution, Status, lower_bound, time_sections
from onnxmem.core.solvers.greedy import GreedyResult, Placer, best_greedy_offsets, restarts
from onnxmem.core.solvers.registry import SearchSwitches, SolveOptions, judge, register
from onnxmem.core.solvers.turns import PROBE_MOVE, PROBE_NODES, Probes, nodes_visited, take_turns
from onnxmem.core.workclock import now

# The compiled search (numba) is imported inside the functions that run it, so
# that importing this module, and the quick paths of ``auto``, never load numba.

__all__ = [
    "ExactSearch", "AUTO_NUMPY_MAX", "AUTO_TIMEOUT", "DECIDE_NUMPY_MAX", "EXACT_TIMEOUT", "MAX_STACK",
]

#: default seconds of search for ``exact`` and ``auto``
EXACT_TIMEOUT = 30.0
AUTO_TIMEOUT = 3.0
#: ``auto`` tries its cheap steps (the best fit and the dives) on problems of at most this many buffers
AUTO_NUMPY_MAX = 2000
#: a decision (fixed capacity) on at most this many buffers starts the search
#: from the numpy best fit instead of the compiled greedy family
DECIDE_NUMPY_MAX = 2000
#: the search is skipped when its undo stacks would need more entries
MAX_STACK = 60_000_000


@dataclass
class _Component:
    sec_lo: int
    sec_hi: int
    bufs: np.ndarray  # local buffer indices


class ExactSearch:
    """The search arrays of one problem; :meth:`decide` and :meth:`minimize`."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        start, end, size, align = problem.arrays()
        n_all = len(size)
        self.n_all = n_all
        self.size_all = size
        self.pinned = any(b.offset is not None for b in problem.buffers)
        self.free = np.nonzero(size > 0)[0]
        f = self.free
        self.size = size[f].copy()
        self.align = align[f].copy()
        n = len(f)
        self.n = n
        if n == 0:
            self.nsec = 0
            self.components: list[_Component] = []
            self.stack_need = 0
            self.pool_need = 0
            return
        st, en = start[f], end[f]
        points, self.slo, self.shi = time_sections(st, en)
        self.width = (en - st).astype(np.int64)
        nsec = len(points) - 1
        self.nsec = nsec
        self.pool_need = n + (n + 2) * (2 * n + nsec + 2)
        self.stack_need = n * nsec
        if max(self.pool_need, self.stack_need) > MAX_STACK:
            self.components = []  # too large to search: skip building the arrays
            return
        lens = self.shi - self.slo
        self._sections(lens)
        self._overlaps()
        self.stack_need = int(lens.sum()) + n * nsec
        self.pool_need = n + (n + 2) * (2 * n + nsec + 2)
        self.components = self._components()

    def _sections(self, lens: np.ndarray) -> None:
        """Section members (CSR), and each section's initial total and cut count."""
        n, nsec = self.n, self.nsec
        counts = np.zeros(nsec + 1, dtype=np.int64)
        np.add.at(counts, self.slo, 1)
        np.add.at(counts, self.shi, -1)
        per_sec = np.cumsum(counts)[:nsec]
        self.sec_ptr = np.concatenate([[0], np.cumsum(per_sec)]).astype(np.int64)
        owner = np.repeat(np.arange(n), lens)
        secs = np.concatenate([np.arange(a, b) for a, b in zip(self.slo, self.shi)])
        o = np.lexsort((owner, secs))
        self.sec_mem = owner[o].astype(np.int64)
        delta = np.zeros(nsec + 1, dtype=np.int64)
        np.add.at(delta, self.slo, self.size)
        np.add.at(delta, self.shi, -self.size)
        self.total0 = np.cumsum(delta)[:nsec].copy()
        cdelta = np.zeros(nsec + 1, dtype=np.int64)
        np.add.at(cdelta, self.slo, 1)
        np.add.at(cdelta, self.shi - 1, -1)
        self.cuts0 = np.cumsum(cdelta)[:nsec].copy()  # cuts0[s]: cross s|s+1

    def _overlaps(self) -> None:
        """The buffers each buffer overlaps in time (CSR ``ov_ptr``/``ov_idx``)."""
        n = self.n
        order = np.argsort(self.slo, kind="stable")
        sl = self.slo[order]
        hi_pos = np.searchsorted(sl, self.shi[order], side="left")
        pairs_a: list[np.ndarray] = []
        pairs_b: list[np.ndarray] = []
        for p in range(n):
            if hi_pos[p] > p + 1:
                others = order[p + 1 : hi_pos[p]]
                pairs_a.append(np.full(len(others), order[p]))
                pairs_b.append(others)
        if pairs_a:
            a = np.concatenate(pairs_a)
            b = np.concatenate(pairs_b)
            src = np.concatenate([a, b])
            dst = np.concatenate([b, a])
        else:
            src = dst = np.zeros(0, dtype=np.int64)
        o = np.lexsort((dst, src))
        self.ov_idx = dst[o].astype(np.int64)
        self.ov_ptr = np.concatenate(
            [[0], np.cumsum(np.bincount(src, minlength=n))]
        ).astype(np.int64)

    def _components(self) -> list[_Component]:
        """Static components: the runs of sections between boundaries no buffer crosses."""
        nsec = self.nsec
        cut_at = [s + 1 for s in range(nsec - 1) if self.cuts0[s] == 0]
        bounds = [0] + cut_at + [nsec]
        comps: list[_Component] = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            members = np.nonzero((self.slo >= lo) & (self.shi <= hi))[0]
            if len(members):
                comps.append(_Component(lo, hi, members))
        return comps

    @property
    def searchable(self) -> bool:
        return not self.pinned and max(self.stack_need, self.pool_need) <= MAX_STACK

    def _arrays(self) -> tuple[np.ndarray, ...]:
        """The read-only problem arrays, as :data:`._search.Arrays` orders them."""
        return (
            self.size, self.align, self.width, self.slo, self.shi,
            self.sec_ptr, self.sec_mem, self.ov_ptr, self.ov_idx,
        )

    def _state(self) -> tuple[np.ndarray, ...]:
        """Fresh search state (:data:`._search.State`)."""
        n, nsec = self.n, self.nsec
        return (
            np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64),
            np.zeros(nsec, dtype=np.int64), self.total0.copy(), self.cuts0.copy(),
            np.full(n, -1, dtype=np.int64),
        )

    def _work(self) -> tuple[np.ndarray, ...]:
        """Scratch arrays (:data:`._search.Work`)."""
        nsec = self.nsec
        ov = max(1, len(self.ov_idx))
        stack = max(1, self.stack_need)
        return (
            np.empty(ov, dtype=np.int64), np.empty(ov, dtype=np.int64),
            np.empty(stack, dtype=np.int64), np.empty(stack, dtype=np.int64),
            np.zeros(nsec, dtype=np.int64), np.empty(nsec, dtype=np.int64),
            np.empty(self.pool_need, dtype=np.int64),
        )

    def decide(
        self, capacity: int, local_best: np.ndarray, deadline: float | None,
        switches: SearchSwitches | None = None, rng: np.random.Generator | None = None,
        bound: int | None = None,
    ) -> tuple[int, np.ndarray, int]:
        """Search for a plan within ``capacity``.

        ``local_best`` (offsets of the non-zero buffers) is the incumbent:
        components where it already fits are kept. Returns ``(status, offsets,
        nodes)`` with status ``FOUND``, ``NOT_FOUND`` (proven infeasible) or
        ``TIMEOUT``; ``deadline`` is a ``workclock.now()`` value (``None``:
        none). The first search in a process moves the deadline by the time it
        took to compile or load the compiled code. With ``rng``, probes from
        perturbed preorders share the work with the complete searches
        (:mod:`.turns`). With a ``bound`` below ``capacity``, searches at the
        bound take turns too, after those at the capacity: a tighter capacity
        prunes more, so where the bound is the optimum they are often the
        first to find a plan (which fits the capacity too).
        """
        from onnxmem.core.solvers._searchdefs import FOUND

        plan = local_best.copy()
        tops = plan + self.size
        done = 0
        comps = sorted(
            self.components, key=lambda c: -int(tops[c.bufs].max(initial=0))
        )
        flags = (switches or SearchSwitches()).flags()
        for comp in comps:
            if tops[comp.bufs].max(initial=0) <= capacity:
                continue
            query = np.array([comp.sec_lo, comp.sec_hi, capacity, *flags], dtype=np.int64)
            runs = self._runs(comp, query)
            tighter = None
            if bound is not None and bound < capacity:
                tighter = self._runs(comp, np.array([*query[:2], bound, *flags], dtype=np.int64))
            probes = None if rng is None else Probes(
                partial(self._probe, comp, query, []), rng, PROBE_NODES * len(comp.bufs))
            status, found, deadline, probed = take_turns(
                runs, max(64, len(comp.bufs)), deadline, probes, tighter)
            done += nodes_visited(runs + (tighter or [])) + probed
            if found is None:
                return status, plan, done
            plan[comp.bufs] = found[comp.bufs]
        return FOUND, plan, done

    def _runs(self, comp: _Component, query: np.ndarray) -> list[tuple[Any, ...]]:
        """One search of ``comp`` per preorder, each with its own state: the arguments of
        the compiled ``search`` (:func:`.turns.take_turns` runs them)."""
        from onnxmem.core.solvers._searchdefs import FRAME_FIELDS, HEURISTICS

        return [
            self._run(comp, query, heur, self._state(), self._work(),
                      np.zeros((self.n + 2, FRAME_FIELDS), dtype=np.int64))
            for heur in HEURISTICS
        ]

    def _run(self, comp: _Component, query: np.ndarray, heur: np.ndarray, state: tuple[np.ndarray, ...],
             work: tuple[np.ndarray, ...], frames: np.ndarray) -> tuple[Any, ...]:
        """The arguments of a new compiled ``search`` of ``comp`` from ``heur``'s preorder
        with the given fresh state, scratch and frames."""
        from onnxmem.core._native import kernels
        from onnxmem.core.solvers._searchdefs import NCTR

        part = kernels("onnxmem.core.solvers._search").preorder(
            comp.bufs.astype(np.int64), heur, self.size, self.width, self.slo, self.shi, state[3],
        )
        ctr = np.zeros(NCTR, dtype=np.int64)
        ctr[7] = -1
        return (part, query, heur, self._arrays(), state, work, ctr, frames)

    def _probe(self, comp: _Component, query: np.ndarray, scratch: list[Any],
               rng: np.random.Generator) -> tuple[Any, ...]:
        """A new search of ``comp`` from one of the static preorders (drawn by ``rng``)
        with every rank moved by up to :data:`.turns.PROBE_MOVE` of its buffers. The
        probes of one decision share one state (reset here) and scratch, kept in ``scratch``."""
        from onnxmem.core.solvers._searchdefs import FRAME_FIELDS, HEURISTICS

        if not scratch:
            scratch += [self._state(), self._work(), np.zeros((self.n + 2, FRAME_FIELDS), dtype=np.int64)]
        state, work, frames = scratch
        for array, fresh in zip(state, (-1, 0, 0, self.total0, self.cuts0, -1)):
            array[:] = fresh
        run = self._run(comp, query, HEURISTICS[int(rng.integers(len(HEURISTICS)))], state, work, frames)
        part = run[0]
        key = np.arange(len(part)) + rng.random(len(part)) * (len(part) * PROBE_MOVE)
        return (part[np.argsort(key, kind="stable")],) + run[1:]

    def expand(self, local: np.ndarray) -> np.ndarray:
        """Offsets of every buffer from offsets of the non-zero ones."""
        out = np.zeros(self.n_all, dtype=np.int64)
        out[self.free] = local
        return out

    def height(self, local: np.ndarray) -> int:
        return int((local + self.size).max(initial=0))


def _solution(
    name: str, problem: Problem, offsets: np.ndarray, height: int, status: Status,
    bound: int, nodes: int,
) -> Solution:
    gap = 100.0 * (height - bound) / bound if bound > 0 else 0.0
    infeasible = status is Status.INFEASIBLE
    return Solution(
        () if infeasible else tuple(int(o) for o in offsets),
        0 if infeasible else height,
        name,
        status,
        stats={"lower_bound": float(bound), "gap_pct": gap, "nodes": float(nodes)},
    )


#: the share of the budget the greedy incumbent may take before the search
GREEDY_SHARE = 0.25
#: minimize: the share of the budget left after the greedy plan that the decision at the
#: max-live bound may take (on the challenging instances it finds its plan in well under
#: 1%, where it has one; where it has none, the rest goes to the bisection)
FIRST_SHARE = 0.1


def run_exact(problem: Problem, options: SolveOptions, name: str) -> Solution:
    """The body of ``exact`` and ``auto`` (see the module docstring)."""
    t0 = now()
    deadline = options.deadline
    lb = lower_bound(problem)
    ex = ExactSearch(problem)
    cap = options.capacity
    placer: Placer | None = None
    if cap is not None and ex.searchable and len(problem) <= DECIDE_NUMPY_MAX:
        # a decision on a small problem: the size-sorted best fit is the
        # incumbent (the search is fast here; the greedy family is not run)
        g = _size_best_fit(problem)
    else:
        placer = Placer(problem)
        if deadline is not None:  # first use in this process: compiling is not searching
            deadline += placer.compile_seconds
            t0 += placer.compile_seconds
        greedy_by = None if deadline is None else t0 + GREEDY_SHARE * max(0.0, deadline - t0)
        g = best_greedy_offsets(problem, deadline=greedy_by, bound=lb, placer=placer)
    g_offs, g_height = g.offsets, g.height
    if g_height <= lb:
        return _solution(name, problem, g_offs, g_height, Status.OPTIMAL, lb, 0)
    if cap is not None and g_height <= cap:
        return _solution(name, problem, g_offs, g_height, Status.FEASIBLE, lb, 0)
    options.report(f"greedy {g.member}: {g_height:,} ({_gap(g_height, lb)} over the bound {lb:,})")
    if not ex.searchable:
        if any(b.offset is not None for b in problem.buffers):
            # nothing to search with: the greedy plan, for what it proves
            return _solution(name, problem, g_offs, g_height, judge(g_height, lb, cap), lb, 0)
        # too large to search: restarts until the deadline (or the capacity)
        target = lb if cap is None else cap
        best, rounds = restarts(
            problem, g, deadline=deadline, bound=target, seed=options.seed,
            progress=options.progress, placer=placer,
        )
        cut_off = deadline is not None and now() >= deadline
        status = judge(best.height, lb, cap, cut_off and best.height > target)
        return _solution(name, problem, best.offsets, best.height, status, lb, rounds)
    from onnxmem.core.solvers._searchdefs import FOUND, NOT_FOUND

    switches = options.switches
    incumbent = g_offs[ex.free].copy()
    inc_height = g_height
    nodes = 0
    if cap is not None:
        code, plan, nodes = ex.decide(cap, incumbent, deadline, switches, bound=lb)
        if code == FOUND:
            h = ex.height(plan)
            return _solution(name, problem, ex.expand(plan), h, judge(h, lb, cap), lb, nodes)
        if code == NOT_FOUND:
            return _solution(name, problem, g_offs, g_height, Status.INFEASIBLE, lb, nodes)
        return _solution(name, problem, g_offs, g_height, Status.TIMEOUT, lb, nodes)
    incumbent, inc_height, lo, n_ = _minimize(ex, incumbent, inc_height, lb, deadline, options)
    # unproven here means a decision ran out of its share of the budget
    status = judge(inc_height, lo, None, cut_off=True)
    return _solution(name, problem, ex.expand(incumbent), inc_height, status, lo, nodes + n_)


def _minimize(ex: ExactSearch, incumbent: np.ndarray, inc_height: int, lb: int, deadline: float | None,
              options: SolveOptions) -> tuple[np.ndarray, int, int, int]:
    """Decisions at capacities between the bound ``lb`` and the incumbent's height until
    they meet or the deadline passes: ``(best offsets, their height, the raised bound, nodes)``.
    The first decision tries the bound with :data:`FIRST_SHARE` of the time left; later ones
    bisect, with probes (:mod:`.turns`) drawn from ``options.seed``."""
    from onnxmem.core.solvers._searchdefs import FOUND, NOT_FOUND

    nodes = 0
    lo, hi = lb, inc_height
    timed_out_at: int | None = None
    first = True
    rng = np.random.default_rng(options.seed)
    while lo < hi:
        left = 1e9 if deadline is None else deadline - now()
        if left <= 0:
            break
        probe = None if first else rng
        if first:
            c, budget = lo, left * FIRST_SHARE
            first = False
        else:
            base = lo if timed_out_at is None else max(lo, timed_out_at + 1)
            if base >= hi:
                break
            c, budget = (base + hi - 1) // 2, left / 2
        # the decision at the bound searches as a decision at a capacity does; the
        # later ones, below a plan the searches found hard to improve, probe too
        code, plan, n_ = ex.decide(c, incumbent, now() + budget, options.switches, probe)
        nodes += n_
        if code == FOUND:
            incumbent = plan
            hi = inc_height = ex.height(plan)
            options.report(f"search: {inc_height:,} ({_gap(inc_height, lo)} over the bound {lo:,})")
        elif code == NOT_FOUND:
            lo = c + 1
            options.report(f"bound raised to {lo:,}")
        else:
            timed_out_at = c if timed_out_at is None else max(timed_out_at, c)
    return incumbent, inc_height, lo, nodes


def _numpy_greedy(problem: Problem) -> GreedyResult:
    """The size-sorted best fit, placed in numpy (no compiled code loaded)."""
    from onnxmem.core.solvers.baseline import place_in_order, size_order

    offs = np.asarray(place_in_order(problem, size_order(problem)), dtype=np.int64)
    height = int((offs + problem.arrays()[2]).max(initial=0))
    return GreedyResult(offs, height, "size-bf", False)


def _size_best_fit(problem: Problem) -> GreedyResult:
    """The size-sorted best fit: placed by the compiled kernel where the kernels
    are compiled ahead of time (they load at no cost), else in numpy (so that
    numba is not loaded for it). Both place alike (a test checks it)."""
    from onnxmem.core._native import mode

    if mode() != "aot":
        return _numpy_greedy(problem)
    from onnxmem.core.solvers.baseline import size_order

    placer = Placer(problem)
    offs = placer.place(size_order(problem))
    return GreedyResult(offs, placer.height(offs), "size-bf", False)


def _gap(height: int, bound: int) -> str:
    return f"+{100.0 * (height - bound) / bound:.3f}%" if bound > 0 else "+0%"


@register(
    "exact", "branch and bound over canonical placements; proves optimality",
    default_timeout=EXACT_TIMEOUT,
)
def exact(problem: Problem, options: SolveOptions) -> Solution:
    return run_exact(problem, options, "exact")


def quick_plan(problem: Problem, capacity: int | None, bound: int) -> Solution | None:
    """``auto``'s cheap steps (1 and 2 of the module docstring), or ``None``."""
    if len(problem) > AUTO_NUMPY_MAX or any(b.offset is not None for b in problem.buffers):
        return None
    from onnxmem.core.solvers.skyline import PREORDERS, dive, preorder

    target = bound if capacity is None else capacity
    _, _, size, _ = problem.arrays()
    g = _size_best_fit(problem)
    if g.height <= target:
        return _solution("auto", problem, g.offsets, g.height, judge(g.height, bound, capacity), bound, 0)
    for keys in PREORDERS:
        found = dive(problem, target, preorder(problem, keys))
        if found is not None:
            height = int((found + size).max(initial=0))
            return _solution("auto", problem, found, height, judge(height, bound, capacity), bound, 0)
    return None


@register(
    "auto", "cheap plans first, then exact within a short budget", default_timeout=AUTO_TIMEOUT,
    conflicts=True,
)
def auto(problem: Problem, options: SolveOptions) -> Solution:
    if problem.conflicts is not None:  # buffers that conflict along a graph (--concurrency dag)
        from onnxmem.core.solvers.conflict import conflict_auto

        return conflict_auto(problem, options)
    quick = quick_plan(problem, options.capacity, lower_bound(problem))
    if quick is not None:
        return quick
    return run_exact(problem, options, "auto")
