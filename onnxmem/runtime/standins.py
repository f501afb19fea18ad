"""Standard-op stand-ins for training ops onnxruntime has no kernel for on the CPU.

onnxruntime-training's CPU build has no kernel for ``com.microsoft:ConvTransposeGrad``, the
gradient of ConvTranspose that its generator writes (its CUDA build has one), so a U-Net's
training graph cannot run node by node on the CPU. Its node session
(:func:`onnxmem.runtime.sessions.node_session`) then runs a graph of standard ONNX ops that
computes the same outputs from the same inputs, under the same value names: the node's
outputs are still bound at their planned places in the arena and checked as any other
node's; only what the kernel computes inside is the stand-in's, not onnxruntime's. verify
says so in a note. Where onnxruntime has the kernel (a later build), the kernel runs.

ConvTransposeGrad (inputs ``dY, X, W``; outputs ``dX, dW, dB``, each optional) for a
ConvTranspose ``Y = ConvTranspose(X, W)`` with strides ``s``, pads ``p``, dilations ``d`` and
``group`` ``g`` (``W`` is ``(C_in, C_out / g, k...)``):

* ``dX = Conv(dY, W)`` with the same strides, pads, dilations and group: ConvTranspose is the
  adjoint of that convolution (cut to ``X``'s shape where an output padding reaches the stride);
* ``dW[ci, co, a] = sum over n, i of X[n, ci, i] * dY[n, co, i*s + a*d - p]`` per group: the
  convolution of ``dY`` with channels and batch swapped by ``X`` with channels and batch
  swapped, strides ``d`` and dilations ``s`` (their roles exchanged), pads ``p``, cut to the
  kernel's size (it can run past it by the output padding), then channels swapped back; with
  groups, one grouped convolution over each group's batch and channels side by side (as many
  nodes for any group);
* ``dB = ReduceSum(dY)`` over every axis but the channels.

Pads given as ``auto_pad`` ``SAME_*`` or through ``output_shape`` depend on shapes the node
session does not fix; such a node is refused in one line (PyTorch's exporter writes explicit
pads).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable
from typing import Any

import onnx
from onnx import helper

import onnxmem.runtime.settings as settings
from onnxmem.core.errors import RuntimeBackendError, show_name

__all__ = ["STAND_INS", "has_stand_in", "inline", "is_stand_in", "mark_stand_in", "missing_kernel", "no_kernel_fix", "note",
           "stand_in_model"]

#: the opset of the stand-in graphs (ReduceSum's axes an input, Slice's bounds inputs)
OPSET = 17

#: (domain, op) -> what the stand-in runs, for the note verify prints
STAND_INS: dict[tuple[str, str], str] = {
    ("com.microsoft", "ConvTransposeGrad"): "Conv, Transpose, Slice and ReduceSum; Reshape with groups",
}

#: the prefix of the stand-in graphs' own values (a node session's values are named i0, o0...)
_P = "standin."

#: onnxruntime's messages for an op without a kernel here: one it knows (a training build's
#: ConvTransposeGrad on the CPU), and one it does not know at all (any training op in a build without them)
_MISSING = re.compile(r"Could not find an implementation for (\w+)\(|:(\w+)\(-?\d+\) is not a registered function/op")

_STOOD_IN: weakref.WeakSet[Any] = weakref.WeakSet()


def note(domain: str, op_type: str) -> str:
    """What verify says of an op whose nodes ran as its stand-in."""
    return (f"{op_type}: onnxruntime has no CPU kernel for it, so its nodes ran as standard ops computing the same "
            f"outputs ({STAND_INS[(domain, op_type)]}), bound in the arena like any other node")


def has_stand_in(node: onnx.NodeProto) -> bool:
    """Whether ``node``'s op has a stand-in here."""
    return (node.domain, node.op_type) in STAND_INS


def mark_stand_in(session: Any) -> Any:
    """Remember that ``session`` runs a stand-in (:func:`is_stand_in`); returns it."""
    _STOOD_IN.add(session)
    return session


def is_stand_in(session: Any) -> bool:
    """Whether ``session`` was made from a stand-in graph (:func:`mark_stand_in`)."""
    return session in _STOOD_IN


