"""onnxruntime's own activation peak from its profiler, and ``onnxmem compare``."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli import main
from onnxmem.ortpeak import ort_peak, peak_from_profile
from onnxmem.pipeline import PlanOptions, plan_model

from .conftest import LIGHT, MODELS
from .helpers import make_model, vi


def _kernel(name, requested, delta, peak=0, in_use=0, in_use_delta=0):
    return {"cat": "Node", "name": f"{name}_kernel_time", "args": {
        "provider": "CPUExecutionProvider", "mem_bytes_requested_in_use": str(requested),
        "mem_requested_in_use_delta": str(delta), "mem_in_use_peak": str(peak),
        "mem_bytes_in_use": str(in_use), "mem_in_use_delta": str(in_use_delta)}}


def test_peak_from_literal_events():
    events = [
        {"cat": "Session", "name": "session_initialization"},
        _kernel("a", 1100, 1000, peak=2048, in_use=2048, in_use_delta=1024),  # 100 B in use before
        _kernel("b", 3100, 2000, peak=5000, in_use=4096, in_use_delta=2048),
        _kernel("c", 600, -2500, peak=5000, in_use=1024, in_use_delta=-3072),
        {"cat": "Session", "name": "model_run"},
        _kernel("a", 9999, 9999),  # a second run is not read
    ]
    peak, arena, kernels = peak_from_profile(events)
    assert (peak, arena, kernels) == (3000, 5000 - 1024, 3)
    assert peak_from_profile([{"cat": "Node", "name": "x_kernel_time", "args": {}}]) == (None, None, 1)


def test_peak_excludes_weights(tmp_path):
    w = numpy_helper.from_array(np.ones((256, 256), np.float32), "w")  # 256 KiB of weights
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    path = tmp_path / "mm.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 256])], [vi("y", [1, 256])], inits=[w]), path)
    p = plan_model(path, PlanOptions(solver="greedy"))
    peak = ort_peak(p.model, p.view, model_path=path)
    assert peak.peak is not None and 1024 <= peak.peak <= 4 * 1024  # h and y, 1 KiB each
    assert peak.field == "mem_bytes_requested_in_use"


def test_peak_on_a_real_model_at_both_levels():
    path = LIGHT / "light_squeezenet.onnx"
    p = plan_model(path, PlanOptions(solver="greedy"))
    for level in ("disable", "all"):
        peak = ort_peak(p.model, p.view, level=level, model_path=path)
        assert peak.peak is not None and peak.peak >= p.plan.lower_bound // 4
        assert peak.kernels > 10


def test_cli_compare_prints_both_figures():
    path = MODELS / "resnet_cnn.onnx"
    if not path.exists():
        path = LIGHT / "light_squeezenet.onnx"
    r = CliRunner().invoke(main, ["compare", str(path), "--solver", "greedy"])
    assert r.exit_code == 0, r.output
    for label in ("naive (no reuse)", "onnxruntime peak", "ORT_DISABLE_ALL", "ORT_ENABLE_ALL",
                  "lower bound", "onnxmem arena"):
        assert label in r.output
