"""The order registry: options, registration, the file order and the topological check.

Strategies register here with :func:`register`; :func:`reorder` runs one by
name and checks its result is a topological order. The package
:mod:`onnxmem.scheduling` imports every strategy module so that the registry
is complete, and re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from onnxmem.core.errors import ModelError, show_name
from onnxmem.core.toposort import stable_order
from onnxmem.core.workclock import session
from onnxmem.graph import GraphView

__all__ = [
    "ORDERS",
    "OrderOptions",
    "OrderInfo",
    "check_topological",
    "register",
    "reorder",
    "stable_topological_order",
]


@dataclass(frozen=True, slots=True)
class OrderOptions:
    """``timeout``: budget seconds a search may take (counted work, the same
    order at any load, unless the process uses the wall clock: see
    :mod:`onnxmem.core.workclock`); ``alignment``: bytes, for
    strategies that score orders by the arena they would need; ``io``: the
    liveness rule for graph inputs and outputs; ``inplace``: score orders with
    the sharing of :mod:`onnxmem.analysis.aliasing` (views and in-place outputs, as
    ``onnxmem plan --inplace on`` plans them), else every tensor on its own."""

    timeout: float | None = None
    alignment: int = 64
    io: str = "internal"
    inplace: bool = False


OrderFn = Callable[[GraphView, OrderOptions], Sequence[int]]


@dataclass(frozen=True, slots=True)
class OrderInfo:
    name: str
    fn: OrderFn
    summary: str


ORDERS: dict[str, OrderInfo] = {}


def register(name: str, summary: str) -> Callable[[OrderFn], OrderFn]:
    def deco(fn: OrderFn) -> OrderFn:
        if name in ORDERS:
            raise ValueError(f"order {name!r} registered twice")
        ORDERS[name] = OrderInfo(name, fn, summary)
        return fn

    return deco


def stable_topological_order(view: GraphView) -> tuple[int, ...]:
    """Kahn's algorithm that always takes the ready node earliest in the file.

    Equals the file order when that is already topological. Raises
    ``ModelError`` naming the nodes on a cycle. Computed once per view.
    """
    return view.memo("stable_topological_order", lambda: _stable_order(view))


def _readers(view: GraphView, index: int) -> tuple[int, ...]:
    """Nodes that read a value node ``index`` writes, weights included (:meth:`GraphView.successors`
    leaves weights out): a node that computes a weight runs before its readers in every order
    onnxmem writes, as a runtime that does not fold it runs it, wherever the file puts it."""
    out: dict[int, None] = {}
    for o in view.ops[index].outputs:
        if o:
            out.update(dict.fromkeys(view.consumers.get(o, ())))
    return tuple(out)


def _stable_order(view: GraphView) -> tuple[int, ...]:
    n = len(view.ops)
    order = stable_order([_readers(view, i) for i in range(n)])
    if len(order) < n:
        placed = set(order)
        stuck = [view.ops[i].name for i in range(n) if i not in placed]
        shown = ", ".join(show_name(s) for s in stuck[:6]) + (" ..." if len(stuck) > 6 else "")
        raise ModelError(
            f"the graph has a cycle through nodes {shown}; an ONNX graph must be acyclic"
        )
    return tuple(order)


def only_order(view: GraphView) -> tuple[int, ...] | None:
    """The graph's one topological order, when it allows no other; else ``None``.

    The order is unique exactly when each node of it reads a value of the node
    just before it (a chain): then every strategy must return it, and no search
    is needed. One pass over the stable order.
    """
    order = stable_topological_order(view)
    for prev, node in zip(order, order[1:]):
        if prev not in view.predecessors(node):
            return None
    return order


def check_topological(view: GraphView, order: Sequence[int]) -> None:
    """Raise ``ModelError`` unless ``order`` runs every node once, after the producers of every
    value it reads (weights computed by nodes included)."""
    n = len(view.ops)
    if sorted(order) != list(range(n)):
        raise ModelError(f"the order does not list each of the {n} nodes exactly once")
    pos = {op: k for k, op in enumerate(order)}
    tensors = view.tensors
    for i in range(n):
        for p in {t.producer for t in map(tensors.get, view.ops[i].reads) if t is not None and t.producer is not None}:
            if pos[p] > pos[i]:
                raise ModelError(
                    f"node {show_name(view.ops[i].name)} is ordered before node "
                    f"{show_name(view.ops[p].name)}, which produces a value it reads"
                )


def reorder(view: GraphView, strategy: str = "file", options: OrderOptions | None = None) -> tuple[int, ...]:
    """The node order ``strategy`` chooses, checked topological."""
    if strategy not in ORDERS:
        raise ModelError(
            f"unknown order '{strategy}'; choose one of: {', '.join(sorted(ORDERS))}"
        )
    forced = only_order(view)
    if forced is not None:
        return forced
    with session():
        found = ORDERS[strategy].fn(view, options or OrderOptions())
    if found is stable_topological_order(view):
        return found  # Kahn's order of the view itself: topological as made, not checked again
    order = tuple(int(i) for i in found)
    check_topological(view, order)
    return order


@register("file", "the file's node order (sorted stably when it is not topological)")
def file_order(view: GraphView, options: OrderOptions) -> Sequence[int]:
    return stable_topological_order(view)
