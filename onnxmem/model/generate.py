"""Seeded generators of irregular networks as real, runnable ONNX models.

Every function returns an ``onnx.ModelProto`` (opset 17, IR version 10, so
that onnxruntime reads it) built only from standard ops (Conv, Relu, Sum,
Add, Concat, MaxPool, AveragePool, MatMul, Softmax, LayerNormalization, ...),
with small random weights drawn from the seed. The same arguments give the
same bytes. Nodes are written in construction order, as an exporter would.

* :func:`randwire`: a RandWire stage (Xie et al. 2019): a random undirected
  graph (Watts-Strogatz ``ws``, Erdos-Renyi ``er`` or Barabasi-Albert ``ba``)
  oriented from lower to higher node index; each node sums its inputs, then
  runs Relu and a 3x3 Conv; nodes without inputs read the stem, nodes without
  outputs are summed into the result.
* :func:`nasnet`: stacked NASNet/DARTS-like cells: each cell takes the two
  previous cells' outputs, builds ``steps`` nodes that each add two ops
  (separable conv, 3x3 conv, max or average pooling, identity) applied to
  earlier states, and concatenates them.
* :func:`transformer`: a deep stack of pre-norm transformer blocks (multi-head
  attention and a ReLU MLP), for long, mostly linear graphs.
* :func:`attention_encoder`: an audio-encoder layer as PyTorch's dynamo
  exporter writes it (Whisper-base sizes: 384 channels, 6 heads): scores
  ``MatMul(q, k^T)`` (``q`` scaled first, or the scores divided after),
  masked (``Add`` of a ``[1, 1, 1, tokens]`` key mask input), ``Softmax``,
  ``MatMul`` with ``v``; at 1500 tokens the scores take 51.5 MiB.

Example::

    >>> m = randwire(32, "ws", seed=0)
    >>> onnx.checker.check_model(m)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxmem.core.choices import RANDWIRE_KINDS
from onnxmem.core.errors import OnnxmemError

__all__ = [
    "GENERATORS",
    "RANDWIRE_KINDS",
    "GeneratorInfo",
    "Wiring",
    "attention_encoder",
    "nasnet",
    "random_dag",
    "randwire",
    "transformer",
    "wiring",
]

OPSET = 17
IR_VERSION = 10


class _Builder:
    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def weight(self, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        arr = (self.rng.standard_normal(shape) * s).astype(np.float32)
        name = self.fresh("w")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(self, arr: np.ndarray) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(
            helper.make_node(op_type, inputs, outs, name=self.fresh(op_type), **attrs)  # type: ignore[arg-type]
        )
        return outs[0]

    def conv(self, x: str, c_in: int, c_out: int, k: int, group: int = 1) -> str:
        w = self.weight((c_out, c_in // group, k, k))
        return self.op("Conv", [x, w], kernel_shape=[k, k], pads=[k // 2] * 4, group=group)

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxmem.model.generate")
        m.ir_version = IR_VERSION
        return m


def random_dag(n: int, kind: str = "ws", seed: int = 0, *, k: int = 4, p: float | None = None, m: int = 5) -> list[tuple[int, int]]:
    """Edges ``(i, j)``, ``i < j``, of a random graph on ``n`` nodes oriented by index.

    ``ws``: ring lattice of ``k`` neighbours, each edge rewired with
    probability ``p`` (0.75); ``er``: each pair with probability ``p`` (0.2);
    ``ba``: each new node attaches to ``m`` nodes by preferential attachment.
    """
    if kind not in RANDWIRE_KINDS:
        raise OnnxmemError(f"random graph kind '{kind}' is not one of {', '.join(RANDWIRE_KINDS)}")
    if n < 2:
        raise OnnxmemError(f"a random graph needs at least 2 nodes, got {n}")
    rng = np.random.default_rng(seed)
    edges: set[tuple[int, int]] = set()
    if kind == "ws":
        prob = 0.75 if p is None else p
        half = max(1, min(k // 2, (n - 1) // 2 or 1))
        for i in range(n):
            for d in range(1, half + 1):
                j = (i + d) % n
                if i != j:
                    edges.add((min(i, j), max(i, j)))
        rewired: set[tuple[int, int]] = set()
        for (a, b) in sorted(edges):
            if rng.random() < prob:
                for _ in range(10):
                    c = int(rng.integers(n))
                    e = (min(a, c), max(a, c))
                    if c != a and e not in edges and e not in rewired:
                        rewired.add(e)
                        break
                else:
                    rewired.add((a, b))
            else:
                rewired.add((a, b))
        edges = rewired
    elif kind == "er":
        prob = 0.2 if p is None else p
        for i in range(n):
            for j in range(i + 1, n):
                if rng.random() < prob:
                    edges.add((i, j))
    else:
        mm = max(1, min(m, n - 1))
        targets = list(range(mm))
        repeated: list[int] = []
        for new in range(mm, n):
            for t in set(targets):
                edges.add((min(t, new), max(t, new)))
            repeated.extend(targets)
            repeated.extend([new] * mm)
            chosen: set[int] = set()
            while len(chosen) < mm:
                chosen.add(int(repeated[int(rng.integers(len(repeated)))]))
            targets = list(chosen)
    return sorted(edges)


@dataclass(frozen=True, slots=True)
class Wiring:
    """A random DAG as a RandWire stage reads it: each node's predecessors (ascending) and
    the nodes without successors. Nodes without predecessors read the stage input; the
    stage output combines the sinks."""

    preds: tuple[tuple[int, ...], ...]
    sinks: tuple[int, ...]


def wiring(n: int, edges: list[tuple[int, int]]) -> Wiring:
    """The stage wiring of ``n`` nodes joined by ``edges`` (``(i, j)``, ``i < j``).

    >>> wiring(3, [(0, 2), (1, 2)])
    Wiring(preds=((), (), (0, 1)), sinks=(2,))
    """
    preds: list[list[int]] = [[] for _ in range(n)]
    has_succ = [False] * n
    for i, j in sorted(edges):
        preds[j].append(i)
        has_succ[i] = True
    return Wiring(tuple(tuple(p) for p in preds), tuple(v for v in range(n) if not has_succ[v]))


def randwire(
    n: int,
    kind: str = "ws",
    seed: int = 0,
    *,
    channels: int = 4,
    spatial: int = 8,
    k: int = 4,
    p: float | None = None,
    m: int = 5,
) -> onnx.ModelProto:
    """A RandWire stage of ``n`` random-graph nodes (about 3 ONNX nodes each)."""
    wired = wiring(n, random_dag(n, kind, seed, k=k, p=p, m=m))
    b = _Builder(f"randwire_{kind}_{n}_{seed}", seed + 1)
    c = channels
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, spatial, spatial])
    stem = b.conv("input", c, c, 3)
    outs: list[str] = []
    for v in range(n):
        srcs = [outs[u] for u in wired.preds[v]] or [stem]
        h = srcs[0] if len(srcs) == 1 else b.op("Sum", srcs)
        h = b.op("Relu", [h])
        outs.append(b.conv(h, c, c, 3))
    sinks = [outs[v] for v in wired.sinks]
    y = sinks[0] if len(sinks) == 1 else b.op("Sum", sinks)
    b.nodes.append(helper.make_node("GlobalAveragePool", [y], ["output"], name="head"))
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, c, 1, 1])
    return b.model([x], [out])


_NAS_OPS = ("sep_conv", "conv", "max_pool", "avg_pool", "identity")


def nasnet(cells: int = 3, seed: int = 0, *, steps: int = 4, channels: int = 4, spatial: int = 8) -> onnx.ModelProto:
    """``cells`` stacked NASNet/DARTS-like cells with a random genotype per cell."""
    b = _Builder(f"nasnet_{cells}x{steps}_{seed}", seed)
    c = channels
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, spatial, spatial])
    s0 = s1 = b.conv("input", c, c, 3)
    c0 = c1 = c

    def apply(kind: str, h: str) -> str:
        if kind == "sep_conv":
            h = b.op("Relu", [h])
            h = b.conv(h, c, c, 3, group=c)
            return b.conv(h, c, c, 1)
        if kind == "conv":
            return b.conv(b.op("Relu", [h]), c, c, 3)
        if kind == "max_pool":
            return b.op("MaxPool", [h], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        if kind == "avg_pool":
            return b.op("AveragePool", [h], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)
        return h

    for _ in range(cells):
        p0 = b.conv(b.op("Relu", [s0]), c0, c, 1)
        p1 = b.conv(b.op("Relu", [s1]), c1, c, 1)
        states = [p0, p1]
        for _step in range(steps):
            picks = []
            for _j in range(2):
                src = states[int(b.rng.integers(len(states)))]
                kind = _NAS_OPS[int(b.rng.integers(len(_NAS_OPS)))]
                picks.append(apply(kind, src))
            states.append(b.op("Add", picks))
        out = b.op("Concat", states[2:], axis=1)
        s0, s1, c0, c1 = s1, out, c1, c * steps
    b.nodes.append(helper.make_node("GlobalAveragePool", [s1], ["output"], name="head"))
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, c1, 1, 1])
    return b.model([x], [y])


def _attend_and_mlp(b: _Builder, h: str, scores: str, v: str, merge_shape: str, dim: int,
                    norm: tuple[str, str]) -> str:
    """The rest of a pre-norm block after the attention scores: Softmax, the values'
    MatMul, heads merged, the output projection, a residual Add, then LayerNormalization
    and a ReLU MLP (``4 * dim``) with its residual Add; returns the block's output."""
    a = b.op("Softmax", [scores], axis=-1)
    o = b.op("MatMul", [a, v])
    o = b.op("Transpose", [o], perm=[0, 2, 1, 3])
    o = b.op("Reshape", [o, merge_shape])
    o = b.op("MatMul", [o, b.weight((dim, dim))])
    h = b.op("Add", [h, o])
    n2 = b.op("LayerNormalization", [h, *norm], axis=-1)
    f = b.op("MatMul", [n2, b.weight((dim, 4 * dim))])
    f = b.op("Add", [f, b.weight((4 * dim,), 0.01)])
    f = b.op("Relu", [f])
    f = b.op("MatMul", [f, b.weight((4 * dim, dim))])
    return b.op("Add", [h, f])


