"""`onnxmem export`: every format on real plans of real models, read back by its consumer.

The C header is compiled with the system C compiler and run; the TFLM table is
read back with ``struct``; the annotated model runs in onnxruntime.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.export import FORMATS, export_plan, register
from onnxmem.export.annotate import annotate_model, plan_from_model
from onnxmem.export.c_header import c_identifiers
from onnxmem.export.tflm import METADATA_NAME, value_order
from onnxmem.plans import read_plan

from .conftest import MODELS
from .helpers import chain, make_model, vi

CC = shutil.which("cc")
CXX = shutil.which("c++")

#: names a model may carry that must not break a header: newlines, comment ends,
#: quotes, backslashes, trigraphs, non-ASCII, names equal but for punctuation
HOSTILE = ["a\nb", "x*/y", "/* evil */", 'q"uote', "back\\", "??/", "ünï→", "a.b", "a-b", "a_b",
           "a_b_2", "#define X 1", "9lives"]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def hostile_model() -> onnx.ModelProto:
    """x -> Relu -> ... -> y through one tensor per hostile name, plus a weight."""
    nodes, prev = [], "x"
    for i, name in enumerate(HOSTILE):
        nodes.append(helper.make_node("Relu", [prev], [name], name=f"relu{i}"))
        prev = name
    w = numpy_helper.from_array(np.ones((1, 16), np.float32), "w")
    nodes.append(helper.make_node("Add", [prev, "w"], ["y"], name="add"))
    return make_model(nodes, [vi("x", [1, 16])], [vi("y", [1, 16])], inits=[w])


def planned(tmp_path, model: onnx.ModelProto, *flags: str):
    """Save ``model``, plan it with the CLI, return (model path, plan path, plan)."""
    mpath, ppath = tmp_path / "m.onnx", tmp_path / "m.plan.json"
    onnx.save(model, mpath)
    r = run("plan", str(mpath), "-o", str(ppath), "--alignment", "16", *flags)
    assert r.exit_code == 0, r.output
    return mpath, ppath, read_plan(ppath)


def export(tmp_path, ppath, fmt: str, *extra: str):
    out = tmp_path / f"out{FORMATS[fmt].suffix}"
    r = run("export", str(ppath), "--format", fmt, "-o", str(out), *extra)
    assert r.exit_code == 0, r.output
    assert f"-> {out}" in r.output
    return out


def test_json_is_the_plan_file_byte_for_byte(tmp_path):
    _, ppath, _ = planned(tmp_path, chain(4))
    out = export(tmp_path, ppath, "json")
    assert out.read_bytes() == ppath.read_bytes()


def test_onnx_is_the_annotated_model_and_runs(tmp_path):
    model = hostile_model()
    mpath, ppath, plan = planned(tmp_path, model)
    out = export(tmp_path, ppath, "onnx", "--model", str(mpath))
    # what plan --annotate writes for this plan
    assert out.read_bytes() == annotate_model(onnx.load(mpath), plan).SerializeToString()
    exported = onnx.load(out)
    assert plan_from_model(exported) == plan
    assert [n.name for n in exported.graph.node] == list(plan.order)
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    want = ort.InferenceSession(str(mpath), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def compile_and_run(tmp_path, header: bytes, body: str) -> str:
    (tmp_path / "plan.h").write_bytes(header)
    src = tmp_path / "main.c"
    src.write_text('#include <stdio.h>\n#include "plan.h"\nint main(void) {\n' + body + "return 0;\n}\n")
    exe = tmp_path / "main"
    cc = subprocess.run([CC, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-o", str(exe),
                         str(src)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def print_program(ids: list[str]) -> str:
    """C statements printing the totals, every #define and every table row (names in hex)."""
    lines = [
        'printf("arena %llu\\n", (unsigned long long)ONNXMEM_ARENA_SIZE);',
        'printf("alignment %llu\\n", (unsigned long long)ONNXMEM_ALIGNMENT);',
        'printf("schema %d\\n", ONNXMEM_SCHEMA_VERSION);',
        'printf("count %llu\\n", (unsigned long long)ONNXMEM_TENSOR_COUNT);',
    ]
    for i, ident in enumerate(ids):
        lines.append(f'printf("define {i} %llu %llu\\n", (unsigned long long)ONNXMEM_OFFSET_{ident}, '
                     f"(unsigned long long)ONNXMEM_SIZE_{ident});")
    lines.append("{ size_t i; for (i = 0; i < ONNXMEM_TENSOR_COUNT; i++) {")
    lines.append("  const unsigned char *p = (const unsigned char *)onnxmem_tensors[i].name;")
    lines.append('  printf("row %llu %llu name=", onnxmem_tensors[i].offset, onnxmem_tensors[i].size);')
    lines.append('  while (*p) printf("%02x", *p++);')
    lines.append('  printf("\\n"); } }')
    return "\n".join(lines) + "\n"


