"""The compiled greedy pass (:mod:`onnxmem.scheduling._greedy`) against the Python pass it replaces.

Plans must not change with the form the pass runs in: on random pieces, under both rules, with
and without look-ahead, and with the work clock cutting the look-ahead off part way, the
compiled pass gives the Python pass's order and leaves the work clock where the Python pass
leaves it. The kernel is the one a plan uses (:func:`onnxmem.core._native.kernels`: compiled
ahead of time where the shipped module is current, else numba).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnxmem.core import _native, workclock
from onnxmem.scheduling import heuristics
from onnxmem.scheduling.cost import build_order_graph, segment_pieces

from .test_scheduling import random_view, randwire_view


def _kernel():
    return _native.kernels("onnxmem.scheduling._greedy").greedy


def _compiled(piece, rule, depth, width, limit=None, units=0):
    stop = 0 if limit is None else 1
    order, after = _kernel()(*heuristics.piece_rows(piece), piece.first_extra, rule, depth, width,
                             int(heuristics.STEP_COST), int(heuristics.KEY_COST), stop, limit or 0, units)
    return order.tolist(), after


def _pieces(seed):
    rng = random.Random(seed)
    view = random_view(seed, n=rng.randint(2, 90), fanin=rng.randint(1, 4))
    graph = build_order_graph(view, alignment=rng.choice([1, 64]), inplace=bool(seed % 2))
    yield graph.root()
    for seg, piece in zip(*segment_pieces(graph)):
        if len(seg) > 1:
            yield piece


@given(st.integers(0, 100_000), st.sampled_from([0, 1]), st.sampled_from([(2, 4), (0, 4), (3, 2), (1, 1), (2, 7)]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_compiled_pass_gives_the_python_pass_order(seed, rule, look):
    depth, width = look
    for piece in _pieces(seed):
        want = heuristics._greedy_python(piece, rule, depth, width)
        got, units = _compiled(piece, rule, depth, width)
        assert got == want
        assert units == 0  # no stop: nothing counted
        assert sorted(got) == list(range(piece.n))


@given(st.integers(0, 100_000), st.sampled_from([0, 1]), st.integers(0, 40_000))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_work_clock_cuts_both_passes_at_the_same_node(seed, rule, budget):
    """A deadline on the work clock: the look-ahead stops at the same check (every 64 nodes
    placed) in both, the orders are the same and so is the work counted."""
    for piece in _pieces(seed):
        with workclock.session():
            workclock.charge(seed % 1000)
            start = workclock.units_now()
            deadline = (start + budget) / workclock.UNITS_PER_SECOND
            want = heuristics._greedy_python(piece, rule, 2, 4, deadline)
            counted = workclock.units_now()
        got, units = _compiled(piece, rule, 2, 4, math.floor(deadline * workclock.UNITS_PER_SECOND) + 1, start)
        assert (got, units) == (want, counted)


def test_a_cut_off_look_ahead_changes_the_order_and_both_passes_agree_on_it():
    """The comparison above is not idle: on a 64-node randwire stage a deadline that passes at the
    first check gives another order than no deadline, and the compiled pass gives that one too."""
    piece = build_order_graph(randwire_view(64, "ws", 2), alignment=1).root()
    assert piece.n > 128
    free = heuristics._greedy_python(piece, 0, 2, 4)
    with workclock.session():
        cut = heuristics._greedy_python(piece, 0, 2, 4, 0.0)
        counted = workclock.units_now()
    assert cut != free
    assert _compiled(piece, 0, 2, 4) == (free, 0)
    assert _compiled(piece, 0, 2, 4, 1, 0) == (cut, counted)


def test_greedy_run_takes_the_compiled_pass_where_it_is_compiled_ahead_of_time(monkeypatch):
    """``_greedy_run`` (what every greedy order runs) calls the kernel in ``aot`` mode and the Python
    pass otherwise; either way the order and the work counted are the same."""
    if not _native.is_ahead_of_time(_kernel()):
        pytest.skip("the kernels are not compiled ahead of time here")
    piece = build_order_graph(randwire_view(32, "er", 1), alignment=1).root()
    calls = []
    real = heuristics._greedy_python
    monkeypatch.setattr(heuristics, "_greedy_python", lambda *a, **k: calls.append(1) or real(*a, **k))
    results = []
    for mode in ("aot", "jit (test)"):
        monkeypatch.setattr(_native, "mode", lambda mode=mode: mode)
        with workclock.session():
            order = heuristics._greedy_run(piece, 1, 2, 4, 1.0)
            results.append((order, workclock.units_now()))
    assert len(calls) == 1  # the Python pass ran once: in the jit mode
    assert results[0] == results[1]


def test_under_the_wall_clock_the_compiled_pass_stops_on_the_cycle_counter():
    """``--timeout`` (the wall clock): the compiled pass reads the cycle counter at the checks the
    Python pass reads ``time.perf_counter()`` at. A deadline long past cuts the look-ahead at
    the first check in both; one far ahead never does."""
    import time

    from onnxmem.core._compiled import cycles_per_second

    if not _native.is_ahead_of_time(_kernel()) or cycles_per_second() <= 0:
        pytest.skip("the kernels are not compiled ahead of time here, or there is no cycle counter")
    piece = build_order_graph(randwire_view(64, "ws", 2), alignment=1).root()
    workclock.use_wall_clock(True)
    try:
        past = time.perf_counter() - 10.0
        ahead = time.perf_counter() + 3600.0
        cut = heuristics._greedy_run(piece, 0, 2, 4, past)
        free = heuristics._greedy_run(piece, 0, 2, 4, ahead)
        assert cut == heuristics._greedy_python(piece, 0, 2, 4, past)
        assert free == heuristics._greedy_python(piece, 0, 2, 4, ahead)
    finally:
        workclock.use_wall_clock(False)
    assert cut != free
    assert free == heuristics._greedy_python(piece, 0, 2, 4)
