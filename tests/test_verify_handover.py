"""A run step by step where each node runs again as its reference (on CUDA; on the CPU a graph
with float16 values, bodies or random ops, or ``reference="nodes"``) writes shape arithmetic's
values from one CPU session of those nodes alone (``onnxmem.runtime.handover``): which sessions
it builds, what it does where that session fails or gives a value not the plan's, and a float16
model, which takes this way on the CPU by default."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxmem.runtime.sessions as sessions
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime import handover
from onnxmem.runtime.arena import ArenaRun
from onnxmem.runtime.arena_buffers import handed
from onnxmem.verify.run import VerifyOptions, execute_plan

from .helpers import make_model, reshape_target, vi

GREEDY = PlanOptions(solver="greedy", order="file")
#: the op types of the shape arithmetic in _model
ARITHMETIC = {"Shape", "Gather", "Unsqueeze", "Concat"}
#: the nodes of _model handed under GREEDY: its shape arithmetic but concat, whose input u the
#: plan puts inside its output t (a node that writes bytes of a value it reads runs)
HANDED = {"shape", "gather", "unsqueeze", "shape2", "gather2", "unsqueeze2", "concat2"}


def _model(elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """x (2, 3, 4, 5) -> relu a; Shape(a) -> Gather(0) -> Unsqueeze -> Concat with [-1] -> the
    Reshape of a to (2, 60) -> relu y; Shape(x) -> Gather(3) -> Unsqueeze -> Concat with [-1] ->
    the Reshape of x to (-1, 5) -> relu z (a Shape of a graph input)."""
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(3, np.int64), "three"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    first, t = reshape_target("a", "zero", "rest", "axes")
    second, t2 = reshape_target("x", "three", "rest", "axes", suffix="2", rest_first=True)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             *first,
             helper.make_node("Reshape", ["a", t], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="last"),
             *second,
             helper.make_node("Reshape", ["x", t2], ["r2"], name="reshape2"),
             helper.make_node("Relu", ["r2"], ["z"], name="last2")]
    return make_model(nodes, [vi("x", [2, 3, 4, 5], elem)], [vi("y", [2, 60], elem), vi("z", [24, 5], elem)], inits)


@pytest.fixture()
def planned(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    return path, plan_model(path, GREEDY)


def _handed(path, p) -> set[str]:
    run = ArenaRun(p.plan, p.model, p.view, VerifyOptions(reference="nodes"), path)
    return {run.view.ops[i].name for i in handed(run.view, run.order, run.weight_ops, run.slots, run.weights)}


def _run(path, p, **opts):
    return execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(reference="nodes", **opts))


@pytest.mark.parametrize("beside", [True, False], ids=["sessions built beside", "in line"])
def test_no_session_is_built_for_a_handed_node(planned, monkeypatch, beside):
    """Each node again as its reference: seven nodes of shape arithmetic are written from one
    session of them alone, and no node session is built or looked up for any of them (on CUDA,
    each kind of node builds its own provider); the outputs are those of every node run. The
    eighth, concat, runs: the greedy plan puts its input u inside its output t's bytes."""
    path, p = planned
    assert _handed(path, p) == HANDED
    asked: list[str] = []
    real = sessions.node_alone

    def node_alone(model, node, *args, **kwargs):
        asked.append(node.op_type)
        return real(model, node, *args, **kwargs)

    monkeypatch.setattr(sessions, "node_alone", node_alone)
    ex = _run(path, p, beside=beside)
    assert ex.findings == () and all(c.identical for c in ex.outputs)
    assert ex.nodes_handed == 7 and ex.nodes_run == 6
    assert set(asked) == {"Concat", "Relu", "Reshape"}
    asked.clear()
    every = _run(path, p, beside=beside, handed=False)
    assert every.nodes_handed == 0 and every.nodes_run == 13 and ARITHMETIC <= set(asked)
    assert [c.identical for c in every.outputs] == [True, True]


