"""Shared-object solvers: each buffer goes into one of K shared objects.

This is memonger's and TFLite's "shared objects" form: buffers whose lifetimes
never overlap may share an object; an object is as large as its largest member,
and the cost is the sum of the object sizes. The objects are then laid back to
back in one arena (each at an offset aligned to the largest alignment of its
members), so the plan is also an ordinary offset plan and validates as one;
its height is the arena, the sum of the (aligned) object sizes.

- ``shared-greedy`` (memonger's and TFLite's greedy by size):
  1. take buffers largest first (ties: earlier start, index);
  2. among the objects none of whose members overlaps the buffer in time, take
     the smallest that is at least as large as it; failing that the largest
     smaller one (which grows to the buffer's size); failing that open a new
     object.
- ``shared-exact``: depth-first branch and bound over the same largest-first
  order. Each buffer joins one of the compatible open objects or opens a new
  one (one new-object branch per node, so objects are never permuted). As
  buffers come largest first, an object's size is that of its first member,
  and the cost so far is the sum of the sizes of the buffers that opened an
  object. A branch is cut when that cost reaches the best plan's, or the
  positional-maximum bound; the search starts from the greedy plan, stops at
  the caller's deadline (default :data:`SHARED_EXACT_TIMEOUT` seconds, stated
  in its summary) and returns the best plan found, with the status
  ``timeout`` when the deadline cut it off before a proof.
- :func:`positional_maximum_bound`: at each step sort the live sizes in
  decreasing order; the k-th largest object must be at least as large as the
  k-th largest live buffer at every step, so the sum over k of the maximum over
  steps of the k-th largest live size is a lower bound on the cost.

Guarantee: every plan validates (members of an object never overlap in time);
``optimal`` only when the cost meets the positional-maximum bound or the
search was exhausted. Shared objects can cost more than offset plans: the
bound here is the shared-object one, not the max-live one.
"""

from __future__ import annotations

import numpy as np

from onnxmem.core.problem import Problem, Solution, align_up, time_points
from onnxmem.core.solvers.registry import SolveOptions, judge, register
from onnxmem.core.workclock import charge, now

__all__ = ["positional_maximum_bound", "shared_greedy_objects", "layout_objects"]

#: default seconds of search for ``shared-exact``
SHARED_EXACT_TIMEOUT = 10.0
#: work units (:mod:`onnxmem.core.workclock`) per node of the search
NODE_COST = 4.0


def positional_maximum_bound(problem: Problem) -> int:
    """The positional-maximum lower bound on the total size of shared objects."""
    if not problem.buffers:
        return 0
    start, end, size, _ = problem.arrays()
    points = time_points(start, end)
    best: list[int] = []
    for t in points[:-1]:
        live = np.sort(size[(start <= t) & (end > t)])[::-1]
        for k, s in enumerate(live.tolist()):
            if k < len(best):
                if s > best[k]:
                    best[k] = s
            else:
                best.append(s)
    return int(sum(best))


def _order(problem: Problem) -> np.ndarray:
    start, _, size, _ = problem.arrays()
    return np.lexsort((np.arange(len(size)), start, -size))


def _overlaps(problem: Problem) -> np.ndarray:
    start, end, size, _ = problem.arrays()
    ov = (start[:, None] < end[None, :]) & (start[None, :] < end[:, None])
    zero = size == 0
    ov[zero, :] = False
    ov[:, zero] = False
    return ov


def shared_greedy_objects(problem: Problem) -> list[int]:
    """Object index per buffer, by memonger's closest-size-first greedy."""
    start, end, size, _ = problem.arrays()
    n = len(size)
    obj_of = [-1] * n
    obj_size: list[int] = []
    members: list[list[int]] = []
    for i in _order(problem).tolist():
        fit_above = -1
        fit_below = -1
        for k, mem in enumerate(members):
            if size[i] > 0 and any(
                start[j] < end[i] and start[i] < end[j] and size[j] > 0 for j in mem
            ):
                continue
            if obj_size[k] >= size[i]:
                if fit_above < 0 or obj_size[k] < obj_size[fit_above]:
                    fit_above = k
            elif fit_below < 0 or obj_size[k] > obj_size[fit_below]:
                fit_below = k
        k = fit_above if fit_above >= 0 else fit_below
        if k < 0:
            k = len(members)
            members.append([])
            obj_size.append(0)
        members[k].append(i)
        obj_size[k] = max(obj_size[k], int(size[i]))
        obj_of[i] = k
    return obj_of


