"""Loops whose values grow per iteration: body shapes as functions of the iteration number.

A Loop whose carried values change shape from one iteration to the next (an autoregressive
decoder appending one row to a carried sequence each step) has no static body shapes. Given a
bound ``N`` on its trip count (its constant trip count, or the user's ``--max-trips``), its body
is inferred once per iteration (:func:`grow_loop`):

1. iteration 0 sees the Loop's initial carried values' shapes, the iteration number as the
   constant 0 and the condition true (:func:`onnxmem.shapes.subgraphs.standalone_body`, with
   the outer values the body reads where they are known);
2. the body's carried outputs at iteration ``i`` are its carried inputs at ``i + 1``;
3. each body value (of nested bodies too) is sized at the iteration where it is largest, and
   its bytes at every iteration are kept (:attr:`LoopBound.sizes`: the proof checks them);
4. the Loop's final carried outputs take the shapes after ``N`` iterations, its scan outputs
   ``[N, ...]`` (a scan output must keep its shape from one iteration to the next).

A Loop whose carried shapes do not change is left to the ordinary inference (``None``), unless
its scan outputs stack over a trip count only a bound gives. Loops of the main graph are sized
by the ``loop-bound`` step of :mod:`onnxmem.shapes.steps`, those nested in If branches and Loop
or Scan bodies through :func:`onnxmem.shapes.subgraphs.standalone_body`. What it does not do: a
growing Loop nested in the body of another growing Loop is not sized this way; a body value
whose shape depends on data the body computes stays unsized, and the error names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import onnx

from onnxmem.core.errors import ShapeError, show_name
from onnxmem.model import BodyKey, owner_key, subgraph_attributes, tensor_bytes
from onnxmem.shapes.subgraphs import defined_count, standalone_body

__all__ = ["MAX_TRIPS", "LoopBound", "grow_loop", "loop_name", "main_loops"]

TypedShape = tuple[int, tuple[int, ...]]

#: the most iterations a growing Loop is sized for, one inference each (a few ms): a trip count
#: above it (exporters write INT64_MAX for a Loop its condition stops) needs ``--max-trips``
MAX_TRIPS = 16_384


@dataclass(frozen=True, slots=True)
class LoopBound:
    """A Loop planned for at most ``bound`` iterations, its values sized for the largest.

    ``source``: ``"model"`` (its constant trip count) or ``"user"`` (``--max-trips``);
    ``sizes``: for its body and the bodies nested in it, ``{value: its bytes at iterations
    0 .. bound - 1}``; ``bodies``: each value's shape at its largest; ``outputs``: the Loop's
    outputs after ``bound`` iterations."""

    name: str
    bound: int
    source: str
    sizes: Mapping[BodyKey, Mapping[str, tuple[int, ...]]]
    bodies: Mapping[BodyKey, Mapping[str, TypedShape]]
    outputs: Mapping[str, TypedShape]


def loop_name(graph: onnx.GraphProto, index: int) -> str:
    """A Loop node's name as messages give it: the file's, or ``Loop_<index>``."""
    node = graph.node[index]
    return node.name or f"{node.op_type}_{index}"


def _trip_count(node: onnx.NodeProto, values: Mapping[str, np.ndarray]) -> int | None:
    """The Loop's constant trip count, where its value is known."""
    if not node.input or not node.input[0]:
        return None
    value = values.get(node.input[0])
    if value is None or np.asarray(value).size != 1:
        return None
    return max(int(np.asarray(value).reshape(-1)[0]), 0)


def _iteration(model: onnx.ModelProto, body: onnx.GraphProto, key: BodyKey, i: int, carried: list[TypedShape],
               outer: Mapping[str, TypedShape], values: Mapping[str, np.ndarray],
               excluded: frozenset[BodyKey]) -> dict[BodyKey, dict[str, TypedShape]]:
    """The shapes of the body's values (and its nested bodies') at iteration ``i``, its carried
    inputs at ``carried``."""
    formal = [vi.name for vi in body.input]
    have: dict[str, TypedShape] = {}
    if formal:
        have[formal[0]] = (onnx.TensorProto.INT64, ())
    if len(formal) > 1:
        have[formal[1]] = (onnx.TensorProto.BOOL, ())
    have.update(zip(formal[2:], carried))
    fixed = {formal[0]: np.array(i, dtype=np.int64)} if formal else {}
    if len(formal) > 1:
        fixed[formal[1]] = np.array(True)
    found: dict[BodyKey, dict[str, TypedShape]] = {key: have}
    standalone_body(model, body, key, outer, values, found, excluded, fixed, _declared(body))
    return found


