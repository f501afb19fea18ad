"""Range plans under a demanding user and hostile files: every point of the box, points off it,
the --dim flags of a point, pieces that overlap, a box that ends off its step, and the hint
given when a model does not hold at every size of a range."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.graph import build_view
from onnxmem.planning import PlanOptions, plan_loaded, plan_range
from onnxmem.plans import instantiate, range_from_dict
from onnxmem.proof import prove_plan, prove_range_plan
from onnxmem.shapes import infer_shapes

from .helpers import make_model, vi
from .test_rangeplan import attention_model


def _w(name: str, shape: list[int], seed: int) -> object:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def conv_model():
    """x[1, 3, H, W] -> Conv 3x3 stride 3 pad 1 -> Relu -> Conv 5x5 stride 2 pad 2 -> MaxPool 2 stride 2
    -> Relu: three floors of different divisors over each image side (total stride 12)."""
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c1"], kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2"], ["c2"], kernel_shape=[5, 5], strides=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Relu", ["p"], ["y"]),
    ]
    return make_model(nodes, [vi("x", [1, 3, "H", "W"])], [vi("y", [1, 8, None, None])],
                      [_w("W1", [4, 3, 3, 3], 0), _w("W2", [8, 4, 5, 5], 1)])


def _saved(tmp_path, model, name: str):
    import onnx

    path = tmp_path / name
    onnx.save(model, path)
    return path


def _plan_file(tmp_path, model_name: str, model, *dims: str):
    path = _saved(tmp_path, model, model_name)
    out = tmp_path / "range.json"
    res = CliRunner().invoke(main, ["plan", str(path), *[f for d in dims for f in ("--dim", d)], "-o", str(out)])
    assert res.exit_code == 0, res.output
    return path, out


def test_every_size_of_a_stride_3_padded_conv_is_proven_and_never_below_its_own_plans_bound(tmp_path):
    """Odd sizes, stride 3 and 2, padding: every H of the box instantiates to a plan the concrete
    proof accepts, whose arena is at least the lower bound of the plan made at that point alone
    and at most one alignment unit per buffer above that plan's arena."""
    model = conv_model()
    path = _saved(tmp_path, model, "conv.onnx")
    rp = plan_range(model, path, {"H": (12, 30)}, PlanOptions(dims={"W": 13}))
    assert rp.lattice == {"H": 12} and prove_range_plan(rp) == []
    for h in range(12, 31):
        point = {"H": h}
        concrete = instantiate(rp, point)
        view = build_view(model, infer_shapes(model, dims={"W": 13, **point}))
        assert prove_plan(concrete, view) == [], h
        alone = plan_loaded(model, path, PlanOptions(dims={"W": 13, **point})).plan
        assert alone.lower_bound <= concrete.arena_size <= alone.arena_size + 64 * len(concrete.tensors), h


def test_a_point_dim_given_twice_or_not_in_ascii_digits_is_refused(tmp_path):
    """instantiate and verify take one --dim per ranged dim: a second one once silently replaced the first."""
    path, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:3", "s=1:8")
    out = tmp_path / "p.json"
    for dims, message in ((["b=2", "b=3", "s=4"], "--dim 'b' is given twice"),
                          (["b=\u0662", "s=4"], "is not NAME=N with an integer N"),
                          (["b=1_0", "s=4"], "is not NAME=N with an integer N")):
        flags = [f for d in dims for f in ("--dim", d)]
        for args in (["instantiate", str(rj), *flags, "-o", str(out)],
                     ["verify", str(path), "--plan", str(rj), *flags, "--static-only"]):
            res = CliRunner().invoke(main, args)
            assert res.exit_code == 1 and message in res.output, (args, res.output)
            assert res.output.count("\n") == 1 and not out.exists(), res.output


