"""The frozen parameters of a training graph whose values planning and runs need, from its checkpoint.

A graph that ``torch.onnx.export(..., dynamo=True)`` wrote keeps its small int64 constants
(ReduceMean axes, Reshape targets) as initializers; onnxruntime's artifact generator makes
them frozen parameters, graph inputs of ``training_model.onnx`` whose values are in the
``checkpoint`` it writes beside it. Without the values, the shapes after them depend on data.

:func:`checkpoint_known` finds the checkpoint (``--checkpoint PATH``, or the generator's file
beside the model, :func:`onnxmem.model.find_checkpoint`), reads the values of the graph's
frozen (or eval-graph) parameters that are constants rather than weights
(:func:`onnxmem.model.value_type`: integer and boolean tensors of at most
:data:`onnxmem.model.checkpoint.MAX_VALUE_ELEMENTS` elements, floating-point scalars such as a
Dropout ratio; :func:`onnxmem.runtime.checkpoint_values`), and returns them with the record the
plan keeps under ``extra.checkpoint``: shape inference reads them as known values
(:func:`onnxmem.model.with_values`), and verify feeds them to the run.
A checkpoint is looked for beside the model only when the graph has such parameters, and
read there without following a link. A parameter the checkpoint holds with another element
type or dims than the graph declares for its input is refused in one line that names both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import onnx

from onnxmem.core.errors import ModelError, show_name
from onnxmem.model import (
    DTYPES,
    Checkpoint,
    caller_state,
    checkpoint_record,
    dtype_name,
    find_checkpoint,
    graph_inputs,
    value_type,
)

__all__ = ["checkpoint_known", "value_parameters"]

def _count(vi: onnx.ValueInfoProto) -> int:
    """The elements of a graph input of static shape (a dim it does not fix counts as 1)."""
    count = 1
    for d in vi.type.tensor_type.shape.dim:
        count *= d.dim_value if d.HasField("dim_value") else 1
    return count


def value_parameters(model: onnx.ModelProto, caller: Mapping[str, str] | None = None) -> list[str]:
    """The graph inputs that are frozen (or eval-graph) parameters whose values are read
    (:func:`onnxmem.model.value_type`): the ones a checkpoint may hold for planning and runs.
    ``caller``: the roles of the graph inputs (default: :func:`onnxmem.model.caller_state` of
    ``model``; the graph onnxruntime built takes those of the model as written)."""
    read = {vi.name for vi in model.graph.input if value_type(vi.type.tensor_type.elem_type, _count(vi))}
    roles = caller_state(model) if caller is None else caller
    return [n for n, r in roles.items() if r in ("frozen-parameter", "parameter") and n in read]


def checkpoint_known(model: onnx.ModelProto, path: str | os.PathLike[str], given: str | None,
                     caller: Mapping[str, str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """``(values, record)``: the known values of ``model``'s constant parameters from the
    checkpoint ``given`` (``--checkpoint``) or found beside ``path``, and what the plan records
    of it; ``({}, {})`` with neither. ``caller``: as :func:`value_parameters` takes it.
    ``ModelError`` for a checkpoint that cannot be read."""
    wanted = value_parameters(model, caller)
    if given is not None:
        found, how = Path(given), "--checkpoint"
    else:
        beside = find_checkpoint(path) if wanted else None
        if beside is None:
            return {}, {}
        found, how = beside, "beside the model"
    from onnxmem.runtime import checkpoint_values  # the reader: only where there is a checkpoint

    checkpoint, values, reader = checkpoint_values(found, wanted, links=given is not None)
    _check_declared(model, checkpoint, wanted)
    return values, {**checkpoint_record(checkpoint, values, how), "reader": reader}


def _check_declared(model: onnx.ModelProto, checkpoint: Checkpoint, names: Iterable[str]) -> None:
    """``ModelError`` for a parameter of ``names`` the checkpoint holds with an element type or
    dims other than those ``model`` declares for its graph input (a checkpoint of another graph,
    or a hostile one): inference and runs would read it as the graph does not."""
    declared = graph_inputs(model)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    held = checkpoint.by_name()
    for name in names:
        t, dims = held.get(name), declared.get(name)
        if t is None:
            continue
        fits = dims is None or (len(dims) == len(t.dims)
                                and all(not isinstance(d, int) or d == v for d, v in zip(dims, t.dims)))
        if t.elem_type != types[name] or not fits:
            want = "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in dims or ()) + "]"
            raise ModelError(
                f"checkpoint {show_name(checkpoint.path)}: parameter {show_name(name)} is {_type_name(t.elem_type)} "
                f"{list(t.dims)}, but the model's graph input of that name is {dtype_name(types[name])} {want}; "
                "pass the checkpoint the artifact generator wrote with this model (--checkpoint PATH)")


def _type_name(elem_type: int) -> str:
    """A checkpoint's element type by its name, its number where onnxmem knows no name for it."""
    return dtype_name(elem_type) if elem_type in DTYPES else f"element type {elem_type}"
