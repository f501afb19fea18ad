"""The JSON Schemas of the plan formats (``schema/*.schema.json`` in the package) and their check.

Every format (point, range, program) is validated against its schema before its typed
reader reads it; a miss is a one-line ``PlanError`` naming the field. An integer is a JSON
integer (``1.0`` is not one), and nesting deeper than :data:`MAX_DEPTH` is refused first.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from onnxmem.core.errors import PlanError, show_name

__all__ = ["MAX_DEPTH", "SCHEMAS", "check_schema", "load_schema"]

#: the format name -> its schema file under ``onnxmem/plans/schema``
SCHEMAS = {"plan": "plan.schema.json", "range": "range.schema.json", "program": "program.schema.json"}
#: deepest nesting of arrays and objects a plan may have
MAX_DEPTH = 64
#: characters of a schema message shown
_MESSAGE_LIMIT = 300


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of format ``name`` (a key of :data:`SCHEMAS`)."""
    text = resources.files("onnxmem.plans").joinpath(f"schema/{SCHEMAS[name]}").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


def _strict_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _validator(name: str) -> Any:
    """The schema's validator, where an integer is a JSON integer (``1.0`` is not one)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", _strict_integer)
    return jsonschema.validators.extend(base, type_checker=checker)(load_schema(name))


def _check_depth(data: Any, where: str) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise PlanError(f"{where} nests arrays or objects more than {MAX_DEPTH} deep; it is not a plan")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def check_schema(data: Any, name: str = "plan", where: str = "plan") -> None:
    """Raise ``PlanError`` when ``data`` does not follow the schema of format ``name``."""
    _check_depth(data, where)
    errors = sorted(_validator(name).iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = errors[0]
        path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        message = " ".join(e.message.split())
        if len(message) > _MESSAGE_LIMIT:
            message = message[:_MESSAGE_LIMIT] + " ..."
        raise PlanError(f"{where}: field {show_name(path)}: {message}")
