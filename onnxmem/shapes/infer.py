"""Shape inference: every top-level value's dtype and concrete shape, and the subgraphs' too.

:func:`infer_shapes` binds the user's ``--input-shape`` pins and ``--dim`` values on a copy
stripped for inference, runs the shape engines (:data:`onnxmem.shapes.steps.STEPS`, in their
order of trust) while values lack shapes, then sizes the subgraphs
(:mod:`onnxmem.shapes.subgraphs`). A value still unknown after these is an error that lists
the tensors, the symbols, and the flag that fixes it. :func:`infer_symbolic_shapes` runs the
same engines with some dims left symbolic (range plans).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Collection, Iterable, Mapping

import numpy as np
import onnx

import onnxmem.shapes.pieces as pieces
from onnxmem.core.errors import ShapeError, listed, show_name
from onnxmem.core.memory import release_freed
from onnxmem.model import (
    BodyKey,
    Dim,
    NodeFields,
    bind_dims,
    body_captures,
    iter_bodies,
    read_nodes,
    read_type,
    rename_dims,
    resolve_dim,
    set_shape,
    subgraph_attributes,
)
from onnxmem.shapes.consistency import check_shapes
from onnxmem.shapes.contrib import complete_contrib, is_custom_domain
from onnxmem.shapes.contrib_attention import value_sized
from onnxmem.shapes.engines import (
    collect_types,
    declared_back,
    run_engines,
    run_onnx_inference,
    run_symbolic_inference,
    strip_for_inference,
    take_branches,
    undeclared_outputs,
)
from onnxmem.shapes.info import ShapeInfo
from onnxmem.shapes.shapeeval import evaluate_values
from onnxmem.shapes.steps import (
    STEPS,
    Inference,
    TypedShape,
    grow_loops,
    nested_grower,
    outer_values,
    top_level_values,
)
from onnxmem.shapes.subgraphs import (
    body_shapes,
    defined_count,
    ranged_values,
    standalone_bodies,
    taken_branches,
    with_shapes,
)
from onnxmem.shapes.unknown import unknown_at_zero, unknown_sizes

__all__ = ["SYMBOLIC_ROUNDS", "infer_shapes", "infer_symbolic_shapes", "top_level_values"]

_FRESH = re.compile(r"\bonnxmem_expr_\d+\b")
#: most rounds of the contrib rules and the engines again in :func:`infer_symbolic_shapes`
SYMBOLIC_ROUNDS = 64


def infer_shapes(
    model: onnx.ModelProto,
    *,
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    measured: Mapping[str, TypedShape] | None = None,
    strict_dims: bool = True,
    measured_values: Mapping[str, np.ndarray] | None = None,
    excluded: frozenset[BodyKey] = frozenset(),
    nchwc_block: int | None = None,
    max_trips: int | None = None,
    nodes: NodeFields | None = None,
) -> ShapeInfo:
    """Dtype and concrete shape of every input, initializer and node output.

    ``dims`` binds symbolic dim names; ``input_shapes`` pins whole input
    shapes. ``measured`` holds the shapes of one run of the model (see
    :func:`onnxmem.runtime.ort.infer_measured_shapes`, which runs it); they take
    precedence over inferred ones, with a warning where the two disagree.
    A ``dims`` name the model does not declare is an error unless ``strict_dims``
    is off (the zoo job binds one set of dims over many models).

    Subgraph bodies are sized from the inference of the whole model, then, for
    what that leaves open, each body is inferred as a model of its own (the
    same engines, recursively for nested bodies) that sees the concrete shapes
    of the outer values it captures and the values of those known: small
    weights and constants, shape arithmetic the evaluator computed, and
    ``measured_values`` (small integer values of one run, see
    :func:`onnxmem.runtime.ort.measure_shapes`). A body value computed past its dtype's range
    (:func:`onnxmem.shapes.subgraphs.ranged_values`) is sized by its body inferred on its own
    alone; a main-graph If output left open takes the shape its branches so agree on (source
    ``branches``). ``excluded``: If branches runs are
    assumed not to take (:func:`onnxmem.graph.view.excluded_branches`): an If's outputs
    take the other branch's shapes, and the excluded one need not be sized. ``nchwc_block``:
    the NCHWc block size of the session that built the graph (``plan --optimize all`` on CPU
    records it), for the ReorderInput outputs the file itself does not size. ``max_trips``: the
    most iterations a Loop whose carried values grow runs where its trip count is not a constant
    (:mod:`onnxmem.shapes.loops`). ``nodes``: the main graph's node fields, where read.
    """
    input_shapes = dict(input_shapes or {})
    fields = read_nodes(model.graph, given=nodes)
    state = _bound_inference(model, dict(dims or {}), input_shapes, strict_dims, excluded, fields)
    state.measured = measured
    state.nchwc_block = nchwc_block
    state.max_trips = max_trips
    state.excluded = excluded
    for step in STEPS:
        if step.always or state.incomplete():
            step.run(state)
    missing = [n for n in state.wanted if n not in state.known]
    ifs = {o for n in model.graph.node if n.op_type == "If" and n.domain in ("", "ai.onnx") for o in n.output} if missing else set()
    if ifs.intersection(missing) and _branch_outputs(state, measured_values or {}, excluded):
        missing = [n for n in state.wanted if n not in state.known]
    if missing:
        zero = sorted(k for k, v in (dims or {}).items() if v == 0)
        if zero:
            raise unknown_at_zero(missing, zero)
        raise unknown_sizes(missing, model, state.file_dims, input_shapes, state.known)
    known = state.known
    for name, init in zip(fields.initializers, model.graph.initializer):  # names the view shares
        known.setdefault(name, (init.data_type, tuple(init.dims)))
    check_shapes(model, known, fields)
    bodies = _subgraph_shapes(state, measured_values or {}, excluded)
    same: dict[tuple[int, ...], tuple[int, ...]] = {}  # one tuple per distinct shape
    sources, warnings, loops, flat = state.sources, tuple(state.warnings), dict(state.loops), state.flat
    del state  # with it the copies of the model the engines made
    if len(model.graph.node) >= pieces.PIECE_NODES:
        # their pages handed back; a smaller graph's cost more to take again (range plans infer
        # at each point) than they hold (onnxmem.core.memory)
        release_freed()
    return ShapeInfo(
        {k: v[0] for k, v in known.items()},
        {k: same.setdefault(v[1], v[1]) for k, v in known.items()},
        sources,
        warnings,
        bodies,
        excluded,
        loops,
        flat,
    )


def _bound_inference(
    model: onnx.ModelProto,
    user_dims: dict[str, int],
    input_shapes: Mapping[str, tuple[int, ...]],
    strict_dims: bool,
    excluded: frozenset[BodyKey],
    nodes: NodeFields,
) -> Inference:
    """The state the steps start from: a copy stripped for inference, excluded branches
    replaced by taken ones, dims renamed to safe names, the graph inputs and outputs bound."""
    # a graph without subgraphs or local functions (most) is not walked for them again
    flat = not model.functions and not any(subgraph_attributes(n) for n in model.graph.node)
    # a large graph without subgraphs: a shell, whose nodes the windows read from the model itself
    shell = flat and len(nodes) >= pieces.PIECE_NODES  # read here: tests set it lower
    work = strip_for_inference(model, flat=flat, shell=shell)
    take_branches(work.graph, excluded)
    # from here on the inference engines see generated names only (see rename_dims)
    safe = rename_dims(work, [("", work.graph)] if flat else None)
    original = {v: k for k, v in safe.items()}
    if strict_dims:
        _check_dim_names(user_dims, safe)
    dims = {safe[k]: v for k, v in user_dims.items() if k in safe}
    _bind_inputs(model, work, input_shapes, dims, original)
    # graph outputs: bind their symbolic dims too, so inference does not conflict
    for vi in work.graph.output:
        _, cur = read_type(vi)
        if cur is not None:
            set_shape(vi, bind_dims(cur, dims))
    # the same bindings under the file's own names, for its value_info (read last)
    file_dims = {**user_dims, **{original[k]: v for k, v in dims.items() if k in original}}
    return Inference(model, work, dims, file_dims, top_level_values(model, nodes), flat=flat, nodes=nodes,
                     full=not shell)


def _check_dim_names(user_dims: Mapping[str, int], safe: Mapping[str, str]) -> None:
    """Refuse a ``--dim`` name the model does not declare, listing those it does."""
    for name, value in user_dims.items():
        if name not in safe:
            declared = sorted(safe)
            listing = (
                "its named dims are " + listed(declared, 12)
                if declared else "it has no named dims (pin whole inputs with --input-shape)"
            )
            raise ShapeError(f"--dim {show_name(name)}={value} names no dim of the model; {listing}")


def _bind_inputs(
    model: onnx.ModelProto,
    work: onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]],
    dims: dict[str, int],
    original: Mapping[str, str],
) -> None:
    """Pin the ``input_shapes`` on ``work``'s graph inputs and bind ``dims`` on the others,
    learning (into ``dims``) the dims that pinned shapes imply."""
    inits = {i.name for i in model.graph.initializer}
    real_inputs = {vi.name: vi for vi in work.graph.input if vi.name not in inits}
    for name in input_shapes:
        if name not in real_inputs:
            raise ShapeError(
                f"--input-shape names {show_name(name)}, which is not a graph input; inputs are: "
                f"{', '.join(map(repr, real_inputs)) or '(none)'}"
            )
    for name, vi in real_inputs.items():
        _, cur = read_type(vi)
        if name in input_shapes:
            pin = input_shapes[name]
            if cur is not None:
                _learn_pinned_dims(name, cur, pin, dims, original)
            set_shape(vi, pin)
        elif cur is not None:
            set_shape(vi, bind_dims(cur, dims))


def _learn_pinned_dims(name: str, cur: tuple[Dim, ...], pin: tuple[int, ...], dims: dict[str, int],
                       original: Mapping[str, str]) -> None:
    """Check input ``name``'s pinned shape against its declared dims ``cur`` and bind, into
    ``dims``, each named dim the pin gives a value."""
    if len(cur) != len(pin):
        raise ShapeError(
            f"--input-shape {show_name(name)}={'x'.join(map(str, pin))} has rank {len(pin)} "
            f"but input {show_name(name)} has rank {len(cur)}"
        )
    for axis, (c, p) in enumerate(zip(cur, pin)):
        if isinstance(c, int) and c >= 0 and c != p:
            raise ShapeError(
                f"--input-shape {show_name(name)}: axis {axis} is {p} but the model fixes it to {c}"
            )
        if isinstance(c, str):
            if c in dims and dims[c] != p:
                raise ShapeError(
                    f"--input-shape {show_name(name)}: axis {axis} is {p} but "
                    f"--dim {original.get(c, c)!r}={dims[c]}"
                )
            dims.setdefault(c, p)


def _subgraph_shapes(
    state: Inference, measured_values: Mapping[str, np.ndarray], excluded: frozenset[BodyKey]
) -> dict[BodyKey, dict[str, TypedShape]]:
    """The shapes of every subgraph's values, from the cheapest source that sizes them all:
    the whole model's inference, then onnxruntime's symbolic inference and the file's
    value_info, then both engines again with every main-graph value at its concrete shape,
    then each body inferred on its own with the values it captures where they are known."""
    if state.flat or not any(True for _ in iter_bodies(state.model.graph)):
        return {}
    model, work, inferred, dims = state.model, state.work, state.inferred, state.dims

    def open_bodies() -> bool:
        return any(len(bodies[k]) < defined_count(g) for k, g in iter_bodies(model.graph))

    # values sized from a value computed past its dtype's range: left to each body inferred on its own
    undefined = state.evaluated.undefined if state.evaluated is not None else frozenset()
    skip = ranged_values(model, inferred if inferred is not None else work, undefined)
    bodies = body_shapes(model, [(inferred, dims)], skip)
    if open_bodies():
        if state.symbolic is None:
            state.symbolic = run_symbolic_inference(inferred if inferred is not None else work, undefined)
        bodies = body_shapes(model, [(inferred, dims), (state.symbolic, dims)], skip, state.file_dims)
    if open_bodies():
        # infer again with every main-graph value at its concrete (or measured) shape, so
        # the bodies see the exact types of the outer values they read
        again = with_shapes(inferred if inferred is not None else work, state.known)
        re_onnx = run_onnx_inference(again)
        re_sym = run_symbolic_inference(re_onnx if re_onnx is not None else again, undefined)
        bodies = body_shapes(model, [(inferred, dims), (state.symbolic, dims), (re_onnx, {}), (re_sym, {})], skip,
                             state.file_dims)
    if open_bodies() or state.loops:
        values = {**outer_values(state), **measured_values}
        if any(skip.values()):  # the outer values bodies read, for those sized past the range
            values = evaluate_values(work, values, {k: v[1] for k, v in state.known.items()},
                                     [n for n in body_captures(model.graph) if n not in values])
        grow_loops(state, values, only_open=False)  # Loops whose carried values grow: sized per iteration
        for bound in state.loops.values():
            bodies.update((k, dict(v)) for k, v in bound.bodies.items())
        standalone_bodies(model, model.graph, (), state.known, values, bodies, excluded, nested_grower(state))
    if any(skip.values()):  # the file's declarations, the last resort, for those no body inferred sized
        for key, declared in body_shapes(model, [], skip, state.file_dims, rest=True).items():
            for name, typed in declared.items():
                bodies.setdefault(key, {}).setdefault(name, typed)
    return bodies


def _branch_outputs(state: Inference, measured_values: Mapping[str, np.ndarray], excluded: frozenset[BodyKey]) -> bool:
    """Give the main graph's If outputs left open the shapes their branches, each inferred on its own,
    agree on (onnxruntime's symbolic inference gives none computed past a dtype's range in a branch),
    then infer again with them; whether one was given."""
    bodies = _subgraph_shapes(state, measured_values, excluded)
    values = {**outer_values(state), **measured_values}
    taken = {k: v for k, v in taken_branches(state.model.graph, (), values, bodies, state.known, excluded).items()
             if k in state.wanted and k not in state.known}
    if not taken:
        return False
    state.known.update(taken)
    state.sources.update(dict.fromkeys(taken, "branches"))
    again = run_onnx_inference(with_shapes(state.inferred if state.inferred is not None else state.work, state.known))
    if again is not None:
        state.absorb(collect_types(again), "branches", state.dims)
    return True


def infer_symbolic_shapes(
    model: onnx.ModelProto,
    ranged: Iterable[str],
    *,
    dims: Mapping[str, int] | None = None,
    accept: Callable[[tuple[Dim, ...], Mapping[str, str]], bool] | None = None,
    nchwc_block: int | None = None,
) -> tuple[dict[str, tuple[int, tuple[Dim, ...]]], dict[str, str]]:
    """Every top-level value's dtype and shape with the ``ranged`` dims left symbolic.

    The same engines as :func:`infer_shapes` (onnx inference with data
    propagation, shape arithmetic, onnxruntime's symbolic inference), on the
    file with ``dims`` bound and the ``ranged`` names left open. A dim of the
    result is an int or a text over generated safe names; returns
    ``({value: (elem_type, dims)}, {safe name: original name})``. A value keeps
    the first shape ``accept(dims, safe_to_original)`` takes (default: every
    shape without an unknown dim); values no engine shapes acceptably are left
    out, for the caller to name.

    onnxruntime's fused and blocked-layout ops (the graph ``--optimize`` plans) are sized by the
    contrib rules on the symbolic shapes (:func:`onnxmem.shapes.sentinel.symbolic_rule`), with
    onnx's per-node inference between them; what that sweep leaves (shape arithmetic past them)
    goes to the engines again, which see the new shapes as value_info; up to
    :data:`SYMBOLIC_ROUNDS` rounds. ``nchwc_block``: as for :func:`infer_shapes`.
    """
    fixed = dict(dims or {})
    work = strip_for_inference(model)
    safe = rename_dims(work)
    original = {v: k for k, v in safe.items()}
    for name in (*ranged, *fixed):
        if name not in safe:
            raise ShapeError(f"--dim {show_name(name)} names no dim of the model; its named dims are "
                             + (", ".join(map(show_name, sorted(safe)[:12])) or "none"))
    bound = {safe[k]: v for k, v in fixed.items()}
    for vi in (*work.graph.input, *work.graph.output):
        _, cur = read_type(vi)
        if cur is not None:
            set_shape(vi, bind_dims(cur, bound))
    declared = undeclared_outputs(work)  # given back below where inference leaves an output open
    take = accept or (lambda shape, _names: None not in shape)
    wanted = top_level_values(model)
    found: dict[str, tuple[int, tuple[Dim, ...]]] = {}
    seen: dict[str, tuple[int, tuple[Dim, ...] | None]] = {}  # what inference made of the others

    def absorb(info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]) -> None:
        for name in wanted:
            et, sh = info.get(name, (None, None))
            if name in found or et is None:
                continue
            shape = None if sh is None else tuple(bind_dims(sh, bound))
            if shape is not None and take(shape, original):
                found[name] = (et, shape)
            elif shape is not None or name not in seen:
                seen[name] = (et, shape)

    # sized from a value (GroupQueryAttention's present): only onnxruntime's symbolic inference,
    # with onnxmem's handler for the op, reads it; no declared shape is taken for it
    by_value = value_sized(model)
    _symbolic_sweep(model, work, absorb, found, wanted, bound, by_value, nchwc_block)
    given, read = declared_back(work, {k: v for k, v in declared.items() if k not in by_value}, found, seen,
                                lambda d: take((d,), original))
    absorb(given)  # outputs left open take their declarations where they agree; those read are inferred again
    if read and len(found) < len(wanted):
        _symbolic_sweep(model, work, absorb, found, wanted, bound, by_value, nchwc_block)
    foreign = _declared_foreign(model, found, safe, bound) if len(found) < len(wanted) else {}
    if foreign:  # as a plan at one point takes them last: then the engines past those nodes
        absorb(foreign)
        past, names = _past_foreign(work, found)
        run_engines(past, lambda info: absorb(_restored(info, names)), lambda: len(found) < len(wanted),
                    lambda d: resolve_dim(d, bound), symbolic_only=by_value)
    for init in model.graph.initializer:
        found.setdefault(init.name, (init.data_type, tuple(int(d) for d in init.dims)))
    return found, original


def _symbolic_sweep(model: onnx.ModelProto, work: onnx.ModelProto,
                    absorb: Callable[[Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]], None],
                    found: dict[str, tuple[int, tuple[Dim, ...]]], wanted: list[str], bound: Mapping[str, int],
                    by_value: Collection[str], nchwc_block: int | None) -> None:
    """The engines on ``work``, then up to :data:`SYMBOLIC_ROUNDS` rounds of the contrib rules and the
    engines again past the ops they sized (:func:`infer_symbolic_shapes`), into ``found`` by ``absorb``."""
    run_engines(work, absorb, lambda: len(found) < len(wanted), lambda d: resolve_dim(d, bound),
                symbolic_only=by_value)
    for _ in range(SYMBOLIC_ROUNDS):
        if len(found) >= len(wanted):
            break
        before = len(found)
        known: dict[str, Any] = dict(found)
        complete_contrib(model, known, {}, [n for n in wanted if n not in found and n not in by_value],
                         nchwc_block=nchwc_block, symbolic=True)
        absorb(known)
        if len(found) == before or len(found) >= len(wanted):
            break
        past, names = _past_foreign(work, found)
        run_engines(past, lambda info, fresh=names: absorb(_restored(info, fresh)),  # type: ignore[misc]
                    lambda: len(found) < len(wanted), lambda d: resolve_dim(d, bound),
                    symbolic_only=by_value)


def _declared_foreign(model: onnx.ModelProto, found: Mapping[str, tuple[int, tuple[Dim, ...]]],
                      safe: Mapping[str, str], bound: Mapping[str, int]) -> dict[str, tuple[int, tuple[Dim, ...]]]:
    """The outputs of nodes of custom domains (:func:`onnxmem.shapes.contrib.is_custom_domain`: no
    engine or rule sizes them) whose inputs are all sized, as the file's value_info declares them where each dim is a
    number or a dim of the model (``safe``: its generated name; ``bound`` ones bound): what a plan
    at one point takes last (:func:`onnxmem.shapes.steps._value_info`), here over the ranged dims."""
    declared = collect_types(model)  # with the initializers and graph inputs, which are sized
    have = set(found) | set(declared) - {o for node in model.graph.node for o in node.output}
    taken: dict[str, tuple[int, tuple[Dim, ...]]] = {}
    for node in model.graph.node:
        if not is_custom_domain(node.domain) or not all(not n or n in have for n in node.input):
            continue
        for name in node.output:
            et, dims = declared.get(name, (None, None)) if name not in have else (None, None)
            shape = [d if isinstance(d, int) and d >= 0 else safe.get(d) if isinstance(d, str) else None
                     for d in dims or ()]
            if et and dims is not None and None not in shape:
                taken[name] = (et, tuple(bind_dims(tuple(shape), bound)))
                have.add(name)
    return taken


def _past_foreign(work: onnx.ModelProto, found: Mapping[str, tuple[int, tuple[Dim, ...]]]
                  ) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``work`` without its nodes of domains other than ONNX's whose outputs ``found``
    all sizes: those outputs become graph inputs of their shapes, so the engines infer what
    follows them as a graph of ONNX ops. A dim that is an expression gets a fresh name there
    (returned, name -> expression), so that no engine reads an expression as one symbol."""
    m = onnx.ModelProto()
    m.CopyFrom(work)
    g = m.graph
    names: dict[str, str] = {}
    by_text: dict[str, str] = {}
    declared = {vi.name for vi in g.input}
    keep = []
    for node in g.node:
        if node.domain in ("", "ai.onnx") or not all(not o or o in found for o in node.output):
            keep.append(node)
            continue
        for o in node.output:
            if o and o not in declared:
                et, shape = found[o]
                dims = [d if d is None or isinstance(d, int) or d.isidentifier()
                        else by_text.setdefault(d, f"onnxmem_expr_{len(by_text)}") for d in shape]
                g.input.append(onnx.helper.make_tensor_value_info(o, et, dims))
                declared.add(o)
    del g.node[:]
    g.node.extend(keep)
    names.update({v: k for k, v in by_text.items()})
    return m, names


def _restored(info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]], names: Mapping[str, str]
              ) -> dict[str, tuple[int | None, tuple[Dim, ...] | None]]:
    """``info`` with the fresh names of :func:`_past_foreign` replaced by their expressions."""
    if not names:
        return dict(info)

    def text(d: Dim) -> Dim:
        if not isinstance(d, str) or "onnxmem_expr_" not in d:
            return d
        return _FRESH.sub(lambda hit: f"({names[hit.group(0)]})" if hit.group(0) in names else hit.group(0), d)

    return {k: (et, None if sh is None else tuple(text(d) for d in sh)) for k, (et, sh) in info.items()}
