"""The model zoo: catalogues, weight-free fixtures, and the job that plans every model.

A zoo is a folder with a ``catalog.json`` (written by ``tools/build_zoo.py``), a folder of
``.onnx`` files, or a text file listing model paths. Each model is planned, and optionally
verified, in a worker process; one model's failure is recorded with its error and the job
goes on.

Weight-free fixtures (``models/zoo/*.onnx``) keep their graphs and drop the values of their
large floating-point initializers: each one points into a data file that does not exist and
records ``mean std min max`` of the original values in its ``doc_string``.
``fill_weights`` draws random values with those statistics (seeded by the tensor's name), so
that the model can run.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import platform
import re
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import OnnxmemError, PlanInvalid
from .fileio import write_text_atomic
from .model import initializers

__all__ = [
    "EXECUTORS",
    "FILL_PREFIX",
    "LIGHT_MODELS",
    "VERIFY_DEVICES",
    "Regression",
    "ZooModel",
    "ZooOptions",
    "ZooResult",
    "compare_baseline",
    "machine_info",
    "read_baseline",
    "results_csv",
    "results_markdown",
    "run_model",
    "run_zoo",
    "write_baseline",
    "write_results",
    "describe_inputs",
    "fill_weights",
    "has_missing_weights",
    "light_model_path",
    "load_zoo",
    "materialize",
]

FILL_PREFIX = "onnxmem.fill"

LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


def light_model_path(name: str) -> Path:
    """Path of one of the models that ship inside the onnx wheel, e.g. ``resnet50``."""
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    path = root / f"light_{name}.onnx"
    if not path.is_file():
        raise OnnxmemError(
            f"onnx wheel model '{name}' not found at '{path}'; the installed onnx package "
            f"ships {', '.join(sorted(p.stem[6:] for p in root.glob('light_*.onnx')))}"
        )
    return path


def describe_inputs(model: onnx.ModelProto) -> tuple[dict[str, list[int | str]], list[str]]:
    """Graph inputs that are not initializers, as ``{name: shape}``, and their symbolic dims.

    >>> m = onnx.helper.make_model(onnx.helper.make_graph([], "g",
    ...     [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3])], []))
    >>> describe_inputs(m)
    ({'x': ['batch', 3]}, ['batch'])
    """
    weights = {t.name for t in model.graph.initializer}
    inputs: dict[str, list[int | str]] = {}
    symbols: list[str] = []
    for value in model.graph.input:
        if value.name in weights:
            continue
        shape: list[int | str] = []
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            else:
                symbol = dim.dim_param or "?"
                shape.append(symbol)
                if symbol not in symbols:
                    symbols.append(symbol)
        inputs[value.name] = shape
    return inputs, symbols


# --------------------------------------------------------------------------- catalogue


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One model of a zoo: where it is, and the dimension binding to plan it with."""

    name: str
    path: Path
    dims: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def load_zoo(source: str | os.PathLike[str], only: Sequence[str] = ()) -> list[ZooModel]:
    """The models of a zoo, in catalogue order.

    ``source`` is a folder with ``catalog.json``, a ``catalog.json`` itself, a folder of
    ``.onnx`` files, a single ``.onnx`` file, or a text file with one model per line:
    ``PATH [DIM=VALUE ...]`` (``#`` starts a comment; relative paths are relative to the
    list's folder; ``onnx:NAME`` names a model of the onnx wheel). ``only`` keeps the models
    whose name matches one of its shell patterns.
    """
    src = Path(source)
    if src.is_dir():
        catalog = src / "catalog.json"
        if catalog.is_file():
            models = _read_catalog(catalog)
        else:
            models = [ZooModel(p.stem, p) for p in sorted(src.rglob("*.onnx"))]
            if not models:
                raise OnnxmemError(
                    f"zoo folder '{src}' has no catalog.json and no .onnx files; build one "
                    "with 'make zoo' or point at a folder of models"
                )
    elif src.is_file() and src.suffix == ".json":
        models = _read_catalog(src)
    elif src.is_file() and src.suffix == ".onnx":
        models = [ZooModel(src.stem, src)]
    elif src.is_file():
        models = _read_list(src)
    elif str(source).startswith("onnx:"):
        name = str(source)[5:]
        models = [ZooModel(f"onnx_{name}", light_model_path(name))]
    else:
        raise OnnxmemError(f"zoo '{source}' does not exist; give a folder, catalog.json or list file")
    if only:
        import fnmatch

        models = [m for m in models if any(fnmatch.fnmatchcase(m.name, pat) for pat in only)]
        if not models:
            raise OnnxmemError(f"no model of zoo '{source}' matches {', '.join(only)}")
    return models


