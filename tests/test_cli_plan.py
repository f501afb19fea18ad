"""`onnxmem plan` through click's CliRunner, on real files."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.problem import Buffer, Problem, validate
from onnxmem.export.annotate import plan_from_model
from onnxmem.plans import check_schema, read_plan

from .conftest import LIGHT_MODELS, SHIPPED, SHIPPED_DIMS
from .helpers import chain, make_model, vi


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def dim_flags(path) -> list[str]:
    out: list[str] = []
    for k, v in SHIPPED_DIMS.get(path.name, {}).items():
        out += ["--dim", f"{k}={v}"]
    return out


def problem_of(plan, graph: str = "") -> tuple[Problem, list[int]]:
    """The problem of one graph level (each level has steps of its own)."""
    groups: dict[str, Buffer] = {}
    offs: dict[str, int] = {}
    for t in plan.tensors:
        if t.graph != graph:
            continue
        b = groups.get(t.group)
        s = min(t.start, b.start) if b else t.start
        e = max(t.end, b.end) if b else t.end
        size = max(t.size, b.size) if b else t.size
        groups[t.group] = Buffer(t.group, s, e, size)
        offs[t.group] = t.offset
    p = Problem(tuple(groups.values()))
    return p, [offs[b.id] for b in p.buffers]


@pytest.mark.parametrize("path", LIGHT_MODELS + SHIPPED, ids=lambda p: p.stem)
def test_real_models_plan_and_validate(path, tmp_path):
    out = tmp_path / "plan.json"
    r = run("plan", str(path), "-o", str(out), *dim_flags(path))
    assert r.exit_code == 0, r.output
    assert "lower bound" in r.output and "arena" in r.output
    plan = read_plan(out)  # schema-checked
    check_schema(json.loads(out.read_text()))
    for graph in {t.graph for t in plan.tensors}:
        p, offs = problem_of(plan, graph)
        assert validate(p, offs) == []
    assert plan.lower_bound <= plan.arena_size <= plan.naive_size
    assert all(t.offset % plan.alignment == 0 for t in plan.tensors)


def test_greedy_reaches_the_bound_on_eight_of_nine(tmp_path):
    at_bound = []
    for path in LIGHT_MODELS:
        r = run("plan", str(path), "--solver", "greedy", "--order", "file", "--json")
        data = json.loads(r.output)
        at_bound.append(data["arena_size"] == data["lower_bound"])
    assert sum(at_bound) >= 8


def test_annotated_model_checks_runs_and_carries_the_plan(tmp_path, models_dir):
    src = models_dir / "resnet_cnn.onnx"
    ann = tmp_path / "annotated.onnx"
    r = run("plan", str(src), "--annotate", str(ann))
    assert r.exit_code == 0, r.output
    model = onnx.load(str(ann))
    onnx.checker.check_model(model)
    plan = plan_from_model(model)
    assert plan is not None
    assert [n.name for n in model.graph.node] == list(plan.order)
    props = {p.key: p.value for p in model.metadata_props}
    assert props["onnxmem.arena_size"] == str(plan.arena_size)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    b = ort.InferenceSession(str(ann), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(a, b, rtol=1e-5)


def test_json_output_and_dims(models_dir):
    r = run("plan", str(models_dir / "transformer_block.onnx"), "--dim", "batch=2", "--dim", "seq=16", "--json")
    data = json.loads(r.output)
    assert data["dims"] == {"batch": 2, "seq": 16}
    out = next(t for t in data["tensors"] if t["name"] == "output")
    assert out["shape"] == [2, 16, 64] and out["size"] == 2 * 16 * 64 * 4
    assert out["end"] == len(data["order"])


def test_io_external_shrinks_the_plan(models_dir):
    path = str(models_dir / "resnet_cnn.onnx")
    internal = json.loads(run("plan", path, "--json").output)
    external = json.loads(run("plan", path, "--json", "--io", "external").output)
    names = {t["name"] for t in external["tensors"]}
    assert "image" not in names and "probs" not in names
    assert len(external["tensors"]) == len(internal["tensors"]) - 2


def test_version_and_module_entry():
    assert "onnxmem" in run("--version").output
    r = subprocess.run([sys.executable, "-m", "onnxmem", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and "onnxmem" in r.stdout


# ------------------------------------------------------------ bad input


def _write(tmp_path, model, name="m.onnx"):
    p = tmp_path / name
    p.write_bytes(model.SerializeToString())
    return p


def _relu(shape, dtype=TensorProto.FLOAT):
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", shape, dtype)], [vi("y", shape, dtype)])


def bad_cases(tmp_path):
    cases = {}
    cases["missing"] = (tmp_path / "absent.onnx", [], "does not exist")
    trunc = tmp_path / "trunc.onnx"
    data = _relu([4]).SerializeToString()
    trunc.write_bytes(data[: len(data) - 7])
    cases["truncated"] = (trunc, [], "truncated")
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 20)
    cases["not onnx"] = (text, [], "not a readable ONNX model|holds no ONNX graph")
    cyc = make_model(
        [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2")],
        [vi("x", [2])], [vi("a", [2])],
    )
    cases["cycle"] = (_write(tmp_path, cyc, "cyc.onnx"), [], "cycle through nodes")
    ghost = make_model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])])
    cases["undefined input"] = (_write(tmp_path, ghost, "ghost.onnx"), [], "'ghost' read by node 'r'")
    cases["unbound dim"] = (_write(tmp_path, _relu(["batch", 4]), "sym.onnx"), [], "--dim batch=N")
    cases["negative dim"] = (_write(tmp_path, _relu(["batch", 4]), "sym2.onnx"), ["--dim", "batch=-3"], "must be an integer >= 0, not -3")
    cases["huge"] = (_write(tmp_path, _relu([2**40, 2**30]), "huge.onnx"), [], "limit of 2\\^62")
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="/etc/passwd")
    ext = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [1, 4])], [vi("y", [1, 4])], [w])
    cases["external outside"] = (_write(tmp_path, ext, "ext.onnx"), [], "outside the model's folder")
    bad_dtype = _relu([4])
    bad_dtype.graph.input[0].type.tensor_type.elem_type = 77
    bad_dtype.graph.output[0].type.tensor_type.elem_type = 77
    cases["unknown dtype"] = (_write(tmp_path, bad_dtype, "dt.onnx"), [], "element type 77")
    strings = _relu([4], TensorProto.STRING)
    cases["strings"] = (_write(tmp_path, strings, "str.onnx"), [], "dtype string")
    cases["output folder missing"] = (
        _write(tmp_path, _relu([4]), "ok.onnx"), ["-o", str(tmp_path / "nowhere" / "plan.json")], "does not exist"
    )
    return cases


CASES = ["missing", "truncated", "not onnx", "cycle", "undefined input", "unbound dim", "negative dim",
         "huge", "external outside", "unknown dtype", "strings", "output folder missing"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_one_line_no_traceback_no_output(case, tmp_path):
    path, extra, pattern = bad_cases(tmp_path)[case]
    out = tmp_path / "plan.json"
    args = ["plan", str(path)] + (extra if "-o" in extra else extra + ["-o", str(out)])
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    import re

    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists()
    assert "Traceback" not in r.output


def test_usage_error_exit_code_2(models_dir):
    r = CliRunner().invoke(main, ["plan", str(models_dir / "resnet_cnn.onnx"), "--solver", "nope"])
    assert r.exit_code == 2


def test_outputs_are_written_with_ordinary_permissions(tmp_path, models_dir):
    import os
    import stat

    out = tmp_path / "plan.json"
    assert run("plan", str(models_dir / "resnet_cnn.onnx"), "-o", str(out)).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary left behind


def test_annotate_a_model_with_external_weights_from_another_folder(tmp_path, models_dir, monkeypatch):
    """onnx.checker finds external data relative to the working folder: annotating
    from elsewhere must still check and write the model beside its data."""
    import shutil

    import onnxruntime as ort

    for name in ("external_data.onnx", "external_data.bin"):
        shutil.copy(models_dir / name, tmp_path / name)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "annotated.onnx"
    r = run("plan", str(tmp_path / "external_data.onnx"), "--annotate", str(out))
    assert r.exit_code == 0, r.output
    assert ort.InferenceSession(str(out)).get_inputs()
    assert list(elsewhere.iterdir()) == []


def test_the_fixed_cost_is_measured_only_when_asked(tmp_path):
    """The default summary counts weights + arena + io and starts no onnxruntime process;
    --fixed-cost measures onnxruntime's session in its child and adds the predicted peak."""
    path = tmp_path / "chain.onnx"
    onnx.save(chain(3), path)
    r = run("plan", str(path))
    assert r.exit_code == 0, r.output
    assert "deployment   weights + arena + io = " in r.output and "process peak" not in r.output
    r = run("plan", str(path), "--fixed-cost")
    assert r.exit_code == 0, r.output
    assert "onnxruntime cpu session, measured" in r.output and "process peak" in r.output
