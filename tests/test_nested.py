"""Nested planning: every tensor of every If branch, Loop body and Scan body is in the arena,
proven statically and by execution inside the arena."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxmem.core.errors import ShapeError
from onnxmem.graph import child_path
from onnxmem.model import iter_bodies, load_model
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.plans import read_plan
from onnxmem.plans.point import OUTSIDE_REASONS, plan_from_dict, render_plan, write_plan
from onnxmem.verify.run import VerifyOptions, execute_plan, prove_plan, true_lifetimes, verify_plan

from .conftest import LIGHT_MODELS
from .helpers import make_model, vi
from .nested_models import (
    CONTROL_FLOW_MODELS,
    if_late_output,
    if_peaks,
    loop_nested_if,
    network_in_if,
)


def _save(tmp_path, name, model):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def _node_outputs(model: onnx.ModelProto, planned) -> set[tuple[str, str]]:
    """(graph path, name) of every node output at every level, paths as the plan writes them."""
    from onnxmem.graph import build_view, iter_views
    from onnxmem.shapes import infer_shapes

    del planned
    view = build_view(model, infer_shapes(model))
    graphs = {(): model.graph}
    graphs.update(dict(iter_bodies(model.graph)))
    out = set()
    paths = [v.path for v in iter_views(view)]
    for v in iter_views(view):
        for op in v.ops:
            out.update((v.path, o) for o in op.outputs if o)
    assert len(paths) == len(graphs)
    return out


@pytest.mark.parametrize("name", sorted(CONTROL_FLOW_MODELS))
def test_control_flow_models_plan_prove_and_verify(tmp_path, name):
    path = _save(tmp_path, name, CONTROL_FLOW_MODELS[name]())
    planned = plan_model(path)
    plan = planned.plan
    assert plan.schema_version == 2
    assert plan.subgraphs and all(s.order for s in plan.subgraphs if s.kind != "if" or s.order)
    assert {t.graph for t in plan.tensors} > {""}
    assert prove_plan(plan, planned.view) == []
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view)
    assert report.ok, report.first
    assert report.execution is not None and report.execution.nodes_run >= 1
    # the plan round-trips through its JSON and the schema
    out = tmp_path / "plan.json"
    write_plan(plan, out)
    again = read_plan(out)
    assert again.tensors == plan.tensors and again.subgraphs == plan.subgraphs and again.outside == plan.outside


def test_if_arena_is_the_larger_branch_plus_what_the_parent_keeps(tmp_path):
    path = _save(tmp_path, "if_peaks", if_peaks())
    plan = plan_model(path).plan
    then = plan.subgraph("choose/then_branch")
    other = plan.subgraph("choose/else_branch")
    # each branch writes its output straight into the If's output y (planned in the main graph)
    assert (then.outputs, other.outputs) == ("owner", "owner")
    assert (then.arena_size, other.arena_size) == (16384, 0)
    region = plan.tensor("choose:region")
    assert (region.kind, region.size, region.start, region.end) == ("region", 16384, 0, 1)
    # x (4,096) + cond (1 B, aligned to 64) + y (4,096) + the larger branch's peak besides y
    assert plan.arena_size == plan.lower_bound == 4096 + 64 + 4096 + 16384
    big = plan.tensor("big", "choose/then_branch")
    assert region.offset <= big.offset and big.offset + big.size <= region.offset + region.size
    reasons = {(o.graph, o.name): o.reason for o in plan.outside}
    assert reasons[("choose/then_branch", "then_out")] == reasons[("choose/else_branch", "else_out")] == "owner-output"


def test_an_output_written_after_the_branch_peak_sits_inside_the_region(tmp_path):
    path = _save(tmp_path, "late", if_late_output())
    planned = plan_model(path)
    plan = planned.plan
    assert {s.path: s.outputs for s in plan.subgraphs} == {"choose/then_branch": "inside",
                                                           "choose/else_branch": "inside"}
    region, y = plan.tensor("choose:region"), plan.tensor("y")
    # the region holds the then branch's peak (big + s, 20 KiB) and y at s's bytes; x and cond beside it
    assert (region.size, y.group) == (20480, region.group)
    assert plan.arena_size == plan.lower_bound == 20480 + 4096 + 64
    # with y beside the region (the owner form) the same model needs 4 KiB more
    owner = plan_model(path, PlanOptions(inplace=False)).plan
    assert {s.outputs for s in owner.subgraphs} == {"owner"} and owner.arena_size == 20480 + 4096 + 4096 + 64
    for branch, out in (("choose/then_branch", "then_out"), ("choose/else_branch", "else_out")):
        t = plan.tensor(out, branch)
        assert (t.offset, t.size) == (y.offset, y.size)  # each branch writes y where y sits
        assert region.offset <= t.offset and t.offset + t.size <= region.offset + region.size
    for cond in (True, False):
        x = np.random.default_rng(2).standard_normal((1, 1024)).astype(np.float32)
        report = verify_plan(planned.model, plan, model_path=path, view=planned.view,
                             options=VerifyOptions(inputs={"x": x, "cond": np.array(cond)}))
        assert report.ok, report.first
    # a branch that writes its output anywhere else is caught by the proof
    moved = dataclasses.replace(plan, tensors=tuple(
        dataclasses.replace(t, offset=t.offset - 4096) if (t.graph, t.name) == ("choose/else_branch", "else_out")
        else t for t in plan.tensors))
    found = prove_plan(moved, planned.view)
    assert any("writes its output 'else_out' at bytes [12288, 16384) but the If output 'y'" in str(f) for f in found)


def test_an_if_output_the_runtime_owns_is_copied_from_the_branch(tmp_path):
    path = _save(tmp_path, "if_peaks", if_peaks())
    planned = plan_model(path, PlanOptions(io="external"))
    plan = planned.plan
    # y is the runtime's (--io external): the branch keeps its output in its own arena
    assert plan.subgraph("choose/then_branch").outputs == "region"
    assert plan.subgraph("choose/then_branch").arena_size == 16384 + 4096
    assert plan.tensor("else_out", "choose/else_branch").size == 4096
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view)
    assert report.ok, report.first


@pytest.mark.parametrize("cond", [True, False])
def test_each_if_branch_runs_in_the_arena(tmp_path, cond):
    path = _save(tmp_path, "if_peaks", if_peaks())
    planned = plan_model(path)
    x = np.random.default_rng(1).standard_normal((1, 1024)).astype(np.float32)
    opts = VerifyOptions(inputs={"x": x, "cond": np.array(cond)})
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view, options=opts)
    assert report.ok, report.first
    assert report.execution is not None and report.execution.nodes_run == (2 if cond else 1)


def test_network_inside_an_if_is_planned_and_weighed(tmp_path):
    path = _save(tmp_path, "vad", network_in_if())
    planned = plan_model(path)
    plan = planned.plan
    # the four 64x64 float weights of the branch (65,536 B), the zeros constant, the sr check
    assert plan.weights_size == 4 * 64 * 64 * 4 + 8 * 64 * 4 + 8
    body = [t for t in plan.tensors if t.graph == "run_net/then_branch"]
    assert {t.name for t in body} == {f"mm{i}" for i in range(4)} | {"h0", "h1", "h2"}
    assert ("run_net/then_branch", "net_out", "owner-output") in {(o.graph, o.name, o.reason) for o in plan.outside}
    # at the If's step the main graph holds x 2,048 + is_ok 64 + y 2,048 (sr died at the Equal);
    # the branch holds two 2,048 B values at a time (each Tanh writes over its MatMul's output;
    # the last writes net_out into y)
    assert plan.subgraph("run_net/then_branch").arena_size == 2 * 2048
    assert plan.arena_size == plan.lower_bound == 2048 + 64 + 2048 + 2 * 2048
    opts = VerifyOptions(inputs={"x": np.ones((8, 64), np.float32), "sr": np.array(16000, np.int64)})
    report = verify_plan(planned.model, plan, model_path=path, view=planned.view, options=opts)
    assert report.ok, report.first
    assert report.execution is not None and report.execution.nodes_run == 9  # Equal + 8 in the branch


def test_nested_if_inside_a_loop_names_its_path(tmp_path):
    path = _save(tmp_path, "loop_if", loop_nested_if())
    plan = plan_model(path).plan
    paths = {s.path for s in plan.subgraphs}
    assert paths == {"loop/body", "loop/body/step/then_branch", "loop/body/step/else_branch"}
    inner = plan.tensor("step:region", "loop/body")
    outer = plan.tensor("loop:region")
    assert outer.offset <= inner.offset and inner.offset + inner.size <= outer.offset + outer.size
    n = plan.tensor("n", "loop/body/step/else_branch")
    assert inner.offset <= n.offset and n.offset + n.size <= inner.offset + inner.size


ALL = sorted(CONTROL_FLOW_MODELS)


@pytest.mark.parametrize("name", ALL + ["control_flow"] + [p.stem for p in LIGHT_MODELS])
def test_every_node_output_is_planned_or_outside_exactly_once(tmp_path, name, models_dir):
    if name in CONTROL_FLOW_MODELS:
        path = _save(tmp_path, name, CONTROL_FLOW_MODELS[name]())
    elif name == "control_flow":
        path = models_dir / "control_flow.onnx"
    else:
        path = next(p for p in LIGHT_MODELS if p.stem == name)
    plan = plan_model(path).plan
    planned = [(t.graph, t.name) for t in plan.tensors if t.kind != "region"]
    outside = [(o.graph, o.name) for o in plan.outside]
    assert len(set(planned)) == len(planned) and len(set(outside)) == len(outside)
    assert not set(planned) & set(outside)
    assert all(o.reason in OUTSIDE_REASONS for o in plan.outside)
    outputs = _node_outputs(load_model(path), plan)
    assert outputs <= set(planned) | set(outside)


def test_io_external_lists_graph_inputs_and_outputs_outside(tmp_path):
    path = _save(tmp_path, "if_peaks", if_peaks())
    plan = plan_model(path, PlanOptions(io="external")).plan
    reasons = {(o.graph, o.name): o.reason for o in plan.outside}
    assert reasons[("", "x")] == reasons[("", "y")] == "external-io"
    assert plan.arena_size == 20480  # the region alone: x, cond and y are the runtime's


@pytest.mark.parametrize("name", ["loop_carried", "scan_cumsum", "loop_nested_if", "scan_rnn"])
def test_overlapping_body_tensors_are_caught_by_proof_and_execution(tmp_path, name):
    path = _save(tmp_path, name, CONTROL_FLOW_MODELS[name]())
    planned = plan_model(path)
    graph, bad = _body_mutations(planned.plan, planned.view, 1)[0]
    found = prove_plan(bad, planned.view)
    assert any(f.kind in ("overlap", "alias") and f.graph == graph for f in found), found
    run = execute_plan(bad, planned.model, planned.view, model_path=path)
    assert run.findings and run.findings[0].graph == graph, run.findings


def _body_mutations(plan, view, limit):
    """Plans with one pair of live tensors of one body forced to overlap (the later-written
    one, with its alias group, moved onto the other's first byte): ``(graph, plan)``."""
    from onnxmem.proof.plan import walk_bodies

    out = []
    for _parent, body in walk_bodies(view):
        sub = plan.subgraph(body.path)
        index = {op.name: op.index for op in body.view.ops}
        life = true_lifetimes(body.view, [index[n] for n in sub.order])
        ts = [t for t in plan.tensors if t.graph == body.path and t.size > 0]
        for i, a in enumerate(ts):
            for b in ts[i + 1:]:
                if a.group == b.group or a.offset == b.offset:
                    continue
                if not (life[a.name][0] < life[b.name][1] and life[b.name][0] < life[a.name][1]):
                    continue
                if (life[b.name][0], b.name) < (life[a.name][0], a.name):
                    a, b = b, a
                delta = a.offset - b.offset
                # a region moves with the bodies inside it
                inner = child_path(body.path, b.producer or "") + "/" if b.kind == "region" else None
                moved = tuple(
                    dataclasses.replace(t, offset=t.offset + delta)
                    if (t.graph, t.group) == (body.path, b.group) or (inner and t.graph.startswith(inner)) else t
                    for t in plan.tensors)
                out.append((body.path, dataclasses.replace(plan, tensors=moved)))
    return out[:limit]


@pytest.mark.parametrize("name", ["loop_carried", "loop_nested_if", "scan_cumsum", "control_flow"])
def test_every_body_mutation_is_proven_wrong_and_most_fail_in_the_arena(tmp_path, name, models_dir):
    path = (models_dir / "control_flow.onnx" if name == "control_flow"
            else _save(tmp_path, name, CONTROL_FLOW_MODELS[name]()))
    planned = plan_model(path)
    cases = _body_mutations(planned.plan, planned.view, 20)
    assert cases
    executed = caught = 0
    for graph, bad in cases:
        found = prove_plan(bad, planned.view)
        assert any(f.kind in ("overlap", "alias") and f.graph == graph for f in found), (graph, found)
        if "_branch" in graph:
            continue  # an If branch runs only when its condition says so
        run = execute_plan(bad, planned.model, planned.view, model_path=path)
        executed += 1
        caught += bool(run.findings)
    assert caught >= 0.8 * executed, f"execution caught {caught} of {executed}"


def test_a_body_tensor_outside_its_region_is_caught(tmp_path):
    path = _save(tmp_path, "if_peaks", if_peaks())
    planned = plan_model(path)
    plan = planned.plan
    region = plan.tensor("choose:region")
    moved = tuple(dataclasses.replace(t, offset=region.offset + region.size) if t.name == "big" else t
                  for t in plan.tensors)
    found = prove_plan(dataclasses.replace(plan, tensors=moved), planned.view)
    assert any(f.kind in ("arena", "overlap") and "region of node 'choose'" in f.message for f in found), found


def test_a_plan_missing_a_body_is_refused(tmp_path):
    path = _save(tmp_path, "if_peaks", if_peaks())
    planned = plan_model(path)
    plan = planned.plan
    short = dataclasses.replace(plan, subgraphs=plan.subgraphs[:1],
                                tensors=tuple(t for t in plan.tensors if t.graph != plan.subgraphs[1].path))
    found = prove_plan(short, planned.view)
    assert any("is not in the plan" in f.message for f in found)


def test_version_1_plans_are_still_read(tmp_path, models_dir):
    plan = plan_model(models_dir / "resnet_cnn.onnx").plan
    data = json.loads(render_plan(plan))
    for key in ("subgraphs", "outside"):
        data.pop(key)
    for t in data["tensors"]:
        t.pop("graph")
    data["schema_version"] = 1
    old = plan_from_dict(data)
    assert old.schema_version == 1 and old.tensors == plan.tensors and old.arena_size == plan.arena_size


def test_a_carried_value_that_grows_is_sized_for_the_constant_trip_count(tmp_path):
    # a carried value that grows each iteration: sized per iteration, for the 3 the model gives
    # (tests/test_loop_growth.py)
    body = helper.make_graph(
        [helper.make_node("Concat", ["acc_in", "x"], ["acc_out"], name="grow", axis=0),
         helper.make_node("Identity", ["c_in"], ["c_out"], name="keep")],
        "body", [vi("i", [], TensorProto.INT64), vi("c_in", [], TensorProto.BOOL), vi("acc_in", None)],
        [vi("c_out", [], TensorProto.BOOL), vi("acc_out", None)],
    )
    trips = helper.make_tensor("trips", TensorProto.INT64, [], [3])
    yes = helper.make_tensor("yes", TensorProto.BOOL, [], [True])
    m = make_model([helper.make_node("Loop", ["trips", "yes", "x"], ["y"], name="loop", body=body)],
                   [vi("x", [1, 4])], [vi("y", None)], [trips, yes])
    path = _save(tmp_path, "grow", m)
    plan = plan_model(path).plan
    shapes = {(t.graph, t.name): t.shape for t in plan.tensors}
    assert shapes[("", "y")] == (4, 4) and shapes[("loop/body", "acc_in")] == (3, 4)
    assert plan.extra["loop_trips"] == {"loop": {"bound": 3, "source": "model"}}


def test_data_dependent_body_value_is_named_with_its_subgraph(tmp_path):
    then_g = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
         helper.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("ReduceSum", ["f"], ["t_out"], keepdims=0, name="sum")],
        "then", [], [vi("t_out", [])])
    else_g = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["e_out"], keepdims=0, name="max")], "else", [],
                               [vi("e_out", [])])
    m = make_model([helper.make_node("If", ["c"], ["y"], name="pick", then_branch=then_g, else_branch=else_g)],
                   [vi("x", [4, 4]), vi("c", [], TensorProto.BOOL)], [vi("y", [])])
    with pytest.raises(ShapeError, match=r"^value 'nz' of subgraph 'pick/then_branch' has no static size: .*"
                                         r"--input-shape, --dim\) or declare its shape"):
        plan_model(_save(tmp_path, "nz", m))


