"""Plan files as written: the text ``json.dumps(indent=1)`` writes, byte for byte, and every
kind of plan onnxmem writes follows its shipped JSON Schema (the writers no longer check it
themselves; the readers still do)."""

from __future__ import annotations

import errno
import io
import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.core.fileio import OutputSet
from onnxmem.planning import PlanOptions, plan_model, plan_range
from onnxmem.plans import range_to_dict, read_plan, render_plan, render_range_plan, write_plan
from onnxmem.plans.jsontext import dump, dumps
from onnxmem.plans.point import PlannedTensor, check_schema
from onnxmem.plans.schema import check_schema as check_format

from .conftest import MODELS
from .helpers import chain
from .test_program import first, second

LITERALS = [
    {}, [], (), "", 0, -1, 10**30, 0.1, -0.0, 1e300, 1e-300, float("nan"), float("inf"), -float("inf"),
    True, False, None,
    {"a": [1, 2], "b": {}, "c": [[]], "d": [{}], "e": ({"f": (1,)},)},
    {"é\u2028\"\\\n\t\x00": "\x7f\U0001f600 ü", "": ""},
    {3: "int key", 2.5: "float key", True: "bool key", False: "false key", None: "null key"},
    [np.float64(1.5), np.float32(2.0).item()],
    # arrays written in one join (strings alone, integers alone) and those that look like them
    ["a", "é\n"], (3, -4, 10**20), [1, True], [True, 1], ["a", 1], [1, "a"], [1, 2.0], [[1, 2], ["x"]], [None, 1],
    # records written in one string (strings, integers, null, flat arrays) and those that look like them,
    # the same keys at several depths
    [{"n": "é\"", "s": [1, 8], "e": [], "t": ("x",), "o": None, "i": -3}, {"n": "b", "s": [2], "e": [1], "t": (),
                                                                            "o": 1, "i": 0}],
    {"a": {"n": "x", "i": 1}, "b": [{"n": "x", "i": 1}], "c": [[{"n": "x", "i": 1}]]},
    [{"n": True}, {"n": 1.5}, {"n": [1, "a"]}, {"n": [[1]]}, {"n": {}}, {"n": [None]}, {1: "x"}, {"n": "x", 2: 1}],
]


@pytest.mark.parametrize("value", LITERALS, ids=range(len(LITERALS)))
def test_dumps_writes_what_json_dumps_writes(value):
    assert dumps(value) == json.dumps(value, indent=1)


@pytest.mark.parametrize("value", [np.int64(3), np.array([1]), b"x", {1, 2}, object(), {(1, 2): 3}],
                         ids=["np.int64", "ndarray", "bytes", "set", "object", "tuple key"])
def test_dumps_refuses_what_json_dumps_refuses(value):
    with pytest.raises(TypeError):
        json.dumps(value, indent=1)
    with pytest.raises(TypeError):
        dumps({"x": [value]})


def test_tensor_records_sharing_a_shape_tuple_are_written_as_json_dumps_writes_each():
    # a shape's text is kept by the tuple's identity: equal tuples of other item types ((True, 3),
    # (2.0, 3) equal (1, 3), (2, 3)) and one tuple at two depths are each written as they are
    from onnxmem.plans.point import _tensor_record

    shared, flags, floats = (2, 3), (True, 3), (2.0, 3)
    records = [PlannedTensor(f"t{i}", "float32", shape, 24, 64 * i, 0, 1, None, None, "input", f"t{i}")
               for i, shape in enumerate((shared, (1, 3), flags, shared, floats, (), shared))]
    want = [_tensor_record(t, 2) for t in records]
    assert dumps(records) == json.dumps(want, indent=1)
    assert dumps({"deeper": [records]}) == json.dumps({"deeper": [want]}, indent=1)
    assert dumps(records) == json.dumps(want, indent=1)  # written again, from what was kept


def test_dumps_streams_a_generator_as_an_array():
    assert dumps({"a": (i for i in range(3)), "b": (i for i in ())}) == json.dumps({"a": [0, 1, 2], "b": []},
                                                                                   indent=1)


