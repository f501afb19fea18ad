"""Pure planning core, free of ONNX: the problem, its solvers, conflicts, dim expressions, safe file I/O."""
