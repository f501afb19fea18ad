"""The corrupted-plan family (verify, show, plot) and the hostile-CSV family (pack)."""
from __future__ import annotations

import csv
import io
import json
import os
import random
from pathlib import Path
from typing import Any

from onnxmem.core.solvers.pack import EXIT_NO_PLAN

from .common import Base, Case
from .corpus import HOSTILE_NAMES, Corpus
from .families import _write

# plans -------------------------------------------------------------------------


def _mutate_numbers(data: Any, rng: random.Random, value: Any) -> str:
    """Set one numeric field somewhere in the plan to ``value``."""
    spots: list[tuple[Any, Any]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    spots.append((x, k))
                walk(v)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    spots.append((x, i))
                walk(v)

    walk(data)
    if not spots:
        return "no number"
    holder, k = rng.choice(spots)
    holder[k] = value
    return f"field {k!r} = {str(value)[:30]}"


def _plan_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    corpus.ensure_plans()
    bases = [b for b in corpus.small() if b.plan_json]
    base = rng.choice(bases)
    mdir = folder / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    _write(mdir, base.files)
    text = base.plan_json or "{}"
    what, note, data, plan_arg, named = corrupt_plan(text, bases, base, mdir, rng)
    outputs: list[str] = []
    # a plan whose live tensors of different groups share bytes must never verify, nor be shown or drawn
    unsafe = what in ("all_offsets_zero", "swap_offsets") and _unsafe(data)
    if command == "verify":
        argv = ["verify", f"model/{base.main}", "--plan", plan_arg, *base.args]
    elif command == "show":
        argv = ["show", plan_arg]
    else:
        fmt = rng.choice((".html", ".html", ".svg", ".png"))
        argv = ["plot", plan_arg, "-o", f"out/plot{fmt}"]
        outputs = [f"out/plot{fmt}"]
    return Case("plans", seed, command, argv, outputs, [], named_reads=named,
                ok_codes=(3,), note=f"{base.name}: {what}: {note}",
                must_fail=unsafe)


def corrupt_plan(text: str, bases: list[Base], base: Base, mdir: Path,
                 rng: random.Random) -> tuple[str, str, Any, str, list[str]]:
    """Write a corruption of the plan ``text`` of ``base`` to ``mdir/plan.json`` (or name a
    special file as the plan): the corruption's kind, a note, the JSON data when it is
    still JSON, the plan argument and the paths outside the case it names."""
    plan_arg = "model/plan.json"
    named: list[str] = []
    what = rng.choice(("number", "number", "number", "truncate", "flip", "utf8", "deep", "type",
                       "drop_key", "other_model", "model_as_plan", "fifo", "dev_zero", "empty",
                       "all_offsets_zero", "huge_arena", "swap_offsets", "bom", "names",
                       "duplicate_tensor", "many_tensors", "literal"))
    data = json.loads(text)
    raw: bytes | None = None
    note = what
    if what == "number":
        value = rng.choice((2**70, -1, -(2**63), 1.5, float("nan"), float("inf"), 1e308, "12", None,
                            True, 2**63, 10**400))
        note = _mutate_numbers(data, rng, value)
    elif what == "truncate":
        raw = text.encode()[: rng.randrange(len(text))]
    elif what == "flip":
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        raw = bytes(b)
    elif what == "utf8":
        b = bytearray(text.encode())
        i = rng.randrange(len(b))
        b[i:i] = rng.choice((b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80"))
        raw = bytes(b)
    elif what == "deep":
        depth = rng.choice((1000, 100_000))
        key = rng.choice(("tensors", "order", "extra", "model"))
        raw = text.replace(f'"{key}":', f'"{key}": ' + "[" * depth + "]" * depth + ', "x":', 1).encode()
    elif what == "type":
        key = rng.choice(list(data))
        data[key] = rng.choice(([], {}, "x", 0, None, [[]], {"a": 1}))
        note = f"{key} = {data[key]!r}"
    elif what == "drop_key":
        key = rng.choice(list(data))
        del data[key]
        if data.get("tensors") and rng.random() < 0.5:
            t = rng.choice(data["tensors"])
            t.pop(rng.choice(list(t)), None)
        note = f"{key} dropped"
    elif what == "other_model":
        other = rng.choice([b for b in bases if b is not base] or bases)
        data = json.loads(other.plan_json or "{}")
        note = f"plan of {other.name}"
    elif what == "model_as_plan":
        plan_arg = f"model/{base.main}"
    elif what == "fifo":
        os.mkfifo(mdir / "plan.json")
    elif what == "dev_zero":
        plan_arg = "/dev/zero"
        named.append("/dev/zero")
    elif what == "empty":
        raw = rng.choice((b"", b"null", b"[]", b"{}", b"0", b'"plan"', b"\n"))
    elif what == "all_offsets_zero":
        for t in data.get("tensors", []):
            t["offset"] = 0
    elif what == "huge_arena":
        shift = rng.choice((2**40, 2**50, 2**62))
        data["arena_size"] = int(data.get("arena_size", 0)) + shift
        for t in data.get("tensors", []):
            if isinstance(t.get("offset"), int):
                t["offset"] += shift
        note = f"arena and offsets shifted by {shift}"
    elif what == "swap_offsets":
        ts = [t for t in data.get("tensors", []) if t.get("offset") is not None]
        if len(ts) >= 2:
            a, b2 = rng.sample(ts, 2)
            a["offset"], b2["offset"] = b2["offset"], a["offset"]
    elif what == "bom":
        raw = b"\xef\xbb\xbf" + text.encode()
    elif what == "names":
        for t in data.get("tensors", [])[:3]:
            t["name"] = rng.choice(HOSTILE_NAMES)
        if data.get("order"):
            data["order"][0] = rng.choice(HOSTILE_NAMES)
    elif what == "duplicate_tensor":
        if data.get("tensors"):
            data["tensors"].append(dict(data["tensors"][0]))
    elif what == "many_tensors":
        if data.get("tensors"):
            t0 = data["tensors"][0]
            data["tensors"].extend(dict(t0, name=f"copy{i}") for i in range(rng.choice((1000, 50_000))))
    else:
        raw = rng.choice((b"NaN", b"Infinity", b"1" * 5000, b'{"schema_version": 1e999}',
                          b'{"a": "\\ud800"}', b"{" * 5000))
    if what not in ("model_as_plan", "fifo", "dev_zero"):
        if raw is None:
            raw = json.dumps(data).encode()
        (mdir / "plan.json").write_bytes(raw)
    return what, note, data, plan_arg, named


def _unsafe(data: Any) -> bool:
    """Two tensors of one graph (the main graph or one body: steps count within it), of different
    alias groups, both non-empty, live at once, overlapping bytes."""
    ts = [t for t in (data.get("tensors") or []) if isinstance(t, dict)
          and isinstance(t.get("offset"), int) and isinstance(t.get("size"), int) and t["size"] > 0
          and isinstance(t.get("start"), int) and isinstance(t.get("end"), int)]
    for i, a in enumerate(ts):
        for b in ts[i + 1:]:
            if a.get("group", a.get("name")) == b.get("group", b.get("name")) \
                    or a.get("graph", "") != b.get("graph", ""):
                continue
            if a["start"] < b["end"] and b["start"] < a["end"] \
                    and a["offset"] < b["offset"] + b["size"] and b["offset"] < a["offset"] + a["size"]:
                return True
    return False


# csv ---------------------------------------------------------------------------


def _csv_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    mdir = folder / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    what = rng.choice(("negative", "huge", "overlap_huge", "non_utf8", "giant_field", "nul",
                       "bad_header", "extra_cols", "offsets", "bom", "many", "odd_ints", "ids",
                       "quoted", "empty", "reversed", "valid"))
    n = rng.randint(2, 12)
    rows: list[list[str]] = []
    for i in range(n):
        lo = rng.randrange(0, 20)
        rows.append([f"b{i}", str(lo), str(lo + rng.randint(1, 10)), str(rng.randint(1, 4096))])
    header = "id,lower,upper,size"
    raw: bytes | None = None
    solver = rng.choice(("exact", "greedy", "greedy", None))
    if what == "negative":
        r = rng.choice(rows)
        r[rng.randrange(1, 4)] = str(rng.choice((-1, -(2**62), -5)))
    elif what == "huge":
        r = rng.choice(rows)
        r[rng.randrange(1, 4)] = rng.choice(("1e30", str(2**62), str(2**63), str(2**64), "9" * 400))
    elif what == "overlap_huge":
        rows = [["a", "0", "2", str(2**62)], ["b", "1", "3", str(2**62)]]
        if rng.random() < 0.5:
            rows.append(["c", "0", "3", str(2**62 + rng.randrange(1000))])
    elif what == "non_utf8":
        raw = (header + "\n").encode() + b"\xff\xfe,0,1,8\n" + b"ok,0,1,\xe9\n"
    elif what == "giant_field":
        rows[0][0] = "x" * rng.choice((131_073, 1_000_000))
    elif what == "nul":
        raw = (header + "\n").encode() + b"a,0,1,8\x00\nb,0,1,8\n"
    elif what == "bad_header":
        header = rng.choice(("", "lower,upper,size", "id;lower;upper;size", "ID,LOWER,UPPER,SIZE",
                             "id,lower,upper,size,offset,more", "id,lower,upper,size,evil"))
    elif what == "extra_cols":
        rows[0].append("7")
    elif what == "offsets":
        header += ",offset"
        for r in rows:
            r.append(str(rng.choice((0, -1, 2**62, 64, 3))))
    elif what == "bom":
        raw = b"\xef\xbb\xbf" + (header + "\n" + "\n".join(",".join(r) for r in rows)).encode()
    elif what == "many":
        rows = []
        for i in range(rng.choice((500, 3000))):
            lo = rng.randrange(0, 1000)
            rows.append([f"b{i}", str(lo), str(lo + rng.randint(1, 50)), str(rng.randint(1, 1 << 20))])
        solver = "greedy"
    elif what == "odd_ints":
        r = rng.choice(rows)
        r[rng.randrange(1, 4)] = rng.choice(("١٢", "+5", " 7 ", "0x10", "1_000", "12.0", "nan", "inf", ""))
    elif what == "ids":
        for r in rows[:3]:
            r[0] = rng.choice(HOSTILE_NAMES).replace("\x00", "0")[:5000]
        rows[-1][0] = rows[0][0]
    elif what == "quoted":
        raw = (header + '\n"a\nb",0,1,8\n"c""d",1,2,16\n').encode()
    elif what == "empty":
        raw = rng.choice((b"", b"\n\n", header.encode(), b"\xef\xbb\xbf"))
    elif what == "reversed":
        r = rng.choice(rows)
        r[1], r[2] = r[2], r[1]
    if raw is None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        buf.write(header + "\n")
        for r in rows:
            w.writerow(r)
        raw = buf.getvalue().encode("utf-8", "surrogateescape")
    (mdir / "problem.csv").write_bytes(raw)
    argv = ["pack", "model/problem.csv", "-o", "out/solution.csv"]
    if solver:
        argv += ["--solver", solver]
    if solver in (None, "exact"):
        argv += ["--timeout", "2"]
    return Case("csv", seed, "pack", argv, ["out/solution.csv"], [], ok_codes=(EXIT_NO_PLAN,),
                note=f"{what} ({solver or 'default'})", csv_input="model/problem.csv")
