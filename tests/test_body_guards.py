"""Values inside If branches and Loop bodies past their dtype's range: planned as onnxruntime runs them, or refused.

The guards of the main graph (tests/test_shapes_overflow.py) hold inside subgraphs: a shape
a body computes through an integer Cast that wraps is the one onnxruntime makes, and one
computed from an integer overflow (undefined in onnxruntime's C++) is never guessed.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.shapes import infer_shapes

from .helpers import make_model, plan_refused, plan_then_verify, vi

I64, I32, F, B = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT, TensorProto.BOOL
THEN = (("y", "then_branch"),)


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _const(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, I64, [len(values)], values))


#: d + 2^32 - 3 is 2^32 + 1 exactly and 1 in int32 (x is [4, 3], d = Shape(x)[0] = 4)
WRAPPED = [helper.make_node("Add", ["d", "big"], ["b"]), helper.make_node("Cast", ["b"], ["c32"], to=I32),
           helper.make_node("Cast", ["c32"], ["t0"], to=I64)]
#: d + 2^63 - 2 leaves int64: undefined in onnxruntime's C++ (its CPU kernel wraps to a negative start)
OVERFLOW = [helper.make_node("Add", ["d", "big"], ["t0"])]
#: what the body does with t0, and b_y's shape in onnxruntime's run where t0 is 1
TAILS = {
    "Reshape": ([helper.make_node("Concat", ["t0", "m1"], ["t"], axis=0), helper.make_node("Reshape", ["x", "t"], ["b_y"])],
                (1, 12)),
    "Expand": ([helper.make_node("Constant", [], ["x1"], value=helper.make_tensor("x1", F, [1, 3], [1, 2, 3])),
                helper.make_node("Concat", ["t0", "three"], ["t"], axis=0), helper.make_node("Expand", ["x1", "t"], ["b_y"])],
               (1, 3)),
    "Slice": ([helper.make_node("Slice", ["x", "t0", "end", "zero"], ["b_y"])], (3, 3)),
}


def _branch_model(chain: list[onnx.NodeProto], big: int, tail: list[onnx.NodeProto]) -> onnx.ModelProto:
    """An If whose then branch computes ``t0`` from ``d = Shape(x)[0]`` by ``chain``, shapes b_y from it
    by ``tail`` and returns b_y's sum; the else branch returns x's sum."""
    nodes = [_const("zero", [0]), _const("big", [big]), _const("m1", [-1]), _const("three", [3]), _const("end", [100]),
             helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["d"], axis=0),
             *chain, *tail, helper.make_node("Relu", ["b_y"], ["b_r"]),
             helper.make_node("ReduceSum", ["b_r"], ["b_out"], keepdims=0)]
    then_g = helper.make_graph(nodes, "then", [], [vi("b_out", None)])
    else_g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e_out"], keepdims=0)], "else", [], [vi("e_out", None)])
    return make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                      [vi("x", [4, 3]), vi("c", [], B)], [vi("y", None)])


def _ort_body_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    """b_y's shape in onnxruntime's run of the then branch (b_y made an output of the If)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    node = probe.graph.node[0]
    branches = {a.name: a.g for a in node.attribute}
    then_g, else_g = branches["then_branch"], branches["else_branch"]
    then_g.output.append(vi("b_y", None))
    else_g.node.append(helper.make_node("Identity", ["x"], ["e_x"]))
    else_g.output.append(vi("e_x", None))
    node.output.append("probe")
    probe.graph.output.append(vi("probe", None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    out = session.run(["probe"], {"x": np.ones((4, 3), np.float32), "c": np.array(True)})[0]
    return tuple(out.shape)


@pytest.mark.parametrize("tail", list(TAILS))
def test_wrapping_cast_in_a_branch_plans_as_onnxruntime_runs(tail, tmp_path):
    nodes, want = TAILS[tail]
    model = _branch_model(WRAPPED, 2**32 - 3, nodes)
    assert _ort_body_shape(model) == want
    assert infer_shapes(model).bodies[THEN]["b_y"][1] == want
    plan_then_verify(tmp_path, model, {"c": np.array(True)})


def test_overflow_in_a_branch_is_refused_not_guessed(tmp_path):
    model = _branch_model(OVERFLOW, 2**63 - 2, TAILS["Slice"][0])
    assert _ort_body_shape(model) == (4, 3)  # onnxruntime's wrapped start; exact arithmetic gives (0, 3)
    shaped = infer_shapes(model).bodies[THEN]
    assert "t0" in shaped and "b_y" not in shaped and "b_r" not in shaped
    plan_refused(tmp_path, model, "'b_y'", "no static size")




def test_nested_branch_and_captured_value_are_guarded(tmp_path):
    """A wrapping Cast in an If nested in an If's branch, and one in the main graph whose value a
    branch reads: the bodies are sized with onnxruntime's value, and verify runs them."""
    inner_then = helper.make_graph(
        [_const("zero", [0]), _const("big", [2**32 - 3]), _const("m1", [-1]),
         helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["d"], axis=0),
         *WRAPPED, *TAILS["Reshape"][0], helper.make_node("ReduceSum", ["b_y"], ["i_out"], keepdims=0)],
        "inner_then", [], [vi("i_out", None)])
    inner_else = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["ie_out"], keepdims=0)], "inner_else", [],
                                   [vi("ie_out", None)])
    outer_then = helper.make_graph(
        [helper.make_node("If", ["c"], ["inner"], then_branch=inner_then, else_branch=inner_else),
         helper.make_node("Cast", ["w32"], ["w64"], to=I64), helper.make_node("Concat", ["w64", "m1top"], ["wt"], axis=0),
         helper.make_node("Reshape", ["x", "wt"], ["o_y"]), helper.make_node("ReduceSum", ["o_y"], ["o_s"], keepdims=0),
         helper.make_node("Add", ["inner", "o_s"], ["o_out"])],
        "outer_then", [], [vi("o_out", None)])
    outer_else = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["oe_out"], keepdims=0)], "outer_else", [],
                                   [vi("oe_out", None)])
    top = [helper.make_node("Shape", ["x"], ["ts"]), helper.make_node("Gather", ["ts", "tzero"], ["td"], axis=0),
           helper.make_node("Add", ["td", "tbig"], ["tb"]), helper.make_node("Cast", ["tb"], ["w32"], to=I32),
           helper.make_node("If", ["c"], ["y"], then_branch=outer_then, else_branch=outer_else)]
    inits = [helper.make_tensor("tzero", I64, [1], [0]), helper.make_tensor("tbig", I64, [1], [2**32 - 2]),
             helper.make_tensor("m1top", I64, [1], [-1])]
    model = make_model(top, [vi("x", [4, 3]), vi("c", [], B)], [vi("y", None)], inits)
    info = infer_shapes(model)
    assert info.bodies[THEN]["o_y"][1] == (2, 6)  # 4 + 2^32 - 2 is 2 in int32
    assert info.bodies[(*THEN, ("inner", "then_branch"))]["b_y"][1] == (1, 12)
    plan_then_verify(tmp_path, model, {"c": np.array(True)})


