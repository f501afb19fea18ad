"""Dims: the user's ``--dim`` and ``--input-shape`` text, declared dims read, renamed and bound.

A dim is an int (fixed), a text (a named or expression dim) or ``None`` (unknown). Named dims
reach the inference engines only under generated safe names (:func:`rename_dims`); an
expression dim is read by :mod:`onnxmem.core.dimexpr`'s grammar, never evaluated.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import onnx

from onnxmem.core.errors import ShapeError, show_name
from onnxmem.model.bodies import iter_graphs, model_graphs
from onnxmem.model.dtypes import MAX_DIM

__all__ = [
    "Dim",
    "bind_dims",
    "check_tensor_inputs",
    "declared_dims",
    "declared_types",
    "dim_label",
    "dim_names",
    "graph_inputs",
    "open_input_dims",
    "parse_dim_binding",
    "parse_input_shape",
    "read_type",
    "rename_dims",
    "resolve_dim",
    "set_shape",
    "unname_placeholder_dims",
]

Dim = int | str | None


def parse_dim_binding(text: str) -> tuple[str, int]:
    """``"batch=4"`` -> ``("batch", 4)``."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ShapeError(f"--dim {show_name(text)} is not NAME=VALUE; write e.g. --dim batch=1")
    try:
        v = int(value)
    except ValueError:
        raise ShapeError(f"--dim {show_name(text)}: value {show_name(value)} is not an integer") from None
    if v < 0:
        raise ShapeError(
            f"--dim {show_name(text)}: a dim must be an integer >= 0, not {v}; give the size "
            "the model will run at"
        )
    if v > MAX_DIM:
        raise ShapeError(
            f"--dim {show_name(text)}: a dim must be at most 2^40 ({MAX_DIM:,}), onnxmem's limit; "
            "give the size the model will run at"
        )
    return name, v


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"x=1x3x224x224"`` -> ``("x", (1, 3, 224, 224))``; ``"x="`` is a scalar."""
    name, sep, value = text.rpartition("=")
    name = name.strip()
    if not sep or not name:
        raise ShapeError(
            f"--input-shape {show_name(text)} is not NAME=D1xD2x...; write e.g. --input-shape x=1x3x224x224"
        )
    if not value.strip():
        return name, ()
    try:
        dims = tuple(int(d) for d in re.split(r"[x,]", value.strip()))
    except ValueError:
        raise ShapeError(
            f"--input-shape {show_name(text)}: {show_name(value)} is not dims joined by 'x' (e.g. 1x3x224x224)"
        ) from None
    if any(d < 0 or d > MAX_DIM for d in dims):
        raise ShapeError(f"--input-shape {show_name(text)}: a dim must be an integer from 0 to 2^40 "
                         f"({MAX_DIM:,}), onnxmem's limit; give the shape the model will run at")
    return name, dims


def read_type(vi: onnx.ValueInfoProto) -> tuple[int | None, tuple[Dim, ...] | None]:
    t = vi.type
    if not t.HasField("tensor_type"):
        return None, None
    tt = t.tensor_type
    et = tt.elem_type or None
    if not tt.HasField("shape"):
        return et, None
    dims: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return et, tuple(dims)


def graph_inputs(model: onnx.ModelProto) -> dict[str, tuple[Dim, ...] | None]:
    """The graph inputs that are not weights, with their declared dims.

    A named dim is its name, a fixed one its value; an unnamed, empty or
    negative dim (``-1``, ``?``) is ``None``: unknown, bound by ``--input-shape``.
    A rank that is not declared is ``None`` as a whole.
    """
    inits = {i.name for i in model.graph.initializer}
    out: dict[str, tuple[Dim, ...] | None] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        _, dims = read_type(vi)
        out[vi.name] = None if dims is None else tuple(
            None if isinstance(d, int) and d < 0 else d for d in dims
        )
    return out


#: a graph input's type that is not a tensor, by the field of its ``TypeProto``: what it is, and the
#: tensors an export can give in its place
_NOT_TENSOR = {
    "sequence_type": ("a sequence", "its items stacked into one tensor"),
    "map_type": ("a map", "its keys and its values as two tensors"),
    "optional_type": ("an optional", "a tensor always given"),
    "sparse_tensor_type": ("a sparse tensor", "its dense tensor"),
    "opaque_type": ("an opaque value", "the tensors it holds"),
}


def check_tensor_inputs(model: onnx.ModelProto) -> None:
    """Refuse a graph input (not a weight) whose type is not a tensor: a sequence, map, optional,
    sparse tensor or opaque value. onnxmem plans tensor inputs only: no ``--input-shape`` gives such
    an input a size and no measuring run can draw one, so no flag fixes it; the model must change.
    """
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        kind = vi.type.WhichOneof("value")
        if kind in _NOT_TENSOR and vi.name not in inits:
            what, instead = _NOT_TENSOR[kind]
            raise ShapeError(
                f"graph input {show_name(vi.name)} is {what}, not a tensor: onnxmem plans tensor inputs only, "
                f"and neither --input-shape nor --measure-shapes sizes it; export the model with a tensor "
                f"input in its place ({instead})"
            )


def dim_names(model: onnx.ModelProto) -> set[str]:
    """Every named dim declared anywhere in ``model`` (the names ``--dim`` can bind)."""
    names: set[str] = set()
    for t in declared_types(model.graph):
        shape = t.tensor_type.shape if t.HasField("tensor_type") else None
        names.update(d.dim_param for d in (shape.dim if shape is not None else ()) if d.dim_param)
    return names


def dim_label(name: str) -> str:
    """A dim name in a message: bare when it is a short identifier, else quoted and escaped."""
    return name if name.isidentifier() and len(name) <= 60 else show_name(name)


def open_input_dims(model: onnx.ModelProto, bound: Iterable[str]) -> dict[str, list[str]]:
    """Each named dim the graph inputs (not weights) declare that ``bound`` leaves without a
    value, with the inputs that declare it, both in the model's order. A dim is bound by its
    name as written; one that is no identifier (``2*n``, ``batch-size``) also where every name
    its text reads as an expression of :mod:`onnxmem.core.dimexpr` is bound."""
    known = set(bound)

    def is_open(d: str) -> bool:
        if d in known:
            return False
        if d.isidentifier():
            return True
        # the grammar is loaded only for a dim that is no identifier, as resolve_dim does
        from onnxmem.core import dimexpr

        read = dimexpr.names(d)
        return not read or not set(read) <= known

    out: dict[str, list[str]] = {}
    for name, declared in graph_inputs(model).items():
        for d in declared or ():
            if isinstance(d, str) and is_open(d):
                carriers = out.setdefault(d, [])
                if name not in carriers:
                    carriers.append(name)
    return out


def set_shape(vi: onnx.ValueInfoProto, dims: Iterable[Dim]) -> None:
    shape = vi.type.tensor_type.shape
    shape.ClearField("dim")
    for d in dims:
        nd = shape.dim.add()
        if isinstance(d, int):
            nd.dim_value = d
        elif isinstance(d, str):
            nd.dim_param = d


def resolve_dim(d: Dim, dims: Mapping[str, int]) -> int | None:
    """The value of one dim, or ``None`` when it is unknown.

    A name is looked up as it is (names are opaque); any other text is read as
    an expression of :mod:`onnxmem.core.dimexpr`'s grammar, never by an evaluator.
    """
    if isinstance(d, int):
        return d if d >= 0 else None
    if d is None:
        return None
    if d in dims:
        value: int | None = dims[d]
    elif d.isidentifier():
        return None  # a name left unbound (the grammar would read it as one, and find no value)
    else:  # an expression: its grammar is loaded only here (a model of fixed shapes reads none)
        from onnxmem.core import dimexpr

        value = dimexpr.evaluate(d, dims)
    return value if value is not None and value >= 0 else None


def declared_types(source: onnx.ModelProto | onnx.GraphProto,
                   graphs: Iterable[tuple[str, onnx.GraphProto | onnx.FunctionProto]] | None = None,
                   ) -> Iterable[onnx.TypeProto]:
    """Every type declared in ``source`` and its subgraphs (inputs, outputs, value_info; for a
    model, its local functions' value_info too), with the element types of sequences,
    optionals and maps, without recursion. ``graphs``: the graphs of ``source``
    (:func:`onnxmem.model.bodies.model_graphs` of a model), where the caller has them already."""
    if graphs is None:
        graphs = model_graphs(source) if isinstance(source, onnx.ModelProto) else (("", g) for g in iter_graphs(source))
    stack = [vi.type for _, g in graphs
             for vi in ((*g.input, *g.output, *g.value_info) if isinstance(g, onnx.GraphProto) else g.value_info)]
    while stack:
        t = stack.pop()
        yield t
        kind = t.WhichOneof("value")
        if kind == "sequence_type":
            stack.append(t.sequence_type.elem_type)
        elif kind == "optional_type":
            stack.append(t.optional_type.elem_type)
        elif kind == "map_type":
            stack.append(t.map_type.value_type)


def rename_dims(model: onnx.ModelProto,
                graphs: Iterable[tuple[str, onnx.GraphProto | onnx.FunctionProto]] | None = None) -> dict[str, str]:
    """Replace every dim_param of ``model`` (in place) by a generated safe name.

    No text of the file then reaches an inference engine as a dim: shape
    inference sees ``onnxmem_dim_0``, ``onnxmem_dim_1``, ... and the expressions
    it writes are over those names alone. Returns ``{original: safe}``. ``graphs``: the
    model's graphs (:func:`onnxmem.model.bodies.model_graphs`), where the caller knows them.
    """
    names: dict[str, str] = {}
    for d in declared_dims(model, graphs):
        if d.HasField("dim_param") and d.dim_param:
            safe = names.setdefault(d.dim_param, f"onnxmem_dim_{len(names)}")
            d.dim_param = safe
    return names


def declared_dims(source: onnx.ModelProto | onnx.GraphProto,
                  graphs: Iterable[tuple[str, onnx.GraphProto | onnx.FunctionProto]] | None = None) -> Iterable[Any]:
    """Every dim of every tensor type declared in ``source`` and its subgraphs (see :func:`declared_types`)."""
    for t in declared_types(source, graphs):
        shape = None
        if t.HasField("tensor_type") and t.tensor_type.HasField("shape"):
            shape = t.tensor_type.shape
        elif t.HasField("sparse_tensor_type") and t.sparse_tensor_type.HasField("shape"):
            shape = t.sparse_tensor_type.shape
        yield from (shape.dim if shape is not None else ())


def bind_dims(shape: Iterable[Dim], dims: Mapping[str, int]) -> list[Dim]:
    """``shape`` with every dim ``dims`` resolves replaced by its value."""
    out: list[Dim] = []
    for d in shape:
        value = resolve_dim(d, dims)
        out.append(d if value is None else value)
    return out


def unname_placeholder_dims(model: onnx.ModelProto,
                            graphs: Iterable[tuple[str, onnx.GraphProto | onnx.FunctionProto]] | None = None) -> int:
    """Make every placeholder dim of ``model`` (in place) an unnamed one; returns how many.

    Some exporters write ``?`` (or another name without a letter or digit) for
    "unknown" on every such axis. Read as a symbolic name, it would tie all those
    axes to one value (``[?, 3, ?, ?]`` could only be bound with equal height and
    width); onnxruntime does not tie them, and neither does onnxmem: each becomes
    an unnamed dim, bound per axis through ``--input-shape``. ``graphs``: the model's
    :func:`onnxmem.model.bodies.model_graphs`, where the caller has them already (the main
    graph's tree alone is read: not the local functions).
    """
    count = 0
    main = None if graphs is None else [(w, g) for w, g in graphs if not w]
    for d in declared_dims(model.graph, main):
        if d.HasField("dim_param") and not any(c.isalnum() for c in d.dim_param):
            d.ClearField("dim_param")
            count += 1
    return count
