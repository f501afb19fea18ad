"""The searches in turns (:mod:`onnxmem.core.solvers.turns`): searches at the bound beside
those at the capacity, and probes from perturbed preorders."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from onnxmem.core import workclock
from onnxmem.core.problem import Problem, Solution, Status, lower_bound, read_csv, validate
from onnxmem.core.solvers import SearchSwitches, SolveOptions, solve
from onnxmem.core.solvers._searchdefs import FOUND, NOT_FOUND
from onnxmem.core.solvers.baseline import place_in_order, size_order
from onnxmem.core.solvers.exact import ExactSearch
from tests.test_solvers import FAST, P, _shared_benchmarks, brute_force, problems

CHALLENGING = _shared_benchmarks() / "minimalloc-challenging"
needs_benchmarks = pytest.mark.skipif(not CHALLENGING.is_dir(), reason="shared benchmarks not present")


def _incumbent(ex: ExactSearch) -> np.ndarray:
    """The size-sorted best fit of ``ex``'s problem, as ``decide`` takes it."""
    offs = np.asarray(place_in_order(ex.problem, size_order(ex.problem)), dtype=np.int64)
    return offs[ex.free].copy()


def _checked(ex: ExactSearch, plan: np.ndarray, cap: int) -> None:
    sol = Solution(tuple(int(o) for o in ex.expand(plan)), ex.height(plan), "exact", Status.FEASIBLE)
    assert validate(ex.problem.with_capacity(cap), sol) == []


@FAST
@given(problem=problems(max_buffers=8, aligned=True), slack=st.integers(0, 4), seed=st.integers(0, 3),
       below=st.integers(0, 3))
def test_decisions_with_bound_and_probes_answer_as_brute_force(
    problem: Problem, slack: int, seed: int, below: int,
) -> None:
    # searches at a lower capacity and probes change how a decision searches, never its answer
    ex = ExactSearch(problem)
    assume(ex.n > 0 and ex.searchable)
    lb = lower_bound(problem)
    cap = lb + slack
    code, plan, _ = ex.decide(cap, _incumbent(ex), None, rng=np.random.default_rng(seed), bound=lb - below)
    assert code == (FOUND if brute_force(problem) <= cap else NOT_FOUND)
    if code == FOUND:
        _checked(ex, plan, cap)


@pytest.mark.parametrize("sections", [True, False])
@pytest.mark.parametrize("cap", [7, 8, 9])
def test_a_bound_with_no_plan_leaves_the_decision_to_the_capacity(sections: bool, cap: int) -> None:
    # five 1-byte buffers aligned to 2, live at once, need 9 bytes (the bound says 5): the
    # searches at the bound exhaust their space, and the decision at the capacity goes on
    # without them to its own answer
    problem = P(*[(0, 1, 1)] * 5, alignment=2)
    ex = ExactSearch(problem)
    assert lower_bound(problem) == 5
    code, plan, nodes = ex.decide(cap, _incumbent(ex) + 100, None, SearchSwitches(sections=sections), bound=5)
    assert code == (FOUND if cap >= 9 else NOT_FOUND) and nodes > 0
    if code == FOUND:
        assert ex.height(plan) == 9
        _checked(ex, plan, cap)


@needs_benchmarks
def test_minimize_with_probes_is_the_same_at_any_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probes draw from the solver's seed and stop at node limits: a minimization its budget cuts
    off gives the same plan when the clock runs 100x fast and a thread hogs the CPU."""
    from tests.helpers import slowed_machine

    problem, _ = read_csv(CHALLENGING / "D.1048576.csv")
    first = solve(problem, "exact", SolveOptions(timeout=0.5, seed=1))
    assert first.status is Status.TIMEOUT and validate(problem, first) == []
    with slowed_machine(monkeypatch):
        second = solve(problem, "exact", SolveOptions(timeout=0.5, seed=1))
    assert (second.offsets, second.height, second.stats["nodes"]) == (first.offsets, first.height,
                                                                       first.stats["nodes"])


@needs_benchmarks
def test_a_decision_on_c_finds_its_plan_at_the_bound() -> None:
    # C at MiniMalloc's capacity: the search at the max-live bound finds a plan in a few
    # hundred nodes, where the searches at the capacity took 15,620
    problem, _ = read_csv(CHALLENGING / "C.1048576.csv")
    ex = ExactSearch(problem)
    code, plan, nodes = ex.decide(1048576, _incumbent(ex), None, bound=lower_bound(problem))
    assert code == FOUND and nodes < 3000
    _checked(ex, plan, 1048576)
    assert ex.height(plan) == lower_bound(problem)


@needs_benchmarks
def test_pack_at_the_capacity_is_proven_optimal_on_c() -> None:
    problem, _ = read_csv(CHALLENGING / "C.1048576.csv")
    with workclock.session():
        sol = solve(problem, "exact", SolveOptions(capacity=1048576))
    assert sol.status is Status.OPTIMAL and sol.height == lower_bound(problem)
