"""Lifetimes: when each arena value is born and dies under an operator order.

This module is the one home of the lifetime rule. Liveness (the problem the
solvers see), the order search's final evaluation, the aliasing layout's
choice of Concat placements and the plan reports all call it; the static
proof in :mod:`onnxmem.verify.run` keeps its own, deliberately independent,
recomputation.

Step ``k`` is the execution of ``order[k]``. Lifetimes are half-open
``[start, end)`` in steps:

* a node output is live from its producer's step to one past the last step
  that reads it (a value captured by a subgraph is read by the owning node);
* an output nothing reads (an unused optional output too) still occupies
  memory during its producer's step: ``[p, p + 1)``;
* graph inputs are live from step 0; graph outputs until the end of the run;
* with ``io="external"`` graph inputs and outputs are left out of the arena,
  for runtimes that own them;
* weights (initializers and constants) are never in the arena.

Tensors that share bytes (a *group*) are live over the union of their
members' lifetimes, ``[min start, max end)`` (:func:`group_span`). The bytes
live at each step are a sweep over those spans (:func:`live_profile`), linear
in the number of spans plus steps.

Everything here is one pass over the graph or the spans: O(nodes + edges)
for the lifetimes, O(spans + steps) for a profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

from onnxmem.core.choices import IO_MODES
from onnxmem.core.errors import ModelError

if TYPE_CHECKING:  # types only: this module reads a view, it never builds one
    from onnxmem.graph import GraphView, Tensor

__all__ = ["IO_MODES", "arena_tensors", "check_io", "group_span", "last_reads", "live_profile",
           "tensor_lifetimes"]



def check_io(io: str) -> None:
    """Raise ``ModelError`` unless ``io`` is one of :data:`IO_MODES`."""
    if io not in IO_MODES:
        raise ModelError(f"--io '{io}' is not one of {', '.join(IO_MODES)}")


def arena_tensors(view: GraphView, io: str = "internal") -> list[Tensor]:
    """The tensors the arena holds: every non-weight, less graph inputs and
    outputs with ``io="external"``."""
    check_io(io)
    io_names = set(view.inputs) | set(view.outputs)
    return [
        t for t in view.tensors.values()
        if t.kind != "weight" and not (io == "external" and t.name in io_names)
    ]


def last_reads(view: GraphView, order: Sequence[int]) -> dict[str, int]:
    """``{value: the last step that reads it}`` (subgraph captures count as reads)."""
    last: dict[str, int] = {}
    for k, op_index in enumerate(order):
        for name in view.ops[op_index].reads:
            last[name] = k
    return last


def tensor_lifetimes(
    view: GraphView, order: Sequence[int], io: str = "internal", last_read: Mapping[str, int] | None = None,
) -> dict[str, tuple[int, int]]:
    """``{tensor: (start, end)}`` for every tensor the arena holds (the module's rule);
    ``last_read``: :func:`last_reads` of ``order``, where the caller has it.

    Example: for ``a = Relu(x); y = Sigmoid(a)`` with ``x`` a graph input and
    ``y`` the graph output, the order ``(0, 1)`` gives ``x: (0, 1)``,
    ``a: (0, 2)``, ``y: (1, 2)``.
    """
    check_io(io)
    horizon = max(len(order), 1)
    step = {op: k for k, op in enumerate(order)}
    if last_read is None:
        last_read = last_reads(view, order)
    out_set = set(view.outputs)
    lifetimes: dict[str, tuple[int, int]] = {}
    for t in arena_tensors(view, io):
        start = 0 if t.producer is None else step[t.producer]
        end = last_read.get(t.name, start) + 1
        if t.name in out_set:
            end = horizon
        lifetimes[t.name] = (start, max(end, start + 1))
    return lifetimes


def group_span(lifetimes: Mapping[str, tuple[int, int]], members: Iterable[str]) -> tuple[int, int]:
    """``(start, end)`` of a group: the union of its members' lifetimes
    (members without a lifetime, outside the arena, are skipped)."""
    spans = [lifetimes[m] for m in members if m in lifetimes]
    return min(s for s, _ in spans), max(e for _, e in spans)


def live_profile(spans: Iterable[tuple[int, int, int]], steps: int) -> np.ndarray:
    """Bytes live at each step ``0 .. steps - 1`` of ``(start, end, size)`` spans.

    One sweep: each span adds ``size`` at ``start`` and removes it at ``end``.
    Spans may reach past ``steps`` (they are cut there). Example:
    ``live_profile([(0, 2, 5), (1, 3, 7)], 3)`` is ``[5, 12, 7]``.
    """
    delta = np.zeros(max(steps, 0) + 1, dtype=np.int64)
    for start, end, size in spans:
        if start < steps:
            delta[start] += size
            delta[min(end, steps)] -= size
    return np.cumsum(delta[:steps]) if steps > 0 else np.zeros(0, dtype=np.int64)
