"""Every onnxruntime run over a model bounded in time and memory, in a child process.

onnxruntime runs whatever a model file asks for: a kernel may crash the process
(SIGSEGV, SIGABRT), allocate terabytes or loop for hours. So the work of a
command that runs onnxruntime (measuring shapes, folding weights, verifying a
plan, profiling onnxruntime's peak) goes to one child process per command
(:func:`run_isolated`; reused for every call of the command, forked from a command's
process that has loaded neither numpy nor onnxruntime, else spawned: :func:`start_method`):

1. the child limits its address space (``RLIMIT_AS``) to what it holds when it
   starts plus :attr:`RunLimits.memory` (default: the host memory available
   then), so an allocation past it fails in the child (a one-line error) instead
   of taking the machine. Not for CUDA: its driver maps far more address space
   than it uses.
2. each onnxruntime run in the child announces itself (:func:`start_run`; the
   arena run announces each node, :func:`at_step`) in memory the parent reads;
   a run stops itself at :attr:`RunLimits.seconds` (``RunOptions.terminate``,
   or the arena run's check between nodes), and the parent kills a child whose
   run is still going :data:`GRACE_SECONDS` later (a kernel that does not stop).
   Either way the error says ``... did not finish in N s; raise --time-limit``.
   The time limit is a safety bound: no figure depends on it.
3. a child that dies becomes one line naming the signal and the run it was in:
   ``onnxruntime crashed (SIGSEGV) during the run of the model to measure
   shapes; ...``, and the command exits 1. The next call starts a new child.
4. Ctrl-C is the parent's: the child ignores SIGINT (it prints nothing), and the parent,
   interrupted, stops the child before its own ``with`` blocks unwind (nothing writes into
   a temporary folder being removed).

``OnnxmemError`` raised in the child is raised again in the parent as it was;
any other exception is a bug in onnxmem and is raised as ``RuntimeError`` with
the child's traceback. :func:`run_limits` sets the limits of the calls made
inside it (the CLI's ``--time-limit``) and ends the child when it exits.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import importlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from onnxmem.core.classcode import compiled_once
from onnxmem.core.errors import OnnxmemError, RuntimeBackendError, one_line

__all__ = [
    "FORK_UNSAFE",
    "GRACE_SECONDS",
    "RUN_SECONDS",
    "RunLimits",
    "StopToken",
    "TimeLimitExceeded",
    "at_step",
    "available_memory",
    "cuda_memory",
    "cuda_runtime",
    "end_child",
    "loaded_libraries",
    "current_limits",
    "die_with_parent",
    "end_run",
    "run_isolated",
    "run_limits",
    "seconds_left",
    "start_method",
    "start_run",
    "thread_token",
    "timed_out",
    "use_token",
]

T = TypeVar("T")

#: seconds each onnxruntime run may take unless ``--time-limit`` says otherwise: a safety
#: bound past which the run is stopped with a one-line error, never part of a result
RUN_SECONDS = 600.0
#: seconds a run past its time limit has to stop by itself before its child is killed
GRACE_SECONDS = 5.0
#: modules a child loads as it starts (onnxruntime, and onnxmem's modules that run it)
WARM_MODULES = ("onnxruntime", "onnxmem.runtime.arena", "onnxmem.runtime.peak")
#: bytes of the label a child publishes (longer labels are cut)
_LABEL_BYTES = 1024


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The bounds of onnxruntime runs, and what their sessions load. ``seconds``: each run
    (``--time-limit``); ``memory``: bytes of address space a child may add to what it holds at its
    start (``None``: the host memory available then); ``address_space``: whether to limit it at all
    (not for CUDA); ``isolate``: run in a child process (else in this one, with the time limit
    only); ``custom_ops``: the custom op libraries every session registers, absolute paths
    (``--custom-op-library``, :mod:`onnxmem.runtime.settings`)."""

    seconds: float = RUN_SECONDS
    memory: int | None = None
    address_space: bool = True
    isolate: bool = True
    custom_ops: tuple[str, ...] = ()