def test_a_point_off_the_step_is_named_with_the_values_on_it(tmp_path):
    path, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:9:2", "s=1:4")
    out = tmp_path / "p.json"
    for args in (["instantiate", str(rj), "--dim", "b=4", "--dim", "s=2", "-o", str(out)],
                 ["verify", str(path), "--plan", str(rj), "--dim", "b=4", "--dim", "s=2"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and res.output.count("\n") == 1 and not out.exists(), res.output
        assert "--dim b=4 is off the plan's step: it holds b = 1 + 2*k only" in res.output, res.output
        assert "e.g. --dim b=3 or --dim b=5" in res.output, res.output
    res = CliRunner().invoke(main, ["verify", str(path), "--plan", str(rj), "--dim", "b=9", "--dim", "s=3"])
    assert res.exit_code == 0 and res.output.rstrip().endswith("verified"), res.output


def _overlapping(data: dict, how: str) -> dict:
    """``data`` with a piece that shares points with another: a copy of piece 0 (``same``), or a
    copy of the largest piece cut to its low corner (``inside``: one layout the plan already proves)."""
    bad = copy.deepcopy(data)
    pieces = bad["range"]["pieces"]
    if how == "same":
        pieces.append(copy.deepcopy(pieces[0]))
    else:
        big = max(pieces, key=lambda p: sum(hi - lo for lo, hi in p["box"].values()))
        extra = copy.deepcopy(big)
        extra["box"] = {k: [lo, lo] for k, (lo, _) in big["box"].items()}
        pieces.insert(0, extra)
    return bad


@pytest.mark.parametrize("how", ["same", "inside"])
def test_pieces_that_overlap_are_refused(tmp_path, how):
    """Each point is in one piece: two pieces holding one point (each layout proven on its own box)
    are refused by show, instantiate, verify and export, with the pieces and the point named."""
    path, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:3", "s=1:50")
    data = json.loads(rj.read_text())
    assert len(data["range"]["pieces"]) > 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_overlapping(data, how)))
    findings = prove_range_plan(range_from_dict(json.loads(bad.read_text())))
    assert [f.kind for f in findings][:1] == ["cover"] and "overlap" in str(findings[0]), findings[:1]
    out = tmp_path / "out"
    for args in (["show", str(bad)], ["instantiate", str(bad), "--dim", "b=2", "--dim", "s=5", "-o", str(out)],
                 ["verify", str(path), "--plan", str(bad), "--dim", "b=2", "--dim", "s=5", "--static-only"],
                 ["export", str(bad), "--format", "c", "-o", str(out)]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 3, (args, res.output)
        assert re.match(r"error: the range plan is wrong: pieces \d+ and \d+ overlap: both hold this point", res.output)
        assert res.output.count("\n") == 1 and not out.exists(), res.output
    assert prove_range_plan(range_from_dict(data)) == []


def test_a_box_ending_off_its_step_is_refused_on_read(tmp_path):
    """A plan's box ends on its step (onnxmem plan cuts --dim b=1:10:2 to 1:9): a box widened to 1:10
    by hand is refused where it is read, not shown with a corner no piece holds."""
    _, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:10:2", "s=1:4")
    data = json.loads(rj.read_text())
    assert data["range"]["box"]["b"] == [1, 9]
    data["range"]["box"]["b"] = [1, 10]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    res = CliRunner().invoke(main, ["show", str(bad)])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert "field 'range/box/b' ends off the dim's step 2" in res.output, res.output


@pytest.mark.parametrize(("field", "value", "said"), [
    ("ir_version", "12", "field 'range/model/ir_version': '12' is not of type 'integer'"),
    ("sha256", 7, "field 'range/model/sha256': 7 is not of type 'string'"),
    ("opset", {"ai.onnx": "17"}, "field 'range/model/opset/ai.onnx': '17' is not of type 'integer'"),
    ("path", None, "field 'range/model': 'path' is a required property"),
])
def test_a_range_plans_model_record_is_checked_as_a_point_plans_is(tmp_path, field, value, said):
    """The range schema's model record gave types to graph_sha256 and optimization only:
    instantiate wrote a point plan with an ir_version of text, which the point schema refuses
    (fuzz seed 990000, exports:990984). Now each field is refused where the range plan is read."""
    _, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:4", "s=1:4")
    data = json.loads(rj.read_text())
    if value is None:
        del data["range"]["model"][field]
    else:
        data["range"]["model"][field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / "point.json"
    res = CliRunner().invoke(main, ["instantiate", str(bad), "--dim", "b=2", "--dim", "s=3", "-o", str(out)])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert said in res.output, res.output
    assert not out.exists()


def test_the_step_named_for_a_model_that_does_not_hold_plans(tmp_path):
    """The kernel outgrows the image below H or W 7: the range is refused, and the ranges it names
    (from a residue class whose low corner was checked against the model) make a plan."""
    path = _saved(tmp_path, conv_model(), "conv.onnx")
    res = CliRunner().invoke(main, ["plan", str(path), "--dim", "H=5:40", "--dim", "W=7:11", "-o",
                                    str(tmp_path / "r.json")])
    assert res.exit_code == 1 and "the model does not hold at every size of the range" in res.output, res.output
    named = re.findall(r"--dim (\w+=\d+:\d+:\d+)", res.output)
    assert [d.split("=")[0] for d in named] == ["H", "W"], res.output
    res = CliRunner().invoke(main, ["plan", str(path), *[f for d in named for f in ("--dim", d)], "-o",
                                    str(tmp_path / "r.json")])
    assert res.exit_code == 0, (named, res.output)


def test_a_dim_name_written_for_c_never_reaches_the_header(tmp_path):
    """A ranged dim's name becomes a C parameter: one that is no identifier is refused on read."""
    _, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:3", "s=1:4")
    data = json.loads(rj.read_text())
    name = 'n); system("x'
    data["range"]["box"][name] = data["range"]["box"].pop("b")
    for p in data["range"]["pieces"]:
        p["box"][name] = p["box"].pop("b")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    header = tmp_path / "plan.h"
    res = CliRunner().invoke(main, ["export", str(bad), "--format", "c", "-o", str(header)])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and not header.exists(), res.output
    assert "is not a dim name" in res.output, res.output


def _many_maxima(data: dict, terms: int) -> dict:
    """``data`` with every buffer's offset the maximum of itself and ``terms`` negative constants: the
    same layout (the constants never win), but each pair of offsets costs ``terms``^2 bounds to prove."""
    bad = copy.deepcopy(data)
    extra = ", ".join(str(-k) for k in range(1, terms + 1))
    for p in bad["range"]["pieces"]:
        for b in p["buffers"]:
            b["offset"] = f"max({b['offset']}, {extra})"
    return bad


def test_offsets_that_are_maxima_of_many_polynomials_are_refused_past_the_bounds_budget(tmp_path):
    """A proof evaluates at most ``bounds`` polynomial bounds: a file of offsets with hundreds of terms
    each (a few hundred KB) once took a minute to show; it is refused with one line instead."""
    from onnxmem.core.errors import PlanError

    _, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:3", "s=1:50")
    data = json.loads(rj.read_text())
    assert prove_range_plan(range_from_dict(_many_maxima(data, 3))) == []  # the same layout, proven
    hostile = range_from_dict(_many_maxima(data, 300))
    with pytest.raises(PlanError, match=r"needs more than 20,000 bounds to prove .* re-plan the model"):
        prove_range_plan(hostile, bounds=20_000)


@pytest.mark.slow
def test_show_refuses_a_plan_past_the_default_bounds_budget(tmp_path):
    _, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:3", "s=1:50")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_many_maxima(json.loads(rj.read_text()), 500)))
    res = CliRunner().invoke(main, ["show", str(bad)])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert "needs more than 1,000,000 bounds to prove" in res.output, res.output


def slice_model(start: int, step: int = 1):
    """x[b, s, 4] -> Slice(axis 1, from ``start`` to the end, ``step``) -> Relu: inference writes
    ``s - start`` (``step`` 1), which is the model's size only where ``s >= start`` (below, the model's is 0)."""
    def i64(name: str, v: list[int]) -> object:
        return numpy_helper.from_array(np.array(v, dtype=np.int64), name)

    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "stp"], ["sl"]), helper.make_node("Relu", ["sl"], ["y"])]
    return make_model(nodes, [vi("x", ["b", "s", 4])], [vi("y", ["b", None, 4])],
                      [i64("st", [start]), i64("en", [2**62]), i64("ax", [1]), i64("stp", [step])])


