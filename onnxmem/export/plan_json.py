"""The ``json`` format: the plan JSON, byte for byte what ``onnxmem plan -o`` writes.

The serialisation is :func:`onnxmem.plans.point.render_plan`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.export.registry import register
from onnxmem.plans.point import MemoryPlan, render_plan

if TYPE_CHECKING:
    import onnx


@register("json", "the plan JSON (schema_version, every tensor's offset, size and steps)",
          suffix=".json")
def plan_json(plan: MemoryPlan, model: onnx.ModelProto | None) -> bytes:
    return render_plan(plan)
