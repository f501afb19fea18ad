"""A point plan's tensors are made into records as the file is parsed
(:func:`onnxmem.plans.point.parse_plan_json`, :func:`onnxmem.core.fileio.loads_json_streamed`).

What it must keep: every file reads to the plan, or is refused with the message, that parsing
it whole and checking it whole gives (seeded mutations of real plans, written as text); the
parsed objects of the tensors are never all held at once; strings alike are held once.
"""

from __future__ import annotations

import copy
import json
import random
import tracemalloc
from typing import Any

import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import PlanError
from onnxmem.core.fileio import loads_json, loads_json_streamed
from onnxmem.plans import read_plan
from onnxmem.plans.point import _ReadTensors, parse_plan_json, plan_from_dict

from .conftest import MODELS
from .test_plan_schema_fast import _mutate

CORPUS = ["control_flow.onnx", "inception_block.onnx", "resnet_cnn.onnx", "training/mlp.train.onnx"]


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("plans")
    out = []
    for k, name in enumerate(CORPUS):
        path = tmp / f"p{k}.json"
        r = CliRunner().invoke(main, ["plan", str(MODELS / name), "-o", str(path)])
        assert r.exit_code == 0, r.output
        out.append(json.loads(path.read_text()))
    return out


def _streamed(text: str) -> Any:
    try:
        return plan_from_dict(parse_plan_json(text.encode(), "plan 'p.json'"), "plan 'p.json'")
    except PlanError as exc:
        return f"refused: {exc}"


def _whole(text: str) -> Any:
    try:
        data = loads_json(text, unique_keys=True)
    except ValueError as exc:
        return f"not JSON: {type(exc).__name__}"
    try:
        return plan_from_dict(data, "plan 'p.json'")
    except PlanError as exc:
        return f"refused: {exc}"


def test_real_plans_are_read_as_records_as_they_are_parsed(plans):
    for plan in plans:
        text = json.dumps(plan, indent=1)
        data = parse_plan_json(text.encode(), "p")
        assert type(data["tensors"]) is _ReadTensors
        assert _streamed(text) == _whole(text)


def test_mutated_plans_read_or_are_refused_as_when_parsed_whole(plans):
    rng = random.Random(20261126)
    counts = {"read": 0, "refused": 0, "streamed": 0}
    for plan in plans:
        for _ in range(50):
            data = _mutate(plan, rng)
            text = json.dumps(data, indent=rng.choice([None, 1]))
            streamed, whole = _streamed(text), _whole(text)
            if isinstance(whole, str) and whole.startswith("not JSON"):
                assert isinstance(streamed, str) and streamed.startswith("refused: plan 'p.json' is not")
                continue
            assert streamed == whole, text[:200]
            counts["read" if not isinstance(whole, str) else "refused"] += 1
            parsed = parse_plan_json(text.encode(), "p")
            counts["streamed"] += isinstance(parsed, dict) and type(parsed.get("tensors")) is _ReadTensors
    # both outcomes are reached, and most files take the streamed path
    assert counts["read"] > 15 and counts["refused"] > 80 and counts["streamed"] > 120, counts


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('"size": 2', '"size": 2' + "0" * 120, 1), r"an integer has 1\d\d digits, more than 100"),
    (lambda t: t.replace('"tensors": [', '"tensors": [], "tensors": [', 1), "key 'tensors' is given twice"),
    (lambda t: t.replace('"dtype": "float32"', '"dtype": "\\ud800"', 1), "lone UTF-16 surrogate"),
    (lambda t: t.replace('"size": 2', '"size": 2.0', 1), "field 'tensors/"),
    (lambda t: t.replace('"kind": "activation"', '"kind": "activation", "k": 1', 1), "field 'tensors/"),
    (lambda t: t.rstrip() + " x", "is not JSON"),
])
def test_a_tensor_the_records_cannot_take_gets_the_message_of_the_whole_file(plans, edit, message):
    text = edit(json.dumps(plans[2], indent=1))
    with pytest.raises(PlanError, match=message):
        plan_from_dict(parse_plan_json(text.encode(), "p"), "p")
    assert _streamed(text) == _whole(text) or "not JSON" in _whole(text)


def test_a_size_past_2_62_is_refused_by_its_field(plans):
    data = copy.deepcopy(plans[2])
    data["tensors"][3]["size"] = 2**70
    with pytest.raises(PlanError, match=r"field 'tensors/3/size' is 1,180,591,620,717,411,303,424, not below 2\^62"):
        plan_from_dict(parse_plan_json(json.dumps(data).encode(), "p"), "p")


@pytest.mark.heavy
def test_the_tensors_objects_are_never_all_held(plans):
    plan = copy.deepcopy(plans[2])
    base = plan["tensors"][0]
    plan["tensors"] = [{**base, "name": f"t{i}", "group": f"t{i}"} for i in range(20_000)]
    raw = json.dumps(plan, indent=1).encode()
    del plan

    def peak(parse) -> tuple[int, Any]:
        tracemalloc.start()
        try:
            kept = parse()
            return tracemalloc.get_traced_memory()[1], kept
        finally:
            tracemalloc.stop()

    plan_from_dict(parse_plan_json(json.dumps(plans[2]).encode(), "p"))  # the schema checks compiled before
    parsed, _ = peak(lambda: loads_json(raw.decode(), unique_keys=True))  # the parse alone, no record made
    streamed, got = peak(lambda: plan_from_dict(parse_plan_json(raw, "p")))
    assert len(got.tensors) == 20_000 and got.tensors[-1].name == "t19999"
    # the text, the records and one tensor's parsed object at a time, against the text and every
    # parsed object (12.5 against 22.5 MB when written)
    assert streamed < 0.75 * parsed, (streamed, parsed)


def test_strings_alike_are_held_once(plans, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plans[2], indent=1))
    plan = read_plan(path)
    dtypes = {id(t.dtype) for t in plan.tensors if t.dtype == "float32"}
    assert len(dtypes) == 1
    assert all(t.group is t.name for t in plan.tensors if t.group == t.name)
    producers = {t.producer: t.producer for t in plan.tensors if t.producer}
    assert any(n in producers for n in plan.order)
    assert all(n is producers[n] for n in plan.order if n in producers)
    ops = {}
    assert all(ops.setdefault(o, o) is o for o in plan.op_types)


def test_the_streamed_parse_leaves_other_files_to_the_whole_parse():
    keep = lambda v: v  # noqa: E731
    assert loads_json_streamed('{"a": [1, 2], "b": {"c": [3]}}', "a", keep) == {"a": [1, 2], "b": {"c": [3]}}
    assert loads_json_streamed(' { "a" : [ ] , "b" : 1 } ', "a", keep) == {"a": [], "b": 1}
    assert loads_json_streamed("{}", "a", keep) == {}
    for text in ("[1]", '{"a": [1,]}', '{"a": [1] "b": 2}', '{"a": 1', '{"a": NaN}', '{"a": [1]} 2',
                 '{"b": ' + "9" * 101 + ', "a": []}', '{"a": ["\\udc00"]}', '{"a": 1, "a": 2}'):
        assert loads_json_streamed(text, "a", keep) is None, text

    def refuse(v: Any) -> Any:
        raise ValueError("no")

    assert loads_json_streamed('{"a": [1]}', "a", refuse) is None
    assert loads_json_streamed('{"a": []}', "a", refuse) == {"a": []}
