"""Which graph inputs of a training graph are the caller's state, never the arena's.

onnxruntime's training artifact generator writes ``training_model.onnx`` with the
parameters, the gradient accumulation buffers and the flag that resets them as graph
inputs (their values live in the checkpoint and the training session owns them, across
steps). Those bytes are the caller's: the arena never holds them, and onnxmem lists them
with a reason (:data:`OUTSIDE_REASONS`). The classification, from the generator's
conventions:

* ``gradient-accumulation-buffer``: input 0 of an ``InPlaceAccumulator``/``V2`` (the
  kernel adds the gradient into it in place);
* ``flag``: input 2 of an ``InPlaceAccumulatorV2`` (``lazy_reset_grad``);
* ``parameter``: a graph input ``X`` whose gradient ``X_grad`` is accumulated;
* ``frozen-parameter``: a graph input after the loss's label input and before the first
  accumulation buffer that is none of the above (the generator lists the user's inputs,
  then the labels, then every parameter, trainable and frozen, then the buffers);
* in an eval graph (a loss reads a graph-input label, nothing accumulates), every graph
  input after the label is a ``parameter``: the generator lists them in the same order.

Anything else (the user's data and labels) is an ordinary graph input; so is every input
of a graph without a loss block.
"""

from __future__ import annotations

import onnx

__all__ = ["ACCUMULATORS", "LOSSES", "OUTSIDE_REASONS", "caller_state", "is_training_graph"]

OUTSIDE_REASONS = ("parameter", "frozen-parameter", "gradient-accumulation-buffer", "flag")

_MS = "com.microsoft"
#: onnxruntime's gradient accumulators (com.microsoft): input 0 is the buffer they write in place
ACCUMULATORS = ("InPlaceAccumulatorV2", "InPlaceAccumulator")
#: the losses of onnxruntime's loss blocks: input 1 is the labels
LOSSES = ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")


def is_training_graph(model: onnx.ModelProto) -> bool:
    """Whether ``model`` accumulates gradients (onnxruntime's ``InPlaceAccumulator`` ops)."""
    return any(n.domain == _MS and n.op_type in ACCUMULATORS for n in model.graph.node)


def caller_state(model: onnx.ModelProto) -> dict[str, str]:
    """``{graph input: reason}`` for the inputs that are the caller's state (module doc), in
    input order; empty for a graph with neither accumulators nor a loss block."""
    g = model.graph
    inits = {i.name for i in g.initializer}
    inputs = [vi.name for vi in g.input if vi.name not in inits]
    is_input = set(inputs)
    out: dict[str, str] = {}
    for node in g.node:
        if node.domain != _MS:
            continue
        if node.op_type in ACCUMULATORS:
            if node.input and node.input[0] in is_input:
                out[node.input[0]] = "gradient-accumulation-buffer"
            if len(node.input) > 2 and node.input[2] in is_input:
                out.setdefault(node.input[2], "flag")
            grad = node.input[1] if len(node.input) > 1 else ""
            if grad.endswith("_grad") and grad[: -len("_grad")] in is_input:
                out.setdefault(grad[: -len("_grad")], "parameter")
    labels = [n.input[1] for n in g.node if n.op_type in LOSSES and (n.domain or "") in ("", "ai.onnx")
              and len(n.input) > 1 and n.input[1] in is_input]
    if labels:
        start = max(inputs.index(lab) for lab in labels) + 1
        stop = next((k for k, n in enumerate(inputs) if out.get(n) == "gradient-accumulation-buffer"), len(inputs))
        reason = "frozen-parameter" if is_training_graph(model) else "parameter"
        for name in inputs[start:stop]:
            out.setdefault(name, reason)
    return {n: out[n] for n in inputs if n in out}
