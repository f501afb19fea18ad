"""The zoo job: plan (and verify) each model of a zoo, each in a child process under a time
limit, and hand each result on as it comes.

Executors (``EXECUTORS``):

- ``local``: a fresh process per model, ``jobs`` at a time; a fresh process also returns
  each model's memory to the system.
- ``inline``: one model at a time, each in a fresh child process, so that the time limit can
  stop it; with no limit (``model_timeout`` 0 or None) the models run in the calling process,
  one after another (for a debugger).
- ``ray``: tasks on a Ray cluster (``RAY_ADDRESS``, or a local one of ``jobs`` CPUs started
  for the run, its files in a temporary folder removed at the end); each task runs its model in
  a child process under the same limit.

Each result records the process that ran its model (``worker``, ``host:pid``): the fresh
process of ``local`` and ``inline``, the Ray worker process of ``ray``.

A model that fails is a result with its error; one that crashes its process is ``failed``
with the signal; one that runs past ``model_timeout`` seconds (``DEFAULT_MODEL_TIMEOUT``
unless told otherwise) is stopped and reported as ``timeout``. Either way the job goes on
with the next model.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from onnxmem.core.errors import OnnxmemError, PlanInvalid, show_name
from onnxmem.core.fileio import remove_temporaries
from onnxmem.runtime.arena import DEVICES as VERIFY_DEVICES
from onnxmem.runtime.isolation import RUN_SECONDS, die_with_parent, run_limits
from onnxmem.zoo.catalog import ZooModel
from onnxmem.zoo.fixtures import materialize
from onnxmem.zoo.results import ZooResult
from onnxmem.zoo.settings import DEFAULT_MODEL_TIMEOUT, EXECUTORS

__all__ = [
    "DEFAULT_MODEL_TIMEOUT",
    "EXECUTORS",
    "VERIFY_DEVICES",
    "ZooOptions",
    "check_zoo_run",
    "ray_settings",
    "run_limited",
    "run_model",
    "run_zoo",
    "verify_and_measure",
]

#: the object store of a local Ray cluster started for a run (results and models are small)
RAY_OBJECT_STORE_BYTES = 128 * 2**20

Callback = Callable[[ZooResult], None]


@dataclass(frozen=True, slots=True)
class ZooOptions:
    """How to run a zoo. ``plan.dims`` and ``plan.input_shapes`` override each model's own."""

    plan: Any = None  # onnxmem.planning.pipeline.PlanOptions; None means its defaults
    verify: str | None = None  # None, "cpu" or "cuda"
    jobs: int = 1
    executor: str = "local"
    work_dir: Path | None = None  # runnable copies of weight-free models, plans
    model_timeout: float | None = DEFAULT_MODEL_TIMEOUT  # seconds per model; 0/None: no limit
    seed: int = 0
    time_limit: float = RUN_SECONDS  # seconds each onnxruntime run may take (onnxmem.runtime.isolation)
    custom_ops: tuple[str, ...] = ()  # custom op libraries every session registers (onnxmem.runtime.settings)


#: what runs one model: a top-level function (child processes import it by name)
Task = Callable[[ZooModel, ZooOptions], ZooResult]


def run_model(model: ZooModel, options: ZooOptions) -> ZooResult:
    """Plan (and verify) one model; every error becomes a result, none escapes. Its
    onnxruntime runs (measuring shapes, verifying) are bounded by ``options.time_limit``
    and happen in one child process (:mod:`onnxmem.runtime.isolation`)."""
    with run_limits(seconds=options.time_limit, address_space=options.verify != "cuda", custom_ops=options.custom_ops):
        return _plan_and_verify(model, options)


