"""Graph input values a user gives (``--inputs FILE.npz``): read safely, checked against the model.

An ``.npz`` file is a zip of ``.npy`` arrays and, like every file a user
names, hostile. :func:`read_inputs`:

1. reads the file through :func:`onnxmem.core.fileio.read_input` (a regular file
   of at most ``MAX_DATA_BYTES``);
2. refuses a member that is not an ``.npy`` array and a file whose arrays
   would take more than ``MAX_DATA_BYTES`` (or the memory there is) once
   decompressed, from the sizes the zip declares (the zip reader never
   decompresses past them);
3. reads each array from that same zip with ``allow_pickle=False`` (an object
   array, or a member that is not in the ``.npy`` format, is refused), once its
   header is known to declare no more bytes than the member holds (numpy
   allocates the declared array before it reads it).

:func:`check_inputs` then holds each array against the graph input of the
same name: a name the model has no input for, another element type, another
rank or another fixed dim is a one-line error. The arrays' shapes bind the
inputs' dims as ``--input-shape`` does (:func:`bind_input_shapes`); inputs
the file leaves out get seeded random values as before
(``runtime.random_inputs``).

Example: a model with inputs ``audio [1, ?]`` (float) and ``sr []`` (int64),
and ``np.savez("in.npz", sr=np.array(16000))``: ``sr`` is 16000, ``audio``
random, and ``--input-shape audio=1x16000`` still binds ``audio``'s unknown
dim.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from collections.abc import Callable, Mapping
from typing import IO

import numpy as np
import onnx

from onnxmem.core.errors import OnnxmemError, ShapeError, cut_words, one_line, show_name
from onnxmem.core.fileio import MAX_DATA_BYTES, read_input
from onnxmem.graph import GraphView
from onnxmem.model import graph_inputs

__all__ = ["bind_input_shapes", "check_inputs", "feeds_for", "read_inputs", "write_arrays"]


def _label(path: str | os.PathLike[str]) -> str:
    return show_name(os.fspath(path))


def read_inputs(path: str | os.PathLike[str], limit: int = MAX_DATA_BYTES,
                what: str = "--inputs") -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file at ``path``, by name (see the module docstring).
    ``what`` names the file's source in messages (a zoo list's line and key)."""
    from onnxmem.runtime.ort import check_memory

    data = read_input(path, f"{what} file", limit)
    where = f"{what} {_label(path)}"
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError, struct.error):
        # NotImplementedError: a zip version past what Python reads
        raise OnnxmemError(f"{where} is not an .npz file (a zip of .npy arrays); write it with numpy.savez") from None
    members = archive.infolist()
    total = 0
    for info in members:
        if not info.filename.endswith(".npy") or info.is_dir():
            raise OnnxmemError(f"{where} holds {show_name(info.filename)}, which is not an .npy array; "
                               "write the file with numpy.savez")
        total += info.file_size
    if total > limit:
        raise OnnxmemError(f"{where} holds {total:,} B of arrays once decompressed, more than the "
                           f"{limit:,} B onnxmem reads; give smaller inputs")
    check_memory(total, "cpu", f"the arrays of {where}", fix="give smaller inputs")
    arrays: dict[str, np.ndarray] = {}
    try:
        with archive:
            for info in members:
                with archive.open(info) as member:
                    _check_declared(member, info, where)
                with archive.open(info) as member:
                    arrays[info.filename[:-len(".npy")]] = np.lib.format.read_array(member, allow_pickle=False)
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, NotImplementedError, struct.error,
            RuntimeError) as exc:  # RuntimeError: zipfile's refusal of an encrypted member
        raise OnnxmemError(f"{where} has an array numpy cannot read without pickle: "
                           f"{one_line(cut_words(str(exc), 200))}; save plain arrays with numpy.savez") from None
    return arrays


def write_arrays(values: Mapping[str, np.ndarray], where: str) -> Callable[[IO[bytes]], None]:
    """What writes ``values`` as the npz file :func:`read_inputs` reads (a member ``NAME.npy`` each,
    as ``numpy.savez`` writes them), into an open file (``onnxmem.core.fileio.write_stream_atomic``).
    The members are written here rather than by ``numpy.savez``, whose keyword arguments a value named
    ``file`` or ``allow_pickle`` would collide with. ``OnnxmemError`` (naming ``where``) for a name
    holding a NUL byte, which no member name can."""
    cut = next((n for n in values if "\0" in n), None)
    if cut is not None:
        raise OnnxmemError(f"{where}: graph output {show_name(cut)} holds a NUL byte, which no npz member "
                           f"name can; leave out {where}")

    def write(fh: IO[bytes]) -> None:
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True) as npz:
            for name, value in values.items():
                with npz.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)

    return write


