#!/usr/bin/env python
"""Operator-order benchmark: prints the Markdown tables of docs/order.md.

Usage::

    python bench/bench_order.py            # every table (a few minutes on 2 cores)
    python bench/bench_order.py --only real large

Peaks are the max-live lower bound of the liveness problem (KiB, 64-byte
alignment, graph inputs and outputs in the arena); arenas are the ``greedy``
solver's. "Shared" figures are those of ``--inplace on`` (the default):
views, in-place outputs and Concat placements share bytes
(``order_peak(..., inplace=True)``, which is ``plan.lower_bound``), and the
order is searched with ``OrderOptions(inplace=True)``. Times are medians of 3 runs.
"""

from __future__ import annotations

import glob
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnxmem.analysis.aliasing import shared_layout  # noqa: E402
from onnxmem.analysis.liveness import build_liveness  # noqa: E402
from onnxmem.core.problem import lower_bound  # noqa: E402
from onnxmem.core.solvers import solve  # noqa: E402
from onnxmem.graph import build_view  # noqa: E402
from onnxmem.model import load_model  # noqa: E402
from onnxmem.model.generate import nasnet, randwire, transformer  # noqa: E402
from onnxmem.scheduling import OrderOptions, reorder, stable_topological_order  # noqa: E402
from onnxmem.scheduling.cost import build_order_graph, order_peak  # noqa: E402
from onnxmem.scheduling.exact import exact_search  # noqa: E402
from onnxmem.shapes import infer_shapes  # noqa: E402

HEURISTICS = ("greedy", "longest-path", "hierarchical", "auto")
SHARED = OrderOptions(inplace=True)


def view_of(model):
    return build_view(model, infer_shapes(model))


def kib(n: int) -> str:
    return f"{n / 1024:.1f}"


def timed(fn, repeat: int = 3):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def brute_force(view, limit: int = 300_000):
    n = len(view.ops)
    preds = [set(view.predecessors(i)) for i in range(n)]
    best, count = None, 0
    stack = [((), frozenset())]
    while stack:
        order, done = stack.pop()
        if len(order) == n:
            count += 1
            if count > limit:
                return None, count
            p = order_peak(view, order)
            best = p if best is None else min(best, p)
            continue
        for v in range(n):
            if v not in done and preds[v] <= done:
                stack.append((order + (v,), done | {v}))
    return best, count


def table_brute() -> None:
    print("### exact against brute force (every topological order)\n")
    print("| graph | nodes | orders | brute force | exact | equal |")
    print("|---|---:|---:|---:|---:|:---:|")
    for kind in ("ws", "er", "ba"):
        for seed in range(3):
            m = randwire(5, kind, seed)
            view = view_of(m)
            bf, count = brute_force(view)
            if bf is None:
                continue
            ex = order_peak(view, reorder(view, "exact"))
            print(f"| randwire-{kind}-5 s{seed} | {len(view.ops)} | {count} | {kib(bf)} | {kib(ex)} | {'yes' if bf == ex else 'NO'} |")
    print()


def exact_row(name, m, timeout):
    view = view_of(m)
    g = build_order_graph(view)
    (loc, proven, _), secs = timed(lambda: exact_search(g, timeout))
    pe = order_peak(view, g.full_order(loc))
    pf = order_peak(view, stable_topological_order(view))
    hs = {h: order_peak(view, reorder(view, h)) for h in HEURISTICS}
    cells = " | ".join(kib(hs[h]) for h in HEURISTICS)
    gaps = {h: (hs[h] - pe) / pe * 100 for h in HEURISTICS}
    print(f"| {name} | {len(view.ops)} | {kib(pf)} | {cells} | {kib(pe)} | {'yes' if proven else 'no'} | {secs:.2f} |")
    return gaps, proven, secs


def table_exact(title, models, timeout) -> None:
    print(f"### {title}\n")
    print("| graph | nodes | file | " + " | ".join(HEURISTICS) + " | exact | proven | exact s |")
    print("|---|---:|---:|" + "---:|" * len(HEURISTICS) + "---:|:---:|---:|")
    gaps = {h: [] for h in HEURISTICS}
    proven_all, worst = 0, 0.0
    for name, m in models:
        g, proven, secs = exact_row(name, m, timeout)
        for h in HEURISTICS:
            gaps[h].append(g[h])
        proven_all += proven
        worst = max(worst, secs)
    print()
    print(f"proven optimal: {proven_all}/{len(models)}; slowest exact search {worst:.2f} s (limit {timeout:g} s)  ")
    print("gap to exact, max / mean: " + "; ".join(
        f"{h} {max(v):.1f}% / {statistics.mean(v):.1f}%" for h, v in gaps.items()) + "\n")


