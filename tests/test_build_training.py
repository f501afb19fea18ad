"""``tools/build_training.py``'s graph rewrites, on hand-made graphs run by onnxruntime (the main
environment's inference runtime: no training API needed)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent


def _builder():
    spec = importlib.util.spec_from_file_location("build_training", ROOT / "tools" / "build_training.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_training"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bt = _builder()


def _dynamo_gelu(as_inputs: bool = False) -> onnx.ModelProto:
    """``y = x * (0.5 * (1 + erf(x / sqrt 2)))`` as the dynamo exporter writes it; ``as_inputs``: its
    constants are graph inputs (as ``frozen_params`` makes them) rather than initializers."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("sqrt2", math.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["half", "a"], ["h"]),
             helper.make_node("Mul", ["x", "h"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])]
    if as_inputs:
        inputs += [helper.make_tensor_value_info(c.name, TensorProto.FLOAT, []) for c in consts]
    graph = helper.make_graph(nodes, "gelu", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                              [] if as_inputs else consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def _run(model: onnx.ModelProto, x: np.ndarray, tmp_path: Path, tag: str) -> tuple[np.ndarray, list[str]]:
    """``y`` with no graph optimization, and the op types of the graph onnxruntime's extended level builds."""
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    y = ort.InferenceSession(model.SerializeToString(), plain, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    built = ort.SessionOptions()
    built.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    built.optimized_model_filepath = str(tmp_path / f"{tag}.onnx")
    ort.InferenceSession(model.SerializeToString(), built, providers=["CPUExecutionProvider"])
    return y, [n.op_type for n in onnx.load(str(tmp_path / f"{tag}.onnx")).graph.node]


def test_fusable_gelu_keeps_the_value_and_lets_onnxruntime_fuse_it(tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32) * 3
    model = _dynamo_gelu()
    before, ops_before = _run(model, x, tmp_path, "before")
    assert "Gelu" not in ops_before and "Erf" in ops_before  # the exporter's order is not matched
    assert bt.fusable_gelu(model) == 1
    after, ops_after = _run(model, x, tmp_path, "after")
    assert before.tobytes() == after.tobytes()  # a product with 0.5 is exact: the same bits
    assert ops_after == ["Gelu"]
    assert bt.fusable_gelu(model) == 0  # nothing left to rewrite


def test_fusable_gelu_leaves_constants_it_cannot_read():
    model = _dynamo_gelu(as_inputs=True)
    assert bt.fusable_gelu(model) == 0
    assert [list(n.input) for n in model.graph.node][-2:] == [["half", "a"], ["x", "h"]]


@pytest.mark.parametrize("frozen, gelu, folder", [
    ("initializers", False, "dynamo"), ("parameters", False, "dynamo-parameters"),
    ("parameters", True, "dynamo-parameters-gelu"), ("initializers", True, "dynamo-gelu"),
])
def test_each_variant_has_its_own_build_folder(frozen, gelu, folder):
    assert bt.variant(frozen, gelu) == folder