def test_show_lists_the_subgraphs_and_compare_explains_the_regions(tmp_path):
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    path = _save(tmp_path, "loop_if", loop_nested_if())
    out = tmp_path / "plan.json"
    runner = CliRunner()
    assert runner.invoke(main, ["plan", str(path), "-o", str(out)]).exit_code == 0
    shown = runner.invoke(main, ["show", str(out)])
    assert shown.exit_code == 0
    assert "subgraphs (3;" in shown.output and "loop/body/step/else_branch" in shown.output
    # the main graph's peak counts the Loop's region, not the body's steps: x (1 KiB) and the
    # region (2.19 KiB: the carried slots, and the If's 1 KiB region holding its output, which
    # each branch writes there: the else branch's Neg then Relu in place), which holds y (1 KiB)
    # at the bytes where the body writes its carried output
    assert "peak         step 0: Loop 'loop', 3.19 KiB live in 3 tensors" in shown.output
    compared = runner.invoke(main, ["compare", str(path)])
    assert compared.exit_code == 0, compared.output
    assert "tensors of 3 subgraphs" in compared.output


def test_subgraph_paths_escape_slashes_in_node_names(tmp_path):
    m = if_peaks()
    m.graph.node[0].name = "a/b%c"
    plan = plan_model(_save(tmp_path, "hostile", m)).plan
    assert {s.path for s in plan.subgraphs} == {"a%2Fb%25c/then_branch", "a%2Fb%25c/else_branch"}
    assert {s.owner for s in plan.subgraphs} == {"a/b%c"}
    assert plan.tensor("a/b%c:region").kind == "region"


