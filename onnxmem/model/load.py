"""Loading an ONNX file: the checked loader and the file's digest.

``load_model`` reads the graph without reading external weights (only their shapes and
dtypes are needed to plan), and refuses what the limits (:mod:`onnxmem.model.limits`), the
tensor checks (:mod:`onnxmem.model.tensors`) or the external-data checks
(:mod:`onnxmem.model.external`) refuse. Shapes come later (:mod:`onnxmem.shapes`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Collection

import onnx

from onnxmem.core.errors import ModelError, show_name
from onnxmem.core.fileio import MAX_MODEL_BYTES, open_input, read_input
from onnxmem.model.bodies import model_graphs
from onnxmem.model.dims import unname_placeholder_dims
from onnxmem.model.external import ExternalData, check_external_data
from onnxmem.model.limits import (
    check_graph_limits,
    check_sparse_initializers,
    check_text,
    parses_as_text,
)
from onnxmem.model.tensors import check_tensor_data, stored_tensors

__all__ = ["copy_without", "file_sha256", "load_model", "load_model_data"]


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a model file (a regular file of at most ``MAX_MODEL_BYTES``)."""
    h = hashlib.sha256()
    with os.fdopen(open_input(path, "model file", MAX_MODEL_BYTES, ModelError), "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read an ONNX file's graph; external weights stay on disk (:func:`load_model_data`)."""
    return load_model_data(path)[0]


def load_model_data(path: str | os.PathLike[str]) -> tuple[onnx.ModelProto, list[ExternalData]]:
    """Read an ONNX file's graph; external weights stay on disk: ``(model, references)``, the
    references the model's external weights make (:func:`check_external_data`, in the order of
    its stored tensors), found in the loader's one walk of the graphs, so a caller that needs the
    weight files (which no output may replace) does not walk the model again.

    Raises ``ModelError`` for a missing, non-regular, too large, truncated or
    non-ONNX file, for a string that is not UTF-8 (:func:`check_text`), for a graph or local
    functions past the limits (:func:`check_graph_limits`), for sparse initializers, for stored
    tensors whose dims or data are wrong (:func:`check_tensor_data`) and for external data that
    :func:`check_external_data` refuses, in the graphs and the local functions alike.
    """
    p = Path(path)
    label = show_name(str(p))
    data = read_input(p, "model file", MAX_MODEL_BYTES, ModelError)
    if not data:
        raise ModelError(f"model file {label} is empty; it is not an ONNX model")
    text = parses_as_text(data)  # first: its parsed copy is gone before the model's is made
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
    if not text:
        check_text(model, f"model {label}")  # the walk names the string that is not text
    graphs = list(model_graphs(model))  # one walk of the nodes for every check
    check_graph_limits(model, f"model {label}", graphs)
    check_sparse_initializers(model, graphs)
    sites = list(stored_tensors(model, graphs))
    check_tensor_data(model, sites)
    refs = check_external_data(model, p.parent, need_files=False, sites=sites)
    unname_placeholder_dims(model, graphs)
    return model, refs


def copy_without(model: onnx.ModelProto, graph_fields: Collection[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose main graph lacks the fields ``graph_fields`` names
    (``"initializer"``, ``"value_info"``): those are never copied, so a copy made to drop the
    weights does not hold them even for a moment (``CopyFrom`` and a delete would)."""
    m = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _set_field(m, field.name, value)
    for field, value in model.graph.ListFields():
        if field.name not in graph_fields:
            _set_field(m.graph, field.name, value)
    if model.HasField("graph"):
        m.graph.SetInParent()
    return m


def _set_field(into: Any, name: str, value: Any) -> None:
    """Field ``name`` of message ``into`` set to a copy of ``value`` (repeated, message or scalar)."""
    if hasattr(value, "extend"):
        getattr(into, name).extend(value)
    elif hasattr(value, "CopyFrom"):
        getattr(into, name).CopyFrom(value)
    else:
        setattr(into, name, value)
