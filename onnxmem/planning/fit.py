"""Will a model fit in N bytes, and the largest batch or sequence that does: ``onnxmem fit``.

The deployment's total at a point of the dims (:class:`Footprint`) is

    weights + arena + inputs + outputs + fixed

* ``weights``: the initializers' stored bytes (and the values folded into weights, as
  onnxruntime folds them at session start), as the range plan counts them;
* ``arena``: the range plan's arena at the point (:meth:`onnxmem.plans.range.RangePlan.arena_at`);
* ``inputs``, ``outputs``: the graph inputs and outputs at the point; a KV cache (inputs named
  ``past...``, outputs named ``present...``) is shown on its own line. With the plan's ``io``
  ``internal`` (the default) they are inside the arena and add nothing; with ``external``
  they are added;
* ``fixed``: the provider's fixed cost, measured by the caller
  (:func:`onnxmem.runtime.fixed_cost`).

How the largest value is found (:func:`fit_model`):

1. plan the range once (:func:`onnxmem.planning.ranges.plan_range`) over the box;
2. along the searched dim, the other dims held at their value, take the range plan's pieces
   in turn from the highest; a piece whose arena terms, slots and input and output sizes
   have no negative coefficient has a total that never falls as the dim grows, so the
   largest value that fits in it is found by bisection; any other piece is scanned value
   by value (at most :data:`MAX_SCAN` values);
3. the first piece (from the top) with a value that fits gives the answer: the largest value
   of the box whose total is at most the memory. The total is *monotone* when every piece
   is, and no piece starts below where the one before it ends; otherwise a smaller value
   may not fit, and the result says so.

With two ranged dims the answer is a *frontier*: for each value of the first (every value,
or :data:`FRONTIER_ROWS` spread geometrically over a long range), the largest of the second.

What is not counted: onnxruntime's own arena policy (its CPU arena grows in chunks that
double, and its memory patterns allocate one more block after the first run), kernel
scratch (im2col buffers) and weights prepacked into a second layout. docs/fit.md measures
each against real sessions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxmem.core.errors import OnnxmemError, ShapeError
from onnxmem.core.symbolic import Poly
from onnxmem.planning.pipeline import PlanOptions
from onnxmem.planning.ranges import plan_range, size_poly, symbolic_shapes
from onnxmem.plans.range import RangePiece, RangePlan

if TYPE_CHECKING:
    import onnx

__all__ = ["FRONTIER_ROWS", "MAX_SCAN", "OPTIMIZE_LEVELS", "Fit", "FitReport", "Footprint", "fit_model",
           "fit_to_dict", "footprint_at", "io_sizes", "log_spaced"]

#: most values of one piece scanned one by one when its total may fall as the dim grows
MAX_SCAN = 100_000
#: most rows of a two-dim frontier
FRONTIER_ROWS = 24
#: graph optimization levels the plan can be made at (only the graph as written, for now)
OPTIMIZE_LEVELS = ("none",)

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Footprint:
    """The deployment's bytes at ``point``; ``io_in_arena``: inputs and outputs are inside the arena."""

    point: dict[str, int]
    weights: int
    arena: int
    inputs: int
    outputs: int
    kv_cache: int
    fixed: int
    io_in_arena: bool

    @property
    def io(self) -> int:
        """Bytes of inputs, outputs and KV cache that the arena does not hold."""
        return 0 if self.io_in_arena else self.inputs + self.outputs + self.kv_cache

    @property
    def total(self) -> int:
        return self.weights + self.arena + self.io + self.fixed

    def items(self) -> dict[str, int]:
        """Each item in bytes, the total last."""
        return {"weights": self.weights, "arena": self.arena, "inputs": self.inputs, "outputs": self.outputs,
                "kv_cache": self.kv_cache, "io_outside_arena": self.io, "fixed": self.fixed, "total": self.total}


@dataclass(frozen=True, slots=True)
class Fit:
    """The largest ``value`` of ``dim`` that fits in ``memory`` (``None``: not even the smallest),
    with the other dims at ``at.point``; ``at``: the footprint there (at the smallest value when
    none fits); ``next``: at the next value, when the box has one; ``reason``: one line."""

    dim: str
    memory: int
    value: int | None
    reason: str
    at: Footprint
    next: Footprint | None
    monotone: bool

    @property
    def margin(self) -> int:
        """Memory left at the answer (negative: how far over it the smallest value is)."""
        return self.memory - self.at.total


@dataclass(frozen=True, slots=True)
class FitReport:
    """Every fit of one ``onnxmem fit`` run: one row, or a frontier (one row per value of
    ``frontier_dim``)."""

    plan: RangePlan
    memory: int
    device: str
    optimize: str
    fits: tuple[Fit, ...]
    io: dict[str, Poly]
    fixed: int
    frontier_dim: str | None = None
    warnings: tuple[str, ...] = field(default=())

    def footprint(self, point: Mapping[str, int]) -> Footprint:
        """The deployment's bytes at ``point`` (for a curve of the total along a dim)."""
        return footprint_at(self.plan, self.io, self.fixed, point)

    @property
    def answer(self) -> Fit:
        """The row that answers: the last row that fits (the largest value of the frontier's dim), else the first."""
        fitting = [f for f in self.fits if f.value is not None]
        return fitting[-1] if fitting else self.fits[0]


