"""The static proof of a range plan, on its whole box, from the plan alone.

:func:`prove_range_plan` reads nothing but the plan (:class:`onnxmem.plans.range.RangePlan`)
and proves, symbolically on the whole box, one rule after the other:

1. ``cover``: the pieces cover the box, each inside it, and no two share a point;
2. ``size``: every size is its shape's product times the element bytes, and non-negative
   (and ``name``: no tensor is listed twice in a piece, and every piece lists the same tensors);
3. ``group``: every tensor's buffer has an offset and a slot;
4. ``slot``: every slot holds its members at their offsets in it (non-negative multiples of the
   alignment) with the rounding slack;
5. ``offset``: every offset is non-negative;
6. ``arena``: the arena is above every buffer;
7. ``overlap``: for every two buffers live at one step, one of them is above the other
   (``offset(b) - offset(c) - slot(c)``: for every term of ``offset(c)`` some term of
   ``offset(b)`` minus it is non-negative on the piece, by
   :func:`onnxmem.core.symbolic.lower_bound`). A pair it cannot separate is searched for a
   colliding point (corners, a grid and seeded random points) and reported with it.

What the proof does not check (the order is topological, the sizes and lifetimes are the
model's, the sharing follows the alias rules) the concrete proof checks at a point:
``onnxmem verify MODEL --plan RANGE --dim NAME=N`` instantiates and proves that plan.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from onnxmem.core.dimexpr import Reject
from onnxmem.core.errors import PlanError, show_name
from onnxmem.core.problem import align_up
from onnxmem.core.symbolic import Box, MaxPoly, Poly
from onnxmem.core.symbolic import lower_bound as poly_lower_bound
from onnxmem.model import DTYPES
from onnxmem.plans.range import RangePiece, RangePlan, RangeTensor, quotient_name

__all__ = ["MAX_BOUNDS", "MAX_CELLS", "RangeFinding", "find_collision", "prove_range_plan"]


@dataclass(frozen=True, slots=True)
class RangeFinding:
    """A rule a range plan breaks (``kind``: the rule's name in the module docstring, as
    :class:`onnxmem.proof.finding.Finding` names its kind); ``point`` is a point of the box
    where it shows, when one was found."""

    kind: str
    message: str
    point: dict[str, int] | None = None

    def __str__(self) -> str:
        if self.point is None:
            return self.message
        at = ", ".join(f"{k}={v}" for k, v in sorted(self.point.items()))
        return f"{self.message} (at {at})"


#: most cells of the grid of piece boundaries the cover check walks; past it the plan is refused
MAX_CELLS = 100_000


def _residue_classes(plan: RangePlan) -> list[tuple[dict[str, int], dict[str, tuple[int, int]]]]:
    """Every residue class of the plan's lattice that holds a point of its box: the residues and
    the box of the piece variables that class covers (no lattice: one class, the box itself).

    Raises ``PlanError`` past ``MAX_CELLS`` classes.
    """
    classes: list[tuple[dict[str, int], dict[str, tuple[int, int]]]] = [({}, {})]
    for k in sorted(plan.box):
        lo, hi = plan.box[k]
        step, user = plan.lattice.get(k, 1), plan.steps.get(k, 1)
        if step == 1:
            classes = [(r, {**b, k: (lo, hi)}) for r, b in classes]
            continue
        count = min(step // user, (hi - lo) // user + 1)
        if count * len(classes) > MAX_CELLS:
            raise PlanError(f"the range plan's lattice cuts its box into more than {MAX_CELLS:,} residue "
                            "classes; re-plan the model")
        opts = []
        for j in range(count):
            res = (lo + user * j) % step
            opts.append((res, (-((res - lo) // step), (hi - res) // step)))
        classes = [({**r, k: res}, {**b, quotient_name(k): qb}) for r, b in classes for res, qb in opts]
    return classes


def _hole(target: Box, pieces: list[RangePiece]) -> dict[str, int] | None:
    """A point of ``target`` none of ``pieces`` (boxes in the same variables) holds, or ``None``.

    Raises ``PlanError`` when the pieces cut the box into more than ``MAX_CELLS`` cells.
    """
    names = sorted(target)
    cuts: dict[str, list[int]] = {}
    for k in names:
        lo, hi = target[k]
        pts = {lo, hi + 1}
        for p in pieces:
            plo, phi = p.box.get(k, (lo, hi))
            pts.update(v for v in (plo, phi + 1) if lo <= v <= hi + 1)
        cuts[k] = sorted(pts)
    cells: list[dict[str, int]] = [{}]
    for k in names:
        starts = cuts[k][:-1]
        cells = [{**c, k: s} for c in cells for s in starts]
        if len(cells) > MAX_CELLS:
            raise PlanError(f"the range plan's {len(pieces)} pieces cut its box into more than "
                            f"{MAX_CELLS:,} cells; re-plan the model")
    for cell in cells:
        if not any(all(lo <= cell[k] <= hi for k, (lo, hi) in p.box.items()) for p in pieces):
            return cell
    return None


def _volume(box: Box, within: Box) -> int:
    """The integer points of ``box`` inside ``within`` (both in the same variables)."""
    out = 1
    for k, (lo, hi) in within.items():
        plo, phi = box.get(k, (lo, hi))
        out *= max(0, min(hi, phi) - max(lo, plo) + 1)
    return out


def _shared(target: Box, pieces: list[RangePiece]) -> tuple[int, int, dict[str, int]] | None:
    """Two of ``pieces`` (which cover ``target``) holding one point of it, and that point; ``None``
    when each point is in one piece (their points inside ``target`` add up to its points)."""
    if sum(_volume(p.box, target) for p in pieces) == _volume({}, target):
        return None
    for i, a in enumerate(pieces):
        for j in range(i + 1, len(pieces)):
            b = pieces[j]
            meet = {k: (max(lo, a.box.get(k, (lo, hi))[0], b.box.get(k, (lo, hi))[0]),
                        min(hi, a.box.get(k, (lo, hi))[1], b.box.get(k, (lo, hi))[1])) for k, (lo, hi) in target.items()}
            if all(lo <= hi for lo, hi in meet.values()):
                return i, j, {k: lo for k, (lo, _) in meet.items()}
    return None


def _covered(plan: RangePlan) -> RangeFinding | None:
    """The ``cover`` finding, or ``None`` when every point of the box (on its steps) is in exactly one
    piece: per residue class of the lattice, the pieces of that residue cover its box of quotients,
    and no two of them share a point (``instantiate`` and the C header take the first piece holding a
    point; a plan onnxmem writes has one)."""
    def at(cell: dict[str, int], residues: dict[str, int]) -> dict[str, int]:
        return {k: plan.lattice[k] * cell[quotient_name(k)] + residues[k] if k in residues else cell[k]
                for k in plan.box}

    for residues, target in _residue_classes(plan):
        index = [i for i, p in enumerate(plan.pieces) if {k: r for k, (_, r) in p.lattice.items()} == residues]
        mine = [plan.pieces[i] for i in index]
        cell = _hole(target, mine)
        if cell is not None:
            return RangeFinding("cover", "no piece of the range plan holds this point", at(cell, residues))
        two = _shared(target, mine)
        if two is not None:
            return RangeFinding("cover", f"pieces {index[two[0]]} and {index[two[1]]} overlap: both hold this point, "
                                "which one piece must hold", at(two[2], residues))
    return None


#: most polynomial bounds one proof evaluates (one a few microseconds): a pair of offsets that are
#: maxima of many polynomials costs the product of their terms, so past it the plan is refused. Plans
#: onnxmem writes need far fewer: BERT-base over batch 1:8 and sequence 1:512, 5,695; the Llama-style
#: decoder over a cache of 0:1023 (8 pieces), 53,991; the strided backbone over every H, W 160:640
#: (1,024 pieces), 20,480.
MAX_BOUNDS = 1_000_000


class _Budget:
    """The bounds a proof has left to evaluate (:data:`MAX_BOUNDS`)."""

    __slots__ = ("left", "most")

    def __init__(self, most: int) -> None:
        self.left = self.most = most

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise PlanError(f"the range plan needs more than {self.most:,} bounds to prove (its offsets are "
                            "maxima of too many polynomials); re-plan the model")


def _above(upper: MaxPoly, lower: MaxPoly, gap: Poly, box: Box, budget: _Budget) -> bool:
    """``upper >= lower + gap`` on ``box``: each term of ``lower`` has a term of ``upper`` above it by ``gap``."""
    ups = set(upper.terms)
    for q in lower.terms:
        need = q + gap
        if need in ups:
            continue
        for p in upper.terms:
            budget.spend()
            if poly_lower_bound(p - need, box) >= 0:
                break
        else:
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


def find_collision(piece: RangePiece, a: str, b: str, alignment: int) -> dict[str, int] | None:
    """A point of the piece where buffers ``a`` and ``b`` (both non-empty there) share a byte."""
    sizes: dict[str, list[Poly]] = {}
    for t in piece.tensors:
        sizes.setdefault(t.group, []).append(t.size + t.group_offset)
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


def prove_range_plan(plan: RangePlan, *, limit: int | None = None, bounds: int = MAX_BOUNDS) -> list[RangeFinding]:
    """Every rule ``plan`` breaks on its box (see the module docstring); empty means proven.

    Raises ``PlanError`` for a plan too large to prove: past ``MAX_CELLS`` cells of its pieces or
    residue classes, or past ``bounds`` bounds of its offsets (:data:`MAX_BOUNDS`).
    """
    found: list[RangeFinding] = []
    budget = _Budget(bounds)
    bits_of = {name: bits for name, bits in DTYPES.values()}

    def full() -> bool:
        return limit is not None and len(found) >= limit

    cover = _covered(plan)
    if cover is not None:
        found.append(cover)
    for i, piece in enumerate(plan.pieces):
        if full():
            break
        if not _inside(plan, piece):
            found.append(RangeFinding("cover", f"piece {i}'s box is not inside the plan's box"))
            continue
        where = f"piece {i}"
        members, tensor_findings = _tensor_findings(piece, where, bits_of)
        found.extend(tensor_findings)
        odd = sorted({t.name for t in piece.tensors} ^ {t.name for t in plan.pieces[0].tensors})
        if odd:
            found.append(RangeFinding("name", f"{where}: tensor {show_name(odd[0])} is planned in one of piece "
                                      f"{i} and piece 0 only; every piece plans the same tensors"))
        if full() or found:
            continue
        spans, buffer_findings = _buffer_findings(piece, where, members, plan.alignment, budget)
        found.extend(buffer_findings)
        if full():
            break
        for finding in _overlap_findings(piece, where, members, spans, plan.alignment, budget):
            found.append(finding)
            if full():
                return found
    return found[:limit] if limit else found


def _inside(plan: RangePlan, piece: RangePiece) -> bool:
    """Rule 1 for one piece: it ranges the plan's dims (a lattice dim, with the plan's step, by its
    quotient), each inside the plan's range."""
    if {k: st for k, (st, _) in piece.lattice.items()} != plan.lattice:
        return False
    if set(piece.box) != {quotient_name(k) if k in plan.lattice else k for k in plan.box}:
        return False
    return all(plan.box[k][0] <= lo <= hi <= plan.box[k][1] for k, (lo, hi) in piece.dim_box().items())


