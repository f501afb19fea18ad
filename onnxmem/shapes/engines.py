"""The inference engines onnxmem drives: onnx's, onnxruntime's symbolic one, and the copies they run on.

Each engine runs on a copy stripped for inference (:func:`strip_for_inference`) and returns an
inferred model or ``None``; :func:`collect_types` reads what a model declares of its values.
onnxruntime's symbolic inference is imported when it runs (it is the one engine that needs
onnxruntime, and the command line starts without it).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Collection, Container, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnxmem.shapes.shapeeval as shapeeval
from onnxmem.model import (
    OTHER_BRANCH,
    BodyKey,
    Dim,
    captured_names,
    copy_without,
    iter_graphs,
    owner_key,
    read_type,
    resolve_dim,
    set_shape,
    subgraph_attributes,
)

__all__ = [
    "SYMBOLIC_PASSES",
    "collect_graph_types",
    "collect_value_types",
    "collect_types",
    "declared_back",
    "declared_shape",
    "fill_shell",
    "is_large",
    "small_initializers",
    "run_engines",
    "run_onnx_inference",
    "run_symbolic_inference",
    "strip_for_inference",
    "take_branches",
    "undeclared_outputs",
    "values_after",
    "with_declared",
]

#: passes of onnxruntime's symbolic inference onnxmem lets run
SYMBOLIC_PASSES = 16


def take_branches(graph: onnx.GraphProto, excluded: frozenset[BodyKey], key: BodyKey = ()) -> None:
    """Replace, in ``graph`` (an inference copy), each ``excluded`` If branch with the one runs
    take, so that every engine gives the If's outputs the shapes of the branch planned."""
    if not excluded:
        return
    for i, node in enumerate(graph.node):
        subs = dict(subgraph_attributes(node))
        for attr, sub in subs.items():
            other = OTHER_BRANCH.get(attr)
            if node.op_type == "If" and (*key, (owner_key(node, i), attr)) in excluded and other in subs:
                sub.CopyFrom(subs[other])
            else:
                take_branches(sub, excluded, (*key, (owner_key(node, i), attr)))


def is_large(init: onnx.TensorProto) -> bool:
    """Whether an initializer is one :func:`strip_for_inference` keeps no data of: external, or of
    more than 1,024 elements."""
    return init.data_location == TensorProto.EXTERNAL or math.prod(init.dims) > 1024


