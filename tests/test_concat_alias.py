"""Sub-buffer aliasing: Concat inputs placed inside the output at their slice.

Literal graphs with hand-computed bounds first, then onnxruntime's Concat
kernel over its own inputs, then illegal layouts that the proofs must reject,
then the onnx-wheel models with every placement the rules allow, executed.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxmem.analysis import aliasing
from onnxmem.analysis.aliasing import (
    AliasLayout,
    alias_layout,
    concat_slices,
    find_aliases,
    shared_layout,
    shared_liveness,
)
from onnxmem.analysis.liveness import build_liveness
from onnxmem.core.errors import PlanInvalid
from onnxmem.core.problem import lower_bound
from onnxmem.planning.pipeline import PlanOptions, plan_liveness, plan_loaded
from onnxmem.plans.point import check_schema, plan_from_dict
from onnxmem.scheduling.cost import order_peak
from onnxmem.verify.run import VerifyOptions, prove_plan, verify_plan

from .conftest import LIGHT_MODELS
from .helpers import chain, make_model, plan_layout, vi
from .helpers import file_order_view as _view
from .helpers import plan_file_order as _plan

S = (1, 4, 8, 8)  # 256 floats = 1 KiB
C2 = (1, 8, 8, 8)
KIB = 1024


def _bound(model: onnx.ModelProto, concat: bool, io: str = "internal") -> int:
    v, order = _view(model)
    lay = alias_layout(v, order, io, concat=concat)
    return lower_bound(build_liveness(v, order, lay, io=io, alignment=1).problem)


def two_branches() -> onnx.ModelProto:
    """p = Relu(x); q = Sigmoid(x); c = Concat(p, q, axis=1); y = Relu(c).

    Without placement the Concat step holds p, q and c: 4 KiB. Placed, p and
    q are c's two halves: x + {p, q, c} is 3 KiB at steps 0 and 1, 2 KiB after.
    """
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["p"], name="relu"),
            helper.make_node("Sigmoid", ["x"], ["q"], name="sig"),
            helper.make_node("Concat", ["p", "q"], ["c"], name="cat", axis=1),
            helper.make_node("Relu", ["c"], ["y"], name="out"),
        ],
        [vi("x", S)],
        [vi("y", C2)],
    )


def repeated_input() -> onnx.ModelProto:
    """c = Concat(p, q, p): p may be placed at slice 0 only; slice 2 is a copy."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["p"], name="relu"),
            helper.make_node("Sigmoid", ["x"], ["q"], name="sig"),
            helper.make_node("Concat", ["p", "q", "p"], ["c"], name="cat", axis=1),
            helper.make_node("Relu", ["c"], ["y"], name="out"),
        ],
        [vi("x", S)],
        [vi("y", (1, 12, 8, 8))],
    )


def dense_chain() -> onnx.ModelProto:
    """DenseNet-like: c1 = Concat(a, b1); c2 = Concat(c1, b2): b1 = Relu(a),
    b2 = Relu(Neg(c1)). c1 lives inside c2, a and b1 inside c1."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="ra"),
            helper.make_node("Sigmoid", ["a"], ["b1"], name="s1"),
            helper.make_node("Concat", ["a", "b1"], ["c1"], name="cat1", axis=1),
            helper.make_node("Neg", ["c1"], ["n1"], name="neg"),
            helper.make_node("ReduceMean", ["n1"], ["b2"], name="mean", axes=[1], keepdims=1),
            helper.make_node("Concat", ["c1", "b2"], ["c2"], name="cat2", axis=1),
            helper.make_node("Relu", ["c2"], ["y"], name="out"),
        ],
        [vi("x", S)],
        [vi("y", (1, 9, 8, 8))],
        opset=17,
    )


def later_reader() -> onnx.ModelProto:
    """p is read again after the Concat (by the Add): legal to place, but the
    planner leaves it out (the output would then live as long as p)."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["p"], name="relu"),
            helper.make_node("Sigmoid", ["x"], ["q"], name="sig"),
            helper.make_node("Concat", ["p", "q"], ["c"], name="cat", axis=1),
            helper.make_node("ReduceMean", ["c"], ["m"], name="mean", axes=[1], keepdims=1),
            helper.make_node("Add", ["p", "m"], ["y"], name="add"),
        ],
        [vi("x", S)],
        [vi("y", S)],
    )


# ---------------------------------------------------------------- slices


