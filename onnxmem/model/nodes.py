"""A graph's nodes read from their messages once, for the steps that each walk every node.

protobuf hands out a new Python object on every read of a message's field, and reading a
node's op type, domain, inputs and outputs takes about 4 us: on a 100,000-node graph each
walk that reads them is about 0.4 CPU s. The shape inference (the values to shape, the
windows of :mod:`onnxmem.shapes.pieces`, the checks of :mod:`onnxmem.shapes.consistency`)
and the planning view (:func:`onnxmem.graph.view.build_view`) read the same fields of the
main graph's nodes; :func:`read_nodes` reads them once and each of those steps takes them
from it. Subgraphs, attributes and node names are read where they are needed, from the
messages.

A :class:`NodeFields` belongs to the graph it was read from (:meth:`NodeFields.of`): a step
given the fields of another graph reads its graph's messages instead. The fields are taken
as read: a caller that changes the graph's nodes afterwards reads them again.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

import onnx

__all__ = ["NodeFields", "read_nodes"]


@dataclass(frozen=True, slots=True, eq=False)
class NodeFields:
    """``graph``'s nodes, by index: each one's op type (interned), domain, inputs (``""`` for an
    omitted one) and outputs; and the names of the graph's initializers and inputs, in file
    order. Each value name is one ``str`` object wherever it appears here (the first read of
    it), so records built from these share their names."""

    graph: onnx.GraphProto
    op_types: list[str]
    domains: list[str]
    inputs: list[tuple[str, ...]]
    outputs: list[tuple[str, ...]]
    initializers: tuple[str, ...]
    graph_inputs: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.op_types)

    def of(self, graph: onnx.GraphProto) -> bool:
        """Whether these are the fields of ``graph`` (the very message, with as many nodes)."""
        return self.graph is graph and len(self.op_types) == len(graph.node)


def read_nodes(graph: onnx.GraphProto, known: Iterable[str] = (), given: NodeFields | None = None) -> NodeFields:
    """The :class:`NodeFields` of ``graph``, each node's message read once; ``given`` itself where
    those are ``graph``'s (:meth:`NodeFields.of`: what a caller read already). ``known``: names
    whose str objects the fields take where they name the same value (the keys of shapes inferred
    without these fields), so that records built from both share one str per name."""
    if given is not None and given.of(graph):
        return given
    same: dict[str, str] = dict(zip(known, known))
    one = same.setdefault
    initializers = tuple([one(t.name, t.name) for t in graph.initializer])
    graph_inputs = tuple([one(vi.name, vi.name) for vi in graph.input])
    intern = sys.intern
    op_types: list[str] = []
    domains: list[str] = []
    inputs: list[tuple[str, ...]] = []
    outputs: list[tuple[str, ...]] = []
    for node in graph.node:
        op_types.append(intern(node.op_type))
        domains.append(intern(node.domain))
        names = list(node.input)  # each field read once; a str kept where the name was read before
        inputs.append(tuple(map(one, names, names)))
        names = list(node.output)
        outputs.append(tuple(map(one, names, names)))
    return NodeFields(graph, op_types, domains, inputs, outputs, initializers, graph_inputs)