_limits = RunLimits()
#: the runs in progress, innermost last (a run may start inside another: the arena run
#: computes a body's weights): what each is and when it started (``time.monotonic``)
_runs: list[tuple[str, float]] = []
#: in a child: the shared label and start time its parent reads
_shared: tuple[Any, Any] | None = None


def current_limits() -> RunLimits:
    """The limits in force (:func:`run_limits`)."""
    return _limits


@contextmanager
def run_limits(*, prestart: bool = False, warm: str | None = None, **changes: Any) -> Iterator[RunLimits]:
    """The limits of the runs made inside (``seconds=``, ``memory=``, ``address_space=``,
    ``isolate=``, ``custom_ops=``), as :class:`RunLimits` fields; the child, if one was started, ends on exit.
    ``prestart``: start the child now, so that it loads onnxruntime while this process
    reads and plans the model; ``warm``: the device the child then sets up for the runs' node
    sessions (:func:`onnxmem.runtime.sessions.warm_device`; on CUDA its context and libraries),
    also while this process plans."""
    global _limits, _worker
    before = _limits
    _limits = dataclasses.replace(before, **changes)
    if not _limits.seconds > 0:
        _limits = before
        raise OnnxmemError(f"--time-limit {changes.get('seconds')!r}: give a number of seconds above 0")
    if prestart and _limits.isolate and _shared is None and _worker is None and not _daemonic():
        _worker = _Worker(_limits, warm)
    try:
        yield _limits
    finally:
        _limits = before
        if _shared is None:
            _stop_worker()


class TimeLimitExceeded(RuntimeBackendError):
    """An onnxruntime run went past its time limit (``--time-limit``)."""


def timed_out(what: str, seconds: float) -> TimeLimitExceeded:
    """The error of a run that went past its time limit."""
    return TimeLimitExceeded(
        f"{what} did not finish in {seconds:g} s and was stopped; raise --time-limit (or give smaller "
        "input shapes: --input-shape, --dim)"
    )


def _publish(label: str, started: float | None) -> None:
    if _shared is not None:
        _shared[0].value = label.encode("utf-8", "backslashreplace")[: _LABEL_BYTES - 1]
        if started is not None:
            _shared[1].value = started


def start_run(what: str) -> None:
    """A bounded run begins (until its :func:`end_run`): its time counts from now; ``what``
    names it in a crash or time-out message. A run on a thread other than the main one is not
    announced: the main thread's run that waits for it names it and bounds it."""
    if not _on_main_thread():
        return
    now = time.monotonic()
    _runs.append((what, now))
    _publish(what, now)


def at_step(where: str) -> None:
    """The run in progress goes on at ``where`` (a node); raises its time-out once past the limit."""
    if not _runs:
        return
    what, started = _runs[-1]
    _publish(f"{what}, at {where}", None)
    if time.monotonic() - started > _limits.seconds:
        raise timed_out(what, _limits.seconds)


class StopToken:
    """Stops the onnxruntime runs of one thread from another (:func:`use_token` on that thread):
    :meth:`stop` ends the run in progress (``RunOptions.terminate``) and any that thread starts
    later, whose error then says it was stopped. A run beside the arena run whose values are no
    longer wanted is stopped so, rather than waited for: it may never end (a Loop of billions of
    iterations) before the time limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._options: Any = None
        self.stopped = False

    def stop(self) -> None:
        """Stop the thread's run in progress and every later one."""
        with self._lock:
            self.stopped = True
            if self._options is not None:
                self._options.terminate = True

    def attach(self, options: Any) -> None:
        """A run with these ``RunOptions`` starts on the thread (stopped at once where :meth:`stop` came first)."""
        with self._lock:
            self._options = options
            if self.stopped:
                options.terminate = True

    def detach(self) -> None:
        """The thread's run has ended."""
        with self._lock:
            self._options = None


