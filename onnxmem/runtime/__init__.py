"""onnxruntime: sessions, measured shapes, folding, arena runs (CPU, CUDA, concurrent, training), peaks."""