def _declared(body: onnx.GraphProto) -> dict[str, TypedShape]:
    """The body's value_info entries with a static shape: the way to size a value whose shape
    depends on data the body computes (where that shape is in fact fixed)."""
    out: dict[str, TypedShape] = {}
    for vi in body.value_info:
        t = vi.type.tensor_type
        if t.elem_type and t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out[vi.name] = (t.elem_type, tuple(int(d.dim_value) for d in t.shape.dim))
    return out


def _unsized(name: str, loop: str, i: int, body: onnx.GraphProto, have: Mapping[str, TypedShape]) -> ShapeError:
    """The error for a body value no shape was found for at iteration ``i``."""
    producer = next((n for n in body.node if name in n.output), None)
    reads = [n for n in (producer.input if producer is not None else ()) if n]
    if producer is not None and all(n in have for n in reads):
        why = (f"its {show_name(producer.op_type)} gives it a shape that depends on the values of "
               + ", ".join(map(show_name, reads)) + ", computed in the body at run time")
    else:
        why = "its shape depends on data computed in the body at run time"
    return ShapeError(f"value {show_name(name)} of the body of Loop {show_name(loop)} has no static size at iteration "
                      f"{i}: {why}, not on the iteration number or the graph's dims, and a run does not measure "
                      "body values (--measure-shapes cannot size it); if its shape is in fact fixed, declare it "
                      "in the body's value_info (with those of the values computed from it)")


def grow_loop(model: onnx.ModelProto, graph: onnx.GraphProto, index: int, key: BodyKey,
              outer: Mapping[str, TypedShape], values: Mapping[str, np.ndarray], max_trips: int | None,
              excluded: frozenset[BodyKey] = frozenset(), stacks: bool = False) -> LoopBound | None:
    """The :class:`LoopBound` of the Loop ``graph.node[index]`` (its body at ``key``), or ``None``
    when its carried values keep their shapes (or their first shapes are not known).

    ``outer``: the shapes of the values of ``graph`` (and enclosing graphs) it reads, ``values``
    the values known among them; ``max_trips``: the user's bound (``--max-trips``). ``stacks``:
    the Loop's outputs lack a shape, so a Loop whose carried values keep their shapes but whose
    scan outputs stack one slice per iteration is bounded too, where a bound is known (its
    constant trip count, or ``max_trips``). A ``ShapeError`` names a growing Loop with no bound,
    a body value with no size at some iteration, and a scan output whose shape changes."""
    node = graph.node[index]
    body = dict(subgraph_attributes(node)).get("body")
    name = loop_name(graph, index)
    if body is None or len(body.input) < 2:
        return None
    first = [outer.get(n) for n in node.input[2:]]
    outs = [o.name for o in body.output]
    stacks = stacks and len(outs) > 1 + len(first)
    if any(t is None for t in first) or not (first or stacks):
        return None
    carried: list[TypedShape] = [t for t in first if t is not None]
    k = len(carried)
    step = _iteration(model, body, key, 0, carried, outer, values, excluded)
    nxt = [step[key][o] for o in outs[1:1 + k] if o in step[key]]
    if len(nxt) < k or (nxt == carried and not (stacks and _known_bound(node, values, max_trips))):
        return None  # the carried values keep their shapes (or are not known): ordinary inference sizes the body
    bound, source = _bound(node, name, values, max_trips, body, carried, nxt)
    sizes: dict[BodyKey, dict[str, list[int]]] = {}
    largest: dict[BodyKey, dict[str, TypedShape]] = {}
    scans: dict[str, TypedShape] = {}
    for i in range(max(bound, 1)):
        if i:
            step = _iteration(model, body, key, i, carried, outer, values, excluded)
        if len(step[key]) < defined_count(body):
            missing = next(n for n in [*outs, *(o for nd in body.node for o in nd.output if o)] if n not in step[key])
            raise _unsized(missing, name, i, body, step[key])
        _absorb(step, sizes, largest, i)
        for o in outs[1 + k:]:
            if scans.setdefault(o, step[key][o]) != step[key][o]:
                raise ShapeError(f"scan output {show_name(o)} of Loop {show_name(name)} is "
                                 f"{list(scans[o][1])} at iteration 0 and {list(step[key][o][1])} at iteration "
                                 f"{i}: a Loop's scan output keeps one shape in every iteration; fix the model")
        carried = [step[key][o] for o in outs[1:1 + k]]
    finals = [(et, sh) for et, sh in carried] if bound else [t for t in first if t is not None]
    outputs: dict[str, TypedShape] = {}
    for y, t in zip(node.output, finals):
        if y:
            outputs[y] = t
    for y, o in zip(node.output[k:], outs[1 + k:]):
        if y:
            outputs[y] = (scans[o][0], (bound, *scans[o][1]))
    return LoopBound(name, bound, source, {bk: {n: tuple(v) for n, v in d.items()} for bk, d in sizes.items()},
                     largest, outputs)