def test_a_failed_session_of_the_handed_nodes_leaves_them_to_run(planned, monkeypatch):
    """Where onnxruntime cannot run the handed nodes together (a failure injected in that session
    alone), each runs as any node does, and the plan verifies."""
    from onnxmem.core.errors import RuntimeBackendError
    from onnxmem.runtime.reference import PieceReference

    path, p = planned
    real, failed = PieceReference._run, []

    def run(self, piece):
        if len(piece.nodes) == len(HANDED):
            failed.append(piece)
            raise RuntimeBackendError("onnxruntime cannot run this piece (injected)")
        return real(self, piece)

    monkeypatch.setattr(PieceReference, "_run", run)
    ex = _run(path, p, beside=False)
    assert failed and ex.findings == () and all(c.identical for c in ex.outputs)
    # split into pieces of one node, the first handed node's own fails again: none is written
    assert ex.nodes_handed == 0 and ex.nodes_run == 13


def test_a_handed_value_not_the_plans_shape_runs_its_node(planned):
    """take() gives a node's values only at their planned shapes and element types: a slot whose
    planned shape is not the value's gets nothing (that node runs, and step 3 holds its shape to
    the plan); the values of the other nodes are given."""
    path, p = planned
    run = ArenaRun(p.plan, p.model, p.view, VerifyOptions(reference="nodes"), path)
    order = [k for k in run.order if k in handed(run.view, run.order, run.weight_ops, run.slots, run.weights)]
    slots = dict(run.slots)
    slots["g"] = dataclasses.replace(slots["g"], shape=(1,))
    values = handover.HandedValues(run.full, run.view, run.nodes, order, slots, run.weights)
    got = values.take(["s"])
    assert got is not None and got["s"][0].tolist() == [2, 3, 4, 5] and got["s"][0].dtype == np.int64
    assert values.take(["g"]) is None
    assert values.take(["s2"])["s2"][0].tolist() == [2, 3, 4, 5]
    slots["t2"] = dataclasses.replace(slots["t2"], elem_type=TensorProto.INT32)
    assert values.take(["t2"]) is None
    again = values.again()  # a run that starts again: the values taken are given again
    got = again.take(["s", "u"])
    assert got["s"][0].tolist() == [2, 3, 4, 5] and got["u"][0].tolist() == [2]


def test_a_float16_model_hands_its_shape_arithmetic_on_the_cpu(tmp_path):
    """float16 values send the CPU run step by step, each node again as its reference (a whole
    model drops the casts of a kernel without float16): the Shape of a float16 value is handed
    (its session reads an untouched buffer of the planned shape, not the value), and the outputs
    are bit for bit those of every node run."""
    path = tmp_path / "half.onnx"
    onnx.save(_model(TensorProto.FLOAT16), path)
    p = plan_model(path, GREEDY)
    assert _handed(path, p) == HANDED
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    every = execute_plan(p.plan, p.model, p.view, model_path=path, options=VerifyOptions(handed=False))
    assert ex.reference == every.reference == "nodes"
    assert ex.findings == every.findings == () and all(c.identical for c in ex.outputs + every.outputs)
    assert (ex.nodes_handed, ex.nodes_run, every.nodes_run) == (7, 6, 13)


def test_a_draw_of_a_few_bytes_is_not_handed(tmp_path):
    """A RandomNormal of two values reads nothing and writes 8 bytes, as shape arithmetic does,
    but draws: it runs (seeded alike outside the arena and in it), and the run verifies."""
    nodes = [helper.make_node("RandomNormal", [], ["n"], name="draw", shape=[2], seed=3.0),
             helper.make_node("Shape", ["n"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["c"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Add", ["n", "c"], ["m"], name="add"),
             helper.make_node("Mul", ["x", "m"], ["y"], name="mul")]
    path = tmp_path / "draw.onnx"
    onnx.save(make_model(nodes, [vi("x", [3, 2])], [vi("y", [3, 2])]), path)
    p = plan_model(path, GREEDY)
    assert _handed(path, p) == {"shape", "cast"}
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.reference == "nodes" and ex.findings == () and all(c.identical for c in ex.outputs)
    assert (ex.nodes_handed, ex.nodes_run) == (2, 3)
