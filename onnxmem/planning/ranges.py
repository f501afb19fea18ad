"""Range plans: one plan for every shape in a box of dims, offsets as formulas.

``onnxmem plan MODEL --dim batch=1:8 --dim sequence=1:512`` makes a range
plan: every tensor's size is a polynomial in the ranged dims (shape inference
kept symbolic, :func:`onnxmem.shapes.infer_symbolic_shapes`, read by
:func:`onnxmem.core.symbolic.parse_poly`) and every buffer's offset a maximum of
polynomials (:class:`onnxmem.core.symbolic.MaxPoly`), such that at every integer
point of the box no two buffers live at one step share a byte.

How a plan is made (:func:`plan_range`), per piece of the box:

1. take the piece's high corner as the reference point; evaluate the symbolic
   shapes there and build the graph view;
2. take the operator order (``--order``, made once at the box's high corner;
   a piece of one point is ordered at its point) and choose the sharing (views and
   in-place outputs, :func:`onnxmem.analysis.aliasing.alias_layout` without Concat
   placement); a member whose size polynomial differs from its group's first
   member leaves the group, so sharing holds at every point, not only here;
3. solve the reference point with ``--solver`` (a concrete plan);
4. keep its *shape*, not its numbers: sort the buffers by their reference
   offset; for every pair of buffers live together the earlier one is below
   the later one, and a buffer's offset becomes
   ``max(0, offset(c) + slot(c) for every c directly below it)`` (the
   buffers below that are below another buffer below are implied and left
   out), with terms another term bounds on the piece dropped
   (:meth:`MaxPoly.pruned`). ``slot(c)`` is the bytes ``c`` reserves: its size
   polynomial plus ``alignment - gcd(alignment, content)`` (the most rounding
   up can add; a constant size is rounded up exactly);
5. the arena is ``max(offset(g) + slot(g))`` over the buffers: at a point
   it bounds the exact arena, ``max(align_up(offset(g)) + align_up(size(g)))``,
   which :func:`instantiate` and the C header give.

Pieces: starting from the whole box, a piece whose arena at a sample point
(a grid of each dim's ends, middle and geometric middle) is more than
``tolerance`` above that point's lower bound (the most bytes live at one
step) is cut in two at the geometric middle of the dim that moves that ratio
most, and each half is planned again, up to ``max_pieces``. A piece whose low
corner allows sharing no other point does (Concat inputs in their slices at
batch 1), and whose plan at that corner alone is more than ``tolerance``
smaller, has that corner cut off as a piece of one point (there every size is
a constant and the layout ``onnxmem plan`` makes holds as it is).

At a point ``p`` (:func:`instantiate`) a buffer sits at
``align_up(offset(p))``; the arena ends at the highest buffer, at most
``align_up(arena(p))``. This is sound
whenever ``offset(b) >= offset(c) + slot(c)`` for every pair with ``c``
below ``b``: ``align_up(offset_c) + align_up(size_c) = align_up(offset_c +
align_up(size_c)) <= align_up(offset_c + slot_c) <= align_up(offset_b)``.

The static proof (:func:`prove_range_plan`) reads nothing but the plan and
proves, on the whole box and symbolically: the pieces cover the box; every
size is its shape's product times the element bytes and is non-negative;
every slot holds its members' sizes with the rounding slack; every offset is
non-negative; for every two buffers live at one step, one of them is above
the other (``offset(b) - offset(c) - slot(c)``: for every term of
``offset(c)`` some term of ``offset(b)`` minus it is non-negative on the
piece, by :func:`onnxmem.core.symbolic.lower_bound`); and the arena is above every
buffer. A pair it cannot separate is searched for a colliding point (corners,
a grid and seeded random points) and reported with it. What the proof does
not check (the order is topological, the sizes and lifetimes are the model's,
the sharing follows the alias rules) the concrete proof checks at a point:
``onnxmem verify MODEL --plan RANGE --dim NAME=N`` instantiates and proves
that plan.
"""

from __future__ import annotations

import math
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from onnxmem.core.errors import OnnxmemError, PlanError, ShapeError, show_name
from onnxmem.core.fileio import write_bytes_atomic
from onnxmem.core.problem import Buffer, Problem, align_up, live_bytes, lower_bound
from onnxmem.core.symbolic import (
    Box,
    MaxPoly,
    Poly,
    box_corners,
    monomial_value,
    parse_expr,
    parse_poly,
)
from onnxmem.core.symbolic import lower_bound as poly_lower_bound
from onnxmem.plans.point import MAX_VALUE, MemoryPlan, PlannedTensor, plan_from_dict, read_plan_data

__all__ = [
    "RANGE_SCHEMA_VERSION",
    "Piece",
    "RangePlan",
    "RangeTensor",
    "find_collision",
    "instantiate",
    "is_range_data",
    "parse_dim_flags",
    "plan_range",
    "prove_range_plan",
    "range_from_dict",
    "any_plan_from_data",
    "read_any_plan",
    "read_range_plan",
    "render_range_plan",
    "write_range_plan",
]

#: the ``schema_version`` of a range plan (a concrete plan keeps plan.SCHEMA_VERSION)
RANGE_SCHEMA_VERSION = 2
#: most pieces a range plan is cut into
MAX_PIECES = 8
#: a piece is good enough when its arena is at most this much over the lower bound at its sample points
TOLERANCE = 0.01
#: most terms one offset keeps; past it two terms are replaced by their coefficient-wise maximum
MAX_TERMS = 24
#: most dims one range plan ranges over
MAX_RANGED = 4
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    group_offset: int = 0  # bytes from the buffer's start (a Concat input in its slice; single-point pieces only)


