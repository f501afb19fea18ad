"""Weights mapped from their data file at the offsets an exporter leaves them: a floating-point
weight whose offset is a multiple of its element's size (4 for float) but not of 16 is an array
over the map of its file, not a copy, and the kernels that read weights give the same bits with
it as with a copy aligned to 64 bytes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.ort import load_weights, make_session
from onnxmem.verify.run import VerifyOptions, execute_plan

from .helpers import make_model, vi

RNG = np.random.default_rng(7)
#: the floating-point weights, in the order they are written to the data file
WEIGHTS = {
    "W": RNG.standard_normal((16, 8, 3, 3)).astype(np.float32),  # Conv weight
    "B": RNG.standard_normal(16).astype(np.float32),  # Conv bias
    "G": RNG.standard_normal((1024, 32)).astype(np.float32),  # Gemm's B
    "C": RNG.standard_normal(32).astype(np.float32),  # Gemm's C
    "M": RNG.standard_normal((5, 1)).astype(np.float32),  # MatMul's A
}
#: bytes before the first weight: every offset then is 4 more than a multiple of 16 or 8 more
LEAD = 4


def _external(name: str, arr: np.ndarray, offset: int) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=arr.shape)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", str(offset)), ("length", str(arr.nbytes))):
        t.external_data.add(key=key, value=value)
    return t


def _model(folder):
    """x -> Conv(W, B) -> Relu -> Reshape [1, 1024] -> Gemm(G, C) -> MatMul(M, .) -> y [5, 32],
    its weights packed back to back in ``w.bin`` from byte 4."""
    data, inits = bytearray(LEAD), []
    for name, arr in WEIGHTS.items():
        inits.append(_external(name, arr, len(data)))
        data += arr.tobytes()
    (folder / "w.bin").write_bytes(bytes(data))
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 1024])
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "G", "C"], ["g"], name="gemm"),
        helper.make_node("MatMul", ["M", "g"], ["y"], name="mm"),
    ]
    model = make_model(nodes, [vi("x", [1, 8, 10, 10])], [vi("y", [5, 32])], [*inits, shape])
    path = folder / "m.onnx"
    onnx.save(model, path)
    return path, model


def test_weights_at_element_aligned_offsets_are_mapped_not_copied(tmp_path):
    """Every weight here starts 4 or 8 bytes past a multiple of 16 in its file: each is an array
    over the file's map (its address that far past a multiple of 16, owning no memory), with the
    file's values."""
    path, model = _model(tmp_path)
    _, arrays = load_weights(model, path)
    assert set(arrays) == set(WEIGHTS)
    offset = LEAD
    for name, arr in WEIGHTS.items():
        got = arrays[name]
        assert np.array_equal(got, arr) and got.dtype == np.float32
        assert not got.flags.owndata and got.base is not None
        assert offset % 16 != 0 and got.ctypes.data % 16 == offset % 16, name
        offset += arr.nbytes


def _aligned_copy(arr: np.ndarray, alignment: int = 64) -> np.ndarray:
    raw = np.empty(arr.nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    out = raw[start:start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    assert out.ctypes.data % alignment == 0
    return out


NODES = {
    "Conv": (helper.make_node("Conv", ["x", "W", "B"], ["y"]), {"x": (1, 8, 10, 10)}, [1, 16, 8, 8]),
    "Gemm": (helper.make_node("Gemm", ["x", "G", "C"], ["y"]), {"x": (3, 1024)}, [3, 32]),
    "MatMul, weight first": (helper.make_node("MatMul", ["M", "x"], ["y"]), {"x": (1, 32)}, [5, 32]),
    "MatMul, weight second": (helper.make_node("MatMul", ["x", "G"], ["y"]), {"x": (7, 1024)}, [7, 32]),
}


@pytest.mark.parametrize("kind", list(NODES))
def test_a_kernel_gives_the_same_bits_with_a_mapped_weight_as_with_an_aligned_copy(tmp_path, kind):
    """What verify assumes of a kernel it hands a mapped weight: the node, run as verify runs it
    (no optimization, one thread, prepacking off, the weight an input), gives the same bytes
    whether the weight is the array over the map (4 or 8 bytes past a multiple of 16) or a copy
    at a multiple of 64."""
    path, model = _model(tmp_path)
    _, arrays = load_weights(model, path)
    node, inputs, out_shape = NODES[kind]
    weights = [n for n in node.input if n in WEIGHTS]
    assert any(arrays[n].ctypes.data % 16 for n in weights)
    graph_inputs = [vi(n, list(shape)) for n, shape in inputs.items()]
    graph_inputs += [vi(n, list(WEIGHTS[n].shape)) for n in weights]
    sess = make_session(make_model([node], graph_inputs, [vi("y", out_shape)]), prepacking=False)
    feeds = {n: RNG.standard_normal(shape).astype(np.float32) for n, shape in inputs.items()}
    (mapped,) = sess.run(None, feeds | {n: arrays[n] for n in weights})
    (copied,) = sess.run(None, feeds | {n: _aligned_copy(arrays[n]) for n in weights})
    assert mapped.tobytes() == copied.tobytes()


def test_verify_holds_with_mapped_weights(tmp_path):
    """The model verifies in the arena with its mapped weights, its output the bits of the
    whole-model reference and of each node run again outside the arena; ``verify`` says so."""
    path, _ = _model(tmp_path)
    planned = plan_model(path, PlanOptions(solver="greedy", order="file"))
    runs = {ref: execute_plan(planned.plan, planned.model, planned.view, model_path=path,
                              options=VerifyOptions(reference=ref)) for ref in ("whole", "nodes")}
    assert runs["whole"].reference == "whole" and runs["nodes"].reference == "nodes"
    for run in runs.values():
        assert run.findings == () and run.nodes_run == 5
        (out,) = run.outputs
        assert out.ok and out.identical and out.max_abs_diff == 0.0
    result = CliRunner().invoke(main, ["verify", str(path)])
    assert result.exit_code == 0, result.output
    assert "against the reference: identical" in result.output and "verified" in result.output
