"""onnxruntime's attention, rotary, embedding and 4-bit MatMul ops get their shapes by rule
(onnxmem.shapes.contrib_attention), and the Llama-style decoder of tools/build_decoder.py plans
and verifies.

Each rule is checked against onnxruntime: a small model built with onnx.helper, every output
(optional ones included) a graph output, run by a real CPU session; the planned dtype and
shape of every value must be those the session returns.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import verify_plan
from tests.test_contrib_shapes import _measured, _plans_as_onnxruntime_runs

TOOLS = Path(__file__).resolve().parent.parent / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

from build_decoder import DecoderConfig, build_decoder, quantize_4bit  # noqa: E402

ort = pytest.importorskip("onnxruntime")

_RNG = np.random.default_rng(0)
_MS = "com.microsoft"
F, I32, I64, U8 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8


def _t(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(a, name)


def _f(name: str, *shape: int) -> onnx.TensorProto:
    return _t(name, (_RNG.standard_normal(shape) * 0.3).astype(np.float32))


def _save(tmp_path: Path, name: str, nodes, inputs, inits) -> Path:
    outs = [o for n in nodes for o in n.output if o]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in outs[-1:]], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)])
    m.ir_version = 10
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return path


def _vi(name: str, et: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, et, shape)


def _feeds(path: Path) -> dict[str, np.ndarray]:
    m = onnx.load(str(path))
    out = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        et = i.type.tensor_type.elem_type
        out[i.name] = (_RNG.integers(0, 8, shape).astype(np.int64) if et == I64 else
                       _RNG.standard_normal(shape).astype(np.float32))
    return out


def _check(path: Path):
    return _plans_as_onnxruntime_runs(path, _feeds(path))


def test_attention_with_past_present_and_mask(tmp_path):
    """Attention: output (batch, seq, v_hidden), present (2, batch, heads, past + seq, head);
    QAttention the same in its scale's dtype; Attention without past gives present at seq."""
    n = helper.make_node
    path = _save(tmp_path, "attention", [
        n("Attention", ["x", "w", "b", "", "past"], ["a", "present"], domain=_MS, num_heads=4),
        n("Attention", ["a", "w", "b"], ["a2", "present2"], domain=_MS, num_heads=4, unidirectional=1),
        n("DynamicQuantizeLinear", ["a2"], ["aq", "as", "az"]),
        n("QAttention", ["aq", "wq", "b", "as", "ws", "", "az", "wz", "past"], ["y", "present3"], domain=_MS,
          num_heads=4, unidirectional=1)],
        [_vi("x", F, [2, 3, 16]), _vi("past", F, [2, 2, 4, 5, 4])],
        [_f("w", 16, 48), _f("b", 48), _t("wq", _RNG.integers(0, 255, (16, 48)).astype(np.uint8)),
         _t("ws", np.array(0.02, np.float32)), _t("wz", np.array(128, np.uint8))])
    t = _check(path).view.tensors
    assert t["present"].shape == (2, 2, 4, 8, 4) and t["present2"].shape == (2, 2, 4, 3, 4)
    assert t["present3"].shape == (2, 2, 4, 8, 4) and t["y"].dtype == "float32"


def test_multi_head_attention_self_cross_and_packed(tmp_path):
    """MultiHeadAttention with past (present past + kv_seq), cross attention with 4-D key and
    value; DecoderMaskedMultiHeadAttention one step into a shared past buffer
    (its present is the buffer: the CPU kernel shares past and present only)."""
    n = helper.make_node
    path = _save(tmp_path, "mha", [
        n("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"], ["o1", "pk1", "pv1"], domain=_MS,
          num_heads=2),
        n("MultiHeadAttention", ["o1", "k4", "v4"], ["o2"], domain=_MS, num_heads=2),
        n("DecoderMaskedMultiHeadAttention", ["q1", "k1", "v1", "", "", "pk", "pv", "psl"], ["o4", "pk4", "pv4"],
          domain=_MS, num_heads=2, past_present_share_buffer=1)],
        [_vi("q", F, [1, 3, 8]), _vi("k", F, [1, 3, 8]), _vi("v", F, [1, 3, 8]), _vi("pk", F, [1, 2, 5, 4]),
         _vi("pv", F, [1, 2, 5, 4]), _vi("k4", F, [1, 2, 7, 4]), _vi("v4", F, [1, 2, 7, 4]),
         _vi("q1", F, [1, 1, 8]), _vi("k1", F, [1, 1, 8]), _vi("v1", F, [1, 1, 8])],
        [_t("psl", np.array([3], np.int32))])
    t = _check(path).view.tensors
    assert t["pk1"].shape == (1, 2, 8, 4) and t["o2"].shape == (1, 3, 8) and t["pk4"].shape == (1, 2, 5, 4)


def _gqa(tmp_path: Path, past_len: int, total: int, seq: int) -> Path:
    n = helper.make_node
    return _save(tmp_path, f"gqa{past_len}_{total}", [
        n("RotaryEmbedding", ["q", "pos", "cos", "sin"], ["qr"], domain=_MS, num_heads=4),
        n("GroupQueryAttention", ["qr", "k", "v", "pk", "pv", "seqlens", "total"], ["o", "prk", "prv"], domain=_MS,
          num_heads=4, kv_num_heads=2),
        n("GroupQueryAttention", ["qkv", "", "", "pk", "pv", "seqlens", "total", "cos", "sin"],
          ["o2", "prk2", "prv2"], domain=_MS, num_heads=4, kv_num_heads=2, do_rotary=1)],
        [_vi("q", F, [1, seq, 64]), _vi("k", F, [1, seq, 32]), _vi("v", F, [1, seq, 32]),
         _vi("pk", F, [1, 2, past_len, 16]), _vi("pv", F, [1, 2, past_len, 16]), _vi("qkv", F, [1, seq, 128])],
        [_t("pos", np.arange(past_len, past_len + seq, dtype=np.int64)[None]), _f("cos", 64, 8), _f("sin", 64, 8),
         _t("seqlens", np.array([total - 1], np.int32)), _t("total", np.array([total], np.int32))])


@pytest.mark.parametrize(("past_len", "total", "seq"), [(5, 6, 1), (0, 4, 4), (8, 6, 1)])
def test_group_query_attention_present_is_the_larger_of_past_and_total(tmp_path, past_len, total, seq):
    """present (batch, kv_heads, max(past, total), head); a past buffer longer than the total
    (a cache allocated ahead) keeps its length. Unpacked and packed QKV with do_rotary."""
    t = _check(_gqa(tmp_path, past_len, total, seq)).view.tensors
    assert t["prk"].shape == (1, 2, max(past_len, total), 16) == t["prv2"].shape
    assert t["o2"].shape == (1, seq, 64)


def test_group_query_attention_with_total_as_data_keeps_the_past_length(tmp_path):
    """total_sequence_length a graph input: no rule reads its value; onnxruntime itself then
    declares the present at the past's fixed length (and its kernel refuses a longer one), and
    so does the plan."""
    n = helper.make_node
    path = _save(tmp_path, "gqa-data", [
        n("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total"], ["o", "prk", "prv"],
          domain=_MS, num_heads=4, kv_num_heads=2)],
        [_vi("q", F, [1, 1, 64]), _vi("k", F, [1, 1, 32]), _vi("v", F, [1, 1, 32]), _vi("pk", F, [1, 2, 5, 16]),
         _vi("pv", F, [1, 2, 5, 16]), _vi("seqlens", I32, [1]), _vi("total", I32, [1])], [])
    feeds = {k: v for k, v in _feeds(path).items() if k not in ("seqlens", "total")}
    feeds.update(seqlens=np.array([4], np.int32), total=np.array([5], np.int32))
    planned = _plans_as_onnxruntime_runs(path, feeds)
    assert planned.view.tensors["prk"].shape == (1, 2, 5, 16)


def test_embed_layer_norm_and_matmul_nbits(tmp_path):
    """EmbedLayerNormalization with mask_index and embedding_sum; MatMulNBits on its output."""
    n = helper.make_node
    packed, scales = quantize_4bit((_RNG.standard_normal((32, 24))).astype(np.float32))
    path = _save(tmp_path, "embed", [
        n("EmbedLayerNormalization", ["ids", "seg", "we", "pe", "se", "g", "b", "mask"], ["e", "mi", "es"],
          domain=_MS, epsilon=1e-5),
        n("MatMulNBits", ["e", "qw", "qs"], ["y"], domain=_MS, K=32, N=24, bits=4, block_size=32)],
        [_vi("ids", I32, [2, 5]), _vi("seg", I32, [2, 5]), _vi("mask", I32, [2, 5])],
        [_f("we", 10, 32), _f("pe", 8, 32), _f("se", 2, 32), _f("g", 32), _f("b", 32), _t("qw", packed),
         _t("qs", scales)])
    m = onnx.load(str(path))
    feeds = {"ids": _RNG.integers(0, 10, (2, 5)).astype(np.int32), "seg": np.zeros((2, 5), np.int32),
             "mask": np.ones((2, 5), np.int32)}
    t = _plans_as_onnxruntime_runs(path, feeds).view.tensors
    assert t["mi"].shape == (2,) and t["mi"].dtype == "int32" and t["y"].shape == (2, 5, 24)
    assert m.graph.node[0].op_type == "EmbedLayerNormalization"


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("decoder") / "decoder.onnx"
    onnx.save(build_decoder(DecoderConfig(layers=2, hidden=256, intermediate=512, vocab=512, max_seq=256)), str(path))
    return path


@pytest.mark.parametrize(("seq", "past"), [(1, 127), (16, 0)])
def test_decoder_plans_and_verifies_at_a_decode_step_and_a_prefill(decoder, seq, past):
    """``--dim`` alone (the prefill's empty cache as ``past_seq=0``): every value as
    onnxruntime runs it, the plan verified in one arena."""
    planned = plan_model(decoder, PlanOptions(dims={"batch": 1, "seq": seq, "past_seq": past}))
    pins = {f"past_key_values.{i}.{kv}": (1, 2, past, 32) for i in range(2) for kv in ("key", "value")}
    feeds = {"input_ids": _RNG.integers(0, 512, (1, seq)).astype(np.int64)}
    feeds.update({k: _RNG.standard_normal(v).astype(np.float32) for k, v in pins.items()})
    measured = _measured(decoder, feeds)
    tensors = planned.view.tensors
    assert {n: (tensors[n].dtype, tensors[n].shape) for n in measured} == measured
    assert tensors["present.1.key"].shape == (1, 2, past + seq, 32)
    report = verify_plan(planned.model, planned.plan, model_path=decoder, view=planned.view)
    assert report.ok, report.first


def test_decoder_range_plan_over_the_cache_length_verifies_at_its_corners(decoder, tmp_path):
    """``past_seq=0:63``: the present's length is ``past_seq + seq`` (total_sequence_length
    computed from the shapes, never below the past), a polynomial; the range plan is made and
    verified by execution at both corners, the empty cache included."""
    plan = tmp_path / "r.json"
    dims = ["--dim", "batch=1", "--dim", "seq=1"]
    r = CliRunner().invoke(main, ["plan", str(decoder), *dims, "--dim", "past_seq=0:63", "-o", str(plan)])
    assert r.exit_code == 0, r.output
    for past in (0, 63):
        r = CliRunner().invoke(main, ["verify", str(decoder), "--plan", str(plan), "--dim", f"past_seq={past}"])
        assert r.exit_code == 0 and "verified" in r.output, r.output
    r = CliRunner().invoke(main, ["instantiate", str(plan), "--dim", "past_seq=63", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    point = {t["name"]: t for t in json.loads((tmp_path / "p.json").read_text())["tensors"]}
    assert point["present.0.key"]["size"] == 1 * 2 * 64 * 32 * 4


@pytest.mark.parametrize(("seq", "past"), [(1, 127), (16, 0)])
def test_decoder_at_optimize_all_plans_the_present_as_the_kernel_writes_it(decoder, tmp_path, seq, past):
    """The graph onnxruntime builds at ALL: the file it saves declares each ``present`` output
    with the past's length (its own inference); the user's declaration stands, the present is
    past + seq long, and the plan verifies in one arena."""
    plan = tmp_path / "all.json"
    dims = ["--dim", "batch=1", "--dim", f"seq={seq}", "--dim", f"past_seq={past}"]
    r = CliRunner().invoke(main, ["plan", str(decoder), *dims, "--optimize", "all", "-o", str(plan)])
    assert r.exit_code == 0, r.output
    sizes = {t["name"]: t["size"] for t in json.loads(plan.read_text())["tensors"]}
    assert sizes["present.1.key"] == 1 * 2 * (past + seq) * 32 * 4
    r = CliRunner().invoke(main, ["verify", str(decoder), "--plan", str(plan)])
    assert r.exit_code == 0 and r.output.strip().endswith("verified"), r.output


def test_a_present_no_polynomial_bounds_is_refused_in_a_range_not_wrong(tmp_path):
    """total_sequence_length a constant (8) over a ranged past: max(past, 8) is no
    polynomial in past_seq, so the range plan stops with one line naming the presents; at a
    point it plans as onnxruntime runs it."""
    n = helper.make_node
    path = _save(tmp_path, "gqa_const", [
        n("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total"], ["y", "ok", "ov"],
          num_heads=2, kv_num_heads=1, domain=_MS),
    ], [_vi("q", F, [1, 2, 32]), _vi("k", F, [1, 2, 16]), _vi("v", F, [1, 2, 16]),
        _vi("pk", F, [1, 1, "past_seq", 16]), _vi("pv", F, [1, 1, "past_seq", 16])],
        [_t("seqlens", np.array([7], np.int32)), _t("total", np.array([8], np.int32))])
    r = CliRunner().invoke(main, ["plan", str(path), "--dim", "past_seq=0:12", "-o", str(tmp_path / "r.json")])
    assert r.exit_code != 0 and "'ok'" in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "r.json").exists()
    t = plan_model(path, PlanOptions(dims={"past_seq": 6})).view.tensors
    assert t["ok"].shape == (1, 1, 8, 16)


def test_a_dim_at_zero_plans_where_every_use_is_valid_at_zero(decoder, tmp_path):
    """``--dim past_seq=0`` (an empty cache) plans and verifies; a dim at 0 that a
    convolution's window needs more of stops with one line naming the flag and the rule."""
    plan = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(decoder), "--dim", "batch=1", "--dim", "seq=4", "--dim", "past_seq=0",
                                  "-o", str(plan)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["verify", str(decoder), "--plan", str(plan)])
    assert r.exit_code == 0 and "verified" in r.output, r.output
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])], "g",
                          [_vi("x", F, [1, 3, "h", 8])], [_vi("y", F, None)], [_f("w", 4, 3, 3, 3)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    conv = tmp_path / "conv.onnx"
    onnx.save(m, str(conv))
    r = CliRunner().invoke(main, ["plan", str(conv), "--dim", "h=0", "-o", str(tmp_path / "c.json")])
    assert r.exit_code != 0 and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert "--dim h=0" in r.output and "valid at 0" in r.output and not (tmp_path / "c.json").exists()
    assert plan_model(conv, PlanOptions(dims={"h": 3})).view.tensors["c"].shape == (1, 4, 1, 6)


def test_quantize_4bit_is_what_matmul_nbits_computes():
    w = _RNG.standard_normal((64, 24)).astype(np.float32)
    packed, scales = quantize_4bit(w)
    q = np.stack([packed & 15, packed >> 4], -1).reshape(24, 2, 32).astype(np.float32)
    deq = ((q - 8) * scales.reshape(24, 2)[..., None]).reshape(24, 64).T
    n = helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain=_MS, K=64, N=24, bits=4, block_size=32)
    g = helper.make_graph([n], "g", [_vi("a", F, [3, 64])], [_vi("y", F, None)], [_t("b", packed), _t("s", scales)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)])
    m.ir_version = 10
    a = _RNG.standard_normal((3, 64)).astype(np.float32)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    np.testing.assert_allclose(y, a @ deq, rtol=1e-4, atol=1e-4)
    assert np.abs(deq - w).max() <= np.abs(w).max() / 7
