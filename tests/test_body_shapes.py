"""Body shapes from shape arithmetic inside the body and from the values it captures:
each body inferred as a model of its own (static), fed the measured values of the small
integer tensors it reads (``--measure-shapes``)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.core.errors import ShapeError
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import verify_plan

from .helpers import make_model, vi


def _i64(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def _pad_from_shape_of_x() -> onnx.ModelProto:
    """An If whose else branch pads captured x [1, 10] up to 16 columns by ceil(16 - Shape(x)[1])."""
    then_g = helper.make_graph(
        [helper.make_node("Constant", [], ["t_pads"], value=_i64("tp", [0, 0, 0, 6]), name="t_pads"),
         helper.make_node("Pad", ["x", "t_pads"], ["t_pad"], name="t_pad"),
         helper.make_node("Relu", ["t_pad"], ["t_out"], name="t_relu")],
        "then", [], [vi("t_out", None)])
    else_g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["e_shape"], name="e_shape"),
         helper.make_node("Constant", [], ["e_one"], value=helper.make_tensor("o", TensorProto.INT64, [], [1]),
                          name="e_one"),
         helper.make_node("Gather", ["e_shape", "e_one"], ["e_cols"], name="e_cols"),
         helper.make_node("Constant", [], ["e_want"], value=helper.make_tensor("w", TensorProto.INT64, [], [16]),
                          name="e_want"),
         helper.make_node("Sub", ["e_want", "e_cols"], ["e_diff"], name="e_diff"),
         # through float and Ceil, as "same" padding computes it: onnx's data propagation stops here
         helper.make_node("Cast", ["e_diff"], ["e_diff_f"], to=TensorProto.FLOAT, name="e_diff_f"),
         helper.make_node("Ceil", ["e_diff_f"], ["e_ceil"], name="e_ceil"),
         helper.make_node("Cast", ["e_ceil"], ["e_more"], to=TensorProto.INT64, name="e_more"),
         helper.make_node("Constant", [], ["e_zero"], value=_i64("z", [0]), name="e_zero"),
         helper.make_node("Unsqueeze", ["e_more", "e_zero"], ["e_more1"], name="e_more1"),
         helper.make_node("Constant", [], ["e_head"], value=_i64("h", [0, 0, 0]), name="e_head"),
         helper.make_node("Concat", ["e_head", "e_more1"], ["e_pads"], axis=0, name="e_pads"),
         helper.make_node("Pad", ["x", "e_pads"], ["e_pad"], name="e_pad"),
         helper.make_node("Relu", ["e_pad"], ["e_out"], name="e_relu")],
        "else", [], [vi("e_out", None)])
    return make_model(
        [helper.make_node("If", ["c"], ["y"], name="pick", then_branch=then_g, else_branch=else_g)],
        [vi("x", [1, 10]), vi("c", [], TensorProto.BOOL)], [vi("y", [1, 16])])


def _pad_by_value_of_k() -> onnx.ModelProto:
    """An If whose branches pad x [1, 10] by k columns, k an int64 graph input (after or before)."""
    def branch(tag: str, head: list[int], tail: list[int]) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Constant", [], [f"{tag}_zero"], value=_i64(f"{tag}z", [0]), name=f"{tag}_zero"),
             helper.make_node("Unsqueeze", ["k", f"{tag}_zero"], [f"{tag}_k1"], name=f"{tag}_k1"),
             helper.make_node("Constant", [], [f"{tag}_head"], value=_i64(f"{tag}h", head), name=f"{tag}_head"),
             helper.make_node("Constant", [], [f"{tag}_tail"], value=_i64(f"{tag}t", tail), name=f"{tag}_tail"),
             helper.make_node("Concat", [f"{tag}_head", f"{tag}_k1", f"{tag}_tail"], [f"{tag}_pads"], axis=0,
                              name=f"{tag}_pads"),
             helper.make_node("Pad", ["x", f"{tag}_pads"], [f"{tag}_pad"], name=f"{tag}_pad"),
             helper.make_node("Sigmoid", [f"{tag}_pad"], [f"{tag}_out"], name=f"{tag}_sig")],
            tag, [], [vi(f"{tag}_out", None)])

    return make_model(
        [helper.make_node("Greater", ["k", "k0"], ["c"], name="more"),
         helper.make_node("If", ["c"], ["y"], name="pick", then_branch=branch("t", [0, 0, 0], []),
                          else_branch=branch("e", [0], [0, 0]))],
        [vi("x", [1, 10]), vi("k", [], TensorProto.INT64)], [vi("y", None)],
        [helper.make_tensor("k0", TensorProto.INT64, [], [3])])


def _save(tmp_path, name, model):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def test_a_branch_padding_by_shape_arithmetic_on_a_captured_input_is_sized_statically(tmp_path):
    path = _save(tmp_path, "padshape", _pad_from_shape_of_x())
    planned = plan_model(path)
    other = planned.bodies["pick/else_branch"].view.tensors
    assert other["e_shape"].shape == (2,) and other["e_shape"].size == 16
    assert other["e_pads"].shape == (4,) and other["e_pads"].size == 32
    # 1 x (10 + 16 - 10) float32
    assert other["e_pad"].shape == (1, 16) and other["e_pad"].size == 64
    assert planned.bodies["pick/then_branch"].view.tensors["t_pad"].shape == (1, 16)
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view)
    assert report.ok, report.first
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(tmp_path / "p.json")])
    assert r.exit_code == 0 and "verified" in r.output, r.output


def test_a_branch_padding_by_a_captured_value_needs_its_measured_value(tmp_path):
    path = _save(tmp_path, "padvalue", _pad_by_value_of_k())
    with pytest.raises(ShapeError):
        plan_model(path)
    k = np.array(6, dtype=np.int64)
    planned = plan_model(path, PlanOptions(measure_shapes=True, inputs={"k": k}))
    # k = 6 decides the If (Greater(k, 3)): its then branch alone is planned, sized from k:
    # 1 x (10 + 6) float32, pads of 4 int64; the else branch is left out
    tensors = planned.bodies["pick/then_branch"].view.tensors
    assert tensors["t_pad"].shape == (1, 16) and tensors["t_pad"].size == 64
    assert tensors["t_pads"].size == 32
    assert "pick/else_branch" not in planned.bodies
    assert planned.plan.extra["branches_decided"] == {"pick": {"branch": "then_branch", "inputs": ["k"]}}
    inputs = tmp_path / "k.npz"
    np.savez(inputs, k=k)
    plan = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(path), "--measure-shapes", "--inputs", str(inputs), "-o", str(plan)])
    assert r.exit_code == 0, r.output
    assert json.loads(plan.read_text())["arena_size"] > 0
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(plan), "--inputs", str(inputs)])
    assert r.exit_code == 0 and "verified" in r.output, r.output


def _nested_if_on_rank() -> onnx.ModelProto:
    """An If branch holding an If that unsqueezes x [1, 10] when its rank is not 3 (an exporter's
    "add a batch axis" test), then a Relu of the inner If's output."""
    axis0 = _i64("a0", [0])
    inner_then = helper.make_graph(
        [helper.make_node("Constant", [], ["u_axes"], value=axis0, name="u_axes"),
         helper.make_node("Unsqueeze", ["x", "u_axes"], ["u_out"], name="u_out")], "unsq", [], [vi("u_out", None)])
    inner_else = helper.make_graph([helper.make_node("Identity", ["x"], ["i_out"], name="i_out")], "same", [],
                                   [vi("i_out", None)])
    outer_then = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["o_shape"], name="o_shape"),
         helper.make_node("Size", ["o_shape"], ["o_rank"], name="o_rank"),
         helper.make_node("Constant", [], ["o_three"], value=helper.make_tensor("three", TensorProto.INT64, [], [3]),
                          name="o_three"),
         # not (rank == 3), cast to bool: as PyTorch's exporter writes the test
         helper.make_node("Equal", ["o_rank", "o_three"], ["o_is3"], name="o_is3"),
         helper.make_node("Not", ["o_is3"], ["o_not3"], name="o_not3"),
         helper.make_node("Cast", ["o_not3"], ["o_cond"], to=TensorProto.BOOL, name="o_cond"),
         helper.make_node("If", ["o_cond"], ["o_batched"], name="batch", then_branch=inner_then,
                          else_branch=inner_else),
         helper.make_node("Relu", ["o_batched"], ["o_out"], name="o_relu")],
        "then", [], [vi("o_out", None)])
    outer_else = helper.make_graph(
        [helper.make_node("Constant", [], ["e_axes"], value=axis0, name="e_axes"),
         helper.make_node("Unsqueeze", ["x", "e_axes"], ["e_out"], name="e_out")], "else", [], [vi("e_out", None)])
    return make_model(
        [helper.make_node("If", ["c"], ["y"], name="pick", then_branch=outer_then, else_branch=outer_else)],
        [vi("x", [1, 10]), vi("c", [], TensorProto.BOOL)], [vi("y", [1, 1, 10])])


def test_a_nested_if_whose_condition_evaluates_gives_its_taken_branchs_shapes(tmp_path):
    path = _save(tmp_path, "nested", _nested_if_on_rank())
    planned = plan_model(path)
    outer = planned.bodies["pick/then_branch"].view.tensors
    # the inner If takes its Unsqueeze branch (rank 2 is not 3): 1 x 1 x 10 float32 after it
    assert outer["o_out"].shape == (1, 1, 10)
    assert outer["o_batched"].shape == (1, 1, 10) and outer["o_batched"].size == 40
    # the branch not taken is planned too, at the shapes of the values it reads
    assert planned.bodies["pick/then_branch/batch/else_branch"].view.tensors["i_out"].shape == (1, 10)
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view)
    assert report.ok, report.first
