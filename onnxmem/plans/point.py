"""The memory plan: a record, its JSON form and its schema.

The JSON has a ``schema_version``, a stable key order, and a JSON Schema
(``schema/plan.schema.json`` in the package) that every plan read is validated
against; a plan written follows it by construction (the record's types, and
:meth:`MemoryPlan.to_dict`; the tests validate the plans they write). Lifetimes are half-open ``[start, end)`` in steps; step
``k`` executes ``order[k]``.

Version 2 plans every graph level (:mod:`onnxmem.planning.bodies`): each tensor names
its (sub)graph in ``graph`` (``""`` for the main graph, ``If_0/then_branch``,
``Loop_3/body/If_1/else_branch``; node names with ``%`` and ``/`` escaped as
``%25`` and ``%2F``), and its steps are those of its graph's order (the
``subgraphs`` entry of that path). ``outside`` lists every value kept out of
the arena with its reason (:data:`OUTSIDE_REASONS`), so that every node output
of every level is in exactly one of ``tensors`` and ``outside``. Version 1
plans (main graph only) are still read.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields
from json.encoder import encode_basestring_ascii
from operator import attrgetter
from typing import Any, BinaryIO, Callable

from onnxmem.core.errors import PlanError, show_name
from onnxmem.core.fileio import (
    JSON_MAX_DIGITS,
    MAX_PLAN_BYTES,
    loads_json,
    loads_json_streamed,
    read_input,
    write_stream_atomic,
)
from onnxmem.core.records import record
from onnxmem.plans.jsontext import dump, dumps, flat, register
from onnxmem.plans.schema import check_schema as check_format
from onnxmem.plans.schema import fast_item_check, load_schema

__all__ = [
    "OUTSIDE_REASONS",
    "READABLE_VERSIONS",
    "SCHEMA_VERSION",
    "MemoryPlan",
    "OutsideValue",
    "SubgraphPlan",
    "PlannedTensor",
    "SharedObject",
    "plan_from_dict",
    "parse_plan_json",
    "plan_schema",
    "check_schema",
    "read_plan_data",
    "render_plan",
    "write_plan",
]

SCHEMA_VERSION = 2
#: the schema versions :func:`plan_from_dict` reads
READABLE_VERSIONS = (1, 2)

#: why a value is kept out of the arena (the ``reason`` of an ``outside`` entry): an
#: open set, documented here and only here; a new reason is one more entry
OUTSIDE_REASONS: dict[str, str] = {
    "weight": "an initializer, or a constant computed from weights only (Constant, ConstantOfShape, "
              "views of weights); counted in weights_size",
    "external-io": "a graph input or output left to the runtime (--io external)",
    "runtime-body": "a value of a subgraph onnxmem does not plan (a node other than If, Loop and Scan "
                    "with a subgraph): onnxruntime allocates it",
    "excluded-branch": "a value of an If branch left out of the plan (--branch, or a condition the given input "
                       "values, constants or shapes decide): runs are assumed to take the other branch, and verify "
                       "refuses a run that takes this one",
    "owner-output": "an If branch's output written straight into the If's output (a tensor of the "
                    "parent graph), so it needs no bytes of its own",
    "folded": "a node's output computed once from weights before the run, as onnxruntime's constant "
              "folding does at session start (--fold on); counted in weights_size",
    "parameter": "a training graph's trainable parameter, a graph input the caller owns",
    "frozen-parameter": "a training graph's frozen parameter, a graph input the caller owns",
    "gradient-accumulation-buffer": "a training graph's gradient buffer, which the accumulators write in "
                                    "place; a graph input the caller owns",
    "flag": "a training graph's scalar flag input (the accumulators' reset), owned by the caller",
}


@record
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
    graph: str = ""  # the (sub)graph path; "" is the main graph


@record
class OutsideValue:
    """A value kept out of the arena: ``name`` in graph ``graph``, for ``reason``
    (a key of :data:`OUTSIDE_REASONS`)."""

    name: str
    graph: str
    reason: str


@dataclass(frozen=True, slots=True)
class SubgraphPlan:
    """One planned body: its ``path``, the ``parent`` graph's path, the ``owner`` node
    (a node of the parent) and its ``attr``, ``kind`` (``if``, ``loop``, ``scan``), the
    body's node ``order`` and ``op_types``, its own ``arena_size`` (the bytes it needs
    inside its owner's region) and ``lower_bound``, its ``solver`` result, and where its
    outputs live: ``region`` (in its arena, copied out after), ``owner`` (an If
    branch writing straight into the If's outputs, planned beside its region) or
    ``inside`` (an If branch writing its outputs in its arena, where the If's outputs
    sit: inside the region, at the same offsets in every branch; a Loop or Scan body whose
    carried or state outputs, in its arena, are its owner's outputs after the last
    iteration, which sit there)."""

    path: str
    parent: str
    owner: str
    attr: str
    kind: str
    order: tuple[str, ...]
    op_types: tuple[str, ...]
    arena_size: int
    lower_bound: int
    solver: dict[str, Any]
    outputs: str = "region"  # "owner"/"inside": a body whose outputs are its owner's own outputs


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
    subgraphs: tuple[SubgraphPlan, ...] = ()
    outside: tuple[OutsideValue, ...] = ()

    @property
    def gap(self) -> float:
        """Arena over the lower bound, minus one (0.0 means at the bound)."""
        return self.arena_size / self.lower_bound - 1.0 if self.lower_bound else 0.0

    def tensor(self, name: str, graph: str = "") -> PlannedTensor:
        for t in self.tensors:
            if t.name == name and t.graph == graph:
                return t
        raise KeyError(name)

    def subgraph(self, path: str) -> SubgraphPlan:
        for s in self.subgraphs:
            if s.path == path:
                return s
        raise KeyError(path)

    def to_dict(self) -> dict[str, Any]:
        return self._fields(stream=False)

    def _fields(self, *, stream: bool) -> dict[str, Any]:
        """The JSON object; with ``stream``, ``tensors`` is a generator of its records (for
        :func:`render_plan`, which writes them one at a time instead of holding them all)."""
        version = self.schema_version
        # streamed: each record written from its fields (_tensor_json), never made a dict
        tensors = ((t for t in self.tensors) if stream and version >= 2
                   else (_tensor_record(t, version) for t in self.tensors))
        d = {
            "schema_version": version,
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
            "tensors": tensors if stream else list(tensors),
        }
        if self.form == "shared-objects":
            d["objects"] = [_record(o) for o in self.objects]
        if version >= 2:
            d["subgraphs"] = [{**_record(s), "order": list(s.order), "op_types": list(s.op_types)}
                              for s in self.subgraphs]
            d["outside"] = [_record(o) for o in self.outside]
        if self.extra:
            d["extra"] = self.extra
        return d

    def to_json(self) -> str:
        """The plan's JSON text (what :func:`render_plan` writes)."""
        return dumps(self._fields(stream=True)) + "\n"

    def write_json(self, fh: BinaryIO) -> None:
        """Write the plan's JSON bytes (:meth:`to_json`, as UTF-8) into the binary file ``fh`` as
        they are made: the 38 MB text of a 100,000-node plan is never held whole."""
        dump(self._fields(stream=True), fh)
        fh.write(b"\n")


_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in (PlannedTensor, OutsideValue, SubgraphPlan, SharedObject)
}


