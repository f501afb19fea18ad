"""A graph's nodes read once (onnxmem.model.nodes): the fields, their names' str objects, and
the steps that take them (shape inference, the windows, the view) giving what they give alone."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

import onnxmem.shapes.pieces as pieces
from onnxmem.graph import build_view
from onnxmem.model import load_model, read_nodes
from onnxmem.model.generate import transformer
from onnxmem.shapes import infer_shapes
from onnxmem.shapes.engines import strip_for_inference

from .conftest import SHIPPED
from .helpers import make_model, vi


def _omitted_input_model() -> onnx.ModelProto:
    """A Clip whose min is omitted (``""``), a node named nothing, a weight read twice."""
    w = helper.make_tensor("w", onnx.TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"], name="add"),
        helper.make_node("Clip", ["a", "", "w"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return make_model(nodes, [vi("x", [4])], [vi("y", [4])], inits=[w])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_fields_are_the_messages_fields(path):
    model = load_model(path)
    g = model.graph
    f = read_nodes(g)
    assert len(f) == len(g.node) > 0 and f.of(g)
    assert f.op_types == [n.op_type for n in g.node]
    assert f.domains == [n.domain for n in g.node]
    assert f.inputs == [tuple(n.input) for n in g.node]
    assert f.outputs == [tuple(n.output) for n in g.node]
    assert f.initializers == tuple(t.name for t in g.initializer)
    assert f.graph_inputs == tuple(v.name for v in g.input)


def test_each_name_is_one_str_object():
    model = _omitted_input_model()
    f = read_nodes(model.graph)
    assert f.inputs[1] == ("a", "", "w")
    assert f.inputs[1][0] is f.outputs[0][0]  # "a": made by Add, read by Clip
    assert f.inputs[1][2] is f.initializers[0] is f.inputs[0][1]  # the weight, wherever it is read
    assert f.inputs[0][0] is f.graph_inputs[0]
    # a name given as known is the object the fields take
    known = "".join(["c"])  # a str equal to "c", not the literal's object
    assert read_nodes(model.graph, [known]).outputs[1][0] is known


def test_fields_belong_to_their_graph():
    a, b = _omitted_input_model(), _omitted_input_model()
    f = read_nodes(a.graph)
    assert f.of(a.graph) and not f.of(b.graph)
    a.graph.node.add().CopyFrom(helper.make_node("Relu", ["y"], ["z"]))
    assert not f.of(a.graph)  # another number of nodes: read again


def test_inference_and_view_with_the_fields_give_what_they_give_alone():
    model = transformer(4)
    nodes = read_nodes(model.graph)
    alone = infer_shapes(model)
    shared = infer_shapes(model, nodes=nodes)
    assert (shared.dtypes, shared.shapes, shared.sources) == (alone.dtypes, alone.shapes, alone.sources)
    view = build_view(model, shared, nodes=nodes)
    assert view.ops == build_view(model, alone).ops
    assert view.tensors == build_view(model, alone).tensors
    # the records take the fields' tuples, and the shapes' keys are the fields' names
    assert all(op.inputs is nodes.inputs[op.index] and op.outputs is nodes.outputs[op.index] for op in view.ops)
    keys = {k: k for k in shared.shapes}
    assert all(keys[o] is o for op in view.ops for o in op.outputs if o)
    # read by the view alone, the names are still the shapes' own str objects
    keys = {k: k for k in alone.shapes}
    assert all(keys[n] is n for op in build_view(model, alone).ops for n in op.inputs + op.outputs if n)


def test_the_view_reads_its_graph_where_given_another_graphs_fields():
    model, other = transformer(2), _omitted_input_model()
    shapes = infer_shapes(model)
    view = build_view(model, shapes, nodes=read_nodes(other.graph))
    assert [op.op_type for op in view.ops] == [n.op_type for n in model.graph.node]
    assert view.ops == build_view(model, shapes).ops


def test_windows_take_the_fields_of_the_graph_they_read(monkeypatch):
    model = transformer(6)
    work = strip_for_inference(model)
    shell = strip_for_inference(model, flat=True, shell=True)
    nodes = read_nodes(model.graph)
    with_fields = pieces.infer_in_pieces(shell, window=11, flat=True, nodes=nodes, source=model.graph)
    assert with_fields is not None and with_fields == pieces.infer_in_pieces(work, window=11)
    # fields of another graph are not taken: the windows read the messages
    assert pieces.infer_in_pieces(work, window=11, nodes=read_nodes(_omitted_input_model().graph)) == with_fields


def test_a_bad_reshape_is_still_caught_with_the_fields():
    shape = helper.make_tensor("s", onnx.TensorProto.INT64, [2], [3, 3])
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad")]
    model = make_model(nodes, [vi("x", [2, 4])], [vi("y", None)], inits=[shape])
    with pytest.raises(Exception, match="Reshape node 'bad' makes 'x' of shape"):
        infer_shapes(model, nodes=read_nodes(model.graph))
