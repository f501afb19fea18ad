"""The sweep that finds the blocks live at one time that share a byte
(:func:`onnxmem.core.sortedblocks.live_overlaps`), against every pair checked one by one and
against the sweep that walks to the widest block's reach after any pair."""

from __future__ import annotations

import heapq
import random

import pytest

import onnxmem.core.sortedblocks as blocks
from onnxmem.core.sortedblocks import SortedBlocks, live_overlaps


def _widest_walk(starts, ends, lows, highs):
    """The sweep that leaves the short walk at the first pair found, whatever its bytes."""
    widest = max((h - lo for lo, h in zip(lows, highs)), default=0)
    ending, active, found = [], SortedBlocks(), False
    for i in sorted(range(len(starts)), key=starts.__getitem__):
        while ending and ending[0][0] <= starts[i]:
            _, off, j = heapq.heappop(ending)
            active.remove((off, j))
        lo = lows[i]
        for off, j in active.below((highs[i], -1)):
            if off < lo and (highs[j] <= lo if not found else off + widest <= lo):
                break
            if highs[j] > lo:
                found = True
                yield j, i
        active.add((lo, i))
        heapq.heappush(ending, (ends[i], lo, i))


def _blocks(rng, n, same):
    """``n`` blocks; with ``same``, most written over one of a few places (in place, views)."""
    starts = [rng.randint(0, 12) for _ in range(n)]
    ends = [s + rng.randint(1, 6) for s in starts]
    places = [(o, o + z) for o, z in ((rng.randint(0, 40) * 8, rng.choice([8, 16, 64])) for _ in range(6))]
    lows, highs = [], []
    for _ in range(n):
        lo, hi = rng.choice(places) if same and rng.random() < 0.8 else (
            (lambda o: (o, o + rng.choice([1, 8, 24, 64])))(rng.randint(0, 400)))
        lows.append(lo)
        highs.append(hi)
    return starts, ends, lows, highs


@pytest.mark.parametrize("block", [1, 2, 512])
@pytest.mark.parametrize("same", [True, False])
def test_the_sweep_finds_every_pair_and_in_the_order_of_the_widest_walk(monkeypatch, block, same):
    monkeypatch.setattr(blocks, "BLOCK", block)
    rng = random.Random(block * 2 + same)
    for _ in range(300):
        starts, ends, lows, highs = _blocks(rng, rng.randint(0, 40), same)
        got = list(live_overlaps(starts, ends, lows, highs))
        assert got == list(_widest_walk(starts, ends, lows, highs))
        n = len(starts)
        want = {frozenset((a, b)) for a in range(n) for b in range(a + 1, n)
                if starts[a] < ends[b] and starts[b] < ends[a] and lows[a] < highs[b] and lows[b] < highs[a]}
        assert {frozenset(p) for p in got} == want and len(got) == len(want)


def test_blocks_of_the_same_bytes_keep_the_walk_short(monkeypatch):
    # 500 small blocks live throughout below a chain of values each written in place over the
    # last (every pair of the same bytes), and one wide block, early and far away: the walk of
    # each link stops at the first small block, where the widest walk went through all of them
    small, chain = 500, 300
    starts = [0] + [0] * small + list(range(1, chain + 1))
    ends = [1] + [chain + 2] * small + [k + 2 for k in range(1, chain + 1)]
    lows = [100_000] + [8 * k for k in range(small)] + [4096] * chain
    highs = [104_096] + [8 * k + 8 for k in range(small)] + [4160] * chain
    walked = [0]
    below = SortedBlocks.below

    def counted(self, key):
        for item in below(self, key):
            walked[0] += 1
            yield item

    monkeypatch.setattr(SortedBlocks, "below", counted)
    pairs = list(live_overlaps(starts, ends, lows, highs))
    first = 1 + small
    assert pairs == [(first + k - 1, first + k) for k in range(1, chain)]
    assert walked[0] <= 3 * (small + chain)
    walked[0] = 0
    assert list(_widest_walk(starts, ends, lows, highs)) == pairs
    assert walked[0] > small * (chain - 2)  # the walk it no longer makes
