"""What the commands print: byte counts, progress lines, the summaries of plans."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Mapping

import click

from onnxmem.core.errors import OnnxmemError, one_line, show_name
from onnxmem.core.sizes import format_bytes

if TYPE_CHECKING:
    import numpy as np

    from onnxmem.graph import GraphView
    from onnxmem.plans import Program
    from onnxmem.plans.point import MemoryPlan

#: a progress callback: one short message per stage
Say = Callable[[str], None]


def fmt_bytes(n: int) -> str:
    """``1536`` -> ``'1.50 KiB (1,536 B)'``: :func:`onnxmem.core.sizes.format_bytes` and the exact count."""
    return format_bytes(n) if n < 1024 else f"{format_bytes(n)} ({n:,} B)"


def progress(enabled: bool) -> Say:
    """A callback that prints each stage on stderr when ``enabled`` (a terminal), else nothing."""
    def say(msg: str) -> None:
        if enabled:
            click.echo(f"  {msg} ...", err=True)

    return say


def png_path(path: str, flag: str) -> None:
    """Refuse ``path``, a picture written as PNG, where its suffix names another format (a viewer
    would read its bytes as that format)."""
    if not path.lower().endswith(".png"):
        raise OnnxmemError(f"{flag} {show_name(path)}: the picture is written as PNG; give a path ending in .png")


def echo_warnings(warnings: Iterable[str]) -> None:
    """Each warning as one line on stderr."""
    for w in warnings:
        click.echo(f"warning: {one_line(w)}", err=True)


def _subgraph_line(plan: MemoryPlan) -> str:
    """How many bodies the plan holds, of which kinds, and the bytes of their owners' regions."""
    kinds: dict[str, int] = {}
    for sg in plan.subgraphs:
        kinds[sg.kind] = kinds.get(sg.kind, 0) + 1
    body = sum(1 for t in plan.tensors if t.graph)
    regions = sum(t.size for t in plan.tensors if t.kind == "region")
    what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return f"subgraphs    {len(plan.subgraphs)} ({what})   {body} body tensors in regions of {fmt_bytes(regions)}"


def plan_summary(plan: MemoryPlan) -> list[str]:
    """The lines ``plan`` prints for a point plan."""
    n_nodes = len(plan.order)
    gap = f"+{plan.gap * 100:.2f}% over the bound" if plan.lower_bound else "at the bound"
    status = plan.solver["status"]
    if status == "timeout":
        status = "timeout: the solver's budget ended before a proof; --timeout gives it more"
    return [
        f"model        {one_line(str(plan.model['path']))}",
        *_graph_line(plan),
        f"nodes        {n_nodes}   tensors planned {len(plan.tensors)}   order {one_line(plan.order_strategy)}",
        *([_subgraph_line(plan)] if plan.subgraphs else []),
        f"weights      {fmt_bytes(plan.weights_size)}"
        + (f"   {len(plan.extra['folded'])} folded values" if plan.extra.get("folded") else ""),
        *_checkpoint_line(plan),
        f"naive        {fmt_bytes(plan.naive_size)}",
        f"lower bound  {fmt_bytes(plan.lower_bound)}",
        *(["concurrency  dag: safe under every schedule the graph allows (the bound: the heaviest tensors "
           "that may be live at once)"] if plan.extra.get("concurrency") == "dag" else []),
        *([f"file order   lower bound {fmt_bytes(plan.extra['file_order_lower_bound'])}"]
          if "file_order_lower_bound" in plan.extra else []),
        *_any_order_line(plan),
        f"arena        {fmt_bytes(plan.arena_size)}   {gap} ({status})",
        f"time         plan {plan.plan_seconds:.3f} s   solver {one_line(str(plan.solver['name']))} "
        f"{plan.solver['seconds']:.3f} s",
    ]


def _any_order_line(plan: MemoryPlan) -> list[str]:
    """``any order    lower bound N`` (``extra.any_order_lower_bound``): the bytes no order of the
    graph goes below (:mod:`onnxmem.scheduling.anyorder`), and whether the plan's order is at it."""
    every = plan.extra.get("any_order_lower_bound")
    if not isinstance(every, int) or isinstance(every, bool):
        return []
    if every >= plan.lower_bound:
        note = "the order's bound is at it: no order needs less"
    else:
        note = f"no order needs less; the order's bound is {(plan.lower_bound - every) / max(every, 1) * 100:+.2f}% above it"
    return [f"any order    lower bound {fmt_bytes(every)}   ({note})"]


