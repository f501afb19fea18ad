"""onnxmem.core.rows: rows of ints stored flat, and their transpose."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from onnxmem.core.rows import Rows, transpose


def test_rows_read_as_lists():
    rows = Rows.of([[3, 1], [], [2]])
    assert len(rows) == 3
    assert [list(r) for r in rows] == [[3, 1], [], [2]]
    assert list(rows[0]) == [3, 1] and not rows[1] and len(rows[2]) == 1
    assert 1 in rows[0] and 2 not in rows[0]
    assert [list(rows[i]) for i in range(len(rows))] == [[3, 1], [], [2]]


def test_rows_cost_eight_bytes_an_entry():
    rows = Rows.of([[i, i + 1] for i in range(1000)])
    assert rows.data.itemsize == rows.start.itemsize == 8
    assert len(rows.data) == 2000 and len(rows.start) == 1001


def test_transpose_literal():
    # node 0 reads tensors 2 and 0, node 1 reads 2, node 2 reads nothing
    readers = transpose(Rows.of([[2, 0], [2], []]), 4)
    assert [list(r) for r in readers] == [[0], [], [0, 1], []]


def test_transpose_of_no_rows():
    assert [list(r) for r in transpose(Rows(), 2)] == [[], []]


@given(st.lists(st.lists(st.integers(0, 9), max_size=5), max_size=30))
def test_transpose_is_appending_in_node_order(rows):
    expected: list[list[int]] = [[] for _ in range(10)]
    for i, row in enumerate(rows):
        for t in row:
            expected[t].append(i)
    assert [list(r) for r in transpose(Rows.of(rows), 10)] == expected
