"""A node of the view (:class:`Op`) and what onnxmem knows of an op's kind: constants and
views of weights, ops that draw random numbers, and whether a node may be folded into a
weight (:mod:`onnxmem.graph.view` folds)."""

from __future__ import annotations

from dataclasses import field

from onnxmem.core.records import record

__all__ = ["CONSTANT_OPS", "RANDOM_OPS", "Op", "draws_random", "foldable"]

#: ops whose outputs are weights when every input is a weight, also with folding
#: off: constants, and views of weights (a runtime aliases them to the weight's own bytes)
CONSTANT_OPS = frozenset(
    {"Constant", "ConstantOfShape", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"}
)


#: ops whose outputs differ from run to run: never folded
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


@record
class Op:
    """One node. ``inputs`` keeps '' for an omitted optional input;
    ``captures`` lists the outer-scope values its subgraphs read."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    captures: tuple[str, ...] = ()
    #: every value the node reads, each once, in first-use order (set on construction)
    reads: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        inputs = self.inputs  # most nodes read each input once, and none is omitted: no pass
        plain = not self.captures and "" not in inputs and (len(inputs) == 1 or len(set(inputs)) == len(inputs))
        reads = inputs if plain else tuple(dict.fromkeys(n for n in inputs + self.captures if n))
        object.__setattr__(self, "reads", self.inputs if reads == self.inputs else reads)  # one tuple for both


def draws_random(op: Op) -> bool:
    """Whether ``op`` draws random numbers: an ai.onnx op of :data:`RANDOM_OPS`, or a Dropout
    with a ``training_mode`` input (without one it is the identity)."""
    if op.domain not in ("", "ai.onnx"):
        return False
    return op.op_type in RANDOM_OPS or (op.op_type == "Dropout" and len(op.inputs) > 2 and bool(op.inputs[2]))


def foldable(node: Op, *, fold: bool = True) -> bool:
    """Whether ``node`` may be computed once when every input it reads is a weight.

    Folding on: an ai.onnx op that is deterministic (not in :data:`RANDOM_OPS`,
    no Dropout with a ``training_mode`` input) and has no subgraph. Folding
    off: ``Constant``, ``ConstantOfShape`` and the views of :data:`CONSTANT_OPS`.
    """
    if node.domain not in ("", "ai.onnx"):
        return False
    if not fold:
        return node.op_type in CONSTANT_OPS
    if draws_random(node):
        return False
    return not node.captures and node.op_type not in ("If", "Loop", "Scan", "SequenceMap")
