"""What an arena run takes and gives: its options, its output checks, its result (:mod:`.arena`)."""

from __future__ import annotations

import ctypes
import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from onnxmem.core.choices import DEVICES
from onnxmem.proof.plan import Finding

#: about how many bytes of values one piece of the whole-model reference computes (a node's
#: outputs are never split; :mod:`onnxmem.runtime.reference`)
PIECE_BYTES = 32 << 20

__all__ = ["DEVICES", "PIECE_BYTES", "Execution", "ExecutionOptions", "OutputCheck", "Uncopied", "compare_output",
           "same_bytes"]



@dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """How to run a plan. ``inputs`` overrides the seeded random inputs. ``reference``: what the
    arena's values are held to, ``"whole"`` (the whole model run once outside the arena with the
    same kernels, where it can be: :mod:`onnxmem.runtime.arena`) or ``"nodes"`` (every node run
    once more outside the arena). ``beside``: whether other threads work while the nodes run in
    the arena: a whole-model reference (:meth:`onnxmem.runtime.arena.ArenaRun.run`), or, where
    each node runs again instead, the node sessions and the ordinary whole-model run
    (:meth:`onnxmem.runtime.arena_steps.ArenaSteps.run_beside`); ``None``: where this process has
    a core to spare (:func:`onnxmem.runtime.ahead.spare_core`).
    ``piece_bytes``: about how many bytes of values each piece of a whole-model reference
    computes (:class:`onnxmem.runtime.reference.PieceReference`). ``handed``: whether a run ahead
    of a whole-model reference writes the values of shape arithmetic from it rather than running
    their nodes in the arena (:func:`onnxmem.runtime.arena_buffers.handed`); ``False``: every
    node runs in the arena. ``keep_outputs``: the :class:`Execution` carries the graph outputs as the
    arena run left them (``values``), for the caller to keep (``verify --save-outputs``)."""

    device: str = "cpu"
    inputs: Mapping[str, np.ndarray] | None = None
    seed: int = 0
    rtol: float = 1e-4
    atol: float = 1e-5
    keep_going: bool = False  # run on after a clobber (to see whether results change)
    reference: str = "whole"
    beside: bool | None = None
    piece_bytes: int = PIECE_BYTES
    handed: bool = True
    keep_outputs: bool = False


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """One graph output of the arena run against the reference run (:class:`Execution`'s ``reference``).

    ``ok`` when ``max_abs_diff <= tolerance`` where ``tolerance = atol + rtol *
    max|reference|`` (integers and booleans: equal). ``identical``: bit for
    bit. ``whole_model_diff`` / ``whole_model_ok``: the same measure against
    one ordinary whole-model onnxruntime run, for information (kernels there
    may sum in another order); ``None`` when that run was not made.
    """

    name: str
    max_abs_diff: float
    ok: bool
    tolerance: float = 0.0
    identical: bool = False
    whole_model_diff: float | None = None
    whole_model_ok: bool | None = None


@dataclass(frozen=True, slots=True)
class Execution:
    """What running the plan showed; ``findings`` is empty when it held."""

    device: str
    findings: tuple[Finding, ...]
    outputs: tuple[OutputCheck, ...]
    nodes_run: int
    seconds: float  # the per-node loop in the arena
    #: one whole-model run (the reference itself where ``reference == "whole"``); ``None`` where none
    #: could be made (an op onnxruntime has no kernel for ran as its stand-in)
    reference_seconds: float | None
    changed_result: bool  # a graph output differs or a node failed
    notes: tuple[str, ...] = ()
    private_seconds: float = 0.0  # the same nodes run again on private buffers (the reference)
    #: what the values were held to: ``"whole"`` (one whole-model run, same kernels, every value of
    #: the graph) or ``"nodes"`` (each node again)
    reference: str = "nodes"
    #: the ops whose nodes ran as standard-op stand-ins (:mod:`onnxmem.runtime.standins`)
    stand_ins: tuple[str, ...] = ()
    #: nodes of shape arithmetic whose values were written in the arena from the reference's run of
    #: them, not run there (:func:`onnxmem.runtime.arena_buffers.handed`); ``nodes_run`` leaves them out
    nodes_handed: int = 0
    #: the graph outputs as the arena run left them (copies), where ``ExecutionOptions.keep_outputs``
    #: asked for them and the run went to its end; else ``None``
    values: Mapping[str, np.ndarray] | None = None


