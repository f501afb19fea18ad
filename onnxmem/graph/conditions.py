"""If nodes whose branch is known before the run: conditions decided by values the plan is given.

An If, at any level, whose condition onnxmem's shape evaluator computes
(:func:`onnxmem.shapes.evaluate_values`) takes the same branch on every run at those values:

1. Read what is known: the model's small constants (inline initializers no graph input
   overrides, ``Constant`` nodes), the shapes of the graph inputs and of every value inference
   sized, and the values of the graph inputs the user gave (``--inputs``), each of at most
   :data:`MAX_ASSUMED` elements, all finite.
2. Evaluate, backwards from each If's condition, the nodes it needs (shape arithmetic,
   comparisons, ``Equal``, ``Not``, ``Where``...: the evaluator's ops), nothing else.
3. An If whose condition is one known element is *decided*: its branch is planned alone, as
   ``--branch`` plans it (the other is left out, its values ``outside`` with reason
   ``excluded-branch``), and :class:`Decision` names the given inputs whose values it read
   (none when constants and shapes alone decide it: then every run at the plan's shapes
   takes that branch).

The plan records the decisions (``extra.branches_decided``) and the values they assumed
(``extra.assumed_inputs``, :func:`assumed_record`); ``verify`` feeds those values where it is
given none and refuses ``--inputs`` whose values take another branch
(:func:`onnxmem.planning.given.check_decided`).

Inside a body (an If branch, a Loop or Scan body, nested to any depth) the same is done
with what every run of that body shares: the body's own constants, the known shapes, and the
outer values it reads that the level above computed (outer constants, given inputs and what
is computed from them). A Loop's or Scan's formal inputs (the iteration number, the loop
condition, carried values, scan slices) are given no value, so an If whose condition reads
one (``Equal(Mod(i, 2), 0)``) changes from one iteration to the next and keeps both branches.
Ifs inside a decided If's left-out branch are not searched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import onnx

from onnxmem.graph.paths import BRANCH_NAMES, child_path, node_names, outer_scope_reads
from onnxmem.model import subgraph_attributes
from onnxmem.shapes import evaluate_values

__all__ = ["MAX_ASSUMED", "Decision", "assumable", "assumed_record", "decide_branches", "read_assumed", "read_value",
           "value_record"]

#: the most elements of a given input value a condition may read (the plan records each value)
MAX_ASSUMED = 64
#: ops whose output depends only on their input's shape, not its values
_SHAPE_ONLY = ("Shape", "Size")
#: the control-flow ops whose bodies are searched for Ifs to decide
_FLOW = ("If", "Loop", "Scan")


@dataclass(frozen=True, slots=True)
class Decision:
    """The branch an If takes at the plan's values: ``then_branch`` or ``else_branch``, and
    the graph inputs whose given values its condition read, in name order (empty: decided by
    constants and shapes alone)."""

    branch: str
    inputs: tuple[str, ...] = ()


def _in_other_branch(path: str, taken: Mapping[str, str]) -> bool:
    """Whether the If at ``path`` lies inside a branch other than the one ``taken`` says its owner
    takes (a path alternates node and branch: ``If_0/else_branch/If_1``)."""
    parts = path.split("/")
    return any(taken.get("/".join(parts[:i]), parts[i]) != parts[i] for i in range(1, len(parts) - 1, 2))


def assumable(value: np.ndarray) -> bool:
    """Whether a given value may decide a branch or size a tensor: small, numeric or bool, finite."""
    a = np.asarray(value)
    if a.size > MAX_ASSUMED or a.dtype.kind not in "biuf":
        return False
    return a.dtype.kind != "f" or bool(np.isfinite(a).all())


def decide_branches(
    model: onnx.ModelProto,
    given: Mapping[str, np.ndarray] | None,
    shapes: Mapping[str, tuple[int, ...]],
) -> dict[str, Decision]:
    """``{If node path: Decision}`` for each If, at any level, whose condition is known from
    the model's constants, the ``shapes`` known (graph inputs, inferred values) and the
    ``given`` graph input values (see the module docstring). An If whose condition is not one
    known element is not in the result; nor is an If inside the branch a decided If leaves out."""
    names = {vi.name for vi in model.graph.input}
    usable = {k: np.asarray(v) for k, v in (given or {}).items() if k in names and assumable(v)}
    out: dict[str, Decision] = {}
    _decide_level(model, model.graph, "", usable, {k: (k,) for k in usable}, shapes, out)
    return out


def _has_flow(graph: onnx.GraphProto) -> bool:
    return any(n.op_type in _FLOW and n.domain in ("", "ai.onnx") for n in graph.node)


def _decide_level(model: onnx.ModelProto, graph: onnx.GraphProto, path: str, known: Mapping[str, np.ndarray],
                  origin: Mapping[str, tuple[str, ...]], shapes: Mapping[str, tuple[int, ...]],
                  out: dict[str, Decision]) -> None:
    """Decide the Ifs of ``graph`` (the graph at ``path``) into ``out``, then those of its bodies.

    ``known``: values that are the same on every run of ``graph`` at the plan's values: the
    given inputs for the main graph; for a body, the outer values it reads that the level above
    computed, which no iteration changes (a Loop's or Scan's formal inputs, the iteration number,
    carried values, scan slices, have no value here, so nothing computed from them is known).
    ``origin``: for each, the given inputs it was computed from."""
    flows = [(i, n) for i, n in enumerate(graph.node) if n.op_type in _FLOW and n.domain in ("", "ai.onnx")]
    if not flows:
        return
    level = model if graph is model.graph else _level_model(model, graph)
    bodies = {i: [(attr, sub, outer_scope_reads(sub)) for attr, sub in subgraph_attributes(n) if _has_flow(sub)]
              for i, n in flows}
    wanted = [n.input[0] for _, n in flows if n.op_type == "If" and n.input and n.input[0]]
    wanted += [name for subs in bodies.values() for _, _, reads in subs for name in reads]
    values = evaluate_values(level, known, shapes, wanted)
    producer = {o: n for n in graph.node for o in n.output if o}
    paths = node_names(graph)
    for i, node in flows:
        here = child_path(path, paths[i])
        taken = None
        cond = values.get(node.input[0]) if node.op_type == "If" and node.input and node.input[0] else None
        if cond is not None and cond.size == 1:
            taken = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
            out[here] = Decision(taken, _value_inputs(node.input[0], producer, origin))
        for attr, sub, reads in bodies[i]:
            if taken is not None and attr != taken:
                continue  # the branch left out: never sized nor run
            inner = {n: values[n] for n in reads if n in values}
            _decide_level(model, sub, f"{here}/{attr}", inner,
                          {n: _value_inputs(n, producer, origin) for n in inner}, shapes, out)


def _level_model(model: onnx.ModelProto, graph: onnx.GraphProto) -> onnx.ModelProto:
    """``graph`` (a body) as a model of its own, with ``model``'s opsets, for the evaluator."""
    level = onnx.ModelProto(ir_version=model.ir_version)
    level.opset_import.extend(model.opset_import)
    level.graph.CopyFrom(graph)
    return level


