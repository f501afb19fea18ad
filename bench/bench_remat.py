#!/usr/bin/env python
"""Recomputation benchmark: writes the tables of docs/remat.md (docs/remat-tables.md) and its frontier plots.

Usage::

    python bench/bench_remat.py              # every table and plot (about 15 minutes on 2 cores)
    python bench/bench_remat.py --only exact large   # these tables; the others kept as --out has them

Tables:

* ``budget``: ``plan --budget`` on the training-step graphs (forward +
  backward, plain ops, :mod:`onnxmem.remat.training`) at 0.5x their
  unbudgeted arena, and on the U-Net and DenseNet-121 inference graphs; each
  rewritten model is checked by ``onnx.checker``, run in one arena and
  compared with the original model's run (``verify --original``);
* ``densenet``: the same on the onnx wheel's DenseNet-121 at budgets from
  0.99x down to where nothing fits, with each algorithm;
* ``exact``: the exact algorithm on graphs of at most 100 nodes with 60 s,
  and each heuristic's extra compute against it where it proves optimality;
* ``large``: each heuristic on a 2,000-node training graph;
* ``frontier``: arena against extra compute over 0.9x .. 0.3x budgets, per
  algorithm (``plan --budget-sweep``), drawn to docs/remat-*.png.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from onnxmem.core.errors import OnnxmemError  # noqa: E402
from onnxmem.core.fileio import OutputSet  # noqa: E402
from onnxmem.planning.pipeline import PlanOptions, plan_loaded  # noqa: E402
from onnxmem.remat import RematOptions, RematProblem, build_problem, choose, simulate  # noqa: E402
from onnxmem.remat.budget import plan_with_budget, plot_sweep, sweep  # noqa: E402
from onnxmem.remat.check import compare_with_original  # noqa: E402
from onnxmem.remat.cost import flops_costs  # noqa: E402
from onnxmem.remat.training import train_encoder, train_mlp, train_mobilenet, train_resnet  # noqa: E402
from onnxmem.runtime.arena import ExecutionOptions  # noqa: E402
from onnxmem.zoo.fixtures import materialize  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
DENSENET = LIGHT / "light_densenet121.onnx"

#: the training-step graphs of the budget table (name, builder)
TRAINING = {
    "resnet50-style (train)": lambda: train_resnet(8, 0, batch=2, channels=64, spatial=32),
    "mobilenetv2-style (train)": lambda: train_mobilenet(8, 0, batch=2, channels=16, spatial=32),
    "bert-style encoder (train)": lambda: train_encoder(4, 0, seq=256, dim=64),
    "mlp (train)": lambda: train_mlp(8, 0, batch=1024, width=64),
}


def _save(model: onnx.ModelProto, folder: str, name: str) -> Path:
    path = Path(folder) / f"{name}.onnx"
    onnx.save(model, path)
    return path


BUDGET_HEAD = ["| model | nodes | arena without a budget | budget | arena | extra FLOPs | algorithm | checker, "
               "run, outputs vs original | time |", "|---|---:|---:|---:|---:|---:|---|---|---:|"]


def budget_row(name: str, path: Path, factor: float, algorithm: str, folder: str) -> str:
    """One row: ``plan --budget factor`` of the model at ``path`` with ``algorithm``; the rewrite
    saved, checked by ``onnx.checker``, run in one arena and compared with the original's run."""
    path = materialize(path, folder)  # the zoo's weight-free copies get random weights
    model = onnx.load(str(path), load_external_data=False)
    t0 = time.perf_counter()
    try:
        got = plan_with_budget(model, path, PlanOptions(), factor=factor, algorithm=algorithm, timeout=30.0)
    except OnnxmemError as exc:
        secs = time.perf_counter() - t0
        return (f"| {name} | {len(model.graph.node)} | - | {factor:g}x | no fit | - | {algorithm} | "
                f"{str(exc)[:220]} | {secs:.1f} s |")
    secs = time.perf_counter() - t0
    base = got.original.plan.arena_size
    check = "unchanged"
    if got.rewritten is not None:
        out = Path(folder) / f"{path.stem}-rewritten.onnx"  # the run's folder: beside what materialize wrote
        onnx.save(got.rewritten, out)
        onnx.checker.check_model(str(out))
        cmp = compare_with_original(got.rewritten, got.planned.plan, got.planned.view, model,
                                    rewritten_path=path, original_path=path, options=ExecutionOptions())
        ok = not cmp.execution.findings and cmp.identical
        check = f"ok, {len(cmp.outputs)} outputs identical" if ok else "MISMATCH"
    status = got.choice.status if got.choice else "-"
    used = got.choice.algorithm if got.choice else "-"
    if used not in (algorithm, "-"):  # no fit of its own: the rewrite with the smallest arena
        used = f"{algorithm}: {used}"
    return (f"| {name} | {len(model.graph.node)} | {base / 2**20:.2f} MiB | {factor:g}x | "
            f"{got.planned.plan.arena_size / 2**20:.2f} MiB ({got.planned.plan.arena_size / base:.3f}x) | "
            f"{got.extra_percent:.1f}% | {used} ({status}) | "
            f"{check} | {secs:.1f} s |")


