"""The exact recomputation algorithm (OR-Tools CP-SAT), the brute force, and ``auto``.

``exact`` writes the rule of :mod:`onnxmem.remat.problem` as a constraint
program with O(values + reads) variables, in the manner of MOCCASIN (Bartan
et al., 2023: each value's retention as intervals with variable ends under
one cumulative constraint), for the order the planner chose:

1. ``d[v]``: drop droppable value ``v``; ``r[v]`` in ``[last_pre[v] + 1,
   first_post[v]]``: the step its duplicate runs before;
2. for every droppable ``w`` and value ``u`` its producer reads: if ``u`` is
   dropped and ``r[w] > last_pre[u]`` then ``r[u] <= r[w]`` and ``u``'s second
   copy lives through ``r[w]``; if ``u`` is kept it lives through ``r[w]``;
   a view's source lives as long as the view; a Concat group's bytes start
   at its first kept input's write or dropped input's recomputation;
3. each value is an interval of its size over the two slots per step of
   :func:`~onnxmem.remat.problem.simulate` (``2t``: the duplicates before
   step ``t``; ``2t + 1``: node ``t``): the original copy ``[2 start + 1,
   oe[v])`` (``oe = 2 last_pre + 2`` when dropped, else at least ``2 end +
   2``), the second copy ``[2 r[v], ce[v])``, present when dropped, and
   the duplicate's other outputs (``spare[v]`` bytes) in slot ``2 r[v]``; an
   output its node may write over an input (``inplace``) starts a slot later
   when that input's original copy ends there; one
   cumulative constraint holds them under the budget (every copy a block
   writes counts in its slot: ``simulate(..., sequential=False)``);
4. minimize the sum of ``cost[v] * d[v]``.

Every constraint only lets a value live longer or come back sooner than the
rule's fixpoint, so the optimum of the program is the optimum of the rule;
the search starts from the best heuristic's drops (a hint), stops at the
deadline with the best set so far (``feasible``) and says ``optimal`` only
with CP-SAT's proof (optimal for the program's measure, which counts every
copy a block writes at once; the heuristics' walk through a block can fit
where the program does not). ``infeasible`` only when the problem's floor
is above the budget; a program CP-SAT proves infeasible is ``none``. :func:`brute_force` tries every subset (tests use it on
small graphs). OR-Tools is imported when ``exact`` runs.
"""

from __future__ import annotations

import itertools
from typing import Any

from onnxmem.core.errors import OnnxmemError
from onnxmem.core.workclock import UNITS_PER_SECOND, charge, is_wall_clock, now
from onnxmem.remat.heuristics import greedy, mirror, sqrt_segments
from onnxmem.remat.problem import RematProblem, simulate
from onnxmem.remat.registry import Choice, RematOptions, register, result

__all__ = ["auto", "brute_force", "cpsat", "exact"]

#: ``auto`` runs ``exact`` on problems with at most this many droppable values
AUTO_EXACT_LIMIT = 400


def _ortools() -> object:
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise OnnxmemError(
            "the 'exact' recomputation algorithm needs OR-Tools; install it (pip install ortools) "
            "or pass --remat greedy"
        ) from None
    return cp_model


def _heuristics(problem: RematProblem, budget: int, options: RematOptions) -> tuple[Choice | None, Choice]:
    """The cheapest heuristic answer that fits (``None`` when none does), and the one with the lowest peak."""
    best: Choice | None = None
    lowest: Choice | None = None
    for fn in (greedy, mirror, sqrt_segments):
        got = fn(problem, budget, options)
        if got.fits and (best is None or got.cost < best.cost):
            best = got
        if lowest is None or got.peak < lowest.peak:
            lowest = got
    assert lowest is not None
    return best, lowest


@register("exact", "CP-SAT over intervals (MOCCASIN-style): proven least extra compute, anytime", 60.0)
def exact(problem: RematProblem, budget: int, options: RematOptions) -> Choice:
    return cpsat(problem, budget, options)


