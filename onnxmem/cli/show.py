"""``onnxmem show``: summarize a plan file (point, range or program plan)."""

from __future__ import annotations

import click

from onnxmem.core.errors import one_line

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
    A program plan (several models): each model's line and the shared arena."""
    from onnxmem.planning.program import is_program_data, program_from_dict  # onnx
    from onnxmem.planning.ranges import RangePlan, any_plan_from_data, render_range_summary
    from onnxmem.plans.point import read_plan_data
    from onnxmem.report.text import render_summary

    data, where = read_plan_data(plan_file)
    if is_program_data(data):
        if model_path is not None:
            raise click.UsageError("--model checks one model's plan; check a program plan with all its models "
                                   "('onnxmem verify A.onnx B.onnx --plan PLAN --static-only')")
        for line in program_summary(program_from_dict(data, where)):
            click.echo(line)
        return
    the_plan = any_plan_from_data(data, where)
    if isinstance(the_plan, RangePlan):
        for line in render_range_summary(the_plan):
            click.echo(one_line(line))
        return
    click.echo(render_summary(read_plan_for(plan_file, model_path, "showing", the_plan), top=top), nl=False)
