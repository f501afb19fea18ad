"""Recomputing nodes with several outputs (LayerNormalization with its statistics, Split):
the model of the peak by hand, the rewrite's arena by hand, the rewrite against the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.graph import Op
from onnxmem.planning.pipeline import PlanOptions
from onnxmem.remat import build_problem, simulate
from onnxmem.remat.budget import plan_with_budget, sinks_early
from onnxmem.remat.check import seed_random_ops
from onnxmem.remat.cost import flops_costs
from onnxmem.remat.problem import recomputable

from .helpers import file_order_view, make_model, vi


def _ln_tag(width: int) -> str:
    """The suffix of LayerNormalization's scale and bias names: ``sc``, ``bi`` at width 16, ``sc32``, ..."""
    return "" if width == 16 else str(width)


def _ln_inits(width: int) -> list[onnx.TensorProto]:
    tag = _ln_tag(width)
    return [numpy_helper.from_array(np.linspace(0.5, 1.5, width, dtype=np.float32), f"sc{tag}"),
            numpy_helper.from_array(np.linspace(-1, 1, width, dtype=np.float32), f"bi{tag}")]


LN_INITS = _ln_inits(16)


def _ln(x: str, y: str, name: str, width: int = 16) -> onnx.NodeProto:
    tag = _ln_tag(width)
    return helper.make_node("LayerNormalization", [x, f"sc{tag}", f"bi{tag}"],
                            [y, f"{y}_mean", f"{y}_istd"], name=name, axis=-1)


def test_a_multi_output_node_is_dropped_and_its_other_outputs_die_in_the_duplicates_slot():
    # x -> (a, a_mean, a_istd) = LayerNormalization(x) -> b = Sigmoid(a) -> c = Tanh(b) -> y = Mul(c, a)
    nodes = [_ln("x", "a", "L"), helper.make_node("Sigmoid", ["a"], ["b"], name="B"),
             helper.make_node("Tanh", ["b"], ["c"], name="C"), helper.make_node("Mul", ["c", "a"], ["y"], name="Y")]
    model = make_model(nodes, [vi("x", [1, 16])], [vi("y", [1, 16])], LN_INITS)
    view, order = file_order_view(model)
    p = build_problem(view, order, flops_costs(view, model), alignment=64)
    a = p.name.index("a")
    assert p.droppable[a] and (p.last_pre[a], p.first_post[a]) == (1, 3)
    assert p.spare[a] == 128  # a_mean and a_istd: 4 B each, 64 B aligned
    # slots 2t (duplicates before step t) and 2t + 1 (node t), 64 B a value:
    # slot 1: x, a, a_mean, a_istd; the statistics nobody reads die at once; C writes over b;
    # Y (Mul, not in the in-place table) writes y beside a and c: slot 7 is 3 x 64 = 192
    assert simulate(p, ()).curve.tolist() == [0, 256, 64, 128, 128, 128, 128, 192]
    s = simulate(p, {a})
    assert s.at[a] == 3 and s.cost == 8 * 16  # LayerNormalization again before Y: 8 FLOPs an element
    # B writes b over a's original copy, which dies there (slot 3); x lives on to the duplicate
    # (slot 6), which writes a' and two statistics (x, c, a', 2 x 64 = 320); at Y (slot 7)
    # c, a' and y: 3 x 64 = 192
    assert s.curve.tolist() == [0, 256, 128, 128, 128, 128, 320, 192]


def test_random_and_contrib_ops_recomputable_by_the_rule():
    def op(op_type: str, domain: str = "", outputs: int = 1) -> Op:
        return Op(0, "n", op_type, domain, ("x",), tuple(f"o{i}" for i in range(outputs)))

    assert recomputable(op("Split", outputs=3)) and recomputable(op("BatchNormalization", outputs=3))
    assert recomputable(op("Gelu", "com.microsoft")) and recomputable(op("BatchNormInternal", "com.microsoft", 5))
    assert not recomputable(op("Dropout", outputs=2)) and not recomputable(op("BiasDropout", "com.microsoft", 2))
    assert not recomputable(op("InPlaceAccumulatorV2", "com.microsoft"))
    assert not recomputable(op("ReluGrad", "com.microsoft"))  # gradients are not on the list
    assert not recomputable(Op(0, "n", "If", "", ("c",), ("o",), captures=("x",)))


