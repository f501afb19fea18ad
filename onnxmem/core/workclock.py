"""The planning clock: counted work by default, seconds only when the user asks.

Every search in the planning path (the solvers, the order search, the
recomputation search) stops at a deadline read from :func:`now`. By default
that clock counts *work*, not time: each search charges, with :func:`charge`,
the steps it took (buffers placed, search nodes visited, orders expanded),
weighted to about a microsecond each on an idle machine, and
:data:`UNITS_PER_SECOND` units make one *budget second*. A budget of 3 s is
then a fixed amount of work, and a plan is the same on a busy machine and an
idle one, and on every run.

:func:`use_wall_clock` (what the CLI's ``--timeout`` turns on) switches the
process to real seconds: a search then stops when the time is up, and its
result may depend on the machine's load.

Compiled kernels take their stop as one integer
(:func:`onnxmem.core._compiled.kernel_stop`): a
non-negative value is a deadline on the cycle counter, a negative one ``-k``
a limit of ``k`` steps, which they check against their own step count.

:func:`session` starts the count at zero for an outermost search, so that the
deadlines it computes are the same numbers on every run.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

__all__ = [
    "UNITS_PER_SECOND", "charge", "charge_to", "is_wall_clock", "now", "session", "steps_left", "units_now",
    "use_wall_clock",
]

#: work units in one budget second (a power of two: the clock's readings are
#: exact binary fractions)
UNITS_PER_SECOND = 1 << 20

_WALL = False
_local = threading.local()


def use_wall_clock(on: bool = True) -> None:
    """Make :func:`now` read real seconds (``on``) or counted work, for the whole process."""
    global _WALL
    _WALL = on


def is_wall_clock() -> bool:
    return _WALL


def _units() -> int:
    return int(getattr(_local, "units", 0))


def now() -> float:
    """The planning clock: ``time.perf_counter()`` under the wall clock, else work done in budget seconds."""
    if _WALL:
        return time.perf_counter()
    return _units() / UNITS_PER_SECOND


def units_now() -> int:
    """The work clock's reading in units (a compiled search counts on from it, then
    :func:`charge` adds what it counted)."""
    return _units()


def charge(units: float) -> None:
    """Count ``units`` of work done (about a microsecond each); no effect under the wall clock."""
    if units > 0:
        _local.units = _units() + int(units)


def charge_to(deadline: float) -> None:
    """Count work up to ``deadline`` (a search that stopped at its limit spent it all)."""
    if not _WALL:
        _local.units = max(_units(), int(deadline * UNITS_PER_SECOND))


def steps_left(deadline: float, cost: float) -> int:
    """Steps of ``cost`` units each that fit before ``deadline`` on the work clock (0 when past)."""
    return max(0, int((deadline * UNITS_PER_SECOND - _units()) // cost))


@contextmanager
def session() -> Iterator[None]:
    """Count work from zero inside an outermost search (nested sessions share the count)."""
    depth = int(getattr(_local, "depth", 0))
    if depth == 0:
        _local.units = 0
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth
