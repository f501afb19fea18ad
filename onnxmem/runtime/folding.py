"""Weights and weight-derived values: initializers, and constant nodes computed once.

Weights stay outside the arena. :func:`compute_weights` gives every weight
the graph reads as an array (a ``Constant`` node's value read from its attribute,
:func:`constant_value`; the outputs of the other constant nodes and of nodes folded from
weights, :func:`onnxmem.graph.view.build_view`, computed once in one onnxruntime session, as
onnxruntime does at session start); :func:`fold_weights` turns those outputs into
initializers (the graph onnxmem plans); :func:`folded_model` does both on a
model whose weights it reads through ``runtime.load_with_weights``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onnxmem.core.errors import RuntimeBackendError, show_name
from onnxmem.graph import GraphView
from onnxmem.runtime.ort import (
    NUMPY_DTYPES,
    check_memory,
    in_memory,
    load_with_weights,
    make_session,
    ort_values,
    run_bounded,
)
from onnxmem.runtime.sessions import model_like

__all__ = ["compute_weights", "fold_weights", "folded_model", "weight_ops"]


def weight_ops(view: GraphView) -> list[int]:
    """Indices of the nodes whose outputs are weights (constants and folded nodes), in node order."""
    return list(view.weight_ops)


def compute_weights(model: onnx.ModelProto, view: GraphView,
                    given: Mapping[str, np.ndarray] | None = None,
                    outer: Mapping[str, np.ndarray] | None = None,
                    read: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every weight the graph reads: initializers, and constant-node outputs computed once.

    ``model`` must carry its weight data (see ``runtime.load_with_weights``), but the
    initializers ``read`` holds as arrays already (``runtime.ort.load_weights``). ``given``:
    the values of weights that are graph inputs (a training graph's parameters, the
    caller's state: ``view.outside``), which constant nodes may read too. For a body,
    ``model``'s graph is the body and ``outer`` holds the enclosing graphs' weights its
    constant nodes may read.
    """
    out: dict[str, np.ndarray] = dict(given or {})
    for init in model.graph.initializer:
        if init.name in view.tensors or init.name in view.consumers:
            out[init.name] = read[init.name] if read and init.name in read else numpy_helper.to_array(init)
    ops = weight_ops(view)
    if not ops:
        return out
    check_weights_fit(view, ops)
    read_here: set[int] = set()  # Constant nodes read from their attribute; onnxruntime computes the rest
    for i in ops:
        node = model.graph.node[i]
        value = constant_value(node)
        if value is not None:
            read_here.add(i)
            if node.output[0] in view.tensors:
                out[node.output[0]] = value
    ops = [i for i in ops if i not in read_here]
    if not ops:
        return out
    g = onnx.GraphProto()
    g.name = "weights"
    need: dict[str, None] = {}
    for i in ops:
        node = model.graph.node[i]
        g.node.add().CopyFrom(node)
        for n in node.input:
            if n:
                need.setdefault(n, None)
    made = {o for i in ops for o in model.graph.node[i].output if o}
    apart: dict[str, np.ndarray] = {}  # large float weights: handed to onnxruntime, not serialized
    for n in need:
        if n not in made:
            arr = out[n] if n in out else (outer or {})[n]
            stub = in_memory(n, arr)
            if stub is not None:
                apart[n] = arr
            g.initializer.append(stub if stub is not None else numpy_helper.from_array(arr, n))
    for o in sorted(made):
        t = view.tensors.get(o)
        if t is None:
            continue
        g.output.append(onnx.helper.make_tensor_value_info(o, t.elem_type, list(t.shape)))
    given = ort_values(apart)
    sess = make_session(model_like(model, g), initializers=given)
    names = [o.name for o in sess.get_outputs()]
    for n, v in zip(names, run_bounded(sess, names, {}, "to compute its weights from constant nodes")):
        out[n] = np.asarray(v)
    return out


def constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a standard ``Constant`` node, read from its one attribute as onnxruntime's
    kernel gives it; ``None`` where onnxruntime computes it (a sparse or string value, a tensor
    stored outside the model or of a type numpy lacks, a tensor whose data does not match its
    dims, any other node). :func:`compute_weights` of swin_t_legacy (2,653 Constant nodes among its
    2,768 weight nodes) took 0.11 to 0.13 CPU s with every one in onnxruntime's session, 0.07 to
    0.10 with the Constants read here; onnxruntime made and ran a session of 16,000 Constant nodes
    in 0.89 s, numpy read them in 0.12 (``tests/test_fold.py`` holds each form to onnxruntime's
    bits)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1 \
            or len(node.output) != 1 or not node.output[0]:
        return None
    a = node.attribute[0]
    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
        if a.t.data_location == TensorProto.EXTERNAL or a.t.data_type not in NUMPY_DTYPES:
            return None
        try:
            return numpy_helper.to_array(a.t)
        except (ValueError, TypeError):  # data that does not match its dims: onnxruntime's error
            return None
    found = _CONSTANT_SCALARS.get((a.name, a.type))
    return None if found is None else np.array(getattr(a, found[0]), dtype=found[1])


#: a ``Constant``'s attributes of numbers (name and type): the field holding them and their dtype
_CONSTANT_SCALARS = {
    ("value_float", onnx.AttributeProto.FLOAT): ("f", np.float32),
    ("value_floats", onnx.AttributeProto.FLOATS): ("floats", np.float32),
    ("value_int", onnx.AttributeProto.INT): ("i", np.int64),
    ("value_ints", onnx.AttributeProto.INTS): ("ints", np.int64),
}


def check_weights_fit(view: GraphView, ops: list[int]) -> None:
    """Refuse, before anything is allocated, weights computed from constants (``ops``: weight
    nodes of ``view``) that do not fit in the host memory available: each value, then all of
    them together (they are held at once). A 164-byte model can ask for terabytes
    (``ConstantOfShape`` of a constant shape)."""
    fix = ("onnxmem computes weights from constant nodes in host memory before running the model, as "
           "onnxruntime does when it loads it; this model cannot run on this machine")
    values = [(view.ops[i], o, view.tensors[o].size) for i in ops for o in view.ops[i].outputs if o in view.tensors]
    try:  # all together first: what is available is read once where they fit (swin_t_legacy: 2,769 values)
        check_memory(sum(size for _, _, size in values), "cpu",
                     f"the {len(ops)} weights computed from constant nodes", fix=fix)
    except RuntimeBackendError:
        for op, o, size in values:  # a value alone that does not fit is the one to name
            check_memory(size, "cpu", f"weight {show_name(o)}, computed by node {show_name(op.name)} "
                         f"({show_name(op.op_type)}),", fix=fix)
        raise


def fold_weights(model: onnx.ModelProto, view: GraphView, weights: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose constant-node weights are initializers (the graph we plan).

    A folded weight that no remaining node reads and that is no graph output
    is dropped. Below IR version 4 every initializer must also be a graph
    input, so each new initializer gets one there (onnxruntime refuses the
    graph otherwise); the IR version is kept.
    """
    drop = set(weight_ops(view))
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [n for i, n in enumerate(model.graph.node) if i not in drop]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    have = {i.name for i in m.graph.initializer}
    read = {n for node in keep for n in _node_reads(node)} | {o.name for o in m.graph.output}
    legacy = m.ir_version < 4
    for i in sorted(drop):
        for o in model.graph.node[i].output:
            if o and o not in have and o in weights and o in read:
                arr = np.require(weights[o], requirements="C")
                m.graph.initializer.append(numpy_helper.from_array(arr, o))
                have.add(o)
                if legacy:
                    elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
                    m.graph.input.append(onnx.helper.make_tensor_value_info(o, elem, list(arr.shape)))
    return m


def folded_model(model: onnx.ModelProto, view: GraphView,
                 model_path: str | os.PathLike[str] | None = None) -> onnx.ModelProto:
    """``model`` with its weights read from disk and its constant nodes folded into initializers."""
    full = load_with_weights(model, model_path)
    return fold_weights(full, view, compute_weights(full, view))


def _node_reads(node: onnx.NodeProto) -> set[str]:
    """Names ``node`` reads: its inputs and, through If/Loop/Scan bodies, outer-scope values."""
    names = {n for n in node.input if n}
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            for inner in g.node:
                names |= _node_reads(inner)
    return names