_tokens = threading.local()


def use_token(token: StopToken | None) -> None:
    """The onnxruntime runs of this thread stop when ``token`` says (``None``: none stops them)."""
    _tokens.token = token


def thread_token() -> StopToken | None:
    """The :class:`StopToken` of this thread's runs, if one was given (:func:`use_token`)."""
    return getattr(_tokens, "token", None)


def seconds_left() -> tuple[float, float] | None:
    """``(seconds left, the limit)`` of the innermost run in progress on this thread's process
    (:func:`start_run`), ``None`` where none is."""
    if not _runs:
        return None
    return _limits.seconds - (time.monotonic() - _runs[-1][1]), _limits.seconds


def end_run() -> None:
    """The innermost run in progress is over; the one around it, if any, goes on."""
    if not _on_main_thread():
        return
    what, _ = _runs.pop() if _runs else ("", 0.0)
    if _runs:
        _publish(*_runs[-1])
    else:
        _publish(f"onnxmem's own work after {what}" if what else "onnxmem's own work", 0.0)


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


#: modules whose state a forked child must not share (their native threads and allocators):
#: where this process has loaded one, the child is spawned
FORK_UNSAFE = ("numpy", "onnx", "onnxruntime", "torch")


def start_method() -> str:
    """How the child starts: ``fork`` on Linux where this process runs one thread and has loaded
    none of :data:`FORK_UNSAFE` (a command's process, before its work: the child starts from a
    copy of it, without a second interpreter's start-up and imports); else ``spawn`` (a fresh
    interpreter)."""
    import sys

    if (sys.platform.startswith("linux") and threading.active_count() == 1
            and not any(m in sys.modules for m in FORK_UNSAFE)):
        return "fork"
    return "spawn"


class _Worker:
    """The child process of one command, and the parent's end of its pipe."""

    def __init__(self, limits: RunLimits, warm: str | None = None) -> None:
        import multiprocessing as mp

        self.method = start_method()
        ctx: Any = mp.get_context(self.method)  # a fork or spawn context alike
        self.limits = limits
        self.label = ctx.Array("c", _LABEL_BYTES, lock=False)
        self.started = ctx.Value("d", 0.0, lock=False)
        self.conn, child_end = ctx.Pipe()
        # the child's temporary files (onnxruntime's profiles, its own) go in a folder of the parent's,
        # removed when the child is stopped: a child killed (Ctrl-C, its time out) unwinds nothing itself
        import tempfile

        self.tmp = tempfile.mkdtemp(prefix="onnxmem-child-")
        self.proc = ctx.Process(target=_serve, args=(child_end, self.label, self.started, limits, self.tmp, warm),
                                name="onnxmem-onnxruntime", daemon=True)
        self.proc.start()
        child_end.close()

    def call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
        self.label.value, self.started.value = b"onnxmem's own work", 0.0
        try:
            self.conn.send((fn, args, kwargs, _limits.seconds))
        except OSError:  # the child is gone already
            raise self._died() from None
        while True:
            if self.conn.poll(0.2):
                try:
                    kind, value = self.conn.recv()
                except (EOFError, OSError):
                    raise self._died() from None
                if kind == "ok":
                    return value  # type: ignore[no-any-return]
                if kind == "error":
                    raise value
                raise RuntimeError(f"onnxmem failed in its onnxruntime child process:\n{value}")
            if not self.proc.is_alive():
                raise self._died()
            started = float(self.started.value)
            if started and time.monotonic() - started > _limits.seconds + GRACE_SECONDS:
                what = self._label()
                self.stop()
                raise timed_out(what, _limits.seconds)

    def _label(self) -> str:
        return one_line(bytes(self.label.value).decode("utf-8", "backslashreplace"))

    def _died(self) -> RuntimeBackendError:
        self.proc.join(5)
        code = self.proc.exitcode
        what = self._label()
        self.stop()
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            if -code == getattr(signal, "SIGBUS", None):  # a mapped file shorter than its map
                return RuntimeBackendError(f"onnxruntime crashed ({name}) during {what} (a file it had mapped, "
                                           "such as the model's data file, was cut short while it ran?); leave "
                                           "the model's files as they are while onnxmem runs, and run it again")
            hint = ("killed: out of memory?" if -code == signal.SIGKILL
                    else "the model asks onnxruntime for something it cannot do")
            return RuntimeBackendError(f"onnxruntime crashed ({name}) during {what} ({hint}); this model cannot "
                                       "be run by this onnxruntime: fix or re-export it, or try another version")
        return RuntimeBackendError(f"the onnxruntime child process ended with exit code {code} during {what}")

    def stop(self) -> None:
        import shutil

        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