def budget_table(folder: str) -> list[str]:
    rows = list(BUDGET_HEAD)
    cases: list[tuple[str, Path, float, str]] = []
    for name, build in TRAINING.items():
        cases.append((name, _save(build(), folder, name.split()[0]), 0.5, "auto"))
    cases.append(("U-Net (inference, models/zoo/unet.onnx)", ROOT / "models" / "zoo" / "unet.onnx", 0.7, "auto"))
    cases.append(("U-Net (inference)", ROOT / "models" / "zoo" / "unet.onnx", 0.9, "auto"))
    cases.append(("DenseNet-121 (inference, onnx wheel)", DENSENET, 0.95, "auto"))
    for name, path, factor, algorithm in cases:
        rows.append(budget_row(name, path, factor, algorithm, folder))
        print(rows[-1], flush=True)
    return rows


#: the DenseNet-121 frontier: budgets down to where nothing fits, and the algorithms tried at each
DENSENET_FACTORS = (0.99, 0.95, 0.945, 0.94)
DENSENET_ALGORITHMS = ("auto", "greedy", "mirror", "sqrt")


def densenet_table(folder: str) -> list[str]:
    rows = list(BUDGET_HEAD)
    for factor in DENSENET_FACTORS:
        for algorithm in DENSENET_ALGORITHMS:
            rows.append(budget_row("DenseNet-121", DENSENET, factor, algorithm, folder))
            print(rows[-1], flush=True)
    return rows


#: the graphs of the exact table (name, builder): at most 100 nodes each
EXACT_GRAPHS = {
    "mlp 2 layers": lambda: train_mlp(2, 0, batch=512, width=32),
    "mlp 3 layers": lambda: train_mlp(3, 1, batch=512, width=32),
    "resnet 1 block": lambda: train_resnet(1, 0, batch=2, channels=32, spatial=16),
    "resnet 2 blocks": lambda: train_resnet(2, 0, batch=2, channels=32, spatial=16),
    "mobilenet 2 blocks": lambda: train_mobilenet(2, 0, batch=2, channels=8, spatial=16),
    "encoder 1 layer": lambda: train_encoder(1, 0, seq=128, dim=16),
}

#: the exact table's budgets: this far from the problem's floor to its peak without recomputation
EXACT_FRACTIONS = (0.5, 0.75)


def exact_problem(model: onnx.ModelProto, path: Path) -> RematProblem:
    """The exact table's problem of ``model`` (saved at ``path``): its file order, FLOPs costs."""
    planned = plan_loaded(model, path, PlanOptions(order="file"))
    return build_problem(planned.view, planned.liveness.order, flops_costs(planned.view, model))


def exact_budget(problem: RematProblem, frac: float) -> int:
    """``frac`` of the way from the problem's floor to its peak without recomputation, in the
    exact program's measure."""
    top = simulate(problem, (), sequential=False).peak
    floor = problem.floor()[0]
    return int(floor + frac * (top - floor))


