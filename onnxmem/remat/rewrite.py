"""The rewritten model: duplicated producers right before the reads they serve.

:func:`rewrite_model` turns a :class:`~onnxmem.remat.problem.Schedule` into a
model: nodes in the order the problem was built for; before step ``s``, a copy
of the producer of every dropped value recomputed there (in the order of the
original producers), named ``<node>__remat`` and writing ``<value>__remat``
(a number is added when a name is taken); every read after a value's gap
reads the copy. A duplicate of a node with several outputs writes each of
the others under a fresh name of the same form that nothing reads (they die
at once; BatchNormalization's running statistics so never reach what the
caller keeps). The graph's inputs, outputs, initializers and value infos are
kept; every output of a duplicate gets its original's value info.

An original whose outputs nothing reads any more (a value dropped right after its
write: every read is after the gap, as a weight gradient written long before its
accumulator) is left out, and so are, in turn, originals only such nodes read: the
value is computed once, by its duplicate, which then writes it under its own name
(no ``__remat``), so the rewritten model names every value as the original does.
Only originals of recomputed nodes are left out; a node the model file already left
unread stays.

An optional output that nothing reads (MaxPool's ``Indices``, a duplicate's extra
outputs, for ops whose ONNX schema says so) is left unnamed (``""``): onnxruntime holds a
written output that nothing reads until the end of the run, where onnxmem's plan frees it
at once (docs/remat.md, what onnxruntime allocates beyond the plan). The ops of
:data:`OUTPUT_COUNT_MATTERS` keep every output: their number of outputs selects what they
compute, or whether onnxruntime loads them at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from onnxmem.graph import GraphView
from onnxmem.model import body_captures, iter_graphs
from onnxmem.remat.pin import pin_duplicates
from onnxmem.remat.problem import RematProblem, Schedule
from onnxmem.scheduling.onnxruntime import onnxruntime_order
from onnxmem.shapes import opset_version

__all__ = ["OUTPUT_COUNT_MATTERS", "PIN_SUFFIX", "SUFFIX", "left_out", "omit_unread_outputs", "rewrite_model"]

SUFFIX = "__remat"
#: the names of what a pin adds (:mod:`onnxmem.remat.pin`) end with it
PIN_SUFFIX = "__pin"
#: ai.onnx ops whose unread optional outputs stay named: BatchNormalization below opset 14 runs
#: in training mode (batch statistics) when it has more than one output (onnxruntime's
#: ``BatchNorm`` kernel: ``is_train_ = OutputCount() > 1``), and from opset 14 with
#: ``training_mode = 1`` it must have 3 outputs (onnxruntime refuses to load it otherwise)
OUTPUT_COUNT_MATTERS = frozenset({"BatchNormalization"})


def rewrite_model(model: onnx.ModelProto, view: GraphView, problem: RematProblem, schedule: Schedule, *,
                  pin: bool = True, layout: Sequence[int] | None = None) -> onnx.ModelProto:
    """``model`` with the recomputation of ``schedule`` written in (module doc); ``pin``: each
    block of duplicates made to wait for the value written right before it
    (:func:`~onnxmem.remat.pin.pin_duplicates`), so that onnxruntime runs it there too;
    ``layout``: the order to write the original nodes in (view op indices; the problem's
    ``layout``, else its order), each block of duplicates right before the node it was
    scheduled before."""
    p = problem
    taken = _names(model, view)

    def fresh(base: str, suffix: str = SUFFIX) -> str:
        name, k = base + suffix, 1
        while name in taken:
            k += 1
            name = f"{base}{suffix}{k}"
        taken.add(name)
        return name

    at = {v: s for v, s in schedule.at.items() if s < p.steps}
    copy_name = {v: fresh(p.name[v]) for v in sorted(at)}
    by_name = {p.name[v]: v for v in at}
    # step -> producer -> its values recomputed there: one duplicate of the producer writes them all
    before: dict[int, dict[int, list[int]]] = {}
    for v in sorted(at, key=lambda v: (p.start[v], v)):
        before.setdefault(at[v], {}).setdefault(p.producer[v], []).append(v)

    def reads_copy(value: str, step: int) -> str:
        """The name a node at ``step`` (or a duplicate run before it) reads for ``value``."""
        v = by_name.get(value)
        if v is None or step <= p.last_pre[v]:
            return value
        return copy_name[v]

    nodes = list(model.graph.node)
    renamed: list[tuple[str, str]] = []  # (original output, the name a duplicate writes it under)
    duplicates: set[str] = set()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    step_of = {op: s for s, op in enumerate(p.order)}
    layout = layout or p.layout or None
    for op_index in layout if layout is not None else p.order:
        s = step_of[op_index]
        for producer, vs in before.get(s, {}).items():
            mine = {p.name[w]: copy_name[w] for w in vs}
            src = nodes[view.ops[p.order[producer]].index]
            dup = onnx.NodeProto()
            dup.CopyFrom(src)
            dup.name = fresh(view.ops[p.order[producer]].name)
            duplicates.add(dup.name)
            written = [mine[o] if o in mine else (fresh(o) if o else "") for o in src.output]
            del dup.output[:]
            dup.output.extend(written)
            renamed.extend((o, w) for o, w in zip(src.output, written) if o and o not in mine)
            dup.input[:] = [reads_copy(x, s) if x else x for x in src.input]
            out.graph.node.append(dup)
        node = onnx.NodeProto()
        node.CopyFrom(nodes[op_index])
        node.name = view.ops[op_index].name
        node.input[:] = [reads_copy(x, s) if x else x for x in node.input]
        out.graph.node.append(node)
    if layout is not None:
        _sort_topologically(out.graph)
    originals = {view.ops[p.order[p.producer[v]]].name for v in at}
    for value in sorted(_drop_unread(out.graph, originals) & set(by_name)):
        _rename(out.graph, copy_name[by_name[value]], value)
        copy_name[by_name[value]] = value
    _value_infos(out, model, [(p.name[v], name) for v, name in copy_name.items()] + renamed)
    omit_unread_outputs(out.graph, opset_version(out))
    if pin:
        shapes = {n: (t.elem_type, t.shape) for n, t in view.tensors.items()}
        shapes.update({name: shapes[p.name[v]] for v, name in copy_name.items() if p.name[v] in shapes})
        pin_duplicates(out.graph, duplicates, shapes, lambda base: fresh(base, PIN_SUFFIX), opset=opset_version(out))
    return out


def _names(model: onnx.ModelProto, view: GraphView) -> set[str]:
    """Every value and node name of ``model``'s graph and of its bodies (a graph and its bodies
    share one namespace: a fresh name must be new to all of them) and of ``view``."""
    taken = {n for n in view.tensors} | {op.name for op in view.ops}
    for g in iter_graphs(model.graph):
        for node in g.node:
            taken.update(node.output)
            taken.add(node.name)
        taken.update(v.name for v in list(g.input) + list(g.output) + list(g.value_info))
        taken.update(t.name for t in g.initializer)
        taken.update(t.values.name for t in g.sparse_initializer)
    return taken


def _value_infos(out: onnx.ModelProto, model: onnx.ModelProto, pairs: list[tuple[str, str]]) -> None:
    """Every ``(original, name)`` of ``pairs`` gets the original's value info under ``name``."""
    infos = {vi.name: vi for vi in list(model.graph.output) + list(model.graph.value_info)}
    for original, name in pairs:
        if original in infos and name != original:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(infos[original])
            vi.name = name
            out.graph.value_info.append(vi)