def test_a_size_whose_dims_are_not_negative_is_not_refused_for_its_product(tmp_path):
    """``16*b*s - 32*b`` (a Slice from 2 over b, s with s >= 2) is never negative, as a product of dims
    that are not; its monomial bound alone is, which refused the plan onnxmem had just made."""
    model = slice_model(2)
    path = _saved(tmp_path, model, "slice.onnx")
    rp = plan_range(model, path, {"b": (1, 3), "s": (2, 9)}, PlanOptions())
    assert prove_range_plan(rp) == []
    for b in (1, 2, 3):
        for s in range(2, 10):
            point = {"b": b, "s": s}
            view = build_view(model, infer_shapes(model, dims=point))
            assert prove_plan(instantiate(rp, point), view) == [], point
    rj = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["plan", str(path), "--dim", "b=1:3", "--dim", "s=2:9", "-o", str(rj)])
    assert res.exit_code == 0 and "proof        ok" in res.output, res.output
    res = CliRunner().invoke(main, ["verify", str(path), "--plan", str(rj), "--dim", "b=3", "--dim", "s=2"])
    assert res.exit_code == 0 and res.output.rstrip().endswith("verified"), res.output


def test_a_dim_whose_formula_goes_negative_in_the_box_is_named_with_the_point(tmp_path):
    path = _saved(tmp_path, slice_model(2), "slice.onnx")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["plan", str(path), "--dim", "b=1:3", "--dim", "s=0:9", "-o", str(out)])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and not out.exists(), res.output
    assert ("shape inference gives tensor 'sl' the dim s - 2 on axis 1, negative at b=1, s=0, where the formula is "
            "not the model's size; give ranges on which it is not negative") in res.output, res.output
    # a step of 2 reads as a lattice (ceil((s - 1)/2) per residue), right at s = 0 too
    path = _saved(tmp_path, slice_model(1, 2), "slice2.onnx")
    res = CliRunner().invoke(main, ["plan", str(path), "--dim", "b=1:3", "--dim", "s=0:9", "-o", str(out)])
    assert res.exit_code == 0, res.output
    for s in ("0", "1", "9"):
        res = CliRunner().invoke(main, ["verify", str(path), "--plan", str(out), "--dim", "b=2", "--dim", f"s={s}"])
        assert res.exit_code == 0 and res.output.rstrip().endswith("verified"), res.output