def _plan_and_verify(model: ZooModel, options: ZooOptions) -> ZooResult:
    from onnxmem.planning.pipeline import PlanOptions, plan_optimized
    from onnxmem.plans.point import write_plan
    from onnxmem.runtime.optimize import optimized_model

    start = time.perf_counter()
    base = options.plan or PlanOptions()
    dims = {**model.dims, **dict(base.dims)}
    shapes = {**model.input_shapes, **dict(base.input_shapes)}
    own = model.options
    # one set of --dim bindings serves many models: each binds the names it declares
    opts = replace(base, dims=dims, input_shapes=shapes, strict_dims=False,
                   measure_shapes=base.measure_shapes or own.measure_shapes,
                   branches={**own.branches, **dict(base.branches)},
                   max_trips=base.max_trips if base.max_trips is not None else own.max_trips,
                   inputs=own.values or base.inputs)
    work = Path(options.work_dir) if options.work_dir else None
    partial: dict[str, Any] = {"options": own.describe()}
    stage = "plan"
    try:
        path = model.path
        if options.verify or opts.optimize != "none":
            stage = "fill weights"  # onnxruntime reads the weights to run or to optimize
            path = materialize(path, (work or Path(".")) / "models", seed=options.seed, name=model.name)
        stage = "plan" if opts.optimize == "none" else "optimize"
        with optimized_model(path, opts.optimize, options.verify or opts.device) as built:
            stage = "plan"
            planned = plan_optimized(built, opts)
            partial.update(_plan_figures(planned.plan))
            if work is not None:
                (work / "plans").mkdir(parents=True, exist_ok=True)
                plan_file = work / "plans" / f"{model.name}.json"
                write_plan(planned.plan, plan_file)
                partial["plan_file"] = str(plan_file)
            if options.verify:
                stage = "verify"
                verdict, detail, peak = verify_and_measure(planned, built.path, options.verify, options.seed,
                                                           inputs=opts.inputs)
                partial.update(verify=verdict, verify_detail=detail, ort_peak=peak)
                status = "ok" if verdict == "pass" else "wrong"
                return ZooResult(model.name, str(model.path), status, None if status == "ok" else detail,
                                 dims, shapes, seconds=time.perf_counter() - start, **partial)
        return ZooResult(model.name, str(model.path), "ok", None, dims, shapes,
                         seconds=time.perf_counter() - start, **partial)
    except PlanInvalid as exc:
        if stage == "verify":
            partial.update(verify="FAIL", verify_detail=str(exc))
        return ZooResult(model.name, str(model.path), "wrong", str(exc), dims, shapes,
                         seconds=time.perf_counter() - start, **partial)
    except OnnxmemError as exc:
        if stage == "verify":
            partial.update(verify="error", verify_detail=str(exc))
        return ZooResult(model.name, str(model.path), "failed", f"{stage}: {exc}", dims, shapes,
                         seconds=time.perf_counter() - start, **partial)
    except Exception as exc:  # a bug in onnxmem: keep the traceback's last frames
        tb = traceback.format_exc(limit=-3).strip().splitlines()
        where = next((ln.strip() for ln in reversed(tb) if ln.strip().startswith("File ")), "")
        if stage == "verify":
            partial.update(verify="error", verify_detail=f"{type(exc).__name__}: {exc}")
        return ZooResult(model.name, str(model.path), "failed",
                         f"{stage}: internal error {type(exc).__name__}: {exc} ({where})",
                         dims, shapes,
                         seconds=time.perf_counter() - start, **partial)


def _plan_figures(plan: Any) -> dict[str, Any]:
    """The figures of a plan a zoo result records."""
    return {
        "nodes": len(plan.order),
        "tensors": len(plan.tensors),
        "weights_size": plan.weights_size,
        "naive_size": plan.naive_size,
        "lower_bound": plan.lower_bound,
        "arena_size": plan.arena_size,
        "plan_seconds": plan.plan_seconds,
        "solver": plan.solver.get("name"),
        "solver_status": plan.solver.get("status"),
        "order": plan.order_strategy,
        "warnings": len(plan.warnings),
    }