def _record(value: Any) -> dict[str, Any]:
    """A record's fields in declaration order (``dataclasses.asdict`` without its deep copy)."""
    names = _FIELDS[type(value)]
    return dict(zip(names, attrgetter(*names)(value)))


def _tensor_record(t: PlannedTensor, version: int) -> dict[str, Any]:
    """A tensor's JSON object: ``group_offset`` only when non-zero, ``graph`` from version 2."""
    d = _record(t)
    d["shape"] = list(t.shape)
    if not t.group_offset:
        del d["group_offset"]
    if version < 2:
        del d["graph"]
    return d


#: the text of a tensor's record with ``%s`` for each value, by its indent and whether it has a
#: ``group_offset`` (:func:`_tensor_json`)
_TENSOR_FORMATS: dict[tuple[str, bool], str] = {}
#: the JSON text of a shape tuple at an indent, by the tuple's identity (a plan's tensors share
#: one tuple per distinct shape, ``ShapeInfo``'s): ``(the tuple, indent, text)``, the tuple kept so
#: that its identity is not reused; by identity, not equality, since ``(True,) == (1,)``
_SHAPE_TEXTS: dict[int, tuple[tuple[int, ...], str, str]] = {}
_MAX_SHAPE_TEXTS = 4096
_TENSOR_KEYS = tuple(f.name for f in fields(PlannedTensor))


