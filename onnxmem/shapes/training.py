"""Shapes of training graphs by rule: every gradient op's outputs, from its schema.

onnx's shape inference knows none of onnxruntime's training ops (``com.microsoft``
ConvGrad, ReluGrad, InPlaceAccumulatorV2, ... and ``MaxPoolGrad``, which onnxruntime
registers in the ONNX domain), and stops at each of them: everything downstream of the
loss stays unknown. :func:`complete_shapes` finishes the job in one sweep over a stable
topological order (:func:`onnxmem.core.toposort.stable_order`, never the file's order):

1. a node whose outputs are all known is skipped;
2. a node with a rule in :data:`TRAINING_RULES` gets its outputs from the rule, which reads
   its inputs' dtypes and shapes, its attributes and (GatherGrad, SplitTraining) the values
   of small constant inputs, ``Shape`` outputs and ConcatTraining's ``per_input_length``
   (the lengths of its inputs on its axis);
3. any other node of a domain onnx knows is inferred alone by onnx
   (``onnx.shape_inference.infer_node_outputs``) from its inputs' now known types and the
   values of its constant inputs (small initializers, ``Constant`` nodes, ``Shape`` of a known
   value);
4. in a training graph (one that accumulates gradients), what is still unknown and named
   ``X_grad`` with ``X`` known gets ``X``'s dtype and shape: onnxruntime's gradient builder
   names the gradient of ``X`` so, and a gradient has the shape of the value it is the
   gradient of.

Each rule states its source: the op's schema in onnxruntime's ``training_op_defs.cc`` /
``contrib_defs.cc`` (outputs, their types, their shapes). A rule returns ``None`` for an
output it cannot type (a missing input, a malformed attribute); that output stays unknown
and the caller's error names it. Nothing is guessed: a rule only copies or combines known
dims. Cost: one pass over the nodes, each inferred once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxmem.core.toposort import stable_order
from onnxmem.model.roles import is_training_graph

__all__ = [
    "GRAD_SUFFIX", "Known", "Rule", "TRAINING_RULES", "TypeShape", "attribute", "complete_shapes",
    "fused_matmul", "infer_onnx", "input_at", "layer_norm", "matmul_dims", "same_as",
]

#: what onnxruntime's gradient builder appends to a value's name to name its gradient
GRAD_SUFFIX = "_grad"
#: constant values read by rules and fed to onnx's per-node inference: at most this many elements
MAX_CONSTANT = 1 << 16

TypeShape = tuple[int, tuple[int, ...]]
Known = MutableMapping[str, TypeShape]
#: a rule: (node, its inputs' types by position (None: absent or unknown), constant input
#: values by position) -> one entry per output (None: unknown)
Rule = Callable[[onnx.NodeProto, list[TypeShape | None], list[np.ndarray | None]], list[TypeShape | None]]

_MS = "com.microsoft"


def attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def same_as(*positions: int) -> Rule:
    """Output ``k`` has the dtype and shape of input ``positions[k]``."""

    def rule(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
        return [ins[p] if p < len(ins) else None for p in positions]

    return rule


def input_at(ins: Sequence[TypeShape | None], p: int) -> TypeShape | None:
    return ins[p] if p < len(ins) else None


def _conv_grad(bias_channels: Callable[[tuple[int, ...], onnx.NodeProto], int]) -> Rule:
    """ConvGrad / ConvTransposeGrad (dY, X, W) -> (dX, dW, dB): dX like X, dW like W, and dB
    one value per output channel, in X's dtype."""

    def rule(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
        x, w = input_at(ins, 1), input_at(ins, 2)
        db = None if x is None or w is None else (x[0], (bias_channels(w[1], node),))
        return [x, w, db]

    return rule


def _batch_norm_internal(node: onnx.NodeProto, ins: list[TypeShape | None],
                         _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """BatchNormInternal (X, scale, B, input_mean, input_var) -> (Y, running_mean, running_var,
    saved_mean, saved_inv_std): Y like X; the four statistics like input_mean ([C])."""
    x, mean = input_at(ins, 0), input_at(ins, 3)
    return [x, mean, input_at(ins, 4) or mean, mean, mean]


def _norm_grad(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """BatchNormalizationGrad / LayerNormalizationGrad (dY, X, scale, mean, inv_std) -> (dX,
    dscale, dbias): dX like X, dscale and dbias like scale."""
    return [input_at(ins, 1), input_at(ins, 2), input_at(ins, 2)]


def matmul_dims(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy.matmul's result shape (1-D operands promoted and dropped), or None on a mismatch."""
    if not a or not b:
        return None
    a2 = (1, a[0]) if len(a) == 1 else a
    b2 = (b[0], 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    if len(a) > 1 and (len(b) == 2 or len(a) == len(b) and a[:-2] == b[:-2]):
        return (*a[:-1], b[-1])  # a matrix, or alike batches: no broadcast
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        return None
    out = (*batch, *((a2[-2],) if len(a) > 1 else ()), *((b2[-1],) if len(b) > 1 else ()))
    return tuple(int(d) for d in out)


def fused_matmul(node: onnx.NodeProto, ins: list[TypeShape | None],
                  _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """FusedMatMul (A, B; transA, transB, transBatchA, transBatchB, alpha) -> Y: MatMul of A and
    B after swapping the last two dims of each operand its trans flag names (rank >= 2). The
    transBatch forms (batch dims rotated) are left unknown."""
    a, b = input_at(ins, 0), input_at(ins, 1)
    if a is None or b is None or attribute(node, "transBatchA", 0) or attribute(node, "transBatchB", 0):
        return [None]
    sa, sb = a[1], b[1]
    if attribute(node, "transA", 0):
        if len(sa) < 2:
            return [None]
        sa = (*sa[:-2], sa[-1], sa[-2])
    if attribute(node, "transB", 0):
        if len(sb) < 2:
            return [None]
        sb = (*sb[:-2], sb[-1], sb[-2])
    dims = matmul_dims(sa, sb)
    return [None if dims is None else (a[0], dims)]


def _concat_training(node: onnx.NodeProto, ins: list[TypeShape | None],
                     _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """ConcatTraining (inputs...; axis) -> (concat_result, per_input_length): Concat's shape,
    and an int64 vector with one length per input."""
    present = [t for t in ins if t is not None]
    if len(present) != len(node.input) or not present:
        return [None, None]
    rank = len(present[0][1])
    axis = int(attribute(node, "axis", 0))  # type: ignore[call-overload]
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(len(t[1]) != rank for t in present):
        return [None, None]
    first = present[0][1]
    if any(t[1][:axis] + t[1][axis + 1:] != first[:axis] + first[axis + 1:] for t in present):
        return [None, None]
    total = sum(t[1][axis] for t in present)
    lengths = (int(TensorProto.INT64), (len(present),))
    return [(present[0][0], (*first[:axis], total, *first[axis + 1:])), lengths]


def _split_training(node: onnx.NodeProto, ins: list[TypeShape | None],
                    values: list[np.ndarray | None]) -> list[TypeShape | None]:
    """SplitTraining (input, split; axis) -> outputs: the input cut along ``axis`` into the
    lengths ``split`` holds (the per_input_length of the ConcatTraining it undoes), or into
    equal parts when ``split`` is absent."""
    x = input_at(ins, 0)
    n = len(node.output)
    if x is None:
        return [None] * n
    rank = len(x[1])
    axis = int(attribute(node, "axis", 0))  # type: ignore[call-overload]
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return [None] * n
    split = values[1] if len(values) > 1 else None
    if split is None:
        if len(node.input) > 1 and node.input[1] or x[1][axis] % n:
            return [None] * n
        lengths = [x[1][axis] // n] * n
    else:
        lengths = [int(v) for v in split.reshape(-1)]
        if len(lengths) != n or sum(lengths) != x[1][axis]:
            return [None] * n
    return [(x[0], (*x[1][:axis], k, *x[1][axis + 1:])) for k in lengths]


def _gather_grad(node: onnx.NodeProto, ins: list[TypeShape | None],
                 values: list[np.ndarray | None]) -> list[TypeShape | None]:
    """GatherGrad (shape, indices, dY; axis) -> dX: the shape input's value (the shape of the
    gathered data), in dY's dtype."""
    dy, shape = input_at(ins, 2), values[0] if values else None
    if dy is None or shape is None:
        return [None]
    return [(dy[0], tuple(int(d) for d in shape.reshape(-1)))]


def _inplace_accumulator(node: onnx.NodeProto, ins: list[TypeShape | None],
                         _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """InPlaceAccumulatorV2 (accumulation_buffer, value, overwrite_flag) -> (updated,
    accumulation_buffer_out): a bool [1] flag, and the buffer (aliased to input 0)."""
    return [(int(TensorProto.BOOL), (1,)), input_at(ins, 0)]


def _lstm_training(node: onnx.NodeProto, ins: list[TypeShape | None],
                   _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """LSTMTraining (X [seq, batch, in], W [dirs, 4h, in], R, B, SL, H0, C0, P) -> (HAll
    [seq, dirs, batch, h], HFinal [dirs, batch, h], CFinal [dirs, batch, h], CAll like HAll,
    iofc [seq, dirs, batch, 4h])."""
    x, w = input_at(ins, 0), input_at(ins, 1)
    hidden = int(attribute(node, "hidden_size", 0))  # type: ignore[call-overload]
    if x is None or w is None or len(x[1]) != 3 or len(w[1]) != 3 or hidden <= 0:
        return [None] * 5
    seq, batch, _ = x[1]
    dirs = w[1][0]
    et = x[0]
    every = (et, (seq, dirs, batch, hidden))
    last = (et, (dirs, batch, hidden))
    return [every, last, last, every, (et, (seq, dirs, batch, 4 * hidden))]


def _lstm_grad(node: onnx.NodeProto, ins: list[TypeShape | None],
               _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """LSTMGrad (X, W, R, B, SL, H0, C0, HAll, CAll, iofc, dHAll, dHFinal, dCFinal) -> (dX,
    dW, dR, dB, dH0, dC0, dP): like X, W and R; dB [dirs, 8h]; dH0 and dC0 [dirs, batch, h];
    dP [dirs, 3h]."""
    x, w, r = input_at(ins, 0), input_at(ins, 1), input_at(ins, 2)
    hidden = int(attribute(node, "hidden_size", 0))  # type: ignore[call-overload]
    if x is None or w is None or len(x[1]) != 3 or len(w[1]) != 3 or hidden <= 0:
        return [x, w, r, None, None, None, None]
    dirs, batch, et = w[1][0], x[1][1], x[0]
    state = (et, (dirs, batch, hidden))
    return [x, w, r, (et, (dirs, 8 * hidden)), state, state, (et, (dirs, 3 * hidden))]


def _max_pool_grad(node: onnx.NodeProto, ins: list[TypeShape | None],
                   _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """MaxPoolGrad (dY, Indices) -> dX: the shape of the pooled input, which neither input
    carries; :func:`complete_shapes` gives it from the MaxPool that wrote ``Indices``."""
    return [None]


def _compare(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """LessOrEqual / GreaterOrEqual (A, B) -> C: bool, the broadcast shape (ONNX defines these
    as functions, which onnx's per-node inference does not expand; Clip's gradient uses them)."""
    a, b = input_at(ins, 0), input_at(ins, 1)
    if a is None or b is None:
        return [None]
    try:
        dims = np.broadcast_shapes(a[1], b[1])
    except ValueError:
        return [None]
    return [(int(TensorProto.BOOL), tuple(int(d) for d in dims))]


def layer_norm(node: onnx.NodeProto, ins: list[TypeShape | None], _v: list[np.ndarray | None]) -> list[TypeShape | None]:
    """LayerNormalization (X, scale, B; axis, stash_type) -> (Y, Mean, InvStdDev): Y like X; the
    statistics (kept for the gradient) ``X.shape[:axis] + [1] * (rank - axis)`` in the stash
    type (float by default)."""
    x = input_at(ins, 0)
    if x is None:
        return [None, None, None]
    rank = len(x[1])
    axis = int(attribute(node, "axis", -1))  # type: ignore[call-overload]
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return [x, None, None]
    stash = int(attribute(node, "stash_type", TensorProto.FLOAT))  # type: ignore[call-overload]
    stat = (stash, (*x[1][:axis], *([1] * (rank - axis))))
    return [x, stat, stat]


#: (domain, op_type) -> rule. Domain "" is ai.onnx (onnxruntime registers MaxPoolGrad there).
TRAINING_RULES: dict[tuple[str, str], Rule] = {
    # forward ops the gradient builder writes
    (_MS, "BatchNormInternal"): _batch_norm_internal,
    (_MS, "FusedMatMul"): fused_matmul,
    (_MS, "Gelu"): same_as(0),
    (_MS, "FastGelu"): same_as(0),
    (_MS, "BiasGelu"): same_as(0),
    (_MS, "Scale"): same_as(0),
    (_MS, "ConcatTraining"): _concat_training,
    (_MS, "SplitTraining"): _split_training,
    (_MS, "LSTMTraining"): _lstm_training,
    # gradients: each output like the value it is the gradient of
    (_MS, "SoftmaxCrossEntropyLossGrad"): same_as(1),  # d_logits like log_prob
    (_MS, "SoftmaxCrossEntropyLossInternalGrad"): same_as(1),
    (_MS, "SoftmaxGrad"): same_as(0),
    (_MS, "SoftmaxGrad_13"): same_as(0),
    (_MS, "LogSoftmaxGrad"): same_as(0),
    (_MS, "LogSoftmaxGrad_13"): same_as(0),
    (_MS, "ReluGrad"): same_as(1),
    (_MS, "GeluGrad"): same_as(1),
    (_MS, "FastGeluGrad"): same_as(1),
    (_MS, "TanhGrad"): same_as(1),
    (_MS, "SigmoidGrad"): same_as(1),
    (_MS, "QuickGeluGrad"): same_as(1),
    (_MS, "DropoutGrad"): same_as(0),
    (_MS, "BiasDropoutGrad"): same_as(0),
    (_MS, "ConvGrad"): _conv_grad(lambda w, node: w[0]),
    (_MS, "ConvTransposeGrad"): _conv_grad(
        lambda w, node: w[1] * int(attribute(node, "group", 1))  # type: ignore[call-overload]
    ),
    (_MS, "BatchNormalizationGrad"): _norm_grad,
    (_MS, "LayerNormalizationGrad"): _norm_grad,
    (_MS, "SimplifiedLayerNormalizationGrad"): _norm_grad,
    (_MS, "GatherGrad"): _gather_grad,
    (_MS, "LSTMGrad"): _lstm_grad,
    (_MS, "InPlaceAccumulatorV2"): _inplace_accumulator,
    (_MS, "InPlaceAccumulator"): same_as(0),
    (_MS, "ZeroGradient"): same_as(0),
    ("", "MaxPoolGrad"): _max_pool_grad,
    # ONNX ops whose extra outputs or function bodies onnx's per-node inference leaves untyped
    ("", "LayerNormalization"): layer_norm,
    ("", "LessOrEqual"): _compare,
    ("", "GreaterOrEqual"): _compare,
}


def _domain(node: onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def _constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Values of small initializers and of ``Constant`` nodes (at most ``MAX_CONSTANT`` elements)."""
    out: dict[str, np.ndarray] = {}
    for init in model.graph.initializer:
        if init.data_location != TensorProto.EXTERNAL and int(np.prod(init.dims)) <= MAX_CONSTANT:
            try:
                out[init.name] = numpy_helper.to_array(init)
            except Exception:  # noqa: BLE001 - a malformed tensor: its value stays unknown
                continue
    for node in model.graph.node:
        if node.op_type == "Constant" and _domain(node) == "" and node.output and node.attribute:
            a = node.attribute[0]
            if a.name == "value" and int(np.prod(a.t.dims)) <= MAX_CONSTANT:
                try:
                    out[node.output[0]] = numpy_helper.to_array(a.t)
                except Exception:  # noqa: BLE001
                    continue
    return out


def _shape_value(node: onnx.NodeProto, ins: list[TypeShape | None]) -> np.ndarray | None:
    """The value of ``Shape(x)`` (with its start/end) for a known ``x``."""
    x = input_at(ins, 0)
    if x is None or not all(isinstance(d, int) for d in x[1]):  # a named dim: no value
        return None
    dims = x[1]
    start = int(attribute(node, "start", 0))  # type: ignore[call-overload]
    end = int(attribute(node, "end", len(dims)))  # type: ignore[call-overload]
    return np.array(dims[slice(start, end)], dtype=np.int64)


def _concat_lengths(node: onnx.NodeProto, ins: list[TypeShape | None]) -> np.ndarray | None:
    """The value of ConcatTraining's ``per_input_length``: each input's length on ``axis``."""
    if not ins or any(t is None for t in ins):
        return None
    rank = len(ins[0][1])  # type: ignore[index]
    axis = int(attribute(node, "axis", 0))  # type: ignore[call-overload]
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(len(t[1]) != rank or not isinstance(t[1][axis], int)  # type: ignore[index]
                                   for t in ins):
        return None
    return np.array([t[1][axis] for t in ins], dtype=np.int64)  # type: ignore[index]


def _type_proto(elem_type: int, shape: tuple[int, ...]) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(elem_type, list(shape))


def _read(tp: onnx.TypeProto, symbolic: bool = False) -> TypeShape | None:
    """A type's dtype and dims; a named dim (``dim_param``) is kept as its text when ``symbolic``,
    else the shape is unknown."""
    if not tp.HasField("tensor_type") or not tp.tensor_type.elem_type or not tp.tensor_type.HasField("shape"):
        return None
    dims: list[int | str] = []
    for d in tp.tensor_type.shape.dim:
        if symbolic and not d.HasField("dim_value") and d.dim_param:
            dims.append(d.dim_param)
            continue
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return int(tp.tensor_type.elem_type), tuple(dims)  # type: ignore[arg-type]


def infer_onnx(node: onnx.NodeProto, ins: list[TypeShape | None], values: list[np.ndarray | None],
                opsets: Sequence[onnx.OperatorSetIdProto], symbolic: bool = False) -> list[TypeShape | None]:
    """onnx's inference of one node of a domain it knows, from known input types and values
    (``symbolic``: dims may be texts, passed to onnx as named dims and read back as it writes them)."""
    domain = _domain(node)
    version = next((o.version for o in opsets if (o.domain or "") == domain
                    or (domain == "" and o.domain == "ai.onnx")), None)
    if version is None or any(n and t is None for n, t in zip(node.input, ins)):
        return [None] * len(node.output)
    try:
        schema = onnx.defs.get_schema(node.op_type, version, domain)
    except Exception:  # noqa: BLE001 - an op onnx does not know
        return [None] * len(node.output)
    types = {n: _type_proto(*t) for n, t in zip(node.input, ins) if n and t is not None}
    data = {n: numpy_helper.from_array(v, n) for n, v in zip(node.input, values) if n and v is not None}
    try:
        found = onnx.shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=list(opsets))
    except Exception:  # noqa: BLE001 - inference fails on this node: its outputs stay unknown
        return [None] * len(node.output)
    return [_read(found[o], symbolic) if o in found else None for o in node.output]


def complete_shapes(model: onnx.ModelProto, known: Known, sources: MutableMapping[str, str] | None = None,
                    wanted: Sequence[str] | None = None, rules: Mapping[tuple[str, str], Rule] | None = None,
                    source: str = "training-rule", values: Mapping[str, np.ndarray] | None = None,
                    symbolic: bool = False) -> int:
    """Give the top-level values still missing from ``known`` a dtype and shape (module doc).

    ``known`` maps a value to ``(elem_type, shape)``; initializers are read from the model.
    New entries are recorded in ``known`` and, as ``source``, in ``sources``; only names in
    ``wanted`` (default: every node output) are added. ``rules`` replaces
    :data:`TRAINING_RULES` (:mod:`onnxmem.shapes.contrib` passes its own). ``values`` adds
    values computed elsewhere (the ``evaluated`` step's) to the constants the rules read.
    ``symbolic``: shapes may hold dims as texts (range plans, :mod:`onnxmem.shapes.sentinel`);
    the ONNX ops keep the named dims onnx's inference writes, and the rules must take texts.
    Returns how many were added.
    """
    g = model.graph
    types: dict[str, TypeShape] = {i.name: (int(i.data_type), tuple(int(d) for d in i.dims)) for i in g.initializer}
    types.update(known)
    consts = {**(values or {}), **_constant_values(model)}
    keep = set(wanted) if wanted is not None else {o for n in g.node for o in n.output if o}
    opsets = list(model.opset_import)
    pool_input: dict[str, str] = {}  # MaxPool's Indices output -> the pooled input
    for node in g.node:
        if node.op_type == "MaxPool" and _domain(node) == "" and len(node.output) > 1 and node.output[1]:
            pool_input[node.output[1]] = node.input[0]
    by_name = is_training_graph(model)  # the naming rule holds in the generator's graphs only
    added = 0
    nodes = list(g.node)
    for i in stable_order(_successors(nodes)):
        node = nodes[i]
        outs = list(node.output)
        ins = [types.get(n) if n else None for n in node.input]
        if any(o and o not in types for o in outs):
            _complete_node(node, ins, [consts.get(n) if n else None for n in node.input], types, pool_input,
                           opsets, by_name, TRAINING_RULES if rules is None else rules, symbolic)
            for o in outs:
                if o in keep and o in types and o not in known:
                    known[o] = types[o]
                    if sources is not None:
                        sources[o] = source
                    added += 1
        _record_value(node, ins, consts)
    return added


def _complete_node(node: onnx.NodeProto, ins: list[TypeShape | None], vals: list[np.ndarray | None],
                   types: dict[str, TypeShape], pool_input: dict[str, str],
                   opsets: Sequence[onnx.OperatorSetIdProto], by_name: bool,
                   rules: Mapping[tuple[str, str], Rule], symbolic: bool = False) -> None:
    """Steps 2 to 4 of the module doc for one node: its outputs' types go into ``types``."""
    rule = rules.get((_domain(node), node.op_type))
    if rule is None:
        found = infer_onnx(node, ins, vals, opsets, symbolic)
    elif node.op_type == "MaxPoolGrad" and len(node.input) > 1:
        found = [types.get(pool_input.get(node.input[1], ""))]
    else:
        try:
            found = rule(node, ins, vals)
        except (TypeError, ValueError, OverflowError):  # a hostile attribute (a list where an int belongs): unknown
            found = []
    for k, o in enumerate(node.output):
        if not o or o in types:
            continue
        t = found[k] if k < len(found) else None
        if t is None and by_name and o.endswith(GRAD_SUFFIX):
            t = types.get(o[: -len(GRAD_SUFFIX)])
        if t is not None:
            types[o] = t


def _record_value(node: onnx.NodeProto, ins: list[TypeShape | None], consts: dict[str, np.ndarray]) -> None:
    """Keep the value of a ``Shape`` of a known value, and ConcatTraining's ``per_input_length``
    (what SplitTraining undoes the concat with), for the rules and onnx's inference to read."""
    outs = node.output
    if node.op_type == "Shape" and _domain(node) == "" and outs and outs[0]:
        value = _shape_value(node, ins)
        if value is not None:
            consts[outs[0]] = value
    if node.op_type == "ConcatTraining" and _domain(node) == _MS and len(outs) > 1 and outs[1]:
        value = _concat_lengths(node, ins)
        if value is not None:
            consts[outs[1]] = value


def _successors(nodes: Sequence[onnx.NodeProto]) -> list[list[int]]:
    """For each node, the indices of the nodes that read a value it writes."""
    writer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for o in node.output:
            if o:
                writer[o] = i
    succ: list[set[int]] = [set() for _ in nodes]
    for j, node in enumerate(nodes):
        for n in node.input:
            if n in writer and writer[n] != j:
                succ[writer[n]].add(j)
    return [sorted(s) for s in succ]