def transformer(layers: int = 4, seed: int = 0, *, seq: int = 8, dim: int = 16, heads: int = 2) -> onnx.ModelProto:
    """``layers`` pre-norm transformer blocks (25 nodes each) on a ``[1, seq, dim]`` input."""
    if dim % heads:
        raise OnnxmemError(f"dim {dim} is not a multiple of heads {heads}")
    b = _Builder(f"transformer_{layers}_{seed}", seed)
    hd = dim // heads
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, dim])
    split_shape = b.const(np.array([1, seq, heads, hd], dtype=np.int64))
    merge_shape = b.const(np.array([1, seq, dim], dtype=np.int64))
    scale = b.const(np.array(1.0 / np.sqrt(hd), dtype=np.float32))
    ones = b.const(np.ones(dim, dtype=np.float32))
    zeros = b.const(np.zeros(dim, dtype=np.float32))
    h = "input"
    for _ in range(layers):
        n1 = b.op("LayerNormalization", [h, ones, zeros], axis=-1)
        qkv = []
        for _j in range(3):
            t = b.op("MatMul", [n1, b.weight((dim, dim))])
            t = b.op("Reshape", [t, split_shape])
            qkv.append(b.op("Transpose", [t], perm=[0, 2, 1, 3]))
        q, kk, v = qkv
        kt = b.op("Transpose", [kk], perm=[0, 1, 3, 2])
        s = b.op("MatMul", [q, kt])
        s = b.op("Mul", [s, scale])
        h = _attend_and_mlp(b, h, s, v, merge_shape, dim, (ones, zeros))
    b.nodes.append(helper.make_node("Identity", [h], ["output"], name="head"))
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, dim])
    return b.model([x], [y])