def table_randwire64() -> None:
    print("### 64-node RandWire: auto against the file order\n")
    print("Without sharing (`--inplace off`; order scored and searched without sharing):\n")
    print("| graph | nodes | file | auto | reduction | auto s | exact (10 s) | proven | reduction |")
    print("|---|---:|---:|---:|---:|---:|---:|:---:|---:|")
    red, red_exact = [], []
    views = []
    for kind in ("ws", "er", "ba"):
        for seed in range(3):
            view = view_of(randwire(64, kind, seed))
            views.append((f"randwire-{kind}-64 s{seed}", view))
            pf = order_peak(view, stable_topological_order(view))
            order, secs = timed(lambda view=view: reorder(view, "auto"))
            pa = order_peak(view, order)
            g = build_order_graph(view)
            loc, proven, _ = exact_search(g, 10.0)
            pe = order_peak(view, g.full_order(loc))
            r, re_ = (pf - pa) / pf * 100, (pf - pe) / pf * 100
            red.append(r)
            red_exact.append(re_)
            print(f"| randwire-{kind}-64 s{seed} | {len(view.ops)} | {kib(pf)} | {kib(pa)} | {r:.1f}% | {secs:.2f} "
                  f"| {kib(pe)} | {'yes' if proven else 'no'} | {re_:.1f}% |")
    print(f"\nmedian peak reduction: auto {statistics.median(red):.1f}%, "
          f"exact with 10 s {statistics.median(red_exact):.1f}%\n")
    print("With sharing (`--inplace on`, the default): bounds of the plan; \"auto, scored unshared\" is the "
          "order chosen without sharing in view, planned with sharing:\n")
    print("| graph | file | auto, scored unshared | reduction | auto | reduction | auto s | exact (10 s) | proven | reduction |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|")
    red_u, red_s, red_e = [], [], []
    for name, view in views:
        pf = order_peak(view, stable_topological_order(view), inplace=True)
        pu = order_peak(view, reorder(view, "auto"), inplace=True)
        order, secs = timed(lambda view=view: reorder(view, "auto", SHARED))
        pa = order_peak(view, order, inplace=True)
        g = build_order_graph(view, inplace=True)
        loc, proven, _ = exact_search(g, 10.0)
        pe = order_peak(view, g.full_order(loc), inplace=True)
        ru, ra, re_ = ((pf - x) / pf * 100 for x in (pu, pa, pe))
        red_u.append(ru)
        red_s.append(ra)
        red_e.append(re_)
        print(f"| {name} | {kib(pf)} | {kib(pu)} | {ru:.1f}% | {kib(pa)} | {ra:.1f}% | {secs:.2f} | {kib(pe)} "
              f"| {'yes' if proven else 'no'} | {re_:.1f}% |")
    print(f"\nmedian reduction of the shared bound: auto scored unshared {statistics.median(red_u):.1f}%, "
          f"auto {statistics.median(red_s):.1f}%, exact with 10 s {statistics.median(red_e):.1f}%\n")


def real_models() -> list[tuple[str, str]]:
    from onnxmem.zoo import LIGHT_MODELS, light_model_path

    out = [(f"onnx:{n}", str(light_model_path(n))) for n in LIGHT_MODELS]
    for p in sorted(glob.glob(str(ROOT / "models" / "**" / "*.onnx"), recursive=True)):
        out.append((os.path.relpath(p, ROOT), p))
    return out


