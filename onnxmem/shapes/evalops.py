"""The op rules of the shape-arithmetic interpreter: one evaluator per ONNX op (``EVALUATORS``).

Each evaluator computes one node's output with numpy, per the ONNX spec of the model's
opset, from its known input values and an :class:`~onnxmem.shapes.evalbase.OpContext`;
it raises :class:`~onnxmem.shapes.evalbase.Unknown` for any value it cannot compute exactly.
:mod:`onnxmem.shapes.shapeeval` drives them.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import onnx

from onnxmem.shapes.evalbase import (
    I64_MAX,
    I64_MIN,
    MAX_RANK,
    NP_DTYPES,
    Inputs,
    OpContext,
    OutOfRange,
    Unknown,
    as_int64,
    as_ints,
    broadcast_shape,
    element_count,
    fit_dtype,
    int_arith,
    is_floating,
    is_integer,
    is_present,
    need_inputs,
    normalized_axis,
    same_dtype,
    tensor_value,
)

__all__ = ["EVALUATORS", "reshape_target", "slice_indices"]



def _identity(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (x,) = need_inputs(inputs, 0)
    return x


def _shape(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    shape = ctx.shapes[0] if ctx.shapes else None
    since15 = ctx.opset >= 15  # start and end exist from opset 15
    if since15 and ctx.attrs.get("start", 0) == 0 and ctx.attrs.get("end", None) == 0:
        return np.zeros(0, dtype=np.int64)  # empty at any rank: a data edge, no shape needed
    if shape is None:
        raise Unknown
    rank = len(shape)
    start = int(ctx.attrs.get("start", 0)) if since15 else 0  # type: ignore[call-overload]
    end = int(ctx.attrs.get("end", rank)) if since15 else rank  # type: ignore[call-overload]
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(list(shape[start:end]), dtype=np.int64)


def _size(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    shape = ctx.shapes[0] if ctx.shapes else None
    if shape is None:
        raise Unknown
    n = math.prod(shape)
    if n > np.iinfo(np.int64).max:
        raise Unknown
    return np.array(n, dtype=np.int64)


def _constant(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    a = ctx.attrs
    if "value" in a and isinstance(a["value"], onnx.TensorProto):
        return tensor_value(a["value"])
    if "value_int" in a:
        return np.array(int(a["value_int"]), dtype=np.int64)  # type: ignore[call-overload]
    if "value_ints" in a:
        element_count((len(a["value_ints"]),))  # type: ignore[arg-type]
        return np.array([int(v) for v in a["value_ints"]], dtype=np.int64)  # type: ignore[attr-defined]
    if "value_float" in a:
        return np.array(float(a["value_float"]), dtype=np.float32)  # type: ignore[arg-type]
    if "value_floats" in a:
        element_count((len(a["value_floats"]),))  # type: ignore[arg-type]
        return np.array([float(v) for v in a["value_floats"]], dtype=np.float32)  # type: ignore[attr-defined]
    raise Unknown


def _gather(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    data, idx = need_inputs(inputs, 0, 1)
    if data.ndim == 0 or not is_integer(idx.dtype):
        raise Unknown
    axis = normalized_axis(int(ctx.attrs.get("axis", 0)), data.ndim)  # type: ignore[call-overload]
    n = data.shape[axis]
    flat = [int(i) for i in idx.reshape(-1)]
    if any(not -n <= i < n for i in flat):
        raise Unknown
    element_count(tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:]))
    fixed = np.array([i + n if i < 0 else i for i in flat], dtype=np.int64).reshape(idx.shape)
    return np.take(data, fixed, axis=axis)


def _axes_of(ctx: OpContext, inputs: Inputs, since: int, position: int = 1) -> list[int] | None:
    """The ``axes`` of Squeeze/Unsqueeze/Reduce*: an attribute before opset ``since``, an input from it."""
    if ctx.opset >= since:
        if not is_present(ctx, position):
            return None
        (a,) = need_inputs(inputs, position)
        return as_ints(a)
    axes = ctx.attrs.get("axes")
    return None if axes is None else [int(v) for v in axes]  # type: ignore[attr-defined]


def _unsqueeze(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (x,) = need_inputs(inputs, 0)
    axes = _axes_of(ctx, inputs, 13)
    if axes is None:
        raise Unknown
    rank = x.ndim + len(axes)
    if rank > MAX_RANK:
        raise Unknown
    norm = sorted(normalized_axis(a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise Unknown
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return x.reshape(shape)


def _squeeze(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (x,) = need_inputs(inputs, 0)
    axes = _axes_of(ctx, inputs, 13)
    if axes is None:
        norm = [i for i, d in enumerate(x.shape) if d == 1]
    else:
        norm = sorted(normalized_axis(a, x.ndim) for a in axes)
        if len(set(norm)) != len(norm) or any(x.shape[a] != 1 for a in norm):
            raise Unknown
    return x.reshape([d for i, d in enumerate(x.shape) if i not in norm])


def _concat(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    arrays = need_inputs(inputs, *range(len(inputs)))
    if not arrays or arrays[0].ndim == 0 or "axis" not in ctx.attrs:
        raise Unknown
    same_dtype(arrays)
    rank = arrays[0].ndim
    if any(a.ndim != rank for a in arrays):
        raise Unknown
    axis = normalized_axis(int(ctx.attrs["axis"]), rank)  # type: ignore[call-overload]
    for a in arrays:
        if a.shape[:axis] != arrays[0].shape[:axis] or a.shape[axis + 1:] != arrays[0].shape[axis + 1:]:
            raise Unknown
    element_count(arrays[0].shape[:axis] + (sum(a.shape[axis] for a in arrays),) + arrays[0].shape[axis + 1:])
    return np.concatenate(arrays, axis=axis)


def reshape_target(shape: Sequence[int], spec: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    """The output shape of ``Reshape(x of shape, spec)``: 0 copies x's dim (unless ``allowzero``), -1 is inferred.

    >>> reshape_target((2, 3, 4), (0, -1), False)
    (2, 12)
    """
    if len(spec) > MAX_RANK:
        raise Unknown
    out: list[int] = []
    infer = -1
    for i, d in enumerate(spec):
        if d == -1:
            if infer >= 0:
                raise Unknown
            infer = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(shape):
                raise Unknown
            out.append(shape[i])
        elif d < 0:
            raise Unknown
        else:
            out.append(d)
    total = math.prod(shape)
    if infer >= 0:
        rest = math.prod(out)
        if rest == 0 or total % rest:
            raise Unknown
        out[infer] = total // rest
    if math.prod(out) != total:
        raise Unknown
    return tuple(out)


def _reshape(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    if ctx.opset < 5:
        raise Unknown
    x, spec = need_inputs(inputs, 0, 1)
    allowzero = bool(ctx.attrs.get("allowzero", 0)) and ctx.opset >= 14
    values = as_ints(spec)
    if allowzero and 0 in values and -1 in values:
        raise Unknown
    return x.reshape(reshape_target(x.shape, values, allowzero))


def _expand(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    x, spec = need_inputs(inputs, 0, 1)
    target = as_ints(spec)
    if any(d < 0 for d in target):
        raise Unknown
    out = broadcast_shape(tuple(x.shape), tuple(target))
    return np.broadcast_to(x, out).copy()


def _cast(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (x,) = need_inputs(inputs, 0)
    to = int(ctx.attrs.get("to", 0))  # type: ignore[call-overload]
    if to not in NP_DTYPES:
        raise Unknown
    dtype: np.dtype = np.dtype(NP_DTYPES[to])
    if dtype == np.bool_:
        return x != 0
    if is_integer(dtype):
        if not is_floating(x.dtype):
            return x.astype(dtype)  # modulo 2^bits, two's complement: onnxruntime's static_cast
        info = np.iinfo(dtype)
        t = np.trunc(x.astype(np.float64))  # C's cast truncates toward zero
        if not np.all(np.isfinite(t)) or np.any(t < float(info.min)) or np.any(t >= float(info.max) + 1):
            raise OutOfRange  # undefined in C++
        return t.astype(dtype)
    return x.astype(dtype)


def _binary(kind: str) -> Callable[[OpContext, Inputs], np.ndarray]:
    def run(ctx: OpContext, inputs: Inputs) -> np.ndarray:
        a, b = need_inputs(inputs, 0, 1)
        if ctx.opset < 7 and ("broadcast" in ctx.attrs or "axis" in ctx.attrs):
            raise Unknown
        dtype = same_dtype([a, b])
        if dtype == np.bool_:
            raise Unknown
        shape = broadcast_shape(a.shape, b.shape)
        if is_integer(dtype):
            x, y = (v if v.shape == shape else np.broadcast_to(v, shape) for v in (as_int64(a), as_int64(b)))
            fmod = bool(int(ctx.attrs.get("fmod", 0)))  # type: ignore[call-overload]
            exact = int_arith(kind, x, y, fmod)  # a new int64 array
            return exact if dtype == np.int64 else fit_dtype(exact, dtype)
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
                raise Unknown  # float Mod requires fmod=1
            return np.fmod(a, b)

    return run


_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
}


def _compare(kind: str) -> Callable[[OpContext, Inputs], np.ndarray]:
    def run(ctx: OpContext, inputs: Inputs) -> np.ndarray:
        a, b = need_inputs(inputs, 0, 1)
        same_dtype([a, b])
        broadcast_shape(a.shape, b.shape)
        return np.asarray(_COMPARE[kind](a, b))

    return run


def _logical(kind: str) -> Callable[[OpContext, Inputs], np.ndarray]:
    def run(ctx: OpContext, inputs: Inputs) -> np.ndarray:
        arrays = need_inputs(inputs, *range(1 if kind == "Not" else 2))
        if any(a.dtype != np.bool_ for a in arrays):
            raise Unknown
        if kind == "Not":
            return np.logical_not(arrays[0])
        broadcast_shape(arrays[0].shape, arrays[1].shape)
        return (np.logical_and if kind == "And" else np.logical_or)(arrays[0], arrays[1])

    return run


def _unary(kind: str) -> Callable[[OpContext, Inputs], np.ndarray]:
    def run(ctx: OpContext, inputs: Inputs) -> np.ndarray:
        (x,) = need_inputs(inputs, 0)
        if x.dtype == np.bool_:
            raise Unknown
        if kind in ("Floor", "Ceil"):
            if not is_floating(x.dtype):
                raise Unknown
            return (np.floor if kind == "Floor" else np.ceil)(x)
        if is_integer(x.dtype):
            v = as_int64(x)
            if np.any(v == I64_MIN):
                raise OutOfRange
            return fit_dtype(-v if kind == "Neg" else np.abs(v), x.dtype)
        return np.negative(x) if kind == "Neg" else np.abs(x)

    return run


def _transpose(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (x,) = need_inputs(inputs, 0)
    perm_attr = ctx.attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm_attr is None else [int(v) for v in perm_attr]  # type: ignore[attr-defined]
    if sorted(perm) != list(range(x.ndim)):
        raise Unknown
    return np.ascontiguousarray(np.transpose(x, perm))


def _where(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    c, x, y = need_inputs(inputs, 0, 1, 2)
    if c.dtype != np.bool_:
        raise Unknown
    same_dtype([x, y])
    broadcast_shape(c.shape, x.shape, y.shape)
    return np.where(c, x, y)


def _extreme(kind: str) -> Callable[[OpContext, Inputs], np.ndarray]:
    def run(ctx: OpContext, inputs: Inputs) -> np.ndarray:
        arrays = need_inputs(inputs, *range(len(inputs)))
        if not arrays:
            raise Unknown
        same_dtype(arrays)
        broadcast_shape(*(a.shape for a in arrays))
        out = arrays[0]
        for a in arrays[1:]:
            out = np.minimum(out, a) if kind == "Min" else np.maximum(out, a)
        return out

    return run


def _clip(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    """Clip: ``min(max(x, lo), hi)``, so ``hi`` wins when ``lo > hi`` (as onnxruntime does).

    From opset 11 the bounds are optional scalar inputs of ``x``'s dtype; before, float
    attributes (and ``x`` is a float tensor).
    """
    (x,) = need_inputs(inputs, 0)
    if x.dtype == np.bool_:
        raise Unknown
    bounds: list[np.ndarray | None] = [None, None]
    if ctx.opset >= 11:
        for k, p in enumerate((1, 2)):
            if is_present(ctx, p):
                (b,) = need_inputs(inputs, p)
                if b.size != 1 or b.ndim > 1 or b.dtype != x.dtype:
                    raise Unknown
                bounds[k] = b.reshape(())
    else:
        if not is_floating(x.dtype):
            raise Unknown
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
        if not I64_MIN <= p <= I64_MAX:
            raise OutOfRange
    return p


def _reduce_prod(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (x,) = need_inputs(inputs, 0)
    axes = _axes_of(ctx, inputs, 18)
    keepdims = bool(ctx.attrs.get("keepdims", 1))
    if axes is None or not axes:
        if ctx.opset >= 18 and int(ctx.attrs.get("noop_with_empty_axes", 0)):  # type: ignore[call-overload]
            return x
        norm = list(range(x.ndim))
    else:
        norm = sorted({normalized_axis(a, x.ndim) for a in axes})
        if len(norm) != len(axes):
            raise Unknown
    if is_integer(x.dtype):
        kept = [a for a in range(x.ndim) if a not in norm]
        groups = np.transpose(x, kept + norm).reshape(math.prod(x.shape[a] for a in kept), -1)
        out = np.array([_product(row) for row in as_int64(groups).tolist()], dtype=np.int64)
        shape = [1 if a in norm else d for a, d in enumerate(x.shape)] if keepdims else [x.shape[a] for a in kept]
        return fit_dtype(out.reshape(shape), x.dtype)
    if x.dtype == np.bool_:
        raise Unknown
    return np.asarray(np.prod(x, axis=tuple(norm), keepdims=keepdims), dtype=x.dtype)


def slice_indices(dim: int, start: int, end: int, step: int) -> range:
    """The indices ``Slice`` takes along one axis of size ``dim``, clamped as the ONNX spec says.

    >>> list(slice_indices(5, -2, 2**63 - 1, 1))
    [3, 4]
    >>> list(slice_indices(5, 2**63 - 1, -2**63, -2))
    [4, 2, 0]
    """
    if step == 0:
        raise Unknown
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


def _slice(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (x,) = need_inputs(inputs, 0)
    if x.ndim == 0:
        raise Unknown
    if ctx.opset < 10:
        starts = [int(v) for v in ctx.attrs.get("starts", [])]  # type: ignore[attr-defined]
        ends = [int(v) for v in ctx.attrs.get("ends", [])]  # type: ignore[attr-defined]
        axes_attr = ctx.attrs.get("axes")
        axes = list(range(len(starts))) if axes_attr is None else [int(v) for v in axes_attr]  # type: ignore[attr-defined]
        steps = [1] * len(starts)
    else:
        s, e = need_inputs(inputs, 1, 2)
        starts, ends = as_ints(s), as_ints(e)
        a = need_inputs(inputs, 3)[0] if is_present(ctx, 3) else None
        st = need_inputs(inputs, 4)[0] if is_present(ctx, 4) else None
        axes = list(range(len(starts))) if a is None else as_ints(a)
        steps = [1] * len(starts) if st is None else as_ints(st)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise Unknown
    norm = [normalized_axis(v, x.ndim) for v in axes]
    if len(set(norm)) != len(norm):
        raise Unknown
    picks: list[range] = [range(d) for d in x.shape]
    for ax, begin, stop, step in zip(norm, starts, ends, steps):
        picks[ax] = slice_indices(x.shape[ax], begin, stop, step)
    element_count([len(r) for r in picks])
    out = x
    for ax, r in enumerate(picks):
        if len(r) != x.shape[ax] or r.step != 1:
            out = np.take(out, np.array(list(r), dtype=np.int64), axis=ax)
    return out


def _range(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    start, limit, delta = need_inputs(inputs, 0, 1, 2)
    if not (start.ndim == limit.ndim == delta.ndim == 0):
        raise Unknown
    dtype = same_dtype([start, limit, delta])
    if dtype not in (np.float32, np.float64, np.int16, np.int32, np.int64):  # the spec's types
        raise Unknown
    if is_integer(dtype):
        s, lim, d = int(start), int(limit), int(delta)
        # onnxruntime counts in double: past 2^53 its count can differ from the exact one
        if d == 0:
            raise Unknown
        if any(abs(v) > 2**53 for v in (s, lim, d, lim - s)):
            raise OutOfRange
        n = max(-(-(lim - s) // d), 0)
        element_count((n,))
        info = np.iinfo(dtype)
        if n and not info.min <= s + (n - 1) * d <= info.max:
            raise OutOfRange
        with np.errstate(all="ignore"):  # i * d may wrap; s + i * d is in range, so exact
            return (np.arange(n, dtype=np.int64) * np.int64(d) + np.int64(s)).astype(dtype)
    s_f, lim_f, d_f = float(start), float(limit), float(delta)
    if d_f == 0 or not all(math.isfinite(v) for v in (s_f, lim_f, d_f)):
        raise Unknown
    # as onnxruntime: ceil((limit - start) / delta) computed in the dtype; each value the
    # previous one plus delta, in the dtype
    with np.errstate(all="ignore"):
        steps = float(np.divide(np.subtract(limit, start, dtype=dtype), delta, dtype=dtype))
    if not math.isfinite(steps):
        raise Unknown
    n = max(math.ceil(steps), 0)
    element_count((n,))
    terms = np.full(n, delta, dtype=dtype)
    if n:
        terms[0] = start
    with np.errstate(all="ignore"):
        return np.add.accumulate(terms, dtype=dtype)  # sequential, as the running sum is


def _constant_of_shape(ctx: OpContext, inputs: Inputs) -> np.ndarray:
    (spec,) = need_inputs(inputs, 0)
    shape = as_ints(spec)
    if any(d < 0 for d in shape):
        raise Unknown
    element_count(shape)
    value = ctx.attrs.get("value")
    if value is None:
        fill = np.zeros((), dtype=np.float32)
    elif isinstance(value, onnx.TensorProto):
        fill = tensor_value(value)
        if fill.size != 1:
            raise Unknown
    else:
        raise Unknown
    return np.full(shape, fill.reshape(()), dtype=fill.dtype)


#: op -> evaluator (ONNX domain): exactly the ops of shape arithmetic
EVALUATORS: dict[str, Callable[[OpContext, Inputs], np.ndarray]] = {
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

