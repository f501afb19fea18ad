"""Will a model fit in N bytes, and the largest batch or sequence that does: ``onnxmem fit``.

The deployment's total at a point of the dims (:class:`Footprint`) is what the process of a
default onnxruntime CPU session holds at its peak (:mod:`onnxmem.planning.process`):

    max(created, held + factor x arena + inputs and outputs outside the arena)

* ``arena``: the plan's arena at the point, of the graph onnxruntime runs (``optimize``:
  ``all``, a default session's level, by default; ``none``, the graph as written);
* ``held``, ``created``: the model's default session made once, in a fresh onnxruntime
  child: what it keeps (weights as held, prepacked copies, kernels, the fixed cost) and its
  peak while made; without the model's weights (or off CPU), ``weights + fixed`` stand for
  both: the initializers' stored bytes (and the values folded into weights) and the
  provider's fixed cost (:func:`onnxmem.runtime.fixed_cost`);
* ``factor``: onnxruntime's activation bytes per byte of the arena (its planner, kernel
  scratch, arena chunks, the memory-pattern block), measured by running the session at the
  answer (``runtime="measure"``, :func:`calibrate`), else the rule
  :data:`onnxmem.planning.process.SAFETY_FACTOR` (``runtime="rule"``); ``runtime="plan"``
  counts ``weights + arena + io + fixed``, the plan's own view;
* ``inputs``, ``outputs``: the graph inputs and outputs at the point; a KV cache (inputs named
  ``past...``, outputs named ``present...``) is shown on its own line. With the plan's ``io``
  ``internal`` (the default) they are inside the arena and add nothing; with ``external``
  they are added.

How the largest value is found (:func:`fit_model`):

1. plan the range once (:func:`onnxmem.planning.ranges.plan_range_optimized`) over the box; where the
   range plan of the level's graph cannot be made (a size no engine gives as a polynomial in
   the dims), plan the graph at each value the
   search asks for (:func:`point_sizes`), its total taken as never falling as the dim grows;
2. along the searched dim, the other dims held at their value, take the range plan's pieces
   in turn from the highest; a piece whose arena terms, slots and input and output sizes
   have no negative coefficient has a total that never falls as the dim grows, so the
   largest value that fits in it is found by bisection; any other piece is scanned value
   by value (at most :data:`MAX_SCAN` values), as is the whole box of a plan over a strided
   dim (its pieces, one per residue class, interleave);
3. the first piece (from the top) with a value that fits gives the answer: the largest value
   of the box whose total is at most the memory. The total is *monotone* when every piece
   is, and no piece starts below where the one before it ends; otherwise a smaller value
   may not fit, and the result says so;
4. with ``runtime="measure"``, the session is run at the answer, its factor stands at that
   value and the largest measured elsewhere, and steps 2 and 3 are taken again, until an
   answer has been run (at most :data:`CALIBRATION_RUNS` runs).

With two ranged dims the answer is a *frontier*: for each value of the first (every value,
or :data:`FRONTIER_ROWS` spread geometrically over a long range), the largest of the second
(the factor is the rule's: no run).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from onnxmem.core.choices import OPTIMIZE_LEVELS, RUNTIME_MODES
from onnxmem.core.errors import OnnxmemError, ShapeError, one_line, show_name
from onnxmem.core.symbolic import Poly
from onnxmem.model import caller_state, with_values
from onnxmem.planning.lattice import Symbolic, symbolic_families
from onnxmem.planning.pipeline import PlanOptions, with_checkpoint
from onnxmem.planning.process import Process, activation_factor, measure_process, run_peak
from onnxmem.planning.ranges import plan_range_optimized, size_poly
from onnxmem.plans.range import RangePiece, RangePlan, quotient_name

if TYPE_CHECKING:
    import onnx

    from onnxmem.runtime.optimize import Optimized

__all__ = ["FRONTIER_ROWS", "MAX_SCAN", "OPTIMIZE_LEVELS", "RUNTIME_MODES", "Fit", "FitReport", "Footprint", "Sizes",
           "fit_model",
           "fit_to_dict", "footprint_at", "io_sizes", "log_spaced"]

#: most values of one piece scanned one by one when its total may fall as the dim grows
MAX_SCAN = 100_000
#: most runs of the model's session that measure onnxruntime's activations at an answer
CALIBRATION_RUNS = 3
#: most rows of a two-dim frontier
FRONTIER_ROWS = 24

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Footprint:
    """The deployment's bytes at ``point``; ``io_in_arena``: inputs and outputs are inside the arena.

    ``held``: the model's onnxruntime session once made, measured
    (:class:`onnxmem.planning.process.Process`; ``None`` when not measured: ``weights + fixed``
    stand for it); ``created``: the peak while it was made, plus the graph inputs (a KV cache's
    included) the caller holds meanwhile (0 when not measured); ``runtime``: onnxruntime's
    activation bytes beyond the plan's arena (0 for the plan's own view)."""

    point: dict[str, int]
    weights: int
    arena: int
    inputs: int
    outputs: int
    kv_cache: int
    fixed: int
    io_in_arena: bool
    held: int | None = None
    created: int = 0
    runtime: int = 0

    @property
    def io(self) -> int:
        """Bytes of inputs, outputs and KV cache that the arena does not hold."""
        return 0 if self.io_in_arena else self.inputs + self.outputs + self.kv_cache

    @property
    def session(self) -> int:
        """What the session holds besides the activations: measured, else ``weights + fixed``."""
        return self.held if self.held is not None else self.weights + self.fixed

    @property
    def total(self) -> int:
        return max(self.created, self.session + self.arena + self.runtime + self.io)

    def items(self) -> dict[str, int]:
        """Each item in bytes, the total last."""
        return {"weights": self.weights, "arena": self.arena, "inputs": self.inputs, "outputs": self.outputs,
                "kv_cache": self.kv_cache, "io_outside_arena": self.io, "fixed": self.fixed,
                "session_held": self.session, "session_created": self.created,
                "onnxruntime_activations": self.runtime, "total": self.total}


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
class Sizes:
    """The plan's side of the total: ``weights`` and ``arena`` bytes at a point of ``box``.

    Made from a range plan (``plan``: every point, evaluated) or, where the range plan of the
    graph at the level cannot be made, from point plans of that graph (``plan`` is ``None``;
    ``known`` holds the points planned, by their values)."""

    box: dict[str, tuple[int, int]]
    dims: dict[str, int]
    io_mode: str
    at: Callable[[Mapping[str, int]], tuple[int, int]]
    plan: RangePlan | None = None
    known: dict[tuple[tuple[str, int], ...], tuple[int, int]] = field(default_factory=dict)
    #: each piece's box and whether its total never falls as a dim grows (one piece, assumed, for points)
    pieces: tuple[tuple[dict[str, tuple[int, int]], bool], ...] = ()
    plan_seconds: float = 0.0
    note: str = ""


@dataclass(frozen=True, slots=True)
class FitReport:
    """Every fit of one ``onnxmem fit`` run: one row, or a frontier (one row per value of
    ``frontier_dim``)."""

    sizes: Sizes
    memory: int
    device: str
    optimize: str
    fits: tuple[Fit, ...]
    io: Mapping[str, IoSize]
    fixed: int
    frontier_dim: str | None = None
    warnings: tuple[str, ...] = field(default=())
    process: Process | None = None
    #: the measured sessions: value of the searched dim -> run peak (bytes of growth)
    measured: dict[int, int] = field(default_factory=dict)

    @property
    def plan(self) -> RangePlan | None:
        """The range plan, when the range could be planned at the level (else point plans were made)."""
        return self.sizes.plan

    def footprint(self, point: Mapping[str, int]) -> Footprint:
        """The deployment's bytes at ``point`` (for a curve of the total along a dim)."""
        return footprint_at(self.sizes, self.io, self.fixed, point, self.process)

    @property
    def answer(self) -> Fit:
        """The row that answers: the last row that fits (the largest value of the frontier's dim), else the first."""
        fitting = [f for f in self.fits if f.value is not None]
        return fitting[-1] if fitting else self.fits[0]


