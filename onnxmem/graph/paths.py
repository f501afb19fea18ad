"""Names and paths in a model's graphs: unique node names, body paths, captured values, ``--branch``.

A node's path is its name under its enclosing bodies' (:func:`child_path`:
``Loop_3/body/If_1``); :func:`excluded_branches` turns ``--branch`` into the keys of the If
branches left out.
"""

from __future__ import annotations

from typing import Mapping

import onnx

from onnxmem.core.errors import ModelError, listed, show_name
from onnxmem.model import OTHER_BRANCH, BodyKey, owner_key, subgraph_attributes
from onnxmem.model.functions import node_subgraphs

__all__ = ["BRANCH_NAMES", "child_path", "excluded_branches", "if_nodes", "node_names", "outer_scope_reads"]


def outer_scope_reads(graph: onnx.GraphProto) -> list[str]:
    """Names a (sub)graph reads but does not define, including nested bodies."""
    defined = {vi.name for vi in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.name for i in graph.sparse_initializer if hasattr(i, "name")}
    reads: dict[str, None] = {}
    for node in graph.node:
        for n in node.input:
            if n and n not in defined:
                reads.setdefault(n, None)
        for sub in node_subgraphs(node):
            for n in outer_scope_reads(sub):
                if n not in defined:
                    reads.setdefault(n, None)
        defined.update(o for o in node.output if o)
    for vi in graph.output:
        if vi.name not in defined:
            reads.setdefault(vi.name, None)
    return list(reads)


def node_names(graph: onnx.GraphProto) -> list[str]:
    """Unique names for the graph's nodes: the file's, or ``<op_type>_<i>``."""
    given = [n.name for n in graph.node]  # each node's message read once
    taken = set(given)
    if len(taken) == len(given) and "" not in taken:
        return given  # every node named, once (exported graphs): the names as they are
    taken.discard("")
    used: set[str] = set()
    names: list[str] = []
    for i, own in enumerate(given):
        name = own
        if not name or name in used:
            base = f"{graph.node[i].op_type}_{i}"
            name, k = base, 1
            while name in used or (name in taken and name != own):
                name, k = f"{base}_{k}", k + 1
        used.add(name)
        names.append(name)
    return names


def child_path(parent: str, node_name: str) -> str:
    """The path of a node of the graph at ``parent``: ``parent/NAME`` (``NAME`` at the top),
    with ``%`` and ``/`` of the node's name escaped as ``%25`` and ``%2F``, so a path
    splits back into its parts at ``/``."""
    part = node_name.replace("%", "%25").replace("/", "%2F")
    return f"{parent}/{part}" if parent else part


#: what ``--branch`` accepts for an If's branch, and the attribute each names
BRANCH_NAMES = {"then": "then_branch", "else": "else_branch", "then_branch": "then_branch",
                "else_branch": "else_branch"}


def if_nodes(model: onnx.ModelProto) -> dict[str, tuple[BodyKey, str]]:
    """Every If node of ``model`` at any level: ``{path: (the key of the graph holding it,
    its owner key)}``, the path as :func:`child_path` builds it (``If_0``,
    ``Loop_3/body/If_1``), outermost first."""
    out: dict[str, tuple[BodyKey, str]] = {}

    def walk(g: onnx.GraphProto, path: str, key: BodyKey) -> None:
        names = node_names(g)
        for i, node in enumerate(g.node):
            here = child_path(path, names[i])
            subs = subgraph_attributes(node)
            if node.op_type == "If" and node.domain in ("", "ai.onnx") and subs:
                out[here] = (key, owner_key(node, i))
            for attr, sub in subs:
                walk(sub, f"{here}/{attr}", (*key, (owner_key(node, i), attr)))

    walk(model.graph, "", ())
    return out


def excluded_branches(model: onnx.ModelProto, branches: Mapping[str, str]) -> frozenset[BodyKey]:
    """The keys of the If branches ``branches`` leaves out (``--branch``).

    ``branches``: ``{If node path: the branch runs take}`` (``then``/``else`` or
    ``then_branch``/``else_branch``); the other branch of each is excluded: not
    sized, not planned, its values listed under ``outside`` as ``excluded-branch``,
    and a run that takes it is refused by ``verify``. A path that names no If of
    the model, or a branch other than those, is a ``ModelError`` naming the If nodes.
    """
    if not branches:
        return frozenset()
    ifs = if_nodes(model)
    out: set[BodyKey] = set()
    for path, branch in branches.items():
        taken = BRANCH_NAMES.get(branch)
        if taken is None:
            raise ModelError(f"--branch {show_name(path)}={show_name(branch)}: the branch runs take must be "
                             "then or else")
        if path not in ifs:
            listing = listed(list(ifs), 12)
            raise ModelError(f"--branch names {show_name(path)}, which is not an If node of the model; "
                             + (f"its If nodes are {listing}" if ifs else "it has no If node"))
        key, owner = ifs[path]
        out.add((*key, (owner, OTHER_BRANCH[taken])))
    return frozenset(out)
