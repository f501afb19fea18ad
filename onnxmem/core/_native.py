"""The compiled kernels: compiled ahead of time when built, numba otherwise.

The search kernels are written once, as numba functions (``@njit``) in their
modules (:data:`KERNELS` lists them). They run in one of two forms:

- *ahead of time*: :mod:`onnxmem.core._native_build` compiles them with
  ``numba.pycc`` into one extension module: ``onnxmem/core/_aot_generic*.so``
  for any processor of the architecture, shipped with the sources (so that an
  install compiles nothing), or ``onnxmem/core/_aot*.so`` for this machine's
  processor (``make kernels``), used first when present. It needs neither
  numba nor LLVM when it runs: a
  process that uses it starts in tenths of a second less (numba's import and
  LLVM's start-up are skipped, and nothing is compiled or loaded from
  numba's cache);
- *just in time*: numba compiles them on first use in a process, cached on
  disk, as before.

The extension module stores a hash of the kernels' sources
(:data:`SOURCES`) taken when it was built; :func:`kernels` uses it only when
that hash equals the hash of the sources present now, so a module built from
older sources is never used (it falls back to numba until rebuilt). It is
compiled for the build machine's processor, as numba's JIT compiles, and
stores a hash of that processor's features (:func:`machine_hash`): on a
machine whose processor differs it is not used either. The
environment variable ``ONNXMEM_KERNELS`` chooses: ``auto`` (default: ahead
of time when current), ``jit`` (always numba), ``aot`` (the built module, an
error when it is absent or stale).

A function compiled ahead of time takes exactly the argument types it was
built for (:data:`KERNELS` declares them) and does not check them itself: a
wrong dtype would be read as the wrong memory. So each is called through
:class:`AheadOfTime`, which checks every argument against the declaration and
raises ``TypeError`` on a mismatch.

Importing this module loads neither numba nor the extension module.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = [
    "AOT_MODULE", "GENERIC_MODULE", "KERNELS", "SOURCES", "AheadOfTime", "ahead_of_time", "kernels", "is_ahead_of_time", "mode",
    "machine_hash", "numba_signature", "source_hash",
]

#: the extension module built by :mod:`onnxmem.core._native_build` for this machine's processor
AOT_MODULE = "onnxmem.core._aot"
#: the one built for any processor of the architecture (``--target-cpu generic``), shipped with
#: the sources, so that nothing is compiled at install or run time; used when the one above is
#: absent or stale
GENERIC_MODULE = "onnxmem.core._aot_generic"

# argument types: int64 and bool scalars, C-contiguous writeable int64 /
# int32 vectors and int64 matrices; a tuple of types is a tuple argument
# (and bool vectors, uint64 matrices: the order search's bitsets)
I8, B1, VEC, VEC32, MAT = "i8", "b1", "i8[]", "i4[]", "i8[,]"
BVEC, BITS = "b1[]", "u8[,]"
_ARRAYS = {VEC: (np.dtype(np.int64), 1), VEC32: (np.dtype(np.int32), 1), MAT: (np.dtype(np.int64), 2),
           BVEC: (np.dtype(np.bool_), 1), BITS: (np.dtype(np.uint64), 2)}
_NUMBA = {I8: "int64", B1: "boolean", VEC: "int64[::1]", VEC32: "int32[::1]", MAT: "int64[:, ::1]",
          BVEC: "boolean[::1]", BITS: "uint64[:, ::1]"}

_BUFS = (VEC, VEC, VEC, VEC)  # (start, end, size, align)
_COVERS = (VEC, VEC, VEC, VEC32)  # cover_lists' answer

#: module -> (prefix in the extension module, {kernel: (result type, argument types)});
#: every kernel a solver calls from Python. Kernels only other kernels call are
#: compiled into these.
KERNELS: dict[str, tuple[str, dict[str, tuple[Any, tuple[Any, ...]]]]] = {
    "onnxmem.core._cyclecounter": ("clock", {"cycles": (I8, ())}),
    "onnxmem.core.solvers._kernels": ("greedy", {
        "cover_lists": (_COVERS, (VEC, VEC, VEC)),
        "place": ((VEC, B1), (VEC, B1, VEC, _BUFS, _COVERS, I8)),
        "lowest_first": ((VEC, B1), (VEC, I8, _BUFS, (VEC, VEC), VEC, I8)),
    }),
    # the lowest-first dive (onnxmem.core.solvers.skyline.dive): buffers, ranks, sections, scalars
    "onnxmem.core.solvers._dive": ("dive", {
        "dive": ((VEC, B1), (VEC,) * 7 + (I8,) * 4),
    }),
    "onnxmem.core.solvers._search": ("search", {
        "preorder": (VEC, (VEC, VEC, VEC, VEC, VEC, VEC, VEC)),
        "search": (I8, (VEC, VEC, VEC, (VEC,) * 9, (VEC,) * 6, (VEC,) * 7, VEC, MAT)),
    }),
    # the greedy list scheduler (onnxmem.scheduling.heuristics.piece_rows, then its scalars)
    "onnxmem.scheduling._greedy": ("listsched", {
        "greedy": ((VEC, I8), (VEC,) * 12 + (I8,) * 9),
    }),
    # the order search (onnxmem.scheduling.exact.piece_arrays): CSR graph, bitsets, sizes, bounds, stops
    "onnxmem.scheduling._search": ("order", {
        "search": ((I8, I8, I8), (
            VEC, VEC, VEC, BITS, VEC, VEC, VEC, VEC, VEC, VEC, VEC, VEC, VEC, VEC, BITS, VEC, BVEC, BITS,
            VEC, VEC, VEC, VEC, I8, I8, I8, VEC, I8, I8, I8,
        )),
    }),
}

#: the files (relative to this package, ``onnxmem/core``) the compiled kernels are built from:
#: the kernel modules, what they import, and the declarations above
SOURCES = (
    "_cyclecounter.py", "_native.py", "solvers/_kernels.py", "solvers/_search.py",
    "solvers/_searchdefs.py", "../scheduling/_search.py", "../scheduling/_searchdefs.py",
    "../scheduling/_greedy.py", "solvers/_dive.py",
)

_PACKAGE = Path(__file__).resolve().parent
_VALUE_BITS = 60


def source_hash(package: Path = _PACKAGE) -> int:
    """A 60-bit hash of :data:`SOURCES` under ``package`` (-1 when one is unreadable)."""
    digest = hashlib.sha256()
    try:
        for rel in SOURCES:
            digest.update(rel.encode() + b"\0" + (package / rel).read_bytes() + b"\0")
    except OSError:
        return -1
    return int(digest.hexdigest()[: _VALUE_BITS // 4], 16)


def numba_signature(result: Any, args: tuple[Any, ...]) -> str:
    """The numba signature string of a declaration in :data:`KERNELS`."""
    return f"{_numba_type(result)}({', '.join(_numba_type(a) for a in args)})"


def _numba_type(spec: Any) -> str:
    if isinstance(spec, tuple):
        return f"Tuple(({', '.join(_numba_type(s) for s in spec)},))"
    return _NUMBA[spec]


def _fits(value: Any, spec: Any) -> bool:
    if isinstance(spec, tuple):
        return isinstance(value, tuple) and len(value) == len(spec) and all(map(_fits, value, spec))
    if spec == I8:
        return bool(
            isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
            and -(2**63) <= value < 2**63
        )
    if spec == B1:
        return isinstance(value, (bool, np.bool_))
    dtype, ndim = _ARRAYS[spec]
    return (
        isinstance(value, np.ndarray) and value.dtype == dtype and value.ndim == ndim
        and bool(value.flags.c_contiguous) and bool(value.flags.writeable)
    )


class AheadOfTime:
    """A kernel compiled ahead of time, called with its arguments checked."""

    def __init__(self, name: str, function: Any, args: tuple[Any, ...]) -> None:
        self.name = name
        self.function = function
        self.args = args

    def __call__(self, *values: Any) -> Any:
        if len(values) != len(self.args):
            raise TypeError(f"kernel {self.name} takes {len(self.args)} arguments, not {len(values)}")
        for k, (value, spec) in enumerate(zip(values, self.args)):
            if not _fits(value, spec):
                raise TypeError(
                    f"kernel {self.name}: argument {k} does not match its compiled type "
                    f"{_numba_type(spec)} (got {_describe(value)})"
                )
        return self.function(*values)


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"({', '.join(_describe(v) for v in value)})"
    if isinstance(value, np.ndarray):
        layout = "C" if value.flags.c_contiguous else "non-contiguous"
        ro = "" if value.flags.writeable else ", read-only"
        return f"{value.dtype}[{value.ndim}-D, {layout}{ro}]"
    return type(value).__name__


def is_ahead_of_time(kernel: Any) -> bool:
    """Whether ``kernel`` (one of :func:`kernels`' answers) was compiled ahead of time."""
    return isinstance(kernel, AheadOfTime)


_LOADED: dict[str, Any] = {}


@functools.cache
def mode() -> str:
    """How the kernels run in this process: ``aot``, or ``jit (why)``.

    Decided once, on first use: ``aot`` when the extension module is built
    from the present sources (and ``ONNXMEM_KERNELS`` is not ``jit``).
    Raises ``RuntimeError`` when ``ONNXMEM_KERNELS=aot`` and it cannot be used.
    """
    wanted = os.environ.get("ONNXMEM_KERNELS", "auto").strip().lower() or "auto"
    if wanted not in ("auto", "jit", "aot"):
        raise RuntimeError(f"ONNXMEM_KERNELS={wanted!r} is not one of auto, jit, aot; unset it or pick one")
    if wanted == "jit":
        return "jit (ONNXMEM_KERNELS=jit)"
    reason = _aot_problem()
    if reason is None:
        return "aot"
    if wanted == "aot":
        raise RuntimeError(f"ONNXMEM_KERNELS=aot but {reason}; run `python -m onnxmem.core._native_build`")
    return f"jit ({reason})"


def _aot_problem() -> str | None:
    """Why no extension module can be used (``None``: one can): the one built here, else the
    shipped generic one (the reason given: why a present one does not fit, else that none is built)."""
    absent = "the ahead-of-time module is not built"
    reasons = []
    for name in (AOT_MODULE, GENERIC_MODULE):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if Path(getattr(module, "__file__", "") or "").resolve().parent != _PACKAGE:
            continue  # found outside this package (an editable install's finder can reach another checkout)
        reason = _mismatch(module)
        if reason is None:
            _LOADED[AOT_MODULE] = module
            return None
        reasons.append(reason)
    return reasons[0] if reasons else absent


def _mismatch(module: Any) -> str | None:
    """Why ``module`` does not fit the present sources and processor (``None``: it does)."""
    if int(module.source_hash()) != source_hash():
        return "the ahead-of-time module was built from other kernel sources"
    built_for = int(module.machine_hash())
    if built_for != 0 and built_for != machine_hash():
        return "the ahead-of-time module was built for another processor"
    return None


def machine_hash() -> int:
    """A 60-bit hash of this machine's architecture and processor features.

    A module compiled for the build machine's processor (``--target-cpu
    host``, the default) may use instructions another processor lacks; it
    stores this hash and is not used elsewhere. The features are read from
    ``/proc/cpuinfo`` where there is one (``flags`` or ``Features``), else
    from :func:`platform.processor`.
    """
    import platform

    features = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    features = " ".join(sorted(value.split()))
                    break
    except OSError:
        pass
    if features is None:  # platform.processor() runs `uname -p` on Linux: only where /proc says nothing
        features = platform.processor()
    text = f"{platform.machine()}\0{features}".encode()
    return int(hashlib.sha256(text).hexdigest()[: _VALUE_BITS // 4], 16)


def ahead_of_time(module: str, built: Any) -> SimpleNamespace:
    """The kernels :data:`KERNELS` declares for ``module``, from the extension
    module ``built``, each an :class:`AheadOfTime` (no check of its hash)."""
    prefix, declared = KERNELS[module]
    return SimpleNamespace(**{
        name: AheadOfTime(f"{module}.{name}", getattr(built, f"{prefix}_{name}"), args)
        for name, (_, args) in declared.items()
    })


def kernels(module: str) -> Any:
    """The kernels of ``module`` (a key of :data:`KERNELS`), as :func:`mode` says.

    Ahead of time: a namespace of :class:`AheadOfTime` kernels, one per
    declared kernel. Just in time: the numba module itself.
    """
    found = _LOADED.get(module)
    if found is not None:
        return found
    if mode() == "aot" and module in KERNELS:
        found = ahead_of_time(module, _LOADED[AOT_MODULE])
    else:
        found = importlib.import_module(module)
    _LOADED[module] = found
    return found