def _renamed(nodes: list[onnx.NodeProto], tag: str) -> list[onnx.NodeProto]:
    """``nodes`` with every value but x prefixed by ``tag``."""
    out = []
    for n in nodes:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.input[:] = [i if i == "x" else tag + i for i in n.input]
        m.output[:] = [tag + o for o in n.output]
        out.append(m)
    return out


@pytest.mark.parametrize("tail", ["Reshape", "Expand"])
def test_if_output_from_wrapping_branches_takes_their_exact_shape(tail, tmp_path):
    """Both branches return b_y made from t0 through a wrapping Cast: onnxruntime's symbolic inference
    (Reshape) and onnx's data propagation inside the branches (Expand) gave the If's output the
    unwrapped shape; the If's output takes the shape both branches, each inferred on its own, agree on."""
    chain = [_const("zero", [0]), _const("big", [2**32 - 3]), _const("m1", [-1]), _const("three", [3]),
             helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["d"], axis=0),
             *WRAPPED, *TAILS[tail][0]]
    then_g = helper.make_graph(_renamed(chain, "t_"), "then", [], [vi("t_b_y", None)])
    else_g = helper.make_graph(_renamed(chain, "e_"), "else", [], [vi("e_b_y", None)])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
                        helper.make_node("Relu", ["y"], ["z"])], [vi("x", [4, 3]), vi("c", [], B)], [vi("z", None)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = TAILS[tail][1]
    assert session.run(None, {"x": np.ones((4, 3), np.float32), "c": np.array(True)})[0].shape == want
    info = infer_shapes(model)
    assert info.shapes["y"] == info.shapes["z"] == want and info.sources["y"] == "branches"
    plan_then_verify(tmp_path, model)


def _nonzero_branches(then_declared: list[int]) -> onnx.ModelProto:
    """An If whose branches return NonZero(x) (x [4, 3]: [2, 12] where no element is 0), the then
    branch's output declared ``then_declared``, the else branch's and the If's [2, 12]."""
    then_g = helper.make_graph([helper.make_node("NonZero", ["x"], ["t_nz"])], "then", [],
                               [vi("t_nz", then_declared, I64)])
    else_g = helper.make_graph([helper.make_node("NonZero", ["x"], ["e_nz"])], "else", [], [vi("e_nz", [2, 12], I64)])
    return make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                      [vi("x", [4, 3]), vi("c", [], B)], [vi("y", [2, 12], I64)])


