"""onnxruntime training checkpoints: the file the artifact generator writes beside its graphs.

``onnxruntime.training.artifacts.generate_artifacts`` writes ``training_model.onnx``,
``eval_model.onnx``, ``optimizer_model.onnx`` and ``checkpoint``: the values of the
parameters that are graph inputs of the training graph, trainable and frozen. A graph that
``torch.onnx.export(..., dynamo=True)`` wrote keeps its small int64 constants (ReduceMean
axes, Reshape targets) as initializers, which the generator makes frozen parameters when
``frozen_params`` lists them: their values are in the checkpoint only, and shape inference
needs them.

The file is a flatbuffer with the identifier ``ODTC``, its schema onnxruntime's
``onnxruntime/core/flatbuffers/schema/ort_training_checkpoint.fbs`` (tables ``Checkpoint``,
``ModuleState``, and ``Tensor`` of ``ort.fbs``), of a format ``version`` in
:data:`SUPPORTED_VERSIONS` (any other is refused before its tables are read: a later version may
lay them out otherwise). :func:`read_checkpoint` reads the parts
planning needs (every parameter's name, element type, dims, and the bytes of the small ones)
without flatbuffers or onnxruntime. The file is hostile input: every offset is checked
against the buffer before it is read, a table's fields are read only inside the table its
vtable declares, counts and sizes are bounded by the bytes that hold them, the vectors read
all together by the file's size (tables or vectors shared or repeated cannot make the work grow
faster than the file), a rank by :data:`MAX_RANK`, names are UTF-8 and only shown escaped,
and a tensor whose bytes live in an external file (``has_external_data``,
``external_data_offset``) is refused rather than followed: onnxmem reads no file the user did
not name. Anything wrong is a :class:`~onnxmem.core.errors.ModelError`
that names the file, the rule and the fix.

:func:`find_checkpoint` finds the file beside a model (``checkpoint``, the generator's name);
:func:`small_values` picks the values that are constants rather than weights: integer and
boolean tensors of at most :data:`MAX_VALUE_ELEMENTS` elements (shapes, axes, flags: shape
inference reads them) and floating-point scalars (a Dropout ratio: a run needs the real one).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper

from onnxmem.core.errors import ModelError, show_name
from onnxmem.core.fileio import MAX_MODEL_BYTES, read_input

__all__ = ["CHECKPOINT_NAME", "MAX_RANK", "MAX_VALUE_ELEMENTS", "SUPPORTED_VERSIONS", "Checkpoint", "CheckpointTensor", "checkpoint_record",
           "find_checkpoint", "read_checkpoint", "recorded_values", "small_values", "value_type", "with_values"]

#: the name the artifact generator gives the checkpoint beside ``training_model.onnx``
CHECKPOINT_NAME = "checkpoint"
#: the most elements of an integer or boolean parameter whose value is read (a shape, axes)
MAX_VALUE_ELEMENTS = 64
#: the highest rank of a parameter read (numpy's own limit)
MAX_RANK = 64
#: the format versions the reader reads (onnxruntime's ``checkpoint_version.h``): 2, which adds
#: ``is_nominal_state`` to the ``ModuleState`` of version 1's two parameter lists. onnxruntime-training
#: 1.19.2 writes 2 and loads nothing else, so a plan for a checkpoint of version 1 would be one no
#: training session runs: version 1 is refused like any other.
SUPPORTED_VERSIONS = (2,)
_IDENTIFIER = b"ODTC"
_COUNTED_TYPES: dict[int, str] = {onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
                                  onnx.TensorProto.BOOL: "bool"}
_SCALAR_TYPES: dict[int, str] = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64"}
#: the numpy types of the values read, as plans record them
VALUE_DTYPES = (*_COUNTED_TYPES.values(), *_SCALAR_TYPES.values())
_FIX = "pass the checkpoint file the artifact generator wrote beside training_model.onnx (--checkpoint PATH)"
_VERSION_FIX = ("write it again with onnxruntime-training 1.19 (onnxruntime.training.artifacts.generate_artifacts "
                "writes version 2) and pass it with --checkpoint PATH")
_INLINE_FIX = ("write the frozen parameters alone to a checkpoint of their own (onnxruntime.training.onnxblock."
               "save_checkpoint keeps them inline) and pass it with --checkpoint PATH")


@dataclass(frozen=True, slots=True)
class CheckpointTensor:
    """One parameter of a checkpoint: ``raw`` holds its bytes (little-endian, as stored) when
    is one whose value is read (:func:`value_type`), else ``None``."""

    name: str
    elem_type: int
    dims: tuple[int, ...]
    trainable: bool
    raw: bytes | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What :func:`read_checkpoint` read: the format ``version``, whether the state is nominal
    (names and shapes, no data), and every parameter, trainable ones first."""

    path: str
    version: int
    nominal: bool
    tensors: tuple[CheckpointTensor, ...]

    def by_name(self) -> dict[str, CheckpointTensor]:
        return {t.name: t for t in self.tensors}


