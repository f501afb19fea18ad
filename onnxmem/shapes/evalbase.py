"""The building blocks of the shape-arithmetic interpreter (:mod:`onnxmem.shapes.shapeeval`).

Which inputs of an op are shapes (``SHAPE_SLOTS``), the numpy dtypes it computes in, the
element and rank limits, checked integer arithmetic (every overflow detected, never
wrapped), what one node's evaluation reads (:class:`OpContext`), and the concrete shapes an
inference result gives (:func:`known_shapes`). A value that cannot be computed exactly
raises :class:`Unknown`; one whose exact result leaves its dtype's range raises
:class:`OutOfRange`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

__all__ = [
    "ELEM_TYPES",
    "I64_MAX",
    "I64_MIN",
    "MAX_ELEMENTS",
    "MAX_RANK",
    "NP_DTYPES",
    "OutOfRange",
    "SHAPE_ONLY",
    "SHAPE_SLOTS",
    "Dim",
    "Inputs",
    "OpContext",
    "Unknown",
    "declared_shapes",
    "known_shapes",
    "tensor_value",
]

#: the most elements of any value the evaluator computes; past it the value is unknown
MAX_ELEMENTS = 2**20
#: the highest rank of a computed value (numpy's own limit)
MAX_RANK = 64

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

#: ops that read only their input's shape, not its values
SHAPE_ONLY = frozenset({"Shape", "Size"})

NP_DTYPES: dict[int, type] = {
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
ELEM_TYPES: dict[np.dtype, int] = {np.dtype(v): k for k, v in NP_DTYPES.items()}


class Unknown(Exception):
    """The value cannot be computed exactly (missing input, bound broken, malformed node)."""


class OutOfRange(Unknown):
    """The exact result leaves the range of its dtype (an integer overflow, an integer
    division by zero, a float cast past an integer's range): onnxruntime's C++ computes
    something else there (undefined behaviour), so no engine may take the exact result
    for it either."""


# ------------------------------------------------------------------ helpers


def element_count(shape: Sequence[int]) -> int:
    """The element count of ``shape``; unknown past ``MAX_ELEMENTS`` or ``MAX_RANK`` (checked before any allocation)."""
    if len(shape) > MAX_RANK:
        raise Unknown
    n = 1
    for d in shape:
        if d < 0:
            raise Unknown
        n *= d
        if n > MAX_ELEMENTS:
            raise Unknown
    return n


def checked_value(a: np.ndarray) -> np.ndarray:
    if a.dtype not in ELEM_TYPES or a.size > MAX_ELEMENTS:
        raise Unknown
    return a


def is_integer(dtype: np.dtype) -> bool:
    """Whether ``dtype`` (of the evaluator's dtypes) is a signed or unsigned integer
    (``np.issubdtype(dtype, np.integer)``, without its lookups)."""
    return dtype.kind in "iu"


def is_floating(dtype: np.dtype) -> bool:
    """Whether ``dtype`` (of the evaluator's dtypes) is a float (``np.issubdtype(dtype, np.floating)``)."""
    return dtype.kind == "f"


def as_ints(a: np.ndarray | None, *, rank: int | None = 1) -> list[int]:
    """The values of an integer tensor (of ``rank``, when given) as Python ints."""
    if a is None or not is_integer(a.dtype):
        raise Unknown
    if rank is not None and a.ndim != rank:
        raise Unknown
    return [int(v) for v in a.reshape(-1).tolist()]


def normalized_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Unknown
    return axis + rank if axis < 0 else axis


I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def as_int64(a: np.ndarray) -> np.ndarray:
    """An integer or bool array as int64; unknown when a uint64 value does not fit."""
    if a.dtype == np.uint64 and a.size and int(a.max()) > I64_MAX:
        raise OutOfRange
    return a.astype(np.int64)


def fit_dtype(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Exact int64 values in the integer ``dtype``; unknown when one does not fit."""
    info = np.iinfo(dtype)
    if values.size and (int(values.min()) < info.min or int(values.max()) > info.max):
        raise OutOfRange
    return values.astype(dtype)


def int_arith(kind: str, a: np.ndarray, b: np.ndarray, fmod: bool) -> np.ndarray:
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
            bad = (nonzero & (back != b)) | ((a == -1) & (b == I64_MIN)) | ((b == -1) & (a == I64_MIN))
        else:
            if np.any(b == 0) or np.any((a == I64_MIN) & (b == -1) & (kind == "Div")):
                raise OutOfRange
            safe = np.where(b == -1, 1, b)  # x / -1 and x % -1 without the machine's overflow trap
            if kind == "Div":
                q = np.floor_divide(a, safe)
                q = q + ((np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0)))
                r = np.where(b == -1, -a, q)
            else:
                r = np.where(b == -1, 0, np.fmod(a, safe) if fmod else np.remainder(a, safe))
            bad = np.zeros(r.shape, dtype=bool)
    if np.any(bad):
        raise OutOfRange
    return np.asarray(r, dtype=np.int64)


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    if len(shapes) == 2 and shapes[0] == shapes[1]:  # most often: numpy's answer without its checks
        out = tuple(int(d) for d in shapes[0])
        element_count(out)  # (a negative dim is unknown, as numpy refuses it)
        return out
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise Unknown from None
    element_count(out)
    return out


def same_dtype(arrays: Sequence[np.ndarray]) -> np.dtype:
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) != 1:
        raise Unknown
    return arrays[0].dtype


# ------------------------------------------------------------------ evaluators

Attrs = Mapping[str, object]
Inputs = Sequence["np.ndarray | None"]


@dataclass(frozen=True, slots=True)
class OpContext:
    """What one node's evaluation may read besides its input values."""

    opset: int
    attrs: Attrs
    shapes: Sequence[tuple[int, ...] | None]  # the inputs' shapes, known without their values
    present: Sequence[bool]  # which inputs the node names (an optional input may be left out)


def is_present(ctx: OpContext, p: int) -> bool:
    return p < len(ctx.present) and ctx.present[p]


def need_inputs(inputs: Inputs, *positions: int) -> list[np.ndarray]:
    out = []
    for p in positions:
        if p >= len(inputs) or inputs[p] is None:
            raise Unknown
        out.append(inputs[p])
    return out  # type: ignore[return-value]


def tensor_value(t: onnx.TensorProto) -> np.ndarray:
    """The value of a tensor held in the file, when it is small, inline and of a numeric dtype."""
    if t.data_location == TensorProto.EXTERNAL or t.data_type not in NP_DTYPES:
        raise Unknown
    dims = [int(d) for d in t.dims]
    element_count(dims)
    try:
        a = numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001 - a malformed tensor is an unknown value
        raise Unknown from None
    if tuple(a.shape) != tuple(dims):
        raise Unknown
    return checked_value(np.array(a, dtype=NP_DTYPES[t.data_type]))


#: a declared dim: its value, its symbol, or None
Dim = int | str | None


def known_shapes(
    model: onnx.ModelProto, resolve: Callable[[Dim], int | None], known: dict[str, tuple[int, ...]] | None = None,
    elems: dict[str, int] | None = None,
) -> dict[str, tuple[int, ...]]:
    """The concrete shapes of ``model``'s initializers and typed values. ``known``: the shapes
    found in an earlier inference of the same graph, added to (inference only adds shapes: a
    value with a concrete shape is not read again). ``resolve`` is a function of the dim alone:
    values of one type share one tuple. ``elems``: where given (empty), filled in the same walk
    with the element type of each initializer and typed value (an initializer's, else the first
    declaration's that names one)."""
    out: dict[str, tuple[int, ...]] = {} if known is None else known
    g = model.graph
    for init in g.initializer:
        if init.name not in out:
            out[init.name] = tuple(int(d) for d in init.dims)
        if elems is not None:
            elems[init.name] = int(init.data_type)
    read: dict[bytes, tuple[tuple[int, ...] | None, int]] = {}  # each distinct type read once
    for vi in (*g.input, *g.value_info, *g.output):
        name = vi.name
        if name in out and elems is None:
            continue
        t = vi.type
        key = t.SerializeToString()
        if key not in read:
            read[key] = (_concrete(t, resolve), int(t.tensor_type.elem_type) if t.HasField("tensor_type") else 0)
        dims, elem = read[key]
        if dims is not None and name not in out:
            out[name] = dims
        if elem and elems is not None:
            elems.setdefault(name, elem)
    return out


def declared_shapes(
    model: onnx.ModelProto, declared: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]],
    resolve: Callable[[Dim], int | None], known: dict[str, tuple[int, ...]], elems: dict[str, int],
) -> dict[str, tuple[int, ...]] | None:
    """:func:`known_shapes` of ``model`` (``known`` and ``elems`` empty, both filled) from
    ``declared``, what :func:`onnxmem.shapes.engines.collect_types` read of the same model, so that
    its declarations are not read again; ``None`` where ``model`` declares a name more than once
    (there the two read different declarations of it)."""
    g = model.graph
    if len(declared) != len(g.initializer) + len(g.input) + len(g.value_info) + len(g.output):
        return None
    inits: set[str] = set()
    for init in g.initializer:
        inits.add(init.name)
        known[init.name] = tuple(int(d) for d in init.dims)
        elems[init.name] = int(init.data_type)
    resolved: dict[tuple[Dim, ...], tuple[int, ...] | None] = {}  # each distinct shape resolved once
    for name, (et, dims) in declared.items():
        if name in inits:
            continue
        if et:
            elems[name] = et
        if dims is None:
            continue
        if dims not in resolved:
            values = [resolve(d) for d in dims]
            resolved[dims] = None if None in values else tuple(values)  # type: ignore[arg-type]
        concrete = resolved[dims]
        if concrete is not None:
            known[name] = concrete
    return known


def _concrete(t: onnx.TypeProto, resolve: Callable[[Dim], int | None]) -> tuple[int, ...] | None:
    """The dims of tensor type ``t``, each resolved; ``None`` where it has no shape or a dim does not resolve."""
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dims: list[int] = []
    for d in t.tensor_type.shape.dim:
        raw: Dim = int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
        value = resolve(raw)
        if value is None:
            return None
        dims.append(value)
    return tuple(dims)
