"""Polynomials in the dims, maxima of them, and bounds over a box of dims.

A range plan (:mod:`onnxmem.plans.range`) gives every tensor a size that is a
polynomial in the model's dims (``3072*batch*sequence``) and every offset a
maximum of such polynomials (``max(0, 3072*batch*sequence + 64)``). This
module is their arithmetic, their text form and the one bound the static
proof of a range plan uses.

* :class:`Poly`: integer coefficients over monomials of dim names; ``+``,
  ``-``, ``*``, ``**`` and exact evaluation at a point.
* :class:`MaxPoly`: the maximum of one or more polynomials; ``+`` distributes
  (``max(a, b) + c = max(a + c, b + c)``), ``max`` is the union of terms.
* A :data:`Box` maps each dim to an inclusive ``(lo, hi)`` with ``lo >= 0``.
  :func:`lower_bound` is the least value a polynomial can take on a box, bounded
  monomial by monomial: every monomial is non-decreasing in each dim when the
  dims are non-negative, so ``c * m`` is smallest at the low corner for
  ``c > 0`` and at the high corner for ``c < 0``. The sum of those minima is a
  sound lower bound (exact when every coefficient has one sign), and it is
  superadditive: ``lower_bound(p + q) >= lower_bound(p) + lower_bound(q)``, so
  "``q - p`` is non-negative on the box" composes along chains.

Text uses :mod:`onnxmem.core.dimexpr`'s grammar through two algebras: sizes from
shape inference (:func:`parse_poly`: the whole grammar, constants folded,
anything not a polynomial rejected) and expressions from a plan file
(:func:`parse_expr`: integers, names, ``+``, ``-``, ``*``, ``max`` and
parentheses only). Nothing is evaluated by Python; coefficients and values
stay below 2^62.

>>> p = parse_poly("2*(b + 1)*s", {"b", "s"})
>>> str(p), p.evaluate({"b": 3, "s": 5})
('2*b*s + 2*s', 40)
>>> e = parse_expr("max(64, 2*s) + 8", {"s"})
>>> str(e), e.evaluate({"s": 100}), lower_bound(p, {"b": (1, 4), "s": (1, 8)})
('max(2*s + 8, 72)', 208, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Mapping, Sequence, Union

from onnxmem.core import dimexpr
from onnxmem.core.dimexpr import Reject

__all__ = [
    "Box",
    "MaxPoly",
    "Poly",
    "box_corners",
    "lower_bound",
    "monomial_value",
    "nonnegative_on",
    "parse_expr",
    "parse_poly",
]

Mono = tuple[tuple[str, int], ...]  # ((name, exponent), ...) sorted by name; () is the constant
Box = Mapping[str, tuple[int, int]]
Number = Union[int, "Poly"]

LIMIT = dimexpr.LIMIT
#: most monomials a parsed polynomial, and most polynomials a parsed maximum, may hold
#: (products of sums grow exponentially in the text's length; plans onnxmem writes stay far below)
MAX_PARSED_TERMS = 1024


def _check(c: int) -> int:
    if abs(c) > LIMIT:
        raise Reject
    return c


def _mono_mul(a: Mono, b: Mono) -> Mono:
    exps = dict(a)
    for name, e in b:
        exps[name] = exps.get(name, 0) + e
    return tuple(sorted(exps.items()))


def monomial_value(m: Mono, point: Mapping[str, int]) -> int:
    """The value of monomial ``m`` (``((name, exponent), ...)``) at ``point``."""
    v = 1
    for name, e in m:
        v *= int(point[name]) ** e
    return v


@dataclass(frozen=True, slots=True)
class Poly:
    """A polynomial with integer coefficients: ``terms`` sorted, no zero coefficient."""

    terms: tuple[tuple[Mono, int], ...] = ()

    @staticmethod
    def const(c: int) -> Poly:
        return Poly((((), _check(int(c))),) if c else ())

    @staticmethod
    def var(name: str) -> Poly:
        return Poly(((((name, 1),), 1),))

    @staticmethod
    def _of(coeffs: Mapping[Mono, int]) -> Poly:
        return Poly(tuple(sorted((m, _check(c)) for m, c in coeffs.items() if c)))

    def _lift(self, other: Number) -> Poly:
        return other if isinstance(other, Poly) else Poly.const(other)

    def __add__(self, other: Number) -> Poly:
        out = dict(self.terms)
        for m, c in self._lift(other).terms:
            out[m] = out.get(m, 0) + c
        return Poly._of(out)

    __radd__ = __add__

    def __neg__(self) -> Poly:
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Number) -> Poly:
        return self + (-self._lift(other))

    def __mul__(self, other: Number) -> Poly:
        out: dict[Mono, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in self._lift(other).terms:
                m = _mono_mul(m1, m2)
                out[m] = out.get(m, 0) + c1 * c2
        return Poly._of(out)

    __rmul__ = __mul__

    def __pow__(self, n: int) -> Poly:
        out = Poly.const(1)
        for _ in range(int(n)):
            out = out * self
        return out

    def constant(self) -> int | None:
        """The value when the polynomial names no dim, else ``None``."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def names(self) -> set[str]:
        return {name for m, _ in self.terms for name, _ in m}

    def evaluate(self, point: Mapping[str, int]) -> int:
        """The exact value at ``point`` (which binds every name)."""
        return sum(c * monomial_value(m, point) for m, c in self.terms)

    def content(self) -> int:
        """The gcd of the coefficients: every value at an integer point is a multiple of it."""
        g = 0
        for _, c in self.terms:
            g = math.gcd(g, c)
        return g

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts: list[str] = []
        for m, c in sorted(self.terms, key=lambda t: (-sum(e for _, e in t[0]), t[0])):
            factors = [n for n, e in m for _ in range(e)]
            body = "*".join(([str(abs(c))] if abs(c) != 1 or not factors else []) + factors)
            if not parts:
                parts.append(body if c > 0 else f"-{body}")
            else:
                parts.append(f"{'+' if c > 0 else '-'} {body}")
        return " ".join(parts)


