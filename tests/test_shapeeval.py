"""Shapes by partial evaluation: every op against onnxruntime, chains, data dependence, bounds."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.core.errors import ShapeError
from onnxmem.shapes import infer_shapes, shapeeval
from onnxmem.shapes.shapeeval import (
    EVALUATORS,
    MAX_ELEMENTS,
    evaluate_node,
    reshape_target,
    slice_indices,
)

from .helpers import make_model, plan_file_order, vi

I64 = np.int64
BIG = 2**63 - 1


def _a(values, dtype=I64) -> np.ndarray:
    return np.array(values, dtype=dtype)


def _ort(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int, out_dtype: np.dtype) -> np.ndarray:
    """``node`` run alone in onnxruntime on ``inputs`` (each one a graph input, so nothing is folded)."""
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    n = onnx.NodeProto()
    n.CopyFrom(node)
    del n.input[:]
    n.input.extend(names)
    del n.output[:]
    n.output.append("out")
    fed = {name: a for name, a in zip(names, inputs) if a is not None}
    g_inputs = [
        vi(name, list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype)) for name, a in fed.items()
    ]
    out = helper.make_tensor_value_info("out", helper.np_dtype_to_tensor_dtype(out_dtype), None)
    m = make_model([n], g_inputs, [out], opset=opset)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, fed)[0]


def _node(op: str, n_inputs: int, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, [f"i{k}" for k in range(n_inputs)], ["out"], **attrs)


# (id, op, attrs, inputs, opset): each is evaluated and run in onnxruntime, and the two must agree
CASES = [
    ("gather-neg", "Gather", {}, [_a([5, 7, 9]), _a([-1, 0, -3])], 17),
    ("gather-scalar-axis-neg", "Gather", {"axis": -1}, [_a([[1, 2, 3], [4, 5, 6]]), _a(-2)], 17),
    ("unsqueeze-13", "Unsqueeze", {}, [_a([3, 4]), _a([-1, 0])], 17),
    ("unsqueeze-11", "Unsqueeze", {"axes": [0]}, [_a(7)], 11),
    ("squeeze-axes", "Squeeze", {}, [_a([[[3]], [[4]]]), _a([-1])], 17),
    ("squeeze-all", "Squeeze", {}, [_a([[5]])], 17),
    ("concat-neg-axis", "Concat", {"axis": -1}, [_a([2]), _a([-1, 64]), _a([], I64)], 17),
    ("reshape-0-minus1", "Reshape", {}, [np.arange(24, dtype=I64).reshape(2, 3, 4), _a([0, -1])], 17),
    ("reshape-allowzero", "Reshape", {"allowzero": 1}, [np.zeros((0, 3), I64), _a([3, 0])], 17),
    ("expand", "Expand", {}, [_a([[1], [2], [3]]), _a([2, 1, 4])], 17),
    ("expand-keeps-larger", "Expand", {}, [_a([[1, 2, 3]]), _a([2, 1])], 17),
    ("cast-float-to-int", "Cast", {"to": TensorProto.INT64}, [_a([-2.7, 3.9, 0.5], np.float32)], 17),
    ("cast-int-to-bool", "Cast", {"to": TensorProto.BOOL}, [_a([0, 3, -1])], 17),
    ("cast-bool-to-float", "Cast", {"to": TensorProto.FLOAT}, [_a([True, False], np.bool_)], 17),
    ("cast-int64-to-int32", "Cast", {"to": TensorProto.INT32}, [_a([-5, 70000])], 17),
    ("cast-int64-to-int32-wraps", "Cast", {"to": TensorProto.INT32}, [_a([2**40, 2**32 + 3, -(2**31) - 1])], 17),
    ("add-broadcast", "Add", {}, [_a([[1], [2]]), _a([10, 20, 30])], 17),
    ("sub", "Sub", {}, [_a([5, 6]), _a(7)], 17),
    ("mul", "Mul", {}, [_a([3, -4]), _a([2, 5])], 17),
    ("div-int-truncates", "Div", {}, [_a([7, -7, 7, -7, 6]), _a([2, 2, -2, -2, 3])], 17),
    ("div-int32", "Div", {}, [_a([9, -9], np.int32), _a([4, 4], np.int32)], 17),
    ("div-float", "Div", {}, [_a([7.0, 1.0], np.float32), _a([2.0, 3.0], np.float32)], 17),
    ("mod-int", "Mod", {}, [_a([7, -7, 7, -7]), _a([3, 3, -3, -3])], 17),
    ("div-by-minus-one", "Div", {}, [_a([5, -7, 0, 2**63 - 1]), _a([-1, -1, -1, -1])], 17),
    ("mod-by-minus-one", "Mod", {}, [_a([5, -7, 6]), _a([-1, -1, -1])], 17),
    ("mod-fmod-by-minus-one", "Mod", {"fmod": 1}, [_a([5, -7]), _a([-1, -1])], 17),
    ("mul-near-limits", "Mul", {}, [_a([2**31, -(2**31), -1]), _a([2**31, 2**32 - 1, 2**63 - 1])], 17),
    ("add-near-limits", "Add", {}, [_a([2**62, -(2**62)]), _a([2**62 - 1, -(2**62)])], 17),
    ("sub-uint8", "Sub", {}, [_a([250, 7], np.uint8), _a([5, 7], np.uint8)], 17),
    ("cast-float-to-int32-edge", "Cast", {"to": TensorProto.INT32}, [_a([-2147483648.0, 2147483520.0], np.float32)], 17),
    ("range-int-large", "Range", {}, [_a(2**53 - 4), _a(2**53), _a(3)], 17),
    ("mod-int-fmod", "Mod", {"fmod": 1}, [_a([7, -7, 7, -7]), _a([3, 3, -3, -3])], 17),
    ("mod-float-fmod", "Mod", {"fmod": 1}, [_a([7.5, -7.5], np.float32), _a([2.0, 2.0], np.float32)], 17),
    ("equal", "Equal", {}, [_a([1, -1, 3]), _a(-1)], 17),
    ("where", "Where", {}, [_a([True, False, True], np.bool_), _a([1, 2, 3]), _a(0)], 17),
    ("min", "Min", {}, [_a([1, 5, 3]), _a([4, 2, 6]), _a(3)], 17),
    ("max", "Max", {}, [_a([1, 5, 3]), _a([[4], [0]])], 17),
    ("reduceprod-keepdims", "ReduceProd", {"axes": [-1]}, [_a([[2, 3], [4, 5]])], 17),
    ("reduceprod-all-17", "ReduceProd", {"keepdims": 0}, [_a([2, 3, 4])], 17),
    ("reduceprod-18", "ReduceProd", {"keepdims": 0}, [_a([[2, 3], [4, 5]]), _a([0])], 18),
    ("slice-neg-start", "Slice", {}, [_a([1, 2, 3, 4, 5]), _a([-2]), _a([BIG])], 17),
    ("slice-neg-step", "Slice", {}, [_a([1, 2, 3, 4, 5]), _a([BIG]), _a([-BIG - 1]), _a([0]), _a([-2])], 17),
    ("slice-axes-clamp", "Slice", {}, [np.arange(12, dtype=I64).reshape(3, 4), _a([1, -100]), _a([100, 3]),
                                        _a([-1, 0]), _a([2, 1])], 17),
    ("slice-empty", "Slice", {}, [_a([1, 2, 3]), _a([2]), _a([1])], 17),
    ("slice-9-attributes", "Slice", {"starts": [-2], "ends": [BIG], "axes": [-1]}, [_a([[1, 2, 3], [4, 5, 6]])], 9),
    ("range-int", "Range", {}, [_a(2), _a(11), _a(3)], 17),
    ("range-int-neg", "Range", {}, [_a(10), _a(1), _a(-4)], 17),
    ("range-empty", "Range", {}, [_a(5), _a(1), _a(1)], 17),
    ("range-float", "Range", {}, [_a(0.5, np.float32), _a(2.0, np.float32), _a(0.25, np.float32)], 17),
    ("range-float-inexact", "Range", {}, [_a(0.1, np.float32), _a(3.0, np.float32), _a(0.1, np.float32)], 17),
    ("range-double-neg", "Range", {}, [_a(1.0, np.float64), _a(-1.05, np.float64), _a(-0.3, np.float64)], 17),
    ("constantofshape-int", "ConstantOfShape", {"value": numpy_helper.from_array(_a([7]))}, [_a([2, 3])], 17),
    ("constantofshape-default", "ConstantOfShape", {}, [_a([3])], 17),
    ("constantofshape-scalar", "ConstantOfShape", {"value": numpy_helper.from_array(_a([1]))}, [_a([], I64)], 17),
    ("identity", "Identity", {}, [_a([4, 2])], 17),
    ("less", "Less", {}, [_a([1, 5, 3]), _a(3)], 17),
    ("greater", "Greater", {}, [_a([1.0, 5.0], np.float32), _a([2.0, 2.0], np.float32)], 17),
    ("less-or-equal", "LessOrEqual", {}, [_a([1, 5, 3]), _a(3)], 17),
    ("greater-or-equal", "GreaterOrEqual", {}, [_a([1, 5, 3]), _a(3)], 17),
    ("not", "Not", {}, [_a([True, False], np.bool_)], 17),
    ("and", "And", {}, [_a([True, False, True], np.bool_), _a(True, np.bool_)], 17),
    ("or", "Or", {}, [_a([True, False], np.bool_), _a([False, False], np.bool_)], 17),
    ("neg", "Neg", {}, [_a([3, -4, 0])], 17),
    ("abs", "Abs", {}, [_a([3, -4], np.int32)], 17),
    ("floor", "Floor", {}, [_a([-1.5, 2.5, 3.0], np.float32)], 17),
    ("ceil", "Ceil", {}, [_a([-1.5, 2.5, 3.0], np.float32)], 17),
    ("transpose-perm", "Transpose", {"perm": [1, 0]}, [_a([[1, 2], [3, 4], [5, 6]])], 17),
    ("transpose-default", "Transpose", {}, [np.arange(6, dtype=I64).reshape(1, 2, 3)], 17),
    ("clip-float", "Clip", {}, [_a([-3.5, 0.5, 9.0], np.float32), _a(0.0, np.float32), _a(6.0, np.float32)], 17),
    ("clip-min-only", "Clip", {}, [_a([-2.0, 1.0, 3.0], np.float32), _a(0.0, np.float32)], 13),
    ("clip-int", "Clip", {}, [_a([-5, 2, 40]), _a(-1), _a(7)], 13),
    ("clip-min-above-max", "Clip", {}, [_a([-5, 2, 40]), _a(9), _a(3)], 13),
    ("clip-6-attributes", "Clip", {"min": -1.0, "max": 2.5}, [_a([-3.0, 0.25, 8.0], np.float32)], 6),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnxruntime(case):
    _, op, attrs, inputs, opset = case
    node = _node(op, len(inputs), **attrs)
    got = evaluate_node(node, inputs, [a.shape for a in inputs], opset)
    assert got is not None, "the evaluator left a well-formed node unknown"
    want = _ort(node, inputs, opset, got.dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_every_evaluator_has_a_case():
    covered = {c[1] for c in CASES} | {"Constant", "Shape", "Size"}
    assert covered == set(EVALUATORS)


@pytest.mark.parametrize(("attrs", "opset", "want"), [
    ({}, 17, [2, 3, 5]),
    ({"start": 1}, 15, [3, 5]),
    ({"start": -2, "end": -1}, 15, [3]),
    ({"start": -100, "end": 100}, 15, [2, 3, 5]),
    ({"start": 2, "end": 1}, 15, []),
])
def test_shape_and_size_read_only_the_shape(attrs, opset, want):
    x = np.zeros((2, 3, 5), np.float32)
    node = _node("Shape", 1, **attrs)
    got = evaluate_node(node, [None], [x.shape], opset)
    assert got is not None and got.dtype == I64 and got.tolist() == want
    np.testing.assert_array_equal(got, _ort(node, [x], opset, got.dtype))
    size = evaluate_node(_node("Size", 1), [None], [x.shape], opset)
    assert size is not None and size.shape == () and int(size) == 30
    assert evaluate_node(node, [None], [None], opset) is None  # no shape, no value


@pytest.mark.parametrize(("attrs", "want"), [
    ({"value": numpy_helper.from_array(_a([3, 4]))}, [3, 4]),
    ({"value_int": -5}, -5),
    ({"value_ints": [1, 2]}, [1, 2]),
    ({"value_float": 1.5}, 1.5),
])
def test_constant(attrs, want):
    got = evaluate_node(helper.make_node("Constant", [], ["out"], **attrs), [], [], 17)
    assert got is not None and got.tolist() == want


@pytest.mark.parametrize(("op", "attrs", "inputs"), [
    ("Gather", {}, [_a([1, 2]), _a([2])]),  # index out of range
    ("Gather", {}, [_a([1, 2]), _a([-3])]),
    ("Div", {}, [_a([1]), _a([0])]),  # integer division by zero
    ("Mod", {}, [_a([1]), _a([0])]),
    ("Mul", {}, [_a([2**62]), _a([4])]),  # leaves int64
    ("Mul", {}, [_a([-1]), _a([-(2**63)])]),
    ("Mul", {}, [_a([3037000500]), _a([3037000500])]),  # just past 2^63
    ("Add", {}, [_a([2**62]), _a([2**62])]),
    ("Sub", {}, [_a([-(2**63)]), _a([1])]),
    ("Div", {}, [_a([-(2**63)]), _a([-1])]),
    ("Sub", {}, [_a([5], np.uint8), _a([6], np.uint8)]),  # below uint8
    ("Cast", {"to": TensorProto.INT32}, [_a([2147483648.0], np.float32)]),
    ("Abs", {}, [_a([-(2**63)])]),
    ("Range", {}, [_a(2**63 - 4), _a(2**63 - 1), _a(1)]),  # onnxruntime's double count gives 0 there
    ("Add", {}, [_a([2**31 - 1], np.int32), _a([1], np.int32)]),  # leaves int32
    ("Cast", {"to": TensorProto.INT64}, [_a([np.inf], np.float32)]),
    ("Reshape", {}, [_a([1, 2, 3]), _a([-1, -1])]),  # two -1
    ("Reshape", {}, [_a([1, 2, 3]), _a([4])]),  # wrong count
    ("Reshape", {"allowzero": 1}, [_a([1, 2, 3]), _a([0, -1])]),
    ("Expand", {}, [_a([1, 2, 3]), _a([2])]),  # not broadcastable
    ("Concat", {"axis": 0}, [_a(1), _a(2)]),  # scalars
    ("Concat", {"axis": 0}, [_a([1]), _a([2], np.int32)]),  # mixed dtypes
    ("Squeeze", {}, [_a([1, 2]), _a([0])]),  # axis 0 is not 1
    ("Unsqueeze", {}, [_a([1]), _a([0, 0])]),  # repeated axis
    ("Slice", {}, [_a([1, 2]), _a([0]), _a([1]), _a([0]), _a([0])]),  # step 0
    ("Range", {}, [_a(0), _a(5), _a(0)]),  # delta 0
    ("Where", {}, [_a([1, 0]), _a([1, 2]), _a([3, 4])]),  # condition not bool
    ("Mod", {}, [_a([1.5], np.float32), _a([1.0], np.float32)]),  # float Mod needs fmod=1
    ("NonZero", {}, [_a([1, 0, 2])]),  # not an op of shape arithmetic
    ("Neg", {}, [_a([-(2**63)])]),  # leaves int64
    ("Floor", {}, [_a([1])]),  # Floor is for floats
    ("Transpose", {"perm": [0, 0]}, [_a([[1]])]),
    ("And", {}, [_a([1]), _a([1])]),  # not bool
])
def test_malformed_or_out_of_range_is_unknown(op, attrs, inputs):
    assert evaluate_node(_node(op, len(inputs), **attrs), inputs, [a.shape for a in inputs], 17) is None


def test_missing_input_is_unknown():
    assert evaluate_node(_node("Add", 2), [_a([1]), None], [(1,), (1,)], 17) is None
    # Unsqueeze from opset 13 reads axes from an input: a named but unknown one is unknown
    assert evaluate_node(_node("Unsqueeze", 2), [_a([1]), None], [(1,), (1,)], 17) is None


def test_reshape_target_and_slice_indices_literals():
    assert reshape_target((2, 3, 4), (0, -1), False) == (2, 12)
    assert reshape_target((2, 0, 4), (-1, 4), False) == (0, 4)
    assert reshape_target((0, 3), (3, 0), True) == (3, 0)
    assert list(slice_indices(5, -2, BIG, 1)) == [3, 4]
    assert list(slice_indices(5, BIG, -BIG - 1, -2)) == [4, 2, 0]
    assert list(slice_indices(4, -100, 100, 1)) == [0, 1, 2, 3]
    assert list(slice_indices(4, 3, -100, -1)) == [3, 2, 1, 0]


# ---------------------------------------------------------------- bounds


@pytest.mark.parametrize(("op", "attrs", "inputs"), [
    ("ConstantOfShape", {}, [_a([2**20, 2**20])]),  # 2^40 elements
    ("ConstantOfShape", {}, [_a([2**21])]),  # just past the limit
    ("Expand", {}, [_a([1]), _a([2**20, 2**20])]),
    ("Range", {}, [_a(0), _a(2**40), _a(1)]),
    ("Range", {}, [_a(0.0, np.float32), _a(1e12, np.float32), _a(1.0, np.float32)]),
    ("Concat", {"axis": 0}, [np.zeros(2**19, I64), np.zeros(2**19, I64), _a([1])]),
])
def test_nothing_past_the_element_limit_is_materialised(op, attrs, inputs):
    tracemalloc.start()
    try:
        got = evaluate_node(_node(op, len(inputs), **attrs), inputs, [a.shape for a in inputs], 17)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got is None
    assert peak < 2**20  # far below even the limit's own 8 MiB: nothing was allocated


def test_the_limit_itself_is_evaluated():
    got = evaluate_node(_node("ConstantOfShape", 1), [_a([MAX_ELEMENTS])], [(1,)], 17)
    assert got is not None and got.shape == (MAX_ELEMENTS,) and got.dtype == np.float32


# ---------------------------------------------------------------- models


def _chain(shape=(4, 2, 32, 64), dim=None) -> onnx.ModelProto:
    """TorchScript's pattern: x -> Shape -> Gather(0) -> Identity -> Unsqueeze -> Concat([-1, 64]) -> Reshape -> Relu."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(_a(0))),
        helper.make_node("Gather", ["s", "zero"], ["g0"], axis=0),
        helper.make_node("Identity", ["g0"], ["g"]),
        helper.make_node("Unsqueeze", ["g", "ax"], ["u"]),
        helper.make_node("Concat", ["u", "tail"], ["c"], axis=0),
        helper.make_node("Reshape", ["x", "c"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = [numpy_helper.from_array(_a([0]), "ax"), numpy_helper.from_array(_a([-1, 64]), "tail")]
    x_shape = list(shape) if dim is None else [dim, *shape[1:]]
    return make_model(nodes, [vi("x", x_shape)], [vi("y", None)], inits)


def _without_evaluation(monkeypatch):
    monkeypatch.setattr(shapeeval, "evaluate_shapes", lambda work, inferred, **_: shapeeval.Evaluated(inferred))


def test_torchscript_chain_plans_with_no_flags(tmp_path, monkeypatch):
    from onnxmem.planning.pipeline import PlanOptions, plan_model

    m = _chain()
    shapes = infer_shapes(m)
    assert shapes.shapes["r"] == (4, 64, 64) and shapes.shapes["y"] == (4, 64, 64)
    assert shapes.sources["r"] == "evaluated" and shapes.sources["y"] == "evaluated"
    path = tmp_path / "chain.onnx"
    onnx.save(m, path)
    plan = plan_model(path, PlanOptions()).plan
    # x (4*2*32*64 float32 = 64 KiB) is live at the Relu (r is a view of it) beside y (64 KiB);
    # the shape values (s, g0, g, u, c: at most 32 B each) die before y is made and fit in its bytes
    assert plan.arena_size == 2 * 4 * 2 * 32 * 64 * 4 == plan.lower_bound
    # onnxruntime agrees on the shapes
    x = np.random.default_rng(0).standard_normal((4, 2, 32, 64)).astype(np.float32)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == shapes.shapes["y"]
    # without the evaluator, neither onnx's nor onnxruntime's inference knows r
    _without_evaluation(monkeypatch)
    with pytest.raises(ShapeError, match="unknown"):
        infer_shapes(m)


def test_the_callers_model_is_not_changed():
    m = _chain()
    before = m.SerializeToString()
    infer_shapes(m)
    assert m.SerializeToString() == before


def test_chain_over_a_symbolic_dim_needs_its_binding():
    m = _chain(dim="batch")
    with pytest.raises(ShapeError, match="--dim batch=N"):
        infer_shapes(m)
    shapes = infer_shapes(m, dims={"batch": 3})
    assert shapes.shapes["y"] == (3, 64, 64)
    assert shapes.sources["y"] == "evaluated"


def test_expand_and_constantofshape_from_shapes(tmp_path):
    # TorchScript's expand_as: Where(Equal(shape, -1), ones, shape) -> Expand, and a mask by ConstantOfShape
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Identity", ["s"], ["s1"]),
        helper.make_node("Equal", ["s1", "minus1"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "s1"], ["tgt"]),
        helper.make_node("Expand", ["b", "tgt"], ["e"]),
        helper.make_node("Slice", ["s1", "st", "en"], ["hw"]),
        helper.make_node("ReduceProd", ["hw"], ["n"], keepdims=1),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["nf", "two"], ["half"]),
        helper.make_node("Cast", ["half"], ["hi"], to=TensorProto.INT64),
        helper.make_node("ConstantOfShape", ["hi"], ["z"], value=numpy_helper.from_array(_a([1.0], np.float32))),
        helper.make_node("Range", ["r0", "n0", "r1"], ["pos"]),
        helper.make_node("Add", ["e", "x"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(_a([-1, -1, -1]), "minus1"),
        numpy_helper.from_array(_a([1, 1, 1]), "ones"),
        numpy_helper.from_array(_a([1]), "st"),
        numpy_helper.from_array(_a([BIG]), "en"),
        numpy_helper.from_array(_a(2.0, np.float32), "two"),
        numpy_helper.from_array(_a(0), "r0"),
        numpy_helper.from_array(_a(1), "r1"),
    ]
    nodes.insert(7, helper.make_node("Squeeze", ["n"], ["n0"]))
    m = make_model(nodes, [vi("x", [2, 3, 5]), vi("b", [1, 1, 5])],
                   [vi("y", None), vi("z", None), vi("pos", None, TensorProto.INT64)], inits)
    shapes = infer_shapes(m)
    assert shapes.shapes["e"] == (2, 3, 5)
    assert shapes.shapes["z"] == (7,)  # 15 / 2 = 7.5, cast to int64 truncates
    assert shapes.shapes["pos"] == (15,)
    feeds = {"x": np.ones((2, 3, 5), np.float32), "b": np.ones((1, 1, 5), np.float32)}
    outs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert [o.shape for o in outs] == [shapes.shapes[n] for n in ("y", "z", "pos")]
    assert {shapes.sources[n] for n in ("z", "pos")} == {"evaluated"}


def _torch_pad(x_shape, pad) -> onnx.ModelProto:
    """``F.pad(x, pad)`` as TorchScript exports it at opset 11+: pads reordered by ConstantOfShape,
    Reshape, a reversing Slice and a Transpose (the pattern of NASNet's and Swin's padding)."""
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(_a(v)))  # noqa: E731
    nodes = [
        c("pad", pad), c("zero", [0]), c("two", 2), c("m12", [-1, 2]), c("m1", [-1]),
        c("s_st", [-1]), c("s_en", [-(2**63) + 1]), c("s_ax", [0]), c("s_sp", [-1]),
        helper.make_node("Shape", ["pad"], ["pad_shape"]),
        helper.make_node("Gather", ["pad_shape", "zero"], ["pad_len"], axis=0),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Size", ["xs"], ["rank"]),
        helper.make_node("Mul", ["rank", "two"], ["rank2"]),
        helper.make_node("Sub", ["rank2", "pad_len"], ["ext"]),
        helper.make_node("ConstantOfShape", ["ext"], ["zeros"], value=numpy_helper.from_array(_a([0]))),
        helper.make_node("Concat", ["pad", "zeros"], ["p0"], axis=0),
        helper.make_node("Reshape", ["p0", "m12"], ["p1"]),
        helper.make_node("Slice", ["p1", "s_st", "s_en", "s_ax", "s_sp"], ["p2"]),
        helper.make_node("Transpose", ["p2"], ["p3"], perm=[1, 0]),
        helper.make_node("Reshape", ["p3", "m1"], ["p4"]),
        helper.make_node("Cast", ["p4"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads"], ["y"]),
    ]
    return make_model(nodes, [vi("x", list(x_shape))], [vi("y", None)])


def test_torchscript_pad_pattern(monkeypatch):
    m = _torch_pad((1, 3, 5, 7), [1, 2, 0, 1])
    shapes = infer_shapes(m)
    assert shapes.shapes["y"] == (1, 3, 6, 10) and shapes.sources["y"] == "evaluated"
    x = np.ones((1, 3, 5, 7), np.float32)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == shapes.shapes["y"]
    # onnx's own inference stops at this chain (onnxruntime's symbolic one would follow it here)
    _without_evaluation(monkeypatch)
    assert infer_shapes(m).sources["y"] == "symbolic"


def test_swin_window_partition_pattern():
    """Swin's padding to a multiple of the window and its window partition, as TorchScript exports them."""
    ws = 4
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(_a(v)))  # noqa: E731
    g = lambda src, i, out: helper.make_node("Gather", [src, f"i{i}"], [out], axis=0)  # noqa: E731
    u = lambda src, out: helper.make_node("Unsqueeze", [src, "ax0"], [out])  # noqa: E731
    nodes = [
        c("i0", 0), c("i1", 1), c("i2", 2), c("ws", ws), c("ax0", [0]), c("zeros4", [0, 0, 0, 0]), c("zero1", [0]),
        c("ws1", [ws]), c("ch", [96]), c("flat", [-1, ws * ws, 96]),
        helper.make_node("Shape", ["x"], ["s"]), g("s", 1, "h"), g("s", 2, "w"),
        # pad_b = (ws - h % ws) % ws, pad_r likewise
        helper.make_node("Mod", ["h", "ws"], ["hm"]), helper.make_node("Sub", ["ws", "hm"], ["hs"]),
        helper.make_node("Mod", ["hs", "ws"], ["pad_b"]),
        helper.make_node("Mod", ["w", "ws"], ["wm"]), helper.make_node("Sub", ["ws", "wm"], ["wsub"]),
        helper.make_node("Mod", ["wsub", "ws"], ["pad_r"]),
        u("pad_b", "pb"), u("pad_r", "pr"),
        helper.make_node("Concat", ["zeros4", "zero1", "pb", "pr", "zero1"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["xp"]),
        # x.view(B, Hp // ws, ws, Wp // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
        helper.make_node("Shape", ["xp"], ["sp"]), g("sp", 0, "b"), g("sp", 1, "hp"), g("sp", 2, "wp"),
        helper.make_node("Div", ["hp", "ws"], ["nh"]), helper.make_node("Div", ["wp", "ws"], ["nw"]),
        u("b", "b1"), u("nh", "nh1"), u("nw", "nw1"),
        helper.make_node("Concat", ["b1", "nh1", "ws1", "nw1", "ws1", "ch"], ["view"], axis=0),
        helper.make_node("Reshape", ["xp", "view"], ["xv"]),
        helper.make_node("Transpose", ["xv"], ["xt"], perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["xt", "flat"], ["y"]),
    ]
    m = make_model(nodes, [vi("x", [1, 7, 10, 96])], [vi("y", None)])
    shapes = infer_shapes(m)
    assert shapes.shapes["xp"] == (1, 8, 12, 96)
    assert shapes.shapes["xv"] == (1, 2, 4, 3, 4, 96)
    assert shapes.shapes["y"] == (6, 16, 96)
    assert {shapes.sources[n] for n in ("xp", "xv", "y")} == {"evaluated"}
    x = np.ones((1, 7, 10, 96), np.float32)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == shapes.shapes["y"]


def _same_padding_stack(blocks: int, width: int = 7) -> onnx.ModelProto:
    """timm's "same" padding as TorchScript exports it, ``blocks`` times in a row.

    Each block reads the width of the previous block's output (Shape -> Gather), computes
    ``max((ceil(w / 2) - 1) * 2 + 3 - w, 0)`` in float (Cast, Div, Ceil, Clip: nothing onnx's
    data propagation follows) and pads by it, so block k's shape is known only after block
    k - 1's Pad was inferred: one more evaluation round per block.
    """
    c = lambda name, v, dt=I64: numpy_helper.from_array(_a(v, dt), name)  # noqa: E731
    inits = [c("i3", 3), c("ax0", [0]), c("two", 2.0, np.float32), c("one", 1.0, np.float32),
             c("three", 3.0, np.float32), c("zero", 0.0, np.float32), c("head", [0, 0, 0, 0, 0, 0, 0])]
    nodes, x = [], "x"
    for k in range(blocks):
        steps = [  # (op, inputs, output, attributes)
            ("Shape", [x], "s", {}), ("Gather", ["s{k}", "i3"], "w", {"axis": 0}),
            ("Cast", ["w{k}"], "wf", {"to": TensorProto.FLOAT}), ("Div", ["wf{k}", "two"], "half", {}),
            ("Ceil", ["half{k}"], "out", {}), ("Sub", ["out{k}", "one"], "m1", {}),
            ("Mul", ["m1{k}", "two"], "m2", {}), ("Add", ["m2{k}", "three"], "need", {}),
            ("Sub", ["need{k}", "wf{k}"], "left", {}), ("Clip", ["left{k}", "zero"], "clip", {}),
            ("Cast", ["clip{k}"], "pad", {"to": TensorProto.INT64}), ("Unsqueeze", ["pad{k}", "ax0"], "u", {}),
            ("Concat", ["head", "u{k}"], "pads", {"axis": 0}), ("Pad", [x, "pads{k}"], "y", {}),
        ]
        for op, ins, out, attrs in steps:
            nodes.append(helper.make_node(op, [i.format(k=k) for i in ins], [f"{out}{k}"], **attrs))
        x = f"y{k}"
    return make_model(nodes, [vi("x", [1, 2, 3, width])], [vi(x, None)], inits)


def test_same_padding_stack_needs_a_round_per_block():
    blocks = 12  # more rounds than the first versions allowed (8): Swin-T's exports need 16
    m = _same_padding_stack(blocks)
    shapes = infer_shapes(m)
    width, want = 7, []
    for _ in range(blocks):
        width += max((math.ceil(width / 2) - 1) * 2 + 3 - width, 0)
        want.append(width)
    assert [shapes.shapes[f"y{k}"][3] for k in range(blocks)] == want
    assert {shapes.sources[f"y{k}"] for k in range(blocks)} == {"evaluated"}
    x = np.ones((1, 2, 3, 7), np.float32)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == shapes.shapes[f"y{blocks - 1}"]
    assert shapeeval.MAX_ROUNDS >= blocks + 1


def test_the_rounds_ask_each_dim_once_and_keep_what_they_knew():
    """Every round reads the shapes inference found: each dim is resolved once over all the
    rounds, and the widths come out as in one round per block."""
    from onnxmem.shapes.engines import run_onnx_inference

    blocks = 6
    m = _same_padding_stack(blocks)
    asked: list[object] = []

    def resolve(d):
        asked.append(d)
        return d if isinstance(d, int) and d >= 0 else None

    done = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=run_onnx_inference, resolve=resolve,
                                     carry=False)
    assert done.rounds == blocks and len(asked) == len(set(asked)) > 0
    width, want = 7, []
    for _ in range(blocks):
        width += max((math.ceil(width / 2) - 1) * 2 + 3 - width, 0)
        want.append(width)
    got = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in done.model.graph.value_info}
    got.update({vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in done.model.graph.output})
    assert [got[f"y{k}"][3] for k in range(blocks)] == want


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    g = model.graph
    return {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in (*g.value_info, *g.output)}


def test_carried_shapes_need_one_inference_for_the_whole_chain():
    """Each block reads the shape of the previous block's Pad: carried forward by onnx's rule of
    each node between two inferences, the chain needs one inference, not one per block, and
    the result is the one of an inference per block, value for value and shape for shape."""
    from onnxmem.shapes.engines import run_onnx_inference

    blocks = 12
    m = _same_padding_stack(blocks)
    calls: list[int] = []

    def infer(model: onnx.ModelProto) -> onnx.ModelProto | None:
        calls.append(1)
        return run_onnx_inference(model)

    resolve = lambda d: d if isinstance(d, int) and d >= 0 else None  # noqa: E731
    carried = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=infer, resolve=resolve)
    assert carried.rounds == 1 and len(calls) == 1
    linked = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=run_onnx_inference, resolve=resolve,
                                       carry=False)
    assert linked.rounds == blocks
    assert carried.shapes == linked.shapes and carried.folded == linked.folded
    assert carried.values.keys() == linked.values.keys()
    assert all(np.array_equal(carried.values[k], linked.values[k]) for k in linked.values)
    assert _inferred_shapes(carried.model) == _inferred_shapes(linked.model)
    assert carried.model.SerializeToString() == linked.model.SerializeToString()


