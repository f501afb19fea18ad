"""Plans safe under concurrent execution: arenas, bounds, onnxruntime's parallel peak, trials.

    python bench/bench_concurrency.py [--trials 100] [--threads 2,4] [--seq-trials 10] [--only NAME,...]

For each branchy model (the nine onnx-wheel models, the shipped models, the
RandWire, NASNet and transformer builders of ``onnxmem generate``, and the
branchy models of the zoo, filled with seeded weights under ``results/``):

* ``seq``: the arena of the default plan (``--concurrency sequential``);
* ``dag``: the arena of ``--concurrency dag``, its lower bound (the heaviest
  set of pairwise-concurrent tensors) and the ratios dag/seq and dag/bound;
* ``ort par``: onnxruntime's own activation peak with its parallel executor
  (``ORT_PARALLEL``, ``ORT_DISABLE_ALL``, as many inter-op threads as the
  first of ``--threads``; it is measured at the others too), counted over
  the same tensors as the arena (:func:`onnxmem.runtime.peak.comparable_peak`),
  and dag/ort par (the target is at most 1.00); ``ort thr``: the most
  threads its profiled kernels ran on at any of those counts (1: onnxruntime
  ran one schedule, one node at a time, and its peak is that schedule's);
  ``ort seq``: the same with its sequential executor;
* ``seq: rule 9``: pairs of the sequential plan that the static proof finds
  unordered by the graph; ``seq: failed``: concurrent trials of the
  sequential plan that clobbered (of ``--seq-trials``, 2 threads);
* ``dag failed @T``: concurrent trials of the dag plan that failed (of
  ``--trials``), at each thread count of ``--threads`` (one
  :class:`onnxmem.runtime.concurrent.ConcurrentRun` serves every thread count: its
  sessions and reference are made once). A model with If/Loop/Scan bodies
  gets no concurrent trials (they run graphs without bodies): each plan runs
  once in its own order instead (``in order: ok`` or ``FAILED``), as
  ``verify`` does.

Prints a Markdown table for docs/concurrency.md, one row as each model
finishes (flushed, so a run cut off leaves its measured rows), then the
totals: failed trials, and the models where the dag arena is above
onnxruntime's parallel peak, split into those where the dag lower bound is
above it too (no plan that holds under every schedule can reach the peak of
the one schedule onnxruntime ran) and those where a better plan could.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import onnx

from onnxmem.model import load_model
from onnxmem.model.generate import nasnet, randwire, transformer
from onnxmem.planning.pipeline import PlanOptions, plan_loaded
from onnxmem.proof.plan import prove_plan
from onnxmem.runtime.arena import ExecutionOptions, execute_plan
from onnxmem.runtime.concurrent import ConcurrentOptions, ConcurrentRun, run_concurrent
from onnxmem.runtime.peak import comparable_peak, ort_peak
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


def in_order(planned: Any, model: onnx.ModelProto, path: Path) -> str:
    """One run of a plan in its own order (a model with bodies): ``in order: ok`` or ``FAILED: ...``."""
    ex = execute_plan(planned.plan, model, planned.view, model_path=path)
    if ex.findings or not all(c.ok for c in ex.outputs):
        return f"FAILED: {ex.findings[0] if ex.findings else 'an output differs'}"
    return "in order: ok"


def onnxruntime_peaks(model: onnx.ModelProto, planned: Any, path: Path, threads: list[int]) -> dict[str, Any]:
    """onnxruntime's peaks for the ``ort`` columns: sequential mode, and parallel mode at each
    thread count (the table shows the first; the totals say whether the others differ)."""
    seq = ort_peak(model, planned.view, model_path=path)
    par = [ort_peak(model, planned.view, model_path=path, execution_mode="parallel", threads=t) for t in threads]
    return {"seq": comparable_peak(seq.peak, planned.view, planned.plan.io),
            "par": comparable_peak(par[0].peak, planned.view, planned.plan.io),
            "threads_seen": max(p.threads_seen for p in par),
            "same_at_every_count": len({p.peak for p in par}) == 1}


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
    print(f"| model | nodes | seq | dag | dag bound | dag/seq | dag/bound | ort seq | ort par | ort thr | dag/ort par | "
          f"seq: rule 9 | seq: failed | {fails} | s |", flush=True)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(threads) + "---:|",
          flush=True)
    total_fail = total_trials = rows = one_thread = same_counts = 0
    par_vs_seq = {"=": 0, "<": 0, ">": 0}
    over_ort: list[str] = []
    bound_over_ort: list[str] = []
    full_rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="onnxmem-bench-concurrency-") as tmpdir:
        for name, path, dims in models(Path(tmpdir)):
            if only and name not in only:
                continue
            t0 = time.perf_counter()
            model = load_model(path)
            seq = plan_loaded(model, path, PlanOptions(dims=dims))
            dag = plan_loaded(model, path, PlanOptions(dims=dims, concurrency="dag"))
            peaks = onnxruntime_peaks(model, dag, path, threads)
            ort = peaks["par"]
            one_thread += peaks["threads_seen"] == 1
            same_counts += peaks["same_at_every_count"]
            if ort is not None and peaks["seq"] is not None:
                par_vs_seq["=" if ort == peaks["seq"] else "<" if ort < peaks["seq"] else ">"] += 1
            pairs = len(prove_plan(seq.plan, seq.view, concurrency="dag"))
            if dag.view.bodies:  # concurrent trials run graphs without bodies: one run in the plan's order
                results = [in_order(p, model, path) for p in (seq, dag)]
                total_fail += sum(1 for r in results if r.startswith("FAILED"))
                seq_cell, cells, full = results[0], [results[1]] * len(threads), False
            else:
                seq_run = run_concurrent(seq.plan, model, seq.view, model_path=path,
                                         concurrent=ConcurrentOptions(trials=args.seq_trials, threads=2))
                seq_cell, cells, full = f"{seq_run.failures}/{args.seq_trials}", [], True
                dag_run = ConcurrentRun(dag.plan, model, dag.view, ExecutionOptions(), ConcurrentOptions(), path)
                for t in threads:
                    n = args.trials
                    if args.max_trial_seconds is not None:  # what one trial costs: every node run once
                        per_trial = max(seq_run.reference_seconds, seq_run.seconds / len(seq_run.trials))
                        n = max(1, min(n, int(args.trials * args.max_trial_seconds / max(per_trial, 1e-9))))
                    ex = dag_run.run_trials(n, t)
                    total_fail += ex.failures
                    total_trials += n
                    full = full and n >= args.trials
                    cells.append(f"{ex.failures}/{n}")
                    for trial in ex.trials:
                        if not trial.ok:
                            print(f"<!-- FAILED {name} @{t} trial {trial.index} (schedule seed "
                                  f"'{dag_run.opts.seed}:{trial.index}'): {trial.finding} -->", flush=True)
            s, d, lb = seq.plan.arena_size, dag.plan.arena_size, dag.plan.lower_bound
            if ort and d > ort:
                (bound_over_ort if lb > ort else over_ort).append(name)
            rows += 1
            if full:
                full_rows.append(name)
            print(f"| {name} | {len(dag.plan.order)} | {s:,} | {d:,} | {lb:,} | {d / s:.2f} | "
                  f"{(d / lb if lb else 1):.2f} | {peaks['seq'] or 0:,} | {ort or 0:,} | {peaks['threads_seen']} | "
                  f"{f'{d / ort:.2f}' if ort else '-'} | {pairs} | {seq_cell} | {' | '.join(cells)} | "
                  f"{time.perf_counter() - t0:.1f} |", flush=True)
    print(f"\ndag trials failed: {total_fail} of {total_trials}; {len(full_rows)} of {rows} model(s) ran all "
          f"{args.trials} trials at every thread count (a model with bodies runs each plan once in its order)")
    print(f"onnxruntime's parallel mode ({', '.join(map(str, threads))} inter-op threads) ran its kernels on one "
          f"thread on {one_thread} of {rows} model(s), with the same peak at every thread count on {same_counts}; "
          f"its peak equals its sequential-mode peak on {par_vs_seq['='] }, is below it on {par_vs_seq['<']}, "
          f"above on {par_vs_seq['>']}")
    print(f"dag arena above onnxruntime's parallel peak on {len(bound_over_ort) + len(over_ort)} model(s); "
          f"on {len(bound_over_ort)} the dag lower bound is above it too, so no plan that holds under every "
          f"schedule can reach it{': ' + ', '.join(bound_over_ort) if bound_over_ort else ''}; on "
          f"{len(over_ort)} a better dag plan could{': ' + ', '.join(over_ort) if over_ort else ''}")
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
