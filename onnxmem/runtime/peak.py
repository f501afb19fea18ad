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

onnxruntime's default session (:func:`ort_default_peak`): what a user's process gets from
``SessionOptions()`` left as it is: ``ORT_ENABLE_ALL``, memory patterns on, the CPU arena
on (one intra-op thread, as above: the thread count changes no tensor's size). With
memory patterns on, run 1 allocates each tensor on its own and records the allocations;
from run 2 on, onnxruntime allocates one block per device when the run starts, sized by
its own allocation planner for the recorded sizes (the peak of its planned offsets,
reuse included), and holds it to the end of the run; graph outputs, and tensors the
pattern does not cover, are allocated on their own as before. The steady state is run 2:

1. the same graph as above (values the plan folds are initializers), two runs on the
   same inputs with the profiler on; the kernel events of each run are those before
   its ``model_run`` event;
2. ``peak`` is ``max(mem_bytes_requested_in_use)`` over run 2's kernel events minus the
   bytes in use before run 1's first kernel. The weights (initializers, and prepacked
   weights, all allocated at session start) are in use before run 1 and subtracted;
   run 1's tensors are all released when it ends (its outputs are dropped), so run 2's
   figure holds the pattern block, the outputs and the tensors allocated apart; the
   graph inputs, owned by the caller, never appear. ``held`` is the same with
   ``mem_bytes_in_use``; ``arena_peak`` is not given (``mem_in_use_peak`` spans both
   runs). It is counted against an arena as the levels above are
   (:func:`comparable_peak`).

Worked case: the chain ``a = Relu(x); b = a + x; c = Relu(b); d = c + b; y = d + a`` on
``S``-byte tensors holds ``a, b, c, d`` at once (when ``d`` is made), so onnxruntime's
pattern block is ``4 S``, and ``y``, a graph output, is allocated apart: ``peak = 5 S``,
``6 S`` with the input against an ``internal`` arena. At ``ORT_DISABLE_ALL`` with memory
patterns off, ``b`` and ``c`` are released before ``y`` is allocated: ``peak = 4 S``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnx

import onnxmem.runtime.standins as standins
from onnxmem.core.choices import EXECUTION_MODES
from onnxmem.core.errors import OnnxmemError, RuntimeBackendError
from onnxmem.graph import GraphView

__all__ = ["EXECUTION_MODES", "LEVELS", "OrtPeak", "arena_over_ort", "comparable_peak", "default_peak_from_profile",
           "held_from_profile", "is_kernel_event", "ort_default_peak", "ort_peak", "peak_from_profile"]

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
    runs = _kernel_runs(events, provider)
    kernels = runs[0] if runs else []
    return [a for a in kernels if "mem_bytes_requested_in_use" in a], len(kernels)


def _kernel_runs(events: list[dict[str, Any]], provider: str) -> list[list[dict[str, Any]]]:
    """The ``args`` of the kernel events of ``provider``, one list per ``model_run`` (the
    events before its ``model_run`` event); runs without kernel events are left out."""
    runs: list[list[dict[str, Any]]] = [[]]
    for e in events:
        if is_kernel_event(e):
            args = e.get("args", {})
            if args.get("provider", provider) == provider:
                runs[-1].append(args)
        elif e.get("name") == "model_run" and runs[-1]:
            runs.append([])
    return [r for r in runs if r]


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
    from onnxmem.runtime.settings import session_options

    if level not in LEVELS:
        raise OnnxmemError(f"optimization level '{level}' is not one of {', '.join(LEVELS)}")
    if execution_mode not in EXECUTION_MODES:
        raise OnnxmemError(f"--execution-mode '{execution_mode}' is not one of {', '.join(EXECUTION_MODES)}")
    providers, provider = _providers(device)
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
        events = _profiled_runs(folded, so, providers, feeds, 1)
    peak, arena, n = peak_from_profile(events, provider)
    held = held_from_profile(events, provider)
    note = "" if peak is not None else f"the profiler gave no allocator statistics for {provider}"
    tids = {e.get("tid") for e in events if is_kernel_event(e)}
    return OrtPeak(level, device, peak, arena, n, note=note, execution_mode=execution_mode,
                   threads_seen=max(len(tids), 1), held=held)


