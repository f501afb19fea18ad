"""Why sizes are still unknown after inference: the one-line error that leads to the flag, or the
change to the model, that fixes it (:func:`unknown_sizes`, :func:`unknown_at_zero`).

A value that is no tensor comes first (a sequence op's output, a declared sequence or map,
ZipMap's probabilities: no flag sizes it); then graph inputs with dims nothing binds (a ready
``--input-shape`` line); a graph the model itself leaves broken; a Loop's stacked output (``--max-trips``);
a node of another domain that stops inference; else sizes that depend on data
(``--measure-shapes``, ``--inputs``)."""

from __future__ import annotations

from typing import Collection, Mapping

import onnx

from onnxmem.core.errors import ShapeError, flag_value, listed, show_name
from onnxmem.model import dim_label, graph_inputs, resolve_dim, subgraph_attributes
from onnxmem.shapes.consistency import broken_graph
from onnxmem.shapes.contrib import is_custom_domain, unshaped_reason
from onnxmem.shapes.loops import loop_name
from onnxmem.shapes.shapeeval import opset_version
from onnxmem.shapes.steps import TypedShape

__all__ = ["SEQUENCE_OPS", "stuck_node", "unknown_at_zero", "unknown_sizes"]


def unknown_sizes(
    missing: list[str],
    model: onnx.ModelProto,
    file_dims: Mapping[str, int],
    input_shapes: Mapping[str, tuple[int, ...]],
    known: Mapping[str, TypedShape],
) -> ShapeError:
    """The error for values whose size is still unknown, leading to the flags that fix it.

    When graph inputs have dims nothing binds, the message names those inputs,
    their patterns and a ready ``--input-shape`` line (and ``--dim`` for named
    dims); dims that inference made up (``unk__N``) or that only outputs carry
    are never offered (a value that is a sequence or map comes first: no flag sizes it). Otherwise,
    when a node of a domain onnx does not know stops inference
    (its inputs known, an output not) and onnxmem has no rule for it, the message names it;
    else the sizes depend on data.
    """
    shown = listed(missing, 5)
    not_tensor = _not_a_tensor(model, missing)  # first: no flag gives a sequence a size
    if not_tensor is not None:
        return not_tensor
    hints: list[str] = []
    open_inputs = [
        (name, declared) for name, declared in graph_inputs(model).items()
        if name not in input_shapes
        and (declared is None or any(resolve_dim(d, file_dims) is None for d in declared))
    ]
    for name, declared in open_inputs[:4]:
        flag = flag_value(name)
        if declared is None:
            hints.append(f"{show_name(name)} (rank not declared): pass --input-shape {flag}=D1xD2...")
            continue
        pattern: list[str] = []
        ready: list[str] = []
        named: list[str] = []
        for axis, d in enumerate(declared):
            value = resolve_dim(d, file_dims)
            if value is not None:
                pattern.append(str(value))
                ready.append(str(value))
                continue
            pattern.append("?" if d is None else dim_label(str(d)))
            ready.append(f"N{axis}")
            if isinstance(d, str):
                named.append(dim_label(d))
        line = f"{show_name(name)} [{', '.join(pattern)}]: pass --input-shape {flag}={'x'.join(ready)}"
        if named:
            line += " (or --dim " + " --dim ".join(f"{n}=N" for n in dict.fromkeys(named)) + ")"
        hints.append(line)
    if hints:
        more = f"; and {len(open_inputs) - 4} more inputs" if len(open_inputs) > 4 else ""
        return ShapeError(
            f"sizes of {len(missing)} tensors are unknown ({shown}): graph inputs have unbound "
            f"dims: {'; '.join(hints)}{more}"
        )
    broken = broken_graph(model.graph, opset_version(model))
    if broken is not None:  # no shape follows from it, nor would a run: the model, not the data
        return ShapeError(f"sizes of {len(missing)} tensors are unknown ({shown}): {broken}; fix the model")
    stacked = _stacked_output(model, missing)
    if stacked is not None:
        return ShapeError(
            f"sizes of {len(missing)} tensors are unknown ({shown}): {stacked}; pass --max-trips N to plan for "
            "runs of at most N iterations (verify refuses a run of more), or --measure-shapes to plan for the "
            "count of one run"
        )
    stuck = stuck_node(model, known)
    if stuck is not None:
        fix = ("pass --measure-shapes with --custom-op-library PATH, the library that implements its op for "
               "onnxruntime, to run the model once and measure them, or declare the node's output shapes in the "
               "model's value_info" if is_custom_domain(stuck[1]) else
               "pass --measure-shapes (with --inputs where random values do not fit) to run the model once and "
               "measure them")
        return ShapeError(f"sizes of {len(missing)} tensors are unknown ({shown}): {stuck[0]}; {fix}")
    return ShapeError(
        f"sizes of {len(missing)} tensors are unknown ({shown}): their shapes depend on "
        "data; pass --measure-shapes to run the model once and measure them, or give the values of the graph "
        "inputs they depend on (--inputs FILE.npz: small numeric ones, a Reshape's target say, are read as known)"
    )


