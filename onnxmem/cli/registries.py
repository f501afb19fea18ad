"""The library's registries as the command line shows them: ``onnxmem list`` and the choices
of the flags.

Each registry is read when a command first needs it (they import numpy or onnx), so that
``onnxmem --help`` stays light. The small fixed sets of names a flag's help spells out
(:data:`IO_MODES` ...) come from :mod:`onnxmem.core.choices`, which the library reads too.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

from onnxmem.core.choices import (
    CONCURRENCY_MODES,
    DEVICES,
    EXECUTION_MODES,
    IO_MODES,
    OPTIMIZE_LEVELS,
    RANDWIRE_KINDS,
)

__all__ = [
    "CONCURRENCY_MODES", "DEVICES", "EXECUTION_MODES", "IO_MODES", "LISTINGS", "OPTIMIZE_LEVELS", "RANDWIRE_KINDS",
    "all_generators", "formats", "generators", "orders", "remat", "solvers",
]

if TYPE_CHECKING:
    import onnx

    from onnxmem.model.generate import GeneratorInfo


def solvers() -> dict[str, str]:
    from onnxmem.core.solvers import SOLVERS  # numpy

    return {name: s.summary for name, s in SOLVERS.items()}


def orders() -> dict[str, str]:
    from onnxmem.scheduling import ORDERS  # onnx

    return {name: o.summary for name, o in ORDERS.items()}


def all_generators() -> dict[str, GeneratorInfo]:
    """``onnxmem generate`` KINDs: name -> its :class:`~onnxmem.model.generate.GeneratorInfo`
    (``build(size, seed, graph)``, summary, what ``--size`` counts and the largest it takes)."""
    from onnxmem.model.generate import GENERATORS, GeneratorInfo  # onnx
    from onnxmem.remat.training import TRAINING

    out = dict(GENERATORS)
    for name, (build, summary, size, most) in TRAINING.items():
        out[name] = GeneratorInfo(name, functools.partial(_train_build, build), summary, size, most)
    return out


def _train_build(build: Callable[[int, int], onnx.ModelProto], size: int, seed: int, graph: str) -> onnx.ModelProto:
    """A training generator, which has no ``--graph``, called as the others are."""
    return build(size, seed)


def generators() -> dict[str, str]:
    return {name: f"{g.summary}; --size counts {g.size}, at most {g.most:,}" for name, g in all_generators().items()}


def remat() -> dict[str, str]:
    from onnxmem.remat import ALGORITHMS  # onnx

    return {name: a.summary for name, a in ALGORITHMS.items()}


def formats() -> dict[str, str]:
    from onnxmem.export import FORMATS

    return {name: f.summary for name, f in FORMATS.items()}


#: ``onnxmem list WHAT``: each registry's entries as name -> one-line summary
LISTINGS: dict[str, Callable[[], dict[str, str]]] = {
    "solvers": solvers,
    "orders": orders,
    "formats": formats,
    "generators": generators,
    "remat": remat,
}
