"""``onnxmem show``: summarize a plan file (point, range or program plan)."""

from __future__ import annotations

import click

from onnxmem.core.errors import one_line, show_name

from .options import plan_model_option
from .output import program_summary
from .sources import read_plan_for


@click.command()
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Rows in each table.")
@plan_model_option
def show(plan_file: str, top: int, model_path: str | None) -> None:
    """Summarize PLAN: the totals, the tensors live at the peak step, the largest contributors.
    A program plan (several models): each model's line and the shared arena.

    A plan that breaks a rule it can be held to without its model (tensors of two buffers
    live together sharing a byte, one past the arena or off its alignment, a name twice, a
    size other than its dtype and shape give; a range plan: its proof on the box) is refused
    with exit code 3; with --model, the whole static proof of 'verify --static-only' (a plan
    made with --optimize: against the graph onnxruntime builds, built again)."""
    from onnxmem.export.proof import prove_program_for_show, prove_range_for_export
    from onnxmem.plans import Program, RangePlan, read_plan  # numpy
    from onnxmem.report.range import render_range_summary
    from onnxmem.report.text import render_summary

    the_plan = read_plan(plan_file)
    if isinstance(the_plan, Program):
        if model_path is not None:
            raise click.UsageError("--model checks one model's plan; check a program plan with all its models "
                                   "('onnxmem verify A.onnx B.onnx --plan PLAN --static-only')")
        prove_program_for_show(the_plan, f"plan file {show_name(plan_file)} is not shown")
        for line in program_summary(the_plan):
            click.echo(line)
        return
    if isinstance(the_plan, RangePlan):
        prove_range_for_export(the_plan, f"plan file {show_name(plan_file)} is not shown")
        for line in render_range_summary(the_plan):
            click.echo(one_line(line))
        return
    click.echo(render_summary(read_plan_for(plan_file, model_path, "showing", the_plan), top=top), nl=False)
