"""Aliasing: views and in-place outputs share bytes only where that is safe.

Literal graphs first (hand-computed groups and bounds), then illegal groups
that the proof must reject, then the onnx-wheel models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.analysis.aliasing import (
    RULES,
    AliasLayout,
    AliasRule,
    alias_groups,
    alias_rule,
    find_aliases,
    overwritable,
)
from onnxmem.analysis.liveness import build_liveness
from onnxmem.core.errors import PlanInvalid
from onnxmem.core.problem import lower_bound, validate
from onnxmem.graph.view import Op
from onnxmem.planning.pipeline import PlanOptions, plan_loaded
from onnxmem.plans.point import check_schema
from onnxmem.proof.plan import prove_plan

from .conftest import LIGHT_MODELS
from .helpers import file_order_view as _view
from .helpers import make_model, plan_layout, vi
from .helpers import plan_file_order as _plan

S = (1, 4, 8, 8)  # 256 floats = 1 KiB
KIB = 1024


def relu_chain(n: int = 4) -> onnx.ModelProto:
    """x -> Relu -> ... -> y, n Relus."""
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [prev], [out], name=f"relu{i}"))
        prev = out
    return make_model(nodes, [vi("x", S)], [vi("y", S)])


def later_consumer() -> onnx.ModelProto:
    """a = Relu(x); b = Relu(a); y = Add(a, b): ``a`` is read after ``b`` is written."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="ra"),
            helper.make_node("Relu", ["a"], ["b"], name="rb"),
            helper.make_node("Add", ["a", "b"], ["c"], name="add"),
            helper.make_node("Sigmoid", ["c"], ["y"], name="sig"),
        ],
        [vi("x", S)],
        [vi("y", S)],
    )


