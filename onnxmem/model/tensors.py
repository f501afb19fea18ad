"""Stored tensors: where each sits in a model, and the check that its dims and data agree."""

from __future__ import annotations

import math
from typing import Iterable

import onnx
from onnx import TensorProto

from onnxmem.core.errors import ModelError, show_name
from onnxmem.model.bodies import iter_graphs, model_graphs
from onnxmem.model.dtypes import DTYPES, MAX_BYTES, MAX_DIM, tensor_bytes

__all__ = ["Place", "check_tensor_data", "graph_tensors", "site_label", "tensor_places", "tensor_sites"]


def _attribute_tensors(attr: onnx.AttributeProto) -> Iterable[tuple[str, onnx.TensorProto]]:
    if attr.HasField("t"):
        yield "", attr.t
    yield from (("", t) for t in attr.tensors)
    sparse = [attr.sparse_tensor] if attr.HasField("sparse_tensor") else []
    for sp in (*sparse, *attr.sparse_tensors):
        yield " (sparse values)", sp.values
        yield " (sparse indices)", sp.indices


#: where a stored tensor sits, which :func:`site_label` turns into its label: ``(where, node,
#: owner, part)``; ``node`` is ``None`` for an initializer (``owner`` ``None``) or a sparse
#: initializer (``owner`` the sparse tensor), else ``owner`` is the node's attribute
Place = tuple[str, onnx.NodeProto | None, onnx.AttributeProto | onnx.SparseTensorProto | None, str]


def tensor_places(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[tuple[onnx.TensorProto, Place]]:
    """The tensors of :func:`tensor_sites`, in its order, each with its :data:`Place` instead of its
    label: the checks that name a tensor only in an error make the label only then."""
    graphs = model_graphs(source) if isinstance(source, onnx.ModelProto) else (("", g) for g in iter_graphs(source))
    for where, g in graphs:
        if isinstance(g, onnx.GraphProto):
            yield from ((t, (where, None, None, "")) for t in g.initializer)
            for sp in g.sparse_initializer:
                yield sp.values, (where, None, sp, " (values)")
                yield sp.indices, (where, None, sp, " (indices)")
        for node in g.node:
            for attr in node.attribute:
                for part, t in _attribute_tensors(attr):
                    yield t, (where, node, attr, part)


def site_label(t: onnx.TensorProto, place: Place) -> str:
    """The escaped label of tensor ``t`` at ``place`` for a message (:func:`tensor_sites`)."""
    where, node, owner, part = place
    if node is None:
        if isinstance(owner, onnx.SparseTensorProto):
            return f"sparse tensor {show_name(owner.values.name)}{part}{where}"
        return f"tensor {show_name(t.name)}{where}"
    node_name = node.name or (node.output[0] if node.output else "")
    return (f"attribute {show_name(owner.name if owner is not None else '')}{part} of node {show_name(node_name)} "
            f"({show_name(node.op_type)}){where}")


def tensor_sites(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[tuple[str, onnx.TensorProto]]:
    """Every tensor of ``source`` that can keep its data outside the file, with an escaped label
    for messages: initializers, sparse initializers and tensor attributes (a ``Constant``'s
    ``value``, ...) of every graph and subgraph, and, for a model, of its local functions."""
    return ((site_label(t, place), t) for t, place in tensor_places(source))


def graph_tensors(source: onnx.ModelProto | onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    """Every tensor of ``source`` that can keep its data outside the file (see :func:`tensor_sites`)."""
    return (t for t, _ in tensor_places(source))


def _check_tensor_dims(t: onnx.TensorProto, place: Place) -> None:
    """Refuse a stored tensor with a negative dim or a size past ``MAX_BYTES`` (a damaged file:
    no ``--dim`` or ``--input-shape`` changes a weight)."""
    for axis, d in enumerate(t.dims):
        if d < 0:
            raise ModelError(f"{site_label(t, place)} has negative dim {d} on axis {axis}; the file is damaged: "
                             "re-export the model")
    bits = DTYPES.get(t.data_type, (None, 8))[1] or 8  # strings: one byte an element, at least
    if any(d > MAX_DIM for d in t.dims) or math.prod(t.dims) * bits > 8 * MAX_BYTES:
        raise ModelError(f"{site_label(t, place)} has dims {list(t.dims)}, which make more than 2^62 bytes "
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
    for t, place in tensor_places(model):
        _check_tensor_dims(t, place)
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
                f"{site_label(t, place)} of dtype {DTYPES[t.data_type][0]} and shape {list(t.dims)} "
                f"holds {have:,} {unit} of data where it needs {want:,}; the file is damaged: re-export it"
            )