def test_a_carried_shape_the_inference_does_not_give_falls_back_to_a_round_per_link():
    """Where the last inference does not give a carried shape (here an inference that loses the
    first Pad's), the pass runs again without carrying: the same result as an inference per link."""
    from onnxmem.shapes.engines import run_onnx_inference

    blocks = 4
    m = _same_padding_stack(blocks)

    def forgetful(model: onnx.ModelProto) -> onnx.ModelProto | None:
        out = run_onnx_inference(model)
        if out is not None:
            keep = [vi for vi in out.graph.value_info if vi.name != "y0"]
            del out.graph.value_info[:]
            out.graph.value_info.extend(keep)
        return out

    resolve = lambda d: d if isinstance(d, int) and d >= 0 else None  # noqa: E731
    carried = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=forgetful, resolve=resolve)
    linked = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=forgetful, resolve=resolve, carry=False)
    assert carried.rounds == linked.rounds
    assert carried.shapes == linked.shapes
    assert carried.model.SerializeToString() == linked.model.SerializeToString()


def test_data_dependent_shape_stays_unknown():
    # NonZero's length depends on x's data: no evaluation may guess it
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["s"]),
        helper.make_node("Identity", ["s"], ["s1"]),
        helper.make_node("ConstantOfShape", ["s1"], ["z"]),
    ]
    m = make_model(nodes, [vi("x", [3, 4])], [vi("z", None)])
    with pytest.raises(ShapeError, match="depend on data.*--measure-shapes"):
        infer_shapes(m)


