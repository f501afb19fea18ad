"""onnxruntime's fused, NCHWc and quantized ops get their shapes by rule (onnxmem.shapes.contrib).

Every model here is written by onnxruntime itself: small ONNX graphs saved through a session
at ORT_ENABLE_EXTENDED and ORT_ENABLE_ALL (``optimized_model_filepath``), and quantized by
onnxruntime.quantization (static QDQ and QOperator, dynamic). Each must plan from its input
dims alone, give every value the shape onnxruntime reports when it runs the model with every
value a graph output, and verify in one arena on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import ShapeError
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import verify_plan

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

_RNG = np.random.default_rng(0)


def _init(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((_RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _scalar(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.float32), name)


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, inputs, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, [_vi("y", None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _conv_relu() -> onnx.ModelProto:
    """Conv+Relu twice; 20 channels, not a multiple of any NCHWc block."""
    n = helper.make_node
    return _model([n("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["r"]),
                   n("Conv", ["r", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["y"])],
                  [_vi("x", [1, 3, 8, 8])], [_init("w", 20, 3, 3, 3), _init("b", 20), _init("w2", 20, 20, 3, 3),
                                             _init("b2", 20)])


def _residual() -> onnx.ModelProto:
    """Conv -> Relu -> Conv + residual -> Relu -> MaxPool -> GlobalAveragePool on 24 input channels
    (onnxruntime reorders such an input into NCHWc blocks)."""
    n = helper.make_node
    return _model([n("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["r"]),
                   n("Conv", ["r", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n("Add", ["c2", "r"], ["s"]),
                   n("Relu", ["s"], ["r2"]), n("MaxPool", ["r2"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
                   n("GlobalAveragePool", ["mp"], ["y"])],
                  [_vi("x", [1, 24, 8, 8])], [_init("w", 24, 24, 3, 3), _init("b", 24), _init("w2", 24, 24, 3, 3),
                                              _init("b2", 24)])


def _gemm_relu() -> onnx.ModelProto:
    n = helper.make_node
    return _model([n("Gemm", ["x", "w", "b"], ["g"], transB=1), n("Relu", ["g"], ["y"])],
                  [_vi("x", [4, 16])], [_init("w", 32, 16), _init("b", 32)])


def _attention() -> onnx.ModelProto:
    """q = x Wq, k = x Wk, softmax(q k^T * s) x, then bias and exact Gelu (Erf form)."""
    n = helper.make_node
    return _model([n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["x", "wk"], ["k"]),
                   n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q", "kt"], ["qk"]),
                   n("Mul", ["qk", "sc"], ["qs"]), n("Softmax", ["qs"], ["p"], axis=-1),
                   n("MatMul", ["p", "x"], ["a"]), n("Add", ["a", "bias"], ["ab"]),
                   n("Div", ["ab", "sq2"], ["d"]), n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["e1"]),
                   n("Mul", ["ab", "e1"], ["m"]), n("Mul", ["m", "half"], ["y"])],
                  [_vi("x", [2, 6, 16])], [_init("wq", 16, 16), _init("wk", 16, 16), _init("bias", 16),
                                           _scalar("sc", 0.25), _scalar("sq2", 1.4142135), _scalar("one", 1.0),
                                           _scalar("half", 0.5)])


def _layer_norm_add() -> onnx.ModelProto:
    n = helper.make_node
    return _model([n("Add", ["x", "skip"], ["s"]), n("LayerNormalization", ["s", "g", "bt"], ["l"], axis=-1),
                   n("MatMul", ["l", "w"], ["mm"]), n("Add", ["mm", "b"], ["y"])],
                  [_vi("x", [2, 6, 16]), _vi("skip", [2, 6, 16])],
                  [_init("g", 16), _init("bt", 16), _init("w", 16, 16), _init("b", 16)])


BASES = {"conv": _conv_relu, "residual": _residual, "gemm": _gemm_relu, "attention": _attention,
         "layernorm": _layer_norm_add}


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {i.name for i in model.graph.initializer}
    return {i.name: _RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in inits}


def _optimized(src: Path, dst: Path, level) -> Path:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return dst


class _Reader(quantization.CalibrationDataReader):
    def __init__(self, model: onnx.ModelProto) -> None:
        self._left = [_feeds(model) for _ in range(2)]

    def get_next(self):
        return self._left.pop() if self._left else None


def _quantized(src: Path, dst: Path, kind: str) -> Path:
    if kind == "dynamic":
        quantization.quantize_dynamic(str(src), str(dst))
    else:
        fmt = quantization.QuantFormat.QDQ if kind == "qdq" else quantization.QuantFormat.QOperator
        quantization.quantize_static(str(src), str(dst), _Reader(onnx.load(str(src))), quant_format=fmt)
    m = onnx.load(str(dst))
    m.ir_version = min(m.ir_version, 10)
    onnx.save(m, str(dst))
    return dst


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """Every model onnxruntime writes from the bases, by name."""
    d = tmp_path_factory.mktemp("contrib")
    out: dict[str, Path] = {}
    levels = {"ext": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    for name, build in BASES.items():
        src = d / f"{name}.onnx"
        onnx.save(build(), str(src))
        for tag, level in levels.items():
            out[f"{name}-{tag}"] = _optimized(src, d / f"{name}-{tag}.onnx", level)
    for name in ("residual", "gemm", "attention"):
        for kind in ("qdq", "qop", "dynamic"):
            q = _quantized(d / f"{name}.onnx", d / f"{name}-{kind}.onnx", kind)
            out[f"{name}-{kind}"] = q
            out[f"{name}-{kind}-ext"] = _optimized(q, d / f"{name}-{kind}-ext.onnx", levels["ext"])
    return out


def _measured(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The dtype and shape of every node output when onnxruntime runs the model, each one a graph output."""
    m = onnx.load(str(path))
    have = {o.name for o in m.graph.output}
    names = [o for node in m.graph.node for o in node.output if o]
    m.graph.output.extend(onnx.ValueInfoProto(name=o) for o in names if o not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    return {n: (str(v.dtype), tuple(v.shape)) for n, v in zip(outs, sess.run(outs, feeds))}


NAMES = [f"{b}-{t}" for b in BASES for t in ("ext", "all")] + [
    f"{b}-{k}{e}" for b in ("residual", "gemm", "attention") for k in ("qdq", "qop", "dynamic") for e in ("", "-ext")]


def _plans_as_onnxruntime_runs(path: Path, feeds: dict[str, np.ndarray] | None = None):
    """Plan ``path`` with no flag, check every value's dtype and shape against onnxruntime's
    run, and verify the plan in one arena."""
    planned = plan_model(path)  # no flag: the inputs' dims are in the file
    measured = _measured(path, _feeds(onnx.load(str(path))) if feeds is None else feeds)
    tensors = planned.view.tensors
    assert set(measured) <= set(tensors)
    wrong = {n: ((tensors[n].dtype, tensors[n].shape), m) for n, m in measured.items()
             if (tensors[n].dtype, tensors[n].shape) != m}
    assert not wrong, wrong
    return planned


@pytest.mark.parametrize("name", NAMES)
def test_onnxruntime_written_model_plans_with_the_shapes_onnxruntime_runs(written, name):
    path = written[name]
    planned = _plans_as_onnxruntime_runs(path)
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view)
    assert report.ok, report.first


