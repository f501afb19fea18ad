"""Range plans against the three usual answers, per model: a table and a plot in docs/range.md.

For each model and box of dims (``MODELS``), it makes one range plan
(:func:`onnxmem.planning.ranges.plan_range`, timed) and samples ``--points`` points of
the box (every corner, then seeded random points, log-uniform in each dim).
At each point it compares the range plan's arena with:

* **per shape**: a plan made again at that point (``onnxmem plan --dim ...``,
  the default solver and order): the optimum one layout per shape gives;
* **upper bound**: the plan at the box's high corner, used for every point
  (its arena at every point);
* **grow-only**: a buffer that grows to the per-shape arena when a larger shape
  arrives and never shrinks, over the points in ascending order of that arena
  and in a seeded random order (its capacity at each step).

Ratios are to the per-shape arena at the same point: the worst and the
geometric mean over the points. Then the range plan is verified by execution
(:func:`onnxmem.verify.run.verify_plan`: the static proof, then every node run
inside one arena with onnxruntime on CPU) at 5 points, the corners first
(whole-model reference runs may take up to ``--run-seconds``).

The zoo fixtures are weight-free; each is given its seeded random weights
(:func:`onnxmem.zoo.materialize`) under ``--work``. The U-Net fixture has a
fixed batch of 1; no node of it fixes the batch, so the bench plans a copy
whose input and output batch dim is named ``batch``. GPT-2 and the
Llama-style decoder are planned over one decoding step after a KV cache of
``past_sequence`` positions (0:1023); the Llama-style decoder without a cache
is also planned over its prompt length ``sequence`` (1:1024). The U-Net's batch is
also planned over 1:8. Two image models are built with onnx.helper
(``models/build_models.py``, not shipped): ``strided_cnn`` (a stride-32 backbone,
32 channels wide) over image heights and widths 160:640, every size (32 x 32 residue
classes of its lattice) and on multiples of 32, and ``skip_cnn`` (a 3-level U-Net-like
model with nearest 2x Resize and skip Concats, 16 wide) over ``H``, ``W`` 128:512 in
steps of 32 and ``batch`` 1:4.

    python bench/bench_range.py                     # all models -> docs/range.md, docs/range-*.png
    python bench/bench_range.py --only resnet50_batch --out -
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "range.md"
BEGIN, END = "<!-- bench_range: begin -->", "<!-- bench_range: end -->"

#: (name, fixture, box, note, steps); a fixture "build:NAME" is models/build_models.py's NAME(width=32 or 16)
MODELS: list[tuple[str, str, dict[str, tuple[int, int]], str, dict[str, int]]] = [
    ("bert_base_dynamic", "bert_base_dynamic.onnx", {"batch": (1, 8), "sequence": (1, 512)}, "", {}),
    ("gpt2_past_dynamic", "gpt2_past_dynamic.onnx", {"past_sequence": (0, 1023)}, "KV cache", {}),
    ("llama_4l_past_dynamic", "llama_4l_past_dynamic.onnx", {"past_sequence": (0, 1023)}, "KV cache", {}),
    ("llama_4l_dynamic", "llama_4l_dynamic.onnx", {"sequence": (1, 1024)}, "prompt length, no KV cache", {}),
    ("resnet50_batch", "resnet50_batch.onnx", {"batch": (1, 64)}, "", {}),
    ("unet_batch", "unet.onnx", {"batch": (1, 16)}, "unet.onnx with its batch dim named (the fixture fixes 1)", {}),
    ("vit_base_batch", "vit_base_batch.onnx", {"batch": (1, 64)}, "", {}),
    ("unet_batch_1_8", "unet.onnx", {"batch": (1, 8)}, "unet.onnx with its batch dim named", {}),
    ("strided_cnn_hw", "build:strided_cnn", {"H": (160, 640), "W": (160, 640)}, "every size", {}),
    ("strided_cnn_hw_32", "build:strided_cnn", {"H": (160, 640), "W": (160, 640)}, "multiples of 32",
     {"H": 32, "W": 32}),
    ("skip_cnn_hw_batch", "build:skip_cnn", {"H": (128, 512), "W": (128, 512), "batch": (1, 4)},
     "skips match at multiples of 8", {"H": 32, "W": 32}),
]
WIDTHS = {"strided_cnn": 32, "skip_cnn": 16}


def built(fixture: str, work: Path) -> Path:
    """The helper-built model ``build:NAME`` written under ``work``."""
    import importlib.util

    import onnx

    spec = importlib.util.spec_from_file_location("build_models", ROOT / "models" / "build_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    name = fixture.split(":", 1)[1]
    path = work / f"{name}.onnx"
    onnx.save(getattr(module, name)(width=WIDTHS[name]), str(path))
    return path


def batch_copy(src: Path, dest: Path) -> Path:
    """``src`` with dim 0 of its inputs and outputs named ``batch`` (its data file stays beside it)."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    for vi in (*model.graph.input, *model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "batch"
    del model.graph.value_info[:]
    onnx.save(model, str(dest))
    return dest


