"""The memory plan: a record, its JSON form and its schema.

The JSON has a ``schema_version``, a stable key order, and a JSON Schema
(``schema/plan.schema.json`` in the package) that every plan written or read
is validated against. Lifetimes are half-open ``[start, end)`` in steps; step
``k`` executes ``order[k]``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from .errors import PlanError
from .fileio import write_text_atomic

__all__ = [
    "SCHEMA_VERSION",
    "MemoryPlan",
    "PlannedTensor",
    "SharedObject",
    "plan_from_dict",
    "plan_schema",
    "read_plan",
    "write_plan",
]

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class PlannedTensor:
    """One tensor in the arena: bytes ``[offset, offset + size)`` during steps ``[start, end)``.

    ``group`` names the alias group whose bytes it shares (its own name when
    alone); ``object`` is its shared-object index in the shared-objects form;
    ``group_offset`` is its byte offset inside the group's buffer (non-zero
    only for a Concat input placed in its slice of the output), so the
    group's buffer starts at ``offset - group_offset``. The JSON omits
    ``group_offset`` when it is 0 (plans without it read as 0).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    size: int
    offset: int
    start: int
    end: int
    producer: str | None
    producer_op: str | None
    kind: str
    group: str
    object: int | None = None
    group_offset: int = 0


@dataclass(frozen=True, slots=True)
class SharedObject:
    id: int
    size: int
    offset: int


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    model: dict[str, Any]  # path, sha256, ir_version, opset {domain: version}
    dims: dict[str, int]
    input_shapes: dict[str, list[int]]
    order: tuple[str, ...]
    op_types: tuple[str, ...]
    order_strategy: str
    io: str
    alignment: int
    inplace: bool
    form: str  # "offsets" | "shared-objects"
    tensors: tuple[PlannedTensor, ...]
    arena_size: int
    lower_bound: int
    naive_size: int
    weights_size: int
    peak_step: int
    solver: dict[str, Any]  # name, status, seconds, params
    plan_seconds: float
    objects: tuple[SharedObject, ...] = ()
    warnings: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gap(self) -> float:
        """Arena over the lower bound, minus one (0.0 means at the bound)."""
        return self.arena_size / self.lower_bound - 1.0 if self.lower_bound else 0.0

    def tensor(self, name: str) -> PlannedTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema_version": self.schema_version,
            "model": self.model,
            "dims": self.dims,
            "input_shapes": self.input_shapes,
            "order": list(self.order),
            "op_types": list(self.op_types),
            "order_strategy": self.order_strategy,
            "io": self.io,
            "alignment": self.alignment,
            "inplace": self.inplace,
            "form": self.form,
            "arena_size": self.arena_size,
            "lower_bound": self.lower_bound,
            "naive_size": self.naive_size,
            "weights_size": self.weights_size,
            "peak_step": self.peak_step,
            "solver": self.solver,
            "plan_seconds": self.plan_seconds,
            "warnings": list(self.warnings),
            "tensors": [
                {k: (list(v) if k == "shape" else v) for k, v in asdict(t).items()
                 if k != "group_offset" or v}
                for t in self.tensors
            ],
        }
        if self.form == "shared-objects":
            d["objects"] = [asdict(o) for o in self.objects]
        if self.extra:
            d["extra"] = self.extra
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"


@lru_cache(maxsize=1)
def plan_schema() -> dict[str, Any]:
    text = resources.files("onnxmem").joinpath("schema/plan.schema.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


def check_schema(data: Any, where: str = "plan") -> None:
    """Raise ``PlanError`` when ``data`` does not follow the plan schema."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(plan_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise PlanError(f"{where}: field {path}: {e.message}")


def plan_from_dict(data: dict[str, Any], where: str = "plan") -> MemoryPlan:
    check_schema(data, where)
    if data["schema_version"] != SCHEMA_VERSION:
        raise PlanError(
            f"{where} has schema_version {data['schema_version']}; this onnxmem reads "
            f"version {SCHEMA_VERSION}: re-plan the model"
        )
    tensors = tuple(
        PlannedTensor(**{**t, "shape": tuple(t["shape"])}) for t in data["tensors"]
    )
    objects = tuple(SharedObject(**o) for o in data.get("objects", []))
    return MemoryPlan(
        model=data["model"],
        dims=data["dims"],
        input_shapes=data["input_shapes"],
        order=tuple(data["order"]),
        op_types=tuple(data["op_types"]),
        order_strategy=data["order_strategy"],
        io=data["io"],
        alignment=data["alignment"],
        inplace=data["inplace"],
        form=data["form"],
        tensors=tensors,
        arena_size=data["arena_size"],
        lower_bound=data["lower_bound"],
        naive_size=data["naive_size"],
        weights_size=data["weights_size"],
        peak_step=data["peak_step"],
        solver=data["solver"],
        plan_seconds=data["plan_seconds"],
        objects=objects,
        warnings=tuple(data.get("warnings", ())),
        schema_version=data["schema_version"],
        extra=data.get("extra", {}),
    )


def read_plan(path: str | os.PathLike[str]) -> MemoryPlan:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise PlanError(f"plan file '{path}' does not exist; run 'onnxmem plan' first") from None
    except OSError as exc:
        raise PlanError(f"cannot read plan file '{path}': {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"plan file '{path}' is not JSON (line {exc.lineno}: {exc.msg})") from None
    return plan_from_dict(data, f"plan file '{path}'")


def write_plan(plan: MemoryPlan, path: str | os.PathLike[str]) -> None:
    """Write the plan as JSON, atomically, after checking it against the schema."""
    data = plan.to_dict()
    check_schema(data)
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
