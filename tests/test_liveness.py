"""Lifetimes on literal graphs, computed by hand."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from onnxmem.analysis.liveness import build_liveness
from onnxmem.core.problem import lower_bound
from onnxmem.graph import build_view
from onnxmem.model import load_model
from onnxmem.scheduling import reorder
from onnxmem.shapes import infer_shapes

from .helpers import make_model, vi


def view_of(model):
    return build_view(model, infer_shapes(model))


def lifetimes(model, io="internal"):
    view = view_of(model)
    lv = build_liveness(view, reorder(view, "file"), io=io, alignment=1)
    return {iv.tensor: (iv.start, iv.end) for iv in lv.intervals}, lv


def diamond():
    # x -> a(Relu) -> b(Sigmoid) ; a -> c(Tanh) ; d = Add(b, c) ; y = Relu(d), with an unused
    # optional output
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="n0"),
        helper.make_node("Sigmoid", ["a"], ["b"], name="n1"),
        helper.make_node("Tanh", ["a"], ["c"], name="n2"),
        helper.make_node("Add", ["b", "c"], ["d"], name="n3"),
        helper.make_node("Dropout", ["d"], ["y", "mask"], name="n4"),
    ]
    return make_model(nodes, [vi("x", [1, 8])], [vi("y", [1, 8])])


def test_half_open_lifetimes_by_hand():
    lt, lv = lifetimes(diamond())
    assert lt == {
        "x": (0, 1),  # input: from step 0 to its last reader (n0) + 1
        "a": (0, 3),  # read last by n2 at step 2
        "b": (1, 4),
        "c": (2, 4),
        "d": (3, 5),
        "y": (4, 5),  # graph output: to the end
        "mask": (4, 5),  # unused optional output: its producer's step
    }
    # each float32 [1,8] is 32 bytes, mask is 8 bools: peak at step 3 (b, c, d) or 4 (d, y, mask)
    assert lower_bound(lv.problem) == 96


def test_io_external_leaves_inputs_and_outputs_out():
    lt, _ = lifetimes(diamond(), io="external")
    assert "x" not in lt and "y" not in lt
    assert lt["a"] == (0, 3)


def test_alignment_rounds_buffer_sizes():
    view = view_of(diamond())
    lv = build_liveness(view, reorder(view, "file"), alignment=64)
    assert {b.size for b in lv.problem.buffers} == {64}
    assert all(b.alignment == 64 for b in lv.problem.buffers)


def test_unsorted_file_order_is_sorted_stably():
    nodes = [
        helper.make_node("Relu", ["a"], ["y"], name="second"),
        helper.make_node("Relu", ["x"], ["a"], name="first"),
    ]
    m = make_model(nodes, [vi("x", [4])], [vi("y", [4])])
    view = view_of(m)
    order = reorder(view, "file")
    assert [view.ops[i].name for i in order] == ["first", "second"]


def test_captured_values_live_through_the_owning_node(models_dir):
    model = load_model(models_dir / "control_flow.onnx")
    view = build_view(model, infer_shapes(model))
    order = reorder(view, "file")
    lv = build_liveness(view, order)
    step = {view.ops[i].name: k for k, i in enumerate(order)}
    loop = next(op for op in view.ops if op.op_type == "Loop")
    for cap in loop.captures:
        if view.tensors[cap].kind != "weight":
            assert lv.interval(cap).end > step[loop.name]


def test_weights_are_not_planned():
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], [0.0] * 64)
    m = make_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Constant", [], ["k"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
            helper.make_node("Mul", ["h", "k"], ["y"]),
        ],
        [vi("x", [1, 8])],
        [vi("y", [1, 8])],
        [w],
    )
    lt, _ = lifetimes(m)
    assert set(lt) == {"x", "h", "y"}


def test_bad_alignment_is_an_error():
    from onnxmem.core.errors import ModelError

    view = view_of(diamond())
    with pytest.raises(ModelError, match="alignment"):
        build_liveness(view, reorder(view, "file"), alignment=0)
