"""Shapes by partial evaluation: onnxmem's own small interpreter for shape arithmetic.

Exporters that trace a program (TorchScript above all) compute shapes at run
time: ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, with ``Cast``,
arithmetic, ``Ceil``/``Clip`` (timm's "same" padding), ``Equal``/``Where`` and
``Range`` on the way. Static shape
inference leaves the results unknown wherever its data propagation stops.
This module evaluates those chains without weights and without onnxruntime:

1. Read what is known: the concrete shape of each top-level value (from the
   inference result given, dims resolved by the caller), and the values of
   small initializers (those the stripped inference copy keeps) and of
   ``Constant`` nodes. Graph inputs carry no values: their data is unknown.
2. Mark the values worth computing: every input in a shape slot of a
   consumer (``Reshape``'s shape, ``Expand``'s shape, ``Slice``'s starts...,
   see ``SHAPE_SLOTS``) and, backwards, every input of an evaluable node that
   produces a marked value (``Shape`` and ``Size`` need only a shape).
3. Evaluate the marked nodes in a stable topological order (Kahn's, never the
   file order), with numpy, for the ops of ``EVALUATORS`` only, each per the
   ONNX spec of the model's opset. A node whose inputs are not all known stays
   unknown.
4. Replace the producer of every evaluated value that sits in a shape slot by
   an initializer holding that value (a copy of the inference model, never the
   caller's), give every other evaluated value its exact shape as value_info,
   and run shape inference again. Repeat while a round evaluates something new,
   at most ``MAX_ROUNDS`` rounds.

Guarantees: a value is either exact or unknown, never guessed. Any value the
evaluator would make with more than ``MAX_ELEMENTS`` elements (checked from the
shapes before anything is allocated), any integer leaving its dtype's range
(integer arithmetic runs in int64 with every overflow detected, never
wrapped), an integer Range past 2^53 (where onnxruntime's own count, made in
double, can differ), any malformed attribute or input makes that value
unknown; all values of one pass hold at most ``MAX_TOTAL_ELEMENTS``, and a
node that fails with all its inputs known is not tried again. Symbolic dims are used only through the caller's
``resolve`` (which binds them to the user's ``--dim`` values through
:mod:`onnxmem.core.dimexpr`); a value that depends on an unbound dim stays unknown.
No string of the model is evaluated. It does not evaluate ops with subgraphs,
ops of other domains, or anything whose result depends on the graph inputs'
data (``NonZero``, ``TopK`` outputs...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxmem.core.toposort import stable_order

__all__ = [
    "EVALUATORS",
    "MAX_ELEMENTS",
    "MAX_RANK",
    "MAX_ROUNDS",
    "MAX_TOTAL_ELEMENTS",
    "SHAPE_SLOTS",
    "Evaluated",
    "evaluate_node",
    "evaluate_shapes",
    "graph_constants",
    "opset_version",
]

#: the most elements of any value the evaluator computes; past it the value is unknown
MAX_ELEMENTS = 2**20
#: the most elements all computed values hold together; past it the pass stops evaluating
MAX_TOTAL_ELEMENTS = 2**24
#: the highest rank of a computed value (numpy's own limit)
MAX_RANK = 64
#: rounds of (evaluate, fold, infer again) at most: a chain whose shape reads the output of
#: the previous chain's Pad or Reshape needs one round per link (Swin-T's TorchScript export: 16)
MAX_ROUNDS = 32

Dim = int | str | None

#: op -> positions of its inputs read as shapes, sizes, indices or axes (not as data)
SHAPE_SLOTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
    "Pad": (1, 2, 3),
    "Slice": (1, 2, 3, 4),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "Range": (0, 1, 2),
    "TopK": (1,),
    "OneHot": (1,),
    "Split": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,),
    "CenterCropPad": (1,),
    "MaxUnpool": (2,),
    "DFT": (1, 2),
    "STFT": (1, 3),
}

_NP_DTYPES: dict[int, type] = {
    TensorProto.BOOL: np.bool_,
    TensorProto.INT8: np.int8,
    TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
}
_ELEM_TYPES: dict[np.dtype, int] = {np.dtype(v): k for k, v in _NP_DTYPES.items()}


class _Unknown(Exception):
    """The value cannot be computed exactly (missing input, bound broken, malformed node)."""


# ------------------------------------------------------------------ helpers


def _count(shape: Sequence[int]) -> int:
    """The element count of ``shape``; unknown past ``MAX_ELEMENTS`` or ``MAX_RANK`` (checked before any allocation)."""
    if len(shape) > MAX_RANK:
        raise _Unknown
    n = 1
    for d in shape:
        if d < 0:
            raise _Unknown
        n *= d
        if n > MAX_ELEMENTS:
            raise _Unknown
    return n


def _checked(a: np.ndarray) -> np.ndarray:
    if a.dtype not in _ELEM_TYPES or a.size > MAX_ELEMENTS:
        raise _Unknown
    return a


def _ints(a: np.ndarray | None, *, rank: int | None = 1) -> list[int]:
    """The values of an integer tensor (of ``rank``, when given) as Python ints."""
    if a is None or not np.issubdtype(a.dtype, np.integer):
        raise _Unknown
    if rank is not None and a.ndim != rank:
        raise _Unknown
    return [int(v) for v in a.reshape(-1).tolist()]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise _Unknown
    return axis + rank if axis < 0 else axis


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _as_int64(a: np.ndarray) -> np.ndarray:
    """An integer or bool array as int64; unknown when a uint64 value does not fit."""
    if a.dtype == np.uint64 and a.size and int(a.max()) > _I64_MAX:
        raise _Unknown
    return a.astype(np.int64)


def _fit(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Exact int64 values in the integer ``dtype``; unknown when one does not fit."""
    info = np.iinfo(dtype)
    if values.size and (int(values.min()) < info.min or int(values.max()) > info.max):
        raise _Unknown
    return values.astype(dtype)


