"""Forward + backward (training-step) graphs written in plain ONNX ops.

A small reverse-mode tape: each forward helper of :class:`Tape` writes its
nodes and records how to pass a gradient back; :meth:`Tape.model` seeds the
loss ``0.5 * sum(y * y)`` (so ``dy = y``), runs the records backwards (the
gradients a value receives are summed) and returns a model whose outputs are
the loss and the gradient of every weight. The backward pass reads forward
values (ReLU outputs, matmul and conv inputs, softmax outputs), which is what
makes training graphs hold memory and what recomputation trades against.

The rules: MatMul (``dA = dY B^T``, ``dB = A^T dY``), Relu (``dY * (Y > 0)``),
Add, Softmax on the last axis (``Y * (dY - sum(dY * Y))``), Mul by a
constant, Conv with stride 1 and "same" padding (input gradient by
ConvTranspose with the same weight and groups; weight gradient by a Conv of
the transposed input with the transposed output gradient, depthwise by a
grouped Conv over batch x channels), global average pooling.

Generators (``onnxmem generate``): ``train-mlp``, ``train-resnet`` (bottleneck
blocks: 1x1, 3x3, 1x1 convolutions and a residual), ``train-mobilenet``
(inverted residuals: 1x1 expand, 3x3 depthwise, 1x1 project) and
``train-encoder`` (single-head self-attention and a ReLU MLP, with residuals;
no layer norm). Tests check the gradients against finite differences.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxmem.model.generate import _Builder

__all__ = ["TRAINING", "Tape", "train_encoder", "train_mlp", "train_mobilenet", "train_resnet"]


class Tape:
    """Forward ops with their backward rules (module doc)."""

    def __init__(self, name: str, seed: int) -> None:
        self.b = _Builder(name, seed)
        self.back: list[Callable[[], None]] = []
        self.grads: dict[str, list[str]] = {}
        self.weights: list[str] = []

    # -- gradient bookkeeping
    def _add_grad(self, name: str, g: str) -> None:
        self.grads.setdefault(name, []).append(g)

    def grad(self, name: str) -> str:
        gs = self.grads.get(name, [])
        if len(gs) == 1:
            return gs[0]
        total = self.b.op("Sum", gs)
        self.grads[name] = [total]
        return total

    def weight(self, shape: tuple[int, ...]) -> str:
        w = self.b.weight(shape)
        self.weights.append(w)
        return w

    def _t(self, x: str, perm: list[int]) -> str:
        return self.b.op("Transpose", [x], perm=perm)

    # -- forward ops
    def matmul(self, a: str, w: str) -> str:
        """``a [M, K] @ w [K, N]``."""
        y = self.b.op("MatMul", [a, w])

        def back() -> None:
            dy = self.grad(y)
            self._add_grad(a, self.b.op("MatMul", [dy, self._t(w, [1, 0])]))
            self._add_grad(w, self.b.op("MatMul", [self._t(a, [1, 0]), dy]))
        self.back.append(back)
        return y

    def matmul_nt(self, a: str, c: str) -> str:
        """``a [M, K] @ c^T`` for ``c [N, K]`` (both activations)."""
        y = self.b.op("MatMul", [a, self._t(c, [1, 0])])

        def back() -> None:
            dy = self.grad(y)
            self._add_grad(a, self.b.op("MatMul", [dy, c]))
            self._add_grad(c, self.b.op("MatMul", [self._t(dy, [1, 0]), a]))
        self.back.append(back)
        return y

    def relu(self, x: str) -> str:
        y = self.b.op("Relu", [x])

        def back() -> None:
            dy = self.grad(y)
            zero = self.b.const(np.zeros((), np.float32))
            mask = self.b.op("Cast", [self.b.op("Greater", [y, zero])], to=TensorProto.FLOAT)
            self._add_grad(x, self.b.op("Mul", [dy, mask]))
        self.back.append(back)
        return y

    def add(self, x: str, z: str) -> str:
        y = self.b.op("Add", [x, z])

        def back() -> None:
            dy = self.grad(y)
            self._add_grad(x, dy)
            self._add_grad(z, dy)
        self.back.append(back)
        return y

    def scale(self, x: str, factor: float) -> str:
        c = self.b.const(np.array(factor, np.float32))
        y = self.b.op("Mul", [x, c])

        def back() -> None:
            self._add_grad(x, self.b.op("Mul", [self.grad(y), c]))
        self.back.append(back)
        return y

    def softmax(self, x: str) -> str:
        y = self.b.op("Softmax", [x], axis=-1)

        def back() -> None:
            dy = self.grad(y)
            axes = self.b.const(np.array([-1], np.int64))
            s = self.b.op("ReduceSum", [self.b.op("Mul", [dy, y]), axes], keepdims=1)
            self._add_grad(x, self.b.op("Mul", [y, self.b.op("Sub", [dy, s])]))
        self.back.append(back)
        return y

    def conv(self, x: str, c_in: int, c_out: int, k: int, *, batch: int, group: int = 1) -> str:
        """Stride 1, "same" padding; ``group`` 1 or ``c_in`` (depthwise)."""
        w = self.weight((c_out, c_in // group, k, k))
        pads = [k // 2] * 4
        y = self.b.op("Conv", [x, w], kernel_shape=[k, k], pads=pads, group=group)

        def back() -> None:
            dy = self.grad(y)
            self._add_grad(x, self.b.op("ConvTranspose", [dy, w], kernel_shape=[k, k], pads=pads, group=group))
            xt, dyt = self._t(x, [1, 0, 2, 3]), self._t(dy, [1, 0, 2, 3])
            if group == 1:  # [C_in, N, H, W] (*) [C_out, N, H, W] -> [C_in, C_out, k, k]
                dw = self._t(self.b.op("Conv", [xt, dyt], pads=pads), [1, 0, 2, 3])
            else:  # depthwise: one group per (channel, sample), summed over the samples
                hw = self.b.const(np.array([1, c_in * batch, 0, 0], np.int64))
                xr = self.b.op("Reshape", [xt, hw])
                kr = self.b.op("Reshape", [dyt, self.b.const(np.array([c_in * batch, 1, 0, 0], np.int64))])
                per = self.b.op("Conv", [xr, kr], pads=pads, group=c_in * batch)
                per = self.b.op("Reshape", [per, self.b.const(np.array([c_in, batch, k, k], np.int64))])
                dw = self.b.op("ReduceSum", [per, self.b.const(np.array([1], np.int64))], keepdims=1)
            self._add_grad(w, dw)
        self.back.append(back)
        return y

    def global_pool(self, x: str, shape: tuple[int, int, int, int]) -> str:
        """``[N, C, H, W]`` -> ``[N, C]`` (mean)."""
        n, c, h, w = shape
        y = self.b.op("ReduceMean", [x], axes=[2, 3], keepdims=0)

        def back() -> None:
            dy = self.grad(y)
            r = self.b.op("Reshape", [dy, self.b.const(np.array([n, c, 1, 1], np.int64))])
            r = self.b.op("Mul", [r, self.b.const(np.array(1.0 / (h * w), np.float32))])
            self._add_grad(x, self.b.op("Expand", [r, self.b.const(np.array(shape, np.int64))]))
        self.back.append(back)
        return y

    def model(self, x_name: str, x_shape: tuple[int, ...], y: str) -> onnx.ModelProto:
        """Seed ``dy = y``, run the backward records, and return the training-step model."""
        b = self.b
        loss = b.op("Mul", [b.op("ReduceSum", [b.op("Mul", [y, y])], keepdims=0),
                            b.const(np.array(0.5, np.float32))])
        self.grads[y] = [y]
        for rule in reversed(self.back):
            rule()
        outs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
        b.nodes.append(helper.make_node("Identity", [loss], ["loss"], name="loss_out"))
        for i, w in enumerate(self.weights):
            name = f"grad_{i}_{w}"
            b.nodes.append(helper.make_node("Identity", [self.grad(w)], [name], name=f"grad_out_{i}"))
            shape = next(list(t.dims) for t in b.inits if t.name == w)
            outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        x = helper.make_tensor_value_info(x_name, TensorProto.FLOAT, list(x_shape))
        return b.model([x], outs)


def train_mlp(layers: int = 8, seed: int = 0, *, batch: int = 64, width: int = 256) -> onnx.ModelProto:
    """A ReLU MLP of ``layers`` layers (``[batch, width]``)."""
    t = Tape("train_mlp", seed)
    h = "x"
    for _ in range(layers):
        h = t.relu(t.matmul(h, t.weight((width, width))))
    return t.model("x", (batch, width), h)


def train_resnet(blocks: int = 4, seed: int = 0, *, batch: int = 2, channels: int = 64, spatial: int = 16) -> onnx.ModelProto:
    """ResNet-50-style: a stem conv, then ``blocks`` bottlenecks (1x1 down to C/4, 3x3, 1x1 up, residual)."""
    t = Tape("train_resnet", seed)
    h = t.relu(t.conv("x", 3, channels, 3, batch=batch))
    mid = max(channels // 4, 1)
    for _ in range(blocks):
        f = t.relu(t.conv(h, channels, mid, 1, batch=batch))
        f = t.relu(t.conv(f, mid, mid, 3, batch=batch))
        f = t.conv(f, mid, channels, 1, batch=batch)
        h = t.relu(t.add(h, f))
    p = t.global_pool(h, (batch, channels, spatial, spatial))
    y = t.matmul(p, t.weight((channels, 10)))
    return t.model("x", (batch, 3, spatial, spatial), y)


def train_mobilenet(blocks: int = 4, seed: int = 0, *, batch: int = 2, channels: int = 16, spatial: int = 16,
                    expand: int = 6) -> onnx.ModelProto:
    """MobileNetV2-style: a stem conv, then ``blocks`` inverted residuals (1x1 expand by
    ``expand``, 3x3 depthwise, 1x1 project, residual)."""
    t = Tape("train_mobilenet", seed)
    h = t.relu(t.conv("x", 3, channels, 3, batch=batch))
    wide = channels * expand
    for _ in range(blocks):
        f = t.relu(t.conv(h, channels, wide, 1, batch=batch))
        f = t.relu(t.conv(f, wide, wide, 3, batch=batch, group=wide))
        f = t.conv(f, wide, channels, 1, batch=batch)
        h = t.add(h, f)
    p = t.global_pool(h, (batch, channels, spatial, spatial))
    y = t.matmul(p, t.weight((channels, 10)))
    return t.model("x", (batch, 3, spatial, spatial), y)


def train_encoder(layers: int = 2, seed: int = 0, *, seq: int = 128, dim: int = 64) -> onnx.ModelProto:
    """BERT-style: ``layers`` blocks of single-head self-attention and a 4x ReLU MLP, with residuals."""
    t = Tape("train_encoder", seed)
    h = "x"
    for _ in range(layers):
        q = t.matmul(h, t.weight((dim, dim)))
        k = t.matmul(h, t.weight((dim, dim)))
        v = t.matmul(h, t.weight((dim, dim)))
        a = t.softmax(t.scale(t.matmul_nt(q, k), 1.0 / float(np.sqrt(dim))))
        ctx = t.matmul(a, v)
        h = t.add(h, t.matmul(ctx, t.weight((dim, dim))))
        f = t.relu(t.matmul(h, t.weight((dim, 4 * dim))))
        h = t.add(h, t.matmul(f, t.weight((4 * dim, dim))))
    return t.model("x", (seq, dim), h)


#: name -> (builder of ``size`` and ``seed``, summary, what ``--size`` counts, the largest ``--size``
#: ``onnxmem generate`` takes: 1,000 gives up to 263 MB of weights (train-mlp) or 1,000 blocks)
TRAINING: dict[str, tuple[Callable[[int, int], onnx.ModelProto], str, str, int]] = {
    "train-mlp": (lambda size, seed: train_mlp(size, seed),
                  "a training step (forward + backward, plain ops) of a ReLU MLP", "layers", 1_000),
    "train-resnet": (lambda size, seed: train_resnet(size, seed),
                     "a training step of ResNet-50-style bottleneck blocks", "blocks", 1_000),
    "train-mobilenet": (lambda size, seed: train_mobilenet(size, seed),
                        "a training step of MobileNetV2-style inverted residuals", "blocks", 1_000),
    "train-encoder": (lambda size, seed: train_encoder(size, seed),
                      "a training step of BERT-style encoder blocks (single-head attention, ReLU MLP)", "layers",
                      1_000),
}
