"""Range plans: symbolic sizes, offsets proven on the whole box, instantiation, JSON, CLI, C header."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import PlanError, ShapeError
from onnxmem.core.symbolic import MaxPoly, Poly
from onnxmem.graph import build_view
from onnxmem.planning import PlanOptions, parse_dim_flags, plan_loaded, plan_range
from onnxmem.plans import (
    MemoryPlan,
    RangePiece,
    RangePlan,
    RangeTensor,
    instantiate,
    range_from_dict,
    range_to_dict,
    read_plan,
    render_plan,
    write_range_plan,
)
from onnxmem.plans.range import RANGE_SCHEMA_VERSION
from onnxmem.plans.schema import check_schema
from onnxmem.proof import prove_plan, prove_range_plan
from onnxmem.shapes import infer_shapes

from .helpers import make_model, vi

CC = shutil.which("cc")


def _w(name: str, shape: list[int], seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)


def attention_model() -> onnx.ModelProto:
    """x[b, s, 8] -> h = x W -> r = Relu(h) -> a = r r^T [b, s, s] -> y = a r [b, s, 16]."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["t"], name="tr", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["r", "t"], ["a"], name="scores"),
        helper.make_node("MatMul", ["a", "r"], ["y"], name="mix"),
    ]
    return make_model(nodes, [vi("x", ["b", "s", 8])], [vi("y", ["b", "s", 16])], [_w("W", [8, 16])])


def _save(model: onnx.ModelProto, tmp_path, name: str = "m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _attention_plan_file(tmp_path, box) -> tuple:
    """The attention model's range plan on ``box``, and the file it is written to."""
    model = attention_model()
    rp = plan_range(model, _save(model, tmp_path), box, PlanOptions())
    out = tmp_path / "r.json"
    write_range_plan(rp, out)
    return rp, out


def _prove_at(model, path, rp, point, **opts) -> tuple[list, int]:
    """Findings of the concrete proof for the range plan at ``point``, and a plan made at that point's arena."""
    concrete = instantiate(rp, point)
    view = build_view(model, infer_shapes(model, dims=point))
    findings = prove_plan(concrete, view)
    direct = plan_loaded(model, path, PlanOptions(dims=point, **opts))  # raises unless valid
    return findings, direct.plan.arena_size


def test_sizes_are_the_shapes_polynomials_and_the_plan_is_proven(tmp_path):
    model = attention_model()
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"b": (1, 4), "s": (1, 64)}, PlanOptions())
    sizes = {t.name: str(t.size) for t in rp.pieces[0].tensors}
    assert sizes["x"] == "32*b*s" and sizes["a"] == "4*b*s*s" and sizes["y"] == "64*b*s"
    assert prove_range_plan(rp) == []
    # at the corner (b=4, s=64), a plan made for that point needs the same arena, but for the
    # rounding room of the one buffer under the top (4*b*s*s + 60 reserved: 64 bytes at this point)
    corner = {"b": 4, "s": 64}
    findings, direct = _prove_at(model, path, rp, corner)
    assert findings == [] and rp.arena_at(corner) - direct == 64


def test_instantiated_plans_pass_the_concrete_proof_at_random_points(tmp_path):
    model = attention_model()
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"b": (1, 6), "s": (1, 100)}, PlanOptions())
    rng = random.Random(0)
    for _ in range(8):
        point = {"b": rng.randint(1, 6), "s": rng.randint(1, 100)}
        findings, direct = _prove_at(model, path, rp, point)
        assert findings == [], (point, findings[:1])
        assert rp.arena_at(point) >= instantiate(rp, point).lower_bound
        assert rp.arena_at(point) <= 1.10 * direct, point


