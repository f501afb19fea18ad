"""Shapes by partial evaluation: onnxmem's own small interpreter for shape arithmetic.

Exporters that trace a program (TorchScript above all) compute shapes at run
time: ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, with ``Cast``,
arithmetic, ``Ceil``/``Clip`` (timm's "same" padding), ``Equal``/``Where`` and
``Range`` on the way. Static shape
inference leaves the results unknown wherever its data propagation stops.
This module evaluates those chains without weights and without onnxruntime:

1. Read what is known: the concrete shape of each top-level value (from the
   inference result given, dims resolved by the caller), and the values of
   small initializers (those the stripped inference copy keeps) and of
   ``Constant`` nodes. Graph inputs carry no values: their data is unknown.
2. Mark the values worth computing: every input in a shape slot of a
   consumer (``Reshape``'s shape, ``Expand``'s shape, ``Slice``'s starts...,
   see ``SHAPE_SLOTS``) with an output the inference left open (any slot where
   the graph has subgraphs) and, backwards, every input of an evaluable node
   that produces a marked value (``Shape`` and ``Size`` need only a shape).
3. Evaluate the marked nodes in a stable topological order (Kahn's, never the
   file order), with numpy, for the ops of ``EVALUATORS`` only, each per the
   ONNX spec of the model's opset. A node whose inputs are not all known stays
   unknown.
4. Replace the producer of every evaluated value that sits in a shape slot by
   an initializer holding that value (a copy of the inference model, never the
   caller's), give every other evaluated value its exact shape as value_info,
   and run shape inference again. Repeat while a round evaluates something new,
   at most ``MAX_ROUNDS`` rounds.
5. Within a round, between two inferences, carry the shapes forward through the
   nodes whose output shapes a ``Shape`` or ``Size`` to evaluate reads
   (:mod:`onnxmem.shapes.carried`): each node's
   own rule in onnx (``onnx.shape_inference.infer_node_outputs``), on its input
   shapes and the values computed so far, in the same sweep in topological order
   as step 3 (a node comes after all it reads, so one sweep goes as far as it can).
   A chain in which each link reads the shape of the previous link's ``Pad`` or
   ``Reshape`` (Swin-T's TorchScript export: 16 links) so needs one inference
   instead of one per link. The shapes so carried only feed the evaluation: the
   result is the last inference's, and where that inference does not give every
   carried shape exactly, the pass runs again without carrying (one inference per
   link), so the result is the same as without this step.

Guarantees: a value is either exact or unknown, never guessed. Any value the
evaluator would make with more than ``MAX_ELEMENTS`` elements (checked from the
shapes before anything is allocated), any integer leaving its dtype's range
(integer arithmetic runs in int64 with every overflow detected, never
wrapped), a float Cast past an integer's range, an integer Range past 2^53
(where onnxruntime's own count, made in double, can differ), any malformed
attribute or input makes that value unknown; the values leaving their range are
named (``Evaluated.undefined``: onnxruntime computes another value there, with
undefined behaviour, and no engine may give a shape that follows them). An
integer Cast to an integer converts as onnxruntime does, modulo 2^bits in two's
complement (numpy's ``astype``, the same bits); all values of one pass hold at most ``MAX_TOTAL_ELEMENTS``, and a
node that fails with all its inputs known is not tried again. Symbolic dims are used only through the caller's
``resolve`` (which binds them to the user's ``--dim`` values through
:mod:`onnxmem.core.dimexpr`); a value that depends on an unbound dim stays unknown.
No string of the model is evaluated. It does not evaluate ops with subgraphs,
ops of other domains, or anything whose result depends on the graph inputs'
data (``NonZero``, ``TopK`` outputs...).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Container, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from onnxmem.core.toposort import stable_order
from onnxmem.model import copy_without, subgraph_attributes
from onnxmem.shapes.carried import MAX_CARRIED_DATA, Carrier, Names, Protos
from onnxmem.shapes.evalbase import (
    ELEM_TYPES,
    MAX_ELEMENTS,
    MAX_RANK,
    SHAPE_ONLY,
    SHAPE_SLOTS,
    Dim,
    OpContext,
    OutOfRange,
    Unknown,
    checked_value,
    declared_shapes,
    known_shapes,
    tensor_value,
)
from onnxmem.shapes.evalops import EVALUATORS, reshape_target, slice_indices

__all__ = [
    "EVALUATORS",
    "MAX_CARRIED_DATA",
    "MAX_ELEMENTS",
    "MAX_RANK",
    "MAX_ROUNDS",
    "MAX_TOTAL_ELEMENTS",
    "SHAPE_SLOTS",
    "Evaluated",
    "evaluate_node",
    "evaluate_shapes",
    "evaluate_values",
    "graph_constants",
    "needed_values",
    "opset_version",
    "reshape_target",
    "slice_indices",
]

#: the most elements all computed values hold together; past it the pass stops evaluating
MAX_TOTAL_ELEMENTS = 2**24
#: rounds of (evaluate, fold, infer again) at most: a chain whose shape reads the output of
#: the previous chain's Pad or Reshape needs one round per link where shapes are not carried
#: (step 5; Swin-T's TorchScript export: 16), one where they are
MAX_ROUNDS = 32

_TENSOR = onnx.AttributeProto.TENSOR
#: what an evaluation raises for a value it cannot compute (a malformed node included)
_UNKNOWN = (Unknown, ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError)


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    out: dict[str, object] = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise Unknown
        out[attr.name] = helper.get_attribute_value(attr)
    return out


def evaluate_node(
    node: onnx.NodeProto,
    inputs: Sequence[np.ndarray | None],
    shapes: Sequence[tuple[int, ...] | None],
    opset: int,
    undefined: set[str] | None = None,
    tensors: dict[bytes, np.ndarray | None] | None = None,
) -> np.ndarray | None:
    """The value of ``node``'s (single) output, or ``None`` when it is unknown.

    ``inputs`` holds the known input values (``None`` where unknown or absent),
    ``shapes`` the inputs' known shapes (``Shape`` and ``Size`` read only
    these). Raises nothing for a malformed node: its value is unknown. The output of
    a node whose exact result leaves its dtype's range (:class:`OutOfRange`) is added
    to ``undefined``, where given. ``tensors``: the values of the ``Constant`` tensors read so far,
    by their bytes (added to; an exporter repeats a few constants thousands of times), where given:
    nodes holding the same tensor then share one array, which no evaluator changes.
    """
    op = node.op_type
    if op not in EVALUATORS or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    return _evaluate(node, op, inputs, shapes, opset, undefined, tensors)


def _evaluate(
    node: onnx.NodeProto,
    op: str,
    inputs: Sequence[np.ndarray | None],
    shapes: Sequence[tuple[int, ...] | None],
    opset: int,
    undefined: set[str] | None,
    tensors: dict[bytes, np.ndarray | None] | None,
    present: list[bool] | None = None,
) -> np.ndarray | None:
    """:func:`evaluate_node` of a node known to be evaluable: of the standard domain, one output,
    its ``op`` (its op type) one of :data:`EVALUATORS`; ``present``: which inputs it names, where
    known."""
    attrs = node.attribute
    if op == "Constant" and len(attrs) == 1 and attrs[0].name == "value" and attrs[0].type == _TENSOR:
        t = attrs[0].t
        key = t.SerializeToString() if tensors is not None else b""
        if tensors is not None and key in tensors:
            return tensors[key]
        try:  # most often a tensor alone: read as it is
            value: np.ndarray | None = tensor_value(t)
        except _UNKNOWN:
            value = None
        if tensors is not None:
            tensors[key] = value
        return value
    try:
        ctx = OpContext(opset, _attrs(node), list(shapes), [bool(name) for name in node.input] if present is None else present)
        out = np.asarray(EVALUATORS[op](ctx, list(inputs)))
        return checked_value(out)
    except OutOfRange:
        if undefined is not None:
            undefined.add(node.output[0])
        return None
    except _UNKNOWN:
        return None


# ------------------------------------------------------------------ the pass


@dataclass(frozen=True, slots=True)
class Evaluated:
    """The result of :func:`evaluate_shapes`.

    ``model`` is the last inference result (on the folded copy) or the one
    given when nothing was evaluated; ``shapes`` holds ``(elem_type, shape)``
    of every value the interpreter computed; ``values`` the values themselves;
    ``rounds`` counts the inference reruns, ``folded`` the values made initializers;
    ``undefined`` the values whose exact result leaves their dtype's range (onnxruntime
    computes another value there: no engine may give a shape that follows them,
    :func:`onnxmem.shapes.engines.run_symbolic_inference`).
    """

    model: onnx.ModelProto
    shapes: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    rounds: int = 0
    folded: int = 0
    undefined: frozenset[str] = frozenset()


def opset_version(model: onnx.ModelProto) -> int:
    """The model's ai.onnx opset version (0 when it imports none)."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _names(nodes: Sequence[onnx.NodeProto]) -> Names:
    """Each node's input and output names, read from protobuf once (each read of a name there
    makes a new ``str``; the steps of a pass read them several times)."""
    return [tuple(n.input) for n in nodes], [tuple(n.output) for n in nodes]


