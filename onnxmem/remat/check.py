"""A rewritten model against the model it was rewritten from: ``onnxmem verify --original``.

:func:`compare_with_original` runs the rewritten model node by node inside
its arena (:class:`onnxmem.runtime.arena.ArenaRun`, the run ``verify`` makes) and
the original model as a whole in onnxruntime (graph optimizations off, one
thread: the same kernels), on the same inputs, and compares every graph
output of the original: a recomputed node is the same kernel on the same
bytes, so the outputs (gradients included, for training graphs) must be
equal bit for bit. Random ops are never recomputed, but two runs of one
Dropout draw different masks unless it has a ``seed``: every random op without
one gets the same seed in both models (:func:`seed_random_ops`, from the name
of its first output, which the rewrite keeps), so both runs draw the same
masks. A training graph (onnxruntime's, :mod:`onnxmem.model.roles`) runs as
:class:`~onnxmem.runtime.training.TrainingRun` on its training inputs, and
its gradients are compared too: each gradient accumulation buffer after the
arena run against the gradient the original's whole run computes (made a
graph output of a copy of the original for that). On CUDA the original runs as
the rewritten model does, node by node in an arena of its own plan on the same
device (an ordinary CPU run differs from CUDA kernels in the last bits), and
the verification sessions fix cuDNN's convolution algorithm, so the two runs
use the same kernels.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx

from onnxmem.core.errors import OnnxmemError, RuntimeBackendError
from onnxmem.graph import RANDOM_OPS as GENERATORS
from onnxmem.graph import GraphView, build_view
from onnxmem.model import ACCUMULATORS
from onnxmem.plans.point import MemoryPlan
from onnxmem.runtime import standins
from onnxmem.runtime.arena import ArenaRun, Execution, ExecutionOptions, OutputCheck, compare_output
from onnxmem.runtime.ort import load_with_weights
from onnxmem.runtime.sessions import run_model
from onnxmem.runtime.training import TrainingRun, is_training_view
from onnxmem.shapes import infer_shapes

__all__ = ["DROPOUTS", "RANDOM_OPS", "OriginalCheck", "compare_with_original", "seed_random_ops"]

#: dropouts (ai.onnx's and onnxruntime's contrib ones): their ``seed`` is an int
DROPOUTS = frozenset({"Dropout", "BiasDropout", "BitmaskDropout", "BitmaskBiasDropout"})
#: ops that draw random numbers and take a ``seed`` attribute (a float for the generators)
RANDOM_OPS = GENERATORS | DROPOUTS


def seed_random_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` where every op of :data:`RANDOM_OPS` without a ``seed`` has one: the
    CRC-32 of its first output's name (the same in a model and its rewrite)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.op_type in RANDOM_OPS and node.output and not any(a.name == "seed" for a in node.attribute):
            seed = zlib.crc32(node.output[0].encode("utf-8")) & 0x7FFFFFFF
            if node.op_type in DROPOUTS:
                node.attribute.append(onnx.helper.make_attribute("seed", seed))
            else:
                node.attribute.append(onnx.helper.make_attribute("seed", float(seed)))
    return out


@dataclass(frozen=True, slots=True)
class OriginalCheck:
    """``outputs``: each graph output of the original model, arena run against the original's
    run; ``execution``: what the arena run itself found."""

    outputs: tuple[OutputCheck, ...]
    execution: Execution

    @property
    def identical(self) -> bool:
        return bool(self.outputs) and all(c.identical for c in self.outputs)


def _training_reference(original: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``original`` whose gradients are graph outputs, and ``{accumulation buffer:
    gradient}`` for each accumulator of ``original`` whose buffer is a graph input (the
    gradient under the original's name: the rewritten model may read a recomputed copy)."""
    inputs = {i.name: i for i in original.graph.input}
    grads = {n.input[0]: n.input[1] for n in original.graph.node
             if n.domain == "com.microsoft" and n.op_type in ACCUMULATORS and len(n.input) > 1
             and n.input[0] in inputs}
    out = onnx.ModelProto()
    out.CopyFrom(original)
    have = {o.name for o in out.graph.output}
    for buf, grad in grads.items():
        if grad not in have:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(inputs[buf])
            vi.name = grad
            out.graph.output.append(vi)
            have.add(grad)
    return out, grads


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


