"""bench/ort_graphs.py and bench/bench_ort_graphs.py: the set builder writes onnxruntime's
quantized graphs of a shipped model (seeded, loadable, of the expected ops), and the bench
reads onnxsim's arena of a model and one file's row end to end."""

from __future__ import annotations

import collections
import importlib.util
import json
import sys
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from .conftest import MODELS

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and the child process look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


og = _load("ort_graphs")
bog = _load("bench_ort_graphs")


def _ops(path: Path) -> collections.Counter[str]:
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)


@pytest.fixture(scope="module")
def qset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("set")
    og.build_set(out, variants=["qoperator", "qdq", "fused"], zoo=MODELS / "resnet_cnn.onnx")
    return out


def test_quantized_variants_load_and_hold_the_quantized_ops(qset):
    entries = {e.variant: e for e in og.read_set(qset)}
    assert {v: e.status for v, e in entries.items()} == {
        "original": "built", "qoperator": "built", "qdq": "built", "fused": "n/a"}
    assert entries["qdq"].file == "resnet_cnn.qdq.onnx"
    qop, qdq = _ops(qset / "resnet_cnn.qoperator.onnx"), _ops(qset / "resnet_cnn.qdq.onnx")
    assert qop["QLinearConv"] > 0 and qop["Conv"] == 0
    assert qdq["QuantizeLinear"] > 0 and qdq["DequantizeLinear"] > 0 and qdq["Conv"] == _ops(MODELS / "resnet_cnn.onnx")["Conv"]
    for name in ("resnet_cnn.onnx", "resnet_cnn.qoperator.onnx", "resnet_cnn.qdq.onnx"):
        ort.InferenceSession(str(qset / name), providers=["CPUExecutionProvider"])
    assert sorted(p.name for p in qset.iterdir()) == [
        "resnet_cnn.onnx", "resnet_cnn.qdq.onnx", "resnet_cnn.qoperator.onnx", "set.json"]


def test_the_calibration_is_seeded(qset, tmp_path):
    og.build_set(tmp_path, variants=["qdq"], zoo=MODELS / "resnet_cnn.onnx")
    assert (tmp_path / "resnet_cnn.qdq.onnx").read_bytes() == (qset / "resnet_cnn.qdq.onnx").read_bytes()


def test_a_failed_build_is_an_entry_and_leaves_no_file(tmp_path):
    # no variant of a model whose dims the catalogue does not bind (quantize_static could not calibrate it)
    model = onnx.load(str(MODELS / "transformer_block.onnx"))
    onnx.save(model, str(tmp_path / "src.onnx"))
    (tmp_path / "catalog.json").write_text(json.dumps({"models": [
        {"name": "tb", "file": "src.onnx", "dims": {"batch": 1}}]}))
    entries = og.build_set(tmp_path / "out", variants=["qdq"], zoo=tmp_path / "catalog.json")
    assert [(e.variant, e.status) for e in entries] == [("original", "failed")]
    assert "'seq'" in entries[0].error
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["set.json"]


def test_onnxsim_arena_is_read(qset):
    pytest.importorskip("onnxsim")
    from onnxmem.planning.pipeline import PlanOptions, plan_model

    got = bog.onnxsim_arena(str(qset / "resnet_cnn.onnx"), {"image": [1, 3, 32, 32]})
    assert set(got) == {"arena", "naive", "unplanned", "overlaps"}, got
    plan = plan_model(str(MODELS / "resnet_cnn.onnx"), PlanOptions()).plan
    # every activation sized, the same ones as onnxmem's; at least the largest, at most all at once
    assert got["unplanned"] == 0
    assert got["naive"] == sum(t.size for t in plan.tensors)
    assert max(t.size for t in plan.tensors) <= got["arena"] <= got["naive"]


@pytest.mark.slow  # plans, verifies and compares one graph end to end (about 5 s)
def test_one_file_is_planned_verified_and_compared(qset):
    pytest.importorskip("onnxsim")
    entry = next(e for e in og.read_set(qset) if e.variant == "qoperator")
    row = bog.bench_file(entry, qset, "-", {"image": [1, 3, 32, 32]}, 300, {})
    assert row["verify"] == "verified", row
    assert row["arena"] <= row["ort_disable_all"] and row["onnxsim"]["arena"] > 0
    assert row["stored"] == row["weights"] > 0
    line = bog.table([row])[2]
    assert line.startswith("| resnet_cnn | qoperator | - |") and "verified" in line


def test_the_weights_note_names_the_runs_whose_plan_counts_a_mib_more_than_the_file():
    rows = [dict(model="gpt2", variant="original", level="none", weights=5 * 2**20, stored=3 * 2**20),
            dict(model="bert", variant="qdq", level="none", weights=2**20 + 4096, stored=2**20),
            dict(model="vit", variant="fp16", level="all", weights=None, stored=2**20)]
    note = bog.weights_notes(rows)[0]
    assert "By 1 MiB or more in this run: gpt2.original at `none` +2,048.0 KiB." in note
    assert "bert.qdq" not in note and "vit.fp16" not in note
    assert "DequantizeLinear outputs are not among them" in note  # a fold never grows them: fold.md
    assert "none." in bog.weights_notes(rows[1:])[0]
