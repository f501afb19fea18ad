"""Plan writers, by short lowercase name: what ``onnxmem export PLAN --format FMT`` writes.

A format is a pure function ``(plan, model) -> bytes``. ``model`` is the ONNX
model the plan was made for (an ``onnx.ModelProto``), or ``None`` when the caller
gave none; each format says whether it needs the model (``"required"``), can use
it (``"optional"``) or never reads it (``"none"``). Formats never write files:
the caller writes the bytes (atomically).

Adding a format is one module in this package that calls :func:`register`, and
one import line in this file. A format whose output defines names (C symbols) calls
:func:`register_prefixed` instead: its function takes a third argument, the name
prefix of ``--prefix`` (``None``: its own names). This package imports neither onnx nor
numpy at load time; a format that needs onnx imports it when it runs.
"""

# the built-in formats register on import: import order sets the listing order
from onnxmem.export.registry import (  # noqa: I001
    FORMATS, ExportFn, ExportFormat, ModelUse, PrefixedExportFn, export_plan, no_prefix, prefixed_formats,
    register, register_prefixed, require_model,
)
from onnxmem.export import plan_json as _plan_json  # noqa: F401
from onnxmem.export import annotated as _annotated  # noqa: F401
from onnxmem.export import c_header as _c_header  # noqa: F401
from onnxmem.export import tflm as _tflm  # noqa: F401

__all__ = ["FORMATS", "ExportFn", "ExportFormat", "ModelUse", "PrefixedExportFn", "export_plan", "no_prefix",
           "prefixed_formats", "register", "register_prefixed", "require_model"]
