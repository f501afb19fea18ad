"""ONNX models in and out: the checked loader, limits, external data, dtypes, dims, subgraphs.

The public interface of the model layer; higher layers import from here
(``from onnxmem.model import load_model``), so the modules behind it can change:

* :mod:`~onnxmem.model.load`: ``load_model`` (the checked loader; ``load_model_data`` also gives the
  external weights' references it found), ``file_sha256``, ``copy_without``;
* :mod:`~onnxmem.model.limits`: nesting and node-count limits, sparse weights refused;
* :mod:`~onnxmem.model.tensors`: stored tensors and the check of their data;
* :mod:`~onnxmem.model.nodes`: a graph's nodes' op types, domains, inputs and outputs read once
  (``read_nodes``), for the steps that each walk every node;
* :mod:`~onnxmem.model.external`: external weights, checked and read;
* :mod:`~onnxmem.model.dtypes`: element types and tensor sizes;
* :mod:`~onnxmem.model.dims`: ``--dim`` / ``--input-shape`` text, declared dims;
* :mod:`~onnxmem.model.bodies`: subgraphs, their keys and captured values;
* :mod:`~onnxmem.model.checkpoint`: onnxruntime training checkpoints, read with bounds checks;
* :mod:`~onnxmem.model.functions`, :mod:`~onnxmem.model.roles`,
  :mod:`~onnxmem.model.generate` (seeded test networks: import it by its module).

This layer imports onnx, never onnxruntime, and nothing of the layers above it.
"""

from onnxmem.model.arity import arity_error, check_node_arity
from onnxmem.model.bodies import (
    MAX_CAPTURED_ELEMENTS,
    OTHER_BRANCH,
    BodyKey,
    body_captures,
    captured_names,
    check_loops_end,
    initializers,
    iter_bodies,
    iter_graphs,
    model_graphs,
    owner_key,
    passes_true,
    subgraph_attributes,
)
from onnxmem.model.checkpoint import (
    CHECKPOINT_NAME,
    Checkpoint,
    CheckpointTensor,
    checkpoint_record,
    find_checkpoint,
    read_checkpoint,
    recorded_values,
    small_values,
    value_type,
    with_values,
)
from onnxmem.model.dims import (
    Dim,
    bind_dims,
    check_tensor_inputs,
    declared_dims,
    declared_types,
    dim_label,
    dim_names,
    graph_inputs,
    open_input_dims,
    parse_dim_binding,
    parse_input_shape,
    read_type,
    rename_dims,
    resolve_dim,
    set_shape,
    unname_placeholder_dims,
)
from onnxmem.model.dtypes import (
    DTYPES,
    MAX_BYTES,
    MAX_DIM,
    check_dims,
    dtype_bits,
    dtype_name,
    tensor_bytes,
)
from onnxmem.model.external import (
    MAX_INLINE_WEIGHTS,
    ExternalData,
    check_external_data,
    read_external_data,
)
from onnxmem.model.limits import (
    MAX_NESTING,
    MAX_NODES,
    check_graph_limits,
    check_sparse_initializers,
)
from onnxmem.model.load import copy_without, file_sha256, load_model, load_model_data
from onnxmem.model.nodes import NodeFields, read_nodes
from onnxmem.model.roles import ACCUMULATORS, LOSSES, caller_state, is_training_graph
from onnxmem.model.tensors import check_tensor_data, graph_tensors, tensor_sites

__all__ = [
    "copy_without",
    "ACCUMULATORS",
    "CHECKPOINT_NAME",
    "Checkpoint",
    "CheckpointTensor",
    "checkpoint_record",
    "find_checkpoint",
    "read_checkpoint",
    "recorded_values",
    "small_values",
    "value_type",
    "with_values",
    "DTYPES",
    "LOSSES",
    "MAX_BYTES",
    "MAX_CAPTURED_ELEMENTS",
    "MAX_DIM",
    "MAX_INLINE_WEIGHTS",
    "MAX_NESTING",
    "MAX_NODES",
    "OTHER_BRANCH",
    "BodyKey",
    "Dim",
    "ExternalData",
    "bind_dims",
    "body_captures",
    "caller_state",
    "captured_names",
    "check_loops_end",
    "check_dims",
    "check_external_data",
    "check_graph_limits",
    "check_sparse_initializers",
    "check_tensor_data",
    "arity_error",
    "check_node_arity",
    "check_tensor_inputs",
    "declared_dims",
    "declared_types",
    "dim_label",
    "dim_names",
    "dtype_bits",
    "dtype_name",
    "file_sha256",
    "graph_inputs",
    "graph_tensors",
    "initializers",
    "is_training_graph",
    "iter_bodies",
    "iter_graphs",
    "load_model",
    "load_model_data",
    "model_graphs",
    "open_input_dims",
    "NodeFields",
    "read_nodes",
    "owner_key",
    "passes_true",
    "parse_dim_binding",
    "parse_input_shape",
    "read_external_data",
    "read_type",
    "rename_dims",
    "resolve_dim",
    "set_shape",
    "subgraph_attributes",
    "tensor_bytes",
    "tensor_sites",
    "unname_placeholder_dims",
]