def _random_graph(seed: int) -> onnx.ModelProto:
    """A random DAG over [b, s, c] tensors: Relu, Add, MatMul by a weight, Concat, attention-like products."""
    rng = random.Random(seed)
    tensors = [("x", 4)]
    nodes, inits = [], []
    for i in range(rng.randint(4, 12)):
        kind = rng.choice(["relu", "add", "proj", "concat", "attn"])
        name, c = rng.choice(tensors)
        out = f"t{i}"
        if kind == "relu":
            nodes.append(helper.make_node("Sigmoid" if rng.random() < 0.5 else "Relu", [name], [out]))
        elif kind == "add":
            same = [t for t in tensors if t[1] == c]
            nodes.append(helper.make_node("Add", [name, rng.choice(same)[0]], [out]))
        elif kind == "proj":
            c2 = rng.choice([2, 4, 8])
            inits.append(_w(f"W{i}", [c, c2], seed + i))
            nodes.append(helper.make_node("MatMul", [name, f"W{i}"], [out]))
            c = c2
        elif kind == "concat":
            other, c2 = rng.choice(tensors)
            nodes.append(helper.make_node("Concat", [name, other], [out], axis=2))
            c = c + c2
        else:
            nodes.append(helper.make_node("Transpose", [name], [f"{out}_t"], perm=[0, 2, 1]))
            nodes.append(helper.make_node("MatMul", [name, f"{out}_t"], [f"{out}_a"]))
            nodes.append(helper.make_node("MatMul", [f"{out}_a", name], [out]))
        tensors.append((out, c))
    outs = [tensors[-1]] + rng.sample(tensors[1:-1], min(1, len(tensors) - 2))
    return make_model(nodes, [vi("x", ["b", "s", 4])], [vi(n, ["b", "s", c]) for n, c in outs], inits)


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_random_points(tmp_path, seed):
    model = _random_graph(seed)
    path = _save(model, tmp_path)
    rng = random.Random(seed)
    box = {"b": (rng.randint(1, 2), rng.randint(2, 5)), "s": (rng.randint(0, 3), rng.randint(4, 40))}
    alignment = rng.choice([1, 16, 64])
    kinds = {"alignment": alignment, "inplace": seed % 3 != 2, "io": "external" if seed % 2 else "internal"}
    rp = plan_range(model, path, box, PlanOptions(**kinds))
    assert prove_range_plan(rp) == []
    for _ in range(4):
        point = {k: rng.randint(lo, hi) for k, (lo, hi) in box.items()}
        if point["s"] == 0:
            continue  # a plan for one shape needs every dim >= 1 (the range plan itself covers s=0)
        concrete = instantiate(rp, point)
        view = build_view(model, infer_shapes(model, dims=point))
        assert prove_plan(concrete, view) == [], (seed, point)
        plan_loaded(model, path, PlanOptions(dims=point, **kinds))  # valid as well


def _conflicting(piece):
    spans = {}
    for t in piece.tensors:
        s = spans.setdefault(t.group, [t.start, t.end])
        s[0], s[1] = min(s[0], t.start), max(s[1], t.end)
    ids = sorted(spans)
    for a in ids:
        for b in ids:
            if a < b and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]:
                yield a, b


def test_a_wrong_range_plan_is_rejected_with_a_colliding_point(tmp_path):
    model = attention_model()
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"b": (1, 4), "s": (1, 64)}, PlanOptions(), max_pieces=1)
    piece = rp.pieces[0]
    sizes = {t.group: t.size for t in piece.tensors}
    # two buffers live together, the second moved onto the first
    a, b = next((a, b) for a, b in _conflicting(piece) if sizes[a].terms and sizes[b].terms)
    bad = replace(rp, pieces=(replace(piece, offsets={**piece.offsets, b: piece.offsets[a]}),))
    findings = prove_range_plan(bad)
    assert findings and findings[0].kind == "overlap" and findings[0].point is not None
    point = findings[0].point
    # the point is a real collision: the concrete proof rejects the plan there too
    view = build_view(model, infer_shapes(model, dims=point))
    assert any(f.kind == "overlap" for f in prove_plan(instantiate(bad, point), view))