def stand_in_model(node: onnx.NodeProto, name: str, inputs: list[tuple[str, int, tuple[Any, ...]]],
                   outputs: list[str], ir_version: int, opset: int = OPSET) -> onnx.ModelProto:
    """A model of standard ops computing ``node``'s outputs. ``name``: the node's name in the
    model, for messages; ``inputs``: the session's declared inputs ``(name, element type, dims)``
    in the node's order; ``outputs``: the names of its outputs in order (``""`` for one left
    out); ``opset``: the standard opset its nodes are written for (13 or later).
    ``RuntimeBackendError`` where the node's attributes are outside what the stand-in computes."""
    if (node.domain, node.op_type) != ("com.microsoft", "ConvTransposeGrad"):
        raise RuntimeBackendError(f"no stand-in for {node.op_type}")
    if opset < 13:
        raise _Refused(name, f"opset {opset} (ReduceSum's axes an input: 13 and later are)")
    return _conv_transpose_grad(node, name, inputs, outputs, ir_version, opset)


def missing_kernel(message: str) -> str | None:
    """The op onnxruntime has no kernel for, from its error message; ``None`` for other errors."""
    m = _MISSING.search(message)
    return (m.group(1) or m.group(2)) if m else None


def no_kernel_fix(message: str, opsets: Iterable[onnx.OperatorSetIdProto]) -> str:
    """What to do where onnxruntime has no kernel for an op (``message``: its error): of a model whose
    opset imports (``opsets``) declare an ai.onnx opset before 7, onnxruntime's oldest, convert it
    (``"; convert ..."``); an op of a custom domain, give its library
    (:func:`onnxmem.runtime.settings.custom_op_fix`); else ``""``."""
    opset = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset >= 7 or missing_kernel(message) is None:
        return settings.custom_op_fix(message)
    return (f"; the model declares ai.onnx opset {opset} and onnxruntime has kernels for 7 and later: convert it "
            "(onnx.version_converter.convert_version(model, 17)) and plan the converted model")


class _Refused(RuntimeBackendError):
    def __init__(self, name: str, what: str) -> None:
        super().__init__(f"node {show_name(name)} (ConvTransposeGrad): onnxruntime has no CPU kernel for it, and "
                         f"its standard-op stand-in does not compute {what}; verify it with --static-only, or "
                         "on CUDA")


def _ints(node: onnx.NodeProto, name: str, default: list[int]) -> list[int]:
    for a in node.attribute:
        if a.name == name:
            return list(a.ints)
    return default


def _conv_attributes(node: onnx.NodeProto, name: str, rank: int) -> tuple[list[int], list[int], list[int], int]:
    """``strides, pads, dilations, group`` of a ConvTransposeGrad whose spatial rank is ``rank``."""
    attrs = {a.name: a for a in node.attribute}
    auto_pad = attrs["auto_pad"].s.decode("ascii", "replace") if "auto_pad" in attrs else "NOTSET"
    if auto_pad not in ("NOTSET", "VALID"):
        raise _Refused(name, f"pads given as auto_pad {show_name(auto_pad)} (explicit pads are)")
    if "output_shape" in attrs:
        raise _Refused(name, "pads given through output_shape (explicit pads are)")
    strides = _ints(node, "strides", [1] * rank)
    dilations = _ints(node, "dilations", [1] * rank)
    pads = [0] * (2 * rank) if auto_pad == "VALID" else _ints(node, "pads", [0] * (2 * rank))
    group = attrs["group"].i if "group" in attrs else 1
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise _Refused(name, "strides, dilations or pads of another rank than its inputs'")
    if min(strides + dilations, default=1) < 1 or min(pads, default=0) < 0 or group < 1:
        raise _Refused(name, "strides or dilations below 1, negative pads or a group below 1")
    return strides, pads, dilations, group