class Uncopied(Exception):
    """A write reached the bytes of a live value whose bytes were not kept (``ArenaSteps.unkept``):
    there is nothing to compare them with; the run goes step by step, where every value's are."""


def _libc_memcmp() -> Callable[[int, int, int], int] | None:
    """The C library's ``memcmp``, as loaded in this process; ``None`` where there is none to load."""
    try:
        libc = ctypes.CDLL(None) if sys.platform != "win32" else ctypes.cdll.msvcrt
        memcmp = libc.memcmp
    except (OSError, AttributeError):
        return None
    memcmp.restype = ctypes.c_int
    memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return memcmp


_MEMCMP = _libc_memcmp()


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two flat byte arrays hold the same bytes: where both lie in one run of memory, by
    the C library's ``memcmp`` (a third of the time of numpy's comparison of a few MiB: no array of
    flags), or without one eight at a time, never with the temporary of one flag a byte that
    ``np.array_equal`` makes; else (a strided view) by a copy of each."""
    if a.size != b.size:
        return False
    if a.size <= 4096 or not (a.flags.c_contiguous and b.flags.c_contiguous):
        return a.tobytes() == b.tobytes()
    if _MEMCMP is not None:
        return _MEMCMP(a.ctypes.data, b.ctypes.data, a.size) == 0
    k = a.size - a.size % 8
    return bool((a[:k].view(np.uint64) == b[:k].view(np.uint64)).all()) and a[k:].tobytes() == b[k:].tobytes()


def compare_output(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> OutputCheck:
    """``got`` against ``ref`` on the scale of ``ref``.

    Floats: ``max |got - ref| <= atol + rtol * max |ref|`` over the finite
    values of ``ref`` (NaN and infinities must match exactly); an element-wise
    tolerance would fail outputs whose large entries differ in the last bits.
    Integers and booleans: equal.
    """
    if got.shape != ref.shape:
        return OutputCheck(name, float("inf"), False)
    from onnxmem.runtime.ort import foreign_dtype

    if got.dtype == ref.dtype and foreign_dtype(ref.dtype):  # ml_dtypes' (bfloat16, float8...): in numpy's types
        wide = np.float32 if ref.dtype.name.startswith(("float", "bfloat")) else np.int64
        same = same_bytes(np.ascontiguousarray(got).reshape(-1).view(np.uint8),
                          np.ascontiguousarray(ref).reshape(-1).view(np.uint8))
        check = compare_output(name, got.astype(wide), ref.astype(wide), rtol, atol)
        return dataclasses.replace(check, identical=same)
    if got.dtype != ref.dtype:
        identical = False
    elif got.dtype.hasobject:
        identical = np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(ref).tobytes()
    else:
        identical = same_bytes(np.ascontiguousarray(got).reshape(-1).view(np.uint8),
                               np.ascontiguousarray(ref).reshape(-1).view(np.uint8))
    if np.issubdtype(ref.dtype, np.floating) and identical:  # no difference: the tolerance alone
        finite = np.abs(ref[np.isfinite(ref)])  # exact in ref's type, as in float64
        return OutputCheck(name, 0.0, True, atol + rtol * float(finite.max(initial=0.0)), True)
    if np.issubdtype(ref.dtype, np.floating):
        g64, r64 = got.astype(np.float64), ref.astype(np.float64)
        same = (g64 == r64) | (np.isnan(g64) & np.isnan(r64))
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.where(same, 0.0, np.abs(g64 - r64))
        d = np.where(np.isnan(d), np.inf, d)
        diff = float(d.max(initial=0.0))
        finite = np.abs(r64[np.isfinite(r64)])
        tol = atol + rtol * float(finite.max(initial=0.0))
        return OutputCheck(name, diff, diff <= tol, tol, identical)
    eq = np.array_equal(got, ref)
    diff = 0.0 if eq else float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max(initial=0.0))
    return OutputCheck(name, diff, eq, 0.0, identical)