def _tensor_json(t: PlannedTensor, pad: str) -> str | dict[str, Any]:
    """The JSON text of a version-2 tensor record at indent ``pad``, as ``json.dumps(indent=1)``
    writes :func:`_tensor_record`'s dict there, in one formatting of its fields; that dict where a
    field is not of its declared type (``jsontext`` writes it, or refuses it, as ``json.dumps``)."""
    name, dtype, shape, size, offset, start, end, producer, op, kind, group, obj, at, graph = (
        t.name, t.dtype, t.shape, t.size, t.offset, t.start, t.end, t.producer, t.producer_op, t.kind, t.group,
        t.object, t.group_offset, t.graph)
    inner = pad + " "
    known = _SHAPE_TEXTS.get(id(shape))
    if known is not None and known[0] is shape and known[1] == inner:
        shape_text: str | None = known[2]  # this very tuple, written before at this indent
    else:
        shape_text = "[]" if type(shape) is tuple and not shape else flat(shape, inner + " ")
        if shape_text is not None and type(shape) is tuple and len(_SHAPE_TEXTS) < _MAX_SHAPE_TEXTS:
            _SHAPE_TEXTS[id(shape)] = (shape, inner, shape_text)
    if (shape_text is None or type(shape) is not tuple
            or not (type(size) is int and type(offset) is int and type(start) is int and type(end) is int
                    and type(at) is int and (obj is None or type(obj) is int))
            or not (type(name) is str and type(dtype) is str and type(kind) is str and type(group) is str
                    and type(graph) is str and (producer is None or type(producer) is str)
                    and (op is None or type(op) is str))):
        return _tensor_record(t, 2)
    written = at != 0
    form = _TENSOR_FORMATS.get((pad, written))
    if form is None:
        keys = [k for k in _TENSOR_KEYS if written or k != "group_offset"]
        form = "{" + ",".join(inner + encode_basestring_ascii(k).replace("%", "%%") + ": %s" for k in keys) + pad + "}"
        _TENSOR_FORMATS[(pad, written)] = form
    e = encode_basestring_ascii
    values = (e(name), e(dtype), shape_text, size, offset, start, end, "null" if producer is None else e(producer),
              "null" if op is None else e(op), e(kind), e(group), "null" if obj is None else obj)
    return form % ((*values, at, e(graph)) if written else (*values, e(graph)))


register(PlannedTensor, _tensor_json)


def plan_schema() -> dict[str, Any]:
    """The point plan's JSON Schema (``schema/plan.schema.json``)."""
    return load_schema("plan")


#: every byte count, offset and dim of a plan stays below this, so sums of them fit in int64
MAX_VALUE = 2**62


def check_schema(data: Any, where: str = "plan") -> None:
    """Raise ``PlanError`` when ``data`` does not follow the point plan schema."""
    check_format(data, "plan", where)


def _check_ranges(data: dict[str, Any], tensors: tuple[PlannedTensor, ...], where: str) -> None:
    """Bounds the schema cannot state: byte counts below ``MAX_VALUE``, steps inside the order
    (``tensors``: the records of ``data``'s tensors)."""

    def bounded(value: int, field: str) -> None:
        if value >= MAX_VALUE:
            raise PlanError(f"{where}: field {show_name(field)} is {value:,}, not below 2^62; it is not a "
                            "plan onnxmem wrote: re-plan the model")

    for key in ("arena_size", "lower_bound", "naive_size", "weights_size", "alignment", "peak_step"):
        bounded(data[key], key)
    for name, value in data["dims"].items():
        bounded(value, f"dims/{name}")
    for name, shape in data["input_shapes"].items():
        for axis, d in enumerate(shape):
            bounded(d, f"input_shapes/{name}/{axis}")
    for key in ("plan_seconds",):
        if not math.isfinite(data[key]):
            raise PlanError(f"{where}: field {key} is not a finite number; re-plan the model")
    if not math.isfinite(data["solver"]["seconds"]):
        raise PlanError(f"{where}: field solver/seconds is not a finite number; re-plan the model")
    steps = len(data["order"])
    if len(data["op_types"]) != steps:
        raise PlanError(f"{where}: {len(data['op_types'])} op_types for {steps} nodes in order; "
                        "re-plan the model")
    graph_steps = {"": steps}
    for s in data.get("subgraphs", []):
        if s["path"] in graph_steps or not s["path"]:
            raise PlanError(f"{where}: subgraph {show_name(s['path'])} is listed twice or has an empty path; "
                            "re-plan the model")
        if len(s["op_types"]) != len(s["order"]):
            raise PlanError(f"{where}: subgraph {show_name(s['path'])} has {len(s['op_types'])} op_types for "
                            f"{len(s['order'])} nodes in order; re-plan the model")
        for key in ("arena_size", "lower_bound"):
            bounded(s[key], f"subgraphs/{s['path']}/{key}")
        graph_steps[s["path"]] = len(s["order"])
    if data["peak_step"] > max(steps - 1, 0):
        raise PlanError(f"{where}: peak_step {data['peak_step']} is past the last of {steps} steps; "
                        "re-plan the model")
    for i, t in enumerate(() if _tensors_in_range(tensors, graph_steps) else tensors):
        at = f"tensors/{i}"
        bounded(t.size, f"{at}/size")
        bounded(t.offset, f"{at}/offset")
        bounded(t.group_offset, f"{at}/group_offset")
        for axis, d in enumerate(t.shape):
            bounded(d, f"{at}/shape/{axis}")
        if t.object is not None:
            bounded(t.object, f"{at}/object")
        if t.offset + t.size > MAX_VALUE:
            raise PlanError(f"{where}: tensor {show_name(t.name)} ends past byte 2^62; re-plan the model")
        if t.graph not in graph_steps:
            raise PlanError(f"{where}: tensor {show_name(t.name)} is in graph {show_name(t.graph)}, which the "
                            "plan's subgraphs do not list; re-plan the model")
        steps = graph_steps[t.graph]
        if not t.start < t.end <= steps:
            raise PlanError(
                f"{where}: tensor {show_name(t.name)} is live in steps [{t.start}, {t.end}), "
                f"which is empty or not inside the {steps} steps of the order; re-plan the model"
            )
    for i, o in enumerate(data.get("objects", [])):
        for key in ("id", "size", "offset"):
            bounded(o[key], f"objects/{i}/{key}")


