"""The range plan: a record, its JSON form and its schema.

A range plan (made by :func:`onnxmem.planning.ranges.plan_range`) is one plan for every
shape in a box of dims: every tensor's size is a polynomial in the ranged dims
(:class:`onnxmem.core.symbolic.Poly`) and every buffer's offset a maximum of polynomials
(:class:`onnxmem.core.symbolic.MaxPoly`). The box is cut into pieces, each with its own
layout (:class:`RangePiece`).

At a point ``p`` (:func:`instantiate`) a buffer sits at ``align_up(offset(p))``; the
arena ends at the highest buffer, at most ``align_up(arena(p))``. This is sound whenever
``offset(b) >= offset(c) + slot(c)`` for every pair with ``c`` below ``b``:
``align_up(offset_c) + align_up(size_c) = align_up(offset_c + align_up(size_c)) <=
align_up(offset_c + slot_c) <= align_up(offset_b)``. ``slot(c)`` is the bytes ``c``
reserves: its size polynomial plus ``alignment - gcd(alignment, content)`` (the most
rounding up can add; a constant size is rounded up exactly), :func:`slot_of`.

**The file** (:func:`range_to_dict`, :func:`range_from_dict`): ``{"schema_version": 2,
"range": {...}}``, checked against ``schema/range.schema.json`` and then field by field
(every expression parsed, every step inside its piece's order). The static proof of a
range plan is :func:`onnxmem.proof.range.prove_range_plan`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from onnxmem.core.errors import PlanError, ShapeError, show_name
from onnxmem.core.fileio import write_bytes_atomic
from onnxmem.core.problem import Buffer, Problem, align_up, live_bytes, lower_bound
from onnxmem.core.symbolic import Box, MaxPoly, Poly, box_corners, monomial_value, parse_expr
from onnxmem.plans.jsontext import dumps
from onnxmem.plans.point import MAX_VALUE, MemoryPlan, PlannedTensor
from onnxmem.plans.schema import check_schema

__all__ = [
    "DIM_NAME",
    "MAX_RANGED",
    "RANGE_SCHEMA_VERSION",
    "RangePiece",
    "RangePlan",
    "RangeTensor",
    "arena_and_bound",
    "instantiate",
    "is_range_data",
    "quotient_name",
    "piece_bound",
    "range_from_dict",
    "range_to_dict",
    "render_range_plan",
    "slot_of",
    "write_range_plan",
]

#: the ``schema_version`` of a range plan (a concrete plan keeps plans.point.SCHEMA_VERSION)
RANGE_SCHEMA_VERSION = 2
#: most dims one range plan ranges over
MAX_RANGED = 4
#: what a ranged dim's name must match (and not be ``max``, a word of the expressions)
DIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class RangeTensor:
    """A planned tensor of a piece: live in steps ``[start, end)``, in buffer ``group``."""

    name: str
    dtype: str
    shape: tuple[Poly, ...]
    size: Poly
    start: int
    end: int
    producer: str | None
    producer_op: str | None
    kind: str
    group: str
    #: bytes from the buffer's start (a Concat input in its slice, where the dims before the axis are 1)
    group_offset: Poly = Poly()


def quotient_name(dim: str) -> str:
    """The variable a piece's expressions use for lattice dim ``dim`` (``dim = step*q + residue``)."""
    return f"{dim}_q"


