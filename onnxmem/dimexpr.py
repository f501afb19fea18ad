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
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Mapping

__all__ = ["LIMIT", "MAX_CHARS", "MAX_DEPTH", "evaluate", "names"]

LIMIT = 2**62
MAX_CHARS = 4096
MAX_DEPTH = 64
MAX_EXPONENT = 64

_TOKEN = re.compile(r"\s*(?:(\d{1,19})|([A-Za-z_][A-Za-z0-9_]*)|(//|\*\*|[-+*/%(),]))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCS = {"max", "min", "floor", "ceiling", "ceil", "mod"}


class _Reject(Exception):
    """The text is outside the grammar or breaks a bound."""


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise _Reject
        out.append(m.group(1) or m.group(2) or m.group(3))
        pos = m.end()
    return out


def _bounded(v: Fraction) -> Fraction:
    if abs(v.numerator) <= LIMIT and v.denominator <= LIMIT:
        return v
    raise _Reject


class _Parser:
    """Recursive descent over the token list, evaluating exactly (in fractions) as it goes."""

    def __init__(self, tokens: list[str], values: Mapping[str, int]) -> None:
        self.toks, self.i, self.values, self.depth = tokens, 0, values, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise _Reject
        self.i += 1
        return tok

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Reject

    def expr(self) -> Fraction:
        self.nest()
        v = self.term()
        while self.peek() in ("+", "-"):
            op, rhs = self.take(), self.term()
            v = _bounded(v + rhs if op == "+" else v - rhs)
        self.depth -= 1
        return v

    def term(self) -> Fraction:
        v = self.unary()
        while self.peek() in ("*", "//", "/", "%"):
            op, rhs = self.take(), self.unary()
            if op == "*":
                v = _bounded(v * rhs)
            elif rhs == 0:
                raise _Reject
            elif op == "/":
                v = _bounded(v / rhs)
            elif op == "//":
                v = Fraction(math.floor(v / rhs))
            else:
                v = _bounded(v - rhs * math.floor(v / rhs))
        return v

    def unary(self) -> Fraction:
        if self.peek() != "-":
            return self.power()
        self.take()
        self.nest()
        v = -self.unary()
        self.depth -= 1
        return v

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() != "**":
            return base
        self.take()
        self.nest()
        exp = self.unary()
        self.depth -= 1
        if exp.denominator != 1 or not 0 <= exp <= MAX_EXPONENT:
            raise _Reject
        if abs(base) > 1 and int(exp) * (abs(base).numerator.bit_length() - 1) > 62:
            raise _Reject
        return _bounded(base ** int(exp))

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            v = self.expr()
            self.take(")")
            return v
        if tok.isdigit():
            return _bounded(Fraction(int(tok)))
        if not _NAME.fullmatch(tok):
            raise _Reject
        if self.peek() == "(":
            return self.call(tok.lower())
        if tok not in self.values:
            raise _Reject
        return _bounded(Fraction(int(self.values[tok])))

    def call(self, func: str) -> Fraction:
        if func not in _FUNCS:
            raise _Reject
        self.take("(")
        args = [self.expr()]
        while self.peek() == ",":
            self.take()
            args.append(self.expr())
        self.take(")")
        if func == "max":
            return max(args)
        if func == "min":
            return min(args)
        if func in ("floor", "ceiling", "ceil"):
            if len(args) != 1:
                raise _Reject
            return Fraction(math.floor(args[0]) if func == "floor" else math.ceil(args[0]))
        if len(args) != 2 or args[1] == 0:  # Mod(a, b)
            raise _Reject
        a, b = args
        return _bounded(a - b * math.floor(a / b))


def evaluate(text: str, values: Mapping[str, int]) -> int | None:
    """The integer value of the dim expression ``text``, or ``None`` if it has none.

    ``None`` when the text is outside the grammar, too long or too deep, names
    something ``values`` does not bind, ends in a fraction, or leaves ``±LIMIT``.
    """
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    try:
        p = _Parser(_tokens(text), values)
        v = p.expr()
    except _Reject:
        return None
    if p.peek() is not None or v.denominator != 1:
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
