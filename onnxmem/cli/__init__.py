"""The command line: the only place that prints or exits.

- ``main``: the ``onnxmem`` group, which imports a command's module only when that command
  runs or shows its help, and turns a user error into one line and its exit code;
- one module per command: ``plan``, ``show``, ``instantiate``, ``plot``, ``export``,
  ``verify``, ``compare``, ``zoo``, ``pack``, ``generate``, ``listing`` (``onnxmem list``);
- ``options``: the flags several commands share; ``registries``: the library's registries as
  the flags and ``onnxmem list`` show them; ``output``: byte counts and summaries;
  ``sources``: where a command's model and plan come from.

Every module here imports only light modules at its top (no onnx, onnxruntime, numpy or
numba), so that ``onnxmem --help`` and ``onnxmem CMD --help`` start fast; what a command
needs to run it imports inside the function that runs it.
"""