@dataclass(frozen=True, slots=True)
class RangePiece:
    """One layout, valid on ``box``: each buffer (``group``) at ``offsets[g]``, reserving ``slots[g]`` bytes.

    ``lattice`` maps a dim to ``(step, residue)``: the piece holds the values ``step*q + residue``
    of that dim, and its ``box`` and expressions name the quotient :func:`quotient_name` ``q``
    instead of the dim (every other dim is named as it is).
    """

    box: dict[str, tuple[int, int]]
    order: tuple[str, ...]
    op_types: tuple[str, ...]
    tensors: tuple[RangeTensor, ...]
    offsets: dict[str, MaxPoly]
    slots: dict[str, Poly]
    arena: MaxPoly
    lattice: dict[str, tuple[int, int]] = field(default_factory=dict)

    def variables(self, point: Mapping[str, int]) -> dict[str, int] | None:
        """``point`` (the plan's dims) as the values of the piece's variables; ``None`` off its lattice."""
        out = {k: int(v) for k, v in point.items() if k not in self.lattice}
        for k, (step, residue) in self.lattice.items():
            q, r = divmod(int(point[k]) - residue, step)
            if r:
                return None
            out[quotient_name(k)] = q
        return out

    def dim_box(self) -> dict[str, tuple[int, int]]:
        """The piece's box in the plan's dims (a lattice dim from its first to its last value)."""
        out = {k: v for k, v in self.box.items()}
        for k, (step, residue) in self.lattice.items():
            lo, hi = out.pop(quotient_name(k))
            out[k] = (step * lo + residue, step * hi + residue)
        return out

    def contains(self, point: Mapping[str, int]) -> bool:
        v = self.variables(point)
        return v is not None and all(lo <= v[k] <= hi for k, (lo, hi) in self.box.items())

    def arena_at(self, point: Mapping[str, int], alignment: int) -> int:
        """The arena at ``point`` (the plan's dims, on the piece's lattice): the end of the highest
        buffer, each at its rounded-up offset.

        Never above ``align_up(arena(point))`` (see the module docstring).
        """
        v = self.variables(point)
        if v is None:
            raise ShapeError("the point is off the piece's lattice")
        return _gauge(self, alignment).at(v)[0]


@dataclass(frozen=True, slots=True)
class RangePlan:
    """A plan for every point of ``box``: the pieces cover the box, each with its own layout."""

    model: dict[str, Any]
    box: dict[str, tuple[int, int]]
    dims: dict[str, int]  # dims bound to one value
    io: str
    alignment: int
    inplace: bool
    order_strategy: str
    solver: str
    weights_size: int
    plan_seconds: float
    pieces: tuple[RangePiece, ...]
    warnings: tuple[str, ...] = ()
    schema_version: int = RANGE_SCHEMA_VERSION
    #: constant folding (``--fold``): values computed only from weights are weights at every point
    fold: bool = True
    #: the step of a dim given one (``--dim H=160:640:32``: the plan holds ``H = 160 + 32*k`` only)
    steps: dict[str, int] = field(default_factory=dict)
    #: each lattice dim's step in the pieces (a multiple of ``steps``): every piece holds one residue of it
    lattice: dict[str, int] = field(default_factory=dict)
    #: the training checkpoint whose frozen constants fed shape inference (a point plan's ``extra.checkpoint``)
    checkpoint: dict[str, Any] = field(default_factory=dict)

    def piece_at(self, point: Mapping[str, int]) -> tuple[int, RangePiece]:
        for i, p in enumerate(self.pieces):
            if p.contains(point):
                return i, p
        where = ", ".join(f"{k}={v}" for k, v in sorted(point.items()))
        raise ShapeError(f"point {where} is outside the range plan's box {self.box_text()}; give dims inside it")

    def box_text(self) -> str:
        """The box as ``--dim`` values: ``H=160:640:32 batch=1:8``."""
        return " ".join(f"{k}={lo}:{hi}" + (f":{self.steps[k]}" if self.steps.get(k, 1) > 1 else "")
                        for k, (lo, hi) in sorted(self.box.items()))

    def arena_at(self, point: Mapping[str, int]) -> int:
        return self.piece_at(point)[1].arena_at(point, self.alignment)

    def corners(self) -> list[dict[str, int]]:
        return box_corners(self.box)


def slot_of(size: Poly, alignment: int) -> Poly:
    """The bytes a buffer of ``size`` reserves in a range plan: room for rounding up at every point."""
    c = size.constant()
    if c is not None:
        return Poly.const(align_up(c, alignment))
    return size + (alignment - math.gcd(alignment, size.content()))


# ------------------------------------------------------------------ evaluation at a point


