"""``--dim`` flags: dims bound to one value (``NAME=N``) and ranged dims (``NAME=LO:HI[:STEP]``).

:func:`parse_dim_flags` splits the flags of ``onnxmem plan`` (a ranged one makes a range
plan, :mod:`onnxmem.planning.ranges`); :func:`parse_point` reads the point of a range plan's
box that ``instantiate``, ``verify`` and ``compare`` are given.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from onnxmem.core.errors import ShapeError, show_name
from onnxmem.core.symbolic import Box
from onnxmem.model import parse_dim_binding
from onnxmem.plans.range import DIM_NAME, MAX_RANGED

__all__ = ["parse_dim_flags", "parse_point"]

#: a range's bound or step: ASCII digits
_INTEGER = re.compile(r"\s*[-+]?\d+\s*", re.ASCII)


def parse_dim_flags(texts: Iterable[str]) -> tuple[dict[str, int], dict[str, tuple[int, int]], dict[str, int]]:
    """``--dim`` texts split into bound dims (``NAME=N``), ranges (``NAME=LO:HI``, inclusive) and the
    steps of ranges given one (``NAME=LO:HI:STEP``: the values ``LO + STEP*k`` up to ``HI``)."""
    fixed: dict[str, int] = {}
    ranges: dict[str, tuple[int, int]] = {}
    steps: dict[str, int] = {}
    for text in texts:
        name, _, value = text.partition("=")
        if ":" not in value:
            k, v = parse_dim_binding(text)
            _once(k, fixed, ranges)
            fixed[k] = v
            continue
        parts = value.split(":")
        try:
            if len(parts) > 3 or not all(_INTEGER.fullmatch(p) for p in parts):
                raise ValueError  # int() alone reads "1_000" and other scripts' digits
            lo, hi, step = int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 1
        except ValueError:
            raise ShapeError(f"--dim {show_name(text)} is not NAME=LO:HI or NAME=LO:HI:STEP with integers; "
                             "write e.g. --dim batch=1:8 or --dim H=160:640:32") from None
        name = name.strip()
        if not DIM_NAME.fullmatch(name) or name.lower() == "max":
            raise ShapeError(f"--dim {show_name(text)}: a ranged dim must be named by an identifier "
                             "([A-Za-z_][A-Za-z0-9_]*, not 'max'); bind it to one value instead")
        if not 0 <= lo <= hi <= 2**31:
            raise ShapeError(f"--dim {show_name(text)}: a range needs 0 <= LO <= HI <= 2^31; "
                             "write e.g. --dim batch=1:8")
        if not 1 <= step <= 2**31:
            raise ShapeError(f"--dim {show_name(text)}: a step is from 1 to 2^31; write e.g. --dim H=160:640:32")
        _once(name, fixed, ranges)
        ranges[name] = (lo, hi)
        if step > 1:
            steps[name] = step
    if len(ranges) > MAX_RANGED:
        raise ShapeError(f"--dim ranges {len(ranges)} dims; a range plan ranges at most {MAX_RANGED}")
    return fixed, ranges, steps


def _once(name: str, fixed: dict[str, int], ranges: dict[str, tuple[int, int]]) -> None:
    """Refuse a dim given twice (a later --dim would silently replace the earlier one)."""
    if name in fixed or name in ranges:
        raise ShapeError(f"--dim {show_name(name)} is given twice; give one --dim per dim (a value or a range)")


def parse_point(texts: Iterable[str], box: Box, steps: Mapping[str, int] | None = None) -> dict[str, int]:
    """``--dim NAME=N`` texts as a point of ``box`` (0 allowed where the box has it); every ranged dim given,
    once, on its step where ``steps`` gives it one (``{"H": 32}``: ``H = LO + 32*k``)."""
    point: dict[str, int] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not _INTEGER.fullmatch(value):  # int() alone reads "1_000" and other scripts' digits
            raise ShapeError(f"--dim {show_name(text)} is not NAME=N with an integer N")
        if not sep or name not in box:
            raise ShapeError(f"--dim {show_name(text)}: the range plan ranges "
                             f"{', '.join(sorted(box))}; give one --dim NAME=N for each")
        if name in point:
            raise ShapeError(f"--dim {show_name(name)} is given twice; give one --dim NAME=N per ranged dim")
        point[name] = int(value)
    missing = sorted(set(box) - set(point))
    if missing:
        raise ShapeError(f"the range plan ranges {', '.join(missing)} too; pass --dim "
                         + " --dim ".join(f"{m}=N" for m in missing))
    for name, v in point.items():
        lo, hi = box[name]
        if not lo <= v <= hi:
            raise ShapeError(f"--dim {name}={v} is outside the plan's range {lo}:{hi}; give a value inside it")
        step = (steps or {}).get(name, 1)
        if (v - lo) % step:
            near = [w for w in (v - (v - lo) % step, v - (v - lo) % step + step) if w <= hi]
            raise ShapeError(f"--dim {name}={v} is off the plan's step: it holds {name} = {lo} + {step}*k only; "
                             "give a value on it, e.g. " + " or ".join(f"--dim {name}={w}" for w in near))
    return point
