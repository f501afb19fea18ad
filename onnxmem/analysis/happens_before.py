"""Happens-before: which tensors the graph itself keeps apart, under any schedule.

A runtime that runs independent operators at once (onnxruntime's parallel
executor, CUDA streams, an inter-op thread pool, a compiler that reorders)
may execute any order the graph allows, several nodes at a time. A plan made
for one sequential order can then break: two tensors that the order kept
apart may be live together. ``--concurrency dag`` plans for every schedule:

* node ``a`` *happens before* node ``b`` when the graph has a path from ``a``
  to ``b`` (values a subgraph captures count as inputs of the owning node, so
  control-flow bodies order their readers too; weights order nothing);
* a buffer (one alias group of :mod:`onnxmem.analysis.liveness`) is *written* by the
  nodes that produce its members (none for a graph input, whose bytes are in
  use from the start) and *used* by those writers and by every node that
  reads a member (a graph output is in use to the end);
* buffer ``g`` *precedes* ``h`` when every node that uses ``g`` happens
  before every node that writes ``h``: then ``g`` is dead before ``h`` is
  born in every schedule, and only then may they share bytes.

:func:`dag_problem` states this as a problem with explicit conflicts
(:class:`onnxmem.core.conflict_graph.Precedence`): the nodes are the points, a buffer's
exits are the first nodes after all its uses (the minimal nodes that every
use happens before), its entries the last nodes before all its writers (the
maximal nodes that happen before, or are, every writer). Exact for buffers
with one writer and for groups whose writers form a chain (views, in-place
outputs); a group with writers on parallel branches (a Concat whose inputs
sit in its output) follows ``g`` only when one node lies after all of ``g``
and before all its writers, which can count a pair as a conflict that the
rule above would allow: safe, and the lower bound is that of the problem
solved.

Alias groups stay legal where the dependence makes them so:
:class:`HappensBefore` gives :mod:`onnxmem.analysis.aliasing` the rule "every other
reader of the group happens before this node" in place of "no later step
reads the group" (see :meth:`HappensBefore.read_after`); :func:`dag_liveness`
chooses among the Concat placements by the dag lower bound.

This module works on the top-level view (:class:`onnxmem.graph.view.GraphView`).
Costs: the reachability matrix is ``nodes^2`` booleans, built in one reverse
topological pass; the problem's conflict graph ``buffers^2`` (see
:mod:`onnxmem.core.conflict_graph`); models of more than :data:`MAX_NODES` nodes are
refused with a one-line error. The static proof (:mod:`onnxmem.proof.plan`) checks the
rule on a plan with its own, independent, computation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Sequence

import numpy as np

from onnxmem.analysis.aliasing import alias_layout
from onnxmem.analysis.liveness import AliasLayout, Liveness, build_liveness
from onnxmem.core.choices import CONCURRENCY_MODES
from onnxmem.core.conflict_graph import Conflicts, Precedence, reachability
from onnxmem.core.errors import ModelError
from onnxmem.core.problem import Problem, lower_bound
from onnxmem.graph import GraphView

__all__ = ["CONCURRENCY_MODES", "HappensBefore", "check_concurrency", "dag_liveness", "dag_problem",
           "happens_before"]


#: the most nodes happens-before is computed for (its matrix is nodes^2 bytes)
MAX_NODES = 10_000


def check_concurrency(mode: str) -> None:
    """Raise ``ModelError`` unless ``mode`` is one of :data:`CONCURRENCY_MODES`."""
    if mode not in CONCURRENCY_MODES:
        raise ModelError(f"--concurrency '{mode}' is not one of {', '.join(CONCURRENCY_MODES)}")


class HappensBefore:
    """The happens-before relation of a view's top-level nodes.

    ``reach[a, b]``: ``a`` is ``b`` or happens before it. ``edges``: the
    dependence edges ``(producer, reader)`` over non-weight values.
    """

    def __init__(self, view: GraphView) -> None:
        n = len(view.ops)
        if n > MAX_NODES:
            raise ModelError(f"the model has {n:,} nodes, more than the {MAX_NODES:,} --concurrency dag "
                             "orders; plan with --concurrency sequential")
        self.view = view
        self.n = n
        self.edges = tuple((p, op.index) for op in view.ops for p in view.predecessors(op.index))
        self.reach = reachability(n, self.edges)
        self._src = np.fromiter((a for a, _ in self.edges), dtype=np.int64, count=len(self.edges))
        self._dst = np.fromiter((b for _, b in self.edges), dtype=np.int64, count=len(self.edges))
        self._ancestors: list[int] | None = None

    def before(self, a: int, b: int) -> bool:
        """Node ``a`` happens before node ``b`` (a path of at least one edge)."""
        return a != b and bool(self.reach[a, b])

    def ancestor_bits(self, b: int) -> int:
        """The nodes that happen before ``b``, as bits of an int (bit ``a`` for node ``a``)."""
        if self._ancestors is None:
            packed = np.packbits(self.reach.T, axis=1, bitorder="little")
            self._ancestors = [int.from_bytes(row.tobytes(), "little") for row in packed]
            for i in range(self.n):
                self._ancestors[i] &= ~(1 << i)
        return self._ancestors[b]

    def read_after(self, readers: int, node: int) -> bool:
        """Whether some node in ``readers`` (bits) other than ``node`` may run after ``node``
        starts in some schedule: the dag form of "the group is read at a later step"."""
        return bool(readers & ~(self.ancestor_bits(node) | (1 << node)))

    def uses(self, members: Iterable[str]) -> tuple[list[int], list[int], bool, bool]:
        """``(writers, users, has_input, has_output)`` of a group of tensors."""
        view = self.view
        writers: dict[int, None] = {}
        users: dict[int, None] = {}
        has_input = has_output = False
        outputs = set(view.outputs)
        for m in members:
            t = view.tensors[m]
            if t.producer is None:
                has_input = True
            else:
                writers[t.producer] = None
                users[t.producer] = None
            users.update(dict.fromkeys(view.consumers.get(m, ())))
            has_output = has_output or m in outputs
        return list(writers), list(users), has_input, has_output

    def points(self, members: Iterable[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(exits, entries)`` of a group (see the module docstring)."""
        writers, users, has_input, has_output = self.uses(members)
        exits: tuple[int, ...] = ()
        entries: tuple[int, ...] = ()
        if not has_output and users:
            after = np.logical_and.reduce(self.reach[users], axis=0)
            after[users] = False
            if after.any():
                inner = np.zeros(self.n, dtype=bool)
                inner[self._dst[after[self._src]]] = True  # has a predecessor inside: not minimal
                exits = tuple(int(i) for i in np.flatnonzero(after & ~inner))
        if not has_input and writers:
            before = np.logical_and.reduce(self.reach[:, writers], axis=1)
            if before.any():
                inner = np.zeros(self.n, dtype=bool)
                inner[self._src[before[self._dst]]] = True  # has a successor inside: not maximal
                entries = tuple(int(i) for i in np.flatnonzero(before & ~inner))
        return exits, entries

    def precedence(self, groups: Sequence[Iterable[str]]) -> Precedence:
        """The order of ``groups`` (each a group's members) as a :class:`Precedence`."""
        exits: list[tuple[int, ...]] = []
        entries: list[tuple[int, ...]] = []
        for members in groups:
            x, e = self.points(members)
            exits.append(x)
            entries.append(e)
        return Precedence(self.n, self.edges, tuple(exits), tuple(entries))