class _Gauge:
    """A piece's arena and lower bound at points, fast: every polynomial over one list of monomials."""

    def __init__(self, piece: RangePiece, alignment: int) -> None:
        self.alignment = alignment
        self.groups = sorted(piece.offsets)
        index = {g: i for i, g in enumerate(self.groups)}
        monos: dict[Any, int] = {}

        def coded(p: Poly) -> list[tuple[int, int]]:
            return [(monos.setdefault(m, len(monos)), c) for m, c in p.terms]

        span: dict[str, list[int]] = {}
        self.members: list[tuple[int, list[tuple[int, int]]]] = []
        for t in piece.tensors:
            sp = span.setdefault(t.group, [t.start, t.end])
            sp[0], sp[1] = min(sp[0], t.start), max(sp[1], t.end)
            self.members.append((index[t.group], coded(t.group_offset + t.size)))
        self.spans = [(span[g][0], span[g][1]) if g in span else (0, 0) for g in self.groups]
        self.terms = [(index[g], coded(term)) for g in self.groups for term in piece.offsets[g].terms]
        self.monos = list(monos)
        self.steps = max((e for _, e in self.spans), default=0)

    def at(self, point: Mapping[str, int]) -> tuple[int, int]:
        """``(arena, lower bound)`` at ``point`` (the piece's variables)."""
        a = self.alignment
        v = [monomial_value(m, point) for m in self.monos]
        size = [0] * len(self.groups)
        for g, code in self.members:
            size[g] = max(size[g], sum(c * v[i] for i, c in code))
        off = [-(2**63)] * len(self.groups)
        for g, code in self.terms:
            off[g] = max(off[g], sum(c * v[i] for i, c in code))
        aligned = [align_up(x, a) for x in size]
        arena = max((align_up(o, a) + z for o, z in zip(off, aligned)), default=0)
        live = [0] * (self.steps + 1)
        for (s0, e0), z in zip(self.spans, aligned):
            live[s0] += z
            live[e0] -= z
        bound = run = 0
        for x in live:
            run += x
            bound = max(bound, run)
        return arena, bound


_GAUGES: dict[int, tuple[RangePiece, int, _Gauge]] = {}


def _gauge(piece: RangePiece, alignment: int) -> _Gauge:
    hit = _GAUGES.get(id(piece))
    if hit is not None and hit[0] is piece and hit[1] == alignment:
        return hit[2]
    if len(_GAUGES) > 64:
        _GAUGES.clear()
    g = _Gauge(piece, alignment)
    _GAUGES[id(piece)] = (piece, alignment, g)
    return g


def arena_and_bound(piece: RangePiece, point: Mapping[str, int], alignment: int) -> tuple[int, int]:
    """``(the piece's arena, the most bytes its buffers hold at one step)`` at ``point`` (its variables)."""
    return _gauge(piece, alignment).at(point)


def piece_bound(piece: RangePiece, point: Mapping[str, int], alignment: int) -> int:
    """The most bytes the piece's buffers hold at one step, at ``point`` (its variables; no layout goes below it)."""
    return _gauge(piece, alignment).at(point)[1]


def _buffers_at(piece: RangePiece, point: Mapping[str, int], alignment: int) -> list[Buffer]:
    span: dict[str, list[int]] = {}
    size: dict[str, int] = {}
    for t in piece.tensors:
        s = span.setdefault(t.group, [t.start, t.end])
        s[0], s[1] = min(s[0], t.start), max(s[1], t.end)
        size[t.group] = max(size.get(t.group, 0), (t.group_offset + t.size).evaluate(point))
    return [Buffer(g, s, e, align_up(size[g], alignment), alignment) for g, (s, e) in span.items()]


