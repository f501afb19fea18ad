"""Given input values a plan holds to: those that decided an If, and those that size its tensors.

A graph input may set the size of the tensors after it: a Reshape's target, a Range's limit,
an Expand's shape. Where inference cannot size every tensor from the shapes alone and
``plan --inputs`` gives values, the small ones (numbers and booleans of at most
:data:`onnxmem.graph.MAX_ASSUMED` elements, all finite; :func:`onnxmem.graph.assumable`) are
read as known values, as a training checkpoint's frozen parameters are, and inference runs
again (:func:`infer_given`). Only those it cannot do without are kept: each is left out in
turn, and kept where inference then fails. The plan records them (``extra.sizing_inputs``,
:func:`sizing_record`): its sizes hold at those values alone.

``verify`` and ``compare`` feed the values a plan holds to where they are given none, and
refuse others in one line before anything runs (:func:`check_decided`): values that take
another branch of a decided If, and any other value of an input that sized the plan.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import onnx

from onnxmem.core.errors import PlanError, ShapeError, show_name
from onnxmem.graph import assumable, decide_branches, read_assumed, read_value, value_record
from onnxmem.model import graph_inputs
from onnxmem.plans.point import MemoryPlan
from onnxmem.shapes import ShapeInfo

__all__ = ["MAX_TRIED", "check_decided", "infer_given", "read_sizing", "sizing_candidates", "sizing_record",
           "sizing_warnings", "static_input_shapes"]

#: with more candidate values than this, all of them are kept rather than each left out in turn
#: (one inference each)
MAX_TRIED = 8


def static_input_shapes(model: onnx.ModelProto, pinned: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The graph inputs' shapes known before inference: ``pinned`` and the file's static ones."""
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in graph_inputs(model).items():
        if dims is not None and all(isinstance(d, int) for d in dims):
            out[name] = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    return {**out, **pinned}


