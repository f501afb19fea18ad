"""The searches of one component in turns: complete searches, searches at a lower
capacity, and probes.

:meth:`.exact.ExactSearch.decide` asks whether a component fits a capacity.
It runs the compiled depth-first search (:mod:`._search`) from the three
static preorders (:data:`._searchdefs.HEURISTICS`), each with its own state,
in turns under a node limit that doubles each round; a turn goes on from
where that search's last turn stopped (no work is redone). Any of them can
answer: a plan (``FOUND``) or an exhausted search space (``NOT_FOUND``: the
capacity is infeasible, whatever the preorder, since every pruning rule keeps
a solution when one exists).

A decision may add searches at a lower capacity (the max-live bound, say):
they take their turns after the others, with half their node limit. A
tighter capacity prunes more, so where it is feasible they often find a plan
first (MiniMalloc's C: 203 nodes at its bound, 5,876 and more at 1,048,576),
and that plan fits the capacity too; one of them that exhausts its space
proves nothing about the capacity and only leaves the turns.

A depth-first search that goes wrong near the root spends its time below that
mistake: on MiniMalloc's D and J, a decision a few units below the best plan
runs out of budget from all three preorders, while short searches from
slightly shuffled preorders find plans there. So a decision may also run
*probes*: after each round of turns, fresh searches, each from a preorder
with its ranks moved by a random amount (up to :data:`PROBE_MOVE` of the
buffers), stopped after :data:`PROBE_NODES` nodes per buffer, until they have
visited as many nodes as the turns did in that round (half the work each).
The random draws come from the caller's generator, and every limit counts
nodes or work, so the answers are the same at any load. A probe that
exhausts its search space proves infeasibility as the turns do.

Steps of :func:`take_turns`:

1. double the node limit; give each complete search a turn up to it, then
   each search at the lower capacity a turn up to half of it;
2. with probes, run probes up to the nodes the turns took this round;
3. stop at the first ``FOUND`` or ``NOT_FOUND``, or when the deadline or the
   budget's work is spent (``TIMEOUT``); else go to 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np

from onnxmem.core.workclock import charge, is_wall_clock, now, steps_left

__all__ = ["PROBE_MOVE", "PROBE_NODES", "WORK_COST", "Probes", "nodes_visited", "take_turns"]

#: work units (:mod:`onnxmem.core.workclock`) per step of the compiled search's work counter
WORK_COST = 0.005
#: a probe moves each rank of its preorder by up to this share of the buffers
PROBE_MOVE = 0.05
#: a probe stops after this many nodes per buffer of the component
PROBE_NODES = 5


@dataclass
class Probes:
    """Probes for one decision: ``make(rng)`` returns the arguments of a fresh
    compiled search from a perturbed preorder; ``rng`` draws the perturbations;
    ``limit``: the nodes a probe may visit."""

    make: Callable[[np.random.Generator], tuple[Any, ...]]
    rng: np.random.Generator
    limit: int


def take_turns(runs: list[tuple[Any, ...]], limit: int, deadline: float | None,
               probes: Probes | None = None,
               tighter: list[tuple[Any, ...]] | None = None) -> tuple[int, np.ndarray | None, float | None, int]:
    """Run the searches of one component in turns under a node limit that doubles from
    ``2 * limit``, each going on from where its last turn stopped, and ``probes`` between
    rounds (see the module docstring). ``tighter``: searches of the same component at a
    lower capacity, after ``runs`` in each round and with half their node limit: a plan
    they find fits, and one that exhausts its space leaves the turns. Returns ``(status, the offsets found or None,
    the deadline, the probes' nodes)``; the deadline moves by the time the first search in
    a process takes to compile or load the compiled code."""
    from onnxmem.core._compiled import warm_up
    from onnxmem.core._native import kernels
    from onnxmem.core.solvers._searchdefs import FOUND, NOT_FOUND, TIMEOUT

    search = kernels("onnxmem.core.solvers._search").search
    probed = 0
    turns = [(args, False) for args in runs] + [(args, True) for args in tighter or []]
    while True:
        limit *= 2
        round_nodes = 0
        exhausted: list[int] = []
        for k, (args, tight) in enumerate(turns):
            compiling = warm_up(search, partial(_stopped_at_once, search, args))
            if deadline is not None:
                deadline += compiling
            if deadline is not None and now() >= deadline:
                return TIMEOUT, None, deadline, probed
            status, took = _turn(search, args, limit // 2 if tight else limit, deadline)
            round_nodes += took
            if status == NOT_FOUND and tight:
                exhausted.append(k)  # the lower capacity is infeasible; the decision goes on
            elif status is not None:
                return status, args[4][5] if status == FOUND else None, deadline, probed
        turns = [turn for k, turn in enumerate(turns) if k not in exhausted]
        while probes is not None and round_nodes > 0:
            if deadline is not None and now() >= deadline:
                return TIMEOUT, None, deadline, probed
            args = probes.make(probes.rng)
            status, took = _turn(search, args, probes.limit, deadline)
            probed += took
            round_nodes -= max(1, took)
            if status in (FOUND, NOT_FOUND, TIMEOUT):
                return status, args[4][5] if status == FOUND else None, deadline, probed
        if deadline is not None and now() >= deadline:
            return TIMEOUT, None, deadline, probed


def _turn(search: Any, args: tuple[Any, ...], limit: int, deadline: float | None) -> tuple[int | None, int]:
    """One turn of a search up to ``limit`` nodes: ``(its answer, or None when it
    stopped at the node limit, the nodes it took)``. Past the budget's work the
    answer is ``TIMEOUT``."""
    from onnxmem.core.solvers._searchdefs import ABORTED, FOUND, NOT_FOUND, TIMEOUT

    ctr = args[6]
    before, nodes_before = int(ctr[9]), int(ctr[0])
    ctr[1] = limit
    ctr[2], ctr[10] = _stop(before, deadline)
    status = search(*args)
    charge((int(ctr[9]) - before) * WORK_COST)
    took = int(ctr[0]) - nodes_before
    if status == ABORTED and ctr[9] > ctr[10]:  # the budget's work is done
        return TIMEOUT, took
    if status in (FOUND, NOT_FOUND, TIMEOUT):
        return status, took
    if status != ABORTED:
        raise RuntimeError(f"search returned unknown status {status}")
    return None, took


def _stop(before: int, deadline: float | None) -> tuple[int, int]:
    """A search turn's cycle-counter deadline and work limit (counters 2 and
    10): on the work clock, the work done so far (``before``) and what is
    left of the budget."""
    from onnxmem.core._compiled import NO_DEADLINE, deadline_cycles

    if deadline is None:
        return NO_DEADLINE, NO_DEADLINE
    if is_wall_clock():
        return deadline_cycles(deadline - now()), NO_DEADLINE
    return NO_DEADLINE, before + max(1, steps_left(deadline, WORK_COST))


def _stopped_at_once(search: Any, args: tuple[Any, ...]) -> None:
    """Run ``search`` with a node limit of 0 (it returns at once, nothing
    changed): compiles it. ``args``' own counters and frames are left alone."""
    from onnxmem.core._compiled import NO_DEADLINE

    ctr = np.zeros_like(args[6])
    ctr[7] = -1
    ctr[2] = ctr[10] = NO_DEADLINE
    search(*args[:6], ctr, np.zeros_like(args[7]))


def nodes_visited(runs: list[tuple[Any, ...]]) -> int:
    """Nodes the searches of ``runs`` have visited (counter 0 of each)."""
    return sum(int(args[6][0]) for args in runs)
