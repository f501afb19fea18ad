"""ONNX models in and out: the checked loader, limits, external data, dtypes, generated test networks."""
