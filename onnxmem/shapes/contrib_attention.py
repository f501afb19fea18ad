"""Shapes of onnxruntime's attention, embedding and 4-bit MatMul ops by rule.

The ops onnxruntime's transformer optimizer and its LLM exporters write (``com.microsoft``):
Attention, QAttention, MultiHeadAttention, DecoderMaskedMultiHeadAttention,
GroupQueryAttention, RotaryEmbedding, EmbedLayerNormalization, QEmbedLayerNormalization and
MatMulNBits. Each rule follows the op's schema and type-and-shape inference in onnxruntime's
``bert_defs.cc``, ``quantization_defs.cc`` and ``contrib_defs.cc``, and where the schema
leaves an optional output unshaped (the key/value cache without past, GroupQueryAttention's
present when ``total_sequence_length`` is a computed value) it follows the CPU kernel, which
``tests/test_contrib_attention.py`` checks against a real onnxruntime session:

* Attention / QAttention: ``present`` is ``(2, batch, heads, past + seq, head_size)``
  (``past`` read from input ``past``; 0 without it), or ``past``'s own shape with
  ``past_present_share_buffer``.
* MultiHeadAttention / DecoderMaskedMultiHeadAttention: ``present_key/value`` are
  ``(batch, heads, past + kv_seq, head_size)``; a 4-D key/value (cross attention, already
  in heads) is its own present; the optional ``qk`` is ``(batch, heads, seq, total)``.
* GroupQueryAttention: ``present_key/value`` are ``(batch, kv_heads, max(past_seq,
  total_sequence_length), head_size)`` in the cache's dtype, with ``total_sequence_length``
  a value: a constant, or shape arithmetic the ``evaluated`` step computed from the bound
  dims (``Shape(past_key)[2] + Shape(input_ids)[1]``, as exporters write it); with
  ``sliding_window_cache`` the past's shape. Without that value the present stays unknown
  (it depends on data).

A rule gives ``None`` for anything it cannot size exactly (a missing input, a malformed or
hostile attribute, a dim that does not divide): that value stays unknown and the plan names
the node.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from onnxmem.shapes.training import Rule, TypeShape, attribute, input_at, same_as

__all__ = ["ATTENTION_RULES", "VALUE_INPUTS", "int_attribute", "ints_attribute", "value_inputs", "value_sized"]

_MS = "com.microsoft"
_F = int(TensorProto.FLOAT)
_I32 = int(TensorProto.INT32)
Outs = list[TypeShape | None]
Ins = list[TypeShape | None]
Vals = list[np.ndarray | None]


#: (domain, op_type) -> positions of the inputs whose values (not only shapes) a rule reads
VALUE_INPUTS: dict[tuple[str, str], tuple[int, ...]] = {(_MS, "GroupQueryAttention"): (6,)}


def value_inputs(model: onnx.ModelProto) -> list[str]:
    """The values the rules read (:data:`VALUE_INPUTS`), for the ``evaluated`` step to compute."""
    return [n.input[p] for n in model.graph.node for p in VALUE_INPUTS.get((n.domain, n.op_type), ())
            if p < len(n.input) and n.input[p]]


def value_sized(model: onnx.ModelProto) -> set[str]:
    """The outputs whose shapes the rules size from an input's value (GroupQueryAttention's
    present cache and output_qk): onnxruntime's symbolic inference sizes them from the past
    alone, which is wrong, so shapes kept symbolic (range plans) must not take its answer."""
    return {o for n in model.graph.node if (n.domain, n.op_type) in VALUE_INPUTS for o in n.output[1:] if o}


def ints_attribute(node: onnx.NodeProto, name: str, default: int | list[int]) -> int | list[int] | None:
    """An int or ints attribute, its default when absent, None when it has another type (a
    hostile file's string or graph where an int belongs)."""
    v = attribute(node, name, default)
    if isinstance(v, int) or (isinstance(v, list) and all(isinstance(x, int) for x in v)):
        return v
    return None


def int_attribute(node: onnx.NodeProto, name: str, default: int) -> int | None:
    """An int attribute (:func:`ints_attribute`), None when it is not one int."""
    v = ints_attribute(node, name, default)
    return v if isinstance(v, int) else None


def _given(node: onnx.NodeProto, ins: Ins, p: int) -> TypeShape | None:
    """Input ``p`` when the node names it (an optional input left out is ``None``)."""
    return input_at(ins, p) if p < len(node.input) and node.input[p] else None


def _scalar(node: onnx.NodeProto, v: Vals, p: int) -> int | None:
    """The value of a one-element integer input ``p`` when it is known."""
    if p >= len(node.input) or not node.input[p] or p >= len(v) or v[p] is None:
        return None
    a = v[p]
    if a.size != 1 or a.dtype.kind not in "iu":  # type: ignore[union-attr]
        return None
    return int(a.reshape(-1)[0])  # type: ignore[union-attr]


def _heads(node: onnx.NodeProto, name: str = "num_heads") -> int | None:
    n = int_attribute(node, name, 0)
    return n if n is not None and n > 0 else None


def _attention(weight_at: int, past_at: int, dtype_at: int) -> Rule:
    """Attention (input, weights, bias, mask_index, past, ...) and QAttention (input, weight,
    bias, input_scale, weight_scale, mask_index, input_zp, weight_zp, past) -> (output,
    present): output ``(batch, seq, v_hidden)``, ``v_hidden`` from ``qkv_hidden_sizes`` or a
    third of the merged weight; present ``(2, batch, heads, past + seq, head_size)``."""

    def rule(node: onnx.NodeProto, ins: Ins, v: Vals) -> Outs:
        x, w, t = input_at(ins, 0), input_at(ins, weight_at), input_at(ins, dtype_at)
        out: Outs = [None] * len(node.output)
        heads, sizes = _heads(node), ints_attribute(node, "qkv_hidden_sizes", [])
        if x is None or w is None or t is None or len(x[1]) != 3 or len(w[1]) != 2 or heads is None:
            return out
        if not isinstance(sizes, list) or (sizes and (len(sizes) != 3 or min(sizes) <= 0)):
            return out
        if not sizes and w[1][1] % 3:
            return out
        qk, vh = (sizes[0], sizes[2]) if sizes else (w[1][1] // 3, w[1][1] // 3)
        batch, seq = x[1][0], x[1][1]
        out[0] = (t[0], (batch, seq, vh))
        if len(node.output) > 1 and qk % heads == 0:
            past = _given(node, ins, past_at)
            if past is not None and int_attribute(node, "past_present_share_buffer", 0):
                out[1] = past
            elif past is None:
                out[1] = (t[0], (2, batch, heads, seq, qk // heads))
            elif len(past[1]) == 5:
                out[1] = (t[0], (2, batch, heads, past[1][3] + seq, qk // heads))
        return out

    return rule


def _mha_output(node: onnx.NodeProto, ins: Ins) -> tuple[int, int, int, int] | None:
    """(batch, seq, v_hidden, kv_seq) of a MultiHeadAttention from its query, key and value
    (separate, packed KV or packed QKV); None when unknown."""
    q, k, val = input_at(ins, 0), _given(node, ins, 1), _given(node, ins, 2)
    if q is None:
        return None
    if len(q[1]) == 5:  # packed QKV (batch, seq, heads, 3, head_size)
        return q[1][0], q[1][1], q[1][2] * q[1][4], q[1][1]
    if len(q[1]) != 3:
        return None
    if val is not None and len(val[1]) == 3:
        return q[1][0], q[1][1], val[1][2], val[1][1]
    if val is not None and len(val[1]) == 4:  # cross attention: (batch, heads, kv_seq, head_size)
        return q[1][0], q[1][1], val[1][1] * val[1][3], val[1][2]
    if k is not None and len(k[1]) == 5:  # packed KV (batch, kv_seq, heads, 2, head_size)
        return q[1][0], q[1][1], q[1][2], k[1][1]
    return None


def _multi_head(past_at: int) -> Rule:
    """MultiHeadAttention (query, key, value, bias, key_padding_mask, attention_bias,
    past_key, past_value, ...) and DecoderMaskedMultiHeadAttention (query, key, value,
    mask_index, attention_bias, past_key, past_value, ...) -> (output, present_key,
    present_value, qk)."""

    def rule(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
        out: Outs = [None] * len(node.output)
        q, heads, found = input_at(ins, 0), _heads(node), _mha_output(node, ins)
        if q is None or heads is None or found is None:
            return out
        batch, seq, vh, kv_seq = found
        out[0] = (q[0], (batch, seq, vh))
        past, val = _given(node, ins, past_at), _given(node, ins, 2)
        total = None
        if past is not None and len(past[1]) == 4:
            share = int_attribute(node, "past_present_share_buffer", 0)
            total = past[1][2] if share else past[1][2] + kv_seq
            present = (past[0], (*past[1][:2], total, past[1][3]))
            out[1:3] = [present, present][: len(out) - 1]
        elif val is not None and len(val[1]) == 4:  # cross attention: key and value are the cache
            total = kv_seq
            out[1:3] = [_given(node, ins, 1), val][: len(out) - 1]
        elif vh % heads == 0:
            total = kv_seq
            present = (q[0], (batch, heads, kv_seq, vh // heads))
            out[1:3] = [present, present][: len(out) - 1]
        if len(out) > 3 and total is not None:
            out[3] = (q[0], (batch, heads, seq, total))
        return out[: len(node.output)]

    return rule


def _group_query(node: onnx.NodeProto, ins: Ins, v: Vals) -> Outs:
    """GroupQueryAttention (query, key, value, past_key, past_value, seqlens_k,
    total_sequence_length, ...) -> (output, present_key, present_value, output_qk) (module doc)."""
    out: Outs = [None] * len(node.output)
    q, heads, kv_heads = input_at(ins, 0), _heads(node), _heads(node, "kv_num_heads")
    if q is None or heads is None or kv_heads is None or len(q[1]) != 3:
        return out
    packed = _given(node, ins, 2) is None
    width = heads + 2 * kv_heads if packed else heads
    if q[1][2] % width:
        return out
    head_size = q[1][2] // width
    batch, seq = q[1][0], q[1][1]
    out[0] = (q[0], (batch, seq, heads * head_size))
    past, total = _given(node, ins, 3), _scalar(node, v, 6)
    cache = past[0] if past is not None else q[0]
    if past is not None and len(past[1]) == 4 and int_attribute(node, "sliding_window_cache", 0):
        present: TypeShape | None = past
    elif total is None or total <= 0:
        present = None
    else:
        past_len = past[1][2] if past is not None and len(past[1]) == 4 else 0
        present = (cache, (batch, kv_heads, max(past_len, total), head_size))
    out[1:3] = [present, present][: len(out) - 1]
    if len(out) > 3 and total is not None and total > 0:
        out[3] = (q[0], (batch, heads, seq, total))
    return out[: len(node.output)]


def _embed_layer_norm(word_at: int, dtype_at: int) -> Rule:
    """EmbedLayerNormalization (input_ids, segment_ids, word_embedding, ...) -> (output,
    mask_index, embedding_sum) and QEmbedLayerNormalization (..., word_embedding_quant, ...,
    word_embedding_scale at 8) -> (layernorm_out, mask_index_out): ``(batch, seq, hidden)``
    in the float dtype, ``mask_index`` ``(batch,)`` int32."""

    def rule(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
        ids, word, t = input_at(ins, 0), input_at(ins, word_at), input_at(ins, dtype_at)
        if ids is None or word is None or t is None or len(ids[1]) != 2 or len(word[1]) != 2:
            return [None] * len(node.output)
        emb: TypeShape = (t[0], (*ids[1], word[1][1]))
        outs: Outs = [emb, (_I32, (ids[1][0],)), emb]
        return outs[: len(node.output)]

    return rule


def _matmul_nbits(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    """MatMulNBits (A, B, scales, ...; K, N) -> Y: A's shape with its last dim N, A's dtype."""
    a, k, n = input_at(ins, 0), int_attribute(node, "K", 0), int_attribute(node, "N", 0)
    if a is None or not a[1] or k is None or n is None or n <= 0 or a[1][-1] != k:
        return [None]
    return [(a[0], (*a[1][:-1], n))]


#: (domain, op_type) -> rule (module doc); part of :data:`onnxmem.shapes.contrib.CONTRIB_RULES`
ATTENTION_RULES: dict[tuple[str, str], Rule] = {
    (_MS, "Attention"): _attention(weight_at=1, past_at=4, dtype_at=0),
    (_MS, "QAttention"): _attention(weight_at=1, past_at=8, dtype_at=3),
    (_MS, "MultiHeadAttention"): _multi_head(past_at=6),
    (_MS, "DecoderMaskedMultiHeadAttention"): _multi_head(past_at=5),
    (_MS, "GroupQueryAttention"): _group_query,
    (_MS, "RotaryEmbedding"): same_as(0),
    (_MS, "EmbedLayerNormalization"): _embed_layer_norm(word_at=2, dtype_at=2),
    (_MS, "QEmbedLayerNormalization"): _embed_layer_norm(word_at=2, dtype_at=8),
    (_MS, "MatMulNBits"): _matmul_nbits,
}
