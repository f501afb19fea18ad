"""Handing the heap memory a step freed back to the system.

glibc's ``malloc`` keeps what the process frees for its next allocations and returns it to the
system only from the top of its heap, or where a block was mapped on its own. Shape inference of
a large graph makes and drops copies of the model (the piece models, the inferred copy) among
objects that live on, so the pages they held stay in the process's resident size; the steps
after it then add theirs on top, and the peak resident size of ``plan`` on a 100,000-node graph
moved by tens of MiB with the order in which earlier steps happened to allocate.
:func:`release_freed` asks the C library to give back every free page it holds
(``malloc_trim``); a C library without it (musl, macOS, Windows) is left as it is.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

__all__ = ["release_freed"]


@functools.cache
def _trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` where the process's C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        fn = ctypes.CDLL(None).malloc_trim  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_freed() -> bool:
    """Return the heap pages the process has freed to the system; whether the C library could
    (a few milliseconds for a heap of hundreds of MiB)."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
