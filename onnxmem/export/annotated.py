"""The ``onnx`` format: the annotated model (:mod:`onnxmem.annotate`).

The model with its nodes named and ordered as in the plan and the plan in
``metadata_props``; checked with ``onnx.checker``. External weights stay where
they are, so the output of a model with external data must be written into the
model's folder (the format is registered ``beside_model``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import OnnxmemError
from ..plan import MemoryPlan
from . import register, require_model

if TYPE_CHECKING:
    import onnx


@register("onnx", "the model with the plan in metadata_props and its nodes in planned order",
          suffix=".onnx", model="required", beside_model=True)
def annotated_model(plan: MemoryPlan, model: onnx.ModelProto | None) -> bytes:
    import onnx  # heavy: only this format needs it

    from ..annotate import annotate_model

    out = annotate_model(require_model("onnx", model), plan)
    try:
        onnx.checker.check_model(out)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise OnnxmemError(f"the annotated model fails onnx.checker: {first}") from None
    return out.SerializeToString()