def exact_table(folder: str) -> list[str]:
    rows = ["| graph | nodes | droppable | budget | exact: extra | proven | time | greedy | mirror | sqrt |",
            "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for name, build in EXACT_GRAPHS.items():
        model = build()
        path = _save(model, folder, name.replace(" ", "_"))
        problem = exact_problem(model, path)
        total = problem.total_cost()
        for frac in EXACT_FRACTIONS:
            budget = exact_budget(problem, frac)
            got = choose(problem, budget, "exact", RematOptions(timeout=60.0))
            cells = []
            for h in ("greedy", "mirror", "sqrt"):
                c = choose(problem, budget, h, RematOptions(timeout=10.0))
                if not c.fits:
                    cells.append("no fit")
                elif got.fits and got.cost:
                    cells.append(f"{100 * c.cost / total:.1f}% ({100 * (c.cost - got.cost) / got.cost:+.0f}%)")
                else:
                    cells.append(f"{100 * c.cost / total:.1f}%")
            extra = f"{100 * got.cost / total:.1f}%" if got.fits else "-"
            rows.append(f"| {name} | {len(model.graph.node)} | {len(problem.candidates)} | "
                        f"{budget / 1024:.0f} KiB | {extra} | {got.status} | {got.seconds:.2f} s | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    return rows


def large_table(folder: str) -> list[str]:
    rows = ["| graph | nodes | algorithm | fits 0.5x | extra FLOPs | choose time | plan --budget time |",
            "|---|---:|---|---|---:|---:|---:|"]
    model = train_resnet(57, 0, batch=2, channels=16, spatial=16)
    path = _save(model, folder, "resnet_2000")
    planned = plan_loaded(model, path, PlanOptions())
    problem = build_problem(planned.view, planned.liveness.order, flops_costs(planned.view, model))
    budget = planned.plan.arena_size // 2
    for h in ("greedy", "mirror", "sqrt"):
        c = choose(problem, budget, h, RematOptions(timeout=10.0))
        t0 = time.perf_counter()
        try:
            got = plan_with_budget(model, path, PlanOptions(), factor=0.5, algorithm=h, timeout=10.0)
            whole = f"{time.perf_counter() - t0:.1f} s (arena {got.planned.plan.arena_size / budget / 2:.3f}x)"
        except OnnxmemError:
            whole = f"{time.perf_counter() - t0:.1f} s (no fit)"
        rows.append(f"| resnet-style, 57 blocks | {len(model.graph.node)} | {h} | {'yes' if c.fits else 'no'} | "
                    f"{100 * c.cost / problem.total_cost():.1f}% | {c.seconds:.2f} s | {whole} |")
        print(rows[-1], flush=True)
    return rows


def frontier(folder: str, docs: Path) -> list[str]:
    lines: list[str] = []
    cases = {
        "resnet50-style": (lambda: train_resnet(8, 0, batch=2, channels=64, spatial=32)),
        "bert-style": (lambda: train_encoder(4, 0, seq=256, dim=64)),
    }
    for name, build in cases.items():
        model = build()
        path = _save(model, folder, name)
        original, points = sweep(model, path, PlanOptions(), timeout=10.0)
        png = docs / f"remat-{name}.png"
        outs = OutputSet()
        outs.add(str(png), "plot")
        outs.put(str(png), plot_sweep(points, original.plan.arena_size, f"{name} training step"))
        outs.commit()
        lines += [f"### {name} training step", "", f"![{name}](remat-{name}.png)", "",
                  "| budget | algorithm | arena | extra FLOPs | status | time |", "|---:|---|---:|---:|---|---:|"]
        for p in points:
            arena = f"{p.arena / original.plan.arena_size:.3f}x" if p.fits else "-"
            extra = f"{p.extra_percent:.1f}%" if p.fits else "-"
            lines.append(f"| {p.factor:g}x | {p.algorithm} | {arena} | {extra} | {p.status} | {p.seconds:.1f} s |")
        lines.append("")
        print("\n".join(lines[-len(points) - 3:]), flush=True)
    return lines


#: the tables, by their ``--only`` name: the heading each has in the output file
SECTIONS = {"budget": "Budgets", "densenet": "DenseNet-121 budgets", "exact": "The exact algorithm and the heuristics",
            "large": "A 2,000-node graph", "frontier": "Frontiers"}


def split_sections(text: str) -> dict[str, list[str]]:
    """``{heading: lines}`` of a tables file: each ``## `` heading with the lines up to the next."""
    out: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            lines = out.setdefault(line[3:].strip(), [])
        elif lines is not None:
            lines.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=list(SECTIONS), choices=list(SECTIONS),
                    help="tables to measure; the others are kept as --out has them")
    ap.add_argument("--out", default=str(ROOT / "docs" / "remat-tables.md"))
    args = ap.parse_args(argv)
    docs = ROOT / "docs"
    kept = split_sections(Path(args.out).read_text()) if Path(args.out).exists() else {}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    note = (f"Measured by `python bench/bench_remat.py --only {' '.join(args.only)}` on {platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}, onnx {onnx.__version__}, {when}, "
            f"load average {os.getloadavg()[0]:.2f} at its start.")
    tables = {"budget": budget_table, "densenet": densenet_table, "exact": exact_table, "large": large_table,
              "frontier": lambda folder: frontier(folder, docs)}
    parts = ["The tables of docs/remat.md; each section names the run that measured it.", ""]
    with tempfile.TemporaryDirectory(prefix="onnxmem-remat-") as folder:
        for key, heading in SECTIONS.items():
            if key in args.only:
                parts += [f"## {heading}", "", note, ""] + tables[key](folder) + [""]
            elif heading in kept:
                parts += [f"## {heading}"] + kept[heading]
    outs = OutputSet()
    outs.add(args.out, "--out")
    outs.put(args.out, ("\n".join(parts).rstrip("\n") + "\n").encode())
    outs.commit()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