def cpsat(problem: RematProblem, budget: int, options: RematOptions, hint: Choice | None = None) -> Choice:
    """The program of the module doc, solved from ``hint`` (default: the best heuristic)."""
    cp_model = _ortools()
    p = problem
    if p.floor()[0] > budget:
        return Choice((), 0, simulate(p, ()).peak, "infeasible", "exact")
    v = _Program(p, cp_model.CpModel())  # type: ignore[attr-defined]
    v.copies()
    v.recompute_order()
    intervals, demands = v.group_intervals()
    v.value_intervals(v.inplace_shift(), intervals, demands)
    m, d, cand = v.m, v.d, v.cand
    m.AddCumulative(intervals, demands, budget)
    m.Minimize(sum(p.cost[x] * d[x] for x in cand))
    start = hint if hint is not None else _heuristics(p, budget, options)[0]
    if start is not None and start.fits:
        v.hint(start)
    solver = cp_model.CpSolver()  # type: ignore[attr-defined]
    _limit(solver.parameters, options)
    status = solver.Solve(m)
    charge(solver.response_proto.deterministic_time * UNITS_PER_SECOND)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # type: ignore[attr-defined]
        # infeasible here is proven for the program's measure only (every copy of a block at once)
        if start is not None and start.fits:
            return result(p, start.dropped, budget, "exact")
        return Choice((), 0, simulate(p, ()).peak, "none", "exact")
    drops = [x for x in cand if solver.Value(d[x])]
    proven = status == cp_model.OPTIMAL  # type: ignore[attr-defined]
    got = result(p, drops, budget, "exact", proven=proven)
    if start is not None and start.fits and start.cost < got.cost:  # the deadline ended before the hint was beaten
        return result(p, start.dropped, budget, "exact")
    return got


