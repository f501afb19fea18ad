"""The stripped copy of a large graph without subgraphs as a shell: the windows read the model's own
nodes and small initializers, the copy is filled only where a step needs the whole graph, and the
filled shell is the copy stripped whole."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

import onnxmem.shapes.pieces as pieces
import onnxmem.shapes.steps as steps
from onnxmem.model import rename_dims
from onnxmem.model.generate import transformer
from onnxmem.shapes import infer_shapes
from onnxmem.shapes.engines import fill_shell, strip_for_inference

from .helpers import make_model, vi


def _mixed() -> onnx.ModelProto:
    """A small initializer (kept with its values), a large one (a typed input) and a dim name."""
    small = helper.make_tensor("s", onnx.TensorProto.INT64, [2], [-1, 4])
    large = helper.make_tensor("w", onnx.TensorProto.FLOAT, [2000], [0.5] * 2000)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"]),
             helper.make_node("ReduceSum", ["w"], ["z"], keepdims=0)]
    return make_model(nodes, [vi("x", ["batch", 8])], [vi("y", None), vi("z", None)], inits=[small, large])


def test_a_filled_shell_is_the_copy_stripped_whole():
    model = _mixed()
    whole = strip_for_inference(model, flat=True)
    shell = strip_for_inference(model, flat=True, shell=True)
    assert not shell.graph.node and not shell.graph.initializer
    assert [v.name for v in shell.graph.input] == ["x", "w"]  # the large one typed, as in the whole copy
    # declarations changed on the shell first (dims renamed) are kept when it is filled
    assert rename_dims(shell, [("", shell.graph)]) == rename_dims(whole, [("", whole.graph)])
    fill_shell(shell, model)
    assert shell == whole
    assert [t.name for t in shell.graph.initializer] == ["s"]


def test_a_shell_without_a_subgraph_flag_is_a_whole_copy():
    model = _mixed()
    assert strip_for_inference(model, shell=True) == strip_for_inference(model)  # not known flat: whole


@pytest.fixture
def cut_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "PIECE_NODES", 1)
    monkeypatch.setattr(pieces, "PIECE_WINDOW", 11)


def test_windows_shape_a_large_graph_from_a_shell_never_filled(cut_small, monkeypatch):
    filled: list[int] = []
    real = steps.fill_shell
    monkeypatch.setattr(steps, "fill_shell", lambda shell, model: (filled.append(1), real(shell, model)))
    model = transformer(4)
    info = infer_shapes(model)
    assert not filled  # every value shaped by the windows: the copy never took the nodes
    assert set(info.sources.values()) == {"onnx"}
    monkeypatch.setattr(pieces, "PIECE_NODES", 10**9)
    whole = infer_shapes(model)
    assert (info.dtypes, info.shapes) == (whole.dtypes, whole.shapes)


def test_a_shell_is_filled_where_the_windows_cannot_shape_the_graph(cut_small, monkeypatch):
    filled: list[int] = []
    real = steps.fill_shell
    monkeypatch.setattr(steps, "fill_shell", lambda shell, model: (filled.append(1), real(shell, model)))
    # the nodes out of topological order: no window is cut, the whole graph is inferred
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Sigmoid", ["x"], ["a"])]
    model = make_model(nodes, [vi("x", [2, 3])], [vi("y", None)])
    info = infer_shapes(model)
    assert filled == [1]
    monkeypatch.setattr(pieces, "PIECE_NODES", 10**9)
    whole = infer_shapes(model)
    assert (info.dtypes, info.shapes, info.sources) == (whole.dtypes, whole.shapes, whole.sources)
    assert info.shapes["a"] == (2, 3)
