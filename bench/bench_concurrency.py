"""Plans safe under concurrent execution: arenas, bounds, onnxruntime's parallel peak, trials.

    python bench/bench_concurrency.py [--trials 100] [--threads 2,4] [--seq-trials 10] [--only NAME,...]

For each branchy model (the nine onnx-wheel models, the shipped models, the
RandWire, NASNet and transformer builders of ``onnxmem generate``, and the
branchy models of the zoo, filled with seeded weights under ``results/``):

* ``seq``: the arena of the default plan (``--concurrency sequential``);
* ``dag``: the arena of ``--concurrency dag``, its lower bound (the heaviest
  set of pairwise-concurrent tensors) and the ratios dag/seq and dag/bound;
* ``ort par``: onnxruntime's own activation peak with its parallel executor
  (``ORT_PARALLEL``, 2 inter-op threads, ``ORT_DISABLE_ALL``), counted over
  the same tensors as the arena (:func:`onnxmem.ortpeak.comparable_peak`),
  and dag/ort par (the target is at most 1.00);
* ``seq: rule 9``: pairs of the sequential plan that the static proof finds
  unordered by the graph; ``seq: failed``: concurrent trials of the
  sequential plan that clobbered (of ``--seq-trials``, 2 threads);
* ``dag failed @T``: concurrent trials of the dag plan that failed (of
  ``--trials``), at each thread count of ``--threads``.

Prints a Markdown table (and the exact trial counts) for docs/concurrency.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import onnx

from onnxmem.concurrent import ConcurrentOptions, run_concurrent
from onnxmem.generate import nasnet, randwire, transformer
from onnxmem.model import load_model
from onnxmem.ortpeak import comparable_peak, ort_peak
from onnxmem.pipeline import PlanOptions, plan_loaded
from onnxmem.proof import prove_plan
from onnxmem.zoo.fixtures import materialize

ROOT = Path(__file__).resolve().parent.parent
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ZOO = ("inception_v3", "densenet121", "nasnetalarge", "randwire_ws", "bert_base", "gpt2", "vit_base")
SHIPPED = {"inception_block": {}, "resnet_cnn": {}, "transformer_block": {"batch": 1, "seq": 128},
           "control_flow": {}}


def models(tmp: Path) -> Iterator[tuple[str, Path, dict[str, int]]]:
    for p in sorted(LIGHT.glob("light_*.onnx")):
        yield p.stem.replace("light_", ""), p, {}
    for name, dims in SHIPPED.items():
        yield name, ROOT / "models" / f"{name}.onnx", dims
    built = {"gen_randwire_32": randwire(32, "ws", 0), "gen_randwire_64_er": randwire(64, "er", 1),
             "gen_nasnet_3": nasnet(3, 0), "gen_transformer_4": transformer(4, 0)}
    for name, model in built.items():
        model.ir_version = min(model.ir_version, 10)
        path = tmp / f"{name}.onnx"
        onnx.save_model(model, str(path))
        yield name, path, {}
    catalog = {m["name"]: m for m in json.loads((ROOT / "models/zoo/catalog.json").read_text())["models"]}
    for name in ZOO:
        path = materialize(ROOT / "models/zoo" / catalog[name]["file"], ROOT / "results/zoo-fixtures")
        yield f"zoo_{name}", path, dict(catalog[name]["dims"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100, help="concurrent trials of each dag plan, per thread count")
    ap.add_argument("--threads", default="2,4", help="thread counts, comma-separated")
    ap.add_argument("--seq-trials", type=int, default=10, help="concurrent trials of each sequential plan")
    ap.add_argument("--only", default="", help="model names, comma-separated (default: all)")
    ap.add_argument("--max-trial-seconds", type=float, default=None,
                    help="fewer dag trials for a model whose trials take longer than this: --trials x this / the "
                         "seconds of the reference run of every node, sessions included (the count run is printed)")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",") if t]
    only = {n for n in args.only.split(",") if n}
    print(f"machine: {platform.machine()}, {platform.system()}, python {platform.python_version()}, "
          f"onnx {onnx.__version__}; trials {args.trials} per thread count {threads}, "
          f"sequential-plan trials {args.seq_trials} (2 threads)\n")
    fails = " | ".join(f"dag failed @{t}" for t in threads)
    print(f"| model | nodes | seq | dag | dag bound | dag/seq | dag/bound | ort par | dag/ort par | "
          f"seq: rule 9 | seq: failed | {fails} | s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(threads) + "---:|")
    total_fail = 0
    over_ort = []
    with tempfile.TemporaryDirectory(prefix="onnxmem-bench-concurrency-") as tmpdir:
        for name, path, dims in models(Path(tmpdir)):
            if only and name not in only:
                continue
            t0 = time.perf_counter()
            model = load_model(path)
            seq = plan_loaded(model, path, PlanOptions(dims=dims))
            dag = plan_loaded(model, path, PlanOptions(dims=dims, concurrency="dag"))
            peak = ort_peak(model, dag.view, model_path=path, execution_mode="parallel", threads=2)
            ort = comparable_peak(peak.peak, dag.view, dag.plan.io)
            pairs = len(prove_plan(seq.plan, seq.view, concurrency="dag"))
            seq_run = run_concurrent(seq.plan, model, seq.view, model_path=path,
                                     concurrent=ConcurrentOptions(trials=args.seq_trials, threads=2))
            cells = []
            for t in threads:
                n = args.trials
                if args.max_trial_seconds is not None:  # what one trial costs: every node run once
                    per_trial = max(seq_run.reference_seconds, seq_run.seconds / len(seq_run.trials))
                    n = max(1, min(n, int(args.trials * args.max_trial_seconds / max(per_trial, 1e-9))))
                ex = run_concurrent(dag.plan, model, dag.view, model_path=path,
                                    concurrent=ConcurrentOptions(trials=n, threads=t))
                total_fail += ex.failures
                cells.append(f"{ex.failures}/{n}")
                if ex.failures:
                    print(f"<!-- {name} @{t}: {ex.findings[0]} -->")
            s, d, lb = seq.plan.arena_size, dag.plan.arena_size, dag.plan.lower_bound
            ratio_ort = f"{d / ort:.2f}" if ort else "-"
            if ort and d > ort:
                over_ort.append(name)
            print(f"| {name} | {len(dag.plan.order)} | {s:,} | {d:,} | {lb:,} | {d / s:.2f} | "
                  f"{(d / lb if lb else 1):.2f} | {ort or 0:,} | {ratio_ort} | {pairs} | "
                  f"{seq_run.failures}/{args.seq_trials} | {' | '.join(cells)} | {time.perf_counter() - t0:.1f} |",
                  flush=True)
    print(f"\ndag trials failed: {total_fail}; dag arena above onnxruntime's parallel peak on "
          f"{len(over_ort)} model(s){': ' + ', '.join(over_ort) if over_ort else ''}")
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
