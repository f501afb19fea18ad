"""The frozen parameters of a training graph whose values shape inference needs, from its checkpoint.

A graph that ``torch.onnx.export(..., dynamo=True)`` wrote keeps its small int64 constants
(ReduceMean axes, Reshape targets) as initializers; onnxruntime's artifact generator makes
them frozen parameters, graph inputs of ``training_model.onnx`` whose values are in the
``checkpoint`` it writes beside it. Without the values, the shapes after them depend on data.

:func:`checkpoint_known` finds the checkpoint (``--checkpoint PATH``, or the generator's file
beside the model, :func:`onnxmem.model.find_checkpoint`), reads the int32/int64 parameters
of at most :data:`onnxmem.model.checkpoint.MAX_VALUE_ELEMENTS` elements among the graph's
frozen (or eval-graph) parameters (:func:`onnxmem.runtime.checkpoint_values`), and returns
them with the record the plan keeps under ``extra.checkpoint``: shape inference reads them as
known values (:func:`onnxmem.model.with_values`), and verify feeds them to the run.
A checkpoint is looked for beside the model only when the graph has such parameters.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from onnxmem.model import caller_state, checkpoint_record, find_checkpoint
from onnxmem.runtime import checkpoint_values

__all__ = ["checkpoint_known", "value_parameters"]

_INTEGERS = (onnx.TensorProto.INT32, onnx.TensorProto.INT64)


def value_parameters(model: onnx.ModelProto) -> list[str]:
    """The graph inputs that are frozen (or eval-graph) parameters of an integer type: the
    ones whose values a checkpoint may hold for shape inference."""
    ints = {vi.name for vi in model.graph.input if vi.type.tensor_type.elem_type in _INTEGERS}
    return [n for n, r in caller_state(model).items() if r in ("frozen-parameter", "parameter") and n in ints]


def checkpoint_known(model: onnx.ModelProto, path: str | os.PathLike[str],
                     given: str | None) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """``(values, record)``: the known values of ``model``'s integer parameters from the
    checkpoint ``given`` (``--checkpoint``) or found beside ``path``, and what the plan records
    of it; ``({}, {})`` with neither. ``ModelError`` for a checkpoint that cannot be read."""
    wanted = value_parameters(model)
    if given is not None:
        found, how = Path(given), "--checkpoint"
    else:
        beside = find_checkpoint(path) if wanted else None
        if beside is None:
            return {}, {}
        found, how = beside, "beside the model"
    checkpoint, values, reader = checkpoint_values(found, wanted)
    return values, {**checkpoint_record(checkpoint, values, how), "reader": reader}
