"""onnxruntime: sessions, measured shapes, folding, arena runs (CPU, CUDA, concurrent, training), peaks.

The public interface of the runtime layer: higher layers import from here
(``from onnxmem.runtime import execute_plan``). Each name loads its module on first
use, so importing one module of the layer (the CLI imports
:mod:`onnxmem.runtime.isolation` at start-up) loads neither the others nor
onnxruntime; onnxruntime itself is imported inside the functions that run it.

* :mod:`~onnxmem.runtime.ort`: sessions, measured shapes, bounded runs;
* :mod:`~onnxmem.runtime.sessions`: one session per node, bindings, CUDA checks;
* :mod:`~onnxmem.runtime.arena` (with :mod:`~onnxmem.runtime.arena_steps`,
  :mod:`~onnxmem.runtime.arena_buffers`, :mod:`~onnxmem.runtime.arena_records`):
  a plan run in one arena;
* :mod:`~onnxmem.runtime.concurrent`, :mod:`~onnxmem.runtime.training`: the same with
  nodes at once, and for training graphs;
* :mod:`~onnxmem.runtime.folding` (weights), :mod:`~onnxmem.runtime.inputs`,
  :mod:`~onnxmem.runtime.peak` (onnxruntime's own peak),
  :mod:`~onnxmem.runtime.isolation` (the child process of a run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from onnxmem.runtime.arena import (
        DEVICES,
        SENTINEL,
        ArenaRun,
        Execution,
        ExecutionOptions,
        OutputCheck,
        compare_output,
        execute_plan,
    )
    from onnxmem.runtime.concurrent import (
        ConcurrentExecution,
        ConcurrentOptions,
        ConcurrentRun,
        Trial,
        run_concurrent,
    )
    from onnxmem.runtime.folding import (
        compute_weights,
        fold_weights,
        folded_model,
        weight_ops,
    )
    from onnxmem.runtime.inputs import (
        bind_input_shapes,
        check_inputs,
        feeds_for,
        read_inputs,
    )
    from onnxmem.runtime.isolation import (
        GRACE_SECONDS,
        RUN_SECONDS,
        RunLimits,
        TimeLimitExceeded,
        at_step,
        available_memory,
        current_limits,
        end_run,
        run_isolated,
        run_limits,
        start_run,
        timed_out,
    )
    from onnxmem.runtime.ort import (
        NUMPY_DTYPES,
        check_memory,
        first_line,
        infer_measured_shapes,
        make_session,
        measure_shapes,
        random_inputs,
        run_bounded,
    )
    from onnxmem.runtime.peak import (
        EXECUTION_MODES,
        LEVELS,
        OrtPeak,
        arena_over_ort,
        comparable_peak,
        held_from_profile,
        is_kernel_event,
        ort_peak,
        peak_from_profile,
    )
    from onnxmem.runtime.sessions import (
        binding_type,
        cuda_available,
        host_array,
        model_like,
        node_session,
        on_host,
        ortvalue_bytes,
        require_cuda,
        run_model,
    )
    from onnxmem.runtime.training import (
        TrainingRun,
        execute_in_one_arena,
        execute_training,
        is_training_view,
        missing_kernel,
        require_training_runtime,
        seed_dropout,
        training_feeds,
    )

__all__ = [
    "DEVICES",
    "EXECUTION_MODES",
    "GRACE_SECONDS",
    "LEVELS",
    "NUMPY_DTYPES",
    "RUN_SECONDS",
    "SENTINEL",
    "ArenaRun",
    "ConcurrentExecution",
    "ConcurrentOptions",
    "ConcurrentRun",
    "Execution",
    "ExecutionOptions",
    "OrtPeak",
    "OutputCheck",
    "RunLimits",
    "TimeLimitExceeded",
    "TrainingRun",
    "Trial",
    "arena_over_ort",
    "at_step",
    "available_memory",
    "bind_input_shapes",
    "binding_type",
    "check_inputs",
    "check_memory",
    "comparable_peak",
    "compare_output",
    "compute_weights",
    "cuda_available",
    "current_limits",
    "end_run",
    "execute_in_one_arena",
    "execute_plan",
    "execute_training",
    "feeds_for",
    "first_line",
    "fold_weights",
    "folded_model",
    "held_from_profile",
    "host_array",
    "infer_measured_shapes",
    "is_kernel_event",
    "is_training_view",
    "make_session",
    "measure_shapes",
    "missing_kernel",
    "model_like",
    "node_session",
    "on_host",
    "ort_peak",
    "ortvalue_bytes",
    "peak_from_profile",
    "random_inputs",
    "read_inputs",
    "require_cuda",
    "require_training_runtime",
    "run_bounded",
    "run_concurrent",
    "run_isolated",
    "run_limits",
    "run_model",
    "seed_dropout",
    "start_run",
    "timed_out",
    "training_feeds",
    "weight_ops",
]

_EXPORTS = {
    "ArenaRun": "onnxmem.runtime.arena",
    "ConcurrentExecution": "onnxmem.runtime.concurrent",
    "ConcurrentOptions": "onnxmem.runtime.concurrent",
    "ConcurrentRun": "onnxmem.runtime.concurrent",
    "DEVICES": "onnxmem.runtime.arena",
    "EXECUTION_MODES": "onnxmem.runtime.peak",
    "Execution": "onnxmem.runtime.arena",
    "ExecutionOptions": "onnxmem.runtime.arena",
    "GRACE_SECONDS": "onnxmem.runtime.isolation",
    "LEVELS": "onnxmem.runtime.peak",
    "NUMPY_DTYPES": "onnxmem.runtime.ort",
    "OrtPeak": "onnxmem.runtime.peak",
    "OutputCheck": "onnxmem.runtime.arena",
    "RUN_SECONDS": "onnxmem.runtime.isolation",
    "RunLimits": "onnxmem.runtime.isolation",
    "SENTINEL": "onnxmem.runtime.arena",
    "TimeLimitExceeded": "onnxmem.runtime.isolation",
    "TrainingRun": "onnxmem.runtime.training",
    "Trial": "onnxmem.runtime.concurrent",
    "arena_over_ort": "onnxmem.runtime.peak",
    "at_step": "onnxmem.runtime.isolation",
    "available_memory": "onnxmem.runtime.isolation",
    "bind_input_shapes": "onnxmem.runtime.inputs",
    "binding_type": "onnxmem.runtime.sessions",
    "check_inputs": "onnxmem.runtime.inputs",
    "check_memory": "onnxmem.runtime.ort",
    "comparable_peak": "onnxmem.runtime.peak",
    "compare_output": "onnxmem.runtime.arena",
    "compute_weights": "onnxmem.runtime.folding",
    "cuda_available": "onnxmem.runtime.sessions",
    "current_limits": "onnxmem.runtime.isolation",
    "end_run": "onnxmem.runtime.isolation",
    "execute_in_one_arena": "onnxmem.runtime.training",
    "execute_plan": "onnxmem.runtime.arena",
    "execute_training": "onnxmem.runtime.training",
    "feeds_for": "onnxmem.runtime.inputs",
    "first_line": "onnxmem.runtime.ort",
    "fold_weights": "onnxmem.runtime.folding",
    "folded_model": "onnxmem.runtime.folding",
    "held_from_profile": "onnxmem.runtime.peak",
    "host_array": "onnxmem.runtime.sessions",
    "infer_measured_shapes": "onnxmem.runtime.ort",
    "is_kernel_event": "onnxmem.runtime.peak",
    "is_training_view": "onnxmem.runtime.training",
    "make_session": "onnxmem.runtime.ort",
    "measure_shapes": "onnxmem.runtime.ort",
    "missing_kernel": "onnxmem.runtime.training",
    "model_like": "onnxmem.runtime.sessions",
    "node_session": "onnxmem.runtime.sessions",
    "on_host": "onnxmem.runtime.sessions",
    "ort_peak": "onnxmem.runtime.peak",
    "ortvalue_bytes": "onnxmem.runtime.sessions",
    "peak_from_profile": "onnxmem.runtime.peak",
    "random_inputs": "onnxmem.runtime.ort",
    "read_inputs": "onnxmem.runtime.inputs",
    "require_cuda": "onnxmem.runtime.sessions",
    "require_training_runtime": "onnxmem.runtime.training",
    "run_bounded": "onnxmem.runtime.ort",
    "run_concurrent": "onnxmem.runtime.concurrent",
    "run_isolated": "onnxmem.runtime.isolation",
    "run_limits": "onnxmem.runtime.isolation",
    "run_model": "onnxmem.runtime.sessions",
    "seed_dropout": "onnxmem.runtime.training",
    "start_run": "onnxmem.runtime.isolation",
    "timed_out": "onnxmem.runtime.isolation",
    "training_feeds": "onnxmem.runtime.training",
    "weight_ops": "onnxmem.runtime.folding",
}


__getattr__ = lazy_attributes(globals(), _EXPORTS)