def _device_reference(original: onnx.ModelProto, original_path: str | os.PathLike[str], plan: MemoryPlan,
                      opts: ExecutionOptions, outputs: list[str]) -> dict[str, Any]:
    """The original's outputs on ``opts.device``, run as the rewritten model is: planned at the
    rewritten plan's dims and alignment and executed node by node in its own arena, the same
    kernels on the same inputs (an ordinary CPU run would differ from CUDA kernels in the last
    bits). ``original`` is planned as it is (already loaded): its file is not read again."""
    from onnxmem.planning.pipeline import PlanOptions, plan_loaded

    planned = plan_loaded(original, original_path, PlanOptions(
        alignment=plan.alignment, dims=dict(plan.dims), input_shapes={k: tuple(v) for k, v in plan.input_shapes.items()}))
    run = _CapturingRun(planned.plan, original, planned.view, opts, original_path)
    execution = run.run()
    if execution.findings:
        raise OnnxmemError(f"--original: the original model's own run on {opts.device} failed: {execution.findings[0]}")
    return {name: run.captured[name] for name in outputs if name in run.captured}


class _CapturingTrainingRun(_CapturingRun, TrainingRun):
    """The same for a training graph (its inputs, seeded Dropout, gradient buffers)."""


def _whole_run(model: onnx.ModelProto, feeds: dict[str, Any], names: list[str]) -> dict[str, np.ndarray]:
    """``model`` run as a whole (:func:`~onnxmem.runtime.sessions.run_model`); where onnxruntime lacks a
    kernel for an op with a standard-op stand-in (:mod:`onnxmem.runtime.standins`, the one the
    rewritten model's nodes ran as), with those nodes replaced by their stand-ins."""
    try:
        return run_model(model, feeds, names)
    except RuntimeBackendError as exc:
        op = standins.missing_kernel(str(exc))
        if op is None or not any(n.op_type == op and standins.has_stand_in(n) for n in model.graph.node):
            raise
    view = build_view(model, infer_shapes(model))
    types = {n: (t.elem_type, tuple(t.shape)) for n, t in view.tensors.items()}
    return run_model(standins.inline(model, types), feeds, names)


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
    rewritten, original = seed_random_ops(rewritten), seed_random_ops(original)
    grads: dict[str, str] = {}
    if is_training_view(view):
        original, grads = _training_reference(original)
        run: _CapturingRun = _CapturingTrainingRun(plan, rewritten, view, opts, rewritten_path)
    else:
        run = _CapturingRun(plan, rewritten, view, opts, rewritten_path)
    execution = run.run()
    got: dict[str, Any] = dict(getattr(run, "captured", {}))
    for buf, grad in grads.items():  # the buffer holds the step's gradient (lazy reset: overwritten)
        got[grad] = np.array(run.weights[buf], copy=True)
    # fresh copies of the inputs: an accumulator writes into its buffer in place
    feeds = {k: np.array(v, copy=True) for k, v in run.feeds.items()}
    names = list(dict.fromkeys(oout + list(grads.values())))  # the graph outputs, then the gradients
    if opts.device == "cuda" and not grads and original_path is not None:
        ref = _device_reference(original, original_path, plan, replace(opts, inputs=feeds), oout)
    else:
        ref = _whole_run(load_with_weights(original, original_path), feeds, names)
    checks = []
    for name in names:
        if name not in got:
            checks.append(OutputCheck(name, float("inf"), False))
            continue
        checks.append(compare_output(name, got[name], ref[name], opts.rtol, opts.atol))
    return OriginalCheck(tuple(checks), execution)
