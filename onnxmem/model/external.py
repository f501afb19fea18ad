"""External weights: each reference checked against the model's folder, and read in on request.

A location must be relative and resolve inside the model's folder (links included), to a
regular file that holds the tensor's bytes; no string of the file is followed elsewhere.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto

from onnxmem.core.errors import ModelError, show_name
from onnxmem.model.dtypes import DTYPES, MAX_BYTES, dtype_name, tensor_bytes
from onnxmem.model.tensors import Site, site_label, stored_tensors

__all__ = ["ARRAY_TYPES", "MAX_INLINE_WEIGHTS", "ExternalData", "check_external_data", "read_external_data"]


#: bytes of weights onnxmem inlines into one model for onnxruntime (protobuf's limit)
MAX_INLINE_WEIGHTS = 2**31 - 1


_DECIMAL = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class ExternalData:
    """One tensor's external-data reference, checked: bytes ``[offset, offset + length)`` of ``path``."""

    tensor: str
    path: Path  # resolved, inside the model's folder, a regular file
    offset: int
    length: int
    label: str = ""  # the tensor and where it sits, escaped, for messages


def _external_field(label: str, key: str, value: str, size: int) -> int:
    if not _DECIMAL.fullmatch(value):
        raise ModelError(
            f"{label} has external-data {key} {show_name(value)}, which is "
            "not a non-negative decimal integer; re-export the model"
        )
    n = int(value)
    if n > size:
        raise ModelError(
            f"{label} has external-data {key} {n:,}, past the end of its "
            f"data file ({size:,} bytes); the file is truncated or the reference is wrong: re-export the model"
        )
    return n


def _data_file(loc: str, root: Path, need_files: bool, where: str) -> tuple[Path, os.stat_result | None]:
    """The data file at ``loc``: a regular file under ``root`` (``None`` status when it is missing
    and ``need_files`` is false); ``where`` names the reference in messages."""
    if "\0" in loc:
        raise ModelError(f"{where} contains a NUL byte; re-export the model")
    if os.path.isabs(loc) or Path(loc).drive or Path(loc).root:
        raise ModelError(f"{where} is an absolute path, outside the model's folder; onnxmem reads "
                         "data files only from there: move the data file next to the model")
    target = Path(os.path.realpath(root / loc))
    if target == root or root not in target.parents:
        raise ModelError(
            f"{where} points outside the model's folder {show_name(str(root))} (through '..' or "
            "a link); onnxmem refuses to read it: move the data file next to the model"
        )
    try:
        st = os.stat(target)
    except FileNotFoundError:
        if need_files:
            raise ModelError(f"{where} does not exist in {show_name(str(root))}; copy the data file "
                             "next to the model") from None
        st = None
    except OSError as exc:
        raise ModelError(f"{where} cannot be read: {exc.strerror}; check the data file") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{where} is not a regular file (a folder, device or FIFO); give the "
                         "model its data file")
    return target, st


def _external_reference(init: onnx.TensorProto, root: Path, need_files: bool, label: str,
                        files: dict[str, tuple[Path, os.stat_result | None]] | None = None) -> ExternalData:
    """Check one external-data reference against the files under ``root`` (never reads data);
    ``label`` names the tensor in messages (:func:`tensor_sites`). ``files``: each location
    already found a regular file under ``root`` (or missing, where allowed), with its path and
    status, looked up once for the many tensors of one data file."""
    name = init.name
    info: dict[str, str] = {}
    for e in init.external_data:
        key, value = e.key, e.value
        if not isinstance(key, str) or not isinstance(value, str):
            raise ModelError(
                f"{label} has an external-data entry that is not text; "
                "re-export the model"
            )
        info[key] = value
    loc = info.get("location", "")
    where = f"{label}: external data {show_name(loc)}"
    if not loc:
        raise ModelError(f"{label} keeps its data outside the file but names no "
                         "location; re-export the model")
    if files is not None and loc in files:
        target, st = files[loc]
    else:
        target, st = _data_file(loc, root, need_files, where)
        if files is not None:
            files[loc] = (target, st)
    size = st.st_size if st is not None else MAX_BYTES
    offset = _external_field(label, "offset", info.get("offset", "0"), size)
    length = _external_field(label, "length", info["length"], size) if "length" in info else size - offset
    if offset + length > size:
        raise ModelError(
            f"{where}: bytes [{offset:,}, {offset + length:,}) run past the end of the file "
            f"({size:,} bytes); the file is truncated or the reference is wrong: re-export the model"
        )
    if init.data_type == TensorProto.STRING:
        raise ModelError(f"{label} is a string tensor in external data, which "
                         "ONNX does not allow; re-export the model")
    if init.data_type in DTYPES and (st is not None or "length" in info):
        expected = tensor_bytes(init.data_type, init.dims, name)
        if length != expected:
            raise ModelError(
                f"{where} holds {length:,} bytes, but a {dtype_name(init.data_type)} tensor of shape "
                f"{list(init.dims)} takes {expected:,}; re-export the model"
            )
    return ExternalData(name, target, offset, length, label)


