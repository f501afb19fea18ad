"""Stable topological order: Kahn's algorithm that always takes the ready node numbered lowest.

Pure: nodes are ``0 .. n-1``, edges are given as successor lists. Equals the
numbering itself when that is already topological.

>>> stable_order([[1], [], [1]])
[0, 2, 1]
"""

from __future__ import annotations

import heapq
from typing import Sequence

__all__ = ["stable_order"]


def stable_order(successors: Sequence[Sequence[int]]) -> list[int]:
    """The order; nodes on a cycle (never ready) are left out, so a short result means a cycle."""
    if all(j > i for i, succ in enumerate(successors) for j in succ):
        return list(range(len(successors)))  # the numbering is topological: Kahn's takes it as it is
    waits = [0] * len(successors)
    for succ in successors:
        for j in succ:
            waits[j] += 1
    ready = [i for i, w in enumerate(waits) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in successors[i]:
            waits[j] -= 1
            if waits[j] == 0:
                heapq.heappush(ready, j)
    return order