@pytest.mark.parametrize("declared", [[3, 5], [2, 12, 1], [5]])
def test_branch_output_declaration_conflicting_with_inference_is_not_taken(declared, tmp_path):
    """NonZero's output has rank 2 and 2 rows (x's rank): a declaration of another rank or another
    row count is not taken (onnxruntime makes [2, 12]); the body output is left unsized."""
    model = _nonzero_branches(declared)
    assert "t_nz" not in infer_shapes(model).bodies[THEN]
    plan_refused(tmp_path, model, "'t_nz'", "no static size")


def test_branch_output_declaration_agreeing_with_inference_is_taken(tmp_path):
    model = _nonzero_branches([2, 12])
    assert infer_shapes(model).bodies[THEN]["t_nz"] == (I64, (2, 12))
    plan_then_verify(tmp_path, model, {"c": np.array(True)})


def test_casts_hidden_in_bodies_are_put_back():
    """onnx's inference of a model with converting Casts in a branch: the model given is byte
    for byte as it was, and the result has its nodes, the branch's included."""
    from onnxmem.shapes.engines import run_onnx_inference

    model = _branch_model(WRAPPED, 2**32 + 2, TAILS["Reshape"][0])
    given = model.SerializeToString()
    out = run_onnx_inference(model)
    assert model.SerializeToString() == given and out is not None
    then = next(a.g for a in out.graph.node[-1].attribute if a.name == "then_branch")
    want = next(a.g for a in model.graph.node[-1].attribute if a.name == "then_branch")
    assert list(then.node) == list(want.node)
    assert not any(v.name.startswith("__onnxmem_cast_input") for v in then.value_info)


def test_a_body_value_read_before_the_body_writes_it_is_named_as_unsorted(tmp_path):
    """A Loop body whose Add reads a Constant written after it: onnxruntime refuses the body
    ("Nodes in a graph must be topologically sorted"); onnxmem names the value and the fix
    (it said the value was produced by no node)."""
    from onnx import numpy_helper

    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "c"], ["v_out"], name="badd"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="bid"),
         helper.make_node("Constant", [], ["c"], name="bconst", value=numpy_helper.from_array(np.ones(4, np.float32)))],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("v_in", [4])],
        [vi("cond_out", [], TensorProto.BOOL), vi("v_out", [4])])
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trip"), numpy_helper.from_array(np.array(True), "cond")]
    model = make_model([helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop", body=body)],
                       [vi("x", [4])], [vi("y", [4])], inits)
    with pytest.raises(Exception, match="topologically sorted"):
        path = tmp_path / "m.onnx"
        onnx.save(model, path)
        ort.InferenceSession(str(path))
    plan_refused(tmp_path, model, "value 'c' is read in a subgraph of node 'loop'",
                 "before the node there that writes it", "sort the subgraph's nodes")
