"""``onnxmem plan``: plan one model (a point or a range plan, with or without a budget), or
several models in one arena, write the plan and print its summary."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import click

from onnxmem.core.errors import one_line
from onnxmem.core.fileio import OutputSet

from .main import loading
from .options import (
    InputValues,
    PlanningFlags,
    RegistryChoice,
    device_option,
    inputs_option,
    libraries_read,
    make_plan_options,
    optimize_option,
    pipeline_option,
    planning_options,
    ranged,
    read_input_values,
    refuse_for_several,
    time_limit_option,
)
from .output import (
    deployment_lines,
    echo_warnings,
    fmt_bytes,
    plan_summary,
    png_path,
    program_summary,
    progress,
)
from .sources import add_weight_files, plan_several

if TYPE_CHECKING:
    import onnx

    from onnxmem.model import ExternalData
    from onnxmem.planning.pipeline import Planned, PlanOptions
    from onnxmem.plans import Program
    from onnxmem.plans.point import MemoryPlan


@click.command()
@click.argument("models", metavar="MODEL...", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the JSON plan here.")
@click.option("--annotate", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the model with the plan attached and nodes in planned order (with --order onnxruntime, "
                   "in the file's order, from which onnxruntime derives the plan's).")
@planning_options
@inputs_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of the summary.")
@click.option("--budget", default=None, metavar="SIZE",
              help="Fit the arena into SIZE (bytes, 64MiB, or 0.5x the arena without a budget), "
                   "recomputing values when order, sharing and assignment are not enough.")
@click.option("--runtime-overhead", default=None, metavar="SIZE",
              help="With --budget: bytes the runtime asks for beside the arena, the same with and without "
                   "recomputation (onnxruntime-training's Module on CPU: 3MiB, docs/remat.md); the budget then "
                   "holds for the arena and them together (0.5x: half the original's arena plus them).")
@click.option("--rewrite-out", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="With --budget: write the rewritten model (recomputed nodes duplicated; annotated with its plan).")
@click.option("--remat", "remat_algorithm", type=RegistryChoice("remat"), default="auto", show_default=True,
              help="Recomputation algorithm; 'onnxmem list remat' names each with what it does.")
@click.option("--remat-order", "remat_order", type=click.Choice(["onnxruntime", "planner"]), default="onnxruntime",
              show_default=True,
              help="With --budget: the order the rewrite is made for. onnxruntime: the order onnxruntime runs it in "
                   "by default (duplicates wait for what their reader reads); planner: the planner's order, which "
                   "onnxruntime keeps with SessionOptions.execution_order = PRIORITY_BASED.")
@click.option("--cost", "cost_model", type=click.Choice(["flops", "measured"]), default="flops", show_default=True,
              help="What a recomputed node costs: FLOPs from shapes, or onnxruntime's measured kernel time.")
@click.option("--budget-sweep", default=None, type=click.Path(dir_okay=False, path_type=str), metavar="PNG",
              help="Plan every recomputation algorithm at 0.9x .. 0.3x the unbudgeted arena; print the "
                   "frontier (arena against extra compute) and draw it to PNG.")
@click.option("--fixed-cost", is_flag=True,
              help="Measure onnxruntime's fixed cost on --device (a session in a child process) and print the "
                   "deployment's total and the process's predicted peak; without it the summary counts "
                   "weights + arena + io and plan starts no onnxruntime.")
@pipeline_option
@optimize_option("none")
@device_option("With --optimize: the provider onnxruntime builds the graph for.")
@time_limit_option(lambda kw: bool(kw.get("measure_shapes")) or kw.get("optimize") != "none"
                   or _measures_fixed_cost(kw))
def plan(models: tuple[str, ...], output: str | None, annotate: str | None, solver: str, order: str,
         alignment: int, dims: tuple[str, ...], input_shapes: tuple[str, ...], measure_shapes: bool,
         io: str, timeout: float | None, inplace: str, fold: str, concurrency: str, branches: tuple[str, ...],
         inputs_path: str | None, as_json: bool, budget: str | None = None, rewrite_out: str | None = None,
         remat_algorithm: str = "auto", cost_model: str = "flops", budget_sweep: str | None = None,
         pipeline: bool = False, optimize: str = "none", device: str = "cpu", fixed_cost: bool = False,
         max_trips: int | None = None, checkpoint: str | None = None, remat_order: str = "onnxruntime",
         runtime_overhead: str | None = None) -> None:
    """Plan the activation memory of MODEL and print the summary.

    With --measure-shapes the model runs once on --inputs (where given) and seeded random values
    for the others; the plan records the small values it ran on, which verify and compare feed
    where given none. A --dim NAME=LO:HI (inclusive, or NAME=LO:HI:STEP) makes a range plan: one
    plan for every shape in the box, offsets as formulas in the dims (docs/range.md).

    Several models (a training step and its eval step) run one at a time in
    one arena: each is planned with the same flags, then all of them together,
    into one program plan (docs/training.md); with --pipeline each model's
    graph outputs that are the next one's graph inputs stay in the arena.

    With --optimize LEVEL the graph planned is the one onnxruntime builds from
    MODEL at that level for --device (--optimize all --device cpu: the graph a
    default CPU session runs); the plan records the level, the provider and the
    onnxruntime version, and verify holds it to them.
    """
    with loading():
        from onnxmem.planning.pipeline import plan_loaded, plan_model  # onnx

    if optimize != "none":
        _refuse_for_optimized({"--budget": budget is not None, "--budget-sweep": budget_sweep is not None,
                               "--rewrite-out": rewrite_out is not None, "--annotate": annotate is not None,
                               "--pipeline": pipeline, "planning several models": len(models) > 1})
    if len(models) > 1 or pipeline:
        refuse_for_several(models, {"--budget": budget is not None, "--budget-sweep": budget_sweep is not None,
                                    "--rewrite-out": rewrite_out is not None, "--annotate": annotate is not None,
                                    "--inputs": inputs_path is not None, "--dim NAME=LO:HI": ranged(dims),
                                    "--concurrency dag": concurrency != "sequential", "--branch": bool(branches)})
        opts = make_plan_options(solver, order, alignment, dims, input_shapes, measure_shapes, io, timeout,
                                 inplace=inplace, fold=fold, max_trips=max_trips, checkpoint=checkpoint)
        _plan_together(models, opts, output, as_json, pipeline)
        return
    model = models[0]
    outs = OutputSet(inputs=[model, *(p for p in (inputs_path, checkpoint) if p), *libraries_read()])
    if ranged(dims):
        _refuse_for_range(budget is not None or budget_sweep is not None or rewrite_out is not None,
                          concurrency, branches)
        flags = PlanningFlags(solver=solver, order=order, alignment=alignment, dims=dims, input_shapes=input_shapes,
                              measure_shapes=measure_shapes, io=io, timeout=timeout, inplace=inplace, fold=fold,
                              concurrency=concurrency, branches=branches, max_trips=max_trips, checkpoint=checkpoint)
        _plan_range(model, outs, output, annotate, as_json, flags, read_input_values(inputs_path), optimize, device)
        return
    if output is not None:  # an empty path is refused by name, not taken as no file
        outs.add(output, "-o")
    if annotate is not None:
        outs.add(annotate, "--annotate")
    opts = make_plan_options(solver, order, alignment, dims, input_shapes, measure_shapes, io, timeout,
                             inplace=inplace, fold=fold, inputs=read_input_values(inputs_path),
                             concurrency=concurrency, branches=branches, optimize=optimize, device=device,
                             max_trips=max_trips, checkpoint=checkpoint)
    if budget_sweep is not None:
        _refuse_for_sweep(budget, rewrite_out, runtime_overhead, output, annotate)
        _budget_sweep(model, opts, outs, budget_sweep, cost_model, timeout, remat_order)
        return
    _need_budget(budget, {"--rewrite-out": (rewrite_out, "writes the model --budget rewrites"),
                          "--runtime-overhead": (runtime_overhead, "counts beside a --budget")})
    if budget is not None:
        _plan_budget(model, opts, outs, output, annotate, budget, rewrite_out, remat_algorithm, cost_model,
                     timeout, as_json, remat_order, runtime_overhead)
        return
    say = progress(sys.stderr.isatty() and not as_json)
    if optimize == "none":  # the loader's references to the weight files: the model is walked once
        say("reading model")
        onnx_model, refs = _load(model)
        result = plan_loaded(onnx_model, model, opts, say)
    else:
        result = plan_model(model, opts, progress=say)
        onnx_model, refs = _load(model)
    add_weight_files(outs, onnx_model, model, refs)
    _write_and_print(outs, result.model, result.plan, model, output, annotate, as_json,
                     lines=() if as_json else deployment_lines(result.plan, result.view, device if fixed_cost else None))


def _measures_fixed_cost(kw: dict[str, object]) -> bool:
    """Whether ``plan`` prints the deployment lines, whose fixed cost onnxruntime's child measures
    (started at once, it loads onnxruntime while this process plans)."""
    models = kw.get("models") or ()
    return (bool(kw.get("fixed_cost")) and not kw.get("as_json") and len(models) == 1 and not kw.get("pipeline")  # type: ignore[arg-type]
            and kw.get("budget") is None and kw.get("budget_sweep") is None
            and not ranged(kw.get("dims") or ()))  # type: ignore[arg-type]


def _refuse_for_optimized(flags: dict[str, bool]) -> None:
    """Usage errors for --optimize: the flags that rewrite or annotate the model as written."""
    for flag, given in flags.items():
        if given:
            raise click.UsageError(f"{flag} works on the graph as written; leave out --optimize (or give "
                                   "--optimize none) for it")


def _load(model: str) -> tuple[onnx.ModelProto, list[ExternalData]]:
    """The model at ``model`` and its external weights' references (:func:`onnxmem.model.load_model_data`)."""
    from onnxmem.model import load_model_data  # onnx

    return load_model_data(model)