def _value_inputs(name: str, producer: Mapping[str, onnx.NodeProto],
                  origin: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The given inputs whose values ``name`` is computed from (not through a shape read):
    ``origin`` names, for each known value of this level, the given inputs it came from."""
    stack, seen, found = [name], set(), set[str]()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        found.update(origin.get(n, ()))
        node = producer.get(n)
        if node is not None and node.op_type not in _SHAPE_ONLY:
            stack.extend(i for i in node.input if i)
    return tuple(sorted(found))


def assumed_record(decisions: Mapping[str, Decision], given: Mapping[str, np.ndarray] | None) -> dict[str, object]:
    """What a plan records of ``decisions`` under ``extra``: ``branches_decided`` (``{If path:
    {"branch", "inputs"}}``) and ``assumed_inputs`` (``{input: {"dtype", "shape", "values"}}``,
    the given values the decisions read, flattened); nothing without decisions."""
    if not decisions:
        return {}
    read = sorted({n for d in decisions.values() for n in d.inputs})
    assumed = {n: value_record((given or {})[n]) for n in read}
    return {
        "branches_decided": {k: {"branch": d.branch, "inputs": list(d.inputs)} for k, d in sorted(decisions.items())},
        "assumed_inputs": assumed,
    }


def read_assumed(extra: Mapping[str, object]) -> tuple[dict[str, Decision], dict[str, np.ndarray]]:
    """The decisions and assumed input values a plan's ``extra`` records (:func:`assumed_record`);
    entries of the wrong form are skipped (the plan's schema checks them), and so is a decision of
    an If inside a branch the plan leaves out (``--branch``, or a decision of an If around it):
    no run reaches that If."""
    decided: dict[str, Decision] = {}
    raw = extra.get("branches_decided")
    for path, d in (raw.items() if isinstance(raw, dict) else ()):
        if isinstance(d, dict) and d.get("branch") in ("then_branch", "else_branch"):
            inputs = d.get("inputs")
            names = tuple(str(x) for x in inputs) if isinstance(inputs, list) else ()
            decided[str(path)] = Decision(str(d["branch"]), names)
    given = extra.get("branches")
    taken = {**{k: d.branch for k, d in decided.items()},
             **({str(k): BRANCH_NAMES[str(v)] for k, v in given.items() if str(v) in BRANCH_NAMES}
                if isinstance(given, dict) else {})}
    decided = {k: d for k, d in decided.items() if not _in_other_branch(k, taken)}
    values: dict[str, np.ndarray] = {}
    raw = extra.get("assumed_inputs")
    for name, rec in (raw.items() if isinstance(raw, dict) else ()):
        a = read_value(rec)
        if a is not None:
            values[str(name)] = a
    return decided, values


def value_record(value: np.ndarray) -> dict[str, object]:
    """A given value as a plan records it (``assumed_inputs``, ``sizing_inputs``): ``{"dtype",
    "shape", "values"}``, the values flattened."""
    a = np.asarray(value)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "values": a.reshape(-1).tolist()}


def read_value(rec: object) -> np.ndarray | None:
    """The value a record of :func:`value_record` holds, where its dtype, shape and values agree
    and make one :func:`assumable` takes; ``None`` otherwise."""
    try:
        a = np.asarray(rec["values"], dtype=np.dtype(str(rec["dtype"]))).reshape(rec["shape"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return a if assumable(a) else None
