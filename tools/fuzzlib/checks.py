"""Snapshots of a case folder and the checks that classify a run's failures."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxmem.core.solvers.pack import EXIT_NO_PLAN

from .common import CANARY, MARK, RANGE_SCHEMA_PATH, SCHEMA_PATH, Case

# ------------------------------------------------------------------- snapshots


#: files larger than this are not hashed (a sparse file of 2^40 bytes in a zoo)
HASH_LIMIT = 256 << 20


def snapshot(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``folder`` by relative path: kind, size, mtime and content hash.

    Special files are recorded by kind only (a FIFO is never opened); a file over
    ``HASH_LIMIT`` bytes by its size and modification time.
    """
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, folder)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISREG(st.st_mode) and st.st_size > HASH_LIMIT:  # a huge (sparse) file
                out[rel] = ("file", st.st_size, f"mtime {st.st_mtime_ns}")
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha1()
                with open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                out[rel] = ("file", st.st_size, h.hexdigest())
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


def _age_canary(folder: Path) -> float:
    """Make the canary's access time older than its change time, so a read moves it."""
    p = folder / CANARY
    st = os.stat(p)
    old = st.st_mtime - 3600
    os.utime(p, (old, st.st_mtime))
    return os.stat(p).st_atime



# ---------------------------------------------------------------------- checks

_CONTROL = {chr(c) for c in range(32) if chr(c) not in "\n\t"} | {"\x7f"}


@dataclass
class Outcome:
    case: Case
    code: int | None
    seconds: float
    classes: dict[str, str]
    stderr: str
    stdout: str

    def to_json(self) -> dict[str, Any]:
        return {"family": self.case.family, "seed": self.case.seed, "command": self.case.command,
                "argv": self.case.argv, "note": self.case.note, "code": self.code,
                "seconds": round(self.seconds, 3), "classes": self.classes,
                "stderr": self.stderr[-2000:], "stdout": self.stdout[-1000:]}


def _schema_errors(path: Path) -> str | None:
    import jsonschema

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"not JSON: {exc}"
    schema = RANGE_SCHEMA_PATH if isinstance(data, dict) and "range" in data else SCHEMA_PATH
    validator = jsonschema.Draft202012Validator(json.loads(schema.read_text()))
    err = next(iter(validator.iter_errors(data)), None)
    return None if err is None else f"{list(err.absolute_path)}: {err.message[:200]}"