def _int_arith(kind: str, a: np.ndarray, b: np.ndarray, fmod: bool) -> np.ndarray:
    """``a kind b`` on int64 arrays of one shape, exactly: unknown on overflow or division by zero.

    Div truncates toward zero and Mod takes the divisor's sign (``fmod``: the
    dividend's), as onnxruntime does. Overflow is detected, never wrapped.
    """
    with np.errstate(all="ignore"):
        if kind == "Add":
            r = a + b
            bad = ((a ^ r) & (b ^ r)) < 0
        elif kind == "Sub":
            r = a - b
            bad = ((a ^ b) & (a ^ r)) < 0
        elif kind == "Mul":
            r = a * b
            nonzero = a != 0
            back = np.floor_divide(r, np.where(nonzero, a, 1))
            bad = (nonzero & (back != b)) | ((a == -1) & (b == _I64_MIN)) | ((b == -1) & (a == _I64_MIN))
        else:
            if np.any(b == 0) or np.any((a == _I64_MIN) & (b == -1) & (kind == "Div")):
                raise _Unknown
            safe = np.where(b == -1, 1, b)  # x / -1 and x % -1 without the machine's overflow trap
            if kind == "Div":
                q = np.floor_divide(a, safe)
                q = q + ((np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0)))
                r = np.where(b == -1, -a, q)
            else:
                r = np.where(b == -1, 0, np.fmod(a, safe) if fmod else np.remainder(a, safe))
            bad = np.zeros(r.shape, dtype=bool)
    if np.any(bad):
        raise _Unknown
    return np.asarray(r, dtype=np.int64)


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise _Unknown from None
    _count(out)
    return out


def _same_dtype(arrays: Sequence[np.ndarray]) -> np.dtype:
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise _Unknown
    return arrays[0].dtype


# ------------------------------------------------------------------ evaluators

Attrs = Mapping[str, object]
Inputs = Sequence["np.ndarray | None"]


@dataclass(frozen=True, slots=True)
class _Ctx:
    """What one node's evaluation may read besides its input values."""

    opset: int
    attrs: Attrs
    shapes: Sequence[tuple[int, ...] | None]  # the inputs' shapes, known without their values
    present: Sequence[bool]  # which inputs the node names (an optional input may be left out)


def _present(ctx: _Ctx, p: int) -> bool:
    return p < len(ctx.present) and ctx.present[p]


def _need(inputs: Inputs, *positions: int) -> list[np.ndarray]:
    out = []
    for p in positions:
        if p >= len(inputs) or inputs[p] is None:
            raise _Unknown
        out.append(inputs[p])
    return out  # type: ignore[return-value]