def value_type(elem_type: int, count: int) -> str | None:
    """The numpy type of a parameter whose value is read (the module doc: an integer or boolean
    tensor of at most :data:`MAX_VALUE_ELEMENTS` elements, a floating-point scalar), else ``None``."""
    if elem_type in _COUNTED_TYPES and count <= MAX_VALUE_ELEMENTS:
        return _COUNTED_TYPES[elem_type]
    if elem_type in _SCALAR_TYPES and count == 1:
        return _SCALAR_TYPES[elem_type]
    return None


class _Reader:
    """Bounds-checked reads of a flatbuffer (little-endian scalars, offsets from the buffer)."""

    def __init__(self, data: bytes, label: str) -> None:
        self.data = data
        self.label = label
        self.unread = len(data)  # the bytes vectors may still take: each is read once in a real file

    def take(self, size: int, at: int) -> None:
        """Count ``size`` bytes of a vector at byte ``at`` as read: a file whose vectors, read in
        full, hold more bytes than the file (tables or vectors shared or repeated, so that the
        work grows faster than the file) is refused before they are copied."""
        self.unread -= size
        if self.unread < 0:
            raise self.fail(f"the vector at byte {at} makes its parts hold more bytes than the file's "
                            f"{len(self.data):,} (shared or repeated tables)")

    def fail(self, rule: str) -> ModelError:
        return ModelError(f"checkpoint {self.label} is not a readable onnxruntime training checkpoint ({rule}); "
                          f"{_FIX}")

    def scalar(self, fmt: str, at: int) -> int:
        size = struct.calcsize(fmt)
        if at < 0 or at + size > len(self.data):
            raise self.fail(f"an offset points past the end of the file at byte {at}")
        return int(struct.unpack_from("<" + fmt, self.data, at)[0])

    def table(self, at: int) -> _Table:
        vtable = at - self.scalar("i", at)
        vsize, tsize = self.scalar("H", vtable), self.scalar("H", vtable + 2)
        if vsize < 4 or vsize % 2 or vtable + vsize > len(self.data) or tsize < 4 or at + tsize > len(self.data):
            raise self.fail(f"a table at byte {at} has a bad vtable")
        return _Table(self, at, vtable, vsize, tsize)


