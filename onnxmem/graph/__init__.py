"""The read-only view of a model: tensors, producers and uses, folding, bodies and captures.

The public interface of the graph layer; higher layers import from here
(``from onnxmem.graph import GraphView, build_view``). :mod:`~onnxmem.graph.view` builds
the view, one per graph level.
"""

from onnxmem.graph.view import (
    BRANCH_NAMES,
    CONSTANT_OPS,
    ORIGINS,
    RANDOM_OPS,
    Body,
    GraphView,
    Op,
    Tensor,
    body_kind,
    bound_outputs,
    build_view,
    child_path,
    excluded_branches,
    foldable,
    if_nodes,
    iter_views,
    node_names,
    outer_scope_reads,
    with_regions,
)

__all__ = [
    "BRANCH_NAMES",
    "CONSTANT_OPS",
    "ORIGINS",
    "RANDOM_OPS",
    "Body",
    "GraphView",
    "Op",
    "Tensor",
    "body_kind",
    "bound_outputs",
    "build_view",
    "child_path",
    "excluded_branches",
    "foldable",
    "if_nodes",
    "iter_views",
    "node_names",
    "outer_scope_reads",
    "with_regions",
]
