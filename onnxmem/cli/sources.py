"""Where a command's model and plan come from: the ``--plan`` file (a point of a range plan),
the plan an annotated model carries, or a plan made now; and the model's weight files (its
external data, a training graph's checkpoint beside it), which no output may replace."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from onnxmem.core.errors import PlanError, PlanInvalid, one_line, show_name
from onnxmem.core.fileio import OutputSet

from .options import InputValues, PlanningFlags, make_plan_options, warn_plan_making_flags
from .output import Say, echo_warnings

if TYPE_CHECKING:
    import onnx

    from onnxmem.graph import GraphView
    from onnxmem.model import ExternalData
    from onnxmem.planning.pipeline import Planned, PlanOptions
    from onnxmem.plans import Program
    from onnxmem.plans.point import MemoryPlan
    from onnxmem.runtime.optimize import Optimized


def add_weight_files(outs: OutputSet, onnx_model: onnx.ModelProto, model_path: str,
                     refs: Iterable[ExternalData] | None = None) -> None:
    """Declare the model's external data files and the training checkpoint beside it
    (:func:`onnxmem.model.find_checkpoint`, read when planning needs it) as inputs, so no output
    replaces them. ``refs``: the model's external-data references as the loader found them
    (:func:`onnxmem.model.load_model_data`), where the caller has them: the model is not walked
    again."""
    from onnxmem.model import check_external_data, find_checkpoint

    if refs is None:
        refs = check_external_data(onnx_model, Path(model_path).parent, need_files=False)
    for path in dict.fromkeys(ref.path for ref in refs):
        outs.add_input(path)  # once per data file, however many tensors it holds
    beside = find_checkpoint(model_path)
    if beside is not None:
        outs.add_input(beside)


def read_plan_for(plan_file: str, model_path: str | None, action: str,
                  the_plan: MemoryPlan | None = None, outs: OutputSet | None = None) -> MemoryPlan:
    """The plan at ``plan_file`` (``the_plan`` when already read), proven: ``PlanInvalid`` when
    it breaks a rule (:func:`onnxmem.export.proof.prove_for_export`: without ``model_path``,
    the rules the plan alone can be held to); with ``model_path``, only when it was made for
    that model (:func:`onnxmem.verify.run.check_plan_identity`, as verify and compare check it),
    and held to the whole static proof (a plan of the graph onnxruntime builds at an
    optimization level: against that graph, built again as ``verify`` builds it). ``outs``: the
    command's outputs, which the model's weight files join as inputs (none may replace them)."""
    from onnxmem.export.proof import prove_for_export

    if the_plan is None:
        from onnxmem.plans import read_plan  # numpy: only when reading a plan

        the_plan = read_plan(plan_file, "point")
    model = None
    if model_path is not None:
        from onnxmem.model import load_model

        model = load_model(model_path)
        if outs is not None:
            add_weight_files(outs, model, model_path)
    refusal = f"plan file {show_name(plan_file)} is not " + {"showing": "shown", "drawing": "drawn"}.get(action, "used")
    echo_warnings(prove_for_export(the_plan, model, model_path, plan_file, action=action, refusal=refusal))
    return the_plan


def plan_several(models: tuple[str, ...], opts: PlanOptions, pipeline: bool,
                 say: Say) -> tuple[list[Planned], Program]:
    """Plan each model with ``opts``, then all of them in one arena: ``(planned, program)``."""
    from onnxmem.planning import pipeline_handovers, plan_model, plan_program  # onnx

    planned = [plan_model(m, opts, progress=say) for m in models]
    handovers = pipeline_handovers(planned, models) if pipeline else ()
    say(f"planning {len(models)} models in one arena")
    return planned, plan_program(planned, handovers, solver=opts.solver, timeout=opts.timeout)


@contextmanager
def plan_or_point(model: str, plan_path: str | None, planning: PlanningFlags, seed: int,
                  inputs: InputValues | None, say: Say, *, optimize: str | None = None,
                  device: str = "cpu", idle_flags: tuple[str, ...] = (),
                  ) -> Iterator[tuple[PlanOptions, Optimized, MemoryPlan, GraphView | None, str, float | None]]:
    """``(options, graph, plan, view, source, proven)`` for verify and compare, for the ``with`` block:
    the ``--plan`` (the concrete plan at a point of a range plan, :func:`_given_plan`), else the
    plan the model carries, else one made now; ``graph``: the graph the plan is for
    (:func:`onnxmem.runtime.optimize.optimized_model`: the model as written, or the graph
    onnxruntime builds again as the plan records it, held to the plan's record and digest).
    ``planning``: the flags of :func:`~onnxmem.cli.options.planning_options`; ``optimize``:
    ``--optimize`` (``None``: not given). ``proven``: for a plan made now, how long its static
    proof against ``view`` took as it was made (:attr:`~onnxmem.planning.pipeline.Planned.proof_seconds`);
    ``None`` for a plan read, which no one has proven yet (``view`` may be given all the same: that
    of onnxruntime's graph, for a plan of it). ``idle_flags``: the plan-making flags given with
    ``--plan`` (:func:`~onnxmem.cli.options.plan_making_flags`), warned of once the plan is read."""
    from onnxmem.planning.pipeline import plan_optimized
    from onnxmem.plans.optimization import plan_optimization
    from onnxmem.runtime.optimize import check_rebuilt, check_recorded, optimized_model

    given = _given_plan(plan_path, planning)
    opts = make_plan_options(**planning, seed=seed, inputs=inputs, optimize=optimize, device=device)
    onnx_model, found = _plan_for(model, given, opts, say)
    level = opts.optimize
    if found is not None:
        _check_point(found[0], opts, found[1])
        recorded = plan_optimization(found[0].model, f"plan {show_name(found[1])}")
        level = check_recorded(recorded, level=optimize, device=device, plan_name=found[1])
    if level != "none":
        say(f"optimizing with onnxruntime (--optimize {level}, --device {device})")
    with optimized_model(model, level, device, model=onnx_model) as built:
        if found is not None:
            view = None
            if level != "none":
                from onnxmem.verify.run import view_for_plan

                check_rebuilt(recorded, found[0].model.get("graph_sha256"), built, found[1])
                # the caller's state of the model as written (the optimizer may hide a loss block)
                view = view_for_plan(built.model, found[0], built.path, inputs, caller=built.caller)
            warn_plan_making_flags(idle_flags, plan_path)
            yield opts, built, found[0], view, found[1], None
            return
        planned = plan_optimized(built, opts, say)
        yield (opts, built, planned.plan, planned.view, f"planned now (solver {planned.plan.solver['name']})",
               planned.proof_seconds)


def _check_point(plan: MemoryPlan, opts: PlanOptions, where: str) -> None:
    """Refuse ``--dim`` and ``--input-shape`` values other than the plan's own: the plan given
    is checked at its point, never at another one the flags name."""
    for name, value in opts.dims.items():
        if plan.dims.get(name) != value:
            bound = " ".join(f"{k}={v}" for k, v in sorted(plan.dims.items())) or "no dim"
            at = f"binds {one_line(bound)}" if name not in plan.dims else f"was made at {name}={plan.dims[name]}"
            _off_point(where, at, f"--dim {name}={value}")
    if not opts.input_shapes:
        return
    shapes = {t.name: list(t.shape) for t in plan.tensors if not t.graph and t.name in opts.input_shapes}
    for name, shape in opts.input_shapes.items():
        have = plan.input_shapes.get(name, shapes.get(name))
        if have != list(shape):
            at = (f"records no shape for input {show_name(name)}" if have is None
                  else f"was made with {show_name(name)} of shape {'x'.join(map(str, have)) or 'scalar'}")
            _off_point(where, at, f"--input-shape {name}={'x'.join(map(str, shape))}")


def _off_point(where: str, at: str, flag: str) -> None:
    raise PlanError(f"the plan ({one_line(where)}) {at}, not {one_line(flag)}; plan the model with that flag "
                    "for a plan at that point (or leave it out)")


def _plan_for(model: str, given: tuple[MemoryPlan, str] | None, opts: PlanOptions,
              say: Say) -> tuple[onnx.ModelProto, tuple[MemoryPlan, str] | None]:
    """The model, and the ``--plan`` already read (``given``: it and where it came from), else
    the plan the model carries, else ``None`` (plan it now)."""
    from onnxmem.export.annotate import plan_from_model
    from onnxmem.model import load_model

    say("reading model")
    onnx_model = load_model(model)
    if opts.inputs:
        from onnxmem.runtime.inputs import check_inputs

        check_inputs(onnx_model, opts.inputs)  # before any work: names, dtypes, ranks
    if given is not None:
        return onnx_model, given
    carried = plan_from_model(onnx_model, f"model {show_name(model)}")
    return onnx_model, (None if carried is None else (carried, "carried by the annotated model"))


def _given_plan(plan_path: str | None, planning: PlanningFlags) -> tuple[MemoryPlan, str] | None:
    """The ``--plan`` file, read once, as a concrete plan and where it came from; ``None``
    without ``--plan``. For ``--plan RANGE --dim NAME=N``: the concrete plan at that point
    (the ``--dim`` flags are the point, taken out of ``planning``; the range plan is proven
    first)."""
    from onnxmem.planning import parse_point
    from onnxmem.plans import instantiate, plan_from_data, plan_kind, read_plan_data
    from onnxmem.proof import prove_range_plan

    if not plan_path:
        return None
    data, where = read_plan_data(plan_path)
    if plan_kind(data) != "range":
        return plan_from_data(data, where, "point"), plan_path
    rp = plan_from_data(data, where, "range")
    point = parse_point(planning.get("dims", ()), rp.box, rp.steps)
    planning["dims"] = ()
    findings = prove_range_plan(rp, limit=1)
    if findings:
        raise PlanInvalid(f"the range plan is wrong: {findings[0]}")
    at = " ".join(f"{k}={v}" for k, v in sorted(point.items()))
    return instantiate(rp, point), f"{plan_path} at {at} (range plan, proven on its box)"
