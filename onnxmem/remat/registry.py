"""The recomputation algorithms' registry: options, results, registration and :func:`choose`.

Every algorithm reads a :class:`~onnxmem.remat.problem.RematProblem` and a
budget (bytes the model's peak may reach) and returns the values to drop
(:class:`Choice`). Statuses have one meaning each: ``optimal`` (fits, and no
cheaper set of drops fits: proven), ``feasible`` (fits, not proven),
``infeasible`` (proven: no set of drops fits), ``none`` (this algorithm found
no set that fits, and proved nothing). :func:`choose` runs one by name under
the caller's deadline and checks its answer against
:func:`~onnxmem.remat.problem.simulate`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from onnxmem.core.errors import OnnxmemError
from onnxmem.core.workclock import now, session
from onnxmem.remat.problem import RematProblem, simulate

__all__ = ["ALGORITHMS", "AlgorithmInfo", "Choice", "RematOptions", "choose", "register"]

STATUSES = ("optimal", "feasible", "infeasible", "none")


@dataclass(frozen=True, slots=True)
class RematOptions:
    """``timeout``: seconds an algorithm may take (``None``: its default);
    ``deadline``: a :func:`onnxmem.core.workclock.now` value :func:`choose` sets
    from it (budget seconds: counted work unless the process uses the wall clock);
    ``seed``: for searches that take one; ``workers``: CP-SAT's threads under the wall
    clock (on the work clock CP-SAT searches with one, deterministically)."""

    timeout: float | None = None
    deadline: float | None = None
    seed: int = 0
    workers: int = 2

    def left(self) -> float:
        """Seconds to the deadline (infinite without one)."""
        return float("inf") if self.deadline is None else max(0.0, self.deadline - now())


@dataclass(frozen=True, slots=True)
class Choice:
    """What an algorithm chose: ``dropped`` values, their extra ``cost``, the model's
    ``peak`` with them, the ``status`` (module doc), the ``algorithm`` and its ``seconds``."""

    dropped: tuple[int, ...]
    cost: int
    peak: int
    status: str
    algorithm: str
    seconds: float = 0.0

    @property
    def fits(self) -> bool:
        return self.status in ("optimal", "feasible")


AlgorithmFn = Callable[[RematProblem, int, RematOptions], Choice]


@dataclass(frozen=True, slots=True)
class AlgorithmInfo:
    name: str
    fn: AlgorithmFn
    summary: str
    default_timeout: float


ALGORITHMS: dict[str, AlgorithmInfo] = {}


def register(name: str, summary: str, default_timeout: float = 10.0) -> Callable[[AlgorithmFn], AlgorithmFn]:
    def deco(fn: AlgorithmFn) -> AlgorithmFn:
        if name in ALGORITHMS:
            raise ValueError(f"recomputation algorithm {name!r} registered twice")
        ALGORITHMS[name] = AlgorithmInfo(name, fn, summary, default_timeout)
        return fn

    return deco


def result(problem: RematProblem, dropped: tuple[int, ...] | list[int] | set[int], budget: int, algorithm: str,
           proven: bool = False) -> Choice:
    """The :class:`Choice` of ``dropped`` as :func:`simulate` judges it: ``optimal`` when it
    fits and ``proven``, ``feasible`` when it fits, else ``none``."""
    s = simulate(problem, dropped)
    fits = s.peak <= budget
    status = ("optimal" if proven else "feasible") if fits else "none"
    return Choice(s.dropped, s.cost, s.peak, status, algorithm)


def choose(problem: RematProblem, budget: int, algorithm: str = "auto", options: RematOptions | None = None) -> Choice:
    """Run ``algorithm`` under its deadline; its answer is re-judged by :func:`simulate`."""
    if algorithm not in ALGORITHMS:
        raise OnnxmemError(f"recomputation algorithm '{algorithm}' is not one of {', '.join(ALGORITHMS)}; "
                           "'onnxmem list remat' names each")
    info = ALGORITHMS[algorithm]
    opts = options or RematOptions()
    timeout = opts.timeout if opts.timeout is not None else info.default_timeout
    t0 = time.perf_counter()
    with session():
        opts = RematOptions(timeout=timeout, deadline=now() + timeout, seed=opts.seed, workers=opts.workers)
        got = info.fn(problem, budget, opts)
    check = simulate(problem, got.dropped)
    if got.fits and (check.peak > budget or check.cost != got.cost):
        raise AssertionError(f"recomputation algorithm {algorithm!r} reported a plan that does not fit")
    return Choice(got.dropped, check.cost, check.peak, got.status, got.algorithm, time.perf_counter() - t0)
