"""Shapes of the values inside subgraphs (If branches, Loop and Scan bodies, nested at any depth).

First read from the whole model's inference; what that leaves open, each body inferred as a
model of its own (:func:`standalone_bodies`) that sees the concrete shapes of the outer values
it captures and the values of those known.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

import onnxmem.shapes.shapeeval as shapeeval
from onnxmem.model import (
    MAX_CAPTURED_ELEMENTS,
    BodyKey,
    Dim,
    captured_names,
    iter_bodies,
    owner_key,
    resolve_dim,
    set_shape,
    subgraph_attributes,
)
from onnxmem.shapes.engines import (
    collect_graph_types,
    declared_back,
    declared_shape,
    run_engines,
    strip_for_inference,
    undeclared_outputs,
    values_after,
)

__all__ = ["Grower", "body_shapes", "defined_count", "ranged_outputs", "ranged_values", "standalone_bodies",
           "standalone_body", "taken_branches", "with_shapes"]

_Shapes = dict[str, tuple[int, tuple[int, ...]]]
#: sizes a Loop whose values grow per iteration (:func:`onnxmem.shapes.loops.grow_loop`): ``(graph,
#: node index, body key, outer shapes, outer values)`` -> ``(its outputs' shapes, its bodies' shapes
#: by key)``, or ``None`` for a Loop that does not grow
Grower = Callable[[onnx.GraphProto, int, BodyKey, Mapping[str, tuple[int, tuple[int, ...]]],
                   Mapping[str, np.ndarray]], "tuple[_Shapes, Mapping[BodyKey, _Shapes]] | None"]


def _body_types(model: onnx.ModelProto) -> dict[BodyKey, dict[str, tuple[int | None, tuple[Dim, ...] | None]]]:
    """What ``model`` declares of every subgraph's values: inputs, value_info, outputs, initializers."""
    out: dict[BodyKey, dict[str, tuple[int | None, tuple[Dim, ...] | None]]] = {}
    for key, g in iter_bodies(model.graph):
        out[key] = collect_graph_types(g)
    return out


#: ops whose result a whole-model engine computes without its dtype's range: integer arithmetic (onnxruntime's
#: C++ wraps or is undefined where the exact result leaves the range) and Cast (onnxruntime converts the values)
_RANGED = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Pow", "Sum", "CumSum", "ReduceSum",
                     "ReduceProd", "Range", "Cast", "CastLike"})
_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16})
#: integer types -> the types a Cast to them keeps every value of
_SMALL = frozenset({TensorProto.BOOL, TensorProto.INT8, TensorProto.INT16, TensorProto.UINT8, TensorProto.UINT16})
_WIDER: dict[int | None, frozenset[int]] = {
    TensorProto.INT64: _SMALL | {TensorProto.INT32, TensorProto.UINT32}, TensorProto.INT32: _SMALL}


def _in_range(node: onnx.NodeProto, types: Mapping[str, tuple[int | None, object]]) -> bool:
    """Whether node (of :data:`_RANGED`) computes what onnxruntime does under any engine: float arithmetic, a Cast
    between floats or to a type that holds every value of its input (element ``types`` as inferred)."""
    out = types.get(node.output[0], (None, None))[0] if node.output else None
    if node.op_type not in ("Cast", "CastLike"):
        return out in _FLOATS
    src = types.get(node.input[0], (None, None))[0] if node.input else None
    return src is not None and (src == out or (src in _FLOATS and out in _FLOATS)
                                or src in _WIDER.get(out, frozenset()))


def _ranged_nodes(graph: onnx.GraphProto, types: Mapping[str, tuple[int | None, object]]) -> Iterable[str]:
    """The outputs of ``graph``'s nodes (of ONNX's domain) that compute without the range (:func:`_in_range`)."""
    for node in graph.node:
        if node.op_type in _RANGED and node.domain in ("", "ai.onnx") and not _in_range(node, types):
            yield from (o for o in node.output if o)