def verify_and_measure(planned: Any, path: Path, device: str, seed: int,
                       inputs: Mapping[str, Any] | None = None) -> tuple[str, str, int | None]:
    """Prove the plan and execute it in one arena (``onnxmem.verify.run``), then measure
    onnxruntime's own peak on the same graph (``onnxmem.runtime.peak``, optimizations off).

    Returns ``(verdict, detail, onnxruntime_peak_bytes)``; verdict is ``pass`` or ``FAIL``.
    The peak is counted over the tensors the arena holds
    (:func:`onnxmem.runtime.peak.comparable_peak`: plus graph inputs for ``--io
    internal``). A peak that cannot be measured is ``None`` and said in ``detail``.
    ``planned``: an :class:`onnxmem.planning.pipeline.Planned` (its view is the one verified);
    ``inputs``: values for some graph inputs (the others seeded random).
    """
    from onnxmem.runtime.peak import comparable_peak, ort_peak
    from onnxmem.verify import run as verify

    report = verify.verify_plan(planned.model, planned.plan, model_path=path, view=planned.view,
                                options=verify.VerifyOptions(device=device, seed=seed, inputs=inputs))
    if report.ok:
        run = report.execution
        verdict = "pass"
        detail = "static proof holds"
        if run is not None:
            handed = f" ({run.nodes_handed} more written from the reference)" if run.nodes_handed else ""
            detail = f"{run.nodes_run} nodes run in the arena on {run.device}{handed}, outputs match"
    else:
        first = report.first
        verdict = "FAIL"
        detail = f"{first.kind}: {first}" if first is not None else "failed"
    try:
        measured = ort_peak(planned.model, planned.view, level="disable", device=device,
                            model_path=path, seed=seed, inputs=inputs)
        # counted over the same tensors as the arena (graph inputs in or out, as planned)
        peak = comparable_peak(measured.peak, planned.view, planned.plan.io)
        if peak is None:
            detail += f"; onnxruntime peak not available: {measured.note}"
    except OnnxmemError as exc:
        peak = None
        detail += f"; onnxruntime peak not measured: {exc}"
    return verdict, detail, peak