@pytest.mark.parametrize("value", LITERALS, ids=range(len(LITERALS)))
def test_dump_writes_the_bytes_of_dumps_and_leaves_the_file_open(value):
    fh = io.BytesIO()
    dump(value, fh)
    assert not fh.closed
    assert fh.getvalue() == dumps(value).encode("utf-8")


def test_dump_streams_a_text_longer_than_its_buffer_into_a_file(tmp_path):
    value = {"tensors": ({"name": f"t{i}\u00e9", "size": i * 64} for i in range(30_000)), "order": list(range(9))}
    out = tmp_path / "big.json"
    with open(out, "wb") as fh:
        dump(value, fh)
        fh.write(b"\n")
    expected = json.dumps({"tensors": [{"name": f"t{i}\u00e9", "size": i * 64} for i in range(30_000)],
                           "order": list(range(9))}, indent=1) + "\n"
    assert len(expected) > 1_000_000
    assert out.read_bytes() == expected.encode("utf-8")


def _failing_writer(error):
    def writer(fh):
        fh.write(b"{" * 3_000_000)  # past any buffer: on disk when the error comes
        raise error
    return writer


@pytest.mark.parametrize("error, expected", [
    (TypeError("Object of type set is not JSON serializable"), TypeError),
    (OSError(errno.ENOSPC, "No space left on device"), OnnxmemError),
], ids=["encoder", "disk"])
def test_a_writer_that_fails_mid_write_leaves_no_file(error, expected, tmp_path):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_bytes(b"old plan")
    outs = OutputSet()
    outs.add(new, "-o")
    outs.add(old, "--other")
    outs.put(new, b"{}")
    outs.put_writer(new, _failing_writer(error))  # the writer replaces the bytes put before
    outs.put_writer(old, lambda fh: fh.write(b"new plan"))
    with pytest.raises(expected) as info:
        outs.commit()
    if expected is OnnxmemError:
        message = str(info.value)
        assert message.startswith("cannot write -o ") and message.endswith(": No space left on device")
        assert "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]
    assert old.read_bytes() == b"old plan"