def _resolve(base: Path, file: str) -> Path:
    if file.startswith("onnx:"):
        return light_model_path(file[5:])
    return (base / file).resolve() if not Path(file).is_absolute() else Path(file)


def _read_catalog(path: Path) -> list[ZooModel]:
    try:
        data = json.loads(path.read_text())
        entries = data["models"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OnnxmemError(f"zoo catalogue '{path}' cannot be read: {exc}") from exc
    models = []
    for e in entries:
        models.append(ZooModel(
            name=e["name"],
            path=_resolve(path.parent, e["file"]),
            dims={k: int(v) for k, v in e.get("dims", {}).items()},
            info={k: v for k, v in e.items() if k not in ("name", "file", "dims")},
        ))
    return models


def _read_list(path: Path) -> list[ZooModel]:
    models = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        dims: dict[str, int] = {}
        for word in words[1:]:
            m = re.fullmatch(r"([^=]+)=(\d+)", word)
            if not m:
                raise OnnxmemError(
                    f"{path}:{lineno}: '{word}' is not a dimension binding; write NAME=VALUE"
                )
            dims[m.group(1)] = int(m.group(2))
        file = _resolve(path.parent, words[0])
        name = f"onnx_{words[0][5:]}" if words[0].startswith("onnx:") else file.stem
        models.append(ZooModel(name, file, dims))
    return models


# --------------------------------------------------------------------------- weights


def has_missing_weights(model: onnx.ModelProto, base_dir: str | os.PathLike[str]) -> bool:
    """Whether some initializer points into an external-data file that is not there."""
    base = Path(base_dir)
    for tensor in initializers(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if not (base / location).is_file():
                return True
    return False


def fill_weights(model: onnx.ModelProto, seed: int = 0) -> int:
    """Give every weight-free initializer of ``model`` random values, in place.

    An initializer is weight-free when its data is external and its ``doc_string`` holds
    ``onnxmem.fill mean=M std=S min=A max=B``; it gets normal(M, S) values clipped to [A, B]
    (the constant M when S is 0), drawn from a generator seeded by ``seed`` and the tensor's
    name, so a model fills the same way every time. Returns the number of tensors filled.
    Raises ``OnnxmemError`` for an external initializer without statistics.
    """
    filled = 0
    for tensor in initializers(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        stats = _parse_stats(tensor)
        shape = tuple(int(d) for d in tensor.dims)
        digest = hashlib.sha256(f"{seed}:{tensor.name}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        if stats["std"] == 0.0:
            values = np.full(shape, stats["mean"], dtype=np.float32)
        else:
            values = rng.normal(stats["mean"], stats["std"], size=shape).astype(np.float32)
            np.clip(values, stats["min"], stats["max"], out=values)
        array = values.astype(dtype)
        new = numpy_helper.from_array(array, tensor.name)
        tensor.ClearField("external_data")
        tensor.data_location = onnx.TensorProto.DEFAULT
        tensor.raw_data = new.raw_data
        filled += 1
    return filled


def _parse_stats(tensor: onnx.TensorProto) -> dict[str, float]:
    text = tensor.doc_string
    if not text.startswith(FILL_PREFIX):
        raise OnnxmemError(
            f"initializer '{tensor.name}' has external data but no '{FILL_PREFIX}' statistics "
            "to fill it from; put its data file beside the model"
        )
    stats = dict(word.split("=", 1) for word in text[len(FILL_PREFIX):].split())
    return {k: float(stats[k]) for k in ("mean", "std", "min", "max")}


def materialize(path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                seed: int = 0) -> Path:
    """A runnable copy of a weight-free model: ``out_dir/NAME.onnx`` + ``NAME.onnx.data``.

    Returns ``path`` itself when all its weights are present. The copy is reused when it is
    newer than the source. Both files are written under a temporary name and then renamed,
    the data first, so a reader never sees a model without its whole data file.
    """
    src = Path(path)
    model = onnx.load(str(src), load_external_data=False)
    if not has_missing_weights(model, src.parent):
        return src
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / src.name
    data = dest.with_name(dest.name + ".data")
    if dest.is_file() and data.is_file() and dest.stat().st_mtime >= src.stat().st_mtime:
        return dest
    fill_weights(model, seed)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=out))
    try:
        onnx.save_model(model, str(tmp / dest.name), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data.name, size_threshold=1024)
        os.replace(tmp / data.name, data)
        os.replace(tmp / dest.name, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# --------------------------------------------------------------------------- the zoo job

VERIFY_DEVICES = ("cpu", "cuda")
#: local: one fresh process per model, ``jobs`` at a time; ray: tasks on a Ray cluster;
#: inline: in this process, one after another (debugging)
EXECUTORS = ("local", "ray", "inline")

Callback = Callable[["ZooResult"], None]


@dataclass(frozen=True, slots=True)
class ZooOptions:
    """How to run a zoo. ``plan.dims`` override each model's own suggested binding."""

    plan: Any = None  # onnxmem.pipeline.PlanOptions; None means its defaults
    verify: str | None = None  # None, "cpu" or "cuda"
    jobs: int = 1
    executor: str = "local"
    work_dir: Path | None = None  # runnable copies of weight-free models, plans
    model_timeout: float | None = None  # seconds per model (local executor)
    seed: int = 0


@dataclass(frozen=True, slots=True)
class ZooResult:
    """What happened to one model. ``status``: ok, failed (the tool), or wrong (verification)."""

    name: str
    path: str
    status: str
    error: str | None = None
    dims: dict[str, int] = field(default_factory=dict)
    nodes: int | None = None
    tensors: int | None = None
    weights_size: int | None = None
    naive_size: int | None = None
    ort_peak: int | None = None
    lower_bound: int | None = None
    arena_size: int | None = None
    plan_seconds: float | None = None
    solver: str | None = None
    solver_status: str | None = None
    order: str | None = None
    verify: str = "not run"  # "pass", "FAIL", "not run", "error"
    verify_detail: str | None = None
    warnings: int = 0
    seconds: float = 0.0
    plan_file: str | None = None

    @property
    def arena_over_bound(self) -> float | None:
        if self.arena_size is None or not self.lower_bound:
            return None
        return self.arena_size / self.lower_bound

    @property
    def arena_over_ort(self) -> float | None:
        if self.arena_size is None or not self.ort_peak:
            return None
        return self.arena_size / self.ort_peak

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["arena_over_bound"] = self.arena_over_bound
        d["arena_over_ort"] = self.arena_over_ort
        return d


def run_model(model: ZooModel, options: ZooOptions) -> ZooResult:
    """Plan (and verify) one model; every error becomes a result, none escapes."""
    from .pipeline import PlanOptions, plan_model
    from .plan import write_plan

    start = time.perf_counter()
    base = options.plan or PlanOptions()
    dims = {**model.dims, **dict(base.dims)}
    opts = replace(base, dims=dims)
    work = Path(options.work_dir) if options.work_dir else None
    partial: dict[str, Any] = {}
    stage = "plan"
    try:
        path = model.path
        if options.verify:
            stage = "fill weights"
            path = materialize(path, (work or Path(".")) / "models", seed=options.seed)
        stage = "plan"
        planned = plan_model(path, opts)
        plan = planned.plan
        partial = {
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
        if work is not None:
            (work / "plans").mkdir(parents=True, exist_ok=True)
            plan_file = work / "plans" / f"{model.name}.json"
            write_plan(plan, plan_file)
            partial["plan_file"] = str(plan_file)
        if options.verify:
            stage = "verify"
            verdict, detail, peak = _verify(planned, path, options.verify, options.seed)
            partial.update(verify=verdict, verify_detail=detail, ort_peak=peak)
            status = "ok" if verdict == "pass" else "wrong"
            return ZooResult(model.name, str(model.path), status, None if status == "ok" else detail,
                             dims, seconds=time.perf_counter() - start, **partial)
        return ZooResult(model.name, str(model.path), "ok", None, dims,
                         seconds=time.perf_counter() - start, **partial)
    except PlanInvalid as exc:
        if stage == "verify":
            partial.update(verify="FAIL", verify_detail=str(exc))
        return ZooResult(model.name, str(model.path), "wrong", str(exc), dims,
                         seconds=time.perf_counter() - start, **partial)
    except OnnxmemError as exc:
        if stage == "verify":
            partial.update(verify="error", verify_detail=str(exc))
        return ZooResult(model.name, str(model.path), "failed", f"{stage}: {exc}", dims,
                         seconds=time.perf_counter() - start, **partial)
    except Exception as exc:  # a bug in onnxmem: keep the traceback's last frames
        tb = traceback.format_exc(limit=-3).strip().splitlines()
        where = next((ln.strip() for ln in reversed(tb) if ln.strip().startswith("File ")), "")
        if stage == "verify":
            partial.update(verify="error", verify_detail=f"{type(exc).__name__}: {exc}")
        return ZooResult(model.name, str(model.path), "failed",
                         f"{stage}: internal error {type(exc).__name__}: {exc} ({where})", dims,
                         seconds=time.perf_counter() - start, **partial)


def _verify(planned: Any, path: Path, device: str, seed: int) -> tuple[str, str, int | None]:
    """Prove the plan and execute it in one arena (``onnxmem.verify``), then measure
    onnxruntime's own peak on the same graph (``onnxmem.ortpeak``, optimizations off).

    Returns ``(verdict, detail, onnxruntime_peak_bytes)``; verdict is ``pass`` or ``FAIL``.
    The peak is counted over the tensors the arena holds
    (:func:`onnxmem.ortpeak.comparable_peak`: plus graph inputs for ``--io
    internal``). A peak that cannot be measured is ``None`` and said in ``detail``.
    """
    from . import verify
    from .ortpeak import comparable_peak, ort_peak

    report = verify.verify_plan(planned.model, planned.plan, model_path=path,
                                options=verify.VerifyOptions(device=device, seed=seed))
    if report.ok:
        run = report.execution
        verdict = "pass"
        detail = (f"{run.nodes_run} nodes run in the arena on {run.device}, outputs match"
                  if run is not None else "static proof holds")
    else:
        first = report.first
        verdict = "FAIL"
        detail = f"{first.kind}: {first}" if first is not None else "failed"
    try:
        measured = ort_peak(planned.model, planned.view, level="disable", device=device,
                            model_path=path, seed=seed)
        # counted over the same tensors as the arena (graph inputs in or out, as planned)
        peak = comparable_peak(measured.peak, planned.view, planned.plan.io)
        if peak is None:
            detail += f"; onnxruntime peak not available: {measured.note}"
    except OnnxmemError as exc:
        peak = None
        detail += f"; onnxruntime peak not measured: {exc}"
    return verdict, detail, peak


def run_zoo(models: Sequence[ZooModel], options: ZooOptions,
            on_result: Callback | None = None) -> list[ZooResult]:
    """Run every model; results in the order of ``models``. ``on_result`` sees each as it ends."""
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
    names = [m.name for m in models]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise OnnxmemError(f"zoo has several models named {', '.join(dupes)}; names must be unique")
    if options.work_dir is not None:
        Path(options.work_dir).mkdir(parents=True, exist_ok=True)
    notify = on_result or (lambda _r: None)
    if options.executor == "inline":
        results = []
        for m in models:
            results.append(run_model(m, options))
            notify(results[-1])
        return results
    if options.executor == "ray":
        return _run_ray(models, options, notify)
    return _run_local(models, options, notify)


def _child(model: ZooModel, options: ZooOptions, conn: Any) -> None:
    conn.send(run_model(model, options))
    conn.close()


def _run_local(models: Sequence[ZooModel], options: ZooOptions, notify: Callback) -> list[ZooResult]:
    """One fresh process per model, ``jobs`` at a time.

    A model that crashes its process (a segfault, the OOM killer) or runs past
    ``model_timeout`` is recorded as failed; the others go on. A fresh process per model also
    returns each model's memory to the system.
    """
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    pending = list(enumerate(models))
    running: dict[int, tuple[Any, Any, float]] = {}
    results: list[ZooResult | None] = [None] * len(models)

    def finish(i: int, result: ZooResult) -> None:
        results[i] = result
        notify(result)

    try:
        while pending or running:
            while pending and len(running) < options.jobs:
                i, m = pending.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(m, options, send), name=f"zoo-{m.name}")
                proc.start()
                send.close()
                running[i] = (proc, recv, time.monotonic())
            wait([r for _, r, _ in running.values()] + [p.sentinel for p, _, _ in running.values()],
                 timeout=1.0)
            for i, (proc, recv, began) in list(running.items()):
                m = models[i]
                result: ZooResult | None = None
                if recv.poll():
                    try:
                        result = recv.recv()
                    except (EOFError, OSError):
                        result = None
                    if result is None:
                        proc.join(5)
                        result = _died(m, proc.exitcode, time.monotonic() - began)
                elif not proc.is_alive():
                    result = _died(m, proc.exitcode, time.monotonic() - began)
                elif options.model_timeout and time.monotonic() - began > options.model_timeout:
                    proc.kill()
                    result = ZooResult(m.name, str(m.path), "failed",
                                       f"ran past the per-model limit of {options.model_timeout:g} s; "
                                       "raise --model-timeout", m.dims,
                                       seconds=time.monotonic() - began)
                if result is not None:
                    proc.join(5)
                    recv.close()
                    del running[i]
                    finish(i, result)
    finally:
        for proc, recv, _ in running.values():
            proc.kill()
            proc.join(5)
            recv.close()
    return [r for r in results if r is not None]


def _died(m: ZooModel, exitcode: int | None, seconds: float) -> ZooResult:
    how = f"signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
    hint = " (killed: out of memory?)" if exitcode == -9 else ""
    return ZooResult(m.name, str(m.path), "failed",
                     f"the worker process died with {how}{hint}", m.dims, seconds=seconds)


def _run_ray(models: Sequence[ZooModel], options: ZooOptions, notify: Callback) -> list[ZooResult]:
    """Tasks on a Ray cluster (``RAY_ADDRESS``, or a local one). Model paths and the work
    folder must be reachable from every node, e.g. on a shared file system."""
    try:
        import ray
    except ImportError:
        raise OnnxmemError(
            "--executor ray needs Ray: pip install 'onnxmem[ray]' (or use --executor local)"
        ) from None
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True,
                 log_to_driver=False)
    task = ray.remote(num_cpus=1)(run_model)
    refs = {task.remote(m, options): i for i, m in enumerate(models)}
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
                result = ZooResult(m.name, str(m.path), "failed", f"ray task failed: {exc}", m.dims)
            results[i] = result
            notify(result)
    return [r for r in results if r is not None]


# --------------------------------------------------------------------------- results


def machine_info() -> dict[str, Any]:
    """The machine a zoo ran on, for the results' header."""
    from importlib import metadata

    def version(*names: str) -> str | None:
        for n in names:
            try:
                return metadata.version(n)
            except metadata.PackageNotFoundError:
                continue
        return None

    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    from . import __version__

    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "python": platform.python_version(),
        "onnxmem": __version__,
        "onnx": version("onnx"),
        "onnxruntime": version("onnxruntime-gpu", "onnxruntime"),
    }


def _mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:.2f}"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


