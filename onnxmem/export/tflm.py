"""The ``tflm`` format: the offline memory plan TensorFlow Lite Micro reads.

TFLM takes an ahead-of-time placement from a model metadata entry named
``OfflineMemoryAllocation`` whose buffer is a flat array of little-endian
int32::

    [0]      version of the format: 0
    [1]      subgraph: 0 (the main graph; TFLM reads but does not use it)
    [2]      n, the number of offsets that follow
    [3 + i]  byte offset of tensor i from the start of the arena's head
             section, or -1: the runtime allocates tensor i itself

This format writes exactly that buffer, nothing else: a tool that builds the
``.tflite`` file puts it under that metadata name.

Which tensor is entry ``i``:

* without ``--model``: the plan's tensors, in the plan's order (the order of
  ``tensors`` in the plan JSON); every entry is placed;
* with ``--model``: every value of the model's main graph, in this order: the
  graph inputs that are not weights (as declared), the weights (initializers,
  in file order), then each node's outputs (nodes in the model file's order,
  outputs in the node's order, empty names skipped). Values the plan does not
  place get -1: weights, values of constant nodes, and the graph inputs and
  outputs of a plan made with ``--io external``. Values inside If/Loop/Scan
  bodies are not listed, nor the regions the plan reserves for them (their
  bytes are inside ``arena_size``; the runtime places the bodies' values).

What a runtime must do: give the arena at least the plan's ``arena_size``
bytes, aligned to the plan's ``alignment``; map its own tensor indices to this
order (by name: the plan JSON, or ``--model``'s value order, names each
entry); put tensor ``i`` at ``arena + offset[i]`` for every entry that is not
-1, allocate the -1 entries itself (outside those bytes), and run the nodes
in the plan's ``order``: the offsets are only safe in that order.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from onnxmem.core.errors import PlanError, show_name
from onnxmem.export.registry import register
from onnxmem.plans.point import MemoryPlan, PlannedTensor

if TYPE_CHECKING:
    import onnx

__all__ = ["FORMAT_VERSION", "METADATA_NAME", "tflm_offsets", "value_order"]

FORMAT_VERSION = 0
SUBGRAPH = 0
METADATA_NAME = "OfflineMemoryAllocation"
NOT_PLACED = -1
_INT32_MAX = 2**31 - 1


def value_order(plan: MemoryPlan, model: onnx.ModelProto | None) -> list[str]:
    """The tensor names of the table's entries, in order (see the module docstring)."""
    if model is None:
        return [t.name for t in plan.tensors]
    g = model.graph
    weights = [i.name for i in g.initializer]
    inputs = [v.name for v in g.input if v.name not in set(weights)]
    outputs = [o for node in g.node for o in node.output]
    names: list[str] = []
    seen: set[str] = set()
    for name in inputs + weights + outputs:
        if name and name not in seen:
            seen.add(name)
            names.append(name)
    for t in _main_values(plan):
        if t.name not in seen:
            raise PlanError(
                f"plan tensor {show_name(t.name)} is not a value of the model given with --model; "
                "pass the model the plan was made for"
            )
    return names


def _main_values(plan: MemoryPlan) -> list[PlannedTensor]:
    """The plan's tensors that are values of the main graph: not a body's, not an If/Loop/Scan
    owner's region (bytes the plan reserves for a body, named after its node)."""
    return [t for t in plan.tensors if not t.graph and t.kind != "region"]


@register("tflm", "TensorFlow Lite Micro's OfflineMemoryAllocation buffer: int32 offsets, -1 unplaced",
          suffix=".bin", model="optional")
def tflm_offsets(plan: MemoryPlan, model: onnx.ModelProto | None) -> bytes:
    far = max(plan.tensors, key=lambda t: t.offset, default=None)
    if far is not None and far.offset > _INT32_MAX:
        raise PlanError(
            f"tensor {show_name(far.name)} sits at offset {far.offset:,}; TFLM's offline plan stores offsets "
            f"as int32, at most {_INT32_MAX:,}: export this plan as a C header (--format c), whose offsets "
            "are 64-bit"
        )
    offsets = {t.name: t.offset for t in (plan.tensors if model is None else _main_values(plan))}
    entries = [offsets.get(name, NOT_PLACED) for name in value_order(plan, model)]
    return struct.pack(f"<{3 + len(entries)}i", FORMAT_VERSION, SUBGRAPH, len(entries), *entries)
