"""The zoo job's choices and defaults, light enough for the CLI to read at start."""

from __future__ import annotations

__all__ = ["DEFAULT_MODEL_TIMEOUT", "EXECUTORS"]

#: executors of the zoo job, with what each does
EXECUTORS = {
    "local": "a fresh process per model, --jobs at a time",
    "inline": "one model at a time, each in a child process (in this process with no limit)",
    "ray": "tasks on a Ray cluster (RAY_ADDRESS, or a local one of --jobs CPUs), each model in a "
           "child process",
}
#: seconds one model may take unless told otherwise; 0 or None turns the limit off
DEFAULT_MODEL_TIMEOUT = 600.0
