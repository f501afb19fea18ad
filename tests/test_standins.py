"""The standard-op stand-in of ConvTransposeGrad (onnxmem.runtime.standins): its outputs are the
gradients of onnxruntime's own ConvTranspose kernel, and a plan run with it in the arena is
verified, or caught when wrong, like any other."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.core.errors import RuntimeBackendError
from onnxmem.runtime.standins import missing_kernel, stand_in_model
from tests.helpers import make_model, vi

F = TensorProto.FLOAT


def _forward(x, w, b, attrs):
    """onnxruntime's ConvTranspose of ``x`` by ``w`` (and bias ``b``): the op whose gradient is checked."""
    ins = [vi("x", list(x.shape)), vi("w", list(w.shape))] + ([vi("b", list(b.shape))] if b is not None else [])
    node = helper.make_node("ConvTranspose", [i.name for i in ins], ["y"], **attrs)
    m = make_model([node], ins, [vi("y", None)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"x": x, "w": w} | ({"b": b} if b is not None else {})
    return sess.run(None, feeds)[0].astype(np.float64)


def _stand_in(dy, x, w, attrs):
    node = helper.make_node("ConvTransposeGrad", ["i0", "i1", "i2"], ["o0", "o1", "o2"], domain="com.microsoft",
                            name="g", **attrs)
    rank = w.ndim - 2
    declared = [("i0", F, tuple(f"d{k}" for k in range(rank + 2))), ("i1", F, tuple(f"e{k}" for k in range(rank + 2))),
                ("i2", F, tuple(w.shape))]
    m = stand_in_model(node, "g", declared, ["o0", "o1", "o2"], 10)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"i0": dy, "i1": x, "i2": w})


CASES = [  # rank, strides, pads, dilations, group, output padding (below the stride: onnxruntime's rule)
    (1, 2, 0, 1, 1, 0), (1, 3, 1, 2, 2, 2), (1, 1, 0, 2, 1, 0),
    (2, 2, 0, 1, 1, 0), (2, 2, 1, 1, 1, 1), (2, 1, 1, 2, 2, 0), (2, 3, 0, 2, 1, 2), (2, 1, 0, 3, 1, 0),
    (3, 2, 0, 1, 1, 1), (3, 1, 1, 1, 2, 0),
]


@pytest.mark.parametrize("rank,s,p,d,g,op", CASES)
def test_stand_in_outputs_are_the_gradients_of_onnxruntimes_conv_transpose(rank, s, p, d, g, op):
    """The loss L = sum(ConvTranspose(X, W, B) * dY) is bilinear in X and W and linear in B, so
    sum(X' * dX) = L(X', W, 0), sum(W' * dW) = L(X, W', 0) and sum(B' * dB) = L(X, W, B') - L(X, W, 0)
    for every X', W', B': three random ones each pin the stand-in's dX, dW and dB to the gradients
    of onnxruntime's own forward kernel."""
    rng = np.random.default_rng(rank * 100 + s * 10 + p + d + g + op)
    n, cin, cout, k = 2, 4, 6, 3 if rank < 3 else 2
    spatial = {1: [7], 2: [5, 6], 3: [3, 4, 3]}[rank]
    attrs = {"strides": [s] * rank, "pads": [p] * (2 * rank), "dilations": [d] * rank, "group": g,
             "output_padding": [op] * rank}
    x = rng.standard_normal((n, cin, *spatial)).astype(np.float32)
    w = rng.standard_normal((cin, cout // g, *[k] * rank)).astype(np.float32)
    y = _forward(x, w, None, attrs)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx, dw, db = _stand_in(dy, x, w, attrs)
    assert dx.shape == x.shape and dw.shape == w.shape and db.shape == (cout,)

    def loss(xx, ww, bb):
        return float(np.sum(_forward(xx, ww, bb, attrs) * dy))

    for _ in range(3):
        x2 = rng.standard_normal(x.shape).astype(np.float32)
        w2 = rng.standard_normal(w.shape).astype(np.float32)
        b2 = rng.standard_normal((cout,)).astype(np.float32)
        for got, want in ((np.sum(x2 * dx, dtype=np.float64), loss(x2, w, None)),
                          (np.sum(w2 * dw, dtype=np.float64), loss(x, w2, None)),
                          (np.sum(b2 * db, dtype=np.float64), loss(x, w, b2) - loss(x, w, np.zeros_like(b2)))):
            assert got == pytest.approx(want, rel=1e-4, abs=1e-3)


@pytest.mark.parametrize("attrs,says", [
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, "auto_pad 'SAME_UPPER'"),
    ({"output_shape": [9, 9]}, "output_shape"),
    ({"strides": [2]}, "another rank"),
    ({"pads": [-1, 0, 0, 0]}, "negative pads"),
    ({"kernel_shape": [0, 2]}, "kernel_shape below 1"),
])
def test_attributes_outside_the_stand_in_are_refused_in_one_line(attrs, says):
    node = helper.make_node("ConvTransposeGrad", ["i0", "i1", "i2"], ["o0", "o1", "o2"], domain="com.microsoft",
                            **attrs)
    declared = [("i0", F, (1, 2, 8, 8)), ("i1", F, (1, 2, 4, 4)), ("i2", F, ("a", "b", "c", "d"))]
    with pytest.raises(RuntimeBackendError, match=says) as err:
        stand_in_model(node, "up\n\x1b[31m", declared, ["o0", "o1", "o2"], 10)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value) and "--static-only" in str(err.value)


