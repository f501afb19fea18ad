"""``onnxmem fit``: will MODEL fit in N bytes, and the largest batch or sequence that does."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from onnxmem.core.choices import RUNTIME_MODES
from onnxmem.core.errors import OnnxmemError, listed, one_line, show_name
from onnxmem.core.fileio import OutputSet

from .options import (
    PlanningFlags,
    libraries_read,
    make_plan_options,
    optimize_option,
    planning_options,
    time_limit_option,
)
from .output import fmt_bytes, png_path, progress
from .registries import DEVICES

if TYPE_CHECKING:
    from collections.abc import Mapping

    import onnx

    from onnxmem.planning.fit import Fit, FitReport

#: the exit code of an answer of "not even the smallest value fits"
NO_FIT_EXIT = 2


@click.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--memory", required=True, metavar="SIZE",
              help="Memory the deployment may use: bytes or a size with a unit (8GiB, 512MiB, 2GB).")
@click.option("--device", type=click.Choice(DEVICES), default="cpu", show_default=True,
              help="The provider whose fixed cost (session and library) is measured and counted.")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="JSON file that keeps the measured fixed cost per provider and machine (read, and "
                   "written when it lacks this one); without it the cost is measured each run.")
@click.option("--runtime", type=click.Choice(RUNTIME_MODES), default="measure", show_default=True,
              help="What is counted besides the plan: measure, a default onnxruntime session of MODEL made once "
                   "(what it holds) and run at the answer (onnxruntime's activations per byte of the arena); "
                   "rule, the session made once and the activations by the safety factor measured on the zoo; "
                   "plan, the plan's own view (weights + arena + io + the fixed cost).")
@click.option("--memory-patterns", "patterns", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="The user's session: onnxruntime's memory patterns (on in a default session).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer and every item in bytes as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              metavar="PNG", help="Draw the total against the ranged dim, with the memory line, to PNG.")
@optimize_option("all")
@planning_options
@time_limit_option(lambda kw: True)
def fit(model: str, memory: str, device: str, cache_path: str | None, runtime: str, patterns: str, as_json: bool,
        plot_path: str | None, optimize: str, **planning: object) -> None:
    """Find the largest batch, sequence or cache length at which MODEL fits in --memory.

    The largest value of a ranged --dim (e.g. --dim batch=1:1024) at which the deployment fits.

    The total is what a default onnxruntime CPU session of MODEL holds at its peak: the session
    once made (measured), the arena of the graph it runs (--optimize all) times onnxruntime's
    activation factor (measured by running it at the answer), and graph inputs and outputs
    outside the arena; at least the session's peak while made. Two ranged dims give a
    frontier: for each value of the first, the largest of the second. Exit code 2 when not
    even the smallest value fits.
    """
    from onnxmem.core.sizes import parse_size
    from onnxmem.model import load_model  # onnx
    from onnxmem.planning import parse_dim_flags
    from onnxmem.planning.fit import fit_model, fit_to_dict
    from onnxmem.runtime.footprint import cache_text, fixed_cost

    from .sources import add_weight_files

    budget = parse_size(memory, "--memory")
    flags: PlanningFlags = planning  # type: ignore[assignment]
    bound, box, steps = parse_dim_flags(flags["dims"])
    if steps:
        raise OnnxmemError("fit searches every value of a ranged dim: give --dim NAME=LO:HI without a step")
    if not box:
        raise OnnxmemError(_no_range(load_model(model), model, bound))
    flags = flags.copy()
    flags["dims"] = tuple(f"{k}={v}" for k, v in bound.items())
    opts = make_plan_options(**flags)
    outs = OutputSet(inputs=[model, *([opts.checkpoint] if opts.checkpoint else []), *libraries_read()])
    if cache_path is not None:  # an empty path is refused by name, not taken as no file
        outs.add(cache_path, "--cache")
    if plot_path is not None:
        outs.add(plot_path, "--plot")
        png_path(plot_path, "--plot")
    say = progress(sys.stderr.isatty())
    onnx_model = load_model(model)
    add_weight_files(outs, onnx_model, model)
    say(f"measuring the fixed cost of onnxruntime on {device}")
    fixed = fixed_cost(device, cache_path)
    if cache_path:
        outs.put(cache_path, cache_text(cache_path, fixed).encode())
    report = fit_model(onnx_model, model, budget, box, opts, fixed=fixed.session, device=device, optimize=optimize,
                       runtime=runtime, patterns=patterns == "on", progress=say)
    if plot_path:
        from onnxmem.report.fit import render_fit_plot  # matplotlib

        outs.put(plot_path, render_fit_plot(report, one_line(model)))
    outs.commit()
    if as_json:
        click.echo(json.dumps(fit_to_dict(report), indent=1))
    else:
        for line in fit_lines(report, model):
            click.echo(one_line(line))
        if plot_path:
            click.echo(f"plot         {one_line(plot_path)}")
    for w in report.warnings:
        click.echo(f"warning: {one_line(w)}", err=True)
    if report.answer.value is None:
        click.echo(f"error: does not fit: {one_line(report.answer.reason)}", err=True)
        sys.exit(NO_FIT_EXIT)


def _runtime_line(report: FitReport) -> list[str]:
    p = report.process
    if p is None:
        return ["session      the plan's view: weights + arena + io + fixed (--runtime plan)"]
    runs = ", ".join(f"{report.answer.dim}={k}: {fmt_bytes(v)}" for k, v in sorted(report.measured.items()))
    return [f"session      default onnxruntime session, memory patterns {'on' if p.patterns else 'off'}; "
            f"activations {p.factor:.2f}x the arena ({p.source})" + (f"; measured peaks {runs}" if runs else "")]


def _items(fit: Fit) -> list[str]:
    at = fit.at
    where = "in the arena" if at.io_in_arena else "outside the arena"
    held = ([f"held         {fmt_bytes(at.session)}   (the model's session once made, measured: weights as "
             "held, prepacked copies, kernels, fixed cost)",
             f"created      {fmt_bytes(at.created)}   (its peak while made, measured, + the inputs the caller holds)"] if at.held is not None else [])
    lines = [
        f"weights      {fmt_bytes(at.weights)}",
        *held,
        f"arena        {fmt_bytes(at.arena)}",
        *([f"onnxruntime  {fmt_bytes(at.runtime)}   (its activations beyond the arena: planner, scratch, "
           "arena chunks, memory-pattern block)"] if at.runtime else []),
        f"inputs       {fmt_bytes(at.inputs)}   ({where})",
        f"outputs      {fmt_bytes(at.outputs)}   ({where})",
    ]
    if at.kv_cache:
        lines.append(f"kv cache     {fmt_bytes(at.kv_cache)}   ({where}: past inputs and present outputs)")
    lines += [
        f"fixed        {fmt_bytes(at.fixed)}   (onnxruntime session on the device, measured)",
        f"total        {fmt_bytes(at.total)}   of memory {fmt_bytes(fit.memory)}"
        + ("   (the session's creation peak)" if at.created == at.total and at.created else ""),
        f"margin       {fmt_bytes(fit.margin) if fit.margin >= 0 else _over(-fit.margin)}",
    ]
    return lines


def _over(n: int) -> str:
    """A negative margin of ``n`` bytes, its exact count signed too: ``-1.50 KiB (-1,536 B)``."""
    return "-" + fmt_bytes(n).replace("(", "(-", 1)


def fit_lines(report: FitReport, model: str) -> list[str]:
    """What ``fit`` prints: the answer, each item at it, and the frontier's rows when two dims range."""
    best = report.answer
    sizes = report.sizes
    box = "  ".join(f"{k}={lo}:{hi}" for k, (lo, hi) in sorted(sizes.box.items()))
    bound = "   bound " + " ".join(f"{k}={v}" for k, v in sorted(sizes.dims.items())) if sizes.dims else ""
    if sizes.plan is not None:
        n = len(sizes.plan.pieces)
        how = f"{n} piece{'s' if n != 1 else ''}   plan {sizes.plan_seconds:.3f} s"
    else:
        how = f"planned at {len(sizes.known)} values"
    head = [f"model        {model}", f"range        {box}{bound}   {how}   device {report.device}   "
            f"graph --optimize {report.optimize}", *_runtime_line(report)]
    if report.frontier_dim is None:
        answer = f"{best.dim}={best.value}" if best.value is not None else "nothing fits"
        return [*head, f"fit          {answer}   ({best.reason})", *_items(best)]
    rows = [f"{report.frontier_dim:>12}  {'largest ' + best.dim:>20}  {'total there':>28}"]
    for f in report.fits:
        value = str(f.value) if f.value is not None else "-"
        rows.append(f"{f.at.point[report.frontier_dim]:>12}  {value:>20}  {fmt_bytes(f.at.total):>28}")
    answer = (f"{report.frontier_dim}={best.at.point[report.frontier_dim]} {best.dim}={best.value}"
              if best.value is not None else "nothing fits")
    return [*head, f"fit          {answer}   ({best.reason})", "frontier", *rows, *_items(best)]


