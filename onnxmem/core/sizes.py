"""Byte sizes written by users: ``'8GiB'``, ``'512MB'``, ``'1048576'``, and shown to them.

:func:`parse_size` is the one reader of a size flag (``fit --memory``, ``plan --budget``);
:func:`format_bytes` writes a byte count the way every summary shows it (``'1.50 KiB'``).
Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB, MB, GB, TB) of 1000;
case and a space before the unit do not matter. Bad text is a one-line ``OnnxmemError``
naming the flag and showing what a size looks like.
"""

from __future__ import annotations

import re

from onnxmem.core.errors import OnnxmemError, show_name

__all__ = ["DTYPE_BITS", "SIZE_UNITS", "dense_bytes", "format_bytes", "parse_size"]

#: unit (lower case) -> bytes
SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 2**20,
              "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}
#: the largest size accepted (2^62 bytes, the planner's own limit)
MAX_SIZE = 2**62
#: the largest alignment a plan may take (1 GiB): each buffer is rounded up to it, and past it the
#: rounded sizes of a few buffers leave int64 behind (:func:`onnxmem.core.problem.check_limits`)
MAX_ALIGNMENT = 2**30
#: the longest wall-clock budget (``--timeout``, about 3 years): past it a deadline leaves the clocks' range
MAX_TIMEOUT = 1e8
#: bits per element of each element type a plan names, without onnx (the plan alone's proof:
#: :mod:`onnxmem.proof.alone`); ``onnxmem.model.dtypes.DTYPES`` takes its bits from here, by
#: onnx's numbers; a string's size is not fixed (0)
DTYPE_BITS = {"float32": 32, "uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "int32": 32, "int64": 64,
              "string": 0, "bool": 8, "float16": 16, "float64": 64, "uint32": 32, "uint64": 64,
              "complex64": 64, "complex128": 128, "bfloat16": 16, "float8e4m3fn": 8, "float8e4m3fnuz": 8,
              "float8e5m2": 8, "float8e5m2fnuz": 8, "uint4": 4, "int4": 4, "float4e2m1": 4,
              "float8e8m0": 8, "uint2": 2, "int2": 2}


def dense_bytes(dtype: str, shape: tuple[int, ...] | list[int]) -> int | None:
    """The bytes a dense tensor of element type ``dtype`` and ``shape`` takes, ``ceil(bits *
    numel / 8)`` as the planner sizes it; ``None`` for a type of no fixed size or none known."""
    bits = DTYPE_BITS.get(dtype)
    if not bits:
        return None
    numel = 1
    for d in shape:
        numel *= d
    return (bits * numel + 7) // 8


def parse_size(text: str, flag: str, also: str = "") -> int:
    """``'8GiB'`` -> ``8589934592``: bytes written as a number with an optional unit.

    ``flag`` names the option in the error; ``also`` is added to the error's list of examples
    (e.g. ``" or a factor of the arena (0.5x)"``).

    >>> parse_size("1.5 KiB", "--memory")
    1536
    """
    m = re.fullmatch(r"(\d{1,30}(?:\.\d{1,30})?)\s*([a-z]*)", text.strip().lower(), re.ASCII)
    if not m or m.group(2) not in SIZE_UNITS:
        raise OnnxmemError(f"{flag} {show_name(text)} is not a size; give bytes (1048576) or a size with a unit "
                           f"(64MiB, 8GiB, 2GB){also}")
    from fractions import Fraction  # a size flag's alone: a plain plan loads no fractions

    size = int(Fraction(m.group(1)) * SIZE_UNITS[m.group(2)])  # exact: no float rounds a large size
    if not 0 < size < MAX_SIZE:
        raise OnnxmemError(f"{flag} {show_name(text)} is {'0' if size <= 0 else 'over 2^62'} bytes; "
                           "give a size above 0 and below 2^62 bytes")
    return size


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.50 KiB'``; exact below 1 KiB.

    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**30)
    ('512 B', '1.50 KiB', '3.00 GiB')
    """
    if abs(n) < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            break
    return f"{n:.2f} {unit}"