def sample_points(box: dict[str, tuple[int, int]], count: int, seed: int,
                  steps: dict[str, int] | None = None) -> list[dict[str, int]]:
    from onnxmem.core.symbolic import box_corners

    steps = steps or {}
    points = box_corners(box)
    seen = {tuple(sorted(p.items())) for p in points}
    rng = random.Random(seed)
    tries = 0
    while len(points) < count and tries < 10_000:
        tries += 1
        p = {}
        for k, (lo, hi) in sorted(box.items()):
            v = math.exp(rng.uniform(math.log(lo + 1), math.log(hi + 1))) - 1
            st = steps.get(k, 1)
            p[k] = min(max(lo + st * int(round((v - lo) / st)), lo), hi)
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            points.append(p)
    return points


def verify_points(box: dict[str, tuple[int, int]], points: list[dict[str, int]]) -> list[dict[str, int]]:
    """5 points to run: the corners first, then the sampled points nearest the log-middle, quarter, three quarters."""
    from onnxmem.core.symbolic import box_corners

    chosen = box_corners(box)[:5]
    for q in (0.5, 0.25, 0.75, 0.125, 0.875):
        if len(chosen) >= 5:
            break
        target = {k: math.log(lo + 1) + q * (math.log(hi + 1) - math.log(lo + 1)) for k, (lo, hi) in box.items()}
        rest = [p for p in points if p not in chosen]
        if rest:
            chosen.append(min(rest, key=lambda p: sum(abs(math.log(p[k] + 1) - target[k]) for k in p)))
    return chosen


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def grow_only(arenas: list[int]) -> list[int]:
    cap, out = 0, []
    for a in arenas:
        cap = max(cap, a)
        out.append(cap)
    return out