_worker: _Worker | None = None


def _stop_worker() -> None:
    global _worker
    if _worker is not None:
        _worker.stop()
        _worker = None


atexit.register(_stop_worker)


def end_child() -> None:
    """End this command's child now, if it runs; the next run starts a fresh one."""
    _stop_worker()


def run_isolated(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in this command's child process, under the limits in force.

    ``fn`` must be a module-level function; its arguments and result travel by pickle.
    In the child itself, with ``isolate=False``, or in a daemonic process (a pool's worker,
    which multiprocessing forbids to have children; its parent watches it), it runs here
    under the time limit alone.
    """
    global _worker
    if _shared is not None or not _limits.isolate or _daemonic():
        return fn(*args, **kwargs)
    wanted = dataclasses.replace(_limits, seconds=0.0)
    if _worker is not None and (not _worker.proc.is_alive()
                                or dataclasses.replace(_worker.limits, seconds=0.0) != wanted):
        _stop_worker()
    if _worker is None:
        _worker = _Worker(_limits)
    worker = _worker
    try:
        return worker.call(fn, args, kwargs)
    except (OnnxmemError, RuntimeError):
        if not worker.proc.is_alive():  # it crashed or was stopped; the next call starts another
            _worker = None
        raise
    except BaseException:  # interrupted (Ctrl-C): the child may be mid-call, so it goes
        _stop_worker()
        raise


def run_fresh(what: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a child process started for it, for a measurement of the
    resident memory onnxruntime takes (``what`` names it). The first session a process makes also
    sets up onnxruntime's environment (8.7 MB resident on CPU, none of it again for a second
    session), and a heap left by earlier work is reused without new pages; in any process but a
    fresh one the figure would come out too small, silently. So where no child can be started
    for it (this is the child, ``isolate=False``, or a daemonic process such as a pool's worker,
    which may not start one), this raises ``RuntimeBackendError`` instead of measuring here."""
    if _shared is not None or not _limits.isolate or _daemonic():
        where = ("an onnxmem onnxruntime child" if _shared is not None else "runs kept in this process "
                 "(isolate=False)" if not _limits.isolate else "a daemonic process (a pool's worker)")
        raise RuntimeBackendError(f"{what} needs a fresh process, and {where} cannot start one; measure it "
                                  "from a command or a process of its own")
    _stop_worker()  # a fresh child: no environment or heap left over from an earlier run
    return run_isolated(fn, *args, **kwargs)


def available_memory(device: str = "cpu") -> int | None:
    """Bytes that can be allocated now on ``device``; ``None`` when this machine does not say.

    Host: ``MemAvailable`` of ``/proc/meminfo``, else the free physical pages
    (``os.sysconf``). CUDA: the free memory of device 0 (``cudaMemGetInfo``).
    """
    if device == "cuda":
        got = cuda_memory()
        return None if got is None else got[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key == "MemAvailable":
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


@functools.cache
def cuda_runtime() -> Any:
    """The CUDA runtime library (``ctypes.CDLL``): the one this process has loaded already (onnxruntime's
    CUDA provider, from wherever it found it), else the first the loader finds; ``None`` where none
    loads."""
    import ctypes

    for lib in (*loaded_libraries("libcudart.so"), "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                "libcudart.so.11.0"):
        try:
            return ctypes.CDLL(lib)
        except OSError:
            continue
    return None


def loaded_libraries(prefix: str) -> list[str]:
    """The paths of the shared libraries this process has mapped whose file names start with
    ``prefix``, in the order the system lists them; none where it does not say (``/proc``)."""
    found: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(maxsplit=5)
                path = parts[5] if len(parts) == 6 else ""
                if path.startswith("/") and os.path.basename(path).startswith(prefix) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def cuda_memory() -> tuple[int, int] | None:
    """``(free, total)`` bytes of CUDA device 0 (``cudaMemGetInfo``); ``None`` where no CUDA runtime
    answers."""
    import ctypes

    cudart = cuda_runtime()
    if cudart is None:
        return None
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if cudart.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) != 0:
        return None
    return int(free.value), int(total.value)


def _daemonic() -> bool:
    import multiprocessing as mp

    return bool(mp.current_process().daemon)


def _limit_address_space(extra: int | None) -> None:
    import resource

    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/statm", encoding="ascii") as fh:
        held = int(fh.read().split()[0]) * page
    room = extra if extra is not None else available_memory("cpu")
    if room is not None:
        # within a limit the parent's own environment set (ulimit -v): a hard limit cannot be raised
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = held + room if hard == resource.RLIM_INFINITY else min(held + room, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def die_with_parent() -> None:
    """Ask Linux to kill this child when its parent dies (a parent killed at its own time limit)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _serve(conn: Any, label: Any, started: Any, limits: RunLimits, tmp: str, warm: str | None = None) -> None:
    """The child's loop: limit its memory, load onnxruntime (and set up the device ``warm`` names),
    then run each call it is sent until its pipe closes. Ctrl-C is the parent's to handle (it stops
    this child): the child ignores SIGINT, so it prints no traceback of its own. Its temporary files
    go in ``tmp``, the parent's to remove."""
    global _shared, _limits
    import tempfile
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tempfile.tempdir = os.environ["TMPDIR"] = tmp
    _shared, _limits = (label, started), limits
    die_with_parent()
    if limits.address_space:
        _limit_address_space(limits.memory)
    with compiled_once():  # a spawned child makes the dataclasses of what it loads from the store
        for name in WARM_MODULES:  # loaded while the parent reads and plans, not when the first call comes
            importlib.import_module(name)
        warming = None
        if warm is not None:  # on a thread: a device that hangs as it starts holds up no call past its time limit
            warming = threading.Thread(target=importlib.import_module("onnxmem.runtime.sessions").warm_device,
                                       args=(warm,), name="onnxmem-warm", daemon=True)
            warming.start()
        while True:
            try:
                fn, args, kwargs, seconds = conn.recv()
            except (EOFError, OSError):
                return
            if warming is not None:  # the call runs once the device is set up (or its time limit has passed)
                warming.join(seconds)
                warming = None
            _limits = dataclasses.replace(limits, seconds=seconds)
            try:
                reply: tuple[str, Any] = ("ok", fn(*args, **kwargs))
            except OnnxmemError as exc:
                reply = ("error", exc)
            except MemoryError:
                reply = ("error", RuntimeBackendError(
                    f"onnxmem ran out of memory during {_label_of(label)} (its onnxruntime process may use the "
                    "host memory that was available when it started); give smaller input shapes (--input-shape, --dim)"))
            except Exception:  # noqa: BLE001 - a bug in onnxmem: its traceback goes to the parent
                reply = ("bug", traceback.format_exc())
            _runs.clear()
            _publish("onnxmem's own work", 0.0)
            try:
                conn.send(reply)
            except Exception:  # noqa: BLE001 - a result that cannot be pickled is a bug too
                conn.send(("bug", traceback.format_exc()))


def _label_of(label: Any) -> str:
    return one_line(bytes(label.value).decode("utf-8", "backslashreplace"))
