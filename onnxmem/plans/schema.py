"""The JSON Schemas of the plan formats (``schema/*.schema.json`` in the package) and their check.

Every format (point, range, program) is validated against its schema before its typed
reader reads it; a miss is a one-line ``PlanError`` naming the field. An integer is a JSON
integer (``1.0`` is not one), and nesting deeper than :data:`MAX_DEPTH` is refused first.
The validator's misses are taken lazily, at most :data:`_ERRORS_SEEN` of them (the first by
field path is named): a file of millions of wrong items costs what one of them costs.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from itertools import islice
from typing import Any

from onnxmem.core.errors import PlanError, show_name

__all__ = ["MAX_DEPTH", "SCHEMAS", "check_schema", "load_schema"]

#: the format name -> its schema file under ``onnxmem/plans/schema``
SCHEMAS = {"plan": "plan.schema.json", "range": "range.schema.json", "program": "program.schema.json"}
#: deepest nesting of arrays and objects a plan may have
MAX_DEPTH = 64
#: characters of a schema message shown
_MESSAGE_LIMIT = 300
#: the validator's misses looked at to name the first by field path (the rest are not made)
_ERRORS_SEEN = 64


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


#: the types of parsed JSON that hold other values
_CONTAINERS = frozenset((dict, list))


def _check_depth(data: Any, where: str) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` (walked without recursion; only arrays and
    objects are stacked, so an array of millions of numbers costs no memory here)."""
    stack = [(data, 1)] if isinstance(data, (dict, list)) else []
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise PlanError(f"{where} nests arrays or objects more than {MAX_DEPTH} deep; it is not a plan")
        items = value.values() if isinstance(value, dict) else value
        if _CONTAINERS.isdisjoint(map(type, items)):  # numbers and strings alone: nothing deeper
            continue
        stack.extend((v, depth + 1) for v in items if type(v) in _CONTAINERS)


#: the JSON name of a parsed value's type
_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def check_schema(data: Any, name: str = "plan", where: str = "plan") -> None:
    """Raise ``PlanError`` when ``data`` does not follow the schema of format ``name``."""
    _check_depth(data, where)
    if not isinstance(data, dict):
        raise PlanError(f"{where}: field '(top level)': a JSON {_JSON_TYPES.get(type(data), 'value')} is not "
                        "a plan, which is a JSON object; give the JSON plan that 'onnxmem plan -o' wrote")
    seen = islice(_validator(name).iter_errors(data), _ERRORS_SEEN)
    errors = sorted(seen, key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = errors[0]
        path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        message = " ".join(e.message[:2 * _MESSAGE_LIMIT].split())
        if len(message) > _MESSAGE_LIMIT:
            message = message[:_MESSAGE_LIMIT] + " ..."
        raise PlanError(f"{where}: field {show_name(path)}: {message}")