@dataclass(frozen=True, slots=True)
class _Table:
    """One flatbuffer table: its fields, by their index in the schema."""

    reader: _Reader
    at: int
    vtable: int
    vsize: int
    tsize: int

    def field(self, k: int, width: int) -> int | None:
        slot = 4 + 2 * k
        if slot + 2 > self.vsize:
            return None
        off = self.reader.scalar("H", self.vtable + slot)
        if off == 0:
            return None
        if off + width > self.tsize:
            raise self.reader.fail(f"field {k} of the table at byte {self.at} lies outside it")
        return self.at + off

    def number(self, k: int, fmt: str, default: int) -> int:
        at = self.field(k, struct.calcsize(fmt))
        return default if at is None else self.reader.scalar(fmt, at)

    def target(self, k: int) -> int | None:
        at = self.field(k, 4)
        return None if at is None else at + self.reader.scalar("I", at)

    def vector(self, k: int, width: int) -> tuple[int, int]:
        """``(first element's byte, count)`` of vector field ``k``; ``(0, 0)`` when absent."""
        at = self.target(k)
        if at is None:
            return 0, 0
        count = self.reader.scalar("I", at)
        if at + 4 + count * width > len(self.reader.data):
            raise self.reader.fail(f"a vector of {count} elements at byte {at} runs past the end of the file")
        self.reader.take(count * width, at)
        return at + 4, count

    def tables(self, k: int) -> list[_Table]:
        start, count = self.vector(k, 4)
        return [self.reader.table(start + 4 * i + self.reader.scalar("I", start + 4 * i)) for i in range(count)]

    def string(self, k: int) -> str:
        start, count = self.vector(k, 1)
        try:
            return self.reader.data[start:start + count].decode("utf-8")
        except UnicodeDecodeError:
            raise self.reader.fail(f"a name at byte {start} is not UTF-8") from None


def _tensor(t: _Table, trainable: bool, nominal: bool) -> CheckpointTensor:
    """Tensor (ort.fbs): name 0, doc_string 1, dims 2, data_type 3, raw_data 4, string_data 5,
    external_data_offset 6."""
    r = t.reader
    name = t.string(0)
    shown = show_name(name)
    start, rank = t.vector(2, 8)
    if rank > MAX_RANK:
        raise r.fail(f"parameter {shown} has rank {rank}, more than {MAX_RANK}")
    dims = tuple(r.scalar("q", start + 8 * i) for i in range(rank))
    elem_type = t.number(3, "i", 0)
    if any(d < 0 for d in dims):
        raise r.fail(f"parameter {shown} has a negative dim {dims}")
    if t.number(6, "q", -1) != -1:
        raise ModelError(f"checkpoint {r.label}: parameter {shown} keeps its data in an external file, which "
                         f"onnxmem does not follow; {_INLINE_FIX}")
    raw = None
    count = math.prod(dims)  # Python integers: no overflow
    dtype = value_type(elem_type, count)
    if dtype is not None and not nominal:
        data_at, size = t.vector(4, 1)
        if size != count * np.dtype(dtype).itemsize:
            raise r.fail(f"parameter {shown} holds {size} bytes for {count} elements of {dtype}")
        raw = r.data[data_at:data_at + size]
        value = float(np.frombuffer(raw, np.dtype(dtype).newbyteorder("<"))[0]) if dtype in _SCALAR_TYPES.values() else 0.0
        if not math.isfinite(value):  # a Dropout ratio of nan or inf
            raise ModelError(f"checkpoint {r.label}: parameter {shown} holds {value}, not a finite number (a plan "
                             f"records the values it reads as JSON numbers); {_FIX}")
    return CheckpointTensor(name, elem_type, dims, trainable, raw)


def read_checkpoint(path: str | os.PathLike[str], *, links: bool = True) -> Checkpoint:
    """Read an onnxruntime training checkpoint (the module doc); ``ModelError`` for a missing,
    unreadable or malformed file, one of a format version not in :data:`SUPPORTED_VERSIONS`, or
    one whose data is in an external file. ``links=False``:
    not through a link (the file :func:`find_checkpoint` found, should it become one since).

    Checkpoint (ort_training_checkpoint.fbs): version 0, module_state 1, optimizer_groups 2,
    property_bag 3; ModuleState: requires_grad_params 0, frozen_params 1, is_nominal_state 2,
    has_external_data 3.
    """
    label = show_name(str(path))
    data = read_input(path, "checkpoint", MAX_MODEL_BYTES, ModelError, links=links)
    r = _Reader(data, label)
    if len(data) < 8 or data[4:8] != _IDENTIFIER:
        raise r.fail("no ODTC file identifier at byte 4")
    root = r.table(r.scalar("I", 0))
    version = root.number(0, "i", 0)
    if version not in SUPPORTED_VERSIONS:  # another version may lay its tables out otherwise: not read
        raise ModelError(f"checkpoint {label} is of format version {version}, which onnxmem does not read (it reads "
                         f"version{'s' if len(SUPPORTED_VERSIONS) > 1 else ''} {' and '.join(map(str, SUPPORTED_VERSIONS))}); "
                         f"{_VERSION_FIX}")
    state_at = root.target(1)
    if state_at is None:
        raise r.fail("it has no module state")
    state = r.table(state_at)
    nominal = bool(state.number(2, "B", 0))
    if state.number(3, "B", 0):
        raise ModelError(f"checkpoint {label} keeps its parameters in an external data file, which onnxmem "
                         f"does not follow; {_INLINE_FIX}")
    tensors = [_tensor(t, True, nominal) for t in state.tables(0)]
    tensors += [_tensor(t, False, nominal) for t in state.tables(1)]
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise r.fail(f"parameter {show_name(t.name)} is listed twice")
        seen.add(t.name)
    return Checkpoint(str(path), version, nominal, tuple(tensors))


