"""The ``exports`` family: hostile plans into ``export`` (every format) and ``instantiate``.

The plans are the ``plans`` family's corruptions, and plans that are well formed but unsafe:
two live tensors at one offset, a tensor past the arena's end, offsets of 2^31 and more (which
TensorFlow Lite Micro's int32 table cannot hold), range plans whose piece names an unknown dim
or puts two live buffers at one offset. An exit 0 that writes a file from a plan the harness's
own check refuses is ``unsafe-exported``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from .common import Case
from .corpus import Corpus
from .families import _write
from .plans import _unsafe, corrupt_plan

FORMATS = {"c": "plan.h", "tflm": "plan.bin", "onnx": "planned.onnx", "json": "plan.json"}
POINT_UNSAFE = ("same_offset", "past_end", "over_2_31")
RANGE_KINDS = ("corrupt", "unknown_dim", "unknown_dim_offset", "same_offset", "valid")


def _past_end(data: Any) -> bool:
    """A tensor whose bytes end past the arena."""
    arena = data.get("arena_size") if isinstance(data, dict) else None
    return isinstance(arena, int) and any(
        isinstance(t, dict) and isinstance(t.get("offset"), int) and isinstance(t.get("size"), int)
        and t["offset"] + t["size"] > arena for t in data.get("tensors") or [])


def _co_live(ts: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Two non-empty tensors of one graph, of different groups, live at one step."""
    for i, a in enumerate(ts):
        for b in ts[i + 1:]:
            if a.get("group") != b.get("group") and a.get("graph", "") == b.get("graph", "") \
                    and a.get("size") and b.get("size") \
                    and a["start"] < b["end"] and b["start"] < a["end"]:
                return a, b
    return None


def _unsafe_point(data: dict[str, Any], what: str, fmt: str) -> str:
    ts = [t for t in data.get("tensors", []) if isinstance(t.get("offset"), int)]
    if what == "same_offset":
        pair = _co_live(ts)
        if pair:
            pair[1]["offset"] = pair[0]["offset"]
            return f"{pair[1]['name']!r} moved onto {pair[0]['name']!r}"
        return "no two live tensors"
    if not ts:
        return "no tensor"
    if what == "past_end":
        t = max(ts, key=lambda t: t["size"])
        t["offset"] = data["arena_size"] - t["size"] // 2
        return f"{t['name']!r} ends past the arena"
    shift = 2**31 if fmt == "tflm" else 2**32
    for t in ts:
        t["offset"] += shift
    data["arena_size"] += shift
    return f"offsets shifted by {shift}"


def _point_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random) -> Case:
    corpus.ensure_plans()
    bases = [b for b in corpus.small() if b.plan_json]
    base = rng.choice(bases)
    mdir = folder / "model"
    _write(mdir, base.files)
    fmt = rng.choice(tuple(FORMATS))
    unsafe = False
    if rng.random() < 0.5:
        what, note, data, plan_arg, named = corrupt_plan(base.plan_json or "{}", bases, base, mdir, rng)
        unsafe = what in ("all_offsets_zero", "swap_offsets") and isinstance(data, dict) and _unsafe(data)
    else:
        data, plan_arg, named = json.loads(base.plan_json or "{}"), "model/plan.json", []
        what = rng.choice(POINT_UNSAFE)
        note = _unsafe_point(data, what, fmt)
        (mdir / "plan.json").write_text(json.dumps(data))
        unsafe = _unsafe(data) or _past_end(data) or (what == "over_2_31" and fmt == "tflm")
    out = f"out/{FORMATS[fmt]}"
    argv = ["export", plan_arg, "--format", fmt, "-o", out]
    if fmt in ("onnx", "tflm") and rng.random() < 0.8:
        argv += ["--model", f"model/{base.main}"]
    return Case("exports", seed, f"export {fmt}", argv, [out], [out] if fmt == "json" else [],
                named_reads=named, note=f"{base.name}: {what}: {note}", must_fail=unsafe, ok_codes=(3,))


def _range_unsafe(data: dict[str, Any], what: str, rng: random.Random) -> tuple[str, bool]:
    piece = data["range"]["pieces"][0]
    if what == "unknown_dim":
        piece["box"]["ghost"] = [1, 4]
        return "a piece ranges the unknown dim 'ghost'", True
    if what == "unknown_dim_offset":
        buf = rng.choice(piece["buffers"])
        buf["offset"] = "64*ghost"
        return f"buffer {buf['id']!r} at offset 64*ghost", True
    live: dict[str, tuple[int, int]] = {}
    for t in piece["tensors"]:
        lo, hi = live.get(t["group"], (t["start"], t["end"]))
        live[t["group"]] = (min(lo, t["start"]), max(hi, t["end"]))
    bufs = [b for b in piece["buffers"] if b["id"] in live]
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            (s1, e1), (s2, e2) = live[a["id"]], live[b["id"]]
            if s1 < e2 and s2 < e1:
                b["offset"] = a["offset"]
                return f"buffers {a['id']!r} and {b['id']!r} at one offset", True
    return "no two live buffers", False


def _range_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random) -> Case:
    text = corpus.ensure_range_plan()
    base = corpus.by_name("dynamic")
    mdir = folder / "model"
    _write(mdir, base.files)
    what = rng.choice(RANGE_KINDS)
    unsafe, named, plan_arg = False, [], "model/plan.json"
    if what == "corrupt":
        what, note, _data, plan_arg, named = corrupt_plan(text, [base], base, mdir, rng)
    elif what == "valid":
        note = "the range plan as made"
        (mdir / "plan.json").write_text(text)
    else:
        data = json.loads(text)
        note, unsafe = _range_unsafe(data, what, rng)
        (mdir / "plan.json").write_text(json.dumps(data))
    if rng.random() < 0.6:
        batch = rng.choice(("1", "3", "8", "0", "9", "-1", str(2**62), "x"))
        out = "out/plan.json"
        argv = ["instantiate", plan_arg, "--dim", f"batch={batch}", "-o", out]
        command, plans = "instantiate", [out]
        note += f"; batch={batch}"
    else:
        fmt = rng.choice(("c", "c", "json", "tflm"))
        out = f"out/{FORMATS[fmt]}"
        argv = ["export", plan_arg, "--format", fmt, "-o", out]
        command, plans = f"export {fmt} (range)", []
    return Case("exports", seed, command, argv, [out], plans, named_reads=named,
                note=f"range: {what}: {note}", must_fail=unsafe, ok_codes=(3,))


def exports_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    (folder / "model").mkdir(parents=True, exist_ok=True)
    if rng.random() < 0.3:
        return _range_case(corpus, seed, folder, rng)
    return _point_case(corpus, seed, folder, rng)
