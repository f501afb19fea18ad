"""Execution of a training graph's plan in one arena: :class:`ArenaRun` with three additions.

A training graph (onnxruntime's ``training_model.onnx``) runs node by node like any other
(:mod:`onnxmem.runtime.arena`), with its parameters and gradient accumulation buffers bound
outside the arena as the caller's state. Three things differ:

1. **Inputs a training step needs.** Labels are drawn in ``[0, classes)`` (the loss's
   scores give the class count on axis 1), the ``lazy_reset_grad`` flag is true (each
   accumulator overwrites its buffer with the step's gradient), buffers start at zero;
   everything else is the usual seeded random data (:func:`onnxmem.runtime.ort.random_inputs`).
2. **Dropout is random.** Each Dropout node gets a fixed ``seed`` attribute, and its arena
   run uses a fresh session: a fresh kernel draws the same mask as the reference run did,
   so both runs compute the same values.
3. **Gradients are compared.** After the reference run of each accumulator, the buffer it
   overwrote is copied; after the arena run, the buffer must hold the same bits. Each
   buffer is one more :class:`~onnxmem.runtime.arena.OutputCheck` (exact: ``rtol = atol = 0``
   in effect, ``identical`` required), and a difference is a finding of kind ``output``.

:func:`training_feeds` makes the inputs; :func:`execute_training` runs the plan;
:func:`execute_in_one_arena` runs a training and an eval plan (or any plans) one after the
other in one arena.
Where onnxruntime has no CPU kernel for a node, the node runs as its standard-op stand-in
where it has one (ConvTransposeGrad: :mod:`onnxmem.runtime.standins`, noted in the result);
for any other op the run stops with :class:`~onnxmem.core.errors.RuntimeBackendError` naming
the op, which :func:`missing_kernel` reads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxmem.core.errors import PlanError, RuntimeBackendError
from onnxmem.graph import GraphView, Op
from onnxmem.model import ACCUMULATORS, LOSSES
from onnxmem.plans.point import MemoryPlan
from onnxmem.proof.plan import Finding
from onnxmem.runtime.arena import ArenaRun, Execution, ExecutionOptions, OutputCheck
from onnxmem.runtime.ort import random_inputs
from onnxmem.runtime.standins import missing_kernel

__all__ = ["TrainingRun", "execute_in_one_arena", "execute_training", "is_training_view", "missing_kernel",
           "no_kernel_error", "require_training_runtime", "seed_dropout", "training_feeds"]


def require_training_runtime() -> None:
    """Raise ``RuntimeBackendError`` unless the onnxruntime installed has the training kernels."""
    import importlib.util

    try:
        found = importlib.util.find_spec("onnxruntime.training") is not None
    except ImportError:
        found = False
    if not found:
        raise RuntimeBackendError(
            "this is a training graph and the onnxruntime installed has no training kernels "
            "(ConvGrad, InPlaceAccumulatorV2, ...): verify it in the training environment "
            "(make training-env; .venv-training/bin/onnxmem verify ...) or pass --static-only"
        )


def is_training_view(view: GraphView) -> bool:
    """Whether ``view`` is a training graph's (it has gradient accumulation buffers)."""
    return any(r == "gradient-accumulation-buffer" for r in view.outside.values())