#: where :func:`attention_encoder` scales the attention scores
SCALINGS = ("query", "scores")


def attention_encoder(tokens: int = 1500, seed: int = 0, *, dim: int = 384, heads: int = 6,
                      layers: int = 1, scale_at: str = "query", mask: bool = True) -> onnx.ModelProto:
    """``layers`` pre-norm encoder layers on ``x [1, tokens, dim]`` with a key mask ``mask [1, 1, 1, tokens]``.

    Attention: ``q, k, v`` projections (with biases) split into ``heads``
    heads; ``scores = MatMul(q, Transpose(k))`` (``[1, heads, tokens,
    tokens]``), scaled by ``1 / sqrt(dim / heads)``, ``Add`` of the mask,
    ``Softmax`` on the last axis, ``MatMul`` with ``v``; then the output
    projection, a residual ``Add``, and a ReLU MLP (``4 * dim``).
    ``scale_at``: ``query`` multiplies ``q`` before the scores' MatMul (as
    the dynamo export of ``scaled_dot_product_attention`` does), ``scores``
    divides the scores after it. ``mask=False``: no mask input, no ``Add``.
    """
    if dim % heads:
        raise OnnxmemError(f"dim {dim} is not a multiple of heads {heads}")
    if scale_at not in SCALINGS:
        raise OnnxmemError(f"scale_at {scale_at!r} is not one of {', '.join(SCALINGS)}")
    b = _Builder(f"attention_encoder_{tokens}_{seed}", seed)
    hd = dim // heads
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, dim])
    inputs = [x] + ([helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 1, tokens])] if mask else [])
    split_shape = b.const(np.array([1, tokens, heads, hd], dtype=np.int64))
    merge_shape = b.const(np.array([1, tokens, dim], dtype=np.int64))
    root = b.const(np.array(np.sqrt(hd), dtype=np.float32))
    inverse = b.const(np.array(1.0 / np.sqrt(hd), dtype=np.float32))
    ones = b.const(np.ones(dim, dtype=np.float32))
    zeros = b.const(np.zeros(dim, dtype=np.float32))
    h = "x"
    for _ in range(layers):
        n1 = b.op("LayerNormalization", [h, ones, zeros], axis=-1)
        qkv = []
        for _j in range(3):
            t = b.op("MatMul", [n1, b.weight((dim, dim))])
            t = b.op("Add", [t, b.weight((dim,), 0.01)])
            t = b.op("Reshape", [t, split_shape])
            qkv.append(b.op("Transpose", [t], perm=[0, 2, 1, 3]))
        q, kk, v = qkv
        kt = b.op("Transpose", [kk], perm=[0, 1, 3, 2])
        if scale_at == "query":
            q = b.op("Mul", [q, inverse])
        s = b.op("MatMul", [q, kt])
        if scale_at == "scores":
            s = b.op("Div", [s, root])
        if mask:
            s = b.op("Add", [s, "mask"])
        h = _attend_and_mlp(b, h, s, v, merge_shape, dim, (ones, zeros))
    b.nodes.append(helper.make_node("Identity", [h], ["y"], name="head"))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, dim])
    return b.model(inputs, [y])


