"""Liveness: a graph and an operator order become a memory-assignment problem.

Step ``k`` is the execution of ``order[k]``. Lifetimes are half-open
``[start, end)`` in steps, and this module is the one place that sets them:

* a node output is live from its producer's step to one past the last step
  that reads it (a value captured by a subgraph is read by the owning node);
* an output nothing reads (an unused optional output too) still occupies
  memory during its producer's step: ``[p, p + 1)``;
* graph inputs are live from step 0; graph outputs until the end of the run;
* with ``io="external"`` graph inputs and outputs are left out of the arena,
  for runtimes that own them;
* weights (initializers and constants) are never in the arena.

Each planned tensor belongs to a *group* of tensors that share bytes, at a
byte offset inside the group's buffer (0 unless it is a Concat input placed
in its slice of the output, see ``onnxmem.aliasing``); every group becomes one
buffer of the problem, as large as its members reach (the largest
``offset + size``) rounded up to the alignment, and live over the union of
its members' lifetimes ``[min start, max end)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from .errors import ModelError
from .graph import GraphView, Tensor
from .problem import Buffer, Problem, align_up, lower_bound

if TYPE_CHECKING:
    from .aliasing import AliasLayout

__all__ = ["IO_MODES", "Interval", "Liveness", "arena_tensors", "build_liveness", "shared_liveness"]

IO_MODES = ("internal", "external")


@dataclass(frozen=True, slots=True)
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


def arena_tensors(view: GraphView, io: str = "internal") -> list[Tensor]:
    """The tensors the arena holds: every non-weight, less graph inputs and
    outputs with ``io="external"``."""
    if io not in IO_MODES:
        raise ModelError(f"--io '{io}' is not one of {', '.join(IO_MODES)}")
    io_names = set(view.inputs) | set(view.outputs)
    return [
        t for t in view.tensors.values()
        if t.kind != "weight" and not (io == "external" and t.name in io_names)
    ]


def tensor_lifetimes(
    view: GraphView, order: Sequence[int], io: str = "internal"
) -> dict[str, tuple[int, int]]:
    """``{tensor: (start, end)}`` for every tensor the arena holds."""
    if io not in IO_MODES:
        raise ModelError(f"--io '{io}' is not one of {', '.join(IO_MODES)}")
    n = len(order)
    horizon = max(n, 1)
    step = {op: k for k, op in enumerate(order)}
    last_read: dict[str, int] = {}
    for k, op_index in enumerate(order):
        for name in view.ops[op_index].reads:
            last_read[name] = k
    out_set = set(view.outputs)
    lifetimes: dict[str, tuple[int, int]] = {}
    for t in arena_tensors(view, io):
        start = 0 if t.producer is None else step[t.producer]
        end = last_read.get(t.name, start) + 1
        if t.name in out_set:
            end = horizon
        lifetimes[t.name] = (start, max(end, start + 1))
    return lifetimes


def build_liveness(
    view: GraphView,
    order: Sequence[int],
    *,
    io: str = "internal",
    alignment: int = 64,
    groups: Mapping[str, Sequence[str]] | None = None,
    offsets: Mapping[str, int] | None = None,
) -> Liveness:
    """Lifetimes of every planned tensor and the problem over their groups.

    ``groups`` maps a group id to member tensors that share bytes; a tensor
    in no group is a group of its own. ``offsets`` gives a member's byte
    offset inside its group's buffer (absent: 0). Groups and offsets are
    chosen by the aliasing rules (``onnxmem.aliasing.alias_layout``), which
    guarantee their members may share.
    """
    if alignment < 1:
        raise ModelError(f"--alignment {alignment} must be 1 or more")
    lifetimes = tensor_lifetimes(view, order, io)
    member_of: dict[str, str] = {}
    for gid, members in (groups or {}).items():
        for m in members:
            if m in lifetimes:
                member_of[m] = gid
    offs = offsets or {}
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
        s = min(lifetimes[m][0] for m in members)
        e = max(lifetimes[m][1] for m in members)
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


def shared_liveness(view: GraphView, order: Sequence[int], io: str = "internal", alignment: int = 64,
                    layout: Callable[..., AliasLayout] | None = None) -> Liveness:
    """The liveness of ``order`` with the sharing :mod:`onnxmem.aliasing` allows.

    Views and in-place outputs share bytes; Concat inputs are placed inside
    their output as well unless that raises the max-live bound (a placed
    input reserves the whole output from its own write on, which can cost
    more than the copy it saves); then the layout without them is kept. This
    is the liveness ``onnxmem plan --inplace on`` plans. ``layout``: the
    function that finds the groups (:func:`onnxmem.aliasing.alias_layout`;
    tests pass others).
    """
    from .aliasing import alias_layout

    layout = layout or alias_layout
    flat = layout(view, order, io, alignment=alignment, concat=False)
    live = build_liveness(view, order, io=io, alignment=alignment, groups=flat.groups, offsets=flat.offsets)
    nested = layout(view, order, io, alignment=alignment, concat=True)
    if nested.offsets or nested.groups != flat.groups:
        other = build_liveness(view, order, io=io, alignment=alignment, groups=nested.groups,
                               offsets=nested.offsets)
        if lower_bound(other.problem) <= lower_bound(live.problem):
            live = other
    return live