def instantiate(plan: RangePlan, point: Mapping[str, int]) -> MemoryPlan:
    """The concrete plan at ``point`` (every ranged dim bound), which ``onnxmem verify`` reads."""
    point = {k: int(point[k]) for k in plan.box}
    index, piece = plan.piece_at(point)
    a = plan.alignment
    at = piece.variables(point) or {}
    offset = {g: align_up(e.evaluate(at), a) for g, e in piece.offsets.items()}
    tensors = tuple(
        PlannedTensor(
            name=t.name, dtype=t.dtype, shape=tuple(d.evaluate(at) for d in t.shape),
            size=t.size.evaluate(at), offset=offset[t.group] + t.group_offset.evaluate(at), start=t.start, end=t.end,
            producer=t.producer, producer_op=t.producer_op, kind=t.kind, group=t.group,
            group_offset=t.group_offset.evaluate(at),
        )
        for t in piece.tensors
    )
    buffers = _buffers_at(piece, at, a)
    arena = piece.arena_at(point, a)
    if arena >= MAX_VALUE or any(t.size < 0 or t.offset < 0 or any(d < 0 for d in t.shape) for t in tensors):
        raise PlanError(f"the range plan at this point has a negative size or offset, or an arena of "
                        f"{arena:,} bytes, not below 2^62; re-plan the model")
    problem = Problem(tuple(buffers))
    curve = live_bytes(problem)
    return MemoryPlan(
        model=dict(plan.model),
        dims={**plan.dims, **point},
        input_shapes={},
        order=piece.order,
        op_types=piece.op_types,
        order_strategy=plan.order_strategy,
        io=plan.io,
        alignment=a,
        inplace=plan.inplace,
        form="offsets",
        tensors=tensors,
        arena_size=arena,
        lower_bound=lower_bound(problem) if buffers else 0,
        naive_size=sum(b.size for b in buffers),
        weights_size=plan.weights_size,
        peak_step=int(np.argmax(curve)) if curve.size else 0,
        solver={"name": plan.solver, "status": "feasible", "seconds": 0.0,
                "params": {"range_piece": index}},
        plan_seconds=plan.plan_seconds,
        warnings=plan.warnings,
        extra={"range": {"box": {k: list(v) for k, v in plan.box.items()}, "piece": index},
               "fold": "on" if plan.fold else "off"},
    )


# ------------------------------------------------------------------ JSON


def _box_dict(box: Mapping[str, tuple[int, int]]) -> dict[str, list[int]]:
    return {k: [int(lo), int(hi)] for k, (lo, hi) in sorted(box.items())}


def _group_offset_dict(go: Poly) -> dict[str, Any]:
    """A tensor's ``group_offset`` field: absent at 0, an integer when constant, else an expression."""
    c = go.constant()
    if c == 0:
        return {}
    return {"group_offset": c if c is not None else str(go)}


def range_to_dict(plan: RangePlan) -> dict[str, Any]:
    pieces = []
    for p in plan.pieces:
        groups = sorted(p.offsets)
        pieces.append({
            "box": _box_dict(p.box),
            **({"lattice": {k: [st, r] for k, (st, r) in sorted(p.lattice.items())}} if p.lattice else {}),
            "order": list(p.order),
            "op_types": list(p.op_types),
            "arena": str(p.arena),
            "buffers": [{"id": g, "offset": str(p.offsets[g]), "slot": str(p.slots[g])} for g in groups],
            "tensors": [
                {"name": t.name, "dtype": t.dtype, "shape": [str(d) for d in t.shape], "size": str(t.size),
                 "start": t.start, "end": t.end, "producer": t.producer, "producer_op": t.producer_op,
                 "kind": t.kind, "group": t.group, **_group_offset_dict(t.group_offset)}
                for t in p.tensors
            ],
        })
    return {
        "schema_version": plan.schema_version,
        "range": {
            "model": plan.model,
            "box": _box_dict(plan.box),
            **({"steps": dict(sorted(plan.steps.items()))} if plan.steps else {}),
            **({"lattice": dict(sorted(plan.lattice.items()))} if plan.lattice else {}),
            "dims": dict(sorted(plan.dims.items())),
            "io": plan.io,
            "alignment": plan.alignment,
            "inplace": plan.inplace,
            "fold": plan.fold,
            "order_strategy": plan.order_strategy,
            "solver": plan.solver,
            "weights_size": plan.weights_size,
            "plan_seconds": plan.plan_seconds,
            "warnings": list(plan.warnings),
            **({"checkpoint": plan.checkpoint} if plan.checkpoint else {}),
            "pieces": pieces,
        },
    }


