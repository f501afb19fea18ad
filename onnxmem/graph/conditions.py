"""If nodes whose branch is known before the run: conditions decided by values the plan is given.

An If of the main graph whose condition onnxmem's shape evaluator computes
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
(:func:`onnxmem.planning.pipeline.check_decided`). Only If nodes of the main graph are
decided here; one inside a body keeps both branches (its shapes still follow the branch its
condition takes, :mod:`onnxmem.shapes.subgraphs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import onnx

from onnxmem.graph.paths import child_path, node_names
from onnxmem.shapes import evaluate_values

__all__ = ["MAX_ASSUMED", "Decision", "assumed_record", "decide_branches", "read_assumed"]

#: the most elements of a given input value a condition may read (the plan records each value)
MAX_ASSUMED = 64
#: ops whose output depends only on their input's shape, not its values
_SHAPE_ONLY = ("Shape", "Size")


@dataclass(frozen=True, slots=True)
class Decision:
    """The branch an If takes at the plan's values: ``then_branch`` or ``else_branch``, and
    the graph inputs whose given values its condition read, in name order (empty: decided by
    constants and shapes alone)."""

    branch: str
    inputs: tuple[str, ...] = ()


def _usable(value: np.ndarray) -> bool:
    """Whether a given value may decide a branch: small, numeric or bool, finite."""
    a = np.asarray(value)
    if a.size > MAX_ASSUMED or a.dtype.kind not in "biuf":
        return False
    return a.dtype.kind != "f" or bool(np.isfinite(a).all())


def decide_branches(
    model: onnx.ModelProto,
    given: Mapping[str, np.ndarray] | None,
    shapes: Mapping[str, tuple[int, ...]],
) -> dict[str, Decision]:
    """``{If node path: Decision}`` for each If of the main graph whose condition is known from
    the model's constants, the ``shapes`` known (graph inputs, inferred values) and the
    ``given`` graph input values (see the module docstring). An If whose condition is not one
    known element is not in the result."""
    g = model.graph
    ifs = [(i, n) for i, n in enumerate(g.node)
           if n.op_type == "If" and n.domain in ("", "ai.onnx") and n.input and n.input[0]]
    if not ifs:
        return {}
    names = {vi.name for vi in g.input}
    usable = {k: np.asarray(v) for k, v in (given or {}).items() if k in names and _usable(v)}
    values = evaluate_values(model, usable, shapes, [n.input[0] for _, n in ifs])
    producer = {o: n for n in g.node for o in n.output if o}
    paths = node_names(g)
    out: dict[str, Decision] = {}
    for i, node in ifs:
        cond = values.get(node.input[0])
        if cond is None or cond.size != 1:
            continue
        branch = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
        out[child_path("", paths[i])] = Decision(branch, _value_inputs(node.input[0], producer, usable))
    return out


def _value_inputs(name: str, producer: Mapping[str, onnx.NodeProto], given: Mapping[str, object]) -> tuple[str, ...]:
    """The ``given`` inputs whose values ``name`` is computed from (not through a shape read)."""
    stack, seen, found = [name], set(), set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in given:
            found.add(n)
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
    assumed = {}
    for n in read:
        a = np.asarray((given or {})[n])
        assumed[n] = {"dtype": str(a.dtype), "shape": list(a.shape), "values": a.reshape(-1).tolist()}
    return {
        "branches_decided": {k: {"branch": d.branch, "inputs": list(d.inputs)} for k, d in sorted(decisions.items())},
        "assumed_inputs": assumed,
    }


def read_assumed(extra: Mapping[str, object]) -> tuple[dict[str, Decision], dict[str, np.ndarray]]:
    """The decisions and assumed input values a plan's ``extra`` records (:func:`assumed_record`);
    entries of the wrong form are skipped (the plan's schema checks them)."""
    decided: dict[str, Decision] = {}
    raw = extra.get("branches_decided")
    for path, d in (raw.items() if isinstance(raw, dict) else ()):
        if isinstance(d, dict) and d.get("branch") in ("then_branch", "else_branch"):
            inputs = d.get("inputs")
            names = tuple(str(x) for x in inputs) if isinstance(inputs, list) else ()
            decided[str(path)] = Decision(str(d["branch"]), names)
    values: dict[str, np.ndarray] = {}
    raw = extra.get("assumed_inputs")
    for name, rec in (raw.items() if isinstance(raw, dict) else ()):
        try:
            a = np.asarray(rec["values"], dtype=np.dtype(str(rec["dtype"]))).reshape(rec["shape"])
        except (KeyError, TypeError, ValueError):
            continue
        if _usable(a):
            values[str(name)] = a
    return decided, values