def ranged_values(model: onnx.ModelProto, typed: onnx.ModelProto, undefined: Collection[str] = ()
                  ) -> dict[BodyKey, set[str]]:
    """For every subgraph of ``model``: the values a whole-model engine (onnx's data propagation, onnxruntime's
    symbolic inference) may size from a value it computes without its dtype's range (an integer overflow, a
    Cast that converts; element types read from ``typed``, an inference of ``model``). Each is computed, in
    the subgraph, from an output of such a node, from a formal input whose owner reads such a value, from an
    outer value that is one (a main-graph value of an integer type computed from such a node or from one of
    ``undefined``; the main graph's shapes are exact, its shape arithmetic folded in), or by a node whose
    subgraphs hold such a node. Their shapes come from each body inferred on its own
    (:func:`standalone_bodies`), whose shape arithmetic is exact."""
    types = _body_types(typed)
    main = collect_graph_types(typed.graph)
    top = values_after(model.graph, {*_ranged_nodes(model.graph, main), *undefined})
    out: dict[BodyKey, set[str]] = {}

    def seeds(graph: onnx.GraphProto, key: BodyKey, above: set[str], formal: bool) -> set[str]:
        found = {*_ranged_nodes(graph, types.get(key, {})), *(n for n in captured_names(graph) if n in above)}
        found.update(vi.name for vi in graph.input if formal)
        for i, node in enumerate(graph.node):
            if any([seeds(sub, (*key, (owner_key(node, i), attr)), above, False)
                    for attr, sub in subgraph_attributes(node)]):
                found.update(o for o in node.output if o)
        return found

    def close(graph: onnx.GraphProto, key: BodyKey, above: set[str]) -> None:
        for i, node in enumerate(graph.node):
            for attr, sub in subgraph_attributes(node):
                sk = (*key, (owner_key(node, i), attr))
                out[sk] = values_after(sub, seeds(sub, sk, above, any(n in above for n in node.input)))
                close(sub, sk, above | out[sk])

    close(model.graph, (), {n for n in top if main.get(n, (None, None))[0] not in _FLOATS})
    return out


def ranged_outputs(model: onnx.ModelProto, bodies: Mapping[BodyKey, Collection[str]]) -> set[str]:
    """The outputs of ``model``'s main-graph nodes one of whose subgraphs returns a value of ``bodies``
    (:func:`ranged_values`): a whole-model engine may size them from a value computed past its range."""
    out: set[str] = set()
    for i, node in enumerate(model.graph.node):
        for attr, sub in subgraph_attributes(node):
            if any(vi.name in bodies.get(((owner_key(node, i), attr),), ()) for vi in sub.output):
                out.update(o for o in node.output if o)
    return out


def body_shapes(
    model: onnx.ModelProto, sources: Sequence[tuple[onnx.ModelProto | None, Mapping[str, int]]],
    skip: Mapping[BodyKey, Collection[str]] | None = None, declared: Mapping[str, int] | None = None,
    *, rest: bool = False,
) -> dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]]:
    """Concrete shapes of the values each subgraph of ``model`` defines, from the first
    of ``sources`` (an inferred model and the dim binding to read it with) that resolves them;
    none of those ``skip`` names (:func:`ranged_values`). Given ``declared`` (the binding of the
    file's dims), the file's declaration of a value no source resolves, the last resort, where
    it agrees with the shape the first source gives it and fills what that leaves open
    (:func:`onnxmem.shapes.engines.with_declared`). ``rest``: the ``skip`` names alone, from their
    declarations alone (once each body was inferred on its own)."""
    read = [(_body_types(m), binding) for m, binding in sources if m is not None]
    files = {key: collect_graph_types(g) for key, g in iter_bodies(model.graph)} if declared is not None else {}
    out: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]] = {}
    for key, g in iter_bodies(model.graph):
        left = (skip or {}).get(key, ())
        names = [] if rest else [vi.name for vi in g.input] + [i.name for i in g.initializer]
        names += [o for node in g.node for o in node.output if o and (o in left) == rest]
        known: dict[str, tuple[int, tuple[int, ...]]] = {}
        for name in names:
            partial: tuple[int | None, tuple[int | None, ...] | None] = (None, None)
            for types, binding in () if rest else read:
                et, sh = types.get(key, {}).get(name, (None, None))
                if et is None or sh is None:
                    continue
                resolved = tuple(resolve_dim(d, binding) for d in sh)
                if all(r is not None for r in resolved):
                    known[name] = (et, tuple(int(r) for r in resolved))  # type: ignore[arg-type]
                    break
                partial = partial if partial[1] is not None else (et, resolved)
            decl = files.get(key, {}).get(name)
            if name not in known and decl is not None and declared is not None:
                taken = declared_shape(decl, partial, declared)
                if taken is not None:
                    known[name] = taken
        out[key] = known
    return out