def _providers(device: str) -> tuple[list[Any], str]:
    """The providers of a session on ``device`` and the one whose kernels are profiled (the first)."""
    from onnxmem.runtime.sessions import device_providers

    providers = device_providers(device)
    return list(providers), providers[0]


def _profiled_runs(folded: onnx.ModelProto, so: Any, providers: list[Any], feeds: Mapping[str, Any],
                   runs: int) -> list[dict[str, Any]]:
    """The profiler's events of ``runs`` runs of ``folded`` on ``feeds`` in one session made
    with ``so`` (which writes its profile into a temporary folder); each run's outputs are
    dropped before the next."""
    import onnxruntime as ort

    from onnxmem.runtime.ort import first_line, run_bounded

    try:
        sess = ort.InferenceSession(folded.SerializeToString(), sess_options=so, providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        raise RuntimeBackendError(f"onnxruntime cannot load the model to profile it: {first_line(exc)}"
                                  f"{standins.no_kernel_fix(str(exc), folded.opset_import)}") from None
    for _ in range(runs):
        run_bounded(sess, None, feeds, "to profile it")
    path = sess.end_profiling()
    with open(path) as fh:
        events: list[dict[str, Any]] = json.load(fh)
    return events


def default_peak_from_profile(events: list[dict[str, Any]], provider: str = "CPUExecutionProvider",
                              run: int = 2) -> tuple[int | None, int | None, int]:
    """``(peak, held, kernels)`` of the ``run``-th ``model_run`` (1-based) in a profile's
    events: the largest ``mem_bytes_requested_in_use`` (``mem_bytes_in_use``) over its
    kernel events less the bytes in use before the first run's first kernel; ``None``
    without the statistics or the run."""
    runs = _kernel_runs(events, provider)
    if len(runs) < run:
        return None, None, 0
    first, kernels = runs[0][0], runs[run - 1]
    if not all("mem_bytes_requested_in_use" in a for a in (first, *kernels)):
        return None, None, len(kernels)
    base = int(first["mem_bytes_requested_in_use"]) - int(first.get("mem_requested_in_use_delta", 0))
    peak = max(int(a["mem_bytes_requested_in_use"]) for a in kernels) - base
    held = None
    if all("mem_bytes_in_use" in a for a in (first, *kernels)):
        held = max(int(a["mem_bytes_in_use"]) for a in kernels) - _in_use_before(first)
    return peak, held, len(kernels)


def ort_default_peak(model: onnx.ModelProto, view: GraphView, *, device: str = "cpu",
                     model_path: str | os.PathLike[str] | None = None, seed: int = 0,
                     inputs: Mapping[str, Any] | None = None) -> OrtPeak:
    """onnxruntime's activation peak in its default session (``ORT_ENABLE_ALL``, memory
    patterns on), steady state: run 2 of two on the same seeded random inputs (``inputs``:
    the values of some, as given); see the module's docstring. ``level`` is ``"default"``.
    It runs in the command's onnxruntime process (:mod:`onnxmem.runtime.isolation`)."""
    from onnxmem.runtime.isolation import run_isolated

    return run_isolated(_profile_default, model, view, device=device, model_path=model_path, seed=seed,
                        inputs=inputs)


def _profile_default(model: onnx.ModelProto, view: GraphView, *, device: str,
                     model_path: str | os.PathLike[str] | None, seed: int,
                     inputs: Mapping[str, Any] | None) -> OrtPeak:
    """:func:`ort_default_peak`, in the process that runs onnxruntime."""
    import onnxruntime as ort

    from onnxmem.runtime.folding import folded_model
    from onnxmem.runtime.inputs import feeds_for
    from onnxmem.runtime.settings import session_options

    providers, provider = _providers(device)
    folded = folded_model(model, view, model_path)
    feeds = feeds_for(folded, view, inputs, seed)
    with tempfile.TemporaryDirectory(prefix="onnxmem-ortpeak-") as tmp:
        so = session_options(profile_prefix=os.path.join(tmp, "profile"))
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.enable_mem_pattern = True
        so.enable_cpu_mem_arena = True
        events = _profiled_runs(folded, so, providers, feeds, 2)
    peak, held, n = default_peak_from_profile(events, provider)
    note = "" if peak is not None else f"the profiler gave no allocator statistics of run 2 for {provider}"
    return OrtPeak("default", device, peak, None, n, note=note, held=held)


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
