"""onnxmem: plan the activation memory of an ONNX model ahead of time, and prove the plan.

onnxruntime 1.30 and later (Linux and macOS wheels) start a telemetry client when they are
imported: it writes a device identifier and an event store under the home folder
(``~/.cache/Microsoft/DeveloperTools/.onnxruntime/``), a session file in ``$TMPDIR``, and
queues events about the sessions and models it runs for upload. onnxmem writes nothing but
the outputs a command is given, and reads models that may be private, so importing it sets
``ORT_DISABLE_TELEMETRY=1`` (onnxruntime's opt-out, read once when it is first imported) unless
the environment sets it already: ``ORT_DISABLE_TELEMETRY=0`` keeps onnxruntime's default. A
process that imported onnxruntime before onnxmem keeps what it had.
"""

import os as _os

_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"
