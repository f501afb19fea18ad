"""The values of a training checkpoint's parameters, read by onnxruntime where it can.

:func:`checkpoint_values` reads the checkpoint with onnxmem's bounds-checked reader
(:func:`onnxmem.model.checkpoint.read_checkpoint`) first, so a malformed or hostile file is
refused before onnxruntime sees it. Where onnxruntime's training API is installed
(``onnxruntime.training.api.CheckpointState``) the values are then read by it, in the
command's onnxruntime child process (:func:`onnxmem.runtime.isolation.run_isolated`: a crash
there is one line, not the command's end); elsewhere (the main environment has no training
API) they come from onnxmem's reader, which reads the same bytes.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

import numpy as np

from onnxmem.core.errors import ModelError, one_line, show_name
from onnxmem.model.checkpoint import Checkpoint, read_checkpoint, small_values

__all__ = ["ORT_READER", "OWN_READER", "checkpoint_values", "has_training_api"]

#: how the values were read, as the plan records it
ORT_READER = "onnxruntime.training CheckpointState"
OWN_READER = "onnxmem's checkpoint reader"


def has_training_api() -> bool:
    """Whether ``onnxruntime.training``'s checkpoint API is importable (the training environment)."""
    try:
        return importlib.util.find_spec("onnxruntime.training") is not None
    except (ImportError, ValueError):
        return False


def _ort_values(path: str, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The values of ``names`` as ``CheckpointState`` reads them (in the onnxruntime child)."""
    from onnxruntime.training.api import CheckpointState

    try:
        state = CheckpointState.load_checkpoint(path)
    except Exception as exc:  # onnxruntime's own refusal of the file
        raise ModelError(f"checkpoint {show_name(path)}: onnxruntime.training cannot load it "
                         f"({one_line(str(exc))[:200]}); pass the checkpoint the artifact generator "
                         "wrote beside training_model.onnx (--checkpoint PATH)") from None
    params = state.parameters
    return {n: np.array(params[n].data, copy=True) for n in names if n in params}


def checkpoint_values(path: str | os.PathLike[str], names: Sequence[str], *, use_ort: bool | None = None,
                      links: bool = True) -> tuple[Checkpoint, dict[str, np.ndarray], str]:
    """The checkpoint at ``path``, the values of those of ``names`` that are constants
    in it (:func:`onnxmem.model.checkpoint.small_values`), and which reader
    gave them (:data:`ORT_READER` or :data:`OWN_READER`). ``use_ort``: ``None`` uses onnxruntime
    where its training API is installed; ``links=False``: not read through a link. ``ModelError``
    for a missing or malformed file, or one whose values the two readers disagree on."""
    checkpoint = read_checkpoint(path, links=links)
    own = small_values(checkpoint, names)
    if not own or not (has_training_api() if use_ort is None else use_ort):
        return checkpoint, own, OWN_READER
    from onnxmem.runtime.isolation import run_isolated

    got = run_isolated(_ort_values, str(path), list(own))
    for name, value in own.items():
        theirs = got.get(name)
        if theirs is None or theirs.dtype != value.dtype or not np.array_equal(theirs, value):
            raise ModelError(f"checkpoint {show_name(str(path))}: parameter {show_name(name)} reads differently "
                             "through onnxruntime.training and onnxmem's reader; regenerate the checkpoint")
    return checkpoint, {n: got[n] for n in own}, ORT_READER
