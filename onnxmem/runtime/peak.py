"""onnxruntime's own activation peak, read from its profiler.

Steps:

1. constant nodes whose inputs are weights are folded into initializers, so
   onnxruntime runs the graph onnxmem plans (weights outside the arena);
2. one session with profiling on, the CPU memory arena on (the default),
   memory patterns off (every tensor is its own allocation, so the figures are
   per tensor), one thread, at the asked optimization level (:data:`LEVELS`):
   ``disable`` (``ORT_DISABLE_ALL``, the graph onnxmem plans), ``basic``
   (``ORT_ENABLE_BASIC``: onnxruntime's own constant folding and redundant-node
   elimination, no fusion; the figure to set beside a plan made with
   ``--fold on``) or ``all`` (``ORT_ENABLE_ALL``, onnxruntime's default:
   fused, a different graph, for information);
3. one run on the seeded random inputs; with the arena on, onnxruntime 1.31
   gives each kernel event (``cat == "Node"``, name ``*_kernel_time``) the
   allocator's statistics after the kernel ran, before its dead inputs are
   released;
   with ``execution_mode="parallel"`` the session runs onnxruntime's
   parallel executor (``ORT_PARALLEL``, ``threads`` inter-op threads):
   independent nodes run at once, as a plan made with ``--concurrency dag``
   allows;
4. the peak is ``max(mem_bytes_requested_in_use)`` over the run's kernel
   events minus the bytes in use before the first kernel
   (``mem_bytes_requested_in_use - mem_requested_in_use_delta`` of the first
   event): requested bytes (no arena rounding) of the tensors onnxruntime
   allocated; initializers, which are in use before the first kernel, are
   subtracted, and graph inputs, which the caller owns, never appear.

``arena_peak`` is the largest ``mem_in_use_peak`` minus the same baseline:
arena-rounded bytes, including scratch a kernel frees before it returns.

``held`` is the largest ``mem_bytes_in_use`` over the same kernel events minus the
bytes in use before the first kernel: what onnxruntime's allocator holds for the same
tensors at the same moments, each allocation rounded as its arena rounds it (256 B and
up on the CPU arena of onnxruntime 1.31), kernel scratch not included. ``peak`` is
the tensors' exact bytes; an arena planned with ``--alignment`` pads each offset, so
the like-for-like figure for a padded arena is ``held`` (bytes held on both sides) and
for an arena planned with ``--alignment 1`` it is ``peak`` (exact bytes on both sides).

Comparing with onnxmem's arena (:func:`comparable_peak`): onnxruntime's peak
counts the graph outputs (it allocates them) but not the graph inputs (the
caller owns them and holds them through the whole run). A plan with
``io="internal"`` (the default) holds both in its arena, so the comparable
figure is ``peak + bytes of the graph inputs``: the memory a caller of
onnxruntime holds at onnxruntime's peak besides the weights. A plan with
``io="external"`` holds neither, so the comparable figure is ``peak - bytes
of the graph outputs`` (at least 0): a low estimate of onnxruntime's peak
without its outputs, never in the arena's favour. :func:`arena_over_ort` is
``arena_size / comparable_peak``; ``onnxmem compare`` and the zoo table show
that ratio.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnx

from onnxmem.core.choices import EXECUTION_MODES
from onnxmem.core.errors import OnnxmemError, RuntimeBackendError
from onnxmem.graph import GraphView

__all__ = ["EXECUTION_MODES", "LEVELS", "OrtPeak", "arena_over_ort", "comparable_peak", "is_kernel_event",
           "held_from_profile", "ort_peak", "peak_from_profile"]

#: optimization levels onnxmem can measure onnxruntime at -> ``GraphOptimizationLevel`` name
LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}


@dataclass(frozen=True, slots=True)
class OrtPeak:
    """onnxruntime's activation peak for one optimization level (bytes)."""

    level: str
    device: str
    peak: int | None  # max requested bytes in use, initializers excluded
    arena_peak: int | None  # arena-rounded peak, scratch included
    kernels: int
    field: str = "mem_bytes_requested_in_use"
    note: str = ""
    execution_mode: str = "sequential"
    threads_seen: int = 1  # distinct thread ids of the profiled kernels
    held: int | None = None  # max bytes the allocator held (its rounding), scratch excluded


def is_kernel_event(event: dict[str, Any]) -> bool:
    """Whether a profile event is one node's kernel run (``cat == "Node"``, name ``*_kernel_time``)."""
    return event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time")


def _kernel_stats(events: list[dict[str, Any]], provider: str) -> tuple[list[dict[str, Any]], int]:
    """The ``args`` of the first ``model_run``'s kernel events of ``provider`` that carry
    allocator statistics, and the number of its kernel events."""
    kernels: list[dict[str, Any]] = []
    for e in events:
        if is_kernel_event(e):
            args = e.get("args", {})
            if args.get("provider", provider) == provider:
                kernels.append(args)
        elif e.get("name") == "model_run" and kernels:
            break
    return [a for a in kernels if "mem_bytes_requested_in_use" in a], len(kernels)


def peak_from_profile(events: list[dict[str, Any]], provider: str = "CPUExecutionProvider") -> tuple[int | None, int | None, int]:
    """``(peak, arena_peak, kernels)`` of the first ``model_run`` in a profile's events."""
    with_stats, n = _kernel_stats(events, provider)
    if not with_stats:
        return None, None, n
    first = with_stats[0]
    base = int(first["mem_bytes_requested_in_use"]) - int(first.get("mem_requested_in_use_delta", 0))
    peak = max(int(a["mem_bytes_requested_in_use"]) for a in with_stats) - base
    arena = None
    if all("mem_in_use_peak" in a for a in with_stats):
        arena = max(int(a["mem_in_use_peak"]) for a in with_stats) - _in_use_before(first)
    return peak, arena, n


