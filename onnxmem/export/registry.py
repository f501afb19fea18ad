"""The export-format registry: formats register here; :func:`export_plan` runs one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

from onnxmem.core.errors import OnnxmemError
from onnxmem.plans.point import MemoryPlan

if TYPE_CHECKING:
    import onnx

__all__ = ["FORMATS", "ExportFn", "ExportFormat", "ModelUse", "PrefixedExportFn", "export_plan", "no_prefix",
           "prefixed_formats", "register", "register_prefixed", "require_model"]

ExportFn = Callable[[MemoryPlan, "onnx.ModelProto | None"], bytes]
#: a format whose output defines names (C symbols): ``(plan, model, prefix)``, ``prefix`` None for its own names
PrefixedExportFn = Callable[[MemoryPlan, "onnx.ModelProto | None", "str | None"], bytes]
ModelUse = Literal["none", "optional", "required"]


@dataclass(frozen=True, slots=True)
class ExportFormat:
    """One output format.

    ``model``: whether the format reads the model (``--model``). ``beside_model``:
    the output refers to files next to the model (its external weights), so a
    model with external data must have its output written into the model's folder.
    ``prefixed``: the format with a name prefix (``--prefix``) for the names it
    defines; ``None`` for a format that defines no names.
    """

    name: str
    fn: ExportFn
    summary: str
    suffix: str
    model: ModelUse = "none"
    beside_model: bool = False
    prefixed: PrefixedExportFn | None = None


FORMATS: dict[str, ExportFormat] = {}


def register(
    name: str, summary: str, *, suffix: str, model: ModelUse = "none", beside_model: bool = False
) -> Callable[[ExportFn], ExportFn]:
    """Decorator: add a format to :data:`FORMATS` under ``name``."""

    def deco(fn: ExportFn) -> ExportFn:
        _add(ExportFormat(name, fn, summary, suffix, model, beside_model))
        return fn

    return deco


def register_prefixed(
    name: str, summary: str, *, suffix: str, model: ModelUse = "none", beside_model: bool = False
) -> Callable[[PrefixedExportFn], PrefixedExportFn]:
    """Decorator: add a format whose output defines names, which a prefix scopes (``--prefix``)."""

    def deco(fn: PrefixedExportFn) -> PrefixedExportFn:
        def plain(plan: MemoryPlan, model: onnx.ModelProto | None) -> bytes:
            return fn(plan, model, None)

        _add(ExportFormat(name, plain, summary, suffix, model, beside_model, fn))
        return fn

    return deco


def _add(entry: ExportFormat) -> None:
    if entry.name in FORMATS:
        raise ValueError(f"export format {entry.name!r} registered twice")
    FORMATS[entry.name] = entry


def export_plan(plan: MemoryPlan, fmt: str, model: onnx.ModelProto | None = None,
                prefix: str | None = None) -> bytes:
    """The bytes of ``plan`` in format ``fmt``; ``model`` as the format requires; ``prefix``
    for the names a format defines (``None``: its own names).

    Raises ``OnnxmemError`` for an unknown format, a missing model, or a prefix given to a
    format that defines no names.
    """
    if fmt not in FORMATS:
        raise OnnxmemError(
            f"unknown export format '{fmt}'; 'onnxmem list formats' names the "
            f"{len(FORMATS)} formats: {', '.join(FORMATS)}"
        )
    entry = FORMATS[fmt]
    if entry.model == "required":
        require_model(fmt, model)
    model = model if entry.model != "none" else None
    if entry.prefixed is not None:
        return entry.prefixed(plan, model, prefix)
    if prefix is not None:
        raise OnnxmemError(no_prefix(fmt))
    return entry.fn(plan, model)


def prefixed_formats() -> str:
    """The names of the formats that take a name prefix, comma-separated (``none`` if none do)."""
    return ", ".join(name for name, f in FORMATS.items() if f.prefixed is not None) or "none"


def no_prefix(fmt: str) -> str:
    """Why format ``fmt``, which defines no names, takes no ``--prefix``."""
    return f"format '{fmt}' defines no C names; leave --prefix out (it is for: {prefixed_formats()})"


def require_model(fmt: str, model: onnx.ModelProto | None) -> onnx.ModelProto:
    """``model``, or an error saying format ``fmt`` needs it."""
    if model is None:
        raise OnnxmemError(
            f"export format '{fmt}' needs the model the plan was made for; pass --model MODEL"
        )
    return model
