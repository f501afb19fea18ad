"""Rules 5 to 7 of the static proof of a point plan (:mod:`onnxmem.proof.plan`): sharing.

Rules 5 (alias groups in one buffer, writes over live bytes only where the write leaves
them as they are) and 6 (no two groups live at one step share a byte) are one sweep over
the steps: at each step the tensors that died are dropped from an active set sorted by
offset, and each tensor written there is looked up in it (every active tensor whose bytes
meet its bytes is a pair to judge) before it joins. Rule 7 (shared objects) is the same
sweep per object.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from onnxmem.analysis.aliasing import alias_rule, concat_slices
from onnxmem.core.errors import flag_value, show_name
from onnxmem.core.sortedblocks import live_overlaps
from onnxmem.graph import GraphView
from onnxmem.plans.point import MemoryPlan, PlannedTensor
from onnxmem.proof.finding import Finding, Lifetimes

__all__ = ["kept_bytes", "object_findings", "sharing_findings"]


class _Sharing:
    """Rules 5 and 6: one sweep over the steps with an active set sorted by offset."""

    def __init__(self, plan: MemoryPlan, view: GraphView, names: list[str], life: Lifetimes,
                 inside: frozenset[frozenset[str]] = frozenset()) -> None:
        self.view = view
        self.inside = inside
        self.names = names
        self.life = life
        self.alias: list[Finding] = []
        self.overlap: list[Finding] = []
        # the groups of two or more tensors (a pair is judged by its group only when both
        # are in one); a tensor alone in its group is left out, as most are
        size = Counter(pt.group for pt in plan.tensors)
        groups: dict[str, dict[str, PlannedTensor]] = {}
        for pt in plan.tensors:
            if size[pt.group] > 1:
                groups.setdefault(pt.group, {})[pt.name] = pt
        del size
        self.groups = groups
        self.broken: set[str] = set()  # groups not in one buffer: their pairs are not judged
        for gid, members in groups.items():
            if len(members) < 2:
                continue
            bases = {m.offset - m.group_offset for m in members.values()}
            if len(bases) > 1:
                second = list(members)[1]
                self.alias.append(
                    Finding(
                        "alias",
                        second,
                        f"tensors of alias group {gid!r} must lie in one buffer (offset - group_offset the same) "
                        f"but start it at {sorted(bases)}",
                    )
                )
                self.broken.add(gid)
        self._kept: dict[str, list[tuple[int, int]]] = {}

    def sweep(self, tensors: Sequence[PlannedTensor], limit: int | None) -> None:
        """Judge every pair of ``tensors`` that is live at one step and shares bytes."""
        if not tensors:
            return
        spans = [self.life[t.name] for t in tensors]
        pairs = live_overlaps([sp[0] for sp in spans], [sp[1] for sp in spans], [t.offset for t in tensors],
                              [t.offset + t.size for t in tensors])
        for j, i in pairs:
            self._pair(tensors[j], tensors[i])
            if limit is not None and len(self.alias) + len(self.overlap) >= limit:
                return

    def _pair(self, u: PlannedTensor, t: PlannedTensor) -> None:
        """``u`` (live already) and ``t`` (written now) share bytes while both are live."""
        if frozenset((u.name, t.name)) in self.inside:
            return  # an If output inside its region, where its branches write it (rule 8)
        if u.group != t.group:
            self.overlap.append(self._overlap(u, t))
            return
        if u.group in self.broken:
            return
        self._write_over(t, u)
        if self.life[u.name][0] == self.life[t.name][0]:
            self._write_over(u, t)

    def _overlap(self, a: PlannedTensor, b: PlannedTensor) -> Finding:
        life, view, names = self.life, self.view, self.names
        if (life[b.name][0], b.name) < (life[a.name][0], a.name):
            a, b = b, a
        lo_t, hi_t = max(life[a.name][0], life[b.name][0]), min(life[a.name][1], life[b.name][1])
        lo, hi = max(a.offset, b.offset), min(a.offset + a.size, b.offset + b.size)
        writer = view.tensors[b.name].producer
        wname = view.ops[writer].name if writer is not None else "(graph input)"
        return Finding(
            "overlap",
            b.name,
            f"tensors {a.name!r} and {b.name!r} (written by node {wname!r}) are both live in steps "
            f"[{lo_t}, {hi_t}) (nodes {names[lo_t]!r} to {names[hi_t - 1]!r}) and share bytes [{lo}, {hi})",
            node=wname,
            other=a.name,
            byte_range=(lo, hi),
        )

    def _write_over(self, y: PlannedTensor, x: PlannedTensor) -> None:
        """The producer of ``y`` writes it over bytes of ``x``, a member of its group live then."""
        view = self.view
        t = view.tensors[y.name]
        if t.producer is None:
            return
        s = self.life[y.name][0]
        xs, xe, _ = self.life[x.name]
        op = view.ops[t.producer]
        gid = y.group
        if xs == s and view.tensors[x.name].producer == t.producer:
            self.alias.append(
                Finding("alias", y.name, f"outputs {show_name(x.name)} and {show_name(y.name)} of "
                        f"node {show_name(op.name)} share bytes (group {show_name(gid)})",
                        node=op.name, other=x.name)
            )
            return
        rule = alias_rule(op, view.kernels)
        dies = x.name in op.inputs and xe <= s + 1 and x.name not in view.outputs
        elementwise = (
            rule is not None
            and rule.kind == "inplace"
            and rule.holds_for(view.tensors[x.name].elem_type)
            and all(j in rule.inputs and (x.offset, x.size) == (y.offset, y.size) for j, n in enumerate(op.inputs) if n == x.name)
        )
        if dies and elementwise:
            return  # written in place, element by element, over an input that dies here
        lo, hi = y.offset, y.offset + y.size
        a, b = max(lo, x.offset), min(hi, x.offset + x.size)
        kept = self._kept.get(y.name)
        if kept is None:
            kept = self._kept[y.name] = kept_bytes(view, op, y, self.groups[gid])
        if any(klo <= a and b <= khi for klo, khi in kept):
            return  # a view, or a Concat over its own input: those bytes do not change
        why = (
            f"which is still live until step {xe - 1}"
            if not dies
            else f"but {flag_value(op.op_type)} may not write its output over that input in "
            "place (it reads neighbours, reads it at another input, or the bytes differ)"
        )
        self.alias.append(
            Finding(
                "alias",
                x.name,
                f"node {show_name(op.name)} ({flag_value(op.op_type)}) writes {show_name(y.name)} "
                f"over {show_name(x.name)} (alias group {show_name(gid)}), {why}",
                node=op.name,
                other=y.name,
            )
        )


def sharing_findings(
    plan: MemoryPlan, view: GraphView, names: list[str], life: Lifetimes, *, limit: int | None,
    inside: frozenset[frozenset[str]] = frozenset(),
) -> tuple[list[Finding], list[Finding]]:
    """``(alias findings, overlap findings)``: rules 5 and 6 (``inside``: pairs of a region and an If output its branches write inside it, rule 8 of :mod:`onnxmem.proof.plan`)."""
    sharing = _Sharing(plan, view, names, life, inside)
    sharing.sweep([pt for pt in plan.tensors if pt.size > 0], limit)
    return sharing.alias, sharing.overlap


def kept_bytes(view: GraphView, op: Any, y: PlannedTensor, members: Mapping[str, PlannedTensor]) -> list[tuple[int, int]]:
    """Arena ranges inside ``y`` that ``op`` writes with the bytes already there: all of
    ``y`` for a view of a member at ``y``'s bytes; for a Concat, the slices whose
    input is a member sitting at that slice."""
    lo, hi = y.offset, y.offset + y.size
    rule = alias_rule(op, view.kernels)
    if rule is not None and rule.kind == "view":
        src = members.get(op.inputs[0]) if op.inputs else None
        return [(lo, hi)] if src is not None and (src.offset, src.size) == (y.offset, y.size) else []
    slices = concat_slices(view, op)
    if slices is None:
        return []
    return [(lo + off, lo + off + members[n].size) for n, off in zip(op.inputs, slices)
            if n in members and members[n].offset == lo + off and members[n].size == view.tensors[n].size]


def object_findings(plan: MemoryPlan, life: Lifetimes) -> list[Finding]:
    """Rule 7; per object, a sweep over its members in step order."""
    objs = {o.id: o for o in plan.objects}
    found: list[Finding] = []
    members: dict[int, list[PlannedTensor]] = {}
    for pt in plan.tensors:
        if pt.object is None:
            found.append(Finding("object", pt.name, f"tensor {pt.name!r} has no shared object in a shared-objects plan"))
            continue
        o = objs.get(pt.object)
        if o is None:
            found.append(Finding("object", pt.name, f"tensor {pt.name!r} names shared object {pt.object}, which the plan lacks"))
            continue
        if pt.offset - pt.group_offset != o.offset or pt.group_offset + pt.size > o.size:
            found.append(
                Finding(
                    "object",
                    pt.name,
                    f"tensor {pt.name!r} ({pt.size} B at {pt.offset}) does not sit inside its object {o.id} "
                    f"({o.size} B at {o.offset})",
                )
            )
        members.setdefault(pt.object, []).append(pt)
    for oid, ms in members.items():
        live: list[tuple[int, int, PlannedTensor]] = []  # (end, position, tensor): a min-heap
        for pos, b in enumerate(sorted(ms, key=lambda m: life[m.name][0])):
            sb = life[b.name][0]
            while live and live[0][0] <= sb:
                heapq.heappop(live)
            for _e, _p, a in sorted(live, key=lambda item: item[1]):
                if a.group != b.group:
                    found.append(
                        Finding(
                            "object",
                            b.name,
                            f"tensors {a.name!r} and {b.name!r} share object {oid} but are both live at step {sb}",
                            other=a.name,
                        )
                    )
            heapq.heappush(live, (life[b.name][1], pos, b))
    return found

