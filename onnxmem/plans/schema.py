"""The JSON Schemas of the plan formats (``schema/*.schema.json`` in the package) and their check.

Every format (point, range, program) is validated against its schema before its typed
reader reads it; a miss is a one-line ``PlanError`` naming the field. An integer is a JSON
integer (``1.0`` is not one), and nesting deeper than :data:`MAX_DEPTH` is refused first.
The validator's misses are taken lazily, at most :data:`_ERRORS_SEEN` of them (the first by
field path is named): a file of millions of wrong items costs what one of them costs.

A valid plan is passed by a compiled check first (:func:`_fast_check`: fastjsonschema turns the
schema into Python code once per process): jsonschema walks each of a plan's values through
its generic validator, 9 s for the 31 MB plan of a 100,000-node graph, where the compiled check
takes 0.3 s. The compiled check only says "valid"; a plan it refuses is checked again by
jsonschema, which names the miss, so a refused plan's message is the same either way.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from itertools import islice
from typing import Any, Callable

from onnxmem.core.errors import PlanError, show_name

__all__ = ["MAX_DEPTH", "SCHEMAS", "check_schema", "fast_item_check", "load_schema"]

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


#: the keywords that mean in JSON Schema draft 4 what they mean in the schemas' draft, 2020-12,
#: where :func:`_draft4` leaves them as they are (``const`` it rewrites; ``items`` must be a schema)
_DRAFT4_ALIKE = frozenset({
    "$schema", "$id", "title", "description", "type", "properties", "required", "additionalProperties",
    "items", "minimum", "maximum", "pattern", "enum", "const", "minLength", "maxLength", "minItems",
    "maxItems", "minProperties", "maxProperties",
})
#: the keywords whose value is one schema, and those whose value maps names to schemas
_SUBSCHEMA = frozenset({"items", "additionalProperties"})
_SUBSCHEMAS = frozenset({"properties"})


def _draft4(schema: Any) -> Any:
    """``schema`` (2020-12) as a draft-4 schema that accepts no instance the original refuses, or
    ``None`` where it uses a keyword draft 4 reads otherwise or lacks (then jsonschema alone checks).

    Draft 4, because its ``integer`` is an int and never ``1.0`` (drafts 6 and 7 take ``1.0``), as
    :func:`_strict_integer` wants; an ``enum`` or ``const`` only of strings or integers, the integers
    typed ``integer`` (draft 4 compares an enum with ``==``, under which ``True == 1 == 1.0``)."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict) or not _DRAFT4_ALIKE.issuperset(schema):
        return None
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("$schema", "$id", "title", "description"):
            continue
        if key in _SUBSCHEMA:
            if key == "items" and not isinstance(value, dict):
                return None
            value = _draft4(value)
        elif key in _SUBSCHEMAS:
            value = {k: _draft4(v) for k, v in value.items()}
            if any(v is None for v in value.values()):
                return None
        elif key in ("enum", "const"):
            values = value if key == "enum" else [value]
            if not all(isinstance(v, str) or type(v) is int for v in values):
                return None
            if any(type(v) is int for v in values):
                if schema.get("type", "integer") != "integer":
                    return None
                out["type"] = "integer"
            key, value = "enum", values
        if value is None:
            return None
        out[key] = value
    return out


@cache
def _fast_check(name: str) -> Callable[[Any], Any] | None:
    """The schema of format ``name`` compiled into Python by fastjsonschema (as :func:`_draft4`
    gives it), or ``None`` where that schema has no draft-4 form. It raises on any plan it does
    not find valid; it may refuse one jsonschema passes (a pattern's ``$`` before a final newline),
    never the other way (``tests/test_plan_schema_fast.py``)."""
    return _compiled(_draft4(load_schema(name)))


@cache
def fast_item_check(name: str, key: str) -> Callable[[Any], Any] | None:
    """The compiled check (as :func:`_fast_check`) of one element of the array that the top-level
    field ``key`` of format ``name`` holds, or ``None``: for a reader that checks each element as
    it is parsed and the rest of the file with that field empty. It raises on an element it does
    not find valid; jsonschema's check of the whole file then names the miss."""
    return _compiled(_draft4(load_schema(name)["properties"][key]["items"]))


def _compiled(schema: dict[str, Any] | None) -> Callable[[Any], Any] | None:
    """A draft-4 ``schema`` compiled by fastjsonschema; ``None`` for ``None`` or without it."""
    if schema is None:
        return None
    try:
        import fastjsonschema
    except ImportError:  # an install that predates the dependency: jsonschema alone, as before
        return None

    schema["$schema"] = "http://json-schema.org/draft-04/schema#"
    return fastjsonschema.compile(schema, use_default=False, use_formats=False)


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
    fast = _fast_check(name)
    if fast is not None:
        try:
            fast(data)
            return
        except Exception:  # noqa: BLE001 - any refusal: jsonschema below names the miss, or passes the plan
            pass
    seen = islice(_validator(name).iter_errors(data), _ERRORS_SEEN)
    errors = sorted(seen, key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = errors[0]
        path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        message = " ".join(e.message[:2 * _MESSAGE_LIMIT].split())
        if len(message) > _MESSAGE_LIMIT:
            message = message[:_MESSAGE_LIMIT] + " ..."
        raise PlanError(f"{where}: field {show_name(path)}: {message}")
