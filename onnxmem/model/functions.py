"""Model-local functions (``model.functions``): their call graph and what inlining them makes.

onnx's shape inference and onnxruntime expand every call of a local function
into the function's body, recursively. A model can make that expansion
unbounded (a function that calls itself), exponential (function k calling
function k-1 twice: 2^k nodes from a 2 KB file) or deep enough to overflow
onnxruntime's stack. :func:`inlined_size` measures the expansion without
doing it: the nodes after full inlining and the nesting of calls and
subgraphs, by dynamic programming over the call graph, each function once.

A node calls a local function when its ``(domain, op_type, overload)`` is a
function's ``(domain, name, overload)``. A function named like a standard op
is refused: onnx and onnxruntime run the standard op and ignore the function,
so the model would not do what its file says. So are two functions with one
``(domain, name, overload)``, which both of them refuse with an internal error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import onnx
import onnx.defs

from onnxmem.core.errors import ModelError, show_name

__all__ = ["FunctionKey", "Inlined", "function_label", "inlined_size", "node_subgraphs"]

#: a function's ``(domain, name, overload)``, the default domain spelled ``""``
FunctionKey = tuple[str, str, str]

#: the domains whose ops onnx knows (``ai.onnx`` is another name of ``""``)
_STANDARD_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")


def node_subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The subgraphs in ``node``'s attributes (If branches, Loop and Scan bodies), in order."""
    out: list[onnx.GraphProto] = []
    for attr in node.attribute:
        kind = attr.type
        if kind == _GRAPH:
            out.append(attr.g)
        elif kind == _GRAPHS:
            out.extend(attr.graphs)
    return out


#: the attribute types that hold subgraphs (read once: this runs for every node of every walk)
_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def _key(f: onnx.FunctionProto) -> FunctionKey:
    return _domain(f.domain), f.name, getattr(f, "overload", "")


def _target(node: onnx.NodeProto) -> FunctionKey:
    return _domain(node.domain), node.op_type, getattr(node, "overload", "")


def function_label(key: FunctionKey) -> str:
    """``local function 'domain'::'name'`` (with ``overload`` when it has one), escaped."""
    domain, name, overload = key
    text = f"local function {show_name(domain)}::{show_name(name)}"
    return text + (f" (overload {show_name(overload)})" if overload else "")


def _nodes_with_depth(nodes: Iterable[onnx.NodeProto]) -> Iterable[tuple[onnx.NodeProto, int]]:
    """Every node of ``nodes`` and of the subgraphs nested in them, with its subgraph depth (0 at the top)."""
    stack = [(n, 0) for n in nodes]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        for sub in node_subgraphs(node):
            stack.extend((n, depth + 1) for n in sub.node)


@dataclass(frozen=True, slots=True)
class Inlined:
    """What full inlining makes of a graph or function: ``nodes`` (capped just past the limit)
    and ``depth``, the nesting of subgraphs and calls (each call one level)."""

    nodes: int
    depth: int
    #: the local function on the deepest call path below it, if any
    deepest: FunctionKey | None = None


@dataclass(frozen=True, slots=True)
class _Body:
    """One function's own nodes: how many call no function, and the calls with their depth."""

    plain: int
    plain_depth: int
    calls: tuple[tuple[FunctionKey, int], ...]


def _body(nodes: Iterable[onnx.NodeProto], functions: dict[FunctionKey, onnx.FunctionProto]) -> _Body:
    plain, plain_depth, calls = 0, 0, []
    for node, depth in _nodes_with_depth(nodes):
        key = _target(node)
        if key in functions:
            calls.append((key, depth))
        else:
            plain += 1
            plain_depth = max(plain_depth, depth)
    return _Body(plain, plain_depth, tuple(calls))


def _table(model: onnx.ModelProto) -> dict[FunctionKey, onnx.FunctionProto]:
    """The model's functions by key; refuses a duplicate and a function that shadows a standard op."""
    functions: dict[FunctionKey, onnx.FunctionProto] = {}
    for f in model.functions:
        key = _key(f)
        if key in functions:
            raise ModelError(f"the model defines {function_label(key)} twice; onnx and onnxruntime refuse "
                             "such a model: keep one definition (or give one an overload)")
        if key[0] in _STANDARD_DOMAINS and onnx.defs.has(key[1], key[0]):
            raise ModelError(f"{function_label(key)} has the name of the standard op {show_name(key[1])}, which "
                             "onnx and onnxruntime run instead of it; rename the function (or move it to "
                             "its own domain)")
        functions[key] = f
    return functions


