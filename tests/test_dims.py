"""Binding dims: -1 and unnamed dims, typos, non-positive values, and the message that leads to a plan."""

from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from onnxmem.cli.main import main
from onnxmem.core.errors import ShapeError
from onnxmem.model import dim_names, graph_inputs, load_model, parse_dim_binding
from onnxmem.runtime.ort import measure_shapes
from onnxmem.shapes import infer_shapes

from .helpers import make_model, vi


def _conv_net(x_shape) -> onnx.ModelProto:
    """x -> Relu -> Transpose -> y, with the input's declared dims as given."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 1, 3, 2])]
    return make_model(nodes, [vi("x", x_shape)], [vi("y", None)])


def _unnamed(model: onnx.ModelProto, axes) -> onnx.ModelProto:
    """Clear the dims at ``axes`` of input x (an unnamed, empty dim: shown as '?')."""
    for a in axes:
        model.graph.input[0].type.tensor_type.shape.dim[a].Clear()
    return model


def test_minus_one_and_unnamed_dims_bind_through_input_shape():
    model = _unnamed(_conv_net([-1, 3, 1, 1]), axes=[2, 3])
    assert graph_inputs(model) == {"x": (None, 3, None, None)}
    shapes = infer_shapes(model, input_shapes={"x": (2, 3, 48, 192)})
    assert shapes.shapes["y"] == (2, 3, 192, 48)
    with pytest.raises(ShapeError, match=r"axis 1 is 4 but the model fixes it to 3"):
        infer_shapes(model, input_shapes={"x": (2, 4, 48, 192)})


def test_measured_shapes_with_minus_one_dims():
    """The measuring run takes the pinned shape for a -1 dim (a traceback once)."""
    model = _conv_net([-1, 3, 5, 6])
    measured = measure_shapes(model, input_shapes={"x": (2, 3, 5, 6)})
    assert measured["y"][1] == (2, 3, 6, 5)


def test_unbound_message_names_the_input_its_pattern_and_a_ready_flag():
    model = _unnamed(_conv_net(["batch", 3, 1, -1]), axes=[2])
    with pytest.raises(ShapeError) as err:
        infer_shapes(model)
    msg = str(err.value)
    assert "'x' [batch, 3, ?, ?]: pass --input-shape x=N0x3xN2xN3 (or --dim batch=N)" in msg
    assert "unk__" not in msg and "\n" not in msg


def test_output_only_and_inferred_dims_are_never_offered():
    """Dims that only outputs carry, or that inference makes up, are not what a user binds."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Relu", ["nz"], ["y"])]
    model = make_model(nodes, [vi("x", [2, 3])], [vi("y", ["out_only", "out_n"], onnx.TensorProto.INT64)])
    with pytest.raises(ShapeError) as err:
        infer_shapes(model)
    msg = str(err.value)
    assert "depend on data" in msg and "--measure-shapes" in msg
    assert "out_only" not in msg and "unk__" not in msg


def test_a_typo_in_dim_is_an_error_that_lists_the_names():
    model = _conv_net(["batch", 3, 4, 4])
    assert dim_names(model) == {"batch"}
    with pytest.raises(ShapeError, match=r"--dim 'batchsize'=1 names no dim of the model; its named dims are 'batch'"):
        infer_shapes(model, dims={"batchsize": 1, "batch": 1})
    with pytest.raises(ShapeError, match="it has no named dims"):
        infer_shapes(_conv_net([1, 3, 4, 4]), dims={"batch": 1})
    # the zoo job binds one set of dims over many models: there it is no error
    assert infer_shapes(model, dims={"batchsize": 1, "batch": 2}, strict_dims=False).shapes["y"] == (2, 3, 4, 4)


def test_negative_dims_are_refused_and_zero_is_a_size():
    with pytest.raises(ShapeError, match="must be an integer >= 0, not -3"):
        parse_dim_binding("batch=-3")
    assert parse_dim_binding("past_seq=0") == ("past_seq", 0)


def test_placeholder_dim_names_are_unnamed_per_axis(tmp_path):
    """An exporter's '?' on every unknown axis does not tie height to width (issue 12, item 2)."""
    path = tmp_path / "m.onnx"
    onnx.save(_conv_net([-1, 3, "?", "?"]), path)
    model = load_model(path)
    assert graph_inputs(model) == {"x": (None, 3, None, None)}
    assert "?" not in dim_names(model)
    shapes = infer_shapes(model, input_shapes={"x": (1, 3, 48, 192)})
    assert shapes.shapes["y"] == (1, 3, 192, 48)
    out = CliRunner().invoke(main, ["plan", str(path), "--input-shape", "x=1x3x48x192"])
    assert out.exit_code == 0, out.output
    # x and r = Relu(x) share one buffer (in place), y = Transpose(r) another: 2 x 1*3*48*192*4 B
    assert "(221,184 B)   +0.00% over the bound" in out.output


def test_a_dim_is_read_as_a_name_or_as_an_expression_of_bound_names():
    from onnxmem.model.dims import resolve_dim

    dims = {"N": 3, "seq": 5}
    assert [resolve_dim(d, dims) for d in ("N", "seq", "unk__12", "floor", "N_2")] == [3, 5, None, None, None]
    assert [resolve_dim(d, dims) for d in ("2*N", "N+seq", "seq - N", "floor(seq/N)", "12", "N*unk")] == \
        [6, 8, 2, 1, 12, None]
    assert [resolve_dim(d, dims) for d in (7, -1, None, "N-seq", "")] == [7, None, None, None, None]


def test_open_input_dims_names_each_dim_left_without_a_value():
    """Named dims of the graph inputs (not weights) that the bound names leave open, each with its
    inputs; a dim that is no identifier is bound by its text, or by every name it reads."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    from onnxmem.model import open_input_dims

    graph = helper.make_graph(
        [], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch-size", "2*n", "n", 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", None]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, ["wdim"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    model = helper.make_model(graph)
    assert open_input_dims(model, []) == {"batch-size": ["x"], "2*n": ["x"], "n": ["x", "y"]}
    assert open_input_dims(model, ["n"]) == {"batch-size": ["x"]}
    assert open_input_dims(model, ["n", "batch-size"]) == {}
