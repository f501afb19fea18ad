"""Bad input a user can give: one line and a non-zero exit, or the right answer; no traceback."""

from __future__ import annotations

import csv

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from onnxmem.cli.main import main

from .conftest import MODELS
from .helpers import make_model, vi

RESNET = str(MODELS / "resnet_cnn.onnx")


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(r, code: int = 1) -> str:
    assert r.exit_code == code, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


@pytest.mark.parametrize("args", [
    ("verify", RESNET, "--seed", "-1"),
    ("compare", RESNET, "--seed", "-1"),
    ("generate", "randwire", "g.onnx", "--seed", "-1"),
    ("verify", RESNET, "--time-limit", "inf"),
    ("verify", RESNET, "--time-limit", "1e10"),
    ("plan", RESNET, "--timeout", "nan"),
    ("verify", RESNET, "--rtol", "nan"),
    ("verify", RESNET, "--atol", "inf"),
])
def test_a_value_out_of_range_is_a_usage_error(tmp_path, monkeypatch, args):
    """A negative seed (numpy's generators refuse one), an infinite or past-any-timer time limit, a
    NaN tolerance or budget: each names its option; none reaches the code that would fail on it."""
    monkeypatch.chdir(tmp_path)
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{args[-2]}'" in r.output and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []


def test_compare_feeds_an_input_the_graph_also_outputs(tmp_path):
    """An input passed through as an output (an attention mask returned as it came) is fed to the
    measured session like any other input."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [vi("x", ["batch", 4]), vi("mask", ["batch", 4])], [vi("y", ["batch", 4]), vi("mask", ["batch", 4])])
    path = tmp_path / "passthrough.onnx"
    onnx.save(model, path)
    r = run("compare", path, "--dim", "batch=2")
    assert r.exit_code == 0, r.output
    assert "measured     default session" in r.output


def test_a_budget_for_a_model_without_nodes_is_one_line(tmp_path):
    path = tmp_path / "empty.onnx"
    onnx.save(make_model([], [vi("x", [1, 4])], [vi("x", [1, 4])]), path)
    for flag, value in (("--budget", "1"), ("--budget-sweep", str(tmp_path / "s.png"))):
        assert "has no node: there is nothing to recompute" in one_line(run("plan", path, flag, value))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.onnx"]


def test_zoo_out_under_a_file_or_holding_a_file_named_plans_is_one_line(tmp_path):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "m.onnx").write_bytes((MODELS / "resnet_cnn.onnx").read_bytes())
    under = tmp_path / "file"
    under.write_text("x")
    assert "which is not a folder" in one_line(run("zoo", zoo, "--out", under / "out"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "plans").write_text("x")
    assert "holds 'plans', which is not a folder" in one_line(run("zoo", zoo, "--out", out))


def test_buffers_past_two_tib_are_placed_right_by_every_solver(tmp_path):
    """Six 1 TiB buffers, four live at once: offsets of 2 TiB and more pass what the compiled
    placement's packed keys hold, so those placements run in numpy: the arena is 4 TiB, optimal."""
    problem = tmp_path / "big.csv"
    rows = [["id", "lower", "upper", "size"], *([str(i), str(i), str(i + 4), str(1 << 40)] for i in range(6))]
    with open(problem, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    for solver in ("greedy", "best-greedy", "exact", "auto"):
        r = run("pack", problem, "--solver", solver)
        assert r.exit_code == 0, r.output
        assert f"height       {4 << 40:,}" in r.output and "status       optimal" in r.output


@pytest.mark.parametrize(("nodes", "said"), [
    ([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
      helper.make_node("Relu", ["b"], ["y"], name="relu_y")],
     "nodes #0 (Add), 'relu_b' (Relu), 'relu_y' (Relu) cannot be ordered: nodes that read each other's outputs "
     "in a cycle hold them up; fix the model"),
    ([helper.make_node("Add", ["x", "gone"], ["z"], name="add"), helper.make_node("Relu", ["z"], ["y"], name="r")],
     "value 'gone' read by node 'add' (Add) is produced by no node, input or initializer; fix the model"),
])
def test_a_graph_no_run_could_order_is_named_not_sent_to_measure(tmp_path, nodes, said):
    """Inference leaves these values unknown, as it would data-dependent ones; the error names the
    defect, not --measure-shapes (a run of the model fails on the same defect)."""
    path = tmp_path / "broken.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])]), path)
    out = one_line(run("plan", path))
    assert said in out and "--measure-shapes" not in out


def _if_without_condition() -> onnx.ModelProto:
    """An If whose condition input is named '' (an omitted input) with a branch of one Relu each."""
    def branch(name):
        return helper.make_graph([helper.make_node("Relu", ["x"], [f"{name}_y"])], name, [],
                                 [vi(f"{name}_y", [1, 4])])
    nodes = [helper.make_node("If", [""], ["o"], name="if_0", then_branch=branch("then"), else_branch=branch("other")),
             helper.make_node("Sigmoid", ["o"], ["y"], name="s")]
    return make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])])


