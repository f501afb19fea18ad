"""The processor's cycle counter, readable from compiled (numba) code.

Compiled code cannot call ``time.monotonic`` and stay cacheable (or be
compiled ahead of time), so the search loops read the cycle counter
(``llvm.readcyclecounter``) through :func:`cycles` and compare it with a
deadline in cycles (see :mod:`onnxmem.core._compiled` for the conversion from
seconds). Where the counter is unavailable it reads 0.

Importing this module loads numba: the compiled kernels import it; Python
code reads the counter through :func:`onnxmem.core._compiled.cycles`.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["cycles", "past"]


@intrinsic
def _readcyclecounter(typingctx: Any) -> Any:
    sig = types.int64()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, fnty, "llvm.readcyclecounter"
        )
        return builder.call(fn, [])

    return sig, codegen


@njit(cache=True)
def cycles() -> int:
    """The processor's cycle counter (0 where there is none)."""
    return _readcyclecounter()  # type: ignore[call-arg]


@njit(cache=True)
def past(step: int, stop: int) -> bool:
    """Whether a kernel at its ``step``-th step is past ``stop``: a step limit
    ``-stop`` when negative, else a deadline on :func:`cycles` (see
    :func:`onnxmem.core._compiled.kernel_stop`)."""
    if stop < 0:
        return step >= -stop
    return _readcyclecounter() > stop  # type: ignore[call-arg]