def check_external_data(
    model: onnx.ModelProto, base: str | os.PathLike[str], *, need_files: bool = True,
    sites: Iterable[tuple[Site, onnx.TensorProto]] | None = None,
) -> list[ExternalData]:
    """Check every external-data reference of ``model``, whose file lies in folder ``base``.

    Each location must be relative, resolve (links included) to a regular file
    inside ``base``, and hold its ``[offset, offset + length)`` bytes; offsets
    and lengths must be decimal integers, and a length must match the tensor's
    dtype and dims. Local functions' tensors are checked as the
    graph's are. With ``need_files=False`` (planning, which needs shapes
    only) a data file may be missing; what is there is checked all the same.
    Raises ``ModelError`` naming the tensor, the rule and the fix; reads no
    data. :func:`read_external_data` reads what this checks. ``sites``: the model's
    :func:`onnxmem.model.tensors.stored_tensors`, where the caller has them already.
    """
    root = Path(os.path.realpath(base))
    refs = []
    files: dict[str, tuple[Path, os.stat_result | None]] = {}
    for site, t in stored_tensors(model) if sites is None else sites:
        if t.data_location == TensorProto.EXTERNAL:
            refs.append(_external_reference(t, root, need_files, site_label(site, t), files))
    return refs


#: the element types :func:`read_external_data` reads straight into numpy arrays where asked
ARRAY_TYPES: dict[int, str] = {TensorProto.FLOAT: "<f4", TensorProto.FLOAT16: "<f2", TensorProto.DOUBLE: "<f8"}


def read_external_data(model: onnx.ModelProto, base: str | os.PathLike[str],
                       arrays: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A copy of ``model`` with every external tensor's bytes read in, after :func:`check_external_data`.

    Refuses weights of more than ``MAX_INLINE_WEIGHTS`` bytes in all (onnxruntime
    gets the model as one protobuf message, which cannot reach 2 GiB). ``arrays``: where
    given, each main-graph initializer of :data:`ARRAY_TYPES` becomes a numpy array put there
    under its name (over a copy-on-write map of its data file, :func:`_mapped`, else read
    straight into it: one copy of its bytes, not three), and stays external in the copy.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    sites = list(stored_tensors(m))  # one walk of the copy for both
    tensors = [t for _, t in sites if t.data_location == TensorProto.EXTERNAL]
    refs = check_external_data(m, base, sites=sites)
    total = sum(r.length for r in refs)
    if total + model.ByteSize() > MAX_INLINE_WEIGHTS:
        raise ModelError(
            f"the model's external weights take {total:,} bytes; onnxmem runs models whose weights "
            f"and graph fit in one {MAX_INLINE_WEIGHTS + 1:,}-byte protobuf message: plan it without "
            "running it (no --measure-shapes, verify --static-only)"
        )
    main = {id(t) for t in m.graph.initializer if t.data_type in ARRAY_TYPES} if arrays is not None else set()
    maps: dict[Path, np.ndarray | None] = {}
    for t, ref in zip(tensors, refs):
        if id(t) in main and arrays is not None:
            dtype = np.dtype(ARRAY_TYPES[t.data_type])
            buf = _mapped(ref, maps, dtype.itemsize)
            if buf is None:
                buf = np.empty(ref.length, np.uint8)
                _read(ref, buf)
            arr = buf.view(dtype).reshape(tuple(t.dims))
            arrays[t.name] = arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))
            continue
        t.raw_data = _read(ref)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
    return m


