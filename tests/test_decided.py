"""If nodes whose condition the given input values, constants or shapes decide: planned for the
branch they take, the values recorded, ``verify`` refusing values that take the other branch."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.core.errors import ModelError, PlanError, ShapeError
from onnxmem.graph import Decision, decide_branches
from onnxmem.planning.pipeline import PlanOptions, check_decided, plan_model
from onnxmem.plans.schema import check_schema
from onnxmem.verify.run import VerifyOptions, verify_plan

from .helpers import make_model, vi
from .nested_models import if_sample_rate, loop_if_sample_rate

SHAPE = {"x": (8, 64)}


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "if_sr.onnx"
    onnx.save(if_sample_rate(), path)
    return path


def _sr(value: int) -> dict[str, np.ndarray]:
    return {"sr": np.array(value, dtype=np.int64)}


def test_the_value_of_sr_decides_the_branch():
    model = if_sample_rate()
    (d,) = decide_branches(model, _sr(16000), {}).values()
    assert (d.branch, d.inputs) == ("then_branch", ("sr",))
    assert decide_branches(model, _sr(8000), {})["run_net"].branch == "else_branch"
    assert decide_branches(model, {}, {}) == {}  # sr unknown: not decided
    # a value too large to record, or not finite, decides nothing
    assert decide_branches(model, {"sr": np.zeros(65, dtype=np.int64)}, {}) == {}


def test_a_condition_on_a_shape_is_decided_by_the_shape_alone():
    # If(Equal(Size(x), 512)): constants and the input's shape decide it, no value needed
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "t", [], [vi("t", [8, 64])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "e", [], [vi("e", [8, 64])])
    ref = helper.make_tensor("n", TensorProto.INT64, [], [512])
    model = make_model([helper.make_node("Size", ["x"], ["size"]),
                        helper.make_node("Equal", ["size", "n"], ["c"]),
                        helper.make_node("If", ["c"], ["y"], name="by_size", then_branch=then_g, else_branch=else_g)],
                       [vi("x", [8, 64])], [vi("y", [8, 64])], [ref])
    (d,) = decide_branches(model, None, {"x": (8, 64)}).values()
    assert (d.branch, d.inputs) == ("then_branch", ())
    assert decide_branches(model, None, {"x": (8, 32)})["by_size"].branch == "else_branch"


def test_without_the_value_the_unrunnable_branch_is_refused(model_path):
    with pytest.raises(ShapeError):
        plan_model(model_path, PlanOptions(input_shapes=SHAPE))


def test_the_plan_holds_the_branch_the_given_value_takes_and_records_it(model_path):
    planned = plan_model(model_path, PlanOptions(input_shapes=SHAPE, inputs=_sr(16000)))
    plan = planned.plan
    assert [s.path for s in plan.subgraphs] == ["run_net/then_branch"]
    assert plan.extra["branches_decided"] == {"run_net": {"branch": "then_branch", "inputs": ["sr"]}}
    assert plan.extra["assumed_inputs"] == {"sr": {"dtype": "int64", "shape": [], "values": [16000]}}
    assert "branches" not in plan.extra  # no --branch was given
    reasons = {(o.graph, o.name): o.reason for o in plan.outside}
    assert reasons[("run_net/else_branch", "else_out")] == "excluded-branch"
    assert any("'run_net'" in w and "'sr'" in w for w in plan.warnings)
    check_schema(json.loads(plan.to_json()))
    # with --measure-shapes the same
    measured = plan_model(model_path, PlanOptions(input_shapes=SHAPE, inputs=_sr(16000), measure_shapes=True))
    assert measured.plan.extra["branches_decided"] == plan.extra["branches_decided"]
    assert measured.plan.arena_size == plan.arena_size


def test_a_branch_flag_against_the_given_value_is_one_line(model_path):
    with pytest.raises(ModelError, match="takes its then_branch with the --inputs value of 'sr'; leave out --branch"):
        plan_model(model_path, PlanOptions(input_shapes=SHAPE, inputs=_sr(16000), branches={"run_net": "else"}))
    same = plan_model(model_path, PlanOptions(input_shapes=SHAPE, inputs=_sr(16000), branches={"run_net": "then"}))
    assert same.plan.extra["branches"] == {"run_net": "then_branch"}


def test_verify_feeds_the_assumed_value_and_refuses_another(model_path):
    planned = plan_model(model_path, PlanOptions(input_shapes=SHAPE, inputs=_sr(16000)))
    model, plan = planned.model, planned.plan
    assert check_decided(model, plan, None) == {"sr": np.array(16000)}
    for given in (None, _sr(16000)):
        report = verify_plan(model, plan, model_path=model_path, options=VerifyOptions(inputs=given))
        assert report.ok and report.execution is not None, report.first
    x = np.ones((8, 64), dtype=np.float32)
    with pytest.raises(PlanError, match="If 'run_net' takes its else_branch with 'sr' = 8000; the plan holds only "
                                        "its then_branch, decided by 'sr' = 16000"):
        verify_plan(model, plan, model_path=model_path, options=VerifyOptions(inputs={**_sr(8000), "x": x}))


def test_the_cli_round_trip(model_path, tmp_path):
    npz = {v: tmp_path / f"sr{v}.npz" for v in (16000, 8000)}
    for v, p in npz.items():
        np.savez(p, **_sr(v))
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(model_path), "--input-shape", "x=8x64", "--inputs", str(npz[16000]),
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["extra"]["assumed_inputs"]["sr"]["values"] == [16000]
    r = CliRunner().invoke(main, ["verify", str(model_path), "--plan", str(out)])
    assert r.exit_code == 0 and "verified" in r.output, r.output
    r = CliRunner().invoke(main, ["verify", str(model_path), "--plan", str(out), "--inputs", str(npz[8000])])
    assert r.exit_code == 1 and "If 'run_net' takes its else_branch" in r.output and "Traceback" not in r.output


def test_compare_runs_onnxruntime_on_the_values_the_plan_assumed(model_path, tmp_path):
    """A seeded random 'sr' takes the else branch, which cannot run at x 8x64 (and which the plan
    does not hold): compare feeds the plan's assumed sr=16000 instead, and refuses another value."""
    npz = tmp_path / "sr16k.npz"
    np.savez(npz, **_sr(16000))
    np.savez(tmp_path / "sr8k.npz", **_sr(8000))
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(model_path), "--input-shape", "x=8x64", "--inputs", str(npz),
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["compare", str(model_path), "--plan", str(out)])
    assert r.exit_code == 0, r.output
    assert "onnxruntime ran on those values, so it took the same branches" in r.output
    # the then branch's network: one MatMul and one Tanh output live at a time (2 x 2,048 B), y
    # (2,048 B) and the 1 B condition; plus the graph inputs x (2,048 B) and sr (8 B)
    assert "ORT_DISABLE_ALL: 6.00 KiB (6,145 B) allocated + 2.01 KiB (2,056 B) graph inputs" in r.output
    r = CliRunner().invoke(main, ["compare", str(model_path), "--plan", str(out), "--inputs",
                                  str(tmp_path / "sr8k.npz")])
    assert r.exit_code == 1 and "If 'run_net' takes its else_branch with 'sr' = 8000" in r.output, r.output
    assert "Traceback" not in r.output