def test_graph_input_values_are_never_read():
    # the Reshape's shape is a graph input: its value is data, even with a default initializer
    nodes = [helper.make_node("Identity", ["spec"], ["s1"]), helper.make_node("Reshape", ["x", "s1"], ["y"])]
    m = make_model(nodes, [vi("x", [2, 6]), vi("spec", [2], TensorProto.INT64)], [vi("y", None)],
                   [numpy_helper.from_array(_a([3, 4]), "spec")])
    with pytest.raises(ShapeError, match="unknown"):
        infer_shapes(m)


def test_plan_of_a_chain_with_file_order(tmp_path):
    planned = plan_file_order(_chain(shape=(2, 4, 8, 64)), tmp_path)
    assert planned.shapes.shapes["y"] == (2, 32, 64)
    assert planned.plan.arena_size == 2 * 2 * 4 * 8 * 64 * 4


def test_hostile_sizes_are_refused_quickly():
    import time

    t0 = time.process_time()
    # a product of a million integers leaves int64 after a few dozen: never computed in full
    assert evaluate_node(_node("ReduceProd", 1, keepdims=0), [np.full(2**20, 2**40, I64)], [(2**20,)], 17) is None
    assert evaluate_node(_node("ReduceProd", 1, keepdims=0), [np.full(2**20, -3, I64)], [(2**20,)], 17) is None
    # a shape of a million dims is past any rank
    spec = np.ones(2**20, I64)
    assert evaluate_node(_node("Reshape", 2), [_a([1]), spec], [(1,), spec.shape], 17) is None
    assert evaluate_node(_node("ConstantOfShape", 1), [spec], [spec.shape], 17) is None
    assert evaluate_node(_node("Expand", 2), [_a([1]), spec], [(1,), spec.shape], 17) is None
    assert time.process_time() - t0 < 10