def is_range_data(data: Any) -> bool:
    """Whether parsed plan JSON is a range plan (it has a ``range`` object)."""
    return isinstance(data, dict) and isinstance(data.get("range"), dict)


class _Reader:
    """Typed access to untrusted JSON: every miss is a one-line ``PlanError``."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, rule: str) -> PlanError:
        return PlanError(f"{self.where}: field {show_name(path)} {rule}; give a range plan that "
                         "'onnxmem plan --dim NAME=LO:HI -o' wrote")

    def get(self, d: Any, key: str, kind: Any, path: str) -> Any:
        if not isinstance(d, dict) or key not in d:
            raise self.fail(f"{path}/{key}".lstrip("/"), "is missing")
        v = d[key]
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
        if kind is int and ok and not 0 <= v < MAX_VALUE:
            raise self.fail(f"{path}/{key}", "is out of range")
        if not ok:
            raise self.fail(f"{path}/{key}", f"is not of type {getattr(kind, '__name__', kind)}")
        return v

    def opt_str(self, d: dict[str, Any], key: str, path: str) -> str | None:
        v = d.get(key)
        if v is not None and not isinstance(v, str):
            raise self.fail(f"{path}/{key}", "is not a string or null")
        return v

    def box(self, d: Any, path: str) -> dict[str, tuple[int, int]]:
        if not isinstance(d, dict) or not d:
            raise self.fail(path, "is not an object of NAME: [LO, HI]")
        if len(d) > MAX_RANGED:
            raise self.fail(path, f"ranges {len(d)} dims; a range plan ranges at most {MAX_RANGED}")
        out: dict[str, tuple[int, int]] = {}
        for k, v in d.items():
            if (not DIM_NAME.fullmatch(k) or k.lower() == "max" or not isinstance(v, list) or len(v) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                    or not 0 <= v[0] <= v[1] <= 2**31):
                raise self.fail(f"{path}/{k}", "is not a dim name with [LO, HI], 0 <= LO <= HI <= 2^31")
            out[k] = (v[0], v[1])
        return out

    def steps(self, d: Any, box: Box, path: str) -> dict[str, int]:
        """A map of ranged dims to steps above 1 (``steps`` or ``lattice``; absent: none)."""
        if d is None:
            return {}
        if not isinstance(d, dict):
            raise self.fail(path, "is not an object of NAME: STEP")
        for k, v in d.items():
            if k not in box or not isinstance(v, int) or isinstance(v, bool) or not 2 <= v <= 2**31:
                raise self.fail(f"{path}/{k}", "is not a ranged dim with a step from 2 to 2^31")
        return dict(d)

    def piece_lattice(self, d: Any, lattice: Mapping[str, int], path: str) -> dict[str, tuple[int, int]]:
        """A piece's ``{dim: [step, residue]}``: the plan's lattice dims, each with its step."""
        d = {} if d is None else d
        if not isinstance(d, dict) or set(d) != set(lattice):
            raise self.fail(path, f"does not name the plan's lattice dims ({', '.join(sorted(lattice)) or 'none'})")
        out: dict[str, tuple[int, int]] = {}
        for k, v in d.items():
            if (not isinstance(v, list) or len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                   for x in v)
                    or v[0] != lattice[k] or not 0 <= v[1] < v[0]):
                raise self.fail(f"{path}/{k}", f"is not [{lattice[k]}, RESIDUE] with 0 <= RESIDUE < {lattice[k]}")
            out[k] = (v[0], v[1])
        return out

    def piece_box(self, d: Any, box: Box, path: str,
                  lattice: Mapping[str, tuple[int, int]] | None = None) -> dict[str, tuple[int, int]]:
        """A piece's box: exactly the plan's ranged dims (a lattice dim by its quotient), each inside
        the plan's range."""
        lattice = lattice or {}
        out = self.box(d, path)
        names = {quotient_name(k) if k in lattice else k: k for k in box}
        for k, (lo, hi) in out.items():
            if k not in names:
                raise self.fail(f"{path}/{k}", f"is a dim the plan does not range (its box ranges "
                                               f"{', '.join(map(show_name, sorted(names)))})")
            dim = names[k]
            step, residue = lattice.get(dim, (1, 0))
            if not box[dim][0] <= step * lo + residue <= step * hi + residue <= box[dim][1]:
                raise self.fail(f"{path}/{k}", f"is outside the plan's range of the dim, {list(box[dim])}")
        missing = sorted(set(names) - set(out))
        if missing:
            raise self.fail(f"{path}/{missing[0]}", "is missing (a piece ranges every dim of the plan's box)")
        return out

    def group_offset(self, t: dict[str, Any], names: set[str], path: str) -> Poly:
        """A tensor's offset in its buffer: absent (0), an integer, or a polynomial expression."""
        if "group_offset" not in t:
            return Poly()
        if isinstance(t["group_offset"], str):
            return self.poly(t["group_offset"], names, f"{path}/group_offset")
        return Poly.const(self.get(t, "group_offset", int, path))

    def poly(self, text: Any, names: set[str], path: str) -> Poly:
        e = self.expr(text, names, path)
        p = e.single()
        if p is None:
            raise self.fail(path, "is a maximum where a polynomial is needed")
        return p

    def expr(self, text: Any, names: set[str], path: str) -> MaxPoly:
        e = parse_expr(text, names) if isinstance(text, str) else None
        if e is None:
            raise self.fail(path, "is not an expression of integers, the ranged dims, +, -, *, max and "
                                  "parentheses")
        return e


