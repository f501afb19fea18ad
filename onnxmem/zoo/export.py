"""Exporting PyTorch modules to zoo models: one ``Entry`` per model, exported at fixed input
shapes (or with some dims symbolic) by the dynamo or the legacy TorchScript exporter.

torch is imported only when a model is built (``import_torch``); ``tools/build_zoo.py``
lists the architectures and calls ``export`` and ``catalog_entry`` for each.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import onnx

from onnxmem.zoo.catalog import describe_model

__all__ = ["MAX_IR_VERSION", "SEED", "Entry", "Export", "catalog_entry", "export", "import_torch"]

SEED = 0
#: onnxruntime 1.31 reads IR version 10 and lower
MAX_IR_VERSION = 10
PRODUCER = "onnxmem tools/build_zoo.py"


@dataclass(frozen=True, slots=True)
class Export:
    """What a builder hands back: the module, example inputs and how to export it."""

    module: Any
    args: tuple[Any, ...]
    input_names: list[str]
    output_names: list[str]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Entry:
    """One zoo model: its name, where the architecture comes from, how to build and export
    it, and the binding suggested for its symbolic dims."""

    name: str
    source: str
    build: Callable[[], Export]
    exporter: str = "dynamo"  # "dynamo" | "legacy"
    dynamic: dict[str, dict[int, str]] | None = None  # input name -> {axis: dim name}
    dims: dict[str, int] = field(default_factory=dict)  # suggested binding
    note: str = ""


def import_torch() -> Any:
    """Import torch and make torchvision importable on a CPU-only torch.

    The torchvision wheel that matches a CPU torch may carry a C extension built for CUDA; its
    import then stops at registering a fake kernel for ``torchvision::nms``, an operator that
    does not exist. Declaring the two schemas first lets the import through; no zoo model uses
    them.
    """
    import torch

    try:
        torch._C._dispatch_has_kernel_for_dispatch_key("torchvision::nms", "Meta")
        declared = True
    except RuntimeError:
        declared = False
    if not declared:
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
        import_torch._lib = lib  # type: ignore[attr-defined]  # keep the library alive
    import torchvision  # noqa: F401

    return torch


def export(entry: Entry, torch: Any) -> onnx.ModelProto:
    """Build ``entry``'s module from the fixed seed and export it (IR version at most 10)."""
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    spec = entry.build()
    module = spec.module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if entry.exporter == "dynamo":
            shapes = None
            if entry.dynamic:
                shapes = {
                    name: {axis: torch.export.Dim.DYNAMIC for axis in axes}
                    for name, axes in entry.dynamic.items()
                }
                shapes = _dynamic_shapes(spec, shapes)
            program = torch.onnx.export(
                module, spec.args, dynamo=True, external_data=False, verbose=False,
                input_names=spec.input_names, output_names=spec.output_names,
                dynamic_shapes=shapes,
            )
            model = program.model_proto
            if entry.dynamic:
                _rename_dims(model, entry.dynamic)
        else:
            import io

            buffer = io.BytesIO()
            torch.onnx.export(
                module, spec.args, buffer, dynamo=False, opset_version=17,
                input_names=spec.input_names, output_names=spec.output_names,
                dynamic_axes=entry.dynamic,
            )
            model = onnx.load_from_string(buffer.getvalue())
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    model.producer_name = PRODUCER
    model.doc_string = f"{entry.name}: {entry.source}, random weights (seed {SEED})"
    return cast(onnx.ModelProto, model)


def _dynamic_shapes(spec: Export, by_name: dict[str, Any]) -> Any:
    """Dynamic shapes in the exporter's positional form: one entry per parameter of
    ``forward``, a tuple for a ``*args`` parameter."""
    import inspect

    flat = [by_name.get(name) for name in spec.input_names[: len(spec.args)]]
    params = list(inspect.signature(spec.module.forward).parameters.values())
    for i, param in enumerate(params):
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            return (*flat[:i], tuple(flat[i:]))
    return tuple(flat)


def _rename_dims(model: onnx.ModelProto, dynamic: dict[str, dict[int, str]]) -> None:
    """Give the exporter's generated dimension names (s0, s1, ...) the names asked for."""
    renames: dict[str, str] = {}
    for value in model.graph.input:
        axes = dynamic.get(value.name, {})
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if axis in axes and dim.dim_param:
                renames.setdefault(dim.dim_param, axes[axis])
    if not renames:
        return

    def fix(values: Any) -> None:
        for value in values:
            if not value.type.HasField("tensor_type"):
                continue
            for dim in value.type.tensor_type.shape.dim:
                if dim.dim_param:
                    for old, new in renames.items():
                        if dim.dim_param == old:
                            dim.dim_param = new
                        elif old in dim.dim_param:
                            dim.dim_param = _replace_symbol(dim.dim_param, old, new)

    fix(model.graph.input)
    fix(model.graph.output)
    fix(model.graph.value_info)


def _replace_symbol(expr: str, old: str, new: str) -> str:
    import re

    return re.sub(rf"\b{re.escape(old)}\b", new, expr)


def catalog_entry(entry: Entry, model: onnx.ModelProto, file: str) -> dict[str, Any]:
    """The catalogue entry of ``entry``'s exported ``model``, saved as ``file``."""
    described = describe_model(model)
    return {
        "name": entry.name,
        "file": file,
        "source": entry.source,
        "exporter": entry.exporter,
        "inputs": described["inputs"],
        "symbolic_dims": described["symbolic_dims"],
        "dims": {k: v for k, v in entry.dims.items() if k in described["symbolic_dims"]},
        "nodes": described["nodes"],
        "weights_bytes": described["weights_bytes"],
        "note": entry.note,
    }
