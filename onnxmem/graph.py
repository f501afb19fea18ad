"""A read-only view of a model's top-level graph for planning.

Values know their producer and their consumers; node order is the file's and
is never assumed to be topological. Nodes with subgraphs (If, Loop, Scan)
read the outer-scope values their bodies capture: those count as inputs of the
owning node, so they stay live through it. Each node gets a unique name (the
file's, or ``<op_type>_<index>`` when it is empty or repeated); the annotated
model writes these names back so a plan and its model always match.

Weights stay outside the arena. Each has an ``origin`` (:data:`ORIGINS`):
``initializer``; ``constant`` (the output of a ``Constant`` node); ``folded``
(the output of a node computed once from weights, as onnxruntime's constant
folding does at session start). With folding on (``build_view(...,
fold=True)``, the default) a node is folded when it is foldable
(:func:`foldable`: an ai.onnx op, deterministic, with no subgraph) and every
input it reads is a weight; with folding off only ``ConstantOfShape`` and the
views in :data:`CONSTANT_OPS` are, as before folding existed.

Example: ``wt = Transpose(W); wc = Cast(wt); y = MatMul(x, wc)`` with ``W``
an initializer: folding on, ``wt`` and ``wc`` are weights of origin
``folded`` and only ``y`` (and ``x``) take arena bytes; folding off, ``wt``
and ``wc`` are activations.

In a training graph, the graph inputs that are the caller's state
(parameters, gradient accumulation buffers, optimizer state: see
:func:`onnxmem.training.roles.caller_state`) are weights too, of origin
``caller``: outside the arena, like initializers, and never folded into
anything but a view (they change between runs). ``GraphView.outside`` lists
them with their reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TypeVar

import onnx

from .errors import ModelError
from .model import ShapeInfo, dtype_name, tensor_bytes
from .training.roles import caller_state

__all__ = ["ORIGINS", "GraphView", "Op", "Tensor", "build_view", "foldable", "outer_scope_reads"]

T = TypeVar("T")

#: ops whose outputs are weights when every input is a weight, also with folding
#: off: constants, and views of weights (a runtime aliases them to the weight's own bytes)
CONSTANT_OPS = frozenset(
    {"Constant", "ConstantOfShape", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"}
)

#: ops whose outputs differ from run to run: never folded
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)

#: why a value is a weight: a graph initializer, a Constant node's output, a
#: node's output computed once from weights (constant folding), or a training
#: graph's input that holds the caller's state
ORIGINS = ("initializer", "constant", "folded", "caller")


@dataclass(frozen=True, slots=True)
class Tensor:
    """One value of the top-level graph.

    ``kind``: ``input`` (a graph input that is not a weight), ``output`` (a
    graph output), ``activation`` (any other node output) or ``weight``.
    ``producer``: index of the node that writes it, ``None`` for inputs and
    initializers.
    """

    name: str
    elem_type: int
    dtype: str
    shape: tuple[int, ...]
    size: int
    kind: str
    producer: int | None
    #: for a weight, why it is one (one of :data:`ORIGINS`); ``""`` for any other value
    origin: str = ""


@dataclass(frozen=True, slots=True)
class Op:
    """One node. ``inputs`` keeps '' for an omitted optional input;
    ``captures`` lists the outer-scope values its subgraphs read."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    captures: tuple[str, ...] = ()
    #: every value the node reads, each once, in first-use order (set on construction)
    reads: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", tuple(dict.fromkeys(n for n in self.inputs + self.captures if n)))


