"""What an onnxruntime process holds besides the plan: its fixed cost, and a session's measured peak.

**The fixed cost of a provider** (:func:`fixed_cost`): the bytes a session costs whatever
the model, measured once per provider and machine in a fresh onnxruntime child
(:mod:`onnxmem.runtime.isolation`):

1. the child resets its peak resident size (``5`` written to ``/proc/self/clear_refs``)
   and reads its resident size (``VmRSS``): the process with Python, numpy and
   onnxruntime loaded, :attr:`FixedCost.baseline`;
2. it creates a session of a one-node model (``Add`` of two ``float[1]``) on the
   provider, registering the custom op libraries given (:mod:`onnxmem.runtime.settings`),
   and runs it twice;
3. the growth of its peak resident size (``VmHWM``) over the baseline is
   :attr:`FixedCost.session`: the session, its thread pools and allocators, the
   provider's library state. On CUDA, the device memory the session takes
   (``cudaMemGetInfo`` before and after) is added.

The figure is kept in this process's memory (one measurement per provider per command) and,
only where the caller names a file (``--cache PATH``), in that file (:func:`cache_text` gives
its text, which the caller writes), keyed by provider, onnxruntime version and machine (and
the libraries, by name and size).

**A session's peak** (:func:`session_peak`): the same growth for a real model at given input
shapes, in a fresh child (so that no earlier run's heap is reused): from before the session
is created to the peak over ``runs`` runs. The benchmark of ``onnxmem fit`` and its tests
compare predictions with it.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from onnxmem.core.errors import OnnxmemError, RuntimeBackendError, show_name
from onnxmem.core.fileio import MAX_DATA_BYTES, read_input
from onnxmem.core.sizes import MAX_SIZE
from onnxmem.runtime.isolation import end_run, run_fresh, run_limits, start_run

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FixedCost", "SessionPeak", "TrainingStepPeak", "allocation_tracer", "cache_text", "fixed_cost", "measuring_options",
           "session_peak", "training_step_peak"]

#: provider name -> onnxruntime's execution provider
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_memo: dict[str, FixedCost] = {}


@dataclass(frozen=True, slots=True)
class FixedCost:
    """A provider's fixed cost on this machine (bytes). ``session``: what a one-node session adds to
    the process at its peak; ``baseline``: the resident size of a process with onnxruntime loaded,
    before any session; ``key``: provider, onnxruntime version and machine it was measured for."""

    device: str
    session: int
    baseline: int
    key: str


@dataclass(frozen=True, slots=True)
class SessionPeak:
    """A real session's growth (bytes) over the resident size before it was created: ``created``
    after the session was made, ``peak`` the highest over creation and the runs."""

    created: int
    peak: int
    baseline: int
    #: the peak growth after each run, in order (``runs[-1] == peak``)
    runs: tuple[int, ...] = ()
    #: the resident growth (not the peak) once the session is made: what it keeps
    held: int = 0
    #: bytes of the inputs fed to the runs (made before the baseline: the caller's)
    inputs: int = 0
    #: the peak over the runs of the bytes onnxruntime's CPU allocator held beyond what it held
    #: once the session was made (asked for with ``posix_memalign``, not yet freed: its tensors,
    #: its kernels' scratch, or with the arena on, the arena's regions), where the process runs
    #: with the allocation tracer preloaded (:func:`allocation_tracer`); ``None`` otherwise
    requested: int | None = None


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeBackendError(f"/proc/self/status has no {key}; the resident size is measured on Linux only")


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError as exc:
        raise RuntimeBackendError(f"cannot reset the peak resident size ({exc.strerror}); onnxmem measures "
                                  "memory on Linux 4.0 and later") from None


def _machine_key(device: str) -> str:
    """Provider, onnxruntime version and machine (read without importing onnxruntime); and the
    custom op libraries the sessions register, each by name and size (their code and state are part
    of the fixed cost)."""
    from importlib.metadata import PackageNotFoundError, version

    from onnxmem.runtime.isolation import current_limits

    found = "unknown"
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            found = version(dist)
            break
        except PackageNotFoundError:
            continue
    libraries = "".join(f" + {os.path.basename(p)} {os.path.getsize(p)} B" for p in current_limits().custom_ops)
    return f"{device} onnxruntime {found} {platform.machine()} {os.cpu_count()} cpus {platform.node()}{libraries}"


def _tiny_model() -> bytes:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return bytes(model.SerializeToString())


def _measure_fixed(device: str) -> FixedCost:
    """In the child: steps 1 to 3 of the module docstring."""
    import numpy as np
    import onnxruntime as ort

    from onnxmem.runtime.isolation import available_memory

    if PROVIDERS[device] not in ort.get_available_providers():
        raise RuntimeBackendError(f"onnxruntime here has no {PROVIDERS[device]}; use --device cpu or install "
                                  "onnxruntime-gpu")
    start_run(f"a one-node session on {device} to measure its fixed cost")
    try:
        _reset_peak()
        baseline = _status("VmRSS")
        free_before = available_memory("cuda") if device == "cuda" else None
        # a default session, with the custom op libraries given loaded as the user's process loads them
        session = ort.InferenceSession(_tiny_model(), measuring_options(), providers=[PROVIDERS[device]])
        for _ in range(2):
            session.run(None, {"x": np.ones(1, np.float32)})
        grown = _status("VmHWM") - baseline
        if free_before is not None:
            free_after = available_memory("cuda")
            grown += max(0, free_before - (free_after or free_before))
        del session
    finally:
        end_run()
    return FixedCost(device, max(0, grown), baseline, _machine_key(device))


def _read_cache(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}
    try:
        # Python's parser: an entry of NaN or Infinity is an entry to measure again, not a file to refuse
        data = json.loads(read_input(path, "the fixed-cost cache", MAX_DATA_BYTES, OnnxmemError))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested past the parser
        data = None
    # every entry an object with a device, as fit writes them: another JSON file (a plan) is not rewritten
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "device" in v for v in data.values()):
        raise OnnxmemError(f"--cache {show_name(path)} is not a fixed-cost cache written by onnxmem fit; "
                           "give another path or remove the file")
    return data


def _cached(data: Mapping[str, Any], key: str) -> FixedCost | None:
    entry = data.get(key)
    if not isinstance(entry, dict):
        return None
    device = entry.get("device")
    # bytes as onnxmem writes them: not a float, a bool, Infinity or an absurd size
    sizes = [v for v in (entry.get("session"), entry.get("baseline")) if type(v) is int and 0 <= v < MAX_SIZE]
    if not isinstance(device, str) or len(sizes) != 2:
        return None
    return FixedCost(device, sizes[0], sizes[1], key)


def fixed_cost(device: str = "cpu", cache: str | os.PathLike[str] | None = None) -> FixedCost:
    """The fixed cost of ``device``'s provider here: kept from earlier in this process, read from
    ``cache`` (a JSON file the caller named; :func:`cache_text` gives its new text) or measured in
    the onnxruntime child."""
    if device not in PROVIDERS:
        raise OnnxmemError(f"device {show_name(device)} is not one of {', '.join(PROVIDERS)}; pick one")
    key = _machine_key(device)
    got = _memo.get(key) or (_cached(_read_cache(os.fspath(cache)), key) if cache is not None else None)
    if got is None:
        got = run_fresh(f"measuring the fixed cost of onnxruntime's {device} session", _measure_fixed, device)
    _memo[key] = got
    return got


def cache_text(cache: str | os.PathLike[str], cost: FixedCost) -> str:
    """The text of the cache file ``cache`` with ``cost`` in it (the other entries kept)."""
    data = _read_cache(os.fspath(cache))
    entry = {k: v for k, v in asdict(cost).items() if k != "key"}
    return json.dumps({**data, cost.key: entry}, indent=2, sort_keys=True) + "\n"


#: onnxruntime's BFC arena extension strategies (``arena_extend_strategy`` of ``OrtArenaCfg``)
ARENA_EXTEND = {"next-power-of-two": 0, "same-as-requested": 1}


def allocation_tracer() -> tuple[Any, Any] | None:
    """``(stats, reset_peak)`` of the allocation tracer preloaded in this process
    (``bench/alloc_trace.c``: ``stats(out)`` fills ``out[0]`` with the bytes held now and
    ``out[1]`` with their peak since ``reset_peak()``), or ``None`` where none is."""
    import ctypes

    try:
        here = ctypes.CDLL(None)
        return here.alloc_trace_stats, here.alloc_trace_reset_peak
    except (OSError, AttributeError):
        return None


def _start_tracing() -> tuple[tuple[Any, Any] | None, int]:
    """The allocation tracer (or ``None``) with its peak reset, and the bytes it holds now."""
    tracer = allocation_tracer()
    if tracer is not None:
        tracer[1]()
    return tracer, _traced(tracer)[0]


def _traced(tracer: tuple[Any, Any] | None) -> tuple[int, int]:
    """(held, peak) bytes of the allocation tracer; (0, 0) without one."""
    if tracer is None:
        return 0, 0
    import ctypes

    out = (ctypes.c_longlong * 3)()
    tracer[0](out)
    return int(out[0]), int(out[1])


def _feeds(path: str, shapes: Mapping[str, tuple[int, ...]], training: bool,
           given: Mapping[str, np.ndarray] | None = None, seed: int = 0) -> dict[str, Any]:
    """Seeded inputs of the model at ``path``: random ones of ``shapes`` (``given``: the values of
    some, as they are), or a training step's (:func:`onnxmem.runtime.training.training_feeds`:
    labels in range, buffers reset)."""
    from onnxmem.model import load_model
    from onnxmem.runtime.ort import random_inputs

    model = load_model(path)
    if not training:
        return random_inputs(model, shapes, seed, given)
    from onnxmem.graph import build_view
    from onnxmem.runtime.training import training_feeds
    from onnxmem.shapes import infer_shapes

    return training_feeds(model, build_view(model, infer_shapes(model, input_shapes=shapes or None)))


def measuring_options(*, level: str | None = None, mem_pattern: bool | None = None, arena: bool | None = None,
                      mem_reuse: bool | None = None, prepack: bool = True, arena_extend: str | None = None,
                      order: str | None = None) -> Any:
    """onnxruntime ``SessionOptions`` of a session measured as a user runs it: onnxruntime's
    defaults but the settings given (``None``: onnxruntime's default; the keywords as
    :func:`session_peak`'s; onnxmem's own sessions use :func:`onnxmem.runtime.settings.session_options`). ``arena_extend`` registers a process-wide CPU arena
    with that extension strategy (once per process: call it in a fresh child) and makes the
    session use it. Call it where onnxruntime is loaded (the child)."""
    import onnxruntime as ort

    from onnxmem.runtime.settings import own_settings, quiet
    from onnxmem.scheduling.onnxruntime import ORDERS

    options = ort.SessionOptions()
    quiet(options)  # fatal messages only, as in every session of onnxmem's own
    own_settings(options)  # the custom op libraries given, as the user's session registers them; no ort_config
    if order is not None:
        options.execution_order = getattr(ort.ExecutionOrder, ORDERS[order])
    if level is not None:
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if mem_pattern is not None:
        options.enable_mem_pattern = mem_pattern
    if arena is not None:
        options.enable_cpu_mem_arena = arena
    if mem_reuse is not None:
        options.enable_mem_reuse = mem_reuse
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    if arena_extend is not None:  # the process's own CPU arena, with that strategy (a fresh child: once)
        from onnxmem.runtime.settings import register_env_arena

        register_env_arena("cpu", ARENA_EXTEND[arena_extend])
        options.add_session_config_entry("session.use_env_allocators", "1")
    return options


#: the keywords of :func:`measuring_options`
_SETTINGS = frozenset(inspect.signature(measuring_options).parameters)


def _check_settings(arena_extend: str | None, order: str | None) -> None:
    from onnxmem.scheduling.onnxruntime import ORDERS

    if arena_extend is not None and arena_extend not in ARENA_EXTEND:
        raise OnnxmemError(f"arena extension {show_name(arena_extend)} is not one of {', '.join(ARENA_EXTEND)}")
    if order is not None and order not in ORDERS:
        raise OnnxmemError(f"execution order {show_name(order)} is not one of {', '.join(ORDERS)}")


def _measure_session(path: str, shapes: Mapping[str, tuple[int, ...]], level: str, runs: int,
                     mem_pattern: bool, arena: bool, prepack: bool = True,
                     arena_extend: str | None = None, training: bool = False, order: str = "default",
                     mem_reuse: bool = True, given: Mapping[str, np.ndarray] | None = None,
                     seed: int = 0) -> SessionPeak:
    import onnxruntime as ort

    from onnxmem.runtime.ort import first_line, run_bounded

    feeds = _feeds(path, shapes, training, given, seed) if runs else {}
    options = measuring_options(level=level, mem_pattern=mem_pattern, arena=arena, mem_reuse=mem_reuse,
                                prepack=prepack, arena_extend=arena_extend, order=order)
    start_run(f"a session of {show_name(path)} to measure its peak")
    try:
        _reset_peak()
        baseline = _status("VmRSS")
        try:
            session = ort.InferenceSession(path, options, providers=[PROVIDERS["cpu"]])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(f"onnxruntime cannot make a session of {show_name(path)}: "
                                      f"{first_line(exc)}") from None
        created = _status("VmHWM") - baseline
        held = _status("VmRSS") - baseline
        tracer, made = _start_tracing()
        after = []
        for _ in range(runs):
            run_bounded(session, None, feeds, "to measure its peak")
            after.append(_status("VmHWM") - baseline)
        requested = _traced(tracer)[1] - made if tracer is not None else None
        del session
    finally:
        end_run()
    return SessionPeak(created, after[-1] if after else created, baseline, tuple(after), held,
                       sum(int(v.nbytes) for v in feeds.values()), requested)


def session_peak(path: str | os.PathLike[str], shapes: Mapping[str, tuple[int, ...]], *,
                 level: str = "ORT_DISABLE_ALL", runs: int = 2, mem_pattern: bool = True,
                 arena: bool = True, prepack: bool = True, arena_extend: str | None = None,
                 training: bool = False, order: str = "default", mem_reuse: bool = True,
                 inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0) -> SessionPeak:
    """The resident growth of a CPU session of the model at ``path`` with seeded random inputs of
    ``shapes``, from before it is created to its peak over ``runs`` runs, in a fresh child.

    ``level``: a ``GraphOptimizationLevel`` name; ``mem_pattern``: onnxruntime's memory patterns,
    ``arena``: its CPU memory arena, ``prepack``: its kernels' prepacked weights (all on by default
    in onnxruntime; ``prepack=False`` sets ``session.disable_prepacking``); ``arena_extend``: a key of
    :data:`ARENA_EXTEND`, the session then uses a process-wide CPU arena made with that extension
    strategy (``None``: the session's own arena, ``next-power-of-two``); ``training``: feed a
    training step's inputs (labels in range, gradient buffers reset; the training runtime runs its
    kernels); ``order``: onnxruntime's execution order, a key of
    :data:`onnxmem.scheduling.onnxruntime.ORDERS` (``default`` or ``priority``); ``mem_reuse``:
    ``SessionOptions.enable_mem_reuse`` (on by default in onnxruntime): its allocation planner
    hands a dead value's buffer to a later output of the same shape, and the buffer stays held
    from the first value's death to that output's write (docs/remat.md, what onnxruntime
    allocates beyond the plan). ``inputs``: the values of some graph inputs, fed as they are (the
    others drawn with ``seed``)."""
    _check_settings(arena_extend, order)
    with run_limits():
        return run_fresh(f"measuring a session of {show_name(os.fspath(path))}", _measure_session, os.fspath(path),
                         dict(shapes), level, runs, mem_pattern, arena, prepack, arena_extend, training, order,
                         mem_reuse, dict(inputs or {}), seed)


@dataclass(frozen=True, slots=True)
class TrainingStepPeak:
    """onnxruntime-training's own step (bytes): the resident growth of a fresh process over its
    training steps, from after the checkpoint is loaded, the ``Module`` (and the ``Optimizer``)
    made and the inputs made (``baseline``) to the peak (``peak``); ``made``: what loading and
    making took (the resident growth, not its peak)."""

    peak: int
    baseline: int
    made: int
    #: the peak growth over the resident size before the checkpoint was loaded: loading, making
    #: the Module and the Optimizer, and every step (``max(made's peak, made + peak)``)
    whole: int = 0
    #: the peak growth over ``baseline`` after each step, in order (``steps[-1] == peak``)
    steps: tuple[int, ...] = ()
    #: the peak over the steps of the bytes onnxruntime's CPU allocator held beyond what it held
    #: once the Module was made, where the allocation tracer is preloaded (as
    #: :attr:`SessionPeak.requested`); ``None`` otherwise
    requested: int | None = None


def _measure_training_step(training: str, checkpoint: str, feeds: list[Any], optimizer: str | None, steps: int,
                           settings: Mapping[str, Any] | None) -> TrainingStepPeak:
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    from onnxmem.runtime.ort import first_line

    start_run(f"a training step of {show_name(training)} to measure its peak")
    try:
        _reset_peak()
        before = _status("VmRSS")
        try:
            options = None if settings is None else measuring_options(**settings)
            module = Module(training, CheckpointState.load_checkpoint(checkpoint), device="cpu",
                            session_options=options)
            step = Optimizer(optimizer, module).step if optimizer is not None else None
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(f"onnxruntime-training cannot make a Module of {show_name(training)}: "
                                      f"{first_line(exc)}") from None
        module.train()
        made_peak = _status("VmHWM") - before
        _reset_peak()
        baseline = _status("VmRSS")
        tracer, held = _start_tracing()
        after = []
        for _ in range(steps):
            module(*feeds)
            if step is not None:
                step()
            module.lazy_reset_grad()
            after.append(_status("VmHWM") - baseline)
        requested = _traced(tracer)[1] - held if tracer is not None else None
        del module
    finally:
        end_run()
    made = baseline - before
    return TrainingStepPeak(after[-1], baseline, made, max(made_peak, made + after[-1]), tuple(after), requested)


def training_step_peak(training: str | os.PathLike[str], checkpoint: str | os.PathLike[str],
                       feeds: list[Any], *, optimizer: str | os.PathLike[str] | None = None, steps: int = 1,
                       settings: Mapping[str, Any] | None = None) -> TrainingStepPeak:
    """onnxruntime-training's peak over ``steps`` training steps of ``training`` (a
    ``training_model.onnx`` with the ``checkpoint`` the generator wrote for it) on ``feeds`` (the
    user inputs, then the labels, as ``Module.__call__`` takes them), in a fresh child: the growth
    of its peak resident size (``VmHWM``) over its resident size once the ``Module`` is made
    (:class:`TrainingStepPeak`). A step is ``Module.__call__``, then ``Optimizer.step`` where
    ``optimizer`` names the generator's ``optimizer_model.onnx`` (its state is made with the
    Module), then ``lazy_reset_grad``. ``settings``: :func:`measuring_options`' keywords for the
    Module's ``session_options`` (``None``: onnxruntime's defaults, none passed). The first step
    peaks: onnxruntime's arena keeps what it allocates, so a later step of the same process grows
    by little. Needs onnxruntime-training."""
    if steps < 1:
        raise OnnxmemError(f"steps {steps}: give at least one training step to measure")
    unknown = sorted(set(settings or {}) - _SETTINGS)
    if unknown:
        raise OnnxmemError(f"session setting {show_name(unknown[0])} is not one of {', '.join(sorted(_SETTINGS))}")
    _check_settings((settings or {}).get("arena_extend"), (settings or {}).get("order"))
    with run_limits():
        return run_fresh(f"measuring a training step of {show_name(os.fspath(training))}", _measure_training_step,
                         os.fspath(training), os.fspath(checkpoint), list(feeds),
                         None if optimizer is None else os.fspath(optimizer), steps,
                         None if settings is None else dict(settings))
