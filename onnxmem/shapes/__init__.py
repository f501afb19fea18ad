"""Shape engines: every intermediate tensor gets a shape (onnx inference, symbolic, op rules, training rules)."""