def _no_range(onnx_model: onnx.ModelProto, path: str, bound: Mapping[str, int]) -> str:
    """The error for ``fit`` without a ranged dim, naming the dims of ``path``'s graph inputs
    that ``bound`` leaves open (what can be ranged)."""
    from onnxmem.model import dim_label, open_input_dims

    open_dims = [dim_label(d) for d in open_input_dims(onnx_model, bound)]
    if not open_dims:
        given = [d for d in open_input_dims(onnx_model, ()) if d in bound]
        if given:
            return (f"fit needs a ranged dim to search: {dim_label(given[0])} is bound to {bound[given[0]]}; "
                    f"range it instead (--dim {dim_label(given[0])}=1:1024)")
        return (f"fit needs a ranged dim to search, and the graph inputs of {show_name(path)} declare no named dim; "
                "plan it at its one shape (onnxmem plan MODEL)")
    first = f"--dim {open_dims[0]}=1:1024"
    if len(open_dims) == 1:
        return (f"fit needs a ranged dim to search: the graph inputs of {show_name(path)} declare {open_dims[0]}, "
                f"unbound; range it ({first})")
    shown = listed(open_dims, 6, str)
    others = " ".join(f"--dim {d}=N" for d in open_dims[1:3])
    return (f"fit needs a ranged dim to search: the graph inputs of {show_name(path)} declare {shown}, all unbound; "
            f"range one ({first}) and bind the others ({others})")

