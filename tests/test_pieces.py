"""onnx's inference in pieces: the same shapes as the whole graph's, on real models."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

import onnxmem.shapes.pieces as pieces
from onnxmem.model import load_model
from onnxmem.model.generate import transformer
from onnxmem.shapes import infer_shapes
from onnxmem.shapes.engines import collect_types, run_onnx_inference, strip_for_inference

from .conftest import MODELS, SHIPPED, SHIPPED_DIMS
from .helpers import make_model, vi

ZOO = MODELS / "zoo"
ZOO_DIMS = {m["file"]: m["dims"] for m in json.loads((ZOO / "catalog.json").read_text())["models"]}
ZOO_MODELS = ["resnet50_batch.onnx", "mobilenet_v2_legacy.onnx", "bert_base_legacy.onnx", "llama_4l_dynamic.onnx",
              "gpt2.onnx", "unet.onnx"]


def _shapes(model: onnx.ModelProto, dims: dict[str, int]) -> tuple[object, ...]:
    info = infer_shapes(model, dims=dims)
    return info.dtypes, info.shapes, info.sources, info.bodies


def _cut_small(monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    monkeypatch.setattr(pieces, "PIECE_NODES", 1)
    monkeypatch.setattr(pieces, "PIECE_WINDOW", window)


@pytest.mark.parametrize("path", [*SHIPPED, *(ZOO / f for f in ZOO_MODELS)], ids=lambda p: p.name)
def test_pieces_give_the_whole_graphs_shapes(path, monkeypatch):
    model = load_model(path)
    dims = SHIPPED_DIMS.get(path.name) or ZOO_DIMS.get(path.name) or {}
    whole = _shapes(model, dims)
    _cut_small(monkeypatch, 7)
    assert _shapes(model, dims) == whole


def test_transformer_is_shaped_in_pieces_alone():
    model = transformer(6)
    work = strip_for_inference(model)
    cut = pieces.infer_in_pieces(work, window=11)
    assert cut is not None
    whole = collect_types(run_onnx_inference(work))
    produced = [o for n in model.graph.node for o in n.output]
    assert produced and all(cut[o] == whole[o] and None not in cut[o][1] for o in produced)


def test_symbolic_dims_carry_across_the_cuts():
    """A dim left symbolic crosses every cut under its own name, as in the whole graph."""
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(9)]
    nodes.append(helper.make_node("Concat", ["t9", "t0"], ["y"], axis=1))
    model = make_model(nodes, [vi("t0", ["batch", 4])], [vi("y", ["batch", 8])])
    work = strip_for_inference(model)
    cut = pieces.infer_in_pieces(work, window=3)
    whole = collect_types(run_onnx_inference(work))
    assert cut is not None
    assert cut["t9"] == whole["t9"] == (TensorProto.FLOAT, ("batch", 4))
    assert cut["y"] == whole["y"] == (TensorProto.FLOAT, ("batch", 8))


def test_bodies_and_unordered_graphs_are_not_cut(monkeypatch):
    flow = load_model(MODELS / "control_flow.onnx")
    assert any(n.op_type in ("If", "Loop") for n in flow.graph.node)
    assert pieces.infer_in_pieces(strip_for_inference(flow), window=2) is None
    nodes = [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Relu", ["x"], ["a"])]
    backwards = make_model(nodes, [vi("x", [2])], [vi("b", [2])])
    assert pieces.infer_in_pieces(strip_for_inference(backwards), window=1) is None
    whole = _shapes(backwards, {})
    _cut_small(monkeypatch, 1)
    assert _shapes(backwards, {}) == whole  # the whole graph is inferred instead
