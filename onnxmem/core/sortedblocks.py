"""The sweep over blocks of memory live at one time that finds those sharing a byte
(:func:`live_overlaps`: the plan validator's and the static proof's).

Its active set is a sorted list in blocks: insert, remove and walk down from a key, each in
``O(log n + B)``. A plain Python list kept sorted with :func:`bisect.insort` moves ``n / 2``
items on an insert in the middle: a sweep that keeps ``n`` items live at once does ``O(n^2)``
moves. Here the items sit in blocks of at most ``2 * B`` (``B`` = :data:`BLOCK`), found by
bisecting the list of each block's last item; a full block is split in two, an empty one
dropped. The three operations are written out in the sweep's loop, which runs once per block
of a plan (100,000 and more): a method call each took a third of its time.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence

__all__ = ["BLOCK", "live_overlaps"]

#: half the most items a block of the active set holds
BLOCK = 512


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
    # the active set, (offset, index) ascending: its blocks and each block's last item
    blocks: list[list[tuple[int, int]]] = []
    lasts: list[tuple[int, int]] = []
    found = False
    pop, push = heapq.heappop, heapq.heappush
    for i in sorted(range(len(starts)), key=starts.__getitem__):
        start = starts[i]
        while ending and ending[0][0] <= start:
            _, off, j = pop(ending)
            item = (off, j)
            k = bisect_left(lasts, item)
            block = blocks[k]
            del block[bisect_left(block, item)]
            if block:
                lasts[k] = block[-1]
            else:
                del blocks[k], lasts[k]
        lo, hi = lows[i], highs[i]
        if blocks:
            key = (hi, -1)
            k = min(bisect_left(lasts, key), len(blocks) - 1)
            while k >= 0:
                block = blocks[k]
                for x in range(bisect_left(block, key) - 1, -1, -1):
                    off, j = block[x]
                    if off < lo and (highs[j] <= lo if not found else off + widest <= lo):
                        k = 0  # disjoint below (no pair yet), or past the widest block's reach
                        break
                    if highs[j] > lo:
                        # a block of the same bytes keeps the distinct blocks disjoint: the walk stays short
                        found = found or off != lo or highs[j] != hi
                        yield j, i
                k -= 1
            item = (lo, i)
            k = min(bisect_left(lasts, item), len(blocks) - 1)
            block = blocks[k]
            insort(block, item)
            if len(block) > 2 * BLOCK:
                blocks[k:k + 1] = [block[:BLOCK], block[BLOCK:]]
                lasts[k:k + 1] = [block[BLOCK - 1], block[-1]]
            else:
                lasts[k] = block[-1]
        else:
            blocks.append([(lo, i)])
            lasts.append((lo, i))
        push(ending, (ends[i], lo, i))
