"""Aliasing: views and in-place outputs share bytes only where that is safe.

Literal graphs first (hand-computed groups and bounds), then illegal groups
that the proof must reject, then the onnx-wheel models.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.analysis.aliasing import RULES, AliasLayout, alias_groups, alias_rule, find_aliases
from onnxmem.analysis.liveness import build_liveness
from onnxmem.core.errors import PlanInvalid
from onnxmem.core.problem import lower_bound, validate
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
    # row-wise ops reuse their input only where onnxruntime's kernel does: float
    for op in ("Softmax", "LogSoftmax"):
        rule = RULES["", op]
        assert rule.kind == "inplace" and rule.holds_for(TensorProto.FLOAT)
        assert not rule.holds_for(TensorProto.DOUBLE) and not rule.holds_for(TensorProto.FLOAT16)


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
    assert aliases["c"] == ("a", "inplace")  # a and b both die at the Add
    assert aliases["y"] == ("c", "inplace")
    assert alias_groups(v, order) == {"a": ("a", "c", "y")}


def test_conv_never_aliases():
    v, order = _view(conv_graph())
    groups = alias_groups(v, order)
    assert all("c" not in m or "a" not in m for m in groups.values())
    assert "c" in groups and groups["c"] == ("c", "y")  # the Relu after it is in place


def test_view_group_lives_until_the_last_use_of_the_view():
    v, order = _view(view_graph())
    groups = alias_groups(v, order)
    assert groups == {"a": ("a", "v"), "b": ("b", "bf", "y")}
    live = build_liveness(v, order, AliasLayout(groups), alignment=1)
    buf = {b.id: b for b in live.problem.buffers}
    assert (buf["a"].start, buf["a"].end) == (0, 5)  # a's last direct read is step 2, v's is 4
    assert live.interval("a").end == 3
    assert lower_bound(live.problem) == 2 * KIB  # {a, v} and {b, bf, y} from step 2 on


def test_graph_input_is_never_written_in_place():
    m = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])],
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


def test_cast_in_place_only_between_equal_sizes():
    m = make_model([helper.make_node("Relu", ["x"], ["a"]),
                    helper.make_node("Cast", ["a"], ["i"], to=TensorProto.INT32),
                    helper.make_node("Cast", ["i"], ["h"], to=TensorProto.FLOAT16),
                    helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)],
                   [vi("x", S)], [vi("y", S)])
    v, order = _view(m)
    assert alias_groups(v, order) == {"a": ("a", "i")}


def test_add_of_a_tensor_with_itself_is_in_place():
    m = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "a"], ["y"])],
                   [vi("x", S)], [vi("y", S)])
    v, order = _view(m)
    assert alias_groups(v, order) == {"a": ("a", "y")}


def test_broadcast_input_is_not_reused():
    # b (1 KiB) broadcasts against c (4 KiB): the output may take c's bytes, never b's
    m = make_model([helper.make_node("Relu", ["x"], ["b"]), helper.make_node("Relu", ["z"], ["c"]),
                    helper.make_node("Mul", ["b", "c"], ["d"]), helper.make_node("Relu", ["d"], ["y"])],
                   [vi("x", S), vi("z", [4, 4, 8, 8])], [vi("y", [4, 4, 8, 8])])
    v, order = _view(m)
    assert alias_groups(v, order) == {"c": ("c", "d", "y")}


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

_RNG = np.random.default_rng(0)
_SHAPE = (2, 3, 4, 5)
_BOOL_OPS = {"Not", "And", "Or", "Xor"}
_UINT_OPS = {"BitwiseNot", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitShift"}
_ATTRS = {"Cast": {"to": TensorProto.INT32}, "BitShift": {"direction": "LEFT"}, "Mod": {"fmod": 1}}
_DOMAIN = {"Acosh": (1.5, 3.0), "Log": (0.1, 0.9), "Sqrt": (0.1, 0.9), "Acos": (0.1, 0.9),
           "Asin": (0.1, 0.9), "Atanh": (0.1, 0.9)}


def _operands(op: str, n: int, j: int) -> list[np.ndarray]:
    """``n`` inputs for ``op``: input ``j`` full size, the others broadcast where they can."""
    if op in _BOOL_OPS:
        return [_RNG.integers(0, 2, _SHAPE).astype(bool) for _ in range(n)]
    if op in _UINT_OPS:
        return [_RNG.integers(0, 4, _SHAPE).astype(np.uint32) for _ in range(n)]
    lo, hi = _DOMAIN.get(op, (-0.9, 0.9))
    return [_RNG.uniform(lo, hi, size=_SHAPE if k == j else (_SHAPE[1] if op == "BatchNormalization"
                                                          else _SHAPE[-1],)).astype(np.float32)
            for k in range(n)]


_INPLACE = sorted(
    (op, j) for (d, op), r in RULES.items() if r.kind == "inplace" and d == ""
    and op not in {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "IsInf", "IsNaN"}
    for j in r.inputs
)


@pytest.mark.parametrize("op,j", _INPLACE, ids=[f"{o}-{j}" for o, j in _INPLACE])
def test_onnxruntime_kernel_is_correct_in_place(op, j):
    """Each in-place rule holds for onnxruntime's CPU kernel: output bound over input ``j``."""
    from onnxmem.runtime.ort import make_session

    n = {"BatchNormalization": 5, "Sum": 3, "Mean": 3, "Max": 3, "Min": 3}.get(op, len(RULES["", op].inputs))
    n = 2 if op == "PRelu" else n
    if op in ("Clip",):
        n = 1
    ins = _operands(op, n, j)
    if op == "BatchNormalization":
        ins[4] = np.abs(ins[4]) + 0.1  # variance
    names = [f"i{k}" for k in range(n)]
    node = helper.make_node(op, names, ["y"], **_ATTRS.get(op, {}))
    inputs = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for nm, a in zip(names, ins)]
    model = helper.make_model(helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info("y")]),
                              opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    sess = make_session(model)
    expected = sess.run(None, dict(zip(names, ins)))[0]
    bufs = [a.copy() for a in ins]
    binding = sess.io_binding()
    for nm, a in zip(names, bufs):
        binding.bind_input(nm, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
    target = bufs[j]
    assert target.nbytes == expected.nbytes
    binding.bind_output("y", "cpu", 0, expected.dtype, list(expected.shape), target.ctypes.data)
    sess.run_with_iobinding(binding)
    got = np.frombuffer(target.tobytes(), dtype=expected.dtype).reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)
