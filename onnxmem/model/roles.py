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
* ``frozen-parameter``: a graph input before the first accumulation buffer that is none of
  the above and comes after the loss's labels or after the first trainable parameter (the
  generator lists the user's inputs, then the labels, then every parameter, trainable and
  frozen, in the model's initializer order, then the buffers). The labels are the graph
  inputs the loss reads as its input 1, directly or through ops that only retype or reshape
  them (:data:`LABEL_PASSES`: a model that computes its own loss reads ``labels.view(-1)``,
  a Reshape; a cast to int64 is a Cast). A frozen parameter between trainable ones is one
  whether or not the labels are found;
* in an eval graph (a loss reads a graph-input label, nothing accumulates), every graph
  input after the label is a ``parameter``: the generator lists them in the same order.

Anything else (the user's data and labels) is an ordinary graph input; so is every input
of a graph without a loss block.
"""

from __future__ import annotations

import onnx

__all__ = ["ACCUMULATORS", "LABEL_PASSES", "LOSSES", "OUTSIDE_REASONS", "caller_state", "is_training_graph"]

OUTSIDE_REASONS = ("parameter", "frozen-parameter", "gradient-accumulation-buffer", "flag")

_MS = "com.microsoft"
#: onnxruntime's gradient accumulators (com.microsoft): input 0 is the buffer they write in place
ACCUMULATORS = ("InPlaceAccumulatorV2", "InPlaceAccumulator")
#: the losses of onnxruntime's loss blocks: input 1 is the labels
LOSSES = ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")
#: ops that only retype or reshape the labels on their way to the loss (their input 0)
LABEL_PASSES = ("Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


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
    losses: list[onnx.NodeProto] = []
    training = False  # is_training_graph, found in the same walk
    for node in g.node:
        if node.domain != _MS:
            if node.op_type in LOSSES and node.domain in ("", "ai.onnx") and len(node.input) >= 2:
                losses.append(node)
            continue
        if node.op_type in ACCUMULATORS:
            training = True
            if node.input and node.input[0] in is_input:
                out[node.input[0]] = "gradient-accumulation-buffer"
            if len(node.input) > 2 and node.input[2] in is_input:
                out.setdefault(node.input[2], "flag")
            grad = node.input[1] if len(node.input) > 1 else ""
            if grad.endswith("_grad") and grad[: -len("_grad")] in is_input:
                out.setdefault(grad[: -len("_grad")], "parameter")
    labels = _labels(g, losses, is_input)
    starts = [max(inputs.index(lab) for lab in labels) + 1] if labels else []
    if training:  # nothing the user feeds comes after a trainable parameter
        starts += [k for k, n in enumerate(inputs) if out.get(n) == "parameter"][:1]
    if starts:
        start = min(starts)
        stop = next((k for k, n in enumerate(inputs) if out.get(n) == "gradient-accumulation-buffer"), len(inputs))
        reason = "frozen-parameter" if training else "parameter"
        for name in inputs[start:stop]:
            out.setdefault(name, reason)
    return {n: out[n] for n in inputs if n in out}


def _labels(g: onnx.GraphProto, losses: list[onnx.NodeProto], is_input: set[str]) -> list[str]:
    """The graph inputs the ``losses`` (``g``'s nodes of :data:`LOSSES` in the standard domain
    with a labels input, in node order) read as their labels, directly or through
    :data:`LABEL_PASSES` (their input 0)."""
    if not losses:
        return []
    producer = {o: n for n in g.node for o in n.output if o}
    found: list[str] = []
    for node in losses:
        name, seen = node.input[1], set()
        while name not in is_input and name in producer and name not in seen:
            seen.add(name)
            up = producer[name]
            if up.op_type not in LABEL_PASSES or (up.domain or "") not in ("", "ai.onnx") or not up.input:
                break
            name = up.input[0]
        if name in is_input:
            found.append(name)
    return found