@pytest.mark.parametrize(
    "shapes,axis,want",
    [
        ([(1, 3, 4, 4), (1, 5, 4, 4)], 1, (0, 192)),  # channel concat at batch 1
        ([(2, 3, 4, 4), (2, 5, 4, 4)], 1, None),  # batch 2: the slices interleave
        ([(4, 5), (3, 5)], 0, (0, 80)),  # the leading axis
        ([(1, 1, 7), (1, 1, 9)], -1, (0, 28)),  # the last axis, all dims before 1
        ([(1, 2, 7), (1, 2, 9)], 2, None),
    ],
)
def test_concat_slices(shapes, axis, want):
    names = [f"i{k}" for k in range(len(shapes))]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    m = make_model([helper.make_node("Concat", names, ["y"], axis=axis)],
                   [vi(n, s) for n, s in zip(names, shapes)], [vi("y", out_shape)])
    v, _ = _view(m)
    assert concat_slices(v, v.ops[0]) == want


# ---------------------------------------------------------------- literal graphs


def test_two_branches_bound_with_and_without_placement(tmp_path):
    m = two_branches()
    assert _bound(m, concat=False) == 4 * KIB
    assert _bound(m, concat=True) == 3 * KIB
    v, order = _view(m)
    lay = alias_layout(v, order)
    assert lay.groups == {"p": ("p", "q", "c", "y")}
    assert lay.offsets == {"q": KIB}
    assert sorted((a.input, a.kind, a.offset) for a in find_aliases(v, order, concat=True) if a.kind == "concat") == [
        ("p", "concat", 0), ("q", "concat", KIB)]
    assert prove_plan(plan_layout(m, tmp_path, lay).plan, v) == []
    # with external io the output y stays out, the placement does not need it
    ext = alias_layout(v, order, "external")
    assert ext.groups == {"p": ("p", "q", "c")} and ext.offsets == {"q": KIB}


def inputs_concatenated() -> onnx.ModelProto:
    """c = Concat(x, x): a graph input is never placed, so both layouts are the same."""
    return make_model([helper.make_node("Concat", ["x", "x"], ["c"], name="cat", axis=1),
                       helper.make_node("Relu", ["c"], ["y"], name="out")], [vi("x", S)], [vi("y", C2)])


@pytest.mark.parametrize("build,placed", [(two_branches, True), (dense_chain, True), (later_reader, True),
                                          (inputs_concatenated, False), (chain, False)])
@pytest.mark.parametrize("io", ["internal", "external"])
def test_shared_liveness_is_the_liveness_of_the_shared_layout(build, placed, io):
    # the liveness the choice between the layouts built is handed on: the same as building it again
    # (and where the choice built none, with no Concat or none placed, it is built)
    v, order = _view(build())
    layout = shared_layout(v, order, io, 64)
    assert bool(layout.offsets) == placed
    assert shared_liveness(v, order, io, 64) == build_liveness(v, order, layout, io=io, alignment=64)


@pytest.mark.parametrize("build", [two_branches, dense_chain, chain])
def test_the_liveness_an_order_bound_keeps_is_taken_once_by_that_order_alone(build, monkeypatch):
    # order_peak keeps the liveness it bounded for the planner's next call with the same order;
    # what that call gets is the liveness built afresh, and no other order, io or alignment gets it
    v, order = _view(build())
    fresh = build_liveness(v, order, shared_layout(v, order, "internal", 64), io="internal", alignment=64)
    assert order_peak(v, order, "internal", 64, inplace=True) == lower_bound(fresh.problem)
    assert shared_liveness(v, order, "external", 64) == build_liveness(
        v, order, shared_layout(v, order, "external", 64), io="external", alignment=64)
    assert shared_liveness(v, order, "internal", 1) == build_liveness(
        v, order, shared_layout(v, order, "internal", 1), io="internal", alignment=1)
    kept = shared_liveness(v, order, "internal", 64)
    assert kept == fresh
    again = shared_liveness(v, order, "internal", 64)
    assert again == fresh and again is not kept  # taken: built again
    if build is two_branches:  # Relu and Sigmoid either way round
        other = (1, 0, 2, 3)
        v, order = _view(build())
        order_peak(v, order, "internal", 64, inplace=True)
        got = shared_liveness(v, other, "internal", 64)
        assert got.order == other
        assert got == build_liveness(v, other, shared_layout(v, other, "internal", 64), io="internal", alignment=64)
    v, order = _view(build())
    monkeypatch.setattr(aliasing, "KEEP_NODES", len(v.ops))  # a view this large keeps none
    order_peak(v, order, "internal", 64, inplace=True)
    assert v.memo(("shared liveness", "internal", 64), dict) == {}


