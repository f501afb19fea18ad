"""What running a node once costs: FLOPs from shapes, or time measured in onnxruntime.

:func:`node_flops` counts floating-point operations from the shapes the
planning view carries (a multiply-add is 2):

* Conv: ``2 * |Y| * (C_in / group) * prod(kernel)``; ConvTranspose:
  ``2 * |X| * (C_out / group) * prod(kernel)``; MatMul: ``2 * |Y| * K``;
  Gemm: ``2 * M * N * K`` (the bias adds ``|Y|``);
* attention pieces: Softmax and LogSoftmax ``5 * |X|``; normalisations
  (BatchNormalization, LayerNormalization, InstanceNormalization,
  GroupNormalization, LRN): ``8 * |X|``;
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
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LRN",
    "MeanVarianceNormalization", "RMSNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
})
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
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
    if t in ("Softmax", "LogSoftmax"):
        return 5 * _numel(view, first)
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
