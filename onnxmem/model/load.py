"""Loading ONNX files, data types and sizes, and shape inference.

``load_model`` reads the graph without reading external weights (only their
shapes and dtypes are needed to plan). ``infer_shapes`` gives every value of
the top-level graph a dtype and a concrete shape, in this order of trust:

1. onnx shape inference with data propagation, on a copy whose inputs carry
   the user's ``--input-shape`` pins and ``--dim`` bindings, with the
   exporter's intermediate ``value_info`` removed (it is not trusted blindly);
2. shape arithmetic evaluated statically (:mod:`onnxmem.shapes.shapeeval`: Shape,
   Gather, Concat, ... on known values), fed back to onnx's inference;
3. onnxruntime's symbolic shape inference for what is still unknown (it knows
   the ``com.microsoft`` ops and does symbolic arithmetic on dims);
4. shapes measured by one onnxruntime run on random inputs, when the caller
   gives them (``onnxmem.runtime.ort.infer_measured_shapes``: the only way for
   data-dependent shapes).

A value still unknown after these is an error that lists the tensors, the
symbols, and the flag that fixes it.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onnxmem.core import dimexpr
from onnxmem.core.errors import ModelError, ShapeError, flag_value, show_name
from onnxmem.core.fileio import MAX_MODEL_BYTES, open_input, read_input
from onnxmem.model.functions import function_label, inlined_size
from onnxmem.model.functions import node_subgraphs as _subgraphs
from onnxmem.shapes import shapeeval
from onnxmem.shapes.training import complete_shapes

__all__ = [
    "DTYPES",
    "OTHER_BRANCH",
    "BodyKey",
    "ExternalData",
    "ShapeInfo",
    "check_external_data",
    "dtype_bits",
    "dtype_name",
    "file_sha256",
    "graph_tensors",
    "infer_shapes",
    "infer_symbolic_shapes",
    "initializers",
    "body_captures",
    "iter_bodies",
    "iter_graphs",
    "model_graphs",
    "load_model",
    "owner_key",
    "subgraph_attributes",
    "parse_dim_binding",
    "parse_input_shape",
    "read_external_data",
    "tensor_bytes",
]

#: elem_type -> (name, bits per element)
DTYPES: dict[int, tuple[str, int]] = {
    TensorProto.FLOAT: ("float32", 32),
    TensorProto.UINT8: ("uint8", 8),
    TensorProto.INT8: ("int8", 8),
    TensorProto.UINT16: ("uint16", 16),
    TensorProto.INT16: ("int16", 16),
    TensorProto.INT32: ("int32", 32),
    TensorProto.INT64: ("int64", 64),
    TensorProto.STRING: ("string", 0),
    TensorProto.BOOL: ("bool", 8),
    TensorProto.FLOAT16: ("float16", 16),
    TensorProto.DOUBLE: ("float64", 64),
    TensorProto.UINT32: ("uint32", 32),
    TensorProto.UINT64: ("uint64", 64),
    TensorProto.COMPLEX64: ("complex64", 64),
    TensorProto.COMPLEX128: ("complex128", 128),
    TensorProto.BFLOAT16: ("bfloat16", 16),
}
for _name, _bits in (
    ("FLOAT8E4M3FN", 8),
    ("FLOAT8E4M3FNUZ", 8),
    ("FLOAT8E5M2", 8),
    ("FLOAT8E5M2FNUZ", 8),
    ("UINT4", 4),
    ("INT4", 4),
    ("FLOAT4E2M1", 4),
    ("FLOAT8E8M0", 8),
    ("UINT2", 2),
    ("INT2", 2),
):
    if hasattr(TensorProto, _name):
        DTYPES[int(getattr(TensorProto, _name))] = (_name.lower(), _bits)

#: the largest dim and the largest tensor onnxmem plans; past them a dim is an error
#: that names the tensor (far above any real model, low enough that every sum of
#: sizes the planner makes stays exact in 64-bit integers)
MAX_DIM = 2**40
MAX_BYTES = 2**62
#: limits on the graph a file may hold, far above real models
MAX_NESTING = 24
MAX_NODES = 10_000_000
#: passes of onnxruntime's symbolic inference onnxmem lets run
SYMBOLIC_PASSES = 16


def dtype_name(elem_type: int) -> str:
    if elem_type not in DTYPES:
        raise ShapeError(
            f"unknown tensor element type {elem_type}; onnxmem knows "
            f"{', '.join(n for n, _ in DTYPES.values())}"
        )
    return DTYPES[elem_type][0]


def dtype_bits(elem_type: int) -> int:
    dtype_name(elem_type)
    return DTYPES[elem_type][1]


def tensor_bytes(elem_type: int, shape: Iterable[int], name: str = "?") -> int:
    """Bytes a dense tensor takes: ``ceil(bits * numel / 8)``.

    >>> tensor_bytes(TensorProto.INT4, (3, 3))
    5
    """
    dims = tuple(shape)
    for axis, d in enumerate(dims):
        if d < 0:
            raise ShapeError(
                f"tensor {show_name(name)} has negative dim {d} on axis {axis}; fix the "
                "model or pin the shape with --input-shape"
            )
        if d > MAX_DIM:
            raise ShapeError(
                f"tensor {show_name(name)} has dim {d} on axis {axis}, above onnxmem's limit of "
                "2^40; check the model or the dims bound with --dim"
            )
    if elem_type == TensorProto.STRING:
        raise ShapeError(
            f"tensor {show_name(name)} has dtype string, whose size is not fixed; "
            "onnxmem plans numeric tensors only"
        )
    bits = dtype_bits(elem_type)
    numel = math.prod(dims)
    size = -(-bits * numel // 8)
    if size > MAX_BYTES:
        raise ShapeError(
            f"tensor {show_name(name)} of shape {list(dims)} would take {size} bytes, above "
            "onnxmem's limit of 2^62; check the model or the dims bound with --dim"
        )
    return size


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a model file (a regular file of at most ``MAX_MODEL_BYTES``)."""
    h = hashlib.sha256()
    with os.fdopen(open_input(path, "model file", MAX_MODEL_BYTES, ModelError), "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------ loading


def iter_graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    """``graph`` and every subgraph nested in its nodes' attributes, depth first."""
    stack = [graph]
    while stack:
        g = stack.pop()
        yield g
        for node in reversed(g.node):
            stack.extend(reversed(_subgraphs(node)))


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
            for sub in _subgraphs(node):
                yield from ((where, g) for g in iter_graphs(sub))


def check_graph_limits(model: onnx.ModelProto, where: str) -> None:
    """Refuse a model nested deeper than ``MAX_NESTING`` levels (subgraphs and local function
    calls) or holding more than ``MAX_NODES`` nodes once its local functions are inlined, and
    recursive, duplicate or shadowing functions (:func:`onnxmem.model.functions.inlined_size`), before
    anything expands them."""
    found = inlined_size(model, MAX_NODES, MAX_NESTING)
    through = f" (through {function_label(found.deepest)})" if found.deepest is not None else ""
    if found.depth > MAX_NESTING:
        raise ModelError(
            f"{where} nests subgraphs {found.depth} deep{through}, past onnxmem's limit of {MAX_NESTING}; "
            "flatten the control flow"
        )
    if found.nodes > MAX_NODES:
        raise ModelError(
            f"{where} has more than {MAX_NODES:,} nodes{' once its local functions are inlined' if model.functions else ''}, "
            "onnxmem's limit; split the model"
        )


def initializers(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Every initializer of ``graph`` and of its subgraphs."""
    return [init for g in iter_graphs(graph) for init in g.initializer]


#: bytes of weights onnxmem inlines into one model for onnxruntime (protobuf's limit)
MAX_INLINE_WEIGHTS = 2**31 - 1

_DECIMAL = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class ExternalData:
    """One tensor's external-data reference, checked: bytes ``[offset, offset + length)`` of ``path``."""

    tensor: str
    path: Path  # resolved, inside the model's folder, a regular file
    offset: int
    length: int
    label: str = ""  # the tensor and where it sits, escaped, for messages


def _attribute_tensors(attr: onnx.AttributeProto) -> Iterable[tuple[str, onnx.TensorProto]]:
    if attr.HasField("t"):
        yield "", attr.t
    yield from (("", t) for t in attr.tensors)
    sparse = [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
    for sp in (*sparse, *attr.sparse_tensors):
        yield " (sparse values)", sp.values
        yield " (sparse indices)", sp.indices


def tensor_sites(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[tuple[str, onnx.TensorProto]]:
    """Every tensor of ``source`` that can keep its data outside the file, with an escaped label
    for messages: initializers, sparse initializers and tensor attributes (a ``Constant``'s
    ``value``, ...) of every graph and subgraph, and, for a model, of its local functions."""
    graphs = model_graphs(source) if isinstance(source, onnx.ModelProto) else (("", g) for g in iter_graphs(source))
    for where, g in graphs:
        if isinstance(g, onnx.GraphProto):
            yield from ((f"tensor {show_name(t.name)}{where}", t) for t in g.initializer)
            for sp in g.sparse_initializer:
                yield f"sparse tensor {show_name(sp.values.name)} (values){where}", sp.values
                yield f"sparse tensor {show_name(sp.values.name)} (indices){where}", sp.indices
        for node in g.node:
            for attr in node.attribute:
                for part, t in _attribute_tensors(attr):
                    node_name = node.name or (node.output[0] if node.output else "")
                    yield (f"attribute {show_name(attr.name)}{part} of node {show_name(node_name)} "
                           f"({show_name(node.op_type)}){where}"), t


def graph_tensors(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    """Every tensor of ``source`` that can keep its data outside the file (see :func:`tensor_sites`)."""
    return (t for _, t in tensor_sites(source))


def _external_field(label: str, key: str, value: str, size: int) -> int:
    if not _DECIMAL.fullmatch(value):
        raise ModelError(
            f"{label} has external-data {key} {show_name(value)}, which is "
            "not a non-negative decimal integer; re-export the model"
        )
    n = int(value)
    if n > size:
        raise ModelError(
            f"{label} has external-data {key} {n:,}, past the end of its "
            f"data file ({size:,} bytes); the file is truncated or the reference is wrong: re-export the model"
        )
    return n


def _external_reference(init: onnx.TensorProto, root: Path, need_files: bool, label: str) -> ExternalData:
    """Check one external-data reference against the files under ``root`` (never reads data);
    ``label`` names the tensor in messages (:func:`tensor_sites`)."""
    name = init.name
    info: dict[str, str] = {}
    for e in init.external_data:
        key, value = e.key, e.value
        if not isinstance(key, str) or not isinstance(value, str):
            raise ModelError(
                f"{label} has an external-data entry that is not text; "
                "re-export the model"
            )
        info[key] = value
    loc = info.get("location", "")
    where = f"{label}: external data {show_name(loc)}"
    if not loc:
        raise ModelError(f"{label} keeps its data outside the file but names no "
                         "location; re-export the model")
    if "\0" in loc:
        raise ModelError(f"{where} contains a NUL byte; re-export the model")
    if os.path.isabs(loc) or Path(loc).drive or Path(loc).root:
        raise ModelError(f"{where} is an absolute path, outside the model's folder; onnxmem reads "
                         "data files only from there: move the data file next to the model")
    target = Path(os.path.realpath(root / loc))
    if target == root or root not in target.parents:
        raise ModelError(
            f"{where} points outside the model's folder {show_name(str(root))} (through '..' or "
            "a link); onnxmem refuses to read it: move the data file next to the model"
        )
    try:
        st = os.stat(target)
    except FileNotFoundError:
        if need_files:
            raise ModelError(f"{where} does not exist in {show_name(str(root))}; copy the data file "
                             "next to the model") from None
        st = None
    except OSError as exc:
        raise ModelError(f"{where} cannot be read: {exc.strerror}; check the data file") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{where} is not a regular file (a folder, device or FIFO); give the "
                         "model its data file")
    size = st.st_size if st is not None else MAX_BYTES
    offset = _external_field(label, "offset", info.get("offset", "0"), size)
    length = _external_field(label, "length", info["length"], size) if "length" in info else size - offset
    if offset + length > size:
        raise ModelError(
            f"{where}: bytes [{offset:,}, {offset + length:,}) run past the end of the file "
            f"({size:,} bytes); the file is truncated or the reference is wrong: re-export the model"
        )
    if init.data_type == TensorProto.STRING:
        raise ModelError(f"{label} is a string tensor in external data, which "
                         "ONNX does not allow; re-export the model")
    if init.data_type in DTYPES and (st is not None or "length" in info):
        expected = tensor_bytes(init.data_type, init.dims, name)
        if length != expected:
            raise ModelError(
                f"{where} holds {length:,} bytes, but a {dtype_name(init.data_type)} tensor of shape "
                f"{list(init.dims)} takes {expected:,}; re-export the model"
            )
    return ExternalData(name, target, offset, length, label)


def check_external_data(
    model: onnx.ModelProto, base: str | os.PathLike[str], *, need_files: bool = True
) -> list[ExternalData]:
    """Check every external-data reference of ``model``, whose file lies in folder ``base``.

    Each location must be relative, resolve (links included) to a regular file
    inside ``base``, and hold its ``[offset, offset + length)`` bytes; offsets
    and lengths must be decimal integers, and a length must match the tensor's
    dtype and dims. Local functions' tensors are checked as the
    graph's are. With ``need_files=False`` (planning, which needs shapes
    only) a data file may be missing; what is there is checked all the same.
    Raises ``ModelError`` naming the tensor, the rule and the fix; reads no
    data. :func:`read_external_data` reads what this checks.
    """
    root = Path(os.path.realpath(base))
    refs = []
    for label, t in tensor_sites(model):
        if t.data_location == TensorProto.EXTERNAL:
            refs.append(_external_reference(t, root, need_files, label))
    return refs


def read_external_data(model: onnx.ModelProto, base: str | os.PathLike[str]) -> onnx.ModelProto:
    """A copy of ``model`` with every external tensor's bytes read in, after :func:`check_external_data`.

    Refuses weights of more than ``MAX_INLINE_WEIGHTS`` bytes in all (onnxruntime
    gets the model as one protobuf message, which cannot reach 2 GiB).
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    tensors = [t for t in graph_tensors(m) if t.data_location == TensorProto.EXTERNAL]
    refs = check_external_data(m, base)
    total = sum(r.length for r in refs)
    if total + model.ByteSize() > MAX_INLINE_WEIGHTS:
        raise ModelError(
            f"the model's external weights take {total:,} bytes; onnxmem runs models whose weights "
            f"and graph fit in one {MAX_INLINE_WEIGHTS + 1:,}-byte protobuf message: plan it without "
            "running it (no --measure-shapes, verify --static-only)"
        )
    for t, ref in zip(tensors, refs):
        where = f"{ref.label}: external data {show_name(str(ref.path.name))}"
        try:
            fd = os.open(ref.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        except OSError as exc:
            raise ModelError(f"{where} cannot be opened: {exc.strerror}; check the data file") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ModelError(f"{where} is not a regular file; give the model its data file")
            data = os.pread(fd, ref.length, ref.offset) if ref.length else b""
        except OSError as exc:
            raise ModelError(f"{where} cannot be read: {exc.strerror}; check the data file") from None
        finally:
            os.close(fd)
        if len(data) != ref.length:
            raise ModelError(f"{where} ended after {len(data):,} of {ref.length:,} bytes (it changed "
                             "while onnxmem read it); check the data file")
        t.raw_data = data
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
    return m


def _check_tensor_dims(label: str, t: onnx.TensorProto) -> None:
    """Refuse a stored tensor with a negative dim or a size past ``MAX_BYTES`` (a damaged file:
    no ``--dim`` or ``--input-shape`` changes a weight)."""
    for axis, d in enumerate(t.dims):
        if d < 0:
            raise ModelError(f"{label} has negative dim {d} on axis {axis}; the file is damaged: "
                             "re-export the model")
    bits = DTYPES.get(t.data_type, (None, 8))[1] or 8  # strings: one byte an element, at least
    if any(d > MAX_DIM for d in t.dims) or math.prod(t.dims) * bits > 8 * MAX_BYTES:
        raise ModelError(f"{label} has dims {list(t.dims)}, which make more than 2^62 bytes "
                         "(onnxmem's limit, and far more than any file holds); the file is damaged: "
                         "re-export the model")


def check_tensor_data(model: onnx.ModelProto) -> None:
    """Refuse a tensor whose dims or data do not hold exactly its dtype and dims' worth of values.

    Every stored tensor (of the graphs and local functions): no negative dim, at
    most ``MAX_BYTES``. One whose data is inline (not external): inline bytes must
    be ``tensor_bytes`` long, and typed values must number the elements (twice for
    complex types, packed for sub-byte ones). ``load_model`` runs it, and the
    runtime again once the external weights are read in, before any becomes an array.
    """
    for label, t in tensor_sites(model):
        _check_tensor_dims(label, t)
        if t.data_location == TensorProto.EXTERNAL or t.data_type == TensorProto.STRING:
            continue
        bits = DTYPES.get(t.data_type, (None, None))[1]
        if bits is None:
            continue
        numel = math.prod(t.dims)
        size = tensor_bytes(t.data_type, t.dims, t.name)
        if t.HasField("raw_data"):
            have, want, unit = len(t.raw_data), size, "bytes"
        else:
            have = len(t.float_data) + len(t.int32_data) + len(t.int64_data) + len(t.double_data) + len(t.uint64_data)
            name = DTYPES[t.data_type][0]
            want = 2 * numel if name.startswith("complex") else -(-numel * bits // 32) if bits < 8 else numel
            unit = "values"
        if have != want:
            raise ModelError(
                f"{label} of dtype {DTYPES[t.data_type][0]} and shape {list(t.dims)} "
                f"holds {have:,} {unit} of data where it needs {want:,}; the file is damaged: re-export it"
            )


def check_sparse_initializers(model: onnx.ModelProto) -> None:
    """Refuse a sparse initializer: onnxmem plans dense weights only (the view, the weight count
    and the runs read ``initializer``), so it names the tensor and how to store it dense."""
    for where, g in model_graphs(model):
        for sp in getattr(g, "sparse_initializer", ()):
            raise ModelError(
                f"sparse initializer {show_name(sp.values.name)}{where}: onnxmem plans models whose "
                "weights are dense initializers only; store it dense (onnx.numpy_helper.from_array of "
                "its dense values, in graph.initializer) and plan again"
            )


def load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read an ONNX file's graph; external weights stay on disk.

    Raises ``ModelError`` for a missing, non-regular, too large, truncated or
    non-ONNX file, for a graph or local functions past the limits
    (:func:`check_graph_limits`), for sparse initializers, for stored tensors whose
    dims or data are wrong (:func:`check_tensor_data`) and for external data that
    :func:`check_external_data` refuses, in the graphs and the local functions alike.
    """
    p = Path(path)
    label = show_name(str(p))
    data = read_input(p, "model file", MAX_MODEL_BYTES, ModelError)
    if not data:
        raise ModelError(f"model file {label} is empty; it is not an ONNX model")
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as exc:
        if "MaxDepth" in str(exc):
            raise ModelError(
                f"model file {label} nests messages deeper than protobuf reads (about 32 "
                "levels of subgraphs); flatten the control flow"
            ) from None
        raise ModelError(
            f"model file {label} is not a readable ONNX model (truncated or another "
            "format); re-export it"
        ) from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelError(
            f"model file {label} holds no ONNX graph (truncated or another format); "
            "re-export it"
        )
    if model.ir_version < 3:
        raise ModelError(
            f"model {label} has IR version {model.ir_version}; onnxmem reads IR version 3 and up"
        )
    check_graph_limits(model, f"model {label}")
    check_sparse_initializers(model)
    check_tensor_data(model)
    check_external_data(model, p.parent, need_files=False)
    unname_placeholder_dims(model)
    return model


def unname_placeholder_dims(model: onnx.ModelProto) -> int:
    """Make every placeholder dim of ``model`` (in place) an unnamed one; returns how many.

    Some exporters write ``?`` (or another name without a letter or digit) for
    "unknown" on every such axis. Read as a symbolic name, it would tie all those
    axes to one value (``[?, 3, ?, ?]`` could only be bound with equal height and
    width); onnxruntime does not tie them, and neither does onnxmem: each becomes
    an unnamed dim, bound per axis through ``--input-shape``.
    """
    count = 0
    for d in _declared_dims(model.graph):
        if d.HasField("dim_param") and not any(c.isalnum() for c in d.dim_param):
            d.ClearField("dim_param")
            count += 1
    return count


# ------------------------------------------------------------------ user dims


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
    if v <= 0:
        raise ShapeError(
            f"--dim {show_name(text)}: a dim must be a positive integer, not {v}; give the size "
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


# ------------------------------------------------------------------ shapes

Dim = int | str | None


#: where a subgraph sits: one ``(owner key, attribute name)`` per level, outermost first; the
#: owner key is the owning node's first output name (``#<index>`` when it has none)
BodyKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ShapeInfo:
    """Every top-level value's dtype and concrete shape, and how it was found.

    ``bodies``: for each subgraph (If branch, Loop or Scan body, nested at any
    depth), ``{value: (dtype, shape)}`` of the values it defines (its inputs,
    initializers and node outputs) whose shapes static inference resolved;
    a value missing there has no static size (the view says so, naming it).
    """

    dtypes: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    sources: dict[str, str] = field(default_factory=dict)  # name -> onnx|evaluated|symbolic|measured|value_info
    warnings: tuple[str, ...] = ()
    bodies: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]] = field(default_factory=dict)
    #: If branches left out of the plan (``--branch``): runs are assumed to take the other one
    excluded: frozenset[BodyKey] = frozenset()


def _read_type(vi: onnx.ValueInfoProto) -> tuple[int | None, tuple[Dim, ...] | None]:
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
        _, dims = _read_type(vi)
        out[vi.name] = None if dims is None else tuple(
            None if isinstance(d, int) and d < 0 else d for d in dims
        )
    return out


def dim_names(model: onnx.ModelProto) -> set[str]:
    """Every named dim declared anywhere in ``model`` (the names ``--dim`` can bind)."""
    names: set[str] = set()
    for t in _types(model.graph):
        shape = t.tensor_type.shape if t.HasField("tensor_type") else None
        names.update(d.dim_param for d in (shape.dim if shape is not None else ()) if d.dim_param)
    return names


def _set_shape(vi: onnx.ValueInfoProto, dims: Iterable[Dim]) -> None:
    shape = vi.type.tensor_type.shape
    shape.ClearField("dim")
    for d in dims:
        nd = shape.dim.add()
        if isinstance(d, int):
            nd.dim_value = d
        elif isinstance(d, str):
            nd.dim_param = d


def _resolve_dim(d: Dim, dims: Mapping[str, int]) -> int | None:
    """The value of one dim, or ``None`` when it is unknown.

    A name is looked up as it is (names are opaque); any other text is read as
    an expression of :mod:`onnxmem.core.dimexpr`'s grammar, never by an evaluator.
    """
    if isinstance(d, int):
        return d if d >= 0 else None
    if d is None:
        return None
    value = dims[d] if d in dims else dimexpr.evaluate(d, dims)
    return value if value is not None and value >= 0 else None


def _types(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[onnx.TypeProto]:
    """Every type declared in ``source`` and its subgraphs (inputs, outputs, value_info; for a
    model, its local functions' value_info too), with the element types of sequences,
    optionals and maps, without recursion."""
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


def _rename_dims(model: onnx.ModelProto) -> dict[str, str]:
    """Replace every dim_param of ``model`` (in place) by a generated safe name.

    No text of the file then reaches an inference engine as a dim: shape
    inference sees ``onnxmem_dim_0``, ``onnxmem_dim_1``, ... and the expressions
    it writes are over those names alone. Returns ``{original: safe}``.
    """
    names: dict[str, str] = {}
    for d in _declared_dims(model):
        if d.HasField("dim_param") and d.dim_param:
            safe = names.setdefault(d.dim_param, f"onnxmem_dim_{len(names)}")
            d.dim_param = safe
    return names


def _declared_dims(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[Any]:
    """Every dim of every tensor type declared in ``source`` and its subgraphs (see :func:`_types`)."""
    for t in _types(source):
        shape = None
        if t.HasField("tensor_type") and t.tensor_type.HasField("shape"):
            shape = t.tensor_type.shape
        elif t.HasField("sparse_tensor_type") and t.sparse_tensor_type.HasField("shape"):
            shape = t.sparse_tensor_type.shape
        yield from (shape.dim if shape is not None else ())


def _bind(shape: Iterable[Dim], dims: Mapping[str, int]) -> list[Dim]:
    """``shape`` with every dim ``dims`` resolves replaced by its value."""
    out: list[Dim] = []
    for d in shape:
        value = _resolve_dim(d, dims)
        out.append(d if value is None else value)
    return out


#: an If's branch -> its other branch
OTHER_BRANCH = {"then_branch": "else_branch", "else_branch": "then_branch"}


def _take_branches(graph: onnx.GraphProto, excluded: frozenset[BodyKey], key: BodyKey = ()) -> None:
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
                _take_branches(sub, excluded, (*key, (owner_key(node, i), attr)))


def _strip_for_inference(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without large initializer data or value_info, for shape inference.

    Small initializers keep their values (data propagation of shapes needs
    them). Large and external ones of the top-level graph become typed graph
    inputs, so no inference engine tries to read their bytes; those of
    subgraphs (whose inputs are positional) keep their dims and point to no
    data.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)

    def is_large(init: onnx.TensorProto) -> bool:
        return init.data_location == TensorProto.EXTERNAL or math.prod(init.dims) > 1024

    g = m.graph
    declared = {vi.name for vi in g.input}
    keep = []
    for init in g.initializer:
        if not is_large(init):
            keep.append(init)
            continue
        if init.name not in declared:
            g.input.append(
                onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            )
    del g.initializer[:]
    g.initializer.extend(keep)
    for sub in iter_graphs(g):
        if sub is g:
            continue
        for init in sub.initializer:
            if is_large(init):
                dims, dt, name = list(init.dims), init.data_type, init.name
                init.Clear()
                init.name, init.data_type = name, dt
                init.dims.extend(dims)
                init.data_location = TensorProto.EXTERNAL
                e = init.external_data.add()
                e.key, e.value = "location", "__onnxmem_stripped__"
    del g.value_info[:]
    return m


def _run_onnx_inference(model: onnx.ModelProto) -> onnx.ModelProto | None:
    try:
        return onnx.shape_inference.infer_shapes(
            model, check_type=False, strict_mode=False, data_prop=True
        )
    except Exception:  # noqa: BLE001 - fall through to the next method
        try:
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001
            return None


def _run_symbolic_inference(model: onnx.ModelProto) -> onnx.ModelProto | None:
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
            engine._preprocess(model)
            # it repeats its pass while a pass merged symbols; on some damaged models
            # it never stops, so the passes are bounded (real models need one to three)
            for _ in range(SYMBOLIC_PASSES):
                if not engine.run_:
                    break
                engine._infer_impl()
            engine._update_output_from_vi()
            return engine.out_mp_  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - symbolic inference gives up on some graphs
        return None


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


def _collect(model: onnx.ModelProto) -> dict[str, tuple[int | None, tuple[Dim, ...] | None]]:
    return _collect_graph(model.graph)


def _collect_graph(g: onnx.GraphProto) -> dict[str, tuple[int | None, tuple[Dim, ...] | None]]:
    """Every declared value of ``g`` (not its subgraphs): ``{name: (elem type, dims)}``; a
    later declaration with a shape wins over one without, or with unknown dims."""
    out: dict[str, tuple[int | None, tuple[Dim, ...] | None]] = {}
    for init in g.initializer:
        out[init.name] = (init.data_type, tuple(int(d) for d in init.dims))
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        et, sh = _read_type(vi)
        prev = out.get(vi.name)
        if prev is None or prev[1] is None or (sh is not None and None in prev[1]):
            out[vi.name] = (et or (prev[0] if prev else None), sh if sh is not None else (prev[1] if prev else None))
    return out


def owner_key(node: onnx.NodeProto, index: int) -> str:
    """The key of a node that owns subgraphs (see :data:`BodyKey`): stable across the
    copies inference makes, which may drop or replace other nodes but never these."""
    return next((o for o in node.output if o), f"#{index}")


def subgraph_attributes(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """``(attribute name, graph)`` of every subgraph of ``node`` (a list attribute's
    graphs as ``name[i]``)."""
    out: list[tuple[str, onnx.GraphProto]] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            out.append((attr.name, attr.g))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            out.extend((f"{attr.name}[{i}]", g) for i, g in enumerate(attr.graphs))
    return out


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


def _body_types(model: onnx.ModelProto) -> dict[BodyKey, dict[str, tuple[int | None, tuple[Dim, ...] | None]]]:
    """What ``model`` declares of every subgraph's values: inputs, value_info, outputs, initializers."""
    out: dict[BodyKey, dict[str, tuple[int | None, tuple[Dim, ...] | None]]] = {}
    for key, g in iter_bodies(model.graph):
        out[key] = _collect_graph(g)
    return out


def _body_shapes(
    model: onnx.ModelProto, sources: Sequence[tuple[onnx.ModelProto | None, Mapping[str, int]]]
) -> dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]]:
    """Concrete shapes of the values each subgraph of ``model`` defines, from the first
    of ``sources`` (an inferred model and the dim binding to read it with) that resolves them."""
    read = [(_body_types(m), binding) for m, binding in sources if m is not None]
    out: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]] = {}
    for key, g in iter_bodies(model.graph):
        names = [vi.name for vi in g.input] + [i.name for i in g.initializer]
        names += [o for node in g.node for o in node.output if o]
        known: dict[str, tuple[int, tuple[int, ...]]] = {}
        for name in names:
            for types, binding in read:
                et, sh = types.get(key, {}).get(name, (None, None))
                if et is None or sh is None:
                    continue
                resolved = [_resolve_dim(d, binding) for d in sh]
                if all(r is not None for r in resolved):
                    known[name] = (et, tuple(int(r) for r in resolved))  # type: ignore[arg-type]
                    break
        out[key] = known
    return out


#: the most elements of a captured outer value that a body's standalone model holds as a
#: constant (larger captured values are typed inputs: their shapes matter, not their data)
MAX_CAPTURED_ELEMENTS = 4096


def _captures(body: onnx.GraphProto) -> list[str]:
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
            out.update(_captures(sub))
    return out


def _standalone(
    model: onnx.ModelProto,
    body: onnx.GraphProto,
    formal: Mapping[str, tuple[int, tuple[int, ...]]],
    outer: Mapping[str, tuple[int, tuple[int, ...]]],
    values: Mapping[str, np.ndarray],
    hints: Mapping[str, tuple[int, tuple[int, ...]]],
) -> onnx.ModelProto:
    """``body`` as a model of its own, stripped for inference: its inputs at their ``formal``
    shapes, each captured outer value a constant where its value is known and small, else a
    graph input at its ``outer`` shape (untyped when that is unknown), and the ``hints``
    (outputs of nested Ifs whose taken branch is known) as value_info."""
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
            _set_shape(vi, shape)
    for name in _captures(body):
        value = values.get(name)
        if value is not None and value.size <= MAX_CAPTURED_ELEMENTS:
            g.initializer.append(numpy_helper.from_array(value, name))
        elif name in outer:
            et, shape = outer[name]
            g.input.append(onnx.helper.make_tensor_value_info(name, et, list(shape)))
        else:
            g.input.append(onnx.helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None))
    work = _strip_for_inference(m)
    for name, (et, shape) in hints.items():
        work.graph.value_info.append(onnx.helper.make_tensor_value_info(name, et, list(shape)))
    return work


def _run_engines(
    work: onnx.ModelProto,
    absorb: Callable[[Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]], None],
    incomplete: Callable[[], bool],
    resolve: Callable[[Dim], int | None],
    *,
    also: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Feed ``absorb`` what each engine makes of ``work``: onnx inference with data propagation,
    shape arithmetic (``resolve`` reads one declared dim), onnxruntime's symbolic inference, in
    that order of precedence; a later engine runs only while ``incomplete()``. Given ``also``
    (values to compute besides those in shape slots), shape arithmetic runs in any case, for
    the values it computes, which are returned."""
    made: dict[str, np.ndarray] = {}
    inferred = _run_onnx_inference(work)
    if inferred is not None:
        absorb(_collect(inferred))
        if also is not None or incomplete():
            evaluated = shapeeval.evaluate_shapes(
                work, inferred, infer=_run_onnx_inference, resolve=resolve, also=also or ()
            )
            made = evaluated.values
            absorb({**_collect(evaluated.model), **evaluated.shapes})
            inferred = evaluated.model
    if incomplete():
        sym = _run_symbolic_inference(inferred if inferred is not None else work)
        if sym is not None:
            absorb(_collect(sym))
    return made


def _infer_standalone(work: onnx.ModelProto, names: Iterable[str], also: Sequence[str]) -> tuple[
        dict[str, tuple[int, tuple[int, ...]]], dict[str, np.ndarray]]:
    """The concrete shapes of ``names`` in ``work`` by the main graph's engines (onnx inference
    with data propagation, shape arithmetic, onnxruntime's symbolic inference, in that order of
    precedence), and the values the shape arithmetic computed (``also`` among them)."""
    wanted = list(names)
    found: dict[str, tuple[int, tuple[int, ...]]] = {}

    def absorb(info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]) -> None:
        for name in wanted:
            et, sh = info.get(name, (None, None))
            if name in found or et is None or sh is None:
                continue
            resolved = [_resolve_dim(d, {}) for d in sh]
            if all(r is not None for r in resolved):
                found[name] = (et, tuple(int(r) for r in resolved))  # type: ignore[arg-type]

    made = _run_engines(work, absorb, lambda: len(found) < len(wanted), lambda d: _resolve_dim(d, {}), also=also)
    return found, made


def _taken_branches(
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


def _standalone_bodies(
    model: onnx.ModelProto,
    graph: onnx.GraphProto,
    key: BodyKey,
    outer: Mapping[str, tuple[int, tuple[int, ...]]],
    values: Mapping[str, np.ndarray],
    bodies: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]],
    excluded: frozenset[BodyKey] = frozenset(),
) -> None:
    """Complete ``bodies`` for every subgraph of ``graph`` (at ``key``), nested ones too, by
    inferring each as a model of its own (:func:`_standalone`) that sees the concrete shapes
    ``outer`` and the known ``values`` of the outer values it captures. Shapes already in
    ``bodies`` stay; both branches of an If are sized from the same captured values. A nested
    If whose condition the shape arithmetic computes gives its outputs the taken branch's
    shapes, and the body is inferred again with them."""
    for i, node in enumerate(graph.node):
        for attr, sub in subgraph_attributes(node):
            sk = (*key, (owner_key(node, i), attr))
            have = bodies.setdefault(sk, {})
            names = [vi.name for vi in sub.input] + [x.name for x in sub.initializer]
            names += [o for n in sub.node for o in n.output if o]
            conds = [n.input[0] for n in sub.node if n.op_type == "If" and n.input]
            hints: dict[str, tuple[int, tuple[int, ...]]] = {}
            for _ in range(len(conds) + 1):
                formal = {vi.name: have[vi.name] for vi in sub.input if vi.name in have}
                work = _standalone(model, sub, formal, outer, values, hints)
                inner = {**values, **shapeeval.graph_constants(work)}
                if len(have) < _defined_count(sub):
                    found, made = _infer_standalone(work, names, conds)
                    for name, typed in found.items():
                        have.setdefault(name, typed)
                    inner.update(made)
                _standalone_bodies(model, sub, sk, {**outer, **have}, inner, bodies, excluded)
                taken = _taken_branches(sub, sk, inner, bodies, have, excluded)
                if not taken:
                    break
                have.update(taken)
                hints.update(taken)


def _apply_op_rules(
    model: onnx.ModelProto,
    known: dict[str, tuple[int, tuple[int, ...]]],
    sources: dict[str, str],
) -> None:
    """Shapes that shape inference leaves out but the operator spec fixes.

    Dropout's optional ``mask`` output has the shape of its input (type T
    before opset 10, bool from 10 on); onnx's inference types only output 0.
    """
    opset = shapeeval.opset_version(model)
    for node in model.graph.node:
        if node.op_type == "Dropout" and node.domain in ("", "ai.onnx") and len(node.output) > 1:
            mask = node.output[1]
            src = node.input[0] if node.input else ""
            if mask and mask not in known and src in known:
                et = known[src][0] if opset < 10 else int(TensorProto.BOOL)
                known[mask] = (et, known[src][1])
                sources[mask] = "op-rule"


def _top_level_values(model: onnx.ModelProto) -> list[str]:
    g = model.graph
    names: list[str] = []
    seen: set[str] = set()
    inits = {i.name for i in g.initializer}
    for vi in g.input:
        if vi.name not in inits and vi.name not in seen:
            names.append(vi.name)
            seen.add(vi.name)
    for n in g.node:
        for o in n.output:
            if o and o not in seen:
                names.append(o)
                seen.add(o)
    return names


def infer_shapes(
    model: onnx.ModelProto,
    *,
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    measured: Mapping[str, tuple[int, tuple[int, ...]]] | None = None,
    strict_dims: bool = True,
    measured_values: Mapping[str, np.ndarray] | None = None,
    excluded: frozenset[BodyKey] = frozenset(),
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
    :func:`onnxmem.runtime.ort.measure_shapes`). ``excluded``: If branches runs are
    assumed not to take (:func:`onnxmem.graph.view.excluded_branches`): an If's outputs
    take the other branch's shapes, and the excluded one need not be sized.
    """
    user_dims = dict(dims or {})
    input_shapes = dict(input_shapes or {})
    work = _strip_for_inference(model)
    _take_branches(work.graph, excluded)
    # from here on the inference engines see generated names only (see _rename_dims)
    safe = _rename_dims(work)
    original = {v: k for k, v in safe.items()}
    if strict_dims:
        for name, value in user_dims.items():
            if name not in safe:
                declared = sorted(safe)
                listing = (
                    "its named dims are " + ", ".join(map(show_name, declared[:12]))
                    + (f" and {len(declared) - 12} more" if len(declared) > 12 else "")
                    if declared else "it has no named dims (pin whole inputs with --input-shape)"
                )
                raise ShapeError(f"--dim {show_name(name)}={value} names no dim of the model; {listing}")
    dims = {safe[k]: v for k, v in user_dims.items() if k in safe}
    g = work.graph
    inits = {i.name for i in model.graph.initializer}
    real_inputs = {vi.name: vi for vi in g.input if vi.name not in inits}
    for name in input_shapes:
        if name not in real_inputs:
            raise ShapeError(
                f"--input-shape names {show_name(name)}, which is not a graph input; inputs are: "
                f"{', '.join(map(repr, real_inputs)) or '(none)'}"
            )
    # bind dims on graph inputs and learn dims implied by pinned shapes
    for name, vi in real_inputs.items():
        _, cur = _read_type(vi)
        if name in input_shapes:
            pin = input_shapes[name]
            if cur is not None and len(cur) != len(pin):
                raise ShapeError(
                    f"--input-shape {show_name(name)}={'x'.join(map(str, pin))} has rank {len(pin)} "
                    f"but input {show_name(name)} has rank {len(cur)}"
                )
            if cur is not None:
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
            _set_shape(vi, pin)
        elif cur is not None:
            _set_shape(vi, _bind(cur, dims))
    # graph outputs: bind their symbolic dims too, so inference does not conflict
    for vi in g.output:
        _, cur = _read_type(vi)
        if cur is not None:
            _set_shape(vi, _bind(cur, dims))
    # the same bindings under the file's own names, for its value_info (read last)
    file_dims = {**user_dims, **{original[k]: v for k, v in dims.items() if k in original}}

    wanted = _top_level_values(model)
    known: dict[str, tuple[int, tuple[int, ...]]] = {}
    sources: dict[str, str] = {}
    warnings: list[str] = []

    def absorb(
        info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]],
        source: str,
        binding: Mapping[str, int],
    ) -> None:
        for name in wanted:
            if name in known or name not in info:
                continue
            et, sh = info[name]
            if et is None or sh is None:
                continue
            resolved = [_resolve_dim(d, binding) for d in sh]
            if any(r is None for r in resolved):
                continue
            known[name] = (et, tuple(int(r) for r in resolved))  # type: ignore[arg-type]
            sources[name] = source

    inferred = _run_onnx_inference(work)
    if inferred is not None:
        absorb(_collect(inferred), "onnx", dims)
    evaluated: shapeeval.Evaluated | None = None
    if inferred is not None and len(known) < len(wanted):
        # shape arithmetic (Shape -> Gather -> Concat -> Reshape ...) evaluated, folded in, inferred again
        evaluated = shapeeval.evaluate_shapes(
            work, inferred, infer=_run_onnx_inference, resolve=lambda d: _resolve_dim(d, dims)
        )
        absorb({**_collect(evaluated.model), **evaluated.shapes}, "evaluated", dims)
        inferred = evaluated.model
    if len(known) < len(wanted):
        _apply_op_rules(model, known, sources)
    sym: onnx.ModelProto | None = None
    if len(known) < len(wanted):
        # training graphs: gradient ops and what follows them, by rule (onnxmem.shapes.training)
        complete_shapes(model, known, sources, wanted)
    if len(known) < len(wanted):
        sym = _run_symbolic_inference(inferred if inferred is not None else work)
        if sym is not None:
            absorb(_collect(sym), "symbolic", dims)
    if measured is not None:
        for name, (et, sh) in measured.items():
            if name in wanted:
                if name in known and known[name][1] != sh:
                    warnings.append(
                        f"tensor {show_name(name)}: inferred shape {list(known[name][1])} but measured {list(sh)}; using the measured one"
                    )
                known[name] = (et, sh)
                sources[name] = "measured"
    if len(known) < len(wanted):
        # last resort: the exporter's own value_info, for values nothing else could type
        absorb(_collect(model), "value_info", file_dims)
        n_vi = sum(1 for s in sources.values() if s == "value_info")
        if n_vi:
            warnings.append(f"{n_vi} tensor shapes come from the exporter's value_info alone")

    missing = [n for n in wanted if n not in known]
    if missing:
        raise _unknown_sizes(missing, model, file_dims, input_shapes)
    for init in model.graph.initializer:
        known.setdefault(init.name, (init.data_type, tuple(int(d) for d in init.dims)))
    bodies: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]] = {}
    if any(True for _ in iter_bodies(model.graph)):
        bodies = _body_shapes(model, [(inferred, dims)])
        if any(len(bodies[k]) < _defined_count(g) for k, g in iter_bodies(model.graph)):
            if sym is None:
                sym = _run_symbolic_inference(inferred if inferred is not None else work)
            bodies = _body_shapes(model, [(inferred, dims), (sym, dims), (model, file_dims)])
        if any(len(bodies[k]) < _defined_count(g) for k, g in iter_bodies(model.graph)):
            # infer again with every main-graph value at its concrete (or measured) shape, so
            # the bodies see the exact types of the outer values they read
            again = _with_shapes(inferred if inferred is not None else work, known)
            re_onnx = _run_onnx_inference(again)
            re_sym = _run_symbolic_inference(re_onnx if re_onnx is not None else again)
            bodies = _body_shapes(model, [(inferred, dims), (sym, dims), (re_onnx, {}), (re_sym, {}),
                                          (model, file_dims)])
        if any(len(bodies[k]) < _defined_count(g) for k, g in iter_bodies(model.graph)):
            # each body on its own, with the values it captures where they are known
            outer_values = shapeeval.graph_constants(work)
            if evaluated is not None:
                outer_values.update(evaluated.values)
            outer_values.update(measured_values or {})
            _standalone_bodies(model, model.graph, (), known, outer_values, bodies, excluded)
    return ShapeInfo(
        {k: v[0] for k, v in known.items()},
        {k: v[1] for k, v in known.items()},
        sources,
        tuple(warnings),
        bodies,
        excluded,
    )