def _known_bound(node: onnx.NodeProto, values: Mapping[str, np.ndarray], max_trips: int | None) -> bool:
    """Whether a bound on the Loop's trip count is known: its constant trip count, or the user's."""
    trips = _trip_count(node, values)
    return max_trips is not None or (trips is not None and trips <= MAX_TRIPS)


def _bound(node: onnx.NodeProto, name: str, values: Mapping[str, np.ndarray], max_trips: int | None,
           body: onnx.GraphProto, before: list[TypedShape], after: list[TypedShape]) -> tuple[int, str]:
    """``(bound, source)`` of a growing Loop: its constant trip count (``model``) or ``max_trips``
    (``user``), the smaller where both are known; a ``ShapeError`` where neither is."""
    trips = _trip_count(node, values)
    if max_trips is not None and max_trips > MAX_TRIPS:
        raise ShapeError(f"--max-trips {max_trips} is above onnxmem's limit of {MAX_TRIPS:,} iterations (the body of "
                         f"Loop {show_name(name)} is inferred once per iteration); give at most {MAX_TRIPS}")
    if trips is not None and (max_trips is None or trips <= max_trips) and trips <= MAX_TRIPS:
        return trips, "model"
    if max_trips is not None:
        return max_trips, "user"
    if trips is not None:
        raise ShapeError(f"Loop {show_name(name)}: its values grow per iteration and its trip count {trips} is above "
                         f"onnxmem's limit of {MAX_TRIPS:,} iterations (its body is inferred once per iteration); "
                         "pass --max-trips N for the most iterations runs take (a Loop its condition stops)")
    grows = next(j for j, (a, b) in enumerate(zip(before, after)) if a != b)
    value = body.input[2 + grows].name
    was, now = list(before[grows][1]), list(after[grows][1])
    count = ("no trip count" if not node.input or not node.input[0]
             else f"a trip count {show_name(node.input[0])} not known before the run")
    raise ShapeError(f"Loop {show_name(name)}: its carried value {show_name(value)} grows from {was} to {now} in "
                     f"one iteration and the Loop has {count}, so its body's sizes depend on how many iterations "
                     "run; pass --max-trips N to plan for runs of at most N iterations (verify refuses a run "
                     "of more)")


def _absorb(step: Mapping[BodyKey, Mapping[str, TypedShape]], sizes: dict[BodyKey, dict[str, list[int]]],
            largest: dict[BodyKey, dict[str, TypedShape]], i: int) -> None:
    """Add iteration ``i``'s shapes: each value's bytes, and its shape where it is largest."""
    for bk, found in step.items():
        per, top = sizes.setdefault(bk, {}), largest.setdefault(bk, {})
        for n, (et, sh) in found.items():
            b = _bytes(et, sh, n)
            seen = per.setdefault(n, [])
            seen.extend([0] * (i - len(seen)))  # (a value of a nested body not sized at every iteration)
            seen.append(b)
            if n not in top or b >= _bytes(*top[n], n):
                top[n] = (et, sh)


def _bytes(et: int, shape: tuple[int, ...], name: str) -> int:
    return 0 if et == onnx.TensorProto.STRING else tensor_bytes(et, shape, name)


def main_loops(model: onnx.ModelProto) -> list[tuple[int, BodyKey]]:
    """``(index, body key)`` of each Loop node of ``model``'s main graph."""
    return [(i, ((owner_key(n, i), "body"),)) for i, n in enumerate(model.graph.node)
            if n.op_type == "Loop" and n.domain in ("", "ai.onnx")]