def conv_graph() -> onnx.ModelProto:
    """a = Relu(x); c = Conv(a, w) (1x1, same shape); y = Relu(c)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4, 1, 1], np.ones(16, np.float32).tolist())
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="ra"),
            helper.make_node("Conv", ["a", "w"], ["c"], name="conv"),
            helper.make_node("Relu", ["c"], ["y"], name="ry"),
        ],
        [vi("x", S)],
        [vi("y", S)],
        inits=[w],
    )


def view_graph() -> onnx.ModelProto:
    """a = Relu(x); v = Reshape(a); b = Sigmoid(a); bf = Reshape(b); y = Add(bf, v).

    ``v`` keeps ``a``'s bytes live until the Add, so the Sigmoid may not write
    over ``a`` even though it is ``a``'s last direct reader.
    """
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 256])
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="ra"),
            helper.make_node("Reshape", ["a", "shape"], ["v"], name="view_a"),
            helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
            helper.make_node("Reshape", ["b", "shape"], ["bf"], name="view_b"),
            helper.make_node("Add", ["bf", "v"], ["y"], name="add"),
        ],
        [vi("x", S)],
        [vi("y", [1, 256])],
        inits=[shape],
    )


# ---------------------------------------------------------------- the table


def test_rules_table_is_well_formed():
    for (_domain, op), rule in RULES.items():
        assert rule.kind in ("view", "inplace"), op
        assert rule.inputs and all(j >= 0 for j in rule.inputs), op
    for op in ("Conv", "MatMul", "Gemm", "MaxPool", "AveragePool", "Transpose",
               "LayerNormalization", "Concat", "LRN", "Where", "InstanceNormalization"):
        assert ("", op) not in RULES, f"{op} reads neighbours and must never alias"
    # in place only for the element types both providers declare: Relu's float and double, never half
    relu = RULES["", "Relu"]
    assert relu.holds_for(TensorProto.FLOAT) and relu.holds_for(TensorProto.DOUBLE)
    assert not relu.holds_for(TensorProto.FLOAT16) and not relu.holds_for(TensorProto.INT32)
    assert not RULES["", "Elu"].holds_for(TensorProto.DOUBLE)


def test_dropout_with_training_mode_is_not_a_view():
    v, _ = _view(make_model(
        [helper.make_node("Dropout", ["x", "r", "t"], ["y"])],
        [vi("x", S), vi("r", [], TensorProto.FLOAT), vi("t", [], TensorProto.BOOL)],
        [vi("y", S)],
    ))
    assert alias_rule(v.ops[0]) is None


# ---------------------------------------------------------------- literal graphs


def test_relu_chain_in_place_halves_the_bound(tmp_path):
    m = relu_chain(4)
    off = _plan(m, tmp_path, io="external", inplace=False).plan
    on = _plan(m, tmp_path, io="external", inplace=True).plan
    assert off.lower_bound == 2 * KIB
    assert on.lower_bound == KIB and on.arena_size == KIB
    assert {t.group for t in on.tensors} == {"r0"}
    assert on.inplace and not off.inplace


def test_relu_chain_internal_io():
    v, order = _view(relu_chain(4))
    # x is a graph input: the first Relu never writes over it; y (an output) may join
    assert alias_groups(v, order) == {"r0": ("r0", "r1", "r2", "y")}
    # with external io the output is outside the arena and stays out of groups
    assert alias_groups(v, order, "external") == {"r0": ("r0", "r1", "r2")}


def test_relu_whose_input_is_read_later_does_not_alias():
    v, order = _view(later_consumer())
    aliases = {a.output: (a.input, a.kind) for a in find_aliases(v, order)}
    assert "b" not in aliases  # a is read by the Add after rb
    assert "c" not in aliases  # a and b both die at the Add, but no Add kernel declares MayInplace
    assert aliases["y"] == ("c", "inplace")
    assert alias_groups(v, order) == {"c": ("c", "y")}


def test_conv_never_aliases():
    v, order = _view(conv_graph())
    groups = alias_groups(v, order)
    assert all("c" not in m or "a" not in m for m in groups.values())
    assert "c" in groups and groups["c"] == ("c", "y")  # the Relu after it is in place


def test_view_group_lives_until_the_last_use_of_the_view():
    v, order = _view(view_graph())
    groups = alias_groups(v, order)
    assert groups == {"a": ("a", "v"), "b": ("b", "bf")}  # the Add keeps its own buffer
    live = build_liveness(v, order, AliasLayout(groups), alignment=1)
    buf = {b.id: b for b in live.problem.buffers}
    assert (buf["a"].start, buf["a"].end) == (0, 5)  # a's last direct read is step 2, v's is 4
    assert live.interval("a").end == 3
    assert lower_bound(live.problem) == 3 * KIB  # {a, v}, {b, bf} and y at the Add


def test_graph_input_is_never_written_in_place():
    m = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["y"])],
                   [vi("x", S)], [vi("y", S)])
    v, order = _view(m)
    groups = alias_groups(v, order)
    assert all("x" not in members for members in groups.values())
    assert groups == {"a": ("a", "y")}


def test_view_of_graph_input_shares_only_with_internal_io():
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 256])
    m = make_model([helper.make_node("Reshape", ["x", "shape"], ["v"]), helper.make_node("Relu", ["v"], ["y"])],
                   [vi("x", S)], [vi("y", [1, 256])], inits=[shape])
    v, order = _view(m)
    assert alias_groups(v, order) == {"x": ("x", "v")}  # y may not write over the input's bytes
    assert alias_groups(v, order, "external") == {}


def test_views_of_weights_are_not_aliased():
    w = helper.make_tensor("w", TensorProto.FLOAT, [256], np.ones(256, np.float32).tolist())
    shape = helper.make_tensor("shape", TensorProto.INT64, [4], list(S))
    m = make_model([helper.make_node("Reshape", ["w", "shape"], ["wv"]),
                    helper.make_node("Add", ["x", "wv"], ["y"])],
                   [vi("x", S)], [vi("y", S)], inits=[w, shape])
    v, order = _view(m)
    # a view of a weight is a weight too: outside the arena, in no group
    assert v.tensors["wv"].kind == "weight"
    assert alias_groups(v, order) == {}


def test_cast_is_never_in_place():
    """Cast declares MayInplace on CPU only (not on CUDA), so even between types of one size it keeps its buffer."""
    m = make_model([helper.make_node("Relu", ["x"], ["a"]),
                    helper.make_node("Cast", ["a"], ["i"], to=TensorProto.INT32),
                    helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)],
                   [vi("x", S)], [vi("y", S)])
    v, order = _view(m)
    assert alias_groups(v, order) == {}


def test_binary_ops_are_never_in_place():
    # a (1 KiB) and c die at the Mul and d has c's size, but no Mul kernel declares MayInplace
    m = make_model([helper.make_node("Relu", ["x"], ["b"]), helper.make_node("Relu", ["z"], ["c"]),
                    helper.make_node("Mul", ["b", "c"], ["d"]), helper.make_node("Add", ["d", "d"], ["e"]),
                    helper.make_node("Relu", ["e"], ["y"])],
                   [vi("x", S), vi("z", [4, 4, 8, 8])], [vi("y", [4, 4, 8, 8])])
    v, order = _view(m)
    assert alias_groups(v, order) == {"e": ("e", "y")}


def test_a_rule_over_two_inputs_may_read_its_target_twice():
    """The read part of rule 3, for a rule listing several inputs: ``op(x, x)``
    may write over ``x``; a read of ``x`` at an unlisted input may not."""
    both, first = AliasRule("inplace", (0, 1)), AliasRule("inplace", (0,))
    whole = {"x": (0, KIB)}
    assert overwritable(Op(0, "n", "T", "", ("x", "x"), ("y",)), both, "x", whole)
    assert overwritable(Op(0, "n", "T", "", ("x", "v"), ("y",)), both, "x", {**whole, "v": (0, KIB)})
    assert not overwritable(Op(0, "n", "T", "", ("x", "w", "x"), ("y",)), first, "x", whole)
    assert not overwritable(Op(0, "n", "T", "", ("x", "v"), ("y",)), both, "x", {**whole, "v": (0, KIB // 2)})


def test_inplace_off_gives_the_plan_without_groups(tmp_path):
    m = later_consumer()
    off = _plan(m, tmp_path, inplace=False)
    v, order = _view(m)
    plain = build_liveness(v, order, alignment=1)
    assert off.liveness.problem == plain.problem
    assert all(t.group == t.name for t in off.plan.tensors)
    assert not off.plan.inplace


def test_cli_inplace_flag(tmp_path):
    from onnxmem.cli.main import main

    path = tmp_path / "m.onnx"
    onnx.save(relu_chain(4), path)
    runner = CliRunner()
    plans = {}
    for flag in ("on", "off"):
        res = runner.invoke(main, ["plan", str(path), "--json", "--io", "external", "--alignment", "1",
                                   "--inplace", flag])
        assert res.exit_code == 0, res.output
        plans[flag] = json.loads(res.output)
    assert plans["on"]["inplace"] is True and plans["off"]["inplace"] is False
    assert plans["on"]["lower_bound"] == KIB and plans["off"]["lower_bound"] == 2 * KIB
    groups = {t["name"]: (t["group"], t["offset"]) for t in plans["on"]["tensors"]}
    assert len({g for g, _ in groups.values()}) == 1 and len({o for _, o in groups.values()}) == 1


# ---------------------------------------------------------------- illegal groups


ILLEGAL = [
    # (model, groups, words the proof's complaint must contain)
    ("later consumer", later_consumer, {"a": ("a", "b")}, "still live until step 2"),
    ("reads neighbours", conv_graph, {"a": ("a", "c")}, "Conv may not write its output over"),
    ("view kept alive", view_graph, {"a": ("a", "v", "b")}, "over 'v' (alias group 'a'), which is still live"),
    ("size mismatch", lambda: make_model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Cast", ["a"], ["h"], to=TensorProto.FLOAT16),
         helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)],
        [vi("x", S)], [vi("y", S)]), {"a": ("a", "h")}, "the bytes differ"),
]


@pytest.mark.parametrize("name,build,groups,words", ILLEGAL, ids=[c[0] for c in ILLEGAL])
def test_static_proof_rejects_plans_with_illegal_aliases(tmp_path, name, build, groups, words):
    planned = plan_layout(build(), tmp_path, AliasLayout(dict(groups)), prove=False)
    assert {t.group for t in planned.plan.tensors} >= set(groups)
    findings = prove_plan(planned.plan, planned.view)
    assert findings and all(f.kind == "alias" for f in findings), findings
    assert any(words in f.message for f in findings), findings
    # and planning with such groups fails loudly
    with pytest.raises(PlanInvalid):
        plan_layout(build(), tmp_path, AliasLayout(dict(groups)))


@pytest.mark.parametrize("build,io", [(lambda: relu_chain(2), "internal"), (later_consumer, "internal"),
                                      (later_consumer, "external")])
def test_planner_never_groups_a_graph_input_or_unrelated_tensors(build, io):
    """What the proof leaves to the planner: a graph input is never written in
    place, and every member is linked to its group by a rule."""
    v, order = _view(build())
    for a in find_aliases(v, order, io, concat=True):
        assert v.tensors[a.input].kind != "input" and v.tensors[a.output].kind != "input"
        op = v.ops[a.node]
        assert a.output == op.outputs[0] and a.input in op.inputs
    for members in alias_groups(v, order, io).values():
        assert all(v.tensors[m].producer is not None for m in members)


# ---------------------------------------------------------------- real models


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=[p.stem for p in LIGHT_MODELS])
def test_wheel_model_aliased_plan_is_valid(path):
    model = onnx.load(path)
    on = plan_loaded(model, path, PlanOptions(solver="greedy", inplace=True))
    off = plan_loaded(model, path, PlanOptions(solver="greedy", inplace=False))
    assert on.plan.inplace
    assert prove_plan(on.plan, on.view) == []
    assert validate(on.liveness.problem, on.solution) == []
    check_schema(on.plan.to_dict())
    bases: dict[str, set[int]] = {}
    for t in on.plan.tensors:
        bases.setdefault(t.group, set()).add(t.offset - t.group_offset)
    assert all(len(o) == 1 for o in bases.values()), "members of a group must lie in one buffer"
    assert on.plan.lower_bound <= off.plan.lower_bound
    assert replace(off.plan, plan_seconds=0, solver={}) == replace(
        plan_loaded(model, path, PlanOptions(solver="greedy", inplace=False)).plan, plan_seconds=0, solver={})


# ---------------------------------------------------------------- onnxruntime's kernels in place

_F, _D = TensorProto.FLOAT, TensorProto.DOUBLE
_MS = "com.microsoft"

#: The in-place table, written out: exactly the ops whose onnxruntime kernels
#: declare MayInplace(0, 0) on both CPU and CUDA, with the element types both
#: declare. An entry added to RULES without that declaration fails here.
EXPECTED_INPLACE = {
    ("", "Relu"): {_F, _D}, ("", "Sigmoid"): {_F, _D}, ("", "Tanh"): {_F, _D},
    **{("", op): {_F} for op in ("Elu", "HardSigmoid", "LeakyRelu", "Selu", "Softplus", "Softsign",
                                 "ThresholdedRelu")},
}
EXPECTED_VIEWS = {("", op) for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")}
#: element-wise in the algebra, but their kernels declare no MayInplace on both providers
UNDECLARED = [("", op) for op in (
    "Gelu Add Sub Mul Div Pow Mod Sum Mean Max Min And Or Xor Not Equal Less Greater Abs Neg Exp Log Erf "
    "Sqrt Reciprocal Floor Ceil Round Sign Sin Cos Clip Cast Celu Mish HardSwish PRelu Softmax LogSoftmax "
    "BatchNormalization BitwiseNot BitShift IsNaN IsInf").split()] + [
    (_MS, op) for op in "Gelu FastGelu BiasGelu ReluGrad GeluGrad FastGeluGrad TanhGrad SigmoidGrad DropoutGrad Scale".split()]


def test_in_place_table_is_exactly_the_declared_ops():
    assert {k: set(r.dtypes or ()) for k, r in RULES.items() if r.kind == "inplace"} == EXPECTED_INPLACE
    assert {k for k, r in RULES.items() if r.kind == "view"} == EXPECTED_VIEWS
    assert all(r.dtypes is None and r.inputs == (0,) for k, r in RULES.items() if r.kind == "view")
    assert all(r.inputs == (0,) for r in RULES.values())


@pytest.mark.parametrize("domain,op", UNDECLARED, ids=[f"{d or 'ai.onnx'}-{o}" for d, o in UNDECLARED])
def test_undeclared_op_never_aliases(domain, op):
    assert (domain, op) not in RULES
    for spelled in {domain, domain or "ai.onnx"}:
        assert alias_rule(Op(0, "n", op, spelled, ("a", "b"), ("y",))) is None


@dataclass(frozen=True)
class Recipe:
    """How to run an op of the table: its input shape for a shape of SIZES, the
    inputs after input 0 (constants), its attributes, the value range of its
    input, and the element types to try where the rule allows any."""

    shape: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda s: s
    consts: Callable[[tuple[int, ...]], list[np.ndarray]] = lambda shape: []
    attrs: dict[str, Any] = field(default_factory=dict)
    low_high: tuple[float, float] = (-4.0, 4.0)
    any_dtype: tuple[int, ...] = (_F, TensorProto.INT64, TensorProto.BOOL)


_I64 = np.int64
RECIPES: dict[tuple[str, str], Recipe] = {
    ("", "Reshape"): Recipe(consts=lambda s: [np.array([-1], _I64)]),
    ("", "Flatten"): Recipe(attrs={"axis": 0}),
    ("", "Squeeze"): Recipe(shape=lambda s: (*s, 1), consts=lambda s: [np.array([len(s) - 1], _I64)]),
    ("", "Unsqueeze"): Recipe(consts=lambda s: [np.array([0], _I64)]),
    ("", "Identity"): Recipe(),
    ("", "Dropout"): Recipe(any_dtype=(_F, _D)),
    **{("", op): Recipe() for op in ("Relu", "Sigmoid", "Tanh", "Elu", "HardSigmoid", "LeakyRelu", "Selu",
                                     "Softplus", "Softsign")},
    ("", "ThresholdedRelu"): Recipe(attrs={"alpha": 0.5}),
}
#: element counts that hit vector tails (1, 7, 33, 4099), whole vectors (16) and
#: the threaded wide paths (65537), and one multi-dim shape for row-wise kernels
SIZES = [(1,), (7,), (16,), (33,), (1000,), (4099,), (65537,), (3, 5, 67)]


def test_every_rule_has_an_operands_recipe():
    assert set(RULES) <= set(RECIPES), f"no operands recipe for {sorted(set(RULES) - set(RECIPES))}"


def _cases() -> list[tuple[str, str, int, int]]:
    return sorted((d, op, j, t) for (d, op), r in RULES.items() for j in r.inputs
                  for t in (sorted(r.dtypes) if r.dtypes is not None else RECIPES.get((d, op), Recipe()).any_dtype))


def _operands(recipe: Recipe, size: tuple[int, ...], dtype: int, rng: np.random.Generator) -> np.ndarray:
    shape = recipe.shape(size)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    if np_type == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(np_type, np.integer):
        return rng.integers(-1000, 1000, shape).astype(np_type)
    x = rng.uniform(*recipe.low_high, size=shape).astype(np_type)
    x.flat[:: 5] = 0  # exact zeros: the branch point of Relu, LeakyRelu, ThresholdedRelu...
    return x


def _single_op_model(domain: str, op: str, x: np.ndarray, recipe: Recipe) -> onnx.ModelProto:
    consts = [numpy_helper.from_array(c, f"c{k}") for k, c in enumerate(recipe.consts(x.shape))]
    node = helper.make_node(op, ["x0"] + [c.name for c in consts], ["y"], domain=domain, **recipe.attrs)
    x_info = helper.make_tensor_value_info("x0", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    graph = helper.make_graph([node], "g", [x_info], [helper.make_empty_tensor_value_info("y")], consts)
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def _session(model: onnx.ModelProto, domain: str, op: str, providers: list[str]) -> Any:
    from onnxmem.core.errors import RuntimeBackendError
    from onnxmem.runtime.ort import make_session

    try:
        return make_session(model, providers=providers)
    except RuntimeBackendError as exc:
        if domain and "implementation" in str(exc):  # e.g. training ops without the onnxruntime-training wheel
            pytest.skip(f"{domain} {op} has no kernel in this onnxruntime: {exc}")
        raise


def _run_in_place(sess: Any, x: np.ndarray, out: np.ndarray, device: str) -> np.ndarray:
    """Run ``sess`` with output ``y`` (like ``out``) bound over input ``x0``'s bytes; the bytes it leaves there."""
    import onnxruntime as ort

    binding = sess.io_binding()
    if device == "cpu":
        buf = x.copy()
        binding.bind_input("x0", "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
        binding.bind_output("y", "cpu", 0, out.dtype, list(out.shape), buf.ctypes.data)
        sess.run_with_iobinding(binding)
        return buf
    dev = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    binding.bind_ortvalue_input("x0", dev)
    binding.bind_output("y", "cuda", 0, out.dtype, list(out.shape), dev.data_ptr())
    sess.run_with_iobinding(binding)
    return dev.numpy()


def _check_in_place(domain: str, op: str, j: int, dtype: int, device: str) -> None:
    recipe = RECIPES[domain, op]
    assert j == 0, "recipes feed one data input; give the recipe the other inputs before listing them"
    providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    rng = np.random.default_rng(0)
    for size in SIZES:
        x = _operands(recipe, size, dtype, rng)
        sess = _session(_single_op_model(domain, op, x, recipe), domain, op, providers)
        expected = sess.run(None, {"x0": x})[0]
        assert expected.nbytes == x.nbytes, f"{op}: output and input bytes differ"
        got = _run_in_place(sess, x, expected, device).view(expected.dtype).reshape(expected.shape)
        diff = np.flatnonzero(got.view(np.uint8) != expected.view(np.uint8))
        assert diff.size == 0, (f"{op} {helper.tensor_dtype_to_string(dtype)} at {size}: in place differs from "
                                f"out of place at byte {diff[0]} ({diff.size} bytes)")


_CASES = _cases()
_IDS = [f"{d or 'ai.onnx'}-{op}-{j}-{helper.tensor_dtype_to_string(t).removeprefix('TensorProto.')}"
        for d, op, j, t in _CASES]


@pytest.mark.parametrize("domain,op,j,dtype", _CASES, ids=_IDS)
def test_onnxruntime_kernel_is_correct_in_place(domain, op, j, dtype):
    """Every entry of RULES, at every input and element type it allows, gives
    bit for bit the out-of-place result on this machine's CPU kernels with the
    output bound over the input, at sizes that hit vector tails and wide paths."""
    _check_in_place(domain, op, j, dtype, "cpu")


@pytest.mark.parametrize("domain,op,j,dtype", _CASES, ids=_IDS)
def test_onnxruntime_cuda_kernel_is_correct_in_place(domain, op, j, dtype):
    from onnxmem.runtime.sessions import cuda_available

    if not cuda_available():
        pytest.skip("no GPU onnxruntime's CUDA provider can use here")
    _check_in_place(domain, op, j, dtype, "cuda")