#: name -> generator, for the CLI
@dataclass(frozen=True, slots=True)
class GeneratorInfo:
    """A generator of ``onnxmem generate``: ``build(size, seed, graph)``.

    ``size`` says what ``--size`` counts; ``graph`` is one of :data:`RANDWIRE_KINDS`
    and only randwire reads it. ``most``: the largest ``--size`` the command takes, and
    ``most_by_graph`` a smaller one for a ``--graph`` whose work grows faster (randwire's
    Erdos-Renyi graph has ``n^2 / 10`` edges): each bound keeps the model at most a few hundred
    MB and 250,000 nodes, built in seconds; past it a size ran out of memory, or for hours.
    """

    name: str
    build: Callable[[int, int, str], onnx.ModelProto]
    summary: str
    size: str
    most: int
    most_by_graph: Mapping[str, int] = field(default_factory=dict)

    def largest(self, graph: str) -> int:
        """The largest ``--size`` taken with ``--graph graph``."""
        return self.most_by_graph.get(graph, self.most)


GENERATORS: dict[str, GeneratorInfo] = {
    g.name: g
    for g in (
        GeneratorInfo("randwire", lambda size, seed, graph: randwire(size, graph, seed),
                      "a RandWire stage: a random graph (--graph ws|er|ba) of Sum, Relu, Conv nodes",
                      "graph nodes", 20_000, {"er": 3_000}),
        GeneratorInfo("nasnet", lambda size, seed, graph: nasnet(size, seed),
                      "stacked NASNet/DARTS-like cells with a random genotype per cell", "cells", 10_000),
        GeneratorInfo("transformer", lambda size, seed, graph: transformer(size, seed),
                      "a deep stack of pre-norm transformer blocks (attention and MLP)", "layers", 10_000),
        GeneratorInfo("attention", lambda size, seed, graph: attention_encoder(size, seed),
                      "an audio-encoder layer (384 channels, 6 heads; 1500 tokens: 51.5 MiB of scores)",
                      "tokens", 100_000),
    )
}
