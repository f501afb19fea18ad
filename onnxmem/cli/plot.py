"""``onnxmem plot``: draw a plan as rectangles in time x address."""

from __future__ import annotations

import click

from onnxmem.core.errors import one_line, show_name
from onnxmem.core.fileio import OutputSet

from .options import plan_model_option
from .sources import read_plan_for

#: the sides a picture may have, in inches (at 100 dpi: 100 to 5,000 pixels; 700x700 took 19 GB)
MIN_INCHES, MAX_INCHES = 1.0, 50.0


@click.command()
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Picture to write: .png, .svg or .html (self-contained, names on hover).")
@click.option("--title", default=None, help="Title (default: the model's file name).")
@click.option("--size", default="12x7", show_default=True, metavar="WxH",
              help="PNG/SVG size in inches (at 100 dpi), each side 1 to 50.")
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
    if not all(MIN_INCHES <= v <= MAX_INCHES for v in (width, height)):  # NaN too
        raise click.BadParameter(f"{show_name(size)}: each side is {MIN_INCHES:g} to {MAX_INCHES:g} inches (a PNG of "
                                 f"{MAX_INCHES:g}x{MAX_INCHES:g} is {MAX_INCHES * 100:,.0f} pixels square), e.g. 12x7",
                                 param_hint="--size")
    outs = OutputSet(inputs=[plan_file] + ([model_path] if model_path else []))
    outs.add(output, "-o")
    console = Console(stderr=True)
    with console.status("reading plan") as status:
        plan_ = read_plan_for(plan_file, model_path, "drawing", outs=outs)  # no picture replaces a weight file
        out = plot_plan(plan_, output, title=title, width=width, height=height,
                        progress=lambda msg: status.update(msg))
    click.echo(f"wrote {one_line(str(out))}")