def test_missing_kernel_reads_onnxruntimes_message():
    assert missing_kernel("NOT_IMPLEMENTED : Could not find an implementation for ConvTransposeGrad(1) node") == \
        "ConvTransposeGrad"
    assert missing_kernel("FAIL : Fatal error: com.microsoft:ConvTransposeGrad(-1) is not a registered function/op") \
        == "ConvTransposeGrad"
    assert missing_kernel("something else") is None


def _gradient_model() -> onnx.ModelProto:
    """y = ConvTranspose(x, W) (stride 2), then the ConvTransposeGrad of a Relu of y back to x, W and
    the bias: the node onnxruntime's CPU provider has no kernel for, outside a training graph."""
    rng = np.random.default_rng(3)
    w = onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 2, 2)).astype(np.float32), "W")
    attrs = {"strides": [2, 2], "pads": [0, 0, 0, 0], "kernel_shape": [2, 2], "group": 1, "dilations": [1, 1]}
    nodes = [helper.make_node("ConvTranspose", ["x", "W"], ["y"], name="up", **attrs),
             helper.make_node("Relu", ["y"], ["dy"], name="relu"),
             helper.make_node("ConvTransposeGrad", ["dy", "x", "W"], ["dx", "dW", "dB"], name="up_grad",
                              domain="com.microsoft", **attrs),
             helper.make_node("Add", ["dx", "x"], ["out"], name="add")]
    m = make_model(nodes, [vi("x", [1, 4, 8, 8])], [vi("out", [1, 4, 8, 8]), vi("dW", [4, 3, 2, 2]), vi("dB", [3])],
                   [w])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m


def test_a_node_without_a_cpu_kernel_runs_as_its_stand_in_in_the_arena(tmp_path):
    path = tmp_path / "grad.onnx"
    onnx.save(_gradient_model(), path)
    res = CliRunner().invoke(main, ["verify", str(path)])
    assert res.exit_code == 0, res.output
    assert "ConvTransposeGrad: onnxruntime has no CPU kernel for it, so its nodes ran as standard ops" in res.output
    assert "no whole-model onnxruntime run" in res.output and res.output.rstrip().endswith("verified")
    assert res.output.count(": ok, outside the arena: identical") == 3


