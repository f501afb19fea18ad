"""Exception types.

``OnnxmemError`` and its subclasses are problems with the user's input (a file, a
flag, a model); the CLI prints them as one line and exits non-zero. Anything
else that escapes is a bug in onnxmem and keeps its traceback.
"""

from __future__ import annotations


class OnnxmemError(Exception):
    """A user-facing problem: names the object, the rule it broke and the fix."""

    exit_code = 1


class ModelError(OnnxmemError):
    """The model file cannot be read, or its graph breaks an ONNX rule."""


class ShapeError(OnnxmemError):
    """A tensor's size cannot be determined, or is invalid."""


class ProblemError(OnnxmemError):
    """A memory-assignment problem is malformed or cannot be solved as asked."""


class PlanError(OnnxmemError):
    """A plan file is malformed or does not belong to the model."""


class PlanInvalid(OnnxmemError):
    """A plan was checked and is wrong: overlapping live tensors, bad outputs, ..."""

    exit_code = 3


class RuntimeBackendError(OnnxmemError):
    """onnxruntime cannot run what was asked (missing provider, unsupported op)."""