def _hand_plan(offset_b: str) -> RangePlan:
    """A hand-made plan: ``a`` (64*s bytes) at 0 and ``b`` (64 bytes) at ``offset_b``, both live in step 0."""
    from onnxmem.core.symbolic import parse_expr

    s_ = Poly.var("s")
    tensors = (
        RangeTensor("a", "float32", (s_, Poly.const(16)), s_ * 64, 0, 1, None, None, "input", "a"),
        RangeTensor("b", "float32", (Poly.const(16),), Poly.const(64), 0, 1, None, None, "input", "b"),
    )
    box = {"s": (1, 100)}
    piece = RangePiece(box, ("n",), ("Relu",), tensors,
                  {"a": MaxPoly.const(0), "b": parse_expr(offset_b, {"s"})},
                  {"a": s_ * 64, "b": Poly.const(64)}, parse_expr("max(64*s, 64 + " + offset_b + ")", {"s"}))
    return RangePlan({"path": "hand"}, box, {}, "internal", 64, True, "file", "greedy", 0, 0.0, (piece,))


def test_a_hand_made_plan_right_at_small_sizes_only_is_rejected_at_a_large_point():
    assert prove_range_plan(_hand_plan("64*s")) == []  # b right above a: proven for every s
    findings = prove_range_plan(_hand_plan("1024"))  # apart while 64*s <= 1024 only
    assert [f.kind for f in findings] == ["overlap"]
    point = findings[0].point
    assert point is not None and 64 * point["s"] > 1024
    assert "'a' and 'b' are live together in steps [0, 1)" in str(findings[0])
    concrete = instantiate(_hand_plan("1024"), point)
    assert concrete.tensor("a").offset + concrete.tensor("a").size > concrete.tensor("b").offset


def test_slot_too_small_and_uncovered_box_are_rejected(tmp_path):
    model = attention_model()
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"b": (1, 4), "s": (1, 64)}, PlanOptions(), max_pieces=1)
    piece = rp.pieces[0]
    g = next(t.group for t in piece.tensors if t.name == "a")
    small = replace(piece, slots={**piece.slots, g: Poly.var("s") * 4})
    assert any(f.kind == "slot" for f in prove_range_plan(replace(rp, pieces=(small,))))
    short = replace(piece, box={"b": (1, 4), "s": (1, 32)})
    found = prove_range_plan(replace(rp, pieces=(short,)))
    assert found[0].kind == "cover" and found[0].point["s"] == 33


def test_json_round_trip_and_hostile_text(tmp_path):
    rp, out = _attention_plan_file(tmp_path, {"b": (1, 4), "s": (1, 64)})
    back = read_plan(out, "range")
    assert range_to_dict(back) == range_to_dict(rp)
    data = json.loads(out.read_text())
    assert data["schema_version"] == RANGE_SCHEMA_VERSION and "range" in data
    data["range"]["pieces"][0]["buffers"][0]["offset"] = "__import__('os').system('touch pwned')"
    with pytest.raises(PlanError, match="not an expression of integers"):
        range_from_dict(data)
    assert not (tmp_path / "pwned").exists()
    data = json.loads(out.read_text())
    data["range"]["box"] = {f"d{i}": [1, 2] for i in range(40)}  # 2^40 corners for 'show'
    with pytest.raises(PlanError, match="ranges 40 dims; a range plan ranges at most"):
        range_from_dict(data)
    data = json.loads(out.read_text())
    data["range"]["plan_seconds"] = -1  # instantiated, it was a point plan its schema refuses
    with pytest.raises(PlanError, match="plan_seconds.*is below 0"):
        range_from_dict(data)
    data = json.loads(out.read_text())
    data["schema_version"] = 99
    with pytest.raises(PlanError, match="schema_version 99"):
        range_from_dict(data)
    with pytest.raises(PlanError, match="is a range plan; make the plan for one point"):
        read_plan(out, "point")


def test_one_reader_tells_the_kinds_apart_and_the_schema_holds_every_field(tmp_path):
    rp, out = _attention_plan_file(tmp_path, {"b": (1, 2), "s": (1, 8)})
    assert isinstance(read_plan(out), RangePlan) and isinstance(read_plan(out, "range"), RangePlan)
    point = tmp_path / "p.json"
    point.write_bytes(render_plan(instantiate(rp, {"b": 2, "s": 8})))
    assert isinstance(read_plan(point), MemoryPlan)
    with pytest.raises(PlanError, match="is a plan for one shape, not a range plan; make one with"):
        read_plan(point, "range")
    with pytest.raises(PlanError, match="is a range plan, not a program plan"):
        read_plan(out, "program")
    data = json.loads(out.read_text())
    check_schema(data, "range", "r")  # what the writer writes follows the shipped schema
    data["range"]["pieces"][0]["tensors"][0]["shell"] = "rm -rf /"
    with pytest.raises(PlanError, match="Additional properties are not allowed"):
        range_from_dict(data)
    data = json.loads(out.read_text())
    data["range"]["pieces"][0]["buffers"][0]["slot"] = 64
    with pytest.raises(PlanError, match="slot"):
        range_from_dict(data)


