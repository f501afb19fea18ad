"""The read-only view of a model: tensors, producers and uses, folding, bodies and captures."""
