"""A read-only view of a model's graph for planning, one per graph level.

Values know their producer and their consumers; node order is the file's and
is never assumed to be topological. Nodes with subgraphs (If, Loop, Scan)
read the outer-scope values their bodies capture: those count as inputs of the
owning node, so they stay live through it. Each If branch and each Loop and
Scan body (opset 9 on) gets a view of its own (:attr:`GraphView.bodies`, built
recursively, with its path, e.g. ``Loop_3/body/If_1/else_branch``): its formal
inputs are ``input`` tensors (pinned to the end of a Loop or Scan body: the
carried slots), the enclosing values it reads are ``weight`` tensors of the
body (outside its arena; :attr:`GraphView.outer`), and its sizes come from
``ShapeInfo.bodies``. :func:`onnxmem.graph.regions.with_regions` adds the *region* an owning node's
bodies run in (see :mod:`onnxmem.planning.bodies`). Each node gets a unique name (the
file's, or ``<op_type>_<index>`` when it is empty or repeated); the annotated
model writes these names back so a plan and its model always match.

Weights stay outside the arena. Each has an ``origin`` (:data:`ORIGINS`):
``initializer``; ``constant`` (the output of a ``Constant`` node); ``folded``
(the output of a node computed once from weights, as onnxruntime's constant
folding does at session start). With folding on (``build_view(...,
fold=True)``, the default) a node is folded when it is foldable
(:func:`foldable`: an ai.onnx op, deterministic, with no subgraph), every
input it reads is a weight, and folding it keeps the weights as stored: the
bytes of its outputs are at most the bytes of the stored weights it is
computed from. Those are found by walking back through the folded nodes
(``Constant`` and ``ConstantOfShape`` outputs, initializers, enclosing weights
and the caller's state are stored; a view of :data:`CONSTANT_OPS` passes on
the stored weights of its inputs), each counted once. A node that would take
more (a ``DequantizeLinear`` of an int8 weight: 4x; a ``Cast`` from float16
to float: 2x; a ``Range`` or ``Expand`` of a few scalars) runs at run time:
its outputs are activations, live from its step to their last reader, as
onnxruntime runs them at ``ORT_DISABLE_ALL`` and as a QDQ model runs before
its fusion; the nodes after it that read them are not folded either. A size
that shape inference does not give is not checked (folded as before). With
folding off only ``ConstantOfShape`` and the views in :data:`CONSTANT_OPS` are,
as before folding existed, with no size check.

Example: ``wt = Transpose(W); wc = Cast(wt); y = MatMul(x, wc)`` with ``W``
a float initializer and ``Cast`` to float: folding on, ``wt`` and ``wc`` are
weights of origin ``folded`` and only ``y`` (and ``x``) take arena bytes;
folding off, ``wt`` and ``wc`` are activations. With ``W`` in float16, ``wt``
(the same bytes as ``W``) is folded and ``wc`` (twice them) is an activation.

In a training graph, the graph inputs that are the caller's state
(parameters, gradient accumulation buffers, optimizer state: see
:func:`onnxmem.model.roles.caller_state`) are weights too, of origin
``caller``: outside the arena, like initializers, and never folded into
anything but a view (they change between runs). ``GraphView.outside`` lists
them with their reason.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import onnx

from onnxmem.core.errors import ModelError, ShapeError, flag_value, show_name
from onnxmem.core.records import record
from onnxmem.graph.ops import CONSTANT_OPS, RANDOM_OPS, Op, foldable
from onnxmem.graph.paths import child_path, node_names, outer_scope_reads
from onnxmem.model import (
    BodyKey,
    NodeFields,
    caller_state,
    check_node_arity,
    dtype_name,
    owner_key,
    read_nodes,
    subgraph_attributes,
    tensor_bytes,
)
from onnxmem.model.functions import node_subgraphs
from onnxmem.shapes import LoopBound, ShapeInfo, opset_version

__all__ = ["CONSTANT_OPS", "ORIGINS", "RANDOM_OPS", "Body", "GraphView", "Op", "Tensor", "body_kind", "build_view",
           "foldable", "iter_views"]

T = TypeVar("T")


#: why a value is a weight: a graph initializer, a Constant node's output, a
#: node's output computed once from weights (constant folding), or a training
#: graph's input that holds the caller's state
ORIGINS = ("initializer", "constant", "folded", "caller")


@record
class Tensor:
    """One value of the top-level graph.

    ``kind``: ``input`` (a graph input that is not a weight; in a body, a
    formal input), ``output`` (a graph output), ``activation`` (any other node
    output), ``weight``, or ``region`` (the space a node's bodies run in, see
    :func:`with_regions`). In a body, the values of enclosing graphs it reads
    are ``weight`` too (they are outside its arena; :attr:`GraphView.outer`
    names them).
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
    #: the graph's path: ``""`` for the main graph, ``If_0/then_branch``, ``Loop_3/body/If_1/else_branch``
    path: str = ""
    #: values of enclosing graphs this (sub)graph reads (kind ``weight`` here: not in its arena)
    outer: frozenset[str] = frozenset()
    #: data derived from the view, computed on first use (the view is read-only): see :meth:`memo`
    _memo: dict[object, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    #: node index -> the views of its planned bodies (If branches, Loop and Scan bodies)
    bodies: Mapping[int, tuple["Body", ...]] = field(default_factory=dict, compare=False, repr=False)
    #: node index -> the name of its region tensor (see :func:`with_regions`)
    regions: Mapping[int, str] = field(default_factory=dict, compare=False, repr=False)
    #: region name -> ``{If output: its offset in the region}`` for an If whose branches write
    #: their outputs inside its region (see :func:`with_regions` and :mod:`onnxmem.planning.bodies`)
    region_outputs: Mapping[str, Mapping[str, int]] = field(default_factory=dict, compare=False, repr=False)
    #: whose kernel declarations the in-place rules may use (:func:`onnxmem.analysis.alias_rules.alias_rule`):
    #: ``""`` every provider's (the graph as written), ``"cpu"`` or ``"cuda"`` that provider's own
    #: (the graph onnxruntime built for it, ``plan --optimize``)
    kernels: str = ""
    #: the indices of the nodes that hold subgraphs (planned or not), in node order; ``None``
    #: where not recorded (a view made by hand), and then the graph's nodes are read for them
    nested: tuple[int, ...] | None = field(default=None, compare=False, repr=False)

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
        """Bytes of the weights of this graph and of every body nested in it
        (values of enclosing graphs a body reads are counted where they are defined)."""
        own = sum(t.size for t in self.tensors.values() if t.kind == "weight" and t.name not in self.outer)
        return own + sum(b.view.weights_size for bs in self.bodies.values() for b in bs)

    def predecessors(self, index: int) -> tuple[int, ...]:
        """Nodes that produce a non-weight value this node reads."""
        return self.all_predecessors()[index]

    def all_predecessors(self) -> Sequence[tuple[int, ...]]:
        """:meth:`predecessors` of every node, by node index (made once per view)."""
        return self.memo("predecessors", lambda: [self._predecessors(op) for op in self.ops])

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


@dataclass(frozen=True, slots=True)
class Body:
    """One planned subgraph: ``path`` names it (``If_0/then_branch``), ``owner``
    is the owning node's index in the parent view, ``attr`` the attribute that
    holds it, ``kind`` ``if``, ``loop`` or ``scan``, ``view`` its own view; ``state`` the
    number of values a Loop carries or a Scan keeps as state (0 for an If branch): the
    body's outputs ``[1, 1 + state)`` (Loop) or ``[0, state)`` (Scan) become the owner's
    first ``state`` outputs after the last iteration."""

    path: str
    owner: int
    attr: str
    kind: str
    view: GraphView
    state: int = 0
    #: a Loop whose carried values grow per iteration (:mod:`onnxmem.shapes.loops`): its trip
    #: bound and where it comes from, on its own body; ``None`` for any other body
    bound: LoopBound | None = None
    #: the bytes of each of the body's values at iterations ``0 .. N - 1`` of the growing Loop it
    #: is in (its own, or an enclosing body's); empty where no such Loop holds it
    iterations: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


def iter_views(view: GraphView) -> Iterable[GraphView]:
    """``view`` and the views of every body nested in it, outermost first."""
    stack = [view]
    while stack:
        v = stack.pop()
        yield v
        for index in sorted(v.bodies, reverse=True):
            stack.extend(b.view for b in reversed(v.bodies[index]))


def build_view(model: onnx.ModelProto, shapes: ShapeInfo, *, fold: bool = True, kernels: str = "",
               caller: Mapping[str, str] | None = None, nodes: NodeFields | None = None) -> GraphView:
    """The planning view of ``model``'s top-level graph, with a view of every
    If/Loop/Scan body nested in it (:attr:`GraphView.bodies`). ``fold``: constant
    folding (see the module docstring), at every level: a body's node computed only
    from weights (its own, or the enclosing graphs' weights it reads) is folded too.
    ``kernels``: :attr:`GraphView.kernels` of every level. ``caller``: the graph inputs that are
    the caller's state, with their reasons (default: :func:`onnxmem.model.roles.caller_state` of
    ``model``; the graph onnxruntime built from a training graph takes its source's, which its
    optimizer may make unrecognizable: a loss function expanded into its ops). ``nodes``: the
    top-level graph's :class:`~onnxmem.model.NodeFields` where the caller read them
    (:func:`~onnxmem.model.read_nodes`, for shape inference too); read here otherwise.

    Raises ``ModelError`` for a node input nothing produces, a value produced
    twice, or a graph output nothing produces; ``ShapeError`` for a body value
    whose size static inference could not find.
    """
    opset = opset_version(model)
    state = caller_state(model) if caller is None else dict(caller)
    fields = read_nodes(model.graph, shapes.shapes, given=nodes)
    return _build_level(model.graph, _Level("", (), {}, frozenset(), False, fold, state, kernels),
                        shapes, opset, fields)


@dataclass(frozen=True, slots=True)
class _Level:
    """Where a graph sits: its path and key, the enclosing values it may read
    (``outer``: name -> the enclosing level's record), which of them are weights,
    and whether its formal inputs are carried slots (Loop and Scan bodies)."""

    path: str
    key: BodyKey
    outer: Mapping[str, Tensor]
    outer_weights: frozenset[str]
    carried: bool
    #: constant folding beyond constants and views of weights (``--fold``)
    fold: bool = False
    #: the caller's state of a training graph (main graph only): name -> reason
    caller: Mapping[str, str] = field(default_factory=dict)
    #: :attr:`GraphView.kernels`
    kernels: str = ""


def _branch_hint(level: _Level) -> str:
    """The unbound-size message's advice for an If branch: give shapes at which both run,
    or leave this one out with ``--branch`` (the ready flag)."""
    attr = level.key[-1][1] if level.key else ""
    if attr not in ("then_branch", "else_branch"):
        return ""
    owner = level.path.rsplit("/", 1)[0]
    other = "else" if attr == "then_branch" else "then"
    return ("; both branches of an If are planned, so give input shapes at which each branch can run, or, "
            f"if no run at these shapes takes this branch, leave it out: --branch {flag_value(owner, '%')}={other}")


def body_kind(op: Op, opset: int) -> str | None:
    """``"if"``, ``"loop"`` or ``"scan"`` for a node whose bodies onnxmem plans and runs
    (Scan from opset 9 on: opset 8's batched form is not), else ``None``."""
    if op.domain not in ("", "ai.onnx"):
        return None
    if op.op_type == "If":
        return "if"
    if op.op_type == "Loop":
        return "loop"
    if op.op_type == "Scan" and opset >= 9:
        return "scan"
    return None


def _build_level(g: onnx.GraphProto, level: _Level, shapes: ShapeInfo, opset: int,
                 fields: NodeFields | None = None) -> GraphView:
    """The view of graph ``g`` at ``level``, and of its bodies, recursively: its nodes, their
    inputs' and outputs' counts (:func:`onnxmem.model.arity.check_node_arity`) and their producers
    checked (:func:`_level_nodes`), the enclosing values it reads
    (:func:`_outer_reads`), its weights (:func:`_weight_origins`), its tensors
    (:func:`_level_tensors`), then its bodies (:func:`_level_bodies`). ``fields``: ``g``'s
    node fields (the top level's; a body's nodes are read from its messages)."""
    where = f" of subgraph {show_name(level.path)}" if level.path else ""
    nodes = _level_nodes(g, level, flat=shapes.flat and not level.path, fields=fields)
    check_node_arity(((op.name, op.op_type, op.domain, op.inputs, len(op.outputs)) for op in nodes.ops), opset, where)
    outputs = tuple(vi.name for vi in g.output)
    outer_read = _outer_reads(g, nodes, outputs, level, where)
    origin, done = _weight_origins(nodes, outer_read, level, _sizer(level, shapes))
    consumers: dict[str, list[int]] = {}
    for op in nodes.ops:
        for n in op.reads:
            consumers.setdefault(n, []).append(op.index)
    tensors = _level_tensors(nodes, outputs, origin, outer_read, level, shapes, where)
    true_weights = level.outer_weights | {n for n in origin if n in tensors or n in nodes.initializers}
    bodies = _level_bodies(g, nodes, level, {**level.outer, **tensors}, frozenset(true_weights), shapes, opset)
    # Loop and Scan bodies: formal inputs are the carried slots, live for the whole body
    pinned = tuple(n for n in nodes.inputs if n not in outputs) if level.carried else ()
    return GraphView(
        nodes.ops,
        tensors,
        nodes.inputs,
        outputs + pinned,
        {k: tuple(v) for k, v in consumers.items()},
        weight_ops=tuple(sorted(done)),
        outside=dict(level.caller),
        path=level.path,
        outer=frozenset(outer_read),
        bodies=bodies,
        kernels=level.kernels,
        nested=nodes.nested,
    )


@dataclass(frozen=True, slots=True)
class _Nodes:
    """A level's nodes and what defines each value: ``defined`` maps a value to its producer's
    index (``None`` for a graph input or initializer)."""

    ops: tuple[Op, ...]
    inputs: tuple[str, ...]  # the level's inputs (a body's formal inputs; the main graph's non-weights)
    initializers: frozenset[str]  # initializers that are not inputs
    defined: Mapping[str, int | None]
    nested: tuple[int, ...] = ()  # the nodes that hold subgraphs, in node order


def _level_nodes(g: onnx.GraphProto, level: _Level, *, flat: bool = False, fields: NodeFields | None = None) -> _Nodes:
    """``g``'s nodes as :class:`Op` records (captures included) and the producer of every
    value; a value written twice is a ``ModelError`` (SSA). ``flat``: no node of ``g`` holds a
    subgraph (its attributes are not read for one); ``fields``: ``g``'s node fields, where read
    (the records take their tuples, and so their names' str objects: one per name)."""
    fields = read_nodes(g, given=fields)
    names = node_names(g)
    init_names = set(fields.initializers)
    defined: dict[str, int | None] = dict.fromkeys(fields.initializers)
    inputs: list[str] = []
    for name in fields.graph_inputs:
        if name not in init_names or level.path:
            inputs.append(name)
            defined[name] = None
    ops: list[Op] = []
    nested: list[int] = []  # the nodes that hold subgraphs
    protos = itertools.repeat(None) if flat else g.node
    for i, (node, op_type, domain, ins, outs) in enumerate(
            zip(protos, fields.op_types, fields.domains, fields.inputs, fields.outputs)):
        captures: tuple[str, ...] = ()
        subs = node_subgraphs(node) if node is not None else ()
        if subs:
            nested.append(i)
            caps: dict[str, None] = {}
            for sub in subs:
                caps.update(dict.fromkeys(outer_scope_reads(sub)))
            captures = tuple(caps)
        op = Op(i, names[i], op_type, domain, ins, outs, captures)
        ops.append(op)
        for o in outs:
            if not o:
                continue
            if o in defined:
                what = "a graph input or initializer" if defined[o] is None else f"node {show_name(names[defined[o]])}"  # type: ignore[index]
                raise ModelError(
                    f"value {show_name(o)} is written by node {show_name(names[i])} and also by {what}; "
                    "every value must have one producer (SSA)"
                )
            defined[o] = i
    return _Nodes(tuple(ops), tuple(inputs), frozenset(init_names - set(inputs)), defined, tuple(nested))


def _written_in(graph: onnx.GraphProto, name: str) -> bool:
    """Whether a node of ``graph`` or of a graph nested in it writes ``name``."""
    return any(name in node.output or any(_written_in(sub, name) for sub in node_subgraphs(node))
               for node in graph.node)


def _outer_reads(g: onnx.GraphProto, nodes: _Nodes, outputs: tuple[str, ...], level: _Level,
                 where: str) -> dict[str, None]:
    """The enclosing values the level reads (in first-read order); a value read or output
    that nothing defines, here or in the enclosing levels, is a ``ModelError``."""
    outer_read: dict[str, None] = {}
    for op in nodes.ops:
        for n in op.reads:
            if n not in nodes.defined:
                if n in level.outer:
                    outer_read[n] = None
                    continue
                kind = "captured by a subgraph of" if n in op.captures and n not in op.inputs else "read by"
                if kind != "read by" and any(_written_in(sub, n) for sub in node_subgraphs(g.node[op.index])):
                    raise ModelError(
                        f"value {show_name(n)} is read in a subgraph of node {show_name(op.name)} "
                        f"({show_name(op.op_type)}){where} before the node there that writes it; ONNX keeps "
                        "every graph's nodes in topological order (onnxruntime refuses such a subgraph): "
                        "sort the subgraph's nodes"
                    )
                raise ModelError(
                    f"value {show_name(n)} {kind} node {show_name(op.name)} ({flag_value(op.op_type)}){where} is produced by no node, "
                    "input or initializer; fix the model"
                )
    for o in outputs:
        if o not in nodes.defined:
            if o in level.outer:
                outer_read[o] = None
                continue
            raise ModelError(f"graph output {show_name(o)}{where} is produced by no node or input; fix the model")
    return outer_read


def _weight_origins(nodes: _Nodes, outer_read: Mapping[str, None], level: _Level,
                    size: Callable[[str], int | None]) -> tuple[dict[str, str], set[int]]:
    """``({weight: its origin}, indices of the nodes computed once)``: initializers, enclosing
    weights a body reads, the caller's state of a training graph, and values computed once
    from weights (node order may not be topological: repeat until nothing more folds), none
    whose outputs outgrow the stored weights it is computed from (:func:`_outgrows`)."""
    origin: dict[str, str] = dict.fromkeys(nodes.initializers, "initializer")
    for n in set(outer_read) & level.outer_weights:
        origin.setdefault(n, "outer")
    origin.update((n, "caller") for n in level.caller if n not in origin)
    candidates = [op for op in nodes.ops if foldable(op, fold=level.fold) and any(op.outputs)]
    done: set[int] = set()
    stored: dict[str, frozenset[str]] = {}  # a folded value -> the stored weights it is computed from
    grown = True
    while grown:
        grown = False
        for op in candidates:
            if op.index in done or not all(n in origin for n in op.reads):
                continue
            if op.op_type not in CONSTANT_OPS and any(origin[n] == "caller" for n in op.reads):
                continue  # the caller's state changes between runs: only views of it are weights
            if op.op_type not in ("Constant", "ConstantOfShape"):
                src = frozenset().union(*(stored.get(n, frozenset((n,))) for n in op.reads))
                if op.op_type not in CONSTANT_OPS and _outgrows(op, src, size):
                    continue  # it runs at run time: its outputs are activations
                stored.update((o, src) for o in op.outputs if o)
            done.add(op.index)
            why = "constant" if op.op_type == "Constant" else "folded"
            origin.update((o, why) for o in op.outputs if o)
            grown = True
    return origin, done


def _outgrows(op: Op, stored: frozenset[str], size: Callable[[str], int | None]) -> bool:
    """Whether ``op``'s outputs take more bytes than the stored weights ``stored`` they are
    computed from (``False`` when a size is unknown: folded as before)."""
    out = [size(o) for o in op.outputs if o]
    src = [size(n) for n in stored]
    if any(b is None for b in out) or any(b is None for b in src):
        return False
    return sum(b or 0 for b in out) > sum(b or 0 for b in src)


def _sizer(level: _Level, shapes: ShapeInfo) -> Callable[[str], int | None]:
    """The bytes of a value of ``level`` by name, from ``shapes`` (``None``: not known, or a
    string tensor); an enclosing value a body reads has its enclosing record's size."""
    found = shapes.bodies.get(level.key, {}) if level.path else None

    def size(name: str) -> int | None:
        if name in level.outer:
            return level.outer[name].size
        if found is not None:
            et, shape = found[name] if name in found else (None, None)
        else:
            et, shape = shapes.dtypes.get(name), shapes.shapes.get(name)
        if et is None or shape is None or et == onnx.TensorProto.STRING:
            return None
        return tensor_bytes(et, shape, name)

    return size


def _level_tensors(nodes: _Nodes, outputs: tuple[str, ...], origin: Mapping[str, str],
                   outer_read: Mapping[str, None], level: _Level, shapes: ShapeInfo,
                   where: str) -> dict[str, Tensor]:
    """A :class:`Tensor` for every value the level defines (sized from ``shapes``) and for
    every enclosing value it reads (kind ``weight``: outside this level's arena)."""
    if level.path:
        found = shapes.bodies.get(level.key, {})
        dtypes = {k: v[0] for k, v in found.items()}
        sizes = {k: v[1] for k, v in found.items()}
    else:
        dtypes, sizes = shapes.dtypes, shapes.shapes
    tensors: dict[str, Tensor] = {}
    out_set = set(outputs)
    sized: dict[tuple[int, tuple[int, ...]], tuple[str, int]] = {}  # (dtype, shape) -> (dtype name, bytes)
    for name, prod in nodes.defined.items():
        if name not in sizes:
            if name in nodes.initializers or name in origin:
                continue  # an unused weight whose shape is unknown: not planned
            if level.path:
                raise ShapeError(
                    f"value {show_name(name)}{where} has no static size: shape inference could not resolve "
                    "its shape (it depends on data, or changes from one iteration to the next); bind the "
                    "graph inputs' dims (--input-shape, --dim) or declare its shape in the subgraph's value_info "
                    "(--measure-shapes measures the main graph's values; a body is sized from those it reads)"
                    + _branch_hint(level)
                )
            raise ModelError(f"no shape was found for value {show_name(name)}")
        et, shape = dtypes[name], sizes[name]
        kind = _tensor_kind(name, prod, name in origin, name in nodes.inputs, name in out_set, bool(level.path))
        # the first value of each dtype and shape is checked and sized, the others share it
        dtype, size = ((dtype_name(et), 0) if kind == "weight" and et == onnx.TensorProto.STRING
                       else sized.get((et, shape)) or _sized(sized, et, shape, name))
        tensors[name] = Tensor(name, et, dtype, shape, size, kind, prod, origin.get(name, ""))
    for name in outer_read:
        t = level.outer[name]
        tensors[name] = Tensor(name, t.elem_type, t.dtype, t.shape, t.size, "weight", None)
    return tensors


def _sized(sized: dict[tuple[int, tuple[int, ...]], tuple[str, int]], et: int, shape: tuple[int, ...],
           name: str) -> tuple[str, int]:
    """``(dtype name, bytes)`` of a value of dtype ``et`` and ``shape``, kept in ``sized``."""
    nbytes = tensor_bytes(et, shape, name)  # checks the shape first, then the dtype
    found = sized[et, shape] = (dtype_name(et), nbytes)
    return found


def _tensor_kind(name: str, producer: int | None, weight: bool, is_input: bool, is_output: bool,
                 in_body: bool) -> str:
    """A value's kind (see :class:`Tensor`): a weight; a body's formal input; a graph output;
    a graph input; else an activation."""
    if weight:
        return "weight"
    if producer is None and is_input and in_body:
        return "input"
    if is_output:
        return "output"
    return "input" if producer is None else "activation"


def _state_count(node: onnx.NodeProto, sub: onnx.GraphProto, kind: str) -> int:
    """How many values a Loop carries (its body's inputs past the iteration number and
    condition) or a Scan keeps as state (its inputs past ``num_scan_inputs``); 0 for an If."""
    if kind == "loop":
        return max(len(sub.input) - 2, 0)
    if kind == "scan":
        scans = next((int(a.i) for a in node.attribute if a.name == "num_scan_inputs"), len(node.input))
        return max(len(node.input) - scans, 0)
    return 0


def _iterations(key: BodyKey, shapes: ShapeInfo) -> Mapping[str, tuple[int, ...]]:
    """The per-iteration bytes of the values of the body at ``key``, from the growing Loop that holds it."""
    for bound in shapes.loops.values():
        if key in bound.sizes:
            return bound.sizes[key]
    return {}


def _level_bodies(g: onnx.GraphProto, nodes: _Nodes, level: _Level, visible: Mapping[str, Tensor],
                  true_weights: frozenset[str], shapes: ShapeInfo, opset: int) -> dict[int, tuple[Body, ...]]:
    """The views of the bodies onnxmem plans (:func:`body_kind`), by owning node index; an If
    branch ``shapes`` excludes (``--branch``) is left out."""
    bodies: dict[int, tuple[Body, ...]] = {}
    for index in nodes.nested:
        op, node = nodes.ops[index], g.node[index]
        subs = subgraph_attributes(node)
        bkind = body_kind(op, opset)
        if not subs or bkind is None:
            continue
        owner = child_path(level.path, op.name)
        made: list[Body] = []
        for attr, sub in subs:
            child = _Level(f"{owner}/{attr}", (*level.key, (owner_key(node, op.index), attr)), visible,
                           true_weights, bkind != "if", level.fold, kernels=level.kernels)
            if child.key in shapes.excluded:
                continue  # --branch: runs take the other branch; this one is not planned
            made.append(Body(child.path, op.index, attr, bkind, _build_level(sub, child, shapes, opset),
                             _state_count(node, sub, bkind), shapes.loops.get(child.key),
                             _iterations(child.key, shapes)))
        bodies[op.index] = tuple(made)
    return bodies