def test_the_written_models_hold_the_ops_the_rules_cover(written):
    """The set above exercises the rules of the fused, NCHWc and quantized ops it claims to."""
    ops = {(n.domain, n.op_type) for p in written.values() for n in onnx.load(str(p)).graph.node}
    ms, nchwc = "com.microsoft", "com.microsoft.nchwc"
    assert {(ms, "FusedConv"), (ms, "FusedGemm"), (ms, "FusedMatMul"), (ms, "BiasGelu"),
            (ms, "SkipLayerNormalization"), (nchwc, "Conv"), (nchwc, "ReorderInput"), (nchwc, "ReorderOutput"),
            (ms, "QLinearAdd"), (ms, "QLinearMul"), (ms, "QLinearGlobalAveragePool"), (ms, "QLinearSoftmax"),
            (ms, "QGemm"), (ms, "DynamicQuantizeMatMul"), (ms, "MatMulIntegerToFloat")} <= ops


def test_nchwc_model_plans_and_verifies_from_the_cli(written, tmp_path):
    path = written["residual-all"]
    plan = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(plan)])
    assert r.exit_code == 0, r.output
    tensors = {t["name"]: t for t in json.loads(plan.read_text())["tensors"]}
    # 24 channels padded to this machine's block (8: 24, 16: 32), 8x8 float32, as onnxruntime runs it
    model = onnx.load(str(path))
    reordered = next(n.output[0] for n in model.graph.node if n.op_type == "ReorderInput")
    _dtype, shape = _measured(path, _feeds(model))[reordered]
    assert shape[1] in (24, 32) and tensors[reordered]["size"] == int(np.prod(shape)) * 4
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(plan)])
    assert r.exit_code == 0 and "verified" in r.output, r.output