def training_feeds(model: onnx.ModelProto, view: GraphView, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for one training step of ``model`` (the module doc, step 1)."""
    feeds = random_inputs(model, {n: view.tensors[n].shape for n in view.inputs}, seed)
    rng = np.random.default_rng(seed + 1)
    for node in model.graph.node:
        if node.op_type in LOSSES and (node.domain or "") in ("", "ai.onnx") and len(node.input) > 1:
            scores, label = view.tensors.get(node.input[0]), node.input[1]
            if label in feeds and scores is not None and len(scores.shape) > 1:
                feeds[label] = rng.integers(0, scores.shape[1], size=feeds[label].shape).astype(feeds[label].dtype)
    for name, reason in view.outside.items():
        if name in feeds and reason == "flag":
            feeds[name] = np.ones_like(feeds[name])
        elif name in feeds and reason == "gradient-accumulation-buffer":
            feeds[name] = np.zeros_like(feeds[name])
    return feeds


def seed_dropout(model: onnx.ModelProto, seed: int = 0) -> int:
    """Give every Dropout node without one a ``seed`` attribute (``seed`` + its index), in place;
    returns how many were seeded."""
    n = 0
    for i, node in enumerate(model.graph.node):
        if node.op_type == "Dropout" and (node.domain or "") in ("", "ai.onnx"):
            if not any(a.name == "seed" for a in node.attribute):
                node.attribute.append(onnx.helper.make_attribute("seed", seed + i))
                n += 1
    return n


class TrainingRun(ArenaRun):
    """:class:`~onnxmem.runtime.arena.ArenaRun` for a training graph (the module doc)."""

    whole_reference = False  # each node again: a gradient buffer is checked at the node that accumulates it
    spare_copies = False  # every value's bytes kept: an accumulated gradient is read and written in place

    def __init__(self, plan: MemoryPlan, model: onnx.ModelProto, view: GraphView, options: ExecutionOptions,
                 model_path: str | os.PathLike[str] | None = None) -> None:
        require_training_runtime()
        if options.inputs is None:
            options = dataclasses.replace(options, inputs=training_feeds(model, view, options.seed))
        super().__init__(plan, model, view, options, model_path)
        seed_dropout(self.full, options.seed)
        self.reference_buffers: dict[str, np.ndarray] = {}
        self.gradient_checks: list[OutputCheck] = []

    @staticmethod
    def _buffer(op: Op) -> str | None:
        if op.domain == "com.microsoft" and op.op_type in ACCUMULATORS and op.inputs:
            return op.inputs[0]
        return None

    def run_private(self, op: Op, sess: Any) -> dict[str, tuple[tuple[int, ...], int]]:
        computed = super().run_private(op, sess)
        buf = self._buffer(op)
        if buf is not None and buf in self.weights:
            self.reference_buffers[buf] = np.array(self.weights[buf], copy=True)
        return computed

    def run_in_arena(self, op: Op, sess: Any, k: int) -> Any:
        if op.op_type == "Dropout":
            sess = self.session(op, self.full.graph.node[op.index])  # a fresh kernel: the same mask
        binding = super().run_in_arena(op, sess, k)
        buf = self._buffer(op)
        if binding is not None and buf is not None and buf in self.reference_buffers:
            got, ref = np.asarray(self.weights[buf]), self.reference_buffers[buf]
            same = got.tobytes() == ref.tobytes()
            diff = 0.0 if same else float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)),
                                                 initial=0.0))
            self.gradient_checks.append(OutputCheck(buf, diff, same, 0.0, same))
            if not same:
                self.findings.append(Finding(
                    "output", buf, f"gradient buffer {buf!r} differs from the same nodes run outside the arena: "
                    f"max |diff| {diff:.3g} (gradients must match bit for bit)", node=op.name))
        return binding

    def compare_outputs(self, seconds: float) -> Execution:
        done = super().compare_outputs(seconds)
        changed = done.changed_result or any(not c.ok for c in self.gradient_checks)
        return dataclasses.replace(done, outputs=done.outputs + tuple(self.gradient_checks),
                                   findings=tuple(self.findings), changed_result=changed)


def execute_training(plan: MemoryPlan, model: onnx.ModelProto, view: GraphView, *,
                     options: ExecutionOptions | None = None,
                     inputs: Mapping[str, np.ndarray] | None = None) -> Execution:
    """Run a training graph's plan in one arena (:class:`TrainingRun`); ``model`` must carry
    its weights (a fixture filled with :func:`onnxmem.zoo.fixtures.fill_weights`)."""
    opts = options or ExecutionOptions()
    if inputs is not None:
        opts = dataclasses.replace(opts, inputs=dict(inputs))
    return TrainingRun(plan, model, view, opts).run()


def no_kernel_error(exc: RuntimeBackendError, device: str = "cpu") -> RuntimeBackendError:
    """The one line verify gives where a training graph's run stops at an op onnxruntime has no
    kernel for (the U-Net's ``ConvTransposeGrad`` on CPU), ``exc`` itself for any other error.
    The run starts only after the static proof passed, so the line says the plan is proven."""
    op = missing_kernel(str(exc))
    if op is None:
        return exc
    return RuntimeBackendError(
        f"onnxruntime has no {device.upper()} kernel for {op}, so this training graph cannot run in the arena; "
        f"its plan is proven statically (the static proof passed; 'onnxmem plan' proves it, 'onnxmem verify "
        "--static-only' stops there, docs/training.md): exit 1, nothing ran wrong"
    )


def execute_in_one_arena(runs: Sequence[tuple[MemoryPlan, onnx.ModelProto, GraphView]], *,
                         options: ExecutionOptions | None = None,
                         handovers: Mapping[str, int] | None = None) -> tuple[int, list[Execution]]:
    """Run several plans one after the other in one arena, as the models of one program
    (a training step, then an eval step; or a pipeline) would share it: the arena is as
    large as the largest plan's, allocated once, and each run finds the bytes the previous
    one left.

    ``handovers`` (:attr:`onnxmem.plans.program.Program.handovers`): ``{name: k}`` for a
    graph output of run ``k`` that is a graph input of run ``k + 1``; run ``k + 1`` is fed
    the bytes run ``k`` left at that tensor's offset, which its plan puts at the same
    offset (:func:`onnxmem.planning.program.plan_program`): the tensor is handed over in
    the arena. Training graphs run as :class:`TrainingRun` (with :func:`training_feeds`),
    others as :class:`~onnxmem.runtime.arena.ArenaRun`. Returns the arena size and each run's
    result.
    """
    opts = options or ExecutionOptions()
    size = max((plan.arena_size for plan, _, _ in runs), default=0)
    shared: Any = None
    results: list[Execution] = []
    for k, (plan, model, view) in enumerate(runs):
        wide = dataclasses.replace(plan, arena_size=size)
        training = is_training_view(view)
        feeds = training_feeds(model, view, opts.seed)
        for name, at in (handovers or {}).items():
            if at == k - 1 and name in feeds:
                before = runs[k - 1][0].tensor(name)
                if plan.tensor(name).offset != before.offset:
                    raise PlanError(f"handover {name!r} sits at offset {before.offset} in model {k - 1} but "
                                    f"{plan.tensor(name).offset} in model {k}; plan them together (plan_program)")
                raw = shared.read(before.offset, before.size)
                feeds[name] = raw.view(feeds[name].dtype).reshape(feeds[name].shape).copy()
        run = (TrainingRun if training else ArenaRun)(wide, model, view, dataclasses.replace(opts, inputs=feeds))
        if shared is None:
            shared = run.arena
        else:
            run.arena = run.mirror = shared  # the first run's bytes, not a fresh arena
        results.append(run.run())
    return size, results
