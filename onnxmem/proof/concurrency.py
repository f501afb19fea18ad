"""Rule 9 of the static proof of a point plan (:mod:`onnxmem.proof.plan`): concurrent execution.

A plan made for ``--concurrency dag`` must keep every pair of tensors that share a byte
apart under every schedule the graph allows: node ``a`` happens before ``b`` when a path of
dependences (values a subgraph captures included) leads from ``a`` to ``b``, recomputed here
as bits from the nodes' reads. A pair that breaks the rule is named with a schedule that
breaks it.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from onnxmem.analysis.happens_before import MAX_NODES
from onnxmem.graph import GraphView
from onnxmem.plans.point import MemoryPlan, PlannedTensor
from onnxmem.proof.finding import Finding
from onnxmem.proof.sharing import kept_bytes

__all__ = ["concurrency_findings"]


class _Dag:
    """Rule 9: happens-before as bits (``before[b]``: the nodes that happen before ``b``)."""

    def __init__(self, view: GraphView, order: Sequence[int]) -> None:
        self.view = view
        self.order = order
        n = len(view.ops)
        self.before = [0] * n
        for op_index in order:  # topological (rule 1)
            bits = 0
            for name in view.ops[op_index].reads:
                t = view.tensors.get(name)
                if t is not None and t.producer is not None and t.kind != "weight":
                    bits |= self.before[t.producer] | (1 << t.producer)
            self.before[op_index] = bits
        self.readers: dict[str, list[int]] = {}
        for op in view.ops:
            for name in op.reads:
                self.readers.setdefault(name, []).append(op.index)
        self.outputs = set(view.outputs)

    def hb(self, a: int | None, b: int | None) -> bool:
        """Node ``a`` happens before node ``b`` (``None``: a graph input's writer, before all)."""
        if b is None:
            return False
        return a is None or bool(self.before[b] >> a & 1)

    def done_before(self, u: str, node: int | None, allow: int | None = None) -> bool:
        """Every node that writes or reads ``u`` (but ``allow``) happens before ``node``."""
        if u in self.outputs or node is None:
            return False
        t = self.view.tensors[u]
        if not self.hb(t.producer, node):
            return False
        return all(r == allow or self.hb(r, node) for r in self.readers.get(u, ()))

    def schedule(self, a: int | None, b: int | None) -> tuple[list[int], int]:
        """An order the graph allows that runs ``a``, ``b`` and what they need first;
        ``(order, length of that prefix)``."""
        need = 0
        for x in (a, b):
            if x is not None:
                need |= self.before[x] | (1 << x)
        first = [i for i in self.order if need >> i & 1]
        rest = [i for i in self.order if not need >> i & 1]
        return first + rest, len(first)

    def live_after(self, u: str, prefix: set[int]) -> bool:
        return u in self.outputs or any(r not in prefix for r in self.readers.get(u, ()))


def concurrency_findings(plan: MemoryPlan, view: GraphView, order: Sequence[int], *, limit: int | None) -> list[Finding]:
    """Rule 9: a sweep over offsets finds every pair of tensors that share a byte. A model of more
    nodes than ``--concurrency dag`` plans for is one finding, with nothing computed: the pairs
    sharing bytes grow with the square of the nodes, and a plan file's claim is not a reason to
    take that long."""
    if len(view.ops) > MAX_NODES:
        return [Finding("mismatch", None, f"the plan records --concurrency dag, which holds for models of at most "
                        f"{MAX_NODES:,} nodes, and this one has {len(view.ops):,}: rule 9 cannot be checked; "
                        "re-plan with --concurrency sequential")]
    dag = _Dag(view, order)
    groups: dict[str, dict[str, PlannedTensor]] = {}
    for pt in plan.tensors:
        groups.setdefault(pt.group, {})[pt.name] = pt
    found: list[Finding] = []
    tensors = sorted((pt for pt in plan.tensors if pt.size > 0), key=lambda p: (p.offset, p.name))
    active: list[tuple[int, int, PlannedTensor]] = []  # (end byte, position, tensor): a min-heap
    for pos, t in enumerate(tensors):
        while active and active[0][0] <= t.offset:
            heapq.heappop(active)
        for _e, _p, u in active:
            finding = _dag_pair(dag, view, groups, u, t)
            if finding is not None:
                found.append(finding)
                if limit is not None and len(found) >= limit:
                    return found
        heapq.heappush(active, (t.offset + t.size, pos, t))
    return found


def _dag_pair(dag: _Dag, view: GraphView, groups: Mapping[str, Mapping[str, PlannedTensor]],
              u: PlannedTensor, t: PlannedTensor) -> Finding | None:
    """Rule 9 for one pair sharing bytes; ``None`` when the graph keeps it apart."""
    pu, pt = view.tensors[u.name].producer, view.tensors[t.name].producer
    if u.group != t.group:
        if dag.done_before(u.name, pt) or dag.done_before(t.name, pu):
            return None
        why = "neither is written and read before the other is written"
    else:
        if pu == pt:
            return None  # two outputs of one node: rule 5 judges them
        if dag.hb(pu, pt):
            first, second = u, t
        elif dag.hb(pt, pu):
            first, second = t, u
        elif _keeps(view, groups, u, t) and _keeps(view, groups, t, u):
            return None  # two views of one value (a gradient's Identity copies): neither changes a byte
        else:
            first, second = u, t
            why = "their writers are not ordered"
            return _dag_finding(dag, view, first, second, why)
        writer = view.tensors[second.name].producer
        assert writer is not None
        op = view.ops[writer]
        if _keeps(view, groups, second, first):
            return None  # a view, or a Concat over its own input: those bytes do not change
        if dag.done_before(first.name, writer, allow=writer):
            return None  # in place (rule 5 judges the kernel) after every other reader
        why = f"node {op.name!r} writes {second.name!r} over it while another reader may still run"
        return _dag_finding(dag, view, first, second, why)
    return _dag_finding(dag, view, u, t, why)


def _keeps(view: GraphView, groups: Mapping[str, Mapping[str, PlannedTensor]], y: PlannedTensor,
           other: PlannedTensor) -> bool:
    """Whether ``y``'s writer leaves the bytes ``y`` shares with ``other`` as they are."""
    writer = view.tensors[y.name].producer
    if writer is None:
        return False
    lo, hi = max(y.offset, other.offset), min(y.offset + y.size, other.offset + other.size)
    kept = kept_bytes(view, view.ops[writer], y, groups[y.group])
    return any(klo <= lo and hi <= khi for klo, khi in kept)


def _dag_finding(dag: _Dag, view: GraphView, u: PlannedTensor, t: PlannedTensor, why: str) -> Finding:
    pu, pt = view.tensors[u.name].producer, view.tensors[t.name].producer
    order, k = dag.schedule(pu, pt)
    names = tuple(view.ops[i].name for i in order)
    prefix = set(order[:k])
    lo, hi = max(u.offset, t.offset), min(u.offset + u.size, t.offset + t.size)

    def who(p: int | None) -> str:
        return "the graph input" if p is None else f"node {view.ops[p].name!r}"

    if dag.live_after(u.name, prefix) and dag.live_after(t.name, prefix):
        how = (f"run {who(pu)}, {who(pt)} and what they need first ({k} nodes: {', '.join(map(repr, names[:k][:8]))}"
               f"{', ...' if k > 8 else ''}): both are then live")
    else:
        how = f"run {who(pu)} and {who(pt)} at the same time"
    return Finding(
        "concurrency",
        t.name,
        f"tensors {u.name!r} and {t.name!r} share bytes [{lo}, {hi}) but the graph does not order them "
        f"({why}): a schedule that breaks the plan: {how}",
        node=view.ops[pt].name if pt is not None else None,
        other=u.name,
        byte_range=(lo, hi),
        schedule=names,
    )
