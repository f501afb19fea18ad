"""Training graphs: gradient-op shape rules, the caller's state outside the arena, which
tensors of a training step share bytes, and the committed training fixtures.

The hand-built graph is a two-layer MLP's training step written out node by node as
onnxruntime's artifact generator writes it (Gemm, SoftmaxCrossEntropyLossGrad, ReluGrad,
InPlaceAccumulatorV2 ...). Tests that run the graphs need onnxruntime's training kernels
(``make training-env``); they skip without them.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.analysis.aliasing import RULES, alias_layout
from onnxmem.core.errors import ShapeError
from onnxmem.core.problem import live_bytes
from onnxmem.graph import build_view
from onnxmem.model import caller_state, load_model
from onnxmem.planning.pipeline import PlanOptions, plan_loaded, plan_model
from onnxmem.proof.plan import prove_plan
from onnxmem.shapes import infer_shapes
from onnxmem.shapes.training import TRAINING_RULES

from .conftest import MODELS
from .helpers import vi

TRAINING = MODELS / "training"
CATALOG = json.loads((TRAINING / "catalog.json").read_text())
MS = "com.microsoft"

# sizes of the hand-built MLP: batch N, inputs D, hidden H, classes C (float32)
N, D, H, C = 4, 8, 16, 4


def mlp_training_graph(batch: int | str = N) -> onnx.ModelProto:
    """``x -> Gemm -> Relu -> Gemm -> SoftmaxCrossEntropyLoss`` and its backward pass, node by
    node, with both layers trainable and one InPlaceAccumulatorV2 per parameter."""
    ms = {"domain": MS}
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h1"], name="fc1", transB=1),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu"),
        helper.make_node("Gemm", ["a1", "W2", "b2"], ["logits"], name="fc2", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss", "log_prob"], name="loss",
                         reduction="mean"),
        helper.make_node("SoftmaxCrossEntropyLossGrad", ["loss_grad", "log_prob", "labels"], ["logits_grad"],
                         name="loss_grad_op", reduction="mean", **ms),
        helper.make_node("ReduceSum", ["logits_grad", "axes0"], ["db2"], name="db2_sum", keepdims=0),
        helper.make_node("Identity", ["db2"], ["b2_grad"], name="db2_id"),
        helper.make_node("Gemm", ["logits_grad", "a1"], ["W2_grad"], name="dW2", transA=1),
        helper.make_node("Gemm", ["logits_grad", "W2"], ["a1_grad"], name="da1"),
        helper.make_node("ReluGrad", ["a1_grad", "a1"], ["h1_grad"], name="relu_grad", **ms),
        helper.make_node("ReduceSum", ["h1_grad", "axes0"], ["db1"], name="db1_sum", keepdims=0),
        helper.make_node("Identity", ["db1"], ["b1_grad"], name="db1_id"),
        helper.make_node("Gemm", ["h1_grad", "x"], ["W1_grad"], name="dW1", transA=1),
    ]
    params = {"W1": [H, D], "b1": [H], "W2": [C, H], "b2": [C]}
    for p in params:
        nodes.append(helper.make_node("InPlaceAccumulatorV2", [f"{p}_grad.buffer", f"{p}_grad", "lazy_reset_grad"],
                                      [f"{p}_grad.out"], name=f"acc_{p}", **ms))
    inputs = [vi("x", [batch, D]), vi("labels", [batch], TensorProto.INT64)]
    inputs += [vi(p, s) for p, s in params.items()]
    inputs += [vi(f"{p}_grad.buffer", s) for p, s in params.items()]
    inputs.append(vi("lazy_reset_grad", [1], TensorProto.BOOL))
    outputs = [vi("loss", [])] + [vi(f"{p}_grad.out", [1], TensorProto.BOOL) for p in params]
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "loss_grad"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0")]
    g = helper.make_graph(nodes, "mlp_training", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m


def _plan(model: onnx.ModelProto, tmp_path, **opts):
    path = tmp_path / "mlp_training.onnx"
    onnx.save(model, path)
    return plan_loaded(model, path, PlanOptions(**{"order": "file", "solver": "exact", "alignment": 1, **opts}))


# ---------------------------------------------------------------- shapes by rule


def test_every_gradient_gets_its_shape_by_rule():
    shapes = infer_shapes(mlp_training_graph())
    expected = {
        "logits_grad": (N, C), "db2": (C,), "b2_grad": (C,), "W2_grad": (C, H), "a1_grad": (N, H),
        "h1_grad": (N, H), "db1": (H,), "b1_grad": (H,), "W1_grad": (H, D), "W1_grad.out": (1,),
    }
    for name, shape in expected.items():
        assert shapes.shapes[name] == shape, name
    assert shapes.sources["logits_grad"] == "training-rule"  # onnx does not know the op
    assert shapes.dtypes["W1_grad.out"] == TensorProto.BOOL


def test_symbolic_batch_names_the_graph_input_dim():
    model = mlp_training_graph("batch")
    with pytest.raises(ShapeError, match=r"--dim batch=N"):
        infer_shapes(model)
    assert infer_shapes(model, dims={"batch": N}).shapes["W1_grad"] == (H, D)


@pytest.mark.parametrize(("op", "inputs", "attrs", "expected"), [
    ("ConvGrad", [(1, 3, 8, 8), (1, 2, 8, 8), (3, 2, 3, 3)], {}, [(1, 2, 8, 8), (3, 2, 3, 3), (3,)]),
    ("ConvTransposeGrad", [(1, 4, 8, 8), (1, 6, 4, 4), (6, 2, 2, 2)], {"group": 2},
     [(1, 6, 4, 4), (6, 2, 2, 2), (4,)]),
    ("BatchNormalizationGrad", [(2, 3, 4, 4), (2, 3, 4, 4), (3,), (3,), (3,)], {}, [(2, 3, 4, 4), (3,), (3,)]),
    ("FusedMatMul", [(2, 5, 3), (4, 3)], {"transB": 1}, [(2, 5, 4)]),
    ("FusedMatMul", [(3, 5), (3, 4)], {"transA": 1}, [(5, 4)]),
    ("BatchNormInternal", [(2, 3, 4, 4), (3,), (3,), (3,), (3,)], {}, [(2, 3, 4, 4), (3,), (3,), (3,), (3,)]),
    ("LSTMTraining", [(7, 2, 5), (1, 24, 5), (1, 24, 6)], {"hidden_size": 6},
     [(7, 1, 2, 6), (1, 2, 6), (1, 2, 6), (7, 1, 2, 6), (7, 1, 2, 24)]),
    ("ConcatTraining", [(2, 3), (2, 5)], {"axis": 1}, [(2, 8), (2,)]),
])
def test_rule_from_the_schema(op, inputs, attrs, expected):
    node = helper.make_node(op, [f"i{k}" for k in range(len(inputs))], [f"o{k}" for k in range(len(expected))],
                            domain=MS, **attrs)
    found = TRAINING_RULES[(MS, op)](node, [(TensorProto.FLOAT, s) for s in inputs], [None] * len(inputs))
    assert [None if t is None else t[1] for t in found[: len(expected)]] == expected


def test_rules_leave_unknown_what_they_cannot_type():
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transBatchA=1)
    assert TRAINING_RULES[(MS, "FusedMatMul")](node, [(1, (2, 3, 4)), (1, (4, 5))], [None, None]) == [None]
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS)
    assert TRAINING_RULES[(MS, "FusedMatMul")](node, [(1, (2, 3)), (1, (4, 5))], [None, None]) == [None]


# ---------------------------------------------------------------- the caller's state


def test_parameters_buffers_and_flag_are_the_callers():
    model = mlp_training_graph()
    state = caller_state(model)
    assert state == {
        "W1": "parameter", "b1": "parameter", "W2": "parameter", "b2": "parameter",
        "W1_grad.buffer": "gradient-accumulation-buffer", "b1_grad.buffer": "gradient-accumulation-buffer",
        "W2_grad.buffer": "gradient-accumulation-buffer", "b2_grad.buffer": "gradient-accumulation-buffer",
        "lazy_reset_grad": "flag",
    }
    view = build_view(model, infer_shapes(model))
    assert all(view.tensors[n].kind == "weight" for n in state)
    assert view.tensors["x"].kind == "input" and view.tensors["labels"].kind == "input"


def test_a_frozen_parameter_sits_between_the_labels_and_the_buffers():
    model = mlp_training_graph()
    # freeze W1: no gradient, no accumulator; it stays a graph input after the labels
    keep = [n for n in model.graph.node if n.name not in ("dW1", "acc_W1")]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    drop = {"W1_grad.buffer", "W1_grad.out"}
    for field in (model.graph.input, model.graph.output):
        kept = [v for v in field if v.name not in drop]
        del field[:]
        field.extend(kept)
    assert caller_state(model)["W1"] == "frozen-parameter"


def _freeze(model: onnx.ModelProto, param: str) -> None:
    """Freeze ``param`` of a training graph as the generator does: no accumulator, no buffer
    (its gradient, if still computed, is read by nothing)."""
    keep = [n for n in model.graph.node if not (n.op_type == "InPlaceAccumulatorV2" and n.input[1] == f"{param}_grad")]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    drop = {f"{param}_grad.buffer", f"{param}_grad.out", f"{param}_grad.accumulation.buffer",
            f"{param}_grad.accumulation.out"}
    for field in (model.graph.input, model.graph.output):
        kept = [v for v in field if v.name not in drop]
        del field[:]
        field.extend(kept)


def _labels_through(model: onnx.ModelProto, op: str) -> None:
    """The loss and its gradient read the labels through ``op`` (a model that computes its own
    loss reads ``labels.view(-1)``), as the new first node."""
    label = next(n.input[1] for n in model.graph.node if n.op_type == "SoftmaxCrossEntropyLoss")
    for n in model.graph.node:
        n.input[:] = [f"{label}_flat" if x == label else x for x in n.input]
    if op == "Reshape":
        model.graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "flat_shape"))
        node = helper.make_node("Reshape", [label, "flat_shape"], [f"{label}_flat"], name="labels_flat")
    else:
        node = helper.make_node("Cast", [label], [f"{label}_flat"], name="labels_flat", to=TensorProto.INT64)
    model.graph.node.insert(0, node)


@pytest.mark.parametrize("op", ["Reshape", "Cast"])
def test_frozen_parameters_are_found_when_the_labels_pass_through_a_node(op, tmp_path):
    # W1 frozen before every trainable parameter (found after the labels, through the node),
    # W2 frozen between trainable ones (found after the first trainable parameter)
    model = mlp_training_graph()
    for p in ("W1", "W2"):
        _freeze(model, p)
    _labels_through(model, op)
    state = caller_state(model)
    assert state["W1"] == state["W2"] == "frozen-parameter" and state["b1"] == "parameter"
    assert "x" not in state and "labels" not in state
    planned = _plan(model, tmp_path)
    assert {"W1", "W2"}.isdisjoint(t.name for t in planned.plan.tensors)
    assert {"x", "labels"} <= {t.name for t in planned.plan.tensors}
    outside = {row["name"]: row["reason"] for row in planned.plan.extra["outside"]}
    assert outside["W1"] == outside["W2"] == "frozen-parameter"
    assert prove_plan(planned.plan, planned.view) == []


def test_bert_frozen_pooler_and_embeddings_stay_outside_the_arena(tmp_path):
    # the BERT-style training graph with its pooler frozen and the labels read as
    # labels.view(-1): the frozen embeddings (8,192,000 + 131,072 B) and the pooler
    # (262,144 + 1,024 B) are the caller's, never the arena's
    model = onnx.load(TRAINING / "bert.train.onnx", load_external_data=False)
    for p in ("pool.weight", "pool.bias"):
        _freeze(model, p)
    _labels_through(model, "Reshape")
    state = caller_state(model)
    frozen = {n for n, r in state.items() if r == "frozen-parameter"}
    assert frozen == {"pos", "embed.weight", "pool.weight", "pool.bias"}
    path = TRAINING / "bert.train.onnx"
    planned = plan_loaded(model, path, PlanOptions())
    assert frozen.isdisjoint(t.name for t in planned.plan.tensors)
    assert prove_plan(planned.plan, planned.view) == []


# ---------------------------------------------------------------- aliasing and the arena by hand


def test_gradients_never_run_in_place_and_the_forward_relu_does():
    # onnxruntime declares MayInplace(0, 0) for the element-wise gradients on CUDA only (their CPU
    # kernels declare nothing, and SigmoidGrad's writes dX before it has read dY); a plan that
    # must hold on both providers leaves them all out
    for op in ("ReluGrad", "GeluGrad", "FastGeluGrad", "TanhGrad", "SigmoidGrad", "DropoutGrad", "Scale"):
        assert (MS, op) not in RULES, op
    model = mlp_training_graph()
    view = build_view(model, infer_shapes(model))
    groups = alias_layout(view, tuple(range(len(view.ops)))).groups
    # the forward Relu writes over h1 (in place), the Identities view the bias gradients;
    # ReluGrad's h1_grad keeps a buffer apart from a1_grad
    assert groups == {"h1": ("h1", "a1"), "db2": ("db2", "b2_grad"), "db1": ("db1", "b1_grad")}


def test_mlp_training_arena_by_hand(tmp_path):
    # File order, alignment 1, inputs and outputs in the arena. Steps 0..16; live spans [start, end):
    #   x 128 B [0, 13)          labels 32 [0, 5)          {h1, a1} 256 [0, 10) (Relu in place)
    #   logits 64 [2, 4)         loss 4 [3, 17) (output)   log_prob 64 [3, 5)
    #   logits_grad 64 [4, 9)    {db2, b2_grad} 16 [5, 17) W2_grad 256 [7, 16)
    #   a1_grad 256 [8, 10)      h1_grad 256 [9, 13) (ReluGrad not in place)
    #   {db1, b1_grad} 64 [10, 15)  W1_grad 512 [12, 14)
    #   four bool flags 1 B each from steps 13, 14, 15, 16 to the end
    # Step 12 (dW1) holds ({h1, a1} died at step 10, a1_grad at step 10)
    #   x 128 + loss 4 + {db2,b2_grad} 16 + W2_grad 256 + h1_grad 256 + {db1,b1_grad} 64
    #   + W1_grad 512 = 1236 B, the most of any step; step 9 (ReluGrad) holds
    #   x 128 + {h1,a1} 256 + loss 4 + {db2,b2_grad} 16 + W2_grad 256 + a1_grad 256 + h1_grad 256
    #   = 1172 B; step 8: 128 + 256 + 4 + logits_grad 64 + 16 + 256 + a1_grad 256 = 980 B.
    # Parameters, buffers and the flag input are the caller's: not in the arena.
    planned = _plan(mlp_training_graph(), tmp_path)
    plan = planned.plan
    assert plan.lower_bound == 1236 and plan.arena_size == 1236
    assert plan.solver["status"] == "optimal"
    assert {t.name for t in plan.tensors}.isdisjoint(caller_state(mlp_training_graph()))
    outside = {row["name"]: row["reason"] for row in plan.extra["outside"]}
    assert outside["W1"] == "parameter" and outside["lazy_reset_grad"] == "flag"
    assert prove_plan(plan, planned.view) == []
    assert live_bytes(planned.liveness.problem)[9] == 1172
    # without views and in-place outputs each member is a buffer of its own; step 12 holds
    # one member of each group (b2_grad, b1_grad), so the peak is the same 1236 B, while
    # step 1 (the Relu) holds h1 and a1 side by side:
    #   x 128 + labels 32 + h1 256 + a1 256 = 672 B instead of x 128 + labels 32 + {h1,a1} 256 = 416 B
    flat = _plan(mlp_training_graph(), tmp_path, inplace=False)
    assert flat.plan.lower_bound == 1236
    assert live_bytes(flat.liveness.problem)[1] == 672
    assert live_bytes(planned.liveness.problem)[1] == 416


def test_a_corrupted_training_plan_is_caught(tmp_path):
    planned = _plan(mlp_training_graph(), tmp_path)
    plan = planned.plan
    w2 = plan.tensor("W2_grad")
    bad = tuple(dataclasses.replace(t, offset=w2.offset) if t.name == "W1_grad" else t for t in plan.tensors)
    findings = prove_plan(dataclasses.replace(plan, tensors=bad), planned.view)
    assert any(f.kind == "overlap" and {f.tensor, f.other} == {"W1_grad", "W2_grad"} for f in findings)


# ---------------------------------------------------------------- the committed training set


def test_training_set_covers_the_architectures():
    assert len(CATALOG) >= 8
    for name, entry in CATALOG.items():
        assert entry["trainable_parameters"] > 0 and entry["frozen_parameters"] > 0, name
        for kind in ("train", "eval"):
            assert (TRAINING / f"{name}.{kind}.onnx").is_file()


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_training_fixture_plans_with_no_flags(name):
    path = TRAINING / f"{name}.train.onnx"
    planned = plan_model(path)
    plan = planned.plan
    assert plan.arena_size >= plan.lower_bound > 0
    assert prove_plan(plan, planned.view) == []
    # every shape by inference or rule: none from the exporter's value_info, none measured
    assert set(planned.shapes.sources.values()) <= {"onnx", "evaluated", "training-rule"}
    state = caller_state(load_model(path))
    assert {r["name"] for r in plan.extra["outside"]} == set(state)
    assert {"parameter", "gradient-accumulation-buffer", "flag"} <= set(state.values())
    assert not {t.name for t in plan.tensors} & set(state)


# ---------------------------------------------------------------- execution (training runtime only)


def test_mlp_training_step_runs_in_the_arena(tmp_path):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from onnxmem.runtime.training import execute_training

    planned = _plan(mlp_training_graph(), tmp_path)
    run = execute_training(planned.plan, planned.model, planned.view)
    assert run.findings == () and not run.changed_result
    grads = {c.name: c for c in run.outputs if c.name.endswith(".buffer")}
    assert set(grads) == {"W1_grad.buffer", "b1_grad.buffer", "W2_grad.buffer", "b2_grad.buffer"}
    assert all(c.identical for c in run.outputs)


def test_a_clobbering_training_plan_fails_execution(tmp_path):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from onnxmem.runtime.training import execute_training

    planned = _plan(mlp_training_graph(), tmp_path)
    plan = planned.plan
    a1 = plan.tensor("a1")  # saved for the backward pass: read by dW2 and ReluGrad
    bad = tuple(dataclasses.replace(t, offset=a1.offset) if t.name == "W2_grad" else t for t in plan.tensors)
    run = execute_training(dataclasses.replace(plan, tensors=bad), planned.model, planned.view)
    assert any(f.kind == "clobber" and f.tensor == "a1" for f in run.findings)


#: the training fixtures with an op onnxruntime's CPU provider has no kernel for (run as its stand-in)
NO_CPU_KERNEL = {"unet": "ConvTransposeGrad"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CATALOG))
def test_training_fixture_verifies_in_one_arena_with_its_eval_graph(name):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from onnxmem.runtime.training import execute_in_one_arena
    from onnxmem.zoo.fixtures import fill_weights

    runs = []
    for kind in ("train", "eval"):
        path = TRAINING / f"{name}.{kind}.onnx"
        planned = plan_model(path)
        model = load_model(path)
        fill_weights(model)
        runs.append((planned.plan, model, planned.view))
    size, results = execute_in_one_arena(runs)
    assert size == max(plan.arena_size for plan, _, _ in runs)
    for result in results:
        assert result.findings == () and all(c.identical for c in result.outputs)
    assert any(NO_CPU_KERNEL[name] in n for n in results[0].notes) == (name in NO_CPU_KERNEL)
    assert sum(1 for c in results[0].outputs if c.name.endswith(".accumulation.buffer")) == \
        sum(1 for r in runs[0][2].outside.values() if r == "gradient-accumulation-buffer")


# ---------------------------------------------------------------- several models in one arena


def feature_extractor() -> onnx.ModelProto:
    """A frozen inference model whose output ``x`` [N, D] is the MLP training graph's input."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x0", "W0", "b0"], ["f"], name="fc0", transB=1),
             helper.make_node("Relu", ["f"], ["x"], name="relu0")]
    inits = [numpy_helper.from_array(rng.standard_normal((D, 12)).astype(np.float32), "W0"),
             numpy_helper.from_array(np.zeros(D, np.float32), "b0")]
    g = helper.make_graph(nodes, "features", [vi("x0", [N, 12])], [vi("x", [N, D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _pipeline(tmp_path):
    from onnxmem.planning.program import plan_program

    first = tmp_path / "features.onnx"
    onnx.save(feature_extractor(), first)
    opts = PlanOptions(order="file", solver="exact", alignment=1)
    a = plan_loaded(feature_extractor(), first, opts)
    b = _plan(mlp_training_graph(), tmp_path)
    return a, b, plan_program([a, b], ["x"], solver="exact")


def test_pipeline_hands_its_tensor_over_in_the_arena(tmp_path):
    # the extractor's arena: x0 192 B at step 0 with {f, x} 128 B (Relu in place) = 320 B.
    # x stays where the extractor wrote it and the training step reads it there: one buffer
    # live from the extractor's first step to dW1 (the training step's step 12), whose
    # 1236 B (x included, see test_mlp_training_arena_by_hand) set the program's peak.
    a, b, program = _pipeline(tmp_path)
    assert a.plan.arena_size == 320 and b.plan.arena_size == 1236
    assert program.arena_size == program.lower_bound == 1236
    assert program.handovers == {"x": 0}
    first, second = program.plans
    assert first.tensor("x").offset == second.tensor("x").offset
    assert prove_plan(first, a.view) == [] and prove_plan(second, b.view) == []


def test_train_and_eval_share_an_arena_as_large_as_the_larger(tmp_path):
    from onnxmem.planning.program import plan_program

    train = plan_model(TRAINING / "mlp.train.onnx")
    ev = plan_model(TRAINING / "mlp.eval.onnx")
    program = plan_program([train, ev])
    assert program.arena_size == max(train.plan.arena_size, ev.plan.arena_size) == program.lower_bound
    assert all(p.arena_size == program.arena_size for p in program.plans)


def test_a_handover_must_pass_from_one_model_to_the_next(tmp_path):
    from onnxmem.core.errors import OnnxmemError
    from onnxmem.planning.program import plan_program

    a, b, _ = _pipeline(tmp_path)
    with pytest.raises(OnnxmemError, match="not a graph output of one model and a graph input of the next"):
        plan_program([b, a], ["x"])


def test_pipeline_runs_in_one_arena(tmp_path):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from onnxmem.runtime.training import execute_in_one_arena

    a, b, program = _pipeline(tmp_path)
    size, results = execute_in_one_arena([(program.plans[0], a.model, a.view), (program.plans[1], b.model, b.view)],
                                         handovers=program.handovers)
    assert size == 1236
    for result in results:
        assert result.findings == () and all(c.identical for c in result.outputs)


def test_verify_without_the_training_runtime_says_where_to_run(tmp_path):
    import importlib.util

    from click.testing import CliRunner

    from onnxmem.cli.main import main

    if importlib.util.find_spec("onnxruntime.training") is not None:
        pytest.skip("this runtime has the training kernels")
    path = tmp_path / "mlp_training.onnx"
    onnx.save(mlp_training_graph(), path)
    r = CliRunner().invoke(main, ["verify", str(path)])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "no training kernels" in r.output and "make training-env" in r.output
    assert CliRunner().invoke(main, ["verify", str(path), "--static-only"]).exit_code == 0


def test_train_eval_and_pipeline_verify_in_one_arena_from_the_command_line(tmp_path):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    def run(*args):
        r = CliRunner().invoke(main, [str(a) for a in args])
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output
        return r.output

    train, ev, program = TRAINING / "mlp.train.onnx", TRAINING / "mlp.eval.onnx", tmp_path / "program.json"
    run("plan", train, ev, "-o", program)
    out = run("verify", train, ev, "--plan", program)
    assert "executed  model 0: 20 nodes" in out and "executed  model 1: 7 nodes" in out
    assert out.rstrip().endswith("verified") and "MISMATCH" not in out
    # the extractor hands x to the hand-built training step (test_pipeline_hands_its_tensor_over_in_the_arena)
    features, step = tmp_path / "features.onnx", tmp_path / "mlp_training.onnx"
    onnx.save(feature_extractor(), features)
    onnx.save(mlp_training_graph(), step)
    flags = ["--order", "file", "--solver", "exact", "--alignment", "1"]
    out = run("plan", features, step, "--pipeline", *flags, "-o", tmp_path / "pipeline.json")
    assert "arena        1.21 KiB (1,236 B)" in out and "'x' (model 0 -> 1)" in out
    out = run("verify", features, step, "--plan", tmp_path / "pipeline.json")
    assert "handing over 1 tensors" in out and out.rstrip().endswith("verified")
