"""Conflicts between buffers that are not intervals: a partial order, free of ONNX.

When a runtime may run independent operators at once, "live at the same
step" no longer says which buffers may share bytes. Two buffers may share
only when every schedule keeps them apart: one *precedes* the other. The
buffers then form a partial order and the *conflicts* are its incomparable
pairs. This module holds that order in a pure form:

* :class:`Precedence` states the order through a DAG of *points* (the caller's
  events: for onnxmem, the operators of a model): buffer ``g`` precedes ``h``
  exactly when some point of ``exits[g]`` reaches (or is) some point of
  ``entries[h]`` along the DAG's edges. ``exits[g]``: points that come after
  everything ``g`` does; ``entries[h]``: points that come before everything
  ``h`` does.
* :class:`Conflicts` is the explicit conflict graph (CSR adjacency, symmetric,
  no self-loops) that solvers and :func:`onnxmem.core.problem.validate` read; it is
  made from a precedence (:meth:`Conflicts.from_precedence`) or from literal
  pairs (:meth:`Conflicts.from_pairs`).
* :func:`antichain_bound`: the heaviest set of pairwise-conflicting buffers
  of a precedence, the lower bound of every plan (those buffers need disjoint
  bytes). It is a maximum-weight antichain, computed exactly by a max-flow
  (weighted Dilworth): ``sum of sizes - max flow`` in the network ``T -> g_out``
  (capacity ``size(g)``), ``g_out -> exit points``, point edges, ``entry points
  -> h_in`` (all unbounded), ``g_in -> g_out`` (unbounded), ``g_in -> S``
  (capacity ``size(g)``); the antichain is read off the minimum cut.

The interval problem is the special case where ``g`` precedes ``h`` when
``g`` ends before ``h`` starts: there the antichain bound is the max-live
bound, and :mod:`onnxmem.core.problem` keeps its faster sweep for it.

Costs: the conflict graph is built with bit matrices over the points,
``O(points * (points + edges) / 8)`` bytes of work for the reachability and
``O(buffers^2 / 8)`` for the pairs; the max-flow is Dinic's algorithm on
``O(points + buffers)`` vertices.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from onnxmem.core.errors import ProblemError

__all__ = ["Conflicts", "Precedence", "antichain", "antichain_bound", "clique_bound", "reachability"]

#: the most buffers a conflict graph is built for (its bit matrix is buffers^2 / 8 bytes)
MAX_BUFFERS = 10_000


@dataclass(frozen=True, slots=True)
class Precedence:
    """A partial order on buffers through a DAG of points (see the module docstring).

    ``points``: how many points; ``edges``: ``(a, b)`` pairs, a DAG on them;
    ``exits[g]`` / ``entries[g]``: points of buffer ``g``. A buffer with no
    exit precedes nothing (e.g. a graph output, live to the end); one with no
    entry follows nothing (a graph input, live from the start). Each entry of
    a buffer must reach each of its exits by at least one edge (its entries
    come before what it does, its exits after): that makes the relation a
    partial order, which :meth:`Conflicts.from_precedence` checks.
    """

    points: int
    edges: tuple[tuple[int, int], ...]
    exits: tuple[tuple[int, ...], ...]
    entries: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if len(self.exits) != len(self.entries):
            raise ProblemError(f"precedence has {len(self.exits)} exit lists for {len(self.entries)} entry lists")
        for a, b in self.edges:
            if not (0 <= a < self.points and 0 <= b < self.points) or a == b:
                raise ProblemError(f"precedence edge ({a}, {b}) is not between two of its {self.points} points")
        for lists in (self.exits, self.entries):
            for pts in lists:
                if any(not 0 <= p < self.points for p in pts):
                    raise ProblemError(f"precedence names a point outside 0..{self.points - 1}")


def reachability(points: int, edges: Iterable[tuple[int, int]]) -> np.ndarray:
    """``R[a, b]``: ``b`` is ``a`` or reachable from ``a`` (bool, ``points x points``).

    Rows are filled in reverse topological order, each the OR of its
    successors' rows; a cycle raises ``ProblemError``.
    """
    succ: list[list[int]] = [[] for _ in range(points)]
    indeg = [0] * points
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    queue = deque(i for i in range(points) if indeg[i] == 0)
    topo: list[int] = []
    while queue:
        a = queue.popleft()
        topo.append(a)
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                queue.append(b)
    if len(topo) != points:
        raise ProblemError("precedence edges have a cycle; they must form a DAG")
    reach = np.zeros((points, points), dtype=bool)
    for a in reversed(topo):
        row = reach[a]
        row[a] = True
        for b in succ[a]:
            np.logical_or(row, reach[b], out=row)
    return reach


def _precedes_matrix(prec: Precedence) -> np.ndarray:
    """``P[g, h]``: buffer ``g`` precedes buffer ``h`` (bool, ``buffers x buffers``)."""
    n = len(prec.exits)
    if n > MAX_BUFFERS:
        raise ProblemError(f"{n:,} buffers are more than the {MAX_BUFFERS:,} a conflict graph is built for; "
                           "plan with --concurrency sequential")
    reach = reachability(prec.points, prec.edges)
    for g, (xs, ys) in enumerate(zip(prec.exits, prec.entries)):
        if any(x == y or not reach[y, x] for x in xs for y in ys):
            raise ProblemError(f"buffer {g} of the precedence has an entry that does not come before one of its "
                               "exits: the relation is not a partial order")
    # after[g, p]: some exit of g reaches point p (or is p)
    after = np.zeros((n, prec.points), dtype=bool)
    for g, pts in enumerate(prec.exits):
        if pts:
            after[g] = reach[list(pts)].any(axis=0)
    # g precedes h when g reaches some entry of h
    out = np.zeros((n, n), dtype=bool)
    for h, pts in enumerate(prec.entries):
        if pts:
            out[:, h] = after[:, list(pts)].any(axis=1)
    return out


@dataclass(frozen=True, slots=True, eq=False)
class Conflicts:
    """The conflict graph: ``neighbours(i)`` are the buffers ``i`` may not share a byte with.

    CSR arrays (``indptr``, ``indices``), symmetric, without self-loops.
    ``precedence``: the order the conflicts come from, when they do (then the
    lower bound is exact, :func:`antichain_bound`). Compared by identity.
    """

    indptr: np.ndarray
    indices: np.ndarray
    precedence: Precedence | None = None
    _pairs: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pairs", int(len(self.indices)) // 2)

    @property
    def size(self) -> int:
        """How many buffers the graph is over."""
        return int(len(self.indptr)) - 1

    @property
    def pairs(self) -> int:
        """How many conflicting pairs."""
        return self._pairs

    def neighbours(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    def conflict(self, i: int, j: int) -> bool:
        nb = self.neighbours(i)
        k = int(np.searchsorted(nb, j))
        return k < len(nb) and int(nb[k]) == j

    @classmethod
    def from_matrix(cls, matrix: np.ndarray, precedence: Precedence | None = None) -> "Conflicts":
        """From a symmetric bool matrix (the diagonal is ignored)."""
        m = np.array(matrix, dtype=bool)
        np.fill_diagonal(m, False)
        if not np.array_equal(m, m.T):
            raise ProblemError("a conflict matrix must be symmetric")
        rows, cols = np.nonzero(m)
        indptr = np.zeros(m.shape[0] + 1, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        return cls(np.cumsum(indptr), cols.astype(np.int64), precedence)

    @classmethod
    def from_pairs(cls, n: int, pairs: Iterable[tuple[int, int]]) -> "Conflicts":
        """From literal pairs ``(i, j)`` over ``n`` buffers (either order; repeats are fine)."""
        m = np.zeros((n, n), dtype=bool)
        for i, j in pairs:
            if not (0 <= i < n and 0 <= j < n) or i == j:
                raise ProblemError(f"conflict ({i}, {j}) is not between two of the {n} buffers")
            m[i, j] = m[j, i] = True
        return cls.from_matrix(m)

    @classmethod
    def from_precedence(cls, prec: Precedence) -> "Conflicts":
        """The incomparable pairs of ``prec``'s order."""
        p = _precedes_matrix(prec)
        return cls.from_matrix(~(p | p.T), prec)


