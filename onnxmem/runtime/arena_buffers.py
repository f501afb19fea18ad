"""The memory of an arena run (:mod:`.arena`): the arena on the host or on a CUDA device, filled
with the sentinel, and where each tensor lives during the run."""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

import onnxmem.runtime.isolation as isolation
import onnxmem.runtime.sessions as sessions
from onnxmem.core.errors import PlanInvalid, RuntimeBackendError, show_name
from onnxmem.graph import GraphView, Op, draws_random
from onnxmem.plans.point import MemoryPlan
from onnxmem.proof.plan import VIEW_OPS, Finding
from onnxmem.runtime.ort import (
    NUMPY_DTYPES,
    check_memory,
    foreign_dtype,
    onnx_array,
    ort_value,
)
from onnxmem.runtime.settings import session_options

__all__ = ["HOST_BASE_ALIGNMENT", "SENTINEL", "ArenaMemory", "CudaArena", "HostArena", "Slot", "Write", "arena_slots", "fits",
           "handed", "overlaps", "planned_value", "refused_finding", "slot_value", "uncopied"]

SENTINEL = 0xFF
#: base alignment of the host arena (the CUDA allocator gives 256)
HOST_BASE_ALIGNMENT = 4096



def fits(size: int, device: str, slack: int = 0) -> None:
    """Raise a one-line error when an arena of ``size`` bytes (plus ``slack``) cannot be allocated on ``device`` now."""
    check_memory(size, device, "the plan's arena", slack=slack,
                 fix="verify on a machine with more memory, or plan smaller dims (--dim, --input-shape)")


# ------------------------------------------------------------------ arenas