def _expected_size(t: RangeTensor, bits_of: dict[str, int]) -> Poly | None:
    """The bytes ``t``'s shape and dtype give (``None`` when no polynomial gives them)."""
    bits = bits_of.get(t.dtype)
    numel = Poly.const(1)
    try:
        for d in t.shape:
            numel = numel * d
    except Reject:  # a coefficient past 2^62: the size the plan gives cannot be it
        return None
    if bits is not None and numel.constant() is not None:
        return Poly.const((bits * int(numel.constant() or 0) + 7) // 8)
    if bits is not None and bits % 8 == 0:
        return numel * (bits // 8)
    return None


def _tensor_findings(piece: RangePiece, where: str, bits_of: dict[str, int],
                     ) -> tuple[dict[str, list[RangeTensor]], list[RangeFinding]]:
    """Rules 2 and 3: every tensor's size and buffer; with the tensors of each buffer."""
    found: list[RangeFinding] = []
    members: dict[str, list[RangeTensor]] = {}
    seen: set[str] = set()
    for t in piece.tensors:
        if t.name in seen:
            found.append(RangeFinding("name", f"{where}: tensor {show_name(t.name)} appears twice"))
        seen.add(t.name)
        members.setdefault(t.group, []).append(t)
        expect = _expected_size(t, bits_of)
        if expect is None or expect != t.size:
            given = expect if expect is not None else ("no size onnxmem can hold (a product past 2^62, or "
                                                       "sub-byte elements over a ranged dim)")
            found.append(RangeFinding("size", f"{where}: tensor {show_name(t.name)} has size {t.size} "
                                      f"but its shape and dtype give {given}"))
        elif poly_lower_bound(t.size, piece.box) < 0 and any(poly_lower_bound(d, piece.box) < 0 for d in t.shape):
            # the size is its dims' product (checked above): non-negative dims make it non-negative, where
            # the monomial bound of the product alone may not see it (``16*b*s - 32*b`` with s >= 2)
            found.append(RangeFinding("size", f"{where}: tensor {show_name(t.name)} has a size that "
                                      "may be negative", _negative_at(t.size, piece.box)))
        if t.group not in piece.offsets or t.group not in piece.slots:
            found.append(RangeFinding("group", f"{where}: tensor {show_name(t.name)} is in buffer "
                                      f"{show_name(t.group)}, which has no offset or slot"))
    return members, found


def _slot_holds(slot: Poly, t: RangeTensor, a: int, box: Box) -> bool:
    """Rule 4 for one member: ``slot`` holds ``t`` at its group offset, rounded up to ``a`` (on a piece
    of one point exactly: its slot is the rounded end of its largest member there, no more)."""
    c, go = t.size.constant(), t.group_offset
    g = go.constant()
    if go.content() % a or poly_lower_bound(go, box) < 0:
        return False
    if all(lo == hi for lo, hi in box.values()):  # one point: every value exact, rounded up exactly
        point = {k: lo for k, (lo, _) in box.items()}
        return go.evaluate(point) % a == 0 and slot.evaluate(point) >= align_up(go.evaluate(point)
                                                                                 + t.size.evaluate(point), a)
    if c is not None and g is not None:
        return poly_lower_bound(slot, box) >= align_up(g + c, a)
    return poly_lower_bound(slot - t.size - go - (a - math.gcd(a, t.size.content())), box) >= 0


def _buffer_findings(piece: RangePiece, where: str, members: dict[str, list[RangeTensor]], a: int,
                     budget: _Budget) -> tuple[dict[str, tuple[int, int]], list[RangeFinding]]:
    """Rules 4 to 6 for every buffer; with each buffer's steps ``[start, end)``."""
    found: list[RangeFinding] = []
    spans: dict[str, tuple[int, int]] = {}
    box = piece.box
    for g, ts in members.items():
        spans[g] = (min(t.start for t in ts), max(t.end for t in ts))
        slot = piece.slots[g]
        for t in ts:
            if not _slot_holds(slot, t, a, box):
                found.append(RangeFinding("slot", f"{where}: buffer {show_name(g)} reserves {slot} bytes, "
                                          f"less than tensor {show_name(t.name)} may need ({t.size} rounded "
                                          f"up to {a})"))
        if not any(poly_lower_bound(p, box) >= 0 for p in piece.offsets[g].terms):
            found.append(RangeFinding("offset", f"{where}: buffer {show_name(g)} has an offset that may be "
                                      "negative", None))
        if not _above(piece.arena, piece.offsets[g], slot, box, budget):
            found.append(RangeFinding("arena", f"{where}: buffer {show_name(g)} may end past the arena"))
    return spans, found


def _overlap_findings(piece: RangePiece, where: str, members: dict[str, list[RangeTensor]],
                      spans: dict[str, tuple[int, int]], a: int, budget: _Budget) -> Iterator[RangeFinding]:
    """Rule 7: every pair of buffers live at one step that no offset keeps apart on the box."""
    box = piece.box
    ids = sorted(spans, key=lambda g: spans[g])
    for x, ga in enumerate(ids):
        end_a = spans[ga][1]
        for gb in ids[x + 1:]:
            if spans[gb][0] >= end_a:
                break
            oa, ob = piece.offsets[ga], piece.offsets[gb]
            if _above(ob, oa, piece.slots[ga], box, budget) or _above(oa, ob, piece.slots[gb], box, budget):
                continue
            p = find_collision(piece, ga, gb, a)
            s, e = max(spans[ga][0], spans[gb][0]), min(spans[ga][1], spans[gb][1])
            ta, tb = members[ga][0].name, members[gb][0].name
            msg = (f"{where}: tensors {show_name(ta)} and {show_name(tb)} are live together in steps "
                   f"[{s}, {e}) and ")
            if p is not None:
                msg += "share bytes"
            else:
                msg += "no offset expression keeps them apart on the whole box (no colliding point found)"
            yield RangeFinding("overlap", msg, p)
