"""Aliasing: which tensors may share bytes, for a given operator order.

Three kinds of sharing. Two are written in one table, :data:`RULES`:

* **view**: the op's output 0 is the same bytes as one input (Reshape,
  Flatten, Squeeze, Unsqueeze, Identity, Dropout at inference). The output
  joins the input's group, and the group stays live until the last read of
  any member (:func:`onnxmem.liveness.build_liveness` takes the union).
* **inplace**: the op computes output element ``i`` from input element ``i``
  of the reused input only (unary and binary element-wise ops, activations,
  Cast between types of one size, BatchNormalization at inference), so its
  kernel may write the output over that input. Ops that read neighbours
  (Conv, MatMul, pooling, Transpose, Softmax, LayerNormalization, ...) are
  not in the table and never alias.

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
   element is written (this allows ``Add(x, x)`` and ``Add(x, Reshape(x))``,
   but not ``Sum(x, y, x)``, whose kernel folds input 2 in after it has
   written the output).

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
:func:`check_groups` and the static proof accept the legal placements the
planner leaves out.

A view whose output is a graph output keeps its group live to the end, which
is correct because the bytes are identical. Members of one group live at the
same step hold the same bytes wherever they overlap: a write into the group
changes only bytes no live member holds (in place after every earlier
member is dead; a view or a Concat over its own inputs changes nothing).

:func:`check_groups` is the independent proof: given any groups and offsets
(from this module, a plan file or a hand-made mutation) it lists every rule
they break.

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

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from .graph import GraphView, Op

__all__ = [
    "RULES",
    "Alias",
    "AliasLayout",
    "AliasRule",
    "alias_groups",
    "alias_layout",
    "alias_rule",
    "alias_sources",
    "check_groups",
    "concat_slices",
    "find_aliases",
    "overwritable",
]

VIEW = "view"
INPLACE = "inplace"
CONCAT = "concat"


def _always(op: Op) -> bool:
    return True


def _dropout_inference(op: Op) -> bool:
    """Dropout is an identity only without a ``training_mode`` input."""
    return len(op.inputs) < 3 or not op.inputs[2]


def _one_output(op: Op) -> bool:
    """BatchNormalization at inference: only ``Y`` is produced."""
    return sum(1 for o in op.outputs if o) == 1


@dataclass(frozen=True, slots=True)
class AliasRule:
    """Output 0 of the op may take the bytes of ``inputs[k]`` (first that qualifies).

    ``kind``: ``"view"`` (same bytes, nothing computed) or ``"inplace"``
    (computed element by element over the input). ``when``: a condition on
    the node (attributes, optional inputs) for the rule to apply.
    """

    kind: str
    inputs: tuple[int, ...]
    when: Callable[[Op], bool] = _always


_UNARY = (
    "Abs Acos Acosh Asin Asinh Atan Atanh BitwiseNot Cast Ceil Celu Clip Cos Cosh Elu Erf Exp "
    "Floor Gelu HardSigmoid HardSwish IsInf IsNaN LeakyRelu Log Mish Neg Not Reciprocal Relu Round "
    "Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Tan Tanh ThresholdedRelu"
).split()
_BINARY = (
    "Add And BitShift BitwiseAnd BitwiseOr BitwiseXor Div Equal Greater GreaterOrEqual Less "
    "LessOrEqual Mod Mul Or Pow Sub Xor"
).split()
#: variadic element-wise ops: kernels fold inputs 1.. into the output one at a
#: time, so only input 0 (read before anything is written) may be reused
_VARIADIC = "Max Mean Min Sum".split()

#: (domain, op_type) -> rule. Domain "" is ai.onnx. Ops absent here never alias.
RULES: dict[tuple[str, str], AliasRule] = {
    **{("", op): AliasRule(VIEW, (0,)) for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")},
    ("", "Dropout"): AliasRule(VIEW, (0,), _dropout_inference),
    **{("", op): AliasRule(INPLACE, (0,)) for op in _UNARY},
    **{("", op): AliasRule(INPLACE, (0, 1)) for op in _BINARY},
    **{("", op): AliasRule(INPLACE, (0,)) for op in _VARIADIC},
    ("", "PRelu"): AliasRule(INPLACE, (0,)),
    ("", "BatchNormalization"): AliasRule(INPLACE, (0,), _one_output),
}


def alias_rule(op: Op) -> AliasRule | None:
    """The rule for ``op``, or ``None`` when its output never shares an input's bytes."""
    domain = "" if op.domain in ("", "ai.onnx") else op.domain
    rule = RULES.get((domain, op.op_type))
    if rule is None or not rule.when(op):
        return None
    return rule