def _conv_transpose_grad(node: onnx.NodeProto, name: str, inputs: list[tuple[str, int, tuple[Any, ...]]],
                         outputs: list[str], ir_version: int, opset: int) -> onnx.ModelProto:
    if len(inputs) != 3 or len(outputs) > 3:
        raise _Refused(name, "other than three inputs (dY, X, W) and at most three outputs")
    (dy, et, dy_dims), (x, _, x_dims), (w, _, w_dims) = inputs
    if et != onnx.TensorProto.FLOAT:  # onnxruntime's CPU Conv is float's alone
        raise _Refused(name, f"element type {onnx.TensorProto.DataType.Name(et)} (float is)")
    rank = len(w_dims) - 2
    if rank < 1 or len(dy_dims) != rank + 2 or len(x_dims) != rank + 2:
        raise _Refused(name, "inputs of other ranks than (N, C, spatial...) alike")
    strides, pads, dilations, group = _conv_attributes(node, name, rank)
    kernel = [int(k) for k in w_dims[2:]] if all(isinstance(k, int) for k in w_dims[2:]) else None
    if kernel is None:
        kernel = _ints(node, "kernel_shape", [])
        if len(kernel) != rank:
            raise _Refused(name, "a kernel of unknown size (give W a shape, or kernel_shape)")
    if min(kernel) < 1:
        raise _Refused(name, "a kernel_shape below 1")
    conv: dict[str, Any] = {"strides": strides, "pads": pads, "dilations": dilations}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    wanted = list(outputs) + [""] * (3 - len(outputs))
    if wanted[0]:
        if opset < 15 and any(s < d for s, d in zip(strides, dilations)):
            raise _Refused(name, f"a stride below its dilation at opset {opset} (Shape's start: 15 and later)")
        _input_gradient(nodes, inits, (dy, x, w), wanted[0], rank, group, conv)
    if wanted[1]:
        _weight_gradient(nodes, inits, (dy, x), wanted[1], rank, kernel, group, conv)
    if wanted[2]:
        inits.append(helper.make_tensor(_P + "bias_axes", onnx.TensorProto.INT64, [rank + 1],
                                        [0, *range(2, rank + 2)]))
        nodes.append(helper.make_node("ReduceSum", [dy, _P + "bias_axes"], [wanted[2]], keepdims=0))
    graph = helper.make_graph(
        nodes, "stand_in",
        [helper.make_tensor_value_info(n, et, list(dims)) for n, et, dims in inputs],
        [helper.make_tensor_value_info(o, et, None) for o in wanted if o],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def _input_gradient(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], names: tuple[str, str, str],
                    out: str, rank: int, group: int, conv: dict[str, Any]) -> None:
    """The nodes computing ``dX`` (the module doc) into ``out``. An output padding at or above a
    stride (allowed below a larger dilation) makes the convolution's output longer than ``X``
    there: it is cut to ``X``'s shape."""
    dy, x, w = names
    if all(s >= d for s, d in zip(conv["strides"], conv["dilations"])):
        nodes.append(helper.make_node("Conv", [dy, w], [out], group=group, **conv))
        return
    inits.append(helper.make_tensor(_P + "x_starts", onnx.TensorProto.INT64, [rank], [0] * rank))
    inits.append(helper.make_tensor(_P + "x_axes", onnx.TensorProto.INT64, [rank], list(range(2, rank + 2))))
    nodes.append(helper.make_node("Conv", [dy, w], [_P + "dx_full"], group=group, **conv))
    nodes.append(helper.make_node("Shape", [x], [_P + "x_ends"], start=2))
    nodes.append(helper.make_node("Slice", [_P + "dx_full", _P + "x_starts", _P + "x_ends", _P + "x_axes"], [out]))