def table_real() -> None:
    print("### real models: file order against auto\n")
    print("Without sharing (`--inplace off`):\n")
    print("| model | nodes | file bound | auto bound | change | file arena | auto arena | auto s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    views = []
    for name, path in real_models():
        try:
            m = load_model(path)
            view = build_view(m, infer_shapes(m, model_path=path))
        except Exception as exc:  # a fixture that needs --dim bindings, etc.
            print(f"| {name} | | skipped: {type(exc).__name__} | | | | | |")
            continue
        views.append((name, view))
        fo = stable_topological_order(view)
        reorder(view, "auto")  # warm-up: compiled search code, lazy imports
        ao, secs = timed(lambda view=view: reorder(view, "auto"))
        pf, pa = order_peak(view, fo), order_peak(view, ao)
        af = solve(build_liveness(view, fo).problem, "greedy").height
        aa = solve(build_liveness(view, ao).problem, "greedy").height
        ch = (pa - pf) / pf * 100 if pf else 0.0
        print(f"| {name} | {len(view.ops)} | {kib(pf)} | {kib(pa)} | {ch:+.1f}% | {kib(af)} | {kib(aa)} | {secs:.3f} |")
    print("\nWith sharing (`--inplace on`, the default; \"unshared-scored\": the order `auto` picks without "
          "sharing in view, planned with sharing):\n")
    print("| model | file bound | unshared-scored bound | auto bound | change | file arena | auto arena | auto s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    worse = []
    for name, view in views:
        fo = stable_topological_order(view)
        reorder(view, "auto", SHARED)  # warm-up
        ao, secs = timed(lambda view=view: reorder(view, "auto", SHARED))
        lf, la = (build_liveness(view, o, shared_layout(view, o)) for o in (fo, ao))
        pf, pa = lower_bound(lf.problem), lower_bound(la.problem)
        pu = order_peak(view, reorder(view, "auto"), inplace=True)
        af, aa = solve(lf.problem, "greedy").height, solve(la.problem, "greedy").height
        ch = (pa - pf) / pf * 100 if pf else 0.0
        if pa > pf:
            worse.append(name)
        print(f"| {name} | {kib(pf)} | {kib(pu)} | {kib(pa)} | {ch:+.1f}% | {kib(af)} | {kib(aa)} | {secs:.3f} |")
    print(f"\nmodels where auto's shared bound is above the file order's: {', '.join(worse) or 'none'}\n")


def table_large() -> None:
    print("### ordering time on a deep generated transformer\n")
    print("| graph | nodes | strategy | seconds (median of 3) | file | chosen |")
    print("|---|---:|---|---:|---:|---:|")
    view = view_of(transformer(400, 0))
    pf = order_peak(view, stable_topological_order(view))
    for s in ("greedy", "hierarchical", "auto"):
        order, secs = timed(lambda s=s: reorder(view, s))
        print(f"| transformer-400 | {len(view.ops)} | {s} | {secs:.2f} | {kib(pf)} | {kib(order_peak(view, order))} |")
    ps = order_peak(view, stable_topological_order(view), inplace=True)
    for s in ("greedy", "auto"):
        order, secs = timed(lambda s=s: reorder(view, s, SHARED))
        print(f"| transformer-400 | {len(view.ops)} | {s}, shared | {secs:.2f} | {kib(ps)} "
              f"| {kib(order_peak(view, order, inplace=True))} |")
    print()


def main(argv: list[str] | None = None) -> None:
    import argparse

    tables = ("brute", "small", "mid", "randwire64", "real", "large")
    ap = argparse.ArgumentParser(description="operator-order benchmark (docs/order.md)")
    ap.add_argument("--only", nargs="+", choices=tables, default=list(tables), help="tables to print")
    only = set(ap.parse_args(argv).only)
    print(f"Peaks in KiB. `python bench/bench_order.py`, {time.strftime('%Y-%m-%d')}.\n")
    exact_search(build_order_graph(view_of(randwire(32, "ws", 1))), 10.0)  # warm-up: compiled search code
    if "brute" in only:
        table_brute()
    if "small" in only:
        small = [(f"randwire-{k}-10 s{s}", randwire(10, k, s)) for k in ("ws", "er", "ba") for s in range(3)]
        small += [(f"nasnet-1x3 s{s}", nasnet(1, s, steps=3)) for s in range(3)]
        table_exact("graphs of at most 32 nodes: exact and the fast heuristics", small, 10.0)
    if "mid" in only:
        mid = [(f"randwire-{k}-32 s{s}", randwire(32, k, s)) for k in ("ws", "er", "ba") for s in range(3)]
        mid += [(f"nasnet-3x4 s{s}", nasnet(3, s)) for s in range(3)]
        table_exact("RandWire with 32 random-graph nodes (about 90 ONNX nodes) and NASNet cells", mid, 10.0)
    if "randwire64" in only:
        table_randwire64()
    if "real" in only:
        table_real()
    if "large" in only:
        table_large()


if __name__ == "__main__":
    main()
