"""``onnxmem verify``: prove a plan, statically and by running the model inside one arena."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import click

from onnxmem.core.errors import PlanInvalid, one_line, show_name

from .child import run_in_child
from .options import (
    MAX_THREADS,
    Finite,
    InputValues,
    PlanningFlags,
    given,
    inputs_option,
    libraries_read,
    make_plan_options,
    model_and_plan,
    optimize_option,
    pipeline_option,
    plan_making_flags,
    planning_options,
    ranged,
    read_input_values,
    refuse_for_several,
    time_limit_option,
    warn_plan_making_flags,
)
from .output import echo_warnings, fmt_bytes, progress
from .sources import plan_or_point, plan_several

if TYPE_CHECKING:
    import onnx
    from typing_extensions import Unpack

    from onnxmem.graph import GraphView
    from onnxmem.plans.point import MemoryPlan
    from onnxmem.runtime.arena import Execution
    from onnxmem.runtime.concurrent import ConcurrentExecution
    from onnxmem.verify.program import ProgramReport
    from onnxmem.verify.run import VerifyOptions, VerifyReport


@click.command()
@model_and_plan("The JSON plan to verify", "Where the arena lives and the nodes run.", several=True)
@inputs_option
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--rtol", type=Finite(min=0), default=1e-4, show_default=True,
              help="Relative tolerance of the output comparison.")
@click.option("--atol", type=Finite(min=0), default=1e-5, show_default=True,
              help="Absolute tolerance of the output comparison.")
@click.option("--static-only", is_flag=True, help="Only the static proof; run nothing.")
@click.option("--every-node", is_flag=True,
              help="Run every node in the arena, shape arithmetic too. By default the values of shape "
                   "arithmetic (small values computed from shapes and weights alone) are written at their "
                   "offsets from the reference's run of their nodes (where each node runs again, as on "
                   "CUDA: from one run of them all on the CPU), as onnxruntime's own session folds those "
                   "nodes away; their writes are checked as every node's.")
@click.option("--save-outputs", "outputs_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              metavar="FILE.npz",
              help="Write the graph outputs as the arena run left them to FILE.npz (numpy.savez, by output "
                   "name), to compare with values of your own; written only when the plan holds.")
@click.option("--original", "original_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="MODEL was rewritten from this model (plan --budget --rewrite-out): also compare MODEL's "
                   "outputs in the arena with this model's own run, bit for bit.")
@click.option("--trials", type=click.IntRange(min=1), default=10, show_default=True,
              help="With --concurrency dag: how many concurrent runs, each with its own seeded schedule.")
@click.option("--threads", type=click.IntRange(min=1, max=MAX_THREADS), default=2, show_default=True,
              help="With --concurrency dag: how many nodes may run at once.")
@planning_options
@pipeline_option
@optimize_option(None)
@time_limit_option(lambda kw: not kw.get("static_only") or kw.get("optimize") not in (None, "none"))
def verify(models: tuple[str, ...], plan_path: str | None, device: str, inputs_path: str | None, seed: int,
           rtol: float, atol: float, static_only: bool, every_node: bool = False, trials: int = 10, threads: int = 2,
           original_path: str | None = None, pipeline: bool = False, optimize: str | None = None,
           outputs_path: str | None = None, **planning: Unpack[PlanningFlags]) -> None:
    """Prove a plan for MODEL: statically, then by running MODEL inside one arena.

    With --concurrency dag the proof also checks that the graph orders every
    pair of tensors that share bytes, and the run is --trials runs with up to
    --threads nodes at once, each following the graph in a seeded random order.

    Several models and a program plan ('plan A.onnx B.onnx -o PLAN'): each
    model's plan and the shared arena are proven, then the models run one
    after the other in one arena (handed-over tensors left where they were
    written).

    A plan made with --optimize is verified on the graph onnxruntime builds
    again as the plan records it (level, --device's provider); it is refused,
    before anything runs, for another --optimize, --device or onnxruntime
    version, or (at all, on CPU) another NCHWc block size, and when the graph
    built here is not the one planned (its sha256).

    Exit codes: 0 verified, 3 the plan is wrong, 1 any other error (a training
    graph with an op onnxruntime has no CPU kernel for and onnxmem no stand-in
    for, after its static proof passed: one line says so; ConvTransposeGrad runs
    as its stand-in of standard ops, and a note says so), 2 usage.
    """
    trial_flags = " and ".join(f for f, p in (("--trials", "trials"), ("--threads", "threads")) if given(p))
    idle = plan_making_flags(plan_path)
    if len(models) > 1 or pipeline:
        from onnxmem.verify.run import VerifyOptions  # onnx

        refuse_for_several(models, {"--original": original_path is not None, "--inputs": inputs_path is not None,
                                    "--every-node": every_node, "--save-outputs": outputs_path is not None,
                                    trial_flags: bool(trial_flags),
                                    "--optimize": optimize not in (None, "none"),
                                    "--dim NAME=LO:HI": ranged(planning["dims"]),
                                    "--concurrency dag": planning["concurrency"] != "sequential"})
        _verify_several(models, plan_path, pipeline, planning,
                        VerifyOptions(device=device, seed=seed, rtol=rtol, atol=atol, execute=not static_only), idle)
        return
    if original_path is not None and optimize not in (None, "none"):
        raise click.UsageError("--original compares models as written; leave out --optimize")
    if trial_flags and planning["concurrency"] != "dag":
        raise click.UsageError(f"{trial_flags} set the concurrent trials of --concurrency dag; add --concurrency dag "
                               f"(or leave out {trial_flags})")
    if every_node and static_only:
        raise click.UsageError("--static-only runs nothing; leave out --every-node (or --static-only)")
    if outputs_path is not None:
        _check_save_outputs(outputs_path, static_only, planning["concurrency"], (models[0], plan_path, inputs_path))
    if trial_flags and static_only:
        raise click.UsageError(f"--static-only runs nothing; leave out {trial_flags} (or --static-only)")
    one = _Verify(models[0], plan_path, device, inputs_path, seed, rtol, atol, static_only, trials, threads,
                  original_path, optimize, dict(planning), every_node, idle, outputs_path)
    if static_only and optimize in (None, "none"):
        _verify_one(one)  # nothing to run (unless shapes must be measured: that run goes to the child)
    else:  # the whole command in its onnxruntime child, which loads numpy, onnx and onnxruntime anyway
        run_in_child(_verify_one, one)


@dataclass(frozen=True, slots=True)
class _Verify:
    """The flags of ``verify MODEL``, as :func:`_verify_one` takes them (across the pipe to the child)."""

    model: str
    plan_path: str | None
    device: str
    inputs_path: str | None
    seed: int
    rtol: float
    atol: float
    static_only: bool
    trials: int
    threads: int
    original_path: str | None
    optimize: str | None
    planning: dict[str, Any]
    every_node: bool = False
    #: the plan-making flags given with --plan, warned of once the plan is read
    idle_flags: tuple[str, ...] = ()
    #: --save-outputs
    outputs_path: str | None = None


def _check_save_outputs(path: str, static_only: bool, concurrency: str, read: tuple[str | None, ...]) -> None:
    """--save-outputs: refused where no single run leaves the outputs, and its path checked before any
    work (``read``: the files the command reads, which it must not be)."""
    from onnxmem.core.fileio import OutputSet

    if static_only:
        raise click.UsageError("--static-only runs nothing; leave out --save-outputs (or --static-only)")
    if concurrency == "dag":
        raise click.UsageError("--concurrency dag makes several runs; leave out --save-outputs (or the concurrency)")
    OutputSet([*(r for r in read if r), *libraries_read()]).add(path, "--save-outputs")


def _verify_one(a: _Verify) -> None:
    """``verify MODEL``: plan or read the plan, prove it, run it, print the lines."""
    from onnxmem.verify.run import VerifyOptions, verify_plan  # onnx

    model, plan_path, device, seed, rtol, atol = a.model, a.plan_path, a.device, a.seed, a.rtol, a.atol
    planning = cast("PlanningFlags", a.planning)
    inputs = read_input_values(a.inputs_path)
    say = progress(sys.stderr.isatty())
    with plan_or_point(model, plan_path, planning, seed, inputs, say, optimize=a.optimize, device=device,
                       idle_flags=a.idle_flags) as got:
        opts, built, the_plan, view, source, proven = got
        as_written = built.record.level == "none"
        say("verifying")
        report = verify_plan(
            built.model, the_plan, model_path=built.path, view=view, plan_name=plan_path if as_written else None,
            proven=proven,
            options=VerifyOptions(device=device, inputs=inputs, seed=seed, rtol=rtol, atol=atol,
                                  execute=not a.static_only, concurrency=opts.concurrency, trials=a.trials,
                                  threads=a.threads, handed=not a.every_node,
                                  keep_outputs=a.outputs_path is not None),
        )
        held = "dag" if the_plan.extra.get("concurrency") == "dag" else opts.concurrency  # rule 9 held too
        _echo_report(report, model, source, built.record.describe(), held, the_plan.extra.get("loop_trips") or {})
    if a.original_path is not None and report.execution is not None:
        _against_original(model, built.model, the_plan, view, a.original_path, device, inputs, seed, rtol, atol)
    if a.outputs_path is not None and report.execution is not None and report.execution.values is not None:
        _save_outputs(a.outputs_path, report.execution.values, model)
    click.echo("verified" if report.execution is not None or report.concurrent is not None
               else "verified (static proof only)")


def _save_outputs(path: str, values: Mapping[str, Any], model: str) -> None:
    """--save-outputs: the arena run's graph outputs in one npz file, as ``--inputs`` and ``numpy.load``
    read it (:func:`onnxmem.runtime.inputs.write_arrays`), written whole or not at all."""
    from onnxmem.core.fileio import write_stream_atomic
    from onnxmem.runtime.inputs import write_arrays

    write_stream_atomic(path, write_arrays(values, "--save-outputs"), "--save-outputs",
                        inputs=[model, *libraries_read()])  # (checked before the work too)
    click.echo(f"outputs   {one_line(path)}: {len(values)} graph outputs as the arena run left them")


def _echo_report(report: VerifyReport, model: str, source: str, graph: str, concurrency: str,
                 loops: Mapping[str, Any] | None = None) -> None:
    """verify's lines for one model; ``PlanInvalid`` when the plan is wrong. ``graph``: the
    graph verified (:meth:`onnxmem.plans.optimization.Optimization.describe`); ``loops``: the
    plan's ``extra.loop_trips`` (the Loops whose values grow, each with its bound)."""
    click.echo(f"model     {one_line(model)}")
    click.echo(f"plan      {one_line(source)}")
    if graph != "the graph as written":
        click.echo(f"graph     onnxruntime's, {graph}")
    click.echo(f"arena     {fmt_bytes(report.arena_size)}   {report.tensors} tensors   {report.nodes} nodes")
    if not _echo_static_failures(report):
        click.echo(f"static    ok ({report.static_seconds * 1000:.1f} ms): order topological, tensors match, "
                   "aligned, in the arena, no live overlap"
                   + (", every pair sharing bytes ordered by the graph" if concurrency == "dag" else ""))
        for name, entry in (loops or {}).items():
            if isinstance(entry, dict):
                given = "its trip count" if entry.get("source") == "model" else "--max-trips"
                click.echo(f"loop      {one_line(show_name(name))}: sized for at most {entry.get('bound')} iterations "
                           f"({given}), every tensor fitting its buffer at each")
    if report.concurrent is not None:
        _echo_concurrent(report.concurrent)
    if report.execution is not None:
        _echo_execution(report.execution)
    if report.first is not None:
        raise PlanInvalid(f"the plan is wrong: {report.first}")


def _echo_concurrent(cx: ConcurrentExecution) -> None:
    """The lines of ``verify --concurrency dag``'s concurrent runs."""
    most = max(t.most_at_once for t in cx.trials)
    click.echo(f"executed  {cx.nodes} nodes x {len(cx.trials)} trials, up to {cx.threads} at once (reached "
               f"{most}), in one {cx.device} arena ({cx.seconds:.3f} s); reference {cx.reference_seconds:.3f} s")
    click.echo(f"trials    {len(cx.trials) - cx.failures} of {len(cx.trials)} equal the reference")
    for t in [t for t in cx.trials if not t.ok][:3]:
        click.echo(f"  - trial {t.index}: {one_line(str(t.finding))}")


def _echo_execution(ex: Execution) -> None:
    """The lines of the run in one arena: each output against the run outside it."""
    whole = ex.reference == "whole"
    ordinary = ("no whole-model onnxruntime run (onnxruntime lacks a kernel)" if ex.reference_seconds is None
                else f"whole-model onnxruntime run {ex.reference_seconds:.3f} s")
    ref = (f"reference: the whole model once outside the arena, same kernels {ex.reference_seconds:.3f} s" if whole
           else f"again outside the arena {ex.private_seconds:.3f} s; {ordinary}")
    source = "the reference's run of them" if whole else "one run of them all on the CPU"
    handed = f", {ex.nodes_handed} of shape arithmetic written there from {source}" if ex.nodes_handed else ""
    click.echo(f"executed  {ex.nodes_run} nodes in one {ex.device} arena{handed}, sentinel 0xFF ({ex.seconds:.3f} s); "
               f"{ref}")
    for c in ex.outputs:
        same = "identical" if c.identical else f"max |diff| {c.max_abs_diff:.3g} (tolerance {c.tolerance:.3g})"
        info = ("" if whole or c.whole_model_diff is None
                else f"; whole-model run: max |diff| {c.whole_model_diff:.3g}")
        click.echo(f"  output  {one_line(c.name)}: {'ok' if c.ok else 'MISMATCH'}, "
                   f"{'against the reference' if whole else 'outside the arena'}: {same}{info}")
    for n in ex.notes:
        click.echo(f"  note    {one_line(n)}")
    for f in ex.findings[:10]:
        click.echo(f"  - {one_line(str(f))}")


def _verify_several(models: tuple[str, ...], plan_path: str | None, pipeline: bool, planning: PlanningFlags,
                    options: VerifyOptions, idle_flags: tuple[str, ...] = ()) -> None:
    """``verify A.onnx B.onnx [--plan PROGRAM]``: the joint proof, then one run after the other in one arena."""
    from onnxmem.model import load_model  # onnx
    from onnxmem.plans import read_plan
    from onnxmem.verify.program import verify_program

    say = progress(sys.stderr.isatty())
    if plan_path:
        program = read_plan(plan_path, "program")
        loaded, views, source = [(load_model(m), m) for m in models], None, plan_path
        warn_plan_making_flags(idle_flags, plan_path)
    else:
        planned, program = plan_several(models, make_plan_options(**planning, seed=options.seed), pipeline, say)
        loaded, views = [(p.model, m) for p, m in zip(planned, models)], [p.view for p in planned]
        source = f"planned now (solver {program.solver})"
    say("verifying")
    report = verify_program(program, loaded, options=options, plan_name=plan_path, views=views)
    for k, m in enumerate(models):
        click.echo(f"model {k:<3} {one_line(m)}")
    click.echo(f"plan      {one_line(source)}")
    click.echo(f"arena     {fmt_bytes(program.arena_size)}   {program.mode}, {len(models)} models"
               + (f"   handing over {len(program.handovers)} tensors" if program.handovers else ""))
    if not _echo_static_failures(report):
        click.echo("static    ok: each model's plan proven in the one arena"
                   + (", every handed-over tensor where its writer left it" if program.handovers else ""))
    for k, ex in enumerate(report.executions or ()):
        same = sum(1 for c in ex.outputs if c.identical)
        click.echo(f"executed  model {k}: {ex.nodes_run} nodes in the one {ex.device} arena ({ex.seconds:.3f} s); "
                   f"{same} of {len(ex.outputs)} outputs identical to the run outside the arena")
        for c in [c for c in ex.outputs if not c.ok][:10]:
            click.echo(f"  output  {one_line(c.name)}: MISMATCH, max |diff| {c.max_abs_diff:.3g}")
        for n in ex.notes:
            click.echo(f"  note    {one_line(n)}")
        for f in ex.findings[:10]:
            click.echo(f"  - {one_line(str(f))}")
    if report.findings:
        raise PlanInvalid(f"the program plan is wrong: {report.findings[0]}")
    click.echo("verified" if report.executions is not None else "verified (static proof only)")


def _against_original(model: str, onnx_model: onnx.ModelProto, the_plan: MemoryPlan, view: GraphView | None,
                      original_path: str, device: str, inputs: InputValues | None, seed: int, rtol: float,
                      atol: float) -> None:
    """``verify --original``: the rewritten model's arena outputs against the original's run."""
    from onnxmem.model import load_model
    from onnxmem.remat.check import compare_with_original
    from onnxmem.runtime.arena import ExecutionOptions
    from onnxmem.verify.run import view_for_plan

    original = load_model(original_path)
    v = view if view is not None else view_for_plan(onnx_model, the_plan, model)
    got = compare_with_original(onnx_model, the_plan, v, original, rewritten_path=model, original_path=original_path,
                                options=ExecutionOptions(device=device, inputs=inputs, seed=seed, rtol=rtol, atol=atol))
    for c in got.outputs:
        same = "identical" if c.identical else f"max |diff| {c.max_abs_diff:.3g} (tolerance {c.tolerance:.3g})"
        click.echo(f"  original {one_line(c.name)}: {same}")
    if not got.identical:
        bad = next(c for c in got.outputs if not c.identical)
        raise PlanInvalid(f"output {show_name(bad.name)} of the rewritten model differs from the original's "
                          f"(max |diff| {bad.max_abs_diff:.3g}): the recomputation changed a result")
    click.echo(f"original  {one_line(original_path)}: all {len(got.outputs)} outputs identical, bit for bit")



def _echo_static_failures(report: VerifyReport | ProgramReport) -> bool:
    """Print a verify report's warnings and, when the static proof failed, its first
    findings; whether it failed."""
    echo_warnings(report.warnings)
    if not report.static:
        return False
    click.echo(f"static    FAILED: {len(report.static)} violation(s)")
    for f in report.static[:10]:
        click.echo(f"  - {one_line(str(f))}")
    return True
