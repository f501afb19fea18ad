"""Plan formats: records, their JSON forms and JSON Schemas, and the one reader.

* :mod:`onnxmem.plans.point`: the plan for one shape (:class:`MemoryPlan`);
* :mod:`onnxmem.plans.range`: the plan for a box of shapes (:class:`RangePlan`);
* :mod:`onnxmem.plans.program`: several models' plans in one arena (:class:`Program`);
* :mod:`onnxmem.plans.reader`: :func:`read_plan` reads a file of any kind, schema-checked.

The names below load their module on first use, so that importing one format (the CLI
imports :mod:`onnxmem.plans.point` at start-up) does not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxmem.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from onnxmem.plans.point import (
        MAX_VALUE,
        SCHEMA_VERSION,
        MemoryPlan,
        PlannedTensor,
        SharedObject,
        SubgraphPlan,
        check_schema,
        plan_from_dict,
        read_plan_data,
        render_plan,
        write_plan,
    )
    from onnxmem.plans.program import Program, program_from_dict, program_to_dict, render_program
    from onnxmem.plans.range import (
        RangePiece,
        RangePlan,
        RangeTensor,
        instantiate,
        range_from_dict,
        range_to_dict,
        render_range_plan,
        write_range_plan,
    )
    from onnxmem.plans.reader import AnyPlan, PlanKind, plan_from_data, plan_kind, read_plan

__all__ = [
    "MAX_VALUE",
    "SCHEMA_VERSION",
    "AnyPlan",
    "MemoryPlan",
    "PlanKind",
    "PlannedTensor",
    "Program",
    "RangePiece",
    "RangePlan",
    "RangeTensor",
    "SharedObject",
    "SubgraphPlan",
    "check_schema",
    "instantiate",
    "plan_from_data",
    "plan_from_dict",
    "plan_kind",
    "program_from_dict",
    "program_to_dict",
    "range_from_dict",
    "range_to_dict",
    "read_plan",
    "read_plan_data",
    "render_plan",
    "render_program",
    "render_range_plan",
    "write_plan",
    "write_range_plan",
]

_EXPORTS = {
    "AnyPlan": "onnxmem.plans.reader",
    "MAX_VALUE": "onnxmem.plans.point",
    "MemoryPlan": "onnxmem.plans.point",
    "PlanKind": "onnxmem.plans.reader",
    "PlannedTensor": "onnxmem.plans.point",
    "Program": "onnxmem.plans.program",
    "RangePiece": "onnxmem.plans.range",
    "RangePlan": "onnxmem.plans.range",
    "RangeTensor": "onnxmem.plans.range",
    "SCHEMA_VERSION": "onnxmem.plans.point",
    "SharedObject": "onnxmem.plans.point",
    "SubgraphPlan": "onnxmem.plans.point",
    "check_schema": "onnxmem.plans.point",
    "instantiate": "onnxmem.plans.range",
    "plan_from_data": "onnxmem.plans.reader",
    "plan_from_dict": "onnxmem.plans.point",
    "plan_kind": "onnxmem.plans.reader",
    "program_from_dict": "onnxmem.plans.program",
    "program_to_dict": "onnxmem.plans.program",
    "range_from_dict": "onnxmem.plans.range",
    "range_to_dict": "onnxmem.plans.range",
    "read_plan": "onnxmem.plans.reader",
    "read_plan_data": "onnxmem.plans.point",
    "render_plan": "onnxmem.plans.point",
    "render_program": "onnxmem.plans.program",
    "render_range_plan": "onnxmem.plans.range",
    "write_plan": "onnxmem.plans.point",
    "write_range_plan": "onnxmem.plans.range",
}


__getattr__ = lazy_attributes(globals(), _EXPORTS)
