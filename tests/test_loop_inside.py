"""A Loop's carried outputs (a Scan's final state) inside its region, at the bytes where the body
writes them (``outputs: inside``): hand-computed arenas, the proof's rule 8, execution in the arena."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import VerifyOptions, prove_plan, verify_plan

from .helpers import make_model, vi
from .nested_models import loop_carried, loop_nested_if, scan_cumsum


def _save(tmp_path, name, model):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def _in(region, t) -> bool:
    return region.offset <= t.offset and t.offset + t.size <= region.offset + region.size


def test_the_shipped_loop_output_sits_where_the_body_writes_it(models_dir):
    path = models_dir / "control_flow.onnx"
    planned = plan_model(path)
    plan = planned.plan
    assert plan.subgraph("Loop_23/body").outputs == "inside"
    region, out = plan.tensor("Loop_23:region"), plan.tensor("loop_22")
    body_out = plan.tensor("state_out", "Loop_23/body")
    assert (out.offset, out.size) == (body_out.offset, body_out.size) and out.group == region.group
    # at the Loop's step: relu_18 (8,192 B, the Loop's input) and the region (24,704 B), which
    # holds loop_22 after the last iteration; before, loop_22 sat beside the region (+8,192 B)
    assert region.size == 24704
    assert plan.arena_size == plan.lower_bound == 8192 + 24704 == 32896
    assert prove_plan(plan, planned.view) == []
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view)
    assert report.ok, report.first


def test_carried_outputs_inside_and_scan_outputs_beside(tmp_path):
    path = _save(tmp_path, "loop_carried", loop_carried())
    planned = plan_model(path)
    plan = planned.plan
    assert plan.subgraph("loop/body").outputs == "inside"
    region = plan.tensor("loop:region")
    # the body: slots i and cond (64 B each, aligned), a_in, b_in (1,024 B each); sum (b_out
    # in place), trace: 4 x 1,024 + 2 x 64 = 4,224 B; a_out is b_in itself (an Identity view)
    assert region.size == 4224
    for out, body_out in (("a_n", "a_out"), ("b_n", "b_out")):
        t, b = plan.tensor(out), plan.tensor(body_out, "loop/body")
        assert (t.offset, t.size, t.group) == (b.offset, b.size, region.group) and _in(region, t)
    traces = plan.tensor("traces")  # the scan output stays beside the region
    assert traces.group != region.group and not _in(region, traces)
    # at the Loop's step: x, a0 (1,024 B each), the region and traces (4,096 B); a_n and b_n
    # (2,048 B) beside the region before
    assert plan.arena_size == plan.lower_bound == 1024 + 1024 + 4224 + 4096 == 10368
    x = np.random.default_rng(3).standard_normal((1, 256)).astype(np.float32)
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view,
                         options=VerifyOptions(inputs={"x": x}))
    assert report.ok, report.first


def test_a_scan_state_sits_inside_its_region(tmp_path):
    path = _save(tmp_path, "scan_cumsum", scan_cumsum())
    planned = plan_model(path)
    plan = planned.plan
    region, s_n, y = plan.tensor("scan:region"), plan.tensor("s_n"), plan.tensor("Y")
    s_out = plan.tensor("s_out", "scan/body")
    assert plan.subgraph("scan/body").outputs == "inside"
    assert (s_n.offset, s_n.group) == (s_out.offset, region.group) and y.group != region.group
    # X (768 B), Y (768 B) and the region (s_in, row, s_out, out_row: 4 x 128 B), s0 dead by then
    assert plan.arena_size == plan.lower_bound == 768 + 768 + 512 + 128 == 2176
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view)
    assert report.ok, report.first


def test_a_loop_output_written_elsewhere_in_the_region_is_caught(tmp_path):
    path = _save(tmp_path, "loop_carried", loop_carried())
    planned = plan_model(path)
    plan = planned.plan
    trace = plan.tensor("trace", "loop/body")
    # b_n moved onto the bytes of the body's scan output: inside the region, but not where
    # the body writes b_out
    moved = dataclasses.replace(plan, tensors=tuple(
        dataclasses.replace(t, offset=trace.offset) if (t.graph, t.name) == ("", "b_n") else t
        for t in plan.tensors))
    found = prove_plan(moved, planned.view)
    b_out = plan.tensor("b_out", "loop/body")
    want = (f"writes its output 'b_out' at bytes [{b_out.offset}, {b_out.offset + 1024}) but the Loop output "
            f"'b_n' it is sits at [{trace.offset}, {trace.offset + 1024})")
    assert any(want in f.message for f in found), found


def test_a_runtime_owned_or_passed_through_output_stays_beside(tmp_path):
    # --io external: the Loop's output y is a graph output the runtime owns
    path = _save(tmp_path, "loop_if", loop_nested_if())
    ext = plan_model(path, PlanOptions(io="external"))
    assert ext.plan.subgraph("loop/body").outputs == "region"
    assert prove_plan(ext.plan, ext.view) == []
    # a carried value the body passes through unchanged is no body tensor: it cannot sit inside
    body = helper.make_graph(
        [helper.make_node("Relu", ["w_in"], ["w_out"], name="relu"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("v_in", [1, 64]),
                 vi("w_in", [1, 64])],
        [vi("cond_out", [], TensorProto.BOOL), vi("v_in", [1, 64]), vi("w_out", [1, 64])])
    trips = numpy_helper.from_array(np.array(2, dtype=np.int64), "trips")
    yes = numpy_helper.from_array(np.array(True), "yes")
    m = make_model([helper.make_node("Loop", ["trips", "yes", "x", "x"], ["v", "w"], name="loop", body=body)],
                   [vi("x", [1, 64])], [vi("v", [1, 64]), vi("w", [1, 64])], [trips, yes])
    path = _save(tmp_path, "pass", m)
    planned = plan_model(path)
    assert planned.plan.subgraph("loop/body").outputs == "region"
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view)
    assert report.ok, report.first


@pytest.mark.parametrize("inplace", [True, False])
def test_without_sharing_the_outputs_stay_beside(tmp_path, inplace):
    path = _save(tmp_path, "loop_carried", loop_carried())
    plan = plan_model(path, PlanOptions(inplace=inplace)).plan
    assert plan.subgraph("loop/body").outputs == ("inside" if inplace else "region")
    assert plan.arena_size == plan.lower_bound