def _read_piece(r: _Reader, p: Any, at: str, box: Box, lattice: Mapping[str, int]) -> RangePiece:
    """Piece ``at`` of a range plan file (``p``), every field checked and every expression parsed."""
    plattice = r.piece_lattice(p.get("lattice") if isinstance(p, dict) else None, lattice, f"{at}/lattice")
    pbox = r.piece_box(r.get(p, "box", dict, at), box, f"{at}/box", plattice)
    names = set(pbox)
    order = r.get(p, "order", list, at)
    op_types = r.get(p, "op_types", list, at)
    if len(order) != len(op_types) or not all(isinstance(x, str) for x in [*order, *op_types]):
        raise r.fail(f"{at}/order", "does not pair with op_types as strings")
    offsets: dict[str, MaxPoly] = {}
    slots: dict[str, Poly] = {}
    for j, b in enumerate(r.get(p, "buffers", list, at)):
        gid = r.get(b, "id", str, f"{at}/buffers/{j}")
        offsets[gid] = r.expr(r.get(b, "offset", str, f"{at}/buffers/{j}"), names, f"{at}/buffers/{j}/offset")
        slots[gid] = r.poly(r.get(b, "slot", str, f"{at}/buffers/{j}"), names, f"{at}/buffers/{j}/slot")
    tensors = []
    steps = len(order)
    for j, t in enumerate(r.get(p, "tensors", list, at)):
        tp = f"{at}/tensors/{j}"
        start, end = r.get(t, "start", int, tp), r.get(t, "end", int, tp)
        if not start < end <= steps:
            raise r.fail(tp, f"is live in steps [{start}, {end}), not inside the {steps} steps")
        shape = r.get(t, "shape", list, tp)
        tensors.append(RangeTensor(
            name=r.get(t, "name", str, tp), dtype=r.get(t, "dtype", str, tp),
            shape=tuple(r.poly(s, names, f"{tp}/shape/{k}") for k, s in enumerate(shape)),
            size=r.poly(r.get(t, "size", str, tp), names, f"{tp}/size"), start=start, end=end,
            producer=r.opt_str(t, "producer", tp), producer_op=r.opt_str(t, "producer_op", tp),
            kind=r.get(t, "kind", str, tp), group=r.get(t, "group", str, tp),
            group_offset=r.group_offset(t, names, tp),
        ))
    for j, t in enumerate(tensors):
        if t.group not in offsets or t.group not in slots:
            raise r.fail(f"{at}/tensors/{j}/group", "names no buffer of the piece")
    return RangePiece(pbox, tuple(order), tuple(op_types), tuple(tensors), offsets, slots,
                      r.expr(r.get(p, "arena", str, at), names, f"{at}/arena"), plattice)


