"""A C header for a range plan: the arena and every offset as functions of the dims.

``onnxmem export RANGE_PLAN --format c -o plan.h`` writes, for a plan over
dims ``batch`` and ``sequence``::

    #include "plan.h"
    long long n = onnxmem_arena_size(batch, sequence);     /* -1 outside the box */
    unsigned char *arena = malloc(n);
    float *x = (float *)(arena + onnxmem_offset_x(batch, sequence));
    /* onnxmem_size_x(batch, sequence) bytes */

What the header holds: a comment with the model's sha256 and the schema
version; ``ONNXMEM_RANGE_PLAN_H`` as its guard; ``ONNXMEM_ALIGNMENT``,
``ONNXMEM_TENSOR_COUNT`` and ``ONNXMEM_DIM_COUNT``; ``onnxmem_piece(dims)``
(the piece holding a point, -1 outside the box); ``onnxmem_arena_size(dims)``;
and per tensor ``onnxmem_offset_<id>(dims)`` and ``onnxmem_size_<id>(dims)``,
all ``static inline`` C99 functions of ``long long`` dims (each named ``d_`` +
the dim name; a name that would hold ``__`` there, which C++ reserves, such as ``_x`` or
``a__b``, has its runs of ``_`` made one, ends stripped, and a ``_2``, ``_3``, ... suffix where
another dim took that name: :func:`dim_variables`) returning the values :func:`onnxmem.plans.range.instantiate`
gives: offsets rounded up to the alignment, the arena the end of the highest
buffer. A plan over a lattice (``H = 32*H_q + residue`` per piece) computes each
quotient first, ``d_H_q = d_H / 32`` (the same for every residue), and a piece
holds a point when ``d_H % 32`` is its residue and the quotients are in its box. Tensor
identifiers come from :func:`onnxmem.export.c_header.c_identifiers`, so no
text of the model reaches the header except as those identifiers. A name prefix
(:func:`onnxmem.export.c_header.c_prefix`, ``--prefix enc``) replaces ``onnxmem`` in
every name: ``ENC_RANGE_PLAN_H``, ``ENC_ALIGNMENT``, ``enc_arena_size``,
``enc_offset_<id>``, ..., so range headers of several plans go into one translation unit.

The functions compute in ``long long``: a plan is refused (``PlanError``) when a
size, offset, slot or the arena of a piece may reach 2^62 on its box, counted
term by term (each term's largest magnitude, summed), so no step of the
arithmetic overflows. Plans ``onnxmem plan`` writes stay below that; a plan
edited by hand (a box widened past what was planned) may not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from onnxmem.core.errors import PlanError, show_name
from onnxmem.core.symbolic import Box, MaxPoly, Poly, monomial_value
from onnxmem.export.c_header import _SHA256, _UNDERSCORES, c_identifiers, c_prefix, ident_limit
from onnxmem.plans.point import MAX_VALUE
from onnxmem.plans.range import RangePiece, RangePlan, quotient_name

__all__ = ["dim_variables", "range_c_header"]


def dim_variables(names: Sequence[str]) -> dict[str, str]:
    """The C variable of each dim (and lattice quotient) name: ``d_`` + the name, unique, never
    holding ``__`` (a dim name is ``[A-Za-z_][A-Za-z0-9_]*``, the schema's rule).

    >>> dim_variables(["batch", "_batch", "a__b", "s_q"])
    {'batch': 'd_batch', '_batch': 'd_batch_2', 'a__b': 'd_a_b', 's_q': 'd_s_q'}
    """
    out: dict[str, str] = {}
    taken = {f"d_{n}" for n in names if "__" not in f"d_{n}"}  # the names kept as they are come first
    for n in names:
        var = f"d_{n}"
        if "__" in var:
            base = "d_" + (_UNDERSCORES.sub("_", n).strip("_") or "dim")
            var, k = base, 1
            while var in taken:
                k += 1
                var = f"{base}_{k}"
            taken.add(var)
        out[n] = var
    return out


def _c_poly(p: Poly, var: Mapping[str, str]) -> str:
    if not p.terms:
        return "0LL"
    parts = []
    for mono, c in p.terms:
        factors = [f"{c}LL"] + [var[name] for name, e in mono for _ in range(e)]
        parts.append("(" + " * ".join(factors) + ")")
    return "(" + " + ".join(parts) + ")"


def _c_max(e: MaxPoly, low: str, var: Mapping[str, str]) -> str:
    out = _c_poly(e.terms[0], var)
    for t in e.terms[1:]:
        out = f"{low}_max_({out}, {_c_poly(t, var)})"
    return out


def _magnitude(p: Poly, box: Box) -> int:
    """The sum over ``p``'s terms of each term's largest magnitude on ``box``: no partial sum or
    product of its evaluation, left to right, is larger (dims are non-negative)."""
    top = {k: max(hi, 1) for k, (_, hi) in box.items()}
    return sum(abs(c) * monomial_value(m, top) for m, c in p.terms)


def _check_64_bit(piece: RangePiece, where: str) -> None:
    """Raise ``PlanError`` when an expression of ``piece`` may reach 2^62 on its box."""
    exprs: list[tuple[str, Poly]] = [(f"the size of tensor {show_name(t.name)}", t.size) for t in piece.tensors]
    exprs += [(f"the offset of tensor {show_name(t.name)} in its buffer", t.group_offset) for t in piece.tensors]
    exprs += [(f"the slot of buffer {show_name(g)}", p) for g, p in piece.slots.items()]
    exprs += [(f"the offset of buffer {show_name(g)}", p) for g, e in piece.offsets.items() for p in e.terms]
    exprs += [("the arena", p) for p in piece.arena.terms]
    for what, p in exprs:
        top = _magnitude(p, piece.box)
        if top >= MAX_VALUE:
            raise PlanError(f"{where}: {what} may reach {top:,} bytes on the piece's box, not below 2^62, the "
                            "most onnxmem plans (the header computes in long long); re-plan the model")


def _arena_cases(plan: RangePlan, low: str, var: Mapping[str, str]) -> list[str]:
    """The ``case`` of each piece in ``<low>_arena_size``: the end of its highest buffer, each buffer's
    offset and fit rounded up to the alignment."""
    lines = []
    for i, p in enumerate(plan.pieces):
        lines.append(f"    case {i}:")
        size: dict[str, list[Poly]] = {}
        for t in p.tensors:
            size.setdefault(t.group, []).append(t.group_offset + t.size)
        for g in sorted(size):
            fit = _c_poly(size[g][0], var)
            for other in size[g][1:]:
                fit = f"{low}_max_({fit}, {_c_poly(other, var)})"
            lines.append(f"        end = {low}_max_(end, {low}_align_({_c_max(p.offsets[g], low, var)}) "
                         f"+ {low}_align_({fit}));")
        lines.append("        return end;")
    return lines


def range_c_header(plan: RangePlan, prefix: str | None = None) -> bytes:
    """The header's bytes (ASCII), its names prefixed with ``prefix`` (:func:`c_prefix`); ``PlanError`` for
    a plan whose values may pass 64-bit arithmetic."""
    prefix = c_prefix(prefix)
    low, up = prefix.lower(), prefix.upper()
    for i, piece in enumerate(plan.pieces):
        _check_64_bit(piece, f"range plan piece {i}")
    sha = str(plan.model.get("sha256", ""))
    sha = sha if _SHA256.fullmatch(sha) else "unknown"
    names = sorted(plan.box)
    var = dim_variables([*names, *(quotient_name(k) for k in sorted(plan.lattice))])
    params = ", ".join(f"long long {var[n]}" for n in names) or "void"
    args = ", ".join(var[n] for n in names)
    tensors = plan.pieces[0].tensors
    ids = c_identifiers([t.name for t in tensors], ident_limit(prefix))
    lines = [
        "/* Range memory plan written by onnxmem export --format c. Do not edit.",
        f" * model sha256: {sha}",
        f" * plan schema version: {int(plan.schema_version)} (range)",
        f" * Offsets and sizes are bytes from the start of one arena of {low}_arena_size(dims) bytes;",
        " * every function returns -1 for dims outside the plan's box.",
        " */",
        f"#ifndef {up}_RANGE_PLAN_H",
        f"#define {up}_RANGE_PLAN_H",
        "",
        f"#define {up}_ALIGNMENT {int(plan.alignment)}LL",
        f"#define {up}_TENSOR_COUNT {len(tensors)}",
        f"#define {up}_DIM_COUNT {len(names)}",
        "",
        f"static inline long long {low}_max_(long long a, long long b) {{ return a > b ? a : b; }}",
        f"static inline long long {low}_align_(long long v) "
        f"{{ return (v + {up}_ALIGNMENT - 1) / {up}_ALIGNMENT * {up}_ALIGNMENT; }}",
        "",
        f"static inline int {low}_piece({params}) {{",
    ]
    quotients = [f"    const long long {var[quotient_name(k)]} = {var[k]} / {int(st)}LL; (void){var[quotient_name(k)]};"
                 for k, st in sorted(plan.lattice.items())]
    lines += quotients
    for i, piece in enumerate(plan.pieces):
        conds = [f"{var[k]} % {int(st)}LL == {int(r)}LL" for k, (st, r) in sorted(piece.lattice.items())]
        conds += [f"{var[k]} >= {lo}LL && {var[k]} <= {hi}LL" for k, (lo, hi) in sorted(piece.box.items())]
        lines.append(f"    if ({' && '.join(conds) or '1'}) return {i};")
    lines += ["    return -1;", "}", ""]

    def dispatch(fn: str, exprs: list[str]) -> None:
        lines.append(f"static inline long long {fn}({params}) {{")
        lines.extend(quotients)
        lines.append(f"    switch ({low}_piece({args})) {{")
        for i, e in enumerate(exprs):
            lines.append(f"    case {i}: return {e};")
        lines.extend(["    default: return -1;", "    }", "}", ""])

    lines += [f"static inline long long {low}_arena_size({params}) {{", *quotients, "    long long end = 0;",
              f"    switch ({low}_piece({args})) {{", *_arena_cases(plan, low, var),
              "    default: return -1;", "    }", "}", ""]
    by_name = [{t.name: t for t in p.tensors} for p in plan.pieces]
    for t, ident in zip(tensors, ids):
        found = [(p, named.get(t.name)) for p, named in zip(plan.pieces, by_name)]
        dispatch(f"{low}_offset_{ident}",
                 [f"{low}_align_({_c_max(p.offsets[pt.group], low, var)}) + {_c_poly(pt.group_offset, var)}"
                  if pt is not None else "-1LL"
                  for p, pt in found])
        dispatch(f"{low}_size_{ident}", [_c_poly(pt.size, var) if pt is not None else "-1LL" for _, pt in found])
    lines += [f"#endif /* {up}_RANGE_PLAN_H */", ""]
    return "\n".join(lines).encode("ascii")
