"""Records (:mod:`onnxmem.core.records`): frozen to the type checker, plain slots when built.

The records a plan makes by the hundred thousand are built by :func:`record`; each must keep
what a frozen dataclass gives (equality and hash by its compared fields, changed copies by
``dataclasses.replace``, no ``__dict__``, its own checks in ``__post_init__``, pickling), and
mypy must refuse an assignment to one of its fields as it refuses one to a frozen dataclass.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnxmem.analysis.liveness import Interval
from onnxmem.core.errors import ProblemError
from onnxmem.core.problem import Buffer
from onnxmem.core.records import record
from onnxmem.graph.ops import Op
from onnxmem.graph.view import Tensor
from onnxmem.plans.point import OutsideValue, PlannedTensor

from .helpers import HANG_S

ROOT = Path(__file__).resolve().parent.parent

#: one record of each class a plan makes in bulk, and a field to change
EXAMPLES = [
    (Op(3, "add", "Add", "", ("a", "b", "a"), ("c",)), "name", "sub"),
    (Tensor("c", 1, "float32", (2, 3), 24, "activation", 3, ""), "size", 48),
    (Interval("c", 1, 4, 24, "c"), "end", 5),
    (Buffer("c", 1, 4, 64, 64), "size", 128),
    (PlannedTensor("c", "float32", (2, 3), 24, 64, 1, 4, "add", "Add", "activation", "c"), "offset", 128),
    (OutsideValue("w", "", "weight"), "graph", "Loop_1/body"),
]


@pytest.mark.parametrize("value,field,other", EXAMPLES, ids=lambda v: type(v).__name__ if not isinstance(v, (str, int)) else "")
def test_a_record_compares_hashes_copies_and_pickles_by_its_fields(value, field, other):
    cls = type(value)
    assert dataclasses.is_dataclass(value) and not hasattr(value, "__dict__")  # slotted
    again = dataclasses.replace(value)
    assert again == value and hash(again) == hash(value) and again is not value
    changed = dataclasses.replace(value, **{field: other})
    assert changed != value and getattr(changed, field) == other and getattr(value, field) != other
    assert {value: 1}[again] == 1  # usable as a key, by its fields
    assert pickle.loads(pickle.dumps(value)) == value
    assert cls.__hash__ is not None and cls.__hash__ is not object.__hash__


def test_a_record_runs_its_own_checks_and_derived_fields():
    op = Op(0, "n", "Add", "", ("a", "a", ""), ("b",))
    assert op.reads == ("a",)  # __post_init__ ran: each input once, none omitted
    assert Op(0, "n", "Add", "", ("a",), ("b",)) == Op(0, "n", "Add", "", ("a",), ("b",))
    with pytest.raises(ProblemError, match="lifetime"):
        Buffer("x", 3, 3, 8)  # Buffer's __post_init__ refuses an empty lifetime


def test_a_record_compares_by_its_compared_fields_only():
    # Op.reads is derived and not compared: equal nodes hash alike whatever it holds
    a, b = Op(0, "n", "Add", "", ("x",), ("y",)), Op(0, "n", "Add", "", ("x",), ("y",))
    assert a == b and hash(a) == hash(b)
    assert Op(0, "n", "Add", "", ("x",), ("y",)) != Op(1, "n", "Add", "", ("x",), ("y",))


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (make install puts it in .venv)")
def test_mypy_refuses_an_assignment_to_a_field_of_a_record(tmp_path):
    src = tmp_path / "uses_record.py"
    src.write_text(textwrap.dedent("""
        from onnxmem.core.records import record

        @record
        class Pair:
            left: int
            right: int = 0

        p = Pair(1)
        q = Pair(left=2, right=3)
        total: int = p.left + q.right
        p.left = 5
    """))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         str(src)], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S,  # a hang guard, not a speed limit
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    # one error, the assignment's, on its line; construction and reads type-check
    assert len(errors) == 1, out.stdout
    assert "uses_record.py:12:" in errors[0] and "read-only" in errors[0], out.stdout


def test_record_makes_a_slotted_dataclass_that_compares_by_value():
    @record
    class Pair:
        left: int
        right: int = 0

    assert Pair(1) == Pair(1, 0) and hash(Pair(1)) == hash(Pair(1, 0)) and Pair(1) != Pair(2)
    assert Pair.__slots__ == ("left", "right")


@pytest.mark.parametrize("inputs", [(), ("a",), ("",), ("a", "a"), ("a", ""), ("", "a"), ("a", "b"),
                                    ("a", "b", "a"), ("a", "", "b"), ("a", "b", "c")])
@pytest.mark.parametrize("captures", [(), ("a",), ("z",)])
def test_a_node_reads_each_value_once_in_first_use_order(inputs, captures):
    op = Op(0, "n", "X", "", inputs, ("o",), captures)
    want = tuple(dict.fromkeys(n for n in inputs + captures if n))
    assert op.reads == want
    if want == inputs:
        assert op.reads is op.inputs  # one tuple for both
