"""The read-only view of a model: tensors, producers and uses, folding, bodies and captures.

The public interface of the graph layer; higher layers import from here
(``from onnxmem.graph import GraphView, build_view``): :mod:`~onnxmem.graph.view` builds
the view, one per graph level; :mod:`~onnxmem.graph.paths` names nodes and bodies and reads
``--branch``; :mod:`~onnxmem.graph.conditions` decides the If nodes whose condition is
known before the run; :mod:`~onnxmem.graph.regions` adds the regions bodies run in.
"""

from onnxmem.graph.conditions import (
    MAX_ASSUMED,
    Decision,
    assumable,
    assumed_record,
    decide_branches,
    read_assumed,
    read_value,
    value_record,
)
from onnxmem.graph.ops import CONSTANT_OPS, RANDOM_OPS, draws_random, foldable
from onnxmem.graph.paths import (
    BRANCH_NAMES,
    child_path,
    excluded_branches,
    if_nodes,
    node_names,
    outer_scope_reads,
)
from onnxmem.graph.regions import bound_outputs, inside_outputs, with_regions
from onnxmem.graph.view import (
    ORIGINS,
    Body,
    GraphView,
    Op,
    Tensor,
    body_kind,
    build_view,
    iter_views,
)

__all__ = [
    "BRANCH_NAMES",
    "CONSTANT_OPS",
    "MAX_ASSUMED",
    "ORIGINS",
    "RANDOM_OPS",
    "Body",
    "Decision",
    "GraphView",
    "Op",
    "Tensor",
    "assumable",
    "assumed_record",
    "body_kind",
    "bound_outputs",
    "inside_outputs",
    "build_view",
    "child_path",
    "decide_branches",
    "draws_random",
    "excluded_branches",
    "foldable",
    "if_nodes",
    "iter_views",
    "node_names",
    "outer_scope_reads",
    "read_assumed",
    "read_value",
    "value_record",
    "with_regions",
]