def test_a_version_1_plan_of_a_model_with_bodies_is_refused_in_one_line(tmp_path, models_dir):
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    path = models_dir / "control_flow.onnx"
    data = json.loads(render_plan(plan_model(path).plan))
    data["tensors"] = [{k: v for k, v in t.items() if k != "graph"} for t in data["tensors"]
                       if not t["graph"] and t["kind"] != "region"]
    for key in ("subgraphs", "outside"):
        data.pop(key)
    data["schema_version"] = 1
    old = tmp_path / "v1.json"
    old.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(old)])
    assert r.exit_code == 3
    assert "subgraph 'Loop_23/body' of node 'Loop_23' (Loop) is not in the plan; re-plan the model" in r.output


@pytest.mark.parametrize(("name", "runs"), [
    ("scan_rnn", 24 * 5),  # 24 steps of 5 body nodes; the Scan itself is never one session
    ("loop_carried", 1 + 4 * 5 + 1),  # start, 4 iterations of 5 body nodes, final
    ("loop_nested_if", 3 * 3 + (1 + 2 + 1)),  # 3 x (Mod, Equal, Identity); branches: Mul, Neg+Relu, Mul
])
def test_every_iteration_runs_node_by_node_in_the_arena(tmp_path, name, runs):
    path = _save(tmp_path, name, CONTROL_FLOW_MODELS[name]())
    planned = plan_model(path)
    run = execute_plan(planned.plan, planned.model, planned.view, model_path=path)
    assert run.findings == () and run.nodes_run == runs
    assert all(c.ok and c.identical for c in run.outputs)


