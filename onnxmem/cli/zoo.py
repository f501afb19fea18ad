"""``onnxmem zoo``: plan (and verify) every model of a zoo, write results.json/.csv/.md."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from onnxmem import zoo as zoo_lib
from onnxmem.core.errors import OnnxmemError, one_line, show_name
from onnxmem.core.fileio import MAX_DATA_BYTES, OutputSet, check_input
from onnxmem.runtime.isolation import RUN_SECONDS
from onnxmem.zoo.settings import DEFAULT_MODEL_TIMEOUT, EXECUTORS

from .options import (
    Finite,
    PlanningFlags,
    RegistryChoice,
    custom_op_library_flag,
    make_plan_options,
    optimize_option,
    planning_options,
    time_limit_flag,
)
from .registries import DEVICES

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from onnxmem.zoo.catalog import ZooModel
    from onnxmem.zoo.results import ResultsWriter, ZooResult
    from onnxmem.zoo.runner import ZooOptions


@click.command()
@click.argument("zoo_source", metavar="DIR_OR_LIST", type=str)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Models planned at once (one process each).")
@click.option("--verify", type=RegistryChoice(names=DEVICES), default=None,
              help="Also run each plan in one arena with onnxruntime and measure its own peak.")
@planning_options
@optimize_option("none", "the provider of --verify (the CPU's without it)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=str), default="results",
              show_default=True, help="Folder for results.json/.csv/.md (rewritten after every "
              "model), plans/ and filled models/.")
@click.option("--only", multiple=True, metavar="PATTERN",
              help="Run only models whose name matches (shell patterns, comma-separated or repeated).")
@click.option("--executor", type=click.Choice(list(EXECUTORS)), default="local",
              show_default=True,
              help="; ".join(f"{name}: {summary}" for name, summary in EXECUTORS.items()) + ".")
@click.option("--model-timeout", type=Finite(min=0), default=DEFAULT_MODEL_TIMEOUT,
              show_default=True,
              help="Seconds one model may take; past it the model is stopped and reported as "
              "timeout, and the run goes on. 0: no limit.")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Fail when a model's arena grows against this baseline file.")
@click.option("--tolerance", type=Finite(min=0), default=0.0, show_default=True,
              help="Growth allowed against --baseline, as a fraction (0.01 = 1%).")
@click.option("--write-baseline", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the arenas of this run as a baseline file.")
@time_limit_flag
@custom_op_library_flag
def zoo(zoo_source: str, jobs: int, verify: str | None, out_dir: str, only: tuple[str, ...],
        executor: str, model_timeout: float, baseline: str | None, tolerance: float,
        write_baseline: str | None, time_limit: float = RUN_SECONDS, optimize: str = "none",
        custom_op_library: tuple[str, ...] = (), **plan_flags: Unpack[PlanningFlags]) -> None:
    """Plan (and with --verify, run) every model of a zoo; write results.json/.csv/.md.

    DIR_OR_LIST: a folder with catalog.json (from 'make zoo'), a folder of .onnx files, a
    catalog.json, or a text file of 'PATH [NAME=N | NAME=D1xD2.. | shape:NAME=D1..] ...'
    lines (NAME=N binds a dim like --dim; NAME=D1xD2.. pins an input like --input-shape;
    shape: pins any rank, 'shape:NAME=' a scalar; 'inputs:FILE.npz', 'branch:IF=then|else' and
    'measure-shapes' are that model's --inputs, --branch and --measure-shapes). A model that fails or runs past
    --model-timeout is reported and the run goes on. Exit code 0: all ok; 1: a model failed
    or timed out, or an arena grew against --baseline; 3: a plan failed verification.
    """
    from onnxmem.runtime.settings import check_libraries

    libraries = check_libraries(custom_op_library)
    inputs = _zoo_inputs(zoo_source, baseline) + list(libraries)
    patterns = [p for word in only for p in word.split(",") if p]
    models = zoo_lib.load_zoo(zoo_source, patterns)
    inputs += [m.path for m in models] + [m.options.inputs for m in models if m.options.inputs is not None]
    _check_zoo_outputs(inputs, out_dir, write_baseline, [m.name for m in models],
                       copies=bool(verify) or optimize != "none")
    base = zoo_lib.read_baseline(baseline) if baseline else None
    if base is not None:
        zoo_lib.check_baseline_names([m.name for m in models], base)
    opts = make_plan_options(**plan_flags, optimize=optimize, device=verify or "cpu")
    options = zoo_lib.ZooOptions(plan=opts, verify=verify, jobs=jobs, executor=executor,
                                 work_dir=Path(out_dir), model_timeout=model_timeout, time_limit=time_limit,
                                 custom_ops=libraries)
    started = time.time()
    meta = {
        "command": "onnxmem zoo " + " ".join(sys.argv[2:]),
        "machine": zoo_lib.machine_info(),
        "options": {**{k: v for k, v in plan_flags.items() if v not in ((), None, False)},
                    "verify": verify, "optimize": optimize, "jobs": jobs, "executor": executor,
                    "model_timeout": model_timeout, **({"custom_op_library": list(libraries)} if libraries else {})},
        "seconds": 0.0,
    }
    zoo_lib.check_zoo_run(models, options)  # before the progress bar: an error is one line
    writer = zoo_lib.ResultsWriter(out_dir, [m.name for m in models], meta, inputs=inputs)
    results = _run_with_progress(models, options, writer, started)
    paths = writer.write(seconds=round(time.time() - started, 1))
    if write_baseline:
        zoo_lib.write_baseline(results, write_baseline, {"options": meta["options"]}, inputs=inputs)
    click.echo(zoo_lib.results_markdown(results), nl=False)
    click.echo(f"\nresults      {paths['md']}  {paths['csv']}  {paths['json']}")
    regressions = zoo_lib.compare_baseline(results, base, tolerance) if base is not None else []
    for note in zoo_lib.baseline_notes(results, base, whole_zoo=not patterns) if base is not None else []:
        click.echo(f"note: {note}", err=True)
    for reg in regressions:
        click.echo(f"regression: {reg}", err=True)
    if write_baseline:
        click.echo(f"baseline     {write_baseline}")
    if any(r.status == "wrong" for r in results):
        sys.exit(3)
    if regressions or any(r.status != "ok" for r in results):
        sys.exit(1)


def _run_with_progress(models: list[ZooModel], options: ZooOptions, writer: ResultsWriter,
                       started: float) -> list[ZooResult]:
    """Run the zoo with a progress bar on stderr, one line per model as it finishes."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from onnxmem.core.sizes import format_bytes
    from onnxmem.zoo.runner import run_zoo  # onnx

    console = Console(stderr=True)
    marks = {"ok": "[green]ok[/]", "wrong": "[red]WRONG[/]", "timeout": "[red]TIMEOUT[/]"}
    with Progress(TextColumn("[bold]zoo"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as bar:
        task = bar.add_task("", total=len(models))

        def done(r: ZooResult) -> None:
            writer.meta["seconds"] = round(time.time() - started, 1)
            writer.add(r)
            mark = marks.get(r.status, "[red]failed[/]")
            extra = (f"arena {format_bytes(r.arena_size)}" if r.arena_size is not None else "")
            if r.verify != "not run":
                extra += f", verify {r.verify}"
            if r.error:
                extra += f": {r.error}"
            # the name and the error are data (a model's strings): escaped, never markup
            line = one_line(f"{r.name} ({r.seconds:.1f} s) {extra}")
            bar.console.print(f"{mark} {escape(line)}", highlight=False, markup=True, soft_wrap=True)
            bar.update(task, advance=1, description=r.name)

        return run_zoo(models, options, done)


def _zoo_inputs(source: str, baseline: str | None) -> list[str | os.PathLike[str]]:
    """The zoo's list (or catalogue) and baseline files, each checked to be a regular, bounded file."""
    inputs: list[str | os.PathLike[str]] = []
    if os.path.exists(source) and not os.path.isdir(source):
        check_input(source, "zoo list", MAX_DATA_BYTES)
        inputs.append(source)
    if baseline:
        check_input(baseline, "--baseline file", MAX_DATA_BYTES)
        inputs.append(baseline)
    return inputs


def _check_zoo_outputs(inputs: list[str | os.PathLike[str]], out_dir: str, write_baseline: str | None,
                       names: list[str], copies: bool = False) -> None:
    """Every file the run writes (the results, each model's plan, the baseline and, with ``copies``,
    each model's runnable copy) passes the checks of ``OutputSet`` against every input (the list,
    the baseline, the models), before any work."""
    outs = OutputSet(inputs)
    above = os.path.dirname(os.path.abspath(out_dir))
    while not os.path.lexists(above):  # the folders the run makes: under a file, none can be
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise OnnxmemError(f"--out {show_name(out_dir)} is under {show_name(above)}, which is not a folder; "
                           "give a folder path")
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise OnnxmemError(f"--out {show_name(out_dir)} exists and is not a folder; give a folder path")
        for sub in ("plans", "models"):
            if os.path.lexists(os.path.join(out_dir, sub)) and not os.path.isdir(os.path.join(out_dir, sub)):
                raise OnnxmemError(f"--out {show_name(out_dir)} holds {show_name(sub)}, which is not a folder; "
                                   "remove it or give another --out")
        for name in ("results.json", "results.csv", "results.md"):
            outs.add(os.path.join(out_dir, name), "--out")
        if os.path.isdir(os.path.join(out_dir, "plans")):
            for name in names:
                outs.add(os.path.join(out_dir, "plans", f"{name}.json"), "--out (a model's plan)")
        if copies and os.path.isdir(os.path.join(out_dir, "models")):
            for name in names:
                for file in (f"{name}.onnx", f"{name}.onnx.data"):
                    outs.add(os.path.join(out_dir, "models", file), "--out (a model's runnable copy)")
    if write_baseline is not None:
        outs.add(write_baseline, "--write-baseline")