def _consumers(inputs: Sequence[tuple[str, ...]]) -> dict[str, list[int]]:
    """Each value's readers: the indices of the nodes whose ``inputs`` name it."""
    consumers: dict[str, list[int]] = {}
    for i, ins in enumerate(inputs):
        for name in set(ins):
            consumers.setdefault(name, []).append(i)
    return consumers


def _topological(nodes: Sequence[onnx.NodeProto], names: Names | None = None) -> list[int]:
    """Node indices in a stable topological order over explicit inputs (Kahn's; a cycle's nodes are left out)."""
    inputs, outputs = names or _names(nodes)
    producer: dict[str, int] = {}
    for i, outs in enumerate(outputs):
        for o in outs:
            if o:
                producer.setdefault(o, i)
    users: list[list[int]] = [[] for _ in nodes]
    for i, ins in enumerate(inputs):
        for name in set(ins):
            p = producer.get(name)
            if name and p is not None and p != i:
                users[p].append(i)
    return stable_order(users)


def evaluate_values(
    model: onnx.ModelProto,
    given: Mapping[str, np.ndarray],
    shapes: Mapping[str, tuple[int, ...]],
    wanted: Sequence[str],
) -> dict[str, np.ndarray]:
    """The values of the main graph's ``wanted`` (and of what they need) that the interpreter
    computes from the model's small constants, the ``given`` values (graph inputs the user
    gave) and the known ``shapes``: the ``given`` values plus every value it read or made.
    The same ops and limits as :func:`evaluate_shapes` (a value it cannot make stays unknown),
    in a stable topological order; nothing is inferred and the model is not changed. An If's
    condition computed so decides its branch (:mod:`onnxmem.graph.conditions`)."""
    nodes = list(model.graph.node)
    needed = needed_values(nodes, wanted)
    values = {**_constants(model, needed), **given}
    have = {**shapes, **{k: tuple(v.shape) for k, v in values.items()}}
    budget = MAX_TOTAL_ELEMENTS - sum(v.size for v in values.values())
    opset = opset_version(model)
    for i in _topological(nodes):
        node = nodes[i]
        if len(node.output) != 1 or node.output[0] not in needed or node.output[0] in values:
            continue
        ins = [values.get(name) if name else None for name in node.input]
        out = evaluate_node(node, ins, [have.get(name) if name else None for name in node.input], opset)
        if out is None or out.size > budget:
            continue
        budget -= out.size
        values[node.output[0]] = out
        have[node.output[0]] = tuple(out.shape)
    return values


