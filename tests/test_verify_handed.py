"""verify's run ahead of the reference writes shape arithmetic's values from the reference
(``onnxmem.runtime.arena_buffers.handed``): which nodes, the same findings as every node run in
the arena, and the run step by step where the reference cannot give a value."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.arena import ArenaRun
from onnxmem.runtime.arena_buffers import HANDED_BYTES, handed
from onnxmem.verify.run import VerifyOptions, execute_plan

from .helpers import HANG_S, make_model, reshape_target, vi

GREEDY = PlanOptions(solver="greedy", order="file")


def _shapes_model(big: int = 4) -> onnx.ModelProto:
    """x (2, 3, big, 5) -> relu a; Shape(a) -> Gather(0) -> Unsqueeze -> Concat with [-1] -> the
    Reshape of a to (2, -1) -> relu y. Also: Shape(x) -> Cast to float -> Mul by x (reads an
    input's bytes: runs), and ReduceSum of x (reads an input: runs)."""
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    arithmetic, _ = reshape_target("a", "zero", "rest", "axes")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             *arithmetic,
             helper.make_node("Reshape", ["a", "t"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="last"),
             helper.make_node("ReduceSum", ["x", "axes"], ["z"], name="sum", keepdims=0)]
    return make_model(nodes, [vi("x", [2, 3, big, 5])], [vi("y", [2, 3 * big * 5]), vi("z", [3, big, 5])], inits)


def _planned(tmp_path, model):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path, plan_model(path, GREEDY)


def _handed_names(path, p) -> set[str]:
    run = ArenaRun(p.plan, p.model, p.view, VerifyOptions(), path)
    nodes = handed(run.view, run.order, run.weight_ops, run.slots, run.weights)
    return {run.view.ops[i].name for i in nodes}


def test_the_shape_arithmetic_is_handed_and_nothing_that_reads_a_value(tmp_path):
    """Shape, Gather, Unsqueeze and Concat make the Reshape's target from a's shape and weights
    alone: handed. relu, reshape and last read a's or r's bytes, sum reads the input x's: they run."""
    path, p = _planned(tmp_path, _shapes_model())
    names = _handed_names(path, p)
    assert {"shape", "gather", "unsqueeze"} <= names <= {"shape", "gather", "unsqueeze", "concat"}
    assert not names & {"relu", "reshape", "last", "sum"}


def test_a_value_past_the_bound_or_a_graph_output_is_not_handed(tmp_path):
    """A Shape of more than HANDED_BYTES, and a Shape that is a graph output, run in the arena."""
    rank = HANDED_BYTES // 8 + 1  # int64 dims
    wide = make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                       helper.make_node("Shape", ["a"], ["s"], name="shape"),
                       helper.make_node("Identity", ["s"], ["y"], name="out")],
                      [vi("x", [1] * rank)], [vi("y", [rank], TensorProto.INT64)])
    path, p = _planned(tmp_path, wide)
    assert _handed_names(path, p) == set()
    shown = make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                        helper.make_node("Shape", ["a"], ["s"], name="shape")],
                       [vi("x", [2, 3])], [vi("s", [2], TensorProto.INT64), vi("a", [2, 3])])
    path, p = _planned(tmp_path, shown)
    assert _handed_names(path, p) == set()


@pytest.mark.parametrize("beside, reference", [(True, "whole"), (False, "whole"), (True, "nodes"), (False, "nodes")],
                         ids=["beside", "in line", "each node again, beside", "each node again, in line"])
def test_handed_values_verify_as_every_node_run_does(tmp_path, beside, reference):
    """The handed nodes are written, not run, and the Reshape that reads their value runs on it:
    outputs identical, whether the reference runs beside the arena run or in line with it (no
    spare core), and where each node runs again as its reference (as on CUDA: the handed values
    computed together on the CPU, runtime.handover); with handed=False every node runs in the arena."""
    path, p = _planned(tmp_path, _shapes_model())
    handed_count = len(_handed_names(path, p))
    opts = VerifyOptions(beside=beside, reference=reference)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=opts)
    every = execute_plan(p.plan, p.model, p.view, model_path=path, options=dataclasses.replace(opts, handed=False))
    assert ex.findings == every.findings == () and all(c.identical for c in ex.outputs + every.outputs)
    assert ex.reference == every.reference == reference
    assert every.nodes_handed == 0 and every.nodes_run == 8
    assert ex.nodes_handed == handed_count >= 3 and ex.nodes_run == 8 - handed_count


def _moved(plan, moved, onto):
    """``plan`` with ``moved`` over the first byte of ``onto``, and inside the arena: a value larger
    than the room after ``onto`` ends at the arena's end (the run writes no byte outside it, as the
    static proof that verify makes first would hold it to)."""
    size, o = plan.tensor(moved).size, plan.tensor(onto)
    at = min(o.offset, (plan.arena_size - size) // plan.alignment * plan.alignment)
    assert at <= o.offset < at + size <= plan.arena_size
    return dataclasses.replace(plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == moved else t
                                                   for t in plan.tensors))


