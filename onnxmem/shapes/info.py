"""The result of shape inference: every value's dtype and concrete shape, and where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxmem.model import BodyKey
from onnxmem.shapes.loops import LoopBound

__all__ = ["ShapeInfo"]


@dataclass(frozen=True, slots=True)
class ShapeInfo:
    """Every top-level value's dtype and concrete shape, and how it was found.

    ``bodies``: for each subgraph (If branch, Loop or Scan body, nested at any
    depth), ``{value: (dtype, shape)}`` of the values it defines (its inputs,
    initializers and node outputs) whose shapes static inference resolved;
    a value missing there has no static size (the view says so, naming it).
    """

    dtypes: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    sources: dict[str, str] = field(default_factory=dict)  # name -> onnx|evaluated|loop-bound|symbolic|measured|value_info
    warnings: tuple[str, ...] = ()
    bodies: dict[BodyKey, dict[str, tuple[int, tuple[int, ...]]]] = field(default_factory=dict)
    #: If branches left out of the plan (``--branch``): runs are assumed to take the other one
    excluded: frozenset[BodyKey] = frozenset()
    #: Loops whose carried values grow per iteration, by body key: sized for their trip bound
    #: (:mod:`onnxmem.shapes.loops`)
    loops: dict[BodyKey, LoopBound] = field(default_factory=dict)
    #: the model has no subgraph and no local function (found once by inference, so that the
    #: view need not walk every node's attributes for bodies again); ``False`` where not known
    flat: bool = False