def _check_declared(member: IO[bytes], info: zipfile.ZipInfo, where: str) -> None:
    """Refuse an ``.npy`` member whose header declares more bytes than the member holds: numpy
    allocates the declared array before it reads a byte (a 236-byte file can declare 4 TiB)."""
    version = np.lib.format.read_magic(member)
    header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)
    shape, _, dtype = header(member)
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if need > info.file_size:
        raise OnnxmemError(f"{where}: member {show_name(info.filename)} declares an array of {need:,} B but holds "
                           f"{info.file_size:,} B; save plain arrays with numpy.savez")


def check_inputs(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray],
                 where: str = "--inputs") -> dict[str, tuple[int, ...]]:
    """Each array's shape, by graph input, once it matches the input's declaration.

    Raises a one-line ``ShapeError`` for a name that is not a graph input (it
    lists the inputs), an element type other than the declared one, another
    rank, or a fixed dim that differs.
    """
    declared = graph_inputs(model)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, arr in arrays.items():
        if name not in declared:
            known = ", ".join(show_name(n) for n in declared) or "none"
            raise ShapeError(f"{where}: array {show_name(name)} is not a graph input of the model; "
                             f"its inputs are {known}")
        elem = types.get(name, 0)
        if elem == onnx.TensorProto.STRING:  # no array of strings could be read anyway: npz keeps them as objects
            raise ShapeError(f"{where}: graph input {show_name(name)} is a string tensor, whose size is not fixed; "
                             "onnxmem plans numeric tensors only")
        if elem:
            try:
                want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
            except (KeyError, TypeError, ValueError):
                want = None
            if want is not None and arr.dtype != want:
                raise ShapeError(f"{where}: array {show_name(name)} is {arr.dtype}; the graph input is {want}: "
                                 f"save it as {want}")
        dims = declared[name]
        shape = tuple(int(d) for d in arr.shape)
        if dims is not None:
            if len(dims) != len(shape):
                raise ShapeError(f"{where}: array {show_name(name)} has rank {len(shape)} {list(shape)}; the graph "
                                 f"input has rank {len(dims)} {[d if d is not None else '?' for d in dims]}")
            for axis, (d, n) in enumerate(zip(dims, shape)):
                if isinstance(d, int) and d != n:
                    raise ShapeError(f"{where}: array {show_name(name)} has {n} at axis {axis}; the graph input "
                                     f"fixes it to {d}: {list(shape)} against {[x if x is not None else '?' for x in dims]}")
        shapes[name] = shape
    return shapes


def bind_input_shapes(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray] | None,
                      input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """``input_shapes`` (``--input-shape``) with the shapes of the given arrays added.

    The arrays are checked first (:func:`check_inputs`); an ``--input-shape``
    for the same input that disagrees with its array is an error.
    """
    out = dict(input_shapes)
    if not arrays:
        return out
    for name, shape in check_inputs(model, arrays).items():
        if name in out and tuple(out[name]) != shape:
            raise ShapeError(f"--input-shape {show_name(name)}={'x'.join(map(str, out[name]))} disagrees with "
                             f"its array in --inputs ({'x'.join(map(str, shape)) or 'a scalar'}); give one of them")
        out[name] = shape
    return out


def feeds_for(model: onnx.ModelProto, view: GraphView, given: Mapping[str, np.ndarray] | None,
              seed: int = 0) -> dict[str, np.ndarray]:
    """Every graph input of ``view``: the ``given`` arrays, each with the dtype and shape the
    view (the plan) has, and seeded random values for the rest (``runtime.random_inputs``)."""
    from onnxmem.runtime.ort import random_inputs

    shapes = {n: view.tensors[n].shape for n in view.inputs}
    arrays: dict[str, np.ndarray] = {}
    for n, value in (given or {}).items():
        if n not in shapes:
            known = ", ".join(show_name(i) for i in view.inputs) or "none"
            raise ShapeError(f"--inputs: array {show_name(n)} is not a graph input of the model; its inputs are {known}")
        arr = np.asarray(value)
        t = view.tensors[n]
        want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        if arr.dtype != want or tuple(arr.shape) != tuple(t.shape):
            raise ShapeError(
                f"--inputs: array {show_name(n)} is {arr.dtype}{list(arr.shape)}; the plan has {want}{list(t.shape)}: "
                "give the plan's shape, or plan with these inputs (plan --inputs)"
            )
        arrays[n] = arr
    return random_inputs(model, shapes, seed, given=arrays)
