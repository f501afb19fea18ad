"""Run cases on workers, copy failing ones, and report: the table and one example per class."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .cases import build_case
from .checks import Outcome, _age_canary, check_result, snapshot
from .common import CANARY, CLASSES, FAMILIES, MARK, Case, Scale
from .corpus import Corpus
from .worker import SubprocessWorker, Worker

# ---------------------------------------------------------------------- runner


def copy_case(src: Path, dst: Path) -> None:
    """Copy a case folder for reproduction: files, links and FIFOs (never opened)."""
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = os.path.relpath(dirpath, src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in [*filenames, *[d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]]:
            s = os.path.join(dirpath, name)
            d = dst / rel / name
            st = os.lstat(s)
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(s), d)
                elif stat.S_ISFIFO(st.st_mode):
                    os.mkfifo(d)
                elif stat.S_ISREG(st.st_mode) and st.st_size < 64 << 20:
                    shutil.copyfile(s, d)


@dataclass
class RunConfig:
    workers: int = 2
    bound: float = 30.0
    mem_limit: int = 6 << 30
    scale: Scale = Scale()
    failures_dir: Path | None = None
    #: a fresh interpreter per case instead of long-lived workers
    subprocess: bool = False
    deadline: float | None = None  # time.monotonic() after which no new case starts
    keep: bool = False


def iter_cases(counts: dict[str, int], seed: int) -> Iterator[tuple[str, int]]:
    """``(family, seed)`` pairs, interleaved so a time-limited run covers every family."""
    queues = {f: list(range(seed, seed + n)) for f, n in counts.items()}
    while any(queues.values()):
        for f in list(queues):
            if queues[f]:
                yield f, queues[f].pop(0)


def run_cases(pairs: Iterable[tuple[str, int]], root: Path, config: RunConfig,
              on_result: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run every ``(family, seed)`` through the CLI with ``config.workers`` workers."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(root / "corpus")
    corpus.ensure_plans()
    pending = list(pairs)
    lock = threading.Lock()
    results: list[Outcome] = []

    def take() -> tuple[str, int] | None:
        with lock:
            if not pending or (config.deadline is not None and time.monotonic() > config.deadline):
                return None
            return pending.pop(0)

    def loop(index: int) -> None:
        worker: Worker | SubprocessWorker = (
            SubprocessWorker(root / f"worker{index}", config.mem_limit) if config.subprocess
            else Worker(root / f"worker{index}", config.mem_limit))
        try:
            while (item := take()) is not None:
                family, seed = item
                outcome = run_one(corpus, family, seed, root / "cases", worker, config)
                with lock:
                    results.append(outcome)
                    if on_result is not None:
                        on_result(outcome)
        finally:
            worker.stop()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(config.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.sort(key=lambda o: (FAMILIES.index(o.case.family), o.case.seed))
    return results


def run_one(corpus: Corpus, family: str, seed: int, cases_root: Path,
            worker: Worker | SubprocessWorker, config: RunConfig) -> Outcome:
    """Build, run and check one case; a failure of the harness itself is class ``harness``."""
    try:
        return _run_one(corpus, family, seed, cases_root, worker, config)
    except Exception:
        case = Case(family, seed, "?", [], note="the harness failed")
        return Outcome(case, None, 0.0, {"harness": traceback.format_exc()[-600:]}, "", "")


def _run_one(corpus: Corpus, family: str, seed: int, cases_root: Path,
             worker: Worker | SubprocessWorker, config: RunConfig) -> Outcome:
    folder = cases_root / f"{family}-{seed}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with _corpus_lock:
        case = build_case(corpus, family, seed, folder, config.scale)
    before = snapshot(folder)
    atime = _age_canary(folder)
    req = {"folder": str(folder), "argv": case.argv, "named_reads": case.named_reads}
    res = worker.run(req, config.bound)
    read_by_native = os.stat(folder / CANARY).st_atime != atime  # before the snapshot reads it
    after = snapshot(folder)
    classes = check_result(case, folder, before, after, res, read_by_native, config.bound)
    pwned = Path(worker.scratch) / MARK
    if pwned.exists():
        classes["pwned"] = f"payload file in the worker folder: {pwned}"
        pwned.unlink()
    outcome = Outcome(case, res.get("code"), float(res.get("seconds", 0.0)), classes,
                      res["stderr"]["head"][-4000:] + res["stderr"]["tail"], res["stdout"]["head"][-2000:])
    if classes and config.failures_dir is not None:
        dst = config.failures_dir / f"{family}-{case.command}-{seed}"
        if dst.exists():
            shutil.rmtree(dst)
        copy_case(folder, dst / "case")
        (dst / "result.json").write_text(json.dumps(outcome.to_json(), indent=1, ensure_ascii=True))
    if not config.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return outcome


_corpus_lock = threading.Lock()


# ---------------------------------------------------------------------- report


def summary_table(outcomes: list[Outcome]) -> str:
    """A markdown table: family x command -> cases, clean, and a count per failure class."""
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for o in outcomes:
        r = rows.setdefault((o.case.family, o.case.command), {"cases": 0, "clean": 0})
        r["cases"] += 1
        if not o.classes:
            r["clean"] += 1
        for c in o.classes:
            r[c] = r.get(c, 0) + 1
    cols = [c for c in CLASSES if any(c in r for r in rows.values())]
    head = ["family", "command", "cases", "clean", *cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total: dict[str, int] = {}
    for (fam, cmd), r in sorted(rows.items(), key=lambda kv: (FAMILIES.index(kv[0][0]), kv[0][1])):
        lines.append("| " + " | ".join([fam, cmd, *(str(r.get(c, 0)) for c in ["cases", "clean", *cols])]) + " |")
        for k, v in r.items():
            total[k] = total.get(k, 0) + v
    lines.append("| " + " | ".join(["**all**", "", *(str(total.get(c, 0)) for c in ["cases", "clean", *cols])]) + " |")
    return "\n".join(lines) + "\n"


def examples(outcomes: list[Outcome]) -> str:
    """One reproducing case per (failure class, family, command)."""
    seen: set[tuple[str, str, str]] = set()
    lines = []
    for o in outcomes:
        for c, why in o.classes.items():
            k = (c, o.case.family, o.case.command)
            if k in seen:
                continue
            seen.add(k)
            lines.append(f"- {c}: {o.case.family}:{o.case.seed} ({o.case.command}; {o.case.note[:80]!r}): "
                         f"{why[:200]!r}")
    return "\n".join(sorted(lines)) + ("\n" if lines else "")


def outcome_json(o: Outcome) -> str:
    return json.dumps(o.to_json(), ensure_ascii=True)