def _need_budget(budget: str | None, flags: dict[str, tuple[str | None, str]]) -> None:
    """Without ``budget``: a usage error for the first of ``flags`` (flag -> its value, what it
    does) that is given, as each means nothing without ``--budget``."""
    for flag, (value, does) in flags.items():
        if budget is None and value is not None:
            raise click.UsageError(f"{flag} {does}; give --budget too")


def _refuse_for_sweep(budget: str | None, rewrite_out: str | None, runtime_overhead: str | None,
                      output: str | None, annotate: str | None) -> None:
    """Usage errors for --budget-sweep: it plans many budgets and writes the frontier's drawing
    alone, so the flags of one budget's plan and its files mean nothing beside it."""
    given = {"--budget": budget, "--rewrite-out": rewrite_out, "--runtime-overhead": runtime_overhead,
             "-o": output, "--annotate": annotate}
    for flag, value in given.items():
        if value is not None and value != "":
            raise click.UsageError(f"{flag} goes with one budget's plan; --budget-sweep plans many and writes "
                                   "only its drawing: run them as two commands")


def _refuse_for_range(budgeted: bool, concurrency: str, branches: tuple[str, ...]) -> None:
    """Usage errors for a range plan (a ranged --dim): the flags that plan one shape."""
    if budgeted:
        raise click.UsageError("--budget, --budget-sweep and --rewrite-out plan one shape; "
                               "bind every --dim to one value (NAME=N)")
    if concurrency != "sequential":
        raise click.UsageError("a range plan holds for its own operator order; plan with --concurrency dag "
                               "at one shape (bind every --dim to one value, NAME=N)")
    if branches:
        raise click.UsageError("--branch plans one shape; bind every --dim to one value (NAME=N)")


