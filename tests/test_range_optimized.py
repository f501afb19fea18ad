"""Range plans of the graph onnxruntime builds (``plan --optimize LEVEL --dim NAME=LO:HI``).

onnxruntime's fused and blocked-layout ops (FusedConv, nchwc Conv, ReorderInput, ReorderOutput,
nchwc pools, ...) are sized on symbolic shapes by the contrib rules; each plan here is made,
proven, and verified by execution at both corners of its range.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.shapes.contrib import CONTRIB_RULES
from onnxmem.shapes.sentinel import symbolic_rule

from .conftest import MODELS


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _cnn(path) -> None:
    """x[batch,3,16,16] -> Conv+Relu (8) -> Conv (16) + Conv (16) skip -> Relu -> MaxPool ->
    GlobalAveragePool -> Flatten -> Gemm (10): at ALL on CPU, nchwc Convs between a
    ReorderOutput (the first reads the NCHW input itself), an nchwc pool; at EXTENDED, FusedConv."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)

    inits = [weight("w1", 8, 3, 3, 3), weight("b1", 8), weight("w2", 16, 8, 3, 3), weight("w3", 16, 8, 1, 1),
             weight("wf", 16, 10), weight("bf", 10), numpy_helper.from_array(np.array([0, -1], np.int64), "flat")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["r1", "w3"], ["c3"]),
        helper.make_node("Add", ["c2", "c3"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Reshape", ["g", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "wf"], ["m"]),
        helper.make_node("Add", ["m", "bf"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)


def _pools(path) -> None:
    """x[batch,32,8,8] -> MaxPool -> Relu -> GlobalAveragePool: at ALL a ReorderInput that only
    pools read, sized by the block size of the session that built the graph."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Relu", ["p"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "pools", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)


def _plan_and_verify(src, level: str, box: str, corners: list[list[str]], tmp_path) -> dict:
    out = tmp_path / f"range.{level}.json"
    r = run("plan", src, "--optimize", level, *box.split(), "-o", out)
    assert r.exit_code == 0, r.output
    assert "proof        ok" in r.output
    data = json.loads(out.read_text())["range"]
    assert data["model"]["optimization"]["level"] == level
    for corner in corners:
        r = run("verify", src, "--plan", out, *corner)
        assert r.exit_code == 0 and r.output.strip().endswith("verified"), r.output
        assert f"graph     onnxruntime's, level {level} for cpu" in r.output
    return data


@pytest.mark.parametrize("level", ["extended", "all"])
def test_cnn_range_plan_of_the_optimized_graph_verifies_at_both_corners(tmp_path, level):
    src = tmp_path / "cnn.onnx"
    _cnn(src)
    data = _plan_and_verify(src, level, "--dim batch=1:4", [["--dim", "batch=1"], ["--dim", "batch=4"]], tmp_path)
    ops = {t for p in data["pieces"] for t in p["op_types"]}
    if level == "all":
        # the blocked layout (the first Conv reads NCHW itself), sized symbolically
        assert "ReorderOutput" in ops and "com.microsoft.nchwc" in data["model"]["opset"], ops
    else:
        assert "FusedConv" in ops, ops
    # every size is a polynomial in batch: the tensors after the first conv grow with it
    sizes = {t["name"]: t["size"] for p in data["pieces"] for t in p["tensors"]}
    assert any("batch" in s for s in sizes.values())


def test_a_reorder_only_pools_read_is_sized_by_the_recorded_block(tmp_path):
    src = tmp_path / "pools.onnx"
    _pools(src)
    data = _plan_and_verify(src, "all", "--dim batch=1:3", [["--dim", "batch=1"], ["--dim", "batch=3"]], tmp_path)
    block = data["model"]["optimization"]["nchwc_block"]
    reorder = [t for p in data["pieces"] for t in p["tensors"] if t["producer_op"] == "ReorderInput"]
    assert reorder and all(t["shape"][1] == str(-(-32 // block) * block) for t in reorder), reorder


def test_transformer_block_range_over_seq_at_all(tmp_path):
    _plan_and_verify(MODELS / "transformer_block.onnx", "all", "--dim batch=1 --dim seq=8:32",
                     [["--dim", "seq=8"], ["--dim", "seq=32"]], tmp_path)


def test_symbolic_rule_passes_dims_through_keeps_constants_and_refuses_arithmetic():
    upsample = symbolic_rule(CONTRIB_RULES[("com.microsoft.nchwc", "Upsample")])
    node = helper.make_node("Upsample", ["x"], ["y"], domain="com.microsoft.nchwc", scales=[1, 1, 2, 2])
    f = int(TensorProto.FLOAT)
    # batch passed through (scale 1), the spatial dims doubled as constants
    assert upsample(node, [(f, ("batch", 16, 4, 4))], [None]) == [(f, ("batch", 16, 8, 8))]
    # a ranged height doubled is arithmetic on the dim: left unknown, for another engine
    assert upsample(node, [(f, (1, 16, "H", 4))], [None]) == [None]
    # concrete shapes run the rule as it is
    assert upsample(node, [(f, (2, 16, 4, 4))], [None]) == [(f, (2, 16, 8, 8))]