def concat_slices(view: GraphView, op: Op) -> tuple[int, ...] | None:
    """Byte offset of each input inside the output of the Concat ``op``, or ``None``.

    ``None`` unless ``op`` is an ai.onnx Concat whose every input is one
    contiguous run of the output's bytes: every dim before the concat axis is
    1 (the axis is the one dim where an input's shape differs from the
    output's), and elements are whole bytes. Input ``i`` then occupies bytes
    ``[offsets[i], offsets[i] + size_i)`` of the output, ``offsets[i]`` being
    the sum of the sizes of inputs ``0 .. i-1``.

    Example: inputs ``[1, 3, 4, 4]`` and ``[1, 5, 4, 4]`` (float) concatenated
    on axis 1 give ``(0, 192)``; on a batch of 2 the slices interleave and the
    answer is ``None``.
    """
    if op.op_type != "Concat" or op.domain not in ("", "ai.onnx") or not op.outputs or not op.outputs[0]:
        return None
    out = view.tensors.get(op.outputs[0])
    ins = [view.tensors.get(n) for n in op.inputs]
    if out is None or not ins or any(t is None or len(t.shape) != len(out.shape) for t in ins):
        return None
    numel = math.prod(out.shape)
    if numel == 0 or out.size % numel:
        return None
    item = out.size // numel  # bytes per element; sub-byte types have none
    axes = {d for t in ins for d, (a, b) in enumerate(zip(t.shape, out.shape)) if a != b}  # type: ignore[union-attr]
    if len(axes) > 1 or (axes and math.prod(out.shape[: min(axes)]) != 1):
        return None
    offsets: list[int] = []
    at = 0
    for t in ins:
        if t.size != math.prod(t.shape) * item:  # type: ignore[union-attr]
            return None
        offsets.append(at)
        at += t.size  # type: ignore[union-attr]
    if at != out.size:
        return None
    return tuple(offsets)


@dataclass(frozen=True, slots=True)
class Alias:
    """Node ``node`` writes ``output`` sharing the bytes of ``input``.

    ``kind``: ``view``, ``inplace`` (both: the same bytes) or ``concat``
    (``input`` lies inside ``output`` at byte ``offset``).
    """

    node: int
    output: str
    input: str
    kind: str
    offset: int = 0


@dataclass(frozen=True, slots=True)
class AliasLayout:
    """Groups of tensors that share bytes, and where each sits in its group's buffer.

    ``groups``: ``{group id: members}`` (two or more each; the id is the first
    member written, members in the order they are written). ``offsets``:
    ``{tensor: byte offset inside its group's buffer}`` for members not at 0.
    """

    groups: dict[str, tuple[str, ...]]
    offsets: dict[str, int] = field(default_factory=dict)


class _Groups:
    """Groups as they grow: tensor -> group id, members, offset in the group, extent."""

    def __init__(self, view: GraphView) -> None:
        self.view = view
        self.gid: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.offset: dict[str, int] = {}
        self.extent: dict[str, int] = {}

    def group(self, name: str) -> str:
        return self.gid.get(name, name)

    def of(self, name: str) -> list[str]:
        return self.members.get(self.group(name), [name])

    def at(self, name: str) -> int:
        return self.offset.get(name, 0)

    def size(self, gid: str) -> int:
        return self.extent.get(gid, self.view.tensors[gid].size)

    def merge(self, host: str, other: str, shift: int) -> None:
        """Move ``other``'s whole group into ``host``'s, ``shift`` bytes further in."""
        g, h = self.group(host), self.group(other)
        ext = max(self.size(g), self.size(h) + shift)
        self.members.setdefault(g, [g])
        for m in self.members.pop(h, [h]):
            self.gid[m] = g
            self.offset[m] = self.at(m) + shift
            self.members[g].append(m)
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


