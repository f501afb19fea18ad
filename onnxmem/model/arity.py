"""A node's inputs and outputs as onnx's schema of its op allows them.

onnx's schema of each standard op says how many inputs it takes and how many outputs it gives
(least and most), and which of its inputs are required (``Single``) rather than optional. A
node outside that (a Relu of two inputs or with two outputs, an Add of one input, an empty
name where the schema requires a value) is no valid node, and onnxruntime refuses to load it.
Shape inference, though, passes over most of them, so a plan could be made for a graph that
no runtime runs (a Relu of nothing, an If without its condition), or a size was called
data-dependent where the node is wrong. :func:`check_node_arity` refuses such a node by its
name where the graph's view is built (:func:`onnxmem.graph.view.build_view`), and names it
where inference leaves sizes unknown (:func:`onnxmem.shapes.consistency.broken_graph`). Ops of other
domains, and standard ops onnx has no schema for at the model's opset, are left to the checks
that know them; but an If, whose branches onnxmem runs itself, is held to its arity at an opset
onnx cannot read too.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, NamedTuple, Sequence

import onnx

from onnxmem.core.errors import ModelError, flag_value, show_name

__all__ = ["arity_error", "check_node_arity"]

_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single


class _Arity(NamedTuple):
    """What onnx's schema of one op allows: its inputs' and outputs' counts, its required inputs."""

    inputs: tuple[int, int]  # least and most
    outputs: tuple[int, int]
    required: tuple[tuple[int, str], ...]  # place and name of each required input


#: the arity of the ops whose bodies onnxmem runs itself, the same at every opset onnx defines them
#: at: held to where the model's opset is no version onnx reads (an If needs its condition to run)
_OWN = {"If": _Arity((1, 1), (1, 2**31 - 1), ((0, "cond"),))}


@lru_cache(maxsize=4096)  # op types come from the model: bounded
def _arity(op_type: str, opset: int) -> _Arity | None:
    """The schema's counts and required inputs of the standard op ``op_type`` at ``opset``;
    ``None`` where onnx has no schema for it (at a version onnx cannot read, :data:`_OWN`'s)."""
    if not 0 < opset < 2**31:  # onnx reads the version as a C int: a model's huge opset is no version it knows
        return _OWN.get(op_type)
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    return _Arity((schema.min_input, schema.max_input), (schema.min_output, schema.max_output),
                  tuple((k, f.name) for k, f in enumerate(schema.inputs) if f.option == _SINGLE))


def _count(op_type: str, opset: int, kind: str, have: int, allowed: tuple[int, int]) -> str | None:
    """The error for ``have`` inputs or outputs (``kind``) outside ``allowed``, else ``None``."""
    least, most = allowed
    if least <= have <= most:
        return None
    bound, word = (least, "at least") if have < least else (most, "at most")
    verb = "takes" if kind == "input" else "gives"
    return (f"has {have} {kind}{'s' if have != 1 else ''} where {flag_value(op_type)} of opset {opset} "
            f"{verb} {word} {bound}")


def arity_error(op_type: str, domain: str, inputs: Sequence[str], n_outputs: int, opset: int) -> str | None:
    """What is wrong with a node of ``op_type`` (in ``domain``) with these ``inputs`` and
    ``n_outputs`` outputs at ``opset``, as the middle of a message, after the node's label
    ("has 2 inputs where ..."); ``None`` where its schema allows them, or onnx has no schema for it."""
    if domain and domain != "ai.onnx":
        return None
    found = _arity(op_type, opset)
    if found is None:
        return None
    if (found.inputs[0] <= len(inputs) <= found.inputs[1] and found.outputs[0] <= n_outputs <= found.outputs[1]
            and "" not in inputs):
        return None
    said = (_count(op_type, opset, "input", len(inputs), found.inputs)
            or _count(op_type, opset, "output", n_outputs, found.outputs))
    if said is not None:
        return said
    for k, name in found.required:
        if k < len(inputs) and not inputs[k]:
            return (f"leaves out its required input {k} ({show_name(name)}): its name is empty, and onnxruntime "
                    "refuses such a node")
    return None


def check_node_arity(nodes: Iterable[tuple[str, str, str, Sequence[str], int]], opset: int, where: str = "") -> None:
    """A ``ModelError`` naming the first of ``nodes`` (name, op type, domain, inputs, output
    count; a graph's, ``where`` says which) that :func:`arity_error` finds wrong."""
    for name, op_type, domain, inputs, n_outputs in nodes:
        said = arity_error(op_type, domain, inputs, n_outputs, opset)
        if said is not None:
            raise ModelError(f"node {show_name(name)} ({flag_value(op_type)}){where} {said}; fix the model")