def test_a_short_text_that_expands_past_the_term_bound_is_refused():
    from onnxmem.core.symbolic import MAX_PARSED_TERMS, parse_expr, parse_poly

    names = [f"d{i}" for i in range(40)]
    product = "*".join(f"({names[2 * i]}+{names[2 * i + 1]})" for i in range(20))  # 2^20 monomials
    maxima = "+".join(f"max({names[2 * i]},{names[2 * i + 1]})" for i in range(20))  # 2^20 polynomials
    assert parse_expr(product, names) is None and parse_poly(product, names) is None
    assert parse_expr(maxima, names) is None
    fits = "*".join(f"({names[2 * i]}+{names[2 * i + 1]})" for i in range(10))
    assert len(parse_poly(fits, names).terms) == 2**10 <= MAX_PARSED_TERMS


def test_dim_flags():
    assert parse_dim_flags(["b=1:8", "h=4"]) == ({"h": 4}, {"b": (1, 8)}, {})
    assert parse_dim_flags(["H=160:640:32", "b=1:8:1"]) == ({}, {"H": (160, 640), "b": (1, 8)}, {"H": 32})
    for bad, rule in [("b=8:1", "0 <= LO <= HI"), ("b=x:2", "integers"), ("max=1:2", "identifier"),
                      ("b=1", None)]:
        if rule is None:
            continue
        with pytest.raises(ShapeError, match=rule):
            parse_dim_flags([bad])


def kv_model() -> onnx.ModelProto:
    """A cache: past[p, 4] ++ x[1, 4] -> present[p + 1, 4]; y = Relu(present) Wᵀ-free."""
    nodes = [helper.make_node("Concat", ["past", "x"], ["present"], axis=0),
             helper.make_node("Sigmoid", ["present"], ["g"]),
             helper.make_node("ReduceSum", ["g"], ["y"], keepdims=1)]
    m = make_model(nodes, [vi("past", ["p", 4]), vi("x", [1, 4])],
                   [vi("present", ["p + 1", 4]), vi("y", [1, 1])], opset=11)
    return m


def rotary_step_model() -> onnx.ModelProto:
    """One decoding step's mask and rotary angles, as a Llama export computes them from the cache:
    mask = ones[1, p + 1] (Expand to a shape computed from Shape(past)); angles = p * inv_freq
    [1, 2], and emb = Concat(angles, angles) on the last axis [1, 4], added to the new token."""
    inits = [numpy_helper.from_array(np.array([1], np.int64), "one_i"),
             numpy_helper.from_array(np.array([1.0], np.float32), "one_f"),
             numpy_helper.from_array(np.array([1.0, 0.5], np.float32), "inv_freq")]
    nodes = [helper.make_node("Shape", ["past"], ["sh"], start=0, end=1),
             helper.make_node("Add", ["sh", "one_i"], ["total"]),
             helper.make_node("Concat", ["one_i", "total"], ["mask_shape"], axis=0),
             helper.make_node("Expand", ["one_f", "mask_shape"], ["mask"]),
             helper.make_node("Cast", ["sh"], ["pos"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["pos", "one_i"], ["pos2"]),
             helper.make_node("Mul", ["pos2", "inv_freq"], ["angles"]),
             helper.make_node("Concat", ["angles", "angles"], ["emb"], axis=-1),
             helper.make_node("Add", ["x", "emb"], ["y"]),
             helper.make_node("ReduceSum", ["mask"], ["m"], keepdims=1)]
    return make_model(nodes, [vi("past", ["p", 4]), vi("x", [1, 4])],
                      [vi("y", [1, 4]), vi("m", [1, 1])], inits, opset=17)


def test_rotary_angles_concatenated_on_the_last_axis_do_not_stop_symbolic_inference(tmp_path):
    """onnxruntime's symbolic inference carries the angles' values (p * inv_freq) and asserts
    that a Concat of known values is on axis 0; the mask's size, which only that engine
    shapes, is still found as a polynomial, and the plan holds on the whole cache range."""
    model = rotary_step_model()
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"p": (0, 64)}, PlanOptions())
    sizes = {t.name: str(t.size) for t in rp.pieces[0].tensors}
    assert sizes["mask"] == "4*p + 4" and sizes["emb"] == "16"
    assert prove_range_plan(rp) == []
    for p in (0, 64):
        findings, _ = _prove_at(model, path, rp, {"p": p})
        assert findings == []


