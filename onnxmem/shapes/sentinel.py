"""Concrete shape rules run on symbolic dims, by substituting stand-in values.

The rules of :mod:`onnxmem.shapes.contrib` and :mod:`onnxmem.shapes.training` compute with
integer dims (some infer a stand-in ONNX op with onnx, some broadcast with numpy). A range plan
(:func:`onnxmem.shapes.infer_symbolic_shapes`) needs them on shapes whose ranged dims are
texts (``batch``, ``past + 1``, as inference writes them). :func:`symbolic_rule` runs a rule
twice with each text replaced by a stand-in integer far above any real dim (a different set of
stand-ins each time), and reads each output dim back:

* the same value in both runs, and no stand-in: a constant;
* text ``t``'s stand-in in each run: the text ``t``, passed through;
* anything else (arithmetic on a stand-in, ``2*batch``): unknown, so the output is left to the
  other engines, and the plan names it when none sizes it.

A third run, every text at 0, must give each constant and 0 for each text passed through;
otherwise the output is unknown. This is a check at three points, not a proof, and it is
exact for what the rules do: pass a dim through, compute with it (refused above), or compare
it with a constant ``c >= 0`` (``max(past, total)`` where the total is a constant): at the huge
stand-ins ``max(dim, c)`` reads as ``dim`` and ``min(dim, c)`` as ``c``, and the run at 0
refuses both unless ``c`` is 0, where the reading holds at every dim >= 0. The values a rule
reads are constants of the model only (the caller computes none from a text dim).
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


def _read_back(outs: list[TypeShape | None], runs: list[dict[str, int]]) -> TypeShape | None:
    """One output of the three runs as a shape over the texts, or None where it is neither a
    constant nor a text passed through at all three (module doc)."""
    a, b, zero = outs
    if a is None or b is None or zero is None or not a[0] == b[0] == zero[0] \
            or not len(a[1]) == len(b[1]) == len(zero[1]):
        return None
    by_a = {v: t for t, v in runs[0].items()}
    dims: list[int | str] = []
    for x, y, z in zip(a[1], b[1], zero[1]):
        if not all(isinstance(d, (int, np.integer)) for d in (x, y, z)):
            return None
        x, y, z = int(x), int(y), int(z)
        if x == y == z and 0 <= x < _ABOVE:
            dims.append(x)
        elif x in by_a and runs[1][by_a[x]] == y and z == 0:
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
        runs = [{t: base + k * stride for k, t in enumerate(texts)} for base, stride in _RUNS]
        runs.append({t: 0 for t in texts})
        results = [rule(node, _substituted(ins, r), v) for r in runs]
        return [_read_back([r[k] if k < len(r) else None for r in results], runs)
                for k in range(len(node.output))]

    return wrapped