def test_failing_arithmetic_on_a_million_elements_is_quick():
    import time

    big, zeros = np.full(2**20, 2**62, I64), np.zeros(2**20, I64)
    t0 = time.process_time()
    for op, rhs in (("Mul", big), ("Add", big), ("Div", zeros), ("Mod", zeros)):
        assert evaluate_node(_node(op, 2), [big, rhs], [(2**20,)] * 2, 17) is None
    assert time.process_time() - t0 < 5


def test_reduceprod_is_exact_and_checked():
    def prod(x, **attrs):
        return evaluate_node(_node("ReduceProd", 1, **attrs), [x], [x.shape], 17)

    got = prod(_a([[2**31, 2**31], [3, -5]]), axes=[1], keepdims=0)
    assert got is not None and got.tolist() == [2**62, -15]
    assert prod(_a([[2**32, 2**31]]), axes=[1]) is None  # 2^63 leaves int64
    got = prod(_a([[0, 2**62, 2**62]]), axes=[-1])
    assert got is not None and got.tolist() == [[0]]
    got = prod(_a([[2, 3], [4, 5]], np.int32), axes=[0])
    assert got is not None and got.dtype == np.int32 and got.tolist() == [[8, 15]]


def test_total_budget_bounds_the_pass():
    # 20 values of 2^20 int64 each, every one in a shape slot: at most MAX_TOTAL_ELEMENTS are kept
    nodes, inits = [], [numpy_helper.from_array(_a([2**20]), "n"), numpy_helper.from_array(_a([1]), "one")]
    for k in range(20):
        nodes.append(helper.make_node("Expand", ["one", "n"], [f"e{k}"]))
        nodes.append(helper.make_node("Reshape", ["x", f"e{k}"], [f"r{k}"]))
    m = make_model(nodes, [vi("x", [1])], [vi(f"r{k}", None) for k in range(20)], inits)
    done = shapeeval.evaluate_shapes(m, m, infer=lambda _: None, resolve=lambda d: d if isinstance(d, int) else None)
    kept = sum(v.size for v in done.values.values())
    assert 0 < kept <= shapeeval.MAX_TOTAL_ELEMENTS
    assert len(done.values) == shapeeval.MAX_TOTAL_ELEMENTS // 2**20 - 1  # the initializers take a little


