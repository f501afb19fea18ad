"""The onnx wheel's backend test models (``onnx/backend/test/data/{simple,pytorch-*}``) that
onnxmem cannot plan or onnxruntime cannot run: each gets one line that names what and the fix,
and no flag the line offers loops back to it. ``make bench-backend`` runs ``verify`` over all of
them (docs/backend-models.md)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.version_converter
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(r) -> str:
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.output, r.output
    return r.stderr


def model(name: str) -> Path:
    path = DATA / name / "model.onnx"
    assert path.is_file(), f"the onnx wheel's {name} is missing"
    return path


@pytest.mark.parametrize(("name", "maker"), [
    ("simple/test_sequence_model1", "SequenceEmpty node 'Seq_empty'"),
    ("simple/test_sequence_model5", "SequenceConstruct node 'seq_1'"),
    ("simple/test_sequence_model7", "SplitToSequence node 'seq_1'"),
])
@pytest.mark.parametrize("flags", [(), ("--measure-shapes",)])
def test_a_sequence_value_is_named_with_the_op_that_makes_it(name, maker, flags):
    """A value written by a sequence op has no size any flag or run gives: the line said its shape
    depended on data and sent the user to --measure-shapes, which ended in the same line."""
    out = one_line(run("plan", model(name), *flags))
    assert f"is a sequence (the output of {maker}), not a tensor: onnxmem plans tensors only" in out, out
    assert "--measure-shapes" not in out, out


def test_a_sequence_comes_before_the_flags_for_unbound_dims():
    """test_sequence_model8's input has a named dim nothing binds, and a SplitToSequence: binding
    the dim first would only lead to the sequence, so the line names the sequence."""
    out = one_line(run("plan", model("simple/test_sequence_model8")))
    assert "'seq_1' is a sequence (the output of SplitToSequence node 'seq_1')" in out and "--dim" not in out, out
    out = one_line(run("plan", model("simple/test_sequence_model8"), "--dim", "n=3"))
    assert "'seq_1' is a sequence" in out, out


def test_a_string_input_given_by_inputs_is_refused_as_a_string_tensor(tmp_path):
    """An array of strings for a string graph input: the line said to save it with dtype object,
    which --inputs then refused (numpy reads object arrays only through pickle)."""
    path = tmp_path / "x.npz"
    np.savez(path, x=np.array(["monday", "tuesday"]))
    out = one_line(run("verify", model("simple/test_strnorm_model_nostopwords_nochangecase"), "--inputs", path))
    assert "graph input 'x' is a string tensor, whose size is not fixed; onnxmem plans numeric tensors only" in out
    assert "save it as" not in out, out


@pytest.mark.parametrize("command", [("verify",), ("compare",), ("plan", "--optimize", "all")])
def test_an_opset_onnxruntime_has_no_kernel_for_says_to_convert(tmp_path, command):
    """An ai.onnx opset 6 model (PyTorch's old exports): onnxruntime has no Add(6) kernel, to run
    the node alone, to profile the model or to optimize it. The line keeps onnxruntime's words and
    adds the fix (not "--optimize none", which plans a graph no onnxruntime runs); the model that
    fix makes verifies."""
    path = model("pytorch-operator/test_operator_add_broadcast")
    out = one_line(run(command[0], path, *command[1:]))
    assert "--optimize none" not in out, out
    assert "Could not find an implementation for Add(6)" in out, out
    assert "declares ai.onnx opset 6 and onnxruntime has kernels for 7 and later: convert it" in out, out
    if command == ("verify",):
        converted = tmp_path / "converted.onnx"
        onnx.save(onnx.version_converter.convert_version(onnx.load(path), 17), converted)
        r = run("verify", converted)
        assert r.exit_code == 0 and r.output.rstrip().endswith("verified"), r.output


def test_a_missing_kernel_at_a_current_opset_gets_no_conversion_advice():
    """The advice is for a missing kernel at an opset before 7 alone: the same message for the model
    converted to opset 17 gets none, and nor does another failure at opset 6."""
    from onnxmem.runtime.standins import no_kernel_fix

    message = "Could not find an implementation for Add(6) node with name 'node'"
    old = onnx.load(model("pytorch-operator/test_operator_add_broadcast"))
    assert no_kernel_fix(message, old.opset_import).startswith("; the model declares ai.onnx opset 6")
    new = onnx.version_converter.convert_version(old, 17)
    assert no_kernel_fix(message, new.opset_import) == ""
    assert no_kernel_fix("some other failure", old.opset_import) == ""


def test_the_bench_reads_verify_lines_and_sorts_refusals(tmp_path):
    """bench/bench_backend.py: the test inputs of a model as --inputs, the arena and outputs read
    from verify's own lines (an arena under 1 KiB prints no bytes in parentheses), and each kind of
    refusal sorted by what its line says."""
    import sys

    bench = str(Path(__file__).resolve().parent.parent / "bench")
    sys.path.insert(0, bench)
    try:
        import bench_backend as bb
    finally:
        sys.path.remove(bench)
    path = model("pytorch-converted/test_Conv2d")
    inputs = bb.test_inputs(path, tmp_path / "in.npz")
    assert inputs is not None and set(np.load(inputs)) == {"0"}
    code, out, err = bb.verify(path, inputs)
    cell = bb.verified_cell(out)
    assert code == 0, err
    assert re.fullmatch(r"arena [\d,]+ B; 1 outputs identical", cell), cell
    assert bb.verified_cell("arena     320 B   4 tensors\n  output  y: ok, against the reference: identical\n") \
        == "arena 320 B; 1 outputs identical"
    assert bb.test_inputs(model("simple/test_strnorm_model_nostopwords_nochangecase"), tmp_path / "s.npz") is None
    code, _, err = bb.verify(model("simple/test_sequence_model5"), None)
    assert code == 1 and bb.kind_of(err) == "a sequence value: onnxmem plans tensors only", err


def _pb(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return onnx.numpy_helper.to_array(tensor)


@pytest.mark.parametrize("name", ["pytorch-converted/test_Conv2d_groups", "pytorch-converted/test_Embedding",
                                  "pytorch-converted/test_LogSoftmax",
                                  "simple/test_expand_shape_model1"])
def test_saved_outputs_are_the_arena_runs_and_match_the_test_datas_expected_ones(tmp_path, name):
    """verify --save-outputs: the graph outputs as the arena run left them, each equal bit for bit to
    onnxruntime's own run of the model on the same inputs, and to the outputs the onnx test data
    expects, within the backend tests' tolerance."""
    import onnxruntime as ort

    path = model(name)
    data = path.parent / "test_data_set_0"
    m = onnx.load(path)
    weights = {t.name for t in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in weights]
    feeds = {n: _pb(data / f"input_{k}.pb") for k, n in enumerate(names)}
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "out.npz"
    r = run("verify", path, "--inputs", tmp_path / "in.npz", "--save-outputs", out)
    assert r.exit_code == 0 and f"outputs   {out}: {len(m.graph.output)} graph outputs" in r.output, r.output
    saved = dict(np.load(out))
    assert sorted(saved) == sorted(o.name for o in m.graph.output)
    ours = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for k, o in enumerate(m.graph.output):
        expected = _pb(data / f"output_{k}.pb")
        assert saved[o.name].dtype == expected.dtype and saved[o.name].shape == expected.shape
        np.testing.assert_allclose(saved[o.name], expected, rtol=1e-3, atol=1e-6)
        np.testing.assert_allclose(saved[o.name], ours[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("flags", "said"), [
    (("--static-only",), "--static-only runs nothing; leave out --save-outputs"),
    (("--concurrency", "dag"), "--concurrency dag makes several runs; leave out --save-outputs"),
])
def test_save_outputs_where_no_single_run_leaves_them_is_a_usage_error(tmp_path, flags, said):
    r = run("verify", model("pytorch-converted/test_Conv2d"), "--save-outputs", tmp_path / "o.npz", *flags)
    assert r.exit_code == 2 and said in r.output, r.output
    assert not (tmp_path / "o.npz").exists()


def test_save_outputs_is_checked_before_the_work_and_written_only_for_a_plan_that_holds(tmp_path):
    """A path in a missing folder, or the model itself, is one line before anything runs; a wrong
    plan (every tensor at offset 0) exits 3 and writes no file."""
    import json

    path = model("pytorch-converted/test_Conv2d_groups")
    r = run("verify", path, "--save-outputs", tmp_path / "missing" / "o.npz")
    assert "folder" in one_line(r) and "does not exist" in r.stderr
    copy = tmp_path / "m.onnx"
    copy.write_bytes(path.read_bytes())
    assert "is the input file" in one_line(run("verify", copy, "--save-outputs", copy))
    assert copy.read_bytes() == path.read_bytes()
    plan = tmp_path / "plan.json"
    assert run("plan", copy, "-o", plan).exit_code == 0
    doc = json.loads(plan.read_text())
    for t in doc["tensors"]:
        t["offset"] = 0
    plan.write_text(json.dumps(doc))
    r = run("verify", copy, "--plan", plan, "--save-outputs", tmp_path / "o.npz")
    assert r.exit_code == 3 and "the plan is wrong" in r.stderr, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "plan.json"]


def test_saved_outputs_keep_names_numpy_savez_would_take_as_its_own_arguments(tmp_path):
    """Outputs named ``file`` and ``allow_pickle`` (numpy.savez's own arguments) are members like any other."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["file"], name="r"), helper.make_node("Neg", ["x"], ["allow_pickle"], name="n")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("file", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("allow_pickle", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", x=x)
    r = run("verify", path, "--inputs", tmp_path / "in.npz", "--save-outputs", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    saved = dict(np.load(tmp_path / "o.npz"))
    np.testing.assert_array_equal(saved["file"], np.maximum(x, 0))
    np.testing.assert_array_equal(saved["allow_pickle"], -x)
