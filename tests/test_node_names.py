"""Unique node names (:func:`onnxmem.graph.node_names`): the file's where they are unique and
given, else ``<op_type>_<index>`` with a suffix that no other node's name takes."""

from __future__ import annotations

from onnx import helper

from onnxmem.graph import node_names


def _graph(names: list[str]):
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=n) for i, n in enumerate(names)]
    return helper.make_graph(nodes, "g", [], [])


def test_named_nodes_keep_their_names():
    assert node_names(_graph(["a", "b", "c"])) == ["a", "b", "c"]


def test_unnamed_and_repeated_nodes_take_generated_names():
    # an empty name and the second "a" are renamed; "Relu_3" is taken by the file, so the
    # node at index 3 that needs a name skips it
    assert node_names(_graph(["a", "", "a", "", "Relu_3"])) == ["a", "Relu_1", "Relu_2", "Relu_3_1", "Relu_3"]


def test_generated_names_never_repeat_a_name():
    names = node_names(_graph(["", "Relu_0", "", "Relu_2_1", "Relu_2"]))
    assert len(set(names)) == len(names)
    assert names[1] == "Relu_0" and names[3] == "Relu_2_1" and names[4] == "Relu_2"