def test_hostile_constants_are_unknown_values():
    # dims that promise 2^40 elements over 8 bytes of data, a string, a sparse value: never decoded
    liar = onnx.TensorProto(name="liar", data_type=TensorProto.INT64, dims=[2**20, 2**20], raw_data=b"\0" * 8)
    short = onnx.TensorProto(name="short", data_type=TensorProto.INT64, dims=[3], raw_data=b"\0" * 8)
    text = helper.make_tensor("text", TensorProto.STRING, [1], [b"__import__('os')"])
    for attrs in ({"value": liar}, {"value": short}, {"value": text}, {"value_string": "1+1"}):
        assert evaluate_node(helper.make_node("Constant", [], ["out"], **attrs), [], [], 17) is None
    # a model whose Reshape shape comes from such a constant stays unknown, with the usual error
    nodes = [helper.make_node("Constant", [], ["c"], value=short), helper.make_node("Reshape", ["x", "c"], ["y"])]
    with pytest.raises(ShapeError, match="unknown"):
        infer_shapes(make_model(nodes, [vi("x", [2, 3])], [vi("y", None)]))


def test_only_slots_whose_node_is_left_open_are_evaluated():
    """onnx's data propagation sizes a Reshape whose target is Shape -> Gather -> Unsqueeze ->
    Concat; a Range's bound from a Shape it does not: only the Range's slots are evaluated, and
    both outputs get their shapes."""
    from onnxmem.shapes.engines import run_onnx_inference

    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "axes"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Shape", ["flat"], ["fs"]),
        helper.make_node("Gather", ["fs", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
    ]
    m = make_model(nodes, [vi("x", [2, 3, 4])], [vi("flat", None), vi("r", None)],
                   inits=[i64("zero", 0), i64("one", 1), i64("axes", [0]), i64("minus1", [-1])])
    resolve = lambda d: d if isinstance(d, int) and d >= 0 else None  # noqa: E731
    done = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=run_onnx_inference, resolve=resolve)
    assert "target" not in done.values and "d0" not in done.values
    assert done.values["n"].item() == 12
    assert _inferred_shapes(done.model)["flat"] == [2, 12]
    final = infer_shapes(m).shapes
    assert final["flat"] == (2, 12) and final["r"] == (12,)


