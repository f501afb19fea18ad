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
``ShapeInfo.bodies``. :func:`with_regions` adds the *region* an owning node's
bodies run in (see :mod:`onnxmem.planning.bodies`). Each node gets a unique name (the
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
:func:`onnxmem.model.roles.caller_state`) are weights too, of origin
``caller``: outside the arena, like initializers, and never folded into
anything but a view (they change between runs). ``GraphView.outside`` lists
them with their reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, TypeVar

import onnx

from onnxmem.core.errors import ModelError, ShapeError, flag_value, show_name
from onnxmem.model import (
    OTHER_BRANCH,
    BodyKey,
    caller_state,
    dtype_name,
    owner_key,
    subgraph_attributes,
    tensor_bytes,
)
from onnxmem.shapes import ShapeInfo, opset_version

__all__ = ["BRANCH_NAMES", "ORIGINS", "Body", "GraphView", "Op", "Tensor", "body_kind", "bound_outputs", "build_view",
           "child_path", "excluded_branches", "foldable", "if_nodes", "iter_views", "outer_scope_reads",
           "with_regions"]

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
    #: the graph's path: ``""`` for the main graph, ``If_0/then_branch``, ``Loop_3/body/If_1/else_branch``
    path: str = ""
    #: values of enclosing graphs this (sub)graph reads (kind ``weight`` here: not in its arena)
    outer: frozenset[str] = frozenset()
    #: data derived from the view, computed on first use (the view is read-only): see :meth:`memo`
    _memo: dict[object, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    #: node index -> the views of its planned bodies (If branches, Loop and Scan bodies)
    bodies: Mapping[int, tuple["Body", ...]] = field(default_factory=dict, init=False, compare=False, repr=False)
    #: node index -> the name of its region tensor (see :func:`with_regions`)
    regions: Mapping[int, str] = field(default_factory=dict, init=False, compare=False, repr=False)
    #: region name -> ``{If output: its offset in the region}`` for an If whose branches write
    #: their outputs inside its region (see :func:`with_regions` and :mod:`onnxmem.planning.bodies`)
    region_outputs: Mapping[str, Mapping[str, int]] = field(default_factory=dict, init=False, compare=False,
                                                           repr=False)

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


@dataclass(frozen=True, slots=True)
class Body:
    """One planned subgraph: ``path`` names it (``If_0/then_branch``), ``owner``
    is the owning node's index in the parent view, ``attr`` the attribute that
    holds it, ``kind`` ``if``, ``loop`` or ``scan``, ``view`` its own view."""

    path: str
    owner: int
    attr: str
    kind: str
    view: GraphView


def iter_views(view: GraphView) -> Iterable[GraphView]:
    """``view`` and the views of every body nested in it, outermost first."""
    stack = [view]
    while stack:
        v = stack.pop()
        yield v
        for index in sorted(v.bodies, reverse=True):
            stack.extend(b.view for b in reversed(v.bodies[index]))


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
    """The planning view of ``model``'s top-level graph, with a view of every
    If/Loop/Scan body nested in it (:attr:`GraphView.bodies`). ``fold``: constant
    folding (see the module docstring), at every level: a body's node computed only
    from weights (its own, or the enclosing graphs' weights it reads) is folded too.

    Raises ``ModelError`` for a node input nothing produces, a value produced
    twice, or a graph output nothing produces; ``ShapeError`` for a body value
    whose size static inference could not find.
    """
    opset = opset_version(model)
    return _build_level(model.graph, _Level("", (), {}, frozenset(), False, fold, caller_state(model)), shapes, opset)


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


def _build_level(g: onnx.GraphProto, level: _Level, shapes: ShapeInfo, opset: int) -> GraphView:
    names = node_names(g)
    init_names = {i.name for i in g.initializer}
    defined: dict[str, int | None] = {n: None for n in init_names}
    inputs: list[str] = []
    for vi in g.input:
        if vi.name not in init_names or level.path:
            inputs.append(vi.name)
            defined[vi.name] = None
    init_names -= set(inputs)
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
    where = f" of subgraph {show_name(level.path)}" if level.path else ""
    outer_read: dict[str, None] = {}
    for op in ops:
        for n in op.reads:
            if n not in defined:
                if n in level.outer:
                    outer_read[n] = None
                    continue
                kind = "captured by a subgraph of" if n in op.captures and n not in op.inputs else "read by"
                raise ModelError(
                    f"value '{n}' {kind} node '{op.name}' ({op.op_type}){where} is produced by no node, "
                    "input or initializer; fix the model"
                )
    outputs = tuple(vi.name for vi in g.output)
    for o in outputs:
        if o not in defined:
            if o in level.outer:
                outer_read[o] = None
                continue
            raise ModelError(f"graph output '{o}'{where} is produced by no node or input; fix the model")

    # weights: initializers, enclosing weights a body reads, the caller's state of a
    # training graph, and values computed once from weights (node order may not be
    # topological: repeat until nothing more folds)
    origin: dict[str, str] = dict.fromkeys(init_names, "initializer")
    for n in set(outer_read) & level.outer_weights:
        origin.setdefault(n, "outer")
    origin.update((n, "caller") for n in level.caller if n not in origin)
    candidates = [op for op in ops if foldable(op, fold=level.fold) and any(op.outputs)]
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

    if level.path:
        found = shapes.bodies.get(level.key, {})
        dtypes = {k: v[0] for k, v in found.items()}
        sizes = {k: v[1] for k, v in found.items()}
    else:
        dtypes, sizes = shapes.dtypes, shapes.shapes
    tensors: dict[str, Tensor] = {}
    out_set = set(outputs)
    for name, prod in defined.items():
        if name not in sizes:
            if name in init_names or name in weight:
                continue  # an unused weight whose shape is unknown: not planned
            if level.path:
                raise ShapeError(
                    f"value {show_name(name)}{where} has no static size: shape inference could not resolve "
                    "its shape (it depends on data, or changes from one iteration to the next); bind the "
                    "graph inputs' dims (--input-shape, --dim) or declare its shape in the subgraph's value_info "
                    "(--measure-shapes measures the main graph's values; a body is sized from those it reads)"
                    + _branch_hint(level)
                )
            raise ModelError(f"no shape was found for value '{name}'")
        et = dtypes[name]
        shape = sizes[name]
        if name in weight:
            kind = "weight"
        elif prod is None and name in inputs and level.path:
            kind = "input"
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
    for name in outer_read:  # enclosing values: outside this level's arena, like weights
        t = level.outer[name]
        tensors[name] = Tensor(name, t.elem_type, t.dtype, t.shape, t.size, "weight", None)
    # Loop and Scan bodies: formal inputs are the carried slots, live for the whole body
    pinned = tuple(n for n in inputs if n not in out_set) if level.carried else ()
    view = GraphView(
        tuple(ops),
        tensors,
        tuple(inputs),
        outputs + pinned,
        {k: tuple(v) for k, v in consumers.items()},
        weight_ops=tuple(sorted(done)),
        outside=dict(level.caller),
        path=level.path,
        outer=frozenset(outer_read),
    )
    visible = {**level.outer, **tensors}
    true_weights = level.outer_weights | {n for n in weight if n in tensors or n in init_names}
    bodies: dict[int, tuple[Body, ...]] = {}
    for op, node in zip(ops, g.node):
        subs = subgraph_attributes(node)
        bkind = body_kind(op, opset)
        if not subs or bkind is None:
            continue
        owner = child_path(level.path, op.name)
        made: list[Body] = []
        for attr, sub in subs:
            child = _Level(f"{owner}/{attr}", (*level.key, (owner_key(node, op.index), attr)), visible,
                           frozenset(true_weights), bkind != "if", level.fold)
            if child.key in shapes.excluded:
                continue  # --branch: runs take the other branch; this one is not planned
            made.append(Body(child.path, op.index, attr, bkind, _build_level(sub, child, shapes, opset)))
        bodies[op.index] = tuple(made)
    object.__setattr__(view, "bodies", bodies)
    return view


def bound_outputs(parent: GraphView, body: Body, io: str = "internal") -> dict[str, str] | None:
    """``{branch output: If output}`` when an If branch can write its outputs straight into
    the If's own outputs (which ``parent`` plans), else ``None``.

    It can when every output the branch computes (not a value it passes through from
    outside or a weight) appears once among its outputs and its If output is an arena
    tensor of ``parent`` of the same size (``io``: the main graph's ``--io``; with
    ``external`` the main graph's outputs are the runtime's; ignored when ``parent``
    is a body). Such a branch plans no bytes for its outputs: they live at the If's
    outputs, which are live during the If's step and apart from its region.
    """
    if body.kind != "if":
        return None
    owner = parent.ops[body.owner]
    outs = body.view.outputs
    mapping: dict[str, str] = {}
    for k, o in enumerate(outs):
        t = body.view.tensors.get(o)
        if t is None or t.kind == "weight" or t.producer is None:
            continue
        y = owner.outputs[k] if k < len(owner.outputs) else ""
        ty = parent.tensors.get(y) if y else None
        if outs.count(o) > 1 or ty is None or ty.kind in ("weight", "region") or ty.size != t.size:
            return None
        if not parent.path and io == "external" and y in parent.outputs:
            return None
        mapping[o] = y
    return mapping or None


#: what ``--branch`` accepts for an If's branch, and the attribute each names
BRANCH_NAMES = {"then": "then_branch", "else": "else_branch", "then_branch": "then_branch",
                "else_branch": "else_branch"}


def if_nodes(model: onnx.ModelProto) -> dict[str, tuple[BodyKey, str]]:
    """Every If node of ``model`` at any level: ``{path: (the key of the graph holding it,
    its owner key)}``, the path as :func:`child_path` builds it (``If_0``,
    ``Loop_3/body/If_1``), outermost first."""
    out: dict[str, tuple[BodyKey, str]] = {}

    def walk(g: onnx.GraphProto, path: str, key: BodyKey) -> None:
        names = node_names(g)
        for i, node in enumerate(g.node):
            here = child_path(path, names[i])
            subs = subgraph_attributes(node)
            if node.op_type == "If" and node.domain in ("", "ai.onnx") and subs:
                out[here] = (key, owner_key(node, i))
            for attr, sub in subs:
                walk(sub, f"{here}/{attr}", (*key, (owner_key(node, i), attr)))

    walk(model.graph, "", ())
    return out


def excluded_branches(model: onnx.ModelProto, branches: Mapping[str, str]) -> frozenset[BodyKey]:
    """The keys of the If branches ``branches`` leaves out (``--branch``).

    ``branches``: ``{If node path: the branch runs take}`` (``then``/``else`` or
    ``then_branch``/``else_branch``); the other branch of each is excluded: not
    sized, not planned, its values listed under ``outside`` as ``excluded-branch``,
    and a run that takes it is refused by ``verify``. A path that names no If of
    the model, or a branch other than those, is a ``ModelError`` naming the If nodes.
    """
    if not branches:
        return frozenset()
    ifs = if_nodes(model)
    out: set[BodyKey] = set()
    for path, branch in branches.items():
        taken = BRANCH_NAMES.get(branch)
        if taken is None:
            raise ModelError(f"--branch {show_name(path)}={show_name(branch)}: the branch runs take must be "
                             "then or else")
        if path not in ifs:
            listing = ", ".join(map(show_name, list(ifs)[:12])) + (f" and {len(ifs) - 12} more" if len(ifs) > 12 else "")
            raise ModelError(f"--branch names {show_name(path)}, which is not an If node of the model; "
                             + (f"its If nodes are {listing}" if ifs else "it has no If node"))
        key, owner = ifs[path]
        out.add((*key, (owner, OTHER_BRANCH[taken])))
    return frozenset(out)


def child_path(parent: str, node_name: str) -> str:
    """The path of a node of the graph at ``parent``: ``parent/NAME`` (``NAME`` at the top),
    with ``%`` and ``/`` of the node's name escaped as ``%25`` and ``%2F``, so a path
    splits back into its parts at ``/``."""
    part = node_name.replace("%", "%25").replace("/", "%2F")
    return f"{parent}/{part}" if parent else part


def with_regions(view: GraphView, sizes: Mapping[str, int], *, recursive: bool = True,
                 inside: Mapping[str, Mapping[str, int]] | None = None) -> GraphView:
    """``view`` (and its bodies, recursively) with a *region* for each node whose bodies
    are planned: a tensor of kind ``region`` written by that node and read by none, so
    it is live during the node's step only, of ``sizes[owner path]`` bytes (the space its
    bodies run in). A node whose size is missing or 0 gets none. The region's name is
    ``<node name>:region`` (primes added while that names a value of the graph).
    ``recursive=False`` leaves the bodies' views as they are. ``inside``: ``{owner path:
    {If output: offset}}`` for Ifs whose branches write their outputs inside the region
    (:attr:`GraphView.region_outputs`; the liveness puts them in the region's group)."""
    ops = list(view.ops)
    tensors = dict(view.tensors)
    regions: dict[int, str] = {}
    region_outputs: dict[str, Mapping[str, int]] = {}
    bodies: dict[int, tuple[Body, ...]] = {}
    for index, bs in view.bodies.items():
        bodies[index] = tuple(replace(b, view=with_regions(b.view, sizes)) for b in bs) if recursive else bs
        op = view.ops[index]
        size = sizes.get(child_path(view.path, op.name), 0)
        if size <= 0:
            continue
        name = f"{op.name}:region"
        while name in tensors:
            name += "'"
        regions[index] = name
        placed = (inside or {}).get(child_path(view.path, op.name))
        if placed:
            region_outputs[name] = dict(placed)
        tensors[name] = Tensor(name, onnx.TensorProto.UINT8, "uint8", (size,), size, "region", index)
        ops[index] = Op(op.index, op.name, op.op_type, op.domain, op.inputs, op.outputs + (name,), op.captures)
    out = GraphView(tuple(ops), tensors, view.inputs, view.outputs, view.consumers, weight_ops=view.weight_ops,
                    outside=view.outside, path=view.path, outer=view.outer)
    object.__setattr__(out, "bodies", bodies)
    object.__setattr__(out, "regions", regions)
    object.__setattr__(out, "region_outputs", region_outputs)
    return out
