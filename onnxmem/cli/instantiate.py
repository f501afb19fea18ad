"""``onnxmem instantiate``: the concrete plan a range plan gives at one point."""

from __future__ import annotations

import click

from onnxmem.core.errors import one_line
from onnxmem.core.fileio import OutputSet

from .output import fmt_bytes


@click.command()
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("--dim", "dims", multiple=True, metavar="NAME=N", required=True,
              help="The value of a ranged dim (one for each dim the plan ranges).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Write the concrete JSON plan here.")
def instantiate(plan_file: str, dims: tuple[str, ...], output: str) -> None:
    """Write the concrete plan a range PLAN gives at one point (--dim NAME=N ...)."""
    from onnxmem.export.proof import prove_range_for_export
    from onnxmem.planning import parse_point
    from onnxmem.plans import instantiate as at_point  # numpy
    from onnxmem.plans import read_plan

    outs = OutputSet(inputs=[plan_file])
    outs.add(output, "-o")
    rp = read_plan(plan_file, "range")
    point = parse_point(dims, rp.box, rp.steps)
    prove_range_for_export(rp)
    concrete = at_point(rp, point)
    outs.put_writer(output, concrete.write_json)
    outs.commit()
    at = " ".join(f"{k}={v}" for k, v in sorted(point.items()))
    click.echo(f"point        {at}")
    click.echo(f"arena        {fmt_bytes(concrete.arena_size)}   lower bound {fmt_bytes(concrete.lower_bound)}")
    click.echo(f"plan         {one_line(output)}")
