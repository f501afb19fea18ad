"""Windows alike in all but what sets their shapes: inferred in pieces, every value has the shape
the whole graph's inference gives it and the one onnxruntime makes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxmem.shapes.pieces as pieces
from onnxmem.shapes import infer_shapes
from onnxmem.shapes.engines import collect_types, run_onnx_inference, strip_for_inference

from .helpers import make_model, vi

I64, F = TensorProto.INT64, TensorProto.FLOAT
X = [2, 6]
#: nodes per block, and per window
BLOCK = 4


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, I64, [len(values)], values)


def _block(kind: str, i: int, x: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Block ``i`` of ``kind``, reading ``x`` (2 x 6 floats), ending in a Relu to ``y{i}``: the
    blocks of one kind differ only in a value or an attribute their shapes follow."""
    k, r = i + 1, f"r{i}"
    if kind == "slice starts":
        return [helper.make_node("Slice", [x, f"st{i}", "end", "axis1"], [r])], [_ints(f"st{i}", [i])]
    if kind == "pad pads":
        return [helper.make_node("Pad", [x, f"p{i}"], [r])], [_ints(f"p{i}", [0, i, 0, 0])]
    if kind == "constant node":
        c = helper.make_node("Constant", [], [f"c{i}"], value=_ints("v", [12 // k, k]))
        return [c, helper.make_node("Reshape", [x, f"c{i}"], [r])], []
    if kind == "float initializer read by Cast":
        f = helper.make_tensor(f"f{i}", F, [2], [12.0 / k, float(k)])
        return [helper.make_node("Cast", [f"f{i}"], [f"c{i}"], to=I64),
                helper.make_node("Reshape", [x, f"c{i}"], [r])], [f]
    if kind == "resize scales":
        s = helper.make_tensor(f"s{i}", F, [2], [1.0, float(k)])
        return [helper.make_node("Resize", [x, "", f"s{i}"], [r], mode="nearest")], [s]
    if kind == "integer read by Add":
        return [helper.make_node("Shape", [x], [f"h{i}"]), helper.make_node("Add", [f"h{i}", f"a{i}"], [f"g{i}"]),
                helper.make_node("Expand", ["one", f"g{i}"], [r])], [_ints(f"a{i}", [0, i])]
    if kind == "attribute":
        perm = [[0, 1, 2, 3], [1, 0, 2, 3], [2, 1, 0, 3], [1, 2, 3, 0]][i % 4]
        return [helper.make_node("Reshape", [x, "four"], [f"u{i}"]),
                helper.make_node("Transpose", [f"u{i}"], [r], perm=perm)], []
    raise AssertionError(kind)


KINDS = ["slice starts", "pad pads", "constant node", "float initializer read by Cast", "resize scales",
         "integer read by Add", "attribute"]
COMMON = [_ints("end", [100]), _ints("axis1", [1]), _ints("four", [1, 2, 3, 2]),
          helper.make_tensor("one", F, [1], [1.0])]


def _model(kind: str, n: int, *, chained: bool) -> onnx.ModelProto:
    """``n`` blocks of ``kind``, each a window of :data:`BLOCK` nodes reading the graph input, or
    (``chained``) each a different value of a Relu chain that fills the first window."""
    nodes: list[onnx.NodeProto] = []
    if chained:
        nodes = [helper.make_node("Relu", [f"x{j}" if j else "x"], [f"x{j + 1}"]) for j in range(BLOCK)]
    inits = list(COMMON)
    for i in range(n):
        x = f"x{i + 1}" if chained else "x"
        pad = BLOCK - 1 - len(_block(kind, i, x)[0])  # Identity nodes before the block fill its window
        for j in range(pad):
            nodes.append(helper.make_node("Identity", [x], [f"w{i}_{j}"]))
            x = f"w{i}_{j}"
        made, consts = _block(kind, i, x)
        made.append(helper.make_node("Relu", [f"r{i}"], [f"y{i}"]))
        nodes += made
        inits += consts
    return make_model(nodes, [vi("x", X)], [vi(f"y{i}", None) for i in range(n)], inits, opset=18)


def _run(model: onnx.ModelProto, x: list[int] = X) -> dict[str, tuple[int, ...]]:
    """The shape onnxruntime gives every node output (each made a graph output)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=o) for n in m.graph.node for o in n.output if o not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": np.ones(x, np.float32)})
    return {o.name: tuple(v.shape) for o, v in zip(sess.get_outputs(), got)}


def _concrete(typed: tuple[int | None, tuple[object, ...] | None]) -> bool:
    return typed[1] is not None and all(isinstance(d, int) for d in typed[1])


@pytest.mark.parametrize("chained", [False, True], ids=["graph input", "earlier window"])
@pytest.mark.parametrize("kind", KINDS)
def test_windows_alike_but_for_their_shapes_are_each_inferred(kind, chained, monkeypatch):
    model = _model(kind, 4, chained=chained)
    work = strip_for_inference(model)
    whole = collect_types(run_onnx_inference(work))
    cut = pieces.infer_in_pieces(work, window=BLOCK)
    assert cut is not None
    made = [o for n in model.graph.node for o in n.output]
    for o in made:  # a shape onnx leaves open (no propagation through Cast) stays open in pieces
        assert cut[o] == whole[o] if _concrete(whole[o]) else not _concrete(cut[o])
    if kind != "float initializer read by Cast":
        assert len({cut[f"y{i}"][1] for i in range(4)}) == 4  # no block took another's shapes
    ran = _run(model)
    monkeypatch.setattr(pieces, "PIECE_NODES", 1)
    monkeypatch.setattr(pieces, "PIECE_WINDOW", BLOCK)
    info = infer_shapes(model)
    assert {o: info.shapes[o] for o in made} == ran


@pytest.mark.parametrize("declared", [[2, 4], ["rows", 4]], ids=["fixed", "bound"])
def test_a_graph_outputs_declared_shape_does_not_override_the_inferred_one(declared):
    """``out`` is declared 2 x 4 (fixed, or by a dim bound to 2) but made 3 x 4: onnxruntime runs the
    model (its merge is lenient) and makes 3 x 4, and so does the value read after it; onnx's
    inference keeps the declaration where the two conflict, so the plan must not take it."""
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Sigmoid", ["h"], ["out"]),
             helper.make_node("Relu", ["out"], ["z"])]
    model = make_model(nodes, [vi("x", [3, 4])], [vi("out", declared), vi("z", None)])
    ran = _run(model, [3, 4])
    assert ran["out"] == ran["z"] == (3, 4)
    info = infer_shapes(model, dims={"rows": 2} if "rows" in declared else {})
    assert {o: info.shapes[o] for o in ran} == ran


@pytest.mark.parametrize("read", [True, False], ids=["read by a node", "read by none"])
def test_a_graph_output_inference_leaves_open_takes_its_declared_shape(read):
    """An op onnx has no rule for: its output, declared 3 x 4, takes that shape, and so does the
    value read after it; beside it, an output onnx infers 3 x 4 does not take its declared 2 x 4."""
    nodes = [helper.make_node("Opaque", ["x"], ["out"], domain="custom.ops"),
             helper.make_node("Relu", ["out" if read else "x"], ["z"])]
    model = make_model(nodes, [vi("x", [3, 4])], [vi("out", [3, 4]), vi("z", None if read else [2, 4])])
    model.opset_import.append(helper.make_opsetid("custom.ops", 1))
    info = infer_shapes(model)
    assert info.shapes["out"] == info.shapes["z"] == (3, 4)
    assert info.sources["out"] == info.sources["z"] == "onnx"


def test_windows_reading_inputs_of_dims_bound_apart(monkeypatch):
    """Alike windows, each reading one of two inputs declared ``[n, 6]`` and ``[m, 6]`` with ``n``
    and ``m`` bound to 2 and 3: each takes its own input's shapes, as onnxruntime makes them."""
    nodes = []
    for i in range(4):
        x = "a" if i % 2 else "b"
        nodes += [helper.make_node("Identity", [x], [f"w{i}"]), helper.make_node("Shape", [f"w{i}"], [f"h{i}"]),
                  helper.make_node("ConstantOfShape", [f"h{i}"], [f"r{i}"]), helper.make_node("Relu", [f"r{i}"], [f"y{i}"])]
    model = make_model(nodes, [vi("a", ["n", 6]), vi("b", ["m", 6])], [vi(f"y{i}", None) for i in range(4)], opset=18)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for v in m.graph.input:  # onnxruntime's run, at the bound dims
        v.type.tensor_type.shape.dim[0].dim_value = 2 if v.name == "a" else 3
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"a": np.ones((2, 6), np.float32), "b": np.ones((3, 6), np.float32)})
    monkeypatch.setattr(pieces, "PIECE_NODES", 1)
    monkeypatch.setattr(pieces, "PIECE_WINDOW", BLOCK)
    info = infer_shapes(model, dims={"n": 2, "m": 3})
    assert [info.shapes[f"y{i}"] for i in range(4)] == [v.shape for v in got] == [(3, 6), (2, 6), (3, 6), (2, 6)]