def measure(name: str, path: Path, box: dict[str, tuple[int, int]], points: int, seed: int,
            execute: bool, steps: dict[str, int]) -> dict[str, Any]:
    from onnxmem.model import load_model
    from onnxmem.planning import plan_range
    from onnxmem.planning.pipeline import PlanOptions, plan_loaded
    from onnxmem.plans import instantiate
    from onnxmem.verify.run import VerifyOptions, verify_plan

    model = load_model(path)
    t0 = time.perf_counter()
    rp = plan_range(model, path, box, PlanOptions(), steps=steps)
    seconds = time.perf_counter() - t0
    box = rp.box  # on the steps
    pts = sample_points(box, points, seed, steps)
    rows = []
    for p in pts:
        t1 = time.perf_counter()
        direct = plan_loaded(model, path, PlanOptions(dims=p)).plan.arena_size
        rows.append({"point": p, "range": rp.arena_at(p), "per_shape": direct,
                     "per_shape_seconds": time.perf_counter() - t1})
        print(f"  {name} {p}: range {rows[-1]['range']:,} per-shape {direct:,}", file=sys.stderr)
    top = {k: hi for k, (_, hi) in box.items()}
    upper = plan_loaded(model, path, PlanOptions(dims=top)).plan.arena_size
    ascending = sorted(range(len(rows)), key=lambda i: rows[i]["per_shape"])
    shuffled = list(range(len(rows)))
    random.Random(seed).shuffle(shuffled)
    grow_asc = dict(zip(ascending, grow_only([rows[i]["per_shape"] for i in ascending])))
    grow_rand = dict(zip(shuffled, grow_only([rows[i]["per_shape"] for i in shuffled])))
    for i, r in enumerate(rows):
        r.update(upper=upper, grow_ascending=grow_asc[i], grow_random=grow_rand[i])
    verified = []
    if execute:
        for p in verify_points(box, pts):
            t1 = time.perf_counter()
            try:
                report = verify_plan(model, instantiate(rp, p), model_path=path,
                                     options=VerifyOptions(execute=True))
                ok = report.first is None and report.execution is not None
                why = "" if ok else str(report.first)
            except Exception as exc:  # noqa: BLE001 - a bench row records the failure and goes on
                ok, why = False, f"{type(exc).__name__}: {exc}"
            verified.append({"point": p, "ok": ok, "seconds": time.perf_counter() - t1, "why": why[:200]})
            print(f"  {name} verify {p}: {'ok' if ok else why[:200]}", file=sys.stderr)
    def ratios(key: str) -> list[float]:
        return [r[key] / r["per_shape"] for r in rows if r["per_shape"]]

    return {
        "name": name, "box": box, "steps": steps, "seconds": seconds, "pieces": len(rp.pieces), "rows": rows,
        "shuffled": shuffled, "verified": verified,
        "range_max": max(ratios("range")), "range_geo": geomean(ratios("range")),
        "upper_geo": geomean(ratios("upper")), "upper_max": max(ratios("upper")),
        "asc_geo": geomean(ratios("grow_ascending")), "rand_geo": geomean(ratios("grow_random")),
    }


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(result["rows"], key=lambda r: r["per_shape"])
    mib = 2 ** 20
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    x = range(len(rows))
    left.plot(x, [r["upper"] / mib for r in rows], "k--", label="upper-bound plan")
    left.plot(x, [r["range"] / mib for r in rows], "o-", color="#1f77b4", label="range plan")
    left.plot(x, [r["per_shape"] / mib for r in rows], "x", color="#d62728", label="per-shape plan")
    left.set_yscale("log")
    left.set_xlabel("sampled point, by per-shape arena")
    left.set_ylabel("arena (MiB)")
    left.legend(fontsize=8)
    seq = [result["rows"][i] for i in result["shuffled"]]
    steps = range(len(seq))
    right.step(steps, [r["grow_random"] / mib for r in seq], where="mid", color="#2ca02c",
               label="grow-only capacity")
    right.plot(steps, [r["range"] / mib for r in seq], "o-", color="#1f77b4", label="range plan")
    right.plot(steps, [r["per_shape"] / mib for r in seq], "x", color="#d62728", label="per-shape plan")
    right.set_yscale("log")
    right.set_xlabel("step of the random sequence of shapes")
    right.legend(fontsize=8)
    box = " ".join(f"{k}={lo}:{hi}" for k, (lo, hi) in result["box"].items())
    fig.suptitle(f"{result['name']}  ({box})")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def table(results: list[dict[str, Any]], info: dict[str, Any], command: str) -> str:
    lines = [
        f"Command: `{command}`. Machine: {info.get('cpus', '?')} cores, "
        f"{info.get('memory_gib', '?')} GiB, CPU only; Python {info.get('python', '?')}, "
        f"onnx {info.get('onnx', '?')}, onnxruntime {info.get('onnxruntime', '?')}.",
        "",
        "Arenas are ratios to the per-shape plan at the same point: worst / geometric mean over the "
        "sampled points (corners included).",
        "",
        "| model | box | points | pieces | plan s | range plan | upper bound | grow-only ascending | "
        "grow-only random | verified by execution |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in results:
        box = ", ".join(f"{k} {lo}:{hi}" + (f":{r['steps'][k]}" if k in r["steps"] else "")
                        for k, (lo, hi) in r["box"].items())
        v = r["verified"]
        ok = sum(1 for x in v if x["ok"])
        vtext = f"{ok}/{len(v)}" + (f" ({'; '.join(x['why'][:80] for x in v if not x['ok'])})"
                                    if ok < len(v) else "")
        lines.append(
            f"| {r['name']} | {box} | {len(r['rows'])} | {r['pieces']} | {r['seconds']:.2f} | "
            f"{r['range_max']:.4f} / {r['range_geo']:.4f} | {r['upper_max']:.2f} / {r['upper_geo']:.2f} | "
            f"{r['asc_geo']:.3f} | {r['rand_geo']:.3f} | {vtext} |"
        )
    lines.append("")
    for r in results:
        lines.append(f"![{r['name']}](range-{r['name']}.png)")
    lines.append("")
    for r in results:
        lines.append(f"<details><summary>{r['name']}: every point</summary>")
        lines.append("")
        lines.append("| point | range plan B | per-shape B | ratio | upper bound | grow-only (random) |")
        lines.append("|---|--:|--:|--:|--:|--:|")
        for row in r["rows"]:
            at = " ".join(f"{k}={v}" for k, v in row["point"].items())
            ratio = row["range"] / row["per_shape"] if row["per_shape"] else float("nan")
            lines.append(f"| {at} | {row['range']:,} | {row['per_shape']:,} | {ratio:.4f} | "
                         f"{row['upper']:,} | {row['grow_random']:,} |")
        lines.append("")
        vs = ", ".join(f"{' '.join(f'{k}={x}' for k, x in v['point'].items())} "
                       f"{'ok' if v['ok'] else 'FAILED'} ({v['seconds']:.1f} s)" for v in r["verified"])
        lines.append(f"Verified by execution at: {vs or 'not run'}.")
        lines.append("")
        lines.append("</details>")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=20, help="sampled points per model (corners included)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", action="append", default=[], help="model names to run (repeatable)")
    ap.add_argument("--no-execute", action="store_true", help="skip the verification by execution")
    ap.add_argument("--run-seconds", type=float, default=600.0,
                    help="longest whole-model onnxruntime run the verification may make")
    ap.add_argument("--work", default=str(ROOT / "build" / "bench_range"), help="folder for runnable copies")
    ap.add_argument("--out", default=str(DOC), help="the Markdown file whose table is replaced, or - to print")
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import replace_section

    from onnxmem.runtime import ort as runtime
    from onnxmem.zoo import machine_info, materialize

    runtime.RUN_SECONDS = args.run_seconds
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for name, fixture, box, _note, steps in MODELS:
        if args.only and name not in args.only:
            continue
        if fixture.startswith("build:"):
            path = built(fixture, work)
        else:
            path = materialize(ROOT / "models" / "zoo" / fixture, work, seed=args.seed)
        if fixture == "unet.onnx":
            path = batch_copy(path, path.with_name("unet_batch.onnx"))
        print(f"{name}: {path}", file=sys.stderr)
        result = measure(name, path, box, args.points, args.seed, not args.no_execute, steps)
        results.append(result)
        if args.out != "-":
            plot(result, Path(args.out).parent / f"range-{name}.png")
    command = "python bench/bench_range.py" + "".join(f" --only {o}" for o in args.only)
    text = table(results, machine_info(), command)
    if args.out == "-":
        print(text)
        return
    replace_section(Path(args.out), BEGIN, END, text)


if __name__ == "__main__":
    main()
