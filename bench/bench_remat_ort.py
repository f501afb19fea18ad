#!/usr/bin/env python
"""onnxruntime's own peak on a training step before and after ``plan --budget``'s rewrite.

Usage (the training runtime: ``make training-env``)::

    .venv-training/bin/python bench/bench_remat_ort.py                # mobilenet_v2 bert resnet50
    .venv-training/bin/python bench/bench_remat_ort.py mobilenet_v2
    .venv-training/bin/python bench/bench_remat_ort.py --factor 0.3 --keep onnxruntime mobilenet_v2
    .venv-training/bin/python bench/bench_remat_ort.py --requested    # the accounting (needs cc)
    .venv-training/bin/python bench/bench_remat_ort.py --module       # onnxruntime-training's Module (needs cc)

For each graph of ``models/training``: a runnable copy (weights filled in,
:func:`onnxmem.zoo.fixtures.materialize`) in a temporary folder, ``plan_with_budget`` at 0.5x
(``--factor``) with each ``keep`` (:data:`onnxmem.remat.budget.KEEP`; ``--keep``), and
:func:`onnxmem.runtime.footprint.session_peak` of the original and of the rewrite: the growth
of a fresh process's peak resident size from before the session is made to the end of its
runs, on one training step's inputs (made before the baseline), graph optimizations off. Two
settings: the CPU arena on and memory patterns off (one run), and onnxruntime's defaults
(arena and memory patterns on: the second run allocates the pattern's block, the peak of two
runs). Each rewrite runs in the order it was made for: ``onnxruntime`` in the default
execution order, ``planner`` with ``execution_order = PRIORITY_BASED`` (and, as a rewrite
made without regard to onnxruntime's order, in the default order too); the original in the
default order. Each setting also with ``SessionOptions.enable_mem_reuse = False`` ("reuse off"):
onnxruntime's planner then hands no dead value's buffer to a later output of the same shape
(what keeps a recomputed value's buffer held across its gap; docs/remat.md). "onnxruntime's
order" is the arena onnxmem plans for the original file in the order onnxruntime runs it
(``plan --order onnxruntime``), the one the measured original runs in. The markdown table goes
to stdout.

``--requested`` prints the accounting instead: for the original and the rewrite
(``keep="onnxruntime"``), onnxmem's arena in onnxruntime's order, and what onnxruntime's
allocator is asked for at its peak (``SessionPeak.requested``, counted by
``bench/alloc_trace.c``, built with ``cc`` in a temporary folder and preloaded into the
children): with the arena off (each tensor and scratch one request) and with it on (the
arena's regions), with reuse off and on; then the run's resident growth and the made session.

``--module`` runs onnxruntime-training's own API instead: the generator's artifacts
(``training/build/NAME``, made by ``tools/build_training.py`` when missing), the original
``training_model.onnx`` and its rewrite each in a fresh child under each of
:data:`MODULE_SETTINGS` (``Module`` and ``Optimizer``, ``--steps`` steps,
:func:`onnxmem.runtime.footprint.training_step_peak`, the tracer preloaded), and the original
under onnxruntime's defaults against the rewrite with the settings ``plan --budget`` prints.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import onnx  # noqa: E402

from onnxmem.model import load_model  # noqa: E402
from onnxmem.planning.pipeline import PlanOptions, plan_model  # noqa: E402
from onnxmem.remat.budget import plan_with_budget  # noqa: E402
from onnxmem.runtime.footprint import session_peak  # noqa: E402
from onnxmem.zoo.fixtures import materialize  # noqa: E402

GRAPHS = ("mobilenet_v2", "bert", "resnet50")
#: (label, session_peak keywords)
SETTINGS = (("arena on, patterns off, 1 run", {"mem_pattern": False, "runs": 1}),
            ("onnxruntime defaults, 2 runs", {"mem_pattern": True, "runs": 2}),
            ("arena on, patterns off, reuse off, 1 run", {"mem_pattern": False, "runs": 1, "mem_reuse": False}),
            ("defaults but reuse off, 2 runs", {"mem_pattern": True, "runs": 2, "mem_reuse": False}))
#: (keep, the execution order its rewrite runs in); the last: a rewrite for the planner's order
#: run in onnxruntime's default order, which does not keep it
RUNS_IN = (("onnxruntime", "default"), ("planner", "priority"), ("planner", "default"))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def runnable(name: str, tmp: Path) -> Path:
    """A runnable copy of ``models/training``'s ``name`` in ``tmp`` (weights filled in)."""
    src = Path(materialize(ROOT / "models" / "training" / f"{name}.train.onnx", tmp))
    if src.parent != tmp:  # no weights to fill in: a copy beside the rewrites
        (tmp / src.name).write_bytes(src.read_bytes())
        src = tmp / src.name
    return src