def _stats_model() -> onnx.ModelProto:
    """x [32, 32] -> (y, y_mean, y_istd) = LayerNormalization(x); two Transposes from y; t3 = Add(t2, x)
    (x's last reader); out = Add(t3, y). Transposes and Adds never share bytes (neither is in the
    in-place table), so the arena is easy to count."""
    nodes = [_ln("x", "y", "L", 32),
             helper.make_node("Transpose", ["y"], ["t1"], name="T1", perm=[1, 0]),
             helper.make_node("Transpose", ["t1"], ["t2"], name="T2", perm=[1, 0]),
             helper.make_node("Add", ["t2", "x"], ["t3"], name="T3"),
             helper.make_node("Add", ["t3", "y"], ["out"], name="O")]
    return make_model(nodes, [vi("x", [32, 32])], [vi("out", [32, 32])], _ln_inits(32))


def test_a_layernorm_with_statistics_is_recomputed_arena_by_hand_and_outputs_identical(tmp_path):
    model = _stats_model()
    src = tmp_path / "ln.onnx"
    onnx.save(model, src)
    unit = 32 * 32 * 4
    got = plan_with_budget(model, src, PlanOptions(), factor=0.8, algorithm="greedy")
    # without a budget: x, y, t1, t2 live at T2 (a Transpose writes beside its input), and
    # x, y, t2, t3 at T3: 4 units; the budget is 0.8 x 4 = 3.2 units
    assert got.original.plan.arena_size == 4 * unit
    assert got.rewritten is not None and got.choice is not None
    # y is freed after T1 and written again before O, so x lives on to the duplicate: T1 x, y,
    # t1 = 3 units; T2 x, t1, t2 = 3; T3 x, t2, t3 = 3; the duplicate x, t3, y' = 3 units (its
    # statistics, optional and unread, are left unnamed: onnxruntime would hold them to the
    # end of the run); O t3, y', out = 3 units
    assert got.planned.plan.arena_size == 3 * unit
    dup = [n for n in got.rewritten.graph.node if n.name.endswith("__remat")]
    assert [n.op_type for n in dup] == ["LayerNormalization"] and len(dup[0].output) == 1
    assert all(o not in {"y", "y_mean", "y_istd"} for o in dup[0].output)
    assert got.extra == 8 * 32 * 32
    onnx.checker.check_model(got.rewritten)
    from onnxmem.runtime.ort import make_session

    x = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    want = make_session(model).run(None, {"x": x})
    have = make_session(got.rewritten).run(None, {"x": x})
    assert [w.tobytes() for w in want] == [h.tobytes() for h in have]


def test_cli_rewrites_a_split_and_verifies_against_the_original(tmp_path):
    # x [33, 32] -> (p [32, 32], q [1, 32]) = Split(x); two Transposes from p; t3 = x t2 [33, 32]
    # (x's last reader); o = t3 + q; out = p o^T [32, 33]: q is read again at O, p at Out; the
    # duplicate Split before Out writes p' and q' (unread, it dies at once). No node here is in
    # the in-place table.
    nodes = [helper.make_node("Split", ["x", "rows"], ["p", "q"], name="S", axis=0),
             helper.make_node("Transpose", ["p"], ["t1"], name="T1", perm=[1, 0]),
             helper.make_node("Transpose", ["t1"], ["t2"], name="T2", perm=[1, 0]),
             helper.make_node("Gemm", ["x", "t2"], ["t3"], name="T3"),
             helper.make_node("Add", ["t3", "q"], ["o"], name="O"),
             helper.make_node("Gemm", ["p", "o"], ["out"], name="Out", transB=1)]
    src, out = tmp_path / "s.onnx", tmp_path / "r.onnx"
    rows = numpy_helper.from_array(np.array([32, 1], np.int64), "rows")
    onnx.save(make_model(nodes, [vi("x", [33, 32])], [vi("out", [32, 33])], [rows]), src)
    r = CliRunner().invoke(main, ["plan", str(src), "--budget", "0.8x", "--remat", "greedy", "--rewrite-out", str(out)])
    assert r.exit_code == 0, r.output
    rewritten = onnx.load(str(out))
    onnx.checker.check_model(rewritten)
    dup = [n for n in rewritten.graph.node if n.name.endswith("__remat")]
    assert dup and all(n.op_type == "Split" and len(n.output) == 2 for n in dup)
    assert all(o not in {"p", "q"} for n in dup for o in n.output)
    # unbudgeted: at T3 x 4,224 + p 4,096 + q 128 + t2 4,096 + t3 4,224 = 16,768 B (16.375 KiB);
    # the budget is 0.8x of it: 13,414.4 -> 13,414 B (13.10 KiB). Rewritten, p is freed after T1
    # and comes back before Out, x living on to the duplicate: T2 x + q + t1 + t2 = 12,544,
    # T3 x + q + t2 + t3 = 12,672, O x + q + t3 + o = 4,224 + 128 + 4,224 + 4,224 = 12,800, the
    # duplicate x + o + p' + q' = 12,672, Out o + p' + out = 12,544 B
    assert "budget       13.10 KiB (13,414 B)   arena without a budget 16.38 KiB (16,768 B)" in r.output
    arena = int(r.output.split("arena ", 1)[1].split("(", 1)[1].split(" B)", 1)[0].replace(",", ""))
    assert arena == 12800
    r = CliRunner().invoke(main, ["verify", str(out), "--original", str(src)])
    assert r.exit_code == 0, r.output
    assert "outputs identical, bit for bit" in r.output