def test_a_formula_that_is_not_the_models_size_at_a_corner_is_refused(tmp_path):
    """A Slice of the last 3 along s: inference writes 3, the model's size is s below 3. A plan over
    s = 1:12 once held 3 rows at s = 1 (a plan the concrete proof then refuses); it is refused, and
    from s = 3 on (one formula) it plans and verifies at every point."""
    model = slice_model(-3)
    path = _saved(tmp_path, model, "last3.onnx")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["plan", str(path), "--dim", "b=1:2", "--dim", "s=1:12", "-o", str(out)])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and not out.exists(), res.output
    assert ("the model's sizes are not one formula over the range: at b=1, s=1 tensor 'sl' is 1x1x4, not the "
            "1x3x4 the range's formulas give") in res.output, res.output
    rp = plan_range(model, path, {"b": (1, 2), "s": (3, 12)}, PlanOptions())
    for b in (1, 2):
        for s in range(3, 13):
            point = {"b": b, "s": s}
            assert prove_plan(instantiate(rp, point), build_view(model, infer_shapes(model, dims=point))) == [], point


def test_a_ranged_dim_the_model_fixes_is_refused_at_the_high_corner(tmp_path):
    """x[b, s] + z[b, 4]: inference writes the sum as [b, 4], the model's size at s = 1 and 4 only."""
    nodes = [helper.make_node("Add", ["x", "z"], ["y"])]
    path = _saved(tmp_path, make_model(nodes, [vi("x", ["b", "s"]), vi("z", ["b", 4])], [vi("y", ["b", "s"])]), "add.onnx")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["plan", str(path), "--dim", "b=1:3", "--dim", "s=1:9", "-o", str(out)])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and not out.exists(), res.output
    assert "the model's sizes are not one formula over the range: at b=3, s=9" in res.output, res.output
    assert "bind the dim with --dim NAME=N" in res.output, res.output


@pytest.mark.parametrize("shape, said", [
    ([2**63 - 1, "b", 4], "tensor 'x' has dim 9223372036854775807 on axis 0, above onnxmem's limit of 2^40"),
    ([2**40, "b", 2**30], "tensor 'x' of shape [1099511627776, b, 1073741824] would take more than 2^62 bytes"),
])
def test_a_size_past_the_limits_is_refused_in_one_line_as_at_one_point(tmp_path, shape, said):
    """A fixed dim past 2^62 made the range plan's reading of shapes raise its internal ``Reject``
    (a traceback; fuzz seed 1300000, ranges:1300006), and so did a size whose coefficient passes
    2^62: the range plan and fit now refuse both as a plan at one point does."""
    path = _saved(tmp_path, make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", shape)], [vi("y", shape)]),
                  "big.onnx")
    for args in (["plan", str(path), "--dim", "b=1:8"],
                 ["fit", str(path), "--dim", "b=1:8", "--memory", "1GiB", "--runtime", "plan"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
        assert res.output.startswith(f"error: {said}"), res.output


def test_a_range_plans_shape_whose_product_passes_the_limit_is_a_finding(tmp_path):
    """A range plan read from a file whose tensor's dims multiply past 2^62 (each dim within it) is
    refused by the proof, not with the traceback of the polynomial's overflow."""
    _, rj = _plan_file(tmp_path, "att.onnx", attention_model(), "b=1:4", "s=1:4")
    data = json.loads(rj.read_text())
    data["range"]["pieces"][0]["tensors"][0]["shape"] = ["1099511627776*b", "1099511627776*s"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / "point.json"
    res = CliRunner().invoke(main, ["instantiate", str(bad), "--dim", "b=2", "--dim", "s=3", "-o", str(out)])
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert "has size" in res.output and "but its shape and dtype give no size onnxmem can hold" in res.output, res.output
    assert not out.exists()
