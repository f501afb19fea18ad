"""The planning steps composed once: view -> order -> liveness -> problem -> solve -> validate.

Every planner calls :func:`compose` (or, where it interleaves other work between the
steps, the steps it is made of, :func:`order_view` and :func:`solve_layout`): the main
graph (:mod:`onnxmem.planning.pipeline`), the nested bodies (:mod:`onnxmem.planning.bodies`),
the pieces of a range plan (:mod:`onnxmem.planning.ranges`) and the joint problem of a
program (:mod:`onnxmem.planning.program`). The planners differ only in the liveness step
(which sharing, which regions), which they pass in as a function of the view and the order.

A solver that finds no plan is reported here, by :func:`unsolved`, the one home of
that message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onnxmem.analysis.liveness import Liveness
from onnxmem.core.errors import OnnxmemError, PlanInvalid
from onnxmem.core.problem import Problem, Solution, Status, validate
from onnxmem.core.solvers import SolveOptions, solve
from onnxmem.graph import GraphView
from onnxmem.scheduling import OrderOptions, reorder

__all__ = ["Composed", "LivenessStep", "StepOptions", "compose", "order_view", "solve_layout", "unsolved"]


class StepOptions(Protocol):
    """What the steps read of a planner's options (:class:`onnxmem.planning.pipeline.PlanOptions`)."""

    @property
    def order(self) -> str: ...
    @property
    def solver(self) -> str: ...
    @property
    def alignment(self) -> int: ...
    @property
    def io(self) -> str: ...
    @property
    def inplace(self) -> bool: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def seed(self) -> int: ...

#: the liveness step of a planner: ``(view, order) -> (view, liveness)`` (the view may gain regions)
LivenessStep = Callable[[GraphView, Sequence[int]], "tuple[GraphView, Liveness]"]
#: seconds the next step may search (``None``: the step's default), asked just before the step runs
Budget = Callable[[], "float | None"]


@dataclass(frozen=True, slots=True)
class Composed:
    """What the steps made: the view (with any regions the liveness step added), the
    operator order, the liveness (its problem) and the solver's solution."""

    view: GraphView
    order: list[int]
    liveness: Liveness
    solution: Solution


def unsolved(solver: str, status: Any, where: str = "") -> OnnxmemError:
    """The error of a solver that found no plan; ``where``: ``" for subgraph 'If_0/then_branch'"``,
    ``" for the program"`` or empty for a model's main graph."""
    return OnnxmemError(f"solver '{solver}' found no plan{where} ({status}); try --solver greedy")


def order_view(view: GraphView, opts: StepOptions, *, timeout: float | None = None,
               io: str | None = None) -> list[int]:
    """The operator order ``opts.order`` gives ``view`` (``io``: ``opts.io`` unless given)."""
    return list(reorder(view, opts.order, OrderOptions(timeout=timeout, alignment=opts.alignment,
                                                         io=opts.io if io is None else io,
                                                         inplace=opts.inplace)))


def solve_layout(problem: Problem, solver: str, *, timeout: float | None, seed: int = 0, where: str = "",
                 empty: bool = False, check: bool = False) -> Solution:
    """``problem`` solved by ``solver``, or :func:`unsolved`'s error.

    ``empty``: a problem without buffers is solved here (height 0, optimal) without calling
    the solver. ``check``: the solution is validated (:func:`onnxmem.core.problem.validate`)
    and an invalid one is ``PlanInvalid`` (the plans that get the static proof leave it out).
    """
    if empty and not problem.buffers:
        solution = Solution((), 0, solver, Status.OPTIMAL)
    else:
        solution = solve(problem, solver, SolveOptions(timeout=timeout, seed=seed))
    if not solution.found:
        raise unsolved(solver, solution.status, where)
    if check:
        broken = validate(problem, solution, limit=1)
        if broken:
            raise PlanInvalid(f"solver '{solver}' produced an invalid plan{where}: {broken[0]}")
    return solution


def compose(view: GraphView, opts: StepOptions, liveness: LivenessStep, *, order: Sequence[int] | None = None,
            budget: Budget | None = None, where: str = "", empty: bool = False,
            say: Callable[[str], None] | None = None) -> Composed:
    """The steps on one graph: order ``view`` (unless ``order`` is given), build the liveness
    with the planner's ``liveness`` step, solve its problem with ``opts.solver``.

    ``budget``: the seconds left before each search (default ``opts.timeout``); ``where`` and
    ``empty`` as in :func:`solve_layout`; ``say``: progress lines.
    """
    left = budget or (lambda: opts.timeout)
    if order is None:
        if say:
            say(f"ordering {len(view.ops)} nodes")
        order = order_view(view, opts, timeout=left())
    view, lv = liveness(view, order)
    if say:
        say(f"assigning {len(lv.problem)} buffers ({opts.solver})")
    solution = solve_layout(lv.problem, opts.solver, timeout=left(), seed=opts.seed, where=where, empty=empty)
    return Composed(view, list(order), lv, solution)