def range_from_dict(data: Any, where: str = "range plan") -> RangePlan:
    """The range plan in ``data`` (parsed JSON), every field checked and every expression parsed."""
    r = _Reader(where)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != RANGE_SCHEMA_VERSION:
        raise PlanError(f"{where} has schema_version {version!r}; this onnxmem reads range plans of "
                        f"version {RANGE_SCHEMA_VERSION}: re-plan the model")
    d = r.get(data, "range", dict, "")
    box = r.box(d.get("box"), "range/box")
    dim_steps = r.steps(d.get("steps"), box, "range/steps")
    lattice = r.steps(d.get("lattice"), box, "range/lattice")
    for k, st in dim_steps.items():
        if (box[k][1] - box[k][0]) % st:  # every corner of the box is a value the plan holds
            raise r.fail(f"range/box/{k}", f"ends off the dim's step {st} (HI - LO is no multiple of it)")
        if lattice.get(k, 1) % st:
            raise r.fail(f"range/lattice/{k}", f"is not a multiple of the dim's step {st}")
    for k in lattice:
        if quotient_name(k) in box:
            raise r.fail(f"range/lattice/{k}", f"names a dim whose quotient {quotient_name(k)!r} is a ranged dim too")
    dims = r.get(d, "dims", dict, "range")
    for k, v in dims.items():
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < MAX_VALUE:
            raise r.fail(f"range/dims/{k}", "is not a non-negative integer")
    raw = r.get(d, "pieces", list, "range")
    if not raw:
        raise r.fail("range/pieces", "is empty")
    pieces = [_read_piece(r, p, f"range/pieces/{i}", box, lattice) for i, p in enumerate(raw)]
    alignment = r.get(d, "alignment", int, "range")
    if alignment < 1:
        raise r.fail("range/alignment", "is below 1")
    seconds = d.get("plan_seconds")
    if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds)
            or seconds < 0):
        raise r.fail("range/plan_seconds", "is below 0 or not a finite number")
    warnings = r.get(d, "warnings", list, "range")
    check_schema(data, "range", where)  # what the checks above leave: no field beyond the schema's
    return RangePlan(
        model=r.get(d, "model", dict, "range"),
        box=box,
        dims=dict(dims),
        io=r.get(d, "io", str, "range"),
        alignment=alignment,
        inplace=r.get(d, "inplace", bool, "range"),
        order_strategy=r.get(d, "order_strategy", str, "range"),
        solver=r.get(d, "solver", str, "range"),
        weights_size=r.get(d, "weights_size", int, "range"),
        plan_seconds=float(seconds),
        pieces=tuple(pieces),
        warnings=tuple(str(w) for w in warnings),
        schema_version=RANGE_SCHEMA_VERSION,
        fold=r.get(d, "fold", bool, "range") if "fold" in d else True,  # plans before --fold: folded
        steps=dim_steps,
        lattice=lattice,
        checkpoint=r.get(d, "checkpoint", dict, "range") if "checkpoint" in d else {},
    )


def render_range_plan(plan: RangePlan) -> bytes:
    """The range plan's JSON bytes (it follows its schema by construction; the tests check it)."""
    return (dumps(range_to_dict(plan)) + "\n").encode("utf-8")


def write_range_plan(plan: RangePlan, path: str | os.PathLike[str]) -> None:
    """Write the range plan as JSON, atomically."""
    write_bytes_atomic(path, render_range_plan(plan), "-o")
