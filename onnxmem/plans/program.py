"""The program plan: several models' plans in one arena, a record and its JSON form.

A program (made by :func:`onnxmem.planning.program.plan_program`) runs its models one at a
time in one arena: a training step and its eval step, or a pipeline whose models hand
tensors on (**handovers**).

**The file** (:func:`render_program`, :func:`program_from_dict`): one JSON object
``{"schema_version": 1, "program": {"mode", "arena_size", "lower_bound", "handovers":
[{"name", "from"}], "solver": {"name", "status"}, "plans": [...]}}`` (its JSON Schema:
``schema/program.schema.json``), each of ``plans`` a plan as :mod:`onnxmem.plans.point`
writes it (read back by its reader) whose ``extra.program`` says its place. ``mode`` is
``one-at-a-time`` (no handovers) or ``pipeline``. Its joint proof is
:func:`onnxmem.proof.program.prove_program`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onnxmem.core.errors import PlanError, show_name
from onnxmem.plans.jsontext import dumps
from onnxmem.plans.point import MAX_VALUE, MemoryPlan, plan_from_dict
from onnxmem.plans.schema import check_schema as check_format

__all__ = ["MAX_MODELS", "MODES", "PROGRAM_SCHEMA_VERSION", "Program", "is_program_data", "program_from_dict",
           "program_to_dict", "render_program"]

#: the version of the program plan file (its own; each member plan keeps plan.py's)
PROGRAM_SCHEMA_VERSION = 1
#: how the models of a program run: one at a time (nothing crosses), or a pipeline (handovers)
MODES = ("one-at-a-time", "pipeline")
#: most models one program plan may hold
MAX_MODELS = 64


@dataclass(frozen=True, slots=True)
class Program:
    """The models' plans in one arena of ``arena_size`` bytes, in run order.

    ``handovers``: ``{name: model index that writes it}`` for each tensor handed to the
    next model; ``lower_bound``: the joint problem's bound.
    """

    plans: tuple[MemoryPlan, ...]
    arena_size: int
    lower_bound: int
    handovers: Mapping[str, int]
    solver: str
    status: str

    @property
    def mode(self) -> str:
        """``pipeline`` when a tensor passes from one model to the next, else ``one-at-a-time``."""
        return MODES[1] if self.handovers else MODES[0]


def program_to_dict(program: Program) -> dict[str, Any]:
    """The program plan's JSON object (the module doc)."""
    return {
        "schema_version": PROGRAM_SCHEMA_VERSION,
        "program": {
            "mode": program.mode,
            "arena_size": program.arena_size,
            "lower_bound": program.lower_bound,
            "handovers": [{"name": n, "from": k} for n, k in sorted(program.handovers.items())],
            "solver": {"name": program.solver, "status": program.status},
            "plans": [p.to_dict() for p in program.plans],
        },
    }


def render_program(program: Program) -> bytes:
    """The program plan's JSON bytes (its member plans follow the plan schema by construction;
    the tests check it)."""
    return (dumps(program_to_dict(program)) + "\n").encode("utf-8")


def is_program_data(data: Any) -> bool:
    """Whether parsed plan JSON is a program plan (it has a ``program`` object)."""
    return isinstance(data, dict) and isinstance(data.get("program"), dict)


def _field(obj: Any, key: str, kind: type | tuple[type, ...], where: str, path: str) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        name = kind.__name__ if isinstance(kind, type) else " or ".join(t.__name__ for t in kind)
        raise PlanError(f"{where}: field {show_name(path + key)} is missing or not a JSON {name}; give the "
                        "program plan that 'onnxmem plan A.onnx B.onnx -o' wrote")
    if isinstance(value, int) and not 0 <= value < MAX_VALUE:
        raise PlanError(f"{where}: field {show_name(path + key)} is {value:,}, not in [0, 2^62); re-plan the models")
    if isinstance(value, str) and len(value) > 4096:
        raise PlanError(f"{where}: field {show_name(path + key)} is longer than 4096 characters; re-plan the models")
    return value


