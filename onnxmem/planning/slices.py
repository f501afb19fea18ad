"""Concat inputs in their slices of the output, on a piece of a range plan (offsets as polynomials).

At one shape, ``onnxmem plan`` may place a Concat's inputs inside its output, input ``i``
at the sum of the sizes of inputs ``0 .. i-1`` (:func:`onnxmem.analysis.aliasing.shared_layout`),
when every dim before the concat axis is 1 (a channel Concat at batch 1). On a piece of a
range plan where those dims are 1 at every point (the batch fixed to 1, the image size
ranged), the same placement holds at every point, with each slice's offset the
polynomial sum of the sizes before it. :func:`polynomial_layout` takes the layout made at
the piece's reference point and gives every member's offset in its buffer as a polynomial:

1. the groups without Concat placement (views and in-place outputs) join a buffer whole,
   each at one offset (a *shift*);
2. Concats are walked from the last scheduled to the first, so an outer Concat's output has
   its shift before its inputs get theirs: an input placed in its slice gets the output's
   shift plus the sizes of the inputs before it;
3. the layout is kept only when every Concat used has the dims before its axis equal to 1
   on the piece, every shift is a multiple of the alignment at every point (its content),
   every shift gives the reference layout's offset at the reference point, and one member
   at shift 0 holds every other member on the whole piece (the buffer's size), and the members
   of each group without Concat placement have one size polynomial. Otherwise
   ``None``: the caller plans the piece without Concat placement.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from onnxmem.analysis.liveness import AliasLayout
from onnxmem.core.symbolic import Box, Poly, lower_bound
from onnxmem.graph import GraphView

__all__ = ["polynomial_layout"]


def _prefix_is_one(shape: Sequence[Poly], inputs: Sequence[Sequence[Poly]], box: Box) -> bool:
    """Every dim before the first one where an input differs from the output is 1 on ``box``
    (the polynomial 1, or one of dims the box fixes, 1 there)."""
    axis = next((d for d in range(len(shape)) if any(len(s) != len(shape) or s[d] != shape[d] for s in inputs)),
                len(shape))
    low = {k: lo for k, (lo, _) in box.items()}
    return all(all(box[n][0] == box[n][1] for n in shape[d].names()) and shape[d].evaluate(low) == 1
               for d in range(axis))


def polynomial_layout(view: GraphView, order: Sequence[int], nested: AliasLayout, flat: AliasLayout,
                      shapes: Mapping[str, tuple[Poly, ...]], sizes: Mapping[str, Poly], point: Mapping[str, int],
                      box: Box, alignment: int) -> dict[str, Poly] | None:
    """Each member's offset in its buffer under ``nested`` (made at ``point``), or ``None`` where the
    placement does not hold on the whole ``box`` (see the module docstring)."""
    home = {m: gid for gid, members in flat.groups.items() for m in members}
    if any(sizes[m] != sizes[members[0]] for members in flat.groups.values() for m in members):
        return None  # a view or in-place member of another size at other points
    shift: dict[str, Poly] = {}
    member_of = {m: gid for gid, members in nested.groups.items() for m in members}
    for op_index in reversed(list(order)):
        op = view.ops[op_index]
        if op.op_type != "Concat" or not op.outputs or op.outputs[0] not in member_of:
            continue
        out = op.outputs[0]
        placed = [x for x in dict.fromkeys(op.inputs) if x and member_of.get(x) == member_of[out]
                  and home.get(x, x) != home.get(out, out)]
        if not placed:
            continue
        if not _prefix_is_one(shapes[out], [shapes[x] for x in op.inputs if x in shapes], box):
            return None
        at = shift.get(home.get(out, out), Poly.const(0))
        for x in op.inputs:
            if x in placed and home.get(x, x) not in shift:
                shift[home.get(x, x)] = at
            at = at + sizes[x]
    offsets = {m: shift.get(home.get(m, m), Poly.const(0)) for m in member_of}
    if any(p.content() % alignment for p in offsets.values()):
        return None
    if any(p.evaluate(point) != nested.offsets.get(m, 0) for m, p in offsets.items()):
        return None
    for members in nested.groups.values():
        if not any(offsets[r] == Poly.const(0) and all(
                lower_bound(sizes[r] - offsets[m] - sizes[m], box) >= 0 for m in members) for r in members):
            return None
    return offsets