@dataclass(frozen=True, slots=True)
class GraphView:
    ops: tuple[Op, ...]
    tensors: Mapping[str, Tensor]
    inputs: tuple[str, ...]  # real graph inputs (not weights)
    outputs: tuple[str, ...]
    consumers: Mapping[str, tuple[int, ...]]  # value -> node indices that read it
    #: nodes computed once before the run (Constant and folded nodes): their outputs are weights
    weight_ops: tuple[int, ...] = ()
    #: graph inputs that are the caller's state, outside the arena (kind ``weight``) -> reason
    outside: Mapping[str, str] = field(default_factory=dict)
    #: data derived from the view, computed on first use (the view is read-only): see :meth:`memo`
    _memo: dict[object, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def memo(self, key: object, compute: Callable[[], T]) -> T:
        """``compute()``, once per view and ``key``: for passes that several
        planning steps need (dependency lists, the stable topological order,
        the alias sources of every node). ``compute`` must depend on the view
        and ``key`` alone."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[no-any-return]

    def folded(self) -> list[str]:
        """Names of the values computed once from weights (origin ``folded``), in node order."""
        return [t.name for t in self.tensors.values() if t.origin == "folded"]

    def activations(self) -> list[Tensor]:
        """Every non-weight value: the tensors that need arena memory."""
        return [t for t in self.tensors.values() if t.kind != "weight"]

    @property
    def weights_size(self) -> int:
        return sum(t.size for t in self.tensors.values() if t.kind == "weight")

    def predecessors(self, index: int) -> tuple[int, ...]:
        """Nodes that produce a non-weight value this node reads."""
        return self.memo("predecessors", lambda: [self._predecessors(op) for op in self.ops])[index]

    def successors(self, index: int) -> tuple[int, ...]:
        """Nodes that read a non-weight value this node writes."""
        return self.memo("successors", lambda: [self._successors(op) for op in self.ops])[index]

    def _predecessors(self, op: Op) -> tuple[int, ...]:
        tensors = self.tensors
        out: dict[int, None] = {}
        for n in op.reads:
            t = tensors[n]
            if t.producer is not None and t.kind != "weight":
                out[t.producer] = None
        return tuple(out)

    def _successors(self, op: Op) -> tuple[int, ...]:
        tensors = self.tensors
        out: dict[int, None] = {}
        for o in op.outputs:
            t = tensors.get(o) if o else None
            if t is not None and t.kind != "weight":
                out.update(dict.fromkeys(self.consumers.get(o, ())))
        return tuple(out)


def _subgraphs(node: onnx.NodeProto) -> Iterable[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def outer_scope_reads(graph: onnx.GraphProto) -> list[str]:
    """Names a (sub)graph reads but does not define, including nested bodies."""
    defined = {vi.name for vi in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.name for i in graph.sparse_initializer if hasattr(i, "name")}
    reads: dict[str, None] = {}
    for node in graph.node:
        for n in node.input:
            if n and n not in defined:
                reads.setdefault(n, None)
        for sub in _subgraphs(node):
            for n in outer_scope_reads(sub):
                if n not in defined:
                    reads.setdefault(n, None)
        defined.update(o for o in node.output if o)
    for vi in graph.output:
        if vi.name not in defined:
            reads.setdefault(vi.name, None)
    return list(reads)


def node_names(graph: onnx.GraphProto) -> list[str]:
    """Unique names for the graph's nodes: the file's, or ``<op_type>_<i>``."""
    used: set[str] = set()
    names: list[str] = []
    taken = {n.name for n in graph.node if n.name}
    for i, node in enumerate(graph.node):
        name = node.name
        if not name or name in used:
            base = f"{node.op_type}_{i}"
            name, k = base, 1
            while name in used or (name in taken and name != node.name):
                name, k = f"{base}_{k}", k + 1
        used.add(name)
        names.append(name)
    return names


def foldable(node: Op, *, fold: bool = True) -> bool:
    """Whether ``node`` may be computed once when every input it reads is a weight.

    Folding on: an ai.onnx op that is deterministic (not in :data:`RANDOM_OPS`,
    no Dropout with a ``training_mode`` input) and has no subgraph. Folding
    off: ``Constant``, ``ConstantOfShape`` and the views of :data:`CONSTANT_OPS`.
    """
    if node.domain not in ("", "ai.onnx"):
        return False
    if not fold:
        return node.op_type in CONSTANT_OPS
    if node.op_type in RANDOM_OPS or (node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]):
        return False
    return not node.captures and node.op_type not in ("If", "Loop", "Scan", "SequenceMap")


def build_view(model: onnx.ModelProto, shapes: ShapeInfo, *, fold: bool = True) -> GraphView:
    """The planning view of ``model``'s top-level graph (``fold``: constant folding,
    see the module docstring).

    Raises ``ModelError`` for a node input nothing produces, a value produced
    twice, or a graph output nothing produces.
    """
    g = model.graph
    names = node_names(g)
    init_names = {i.name for i in g.initializer}
    defined: dict[str, int | None] = {n: None for n in init_names}
    inputs: list[str] = []
    for vi in g.input:
        if vi.name not in init_names:
            inputs.append(vi.name)
            defined[vi.name] = None
    ops: list[Op] = []
    for i, node in enumerate(g.node):
        caps: dict[str, None] = {}
        for sub in _subgraphs(node):
            for n in outer_scope_reads(sub):
                caps.setdefault(n, None)
        op = Op(
            i, names[i], node.op_type, node.domain or "", tuple(node.input), tuple(node.output), tuple(caps)
        )
        ops.append(op)
        for o in node.output:
            if not o:
                continue
            if o in defined:
                what = "a graph input or initializer" if defined[o] is None else f"node '{names[defined[o]]}'"  # type: ignore[index]
                raise ModelError(
                    f"value '{o}' is written by node '{names[i]}' and also by {what}; "
                    "every value must have one producer (SSA)"
                )
            defined[o] = i
    for op in ops:
        for n in op.reads:
            if n not in defined:
                kind = "captured by a subgraph of" if n in op.captures and n not in op.inputs else "read by"
                raise ModelError(
                    f"value '{n}' {kind} node '{op.name}' ({op.op_type}) is produced by no node, "
                    "input or initializer; fix the model"
                )
    outputs = tuple(vi.name for vi in g.output)
    for o in outputs:
        if o not in defined:
            raise ModelError(f"graph output '{o}' is produced by no node or input; fix the model")

    # weights: initializers, the caller's state of a training graph, and values
    # computed once from weights (node order may not be topological: repeat
    # until nothing more folds)
    outside = caller_state(model)
    origin: dict[str, str] = dict.fromkeys(init_names, "initializer")
    origin.update((n, "caller") for n in outside if n not in origin)
    candidates = [op for op in ops if foldable(op, fold=fold) and any(op.outputs)]
    done: set[int] = set()
    grown = True
    while grown:
        grown = False
        for op in candidates:
            if op.index in done or not all(n in origin for n in op.reads):
                continue
            if op.op_type not in CONSTANT_OPS and any(origin[n] == "caller" for n in op.reads):
                continue  # the caller's state changes between runs: only views of it are weights
            done.add(op.index)
            why = "constant" if op.op_type == "Constant" else "folded"
            origin.update((o, why) for o in op.outputs if o)
            grown = True
    weight = set(origin)

    consumers: dict[str, list[int]] = {}
    for op in ops:
        for n in op.reads:
            consumers.setdefault(n, []).append(op.index)

    tensors: dict[str, Tensor] = {}
    out_set = set(outputs)
    for name, prod in defined.items():
        if name not in shapes.shapes:
            if name in init_names or name in weight:
                continue  # an unused weight whose shape is unknown: not planned
            raise ModelError(f"no shape was found for value '{name}'")
        et = shapes.dtypes[name]
        shape = shapes.shapes[name]
        if name in weight:
            kind = "weight"
        elif name in out_set:
            kind = "output"
        elif prod is None:
            kind = "input"
        else:
            kind = "activation"
        if kind == "weight" and et == onnx.TensorProto.STRING:
            size = 0
        else:
            size = tensor_bytes(et, shape, name)
        tensors[name] = Tensor(name, et, dtype_name(et), shape, size, kind, prod, origin.get(name, ""))
    return GraphView(
        tuple(ops),
        tensors,
        tuple(inputs),
        outputs,
        {k: tuple(v) for k, v in consumers.items()},
        tuple(sorted(done)),
        outside,
    )
