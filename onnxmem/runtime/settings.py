"""The settings of every onnxruntime session onnxmem makes, and what decides them.

onnxmem's sessions are set by onnxmem and by the user's flags, never by the model file:

* :func:`session_options`: optimizations off unless asked, one thread, fatal messages only;
  :func:`shared_arena`, :func:`register_env_arena`: one CPU or CUDA arena for the process;
* **custom op libraries**: a model with ops outside onnxruntime's own domains
  (``ai.onnx.contrib:Inverse`` of onnxruntime-extensions, a runtime author's ``my.ops:Fused``)
  runs only where the library implementing them is registered with each session
  (``SessionOptions.register_custom_ops_library``). The user names each one
  (``--custom-op-library PATH``, :func:`check_libraries`); every session then registers them
  (:func:`register_libraries`), in this process and in its onnxruntime child
  (:class:`onnxmem.runtime.isolation.RunLimits` carries them there). A library is native code
  run inside onnxmem's processes: it comes from the command line only, never from a model;
* **the model's own configuration is ignored**: where the environment sets
  ``ORT_LOAD_CONFIG_FROM_MODEL=1``, onnxruntime applies the session options a model's
  ``ort_config`` metadata holds (profiling on, which writes a profile file into the working
  folder; another optimization level; other threads). A model file is hostile data, and each
  figure onnxmem measures depends on its sessions' settings, so :func:`own_settings` removes the
  variable from the process's environment (and so from its children's) before a session is made.

Shape inference knows nothing of a custom op: its outputs are sized from the model's own
``value_info``, or measured by running the model with the library (``--measure-shapes``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from onnxmem.core.errors import RuntimeBackendError, cut_words, one_line, show_name
from onnxmem.core.fileio import check_input

__all__ = ["LOG_SEVERITY", "MODEL_CONFIG_VARIABLE", "check_libraries", "custom_op_fix", "own_settings", "quiet",
           "register_env_arena", "register_libraries", "session_options", "shared_arena"]

#: where this environment variable is "1", onnxruntime takes session options from a model's ``ort_config`` metadata
MODEL_CONFIG_VARIABLE = "ORT_LOAD_CONFIG_FROM_MODEL"


def own_settings(options: Any) -> None:
    """Make a session of ``options`` take onnxmem's settings alone: the model's ``ort_config``
    ignored (:data:`MODEL_CONFIG_VARIABLE` removed from the environment), the custom op libraries
    of the limits in force registered (:func:`register_libraries`)."""
    os.environ.pop(MODEL_CONFIG_VARIABLE, None)
    register_libraries(options)


#: onnxruntime log severity of every session onnxmem makes (4: fatal only)
LOG_SEVERITY = 4


def quiet(so: Any) -> None:
    """onnxruntime's log, for the whole process and for the session ``so`` configures: fatal
    messages only (:data:`LOG_SEVERITY`). onnxmem turns every onnxruntime failure into an
    exception that carries its message, so the library prints nothing: 3 (errors) would still
    print a failing kernel's status to stderr, and a warning names each initializer onnxruntime
    drops as the file spells it, colour codes included."""
    import onnxruntime as ort

    ort.set_default_logger_severity(LOG_SEVERITY)
    so.log_severity_level = LOG_SEVERITY


def session_options(optimize: bool = False, profile_prefix: str | None = None, *, memory_arena: bool = True) -> Any:
    """onnxmem's session options: optimizations off unless ``optimize``, one thread, none spinning,
    onnxruntime's logging only for fatal errors, the custom op libraries given registered and the
    model's own settings ignored (:func:`own_settings`). ``memory_arena=False``: the CPU provider allocates
    a kernel's scratch memory as it asks, with no arena of its own to set up (a session made for
    one node: most of the cost of making it)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    so.enable_cpu_mem_arena = memory_arena
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    quiet(so)
    own_settings(so)
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


#: by device, the growth strategy of the arena registered for the whole process (:func:`register_env_arena`)
_ENV_ARENAS: dict[str, int] = {}


