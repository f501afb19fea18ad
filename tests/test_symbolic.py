"""Polynomials, maxima and box bounds (onnxmem.core.symbolic): literal cases computed by hand."""

from __future__ import annotations

import random

import pytest

from onnxmem.core import dimexpr
from onnxmem.core.symbolic import (
    MaxPoly,
    Poly,
    box_corners,
    lower_bound,
    nonnegative_on,
    parse_expr,
    parse_poly,
)

B, S = Poly.var("b"), Poly.var("s")


def test_poly_arithmetic_and_text():
    p = (B + 1) * S * 2 - 3
    assert str(p) == "2*b*s + 2*s - 3"
    assert p.evaluate({"b": 4, "s": 5}) == 47
    assert (S ** 2).evaluate({"s": 7}) == 49
    assert p.content() == 1 and (B * S * 64 + 128).content() == 64
    assert Poly.const(0).constant() == 0 and (B - B).terms == ()


@pytest.mark.parametrize("text, value", [
    ("2*(b + 1)*s", 60), ("s**2 + b", 30), ("(s - 1)*4", 16), ("6 // 4 * s + Max(2, 3)", 8),
])
def test_parse_poly_reads_inference_text(text, value):
    p = parse_poly(text, {"b", "s"})
    assert p is not None and p.evaluate({"b": 5, "s": 5}) == value


@pytest.mark.parametrize("text", [
    "floor(s/2)", "s/2", "Max(1, s)", "Mod(s, 3)", "x + 1", "__import__('os')", "s ** s", "1/3",
])
def test_parse_poly_rejects_what_is_no_polynomial(text):
    assert parse_poly(text, {"b", "s"}) is None


def test_parse_poly_renames_safe_names():
    assert str(parse_poly("onnxmem_dim_1 + 1", {"onnxmem_dim_1": "past"})) == "past + 1"


@pytest.mark.parametrize("text", [
    "s/2", "s // 2", "s % 2", "s ** 2", "floor(s)", "min(s, 2)", "max(1, s) * max(2, s)",
    "__import__('os').system('true')", "s; 1", "max(1, s) - max(2, s)", "t",
])
def test_plan_expressions_keep_to_the_small_grammar(text):
    assert parse_expr(text, {"s"}) is None


def test_plan_expressions_distribute():
    e = parse_expr("max(64, 2*s) + 8*s + max(0, 1)", {"s"})
    assert e is not None
    assert sorted(map(str, e.terms)) == ["10*s + 1", "8*s + 65"]
    assert e.evaluate({"s": 100}) == 1001 and e.evaluate({"s": 1}) == 73
    assert parse_expr("3 * max(s, 2)", {"s"}).evaluate({"s": 1}) == 6


def test_lower_bound_is_the_monomial_minimum():
    box = {"b": (1, 4), "s": (2, 8)}
    assert lower_bound(B * S * 3 - S * 5 + 7, box) == 3 * 1 * 2 - 5 * 8 + 7
    assert lower_bound(B * S - S, box) == 2 - 8  # sound, not exact: the true minimum is 0
    assert nonnegative_on(B * S - S + 6, box) and not nonnegative_on(B * S - S, box)


def test_lower_bound_is_sound_at_random_points():
    rng = random.Random(3)
    for _ in range(200):
        p = Poly.const(rng.randint(-50, 50))
        for _ in range(3):
            p = p + Poly.const(rng.randint(-9, 9)) * (B ** rng.randint(0, 2)) * (S ** rng.randint(0, 2))
        box = {"b": (rng.randint(0, 3), rng.randint(3, 9)), "s": (rng.randint(0, 5), rng.randint(5, 20))}
        low = lower_bound(p, box)
        for _ in range(20):
            pt = {k: rng.randint(lo, hi) for k, (lo, hi) in box.items()}
            assert p.evaluate(pt) >= low


def test_pruned_drops_terms_bounded_on_the_box_only():
    e = MaxPoly.of([S * 10, S + 100, Poly.const(5)])
    assert sorted(map(str, e.pruned({"s": (0, 4)}).terms)) == ["s + 100"]
    assert sorted(map(str, e.pruned({"s": (20, 40)}).terms)) == ["10*s"]
    assert sorted(map(str, e.pruned({"s": (0, 40)}).terms)) == ["10*s", "s + 100"]


def test_corners():
    assert box_corners({"b": (1, 2), "s": (3, 3)}) == [{"b": 1, "s": 3}, {"b": 2, "s": 3}]


def test_dimexpr_still_evaluates_the_whole_grammar():
    assert dimexpr.evaluate("floor(s/2) + Max(1, b) + s % 4 + 2**3", {"s": 7, "b": 3}) == 17
