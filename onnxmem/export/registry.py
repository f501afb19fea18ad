"""The export-format registry: formats register here; :func:`export_plan` runs one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

from onnxmem.core.errors import OnnxmemError
from onnxmem.plans.point import MemoryPlan

if TYPE_CHECKING:
    import onnx

__all__ = ["FORMATS", "ExportFn", "ExportFormat", "ModelUse", "export_plan", "register", "require_model"]

ExportFn = Callable[[MemoryPlan, "onnx.ModelProto | None"], bytes]
ModelUse = Literal["none", "optional", "required"]


@dataclass(frozen=True, slots=True)
class ExportFormat:
    """One output format.

    ``model``: whether the format reads the model (``--model``). ``beside_model``:
    the output refers to files next to the model (its external weights), so a
    model with external data must have its output written into the model's folder.
    """

    name: str
    fn: ExportFn
    summary: str
    suffix: str
    model: ModelUse = "none"
    beside_model: bool = False


FORMATS: dict[str, ExportFormat] = {}


def register(
    name: str, summary: str, *, suffix: str, model: ModelUse = "none", beside_model: bool = False
) -> Callable[[ExportFn], ExportFn]:
    """Decorator: add a format to :data:`FORMATS` under ``name``."""

    def deco(fn: ExportFn) -> ExportFn:
        if name in FORMATS:
            raise ValueError(f"export format {name!r} registered twice")
        FORMATS[name] = ExportFormat(name, fn, summary, suffix, model, beside_model)
        return fn

    return deco


def export_plan(plan: MemoryPlan, fmt: str, model: onnx.ModelProto | None = None) -> bytes:
    """The bytes of ``plan`` in format ``fmt``; ``model`` as the format requires.

    Raises ``OnnxmemError`` for an unknown format or a missing model.
    """
    if fmt not in FORMATS:
        raise OnnxmemError(
            f"unknown export format '{fmt}'; 'onnxmem list formats' names the "
            f"{len(FORMATS)} formats: {', '.join(FORMATS)}"
        )
    entry = FORMATS[fmt]
    if entry.model == "required":
        require_model(fmt, model)
    return entry.fn(plan, model if entry.model != "none" else None)


def require_model(fmt: str, model: onnx.ModelProto | None) -> onnx.ModelProto:
    """``model``, or an error saying format ``fmt`` needs it."""
    if model is None:
        raise OnnxmemError(
            f"export format '{fmt}' needs the model the plan was made for; pass --model MODEL"
        )
    return model
