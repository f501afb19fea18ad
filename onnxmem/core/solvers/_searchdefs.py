"""The constants of the compiled search (:mod:`._search`) its callers need.

Kept apart from the kernels so that :mod:`.exact` reads them without loading
numba (the kernels may come compiled ahead of time, see
:mod:`onnxmem.core._native`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ABORTED", "FOUND", "FRAME_FIELDS", "HEURISTICS", "NCTR", "NOT_FOUND", "TIMEOUT"]

#: the search's answers
FOUND = 0
NOT_FOUND = 1
ABORTED = 2
TIMEOUT = 3

#: the length of the counters array (see :func:`._search.search`)
NCTR = 11
#: the number of fields of a search frame (the columns of ``search``'s ``F``)
FRAME_FIELDS = 23

#: preordering heuristics: keys in priority order, all descending
#: (0: lifetime width, 1: area, 2: largest section total over the lifetime)
HEURISTICS = np.array([[0, 1, 2], [2, 1, 0], [2, 0, 1]], dtype=np.int64)
