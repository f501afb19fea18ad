"""`onnxmem export` and `onnxmem instantiate` against hostile names and hand-edited plans.

Each test builds a real model, plans it with the CLI, then exports: the C header
is compiled and run, the TFLM table read back, the refusals checked to be one
line with no output file left behind.
"""

from __future__ import annotations

import json
import re
import shutil
import struct

import onnx
import pytest
from onnx import TensorProto, helper

from onnxmem.export.c_header import MAX_C_STRING, c_identifiers

from .conftest import MODELS
from .helpers import make_model
from .test_export import check_c_output, compile_and_run, print_program, run

CC = shutil.which("cc")


def relu_chain(names: list[str]) -> onnx.ModelProto:
    """x -> Relu -> ... -> y through one tensor per name."""
    nodes, prev = [], "x"
    for i, name in enumerate(names):
        nodes.append(helper.make_node("Relu", [prev], [name], name=f"relu{i}"))
        prev = name
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="last"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    return make_model(nodes, [x], [y])


def plan_file(tmp_path, model: onnx.ModelProto, *flags: str):
    mpath, ppath = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(model, mpath)
    r = run("plan", str(mpath), "-o", str(ppath), *flags)
    assert r.exit_code == 0, r.output
    return mpath, ppath


def refused(r, code: int) -> str:
    assert r.exit_code == code, r.output
    assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    return r.output


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_header_names_longer_than_a_c99_string_literal(tmp_path):
    """gcc -pedantic refuses a string literal past 4,095 bytes: such names are char arrays."""
    names = ["a" * 5000, "b" * MAX_C_STRING, "\u00e9?" * 1400, "??/*/\n" * 800]
    _, ppath = plan_file(tmp_path, relu_chain(names))
    out = tmp_path / "plan.h"
    assert run("export", str(ppath), "--format", "c", "-o", str(out)).exit_code == 0
    data = json.loads(ppath.read_text())
    ids = c_identifiers([t["name"] for t in data["tensors"]])
    check_c_output(compile_and_run(tmp_path, out.read_bytes(), print_program(ids)), data)
    assert out.read_bytes().count(b"static const char onnxmem_name_") == 3  # "b" * 4095 stays a literal


@pytest.mark.parametrize("how", ["nul", "surrogate"])
def test_c_header_refuses_a_name_no_c_string_holds(tmp_path, how):
    """A NUL byte ends a C string (the table would name another tensor); a lone surrogate is no UTF-8."""
    _, ppath = plan_file(tmp_path, relu_chain(["a\x00b" if how == "nul" else "ok"]))
    if how == "surrogate":
        data = json.loads(ppath.read_text())
        data["tensors"][1]["name"] = "\ud800"
        ppath.write_text(json.dumps(data))
    out = tmp_path / "plan.h"
    msg = refused(run("export", str(ppath), "--format", "c", "-o", str(out)), 1)
    # a lone surrogate: the plan reader refuses the file before any format sees the name
    assert ("'a\\x00b' holds a NUL byte" in msg) if how == "nul" else ("'\\ud800' holds a lone UTF-16 surrogate" in msg)
    assert not out.exists()
    if how == "nul":  # the formats that name tensors otherwise still export it
        assert run("export", str(ppath), "--format", "tflm", "-o", str(tmp_path / "t.bin")).exit_code == 0


def test_tflm_with_the_model_leaves_out_a_loops_region(tmp_path):
    """The shipped control-flow model's plan reserves a region for its Loop body (no model value):
    the table lists the main graph's values, as docs/export.md shows for this model."""
    path = MODELS / "control_flow.onnx"
    ppath = tmp_path / "p.json"
    assert run("plan", str(path), "-o", str(ppath), "--solver", "exact", "--order", "file").exit_code == 0
    data = json.loads(ppath.read_text())
    assert any(t["kind"] == "region" for t in data["tensors"])
    out = tmp_path / "plan.bin"
    r = run("export", str(ppath), "--format", "tflm", "-o", str(out), "--model", str(path))
    assert r.exit_code == 0, r.output
    raw = out.read_bytes()
    version, subgraph, n = struct.unpack_from("<3i", raw)
    entries = list(struct.unpack_from(f"<{n}i", raw, 12))
    model = onnx.load(path)
    names = (["image"] + [i.name for i in model.graph.initializer]
             + [o for node in model.graph.node for o in node.output if o])
    placed = {t["name"]: t["offset"] for t in data["tensors"] if not t["graph"] and t["kind"] != "region"}
    assert (version, subgraph, n, len(raw)) == (0, 0, 18, 84)
    assert entries == [placed.get(name, -1) for name in names]


