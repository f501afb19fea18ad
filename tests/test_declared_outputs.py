"""A graph output declared at another shape than its node makes: onnxruntime runs the model at the
shape the node makes (it only warns), so range plans, like concrete ones, size the output and the
values read after it as made; a declaration only fills what inference leaves open."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from onnxmem.planning import PlanOptions, plan_range
from onnxmem.plans import instantiate
from onnxmem.shapes import infer_symbolic_shapes

from .helpers import make_model, vi


def _wrongly_declared() -> onnx.ModelProto:
    """``out = Sigmoid(x)`` is ``(n, 4)`` but declared ``(n, 2)``; ``z = Relu(out)`` reads it."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["out"], name="sig"), helper.make_node("Relu", ["out"], ["z"], name="relu")]
    return make_model(nodes, [vi("x", ["n", 4])], [vi("out", ["n", 2]), vi("z", None)])


def _ran(model: onnx.ModelProto, n: int) -> dict[str, tuple[int, ...]]:
    """The shapes onnxruntime gives the model's outputs, run with ``x`` of ``n`` rows."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3  # its warning on the declared shape is expected
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": np.ones((n, 4), np.float32)})
    return {o.name: tuple(v.shape) for o, v in zip(sess.get_outputs(), got)}


def test_a_range_plan_sizes_a_wrongly_declared_output_as_onnxruntime_makes_it(tmp_path):
    model = _wrongly_declared()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rp = plan_range(model, path, {"n": (1, 16)}, PlanOptions())
    for n in (2, 5, 16):
        ran = _ran(model, n)
        assert ran == {"out": (n, 4), "z": (n, 4)}
        planned = {t.name: t for t in instantiate(rp, {"n": n}).tensors}
        assert {name: planned[name].shape for name in ran} == ran
        assert planned["out"].size == planned["z"].size == 16 * n


def _opaque(read: bool, declared: list[object] | None) -> onnx.ModelProto:
    """An op onnx has no rule for makes ``out`` (declared ``declared``); ``z = Relu(out)`` where ``read``."""
    nodes = [helper.make_node("Opaque", ["x"], ["out"], domain="custom.ops"),
             helper.make_node("Relu", ["out" if read else "x"], ["z"])]
    model = make_model(nodes, [vi("x", ["n", 4])], [vi("out", declared), vi("z", None)])
    model.opset_import.append(helper.make_opsetid("custom.ops", 1))
    return model


def _named(found: dict[str, tuple[int, tuple[object, ...]]], original: dict[str, str]) -> dict[str, tuple[object, ...]]:
    return {k: tuple(original.get(d, d) if isinstance(d, str) else d for d in sh) for k, (_, sh) in found.items()}


@pytest.mark.parametrize("read", [True, False], ids=["read by a node", "read by none"])
def test_an_output_inference_leaves_open_keeps_its_declared_symbolic_shape(read):
    found, original = infer_symbolic_shapes(_opaque(read, ["n", 4]), ["n"])
    shapes = _named(found, original)
    assert shapes["out"] == ("n", 4)
    assert shapes["z"] == ("n", 4)


def test_a_declaration_of_no_use_is_not_taken():
    """A declaration with no dim at all fixes nothing: the output stays unsized, for the caller to name."""
    found, _ = infer_symbolic_shapes(_opaque(True, [None, None]), ["n"])
    assert "out" not in found and "z" not in found
