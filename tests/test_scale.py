"""The lifetime rule's one home, and near-linear planning on large graphs.

Literal cases for :mod:`onnxmem.analysis.lifetimes` first; then graphs large enough
that a pass scanning every tensor per tensor (or every group member per
node) would take minutes: a 20,000-node Relu chain (one alias group of
20,000 members), a chain of 5,000 Reshapes (one view class) and a tensor read
by 5,000 nodes. CPU seconds are measured, so a loaded machine does not fail
them; the bounds are about 10x what the near-linear passes take.
"""

from __future__ import annotations

import time

import pytest
from onnx import TensorProto, helper

from onnxmem.analysis.aliasing import alias_layout, shared_layout
from onnxmem.analysis.lifetimes import group_span, live_profile, tensor_lifetimes
from onnxmem.analysis.liveness import build_liveness
from onnxmem.core.problem import lower_bound
from onnxmem.graph import build_view
from onnxmem.scheduling import OrderOptions, reorder
from onnxmem.scheduling.cost import order_peak
from onnxmem.shapes import infer_shapes

from .helpers import chain, make_model, vi


def _view(model):
    return build_view(model, infer_shapes(model))


def test_lifetimes_of_a_two_node_chain():
    v = _view(chain(2))
    assert tensor_lifetimes(v, (0, 1)) == {"x": (0, 1), "t0": (0, 2), "y": (1, 2)}
    assert tensor_lifetimes(v, (0, 1), "external") == {"t0": (0, 2)}


def test_live_profile_and_group_span():
    assert live_profile([(0, 2, 5), (1, 3, 7)], 3).tolist() == [5, 12, 7]
    assert live_profile([(2, 9, 4)], 3).tolist() == [0, 0, 4]  # cut at the last step
    assert live_profile([], 0).tolist() == []
    assert group_span({"a": (0, 2), "b": (1, 5), "c": (4, 6)}, ["a", "b", "x"]) == (0, 5)


def test_every_caller_agrees_with_the_rule():
    """The problem's buffers, the order's peak and the lifetimes are one rule."""
    model = make_model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [vi("x", (1, 16))], [vi("y", (1, 16))])
    v = _view(model)
    order = (0, 1, 2)
    life = tensor_lifetimes(v, order)
    live = build_liveness(v, order, alignment=1)
    assert {iv.tensor: (iv.start, iv.end) for iv in live.intervals} == life
    curve = live_profile(((s, e, v.tensors[n].size) for n, (s, e) in life.items()), len(order))
    assert int(curve.max()) == lower_bound(live.problem) == order_peak(v, order, alignment=1) == 192


def _cpu(fn):
    t = time.process_time()
    out = fn()
    return out, time.process_time() - t


def test_long_relu_chain_plans_in_near_linear_time():
    v = _view(chain(20_000, (1, 64)))
    order = tuple(range(len(v.ops)))
    layout, secs = _cpu(lambda: shared_layout(v, order, alignment=64))
    assert list(layout.groups) == ["t0"] and len(layout.groups["t0"]) == 20_000  # t0 .. t19998 and y
    assert secs < 15, f"alias layout of a 20,000-node chain took {secs:.1f} s of CPU"
    got, secs = _cpu(lambda: reorder(v, "auto", OrderOptions(inplace=True)))
    assert got == order and secs < 20, f"auto order took {secs:.1f} s of CPU"
    live, secs = _cpu(lambda: build_liveness(v, order, layout))
    assert lower_bound(live.problem) == 512 and secs < 10  # x and the one group at step 0


def test_long_view_chain_is_one_class():
    n = 5_000
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [1, 64])
    nodes = [helper.make_node("Relu", ["x"], ["v0"])]
    nodes += [helper.make_node("Reshape", [f"v{i}", "s"], [f"v{i + 1}"]) for i in range(n)]
    nodes.append(helper.make_node("Relu", [f"v{n}"], ["y"]))
    v = _view(make_model(nodes, [vi("x", (1, 64))], [vi("y", (1, 64))], inits=[shape]))
    order = tuple(range(len(v.ops)))
    peak, secs = _cpu(lambda: order_peak(v, order, alignment=1, inplace=True))
    assert peak == 512 and secs < 15  # x and the view class, then the class in place as y


@pytest.mark.parametrize("readers", [5_000])
def test_a_tensor_with_many_readers(readers):
    nodes = [helper.make_node("Relu", ["x"], ["a"])]
    nodes += [helper.make_node("Neg", ["a"], [f"n{i}"]) for i in range(readers)]
    nodes.append(helper.make_node("Sum", [f"n{i}" for i in range(readers)], ["y"]))
    v = _view(make_model(nodes, [vi("x", (1, 4))], [vi("y", (1, 4))]))
    order, secs = _cpu(lambda: reorder(v, "auto", OrderOptions(inplace=True, timeout=0.5)))
    assert sorted(order) == list(range(len(v.ops))) and secs < 20
    lay, secs = _cpu(lambda: alias_layout(v, order))
    assert secs < 10 and not any("a" in m and "n0" in m for m in lay.groups.values())
