"""Fast recomputation heuristics: greedy by bytes per cost, the mirror rule, sqrt(n) segments.

All three search the drop sets of :mod:`onnxmem.remat.problem` and judge each
with its :func:`~onnxmem.remat.problem.simulate` (O(values + reads)); none
proves anything, so each says ``feasible`` or ``none``.

* ``greedy``: while the peak is over the budget, take the droppable values
  whose read gap spans the peak step, rank them by bytes freed per unit of
  cost, simulate the best few, each with its *bundle* (the values read only
  on the way to it, which would otherwise stay alive for its recomputation),
  and drop the bundle that removes the most bytes above the budget per unit
  of cost; once from no drops and once from the ``sqrt`` checkpoints, the
  cheaper that fits. On problems of at most :data:`IMPROVE_LIMIT` droppable
  values it then tries to keep each of the costliest drops and find another
  way around it, keeping the cheaper answer. Before each drop, a dropped
  value that its recomputed dependants pull back before the peak (a *lost
  checkpoint*) is kept again when that lowers the peak. When no value left
  spans the peak (the loop is stuck), the drop whose own read after its gap
  pulls a lost checkpoint back (:func:`pullers`) is kept again instead, when
  that lowers the peak, and the loop goes on from the new peak: recomputing
  it needs the checkpoint back first, so both second copies sit at the peak,
  and keeping the checkpoint itself would keep its original copy there;
  failing that, a drop written before the peak and recomputed after it (the
  nearest first), whose recomputation keeps what it reads across the peak.
  Then *prune*: undrop values, the most expensive first, while the model
  still fits (runs of values at once, split in halves when a run does not
  fit).
* ``mirror``: MXNet's backward mirroring: drop every droppable value written
  by a cheap op (anything but convolutions and matrix products), then prune.
* ``sqrt``: Chen et al.'s checkpoints for chain-like graphs: walk the
  droppable values written before the peak and read after it (by write
  step), keep one as a checkpoint whenever the bytes since the last
  checkpoint pass a limit, and drop the rest, with every value read only on
  the way; the limit runs over ``k * total / m`` for ``k = 1 .. 2 sqrt(m)``
  (``m`` values); the cheapest that fits, pruned.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterable

from onnxmem.remat.problem import RematProblem, Schedule, simulate
from onnxmem.remat.registry import Choice, RematOptions, register, result

__all__ = ["bundle", "greedy", "mirror", "prune", "pullers", "sqrt_drops", "sqrt_segments"]

#: ops the mirror rule never recomputes (MXNet's: convolutions and matrix products)
HEAVY = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "QLinearConv",
                   "QLinearMatMul", "Einsum", "Attention", "MultiHeadAttention", "LSTM", "GRU", "RNN"})

#: candidates simulated per greedy step
GREEDY_TRIES = 4

#: dropped values tried to keep again when greedy is stuck
STUCK_TRIES = 16

#: greedy's improvement pass runs on problems of at most this many droppable values, this many times
IMPROVE_LIMIT = 400
IMPROVE_TRIES = 12


def prune(problem: RematProblem, dropped: list[int] | set[int], budget: int, options: RematOptions) -> list[int]:
    """Undrop values of ``dropped``, the most expensive first, while the model still fits:
    a run of values is tried at once and split in halves when it does not fit."""
    keep = set(dropped)
    order = sorted(dropped, key=lambda v: (-problem.cost[v], v))
    step = max(1, len(order) // 16)
    runs = [order[i:i + step] for i in range(0, len(order), step)]
    while runs and options.left() > 0:
        run = runs.pop(0)
        if simulate(problem, keep - set(run)).peak <= budget:
            keep -= set(run)
        elif len(run) > 1:
            half = len(run) // 2
            runs[:0] = [run[:half], run[half:]]
    return sorted(keep)


def bundle(problem: RematProblem, v: int, drop: set[int]) -> set[int]:
    """``v`` and, recursively, the droppable values its producer reads that have no read gap
    of their own (read only on the way to ``v``): dropping ``v`` alone would keep them alive
    until ``v`` comes back."""
    out = {v}
    todo = [v]
    while todo:
        w = todo.pop()
        for u in problem.reads[problem.producer[w]]:
            if (problem.droppable[u] and u not in out and u not in drop
                    and problem.first_post[u] == problem.steps):
                out.add(u)
                todo.append(u)
    return out


def pullers(problem: RematProblem, s: Schedule, drop: set[int], v: int) -> set[int]:
    """The dropped values whose own reads after their gap bring dropped ``v`` back at
    ``s.at[v]``, before its own: from ``v``, the dropped dependants recomputed at that step,
    followed while they are pulled back themselves, up to those recomputed for their own
    first read after the gap."""
    p = problem
    out: set[int] = set()
    todo, seen = [v], {v}
    while todo:
        u = todo.pop()
        for w in drop:
            if w not in seen and s.at[w] == s.at[u] and u in p.reads[p.producer[w]]:
                seen.add(w)
                if s.at[w] == p.first_post[w]:
                    out.add(w)
                else:
                    todo.append(w)
    return out


def _keep_again(p: RematProblem, s: Schedule, drop: set[int], tried: set[int], budget: int,
                keeps: Iterable[set[int]]) -> Schedule | None:
    """The first of ``keeps`` whose values, kept again, lower the peak (or the bytes above
    ``budget`` at the same peak): taken out of ``drop`` into ``tried``; its schedule, or ``None``."""
    for keep in keeps:
        t = simulate(p, drop - keep)
        if (t.peak, t.excess(budget)) < (s.peak, s.excess(budget)):
            drop -= keep
            tried |= keep
            return t
    return None


def greedy_drops(problem: RematProblem, budget: int, options: RematOptions, start: set[int] | None = None,
                 forbid: set[int] | None = None) -> list[int]:
    """The greedy loop of the module doc, from ``start``, never dropping ``forbid``; returns
    the drops (fitting or not)."""
    p = problem
    drop = set(start or ())
    tried: set[int] = set(forbid or ())
    s = simulate(p, drop)
    while s.peak > budget and options.left() > 0:
        k = s.peak_step
        # first, a dropped value its dependants pull back before the peak (a lost checkpoint): keep it
        pulled = [v for v in drop if v not in tried and s.at[v] <= k < p.first_post[v] < p.steps]
        pulled = sorted(pulled, key=lambda v: (-p.size[v], v))[:GREEDY_TRIES]
        t = _keep_again(p, s, drop, tried, budget, ({v} for v in pulled))
        if t is not None:
            s = t
            continue
        cands = [v for v, ok in enumerate(p.droppable)
                 if ok and v not in drop and v not in tried and p.last_pre[v] < k < p.first_post[v]
                 and p.start[v] <= k <= s.ends[v]]
        if not cands:
            # stuck: keep again a drop whose own reads pull a lost checkpoint back before the peak,
            # else one written before the peak and recomputed after it (its recomputation keeps
            # what it reads alive across the peak: keeping it may free more than it holds)
            across = sorted((v for v in drop if v not in tried and p.start[v] <= k < s.at[v]),
                            key=lambda v: (-p.start[v], v))[:STUCK_TRIES]
            t = _keep_again(p, s, drop, tried, budget, itertools.chain(
                ({w} for v in pulled for w in sorted(pullers(p, s, drop, v)) if w not in tried),
                ({v} for v in across)))
            if t is None:
                break
            s = t
            continue
        cands.sort(key=lambda v: (-p.size[v] / max(p.cost[v], 1), v))
        before = s.excess(budget)
        best: tuple[float, int] | None = None
        best_s = s
        best_set: set[int] = set()
        for v in cands[:GREEDY_TRIES]:
            group = bundle(p, v, drop)
            t = simulate(p, drop | group)
            gain = before - t.excess(budget)
            if gain <= 0:
                tried.add(v)
                continue
            score = gain / max(t.cost - s.cost, 1)
            if best is None or score > best[0]:
                best, best_s, best_set = (score, v), t, group
        if best is None:
            continue
        drop |= best_set
        s = best_s
    return sorted(drop)


@register("greedy", "drop what frees the most bytes at the peak per unit of cost (from none and from sqrt), then prune")
def greedy(problem: RematProblem, budget: int, options: RematOptions) -> Choice:
    best: Choice | None = None
    for start in (set(), set(sqrt_drops(problem, budget, options))):
        got = _greedy_from(problem, budget, options, start, set())
        if best is None or (got.fits, -got.cost if got.fits else -got.peak) > (best.fits, -best.cost if best.fits else -best.peak):
            best = got
    assert best is not None
    # improve: keep one of the costliest drops and let the loop find another way (small graphs)
    if best.fits and len(problem.candidates) <= IMPROVE_LIMIT:
        for v in sorted(best.dropped, key=lambda v: -problem.cost[v])[:IMPROVE_TRIES]:
            if options.left() <= 0:
                break
            got = _greedy_from(problem, budget, options, set(best.dropped) - {v}, {v})
            if got.fits and got.cost < best.cost:
                best = got
    return best


def _greedy_from(problem: RematProblem, budget: int, options: RematOptions, start: set[int],
                 forbid: set[int]) -> Choice:
    drops = greedy_drops(problem, budget, options, start, forbid)
    if simulate(problem, drops).peak <= budget:
        drops = prune(problem, drops, budget, options)
    return result(problem, drops, budget, "greedy")


@register("mirror", "MXNet's mirror rule: recompute every cheap op (no conv or matmul), then prune")
def mirror(problem: RematProblem, budget: int, options: RematOptions) -> Choice:
    drops = [v for v, ok in enumerate(problem.droppable) if ok and problem.op_type[v] not in HEAVY]
    if simulate(problem, drops).peak <= budget:
        drops = prune(problem, drops, budget, options)
    return result(problem, drops, budget, "mirror")


@register("sqrt", "Chen et al.'s sqrt(n) checkpoints: one per run of bytes along the order, the rest recomputed")
def sqrt_segments(problem: RematProblem, budget: int, options: RematOptions) -> Choice:
    drops = sqrt_drops(problem, budget, options)
    if simulate(problem, drops).peak <= budget:
        drops = prune(problem, drops, budget, options)
    return result(problem, drops, budget, "sqrt")


def sqrt_drops(problem: RematProblem, budget: int, options: RematOptions) -> list[int]:
    """The checkpoint search of the module doc: the cheapest drops that fit, else those with
    the lowest peak (not pruned)."""
    peak_step = simulate(problem, ()).peak_step
    before = [v for v in problem.candidates if problem.start[v] <= peak_step]  # written before the peak
    cands = [v for v in before if problem.first_post[v] < problem.steps]  # ... and read after a gap
    chained = [v for v in before if problem.first_post[v] == problem.steps]  # come back only when needed
    m = len(cands)
    if not m:
        return list(chained)
    total = sum(problem.size[v] for v in cands)
    root = max(1, round(math.sqrt(m)))
    best: Choice | None = None
    # Chen et al.'s search: a checkpoint whenever the bytes since the last one pass ``limit``
    for k in range(1, 2 * root + 2):
        if options.left() <= 0:
            break
        limit = total * k / m
        drops, run = list(chained), 0
        for v in cands:
            run += problem.size[v]
            if run > limit:
                run = 0
            else:
                drops.append(v)
        got = result(problem, drops, budget, "sqrt")
        if best is None or (got.fits, -got.cost if got.fits else -got.peak) > (best.fits, -best.cost if best.fits else -best.peak):
            best = got
    return list(best.dropped) if best is not None else list(chained)
