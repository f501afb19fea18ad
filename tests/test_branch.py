"""``--branch``: plan one branch of an If whose other branch cannot be sized at the given shapes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import ModelError, PlanError, ShapeError
from onnxmem.graph import excluded_branches, if_nodes
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import VerifyOptions, prove_plan, verify_plan

from .nested_models import if_unsized_branch, loop_nested_if


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "if_unsized.onnx"
    onnx.save(if_unsized_branch(), path)
    return path


def _inputs(cond: bool) -> dict[str, np.ndarray]:
    x = np.random.default_rng(3).standard_normal((1, 1024)).astype(np.float32)
    return {"x": x, "cond": np.array(cond)}


def test_an_unsized_branch_is_refused_with_the_flag_that_leaves_it_out(model_path, tmp_path):
    # the If's output has no static shape (its branches disagree): measuring it is the first advice
    with pytest.raises(ShapeError, match="pass --measure-shapes"):
        plan_model(model_path)
    # measured with the condition left to the run, the else branch still cannot be sized: the
    # advice is the flag that leaves it out
    x_only = {"x": _inputs(True)["x"]}
    with pytest.raises(ShapeError) as err:
        plan_model(model_path, PlanOptions(measure_shapes=True, inputs=x_only))
    assert "subgraph 'choose/else_branch'" in str(err.value)
    assert str(err.value).endswith("leave it out: --branch choose=then")
    # the condition given (--inputs): it decides the branch, no flag needed (tests/test_decided.py)
    decided = plan_model(model_path, PlanOptions(measure_shapes=True, inputs=_inputs(True))).plan
    assert decided.extra["branches_decided"] == {"choose": {"branch": "then_branch", "inputs": ["cond"]}}
    npz = tmp_path / "in.npz"
    np.savez(npz, **x_only)
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(model_path), "--measure-shapes", "--inputs", str(npz), "-o", str(out)])
    assert r.exit_code == 1 and "--branch choose=then" in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_the_flag_plans_the_branch_runs_take_and_lists_the_other_outside(model_path):
    planned = plan_model(model_path, PlanOptions(branches={"choose": "then_branch"}))
    plan = planned.plan
    # if_peaks' arena: x (4,096) + cond (1 B, aligned to 64) + y (4,096) + the then branch's Tile (16,384)
    assert plan.arena_size == plan.lower_bound == 4096 + 64 + 4096 + 16384
    assert [s.path for s in plan.subgraphs] == ["choose/then_branch"]
    reasons = {(o.graph, o.name): o.reason for o in plan.outside}
    assert reasons[("choose/else_branch", "nz")] == reasons[("choose/else_branch", "else_out")] == "excluded-branch"
    assert plan.extra["branches"] == {"choose": "then_branch"}
    assert any("--branch" in w and "'choose'" in w for w in plan.warnings)
    assert plan.solver["status"] == "optimal"  # the assumption is stated, not a shortfall
    assert prove_plan(plan, planned.view) == []


def test_verify_runs_the_planned_branch_and_refuses_the_other(model_path):
    planned = plan_model(model_path, PlanOptions(branches={"choose": "then"}))
    ok = verify_plan(planned.model, planned.plan, model_path=model_path, view=planned.view,
                     options=VerifyOptions(inputs=_inputs(True)))
    assert ok.ok, ok.first
    with pytest.raises(PlanError, match="takes its else_branch on these inputs, which the plan leaves out"):
        verify_plan(planned.model, planned.plan, model_path=model_path, view=planned.view,
                    options=VerifyOptions(inputs=_inputs(False)))


def test_the_cli_round_trip_reads_the_assumption_back_from_the_plan(model_path, tmp_path):
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(model_path), "--branch", "choose=then", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["extra"]["branches"] == {"choose": "then_branch"}
    for cond, code in ((True, 0), (False, 1)):
        npz = tmp_path / f"in_{cond}.npz"
        np.savez(npz, **_inputs(cond))
        r = CliRunner().invoke(main, ["verify", str(model_path), "--plan", str(out), "--inputs", str(npz)])
        assert r.exit_code == code, r.output
        assert ("verified" in r.output) if cond else ("leaves out" in r.output and "Traceback" not in r.output)


def test_a_branch_flag_that_names_no_if_or_no_branch_is_one_line(model_path):
    r = CliRunner().invoke(main, ["plan", str(model_path), "--branch", "chose=then"])
    assert r.exit_code == 1 and "'chose', which is not an If node of the model; its If nodes are 'choose'" in r.output
    r = CliRunner().invoke(main, ["plan", str(model_path), "--branch", "choose=maybe"])
    assert r.exit_code == 2 and "is not IF=then or IF=else" in r.output
    with pytest.raises(ModelError, match="must be then or else"):
        excluded_branches(if_unsized_branch(), {"choose": "both"})


def test_nested_ifs_are_named_by_their_path():
    model = loop_nested_if()
    paths = list(if_nodes(model))
    assert paths and all("/body/" in p for p in paths)
    keys = excluded_branches(model, {paths[0]: "else"})
    (key,) = keys
    assert key[-1][1] == "then_branch" and len(key) == 2