def _names(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    inits = {i.name for i in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in inits], [v.name for v in model.graph.output]


def _is_kv(name: str, prefixes: Sequence[str]) -> bool:
    low = name.lower()
    return any(low.startswith(p) for p in prefixes)


def io_sizes(model: onnx.ModelProto, box: Mapping[str, tuple[int, int]],
             dims: Mapping[str, int]) -> dict[str, Poly]:
    """Bytes of the graph inputs, outputs and KV cache as polynomials in the ranged dims:
    ``{"inputs": ..., "outputs": ..., "kv_cache": ...}``."""
    sym = symbolic_shapes(model, dict(box), dims)
    ins, outs = _names(model)
    total = {"inputs": Poly.const(0), "outputs": Poly.const(0), "kv_cache": Poly.const(0)}
    for names, kind, prefixes in ((ins, "inputs", ("past",)), (outs, "outputs", ("present",))):
        for n in names:
            if n not in sym.shapes:
                raise ShapeError(f"graph {kind[:-1]} {n!r} has no shape; bind its dims with --dim NAME=N")
            size = size_poly(sym.dtypes[n], sym.shapes[n], n)
            key = "kv_cache" if _is_kv(n, prefixes) else kind
            total[key] = total[key] + size
    return total


def _nonnegative(p: Poly) -> bool:
    return all(c >= 0 for _, c in p.terms)


def _monotone_piece(piece: RangePiece, io: Mapping[str, Poly]) -> bool:
    return (all(_nonnegative(t) for t in piece.arena.terms) and all(_nonnegative(s) for s in piece.slots.values())
            and all(_nonnegative(p) for p in io.values()))


def footprint_at(plan: RangePlan, io: Mapping[str, Poly], fixed: int, point: Mapping[str, int]) -> Footprint:
    """The deployment's bytes at ``point`` (every ranged dim of ``plan``): ``io`` from :func:`io_sizes`."""
    point = dict(point)
    return Footprint(point, plan.weights_size, plan.arena_at(point), io["inputs"].evaluate(point),
                     io["outputs"].evaluate(point), io["kv_cache"].evaluate(point), fixed, plan.io == "internal")


class _Search:
    """The totals of one plan, evaluated at points (step 2 of the module docstring)."""

    def __init__(self, plan: RangePlan, io: Mapping[str, Poly], fixed: int, memory: int) -> None:
        self.plan, self.io, self.fixed, self.memory = plan, io, fixed, memory

    def footprint(self, point: Mapping[str, int]) -> Footprint:
        return footprint_at(self.plan, self.io, self.fixed, point)

    def fits(self, point: Mapping[str, int]) -> bool:
        return self.footprint(point).total <= self.memory

    def largest_in(self, piece: RangePiece, dim: str, base: Mapping[str, int]) -> int | None:
        """The largest value of ``dim`` in ``piece`` that fits (``base``: the other dims)."""
        lo, hi = piece.box[dim]
        if _monotone_piece(piece, self.io):
            if not self.fits({**base, dim: lo}):
                return None
            while lo < hi:  # lo fits
                mid = (lo + hi + 1) // 2
                if self.fits({**base, dim: mid}):
                    lo = mid
                else:
                    hi = mid - 1
            return lo
        if hi - lo + 1 > MAX_SCAN:
            raise OnnxmemError(f"the total along --dim {dim} may fall as it grows on {dim}={lo}:{hi}, too long "
                               f"to scan ({MAX_SCAN:,} values at most); give a shorter range")
        return next((v for v in range(hi, lo - 1, -1) if self.fits({**base, dim: v})), None)

    def along(self, dim: str, base: Mapping[str, int]) -> Fit:
        """Steps 2 and 3 of the module docstring along ``dim``."""
        pieces = sorted((p for p in self.plan.pieces
                         if all(p.box[k][0] <= v <= p.box[k][1] for k, v in base.items())),
                        key=lambda p: p.box[dim][0])
        lo, hi = self.plan.box[dim]
        monotone = all(_monotone_piece(p, self.io) for p in pieces) and all(
            self.footprint({**base, dim: a.box[dim][1]}).total <= self.footprint({**base, dim: b.box[dim][0]}).total
            for a, b in zip(pieces, pieces[1:]))
        value = next((v for v in (self.largest_in(p, dim, base) for p in reversed(pieces)) if v is not None), None)
        at = self.footprint({**base, dim: lo if value is None else value})
        nxt = self.footprint({**base, dim: value + 1}) if value is not None and value < hi else None
        where = ", ".join(f"{k}={v}" for k, v in sorted(base.items()))
        where = f" (with {where})" if where else ""
        if value is None:
            reason = (f"even {dim}={lo} needs {at.total:,} B, {at.total - self.memory:,} B over the memory"
                      f"{where}")
        elif nxt is None:
            reason = f"every value of {dim}={lo}:{hi} fits{where}; widen the range to look further"
        else:
            reason = f"{dim}={value + 1} needs {nxt.total:,} B, {nxt.total - self.memory:,} B over the memory{where}"
        return Fit(dim, self.memory, value, reason, at, nxt, monotone)


def _rows(lo: int, hi: int) -> list[int]:
    """The values of a frontier's first dim: all of them, or ``FRONTIER_ROWS`` spread geometrically."""
    return list(range(lo, hi + 1)) if hi - lo + 1 <= FRONTIER_ROWS else log_spaced(lo, hi, FRONTIER_ROWS)


def fit_model(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    memory: int,
    box: Mapping[str, tuple[int, int]],
    options: PlanOptions | None = None,
    *,
    fixed: int = 0,
    device: str = "cpu",
    optimize: str = "none",
    progress: Say | None = None,
) -> FitReport:
    """The largest value of the ranged dim(s) of ``box`` whose deployment fits in ``memory`` bytes.

    ``options``: the plan's options (``dims`` binds the other dims); ``fixed``: the provider's fixed
    cost in bytes (:func:`onnxmem.runtime.fixed_cost`); ``optimize``: the graph optimization level
    the plan is made at (:data:`OPTIMIZE_LEVELS`). One ranged dim gives one row; two give a frontier.
    """
    say = progress or (lambda _msg: None)
    if optimize not in OPTIMIZE_LEVELS:
        raise OnnxmemError(f"optimize level {optimize!r} is not one of {', '.join(OPTIMIZE_LEVELS)}; the plan is "
                           "made on the graph as written")
    if not 0 < memory:
        raise OnnxmemError("--memory must be above 0 bytes; give e.g. --memory 8GiB")
    if not 1 <= len(box) <= 2:
        raise ShapeError(f"fit searches one ranged dim, or two for a frontier; {len(box)} are ranged: give "
                         "--dim NAME=LO:HI for one or two dims and bind the others with --dim NAME=N")
    opts = options or PlanOptions()
    say(f"planning the range {' '.join(f'{k}={lo}:{hi}' for k, (lo, hi) in box.items())}")
    plan = plan_range(model, path, box, opts)
    say("sizing the inputs and outputs")
    io = io_sizes(model, plan.box, opts.dims)
    search = _Search(plan, io, fixed, memory)
    say("searching")
    dims = list(box)
    if len(dims) == 1:
        fits: tuple[Fit, ...] = (search.along(dims[0], {}),)
        first = None
    else:
        first, second = dims
        fits = tuple(search.along(second, {first: v}) for v in _rows(*plan.box[first]))
    warnings = tuple(f"the total is not monotone along --dim {f.dim}{_where(f)}: a value below the answer "
                     "may not fit" for f in fits if not f.monotone)
    return FitReport(plan, memory, device, optimize, fits, io, fixed, first, warnings)


def _where(f: Fit) -> str:
    others = {k: v for k, v in f.at.point.items() if k != f.dim}
    return f" (with {', '.join(f'{k}={v}' for k, v in sorted(others.items()))})" if others else ""


def _row(f: Fit) -> dict[str, Any]:
    return {
        "point": f.at.point,
        "value": f.value,
        "reason": f.reason,
        "items": f.at.items(),
        "margin": f.margin,
        "next": None if f.next is None else {"point": f.next.point, "items": f.next.items()},
        "monotone": f.monotone,
    }


def fit_to_dict(report: FitReport) -> dict[str, Any]:
    """The ``--json`` form: the answer under ``fit`` (dim -> its largest value, ``None`` when even the
    smallest does not fit), ``reason``, each item in bytes, and every row of a frontier."""
    best = report.answer
    answer: dict[str, int | None] = {best.dim: best.value}
    if report.frontier_dim is not None:
        answer = {report.frontier_dim: best.at.point[report.frontier_dim] if best.value is not None else None,
                  best.dim: best.value}
    out: dict[str, Any] = {
        "fit": answer,
        "reason": best.reason,
        "memory": report.memory,
        "device": report.device,
        "optimize": report.optimize,
        "items": best.at.items(),
        "margin": best.margin,
        "io": report.plan.io,
        "box": {k: list(v) for k, v in report.plan.box.items()},
        "dims": dict(report.plan.dims),
        "monotone": all(f.monotone for f in report.fits),
        "plan_seconds": report.plan.plan_seconds,
    }
    if report.frontier_dim is not None:
        out["frontier"] = [_row(f) for f in report.fits]
    else:
        out["next"] = _row(best)["next"]
    return out


def log_spaced(lo: int, hi: int, count: int) -> list[int]:
    """About ``count`` integer values from ``lo`` to ``hi`` (both included), spread geometrically."""
    start = max(lo, 1)
    if hi <= start:
        return sorted({lo, hi})
    ratio = (hi / start) ** (1 / max(count - 1, 1))
    return sorted({lo, hi, *(min(hi, max(lo, int(math.floor(start * ratio**i)))) for i in range(count))})
