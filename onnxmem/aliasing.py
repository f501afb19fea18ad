"""Aliasing: which tensors may share bytes, for a given operator order.

Two kinds of sharing, both written in one table, :data:`RULES`:

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

:func:`find_aliases` applies the table node by node in schedule order,
joining groups with union-find. An output joins the group of input ``j``
when:

1. the rule lists ``j``, and both tensors are planned activations (never a
   weight: weights are not in the arena; with ``io="external"`` never a graph
   input or output either, since those are outside the arena);
2. the output has exactly the input's byte size (the real size, before
   alignment);
3. for **inplace** only, the input's whole group dies at this node: no member
   is read by a later step, captured by a later node's subgraph, or is a graph
   output (live to the end); no member is a graph input (the caller's bytes
   are never written); and every input of the node that is a member of that
   group sits at an input the rule lists and has the output's byte size, so
   it is read element by element before that output element is written (this
   allows ``Add(x, x)`` and ``Add(x, Reshape(x))``, but not ``Sum(x, y, x)``,
   whose kernel folds input 2 in after it has written the output).

A view whose output is a graph output keeps its group live to the end, which
is correct because the bytes are identical. Members of one group live at the
same step always hold the same bytes: an in-place write happens only once
every earlier member is dead.

:func:`check_groups` is the independent proof: given any groups (from this
module, a plan file or a hand-made mutation) it lists every rule they break.

Worked example, order ``a = Relu(x); b = Reshape(a); c = Sigmoid(b)`` where
only ``c`` is a graph output and ``x`` is a graph input: ``a`` is not in place
(``x`` is a graph input), ``b`` views ``a``, ``c`` is in place over ``b``
(the group ``{a, b}`` dies at the Sigmoid), so the one group is
``{'a': ('a', 'b', 'c')}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .graph import GraphView, Op

__all__ = [
    "RULES",
    "Alias",
    "AliasRule",
    "alias_groups",
    "alias_rule",
    "check_groups",
    "find_aliases",
]

VIEW = "view"
INPLACE = "inplace"


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


@dataclass(frozen=True, slots=True)
class Alias:
    """Node ``node`` writes ``output`` into the bytes of ``input`` (``kind``: view or inplace)."""

    node: int
    output: str
    input: str
    kind: str


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:  # path compression
            self.parent[x], x = root, self.parent.get(x, x)
        return root

    def union(self, keep: str, other: str) -> None:
        """Attach ``other``'s set under ``keep``'s root (the group keeps its root's id)."""
        a, b = self.find(keep), self.find(other)
        if a != b:
            self.parent[b] = a


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


def find_aliases(view: GraphView, order: Sequence[int], io: str = "internal") -> tuple[Alias, ...]:
    """Every alias the rules allow under ``order``, in schedule order (see the module doc)."""
    last = _last_reads(view, order)
    outputs = set(view.outputs)
    uf = _UnionFind()
    members: dict[str, list[str]] = {}  # root -> members so far
    aliases: list[Alias] = []

    def group_of(name: str) -> list[str]:
        return members.get(uf.find(name), [name])

    for k, op_index in enumerate(order):
        op = view.ops[op_index]
        rule = alias_rule(op)
        if rule is None or not op.outputs or not op.outputs[0]:
            continue
        out = op.outputs[0]
        if not _planned(view, out, io):
            continue
        out_t = view.tensors[out]
        for j in rule.inputs:
            if j >= len(op.inputs) or not op.inputs[j]:
                continue
            src = op.inputs[j]
            if not _planned(view, src, io) or view.tensors[src].size != out_t.size:
                continue
            if rule.kind == INPLACE and not _may_overwrite(view, op, rule, k, group_of(src), out_t.size,
                                                           last, outputs):
                continue
            root = uf.find(src)
            uf.union(root, out)
            members.setdefault(root, [src]).append(out)
            aliases.append(Alias(op_index, out, src, rule.kind))
            break
    return tuple(aliases)


def _may_overwrite(view: GraphView, op: Op, rule: AliasRule, step: int, group: Sequence[str],
                   size: int, last: Mapping[str, int], outputs: set[str]) -> bool:
    """Whether ``op`` at ``step`` may write its output over ``group``'s bytes."""
    for m in group:
        t = view.tensors[m]
        if t.kind != "activation" or m in outputs or last.get(m, -1) > step:
            return False
    return not _unsafe_reads(view, op, rule, set(group), size)


def _unsafe_reads(view: GraphView, op: Op, rule: AliasRule, group: set[str], size: int) -> list[str]:
    """Inputs of ``op`` in ``group`` that an in-place write could change before they are read."""
    return [n for j, n in enumerate(op.inputs)
            if n in group and (j not in rule.inputs or view.tensors[n].size != size)]


def alias_groups(view: GraphView, order: Sequence[int], io: str = "internal") -> dict[str, tuple[str, ...]]:
    """``{group id: member tensors}`` for every group of two or more tensors.

    The id is the group's first tensor (its root); members are in schedule
    order. Pass the result to :func:`onnxmem.liveness.build_liveness`.
    """
    groups: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for a in find_aliases(view, order, io):
        gid = owner.get(a.input, a.input)
        owner[a.input] = gid
        owner[a.output] = gid
        groups.setdefault(gid, [a.input]).append(a.output)
    return {g: tuple(m) for g, m in groups.items()}


def check_groups(view: GraphView, order: Sequence[int], groups: Mapping[str, Sequence[str]],
                 io: str = "internal") -> list[str]:
    """Every way ``groups`` break the aliasing rules under ``order``; empty when legal.

    Independent of :func:`find_aliases`: for each group, its members are
    taken in the order they are written; the first (the root) may be any
    planned tensor, and each later member must be output 0 of a node whose
    rule lets it take the bytes of an earlier member it reads, of the same
    byte size. An in-place write further needs every earlier member dead
    after that node, none a graph input or output, and the node to read the
    group only element by element. Members must be planned arena tensors,
    and a tensor may be in one group only.
    """
    problems: list[str] = []
    step = {op: k for k, op in enumerate(order)}
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
        if bad:
            continue

        def written(name: str) -> int:
            p = view.tensors[name].producer
            return -1 if p is None else step[p]

        ordered = sorted(mem, key=written)
        for i, m in enumerate(ordered[1:], start=1):
            earlier = ordered[:i]
            p = view.tensors[m].producer
            if p is None:
                problems.append(f"group '{gid}': '{m}' and '{ordered[0]}' are both graph inputs or "
                                "initializers; two values no node writes cannot share bytes")
                continue
            op = view.ops[p]
            k = step[p]
            rule = alias_rule(op)
            where = f"group '{gid}': node '{op.name}' ({op.op_type})"
            if rule is None:
                problems.append(f"{where} writes '{m}' over the bytes of '{earlier[-1]}' but its op "
                                "may not alias (it reads neighbours or has no alias rule)")
                continue
            if op.outputs[0] != m:
                problems.append(f"{where}: only output 0 may alias, '{m}' is another output")
                continue
            sources = [op.inputs[j] for j in rule.inputs
                       if j < len(op.inputs) and op.inputs[j] in earlier]
            if not sources:
                problems.append(f"{where} writes '{m}' into group '{gid}' but reads no member of it "
                                "at an input its rule allows")
                continue
            size = view.tensors[m].size
            if all(view.tensors[s].size != size for s in sources):
                problems.append(f"{where}: '{m}' is {size} B but '{sources[0]}' is "
                                f"{view.tensors[sources[0]].size} B; aliased tensors must be the same size")
                continue
            if rule.kind != INPLACE:
                continue
            for e in earlier:
                t = view.tensors[e]
                if t.kind == "input" or e in outputs:
                    problems.append(f"{where} writes '{m}' in place over '{e}', a graph "
                                    f"{'input' if t.kind == 'input' else 'output'}")
                elif last.get(e, -1) > k:
                    later = view.ops[order[last[e]]].name
                    problems.append(f"{where} writes '{m}' in place over '{e}', which node "
                                    f"'{later}' reads later")
            for n in _unsafe_reads(view, op, rule, set(earlier), size):
                problems.append(f"{where} reads '{n}' of group '{gid}' at an input that is not read "
                                f"element by element before '{m}' is written over it")
    return problems
