"""The solver registry: options, registration, and :func:`solve`, which owns the deadline.

Strategy modules register here; the package imports them (see ``__init__``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from onnxmem.core.errors import ProblemError
from onnxmem.core.problem import Problem, Solution, Status, lower_bound
from onnxmem.core.workclock import now, session

__all__ = [
    "SOLVERS",
    "SearchSwitches",
    "SolveOptions",
    "SolverInfo",
    "judge",
    "register",
    "solve",
]


@dataclass(frozen=True, slots=True)
class SearchSwitches:
    """The pruning rules of the ``exact`` search (see :mod:`._search`), each on or off.

    Every rule keeps at least one optimal plan, so turning one off changes
    nothing but the time a search takes (tests check this). ``canonical``:
    buffers are placed in non-decreasing (offset, rank) order (rule 1);
    ``dominance``: a buffer at or above the lowest top an unplaced buffer can
    reach is not tried (rule 2); ``sections``: the cross-section check (rule
    3); ``decomposition``: independent sides are searched apart (rule 4).
    """

    canonical: bool = True
    dominance: bool = True
    sections: bool = True
    decomposition: bool = True

    def flags(self) -> tuple[int, int, int, int]:
        """The switches as 0/1 in the order above (what the compiled search reads)."""
        return (int(self.canonical), int(self.dominance), int(self.sections), int(self.decomposition))


@dataclass(frozen=True, slots=True)
class SolveOptions:
    """Options every solver takes.

    ``capacity``: bytes the arena may use; ``None`` minimizes the arena.
    ``timeout``: budget seconds the solver may search before it returns the
    best plan it has (``None``: the solver's ``default_timeout``): seconds of
    counted work (:mod:`onnxmem.core.workclock`; the same plan at any load) unless
    the process uses the wall clock. ``seed``: for
    randomized solvers. ``switches``: the exact search's pruning rules.
    ``deadline``: a :func:`onnxmem.core.workclock.now` value, set by :func:`solve`
    from the timeout; solvers read it, callers leave it alone. ``progress``: called
    with a line whenever a searching solver improves its plan.
    """

    capacity: int | None = None
    timeout: float | None = None
    seed: int = 0
    switches: SearchSwitches = SearchSwitches()
    deadline: float | None = None
    progress: Callable[[str], None] | None = field(default=None, compare=False)

    def report(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)


SolverFn = Callable[[Problem, SolveOptions], Solution]


@dataclass(frozen=True, slots=True)
class SolverInfo:
    """A registered solver: its function, one-line summary, form and default budget.

    ``default_timeout``: seconds it searches when the caller gives no timeout;
    ``None`` for solvers that make one pass and never search. ``conflicts``:
    whether it plans problems with explicit conflicts (see
    :class:`onnxmem.core.problem.Problem`) as well as interval problems.
    """

    name: str
    fn: SolverFn
    summary: str
    form: str  # "offsets" or "shared-objects"
    default_timeout: float | None = None
    conflicts: bool = False

    @property
    def help(self) -> str:
        """The summary, with the default budget when the solver has one."""
        if self.default_timeout is None:
            return self.summary
        return (f"{self.summary} (searches a fixed {self.default_timeout:g} s of work, the same plan at any "
                "load, unless --timeout gives seconds)")


SOLVERS: dict[str, SolverInfo] = {}


def register(
    name: str, summary: str, form: str = "offsets", default_timeout: float | None = None,
    conflicts: bool = False,
) -> Callable[[SolverFn], SolverFn]:
    """Decorator: add a solver to :data:`SOLVERS` under ``name`` (``conflicts``: it
    plans problems with explicit conflicts too)."""

    def deco(fn: SolverFn) -> SolverFn:
        if name in SOLVERS:
            raise ValueError(f"solver {name!r} registered twice")
        SOLVERS[name] = SolverInfo(name, fn, summary, form, default_timeout, conflicts)
        return fn

    return deco


def judge(height: int, bound: int, capacity: int | None, cut_off: bool = False) -> Status:
    """The status of a plan of ``height``: ``bound`` is a proven lower bound.

    Optimal when it meets the bound; else ``timeout`` when the solver was cut
    off by its deadline; else ``over-capacity`` above the capacity; else
    ``feasible``.
    """
    if height <= bound:
        return Status.OPTIMAL
    if cut_off:
        return Status.TIMEOUT
    if capacity is not None and height > capacity:
        return Status.OVER_CAPACITY
    return Status.FEASIBLE


def solve(problem: Problem, solver: str = "greedy", options: SolveOptions | None = None) -> Solution:
    """Solve ``problem`` with the named solver; sets ``seconds`` on the result.

    A capacity below the max-live lower bound is rejected at once. The
    deadline is set here, from ``options.timeout`` or the solver's default.
    """
    if solver not in SOLVERS:
        raise ProblemError(
            f"unknown solver '{solver}'; choose one of: {', '.join(sorted(SOLVERS))}"
        )
    info = SOLVERS[solver]
    if problem.conflicts is not None and not info.conflicts:
        able = ", ".join(sorted(n for n, i in SOLVERS.items() if i.conflicts))
        raise ProblemError(
            f"solver '{solver}' plans buffers that conflict when live at one step; this problem's buffers "
            f"conflict along a graph (--concurrency dag): choose one of: {able}"
        )
    with session():
        return _solve(problem, info, options or SolveOptions())


def _solve(problem: Problem, info: SolverInfo, opts: SolveOptions) -> Solution:
    t0, started = now(), time.perf_counter()
    if opts.capacity is None and problem.capacity is not None:
        opts = replace(opts, capacity=problem.capacity)
    if opts.capacity is not None:
        bound = lower_bound(problem)
        if opts.capacity < bound:
            raise ProblemError(
                f"capacity {opts.capacity} is below the lower bound {bound}: at some "
                "step more bytes than that are live; raise the capacity"
            )
    timeout = info.default_timeout if opts.timeout is None else opts.timeout
    opts = replace(opts, timeout=timeout, deadline=None if timeout is None else t0 + timeout)
    sol = info.fn(problem, opts)
    stats = dict(sol.stats)
    if timeout is not None:
        stats["budget_s"] = float(timeout)
    return replace(sol, seconds=time.perf_counter() - started, stats=stats)
