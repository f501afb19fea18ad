"""The ``onnxmem`` command line: the only module that prints or exits.

Each command parses its flags, calls the library, and prints the result. User
errors (``OnnxmemError``) become one line on stderr and the error's exit code;
anything else is a bug and keeps its traceback.

Choices come from the library's registries (solvers, orders, export formats,
generators, io modes, devices), each entry with its one-line summary, which
``onnxmem list`` prints.
"""

from __future__ import annotations

import difflib
import functools
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import click
from click.shell_completion import CompletionItem

from onnxmem import __version__
from onnxmem.core.errors import OnnxmemError, PlanInvalid, ProblemError, one_line, show_name
from onnxmem.core.fileio import OutputSet
from onnxmem.export import FORMATS, export_plan
from onnxmem.plans.point import render_plan
from onnxmem.runtime.isolation import RUN_SECONDS
from onnxmem.zoo.settings import DEFAULT_MODEL_TIMEOUT as ZOO_MODEL_TIMEOUT
from onnxmem.zoo.settings import EXECUTORS as ZOO_EXECUTORS

# The modules above are light. Everything that imports onnx, onnxruntime, numpy,
# numba, matplotlib or rich is imported inside the command that needs it, so that
# `onnxmem --help`, `onnxmem list formats` and `onnxmem pack` start fast.


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn an ``OnnxmemError`` into a one-line message and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OnnxmemError as exc:
            click.echo(f"error: {one_line(str(exc))}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="onnxmem")
def main() -> None:
    """Plan the activation memory of an ONNX model ahead of time, and prove the plan."""


def fmt_bytes(n: int) -> str:
    """``1536`` -> ``'1.50 KiB (1,536 B)'``: :func:`onnxmem.report.text.format_bytes` and the exact count."""
    from onnxmem.report.text import format_bytes  # numpy

    return format_bytes(n) if n < 1024 else f"{format_bytes(n)} ({n:,} B)"


def _progress(enabled: bool) -> Callable[[str], None]:
    def say(msg: str) -> None:
        if enabled:
            click.echo(f"  {msg} ...", err=True)

    return say


# -- registries: loaded when a command needs them (they import numpy or onnx) --


def _solvers() -> dict[str, str]:
    from onnxmem.core.solvers import SOLVERS  # numpy

    return {name: s.summary for name, s in SOLVERS.items()}


def _orders() -> dict[str, str]:
    from onnxmem.scheduling import ORDERS  # onnx

    return {name: o.summary for name, o in ORDERS.items()}


def _all_generators() -> dict[str, tuple[Callable[[int, int, str], Any], str, str]]:
    """``onnxmem generate`` KINDs: name -> (build(size, seed, graph), summary, what --size counts)."""
    from onnxmem.model.generate import GENERATORS  # onnx
    from onnxmem.remat.training import TRAINING

    out: dict[str, tuple[Callable[[int, int, str], Any], str, str]] = {
        name: (g.build, g.summary, g.size) for name, g in GENERATORS.items()}
    for name, (build, summary, size) in TRAINING.items():
        out[name] = (functools.partial(_train_build, build), summary, size)
    return out


def _train_build(build: Callable[[int, int], Any], size: int, seed: int, graph: str) -> Any:
    return build(size, seed)


def _generators() -> dict[str, str]:
    return {name: f"{summary}; --size counts {size}" for name, (_, summary, size) in _all_generators().items()}


def _remat() -> dict[str, str]:
    from onnxmem.remat import ALGORITHMS  # onnx

    return {name: a.summary for name, a in ALGORITHMS.items()}


def _formats() -> dict[str, str]:
    return {name: f.summary for name, f in FORMATS.items()}


#: ``onnxmem list WHAT``: each registry's entries as name -> one-line summary
LISTINGS: dict[str, Callable[[], dict[str, str]]] = {
    "solvers": _solvers,
    "orders": _orders,
    "formats": _formats,
    "generators": _generators,
    "remat": _remat,
}


def _wall_clock_timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """``--timeout``: this command's searches stop by the wall clock (see :mod:`onnxmem.core.workclock`)."""
    if value is not None:
        from onnxmem.core.workclock import use_wall_clock

        use_wall_clock()
        ctx.call_on_close(lambda: use_wall_clock(False))
    return value


def _io_modes() -> tuple[str, ...]:
    from onnxmem.analysis.liveness import IO_MODES  # onnx

    return tuple(IO_MODES)


def _concurrency_modes() -> tuple[str, ...]:
    from onnxmem.analysis.happens_before import CONCURRENCY_MODES  # onnx

    return tuple(CONCURRENCY_MODES)


def _execution_modes() -> tuple[str, ...]:
    from onnxmem.runtime.peak import EXECUTION_MODES  # onnx

    return tuple(EXECUTION_MODES)


def _devices() -> tuple[str, ...]:
    from onnxmem.verify.run import DEVICES  # onnx

    return tuple(DEVICES)


def _randwire_kinds() -> tuple[str, ...]:
    from onnxmem.model.generate import RANDWIRE_KINDS  # onnx

    return tuple(RANDWIRE_KINDS)


class RegistryChoice(click.ParamType[str]):  # type: ignore[type-arg,unused-ignore]
    """A choice among a registry's names, read from the registry when first needed.

    ``listing``: the ``onnxmem list`` kind that names and explains the entries;
    the option's help shows NAME and an unknown value points to the listing.
    Without one, ``load`` gives the names and the help shows them all.
    """

    name = "choice"

    def __init__(self, listing: str | None = None, load: Callable[[], Iterable[str]] | None = None) -> None:
        if (listing is None) == (load is None):
            raise ValueError("give a listing or a load function, not both")
        self.listing = listing
        self._load: Callable[[], Iterable[str]] = load or (lambda: LISTINGS[str(listing)]())

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._load())

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NAME" if self.listing is not None else "[" + "|".join(self.choices) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        choices = self.choices
        if value in choices:
            return value
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        if self.listing is not None:
            self.fail(f"'{value}' is not one of the {len(choices)} {self.listing}; {hint}"
                      f"'onnxmem list {self.listing}' names each with what it does", param, ctx)
        self.fail(f"'{value}' is not one of {', '.join(choices)}; {hint}".rstrip("; "), param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        return [CompletionItem(c) for c in self.choices if c.startswith(incomplete)]


#: the planner's defaults (``PlanOptions()``'s; a test checks they agree)
DEFAULT_SOLVER = "auto"
DEFAULT_ORDER = "auto"


def planning_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The flags that say how to plan, shared by every command that plans."""
    opts = [
        click.option("--solver", type=RegistryChoice("solvers"), default=DEFAULT_SOLVER, show_default=True,
                     help="Buffer-assignment algorithm; 'onnxmem list solvers' names each with what it does."),
        click.option("--order", "order", type=RegistryChoice("orders"), default=DEFAULT_ORDER, show_default=True,
                     help="Operator-order strategy; 'onnxmem list orders' names each with what it does."),
        click.option("--alignment", type=click.IntRange(min=1), default=64, show_default=True,
                     help="Byte alignment of every offset (and size)."),
        click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                     help="Bind a symbolic dim, e.g. --dim batch=1 (repeatable); 'plan' also takes "
                          "a range, --dim batch=1:8, for a range plan."),
        click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D1xD2..",
                     help="Pin an input's shape, e.g. --input-shape x=1x3x224x224 (repeatable)."),
        click.option("--measure-shapes", is_flag=True,
                     help="Run the model once in onnxruntime and use the measured shapes."),
        click.option("--io", type=RegistryChoice(load=_io_modes), default="internal",
                     show_default=True, help="external: graph inputs and outputs stay out of the arena."),
        click.option("--timeout", type=click.FloatRange(min=0), default=None, callback=_wall_clock_timeout,
                     help="Seconds of wall-clock time the solver and the order search may take, instead "
                          "of their default budgets of counted work (which give the same plan at any load); "
                          "with --timeout results may depend on the machine's load."),
        click.option("--inplace", type=click.Choice(["on", "off"]), default="on", show_default=True,
                     help="on: views share their input's bytes and element-wise ops write over "
                          "inputs that die there; off: every tensor gets its own buffer."),
        click.option("--fold", type=click.Choice(["on", "off"]), default="on", show_default=True,
                     help="on: nodes computed only from weights run once before the model, as "
                          "onnxruntime's constant folding does, and their outputs are weights (not in the "
                          "arena); off: only constants and views of weights are."),
        click.option("--concurrency", type=RegistryChoice(load=_concurrency_modes), default="sequential",
                     show_default=True, metavar="MODE",
                     help="sequential: the plan holds for its own operator order; dag: for every schedule "
                          "the graph allows, with independent nodes running at once (tensors share bytes "
                          "only when the graph orders them)."),
        click.option("--branch", "branches", multiple=True, metavar="IF=then|else",
                     help="Plan only the branch runs of If node IF take (its path, e.g. If_0 or "
                          "Loop_3/body/If_1; repeatable): the other branch is left out, for shapes at "
                          "which it cannot run; verify refuses a run that takes it."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def inputs_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--inputs FILE.npz``: values for some or all graph inputs (plan, verify, compare)."""
    return click.option(
        "--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=str), default=None,
        metavar="FILE.npz",
        help="Values for some or all graph inputs, by name (numpy.savez); the others get seeded random "
             "values. Their shapes bind the inputs' dims as --input-shape does.")(fn)


#: ``--time-limit SECONDS`` (verify, compare, plan, zoo)
time_limit_flag = click.option(
    "--time-limit", type=click.FloatRange(min=0, min_open=True), default=RUN_SECONDS, show_default=True,
    metavar="SECONDS",
    help="Seconds each onnxruntime run may take (measuring shapes, computing weights, the arena run, the "
         "reference run, profiling); past it the command stops with an error naming the run. A safety bound: "
         "no figure depends on it. The runs happen in a child process, so a crash of onnxruntime is an error "
         "too.")


def time_limit_option(prestart: Callable[[dict[str, Any]], bool]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--time-limit``: the command runs inside ``isolation.run_limits`` (every onnxruntime run in
    one child process, each bounded); ``prestart(kwargs)``: whether it surely runs onnxruntime."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, time_limit: float, **kwargs: Any) -> Any:
            from onnxmem.runtime.isolation import run_limits

            with run_limits(seconds=time_limit, address_space=kwargs.get("device") != "cuda",
                            prestart=prestart(kwargs)):
                return fn(*args, **kwargs)

        return time_limit_flag(wrapper)
    return wrap


def pipeline_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--pipeline``: several models run in sequence, each one's outputs the next one's inputs."""
    return click.option(
        "--pipeline", is_flag=True,
        help="With several models: they run in sequence and every graph output of one that is a graph "
             "input of the next (by name) is handed over in the arena, live across both.")(fn)


def read_input_values(path: str | None) -> Any:
    """The arrays of ``--inputs`` (``None`` without it), read by :func:`onnxmem.runtime.inputs.read_inputs`."""
    if not path:
        return None
    from onnxmem.runtime.inputs import read_inputs  # numpy

    return read_inputs(path)


def make_plan_options(solver: str, order: str, alignment: int, dims: tuple[str, ...],
                      input_shapes: tuple[str, ...], measure_shapes: bool, io: str,
                      timeout: float | None, seed: int = 0, inplace: str = "on", fold: str = "on",
                      inputs: Any = None, concurrency: str = "sequential", branches: tuple[str, ...] = ()) -> Any:
    from onnxmem.model import parse_dim_binding, parse_input_shape
    from onnxmem.planning.pipeline import PlanOptions

    return PlanOptions(
        solver=solver,
        order=order,
        alignment=alignment,
        io=io,
        dims=dict(parse_dim_binding(d) for d in dims),
        input_shapes=dict(parse_input_shape(s) for s in input_shapes),
        measure_shapes=measure_shapes,
        timeout=timeout,
        seed=seed,
        inplace=inplace == "on",
        fold=fold == "on",
        inputs=inputs,
        concurrency=concurrency,
        branches=dict(_parse_branch(b) for b in branches),
    )


def _parse_branch(text: str) -> tuple[str, str]:
    """``IF=then`` -> ``("IF", "then_branch")``; a usage error otherwise."""
    from onnxmem.graph import BRANCH_NAMES

    path, eq, branch = text.rpartition("=")
    if not eq or not path or branch not in BRANCH_NAMES:
        raise click.BadParameter(f"{show_name(text)} is not IF=then or IF=else (IF: the If node's path)",
                                 param_hint="'--branch'")
    return path, BRANCH_NAMES[branch]


def _subgraph_line(plan: Any) -> str:
    """How many bodies the plan holds, of which kinds, and the bytes of their owners' regions."""
    kinds: dict[str, int] = {}
    for sg in plan.subgraphs:
        kinds[sg.kind] = kinds.get(sg.kind, 0) + 1
    body = sum(1 for t in plan.tensors if t.graph)
    regions = sum(t.size for t in plan.tensors if t.kind == "region")
    what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return f"subgraphs    {len(plan.subgraphs)} ({what})   {body} body tensors in regions of {fmt_bytes(regions)}"


def plan_summary(plan: Any) -> list[str]:
    n_nodes = len(plan.order)
    gap = f"+{plan.gap * 100:.2f}% over the bound" if plan.lower_bound else "at the bound"
    status = plan.solver["status"]
    if status == "timeout":
        status = "timeout: the solver's budget ended before a proof; --timeout gives it more"
    return [
        f"model        {one_line(str(plan.model['path']))}",
        f"nodes        {n_nodes}   tensors planned {len(plan.tensors)}   order {one_line(plan.order_strategy)}",
        *([_subgraph_line(plan)] if plan.subgraphs else []),
        f"weights      {fmt_bytes(plan.weights_size)}"
        + (f"   {len(plan.extra['folded'])} folded values" if plan.extra.get("folded") else ""),
        f"naive        {fmt_bytes(plan.naive_size)}",
        f"lower bound  {fmt_bytes(plan.lower_bound)}",
        *(["concurrency  dag: safe under every schedule the graph allows (the bound: the heaviest tensors "
           "that may be live at once)"] if plan.extra.get("concurrency") == "dag" else []),
        *([f"file order   lower bound {fmt_bytes(plan.extra['file_order_lower_bound'])}"]
          if "file_order_lower_bound" in plan.extra else []),
        f"arena        {fmt_bytes(plan.arena_size)}   {gap} ({status})",
        f"time         plan {plan.plan_seconds:.3f} s   solver {one_line(str(plan.solver['name']))} "
        f"{plan.solver['seconds']:.3f} s",
    ]


@main.command()
@click.argument("models", metavar="MODEL...", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the JSON plan here.")
@click.option("--annotate", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the model with the plan attached and nodes in planned order.")
@planning_options
@inputs_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of the summary.")
@click.option("--budget", default=None, metavar="SIZE",
              help="Fit the arena into SIZE (bytes, 64MiB, or 0.5x the arena without a budget), "
                   "recomputing values when order, sharing and assignment are not enough.")
@click.option("--rewrite-out", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="With --budget: write the rewritten model (recomputed nodes duplicated; annotated with its plan).")
@click.option("--remat", "remat_algorithm", type=RegistryChoice("remat"), default="auto", show_default=True,
              help="Recomputation algorithm; 'onnxmem list remat' names each with what it does.")
@click.option("--cost", "cost_model", type=click.Choice(["flops", "measured"]), default="flops", show_default=True,
              help="What a recomputed node costs: FLOPs from shapes, or onnxruntime's measured kernel time.")
@click.option("--budget-sweep", default=None, type=click.Path(dir_okay=False, path_type=str), metavar="PNG",
              help="Plan every recomputation algorithm at 0.9x .. 0.3x the unbudgeted arena; print the "
                   "frontier (arena against extra compute) and draw it to PNG.")
@pipeline_option
@user_errors
@time_limit_option(lambda kw: bool(kw.get("measure_shapes")))
def plan(models: tuple[str, ...], output: str | None, annotate: str | None, solver: str, order: str,
         alignment: int, dims: tuple[str, ...], input_shapes: tuple[str, ...], measure_shapes: bool,
         io: str, timeout: float | None, inplace: str, fold: str, concurrency: str, branches: tuple[str, ...],
         inputs_path: str | None, as_json: bool, budget: str | None = None, rewrite_out: str | None = None, remat_algorithm: str = "auto",
         cost_model: str = "flops", budget_sweep: str | None = None, pipeline: bool = False) -> None:
    """Plan the activation memory of MODEL and print the summary.

    With --measure-shapes the model runs once on --inputs (where given) and
    seeded random values for the other inputs. A --dim NAME=LO:HI (inclusive)
    makes a range plan: one plan for every shape in the box, offsets as
    formulas in the dims (docs/range.md).

    Several models (a training step and its eval step) run one at a time in
    one arena: each is planned with the same flags, then all of them together,
    into one program plan (docs/training.md); with --pipeline each model's
    graph outputs that are the next one's graph inputs stay in the arena.
    """
    from onnxmem.planning.pipeline import plan_model

    if len(models) > 1 or pipeline:
        _refuse_for_several(models, {"--budget": budget is not None, "--budget-sweep": budget_sweep is not None,
                                     "--rewrite-out": rewrite_out is not None, "--annotate": annotate is not None,
                                     "--inputs": inputs_path is not None, "--dim NAME=LO:HI": _ranged(dims),
                                     "--concurrency dag": concurrency != "sequential", "--branch": bool(branches)})
        opts = make_plan_options(solver, order, alignment, dims, input_shapes, measure_shapes, io, timeout,
                                 inplace=inplace, fold=fold)
        outs = OutputSet(inputs=models)
        if output:
            outs.add(output, "-o")
        planned, program = _plan_several(models, opts, pipeline, _progress(sys.stderr.isatty() and not as_json))
        for p, path in zip(planned, models):
            _add_weight_files(outs, p.model, path)
        _write_program(outs, program, output, as_json)
        return
    model = models[0]
    outs = OutputSet(inputs=[model] + ([inputs_path] if inputs_path else []))
    if _ranged(dims):
        if budget is not None or budget_sweep is not None or rewrite_out is not None:
            raise click.UsageError("--budget, --budget-sweep and --rewrite-out plan one shape; "
                                   "bind every --dim to one value (NAME=N)")
        if concurrency != "sequential":
            raise click.UsageError("a range plan holds for its own operator order; plan with --concurrency dag "
                                   "at one shape (bind every --dim to one value, NAME=N)")
        if branches:
            raise click.UsageError("--branch plans one shape; bind every --dim to one value (NAME=N)")
        _plan_range(model, outs, output, annotate, as_json, dims,
                    dict(solver=solver, order=order, alignment=alignment, input_shapes=input_shapes,
                         measure_shapes=measure_shapes, io=io, timeout=timeout, inplace=inplace, fold=fold,
                         inputs=read_input_values(inputs_path)))
        return
    if output:
        outs.add(output, "-o")
    if annotate:
        outs.add(annotate, "--annotate")
    opts = make_plan_options(solver, order, alignment, dims, input_shapes, measure_shapes, io, timeout,
                             inplace=inplace, fold=fold, inputs=read_input_values(inputs_path),
                             concurrency=concurrency, branches=branches)
    if budget_sweep is not None:
        outs.add(budget_sweep, "--budget-sweep")
        _budget_sweep(model, opts, outs, budget_sweep, cost_model, timeout)
        return
    if rewrite_out is not None and budget is None:
        raise click.UsageError("--rewrite-out writes the model --budget rewrites; give --budget too")
    if budget is not None:
        _plan_budget(model, opts, outs, output, annotate, budget, rewrite_out, remat_algorithm, cost_model,
                     timeout, as_json)
        return
    result = plan_model(model, opts, progress=_progress(sys.stderr.isatty() and not as_json))
    _add_weight_files(outs, result.model, model)
    _write_and_print(outs, result.model, result.plan, model, output, annotate, as_json)


def _ranged(dims: Iterable[str]) -> bool:
    """Whether a --dim flag gives a range (NAME=LO:HI)."""
    return any(":" in d.partition("=")[2] for d in dims)


def _refuse_for_several(models: tuple[str, ...], flags: dict[str, bool]) -> None:
    """Usage errors for several models: --pipeline needs two, and flags for one model are refused."""
    if len(models) < 2:
        raise click.UsageError("--pipeline hands tensors from one model to the next; give two or more models")
    for flag, given in flags.items():
        if given:
            raise click.UsageError(f"{flag} works on one model; leave it out when giving several models")


def _plan_several(models: tuple[str, ...], opts: Any, pipeline: bool, say: Callable[[str], None]) -> tuple[Any, Any]:
    """Plan each model with ``opts``, then all of them in one arena: ``(planned, program)``."""
    from onnxmem.planning import pipeline_handovers, plan_model, plan_program

    planned = [plan_model(m, opts, progress=say) for m in models]
    handovers = pipeline_handovers(planned, models) if pipeline else ()
    say(f"planning {len(models)} models in one arena")
    return planned, plan_program(planned, handovers, solver=opts.solver, timeout=opts.timeout)


def program_summary(program: Any) -> list[str]:
    """The lines ``plan`` and ``show`` print for a program plan: each model, then the shared arena."""
    lines = []
    for k, p in enumerate(program.plans):
        alone = p.extra.get("program", {}).get("alone")
        lines.append(f"model {k:<6} {one_line(str(p.model.get('path', '')))}   {len(p.order)} nodes   "
                     f"{len(p.tensors)} tensors   lower bound {fmt_bytes(p.lower_bound)}"
                     + (f"   alone {fmt_bytes(alone)}" if isinstance(alone, int) and not isinstance(alone, bool)
                        else ""))
    if program.handovers:
        lines.append("handover     " + ", ".join(f"{show_name(n)} (model {k} -> {k + 1})"
                                                 for n, k in sorted(program.handovers.items())))
    gap = (f"+{(program.arena_size / program.lower_bound - 1) * 100:.2f}% over the bound"
           if program.lower_bound else "at the bound")
    lines.append(f"program      {program.mode}, {len(program.plans)} models in one arena   lower bound "
                 f"{fmt_bytes(program.lower_bound)}")
    lines.append(f"arena        {fmt_bytes(program.arena_size)}   {gap} (solver {one_line(program.solver)}, "
                 f"{one_line(program.status)})")
    return lines


def _write_program(outs: Any, program: Any, output: str | None, as_json: bool) -> None:
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


def _write_and_print(outs: Any, onnx_model: Any, the_plan: Any, model: str, output: str | None,
                     annotate: str | None, as_json: bool, lines: Iterable[str] = (),
                     rewrite_out: str | None = None) -> None:
    """``plan``'s outputs (all or none) and its summary, with ``lines`` after it."""
    from onnxmem.export.annotate import render_annotated

    if output:
        outs.put(output, render_plan(the_plan))
    for path, flag in ((annotate, "--annotate"), (rewrite_out, "--rewrite-out")):
        if path:
            outs.put(path, render_annotated(onnx_model, the_plan, model, path, flag))
    outs.commit()
    if as_json:
        click.echo(the_plan.to_json(), nl=False)
        return
    for line in [*plan_summary(the_plan), *lines]:
        click.echo(line)
    for w in the_plan.warnings:
        click.echo(f"warning: {one_line(w)}", err=True)
    for label, path in (("plan", output), ("annotated", annotate), ("rewritten", rewrite_out)):
        if path:
            click.echo(f"{label:<12} {one_line(path)}")


def _plan_budget(model: str, opts: Any, outs: Any, output: str | None, annotate: str | None, budget: str,
                 rewrite_out: str | None, algorithm: str, cost_model: str, timeout: float | None,
                 as_json: bool) -> None:
    """``plan --budget``: plan, recompute when needed, write and summarize."""
    from onnxmem.model import load_model
    from onnxmem.remat.budget import parse_budget, plan_with_budget

    size, factor = parse_budget(budget)
    if rewrite_out is not None:
        outs.add(rewrite_out, "--rewrite-out")
    onnx_model = load_model(model)
    _add_weight_files(outs, onnx_model, model)
    got = plan_with_budget(onnx_model, model, opts, budget=size, factor=factor, algorithm=algorithm,
                           cost_model=cost_model, timeout=timeout,
                           progress=_progress(sys.stderr.isatty() and not as_json))
    planned = got.planned
    if rewrite_out is not None and got.rewritten is not None:
        planned = _replace_path(planned, rewrite_out)
    the_plan = planned.plan
    lines = [f"budget       {fmt_bytes(got.budget)}   arena without a budget {fmt_bytes(got.original.plan.arena_size)}"]
    if got.choice is None:
        lines.append("recompute    nothing: the plan fits without recomputation")
    else:
        n = len(the_plan.extra["remat"]["recomputed"])
        lines.append(f"recompute    {n} values ({one_line(got.choice.algorithm)}, {got.choice.status})   extra compute "
                     f"{got.extra:,} {'FLOPs' if got.cost_model == 'flops' else 'ns'} "
                     f"({got.extra_percent:.2f}% of the model's)")
    _write_and_print(outs, planned.model, the_plan, model, output, annotate, as_json, lines, rewrite_out)
    if got.rewritten is not None and rewrite_out is None and annotate is None:
        click.echo("warning: the plan is for the rewritten model, which was not written; pass --rewrite-out FILE.onnx",
                   err=True)


def _replace_path(planned: Any, path: str) -> Any:
    from dataclasses import replace

    return replace(planned, plan=replace(planned.plan, model={**planned.plan.model, "path": path}))


def _budget_sweep(model: str, opts: Any, outs: Any, png: str, cost_model: str, timeout: float | None) -> None:
    """``plan --budget-sweep PNG``: the frontier, printed and drawn."""
    from onnxmem.model import load_model
    from onnxmem.remat.budget import plot_sweep, sweep

    onnx_model = load_model(model)
    original, points = sweep(onnx_model, model, opts, cost_model=cost_model, timeout=timeout,
                             progress=_progress(sys.stderr.isatty()))
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


def _plan_range(model: str, outs: Any, output: str | None, annotate: str | None, as_json: bool,
                dims: tuple[str, ...], planning: dict[str, Any]) -> None:
    """``onnxmem plan`` with a ranged --dim: plan the box, prove it, write the range plan."""
    from onnxmem.model import load_model
    from onnxmem.planning import parse_dim_flags, plan_range
    from onnxmem.plans import range_to_dict, render_range_plan
    from onnxmem.report.range import render_range_summary

    if annotate:
        raise click.UsageError("--annotate writes a plan for one shape; instantiate the range plan "
                               "('onnxmem instantiate') and annotate that")
    fixed, box = parse_dim_flags(dims)
    opts = make_plan_options(dims=tuple(f"{k}={v}" for k, v in fixed.items()), **planning)
    if output:
        outs.add(output, "-o")
    onnx_model = load_model(model)
    _add_weight_files(outs, onnx_model, model)
    result = plan_range(onnx_model, model, box, opts)
    if output:
        outs.put(output, render_range_plan(result))
    outs.commit()
    if as_json:
        import json

        click.echo(json.dumps(range_to_dict(result), indent=1))
        return
    for line in render_range_summary(result):
        click.echo(one_line(line))
    click.echo("proof        ok: every pair of buffers live together is apart on the whole box")
    if output:
        click.echo(f"plan         {one_line(output)}")


def _add_weight_files(outs: Any, onnx_model: Any, model_path: str) -> None:
    """Declare the model's external data files as inputs, so no output replaces them."""
    from pathlib import Path

    from onnxmem.model import check_external_data

    for ref in check_external_data(onnx_model, Path(model_path).parent, need_files=False):
        outs.add_input(ref.path)


def plan_model_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--model M``: the model PLAN must have been made for (show, plot)."""
    return click.option(
        "--model", "model_path", type=click.Path(dir_okay=False, path_type=str), default=None,
        help="The ONNX model PLAN should belong to: refused when the plan was made for another "
             "model (sha256, or the planned tensors when the model was re-saved).")(fn)


def read_plan_for(plan_file: str, model_path: str | None, action: str, the_plan: Any = None) -> Any:
    """The plan at ``plan_file`` (``the_plan`` when already read); with ``model_path``, only
    when it was made for that model (:func:`onnxmem.verify.run.check_plan_identity`, as verify
    and compare check it)."""
    if the_plan is None:
        from onnxmem.plans import read_plan  # numpy: only when reading a plan

        the_plan = read_plan(plan_file, "point")
    if model_path is not None:
        from onnxmem.model import load_model
        from onnxmem.verify.run import check_plan_identity

        _, said = check_plan_identity(the_plan, load_model(model_path), model_path, plan_name=plan_file,
                                      action=action)
        for w in said:
            click.echo(f"warning: {one_line(w)}", err=True)
    return the_plan


@main.command()
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Rows in each table.")
@plan_model_option
@user_errors
def show(plan_file: str, top: int, model_path: str | None) -> None:
    """Summarize PLAN: the totals, the tensors live at the peak step, the largest contributors.
    A program plan (several models): each model's line and the shared arena."""
    from onnxmem.plans import Program, RangePlan, read_plan
    from onnxmem.report.range import render_range_summary
    from onnxmem.report.text import render_summary

    the_plan = read_plan(plan_file)
    if isinstance(the_plan, Program):
        if model_path is not None:
            raise click.UsageError("--model checks one model's plan; check a program plan with all its models "
                                   "('onnxmem verify A.onnx B.onnx --plan PLAN --static-only')")
        for line in program_summary(the_plan):
            click.echo(line)
        return
    if isinstance(the_plan, RangePlan):
        for line in render_range_summary(the_plan):
            click.echo(one_line(line))
        return
    click.echo(render_summary(read_plan_for(plan_file, model_path, "showing", the_plan), top=top), nl=False)


@main.command()
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("--dim", "dims", multiple=True, metavar="NAME=N", required=True,
              help="The value of a ranged dim (one for each dim the plan ranges).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Write the concrete JSON plan here.")
@user_errors
def instantiate(plan_file: str, dims: tuple[str, ...], output: str) -> None:
    """Write the concrete plan a range PLAN gives at one point (--dim NAME=N ...)."""
    from onnxmem.export.proof import prove_range_for_export
    from onnxmem.planning import parse_point
    from onnxmem.plans import instantiate as at_point
    from onnxmem.plans import read_plan

    outs = OutputSet(inputs=[plan_file])
    outs.add(output, "-o")
    rp = read_plan(plan_file, "range")
    point = parse_point(dims, rp.box)
    prove_range_for_export(rp)
    concrete = at_point(rp, point)
    outs.put(output, render_plan(concrete))
    outs.commit()
    at = " ".join(f"{k}={v}" for k, v in sorted(point.items()))
    click.echo(f"point        {at}")
    click.echo(f"arena        {fmt_bytes(concrete.arena_size)}   lower bound {fmt_bytes(concrete.lower_bound)}")
    click.echo(f"plan         {one_line(output)}")


@main.command()
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Picture to write: .png, .svg or .html (self-contained, names on hover).")
@click.option("--title", default=None, help="Title (default: the model's file name).")
@click.option("--size", default="12x7", show_default=True, metavar="WxH",
              help="PNG/SVG size in inches (at 100 dpi).")
@plan_model_option
@user_errors
def plot(plan_file: str, output: str, title: str | None, size: str, model_path: str | None) -> None:
    """Draw PLAN: tensors as rectangles in time x address above the live-bytes curve."""
    from rich.console import Console

    from onnxmem.report.text import plot_plan

    try:
        width, height = (float(v) for v in size.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"{show_name(size)} is not WxH, e.g. 12x7", param_hint="--size") from None
    OutputSet(inputs=[plan_file] + ([model_path] if model_path else [])).add(output, "-o")
    console = Console(stderr=True)
    with console.status("reading plan") as status:
        plan_ = read_plan_for(plan_file, model_path, "drawing")
        out = plot_plan(plan_, output, title=title, width=width, height=height,
                        progress=lambda msg: status.update(msg))
    click.echo(f"wrote {one_line(str(out))}")


@main.command()
@click.argument("zoo_source", metavar="DIR_OR_LIST", type=str)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Models planned at once (one process each).")
@click.option("--verify", type=RegistryChoice(load=_devices), default=None,
              help="Also run each plan in one arena with onnxruntime and measure its own peak.")
@planning_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=str), default="results",
              show_default=True, help="Folder for results.json/.csv/.md (rewritten after every "
              "model), plans/ and filled models/.")
@click.option("--only", multiple=True, metavar="PATTERN",
              help="Run only models whose name matches (shell patterns, comma-separated or repeated).")
@click.option("--executor", type=click.Choice(list(ZOO_EXECUTORS)), default="local",
              show_default=True,
              help="; ".join(f"{name}: {summary}" for name, summary in ZOO_EXECUTORS.items()) + ".")
@click.option("--model-timeout", type=click.FloatRange(min=0), default=ZOO_MODEL_TIMEOUT,
              show_default=True,
              help="Seconds one model may take; past it the model is stopped and reported as "
              "timeout, and the run goes on. 0: no limit.")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Fail when a model's arena grows against this baseline file.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Growth allowed against --baseline, as a fraction (0.01 = 1%).")
@click.option("--write-baseline", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the arenas of this run as a baseline file.")
@time_limit_flag
@user_errors
def zoo(zoo_source: str, jobs: int, verify: str | None, out_dir: str, only: tuple[str, ...],
        executor: str, model_timeout: float, baseline: str | None, tolerance: float,
        write_baseline: str | None, time_limit: float = RUN_SECONDS, **plan_flags: Any) -> None:
    """Plan (and with --verify, run) every model of a zoo; write results.json/.csv/.md.

    DIR_OR_LIST: a folder with catalog.json (from 'make zoo'), a folder of .onnx files, a
    catalog.json, or a text file of 'PATH [NAME=N | NAME=D1xD2.. | shape:NAME=D1..] ...'
    lines (NAME=N binds a dim like --dim; NAME=D1xD2.. pins an input like --input-shape;
    shape: pins any rank, 'shape:NAME=' a scalar). A model that fails or runs past
    --model-timeout is reported and the run goes on. Exit code 0: all ok; 1: a model failed
    or timed out, or an arena grew against --baseline; 3: a plan failed verification.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from onnxmem import zoo as zoo_lib
    from onnxmem.report.text import format_bytes

    inputs = _zoo_inputs(zoo_source, baseline)
    patterns = [p for word in only for p in word.split(",") if p]
    models = zoo_lib.load_zoo(zoo_source, patterns)
    inputs += [m.path for m in models]
    _check_zoo_outputs(inputs, out_dir, write_baseline, [m.name for m in models])
    base = zoo_lib.read_baseline(baseline) if baseline else None
    opts = make_plan_options(**plan_flags)
    options = zoo_lib.ZooOptions(plan=opts, verify=verify, jobs=jobs, executor=executor,
                                 work_dir=Path(out_dir), model_timeout=model_timeout, time_limit=time_limit)
    started = time.time()
    meta = {
        "command": "onnxmem zoo " + " ".join(sys.argv[2:]),
        "machine": zoo_lib.machine_info(),
        "options": {**{k: v for k, v in plan_flags.items() if v not in ((), None, False)},
                    "verify": verify, "jobs": jobs, "executor": executor,
                    "model_timeout": model_timeout},
        "seconds": 0.0,
    }
    zoo_lib.check_zoo_run(models, options)  # before the progress bar: an error is one line
    writer = zoo_lib.ResultsWriter(out_dir, [m.name for m in models], meta, inputs=inputs)
    console = Console(stderr=True)
    marks = {"ok": "[green]ok[/]", "wrong": "[red]WRONG[/]", "timeout": "[red]TIMEOUT[/]"}
    with Progress(TextColumn("[bold]zoo"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as bar:
        task = bar.add_task("", total=len(models))

        def done(r: Any) -> None:
            writer.meta["seconds"] = round(time.time() - started, 1)
            writer.add(r)
            mark = marks.get(r.status, "[red]failed[/]")
            extra = (f"arena {format_bytes(r.arena_size)}" if r.arena_size is not None else "")
            if r.verify != "not run":
                extra += f", verify {r.verify}"
            if r.error:
                extra += f": {r.error}"
            bar.console.print(f"{mark} {r.name} ({r.seconds:.1f} s) {extra}", highlight=False,
                              markup=True, soft_wrap=True)
            bar.update(task, advance=1, description=r.name)

        results = zoo_lib.run_zoo(models, options, done)
    paths = writer.write(seconds=round(time.time() - started, 1))
    if write_baseline:
        zoo_lib.write_baseline(results, write_baseline, {"options": meta["options"]}, inputs=inputs)
    click.echo(zoo_lib.results_markdown(results), nl=False)
    click.echo(f"\nresults      {paths['md']}  {paths['csv']}  {paths['json']}")
    regressions = zoo_lib.compare_baseline(results, base, tolerance) if base is not None else []
    for reg in regressions:
        click.echo(f"regression: {reg}", err=True)
    if write_baseline:
        click.echo(f"baseline     {write_baseline}")
    if any(r.status == "wrong" for r in results):
        sys.exit(3)
    if regressions or any(r.status != "ok" for r in results):
        sys.exit(1)


def _zoo_inputs(source: str, baseline: str | None) -> list[Any]:
    """The zoo's list (or catalogue) and baseline files, each checked to be a regular, bounded file."""
    import os

    from onnxmem.core.fileio import MAX_DATA_BYTES, check_input

    inputs: list[Any] = []
    if os.path.exists(source) and not os.path.isdir(source):
        check_input(source, "zoo list", MAX_DATA_BYTES)
        inputs.append(source)
    if baseline:
        check_input(baseline, "--baseline file", MAX_DATA_BYTES)
        inputs.append(baseline)
    return inputs


def _check_zoo_outputs(inputs: list[Any], out_dir: str, write_baseline: str | None, names: list[str]) -> None:
    """Every file the run writes (the results, each model's plan, the baseline) passes the checks of
    ``OutputSet`` against every input (the list, the baseline, the models), before any work."""
    import os

    outs = OutputSet(inputs)
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise OnnxmemError(f"--out {show_name(out_dir)} exists and is not a folder; give a folder path")
        for name in ("results.json", "results.csv", "results.md"):
            outs.add(os.path.join(out_dir, name), "--out")
        if os.path.isdir(os.path.join(out_dir, "plans")):
            for name in names:
                outs.add(os.path.join(out_dir, "plans", f"{name}.json"), "--out (a model's plan)")
    if write_baseline:
        outs.add(write_baseline, "--write-baseline")


def _plan_for(model: str, given: tuple[Any, str] | None, opts: Any,
              say: Callable[[str], None]) -> tuple[Any, Any, Any, str]:
    """``(onnx model, plan, view or None, where the plan came from)`` for verify/compare;
    ``given``: the ``--plan`` already read, and where it came from (:func:`_given_plan`)."""
    from onnxmem.export.annotate import plan_from_model
    from onnxmem.model import load_model
    from onnxmem.planning.pipeline import plan_loaded

    say("reading model")
    onnx_model = load_model(model)
    if opts.inputs:
        from onnxmem.runtime.inputs import check_inputs

        check_inputs(onnx_model, opts.inputs)  # before any work: names, dtypes, ranks
    if given is not None:
        return onnx_model, given[0], None, given[1]
    carried = plan_from_model(onnx_model, f"model {show_name(model)}")
    if carried is not None:
        return onnx_model, carried, None, "carried by the annotated model"
    planned = plan_loaded(onnx_model, model, opts, say)
    return onnx_model, planned.plan, planned.view, f"planned now (solver {planned.plan.solver['name']})"


def _echo_static_failures(report: Any) -> bool:
    """Print a verify report's warnings and, when the static proof failed, its first
    findings; whether it failed."""
    for w in report.warnings:
        click.echo(f"warning: {one_line(w)}", err=True)
    if not report.static:
        return False
    click.echo(f"static    FAILED: {len(report.static)} violation(s)")
    for f in report.static[:10]:
        click.echo(f"  - {one_line(str(f))}")
    return True


def _plan_or_point(model: str, plan_path: str | None, planning: dict[str, Any], seed: int, inputs: Any,
                   say: Callable[[str], None]) -> tuple[Any, Any, Any, Any, str]:
    """``(options, model, plan, view, source)`` for verify and compare: the ``--plan`` (the
    concrete plan at a point of a range plan, :func:`_given_plan`), else the plan the model
    carries or one made now (:func:`_plan_for`)."""
    given = _given_plan(plan_path, planning)
    opts = make_plan_options(**planning, seed=seed, inputs=inputs)
    return (opts, *_plan_for(model, given, opts, say))


def _given_plan(plan_path: str | None, planning: dict[str, Any]) -> tuple[Any, str] | None:
    """The ``--plan`` file, read once, as a concrete plan and where it came from; ``None``
    without ``--plan``. For ``--plan RANGE --dim NAME=N``: the concrete plan at that point
    (the ``--dim`` flags are the point, taken out of ``planning``; the range plan is proven
    first)."""
    from onnxmem.planning import parse_point
    from onnxmem.plans import instantiate as at_point
    from onnxmem.plans import plan_from_data, plan_kind, read_plan_data
    from onnxmem.proof import prove_range_plan

    if not plan_path:
        return None
    data, where = read_plan_data(plan_path)
    if plan_kind(data) != "range":
        return plan_from_data(data, where, "point"), plan_path
    rp = plan_from_data(data, where, "range")
    point = parse_point(planning.get("dims", ()), rp.box)
    planning["dims"] = ()
    findings = prove_range_plan(rp, limit=1)
    if findings:
        raise PlanInvalid(f"the range plan is wrong: {findings[0]}")
    at = " ".join(f"{k}={v}" for k, v in sorted(point.items()))
    return at_point(rp, point), f"{plan_path} at {at} (range plan, proven on its box)"


def model_and_plan(plan_help: str, device_help: str,
                   several: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """MODEL, ``--plan`` and ``--device``: what verify and compare read and where they run
    (``several``: MODEL... , one or more, as ``models``)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--device", type=RegistryChoice(load=_devices), default="cpu", show_default=True,
                          help=device_help)(fn)
        fn = click.option("--plan", "plan_path", type=click.Path(dir_okay=False, path_type=str), default=None,
                          help=f"{plan_help} (default: the plan an annotated MODEL carries, else plan "
                               "MODEL now).")(fn)
        if several:
            return click.argument("models", metavar="MODEL...", nargs=-1, required=True,
                                  type=click.Path(dir_okay=False, path_type=str))(fn)
        return click.argument("model", type=click.Path(dir_okay=False, path_type=str))(fn)
    return wrap


@main.command()
@model_and_plan("The JSON plan to verify", "Where the arena lives and the nodes run.", several=True)
@inputs_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-4, show_default=True,
              help="Relative tolerance of the output comparison.")
@click.option("--atol", type=click.FloatRange(min=0), default=1e-5, show_default=True,
              help="Absolute tolerance of the output comparison.")
@click.option("--static-only", is_flag=True, help="Only the static proof; run nothing.")
@click.option("--original", "original_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="MODEL was rewritten from this model (plan --budget --rewrite-out): also compare MODEL's "
                   "outputs in the arena with this model's own run, bit for bit.")
@click.option("--trials", type=click.IntRange(min=1), default=10, show_default=True,
              help="With --concurrency dag: how many concurrent runs, each with its own seeded schedule.")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True,
              help="With --concurrency dag: how many nodes may run at once.")
@planning_options
@pipeline_option
@user_errors
@time_limit_option(lambda kw: not kw.get("static_only"))
def verify(models: tuple[str, ...], plan_path: str | None, device: str, inputs_path: str | None, seed: int,
           rtol: float, atol: float, static_only: bool, trials: int = 10, threads: int = 2,
           original_path: str | None = None, pipeline: bool = False, **planning: Any) -> None:
    """Prove a plan for MODEL: statically, then by running MODEL inside one arena.

    With --concurrency dag the proof also checks that the graph orders every
    pair of tensors that share bytes, and the run is --trials runs with up to
    --threads nodes at once, each following the graph in a seeded random order.

    Several models and a program plan ('plan A.onnx B.onnx -o PLAN'): each
    model's plan and the shared arena are proven, then the models run one
    after the other in one arena (handed-over tensors left where they were
    written).

    Exit codes: 0 verified, 3 the plan is wrong, 1 any other error, 2 usage.
    """
    from onnxmem.verify.run import VerifyOptions, verify_plan

    if len(models) > 1 or pipeline:
        _refuse_for_several(models, {"--original": original_path is not None, "--inputs": inputs_path is not None,
                                     "--dim NAME=LO:HI": _ranged(planning["dims"]),
                                     "--concurrency dag": planning["concurrency"] != "sequential"})
        _verify_several(models, plan_path, pipeline, planning,
                        VerifyOptions(device=device, seed=seed, rtol=rtol, atol=atol, execute=not static_only))
        return
    model = models[0]

    inputs = read_input_values(inputs_path)
    say = _progress(sys.stderr.isatty())
    opts, onnx_model, the_plan, view, source = _plan_or_point(model, plan_path, planning, seed, inputs, say)
    say("verifying")
    report = verify_plan(
        onnx_model, the_plan, model_path=model, view=view, plan_name=plan_path,
        options=VerifyOptions(device=device, inputs=inputs, seed=seed, rtol=rtol, atol=atol,
                              execute=not static_only, concurrency=opts.concurrency, trials=trials,
                              threads=threads),
    )
    click.echo(f"model     {one_line(model)}")
    click.echo(f"plan      {one_line(source)}")
    click.echo(f"arena     {fmt_bytes(report.arena_size)}   {report.tensors} tensors   {report.nodes} nodes")
    if not _echo_static_failures(report):
        click.echo(f"static    ok ({report.static_seconds * 1000:.1f} ms): order topological, tensors match, "
                   "aligned, in the arena, no live overlap"
                   + (", every pair sharing bytes ordered by the graph" if opts.concurrency == "dag" else ""))
    cx = report.concurrent
    if cx is not None:
        most = max(t.most_at_once for t in cx.trials)
        click.echo(f"executed  {cx.nodes} nodes x {len(cx.trials)} trials, up to {cx.threads} at once (reached "
                   f"{most}), in one {cx.device} arena ({cx.seconds:.3f} s); reference {cx.reference_seconds:.3f} s")
        click.echo(f"trials    {len(cx.trials) - cx.failures} of {len(cx.trials)} equal the reference")
        for t in [t for t in cx.trials if not t.ok][:3]:
            click.echo(f"  - trial {t.index}: {one_line(str(t.finding))}")
    ex = report.execution
    if ex is not None:
        click.echo(f"executed  {ex.nodes_run} nodes in one {ex.device} arena, sentinel 0xFF ({ex.seconds:.3f} s); "
                   f"again outside the arena {ex.private_seconds:.3f} s; whole-model onnxruntime run "
                   f"{ex.reference_seconds:.3f} s")
        for c in ex.outputs:
            same = "identical" if c.identical else f"max |diff| {c.max_abs_diff:.3g} (tolerance {c.tolerance:.3g})"
            whole = "" if c.whole_model_diff is None else f"; whole-model run: max |diff| {c.whole_model_diff:.3g}"
            click.echo(f"  output  {one_line(c.name)}: {'ok' if c.ok else 'MISMATCH'}, outside the arena: "
                       f"{same}{whole}")
        for n in ex.notes:
            click.echo(f"  note    {one_line(n)}")
        for f in ex.findings[:10]:
            click.echo(f"  - {one_line(str(f))}")
    if report.first is not None:
        raise PlanInvalid(f"the plan is wrong: {report.first}")
    if original_path is not None and ex is not None:
        _against_original(model, onnx_model, the_plan, view, original_path, device, inputs, seed, rtol, atol)
    click.echo("verified" if ex is not None or cx is not None else "verified (static proof only)")


def _verify_several(models: tuple[str, ...], plan_path: str | None, pipeline: bool, planning: dict[str, Any],
                    options: Any) -> None:
    """``verify A.onnx B.onnx [--plan PROGRAM]``: the joint proof, then one run after the other in one arena."""
    from onnxmem.model import load_model
    from onnxmem.plans import read_plan
    from onnxmem.verify.program import verify_program

    say = _progress(sys.stderr.isatty())
    if plan_path:
        program = read_plan(plan_path, "program")
        loaded, views, source = [(load_model(m), m) for m in models], None, plan_path
    else:
        planned, program = _plan_several(models, make_plan_options(**planning, seed=options.seed), pipeline, say)
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
        for f in ex.findings[:10]:
            click.echo(f"  - {one_line(str(f))}")
    if report.findings:
        raise PlanInvalid(f"the program plan is wrong: {report.findings[0]}")
    click.echo("verified" if report.executions is not None else "verified (static proof only)")


def _against_original(model: str, onnx_model: Any, the_plan: Any, view: Any, original_path: str, device: str,
                      inputs: Any, seed: int, rtol: float, atol: float) -> None:
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


@main.command()
@model_and_plan("A JSON plan to compare", "Where onnxruntime runs.")
@inputs_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--execution-mode", type=RegistryChoice(load=_execution_modes), default="sequential",
              show_default=True, metavar="MODE",
              help="parallel: onnxruntime runs with its parallel executor (--threads inter-op threads), and a "
                   "plan made now is made with --concurrency dag.")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True,
              help="With --execution-mode parallel: onnxruntime's inter-op threads.")
@planning_options
@user_errors
@time_limit_option(lambda kw: True)
def compare(model: str, plan_path: str | None, device: str, inputs_path: str | None, seed: int,
             execution_mode: str, threads: int, **planning: Any) -> None:
    """Print onnxruntime's own activation peak beside the plan's arena for MODEL.

    Both sides count the same tensors: with --io internal (the default) the
    arena holds the graph inputs, so onnxruntime's peak is shown plus the graph
    inputs, which its caller holds through the run. onnxruntime runs the graph
    the plan describes (values the plan folds are its initializers) at
    ORT_DISABLE_ALL, and with its own optimizations at ORT_ENABLE_BASIC
    (constant folding; like for like with --fold on) and ORT_ENABLE_ALL.
    Each level shows the bytes requested (exact tensor sizes) and the bytes its
    allocator held (each allocation rounded as its arena rounds it, as the plan
    pads each offset to --alignment).
    """
    from onnxmem.runtime.peak import comparable_peak, ort_peak
    from onnxmem.verify.run import check_plan_identity, view_for_plan

    inputs = read_input_values(inputs_path)
    if execution_mode == "parallel":
        planning["concurrency"] = "dag"
    say = _progress(sys.stderr.isatty())
    opts, onnx_model, the_plan, view, source = _plan_or_point(model, plan_path, planning, seed, inputs, say)
    if plan_path:
        view, said = check_plan_identity(the_plan, onnx_model, model, plan_name=plan_path, view=view, inputs=inputs)
        for w in said:
            click.echo(f"warning: {w}", err=True)
    if view is None:
        view = view_for_plan(onnx_model, the_plan, model, inputs)
    say("profiling onnxruntime")
    peaks = [ort_peak(onnx_model, view, level=lvl, device=device, model_path=model, seed=seed, inputs=inputs,
                      execution_mode=execution_mode, threads=threads)
             for lvl in ("disable", "basic", "all")]
    io = the_plan.io
    inputs_size = comparable_peak(0, view, "internal") or 0

    def ratio(a: int | None, b: int) -> str:
        return f"{a / b:.2f}x" if a is not None and b else "-"

    arena = the_plan.arena_size
    click.echo(f"model                  {one_line(model)}")
    click.echo(f"plan                   {one_line(source)}")
    click.echo(f"naive (no reuse)       {fmt_bytes(the_plan.naive_size)}   {ratio(the_plan.naive_size, arena)} the arena")
    for p in peaks:
        label = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC (its constant folding)",
                 "all": "ORT_ENABLE_ALL (its default: fused graph)"}[p.level]
        if p.execution_mode == "parallel":
            label += f", ORT_PARALLEL with {threads} inter-op threads (kernels ran on {p.threads_seen})"
        if p.peak is None:
            click.echo(f"onnxruntime peak       {label}: not available ({one_line(p.note)})")
            continue
        same = comparable_peak(p.peak, view, io) or 0
        how = (f"{fmt_bytes(p.peak)} allocated + {fmt_bytes(inputs_size)} graph inputs" if io == "internal"
               else f"{fmt_bytes(p.peak)} allocated - graph outputs")
        click.echo(f"onnxruntime peak       {fmt_bytes(same)}   {ratio(same, arena)} the arena   [{label}: {how}; {p.field}]")
        if p.held is not None:
            held = comparable_peak(p.held, view, io) or 0
            click.echo(f"  held by onnxruntime  {fmt_bytes(held)}   {ratio(held, arena)} the arena   "
                       f"[{label.split(' ')[0]}: each allocation as its arena rounds it, mem_bytes_in_use; "
                       f"the arena pads offsets to {the_plan.alignment} B]")
    click.echo(f"lower bound            {fmt_bytes(the_plan.lower_bound)}   {ratio(the_plan.lower_bound, arena)} the arena")
    conc = str(the_plan.extra.get("concurrency", "sequential"))
    click.echo(f"onnxmem arena          {fmt_bytes(arena)}   {ratio(arena, the_plan.lower_bound)} the bound"
               f"   [--concurrency {conc}]")
    if execution_mode == "parallel" and conc != "dag":
        click.echo("warning: the plan holds for its own order only (--concurrency sequential); onnxruntime's parallel "
                   "executor may run another", err=True)
    if io == "internal":
        click.echo("note: both figures count the graph inputs and outputs and no weights: onnxruntime allocates "
                   "the outputs, its caller holds the inputs through the run, the arena (--io internal) holds both")
    else:
        click.echo("note: neither figure counts graph inputs, outputs or weights (--io external); onnxruntime's "
                   "figure is its peak minus the outputs, a low estimate")
    if the_plan.subgraphs:
        body_bytes = sum(t.size for t in the_plan.tensors if t.kind == "region")
        click.echo(f"note: the arena holds the tensors of {len(the_plan.subgraphs)} subgraphs (If branches, Loop and "
                   f"Scan bodies) in regions of {fmt_bytes(body_bytes)} in all, each sized for its largest body "
                   "whatever the inputs; onnxruntime's figure is one run on seeded random inputs, which took one "
                   "branch of each If, and its profiler's allocator statistics miss some allocations made inside "
                   "control-flow nodes (a Scan's outputs, for one): the figures are not like for like")


@main.command()
@click.argument("problem_csv", metavar="PROBLEM.csv", type=click.Path(dir_okay=False))
@click.option("--capacity", type=int, default=None, help="Arena bytes the plan must fit (a decision).")
@click.option("--minimize", is_flag=True, help="Make the arena as small as possible (the default).")
@click.option("--solver", type=RegistryChoice("solvers"), default="exact", show_default=True,
              help="Offset solver; 'onnxmem list solvers' names each with what it does.")
@click.option("--timeout", type=float, default=None, callback=_wall_clock_timeout,
              help="Seconds of wall-clock search before the best plan is kept, instead of the solver's "
                   "default budget of counted work (the same plan at any load); with --timeout results "
                   "may depend on the machine's load.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the offsets here, in the same CSV format.")
@click.option("--progress", is_flag=True, help="Print each improvement of the plan (on stderr).")
@user_errors
def pack(problem_csv: str, capacity: int | None, minimize: bool, solver: str,
         timeout: float | None, output: str | None, progress: bool) -> None:
    """Solve a MiniMalloc-format instance (id,lower,upper,size) and write its offsets.

    Exits 0 with a plan that fits the capacity (any plan when minimizing);
    4 when no plan fits it (status infeasible, timeout or over-capacity);
    3 when the checked plan is wrong; 1 on bad input; 2 on a usage error.
    """
    import time

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


@main.command()
@click.argument("kind", metavar="KIND", type=RegistryChoice("generators"))
@click.argument("output", type=click.Path(dir_okay=False, path_type=str))
@click.option("--size", type=click.IntRange(min=1), default=32, show_default=True,
              help="How big: what it counts depends on KIND ('onnxmem list generators' says).")
@click.option("--graph", "graph_kind", type=RegistryChoice(load=_randwire_kinds), default="ws",
              show_default=True, help="randwire: Watts-Strogatz, Erdos-Renyi or Barabasi-Albert.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@user_errors
def generate(kind: str, output: str, size: int, graph_kind: str, seed: int) -> None:
    """Write a seeded irregular network (KIND) as a runnable ONNX model to OUTPUT.

    KIND: one of 'onnxmem list generators'.
    """
    outs = OutputSet()
    outs.add(output, "OUTPUT")
    model = _all_generators()[kind][0](size, seed, graph_kind)
    outs.put(output, model.SerializeToString())
    outs.commit()
    click.echo(f"{kind:<12} {len(model.graph.node)} nodes -> {one_line(output)}")


@main.command("list")
@click.argument("what", type=click.Choice(list(LISTINGS)), required=False)
def list_(what: str | None) -> None:
    """Name every solver, order, export format and generator, with what each does.

    WHAT: only that kind. The names are the choices of --solver, --order,
    export --format and generate KIND.
    """
    for i, kind in enumerate([what] if what else LISTINGS):
        entries = LISTINGS[kind]()
        width = max(map(len, entries), default=0)
        click.echo(("\n" if i else "") + f"{kind}:")
        for name, summary in entries.items():
            click.echo(f"  {name:<{width}}  {summary}")


def _model_use(use: str) -> str:
    return ", ".join(name for name, f in FORMATS.items() if f.model == use) or "none"


@main.command("export")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=RegistryChoice("formats"), required=True,
              help=f"Output format: {', '.join(FORMATS)}; 'onnxmem list formats' says what each writes.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="File to write (atomically).")
@click.option("--model", "model_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help=f"The ONNX model the plan was made for; needed by: {_model_use('required')}; "
                   f"used by: {_model_use('optional')} (see docs/export.md).")
@user_errors
def export(plan_file: str, fmt: str, output: str, model_path: str | None) -> None:
    """Write the JSON plan PLAN in another format (--format) to the file -o names."""
    entry = FORMATS[fmt]
    if model_path is not None and entry.model == "none":
        raise click.UsageError(f"format '{fmt}' does not read the model; leave --model out")
    outs = OutputSet(inputs=[plan_file] + ([model_path] if model_path else []))
    outs.add(output, "-o")
    from onnxmem.export.proof import prove_for_export, prove_range_for_export
    from onnxmem.plans import MemoryPlan, RangePlan, plan_from_data, plan_kind, read_plan_data

    data, where = read_plan_data(plan_file)
    any_plan: MemoryPlan | RangePlan = (plan_from_data(data, where, "range") if plan_kind(data) == "range"
                                        else plan_from_data(data, where, "point"))
    if isinstance(any_plan, RangePlan):
        from onnxmem.export.range_c import range_c_header

        if fmt != "c" or model_path is not None:
            raise OnnxmemError(f"a range plan exports as 'c' (without --model), not {show_name(fmt)}; "
                               "instantiate it ('onnxmem instantiate') for the other formats")
        prove_range_for_export(any_plan)
        data = range_c_header(any_plan)
        outs.put(output, data)
        outs.commit()
        click.echo(f"{fmt:<12} {len(data):,} B -> {one_line(output)}")
        return
    the_plan = any_plan
    model = None
    if model_path is not None:
        import onnx  # heavy: only formats that read the model

        from onnxmem.model import load_model

        model = load_model(model_path)
        _add_weight_files(outs, model, model_path)
        external = any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer)
        if entry.beside_model and external and Path(output).resolve().parent != Path(model_path).resolve().parent:
            raise OnnxmemError(
                f"-o {show_name(output)}: the model keeps its weights in external files, whose "
                f"references only resolve next to it; write the {fmt} output into "
                f"{show_name(str(Path(model_path).parent))}"
            )
    for w in prove_for_export(the_plan, model, model_path, plan_file):
        click.echo(f"warning: {one_line(w)}", err=True)
    data = export_plan(the_plan, fmt, model)
    outs.put(output, data)
    outs.commit()
    click.echo(f"{fmt:<12} {len(data):,} B -> {one_line(output)}")


# -- end of commands --
