"""onnxmem: plan the activation memory of an ONNX model ahead of time, and prove the plan."""

__version__ = "0.1.0"
