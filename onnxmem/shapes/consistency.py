"""The shapes inference gives, checked against rules onnxruntime enforces when it runs.

onnx's shape inference computes a Reshape's output shape from its target alone: it does not
check that the target holds as many elements as the data. A target whose value is wrong (a
training checkpoint's frozen parameter, an initializer of a hostile file: ``[32, 784]`` for
data of ``[64, 784]``) gives a shape onnxruntime refuses at run time (``The input tensor
cannot be reshaped to the requested shape``), and a plan sized from it would be the plan of
a graph that cannot run. A target of the right element count can still contradict the rest
of the graph: a training graph's gradient nodes keep the forward shapes they were built for
(a Reshape back to ``[4, 128, 4, 64]`` as a constant), and where a checkpoint's target makes
the forward ``[4, 128, 2, 128]``, a MatMul of the gradient reads operands that do not
multiply while the name rule of :mod:`onnxmem.shapes.training` (``X_grad`` has ``X``'s shape)
sizes its output anyway.

:func:`check_shapes` refuses both, on the final shapes of the main graph: a Reshape whose
data and output hold different numbers of elements, and a MatMul or FusedMatMul
(:func:`onnxmem.shapes.training.fused_matmul`; its batch-transposing forms are not checked)
whose operands do not multiply or whose output is not their product's shape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import onnx

from onnxmem.core.errors import ShapeError, flag_value, listed, show_name
from onnxmem.core.toposort import stable_order
from onnxmem.model import NodeFields, arity_error, read_nodes
from onnxmem.shapes.training import fused_matmul, matmul_dims

__all__ = ["broken_graph", "check_shapes"]

#: the op types checked (each in its domains below)
_CHECKED = frozenset({"Reshape", "MatMul", "FusedMatMul"})

_FIX = ("check the values its shapes come from (a Reshape target: an initializer, or a training checkpoint's "
        "frozen parameter: --checkpoint PATH)")


def check_shapes(model: onnx.ModelProto, known: Mapping[str, tuple[int, tuple[int, ...]]],
                 nodes: NodeFields | None = None) -> None:
    """``ShapeError`` for the first Reshape, MatMul or FusedMatMul of ``model``'s graph whose
    shapes in ``known`` (dtype, shape) onnxruntime would refuse (the module doc). ``nodes``: the
    graph's :class:`~onnxmem.model.NodeFields`, where read (the op types are taken from them)."""
    passed: set[tuple[object, ...]] = set()  # the (op, shapes) that passed: a deep network repeats them
    g = model.graph
    nodes = read_nodes(g, given=nodes)
    # the op type alone first: most nodes are none of these
    for i in [i for i, op in enumerate(nodes.op_types) if op in _CHECKED]:
        if len(nodes.inputs[i]) < 2 or not nodes.outputs[i]:
            continue
        op, domain, ins, outs = nodes.op_types[i], nodes.domains[i], nodes.inputs[i], nodes.outputs[i]
        if op == "Reshape" and domain in ("", "ai.onnx"):
            _check_reshape(g, i, ins, outs, known, passed)
        elif (domain, op) in (("", "MatMul"), ("ai.onnx", "MatMul"), ("com.microsoft", "FusedMatMul")):
            _check_product(g, i, op == "MatMul", ins, outs, known, passed)


def _label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} node {show_name(node.name or node.output[0])}"


def _check_reshape(g: onnx.GraphProto, i: int, ins: tuple[str, ...], outs: tuple[str, ...],
                   known: Mapping[str, tuple[int, tuple[int, ...]]], passed: set[tuple[object, ...]]) -> None:
    """Node ``i`` of ``g``, a Reshape reading ``ins`` and making ``outs`` (its message read for a message)."""
    data, out = known.get(ins[0]), known.get(outs[0])
    if data is None or out is None:
        return
    seen = ("Reshape", data[1], out[1])
    if seen in passed:
        return
    have, made = math.prod(data[1]), math.prod(out[1])
    if have != made:
        raise ShapeError(
            f"{_label(g.node[i])} makes {show_name(ins[0])} of shape {list(data[1])} ({have:,} elements) into "
            f"{list(out[1])} ({made:,}), which onnxruntime refuses; check the value of its target "
            f"{show_name(ins[1])} (an initializer, a value given with --inputs, or a training checkpoint's "
            "frozen parameter: --checkpoint PATH)")
    passed.add(seen)


