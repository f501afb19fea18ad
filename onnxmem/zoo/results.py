"""The zoo's results: the per-model record, its tables (Markdown, CSV, JSON) and the baseline
of arena sizes a run is compared against."""

from __future__ import annotations

import csv
import html
import io
import json
import math
import os
import platform
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from onnxmem.core.errors import OnnxmemError, one_line, show_name
from onnxmem.core.fileio import OutputSet, loads_json, write_text_atomic

__all__ = [
    "STATUSES",
    "Baseline",
    "Regression",
    "ResultsWriter",
    "ZooResult",
    "baseline_notes",
    "check_baseline_names",
    "compare_baseline",
    "machine_info",
    "read_baseline",
    "results_csv",
    "results_markdown",
    "write_baseline",
    "write_results",
]

#: ok; failed (an error, or the worker process died); timeout (ran past the per-model
#: limit); wrong (the plan failed verification)
STATUSES = ("ok", "failed", "timeout", "wrong")


@dataclass(frozen=True, slots=True)
class ZooResult:
    """What happened to one model; ``status`` is one of ``STATUSES``."""

    name: str
    path: str
    status: str
    error: str | None = None
    dims: dict[str, int] = field(default_factory=dict)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    nodes: int | None = None
    tensors: int | None = None
    weights_size: int | None = None
    naive_size: int | None = None
    ort_peak: int | None = None
    lower_bound: int | None = None
    arena_size: int | None = None
    plan_seconds: float | None = None
    solver: str | None = None
    solver_status: str | None = None
    order: str | None = None
    verify: str = "not run"  # "pass", "FAIL", "not run", "error"
    verify_detail: str | None = None
    warnings: int = 0
    seconds: float = 0.0
    plan_file: str | None = None
    #: the model's own planning options from its list line or catalogue entry
    #: (:meth:`onnxmem.zoo.catalog.ModelOptions.describe`)
    options: dict[str, Any] = field(default_factory=dict)
    #: the process that ran the model, ``host:pid`` (the Ray worker process with
    #: ``--executor ray``); None where not known
    worker: str | None = None

    @property
    def arena_over_bound(self) -> float | None:
        if self.arena_size is None or not self.lower_bound:
            return None
        return self.arena_size / self.lower_bound

    @property
    def arena_over_ort(self) -> float | None:
        if self.arena_size is None or not self.ort_peak:
            return None
        return self.arena_size / self.ort_peak

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["arena_over_bound"] = self.arena_over_bound
        d["arena_over_ort"] = self.arena_over_ort
        return d


def machine_info() -> dict[str, Any]:
    """The machine a zoo ran on, for the results' header."""
    from importlib import metadata

    def version(*names: str) -> str | None:
        for n in names:
            try:
                return metadata.version(n)
            except metadata.PackageNotFoundError:
                continue
        return None

    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    from onnxmem import __version__

    return {
        # os.uname, not platform.platform(): the latter runs `uname -p` in a child process
        "platform": "-".join((os.uname().sysname, os.uname().release, os.uname().machine)),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "python": platform.python_version(),
        "onnxmem": __version__,
        "onnx": version("onnx"),
        "onnxruntime": version("onnxruntime-gpu", "onnxruntime"),
    }


def _mib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**20:.2f}"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


#: longest error shown in the Markdown table; results.json keeps the whole text
ERROR_CHARS = 400

TABLE_COLUMNS = (
    "model", "nodes", "tensors", "weights MiB", "naive MiB", "onnxruntime peak MiB",
    "lower bound MiB", "arena MiB", "arena/bound", "arena/onnxruntime", "plan s", "verify",
)


def _row(r: ZooResult) -> list[str]:
    return [
        r.name,
        "—" if r.nodes is None else str(r.nodes),
        "—" if r.tensors is None else str(r.tensors),
        _mib(r.weights_size),
        _mib(r.naive_size),
        _mib(r.ort_peak),
        _mib(r.lower_bound),
        _mib(r.arena_size),
        _ratio(r.arena_over_bound),
        _ratio(r.arena_over_ort),
        "—" if r.plan_seconds is None else f"{r.plan_seconds:.2f}",
        r.verify if r.status in ("ok", "wrong") or r.verify != "not run" else r.status,
    ]