def _last_reads(view: GraphView, order: Sequence[int]) -> dict[str, int]:
    last: dict[str, int] = {}
    for k, op_index in enumerate(order):
        for name in view.ops[op_index].reads:
            last[name] = k
    return last


def _find(view: GraphView, order: Sequence[int], io: str, alignment: int,
          concat: bool, choose: bool = True) -> tuple[list[Alias], _Groups]:
    last = _last_reads(view, order)
    outputs = set(view.outputs)
    groups = _Groups(view)
    aliases: list[Alias] = []
    curve = _Curve(view, order, io, alignment, _find(view, order, io, alignment, False)[1], choose) if concat else None
    for k, op_index in enumerate(order):
        op = view.ops[op_index]
        if curve is not None and op.op_type == "Concat":
            aliases.extend(_join_concat(view, op, k, groups, io, alignment, last, outputs, curve))
            continue
        found = alias_sources(view, op, io)
        if found is None:
            continue
        rule, sources = found
        out = op.outputs[0]
        for src in sources:
            if rule.kind == INPLACE and not _may_overwrite(view, op, rule, k, groups, src, last, outputs):
                continue
            groups.merge(src, out, groups.at(src))
            aliases.append(Alias(op_index, out, src, rule.kind))
            break
    return aliases, groups


def _join_concat(view: GraphView, op: Op, step: int, groups: _Groups, io: str, alignment: int,
                 last: Mapping[str, int], outputs: set[str], curve: _Curve) -> list[Alias]:
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
        members = groups.of(x)
        if any(view.tensors[m].producer is None or m in outputs or last.get(m, -1) > step for m in members):
            continue  # a graph input in the group, or a member read after the Concat
        if any(groups.group(x) == groups.group(y) for y, _ in candidates):
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
        from .liveness import tensor_lifetimes

        self.view = view
        self.choosing = choose
        self.alignment = max(alignment, 1)
        self.life = tensor_lifetimes(view, order, io)
        self.live = np.zeros(max(len(order), 1) + 1, dtype=np.int64)
        done: set[str] = set()
        for name in self.life:
            g = flat.group(name)
            if g in done:
                continue
            done.add(g)
            s, e = self.span(flat, name)
            self.live[s:e] += self.bytes(flat, g)

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


def _may_overwrite(view: GraphView, op: Op, rule: AliasRule, step: int, groups: _Groups, src: str,
                   last: Mapping[str, int], outputs: set[str]) -> bool:
    """Whether ``op`` at ``step`` may write its output over ``src``'s group's bytes."""
    members = groups.of(src)
    if any(last.get(m, -1) > step for m in members):
        return False
    ranges = {m: (groups.at(m), groups.at(m) + view.tensors[m].size) for m in members}
    return overwritable(view, op, rule, src, members, ranges, outputs)


def alias_sources(view: GraphView, op: Op, io: str = "internal") -> tuple[AliasRule, tuple[str, ...]] | None:
    """``(rule, inputs)``: the inputs ``op``'s output 0 may share bytes with under
    any order (rules 1 and 2 of the module doc), in the rule's order; ``None``
    when there are none. Whether an **inplace** output takes one also depends
    on the order (rule 3: :func:`overwritable`, once the input's group dies there).
    """
    rule = alias_rule(op)
    if rule is None or not op.outputs or not op.outputs[0] or not _planned(view, op.outputs[0], io):
        return None
    size = view.tensors[op.outputs[0]].size
    sources: list[str] = []
    for j in rule.inputs:
        src = op.inputs[j] if j < len(op.inputs) else ""
        if src and src not in sources and _planned(view, src, io) and view.tensors[src].size == size:
            sources.append(src)
    return (rule, tuple(sources)) if sources else None


