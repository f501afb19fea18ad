"""The symbolic shapes of a range plan: polynomials in the ranged dims, per residue class of a lattice.

A size over a ranged dim is a polynomial (``3072*batch*sequence``) or, after a strided
convolution or pooling, a floor expression (``floor((H - 1)/2) + 1``), which is no polynomial
in ``H``. It is one on each residue class of ``H`` modulo the strides' product: with
``H = 32*q + r`` (``r`` fixed, ``q`` the new variable), ``floor((H - 1)/2) + 1`` is
``16*q + floor((r - 1)/2) + 1`` at every integer ``q``, exactly, because the non-constant part
``32*q/2`` is an integer at every point (:func:`onnxmem.core.symbolic.parse_poly` reads a
floor only where that holds, and refuses it otherwise).

:func:`symbolic_families` finds, per ranged dim, the least step ``m`` (a divisor of
:data:`MAX_STEP`) for which every size reads as a polynomial with ``dim = m*q``, takes the
lattice step ``lcm(m, the dim's --dim step)``, and returns one :class:`Family` per residue
class that holds a point of the box: the sizes as polynomials in the quotients
(:func:`onnxmem.plans.range.quotient_name`) and the other ranged dims, and the box of those
variables. A dim without floors keeps step 1 (no lattice, the dim itself).

Shape inference writes one formula per value and may unify dims a Concat or an Add needs
equal (a U-Net's upsampled ``2*floor(H/8)`` is written ``floor(H/4)``): at sizes where the
model is invalid the formulas are not the model's. Every family is checked against
concrete inference at its low corner, and one point of every residue of each dim at the high
corner; a residue where they differ is refused, naming the tensor and the ``--dim`` step
that keeps the range on the sizes the model holds at. Without a lattice the box's two corners
are checked: inference may write one formula where the model clamps at small sizes (a Slice
of the last 3 along ``s`` is written ``3``, while the model's is ``s`` below 3), or unify a
ranged dim with a constant (``x[b, s] + z[b, 4]`` is written ``[b, 4]``, valid at ``s`` 1 and 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from onnxmem.core import dimexpr
from onnxmem.core.errors import ShapeError, listed, show_name
from onnxmem.core.symbolic import Poly, box_corners, lower_bound, parse_poly
from onnxmem.model import check_dims, check_tensor_inputs, dim_label, open_input_dims
from onnxmem.plans.range import quotient_name
from onnxmem.shapes import (
    ShapeInfo,
    infer_shapes,
    infer_symbolic_shapes,
    stuck_node,
    top_level_values,
)

if TYPE_CHECKING:
    import onnx

__all__ = ["MAX_STEP", "Family", "Symbolic", "symbolic_families"]

#: the largest lattice step found from the model (a multiple of every step up to 8, and of 64)
MAX_STEP = 2**6 * 3**2 * 5 * 7
#: most residue classes (over all lattice dims) one range plan is planned on
MAX_FAMILIES = 4096


@dataclass(frozen=True, slots=True)
class Symbolic:
    """The model's values with polynomial shapes (in a family's variables)."""

    dtypes: dict[str, int]
    shapes: dict[str, tuple[Poly, ...]]

    def shape_info(self, point: Mapping[str, int]) -> ShapeInfo:
        return ShapeInfo(
            dict(self.dtypes),
            {n: tuple(d.evaluate(point) for d in sh) for n, sh in self.shapes.items()},
            {n: "symbolic" for n in self.shapes},
        )


@dataclass(frozen=True, slots=True)
class Family:
    """One residue class of the lattice: ``lattice`` maps a lattice dim to ``(step, residue)``,
    ``box`` ranges the variables (quotients and the other ranged dims)."""

    lattice: dict[str, tuple[int, int]]
    box: dict[str, tuple[int, int]]
    sym: Symbolic

    def dims_at(self, point: Mapping[str, int]) -> dict[str, int]:
        """A point of the family's variables as values of the ranged dims."""
        out = {k: v for k, v in point.items()}
        for k, (step, residue) in self.lattice.items():
            out[k] = step * out.pop(quotient_name(k)) + residue
        return out


