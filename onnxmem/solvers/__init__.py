"""Buffer-assignment solvers, by short lowercase name.

A solver is a function ``(problem, options) -> Solution``. It registers with
:func:`register`; the CLI's ``--solver`` choices come from :data:`SOLVERS`.
Solvers never import onnx or onnxruntime.

Every solver honours ``options.capacity`` (``None``: make the arena as small as
it can) and ``options.timeout`` (seconds; return the best plan so far), and
says in ``Solution.status`` whether its plan is proven optimal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from ..errors import ProblemError
from ..problem import Problem, Solution, lower_bound

__all__ = ["SOLVERS", "SolveOptions", "SolverInfo", "register", "solve"]


@dataclass(frozen=True, slots=True)
class SolveOptions:
    """Options every solver takes.

    ``capacity``: bytes the arena may use; ``None`` minimizes the arena.
    ``timeout``: seconds of search before the best plan found is returned
    (``None``: the solver's own default). ``seed``: for randomized solvers.
    """

    capacity: int | None = None
    timeout: float | None = None
    seed: int = 0


SolverFn = Callable[[Problem, SolveOptions], Solution]


@dataclass(frozen=True, slots=True)
class SolverInfo:
    name: str
    fn: SolverFn
    summary: str
    form: str  # "offsets" or "shared-objects"


SOLVERS: dict[str, SolverInfo] = {}


def register(name: str, summary: str, form: str = "offsets") -> Callable[[SolverFn], SolverFn]:
    """Decorator: add a solver to :data:`SOLVERS` under ``name``."""

    def deco(fn: SolverFn) -> SolverFn:
        if name in SOLVERS:
            raise ValueError(f"solver {name!r} registered twice")
        SOLVERS[name] = SolverInfo(name, fn, summary, form)
        return fn

    return deco


def solve(problem: Problem, solver: str = "greedy", options: SolveOptions | None = None) -> Solution:
    """Solve ``problem`` with the named solver; sets ``seconds`` on the result.

    A capacity below the max-live lower bound is rejected at once.
    """
    if solver not in SOLVERS:
        raise ProblemError(
            f"unknown solver '{solver}'; choose one of: {', '.join(sorted(SOLVERS))}"
        )
    opts = options or SolveOptions()
    if opts.capacity is None and problem.capacity is not None:
        opts = replace(opts, capacity=problem.capacity)
    if opts.capacity is not None:
        bound = lower_bound(problem)
        if opts.capacity < bound:
            raise ProblemError(
                f"capacity {opts.capacity} is below the lower bound {bound}: at some "
                "step more bytes than that are live; raise the capacity"
            )
    t0 = time.perf_counter()
    sol = SOLVERS[solver].fn(problem, opts)
    return replace(sol, seconds=time.perf_counter() - t0)


# Register the built-in solvers (import order sets the listing order).
from . import baseline as _baseline  # noqa: E402,F401
from . import greedy as _greedy  # noqa: E402,F401
from . import exact as _exact  # noqa: E402,F401
from . import shared as _shared  # noqa: E402,F401
