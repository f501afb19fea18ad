"""Corrupted plans and a wrong liveness rule: the proof must catch them.

A mutation moves a tensor onto the bytes of another tensor of a different
alias group that is live at the same step. The static proof must catch every
one; execution must catch every one that changes a result, and most of the
rest (a write that happens to leave the same bytes behind is harmless in that
run and cannot be seen). A changed result must also show in the output check,
whose tolerance is on the scale of the output.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

import onnxmem.analysis.liveness as liveness_mod
import onnxmem.planning.pipeline as pipeline_mod
from onnxmem.core.errors import PlanInvalid
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.verify.run import VerifyOptions, execute_plan, prove_plan, true_lifetimes, verify_plan

from .conftest import LIGHT, MODELS, SHIPPED_DIMS

MUTATIONS = 50
#: share of the mutations execution must catch
EXEC_FLOOR = 0.8


def mutations(plan, view, n: int, seed: int = 0):
    """Up to ``n`` plans, each with one pair of simultaneously live tensors forced to overlap.

    The later-written tensor (with its alias group) moves onto the first byte,
    the middle or the last aligned block of the other.
    """
    index = {op.name: op.index for op in view.ops}
    life = true_lifetimes(view, [index[name] for name in plan.order])
    ts = [t for t in plan.tensors if t.size > 0]
    pairs = [
        (a, b)
        for i, a in enumerate(ts)
        for b in ts[i + 1 :]
        if a.group != b.group
        and a.offset != b.offset
        and life[a.name][0] < life[b.name][1]
        and life[b.name][0] < life[a.name][1]
    ]
    align = max(plan.alignment, 1)
    cases = []
    for a, b in pairs:
        if (life[b.name][0], b.name) < (life[a.name][0], a.name):
            a, b = b, a  # move the later-written one
        # onto a's first byte, its middle, its last aligned block: three distinct plans
        spots = {a.offset, a.offset + (a.size // 2) // align * align, a.offset + (a.size - 1) // align * align}
        cases += [(a, b, off) for off in sorted(spots) if off != b.offset]
    random.Random(seed).shuffle(cases)
    for a, b, off in cases[:n]:
        tensors = tuple(dataclasses.replace(t, offset=off) if t.group == b.group else t for t in plan.tensors)
        arena = max([plan.arena_size] + [t.offset + t.size for t in tensors])
        yield (a.name, b.name), dataclasses.replace(plan, tensors=tensors, arena_size=arena)


CASES = [
    pytest.param(MODELS / "resnet_cnn.onnx", id="resnet_cnn"),
    pytest.param(MODELS / "inception_block.onnx", id="inception_block"),
    pytest.param(MODELS / "transformer_block.onnx", id="transformer_block"),
    pytest.param(LIGHT / "light_squeezenet.onnx", id="light_squeezenet"),
    pytest.param(LIGHT / "light_shufflenet.onnx", id="light_shufflenet", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("path", CASES)
def test_corrupted_plans_are_caught(path):
    if not path.exists():
        pytest.skip(f"{path} is not built")
    p = plan_model(path, PlanOptions(solver="greedy", dims=SHIPPED_DIMS.get(path.name, {})))
    muts = list(mutations(p.plan, p.view, MUTATIONS))
    assert len(muts) >= MUTATIONS, f"{path.name} has only {len(muts)} overlapping pairs"
    static = execution = changed = 0
    for (a, b), bad in muts:
        found = prove_plan(bad, p.view)
        assert any(f.kind == "overlap" and {f.tensor, f.other} == {a, b} for f in found), (a, b, found[:2])
        static += 1
        ex = execute_plan(bad, p.model, p.view, model_path=path, options=VerifyOptions(keep_going=True))
        caught = any(f.kind == "clobber" for f in ex.findings)
        execution += caught
        changed += ex.changed_result
        assert caught or not ex.changed_result, f"{a}/{b} changed a result unseen: {ex.findings}"
        # the output check (scale-aware, against the same nodes outside the arena) sees every change
        assert not ex.changed_result or any(f.kind == "output" for f in ex.findings), (a, b, ex.outputs)
    assert static == len(muts)
    assert execution >= EXEC_FLOOR * len(muts), f"execution caught {execution} of {len(muts)}"


def _cut_last_use(original):
    """A wrong liveness rule: every value dies one step before its last reader runs."""

    def wrong(view, order, io="internal", last_read=None):
        out = {}
        outputs = set(view.outputs)
        for name, (start, end) in original(view, order, io, last_read).items():
            out[name] = (start, end) if name in outputs or end - 1 <= start else (start, end - 1)
        return out

    return wrong


@pytest.mark.parametrize("path", [MODELS / "resnet_cnn.onnx", LIGHT / "light_squeezenet.onnx"], ids=lambda p: p.stem)
def test_wrong_liveness_rule_fails_verification(path, monkeypatch):
    if not path.exists():
        pytest.skip(f"{path} is not built")
    opts = PlanOptions(solver="greedy", inplace=False) if "inplace" in PlanOptions.__slots__ else PlanOptions(solver="greedy")
    monkeypatch.setattr(liveness_mod, "tensor_lifetimes", _cut_last_use(liveness_mod.tensor_lifetimes))
    # planning runs the static proof: the wrong rule is refused at once
    with pytest.raises(PlanInvalid, match="live until step"):
        plan_model(path, opts)
    # with that check switched off the plan gets out; verify must still refuse it
    with monkeypatch.context() as m:
        m.setattr(pipeline_mod, "prove_plan", lambda *a, **k: [])
        p = plan_model(path, opts)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert not report.ok and report.first.kind == "lifetime"
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    assert ex.findings and ex.findings[0].kind == "clobber", ex.findings


@pytest.mark.parametrize("name", ["scan_rnn", "loop_nested_if"])
def test_wrong_liveness_rule_in_bodies_fails_verification(name, tmp_path, monkeypatch):
    import onnx

    from .nested_models import CONTROL_FLOW_MODELS

    path = tmp_path / f"{name}.onnx"
    onnx.save(CONTROL_FLOW_MODELS[name](), path)
    opts = PlanOptions(solver="greedy", inplace=False)
    monkeypatch.setattr(liveness_mod, "tensor_lifetimes", _cut_last_use(liveness_mod.tensor_lifetimes))
    # the body's plan breaks the lifetime rule: the static proof of the whole plan refuses it
    with pytest.raises(PlanInvalid, match=r"in subgraph '[^']*/body': tensor '\w+' is live until step"):
        plan_model(path, opts)
    with monkeypatch.context() as m:
        m.setattr(pipeline_mod, "prove_plan", lambda *a, **k: [])
        p = plan_model(path, opts)
    report = verify_plan(p.model, p.plan, model_path=path, view=p.view)
    assert not report.ok and report.first.kind == "lifetime" and report.first.graph.endswith("/body")
    ex = execute_plan(p.plan, p.model, p.view, model_path=path)
    # caught in the body, by the iteration whose write clobbered a value still to be read
    assert ex.findings and ex.findings[0].kind == "clobber" and ex.findings[0].graph.endswith("/body"), ex.findings
