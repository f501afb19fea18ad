"""The sweep that finds the blocks live at one time that share a byte
(:func:`onnxmem.core.sortedblocks.live_overlaps`), against every pair checked one by one and
the order its doc gives, and the length of its walk."""

from __future__ import annotations

import random

import pytest

import onnxmem.core.sortedblocks as blocks
from onnxmem.core.sortedblocks import live_overlaps


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
def test_the_sweep_finds_every_pair_in_the_order_of_its_doc(monkeypatch, block, same):
    monkeypatch.setattr(blocks, "BLOCK", block)
    rng = random.Random(block * 2 + same)
    for _ in range(300):
        starts, ends, lows, highs = _blocks(rng, rng.randint(0, 40), same)
        got = list(live_overlaps(starts, ends, lows, highs))
        # ``i`` in the order of starts (ties by index), each ``i``'s pairs together, its ``j`` by
        # descending offset (ties by index)
        rank = {i: r for r, i in enumerate(sorted(range(len(starts)), key=starts.__getitem__))}
        keys = [(rank[i], -lows[j], -j) for j, i in got]
        assert keys == sorted(keys)
        n = len(starts)
        want = {frozenset((a, b)) for a in range(n) for b in range(a + 1, n)
                if starts[a] < ends[b] and starts[b] < ends[a] and lows[a] < highs[b] and lows[b] < highs[a]}
        assert {frozenset(p) for p in got} == want and len(got) == len(want)


def test_blocks_of_the_same_bytes_keep_the_walk_short(monkeypatch):
    # 500 small blocks live throughout below a chain of values each written in place over the
    # last (every pair of the same bytes), and one wide block, early and far away: the walk of
    # each link stops at the first small block, where a walk to the widest block's reach would
    # go through all of them
    small, chain = 500, 300
    starts = [0] + [0] * small + list(range(1, chain + 1))
    ends = [1] + [chain + 2] * small + [k + 2 for k in range(1, chain + 1)]
    lows = [100_000] + [8 * k for k in range(small)] + [4096] * chain
    highs = [104_096] + [8 * k + 8 for k in range(small)] + [4160] * chain

    class Counted(list):  # each block the walk reaches is read here (its end, once or twice)
        reads = 0

        def __getitem__(self, k):
            Counted.reads += 1
            return super().__getitem__(k)

    pairs = list(live_overlaps(starts, ends, lows, Counted(highs)))
    first = 1 + small
    assert pairs == [(first + k - 1, first + k) for k in range(1, chain)]
    # one read of each block's own end, at most two of each block walked; the widest walk
    # would read 500 blocks a link
    assert Counted.reads <= len(highs) + 2 * 3 * (small + chain)