def test_an_op_without_a_rule_is_named_with_its_domain(tmp_path):
    n = helper.make_node
    g = helper.make_graph([n("NoSuchOp", ["x"], ["u"], name="odd\nnode", domain="com.example"), n("Relu", ["u"], ["y"])],
                          "g", [_vi("x", [2, 3])], [_vi("y", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    m.ir_version = 10
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(ShapeError, match=r"node 'odd\\nnode' \(com.example:NoSuchOp\) has no shape rule") as e:
        plan_model(path)
    assert "depend on data" not in str(e.value)
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(tmp_path / "p.json")])
    assert r.exit_code != 0 and "com.example:NoSuchOp" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "p.json").exists()


def _contrib_model(nodes, inputs, inits, domains=("com.microsoft",)) -> onnx.ModelProto:
    m = _model(nodes, inputs, inits)
    m.opset_import.extend(helper.make_opsetid(d, 1) for d in domains)
    return m


def _u8(name: str, value: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.uint8), name)


def _norms() -> onnx.ModelProto:
    """SkipLayerNormalization and SkipSimplifiedLayerNormalization with every optional output,
    SimplifiedLayerNormalization with its inv_std_var, QuickGelu and FastGelu."""
    n = helper.make_node
    ms = "com.microsoft"
    return _contrib_model(
        [n("SkipLayerNormalization", ["x", "skip", "g", "bt", "b"], ["sl", "mean", "inv", "sum"], domain=ms),
         n("SkipSimplifiedLayerNormalization", ["sl", "skip", "g"], ["ss", "", "inv2", "sum2"], domain=ms),
         n("SimplifiedLayerNormalization", ["ss", "g"], ["sn", "inv3"], axis=-1),
         n("QuickGelu", ["sn"], ["qg"], alpha=1.702, domain=ms),
         n("FastGelu", ["qg", "b"], ["y"], domain=ms)],
        [_vi("x", [2, 5, 16]), _vi("skip", [2, 5, 16])], [_init("g", 16), _init("bt", 16), _init("b", 16)])


def _quantized_ops() -> onnx.ModelProto:
    """QuantizeLinear, then QLinearSigmoid, QLinearLeakyRelu, QLinearConcat and
    QLinearAveragePool on uint8 NCHW values, dequantized at the end."""
    n = helper.make_node
    ms = "com.microsoft"
    q = ["s", "z"]
    return _contrib_model(
        [n("QuantizeLinear", ["x", *q], ["xq"]),
         n("QLinearSigmoid", ["xq", *q, *q], ["sg"], domain=ms),
         n("QLinearLeakyRelu", ["xq", *q, *q], ["lr"], alpha=0.1, domain=ms),
         n("QLinearConcat", [*q, "sg", *q, "lr", *q], ["cat"], axis=1, domain=ms),
         n("QLinearAveragePool", ["cat", *q, *q], ["ap"], kernel_shape=[2, 2], strides=[2, 2], domain=ms),
         n("DequantizeLinear", ["ap", *q], ["y"])],
        [_vi("x", [1, 3, 6, 6])], [_scalar("s", 0.05), _u8("z", 128)])


def _nchwc_ops() -> onnx.ModelProto:
    """ReorderInput, then the NCHWc pools and Upsample, then ReorderOutput (NHWC) on 12 channels."""
    n = helper.make_node
    nc = "com.microsoft.nchwc"
    return _contrib_model(
        [n("ReorderInput", ["x"], ["rx"], channels_last=0, domain=nc),
         n("MaxPool", ["rx"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], domain=nc),
         n("AveragePool", ["mp"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], domain=nc),
         n("Upsample", ["ap"], ["up"], scales=[1, 1, 2, 2], domain=nc),
         n("GlobalAveragePool", ["up"], ["gp"], domain=nc),
         n("ReorderOutput", ["up"], ["y"], channels=12, channels_last=1, domain=nc),
         n("ReorderOutput", ["gp"], ["g"], channels=12, channels_last=0, domain=nc)],
        [_vi("x", [1, 12, 8, 8])], [], domains=(nc,))


