"""The compiled schema check (fastjsonschema, :func:`onnxmem.plans.schema._fast_check`) passes a
plan only where jsonschema, the check that names a miss, passes it too.

Plans of real models (control flow, a training graph, a program of two models) are mutated one
field at a time, seeded: a value of another type, ``1.0`` for an integer, ``True``, a negative
number, a key left out or added, a string that breaks a pattern. For each, the compiled check may
refuse what jsonschema passes (the plan is then checked by jsonschema), never the other way.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import PlanError
from onnxmem.plans.schema import _draft4, _fast_check, _validator, check_schema, load_schema

from .conftest import MODELS
from .test_program import first, second

#: shipped models whose plans make the corpus (a body's tensors, views, in-place groups, a training graph)
CORPUS = ["control_flow.onnx", "inception_block.onnx", "resnet_cnn.onnx", "training/mlp.train.onnx"]


def _plan(tmp_path, *args) -> dict[str, Any]:
    out = tmp_path / f"p{len(list(tmp_path.iterdir()))}.json"
    r = CliRunner().invoke(main, ["plan", *map(str, args), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[tuple[str, dict[str, Any]]]:
    import onnx

    tmp = tmp_path_factory.mktemp("corpus")
    plans = [("plan", _plan(tmp, MODELS / name)) for name in CORPUS]
    a, b = tmp / "first.onnx", tmp / "second.onnx"
    onnx.save(first(), a)
    onnx.save(second(), b)
    plans.append(("program", _plan(tmp, a, b)))
    return plans


def _paths(data: Any, path: tuple = ()) -> list[tuple]:
    """Every place in ``data`` (as a tuple of keys and indices), lists cut to their first three items."""
    out = [path]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data[:3]):
            out += _paths(v, (*path, i))
    return out


def _replace(value: Any, rng: random.Random) -> Any:
    """Another value for ``value``: the kinds of miss a hand-edited or hostile plan has."""
    if type(value) is int:
        return rng.choice([float(value), value + 0.5, True, -1 - value, str(value), None, [value], 2**70])
    if isinstance(value, str):
        return rng.choice(["", value + "\n", value.upper() + "!", "x" * 80, 0, None, [value], {"k": value}])
    if isinstance(value, float):
        return rng.choice([-value - 1.0, int(value), "1.5", None, True])
    if isinstance(value, bool):
        return rng.choice([int(value), "true", None])
    if isinstance(value, list):
        return rng.choice([{}, "[]", value[:1] * 5 if value else [None], value + [None], value + [{}]])
    if isinstance(value, dict):
        return rng.choice([[], "{}", {**value, "extra_key": 1}, {}])
    return rng.choice([0, "", [], {}])


def _mutate(plan: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    data = copy.deepcopy(plan)
    path = rng.choice(_paths(data)[1:])
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[path[-1]]
    else:
        parent[path[-1]] = _replace(parent[path[-1]], rng)
    return data


def _passes(check, data: Any) -> bool:
    try:
        check(data)
    except Exception:  # noqa: BLE001 - any refusal
        return False
    return True


def _jsonschema_passes(name: str, data: Any) -> bool:
    return next(iter(_validator(name).iter_errors(data)), None) is None


def test_the_compiled_check_passes_no_plan_jsonschema_refuses(corpus):
    rng = random.Random(20261126)
    counts = {"both pass": 0, "both refuse": 0, "compiled refuses only": 0}
    for name, plan in corpus:
        fast = _fast_check(name)
        assert fast is not None, f"the {name} schema has no compiled check"
        assert _passes(fast, plan) and _jsonschema_passes(name, plan), f"a {name} plan onnxmem wrote is refused"
        for _ in range(150):
            data = _mutate(plan, rng)
            fast_ok, slow_ok = _passes(fast, data), _jsonschema_passes(name, data)
            assert slow_ok or not fast_ok, f"the compiled check passes a {name} plan jsonschema refuses"
            counts["both pass" if fast_ok else "compiled refuses only" if slow_ok else "both refuse"] += 1
    # the mutations reach both sides: the test would see a compiled check that passes too much
    assert counts["both refuse"] > 300 and counts["both pass"] > 20, counts


@pytest.mark.parametrize("value", [1.0, True, "3", -1, None])
def test_a_plan_with_a_wrong_arena_size_gets_jsonschemas_message(corpus, value):
    plan = copy.deepcopy(corpus[2][1])
    plan["arena_size"] = value
    assert not _passes(_fast_check("plan"), plan)
    with pytest.raises(PlanError, match=r"^where: field 'arena_size': "):
        check_schema(plan, "plan", "where")


def test_a_refused_plan_is_named_as_jsonschema_names_it(corpus):
    plan = copy.deepcopy(corpus[0][1])
    plan["tensors"][0]["offset"] = 64.0
    first_miss = next(iter(_validator("plan").iter_errors(plan)))
    with pytest.raises(PlanError) as caught:
        check_schema(plan, "plan", "plan 'p.json'")
    assert str(caught.value) == f"plan 'p.json': field 'tensors/0/offset': {first_miss.message}"


def test_a_value_the_compiled_check_refuses_and_jsonschema_passes_is_a_plan(corpus):
    # fastjsonschema reads a pattern's final "$" as the end of the text; jsonschema (Python's re)
    # also before a final newline: the plan passes, checked by jsonschema
    plan = copy.deepcopy(corpus[2][1])
    plan["model"]["sha256"] += "\n"
    assert not _passes(_fast_check("plan"), plan)
    check_schema(plan, "plan")


def test_schemas_without_a_draft4_form_are_left_to_jsonschema():
    assert _fast_check("range") is None  # prefixItems, propertyNames, anyOf, $ref: no draft-4 form here
    assert _draft4({"type": "array", "prefixItems": [{"type": "integer"}]}) is None
    assert _draft4({"type": "number", "exclusiveMinimum": 0}) is None  # a flag in draft 4, a bound in 2020-12
    assert _draft4({"const": True}) is None  # draft 4's enum compares with ==: True == 1
    assert _draft4({"enum": [1.5, "a"]}) is None
    assert _draft4({"type": "string", "const": 1}) is None
    assert _draft4({"items": [{"type": "integer"}]}) is None  # a tuple in draft 4, no schema in 2020-12
    assert _draft4({"const": 1}) == {"type": "integer", "enum": [1]}
    assert _draft4(load_schema("program"))["properties"]["schema_version"] == {"type": "integer", "enum": [1]}


def test_a_program_plan_with_a_float_schema_version_is_refused(corpus):
    program = copy.deepcopy(corpus[-1][1])
    program["schema_version"] = 1.0
    assert not _passes(_fast_check("program"), program)