def register_env_arena(device: str, extend_strategy: int) -> None:
    """Register one arena for the whole process on ``device`` (``"cpu"`` or ``"cuda"``, device 0),
    growing by ``extend_strategy`` (``arena_extend_strategy`` of ``OrtArenaCfg``: 0 doubles, 1
    as requested); a session draws from it where its options have
    ``session.use_env_allocators`` = 1. Once per process and device: again with the same strategy
    it does nothing, with another it raises ``RuntimeBackendError`` (onnxruntime keeps the first);
    raises what onnxruntime raises."""
    import onnxruntime as ort

    if device in _ENV_ARENAS:
        if _ENV_ARENAS[device] != extend_strategy:
            raise RuntimeBackendError(
                f"this process's onnxruntime {device} arena grows by strategy {_ENV_ARENAS[device]}, not "
                f"{extend_strategy}; measure in a fresh process")
        return
    name = "Cuda" if device == "cuda" else "Cpu"
    info = ort.OrtMemoryInfo(name, ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    config = ort.OrtArenaCfg({"arena_extend_strategy": extend_strategy})
    if device == "cuda":
        ort.create_and_register_allocator_v2("CUDAExecutionProvider", info, {"device_id": "0"}, config)
    else:
        ort.create_and_register_allocator(info, config)
    _ENV_ARENAS[device] = extend_strategy


#: by device, whether :func:`shared_arena` can draw from the process's arena (``False``: it cannot be registered)
_SHARED_ARENAS: dict[str, bool] = {}


def shared_arena(options: Any, device: str = "cpu") -> bool:
    """Make the sessions built with ``options`` draw their ``device`` memory from one arena for the
    whole process (:func:`register_env_arena`, growing by what each request needs, unless the
    process registered it otherwise) instead of an arena per session: memory one session freed is
    reused by the next one's tensors and scratch, not taken fresh from the system (a CUDA
    convolution's workspace; on the CPU, pages the kernel need not fault in and zero again).
    ``False`` where this onnxruntime cannot register one; the sessions then keep arenas of their own."""
    if device not in _SHARED_ARENAS:
        try:
            if device not in _ENV_ARENAS:
                register_env_arena(device, 1)  # growing by what is requested
            _SHARED_ARENAS[device] = True
        except Exception:  # noqa: BLE001 - an older onnxruntime, or one built without it
            _SHARED_ARENAS[device] = False
    if _SHARED_ARENAS[device]:
        options.add_session_config_entry("session.use_env_allocators", "1")
    return _SHARED_ARENAS[device]


#: the largest custom op library onnxmem hands to onnxruntime (onnxruntime-extensions' is 7 MB)
LIBRARY_LIMIT = 1 << 31

#: onnxruntime's message for an op of a domain no registry knows: ``domain:Op(version) is not a registered ...``
_UNREGISTERED = re.compile(r"([\w.\-]*):(\w+)\(-?\d+\) is not a registered function/op")


def check_libraries(paths: Iterable[str]) -> tuple[str, ...]:
    """The libraries ``paths`` names, each resolved to an absolute path (so onnxruntime loads that
    file, not one of the same name on the system's library path), once each; raises
    ``OnnxmemError`` in one line for a path that is no regular file (missing, a folder, a FIFO, a
    device) or larger than :data:`LIBRARY_LIMIT`."""
    resolved: list[str] = []
    for path in paths:
        check_input(path, "--custom-op-library file", LIBRARY_LIMIT)
        full = os.path.realpath(path)
        if full not in resolved:
            resolved.append(full)
    return tuple(resolved)


def register_libraries(options: Any, libraries: Sequence[str] | None = None) -> None:
    """Register each custom op library (``libraries``; by default those of the limits in force,
    :func:`onnxmem.runtime.isolation.current_limits`) with the onnxruntime ``SessionOptions``
    ``options``; raises ``RuntimeBackendError`` in one line for one onnxruntime cannot load."""
    if libraries is None:
        from onnxmem.runtime.isolation import current_limits

        libraries = current_limits().custom_ops
    for path in libraries:
        try:
            options.register_custom_ops_library(path)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise RuntimeBackendError(
                f"--custom-op-library {show_name(path)}: onnxruntime cannot load it "
                f"({cut_words(one_line(str(exc)), 400)}); "
                "give a shared library built for this machine with onnxruntime's custom op API") from None


def custom_op_fix(message: str, libraries: Sequence[str] | None = None) -> str:
    """What to do where onnxruntime's error ``message`` says it knows no op of a custom domain
    (``"; give the library ..."``); ``""`` for other errors and ops of onnxruntime's own domains.
    ``libraries``: those given (by default the limits' in force)."""
    from onnxmem.shapes.contrib import is_custom_domain

    m = _UNREGISTERED.search(message)
    if m is None or not is_custom_domain(m.group(1)):
        return ""
    if libraries is None:
        from onnxmem.runtime.isolation import current_limits

        libraries = current_limits().custom_ops
    op = show_name(f"{m.group(1)}:{m.group(2)}")
    if libraries:
        return (f"; none of the custom op libraries given registers {op} (--custom-op-library "
                f"{', '.join(show_name(p) for p in libraries)}): give the library that implements it")
    return (f"; {op} is a custom op: give the shared library that implements it for onnxruntime with "
            "--custom-op-library PATH")