def _duplicated(data: dict, how: str) -> dict:
    tensors = data["tensors"]
    if how == "repeated":  # the last tensor listed twice
        tensors.append(dict(tensors[-1]))
    else:  # a tensor renamed as another: one name, two places
        tensors[2]["name"] = tensors[1]["name"]
    return data


@pytest.mark.parametrize("how", ["repeated", "renamed"])
@pytest.mark.parametrize("fmt", ["json", "c", "tflm"])
def test_a_tensor_named_twice_is_not_exported_without_the_model(tmp_path, fmt, how):
    _, ppath = plan_file(tmp_path, relu_chain(["t0", "t1"]))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_duplicated(json.loads(ppath.read_text()), how)))
    out = tmp_path / "out"
    msg = refused(run("export", str(bad), "--format", fmt, "-o", str(out)), 3)
    assert "appears twice in the plan" in msg
    assert not out.exists()


def range_plan(tmp_path, dims: list[str]):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="r0"), helper.make_node("Relu", ["t"], ["y"], name="r1")]
    mpath, ppath = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(make_model(nodes, [x], [y]), mpath)
    flags = [f for d in dims if isinstance(d, str) for f in ("--dim", f"{d}=1:4")]
    assert run("plan", str(mpath), "-o", str(ppath), *flags).exit_code == 0
    return ppath