@dataclass(frozen=True, slots=True)
class Piece:
    """One layout, valid on ``box``: each buffer (``group``) at ``offsets[g]``, reserving ``slots[g]`` bytes."""

    box: dict[str, tuple[int, int]]
    order: tuple[str, ...]
    op_types: tuple[str, ...]
    tensors: tuple[RangeTensor, ...]
    offsets: dict[str, MaxPoly]
    slots: dict[str, Poly]
    arena: MaxPoly

    def contains(self, point: Mapping[str, int]) -> bool:
        return all(lo <= point[k] <= hi for k, (lo, hi) in self.box.items())

    def arena_at(self, point: Mapping[str, int], alignment: int) -> int:
        """The arena at ``point``: the end of the highest buffer, each at its rounded-up offset.

        Never above ``align_up(arena(point))`` (see the module docstring).
        """
        return _gauge(self, alignment).at(point)[0]


@dataclass(frozen=True, slots=True)
class RangePlan:
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
    pieces: tuple[Piece, ...]
    warnings: tuple[str, ...] = ()
    schema_version: int = RANGE_SCHEMA_VERSION
    #: constant folding (``--fold``): values computed only from weights are weights at every point
    fold: bool = True

    def piece_at(self, point: Mapping[str, int]) -> tuple[int, Piece]:
        for i, p in enumerate(self.pieces):
            if p.contains(point):
                return i, p
        where = ", ".join(f"{k}={v}" for k, v in sorted(point.items()))
        box = ", ".join(f"{k}={lo}:{hi}" for k, (lo, hi) in sorted(self.box.items()))
        raise ShapeError(f"point {where} is outside the range plan's box {box}; give dims inside it")

    def arena_at(self, point: Mapping[str, int]) -> int:
        return self.piece_at(point)[1].arena_at(point, self.alignment)

    def corners(self) -> list[dict[str, int]]:
        return box_corners(self.box)


# ------------------------------------------------------------------ flags


def parse_dim_flags(texts: Iterable[str]) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """``--dim`` texts split into bound dims (``NAME=N``) and ranges (``NAME=LO:HI``, inclusive)."""
    from onnxmem.model import parse_dim_binding

    fixed: dict[str, int] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for text in texts:
        name, _, value = text.partition("=")
        if ":" not in value:
            k, v = parse_dim_binding(text)
            fixed[k] = v
            continue
        lo_text, _, hi_text = value.partition(":")
        try:
            lo, hi = int(lo_text), int(hi_text)
        except ValueError:
            raise ShapeError(f"--dim {show_name(text)} is not NAME=LO:HI with integers; write e.g. "
                             "--dim batch=1:8") from None
        name = name.strip()
        if not _IDENT.fullmatch(name) or name.lower() == "max":
            raise ShapeError(f"--dim {show_name(text)}: a ranged dim must be named by an identifier "
                             "([A-Za-z_][A-Za-z0-9_]*, not 'max'); bind it to one value instead")
        if not 0 <= lo <= hi <= 2**31:
            raise ShapeError(f"--dim {show_name(text)}: a range needs 0 <= LO <= HI <= 2^31; "
                             "write e.g. --dim batch=1:8")
        ranges[name] = (lo, hi)
    overlap = set(fixed) & set(ranges)
    if overlap:
        raise ShapeError(f"--dim {show_name(sorted(overlap)[0])} is given a value and a range; give one")
    if len(ranges) > MAX_RANGED:
        raise ShapeError(f"--dim ranges {len(ranges)} dims; a range plan ranges at most {MAX_RANGED}")
    return fixed, ranges


def parse_point(texts: Iterable[str], box: Box) -> dict[str, int]:
    """``--dim NAME=N`` texts as a point of ``box`` (0 allowed where the box has it); every ranged dim given."""
    point: dict[str, int] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        name = name.strip()
        try:
            v = int(value)
        except ValueError:
            raise ShapeError(f"--dim {show_name(text)} is not NAME=N with an integer N") from None
        if not sep or name not in box:
            raise ShapeError(f"--dim {show_name(text)}: the range plan ranges "
                             f"{', '.join(sorted(box))}; give one --dim NAME=N for each")
        point[name] = v
    missing = sorted(set(box) - set(point))
    if missing:
        raise ShapeError(f"the range plan ranges {', '.join(missing)} too; pass --dim "
                         + " --dim ".join(f"{m}=N" for m in missing))
    for name, v in point.items():
        lo, hi = box[name]
        if not lo <= v <= hi:
            raise ShapeError(f"--dim {name}={v} is outside the plan's range {lo}:{hi}; give a value inside it")
    return point


# ------------------------------------------------------------------ planning


@dataclass(frozen=True, slots=True)
class _Symbolic:
    """The model's values with polynomial shapes."""

    dtypes: dict[str, int]
    shapes: dict[str, tuple[Poly, ...]]

    def shape_info(self, point: Mapping[str, int]) -> Any:
        from onnxmem.shapes import ShapeInfo

        return ShapeInfo(
            dict(self.dtypes),
            {n: tuple(d.evaluate(point) for d in sh) for n, sh in self.shapes.items()},
            {n: "symbolic" for n in self.shapes},
        )


def _poly_dim(d: Any, names: Mapping[str, str]) -> Poly | None:
    if isinstance(d, int):
        return Poly.const(d) if d >= 0 else None
    if not isinstance(d, str):
        return None
    if d in names:
        return Poly.var(names[d])
    return parse_poly(d, names)


