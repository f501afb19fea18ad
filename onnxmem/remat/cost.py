"""What running a node once costs: FLOPs from shapes, or time measured in onnxruntime.

:func:`node_flops` counts floating-point operations from the shapes the
planning view carries (a multiply-add is 2):

* Conv: ``2 * |Y| * (C_in / group) * prod(kernel)``; ConvTranspose:
  ``2 * |X| * (C_out / group) * prod(kernel)``; MatMul: ``2 * |Y| * K``;
  Gemm: ``2 * M * N * K`` (the bias adds ``|Y|``);
* attention pieces: Softmax and LogSoftmax ``5 * |X|``; normalisations
  (BatchNormalization, LayerNormalization, InstanceNormalization,
  GroupNormalization, LRN, onnxruntime's BatchNormInternal): ``8 * |X|``;
* recurrent layers (LSTM, GRU, RNN; onnxruntime's LSTMTraining): the gate
  products, ``2 * seq * batch * directions * gates * H * (I + H)``;
* onnxruntime's gradient ops, so that a training step's own compute is
  counted: ConvGrad ``2 * |dY| * (C_in / group) * prod(kernel)`` for each of
  ``dX`` and ``dW`` it writes (``|dY|`` for ``dB``), ConvTransposeGrad the
  same over ``|X|``, LSTMGrad twice LSTMTraining, the normalisations'
  gradients ``8 * |X|``, SoftmaxGrad ``5 * |dY|``, the transcendental
  gradients (GeluGrad, TanhGrad, ...) ``4 * |dX|``, MaxPoolGrad and
  AveragePoolGrad ``|dX| * prod(kernel)``; the losses (SoftmaxCrossEntropyLoss
  and its gradient) ``5 * |scores|``;
* element-wise: ``|Y|``, and ``4 * |Y|`` for transcendental ones (Exp, Log,
  Tanh, Sigmoid, Erf, Gelu, Pow, Sqrt, Softplus, ...);
* pooling: ``|Y| * prod(kernel)`` (global pooling and reductions: ``|X|``);
* everything else moves data: one operation per element written (a
  recomputed Transpose or Concat is not free).

:func:`measured_costs` runs the model once in onnxruntime with profiling on
and takes each node's kernel time (nanoseconds, the median of ``runs``).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Mapping

import numpy as np
import onnx

from onnxmem.core.errors import OnnxmemError
from onnxmem.graph import GraphView, Op
from onnxmem.runtime.peak import is_kernel_event

__all__ = ["COST_MODELS", "flops_costs", "measured_costs", "model_cost", "node_flops"]

#: ``--cost`` choices
COST_MODELS = {
    "flops": "floating-point operations from shapes (Conv, MatMul, Gemm, normalisations, ...)",
    "measured": "each node's kernel time in one profiled onnxruntime run (ns)",
}

TRANSCENDENTAL = frozenset({
    "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Gelu", "Pow", "Sqrt", "Reciprocal", "Softplus", "Softsign",
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Elu", "Selu",
    "Celu", "Mish", "HardSwish", "HardSigmoid", "ThresholdedRelu",
})
NORMALISATIONS = frozenset({
    "BatchNormInternal", "BatchNormalizationGrad", "LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad",
    "InstanceNormalizationGrad", "SkipLayerNormalizationGrad", "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LRN",
    "MeanVarianceNormalization", "RMSNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
})
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool", "MaxPoolGrad", "AveragePoolGrad"})
#: onnxruntime's gradients of transcendental ops: ``4 * |dX|``
TRANSCENDENTAL_GRADS = frozenset({
    "GeluGrad", "FastGeluGrad", "BiasGeluGrad_dX", "BiasFastGeluGrad_dX", "TanhGrad", "SigmoidGrad", "QuickGeluGrad",
    "SoftplusGrad", "LeakyReluGrad",
})
SOFTMAXES = frozenset({"Softmax", "LogSoftmax", "SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"})
LOSSES = frozenset({
    "SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternal",
    "SoftmaxCrossEntropyLossInternalGrad", "SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad",
    "SparseSoftmaxCrossEntropy", "SparseSoftmaxCrossEntropyGrad",
})
#: recurrent layers and how many gates each has
RECURRENT = {"LSTM": 4, "LSTMTraining": 4, "LSTMGrad": 4, "GRU": 3, "GRUTraining": 3, "GRUGrad": 3, "RNN": 1}
GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
REDUCTIONS = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum",
})


def _numel(view: GraphView, name: str) -> int:
    t = view.tensors.get(name) if name else None
    return int(np.prod(t.shape, dtype=np.int64)) if t is not None else 0


def _shape(view: GraphView, name: str) -> tuple[int, ...]:
    t = view.tensors.get(name) if name else None
    return t.shape if t is not None else ()


def _attr(model_node: onnx.NodeProto | None, name: str) -> list[int] | int | None:
    if model_node is None:
        return None
    for a in model_node.attribute:
        if a.name == name:
            return list(a.ints) if a.type == onnx.AttributeProto.INTS else int(a.i)
    return None


def node_flops(view: GraphView, op: Op, node: onnx.NodeProto | None = None) -> int:
    """FLOPs of one run of ``op`` (module doc); ``node``: its NodeProto, for attributes."""
    t = op.op_type
    out = sum(_numel(view, o) for o in op.outputs if o)
    first = op.inputs[0] if op.inputs else ""
    if t in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        w = _shape(view, op.inputs[1]) if len(op.inputs) > 1 else ()
        if len(w) < 3:
            return out
        kernel = int(np.prod(w[2:], dtype=np.int64))
        if t == "ConvTranspose":
            return 2 * _numel(view, first) * w[1] * kernel
        return 2 * out * w[1] * kernel + (out if len(op.inputs) > 2 and op.inputs[2] else 0)
    if t in ("MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul"):
        a = _shape(view, first)
        return 2 * out * (a[-1] if a else 1)
    if t == "Gemm":
        a = _shape(view, first)
        trans = _attr(node, "transA")
        k = (a[0] if trans else a[-1]) if a else 1
        return 2 * out * k + (out if len(op.inputs) > 2 and op.inputs[2] else 0)
    if t in ("ConvGrad", "ConvTransposeGrad"):
        return _conv_grad_flops(view, op)
    if t in RECURRENT:
        return _recurrent_flops(view, op, RECURRENT[t])
    if t in SOFTMAXES:
        return 5 * _numel(view, first)
    if t in LOSSES:
        return 5 * max((_numel(view, n) for n in op.inputs if n), default=0)
    if t in TRANSCENDENTAL_GRADS:
        return 4 * out
    if t in NORMALISATIONS:
        return 8 * _numel(view, first)
    if t in POOLS:
        ks = _attr(node, "kernel_shape")
        return out * (int(np.prod(ks)) if isinstance(ks, list) and ks else 1)
    if t in GLOBAL_POOLS or t in REDUCTIONS:
        return _numel(view, first)
    if t in TRANSCENDENTAL:
        return 4 * out
    return out


def _conv_grad_flops(view: GraphView, op: Op) -> int:
    """ConvGrad / ConvTransposeGrad (inputs ``dY, X, W``; outputs ``dX, dW, dB``): the forward
    convolution's products once for each of ``dX`` and ``dW`` written, ``|dY|`` for ``dB``."""
    w = _shape(view, op.inputs[2]) if len(op.inputs) > 2 else ()
    dy = _numel(view, op.inputs[0]) if op.inputs else 0
    if len(w) < 3:
        return sum(_numel(view, o) for o in op.outputs if o)
    kernel = int(np.prod(w[2:], dtype=np.int64))
    per = 2 * (_numel(view, op.inputs[1]) if op.op_type == "ConvTransposeGrad" else dy) * w[1] * kernel
    outs = list(op.outputs) + ["", "", ""]
    return per * sum(1 for o in outs[:2] if o) + (dy if outs[2] else 0)


