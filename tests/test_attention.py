"""Attention: the Softmax writes its output over the scores, as onnxruntime's CPU kernel does.

An audio encoder's attention (MatMul -> scale -> mask -> Softmax -> MatMul)
peaks at the scores; onnxruntime runs the Softmax in place (its float kernel
declares ``MayInplace(0, 0)``), so a plan that keeps the scores and the
Softmax output apart needs twice the scores. The full size (1500 tokens, 384
channels, 6 heads: 51.5 MiB of scores) is measured by ``bench/bench_fold.py``.
"""

from __future__ import annotations

import onnx
import pytest

from onnxmem.model.generate import SCALINGS, attention_encoder
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.peak import comparable_peak, ort_peak
from onnxmem.verify.run import VerifyOptions, verify_plan

TOKENS, DIM, HEADS = 512, 48, 6
SCORES = HEADS * TOKENS * TOKENS * 4  # float [1, 6, 512, 512]
ACT = TOKENS * DIM * 4  # float [1, 512, 48]


def _plan(tmp_path, scale_at: str, mask: bool, **opts):
    path = tmp_path / f"attention_{scale_at}_{int(mask)}.onnx"
    onnx.save(attention_encoder(TOKENS, 0, dim=DIM, heads=HEADS, scale_at=scale_at, mask=mask), path)
    return path, plan_model(path, PlanOptions(**opts))


def _softmax(planned):
    op = next(op for op in planned.view.ops if op.op_type == "Softmax")
    return op.inputs[0], op.outputs[0]


def test_softmax_writes_over_the_scores(tmp_path):
    _, planned = _plan(tmp_path, "query", False)
    plan = planned.plan
    src, out = _softmax(planned)
    assert plan.tensor(out).group == plan.tensor(src).group
    assert plan.tensor(out).offset == plan.tensor(src).offset
    # the peak, at the scores' MatMul: x (the residual), the normalised input (v comes after
    # the Softmax), q, k^T and the scores, which the Softmax then overwrites
    assert plan.arena_size == plan.lower_bound == SCORES + 4 * ACT
    off = _plan(tmp_path, "query", False, inplace=False)[1].plan
    assert off.arena_size >= 2 * SCORES  # without sharing, scores and probabilities live together


@pytest.mark.parametrize("scale_at", SCALINGS)
@pytest.mark.parametrize("mask", [False, True])
def test_arena_at_or_below_onnxruntime_and_verified(tmp_path, scale_at, mask):
    path, planned = _plan(tmp_path, scale_at, mask)
    measured = ort_peak(planned.model, planned.view, level="disable", model_path=path)
    ort = comparable_peak(measured.peak, planned.view, planned.plan.io)
    assert ort is not None and planned.plan.arena_size <= ort, (planned.plan.arena_size, ort)
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view,
                         options=VerifyOptions())
    assert report.ok, report.first


def test_softmax_of_doubles_keeps_its_own_buffer():
    """onnxruntime's double kernels do not declare in-place use: neither does the rule."""
    from onnx import TensorProto, helper

    from onnxmem.analysis.aliasing import alias_groups

    from .helpers import file_order_view, make_model, vi

    for dtype, shared in ((TensorProto.FLOAT, True), (TensorProto.DOUBLE, False)):
        m = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["s"]),
                        helper.make_node("Neg", ["s"], ["y"])],
                       [vi("x", [2, 8], dtype)], [vi("y", [2, 8], dtype)])
        view, order = file_order_view(m)
        groups = alias_groups(view, order)
        assert ("s" in groups.get("r", ())) is shared, (dtype, groups)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_onnxruntime_softmax_is_correct_in_place_on_any_axis(op, axis):
    """The output bound over the input gives the bytes of an ordinary run (axes other than the
    last go through a transpose inside the kernel)."""
    import numpy as np
    from onnx import TensorProto, helper

    from onnxmem.runtime.ort import make_session

    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=axis)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    sess = make_session(m)
    expected = sess.run(None, {"x": x})[0]
    buf = x.copy()
    binding = sess.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, list(x.shape), buf.ctypes.data)
    binding.bind_output("y", "cpu", 0, np.float32, list(x.shape), buf.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(buf, expected)
