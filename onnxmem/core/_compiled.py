"""Compiled code: a deadline clock it can read, and first-use warm-up.

Two things every compiled search needs, in one place for the solvers and the
schedulers:

- a clock: the search loops read the processor's cycle counter
  (:mod:`onnxmem.core._cyclecounter`) and compare it with a deadline in cycles.
  :func:`deadline_cycles` converts seconds from now into such a deadline,
  using a rate measured once per process (:func:`cycles_per_second`). Where
  the counter is unavailable it reads 0, the deadline is never reached, and
  the callers' node limits bound the work.
- warm-up: the first call of a numba kernel in a process compiles it (or
  loads it from numba's on-disk cache), which can take seconds.
  :func:`warm_up` makes that call (the caller passes one that stops at once),
  measures the clock, and returns the seconds it took, so that the caller can
  move its deadline by them: the budget is spent searching, and a result does
  not depend on whether the cache was warm. Kernels compiled ahead of time
  (:mod:`onnxmem.core._native`) need no warm-up.

Importing this module does not load numba; reading the clock loads the
kernels as :func:`onnxmem.core._native.kernels` decides (the module compiled ahead
of time when it is built and current, else numba).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from onnxmem.core import _native
from onnxmem.core.workclock import is_wall_clock, steps_left

__all__ = ["NO_DEADLINE", "cycles", "cycles_per_second", "deadline_cycles", "kernel_stop", "warm_up"]

#: a deadline that is never reached
NO_DEADLINE = 2**62


def cycles() -> int:
    """The processor's cycle counter (0 where there is none)."""
    return int(_native.kernels("onnxmem.core._cyclecounter").cycles())


_RATE: float | None = None


def cycles_per_second() -> float:
    """Counter ticks per second, measured once over about 5 ms (0: no counter)."""
    global _RATE
    if _RATE is None:
        cycles()  # compile or load it first, outside the measured interval
        t0, c0 = time.perf_counter(), cycles()
        time.sleep(0.005)
        t1, c1 = time.perf_counter(), cycles()
        _RATE = max(0.0, (c1 - c0) / (t1 - t0))
    return _RATE


def deadline_cycles(seconds: float | None) -> int:
    """The counter value ``seconds`` from now (:data:`NO_DEADLINE` for ``None``)."""
    rate = cycles_per_second()
    if seconds is None or rate <= 0:
        return NO_DEADLINE
    at = cycles() + max(0.0, seconds) * rate
    return int(at) if at < NO_DEADLINE else NO_DEADLINE  # seconds past the counter's range: none


def kernel_stop(deadline: float | None, cost: float) -> int:
    """The stop a compiled kernel takes for ``deadline`` (an :func:`onnxmem.core.workclock.now` value).

    ``None``: never. Under the wall clock: a cycle-counter deadline. Else
    ``-k``: at most ``k`` steps of ``cost`` work units each (at least one).
    """
    if deadline is None:
        return NO_DEADLINE
    if is_wall_clock():
        return deadline_cycles(deadline - time.perf_counter())
    return -max(1, steps_left(deadline, cost))


def warm_up(kernel: Any, first_call: Callable[[], object]) -> float:
    """Compile ``kernel`` in this process if needed; the seconds that took.

    When ``kernel`` (a numba dispatcher) has not run yet in this process,
    ``first_call`` is made (it should call the kernel so that it returns at
    once: a node limit of 1, say) and the clock is measured; otherwise, and
    for a kernel compiled ahead of time, nothing runs and the answer is 0.
    Callers add the answer to their deadline. On the work clock
    (:mod:`onnxmem.core.workclock`) compiling costs no budget: nothing runs here
    and the answer is 0.
    """
    if not is_wall_clock() or _native.is_ahead_of_time(kernel) or kernel.signatures:
        return 0.0
    t0 = time.perf_counter()
    first_call()
    cycles_per_second()
    return time.perf_counter() - t0
