"""onnxruntime's execution order, computed and read from its profile; rewrites it keeps."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxmem.export.annotate import annotate_model
from onnxmem.planning.pipeline import PlanOptions, plan_loaded
from onnxmem.remat import build_problem, choose, simulate
from onnxmem.remat.budget import plan_with_budget
from onnxmem.remat.check import compare_with_original
from onnxmem.remat.cost import flops_costs
from onnxmem.remat.rewrite import PIN_SUFFIX, SUFFIX, rewrite_model
from onnxmem.runtime.arena import ExecutionOptions
from onnxmem.scheduling.onnxruntime import ORDERS, laid_out_order, onnxruntime_order

from .helpers import make_model, vi

ROOT = Path(__file__).resolve().parent.parent
needs_training = pytest.mark.skipif(importlib.util.find_spec("onnxruntime.training") is None,
                                    reason="needs onnxruntime-training (make training-env)")


def profiled_order(path: Path, mode: str, feeds: dict[str, np.ndarray] | None = None) -> list[str]:
    """The node names of onnxruntime's kernel events, in the order it ran them (optimizations off)."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    o.execution_order = getattr(ort.ExecutionOrder, ORDERS[mode])
    o.enable_profiling = True
    o.profile_file_prefix = str(path.parent / f"profile-{mode}")
    sess = ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
    if feeds is None:
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                 for i in onnx.load(path, load_external_data=False).graph.input}
    sess.run(None, feeds)
    events = json.loads(Path(sess.end_profiling()).read_text())
    return [e["name"][: -len("_kernel_time")] for e in events
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


def file_onnxruntime_order(model: onnx.ModelProto, mode: str) -> list[str]:
    nodes = list(model.graph.node)
    writer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    order = onnxruntime_order([n.op_type for n in nodes], [[writer[x] for x in n.input if x in writer] for n in nodes],
                              mode)
    return [nodes[i].name for i in order]


def branches() -> onnx.ModelProto:
    # two branches the file interleaves, a Shape of the first read late, a sink (Neg) early:
    # onnxruntime's default order walks back from the last sink (Y), each node's producers
    # highest index first (B2 before A2), the Shape right after what it reads, then the other
    # sink (N); the priority order is the file's but for the Shape, taken as soon as it is ready
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="A"),
             helper.make_node("Sigmoid", ["x"], ["b"], name="B"),
             helper.make_node("Tanh", ["a"], ["a2"], name="A2"),
             helper.make_node("Neg", ["b"], ["n"], name="N"),
             helper.make_node("Exp", ["b"], ["b2"], name="B2"),
             helper.make_node("Add", ["a2", "b2"], ["c"], name="C"),
             helper.make_node("Shape", ["a"], ["s"], name="S"),
             helper.make_node("Reshape", ["c", "s"], ["y"], name="Y")]
    return make_model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8]), vi("n", [2, 8])])


@pytest.mark.parametrize("mode", list(ORDERS))
def test_the_order_onnxruntime_runs_is_the_computed_one(tmp_path, mode):
    model = branches()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    want = {"default": ["A", "S", "B", "B2", "A2", "C", "Y", "N"],
            "priority": ["A", "S", "B", "A2", "N", "B2", "C", "Y"]}[mode]
    assert file_onnxruntime_order(model, mode) == want
    assert profiled_order(path, mode) == want


def chain_with_skips(n: int = 8, width: int = 256) -> onnx.ModelProto:
    """A forward chain of element-wise ops and a backward-like chain reading them in reverse:
    what a budget recomputes."""
    nodes, fwd = [], ["x"]
    for i in range(n):
        nodes.append(helper.make_node(["Relu", "Sigmoid", "Tanh"][i % 3], [fwd[-1]], [f"f{i}"], name=f"F{i}"))
        fwd.append(f"f{i}")
    g = fwd[-1]
    for i in reversed(range(n)):
        nodes.append(helper.make_node("Mul", [g, fwd[i]], [f"b{i}"], name=f"B{i}"))
        g = f"b{i}"
    nodes.append(helper.make_node("Neg", [g], ["y"], name="out"))
    scale = numpy_helper.from_array(np.full((1, width), 0.5, np.float32), "w")
    nodes.insert(0, helper.make_node("Mul", ["x0", "w"], ["x"], name="X"))
    return make_model(nodes, [vi("x0", [1, width])], [vi("y", [1, width])], [scale])


def test_a_rewrite_runs_in_onnxruntime_in_the_order_it_was_planned_in(tmp_path):
    model = chain_with_skips()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    got = plan_with_budget(model, path, PlanOptions(), factor=0.6, algorithm="greedy")
    assert got.rewritten is not None and got.planned.plan.order_strategy == "onnxruntime"
    assert any(n.name.endswith(SUFFIX) for n in got.rewritten.graph.node)
    assert any(n.name.endswith(PIN_SUFFIX) for n in got.rewritten.graph.node)
    out = tmp_path / "fit.onnx"
    onnx.save(annotate_model(got.rewritten, got.planned.plan), out)
    # onnxruntime runs the annotated rewrite exactly in the plan's order, duplicates included
    assert profiled_order(out, "default") == list(got.planned.plan.order)
    # and computes what the original does, bit for bit (the pins change no value)
    cmp = compare_with_original(got.rewritten, got.planned.plan, got.planned.view, model,
                                rewritten_path=path, original_path=path, options=ExecutionOptions())
    assert not cmp.execution.findings and cmp.identical and cmp.outputs


def test_without_pins_onnxruntime_runs_a_duplicate_before_its_readers_other_inputs(tmp_path):
    # one problem in onnxruntime's order of the file, one set of drops, written with and without
    # the pins: without them, onnxruntime's walk back from the output reaches a duplicate first
    # among its reader's producers and runs it before the rest of the chain that reader waits for
    model = chain_with_skips()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    original = plan_loaded(model, path, PlanOptions())
    view = original.view
    layout = tuple(range(len(view.ops)))
    problem = replace(build_problem(view, tuple(laid_out_order(view, layout)), flops_costs(view, model),
                                    alignment=64), layout=layout)
    choice = choose(problem, int(0.6 * original.plan.arena_size), "greedy")
    assert choice.fits and choice.dropped
    sched = simulate(problem, choice.dropped)
    runs = {}
    for pin in (True, False):
        rewritten = rewrite_model(model, view, problem, sched, pin=pin)
        out = tmp_path / f"pin-{pin}.onnx"
        onnx.save(rewritten, out)
        planned = plan_loaded(rewritten, out, replace(PlanOptions(), order="onnxruntime"))
        ran = [n for n in profiled_order(out, "default") if not n.endswith(PIN_SUFFIX)]
        runs[pin] = (ran, planned.plan.arena_size)
    dups = [n for n in runs[True][0] if n.endswith(SUFFIX)]
    assert dups and runs[True][1] <= int(0.6 * original.plan.arena_size)
    pinned, loose = runs[True][0], runs[False][0]
    assert pinned != loose
    # each duplicate runs right before its reader with the pins (what the plan assumed), earlier without
    assert all(loose.index(d) < pinned.index(d) for d in dups)
    assert runs[False][1] > runs[True][1]


@needs_training
def test_mobilenet_v2_rewrite_keeps_its_order_and_lowers_onnxruntimes_peak(tmp_path):
    from onnxmem.model import load_model
    from onnxmem.runtime.footprint import session_peak
    from onnxmem.zoo.fixtures import materialize

    src = materialize(ROOT / "models" / "training" / "mobilenet_v2.train.onnx", tmp_path)
    model = load_model(src)
    got = plan_with_budget(model, src, PlanOptions(), factor=0.5)
    assert got.rewritten is not None and got.planned.plan.arena_size <= got.budget
    out = tmp_path / "fit.onnx"
    onnx.save(annotate_model(got.rewritten, got.planned.plan), out)
    from onnxmem.graph import build_view
    from onnxmem.runtime.training import training_feeds
    from onnxmem.shapes import infer_shapes

    rewritten = load_model(out)
    feeds = training_feeds(rewritten, build_view(rewritten, infer_shapes(rewritten)))
    assert profiled_order(out, "default", feeds) == list(got.planned.plan.order)
    before = session_peak(src, {}, training=True, mem_pattern=False, runs=1)
    after = session_peak(out, {}, training=True, mem_pattern=False, runs=1)
    assert after.peak < 0.85 * before.peak
    # with reuse off onnxruntime frees a dropped value at its last read, as the plan does: the
    # run's growth over the made session falls to about the budget's ratio (0.53x measured)
    off = session_peak(out, {}, training=True, mem_pattern=False, runs=1, mem_reuse=False)
    assert off.peak - off.created < 0.6 * (before.peak - before.created) < after.peak - after.created


def test_below_opset_15_nothing_is_pinned(tmp_path):
    # Shape has no start and end before opset 15: nothing to pin with. In onnxruntime's order
    # the duplicates then run early and 0.6x is out of reach (one line says how far it got);
    # made for the planner's order, the rewrite fits, unpinned, and computes the same
    from onnxmem.core.errors import OnnxmemError

    model = chain_with_skips()
    model.opset_import[0].version = 13
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    with pytest.raises(OnnxmemError, match="no plan fits --budget 6,144 B: the smallest arena"):
        plan_with_budget(model, path, PlanOptions(), factor=0.6, algorithm="greedy")
    got = plan_with_budget(model, path, PlanOptions(), factor=0.6, algorithm="greedy", keep="planner")
    assert got.rewritten is not None
    names = [n.name for n in got.rewritten.graph.node]
    assert any(n.endswith(SUFFIX) for n in names) and not any(n.endswith(PIN_SUFFIX) for n in names)
    cmp = compare_with_original(got.rewritten, got.planned.plan, got.planned.view, model,
                                rewritten_path=path, original_path=path, options=ExecutionOptions())
    assert not cmp.execution.findings and cmp.identical


def test_a_bad_execution_order_is_one_line():
    from onnxmem.core.errors import OnnxmemError
    from onnxmem.runtime.footprint import session_peak

    with pytest.raises(OnnxmemError, match="execution order 'sideways' is not one of default, priority"):
        session_peak("unused.onnx", {}, order="sideways")