def measure(name: str, tmp: Path, factor: float = 0.5, keeps: tuple[str, ...] = ("onnxruntime", "planner")) -> list[str]:
    src = runnable(name, tmp)
    model = load_model(src)
    rows = []
    peaks = {label: session_peak(src, {}, training=True, **kw) for label, kw in SETTINGS}
    in_order = plan_model(src, PlanOptions(order="onnxruntime")).plan.arena_size
    made = {}
    for keep, order in RUNS_IN:
        if keep not in keeps:
            continue
        if keep not in made:
            t = time.perf_counter()
            got = plan_with_budget(model, src, PlanOptions(), factor=factor, keep=keep)
            made[keep] = got, time.perf_counter() - t
            assert got.rewritten is not None, f"{name}: nothing rewritten"
            onnx.save_model(got.rewritten, tmp / f"{name}.{keep}.onnx")
        got, secs = made[keep]
        out = tmp / f"{name}.{keep}.onnx"
        for label, kw in SETTINGS:
            base, new = peaks[label], session_peak(out, {}, training=True, order=order, **kw)
            rows.append(f"| {name} | {factor:g}x | {keep} ({order} order) | {label} | {_mib(got.planned.plan.arena_size)} of "
                        f"{_mib(got.original.plan.arena_size)} ({_mib(in_order)}) | {got.extra_percent:.2f}% | {_mib(base.peak)} "
                        f"({_mib(base.created)}) | {_mib(new.peak)} ({_mib(new.created)}) | "
                        f"{new.peak / base.peak:.3f} | {(new.peak - new.created) / (base.peak - base.created):.3f} "
                        f"| {secs:.1f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


#: the accounting's sessions (memory patterns off, one run): (label, session_peak keywords)
ACCOUNT = (("arena off, reuse off", {"arena": False, "mem_reuse": False}), ("arena off, reuse on", {"arena": False}),
           ("arena on, reuse on", {}), ("arena on, reuse off", {"mem_reuse": False}),
           ("same-as-requested, reuse off", {"mem_reuse": False, "arena_extend": "same-as-requested"}))


def build_tracer(tmp: Path) -> Path:
    """``bench/alloc_trace.c`` built in ``tmp`` (a C compiler, ``cc``, is needed)."""
    out = tmp / "alloc_trace.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(ROOT / "bench" / "alloc_trace.c"), "-ldl"],
                   check=True)
    return out