@pytest.mark.parametrize(("model", "said"), [
    (make_model([helper.make_node("Relu", [""], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])]),
     "node 'r' (Relu) leaves out its required input 0 ('X'): its name is empty, and onnxruntime refuses such a "
     "node; fix the model"),
    (make_model([helper.make_node("Add", ["x"], ["y"], name="a")], [vi("x", [1, 4])], [vi("y", [1, 4])]),
     "node 'a' (Add) has 1 input where Add of opset 17 takes at least 2; fix the model"),
    (_if_without_condition(), "node 'if_0' (If) leaves out its required input 0 ('cond')"),
    (make_model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])]),
     "node 'r' (Relu) has 2 inputs where Relu of opset 17 takes at most 1; fix the model"),
    (make_model([helper.make_node("Relu", ["x"], ["y", "z"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])]),
     "node 'r' (Relu) has 2 outputs where Relu of opset 17 gives at most 1; fix the model"),
])
def test_a_node_its_schema_does_not_allow_is_refused_by_every_command(tmp_path, model, said):
    """onnx's schema marks the input required, or bounds the counts, and onnxruntime refuses the
    node; shape inference passes over it (or calls the size of an output no kernel gives
    data-dependent). verify of the If ended in a TypeError in the arena run (the fuzz case
    struct:880538): each command now names the node and what is wrong before anything runs."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for command in ("plan", "verify", "compare"):
        assert said in one_line(run(command, path)), command


def test_an_optional_input_left_out_is_planned(tmp_path):
    """An empty name where the schema's input is optional (Clip's min, Resize's roi) is no defect."""
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["c"], name="clip"),
             helper.make_node("Resize", ["c", "", "scales"], ["y"], name="resize", mode="nearest")]
    inits = [helper.make_tensor("hi", onnx.TensorProto.FLOAT, [], [6.0]),
             helper.make_tensor("scales", onnx.TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 4, 4])], inits), path)
    assert run("plan", path).exit_code == 0
    r = run("verify", path)
    assert r.exit_code == 0 and "verified" in r.output, r.output


def test_an_input_of_more_dims_than_an_array_holds_is_one_line(tmp_path):
    """numpy arrays hold at most 64 dims, and onnxruntime takes its inputs as arrays."""
    shape = [1] * 65
    path = tmp_path / "deep.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", shape)], [vi("y", shape)]),
              path)
    for command in ("verify", "compare"):
        out = one_line(run(command, path))
        assert "input 'x' has rank 65, past the 64 dims of a numpy array" in out
    assert run("verify", path, "--static-only").exit_code == 0


@pytest.mark.parametrize("args", [
    ("plan", RESNET, "--budget-sweep", "sweep.jpg"),
    ("fit", RESNET, "--memory", "1GiB", "--dim", "batch=1:8", "--plot", "fit.svg"),
])
def test_a_png_written_under_another_suffix_is_a_usage_error(tmp_path, monkeypatch, args):
    """The sweep and fit pictures are PNG bytes: a .jpg or .svg path would hold them misnamed."""
    monkeypatch.chdir(tmp_path)
    assert "the picture is written as PNG; give a path ending in .png" in one_line(run(*args))
    assert list(tmp_path.iterdir()) == []


def _non_tensor_input(kind: str) -> onnx.ModelProto:
    """A model whose second graph input, named ``se\\nq``, is a sequence or a map of float tensors;
    its first, ``x``, is a tensor of ``[batch, 3]``."""
    name = "se\nq"
    if kind == "sequence":
        value = helper.make_tensor_sequence_value_info(name, onnx.TensorProto.FLOAT, ["batch", 3])
        nodes = [helper.make_node("SequenceAt", [name, "i"], ["s"], name="at"),
                 helper.make_node("Add", ["s", "x"], ["y"], name="add")]
    else:
        value = helper.make_value_info(name, helper.make_map_type_proto(
            onnx.TensorProto.INT64, helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, ["batch", 3])))
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    index = helper.make_tensor("i", onnx.TensorProto.INT64, [], [0])
    return make_model(nodes, [vi("x", ["batch", 3]), value], [vi("y", ["batch", 3])], [index])