def overwritable(view: GraphView, op: Op, rule: AliasRule, src: str, members: Sequence[str],
                 ranges: Mapping[str, tuple[int, int]] | None = None, outputs: set[str] | None = None) -> bool:
    """Whether ``op`` may write its output over the group ``members`` (which holds
    its input ``src``; members at byte ``ranges``, default all at offset 0) once
    every member dies at ``op``: rule 3 of the module doc without the order,
    i.e. no member is a graph input or output, and ``op`` reads no member at an
    input its rule does not list or with other bytes than ``src``.
    """
    outs = set(view.outputs) if outputs is None else outputs
    if any(view.tensors[m].kind != "activation" or m in outs for m in members):
        return False
    rng = ranges if ranges is not None else {m: (0, view.tensors[m].size) for m in members}
    return not _unsafe_reads(op, rule, rng, rng[src])


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
                 concat: bool = True, choose: bool = True) -> AliasLayout:
    """Every group the rules allow under ``order``, with each member's offset in its group.

    Pass ``groups`` and ``offsets`` to :func:`onnxmem.liveness.build_liveness`.
    With ``concat=False`` every offset is 0 (views and in-place outputs only);
    with ``choose=False`` every Concat input the rules allow is placed, not
    only those :class:`_Curve` picks.
    """
    _, groups = _find(view, order, io, alignment, concat, choose)
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


def alias_groups(view: GraphView, order: Sequence[int], io: str = "internal") -> dict[str, tuple[str, ...]]:
    """``{group id: member tensors}`` of views and in-place outputs (every offset 0).

    The id is the group's first tensor; members are in schedule order. Pass
    the result to :func:`onnxmem.liveness.build_liveness`; for Concat inputs
    placed inside the output as well, use :func:`alias_layout`.
    """
    return alias_layout(view, order, io, concat=False).groups


def check_groups(view: GraphView, order: Sequence[int], groups: Mapping[str, Sequence[str]],
                 io: str = "internal", offsets: Mapping[str, int] | None = None) -> list[str]:
    """Every way ``groups`` (members at ``offsets``, default 0) break the rules under ``order``.

    Empty when legal. Independent of :func:`find_aliases`:

    * members must be planned arena tensors, each in one group;
    * the members must be connected by links: ``m`` is linked to the input
      whose bytes it takes (output 0 of a view or in-place op, the same size
      and offset), and a Concat output to each input at its slice's offset;
    * every write into the group keeps every member that is live then and
      overlaps it: a view writes nothing new, a Concat nothing new over an
      input at its own slice; an in-place write may cover only members it
      reads at an input its rule lists, with exactly its bytes, that die at
      that node and are neither graph inputs nor graph outputs. A write over
      a graph input is never allowed.
    """
    problems: list[str] = []
    offs = dict(offsets or {})
    last = _last_reads(view, order)
    outputs = set(view.outputs)
    seen: dict[str, str] = {}
    for gid, mem in groups.items():
        if len(mem) < 2:
            continue
        bad = False
        for m in mem:
            if m in seen and seen[m] != gid:
                problems.append(f"tensor '{m}' is in groups '{seen[m]}' and '{gid}'")
                bad = True
            seen[m] = gid
            if not _planned(view, m, io):
                what = "unknown" if m not in view.tensors else (
                    "a weight" if view.tensors[m].kind == "weight" else f"outside the arena with --io {io}")
                problems.append(f"group '{gid}': tensor '{m}' is {what} and cannot share arena bytes")
                bad = True
        if not bad:
            problems += _check_group(view, order, gid, mem, offs, last, outputs)
    return problems


