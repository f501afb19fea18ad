"""What onnxruntime's CPU process holds besides the plan's tensors, for the session a user runs.

A user's process runs a *default* session: ``SessionOptions()`` as it is (``ORT_ENABLE_ALL``,
memory patterns on, the CPU arena on, weights prepacked). Measured on the zoo
(``python bench/bench_fit.py --only terms``, docs/fit.md), its peak resident growth from
before the session is made is

    max(created + inputs, held + activations)

* ``created`` (:attr:`Process.created`): the peak while the session is made. onnxruntime maps
  external data (the pages it reads are resident) and, with prepacking on, reads every
  MatMul, Gemm and Conv weight to pack a copy in MLAS's layout; the pages of the originals it
  no longer needs are released afterwards, so ``created`` is above ``held`` (the Llama-style
  decoder: 431 MiB created, 306 MiB held);
* ``held`` (:attr:`Process.held`): what the session keeps once made: weights as held (mapped
  pages read, copies, prepacked copies), kernels, thread pools, the provider's fixed cost.
  Both are measured by making the model's session once in the onnxruntime child
  (:func:`onnxmem.runtime.session_peak` with no run); without the model's weights they are
  ``weights + fixed`` (the plan's view);
* ``activations``: ``factor x arena``. onnxruntime's activation bytes are above the plan's
  arena: its allocation planner shares less, kernels take scratch (im2col, attention) from
  the same arena, the arena's chunks grow by doubling, and with memory patterns on, run 2
  allocates one block for its whole pattern while the chunks run 1 grew are still held (the
  second copy: on the zoo it adds 0.6x to 1.2x run 1's growth). ``factor`` is measured by a
  real default session of the model at the answer (:func:`activation_factor`), or, where no
  session can run, the rule :data:`SAFETY_FACTOR`: the largest factor measured on the zoo,
  rounded up, an upper bound on every zoo model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from onnxmem.core.errors import OnnxmemError, one_line, show_name

if TYPE_CHECKING:
    import onnx

    from onnxmem.runtime.footprint import SessionPeak

__all__ = ["SAFETY_FACTOR", "Process", "activation_factor", "input_shapes", "measure_process", "run_peak"]

#: memory patterns on/off -> the largest ``(peak - held) / arena`` of a default session over
#: the zoo (ViT-Base: 5.47 at batch 12 with patterns on, 3.05 at batch 8 off; docs/fit.md), rounded up
SAFETY_FACTOR = {True: 6.0, False: 3.6}


@dataclass(frozen=True, slots=True)
class Process:
    """The terms of a default onnxruntime CPU session of one model (bytes, growth over the process
    before the session). ``held`` and ``created``: measured (``None``: not measured, the plan's
    ``weights + fixed`` stand for both); ``factor``: onnxruntime's activation bytes per byte of the
    plan's arena; ``source``: ``"measured at NAME=V"`` or ``"rule"`` (:data:`SAFETY_FACTOR`);
    ``patterns``: the session's memory patterns."""

    held: int | None
    created: int | None
    factor: float
    source: str
    patterns: bool = True
    #: the factor measured at a point (its dims, sorted): it stands there, ``factor`` elsewhere
    factors: Mapping[tuple[tuple[str, int], ...], float] = field(default_factory=dict)

    def activations(self, arena: int, point: Mapping[str, int] | None = None) -> int:
        """onnxruntime's activation bytes for a plan arena of ``arena`` bytes (at ``point``)."""
        factor = self.factors.get(tuple(sorted(point.items())), self.factor) if point is not None else self.factor
        return math.ceil(factor * arena)


def activation_factor(run: SessionPeak, held: int, created: int, arena: int) -> float | None:
    """``(peak + inputs - held) / arena`` of a measured session ``run`` (its peak growth and the
    bytes of its inputs, which the caller holds and the plan's arena counts): its activation
    bytes per byte of the plan's arena; ``None`` where its runs did not take the process past
    the peak of its creation (``created``: the activations are hidden under it, their size
    unknown) or the arena is empty.

    Example: a session made at a 160 MiB peak, holding 150 MiB, that peaks at 240 MiB in its runs
    on 10 MiB of inputs and a 40 MiB arena: 2.5."""
    if arena <= 0 or run.peak <= created:
        return None
    return (run.peak + run.inputs - held) / arena


def measure_process(model: onnx.ModelProto, path: str | os.PathLike[str], patterns: bool, device: str,
                    say: Callable[[str], None]) -> tuple[Process, list[str]]:
    """The model's default session made once in a fresh onnxruntime child (no run): what it holds
    and its peak while made; the activation factor is the rule's until a run measures it. Where
    the session cannot be made (weights missing, another device), the plan's ``weights + fixed``
    stand for both, and a warning says why."""
    from onnxmem.model import check_external_data
    from onnxmem.runtime.footprint import session_peak

    rule = Process(None, None, SAFETY_FACTOR[patterns], "rule", patterns)
    if device != "cpu":
        return rule, [f"onnxruntime's process terms are measured on --device cpu only; on {device} the "
                      "session's weights and fixed cost are counted, onnxruntime's activations by the rule"]
    say("making the model's default onnxruntime session to measure what it holds")
    try:
        check_external_data(model, Path(path).parent, need_files=True)
        made = session_peak(path, {}, level="ORT_ENABLE_ALL", runs=0, mem_pattern=patterns)
    except OnnxmemError as exc:
        return rule, [f"the model's session could not be made to measure it ({one_line(str(exc))}); its weights "
                      "and the fixed cost are counted instead"]
    return Process(made.held, made.created, SAFETY_FACTOR[patterns], "rule", patterns), []


def input_shapes(model: onnx.ModelProto, dims: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """The graph inputs' shapes with their named dims at ``dims``; raises ``OnnxmemError`` naming an
    input whose dim has no value."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = []
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            elif d.dim_param in dims:
                shape.append(int(dims[d.dim_param]))
            else:
                raise OnnxmemError(f"graph input {show_name(vi.name)} has a dim without a value "
                                   f"({show_name(d.dim_param or '?')}); bind it with --dim NAME=N")
        out[vi.name] = tuple(shape)
    return out


def run_peak(model: onnx.ModelProto, path: str | os.PathLike[str], dims: Mapping[str, int],
             patterns: bool) -> tuple[SessionPeak | None, list[str]]:
    """The model's default session run twice at ``dims`` (seeded random inputs) in a fresh
    onnxruntime child: its peak resident growth and the bytes of its inputs; ``None`` and a
    warning where it cannot run."""
    from onnxmem.runtime.footprint import session_peak

    try:
        got = session_peak(path, input_shapes(model, dims), level="ORT_ENABLE_ALL", runs=2, mem_pattern=patterns)
    except OnnxmemError as exc:
        return None, [f"the model's session could not run at {', '.join(f'{k}={v}' for k, v in sorted(dims.items()))} "
                      f"to measure onnxruntime's activations ({one_line(str(exc))}); the rule's factor stands"]
    return got, []
