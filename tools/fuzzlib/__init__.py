"""Seeded fuzzing of the ``onnxmem`` command line: mutation families, a runner, the checks.

A case is a pure function of ``(family, seed)``: the family builds the files of
the case (a mutated model, a corrupted plan, a hostile CSV) in a fresh folder and
names the command to run on them. Layout of a case folder, which is also the
working directory of the run::

    <case>/model/     the input files (model, external data, plan, CSV)
    <case>/outside/   a canary file the command must never read
    <case>/out/       the only place the command may write, and only the named outputs

The runner executes ``onnxmem`` in long-lived worker processes (each imports
onnxmem once, then runs ``onnxmem.cli.main.main`` per case with file descriptors 1 and
2 redirected to files, exactly as a subprocess would see them), under an address
space limit and a wall-clock bound enforced by the parent, which kills and
replaces a worker that overruns. An audit hook in the worker records every file
opened for reading outside the allowed paths, every write outside ``out/``, every
process started, and every compilation of source text that carries the payload
marker. The parent snapshots the case folder before and after and checks, per
case (``check_result``):

- exit 0 with every named output present and every plan valid against
  ``onnxmem/plans/schema/plan.schema.json``, or exit 1 (3 from ``verify``: the plan is
  wrong; 4 from ``pack``: no fit) with exactly one line on stderr;
- no ``Traceback``; no raw control characters (names are printed escaped);
- no file created, changed or removed in the case folder except the named
  outputs, and no named output at all when the command failed (all or nothing);
- no read outside the model's folder (audit hook, and the canary's access time
  for reads made by native code); no payload trace (a ``PWNED`` file, a started
  process, payload text compiled);
- no run past the time bound, no ``MemoryError`` under the address space limit.

``tools/fuzz.py`` is the long run; ``tests/test_fuzz.py`` runs a small seeded
sample in the default suite. Both import this package by path (``tools/`` on
``sys.path``, then ``import fuzzlib``): it is no part of the shipped ``onnxmem``.
"""

from __future__ import annotations

from .cases import SAMPLE_BOUND, SAMPLE_COUNTS, SAMPLE_SCALE, build_case
from .checks import Outcome, check_result, snapshot
from .common import (
                     CANARY,
                     CLASSES,
                     EXTRA_FAMILIES,
                     FAMILIES,
                     MARK,
                     MODEL_COMMANDS,
                     MODEL_FAMILIES,
                     PLAN_COMMANDS,
                     Case,
                     Scale,
)
from .corpus import Corpus
from .plans import _unsafe
from .runner import RunConfig, examples, iter_cases, outcome_json, run_cases, summary_table
from .worker import SubprocessWorker, Worker

__all__ = ["CANARY", "CLASSES", "EXTRA_FAMILIES", "FAMILIES", "MARK", "MODEL_COMMANDS", "MODEL_FAMILIES", "PLAN_COMMANDS",
           "SAMPLE_BOUND", "SAMPLE_COUNTS", "SAMPLE_SCALE", "Case", "Corpus", "Outcome", "RunConfig", "Scale",
           "SubprocessWorker", "Worker", "_unsafe", "build_case", "check_result", "examples", "iter_cases",
           "outcome_json", "run_cases", "snapshot", "summary_table"]
