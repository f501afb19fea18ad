"""onnxruntime's own activation peak from its profiler, and ``onnxmem compare``."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.peak import (
    arena_over_ort,
    comparable_peak,
    held_from_profile,
    ort_peak,
    peak_from_profile,
)

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
                  "lower bound", "onnxmem arena", "graph inputs"):
        assert label in r.output


def _ir3_model(path):
    """IR 3 (every initializer is also a graph input), weights made by ConstantOfShape, one unread."""
    shape = numpy_helper.from_array(np.array([16, 16], np.int64), "wshape")
    half = numpy_helper.from_array(np.array([0.5], np.float32))
    nodes = [
        helper.make_node("ConstantOfShape", ["wshape"], ["w"], value=half),
        helper.make_node("ConstantOfShape", ["wshape"], ["unread"], value=half),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
    ]
    g = helper.make_graph(nodes, "ir3", [vi("x", [4, 16]), vi("wshape", [2], onnx.TensorProto.INT64)],
                          [vi("y", [4, 16])], [shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 3
    onnx.save(m, path)
    return m


def test_peak_of_an_ir3_model(tmp_path):
    from onnxmem.runtime.folding import compute_weights, fold_weights
    from onnxmem.runtime.ort import load_with_weights

    path = tmp_path / "ir3.onnx"
    _ir3_model(path)
    p = plan_model(path, PlanOptions(solver="greedy"))
    folded = fold_weights(load_with_weights(p.model, path), p.view, compute_weights(p.model, p.view))
    inputs = {i.name for i in folded.graph.input}
    assert folded.ir_version == 3 and {i.name for i in folded.graph.initializer} <= inputs
    assert "w" in inputs and "unread" not in inputs
    peak = ort_peak(p.model, p.view, model_path=path)
    assert peak.peak == 2 * 4 * 16 * 4  # h and y


def test_comparable_peak_counts_what_the_arena_counts(tmp_path):
    w = numpy_helper.from_array(np.ones((64, 16), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    path = tmp_path / "mm.onnx"
    onnx.save(make_model(nodes, [vi("x", [4, 64])], [vi("y", [4, 16])], inits=[w]), path)
    p = plan_model(path, PlanOptions(solver="greedy"))
    x, y = 4 * 64 * 4, 4 * 16 * 4
    assert comparable_peak(1000, p.view) == 1000 + x  # internal: plus the graph inputs
    assert comparable_peak(1000, p.view, "external") == 1000 - y  # external: minus the graph outputs
    assert comparable_peak(10, p.view, "external") == 0 and comparable_peak(None, p.view) is None
    assert arena_over_ort(p.plan.arena_size, 1000, p.view, p.plan.io) == p.plan.arena_size / (1000 + x)
    assert arena_over_ort(100, None, p.view) is None


def test_compare_refuses_a_plan_for_another_model(tmp_path):
    from onnxmem.plans.point import write_plan

    from .helpers import chain

    one, two = tmp_path / "one.onnx", tmp_path / "two.onnx"
    onnx.save(chain(2, shape=(1, 64)), one)
    onnx.save(chain(3, shape=(1, 64)), two)
    plan_file = tmp_path / "one.json"
    write_plan(plan_model(one, PlanOptions(solver="greedy")).plan, plan_file)
    r = CliRunner().invoke(main, ["compare", str(two), "--plan", str(plan_file)])
    assert r.exit_code == 1, r.output
    assert "was made for a model with sha256" in r.stderr and "plan this model again" in r.stderr
    assert r.stderr.count("\n") == 1 and "onnxmem arena" not in r.output
    # re-saved: the same graph in other bytes is compared, with a warning
    m = onnx.load(one)
    m.doc_string = "re-saved"
    onnx.save(m, two)
    r = CliRunner().invoke(main, ["compare", str(two), "--plan", str(plan_file)])
    assert r.exit_code == 0, r.output
    assert "re-saved" in r.stderr and "onnxmem arena" in r.output


def test_held_counts_each_allocation_as_onnxruntime_rounds_it(tmp_path):
    """Two 40 B values live together: onnxruntime requests 80 B and its CPU arena holds
    2 x 256 B; the plan, padded to 64 B, holds x, a and y in 128 B (y over x)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["y"], name="r2")]
    path = tmp_path / "small.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 10])], [vi("y", [1, 10])]), path)
    p = plan_model(path)
    measured = ort_peak(p.model, p.view, model_path=path)
    assert (measured.peak, measured.held) == (80, 512)
    assert p.plan.arena_size == 128
    assert comparable_peak(measured.held, p.view) == 512 + 40
    r = CliRunner().invoke(main, ["compare", str(path)])
    assert r.exit_code == 0, r.output
    held = [ln for ln in r.stdout.splitlines() if ln.startswith("  held by onnxruntime")]
    assert len(held) == 4 and all(" 552 B " in ln and "4.31x the arena" in ln for ln in held), held


def test_held_from_literal_events():
    events = [
        _kernel("a", 1100, 1000, peak=2048, in_use=2048, in_use_delta=1024),  # 1024 B held before
        _kernel("b", 3100, 2000, peak=5000, in_use=4096, in_use_delta=2048),
        _kernel("c", 600, -2500, peak=5000, in_use=1024, in_use_delta=-3072),
    ]
    assert held_from_profile(events) == 4096 - 1024
    assert held_from_profile([{"cat": "Node", "name": "x_kernel_time", "args": {}}]) is None


def test_compare_proves_a_plan_of_onnxruntimes_graph_read_from_a_file(tmp_path):
    """A plan of the graph onnxruntime builds (``--optimize``), read back, comes with that graph's
    view; compare still holds it to the static proof before it prints a figure."""
    import json

    plan_file, bad = tmp_path / "plan.json", tmp_path / "bad.json"
    model = str(MODELS / "resnet_cnn.onnx")
    r = CliRunner().invoke(main, ["plan", model, "--optimize", "basic", "-o", str(plan_file)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["compare", model, "--plan", str(plan_file)])
    assert r.exit_code == 0, r.output
    assert "onnxmem arena" in r.output
    doc = json.loads(plan_file.read_text())
    for t in doc["tensors"]:  # every tensor at offset 0: live tensors share bytes
        t["offset"] = 0
    bad.write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["compare", model, "--plan", str(bad)])
    assert r.exit_code == 3, r.output  # PlanInvalid's, as verify's
    assert "the plan is wrong" in r.stderr and "share bytes" in r.stderr and "is not compared" in r.stderr
    assert r.stderr.count("\n") == 1 and "onnxmem arena" not in r.output


def test_the_measured_default_session_runs_on_the_given_inputs(tmp_path):
    """A Reshape to a shape a graph input holds: drawn at random, the target is no shape of the
    data and onnxruntime fails. The measured default session (a fresh process) runs on --inputs as
    the other onnxruntime runs of compare do, where it drew every input ('could not run')."""
    from onnx import TensorProto

    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    model = make_model(nodes, [vi("x", [2, 3]), vi("s", [2], TensorProto.INT64)], [vi("y", [3, 2])])
    path, given = tmp_path / "m.onnx", tmp_path / "in.npz"
    onnx.save(model, path)
    np.savez(given, s=np.array([3, 2], np.int64))
    r = CliRunner().invoke(main, ["compare", str(path), "--inputs", str(given), "--measure-shapes"])
    assert r.exit_code == 0, r.output
    measured = next(line for line in r.output.splitlines() if line.startswith("measured"))
    assert measured.startswith("measured     default session (ORT_ENABLE_ALL, memory patterns on, 2 runs): "), measured
