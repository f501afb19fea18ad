"""The pure conflict layer: precedences, the antichain bound, conflict problems and their solvers."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from onnxmem.core.conflict_graph import (
    Conflicts,
    Precedence,
    antichain,
    antichain_bound,
    clique_bound,
)
from onnxmem.core.errors import ProblemError
from onnxmem.core.problem import Buffer, Problem, lower_bound, validate
from onnxmem.core.solvers import SOLVERS, SolveOptions, solve

CONFLICT_SOLVERS = sorted(n for n, info in SOLVERS.items() if info.conflicts)

# points a=0 -> {b=1, c=2} -> d=3; one buffer written at each point:
# A (at a, read by b and c), B (at b, read by d), C (at c, read by d), D (at d, the output)
DIAMOND = Precedence(4, ((0, 1), (0, 2), (1, 3), (2, 3)),
                     exits=((3,), (), (), ()), entries=((0,), (1,), (2,), (3,)))


def _diamond_problem(sizes=(100, 200, 300, 50)) -> Problem:
    buffers = tuple(Buffer(n, 0, 1, s) for n, s in zip("ABCD", sizes))
    return Problem(buffers, conflicts=Conflicts.from_precedence(DIAMOND))


def test_diamond_conflicts_and_antichain_by_hand():
    c = Conflicts.from_precedence(DIAMOND)
    # A precedes only D; B and C precede nothing (D reads them), D follows A only
    assert [list(c.neighbours(i)) for i in range(4)] == [[1, 2], [0, 2, 3], [0, 1, 3], [1, 2]]
    assert c.pairs == 5
    assert antichain(DIAMOND, [100, 200, 300, 50]) == (600, (0, 1, 2))
    # a heavy D makes {B, C, D} the heaviest concurrent set (D shares with A only)
    assert antichain(DIAMOND, [100, 200, 300, 1000]) == (1500, (1, 2, 3))


def test_conflict_problem_bound_and_validation():
    p = _diamond_problem()
    assert lower_bound(p) == 600
    # A and D may share (A is dead before D is written); B and C may not
    assert validate(p, (0, 100, 300, 0)) == []
    bad = validate(p, (0, 100, 250, 600))
    assert [v.buffers for v in bad] == [("B", "C")]
    assert "conflict" in bad[0].message and "[250, 300)" in bad[0].message


@pytest.mark.parametrize("solver", CONFLICT_SOLVERS)
def test_every_conflict_solver_plans_the_diamond(solver):
    p = _diamond_problem()
    sol = solve(p, solver)
    assert validate(p, sol) == []
    if solver != "naive":
        assert sol.height == 600 and sol.optimal  # the bound is met: D on top of A


def test_interval_solvers_refuse_conflicts():
    with pytest.raises(ProblemError, match="conflict along a graph"):
        solve(_diamond_problem(), "greedy")
    assert "greedy" not in CONFLICT_SOLVERS and "auto" in CONFLICT_SOLVERS


def _random_precedence(rng: random.Random, n: int) -> Precedence:
    """A random DAG of points; each buffer lives at a random point ``w``: its entries come
    before ``w`` (or are ``w``), its exits strictly after it."""
    points = n + 2
    edges = tuple((a, b) for a in range(points) for b in range(a + 1, points) if rng.random() < 0.5)
    reach = np.eye(points, dtype=bool)
    for a, b in sorted(edges, reverse=True):
        reach[a] |= reach[b]
    exits, entries = [], []
    for _ in range(n):
        w = rng.randrange(points)
        after = [p for p in range(points) if reach[w, p] and p != w]
        before = [p for p in range(points) if reach[p, w]]
        exits.append(tuple(sorted(rng.sample(after, min(len(after), rng.randint(1, 2))))))
        entries.append(tuple(sorted(rng.sample(before, min(len(before), rng.randint(0, 2))))))
    return Precedence(points, edges, tuple(exits), tuple(entries))


def _brute_antichain(c: Conflicts, sizes: list[int]) -> int:
    n = len(sizes)
    best = 0
    for r in range(1, n + 1):
        for subset in itertools.combinations(range(n), r):
            if all(c.conflict(i, j) for i, j in itertools.combinations(subset, 2)):
                best = max(best, sum(sizes[i] for i in subset))
    return best


def test_antichain_equals_brute_force_on_random_orders():
    rng = random.Random(7)
    checked = 0
    for _ in range(150):
        n = rng.randint(1, 8)
        prec = _random_precedence(rng, n)
        c = Conflicts.from_precedence(prec)
        # a relation read off a precedence must be a partial order for the flow to be exact
        before = ~np.asarray([[c.conflict(i, j) for j in range(n)] for i in range(n)]) & ~np.eye(n, dtype=bool)
        sizes = [rng.randint(1, 50) for _ in range(n)]
        weight, chosen = antichain(prec, sizes)
        assert all(c.conflict(i, j) for i, j in itertools.combinations(chosen, 2))
        assert weight == _brute_antichain(c, sizes)
        assert clique_bound(c, sizes) <= weight
        checked += int(before.any())
    assert checked > 50  # most random cases order some pair


def test_solvers_respect_bound_and_each_other_on_random_problems():
    rng = random.Random(3)
    for _ in range(40):
        n = rng.randint(2, 9)
        prec = _random_precedence(rng, n)
        p = Problem(tuple(Buffer(f"b{i}", 0, 1, rng.randint(1, 9) * 8, 8) for i in range(n)),
                    conflicts=Conflicts.from_precedence(prec))
        lb = lower_bound(p)
        heights = {}
        for name in CONFLICT_SOLVERS:
            sol = solve(p, name, SolveOptions(timeout=5))
            assert validate(p, sol) == [], name
            assert sol.height >= lb
            heights[name] = sol.height
        assert heights["conflict-exact"] <= heights["conflict-greedy"] <= heights["naive"]
        assert heights["auto"] == heights["conflict-exact"]  # small problems: auto searches exactly


def test_exact_beats_greedy_where_the_bound_is_not_tight():
    # a 5-cycle of conflicts (not a precedence): the clique bound is 2 x 10, the optimum 3 x 10
    c = Conflicts.from_pairs(5, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)])
    p = Problem(tuple(Buffer(f"b{i}", 0, 1, 10) for i in range(5)), conflicts=c)
    assert lower_bound(p) == 20
    sol = solve(p, "conflict-exact")
    assert sol.height == 30 and sol.optimal and validate(p, sol) == []
    assert solve(p, "conflict-greedy").height >= 30


def test_precedence_and_conflicts_refuse_bad_input():
    with pytest.raises(ProblemError, match="cycle"):
        Conflicts.from_precedence(Precedence(2, ((0, 1), (1, 0)), ((), ()), ((), ())))
    with pytest.raises(ProblemError, match="not between two"):
        Precedence(2, ((0, 5),), ((),), ((),))
    with pytest.raises(ProblemError, match="not a partial order"):  # buffer 0 would precede itself
        Conflicts.from_precedence(Precedence(2, ((0, 1),), ((0,),), ((1,),)))
    with pytest.raises(ProblemError, match="symmetric"):
        Conflicts.from_matrix(np.array([[False, True], [False, False]]))
    with pytest.raises(ProblemError, match="over 4 buffers"):
        Problem((Buffer("a", 0, 1, 1),), conflicts=Conflicts.from_precedence(DIAMOND))
    assert antichain_bound(DIAMOND, [1, 1, 1, 1]) == 3