@pytest.mark.parametrize("moved, onto", [("g", "a"), ("u", "a"), ("t", "a"), ("r", "t"), ("a", "t")])
def test_a_write_of_or_over_a_handed_value_gives_the_first_finding_of_every_node_run(tmp_path, moved, onto):
    """A handed value written over a live one (g, u or t onto a, which the reshape reads later),
    or a value a node runs to make written over a handed one still live (r onto t, which the
    reshape reads; a onto t's bytes, written by the handed gather while a is live): the first
    finding of the run where every node runs in the arena, each value checked again outside it,
    whether the handed values come from the reference beside, or from their run together on the
    CPU where each node runs again (as on CUDA), in line or not."""
    path, p = _planned(tmp_path, _shapes_model())
    bad = _moved(p.plan, moved, onto)
    every = VerifyOptions(reference="nodes", handed=False)
    nodes = execute_plan(bad, p.model, p.view, model_path=path, options=every)
    assert nodes.findings and nodes.findings[0].kind == "clobber", f"{moved} onto {onto} was not caught"
    for opts in (VerifyOptions(beside=True), VerifyOptions(beside=False), VerifyOptions(reference="nodes"),
                 VerifyOptions(reference="nodes", beside=False)):
        ex = execute_plan(bad, p.model, p.view, model_path=path, options=opts)
        assert ex.findings and ex.findings[0] == nodes.findings[0], opts


def test_a_handed_value_the_reference_does_not_give_sends_the_run_step_by_step(tmp_path, monkeypatch):
    """The reference's thread fails at the piece of the Shape (a failure injected once): the run
    ahead, waiting for that value, gets none (it does not wait for ever) and starts again step by
    step, where every node runs in the arena and the plan verifies."""
    from onnxmem.core.errors import RuntimeBackendError
    from onnxmem.runtime.reference import PieceReference

    real, failed = PieceReference._run, []

    def run(self, piece):
        if not failed and any(n.op_type == "Shape" for n in piece.nodes):
            failed.append(piece)
            raise RuntimeBackendError("onnxruntime cannot run this piece (injected)")
        return real(self, piece)

    monkeypatch.setattr(PieceReference, "_run", run)
    path, p = _planned(tmp_path, _shapes_model())
    opts = VerifyOptions(beside=True, piece_bytes=1)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path, options=opts)
    assert failed and ex.findings == () and all(c.identical for c in ex.outputs)
    # step by step, the reference's pieces run again: the handed values taken from them as they come
    handed_count = len(_handed_names(path, p))
    assert ex.nodes_handed == handed_count and ex.nodes_run == 8 - handed_count
    failed.clear()
    every = execute_plan(p.plan, p.model, p.view, model_path=path, options=dataclasses.replace(opts, handed=False))
    assert failed and every.findings == () and every.nodes_handed == 0 and every.nodes_run == 8


def test_a_node_that_fails_after_handed_ones_is_named(tmp_path):
    """gather fails on index 9 in the arena and in the reference: the error names it, with the
    shape arithmetic after it handed where the node does not fail."""
    from onnxmem.core.errors import RuntimeBackendError

    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "axes")]
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Gather", ["a", "i"], ["b"], name="gather"),
             helper.make_node("Shape", ["a"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["n"], name="dim"),
             helper.make_node("Unsqueeze", ["n", "axes"], ["m"], name="unsqueeze"),
             helper.make_node("Reshape", ["b", "m"], ["y"], name="reshape")]
    model = make_model(nodes, [vi("x", [4, 8]), vi("i", [1], TensorProto.INT64)], [vi("y", [8])], inits)
    path, p = _planned(tmp_path, model)
    assert {"shape", "dim", "unsqueeze"} <= _handed_names(path, p)
    opts = VerifyOptions(beside=True, piece_bytes=1, inputs={"i": np.array([9], np.int64)})
    with pytest.raises(RuntimeBackendError, match=r"at node 'gather' \(Gather\)"):
        execute_plan(p.plan, p.model, p.view, model_path=path, options=opts)
    ok = execute_plan(p.plan, p.model, p.view, model_path=path,
                      options=VerifyOptions(beside=True, piece_bytes=1, inputs={"i": np.array([2], np.int64)}))
    assert ok.findings == () and ok.nodes_handed == 3 and all(c.identical for c in ok.outputs)


def test_the_cli_says_what_it_handed_and_every_node_runs_them_all(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_shapes_model(), path)
    cmd = [sys.executable, "-m", "onnxmem", "verify", str(path)]
    default = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
    every = subprocess.run([*cmd, "--every-node"], capture_output=True, text=True, timeout=HANG_S)
    assert default.returncode == every.returncode == 0, default.stderr + every.stderr
    line = next(ln for ln in default.stdout.splitlines() if ln.startswith("executed"))
    count = int(line.split(", ")[1].split()[0])  # beside the reference or in line with it (no spare core)
    assert count >= 3 and ", sentinel" in line.split("written there from the reference's run of them")[1]
    assert line.startswith(f"executed  {8 - count} nodes in one cpu arena, {count} of shape arithmetic")
    assert any(ln.startswith("executed  8 nodes in one cpu arena, sentinel") for ln in every.stdout.splitlines())
    both = subprocess.run([*cmd, "--every-node", "--static-only"], capture_output=True, text=True, timeout=HANG_S)
    assert both.returncode == 2 and "--static-only runs nothing; leave out --every-node" in both.stderr


def test_bench_handed_reads_what_verify_prints(tmp_path):
    """bench/bench_handed.py reads the nodes run and handed over from verify's line: 8 run with
    --every-node, the same 8 split between run and handed over by default."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_handed import _executed

    path = tmp_path / "m.onnx"
    onnx.save(_shapes_model(), path)
    cmd = [sys.executable, "-m", "onnxmem", "verify", str(path)]
    run, handed = _executed(cmd)
    assert run + handed == 8 and _executed([*cmd, "--every-node"]) == (8, 0)
