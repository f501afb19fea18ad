"""Training benchmark: onnxmem's arena for each training graph of ``models/training``, beside its anchors.

Runs in the training environment (``make training-env``; ``make bench-training``): it needs
onnxruntime-training for the gradient kernels and torch for PyTorch's eager step. For each
model of ``models/training/catalog.json`` it measures:

* **arena**: ``onnxmem plan`` with its defaults (memory-aware order, views and in-place
  outputs, exact solver) on ``NAME.train.onnx``, and the plan's time (best of ``--repeat``);
* **max-live, no sharing**: the peak of live bytes in the file order with every tensor in a
  buffer of its own (no views, no in-place outputs): what any allocator that frees by
  liveness alone, in file order, must at least hold;
* **memonger-style**: Caffe2 memonger's greedy blob sharing, reimplemented here
  (:func:`memonger`): ops in file order, a tensor's blob goes back to the pool after its
  last reader ran, each new output takes the smallest free blob at least its size (else
  the largest free blob, grown), no reordering, no in-place; the sum of the blobs;
* **PyTorch eager**: the same architecture (``tools/build_training.py``), the same batch
  and frozen parameters, one training step (forward, cross-entropy, backward) on CPU:
  the peak of the bytes allocated during the step (torch profiler memory events) plus the
  input batch and labels (:func:`torch_step_peak`);
* **verified**: the plan proven statically and run node by node in one arena on CPU
  (:mod:`onnxmem.runtime.training`): loss and every gradient buffer bit for bit; where
  onnxruntime has no CPU kernel for an op, the row says which and the plan is proven
  statically only;
* **train + eval**: ``NAME.eval.onnx`` planned too, then both run one after the other in
  one arena as large as the larger plan.

Every arena counts the graph inputs (data and labels) and outputs (loss, flags), and never
the parameters, gradient buffers or optimizer state, which are the caller's. All sizes are
at 64-byte alignment. Writes ``docs/training.md`` (``--out``) and prints the table.

    .venv-training/bin/python bench/bench_training.py
    .venv-training/bin/python bench/bench_training.py --only mlp bert --no-run
    .venv-training/bin/python bench/bench_training.py --dynamo --only bert --variant dynamo-parameters-gelu

Every table has onnxruntime-training's own step (:func:`ort_step_peak`); the TorchScript set's
whole checkpoints are generated into ``training/build/NAME`` when missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from onnxmem.analysis.liveness import build_liveness  # noqa: E402
from onnxmem.core.errors import RuntimeBackendError  # noqa: E402
from onnxmem.core.fileio import write_bytes_atomic  # noqa: E402
from onnxmem.core.problem import align_up, lower_bound  # noqa: E402
from onnxmem.graph import GraphView  # noqa: E402
from onnxmem.model import load_model  # noqa: E402
from onnxmem.planning.pipeline import Planned, PlanOptions, plan_loaded  # noqa: E402
from onnxmem.runtime.training import execute_in_one_arena, missing_kernel  # noqa: E402
from onnxmem.scheduling import stable_topological_order  # noqa: E402
from onnxmem.zoo.fixtures import fill_weights  # noqa: E402

TRAINING = ROOT / "models" / "training"
DYNAMO = TRAINING / "dynamo"
BUILD = ROOT / "training" / "build"
DYNAMO_BUILD = BUILD / "dynamo"
ALIGNMENT = 64


# --------------------------------------------------------------------------- baselines


def memonger(view: GraphView, order: Sequence[int], alignment: int = ALIGNMENT) -> int:
    """Caffe2 memonger's greedy blob sharing (sizes known), in ``order``: the total bytes of
    the blobs it allocates. Graph outputs keep their blob; nothing is shared in place."""
    step = {op: k for k, op in enumerate(order)}
    last: dict[str, int] = {}
    for k, op in enumerate(order):
        for name in view.ops[op].reads:
            last[name] = k
    outputs = set(view.outputs)
    blobs: list[int] = []  # blob sizes
    free: list[int] = []  # blob indices in the pool
    blob_of: dict[str, int] = {}
    dying: dict[int, list[str]] = {}

    def take(size: int) -> int:
        fits = [b for b in free if blobs[b] >= size]
        if fits:
            b = min(fits, key=lambda i: blobs[i])
        elif free:
            b = max(free, key=lambda i: blobs[i])
            blobs[b] = size
        else:
            blobs.append(size)
            return len(blobs) - 1
        free.remove(b)
        return b

    arena = [t for t in view.tensors.values() if t.kind != "weight"]
    for t in arena:
        if t.producer is None:  # graph inputs: a blob from the start
            blob_of[t.name] = take(align_up(t.size, alignment))
    for t in arena:
        if t.name not in outputs:
            born = -1 if t.producer is None else step[t.producer]
            dying.setdefault(last.get(t.name, born), []).append(t.name)
    for k, op in enumerate(order):
        for o in view.ops[op].outputs:
            if o and o in view.tensors and view.tensors[o].kind != "weight":
                blob_of[o] = take(align_up(view.tensors[o].size, alignment))
        for name in dying.get(k, ()):
            free.append(blob_of[name])
    return sum(blobs)


def max_live_no_sharing(view: GraphView, order: Sequence[int], alignment: int = ALIGNMENT) -> int:
    """The peak of live bytes in ``order`` with every tensor its own buffer."""
    return lower_bound(build_liveness(view, order, None, alignment=alignment).problem)


def torch_step_peak(name: str, seed: int = 0) -> int:
    """Bytes PyTorch eager holds at its peak during one training step on CPU beyond the
    parameters and their ``.grad``: what it allocates during the step at its peak, plus
    the step's input batch and labels (allocated before the step and held through it, as
    onnxmem's arena holds the graph inputs).

    The module is ``tools/build_training.py``'s, in training mode, with the same frozen
    parameters (``requires_grad=False``); the step is forward, mean cross-entropy, backward.
    One unmeasured step first allocates every ``.grad`` (kept, zeroed, as onnxruntime's
    gradient buffers are kept); the measured step runs under ``torch.profiler`` with
    ``profile_memory=True``, which records every allocation (positive bytes) and free
    (negative) on the CPU allocator as a ``[memory]`` event: the peak of their running sum,
    in time order, is the answer (it ends at zero: the step frees all it allocated).
    """
    import build_training as builder
    from torch.profiler import ProfilerActivity, profile

    torch = builder.import_torch()
    arch = {a.name: a for a in builder.ARCHS}[name]
    torch.manual_seed(seed)
    module = arch.build()
    module.train()
    for pname, p in module.named_parameters():
        p.requires_grad_(not (arch.frozen and pname.startswith(arch.frozen)))
    args = arch.inputs()
    labels = torch.randint(0, arch.classes, arch.labels)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        loss_fn(module(*args), labels).backward()

    step()
    for p in module.parameters():
        if p.grad is not None:
            p.grad.zero_()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    total = peak = 0
    for _t, nbytes in events:
        total += nbytes
        peak = max(peak, total)
    inputs = sum(t.numel() * t.element_size() for t in (*args, labels))
    return peak + inputs


# --------------------------------------------------------------------------- one model


def plan_best(model: onnx.ModelProto, path: Path, repeat: int) -> tuple[Planned, float]:
    best: Planned | None = None
    seconds = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        planned = plan_loaded(model, path, PlanOptions(alignment=ALIGNMENT))
        spent = time.perf_counter() - t0
        if spent < seconds:
            best, seconds = planned, spent
    assert best is not None
    return best, seconds


def filled(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    fill_weights(out)
    return out


def step_feeds(name: str, entry: dict[str, Any], seed: int = 0) -> list[Any]:
    """Seeded inputs of one training step of ``name`` (its catalogue ``entry``), as
    ``Module.__call__`` takes them: the user inputs (token ids in range, or normal floats), then
    the labels."""
    import build_training as builder
    import numpy as np

    arch = {a.name: a for a in builder.ARCHS}[name]
    rng = np.random.default_rng(seed)
    feeds = [rng.integers(0, 100, shape).astype(np.int64) if arch.input_names == ("input_ids",)
             else rng.standard_normal(shape).astype(np.float32) for shape in entry["inputs"].values()]
    feeds.append(rng.integers(0, arch.classes, entry["labels"]).astype(np.int64))
    return feeds


def ort_step_peak(name: str, entry: dict[str, Any], folder: Path, seed: int = 0, runs: int = 3) -> int | None:
    """onnxruntime-training's own peak over one training step of ``name``
    (:func:`onnxmem.runtime.footprint.training_step_peak`: the resident growth of a fresh process
    over its first step, after the checkpoint is loaded and the Module made; the median of ``runs``
    fresh processes, since the resident growth of one varies by some pages), on the generator's
    artifacts in ``folder`` (its whole checkpoint: ``training/build/dynamo/NAME`` for the dynamo
    set, ``make training-models``; ``training/build/NAME`` for the TorchScript set, generated by
    :func:`measure` when missing), plus the input batch and labels as :func:`torch_step_peak`
    counts them; ``None`` without those artifacts or where onnxruntime has no CPU kernel for one
    of the graph's ops."""
    from onnxmem.runtime.footprint import training_step_peak

    if not (folder / "checkpoint").is_file() or not (folder / "training_model.onnx").is_file():
        return None
    feeds = step_feeds(name, entry, seed)
    peaks = []
    for _ in range(runs):  # each in a fresh process; the median
        try:
            peaks.append(training_step_peak(folder / "training_model.onnx", folder / "checkpoint", feeds).peak)
        except RuntimeBackendError as exc:  # no CPU kernel for an op (the U-Net's ConvTransposeGrad): no figure
            if missing_kernel(str(exc)) is None:
                raise
            return None
    return sorted(peaks)[len(peaks) // 2] + sum(int(f.nbytes) for f in feeds)


def measure(name: str, entry: dict[str, Any], run: bool, repeat: int, dynamo: bool = False,
            variant: str | None = None) -> dict[str, Any]:
    """One row. ``dynamo``: the dynamo set's fixtures; with ``variant``, the artifacts of
    ``tools/build_training.py --dynamo`` with other choices, under ``training/build/VARIANT/NAME``
    (``build_training.variant``: ``dynamo-parameters``, ``dynamo-parameters-gelu``).
    The TorchScript set's whole checkpoint is generated into ``training/build/NAME`` when missing
    (``build_training.build_artifacts``: the artifacts only, no fixture is written)."""
    import build_training as builder

    row: dict[str, Any] = {"model": name, "architecture": entry["architecture"]}
    train_path, eval_path = TRAINING / f"{name}.train.onnx", TRAINING / f"{name}.eval.onnx"
    folder = BUILD / name
    if not dynamo and not (folder / "checkpoint").is_file():
        builder.build_artifacts({a.name: a for a in builder.ARCHS}[name])
    if dynamo:
        folder = (BUILD / variant if variant else DYNAMO_BUILD) / name
        base = folder if variant else DYNAMO / name
        train_path, eval_path = base / "training_model.onnx", base / "eval_model.onnx"
        script = TRAINING / f"{name}.train.onnx"  # the TorchScript export of the same module, beside it
        if script.is_file():
            planned, _ = plan_best(load_model(script), script, 1)
            row.update(script_nodes=len(planned.view.ops), script_arena=planned.plan.arena_size)
    row["ort"] = ort_step_peak(name, entry, folder)
    train_model, eval_model = load_model(train_path), load_model(eval_path)
    train, seconds = plan_best(train_model, train_path, repeat)
    ev, _ = plan_best(eval_model, eval_path, 1)
    file_order = stable_topological_order(train.view)
    row.update(
        nodes=len(train.view.ops), arena=train.plan.arena_size, lower_bound=train.plan.lower_bound,
        plan_seconds=round(seconds, 3), no_sharing=max_live_no_sharing(train.view, file_order),
        memonger=memonger(train.view, file_order), eval_arena=ev.plan.arena_size,
        outside=sum(r["size"] for r in train.plan.extra.get("outside", ())),
    )
    row["torch"] = torch_step_peak(name)
    if not run:
        row["verified"] = "static"
        return row
    try:
        size, results = execute_in_one_arena([
            (train.plan, filled(train_model), train.view),
            (ev.plan, filled(eval_model), ev.view),
        ])
    except RuntimeBackendError as exc:
        op = missing_kernel(str(exc))
        if op is None:
            raise
        row.update(verified=f"static only: no CPU kernel for {op}", one_arena=None)
        return row
    bad = [f.message for r in results for f in r.findings]
    identical = all(c.identical for r in results for c in r.outputs)
    stand_ins = sorted({op for r in results for op in r.stand_ins})
    ok = "yes" + (f" ({', '.join(stand_ins)} run as standard ops: no CPU kernel)" if stand_ins else "")
    row.update(
        verified=ok if not bad and identical else f"FAILED: {bad[0] if bad else 'outputs differ'}",
        gradients=sum(1 for c in results[0].outputs if c.name.endswith(".accumulation.buffer")),
        one_arena=size,
    )
    return row


# --------------------------------------------------------------------------- report


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(rows: list[dict[str, Any]], script: bool = False) -> str:
    """The Markdown table, with onnxruntime-training's own step peak; ``script``: with the
    TorchScript export's nodes and arena beside each row (the dynamo set)."""
    ort = True
    head = ("| model | " + ("TorchScript export: nodes, arena MiB | " if script else "")
            + "nodes | arena MiB | max-live, no sharing | memonger-style | PyTorch eager step | "
            + ("onnxruntime-training step | " if ort else "")
            + "arena / memonger | arena / PyTorch | " + ("arena / onnxruntime | " if ort else "")
            + "plan s | verified in one arena | train + eval arena |")
    lines = [head, "|" + "---|" * (14 if script else 13)]
    for r in rows:
        theirs = (f"{_mib(r['ort'])} | " if ort else "")
        export = (f"{r.get('script_nodes', '-')}, {_mib(r.get('script_arena'))} | " if script else "")
        ratio = (f"{r['arena'] / r['ort']:.3f} | " if r.get("ort") else "- | ") if ort else ""
        lines.append(
            f"| {r['model']} | {export}{r['nodes']} | {_mib(r['arena'])} | {_mib(r['no_sharing'])} | {_mib(r['memonger'])} | "
            f"{_mib(r['torch'])} | {theirs}{r['arena'] / r['memonger']:.3f} | {r['arena'] / r['torch']:.3f} | "
            f"{ratio}{r['plan_seconds']:.2f} | {r['verified']} | "
            f"{_mib(r.get('one_arena'))} (train {_mib(r['arena'])}, eval {_mib(r['eval_arena'])}) |"
        )
    with_ort = [r['arena'] / r['ort'] for r in rows if r.get("ort")]
    lines.append(
        f"| geomean | | | | | | {'| ' if script else ''}{'| ' if ort else ''}{_geomean([r['arena'] / r['memonger'] for r in rows]):.3f} | "
        f"{_geomean([r['arena'] / r['torch'] for r in rows]):.3f} | "
        + (f"{_geomean(with_ort):.3f} | " if ort else "") + "| | |"
    )
    return "\n".join(lines)


def machine() -> str:
    from importlib import metadata

    def v(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "-"

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores, {mem:.0f} GiB, CPU only; Python {platform.python_version()}, "
            f"onnx {v('onnx')}, onnxruntime-training-cpu {v('onnxruntime-training-cpu')}, torch {v('torch')}, "
            f"numpy {v('numpy')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="model names (default: the whole catalogue)")
    p.add_argument("--no-run", action="store_true", help="plan and measure the anchors; run nothing in the arena")
    p.add_argument("--repeat", type=int, default=3, help="plans per model; the fastest time is reported")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "training.md", help="the Markdown report")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    p.add_argument("--dynamo", action="store_true",
                   help="the dynamo set (models/training/dynamo, tools/build_training.py --dynamo), with "
                        "onnxruntime-training's own step peak")
    p.add_argument("--variant", default=None,
                   help="with --dynamo: the artifacts under training/build/VARIANT (tools/build_training.py "
                        "--dynamo --frozen parameters [--fusable-gelu]: dynamo-parameters, "
                        "dynamo-parameters-gelu), in a table of their own")
    args = p.parse_args(argv)
    catalog = json.loads(((DYNAMO if args.dynamo else TRAINING) / "catalog.json").read_text())
    names = [n for n in catalog if (args.only is None or n in args.only) and "refused" not in catalog[n]]
    rows = []
    for name in names:
        if args.variant and not (BUILD / args.variant / name / "training_model.onnx").is_file():
            continue
        row = measure(name, catalog[name], not args.no_run, args.repeat, args.dynamo, args.variant)
        rows.append(row)
        print(f"{name:14} arena {_mib(row['arena'])} MiB, memonger {_mib(row['memonger'])}, torch "
              f"{_mib(row['torch'])}, onnxruntime-training {_mib(row['ort'])}"
              + f", plan {row['plan_seconds']:.2f} s, verified: {row['verified']}", flush=True)
    text = table(rows, script=args.dynamo)
    print(text)
    if args.json is not None:
        write_bytes_atomic(args.json, (json.dumps(rows, indent=1) + "\n").encode())
    doc = args.out.read_text() if args.out.is_file() else ""
    marker = f"bench-training-{args.variant or 'dynamo'}" if args.dynamo else "bench-training"
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    block = f"{begin}\nMachine: {machine()}.\n\n{text}\n{end}"
    if begin in doc and end in doc:
        doc = doc[: doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc + ("\n" if doc else "") + block + "\n"
    write_bytes_atomic(args.out, doc.encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
