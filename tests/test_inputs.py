"""``--inputs FILE.npz``: given graph input values on plan, compare and verify; a hostile .npz is refused."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError, RuntimeBackendError, ShapeError
from onnxmem.runtime.inputs import bind_input_shapes, check_inputs, read_inputs
from onnxmem.runtime.ort import first_line, measure_shapes

from .helpers import make_model, vi

SR = 16000


def sample_rate_model() -> onnx.ModelProto:
    """``audio [1, ?]`` and a scalar ``sr`` that must be 16000.

    ``Tile`` repeats the audio once when ``sr == 16000``, twice otherwise; the
    ``Reshape`` to ``[1, 16000]`` then fails for any other rate (random values
    are 0..3), as a real model fails on a wrong sample rate.
    """
    inits = [
        numpy_helper.from_array(np.array(SR, dtype=np.int64), "rate"),
        numpy_helper.from_array(np.array([1, 1], dtype=np.int64), "once"),
        numpy_helper.from_array(np.array([2, 1], dtype=np.int64), "twice"),
        numpy_helper.from_array(np.array([1, SR], dtype=np.int64), "frame"),
    ]
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is_rate"]),
        helper.make_node("Where", ["is_rate", "once", "twice"], ["reps"]),
        helper.make_node("Tile", ["audio", "reps"], ["tiled"]),
        helper.make_node("Reshape", ["tiled", "frame"], ["framed"]),
        helper.make_node("Relu", ["framed"], ["y"]),
    ]
    return make_model(nodes, [vi("audio", [1, "?"]), vi("sr", [], TensorProto.INT64)], [vi("y", [1, SR])], inits)


@pytest.fixture
def sr_files(tmp_path):
    model = tmp_path / "sr.onnx"
    onnx.save(sample_rate_model(), model)
    good = tmp_path / "in.npz"
    np.savez(good, sr=np.array(SR, dtype=np.int64), audio=np.zeros((1, SR), dtype=np.float32))
    return model, good


def test_sample_rate_model_plans_only_with_inputs(sr_files, tmp_path):
    model, good = sr_files
    runner = CliRunner()
    plan = tmp_path / "p.json"
    r = runner.invoke(main, ["plan", str(model), "--measure-shapes", "--input-shape", f"audio=1x{SR}"])
    assert r.exit_code == 1 and "error:" in r.output and "Reshape" in r.output and "Traceback" not in r.output
    assert "had seeded random values: if the model needs real ones, give them with --inputs FILE.npz" in r.output
    r = runner.invoke(main, ["plan", str(model), "--measure-shapes", "--inputs", str(good), "-o", str(plan),
                             "--alignment", "1"])
    assert r.exit_code == 0, r.output
    data = json.loads(plan.read_text())
    assert data["input_shapes"] == {"audio": [1, SR], "sr": []}  # the arrays' shapes bound the '?' dim
    sizes = {t["name"]: t["size"] for t in data["tensors"]}
    assert sizes["tiled"] == 4 * SR  # the given rate: tiled once
    r = runner.invoke(main, ["verify", str(model), "--plan", str(plan), "--inputs", str(good)])
    assert r.exit_code == 0, r.output
    assert "verified" in r.output


def test_sample_rate_model_compares_only_with_inputs(sr_files):
    model, good = sr_files
    runner = CliRunner()
    r = runner.invoke(main, ["compare", str(model), "--measure-shapes", "--input-shape", f"audio=1x{SR}"])
    assert r.exit_code == 1 and r.output.startswith("error:") and len(r.output.strip().splitlines()) == 1
    r = runner.invoke(main, ["compare", str(model), "--measure-shapes", "--inputs", str(good)])
    assert r.exit_code == 0, r.output
    assert "ORT_DISABLE_ALL" in r.output and "onnxmem arena" in r.output


def test_partial_inputs_the_rest_random(tmp_path):
    m = sample_rate_model()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    shapes = measure_shapes(m, model_path=path, input_shapes={"audio": (1, SR)},
                            inputs={"sr": np.array(SR, dtype=np.int64)})
    assert shapes["tiled"][1] == (1, SR)


@pytest.mark.parametrize("arrays, message", [
    ({"rate_hz": np.array(SR)}, "is not a graph input of the model; its inputs are 'audio', 'sr'"),
    ({"sr": np.array(SR, dtype=np.int32)}, "array 'sr' is int32; the graph input is int64"),
    ({"sr": np.array([SR], dtype=np.int64)}, "array 'sr' has rank 1 [1]; the graph input has rank 0"),
    ({"audio": np.zeros((2, 8), dtype=np.float32)}, "has 2 at axis 0; the graph input fixes it to 1"),
])
def test_arrays_are_checked_against_the_declarations(arrays, message):
    with pytest.raises(ShapeError) as err:
        check_inputs(sample_rate_model(), arrays)
    assert message in str(err.value)


def test_array_shape_binds_and_must_agree_with_input_shape():
    m = sample_rate_model()
    audio = {"audio": np.zeros((1, 8), dtype=np.float32)}
    assert bind_input_shapes(m, audio, {}) == {"audio": (1, 8)}
    with pytest.raises(ShapeError, match="disagrees with its array in --inputs"):
        bind_input_shapes(m, audio, {"audio": (1, 9)})


def test_hostile_npz_files_are_one_line_errors(tmp_path):
    obj = tmp_path / "obj.npz"
    np.savez(obj, sr=np.array([{"a": 1}], dtype=object))
    with pytest.raises(OnnxmemError, match="cannot read without pickle"):
        read_inputs(obj)
    text = tmp_path / "x.npz"
    text.write_text("not a zip")
    with pytest.raises(OnnxmemError, match="is not an .npz file"):
        read_inputs(text)
    other = tmp_path / "other.npz"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("../evil.txt", "x")
    with pytest.raises(OnnxmemError, match="which is not an .npy array"):
        read_inputs(other)
    big = tmp_path / "big.npz"
    np.savez_compressed(big, sr=np.zeros(1 << 16, dtype=np.int64))  # 512 KiB that compresses to little
    with pytest.raises(OnnxmemError, match="once decompressed"):
        read_inputs(big, limit=1 << 16)
    assert set(read_inputs(big)) == {"sr"}


def test_cli_unknown_input_name_is_one_line(sr_files, tmp_path):
    model, _ = sr_files
    bad = tmp_path / "bad.npz"
    np.savez(bad, rate=np.array(SR, dtype=np.int64))
    for cmd in (["plan", str(model), "--measure-shapes"], ["compare", str(model)], ["verify", str(model)]):
        r = CliRunner().invoke(main, [*cmd, "--inputs", str(bad)])
        assert r.exit_code == 1, r.output
        assert r.output.strip().splitlines() == [
            "error: --inputs: array 'rate' is not a graph input of the model; its inputs are 'audio', 'sr'"]


def test_onnxruntime_errors_are_never_cut_mid_word():
    msg = ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x for the following "
           "indices\n index: 0 Got: 2 Expected: 1\n Please fix either the inputs/outputs or the model.")
    whole = " ".join(msg.split())
    assert first_line(ValueError(msg)) == whole  # every line kept, as one
    for width in range(24, len(whole), 7):  # the first word, 18 characters, fits from 22 on
        cut = first_line(ValueError(msg), width=width)
        assert len(cut) <= width and cut.endswith(" ...")
        kept = cut.removesuffix(" ...").split()
        assert kept == whole.split()[: len(kept)]  # whole words only
    err = RuntimeBackendError(f"onnxruntime failed: {first_line(ValueError(msg), width=60)}")
    assert "Got invalid ..." in str(err)
    # the C++ source location onnxruntime names is left out; the shapes after it are kept
    reshape = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. "
               "Name:'' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/reshape_helper.h:91 "
               "onnxruntime::ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, "
               "onnxruntime::TensorShapeVector&, bool) input_shape_size == requested_shape_size was false. The input "
               "tensor cannot be reshaped to the requested shape. Input shape:{2,16000}, requested shape:{1,16000}\n")
    assert first_line(ValueError(reshape)) == (
        "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. Name:'' Status "
        "Message: input_shape_size == requested_shape_size was false. The input tensor cannot be reshaped to the "
        "requested shape. Input shape:{2,16000}, requested shape:{1,16000}")


def test_inputs_of_another_shape_than_the_plan_are_one_line(sr_files, tmp_path):
    model, good = sr_files
    plan = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(model), "--measure-shapes", "--inputs", str(good), "-o", str(plan)])
    assert r.exit_code == 0, r.output
    short = tmp_path / "short.npz"
    np.savez(short, sr=np.array(SR, dtype=np.int64), audio=np.zeros((1, 8000), dtype=np.float32))
    for cmd in (["verify", str(model), "--plan", str(plan)], ["compare", str(model), "--plan", str(plan)]):
        r = CliRunner().invoke(main, [*cmd, "--inputs", str(short)])
        assert r.exit_code == 1, r.output
        assert r.stderr.strip().splitlines() == [
            "error: --inputs: array 'audio' has shape [1, 8000]; the plan was made for [1, 16000]: give the plan's "
            "shape, or plan with these inputs (plan --inputs)"], r.output