@pytest.mark.parametrize("kind", ["sequence", "map"])
@pytest.mark.parametrize("args", [
    ("plan", "--dim", "batch=2"), ("plan", "--dim", "batch=2", "--input-shape", "se\nq=2x3"),
    ("plan", "--dim", "batch=2", "--measure-shapes"), ("verify", "--dim", "batch=2"),
    ("verify", "--dim", "batch=2", "--static-only"), ("plan", "--dim", "batch=1:4"),
])
def test_an_input_that_is_no_tensor_is_named_with_a_fix_a_model_change_makes(tmp_path, kind, args):
    """A sequence or map graph input: --input-shape sent the user to --measure-shapes, which failed
    on its element type, or sent them back to --input-shape. No flag sizes it: the line says that
    onnxmem plans tensor inputs only, names the input escaped, and asks for a tensor in its place."""
    path = tmp_path / "m.onnx"
    onnx.save(_non_tensor_input(kind), path)
    out = one_line(run(args[0], path, *args[1:]))
    assert (f"graph input 'se\\nq' is a {kind}, not a tensor: onnxmem plans tensor inputs only" in out
            and "export the model with a tensor input in its place" in out), out
    assert "pass --" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize(("args", "said"), [
    (("transformer", "--size", "10001"), "10,001: transformer takes at most 10,000 layers"),
    (("randwire", "--graph", "er", "--size", "3001"),
     "3,001: randwire with --graph er takes at most 3,000 graph nodes"),
    (("train-mlp", "--size", "1001"), "1,001: train-mlp takes at most 1,000 layers"),
    (("attention", "--size", "100001"), "100001 is not in the range 1<=x<=100000"),
])
def test_generate_refuses_a_size_past_its_kinds_bound(tmp_path, monkeypatch, args, said):
    """--size had no upper bound: a huge one built for hours or ran out of memory (train-mlp's
    weights are 263 KB a layer). Each KIND takes at most its own bound (randwire's Erdos-Renyi graph
    less, its edges growing as n^2); the option's range is the largest of them."""
    monkeypatch.chdir(tmp_path)
    r = run("generate", args[0], "g.onnx", *args[1:])
    assert r.exit_code == 2, r.output
    assert "Invalid value for '--size'" in r.output and said in r.output and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []


def test_generate_takes_a_size_at_its_kinds_bound_and_lists_the_bounds(tmp_path):
    from onnxmem.cli.generate import MAX_SIZE
    from onnxmem.cli.registries import all_generators

    assert MAX_SIZE == max(g.most for g in all_generators().values())
    r = run("generate", "attention", tmp_path / "a.onnx", "--size", "100000")
    assert r.exit_code == 0, r.output
    assert onnx.load(tmp_path / "a.onnx").graph.input[0].type.tensor_type.shape.dim[1].dim_value == 100_000
    listing = run("list", "generators").output
    assert "--size counts graph nodes, at most 20,000" in listing
    assert "--size counts tokens, at most 100,000" in listing and "--size counts layers, at most 1,000" in listing