def test_an_if_in_a_loop_body_on_an_outer_value_is_decided_and_one_on_the_iteration_is_not(tmp_path):
    """``by_rate`` reads ``Equal(sr, 16000)`` from outside the Loop: the same in every iteration,
    so the given value decides it; ``by_parity`` reads the iteration number and keeps both branches."""
    model = loop_if_sample_rate()
    path = tmp_path / "loop_sr.onnx"
    onnx.save(model, path)
    assert decide_branches(model, _sr(16000), {}) == {"loop/body/by_rate": Decision("then_branch", ("sr",))}
    assert decide_branches(model, _sr(8000), {})["loop/body/by_rate"].branch == "else_branch"
    assert decide_branches(model, None, {}) == {}
    with pytest.raises(ShapeError):  # without the value the else branch must be sized, and cannot be
        plan_model(path, PlanOptions(input_shapes=SHAPE))
    planned = plan_model(path, PlanOptions(input_shapes=SHAPE, inputs=_sr(16000)))
    plan = planned.plan
    assert sorted(s.path for s in plan.subgraphs) == ["loop/body", "loop/body/by_parity/else_branch",
                                                      "loop/body/by_parity/then_branch",
                                                      "loop/body/by_rate/then_branch"]
    assert plan.extra["branches_decided"] == {"loop/body/by_rate": {"branch": "then_branch", "inputs": ["sr"]}}
    assert ("loop/body/by_rate/else_branch", "r_else", "excluded-branch") in {
        (o.graph, o.name, o.reason) for o in plan.outside}
    # body at by_parity's step: the carried s_in, r and s_out (2,048 B each) and i, cond_in and
    # even (64 B each, aligned): 6,336 B; main graph at the Loop: x (2,048 B), is_16k (64 B) and
    # the body's region, which holds the Loop's final output y where the body writes s_out
    assert plan.arena_size == plan.lower_bound == 2048 + 64 + 6336
    report = verify_plan(planned.model, plan, model_path=path, options=VerifyOptions())
    assert report.ok and report.execution is not None, report.first
    x = np.ones((8, 64), dtype=np.float32)
    with pytest.raises(PlanError, match="If 'loop/body/by_rate' takes its else_branch with 'sr' = 8000"):
        verify_plan(planned.model, plan, model_path=path, options=VerifyOptions(inputs={**_sr(8000), "x": x}))


