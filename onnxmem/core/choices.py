"""The fixed sets of names the command line's flags accept, in one place.

The layers that act on them (liveness, happens-before, the arena run, onnxruntime's peak, the
generators) and the command line's help text both read them from here; this module imports
nothing, so ``onnxmem --help`` can spell them out without loading onnx or numpy.
"""

__all__ = ["CONCURRENCY_MODES", "DEVICES", "EXECUTION_MODES", "IO_MODES", "OPTIMIZE_LEVELS", "RANDWIRE_KINDS",
           "RUNTIME_MODES"]

#: where graph inputs and outputs live: in the arena (``internal``) or the caller's buffers
IO_MODES = ("internal", "external")
#: a plan for one operator order, or one that holds under every schedule the graph allows
CONCURRENCY_MODES = ("sequential", "dag")
#: onnxruntime's executors: one node at a time, or independent nodes at once
EXECUTION_MODES = ("sequential", "parallel")
#: where the arena lives and the nodes run
DEVICES = ("cpu", "cuda")
#: the graph planned: the model as written (``none``), or the graph onnxruntime builds from it at
#: that graph optimization level (ORT_ENABLE_BASIC, _EXTENDED, _ALL) for the device's provider
OPTIMIZE_LEVELS = ("none", "basic", "extended", "all")
#: the random-graph families of the RandWire generator
RANDWIRE_KINDS = ("ws", "er", "ba")
#: what ``fit`` counts besides the plan: a default onnxruntime session of the model made and run
#: (``measure``), made only with its activations by a rule (``rule``), or the plan's own view (``plan``)
RUNTIME_MODES = ("measure", "rule", "plan")