def happens_before(view: GraphView) -> HappensBefore:
    """The view's :class:`HappensBefore`, computed once per view."""
    return view.memo("happens_before", lambda: HappensBefore(view))


def dag_problem(view: GraphView, liveness: Liveness) -> Problem:
    """``liveness``'s problem with the conflicts of ``--concurrency dag``: one buffer per group,
    conflicting with every group it does not precede and that does not precede it."""
    hb = happens_before(view)
    groups: Mapping[str, tuple[str, ...]] = liveness.groups
    prec = hb.precedence([groups[b.id] for b in liveness.problem.buffers])
    return Problem(liveness.problem.buffers, liveness.problem.capacity, Conflicts.from_precedence(prec))


def dag_liveness(view: GraphView, order: Sequence[int], *, io: str = "internal", alignment: int = 64,
                 inplace: bool = True) -> Liveness:
    """The liveness of ``order`` for ``--concurrency dag``: its problem is :func:`dag_problem`'s.

    ``inplace``: the sharing policy of ``--concurrency dag``: views and
    in-place outputs that hold under every schedule always; Concat inputs
    placed in their output as :mod:`onnxmem.analysis.aliasing` chooses, every one, or
    none: whichever layout has the lowest dag lower bound (ties: fewer
    placements). Placing an input joins its writer's branch to the output's
    buffer, which then conflicts with everything that branch runs beside.
    """
    hb = happens_before(view)
    layouts: list[AliasLayout | None] = [None]
    if inplace:
        layouts = [alias_layout(view, order, io, alignment=alignment, concat=False, hb=hb),
                   alias_layout(view, order, io, alignment=alignment, hb=hb),
                   alias_layout(view, order, io, alignment=alignment, choose=False, hb=hb)]
    best: tuple[int, Liveness] | None = None
    seen: list[AliasLayout | None] = []
    for layout in layouts:
        if layout in seen:
            continue
        seen.append(layout)
        liveness = build_liveness(view, order, layout, io=io, alignment=alignment)
        liveness = replace(liveness, problem=dag_problem(view, liveness))
        bound = lower_bound(liveness.problem)
        if best is None or bound < best[0]:
            best = (bound, liveness)
    assert best is not None
    return best[1]