def _recurrent_flops(view: GraphView, op: Op, gates: int) -> int:
    """The gate products of a recurrent layer (inputs ``X [seq, batch, I]``, ``W [dirs, gates * H, I]``,
    ``R [dirs, gates * H, H]``); a gradient op (``...Grad``) computes them twice."""
    x, w = _shape(view, op.inputs[0]) if op.inputs else (), _shape(view, op.inputs[1]) if len(op.inputs) > 1 else ()
    if len(x) != 3 or len(w) != 3:
        return sum(_numel(view, o) for o in op.outputs if o)
    hidden = w[1] // gates
    once = 2 * x[0] * x[1] * w[0] * w[1] * (w[2] + hidden)
    return 2 * once if op.op_type.endswith("Grad") else once


def flops_costs(view: GraphView, model: onnx.ModelProto) -> dict[int, int]:
    """``{view node index: FLOPs}`` for every top-level node."""
    nodes = list(model.graph.node)
    return {op.index: node_flops(view, op, nodes[op.index] if op.index < len(nodes) else None)
            for op in view.ops}


def measured_costs(view: GraphView, model: onnx.ModelProto, model_path: str | os.PathLike[str] | None,
                   *, runs: int = 3, seed: int = 0) -> dict[int, int]:
    """``{view node index: nanoseconds}``: each node's kernel time in onnxruntime's profile
    (optimizations off, so every node runs as itself), the median of ``runs`` runs.

    Nodes the profile does not name (folded constants) cost 0.
    """
    from onnxmem.runtime.ort import load_with_weights, make_session, random_inputs, run_bounded

    full = load_with_weights(model, model_path)
    named = onnx.ModelProto()
    named.CopyFrom(full)
    for node, op in zip(named.graph.node, view.ops):
        node.name = op.name  # the view's unique names, so the profile maps back
    feeds = random_inputs(named, {n: view.tensors[n].shape for n in view.inputs}, seed)
    with tempfile.TemporaryDirectory(prefix="onnxmem-cost-") as tmp:
        sess = make_session(named, profile_prefix=os.path.join(tmp, "profile"))
        for _ in range(max(runs, 1)):
            run_bounded(sess, None, feeds, "the cost measurement run")
        profile = sess.end_profiling()
        try:
            with open(profile, encoding="utf-8") as fh:
                events = json.load(fh)
        except (OSError, ValueError) as exc:
            raise OnnxmemError(f"onnxruntime's profile could not be read: {exc}") from None
    times: dict[str, list[int]] = {}
    for e in events:
        if not is_kernel_event(e):
            continue
        node_name = str(e.get("args", {}).get("node_name") or str(e["name"])[: -len("_kernel_time")])
        times.setdefault(node_name, []).append(int(float(e.get("dur", 0)) * 1000))
    by_name = {op.name: op.index for op in view.ops}
    return {by_name[n]: int(np.median(ts)) for n, ts in times.items() if n in by_name}


def model_cost(costs: Mapping[int, int]) -> int:
    """The cost of one run of the model: every node once."""
    return int(sum(costs.values()))