def check_c_output(stdout: str, data: dict) -> None:
    lines = stdout.splitlines()
    tensors = data["tensors"]
    assert lines[:4] == [f"arena {data['arena_size']}", f"alignment {data['alignment']}",
                         f"schema {data['schema_version']}", f"count {len(tensors)}"]
    defines = [ln for ln in lines if ln.startswith("define ")]
    rows = [ln for ln in lines if ln.startswith("row ")]
    assert defines == [f"define {i} {t['offset']} {t['size']}" for i, t in enumerate(tensors)]
    assert rows == [f"row {t['offset']} {t['size']} name={t['name'].encode().hex()}" for t in tensors]


@pytest.mark.skipif(CC is None, reason="no C compiler")
@pytest.mark.parametrize("path", sorted(MODELS.glob("*.onnx"))[:3], ids=lambda p: p.stem)
def test_c_header_compiles_and_matches_the_json(tmp_path, path):
    ppath = tmp_path / "p.json"
    dims = ["--dim", "batch=1", "--dim", "seq=32"] if path.name == "transformer_block.onnx" else []
    assert run("plan", str(path), "-o", str(ppath), *dims).exit_code == 0
    data = json.loads(ppath.read_text())
    out = export(tmp_path, ppath, "c")
    ids = c_identifiers([t["name"] for t in data["tensors"]])
    check_c_output(compile_and_run(tmp_path, out.read_bytes(), print_program(ids)), data)
    assert data["model"]["sha256"] in out.read_text()


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_header_with_hostile_names(tmp_path):
    _, ppath, plan = planned(tmp_path, hostile_model())
    data = json.loads(ppath.read_text())
    names = [t["name"] for t in data["tensors"]]
    assert set(HOSTILE) <= set(names)
    out = export(tmp_path, ppath, "c")
    text = out.read_bytes().decode("ascii")  # non-ASCII names only as escapes
    ids = c_identifiers(names)
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[A-Za-z0-9_]+", i) for i in ids)
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)  # string literals out
    comments = re.findall(r"/\*.*?\*/", code, flags=re.S)
    assert comments and not any(frag in c for c in comments for frag in ("evil", "uote", "*/y", "lives", "a.b", "back"))
    rest = re.sub(r"/\*.*?\*/", "", code, flags=re.S)
    assert "*/" not in rest and "/*" not in rest
    defines = [ln for ln in rest.splitlines() if ln.startswith("#define")]
    assert all(re.fullmatch(r"#define ONNXMEM_[A-Za-z0-9_]+( .*)?", ln) for ln in defines)
    assert len([d for d in defines if d.startswith(("#define ONNXMEM_OFFSET_", "#define ONNXMEM_SIZE_"))]) == 2 * len(names)
    check_c_output(compile_and_run(tmp_path, out.read_bytes(), print_program(ids)), data)
    assert len(data["tensors"]) == len(plan.tensors)
    if CXX is not None:  # the same header is valid C++
        src = tmp_path / "main.cpp"
        src.write_text('#include "plan.h"\nint main() { return onnxmem_tensors[0].size == 0; }\n')
        cxx = subprocess.run([CXX, "-std=c++11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only",
                              str(src)], capture_output=True, text=True, cwd=tmp_path)
        assert cxx.returncode == 0, cxx.stderr


