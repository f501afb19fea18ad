"""Attention: the Softmax keeps its own buffer, so the scores and the probabilities live together.

An audio encoder's attention (MatMul -> scale -> mask -> Softmax -> MatMul)
peaks at the scores. onnxruntime's CPU Softmax declares ``MayInplace(0, 0)``
(float), but its CUDA Softmax declares nothing, and a plan records no device:
the in-place table (:data:`onnxmem.analysis.aliasing.RULES`) admits only ops declared
on both, so the Softmax output never takes the scores' bytes and the peak
holds both. Where the Softmax reads the scores' MatMul directly, onnxruntime's
CPU session overwrites them and its peak is lower than the plan's by up to one
scores buffer. The full size (1500 tokens, 384 channels, 6 heads: 51.5 MiB of
scores) is measured by ``bench/bench_fold.py``.
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


def test_softmax_keeps_its_own_buffer(tmp_path):
    _, planned = _plan(tmp_path, "query", False)
    plan = planned.plan
    src, out = _softmax(planned)
    # not in place: onnxruntime's CUDA Softmax declares no MayInplace, so a plan for any provider keeps them apart
    assert plan.tensor(out).group != plan.tensor(src).group
    # the peak, at the Softmax: x (the residual, read by the Add after attention), v (read by the
    # MatMul after the Softmax), the scores and the probabilities:
    # 2 * SCORES + 2 * ACT = 2 * 6 * 512 * 512 * 4 + 2 * 512 * 48 * 4 = 12582912 + 196608 = 12779520
    assert plan.arena_size == plan.lower_bound == 2 * SCORES + 2 * ACT == 12779520
    off = _plan(tmp_path, "query", False, inplace=False)[1].plan
    assert off.lower_bound == plan.lower_bound  # sharing cannot lower the peak at the Softmax


@pytest.mark.parametrize("scale_at", SCALINGS)
@pytest.mark.parametrize("mask", [False, True])
def test_arena_against_onnxruntime_and_verified(tmp_path, scale_at, mask):
    """With a Div or an Add between the scores' MatMul and the Softmax, onnxruntime's peak holds
    two score buffers too (neither op runs in place there), and the plan is at or below it. With
    the Softmax reading the MatMul directly, onnxruntime's CPU session writes the probabilities
    over the scores; the plan, which must also hold where CUDA runs the Softmax, is above it by
    at most that one scores buffer."""
    path, planned = _plan(tmp_path, scale_at, mask)
    measured = ort_peak(planned.model, planned.view, level="disable", model_path=path)
    ort = comparable_peak(measured.peak, planned.view, planned.plan.io)
    assert ort is not None
    if scale_at == "query" and not mask:
        assert ort < planned.plan.arena_size <= ort + SCORES, (planned.plan.arena_size, ort)
    else:
        assert planned.plan.arena_size <= ort, (planned.plan.arena_size, ort)
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view,
                         options=VerifyOptions())
    assert report.ok, report.first


def test_softmax_keeps_its_own_buffer_for_every_dtype_and_sigmoid_does_not():
    """Softmax (declared in place on CPU only) never shares; Sigmoid (declared on CPU and CUDA for
    float and double) at the same place writes over its input."""
    from onnx import TensorProto, helper

    from onnxmem.analysis.aliasing import alias_groups

    from .helpers import file_order_view, make_model, vi

    for op in ("Softmax", "Sigmoid"):
        for dtype in (TensorProto.FLOAT, TensorProto.DOUBLE):
            m = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, ["r"], ["s"]),
                            helper.make_node("Neg", ["s"], ["y"])],
                           [vi("x", [2, 8], dtype)], [vi("y", [2, 8], dtype)])
            view, order = file_order_view(m)
            groups = alias_groups(view, order)
            assert ("s" in groups.get("r", ())) is (op == "Sigmoid"), (op, dtype, groups)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_onnxruntime_softmax_is_correct_in_place_on_any_axis(op, axis):
    """onnxruntime's CPU kernel bound over its input gives the bytes of an ordinary run (axes other
    than the last go through a transpose inside the kernel): Softmax is left out of the in-place
    table for CUDA's lack of a declaration, not for a fault of the CPU kernel."""
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