def test_hand_built_contrib_ops_get_the_shapes_onnxruntime_runs(tmp_path):
    for name, build in {"norms": _norms, "quantized": _quantized_ops}.items():
        path = tmp_path / f"{name}.onnx"
        onnx.save(build(), str(path))
        _plans_as_onnxruntime_runs(path)


def test_reorder_input_alone_is_named_not_guessed(tmp_path):
    """Without value_info or an NCHWc Conv reading it, ReorderInput's padded channel count
    (the block size) is in no attribute: the model does not plan without measuring, and
    planning with --measure-shapes gives onnxruntime's own count."""
    path = tmp_path / "nchwc.onnx"
    onnx.save(_nchwc_ops(), str(path))
    with pytest.raises(ShapeError, match=r"\(com.microsoft.nchwc:ReorderInput\) needs the NCHWc block size"):
        plan_model(path)
    measured = plan_model(path, PlanOptions(measure_shapes=True)).view.tensors
    assert measured["rx"].shape == _measured(path, _feeds(_nchwc_ops()))["rx"][1]


def test_nchwc_pools_and_upsample_with_the_block_in_value_info(tmp_path):
    """The padded count read from the file's value_info, as onnxruntime measured it."""
    m = _nchwc_ops()
    src = tmp_path / "bare.onnx"
    onnx.save(m, str(src))
    feeds = _feeds(m)
    _dtype, shape = _measured(src, feeds)["rx"]
    m.graph.value_info.append(_vi("rx", list(shape)))
    path = tmp_path / "nchwc.onnx"
    onnx.save(m, str(path))
    planned = _plans_as_onnxruntime_runs(path, feeds)
    assert planned.view.tensors["y"].shape == (1, 8, 8, 12)


def _qgemm_float() -> onnx.ModelProto:
    """com.microsoft QuantizeLinear, QGemm without y_scale (a float output), and
    com.microsoft DequantizeLinear."""
    n = helper.make_node
    ms = "com.microsoft"
    w = numpy_helper.from_array(_RNG.integers(0, 255, (8, 6)).astype(np.uint8), "w")
    return _contrib_model(
        [n("QuantizeLinear", ["x", "s", "z"], ["xq"], domain=ms),
         n("QGemm", ["xq", "s", "z", "w", "s", "z"], ["g"], transB=1, domain=ms),
         n("DequantizeLinear", ["xq", "s", "z"], ["dq"], domain=ms),
         n("MatMul", ["dq", "wt"], ["m"]), n("Add", ["g", "m"], ["y"])],
        [_vi("x", [3, 6])], [_scalar("s", 0.05), _u8("z", 128), w, _init("wt", 6, 8)])


def test_qgemm_to_float_and_microsoft_quantize_get_the_shapes_onnxruntime_runs(tmp_path):
    path = tmp_path / "qgemm.onnx"
    onnx.save(_qgemm_float(), str(path))
    planned = _plans_as_onnxruntime_runs(path)
    assert planned.view.tensors["g"].dtype == "float32" and planned.view.tensors["xq"].dtype == "uint8"


def test_a_hostile_attribute_leaves_the_value_unknown_with_one_line(tmp_path):
    """A string where ReorderOutput's int ``channels`` belongs: no rule guesses, the plan stops
    with one line naming the node."""
    m = _nchwc_ops()
    m.graph.value_info.append(_vi("rx", [1, 16, 8, 8]))
    for node in m.graph.node:
        if node.op_type == "ReorderOutput":
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("channels", "12\x1b[2J"))
    path = tmp_path / "hostile.onnx"
    onnx.save(m, str(path))
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(tmp_path / "p.json")])
    assert r.exit_code != 0 and "Traceback" not in r.output and "\x1b" not in r.output, r.output
    assert "com.microsoft.nchwc:ReorderOutput" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()