def infer_symbolic_shapes(
    model: onnx.ModelProto,
    ranged: Iterable[str],
    *,
    dims: Mapping[str, int] | None = None,
    accept: Callable[[tuple[Dim, ...], Mapping[str, str]], bool] | None = None,
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
    """
    fixed = dict(dims or {})
    work = _strip_for_inference(model)
    safe = _rename_dims(work)
    original = {v: k for k, v in safe.items()}
    for name in (*ranged, *fixed):
        if name not in safe:
            raise ShapeError(f"--dim {show_name(name)} names no dim of the model; its named dims are "
                             + (", ".join(map(show_name, sorted(safe)[:12])) or "none"))
    bound = {safe[k]: v for k, v in fixed.items()}
    for vi in (*work.graph.input, *work.graph.output):
        _, cur = _read_type(vi)
        if cur is not None:
            _set_shape(vi, _bind(cur, bound))
    take = accept or (lambda shape, _names: None not in shape)
    wanted = _top_level_values(model)
    found: dict[str, tuple[int, tuple[Dim, ...]]] = {}

    def absorb(info: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]]) -> None:
        for name in wanted:
            et, sh = info.get(name, (None, None))
            if name in found or et is None or sh is None:
                continue
            shape = tuple(_bind(sh, bound))
            if take(shape, original):
                found[name] = (et, shape)

    _run_engines(work, absorb, lambda: len(found) < len(wanted), lambda d: _resolve_dim(d, bound))
    for init in model.graph.initializer:
        found.setdefault(init.name, (init.data_type, tuple(int(d) for d in init.dims)))
    return found, original


def _with_shapes(model: onnx.ModelProto, known: Mapping[str, tuple[int, tuple[int, ...]]]) -> onnx.ModelProto:
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
            _set_shape(declared[name], shape)
        else:
            g.value_info.append(onnx.helper.make_tensor_value_info(name, et, list(shape)))
    return m


def _defined_count(graph: onnx.GraphProto) -> int:
    """How many values ``graph`` defines (inputs, initializers, node outputs), each once."""
    names = {vi.name for vi in graph.input} | {i.name for i in graph.initializer}
    return len(names | {o for node in graph.node for o in node.output if o})


def _dim_label(name: str) -> str:
    """A dim name in a message: bare when it is a short identifier, else quoted and escaped."""
    return name if name.isidentifier() and len(name) <= 60 else show_name(name)


def _unknown_sizes(
    missing: list[str],
    model: onnx.ModelProto,
    file_dims: Mapping[str, int],
    input_shapes: Mapping[str, tuple[int, ...]],
) -> ShapeError:
    """The error for values whose size is still unknown, leading to the flags that fix it.

    When graph inputs have dims nothing binds, the message names those inputs,
    their patterns and a ready ``--input-shape`` line (and ``--dim`` for named
    dims); dims that inference made up (``unk__N``) or that only outputs carry
    are never offered. Otherwise the sizes depend on data.
    """
    shown = ", ".join(map(show_name, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    hints: list[str] = []
    open_inputs = [
        (name, declared) for name, declared in graph_inputs(model).items()
        if name not in input_shapes
        and (declared is None or any(_resolve_dim(d, file_dims) is None for d in declared))
    ]
    for name, declared in open_inputs[:4]:
        flag = flag_value(name)
        if declared is None:
            hints.append(f"{show_name(name)} (rank not declared): pass --input-shape {flag}=D1xD2...")
            continue
        pattern: list[str] = []
        ready: list[str] = []
        named: list[str] = []
        for axis, d in enumerate(declared):
            value = _resolve_dim(d, file_dims)
            if value is not None:
                pattern.append(str(value))
                ready.append(str(value))
                continue
            pattern.append("?" if d is None else _dim_label(str(d)))
            ready.append(f"N{axis}")
            if isinstance(d, str):
                named.append(_dim_label(d))
        line = f"{show_name(name)} [{', '.join(pattern)}]: pass --input-shape {flag}={'x'.join(ready)}"
        if named:
            line += " (or --dim " + " --dim ".join(f"{n}=N" for n in dict.fromkeys(named)) + ")"
        hints.append(line)
    if hints:
        more = f"; and {len(open_inputs) - 4} more inputs" if len(open_inputs) > 4 else ""
        return ShapeError(
            f"sizes of {len(missing)} tensors are unknown ({shown}): graph inputs have unbound "
            f"dims: {'; '.join(hints)}{more}"
        )
    return ShapeError(
        f"sizes of {len(missing)} tensors are unknown ({shown}): their shapes depend on "
        "data; pass --measure-shapes to run the model once and measure them"
    )
