"""onnxruntime's quantized and channels-last ops get their shapes by rule (onnxmem.shapes.contrib).

Each model is built with onnx.helper and run by a real onnxruntime CPU session with every value
a graph output; the planned dtype and shape of every value must be those the session returns.
These are the ops onnxruntime's layout transformer writes into QOperator models at
ORT_ENABLE_ALL (QLinearConv, QLinearAveragePool and QLinearGlobalAveragePool with
``channels_last``, NhwcMaxPool) and the rest of its QLinear family.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.planning.pipeline import plan_model
from tests.test_contrib_attention import _save, _t, _vi
from tests.test_contrib_shapes import _plans_as_onnxruntime_runs

ort = pytest.importorskip("onnxruntime")

_RNG = np.random.default_rng(1)
_MS = "com.microsoft"
F, I32, U8 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.UINT8
_Q = ["s", "z"]


def _qinits() -> list[onnx.TensorProto]:
    """The shared scale and uint8 zero point, a uint8 conv weight (8, 3, 3, 3) and its int32 bias."""
    return [_t("s", np.array(0.05, np.float32)), _t("z", np.array(128, np.uint8)),
            _t("w", _RNG.integers(0, 255, (8, 3, 3, 3)).astype(np.uint8)), _t("b", np.arange(8, dtype=np.int32)),
            _t("w2", _RNG.integers(0, 255, (8, 8, 1, 1)).astype(np.uint8))]


def _conv_pools(tmp_path: Path) -> Path:
    """QLinearConv NHWC (stride 2, pads 1) and NCHW, QLinearAveragePool NHWC (ceil_mode) and
    NCHW, NhwcMaxPool (pads, stride), QLinearGlobalAveragePool NHWC, on a 1x3x9x11 input."""
    n = helper.make_node
    return _save(tmp_path, "conv_pools", [
        n("QuantizeLinear", ["x", *_Q], ["xq"]),
        n("Transpose", ["xq"], ["xt"], perm=[0, 2, 3, 1]),
        n("QLinearConv", ["xt", *_Q, "w", *_Q, *_Q, "b"], ["c1"], channels_last=1, strides=[2, 2],
          pads=[1, 1, 1, 1], kernel_shape=[3, 3], domain=_MS),
        n("QLinearConv", ["xq", *_Q, "w", *_Q, *_Q], ["c2"], channels_last=0, kernel_shape=[3, 3], domain=_MS),
        n("QLinearConv", ["c1", *_Q, "w2", *_Q, *_Q], ["c3"], channels_last=1, domain=_MS),
        n("QLinearAveragePool", ["c3", *_Q, *_Q], ["ap"], channels_last=1, kernel_shape=[2, 2], strides=[2, 2],
          ceil_mode=1, domain=_MS),
        n("QLinearAveragePool", ["c2", *_Q, *_Q], ["ap2"], channels_last=0, kernel_shape=[3, 2], domain=_MS),
        n("NhwcMaxPool", ["c3"], ["mp"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1], domain=_MS),
        n("QLinearGlobalAveragePool", ["mp", *_Q, *_Q], ["gp"], channels_last=1, domain=_MS),
        n("DequantizeLinear", ["gp", *_Q], ["y"]),
    ], [_vi("x", F, [1, 3, 9, 11])], _qinits())


def test_channels_last_conv_and_pools_get_the_shapes_onnxruntime_runs(tmp_path):
    t = _plans_as_onnxruntime_runs(_conv_pools(tmp_path)).view.tensors
    # NHWC in, NHWC out: 9x11 at stride 2, pads 1 is 5x6, with the weight's 8 channels last
    assert t["c1"].shape == (1, 5, 6, 8) and t["c1"].dtype == "uint8"
    assert t["c2"].shape == (1, 8, 7, 9) and t["ap"].shape == (1, 3, 3, 8) and t["gp"].shape == (1, 1, 1, 8)


def test_where_gets_the_shape_onnxruntime_runs(tmp_path):
    """QLinearWhere broadcasting a (4, 1, 5) condition against (3, 1) and (1, 5) operands."""
    n = helper.make_node
    path = _save(tmp_path, "where", [
        n("QuantizeLinear", ["a", *_Q], ["aq"]), n("QuantizeLinear", ["b", *_Q], ["bq"]),
        n("Cast", ["m"], ["cond"], to=TensorProto.BOOL),
        n("QLinearWhere", ["cond", "aq", *_Q, "bq", *_Q, *_Q], ["wh"], domain=_MS),
        n("DequantizeLinear", ["wh", *_Q], ["y"]),
    ], [_vi("a", F, [3, 1]), _vi("b", F, [1, 5]), _vi("m", F, [4, 1, 5])], _qinits()[:2])
    t = _plans_as_onnxruntime_runs(path).view.tensors
    assert t["wh"].shape == (4, 3, 5) and t["wh"].dtype == "uint8"


@pytest.mark.parametrize("axes,keepdims", [([1, -1], 1), ([0], 0), ([], 1), ([], 0), ([-2], 0)])
def test_reduce_mean_is_the_shape_onnxruntime_gives_reduce_mean(tmp_path, axes, keepdims):
    """onnxruntime's CPU build has no QLinearReduceMean kernel, and its schema's inference is
    ReduceMean's: the rule's shape is checked against a session running ReduceMean (opset 17,
    axes an attribute) on the dequantized values, with the same axes and keepdims."""
    n = helper.make_node
    kw = {"axes": axes} if axes else {}
    path = _save(tmp_path, "qreduce", [
        n("QuantizeLinear", ["x", *_Q], ["xq"]),
        n("QLinearReduceMean", ["xq", *_Q, *_Q], ["r"], keepdims=keepdims, domain=_MS, **kw),
        n("DequantizeLinear", ["r", *_Q], ["y"]),
    ], [_vi("x", F, [2, 3, 4, 5])], _qinits()[:2])
    twin = _save(tmp_path, "reduce", [
        n("QuantizeLinear", ["x", *_Q], ["xq"]), n("DequantizeLinear", ["xq", *_Q], ["xd"]),
        n("ReduceMean", ["xd"], ["y"], keepdims=keepdims, **kw),
    ], [_vi("x", F, [2, 3, 4, 5])], _qinits()[:2])
    x = _RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    want = ort.InferenceSession(str(twin), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0].shape
    t = plan_model(path).view.tensors
    assert t["r"].shape == tuple(want) and t["r"].dtype == "uint8" and t["y"].shape == tuple(want)


def test_quantized_embed_layer_norm_gets_the_shapes_onnxruntime_runs(tmp_path):
    """QEmbedLayerNormalization: layernorm_out (batch, seq, hidden) in the scales' float,
    mask_index_out (batch,) int32."""
    n = helper.make_node
    u8 = [_t(f"{k}q", _RNG.integers(0, 255, shape).astype(np.uint8))
          for k, shape in {"word": (10, 16), "pos": (8, 16), "seg": (2, 16), "gamma": (16,), "beta": (16,)}.items()]
    scales = [_t(f"{k}s", np.array(0.02, np.float32)) for k in ("word", "pos", "seg", "gamma", "beta")]
    zps = [_t(f"{k}z", np.array(128, np.uint8)) for k in ("word", "pos", "seg", "gamma", "beta")]
    path = _save(tmp_path, "qembed", [
        n("QEmbedLayerNormalization", ["ids", "sid", "wordq", "posq", "segq", "gammaq", "betaq", "mask",
                                       "words", "poss", "segs", "gammas", "betas",
                                       "wordz", "posz", "segz", "gammaz", "betaz"], ["y", "mi"], domain=_MS),
        n("Relu", ["y"], ["out"]),
    ], [_vi("ids", I32, [2, 5]), _vi("sid", I32, [2, 5]), _vi("mask", I32, [2, 5])],
        [*u8, *scales, *zps])
    feeds = {"ids": _RNG.integers(0, 10, (2, 5)).astype(np.int32), "sid": np.zeros((2, 5), np.int32),
             "mask": np.ones((2, 5), np.int32)}
    t = _plans_as_onnxruntime_runs(path, feeds).view.tensors
    assert t["y"].shape == (2, 5, 16) and t["y"].dtype == "float32"
    assert t["mi"].shape == (2,) and t["mi"].dtype == "int32"


def test_a_hostile_channels_last_leaves_the_conv_unknown_with_one_line(tmp_path):
    """A string where QLinearConv's int ``channels_last`` belongs: no layout is guessed; the
    plan stops with one line naming the node, and writes nothing."""
    path = _conv_pools(tmp_path)
    m = onnx.load(str(path))
    conv = next(node for node in m.graph.node if node.op_type == "QLinearConv")
    conv.name = "conv\x1b[2J"
    attr = next(a for a in conv.attribute if a.name == "channels_last")
    conv.attribute.remove(attr)
    conv.attribute.append(helper.make_attribute("channels_last", "1"))
    onnx.save(m, str(path))
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(tmp_path / "p.json")])
    assert r.exit_code != 0 and "Traceback" not in r.output and "\x1b" not in r.output, r.output
    assert "com.microsoft:QLinearConv" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()