# ------------------------------------------------------------------ max flow (Dinic)


class _Flow:
    """Dinic's max-flow on integer capacities (``None``: unbounded)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.head: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[int] = []

    def add(self, a: int, b: int, cap: int) -> None:
        self.head[a].append(len(self.to))
        self.to.append(b)
        self.cap.append(cap)
        self.head[b].append(len(self.to))
        self.to.append(a)
        self.cap.append(0)

    def max_flow(self, s: int, t: int, infinite: int) -> int:
        total = 0
        to, cap, head = self.to, self.cap, self.head
        while True:
            level = [-1] * self.n
            level[s] = 0
            queue = deque([s])
            while queue:
                a = queue.popleft()
                for e in head[a]:
                    if cap[e] > 0 and level[to[e]] < 0:
                        level[to[e]] = level[a] + 1
                        queue.append(to[e])
            if level[t] < 0:
                return total
            it = [0] * self.n
            while True:
                pushed = self._augment(s, t, infinite, level, it)
                if not pushed:
                    break
                total += pushed

    def _augment(self, s: int, t: int, limit: int, level: list[int], it: list[int]) -> int:
        """One blocking-flow path from ``s`` to ``t`` (iterative DFS); the amount pushed."""
        to, cap, head = self.to, self.cap, self.head
        path: list[int] = []  # edges
        a = s
        while True:
            if a == t:
                push = min(limit, min(cap[e] for e in path)) if path else limit
                for e in path:
                    cap[e] -= push
                    cap[e ^ 1] += push
                return push
            advanced = False
            edges = head[a]
            while it[a] < len(edges):
                e = edges[it[a]]
                b = to[e]
                if cap[e] > 0 and level[b] == level[a] + 1:
                    path.append(e)
                    a = b
                    advanced = True
                    break
                it[a] += 1
            if advanced:
                continue
            if not path:
                return 0
            level[a] = -1  # dead end: prune it
            e = path.pop()
            a = to[e ^ 1]
            it[a] += 1

    def reachable(self, s: int) -> list[bool]:
        seen = [False] * self.n
        seen[s] = True
        queue = deque([s])
        while queue:
            a = queue.popleft()
            for e in self.head[a]:
                if self.cap[e] > 0 and not seen[self.to[e]]:
                    seen[self.to[e]] = True
                    queue.append(self.to[e])
        return seen


def antichain(prec: Precedence, sizes: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """``(weight, buffers)``: a heaviest set of pairwise-incomparable buffers of ``prec``.

    Exact, by the max-flow of the module docstring. Example: a diamond
    ``a -> {b, c} -> d`` of points with one buffer written at each point and
    read by the next gives the antichain ``{b, c}``.
    """
    n = len(prec.exits)
    if len(sizes) != n:
        raise ProblemError(f"{len(sizes)} sizes for {n} buffers")
    # vertices: T = 0, S = 1, points 2.., then g_out, g_in per buffer
    base = 2 + prec.points
    flow = _Flow(base + 2 * n)
    infinite = sum(int(s) for s in sizes) + 1
    for a, b in prec.edges:
        flow.add(2 + a, 2 + b, infinite)
    for g in range(n):
        out, inn = base + 2 * g, base + 2 * g + 1
        w = int(sizes[g])
        flow.add(0, out, w)
        flow.add(inn, out, infinite)
        flow.add(inn, 1, w)
        for p in prec.exits[g]:
            flow.add(out, 2 + p, infinite)
        for p in prec.entries[g]:
            flow.add(2 + p, inn, infinite)
    cut = flow.max_flow(0, 1, infinite)
    seen = flow.reachable(0)
    chosen = tuple(g for g in range(n) if seen[base + 2 * g] and not seen[base + 2 * g + 1])
    weight = sum(int(sizes[g]) for g in chosen)
    if weight != infinite - 1 - cut:  # the cut and the antichain must agree (duality)
        raise AssertionError(f"antichain weight {weight} differs from sizes - max flow {infinite - 1 - cut}")
    return weight, chosen


def antichain_bound(prec: Precedence, sizes: Sequence[int]) -> int:
    """The weight of :func:`antichain`: no plan of these buffers is smaller."""
    return antichain(prec, sizes)[0]


def clique_bound(conflicts: Conflicts, sizes: Sequence[int]) -> int:
    """A lower bound for any conflict graph: the heaviest of the cliques grown greedily
    from each buffer (heaviest neighbour first). Exact only where the graph is simple;
    :func:`antichain_bound` is exact for a precedence."""
    n = conflicts.size
    w = np.asarray(sizes, dtype=np.int64)
    best = int(w.max(initial=0))
    order = np.argsort(-w, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    for i in range(n):
        members = [i]
        cand = set(int(j) for j in conflicts.neighbours(i))
        total = int(w[i])
        while cand:
            j = min(cand, key=lambda c: rank[c])
            members.append(j)
            total += int(w[j])
            cand &= set(int(k) for k in conflicts.neighbours(j))
        best = max(best, total)
    return best