def _keys(obj: dict[str, Any], want: set[str], where: str, path: str) -> None:
    if set(obj) != want:
        odd = sorted(set(obj) ^ want)[0]
        raise PlanError(f"{where}: {path or 'the top level'} has {'an unknown' if odd in obj else 'no'} field "
                        f"{show_name(odd)}; give the program plan that 'onnxmem plan A.onnx B.onnx -o' wrote")


def program_from_dict(data: Any, where: str = "program plan") -> Program:
    """The program plan in ``data`` (parsed JSON, hostile): every field checked, each member by
    :func:`onnxmem.plans.point.plan_from_dict`; raises ``PlanError`` with one line."""
    if not is_program_data(data):
        raise PlanError(f"{where} is a plan for one model, not a program plan; verify it with its one model, "
                        "or plan several with 'onnxmem plan A.onnx B.onnx -o PLAN'")
    _keys(data, {"schema_version", "program"}, where, "")
    if _field(data, "schema_version", int, where, "") != PROGRAM_SCHEMA_VERSION:
        raise PlanError(f"{where} has program schema_version {data['schema_version']}; this onnxmem reads version "
                        f"{PROGRAM_SCHEMA_VERSION}: re-plan the models")
    prog = data["program"]
    _keys(prog, {"mode", "arena_size", "lower_bound", "handovers", "solver", "plans"}, where, "program")
    mode = _field(prog, "mode", str, where, "program/")
    if mode not in MODES:
        raise PlanError(f"{where}: field program/mode is {show_name(mode)}, not one of {', '.join(MODES)}; "
                        "re-plan the models")
    arena = _field(prog, "arena_size", int, where, "program/")
    bound = _field(prog, "lower_bound", int, where, "program/")
    if bound > arena:
        raise PlanError(f"{where}: lower_bound {bound:,} is above arena_size {arena:,}; re-plan the models")
    solver = _field(prog, "solver", dict, where, "program/")
    _keys(solver, {"name", "status"}, where, "program/solver")
    members = _field(prog, "plans", list, where, "program/")
    if not 2 <= len(members) <= MAX_MODELS:
        raise PlanError(f"{where} holds {len(members)} plans; a program plan holds 2 to {MAX_MODELS}: "
                        "re-plan the models")
    plans = tuple(plan_from_dict(m, f"{where}: plan {k}") for k, m in enumerate(members))
    handed: dict[str, int] = {}
    planned = [{t.name for t in p.tensors if not t.graph} for p in plans]  # each model's main-graph tensors
    for i, h in enumerate(_field(prog, "handovers", list, where, "program/")):
        at = f"program/handovers/{i}/"
        _keys(h if isinstance(h, dict) else {}, {"name", "from"}, where, at[:-1])
        name, k = _field(h, "name", str, where, at), _field(h, "from", int, where, at)
        if name in handed or k > len(plans) - 2:
            raise PlanError(f"{where}: handover {show_name(name)} is listed twice or passes from model {k}, which "
                            "has no next model; re-plan the models")
        if not all(name in names for names in planned[k:k + 2]):
            raise PlanError(f"{where}: handover {show_name(name)} is not planned in models {k} and {k + 1}; "
                            "re-plan the models")
        handed[name] = k
    if (mode == MODES[1]) != bool(handed):
        raise PlanError(f"{where}: mode {mode} with {len(handed)} handovers; a pipeline hands tensors over and "
                        "models one at a time do not: re-plan the models")
    for k, p in enumerate(plans):
        place = p.extra.get("program")
        if not isinstance(place, dict) or place.get("index") != k or place.get("models") != len(plans):
            raise PlanError(f"{where}: plan {k} does not say it is model {k} of {len(plans)} (extra/program); "
                            "re-plan the models")
    check_format(data, "program", where)  # what the checks above leave: no field beyond the schema's
    return Program(plans, arena, bound, handed, _field(solver, "name", str, where, "program/solver/"),
                   _field(solver, "status", str, where, "program/solver/"))

