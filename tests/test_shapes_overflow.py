"""Shapes computed from a value past its dtype's range: planned as onnxruntime runs them, or refused.

An integer Cast narrows as onnxruntime's CPU kernel does (modulo 2^bits, two's complement);
an integer overflow in arithmetic and a float Cast past an integer's range (undefined in
onnxruntime's C++) leave the value unknown, and no shape after it is taken from a step
that computes it without the range (onnxruntime's symbolic inference): ``plan`` asks for
``--measure-shapes`` or gives the shape onnxruntime makes.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.core.errors import ShapeError
from onnxmem.shapes import infer_shapes
from onnxmem.shapes.engines import run_onnx_inference
from onnxmem.shapes.shapeeval import evaluate_node

from .helpers import make_model, plan_then_verify, vi

I64, I32, F = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT
INTS = {TensorProto.INT8: np.int8, TensorProto.INT16: np.int16, I32: np.int32, I64: np.int64,
        TensorProto.UINT8: np.uint8, TensorProto.UINT16: np.uint16, TensorProto.UINT32: np.uint32,
        TensorProto.UINT64: np.uint64}
#: values near every integer dtype's edges
EDGES = [0, 1, 2, 127, 128, 255, 256, -1, -128, -129, 65535, 65536, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1,
         2**32 - 1, 2**32 + 3, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 12345678901234, -98765432109]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _ints(name: str, values: list[int], dtype: int = I64) -> onnx.TensorProto:
    return helper.make_tensor(name, dtype, [len(values)], values)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _slice_model(chain: list[onnx.NodeProto], inits: list[onnx.TensorProto], x: tuple[int, int] = (2, 10)) -> onnx.ModelProto:
    """``x`` sliced on axis 1 from ``start``, which ``chain`` computes from ``d = Shape(x)[1]``."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["d"], axis=0),
             *chain, helper.make_node("Slice", ["x", "start", "end", "one"], ["y"]),
             helper.make_node("Relu", ["y"], ["z"])]
    return make_model(nodes, [vi("x", list(x))], [vi("z", None)], [_ints("one", [1]), _ints("end", [100]), *inits])


def _ort_shape(model: onnx.ModelProto, name: str = "z") -> tuple[int, ...]:
    x = np.ones(tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim), np.float32)
    out = _session(model).run([name], {"x": x})[0]
    return tuple(out.shape)


# the chain of the review: Shape -> Gather -> Add(2^32 - 7) -> Cast(to=int32) -> Slice's start
WRAPPED = ([helper.make_node("Add", ["d", "big"], ["b"]), helper.make_node("Cast", ["b"], ["c"], to=I32),
            helper.make_node("Cast", ["c"], ["start"], to=I64)], [_ints("big", [2**32 - 7])])


@pytest.mark.parametrize("src", list(INTS), ids=lambda t: TensorProto.DataType.Name(t))
def test_integer_cast_is_evaluated_as_onnxruntime_casts(src):
    """Every integer-to-integer Cast (and to bool) on values at the dtypes' edges: the evaluator's
    value is onnxruntime's, element for element and in dtype."""
    info = np.iinfo(INTS[src])
    x = np.array([v for v in EDGES if info.min <= v <= info.max], dtype=INTS[src])
    for dst in [*INTS, TensorProto.BOOL]:
        node = helper.make_node("Cast", ["x"], ["y"], to=dst)
        m = make_model([node], [vi("x", [x.size], src)], [vi("y", [x.size], dst)], opset=19)
        want = _session(m).run(None, {"x": x})[0]
        got = evaluate_node(node, [x], [x.shape], 19)
        assert got is not None and got.dtype == want.dtype and np.array_equal(got, want), (src, dst)


def test_wrapping_cast_into_slice_plans_and_verifies(tmp_path):
    model = _slice_model(*WRAPPED)
    assert _ort_shape(model) == (2, 7)
    info = infer_shapes(model)
    assert info.shapes["y"] == (2, 7) and info.sources["y"] == "evaluated"
    plan_then_verify(tmp_path, model)


#: chains whose value onnxruntime's C++ computes with undefined behaviour: never guessed
UNDEFINED = {
    "float cast past int64": ([helper.make_node("Cast", ["d"], ["f"], to=F), helper.make_node("Mul", ["f", "huge"], ["g"]),
                               helper.make_node("Cast", ["g"], ["start"], to=I64)],
                              [helper.make_tensor("huge", F, [1], [1e30])]),
    "int64 add overflow": ([helper.make_node("Add", ["d", "big"], ["start"])], [_ints("big", [2**63 - 3])]),
    "int32 mul overflow": ([helper.make_node("Cast", ["d"], ["d32"], to=I32), helper.make_node("Mul", ["d32", "big"], ["m"]),
                            helper.make_node("Cast", ["m"], ["start"], to=I64)], [_ints("big", [2**30], I32)]),
}


