"""Dim expressions: a small grammar onnxmem owns, parsed and evaluated without ``eval``.

A symbolic dim in an ONNX file is an opaque name. The only expressions onnxmem
reads are the ones shape inference writes for computed dims (``2*seq + 1``,
``floor(seq/2)``, ``Max(1, seq)``), after every name of the file has been
replaced by a generated safe name. This module parses them with this grammar
and nothing else::

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '//' | '/' | '%') unary)*
    unary   := '-' unary | power
    power   := atom ('**' unary)?
    atom    := INT | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
    NAME    := [A-Za-z_][A-Za-z0-9_]*        (functions: max min floor ceiling Mod, any case)

Values are exact fractions whose numerator and denominator stay within
``LIMIT`` (2^62) at every step; exponents are at most 64, the text at most
``MAX_CHARS`` characters, the nesting at most ``MAX_DEPTH``; ``floor`` and
``ceiling`` round, ``//`` and ``%`` / ``Mod`` are floor division and its
remainder, and the result must be an integer. Anything else (other syntax, a bound
broken, an unbound name, a fraction) makes :func:`evaluate` return ``None``:
the dim is then unknown, never guessed.

>>> evaluate("2*s + 1", {"s": 64})
129
>>> evaluate("floor(s/2) + Max(1, b)", {"s": 7, "b": 3})
6
>>> evaluate("__import__('os')", {}) is None
True

The same parser reads expressions into other value domains
(:func:`parse` with an :class:`Algebra`): :mod:`onnxmem.core.symbolic` reads sizes
as polynomials in the dims and range-plan offsets as maxima of them, with a
narrower operator set where the text comes from a plan file.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any, Generic, Mapping, Sequence, TypeVar

__all__ = ["LIMIT", "MAX_CHARS", "MAX_DEPTH", "Algebra", "Reject", "evaluate", "names", "parse"]

V = TypeVar("V")

LIMIT = 2**62
MAX_CHARS = 4096
MAX_DEPTH = 64
MAX_EXPONENT = 64

_TOKEN = re.compile(r"\s*(?:(\d{1,19})|([A-Za-z_][A-Za-z0-9_]*)|(//|\*\*|[-+*/%(),]))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCS = {"max", "min", "floor", "ceiling", "ceil", "mod"}


class Reject(Exception):
    """The text is outside the grammar or breaks a bound."""


_Reject = Reject


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise Reject
        out.append(m.group(1) or m.group(2) or m.group(3))
        pos = m.end()
    return out


class Algebra(Generic[V]):
    """A value domain the parser computes in: exact fractions unless a subclass says otherwise.

    ``lift`` makes a value of an integer literal; ``+``, ``-``, ``*`` and ``**``
    (a constant integer exponent) use the values' own operators; everything
    else (``/``, ``//``, ``%``, functions) needs constants (:meth:`constant`)
    unless :meth:`maximum` handles ``max``. ``operators`` and ``functions``
    are the tokens this domain accepts; any other is outside its grammar.
    """

    operators: frozenset[str] = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    functions: frozenset[str] = frozenset({"max", "min", "floor", "ceiling", "ceil", "mod"})

    def lift(self, value: Fraction) -> Any:
        return value

    def constant(self, value: Any) -> Fraction | None:
        return value if isinstance(value, Fraction) else None

    def bounded(self, value: Any) -> Any:
        if abs(value.numerator) <= LIMIT and value.denominator <= LIMIT:
            return value
        raise Reject

    def maximum(self, args: Sequence[Any]) -> Any:
        """``max`` of non-constant arguments; :class:`Reject` where the domain has none."""
        raise Reject

    def divide(self, op: str, a: Any, b: Any) -> Any:
        """``a / b``, ``a // b`` or ``a % b`` where one side is not a constant; :class:`Reject` by default."""
        raise Reject

    def rounded(self, func: str, args: Sequence[Any]) -> Any:
        """``floor``, ``ceiling`` or ``Mod`` of non-constant arguments; :class:`Reject` by default."""
        raise Reject


_FRACTIONS: Algebra[Fraction] = Algebra()


def _bounded(v: Fraction) -> Fraction:
    return _FRACTIONS.bounded(v)  # type: ignore[no-any-return]


class _Parser:
    """Recursive descent over the token list, computing in ``algebra`` as it goes."""

    def __init__(self, tokens: list[str], values: Mapping[str, Any], algebra: Algebra[Any]) -> None:
        self.toks, self.i, self.values, self.depth = tokens, 0, values, 0
        self.alg = algebra

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise Reject
        self.i += 1
        return tok

    def op(self, allowed: tuple[str, ...]) -> bool:
        tok = self.peek()
        if tok not in allowed:
            return False
        if tok not in self.alg.operators:
            raise Reject
        return True

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Reject

    def const(self, v: Any) -> Fraction:
        c = self.alg.constant(v)
        if c is None:
            raise Reject
        return c

    def expr(self) -> Any:
        self.nest()
        v = self.term()
        while self.op(("+", "-")):
            op, rhs = self.take(), self.term()
            v = self.alg.bounded(v + rhs if op == "+" else v - rhs)
        self.depth -= 1
        return v

    def term(self) -> Any:
        v = self.unary()
        while self.op(("*", "//", "/", "%")):
            op, rhs = self.take(), self.unary()
            if op == "*":
                v = self.alg.bounded(v * rhs)
                continue
            if self.alg.constant(v) is None or self.alg.constant(rhs) is None:
                v = self.alg.bounded(self.alg.divide(op, v, rhs))
                continue
            a, b = self.const(v), self.const(rhs)
            if b == 0:
                raise Reject
            if op == "/":
                r = _bounded(a / b)
            elif op == "//":
                r = Fraction(math.floor(a / b))
            else:
                r = _bounded(a - b * math.floor(a / b))
            v = self.alg.lift(r)
        return v

    def unary(self) -> Any:
        if not self.op(("-",)):
            return self.power()
        self.take()
        self.nest()
        v = -self.unary()
        self.depth -= 1
        return v

    def power(self) -> Any:
        base = self.atom()
        if not self.op(("**",)):
            return base
        self.take()
        self.nest()
        exp = self.const(self.unary())
        self.depth -= 1
        if exp.denominator != 1 or not 0 <= exp <= MAX_EXPONENT:
            raise Reject
        c = self.alg.constant(base)
        if c is not None and abs(c) > 1 and int(exp) * (abs(c).numerator.bit_length() - 1) > 62:
            raise Reject
        return self.alg.bounded(base ** int(exp))

    def atom(self) -> Any:
        tok = self.take()
        if tok == "(":
            v = self.expr()
            self.take(")")
            return v
        if tok.isdigit():
            return self.alg.lift(_bounded(Fraction(int(tok))))
        if not _NAME.fullmatch(tok):
            raise Reject
        if self.peek() == "(":
            return self.call(tok.lower())
        if tok not in self.values:
            raise Reject
        value = self.values[tok]
        return self.alg.lift(_bounded(Fraction(int(value)))) if isinstance(value, int) else value

    def call(self, func: str) -> Any:
        if func not in _FUNCS or func not in self.alg.functions:
            raise Reject
        self.take("(")
        args = [self.expr()]
        while self.peek() == ",":
            self.take()
            args.append(self.expr())
        self.take(")")
        consts = [self.alg.constant(a) for a in args]
        if func == "max" and any(c is None for c in consts):
            return self.alg.maximum(args)
        if func != "min" and any(c is None for c in consts):
            return self.alg.bounded(self.alg.rounded(func, args))
        cs = [self.const(a) for a in args]
        if func == "max":
            return self.alg.lift(max(cs))
        if func == "min":
            return self.alg.lift(min(cs))
        if func in ("floor", "ceiling", "ceil"):
            if len(cs) != 1:
                raise Reject
            return self.alg.lift(Fraction(math.floor(cs[0]) if func == "floor" else math.ceil(cs[0])))
        if len(cs) != 2 or cs[1] == 0:  # Mod(a, b)
            raise Reject
        a, b = cs
        return self.alg.lift(_bounded(a - b * math.floor(a / b)))


def parse(text: str, values: Mapping[str, Any], algebra: Algebra[V]) -> V | None:
    """The value of ``text`` in ``algebra`` (names bound by ``values``), or ``None``.

    ``None`` when the text is outside the grammar (or the algebra's part of
    it), too long or too deep, names something ``values`` does not bind, or
    breaks a bound. An ``int`` in ``values`` is lifted; any other value is
    used as it is.
    """
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    try:
        p = _Parser(_tokens(text), values, algebra)
        v = p.expr()
    except (Reject, RecursionError):
        return None
    if p.peek() is not None:
        return None
    return v  # type: ignore[no-any-return]


def evaluate(text: str, values: Mapping[str, int]) -> int | None:
    """The integer value of the dim expression ``text``, or ``None`` if it has none.

    ``None`` when the text is outside the grammar, too long or too deep, names
    something ``values`` does not bind, ends in a fraction, or leaves ``±LIMIT``.
    """
    v = parse(text, {k: int(x) for k, x in values.items()}, _FRACTIONS)
    if v is None or v.denominator != 1:
        return None
    return int(v)


def names(text: str) -> list[str]:
    """The names an expression in the grammar refers to (function names excluded)."""
    try:
        toks = _tokens(text) if len(text) <= MAX_CHARS else []
    except _Reject:
        return []
    return [
        tok for i, tok in enumerate(toks)
        if _NAME.fullmatch(tok) and not (i + 1 < len(toks) and toks[i + 1] == "(")
    ]