def needed_values(nodes: Sequence[onnx.NodeProto], wanted: Iterable[str], names: Names | None = None) -> set[str]:
    """``wanted`` and, backwards through evaluable nodes, every value they need (only the
    shapes of ``Shape``'s and ``Size``'s inputs). ``names``: the nodes' :func:`_names`, where read already."""
    inputs, outputs = names or _names(nodes)
    producer = {o: i for i, outs in enumerate(outputs) for o in outs if o}
    stack = [name for name in wanted if name]
    needed: set[str] = set()
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        p = producer.get(name)
        if p is not None and nodes[p].op_type in EVALUATORS and nodes[p].op_type not in SHAPE_ONLY:
            stack.extend(i for i in inputs[p] if i)
    return needed


def _constants(model: onnx.ModelProto, names: Container[str] | None = None) -> dict[str, np.ndarray]:
    """Values of the initializers the graph cannot override (no graph input of the same name, from IR 4 on);
    only those of ``names`` where given."""
    g = model.graph
    inputs = {vi.name for vi in g.input} if model.ir_version >= 4 else set()
    out: dict[str, np.ndarray] = {}
    for init in g.initializer:
        if init.name in inputs or (names is not None and init.name not in names):
            continue
        try:
            out[init.name] = tensor_value(init)
        except Unknown:
            continue
    return out


