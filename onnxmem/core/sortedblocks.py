"""A sorted list in blocks: insert, remove and walk down from a key, each in ``O(log n + B)``;
and the sweep over it that finds the blocks of memory live at one time that share a byte
(:func:`live_overlaps`: the plan validator's and the static proof's).

A plain Python list kept sorted with :func:`bisect.insort` moves ``n / 2`` items on an
insert in the middle: a sweep that keeps ``n`` items live at once does ``O(n^2)`` moves. Here
the items sit in blocks of at most ``2 * B`` (``B`` = :data:`BLOCK`), found by bisecting the
list of each block's last item; a full block is split in two, an empty one dropped.

    >>> s = SortedBlocks()
    >>> for x in (5, 1, 3):
    ...     s.add(x)
    >>> s.remove(3)
    >>> list(s.below(6))
    [5, 1]
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["BLOCK", "SortedBlocks", "live_overlaps"]

#: half the most items a block holds
BLOCK = 512


class SortedBlocks:
    """Items kept in ascending order (any mutually comparable items, each added once)."""

    def __init__(self) -> None:
        self._blocks: list[list[Any]] = []
        self._lasts: list[Any] = []  # the last item of each block

    def add(self, item: Any) -> None:
        """Insert ``item`` in its place."""
        if not self._blocks:
            self._blocks.append([item])
            self._lasts.append(item)
            return
        k = min(bisect_left(self._lasts, item), len(self._blocks) - 1)
        block = self._blocks[k]
        insort(block, item)
        if len(block) > 2 * BLOCK:
            self._blocks[k:k + 1] = [block[:BLOCK], block[BLOCK:]]
            self._lasts[k:k + 1] = [block[BLOCK - 1], block[-1]]
        else:
            self._lasts[k] = block[-1]

    def remove(self, item: Any) -> None:
        """Take out ``item``, which must be there."""
        k = bisect_left(self._lasts, item)
        block = self._blocks[k]
        del block[bisect_left(block, item)]
        if block:
            self._lasts[k] = block[-1]
        else:
            del self._blocks[k], self._lasts[k]

    def below(self, key: Any) -> Iterator[Any]:
        """The items less than ``key``, largest first (do not change the list while walking)."""
        k = min(bisect_left(self._lasts, key), len(self._blocks) - 1)
        while k >= 0:
            block = self._blocks[k]
            for i in range(bisect_left(block, key) - 1, -1, -1):
                yield block[i]
            k -= 1


def live_overlaps(starts: Sequence[int], ends: Sequence[int], lows: Sequence[int],
                  highs: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Every pair ``(j, i)`` of blocks live at one time (``[starts, ends)``) whose bytes
    (``[lows, highs)``, each of positive size) meet: ``i`` in the order of ``starts`` (ties by
    index), ``j`` live already, by descending offset.

    One sweep: the blocks that ended are dropped from an active set sorted by offset, and each
    block is looked up in it before it joins. While every pair found was of two blocks of the
    same bytes (a value written in place over another, a view of it), the active set's distinct
    blocks are disjoint, so the walk down from the block's end stops at the first active block
    below its offset: ``O(n log n)`` however many blocks are live at once. Once a pair of other
    bytes is found, the walk goes down to the widest block's reach."""
    widest = max((h - lo for lo, h in zip(lows, highs)), default=0)
    ending: list[tuple[int, int, int]] = []  # (end, offset, index): a min-heap
    active = SortedBlocks()  # (offset, index)
    found = False
    for i in sorted(range(len(starts)), key=starts.__getitem__):
        while ending and ending[0][0] <= starts[i]:
            _, off, j = heapq.heappop(ending)
            active.remove((off, j))
        lo = lows[i]
        for off, j in active.below((highs[i], -1)):
            if off < lo and (highs[j] <= lo if not found else off + widest <= lo):
                break  # disjoint below (no pair yet), or past the widest block's reach
            if highs[j] > lo:
                # a block of the same bytes keeps the distinct blocks disjoint: the walk stays short
                found = found or off != lo or highs[j] != highs[i]
                yield j, i
        active.add((lo, i))
        heapq.heappush(ending, (ends[i], lo, i))
