"""Training graphs: forward + backward graphs made by onnxruntime's training artifact generator.

:mod:`.shapes` gives every gradient op's outputs a shape by rule (shape inference calls it);
:mod:`.roles` says which graph inputs are the caller's state (parameters, gradient
accumulation buffers, optimizer state), which the arena never holds.
"""

from .roles import OUTSIDE_REASONS, caller_state, is_training_graph
from .shapes import TRAINING_RULES, complete_shapes

__all__ = ["OUTSIDE_REASONS", "TRAINING_RULES", "caller_state", "complete_shapes", "is_training_graph"]