def account(name: str, tmp: Path, factor: float) -> list[str]:
    """Rows of the accounting: what onnxruntime's allocator is asked for and holds, original
    and rewrite (``keep="onnxruntime"``), against onnxmem's arena in onnxruntime's order. Needs
    the allocation tracer preloaded (:func:`build_tracer`, ``LD_PRELOAD`` set before the first
    child starts)."""
    src = runnable(name, tmp)
    got = plan_with_budget(load_model(src), src, PlanOptions(), factor=factor, keep="onnxruntime")
    assert got.rewritten is not None, f"{name}: nothing rewritten"
    out = tmp / f"{name}.rewrite.onnx"
    onnx.save_model(got.rewritten, out)
    cells: dict[str, list[float]] = {}
    for label, path in (("original", src), (f"{factor:g}x rewrite", out)):
        arena = plan_model(path, PlanOptions(order="onnxruntime")).plan.arena_size
        peaks = {key: session_peak(path, {}, training=True, mem_pattern=False, runs=1, **kw) for key, kw in ACCOUNT}
        held = [peaks[key].requested or 0 for key, _ in ACCOUNT]
        run = [peaks[key].peak - peaks[key].created for key in ("arena on, reuse on", "arena on, reuse off")]
        cells[label] = [arena, *held, *run, peaks["arena on, reuse on"].created]
    rows = [f"| {name} | {label} | " + " | ".join(_mib(int(v)) for v in got_) + " |" for label, got_ in cells.items()]
    a, b = cells.values()
    rows.append(f"| {name} | rewrite / original | " + " | ".join(f"{y / x:.3f}" for x, y in zip(a, b, strict=True)) + " |")
    return rows


#: the Module's session settings (label, :func:`onnxmem.runtime.footprint.measuring_options` keywords;
#: ``None``: onnxruntime's defaults, no options passed); the last is what ``plan --budget`` prints
MODULE_SETTINGS = (("onnxruntime defaults", None), ("reuse off", {"mem_reuse": False}),
                   ("reuse off, arena off", {"mem_reuse": False, "arena": False}),
                   ("reuse off, arena grown as requested", {"mem_reuse": False, "arena_extend": "same-as-requested"}),
                   ("reuse off, patterns off, arena off", {"mem_reuse": False, "mem_pattern": False, "arena": False}),
                   ("reuse off, patterns off", {"mem_reuse": False, "mem_pattern": False}))
MODULE_HEAD = ("| graph | Module's settings (original / rewrite) | made MiB | step peak MiB (first step) | requested MiB "
               "| whole MiB | step peak ratio (first step) | requested ratio | whole ratio |\n|---|---|" + "---:|" * 7)