def _refused_range(tmp_path, data: dict, point: list[str], words: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out, inst = tmp_path / "out.h", tmp_path / "inst.json"
    assert words in refused(run("export", str(bad), "--format", "c", "-o", str(out)), 3)
    assert words in refused(run("instantiate", str(bad), *point, "-o", str(inst)), 3)
    assert not out.exists() and not inst.exists()


@pytest.mark.parametrize("how", ["repeated", "renamed"])
def test_a_range_plan_naming_a_tensor_twice_is_refused(tmp_path, how):
    data = json.loads(range_plan(tmp_path, ["batch", 16]).read_text())
    for piece in data["range"]["pieces"]:
        _duplicated(piece, how)
    _refused_range(tmp_path, data, ["--dim", "batch=2"], "appears twice")


def test_a_range_plan_past_64_bits_on_its_box_is_refused(tmp_path):
    """Widened by hand to 2^31 x 2^31, a tensor of 4*a*b bytes reaches 2^64: the header's long long
    arithmetic would overflow."""
    data = json.loads(range_plan(tmp_path, ["a", "b"]).read_text())
    r = data["range"]
    r["box"] = {"a": [1, 2**31], "b": [1, 2**31]}
    r["pieces"] = r["pieces"][:1]
    r["pieces"][0]["box"] = dict(r["box"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / "out.h"
    msg = refused(run("export", str(bad), "--format", "c", "-o", str(out)), 1)
    assert "the size of tensor 'x' may reach 18,446,744,073,709,551,616 bytes" in msg and "long long" in msg
    assert not out.exists()
    inst = tmp_path / "inst.json"  # the point a=2, b=2 is small: its concrete plan is exact
    assert run("instantiate", str(bad), "--dim", "a=2", "--dim", "b=2", "-o", str(inst)).exit_code == 0


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_identifiers_equal_in_their_first_48_characters(tmp_path):
    """``ONNXMEM_OFFSET_`` (15) + 48 = 63, the characters of an identifier C99 compares: a suffix
    takes the place of the last characters, never goes past them."""
    long = "p" * 60
    names = [long + "a", long + "b", long + ".c", "p" * 47 + "_2", "p" * 46 + "_2"]
    ids = c_identifiers(names)
    assert all(len(i) <= 48 for i in ids) and len({i[:48] for i in ids}) == len(ids)
    assert ids[:3] == ["p" * 48, "p" * 46 + "_2", "p" * 46 + "_3"]
    _, ppath = plan_file(tmp_path, relu_chain(names))
    out = tmp_path / "plan.h"
    assert run("export", str(ppath), "--format", "c", "-o", str(out)).exit_code == 0
    data = json.loads(ppath.read_text())
    check_c_output(compile_and_run(tmp_path, out.read_bytes(), print_program(c_identifiers(
        [t["name"] for t in data["tensors"]]))), data)


def test_c_identifiers_of_many_names_that_sanitise_alike():
    """20,000 names that all become ``a`` (each a different CJK character, made ``_`` and dropped at
    the end): unique, short, in order."""
    ids = c_identifiers(["a" + chr(0x4E00 + k) for k in range(20_000)])
    assert ids[:3] == ["a", "a_2", "a_3"] and ids[-1] == "a_20000"
    assert len(set(ids)) == len(ids)


#: tensor names whose identifiers held ``__`` (C++ reserves such names) or began with ``_``
RESERVED_MAKERS = ["_Foo", "a__b", "x/", "x.", "__init__", "_", "\u00e9_x", "a.-b", "_2", "ok_", "ok", "Z" * 47 + "_.q",
                   "Z" * 47 + "_.r"]


@pytest.mark.skipif(CC is None, reason="no C compiler")
@pytest.mark.parametrize("prefix", [None, "enc"])
def test_c_identifiers_from_hostile_names_are_never_reserved(tmp_path, prefix):
    """``_Foo`` gave ``ONNXMEM_OFFSET__Foo``, ``a.-b`` gave ``a__b``, ``x/`` then ``x.`` gave ``x_`` and
    ``x__2`` (the suffix after a trailing ``_``), and a cut could end in ``_`` before one: names
    holding ``__``, which C++ reserves (the header is C++ too). Every run of ``_`` is one now and
    none is at either end: no defined name holds ``__`` or starts with ``_``; all stay unique."""
    _, ppath = plan_file(tmp_path, relu_chain(RESERVED_MAKERS))
    out = tmp_path / "plan.h"
    assert run("export", str(ppath), "--format", "c", "-o", str(out),
               *(["--prefix", prefix] if prefix else [])).exit_code == 0
    data = json.loads(ppath.read_text())
    up = (prefix or "onnxmem").upper()
    defined = re.findall(r"^#define (\w+)", out.read_text(), flags=re.M)
    tensors = [d for d in defined if d.startswith((f"{up}_OFFSET_", f"{up}_SIZE_"))]
    assert len(tensors) == len(set(tensors)) == 2 * len(data["tensors"])
    assert [d for d in defined if "__" in d or d.startswith("_")] == []
    assert "ONNXMEM_OFFSET_Foo" in defined if prefix is None else "ENC_OFFSET_Foo" in defined
    ids = c_identifiers([t["name"] for t in data["tensors"]])
    assert all(re.fullmatch(r"[A-Za-z0-9]+(_[A-Za-z0-9]+)*", i) for i in ids), ids
    if prefix is None:
        check_c_output(compile_and_run(tmp_path, out.read_bytes(), print_program(ids)), data)


def sibling_bodies() -> onnx.ModelProto:
    """An If whose two branches each compute a tensor named ``tmp`` (legal: sibling scopes)."""
    def body(op: str, out: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], ["tmp"], name=f"{op}_a"),
                                  helper.make_node("Neg", ["tmp"], [out], name=f"{op}_neg")],
                                 f"b_{op}", [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 16])])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="rs", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=body("Relu", "o1"),
                              else_branch=body("Sigmoid", "o2"))]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    return make_model(nodes, [x], [y], inits=[zero])


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_table_tells_apart_tensors_of_one_name_in_sibling_bodies(tmp_path):
    _, ppath = plan_file(tmp_path, sibling_bodies())
    data = json.loads(ppath.read_text())
    tmp = [t["graph"] for t in data["tensors"] if t["name"] == "tmp"]
    assert sorted(tmp) == ["if/else_branch", "if/then_branch"]
    out = tmp_path / "plan.h"
    assert run("export", str(ppath), "--format", "c", "-o", str(out)).exit_code == 0
    body = ('{ size_t i; for (i = 0; i < ONNXMEM_TENSOR_COUNT; i++) printf("%s|%s|%llu\\n", '
            "onnxmem_tensors[i].name, onnxmem_tensors[i].graph, onnxmem_tensors[i].offset); }\n")
    rows = compile_and_run(tmp_path, out.read_bytes(), body).splitlines()
    assert rows == [f"{t['name']}|{t['graph']}|{t['offset']}" for t in data["tensors"]]