def run_zoo(models: Sequence[ZooModel], options: ZooOptions,
            on_result: Callback | None = None, task: Task = run_model) -> list[ZooResult]:
    """Run ``task`` (``run_model``) on every model with the executor of ``options``.

    Results come back in the order of ``models``; ``on_result`` sees each as it ends.
    """
    check_zoo_run(models, options)
    if options.work_dir is not None:
        try:
            Path(options.work_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OnnxmemError(f"--out {show_name(str(options.work_dir))}: {exc.strerror}; give a folder "
                               "path") from None
    notify = on_result or (lambda _r: None)
    if options.executor == "ray":
        return _run_ray(models, options, notify, task)
    if options.executor == "inline":
        if not options.model_timeout:
            results = []
            for m in models:
                results.append(replace(task(m, options), worker=_worker_name()))
                notify(results[-1])
            return results
        return _run_in_processes(models, options, notify, task, jobs=1)
    return _run_in_processes(models, options, notify, task, jobs=options.jobs)


def _worker_name() -> str:
    """This process, as a result records it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _child(task: Task, model: ZooModel, options: ZooOptions, conn: Any) -> None:
    die_with_parent()  # a run killed outright (SIGTERM, SIGKILL) leaves no model running on
    conn.send(replace(task(model, options), worker=_worker_name()))
    conn.close()


def _run_in_processes(models: Sequence[ZooModel], options: ZooOptions, notify: Callback,
                      task: Task, jobs: int) -> list[ZooResult]:
    """One fresh (spawned) process per model, ``jobs`` at a time.

    A model whose process dies (a segfault, the OOM killer) is ``failed``; one that runs past
    ``options.model_timeout`` is killed and ``timeout``. If this function is interrupted, the
    processes still running are killed.
    """
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    limit = options.model_timeout or None
    pending = list(enumerate(models))
    running: dict[int, tuple[Any, Any, float]] = {}
    results: list[ZooResult | None] = [None] * len(models)
    try:
        while pending or running:
            while pending and len(running) < jobs:
                i, m = pending.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(task, m, options, send),
                                   name=f"zoo-{m.name}")
                proc.start()
                send.close()
                running[i] = (proc, recv, time.monotonic())
            now = time.monotonic()
            slack = min((began + limit - now for _, _, began in running.values()), default=1.0) \
                if limit else 1.0
            wait([r for _, r, _ in running.values()] + [p.sentinel for p, _, _ in running.values()],
                 timeout=max(0.0, min(1.0, slack)))
            for i, (proc, recv, began) in list(running.items()):
                result = _collect(models[i], proc, recv, time.monotonic() - began, limit)
                if result is not None:
                    proc.join(5)
                    recv.close()
                    del running[i]
                    if result.status in ("timeout", "failed"):
                        _sweep(options, proc.pid)
                    results[i] = result
                    notify(result)
    finally:
        for proc, recv, _ in running.values():
            proc.kill()
            proc.join(5)
            recv.close()
            _sweep(options, proc.pid)
    return [r for r in results if r is not None]


def _sweep(options: ZooOptions, pid: int | None) -> None:
    """The temporary files a model's process left in ``--out`` when it was stopped (its time
    ran out, it died, the run was interrupted) while it wrote its plan or its runnable copy."""
    if options.work_dir and pid is not None:
        for folder in ("plans", "models"):
            remove_temporaries(Path(options.work_dir) / folder, pid)


def _collect(m: ZooModel, proc: Any, recv: Any, seconds: float,
             limit: float | None) -> ZooResult | None:
    """The result of a model's process if it has one, a result for its death or its time
    running out, or None while it is still working within its limit."""
    if recv.poll():
        try:
            result: ZooResult = recv.recv()
            return result
        except (EOFError, OSError):
            proc.join(5)
            return _died(m, proc.exitcode, seconds)
    if not proc.is_alive():
        return _died(m, proc.exitcode, seconds)
    if limit is not None and seconds > limit:
        proc.kill()
        return ZooResult(m.name, str(m.path), "timeout",
                         f"ran past the per-model limit of {limit:g} s and was stopped; raise "
                         "--model-timeout (0: no limit)", m.dims, m.input_shapes, seconds=seconds)
    return None


def _died(m: ZooModel, exitcode: int | None, seconds: float) -> ZooResult:
    how = f"signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
    hint = " (killed: out of memory?)" if exitcode == -9 else ""
    return ZooResult(m.name, str(m.path), "failed", f"the worker process died with {how}{hint}",
                     m.dims, m.input_shapes, seconds=seconds)


def run_limited(model: ZooModel, options: ZooOptions, task: Task = run_model) -> ZooResult:
    """``task`` on one model in a child process under ``options.model_timeout`` (the unit
    of work of the ray executor)."""
    if not options.model_timeout:
        return task(model, options)
    return _run_in_processes([model], options, lambda _r: None, task, jobs=1)[0]


def _ray_task(model: ZooModel, options: ZooOptions, task: Task) -> ZooResult:
    """The unit of work of the ray executor: ``run_limited``, recording the Ray worker process
    that ran it (its model ran in a child of that process)."""
    return replace(run_limited(model, options, task), worker=_worker_name())


_NO_RAY = "--executor ray needs Ray: pip install 'onnxmem[ray]' (or use --executor local)"


def _run_ray(models: Sequence[ZooModel], options: ZooOptions, notify: Callback,
             task: Task) -> list[ZooResult]:
    """Tasks on a Ray cluster (``RAY_ADDRESS``, or a local one: :func:`_ray_cluster`). Model
    paths and the work folder must be reachable from every node, e.g. on a shared file system."""
    try:
        import ray
    except ImportError:
        raise OnnxmemError(_NO_RAY) from None
    with _ray_cluster(ray, options.jobs):
        remote = ray.remote(num_cpus=1)(_ray_task)
        refs = {remote.remote(m, options, task): i for i, m in enumerate(models)}
        results: list[ZooResult | None] = [None] * len(models)
        waiting = list(refs)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            for ref in done:
                i = refs[ref]
                try:
                    result = ray.get(ref)
                except Exception as exc:  # a worker that died: record it and go on
                    m = models[i]
                    result = ZooResult(m.name, str(m.path), "failed", f"ray task failed: {exc}",
                                       m.dims, m.input_shapes)
                results[i] = result
                notify(result)
    return [r for r in results if r is not None]


@contextmanager
def _ray_cluster(ray: Any, cpus: int) -> Iterator[None]:
    """Connected to a Ray cluster for the length of the block.

    Already connected (``ray.init`` by the caller): that cluster, left as it is. ``RAY_ADDRESS``
    set: that cluster, disconnected at the end. Otherwise a local cluster of ``cpus`` CPUs
    (as many worker processes at a time) on 127.0.0.1 is started and stopped at the end, under
    :func:`ray_settings`, with its sockets, logs and spill files in a temporary folder that is
    then removed.
    """
    if ray.is_initialized():
        yield
        return
    address = os.environ.get("RAY_ADDRESS")
    if address:
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            raise OnnxmemError(f"RAY_ADDRESS {show_name(address)}: Ray cannot connect "
                               f"({show_name(str(exc), 300)}); start the cluster, or unset RAY_ADDRESS for a "
                               "local one") from None
        try:
            yield
        finally:
            ray.shutdown()
        return
    with ray_settings(), tempfile.TemporaryDirectory(prefix="onnxmem-ray-") as temp:
        ray.init(num_cpus=cpus, _temp_dir=temp, _node_ip_address="127.0.0.1",
                 include_dashboard=False, log_to_driver=False,
                 object_store_memory=RAY_OBJECT_STORE_BYTES)
        try:
            yield
        finally:
            ray.shutdown()


#: seconds to wait for the head of the cluster at ``RAY_ADDRESS`` to accept a connection
RAY_CONNECT_SECONDS = 10.0


def _check_ray_address(address: str) -> None:
    """A one-line error unless the head at ``RAY_ADDRESS`` (``HOST:PORT`` or ``ray://HOST:PORT``;
    ``auto`` and ``local`` are left to Ray) accepts a TCP connection within ``RAY_CONNECT_SECONDS``:
    Ray itself retries an address that does not answer for minutes."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OnnxmemError(f"RAY_ADDRESS {show_name(address)} is not HOST:PORT (or ray://HOST:PORT); "
                           "give the head's address, e.g. 10.0.0.1:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_SECONDS):
            pass
    except (OSError, UnicodeError) as exc:
        raise OnnxmemError(f"RAY_ADDRESS {show_name(address)}: no Ray head answers there within "
                           f"{RAY_CONNECT_SECONDS:g} s ({show_name(str(exc))}); start the cluster (ray start "
                           "--head), or unset RAY_ADDRESS for a local one") from None


@contextmanager
def ray_settings() -> Iterator[dict[str, str]]:
    """The environment of a Ray cluster started for a run, set in ``os.environ`` for the length
    of the block (the cluster's processes inherit it) and yielded: usage statistics off
    (``RAY_USAGE_STATS_ENABLED=0``: a run sends nothing anywhere), and a random token in
    ``RAY_AUTH_TOKEN`` for the token authentication Ray turns on for a new local cluster, so
    that Ray writes no token file in the user's home (its default, ``~/.ray/auth_token``).

    The token is the same for every cluster this process starts: Ray keeps the first token a
    process reads.
    """
    settings = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_TOKEN": _ray_token()}
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield settings
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@functools.cache
def _ray_token() -> str:
    return secrets.token_hex(32)


def check_zoo_run(models: Sequence[ZooModel], options: ZooOptions) -> None:
    """Refuse a run's options or models before anything starts (one-line user errors)."""
    if options.executor not in EXECUTORS:
        raise OnnxmemError(
            f"executor '{options.executor}' is unknown; use one of {', '.join(EXECUTORS)}"
        )
    if options.verify is not None and options.verify not in VERIFY_DEVICES:
        raise OnnxmemError(
            f"--verify {options.verify}: use one of {', '.join(VERIFY_DEVICES)}"
        )
    if options.jobs < 1:
        raise OnnxmemError(f"--jobs {options.jobs}: use 1 or more")
    if options.model_timeout is not None and options.model_timeout < 0:
        raise OnnxmemError(f"--model-timeout {options.model_timeout:g}: use 0 (no limit) or more")
    if options.executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise OnnxmemError(_NO_RAY)
        if os.environ.get("RAY_ADDRESS"):
            _check_ray_address(os.environ["RAY_ADDRESS"])
    names = [m.name for m in models]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise OnnxmemError(f"zoo has several models named {', '.join(map(show_name, dupes))}; names must be unique: "
                           "rename all but one")