def _names(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    """The graph inputs and outputs the deployment holds beside the arena: not the initializers, and
    not a training graph's caller's state (parameters, gradient buffers: counted with the weights)."""
    skip = {i.name for i in model.graph.initializer} | set(caller_state(model))
    return [v.name for v in model.graph.input if v.name not in skip], [v.name for v in model.graph.output]


def _is_kv(name: str, prefixes: Sequence[str]) -> bool:
    low = name.lower()
    return any(low.startswith(p) for p in prefixes)


@dataclass(frozen=True, slots=True)
class Residues:
    """A size that is a polynomial on each residue class of a strided dim (a lattice family's
    ``(lattice, poly)``, the poly in the family's variables), evaluated at points of the dims."""

    families: tuple[tuple[dict[str, tuple[int, int]], Poly], ...]

    def evaluate(self, point: Mapping[str, int]) -> int:
        for lattice, poly in self.families:
            values = {k: v for k, v in point.items() if k not in lattice}
            for k, (step, residue) in lattice.items():
                values[quotient_name(k)], off = divmod(point[k] - residue, step)
                if off:
                    break
            else:
                return poly.evaluate(values)
        raise ShapeError(f"no residue class of the strided dims holds {', '.join(f'{k}={v}' for k, v in point.items())}")

    @property
    def terms(self) -> list[tuple[Any, int]]:
        return [t for _, poly in self.families for t in poly.terms]


#: the bytes of the graph inputs or outputs: a polynomial in the ranged dims, or one per residue class
IoSize = Poly | Residues


def io_sizes(model: onnx.ModelProto, box: Mapping[str, tuple[int, int]],
             dims: Mapping[str, int]) -> dict[str, Poly | Residues]:
    """Bytes of the graph inputs, outputs and KV cache as polynomials in the ranged dims (a
    :class:`Residues` where sizes are polynomials only on each residue class of a stride):
    ``{"inputs": ..., "outputs": ..., "kv_cache": ..., "past": ...}`` (``past``: the KV cache's
    inputs alone, also in ``kv_cache``)."""
    lattice, families = symbolic_families(model, dict(box), {}, dims)
    ins, outs = _names(model)
    each = [_io_polys(f.sym, ins, outs) for f in families]
    if not lattice and len(each) == 1:
        return dict(each[0])
    return {k: Residues(tuple((f.lattice, polys[k]) for f, polys in zip(families, each))) for k in each[0]}


def _io_polys(sym: Symbolic, ins: Sequence[str], outs: Sequence[str]) -> dict[str, Poly]:
    total = {"inputs": Poly.const(0), "outputs": Poly.const(0), "kv_cache": Poly.const(0)}
    for names, kind, prefixes in ((ins, "inputs", ("past",)), (outs, "outputs", ("present",))):
        for n in names:
            if n not in sym.shapes:
                raise ShapeError(f"graph {kind[:-1]} {show_name(n)} has no shape; bind its dims with --dim NAME=N")
            size = size_poly(sym.dtypes[n], sym.shapes[n], n)
            key = "kv_cache" if _is_kv(n, prefixes) else kind
            total[key] = total[key] + size
            if key == "kv_cache" and kind == "inputs":
                total["past"] = total.get("past", Poly.const(0)) + size
    return total


def _nonnegative(p: Poly | Residues) -> bool:
    return all(c >= 0 for _, c in p.terms)


def _monotone_piece(piece: RangePiece, io: Mapping[str, IoSize]) -> bool:
    return (all(_nonnegative(t) for t in piece.arena.terms) and all(_nonnegative(s) for s in piece.slots.values())
            and all(_nonnegative(p) for p in io.values()))


def range_sizes(plan: RangePlan, io: Mapping[str, IoSize]) -> Sizes:
    """:class:`Sizes` of a range plan."""
    pieces = tuple((dict(p.box), _monotone_piece(p, io)) for p in plan.pieces)
    if plan.lattice:  # the residue classes' pieces interleave: the box is scanned value by value
        pieces = ((dict(plan.box), False),)
    return Sizes(dict(plan.box), dict(plan.dims), plan.io, lambda pt: (plan.weights_size, plan.arena_at(pt)),
                 plan, pieces=pieces, plan_seconds=plan.plan_seconds)


def point_sizes(built: Optimized, box: Mapping[str, tuple[int, int]], opts: PlanOptions, note: str) -> Sizes:
    """:class:`Sizes` from a plan of ``built``'s graph at each point asked (kept in ``known``); the
    total is taken as never falling as a dim grows (a plan holds more at a larger shape)."""
    from onnxmem.planning.pipeline import plan_optimized

    known: dict[tuple[tuple[str, int], ...], tuple[int, int]] = {}

    def at(point: Mapping[str, int]) -> tuple[int, int]:
        key = tuple(sorted(point.items()))
        if key not in known and not built.path.exists():
            where = ", ".join(f"{k}={v}" for k, v in key)
            raise OnnxmemError(f"{where} was not planned while fit searched (the graph at --optimize {opts.optimize} "
                               "is planned value by value); fit a range that ends there to size it")
        if key not in known:
            plan = plan_optimized(built, replace(opts, dims={**opts.dims, **point})).plan
            known[key] = (plan.weights_size, plan.arena_size)
        return known[key]

    full = {k: (int(lo), int(hi)) for k, (lo, hi) in box.items()}
    return Sizes(full, dict(opts.dims), opts.io, at, None, known, pieces=((full, True),), note=note)


def footprint_at(sizes: Sizes, io: Mapping[str, IoSize], fixed: int, point: Mapping[str, int],
                 process: Process | None = None) -> Footprint:
    """The deployment's bytes at ``point`` (every ranged dim): ``io`` from :func:`io_sizes`;
    ``process``: onnxruntime's terms (``None``: the plan's own view, weights + arena + io + fixed)."""
    point = dict(point)
    weights, arena = sizes.at(point)
    caller = io["inputs"].evaluate(point) + (io["past"].evaluate(point) if "past" in io else 0)
    held, created, runtime = (None, 0, 0) if process is None else (
        process.held, (process.created or 0) + caller, max(0, process.activations(arena, point) - arena))
    return Footprint(point, weights, arena, io["inputs"].evaluate(point), io["outputs"].evaluate(point),
                     io["kv_cache"].evaluate(point), fixed, sizes.io_mode == "internal", held, created, runtime)


class _Search:
    """The totals of one plan, evaluated at points (step 2 of the module docstring)."""

    def __init__(self, sizes: Sizes, io: Mapping[str, IoSize], fixed: int, memory: int,
                 process: Process | None) -> None:
        self.sizes, self.io, self.fixed, self.memory, self.process = sizes, io, fixed, memory, process

    def footprint(self, point: Mapping[str, int]) -> Footprint:
        return footprint_at(self.sizes, self.io, self.fixed, point, self.process)

    def fits(self, point: Mapping[str, int]) -> bool:
        return self.footprint(point).total <= self.memory

    def largest_in(self, box: Mapping[str, tuple[int, int]], monotone: bool, dim: str,
                   base: Mapping[str, int]) -> int | None:
        """The largest value of ``dim`` in a piece that fits (``base``: the other dims)."""
        lo, hi = box[dim]
        if monotone:
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

    def _measured_above(self, dim: str, base: Mapping[str, int], value: int | None, hi: int) -> int | None:
        """``value``, or a larger value whose session was measured to fit while the next does not (its
        measured factor is below the largest, which the search used around it)."""
        if self.process is None:
            return value
        points = (dict(k) for k in self.process.factors)
        runs = sorted((p[dim] for p in points if dim in p and all(p.get(k) == v for k, v in base.items())),
                      reverse=True)
        for m in runs:
            if (value is None or m > value) and self.fits({**base, dim: m}) and (
                    m == hi or not self.fits({**base, dim: m + 1})):
                return m
        return value

    def along(self, dim: str, base: Mapping[str, int]) -> Fit:
        """Steps 2 and 3 of the module docstring along ``dim``."""
        pieces = sorted((p for p in self.sizes.pieces
                         if all(p[0][k][0] <= v <= p[0][k][1] for k, v in base.items())),
                        key=lambda p: p[0][dim][0])
        lo, hi = self.sizes.box[dim]
        monotone = all(m for _, m in pieces) and all(
            self.footprint({**base, dim: a[0][dim][1]}).total <= self.footprint({**base, dim: b[0][dim][0]}).total
            for a, b in zip(pieces, pieces[1:]))
        value = next((v for v in (self.largest_in(b, m, dim, base) for b, m in reversed(pieces)) if v is not None),
                     None)
        value = self._measured_above(dim, base, value, hi)
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
    optimize: str = "all",
    runtime: str = "measure",
    patterns: bool = True,
    progress: Say | None = None,
) -> FitReport:
    """The largest value of the ranged dim(s) of ``box`` whose deployment fits in ``memory`` bytes.

    ``options``: the plan's options (``dims`` binds the other dims); ``fixed``: the provider's fixed
    cost in bytes (:func:`onnxmem.runtime.fixed_cost`); ``optimize``: the graph planned, as written
    (``none``) or as onnxruntime builds it at that level for ``device`` (:data:`OPTIMIZE_LEVELS`;
    ``all``, the default, is what a default session runs); ``runtime`` (:data:`RUNTIME_MODES`):
    what is counted besides the plan; ``patterns``: the user's session has memory patterns on (its
    default). One ranged dim gives one row; two give a frontier.
    """
    say = progress or (lambda _msg: None)
    if optimize not in OPTIMIZE_LEVELS:
        raise OnnxmemError(f"--optimize {optimize!r} is not one of {', '.join(OPTIMIZE_LEVELS)}")
    if runtime not in RUNTIME_MODES:
        raise OnnxmemError(f"--runtime {runtime!r} is not one of {', '.join(RUNTIME_MODES)}")
    if not 0 < memory:
        raise OnnxmemError("--memory must be above 0 bytes; give e.g. --memory 8GiB")
    if not 1 <= len(box) <= 2:
        raise ShapeError(f"fit searches one ranged dim, or two for a frontier; {len(box)} are ranged: give "
                         "--dim NAME=LO:HI for one or two dims and bind the others with --dim NAME=N")
    from onnxmem.runtime.optimize import optimized_model

    opts = with_checkpoint(model, path, replace(options or PlanOptions(), optimize=optimize, device=device))
    say("sizing the inputs and outputs")
    io = io_sizes(with_values(model, opts.known), box, opts.dims)
    warnings: list[str] = []
    process = None
    if runtime != "plan":
        process, said = measure_process(model, path, patterns, device, say)
        warnings += said
    say(f"planning the range {' '.join(f'{k}={lo}:{hi}' for k, (lo, hi) in box.items())} (--optimize {optimize})")
    with optimized_model(path, optimize, device, model=model) as built:
        sizes = _sizes(built, box, opts, io)
        if sizes.note:
            warnings.append(sizes.note)
        search = _Search(sizes, io, fixed, memory, process)
        say("searching")
        dims = list(box)
        measured: dict[int, int] = {}
        if len(dims) == 1:
            if runtime == "measure" and process is not None and process.held is not None:
                search, measured, said = calibrate(search, dims[0], model, path, say)
                warnings += said
            fits: tuple[Fit, ...] = (search.along(dims[0], {}),)
            first = None
        else:
            first, second = dims
            fits = tuple(search.along(second, {first: v}) for v in _rows(*sizes.box[first]))
    warnings += [f"the total is not monotone along --dim {f.dim}{_where(f)}: a value below the answer "
                 "may not fit" for f in fits if not f.monotone]
    return FitReport(sizes, memory, device, optimize, fits, io, fixed, first, tuple(warnings), search.process,
                     measured)


