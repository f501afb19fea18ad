"""Rows of integers stored flat, for graphs of a hundred thousand nodes.

A list of lists costs a list object per row (56 bytes and more) and a pointer per entry; on a
100,000-node graph the adjacency lists of a search graph took tens of MiB. :class:`Rows` keeps
every row in one ``array('q')`` and the row starts in another (compressed sparse rows): eight
bytes per entry and eight per row. Row ``i`` reads as ``rows[i]``, an ``array('q')`` slice
(iterable, sized, false when empty), so code written for a list of lists reads it unchanged;
rows are read only.

:func:`transpose` builds the reverse rows (each node's successors from its predecessors, each
tensor's readers from each node's reads) with every row in increasing order, as appending in
a loop over the nodes would.
"""

from __future__ import annotations

from array import array
from typing import Iterable, Iterator, Sequence

import numpy as np

__all__ = ["Rows", "row_max", "transpose"]


class Rows(Sequence["array[int]"]):
    """Read-only rows of ints, stored flat: row ``i`` is ``data[start[i]:start[i + 1]]``."""

    __slots__ = ("data", "start")

    def __init__(self, data: array[int] | None = None, start: array[int] | None = None) -> None:
        self.data = data if data is not None else array("q")
        self.start = start if start is not None else array("q", [0])

    @classmethod
    def of(cls, rows: Iterable[Iterable[int]]) -> Rows:
        """The rows of ``rows``, in order."""
        out = cls()
        for row in rows:
            out.append(row)
        return out

    def append(self, row: Iterable[int]) -> None:
        """Add ``row`` as the last row (while building; rows are read only once shared)."""
        self.data.extend(row)
        self.start.append(len(self.data))

    def __len__(self) -> int:
        return len(self.start) - 1

    def __getitem__(self, i: int) -> array[int]:  # type: ignore[override]
        s = self.start
        return self.data[s[i] : s[i + 1]]

    def __iter__(self) -> Iterator[array[int]]:
        data, s = self.data, self.start
        for i in range(len(s) - 1):
            yield data[s[i] : s[i + 1]]

    def __repr__(self) -> str:
        return f"Rows({[list(r) for r in self]!r})"


def transpose(rows: Rows, width: int) -> Rows:
    """Rows ``0..width-1`` where row ``t`` lists every ``i`` with ``t`` in ``rows[i]``, increasing
    (an ``i`` once per time ``t`` appears in ``rows[i]``)."""
    start = np.frombuffer(rows.start, dtype=np.int64) if len(rows.start) else np.zeros(1, np.int64)
    target = np.frombuffer(rows.data, dtype=np.int64) if len(rows.data) else np.zeros(0, np.int64)
    source = np.repeat(np.arange(len(rows), dtype=np.int64), np.diff(start))
    by = np.argsort(target, kind="stable")
    counts = np.bincount(target, minlength=width) if target.size else np.zeros(width, np.int64)
    out_start = np.zeros(width + 1, dtype=np.int64)
    np.cumsum(counts, out=out_start[1:])
    data = array("q")
    data.frombytes(source[by].astype(np.int64).tobytes())
    begin = array("q")
    begin.frombytes(out_start.tobytes())
    return Rows(data, begin)


def row_max(rows: Rows, values: Sequence[int], empty: int = -1) -> list[int]:
    """For each row, the largest of ``values[i]`` over its entries ``i``; ``empty`` for an empty row."""
    start = np.frombuffer(rows.start, dtype=np.int64)
    out = np.full(len(start) - 1, empty, dtype=np.int64)
    if len(rows.data):
        at = np.asarray(values, dtype=np.int64)[np.frombuffer(rows.data, dtype=np.int64)]
        full = np.flatnonzero(np.diff(start) > 0)
        out[full] = np.maximum.reduceat(at, start[full])
    found: list[int] = out.tolist()
    return found
