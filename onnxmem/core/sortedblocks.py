"""A sorted list in blocks: insert, remove and walk down from a key, each in ``O(log n + B)``.

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

from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import Any

__all__ = ["BLOCK", "SortedBlocks"]

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
