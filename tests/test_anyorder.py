"""The bound for every order (onnxmem.scheduling.anyorder): at most the peak of each order, by
hand on a training-shaped chain, against every order of random graphs, recorded in a plan and
held to by the proof."""

from __future__ import annotations

import json
import random

import pytest

from onnxmem.planning.pipeline import plan_model
from onnxmem.scheduling.anyorder import MAX_NODES, any_order_bound, order_graph_bound
from onnxmem.scheduling.cost import build_order_graph, order_peak

from .conftest import MODELS
from .test_export import run
from .test_scheduling import all_topological_orders
from .test_scheduling_alias import make_view, random_view


def training_chain():
    """forward x -> a -> b -> loss c, backward c, b -> gb; gb, a -> ga (an output): ``a`` is
    read across the turn. Custom ops: nothing is written in place."""
    nodes = [
        ("f0", "Custom", ["x"], ["a"]),
        ("f1", "Custom", ["a"], ["b"]),
        ("loss", "Custom", ["b"], ["c"]),
        ("b1", "Custom", ["c", "b"], ["gb"]),
        ("b0", "Custom", ["gb", "a"], ["ga"]),
    ]
    sizes = {"x": 8, "a": 16, "b": 16, "c": 8, "gb": 16, "ga": 16}  # elements of 4 bytes
    return make_view(nodes, sizes, ["x"], ["ga"])


def test_a_value_read_across_the_turn_counts_at_every_step_between():
    """By hand (bytes): at b1, its own c + b + gb = 32 + 64 + 64, and a (made by f0 before it,
    read by b0 after it) 64: 224, the one order's peak; at loss, b + c + a = 160."""
    view = training_chain()
    assert any_order_bound(view, alignment=1) == 224
    assert order_peak(view, (0, 1, 2, 3, 4), alignment=1) == 224


def test_a_value_that_may_die_before_a_node_is_not_counted_there():
    """Two branches from x: p and q are each read by the join alone; before the join, whether
    P or Q is live at a step depends on the order, so only the join counts both."""
    nodes = [("p", "Custom", ["x"], ["P"]), ("q", "Custom", ["x"], ["Q"]), ("j", "Custom", ["P", "Q"], ["y"])]
    view = make_view(nodes, {"x": 4, "P": 100, "Q": 100, "y": 4}, ["x"], ["y"])
    assert any_order_bound(view, alignment=1) == 4 * (100 + 100 + 4)
    best = min(order_peak(view, o, alignment=1) for o in all_topological_orders(view))
    assert best == 4 * (4 + 100 + 100)  # x is live until q runs: x + P + Q at the second step


@pytest.mark.parametrize("io", ["internal", "external"])
@pytest.mark.parametrize("alignment", [1, 16])
@pytest.mark.parametrize("inplace", [False, True])
def test_never_above_the_best_order_of_a_random_graph(io, alignment, inplace):
    """Views, in-place unary ops, Concat laid inside its output, multi-output ops, graph outputs
    read inside the graph: the bound is at most the lowest peak over every topological order
    (``plan.lower_bound`` of that order, Concat placement included), and reaches it on some."""
    tight = 0
    for seed in range(40):
        view = random_view(seed + 900, n=7)
        bound = any_order_bound(view, io, alignment, inplace)
        best = min(order_peak(view, o, io, alignment, inplace=inplace) for o in all_topological_orders(view))
        assert bound is not None and bound <= best, seed
        tight += bound == best
    assert tight >= 10  # a bound that is often exact, not a trivial one


def test_larger_graphs_are_not_bounded():
    nodes = [(f"n{i}", "Custom", [f"t{i}"], [f"t{i + 1}"]) for i in range(MAX_NODES + 1)]
    view = make_view(nodes, {f"t{i}": 4 for i in range(MAX_NODES + 2)}, ["t0"], [f"t{MAX_NODES + 1}"])
    assert any_order_bound(view) is None
    small = make_view(nodes[:3], {f"t{i}": 4 for i in range(4)}, ["t0"], ["t3"])
    assert order_graph_bound(build_order_graph(small, alignment=1)) == 32  # a chain: two values at each step


def test_a_plan_records_the_bound_and_the_cli_prints_it(tmp_path):
    planned = plan_model(MODELS / "inception_block.onnx")
    plan = planned.plan
    every = plan.extra["any_order_lower_bound"]
    assert every == any_order_bound(planned.view, plan.io, plan.alignment, inplace=plan.inplace)
    assert 0 < every <= plan.lower_bound <= plan.extra["file_order_lower_bound"]
    out = tmp_path / "p.json"
    r = run("plan", str(MODELS / "inception_block.onnx"), "-o", str(out))
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["extra"]["any_order_lower_bound"] == every
    assert f"any order    lower bound {every / 1024:,.2f} KiB ({every:,} B)" in r.output


def test_a_plan_claiming_a_bound_for_every_order_above_its_own_is_refused(tmp_path):
    out = tmp_path / "p.json"
    assert run("plan", str(MODELS / "inception_block.onnx"), "-o", str(out)).exit_code == 0
    data = json.loads(out.read_text())
    data["extra"]["any_order_lower_bound"] = data["lower_bound"] + 64
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = run("verify", str(MODELS / "inception_block.onnx"), "--plan", str(bad), "--static-only")
    assert r.exit_code == 3 and "extra.any_order_lower_bound" in r.output, r.output
    assert "is above its own order's bound" in r.output


def test_a_graph_with_subgraphs_is_planned_without_it():
    """The regions of If, Loop and Scan bodies are laid out by the plan around their node's step:
    the bound leaves such graphs out (a bound over the main graph's classes alone was above the
    plan's own on models/control_flow.onnx)."""
    planned = plan_model(MODELS / "control_flow.onnx")
    assert planned.view.bodies
    assert "any_order_lower_bound" not in planned.plan.extra
    assert any_order_bound(planned.view) is None


@pytest.mark.slow
def test_never_above_the_best_order_of_600_random_graphs():
    """``make test-slow``: 600 random graphs of up to 8 nodes, every setting, against every order."""
    for seed in range(600):
        view = random_view(seed + 5000, n=random.Random(seed).randint(1, 8))
        orders = list(all_topological_orders(view))
        for io in ("internal", "external"):
            for alignment in (1, 64):
                for inplace in (False, True):
                    bound = any_order_bound(view, io, alignment, inplace)
                    best = min(order_peak(view, o, io, alignment, inplace=inplace) for o in orders)
                    assert bound is not None and bound <= best, (seed, io, alignment, inplace)


def test_a_bound_that_is_not_a_count_of_bytes_is_refused_by_the_schema(tmp_path):
    out = tmp_path / "p.json"
    assert run("plan", str(MODELS / "inception_block.onnx"), "-o", str(out)).exit_code == 0
    data = json.loads(out.read_text())
    data["extra"]["any_order_lower_bound"] = "many"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = run("show", str(bad))
    assert r.exit_code == 1 and "field 'extra/any_order_lower_bound': 'many' is not of type 'integer'" in r.output