class _Program:
    """The CP-SAT program of :func:`cpsat`, built step by step in a fixed order (the order
    variables are made in is the solver's, so it stays the same run to run).

    ``d[v]``: ``v`` is dropped; ``r[v]``: the step its duplicate runs at. Slots
    (:func:`onnxmem.remat.problem.simulate`): 2t while the duplicates before step t run,
    2t + 1 while node t runs; ``oe`` / ``ce``: exclusive end slots of the original and
    the second copy.
    """

    def __init__(self, p: RematProblem, m: Any) -> None:
        self.p, self.m = p, m
        self.n = p.steps
        self.cand = p.candidates
        self.d = {v: m.NewBoolVar(f"d{v}") for v in self.cand}
        self.r = {v: m.NewIntVar(p.last_pre[v] + 1, min(p.first_post[v], self.n - 1), f"r{v}") for v in self.cand}
        self.oe: dict[int, Any] = {}
        self.ce: dict[int, Any] = {}

    def copies(self) -> None:
        """The end slots of each copy: the original's ends at its last read before the gap when
        dropped, else at its last read; the duplicate's at its last read after its step."""
        p, m, n, cand, d, r = self.p, self.m, self.n, self.cand, self.d, self.r
        # values whose original copy may live longer than without recomputation
        extend: set[int] = set()
        for w in cand:
            extend.update(p.reads[p.producer[w]])
        for vw, src in p.views:
            extend.update((vw, src))
        oe = self.oe = {v: m.NewIntVar(2 * p.start[v] + 2, 2 * n, f"oe{v}") for v in set(cand) | extend}
        ce = self.ce = {v: m.NewIntVar(1, 2 * n, f"ce{v}") for v in cand}
        for v in cand:
            m.Add(ce[v] >= 2 * r[v] + 1)
            if p.first_post[v] < n:
                m.Add(ce[v] >= 2 * p.end[v] + 2)
        for v, var in oe.items():
            if v in d:
                m.Add(var == 2 * p.last_pre[v] + 2).OnlyEnforceIf(d[v])
                m.Add(var >= 2 * p.end[v] + 2).OnlyEnforceIf(d[v].Not())
            else:
                m.Add(var >= 2 * p.end[v] + 2)

    def recompute_order(self) -> None:
        """A duplicate reads its producer's inputs (a copy of them lives until it runs), and a
        view keeps its source's bytes."""
        p, m, d, r, oe, ce = self.p, self.m, self.d, self.r, self.oe, self.ce
        for w in self.cand:
            for u in p.reads[p.producer[w]]:
                if u in d:
                    late = m.NewBoolVar(f"late{u}_{w}")
                    m.Add(r[w] >= p.last_pre[u] + 1).OnlyEnforceIf(late)
                    m.Add(r[w] <= p.last_pre[u]).OnlyEnforceIf(late.Not())
                    m.Add(r[u] <= r[w]).OnlyEnforceIf([d[w], d[u], late])
                    m.Add(ce[u] >= 2 * r[w] + 1).OnlyEnforceIf([d[w], d[u], late])
                    m.Add(oe[u] >= 2 * r[w] + 1).OnlyEnforceIf([d[w], d[u].Not()])
                else:
                    m.Add(oe[u] >= 2 * r[w] + 1).OnlyEnforceIf(d[w])
        for vw, src in p.views:
            if src in d:
                m.Add(ce[src] >= oe[vw]).OnlyEnforceIf(d[src])
                m.Add(oe[src] >= oe[vw]).OnlyEnforceIf(d[src].Not())
            else:
                m.Add(oe[src] >= oe[vw])

    def group_intervals(self) -> tuple[list[Any], list[int]]:
        """Each Concat output's bytes from its first input on: ``(intervals, demands)``."""
        p, m, d, r = self.p, self.m, self.d, self.r
        intervals: list[Any] = []
        demands: list[int] = []
        for g, parts in p.groups:
            gs = m.NewIntVar(0, 2 * p.start[g] + 1, f"gs{g}")
            for x in parts:
                if x in d:
                    m.Add(gs <= 2 * p.start[x] + 1).OnlyEnforceIf(d[x].Not())
                    m.Add(gs <= 2 * r[x]).OnlyEnforceIf(d[x])
                else:
                    m.Add(gs <= 2 * p.start[x] + 1)
            early = m.NewIntVar(0, 2 * self.n, f"gl{g}")
            intervals.append(m.NewIntervalVar(gs, early, 2 * p.start[g] + 1, f"g{g}"))
            demands.append(p.size[g])
        return intervals, demands

    def inplace_shift(self) -> dict[int, Any]:
        """``v -> written over one of its inputs`` (in place): its interval starts a slot later."""
        p, m, d, oe = self.p, self.m, self.d, self.oe
        ways: dict[int, list[Any]] = {}  # v -> one boolean per input u it may be written over
        for s, u, v in p.inplace:
            if p.size[v] == 0 or v in p.grouped or (u not in oe and p.end[u] != s):
                continue
            b = m.NewBoolVar(f"ip{v}_{u}")
            if u in oe:
                m.Add(oe[u] <= 2 * s + 2).OnlyEnforceIf(b)
            if u in d and p.last_pre[u] < s:
                m.AddImplication(b, d[u].Not())
            ways.setdefault(v, []).append(b)
        shift = {}
        for v, bs in ways.items():
            if len(bs) == 1:
                shift[v] = bs[0]
            else:
                shift[v] = m.NewBoolVar(f"ip{v}")
                m.AddBoolOr(bs).OnlyEnforceIf(shift[v])
        return shift

    def value_intervals(self, shift: dict[int, Any], intervals: list[Any], demands: list[int]) -> None:
        """Each value's copies, and a duplicate's other outputs (its block slot only)."""
        p, m, n, d, r, oe, ce = self.p, self.m, self.n, self.d, self.r, self.oe, self.ce
        for v, sz in enumerate(p.size):
            if sz == 0:
                continue
            if v in p.grouped:  # inside the Concat's output: only a dropped value's original copy is its own
                if v in d:
                    intervals.append(m.NewOptionalFixedSizeIntervalVar(2 * p.start[v] + 1, 2 * p.last_pre[v] + 1
                                                                       - 2 * p.start[v], d[v], f"o{v}"))
                    demands.append(sz)
                continue
            first = 2 * p.start[v] + 1
            if v in shift:
                length = m.NewIntVar(0, 2 * n, f"len{v}")
                intervals.append(m.NewIntervalVar(first + shift[v], length, oe[v] if v in oe else 2 * p.end[v] + 2,
                                                  f"i{v}"))
            elif v in oe:
                length = m.NewIntVar(1, 2 * n, f"len{v}")
                intervals.append(m.NewIntervalVar(first, length, oe[v], f"i{v}"))
            else:
                intervals.append(m.NewFixedSizeIntervalVar(first, 2 * p.end[v] + 2 - first, f"i{v}"))
            demands.append(sz)
            if v in d:
                length2 = m.NewIntVar(1, 2 * n, f"len2{v}")
                intervals.append(m.NewOptionalIntervalVar(2 * r[v], length2, ce[v], d[v], f"c{v}"))
                demands.append(sz)
        for v in self.cand:
            if p.spare_size(v):
                intervals.append(m.NewOptionalFixedSizeIntervalVar(2 * r[v], 1, d[v], f"s{v}"))
                demands.append(p.spare_size(v))

    def hint(self, start: Choice) -> None:
        """Start the solver from ``start``'s drops and the steps their duplicates run at."""
        chosen = set(start.dropped)
        sched = simulate(self.p, chosen)
        for v in self.cand:
            self.m.AddHint(self.d[v], int(v in chosen))
            if v in chosen and sched.at[v] < self.n:
                self.m.AddHint(self.r[v], sched.at[v])