def interleaved_branches() -> onnx.ModelProto:
    """Two branches, each a large value reduced to a small one, written interleaved: the file
    order holds both large values at once, the order that ends one branch first holds one."""
    shape = numpy_helper.from_array(np.array([64, 64], dtype=np.int64), "shape")
    nodes = [helper.make_node("Expand", ["x", "shape"], ["a1"], name="a1"),
             helper.make_node("Expand", ["x", "shape"], ["b1"], name="b1"),
             helper.make_node("ReduceMax", ["a1"], ["a2"], name="a2", axes=[0], keepdims=1),
             helper.make_node("ReduceMax", ["b1"], ["b2"], name="b2", axes=[0], keepdims=1),
             helper.make_node("Concat", ["a2", "b2"], ["y"], name="cat", axis=0)]
    return make_model(nodes, [vi("x", [1, 64])], [vi("y", [2, 64])], [shape])


def test_the_planner_builds_the_sharing_of_the_file_order_and_the_chosen_one_once_each(tmp_path, monkeypatch):
    # the search bounds the file order and its chosen order; the plan records the file order's bound
    # and plans the chosen order: two layouts chosen, where four were
    calls: list[tuple[int, ...]] = []
    real = aliasing._shared

    def counted(view, order, *args):
        calls.append(tuple(order))
        return real(view, order, *args)

    monkeypatch.setattr(aliasing, "_shared", counted)
    path = tmp_path / "branches.onnx"
    onnx.save(interleaved_branches(), path)
    plan = plan_loaded(onnx.load(path), path).plan
    assert plan.order != ("a1", "b1", "a2", "b2", "cat")  # the search moved a node
    assert plan.extra["file_order_lower_bound"] > plan.lower_bound
    assert len(calls) == 2 and calls[0] == (0, 1, 2, 3, 4) and calls[1] != calls[0]  # the file order, the chosen


def test_an_order_bound_is_kept_per_order_and_rules():
    # the bounds a view keeps are those of the order, io, alignment and sharing asked for
    v, order = _view(two_branches())
    for io in ("internal", "external"):
        for alignment in (1, 64):
            for inplace in (False, True):
                want = (lower_bound(build_liveness(v, order, shared_layout(v, order, io, alignment), io=io,
                                                  alignment=alignment).problem) if inplace
                        else lower_bound(build_liveness(v, order, None, io=io, alignment=alignment).problem))
                assert order_peak(v, order, io, alignment, inplace) == want
                assert order_peak(v, order, io, alignment, inplace) == want


def test_two_branches_plan_verifies(tmp_path):
    planned = _plan(two_branches(), tmp_path)
    plan = planned.plan
    assert plan.lower_bound == 3 * KIB and plan.arena_size == 3 * KIB
    p, q, c = plan.tensor("p"), plan.tensor("q"), plan.tensor("c")
    assert (p.group_offset, q.group_offset, c.group_offset) == (0, KIB, 0)
    assert p.offset == c.offset and q.offset == c.offset + KIB
    data = plan.to_dict()
    check_schema(data)
    assert "group_offset" in next(t for t in data["tensors"] if t["name"] == "q")
    assert "group_offset" not in next(t for t in data["tensors"] if t["name"] == "p")
    assert plan_from_dict(json.loads(plan.to_json())) == plan
    report = verify_plan(planned.model, plan, model_path=tmp_path / "m.onnx", view=planned.view)
    assert report.ok, report.first


def test_old_plans_without_group_offset_still_read(tmp_path):
    data = _plan(two_branches(), tmp_path, inplace=False).plan.to_dict()
    assert all("group_offset" not in t for t in data["tensors"])
    assert all(t.group_offset == 0 for t in plan_from_dict(data).tensors)


def test_inplace_off_places_nothing(tmp_path):
    plan = _plan(two_branches(), tmp_path, inplace=False).plan
    assert all(t.group == t.name and t.group_offset == 0 for t in plan.tensors)
    assert plan.lower_bound == 4 * KIB  # p, q and c at the Concat; c and y at the last Relu


