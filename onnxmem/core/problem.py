"""The memory-assignment problem, free of ONNX.

A *buffer* is a block of ``size`` bytes that is live during the half-open step
interval ``[start, end)``. A *solution* gives every buffer an ``offset`` in one
arena so that two buffers live at the same step never share a byte; its
``height`` is the arena size, the largest ``offset + size``. This is the
dynamic-storage-allocation problem as MiniMalloc states it, and the CSV format
here is MiniMalloc's (``id,lower,upper,size[,offset]``).

When buffers conflict along a graph instead of along time (plans safe under
concurrent execution), a problem carries explicit ``conflicts``
(:class:`onnxmem.core.conflict_graph.Conflicts`): then two buffers may not share a byte
exactly when they conflict, whatever their steps say, and the lower bound is
the heaviest set of pairwise-conflicting buffers. Without it the problem is
the interval problem, the fast special case.

This module imports neither onnx nor onnxruntime: it can be tested on literal
problems and on peer benchmark instances alone.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field
from enum import Enum
from itertools import chain
from operator import attrgetter
from typing import Iterable, Iterator, Sequence

import numpy as np

from onnxmem.core.conflict_graph import Conflicts, antichain_bound, clique_bound
from onnxmem.core.errors import ProblemError, show_name
from onnxmem.core.fileio import MAX_CSV_BYTES, read_input, write_text_atomic
from onnxmem.core.records import record
from onnxmem.core.sizes import MAX_ALIGNMENT, MAX_TIMEOUT
from onnxmem.core.sortedblocks import live_overlaps

__all__ = [
    "MAX_ALIGNMENT",
    "MAX_TIMEOUT",
    "Buffer",
    "Conflicts",
    "Problem",
    "Solution",
    "Status",
    "Violation",
    "align_up",
    "check_limits",
    "height_of",
    "live_bytes",
    "lower_bound",
    "read_csv",
    "time_points",
    "time_sections",
    "validate",
    "write_csv",
]

#: the largest size, offset, step and sum of sizes a problem may hold, so that
#: every sum a solver makes fits in int64
MAX_VALUE = 2**62


def check_limits(alignment: int, timeout: float | None = None) -> None:
    """Refuse an alignment below 1 or past :data:`MAX_ALIGNMENT`, and a timeout that is not a
    number of seconds from 0 to :data:`MAX_TIMEOUT` (``ProblemError``, one line)."""
    if not 1 <= alignment <= MAX_ALIGNMENT:
        raise ProblemError(f"--alignment {alignment}: give 1 to 2^30 ({MAX_ALIGNMENT:,}) bytes, such as 64")
    if timeout is not None and not 0 <= timeout <= MAX_TIMEOUT:  # NaN fails both
        raise ProblemError(f"--timeout {timeout}: give 0 to {MAX_TIMEOUT:g} seconds, or none for the default budgets")


class Status(str, Enum):
    """What a solver's answer says; each status has one meaning.

    - ``optimal``: a plan, proven the smallest (it meets a lower bound, or
      every smaller arena was ruled out);
    - ``feasible``: a plan within the capacity (any plan when minimizing); the
      solver finished its procedure without proving it the smallest;
    - ``infeasible``: proven: no plan fits the capacity (no offsets);
    - ``timeout``: the deadline came before the solver could finish: it
      carries the best plan it had, which in a decision may not fit the
      capacity (see :meth:`Solution.fits`);
    - ``over-capacity``: the solver finished, but its plan does not fit the
      capacity; nothing is proven (heuristics that do not search say this).
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    TIMEOUT = "timeout"
    OVER_CAPACITY = "over-capacity"

    def __str__(self) -> str:
        return self.value


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` that is >= ``value``."""
    if alignment <= 1:
        return value
    return -(-value // alignment) * alignment


@record
class Buffer:
    """One block to place.

    ``start``/``end``: lifetime in schedule steps, half-open ``[start, end)``.
    ``size``: bytes. ``alignment``: the offset must be a multiple of it.
    ``offset``: set when the buffer is pinned at a fixed offset.
    """

    id: str
    start: int
    end: int
    size: int
    alignment: int = 1
    offset: int | None = None

    def __post_init__(self) -> None:
        if (type(self.start) is int and type(self.end) is int and type(self.size) is int
                and type(self.alignment) is int and self.offset is None
                and 0 <= self.start < self.end <= MAX_VALUE and 0 <= self.size <= MAX_VALUE
                and 1 <= self.alignment <= MAX_VALUE):
            return  # the usual buffer: every check below passes (its name is escaped only for a message)
        name = show_name(self.id)
        for what, value in (("start", self.start), ("end", self.end), ("size", self.size),
                            ("alignment", self.alignment), ("offset", self.offset)):
            if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool)):
                raise ProblemError(f"buffer {name} has {what} {value!r}, not an integer")
        if self.start < 0:
            raise ProblemError(f"buffer {name} starts at step {self.start}; steps start at 0")
        if self.end <= self.start:
            raise ProblemError(
                f"buffer {name} has lifetime [{self.start}, {self.end}); "
                "a lifetime must be non-empty (end > start)"
            )
        if self.size < 0:
            raise ProblemError(f"buffer {name} has negative size {self.size}")
        if self.alignment < 1:
            raise ProblemError(
                f"buffer {name} has alignment {self.alignment}; use 1 or more"
            )
        for what, value in (("end", self.end), ("size", self.size), ("alignment", self.alignment),
                            ("offset", self.offset)):
            if value is not None and value > MAX_VALUE:
                raise ProblemError(
                    f"buffer {name} has {what} {value:,}, above 2^62 ({MAX_VALUE:,}), the most "
                    "onnxmem plans; check the number"
                )
        if self.offset is not None and (
            self.offset < 0 or self.offset % self.alignment
        ):
            raise ProblemError(
                f"buffer {name} is pinned at offset {self.offset}, which is "
                f"negative or not a multiple of its alignment {self.alignment}"
            )


@dataclass(frozen=True, slots=True)
class Problem:
    """Buffers to place; ``capacity`` (bytes) bounds the arena when given.

    ``conflicts``: when given, the pairs of buffers (by index) that may not
    share a byte, in place of "live at one step" (see the module docstring).
    """

    buffers: tuple[Buffer, ...]
    capacity: int | None = None
    conflicts: Conflicts | None = None

    def __post_init__(self) -> None:
        ids = [b.id for b in self.buffers]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ProblemError(f"buffer id {show_name(dup)} appears twice; ids must be unique")
        if self.capacity is not None and self.capacity < 0:
            raise ProblemError(f"capacity {self.capacity} is negative")
        if self.conflicts is not None and self.conflicts.size != len(self.buffers):
            raise ProblemError(f"conflict graph over {self.conflicts.size} buffers for a problem of "
                               f"{len(self.buffers)}")
        if self.capacity is not None and self.capacity > MAX_VALUE:
            raise ProblemError(f"capacity {self.capacity:,} is above 2^62 ({MAX_VALUE:,}); give a smaller one")
        # every offset a solver makes is below the sum of the sizes, each padded to
        # its alignment, and above any pinned buffer: keep that sum in int64 with room
        total = 0
        for b in self.buffers:
            total += b.size + b.alignment
            if b.offset is not None:
                total = max(total, b.offset + b.size + b.alignment)
            if total > MAX_VALUE:
                raise ProblemError(
                    f"buffer {show_name(b.id)} takes the sum of the sizes (with alignment) past 2^62 "
                    f"({MAX_VALUE:,} bytes), the most onnxmem plans; check the sizes"
                )

    def __len__(self) -> int:
        return len(self.buffers)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(start, end, size, alignment)`` as int64 arrays, in buffer order."""
        n = len(self.buffers)
        rows = chain.from_iterable(map(attrgetter("start", "end", "size", "alignment"), self.buffers))
        out = np.fromiter(rows, dtype=np.int64, count=4 * n).reshape(n, 4).T.copy()  # one C-contiguous row each
        return out[0], out[1], out[2], out[3]

    def with_capacity(self, capacity: int | None) -> "Problem":
        return Problem(self.buffers, capacity, self.conflicts)


@dataclass(frozen=True, slots=True)
class Solution:
    """Offsets for every buffer of a problem, in buffer order.

    ``status``: a :class:`Status` (a plain string is converted); ``offsets`` is
    empty only when it is ``infeasible``. ``objects``: for shared-object
    solutions, the object index of each buffer. ``stats``: figures the solver
    reports (``lower_bound``, ``gap_pct``, ``nodes``, ``budget_s``: the
    seconds it was given, ...).
    """

    offsets: tuple[int, ...]
    height: int
    solver: str
    status: Status = Status.FEASIBLE
    seconds: float = 0.0
    objects: tuple[int, ...] | None = None
    stats: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "status", Status(self.status))
        except ValueError:
            raise ValueError(f"unknown solution status {self.status!r}") from None

    @property
    def optimal(self) -> bool:
        return self.status is Status.OPTIMAL

    @property
    def found(self) -> bool:
        """Whether the solution carries offsets (every status but ``infeasible``)."""
        return self.status is not Status.INFEASIBLE

    def fits(self, capacity: int | None) -> bool:
        """Whether it carries a plan whose arena fits ``capacity`` (``None``: any)."""
        return self.found and (capacity is None or self.height <= capacity)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule of a solution; ``buffers`` names the ids involved."""

    kind: str  # "overlap" | "alignment" | "capacity" | "pinned" | "negative" | "count"
    buffers: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return self.message


def time_points(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The distinct start and end times, sorted (int64).

    ``np.unique``'s answer, without its first call's import of ``numpy.ma``
    (about 50 ms, a tenth of a small instance's whole ``pack``).
    """
    t = np.sort(np.concatenate([start, end]).astype(np.int64, copy=False))
    if len(t) == 0:
        return t
    keep = np.empty(len(t), dtype=bool)
    keep[0] = True
    np.not_equal(t[1:], t[:-1], out=keep[1:])
    return t[keep]


def time_sections(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(points, slo, shi)``: :func:`time_points`, and each buffer's time
    sections ``[slo, shi)`` (int64 indices into ``points``; section ``s`` is
    ``[points[s], points[s + 1])``)."""
    points = time_points(start, end)
    slo = np.searchsorted(points, start).astype(np.int64, copy=False)
    shi = np.searchsorted(points, end).astype(np.int64, copy=False)
    return points, slo, shi


def live_bytes(problem: Problem) -> np.ndarray:
    """Bytes live at each step ``0 .. max(end)-1`` (an array of that length)."""
    if not problem.buffers:
        return np.zeros(0, dtype=np.int64)
    start, end, size, _ = problem.arrays()
    horizon = int(end.max())
    delta = np.zeros(horizon + 1, dtype=np.int64)
    np.add.at(delta, start, size)
    np.add.at(delta, end, -size)
    return np.cumsum(delta[:-1])


def lower_bound(problem: Problem) -> int:
    """The max-live lower bound: the most bytes live at any one step.

    No placement can use less, since buffers live at the same step are
    disjoint. It is also at least the largest ``offset + size`` of a pinned
    buffer. With explicit conflicts: the heaviest set of pairwise-conflicting
    buffers instead (exact for conflicts made from a precedence,
    :func:`onnxmem.core.conflict_graph.antichain_bound`; a greedy clique otherwise).
    """
    bound = 0
    conflicts = problem.conflicts
    if conflicts is not None and problem.buffers:
        sizes = [b.size for b in problem.buffers]
        if conflicts.precedence is not None:
            bound = antichain_bound(conflicts.precedence, sizes)
        else:
            bound = clique_bound(conflicts, sizes)
    elif problem.buffers:
        # a sweep over the start and end events (ends first at a tie, lifetimes
        # being half-open), not over every step: times may be far apart
        start, end, size, _ = problem.arrays()
        times = np.concatenate([start, end])
        deltas = np.concatenate([size, -size])
        order = np.lexsort((deltas, times))
        bound = max(int(np.cumsum(deltas[order]).max()), 0)
    for b in problem.buffers:
        if b.offset is not None:
            bound = max(bound, b.offset + b.size)
    return bound


def height_of(problem: Problem, offsets: Sequence[int]) -> int:
    """The arena size that ``offsets`` needs: the largest ``offset + size``."""
    if not problem.buffers:
        return 0
    _, _, size, _ = problem.arrays()
    return int((np.asarray(offsets, dtype=np.int64) + size).max(initial=0))


def validate(
    problem: Problem, solution: Solution | Sequence[int], *, limit: int | None = None
) -> list[Violation]:
    """Every rule ``solution`` breaks; an empty list means the plan is valid.

    Checks each buffer's offset (non-negative, aligned, equal to its pinned
    offset), the arena (height covers every buffer and fits the capacity), and
    every pair of buffers live at one step for a shared byte, in one sweep by
    ``start`` (``O(n log n)`` for a valid plan, however many buffers are live at
    once). ``limit`` stops after that many violations.
    """
    offsets = solution.offsets if isinstance(solution, Solution) else tuple(solution)
    bufs = problem.buffers
    if len(offsets) != len(bufs):
        return [Violation("count", (), f"solution has {len(offsets)} offsets for {len(bufs)} buffers")]
    found = _offset_violations(bufs, offsets, limit)
    if not bufs or (limit is not None and len(found) >= limit):
        return found
    found += _arena_violations(problem, solution, offsets)
    if limit is not None and len(found) >= limit:
        return found
    rest = None if limit is None else limit - len(found)
    if problem.conflicts is not None:
        return found + _conflict_violations(problem, problem.conflicts, offsets, rest)
    return found + _overlap_violations(problem, offsets, rest)


def _offset_violations(bufs: Sequence[Buffer], offsets: Sequence[int], limit: int | None) -> list[Violation]:
    """Offsets that are negative, unaligned or off their pin (at most ``limit``, buffer by buffer)."""
    found: list[Violation] = []
    for b, off in zip(bufs, offsets):
        if off < 0:
            found.append(Violation("negative", (b.id,), f"buffer {show_name(b.id)} has negative offset {off}"))
        elif off % b.alignment:
            found.append(Violation("alignment", (b.id,), f"buffer {show_name(b.id)} at offset {off} is not a "
                                   f"multiple of its alignment {b.alignment}"))
        if b.offset is not None and off != b.offset:
            found.append(Violation("pinned", (b.id,),
                                   f"buffer {show_name(b.id)} is pinned at {b.offset} but placed at {off}"))
        if limit is not None and len(found) >= limit:
            break
    return found


def _arena_violations(problem: Problem, solution: Solution | Sequence[int], offsets: Sequence[int]) -> list[Violation]:
    """The arena's height against the height a solution claims and against the capacity."""
    found: list[Violation] = []
    height = height_of(problem, offsets)
    if isinstance(solution, Solution) and solution.height < height:
        found.append(Violation("capacity", (), f"solution claims arena {solution.height} but its buffers reach {height}"))
    if problem.capacity is not None and height > problem.capacity:
        found.append(Violation("capacity", (), f"arena {height} exceeds the capacity {problem.capacity}"))
    return found


def _overlap_violations(problem: Problem, offsets: Sequence[int], limit: int | None) -> list[Violation]:
    """Pairs of buffers live at one step that share a byte (at most ``limit``).

    One sweep over the buffers by ``start`` (:func:`~onnxmem.core.sortedblocks.live_overlaps`):
    ``O(n log n)`` however many buffers are live at once.
    """
    found: list[Violation] = []
    bufs = problem.buffers
    live = [i for i, b in enumerate(bufs) if b.size > 0]
    pairs = live_overlaps([bufs[i].start for i in live], [bufs[i].end for i in live],
                          [offsets[i] for i in live], [offsets[i] + bufs[i].size for i in live])
    for j, i in pairs:
        a, b = live[j], live[i]
        found.append(_overlap(bufs[a], bufs[b], offsets[a], offsets[b]))
        if limit is not None and len(found) >= limit:
            break
    return found


def _overlap(a: Buffer, b: Buffer, off_a: int, off_b: int) -> Violation:
    lo_t, hi_t = max(a.start, b.start), min(a.end, b.end)
    lo_a, hi_a = max(off_a, off_b), min(off_a + a.size, off_b + b.size)
    return Violation("overlap", (a.id, b.id), f"buffers {show_name(a.id)} and {show_name(b.id)} are both live in "
                     f"steps [{lo_t}, {hi_t}) and share bytes [{lo_a}, {hi_a})")


def _conflict_violations(problem: Problem, conflicts: Conflicts, offsets: Sequence[int],
                         limit: int | None) -> list[Violation]:
    """Every conflicting pair (explicit conflicts) that shares a byte."""
    found: list[Violation] = []
    bufs = problem.buffers
    offs = np.asarray(offsets, dtype=np.int64)
    _, _, size, _ = problem.arrays()
    for i in range(len(bufs)):
        if size[i] == 0:
            continue
        nb = conflicts.neighbours(i)
        nb = nb[nb > i]
        clash = nb[(offs[nb] < offs[i] + size[i]) & (offs[i] < offs[nb] + size[nb]) & (size[nb] > 0)]
        for j in clash:
            a, b = bufs[i], bufs[int(j)]
            lo_a = max(int(offs[i]), int(offs[j]))
            hi_a = min(int(offs[i]) + a.size, int(offs[j]) + b.size)
            found.append(Violation("overlap", (a.id, b.id),
                                   f"buffers {show_name(a.id)} and {show_name(b.id)} conflict (they may be "
                                   f"live at once) and share bytes [{lo_a}, {hi_a})"))
            if limit is not None and len(found) >= limit:
                return found
    return found


# ---------------------------------------------------------------- CSV (MiniMalloc)


def _parse_int(text: str, what: str, where: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ProblemError(f"{where}: {what} {show_name(text)} is not an integer of at most 20 digits")
    return int(text)


_INTEGER = re.compile(r"[-+]?[0-9]{1,20}")


def read_csv(
    source: str | os.PathLike[str] | io.TextIOBase, *, alignment: int = 1
) -> tuple[Problem, tuple[int, ...] | None]:
    """Read a MiniMalloc CSV (``id,lower,upper,size[,offset]``).

    Returns the problem and, when the file has an ``offset`` column, the
    offsets it gives (a solution to check). ``upper`` is exclusive. A file
    must be a regular file of at most ``MAX_CSV_BYTES``, in UTF-8 (a leading
    byte-order mark is skipped), of at most :data:`MAX_CSV_ROWS` rows, blank
    ones included (rows are read one at a time, never all held); every number
    must fit the bounds of :class:`Buffer` and :class:`Problem`. Errors name
    the file and the line.
    """
    if isinstance(source, io.TextIOBase):
        name = "'<stream>'"
        text = source.read()
    else:
        name = show_name(os.fspath(source))
        data = read_input(source, "CSV file", MAX_CSV_BYTES, ProblemError)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProblemError(f"CSV file {name} is not UTF-8 text (byte {exc.start}); give a "
                               "MiniMalloc CSV 'id,lower,upper,size'") from None
        del data
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""))
    try:
        buffers, offsets = _csv_rows(reader, name, alignment)
    except csv.Error as exc:
        raise ProblemError(f"CSV file {name} is not a readable CSV (line {reader.line_num}: {exc}); give a "
                           "MiniMalloc CSV 'id,lower,upper,size'") from None
    try:
        return Problem(tuple(buffers)), offsets
    except ProblemError as exc:
        raise ProblemError(f"CSV file {name}: {exc}") from None


#: most rows a CSV problem may have (blank rows included): a bound on the time and memory of a read
MAX_CSV_ROWS = 1_000_000

_CSV_HEADER = ["id", "lower", "upper", "size"]


def _csv_rows(reader: Iterator[list[str]], name: str, alignment: int) -> tuple[list[Buffer], tuple[int, ...] | None]:
    """The buffers of a MiniMalloc CSV's rows and its offsets (``None`` without the column)."""
    header: list[str] | None = None
    buffers: list[Buffer] = []
    offsets: list[int] = []
    for count, row in enumerate(reader, start=1):
        if count > MAX_CSV_ROWS:
            raise ProblemError(f"CSV file {name} has more than {MAX_CSV_ROWS:,} rows, the most onnxmem reads; "
                               "split the problem or check that it is the right file")
        where = f"{name}:{getattr(reader, 'line_num', count)}"  # the line the row ends on
        if not any(c.strip() for c in row):
            continue
        if header is None:
            header = [c.strip().lower() for c in row]
            if header[:4] != _CSV_HEADER or len(header) > 5 or (len(header) == 5 and header[4] != "offset"):
                raise ProblemError(f"CSV file {name} has header {show_name(','.join(header))}; expected "
                                   "'id,lower,upper,size' optionally followed by ',offset'")
            continue
        if len(row) != len(header):
            raise ProblemError(f"{where}: expected {len(header)} fields ({','.join(header)}), found {len(row)}")
        bid = row[0].strip()
        lower = _parse_int(row[1].strip(), "lower", where)
        upper = _parse_int(row[2].strip(), "upper", where)
        size = _parse_int(row[3].strip(), "size", where)
        try:
            buffers.append(Buffer(bid, lower, upper, size, alignment))
        except ProblemError as exc:
            raise ProblemError(f"{where}: {exc}") from None
        if len(header) == 5:
            offsets.append(_parse_int(row[4].strip(), "offset", where))
    if header is None:
        raise ProblemError(f"CSV file {name} is empty; expected a header 'id,lower,upper,size'")
    return buffers, (tuple(offsets) if len(header) == 5 else None)


def write_csv(
    problem: Problem, path: str | os.PathLike[str] | None, offsets: Iterable[int] | None = None
) -> str:
    """MiniMalloc CSV text for ``problem`` (with an offset column when given).

    Writes it to ``path`` atomically when a path is given; returns the text.
    """
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    offs = list(offsets) if offsets is not None else None
    w.writerow(["id", "lower", "upper", "size"] + (["offset"] if offs is not None else []))
    for i, b in enumerate(problem.buffers):
        row = [b.id, b.start, b.end, b.size]
        if offs is not None:
            row.append(offs[i])
        w.writerow(row)
    text = out.getvalue()
    if path is not None:
        write_text_atomic(path, text, "-o")
    return text
