#!/usr/bin/env python
"""Build a small Llama-style decoder as onnxruntime serves it, with onnx.helper.

Usage::

    python tools/build_decoder.py decoder.onnx                       # the small one (tests)
    python tools/build_decoder.py decoder.onnx --layers 4 --hidden 512 --intermediate 1408 --vocab 8000

The graph is the one onnxruntime-genai's model builder writes for a Llama, at small size:

* inputs ``input_ids`` int64 ``[batch, seq]`` and, per layer ``N``,
  ``past_key_values.N.key`` / ``.value`` float ``[batch, kv_heads, past_seq, head_dim]``;
  outputs ``logits`` ``[batch, seq, vocab]`` and ``present.N.key`` / ``.value``;
* ``total_sequence_length`` = ``past_seq + seq`` (int32, from the two inputs' shapes) and
  ``seqlens_k`` = ``total_sequence_length - 1`` for every row (no padding), as
  GroupQueryAttention wants them;
* per layer: SimplifiedLayerNormalization (RMSNorm), Q/K/V projections by MatMulNBits (4-bit,
  ``block_size`` 32, symmetric: zero point 8, one float scale per block), GroupQueryAttention
  with ``do_rotary`` and cos/sin caches, the output projection, SkipSimplifiedLayerNormalization
  (residual add and RMSNorm), a SwiGLU MLP (``down(silu(gate(x)) * up(x))``, all MatMulNBits)
  and the residual Add; then a final RMSNorm and the MatMulNBits ``lm_head``.

``batch``, ``seq`` and ``past_seq`` are symbolic dims (bound with ``onnxmem plan --dim``).
Weights are random from a fixed seed and quantized here (:func:`quantize_4bit`); the model
holds them (no external data).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["DecoderConfig", "build_decoder", "quantize_4bit"]

BLOCK = 32
_MS = "com.microsoft"


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """The sizes of the decoder; ``hidden = heads * head_dim``."""

    layers: int = 2
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 2
    intermediate: int = 512
    vocab: int = 1024
    max_seq: int = 512  # rows of the rotary cos/sin caches: past_seq + seq may not pass it
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def quantize_4bit(w: np.ndarray, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """``w`` ``[K, N]`` float as MatMulNBits' ``B`` ``[N, K / block, block / 2]`` uint8 and
    ``scales`` ``[N * K / block]`` float: per column and block of ``block`` rows, the scale is
    ``max|w| / 7`` and each weight ``clip(round(w / scale) + 8, 0, 15)``, two to a byte, the
    first in the low nibble. ``K`` must be a multiple of ``block``."""
    k, n = w.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the block size {block}")
    cols = w.T.reshape(n, k // block, block)
    scales = np.abs(cols).max(axis=2) / 7.0
    scales[scales == 0] = 1.0
    q = np.clip(np.rint(cols / scales[..., None]) + 8, 0, 15).astype(np.uint8)
    packed = q[..., 0::2] | (q[..., 1::2] << 4)
    return packed, scales.reshape(-1).astype(np.float32)


class _Graph:
    """Nodes and initializers as they are added."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def node(self, op: str, ins: list[str], outs: list[str], domain: str = "", **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{len(self.nodes)}", domain=domain, **attrs))
        return outs[0]

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def linear(self, x: str, name: str, k: int, n: int) -> str:
        """``x @ W`` with a random ``W`` ``[k, n]`` by MatMulNBits."""
        packed, scales = quantize_4bit((self.rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
        b, s = self.init(f"{name}.qweight", packed), self.init(f"{name}.scales", scales)
        return self.node("MatMulNBits", [x, b, s], [f"{name}.out"], domain=_MS, K=k, N=n, bits=4,
                         block_size=BLOCK, accuracy_level=0)

    def norm_weight(self, name: str, size: int) -> str:
        return self.init(name, (1.0 + 0.1 * self.rng.standard_normal(size)).astype(np.float32))


def _lengths(g: _Graph) -> tuple[str, str]:
    """``total_sequence_length`` (int32 ``[1]``) and ``seqlens_k`` (int32 ``[batch]``)."""
    g.node("Shape", ["past_key_values.0.key"], ["past_len"], start=2, end=3)
    g.node("Shape", ["input_ids"], ["seq_len"], start=1, end=2)
    g.node("Shape", ["input_ids"], ["batch_len"], start=0, end=1)
    g.node("Add", ["past_len", "seq_len"], ["total_len"])
    g.node("Cast", ["total_len"], ["total_sequence_length"], to=TensorProto.INT32)
    g.init("one_i32", np.array([1], np.int32))
    g.node("Sub", ["total_sequence_length", "one_i32"], ["last_pos"])
    g.node("Expand", ["last_pos", "batch_len"], ["seqlens_k"])
    return "total_sequence_length", "seqlens_k"


def _layer(g: _Graph, cfg: DecoderConfig, i: int, h: str, lengths: tuple[str, str]) -> str:
    """One decoder layer on the residual stream ``h``; returns the new stream."""
    p, hd = f"layers.{i}", cfg.head_dim
    ln = g.node("SimplifiedLayerNormalization", [h, g.norm_weight(f"{p}.ln1", cfg.hidden)], [f"{p}.ln1.out"],
                axis=-1, epsilon=1e-5)
    q = g.linear(ln, f"{p}.q_proj", cfg.hidden, cfg.heads * hd)
    k = g.linear(ln, f"{p}.k_proj", cfg.hidden, cfg.kv_heads * hd)
    v = g.linear(ln, f"{p}.v_proj", cfg.hidden, cfg.kv_heads * hd)
    total, seqlens = lengths
    attn = g.node("GroupQueryAttention",
                  [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total,
                   "cos_cache", "sin_cache"],
                  [f"{p}.attn.out", f"present.{i}.key", f"present.{i}.value"], domain=_MS,
                  num_heads=cfg.heads, kv_num_heads=cfg.kv_heads, do_rotary=1)
    o = g.linear(attn, f"{p}.o_proj", cfg.heads * hd, cfg.hidden)
    ln2 = g.node("SkipSimplifiedLayerNormalization", [o, h, g.norm_weight(f"{p}.ln2", cfg.hidden)],
                 [f"{p}.ln2.out", "", "", f"{p}.residual"], domain=_MS, epsilon=1e-5)
    gate = g.linear(ln2, f"{p}.gate_proj", cfg.hidden, cfg.intermediate)
    up = g.linear(ln2, f"{p}.up_proj", cfg.hidden, cfg.intermediate)
    g.node("Sigmoid", [gate], [f"{p}.gate.sig"])
    g.node("Mul", [gate, f"{p}.gate.sig"], [f"{p}.silu"])
    g.node("Mul", [f"{p}.silu", up], [f"{p}.swiglu"])
    down = g.linear(f"{p}.swiglu", f"{p}.down_proj", cfg.intermediate, cfg.hidden)
    return g.node("Add", [down, f"{p}.residual"], [f"{p}.out"])


def build_decoder(cfg: DecoderConfig = DecoderConfig()) -> onnx.ModelProto:
    """The decoder of the module doc at ``cfg``'s sizes (IR 10, opsets ai.onnx 17 and
    com.microsoft 1)."""
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads or cfg.head_dim % 2:
        raise ValueError("hidden must split into heads of an even head_dim, heads into kv_heads groups")
    if cfg.hidden % BLOCK or cfg.intermediate % BLOCK or (cfg.kv_heads * cfg.head_dim) % BLOCK:
        raise ValueError(f"hidden, intermediate and kv_heads * head_dim must be multiples of {BLOCK}")
    g = _Graph(np.random.default_rng(cfg.seed))
    g.init("embed_tokens", (g.rng.standard_normal((cfg.vocab, cfg.hidden)) * 0.5).astype(np.float32))
    freqs = 1.0 / (10000.0 ** (np.arange(0, cfg.head_dim, 2) / cfg.head_dim))
    angles = np.outer(np.arange(cfg.max_seq), freqs)
    g.init("cos_cache", np.cos(angles).astype(np.float32))
    g.init("sin_cache", np.sin(angles).astype(np.float32))
    lengths = _lengths(g)
    h = g.node("Gather", ["embed_tokens", "input_ids"], ["embeddings"], axis=0)
    for i in range(cfg.layers):
        h = _layer(g, cfg, i, h, lengths)
    ln = g.node("SimplifiedLayerNormalization", [h, g.norm_weight("norm", cfg.hidden)], ["norm.out"],
                axis=-1, epsilon=1e-5)
    g.linear(ln, "lm_head", cfg.hidden, cfg.vocab)
    g.nodes.append(helper.make_node("Identity", ["lm_head.out"], ["logits"], name="logits"))
    cache = ["batch", cfg.kv_heads, "past_seq", cfg.head_dim]
    present = ["batch", cfg.kv_heads, None, cfg.head_dim]  # max(past_seq, past_seq + seq)
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", cfg.vocab])]
    for i in range(cfg.layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", TensorProto.FLOAT, cache))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kv}", TensorProto.FLOAT, present))
    graph = helper.make_graph(g.nodes, "decoder", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)],
                              producer_name="onnxmem tools/build_decoder.py")
    model.ir_version = 10
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output", type=Path)
    defaults = DecoderConfig()
    for name in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "max_seq", "seed"):
        ap.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=getattr(defaults, name))
    args = ap.parse_args(argv)
    cfg = DecoderConfig(**{k: v for k, v in vars(args).items() if k != "output"})
    try:
        model = build_decoder(cfg)
    except ValueError as e:
        ap.error(str(e))
    if args.output.exists():
        ap.error(f"{args.output} exists; give a new path")
    onnx.save(model, str(args.output))
    print(f"wrote {args.output}: {cfg.layers} layers, hidden {cfg.hidden}, {len(model.graph.node)} nodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