def _reshape_stack(blocks: int) -> onnx.ModelProto:
    """``blocks`` alike blocks in a row, each reshaping the previous block's output to its own
    shape read through a float Cast (nothing onnx's data propagation follows): block k's shape is
    known only once block k - 1's Reshape is, and every block asks onnx's rules the same."""
    c = lambda name, v, dt=I64: numpy_helper.from_array(_a(v, dt), name)  # noqa: E731
    nodes, x = [], "x"
    for k in range(blocks):
        nodes += [helper.make_node("Shape", [x], [f"s{k}"]),
                  helper.make_node("Cast", [f"s{k}"], [f"f{k}"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"f{k}", "one"], [f"m{k}"]),
                  helper.make_node("Cast", [f"m{k}"], [f"t{k}"], to=TensorProto.INT64),
                  helper.make_node("Reshape", [x, f"t{k}"], [f"r{k}"]),
                  helper.make_node("Relu", [f"r{k}"], [f"y{k}"])]
        x = f"y{k}"
    return make_model(nodes, [vi("x", [2, 3, 4])], [vi(x, None)], [c("one", 1.0, np.float32)])


def _rules_asked(monkeypatch, blocks: int) -> tuple[int, shapeeval.Evaluated, shapeeval.Evaluated]:
    """How often onnx's node rule is asked in the pass over :func:`_reshape_stack`, the pass, and
    the same pass without carried shapes."""
    from onnxmem.shapes.engines import run_onnx_inference

    m = _reshape_stack(blocks)
    asked: list[str] = []
    rule = onnx.shape_inference.infer_node_outputs

    def counted(schema, node, *args, **kwargs):
        asked.append(node.op_type)
        return rule(schema, node, *args, **kwargs)

    resolve = lambda d: d if isinstance(d, int) and d >= 0 else None  # noqa: E731
    monkeypatch.setattr(onnx.shape_inference, "infer_node_outputs", counted)
    carried = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=run_onnx_inference, resolve=resolve)
    monkeypatch.setattr(onnx.shape_inference, "infer_node_outputs", rule)
    linked = shapeeval.evaluate_shapes(m, run_onnx_inference(m), infer=run_onnx_inference, resolve=resolve,
                                       carry=False)
    return len(asked), carried, linked