class HostArena:
    """The arena as one host buffer, filled with the sentinel."""

    device_type = "cpu"

    def __init__(self, size: int) -> None:
        fits(size, "cpu", slack=HOST_BASE_ALIGNMENT)
        try:
            self._raw = np.full(size + HOST_BASE_ALIGNMENT, SENTINEL, dtype=np.uint8)
        except MemoryError:
            raise RuntimeBackendError(
                f"cannot allocate the plan's arena of {size} B in host memory; verify on a machine with more memory"
            ) from None
        shift = (-self._raw.ctypes.data) % HOST_BASE_ALIGNMENT
        self.view = self._raw[shift : shift + size]
        self.base = int(self.view.ctypes.data) if size else int(self._raw.ctypes.data) + shift
        self._aside: np.ndarray | None = None  # what keep() copied, each at its own offset

    def read(self, offset: int, size: int) -> np.ndarray:
        return np.array(self.view[offset : offset + size])

    def keep(self, offset: int, size: int) -> np.ndarray:
        """The bytes at ``offset`` copied aside, into a buffer the arena's size at the same offset:
        valid until bytes there are kept again, which for a live value's bytes is only when a write
        that should not have reached them did (the caller copies them away first). No fresh memory
        for every tensor written: the system does not fault in and zero pages for each copy."""
        if self._aside is None:
            self._aside = np.empty(self.view.size, dtype=np.uint8)
        kept = self._aside[offset : offset + size]
        kept[...] = self.view[offset : offset + size]
        return kept

    def peek(self, offset: int, size: int) -> np.ndarray:
        """The bytes at ``offset`` without a copy: to compare now, never to keep."""
        return self.view[offset : offset + size]

    def reset(self) -> None:
        """Every byte back to the sentinel."""
        self.view[:] = SENTINEL

    def write(self, offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.view[offset : offset + flat.size] = flat


#: ``cudaMemcpyKind``: host to device, device to host
_TO_DEVICE, _TO_HOST = 1, 2
#: bytes of the arena :meth:`CudaArena.direct_copies` moves both ways to check the runtime's copies
_CHECKED_BYTES = 4096


def cuda_copies() -> tuple[Any, Any] | None:
    """``(cudaMemcpy, cudaDeviceSynchronize)`` of the CUDA runtime onnxruntime's provider loaded,
    typed for ctypes; ``None`` where no runtime library loads."""
    import ctypes

    cudart = isolation.cuda_runtime()
    if cudart is None:
        return None
    try:
        copy, sync = cudart.cudaMemcpy, cudart.cudaDeviceSynchronize
    except AttributeError:
        return None
    copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    copy.restype = sync.restype = ctypes.c_int
    sync.argtypes = []
    return copy, sync


class CudaArena:
    """The arena as one CUDA allocation. Bytes move by the CUDA runtime's ``cudaMemcpy`` where it
    moves them as an Identity session of onnxruntime's does (:meth:`direct_copies`), else through
    that session: one session run per copy costs several times one call of the runtime, and a
    run on CUDA reads each input of a node and each value a write may reach."""

    device_type = "cuda"

    def __init__(self, size: int, direct: bool = True) -> None:
        import onnxruntime as ort

        n = max(size, 1)
        fits(n, "cuda")
        try:
            self._ov = ort.OrtValue.ortvalue_from_shape_and_type([n], np.uint8, "cuda", 0)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(
                f"cannot allocate the plan's arena of {size} B on the GPU: {sessions.first_line(exc, 160)}"
            ) from None
        self._n = n
        self.base = int(self._ov.data_ptr())
        x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, ["n"])
        y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, ["n"])
        g = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "copy", [x], [y])
        m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
        self._copy = ort.InferenceSession(
            m.SerializeToString(), sess_options=session_options(), providers=["CUDAExecutionProvider"]
        )
        self._direct: tuple[Any, Any] | None = None
        if direct:
            self._direct = self.direct_copies(cuda_copies())
        self._fill()

    def direct_copies(self, copies: tuple[Any, Any] | None) -> tuple[Any, Any] | None:
        """``copies`` (:func:`cuda_copies`) where they move bytes as the Identity session does: a
        pattern written to the arena's first bytes by the runtime reads back through the session,
        and another written by the session reads back by the runtime; else ``None`` (no runtime
        library, another runtime's pointers, an error). The arena's bytes are left to the caller."""
        if copies is None:
            return None
        copy, sync = copies
        n = min(self._n, _CHECKED_BYTES)
        ours = (np.arange(n, dtype=np.int64) * 7 + 3).astype(np.uint8)
        theirs, back = ours[::-1].copy(), np.empty(n, dtype=np.uint8)
        try:
            if copy(self.base, int(ours.ctypes.data), n, _TO_DEVICE) or sync():
                return None
            if not np.array_equal(self._through_session(0, n), ours):
                return None
            self._move(("cpu", int(theirs.ctypes.data)), ("cuda", self.base), n)
            if copy(int(back.ctypes.data), self.base, n, _TO_HOST) or not np.array_equal(back, theirs):
                return None
        except Exception:  # noqa: BLE001 - ctypes or onnxruntime: the session's copies stay
            return None
        return copies

    def _through_session(self, offset: int, size: int) -> np.ndarray:
        out = np.empty(size, dtype=np.uint8)
        self._move(("cuda", self.base + offset), ("cpu", int(out.ctypes.data)), size)
        return out

    def _move(self, src: tuple[str, int], dst: tuple[str, int], size: int) -> None:
        if size == 0:
            return
        b = self._copy.io_binding()
        b.bind_input("x", src[0], 0, np.uint8, [size], src[1])
        b.bind_output("y", dst[0], 0, np.uint8, [size], dst[1])
        self._copy.run_with_iobinding(b)
        b.synchronize_outputs()

    def read(self, offset: int, size: int) -> np.ndarray:
        if self._direct is None or size == 0:
            return self._through_session(offset, size)
        out = np.empty(size, dtype=np.uint8)
        # every kernel that wrote there has finished: each node run synchronizes its outputs
        if self._direct[0](int(out.ctypes.data), self.base + offset, size, _TO_HOST):
            raise RuntimeBackendError(f"the CUDA runtime failed to copy {size} B of the arena to the host")
        return out

    peek = read  # the bytes come to the host either way
    keep = read  # a fresh copy each time

    def reset(self) -> None:
        """Every byte back to the sentinel."""
        self._fill()

    def _fill(self) -> None:
        self._ov.update_inplace(np.full(self._n, SENTINEL, dtype=np.uint8))

    def write(self, offset: int, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if self._direct is None or flat.size == 0:
            self._move(("cpu", int(flat.ctypes.data)), ("cuda", self.base + offset), int(flat.size))
            return
        copy, sync = self._direct
        # from pageable memory the copy may return before its bytes land: the next kernel, on
        # onnxruntime's own stream, waits for nothing of the runtime's, so the device finishes first
        if copy(self.base + offset, int(flat.ctypes.data), int(flat.size), _TO_DEVICE) or sync():
            raise RuntimeBackendError(f"the CUDA runtime failed to copy {flat.size} B to the arena")


class ArenaMemory:
    """Where an arena run (:class:`onnxmem.runtime.arena_steps.ArenaSteps`) reads and writes each
    value: the arena, its host mirror on CUDA, or a buffer of the value's own."""

    cuda: bool
    arena: Any  # a HostArena or a CudaArena
    mirror: Any  # the host mirror on CUDA (the arena itself on the host)
    weights: Any
    _weight_values: dict[tuple[str, bool], Any]

    def _memory(self, slot: Slot) -> Any:
        return self.mirror if slot.home == "host" else self.arena

    def _address(self, slot: Slot) -> int:
        if slot.private is not None:
            return int(slot.private.ctypes.data)
        return int(self._memory(slot).base) + slot.offset

    def _device(self, slot: Slot) -> str:
        return "cuda" if self.cuda and slot.home == "arena" else "cpu"

    def _read(self, slot: Slot) -> np.ndarray:
        return np.array(slot.private[: slot.size]) if slot.private is not None else self._memory(slot).read(
            slot.offset, slot.size)

    def _keep(self, slot: Slot) -> np.ndarray:
        """The slot's bytes as they must stay while it is live (``HostArena.keep``; a private
        slot's: a copy, as :meth:`_read` makes)."""
        return self._read(slot) if slot.private is not None else self._memory(slot).keep(slot.offset, slot.size)

    def _peek(self, slot: Slot) -> np.ndarray:
        """The slot's bytes, to compare now (a view where they are on the host)."""
        return slot.private[: slot.size] if slot.private is not None else self._memory(slot).peek(slot.offset, slot.size)

    def _weight(self, name: str, host: bool) -> Any:
        """The weight ``name`` as an OrtValue on the host or the device, made once."""
        key = (name, host or not self.cuda)
        if key not in self._weight_values:
            self._weight_values[key] = ort_value(self.weights[name], "cpu" if key[1] else "cuda")
        return self._weight_values[key]


@dataclass(slots=True)
class Slot:
    """Where one tensor lives during execution."""

    name: str
    home: str  # "arena", "host" (CUDA: the host mirror) or "private" (io external)
    offset: int
    size: int
    elem_type: int
    shape: tuple[int, ...]
    group: str
    end: int  # last step it is needed (exclusive)
    private: np.ndarray | None = None


@dataclass(slots=True)
class Write:
    """The outputs one node wrote, at one step."""

    step: int
    node: str
    outputs: list[Slot] = field(default_factory=list)


def arena_slots(plan: MemoryPlan, view: GraphView,
                life: Mapping[str, tuple[int, int, int | None]]) -> dict[str, Slot]:
    """Where each main-graph tensor of ``life`` (:func:`onnxmem.proof.plan.true_lifetimes`) lives:
    at its planned offset in the arena, or, where the plan places it nowhere (io external), in a
    private buffer of its own. ``PlanInvalid`` for a tensor whose buffer, or its value at the
    view's shape, would reach outside the arena: its kernel, bound there, would write memory that
    is not the arena's (the static proof, which ``verify`` makes before it runs a plan, finds it
    as the rule ``arena``)."""
    slots: dict[str, Slot] = {}
    for pt in plan.tensors:
        if pt.graph:
            continue  # a body's tensor: its frame binds it (arena._BodyRun)
        t = view.tensors[pt.name]
        end = pt.offset + max(pt.size, t.size)
        if pt.offset < 0 or end > plan.arena_size:
            raise PlanInvalid(f"tensor {show_name(pt.name)} would take bytes [{pt.offset}, {end}) of an arena of "
                              f"{plan.arena_size} B, outside it; the plan does not hold (its static proof says "
                              "why: verify --static-only); re-plan the model")
        slots[pt.name] = Slot(pt.name, "arena", pt.offset, pt.size, t.elem_type, t.shape, pt.group, life[pt.name][1])
    for name, (_s, e, _r) in life.items():
        if name not in slots:  # io external: the caller's buffers
            t = view.tensors[name]
            buf = np.zeros(max(t.size, 1), dtype=np.uint8)
            slots[name] = Slot(name, "private", 0, t.size, t.elem_type, t.shape, name, e, buf)
    return slots


# ------------------------------------------------------------------ the run


def overlaps(op: Op, k: int, outs: Sequence[str], slots: Mapping[str, Slot], live: Mapping[str, Slot],
             graph_outputs: Container[str]) -> Iterator[tuple[Slot, Slot]]:
    """Each ``(write, value)``: an output of ``op`` (run at step ``k``; ``outs``, its outputs in the
    arena) and a ``live`` value whose bytes it shares and must leave as they are. A value in
    place under an output of its group that dies at ``op``, which reads it, is no such value."""
    for w in (slots[o] for o in outs):
        if w.private is not None or w.size == 0:
            continue
        lo, hi = w.offset, w.offset + w.size
        for name, s in live.items():
            if s.offset >= hi or s.offset + s.size <= lo or not s.size:  # apart: most of them, tested first
                continue
            if name in outs or s.private is not None or s.home != w.home:
                continue
            if s.group == w.group and s.end <= k + 1 and name in op.reads and name not in graph_outputs:
                continue  # in place over an input that dies here
            yield w, s


def refused_finding(write: Slot, value: Slot, op: Op, error: str, path: str) -> Finding:
    """The finding of ``op`` failing to run in the arena, where its output ``write`` shares bytes
    with the live ``value``: a kernel may refuse such a binding where another writes over the
    value (onnxruntime's CUDA Transpose refuses an output over its input; its CPU one writes)."""
    lo, hi = max(write.offset, value.offset), min(write.offset + write.size, value.offset + value.size)
    where = f"in subgraph {path!r}: " if path else ""
    return Finding(
        "clobber",
        value.name,
        f"{where}node {op.name!r} failed to run with its output {write.name!r} over arena bytes [{lo}, {hi}) "
        f"of {value.name!r}, still live: {error}",
        node=op.name,
        other=write.name,
        byte_range=(lo, hi),
        graph=path,
    )


def clobber_finding(slot: Slot, now: np.ndarray, before: np.ndarray, at_node: str, when: str,
                    writer_out: str | None, history: list[Write], path: str) -> Finding:
    """The finding of ``slot``'s bytes changed from ``before`` to ``now``, found at node ``at_node``
    (``when``: before it ran, or ``""``: by its write of ``writer_out``); found before a node ran,
    the writer is the last earlier write over those bytes in ``history``. ``path``: the graph's."""
    diff = np.flatnonzero(now != before)
    lo, hi = slot.offset + int(diff[0]), slot.offset + int(diff[-1]) + 1
    writer = at_node
    if writer_out is None:
        writer = "(unknown)"
        for w in reversed(history):
            hit = [o for o in w.outputs if o.home == slot.home and o.offset < hi and lo < o.offset + o.size]
            if hit:
                writer, writer_out = w.node, hit[0].name
                break
    by = f" (output {writer_out!r})" if writer_out else ""
    where = f"in subgraph {path!r}: " if path else ""
    return Finding(
        "clobber",
        slot.name,
        f"{where}tensor {slot.name!r} was overwritten by node {writer!r}{by} at arena bytes [{lo}, {hi}) "
        f"while still live{(' (' + when + ' of ' + repr(at_node) + ')') if when else ''}",
        node=writer,
        other=writer_out,
        byte_range=(lo, hi),
        graph=path,
    )


def uncopied(view: GraphView, order: Sequence[int], weight_ops: Container[int],
             slots: Mapping[str, Slot]) -> frozenset[str]:
    """The values in the arena a run may keep no copy of (``ArenaSteps.unkept``; the run ahead of
    the reference, ``ArenaRun.run_ahead``, and the run where each node runs again,
    ``ArenaSteps.run``): each written by one node of ``order`` (less ``weight_ops``) and read by
    the next node run alone, no graph output. Nothing runs in the arena between its write and its
    reads, so its bytes are as written when they are read; the checks of each input (step 1) and
    the copy of each value written (step 7) cost bytes read and written in proportion
    (nasnetalarge: 53% of the 846 MB its nodes write, 40% of the bytes they read; on CUDA each is
    a copy from the device to the host). A write over one of them while it is live, which the
    proof refuses, sends the run step by step again, where every value's bytes are kept."""
    run = [i for i in order if i not in weight_ops]
    made: dict[str, int] = {o: k for k, i in enumerate(run) for o in view.ops[i].outputs if o}
    later = set(view.outputs)  # a value read after the node next to its writer, or an output
    read: set[str] = set()
    for k, i in enumerate(run):
        for r in view.ops[i].reads:
            read.add(r)
            if made.get(r, k - 1) != k - 1:
                later.add(r)
    return frozenset(n for n in made if n in read and n not in later and n in slots and slots[n].home == "arena")


#: the most bytes of a value :func:`handed` takes from the reference (shape arithmetic's values)
HANDED_BYTES = 256
#: the element types :func:`handed` takes: numpy's own (the reference hands each over as an
#: array), less float16, in which no shape arithmetic computes
_PLAIN = frozenset(NUMPY_DTYPES) - {onnx.TensorProto.FLOAT16}

def handed(view: GraphView, order: Sequence[int], weight_ops: Container[int], slots: Mapping[str, Slot],
           given: Container[str]) -> frozenset[int]:
    """The nodes of ``order`` (less ``weight_ops``) whose values an arena run writes in the arena
    from their run outside it instead of running them there (the whole-model reference's run:
    ``ArenaRun.run_ahead``, and the run step by step beside it; where each node runs again as its
    reference, one run of them all on the CPU: :mod:`onnxmem.runtime.handover`): shape arithmetic,
    which onnxruntime's own session folds away. Each is a node of the standard domain that

    - writes values in the arena of at most :data:`HANDED_BYTES` each, of numpy's own element
      types (:data:`_PLAIN`), none a graph output;
    - reads only values of ``given`` (the weights: initializers and folded constants), values of
      nodes handed before it, and, for Shape and Size, the shape of any value (its first input's
      bytes are never read): the nodes onnxruntime folds into constants when the shapes are
      static;
    - writes no byte of a value it reads, but a view's output (:data:`onnxmem.proof.plan.VIEW_OPS`)
      planned on exactly its input's bytes (its kernel writes them unchanged).

    A node that draws random numbers, or a Dropout, is not taken.

    Its inputs are then the bytes the reference's run of it read (each input is checked as it is
    read, step 1), no kernel's work in place is taken on trust, and onnxruntime's kernel gives the
    same bits in the arena and out of it; what the write does to the other live values is checked
    as any node's (step 6)."""
    nodes: set[int] = set()
    made: set[str] = set()
    for i in order:
        op = view.ops[i]
        outs = [o for o in op.outputs if o]
        if (i in weight_ops or not outs or op.domain not in ("", "ai.onnx") or i in view.bodies
                or draws_random(op) or op.op_type == "Dropout"):  # a draw is no shape arithmetic
            continue
        if any(o not in slots or slots[o].home != "arena" or slots[o].private is not None
               or slots[o].size > HANDED_BYTES or slots[o].elem_type not in _PLAIN or o in view.outputs
               for o in outs):
            continue
        if not all(r in given or r in made or (k == 0 and op.op_type in ("Shape", "Size"))
                   for k, r in enumerate(op.reads)):
            continue
        if any(_overlap(slots[o], slots.get(r), op.op_type) for o in outs for r in op.reads):
            continue
        nodes.add(i)
        made.update(outs)
    return frozenset(nodes)


def _overlap(out: Slot, read: Slot | None, op_type: str) -> bool:
    """Whether ``out`` is planned on bytes of ``read`` (see :func:`handed`)."""
    if read is None or read.private is not None or read.home != out.home or not read.size:
        return False
    if op_type in VIEW_OPS and read.offset == out.offset and read.size == out.size:
        return False
    return read.offset < out.offset + out.size and out.offset < read.offset + read.size


def planned_value(slot: Slot, value: np.ndarray) -> bool:
    """Whether ``value``, given for ``slot`` from a run outside the arena (:func:`handed`), has
    the slot's planned shape and element type, so that its bytes may be written there."""
    return tuple(value.shape) == tuple(slot.shape) and value.dtype == NUMPY_DTYPES.get(slot.elem_type)


def slot_value(slot: Slot, data: np.ndarray) -> np.ndarray:
    """The value of ``slot`` at its shape, from ``data``, its buffer's bytes (the first bytes where
    it runs smaller than its buffer)."""
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(slot.elem_type))
    if foreign_dtype(dtype):  # ml_dtypes' (bfloat16, float8, int4 packed two to a byte...)
        return onnx_array(slot.elem_type, slot.shape, data)
    used = int(np.prod(slot.shape, dtype=np.int64)) * dtype.itemsize
    return data[:used].view(dtype).reshape(slot.shape) if used < data.size else data.view(dtype).reshape(slot.shape)