def test_put_writer_writes_every_output_at_commit(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    outs = OutputSet()
    outs.add(a, "-o")
    outs.add(b, "--annotate")
    outs.put_writer(a, lambda fh: dump({"x": (i for i in range(3))}, fh))
    outs.put(b, "text")
    assert not a.exists()
    outs.commit()
    assert a.read_text() == json.dumps({"x": [0, 1, 2]}, indent=1)
    assert b.read_text() == "text"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_plan_o_writes_the_bytes_of_render_plan(tmp_path):
    model = MODELS / "inception_block.onnx"
    out = tmp_path / "plan.json"
    out.write_text("an older plan")
    r = CliRunner().invoke(main, ["plan", str(model), "-o", str(out)])
    assert r.exit_code == 0, r.output
    written = read_plan(out)
    assert out.read_bytes() == render_plan(written)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def _written(plan, tmp_path, name="plan.json"):
    """The plan's file as ``write_plan`` writes it, checked against the old writer's text and the schema."""
    out = tmp_path / name
    write_plan(plan, out)
    text = out.read_text()
    assert text == json.dumps(plan.to_dict(), indent=1) + "\n"
    assert out.read_bytes() == render_plan(plan) == plan.to_json().encode()
    check_schema(json.loads(text))
    return out


@pytest.mark.parametrize("model, opts", [
    ("inception_block.onnx", {}),  # Concat inputs in their slice of the output: group_offset written
    ("control_flow.onnx", {}),  # If and Loop bodies: subgraphs and outside
    ("resnet_cnn.onnx", {"solver": "shared-greedy"}),  # the shared-objects form
    ("transformer_block.onnx", {"dims": {"batch": 1, "seq": 8}, "io": "external"}),
])
def test_every_written_plan_follows_the_schema_and_reads_back(model, opts, tmp_path):
    plan = plan_model(MODELS / model, PlanOptions(**opts)).plan
    assert plan.tensors
    out = _written(plan, tmp_path)
    assert read_plan(out) == plan
    if model == "inception_block.onnx":
        assert any(t.group_offset for t in plan.tensors) and '"group_offset"' in out.read_text()
    if model == "control_flow.onnx":
        assert plan.subgraphs and any(t.graph for t in plan.tensors)


def test_a_version_1_plan_is_written_without_graph_fields(tmp_path):
    plan = replace(plan_model(MODELS / "resnet_cnn.onnx", PlanOptions()).plan, schema_version=1)
    text = _written(plan, tmp_path).read_text()
    assert '"graph"' not in text and '"subgraphs"' not in text and '"outside"' not in text


def test_hostile_names_are_written_escaped_and_read_back(tmp_path):
    model = chain(2)
    for node in model.graph.node:
        node.name = f"{node.name}\u202e\"\n\x1b[31m<script>"
    model.graph.node[0].output[0] = model.graph.node[1].input[0] = "r\u00e9\x00\\"
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    plan = plan_model(path, PlanOptions()).plan
    out = _written(plan, tmp_path)
    assert out.read_bytes().isascii()
    assert read_plan(out) == plan


def test_range_and_program_plans_follow_their_schemas(tmp_path):
    path = tmp_path / "chain.onnx"
    model = chain(3)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "b"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "b"
    onnx.save(model, path)
    loaded = onnx.load(path)
    rp = plan_range(loaded, str(path), {"b": (1, 4)}, PlanOptions())
    text = render_range_plan(rp).decode()
    assert text == json.dumps(range_to_dict(rp), indent=1) + "\n"
    check_format(json.loads(text), "range", "range plan")
    a, b = tmp_path / "first.onnx", tmp_path / "second.onnx"
    onnx.save(first(), a)
    onnx.save(second(), b)
    out = tmp_path / "program.json"
    r = CliRunner().invoke(main, ["plan", str(a), str(b), "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    check_format(data, "program", "program plan")
    for k, member in enumerate(data["program"]["plans"]):
        check_schema(member, f"plan {k}")
    assert read_plan(out, "program") is not None


def _tensor(**fields):
    base = dict(name="t", dtype="float32", shape=(2, 3), size=24, offset=0, start=0, end=1, producer="n",
                producer_op="Relu", kind="activation", group="t")
    return PlannedTensor(**{**base, **fields})


@pytest.mark.parametrize("fields", [
    {}, {"group_offset": 64}, {"producer": None, "producer_op": None}, {"object": 3}, {"shape": ()},
    {"graph": "/Loop_0/body"}, {"name": "é\"\n%s\u2028", "group": "%d%%", "dtype": "\\"},
    # fields not of their declared type: written as json.dumps writes the record's dict
    {"name": 5}, {"shape": (2, True)}, {"shape": [2, 3]}, {"size": True}, {"object": 2.5}, {"producer": ("a",)},
    {"graph": None}, {"group_offset": 0.0},
], ids=str)
def test_a_tensor_written_from_its_fields_is_the_text_of_its_dict(fields, tmp_path):
    plan = plan_model(MODELS / "resnet_cnn.onnx", PlanOptions()).plan
    plan = replace(plan, tensors=(*plan.tensors, _tensor(**fields), _tensor(name="u")))
    assert plan.to_json() == json.dumps(plan.to_dict(), indent=1) + "\n"
    out = tmp_path / "p.json"
    write_plan(plan, out)
    assert out.read_text() == plan.to_json()


def test_a_tensor_json_refuses_is_refused_when_written_from_its_fields():
    plan = plan_model(MODELS / "resnet_cnn.onnx", PlanOptions()).plan
    plan = replace(plan, tensors=(_tensor(size=np.int64(24)),))
    with pytest.raises(TypeError):
        json.dumps(plan.to_dict())
    with pytest.raises(TypeError, match="not JSON serializable"):
        plan.to_json()
