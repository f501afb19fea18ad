"""The answers of the compiled order search (:mod:`._search`) and the stops of the compiled
greedy pass (:mod:`._greedy`) their callers need.

Kept apart from the kernels so that :mod:`.exact` and :mod:`.heuristics` read them without
loading numba (the kernels may come compiled ahead of time, see :mod:`onnxmem.core._native`).
"""

from __future__ import annotations

__all__ = ["CYCLE_STOP", "NO_STOP", "PROVEN", "TIMEOUT", "WORK_STOP"]

#: the best order is optimal
PROVEN = 0
#: stopped at the deadline or the limit on sets expanded
TIMEOUT = 1

#: the greedy pass's stops: none, a limit on work units (the work clock), a deadline on the cycle counter
NO_STOP = 0
WORK_STOP = 1
CYCLE_STOP = 2