def small_values(checkpoint: Checkpoint, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The values of those of ``names`` that the checkpoint holds and :func:`value_type` reads, in
    ``names`` order."""
    found = checkpoint.by_name()
    out: dict[str, np.ndarray] = {}
    for name in names:
        t = found.get(name)
        if t is None or t.raw is None:
            continue
        dtype = np.dtype(value_type(t.elem_type, math.prod(t.dims)) or "uint8")
        out[name] = np.frombuffer(t.raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(t.dims)
    return out


def value_type_of(dtype: str, count: int) -> str | None:
    """:func:`value_type` for a numpy type name (a plan's record)."""
    kinds = {v: k for k, v in {**_COUNTED_TYPES, **_SCALAR_TYPES}.items()}
    return value_type(kinds[dtype], count) if dtype in kinds else None


def find_checkpoint(model_path: str | os.PathLike[str]) -> Path | None:
    """The generator's checkpoint beside ``model_path`` (a regular file named
    :data:`CHECKPOINT_NAME` in the same folder, not a link), or ``None``."""
    candidate = Path(model_path).parent / CHECKPOINT_NAME
    try:
        if candidate.is_symlink() or not candidate.is_file():
            return None
    except OSError:
        return None
    return candidate


def checkpoint_record(checkpoint: Checkpoint, values: Mapping[str, np.ndarray], found: str) -> dict[str, object]:
    """What a plan records of the checkpoint under ``extra.checkpoint``: its path, how it was
    found (``beside the model`` or ``--checkpoint``), and the values it gave shape inference."""
    return {
        "path": checkpoint.path,
        "found": found,
        "values": {n: {"dtype": str(v.dtype), "shape": list(v.shape), "values": v.reshape(-1).tolist()}
                   for n, v in values.items()},
    }


def recorded_values(extra: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The values a plan's ``extra.checkpoint`` records (:func:`checkpoint_record`), for a run or
    the shapes of the plan's view; entries of the wrong form are skipped (the plan's schema
    checks them), and only values :func:`value_type` reads are taken."""
    record = extra.get("checkpoint")
    raw = record.get("values") if isinstance(record, dict) else None
    out: dict[str, np.ndarray] = {}
    for name, rec in (raw.items() if isinstance(raw, dict) else ()):
        try:
            dtype = np.dtype(str(rec["dtype"]))
            shape = [int(d) for d in rec["shape"]]
            values = list(rec["values"])
            if value_type_of(dtype.name, len(values)) is None or len(shape) > 8:
                continue
            if any(isinstance(v, (list, dict, str)) for v in values):
                continue
            out[str(name)] = np.asarray(values, dtype=dtype).reshape(shape)
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
    return out


def with_values(model: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` in which each graph input of ``values`` has an initializer of its
    value: what shape inference reads as a known value (a Reshape's target, ReduceMean's axes).
    ``model`` itself is left as it is (the plan's graph keeps them as graph inputs)."""
    if not values:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {i.name for i in out.graph.initializer}
    inputs = {vi.name for vi in out.graph.input}
    for name, value in values.items():
        if name in inputs and name not in have:
            out.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(value), name))
    return out