@pytest.mark.parametrize("op,kind", [("Dropout", int), ("RandomNormalLike", float)])
def test_verify_seeds_each_random_op_alike_in_both_models(op, kind):
    model = make_model([helper.make_node(op, ["x"], ["r"], name="R")], [vi("x", [1, 4])], [vi("r", [1, 4])])
    a, b = seed_random_ops(model), seed_random_ops(model)
    seed = [x for x in a.graph.node[0].attribute if x.name == "seed"]
    assert len(seed) == 1 and isinstance(helper.get_attribute_value(seed[0]), kind)
    assert a.SerializeToString() == b.SerializeToString()
    assert not any(x.name == "seed" for x in model.graph.node[0].attribute)  # the caller's model untouched


def test_annotate_accepts_a_missing_schema_only_when_the_model_given_has_it(tmp_path):
    # onnxruntime's training graphs use LayerNormalization at opset 15, where onnx has no schema
    # for it: the model file fails onnx.checker, and its annotated copy with the same first error
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="R"),
             helper.make_node("LayerNormalization", ["r", "sc", "bi"], ["y"], name="L", axis=-1),
             helper.make_node("Neg", ["y"], ["z"], name="N")]
    model = make_model(nodes, [vi("x", [4, 16])], [vi("z", [4, 16])], LN_INITS, opset=15,
                       value_info=[vi("r", [4, 16]), vi("y", [4, 16])])
    src, out = tmp_path / "ln.onnx", tmp_path / "a.onnx"
    onnx.save(model, src)
    with pytest.raises(onnx.checker.ValidationError, match="No Op registered for LayerNormalization"):
        onnx.checker.check_model(model)
    r = CliRunner().invoke(main, ["plan", str(src), "--annotate", str(out)])
    assert r.exit_code == 0, r.output
    with pytest.raises(onnx.checker.ValidationError, match="No Op registered for LayerNormalization"):
        onnx.checker.check_model(onnx.load(str(out)))
    # any other checker error is refused as before (tests/test_hostile.py: test_annotate_that_fails_leaves_no_plan)


def test_a_training_graph_rewrite_verifies_with_its_gradients_and_a_change_is_caught(tmp_path):
    # onnxruntime's SqueezeNet training step (Dropout, ConcatTraining, ConvGrad): the rewrite's
    # outputs and every gradient buffer against the original's run; then a duplicate changed
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "models" / "training" / "squeezenet.train.onnx"
    out = tmp_path / "fit.onnx"
    r = CliRunner().invoke(main, ["plan", str(src), "--budget", "0.8x", "--remat", "greedy", "--rewrite-out", str(out)])
    assert r.exit_code == 0, r.output
    graph_outputs = len(onnx.load(str(src), load_external_data=False).graph.output)
    r = CliRunner().invoke(main, ["verify", str(out), "--original", str(src)])
    assert r.exit_code == 0, r.output
    # the loss, 50 accumulator flags and the 50 gradients they wrote
    assert f"all {2 * graph_outputs - 1} outputs identical, bit for bit" in r.output
    bad = onnx.load(str(out), load_external_data=False)
    dup = next(n for n in bad.graph.node if n.name.endswith("__remat") and n.op_type == "Relu")
    dup.op_type = "Sigmoid"
    onnx.save(bad, out)
    r = CliRunner().invoke(main, ["verify", str(out), "--original", str(src)])
    assert r.exit_code == 3 and "differs from the original's" in r.output


def test_sinks_run_right_after_what_they_read():
    # S reads a and nothing reads S (a gradient's accumulator): it moves from the end to after A
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="A"), helper.make_node("Sigmoid", ["a"], ["b"], name="B"),
             helper.make_node("Tanh", ["b"], ["c"], name="C"), helper.make_node("Neg", ["c"], ["y"], name="Y"),
             helper.make_node("ReduceSum", ["a"], ["s"], name="S", keepdims=0)]
    view, order = file_order_view(make_model(nodes, [vi("x", [1, 16])], [vi("y", [1, 16]), vi("s", [])]))
    early = sinks_early(view, order)
    assert [view.ops[k].name for k in early] == ["A", "S", "B", "C", "Y"]
    assert sinks_early(view, early) == early

