"""A deadline clock that compiled search loops can read.

Compiled (numba) code cannot call ``time.monotonic`` and stay cacheable, so the
search loops read the processor's cycle counter (``llvm.readcyclecounter``)
and compare it with a deadline in cycles. :func:`deadline_cycles` converts a
timeout in seconds into such a deadline, using a rate measured once per
process. Where the counter is unavailable it reads 0, the deadline is never
reached, and the callers' node limits bound the work instead.
"""

from __future__ import annotations

import time

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["cycles", "cycles_per_second", "deadline_cycles", "NO_DEADLINE"]

#: a deadline that is never reached
NO_DEADLINE = 2**62


@intrinsic
def _readcyclecounter(typingctx):  # type: ignore[no-untyped-def]
    sig = types.int64()

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


@njit(cache=True)
def cycles() -> int:
    """The processor's cycle counter (0 where there is none)."""
    return _readcyclecounter()  # type: ignore[call-arg]


_RATE: float | None = None


def cycles_per_second() -> float:
    """Counter ticks per second, measured once over about 20 ms (0: no counter)."""
    global _RATE
    if _RATE is None:
        cycles()  # compile or load it first, outside the measured interval
        t0, c0 = time.perf_counter(), cycles()
        time.sleep(0.02)
        t1, c1 = time.perf_counter(), cycles()
        _RATE = max(0.0, (c1 - c0) / (t1 - t0))
    return _RATE


def deadline_cycles(seconds: float | None) -> int:
    """The counter value ``seconds`` from now (:data:`NO_DEADLINE` for ``None``)."""
    rate = cycles_per_second()
    if seconds is None or rate <= 0:
        return NO_DEADLINE
    return int(cycles() + max(0.0, seconds) * rate)
