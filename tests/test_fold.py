"""Constant folding: nodes computed only from weights are weights (``--fold on``), as before with ``--fold off``."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.graph import build_view
from onnxmem.shapes import infer_shapes
from onnxmem.verify.run import VerifyOptions, verify_plan

from .helpers import make_model, plan_file_order, vi


def folded_chain() -> onnx.ModelProto:
    """``W`` (float [32, 64]) -> Transpose -> Cast(float) -> Reshape -> MatMul(x, .) -> Relu -> y.

    The Transpose, Cast and Reshape read only initializers and take no more bytes than ``W``:
    onnxruntime folds them at session start.
    """
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32), "W")
    shape = numpy_helper.from_array(np.array([64, 32], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
        helper.make_node("Cast", ["wt"], ["wc"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["wc", "shape"], ["wr"]),
        helper.make_node("MatMul", ["x", "wr"], ["mm"]),
        helper.make_node("Relu", ["mm"], ["y"]),
    ]
    return make_model(nodes, [vi("x", [1, 64])], [vi("y", [1, 32])], [w, shape])


def test_folded_values_are_weights_with_their_origin():
    m = folded_chain()
    view = build_view(m, infer_shapes(m))
    assert {n: view.tensors[n].origin for n in ("W", "shape", "wt", "wc", "wr")} == {
        "W": "initializer", "shape": "initializer", "wt": "folded", "wc": "folded", "wr": "folded"}
    assert view.folded() == ["wt", "wc", "wr"]
    assert view.weight_ops == (0, 1, 2)
    assert {t.name for t in view.activations()} == {"x", "mm", "y"}
    assert view.tensors["mm"].origin == ""
    off = build_view(m, infer_shapes(m), fold=False)
    assert {t.name for t in off.activations()} == {"x", "wt", "wc", "wr", "mm", "y"}
    assert off.weight_ops == ()


def test_fold_on_arena_is_the_hand_computed_number(tmp_path):
    m = folded_chain()
    on = plan_file_order(m, tmp_path).plan
    # x (1x64 float, 256 B) lives until the MatMul; mm (128 B) and y in place over it: 256 + 128
    assert on.arena_size == 384
    assert {t.name for t in on.tensors} == {"x", "mm", "y"}
    assert on.extra["fold"] == "on" and on.extra["folded"] == ["wt", "wc", "wr"]
    # weights: W 8192 + shape 16 + wt, wc and wr 8192 each
    assert on.weights_size == 8192 + 16 + 3 * 8192


def test_fold_off_keeps_the_old_plan(tmp_path):
    m = folded_chain()
    off = plan_file_order(m, tmp_path, fold=False).plan
    # at the Cast: x 256 + wt (64x32 float) 8192 + wc 8192; wr is a view of wc
    assert off.arena_size == 256 + 8192 + 8192
    assert off.extra["fold"] == "off"
    assert off.weights_size == 8192 + 16


@pytest.mark.parametrize("fold", [True, False])
def test_folded_plan_verifies_in_the_arena(tmp_path, fold):
    m = folded_chain()
    planned = plan_file_order(m, tmp_path, fold=fold)
    report = verify_plan(m, planned.plan, model_path=tmp_path / "m.onnx", plan_name="p.json",
                         options=VerifyOptions())
    assert report.ok, report.first
    assert report.execution is not None and report.execution.nodes_run == (2 if fold else 5)


def test_cli_fold_flag_and_verify_reads_the_plans_folding(tmp_path):
    m = folded_chain()
    model = tmp_path / "m.onnx"
    onnx.save(m, model)
    runner = CliRunner()
    for fold, arena in (("on", 384), ("off", 256 + 8192 + 8192)):
        plan = tmp_path / f"{fold}.json"
        r = runner.invoke(main, ["plan", str(model), "--fold", fold, "--alignment", "1", "--order", "file",
                                 "--solver", "greedy", "-o", str(plan)])
        assert r.exit_code == 0, r.output
        assert json.loads(plan.read_text())["arena_size"] == arena
        r = runner.invoke(main, ["verify", str(model), "--plan", str(plan)])
        assert r.exit_code == 0, r.output
        assert "verified" in r.output


def test_random_nodes_are_never_folded():
    w = numpy_helper.from_array(np.ones((4,), dtype=np.float32), "W")
    nodes = [
        helper.make_node("RandomUniformLike", ["W"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["y"]),
    ]
    m = make_model(nodes, [vi("x", [4])], [vi("y", [4])], [w])
    view = build_view(m, infer_shapes(m))
    assert view.tensors["r"].kind == "activation" and view.folded() == []


def test_annotated_model_keeps_the_folded_nodes_and_verifies(tmp_path):
    m = folded_chain()
    model = tmp_path / "m.onnx"
    onnx.save(m, model)
    annotated = tmp_path / "annotated.onnx"
    r = CliRunner().invoke(main, ["plan", str(model), "--annotate", str(annotated)])
    assert r.exit_code == 0, r.output
    a = onnx.load(annotated)
    assert sorted(n.op_type for n in a.graph.node) == sorted(n.op_type for n in m.graph.node)
    r = CliRunner().invoke(main, ["verify", str(annotated)])
    assert r.exit_code == 0, r.output
    assert "carried by the annotated model" in r.output and "verified" in r.output


def test_onnxruntime_basic_level_folds_as_the_plan_does(tmp_path):
    """ORT_ENABLE_BASIC folds the chain itself: its peak drops below ORT_DISABLE_ALL on the graph as
    given, and the folded arena is at or below it."""
    from onnxmem.runtime.peak import comparable_peak, ort_peak

    m = folded_chain()
    off = plan_file_order(m, tmp_path, fold=False)
    on = plan_file_order(m, tmp_path)
    path = tmp_path / "m.onnx"
    peaks = {level: comparable_peak(ort_peak(m, off.view, level=level, model_path=path).peak, off.view)
             for level in ("disable", "basic")}
    assert peaks["disable"] is not None and peaks["basic"] is not None
    assert peaks["disable"] >= 8192  # the Transpose output (and the Cast, in place on CPU) are activations there
    assert peaks["basic"] < 4096  # folded by onnxruntime at session start
    assert on.plan.arena_size <= peaks["basic"]
    # the graph the folded plan describes, run at ORT_DISABLE_ALL, is like for like
    folded = comparable_peak(ort_peak(m, on.view, level="disable", model_path=path).peak, on.view)
    assert folded is not None and on.plan.arena_size <= folded < 4096


def test_a_node_whose_outputs_outgrow_its_stored_weights_is_not_folded(tmp_path):
    """``W`` (float16 [32, 64], 4096 B) -> Transpose (4096 B, folded) -> Cast(float) (8192 B: more
    than the 4096 B it is computed from, so it runs at run time) -> MatMul(x, .) -> y."""
    w = numpy_helper.from_array(np.ones((32, 64), np.float16), "W")
    nodes = [helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
             helper.make_node("Cast", ["wt"], ["wc"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "wc"], ["y"])]
    m = make_model(nodes, [vi("x", [1, 64])], [vi("y", [1, 32])], [w])
    view = build_view(m, infer_shapes(m))
    assert view.folded() == ["wt"] and view.tensors["wc"].kind == "activation"
    planned = plan_file_order(m, tmp_path)
    assert planned.plan.weights_size == 4096 + 4096  # W and wt, as stored
    assert planned.plan.arena_size == 256 + 8192 + 128  # x, wc and y live at the MatMul
    report = verify_plan(m, planned.plan, model_path=tmp_path / "m.onnx", plan_name="p.json", options=VerifyOptions())
    assert report.ok, report.first


def _qdq_convs(tmp_path, layers=6, channels=32):
    """A chain of ``layers`` 3x3 convolutions (``channels`` channels, 8x8), quantized to QDQ by
    onnxruntime (int8 weights: 9 KiB each as stored, 36 KiB each dequantized)."""
    from onnxruntime.quantization import QuantFormat, quantize_static

    rng = np.random.default_rng(0)
    shape = [1, channels, 8, 8]
    inits = [numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32),
                                     f"w{i}") for i in range(layers)]
    nodes = [helper.make_node("Conv", ["x" if i == 0 else f"c{i - 1}", f"w{i}"],
                              ["y" if i == layers - 1 else f"c{i}"], pads=[1, 1, 1, 1]) for i in range(layers)]
    onnx.save(make_model(nodes, [vi("x", shape)], [vi("y", shape)], inits), tmp_path / "f.onnx")

    class Reader:
        batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ)
    return onnx.load(tmp_path / "q.onnx"), channels * channels * 9


@pytest.mark.parametrize("order", ["greedy", "auto"])
def test_qdq_weights_are_counted_as_stored_and_dequantized_next_to_their_reader(tmp_path, order):
    from onnxmem.planning.pipeline import PlanOptions, plan_model

    q, stored = _qdq_convs(tmp_path)
    path = tmp_path / "q.onnx"
    p = plan_model(path, PlanOptions(order=order, solver="greedy", alignment=1))
    view = p.view
    dq = [op for op in view.ops if op.op_type == "DequantizeLinear" and view.tensors[op.inputs[0]].kind == "weight"]
    assert len(dq) == 6 and view.folded() == []  # no DequantizeLinear of a weight is folded
    int8 = sum(view.tensors[op.inputs[0]].size for op in dq)
    assert int8 == 6 * stored and p.plan.weights_size < 2 * int8  # int8 weights, scales, zero points
    # every dequantized weight runs just before its reader, whatever the file order (all of them first)
    index = {op.name: op.index for op in view.ops}
    order = [index[n] for n in p.plan.order]
    pos = {v: i for i, v in enumerate(order)}
    for op in dq:
        (reader,) = view.consumers[op.outputs[0]]
        between = [view.ops[v] for v in order[pos[op.index] + 1:pos[reader]]]
        assert all(b.op_type == "DequantizeLinear" and reader in view.consumers[b.outputs[0]] for b in between)
    # so at most one dequantized weight (4 x stored) is in the arena at a time, with the activations
    # (at most 3 float and 2 int8 tensors of 8 KiB and 2 KiB)
    assert p.plan.arena_size <= 4 * stored + 3 * 8192 + 2 * 2048
    assert verify_plan(q, p.plan, model_path=path, plan_name="p.json", options=VerifyOptions()).ok


def _constants() -> list[onnx.NodeProto]:
    """A Constant node of each form: tensors stored in raw bytes and in typed fields, of the types
    numpy has, and the scalar and list attributes."""
    rng = np.random.default_rng(7)
    arrays = {"f32": rng.standard_normal((2, 3)).astype(np.float32), "f64": rng.standard_normal(4),
              "f16": rng.standard_normal((3,)).astype(np.float16), "i8": np.array([-3, 5], np.int8),
              "u8": np.array([[1, 255]], np.uint8), "i32": np.array([7, -9, 11], np.int32),
              "b": np.array([True, False, True]), "scalar": np.array(2.5, np.float32), "empty": np.zeros((0, 2), np.int64)}
    nodes = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(a, name)) for name, a in arrays.items()]
    typed = helper.make_tensor("i64", TensorProto.INT64, [3], [1, -2, 3])  # int64_data, not raw bytes
    nodes.append(helper.make_node("Constant", [], ["i64"], value=typed))
    nodes += [helper.make_node("Constant", [], ["vf"], value_float=0.1),
              helper.make_node("Constant", [], ["vfs"], value_floats=[0.1, -2.0, 3.5]),
              helper.make_node("Constant", [], ["vi"], value_int=-7),
              helper.make_node("Constant", [], ["vis"], value_ints=[4, 5, 6])]
    return nodes


def test_constant_nodes_read_from_their_attribute_have_onnxruntimes_bits():
    """Each form of a Constant read with numpy (``folding.constant_value``) has the dtype, shape
    and bytes onnxruntime's Constant kernel gives; a string, a bfloat16 tensor, a tensor stored
    outside the model and one whose data does not fill its dims are left to onnxruntime."""
    import onnxruntime as ort

    from onnxmem.runtime.folding import constant_value

    nodes = _constants()
    kinds = {"value_float": TensorProto.FLOAT, "value_floats": TensorProto.FLOAT, "value_int": TensorProto.INT64,
             "value_ints": TensorProto.INT64}
    outs = [helper.make_tensor_value_info(n.output[0], kinds.get(n.attribute[0].name, n.attribute[0].t.data_type), None)
            for n in nodes]
    model = helper.make_model(helper.make_graph(nodes, "c", [], outs), opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=9)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    for node, want in zip(nodes, got):
        mine = constant_value(node)
        assert mine is not None, node.output[0]
        assert mine.dtype == want.dtype and mine.shape == want.shape and mine.tobytes() == want.tobytes(), node.output[0]
    left = [helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", TensorProto.STRING, [1], [b"a"])),
            helper.make_node("Constant", [], ["bf"], value=helper.make_tensor("bf", TensorProto.BFLOAT16, [1], [1.0])),
            helper.make_node("Constant", [], ["short"], value=TensorProto(name="short", data_type=TensorProto.INT64,
                                                                          dims=[3], int64_data=[1, 2])),
            helper.make_node("Constant", [], ["sp"], value_string="x"),
            helper.make_node("Identity", ["x"], ["y"])]
    outside = numpy_helper.from_array(np.ones(4, np.float32), "ext")
    outside.data_location = TensorProto.EXTERNAL
    outside.ClearField("raw_data")
    left.append(helper.make_node("Constant", [], ["ext"], value=outside))
    assert [constant_value(n) for n in left] == [None] * len(left)


def test_weights_with_constants_read_directly_are_the_weights_onnxruntime_computes(monkeypatch):
    """A graph whose weights are Constant nodes and a Cast and an Add of them: the weights
    ``compute_weights`` gives are, bit for bit, those of one onnxruntime session of every weight node."""
    import onnxmem.runtime.folding as folding

    nodes = [*_constants()[:3],
             helper.make_node("Cast", ["f64"], ["f64_as_f32"], to=TensorProto.FLOAT),
             helper.make_node("Constant", [], ["vfs"], value_floats=[0.1, -2.0, 3.5, 4.0]),
             helper.make_node("Add", ["vfs", "f64_as_f32"], ["summed"]),
             helper.make_node("Add", ["x", "summed"], ["y"])]
    model = make_model(nodes, [vi("x", [4])], [vi("y", [4])], [])
    info = infer_shapes(model)
    view = build_view(model, info)
    assert len(view.weight_ops) == 6
    direct = folding.compute_weights(model, view)
    monkeypatch.setattr(folding, "constant_value", lambda node: None)
    by_onnxruntime = folding.compute_weights(model, view)
    assert set(direct) == set(by_onnxruntime) >= {"f32", "f64", "f16", "f64_as_f32", "vfs", "summed"}
    for name, value in by_onnxruntime.items():
        assert direct[name].dtype == value.dtype and direct[name].tobytes() == value.tobytes(), name