def test_cli_plan_show_instantiate_verify_export(tmp_path):
    model = attention_model()
    path = _save(model, tmp_path)
    runner = CliRunner()
    rj = tmp_path / "r.json"
    res = runner.invoke(main, ["plan", str(path), "--dim", "b=1:4", "--dim", "s=1:64", "-o", str(rj)])
    assert res.exit_code == 0, res.output
    assert "proof        ok" in res.output and "b=4 s=64" in res.output
    res = runner.invoke(main, ["show", str(rj)])
    assert res.exit_code == 0 and "arena at the corners" in res.output
    p7 = tmp_path / "p7.json"
    res = runner.invoke(main, ["instantiate", str(rj), "--dim", "b=3", "--dim", "s=7", "-o", str(p7)])
    assert res.exit_code == 0, res.output
    assert read_plan(p7).dims == {"b": 3, "s": 7}
    res = runner.invoke(main, ["verify", str(path), "--plan", str(p7), "--dim", "b=3", "--dim", "s=7"])
    assert res.exit_code == 0 and "verified" in res.output, res.output
    res = runner.invoke(main, ["verify", str(path), "--plan", str(rj), "--dim", "b=4", "--dim", "s=64"])
    assert res.exit_code == 0 and "executed" in res.output and res.output.rstrip().endswith("verified"), res.output
    res = runner.invoke(main, ["instantiate", str(rj), "--dim", "b=9", "--dim", "s=7", "-o", str(p7)])
    assert res.exit_code == 1 and "outside the plan's range 1:4" in res.output
    res = runner.invoke(main, ["instantiate", str(rj), "--dim", "b=3", "-o", str(tmp_path / "q.json")])
    assert res.exit_code == 1 and "--dim s=N" in res.output and not (tmp_path / "q.json").exists()


def test_cli_verifies_a_cache_of_length_zero(tmp_path):
    model = kv_model()
    path = _save(model, tmp_path)
    runner = CliRunner()
    rj = tmp_path / "r.json"
    res = runner.invoke(main, ["plan", str(path), "--dim", "p=0:16", "-o", str(rj)])
    assert res.exit_code == 0, res.output
    sizes = {t.name: str(t.size) for t in read_plan(rj, "range").pieces[0].tensors}
    assert sizes["present"] == "16*p + 16" and sizes["past"] == "16*p"
    for p in ("0", "16"):
        res = runner.invoke(main, ["verify", str(path), "--plan", str(rj), "--dim", f"p={p}"])
        assert res.exit_code == 0 and res.output.rstrip().endswith("verified"), res.output


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_header_matches_instantiation(tmp_path):
    rp, rj = _attention_plan_file(tmp_path, {"b": (1, 4), "s": (1, 200)})
    header = tmp_path / "plan.h"
    res = CliRunner().invoke(main, ["export", str(rj), "--format", "c", "-o", str(header)])
    assert res.exit_code == 0, res.output
    points = [{"b": 1, "s": 1}, {"b": 4, "s": 200}, {"b": 2, "s": 37}, {"b": 3, "s": 150}, {"b": 5, "s": 1}]
    calls = []
    for pt in points:
        calls.append(f'printf("%lld\\n", onnxmem_arena_size({pt["b"]}, {pt["s"]}));')
        for name in ("x", "a", "y"):
            calls.append(f'printf("%lld %lld\\n", onnxmem_offset_{name}({pt["b"]}, {pt["s"]}), '
                         f'onnxmem_size_{name}({pt["b"]}, {pt["s"]}));')
    src = tmp_path / "main.c"
    src.write_text('#include <stdio.h>\n#include "plan.h"\nint main(void) {\n' + "\n".join(calls)
                   + "\nreturn 0;\n}\n")
    exe = tmp_path / "main"
    cc = subprocess.run([CC, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-o", str(exe), str(src)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    want = []
    for pt in points:
        if pt["b"] > 4:
            want += ["-1"] + ["-1 -1"] * 3
            continue
        concrete = instantiate(rp, pt)
        want.append(str(concrete.arena_size))
        for name in ("x", "a", "y"):
            t = concrete.tensor(name)
            want.append(f"{t.offset} {t.size}")
    assert got[: len(want)] == want


def test_user_mistakes_are_one_line_errors(tmp_path):
    model = attention_model()
    path = _save(model, tmp_path)
    runner = CliRunner()
    cases = [
        (["--dim", "b=1:4", "--dim", "q=1:4"], "--dim 'q' names no dim of the model"),
        (["--dim", "b=1:4"], "dims of the graph inputs that are neither bound nor ranged: s ('x'); bind each to "
                             "one value (--dim s=N) or range it (--dim s=LO:HI)"),  # s left open
        (["--dim", "b=1:4", "--dim", "s=2", "--input-shape", "x=1x2x8"], "leave out --input-shape"),
        (["--dim", "b=4:1", "--dim", "s=2"], "0 <= LO <= HI"),
        # values hold at one shape: they were read by no range plan, which planned as if none were given
        (["--dim", "b=1:4", "--dim", "s=2", "--inputs", str(tmp_path / "v.npz")],
         "--inputs gives values for one shape: leave it out, or plan that shape on its own"),
    ]
    np.savez(tmp_path / "v.npz", x=np.ones((1, 2, 8), np.float32))
    for flags, message in cases:
        res = runner.invoke(main, ["plan", str(path), *flags, "-o", str(tmp_path / "r.json")])
        assert res.exit_code == 1, res.output
        assert message in res.output and "Traceback" not in res.output, res.output
        assert not (tmp_path / "r.json").exists()
    res = runner.invoke(main, ["plan", str(path), "--dim", "b=1:4", "--dim", "s=2", "--annotate",
                               str(tmp_path / "a.onnx")])
    assert res.exit_code == 2 and "instantiate the range plan" in res.output


def test_a_size_no_polynomial_is_told_apart_from_a_dim_left_open(tmp_path):
    """The error names the graph inputs' dims that are neither bound nor ranged where there are
    such dims (each with the inputs that declare it), and else the sizes that are no polynomials."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=1)]
    model = make_model(nodes, [vi("x", ["b", 4])], [vi("y", [2, None])])
    with pytest.raises(ShapeError, match=r"sizes of 2 tensors are not polynomials in the ranged dims.*'nz', 'y'"):
        plan_range(model, _save(model, tmp_path), {"b": (1, 8)}, PlanOptions())
    two = make_model([helper.make_node("Add", ["x", "z"], ["y"])], [vi("x", ["b", "s", 4]), vi("z", ["b", "s", 4])],
                     [vi("y", ["b", "s", 4])])
    with pytest.raises(ShapeError, match=r"neither bound nor ranged: s \('x', 'z'\); bind each .*--dim s=N"):
        plan_range(two, _save(two, tmp_path, "two.onnx"), {"b": (1, 8)}, PlanOptions())
    assert plan_range(two, _save(two, tmp_path, "two.onnx"), {"b": (1, 8), "s": (1, 4)}, PlanOptions()).pieces


def test_a_strided_size_is_planned_per_residue_and_each_point_matches_the_model(tmp_path):
    """MaxPool with stride 2 over a ranged length: floor((s - 2) / 2) + 1 elements is no polynomial in s,
    but one in s_q on each residue class s = 2*s_q + r."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2], strides=[2])]
    model = make_model(nodes, [vi("x", [1, 4, "s"])], [vi("p", [1, 4, None])])
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"s": (2, 64)}, PlanOptions())
    assert rp.lattice == {"s": 2} and {p.lattice["s"] for p in rp.pieces} == {(2, 0), (2, 1)}
    assert prove_range_plan(rp) == []
    for s in range(2, 65):
        findings, _ = _prove_at(model, path, rp, {"s": s})
        assert findings == [] and instantiate(rp, {"s": s}).tensor("p").shape == (1, 4, s // 2)


def test_batch_one_gets_its_own_piece_with_concat_slices(tmp_path):
    """A channel Concat's inputs fit in its output's slices at batch 1 only: that point becomes its own piece."""
    nodes = [helper.make_node("Relu", ["x"], ["p"]), helper.make_node("Sigmoid", ["x"], ["q"]),
             helper.make_node("Concat", ["p", "q"], ["c"], axis=1), helper.make_node("Tanh", ["c"], ["y"])]
    model = make_model(nodes, [vi("x", ["b", 4, 8, 8])], [vi("y", ["b", 8, 8, 8])])
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"b": (1, 6)}, PlanOptions(io="external"))
    assert [p.box for p in rp.pieces] == [{"b": (1, 1)}, {"b": (2, 6)}]
    assert any(t.group_offset == Poly.const(1024) for t in rp.pieces[0].tensors)  # q in the second half of c
    assert prove_range_plan(rp) == []
    for b in (1, 2, 6):
        findings, direct = _prove_at(model, path, rp, {"b": b}, io="external")
        assert findings == [] and rp.arena_at({"b": b}) == direct
    back = range_from_dict(json.loads(json.dumps(range_to_dict(rp))))
    assert back.pieces[0].tensors == rp.pieces[0].tensors