def calibrate(search: _Search, dim: str, model: onnx.ModelProto, path: str | os.PathLike[str],
              say: Say) -> tuple[_Search, dict[int, int], list[str]]:
    """``search`` with onnxruntime's activation factor measured by a default session of the model
    run at the answer (at the smallest value when none fits by the rule;
    :func:`onnxmem.planning.process.run_peak`), at most :data:`CALIBRATION_RUNS` times, until an
    answer has been run: each run's factor stands at its own value, and the
    largest measured stands at every other value. Returns the search, each run's peak by
    value, and warnings."""
    process = search.process
    if process is None:
        return search, {}, []
    factors: dict[tuple[tuple[str, int], ...], float] = {}
    peaks: dict[int, int] = {}
    fit = search.along(dim, {})
    for _ in range(CALIBRATION_RUNS):
        value = fit.at.point[dim]  # the answer, or the smallest value when none fits by the rule
        if value in peaks:
            break
        say(f"running the model in a default onnxruntime session at {dim}={value}")
        got, said = run_peak(model, path, {**search.sizes.dims, **fit.at.point}, process.patterns)
        if got is None:
            return search, peaks, said
        peaks[value] = got.peak + got.inputs
        factor = activation_factor(got, process.held or 0, process.created or 0, fit.at.arena)
        if factor is None:  # the run stayed under the session's creation peak: the rule stands
            break
        factors[tuple(sorted(fit.at.point.items()))] = factor
        process = replace(process, factor=max(factors.values()), factors=dict(factors),
                          source=f"measured at {dim}=" + ",".join(str(v) for v in sorted(peaks)))
        search = _Search(search.sizes, search.io, search.fixed, search.memory, process)
        fit = search.along(dim, {})
    return search, peaks, []