def test_repeated_input_is_placed_once(tmp_path):
    v, order = _view(repeated_input())
    lay = alias_layout(v, order)
    assert lay.offsets == {"q": KIB}
    assert set(lay.groups["p"]) >= {"p", "q", "c"}  # p at slice 0; slice 2 is a copy
    planned = _plan(repeated_input(), tmp_path)
    report = verify_plan(planned.model, planned.plan, model_path=tmp_path / "m.onnx", view=planned.view)
    assert report.ok, report.first


def test_dense_chain_nests(tmp_path):
    v, order = _view(dense_chain())
    lay = alias_layout(v, order)
    (members,) = [m for m in lay.groups.values() if "c2" in m]
    assert {"a", "b1", "c1", "b2", "c2"} <= set(members)
    assert lay.offsets == {"b1": KIB, "b2": 2 * KIB}
    assert prove_plan(plan_layout(dense_chain(), tmp_path, lay).plan, v) == []


def test_dense_chain_plan_verifies(tmp_path):
    planned = _plan(dense_chain(), tmp_path)
    assert any(t.group_offset for t in planned.plan.tensors)
    report = verify_plan(planned.model, planned.plan, model_path=tmp_path / "m.onnx", view=planned.view)
    assert report.ok, report.first


def test_input_read_after_the_concat_is_not_placed_but_would_be_legal(tmp_path):
    v, order = _view(later_reader())
    lay = alias_layout(v, order)
    assert lay.offsets == {"q": KIB} and "p" not in lay.groups["q"]  # q dies at the Concat, p does not
    planned = plan_layout(later_reader(), tmp_path, AliasLayout({"p": ("p", "q", "c")}, {"q": KIB}))
    assert prove_plan(planned.plan, planned.view) == []
    report = verify_plan(planned.model, planned.plan, model_path=tmp_path / "m.onnx", view=planned.view)
    assert report.ok, report.first


def test_graph_input_and_batch_two_are_not_placed():
    m = make_model([helper.make_node("Relu", ["x"], ["p"]), helper.make_node("Concat", ["x", "p"], ["y"], axis=1)],
                   [vi("x", S)], [vi("y", C2)])
    v, order = _view(m)
    lay = alias_layout(v, order)
    assert lay.offsets == {"p": KIB} and all("x" not in m for m in lay.groups.values())  # x is the caller's
    batch = (2, 4, 8, 8)
    m2 = make_model([helper.make_node("Relu", ["x"], ["p"]), helper.make_node("Sigmoid", ["x"], ["q"]),
                     helper.make_node("Concat", ["p", "q"], ["y"], axis=1)],
                    [vi("x", batch)], [vi("y", (2, 8, 8, 8))])
    v2, order2 = _view(m2)
    assert alias_layout(v2, order2).groups == {}


def test_misaligned_slice_is_not_placed():
    m = make_model([helper.make_node("Relu", ["x"], ["p"]), helper.make_node("Sigmoid", ["z"], ["q"]),
                    helper.make_node("Concat", ["q", "p"], ["c"], axis=1), helper.make_node("Relu", ["c"], ["y"])],
                   [vi("x", (1, 4, 8, 8)), vi("z", (1, 1, 8, 8))], [vi("y", (1, 5, 8, 8))])
    v, order = _view(m)
    # q is 256 B, so p's slice starts at byte 256: placed at alignment 256, not at 512
    assert alias_layout(v, order, alignment=256).offsets == {"p": 256}
    assert "p" not in alias_layout(v, order, alignment=512).offsets


# ---------------------------------------------------------------- onnxruntime's Concat over its inputs


