"""onnxruntime's default-session peak (memory patterns on, run 2) and its line in ``onnxmem compare``."""

from __future__ import annotations

import onnx
from click.testing import CliRunner
from onnx import helper

from onnxmem.cli.main import main
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.peak import (
    comparable_peak,
    default_peak_from_profile,
    ort_default_peak,
    ort_peak,
)

from .conftest import LIGHT
from .helpers import make_model, vi

S = 64 * 1024 * 4  # bytes of one (1, 65536) float tensor


def _kernel(requested, delta, in_use, in_use_delta=0):
    return {"cat": "Node", "name": "k_kernel_time", "args": {
        "provider": "CPUExecutionProvider", "mem_bytes_requested_in_use": str(requested),
        "mem_requested_in_use_delta": str(delta), "mem_bytes_in_use": str(in_use),
        "mem_in_use_delta": str(in_use_delta)}}


def test_default_peak_from_literal_events():
    run = {"cat": "Session", "name": "model_run"}
    events = [
        {"cat": "Session", "name": "session_initialization"},
        _kernel(1100, 1000, 1280, 1024),  # 100 B requested (256 B held) in use before run 1: weights
        _kernel(2100, 1000, 2304, 1024),
        run,
        _kernel(3100, 0, 3328),  # run 2: the pattern block is in use from the start
        _kernel(3600, 500, 3840, 512),
        run,
        _kernel(9999, 0, 9999),  # run 3 is not read
        run,
    ]
    assert default_peak_from_profile(events) == (3500, 3584, 2)
    assert default_peak_from_profile(events, run=3) == (9899, 9743, 1)
    assert default_peak_from_profile(events[:4]) == (None, None, 0)  # one run only
    assert default_peak_from_profile(events, provider="CUDAExecutionProvider") == (None, None, 0)


def _chain(path):
    """``a = Relu(x); b = a + x; c = Relu(b); d = c + b; y = d + a`` on (1, 65536) floats:
    a, b, c and d are live at once when d is made."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "x"], ["b"]),
             helper.make_node("Relu", ["b"], ["c"]), helper.make_node("Add", ["c", "b"], ["d"]),
             helper.make_node("Add", ["d", "a"], ["y"])]
    onnx.save(make_model(nodes, [vi("x", [1, 65536])], [vi("y", [1, 65536])]), path)


def test_default_peak_of_a_chain_is_its_pattern_block_plus_the_output(tmp_path):
    path = tmp_path / "chain.onnx"
    _chain(path)
    p = plan_model(path, PlanOptions(solver="greedy"))
    default = ort_default_peak(p.model, p.view, model_path=path)
    # the pattern block holds a, b, c, d (4 S) through run 2; the output y is allocated apart
    assert (default.level, default.peak, default.arena_peak) == ("default", 5 * S, None)
    assert default.held == 5 * S and default.kernels == 5
    assert comparable_peak(default.peak, p.view) == 6 * S  # plus the graph input x
    # each tensor on its own: b and c are released before y is allocated
    assert ort_peak(p.model, p.view, level="disable", model_path=path).peak == 4 * S


def test_default_peak_of_a_real_model():
    path = LIGHT / "light_squeezenet.onnx"
    p = plan_model(path, PlanOptions(solver="greedy"))
    default = ort_default_peak(p.model, p.view, model_path=path)
    largest = max(t.size for t in p.view.tensors.values() if t.kind not in ("weight", "input"))
    assert default.peak is not None and default.peak >= largest > 0
    assert default.kernels > 10 and default.note == ""


def test_cli_compare_prints_the_default_session(tmp_path):
    path = tmp_path / "chain.onnx"
    _chain(path)
    r = CliRunner().invoke(main, ["compare", str(path), "--solver", "greedy"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if "default session" in x)
    assert f"({6 * S:,} B)" in line and f"({5 * S:,} B) allocated" in line