def _tensors_in_range(tensors: tuple[PlannedTensor, ...], graph_steps: dict[str, int]) -> bool:
    """Whether every tensor passes the checks of :func:`_check_ranges`, in a few quick passes
    (the checks, one tensor at a time, take a 100,000-node plan's read 0.6 s longer); where one
    does not, those checks name the first that fails."""
    if not tensors:
        return True
    if not {t.graph for t in tensors} <= graph_steps.keys():
        return False
    if max(max(t.size, t.offset, t.group_offset, t.object or 0, *t.shape) for t in tensors) >= MAX_VALUE:
        return False
    if max(t.offset + t.size for t in tensors) > MAX_VALUE:
        return False
    return all(t.start < t.end <= graph_steps[t.graph] for t in tensors)


def _shared_names(order: list[str], tensors: tuple[PlannedTensor, ...]) -> tuple[str, ...]:
    """``order`` with each node name that is a tensor's producer as the record's own string: the
    names of a 100,000-node plan are held once, not once in the order and once in the records."""
    made = {t.producer: t.producer for t in tensors if t.producer is not None}
    return tuple(made.get(n, n) for n in order)


def _other_kind(data: Any) -> str | None:
    """``"range"`` or ``"program"`` for parsed JSON of a plan of that kind (by its top-level
    object), else ``None``."""
    if isinstance(data, dict):
        for kind in ("range", "program"):
            if isinstance(data.get(kind), dict):
                return kind
    return None


def plan_from_dict(data: Any, where: str = "plan") -> MemoryPlan:
    """The plan in ``data`` (parsed JSON), checked against the schema and its bounds first."""
    other = _other_kind(data)
    if other == "range":
        raise PlanError(f"{where} is a range plan; make the plan for one point with 'onnxmem instantiate "
                        "PLAN --dim NAME=N -o plan.json' (verify also takes it with --dim NAME=N)")
    if other == "program":
        raise PlanError(f"{where} is a program plan of several models; verify it with all of them, in its "
                        "order ('onnxmem verify A.onnx B.onnx --plan PLAN'), or show it ('onnxmem show PLAN')")
    read = data.get("tensors") if isinstance(data, dict) else None
    check_schema({**data, "tensors": []} if isinstance(read, _ReadTensors) else data, where)
    if data["schema_version"] not in READABLE_VERSIONS:
        raise PlanError(
            f"{where} has schema_version {data['schema_version']}; this onnxmem reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS))}: re-plan the model"
        )
    tensors = tuple(read) if isinstance(read, _ReadTensors) else tuple(
        PlannedTensor(**{**t, "shape": tuple(t["shape"])}) for t in data["tensors"]
    )
    _check_ranges(data, tensors, where)
    objects = tuple(SharedObject(**o) for o in data.get("objects", []))
    subgraphs = tuple(
        SubgraphPlan(**{**s, "order": tuple(s["order"]), "op_types": tuple(s["op_types"])})
        for s in data.get("subgraphs", [])
    )
    outside = tuple(OutsideValue(**o) for o in data.get("outside", []))
    values = {f.name: data[f.name] for f in fields(MemoryPlan) if f.name in data}
    ops: dict[str, str] = {}  # each op type's string once (a parsed array holds one per step)
    values.update(
        order=_shared_names(data["order"], tensors),
        op_types=tuple(ops.setdefault(o, o) for o in data["op_types"]),
        tensors=tensors,
        objects=objects,
        warnings=tuple(data.get("warnings", ())),
        subgraphs=subgraphs,
        outside=outside,
    )
    return MemoryPlan(**values)