def symbolic_shapes(model: Any, box: Box, dims: Mapping[str, int]) -> _Symbolic:
    """Every value's shape as polynomials in the ranged dims, or ``ShapeError`` naming the ones that are not."""
    from onnxmem.shapes import infer_symbolic_shapes, top_level_values

    ranged: dict[str, str] = {}

    def accept(shape: tuple[Any, ...], original: Mapping[str, str]) -> bool:
        ranged.update({safe: name for safe, name in original.items() if name in box})
        return all(_poly_dim(d, ranged) is not None for d in shape)

    found, original = infer_symbolic_shapes(model, list(box), dims=dims, accept=accept)
    ranged = {safe: name for safe, name in original.items() if name in box}
    missing = [n for n in top_level_values(model) if n not in found]
    if missing:
        shown = ", ".join(map(show_name, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ShapeError(
            f"sizes of {len(missing)} tensors are not polynomials in the ranged dims ({shown}); "
            "bind those dims to one value (--dim NAME=N) or plan each shape on its own"
        )
    shapes = {n: tuple(_poly_dim(d, ranged) for d in sh) for n, (_, sh) in found.items()}
    return _Symbolic({n: et for n, (et, _) in found.items()}, shapes)  # type: ignore[arg-type]


def _size_poly(elem_type: int, shape: Sequence[Poly], name: str) -> Poly:
    from onnxmem.model import dtype_bits

    bits = dtype_bits(elem_type)
    numel = Poly.const(1)
    for d in shape:
        numel = numel * d
    c = numel.constant()
    if c is not None:
        return Poly.const((bits * c + 7) // 8)
    if bits % 8:
        raise ShapeError(f"tensor {show_name(name)} has {bits}-bit elements and a shape that depends on a "
                         "ranged dim; its bytes are no polynomial: bind the dim to one value")
    return numel * (bits // 8)


def slot_of(size: Poly, alignment: int) -> Poly:
    """The bytes a buffer of ``size`` reserves in a range plan: room for rounding up at every point."""
    c = size.constant()
    if c is not None:
        return Poly.const(align_up(c, alignment))
    return size + (alignment - math.gcd(alignment, size.content()))


def _cap(terms: MaxPoly, box: Box) -> MaxPoly:
    """``terms`` pruned on ``box``, and past ``MAX_TERMS`` merged pairwise into coefficient-wise maxima."""
    out = terms.pruned(box)
    ts = list(out.terms)
    while len(ts) > MAX_TERMS:
        a, b = ts.pop(), ts.pop()
        coeffs = dict(a.terms)
        for m, c in b.terms:
            coeffs[m] = max(coeffs.get(m, 0), c)
        for m in dict(a.terms):
            if m not in dict(b.terms):
                coeffs[m] = max(coeffs[m], 0)
        ts.append(Poly._of(coeffs))  # >= a and >= b wherever every dim is >= 0
        ts = list(MaxPoly.of(ts).pruned(box).terms)
    return MaxPoly.of(ts)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def symbolic_offsets(
    spans: Mapping[str, tuple[int, int]],
    slots: Mapping[str, Poly],
    ref_offsets: Mapping[str, int],
    box: Box,
) -> tuple[dict[str, MaxPoly], MaxPoly]:
    """Offsets (and the arena) that keep the stacking of a concrete solution at every point of ``box``.

    ``spans``: each buffer's steps ``[start, end)``; ``slots``: its reserved
    bytes; ``ref_offsets``: where a concrete solution put it. See the module
    docstring, step 4.
    """
    ranked = sorted(spans, key=lambda g: (ref_offsets[g], ref_offsets[g] + 0, g))
    offsets: dict[str, MaxPoly] = {}
    placed: list[str] = []
    zero = MaxPoly.const(0)
    for g in ranked:
        below = [c for c in placed if _overlap(spans[c], spans[g])]
        # a buffer below another buffer below g is implied by it (slots are >= 0)
        direct = [c for i, c in enumerate(below)
                  if not any(_overlap(spans[c], spans[d]) for d in below[i + 1:])]
        if not direct:
            offsets[g] = zero
        else:
            terms: list[Poly] = []
            for c in direct:
                terms.extend(t + slots[c] for t in offsets[c].terms)
            offsets[g] = _cap(MaxPoly.of(terms), box)
        placed.append(g)
    tops = [t + slots[g] for g in spans for t in offsets[g].terms]
    arena = _cap(MaxPoly.of(tops), box) if tops else zero
    return offsets, arena


def _split_groups(layout: Any, sizes: Mapping[str, Poly]) -> Any:
    """``layout`` without members whose size polynomial differs from their group's first member."""
    from onnxmem.analysis.liveness import AliasLayout

    if layout is None:
        return None
    groups: dict[str, tuple[str, ...]] = {}
    for gid, members in layout.groups.items():
        keep = tuple(m for m in members if m not in sizes or sizes[m] == sizes.get(members[0]))
        if len(keep) > 1:
            groups[gid] = keep
    return AliasLayout(groups, {})


def _plan_piece(model: Any, sym: _Symbolic, box: dict[str, tuple[int, int]], opts: Any,
                sizes: Mapping[str, Poly], order: Sequence[int] | None = None) -> Piece:
    from onnxmem.analysis.aliasing import alias_layout, shared_layout
    from onnxmem.analysis.liveness import build_liveness
    from onnxmem.core.solvers import SolveOptions, solve
    from onnxmem.graph import build_view
    from onnxmem.scheduling import OrderOptions, reorder

    ref = {k: hi for k, (_, hi) in box.items()}
    view = build_view(model, sym.shape_info(ref), fold=opts.fold)
    if order is None:
        order = reorder(view, opts.order, OrderOptions(timeout=opts.timeout, alignment=opts.alignment,
                                                       io=opts.io, inplace=opts.inplace))
    if opts.inplace and all(lo == hi for lo, hi in box.values()):
        # one point: every size is a constant, so the layout plan makes (Concat inputs in their slices too) holds
        layout = shared_layout(view, order, opts.io, opts.alignment)
    elif opts.inplace:
        layout = _split_groups(alias_layout(view, order, opts.io, alignment=opts.alignment, concat=False), sizes)
    else:
        layout = None
    liveness = build_liveness(view, order, layout, io=opts.io, alignment=opts.alignment)
    problem = liveness.problem
    solution = solve(problem, opts.solver, SolveOptions(timeout=opts.timeout, seed=opts.seed))
    if not solution.found:
        raise OnnxmemError(f"solver '{opts.solver}' found no plan ({solution.status}); try --solver greedy")
    ref_offsets = {b.id: int(solution.offsets[i]) for i, b in enumerate(problem.buffers)}
    spans = {b.id: (b.start, b.end) for b in problem.buffers}
    slots: dict[str, Poly] = {}
    for gid, members in liveness.groups.items():
        ivs = [liveness.interval(m) for m in members]
        if any(iv.offset for iv in ivs):  # a single-point piece: constant sizes
            slots[gid] = Poly.const(align_up(max(iv.offset + iv.size for iv in ivs), opts.alignment))
        else:
            slots[gid] = slot_of(sizes[members[0]], opts.alignment)
    offsets, arena = symbolic_offsets(spans, slots, ref_offsets, box)
    tensors = []
    for iv in liveness.intervals:
        t = view.tensors[iv.tensor]
        prod = view.ops[t.producer] if t.producer is not None else None
        tensors.append(RangeTensor(
            t.name, t.dtype, sym.shapes[t.name], sizes[t.name], iv.start, iv.end,
            prod.name if prod else None, prod.op_type if prod else None, t.kind, iv.group, iv.offset,
        ))
    return Piece(
        dict(box),
        tuple(view.ops[i].name for i in order),
        tuple(view.ops[i].op_type for i in order),
        tuple(tensors),
        offsets,
        slots,
        arena,
    )


def _values(lo: int, hi: int) -> list[int]:
    """Sample values of one dim: the ends, the middle and the geometric middle."""
    geo = int(round(math.sqrt(max(lo, 1) * hi)))
    return sorted({lo, hi, (lo + hi) // 2, min(max(geo, lo), hi)})


def _sample_points(box: Box) -> list[dict[str, int]]:
    """A grid of :func:`_values` over ``box`` (corners included)."""
    pts: list[dict[str, int]] = [{}]
    for k, (lo, hi) in sorted(box.items()):
        pts = [{**p, k: v} for p in pts for v in _values(lo, hi)]
    return pts


class _Gauge:
    """A piece's arena and lower bound at points, fast: every polynomial over one list of monomials."""

    def __init__(self, piece: Piece, alignment: int) -> None:
        self.alignment = alignment
        self.groups = sorted(piece.offsets)
        index = {g: i for i, g in enumerate(self.groups)}
        monos: dict[Any, int] = {}

        def coded(p: Poly) -> list[tuple[int, int]]:
            return [(monos.setdefault(m, len(monos)), c) for m, c in p.terms]

        span: dict[str, list[int]] = {}
        self.members: list[tuple[int, int, list[tuple[int, int]]]] = []
        for t in piece.tensors:
            sp = span.setdefault(t.group, [t.start, t.end])
            sp[0], sp[1] = min(sp[0], t.start), max(sp[1], t.end)
            self.members.append((index[t.group], t.group_offset, coded(t.size)))
        self.spans = [(span[g][0], span[g][1]) if g in span else (0, 0) for g in self.groups]
        self.terms = [(index[g], coded(term)) for g in self.groups for term in piece.offsets[g].terms]
        self.monos = list(monos)
        self.steps = max((e for _, e in self.spans), default=0)

    def at(self, point: Mapping[str, int]) -> tuple[int, int]:
        """``(arena, lower bound)`` at ``point``."""
        a = self.alignment
        v = [monomial_value(m, point) for m in self.monos]
        size = [0] * len(self.groups)
        for g, go, code in self.members:
            size[g] = max(size[g], go + sum(c * v[i] for i, c in code))
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


_GAUGES: dict[int, tuple[Piece, int, _Gauge]] = {}


def _gauge(piece: Piece, alignment: int) -> _Gauge:
    hit = _GAUGES.get(id(piece))
    if hit is not None and hit[0] is piece and hit[1] == alignment:
        return hit[2]
    if len(_GAUGES) > 64:
        _GAUGES.clear()
    g = _Gauge(piece, alignment)
    _GAUGES[id(piece)] = (piece, alignment, g)
    return g


def piece_bound(piece: Piece, point: Mapping[str, int], alignment: int) -> int:
    """The most bytes the piece's buffers hold at one step, at ``point`` (no layout goes below it)."""
    return _gauge(piece, alignment).at(point)[1]


def _buffers_at(piece: Piece, point: Mapping[str, int], alignment: int) -> list[Buffer]:
    span: dict[str, list[int]] = {}
    size: dict[str, int] = {}
    for t in piece.tensors:
        s = span.setdefault(t.group, [t.start, t.end])
        s[0], s[1] = min(s[0], t.start), max(s[1], t.end)
        size[t.group] = max(size.get(t.group, 0), t.group_offset + t.size.evaluate(point))
    return [Buffer(g, s, e, align_up(size[g], alignment), alignment) for g, (s, e) in span.items()]


def _ratio(piece: Piece, point: Mapping[str, int], alignment: int) -> float:
    arena, bound = _gauge(piece, alignment).at(point)
    return arena / bound if bound else 1.0


def _worst(piece: Piece, alignment: int) -> float:
    """The largest arena / lower bound over the piece's sample points."""
    return max(_ratio(piece, p, alignment) for p in _sample_points(piece.box))


def _halves(piece: Piece, alignment: int) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]] | None:
    """The piece's box cut in two at the geometric middle of the dim that moves the ratio most.

    A dim's effect is the worst ratio over its sample values with the other
    dims at the reference (high) corner; ``None`` for a single point.
    """
    box = piece.box
    ref = {k: hi for k, (_, hi) in box.items()}
    scored = []
    for k, (lo, hi) in box.items():
        if hi > lo:
            effect = max(_ratio(piece, {**ref, k: v}, alignment) for v in _values(lo, hi))
            scored.append((effect, max(hi, 1) / max(lo, 1), k))
    if not scored:
        return None
    k = max(scored)[2]
    lo, hi = box[k]
    cut = min(max(int(math.sqrt(max(lo, 1) * hi)), lo), hi - 1)
    return {**box, k: (lo, cut)}, {**box, k: (cut + 1, hi)}


def _cut_low(box: dict[str, tuple[int, int]]) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]] | None:
    """``box`` cut after the low value of its dim with the smallest low end (the low corner's own layout)."""
    open_dims = [(lo, k) for k, (lo, hi) in box.items() if hi > lo]
    if not open_dims:
        return None
    lo, k = min(open_dims)
    return {**box, k: (lo, lo)}, {**box, k: (lo + 1, box[k][1])}


def plan_range(
    model: Any,
    path: str | os.PathLike[str],
    box: Mapping[str, tuple[int, int]],
    options: Any = None,
    *,
    max_pieces: int = MAX_PIECES,
    tolerance: float = TOLERANCE,
) -> RangePlan:
    """A range plan of ``model`` over ``box`` (``{dim: (lo, hi)}``), proven before it is returned.

    ``options``: a :class:`onnxmem.planning.pipeline.PlanOptions` (its ``dims`` bind the
    other dims; ``input_shapes`` and ``measure_shapes`` have no range form).
    """
    from onnxmem.model import file_sha256
    from onnxmem.planning.pipeline import PlanOptions

    opts = options or PlanOptions()
    t0 = time.perf_counter()
    if opts.input_shapes or opts.measure_shapes:
        raise ShapeError("a range plan reads shapes symbolically; leave out --input-shape and "
                         "--measure-shapes (bind dims with --dim NAME=N)")
    if not box:
        raise ShapeError("a range plan needs at least one --dim NAME=LO:HI")
    full = {k: (int(lo), int(hi)) for k, (lo, hi) in sorted(box.items())}
    sym = symbolic_shapes(model, full, opts.dims)
    sizes = {n: _size_poly(sym.dtypes[n], sh, n) for n, sh in sym.shapes.items()}
    from onnxmem.analysis.aliasing import shared_layout
    from onnxmem.analysis.liveness import build_liveness
    from onnxmem.graph import build_view
    from onnxmem.scheduling import OrderOptions, reorder

    # one order, made at the box's high corner, for every piece of more than one point
    top = {k: hi for k, (_, hi) in full.items()}
    top_view = build_view(model, sym.shape_info(top), fold=opts.fold)
    shared_order = list(reorder(top_view, opts.order, OrderOptions(
        timeout=opts.timeout, alignment=opts.alignment, io=opts.io, inplace=opts.inplace)))

    def judged(b: dict[str, tuple[int, int]]) -> tuple[float, bool, Piece]:
        """(worst ratio, whether the low corner is the trouble, the piece) of a new piece over ``b``."""
        single = all(lo == hi for lo, hi in b.values())
        piece = _plan_piece(model, sym, b, opts, sizes, None if single else shared_order)
        grid = _worst(piece, opts.alignment)
        low = {k: lo for k, (lo, _) in b.items()}
        if single or not opts.inplace:
            return grid, False, piece
        view = build_view(model, sym.shape_info(low), fold=opts.fold)
        where = {op.name: i for i, op in enumerate(view.ops)}
        order = [where[n] for n in piece.order]
        # sharing that holds at the low corner only (Concat inputs in their slices at batch 1)
        nested = shared_layout(view, order, opts.io, opts.alignment)
        if not nested.offsets:
            return grid, False, piece
        own = piece_bound(piece, low, opts.alignment)
        if lower_bound(build_liveness(view, order, nested, io=opts.io, alignment=opts.alignment).problem) * (
                1 + tolerance) >= own:
            return grid, False, piece  # the slices save too little to matter
        alone = _plan_piece(model, sym, {k: (v, v) for k, v in low.items()}, opts, sizes,
                            order).arena_at(low, opts.alignment)
        at_low = piece.arena_at(low, opts.alignment) / alone if alone else 1.0
        return max(grid, at_low), at_low > max(grid, 1 + tolerance), piece

    work = [judged(full)]
    done: list[Piece] = []
    while work:
        work.sort(key=lambda wp: -wp[0])
        worst, low_trouble, piece = work.pop(0)
        halves = None
        if worst > 1 + tolerance and len(done) + len(work) + 2 <= max_pieces:
            halves = _cut_low(piece.box) if low_trouble else _halves(piece, opts.alignment)
        if halves is None:
            done.append(piece)
            continue
        work.extend(judged(h) for h in halves)
    done.sort(key=lambda p: tuple(p.box[k] for k in sorted(p.box)))

    weights = build_view(model, sym.shape_info({k: lo for k, (lo, _) in full.items()}), fold=opts.fold).weights_size
    plan = RangePlan(
        model={
            "path": str(path),
            "sha256": file_sha256(path),
            "ir_version": int(model.ir_version),
            "opset": {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import},
        },
        box=full,
        dims={k: int(v) for k, v in sorted(opts.dims.items())},
        io=opts.io,
        alignment=opts.alignment,
        inplace=opts.inplace,
        order_strategy=opts.order,
        solver=opts.solver,
        weights_size=int(weights),
        plan_seconds=0.0,
        pieces=tuple(done),
        fold=opts.fold,
    )
    findings = prove_range_plan(plan, limit=1)
    if findings:
        raise PlanError(f"the range plan made is wrong: {findings[0]}")
    return _with_seconds(plan, time.perf_counter() - t0)


def _with_seconds(plan: RangePlan, seconds: float) -> RangePlan:
    from dataclasses import replace

    return replace(plan, plan_seconds=round(seconds, 6))


# ------------------------------------------------------------------ instantiation


def instantiate(plan: RangePlan, point: Mapping[str, int]) -> MemoryPlan:
    """The concrete plan at ``point`` (every ranged dim bound), which ``onnxmem verify`` reads."""
    point = {k: int(point[k]) for k in plan.box}
    index, piece = plan.piece_at(point)
    a = plan.alignment
    offset = {g: align_up(e.evaluate(point), a) for g, e in piece.offsets.items()}
    tensors = tuple(
        PlannedTensor(
            name=t.name, dtype=t.dtype, shape=tuple(d.evaluate(point) for d in t.shape),
            size=t.size.evaluate(point), offset=offset[t.group] + t.group_offset, start=t.start, end=t.end,
            producer=t.producer, producer_op=t.producer_op, kind=t.kind, group=t.group,
            group_offset=t.group_offset,
        )
        for t in piece.tensors
    )
    buffers = _buffers_at(piece, point, a)
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


# ------------------------------------------------------------------ the static proof


@dataclass(frozen=True, slots=True)
class RangeFinding:
    """A rule a range plan breaks; ``point`` is a point of the box where it shows, when one was found."""

    rule: str
    message: str
    point: dict[str, int] | None = None

    def __str__(self) -> str:
        if self.point is None:
            return self.message
        at = ", ".join(f"{k}={v}" for k, v in sorted(self.point.items()))
        return f"{self.message} (at {at})"


#: most cells of the grid of piece boundaries the cover check walks; past it the plan is refused
MAX_CELLS = 100_000


def _covered(plan: RangePlan) -> dict[str, int] | None:
    """A point of the box no piece holds, or ``None`` when the pieces cover the box.

    Raises ``PlanError`` when the pieces cut the box into more than ``MAX_CELLS`` cells.
    """
    names = sorted(plan.box)
    cuts: dict[str, list[int]] = {}
    for k in names:
        lo, hi = plan.box[k]
        pts = {lo, hi + 1}
        for p in plan.pieces:
            plo, phi = p.box.get(k, (lo, hi))
            pts.update(v for v in (plo, phi + 1) if lo <= v <= hi + 1)
        cuts[k] = sorted(pts)
    cells: list[dict[str, int]] = [{}]
    for k in names:
        starts = cuts[k][:-1]
        cells = [{**c, k: s} for c in cells for s in starts]
        if len(cells) > MAX_CELLS:
            raise PlanError(f"the range plan's {len(plan.pieces)} pieces cut its box into more than "
                            f"{MAX_CELLS:,} cells; re-plan the model")
    for cell in cells:
        if not any(p.contains(cell) for p in plan.pieces):
            return cell
    return None


def _above(upper: MaxPoly, lower: MaxPoly, gap: Poly, box: Box) -> bool:
    """``upper >= lower + gap`` on ``box``: each term of ``lower`` has a term of ``upper`` above it by ``gap``."""
    ups = set(upper.terms)
    for q in lower.terms:
        need = q + gap
        if need in ups:
            continue
        if not any(poly_lower_bound(p - need, box) >= 0 for p in upper.terms):
            return False
    return True


def _probe_points(box: Box, seed: int = 0, count: int = 64) -> list[dict[str, int]]:
    grid: list[dict[str, int]] = [{}]
    for k, (lo, hi) in sorted(box.items()):
        vals = sorted({lo, hi, (lo + hi) // 2, min(lo + 1, hi), max(hi - 1, lo)})
        grid = [{**g, k: v} for g in grid for v in vals]
    rng = random.Random(seed)
    for _ in range(count):
        grid.append({k: rng.randint(lo, hi) for k, (lo, hi) in sorted(box.items())})
    return grid


def find_collision(piece: Piece, a: str, b: str, alignment: int) -> dict[str, int] | None:
    """A point of the piece where buffers ``a`` and ``b`` (both non-empty there) share a byte."""
    sizes: dict[str, list[Poly]] = {}
    for t in piece.tensors:
        sizes.setdefault(t.group, []).append(t.size)
    for p in _probe_points(piece.box):
        oa = align_up(piece.offsets[a].evaluate(p), alignment)
        ob = align_up(piece.offsets[b].evaluate(p), alignment)
        sa = max((s.evaluate(p) for s in sizes.get(a, [])), default=0)
        sb = max((s.evaluate(p) for s in sizes.get(b, [])), default=0)
        if sa > 0 and sb > 0 and oa < ob + sb and ob < oa + sa:
            return p
    return None


def _negative_at(expr: Poly, box: Box) -> dict[str, int] | None:
    for p in _probe_points(box):
        if expr.evaluate(p) < 0:
            return p
    return None


def prove_range_plan(plan: RangePlan, *, limit: int | None = None) -> list[RangeFinding]:
    """Every rule ``plan`` breaks on its box (see the module docstring); empty means proven."""
    from onnxmem.model import DTYPES

    found: list[RangeFinding] = []
    bits_of = {name: bits for name, bits in DTYPES.values()}

    def full() -> bool:
        return limit is not None and len(found) >= limit

    hole = _covered(plan)
    if hole is not None:
        found.append(RangeFinding("cover", "no piece of the range plan holds this point", hole))
    for i, piece in enumerate(plan.pieces):
        if full():
            break
        box = piece.box
        if set(box) != set(plan.box) or any(
            not (plan.box[k][0] <= lo <= hi <= plan.box[k][1]) for k, (lo, hi) in box.items()
        ):
            found.append(RangeFinding("cover", f"piece {i}'s box is not inside the plan's box"))
            continue
        where = f"piece {i}"
        members: dict[str, list[RangeTensor]] = {}
        for t in piece.tensors:
            members.setdefault(t.group, []).append(t)
            bits = bits_of.get(t.dtype)
            numel = Poly.const(1)
            for d in t.shape:
                numel = numel * d
            expect = None
            if bits is not None and numel.constant() is not None:
                expect = Poly.const((bits * int(numel.constant() or 0) + 7) // 8)
            elif bits is not None and bits % 8 == 0:
                expect = numel * (bits // 8)
            if expect is None or expect != t.size:
                found.append(RangeFinding("size", f"{where}: tensor {show_name(t.name)} has size {t.size} "
                                          f"but its shape and dtype give {expect}"))
            elif poly_lower_bound(t.size, box) < 0:
                found.append(RangeFinding("size", f"{where}: tensor {show_name(t.name)} has a size that "
                                          "may be negative", _negative_at(t.size, box)))
            if t.group not in piece.offsets or t.group not in piece.slots:
                found.append(RangeFinding("group", f"{where}: tensor {show_name(t.name)} is in buffer "
                                          f"{show_name(t.group)}, which has no offset or slot"))
        if full() or found:
            continue
        a = plan.alignment
        spans: dict[str, tuple[int, int]] = {}
        for g, ts in members.items():
            spans[g] = (min(t.start for t in ts), max(t.end for t in ts))
            slot = piece.slots[g]
            for t in ts:
                c = t.size.constant()
                go = t.group_offset
                ok = go % a == 0 and (
                    (c is not None and poly_lower_bound(slot, box) >= align_up(go + c, a))
                    or (c is None and poly_lower_bound(
                        slot - t.size - go - (a - math.gcd(a, t.size.content())), box) >= 0))
                if not ok:
                    found.append(RangeFinding("slot", f"{where}: buffer {show_name(g)} reserves {slot} bytes, "
                                              f"less than tensor {show_name(t.name)} may need ({t.size} rounded "
                                              f"up to {a})"))
            if not any(poly_lower_bound(p, box) >= 0 for p in piece.offsets[g].terms):
                found.append(RangeFinding("offset", f"{where}: buffer {show_name(g)} has an offset that may be "
                                          "negative", None))
            if not _above(piece.arena, piece.offsets[g], slot, box):
                found.append(RangeFinding("arena", f"{where}: buffer {show_name(g)} may end past the arena"))
        if full():
            break
        ids = sorted(spans, key=lambda g: spans[g])
        for x, ga in enumerate(ids):
            end_a = spans[ga][1]
            for gb in ids[x + 1:]:
                if spans[gb][0] >= end_a:
                    break
                oa, ob = piece.offsets[ga], piece.offsets[gb]
                if _above(ob, oa, piece.slots[ga], box) or _above(oa, ob, piece.slots[gb], box):
                    continue
                p = find_collision(piece, ga, gb, a)
                s, e = max(spans[ga][0], spans[gb][0]), min(spans[ga][1], spans[gb][1])
                ta, tb = members[ga][0].name, members[gb][0].name
                if p is not None:
                    msg = (f"{where}: tensors {show_name(ta)} and {show_name(tb)} are live together in steps "
                           f"[{s}, {e}) and share bytes")
                else:
                    msg = (f"{where}: tensors {show_name(ta)} and {show_name(tb)} are live together in steps "
                           f"[{s}, {e}) and no offset expression keeps them apart on the whole box "
                           "(no colliding point found)")
                found.append(RangeFinding("overlap", msg, p))
                if full():
                    return found
    return found[:limit] if limit else found


# ------------------------------------------------------------------ JSON


def _box_dict(box: Mapping[str, tuple[int, int]]) -> dict[str, list[int]]:
    return {k: [int(lo), int(hi)] for k, (lo, hi) in sorted(box.items())}


def range_to_dict(plan: RangePlan) -> dict[str, Any]:
    pieces = []
    for p in plan.pieces:
        groups = sorted(p.offsets)
        pieces.append({
            "box": _box_dict(p.box),
            "order": list(p.order),
            "op_types": list(p.op_types),
            "arena": str(p.arena),
            "buffers": [{"id": g, "offset": str(p.offsets[g]), "slot": str(p.slots[g])} for g in groups],
            "tensors": [
                {"name": t.name, "dtype": t.dtype, "shape": [str(d) for d in t.shape], "size": str(t.size),
                 "start": t.start, "end": t.end, "producer": t.producer, "producer_op": t.producer_op,
                 "kind": t.kind, "group": t.group, **({"group_offset": t.group_offset} if t.group_offset else {})}
                for t in p.tensors
            ],
        })
    return {
        "schema_version": plan.schema_version,
        "range": {
            "model": plan.model,
            "box": _box_dict(plan.box),
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
            if (not _IDENT.fullmatch(k) or k.lower() == "max" or not isinstance(v, list) or len(v) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                    or not 0 <= v[0] <= v[1] <= 2**31):
                raise self.fail(f"{path}/{k}", "is not a dim name with [LO, HI], 0 <= LO <= HI <= 2^31")
            out[k] = (v[0], v[1])
        return out

    def piece_box(self, d: Any, box: Box, path: str) -> dict[str, tuple[int, int]]:
        """A piece's box: exactly the plan's ranged dims, each inside the plan's range."""
        out = self.box(d, path)
        for k, (lo, hi) in out.items():
            if k not in box:
                raise self.fail(f"{path}/{k}", f"is a dim the plan does not range (its box ranges "
                                               f"{', '.join(map(show_name, sorted(box)))})")
            if not box[k][0] <= lo <= hi <= box[k][1]:
                raise self.fail(f"{path}/{k}", f"is outside the plan's range of the dim, {list(box[k])}")
        missing = sorted(set(box) - set(out))
        if missing:
            raise self.fail(f"{path}/{missing[0]}", "is missing (a piece ranges every dim of the plan's box)")
        return out

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


def range_from_dict(data: Any, where: str = "range plan") -> RangePlan:
    """The range plan in ``data`` (parsed JSON), every field checked and every expression parsed."""
    r = _Reader(where)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != RANGE_SCHEMA_VERSION:
        raise PlanError(f"{where} has schema_version {version!r}; this onnxmem reads range plans of "
                        f"version {RANGE_SCHEMA_VERSION}: re-plan the model")
    d = r.get(data, "range", dict, "")
    box = r.box(d.get("box"), "range/box")
    names = set(box)
    dims = r.get(d, "dims", dict, "range")
    for k, v in dims.items():
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < MAX_VALUE:
            raise r.fail(f"range/dims/{k}", "is not a non-negative integer")
    pieces: list[Piece] = []
    raw = r.get(d, "pieces", list, "range")
    if not raw:
        raise r.fail("range/pieces", "is empty")
    for i, p in enumerate(raw):
        at = f"range/pieces/{i}"
        pbox = r.piece_box(r.get(p, "box", dict, at), box, f"{at}/box")
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
                group_offset=r.get(t, "group_offset", int, tp) if "group_offset" in t else 0,
            ))
        for j, t in enumerate(tensors):
            if t.group not in offsets or t.group not in slots:
                raise r.fail(f"{at}/tensors/{j}/group", "names no buffer of the piece")
        pieces.append(Piece(pbox, tuple(order), tuple(op_types), tuple(tensors), offsets, slots,
                            r.expr(r.get(p, "arena", str, at), names, f"{at}/arena")))
    alignment = r.get(d, "alignment", int, "range")
    if alignment < 1:
        raise r.fail("range/alignment", "is below 1")
    seconds = d.get("plan_seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
        raise r.fail("range/plan_seconds", "is not a finite number")
    warnings = r.get(d, "warnings", list, "range")
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
    )


def read_range_plan(path: str | os.PathLike[str]) -> RangePlan:
    """Read a range plan file; a concrete plan is an error that says so."""
    data, where = read_plan_data(path)
    if not is_range_data(data):
        raise PlanError(f"{where} is a plan for one shape, not a range plan; make one with "
                        "'onnxmem plan MODEL --dim NAME=LO:HI -o PLAN'")
    return range_from_dict(data, where)


def read_any_plan(path: str | os.PathLike[str]) -> MemoryPlan | RangePlan:
    """A plan file of either kind: a concrete :class:`MemoryPlan` or a :class:`RangePlan`."""
    return any_plan_from_data(*read_plan_data(path))


def any_plan_from_data(data: Any, where: str) -> MemoryPlan | RangePlan:
    """Parsed plan JSON (:func:`onnxmem.plans.point.read_plan_data`) of either kind, checked."""
    if is_range_data(data):
        return range_from_dict(data, where)
    return plan_from_dict(data, where)


def render_range_plan(plan: RangePlan) -> bytes:
    import json

    return (json.dumps(range_to_dict(plan), indent=1) + "\n").encode("utf-8")


def write_range_plan(plan: RangePlan, path: str | os.PathLike[str]) -> None:
    write_bytes_atomic(path, render_range_plan(plan), "-o")


def render_range_summary(plan: RangePlan, *, width: int = 200) -> list[str]:
    """``onnxmem show``'s lines for a range plan: the box, the pieces, the arena and its value at the corners."""
    from onnxmem.report.text import format_bytes

    def fmt_bytes(n: int) -> str:
        return f"{format_bytes(n)} ({n:,} B)"

    lines = [
        f"model        {show_name(str(plan.model.get('path', '?')))}",
        "range        " + "  ".join(f"{k}={lo}:{hi}" for k, (lo, hi) in sorted(plan.box.items()))
        + ("   bound " + " ".join(f"{k}={v}" for k, v in plan.dims.items()) if plan.dims else ""),
        f"pieces       {len(plan.pieces)}   alignment {plan.alignment}   solver {show_name(plan.solver)}   "
        f"plan {plan.plan_seconds:.3f} s",
    ]
    for i, p in enumerate(plan.pieces):
        text = str(p.arena)
        if len(text) > width:
            text = text[:width] + f" ... ({len(p.arena.terms)} terms)"
        box = " ".join(f"{k}={lo}:{hi}" for k, (lo, hi) in sorted(p.box.items()))
        lines.append(f"piece {i:<6} {box}   {len(p.tensors)} tensors   arena = align({text})")
    lines.append("arena at the corners:")
    for c in plan.corners():
        at = " ".join(f"{k}={v}" for k, v in sorted(c.items()))
        lines.append(f"  {at:<30} {fmt_bytes(plan.arena_at(c))}")
    return lines
