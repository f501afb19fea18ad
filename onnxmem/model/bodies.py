"""Graphs inside graphs: every subgraph with its key, local function bodies, and captured values.

An If branch, a Loop or Scan body is a subgraph owned by a node; :data:`BodyKey` names
where one sits (stable across the copies shape inference makes), :func:`iter_bodies`
lists them, and :func:`body_captures` names the outer values they read.
"""

from __future__ import annotations

from typing import Iterable

import onnx

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
    """Raise ``ModelError`` for the first Loop of ``graph`` (a model's main graph) with neither a
    trip count (input ``M``) nor a condition (input ``cond``): by the ONNX spec it runs forever, so
    no run of the model ends. ``verify``, ``compare`` and the run
    of ``--measure-shapes`` refuse such a model before they run it, where the run went on until
    ``--time-limit``. A Loop in a body is left to the time limit: its If branch may never be taken,
    its owner may run no iteration."""
    for node in graph.node:
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and not any(node.input[:2]):
            raise ModelError(f"Loop {show_name(node.name)} has neither a trip count (input M) nor a condition "
                             "(input cond), so it never ends and no run of the model can finish; give it a trip "
                             "count (verify --static-only proves the plan without a run)")


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