#: longest error shown in the Markdown table; results.json keeps the whole text
ERROR_CHARS = 400

TABLE_COLUMNS = (
    "model", "nodes", "tensors", "weights MiB", "naive MiB", "onnxruntime peak MiB",
    "lower bound MiB", "arena MiB", "arena/bound", "arena/onnxruntime", "plan s", "verify",
)


def _row(r: ZooResult) -> list[str]:
    return [
        r.name,
        "—" if r.nodes is None else str(r.nodes),
        "—" if r.tensors is None else str(r.tensors),
        _mib(r.weights_size),
        _mib(r.naive_size),
        _mib(r.ort_peak),
        _mib(r.lower_bound),
        _mib(r.arena_size),
        _ratio(r.arena_over_bound),
        _ratio(r.arena_over_ort),
        "—" if r.plan_seconds is None else f"{r.plan_seconds:.2f}",
        r.verify if r.status != "failed" or r.verify != "not run" else "failed",
    ]


def results_markdown(results: Sequence[ZooResult], header: dict[str, Any] | None = None) -> str:
    """The Markdown table of a zoo run, with the failures' errors under it."""
    lines = []
    if header:
        for key, value in header.items():
            lines.append(f"- {key}: {value}")
        lines.append("")
    lines.append("| " + " | ".join(TABLE_COLUMNS) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(TABLE_COLUMNS) - 2) + [":---:"]) + "|")
    for r in results:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _row(r)) + " |")
    bad = [r for r in results if r.status != "ok"]
    ok = len(results) - len(bad)
    lines += ["", f"{ok} of {len(results)} models ok."]
    ratios = [x for x in (r.arena_over_ort for r in results) if x]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(
            f"arena/onnxruntime: geometric mean {geo:.3f}, largest {max(ratios):.3f}, "
            f"over {len(ratios)} models."
        )
    if bad:
        lines += ["", "Failures:", ""]
        for r in bad:
            error = r.error or ""
            if len(error) > ERROR_CHARS:
                error = error[:ERROR_CHARS].rstrip() + " ... (full text in results.json)"
            lines.append(f"- **{r.name}** ({r.status}): {error}")
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "name", "status", "nodes", "tensors", "weights_size", "naive_size", "ort_peak", "lower_bound",
    "arena_size", "arena_over_bound", "arena_over_ort", "plan_seconds", "verify", "solver",
    "solver_status", "order", "dims", "seconds", "error",
)