def _checkpoint_line(plan: MemoryPlan) -> list[str]:
    """``checkpoint   PATH (beside the model): N frozen values ...`` for a plan whose shapes read a
    training checkpoint's values (``extra.checkpoint``)."""
    record = plan.extra.get("checkpoint")
    if not isinstance(record, dict):
        return []
    found = record.get("values")
    values: dict[str, object] = found if isinstance(found, dict) else {}
    names = ", ".join(show_name(n) for n in list(values)[:4]) + (", ..." if len(values) > 4 else "")
    return [f"checkpoint   {show_name(str(record.get('path', '?')))} ({one_line(str(record.get('found', '?')))}, "
            f"{one_line(str(record.get('reader', '?')))}): {len(values)} frozen "
            f"value{'' if len(values) == 1 else 's'} known to shape inference and runs" + (f" ({names})" if names else "")]


def _graph_line(plan: MemoryPlan) -> list[str]:
    """``graph        onnxruntime's, level all for cpu ...`` for a plan of onnxruntime's graph."""
    from onnxmem.plans.optimization import plan_optimization

    record = plan_optimization(plan.model)
    return [] if record.level == "none" else [f"graph        onnxruntime's, {one_line(record.describe())}"]
def deployment_lines(plan: MemoryPlan, view: GraphView, device: str | None = "cpu") -> list[str]:
    """The deployment's total (weights + arena + inputs and outputs outside it + the provider's measured
    fixed cost, as ``onnxmem fit --runtime plan`` counts it) and the process's predicted peak (that
    total over the resident size of a process with onnxruntime loaded). ``device`` ``None``: the total
    without the fixed cost, nothing measured (no onnxruntime process is started)."""
    io = sum(view.tensors[v.name].size for v in plan.outside
             if v.reason == "external-io" and not v.graph and v.name in view.tensors)
    if device is None:
        return [f"deployment   weights + arena + io = {fmt_bytes(plan.weights_size + plan.arena_size + io)}   "
                "(--fixed-cost adds onnxruntime's measured fixed cost and the process's predicted peak)"]
    from onnxmem.runtime import fixed_cost

    try:
        fixed = fixed_cost(device)
    except OnnxmemError as exc:  # the plan stands without it
        return [f"deployment   weights + arena + io = {fmt_bytes(plan.weights_size + plan.arena_size + io)}; "
                f"the fixed cost was not measured: {one_line(str(exc))}"]
    total = plan.weights_size + plan.arena_size + io + fixed.session
    return [
        f"deployment   total: weights + arena + io + fixed = {fmt_bytes(total)}   (io {fmt_bytes(io)} outside the "
        f"arena, fixed {fmt_bytes(fixed.session)}: onnxruntime {device} session, measured)",
        f"process peak {fmt_bytes(fixed.baseline + total)} predicted (a process with onnxruntime loaded, "
        f"{fmt_bytes(fixed.baseline)}, + the deployment)",
    ]


def measured_session_lines(model: str, view: GraphView, device: str = "cpu",
                           inputs: Mapping[str, np.ndarray] | None = None, seed: int = 0) -> list[str]:
    """A real default onnxruntime session of ``model`` (``SessionOptions()`` as it is) at the plan's
    input shapes, in a fresh process: its resident growth over 2 runs plus its inputs, and the
    process's peak; one line saying why where it cannot run. ``inputs``: the values of some graph
    inputs (``--inputs``, and those the plan assumed), fed as they are; the others drawn with ``seed``."""
    from onnxmem.core.errors import OnnxmemError
    from onnxmem.runtime import session_peak

    if device != "cpu":
        return [f"measured     the process is measured on --device cpu only ({device} given)"]
    # every graph input is fed: the data, and a training graph's parameters (the caller's state)
    fed = [*view.inputs, *(n for n in view.outside if n in view.tensors)]
    shapes = {n: view.tensors[n].shape for n in fed}  # an input passed through as an output too
    try:
        got = session_peak(model, shapes, level="ORT_ENABLE_ALL", inputs=inputs, seed=seed)
    except OnnxmemError as exc:
        return [f"measured     the default session could not run: {one_line(str(exc))}"]
    return [f"measured     default session (ORT_ENABLE_ALL, memory patterns on, 2 runs): "
            f"{fmt_bytes(got.peak + got.inputs)} (growth {fmt_bytes(got.peak)} + inputs {fmt_bytes(got.inputs)}; "
            f"made {fmt_bytes(got.created)}, held {fmt_bytes(got.held)}); process peak "
            f"{fmt_bytes(got.baseline + got.peak + got.inputs)}"]


def program_summary(program: Program) -> list[str]:
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
