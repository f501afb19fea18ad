"""Operator orders, by short lowercase name.

An ordering strategy is a function ``(view, options) -> tuple of node
indices``. It registers with :func:`register`; the CLI's ``--order`` choices
come from :data:`ORDERS`. :func:`reorder` checks every result is a
topological order of the graph, whatever strategy produced it.
"""

from __future__ import annotations

from onnxmem.scheduling.registry import ORDERS, OrderFn, OrderInfo, OrderOptions, check_topological, file_order, register, reorder, stable_topological_order

__all__ = [
    "ORDERS",
    "OrderFn",
    "OrderInfo",
    "OrderOptions",
    "check_topological",
    "file_order",
    "register",
    "reorder",
    "stable_topological_order",
]

# Register the memory-aware strategies (import order sets the listing order).
from onnxmem.scheduling import heuristics as _heuristics  # noqa: E402,F401
from onnxmem.scheduling import exact as _exact  # noqa: E402,F401
from onnxmem.scheduling import hierarchical as _hierarchical  # noqa: E402,F401
from onnxmem.scheduling import onnxruntime as _onnxruntime  # noqa: E402,F401
