"""``onnxmem compare``: onnxruntime's own activation peak beside the plan's arena."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from onnxmem.core.errors import PlanInvalid, one_line, show_name

from .options import (
    MAX_THREADS,
    InputValues,
    PlanningFlags,
    RegistryChoice,
    given,
    inputs_option,
    model_and_plan,
    optimize_option,
    plan_making_flags,
    planning_options,
    read_input_values,
    time_limit_option,
)
from .output import deployment_lines, echo_warnings, fmt_bytes, measured_session_lines, progress
from .registries import EXECUTION_MODES
from .sources import plan_or_point

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from onnxmem.graph import GraphView
    from onnxmem.plans.point import MemoryPlan
    from onnxmem.runtime.optimize import Optimized
    from onnxmem.runtime.peak import OrtPeak


@click.command()
@model_and_plan("A JSON plan to compare", "Where onnxruntime runs.")
@inputs_option
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--execution-mode", type=RegistryChoice(names=EXECUTION_MODES), default="sequential",
              show_default=True, metavar="MODE",
              help="parallel: onnxruntime runs with its parallel executor (--threads inter-op threads), and a "
                   "plan made now is made with --concurrency dag (unless --concurrency says otherwise).")
@click.option("--threads", type=click.IntRange(min=1, max=MAX_THREADS), default=2, show_default=True,
              help="With --execution-mode parallel: onnxruntime's inter-op threads.")
@planning_options
@optimize_option(None)
@time_limit_option(lambda kw: True)
def compare(model: str, plan_path: str | None, device: str, inputs_path: str | None, seed: int,
            execution_mode: str, threads: int, optimize: str | None = None,
            **planning: Unpack[PlanningFlags]) -> None:
    """Print onnxruntime's own activation peak beside the plan's arena for MODEL.

    Both sides count the same tensors: with --io internal (the default) the
    arena holds the graph inputs, so onnxruntime's peak is shown plus the graph
    inputs, which its caller holds through the run. onnxruntime runs the graph
    the plan describes (values the plan folds are its initializers) at
    ORT_DISABLE_ALL, and with its own optimizations at ORT_ENABLE_BASIC
    (constant folding; like for like with --fold on) and ORT_ENABLE_ALL,
    each tensor its own allocation; then in its default session (memory
    patterns on: from run 2 one block sized by its own planner, held through
    the run, plus the outputs), the figure a user's process gets.
    Each level shows the bytes requested (exact tensor sizes) and the bytes its
    allocator held (each allocation rounded as its arena rounds it, as the plan
    pads each offset to --alignment).

    A plan read (--plan, or carried by an annotated MODEL) is held to the static
    proof of 'verify --static-only' before onnxruntime runs: exit code 3 when it is
    wrong.

    With --optimize LEVEL the plan is of the graph onnxruntime builds at LEVEL
    for --device (plan --optimize), and onnxruntime's peak is MODEL run at
    that same level.
    """
    if execution_mode != "parallel" and given("threads"):
        raise click.UsageError("--threads sets onnxruntime's inter-op threads of --execution-mode parallel; add "
                               "--execution-mode parallel (or leave out --threads)")
    idle = plan_making_flags(plan_path)
    inputs = read_input_values(inputs_path)
    if execution_mode == "parallel" and not given("concurrency"):
        planning["concurrency"] = "dag"
    from onnxmem.planning.given import check_decided  # onnx

    say = progress(sys.stderr.isatty())
    with plan_or_point(model, plan_path, planning, seed, inputs, say, optimize=optimize, device=device,
                       idle_flags=idle) as got:
        _, built, the_plan, view, source, proven = got
        # a plan whose Ifs its assumed values decided holds their branches alone: onnxruntime runs on
        # those values too (else its figure could be a run of a branch the plan does not hold)
        inputs = check_decided(built.model, the_plan, inputs)
        view = view if proven is not None and view is not None else _proven_view(
            model, plan_path, built, the_plan, view, inputs)
        say("profiling onnxruntime")
        peaks = _profile(model, built, the_plan, view, device, seed, inputs, execution_mode, threads)
    arena = the_plan.arena_size
    click.echo(f"model                  {one_line(model)}")
    click.echo(f"plan                   {one_line(source)}")
    click.echo(f"naive (no reuse)       {fmt_bytes(the_plan.naive_size)}   {_ratio(the_plan.naive_size, arena)} the arena")
    _echo_peaks(peaks, view, the_plan, threads)
    click.echo(f"lower bound            {fmt_bytes(the_plan.lower_bound)}   {_ratio(the_plan.lower_bound, arena)} "
               "the arena")
    conc = str(the_plan.extra.get("concurrency", "sequential"))
    click.echo(f"onnxmem arena          {fmt_bytes(arena)}   {_ratio(arena, the_plan.lower_bound)} the bound"
               f"   [--concurrency {conc}]")
    for line in (*deployment_lines(the_plan, view, device), *measured_session_lines(model, view, device, inputs, seed)):
        click.echo(one_line(line))
    if execution_mode == "parallel" and conc != "dag":
        click.echo("warning: the plan holds for its own order only (--concurrency sequential); onnxruntime's parallel "
                   "executor may run another", err=True)
    _echo_notes(the_plan)


def _proven_view(model: str, plan_path: str | None, built: Optimized, the_plan: MemoryPlan, view: GraphView | None,
                 inputs: InputValues | None) -> GraphView:
    """The view of a plan read (``--plan``, or carried by the model), held to the static proof
    ``verify --static-only`` runs: ``PlanInvalid`` when it breaks a rule (a wrong plan's arena is
    no figure to compare). A plan of the graph as written is first checked to be for MODEL; one of
    onnxruntime's graph comes with that graph's ``view``, rebuilt and held to the plan's digest."""
    from onnxmem.proof import prove_plan
    from onnxmem.verify.run import check_plan_identity, view_for_plan

    if plan_path and built.record.level == "none":
        view, said = check_plan_identity(the_plan, built.model, model, plan_name=plan_path, view=view, inputs=inputs)
        echo_warnings(said)
    if view is None:
        view = view_for_plan(built.model, the_plan, built.path, inputs)
    found = prove_plan(the_plan, view, limit=1)
    if found:
        which = f"plan file {show_name(plan_path)}" if plan_path else "the plan the model carries"
        raise PlanInvalid(f"the plan is wrong: {found[0]}; {which} is not compared ('onnxmem verify MODEL --plan "
                          "PLAN --static-only' lists every finding): re-plan the model")
    return view