@pytest.mark.parametrize("shapes,axis", [([(1, 3, 4, 5), (1, 2, 4, 5), (1, 6, 4, 5)], 1), ([(4, 5), (3, 5)], 0)])
@pytest.mark.parametrize("placed", ["all", "first"])
def test_onnxruntime_concat_over_its_own_inputs(shapes, axis, placed):
    """Inputs bound inside the output at their slices: the result equals an ordinary run."""
    from onnxmem.runtime.ort import make_session

    rng = np.random.default_rng(0)
    names = [f"i{k}" for k in range(len(shapes))]
    m = make_model([helper.make_node("Concat", names, ["y"], axis=axis)],
                   [vi(n, s) for n, s in zip(names, shapes)], [helper.make_empty_tensor_value_info("y")])
    sess = make_session(m)
    ins = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = sess.run(None, dict(zip(names, ins)))[0]
    buf = np.full(expected.size, np.nan, np.float32)
    binding = sess.io_binding()
    at = 0
    for k, (n, a) in enumerate(zip(names, ins)):
        if placed == "all" or k == 0:
            buf[at : at + a.size] = a.ravel()
            binding.bind_input(n, "cpu", 0, np.float32, list(a.shape), buf.ctypes.data + 4 * at)
        else:
            binding.bind_input(n, "cpu", 0, np.float32, list(a.shape), a.ctypes.data)
        at += a.size
    binding.bind_output("y", "cpu", 0, np.float32, list(expected.shape), buf.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(buf.reshape(expected.shape), expected)


# ---------------------------------------------------------------- illegal layouts


ILLEGAL = [
    # (name, model, groups, offsets, words the proof must say)
    ("slices swapped", two_branches, {"p": ("p", "q", "c")}, {"p": KIB}, "writes 'c' over 'p'"),
    ("two inputs in one slice", two_branches, {"p": ("p", "q", "c")}, {}, "writes 'q' over 'p' (alias group 'p'), which is still live"),
    ("in place over a placed input still read", later_reader, {"p": ("p", "q", "c", "m")}, {"q": KIB},
     "writes 'm' over 'p' (alias group 'p'), which is still live"),
    ("batch two interleaves", lambda: make_model(
        [helper.make_node("Relu", ["x"], ["p"]), helper.make_node("Sigmoid", ["x"], ["q"]),
         helper.make_node("Concat", ["p", "q"], ["c"], axis=1), helper.make_node("Relu", ["c"], ["y"])],
        [vi("x", (2, 4, 8, 8))], [vi("y", (2, 8, 8, 8))]), {"p": ("p", "q", "c")}, {"q": 2 * KIB}, "Concat may not write"),
]


@pytest.mark.parametrize("name,build,groups,offsets,words", ILLEGAL, ids=[c[0] for c in ILLEGAL])
def test_static_proof_rejects_illegal_placements(tmp_path, name, build, groups, offsets, words):
    layout = AliasLayout(dict(groups), dict(offsets))
    planned = plan_layout(build(), tmp_path, layout, prove=False)
    findings = prove_plan(planned.plan, planned.view)
    assert findings and all(f.kind == "alias" for f in findings), findings
    assert any(words in f.message for f in findings), findings
    with pytest.raises(PlanInvalid):
        plan_layout(build(), tmp_path, layout)


def test_a_slice_past_the_output_is_never_planned():
    """What the proof leaves to the planner (nothing live is overwritten): every
    placed input lies inside its Concat output's bytes, at its own slice."""
    for build in (two_branches, dense_chain, repeated_input, later_reader):
        v, order = _view(build())
        for a in find_aliases(v, order, concat=True):
            if a.kind == "concat":
                op = v.ops[a.node]
                slices = concat_slices(v, op)
                assert slices is not None and a.offset == slices[op.inputs.index(a.input)]
                assert a.offset + v.tensors[a.input].size <= v.tensors[a.output].size


def test_static_proof_rejects_a_member_outside_its_buffer(tmp_path):
    planned = _plan(two_branches(), tmp_path)
    from dataclasses import replace

    bad = replace(planned.plan, tensors=tuple(
        replace(t, group_offset=0) if t.name == "q" else t for t in planned.plan.tensors))
    findings = prove_plan(bad, planned.view)
    assert findings and findings[0].kind == "alias" and "one buffer" in findings[0].message


# ---------------------------------------------------------------- the onnx-wheel models


WHEEL = [p for p in LIGHT_MODELS if p.stem.removeprefix("light_") in ("inception_v1", "densenet121", "squeezenet")]


@pytest.mark.parametrize("path", WHEEL, ids=[p.stem for p in WHEEL])
def test_wheel_model_with_every_placement_verifies(path):
    """Every placement the rules allow (not only those that lower the bound), proven and executed."""
    model = onnx.load(path)
    opts = PlanOptions(solver="greedy", order="file")
    base = plan_loaded(model, path, opts)
    view, order = base.view, base.liveness.order
    every = alias_layout(view, order, alignment=opts.alignment, concat=True, choose=False)
    live = build_liveness(view, order, every, alignment=opts.alignment)
    planned = plan_liveness(model, path, base.shapes, view, live, opts)  # proven, or PlanInvalid
    placed = [t for t in planned.plan.tensors if t.group_offset]
    assert placed, "expected Concat inputs placed inside their outputs"
    assert len(placed) >= len([t for t in base.plan.tensors if t.group_offset])
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view,
                         options=VerifyOptions(device="cpu"))
    assert report.ok, report.first
