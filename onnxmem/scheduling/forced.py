"""The nodes of an order search's piece that every other node is an ancestor or a descendant
of (:func:`forced_segments`): the order search (:mod:`onnxmem.scheduling.hierarchical`, the
exact search) cuts a graph there, each forced node a part of its own, and searches the parts
between them one by one."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from onnxmem.core.rows import Rows
from onnxmem.core.toposort import stable_order

__all__ = ["forced_segments"]


class Piece(Protocol):
    """What :func:`forced_segments` reads of a :class:`onnxmem.scheduling.cost.Piece`."""

    @property
    def n(self) -> int: ...  # its nodes, numbered 0 to n - 1

    @property
    def preds(self) -> Sequence[Sequence[int]]: ...  # each node's predecessors

    @property
    def succs(self) -> Sequence[Sequence[int]]: ...  # each node's successors


def _reaches_every_frontier(seq: Sequence[int], adj: Sequence[Sequence[int]], size: int) -> list[bool]:
    """For each node of ``seq``: whether it is adjacent (by ``adj``) to every node of the
    frontier before it, the nodes seen so far that no later-seen node was adjacent to."""
    if isinstance(adj, Rows) and len(seq) == size:
        return _reaches_every_frontier_flat(seq, adj, size)
    out: list[bool] = []
    frontier = [False] * size
    count = 0
    for v in seq:
        hits = [p for p in adj[v] if frontier[p]]
        out.append(len(hits) == count)
        for p in hits:
            if frontier[p]:
                frontier[p] = False
                count -= 1
        frontier[v] = True
        count += 1
    return out


def _reaches_every_frontier_flat(seq: Sequence[int], adj: Rows, size: int) -> list[bool]:
    """:func:`_reaches_every_frontier` of an order of every node, its rows stored flat, in a few
    passes of numpy (a whole graph's: the loop reads each of its 100,000 rows in Python).

    With ``pos`` each node's place in ``seq``: a node ``p`` leaves the frontier at ``first(p)``,
    the first place of a node adjacent to it after it (one past the end when none), so it is in
    the frontier that node ``v`` meets while ``pos(p) < pos(v) <= first(p)``. ``v`` hits the
    entries ``p`` of its row with ``first(p) == pos(v)`` (each as often as the row holds it, as
    the loop counts them), and the frontier it meets numbers the nodes ``u`` with ``pos(u) <
    pos(v) <= first(u)``: a running sum of +1 one past each ``pos(u)`` and -1 one past each
    ``first(u)``."""
    pos = np.empty(size, np.int64)
    pos[np.asarray(seq, np.int64)] = np.arange(size, dtype=np.int64)
    start, data = np.frombuffer(adj.start, np.int64), np.frombuffer(adj.data, np.int64)
    at = np.repeat(pos, np.diff(start))  # the place of each entry's row
    after = pos[data] < at  # entries of a node seen before the row's
    first = np.full(size, size, np.int64)
    np.minimum.at(first, data[after], at[after])
    hits = np.bincount(at[after & (first[data] == at)], minlength=size)
    met = np.bincount(pos + 1, minlength=size + 1)[:size + 1] - np.bincount(first + 1, minlength=size + 2)[:size + 1]
    out: list[bool] = (hits == np.cumsum(met)[:size]).tolist()
    return out


def forced_segments(piece: Piece) -> list[list[int]]:
    """The piece's nodes (local) cut at forced nodes, in execution order.

    A node is forced when every other node is its ancestor or its descendant;
    each forced node is a segment of its own, and the nodes between two
    forced nodes form one segment. Linear time: node ``v`` at position ``i``
    of a topological order has every earlier node as an ancestor exactly when
    every earlier node with no successor among the earlier nodes feeds ``v``
    directly; the descendant side is the same on the reversed order.
    """
    order = stable_order(piece.succs)  # the order onnxmem.scheduling.cost.topological gives
    fwd = _reaches_every_frontier(order, piece.preds, piece.n)
    bwd = _reaches_every_frontier(order[::-1], piece.succs, piece.n)[::-1]
    segments: list[list[int]] = []
    run: list[int] = []
    for i, v in enumerate(order):
        if fwd[i] and bwd[i]:
            if run:
                segments.append(run)
                run = []
            segments.append([v])
        else:
            run.append(v)
    if run:
        segments.append(run)
    return segments
