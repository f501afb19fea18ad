"""Stable topological order: Kahn's algorithm that always takes the ready node numbered lowest.

Pure: nodes are ``0 .. n-1``, edges are given as successor lists. Equals the
numbering itself when that is already topological.

>>> stable_order([[1], [], [1]])
[0, 2, 1]
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

__all__ = ["stable_order"]


def stable_order(successors: Sequence[Sequence[int]], priority: Callable[[int], Any] | None = None) -> list[int]:
    """The order; nodes on a cycle (never ready) are left out, so a short result means a cycle.

    ``priority``: of the ready nodes, the one of lowest ``(priority(i), i)`` is taken, each
    node's priority asked once, when its last predecessor has been taken (so it may depend on
    theirs); by default the lowest number."""
    if priority is None and all(j > i for i, succ in enumerate(successors) for j in succ):
        return list(range(len(successors)))  # the numbering is topological: Kahn's takes it as it is
    rank = (lambda i: (priority(i), i)) if priority is not None else (lambda i: (0, i))
    waits = [0] * len(successors)
    for succ in successors:
        for j in succ:
            waits[j] += 1
    ready = [rank(i) for i, w in enumerate(waits) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in successors[i]:
            waits[j] -= 1
            if waits[j] == 0:
                heapq.heappush(ready, rank(j))
    return order