def _limit(params: Any, options: RematOptions) -> None:
    """CP-SAT's budget. On the work clock (the default): its deterministic time, one
    worker and a fixed seed, so the same problem gets the same answer at any load and on
    every run (several workers interleaved are deterministic too, but take several times
    the wall time for the same deterministic time). Under the wall clock (``--timeout``):
    seconds and ``options.workers`` parallel workers."""
    params.random_seed = options.seed
    if is_wall_clock():
        params.num_workers = max(1, options.workers)
        params.max_time_in_seconds = max(0.01, options.left())
    else:
        params.num_workers = 1
        params.max_deterministic_time = max(0.01, options.left())


def brute_force(problem: RematProblem, budget: int) -> Choice:
    """The least-cost subset of droppable values that fits the exact program's measure
    (``simulate(..., sequential=False)``), by trying every subset (2^m simulations; for tests
    on small graphs). ``infeasible`` when none fits."""
    cand = problem.candidates
    best: Choice | None = None
    for k in range(len(cand) + 1):
        for subset in itertools.combinations(cand, k):
            s = simulate(problem, subset, sequential=False)
            if s.peak <= budget and (best is None or s.cost < best.cost):
                best = Choice(s.dropped, s.cost, s.peak, "optimal", "brute-force")
    return best if best is not None else Choice((), 0, simulate(problem, ()).peak, "infeasible", "brute-force")


@register("auto", "the cheapest of greedy, mirror and sqrt; then exact (if OR-Tools is there) from it", 10.0)
def auto(problem: RematProblem, budget: int, options: RematOptions) -> Choice:
    t0 = now()
    share = RematOptions(timeout=options.timeout, deadline=min(options.deadline or float("inf"),
                                                               t0 + options.left() / 3), seed=options.seed)
    best, lowest = _heuristics(problem, budget, share)
    if len(problem.candidates) <= AUTO_EXACT_LIMIT:
        try:
            _ortools()
        except OnnxmemError:
            pass
        else:
            got = cpsat(problem, budget, options, hint=best)
            if got.status == "infeasible" or got.fits and (best is None or got.cost <= best.cost):
                return Choice(got.dropped, got.cost, got.peak, got.status, "auto")
    if best is None:  # the drops with the lowest peak, for a caller that plans them for real
        return Choice(lowest.dropped, lowest.cost, lowest.peak, "none", "auto")
    return Choice(best.dropped, best.cost, best.peak, best.status, "auto")
