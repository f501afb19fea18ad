"""onnxruntime's buffer reuse against the plan: a dead value's buffer held for a later output of its shape.

onnxruntime's allocation planner (``SessionOptions.enable_mem_reuse``, on by default) hands
the buffer of a value that died to a later output of the same shape, and holds the buffer
from the first value's death to the second's: the gap a recomputation makes. In the model
below ``v`` (16 MiB) dies at once and ``z``, of ``v``'s shape, comes after ``w`` (16 MiB, another
shape): the plan needs 16 MiB, onnxruntime with reuse on 32 MiB, with reuse off 16 MiB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.planning import PlanOptions
from onnxmem.planning.pipeline import plan_model
from onnxmem.runtime import session_peak

ROOT = Path(__file__).resolve().parent.parent
N = 1 << 22  # floats: 16 MiB
MIB = 1 << 20
SHAPES = {"x": (N,), "x2": (2, N // 2)}


def gap_model() -> onnx.ModelProto:
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Relu", ["x"], ["v"]),  # v: [N], dies at s
        helper.make_node("ReduceSum", ["v"], ["s"], keepdims=1),
        helper.make_node("Add", ["x2", "s"], ["w"]),  # w: [2, N/2], not v's shape
        helper.make_node("ReduceSum", ["w"], ["t"], keepdims=1),
        helper.make_node("Reshape", ["t", "one"], ["t1"]),
        helper.make_node("Mul", ["x", "t1"], ["z"]),  # z: v's shape, after w
        helper.make_node("ReduceSum", ["z"], ["y"], keepdims=1),
    ]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "one")]
    inputs = [helper.make_tensor_value_info("x", f, [N]), helper.make_tensor_value_info("x2", f, [2, N // 2])]
    graph = helper.make_graph(nodes, "gap", inputs,
                              [helper.make_tensor_value_info("y", f, [1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


@pytest.fixture(scope="module")
def gap(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("gap") / "gap.onnx"
    onnx.save(gap_model(), path)
    planned = plan_model(path, PlanOptions(order="onnxruntime", io="external")).plan.arena_size
    assert N * 4 <= planned <= N * 4 + 1024  # v, w and z share one buffer (and a few scalars)
    return path, planned


def test_reuse_holds_a_dead_buffer_until_a_later_output_of_its_shape(gap: tuple[Path, int]) -> None:
    path, planned = gap
    on = session_peak(path, SHAPES, mem_pattern=False, runs=1)
    off = session_peak(path, SHAPES, mem_pattern=False, runs=1, mem_reuse=False)
    assert on.requested is None and off.requested is None  # no allocation tracer in this process
    assert off.peak - off.created <= planned + 4 * MIB
    assert on.peak - on.created >= planned + 12 * MIB


def test_the_allocation_tracer_counts_what_onnxruntime_asks_for(gap: tuple[Path, int], tracer: Path) -> None:
    path, planned = gap
    off = session_peak(path, SHAPES, mem_pattern=False, arena=False, runs=1, mem_reuse=False)
    on = session_peak(path, SHAPES, mem_pattern=False, arena=False, runs=1)
    assert off.requested is not None and on.requested is not None
    assert N * 4 <= off.requested <= planned + 64 * 1024  # the plan's bytes (unaligned), and a few scalars
    assert on.requested >= 2 * N * 4  # v's buffer held while w is live