def _plan_together(models: tuple[str, ...], opts: PlanOptions, output: str | None, as_json: bool,
                   pipeline: bool) -> None:
    """``plan A.onnx B.onnx``: each model, then all of them in one arena (a program plan)."""
    outs = OutputSet(inputs=[*models, *([opts.checkpoint] if opts.checkpoint else []), *libraries_read()])
    if output is not None:
        outs.add(output, "-o")
    planned, program = plan_several(models, opts, pipeline, progress(sys.stderr.isatty() and not as_json))
    for p, path in zip(planned, models):
        add_weight_files(outs, p.model, path)
    _write_program(outs, program, output, as_json)


def _write_program(outs: OutputSet, program: Program, output: str | None, as_json: bool) -> None:
    """``plan``'s program plan file (all or none) and its summary."""
    from onnxmem.plans import render_program

    data = render_program(program)
    if output:
        outs.put(output, data)
    outs.commit()
    if as_json:
        click.echo(data.decode("utf-8"), nl=False)
        return
    for line in program_summary(program):
        click.echo(line)
    if output:
        click.echo(f"plan         {one_line(output)}")


def _write_and_print(outs: OutputSet, onnx_model: onnx.ModelProto, the_plan: MemoryPlan, model: str,
                     output: str | None, annotate: str | None, as_json: bool, lines: Iterable[str] = (),
                     rewrite_out: str | None = None) -> None:
    """``plan``'s outputs (all or none) and its summary, with ``lines`` after it."""
    if output:
        outs.put_writer(output, the_plan.write_json)
    for path, flag in ((annotate, "--annotate"), (rewrite_out, "--rewrite-out")):
        if path:
            # the exporters are loaded for these flags only
            from onnxmem.export.annotate import render_annotated

            outs.put(path, render_annotated(onnx_model, the_plan, model, path, flag))
    outs.commit()
    if as_json:
        click.echo(the_plan.to_json(), nl=False)
        return
    for line in [*plan_summary(the_plan), *lines]:
        click.echo(line)
    echo_warnings(the_plan.warnings)
    for label, path in (("plan", output), ("annotated", annotate), ("rewritten", rewrite_out)):
        if path:
            click.echo(f"{label:<12} {one_line(path)}")


