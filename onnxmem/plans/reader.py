"""The one reader of plan files: a point plan, a range plan or a program plan.

:func:`read_plan` reads a file once (a regular file of at most ``MAX_PLAN_BYTES``, strict
JSON), tells its kind by its top-level object (``range``: a range plan, ``program``: a
program plan, else a plan for one shape), checks it against that kind's JSON Schema and
returns the kind's record. Given ``kind``, a file of another kind is a one-line
``PlanError`` that says what to do instead.
"""

from __future__ import annotations

import os
from typing import Any, Literal, overload

from onnxmem.core.errors import PlanError
from onnxmem.plans.point import MemoryPlan, plan_from_dict, read_plan_data
from onnxmem.plans.program import Program, is_program_data, program_from_dict
from onnxmem.plans.range import RangePlan, is_range_data, range_from_dict

__all__ = ["AnyPlan", "PlanKind", "plan_from_data", "plan_kind", "read_plan"]

#: a plan of any kind
AnyPlan = MemoryPlan | RangePlan | Program
#: the kinds of plan file
PlanKind = Literal["point", "range", "program"]

_MAKE = {
    "range": "a range plan; make one with 'onnxmem plan MODEL --dim NAME=LO:HI -o PLAN'",
    "program": ("a program plan; verify a plan for one model with its one model, or plan several models "
                "together ('onnxmem plan A.onnx B.onnx -o PLAN')"),
}
_IS = {"point": "a plan for one shape", "range": "a range plan", "program": "a program plan of several models"}


def plan_kind(data: Any) -> PlanKind:
    """The kind of parsed plan JSON, by its top-level object."""
    if is_range_data(data):
        return "range"
    if is_program_data(data):
        return "program"
    return "point"


@overload
def plan_from_data(data: Any, where: str, kind: Literal["point"]) -> MemoryPlan: ...
@overload
def plan_from_data(data: Any, where: str, kind: Literal["range"]) -> RangePlan: ...
@overload
def plan_from_data(data: Any, where: str, kind: Literal["program"]) -> Program: ...
@overload
def plan_from_data(data: Any, where: str, kind: PlanKind | None = None) -> AnyPlan: ...


def plan_from_data(data: Any, where: str, kind: PlanKind | None = None) -> AnyPlan:
    """The plan in parsed JSON ``data``, checked (``where`` names it in errors); with ``kind``,
    only a plan of that kind."""
    found = plan_kind(data)
    if kind == "point" or (kind is None and found == "point"):
        return plan_from_dict(data, where)  # it says what to do with a range or program plan
    if kind is not None and found != kind:
        raise PlanError(f"{where} is {_IS[found]}, not {_MAKE[kind]}")
    if found == "range":
        return range_from_dict(data, where)
    return program_from_dict(data, where)


@overload
def read_plan(path: str | os.PathLike[str], kind: Literal["point"]) -> MemoryPlan: ...
@overload
def read_plan(path: str | os.PathLike[str], kind: Literal["range"]) -> RangePlan: ...
@overload
def read_plan(path: str | os.PathLike[str], kind: Literal["program"]) -> Program: ...
@overload
def read_plan(path: str | os.PathLike[str], kind: None = None) -> AnyPlan: ...


def read_plan(path: str | os.PathLike[str], kind: PlanKind | None = None) -> AnyPlan:
    """The plan file at ``path``, of any kind (or only of ``kind``), checked; see the module doc."""
    data, where = read_plan_data(path)
    return plan_from_data(data, where, kind)
