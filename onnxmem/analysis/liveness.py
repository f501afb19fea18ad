"""Liveness: a view, an operator order and an alias layout become a memory-assignment problem.

Step ``k`` is the execution of ``order[k]``. When each tensor is born and
dies is the lifetime rule of :mod:`onnxmem.analysis.lifetimes`; this module applies it
and groups the tensors that share bytes.

Each planned tensor belongs to a *group* of tensors that share bytes, at a
byte offset inside the group's buffer (0 unless it is a Concat input placed
in its slice of the output); the groups and offsets are an
:class:`AliasLayout`, chosen by :mod:`onnxmem.analysis.aliasing` (which owns the
sharing rules and the policy of which sharing to use). Every group becomes
one buffer of the problem, as large as its members reach (the largest
``offset + size``) rounded up to the alignment, and live over the union of
its members' lifetimes ``[min start, max end)``.

Linear in the number of tensors plus the order's length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from onnxmem.analysis.lifetimes import IO_MODES, arena_tensors, group_span, tensor_lifetimes
from onnxmem.core.errors import ModelError, show_name
from onnxmem.core.problem import Buffer, Problem, align_up
from onnxmem.core.records import record
from onnxmem.graph import GraphView

__all__ = ["IO_MODES", "AliasLayout", "Interval", "Liveness", "arena_tensors", "build_liveness",
           "tensor_lifetimes"]


@dataclass(frozen=True, slots=True)
class AliasLayout:
    """Groups of tensors that share bytes, and where each sits in its group's buffer.

    ``groups``: ``{group id: members}`` (two or more each; the id is the first
    member written, members in the order they are written). ``offsets``:
    ``{tensor: byte offset inside its group's buffer}`` for members not at 0.
    """

    groups: dict[str, tuple[str, ...]]
    offsets: dict[str, int] = field(default_factory=dict)


@record
class Interval:
    """A planned tensor: live in steps ``[start, end)``; ``size`` in bytes."""

    tensor: str
    start: int
    end: int
    size: int
    group: str
    offset: int = 0  # bytes from the start of the group's buffer


@dataclass(frozen=True, slots=True)
class Liveness:
    order: tuple[int, ...]
    intervals: tuple[Interval, ...]
    groups: Mapping[str, tuple[str, ...]]  # group id -> member tensors
    problem: Problem  # one buffer per group, ``Buffer.id`` = group id
    io: str
    alignment: int

    def interval(self, tensor: str) -> Interval:
        for iv in self.intervals:
            if iv.tensor == tensor:
                return iv
        raise KeyError(tensor)


def _region_groups(view: GraphView, member_of: dict[str, str],
                   offs: Mapping[str, int]) -> tuple[dict[str, str], dict[str, int]]:
    """``(member_of, offsets)`` with each region of :attr:`GraphView.region_outputs` one group
    with the If outputs its branches write inside it, each at its offset there (and the
    members of an output's own group beside it). ``ModelError`` when two outputs put one
    tensor at two offsets."""
    member_of = dict(member_of)
    out = dict(offs)
    for region, placed in view.region_outputs.items():
        pos: dict[str, int] = {}
        for name, at in ((region, 0), *placed.items()):
            gid = member_of.get(name)
            members = [m for m, g in member_of.items() if g == gid] if gid is not None else [name]
            base = at - out.get(name, 0)
            for m in members:
                if pos.setdefault(m, base + out.get(m, 0)) != base + out.get(m, 0):
                    raise ModelError(f"tensor {show_name(m)} would sit at two offsets in region {show_name(region)}")
        shift = max(0, -min(pos.values()))
        for m, p in pos.items():
            member_of[m] = region
            out[m] = p + shift
    return member_of, out


def build_liveness(
    view: GraphView,
    order: Sequence[int],
    layout: AliasLayout | None = None,
    *,
    io: str = "internal",
    alignment: int = 64,
    last_read: Mapping[str, int] | None = None,
) -> Liveness:
    """Lifetimes of every planned tensor and the problem over their groups (``last_read``:
    :func:`onnxmem.analysis.lifetimes.last_reads` of ``order``, where the caller has it).

    ``layout`` maps a group id to member tensors that share bytes, each at
    its offset inside the group's buffer (absent: 0); a tensor in no group
    is a group of its own, and no layout means no sharing. Layouts come from
    :func:`onnxmem.analysis.aliasing.shared_layout` (or ``alias_layout``), whose rules
    guarantee the members may share.
    """
    if alignment < 1:
        raise ModelError(f"--alignment {alignment} must be 1 or more")
    lifetimes = tensor_lifetimes(view, order, io, last_read)
    member_of: dict[str, str] = {}
    for gid, shared in (layout.groups if layout is not None else {}).items():
        for m in shared:
            if m in lifetimes:
                member_of[m] = gid
    offs: Mapping[str, int] = layout.offsets if layout is not None else {}
    if view.region_outputs:
        member_of, offs = _region_groups(view, member_of, offs)
    intervals: list[Interval] = []
    group_members: dict[str, list[str]] = {}
    for name, (start, end) in lifetimes.items():
        gid = member_of.get(name, name)
        off = int(offs.get(name, 0)) if name in member_of else 0
        if off < 0:
            raise ModelError(f"tensor '{name}' has a negative offset {off} in its alias group")
        intervals.append(Interval(name, start, end, view.tensors[name].size, gid, off))
        group_members.setdefault(gid, []).append(name)
    reach = {iv.tensor: iv.offset + iv.size for iv in intervals}
    buffers: list[Buffer] = []
    for gid, members in group_members.items():
        if len(members) == 1:  # most tensors share bytes with none
            (s, e), size = lifetimes[members[0]], reach[members[0]]
        else:
            s, e = group_span(lifetimes, members)
            size = max(reach[m] for m in members)
        buffers.append(Buffer(gid, s, e, align_up(size, alignment), alignment))
    return Liveness(
        tuple(order),
        tuple(intervals),
        {g: tuple(m) for g, m in group_members.items()},
        Problem(tuple(buffers)),
        io,
        alignment,
    )