def test_a_branch_decided_by_a_measured_shape_verifies(tmp_path):
    """``If(Equal(Size(NonZero(x)), 12))``: only the measuring run knows NonZero's shape; the plan
    decides the If on it, and verify checks the decision against the shapes the plan holds."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "t", [], [vi("t", [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "e", [], [vi("e", [2, 3])])
    twelve = helper.make_tensor("twelve", TensorProto.INT64, [], [12])
    model = make_model([helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Size", ["nz"], ["n"]),
                        helper.make_node("Equal", ["n", "twelve"], ["c"]),
                        helper.make_node("If", ["c"], ["y"], name="all_set", then_branch=then_g, else_branch=else_g)],
                       [vi("x", [2, 3])], [vi("y", [2, 3])], [twelve])
    path = tmp_path / "nz_if.onnx"
    onnx.save(model, path)
    planned = plan_model(path, PlanOptions(measure_shapes=True))  # seeded normal x: no zero, nz is [2, 6]
    assert planned.plan.extra["branches_decided"] == {"all_set": {"branch": "then_branch", "inputs": []}}
    report = verify_plan(planned.model, planned.plan, model_path=path, options=VerifyOptions())
    assert report.ok and report.execution is not None, report.first


def test_a_decision_inside_a_branch_the_plan_leaves_out_is_not_held_to_the_inputs():
    """A plan made with --branch If_0=then records, as silero-vad's did, that a nested If of the
    else_branch is decided by its shapes; no run reaches that If, so verify must not refuse inputs
    for it ('has a condition not known before the run'). A decision inside a branch another
    decision leaves out is dropped the same way; one inside the branch runs take is kept."""
    from onnxmem.graph.conditions import read_assumed

    extra = {
        "branches": {"If_0": "then_branch"},
        "branches_decided": {
            "If_0/else_branch/If_1": {"branch": "then_branch", "inputs": []},
            "If_0/then_branch/If_2": {"branch": "else_branch", "inputs": []},
            "If_0/then_branch/If_2/then_branch/If_3": {"branch": "then_branch", "inputs": []},
            "If_0/then_branch/If_2/else_branch/If_4": {"branch": "then_branch", "inputs": []},
        },
    }
    decided, _ = read_assumed(extra)
    assert sorted(decided) == ["If_0/then_branch/If_2", "If_0/then_branch/If_2/else_branch/If_4"]
