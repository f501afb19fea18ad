"""Graphs inside graphs: every subgraph with its key, local function bodies, and captured values.

An If branch, a Loop or Scan body is a subgraph owned by a node; :data:`BodyKey` names
where one sits (stable across the copies shape inference makes), :func:`iter_bodies`
lists them, and :func:`body_captures` names the outer values they read.
"""

from __future__ import annotations

from typing import Iterable

import onnx
from onnx import numpy_helper

from onnxmem.core.errors import ModelError, show_name
from onnxmem.model.functions import function_label, node_subgraphs

__all__ = [
    "MAX_CAPTURED_ELEMENTS",
    "OTHER_BRANCH",
    "BodyKey",
    "body_captures",
    "captured_names",
    "check_loops_end",
    "initializers",
    "iter_bodies",
    "iter_graphs",
    "model_graphs",
    "owner_key",
    "passes_true",
    "subgraph_attributes",
]

#: where a subgraph sits: one ``(owner key, attribute name)`` per level, outermost first; the
#: owner key is the owning node's first output name (``#<index>`` when it has none)
BodyKey = tuple[tuple[str, str], ...]


#: an If's branch -> its other branch
OTHER_BRANCH = {"then_branch": "else_branch", "else_branch": "then_branch"}


def iter_graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    """``graph`` and every subgraph nested in its nodes' attributes, depth first."""
    stack = [graph]
    while stack:
        g = stack.pop()
        yield g
        for node in reversed(g.node):
            subs = node_subgraphs(node)
            if subs:
                stack.extend(reversed(subs))


def model_graphs(model: onnx.ModelProto) -> Iterable[tuple[str, onnx.GraphProto | onnx.FunctionProto]]:
    """Every node container of ``model``: the main graph, each local function's body, and every
    subgraph nested in their nodes, each with where it sits for a message (``""`` in the main
    graph, `` in local function 'dom'::'name'`` in a function)."""
    for g in iter_graphs(model.graph):
        yield "", g
    for f in model.functions:
        where = f" in {function_label((f.domain, f.name, getattr(f, 'overload', '')))}"
        yield where, f
        for node in f.node:
            for sub in node_subgraphs(node):
                yield from ((where, g) for g in iter_graphs(sub))


def check_loops_end(graph: onnx.GraphProto) -> None:
    """Raise ``ModelError`` for the first Loop of ``graph`` (a model's main graph) that never ends
    by the ONNX spec, so that no run of the model ends: one with neither a trip count (input ``M``)
    nor a condition (input ``cond``), or one without a trip count whose condition is a constant
    true (an initializer that is no graph input, or a Constant) that its body passes on unchanged
    (its condition output is its condition input, through Identities, or a constant true).
    ``verify``, ``compare`` and the run of ``--measure-shapes`` refuse such a model before they
    run it, where the run went on until ``--time-limit``. A Loop in a body is left to the time
    limit: its If branch may never be taken, its owner may run no iteration."""
    fix = "give it a trip count (verify --static-only proves the plan without a run)"
    for node in graph.node:
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx") or (node.input[:1] and node.input[0]):
            continue
        if not node.input[1:2] or not node.input[1]:
            raise ModelError(f"Loop {show_name(node.name)} has neither a trip count (input M) nor a condition "
                             f"(input cond), so it never ends and no run of the model can finish; {fix}")
        body = next((a.g for a in node.attribute if a.name == "body" and a.type == _GRAPH), None)
        if body is not None and _always_true(graph, node.input[1]) and passes_true(body):
            raise ModelError(f"Loop {show_name(node.name)} has no trip count (input M), and its condition (input "
                             f"cond) is a constant true that its body passes on unchanged, so it never ends and no "
                             f"run of the model can finish; {fix}")