def _sizes(built: Optimized, box: Mapping[str, tuple[int, int]], opts: PlanOptions,
           io: Mapping[str, IoSize]) -> Sizes:
    """The range plan of ``built``'s graph over ``box``; where it cannot be made at a level other than
    ``none`` (a size no engine gives as a polynomial in the dims), point plans of the same graph."""
    try:
        plan = plan_range_optimized(built, box, opts)
    except ShapeError as exc:
        if opts.optimize == "none":
            raise
        note = (f"the range plan at --optimize {opts.optimize} cannot be made ({one_line(str(exc))}); the graph "
                "is planned at each value searched, its total taken as never falling as the dim grows")
        return point_sizes(built, box, opts, note)
    return range_sizes(plan, io)


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
    sizes = report.sizes
    process = report.process
    out: dict[str, Any] = {
        "fit": answer,
        "reason": best.reason,
        "memory": report.memory,
        "device": report.device,
        "optimize": report.optimize,
        "items": best.at.items(),
        "margin": best.margin,
        "io": sizes.io_mode,
        "box": {k: list(v) for k, v in sizes.box.items()},
        "dims": dict(sizes.dims),
        "monotone": all(f.monotone for f in report.fits),
        "plan_seconds": sizes.plan_seconds,
        "planned": "range" if sizes.plan is not None else "points",
        "runtime": None if process is None else {
            "memory_patterns": process.patterns, "activation_factor": round(process.factor, 4),
            "factor_source": process.source, "session_held": process.held, "session_created": process.created,
            "measured_peaks": {str(k): v for k, v in sorted(report.measured.items())}},
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