def _read(d: Any, values: Mapping[str, Poly]) -> Poly | None:
    if isinstance(d, int):
        return Poly.const(d) if d >= 0 else None
    return parse_poly(d, values) if isinstance(d, str) else None


def _substitution(ranged: Mapping[str, str], steps: Mapping[str, int],
                  residues: Mapping[str, int]) -> dict[str, Poly]:
    """Each safe name -> its dim's value in the variables (``step*q + residue``, or the dim)."""
    out: dict[str, Poly] = {}
    for safe, dim in ranged.items():
        step = steps.get(dim, 1)
        out[safe] = Poly.var(dim) if step == 1 else Poly.var(quotient_name(dim)) * step + residues.get(dim, 0)
    return out


def _reads(found: Mapping[str, tuple[int, tuple[Any, ...]]], values: Mapping[str, Poly]) -> bool:
    return all(_read(d, values) is not None for _, sh in found.values() for d in sh)


def _least_steps(found: Mapping[str, tuple[int, tuple[Any, ...]]], ranged: Mapping[str, str],
                 dims: list[str]) -> dict[str, int]:
    """Per dim, the least divisor ``m`` of ``MAX_STEP`` with every size a polynomial at ``dim = m*q``
    (the other dims at step ``MAX_STEP``)."""
    divisors = [m for m in range(1, MAX_STEP + 1) if MAX_STEP % m == 0]
    out: dict[str, int] = {}
    for dim in dims:
        for m in divisors:
            steps = {**{d: MAX_STEP for d in dims}, dim: m}
            if _reads(found, _substitution(ranged, steps, {})):
                out[dim] = m
                break
    return out


def _not_polynomial(missing: list[str]) -> ShapeError:
    return ShapeError(
        f"sizes of {len(missing)} tensors are not polynomials in the ranged dims, nor on any lattice of them "
        f"with a step dividing {MAX_STEP} ({listed(missing, 5)}); bind those dims to one value (--dim NAME=N) or plan each "
        "shape on its own")


def _open_dims(missing: list[str], open_dims: Mapping[str, list[str]]) -> ShapeError:
    """The error for sizes that are no polynomials because graph inputs declare dims that are
    neither bound nor ranged (``open_dims``: each with the inputs that declare it)."""
    shown = listed(list(open_dims.items()), 4, lambda item: f"{dim_label(item[0])} ({listed(item[1], 3)})")
    first = dim_label(next(iter(open_dims)))
    return ShapeError(
        f"sizes of {len(missing)} tensors depend on dims of the graph inputs that are neither bound nor ranged: "
        f"{shown}; bind each to one value (--dim {first}=N) or range it (--dim {first}=LO:HI)")