def _identity(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (x,) = _need(inputs, 0)
    return x


def _shape(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    shape = ctx.shapes[0] if ctx.shapes else None
    if shape is None:
        raise _Unknown
    rank = len(shape)
    since15 = ctx.opset >= 15  # start and end exist from opset 15
    start = int(ctx.attrs.get("start", 0)) if since15 else 0  # type: ignore[call-overload]
    end = int(ctx.attrs.get("end", rank)) if since15 else rank  # type: ignore[call-overload]
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(list(shape[start:end]), dtype=np.int64)


def _size(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    shape = ctx.shapes[0] if ctx.shapes else None
    if shape is None:
        raise _Unknown
    n = math.prod(shape)
    if n > np.iinfo(np.int64).max:
        raise _Unknown
    return np.array(n, dtype=np.int64)


def _constant(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    a = ctx.attrs
    if "value" in a and isinstance(a["value"], onnx.TensorProto):
        return _tensor_value(a["value"])
    if "value_int" in a:
        return np.array(int(a["value_int"]), dtype=np.int64)  # type: ignore[call-overload]
    if "value_ints" in a:
        _count((len(a["value_ints"]),))  # type: ignore[arg-type]
        return np.array([int(v) for v in a["value_ints"]], dtype=np.int64)  # type: ignore[attr-defined]
    if "value_float" in a:
        return np.array(float(a["value_float"]), dtype=np.float32)  # type: ignore[arg-type]
    if "value_floats" in a:
        _count((len(a["value_floats"]),))  # type: ignore[arg-type]
        return np.array([float(v) for v in a["value_floats"]], dtype=np.float32)  # type: ignore[attr-defined]
    raise _Unknown


def _gather(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    data, idx = _need(inputs, 0, 1)
    if data.ndim == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise _Unknown
    axis = _axis(int(ctx.attrs.get("axis", 0)), data.ndim)  # type: ignore[call-overload]
    n = data.shape[axis]
    flat = [int(i) for i in idx.reshape(-1)]
    if any(not -n <= i < n for i in flat):
        raise _Unknown
    _count(tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:]))
    fixed = np.array([i + n if i < 0 else i for i in flat], dtype=np.int64).reshape(idx.shape)
    return np.take(data, fixed, axis=axis)


def _axes_of(ctx: _Ctx, inputs: Inputs, since: int, position: int = 1) -> list[int] | None:
    """The ``axes`` of Squeeze/Unsqueeze/Reduce*: an attribute before opset ``since``, an input from it."""
    if ctx.opset >= since:
        if not _present(ctx, position):
            return None
        (a,) = _need(inputs, position)
        return _ints(a)
    axes = ctx.attrs.get("axes")
    return None if axes is None else [int(v) for v in axes]  # type: ignore[attr-defined]


def _unsqueeze(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (x,) = _need(inputs, 0)
    axes = _axes_of(ctx, inputs, 13)
    if axes is None:
        raise _Unknown
    rank = x.ndim + len(axes)
    if rank > MAX_RANK:
        raise _Unknown
    norm = sorted(_axis(a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise _Unknown
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return x.reshape(shape)


def _squeeze(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (x,) = _need(inputs, 0)
    axes = _axes_of(ctx, inputs, 13)
    if axes is None:
        norm = [i for i, d in enumerate(x.shape) if d == 1]
    else:
        norm = sorted(_axis(a, x.ndim) for a in axes)
        if len(set(norm)) != len(norm) or any(x.shape[a] != 1 for a in norm):
            raise _Unknown
    return x.reshape([d for i, d in enumerate(x.shape) if i not in norm])


def _concat(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    arrays = _need(inputs, *range(len(inputs)))
    if not arrays or arrays[0].ndim == 0 or "axis" not in ctx.attrs:
        raise _Unknown
    _same_dtype(arrays)
    rank = arrays[0].ndim
    if any(a.ndim != rank for a in arrays):
        raise _Unknown
    axis = _axis(int(ctx.attrs["axis"]), rank)  # type: ignore[call-overload]
    for a in arrays:
        if a.shape[:axis] != arrays[0].shape[:axis] or a.shape[axis + 1:] != arrays[0].shape[axis + 1:]:
            raise _Unknown
    _count(arrays[0].shape[:axis] + (sum(a.shape[axis] for a in arrays),) + arrays[0].shape[axis + 1:])
    return np.concatenate(arrays, axis=axis)


def reshape_target(shape: Sequence[int], spec: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    """The output shape of ``Reshape(x of shape, spec)``: 0 copies x's dim (unless ``allowzero``), -1 is inferred.

    >>> reshape_target((2, 3, 4), (0, -1), False)
    (2, 12)
    """
    if len(spec) > MAX_RANK:
        raise _Unknown
    out: list[int] = []
    infer = -1
    for i, d in enumerate(spec):
        if d == -1:
            if infer >= 0:
                raise _Unknown
            infer = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(shape):
                raise _Unknown
            out.append(shape[i])
        elif d < 0:
            raise _Unknown
        else:
            out.append(d)
    total = math.prod(shape)
    if infer >= 0:
        rest = math.prod(out)
        if rest == 0 or total % rest:
            raise _Unknown
        out[infer] = total // rest
    if math.prod(out) != total:
        raise _Unknown
    return tuple(out)


def _reshape(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    if ctx.opset < 5:
        raise _Unknown
    x, spec = _need(inputs, 0, 1)
    allowzero = bool(ctx.attrs.get("allowzero", 0)) and ctx.opset >= 14
    values = _ints(spec)
    if allowzero and 0 in values and -1 in values:
        raise _Unknown
    return x.reshape(reshape_target(x.shape, values, allowzero))


def _expand(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    x, spec = _need(inputs, 0, 1)
    target = _ints(spec)
    if any(d < 0 for d in target):
        raise _Unknown
    out = _broadcast(tuple(x.shape), tuple(target))
    return np.broadcast_to(x, out).copy()


def _cast(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (x,) = _need(inputs, 0)
    to = int(ctx.attrs.get("to", 0))  # type: ignore[call-overload]
    if to not in _NP_DTYPES:
        raise _Unknown
    dtype: np.dtype = np.dtype(_NP_DTYPES[to])
    if dtype == np.bool_:
        return x != 0
    if np.issubdtype(dtype, np.integer):
        if not np.issubdtype(x.dtype, np.floating):
            return _fit(_as_int64(x), dtype)
        info = np.iinfo(dtype)
        t = np.trunc(x.astype(np.float64))  # C's cast truncates toward zero
        if not np.all(np.isfinite(t)) or np.any(t < float(info.min)) or np.any(t >= float(info.max) + 1):
            raise _Unknown
        return t.astype(dtype)
    return x.astype(dtype)


def _binary(kind: str) -> Callable[[_Ctx, Inputs], np.ndarray]:
    def run(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
        a, b = _need(inputs, 0, 1)
        if ctx.opset < 7 and ("broadcast" in ctx.attrs or "axis" in ctx.attrs):
            raise _Unknown
        dtype = _same_dtype([a, b])
        if dtype == np.bool_:
            raise _Unknown
        shape = _broadcast(a.shape, b.shape)
        if np.issubdtype(dtype, np.integer):
            x, y = np.broadcast_to(_as_int64(a), shape), np.broadcast_to(_as_int64(b), shape)
            fmod = bool(int(ctx.attrs.get("fmod", 0)))  # type: ignore[call-overload]
            return _fit(_int_arith(kind, x, y, fmod), dtype)
        with np.errstate(all="ignore"):
            if kind == "Add":
                return np.add(a, b)
            if kind == "Sub":
                return np.subtract(a, b)
            if kind == "Mul":
                return np.multiply(a, b)
            if kind == "Div":
                return np.divide(a, b)
            if not int(ctx.attrs.get("fmod", 0)):  # type: ignore[call-overload]
                raise _Unknown  # float Mod requires fmod=1
            return np.fmod(a, b)

    return run


_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
}


def _compare(kind: str) -> Callable[[_Ctx, Inputs], np.ndarray]:
    def run(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
        a, b = _need(inputs, 0, 1)
        _same_dtype([a, b])
        _broadcast(a.shape, b.shape)
        return np.asarray(_COMPARE[kind](a, b))

    return run


def _logical(kind: str) -> Callable[[_Ctx, Inputs], np.ndarray]:
    def run(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
        arrays = _need(inputs, *range(1 if kind == "Not" else 2))
        if any(a.dtype != np.bool_ for a in arrays):
            raise _Unknown
        if kind == "Not":
            return np.logical_not(arrays[0])
        _broadcast(arrays[0].shape, arrays[1].shape)
        return (np.logical_and if kind == "And" else np.logical_or)(arrays[0], arrays[1])

    return run


def _unary(kind: str) -> Callable[[_Ctx, Inputs], np.ndarray]:
    def run(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
        (x,) = _need(inputs, 0)
        if x.dtype == np.bool_:
            raise _Unknown
        if kind in ("Floor", "Ceil"):
            if not np.issubdtype(x.dtype, np.floating):
                raise _Unknown
            return (np.floor if kind == "Floor" else np.ceil)(x)
        if np.issubdtype(x.dtype, np.integer):
            v = _as_int64(x)
            if np.any(v == _I64_MIN):
                raise _Unknown
            return _fit(-v if kind == "Neg" else np.abs(v), x.dtype)
        return np.negative(x) if kind == "Neg" else np.abs(x)

    return run


def _transpose(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (x,) = _need(inputs, 0)
    perm_attr = ctx.attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm_attr is None else [int(v) for v in perm_attr]  # type: ignore[attr-defined]
    if sorted(perm) != list(range(x.ndim)):
        raise _Unknown
    return np.ascontiguousarray(np.transpose(x, perm))


def _where(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    c, x, y = _need(inputs, 0, 1, 2)
    if c.dtype != np.bool_:
        raise _Unknown
    _same_dtype([x, y])
    _broadcast(c.shape, x.shape, y.shape)
    return np.where(c, x, y)


def _extreme(kind: str) -> Callable[[_Ctx, Inputs], np.ndarray]:
    def run(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
        arrays = _need(inputs, *range(len(inputs)))
        if not arrays:
            raise _Unknown
        _same_dtype(arrays)
        _broadcast(*(a.shape for a in arrays))
        out = arrays[0]
        for a in arrays[1:]:
            out = np.minimum(out, a) if kind == "Min" else np.maximum(out, a)
        return out

    return run


def _clip(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    """Clip: ``min(max(x, lo), hi)``, so ``hi`` wins when ``lo > hi`` (as onnxruntime does).

    From opset 11 the bounds are optional scalar inputs of ``x``'s dtype; before, float
    attributes (and ``x`` is a float tensor).
    """
    (x,) = _need(inputs, 0)
    if x.dtype == np.bool_:
        raise _Unknown
    bounds: list[np.ndarray | None] = [None, None]
    if ctx.opset >= 11:
        for k, p in enumerate((1, 2)):
            if _present(ctx, p):
                (b,) = _need(inputs, p)
                if b.size != 1 or b.ndim > 1 or b.dtype != x.dtype:
                    raise _Unknown
                bounds[k] = b.reshape(())
    else:
        if not np.issubdtype(x.dtype, np.floating):
            raise _Unknown
        for k, key in enumerate(("min", "max")):
            if key in ctx.attrs:
                bounds[k] = np.array(float(ctx.attrs[key]), dtype=x.dtype)  # type: ignore[arg-type]
    lo, hi = bounds
    out = x if lo is None else np.maximum(x, lo)
    return np.asarray(out if hi is None else np.minimum(out, hi), dtype=x.dtype)


def _product(values: list[int]) -> int:
    """The exact product of integers, unknown once it leaves int64 (a zero anywhere makes it 0)."""
    if 0 in values:
        return 0
    p = 1
    for v in values:
        p *= v
        if not _I64_MIN <= p <= _I64_MAX:
            raise _Unknown
    return p


def _reduce_prod(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (x,) = _need(inputs, 0)
    axes = _axes_of(ctx, inputs, 18)
    keepdims = bool(ctx.attrs.get("keepdims", 1))
    if axes is None or not axes:
        if ctx.opset >= 18 and int(ctx.attrs.get("noop_with_empty_axes", 0)):  # type: ignore[call-overload]
            return x
        norm = list(range(x.ndim))
    else:
        norm = sorted({_axis(a, x.ndim) for a in axes})
        if len(norm) != len(axes):
            raise _Unknown
    if np.issubdtype(x.dtype, np.integer):
        kept = [a for a in range(x.ndim) if a not in norm]
        groups = np.transpose(x, kept + norm).reshape(math.prod(x.shape[a] for a in kept), -1)
        out = np.array([_product(row) for row in _as_int64(groups).tolist()], dtype=np.int64)
        shape = [1 if a in norm else d for a, d in enumerate(x.shape)] if keepdims else [x.shape[a] for a in kept]
        return _fit(out.reshape(shape), x.dtype)
    if x.dtype == np.bool_:
        raise _Unknown
    return np.asarray(np.prod(x, axis=tuple(norm), keepdims=keepdims), dtype=x.dtype)


def slice_indices(dim: int, start: int, end: int, step: int) -> range:
    """The indices ``Slice`` takes along one axis of size ``dim``, clamped as the ONNX spec says.

    >>> list(slice_indices(5, -2, 2**63 - 1, 1))
    [3, 4]
    >>> list(slice_indices(5, 2**63 - 1, -2**63, -2))
    [4, 2, 0]
    """
    if step == 0:
        raise _Unknown
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
    else:
        start = min(max(start, 0), dim - 1)
        end = min(max(end, -1), dim - 1)
    return range(start, end, step)


def _slice(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (x,) = _need(inputs, 0)
    if x.ndim == 0:
        raise _Unknown
    if ctx.opset < 10:
        starts = [int(v) for v in ctx.attrs.get("starts", [])]  # type: ignore[attr-defined]
        ends = [int(v) for v in ctx.attrs.get("ends", [])]  # type: ignore[attr-defined]
        axes_attr = ctx.attrs.get("axes")
        axes = list(range(len(starts))) if axes_attr is None else [int(v) for v in axes_attr]  # type: ignore[attr-defined]
        steps = [1] * len(starts)
    else:
        s, e = _need(inputs, 1, 2)
        starts, ends = _ints(s), _ints(e)
        a = _need(inputs, 3)[0] if _present(ctx, 3) else None
        st = _need(inputs, 4)[0] if _present(ctx, 4) else None
        axes = list(range(len(starts))) if a is None else _ints(a)
        steps = [1] * len(starts) if st is None else _ints(st)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _Unknown
    norm = [_axis(v, x.ndim) for v in axes]
    if len(set(norm)) != len(norm):
        raise _Unknown
    picks: list[range] = [range(d) for d in x.shape]
    for ax, begin, stop, step in zip(norm, starts, ends, steps):
        picks[ax] = slice_indices(x.shape[ax], begin, stop, step)
    _count([len(r) for r in picks])
    out = x
    for ax, r in enumerate(picks):
        if len(r) != x.shape[ax] or r.step != 1:
            out = np.take(out, np.array(list(r), dtype=np.int64), axis=ax)
    return out


def _range(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    start, limit, delta = _need(inputs, 0, 1, 2)
    if not (start.ndim == limit.ndim == delta.ndim == 0):
        raise _Unknown
    dtype = _same_dtype([start, limit, delta])
    if dtype not in (np.float32, np.float64, np.int16, np.int32, np.int64):  # the spec's types
        raise _Unknown
    if np.issubdtype(dtype, np.integer):
        s, lim, d = int(start), int(limit), int(delta)
        # onnxruntime counts in double: past 2^53 its count can differ from the exact one
        if d == 0 or any(abs(v) > 2**53 for v in (s, lim, d, lim - s)):
            raise _Unknown
        n = max(-(-(lim - s) // d), 0)
        _count((n,))
        info = np.iinfo(dtype)
        if n and not info.min <= s + (n - 1) * d <= info.max:
            raise _Unknown
        with np.errstate(all="ignore"):  # i * d may wrap; s + i * d is in range, so exact
            return (np.arange(n, dtype=np.int64) * np.int64(d) + np.int64(s)).astype(dtype)
    s_f, lim_f, d_f = float(start), float(limit), float(delta)
    if d_f == 0 or not all(math.isfinite(v) for v in (s_f, lim_f, d_f)):
        raise _Unknown
    # as onnxruntime: ceil((limit - start) / delta) computed in the dtype; each value the
    # previous one plus delta, in the dtype
    with np.errstate(all="ignore"):
        steps = float(np.divide(np.subtract(limit, start, dtype=dtype), delta, dtype=dtype))
    if not math.isfinite(steps):
        raise _Unknown
    n = max(math.ceil(steps), 0)
    _count((n,))
    terms = np.full(n, delta, dtype=dtype)
    if n:
        terms[0] = start
    with np.errstate(all="ignore"):
        return np.add.accumulate(terms, dtype=dtype)  # sequential, as the running sum is


def _constant_of_shape(ctx: _Ctx, inputs: Inputs) -> np.ndarray:
    (spec,) = _need(inputs, 0)
    shape = _ints(spec)
    if any(d < 0 for d in shape):
        raise _Unknown
    _count(shape)
    value = ctx.attrs.get("value")
    if value is None:
        fill = np.zeros((), dtype=np.float32)
    elif isinstance(value, onnx.TensorProto):
        fill = _tensor_value(value)
        if fill.size != 1:
            raise _Unknown
    else:
        raise _Unknown
    return np.full(shape, fill.reshape(()), dtype=fill.dtype)


#: op -> evaluator (ONNX domain): exactly the ops of shape arithmetic
EVALUATORS: dict[str, Callable[[_Ctx, Inputs], np.ndarray]] = {
    "Constant": _constant,
    "Identity": _identity,
    "Shape": _shape,
    "Size": _size,
    "Gather": _gather,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Reshape": _reshape,
    "Expand": _expand,
    "Cast": _cast,
    "Add": _binary("Add"),
    "Sub": _binary("Sub"),
    "Mul": _binary("Mul"),
    "Div": _binary("Div"),
    "Mod": _binary("Mod"),
    "Equal": _compare("Equal"),
    "Less": _compare("Less"),
    "Greater": _compare("Greater"),
    "LessOrEqual": _compare("LessOrEqual"),
    "GreaterOrEqual": _compare("GreaterOrEqual"),
    "Not": _logical("Not"),
    "And": _logical("And"),
    "Or": _logical("Or"),
    "Neg": _unary("Neg"),
    "Abs": _unary("Abs"),
    "Floor": _unary("Floor"),
    "Ceil": _unary("Ceil"),
    "Transpose": _transpose,
    "Where": _where,
    "Clip": _clip,
    "Min": _extreme("Min"),
    "Max": _extreme("Max"),
    "ReduceProd": _reduce_prod,
    "Slice": _slice,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
}

#: ops that read only their input's shape, not its values
_SHAPE_ONLY = {"Shape", "Size"}


def _tensor_value(t: onnx.TensorProto) -> np.ndarray:
    """The value of a tensor held in the file, when it is small, inline and of a numeric dtype."""
    if t.data_location == TensorProto.EXTERNAL or t.data_type not in _NP_DTYPES:
        raise _Unknown
    dims = [int(d) for d in t.dims]
    _count(dims)
    try:
        a = numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001 - a malformed tensor is an unknown value
        raise _Unknown from None
    if tuple(a.shape) != tuple(dims):
        raise _Unknown
    return _checked(np.array(a, dtype=_NP_DTYPES[t.data_type]))


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    out: dict[str, object] = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise _Unknown
        out[attr.name] = helper.get_attribute_value(attr)
    return out


def evaluate_node(
    node: onnx.NodeProto,
    inputs: Sequence[np.ndarray | None],
    shapes: Sequence[tuple[int, ...] | None],
    opset: int,
) -> np.ndarray | None:
    """The value of ``node``'s (single) output, or ``None`` when it is unknown.

    ``inputs`` holds the known input values (``None`` where unknown or absent),
    ``shapes`` the inputs' known shapes (``Shape`` and ``Size`` read only
    these). Raises nothing for a malformed node: its value is unknown.
    """
    run = EVALUATORS.get(node.op_type)
    if run is None or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    try:
        ctx = _Ctx(opset, _attrs(node), list(shapes), [bool(name) for name in node.input])
        out = np.asarray(run(ctx, list(inputs)))
        return _checked(out)
    except (_Unknown, ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError):
        return None


# ------------------------------------------------------------------ the pass


@dataclass(frozen=True, slots=True)
class Evaluated:
    """The result of :func:`evaluate_shapes`.

    ``model`` is the last inference result (on the folded copy) or the one
    given when nothing was evaluated; ``shapes`` holds ``(elem_type, shape)``
    of every value the interpreter computed; ``values`` the values themselves;
    ``rounds`` counts the inference reruns, ``folded`` the values made initializers.
    """

    model: onnx.ModelProto
    shapes: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    rounds: int = 0
    folded: int = 0


def opset_version(model: onnx.ModelProto) -> int:
    """The model's ai.onnx opset version (0 when it imports none)."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _topological(nodes: Sequence[onnx.NodeProto]) -> list[int]:
    """Node indices in a stable topological order over explicit inputs (Kahn's; a cycle's nodes are left out)."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer.setdefault(o, i)
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for name in set(n.input):
            p = producer.get(name)
            if name and p is not None and p != i:
                users[p].append(i)
    return stable_order(users)


def _needed(nodes: Sequence[onnx.NodeProto], also: Sequence[str] = ()) -> set[str]:
    """Every value in a shape slot (and each of ``also``) and, backwards through evaluable nodes,
    every value those need."""
    producer = {o: n for n in nodes for o in n.output if o}
    stack = [
        n.input[p] for n in nodes if n.domain in ("", "ai.onnx")
        for p in SHAPE_SLOTS.get(n.op_type, ()) if p < len(n.input) and n.input[p]
    ] + [name for name in also if name]
    needed: set[str] = set()
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producer.get(name)
        if node is None or node.op_type not in EVALUATORS or node.op_type in _SHAPE_ONLY:
            continue
        stack.extend(i for i in node.input if i)
    return needed


def _known_shapes(
    model: onnx.ModelProto, resolve: Callable[[Dim], int | None]
) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    g = model.graph
    for init in g.initializer:
        out[init.name] = tuple(int(d) for d in init.dims)
    for vi in (*g.input, *g.value_info, *g.output):
        t = vi.type
        if vi.name in out or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            continue
        dims: list[int] = []
        for d in t.tensor_type.shape.dim:
            raw: Dim = int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
            value = resolve(raw)
            if value is None:
                break
            dims.append(value)
        else:
            out[vi.name] = tuple(dims)
    return out


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Values of the initializers the graph cannot override (no graph input of the same name, from IR 4 on)."""
    g = model.graph
    inputs = {vi.name for vi in g.input} if model.ir_version >= 4 else set()
    out: dict[str, np.ndarray] = {}
    for init in g.initializer:
        if init.name in inputs:
            continue
        try:
            out[init.name] = _tensor_value(init)
        except _Unknown:
            continue
    return out


def graph_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The values ``model``'s top-level graph holds in the file: its small inline initializers
    (see :func:`_constants`) and the outputs of its ``Constant`` nodes, each within ``MAX_ELEMENTS``."""
    out = _constants(model)
    opset = opset_version(model)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            value = evaluate_node(node, [], [], opset)
            if value is not None:
                out[node.output[0]] = value
    return out


def _fold(
    work: onnx.ModelProto,
    values: Mapping[str, np.ndarray],
    fold: set[str],
    shapes: Mapping[str, tuple[int, tuple[int, ...]]],
) -> onnx.ModelProto:
    """A copy of ``work`` whose producers of ``fold`` values are initializers, other evaluated values typed."""
    m = onnx.ModelProto()
    m.CopyFrom(work)
    g = m.graph
    keep = [n for n in g.node if not (len(n.output) == 1 and n.output[0] in fold)]
    del g.node[:]
    g.node.extend(keep)
    for name in sorted(fold):
        g.initializer.append(numpy_helper.from_array(values[name], name))
    typed = {vi.name for vi in (*g.input, *g.output, *g.value_info)}
    for name in sorted(shapes):
        if name not in fold and name not in typed:
            et, shape = shapes[name]
            g.value_info.append(helper.make_tensor_value_info(name, et, list(shape)))
    return m


def evaluate_shapes(
    work: onnx.ModelProto,
    inferred: onnx.ModelProto,
    *,
    infer: Callable[[onnx.ModelProto], onnx.ModelProto | None],
    resolve: Callable[[Dim], int | None],
    max_rounds: int = MAX_ROUNDS,
    also: Sequence[str] = (),
) -> Evaluated:
    """Evaluate the shape arithmetic of ``work`` and infer shapes again with its results.

    ``work`` is the inference copy (small initializers only, inputs bound),
    ``inferred`` shape inference's result on it, ``infer`` the inference to
    rerun, ``resolve`` the value of one declared dim (``None`` when unbound).
    ``also`` names values to compute besides those in shape slots (an If's
    condition, which decides the shapes after it). Neither model is changed.
    See the module docstring for the steps.
    """
    nodes = list(work.graph.node)
    needed = _needed(nodes, also)
    if not needed:
        return Evaluated(inferred)
    opset = opset_version(work)
    order = _topological(nodes)
    values = _constants(work)
    slots = {
        n.input[p] for n in nodes if n.domain in ("", "ai.onnx")
        for p in SHAPE_SLOTS.get(n.op_type, ()) if p < len(n.input) and n.input[p]
    }
    producers = {o for n in nodes for o in n.output if o}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for name in set(n.input):
            consumers.setdefault(name, []).append(n)
    fold: set[str] = set()
    failed: set[int] = set()
    current, rounds, folded = inferred, 0, 0
    made: dict[str, np.ndarray] = {}
    typed: dict[str, tuple[int, tuple[int, ...]]] = {}
    budget = MAX_TOTAL_ELEMENTS - sum(v.size for v in values.values())
    for _ in range(max_rounds):
        shapes = _known_shapes(current, resolve)
        shapes.update({k: v[1] for k, v in typed.items()})
        before = set(shapes)
        new: list[str] = []
        for i in order:
            node = nodes[i]
            if i in failed or len(node.output) != 1 or node.output[0] not in needed or node.output[0] in values:
                continue
            ins = [values.get(name) if name else None for name in node.input]
            in_shapes = [shapes.get(name) if name else None for name in node.input]
            out = evaluate_node(node, ins, in_shapes, opset)
            if out is None:
                # with every input known, a later round cannot do better: never try it again
                read = in_shapes if node.op_type in _SHAPE_ONLY else ins
                if all(v is not None for name, v in zip(node.input, read) if name):
                    failed.add(i)
                continue
            if out.size > budget:
                continue
            budget -= out.size
            name = node.output[0]
            values[name] = out
            shapes[name] = tuple(out.shape)
            typed[name] = (_ELEM_TYPES[out.dtype], tuple(int(d) for d in out.shape))
            made[name] = out
            new.append(name)
        # infer again only when a new value can teach inference something it does not know
        useful = [n for n in new if n not in before] + [
            n for n in new if n in slots and n in producers
            and any(o and o not in before for c in consumers.get(n, ()) for o in c.output)
        ]
        if not useful:
            break
        fold |= {n for n in new if n in slots and n in producers}
        again = infer(_fold(work, values, fold, typed))
        if again is None:
            break
        current, rounds, folded = again, rounds + 1, len(fold)
    return Evaluated(current, typed, made, rounds, folded)
