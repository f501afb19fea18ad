"""``onnxmem plot``: draw a plan as rectangles in time x address."""

from __future__ import annotations

import click

from onnxmem.core.errors import one_line, show_name
from onnxmem.core.fileio import OutputSet

from .options import plan_model_option
from .sources import read_plan_for

#: the sides a picture may have, in inches (at 100 dpi: up to 5,000 pixels; 700x700 took 19 GB). Below
#: 5 inches wide or 3 high the two panels, their labels and legends do not fit (matplotlib warned that
#: its layout collapsed, and drew them over each other)
MIN_WIDTH, MIN_HEIGHT, MAX_INCHES = 5.0, 3.0, 50.0


@click.command()
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Picture to write: .png, .svg or .html (self-contained, names on hover).")
@click.option("--title", default=None, help="Title (default: the model's file name).")
@click.option("--size", default="12x7", show_default=True, metavar="WxH",
              help=f"PNG/SVG size in inches (at 100 dpi): width {MIN_WIDTH:g} to {MAX_INCHES:g}, height "
                   f"{MIN_HEIGHT:g} to {MAX_INCHES:g}.")
@plan_model_option
def plot(plan_file: str, output: str, title: str | None, size: str, model_path: str | None) -> None:
    """Draw PLAN: tensors as rectangles in time x address above the live-bytes curve.

    A plan that breaks a rule is refused with exit code 3, as 'onnxmem show' refuses it."""
    from rich.console import Console

    from onnxmem.report.text import plot_plan  # numpy

    try:
        width, height = (float(v) for v in size.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"{show_name(size)} is not WxH, e.g. 12x7", param_hint="--size") from None
    if not (MIN_WIDTH <= width <= MAX_INCHES and MIN_HEIGHT <= height <= MAX_INCHES):  # NaN too
        raise click.BadParameter(f"{show_name(size)}: the width is {MIN_WIDTH:g} to {MAX_INCHES:g} inches and the "
                                 f"height {MIN_HEIGHT:g} to {MAX_INCHES:g} (smaller, the panels and legends do not fit; "
                                 f"a PNG of {MAX_INCHES:g}x{MAX_INCHES:g} is {MAX_INCHES * 100:,.0f} pixels square), "
                                 "e.g. 12x7", param_hint="--size")
    outs = OutputSet(inputs=[plan_file] + ([model_path] if model_path else []))
    outs.add(output, "-o")
    console = Console(stderr=True)
    with console.status("reading plan") as status:
        plan_ = read_plan_for(plan_file, model_path, "drawing", outs=outs)  # no picture replaces a weight file
        out = plot_plan(plan_, output, title=title, width=width, height=height,
                        progress=lambda msg: status.update(msg))
    click.echo(f"wrote {one_line(str(out))}")