def test_alike_nodes_ask_onnx_rule_once(monkeypatch):
    """Nodes alike in op, attributes and input types and data take the answer onnx's rule gave
    the first: as many questions for 8 blocks as for 3, one inference for the whole chain, and
    the result of an inference per block, byte for byte."""
    few, _, _ = _rules_asked(monkeypatch, 3)
    many, carried, linked = _rules_asked(monkeypatch, 8)
    assert 0 < many == few
    assert carried.rounds == 1 and linked.rounds == 8
    assert carried.shapes == linked.shapes and carried.folded == linked.folded
    assert carried.model.SerializeToString() == linked.model.SerializeToString()
    assert _inferred_shapes(carried.model)["y7"] == [2, 3, 4]


def test_constants_holding_one_tensor_share_its_value():
    """Constant nodes holding the same tensor, read with a table of the tensors read: one array,
    equal to each read alone; a tensor that is no value stays unknown, from the table too."""
    t = numpy_helper.from_array(_a([[1, 2], [3, 4]]))
    a, b = (helper.make_node("Constant", [], [n], value=t) for n in ("a", "b"))
    short = onnx.TensorProto(data_type=TensorProto.INT64, dims=[3], int64_data=[1, 2])  # 2 values for 3
    bad = helper.make_node("Constant", [], ["c"], value=short)
    tensors: dict[bytes, np.ndarray | None] = {}
    first, second = (evaluate_node(n, [], [], 17, tensors=tensors) for n in (a, b))
    assert first is second and np.array_equal(first, evaluate_node(a, [], [], 17))
    assert first.dtype == I64 and first.shape == (2, 2)
    assert evaluate_node(bad, [], [], 17, tensors=tensors) is None
    assert evaluate_node(bad, [], [], 17, tensors=tensors) is None and len(tensors) == 2


def test_shapes_from_the_declarations_read_are_the_models():
    """The known shapes and element types taken from what collect_types read of an inferred model
    are those read from the model itself; where the model declares a name twice (the two readers
    take different declarations of it) none are taken."""
    from onnxmem.shapes.engines import collect_types, run_onnx_inference
    from onnxmem.shapes.evalbase import declared_shapes, known_shapes

    inferred = run_onnx_inference(_same_padding_stack(3))
    resolve = lambda d: d if isinstance(d, int) and d >= 0 else None  # noqa: E731
    want_elems: dict[str, int] = {}
    want = known_shapes(inferred, resolve, {}, want_elems)
    elems: dict[str, int] = {}
    assert declared_shapes(inferred, collect_types(inferred), resolve, {}, elems) == want
    assert elems == want_elems and want["head"] == (7,) and want_elems["s0"] == TensorProto.INT64
    twice = onnx.ModelProto()
    twice.CopyFrom(inferred)
    twice.graph.value_info.append(vi("s0", [9], TensorProto.INT64))
    assert declared_shapes(twice, collect_types(twice), resolve, {}, {}) is None