def _cell(text: str) -> str:
    """``text`` as Markdown shows it literally on one line: a model's strings (its name, an error
    quoting its nodes) add no HTML, no link, no emphasis, no table column and no line.

    Non-printable characters are escaped (:func:`one_line`), ``& < >`` made entities, the
    Markdown specials backslash-escaped (but ``_`` inside a word, as in ``snake_case``, which
    emphasises nothing there), and the text that starts an autolink (``www.``, ``://``, ``@``)
    broken by a backslash, which the rendered text does not show.

    >>> _cell("_a_ ~~b~~ www.c.example x_y")
    '\\\\_a\\\\_ \\\\~\\\\~b\\\\~\\\\~ www\\\\.c.example x_y'
    """
    text = html.escape(one_line(text), quote=False)
    text = "".join("\\" + ch if ch in _MARKDOWN_SPECIAL else ch for ch in text)
    return _UNDERSCORE.sub(r"\\_", _AUTOLINK.sub(lambda m: "\\" + m.group(), text))


#: the characters Markdown may read as syntax inside a table cell or a list item (``<`` and
#: ``>`` are entities by then; they are here for a caller that skips that step); ``_`` is
#: :data:`_UNDERSCORE`'s
_MARKDOWN_SPECIAL = frozenset("\\`*~[]<>|")

#: a ``_`` that may open or close emphasis: one not between two letters or digits
_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")

#: the characters that start an autolink in GitHub's Markdown: the "." of "www.", the ":" of
#: "://" and the "@" of an e-mail address
_AUTOLINK = re.compile(r"(?<=www)\.|:(?=//)|@", re.IGNORECASE)


def results_markdown(results: Sequence[ZooResult], header: dict[str, Any] | None = None) -> str:
    """The Markdown table of a zoo run, with the failures' errors under it."""
    lines = []
    if header:
        for key, value in header.items():
            lines.append(f"- {key}: {value}")
        lines.append("")
    lines.append("| " + " | ".join(TABLE_COLUMNS) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(TABLE_COLUMNS) - 2) + [":---:"]) + "|")
    for r in results:
        lines.append("| " + " | ".join(_cell(c) for c in _row(r)) + " |")
    bad = [r for r in results if r.status != "ok"]
    ok = len(results) - len(bad)
    lines += ["", f"{ok} of {len(results)} models ok."]
    ratios = [x for x in (r.arena_over_ort for r in results) if x]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(
            f"arena/onnxruntime: geometric mean {geo:.3f}, largest {max(ratios):.3f}, "
            f"over {len(ratios)} models."
        )
    if bad:
        lines += ["", "Failures:", ""]
        for r in bad:
            error = r.error or ""
            if len(error) > ERROR_CHARS:
                error = error[:ERROR_CHARS].rstrip() + " ... (full text in results.json)"
            lines.append(f"- **{_cell(r.name)}** ({r.status}): {_cell(error)}")
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "name", "status", "nodes", "tensors", "weights_size", "naive_size", "ort_peak", "lower_bound",
    "arena_size", "arena_over_bound", "arena_over_ort", "plan_seconds", "verify", "solver",
    "solver_status", "order", "dims", "input_shapes", "seconds", "worker", "error",
)