def test_a_wrong_plan_is_caught_where_the_stand_in_writes(tmp_path):
    """The stand-in's dW put over ``x``, which the Add after it still reads: the run in the arena
    finds ``x`` clobbered by the stand-in's write."""
    from onnxmem.planning.pipeline import plan_model
    from onnxmem.runtime.arena import ExecutionOptions, execute_plan

    path = tmp_path / "grad.onnx"
    onnx.save(_gradient_model(), path)
    planned = plan_model(path)
    plan = planned.plan
    x = plan.tensor("x")
    bad = tuple(dataclasses.replace(t, offset=x.offset) if t.name == "dW" else t for t in plan.tensors)
    run = execute_plan(dataclasses.replace(plan, tensors=bad), planned.model, planned.view,
                       options=ExecutionOptions(keep_going=True))
    assert any(f.kind == "clobber" and f.tensor == "x" and f.node == "up_grad" for f in run.findings), run.findings


def test_the_whole_model_runs_with_its_stand_ins_inlined(tmp_path):
    """``verify --original``'s whole run of the original (onnxmem.remat.check): onnxruntime cannot
    load the model, so its ConvTransposeGrad is inlined as its stand-in's nodes at the model's
    opset, and the outputs equal the arena run's, bit for bit."""
    from onnxmem.planning.pipeline import plan_model
    from onnxmem.remat.check import compare_with_original
    from onnxmem.runtime.sessions import run_model

    model = _gradient_model()
    path = tmp_path / "grad.onnx"
    onnx.save(model, path)
    with pytest.raises(RuntimeBackendError, match="ConvTransposeGrad"):
        run_model(model, {"x": np.ones((1, 4, 8, 8), np.float32)}, ["out"])
    planned = plan_model(path)
    got = compare_with_original(planned.model, planned.plan, planned.view, model, rewritten_path=path,
                                original_path=path)
    assert [c.name for c in got.outputs] == ["out", "dW", "dB"]
    assert all(c.identical for c in got.outputs) and got.execution.stand_ins == ("ConvTransposeGrad",)


def test_inlining_with_groups_is_one_grouped_convolution_that_matches_the_stand_in_alone():
    """Groups cost no more nodes: the weight gradient is one Conv with the node's group."""
    from onnxmem.runtime.standins import inline

    node = helper.make_node("ConvTransposeGrad", ["dy", "x", "w"], ["dx", "dw", "db"], domain="com.microsoft",
                            name="g", strides=[2, 2], group=2, kernel_shape=[2, 2])
    m = make_model([node], [vi("dy", [1, 4, 8, 8]), vi("x", [1, 4, 4, 4]), vi("w", [4, 2, 2, 2])],
                   [vi("dx", None), vi("dw", None), vi("db", None)], opset=18)
    types = {"dy": (F, (1, 4, 8, 8)), "x": (F, (1, 4, 4, 4)), "w": (F, (4, 2, 2, 2))}
    whole = inline(m, types)
    assert all(n.op_type != "ConvTransposeGrad" for n in whole.graph.node)
    convs = [{a.name: a.i for a in n.attribute if a.name == "group"} for n in whole.graph.node if n.op_type == "Conv"]
    assert convs == [{"group": 2}, {"group": 2}]  # dX, then dW
    wide = helper.make_node("ConvTransposeGrad", ["dy", "x", "w"], ["dx", "dw", "db"], domain="com.microsoft",
                            name="g", strides=[2, 2], group=4096, kernel_shape=[2, 2])
    assert len(inline(make_model([wide], m.graph.input, m.graph.output, opset=18), types).graph.node) == \
        len(whole.graph.node)
    rng = np.random.default_rng(0)
    feeds = {"dy": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
             "x": rng.standard_normal((1, 4, 4, 4)).astype(np.float32),
             "w": rng.standard_normal((4, 2, 2, 2)).astype(np.float32)}
    sess = ort.InferenceSession(whole.SerializeToString(), providers=["CPUExecutionProvider"])
    dx, dw, db = sess.run(None, feeds)
    alone = _stand_in(feeds["dy"], feeds["x"], feeds["w"], {"strides": [2, 2], "group": 2, "kernel_shape": [2, 2]})
    for a, b in zip((dx, dw, db), alone):
        assert np.array_equal(a, b)