def test_the_bound_counts_regions_at_their_bodies_bounds(tmp_path):
    path = _save(tmp_path, "loop_if", loop_nested_if())
    best = plan_model(path).plan
    naive = plan_model(path, PlanOptions(solver="naive")).plan
    # bodies planned without reuse make larger regions; the bound stays the design's
    assert naive.lower_bound == best.lower_bound == best.arena_size < naive.arena_size
    assert naive.solver["status"] == "feasible"
    assert naive.subgraph("loop/body").lower_bound == best.subgraph("loop/body").lower_bound


def test_an_if_output_moved_onto_the_region_is_caught(tmp_path):
    path = _save(tmp_path, "if_peaks", if_peaks())
    planned = plan_model(path)
    plan = planned.plan
    region = plan.tensor("choose:region")
    bad = dataclasses.replace(plan, tensors=tuple(
        dataclasses.replace(t, offset=region.offset) if (t.graph, t.name) == ("", "y") else t for t in plan.tensors))
    found = prove_plan(bad, planned.view)
    assert any(f.kind == "overlap" and {f.tensor, f.other} == {"y", "choose:region"} for f in found), found
    opts = VerifyOptions(inputs={"x": np.ones((1, 1024), np.float32), "cond": np.array(True)})
    run = execute_plan(bad, planned.model, planned.view, options=opts, model_path=path)
    assert run.findings and run.findings[0].kind == "clobber"