def results_csv(results: Sequence[ZooResult]) -> str:
    """The CSV table of a zoo run, one line a model: every text field (a model's name, dims,
    inputs, error) has its non-printable characters escaped (:func:`one_line`), so a model's
    strings add no line and no terminal control code, and one that a spreadsheet would read as
    a formula (starting ``= + - @``) starts with ``'`` (:func:`_no_formula`)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in results:
        d = r.to_dict()
        d["dims"] = " ".join(f"{k}={v}" for k, v in r.dims.items())
        d["input_shapes"] = " ".join(f"{k}={'x'.join(map(str, v))}"
                                     for k, v in r.input_shapes.items())
        writer.writerow(["" if d[f] is None else _no_formula(one_line(d[f])) if isinstance(d[f], str) else d[f]
                         for f in CSV_FIELDS])
    return buffer.getvalue()


def _no_formula(text: str) -> str:
    """``text`` with a ``'`` before it where a spreadsheet would run it as a formula.

    >>> _no_formula("=HYPERLINK(1)"), _no_formula("resnet50")
    ("'=HYPERLINK(1)", 'resnet50')
    """
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def write_results(results: Sequence[ZooResult], out_dir: str | os.PathLike[str],
                  meta: dict[str, Any], pending: int = 0,
                  inputs: Iterable[str | os.PathLike[str]] = ()) -> dict[str, Path]:
    """``results.json``, ``results.csv`` and ``results.md`` in ``out_dir``; returns their paths.

    ``pending`` is the number of models not finished yet: a run writes its results after
    every model, so a run that is stopped still leaves the finished models' rows. Each file
    is replaced atomically, the three together; ``results.json`` says ``"complete": false`` and how many models
    are pending until the last write; ``"workers"`` counts the distinct processes that ran
    the models (``ZooResult.worker``). ``inputs``: the run's input files, which no output may be.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "csv": out / "results.csv", "md": out / "results.md"}
    doc = {"schema_version": 1, **meta, "complete": pending == 0, "pending": pending,
           "workers": len({r.worker for r in results if r.worker is not None}),
           "models": [r.to_dict() for r in results]}
    markdown = results_markdown(results)
    if pending:
        markdown += f"\nRun not finished: {pending} more models pending.\n"
    outs = OutputSet(inputs)  # the three files are replaced together, or none is
    for key, text in (("json", json.dumps(doc, indent=1) + "\n"), ("csv", results_csv(results)),
                      ("md", markdown)):
        outs.add(paths[key], f"zoo results ({key})")
        outs.put(paths[key], text)
    outs.commit()
    return paths