def _combine(body: _Body, done: dict[FunctionKey, Inlined], cap: int) -> Inlined:
    nodes, depth, deepest = body.plain, body.plain_depth, None
    for key, at in body.calls:
        sub = done[key]
        nodes = min(nodes + sub.nodes, cap)
        if at + 1 + sub.depth > depth or deepest is None and at + 1 + sub.depth == depth:
            depth, deepest = at + 1 + sub.depth, key
    return Inlined(nodes, depth, deepest)


def _chain(key: FunctionKey, done: dict[FunctionKey, Inlined], shown: int = 3) -> str:
    """``'F' -> 'G' -> ...``: the deepest call path from ``key``, cut after ``shown`` functions."""
    names: list[str] = []
    cur: FunctionKey | None = key
    while cur is not None and len(names) < shown:
        names.append(show_name(cur[1]))
        cur = done[cur].deepest
    return " -> ".join(names) + (" -> ..." if cur is not None else "")


def _refuse_recursion(path: list[FunctionKey], key: FunctionKey) -> None:
    cycle = path[path.index(key):] + [key]
    shown = " -> ".join(show_name(k[1]) for k in cycle[:6]) + (" -> ..." if len(cycle) > 6 else "")
    raise ModelError(f"{function_label(key)} calls itself ({shown}); ONNX does not allow recursive "
                     "functions and onnxmem cannot expand one: re-export the model without the recursion")


def _check(key: FunctionKey, found: Inlined, done: dict[FunctionKey, Inlined], max_nodes: int,
           max_depth: int) -> None:
    if found.depth > max_depth:
        raise ModelError(f"{function_label(key)} nests calls and subgraphs {found.depth} deep "
                         f"({_chain(key, done)}), past onnxmem's limit of {max_depth}; inline or "
                         "flatten its functions")
    if found.nodes > max_nodes:
        raise ModelError(f"{function_label(key)} expands to more than {max_nodes:,} nodes once its calls "
                         f"are inlined ({_chain(key, done)}), onnxmem's limit; split the model or "
                         "flatten its functions")


def _inline_functions(functions: dict[FunctionKey, onnx.FunctionProto], max_nodes: int,
                      max_depth: int) -> dict[FunctionKey, Inlined]:
    """Every function's :class:`Inlined`, callees first, by an iterative depth-first walk of the call graph."""
    bodies = {k: _body(f.node, functions) for k, f in functions.items()}
    done: dict[FunctionKey, Inlined] = {}
    for root in functions:
        if root in done:
            continue
        path, on_path = [root], {root}
        stack = [(root, iter(bodies[root].calls))]
        while stack:
            key, calls = stack[-1]
            callee = next((c for c, _ in calls if c not in done), None)
            if callee is None:
                stack.pop()
                path.pop()
                on_path.discard(key)
                done[key] = _combine(bodies[key], done, max_nodes + 1)
                _check(key, done[key], done, max_nodes, max_depth)
            elif callee in on_path:
                _refuse_recursion(path, callee)
            else:
                path.append(callee)
                on_path.add(callee)
                stack.append((callee, iter(bodies[callee].calls)))
    return done


def inlined_size(model: onnx.ModelProto, max_nodes: int, max_depth: int) -> Inlined:
    """The main graph's size and nesting once every local function call is inlined.

    Refuses (``ModelError``, naming the function, the rule and the fix) duplicate
    and shadowing functions, recursion, and any function whose inlined body holds
    more than ``max_nodes`` nodes or nests more than ``max_depth`` levels; checks
    every function, called or not. The caller checks the returned figures.
    """
    functions = _table(model)
    done = _inline_functions(functions, max_nodes, max_depth) if functions else {}
    return _combine(_body(model.graph.node, functions), done, max_nodes + 1)
