"""Build the small models shipped in ``models/``, deterministically, with onnx.helper.

    python models/build_models.py            # (re)writes models/*.onnx
    python models/build_models.py --check    # fails if a shipped file differs

Each model is small enough to commit and to run in onnxruntime in
milliseconds, and each exercises one part of the planner:

* ``resnet_cnn.onnx``: a residual CNN (stem, identity and projection blocks);
* ``inception_block.onnx``: two inception-like blocks, four branches each;
* ``transformer_block.onnx``: one pre-norm transformer block with symbolic
  ``batch`` and ``seq`` dims (plan it with ``--dim batch=1 --dim seq=128``);
* ``control_flow.onnx``: an ``If`` whose branches capture an outer value, and
  a ``Loop`` whose body reads one;
* ``external_data.onnx`` (+ ``external_data.bin``): a small MLP whose weights
  live in an external-data file.

Weights are seeded random numbers. IR version 10 and opset 17, which
onnxruntime 1.31 reads (onnx 1.23 would otherwise write IR version 14).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
IR_VERSION = 10
OPSET = 17


class Builder:
    """Accumulates nodes and seeded random initializers for one graph."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, shape: tuple[int, ...], scale: float = 0.1) -> str:
        n = self.name("w")
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def const_i64(self, values: list[int]) -> str:
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), n))
        return n

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> str:
        w = self.weight((cout, cin, k, k), scale=float(np.sqrt(2.0 / (cin * k * k))))
        b = self.weight((cout,), scale=0.01)
        pad = k // 2
        (y,) = self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
        return self.op("Relu", [y])[0] if relu else y


def finish(b: Builder, name: str, inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    graph = helper.make_graph(b.nodes, name, inputs, outputs, b.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="onnxmem-models"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def resnet_cnn() -> onnx.ModelProto:
    b = Builder(1)
    x = "image"
    h = b.conv(x, 3, 16, 3)
    ch = 16
    for cout, stride in ((16, 1), (32, 2), (32, 1), (64, 2)):
        y = b.conv(h, ch, cout, 3, stride)
        y = b.conv(y, cout, cout, 3, relu=False)
        short = h if (stride == 1 and cout == ch) else b.conv(h, ch, cout, 1, stride, relu=False)
        (s,) = b.op("Add", [y, short])
        (h,) = b.op("Relu", [s])
        ch = cout
    (p,) = b.op("GlobalAveragePool", [h])
    (f,) = b.op("Flatten", [p], axis=1)
    w = b.weight((ch, 10))
    (logits,) = b.op("MatMul", [f, w])
    b.nodes.append(helper.make_node("Softmax", [logits], ["probs"], name="softmax", axis=1))
    return finish(
        b,
        "resnet_cnn",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
    )


def inception_block() -> onnx.ModelProto:
    b = Builder(2)
    x = "image"
    h = b.conv(x, 3, 32, 3)
    ch = 32
    for width in (16, 24):
        b1 = b.conv(h, ch, width, 1)
        b2 = b.conv(b.conv(h, ch, width // 2, 1), width // 2, width, 3)
        b3 = b.conv(b.conv(h, ch, width // 4, 1), width // 4, width, 5)
        (mp,) = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
        b4 = b.conv(mp, ch, width, 1)
        (h,) = b.op("Concat", [b1, b2, b3, b4], axis=1)
        ch = 4 * width
    (p,) = b.op("GlobalAveragePool", [h])
    b.nodes.append(helper.make_node("Flatten", [p], ["features"], name="flatten", axis=1))
    return finish(
        b,
        "inception_block",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 28, 28])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, ch])],
    )


def transformer_block(d_model: int = 64, heads: int = 4, d_ff: int = 256) -> onnx.ModelProto:
    b = Builder(3)
    x = "hidden"
    dh = d_model // heads

    def layer_norm(v: str) -> str:
        g = b.weight((d_model,), 1.0)
        beta = b.weight((d_model,), 0.0)
        return b.op("LayerNormalization", [v, g, beta], axis=-1)[0]

    h = layer_norm(x)
    split = b.const_i64([0, 0, heads, dh])
    qkv = []
    for _ in range(3):
        (proj,) = b.op("MatMul", [h, b.weight((d_model, d_model))])
        (r,) = b.op("Reshape", [proj, split])
        qkv.append(r)
    (q,) = b.op("Transpose", [qkv[0]], perm=[0, 2, 1, 3])
    (kt,) = b.op("Transpose", [qkv[1]], perm=[0, 2, 3, 1])
    (v,) = b.op("Transpose", [qkv[2]], perm=[0, 2, 1, 3])
    (scores,) = b.op("MatMul", [q, kt])
    scale = b.name("scale")
    b.inits.append(numpy_helper.from_array(np.array(1.0 / np.sqrt(dh), dtype=np.float32), scale))
    (scaled,) = b.op("Mul", [scores, scale])
    (attn,) = b.op("Softmax", [scaled], axis=-1)
    (ctx,) = b.op("MatMul", [attn, v])
    (ctx_t,) = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    (merged,) = b.op("Reshape", [ctx_t, b.const_i64([0, 0, d_model])])
    (out,) = b.op("MatMul", [merged, b.weight((d_model, d_model))])
    (res1,) = b.op("Add", [x, out])
    h2 = layer_norm(res1)
    (up,) = b.op("MatMul", [h2, b.weight((d_model, d_ff))])
    (act,) = b.op("Relu", [up])
    (down,) = b.op("MatMul", [act, b.weight((d_ff, d_model))])
    b.nodes.append(helper.make_node("Add", [res1, down], ["output"], name="residual_out"))
    return finish(
        b,
        "transformer_block",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", d_model])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq", d_model])],
    )


