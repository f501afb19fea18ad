"""Limits on the graph a model file may hold: nesting depth, node count, sparse weights, UTF-8 text."""

from __future__ import annotations

import functools
from typing import Any, Iterable, Sequence

import onnx

from onnxmem.core.errors import ModelError, show_name
from onnxmem.model.bodies import model_graphs
from onnxmem.model.functions import Inlined, function_label, inlined_size

__all__ = ["MAX_NESTING", "MAX_NODES", "check_graph_limits", "check_sparse_initializers", "check_text", "parses_as_text"]

#: limits on the graph a file may hold, far above real models
MAX_NESTING = 24
MAX_NODES = 10_000_000


def check_graph_limits(model: onnx.ModelProto, where: str, graphs: Sequence[tuple[str, object]] | None = None) -> None:
    """Refuse a model nested deeper than ``MAX_NESTING`` levels (subgraphs and local function
    calls) or holding more than ``MAX_NODES`` nodes once its local functions are inlined, and
    recursive, duplicate or shadowing functions (:func:`onnxmem.model.functions.inlined_size`), before
    anything expands them. ``graphs``: the model's :func:`onnxmem.model.bodies.model_graphs`, where
    the caller has them already (one graph and no function: its node count, nothing nested)."""
    if graphs is not None and len(graphs) == 1 and not model.functions:
        found = Inlined(len(model.graph.node), 0)
    else:
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


def check_sparse_initializers(model: onnx.ModelProto,
                              graphs: Iterable[tuple[str, onnx.GraphProto | onnx.FunctionProto]] | None = None) -> None:
    """Refuse a sparse initializer: onnxmem plans dense weights only (the view, the weight count
    and the runs read ``initializer``), so it names the tensor and how to store it dense."""
    for where, g in model_graphs(model) if graphs is None else graphs:
        for sp in getattr(g, "sparse_initializer", ()):
            raise ModelError(
                f"sparse initializer {show_name(sp.values.name)}{where}: onnxmem plans models whose "
                "weights are dense initializers only; store it dense (onnx.numpy_helper.from_array of "
                "its dense values, in graph.initializer) and plan again"
            )


def _node_text(node: onnx.NodeProto) -> bool:
    """Whether the strings of ``node`` itself (not its attributes') are all text: joining fails on bytes."""
    try:
        "".join(node.input)
        "".join(node.output)
        node.name + node.op_type + node.domain
    except TypeError:
        return False
    return True


#: the largest file :func:`check_text` parses again with UTF-8 checked (the parse holds a second
#: copy of its inline weights for its length); a larger one is walked in Python
STRICT_PARSE_BYTES = 256 << 20


@functools.lru_cache(maxsize=1)
def _strict_model_class() -> Any:
    """ONNX's ``ModelProto`` as a message class whose parser refuses a string that is not UTF-8:
    onnx's own descriptors, renamed into a package of their own, with the proto2 semantics
    written as protobuf edition 2023 features and ``utf8_validation`` set to ``VERIFY``.
    ``None`` where this protobuf cannot build it (no editions)."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        fdp = descriptor_pb2.FileDescriptorProto()
        onnx.ModelProto.DESCRIPTOR.file.CopyToProto(fdp)
        package = fdp.package
        fdp.name, fdp.package = f"onnxmem_strict/{fdp.name}", "onnxmem_strict"
        fdp.syntax, fdp.edition = "editions", descriptor_pb2.EDITION_2023
        fs = descriptor_pb2.FeatureSet
        features = fdp.options.features
        features.field_presence, features.enum_type = fs.EXPLICIT, fs.CLOSED
        features.repeated_field_encoding, features.message_encoding = fs.EXPANDED, fs.LENGTH_PREFIXED
        features.json_format, features.utf8_validation = fs.LEGACY_BEST_EFFORT, fs.VERIFY
        messages = list(fdp.message_type)
        while messages:
            mt = messages.pop()
            messages.extend(mt.nested_type)
            for fld in mt.field:
                if fld.label == descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED:
                    fld.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
                    fld.options.features.field_presence = fs.LEGACY_REQUIRED
                if fld.type_name.startswith(f".{package}."):
                    fld.type_name = ".onnxmem_strict." + fld.type_name[len(package) + 2:]
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fdp)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("onnxmem_strict.ModelProto"))
    except Exception:  # noqa: BLE001 - a protobuf without editions: the walk checks instead
        return None


def parses_as_text(data: bytes) -> bool:
    """Whether ``data`` (at most :data:`STRICT_PARSE_BYTES`) parses as a model by the parser that
    checks every string (:func:`_strict_model_class`); its parsed copy is dropped at once, so a
    caller that asks before parsing the model itself never holds two parsed copies."""
    if len(data) > STRICT_PARSE_BYTES:
        return False
    try:
        _strict_model_class().FromString(data)
    except Exception:  # noqa: BLE001 - not text, or not a model: the caller's parse and walk say which
        return False
    return True


def check_text(model: onnx.ModelProto, where: str, data: bytes | None = None) -> None:
    """Refuse a string field that is not UTF-8 text (a name, an op type, a dim, a metadata key ...).

    ONNX's proto is proto2, whose parser keeps such a field as ``bytes``; onnxmem would carry it
    into a plan, whose JSON cannot hold it. ``data``: the file ``model`` was parsed from; where
    given (and at most :data:`STRICT_PARSE_BYTES`), it is parsed again by a parser that checks
    every string (:func:`_strict_model_class`: 0.07 CPU s for a 58 MB, 100,001-node graph,
    where the walk below takes 0.4), and only a file it refuses is walked, to name the field.
    The walk visits every message of the model once (of a node, the strings onnxmem reads and
    its attributes; of a tensor, its name, documentation, external data and metadata: nodes and
    weights are most of a large graph); the numbers and raw bytes of tensors are not read.
    """
    from google.protobuf.descriptor import FieldDescriptor

    if data is not None and parses_as_text(data):
        return
    stack: list[Any] = [model]
    while stack:
        msg = stack.pop()
        kind = type(msg)
        if kind is onnx.NodeProto and _node_text(msg):
            if msg.attribute:
                stack.extend(msg.attribute)
            continue
        if kind is onnx.TensorProto and type(msg.name) is not bytes and type(msg.doc_string) is not bytes:
            stack.extend(msg.external_data)  # its other strings are bytes fields; its data is not read
            stack.extend(msg.metadata_props)
            continue
        for fd, value in msg.ListFields():
            if fd.type == FieldDescriptor.TYPE_STRING:
                bad = next((v for v in value if type(v) is bytes), None) if fd.is_repeated else (
                    value if type(value) is bytes else None)
                if bad is not None:
                    raise ModelError(f"{where} holds a string that is not text: {fd.containing_type.name}."
                                     f"{fd.name} is {bad[:60]!r}{'...' if len(bad) > 60 else ''}, not UTF-8; "
                                     "ONNX strings are UTF-8: fix it in the model")
            elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                stack.extend(value if fd.is_repeated else (value,))