def layout_objects(problem: Problem, objects: list[int]) -> tuple[list[int], int]:
    """Offsets of every buffer with objects laid back to back; and the arena."""
    _, _, size, align = problem.arrays()
    count = max(objects, default=-1) + 1
    osize = [0] * count
    oalign = [1] * count
    for i, k in enumerate(objects):
        osize[k] = max(osize[k], int(size[i]))
        oalign[k] = max(oalign[k], int(align[i]))
    base = [0] * count
    top = 0
    for k in range(count):
        base[k] = align_up(top, oalign[k])
        top = base[k] + osize[k]
    return [base[k] for k in objects], top


def _cost(problem: Problem, objects: list[int]) -> int:
    return layout_objects(problem, objects)[1]


def _solution(
    problem: Problem, objects: list[int], name: str, bound: int, capacity: int | None,
    cut_off: bool = False,
) -> Solution:
    """``bound``: a proven lower bound on the arena (the cost itself when the
    search was exhausted)."""
    offsets, height = layout_objects(problem, objects)
    status = judge(height, bound, capacity, cut_off)
    return Solution(
        tuple(offsets), height, name, status, objects=tuple(objects),
        stats={"lower_bound": float(bound)},
    )


@register("shared-greedy", "shared objects: largest first, closest size (memonger)", "shared-objects")
def shared_greedy(problem: Problem, options: SolveOptions) -> Solution:
    objects = shared_greedy_objects(problem)
    return _solution(
        problem, objects, "shared-greedy", positional_maximum_bound(problem), options.capacity
    )


@register(
    "shared-exact", "shared objects: branch and bound, proves optimality", "shared-objects",
    default_timeout=SHARED_EXACT_TIMEOUT,
)
def shared_exact(problem: Problem, options: SolveOptions) -> Solution:
    deadline = options.deadline if options.deadline is not None else float("inf")
    greedy = shared_greedy_objects(problem)
    bound = positional_maximum_bound(problem)
    best_objects = list(greedy)
    best_cost = _cost(problem, greedy)
    _, _, size, align = problem.arrays()
    widest = int(align.max(initial=1))
    padded = any(int(z) % widest for z in size)
    if best_cost <= bound or padded:
        # when a size is not a multiple of the widest alignment, laying objects
        # back to back pads them and the cost is not the plain sum the search
        # counts; keep the greedy plan there (planned models round every size
        # up to the alignment, so they are searched)
        return _solution(problem, best_objects, "shared-exact", bound, options.capacity)
    order = _order(problem).tolist()
    ov = _overlaps(problem)
    n = len(order)
    assign = [-1] * len(size)
    members: list[list[int]] = []
    timed_out = False
    nodes = 0

    def dfs(pos: int, cost: int) -> None:
        nonlocal best_cost, best_objects, timed_out, nodes
        if timed_out or cost >= best_cost:
            return
        nodes += 1
        if (nodes & 1023) == 0:
            charge(1024 * NODE_COST)
        if (nodes & 1023) == 0 and now() > deadline:
            timed_out = True
            return
        if pos == n:
            best_cost = cost
            best_objects = list(assign)
            return
        i = order[pos]
        for k, mem in enumerate(members):
            if not ov[i, mem].any():
                mem.append(i)
                assign[i] = k
                dfs(pos + 1, cost)
                mem.pop()
                if best_cost <= bound or timed_out:
                    return
        if cost + int(size[i]) < best_cost:
            members.append([i])
            assign[i] = len(members) - 1
            dfs(pos + 1, cost + int(size[i]))
            members.pop()
        assign[i] = -1

    dfs(0, 0)
    # an exhausted search proves the best cost (no layout padding reaches here)
    proven = bound if timed_out else max(bound, best_cost)
    return _solution(problem, best_objects, "shared-exact", proven, options.capacity, timed_out)
