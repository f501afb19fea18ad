"""Planning a range plan: one plan for every shape in a box of dims, offsets as formulas.

``onnxmem plan MODEL --dim batch=1:8 --dim sequence=1:512`` makes a range
plan (:class:`onnxmem.plans.range.RangePlan`): every tensor's size is a polynomial in the
ranged dims (shape inference kept symbolic, :func:`onnxmem.shapes.infer_symbolic_shapes`,
read by :func:`onnxmem.core.symbolic.parse_poly`) and every buffer's offset a maximum of
polynomials (:class:`onnxmem.core.symbolic.MaxPoly`), such that at every integer
point of the box no two buffers live at one step share a byte.

How a plan is made (:func:`plan_range`), per piece of the box:

1. take the piece's high corner as the reference point; evaluate the symbolic
   shapes there and build the graph view;
2. take the operator order (``--order``, made once at the box's high corner;
   a piece of one point is ordered at its point) and choose the sharing (views and
   in-place outputs, :func:`onnxmem.analysis.aliasing.alias_layout` without Concat
   placement); a member whose size polynomial differs from its group's first
   member leaves the group, so sharing holds at every point, not only here.
   Concat inputs sit in their slices where the layout ``onnxmem plan`` makes at
   the reference point places them and :func:`onnxmem.planning.slices.polynomial_layout`
   proves the placement for the whole piece;
3. solve the reference point with ``--solver`` (a concrete plan,
   :func:`onnxmem.planning.compose.solve_layout`);
4. keep its *shape*, not its numbers: sort the buffers by their reference
   offset; for every pair of buffers live together the earlier one is below
   the later one, and a buffer's offset becomes
   ``max(0, offset(c) + slot(c) for every c directly below it)`` (the
   buffers below that are below another buffer below are implied and left
   out), with terms another term bounds on the piece dropped
   (:meth:`MaxPoly.pruned`). ``slot(c)`` is :func:`onnxmem.plans.range.slot_of`;
5. the arena is ``max(offset(g) + slot(g))`` over the buffers: at a point
   it bounds the exact arena, ``max(align_up(offset(g)) + align_up(size(g)))``,
   which :func:`onnxmem.plans.range.instantiate` and the C header give.

Pieces: starting from the whole box, a piece whose arena at a sample point
(a grid of each dim's ends, middle and geometric middle) is more than
``tolerance`` above that point's lower bound (the most bytes live at one
step) is cut in two at the geometric middle of the dim that moves that ratio
most, and each half is planned again, up to ``max_pieces``. A piece whose low
corner allows sharing no other point does (Concat inputs in their slices at
batch 1), and whose plan at that corner alone is more than ``tolerance``
smaller, has the low value of its dim with the smallest low end cut off as a
piece of its own (batch 1, the other dims still ranged): there
:func:`onnxmem.planning.slices.polynomial_layout` places the Concat inputs in
their slices at polynomial offsets (a piece of one point keeps the layout
``onnxmem plan`` makes at its point).

A dim inside floors (a strided convolution over a ranged image size) is planned
per residue class of a lattice (:mod:`onnxmem.planning.lattice`): each class is
cut as above, its pieces in the quotient variables.

Every plan made is proven on its whole box (:func:`onnxmem.proof.range.prove_range_plan`)
before it is returned.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from onnxmem.analysis.aliasing import alias_layout, shared_layout
from onnxmem.analysis.liveness import AliasLayout, build_liveness
from onnxmem.core.dimexpr import Reject
from onnxmem.core.errors import PlanError, ShapeError, show_name
from onnxmem.core.problem import align_up, lower_bound
from onnxmem.core.symbolic import Box, MaxPoly, Poly
from onnxmem.graph import GraphView
from onnxmem.model import dtype_bits, file_sha256, with_values
from onnxmem.planning.compose import compose, order_view
from onnxmem.planning.lattice import Family, Symbolic, symbolic_families
from onnxmem.planning.pipeline import PlanOptions, optimized_record, view_of, with_checkpoint
from onnxmem.planning.slices import polynomial_layout
from onnxmem.plans.range import (
    RangePiece,
    RangePlan,
    RangeTensor,
    arena_and_bound,
    piece_bound,
    slot_of,
)
from onnxmem.proof.range import prove_range_plan

if TYPE_CHECKING:
    import onnx

    from onnxmem.runtime.optimize import Optimized

__all__ = ["MAX_PIECES", "TOLERANCE", "plan_range", "plan_range_optimized", "size_poly", "symbolic_offsets",
           "symbolic_shapes"]

#: most pieces a range plan is cut into
MAX_PIECES = 8
#: a piece is good enough when its arena is at most this much over the lower bound at its sample points
TOLERANCE = 0.01
#: most terms one offset keeps; past it two terms are replaced by their coefficient-wise maximum
MAX_TERMS = 24


def symbolic_shapes(model: onnx.ModelProto, box: Box, dims: Mapping[str, int]) -> Symbolic:
    """Every value's shape as polynomials in the ranged dims themselves (no lattice):
    ``ShapeError`` where a size needs one (a strided dim's floor), naming the dims."""
    lattice, families = symbolic_families(model, box, {}, dims)
    if lattice or len(families) != 1:
        raise ShapeError(f"sizes are polynomials in {', '.join(map(show_name, sorted(lattice)))} only on each "
                         "residue class of a step; range the other dims, or give these one value each")
    return families[0].sym


def size_poly(elem_type: int, shape: Sequence[Poly], name: str) -> Poly:
    bits = dtype_bits(elem_type)
    numel = Poly.const(1)
    try:
        for d in shape:
            numel = numel * d
    except Reject:  # a coefficient past 2^62
        raise ShapeError(f"tensor {show_name(name)} of shape [{', '.join(map(str, shape))}] would take more than "
                         "2^62 bytes, above onnxmem's limit; check the model or the dims bound with --dim") from None
    c = numel.constant()
    if c is not None:
        return Poly.const((bits * c + 7) // 8)
    if bits % 8:
        raise ShapeError(f"tensor {show_name(name)} has {bits}-bit elements and a shape that depends on a "
                         "ranged dim; its bytes are no polynomial: bind the dim to one value")
    return numel * (bits // 8)

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


def _split_groups(layout: AliasLayout | None, sizes: Mapping[str, Poly]) -> AliasLayout | None:
    """``layout`` without members whose size polynomial differs from their group's first member."""
    if layout is None:
        return None
    groups: dict[str, tuple[str, ...]] = {}
    for gid, members in layout.groups.items():
        keep = tuple(m for m in members if m not in sizes or sizes[m] == sizes.get(members[0]))
        if len(keep) > 1:
            groups[gid] = keep
    return AliasLayout(groups, {})




def _piece_liveness(sym: Symbolic, box: dict[str, tuple[int, int]], opts: PlanOptions, sizes: Mapping[str, Poly],
                    shifts: dict[str, Poly]) -> Callable[[GraphView, Sequence[int]], tuple[GraphView, Any]]:
    """Step 2's sharing as the liveness step of :func:`onnxmem.planning.compose.compose`; ``shifts``
    receives each member's offset in its buffer where Concat inputs sit in their slices."""

    def step(view: GraphView, order: Sequence[int]) -> tuple[GraphView, Any]:
        layout: AliasLayout | None = None
        ref = {k: hi for k, (_, hi) in box.items()}
        if opts.inplace and all(lo == hi for lo, hi in box.values()):
            # one point: every size is a constant, so the layout plan makes (Concat inputs in their slices too) holds
            layout = shared_layout(view, order, opts.io, opts.alignment)
            shifts.update({m: Poly.const(o) for m, o in layout.offsets.items()})
        elif opts.inplace:
            flat = alias_layout(view, order, opts.io, alignment=opts.alignment, concat=False)
            nested = shared_layout(view, order, opts.io, opts.alignment)
            found = polynomial_layout(view, order, nested, flat, sym.shapes, sizes, ref, box, opts.alignment) \
                if nested.offsets else None
            if found is not None:
                layout = nested
                shifts.update(found)
            else:
                layout = _split_groups(flat, sizes)
        return view, build_liveness(view, order, layout, io=opts.io, alignment=opts.alignment)

    return step


def _plan_piece(model: onnx.ModelProto, sym: Symbolic, box: dict[str, tuple[int, int]], opts: PlanOptions,
                sizes: Mapping[str, Poly], order: Sequence[int] | None = None,
                lattice: Mapping[str, tuple[int, int]] | None = None) -> RangePiece:
    """Steps 1 to 5 of the module docstring on one piece (``order``: the shared order, else its own)."""
    ref = {k: hi for k, (_, hi) in box.items()}
    shifts: dict[str, Poly] = {}
    made = compose(view_of(model, sym.shape_info(ref), opts), opts,
                   _piece_liveness(sym, box, opts, sizes, shifts), order=order)
    view, liveness, problem = made.view, made.liveness, made.liveness.problem
    ref_offsets = {b.id: int(made.solution.offsets[i]) for i, b in enumerate(problem.buffers)}
    spans = {b.id: (b.start, b.end) for b in problem.buffers}
    slots: dict[str, Poly] = {}
    single = all(lo == hi for lo, hi in box.values())
    for gid, members in liveness.groups.items():
        ivs = [liveness.interval(m) for m in members]
        if single:  # constant sizes: the group's largest end
            slots[gid] = Poly.const(align_up(max(iv.offset + iv.size for iv in ivs), opts.alignment))
        else:  # the member at offset 0 that holds every other (polynomial_layout checked there is one)
            slots[gid] = slot_of(max((sizes[m] for m in members if shifts.get(m, Poly.const(0)) == Poly.const(0)),
                                     key=lambda p: p.evaluate(ref)), opts.alignment)
    offsets, arena = symbolic_offsets(spans, slots, ref_offsets, box)
    tensors = []
    for iv in liveness.intervals:
        t = view.tensors[iv.tensor]
        prod = view.ops[t.producer] if t.producer is not None else None
        tensors.append(RangeTensor(
            t.name, t.dtype, sym.shapes[t.name], sizes[t.name], iv.start, iv.end,
            prod.name if prod else None, prod.op_type if prod else None, t.kind, iv.group,
            shifts.get(t.name, Poly.const(0)),
        ))
    return RangePiece(dict(box), tuple(view.ops[i].name for i in made.order),
                      tuple(view.ops[i].op_type for i in made.order), tuple(tensors), offsets, slots, arena,
                      dict(lattice or {}))


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



def _ratio(piece: RangePiece, point: Mapping[str, int], alignment: int) -> float:
    arena, bound = arena_and_bound(piece, point, alignment)
    return arena / bound if bound else 1.0


def _worst(piece: RangePiece, alignment: int) -> float:
    """The largest arena / lower bound over the piece's sample points."""
    return max(_ratio(piece, p, alignment) for p in _sample_points(piece.box))


def _halves(piece: RangePiece, alignment: int) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]] | None:
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



@dataclass(frozen=True, slots=True)
class _Job:
    """What every piece of one range plan is planned from."""

    model: onnx.ModelProto
    sym: Symbolic
    opts: PlanOptions
    sizes: dict[str, Poly]
    shared_order: list[int]  # made at the box's high corner, for every piece of more than one point
    tolerance: float
    lattice: dict[str, tuple[int, int]]  # the family's residue class (dim -> (step, residue))

    def judged(self, b: dict[str, tuple[int, int]]) -> tuple[float, bool, RangePiece]:
        """(worst ratio, whether the low corner is the trouble, the piece) of a new piece over ``b``."""
        opts = self.opts
        single = all(lo == hi for lo, hi in b.values())
        piece = _plan_piece(self.model, self.sym, b, opts, self.sizes, None if single else self.shared_order,
                            self.lattice)
        grid = _worst(piece, opts.alignment)
        if single or not opts.inplace:
            return grid, False, piece
        at_low = self._low_corner_ratio(piece, {k: lo for k, (lo, _) in b.items()})
        if at_low is None:
            return grid, False, piece
        return max(grid, at_low), at_low > max(grid, 1 + self.tolerance), piece

    def _low_corner_ratio(self, piece: RangePiece, low: dict[str, int]) -> float | None:
        """The piece's arena at its low corner over that corner's own plan's, when sharing that
        holds at the low corner only (Concat inputs in their slices at batch 1) saves enough."""
        opts = self.opts
        view = view_of(self.model, self.sym.shape_info(low), opts)
        where = {op.name: i for i, op in enumerate(view.ops)}
        order = [where[n] for n in piece.order]
        nested = shared_layout(view, order, opts.io, opts.alignment)
        if not nested.offsets:
            return None
        own = piece_bound(piece, low, opts.alignment)
        if lower_bound(build_liveness(view, order, nested, io=opts.io, alignment=opts.alignment).problem) * (
                1 + self.tolerance) >= own:
            return None  # the slices save too little to matter
        alone = arena_and_bound(_plan_piece(self.model, self.sym, {k: (v, v) for k, v in low.items()}, opts,
                                            self.sizes, order, self.lattice), low, opts.alignment)[0]
        return arena_and_bound(piece, low, opts.alignment)[0] / alone if alone else 1.0


def _cut(job: _Job, full: dict[str, tuple[int, int]], max_pieces: int) -> list[RangePiece]:
    """The box's pieces: the worst piece cut in two while it is over the tolerance and room is left."""
    work = [job.judged(full)]
    done: list[RangePiece] = []
    while work:
        work.sort(key=lambda wp: -wp[0])
        worst, low_trouble, piece = work.pop(0)
        halves = None
        if worst > 1 + job.tolerance and len(done) + len(work) + 2 <= max_pieces:
            halves = _cut_low(piece.box) if low_trouble else _halves(piece, job.opts.alignment)
        if halves is None:
            done.append(piece)
            continue
        work.extend(job.judged(h) for h in halves)
    done.sort(key=lambda p: tuple(p.box[k] for k in sorted(p.box)))
    return done


def _order_at_top(model: onnx.ModelProto, families: list[Family], opts: PlanOptions) -> list[int]:
    """The operator order, made once at the high corner of the box (in the family that holds it)."""
    top = families[-1]
    return order_view(view_of(model, top.sym.shape_info({k: hi for k, (_, hi) in top.box.items()}), opts), opts,
                      timeout=opts.timeout)


def plan_range(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    box: Mapping[str, tuple[int, int]],
    options: PlanOptions | None = None,
    *,
    max_pieces: int = MAX_PIECES,
    tolerance: float = TOLERANCE,
    steps: Mapping[str, int] | None = None,
) -> RangePlan:
    """A range plan of ``model`` over ``box`` (``{dim: (lo, hi)}``), proven before it is returned.

    ``options``: a :class:`onnxmem.planning.pipeline.PlanOptions` (its ``dims`` bind the
    other dims; ``input_shapes``, ``measure_shapes`` and ``inputs`` have no range form). ``steps``: a
    ranged dim's step (``{"H": 32}``: the plan holds ``H = lo + 32*k`` only). A dim inside
    floors (a strided convolution's output size) is planned per residue class of its lattice
    (:mod:`onnxmem.planning.lattice`), with up to ``max_pieces`` pieces per class. A training
    graph's constant frozen parameters (Reshape targets, axes) take their values from its
    checkpoint (``options.checkpoint``, or the generator's file beside ``path``), as for a point
    plan; the graph planned keeps them as graph inputs.
    """
    opts = with_checkpoint(model, path, options or PlanOptions())
    t0 = time.perf_counter()
    if opts.input_shapes or opts.measure_shapes:
        raise ShapeError("a range plan reads shapes symbolically; leave out --input-shape and "
                         "--measure-shapes (bind dims with --dim NAME=N)")
    if opts.inputs:  # values hold at one shape: none of them would size or decide the whole box
        raise ShapeError("a range plan holds for every value of its dims; --inputs gives values for one shape: "
                         "leave it out, or plan that shape on its own (--dim NAME=N --inputs FILE.npz)")
    if not box:
        raise ShapeError("a range plan needs at least one --dim NAME=LO:HI")
    user = {k: int(v) for k, v in (steps or {}).items() if int(v) > 1}
    for k, st in user.items():
        if k not in box or st > 2**31:
            raise ShapeError(f"--dim {show_name(k)}: a step needs a range of the dim and at most 2^31")
    full = {k: (int(lo), int(lo) + user.get(k, 1) * ((int(hi) - int(lo)) // user.get(k, 1)))
            for k, (lo, hi) in sorted(box.items())}
    lattice, families = symbolic_families(with_values(model, opts.known), full, user, opts.dims, opts.nchwc_block)
    pieces: list[RangePiece] = []
    shared_order: list[int] | None = None
    for fam in families:
        sizes = {n: size_poly(fam.sym.dtypes[n], sh, n) for n, sh in fam.sym.shapes.items()}
        if shared_order is None:
            shared_order = _order_at_top(model, families, opts)
        pieces.extend(_cut(_Job(model, fam.sym, opts, sizes, shared_order, tolerance, fam.lattice), fam.box,
                           max_pieces))
    first = families[0]
    weights = view_of(model, first.sym.shape_info({k: lo for k, (lo, _) in first.box.items()}), opts).weights_size
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
        pieces=tuple(pieces),
        fold=opts.fold,
        steps=user,
        lattice=lattice,
        checkpoint=dict(opts.known_record),
    )
    findings = prove_range_plan(plan, limit=1)
    if findings:
        raise PlanError(f"the range plan made is wrong: {findings[0]}")
    return replace(plan, plan_seconds=round(time.perf_counter() - t0, 6))


def plan_range_optimized(built: Optimized, box: Mapping[str, tuple[int, int]], options: PlanOptions | None = None,
                         *, steps: Mapping[str, int] | None = None) -> RangePlan:
    """:func:`plan_range` of the graph :func:`onnxmem.runtime.optimize.optimized_model` built (inside
    its ``with`` block), sized with the NCHWc block of the session that built it; the plan records
    how the graph was built, as :func:`onnxmem.planning.pipeline.plan_optimized` does for a point."""
    opts = with_checkpoint(built.model, built.source, replace(options or PlanOptions(), caller=built.caller,
                                                              nchwc_block=built.record.nchwc_block))
    plan = plan_range(built.model, built.path, box, opts, steps=steps)
    return replace(plan, model=optimized_record(plan.model, built))
