"""verify against cases meant to break it: random ops run twice (the reference, then the arena),
the whole-model reference in pieces, and weights mapped from their data files."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import VerifyOptions, execute_plan

from .helpers import make_model, vi

GREEDY = PlanOptions(solver="greedy", order="file")


def _planned(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return path, plan_model(path, GREEDY)


def _moved(plan, moved, onto):
    """``plan`` with tensor ``moved`` put at the offset of tensor ``onto``."""
    at = plan.tensor(onto).offset
    return dataclasses.replace(plan, tensors=tuple(dataclasses.replace(t, offset=at) if t.name == moved else t
                                                   for t in plan.tensors))


def _draws(seeded: bool) -> list[onnx.NodeProto]:
    seed = {"seed": 3.0} if seeded else {}
    return [helper.make_node("RandomNormalLike", ["x"], ["n1"], name="n1", **seed),
            helper.make_node("RandomUniformLike", ["x"], ["n2"], name="n2", **seed),
            helper.make_node("Add", ["n1", "n2"], ["s"], name="sum"),
            helper.make_node("Dropout", ["s", "ratio", "train"], ["y"], name="drop", **({"seed": 3} if seeded else {}))]


@pytest.mark.parametrize("seeded", [True, False], ids=["seeded", "unseeded"])
def test_a_random_op_verifies_and_a_clobber_of_its_draws_is_caught(tmp_path, seeded):
    """Each random node runs twice (its reference run, then in the arena): a right plan passes,
    each output identical to the reference; n2 moved onto n1, which sum still reads, is caught."""
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "train")]
    model = make_model(_draws(seeded), [vi("x", [4, 8])], [vi("y", [4, 8])], inits)
    path, p = _planned(tmp_path, model)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.reference == "nodes" and ex.findings == (), ex.findings
    assert ex.nodes_run == 4 and all(c.identical for c in ex.outputs)
    bad = execute_plan(_moved(p.plan, "n2", "n1"), p.model, p.view, model_path=path)
    assert bad.findings and bad.findings[0].kind == "clobber" and bad.findings[0].tensor == "n1"


def test_a_random_op_in_a_loop_body_verifies(tmp_path):
    """A Loop whose body draws each iteration: every iteration's draw is checked against its own
    reference run, and the plan passes."""
    body = helper.make_graph(
        [helper.make_node("RandomNormalLike", ["a_in"], ["n"], name="draw", seed=1.0),
         helper.make_node("Add", ["a_in", "n"], ["a_out"], name="add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("a_in", [2, 8])],
        [vi("cond_out", [], TensorProto.BOOL), vi("a_out", [2, 8])])
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trips"), numpy_helper.from_array(np.array(True), "yes")]
    model = make_model([helper.make_node("Relu", ["x"], ["a0"], name="start"),
                        helper.make_node("Loop", ["trips", "yes", "a0"], ["a_n"], name="loop", body=body),
                        helper.make_node("Relu", ["a_n"], ["y"], name="end")],
                       [vi("x", [2, 8])], [vi("y", [2, 8])], inits)
    path, p = _planned(tmp_path, model)
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings == () and all(c.identical for c in ex.outputs), ex.findings