def graph_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The values ``model``'s top-level graph holds in the file: its small inline initializers
    (see :func:`_constants`) and the outputs of its ``Constant`` nodes, each within ``MAX_ELEMENTS``."""
    out = _constants(model)
    opset = opset_version(model)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            value = evaluate_node(node, [], [], opset)
            if value is not None:
                out[node.output[0]] = value
    return out


def _fold(
    work: onnx.ModelProto,
    values: Mapping[str, np.ndarray],
    fold: set[str],
    shapes: Mapping[str, tuple[int, tuple[int, ...]]],
    protos: Protos | None = None,
    outputs: Sequence[tuple[str, ...]] | None = None,
) -> onnx.ModelProto:
    """A copy of ``work`` whose producers of ``fold`` values are initializers, other evaluated values typed.
    ``protos``: the initializers and value_info of earlier rounds, kept across rounds so that each
    is made once; ``outputs``: each node's output names (:func:`_names`), where read already. The
    nodes kept are copied once."""
    protos = Protos() if protos is None else protos
    m = copy_without(work, ("node",))
    g = m.graph
    outs = outputs if outputs is not None else [tuple(n.output) for n in work.graph.node]
    g.node.extend(n for n, o in zip(work.graph.node, outs) if not (len(o) == 1 and o[0] in fold))
    g.initializer.extend(protos.tensor(name, values[name]) for name in sorted(fold))
    typed = {vi.name for vi in (*g.input, *g.output, *g.value_info)}
    g.value_info.extend(protos.info(name, *shapes[name]) for name in sorted(shapes)
                        if name not in fold and name not in typed)
    return m


class _Evaluator:
    """What the rounds of :func:`evaluate_shapes` share: the values computed so far (a value never
    changes once known), the nodes that cannot give one, and what each node was last tried on."""

    def __init__(self, nodes: Sequence[onnx.NodeProto], wanted: list[int], values: dict[str, np.ndarray],
                 opset: int, names: Names, kinds: Sequence[tuple[str, str]]) -> None:
        self.nodes, self.wanted, self.values, self.opset = nodes, wanted, values, opset
        #: each wanted node's input names and its one output (``names``: the nodes' :func:`_names`)
        self.names = {i: (names[0][i], names[1][i][0]) for i in wanted}
        #: each wanted node's op type where it is evaluable (of the standard domain, an op of
        #: :data:`EVALUATORS`), else ``None`` (``kinds``: every node's op type and domain)
        self.ops = {i: op if op in EVALUATORS and domain in ("", "ai.onnx") else None
                    for i in wanted for op, domain in (kinds[i],)}
        self.shape_only = {i for i in wanted if kinds[i][0] in SHAPE_ONLY}  # those that read only shapes
        self.failed: set[int] = set()
        #: node -> what it was last tried on, in vain (which input values were known, and the input
        #: shapes): on the same again it gives nothing again, so it is not tried
        self.tried: dict[int, tuple[object, ...]] = {}
        self.made: dict[str, np.ndarray] = {}
        self.undefined: set[str] = set()  # the values whose exact result leaves their dtype's range
        self.tensors: dict[bytes, np.ndarray | None] = {}  # the Constant tensors read, by their bytes
        self.typed: dict[str, tuple[int, tuple[int, ...]]] = {}
        self.budget = MAX_TOTAL_ELEMENTS - sum(v.size for v in values.values())

    def done(self) -> bool:
        """Whether every wanted node's value is known."""
        return all(name in self.values for _, name in self.names.values())

    def evaluate(self, shapes: dict[str, tuple[int, ...]]) -> list[str]:
        """One pass over the wanted nodes in order: the values it computed (their shapes added to ``shapes``)."""
        new: list[str] = []
        for i in self.wanted:
            name = self.step(i, shapes)
            if name is not None:
                new.append(name)
        return new

    def step(self, i: int, shapes: dict[str, tuple[int, ...]]) -> str | None:
        """Evaluate node ``i`` when it may give something new: the name of the value it computed
        (its shape added to ``shapes``), or ``None``."""
        names, name = self.names[i]
        if name in self.values or i in self.failed:
            return None
        values = self.values
        ins = [values.get(n) if n else None for n in names]
        in_shapes = [shapes.get(n) if n else None for n in names]
        before = self.tried.get(i)
        if before is not None and before == (*(v is not None for v in ins), *in_shapes):
            return None
        op = self.ops[i]
        out = None if op is None else _evaluate(self.nodes[i], op, ins, in_shapes, self.opset, self.undefined,
                                                self.tensors, [bool(n) for n in names])
        if out is None:
            self.tried[i] = (*(v is not None for v in ins), *in_shapes)
            # with every input known, a later round cannot do better: never try it again
            read = in_shapes if i in self.shape_only else ins
            if all(v is not None for n, v in zip(names, read) if n):
                self.failed.add(i)
            return None
        if out.size > self.budget:
            return None
        self.budget -= out.size
        values[name] = self.made[name] = out
        shapes[name] = shape = out.shape  # a tuple of ints
        self.typed[name] = (ELEM_TYPES[out.dtype], shape)
        return name