def _profile(model: str, built: Optimized, the_plan: MemoryPlan, view: GraphView, device: str, seed: int,
             inputs: InputValues | None, execution_mode: str, threads: int) -> list[OrtPeak]:
    """onnxruntime's peaks: for a plan of the graph as written, at ORT_DISABLE_ALL,
    ORT_ENABLE_BASIC and ORT_ENABLE_ALL; for a plan of onnxruntime's graph at a level, MODEL as
    written run at that level (the graph onnxruntime builds and runs); and onnxruntime's default
    session (memory patterns on, run 2) on the same model."""
    from onnxmem.model import check_loops_end, load_model
    from onnxmem.runtime.peak import ort_default_peak, ort_peak  # onnx
    from onnxmem.runtime.trips import check_trips
    from onnxmem.verify.run import view_for_plan

    check_loops_end(built.model.graph)  # a Loop that never ends: no run, rather than one stopped at --time-limit
    level = built.record.level
    if the_plan.extra.get("loop_trips"):  # a Loop whose values grow: no run past the bound the plan holds
        check_trips(built.model, view, the_plan.extra, model_path=built.path, seed=seed, inputs=inputs)
    if level == "none":
        runs = [(built.model, view, lvl) for lvl in ("disable", "basic", "all")]
    else:
        original = load_model(model)
        runs = [(original, view_for_plan(original, the_plan, model, inputs), level)]
    peaks = [ort_peak(m, v, level=lvl, device=device, model_path=model, seed=seed, inputs=inputs,
                      execution_mode=execution_mode, threads=threads) for m, v, lvl in runs]
    first, first_view, _ = runs[0]
    peaks.append(ort_default_peak(first, first_view, device=device, model_path=model, seed=seed, inputs=inputs))
    return peaks