def _sort_topologically(graph: onnx.GraphProto) -> None:
    """``graph``'s nodes in a topological order, each as early in the file as it can be (a
    duplicate that another duplicate reads may sit later in a layout than in the problem's order)."""
    nodes = list(graph.node)
    writer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    producers = [[writer[x] for x in n.input if x in writer] for n in nodes]
    order = onnxruntime_order(["" for _ in nodes], producers, "priority")
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)


def _drop_unread(graph: onnx.GraphProto, candidates: set[str]) -> set[str]:
    """Remove from ``graph`` the nodes named in ``candidates`` whose outputs nothing reads
    (no node, no subgraph, not a graph output), last first so that a chain goes at once;
    the outputs of the removed nodes."""
    read = {o.name for o in graph.output} | body_captures(graph)
    kept: list[onnx.NodeProto] = []
    gone: set[str] = set()
    for node in reversed(graph.node):
        if node.name in candidates and not any(o and o in read for o in node.output):
            gone.update(o for o in node.output if o)
            continue
        kept.append(node)
        read.update(node.input)
    if gone:
        del graph.node[:]
        graph.node.extend(reversed(kept))
    return gone


def omit_unread_outputs(graph: onnx.GraphProto, opset: int) -> int:
    """Leave unnamed (``""``) every output of ``graph``'s nodes that nothing reads (no node, no
    subgraph, not a graph output) and that the op's ONNX schema at ``opset`` marks optional
    (ops of other domains, those of :data:`OUTPUT_COUNT_MATTERS`, or without a schema there,
    keep theirs); trailing unnamed outputs
    are dropped, and so are the value infos of the outputs left unnamed. Returns their number."""
    read = {o.name for o in graph.output} | body_captures(graph)
    for node in graph.node:
        read.update(node.input)
    gone: set[str] = set()
    for node in graph.node:
        if (node.domain not in ("", "ai.onnx") or node.op_type in OUTPUT_COUNT_MATTERS
                or all(o in read for o in node.output if o)):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            continue
        optional = [f.option == onnx.defs.OpSchema.FormalParameterOption.Optional for f in schema.outputs]
        names = list(node.output)
        for i, name in enumerate(names):
            if name and name not in read and i < len(optional) and optional[i]:
                names[i] = ""
                gone.add(name)
        while names and not names[-1]:
            names.pop()
        node.output[:] = names
    kept = [vi for vi in graph.value_info if vi.name not in gone]
    if len(kept) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(kept)
    return len(gone)


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every write and read of ``old`` in ``graph``'s nodes under ``new``."""
    for node in graph.node:
        node.output[:] = [new if o == old else o for o in node.output]
        node.input[:] = [new if i == old else i for i in node.input]


def left_out(view: GraphView, rewritten: onnx.ModelProto) -> list[int]:
    """The nodes of ``view`` (op indices) that ``rewritten`` left out (module doc): their
    duplicates run once, later, and cost nothing extra."""
    kept = {n.name for n in rewritten.graph.node}
    return [op.index for op in view.ops if op.name not in kept]