@pytest.mark.parametrize("case", list(UNDEFINED))
def test_undefined_values_leave_the_shape_to_a_measurement(case, tmp_path):
    model = _slice_model(*UNDEFINED[case])
    with pytest.raises(ShapeError, match=r"\('y', 'z'\).*--measure-shapes"):
        infer_shapes(model)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    r = run("plan", str(path), "-o", str(tmp_path / "p.json"))
    assert r.exit_code != 0
    assert "--measure-shapes" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "p.json").exists()
    r = run("plan", str(path), "--measure-shapes", "-o", str(tmp_path / "p.json"))
    assert r.exit_code == 0, r.output
    r = run("verify", str(path), "--plan", str(tmp_path / "p.json"))
    assert r.exit_code == 0, r.output


#: chains onnx's data propagation carried through a Cast unconverted: Reshape, Expand and
#: Slice shapes onnxruntime makes from the converted value
CONVERTED = {
    "int64 -> int32 into Expand": (
        [helper.make_node("Add", ["d", "big"], ["b"]), helper.make_node("Cast", ["b"], ["c"], to=I32),
         helper.make_node("Cast", ["c"], ["c64"], to=I64), helper.make_node("Concat", ["c64", "four"], ["t"], axis=0),
         helper.make_node("Expand", ["x", "t"], ["y"])],
        [_ints("big", [2**32 + 2]), _ints("four", [4])], (1, 4), (3, 4)),  # 1 + 2^32 + 2 is 3 in int32
    "int64 -> float -> int64 into Reshape": (
        [helper.make_node("Add", ["d", "big"], ["b"]), helper.make_node("Cast", ["b"], ["c"], to=F),
         helper.make_node("Cast", ["c"], ["c64"], to=I64), helper.make_node("Sub", ["c64", "big"], ["e"]),
         helper.make_node("Concat", ["e", "minus1"], ["t"], axis=0), helper.make_node("Reshape", ["x", "t"], ["y"])],
        [_ints("big", [2**24 + 2]), _ints("minus1", [-1])], (3, 4), (2, 6)),  # 2^24 + 5 is 2^24 + 4 in float32
}


@pytest.mark.parametrize("case", list(CONVERTED))
def test_values_converted_by_a_cast_are_not_propagated_unconverted(case, tmp_path):
    chain, inits, x, ort_shape = CONVERTED[case]
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["d"], axis=0),
             *chain, helper.make_node("Relu", ["y"], ["z"])]
    model = make_model(nodes, [vi("x", list(x))], [vi("z", None)], [_ints("zero", [0]), *inits])
    assert _ort_shape(model) == ort_shape
    info = infer_shapes(model)
    assert info.shapes["z"] == ort_shape and info.sources["y"] == "evaluated"
    plan_then_verify(tmp_path, model)


@pytest.mark.parametrize("flat", [False, True], ids=["looked-up", "flat"])
def test_hidden_casts_leave_the_inferred_graph_as_given(flat):
    """Converting Casts hidden from onnx's inference (twice here, the second reading the first's
    value): the model given is as it was, the result holds its nodes and no trace of the hiding,
    whether the caller says the graph is flat or it is looked up."""
    chain, inits, x, _ = CONVERTED["int64 -> int32 into Expand"]
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["d"], axis=0), *chain,
             helper.make_node("Cast", ["d"], ["h"], to=TensorProto.FLOAT16), helper.make_node("Relu", ["h"], ["r"])]
    model = make_model(nodes, [vi("x", list(x))], [vi("y", None), vi("r", None, TensorProto.FLOAT16)],
                       [_ints("zero", [0]), *inits])
    given = model.SerializeToString()
    inferred = run_onnx_inference(model, flat=flat)
    assert model.SerializeToString() == given  # hidden in place for the inference, put back after it
    assert inferred is not None and list(inferred.graph.node) == list(model.graph.node)
    typed = {v.name for v in inferred.graph.value_info}
    assert typed == {"s", "d", "b", "c", "c64", "t", "h"}
    assert inferred.SerializeToString() == run_onnx_inference(model, flat=not flat).SerializeToString()
