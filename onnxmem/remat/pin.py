"""Duplicates that onnxruntime runs where the rewrite put them: data edges from what their reader waits for.

onnxruntime does not run a model's nodes in the file's order. Its default execution order
(``GraphViewer``'s ``ExecutionOrder::DEFAULT``, :func:`onnxmem.scheduling.onnxruntime.onnxruntime_order`)
is a depth-first walk back from the nodes nothing reads, the last of them first, each node's
producers taken highest file index first, a node emitted once its producers are. A duplicate
sits right before the node that reads it, so it has the highest index among that reader's
producers: the walk emits it *first*, then the rest of what the reader needs (in a training
step, the whole backward pass down to that point). The recomputed value then lives across that
stretch, the peak the rewrite was made to avoid.

:func:`pin_duplicates` makes each block of duplicates wait for what its reader (the node right
after the block) reads besides the block's outputs: for each such value ``v``,
``E = Shape(v, start=0, end=0)`` (an empty ``int64`` tensor, one per value, placed right after
``v``'s writer, where onnxruntime runs a ``Shape`` anyway), and each duplicate of the block that
reads no output of another duplicate of the block reads one of its inputs ``x`` (of a known
rank ``r``) through ``Reshape(x, Concat(Z, E1, ..., Ek))``, ``Z`` ``r`` zeros: ``Reshape``
(``allowzero`` 0) copies each of ``x``'s own dimensions, so the shape is ``x``'s at any shape
the model is run at, not only the one planned; the same values, and onnxruntime's CPU
``Reshape`` hands back its input's buffer (no copy). The walk
then reaches the reader's other producers through the duplicate and emits the duplicate right
before its reader; the others of the block follow it. What this does not force: the order of
the original's nodes, which onnxruntime derives from the file's order as it does for the
original (:mod:`onnxmem.remat.budget` states the problem over that order).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["PIN_OPS", "pin_duplicates"]

#: the ops a pin adds (they compute nothing: a shape, a short Concat of shapes, a view)
PIN_OPS = ("Shape", "Concat", "Reshape")


def pin_duplicates(graph: onnx.GraphProto, duplicates: Collection[str],
                   shapes: Mapping[str, tuple[int, tuple[int, ...]]], fresh: Callable[[str], str], *, opset: int) -> int:
    """Pin each block of ``duplicates`` (node names) in ``graph`` to what its reader waits for
    (module doc); ``shapes``: ``(elem_type, static shape)`` of the values a duplicate
    may read (the new values get value infos from them); ``fresh``
    makes an unused name from a base. Returns the number of duplicates pinned (0 when the
    default opset is below 15, whose ``Shape`` has no ``start`` and ``end``)."""
    if opset < 15:
        return 0
    nodes = list(graph.node)
    dup = [n.name in duplicates for n in nodes]
    writer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    before: dict[int, list[onnx.NodeProto]] = {}  # node index -> nodes to insert before it
    after: dict[int, list[onnx.NodeProto]] = {}  # node index -> nodes to insert after it
    empties: dict[str, str] = {}  # anchor value -> its empty Shape

    def empty_of(anchor: str) -> str:
        if anchor not in empties:
            empties[anchor] = fresh(anchor + "_empty")
            after.setdefault(writer[anchor], []).append(helper.make_node(
                "Shape", [anchor], [empties[anchor]], name=fresh(anchor + "_shape"), start=0, end=0))
            graph.value_info.append(helper.make_tensor_value_info(empties[anchor], onnx.TensorProto.INT64, [0]))
        return empties[anchor]

    pinned = 0
    i = 0
    while i < len(nodes):
        if not dup[i]:
            i += 1
            continue
        j = i
        while j < len(nodes) and dup[j]:
            j += 1
        block = range(i, j)
        made = {o for k in block for o in nodes[k].output if o}
        anchors = _anchors(nodes, i, j, made, writer)
        for k in block:
            if anchors and not any(x in made for x in nodes[k].input if x):
                pinned += _pin(graph, nodes[k], [empty_of(a) for a in anchors], shapes, fresh, before.setdefault(k, []))
        i = j
    if pinned:
        del graph.node[:]
        for i, node in enumerate(nodes):
            graph.node.extend(before.get(i, []))
            graph.node.append(node)
            graph.node.extend(after.get(i, []))
    return pinned


def _anchors(nodes: list[onnx.NodeProto], i: int, j: int, made: set[str], writer: dict[str, int]) -> list[str]:
    """What the block of duplicates ``nodes[i:j]`` waits for: the values its reader (the node
    right after it) reads besides the block's, written by nodes before it."""
    got: list[str] = []
    if j < len(nodes):
        got.extend(x for x in nodes[j].input if x and x not in made and x in writer and writer[x] < i)
    return list(dict.fromkeys(got))


def _pin(graph: onnx.GraphProto, node: onnx.NodeProto, empties: list[str],
         shapes: Mapping[str, tuple[int, tuple[int, ...]]], fresh: Callable[[str], str],
         out: list[onnx.NodeProto]) -> int:
    """Make ``node`` read one of its inputs through ``Reshape(x, Concat(zeros, *empties))``
    (the nodes go to ``out``; module doc); 0 when no input has a known shape."""
    x = next((x for x in node.input if x and x in shapes), None)
    if x is None:
        return 0
    elem_type, dims = shapes[x]
    graph.initializer.append(numpy_helper.from_array(np.zeros(len(dims), dtype=np.int64), fresh(x + "_dims")))
    shape, pinned = fresh(x + "_newshape"), fresh(x)
    graph.value_info.extend([helper.make_tensor_value_info(shape, onnx.TensorProto.INT64, [len(dims)]),
                             helper.make_tensor_value_info(pinned, elem_type, [None] * len(dims))])
    out.extend([helper.make_node("Concat", [graph.initializer[-1].name, *empties], [shape], name=fresh(shape + "_concat"), axis=0),
                helper.make_node("Reshape", [x, shape], [pinned], name=fresh(pinned + "_reshape"))])
    node.input[:] = [pinned if y == x else y for y in node.input]
    return 1