def _check_product(g: onnx.GraphProto, i: int, matmul: bool, ins: tuple[str, ...], outs: tuple[str, ...],
                   known: Mapping[str, tuple[int, tuple[int, ...]]], passed: set[tuple[object, ...]]) -> None:
    """Node ``i`` of ``g``, a MatMul (``matmul``) or FusedMatMul reading ``ins`` and making ``outs``
    (its message read for a FusedMatMul's attributes and for a message)."""
    a, b, out = known.get(ins[0]), known.get(ins[1]), known.get(outs[0])
    if a is None or b is None or out is None:
        return
    sa, sb = a[1], b[1]
    seen = ("MatMul", sa, sb, out[1])
    if matmul and seen in passed:
        return
    if matmul:
        dims = matmul_dims(sa, sb)
    elif any(at.name in ("transBatchA", "transBatchB") and at.i for at in g.node[i].attribute):
        return
    else:
        [typed] = fused_matmul(g.node[i], [a, b], [])
        dims = None if typed is None else typed[1]
    if dims is not None and tuple(dims) == tuple(out[1]):
        if matmul:
            passed.add(seen)
        return
    operands = f"{show_name(ins[0])} {list(sa)} and {show_name(ins[1])} {list(sb)}"
    if dims is None:
        raise ShapeError(f"{_label(g.node[i])} reads {operands}, which do not multiply (onnxruntime refuses them); {_FIX}")
    raise ShapeError(f"{_label(g.node[i])} reads {operands}, whose product is {list(dims)}, but its output "
                     f"{show_name(outs[0])} was sized {list(out[1])}; {_FIX}")


def broken_graph(g: onnx.GraphProto, opset: int = 0) -> str | None:
    """What makes the main graph no graph, where something does: a node whose inputs or outputs
    its op's schema at ``opset`` does not allow (:func:`onnxmem.model.arity_error`; not looked
    for at opset 0), a value a node reads that nothing gives, or nodes that cannot be ordered
    (they read each other's outputs in a cycle, or read the output of such a node); else
    ``None``. For the error of sizes inference leaves unknown: no shape follows from such a
    graph, nor would a run measure one."""
    for k, node in enumerate(g.node if opset else ()):
        said = arity_error(node.op_type, node.domain, node.input, len(node.output), opset)
        if said is not None:
            return f"node {_node_label(g, k)} {said}"
    given = {v.name for v in g.input} | {t.name for t in g.initializer}
    given |= {t.values.name for t in g.sparse_initializer}
    writer = {o: k for k, node in enumerate(g.node) for o in node.output if o}
    successors: list[list[int]] = [[] for _ in g.node]
    for k, node in enumerate(g.node):
        for name in node.input:
            if name and name not in given and name not in writer:
                return (f"value {show_name(name)} read by node {_node_label(g, k)} is produced by no node, input or "
                        "initializer")
            if name in writer:
                successors[writer[name]].append(k)
    placed = set(stable_order(successors))  # a node on a cycle, or after one, is never ready
    stuck = [_node_label(g, k) for k in range(len(g.node)) if k not in placed]
    if not stuck:
        return None
    return (f"nodes {listed(stuck, 4, str)} cannot be ordered: nodes that read each other's outputs in a "
            "cycle hold them up")


def _node_label(g: onnx.GraphProto, k: int) -> str:
    """Node ``k`` as a message names it: its name, else its place, with its op type."""
    node = g.node[k]
    return f"{show_name(node.name) if node.name else f'#{k}'} ({flag_value(node.op_type)})"
