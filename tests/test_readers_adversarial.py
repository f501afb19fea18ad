"""The readers of files other than models against hostile and broken files: plan JSON (as
`show`, `plot`, `compare`, `verify --plan` and `instantiate` read it) and MiniMalloc CSV
instances (`pack`).

Each refusal is one line naming the file, exits non-zero and writes nothing; a plan that
reads but is wrong is never shown as a plan.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from onnxmem.core.errors import PlanError
from onnxmem.plans.point import parse_plan_json
from onnxmem.plans.schema import check_schema

from .conftest import MODELS
from .test_export import run

RESNET = MODELS / "resnet_cnn.onnx"


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    """A plan of the shipped CNN, as `onnxmem plan -o` wrote it."""
    out = tmp_path_factory.mktemp("plan") / "good.json"
    r = run("plan", str(RESNET), "-o", str(out))
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def refused(r, code: int = 1) -> str:
    assert r.exit_code == code, r.output
    assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    return r.output


def write(tmp_path: Path, data, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=1))
    return path


# ---------------------------------------------------------------- JSON text


@pytest.mark.parametrize("first", [True, False])
def test_a_key_given_twice_is_refused(tmp_path, good_plan, first):
    """Python's json keeps the last of two equal keys, other readers the first: the file is ambiguous."""
    text = json.dumps(good_plan, indent=1)
    twice = '"arena_size": 64, "arena_size": 196608' if first else '"arena_size": 196608, "arena_size": 64'
    path = write(tmp_path, text.replace('"arena_size": 196608', twice, 1))
    out = refused(run("show", str(path)))
    assert "p.json' is not a plan" in out and "key 'arena_size' appears twice" in out


def test_a_long_wrong_array_costs_what_one_item_costs(good_plan):
    """The schema check names the first miss without making one per wrong item (5 million
    wrong tensors took 18 GB and 4 minutes)."""
    data = dict(good_plan, tensors=[0] * 50_000)
    tracemalloc.start()
    try:
        with pytest.raises(PlanError, match="field 'tensors/0': 0 is not of type 'object'"):
            check_schema(data, "plan", "plan file 'p.json'")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20, f"{peak:,} B traced"


def test_the_depth_walk_stacks_no_numbers():
    """An array of millions of numbers is walked for depth without a stack entry per number."""
    data = {"schema_version": 2, "order": [0] * 1_000_000}
    tracemalloc.start()
    try:
        with pytest.raises(PlanError):
            check_schema(data, "plan", "plan file 'p.json'")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20, f"{peak:,} B traced"


@pytest.mark.parametrize("text, kind", [("[" + "0," * 1000 + "0]", "array"), ('"' + "a b " * 1000 + '"', "string"),
                                        ("17", "number"), ("null", "null")])
def test_a_file_that_is_not_an_object_is_named_without_its_contents(tmp_path, text, kind):
    path = write(tmp_path, text)
    out = refused(run("show", str(path)))
    assert f"a JSON {kind} is not a plan" in out and len(out) < 300, out


def test_integers_past_the_digit_bound_are_refused_where_names_hold_long_digits():
    """The digit bound holds whichever way the text is parsed."""
    with pytest.raises(PlanError, match="digits"):
        parse_plan_json(b'{"a": "' + b"1" * 200 + b'", "b": ' + b"9" * 200 + b"}", "plan file 'p.json'")
    assert parse_plan_json(b'{"a": "' + b"1" * 200 + b'", "b": 12}', "x") == {"a": "1" * 200, "b": 12}
