"""``pack``: solve a MiniMalloc-format instance, as ``onnxmem pack`` does.

Steps: read the CSV (``id,lower,upper,size``), solve it at a fixed capacity
(the decision MiniMalloc answers) or with the arena minimized, and report the
buffers, the max-live lower bound, the height, the gap to the bound, the status
the seconds and the budget. The offsets can be written back in the same
format.

Outcomes, as ``onnxmem pack`` maps them to exit codes: a plan that fits the
capacity (any plan when minimizing): exit 0; no plan fits the capacity
(status ``infeasible``, ``timeout`` or ``over-capacity``): exit
:data:`EXIT_NO_PLAN`; a plan the independent validator rejects (a solver bug)
raises :class:`~onnxmem.core.errors.PlanInvalid` (exit 3); bad input raises
:class:`~onnxmem.core.errors.ProblemError` (exit 1).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable

from onnxmem.core.errors import PlanInvalid, ProblemError
from onnxmem.core.problem import Problem, Solution, lower_bound, read_csv, validate, write_csv
from onnxmem.core.solvers.registry import SOLVERS, SolveOptions, solve

__all__ = ["EXIT_NO_PLAN", "PackReport", "pack", "pack_csv"]

#: ``onnxmem pack``'s exit code when no plan fits the capacity
EXIT_NO_PLAN = 4

#: the solver ``pack`` uses unless told otherwise
DEFAULT_SOLVER = "exact"


@dataclass(frozen=True, slots=True)
class PackReport:
    """One solved instance: the problem, the solution and its figures."""

    problem: Problem
    solution: Solution
    lower_bound: int
    capacity: int | None

    @property
    def strongest_bound(self) -> int:
        """The max-live bound, or the higher bound the solver proved."""
        return max(self.lower_bound, int(self.solution.stats.get("lower_bound", 0)))

    @property
    def gap_pct(self) -> float:
        """The plan's height over the strongest bound, in percent."""
        bound = self.strongest_bound
        if not self.solution.found or bound <= 0:
            return 0.0
        return 100.0 * (self.solution.height - bound) / bound

    @property
    def fits(self) -> bool:
        """Whether the plan is valid and fits the capacity (when one is set)."""
        return self.solution.fits(self.capacity)

    def lines(self) -> list[tuple[str, str]]:
        s = self.solution
        budget = s.stats.get("budget_s")
        extra = []
        if self.strongest_bound > self.lower_bound:
            extra.append(("proven bound", f"{self.strongest_bound:,}"))
        return [
            ("buffers", f"{len(self.problem):,}"),
            ("lower bound", f"{self.lower_bound:,}"),
            ("capacity", "minimize" if self.capacity is None else f"{self.capacity:,}"),
            ("height", f"{s.height:,}" if s.status != "infeasible" else "-"),
        ] + extra + [
            ("gap", f"{self.gap_pct:.3f}%" if s.status != "infeasible" else "-"),
            ("status", str(s.status)),
            ("solver", s.solver),
            ("seconds", f"{s.seconds:.3f}"),
            ("budget", "none (one pass)" if budget is None else f"{budget:g} s"),
        ]


def pack(
    problem: Problem,
    *,
    capacity: int | None = None,
    solver: str = DEFAULT_SOLVER,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> PackReport:
    """Solve ``problem`` at ``capacity`` (``None``: minimize the arena).

    Raises :class:`ProblemError` for a capacity below the lower bound, an
    unknown solver or a timeout not positive and finite, and :class:`PlanInvalid` when
    the independent validator rejects the plan. ``progress`` is called with a
    line whenever the search improves its plan.
    """
    if solver not in SOLVERS:
        raise ProblemError(
            f"unknown solver '{solver}'; choose one of: {', '.join(sorted(SOLVERS))} (--solver)"
        )
    if timeout is not None and not 0 < timeout < math.inf:  # NaN too: a budget that never ends
        raise ProblemError(f"timeout {timeout} must be a positive, finite number of seconds (--timeout)")
    sol = solve(problem, solver, SolveOptions(capacity=capacity, timeout=timeout, progress=progress))
    if sol.found:
        # a plan over the capacity is checked for everything but the capacity
        checked = problem.with_capacity(capacity if sol.fits(capacity) else None)
        bad = validate(checked, sol, limit=1)
        if bad:
            raise PlanInvalid(f"solver {solver} returned a wrong plan: {bad[0]}")
    return PackReport(problem, sol, lower_bound(problem), capacity)


def pack_csv(
    path: str | os.PathLike[str],
    *,
    capacity: int | None = None,
    solver: str = DEFAULT_SOLVER,
    timeout: float | None = None,
    output: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> PackReport:
    """Read a MiniMalloc CSV, :func:`pack` it, and write the offsets to ``output``.

    The output is written (atomically) only when the plan fits.
    """
    problem, _ = read_csv(path)
    report = pack(problem, capacity=capacity, solver=solver, timeout=timeout, progress=progress)
    if output is not None and report.fits:
        write_csv(problem, output, report.solution.offsets)
    return report