def _constant_true(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` holds one element, a true bool, in the model file itself."""
    if tensor.data_type != onnx.TensorProto.BOOL or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return False
    try:
        value = numpy_helper.to_array(tensor)
    except (ValueError, TypeError):
        return False
    return value.size == 1 and bool(value.reshape(-1)[0])


def _always_true(graph: onnx.GraphProto, name: str) -> bool:
    """Whether the value ``name`` of ``graph`` is a constant true: an initializer no graph input
    overrides, or a Constant node's ``value``."""
    if any(i.name == name for i in graph.input):
        return False
    for init in graph.initializer:
        if init.name == name:
            return _constant_true(init)
    for node in graph.node:
        if name in node.output:
            return (node.op_type == "Constant" and node.domain in ("", "ai.onnx") and any(
                a.name == "value" and a.type == onnx.AttributeProto.TENSOR and _constant_true(a.t)
                for a in node.attribute))
    return False


def passes_true(body: onnx.GraphProto) -> bool:
    """Whether a Loop body whose condition input is true gives a true condition output: the
    output is that input (through Identities) or a constant true of the body. Such a Loop with a
    trip count runs all of its iterations; another one may end sooner on its condition."""
    if len(body.input) < 2 or not body.output:
        return False
    cond_in, name = body.input[1].name, body.output[0].name
    producers = {o: n for n in body.node for o in n.output if o}
    for _ in range(len(body.node) + 1):
        if name == cond_in:
            return True
        node = producers.get(name)
        if node is None or node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or not node.input:
            return _always_true(body, name)
        name = node.input[0]
    return False


def initializers(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Every initializer of ``graph`` and of its subgraphs."""
    return [init for g in iter_graphs(graph) for init in g.initializer]


def owner_key(node: onnx.NodeProto, index: int) -> str:
    """The key of a node that owns subgraphs (see :data:`BodyKey`): stable across the
    copies inference makes, which may drop or replace other nodes but never these."""
    return next((o for o in node.output if o), f"#{index}")


def subgraph_attributes(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """``(attribute name, graph)`` of every subgraph of ``node`` (a list attribute's
    graphs as ``name[i]``)."""
    out: list[tuple[str, onnx.GraphProto]] = []
    for attr in node.attribute:
        kind = attr.type
        if kind == _GRAPH:
            out.append((attr.name, attr.g))
        elif kind == _GRAPHS:
            out.extend((f"{attr.name}[{i}]", g) for i, g in enumerate(attr.graphs))
    return out


#: the attribute types that hold subgraphs (read once: this runs for every node of every walk)
_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def iter_bodies(graph: onnx.GraphProto, key: BodyKey = ()) -> Iterable[tuple[BodyKey, onnx.GraphProto]]:
    """Every subgraph nested in ``graph`` with its :data:`BodyKey`, outermost first."""
    stack: list[tuple[BodyKey, onnx.GraphProto]] = [(key, graph)]
    while stack:
        k, g = stack.pop()
        if k != key:
            yield k, g
        for i, node in enumerate(g.node):
            for attr, sub in subgraph_attributes(node):
                stack.append(((*k, (owner_key(node, i), attr)), sub))


#: the most elements of a captured outer value that a body's standalone model holds as a
#: constant (larger captured values are typed inputs: their shapes matter, not their data)
MAX_CAPTURED_ELEMENTS = 4096


def captured_names(body: onnx.GraphProto) -> list[str]:
    """Names ``body`` (its nested subgraphs included) reads but does not define, in first-use order."""
    defined: set[str] = set()
    for g in iter_graphs(body):
        defined |= {vi.name for vi in g.input} | {i.name for i in g.initializer}
        defined |= {o for node in g.node for o in node.output if o}
    used: dict[str, None] = {}
    for g in iter_graphs(body):
        for node in g.node:
            used.update((i, None) for i in node.input if i and i not in defined)
        used.update((o.name, None) for o in g.output if o.name and o.name not in defined)
    return list(used)


def body_captures(graph: onnx.GraphProto) -> set[str]:
    """Names of ``graph``'s own values that its subgraphs (at any depth) read."""
    out: set[str] = set()
    for node in graph.node:
        for _, sub in subgraph_attributes(node):
            out.update(captured_names(sub))
    return out
