"""A lower bound on the peak of every order of a graph: what must be live while each node runs.

The bound of a plan (``plan.lower_bound``) is the most bytes live at one step of *its* order.
This module bounds every order at once, so that a plan can say how far any reordering could
take it. Under the liveness rules of :mod:`onnxmem.scheduling.cost` (an :class:`OrderGraph`
with the plan's ``io``, ``alignment`` and sharing), while node ``v`` runs, in every
topological order, these classes of tensors are live:

* the classes ``v`` writes and reads (less ``disc[v]``, the bytes an in-place write may save
  there: whether it does depends on the order, so the bound takes the saving);
* each class made before ``v`` in every order (by a strict ancestor of ``v``, or a graph
  input) and read after it in every order (by a strict descendant of ``v``), or a graph output
  made by a strict ancestor (outputs live to the end);

and at the first step, whatever node it runs, every graph input (inputs live from step 0); at
the last, every graph output (outputs live to the end).

No two of them share a byte: a view joins its source's class (counted once), and an in-place
write takes the bytes of a class that dies at its node, which is one of ``v``'s own. The third
kind of sharing, a Concat's inputs laid inside its output (``concat_slices``), is left out by
not counting those inputs at all, which can only lower the bound. The most of these bytes over
the nodes is at most the peak of any order, hence at most ``plan.lower_bound`` of any plan of
the graph under the same rules, and at most its arena; a plan at this bound has an order no
reordering improves. Where a graph's forward values are read by its backward pass (a training
graph), the bound counts them across the turn: the bytes no order can save and only
recomputation (``plan --budget``) can.

Ancestor sets are rows of a boolean matrix, so the bound is computed for graphs of at most
:data:`MAX_NODES` nodes (``None`` above: the matrix grows with the square of the nodes), and
for graphs without subgraphs (``None``: the regions their bodies take are the plan's).
"""

from __future__ import annotations

import numpy as np

from onnxmem.analysis.alias_rules import concat_slices
from onnxmem.core.toposort import stable_order
from onnxmem.graph import GraphView
from onnxmem.scheduling.cost import KEPT_NODES, OrderGraph, order_graph

__all__ = ["MAX_NODES", "any_order_bound", "order_graph_bound"]

#: the most nodes a graph may have for :func:`any_order_bound` (those whose search graph the
#: order search leaves on the view, :func:`onnxmem.scheduling.cost.order_graph`)
MAX_NODES = KEPT_NODES


def any_order_bound(view: GraphView, io: str = "internal", alignment: int = 64,
                    inplace: bool = False) -> int | None:
    """Bytes that every order of ``view`` has live at some step, under the liveness rules of
    ``io``, ``alignment`` and ``inplace`` (module doc); ``None`` above :data:`MAX_NODES` nodes
    and for a graph with subgraphs (If, Loop, Scan), whose bodies' regions are not bounded here."""
    if len(view.ops) > MAX_NODES:  # before compacting it: a graph this large is not bounded
        return None
    if view.bodies or view.regions:
        return None  # a node's subgraphs live in a region the plan lays out around the node's step
    return order_graph_bound(order_graph(view, io, alignment, inplace))


def order_graph_bound(graph: OrderGraph) -> int | None:
    """:func:`any_order_bound` of a graph already compacted for search; ``None`` above
    :data:`MAX_NODES` nodes."""
    n = graph.n
    if n > MAX_NODES:
        return None
    if n == 0:
        return graph.peak([])
    topo = stable_order(graph.succs)
    if len(topo) != n:
        raise ValueError("order_graph_bound: the graph has a cycle")
    before = np.zeros((n, n), dtype=bool)  # before[v, u]: u is a strict ancestor of v
    for v in topo:
        row = before[v]
        for u in graph.preds[v]:
            row |= before[u]
            row[u] = True
    after = before.T  # after[u, v]: v is a strict descendant of u
    skipped = _concat_inputs(graph)
    crossing = np.zeros(n, dtype=np.int64)
    for k, size in enumerate(graph.size):
        if not size or k in skipped:
            continue
        p = graph.producer[k]
        readers = graph.consumers[k]
        if graph.pinned[k]:
            live = after[p].copy() if p >= 0 else np.ones(n, dtype=bool)
        elif readers:
            live = np.logical_or.reduce(before[np.asarray(readers, dtype=np.intp)], axis=0)
            if p >= 0:
                live &= after[p]
        else:
            continue  # an unread output lives at its producer's step only
        live[np.asarray(readers, dtype=np.intp)] = False  # counted with the node's own reads
        if p >= 0:
            live[p] = False
        crossing[live] += size
    own = np.fromiter((_own_bytes(graph, v, skipped) for v in range(n)), dtype=np.int64, count=n)
    return max(int((own + crossing).max()), _first_step(graph, skipped), _last_step(graph, skipped))


def _first_step(graph: OrderGraph, skipped: frozenset[int]) -> int:
    """The bytes live at the first step of every order: every graph input (those nothing reads
    too), and, where no weight-only node may run first, the outputs of a node without
    predecessors (the smallest such, less its in-place saving)."""
    sizes = graph.size
    inputs = sum(sizes[k] for k, p in enumerate(graph.producer) if p < 0 and k not in skipped)
    if graph.free:
        return inputs
    first = min(sum(sizes[k] for k in set(graph.outs[v]) - skipped) - graph.disc[v]
                for v in range(graph.n) if not graph.preds[v])
    return inputs + max(first, 0)


def _last_step(graph: OrderGraph, skipped: frozenset[int]) -> int:
    """The bytes live at the last step of every order: every graph output (outputs live to the
    end), and the other classes a node without successors writes or reads (the smallest such,
    less its in-place saving)."""
    sizes, pinned = graph.size, graph.pinned
    outputs = sum(sizes[k] for k in range(len(sizes)) if pinned[k] and k not in skipped)
    last = min(sum(sizes[k] for k in _touched(graph, v, skipped) if not pinned[k]) - graph.disc[v]
               for v in range(graph.n) if not graph.succs[v])
    return outputs + max(last, 0)


def _own_bytes(graph: OrderGraph, v: int, skipped: frozenset[int]) -> int:
    """The bytes of the classes node ``v`` writes and reads, each once, less what an in-place
    write may save there."""
    return sum(graph.size[k] for k in _touched(graph, v, skipped)) - graph.disc[v]


def _touched(graph: OrderGraph, v: int, skipped: frozenset[int]) -> set[int]:
    """The classes node ``v`` writes or reads, each once, but those left out."""
    return {*graph.outs[v], *graph.reads[v]} - skipped


def _concat_inputs(graph: OrderGraph) -> frozenset[int]:
    """The classes a Concat may hold inside its output (read by a Concat whose inputs
    :func:`~onnxmem.analysis.alias_rules.concat_slices` places): left out of the bound."""
    if not graph.inplace:
        return frozenset()
    view = graph.view
    out: set[int] = set()
    for v, gi in enumerate(graph.real):
        op = view.ops[gi]
        if op.op_type == "Concat" and concat_slices(view, op) is not None:
            out.update(graph.reads[v])
    return frozenset(out)
