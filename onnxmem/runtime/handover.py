"""The values of shape arithmetic in a run step by step (:meth:`onnxmem.runtime.arena_steps.ArenaSteps.run`).

A run step by step runs each node twice: once outside the arena as its reference, once in it.
Where the reference is each node run again (on CUDA; a graph with bodies, a random op or a
float16 value on the CPU; ``reference="nodes"``), the nodes of shape arithmetic
(:func:`onnxmem.runtime.arena_buffers.handed`: Shape, Gather, Unsqueeze, Concat, Cast ... on
values of at most 256 bytes computed from shapes and weights alone, which onnxruntime's own
session folds into constants when it loads the model) are run once instead, all together, in
one session on the CPU (:class:`HandedValues`), and each value is written at its planned
offset as its node's step comes, and is its reference (the value the nodes after it read
outside the arena). Each input is still checked as it is read, and each write against every
live value, as any node's.

On CUDA those values are the CPU kernels' (onnxruntime's own session computes them on the
CPU too where they feed a shape, and folds them where the shapes are static); the reference
of every other node reads the same values as its run in the arena does.

A Shape or Size node reads its input's shape alone: the session is given an untouched buffer
of the planned shape (no page of it is written). Each value is held to its planned shape and
element type before it is written: one that is not sends its node the way of any other node;
a session onnxruntime cannot run sends every handed node from there on that way.

Where the reference is one whole-model run and the run goes step by step (no spare core, or
the run ahead of it stopped), a handed node's values are that run's (:func:`private_given`),
held to the plan the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxmem.core.errors import RuntimeBackendError
from onnxmem.graph import GraphView
from onnxmem.runtime.arena_buffers import Slot, planned_value
from onnxmem.runtime.isolation import TimeLimitExceeded
from onnxmem.runtime.reference import PieceReference

__all__ = ["HandedValues", "private_given"]

#: one piece: the handed values are at most 256 bytes each
_ONE_PIECE = 1 << 62


class HandedValues:
    """The values of ``nodes`` (the handed nodes of ``order``, :func:`onnxmem.runtime.arena_buffers.handed`)
    computed in one CPU session of them alone when the first is asked for (:meth:`take`).

    ``model``: the model with its weights; ``nodes``: every node of the model's main graph, by
    the view's op index; ``weights``: the values the handed nodes read that no handed node
    makes (initializers and folded constants); ``slots``: every value's planned shape, type and
    place.
    """

    def __init__(self, model: onnx.ModelProto, view: GraphView, nodes: Sequence[onnx.NodeProto],
                 handed: Sequence[int], slots: Mapping[str, Slot], weights: Mapping[str, np.ndarray]) -> None:
        self.slots = slots
        self._made = (model, view, nodes, handed, weights)
        made = {o for i in handed for o in view.ops[i].outputs if o}
        shapes_of: dict[str, np.ndarray] = {}  # a Shape's or Size's input: an untouched buffer of its shape
        for i in handed:
            op = view.ops[i]
            if op.op_type in ("Shape", "Size") and op.reads and op.reads[0] not in weights and op.reads[0] not in made:
                first = op.reads[0]
                shapes_of[first] = np.empty(tuple(slots[first].shape), np.uint8)
        values = {o: slots[o].elem_type for o in made}
        self.reference: PieceReference | None = PieceReference(
            model, [nodes[i] for i in handed], values, shapes_of, weights, _ONE_PIECE,
            names=[view.ops[i].name for i in handed])

    def again(self) -> HandedValues:
        """The same values, none taken yet (a run that starts again)."""
        model, view, nodes, handed, weights = self._made
        return HandedValues(model, view, nodes, handed, self.slots, weights)

    def take(self, outputs: Sequence[str]) -> dict[str, tuple[np.ndarray, Any]] | None:
        """``{output: (array, OrtValue)}`` of one handed node, each at its planned shape and
        element type; ``None`` where the session cannot give them (it failed: no handed node is
        written from here on) or one is not the plan's (that node runs as any other)."""
        if self.reference is None:
            return None
        try:
            values = [self.reference.pop(o) for o in outputs]
        except TimeLimitExceeded:
            raise
        except (RuntimeBackendError, KeyError):
            self.reference = None
            return None
        return _as_planned(outputs, values, self.slots)


def private_given(private: Mapping[str, Any], slots: Mapping[str, Slot],
                  outputs: Sequence[str]) -> dict[str, tuple[np.ndarray, Any]] | None:
    """:meth:`HandedValues.take` where the reference is one whole-model run: ``private``, the
    node's values of that run (OrtValues on the host)."""
    return _as_planned(outputs, [private[o] for o in outputs], slots)


def _as_planned(outputs: Sequence[str], values: Sequence[Any],
                slots: Mapping[str, Slot]) -> dict[str, tuple[np.ndarray, Any]] | None:
    """``{output: (array, OrtValue)}`` of the host OrtValues ``values`` of ``outputs``, where each
    has its slot's planned shape and element type (:func:`onnxmem.runtime.arena_buffers.planned_value`);
    else ``None``."""
    got: dict[str, tuple[np.ndarray, Any]] = {}
    for o, value in zip(outputs, values):
        arr = value.numpy()
        if not planned_value(slots[o], arr):
            return None
        got[o] = (arr, value)
    return got
