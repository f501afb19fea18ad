"""Tensor element types and sizes: ``DTYPES``, the size limits, and bytes from dtype and shape."""

from __future__ import annotations

import math
from typing import Iterable

from onnx import TensorProto

from onnxmem.core.errors import ShapeError, show_name
from onnxmem.core.sizes import DTYPE_BITS

__all__ = ["DTYPES", "MAX_BYTES", "MAX_DIM", "check_dims", "dtype_bits", "dtype_name", "tensor_bytes"]


#: elem_type -> (name, bits per element); the bits are those of the name in
#: :data:`onnxmem.core.sizes.DTYPE_BITS`, the table the plan alone's proof reads without onnx
DTYPES: dict[int, tuple[str, int]] = {
    int(t): (name, DTYPE_BITS[name]) for t, name in (
        (TensorProto.FLOAT, "float32"), (TensorProto.UINT8, "uint8"), (TensorProto.INT8, "int8"),
        (TensorProto.UINT16, "uint16"), (TensorProto.INT16, "int16"), (TensorProto.INT32, "int32"),
        (TensorProto.INT64, "int64"), (TensorProto.STRING, "string"), (TensorProto.BOOL, "bool"),
        (TensorProto.FLOAT16, "float16"), (TensorProto.DOUBLE, "float64"), (TensorProto.UINT32, "uint32"),
        (TensorProto.UINT64, "uint64"), (TensorProto.COMPLEX64, "complex64"),
        (TensorProto.COMPLEX128, "complex128"), (TensorProto.BFLOAT16, "bfloat16"),
    )
}


for _name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1",
              "FLOAT8E8M0", "UINT2", "INT2"):  # those of newer onnx releases, where this one has them
    if hasattr(TensorProto, _name):
        DTYPES[int(getattr(TensorProto, _name))] = (_name.lower(), DTYPE_BITS[_name.lower()])


#: the largest dim and the largest tensor onnxmem plans; past them a dim is an error
#: that names the tensor (far above any real model, low enough that every sum of
#: sizes the planner makes stays exact in 64-bit integers)
MAX_DIM = 2**40
MAX_BYTES = 2**62


def dtype_name(elem_type: int) -> str:
    if elem_type not in DTYPES:
        raise ShapeError(
            f"unknown tensor element type {elem_type}; onnxmem knows "
            f"{', '.join(n for n, _ in DTYPES.values())}"
        )
    return DTYPES[elem_type][0]


def dtype_bits(elem_type: int) -> int:
    dtype_name(elem_type)
    return DTYPES[elem_type][1]


def tensor_bytes(elem_type: int, shape: Iterable[int], name: str = "?") -> int:
    """Bytes a dense tensor takes: ``ceil(bits * numel / 8)``.

    >>> tensor_bytes(TensorProto.INT4, (3, 3))
    5
    """
    dims = tuple(shape)
    if dims and (min(dims) < 0 or max(dims) > MAX_DIM):
        check_dims(name, dims)
    if elem_type == TensorProto.STRING:
        raise ShapeError(
            f"tensor {show_name(name)} has dtype string, whose size is not fixed; "
            "onnxmem plans numeric tensors only"
        )
    bits = dtype_bits(elem_type)
    numel = math.prod(dims)
    size = -(-bits * numel // 8)
    if size > MAX_BYTES:
        raise ShapeError(
            f"tensor {show_name(name)} of shape {list(dims)} would take {size} bytes, above "
            "onnxmem's limit of 2^62; check the model or the dims bound with --dim"
        )
    return size


def check_dims(name: str, dims: Iterable[object]) -> None:
    """Refuse a negative dim, or one above onnxmem's limit of 2^40, among the integers of
    ``dims`` (a range plan's shapes hold texts too), naming tensor ``name``."""
    for axis, d in enumerate(dims):
        if not isinstance(d, int):
            continue
        if d < 0:
            raise ShapeError(
                f"tensor {show_name(name)} has negative dim {d} on axis {axis}; fix the "
                "model or pin the shape with --input-shape"
            )
        if d > MAX_DIM:
            raise ShapeError(
                f"tensor {show_name(name)} has dim {d} on axis {axis}, above onnxmem's limit of "
                "2^40; check the model or the dims bound with --dim"
            )