def _loop_model(trip_count: bool, trips: int = 3) -> onnx.ModelProto:
    """x -> Relu -> Loop 'forever\\nloop' (a Relu carried through its body) -> Relu -> y; the Loop's
    trip count M is ``trips`` or left out, its condition cond always left out."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"),
         helper.make_node("Relu", ["v_in"], ["v_out"], name="body_relu")],
        "body", [vi("i", [], onnx.TensorProto.INT64), vi("c_in", [], onnx.TensorProto.BOOL), vi("v_in", [1, 4])],
        [vi("c_out", [], onnx.TensorProto.BOOL), vi("v_out", [1, 4])])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="pre"),
             helper.make_node("Loop", ["M" if trip_count else "", "", "a"], ["v"], name="forever\nloop", body=body),
             helper.make_node("Relu", ["v"], ["y"], name="post")]
    inits = [helper.make_tensor("M", onnx.TensorProto.INT64, [], [trips])] if trip_count else []
    return make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], inits, value_info=[vi("v", [1, 4])])


@pytest.mark.parametrize("command", ["verify", "compare"])
def test_a_loop_with_neither_trip_count_nor_condition_is_refused_before_it_runs(tmp_path, command):
    """By the ONNX spec such a Loop runs forever: the run went on until --time-limit stopped it
    ('the arena run did not finish in 3 s'). It is named in one line before any run starts; the
    static proof, which runs nothing, still proves the plan, and the Loop with a trip count runs."""
    path = tmp_path / "forever.onnx"
    onnx.save(_loop_model(trip_count=False), path)
    out = one_line(run(command, path, "--time-limit", "3"))
    assert ("Loop 'forever\\nloop' has neither a trip count (input M) nor a condition (input cond), so it never "
            "ends" in out and "give it a trip count" in out), out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forever.onnx"]
    r = run("verify", path, "--static-only")
    assert r.exit_code == 0 and "verified (static proof only)" in r.output, r.output
    onnx.save(_loop_model(trip_count=True), path)
    r = run(command, path, "--time-limit", "30")
    assert r.exit_code == 0, r.output


def test_a_loop_whose_trip_count_cannot_end_in_time_is_stopped_at_its_pace_not_at_the_limit(tmp_path):
    """A trip count of 10^12 (a damaged file had 8,589,934,595: fuzz seed 3600000, bytes:3600066):
    the arena run went on to --time-limit, then waited as long again for the ordinary run beside it.
    After a second of iterations the Loop's pace shows the rest cannot end in time: one line says
    so, and the run beside, whose values are no longer wanted, is stopped rather than waited for."""
    import time

    path = tmp_path / "long.onnx"
    onnx.save(_loop_model(trip_count=True, trips=10**12), path)
    t0 = time.monotonic()
    r = run("verify", path, "--time-limit", "120")
    spent = time.monotonic() - t0
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert ("Loop 'forever\\nloop' runs 1,000,000,000,000 iterations (its trip count M); " in r.output
            and "past --time-limit 120 s: give it a smaller trip count or raise --time-limit" in r.output), r.output
    assert spent < 60, spent  # not the 120 s limit, nor the run beside waited for
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.onnx"]


def _counting_loop(trips: int, stop: int | None) -> onnx.ModelProto:
    """x -> Loop 'count' of trip count ``trips`` (a Relu carried) -> y; its body's condition is its
    condition input passed on (``stop=None``: it runs every iteration), or ``i < stop``."""
    cond = ([helper.make_node("Constant", [], ["stop"], value=helper.make_tensor("s", onnx.TensorProto.INT64, [], [stop])),
             helper.make_node("Less", ["i", "stop"], ["c_out"])] if stop is not None
            else [helper.make_node("Identity", ["c_in"], ["c_out"])])
    body = helper.make_graph(
        [*cond, helper.make_node("Relu", ["v_in"], ["v_out"])],
        "body", [vi("i", [], onnx.TensorProto.INT64), vi("c_in", [], onnx.TensorProto.BOOL), vi("v_in", [1, 4])],
        [vi("c_out", [], onnx.TensorProto.BOOL), vi("v_out", [1, 4])])
    loop = helper.make_node("Loop", ["M", "go", "x"], ["y"], name="count", body=body)
    return make_model([loop], [vi("x", [1, 4])], [vi("y", [1, 4])],
                      [helper.make_tensor("M", onnx.TensorProto.INT64, [], [trips]),
                       helper.make_tensor("go", onnx.TensorProto.BOOL, [], [True])])


def test_only_a_loop_that_runs_every_iteration_of_its_trip_count_is_projected(tmp_path, monkeypatch):
    """A trip count bounds a Loop whose body computes its condition (exporters write 2^63 - 1 for a
    while loop): the arena run projects the remaining time only where the body passes its condition
    on unchanged, so every iteration runs. With the projection made after the first iteration,
    the Loop of 10^12 iterations is stopped, and the one of 2^63 - 1 that its body ends at 40 runs."""
    from onnxmem.core.errors import RuntimeBackendError
    from onnxmem.model import passes_true
    from onnxmem.planning.pipeline import plan_model
    from onnxmem.runtime import trips
    from onnxmem.verify.run import execute_plan

    monkeypatch.setattr(trips, "PROJECT_AFTER", 0.0)
    for model, runs_all in ((_counting_loop(10**12, None), True), (_counting_loop(2**63 - 1, 40), False)):
        assert passes_true(model.graph.node[0].attribute[0].g) is runs_all
        path = tmp_path / "count.onnx"
        onnx.save(model, path)
        p = plan_model(path)
        if runs_all:
            with pytest.raises(RuntimeBackendError, match=r"Loop 'count' runs 1,000,000,000,000 iterations"):
                execute_plan(p.plan, p.model, p.view, model_path=path)
        else:
            assert execute_plan(p.plan, p.model, p.view, model_path=path).findings == ()


def _true_loop_model(cond: str, body_cond: str) -> onnx.ModelProto:
    """x -> Loop 'spin' (no trip count) over a Relu; its condition ``cond``: ``init`` (an
    initializer true), ``input`` (a graph input, given true), ``const`` (a Constant true) or
    ``false`` (an initializer false); its body's condition output ``body_cond``: ``same`` (the
    condition input through an Identity), ``direct`` (the condition input itself), ``const`` (a
    Constant true in the body) or ``less`` (the iteration number below 3: it ends)."""
    body_nodes = [helper.make_node("Relu", ["v_in"], ["v_out"], name="body_relu")]
    out = {"direct": "c_in", "same": "c_out", "const": "c_out", "less": "c_out"}[body_cond]
    if body_cond == "same":
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"))
    elif body_cond == "const":
        body_nodes.append(helper.make_node("Constant", [], ["c_out"], name="yes",
                                           value=helper.make_tensor("t", onnx.TensorProto.BOOL, [], [True])))
    elif body_cond == "less":
        body_nodes += [helper.make_node("Constant", [], ["three"], name="three",
                                        value=helper.make_tensor("t", onnx.TensorProto.INT64, [], [3])),
                       helper.make_node("Less", ["i", "three"], ["c_out"], name="less")]
    body = helper.make_graph(
        body_nodes, "body", [vi("i", [], onnx.TensorProto.INT64), vi("c_in", [], onnx.TensorProto.BOOL),
                             vi("v_in", [1, 4])],
        [vi(out, [], onnx.TensorProto.BOOL), vi("v_out", [1, 4])])
    nodes = [helper.make_node("Loop", ["", "go", "x"], ["v"], name="spin", body=body),
             helper.make_node("Relu", ["v"], ["y"], name="post")]
    inputs = [vi("x", [1, 4])]
    inits = []
    if cond == "const":
        nodes.insert(0, helper.make_node("Constant", [], ["go"], name="go",
                                         value=helper.make_tensor("t", onnx.TensorProto.BOOL, [], [True])))
    elif cond == "input":
        inputs.append(vi("go", [], onnx.TensorProto.BOOL))
    else:
        inits.append(helper.make_tensor("go", onnx.TensorProto.BOOL, [], [cond != "false"]))
    return make_model(nodes, inputs, [vi("y", [1, 4])], inits, value_info=[vi("v", [1, 4])])


@pytest.mark.parametrize("cond, body_cond", [("init", "same"), ("const", "direct"), ("init", "const")])
def test_a_loop_whose_condition_stays_true_is_refused_before_it_runs(tmp_path, cond, body_cond):
    """No trip count, a constant true condition that the body passes on (or makes true again):
    by the ONNX spec the Loop never ends; verify names it in one line before any run, where the run
    went on until --time-limit, and writes nothing."""
    path = tmp_path / "spin.onnx"
    onnx.save(_true_loop_model(cond, body_cond), path)
    r = run("verify", path, "--time-limit", "5")
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert ("Loop 'spin' has no trip count (input M), and its condition (input cond) is a constant true that its "
            "body passes on unchanged, so it never ends" in r.output), r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spin.onnx"]


@pytest.mark.parametrize("cond, body_cond", [("false", "same"), ("input", "same"), ("init", "less")])
def test_a_loop_whose_condition_may_end_it_is_not_refused(tmp_path, cond, body_cond):
    """A condition false at the start, one the caller gives (a graph input), or one the body
    computes (the iteration number below 3): each may end, and the check lets each run."""
    from onnxmem.model import check_loops_end

    check_loops_end(_true_loop_model(cond, body_cond).graph)


def test_a_loop_that_never_ends_is_refused_before_the_run_that_measures_shapes(tmp_path):
    """``--measure-shapes`` runs the model once: a Loop with neither M nor cond is named before that
    run starts, where the run went on until --time-limit stopped it."""
    path = tmp_path / "forever.onnx"
    onnx.save(_loop_model(trip_count=False), path)
    r = run("plan", path, "--measure-shapes", "--time-limit", "3", "-o", tmp_path / "p.json")
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "Loop 'forever\\nloop' has neither a trip count (input M) nor a condition (input cond)" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forever.onnx"]
    onnx.save(_loop_model(trip_count=True), path)
    r = run("plan", path, "--measure-shapes", "-o", tmp_path / "p.json")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("opset", [0, 2**31, 2**40])
def test_a_version_onnx_cannot_read_leaves_the_counts_unchecked(tmp_path, opset):
    """onnx reads an op's version as a C int: the schema lookup of a model's opset past it raised a
    TypeError (fuzz seed 990000, struct:990063 and five more); such a node is left to the checks
    that follow, as an op onnx has no schema for is."""
    from onnxmem.model import arity_error

    assert arity_error("Relu", "", ("x", "x"), 1, opset) is None
    assert arity_error("Relu", "", ("x", "x"), 1, 17) == "has 2 inputs where Relu of opset 17 takes at most 1"
    model = make_model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])],
                       opset=opset)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    r = run("plan", path)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output


@pytest.mark.parametrize("opset", [0, 2**31, 2**40])
def test_an_if_without_its_condition_is_refused_at_a_version_onnx_cannot_read(tmp_path, opset):
    """onnxmem runs an If's branches itself and reads its condition: at an opset onnx cannot read
    (no schema), an If whose condition is named '' reached verify's run of its branches, which read
    no value (a TypeError traceback, fuzz seed 3200000, struct:3200490). Its arity is onnxmem's own
    at every opset: plan and verify refuse it in one line."""
    from onnxmem.model import arity_error

    assert arity_error("If", "", ("",), 1, opset) == (
        "leaves out its required input 0 ('cond'): its name is empty, and onnxruntime refuses such a node")
    assert arity_error("If", "", ("c",), 2, opset) is None
    model = _if_without_condition()
    del model.opset_import[:]
    model.opset_import.add(domain="", version=opset)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for command in ("plan", "verify"):
        assert "node 'if_0' (If) leaves out its required input 0 ('cond')" in one_line(run(command, path))


def test_an_alignment_past_a_gibibyte_is_refused():
    """An alignment of 10^23 bytes reached a numpy sum with it (an OverflowError traceback, fuzz
    family flags, seed 1400000, flags:1400510): the command line refuses past 2^30, and so do the
    library's plan options."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main
    from onnxmem.core.errors import ProblemError
    from onnxmem.planning.pipeline import PlanOptions

    r = CliRunner().invoke(main, ["plan", "m.onnx", "--alignment", "99999999999999999999999"])
    assert r.exit_code == 2 and "is not in the range 1<=x<=1073741824" in r.output, r.output
    for bad in (0, 2**30 + 1, 10**23):
        with pytest.raises(ProblemError, match=r"^--alignment .*: give 1 to 2\^30"):
            PlanOptions(alignment=bad)
    assert PlanOptions(alignment=2**30).alignment == 2**30