def _check_group(view: GraphView, order: Sequence[int], gid: str, mem: Sequence[str],
                 offs: Mapping[str, int], last: Mapping[str, int], outputs: set[str]) -> list[str]:
    problems: list[str] = []
    step = {op: k for k, op in enumerate(order)}
    members = set(mem)

    def rng(n: str) -> tuple[int, int]:
        return offs.get(n, 0), offs.get(n, 0) + view.tensors[n].size

    def written(name: str) -> int:
        p = view.tensors[name].producer
        return -1 if p is None else step[p]

    # links, and why a member has none
    parent = {m: m for m in mem}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    why: dict[str, str] = {}
    for m in mem:
        p = view.tensors[m].producer
        if p is None:
            why[m] = f"group '{gid}': '{m}' is a graph input; no node writes it over another member"
            continue
        op = view.ops[p]
        where = f"group '{gid}': node '{op.name}' ({op.op_type})"
        slices = concat_slices(view, op)
        if slices is not None and op.outputs[0] == m:
            for x, off in zip(op.inputs, slices):
                if x in members and rng(x) == (rng(m)[0] + off, rng(m)[0] + off + view.tensors[x].size):
                    parent[find(x)] = find(m)
            continue
        rule = alias_rule(op)
        if rule is None:
            why[m] = (f"{where} writes '{m}' into the group but its op may not alias "
                      "(it reads neighbours or has no alias rule)")
            continue
        if op.outputs[0] != m:
            why[m] = f"{where}: only output 0 may alias, '{m}' is another output"
            continue
        sources = [op.inputs[j] for j in rule.inputs if j < len(op.inputs) and op.inputs[j] in members]
        if not sources:
            why[m] = f"{where} writes '{m}' into group '{gid}' but reads no member of it at an input its rule allows"
            continue
        same = [s for s in sources if rng(s) == rng(m)]
        if not same:
            s = sources[0]
            why[m] = (f"{where}: '{m}' is {view.tensors[m].size} B at offset {rng(m)[0]} but '{s}' is "
                      f"{view.tensors[s].size} B at {rng(s)[0]}; aliased tensors must be the same size "
                      "at the same offset")
            continue
        parent[find(m)] = find(same[0])
    ordered = sorted(mem, key=written)
    reported: set[str] = set()
    for m in ordered[1:]:
        r = find(m)
        if r != find(ordered[0]) and r not in reported:
            reported.add(r)
            first = next(x for x in ordered if find(x) == r)
            problems.append(why.get(first, f"group '{gid}': '{first}' is linked to no other member by a rule"))

    # every write keeps the live members it overlaps
    for m in ordered:
        p = view.tensors[m].producer
        if p is None:
            continue
        op, k = view.ops[p], step[p]
        lo, hi = rng(m)
        kept = _unchanged(view, op, m, rng, members)
        rule = alias_rule(op)
        where = f"group '{gid}': node '{op.name}' ({op.op_type})"
        for e in ordered:
            elo, ehi = rng(e)
            if e == m or written(e) > k or not (elo < hi and lo < ehi) or hi == lo or ehi == elo:
                continue
            if written(e) == k:
                problems.append(f"{where} writes outputs '{e}' and '{m}' over the same bytes")
                continue
            if any(klo <= max(lo, elo) and min(hi, ehi) <= khi for klo, khi in kept):
                continue  # the write leaves e's bytes as they are
            t = view.tensors[e]
            if t.kind == "input" or e in outputs:
                problems.append(f"{where} writes '{m}' in place over '{e}', a graph "
                                f"{'input' if t.kind == 'input' else 'output'}")
            elif last.get(e, -1) > k:
                later = view.ops[order[last[e]]].name
                problems.append(f"{where} writes '{m}' over '{e}', which node '{later}' reads later")
            elif last.get(e, -1) == k and (rule is None or rule.kind != INPLACE
                                          or _unsafe_reads(op, rule, {e: rng(e)}, (lo, hi))
                                          or e not in op.inputs):
                problems.append(f"{where} writes '{m}' over '{e}', which it reads at an input that is not "
                                "read element by element with the same bytes (or its op may not alias)")
    return problems


def _unchanged(view: GraphView, op: Op, m: str, rng: Callable[[str], tuple[int, int]],
               members: set[str]) -> list[tuple[int, int]]:
    """Byte ranges of ``m`` that ``op``'s write leaves unchanged (a view, a Concat's own slices)."""
    lo, hi = rng(m)
    rule = alias_rule(op)
    if rule is not None and rule.kind == VIEW:
        src = op.inputs[0] if op.inputs else ""
        return [(lo, hi)] if src in members and rng(src) == (lo, hi) else []
    slices = concat_slices(view, op)
    if slices is None:
        return []
    return [(lo + off, lo + off + view.tensors[x].size) for x, off in zip(op.inputs, slices)
            if x in members and rng(x) == (lo + off, lo + off + view.tensors[x].size)]
