"""Shapes of onnxruntime's fused and quantized ops by rule (the ``contrib-rule`` step).

onnxruntime's graph optimizers (``optimized_model_filepath`` at ORT_ENABLE_EXTENDED or
ORT_ENABLE_ALL) write ``com.microsoft`` ops (FusedConv, FusedGemm, FusedMatMul, BiasGelu,
SkipLayerNormalization, ...) and, at ORT_ENABLE_ALL, the blocked-layout ops of
``com.microsoft.nchwc``; its quantization tools write QLinearAdd, QGemm, MatMulIntegerToFloat,
... onnx's shape inference knows none of them. :data:`CONTRIB_RULES` gives each its outputs'
dtypes and shapes from its schema (onnxruntime's ``contrib_defs.cc``,
``quantization_defs.cc`` and ``nchwc_schema_defs.cc``); :func:`complete_contrib` runs them in
the sweep of :func:`onnxmem.shapes.training.complete_shapes`, which infers the ONNX ops
between them with onnx's per-node inference.

A fused op whose shape is that of an ONNX op (FusedConv is Conv, FusedGemm is Gemm, QGemm is
Gemm, nchwc MaxPool is MaxPool, ...) is inferred by onnx as that op (:func:`_standin`): its
extra attributes dropped, its operands typed float, its output given the op's own dtype.

NCHWc tensors keep an NCHW shape whose channel count is rounded up to the block size (8 with
AVX2, 16 with AVX-512, fixed when the session that wrote the model started): an nchwc Conv's
weight is already padded (its output has ``W.shape[0]`` channels), and ReorderOutput's
``channels`` attribute gives the unpadded count back. Only ReorderInput needs the block size,
which no attribute records; :func:`_reorder_input_channels` reads the padded count from the
model itself (module doc there).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxmem.shapes.contrib_attention import ATTENTION_RULES, int_attribute, ints_attribute
from onnxmem.shapes.mlops import ML_RULES
from onnxmem.shapes.sentinel import symbolic_rule
from onnxmem.shapes.training import (
    TRAINING_RULES,
    Known,
    Rule,
    TypeShape,
    attribute,
    complete_shapes,
    fused_matmul,
    infer_onnx,
    input_at,
    layer_norm,
    matmul_dims,
    same_as,
)

__all__ = ["CONTRIB_RULES", "ORT_DOMAINS", "complete_contrib", "is_custom_domain", "unshaped_reason"]

_MS = "com.microsoft"
#: the domains of the ops onnxruntime implements itself; an op of any other domain runs only
#: through a custom op library (:mod:`onnxmem.runtime.settings`)
ORT_DOMAINS = frozenset({
    "", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training", _MS, "com.microsoft.nchwc",
    "com.microsoft.experimental", "com.ms.internal.nhwc", "com.microsoft.dml",
})
_NCHWC = "com.microsoft.nchwc"
#: the ONNX opset the stand-ins are inferred at (AveragePool's dilations need 19)
_STANDIN_OPSET = [helper.make_opsetid("", 19)]
_F = int(TensorProto.FLOAT)
#: the NCHWc block sizes MLAS uses (AVX2, AVX-512)
_BLOCK_MIN, _BLOCK_MAX = 8, 16


def _standin(op: str, inputs: Sequence[int], drop: Sequence[str] = (), dtype: int | None = None,
             dtype_from: int = 0) -> Rule:
    """A rule that infers the node as the ONNX op ``op`` on its inputs at ``inputs`` (positions),
    without the attributes ``drop``; the output's dtype is ``dtype``, else input ``dtype_from``'s."""

    def rule(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
        picked = [input_at(ins, p) for p in inputs]
        names = [node.input[p] if p < len(node.input) else "" for p in inputs]
        while names and not names[-1]:  # trailing optional inputs left out
            names.pop()
            picked.pop()
        src = input_at(ins, dtype_from)
        if any(n and t is None for n, t in zip(names, picked)) or (dtype is None and src is None):
            return [None] * len(node.output)
        stand = helper.make_node(op, [f"i{k}" if n else "" for k, n in enumerate(names)], ["y"])
        stand.attribute.extend(a for a in node.attribute if a.name not in drop)
        floats = [(_F, t[1]) if t is not None else None for t in picked]
        out = infer_onnx(stand, floats, [None] * len(floats), _STANDIN_OPSET)[0]
        et = dtype if dtype is not None else src[0]  # type: ignore[index]
        return [None if out is None else (et, out[1])] + [None] * (len(node.output) - 1)

    return rule


def _broadcast(a: int, b: int) -> Rule:
    """QLinearAdd / QLinearMul: the broadcast shape of inputs ``a`` and ``b``, in ``a``'s dtype."""

    def rule(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
        x, y = input_at(ins, a), input_at(ins, b)
        if x is None or y is None:
            return [None]
        try:
            dims = np.broadcast_shapes(x[1], y[1])
        except ValueError:
            return [None]
        return [(x[0], tuple(int(d) for d in dims))]

    return rule


def _skip_norm(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """Skip(Simplified)LayerNormalization (input, skip, gamma, ...) -> (output, mean,
    inv_std_var, input_skip_bias_sum): output and the sum like input; mean and inv_std_var
    (float) ``input.shape[:-1] + [1]``, as the kernel allocates them."""
    x = input_at(ins, 0)
    if x is None:
        return [None] * len(node.output)
    stat = (_F, (*x[1][:-1], 1)) if x[1] else None
    return [x, stat, stat, x][: len(node.output)]


def _simplified_norm(node: onnx.NodeProto, ins: list[TypeShape | None],
                     v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """SimplifiedLayerNormalization (X, scale; axis, stash_type) -> (Y, inv_std_var): as
    LayerNormalization without its mean."""
    y, _mean, inv = layer_norm(node, ins, v)
    return [y, inv]


def _matmul_to(dtype_from: int) -> Rule:
    """MatMulIntegerToFloat / DynamicQuantizeMatMul (A, B, ...) -> Y: MatMul's shape, in the
    dtype of input ``dtype_from`` (the float scale or A)."""

    def rule(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
        a, b, t = input_at(ins, 0), input_at(ins, 1), input_at(ins, dtype_from)
        dims = None if a is None or b is None else matmul_dims(a[1], b[1])
        return [None if dims is None or t is None else (t[0], dims)]

    return rule


def _qgemm(node: onnx.NodeProto, ins: list[TypeShape | None], v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """QGemm (A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp) -> Y: Gemm's shape; quantized
    like y_zp when y_scale is given (uint8 without y_zp), else float."""
    quantized = len(node.input) > 7 and bool(node.input[7])
    zp = input_at(ins, 8) if len(node.input) > 8 and node.input[8] else None
    dtype = (zp[0] if zp is not None else int(TensorProto.UINT8)) if quantized else _F
    return _standin("Gemm", (0, 3, 6), drop=(), dtype=dtype)(node, ins, v)


def _channels_last_pool(node: onnx.NodeProto, ins: list[TypeShape | None],
                        _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """QLinearGlobalAveragePool (X, ...; channels_last) -> Y: every spatial dim 1."""
    x, last = input_at(ins, 0), int_attribute(node, "channels_last", 0)
    if x is None or len(x[1]) < 3 or last is None:
        return [None]
    s = x[1]
    if last:
        return [(x[0], (s[0], *([1] * (len(s) - 2)), s[-1]))]
    return [(x[0], (s[0], s[1], *([1] * (len(s) - 2))))]


def _channels_last(rule: Rule, always: bool = False) -> Rule:
    """``rule`` (an NCHW stand-in) for an op whose input 0 and output 0 are NHWC when its
    ``channels_last`` attribute is 1 (or ``always``): input 0's channels moved to dim 1 before
    ``rule``, output 0's moved back last after it. A ``channels_last`` that is not an int
    leaves the output unknown."""

    def wrapped(node: onnx.NodeProto, ins: list[TypeShape | None], v: list[np.ndarray | None]) -> list[TypeShape | None]:
        flag = 1 if always else int_attribute(node, "channels_last", 0)
        x = input_at(ins, 0)
        if flag is None or (flag and (x is None or len(x[1]) < 3)):
            return [None] * len(node.output)
        if not flag or x is None:
            return rule(node, ins, v)
        s = x[1]
        outs = rule(node, [(x[0], (s[0], s[-1], *s[1:-1])), *ins[1:]], v)
        y = outs[0] if outs else None
        if y is None:
            return outs
        return [(y[0], (y[1][0], *y[1][2:], y[1][1])), *outs[1:]]

    return wrapped


def _qlinear_reduce_mean(node: onnx.NodeProto, ins: list[TypeShape | None],
                         _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """QLinearReduceMean (data, data_scale, data_zp, reduced_scale, reduced_zp; axes,
    keepdims) -> reduced: the axes (every axis when none) cut to 1, or dropped without
    keepdims; data's dtype."""
    x, axes, keep = input_at(ins, 0), ints_attribute(node, "axes", []), int_attribute(node, "keepdims", 1)
    if x is None or not isinstance(axes, list) or keep is None:
        return [None]
    rank = len(x[1])
    cut = {a + rank if a < 0 else a for a in axes} if axes else set(range(rank))
    if any(not 0 <= a < rank for a in cut):
        return [None]
    dims = [1 if k in cut else d for k, d in enumerate(x[1]) if keep or k not in cut]
    return [(x[0], tuple(dims))]


def _qlinear_where(node: onnx.NodeProto, ins: list[TypeShape | None],
                   _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """QLinearWhere (condition, X, x_scale, x_zp, Y, y_scale, y_zp, z_scale, z_zp) -> Z: the
    broadcast shape of condition, X and Y, in z_zp's dtype."""
    found = [input_at(ins, p) for p in (0, 1, 4, 8)]
    if any(t is None for t in found):
        return [None]
    try:
        dims = np.broadcast_shapes(*(t[1] for t in found[:3]))  # type: ignore[index]
    except ValueError:
        return [None]
    return [(found[3][0], tuple(int(d) for d in dims))]  # type: ignore[index]


def _qlinear_concat(node: onnx.NodeProto, ins: list[TypeShape | None],
                    _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """QLinearConcat (Y_scale, Y_zp, (X, X_scale, X_zp)...; axis) -> Y: Concat of the Xs."""
    found = [input_at(ins, p) for p in range(2, len(node.input), 3)]
    xs = [x for x in found if x is not None]
    axis = ints_attribute(node, "axis", 0)
    if not xs or len(xs) != len(found) or not isinstance(axis, int):
        return [None]
    rank = len(xs[0][1])
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(len(x[1]) != rank for x in xs):
        return [None]
    dims = list(xs[0][1])
    dims[axis] = sum(x[1][axis] for x in xs)
    return [(xs[0][0], tuple(dims))]


def _quantize(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """com.microsoft QuantizeLinear (x, y_scale, y_zero_point) -> y: x's shape, y_zp's dtype (uint8
    without it)."""
    x, zp = input_at(ins, 0), input_at(ins, 2) if len(node.input) > 2 and node.input[2] else None
    return [None if x is None else (zp[0] if zp is not None else int(TensorProto.UINT8), x[1])]


def _dequantize(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """com.microsoft DequantizeLinear (x, x_scale, x_zero_point) -> y: x's shape, the scale's dtype."""
    x, scale = input_at(ins, 0), input_at(ins, 1)
    return [None if x is None or scale is None else (scale[0], x[1])]


def _reorder_output(node: onnx.NodeProto, ins: list[TypeShape | None],
                    _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """nchwc ReorderOutput (X; channels, channels_last) -> Y: the blocked channels cut back to
    ``channels``, NCHW or (channels_last) NHWC."""
    x = input_at(ins, 0)
    channels = ints_attribute(node, "channels", 0)
    if x is None or len(x[1]) < 3 or not isinstance(channels, int) or not 0 < channels <= x[1][1]:
        return [None]
    s = x[1]
    if attribute(node, "channels_last", 0):
        return [(x[0], (s[0], *s[2:], channels))]
    return [(x[0], (s[0], channels, *s[2:]))]


def _upsample(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """nchwc Upsample (X; scales: ints, one per dim) -> Y: each dim times its scale."""
    x = input_at(ins, 0)
    scales = ints_attribute(node, "scales", [])
    if x is None or not isinstance(scales, list) or len(scales) != len(x[1]) or any(s < 1 for s in scales):
        return [None]
    return [(x[0], tuple(d * s for d, s in zip(x[1], scales)))]


_FUSED_ACT = ("activation", "activation_alpha", "activation_beta", "activation_gamma", "activation_params")
_QPOOL_DROP = ("channels_last",)

#: (domain, op_type) -> rule, each from the op's schema in onnxruntime (module doc)
CONTRIB_RULES: dict[tuple[str, str], Rule] = {
    (_MS, "FusedConv"): _standin("Conv", (0, 1, 2), drop=_FUSED_ACT),
    (_MS, "FusedGemm"): _standin("Gemm", (0, 1, 2), drop=_FUSED_ACT),
    (_MS, "FusedMatMul"): fused_matmul,
    (_MS, "QuickGelu"): same_as(0),
    (_MS, "Gelu"): same_as(0),
    (_MS, "BiasGelu"): same_as(0),
    (_MS, "FastGelu"): same_as(0),
    (_MS, "BiasAdd"): same_as(0),
    (_MS, "SkipLayerNormalization"): _skip_norm,
    (_MS, "SkipSimplifiedLayerNormalization"): _skip_norm,
    ("", "SimplifiedLayerNormalization"): _simplified_norm,  # onnxruntime registers it in ONNX's domain
    (_MS, "SimplifiedLayerNormalization"): _simplified_norm,
    (_NCHWC, "Conv"): _standin("Conv", (0, 1, 2), drop=_FUSED_ACT),  # input 3 (Sum) is added in place
    (_NCHWC, "ReorderOutput"): _reorder_output,
    (_NCHWC, "MaxPool"): _standin("MaxPool", (0,)),
    (_NCHWC, "AveragePool"): _standin("AveragePool", (0,)),
    (_NCHWC, "GlobalMaxPool"): _standin("GlobalMaxPool", (0,)),
    (_NCHWC, "GlobalAveragePool"): _standin("GlobalAveragePool", (0,)),
    (_NCHWC, "Upsample"): _upsample,
    (_MS, "QLinearAdd"): _broadcast(0, 3),
    (_MS, "QLinearMul"): _broadcast(0, 3),
    (_MS, "QLinearSigmoid"): same_as(0),
    (_MS, "QLinearLeakyRelu"): same_as(0),
    (_MS, "QLinearSoftmax"): same_as(0),
    (_MS, "QLinearGlobalAveragePool"): _channels_last_pool,
    (_MS, "QLinearAveragePool"): _channels_last(_standin("AveragePool", (0,), drop=_QPOOL_DROP)),
    (_MS, "QLinearConv"): _channels_last(_standin("Conv", (0, 3, 8), drop=_QPOOL_DROP, dtype_from=7)),
    (_MS, "NhwcMaxPool"): _channels_last(_standin("MaxPool", (0,)), always=True),
    (_MS, "QLinearReduceMean"): _qlinear_reduce_mean,
    (_MS, "QLinearWhere"): _qlinear_where,
    (_MS, "QLinearConcat"): _qlinear_concat,
    (_MS, "QGemm"): _qgemm,
    (_MS, "MatMulIntegerToFloat"): _matmul_to(2),
    (_MS, "DynamicQuantizeMatMul"): _matmul_to(0),
    (_MS, "QuantizeLinear"): _quantize,
    (_MS, "DequantizeLinear"): _dequantize,
    **ATTENTION_RULES,
}


def _reorder_input_channels(model: onnx.ModelProto) -> dict[str, int]:
    """The padded channel count of each nchwc ReorderInput's output, read from the model.

    The block size is fixed when the session that wrote the model started (MLAS's
    ``MlasNchwcGetBlockSize``: 8 with AVX2, 16 with AVX-512) and no attribute records it. The
    count is read, in this order, from the output's own shape in the file's value_info (where
    the writer kept it), else from the weight of an nchwc Conv that reads the output: that
    weight was padded with the same block size, and its input channels times ``group`` are the
    padded count of the tensor it reads. An output with neither stays unknown.
    """
    g = model.graph
    inits = {i.name: tuple(int(d) for d in i.dims) for i in g.initializer}
    declared: dict[str, int] = {}
    for vi in [*g.value_info, *g.output]:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) >= 2 and dims[1].HasField("dim_value") and dims[1].dim_value > 0:
            declared[vi.name] = int(dims[1].dim_value)
    outs = {n.output[0] for n in g.node if n.domain == _NCHWC and n.op_type == "ReorderInput" and n.output}
    found = {o: declared[o] for o in outs if o in declared}
    for n in g.node:
        if n.domain == _NCHWC and n.op_type == "Conv" and len(n.input) > 1 and n.input[0] in outs:
            w, group = inits.get(n.input[1]), ints_attribute(n, "group", 1)
            if w is not None and len(w) > 1 and isinstance(group, int) and group > 0 and n.input[0] not in found:
                found[n.input[0]] = w[1] * group
    return found


def _reorder_input(padded: dict[str, int], block: int | None = None) -> Rule:
    """nchwc ReorderInput (X; channels_last) -> Y: NCHW with the channels padded to the block:
    the count read from the model (:func:`_reorder_input_channels`), else the channels rounded
    up to ``block`` where the caller knows the block size of the session that built the graph."""

    def rule(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
        x = input_at(ins, 0)
        c = padded.get(node.output[0]) if node.output else None
        if x is None or (c is None and block is None) or len(x[1]) < 3:
            return [None]
        s = x[1]
        channels, spatial = (s[-1], s[1:-1]) if attribute(node, "channels_last", 0) else (s[1], s[2:])
        if c is None and block in (_BLOCK_MIN, _BLOCK_MAX):
            c = -(-channels // block) * block
        if c is None:
            return [None]
        # a count no block of 8 or 16 gives (one value_info that lies) leaves it unknown
        fits = c % _BLOCK_MIN == 0 and channels <= c < channels + _BLOCK_MAX
        return [(x[0], (s[0], c, *spatial))] if fits else [None]

    return rule


def is_custom_domain(domain: str) -> bool:
    """Whether ops of ``domain`` run in onnxruntime only through a custom op library."""
    return domain not in ORT_DOMAINS


def unshaped_reason(domain: str, op_type: str) -> str:
    """Why a node of ``op_type`` in ``domain`` (not ONNX's) whose inputs are shaped was left
    unshaped, as the rest of a sentence that names it."""
    key = ("" if domain in ("", "ai.onnx") else domain, op_type)
    if key == (_NCHWC, "ReorderInput"):
        return ("needs the NCHWc block size, which neither the file's value_info nor an NCHWc Conv "
                "reading its output records")
    if key in CONTRIB_RULES or key in TRAINING_RULES or key in ML_RULES:
        return "has a shape rule in onnxmem that cannot type it from its inputs' shapes and attributes"
    return "has no shape rule in onnxmem"


def complete_contrib(model: onnx.ModelProto, known: Known, sources: MutableMapping[str, str],
                     wanted: Sequence[str], values: Mapping[str, np.ndarray] | None = None, *,
                     nchwc_block: int | None = None, symbolic: bool = False, source: str = "contrib-rule") -> int:
    """Give the values still missing from ``known`` a dtype and shape by :data:`CONTRIB_RULES`
    and :data:`onnxmem.shapes.mlops.ML_RULES` (and the training rules, for graphs with both),
    and by onnx's inference of each ONNX node past them; ``values`` are values already computed
    (GroupQueryAttention's ``total_sequence_length``); ``symbolic``: ``known`` holds dims as texts
    too (range plans), each rule run through :func:`onnxmem.shapes.sentinel.symbolic_rule`;
    ``source``: what ``sources`` records for each; returns how many were added."""
    rules = {**TRAINING_RULES, **CONTRIB_RULES, **ML_RULES,
             (_NCHWC, "ReorderInput"): _reorder_input(_reorder_input_channels(model), nchwc_block)}
    if symbolic:
        rules = {k: symbolic_rule(r) for k, r in rules.items()}
    return complete_shapes(model, known, sources, wanted, rules=rules, source=source, values=values,
                           symbolic=symbolic)