#: every integer of a tensor read as it is parsed is below this: a plan file's integers have at most
#: ``JSON_MAX_DIGITS`` digits (the schema has them at least 0)
_DIGITS_BOUND = 10**JSON_MAX_DIGITS


class _ReadTensors(list):  # type: ignore[type-arg]
    """A point plan's ``tensors`` made into records as the file was read, each element checked
    against the schema first (:func:`parse_plan_json`); :func:`plan_from_dict` checks the rest."""


def _tensor_reader() -> Callable[[Any], PlannedTensor] | None:
    """What makes one parsed element of a plan's ``tensors`` into its record, after checking it
    against the schema (``ValueError`` where it does not follow it); ``None`` without the
    compiled check. The few distinct strings of the records' dtype, kind, op and graph fields
    are kept once, and a group named as its tensor is the tensor's name."""
    check = fast_item_check("plan", "tensors")
    if check is None:
        return None
    kept: dict[Any, Any] = {}
    keep = kept.setdefault

    def record(t: Any) -> PlannedTensor:
        try:
            check(t)
        except Exception:  # noqa: BLE001 - any refusal: the whole file is read again and checked
            raise ValueError("not a tensor of a plan") from None
        shape, size, offset, start, end = t["shape"], t["size"], t["offset"], t["start"], t["end"]
        if max(size, offset, start, end, t.get("group_offset", 0), t["object"] or 0, *shape) >= _DIGITS_BOUND:
            raise ValueError("an integer past the digits a plan file's integers have")  # read whole: it says so
        name, group, graph = t["name"], t["group"], t.get("graph", "")
        return PlannedTensor(
            name, keep(t["dtype"], t["dtype"]), tuple(shape), size, offset, start, end,
            t["producer"], keep(t["producer_op"], t["producer_op"]), keep(t["kind"], t["kind"]),
            name if group == name else group, t["object"], t.get("group_offset", 0), keep(graph, graph),
        )

    return record


def parse_plan_json(data: bytes, where: str) -> Any:
    """Parse plan JSON strictly: UTF-8, no NaN or Infinity, integers of at most 100 digits, no key
    twice in one object, no lone surrogate (``"\\ud800"``) in a string.

    A point plan's tensors are made into their records as they are parsed, each checked against
    the schema first (``loads_json_streamed``), so the parsed objects of a 100,000-node plan are
    never all held (a plan read back took 160 MB where its records take a third of that); any
    other file, and one with a tensor the schema refuses, is parsed whole and checked whole."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(
            f"{where} is not UTF-8 text (byte {exc.start}); give the JSON plan "
            "that 'onnxmem plan -o' wrote"
        ) from None
    record = _tensor_reader()
    read = None if record is None else loads_json_streamed(text, "tensors", record)
    if read is not None and _other_kind(read) is None:
        if isinstance(read.get("tensors"), list):
            read["tensors"] = _ReadTensors(read["tensors"])
        return read
    try:
        return loads_json(text, unique_keys=True)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{where} is not JSON (line {exc.lineno}: {exc.msg}); give the JSON plan "
                        "that 'onnxmem plan -o' wrote") from None
    except ValueError as exc:
        raise PlanError(f"{where} is not a plan: {exc}; give the JSON plan that 'onnxmem plan -o' wrote") from None


def read_plan_data(path: str | os.PathLike[str]) -> tuple[Any, str]:
    """``(the parsed JSON, "plan file NAME")`` of a plan file of any kind (a regular file of
    at most ``MAX_PLAN_BYTES``), read once; the kind's reader checks the data."""
    where = f"plan file {show_name(os.fspath(path))}"
    return parse_plan_json(read_input(path, "plan file", MAX_PLAN_BYTES, PlanError), where), where


def render_plan(plan: MemoryPlan) -> bytes:
    """The plan's JSON bytes.

    Not checked against the schema: the record's types and :meth:`MemoryPlan.to_dict`
    make a plan that follows it (the tests check every plan they write), and a plan is
    checked where it is read. On a 100,000-node graph the check took longer than planning.
    """
    return plan.to_json().encode("utf-8")


def write_plan(plan: MemoryPlan, path: str | os.PathLike[str]) -> None:
    """Write the plan as JSON, atomically."""
    write_stream_atomic(path, plan.write_json, "-o")