def test_an_arena_past_2_62_is_refused_at_instantiation():
    plan = _hand_plan("1000000000000000*s*s")  # every coefficient in bounds, the value at s=100 not
    assert prove_range_plan(plan) == []  # apart, but far
    assert instantiate(plan, {"s": 3}).arena_size == 9 * 10**15 + 64
    with pytest.raises(PlanError, match="not below 2\\^62"):
        instantiate(plan, {"s": 100})


def folded_model() -> onnx.ModelProto:
    """x[b, 8] -> y = x Cast(Transpose(W)) [b, 16]: the weight chain folds into one weight."""
    nodes = [
        helper.make_node("Transpose", ["W"], ["wt"], name="tw", perm=[1, 0]),
        helper.make_node("Cast", ["wt"], ["wc"], name="cw", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "wc"], ["y"], name="mm"),
    ]
    return make_model(nodes, [vi("x", ["b", 8])], [vi("y", ["b", 16])], [_w("W", [16, 8])])


@pytest.mark.parametrize("fold", ["on", "off"])
def test_range_plans_keep_their_folding_at_every_point(tmp_path, fold):
    """A range plan made with --fold on keeps the folded weights out of every point's plan, and
    its points verify with that folding (they once were judged with folding off)."""
    path = _save(folded_model(), tmp_path)
    runner = CliRunner()
    rj = tmp_path / "r.json"
    res = runner.invoke(main, ["plan", str(path), "--dim", "b=1:8", "--fold", fold, "-o", str(rj)])
    assert res.exit_code == 0, res.output
    names = {t.name for t in read_plan(rj, "range").pieces[0].tensors}
    assert ({"wt", "wc"} & names) == (set() if fold == "on" else {"wt", "wc"})
    # at b=8 with folding on: x (8*8*4 = 256 B) and y (8*16*4 = 512 B), both live at mm
    assert (read_plan(rj, "range").arena_at({"b": 8}) == 768) == (fold == "on")
    res = runner.invoke(main, ["verify", str(path), "--plan", str(rj), "--dim", "b=5"])
    assert res.exit_code == 0 and res.output.rstrip().endswith("verified"), res.output


def _range_plan_file(tmp_path):
    """A range plan of x[n, 16] -> Relu x3 over n = 1..4, planned with --inplace off (four buffers)."""
    nodes = [helper.make_node("Relu", ["x"], ["t0"]), helper.make_node("Relu", ["t0"], ["t1"]),
             helper.make_node("Relu", ["t1"], ["y"])]
    path = _save(make_model(nodes, [vi("x", ["n", 16])], [vi("y", ["n", 16])]), tmp_path)
    rj = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["plan", str(path), "--dim", "n=1:4", "--inplace", "off", "-o", str(rj)])
    assert res.exit_code == 0, res.output
    return path, rj, json.loads(rj.read_text())


