"""Tensor element types and sizes: ``DTYPES``, the size limits, and bytes from dtype and shape."""

from __future__ import annotations

import math
from typing import Iterable

from onnx import TensorProto

from onnxmem.core.errors import ShapeError, show_name

__all__ = ["DTYPES", "MAX_BYTES", "MAX_DIM", "dtype_bits", "dtype_name", "tensor_bytes"]


#: elem_type -> (name, bits per element)
DTYPES: dict[int, tuple[str, int]] = {
    TensorProto.FLOAT: ("float32", 32),
    TensorProto.UINT8: ("uint8", 8),
    TensorProto.INT8: ("int8", 8),
    TensorProto.UINT16: ("uint16", 16),
    TensorProto.INT16: ("int16", 16),
    TensorProto.INT32: ("int32", 32),
    TensorProto.INT64: ("int64", 64),
    TensorProto.STRING: ("string", 0),
    TensorProto.BOOL: ("bool", 8),
    TensorProto.FLOAT16: ("float16", 16),
    TensorProto.DOUBLE: ("float64", 64),
    TensorProto.UINT32: ("uint32", 32),
    TensorProto.UINT64: ("uint64", 64),
    TensorProto.COMPLEX64: ("complex64", 64),
    TensorProto.COMPLEX128: ("complex128", 128),
    TensorProto.BFLOAT16: ("bfloat16", 16),
}


for _name, _bits in (
    ("FLOAT8E4M3FN", 8),
    ("FLOAT8E4M3FNUZ", 8),
    ("FLOAT8E5M2", 8),
    ("FLOAT8E5M2FNUZ", 8),
    ("UINT4", 4),
    ("INT4", 4),
    ("FLOAT4E2M1", 4),
    ("FLOAT8E8M0", 8),
    ("UINT2", 2),
    ("INT2", 2),
):
    if hasattr(TensorProto, _name):
        DTYPES[int(getattr(TensorProto, _name))] = (_name.lower(), _bits)


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
    for axis, d in enumerate(dims):
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