def test_c_identifiers_are_unique_identifiers():
    names = ["a.b", "a-b", "a_b", "a_b_2", "", "", "x" * 100, "x" * 101, "ü", "é"]
    ids = c_identifiers(names)
    assert len(set(ids)) == len(ids)
    assert ids[:6] == ["a_b", "a_b_2", "a_b_3", "a_b_2_2", "tensor", "tensor_2"]
    assert all(re.fullmatch(r"[A-Za-z0-9_]{1,60}", i) for i in ids)


def tflm_entries(raw: bytes) -> tuple[int, int, list[int]]:
    version, subgraph, n = struct.unpack_from("<3i", raw)
    assert len(raw) == 4 * (3 + n)
    return version, subgraph, list(struct.unpack_from(f"<{n}i", raw, 12))


def test_tflm_table_in_plan_order(tmp_path):
    _, ppath, _ = planned(tmp_path, hostile_model())
    data = json.loads(ppath.read_text())
    version, subgraph, offsets = tflm_entries(export(tmp_path, ppath, "tflm").read_bytes())
    assert (version, subgraph) == (0, 0)
    assert offsets == [t["offset"] for t in data["tensors"]]


def test_tflm_table_in_model_value_order_marks_unplaced(tmp_path):
    model = hostile_model()
    mpath, ppath, plan = planned(tmp_path, model, "--io", "external")
    data = json.loads(ppath.read_text())
    version, subgraph, offsets = tflm_entries(
        export(tmp_path, ppath, "tflm", "--model", str(mpath)).read_bytes())
    names = ["x", "w", *HOSTILE, "y"]  # inputs, weights, node outputs in file order
    assert value_order(plan, model) == names
    placed = {t["name"]: t["offset"] for t in data["tensors"]}
    assert offsets == [placed.get(n, -1) for n in names]
    assert offsets[0] == offsets[1] == offsets[-1] == -1  # external input, weight, external output
    assert set(placed) <= set(names) and offsets.count(-1) == len(names) - len(placed)
    assert METADATA_NAME == "OfflineMemoryAllocation"


def test_onnx_and_tflm_refuse_a_plan_for_another_model(tmp_path):
    _, ppath, _ = planned(tmp_path, hostile_model())
    other = tmp_path / "other.onnx"
    onnx.save(chain(2), other)
    for fmt in ("onnx", "tflm"):
        r = run("export", str(ppath), "--format", fmt, "-o", str(tmp_path / "o"), "--model", str(other))
        assert r.exit_code == 1
        assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
        assert "was made for a model with sha256" in r.output and "plan this model again" in r.output
    assert not (tmp_path / "o").exists()


def test_export_errors_are_one_line(tmp_path):
    _, ppath, _ = planned(tmp_path, chain(2))
    r = run("export", str(ppath), "--format", "onnx", "-o", str(tmp_path / "a.onnx"))
    assert r.exit_code == 1 and "pass --model MODEL" in r.output and r.output.count("\n") == 1
    r = run("export", str(ppath), "--format", "json", "-o", str(tmp_path / "a.json"), "--model", "m.onnx")
    assert r.exit_code == 2 and "does not read the model" in r.output
    r = run("export", str(ppath), "--format", "yaml", "-o", str(tmp_path / "a.yaml"))
    assert r.exit_code == 2 and "onnxmem list formats" in r.output
    r = run("export", str(ppath), "--format", "c", "-o", str(tmp_path / "no" / "a.h"))
    assert r.exit_code == 1 and "does not exist" in r.output and r.output.count("\n") == 1
    r = run("export", str(tmp_path / "missing.json"), "--format", "c", "-o", str(tmp_path / "a.h"))
    assert r.exit_code == 1 and "does not exist" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.plan.json"]