def control_flow() -> onnx.ModelProto:
    b = Builder(4)
    x = "image"
    feat = b.conv(x, 3, 8, 3)
    (mean,) = b.op("ReduceMean", [feat], keepdims=0)
    zero = b.name("zero")
    b.inits.append(numpy_helper.from_array(np.array(0.0, dtype=np.float32), zero))
    (cond,) = b.op("Greater", [mean, zero])
    shape = [1, 8, 16, 16]
    # both branches read `feat` from the outer scope
    then_g = helper.make_graph(
        [helper.make_node("Relu", [feat], ["then_out"], name="then_relu")],
        "then_branch",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, shape)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sigmoid", [feat], ["else_out"], name="else_sigmoid")],
        "else_branch",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, shape)],
    )
    (chosen,) = b.op("If", [cond], then_branch=then_g, else_branch=else_g)
    h = b.conv(chosen, 8, 8, 3)
    # a Loop of 3 iterations: state <- state * 0.5 + h (h read from the outer scope)
    trips = b.name("trips")
    b.inits.append(numpy_helper.from_array(np.array(3, dtype=np.int64), trips))
    half = "loop_half"
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["state_in", half], ["scaled"], name="body_mul"),
            helper.make_node("Add", ["scaled", h], ["state_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_in", TensorProto.FLOAT, shape),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_out", TensorProto.FLOAT, shape),
        ],
        [numpy_helper.from_array(np.array(0.5, dtype=np.float32), half)],
    )
    true_c = b.name("true")
    b.inits.append(numpy_helper.from_array(np.array(True), true_c))
    (looped,) = b.op("Loop", [trips, true_c, h], body=body)
    (p,) = b.op("GlobalAveragePool", [looped])
    b.nodes.append(helper.make_node("Flatten", [p], ["pooled"], name="flatten", axis=1))
    return finish(
        b,
        "control_flow",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 8])],
    )


def external_mlp() -> onnx.ModelProto:
    b = Builder(5)
    x = "features"
    h = x
    for din, dout in ((256, 512), (512, 512), (512, 128)):
        (y,) = b.op("Gemm", [h, b.weight((din, dout)), b.weight((dout,))])
        (h,) = b.op("Relu", [y])
    b.nodes.append(helper.make_node("Identity", [h], ["embedding"], name="out"))
    return finish(
        b,
        "external_mlp",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, 256])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [4, 128])],
    )


