"""The default plan does not depend on the machine's load: its order search and its solver stop
on counted work (:mod:`onnxmem.core.workclock`), so a process whose clock runs a hundred times
fast and whose core is shared with a busy thread writes the same plan file, byte for byte but
for the two measured times it records (``plan_seconds`` and ``solver/seconds``)."""

from __future__ import annotations

import re

import onnx
import pytest

from onnxmem.model.generate import randwire
from onnxmem.planning import PlanOptions, plan_model
from onnxmem.plans import write_plan

from .helpers import slowed_machine

#: the only lines of a plan file that hold wall-clock measurements
TIMES = re.compile(rb'^ ?( "plan_seconds"|  "seconds"): [0-9.e+-]+(,?)$', re.M)


def _plan_file(model_path, out, budget):
    write_plan(plan_model(model_path, PlanOptions(timeout=budget)).plan, out)
    return out.read_bytes()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("load") / "randwire.onnx"
    model = randwire(100, seed=1)  # 259 nodes: the order search is cut off by a budget of 0.05 s
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_the_same_plan_file_on_a_machine_a_hundred_times_slower(model_path, tmp_path, monkeypatch):
    idle = _plan_file(model_path, tmp_path / "idle.json", 0.05)
    with slowed_machine(monkeypatch):
        busy = _plan_file(model_path, tmp_path / "busy.json", 0.05)
    assert len(TIMES.findall(idle)) == 2  # the measured times, and nothing else, are masked
    assert TIMES.sub(rb"\1: 0\2", busy) == TIMES.sub(rb"\1: 0\2", idle)


def test_the_budget_decides_the_plan(model_path, tmp_path):
    """The test above can fail: with less work the order search stops at another order."""
    short = _plan_file(model_path, tmp_path / "short.json", 0.005)
    budgeted = _plan_file(model_path, tmp_path / "budgeted.json", 0.05)
    assert TIMES.sub(rb"\1: 0\2", short) != TIMES.sub(rb"\1: 0\2", budgeted)