def results_csv(results: Sequence[ZooResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in results:
        d = r.to_dict()
        d["dims"] = " ".join(f"{k}={v}" for k, v in r.dims.items())
        writer.writerow(["" if d[f] is None else d[f] for f in CSV_FIELDS])
    return buffer.getvalue()


def write_results(results: Sequence[ZooResult], out_dir: str | os.PathLike[str],
                  meta: dict[str, Any]) -> dict[str, Path]:
    """``results.json``, ``results.csv`` and ``results.md`` in ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "csv": out / "results.csv", "md": out / "results.md"}
    doc = {"schema_version": 1, **meta, "models": [r.to_dict() for r in results]}
    write_text_atomic(paths["json"], json.dumps(doc, indent=1) + "\n")
    write_text_atomic(paths["csv"], results_csv(results))
    write_text_atomic(paths["md"], results_markdown(results))
    return paths


# --------------------------------------------------------------------------- baseline


@dataclass(frozen=True, slots=True)
class Regression:
    """A model whose arena grew against the baseline (or that the baseline has and now fails)."""

    name: str
    baseline: int
    arena_size: int | None

    def __str__(self) -> str:
        if self.arena_size is None:
            return f"{self.name}: no arena now (baseline {self.baseline} B); see its error"
        growth = self.arena_size / self.baseline - 1 if self.baseline else float("inf")
        return f"{self.name}: arena {self.arena_size} B > baseline {self.baseline} B (+{growth:.2%})"


def write_baseline(results: Sequence[ZooResult], path: str | os.PathLike[str],
                   meta: dict[str, Any] | None = None) -> None:
    """Record each planned model's arena size; models that failed are left out."""
    arenas = {r.name: r.arena_size for r in results if r.arena_size is not None}
    doc = {"schema_version": 1, **(meta or {}), "arena_size": arenas}
    write_text_atomic(path, json.dumps(doc, indent=1) + "\n")


def read_baseline(path: str | os.PathLike[str]) -> dict[str, int]:
    try:
        doc = json.loads(Path(path).read_text())
        return {str(k): int(v) for k, v in doc["arena_size"].items()}
    except FileNotFoundError:
        raise OnnxmemError(f"baseline '{path}' does not exist; write one with --write-baseline") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise OnnxmemError(f"baseline '{path}' cannot be read ({exc}); rewrite it with --write-baseline") from None


def compare_baseline(results: Sequence[ZooResult], baseline: dict[str, int],
                     tolerance: float = 0.0) -> list[Regression]:
    """Models in both whose arena grew by more than ``tolerance`` (a fraction), and models of
    the baseline that now have no arena. Models not in the baseline are not compared."""
    out = []
    for r in results:
        if r.name not in baseline:
            continue
        old = baseline[r.name]
        if r.arena_size is None or r.arena_size > old * (1 + tolerance):
            out.append(Regression(r.name, old, r.arena_size))
    return out