def _standalone(
    model: onnx.ModelProto,
    body: onnx.GraphProto,
    formal: Mapping[str, tuple[int, tuple[int, ...]]],
    outer: Mapping[str, tuple[int, tuple[int, ...]]],
    values: Mapping[str, np.ndarray],
    hints: Mapping[str, tuple[int, tuple[int, ...]]],
    fixed: Mapping[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    """``body`` as a model of its own, stripped for inference: its inputs at their ``formal``
    shapes (a constant where ``fixed`` gives its value: a Loop's iteration number), each
    captured outer value a constant where its value is known and small, else a graph input at
    its ``outer`` shape (untyped when that is unknown), and the ``hints`` (outputs of nested
    Ifs whose taken branch is known) as value_info."""
    m = onnx.ModelProto()
    m.ir_version = model.ir_version
    m.opset_import.extend(model.opset_import)
    g = m.graph
    g.CopyFrom(body)
    del g.value_info[:]
    for vi in g.input:
        if vi.name in formal:
            et, shape = formal[vi.name]
            vi.type.tensor_type.elem_type = et
            set_shape(vi, shape)
    for name, held in (fixed or {}).items():
        kept = [vi for vi in g.input if vi.name != name]
        if len(kept) < len(g.input):
            del g.input[:]
            g.input.extend(kept)
            g.initializer.append(numpy_helper.from_array(held, name))
    for name in captured_names(body):
        value = values.get(name)
        if value is not None and value.size <= MAX_CAPTURED_ELEMENTS:
            g.initializer.append(numpy_helper.from_array(value, name))
        elif name in outer:
            et, shape = outer[name]
            g.input.append(onnx.helper.make_tensor_value_info(name, et, list(shape)))
        else:
            g.input.append(onnx.helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None))
    work = strip_for_inference(m)
    for name, (et, shape) in hints.items():
        work.graph.value_info.append(onnx.helper.make_tensor_value_info(name, et, list(shape)))
    return work


def _infer_standalone(work: onnx.ModelProto, names: Iterable[str], also: Sequence[str]) -> tuple[
        dict[str, tuple[int, tuple[int, ...]]], dict[str, np.ndarray]]:
    """The concrete shapes of ``names`` in ``work`` by the main graph's engines (onnx inference
    with data propagation, shape arithmetic, onnxruntime's symbolic inference, in that order of
    precedence), and the values the shape arithmetic computed (``also`` among them). The body's
    outputs are inferred from its nodes: a declared shape only fills what inference leaves open
    (:func:`onnxmem.shapes.engines.declared_back`)."""
    declared = undeclared_outputs(work)
    wanted = list(names)
    found: dict[str, tuple[int, tuple[int, ...]]] = {}
    seen: dict[str, tuple[int, tuple[Dim, ...] | None]] = {}  # what inference made of the others

    def absorb(info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]) -> None:
        for name in wanted:
            et, sh = info.get(name, (None, None))
            if name in found or et is None:
                continue
            resolved = [resolve_dim(d, {}) for d in sh or ()]
            if sh is not None and all(r is not None for r in resolved):
                found[name] = (et, tuple(int(r) for r in resolved))  # type: ignore[arg-type]
            elif sh is not None or name not in seen:
                seen[name] = (et, sh)

    def engines() -> dict[str, np.ndarray]:
        return run_engines(work, absorb, lambda: len(found) < len(wanted), lambda d: resolve_dim(d, {}), also=also)

    made = engines()
    given, read = declared_back(work, declared, found, seen, lambda d: resolve_dim(d, {}) is not None)
    absorb(given)
    if read and len(found) < len(wanted):
        made = {**made, **engines()}
    return found, made


def taken_branches(
    graph: onnx.GraphProto,
    key: BodyKey,
    values: Mapping[str, np.ndarray],
    bodies: Mapping[BodyKey, Mapping[str, tuple[int, tuple[int, ...]]]],
    have: Mapping[str, tuple[int, tuple[int, ...]]],
    excluded: frozenset[BodyKey] = frozenset(),
) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Shapes of the outputs of ``graph``'s If nodes that ``have`` lacks: those of the branch
    the condition takes where its value is known or the other branch is ``excluded``, else the
    shape both branches agree on."""
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    for i, node in enumerate(graph.node):
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        if all(o in have for o in node.output if o):
            continue
        cond = values.get(node.input[0])
        branches = dict(subgraph_attributes(node))
        kept = [a for a in ("then_branch", "else_branch") if (*key, (owner_key(node, i), a)) not in excluded]
        if cond is not None and cond.size == 1:
            taken = ["then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"]
        else:
            taken = kept
        if any(a not in branches for a in taken):
            continue
        sized = [bodies.get((*key, (owner_key(node, i), a)), {}) for a in taken]
        for position, o in enumerate(node.output):
            if not o or o in have:
                continue
            shapes = {
                found.get(branches[a].output[position].name) if position < len(branches[a].output) else None
                for a, found in zip(taken, sized)
            }
            if len(shapes) == 1 and None not in shapes:
                out[o] = shapes.pop()  # type: ignore[assignment]
    return out


def _grown(graph: onnx.GraphProto, key: BodyKey, outer: Mapping[str, tuple[int, tuple[int, ...]]],
           values: Mapping[str, np.ndarray], bodies: dict[BodyKey, _Shapes], have: Mapping[str, object],
           grow: Grower) -> _Shapes:
    """The outputs' shapes of ``graph``'s Loops that lack them and whose values grow (``grow``), their
    bodies' shapes put into ``bodies``."""
    out: _Shapes = {}
    for i, node in enumerate(graph.node):
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx") or all(o in have for o in node.output if o):
            continue
        found = grow(graph, i, (*key, (owner_key(node, i), "body")), outer, values)
        if found is not None:
            outputs, shaped = found
            out.update((k, v) for k, v in outputs.items() if k not in have)
            bodies.update((k, dict(v)) for k, v in shaped.items())
    return out


