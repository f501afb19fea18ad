"""A rewritten model against the model it was rewritten from: ``onnxmem verify --original``.

:func:`compare_with_original` runs the rewritten model node by node inside
its arena (:class:`onnxmem.execution.ArenaRun`, the run ``verify`` makes) and
the original model as a whole in onnxruntime (graph optimizations off, one
thread: the same kernels), on the same inputs, and compares every graph
output of the original: a recomputed node is the same kernel on the same
bytes, so the outputs (gradients included, for training graphs) must be
equal bit for bit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ..errors import OnnxmemError
from ..execution import ArenaRun, Execution, ExecutionOptions, OutputCheck, compare_output
from ..graph import GraphView
from ..plan import MemoryPlan
from ..runtime import load_with_weights
from ..sessions import run_model

__all__ = ["OriginalCheck", "compare_with_original"]


@dataclass(frozen=True, slots=True)
class OriginalCheck:
    """``outputs``: each graph output of the original model, arena run against the original's
    run; ``execution``: what the arena run itself found."""

    outputs: tuple[OutputCheck, ...]
    execution: Execution

    @property
    def identical(self) -> bool:
        return bool(self.outputs) and all(c.identical for c in self.outputs)


class _CapturingRun(ArenaRun):
    """An arena run that keeps the graph outputs it read from the arena."""

    captured: dict[str, np.ndarray]

    def compare_outputs(self, seconds: float) -> Execution:
        self.captured = {}
        for name in self.view.outputs:
            if name in self.weights:
                self.captured[name] = np.asarray(self.weights[name])
            elif name in self.slots and not self.changed:
                s = self.slots[name]
                dtype = onnx.helper.tensor_dtype_to_np_dtype(s.elem_type)
                self.captured[name] = self._read(s).view(dtype).reshape(s.shape)
        return super().compare_outputs(seconds)


def compare_with_original(rewritten: onnx.ModelProto, plan: MemoryPlan, view: GraphView,
                          original: onnx.ModelProto, *, rewritten_path: str | os.PathLike[str] | None,
                          original_path: str | os.PathLike[str] | None,
                          options: ExecutionOptions | None = None) -> OriginalCheck:
    """Module doc. Raises ``OnnxmemError`` when the two models do not share their graph
    inputs and outputs (the rewritten model was not made from ``original``)."""
    opts = options or ExecutionOptions()
    rin = [i.name for i in rewritten.graph.input]
    oin = [i.name for i in original.graph.input]
    rout = [o.name for o in rewritten.graph.output]
    oout = [o.name for o in original.graph.output]
    if rin != oin or rout != oout:
        raise OnnxmemError("--original: the two models differ in their graph inputs or outputs; give the model "
                           "the rewritten one was made from (plan --budget ... --rewrite-out)")
    run = _CapturingRun(plan, rewritten, view, opts, rewritten_path)
    execution = run.run()
    got: dict[str, Any] = getattr(run, "captured", {})
    ref = run_model(load_with_weights(original, original_path), run.feeds, oout)
    checks = []
    for name in oout:
        if name not in got:
            checks.append(OutputCheck(name, float("inf"), False))
            continue
        checks.append(compare_output(name, got[name], ref[name], opts.rtol, opts.atol))
    return OriginalCheck(tuple(checks), execution)
