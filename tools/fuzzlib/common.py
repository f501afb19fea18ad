"""Constants, the case record and the scale shared by every part of the fuzz harness."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
SHIPPED_MODELS = ROOT / "models"
SCHEMA_PATH = ROOT / "onnxmem" / "plans" / "schema" / "plan.schema.json"
RANGE_SCHEMA_PATH = SCHEMA_PATH.with_name("range.schema.json")
#: every code-execution payload names this file; its presence anywhere is a failure
MARK = "PWNED"
CANARY = "outside/canary.bin"

MODEL_COMMANDS = ("plan", "measure", "verify", "compare")
PLAN_COMMANDS = ("verify", "show", "plot")
MODEL_FAMILIES = ("bytes", "struct", "dims", "payload", "extdata", "nesting", "huge", "names",
                  "outputs")
#: families with a count of their own in the long run (``tools/fuzz.py --functions`` ...)
EXTRA_FAMILIES = ("functions", "zoo", "exports", "trips", "ranges", "feeds", "flags")
FAMILIES = (*MODEL_FAMILIES, "plans", "csv", *EXTRA_FAMILIES)

#: failure classes, in report order
CLASSES = ("traceback", "hang", "partial", "stray-write", "stray-read", "pwned", "memory",
           "crash", "bad-exit", "noisy-error", "raw-control", "invalid-plan", "missing-output",
           "wrong-answer", "unsafe-accepted", "unsafe-exported", "input-changed", "harness")


# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One run of the CLI, reproducible from ``(family, seed)``."""

    family: str
    seed: int
    command: str
    argv: list[str]
    #: paths (relative to the case folder) the command must create on success, and only then
    outputs: list[str] = field(default_factory=list)
    #: outputs that are JSON plans, validated against the schema on success
    plan_outputs: list[str] = field(default_factory=list)
    #: absolute paths outside the case folder the command is told to read (``/dev/zero``)
    named_reads: list[str] = field(default_factory=list)
    #: exit codes that mean a clean refusal besides 0 and 1
    ok_codes: tuple[int, ...] = ()
    note: str = ""
    #: for ``pack``: the CSV the answer is checked against
    csv_input: str | None = None
    #: the command must refuse (an output that is an input, another output or a special file;
    #: for ``exports``, a plan the static proof refuses)
    must_fail: bool = False
    #: folders (relative) the command writes a set of files into, such as ``zoo --out``: new
    #: files under them are allowed, and exit 0 requires each folder
    output_dirs: list[str] = field(default_factory=list)
    #: ``fit --json``: the answer on stdout is checked on its own figures
    fit_json: bool = False

    @property
    def key(self) -> str:
        return f"{self.family}:{self.seed}"


@dataclass
class Base:
    """A model of the corpus: its files and the flags it needs to plan."""

    name: str
    main: str                      # file name of the model inside its folder
    files: dict[str, bytes]        # every file of the model's folder
    args: list[str] = field(default_factory=list)
    plan_json: str | None = None   # a valid plan of it, for the plan family

    def model(self) -> Any:
        import onnx

        return onnx.load_from_string(self.files[self.main])


def _rng(family: str, seed: int) -> random.Random:
    return random.Random(f"{family}:{seed}")




@dataclass(frozen=True)
class Scale:
    """How big the generated cases get; the default suite keeps them small."""

    max_depth: int = 12
    max_nodes: int = 300


DEFAULT_SCALE = Scale()