def small_initializers(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """The initializers of ``graph`` that :func:`strip_for_inference` keeps with their values."""
    return [init for init in graph.initializer if not is_large(init)]


def fill_shell(shell: onnx.ModelProto, model: onnx.ModelProto) -> None:
    """Give ``shell`` (``strip_for_inference(model, shell=True)``, changed since only in its
    declarations) the main graph's nodes and small initializers: then it is what
    ``strip_for_inference(model)`` makes, with the same changes."""
    g = shell.graph
    g.node.extend(model.graph.node)
    g.initializer.extend(small_initializers(model.graph))


def strip_for_inference(model: onnx.ModelProto, *, flat: bool = False, shell: bool = False) -> onnx.ModelProto:
    """A copy without large initializer data or value_info, for shape inference.

    Small initializers keep their values (data propagation of shapes needs
    them). Large and external ones of the top-level graph become typed graph
    inputs, so no inference engine tries to read their bytes; those of
    subgraphs (whose inputs are positional) keep their dims and point to no
    data. The subgraphs' outputs lose their declared shapes: onnx's inference keeps a declared
    shape that conflicts with the one the body makes, and gives it to the If's or Loop's outputs
    and the values after them, while onnxruntime runs the body at the shape it makes (the file's
    declarations are read last, for what inference leaves open: :func:`onnxmem.shapes.subgraphs.body_shapes`).
    ``flat``: the caller knows the graph holds no subgraph (it is not walked for them).
    ``shell`` (with ``flat``): the copy without the main graph's nodes and small initializers,
    which the windows of :mod:`onnxmem.shapes.pieces` read from ``model`` itself (on a
    100,000-node graph the two are half the copy's 100 MB); :func:`fill_shell` adds them.
    """
    bare = shell and flat  # the nodes and small initializers left to the model itself
    m = copy_without(model, ("initializer", "value_info", *(("node",) if bare else ())))
    g = m.graph
    declared = {vi.name for vi in g.input}
    for init in model.graph.initializer:
        if not is_large(init):
            if not bare:
                g.initializer.append(init)
        elif init.name not in declared:
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    for sub in () if flat else iter_graphs(g):
        if sub is g:
            continue
        for vi in sub.output:  # inferred from the body's nodes, never taken from the file (below)
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
        for init in sub.initializer:
            if is_large(init):
                dims, dt, name = list(init.dims), init.data_type, init.name
                init.Clear()
                init.name, init.data_type = name, dt
                init.dims.extend(dims)
                init.data_location = TensorProto.EXTERNAL
                e = init.external_data.add()
                e.key, e.value = "location", "__onnxmem_stripped__"
    return m


def undeclared_outputs(work: onnx.ModelProto) -> dict[str, tuple[Dim, ...]]:
    """Take the declared shapes off ``work``'s graph outputs; returns their dims by name.

    Where a declared shape conflicts with the inferred one, onnx's inference keeps the declared
    one (and gives it to the values read after it) while onnxruntime runs the model at the
    inferred one: a graph output takes its declared shape only where inference leaves it open
    and the declaration agrees with what it fixed and fixes more (its dims bound and checked
    against ``--dim`` before this; :func:`with_declared`)."""
    declared: dict[str, tuple[Dim, ...]] = {}
    for vi in work.graph.output:
        dims = read_type(vi)[1]
        if dims is not None:
            declared[vi.name] = dims
            vi.type.tensor_type.ClearField("shape")
    return declared


def with_declared(declared: tuple[Dim, ...], inferred: tuple[Dim, ...] | None,
                  known: Callable[[Dim], bool]) -> tuple[Dim, ...] | None:
    """An output's ``inferred`` shape (``None``: no shape) with its ``declared`` dims filling the dims
    inference left open (those not ``known``); ``None`` where the declaration conflicts with it (another
    rank, another value of a dim both fix) or fills no dim (where inference gives no shape: a
    declaration without a known dim, but a scalar's)."""
    dims = declared
    if inferred is None:
        return dims if not dims or any(d is not None and known(d) for d in dims) else None
    pairs = list(zip(inferred, dims))
    if len(inferred) != len(dims) or any(isinstance(i, int) and isinstance(d, int) and i != d for i, d in pairs):
        return None
    fills = [i is None or not known(i) for i in inferred]
    if not any(f and d is not None and known(d) for f, (_, d) in zip(fills, pairs)):
        return None
    return tuple(d if f else i for f, (i, d) in zip(fills, pairs))


def declared_shape(declared: tuple[int | None, tuple[Dim, ...] | None],
                   partial: tuple[int | None, tuple[int | None, ...] | None],
                   binding: Mapping[str, int]) -> tuple[int, tuple[int, ...]] | None:
    """The concrete shape a file's ``declared`` type of a value (:func:`collect_graph_types`' entry:
    its element type and dims, under ``binding``) gives it where it agrees with what inference made
    of it, ``partial`` (an element type and dims, ``None`` where unknown), by :func:`with_declared`'s
    rule; ``None`` where it has no shape, conflicts or leaves a dim open."""
    et = declared[0] or partial[0]
    shape = None if declared[1] is None else with_declared(
        declared[1], partial[1], lambda d: resolve_dim(d, binding) is not None)
    resolved = [resolve_dim(d, binding) for d in shape or ()]
    if not et or shape is None or any(r is None for r in resolved):
        return None
    return et, tuple(int(r) for r in resolved)  # type: ignore[arg-type]


def declared_back(work: onnx.ModelProto, declared: Mapping[str, tuple[Dim, ...]], found: Collection[str],
                  seen: Mapping[str, tuple[int, tuple[Dim, ...] | None]], known: Callable[[Dim], bool],
                  ) -> tuple[dict[str, tuple[int, tuple[Dim, ...]]], bool]:
    """The outputs of ``work`` not ``found`` that take their ``declared`` shapes (:func:`with_declared`
    with what inference made of them, ``seen``), set on ``work``'s outputs; and whether a node reads
    one of them (then the engines run again, on ``work``)."""
    given: dict[str, tuple[int, tuple[Dim, ...]]] = {}
    for vi in work.graph.output:
        if vi.name in declared and vi.name not in found:
            et, sh = seen.get(vi.name, (vi.type.tensor_type.elem_type, None))
            shape = with_declared(declared[vi.name], sh, known)
            if et and shape is not None:
                set_shape(vi, shape)
                given[vi.name] = (et, shape)
    return given, any(n in given for node in work.graph.node for n in node.input)


#: the ops through which onnx's data propagation carries values (as int64), and the tensor
#: types it reads initializers of
_PROPAGATING = frozenset({"Shape", "Size", "Gather", "Concat", "Slice", "Squeeze", "Unsqueeze", "Add", "Sub", "Mul",
                          "Cast"})
_PROPAGATED_TYPES = frozenset({TensorProto.INT64, TensorProto.INT32})
#: the prefix of the values through which Casts read their inputs in :func:`_hide_converting_casts`
_HIDDEN = "__onnxmem_cast_input"


def run_onnx_inference(model: onnx.ModelProto, *, flat: bool = False) -> onnx.ModelProto | None:
    """onnx's shape inference of ``model`` with data propagation, else without; ``None`` where
    both fail. onnx's data propagation copies a Cast's values unconverted, where onnxruntime
    converts them (int64 -> int32 modulo 2^32, a float's rounding); every Cast to another type
    than int64 is hidden from it (:func:`_hide_converting_casts`), in the main graph and in
    every subgraph, so the shapes that follow it are left to shape arithmetic
    (:mod:`onnxmem.shapes.shapeeval`, on each body inferred on its own), which converts as
    onnxruntime does. The result's nodes are ``model``'s, and ``model`` is left as given. ``flat``:
    the caller knows that no node of ``model`` holds a subgraph (none is looked for)."""
    hidden = _hide_converting_casts(model, flat=flat)
    try:
        try:
            out: onnx.ModelProto | None = onnx.shape_inference.infer_shapes(
                model, check_type=False, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 - fall through to the next method
            out = None
    finally:
        _unhide(model, hidden)
    if out is None:
        try:
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001
            return None
    if hidden:
        _drop_hidden(out, hidden, main_only=all(graph is model.graph for graph, *_ in hidden))
    return out


#: a Cast hidden by :func:`_hide_converting_casts`: its graph, its place there (after the
#: Identity put before it), the value the Identity makes and the value the Cast read
Hidden = tuple[onnx.GraphProto, int, str, str]


def _hide_converting_casts(model: onnx.ModelProto, *, flat: bool = False) -> list[Hidden]:
    """In ``model`` itself, each Cast to another type than int64 that may read propagated values
    (in the main graph, from a node of :data:`_PROPAGATING` or an int64/int32 initializer; in a
    subgraph, any) made to read its input through an Identity put right before it (onnx's data
    propagation does not cross one); the Casts so hidden, in the order they were (``[]`` where
    none is). :func:`_unhide` puts ``model`` back as it was. The main graph's nodes are read in
    one walk (this runs before every inference); ``flat``: no node holds a subgraph."""
    g = model.graph
    producers: dict[str, str] = {}
    outputs: list[str] = []  # every node output of the main graph
    casts: list[int] = []  # the main graph's Casts
    subs: list[onnx.GraphProto] = []  # the subgraphs of its nodes, in order
    for k, n in enumerate(g.node):
        outs = list(n.output)
        outputs += outs
        if n.domain in ("", "ai.onnx"):
            op = n.op_type
            for o in outs:
                producers[o] = op
            if op == "Cast":
                casts.append(k)
        if not flat and n.attribute:
            subs.extend(sub for _, sub in subgraph_attributes(n))
    producers.pop("", None)  # an output left out names no value
    producers.update((i.name, "") for i in g.initializer if i.data_type in _PROPAGATED_TYPES)
    nested = [x for sub in subs for x in iter_graphs(sub)]  # in iter_graphs's order after ``g``
    found = [(g, [k for k in casts if _converting(g.node[k])
                  and producers.get(g.node[k].input[0]) in (*_PROPAGATING, "")])]
    found += [(graph, [k for k, n in enumerate(graph.node) if n.op_type == "Cast" and n.domain in ("", "ai.onnx")
                       and _converting(n)]) for graph in nested]
    if not any(places for _, places in found):
        return []
    taken = {*outputs, *(vi.name for vi in (*g.input, *g.output)), *(i.name for i in g.initializer)}
    taken.update(x for graph in nested for x in (*(o for n in graph.node for o in n.output),
                                                  *(vi.name for vi in (*graph.input, *graph.output)),
                                                  *(i.name for i in graph.initializer)))
    hidden: list[Hidden] = []
    for graph, places in found:
        for shift, k in enumerate(places):
            at = k + shift  # the Identities put before it so far moved it on
            cast = graph.node[at]
            name, read = f"{_HIDDEN}{len(hidden)}", cast.input[0]
            while name in taken:
                name += "_"
            taken.add(name)
            graph.node.insert(at, helper.make_node("Identity", [read], [name]))
            cast.input[0] = name
            hidden.append((graph, at + 1, name, read))
    return hidden


def _converting(cast: onnx.NodeProto) -> bool:
    """Whether ``cast`` reads a named value and converts to another type than int64."""
    return bool(cast.input and cast.input[0]) and next(
        (a.i for a in cast.attribute if a.name == "to"), 0) != TensorProto.INT64


def _drop_hidden(out: onnx.ModelProto, hidden: Sequence[Hidden], *, main_only: bool) -> None:
    """Take out of ``out`` (the inference of a model whose Casts were ``hidden``) the Identities
    put before them and their value_info, the Casts reading their inputs again. ``main_only``:
    every hidden Cast sits in the main graph, whose nodes onnx keeps in place: only each Cast's
    place is read there (every graph is searched where one is not found in its place)."""
    names = {name: read for _, _, name, read in hidden}
    main = out.graph
    if main_only and _in_place(main, hidden):
        for _, at, _, read in reversed(hidden):
            main.node[at].input[0] = read
            del main.node[at - 1]
        graphs: Iterable[onnx.GraphProto] = (main,)
    else:
        graphs = iter_graphs(main)
        for g in graphs:
            for k in reversed(range(len(g.node))):
                n = g.node[k]
                if n.op_type == "Identity" and n.output and n.output[0] in names:
                    del g.node[k]
                elif n.op_type == "Cast" and n.input and n.input[0] in names:
                    n.input[0] = names[n.input[0]]
        graphs = iter_graphs(main)
    for g in graphs:
        drop = [k for k, vi in enumerate(g.value_info) if vi.name in names]
        for k in reversed(drop):
            del g.value_info[k]


def _in_place(g: onnx.GraphProto, hidden: Sequence[Hidden]) -> bool:
    """Whether each of ``hidden`` sits in ``g`` where it was put: its Identity, then its Cast."""
    return all(at < len(g.node) and g.node[at - 1].op_type == "Identity" and g.node[at - 1].output == [name]
               and g.node[at].op_type == "Cast" and g.node[at].input[:1] == [name] for _, at, name, _ in hidden)


def _unhide(model: onnx.ModelProto, hidden: Sequence[Hidden]) -> None:
    """Undo :func:`_hide_converting_casts` on ``model`` (its ``hidden``), last first."""
    for graph, at, _, read in reversed(hidden):
        graph.node[at].input[0] = read
        del graph.node[at - 1]


def run_symbolic_inference(model: onnx.ModelProto, undefined: Collection[str] = ()) -> onnx.ModelProto | None:
    """onnxruntime's symbolic inference of ``model``, or ``None`` where it fails. It computes
    values without their dtype's range: no value computed from one of ``undefined`` (those
    whose exact result leaves the range, :attr:`onnxmem.shapes.shapeeval.Evaluated.undefined`)
    keeps the shape it gives."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except Exception:  # noqa: BLE001 - onnxruntime missing its tools
        return None
    import contextlib
    import io
    import logging

    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    # SymbolicShapeInference.infer_shapes raises on a partial result and then
    # saves a scratch model into the working folder; drive its steps directly
    # instead, to keep the shapes it did find and write nothing.
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            engine = SymbolicShapeInference(2**31 - 1, True, False, 0)
            _concat_values_on_axis_0_only(engine)
            _group_query_present(engine)
            engine._preprocess(model)
            # it repeats its pass while a pass merged symbols; on some damaged models
            # it never stops, so the passes are bounded (real models need one to three)
            for _ in range(SYMBOLIC_PASSES):
                if not engine.run_:
                    break
                engine._infer_impl()
            engine._update_output_from_vi()
            out: onnx.ModelProto = engine.out_mp_
    except Exception:  # noqa: BLE001 - symbolic inference gives up on some graphs
        return None
    if undefined:
        after = values_after(out.graph, undefined)
        for vi in (*out.graph.value_info, *out.graph.output):
            if vi.name in after and vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
    return out


def values_after(graph: onnx.GraphProto, names: Iterable[str]) -> set[str]:
    """``names`` and every value of ``graph`` computed from one of them, through any node (a
    node with subgraphs reads what its bodies capture as well), in any node order."""
    after = {name for name in names if name}
    if not after:
        return after
    reads = [[*node.input, *(c for _, sub in subgraph_attributes(node) for c in captured_names(sub))]
             for node in graph.node]
    users: dict[str, list[int]] = {}
    for i, ins in enumerate(reads):
        for name in ins:
            if name:
                users.setdefault(name, []).append(i)
    stack = list(after)
    while stack:
        for i in users.get(stack.pop(), ()):
            for out in graph.node[i].output:
                if out and out not in after:
                    after.add(out)
                    stack.append(out)
    return after


def _concat_values_on_axis_0_only(engine: Any) -> None:
    """Let onnxruntime's symbolic inference through a Concat of known values on another axis.

    The engine carries the values of small tensors (shape arithmetic, but also a Llama
    decoder's rotary angles ``position * inv_freq``, known once the position is a dim) and
    concatenates them as flat lists, asserting the Concat is on axis 0; a Concat on the last
    axis of such values (``cat((freqs, freqs), -1)``) stopped the whole inference. Such a
    Concat now gets its shape inferred and its values left unknown.
    """
    infer = engine.dispatcher_.get("Concat")
    if infer is None:
        return

    def concat(node: onnx.NodeProto) -> Any:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if axis == 0:
            return infer(node)
        engine._get_int_or_float_values = lambda node, broadcast=False: [None] * len(node.input)
        try:
            return infer(node)
        finally:
            del engine._get_int_or_float_values

    engine.dispatcher_["Concat"] = concat


def _group_query_present(engine: Any) -> None:
    """Size GroupQueryAttention's present cache from ``total_sequence_length``'s value.

    onnxruntime's symbolic inference gives the present the past's shape, which is right only
    for a cache buffer already at its full length. The kernel's present length is
    ``max(past length, total_sequence_length)`` (module doc of
    :mod:`onnxmem.shapes.contrib_attention`). Where the engine knows the total as an
    expression of the dims (``Shape(past_key)[2] + Shape(input_ids)[1]``, as exporters write
    it) and one of the two is at least the other at every point where each dim is >= 0
    (:func:`_larger`), that one is the present's length, and ``output_qk`` gets
    ``(batch, num_heads, seq, total)``. Otherwise the present keeps the past's shape where
    the past's length is fixed (onnxruntime declares it so and its kernel refuses a longer
    one) or ``sliding_window_cache`` is set, and is left without a shape where it is a dim.
    """
    infer = engine.dispatcher_.get("GroupQueryAttention")
    if infer is None:
        return

    def group_query(node: onnx.NodeProto) -> Any:
        result = infer(node)
        window = any(a.name == "sliding_window_cache" and a.i for a in node.attribute)
        if window or len(node.output) < 2:
            return result
        total = engine.sympy_data_.get(node.input[6]) if len(node.input) > 6 and node.input[6] else None
        if isinstance(total, list):
            total = total[0] if len(total) == 1 else None
        past = engine._try_get_shape(node, 3) if len(node.input) > 3 and node.input[3] else None
        length = None
        if total is not None and (past is None or len(past) == 4):
            try:
                length = _larger(engine._get_sympy_shape(node, 3)[2] if past else 0, total)
            except Exception:  # noqa: BLE001 - a dim sympy cannot compare: the present stays unsized
                length = None
        query = engine._try_get_shape(node, 0)
        et = engine.known_vi_[node.input[0]].type.tensor_type.elem_type
        cache = engine.known_vi_[node.input[3]].type.tensor_type.elem_type if past is not None else et
        fixed = past is not None and len(past) == 4 and isinstance(past[2], int)
        for k in (1, 2) if length is not None or not fixed else ():  # a fixed past: onnxruntime's own shape
            if k < len(node.output) and node.output[k]:
                vi = engine.known_vi_[node.output[k]]
                shape = None if length is None or past is None else [*past[:2], _dim(length), past[3]]
                vi.CopyFrom(helper.make_tensor_value_info(node.output[k], cache, shape))
        heads = next((a.i for a in node.attribute if a.name == "num_heads"), 0)
        if len(node.output) > 3 and node.output[3] and total is not None and query and len(query) == 3 and heads > 0:
            vi = engine.known_vi_[node.output[3]]
            vi.CopyFrom(helper.make_tensor_value_info(node.output[3], et, [query[0], heads, query[1], _dim(total)]))
        return result

    engine.dispatcher_["GroupQueryAttention"] = group_query


def _dim(value: Any) -> int | str:
    """A sympy dim as onnx writes it: an int, else the expression's text."""
    return int(value) if isinstance(value, int) or getattr(value, "is_Integer", False) else str(value)


def _sympy_value(value: Any) -> Any:
    """``value`` as a sympy expression without parsing text: an int becomes an Integer, a sympy
    expression stays; anything else (a string from a file) is refused, never given to sympify,
    which evaluates strings."""
    import sympy

    if isinstance(value, bool):
        raise TypeError("a dim is not a bool")
    if isinstance(value, numbers.Integral):  # int, numpy's integers
        return sympy.Integer(int(value))
    if isinstance(value, sympy.Basic):
        return value
    raise TypeError(f"not a sympy dim: {type(value).__name__}")


def _larger(a: Any, b: Any) -> Any:
    """``a`` or ``b`` (sympy expressions or ints): the one that is at least the other at every
    point where each dim is >= 0, proven term by term (their difference a polynomial whose
    coefficients share a sign); ``None`` when neither is."""
    import sympy

    diff = sympy.expand(_sympy_value(b) - _sympy_value(a))
    if not diff.is_polynomial(*diff.free_symbols):
        return None
    coeffs = [t.as_coeff_Mul()[0] for t in sympy.Add.make_args(diff)]
    if all(c >= 0 for c in coeffs):
        return b
    if all(c <= 0 for c in coeffs):
        return a
    return None


def collect_types(model: onnx.ModelProto, *, skip: Container[str] = ()) -> dict[str, tuple[int | None, tuple[Dim, ...] | None]]:
    return collect_graph_types(model.graph, skip=skip)


def collect_graph_types(g: onnx.GraphProto, *, value_info: bool = True, skip: Container[str] = (),
                        initializers: Iterable[onnx.TensorProto] | None = None,
                        ) -> dict[str, tuple[int | None, tuple[Dim, ...] | None]]:
    """Every declared value of ``g`` (not its subgraphs): ``{name: (elem type, dims)}``; a
    later declaration with a shape wins over one without, or with unknown dims. Without
    ``value_info``: its initializers, inputs and outputs alone. The values ``skip`` names are
    left out (each value's entry reads its own declarations alone: the others' are the same).
    ``initializers``: the ones to take in place of ``g``'s (a shell's, whose are elsewhere)."""
    out: dict[str, tuple[int | None, tuple[Dim, ...] | None]] = {}
    for init in g.initializer if initializers is None else initializers:
        if init.name not in skip:
            out[init.name] = (init.data_type, tuple(init.dims))  # protobuf gives ints
    declared = (*g.input, *(g.value_info if value_info else ()), *g.output)
    return collect_value_types([vi for vi in declared if vi.name not in skip] if skip else declared, out)


def collect_value_types(values: Iterable[onnx.ValueInfoProto],
                        out: dict[str, tuple[int | None, tuple[Dim, ...] | None]] | None = None,
                        ) -> dict[str, tuple[int | None, tuple[Dim, ...] | None]]:
    """``out`` (a new dict where not given) with the types of the declarations ``values``, in
    order, by :func:`collect_graph_types`'s rule; values of the same type share its tuple."""
    out = {} if out is None else out
    read: dict[bytes, tuple[int | None, tuple[Dim, ...] | None]] = {}  # each distinct type read once
    for vi in values:
        t = vi.type.SerializeToString()
        found = read.get(t)
        if found is None:
            found = read[t] = read_type(vi)
        et, sh = found
        prev = out.get(vi.name)
        if prev is None or prev[1] is None or (sh is not None and None in prev[1]):
            out[vi.name] = (et or (prev[0] if prev else None), sh if sh is not None else (prev[1] if prev else None))
    return out


def run_engines(
    work: onnx.ModelProto,
    absorb: Callable[[Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]], None],
    incomplete: Callable[[], bool],
    resolve: Callable[[Dim], int | None],
    *,
    also: Sequence[str] | None = None,
    symbolic_only: Collection[str] = (),
) -> dict[str, np.ndarray]:
    """Feed ``absorb`` what each engine makes of ``work``: onnx inference with data propagation,
    shape arithmetic (``resolve`` reads one declared dim), onnxruntime's symbolic inference, in
    that order of precedence; a later engine runs only while ``incomplete()`` (symbolic inference
    gives no shape computed from a value that leaves its dtype's range). Given ``also``
    (values to compute besides those in shape slots), shape arithmetic runs in any case, for
    the values it computes, which are returned. The values ``symbolic_only`` (GroupQueryAttention's
    present, :func:`_group_query_present`) take their shape from onnxruntime's symbolic
    inference alone, never from a declared one."""
    made: dict[str, np.ndarray] = {}
    undefined: frozenset[str] = frozenset()

    def absorb_declared(info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]) -> None:
        absorb({k: v for k, v in info.items() if k not in symbolic_only})

    inferred = run_onnx_inference(work)
    if inferred is not None:
        absorb_declared(collect_types(inferred))
        if also is not None or incomplete():
            evaluated = shapeeval.evaluate_shapes(
                work, inferred, infer=run_onnx_inference, resolve=resolve, also=also or ()
            )
            made, undefined = evaluated.values, evaluated.undefined
            absorb_declared({**collect_types(evaluated.model), **evaluated.shapes})
            inferred = evaluated.model
    if incomplete():
        sym = run_symbolic_inference(inferred if inferred is not None else work, undefined)
        if sym is not None:
            absorb(collect_types(sym))
    return made
