"""Aliasing: which tensors may share bytes, for a given operator order.

Three kinds of sharing. Two are written in one table, :data:`RULES`:

* **view**: the op's output 0 is the same bytes as one input (Reshape,
  Flatten, Squeeze, Unsqueeze, Identity, Dropout at inference). The output
  joins the input's group, and the group stays live until the last read of
  any member (:func:`onnxmem.analysis.liveness.build_liveness` takes the union).
* **inplace**: the op computes output element ``i`` from input element ``i``
  of the reused input, and its kernel may write the output over that input.
  An op is in the table only where onnxruntime's own kernel registrations
  declare ``MayInplace(0, 0)`` on both CPU and CUDA, for the element types
  both declare it for (``AliasRule.dtypes``; :data:`DECLARED_INPLACE`):
  onnxruntime then runs that kernel in place itself, so every build of it
  (whatever its vector width or provider) must be correct that way. The
  algebra alone is not enough: an element-wise kernel may write a temporary
  into the output and read the input again (Gelu's CPU kernel does), or read
  ahead on a wide vector path. Ops without the declaration on both
  providers (Add, Mul, Exp, Cast, Clip, Softmax, BatchNormalization, Gelu,
  ...) and ops that read neighbours (Conv, MatMul, pooling, Transpose, ...)
  are not in the table and never alias.

The third is **concat** (sub-buffer aliasing): when every input of a Concat
is one contiguous run of the output's bytes (all dims before the axis are 1,
e.g. a channel concat at batch 1), an input may live inside the output's
buffer at the byte offset of its slice (:func:`concat_slices`). Its producer
then writes straight into the output, and the Concat copies those bytes onto
themselves. A group is therefore a set of tensors, each at a byte offset
inside the group's buffer (0 for views and in-place outputs, which take their
source's offset).

:func:`find_aliases` applies the rules node by node in schedule order. An
output joins the group of input ``j`` when:

1. the rule lists ``j``, and both tensors are planned activations (never a
   weight: weights are not in the arena; with ``io="external"`` never a graph
   input or output either, since those are outside the arena);
2. the output has exactly the input's byte size (the real size, before
   alignment); it takes the input's offset in the group;
3. for **inplace** only, the input's whole group dies at this node: no member
   is read by a later step, captured by a later node's subgraph, or is a graph
   output (live to the end); no member is a graph input (the caller's bytes
   are never written); and every input of the node in that group whose bytes
   overlap the output's sits at an input the rule lists and has exactly the
   output's bytes, so it is read element by element before that output
   element is written (a rule listing inputs 0 and 1 would allow ``op(x, x)``
   and ``op(x, Reshape(x))``, never the group read at an unlisted input,
   which a kernel may read after it has written the output).

A Concat's input ``x`` (at its first position ``i`` only) joins the output's
group at slice ``i``'s offset when: the output and ``x`` are planned
activations; ``x`` and every member of its group are written by a node (no
graph input, whose bytes the caller places); ``x`` sits at offset 0 of its
group and is as large as the group (its group is exactly one slice, so a
tensor already placed inside another Concat's output stays there, and the
Concat copies it); ``x``'s group is not the output's already (another input
took it); and the slice offset is a multiple of ``alignment``. Other inputs
(weights, graph inputs, repeats) are copied by the Concat as usual. Nothing
else is needed for safety: before the Concat only the joined groups use the
buffer, each inside its own slice; at the Concat the slices hold exactly the
bytes the Concat writes there; after it, a member that is still live holds
the output's bytes, and an in-place write over the group waits for every
member to die (rule 3).

Two choices on top are about size, not safety. A group with a member read
after the Concat (or a graph output) is left out: it would keep the whole
output live as long as itself and block in-place writes over the output.
And since the group's buffer is reserved whole from its first write, a
placement can raise the live bytes before the Concat more than it saves at
it; :class:`_Curve` places, per Concat, the inputs written last, as many as
keep those live bytes lowest (``choose=False`` places every candidate).
The static proof (:func:`onnxmem.verify.run.prove_plan`) accepts the legal
placements the planner leaves out.

A view whose output is a graph output keeps its group live to the end, which
is correct because the bytes are identical. Members of one group live at the
same step hold the same bytes wherever they overlap: a write into the group
changes only bytes no live member holds (in place after every earlier
member is dead; a view or a Concat over its own inputs changes nothing).

:func:`shared_layout` is the policy ``onnxmem plan --inplace on`` uses:
views and in-place outputs always, Concat placements too unless they raise
the max-live bound. The static proof in :mod:`onnxmem.verify.run` checks any
layout (from this module, a plan file or a hand-made mutation)
independently.

Cost: one pass over the order. Each group keeps what the rules ask of all
its members (the last step that reads one, whether one is a graph input or
output) up to date as groups merge, so a node's checks cost O(its degree),
not O(group size); the Concat choice sweeps the live bytes once and then
touches only the steps around each Concat.

Worked example, order ``a = Relu(x); b = Reshape(a); c = Sigmoid(b)`` where
only ``c`` is a graph output and ``x`` is a graph input: ``a`` is not in place
(``x`` is a graph input), ``b`` views ``a``, ``c`` is in place over ``b``
(the group ``{a, b}`` dies at the Sigmoid), so the one group is
``{'a': ('a', 'b', 'c')}``. With ``p = Relu(x); q = Sigmoid(x);
y = Concat(p, q, axis=1)`` on ``x`` of shape ``[1, 4, 8, 8]`` (float, 1 KiB),
``p`` and ``q`` join ``y``'s group at offsets 0 and 1024: the layout is
``{'p': ('p', 'q', 'y')}`` with offsets ``{'q': 1024}``.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol, Sequence

import numpy as np

from onnxmem.analysis.alias_rules import (
    CONCAT,
    DECLARED_INPLACE,
    INPLACE,
    RULES,
    VIEW,
    Alias,
    AliasRule,
    alias_rule,
    concat_slices,
)
from onnxmem.analysis.lifetimes import last_reads, live_profile, tensor_lifetimes
from onnxmem.analysis.liveness import AliasLayout, Liveness, build_liveness
from onnxmem.core.problem import lower_bound
from onnxmem.graph import GraphView, Op


class ReadAfter(Protocol):
    """The one thing the alias rules ask of a happens-before relation (the relation itself is
    :class:`onnxmem.analysis.happens_before.HappensBefore`): whether a reader may run after a node."""

    def read_after(self, readers: int, node: int) -> bool:
        """Whether a node of ``readers`` (bits) other than ``node`` may run after ``node`` starts."""

__all__ = [
    "CONCAT",
    "DECLARED_INPLACE",
    "INPLACE",
    "RULES",
    "VIEW",
    "Alias",
    "AliasLayout",
    "AliasRule",
    "alias_groups",
    "alias_layout",
    "alias_rule",
    "alias_sources",
    "concat_slices",
    "every_alias_source",
    "find_aliases",
    "group_writable",
    "overwritable",
    "shared_layout",
    "shared_liveness",
]



class _Groups:
    """Groups as they grow: tensor -> group id, members, offset in the group, extent,
    and per group what the rules ask of all its members, kept up to date on merge:
    the last step that reads a member, and whether a member is a graph input
    (written by no node), a graph output, or not a plain activation."""

    def __init__(self, view: GraphView, last: Mapping[str, int], outputs: set[str],
                 hb: ReadAfter | None = None) -> None:
        self.view = view
        self.last = last
        self.outputs = outputs
        self.hb = hb
        self.readers: dict[str, int] = {}  # with ``hb``: the nodes that read a member, as bits
        self.gid: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.offset: dict[str, int] = {}
        self.extent: dict[str, int] = {}
        self.read_until: dict[str, int] = {}
        self.flags: dict[str, tuple[bool, bool, bool]] = {}

    def group(self, name: str) -> str:
        return self.gid.get(name, name)

    def of(self, name: str) -> list[str]:
        return self.members.get(self.group(name), [name])

    def at(self, name: str) -> int:
        return self.offset.get(name, 0)

    def size(self, gid: str) -> int:
        return self.extent.get(gid, self.view.tensors[gid].size)

    def last_read(self, gid: str) -> int:
        """The last step that reads a member of group ``gid`` (-1: none)."""
        return self.read_until.get(gid, self.last.get(gid, -1))

    def _readers(self, gid: str) -> int:
        found = self.readers.get(gid)
        if found is None:
            found = 0
            for i in self.view.consumers.get(gid, ()):
                found |= 1 << i
        return found

    def read_after(self, gid: str, step: int, node: int) -> bool:
        """Whether a member of ``gid`` is read after ``node`` (at ``step``) starts: at a later
        step; with a happens-before relation (``--concurrency dag``), by a node other
        than ``node`` that does not happen before it, so in some schedule."""
        if self.hb is None:
            return self.last_read(gid) > step
        return self.hb.read_after(self._readers(gid), node)

    def _flags(self, gid: str) -> tuple[bool, bool, bool]:
        found = self.flags.get(gid)
        if found is None:
            t = self.view.tensors[gid]
            found = (t.producer is None, gid in self.outputs, t.kind != "activation")
        return found

    def has_input(self, gid: str) -> bool:
        """A member of ``gid`` is written by no node (a graph input)."""
        return self._flags(gid)[0]

    def has_output(self, gid: str) -> bool:
        """A member of ``gid`` is a graph output."""
        return self._flags(gid)[1]

    def writable(self, gid: str) -> bool:
        """Every member of ``gid`` is an activation and none is a graph output."""
        flags = self._flags(gid)
        return not (flags[1] or flags[2])

    def merge(self, host: str, other: str, shift: int) -> None:
        """Move ``other``'s whole group into ``host``'s, ``shift`` bytes further in."""
        gid, offset = self.gid, self.offset
        g, h = gid.get(host, host), gid.get(other, other)
        ext = max(self.size(g), self.size(h) + shift)
        fg, fh = self._flags(g), self._flags(h)
        self.flags[g] = (fg[0] or fh[0], fg[1] or fh[1], fg[2] or fh[2])
        self.flags.pop(h, None)
        self.read_until[g] = max(self.last_read(g), self.last_read(h))
        self.read_until.pop(h, None)
        if self.hb is not None:
            self.readers[g] = self._readers(g) | self._readers(h)
            self.readers.pop(h, None)
        into = self.members.get(g)
        if into is None:
            into = self.members[g] = [g]
        for m in self.members.pop(h, [h]):
            gid[m] = g
            offset[m] = offset.get(m, 0) + shift
            into.append(m)
        self.extent.pop(h, None)
        self.extent[g] = ext


def _planned(view: GraphView, name: str, io: str) -> bool:
    """Whether ``name`` is an arena tensor that may join a group at all."""
    t = view.tensors.get(name)
    if t is None or t.kind == "weight":
        return False
    if io == "external" and (t.kind in ("input", "output") or name in view.outputs):
        return False
    return True


def _find(view: GraphView, order: Sequence[int], io: str, alignment: int,
          concat: bool, choose: bool = True, flat: _Groups | None = None,
          hb: ReadAfter | None = None) -> tuple[list[Alias], _Groups]:
    """The aliases and groups the rules give under ``order``; ``flat``: the
    groups without Concat placement, when the caller already has them; ``hb``:
    the groups must hold under every schedule of that relation (see
    :meth:`_Groups.read_after`)."""
    last = last_reads(view, order)
    outputs = set(view.outputs)
    groups = _Groups(view, last, outputs, hb)
    sources_of = every_alias_source(view, io)
    aliases: list[Alias] = []
    curve = None
    if concat and any(view.ops[i].op_type == "Concat" for i in order):
        if flat is None:
            flat = _find(view, order, io, alignment, False, hb=hb)[1]
        curve = _Curve(view, order, io, alignment, flat, choose)
    for k, op_index in enumerate(order):
        op = view.ops[op_index]
        if curve is not None and op.op_type == "Concat":
            aliases.extend(_join_concat(view, op, k, groups, io, alignment, curve))
            continue
        found = sources_of[op_index]
        if found is None:
            continue
        rule, sources = found
        out = op.outputs[0]
        for src in sources:
            if rule.kind == INPLACE and not _may_overwrite(view, op, rule, k, groups, src):
                continue
            groups.merge(src, out, groups.at(src))
            aliases.append(Alias(op_index, out, src, rule.kind))
            break
    return aliases, groups


def _join_concat(view: GraphView, op: Op, step: int, groups: _Groups, io: str, alignment: int,
                 curve: _Curve) -> list[Alias]:
    """Place the Concat ``op``'s inputs inside its output where the module's rules allow
    and the placement does not raise the live bytes around it (:class:`_Curve`)."""
    slices = concat_slices(view, op)
    out = op.outputs[0] if op.outputs else ""
    if slices is None or not _planned(view, out, io):
        return []
    candidates: list[tuple[str, int]] = []
    for i, (x, off) in enumerate(zip(op.inputs, slices)):
        t = view.tensors[x]
        if (x in op.inputs[:i] or not _planned(view, x, io) or t.producer is None or t.size == 0
                or off % max(alignment, 1) or groups.at(x) != 0 or groups.size(groups.group(x)) != t.size):
            continue
        g = groups.group(x)
        if groups.has_input(g) or groups.has_output(g) or groups.read_after(g, step, op.index):
            continue  # a graph input in the group, or a member read after the Concat
        if any(g == groups.group(y) for y, _ in candidates):
            continue  # another input already brings this group
        candidates.append((x, off))
    joined: list[Alias] = []
    for x, off in curve.choose(step, out, candidates, groups):
        groups.merge(out, x, off)
        joined.append(Alias(op.index, out, x, CONCAT, off))
    return joined


class _Curve:
    """Live bytes per step of the groups as they stand, to choose Concat placements.

    A placed input's group joins the output's buffer, which is then reserved
    whole from the group's first write on. For a given start of that
    reservation, placing every candidate written after it only removes
    bytes, so the choices are the candidates ordered by their group's first
    write, latest first: place the ``n`` latest, for the ``n`` whose live
    bytes over the steps it touches peak lowest (ties: the fewest
    byte-steps, then the most placed). The chosen groups die at the Concat (a rule of
    :func:`_join_concat`), so nothing changes after it.
    """

    def __init__(self, view: GraphView, order: Sequence[int], io: str, alignment: int, flat: _Groups,
                 choose: bool = True) -> None:
        self.view = view
        self.choosing = choose
        self.alignment = max(alignment, 1)
        self.life = tensor_lifetimes(view, order, io)
        spans: list[tuple[int, int, int]] = []
        done: set[str] = set()
        for name in self.life:
            g = flat.group(name)
            if g in done:
                continue
            done.add(g)
            s, e = self.span(flat, name)
            spans.append((s, e, self.bytes(flat, g)))
        self.live = live_profile(spans, max(len(order), 1) + 1)

    def span(self, groups: _Groups, name: str) -> tuple[int, int]:
        ms = [m for m in groups.of(name) if m in self.life]
        return min(self.life[m][0] for m in ms), max(self.life[m][1] for m in ms)

    def bytes(self, groups: _Groups, gid: str) -> int:
        size = groups.size(gid)
        return -(-size // self.alignment) * self.alignment

    def choose(self, step: int, out: str, candidates: list[tuple[str, int]],
               groups: _Groups) -> list[tuple[str, int]]:
        if not candidates or not self.choosing:
            return candidates
        spans = {x: self.span(groups, x) for x, _ in candidates}
        ranked = sorted(candidates, key=lambda c: -spans[c[0]][0])
        w0 = min(s for s, _ in spans.values())
        c_bytes = -(-self.view.tensors[out].size // self.alignment) * self.alignment
        best: tuple[tuple[int, int, int], int, np.ndarray] | None = None
        seg = self.live[w0 : step + 1].copy()
        for n in range(len(ranked) + 1):
            trial = seg.copy()
            if n:
                for x, _ in ranked[:n]:
                    s, e = spans[x]
                    trial[s - w0 : e - w0] -= self.bytes(groups, groups.group(x))
                trial[spans[ranked[n - 1][0]][0] - w0 : step - w0] += c_bytes
            score = (int(trial.max()), int(trial.sum()), -n)
            if best is None or score < best[0]:
                best = (score, n, trial)
        assert best is not None
        self.live[w0 : step + 1] = best[2]
        return ranked[: best[1]]


def find_aliases(view: GraphView, order: Sequence[int], io: str = "internal", *, alignment: int = 1,
                 concat: bool = False) -> tuple[Alias, ...]:
    """Every alias the rules allow under ``order``, in schedule order (see the module doc).

    ``concat``: also place Concat inputs inside the output (slice offsets a
    multiple of ``alignment``).
    """
    return tuple(_find(view, order, io, alignment, concat)[0])


def _may_overwrite(view: GraphView, op: Op, rule: AliasRule, step: int, groups: _Groups, src: str) -> bool:
    """Whether ``op`` at ``step`` may write its output over ``src``'s group's bytes
    (rule 3 of the module doc), in O(``op``'s degree)."""
    g = groups.group(src)
    if groups.read_after(g, step, op.index) or not groups.writable(g):
        return False
    ranges = {n: (groups.at(n), groups.at(n) + view.tensors[n].size)
              for n in op.inputs if n and groups.group(n) == g and n in view.tensors}
    return overwritable(op, rule, src, ranges)


def alias_sources(view: GraphView, op: Op, io: str = "internal") -> tuple[AliasRule, tuple[str, ...]] | None:
    """``(rule, inputs)``: the inputs ``op``'s output 0 may share bytes with under
    any order (rules 1 and 2 of the module doc), in the rule's order; ``None``
    when there are none. Whether an **inplace** output takes one also depends
    on the order (rule 3: :func:`group_writable` and :func:`overwritable`, once
    the input's group dies there).
    """
    rule = alias_rule(op, view.kernels)
    if rule is None or not op.outputs or not op.outputs[0] or not _planned(view, op.outputs[0], io):
        return None
    size = view.tensors[op.outputs[0]].size
    sources: list[str] = []
    for j in rule.inputs:
        src = op.inputs[j] if j < len(op.inputs) else ""
        if (src and src not in sources and _planned(view, src, io) and view.tensors[src].size == size
                and rule.holds_for(view.tensors[src].elem_type)):
            sources.append(src)
    return (rule, tuple(sources)) if sources else None


def every_alias_source(view: GraphView, io: str = "internal") -> list[tuple[AliasRule, tuple[str, ...]] | None]:
    """:func:`alias_sources` of every node, by node index (computed once per view and ``io``)."""
    return view.memo(("alias_sources", io), lambda: [alias_sources(view, op, io) for op in view.ops])


def group_writable(view: GraphView, members: Iterable[str], outputs: set[str] | None = None) -> bool:
    """The group part of rule 3 of the module doc: every member of the group
    is an activation (no graph input, no weight) and none is a graph output."""
    outs = set(view.outputs) if outputs is None else outputs
    return all(view.tensors[m].kind == "activation" and m not in outs for m in members)


def overwritable(op: Op, rule: AliasRule, src: str, ranges: Mapping[str, tuple[int, int]]) -> bool:
    """The read part of rule 3 of the module doc: whether ``op`` may write its
    output over ``src``'s bytes once ``src``'s group dies at ``op``.

    ``ranges``: the byte range inside the group's buffer of each input of
    ``op`` in ``src``'s group (``src`` included). False when ``op`` reads one
    of them at an input its rule does not list, or with other bytes than
    ``src`` (:func:`group_writable` is the other half of the rule).
    """
    return not _unsafe_reads(op, rule, ranges, ranges[src])


def _unsafe_reads(op: Op, rule: AliasRule, ranges: Mapping[str, tuple[int, int]],
                  target: tuple[int, int]) -> list[str]:
    """Inputs of ``op`` (group members, at ``ranges``) that an in-place write over
    ``target`` could change before they are read: any overlapping it at an input
    the rule does not list, or with other bytes than ``target``."""
    lo, hi = target
    return [n for j, n in enumerate(op.inputs)
            if n in ranges and ranges[n][0] < hi and lo < ranges[n][1]
            and (j not in rule.inputs or ranges[n] != target)]


def alias_layout(view: GraphView, order: Sequence[int], io: str = "internal", *, alignment: int = 1,
                 concat: bool = True, choose: bool = True, hb: ReadAfter | None = None) -> AliasLayout:
    """Every group the rules allow under ``order``, with each member's offset in its group.

    Pass it to :func:`onnxmem.analysis.liveness.build_liveness`. With ``concat=False``
    every offset is 0 (views and in-place outputs only); with
    ``choose=False`` every Concat input the rules allow is placed, not only
    those :class:`_Curve` picks. ``hb``: only sharing that holds under every
    schedule of that happens-before relation (:meth:`_Groups.read_after`).
    """
    return _layout(view, order, _find(view, order, io, alignment, concat, choose, hb=hb)[1])


def _layout(view: GraphView, order: Sequence[int], groups: _Groups) -> AliasLayout:
    step = {op: k for k, op in enumerate(order)}

    def written(name: str) -> int:
        p = view.tensors[name].producer
        return -1 if p is None else step[p]

    out: dict[str, tuple[str, ...]] = {}
    offsets: dict[str, int] = {}
    for members in groups.members.values():
        ms = tuple(sorted(members, key=written))  # stable: ties keep the order they joined
        out[ms[0]] = ms
        offsets.update({m: groups.at(m) for m in ms if groups.at(m)})
    return AliasLayout(dict(sorted(out.items(), key=lambda kv: written(kv[0]))), offsets)


def shared_layout(view: GraphView, order: Sequence[int], io: str = "internal", alignment: int = 64,
                  hb: ReadAfter | None = None) -> AliasLayout:
    """The layout ``onnxmem plan --inplace on`` plans: the sharing policy, in one place.

    Views and in-place outputs always share bytes. Concat inputs are placed
    inside their output as well unless that raises the max-live bound (a
    placed input reserves the whole output from its own write on, which can
    cost more than the copy it saves); then the layout without them is kept.
    ``hb`` (``--concurrency dag``): only sharing that holds under every
    schedule of the happens-before relation (:meth:`_Groups.read_after`).
    """
    return _shared(view, order, io, alignment, hb)[0]


#: views of fewer nodes keep the liveness of the last order :func:`shared_liveness` built with
#: ``keep`` for its next call (a 100,000-node graph's planning keeps no second liveness)
KEEP_NODES = 20_000


def shared_liveness(view: GraphView, order: Sequence[int], io: str = "internal", alignment: int = 64,
                    keep: bool = False) -> Liveness:
    """``build_liveness`` of the layout :func:`shared_layout` chooses, the same result: where the
    choice built it already (the layout with Concat inputs placed, when it is kept), that one.

    ``keep``: the view keeps the result for the next call with the same order, which takes it
    (one kept at a time, on views under :data:`KEEP_NODES` nodes): the order search bounds its
    chosen order with it (:func:`onnxmem.scheduling.cost.order_peak`), and the planner then
    plans that order with the same liveness rather than building it again."""
    held: dict[tuple[int, ...], Liveness] = view.memo(("shared liveness", io, alignment), dict)
    key = tuple(order)
    if key in held:
        return held.pop(key)
    held.clear()
    layout, built, last = _shared(view, order, io, alignment, None)
    got = built if built is not None else build_liveness(view, order, layout, io=io, alignment=alignment,
                                                         last_read=last)
    if keep and len(view.ops) < KEEP_NODES:
        held[key] = got
    return got


def _shared(view: GraphView, order: Sequence[int], io: str, alignment: int,
            hb: ReadAfter | None) -> tuple[AliasLayout, Liveness | None, Mapping[str, int]]:
    """:func:`shared_layout`'s layout, with its liveness where the choice built it (else ``None``;
    the two layouts' livenesses are built one after the other, never both held), and the
    order's :func:`last_reads` (for the liveness the caller builds)."""
    flat_groups = _find(view, order, io, alignment, False, hb=hb)[1]
    last = flat_groups.last
    flat = _layout(view, order, flat_groups)
    if not any(view.ops[i].op_type == "Concat" for i in order):
        return flat, None, last  # nothing to place
    nested = _layout(view, order, _find(view, order, io, alignment, True, flat=flat_groups, hb=hb)[1])
    if not nested.offsets and nested.groups == flat.groups:
        return flat, None, last
    bound = lower_bound(build_liveness(view, order, flat, io=io, alignment=alignment, last_read=last).problem)
    built = build_liveness(view, order, nested, io=io, alignment=alignment, last_read=last)
    return (nested, built, last) if lower_bound(built.problem) <= bound else (flat, None, last)


def alias_groups(view: GraphView, order: Sequence[int], io: str = "internal") -> dict[str, tuple[str, ...]]:
    """``{group id: member tensors}`` of views and in-place outputs (every offset 0).

    The id is the group's first tensor; members are in schedule order. Pass
    the result to :func:`onnxmem.analysis.liveness.build_liveness`; for Concat inputs
    placed inside the output as well, use :func:`alias_layout`.
    """
    return alias_layout(view, order, io, concat=False).groups