def _check_pack(folder: Path, case: Case, stdout: str) -> str | None:
    """An independent check of a ``pack`` answer: offsets valid, bound and height consistent."""
    sol = folder / "out/solution.csv"
    if not sol.exists():
        return None
    try:
        rows = list(csv.reader(io.StringIO(sol.read_text(errors="replace"))))[1:]
        bufs = [(int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows if r]
    except (ValueError, IndexError) as exc:
        return f"solution CSV unreadable: {exc}"
    for lo, up, size, off in bufs:
        if off < 0 or size < 0 or lo < 0 or up < lo:
            return f"solution has negative or inverted numbers: {(lo, up, size, off)}"
    bufs.sort()
    active: list[tuple[int, int, int, int]] = []
    for b in bufs:
        active = [a for a in active if a[1] > b[0]]
        for a in active:
            if a[2] and b[2] and a[3] < b[3] + b[2] and b[3] < a[3] + a[2]:
                return f"buffers live together overlap: {a} and {b}"
        active.append(b)
    height = max((off + size for _lo, _up, size, off in bufs), default=0)
    stats = {}
    for line in stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            stats[parts[0] + (" " + parts[1].split()[0] if parts[0] == "lower" else "")] = parts[1]
    try:
        bound = int(stats.get("lower bound", "0").split()[1]) if "lower bound" in stats else None
    except (ValueError, IndexError):
        bound = None
    try:
        reported = int(stats["height"].split()[0]) if "height" in stats else None
    except ValueError:
        reported = None
    if reported is not None and reported < height:
        return f"reported height {reported} below the solution's {height}"
    if bound is not None and (bound < 0 or (reported is not None and bound > reported)):
        return f"lower bound {bound} impossible (height {reported})"
    return None


def _one_answer(lines: list[str]) -> bool:
    """Warnings, then one line of ``fit``'s answer that nothing fits."""
    return bool(lines) and lines[-1].startswith("error: ") and all(ln.startswith("warning: ") for ln in lines[:-1])


def _fits(items: Any, memory: int) -> bool | None:
    """Whether the ``items`` of a fit answer total at most ``memory`` (None: no total)."""
    total = items.get("total") if isinstance(items, dict) else None
    return None if not isinstance(total, int) else total <= memory


def _check_fit(code: int | None, stdout: str) -> str | None:
    """An independent check of a ``fit --json`` answer on its own figures: each value found lies
    in its range; at exit 0 the total is within the memory and the margin is their difference,
    the next value's total (where given) and each frontier point's are on the right side of it;
    at exit 2 no value is found and the total is over the memory."""
    if code not in (0, 2):
        return None
    try:
        data = json.loads(stdout)
    except ValueError:
        return f"exit {code} without a JSON answer on stdout: {stdout[:120]!r}"
    memory, found, box = data.get("memory"), data.get("fit"), data.get("box")
    if not isinstance(memory, int) or not isinstance(found, dict) or not isinstance(box, dict):
        return f"answer lacks memory, fit or box: {sorted(data)[:12]}"
    for dim, value in found.items():
        lo_hi = box.get(dim)
        if value is not None and not (isinstance(lo_hi, list) and lo_hi[0] <= value <= lo_hi[1]):
            return f"{dim}={value} outside its range {lo_hi}"
    fits = _fits(data.get("items"), memory)
    if code == 2:
        if any(v is not None for v in found.values()) or fits:
            return f"exit 2 (nothing fits) with {found} at a total within the memory"
        return None
    if any(v is None for v in found.values()) or fits is not True:
        return f"exit 0 with {found} at total {data.get('items', {}).get('total')} of memory {memory}"
    if data.get("margin") != memory - data["items"]["total"]:
        return f"margin {data.get('margin')} is not memory - total"
    nxt = data.get("next")
    if isinstance(nxt, dict) and _fits(nxt.get("items"), memory) is not False:
        return f"the next point {nxt.get('point')} fits too, yet {found} is the answer"
    for point in data.get("frontier") or []:
        if isinstance(point, dict) and point.get("value") is not None and _fits(point.get("items"), memory) is False:
            return f"frontier point {point.get('point')} over the memory"
    return None


def check_result(case: Case, folder: Path, before: dict[str, tuple[Any, ...]],
                 after: dict[str, tuple[Any, ...]], res: dict[str, Any], canary_read: bool,
                 bound: float) -> dict[str, str]:
    """The failure classes of one run, each with its evidence (empty: the run is clean)."""
    bad: dict[str, str] = {}
    out = res["stdout"]["head"] + res["stdout"]["tail"]
    err = res["stderr"]["head"] + res["stderr"]["tail"]
    code = res.get("code")
    if res.get("hang"):
        bad["hang"] = f"killed after {bound:.0f} s"
    if res.get("crash"):
        bad["crash"] = res["crash"]
    if res["stdout"]["traceback"] or res["stderr"]["traceback"] or "Traceback (most recent" in out + err:
        last = [ln for ln in err.splitlines() if ln.strip()][-1:] or ["?"]
        bad["traceback"] = last[0][:300]
    if res.get("exc") in ("MemoryError",) or "MemoryError" in err[-3000:]:
        bad["memory"] = "MemoryError under the address space limit"
    # click's own refusal of a flag value (a path that is a folder): exit 2, its usage text
    usage = code == 2 and err.startswith("Usage: ") and "\nError: " in err
    if code is not None and not usage:
        ok = (0, 1, *case.ok_codes)
        if code not in ok:
            bad["bad-exit"] = f"exit {code}"
        elif code == 0 and case.must_fail and case.family == "plans":
            bad["unsafe-accepted"] = f"{case.command} exit 0 on a plan where live tensors share bytes"
        elif code == 0 and case.must_fail and case.family == "exports":
            made = [o for o in case.outputs if after.get(o, ("",))[0] == "file"]
            if made:
                bad["unsafe-exported"] = f"exit 0 wrote {', '.join(made)} from an unsafe plan ({case.note[:80]})"
        elif code == 0 and case.must_fail:
            bad["bad-exit"] = "exit 0 where the command must refuse"
        if code != 0 and "traceback" not in bad:
            lines = err.splitlines() if res["stderr"]["size"] < 1 << 20 else ["?"] * 3
            if code == EXIT_NO_PLAN and case.command == "pack" and not lines:
                pass
            elif case.family == "zoo" and not (len(lines) == 1 and lines[0].strip()):
                # a batch job: one progress line per model, then exit 1 when any failed
                if not all(ln.startswith(("ok ", "failed ", "stopped ")) for ln in lines if ln.strip()):
                    bad["noisy-error"] = f"zoo exit {code} with a line that is no model's row: {err[:200]!r}"
            elif case.fit_json and code == 2 and _one_answer(lines):
                pass  # fit's "does not fit" is an answer: the warnings on the figures come before it
            elif len(lines) != 1 or not lines[0].strip():
                bad["noisy-error"] = f"exit {code} with {len(lines)} stderr lines: {err[:200]!r}"
    if any(c in _CONTROL for c in out + err):
        ch = next(c for c in out + err if c in _CONTROL)
        bad["raw-control"] = f"raw {ch!r} in the output"
    # files
    outputs = set(case.outputs)
    inputs_changed = []
    stray = []
    for rel in sorted(set(before) | set(after)):
        if before.get(rel) == after.get(rel):
            continue
        if rel in outputs and rel not in before:
            continue
        if rel not in before and any(rel == d or rel.startswith(d + "/") for d in case.output_dirs):
            continue
        change = f"{rel}: {before.get(rel, ('absent',))[0]} -> {after.get(rel, ('absent',))[0]}"
        if rel.startswith("model"):
            inputs_changed.append(change)
        else:  # a new file, or an existing one (a FIFO, a device, a link) replaced or removed
            stray.append(change)
    if inputs_changed:
        bad["input-changed"] = "; ".join(inputs_changed)[:300]
    writes = list(res.get("writes", [])) + [f"temp file left: {t}" for t in res.get("tmp_leftovers", [])]
    if stray or writes:
        bad["stray-write"] = "; ".join(stray + writes)[:300]
    if any(MARK in rel for rel in after):
        bad["pwned"] = "payload file created"
    if res.get("execs") or res.get("evals"):
        bad["pwned"] = "; ".join(res.get("execs", []) + [f"compiled: {e!r}" for e in res.get("evals", [])])[:300]
    reads = list(res.get("reads", []))
    if canary_read:
        reads.append(f"{CANARY} (read by native code)")
    if reads:
        bad["stray-read"] = "; ".join(reads)[:300]
    created = [o for o in case.outputs if o in after and o not in before]
    answered = code == 0 or (case.fit_json and code == 2)  # fit's exit 2 is an answer: nothing fits
    if not answered or res.get("hang") or res.get("crash"):
        if created:
            bad["partial"] = f"exit {code} left {', '.join(created)}"
    elif answered:
        if case.command == "pack" and "written" not in out:
            pass
        else:
            missing = [o for o in case.outputs if after.get(o, ("",))[0] != "file"]
            missing += [d for d in case.output_dirs if after.get(d, ("",))[0] != "dir"]
            if missing:
                bad["missing-output"] = f"exit 0 without {', '.join(missing)}"
        for p in case.plan_outputs:
            if after.get(p, ("",))[0] == "file":
                why = _schema_errors(folder / p)
                if why:
                    bad["invalid-plan"] = why
    if case.csv_input and code == 0:
        why = _check_pack(folder, case, out)
        if why:
            bad["wrong-answer"] = why
    if case.fit_json and not usage and res["stdout"]["size"] < 1 << 20:
        why = _check_fit(code, out)
        if why:
            bad["wrong-answer"] = why
    return bad