@pytest.mark.parametrize("timeout", [1e308, 1e300, 1e9])
def test_a_timeout_past_the_clocks_range_is_refused(timeout):
    """--timeout 1e308 made the order search's deadline infinite, an OverflowError traceback
    (fuzz family flags, seed 1600000, flags:1600065). The command line and the library's plan
    options refuse past 10^8 s, as --time-limit does, and the compiled kernels' deadline of a
    budget past the counter's range is no deadline."""
    from onnxmem.cli.options import MAX_TIME_LIMIT
    from onnxmem.core._compiled import NO_DEADLINE, deadline_cycles
    from onnxmem.core.errors import ProblemError
    from onnxmem.core.problem import MAX_TIMEOUT
    from onnxmem.planning.pipeline import PlanOptions

    assert MAX_TIMEOUT == MAX_TIME_LIMIT
    r = CliRunner().invoke(main, ["plan", str(MODELS / "inception_block.onnx"), "--timeout", repr(timeout)])
    assert r.exit_code == 2 and "is not in the range 0<=x<=100000000.0" in r.output, r.output
    with pytest.raises(ProblemError, match=r"^--timeout .*: give 0 to 1e\+08 seconds"):
        PlanOptions(timeout=timeout)
    assert deadline_cycles(timeout) == NO_DEADLINE or timeout < 1e300
    r = CliRunner().invoke(main, ["plan", str(MODELS / "inception_block.onnx"), "--timeout", "1e8"])
    assert r.exit_code == 0, r.output
