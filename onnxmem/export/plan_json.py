"""The ``json`` format: the plan JSON, byte for byte what ``onnxmem plan -o`` writes.

The serialisation is :meth:`MemoryPlan.to_json`; the plan is checked against
the package's JSON Schema first, as :func:`onnxmem.plans.point.write_plan` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.export.registry import register
from onnxmem.plans.point import MemoryPlan, check_schema

if TYPE_CHECKING:
    import onnx


@register("json", "the plan JSON (schema_version, every tensor's offset, size and steps)",
          suffix=".json")
def plan_json(plan: MemoryPlan, model: onnx.ModelProto | None) -> bytes:
    check_schema(plan.to_dict())
    return plan.to_json().encode("utf-8")