def _plan_budget(model: str, opts: PlanOptions, outs: OutputSet, output: str | None, annotate: str | None,
                 budget: str, rewrite_out: str | None, algorithm: str, cost_model: str, timeout: float | None,
                 as_json: bool, keep: str, runtime_overhead: str | None = None) -> None:
    """``plan --budget``: plan, recompute when needed, write and summarize."""
    from onnxmem.core.sizes import parse_size
    from onnxmem.remat.budget import parse_budget, plan_with_budget

    size, factor = parse_budget(budget)
    overhead = 0 if runtime_overhead is None else parse_size(runtime_overhead, "--runtime-overhead")
    if rewrite_out is not None:
        outs.add(rewrite_out, "--rewrite-out")
    onnx_model, refs = _load(model)
    add_weight_files(outs, onnx_model, model, refs)
    got = plan_with_budget(onnx_model, model, opts, budget=size, factor=factor, algorithm=algorithm,
                           cost_model=cost_model, timeout=timeout, keep=keep,
                           progress=progress(sys.stderr.isatty() and not as_json), overhead=overhead)
    planned = got.planned
    if rewrite_out is not None and got.rewritten is not None:
        planned = _replace_path(planned, rewrite_out)
    the_plan = planned.plan
    lines = [f"budget       {fmt_bytes(got.budget)}   arena without a budget {fmt_bytes(got.original.plan.arena_size)}"]
    if overhead:
        lines.append(f"beside it    {fmt_bytes(overhead)} the runtime asks for (--runtime-overhead): "
                     f"{fmt_bytes(got.budget + overhead)} in all, against "
                     f"{fmt_bytes(got.original.plan.arena_size + overhead)} without a budget")
    if got.choice is None:
        lines.append("recompute    nothing: the plan fits without recomputation")
    else:
        n = len(the_plan.extra["remat"]["recomputed"])
        moved = len(the_plan.extra["remat"].get("moved", ()))
        also = f", {moved} of them computed once, later" if moved else ""
        lines.append(f"recompute    {n} values{also} ({one_line(got.choice.algorithm)}, {got.choice.status})   extra compute "
                     f"{got.extra:,} {'FLOPs' if got.cost_model == 'flops' else 'ns'} "
                     f"({got.extra_percent:.2f}% of the model's)")
        lines.append(_session_line(keep))
    _write_and_print(outs, planned.model, the_plan, model, output, annotate, as_json, lines, rewrite_out)
    if got.rewritten is not None and rewrite_out is None and annotate is None:
        click.echo("warning: the plan is for the rewritten model, which was not written; pass --rewrite-out FILE.onnx",
                   err=True)


