"""Several models in one arena from the command line: `plan A.onnx B.onnx`, `--pipeline`,
the program plan file, and `verify A.onnx B.onnx --plan PROGRAM`.

Two small inference models with arenas computed by hand (alignment 1, file order, every
tensor its own buffer): ``first`` (x -> Mul -> y -> Add -> z) and ``second`` (z -> MatMul
-> u -> MatMul -> v -> Add(v, z) -> out), whose input ``z`` is ``first``'s output.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import PlanError
from onnxmem.plans import Program, read_plan

from .conftest import MODELS
from .helpers import make_model, vi

FLAGS = ["--alignment", "1", "--order", "file", "--solver", "exact", "--inplace", "off"]


def first():
    nodes = [helper.make_node("Mul", ["x", "x"], ["y"], name="mul"),
             helper.make_node("Add", ["y", "x"], ["z"], name="add")]
    return make_model(nodes, [vi("x", [4, 8])], [vi("z", [4, 8])])


def second():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "W1"),
             numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["z", "W1"], ["u"], name="mm1"),
             helper.make_node("MatMul", ["u", "W2"], ["v"], name="mm2"),
             helper.make_node("Add", ["v", "z"], ["out"], name="add_z")]
    return make_model(nodes, [vi("z", [4, 8])], [vi("out", [4, 8])], inits)


@pytest.fixture
def pair(tmp_path):
    import onnx

    a, b = tmp_path / "first.onnx", tmp_path / "second.onnx"
    onnx.save(first(), a)
    onnx.save(second(), b)
    return str(a), str(b)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(r, code: int) -> str:
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.output
    return lines[0]


def test_one_at_a_time_arena_is_the_larger_of_the_two(pair, tmp_path):
    # first: x 128 B [0, 2), y 128 [0, 2), z 128 [1, 2) (output): step 1 holds 384 B.
    # second: z 128 [0, 3) (input, read by the last Add), u 256 [0, 2), v 128 [1, 3),
    # out 128 [2, 3): step 1 holds z + u + v = 512 B (step 0: 384, step 2: 384).
    # One at a time nothing crosses: the arena is max(384, 512) = 512 B.
    out = tmp_path / "program.json"
    r = run("plan", *pair, *FLAGS, "-o", out)
    assert r.exit_code == 0, r.output
    program = read_plan(out, "program")
    assert program is not None and program.mode == "one-at-a-time" and program.handovers == {}
    assert [p.extra["program"]["alone"] for p in program.plans] == [384, 512]
    assert program.arena_size == program.lower_bound == 512
    assert all(p.arena_size == 512 for p in program.plans)
    assert "arena        512 B" in r.output
    data = json.loads(out.read_text())
    assert data["schema_version"] == 1 and len(data["program"]["plans"]) == 2
    v = run("verify", *pair, "--plan", out)
    assert v.exit_code == 0, v.output
    assert "executed  model 0: 2 nodes" in v.output and "executed  model 1: 3 nodes" in v.output
    assert v.output.rstrip().endswith("verified")
    s = run("show", out)
    assert s.exit_code == 0 and "model 1" in s.output and "512 B" in s.output


def test_pipeline_hands_z_over_in_the_arena(pair, tmp_path):
    # z is written by first's Add (its step 1) and read by second's last Add (step 2): one
    # buffer live over joint steps [1, 5). Joint steps: 0 x+y = 256, 1 x+y+z = 384,
    # 2 z+u = 384, 3 z+u+v = 512, 4 z+v+out = 384: the arena is 512 B, z at one offset.
    out = tmp_path / "pipeline.json"
    r = run("plan", *pair, *FLAGS, "--pipeline", "-o", out)
    assert r.exit_code == 0, r.output
    program = read_plan(out, "program")
    assert program is not None and program.mode == "pipeline" and program.handovers == {"z": 0}
    assert program.arena_size == program.lower_bound == 512
    a, b = program.plans
    assert a.tensor("z").offset == b.tensor("z").offset
    assert "handover     'z' (model 0 -> 1)" in r.output
    v = run("verify", *pair, "--plan", out)
    assert v.exit_code == 0, v.output
    assert "handing over 1 tensors" in v.output and v.output.rstrip().endswith("verified")
    # without --plan, verify plans them as plan does
    again = run("verify", *pair, *FLAGS, "--pipeline")
    assert again.exit_code == 0 and "planned now" in again.output, again.output


def _corrupt(src, dst, edit):
    data = json.loads(src.read_text())
    edit(data["program"])
    dst.write_text(json.dumps(data))
    return dst


def test_overlap_across_the_handover_is_caught(pair, tmp_path):
    out = tmp_path / "pipeline.json"
    assert run("plan", *pair, *FLAGS, "--pipeline", "-o", out).exit_code == 0

    def onto_z(prog):  # second's u, live with z at its step 0, moved onto z's bytes
        tensors = {t["name"]: t for t in prog["plans"][1]["tensors"]}
        tensors["u"]["offset"] = tensors["z"]["offset"]

    r = run("verify", *pair, "--plan", _corrupt(out, tmp_path / "bad1.json", onto_z))
    assert "'u' and 'z'" in one_line_error(r, 3) and "share bytes" in r.output and "static    FAILED" in r.output

    def moved(prog):  # first writes z somewhere second does not read it
        z = next(t for t in prog["plans"][0]["tensors"] if t["name"] == "z")
        z["offset"] = 384
        for t in prog["plans"][0]["tensors"]:
            if t["name"] in ("x", "y"):
                t["offset"] = 128 * (t["name"] == "y")

    r = run("verify", *pair, "--plan", _corrupt(out, tmp_path / "bad2.json", moved), "--static-only")
    assert "stays where it was written" in one_line_error(r, 3)


def test_hostile_program_plans_get_one_line(pair, tmp_path):
    out = tmp_path / "program.json"
    single = tmp_path / "single.json"
    assert run("plan", *pair, *FLAGS, "-o", out).exit_code == 0
    assert run("plan", pair[0], *FLAGS, "-o", single).exit_code == 0
    # wrong kind: a plan for one model given for two, a program plan given for one
    assert "plan for one model" in one_line_error(run("verify", *pair, "--plan", single), 1)
    assert "program plan" in one_line_error(run("verify", pair[0], "--plan", out), 1)
    # wrong member count: three models for two plans, or a program of one plan
    assert "holds 2 plans, for 3 models" in one_line_error(run("verify", *pair, pair[1], "--plan", out), 1)
    bad = _corrupt(out, tmp_path / "one.json", lambda p: p["plans"].pop())
    assert "holds 1 plans" in one_line_error(run("verify", *pair, "--plan", bad), 1)
    # each member for another model: the models given in the other order
    assert "was made for a model with sha256" in one_line_error(run("verify", pair[1], pair[0], "--plan", out), 1)
    # fields a program plan must not have or must get right
    for edit, words in [(lambda p: p.update(mode="parallel"), "program/mode"),
                        (lambda p: p.update(arena_size=-1), "not in [0, 2^62)"),
                        (lambda p: p.update(extra=1), "unknown field"),
                        (lambda p: p.update(handovers=[{"name": "z", "from": 0}]), "mode one-at-a-time"),
                        (lambda p: p.update(mode="pipeline", handovers=[{"name": "nope", "from": 0}]),
                         "not planned in models 0 and 1"),
                        (lambda p: p["plans"].reverse(), "does not say it is model 0"),
                        (lambda p: p["plans"][1].update(order=7), "plan 1: field 'order'")]:
        r = run("verify", *pair, "--plan", _corrupt(out, tmp_path / "bad.json", edit))
        assert words in one_line_error(r, 1)
    (tmp_path / "v.json").write_text(json.dumps({"schema_version": 9, "program": {}}))
    assert "program schema_version 9" in one_line_error(run("show", tmp_path / "v.json"), 1)


def test_flags_for_one_model_are_refused_with_several(pair, tmp_path):
    for flags in (["--budget", "1000"], ["--budget-sweep", tmp_path / "s.png"], ["--annotate", tmp_path / "a.onnx"],
                  ["--rewrite-out", tmp_path / "r.onnx"], ["--dim", "n=1:4"], ["--concurrency", "dag"]):
        r = run("plan", *pair, *flags)
        assert r.exit_code == 2 and "works on one model" in r.output, (flags, r.output)
    r = run("plan", pair[0], "--pipeline")
    assert r.exit_code == 2 and "two or more models" in r.output
    r = run("verify", *pair, "--original", pair[0])
    assert r.exit_code == 2 and "--original works on one model" in r.output


def test_pipeline_needs_a_tensor_to_hand_over(pair, tmp_path):
    assert "no graph output of" in one_line_error(run("plan", pair[1], pair[0], "--pipeline"), 1)
    import onnx

    wide = tmp_path / "wide.onnx"  # z [4, 16]: the same name, another shape
    m = make_model([helper.make_node("Relu", ["z"], ["w"], name="r")], [vi("z", [4, 16])], [vi("w", [4, 16])])
    onnx.save(m, wide)
    assert "must agree on its dtype and shape" in one_line_error(run("plan", pair[0], wide, "--pipeline"), 1)


def test_one_model_plan_has_no_program(pair, tmp_path):
    out = tmp_path / "one.json"
    r = run("plan", pair[0], *FLAGS, "-o", out)
    assert r.exit_code == 0 and "program" not in r.output
    plan = read_plan(out)
    assert not isinstance(plan, Program)
    assert plan.arena_size == 384 and "program" not in plan.extra
    with pytest.raises(PlanError, match="is a plan for one shape, not a program plan"):
        read_plan(out, "program")


TRAINING = MODELS / "training"


def test_training_fixture_train_and_eval_plan_into_one_arena(tmp_path):
    train, ev = TRAINING / "mlp.train.onnx", TRAINING / "mlp.eval.onnx"
    out = tmp_path / "mlp.json"
    r = run("plan", train, ev, "-o", out)
    assert r.exit_code == 0, r.output
    program = read_plan(out, "program")
    assert program is not None
    alone = [p.extra["program"]["alone"] for p in program.plans]
    assert program.arena_size == max(alone) == program.lower_bound
    r = run("verify", train, ev, "--plan", out, "--static-only")
    assert r.exit_code == 0 and "verified (static proof only)" in r.output, r.output
    if importlib.util.find_spec("onnxruntime.training") is None:  # tests/test_training.py runs them there
        assert "make training-env" in one_line_error(run("verify", train, ev, "--plan", out), 1)