def artifacts(name: str) -> Path:
    """The generator's artifacts of ``name`` (``training/build/NAME``: graphs, optimizer, whole
    checkpoint), generated when missing (``tools/build_training.py``'s ``build_artifacts``)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import build_training as builder

    folder = builder.BUILD / name
    if not (folder / "checkpoint").is_file():
        builder.build_artifacts({a.name: a for a in builder.ARCHS}[name])
    return folder


def module_rows(name: str, tmp: Path, factor: float, steps: int, overhead: int = 0) -> list[str]:
    """Rows of onnxruntime-training's own step: ``Module`` (no eval graph) and ``Optimizer`` of the
    generator's artifacts, the original ``training_model.onnx`` and its rewrite
    (``keep="onnxruntime"``) under each of :data:`MODULE_SETTINGS`, each in a fresh child
    (:func:`onnxmem.runtime.footprint.training_step_peak`, ``steps`` steps); then the original
    under onnxruntime's defaults against the rewrite with the setting ``plan --budget`` prints.
    ``overhead``: ``plan --runtime-overhead``'s bytes (the budget holds for the arena and them)."""
    import json

    from bench_training import step_feeds

    from onnxmem.runtime.footprint import training_step_peak

    folder = artifacts(name)
    src = folder / "training_model.onnx"
    got = plan_with_budget(load_model(src), src, PlanOptions(), factor=factor, keep="onnxruntime", overhead=overhead)
    assert got.rewritten is not None, f"{name}: nothing rewritten"
    print(f"{name}: arena {_mib(got.original.plan.arena_size)} -> {_mib(got.planned.plan.arena_size)} MiB "
          f"(budget {_mib(got.budget)}), {got.extra_percent:.2f}% extra FLOPs", file=sys.stderr, flush=True)
    out = tmp / f"{name}.module-rewrite.onnx"
    onnx.save_model(got.rewritten, out)
    feeds = step_feeds(name, json.loads((ROOT / "models" / "training" / "catalog.json").read_text())[name])
    peaks = {(label, which): training_step_peak(path, folder / "checkpoint", feeds, optimizer=folder / "optimizer_model.onnx",
                                                steps=steps, settings=settings)
             for label, settings in MODULE_SETTINGS for which, path in (("original", src), ("rewrite", out))}

    def row(label: str, a: Any, b: Any) -> str:
        return (f"| {name} | {label} | {_mib(a.made)} / {_mib(b.made)} | {_mib(a.peak)} ({_mib(a.steps[0])}) / {_mib(b.peak)} "
                f"({_mib(b.steps[0])}) | {_mib(a.requested or 0)} / {_mib(b.requested or 0)} | {_mib(a.whole)} / {_mib(b.whole)} "
                f"| {b.peak / a.peak:.3f} ({b.steps[0] / a.steps[0]:.3f}) | {(b.requested or 0) / max(1, a.requested or 0):.3f} "
                f"| {b.whole / a.whole:.3f} |")

    rows = [row(label, peaks[label, "original"], peaks[label, "rewrite"]) for label, _ in MODULE_SETTINGS]
    told = MODULE_SETTINGS[-1][0]
    rows.append(row(f"{MODULE_SETTINGS[0][0]} / {told} (as run today / as plan --budget says)",
                    peaks[MODULE_SETTINGS[0][0], "original"], peaks[told, "rewrite"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("graphs", nargs="*", default=list(GRAPHS))
    parser.add_argument("--factor", type=float, default=0.5, help="the budget, x the arena without one")
    parser.add_argument("--keep", action="append", choices=["onnxruntime", "planner"],
                        help="an order to make rewrites for (repeatable; default both)")
    parser.add_argument("--requested", action="store_true",
                        help="the accounting instead: what onnxruntime's allocator is asked for (bench/alloc_trace.c)")
    parser.add_argument("--module", action="store_true",
                        help="onnxruntime-training's own Module and Optimizer instead (its generated artifacts; needs cc)")
    parser.add_argument("--steps", type=int, default=3, help="with --module: training steps per process")
    parser.add_argument("--overhead", type=float, default=0.0,
                        help="with --module: MiB the runtime asks for beside the arena (plan --runtime-overhead)")
    args = parser.parse_args()
    import onnxruntime

    print(f"Machine: {os.cpu_count()} cores, {platform.machine()}, CPU only; Python {platform.python_version()}, "
          f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.2f}.\n")
    if args.module:
        with tempfile.TemporaryDirectory(prefix="onnxmem-remat-ort-") as tmp:
            os.environ["LD_PRELOAD"] = str(build_tracer(Path(tmp)))  # the children inherit it
            print(MODULE_HEAD)
            for name in args.graphs:
                for row in module_rows(name, Path(tmp), args.factor, args.steps, int(args.overhead * 2**20)):
                    print(row, flush=True)
        return
    if args.requested:
        with tempfile.TemporaryDirectory(prefix="onnxmem-remat-ort-") as tmp:
            os.environ["LD_PRELOAD"] = str(build_tracer(Path(tmp)))  # the children inherit it
            print("| graph | model | onnxmem arena in onnxruntime's order | requested, arena off, reuse off "
                  "| requested, arena off, reuse on | arena's regions, reuse on | arena's regions, reuse off | regions grown as requested, reuse off "
                  "| resident growth of the run, reuse on | resident growth, reuse off | session made |")
            print("|---|---|" + "---:|" * 9)
            for name in args.graphs:
                for row in account(name, Path(tmp), args.factor):
                    print(row, flush=True)
        return
    print("| graph | budget | rewrite made for | onnxruntime settings | onnxmem arena MiB (of the original's; in onnxruntime's order) | extra FLOPs "
          "| original peak MiB (session made) | rewrite peak MiB (session made) | peak ratio | ratio less the session "
          "| plan s |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="onnxmem-remat-ort-") as tmp:
        for name in args.graphs:
            for row in measure(name, Path(tmp), args.factor, tuple(args.keep or ("onnxruntime", "planner"))):
                print(row, flush=True)


if __name__ == "__main__":
    main()
