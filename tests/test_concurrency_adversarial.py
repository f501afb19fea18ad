"""Adversarial checks of --concurrency dag: graphs where the rule is subtle, checked against
every state a concurrent schedule can reach; hand-corrupted plans; the trials' bounds; the flags."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from .helpers import make_model, vi
from .test_hostile import assert_refused_subprocess

SHAPE = [1, 256]


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