def _in_use_before(first: dict[str, Any]) -> int:
    """The arena-rounded bytes in use before the first kernel event ``first`` ran."""
    return int(first.get("mem_bytes_in_use", 0)) - int(first.get("mem_in_use_delta", 0))


def held_from_profile(events: list[dict[str, Any]], provider: str = "CPUExecutionProvider") -> int | None:
    """The bytes onnxruntime's allocator held at its fullest kernel event of the first
    ``model_run`` (``mem_bytes_in_use``, its rounding included, scratch not), less those
    held before the first kernel; ``None`` without the statistics."""
    with_stats, _ = _kernel_stats(events, provider)
    if not with_stats or not all("mem_bytes_in_use" in a for a in with_stats):
        return None
    return max(int(a["mem_bytes_in_use"]) for a in with_stats) - _in_use_before(with_stats[0])


def ort_peak(
    model: onnx.ModelProto,
    view: GraphView,
    *,
    level: str = "disable",
    device: str = "cpu",
    model_path: str | os.PathLike[str] | None = None,
    seed: int = 0,
    inputs: Mapping[str, Any] | None = None,
    execution_mode: str = "sequential",
    threads: int = 2,
) -> OrtPeak:
    """Run ``model`` once in onnxruntime with its profiler and read its activation peak
    (on seeded random inputs; ``inputs``: the values of some, as given;
    ``execution_mode="parallel"``: with its parallel executor on ``threads`` inter-op threads).
    It runs in the command's onnxruntime process (:mod:`onnxmem.runtime.isolation`)."""
    from onnxmem.runtime.isolation import run_isolated

    return run_isolated(_profile, model, view, level=level, device=device, model_path=model_path, seed=seed,
                        inputs=inputs, execution_mode=execution_mode, threads=threads)


def _profile(model: onnx.ModelProto, view: GraphView, *, level: str, device: str,
             model_path: str | os.PathLike[str] | None, seed: int, inputs: Mapping[str, Any] | None,
             execution_mode: str, threads: int) -> OrtPeak:
    """:func:`ort_peak`, in the process that runs onnxruntime."""
    import onnxruntime as ort

    from onnxmem.runtime.folding import folded_model
    from onnxmem.runtime.inputs import feeds_for
    from onnxmem.runtime.ort import first_line, run_bounded, session_options
    from onnxmem.runtime.sessions import require_cuda

    if level not in LEVELS:
        raise OnnxmemError(f"optimization level '{level}' is not one of {', '.join(LEVELS)}")
    if execution_mode not in EXECUTION_MODES:
        raise OnnxmemError(f"--execution-mode '{execution_mode}' is not one of {', '.join(EXECUTION_MODES)}")
    providers: list[Any] = ["CPUExecutionProvider"]
    provider = "CPUExecutionProvider"
    if device == "cuda":
        require_cuda()
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        provider = "CUDAExecutionProvider"
    folded = folded_model(model, view, model_path)
    feeds = feeds_for(folded, view, inputs, seed)
    with tempfile.TemporaryDirectory(prefix="onnxmem-ortpeak-") as tmp:
        so = session_options(profile_prefix=os.path.join(tmp, "profile"))
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
        so.enable_mem_pattern = False
        so.enable_cpu_mem_arena = True
        if execution_mode == "parallel":
            so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
            so.inter_op_num_threads = max(int(threads), 1)
        try:
            sess = ort.InferenceSession(folded.SerializeToString(), sess_options=so, providers=providers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(f"onnxruntime cannot load the model to profile it: {first_line(exc)}") from None
        run_bounded(sess, None, feeds, "to profile it")
        path = sess.end_profiling()
        with open(path) as fh:
            events = json.load(fh)
    peak, arena, n = peak_from_profile(events, provider)
    held = held_from_profile(events, provider)
    note = "" if peak is not None else f"the profiler gave no allocator statistics for {provider}"
    tids = {e.get("tid") for e in events if is_kernel_event(e)}
    return OrtPeak(level, device, peak, arena, n, note=note, execution_mode=execution_mode,
                   threads_seen=max(len(tids), 1), held=held)


def comparable_peak(peak: int | None, view: GraphView, io: str = "internal") -> int | None:
    """onnxruntime's ``peak`` counted over the same tensors as an arena planned with ``io``.

    ``internal``: ``peak`` plus the bytes of the graph inputs (onnxruntime
    leaves them to the caller; the arena holds them). ``external``: ``peak``
    minus the bytes of the graph outputs that are not graph inputs, at least 0
    (the arena holds neither). ``None`` when ``peak`` is ``None``.

    Example: onnxruntime peaks at 1000 B on a model with one 256 B input and a
    64 B output; against an ``internal`` arena that is 1256 B, against an
    ``external`` one 936 B.
    """
    if peak is None:
        return None
    if io == "internal":
        return peak + sum(view.tensors[n].size for n in view.inputs if view.tensors[n].kind != "weight")
    if io == "external":
        inputs = set(view.inputs)
        outputs = [view.tensors[n] for n in view.outputs if n not in inputs and n in view.tensors]
        return max(peak - sum(t.size for t in outputs if t.kind != "weight"), 0)
    raise OnnxmemError(f"io '{io}' is not one of internal, external")


def arena_over_ort(arena_size: int, peak: int | None, view: GraphView, io: str = "internal") -> float | None:
    """``arena_size / comparable_peak(peak, view, io)``; ``None`` when either is unknown or 0."""
    comparable = comparable_peak(peak, view, io)
    if not comparable:
        return None
    return arena_size / comparable
