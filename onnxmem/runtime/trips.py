"""How many iterations a Loop whose values grow runs, against the bound its plan holds.

A plan sizes such a Loop for at most ``bound`` iterations (``extra.loop_trips``,
:mod:`onnxmem.shapes.loops`). The arena run refuses an iteration past it
(:class:`onnxmem.runtime.arena.ArenaRun`); :func:`check_trips` refuses the same before
onnxruntime's own runs (``compare``): the model runs once, in the command's onnxruntime
process, with each bounded Loop of the main graph given one more scan output (its
iteration number), whose length is the count. Loops nested in bodies are not counted here.

A Loop with neither a trip count nor a condition, or with no trip count and a constant true
condition its body passes on, runs forever (the ONNX spec's ``for (i = 0; ; ++i)``):
:func:`onnxmem.model.check_loops_end` refuses a run of a main graph that holds one before it
starts. One whose trip count is known but far too large to finish (a damaged file's
8,589,934,595) is stopped by :class:`LoopClock` once its iterations so far show that the rest
cannot end within the time limit, not when the limit is reached.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import onnx

from onnxmem.core.errors import PlanError, show_name
from onnxmem.graph import GraphView, node_names
from onnxmem.runtime.isolation import TimeLimitExceeded, seconds_left

__all__ = ["PROJECT_AFTER", "LoopClock", "check_trips", "loop_bounds", "over_bound"]

#: seconds a Loop runs before :class:`LoopClock` projects the time of its remaining iterations
PROJECT_AFTER = 1.0


def loop_bounds(extra: Mapping[str, Any]) -> dict[str, int]:
    """``{Loop node path: bound}`` of a plan's ``extra.loop_trips``."""
    found = extra.get("loop_trips")
    if not isinstance(found, dict):
        return {}
    return {str(k): int(v["bound"]) for k, v in found.items() if isinstance(v, dict) and "bound" in v}


def over_bound(loop: str, bound: int, trips: int | None) -> PlanError:
    """The one-line refusal of a run of ``loop`` past the ``bound`` iterations its plan holds."""
    count = f" (its trip count is {trips})" if trips is not None else ""
    return PlanError(f"Loop {show_name(loop)} runs more than the {bound} iterations the plan holds{count} on these "
                     f"inputs: its values grow per iteration and are planned for at most {bound} "
                     "(extra.loop_trips); plan again with --max-trips N for the most iterations runs take, or "
                     "give inputs that stop sooner")


def check_trips(model: onnx.ModelProto, view: GraphView, extra: Mapping[str, Any], *,
                model_path: str | os.PathLike[str] | None = None, seed: int = 0,
                inputs: Mapping[str, Any] | None = None) -> None:
    """Raise :func:`over_bound`'s error when a bounded Loop of the main graph runs past its bound
    on the inputs ``compare`` runs (``inputs`` where given, else seeded random values)."""
    bounds = loop_bounds(extra)
    names = node_names(model.graph)
    mine = {i: names[i] for i, n in enumerate(model.graph.node) if names[i] in bounds and n.op_type == "Loop"}
    if not mine:
        return
    from onnxmem.runtime.isolation import run_isolated

    counts = run_isolated(_count, model, view, mine, model_path=model_path, seed=seed, inputs=inputs)
    for name, count in counts.items():
        if count > bounds[name]:
            raise over_bound(name, bounds[name], None)


def _count(model: onnx.ModelProto, view: GraphView, loops: Mapping[int, str], *,
           model_path: str | os.PathLike[str] | None, seed: int, inputs: Mapping[str, Any] | None) -> dict[str, int]:
    """:func:`check_trips`'s run, in the process that runs onnxruntime: ``{Loop name: iterations}``."""
    from onnxmem.runtime.inputs import feeds_for
    from onnxmem.runtime.ort import load_with_weights
    from onnxmem.runtime.sessions import run_model

    counted = load_with_weights(model, model_path)
    taken = {vi.name for vi in counted.graph.input} | {o for n in counted.graph.node for o in n.output}
    outputs: dict[str, str] = {}
    for index, name in loops.items():
        node = counted.graph.node[index]
        body = next(a.g for a in node.attribute if a.name == "body")
        label = _fresh(f"onnxmem_trips_{index}", taken)
        inner = _fresh(f"{label}_i", taken | {vi.name for vi in body.input})
        body.node.append(onnx.helper.make_node("Identity", [body.input[0].name], [inner]))
        body.output.append(onnx.helper.make_tensor_value_info(inner, onnx.TensorProto.INT64, []))
        node.output.append(label)
        counted.graph.output.append(onnx.helper.make_tensor_value_info(label, onnx.TensorProto.INT64, [None]))
        outputs[label] = name
    got = run_model(counted, feeds_for(counted, view, inputs, seed), list(outputs))
    return {name: int(got[label].shape[0]) for label, name in outputs.items()}


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


class LoopClock:
    """The time of one run of a Loop (``loop``: its node's path) that runs ``trips`` iterations (its
    trip count ``M``, where its body cannot end it sooner: :func:`onnxmem.model.passes_true`;
    ``None``: its condition may end it, and nothing is projected). Once it has run
    :data:`PROJECT_AFTER` seconds, :meth:`check` projects the remaining iterations at the pace of
    those done and raises ``TimeLimitExceeded`` where they cannot end within what is left of the
    run's time limit (:func:`onnxmem.runtime.isolation.seconds_left`): the command says so in a
    second or so, not at the limit."""

    def __init__(self, loop: str, trips: int | None) -> None:
        self.loop, self.trips, self.start = loop, trips, time.monotonic()

    def check(self, done: int) -> None:
        """After ``done`` iterations: raise where the rest cannot end in time."""
        if self.trips is None or done <= 0:
            return
        spent = time.monotonic() - self.start
        left = seconds_left() if spent >= PROJECT_AFTER else None
        if left is None:
            return
        need = spent / done * (self.trips - done)
        if need > left[0]:
            raise TimeLimitExceeded(
                f"Loop {show_name(self.loop)} runs {self.trips:,} iterations (its trip count M); {done:,} took "
                f"{spent:.1f} s, so the rest would take about {_duration(need)}, past --time-limit {left[1]:g} s: "
                "give it a smaller trip count or raise --time-limit (verify --static-only proves the plan "
                "without a run)")


def _duration(seconds: float) -> str:
    """``seconds`` in the largest unit that leaves a number of at least one."""
    for unit, size in (("years", 365 * 86400.0), ("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.0f} s"
