"""The answers of the compiled order search (:mod:`._search`) its callers need.

Kept apart from the kernel so that :mod:`.exact` reads them without loading numba (the
kernel may come compiled ahead of time, see :mod:`onnxmem.core._native`).
"""

from __future__ import annotations

__all__ = ["PROVEN", "TIMEOUT"]

#: the best order is optimal
PROVEN = 0
#: stopped at the deadline or the limit on sets expanded
TIMEOUT = 1
