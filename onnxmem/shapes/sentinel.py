"""Concrete shape rules run on symbolic dims, by substituting stand-in values.

The rules of :mod:`onnxmem.shapes.contrib` and :mod:`onnxmem.shapes.training` compute with
integer dims (some infer a stand-in ONNX op with onnx, some broadcast with numpy). A range plan
(:func:`onnxmem.shapes.infer_symbolic_shapes`) needs them on shapes whose ranged dims are
texts (``batch``, ``past + 1``, as inference writes them). :func:`symbolic_rule` runs a rule
twice, each text replaced by a stand-in integer far above any real dim (a different set of
stand-ins each time), and reads each output dim back:

* the same value in both runs, and no stand-in: a constant;
* text ``t``'s stand-in in each run: the text ``t``, passed through;
* anything else (arithmetic on a stand-in, ``2*batch``): unknown, so the output is left to the
  other engines, and the plan names it when none sizes it.

A rule passes a dim through or computes with it; it never compares a dim with a constant to
choose the result (:func:`symbolic_rule` is given only the rules of those two modules). Under
that condition a dim read back as text ``t`` is ``t`` at every value of the dims and a
constant is a constant, since the rule's output is then a function of each dim that is the
identity or does not depend on it at two far-apart values. The values a rule reads are
constants of the model only (the caller computes none from a text dim).
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxmem.shapes.training import Rule, TypeShape

__all__ = ["symbolic_rule"]

#: the stand-ins of the two runs: ``base + k * stride`` for the k-th text; every stand-in is
#: above every constant dim a model holds (at most 2^31 elements per dim elsewhere in onnxmem)
_RUNS = ((1 << 40, 1 << 24), (3 << 40, (1 << 24) + 7))
_ABOVE = 1 << 39


def _texts(ins: list[TypeShape | None]) -> list[str]:
    seen: dict[str, None] = {}
    for t in ins:
        if t is not None:
            for d in t[1]:
                if isinstance(d, str):
                    seen.setdefault(d)
    return list(seen)


def _substituted(ins: list[TypeShape | None], stand: dict[str, int]) -> list[TypeShape | None]:
    return [None if t is None else (t[0], tuple(stand[d] if isinstance(d, str) else d for d in t[1])) for t in ins]


def _read_back(a: TypeShape | None, b: TypeShape | None, texts: list[str],
               runs: tuple[dict[str, int], dict[str, int]]) -> TypeShape | None:
    """One output of the two runs as a shape over the texts, or None where it is neither a
    constant nor a text passed through (module doc)."""
    if a is None or b is None or a[0] != b[0] or len(a[1]) != len(b[1]):
        return None
    by_a = {v: t for t, v in runs[0].items()}
    dims: list[int | str] = []
    for x, y in zip(a[1], b[1]):
        if not isinstance(x, (int, np.integer)) or not isinstance(y, (int, np.integer)):
            return None
        x, y = int(x), int(y)
        if x == y and 0 <= x < _ABOVE:
            dims.append(x)
        elif x in by_a and runs[1][by_a[x]] == y:
            dims.append(by_a[x])
        else:
            return None
    return a[0], tuple(dims)  # type: ignore[arg-type]


def symbolic_rule(rule: Rule) -> Rule:
    """``rule`` for shapes whose dims may be texts (module doc); a rule given only integer
    dims runs once, unchanged."""

    def wrapped(node: onnx.NodeProto, ins: list[TypeShape | None], v: list[np.ndarray | None]) -> list[TypeShape | None]:
        texts = _texts(ins)
        if not texts:
            return rule(node, ins, v)
        runs = tuple({t: base + k * stride for k, t in enumerate(texts)} for base, stride in _RUNS)
        first, second = (rule(node, _substituted(ins, r), v) for r in runs)
        return [_read_back(a, b, texts, runs) for a, b in zip(first, second)]  # type: ignore[arg-type]

    return wrapped