def _session_line(keep: str) -> str:
    """The line saying how to make the session that runs a rewrite made for ``keep``'s order."""
    told = ["enable_mem_reuse = False", "enable_mem_pattern = False"]
    told += ["execution_order = PRIORITY_BASED"] if keep == "planner" else []
    return (f"onnxruntime  run the rewrite with SessionOptions.{', '.join(told[:-1])} and {told[-1]}: with reuse on, "
            "onnxruntime holds a dropped value's buffer until a later output of the same shape takes it, across the "
            "gap the recomputation made; with memory patterns on, a later run allocates the pattern's block beside "
            "what the first run left in the arena (docs/remat.md)")


def _replace_path(planned: Planned, path: str) -> Planned:
    """``planned`` with its plan naming the model at ``path``."""
    return replace(planned, plan=replace(planned.plan, model={**planned.plan.model, "path": path}))


def _budget_sweep(model: str, opts: PlanOptions, outs: OutputSet, png: str, cost_model: str,
                  timeout: float | None, keep: str) -> None:
    """``plan --budget-sweep PNG``: the frontier, printed and drawn."""
    from onnxmem.remat.budget import plot_sweep, sweep

    outs.add(png, "--budget-sweep")
    png_path(png, "--budget-sweep")
    onnx_model, refs = _load(model)
    add_weight_files(outs, onnx_model, model, refs)  # no picture replaces the model's weights
    original, points = sweep(onnx_model, model, opts, cost_model=cost_model, timeout=timeout, keep=keep,
                             progress=progress(sys.stderr.isatty()))
    base = original.plan.arena_size
    outs.put(png, plot_sweep(points, base, f"{Path(model).name}: arena against extra compute"))
    outs.commit()
    click.echo(f"arena without a budget {fmt_bytes(base)}")
    click.echo(f"{'budget':>7}  {'algorithm':<9}  {'arena':>14}  {'x':>5}  {'extra':>8}  status")
    for p in points:
        arena = f"{p.arena:,}" if p.fits else "-"
        ratio = f"{p.arena / base:.3f}" if p.fits else "-"
        extra = f"{p.extra_percent:.2f}%" if p.fits else "-"
        click.echo(f"{p.factor:>6.2f}x  {p.algorithm:<9}  {arena:>14}  {ratio:>5}  {extra:>8}  {p.status}")
    click.echo(f"plot         {one_line(png)}")


def _plan_range(model: str, outs: OutputSet, output: str | None, annotate: str | None, as_json: bool,
                planning: PlanningFlags, inputs: InputValues | None, optimize: str, device: str) -> None:
    """``onnxmem plan`` with a ranged --dim: plan the box, prove it, write the range plan
    (``planning``'s ranged dims are the box, the others bind their dims)."""
    from onnxmem.planning import parse_dim_flags, plan_range_optimized
    from onnxmem.plans import range_to_dict, render_range_plan
    from onnxmem.report.range import render_range_summary
    from onnxmem.runtime.optimize import optimized_model

    if annotate is not None:
        raise click.UsageError("--annotate writes a plan for one shape; instantiate the range plan "
                               "('onnxmem instantiate') and annotate that")
    fixed, box, steps = parse_dim_flags(planning["dims"])
    flags = planning.copy()
    flags["dims"] = tuple(f"{k}={v}" for k, v in fixed.items())
    opts = make_plan_options(**flags, inputs=inputs)
    if output is not None:
        outs.add(output, "-o")
    onnx_model, refs = _load(model)
    add_weight_files(outs, onnx_model, model, refs)
    with optimized_model(model, optimize, device, model=onnx_model) as built:
        result = plan_range_optimized(built, box, opts, steps=steps)
    if output:
        outs.put(output, render_range_plan(result))
    outs.commit()
    if as_json:
        click.echo(json.dumps(range_to_dict(result), indent=1))
        return
    for line in render_range_summary(result):
        click.echo(one_line(line))
    click.echo("proof        ok: every pair of buffers live together is apart on the whole box")
    if output:
        click.echo(f"plan         {one_line(output)}")

