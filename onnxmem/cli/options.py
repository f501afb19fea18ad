"""The flags several commands share, and what they turn into (:class:`PlanOptions`).

Each helper adds its flags to a command as a decorator; the planner's own types are
imported when a command runs, so that ``onnxmem CMD --help`` imports neither onnx nor numpy.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypedDict, TypeVar

import click

from onnxmem.core.errors import one_line, show_name
from onnxmem.core.sizes import MAX_ALIGNMENT, MAX_TIMEOUT

from .registries import CONCURRENCY_MODES, DEVICES, IO_MODES, LISTINGS, OPTIMIZE_LEVELS

if TYPE_CHECKING:
    import numpy as np
    from click.shell_completion import CompletionItem

    from onnxmem.planning.pipeline import PlanOptions

F = TypeVar("F", bound=Callable[..., object])
#: the arrays of ``--inputs``, by name
InputValues = Mapping[str, "np.ndarray"]



class PlanningFlags(TypedDict):
    """The flags of :func:`planning_options`, as click passes them to a command."""

    solver: str
    order: str
    alignment: int
    dims: tuple[str, ...]
    input_shapes: tuple[str, ...]
    measure_shapes: bool
    io: str
    timeout: float | None
    inplace: str
    fold: str
    concurrency: str
    branches: tuple[str, ...]
    max_trips: int | None
    checkpoint: str | None


#: the planner's defaults (``PlanOptions()``'s; a test checks they agree)
DEFAULT_SOLVER = "auto"
DEFAULT_ORDER = "auto"


class Finite(click.FloatRange):
    """click's ``FloatRange`` that also refuses ``nan`` and ``inf`` (``FloatRange`` lets ``nan``
    through every bound, and an infinite one past ``max``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        got = super().convert(value, param, ctx)
        if not math.isfinite(got):
            self.fail(f"{show_name(str(value))} is not a finite number", param, ctx)
        return float(got)


#: the longest ``--time-limit`` (about 3 years): the timer that keeps it takes no longer one
MAX_TIME_LIMIT = 1e8


class RegistryChoice(click.ParamType[str]):  # type: ignore[type-arg,unused-ignore]
    """A choice among a registry's names.

    ``listing``: the ``onnxmem list`` kind that names and explains the entries, read from
    the registry when first needed (to check a value the user gave, not the option's
    default, so that ``plan`` without ``--remat`` loads no recomputation module); the
    option's help shows NAME and an unknown value points to the listing. ``names``: a small
    fixed set, which the help shows in full.
    """

    name = "choice"

    def __init__(self, listing: str | None = None, names: Iterable[str] | None = None) -> None:
        if (listing is None) == (names is None):
            raise ValueError("give a listing or the names, not both")
        self.listing = listing
        self._names = tuple(names or ())

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(LISTINGS[self.listing]()) if self.listing is not None else self._names

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NAME" if self.listing is not None else "[" + "|".join(self.choices) + "]"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, str) and param is not None and value == param.default:
            return value  # the command's own default, one of the names (a test checks each): no registry read
        choices = self.choices
        if isinstance(value, str) and value in choices:
            return value
        import difflib

        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        shown = show_name(str(value))  # the user's text, escaped: it may hold control characters
        if self.listing is not None:
            self.fail(f"{shown} is not one of the {len(choices)} {self.listing}; {hint}"
                      f"'onnxmem list {self.listing}' names each with what it does", param, ctx)
        self.fail(f"{shown} is not one of {', '.join(choices)}; {hint}".rstrip("; "), param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(c) for c in self.choices if c.startswith(incomplete)]


def wall_clock_timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """``--timeout``: this command's searches stop by the wall clock (see :mod:`onnxmem.core.workclock`)."""
    if value is not None:
        from onnxmem.core.workclock import use_wall_clock

        use_wall_clock()
        ctx.call_on_close(lambda: use_wall_clock(False))
    return value