def _residues(lo: int, hi: int, step: int, user: int) -> list[tuple[int, tuple[int, int]]]:
    """The residues modulo ``step`` of the values ``lo + user*k <= hi``, each with its quotients' range."""
    count = min(step // user, (hi - lo) // user + 1)
    return [(r, (-((r - lo) // step), (hi - r) // step)) for r in ((lo + user * j) % step for j in range(count))]


def _families(found: Mapping[str, tuple[int, tuple[Any, ...]]], ranged: Mapping[str, str],
              box: Mapping[str, tuple[int, int]], user: Mapping[str, int], lattice: Mapping[str, int]) -> list[Family]:
    classes: list[tuple[dict[str, int], dict[str, tuple[int, int]]]] = [({}, {})]
    for k in sorted(box):
        lo, hi = box[k]
        if lattice.get(k, 1) == 1:
            classes = [(r, {**b, k: (lo, hi)}) for r, b in classes]
            continue
        opts = _residues(lo, hi, lattice[k], user.get(k, 1))
        if len(opts) * len(classes) > MAX_FAMILIES:
            raise ShapeError(f"the range needs more than {MAX_FAMILIES} residue classes of its lattice "
                             f"({', '.join(f'{d} modulo {s}' for d, s in sorted(lattice.items()))}); give a step, "
                             "e.g. --dim NAME=LO:HI:STEP, or a smaller range")
        classes = [({**r, k: res}, {**b, quotient_name(k): qb}) for r, b in classes for res, qb in opts]
    out = []
    uses = {d: tuple(sorted({ranged[n] for n in dimexpr.names(d) if n in ranged and ranged[n] in lattice}))
            for _, sh in found.values() for d in sh if isinstance(d, str)}
    read: dict[tuple[Any, ...], Poly | None] = {}  # a text is read once per residue of the dims it names

    def cached(d: Any, residues: Mapping[str, int], values: Mapping[str, Poly]) -> Poly | None:
        if not isinstance(d, str):
            return _read(d, values)
        key = (d, *(residues[k] for k in uses[d]))
        if key not in read:
            read[key] = _read(d, values)
        return read[key]

    for residues, vbox in classes:
        values = _substitution(ranged, lattice, residues)
        shapes = {n: tuple(cached(d, residues, values) for d in sh) for n, (_, sh) in found.items()}
        sym = Symbolic({n: et for n, (et, _) in found.items()}, shapes)  # type: ignore[arg-type]
        out.append(Family({k: (lattice[k], r) for k, r in residues.items()}, vbox, sym))
    return out


def _mismatch(model: onnx.ModelProto, family: Family, point: Mapping[str, int],
              dims: Mapping[str, int], nchwc_block: int | None) -> str | None:
    """Why the family's formulas are not the model's shapes at ``point`` (its variables), or ``None``."""
    at = family.dims_at(point)
    where = ", ".join(f"{k}={v}" for k, v in sorted(at.items()))
    try:
        concrete = infer_shapes(model, dims={**dims, **at}, nchwc_block=nchwc_block)
    except ShapeError as exc:
        return f"at {where} shape inference fails ({str(exc).split(': their')[0][:160]})"
    for name, sh in family.sym.shapes.items():
        want = tuple(d.evaluate(point) for d in sh)
        got = concrete.shapes.get(name)
        if got is not None and tuple(got) != want:
            return (f"at {where} tensor {show_name(name)} is {'x'.join(map(str, got))}, not the "
                    f"{'x'.join(map(str, want))} the range's formulas give")
    return None


def _check(model: onnx.ModelProto, families: list[Family], box: Mapping[str, tuple[int, int]],
           lattice: Mapping[str, int], user: Mapping[str, int], dims: Mapping[str, int],
           nchwc_block: int | None) -> None:
    """Every family's low corner, and each residue of each dim at the others' high corner, against
    concrete inference (see the module docstring); without a lattice, the box's two corners."""
    chosen: dict[int, Family] = {0: families[0], len(families) - 1: families[-1]}
    for k in lattice:
        seen: set[int] = set()
        for i in range(len(families) - 1, -1, -1):
            r = families[i].lattice[k][1]
            if r not in seen:
                seen.add(r)
                chosen[i] = families[i]
    bad = []
    for fam in chosen.values():
        why = _mismatch(model, fam, {k: lo for k, (lo, _) in fam.box.items()}, dims, nchwc_block)
        if why is None and not lattice:  # one family: its high corner too
            why = _mismatch(model, fam, {k: hi for k, (_, hi) in fam.box.items()}, dims, nchwc_block)
        if why is not None:
            bad.append((fam, why))
    if not bad:
        return
    good = [f for _, f in sorted(chosen.items(), key=lambda c: c[0]) if all(f is not b for b, _ in bad)]  # checked
    hint = ""
    if good:
        first = good[0].dims_at({k: lo for k, (lo, _) in good[0].box.items()})
        hint = ", e.g. " + " ".join(
            f"--dim {k}={first[k]}:{box[k][1]}:{lattice[k]}" if k in lattice else f"--dim {k}={lo}:{hi}"
            for k, (lo, hi) in sorted(box.items()))
    if not lattice:  # one formula per value, not the model's at a corner (a Slice of the last 3 at s < 3)
        raise ShapeError(f"the model's sizes are not one formula over the range: {bad[0][1]}; give ranges on "
                         "which they are, or bind the dim with --dim NAME=N")
    raise ShapeError(f"the model does not hold at every size of the range: {bad[0][1]}; give ranges with a "
                     f"step on the sizes it holds at (a multiple of its total stride){hint}")


def _negative_dims(families: list[Family]) -> None:
    """``ShapeError`` naming a dim that inference's formula makes negative at a corner of a family's box
    (``s - 2`` for a Slice from 2 at ``s = 0``, where the model's own size is 0, clamped)."""
    for fam in families:
        corners = box_corners(fam.box)
        for name, shape in fam.sym.shapes.items():
            for axis, d in enumerate(shape):
                if lower_bound(d, fam.box) >= 0:
                    continue
                at = next((c for c in corners if d.evaluate(c) < 0), None)
                if at is None:
                    continue
                where = ", ".join(f"{k}={v}" for k, v in sorted(fam.dims_at(at).items()))
                raise ShapeError(f"shape inference gives tensor {show_name(name)} the dim {d} on axis {axis}, "
                                 f"negative at {where}, where the formula is not the model's size; give ranges "
                                 "on which it is not negative, or bind the dim with --dim NAME=N")


def symbolic_families(model: onnx.ModelProto, box: Mapping[str, tuple[int, int]], steps: Mapping[str, int],
                      dims: Mapping[str, int], nchwc_block: int | None = None) -> tuple[dict[str, int], list[Family]]:
    """The lattice (dim -> step above 1) and one :class:`Family` per residue class of ``box``.

    ``steps``: the dims' ``--dim`` steps (a dim holds ``lo + step*k`` only); ``nchwc_block``: the
    NCHWc block size of the session that built the graph (``--optimize all``). ``ShapeError`` names
    the tensors whose sizes are no polynomials on any lattice, and the sizes where the model
    does not hold.
    """
    check_tensor_inputs(model)  # a sequence or map input has no symbolic size either
    ranged: dict[str, str] = {}
    coarse = {k: MAX_STEP for k in box}

    def accept(shape: tuple[Any, ...], original: Mapping[str, str]) -> bool:
        ranged.update({safe: name for safe, name in original.items() if name in box})
        values = _substitution(ranged, coarse, {})
        # a dim of a fixed value is taken whatever its size: one past the limits is refused below
        return all(d >= 0 if isinstance(d, int) else _read(d, values) is not None for d in shape)

    found, original = infer_symbolic_shapes(model, list(box), dims=dims, accept=accept, nchwc_block=nchwc_block)
    for name, (_et, shape) in found.items():  # as a plan at one point refuses them, before any polynomial
        check_dims(name, shape)
    ranged = {safe: name for safe, name in original.items() if name in box}
    missing = [n for n in top_level_values(model) if n not in found]
    if missing:
        open_dims = open_input_dims(model, [*dims, *box])
        stuck = None if open_dims else stuck_node(model, found)
        if stuck is not None:  # no shape at all, let alone a formula: an op onnxmem has no rule for
            raise ShapeError(
                f"sizes of {len(missing)} tensors are unknown over the range ({listed(missing, 5)}): {stuck[0]}; "
                "declare the node's output shapes in the model's value_info, in the model's dims, or bind the "
                "ranged dims to one value (--dim NAME=N) and pass --measure-shapes")
        raise _open_dims(missing, open_dims) if open_dims else _not_polynomial(missing)
    least = _least_steps(found, ranged, sorted(box))
    lattice = {k: math.lcm(least.get(k, MAX_STEP), steps.get(k, 1)) for k in box}
    lattice = {k: s for k, s in lattice.items() if s > 1}
    for k in lattice:
        if quotient_name(k) in box:
            raise ShapeError(f"--dim {show_name(k)} needs residue classes, whose quotient is named "
                             f"{quotient_name(k)!r}, a ranged dim too; bind {quotient_name(k)!r} to one value")
    if not _reads(found, _substitution(ranged, lattice, {})):
        raise _not_polynomial(sorted(found)[:1])
    families = _families(found, ranged, box, steps, lattice)
    _negative_dims(families)
    _check(model, families, box, lattice, steps, dims, nchwc_block)
    return lattice, families
