"""Every family by name: the sample's counts and ``build_case``."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .common import (
    CANARY,
    DEFAULT_SCALE,
    EXTRA_FAMILIES,
    FAMILIES,
    MODEL_COMMANDS,
    MODEL_FAMILIES,
    PLAN_COMMANDS,
    Case,
    Scale,
    _rng,
)
from .corpus import Corpus
from .exports import exports_case
from .families import (
    _bytes_case,
    _dims_case,
    _extdata_case,
    _huge_case,
    _names_case,
    _nesting_case,
    _outputs_case,
    _payload_case,
    _struct_case,
)
from .feeds import feeds_case
from .flags import flags_case
from .functions import functions_case
from .plans import _csv_case, _plan_case
from .ranges import ranges_case
from .trips import trips_case
from .zoo import zoo_case

#: the default suite's sample (tests/test_fuzz.py, ``tools/fuzz.py --sample``): 289 cases;
#: every model family cycles through plan, plan --measure-shapes, verify and compare
SAMPLE_COUNTS = {"bytes": 24, "struct": 24, "dims": 24, "payload": 32, "extdata": 28, "nesting": 12,
                 "huge": 8, "names": 20, "outputs": 12, "plans": 26, "csv": 22,
                 "functions": 12, "zoo": 6, "exports": 12, "trips": 2, "ranges": 8,
                 "feeds": 8, "flags": 9}
SAMPLE_SCALE = Scale(max_depth=12, max_nodes=300)
#: seconds one run may take in the sample (the long run allows 30)
SAMPLE_BOUND = 10.0


def build_case(corpus: Corpus, family: str, seed: int, folder: Path, scale: Scale = DEFAULT_SCALE) -> Case:
    """Write the files of case ``(family, seed)`` under ``folder`` and return the case."""
    rng = _rng(family, seed)
    for sub in ("model", "out", "outside"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    canary = folder / CANARY
    canary.write_bytes(b"canary: onnxmem must never read this file\n" * 64)
    if family in MODEL_FAMILIES:
        command = MODEL_COMMANDS[seed % len(MODEL_COMMANDS)]
        if family == "nesting":
            return _nesting_case(corpus, seed, folder, rng, command, scale.max_depth)
        if family == "huge":
            return _huge_case(corpus, seed, folder, rng, command, scale.max_nodes)
        maker: Callable[..., Case] = {
            "bytes": _bytes_case, "struct": _struct_case, "dims": _dims_case,
            "payload": _payload_case, "extdata": _extdata_case, "names": _names_case,
            "outputs": _outputs_case,
        }[family]
        return maker(corpus, seed, folder, rng, command)
    if family == "plans":
        return _plan_case(corpus, seed, folder, rng, PLAN_COMMANDS[seed % len(PLAN_COMMANDS)])
    if family == "csv":
        return _csv_case(corpus, seed, folder, rng, "pack")
    if family in EXTRA_FAMILIES:
        extra: Callable[..., Case] = {"functions": functions_case, "zoo": zoo_case,
                                      "exports": exports_case, "trips": trips_case,
                                      "ranges": ranges_case, "feeds": feeds_case,
                                      "flags": flags_case}[family]
        return extra(corpus, seed, folder, rng, MODEL_COMMANDS[seed % len(MODEL_COMMANDS)])
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