def planning_options(fn: F) -> F:
    """The flags that say how to plan, shared by every command that plans."""
    opts = [
        click.option("--solver", type=RegistryChoice("solvers"), default=DEFAULT_SOLVER, show_default=True,
                     help="Buffer-assignment algorithm; 'onnxmem list solvers' names each with what it does."),
        click.option("--order", "order", type=RegistryChoice("orders"), default=DEFAULT_ORDER, show_default=True,
                     help="Operator-order strategy; 'onnxmem list orders' names each with what it does."),
        click.option("--alignment", type=click.IntRange(min=1, max=MAX_ALIGNMENT), default=64, show_default=True,
                     help="Byte alignment of every offset (and size)."),
        click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                     help="Bind a symbolic dim, e.g. --dim batch=1 (repeatable); 'plan' also takes "
                          "a range, --dim batch=1:8, or a range with a step, --dim H=160:640:32, for "
                          "a range plan."),
        click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D1xD2..",
                     help="Pin an input's shape, e.g. --input-shape x=1x3x224x224 (repeatable)."),
        click.option("--measure-shapes", is_flag=True,
                     help="Run the model once in onnxruntime and use the measured shapes."),
        click.option("--io", type=RegistryChoice(names=IO_MODES), default="internal",
                     show_default=True, help="external: graph inputs and outputs stay out of the arena."),
        click.option("--timeout", type=Finite(min=0, max=MAX_TIMEOUT), default=None, callback=wall_clock_timeout,
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
        click.option("--concurrency", type=RegistryChoice(names=CONCURRENCY_MODES), default="sequential",
                     show_default=True, metavar="MODE",
                     help="sequential: the plan holds for its own operator order; dag: for every schedule "
                          "the graph allows, with independent nodes running at once (tensors share bytes "
                          "only when the graph orders them)."),
        click.option("--branch", "branches", multiple=True, metavar="IF=then|else",
                     help="Plan only the branch runs of If node IF take (its path, e.g. If_0 or "
                          "Loop_3/body/If_1; repeatable): the other branch is left out, for shapes at "
                          "which it cannot run; verify refuses a run that takes it."),
        click.option("--max-trips", "max_trips", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Plan a Loop whose carried values grow per iteration (a decoder appending a row "
                          "each step) for runs of at most N iterations, where its trip count is not a "
                          "constant; verify refuses a run of more."),
        click.option("--checkpoint", type=click.Path(dir_okay=False, path_type=str), default=None,
                     metavar="PATH",
                     help="A training graph's checkpoint (onnxruntime's artifact generator): its frozen constant "
                          "parameters (a dynamo export's Reshape targets, ReduceMean axes, Dropout ratios) feed "
                          "shape inference and verify's run. Default: the generator's 'checkpoint' file beside "
                          "the model, where there is one."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def optimize_option(default: str | None, provider: str = "--device's provider") -> Callable[[F], F]:
    """``--optimize LEVEL``: plan the graph onnxruntime builds at LEVEL (plan, verify, compare, zoo);
    ``default``: ``none`` (plan, zoo), or ``None`` (verify, compare: the level the plan records);
    ``provider``: the command's words for the provider that builds the graph."""
    given = ("Default: the level the plan records (none when planning now); a plan made at another "
             "level is refused." if default is None else "")
    return click.option(
        "--optimize", "optimize", type=RegistryChoice(names=OPTIMIZE_LEVELS), default=default,
        show_default=default is not None, metavar="LEVEL",
        help="The graph to plan: none, the model as written (holds on every CPU, provider and onnxruntime "
             "version); basic, extended or all, the graph onnxruntime builds at that graph optimization level "
             f"for {provider} (all is its default: fused kernels, QLinear kernels from QDQ, NCHWc "
             "layout on CPU; that plan is tied to this onnxruntime version, the provider and, at all on CPU, "
             "the machine's vector width). " + given)


def inputs_option(fn: F) -> F:
    """``--inputs FILE.npz``: values for some or all graph inputs (plan, verify, compare)."""
    return click.option(
        "--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=str), default=None,
        metavar="FILE.npz",
        help="Values for some or all graph inputs, by name (numpy.savez); the others get seeded random "
             "values. Their shapes bind the inputs' dims as --input-shape does. Small ones (numbers "
             "of at most 64 elements) that decide an If or size tensors inference cannot size without them "
             "(a Reshape's target) are read as known and recorded in the plan, which holds at those "
             "values alone.")(fn)


def time_limit_flag(fn: F) -> F:
    """``--time-limit SECONDS`` (verify, compare, plan, zoo); the isolation module is read when a
    command takes the flag, so that ``pack`` does not load it."""
    from onnxmem.runtime.isolation import RUN_SECONDS

    return click.option(
        "--time-limit", type=Finite(min=0, min_open=True, max=MAX_TIME_LIMIT), default=RUN_SECONDS, show_default=True,
        metavar="SECONDS",
        help="Seconds each onnxruntime run may take (measuring shapes, computing weights, the arena run, the "
             "reference run, profiling); past it the command stops with an error naming the run. A safety "
             "bound: no figure depends on it. The runs happen in a child process, so a crash of onnxruntime "
             "is an error too.")(fn)


def custom_op_library_flag(fn: F) -> F:
    """``--custom-op-library PATH``, repeatable (plan, verify, compare, fit, zoo)."""
    return click.option(
        "--custom-op-library", "custom_op_library", type=click.Path(dir_okay=True, path_type=str), multiple=True,
        metavar="PATH",
        help="A shared library of onnxruntime custom ops (built with its custom op API; "
             "onnxruntime_extensions.get_library_path() names one) that every onnxruntime session of the "
             "command registers, for a model with ops of a domain of its own. Repeat for several. It is "
             "native code run in onnxmem's processes: give only a library you trust.")(fn)


def libraries_read() -> list[str]:
    """The custom op libraries of the command in progress (``--custom-op-library``): files it reads,
    which no output may overwrite."""
    from onnxmem.runtime.isolation import current_limits

    return list(current_limits().custom_ops)


def time_limit_option(prestart: Callable[[dict[str, object]], bool]) -> Callable[[F], F]:
    """``--time-limit`` and ``--custom-op-library``: the command runs inside
    ``isolation.run_limits`` (every onnxruntime run in one child process, each bounded, each session
    registering the libraries); ``prestart(kwargs)``: whether it surely runs onnxruntime."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: object, time_limit: float, custom_op_library: tuple[str, ...] = (),
                    **kwargs: object) -> object:
            from onnxmem.runtime.isolation import run_limits
            from onnxmem.runtime.settings import check_libraries

            cuda = kwargs.get("device") == "cuda"
            with run_limits(seconds=time_limit, address_space=not cuda, prestart=prestart(kwargs),
                            warm="cuda" if cuda else None, custom_ops=check_libraries(custom_op_library)):
                return fn(*args, **kwargs)

        return time_limit_flag(custom_op_library_flag(wrapper))  # type: ignore[return-value]
    return wrap


def pipeline_option(fn: F) -> F:
    """``--pipeline``: several models run in sequence, each one's outputs the next one's inputs."""
    return click.option(
        "--pipeline", is_flag=True,
        help="With several models: they run in sequence and every graph output of one that is a graph "
             "input of the next (by name) is handed over in the arena, live across both.")(fn)


def plan_model_option(fn: F) -> F:
    """``--model M``: the model PLAN must have been made for (show, plot)."""
    return click.option(
        "--model", "model_path", type=click.Path(dir_okay=False, path_type=str), default=None,
        help="The ONNX model PLAN should belong to: refused when the plan was made for another "
             "model (sha256, or the planned tensors when the model was re-saved).")(fn)


def device_option(help_text: str) -> Callable[[F], F]:
    """``--device cpu|cuda``."""
    return click.option("--device", type=RegistryChoice(names=DEVICES), default="cpu", show_default=True,
                        help=help_text)


def model_and_plan(plan_help: str, device_help: str, several: bool = False) -> Callable[[F], F]:
    """MODEL, ``--plan`` and ``--device``: what verify and compare read and where they run
    (``several``: MODEL... , one or more, as ``models``)."""
    def wrap(fn: F) -> F:
        fn = device_option(device_help)(fn)
        fn = click.option("--plan", "plan_path", type=click.Path(dir_okay=False, path_type=str), default=None,
                          help=f"{plan_help} (default: the plan an annotated MODEL carries, else plan "
                               "MODEL now).")(fn)
        if several:
            return click.argument("models", metavar="MODEL...", nargs=-1, required=True,
                                  type=click.Path(dir_okay=False, path_type=str))(fn)
        return click.argument("model", type=click.Path(dir_okay=False, path_type=str))(fn)
    return wrap


def read_input_values(path: str | None) -> InputValues | None:
    """The arrays of ``--inputs`` (``None`` without it), read by :func:`onnxmem.runtime.inputs.read_inputs`."""
    if not path:
        return None
    from onnxmem.runtime.inputs import read_inputs  # numpy

    return read_inputs(path)


def make_plan_options(solver: str, order: str, alignment: int, dims: tuple[str, ...],
                      input_shapes: tuple[str, ...], measure_shapes: bool, io: str,
                      timeout: float | None, seed: int = 0, inplace: str = "on", fold: str = "on",
                      inputs: InputValues | None = None, concurrency: str = "sequential",
                      branches: tuple[str, ...] = (), optimize: str | None = "none",
                      device: str = "cpu", max_trips: int | None = None, checkpoint: str | None = None) -> PlanOptions:
    """The planner's options from the flags of :func:`planning_options`."""
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
        optimize=optimize or "none",
        device=device,
        max_trips=max_trips, checkpoint=checkpoint,
    )


def _parse_branch(text: str) -> tuple[str, str]:
    """``IF=then`` -> ``("IF", "then_branch")``; a usage error otherwise."""
    from onnxmem.graph import BRANCH_NAMES

    path, eq, branch = text.rpartition("=")
    if not eq or not path or branch not in BRANCH_NAMES:
        raise click.BadParameter(f"{show_name(text)} is not IF=then or IF=else (IF: the If node's path)",
                                 param_hint="'--branch'")
    return path, BRANCH_NAMES[branch]


def ranged(dims: Iterable[str]) -> bool:
    """Whether a --dim flag gives a range (NAME=LO:HI)."""
    return any(":" in d.partition("=")[2] for d in dims)


def given(name: str) -> bool:
    """Whether the running command's parameter ``name`` was given on the command line (not left at its
    default): for a flag that only means something beside another."""
    from click.core import ParameterSource

    source = click.get_current_context().get_parameter_source(name)
    return source is not None and source not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


#: the most threads ``--threads`` gives onnxruntime (inter-op threads, or nodes run at once): past
#: the cores there is nothing to gain, and 1,000 threads' stacks within an address-space limit of
#: 6 GB (``ulimit -v``) left onnxruntime waiting for threads it could not start
MAX_THREADS = 256


#: the planning flags (their parameter names) that only say how to make a plan
_PLAN_MAKING = (("--solver", "solver"), ("--order", "order"), ("--alignment", "alignment"), ("--timeout", "timeout"),
                ("--inplace", "inplace"), ("--fold", "fold"), ("--branch", "branches"), ("--max-trips", "max_trips"))


def plan_making_flags(plan_path: str | None) -> tuple[str, ...]:
    """With ``--plan``: the flags given that only make a plan, and so leave the plan given as it is
    (read here, where the command line's context is; :func:`warn_plan_making_flags` says so once
    the plan has been read, so that a plan that cannot be read is one line of error alone)."""
    return tuple(flag for flag, name in _PLAN_MAKING if given(name)) if plan_path else ()


def warn_plan_making_flags(flags: tuple[str, ...], plan_path: str | None) -> None:
    """Say on stderr that ``flags`` (:func:`plan_making_flags`) leave the plan given as it is."""
    if flags and plan_path:
        click.echo(f"warning: {', '.join(flags)} {'says' if len(flags) == 1 else 'say'} how to make a plan; "
                   f"the plan given ({one_line(plan_path)}) is checked as it was made (leave "
                   f"{'it' if len(flags) == 1 else 'them'} out)", err=True)


def refuse_for_several(models: tuple[str, ...], flags: dict[str, bool]) -> None:
    """Usage errors for several models: --pipeline needs two, and flags for one model are refused."""
    if len(models) < 2:
        raise click.UsageError("--pipeline hands tensors from one model to the next; give two or more models")
    for flag, given in flags.items():
        if given:
            raise click.UsageError(f"{flag} works on one model; leave it out when giving several models")
