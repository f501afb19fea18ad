"""Pure planning core, free of ONNX: the problem and its solvers, the conflict graph, dim
expressions and polynomials, work budgets, safe file I/O, the flags' name sets, lazy interfaces."""
