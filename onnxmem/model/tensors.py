"""Stored tensors: where each sits in a model, and the check that its dims and data agree."""

from __future__ import annotations

import math
from typing import Any, Iterable

import onnx
from onnx import TensorProto

from onnxmem.core.errors import ModelError, show_name
from onnxmem.model.bodies import iter_graphs, model_graphs
from onnxmem.model.dtypes import DTYPES, MAX_BYTES, MAX_DIM, tensor_bytes

__all__ = ["Site", "check_tensor_data", "graph_tensors", "site_label", "stored_tensors", "tensor_sites"]


def _attribute_tensors(attr: onnx.AttributeProto) -> list[tuple[str, onnx.TensorProto]]:
    """The tensors ``attr`` holds, each with the part it is (``""`` but for a sparse tensor's
    values and indices), in the order of its fields (a list: most attributes hold none)."""
    out = [("", attr.t)] if attr.HasField("t") else []
    if attr.tensors:
        out.extend(("", t) for t in attr.tensors)
    sparse = [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
    for sp in (*sparse, *attr.sparse_tensors):
        out += [(" (sparse values)", sp.values), (" (sparse indices)", sp.indices)]
    return out


#: where a stored tensor sits, named by :func:`site_label` only when a message needs it:
#: ``(the graph's place for a message, the owner, the attribute's name, the part)``; the owner
#: is ``None`` for an initializer, the ``SparseTensorProto`` of a sparse initializer, or the node
#: whose attribute holds the tensor
Site = tuple[str, Any, str, str]


def stored_tensors(source: onnx.ModelProto | onnx.GraphProto,
                   graphs: Iterable[tuple[str, onnx.GraphProto | onnx.FunctionProto]] | None = None,
                   ) -> Iterable[tuple[Site, onnx.TensorProto]]:
    """Every tensor of ``source`` that can keep its data outside the file, with its :data:`Site`:
    initializers, sparse initializers and tensor attributes (a ``Constant``'s ``value``, ...) of
    every graph and subgraph, and, for a model, of its local functions. ``graphs``: the model's
    :func:`onnxmem.model.bodies.model_graphs`, where the caller has them already."""
    if graphs is None:
        graphs = model_graphs(source) if isinstance(source, onnx.ModelProto) else (("", g) for g in iter_graphs(source))
    for where, g in graphs:
        if isinstance(g, onnx.GraphProto):
            yield from (((where, None, "", ""), t) for t in g.initializer)
            for sp in g.sparse_initializer:
                yield (where, sp, "", " (values)"), sp.values
                yield (where, sp, "", " (indices)"), sp.indices
        for node in g.node:
            for attr in node.attribute:
                for part, t in _attribute_tensors(attr):
                    yield (where, node, attr.name, part), t


def site_label(site: Site, t: onnx.TensorProto) -> str:
    """The escaped label of the tensor ``t`` at ``site`` (see :func:`stored_tensors`), for messages."""
    where, owner, attr, part = site
    if owner is None:
        return f"tensor {show_name(t.name)}{where}"
    if isinstance(owner, onnx.SparseTensorProto):
        return f"sparse tensor {show_name(owner.values.name)}{part}{where}"
    node_name = owner.name or (owner.output[0] if owner.output else "")
    return f"attribute {show_name(attr)}{part} of node {show_name(node_name)} ({show_name(owner.op_type)}){where}"


def tensor_sites(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[tuple[str, onnx.TensorProto]]:
    """Every tensor of ``source`` that can keep its data outside the file (see
    :func:`stored_tensors`), with an escaped label for messages."""
    return ((site_label(site, t), t) for site, t in stored_tensors(source))


def graph_tensors(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    """Every tensor of ``source`` that can keep its data outside the file (see :func:`stored_tensors`)."""
    return (t for _, t in stored_tensors(source))


def _check_tensor_dims(site: Site, t: onnx.TensorProto, dims: tuple[int, ...] | None = None) -> None:
    """Refuse a stored tensor with a negative dim or a size past ``MAX_BYTES`` (a damaged file:
    no ``--dim`` or ``--input-shape`` changes a weight). ``dims``: ``t``'s, where read already."""
    dims = tuple(t.dims) if dims is None else dims
    for axis, d in enumerate(dims):
        if d < 0:
            raise ModelError(f"{site_label(site, t)} has negative dim {d} on axis {axis}; the file is damaged: "
                             "re-export the model")
    bits = DTYPES.get(t.data_type, (None, 8))[1] or 8  # strings: one byte an element, at least
    if any(d > MAX_DIM for d in dims) or math.prod(dims) * bits > 8 * MAX_BYTES:
        raise ModelError(f"{site_label(site, t)} has dims {list(dims)}, which make more than 2^62 bytes "
                         "(onnxmem's limit, and far more than any file holds); the file is damaged: "
                         "re-export the model")


def check_tensor_data(model: onnx.ModelProto,
                      sites: Iterable[tuple[Site, onnx.TensorProto]] | None = None) -> None:
    """Refuse a tensor whose dims or data do not hold exactly its dtype and dims' worth of values.

    Every stored tensor (of the graphs and local functions): no negative dim, at
    most ``MAX_BYTES``. One whose data is inline (not external): inline bytes must
    be ``tensor_bytes`` long, and typed values must number the elements (twice for
    complex types, packed for sub-byte ones). ``load_model`` runs it, and the
    runtime again once the external weights are read in, before any becomes an array.
    ``sites``: the model's :func:`stored_tensors`, where the caller has them already.
    """
    for site, t in stored_tensors(model) if sites is None else sites:
        dims, dtype = tuple(t.dims), t.data_type  # each read once
        _check_tensor_dims(site, t, dims)
        if dtype == TensorProto.STRING or t.data_location == TensorProto.EXTERNAL:
            continue
        bits = DTYPES.get(dtype, (None, None))[1]
        if bits is None:
            continue
        numel = math.prod(dims)
        size = tensor_bytes(dtype, dims, t.name)
        if t.HasField("raw_data"):
            have, want, unit = len(t.raw_data), size, "bytes"
        else:
            have = len(t.float_data) + len(t.int32_data) + len(t.int64_data) + len(t.double_data) + len(t.uint64_data)
            name = DTYPES[t.data_type][0]
            want = 2 * numel if name.startswith("complex") else -(-numel * bits // 32) if bits < 8 else numel
            unit = "values"
        if have != want:
            raise ModelError(
                f"{site_label(site, t)} of dtype {DTYPES[t.data_type][0]} and shape {list(t.dims)} "
                f"holds {have:,} {unit} of data where it needs {want:,}; the file is damaged: re-export it"
            )