def _ratio(a: int | None, b: int) -> str:
    """``a / b`` as ``'1.50x'``; ``'-'`` without both."""
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _echo_peaks(peaks: list[OrtPeak], view: GraphView, the_plan: MemoryPlan, threads: int) -> None:
    """One line per optimization level: onnxruntime's peak, counted as the arena counts, and
    the bytes its allocator held."""
    from onnxmem.runtime.peak import comparable_peak  # onnx

    io, arena = the_plan.io, the_plan.arena_size
    inputs_size = comparable_peak(0, view, "internal") or 0
    for p in peaks:
        label = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC (its constant folding)",
                 "extended": "ORT_ENABLE_EXTENDED (fused graph)",
                 "all": "ORT_ENABLE_ALL (its default: fused graph)",
                 "default": "default session (ORT_ENABLE_ALL, memory patterns on, run 2)"}[p.level]
        if p.execution_mode == "parallel":
            label += f", ORT_PARALLEL with {threads} inter-op threads (kernels ran on {p.threads_seen})"
        if p.peak is None:
            click.echo(f"onnxruntime peak       {label}: not available ({one_line(p.note)})")
            continue
        same = comparable_peak(p.peak, view, io) or 0
        how = (f"{fmt_bytes(p.peak)} allocated + {fmt_bytes(inputs_size)} graph inputs" if io == "internal"
               else f"{fmt_bytes(p.peak)} allocated - graph outputs")
        click.echo(f"onnxruntime peak       {fmt_bytes(same)}   {_ratio(same, arena)} the arena   "
                   f"[{label}: {how}; {p.field}]")
        if p.held is not None:
            held = comparable_peak(p.held, view, io) or 0
            click.echo(f"  held by onnxruntime  {fmt_bytes(held)}   {_ratio(held, arena)} the arena   "
                       f"[{label.split(' ')[0]}: each allocation as its arena rounds it, mem_bytes_in_use; "
                       f"the arena pads offsets to {the_plan.alignment} B]")


def _echo_notes(the_plan: MemoryPlan) -> None:
    """What the two figures count, and why they differ for models with bodies."""
    if the_plan.io == "internal":
        click.echo("note: both figures count the graph inputs and outputs and no weights: onnxruntime allocates "
                   "the outputs, its caller holds the inputs through the run, the arena (--io internal) holds both")
    else:
        click.echo("note: neither figure counts graph inputs, outputs or weights (--io external); onnxruntime's "
                   "figure is its peak minus the outputs, a low estimate")
    if the_plan.subgraphs:
        body_bytes = sum(t.size for t in the_plan.tensors if t.kind == "region")
        click.echo(f"note: the arena holds the tensors of {len(the_plan.subgraphs)} subgraphs (If branches, Loop and "
                   f"Scan bodies) in regions of {fmt_bytes(body_bytes)} in all, each sized for its largest body "
                   "whatever the inputs; onnxruntime's figure is one run (on seeded random values for inputs not given "
                   "or assumed by the plan), which took one "
                   "branch of each If, and its profiler's allocator statistics miss some allocations made inside "
                   "control-flow nodes (a Scan's outputs, for one): the figures are not like for like")
    decided = the_plan.extra.get("branches_decided")
    if isinstance(decided, dict) and decided:
        names = ", ".join(sorted(show_name(k) for k in decided))
        click.echo(f"note: the plan holds one branch of If {names}, decided by the values it assumed "
                   "(extra.assumed_inputs); onnxruntime ran on those values, so it took the same branches")