def standalone_bodies(
    model: onnx.ModelProto,
    graph: onnx.GraphProto,
    key: BodyKey,
    outer: Mapping[str, tuple[int, tuple[int, ...]]],
    values: Mapping[str, np.ndarray],
    bodies: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]],
    excluded: frozenset[BodyKey] = frozenset(),
    grow: Grower | None = None,
) -> None:
    """Complete ``bodies`` for every subgraph of ``graph`` (at ``key``), nested ones too, by
    inferring each as a model of its own (:func:`standalone_body`) that sees the concrete shapes
    ``outer`` and the known ``values`` of the outer values it captures. Shapes already in
    ``bodies`` stay; both branches of an If are sized from the same captured values. ``grow``:
    sizes the Loops whose values grow per iteration nested in them."""
    for i, node in enumerate(graph.node):
        for attr, sub in subgraph_attributes(node):
            standalone_body(model, sub, (*key, (owner_key(node, i), attr)), outer, values, bodies, excluded,
                            grow=grow)


def standalone_body(
    model: onnx.ModelProto,
    sub: onnx.GraphProto,
    sk: BodyKey,
    outer: Mapping[str, tuple[int, tuple[int, ...]]],
    values: Mapping[str, np.ndarray],
    bodies: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]],
    excluded: frozenset[BodyKey] = frozenset(),
    fixed: Mapping[str, np.ndarray] | None = None,
    declared: Mapping[str, tuple[int, tuple[int, ...]]] | None = None,
    grow: Grower | None = None,
) -> None:
    """Complete ``bodies[sk]`` (the subgraph ``sub``) and its nested bodies: ``sub`` inferred as a
    model of its own (:func:`_standalone`), its formal inputs at the shapes ``bodies[sk]`` already
        holds (those in ``fixed`` at their values), the values ``declared`` at those shapes. A nested If
    whose condition the shape arithmetic computes gives its outputs the taken branch's shapes, a
    nested Loop whose values grow (``grow``) its outputs' shapes at its bound, and the body is
    inferred again with them."""
    have = bodies.setdefault(sk, {})
    names = [vi.name for vi in sub.input] + [x.name for x in sub.initializer]
    names += [o for n in sub.node for o in n.output if o]
    conds = [n.input[0] for n in sub.node if n.op_type == "If" and n.input]
    loops = sum(1 for n in sub.node if n.op_type == "Loop") if grow is not None else 0
    hints: dict[str, tuple[int, tuple[int, ...]]] = dict(declared or {})
    for name, typed in hints.items():
        have.setdefault(name, typed)
    for _ in range(len(conds) + loops + 1):
        formal = {vi.name: have[vi.name] for vi in sub.input if vi.name in have}
        work = _standalone(model, sub, formal, outer, values, hints, fixed)
        inner = {**values, **shapeeval.graph_constants(work)}
        if len(have) < defined_count(sub):
            found, made = _infer_standalone(work, names, conds)
            for name, typed in found.items():
                have.setdefault(name, typed)
            inner.update(made)
        standalone_bodies(model, sub, sk, {**outer, **have}, inner, bodies, excluded, grow)
        taken = taken_branches(sub, sk, inner, bodies, have, excluded)
        if grow is not None:
            taken.update(_grown(sub, sk, {**outer, **have}, inner, bodies, have, grow))
        if not taken:
            break
        have.update(taken)
        hints.update(taken)


def with_shapes(model: onnx.ModelProto, known: Mapping[str, tuple[int, tuple[int, ...]]]) -> onnx.ModelProto:
    """A copy of ``model`` whose main-graph values all carry their ``known`` concrete shapes."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    del g.value_info[:]
    declared = {vi.name: vi for vi in list(g.input) + list(g.output)}
    inits = {i.name for i in g.initializer}
    for name, (et, shape) in known.items():
        if name in inits:
            continue
        if name in declared:
            set_shape(declared[name], shape)
        else:
            g.value_info.append(onnx.helper.make_tensor_value_info(name, et, list(shape)))
    return m


def defined_count(graph: onnx.GraphProto) -> int:
    """How many values ``graph`` defines (inputs, initializers, node outputs), each once."""
    names = {vi.name for vi in graph.input} | {i.name for i in graph.initializer}
    return len(names | {o for node in graph.node for o in node.output if o})