def test_the_annotated_model_of_a_nested_plan_verifies(tmp_path):
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    path = _save(tmp_path, "loop_if", loop_nested_if())
    out, annotated = tmp_path / "plan.json", tmp_path / "annotated.onnx"
    runner = CliRunner()
    assert runner.invoke(main, ["plan", str(path), "-o", str(out), "--annotate", str(annotated)]).exit_code == 0
    r = runner.invoke(main, ["verify", str(annotated), "--plan", str(out)])
    assert r.exit_code == 0, r.output
    assert "the same planned tensors and sizes (re-saved?)" in r.output and "verified" in r.output


def test_measured_main_graph_shapes_size_the_bodies_reading_them(tmp_path):
    # nz's length depends on data; a branch negates it: measuring the main graph sizes the branch too
    then_g = helper.make_graph([helper.make_node("Neg", ["nz"], ["r"], name="neg")], "then", [],
                               [vi("r", None, TensorProto.INT64)])
    else_g = helper.make_graph([helper.make_node("Identity", ["nz"], ["e"], name="same")], "else", [],
                               [vi("e", None, TensorProto.INT64)])
    m = make_model(
        [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
         helper.make_node("If", ["c"], ["y"], name="pick", then_branch=then_g, else_branch=else_g)],
        [vi("x", [6]), vi("c", [], TensorProto.BOOL)], [vi("y", None, TensorProto.INT64)])
    path = _save(tmp_path, "measured", m)
    planned = plan_model(path, PlanOptions(measure_shapes=True))
    r = planned.bodies["pick/then_branch"].view.tensors["r"]
    assert r.shape == planned.plan.tensor("nz").shape and r.shape[0] == 1
    # the branch writes r straight into y (the same size)
    assert ("pick/then_branch", "r", "owner-output") in {(o.graph, o.name, o.reason) for o in planned.plan.outside}
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view)
    assert report.ok, report.first


@pytest.mark.parametrize("name", sorted(CONTROL_FLOW_MODELS))
def test_the_view_records_the_nodes_that_hold_subgraphs(name):
    """Shape inference says whether the model holds any subgraph (``ShapeInfo.flat``); the view
    records the nodes that do at each level, which the plan's list of outside values reads
    instead of every node's attributes."""
    from onnxmem.graph import build_view, iter_views
    from onnxmem.model.functions import node_subgraphs
    from onnxmem.model.generate import transformer
    from onnxmem.shapes import infer_shapes

    model = CONTROL_FLOW_MODELS[name]()
    info = infer_shapes(model)
    assert not info.flat
    view = build_view(model, info)
    graphs = {(): model.graph, **dict(iter_bodies(model.graph))}
    by_path = {v.path: v for v in iter_views(view)}
    assert by_path[""].nested == tuple(i for i, n in enumerate(model.graph.node) if node_subgraphs(n))
    assert len(by_path) == len(graphs)
    flat = transformer(2, 0)
    info = infer_shapes(flat)
    assert info.flat and build_view(flat, info).nested == ()