class ResultsWriter:
    """Writes a run's results after every model, so that a run that is stopped leaves the
    rows of the models that finished (``write_results`` with the number still pending).

    Use ``add`` as the job's ``on_result`` callback; rows are kept in the order of ``names``.
    """

    def __init__(self, out_dir: str | os.PathLike[str], names: Sequence[str],
                 meta: dict[str, Any], inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.out_dir = Path(out_dir)
        self.inputs = list(inputs)
        self.meta = dict(meta)
        self._rank = {name: i for i, name in enumerate(names)}
        self._done: dict[str, ZooResult] = {}

    @property
    def results(self) -> list[ZooResult]:
        """The finished models' results, in the order of ``names``."""
        return sorted(self._done.values(), key=lambda r: self._rank.get(r.name, len(self._rank)))

    def add(self, result: ZooResult) -> dict[str, Path]:
        self._done[result.name] = result
        return self.write()

    def write(self, **meta: Any) -> dict[str, Path]:
        """Write every file now; ``meta`` adds to (or replaces) the header's fields."""
        self.meta.update(meta)
        pending = sum(1 for name in self._rank if name not in self._done)
        return write_results(self.results, self.out_dir, self.meta, pending, self.inputs)


# --------------------------------------------------------------------------- baseline


@dataclass(frozen=True, slots=True)
class Regression:
    """A model whose arena grew against the baseline (or that the baseline has and now fails)."""

    name: str
    baseline: int
    arena_size: int | None

    def __str__(self) -> str:
        if self.arena_size is None:
            return f"{self.name}: no arena now (baseline {self.baseline} B); see its error"
        growth = self.arena_size / self.baseline - 1 if self.baseline else float("inf")
        return f"{self.name}: arena {self.arena_size} B > baseline {self.baseline} B (+{growth:.2%})"


def write_baseline(results: Sequence[ZooResult], path: str | os.PathLike[str],
                   meta: dict[str, Any] | None = None,
                   inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Record the arena size of each model that is ``ok`` (a failed model, or a plan that failed
    verification, is left out), and the onnxmem and onnxruntime versions that made them
    (``made_with``). ``inputs``: the run's input files, which ``path`` may not be."""
    arenas = {r.name: r.arena_size for r in results if r.arena_size is not None and r.status == "ok"}
    info = machine_info()
    made_with = {k: info[k] for k in ("onnxmem", "onnxruntime")}
    doc = {"schema_version": 1, **(meta or {}), "made_with": made_with, "arena_size": arenas}
    write_text_atomic(path, json.dumps(doc, indent=1) + "\n", "--write-baseline", inputs)


#: the largest arena a baseline may record (JSON readers hold integers exactly up to 2**53)
MAX_BASELINE_BYTES = 2**53


class Baseline(dict[str, int]):
    """The arena of each model a baseline file records, by name; ``path`` is the file and
    ``made_with`` the versions that wrote it (``{}`` for a file that does not say)."""

    def __init__(self, arenas: dict[str, int], path: str, made_with: dict[str, Any]) -> None:
        super().__init__(arenas)
        self.path = path
        self.made_with = made_with


def read_baseline(path: str | os.PathLike[str]) -> Baseline:
    """A baseline file, checked: valid JSON with no key given twice, ``schema_version`` 1, and an
    ``arena_size`` object of at least one model whose values are byte counts (integers from 0 to
    ``MAX_BASELINE_BYTES``). Anything else is a one-line error naming the file and the entry:
    a broken baseline never lets a run pass."""
    label = f"baseline {show_name(os.fspath(path))}"
    fix = "rewrite it with --write-baseline"
    try:
        doc = loads_json(Path(path).read_text(), unique_keys=True)
    except FileNotFoundError:
        raise OnnxmemError(f"{label} does not exist; write one with --write-baseline") from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise OnnxmemError(f"{label} cannot be read ({one_line(str(exc))}); {fix}") from None
    if not isinstance(doc, dict):
        raise OnnxmemError(f"{label} cannot be read: it is not a JSON object; {fix}")
    version = doc.get("schema_version", 1)
    if version != 1 or isinstance(version, bool):
        raise OnnxmemError(f"{label} has schema_version {show_name(version)}; this onnxmem reads 1: {fix}")
    arenas = doc.get("arena_size")
    if not isinstance(arenas, dict):
        raise OnnxmemError(f"{label} has no 'arena_size' object of model arenas; {fix}")
    if not arenas:
        raise OnnxmemError(f"{label} records no model ('arena_size' is empty), so it would check nothing; {fix}")
    for name, value in arenas.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BASELINE_BYTES:
            raise OnnxmemError(f"{label} entry {show_name(name)}: arena {one_line(json.dumps(value)[:60])} is not a byte count "
                               f"(an integer from 0 to 2**53); {fix}")
    made_with = doc.get("made_with", {})
    return Baseline(arenas, os.fspath(path), made_with if isinstance(made_with, dict) else {})


def baseline_notes(results: Sequence[ZooResult], baseline: Baseline, whole_zoo: bool = True) -> list[str]:
    """What a comparison with ``baseline`` leaves unchecked, one line each: the versions that wrote
    it where they are not this run's, the models of the run it does not record, and (``whole_zoo``:
    the run covers the whole zoo, no ``--only``) the models it records that the zoo no longer has."""
    label = f"baseline {show_name(baseline.path)}"
    notes = []
    info = machine_info()
    changed = [f"{k} {show_name(baseline.made_with[k])} (now {info[k]})" for k in ("onnxmem", "onnxruntime")
               if k in baseline.made_with and baseline.made_with[k] != info[k]]
    if changed:
        notes.append(f"{label} was made with {', '.join(changed)}: arenas may differ for that reason; "
                     "once checked, refresh it with --write-baseline")
    names = {r.name for r in results}
    for r in results:
        if r.name not in baseline:
            notes.append(f"model {show_name(r.name)} is not in {label}, so it is not compared; "
                         "add it with --write-baseline")
    if whole_zoo:
        for name in baseline:
            if name not in names:
                notes.append(f"{label} entry {show_name(name)} names no model of the zoo; remove it or "
                             "rewrite the file with --write-baseline")
    return notes


def check_baseline_names(names: Sequence[str], baseline: dict[str, int]) -> None:
    """Refuse a baseline that records none of the models ``names`` of a run: comparing with it would
    check nothing."""
    if names and not any(n in baseline for n in names):
        path = getattr(baseline, "path", None)
        label = "the baseline" if path is None else f"baseline {show_name(path)}"
        raise OnnxmemError(
            f"{label} records none of the {len(names)} models of this run, so nothing would be "
            "compared; give the baseline of this zoo (check --only) or write one with --write-baseline")


def compare_baseline(results: Sequence[ZooResult], baseline: dict[str, int],
                     tolerance: float = 0.0) -> list[Regression]:
    """Models in both whose arena grew by more than ``tolerance`` (a fraction), and models of
    the baseline that now have no arena. Models not in the baseline are not compared."""
    check_baseline_names([r.name for r in results], baseline)
    out = []
    for r in (r for r in results if r.name in baseline):
        old = baseline[r.name]
        if r.arena_size is None or r.arena_size > old * (1 + tolerance):
            out.append(Regression(r.name, old, r.arena_size))
    return out
