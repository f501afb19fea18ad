"""Loops whose values grow per iteration: sized per iteration for a trip bound, verified in the arena."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import PlanError, ShapeError
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.plans import read_plan
from onnxmem.verify.run import VerifyOptions, prove_plan, verify_plan

from .nested_models import decoder_in_if, decoder_loop, emit_loop

ROW = 16 * 4  # one [1, 16] float row: 64 B, the alignment


def _save(tmp_path, trips="const", extra=""):
    path = tmp_path / f"decoder_{trips}{extra}.onnx"
    onnx.save(decoder_loop(trips, extra=extra), path)
    return path


def _verify(planned, path, **inputs):
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32),
             **{k: np.array(v, dtype=np.int64) for k, v in inputs.items()}}
    return verify_plan(planned.model, planned.plan, model_path=path, view=planned.view,
                       options=VerifyOptions(inputs=feeds))


def test_the_constant_trip_decoder_plans_at_the_hand_computed_arena(tmp_path):
    planned = plan_model(_save(tmp_path))
    plan = planned.plan
    tensors = {(t.graph, t.name): t for t in plan.tensors}
    # iteration i (0 .. 5): seq_in [1 + i, 16], seq_out and keys [2 + i, 16]; sized at i = 5
    assert tensors[("decode/body", "seq_in")].shape == (6, 16)
    assert tensors[("decode/body", "seq_out")].shape == (7, 16)
    assert tensors[("decode/body", "keys")].shape == (16, 7)
    body = next(b for bs in planned.view.bodies.values() for b in bs)
    assert body.iterations["seq_out"] == tuple(ROW * (2 + i) for i in range(6))
    assert body.iterations["scores"] == tuple(4 * (2 + i) for i in range(6))
    # the body's peak, at `scores`: carried slots i, cond (64 each aligned), seq_in 6 rows, row_in 1
    # row; seq_out 7 rows (a body output: live to the end), q 1 row, keys 7 rows, scores (28 B -> 64)
    region = (64 + 64 + 6 * ROW + ROW) + 7 * ROW + ROW + 7 * ROW + 64
    assert region == 1600
    assert plan.subgraphs[0].arena_size == plan.subgraphs[0].lower_bound == region
    # at the Loop's step the main graph holds x, seq0 and the scan output steps [6, 1, 16]; the
    # final seq_n [7, 16] and row_n sit inside the region, where the body writes them
    assert tensors[("", "steps")].shape == (6, 1, 16)
    assert tensors[("", "seq_n")].shape == (7, 16)
    assert plan.arena_size == plan.lower_bound == ROW + ROW + region + 6 * ROW == 2112
    assert plan.extra["loop_trips"] == {"decode": {"bound": 6, "source": "model"}}
    assert not plan.warnings  # the model's own trip count: nothing assumed
    assert prove_plan(plan, planned.view) == []


def test_the_constant_trip_decoder_verifies_every_iteration_in_the_arena(tmp_path):
    path = _save(tmp_path)
    planned = plan_model(path)
    report = _verify(planned, path)
    assert report.ok, report.first
    # start, 6 iterations of the body's 9 nodes, pool
    assert report.execution.nodes_run == 1 + 6 * 9 + 1
    assert all(c.ok and c.whole_model_ok for c in report.execution.outputs)


@pytest.mark.parametrize("trips,count", [("input", "n"), ("cond", "limit")])
def test_max_trips_bounds_a_loop_whose_count_the_run_decides(tmp_path, trips, count):
    path = _save(tmp_path, trips)
    with pytest.raises(ShapeError) as err:
        plan_model(path)
    message = str(err.value)
    assert "Loop 'decode'" in message and "'seq_in' grows from [1, 16] to [2, 16]" in message
    assert "--max-trips N" in message and "--measure-shapes" not in message
    planned = plan_model(path, PlanOptions(max_trips=5))
    plan = planned.plan
    assert plan.extra["loop_trips"] == {"decode": {"bound": 5, "source": "user"}}
    assert ("Loop 'decode': its values grow per iteration and are planned for at most 5 iterations (--max-trips); "
            "verify refuses a run of more") in plan.warnings
    # the constant decoder's arena one row shorter in seq_in, seq_out, keys and steps, plus the
    # 64 B of the count input
    assert plan.arena_size == 2112 - 4 * ROW + 64 == 1920
    assert _verify(planned, path, **{count: 5}).ok
    short = _verify(planned, path, **{count: 2})
    assert short.ok, short.first
    assert short.execution.nodes_run == 1 + 2 * len(onnx.load(path).graph.node[1].attribute[0].g.node) + 1
    with pytest.raises(PlanError, match=r"Loop 'decode' runs more than the 5 iterations the plan holds.*--max-trips"):
        _verify(planned, path, **{count: 9})


def test_a_user_bound_below_the_constant_trip_count_is_refused_past_it(tmp_path):
    path = _save(tmp_path)
    planned = plan_model(path, PlanOptions(max_trips=4))
    assert planned.plan.extra["loop_trips"] == {"decode": {"bound": 4, "source": "user"}}
    with pytest.raises(PlanError, match=r"more than the 4 iterations the plan holds \(its trip count is 6\)"):
        _verify(planned, path)


def test_the_proof_catches_a_buffer_too_small_for_the_last_iteration(tmp_path):
    planned = plan_model(_save(tmp_path))
    plan = planned.plan
    shrunk = tuple(replace(t, size=6 * ROW, shape=(16, 6)) if (t.graph, t.name) == ("decode/body", "keys") else t
                   for t in plan.tensors)
    findings = prove_plan(replace(plan, tensors=shrunk), planned.view)
    assert findings and str(findings[0]) == ("in subgraph 'decode/body': tensor 'keys' takes 448 B at iteration 5 "
                                             "but the plan gives it 384 B at bytes [448, 832); re-plan the model")
    # a plan that claims more iterations than its buffers were sized for
    more = replace(plan, extra={**plan.extra, "loop_trips": {"decode": {"bound": 8, "source": "model"}}})
    assert "sized for 6 iterations, but the plan records a bound of 8" in str(prove_plan(more, planned.view)[0])
    gone = replace(plan, extra={k: v for k, v in plan.extra.items() if k != "loop_trips"})
    assert "records no bound" in str(prove_plan(gone, planned.view)[0])


def test_a_body_value_that_depends_on_data_is_named_with_why(tmp_path):
    path = _save(tmp_path, extra="nonzero")
    with pytest.raises(ShapeError) as err:
        plan_model(path)
    message = str(err.value)
    assert message.startswith("value 'hits' of the body of Loop 'decode' has no static size at iteration 0: "
                              "its 'NonZero' gives it a shape that depends on the values of 'mask'")
    assert "--measure-shapes cannot size it" in message and "value_info" in message
    # the way it offers works: the shape declared in the body's value_info
    declared = _save(tmp_path, extra="nonzero_declared")
    planned = plan_model(declared)
    assert {(t.graph, t.name): t.shape for t in planned.plan.tensors}[("decode/body", "hits")] == (2, 16)
    assert _verify(planned, declared).ok


def test_a_scan_output_that_grows_is_refused(tmp_path):
    with pytest.raises(ShapeError, match=r"scan output 'seq_copy' of Loop 'decode' is \[2, 16\] at iteration 0 "
                                         r"and \[3, 16\] at iteration 1"):
        plan_model(_save(tmp_path, extra="scan_seq"))


def test_the_cli_plans_with_max_trips_and_verify_reads_the_bound_back(tmp_path):
    path = _save(tmp_path, "cond")
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(out)])
    assert r.exit_code == 1 and "--max-trips N" in r.output and "Traceback" not in r.output
    assert not out.exists()
    r = CliRunner().invoke(main, ["plan", str(path), "--max-trips", "5", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["extra"]["loop_trips"] == {"decode": {"bound": 5, "source": "user"}}
    assert read_plan(out, "point").arena_size == 1920
    for limit, code in ((3, 0), (9, 1)):
        npz = tmp_path / f"limit{limit}.npz"
        np.savez(npz, limit=np.array(limit, dtype=np.int64))
        r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(out), "--inputs", str(npz)])
        assert r.exit_code == code, r.output
        assert "Traceback" not in r.output
        if code == 0:
            assert "loop      'decode': sized for at most 5 iterations (--max-trips)" in r.output
    assert r.output.strip().splitlines()[-1].startswith("error: Loop 'decode' runs more than the 5 iterations")


def test_compare_refuses_a_run_past_the_bound_before_profiling(tmp_path):
    path = _save(tmp_path, "cond")
    npz = tmp_path / "limit9.npz"
    np.savez(npz, limit=np.array(9, dtype=np.int64))
    r = CliRunner().invoke(main, ["compare", str(path), "--max-trips", "4", "--inputs", str(npz)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.strip().splitlines() == [
        "error: Loop 'decode' runs more than the 4 iterations the plan holds on these inputs: its values grow per "
        "iteration and are planned for at most 4 (extra.loop_trips); plan again with --max-trips N for the most "
        "iterations runs take, or give inputs that stop sooner"]


def test_a_zoo_list_gives_a_model_its_own_max_trips(tmp_path):
    from onnxmem.core.errors import OnnxmemError
    from onnxmem.zoo import load_zoo

    onnx.save(decoder_loop("cond"), tmp_path / "decoder.onnx")
    listing = tmp_path / "zoo.txt"
    listing.write_text("decoder.onnx max-trips:5\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["zoo", str(listing), "--out", str(out), "--executor", "inline",
                                  "--model-timeout", "0"])
    assert r.exit_code == 0, r.output
    row = json.loads((out / "results.json").read_text())["models"][0]
    assert row["options"] == {"max_trips": 5} and row["status"] == "ok"
    plan = json.loads((out / "plans" / "decoder.json").read_text())
    assert plan["extra"]["loop_trips"] == {"decode": {"bound": 5, "source": "user"}}
    for word, message in (("max-trips:0", "key 'max-trips' holds '0', which is not a positive integer"),
                          ("max-trips:5 max-trips:6", "key 'max-trips' is given 2 times")):
        listing.write_text(f"decoder.onnx {word}\n")
        with pytest.raises(OnnxmemError, match=f"zoo.txt:1: {message}"):
            load_zoo(listing)
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": [{"name": "d", "file": "decoder.onnx", "max_trips": "5"}]}))
    with pytest.raises(OnnxmemError, match="model 'd': key 'max_trips' is not a positive integer"):
        load_zoo(catalog)
    catalog.write_text(json.dumps({"models": [{"name": "d", "file": "decoder.onnx", "max_trips": 5}]}))
    assert load_zoo(catalog)[0].options.max_trips == 5


def test_a_trip_count_past_the_limit_needs_a_bound(tmp_path):
    from onnxmem.shapes.loops import MAX_TRIPS

    # exporters write INT64_MAX as the trip count of a Loop its condition stops
    path = tmp_path / "decoder_max.onnx"
    onnx.save(decoder_loop("const", steps=2**63 - 1), path)
    with pytest.raises(ShapeError, match=r"its trip count 9223372036854775807 is above onnxmem's limit of 16,384 "
                                         r"iterations .*pass --max-trips N"):
        plan_model(path)
    assert plan_model(path, PlanOptions(max_trips=3)).plan.extra["loop_trips"] == {
        "decode": {"bound": 3, "source": "user"}}
    with pytest.raises(ShapeError, match=f"--max-trips {MAX_TRIPS + 1} is above onnxmem's limit"):
        plan_model(path, PlanOptions(max_trips=MAX_TRIPS + 1))


def test_a_scan_output_stacked_over_an_unknown_trip_count_takes_max_trips(tmp_path):
    path = tmp_path / "emit.onnx"
    onnx.save(emit_loop(), path)
    with pytest.raises(ShapeError, match=r"'toks' stacks one slice per iteration of Loop 'emit', whose trip count is "
                                         r"not known before the run; pass --max-trips N"):
        plan_model(path)
    planned = plan_model(path, PlanOptions(max_trips=40))
    plan = planned.plan
    assert plan.extra["loop_trips"] == {"emit": {"bound": 40, "source": "user"}}
    # the carried state keeps its shape: region i, cond, h_in, mixed (h_out: Tanh in place), tok at
    # 64 B each; beside it x, n and toks [40, 1, 1] int64 (320 B)
    assert {t.name: t.shape for t in plan.tensors}["toks"] == (40, 1, 1)
    assert plan.arena_size == 64 + 64 + 5 * 64 + 40 * 8 == 768
    assert _verify(planned, path, n=7).ok
    with pytest.raises(PlanError, match=r"Loop 'emit' runs more than the 40 iterations the plan holds \(its trip "
                                        r"count is 41\)"):
        _verify(planned, path, n=41)


def test_a_growing_loop_nested_in_a_branch_is_sized_and_verified(tmp_path):
    path = tmp_path / "gated.onnx"
    onnx.save(decoder_in_if(), path)
    planned = plan_model(path)
    plan = planned.plan
    assert plan.extra["loop_trips"] == {"gate/then_branch/decode": {"bound": 6, "source": "model"}}
    # the decoder's arena (its region, x, seq0 and steps, all in the then branch's region now) and c
    assert plan.arena_size == 2112 + 64
    feeds = {"x": np.ones((1, 16), np.float32), "c": np.array(True)}
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view, options=VerifyOptions(inputs=feeds))
    assert report.ok, report.first
    assert report.execution.nodes_run == 1 + 6 * 9 + 1
    # a count the run decides, nested: the same message, and --max-trips bounds it
    onnx.save(decoder_in_if("input"), path)
    with pytest.raises(ShapeError, match=r"Loop 'decode': its carried value 'seq_in' grows .*--max-trips N"):
        plan_model(path)
    nested = plan_model(path, PlanOptions(max_trips=5))
    assert nested.plan.extra["loop_trips"] == {"gate/then_branch/decode": {"bound": 5, "source": "user"}}
    with pytest.raises(PlanError, match=r"Loop 'gate/then_branch/decode' runs more than the 5 iterations"):
        verify_plan(nested.model, nested.plan, model_path=path, view=nested.view,
                    options=VerifyOptions(inputs={**feeds, "n": np.array(7, np.int64)}))
