"""The ``onnx`` format: the annotated model (:func:`onnxmem.export.annotate.annotate_model`).

The model with its nodes named and ordered as in the plan and the plan in
``metadata_props``; the plan must name exactly the model's nodes. External
weights stay where they are, so the output of a model with external data must
be written into the model's folder (the format is registered ``beside_model``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.export.registry import register, require_model
from onnxmem.plans.point import MemoryPlan

if TYPE_CHECKING:
    import onnx


@register("onnx", "the model with the plan in metadata_props and its nodes in planned order",
          suffix=".onnx", model="required", beside_model=True)
def annotated_model(plan: MemoryPlan, model: onnx.ModelProto | None) -> bytes:
    from onnxmem.export.annotate import annotate_model  # onnx: only this format needs it

    return bytes(annotate_model(require_model("onnx", model), plan).SerializeToString())
