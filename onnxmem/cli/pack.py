"""``onnxmem pack``: solve a MiniMalloc-format instance (no model, no onnx)."""

from __future__ import annotations

import sys
import time

import click

from onnxmem.core.errors import ProblemError, one_line
from onnxmem.core.fileio import OutputSet

from .main import loading
from .options import RegistryChoice, wall_clock_timeout


@click.command()
@click.argument("problem_csv", metavar="PROBLEM.csv", type=click.Path(dir_okay=False))
@click.option("--capacity", type=int, default=None, help="Arena bytes the plan must fit (a decision).")
@click.option("--minimize", is_flag=True, help="Make the arena as small as possible (the default).")
@click.option("--solver", type=RegistryChoice("solvers"), default="exact", show_default=True,
              help="Offset solver; 'onnxmem list solvers' names each with what it does.")
@click.option("--timeout", type=float, default=None, callback=wall_clock_timeout,
              help="Seconds of wall-clock search before the best plan is kept, instead of the solver's "
                   "default budget of counted work (the same plan at any load); with --timeout results "
                   "may depend on the machine's load.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the offsets here, in the same CSV format.")
@click.option("--progress", is_flag=True, help="Print each improvement of the plan (on stderr).")
def pack(problem_csv: str, capacity: int | None, minimize: bool, solver: str,
         timeout: float | None, output: str | None, progress: bool) -> None:
    """Solve a MiniMalloc-format instance (id,lower,upper,size) and write its offsets.

    Exits 0 with a plan that fits the capacity (any plan when minimizing);
    4 when no plan fits it (status infeasible, timeout or over-capacity);
    3 when the checked plan is wrong; 1 on bad input; 2 on a usage error.
    """
    with loading():
        from onnxmem.core.problem import read_csv, write_csv  # numpy
        from onnxmem.core.solvers.pack import EXIT_NO_PLAN
        from onnxmem.core.solvers.pack import pack as pack_problem

    if minimize and capacity is not None:
        raise ProblemError("--capacity and --minimize exclude each other; pass one")
    t0 = time.perf_counter()

    def say(line: str) -> None:
        click.echo(f"{time.perf_counter() - t0:8.2f} s  {line}", err=True)

    outs = OutputSet(inputs=[problem_csv])
    if output is not None:
        outs.add(output, "-o")
    problem, _ = read_csv(problem_csv)
    if capacity is not None:
        problem.with_capacity(capacity)  # refuses a capacity past the bounds of a problem
    report = pack_problem(problem, capacity=capacity, solver=solver, timeout=timeout,
                          progress=say if progress else None)
    if output is not None and report.fits:
        outs.put(output, write_csv(problem, None, report.solution.offsets))
        outs.commit()
    for key, value in report.lines():
        click.echo(f"{key:<12} {value}")
    if output is not None and report.fits:
        click.echo(f"{'written':<12} {one_line(output)}")
    if not report.fits:
        sys.exit(EXIT_NO_PLAN)

