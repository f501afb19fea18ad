"""onnx's inference in pieces: the same shapes as the whole graph's, on real models."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

import onnxmem.shapes.pieces as pieces
import onnxmem.shapes.steps as steps
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


def _counted(calls: list[int]):
    """onnx's inference, counting its runs."""

    def infer(piece: onnx.ModelProto) -> onnx.ModelProto | None:
        calls.append(len(piece.graph.node))
        return run_onnx_inference(piece)

    return infer


def _windows_of(nodes, inits, inputs, outputs):
    model = make_model(nodes, inputs, outputs, inits)
    work = strip_for_inference(model)
    calls: list[int] = []
    return work, pieces.infer_in_pieces(work, window=2, infer=_counted(calls)), calls


def test_windows_that_repeat_are_inferred_once():
    """The transformer's layers (25 nodes): each window of one layer repeats the second one
    (the first reads the graph's input); the types are the whole graph's all the same."""
    model = transformer(6)
    work = strip_for_inference(model)
    calls: list[int] = []
    cut = pieces.infer_in_pieces(work, window=25, infer=_counted(calls))
    whole = collect_types(run_onnx_inference(work))
    assert cut is not None and len(calls) < 6
    produced = [o for n in model.graph.node for o in n.output]
    assert all(cut[o] == whole[o] and None not in cut[o][1] for o in produced)


def test_weights_of_other_values_repeat_where_only_their_shape_counts():
    """MatMul reads its weight's shape alone: windows that differ only in the weights' values
    repeat one another; with weights of another shape they do not."""
    import numpy as np

    nodes, inits, prev = [], [], "x"
    for i, k in enumerate((4, 4, 4, 4, 4, 4, 5, 5)):
        w = helper.make_tensor(f"w{i}", TensorProto.FLOAT, [4, k], np.full(4 * k, i, np.float32))
        inits.append(w)
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        prev = f"r{i}" if k == 4 else f"p{i}"
        if k == 5:
            nodes[-1] = helper.make_node("Slice", [f"m{i}", "zero", "four", "one"], [prev])
    inits += [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("zero", 0), ("four", 4), ("one", 1))]
    work, cut, calls = _windows_of(nodes, inits, [vi("x", [2, 4])], [vi(prev, [2, 4])])
    whole = collect_types(run_onnx_inference(work))
    # inferred: the window that reads x, the next (its repeats are not), the first 5-wide one
    assert cut is not None and len(calls) == 3
    assert all(cut[o] == whole[o] for n in nodes for o in n.output)
    assert cut["m6"] == (TensorProto.FLOAT, (2, 5))


@pytest.mark.parametrize("kind", ["integer shape", "Range's float bounds"])
def test_windows_whose_values_set_shapes_are_each_inferred(kind):
    """Windows alike but for the value of an initializer their shapes follow (a Reshape's
    integer shape; a Range's floating-point limit, which its inference reads): none repeats."""
    nodes, inits = [], []
    if kind == "integer shape":
        prev = "x"
        for i, shape in enumerate(([2, 6], [3, 4], [4, 3], [6, 2])):
            inits.append(helper.make_tensor(f"s{i}", TensorProto.INT64, [2], shape))
            nodes += [helper.make_node("Reshape", [prev, f"s{i}"], [f"h{i}"]),
                      helper.make_node("Relu", [f"h{i}"], [f"y{i}"])]
            prev = f"y{i}"
        inputs, outputs = [vi("x", [12])], [vi(prev, [6, 2])]
    else:
        for i in range(4):
            inits += [helper.make_tensor(f"a{i}", TensorProto.FLOAT, [], [0.0]),
                      helper.make_tensor(f"b{i}", TensorProto.FLOAT, [], [float(i + 2)]),
                      helper.make_tensor(f"d{i}", TensorProto.FLOAT, [], [1.0])]
            nodes += [helper.make_node("Range", [f"a{i}", f"b{i}", f"d{i}"], [f"h{i}"]),
                      helper.make_node("Relu", [f"h{i}"], [f"y{i}"])]
        inputs, outputs = [], [vi(f"y{i}", [i + 2]) for i in range(4)]
    work, cut, calls = _windows_of(nodes, inits, inputs, outputs)
    whole = collect_types(run_onnx_inference(work))
    assert cut is not None and len(calls) == 4
    assert all(cut[o] == whole[o] and None not in cut[o][1] for n in nodes for o in n.output)
    assert len({cut[f"y{i}"][1] for i in range(4)}) == 4


@pytest.mark.parametrize("declared", [None, [None, 4], ["out_rows", 4]], ids=["no shape", "unnamed dim", "unbound dim"])
def test_declared_outputs_take_the_inferred_type(declared, monkeypatch):
    """A graph output declared less precisely than onnx infers it (no shape, an unnamed or an
    unbound dim) gets the type the whole graph's inference gives it, in an inferred window and
    in a repeated one, and the whole graph is not inferred again."""
    nodes = [helper.make_node("Relu" if i % 2 else "Sigmoid", [f"t{i}"], [f"t{i + 1}"]) for i in range(8)]
    model = make_model(nodes, [vi("t0", [3, 4])], [vi("t4", declared), vi("t8", declared)])
    work = strip_for_inference(model)
    whole = collect_types(run_onnx_inference(work))
    calls: list[int] = []
    cut = pieces.infer_in_pieces(work, window=2, infer=_counted(calls))
    assert cut is not None and len(calls) < 4  # windows 3 and 4 repeat window 2
    assert cut["t4"] == cut["t8"] == whole["t8"] == (TensorProto.FLOAT, (3, 4))
    whole_runs: list[int] = []
    monkeypatch.setattr(steps, "run_onnx_inference", _counted(whole_runs))  # the whole graph's inference
    _cut_small(monkeypatch, 2)
    info = infer_shapes(model)
    assert info.shapes["t8"] == (3, 4) and info.sources["t8"] == "onnx"
    assert not whole_runs  # taken from the windows alone


def test_a_windows_digest_depends_on_its_values_alone():
    """The parts of a window's signature are written without pickle's memo: a string held once
    and the same text held as two objects give the same bytes, and any other value other bytes."""
    one = "MatMul"
    shared = [(one, "", None, [0, -2], 1), (one, "", None, [1, -3], 1)]
    apart = [("".join(["Mat", "Mul"]), "", None, [0, -2], 1), ("".join(["Mat", "M", "ul"]), "", None, [1, -3], 1)]
    assert shared[0][0] is shared[1][0] and apart[0][0] is not apart[1][0]
    assert pieces._canonical_bytes(shared) == pieces._canonical_bytes(apart)
    for other in ([("MatMul", "", None, [0, -2], 1), ("MatMul", "", None, [1, -2], 1)],
                  [("MatMul", "", None, [0, -2], 1), ("Gemm", "", None, [1, -3], 1)],
                  [("MatMul", "", None, [0, -2], 1), ("MatMul", "", [b""], [1, -3], 1)],
                  [("MatMul", "", None, [0, -2], 1), ("MatMul", "", None, (1, -3), 1)]):
        assert pieces._canonical_bytes(other) != pieces._canonical_bytes(shared)