def test_onnx_with_external_weights_goes_beside_the_model(tmp_path):
    model = hostile_model()
    w = numpy_helper.from_array(np.ones((1, 16), np.float32), "w")
    del model.graph.initializer[:]
    model.graph.initializer.append(w)
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(model, src / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    ppath = tmp_path / "p.json"
    assert run("plan", str(src / "m.onnx"), "-o", str(ppath)).exit_code == 0
    r = run("export", str(ppath), "--format", "onnx", "-o", str(tmp_path / "a.onnx"), "--model",
            str(src / "m.onnx"))
    assert r.exit_code == 1 and "write the onnx output into" in r.output
    r = run("export", str(ppath), "--format", "onnx", "-o", str(src / "a.onnx"), "--model", str(src / "m.onnx"))
    assert r.exit_code == 0, r.output
    x = np.ones((1, 16), np.float32)
    (y,) = ort.InferenceSession(str(src / "a.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(y, x + 1)


def test_adding_a_format_is_one_registration(tmp_path):
    @register("sizes-test", "one line per tensor: name and size", suffix=".txt")
    def sizes(plan, model):
        return "".join(f"{t.name} {t.size}\n" for t in plan.tensors).encode()

    try:
        _, ppath, plan = planned(tmp_path, chain(3))
        out = export(tmp_path, ppath, "sizes-test")
        assert out.read_text() == "".join(f"{t.name} {t.size}\n" for t in plan.tensors)
        assert "sizes-test" in run("list", "formats").output
        with pytest.raises(ValueError, match="registered twice"):
            register("sizes-test", "again", suffix=".txt")(sizes)
    finally:
        del FORMATS["sizes-test"]


def test_export_plan_library_errors(tmp_path):
    _, _, plan = planned(tmp_path, chain(2))
    with pytest.raises(OnnxmemError, match="onnxmem list formats"):
        export_plan(plan, "nope")
    with pytest.raises(OnnxmemError, match="pass --model MODEL"):
        export_plan(plan, "onnx")
    assert export_plan(plan, "json") == plan.to_json().encode()


# -- no unsafe plan leaves through export ------------------------------------------------


def _corrupt(data: dict, how: str) -> dict:
    """``data`` (plan JSON of chain(4), planned --inplace off) broken as ``how`` says."""
    by = {t["name"]: t for t in data["tensors"]}
    if how == "same-offset":  # t0 is read by the node that writes t1: both live at that step
        by["t1"]["offset"] = by["t0"]["offset"]
    elif how == "past-the-end":
        by["y"]["offset"] = data["arena_size"]
    return data


@pytest.mark.parametrize("how", ["same-offset", "past-the-end"])
@pytest.mark.parametrize("fmt,with_model", [("json", False), ("c", False), ("tflm", False), ("tflm", True),
                                            ("onnx", True)])
def test_a_wrong_plan_is_not_exported(tmp_path, fmt, with_model, how):
    mpath, ppath, _ = planned(tmp_path, chain(4), "--inplace", "off")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_corrupt(json.loads(ppath.read_text()), how)))
    static = run("verify", str(mpath), "--plan", str(bad), "--static-only")
    assert static.exit_code == 3, static.output
    out = tmp_path / f"out{FORMATS[fmt].suffix}"
    r = run("export", str(bad), "--format", fmt, "-o", str(out), *(["--model", str(mpath)] if with_model else []))
    assert r.exit_code == 3, r.output
    assert r.output.startswith("error: the plan is wrong: ") and r.output.count("\n") == 1, r.output
    assert ("share bytes" in r.output or "overlap" in r.output) if how == "same-offset" else "arena" in r.output
    assert not out.exists()


def test_the_plan_alone_check_accepts_every_real_plan(tmp_path):
    """Plans as the planner makes them (alias groups, in-place ops, bodies) pass the check without the model."""
    from onnxmem.proof import prove_plan_alone

    for path in sorted(MODELS.glob("*.onnx")):
        out = tmp_path / f"{path.stem}.json"
        r = run("plan", str(path), "-o", str(out))
        if r.exit_code == 0:
            assert prove_plan_alone(read_plan(out, "point")) == [], path.name


def test_the_plan_alone_check_holds_each_size_to_its_dtype_and_shape(tmp_path):
    """A plan whose sizes, offsets and arena were all divided by four still has aligned, disjoint
    buffers inside its arena; each tensor's dtype and shape give four times its size, so
    ``export`` and ``show`` refuse it without the model, and write nothing."""
    _, ppath, plan = planned(tmp_path, chain(3, (1, 64)))
    doc = json.loads(ppath.read_text())
    for t in doc["tensors"]:
        t["size"] //= 4
        t["offset"] //= 4
    for key in ("arena_size", "lower_bound", "naive_size"):
        doc[key] //= 4
    doc["alignment"] = 4
    quarter = tmp_path / "quarter.json"
    quarter.write_text(json.dumps(doc))
    out = tmp_path / "q.h"
    for args in (("export", str(quarter), "--format", "c", "-o", str(out)), ("show", str(quarter))):
        r = CliRunner().invoke(main, list(args))
        assert r.exit_code == 3, r.output
        assert "has size 64 B but its dtype and shape give 256 B (float32[1, 64])" in r.stderr
        assert r.stderr.count("\n") == 1
    assert not out.exists()


def test_the_plan_alone_check_takes_a_value_written_in_place_over_an_ifs_output(tmp_path):
    """An If whose branches write its output inside its region (outputs: inside), read by a Relu
    that writes over it in place: the output, its reader's output and the region are one alias
    group, one buffer. The plan alone's check judged the reader's output apart from the region's
    buffer and refused the plan that verify proves."""
    def branch(name: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Relu", ["x"], [f"{name}_t"], name=f"b{name}"),
                                  helper.make_node("Relu", [f"{name}_t"], [name], name=f"c{name}")],
                                 name, [], [vi(name, (1, 64))])

    model = make_model(
        [helper.make_node("Relu", ["x"], ["x1"], name="pre"),
         helper.make_node("If", ["c"], ["o"], name="If0", then_branch=branch("t"), else_branch=branch("e")),
         helper.make_node("Relu", ["o"], ["y"], name="post")],
        [vi("x", (1, 64)), vi("c", [], onnx.TensorProto.BOOL)], [vi("y", (1, 64))])
    mpath, ppath, plan = planned(tmp_path, model)
    by = {t.name: t for t in plan.tensors if not t.graph}
    assert by["y"].group == by["o"].group == next(t.group for t in plan.tensors if t.kind == "region")
    from onnxmem.proof import prove_plan_alone

    assert prove_plan_alone(plan) == []
    assert run("show", str(ppath)).exit_code == 0
    export(tmp_path, ppath, "c")
    r = run("verify", str(mpath), "--plan", str(ppath), "--static-only")
    assert r.exit_code == 0, r.output


def test_the_plan_alone_check_knows_every_dtype_the_planner_sizes():
    """The dtype table of the plan alone's proof (no onnx) is the planner's, by name."""
    from onnxmem.core.sizes import DTYPE_BITS, dense_bytes
    from onnxmem.model import DTYPES

    assert DTYPE_BITS == dict(DTYPES.values())
    assert dense_bytes("int4", (3, 3)) == 5 and dense_bytes("string", (2,)) is None
    assert dense_bytes("float16", ()) == 2 and dense_bytes("opaque", (4,)) is None


def test_tflm_refuses_offsets_past_int32_and_names_the_c_export(tmp_path):
    """Four 2 GiB tensors (no bytes are allocated to plan them): offsets reach 2^31 and more."""
    _, ppath, plan = planned(tmp_path, chain(4, (1, 2**29)), "--inplace", "off")
    assert max(t.offset for t in plan.tensors) >= 2**31
    out = tmp_path / "out.bin"
    r = run("export", str(ppath), "--format", "tflm", "-o", str(out))
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "int32, at most 2,147,483,647" in r.output and "--format c" in r.output
    assert not out.exists()
    assert export(tmp_path, ppath, "c").read_bytes().count(b"ONNXMEM_OFFSET_") == len(plan.tensors)
