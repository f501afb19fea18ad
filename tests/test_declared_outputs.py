"""A graph output declared at another shape than its node makes: onnxruntime runs the model at the
shape the node makes (it only warns), so range plans, like concrete ones, size the output and the
values read after it as made; a declaration only fills what inference leaves open."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxmem.core.errors import ShapeError
from onnxmem.planning import PlanOptions, plan_range
from onnxmem.plans import instantiate
from onnxmem.shapes import infer_shapes, infer_symbolic_shapes
from onnxmem.shapes.subgraphs import standalone_bodies

from .helpers import make_model, vi

F = TensorProto.FLOAT


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


def _branch(name: str, op: str, declared: list[object]) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_o"])], name, [], [vi(f"{name}_o", declared)])


def _if_declared(declared: list[object]) -> onnx.ModelProto:
    """``y = If(c)`` of branches making ``(n, 4)`` (Sigmoid, Tanh of ``x``) whose outputs declare ``declared``;
    ``z = Relu(y)``."""
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Sigmoid", declared),
                              else_branch=_branch("e", "Tanh", declared)),
             helper.make_node("Relu", ["y"], ["z"])]
    return make_model(nodes, [vi("c", [], TensorProto.BOOL), vi("x", ["n", 4])], [vi("z", None)])


def _ran_if(model: onnx.ModelProto, n: int) -> tuple[int, ...]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return tuple(sess.run(None, {"c": np.array(True), "x": np.ones((n, 4), np.float32)})[0].shape)


def test_branch_outputs_declared_at_another_shape_are_sized_as_onnxruntime_makes_them():
    model = _if_declared(["n", 2])
    for n in (2, 5):
        assert _ran_if(model, n) == (n, 4)
        info = infer_shapes(model, dims={"n": n})
        assert info.shapes["y"] == info.shapes["z"] == (n, 4)
        assert sorted(info.bodies.values(), key=str) == [{"e_o": (F, (n, 4))}, {"t_o": (F, (n, 4))}]
    found, original = infer_symbolic_shapes(model, ["n"])
    assert _named(found, original)["z"] == ("n", 4)


def _loop(body_nodes: list[onnx.NodeProto], declared: list[object] | None, opaque: bool = False) -> onnx.ModelProto:
    """``ys = Loop(3)`` stacking the body's ``s`` (declared ``declared``), which reads ``x`` (5 x 4); ``z = Relu(ys)``."""
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]), *body_nodes], "body",
                             [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL)],
                             [vi("cond_out", [], TensorProto.BOOL), vi("s", declared)])
    nodes = [helper.make_node("Loop", ["M", ""], ["ys"], body=body), helper.make_node("Relu", ["ys"], ["z"])]
    model = make_model(nodes, [vi("x", [5, 4])], [vi("z", None)], [helper.make_tensor("M", TensorProto.INT64, [], [3])])
    if opaque:
        model.opset_import.append(helper.make_opsetid("custom.ops", 1))
    return model


def test_a_loop_body_output_declared_at_another_shape_is_sized_as_onnxruntime_makes_it():
    """Inferred with the whole model, and the body inferred on its own (the path for bodies the whole
    model's inference leaves open): both give ``s`` the shape onnxruntime makes, 5 x 4, not 5 x 2."""
    model = _loop([helper.make_node("Sigmoid", ["x"], ["s"])], [5, 2])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones((5, 4), np.float32)})[0].shape == (3, 5, 4)
    info = infer_shapes(model)
    assert info.shapes["ys"] == info.shapes["z"] == (3, 5, 4)
    assert info.bodies[(("ys", "body"),)]["s"] == (F, (5, 4))
    bodies: dict = {}
    standalone_bodies(model, model.graph, (), {"x": (F, (5, 4))}, {}, bodies)
    assert bodies[(("ys", "body"),)]["s"] == (F, (5, 4))


@pytest.mark.parametrize("declared, taken", [([5, 4], True), ([5, None], False), ([None, None], False)],
                         ids=["fixes every dim", "fixes some", "fixes nothing"])
def test_a_body_output_inference_leaves_open_takes_a_declaration_that_adds(declared, taken):
    """An op onnx has no rule for makes ``s`` in the body: the body inferred on its own takes the
    declared shape where it fixes every dim, and leaves ``s`` unsized where it does not."""
    model = _loop([helper.make_node("Opaque", ["x"], ["s"], domain="custom.ops")], declared, opaque=True)
    bodies: dict = {}
    standalone_bodies(model, model.graph, (), {"x": (F, (5, 4))}, {}, bodies)
    assert bodies[(("ys", "body"),)].get("s") == ((F, (5, 4)) if taken else None)


@pytest.mark.parametrize("declared, taken", [([2, 12], (2, 12)), ([2, "k"], None)])
def test_a_top_level_output_read_by_none_takes_a_declaration_that_adds(declared, taken):
    """NonZero's output (2 rows, a count inference leaves open), read by no node: a declaration that
    agrees and fixes the count is merged in (onnxruntime makes [2, 12] of x [4, 3] without zeros);
    one that fixes nothing more is not taken and leaves the output to a measurement."""
    model = make_model([helper.make_node("NonZero", ["x"], ["nz"])], [vi("x", [4, 3])],
                       [vi("nz", declared, TensorProto.INT64)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.ones((4, 3), np.float32)})[0].shape == (2, 12)
    if taken is None:
        with pytest.raises(ShapeError, match="nz"):
            infer_shapes(model)
    else:
        info = infer_shapes(model)
        assert info.shapes["nz"] == taken and info.sources["nz"] == "onnx"


def test_a_scalar_declaration_is_taken_for_an_output_without_a_shape():
    """An op onnx does not know gives its output no shape; the output's scalar declaration sizes it."""
    model = make_model([helper.make_node("Opaque", ["x"], ["out"], domain="org.example")], [vi("x", [4, 3])],
                       [vi("out", [])])
    model.opset_import.append(helper.make_opsetid("org.example", 1))
    info = infer_shapes(model)
    assert info.shapes["out"] == () and info.sources["out"] == "onnx"


@pytest.mark.parametrize("declared", [[1, 12], [2, 12, 1], [5]])
def test_the_last_resort_takes_no_output_declaration_conflicting_with_inference(declared, tmp_path):
    """NonZero's output has rank 2 and 2 rows: the exporter's declaration, the last resort, is not taken
    where it conflicts with that (a plan of [1, 12] held 96 of the 192 bytes onnxruntime writes)."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    model = make_model([helper.make_node("NonZero", ["x"], ["nz"])], [vi("x", [4, 3])],
                       [vi("nz", declared, TensorProto.INT64)])
    with pytest.raises(ShapeError, match="nz.*--measure-shapes"):
        infer_shapes(model)
    path, plan = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(model, path)
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(plan)])
    assert r.exit_code != 0 and "'nz'" in r.output and "Traceback" not in r.output and not plan.exists()
