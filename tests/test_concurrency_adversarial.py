"""Adversarial checks of --concurrency dag: graphs where the rule is subtle, checked against
every state a concurrent schedule can reach; hand-corrupted plans; the trials' bounds; the flags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.planning.pipeline import PlanOptions, plan_loaded
from onnxmem.proof.plan import prove_plan
from onnxmem.runtime.arena import ExecutionOptions
from onnxmem.runtime.concurrent import ConcurrentOptions, ConcurrentRun

from .helpers import make_model, vi
from .test_hostile import assert_refused_subprocess

SHAPE = [1, 256]
ROOT = Path(__file__).resolve().parent.parent


def _save(model: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def multi_reader() -> onnx.ModelProto:
    """``a`` is read by three branches of different depths, one of them reading it last."""
    n = helper.make_node
    nodes = [n("Exp", ["x"], ["a"], name="exp"),
             n("Neg", ["a"], ["b1"], name="neg"), n("Sin", ["b1"], ["b2"], name="sin"),
             n("Add", ["b2", "a"], ["b3"], name="addb"),
             n("Cos", ["a"], ["c1"], name="cos"),
             n("Tanh", ["x"], ["e1"], name="tanh"), n("Mul", ["e1", "a"], ["e2"], name="mul"),
             n("Sum", ["b3", "c1", "e2"], ["y"], name="sum")]
    return make_model(nodes, [vi("x", SHAPE)], [vi("y", SHAPE)])


# ---------------------------------------------------------------- the trials' bounds


def test_concurrent_trials_stop_at_the_time_limit(tmp_path):
    """--trials has no upper bound of its own: --time-limit bounds the reference and the trials as
    one run, which stops in one line naming it and the flag (it ran on, unannounced, before)."""
    model = _save(multi_reader(), tmp_path)
    assert_refused_subprocess(["verify", model, "--concurrency", "dag", "--trials", str(10**9),
                               "--time-limit", "1"], tmp_path,
                              "the concurrent trials (1,000,000,000 of them, up to 2 nodes at once) did not "
                              "finish in 1 s and was stopped; raise --time-limit")


def random_draws() -> onnx.ModelProto:
    """Nodes that draw random numbers beside a chain: an unseeded RandomNormal (no inputs: it may run
    at any time), a seeded RandomUniformLike and a Dropout in training mode."""
    n = helper.make_node
    nodes = [n("Exp", ["x"], ["a"], name="exp"), n("Neg", ["a"], ["b"], name="neg"),
             n("RandomNormal", [], ["r"], shape=SHAPE, name="normal"),
             n("RandomUniformLike", ["a"], ["u"], seed=3.0, name="uniform"),
             n("Dropout", ["b", "ratio", "train"], ["d", "mask"], name="dropout"),
             n("Sum", ["d", "r", "u"], ["y"], name="sum")]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "train")]
    return make_model(nodes, [vi("x", SHAPE)], [vi("y", SHAPE)], inits)


def test_trials_of_a_graph_with_random_draws_equal_the_reference(tmp_path):
    """A kernel run once draws other numbers: each trial runs a fresh one of every node that draws,
    as the reference did (the trials reused the reference's kernels, and every correct plan of
    such a graph was reported wrong)."""
    model = _save(random_draws(), tmp_path)
    r = CliRunner().invoke(main, ["verify", str(model), "--concurrency", "dag", "--trials", "4", "--threads", "3"])
    assert r.exit_code == 0, r.output
    assert "trials    4 of 4 equal the reference" in r.stdout
    # a wrong plan of the same graph is still caught by the trials: the sequential plan, its
    # unordered pairs sharing bytes, run in the schedule the proof names
    seq = plan_loaded(random_draws(), model, PlanOptions(order="file"))
    found = prove_plan(seq.plan, seq.view, concurrency="dag")
    assert found and found[0].kind == "concurrency"
    run = ConcurrentRun(seq.plan, random_draws(), seq.view, ExecutionOptions(),
                        ConcurrentOptions(trials=1, threads=1, schedule=found[0].schedule), model)
    assert run.run_trials().failures == 1


def test_a_training_graph_runs_once_in_its_order_under_dag(tmp_path):
    """A training step's labels, seeded dropout and stand-in kernels are the sequential run's: under
    --concurrency dag verify runs it as without the flag (here: one line, no training kernels in
    this onnxruntime), and the trials refuse it in one line."""
    model = ROOT / "models" / "training" / "mlp.train.onnx"
    seq = CliRunner().invoke(main, ["verify", str(model)])
    dag = CliRunner().invoke(main, ["verify", str(model), "--concurrency", "dag", "--trials", "2"])
    assert dag.exit_code == seq.exit_code
    assert dag.stderr.splitlines()[-1] == seq.stderr.splitlines()[-1]
    loaded = onnx.load(model)
    res = plan_loaded(loaded, model, PlanOptions(concurrency="dag"))
    with pytest.raises(OnnxmemError, match="concurrent trials do not run a training graph"):
        ConcurrentRun(res.plan, loaded, res.view, ExecutionOptions(), ConcurrentOptions(), model)


# ---------------------------------------------------------------- the flags


def _usage_error(args: list[str]) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    return r.stderr.splitlines()[-1]


def test_trial_flags_without_dag_trials_are_refused(tmp_path):
    """--trials and --threads set the dag trials: given without --concurrency dag (or with --static-only,
    or beside several models) they did nothing, silently; now one line names them and the fix."""
    model = _save(multi_reader(), tmp_path)
    line = _usage_error(["verify", model, "--trials", "50", "--threads", "8"])
    assert line == ("Error: --trials and --threads set the concurrent trials of --concurrency dag; add "
                    "--concurrency dag (or leave out --trials and --threads)")
    line = _usage_error(["verify", model, "--concurrency", "dag", "--static-only", "--threads", "4"])
    assert line == "Error: --static-only runs nothing; leave out --threads (or --static-only)"
    line = _usage_error(["verify", model, model, "--pipeline", "--trials", "3"])
    assert "--trials works on one model" in line
    line = _usage_error(["compare", model, "--threads", "4"])
    assert line.startswith("Error: --threads sets onnxruntime's inter-op threads of --execution-mode parallel; "
                           "add --execution-mode parallel")
    r = CliRunner().invoke(main, ["verify", str(model), "--concurrency", "dag", "--trials", "3", "--threads", "3"])
    assert r.exit_code == 0 and "trials    3 of 3 equal the reference" in r.stdout, r.output


def test_a_dag_plan_verified_without_the_flag_says_rule_9_held(tmp_path):
    """A plan that records --concurrency dag is held to rule 9 by every verify; the static line says
    so (it listed the sequential rules only), and the run is one run in its order."""
    model = _save(multi_reader(), tmp_path)
    plan = tmp_path / "dag.json"
    assert CliRunner().invoke(main, ["plan", str(model), "--concurrency", "dag", "-o", str(plan)]).exit_code == 0
    r = CliRunner().invoke(main, ["verify", str(model), "--plan", str(plan)])
    assert r.exit_code == 0, r.output
    assert "no live overlap, every pair sharing bytes ordered by the graph" in r.stdout
    assert "trials" not in r.stdout and "executed  8 nodes in one cpu arena" in r.stdout


def test_compare_parallel_keeps_an_explicit_sequential_plan(tmp_path):
    """compare --execution-mode parallel plans with --concurrency dag unless --concurrency says otherwise:
    an explicit sequential plan is made and warned about (it was made dag, the flag ignored)."""
    model = _save(multi_reader(), tmp_path)
    r = CliRunner().invoke(main, ["compare", str(model), "--execution-mode", "parallel", "--concurrency",
                                  "sequential"])
    assert r.exit_code == 0, r.output
    assert "[--concurrency sequential]" in r.stdout
    assert "warning: the plan holds for its own order only" in r.output
