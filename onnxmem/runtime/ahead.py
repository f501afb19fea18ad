"""Work an arena run can do on other cores while its nodes run one by one on this thread.

onnxruntime gives up Python's lock while it builds a session or runs one, so a thread of
its own runs either on another core. Where a core is spare (:func:`spare_core`):

- the reference of a run on the CPU, the model as a whole in pieces
  (:class:`onnxmem.runtime.arena.ArenaRun`, :class:`Beside`);
- where each node runs again as the reference (always on CUDA), the node sessions of the run,
  built on a pool of threads as its nodes run, a node waiting for its own session only
  (:class:`SessionsAhead`): on CUDA each builds its own CUDA provider, one of the run's largest
  costs; a session builds the same whatever the thread;
- there too, the ordinary whole-model run on the CPU that the graph outputs are compared with
  for information (:meth:`onnxmem.runtime.arena_steps.ArenaSteps.compare_outputs`), started
  with the run (:func:`ordinary_beside`): on CUDA the node runs on the device leave this
  thread mostly waiting for them.

Each gives what the same work done on this thread gives; only the wall time changes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar

import numpy as np
import onnx

import onnxmem.runtime.sessions as sessions
from onnxmem.graph import GraphView, Op
from onnxmem.runtime.isolation import StopToken, use_token

__all__ = ["Beside", "BUILD_THREADS", "SessionsAhead", "WARM_BYTES", "WARM_UP", "ordinary_beside", "ordinary_values",
           "spare_core", "wanted", "warm_feeds"]

T = TypeVar("T")

#: the most threads that build node sessions at once (:class:`SessionsAhead`)
BUILD_THREADS = 8
#: whether the sessions built ahead run once where their caller gives the values it knows
WARM_UP = True
#: the most bytes of made-up inputs a first run ahead is given (:func:`warm_feeds`)
WARM_BYTES = 16 << 20


def spare_core() -> bool:
    """Whether this process has a core that other work leaves idle, on average: it may run on more
    than one, and the load average of the last minute (this run's own thread counted) is below
    their number."""
    try:
        cores = len(os.sched_getaffinity(0))
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return False
    return cores > 1 and load < cores


def wanted(beside: bool | None) -> bool:
    """Whether a run works beside its nodes: as ``ExecutionOptions.beside`` says, else where a core
    is spare (:func:`spare_core`)."""
    return spare_core() if beside is None else beside


class Beside(threading.Thread, Generic[T]):
    """``work()`` on a thread of its own; :meth:`result` waits for its value (or raises its error);
    :meth:`cancel` stops its onnxruntime runs where its value is no longer wanted."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.work = work
        self.value: T | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.token = StopToken()

    def cancel(self) -> None:
        """Stop the work's onnxruntime run in progress and every later one (its error, if it then
        fails, is not raised by :meth:`join`); take no :meth:`result` after this."""
        self.token.stop()

    def run(self) -> None:
        t0 = time.perf_counter()
        use_token(self.token)
        try:
            self.value = self.work()
        except BaseException as exc:  # noqa: BLE001 - raised again on the main thread
            self.error = exc
        self.seconds = time.perf_counter() - t0

    def result(self) -> T:
        """The value of ``work()`` once it ends; its error raised here."""
        self.join()
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def warm_feeds(alone: sessions.Alone, op: Op, view: GraphView, shapes: Mapping[str, tuple[int, ...]],
               known: Callable[[str], Any]) -> dict[str, np.ndarray] | None:
    """The inputs of a first run of ``alone``'s session (:data:`WARM_UP`): each value ``known(name)``
    gives (a weight), else zeros of its shape in ``shapes`` (else the view's); ``None`` where a
    value is not numeric or they come to more than :data:`WARM_BYTES`."""
    feeds: dict[str, np.ndarray] = {}
    total = 0
    for name, (renamed, et, _) in zip(op.reads, alone.declared_in):
        value = known(name)
        if value is None:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(et)
            shape = shapes.get(name, view.tensors[name].shape)
            if dtype.kind not in "biufc" or not all(isinstance(d, int) for d in shape):
                return None
            total += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if total > WARM_BYTES:
                return None
            value = np.zeros(shape, dtype)
        feeds[renamed] = value
    return feeds


Job = tuple[bytes, sessions.Alone, Op, Mapping[str, tuple[int, ...]]]


class SessionsAhead:
    """The node sessions :func:`onnxmem.runtime.sessions.node_session` would build for ``items``
    (``(node, op, input shapes)`` in the order they run), built on ``threads`` threads while the
    nodes run: a node waits for its own session only (:meth:`take`), not for every one.

    Only sessions nodes alike share are built (:func:`~onnxmem.runtime.sessions.node_alone`), at
    most ``cache.limit`` of them where the cache has a limit, in the order the nodes run, while
    ``cache.room()`` says another fits. A session that fails to build is left to ``node_session``,
    which gives its stand-in or its error. ``alones``: each item's
    :class:`~onnxmem.runtime.sessions.Alone` put there by its op's index, for ``node_session`` to
    take (it is not made again when the node runs). ``known``: where given and :data:`WARM_UP`,
    each session built also runs once on :func:`warm_feeds`, its outputs dropped: a session's
    first run costs more than the next (on CUDA, 12 ms against 0.3 ms over swin_t_legacy's
    nodes), and that cost is paid here, beside the node runs.

    Only the caller's thread touches ``cache``. A run of a session here holds :attr:`runs`, and so
    must every node run of the caller's while these threads work: sessions on
    CUDA draw their scratch from one arena for the process, and a kernel's workspace freed before
    its stream has finished with it must not go to another stream's kernel meanwhile; a run holds
    the lock until it has synchronized. :meth:`close` ends the work (a build under way finishes)."""

    def __init__(self, model: onnx.ModelProto, items: Sequence[tuple[onnx.NodeProto, Op, Mapping[str, tuple[int, ...]]]],
                 view: GraphView, options: Any, providers: Sequence[Any], cache: Any, threads: int = BUILD_THREADS,
                 alones: dict[int, sessions.Alone] | None = None, known: Callable[[str], Any] | None = None) -> None:
        self.view, self.options, self.providers = view, options, list(providers)
        self.warm = known if WARM_UP else None
        self.runs = threading.Lock()
        self._stop = threading.Event()
        jobs: dict[Any, Job] = {}
        most = getattr(cache, "limit", len(items))
        for node, op, shapes in items:
            if len(jobs) >= most:
                break
            alone = sessions.node_alone(model, node, op, view, shapes, share=True)
            if alones is not None:
                alones[op.index] = alone
            if alone.key is not None and alone.key not in cache and alone.key not in jobs:
                jobs[alone.key] = (alone.serialized(model), alone, op, shapes)
        #: each key's session once built (``None``: not built here), in the order the nodes run, until taken
        self.futures: dict[Any, Future[Any]] = {key: Future() for key in jobs}
        self._feeder = threading.Thread(target=self._feed, args=(jobs, max(1, threads), getattr(cache, "room", None)),
                                        name="onnxmem-sessions", daemon=True)
        self._feeder.start()

    def _build(self, job: Job) -> Any:
        import onnxruntime as ort

        data, alone, op, shapes = job
        try:
            sess = ort.InferenceSession(data, sess_options=self.options, providers=self.providers)
        except Exception:  # noqa: BLE001 - node_session builds it again and reports what fails
            return None
        # the made-up inputs made here, on the pool: none held for the sessions not yet built
        feeds = warm_feeds(alone, op, self.view, shapes, self.warm) if self.warm is not None else None
        if feeds is not None and not self._stop.is_set():
            try:
                with self.runs:
                    sess.run(None, feeds)
            except Exception:  # noqa: BLE001 - a first run on made-up values may fail; the node's own is checked
                pass
        return sess

    def _feed(self, jobs: dict[Any, Job], threads: int, room: Callable[[], bool] | None) -> None:
        def build(key: Any, job: Job) -> None:
            sess = None
            try:
                sess = self._build(job)
            finally:  # whatever happens, the node waiting for it goes on
                self.futures[key].set_result(sess)

        try:
            with ThreadPoolExecutor(threads, thread_name_prefix="onnxmem-session") as pool:
                running: set[Future[Any]] = set()
                for key, job in jobs.items():
                    while len(running) >= threads:  # one starts as soon as one ends: no wave waits for its slowest
                        _, running = wait(running, return_when=FIRST_COMPLETED)
                    if self._stop.is_set() or (room is not None and not room()):
                        break
                    running.add(pool.submit(build, key, job))
        finally:  # the pool has ended: those not started are built by node_session, if needed
            for future in list(self.futures.values()):  # (the caller's thread takes them out meanwhile)
                if not future.done():
                    future.set_result(None)

    def take(self, key: Any, cache: Any) -> bool:
        """Put the session built here for ``key`` into ``cache``, once it is built, the first time
        it is asked for (after that ``cache`` has it, or has dropped it); whether it put one."""
        future = self.futures.get(key)
        if future is None:
            return False
        sess = future.result()
        del self.futures[key]  # held by the cache alone from now on: dropped from it, it is freed
        if sess is not None:
            cache[key] = sess
        return sess is not None

    def finish(self) -> None:
        """Wait for every build."""
        self._feeder.join()

    def close(self) -> None:
        """Start no more builds nor first runs; wait for those under way."""
        self._stop.set()
        self.finish()


def ordinary_beside(model: onnx.ModelProto, feeds: Mapping[str, Any], outputs: Sequence[str],
                    weights: Mapping[str, Any]) -> Beside[dict[str, Any]]:
    """The ordinary whole-model run of :func:`onnxmem.runtime.sessions.run_model`, started now on a
    thread of its own."""
    beside: Beside[dict[str, Any]] = Beside(
        lambda: sessions.run_model(model, feeds, outputs, weights=weights), "onnxmem-ordinary")
    beside.start()
    return beside


def ordinary_values(beside: Beside[dict[str, Any]] | None, wanted: bool,
                    run: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any] | None, float | None]:
    """``(the ordinary run's values, its seconds)``: those of ``beside`` where it was started (once it
    ends), else of ``run()`` now; ``(None, None)`` where they are not ``wanted`` (an op ran as its
    stand-in: onnxruntime has no kernel to run the model as a whole with)."""
    if not wanted:
        if beside is not None:
            beside.join()  # its values are not taken, nor its error: none left running on its own
        return None, None
    if beside is not None:
        return beside.result(), beside.seconds
    t0 = time.perf_counter()
    values = run()
    return values, time.perf_counter() - t0
