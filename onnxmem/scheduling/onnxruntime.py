"""The order onnxruntime runs a graph's nodes in, computed without running it.

onnxruntime (1.16 to 1.19 at least; ``GraphViewer`` in ``onnxruntime/core/graph/graph_viewer.cc``)
runs a session's nodes in one of two orders, chosen by ``SessionOptions.execution_order``.
A node's *index* is its position in the file (no graph optimization adds or removes nodes at
``ORT_DISABLE_ALL``); node names play no part.

* ``default`` (``ExecutionOrder.DEFAULT``): a depth-first walk back from the *leaves* (nodes
  whose outputs no node reads), the leaf of the highest index first; at each node its producers
  are visited highest index first, and a node is emitted once all of its producers are
  (post-order). Then every ``Shape`` or ``Size`` node that reads a node's output is moved to
  right after that node (so that what it reads can be freed early; a ``Size`` of a moved
  ``Shape`` follows it). A node that reads a value right before its reader in the file is
  therefore emitted *before* the reader's other producers are visited.
* ``priority`` (``ExecutionOrder.PRIORITY_BASED``): Kahn's algorithm, taking among the ready
  nodes a ``Shape`` or ``Size`` first, then the lowest index. On a file whose nodes are in
  topological order this is the file order, but for the ``Shape`` and ``Size`` nodes, which run
  as soon as what they read exists. (onnxruntime also ranks by a node priority that only its own
  graph transformers set; a file cannot.)

:func:`onnxruntime_order` computes either from the graph; the tests compare it with the order
of the kernel events in onnxruntime's profile.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from onnxmem.graph import GraphView
from onnxmem.scheduling.registry import OrderOptions, register

__all__ = ["ORDERS", "laid_out_order", "onnxruntime_order", "view_order"]

#: ``mode`` -> onnxruntime's ``ExecutionOrder`` member
ORDERS = {"default": "DEFAULT", "priority": "PRIORITY_BASED"}
_EARLY = ("Shape", "Size")


def onnxruntime_order(op_types: Sequence[str], producers: Sequence[Sequence[int]], mode: str = "default") -> list[int]:
    """The node indices in the order onnxruntime runs them (module doc). ``op_types[i]``: node
    ``i``'s op type; ``producers[i]``: the indices of the nodes that write what node ``i`` reads."""
    if mode not in ORDERS:
        raise ValueError(f"onnxruntime order {mode!r} is not one of {', '.join(ORDERS)}")
    n = len(op_types)
    ins = [sorted(set(p)) for p in producers]
    if mode == "priority":
        return _kahn(op_types, ins)
    read = [False] * n
    for p in ins:
        for j in p:
            read[j] = True
    stack = [(i, False) for i in range(n) if not read[i]]
    seen = [False] * n
    order: list[int] = []
    while stack:
        i, leave = stack.pop()
        if leave:
            order.append(i)
        elif not seen[i]:
            seen[i] = True
            stack.append((i, True))
            stack.extend((j, False) for j in ins[i] if not seen[j])
    return _shapes_early(op_types, ins, order)


def _shapes_early(op_types: Sequence[str], ins: Sequence[Sequence[int]], order: list[int]) -> list[int]:
    """``order`` with each Shape or Size that reads a node's output right after that node."""
    early = {i for i in order if op_types[i] in _EARLY and ins[i]}
    after: dict[int, list[int]] = {}
    for i in order:
        if i in early:
            after.setdefault(ins[i][0], []).append(i)
    out: list[int] = []

    def place(i: int) -> None:
        out.append(i)
        for j in sorted(after.get(i, ())):
            place(j)

    for i in order:
        if i not in early:
            place(i)
    return out


def _kahn(op_types: Sequence[str], ins: Sequence[Sequence[int]]) -> list[int]:
    n = len(op_types)
    users: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(p) for p in ins]
    for i, p in enumerate(ins):
        for j in p:
            users[j].append(i)
    ready = [(op_types[i] not in _EARLY, i) for i in range(n) if not waiting[i]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (op_types[u] not in _EARLY, u))
    return order


def view_order(view: GraphView, mode: str = "default") -> list[int]:
    """:func:`onnxruntime_order` of a planning view's nodes (view op indices)."""
    return laid_out_order(view, range(len(view.ops)), mode)


def laid_out_order(view: GraphView, layout: Sequence[int], mode: str = "default") -> list[int]:
    """The order onnxruntime runs ``view``'s nodes in when the file holds them in ``layout``
    (view op indices, a topological order), as view op indices."""
    at = {op: k for k, op in enumerate(layout)}
    producers = [[at[t.producer] for x in view.ops[op].reads
                  if (t := view.tensors.get(x)) is not None and t.producer is not None] for op in layout]
    return [layout[k] for k in onnxruntime_order([view.ops[op].op_type for op in layout], producers, mode)]


@register("onnxruntime", "the order onnxruntime runs the file in by default: a walk back from the outputs, "
          "Shape and Size early")
def _onnxruntime(view: GraphView, options: OrderOptions) -> Sequence[int]:
    return view_order(view, "default")