@pytest.mark.parametrize("command", ["export", "instantiate"])
def test_a_range_plan_with_overlapping_offsets_is_not_written(tmp_path, command):
    path, rj, data = _range_plan_file(tmp_path)
    for b in data["range"]["pieces"][0]["buffers"]:
        b["offset"] = "0"  # every buffer at one offset: the live ones meet
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / "out"
    args = (["export", str(bad), "--format", "c", "-o", str(out)] if command == "export"
            else ["instantiate", str(bad), "--dim", "n=2", "-o", str(out)])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 3, res.output
    assert res.output.startswith("error: the range plan is wrong") and res.output.count("\n") == 1, res.output
    assert not out.exists()


@pytest.mark.parametrize("edit", ["rename", "add", "group"])
def test_a_range_plan_naming_an_unknown_dim_or_buffer_is_refused_on_read(tmp_path, edit):
    path, rj, data = _range_plan_file(tmp_path)
    piece = data["range"]["pieces"][0]
    if edit == "rename":
        piece["box"]["q"] = piece["box"].pop("n")
    elif edit == "add":
        piece["box"]["q"] = [1, 2]
    else:
        piece["tensors"][0]["group"] = "nowhere"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / "out"
    for args in (["show", str(bad)], ["instantiate", str(bad), "--dim", "n=2", "-o", str(out)],
                 ["verify", str(path), "--plan", str(bad), "--dim", "n=2", "--static-only"],
                 ["export", str(bad), "--format", "c", "-o", str(out)]):
        res = CliRunner().invoke(main, args, catch_exceptions=False)
        assert res.exit_code == 1, (args, res.output)
        assert res.output.startswith("error: plan file") and res.output.count("\n") == 1, res.output
        assert ("a dim the plan does not range" in res.output if edit != "group"
                else "names no buffer" in res.output), res.output
        assert not out.exists()


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_header_dim_parameters_never_hold_a_double_underscore(tmp_path):
    """Dims named ``_b`` and ``s__t`` (names a model may declare): their C parameters hold no ``__``,
    which C++ reserves, stay distinct from a dim named ``b``, and the header computes what the
    plan instantiates, compiled as C99 and as C++."""
    model = attention_model()
    for v in (*model.graph.input, *model.graph.output):
        dims = v.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "_b", "s__t"
    path = _save(model, tmp_path)
    rp = plan_range(model, path, {"_b": (1, 3), "s__t": (1, 40)}, PlanOptions())
    rj = tmp_path / "r.json"
    write_range_plan(rp, rj)
    header = tmp_path / "plan.h"
    res = CliRunner().invoke(main, ["export", str(rj), "--format", "c", "-o", str(header)])
    assert res.exit_code == 0, res.output
    text = header.read_text()
    assert "long long d_b, long long d_s_t" in text, text[:600]
    idents = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    assert not [i for i in idents if "__" in i or re.match(r"_[A-Z]", i)]
    points = [(1, 1), (3, 40), (2, 17)]
    calls = [f'printf("%lld\\n", onnxmem_arena_size({b}, {s}));' for b, s in points]
    src = tmp_path / "main.c"
    src.write_text('#include <stdio.h>\n#include "plan.h"\nint main(void) {\n' + "\n".join(calls) + "\nreturn 0;\n}\n")
    want = [str(instantiate(rp, {"_b": b, "s__t": s}).arena_size) for b, s in points]
    for compiler, std in ((CC, "-std=c99"), (shutil.which("c++") or shutil.which("g++"), "-std=c++11")):
        if compiler is None:
            continue
        exe = tmp_path / f"main-{std}"
        lang = ["-x", "c++"] if "c++" in std else []
        cc = subprocess.run([compiler, *lang, std, "-Wall", "-Wextra", "-pedantic", "-Werror", "-o", str(exe), str(src)],
                            capture_output=True, text=True)
        assert cc.returncode == 0, cc.stderr
        got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
        assert got == want