def _mapped(ref: ExternalData, maps: dict[Path, np.ndarray | None], align: int = 1) -> np.ndarray | None:
    """``ref``'s bytes as a uint8 array over a copy-on-write map of its data file (each file
    mapped once, in ``maps``), or ``None`` where they are read instead: an offset that is not a
    multiple of ``align`` (the element's size: a numpy array of the weight's type needs it), an
    empty tensor, or a file that cannot be mapped.

    Nothing is read until used, and pages are shared with the operating system's file cache
    until written (then copied: writes never reach the file), where a read copies every byte
    into fresh memory first. A weight starts where its data file puts it: an exporter that
    packs its tensors back to back (torch's, onnx's ``save`` with external data) leaves most at
    offsets that are multiples of 4, not of 16, so a kernel gets such a weight as it gets any
    input a caller hands onnxruntime, aligned to its element (``tests/test_verify_mapped.py``:
    a node's outputs the same bits whichever). The checks of :func:`check_external_data` hold;
    a file cut short while mapped ends the process with SIGBUS (in the onnxruntime child, one
    line names it).
    """
    if ref.offset % align or not ref.length:
        return None
    if ref.path not in maps:
        maps[ref.path] = None
        try:
            fd = _open(ref.path)
        except OSError:
            return None
        try:
            import mmap

            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_size:
                maps[ref.path] = np.frombuffer(mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE), np.uint8)
        except (OSError, ValueError, AttributeError):  # no mmap, or none of this file, here: read it
            pass
        finally:
            os.close(fd)
    whole = maps[ref.path]
    if whole is None or ref.offset + ref.length > whole.size:
        return None
    return whole[ref.offset:ref.offset + ref.length]


def _open(path: Path) -> int:
    """A file descriptor of the data file at ``path`` (resolved by the checks, links and all),
    read-only: opening never blocks on a FIFO put there after the checks, nor follows a link put
    there (``OSError`` ``ELOOP``), which could lead out of the model's folder."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    return os.open(path, flags)


def _read(ref: ExternalData, into: np.ndarray | None = None) -> bytes:
    """The bytes ``ref`` names, read from its file (into ``into``, a uint8 array of its length, where given)."""
    where = f"{ref.label}: external data {show_name(str(ref.path.name))}"
    try:
        fd = _open(ref.path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ModelError(f"{where} is a link now (it was not when onnxmem checked it); onnxmem reads no "
                             "data file through a link put there after its checks: leave the model's files "
                             "as they are while onnxmem runs") from None
        raise ModelError(f"{where} cannot be opened: {exc.strerror}; check the data file") from None
    data = b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModelError(f"{where} is not a regular file; give the model its data file")
        if into is None:
            data = os.pread(fd, ref.length, ref.offset) if ref.length else b""
            got = len(data)
        else:
            got = _read_into(fd, into, ref.offset)
    except OSError as exc:
        raise ModelError(f"{where} cannot be read: {exc.strerror}; check the data file") from None
    finally:
        os.close(fd)
    if got != ref.length:
        raise ModelError(f"{where} ended after {got:,} of {ref.length:,} bytes (it changed "
                         "while onnxmem read it); check the data file")
    return data


def _read_into(fd: int, into: np.ndarray, offset: int) -> int:
    """Fill ``into`` from ``fd`` at ``offset`` (reads of at most 1 GiB each); the bytes read."""
    view, got = into.data.cast("B"), 0
    while got < len(view):
        if not hasattr(os, "preadv"):  # no vectored read here: one copy more
            chunk = os.pread(fd, min(len(view) - got, 2**30), offset + got)
            view[got:got + len(chunk)] = chunk
            n = len(chunk)
        else:
            n = os.preadv(fd, [view[got:got + 2**30]], offset + got)
        if n == 0:
            break
        got += n
    return got