def sizing_candidates(model: onnx.ModelProto, given: Mapping[str, np.ndarray] | None,
                      known: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The given values inference may read as known: of graph inputs without an initializer
    (a default value) and not known already, small and finite, by name."""
    inputs = graph_inputs(model)  # those without an initializer
    return {name: np.asarray(value) for name, value in sorted((given or {}).items())
            if name in inputs and name not in known and assumable(value)}


def infer_given(infer: Callable[[Mapping[str, np.ndarray]], ShapeInfo],
                candidates: Mapping[str, np.ndarray]) -> tuple[ShapeInfo, dict[str, np.ndarray]]:
    """The shapes ``infer`` finds with ``candidates`` read as known values, and the fewest of them
    it needs: each is left out in turn (up to :data:`MAX_TRIED` of them) and kept where inference
    then raises ``ShapeError``. ``ShapeError`` where inference fails even with them all."""
    shapes = infer(candidates)
    kept = dict(candidates)
    if len(kept) > MAX_TRIED:
        return shapes, kept
    for name in sorted(candidates):
        rest = {k: v for k, v in kept.items() if k != name}
        if not rest:  # inference without any value failed: the caller's first try
            break
        try:
            shapes = infer(rest)
        except ShapeError:
            continue
        kept = rest
    return shapes, kept


def sizing_record(values: Mapping[str, np.ndarray], key: str = "sizing_inputs") -> dict[str, object]:
    """What a plan records of the given values that sized it, under ``extra``: ``sizing_inputs``
    (``{input: {"dtype", "shape", "values"}}``, the values flattened), or those a measuring run
    read under ``measured_inputs``; nothing without any."""
    return {key: {n: value_record(v) for n, v in sorted(values.items())}} if values else {}


def sizing_warnings(values: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """The plan's warning of each given value that sized it (:func:`infer_given`)."""
    return tuple(f"graph input {show_name(name)}: its --inputs value {_shown(value)} sizes tensors inference cannot "
                 "size without it; the plan holds at that value alone (extra.sizing_inputs), verify feeds it and "
                 "refuses another" for name, value in sorted(values.items()))


def read_sizing(extra: Mapping[str, object], key: str = "sizing_inputs") -> dict[str, np.ndarray]:
    """The values a plan's ``extra.sizing_inputs`` records (:func:`sizing_record`), or those of
    another ``key`` so written (``measured_inputs``). ``PlanError`` for an entry whose dtype,
    shape and values make no value :func:`sizing_candidates` would take (the schema checks each
    field alone, not whether they agree)."""
    raw = extra.get(key)
    out: dict[str, np.ndarray] = {}
    for name, rec in (raw.items() if isinstance(raw, dict) else ()):
        a = read_value(rec)
        if a is None:
            raise PlanError(f"the plan's extra.{key} holds {show_name(str(name))} as no value onnxmem records "
                            "(its dtype, shape and values disagree): the plan is damaged; plan the model again")
        out[str(name)] = a
    return out


def _check_sizing(model: onnx.ModelProto, plan: MemoryPlan, sizing: Mapping[str, np.ndarray],
                  key: str = "sizing_inputs") -> None:
    """``PlanError`` where a value the plan records under ``key`` is of no graph input of
    ``model`` without a default, or not of its element type and dims (a plan of another model):
    the check ``--inputs`` arrays get (:func:`onnxmem.runtime.inputs.check_inputs`), and the
    plan's own input shapes."""
    from onnxmem.runtime.inputs import check_inputs

    declared = graph_inputs(model)
    for name, a in sorted(sizing.items()):
        if name not in declared:
            raise PlanError(f"the plan's extra.{key} names {show_name(name)}, which is no graph input of "
                            "this model without a default: the plan was made for another model; plan this one")
        pinned = plan.input_shapes.get(name)
        try:
            check_inputs(model, {name: a})
            fits = pinned is None or tuple(pinned) == a.shape
        except ShapeError:
            fits = False
        if not fits:
            raise PlanError(f"the plan's extra.{key} holds {show_name(name)} as {a.dtype} {list(a.shape)}, "
                            "which the model's graph input of that name cannot take: the plan was made for another "
                            "model; plan this one")


def check_decided(model: onnx.ModelProto, plan: MemoryPlan,
                  inputs: Mapping[str, np.ndarray] | None) -> Mapping[str, np.ndarray] | None:
    """The inputs to run ``plan`` on: ``inputs`` with the values the plan holds to
    (``assumed_inputs``, ``sizing_inputs``) and those its measuring run read
    (``measured_inputs``) for those it lacks. ``PlanError`` when these take another branch of an
    If the plan holds one branch of because its values decided it (``branches_decided``), or
    when an input that sized the plan is given another value (a measured one may differ: the
    run then measures at it, and the proof finds any size the plan does not have)."""
    decided, assumed = read_assumed(plan.extra)
    sizing = read_sizing(plan.extra)
    _check_sizing(model, plan, sizing)
    measured = read_sizing(plan.extra, "measured_inputs")
    _check_sizing(model, plan, measured, "measured_inputs")
    for name, want in sorted(sizing.items()):
        value = (inputs or {}).get(name)
        if value is not None and (np.shape(value) != want.shape or not np.array_equal(value, want)):
            raise PlanError(f"--inputs gives {show_name(name)} = {_shown(value)}; the plan's sizes hold at "
                            f"{show_name(name)} = {_shown(want)}, the value it was planned with: give that value, "
                            "or plan again with this one (plan --inputs)")
    sizing = {**measured, **sizing}  # fed where not given, as the values that sized the plan are
    if not decided:
        return {**sizing, **(inputs or {})} if sizing else inputs
    feeds = {**assumed, **sizing, **(inputs or {})}
    # the shapes the plan holds (measured or inferred when planned: a decision may read them;
    # a run at other shapes is refused by the arena run itself)
    shapes = {**{t.name: tuple(t.shape) for t in plan.tensors}, **static_input_shapes(model, {}),
              **{k: tuple(v) for k, v in plan.input_shapes.items()}}
    now_taken = decide_branches(model, feeds, shapes)
    for k, d in sorted(decided.items()):
        got = now_taken.get(k)
        if got is not None and got.branch == d.branch:
            continue
        names = [n for n in d.inputs if n in (inputs or {})] or list(d.inputs)
        said = ", ".join(f"{show_name(n)} = {_shown(feeds.get(n))}" for n in names)
        was = ", ".join(f"{show_name(n)} = {_shown(assumed.get(n))}" for n in d.inputs)
        takes = f"takes its {got.branch}" if got is not None else "has a condition not known before the run"
        raise PlanError(f"If {show_name(k)} {takes} with {said or 'these inputs'}; the plan holds only its "
                        f"{d.branch}, decided by {was or 'its shapes'}: give inputs that take the {d.branch}, "
                        "or plan again with these (plan --inputs)")
    return feeds if (assumed or sizing) else inputs


def _shown(value: np.ndarray | None) -> str:
    """A short text of a small input value, for a message."""
    if value is None:
        return "?"
    a = np.asarray(value).reshape(-1)
    if a.dtype.kind not in "biuf":  # a given array of text or objects: never echoed
        return f"an array of {a.dtype.name}"
    return str(a[0].item()) if a.size == 1 else "[" + ", ".join(str(x.item()) for x in a[:4]) + (", ...]" if a.size > 4 else "]")