def _weight_gradient(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], names: tuple[str, str],
                     out: str, rank: int, kernel: list[int], group: int, conv: dict[str, Any]) -> None:
    """The nodes computing ``dW`` (the module doc) into ``out``. With groups, one grouped
    convolution: ``dY`` as ``(C_out / g, g * N, ...)`` and ``X`` as ``(C_in, N, ...)``, each
    group's batch and channels together, so output channel ``gi * C_in / g + ci`` sees group
    ``gi``'s channels of both."""
    dy, x = names
    swap = [1, 0, *range(2, rank + 2)]
    swapped: dict[str, Any] = {"strides": conv["dilations"], "dilations": conv["strides"], "pads": conv["pads"],
                               "group": group}
    ints = onnx.TensorProto.INT64
    inits.append(helper.make_tensor(_P + "w_starts", ints, [rank], [0] * rank))
    inits.append(helper.make_tensor(_P + "w_ends", ints, [rank], kernel))
    inits.append(helper.make_tensor(_P + "w_axes", ints, [rank], list(range(2, rank + 2))))
    a, k = _P + "dy_t", _P + "x_t"
    if group == 1:
        nodes.append(helper.make_node("Transpose", [dy], [a], perm=swap))
        nodes.append(helper.make_node("Transpose", [x], [k], perm=swap))
    else:
        for name, val in (("zero", [0]), ("one", [1]), ("two", [2]), ("end", [2**62]), ("minus", [-1]),
                          ("groups", [group])):
            inits.append(helper.make_tensor(_P + name, ints, [1], val))
        for v, t in ((dy, "dy"), (x, "x")):  # each value's (N, C, spatial...) as (N, g, C / g, spatial...)
            nodes.append(helper.make_node("Shape", [v], [f"{_P}{t}.shape"]))
            nodes.append(helper.make_node("Slice", [f"{_P}{t}.shape", _P + "zero", _P + "one"], [f"{_P}{t}.n"]))
            nodes.append(helper.make_node("Slice", [f"{_P}{t}.shape", _P + "two", _P + "end"], [f"{_P}{t}.sp"]))
            nodes.append(helper.make_node("Concat", [f"{_P}{t}.n", _P + "groups", _P + "minus", f"{_P}{t}.sp"],
                                          [f"{_P}{t}.split"], axis=0))
            nodes.append(helper.make_node("Reshape", [v, f"{_P}{t}.split"], [f"{_P}{t}.g"]))
        moved = list(range(3, rank + 3))
        nodes.append(helper.make_node("Transpose", [_P + "dy.g"], [_P + "dy_m"], perm=[2, 1, 0, *moved]))
        nodes.append(helper.make_node("Concat", [_P + "zero", _P + "minus", _P + "dy.sp"], [_P + "dy_to"], axis=0))
        nodes.append(helper.make_node("Reshape", [_P + "dy_m", _P + "dy_to"], [a]))
        nodes.append(helper.make_node("Transpose", [_P + "x.g"], [_P + "x_m"], perm=[1, 2, 0, *moved]))
        nodes.append(helper.make_node("Concat", [_P + "minus", _P + "x.n", _P + "x.sp"], [_P + "x_to"], axis=0))
        nodes.append(helper.make_node("Reshape", [_P + "x_m", _P + "x_to"], [k]))
    nodes.append(helper.make_node("Conv", [a, k], [_P + "dw_full"], **swapped))
    nodes.append(helper.make_node("Slice", [_P + "dw_full", _P + "w_starts", _P + "w_ends", _P + "w_axes"],
                                  [_P + "dw_cut"]))
    nodes.append(helper.make_node("Transpose", [_P + "dw_cut"], [out], perm=swap))


def inline(model: onnx.ModelProto, types: dict[str, tuple[int, tuple[Any, ...]]]) -> onnx.ModelProto:
    """A copy of ``model`` whose main-graph nodes with a stand-in are replaced by its nodes, at
    the model's standard opset (each node's own values under a prefix of its own): a whole
    model onnxruntime can run where it lacks their kernels. ``types``: each value's element
    type and dims (those the nodes read must be there). ``RuntimeBackendError`` as
    :func:`stand_in_model`."""
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=OPSET)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes: list[onnx.NodeProto] = []
    for k, node in enumerate(model.graph.node):
        if not has_stand_in(node):
            nodes.append(node)
            continue
        if any(i not in types for i in node.input):
            raise _Refused(node.name, "inputs of unknown type")
        declared = [(i, *types[i]) for i in node.input]
        g = stand_in_model(node, node.name, declared, list(node.output), model.ir_version, opset).graph
        own = f"{_P}{k}."

        def renamed(v: str, own: str = own) -> str:
            return own + v[len(_P):] if v.startswith(_P) else v

        for n in g.node:
            n.input[:] = [renamed(v) for v in n.input]
            n.output[:] = [renamed(v) for v in n.output]
            nodes.append(n)
        for t in g.initializer:
            t.name = renamed(t.name)
            out.graph.initializer.append(t)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
