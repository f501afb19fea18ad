"""Required inputs: a node of the standard domain needs the inputs its schema marks required.

onnx's schema of each standard op says how many inputs it takes at least and which of its
inputs are required (``Single``) rather than optional: a node that leaves a required input out
(an empty name where the schema wants a value, or fewer inputs than its least count) is no
valid node, and onnxruntime refuses to load it. Shape inference, though, passes over it, so a
plan could be made for a graph that no runtime runs (a Relu of nothing, an If without its
condition). :func:`check_required_inputs` refuses such a node by its name, where the graph's
view is built (:func:`onnxmem.graph.view.build_view`). Ops of other domains, and standard ops
onnx has no schema for at the model's opset, are left to the checks that know them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import onnx

from onnxmem.core.errors import ModelError, flag_value, show_name
from onnxmem.graph.ops import Op

__all__ = ["check_required_inputs"]

_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single


@lru_cache(maxsize=4096)  # op types come from the model: bounded
def _required(op_type: str, opset: int) -> tuple[int, tuple[tuple[int, str], ...]] | None:
    """The least input count of the standard op ``op_type`` at ``opset`` and its required
    inputs (place, name); ``None`` where onnx has no schema for it."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    return schema.min_input, tuple((k, f.name) for k, f in enumerate(schema.inputs) if f.option == _SINGLE)


def check_required_inputs(ops: Iterable[Op], opset: int, where: str = "") -> None:
    """A ``ModelError`` naming the first node of ``ops`` (a level of the view, ``where`` says
    which) of the standard domain that leaves out an input its schema at ``opset`` requires."""
    for op in ops:
        if op.domain and op.domain != "ai.onnx":
            continue
        found = _required(op.op_type, opset)
        if found is None:
            continue
        inputs = op.inputs
        if len(inputs) >= found[0] and "" not in inputs:
            continue
        node = f"node {show_name(op.name)} ({flag_value(op.op_type)}){where}"
        if len(inputs) < found[0]:
            raise ModelError(f"{node} has {len(inputs)} input{'s' if len(inputs) != 1 else ''} where "
                             f"{flag_value(op.op_type)} of opset {opset} takes at least {found[0]}; fix the model")
        for k, name in found[1]:
            if k < len(inputs) and not inputs[k]:
                raise ModelError(f"{node} leaves out its required input {k} ({show_name(name)}): its name is "
                                 "empty, and onnxruntime refuses such a node; fix the model")
