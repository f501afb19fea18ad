"""The problem layer on literal, hand-computed instances and random ones."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxmem.core.errors import ProblemError
from onnxmem.core.problem import (
    Buffer,
    Problem,
    Solution,
    align_up,
    live_bytes,
    lower_bound,
    read_csv,
    time_points,
    validate,
    write_csv,
)
from onnxmem.core.solvers import SolveOptions, solve

# three buffers: a [0,2) 4B, b [1,3) 2B, c [2,4) 4B.
# live: step0 4, step1 6, step2 6, step3 4 -> bound 6
ABC = Problem((Buffer("a", 0, 2, 4), Buffer("b", 1, 3, 2), Buffer("c", 2, 4, 4)))


def test_lower_bound_hand_computed():
    assert live_bytes(ABC).tolist() == [4, 6, 6, 4]
    assert lower_bound(ABC) == 6


def test_greedy_reaches_hand_computed_arena():
    # largest first: a at 0, c at 0 is blocked? a [0,2) and c [2,4) do not overlap -> c at 0;
    # b overlaps both -> on top at 4. Height 6 = bound.
    sol = solve(ABC, "greedy")
    assert sol.offsets == (0, 4, 0)
    assert sol.height == 6
    assert sol.status == "optimal"
    assert validate(ABC, sol) == []


def test_time_points_hand_computed():
    import numpy as np

    start, end = np.array([3, 0, 3, 7]), np.array([5, 3, 9, 9])
    assert time_points(start, end).tolist() == [0, 3, 5, 7, 9]
    assert time_points(start[:0], end[:0]).tolist() == []


@given(st.lists(st.tuples(st.integers(-(2**40), 2**40), st.integers(0, 9)), max_size=40))
def test_time_points_equal_numpy_unique(pairs):
    import numpy as np

    start = np.array([a for a, _ in pairs], dtype=np.int64)
    end = start + np.array([b for _, b in pairs], dtype=np.int64)
    got = time_points(start, end)
    assert got.dtype == np.int64 and got.tolist() == np.unique(np.concatenate([start, end])).tolist()


def test_naive_is_sum_of_sizes():
    sol = solve(ABC, "naive")
    assert sol.height == 10
    assert validate(ABC, sol) == []


def test_alignment_pads_offsets():
    p = Problem((Buffer("a", 0, 2, 10, 8), Buffer("b", 1, 3, 10, 8)))
    sol = solve(p, "greedy")
    assert sorted(sol.offsets) == [0, 16]
    assert sol.height == 26


def test_validate_names_every_violation():
    bad = Solution((0, 2, 0), 6, "hand")
    found = validate(ABC, bad)
    kinds = sorted(v.kind for v in found)
    assert kinds == ["overlap", "overlap"]
    msgs = " ".join(v.message for v in found)
    assert "'a' and 'b'" in msgs and "'b' and 'c'" in msgs
    assert "share bytes [2, 4)" in msgs


def test_validate_catches_misalignment_and_capacity():
    p = Problem((Buffer("x", 0, 1, 8, 4),), capacity=8)
    found = validate(p, Solution((2,), 10, "hand"))
    assert {v.kind for v in found} == {"alignment", "capacity"}


def test_validate_catches_claimed_height_too_small():
    found = validate(ABC, Solution((0, 4, 0), 5, "hand"))
    assert [v.kind for v in found] == ["capacity"]


def test_buffer_rules():
    with pytest.raises(ProblemError, match="non-empty"):
        Buffer("z", 3, 3, 1)
    with pytest.raises(ProblemError, match="negative size"):
        Buffer("z", 0, 1, -1)
    with pytest.raises(ProblemError, match="appears twice"):
        Problem((Buffer("z", 0, 1, 1), Buffer("z", 1, 2, 1)))


@pytest.mark.parametrize("args, message", [
    (("z", 0, 1, 1, 0), "alignment 0"),
    (("z", -1, 1, 1), "starts at step -1"),
    (("z", 2, 1, 1), "non-empty"),
    (("z", 0, 2**62 + 1, 1), "above 2\\^62"),
    (("z", 0, 1, 2**62 + 1), "above 2\\^62"),
    (("z", 0, 1, True), "not an integer"),
    (("z", 0, 1.0, 1), "not an integer"),
    (("z", 0, 1, 8, 64, 32), "not a multiple"),
    (("z\n\x1b[2J", 0, 0, 1), "buffer 'z\\\\n\\\\x1b"),  # the name escaped in the message
], ids=["alignment", "start", "empty", "end", "size", "bool", "float", "offset", "escaped"])
def test_buffer_refuses_each_broken_field(args, message):
    with pytest.raises(ProblemError, match=message):
        Buffer(*args)


def test_buffer_takes_numpy_integers_and_the_largest_values():
    b = Buffer("z", np.int64(0), np.int64(2**62), 2**62, 2**62)
    assert (b.end, b.size, b.alignment) == (2**62, 2**62, 2**62)
    assert Buffer("z", 0, 1, 0).size == 0


def test_capacity_below_bound_rejected_at_once():
    with pytest.raises(ProblemError, match="below the lower bound 6"):
        solve(ABC, "greedy", SolveOptions(capacity=5))


def test_csv_round_trip(tmp_path):
    sol = solve(ABC, "greedy")
    path = tmp_path / "abc.csv"
    write_csv(ABC, path, sol.offsets)
    p2, offs = read_csv(path)
    assert p2 == ABC
    assert offs == sol.offsets
    assert path.read_text().splitlines()[0] == "id,lower,upper,size,offset"


@pytest.mark.parametrize(
    "text,match",
    [
        ("", "empty"),
        ("a,b,c\n", "header"),
        ("id,lower,upper,size\n1,0,x,4\n", "not an integer"),
        ("id,lower,upper,size\n1,3,3,4\n", "non-empty"),
        ("id,lower,upper,size\n1,0,3\n", "expected 4 fields"),
    ],
)
def test_csv_errors(text, match):
    with pytest.raises(ProblemError, match=match):
        read_csv(io.StringIO(text))


def test_align_up():
    assert align_up(0, 64) == 0
    assert align_up(1, 64) == 64
    assert align_up(64, 64) == 64
    assert align_up(5, 1) == 5


@st.composite
def problems(draw, max_buffers=30):
    n = draw(st.integers(1, max_buffers))
    align = draw(st.sampled_from([1, 4, 64]))
    bufs = []
    for i in range(n):
        s = draw(st.integers(0, 20))
        e = draw(st.integers(s + 1, s + 10))
        # the planner rounds sizes up to the alignment (liveness does), so do the same here
        size = draw(st.integers(0, 1000 // align)) * align
        bufs.append(Buffer(str(i), s, e, size, align))
    return Problem(tuple(bufs))


@settings(max_examples=150, deadline=None)
@given(problems())
def test_every_greedy_plan_validates_and_is_bracketed(p):
    greedy = solve(p, "greedy")
    naive = solve(p, "naive")
    assert validate(p, greedy) == []
    assert validate(p, naive) == []
    assert lower_bound(p) <= greedy.height <= naive.height


@settings(max_examples=100, deadline=None)
@given(problems(12), st.data())
def test_validate_agrees_with_pairwise_definition(p, data):
    offsets = [data.draw(st.integers(0, 50)) * b.alignment for b in p.buffers]
    got = {tuple(sorted(v.buffers)) for v in validate(p, offsets) if v.kind == "overlap"}
    want = set()
    for i, a in enumerate(p.buffers):
        for b in p.buffers[i + 1 :]:
            j = p.buffers.index(b)
            if a.start < b.end and b.start < a.end and a.size and b.size:
                if offsets[i] < offsets[j] + b.size and offsets[j] < offsets[i] + a.size:
                    want.add(tuple(sorted((a.id, b.id))))
    assert got == want


def test_problem_and_solvers_do_not_import_onnx():
    code = (
        "import sys; import onnxmem.core.problem, onnxmem.core.solvers; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
