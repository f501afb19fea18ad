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
"""

from __future__ import annotations

import onnx

from onnxmem.graph import GraphView
from onnxmem.remat.problem import RematProblem, Schedule

__all__ = ["rewrite_model"]

SUFFIX = "__remat"


def rewrite_model(model: onnx.ModelProto, view: GraphView, problem: RematProblem, schedule: Schedule) -> onnx.ModelProto:
    """``model`` with the recomputation of ``schedule`` written in (module doc)."""
    p = problem
    taken = {n for n in view.tensors} | {op.name for op in view.ops}
    for node in model.graph.node:
        taken.update(node.output)

    def fresh(base: str) -> str:
        name, k = base + SUFFIX, 1
        while name in taken:
            k += 1
            name = f"{base}{SUFFIX}{k}"
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
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for s, op_index in enumerate(p.order):
        for producer, vs in before.get(s, {}).items():
            mine = {p.name[w]: copy_name[w] for w in vs}
            src = nodes[view.ops[p.order[producer]].index]
            dup = onnx.NodeProto()
            dup.CopyFrom(src)
            dup.name = fresh(view.ops[p.order[producer]].name)
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
    infos = {vi.name: vi for vi in list(model.graph.output) + list(model.graph.value_info)}
    for original, name in [(p.name[v], name) for v, name in copy_name.items()] + renamed:
        if original in infos:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(infos[original])
            vi.name = name
            out.graph.value_info.append(vi)
    return out