MODELS = {
    "resnet_cnn.onnx": resnet_cnn,
    "inception_block.onnx": inception_block,
    "transformer_block.onnx": transformer_block,
    "control_flow.onnx": control_flow,
}


def strided_cnn(width: int = 8) -> onnx.ModelProto:
    """A small detector-style backbone over an image of symbolic ``H`` x ``W``: a stride-2 stem,
    a 3x3 stride-2 max pool, three stride-2 stages (total stride 32), global pool and a classifier.

    Every size is a floor expression in ``H`` and ``W`` (``floor((H - 1)/2) + 1``, ...); not shipped,
    built by the range-plan tests and bench.
    """
    b = Builder(seed=7)
    x = b.conv("image", 3, width, 3, stride=2)
    (x,) = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage in range(3):
        cout = width * 2 ** (stage + 1)
        x = b.conv(b.conv(x, cin, cout, 3, stride=2), cout, cout, 3)
        cin = cout
    (x,) = b.op("GlobalAveragePool", [x])
    (x,) = b.op("Flatten", [x], axis=1)
    (y,) = b.op("Gemm", [x, b.weight((10, cin)), b.weight((10,), 0.01)], transB=1)
    b.nodes[-1].output[0] = "logits"
    return finish(b, "strided_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, "H", "W"])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])])


def skip_cnn(width: int = 8, levels: int = 3) -> onnx.ModelProto:
    """A U-Net-like model over an image of symbolic ``batch`` x ``H`` x ``W``: ``levels`` stride-2
    max pools down, nearest 2x ``Resize`` up, each level's skip concatenated on the channels.

    The skip sizes match only when ``H`` and ``W`` are multiples of ``2**levels``; not shipped,
    built by the range-plan tests and bench.
    """
    b = Builder(seed=11)
    x = b.conv("image", 3, width, 3)
    skips, cin = [], width
    for _ in range(levels):
        skips.append((x, cin))
        (x,) = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        x = b.conv(x, cin, cin * 2, 3)
        cin *= 2
    scales = b.name("scales")
    b.inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), scales))
    for skip, c in reversed(skips):
        (x,) = b.op("Resize", [x, "", scales], mode="nearest")
        (x,) = b.op("Concat", [skip, x], axis=1)
        x = b.conv(x, c + cin, c, 3)
        cin = c
    (y,) = b.op("Conv", [x, b.weight((2, cin, 1, 1)), b.weight((2,), 0.01)], kernel_shape=[1, 1])
    b.nodes[-1].output[0] = "mask"
    return finish(b, "skip_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, "H", "W"])],
                  [helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 2, "H", "W"])])


def serialize_external(model: onnx.ModelProto, data_name: str) -> tuple[bytes, bytes]:
    """The model bytes with every initializer moved to ``data_name``, and that file's bytes."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    blob = bytearray()
    for init in m.graph.initializer:
        raw = numpy_helper.to_array(init).tobytes()
        offset = len(blob)
        blob.extend(raw)
        blob.extend(b"\0" * (-len(blob) % 64))
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.data_location = TensorProto.EXTERNAL
        for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
            e = init.external_data.add()
            e.key, e.value = k, v
    return m.SerializeToString(), bytes(blob)


def build_all() -> dict[str, bytes]:
    files = {name: fn().SerializeToString() for name, fn in MODELS.items()}
    model_bytes, data = serialize_external(external_mlp(), "external_data.bin")
    files["external_data.onnx"] = model_bytes
    files["external_data.bin"] = data
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the shipped files")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: models/)")
    args = ap.parse_args(argv)
    files = build_all()
    stale = []
    for name, data in files.items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(name)
        else:
            path.write_bytes(data)
            print(f"wrote {path} ({len(data):,} bytes)")
    if stale:
        print(f"stale: {', '.join(stale)}; run python models/build_models.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