@pytest.mark.parametrize("where", ["tensor", "metadata"])
def test_a_model_with_a_name_that_is_not_utf8_is_refused(tmp_path, where):
    """ONNX's proto2 parser keeps a string that is not UTF-8 as bytes: refused when the model is
    read, in one line, by plan and by export alike (no plan file, no output)."""
    model = relu_chain(["ZZZQ"])
    if where == "metadata":
        helper.set_model_props(model, {"ZZZQ": "v"})
    raw = model.SerializeToString()
    assert b"ZZZQ" in raw
    mpath = tmp_path / "bad.onnx"
    mpath.write_bytes(raw.replace(b"ZZZQ", b"\xff\xfeZQ"))
    ppath = tmp_path / "p.json"
    msg = refused(run("plan", str(mpath), "-o", str(ppath)), 1)
    field = "NodeProto.input" if where == "tensor" else "StringStringEntryProto.key"
    assert f"holds a string that is not text: {field} is b'\\xff\\xfeZQ', not UTF-8" in msg
    assert not ppath.exists()
    _, good = plan_file(tmp_path, relu_chain(["ZZZQ"]))
    out = tmp_path / "out.onnx"
    assert "not UTF-8" in refused(run("export", str(good), "--format", "onnx", "-o", str(out),
                                           "--model", str(mpath)), 1)
    assert not out.exists()


def test_a_range_plan_whose_pieces_plan_other_tensors_is_refused(tmp_path):
    """The header's functions are per tensor of piece 0: a tensor renamed in piece 1 alone would be
    missing from it, and piece 0's would read -1 (outside the box) at piece 1's points."""
    data = json.loads(range_plan(tmp_path, ["a", "b"]).read_text())
    assert len(data["range"]["pieces"]) > 1
    data["range"]["pieces"][1]["tensors"][1]["name"] = "zz"
    _refused_range(tmp_path, data, ["--dim", "a=1", "--dim", "b=1"], "every piece plans the same tensors")


def test_the_strict_parse_checks_every_string_and_the_walk_names_it():
    """check_text parses the file again with UTF-8 checked (model.limits._strict_model_class): it
    refuses what onnx's own parser keeps as bytes, accepts the model as written, and the walk
    after it names the field."""
    from onnxmem.core.errors import ModelError
    from onnxmem.model.limits import _strict_model_class, check_text

    strict = _strict_model_class()
    assert strict is not None
    model = relu_chain(["ZZZQ"])
    raw = model.SerializeToString()
    assert strict.FromString(raw).SerializeToString() == raw
    bad = raw.replace(b"ZZZQ", b"\xff\xfeZQ")
    parsed = onnx.ModelProto.FromString(bad)
    with pytest.raises(Exception, match="UTF-8"):
        strict.FromString(bad)
    check_text(model, "m", raw)
    with pytest.raises(ModelError, match="NodeProto.input is b'\\\\xff\\\\xfeZQ', not UTF-8"):
        check_text(parsed, "m", bad)