def lower_bound(p: Poly, box: Box) -> int:
    """A lower bound of ``p`` on ``box`` (exact when the coefficients share a sign)."""
    lo = {k: v[0] for k, v in box.items()}
    hi = {k: v[1] for k, v in box.items()}
    return sum(c * monomial_value(m, lo if c > 0 else hi) for m, c in p.terms)


def upper_bound(p: Poly, box: Box) -> int:
    """An upper bound of ``p`` on ``box``: ``-lower_bound(-p)``."""
    return -lower_bound(-p, box)


def nonnegative_on(p: Poly, box: Box) -> bool:
    """``True`` when ``p >= 0`` is proven at every point of ``box`` (a sufficient test)."""
    return lower_bound(p, box) >= 0


def box_corners(box: Box) -> list[dict[str, int]]:
    """Every corner of ``box``, low corner first, high corner last."""
    corners: list[dict[str, int]] = [{}]
    for name in sorted(box):
        lo, hi = box[name]
        corners = [{**c, name: v} for v in ((lo,) if lo == hi else (lo, hi)) for c in corners]
    return corners


@dataclass(frozen=True, slots=True)
class MaxPoly:
    """``max`` of ``terms`` (one or more polynomials, deduplicated and sorted)."""

    terms: tuple[Poly, ...]

    @staticmethod
    def of(polys: Iterable[Poly]) -> MaxPoly:
        ts = tuple(sorted(set(polys), key=lambda p: p.terms))
        if not ts:
            raise ValueError("max of nothing")
        return MaxPoly(ts)

    @staticmethod
    def const(c: int) -> MaxPoly:
        return MaxPoly((Poly.const(c),))

    def single(self) -> Poly | None:
        return self.terms[0] if len(self.terms) == 1 else None

    def __add__(self, other: MaxPoly | Poly | int) -> MaxPoly:
        if isinstance(other, MaxPoly):
            return MaxPoly.of(a + b for a in self.terms for b in other.terms)
        return MaxPoly.of(a + other for a in self.terms)

    def __sub__(self, other: MaxPoly) -> MaxPoly:
        q = other.single()
        if q is None:
            raise Reject  # max(a) - max(b) is no maximum of polynomials
        return MaxPoly.of(a - q for a in self.terms)

    def __neg__(self) -> MaxPoly:
        q = self.single()
        if q is None:
            raise Reject
        return MaxPoly((-q,))

    def __mul__(self, other: MaxPoly) -> MaxPoly:
        a, b = self.single(), other.single()
        if a is not None and b is not None:
            return MaxPoly((a * b,))
        for scale, rest in ((a, other), (b, self)):
            c = scale.constant() if scale is not None else None
            if c is not None and c >= 0:
                return MaxPoly.of(t * c for t in rest.terms)
        raise Reject  # a product of maxima is kept out of the grammar's reading

    def __pow__(self, n: int) -> MaxPoly:
        raise Reject

    def evaluate(self, point: Mapping[str, int]) -> int:
        return max(t.evaluate(point) for t in self.terms)

    def names(self) -> set[str]:
        return set().union(*(t.names() for t in self.terms))

    def maximum(self, other: MaxPoly) -> MaxPoly:
        return MaxPoly.of(self.terms + other.terms)

    def pruned(self, box: Box) -> MaxPoly:
        """The same maximum on ``box`` without terms another term bounds there."""
        keep: list[Poly] = []
        for p in sorted(self.terms, key=lambda t: -upper_bound(t, box)):
            if any(nonnegative_on(q - p, box) for q in keep):
                continue
            keep = [q for q in keep if not nonnegative_on(p - q, box)] + [p]
        return MaxPoly.of(keep)

    def __str__(self) -> str:
        if len(self.terms) == 1:
            return str(self.terms[0])
        return "max(" + ", ".join(map(str, self.terms)) + ")"


def _integer(value: Fraction) -> int:
    """``value`` as an integer; :class:`Reject` for a fraction (polynomials have integer coefficients)."""
    if value.denominator != 1:
        raise Reject
    return int(value)


@dataclass(frozen=True, slots=True)
class _Ratio:
    """``num / den`` (``den > 0``): the values :class:`_PolyAlgebra` computes in, so that
    ``floor((H - 1)/2)`` can be read where it is a polynomial."""

    num: Poly
    den: int = 1

    @staticmethod
    def of(num: Poly, den: int) -> _Ratio:
        if den < 0:
            num, den = -num, -den
        g = math.gcd(num.content(), den) or den
        return _Ratio(Poly._of({m: c // g for m, c in num.terms}), _check(den // g))

    def _lift(self, other: object) -> _Ratio:
        if isinstance(other, _Ratio):
            return other
        raise Reject

    def __add__(self, other: object) -> _Ratio:
        o = self._lift(other)
        return _Ratio.of(self.num * o.den + o.num * self.den, self.den * o.den)

    def __neg__(self) -> _Ratio:
        return _Ratio(-self.num, self.den)

    def __sub__(self, other: object) -> _Ratio:
        return self + (-self._lift(other))

    def __mul__(self, other: object) -> _Ratio:
        o = self._lift(other)
        return _Ratio.of(self.num * o.num, self.den * o.den)

    def __pow__(self, n: int) -> _Ratio:
        out = _Ratio(Poly.const(1))
        for _ in range(int(n)):
            out = out * self
        return out

    def rounded(self, up: bool) -> _Ratio:
        """``floor`` (or ``ceiling``): exact where every non-constant coefficient is a multiple of
        ``den`` (then ``floor((den*Q + c)/den) = Q + floor(c/den)`` at every integer point);
        :class:`Reject` otherwise."""
        c = dict(self.num.terms).get((), 0)
        rest = self.num - c
        if any(k % self.den for _, k in rest.terms):
            raise Reject
        q = -(-c // self.den) if up else c // self.den
        return _Ratio(Poly._of({m: k // self.den for m, k in rest.terms}) + q)


class _PolyAlgebra(dimexpr.Algebra[_Ratio]):
    """Shape expressions from inference: polynomials, and ``/``, ``//``, ``%``, ``floor``,
    ``ceiling`` and ``Mod`` by constants wherever their result is a polynomial at every integer
    point (``floor(H/2)`` with ``H = 2*q + 1`` is ``q``); anything else on constants only."""

    def lift(self, value: Fraction) -> _Ratio:
        return _Ratio.of(Poly.const(value.numerator), value.denominator)

    def constant(self, value: object) -> Fraction | None:
        if not isinstance(value, _Ratio):
            return None
        c = value.num.constant()
        return None if c is None else Fraction(c, value.den)

    def bounded(self, value: object) -> object:
        # every coefficient is checked as it is made; the number of monomials here
        if isinstance(value, _Ratio) and len(value.num.terms) > MAX_PARSED_TERMS:
            raise Reject
        return value

    def maximum(self, args: Sequence[object]) -> object:
        raise Reject

    def divide(self, op: str, a: object, b: object) -> object:
        c = self.constant(b)
        if not isinstance(a, _Ratio) or c is None or c == 0:
            raise Reject
        q = a * self.lift(1 / c)
        if op == "/":
            return q
        down = q.rounded(up=False)
        return down if op == "//" else a - down * self.lift(c)

    def rounded(self, func: str, args: Sequence[object]) -> object:
        if func in ("floor", "ceiling", "ceil") and len(args) == 1 and isinstance(args[0], _Ratio):
            return args[0].rounded(up=func != "floor")
        if func == "mod" and len(args) == 2:
            return self.divide("%", args[0], args[1])
        raise Reject


class _PlanAlgebra(dimexpr.Algebra[MaxPoly]):
    """Expressions in a plan file: integers, names, ``+``, ``-``, ``*``, ``max``, parentheses."""

    operators = frozenset({"+", "-", "*"})
    functions = frozenset({"max"})

    def lift(self, value: Fraction) -> MaxPoly:
        return MaxPoly.const(_integer(value))

    def constant(self, value: object) -> Fraction | None:
        p = value.single() if isinstance(value, MaxPoly) else None
        c = p.constant() if p is not None else None
        return None if c is None else Fraction(c)

    def bounded(self, value: object) -> object:
        if isinstance(value, MaxPoly) and (len(value.terms) > MAX_PARSED_TERMS
                                           or any(len(t.terms) > MAX_PARSED_TERMS for t in value.terms)):
            raise Reject
        return value

    def maximum(self, args: Sequence[object]) -> object:
        out = args[0]
        for a in args[1:]:
            out = out.maximum(a)  # type: ignore[attr-defined]
        return out


_POLYS = _PolyAlgebra()
_EXPRS = _PlanAlgebra()


def parse_poly(text: str, names: Iterable[str] | Mapping[str, str | Poly]) -> Poly | None:
    """The polynomial ``text`` states over ``names``, or ``None``.

    A mapping renames (text name -> dim) or substitutes (text name -> polynomial): with
    ``{"H": 4*q + 1}``, ``floor(H/2)`` reads as ``2*q``, exact at every integer ``q``.
    """
    rename = names if isinstance(names, Mapping) else {n: n for n in names}
    values = {k: _Ratio(v if isinstance(v, Poly) else Poly.var(v)) for k, v in rename.items()}
    out = dimexpr.parse(text, values, _POLYS)
    return out.num if out is not None and out.den == 1 else None


def parse_expr(text: str, names: Iterable[str]) -> MaxPoly | None:
    """An expression from a plan file over dims ``names``, or ``None`` when it is outside the grammar."""
    return dimexpr.parse(text, {n: MaxPoly((Poly.var(n),)) for n in names}, _EXPRS)