def _stacked_output(model: onnx.ModelProto, missing: list[str]) -> str | None:
    """Why a scan output of a main-graph Loop among ``missing`` has no size (it stacks one slice per
    iteration and the trip count is not known before the run), or ``None``."""
    for i, node in enumerate(model.graph.node):
        body = dict(subgraph_attributes(node)).get("body") if node.op_type == "Loop" else None
        if body is None or node.domain not in ("", "ai.onnx"):
            continue
        carried = max(len(node.input) - 2, 0)
        for o in node.output[carried:]:
            if o and o in missing:
                return (f"{show_name(o)} stacks one slice per iteration of Loop {show_name(loop_name(model.graph, i))},"
                        " whose trip count is not known before the run")
    return None


#: the ONNX ops whose outputs are sequences
SEQUENCE_OPS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SplitToSequence",
                          "SequenceMap"})


def _not_a_tensor(model: onnx.ModelProto, missing: list[str]) -> ShapeError | None:
    """The error for the first of ``missing`` that is no tensor (:func:`_non_tensor`), else ``None``."""
    mapped = _non_tensor(model, missing)
    if mapped is None:
        return None
    name, maker = mapped
    if maker is not None:  # a sequence op's: no flag or run gives it a size
        return ShapeError(
            f"value {show_name(name)} is a sequence (the output of {maker}), not a tensor: onnxmem plans "
            "tensors only; write the model with tensors instead (Concat or Split of the items, say)"
        )
    return ShapeError(
        f"value {show_name(name)} is a sequence or map (ZipMap's probabilities, say), not a tensor: onnxmem "
        "plans tensors only; write the model without it (skl2onnx: options={id(model): {'zipmap': False}} "
        "gives the probabilities as one tensor)"
    )


def _non_tensor(model: onnx.ModelProto, missing: list[str]) -> tuple[str, str | None] | None:
    """The first of ``missing`` that is no tensor, and where it is the output of a main-graph
    node of :data:`SEQUENCE_OPS`, that node (``"SequenceConstruct node 'n'"``); else ``None``
    for one declared a sequence, map or optional, or written by ai.onnx.ml's ZipMap (a sequence
    of maps)."""
    g = model.graph
    makers = {o: f"{n.op_type} node {show_name(n.name or o)}" for n in g.node
              if n.domain in ("", "ai.onnx") and n.op_type in SEQUENCE_OPS for o in n.output if o}
    declared = {vi.name for vi in (*g.output, *g.value_info)
                if vi.type.WhichOneof("value") in ("sequence_type", "map_type", "optional_type")}
    declared |= {o for n in g.node if n.domain == "ai.onnx.ml" and n.op_type == "ZipMap" for o in n.output}
    first = next((m for m in missing if m in makers or m in declared), None)
    return None if first is None else (first, makers.get(first))


def unknown_at_zero(missing: list[str], zero: list[str]) -> ShapeError:
    """The error for values left unsized with a dim bound to 0: a dim may be 0 (an empty KV
    cache) only where every use of it is valid at 0, and a use that is not (a convolution's
    window over it, ``dim - 1`` in shape arithmetic) leaves a negative or no size."""
    shown = listed(missing, 5)
    flags = " ".join(f"--dim {flag_value(z)}=0" for z in zero)
    return ShapeError(
        f"{flags} leaves the sizes of {len(missing)} tensors unknown ({shown}): a dim may be 0 only "
        "where every use of it is valid at 0; give the smallest size the model runs at"
    )


def stuck_node(model: onnx.ModelProto, known: Collection[str]) -> tuple[str, str] | None:
    """The first node of a domain other than ONNX's with every input shaped and an output
    unshaped, as ``node 'X' (domain:Op)`` and why, and its domain; None when there is none."""
    have = set(known) | {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input}
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx"):
            continue
        if all(not n or n in have for n in node.input) and any(o and o not in have for o in node.output):
            label = flag_value(f"{node.domain}:{node.op_type}")
            return f"node {show_name(node.name)} ({label}) {unshaped_reason(node.domain, node.op_type)}", node.domain
    return None