def _given_shapes(inferred: onnx.ModelProto, declared: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]] | None,
                  resolve: Callable[[Dim], int | None], known: dict[str, tuple[int, ...]],
                  elems: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The given inference's concrete shapes (into ``known``) and element types (into ``elems``):
    from ``declared``, what the caller read of it, where that can be (:func:`declared_shapes`)."""
    given = declared_shapes(inferred, declared, resolve, known, elems) if declared is not None else None
    return given if given is not None else known_shapes(inferred, resolve, known, elems)


def evaluate_shapes(
    work: onnx.ModelProto,
    inferred: onnx.ModelProto,
    *,
    infer: Callable[[onnx.ModelProto], onnx.ModelProto | None],
    resolve: Callable[[Dim], int | None],
    max_rounds: int = MAX_ROUNDS,
    also: Sequence[str] = (),
    carry: bool = True,
    flat: bool | None = None,
    declared: Mapping[str, tuple[int | None, tuple[Dim, ...] | None]] | None = None,
) -> Evaluated:
    """Evaluate the shape arithmetic of ``work`` and infer shapes again with its results.

    ``work`` is the inference copy (small initializers only, inputs bound),
    ``inferred`` shape inference's result on it, ``infer`` the inference to
    rerun, ``resolve`` the value of one declared dim (``None`` when unbound; a
    function of the dim alone, asked once per dim).
    ``also`` names values to compute besides those in shape slots (an If's
    condition, which decides the shapes after it). ``carry``: carry shapes forward between
    two inferences (step 5; the result is the same without it, in more rounds). ``flat``:
    whether the graph holds no subgraph, where the caller knows (``None``: looked up).
    ``declared``: what :func:`onnxmem.shapes.engines.collect_types` read of ``inferred``, where
    the caller has it (its shapes are not read again). Neither model is changed. See the module docstring for the steps.
    """
    nodes = list(work.graph.node)
    inputs, outputs = names = _names(nodes)
    resolve_once = functools.lru_cache(maxsize=None)(resolve)
    known: dict[str, tuple[int, ...]] = {}
    # a shape slot matters only where its node has an output the inference left open; with
    # subgraphs in the graph every slot is evaluated, as a Loop's bound or a body may read its value
    if flat is None:
        flat = not any(map(subgraph_attributes, nodes))
    elems: dict[str, int] = {}  # the element types of the given inference, read with its shapes where flat
    first = _given_shapes(inferred, declared, resolve_once, known, elems) if flat else {}
    kinds = [(n.op_type, n.domain) for n in nodes]  # each node's op type and domain, read once
    slots = {ins[p] for (op, domain), ins, outs in zip(kinds, inputs, outputs) if domain in ("", "ai.onnx")
             and not (first and all(o in first for o in outs if o))
             for p in SHAPE_SLOTS.get(op, ()) if p < len(ins) and ins[p]}
    needed = needed_values(nodes, [*slots, *also], names)
    if not needed:
        return Evaluated(inferred)
    values = _constants(work)
    producers = {o for outs in outputs for o in outs if o}
    consumers: dict[str, list[int]] | None = None  # value -> the nodes that read it, read when first needed
    order = _topological(nodes, names)
    wanted = [i for i in order if len(outputs[i]) == 1 and outputs[i][0] in needed]
    ev = _Evaluator(nodes, wanted, values, opset_version(work), names, kinds)
    fold: set[str] = set()
    current, rounds, folded = inferred, 0, 0
    protos = Protos()  # what _fold made, kept for the next round
    carrier = Carrier(work, nodes, wanted, order, names, kinds, protos, opset=ev.opset, flat=flat) if carry else None
    read = None  # the model whose shapes ``known`` holds
    for _ in range(max_rounds):
        # the given inference's shapes were read above where the graph is flat
        shapes, read = (known if first and current is inferred else known_shapes(current, resolve_once, known)), current
        shapes.update({k: v[1] for k, v in ev.typed.items()})
        before = set(shapes)
        if carrier is None:
            new = [] if ev.done() else ev.evaluate(shapes)
        else:
            new = carrier.evaluate(ev, current, shapes, elems if first and current is inferred else None)
        # infer again only when a new value can teach inference something it does not know: a new
        # shape, or the value of a slot whose node has an output left open
        if not any(n not in before for n in new):
            consumers = _consumers(inputs) if consumers is None else consumers
            if not any(n in slots and n in producers and any(o and o not in before for c in consumers.get(n, ())
                                                            for o in outputs[c]) for n in new):
                break
        fold |= {n for n in new if n in slots and n in producers}
        again = infer(_fold(work, values, fold, ev.typed, protos, outputs))
        if again is None:
            break
        current, rounds, folded = again, rounds + 1, len(fold)
    if carrier is not None and not carrier.confirmed(
            known if read is current else known_shapes(current, resolve_once, known)):  # read again when changed
        return evaluate_shapes(work, inferred, infer=infer, resolve=resolve, max_rounds=max_rounds, also=also,
                               carry=False, flat=flat)
    return Evaluated(current, ev.typed, ev.made, rounds, folded, frozenset(ev.undefined))
