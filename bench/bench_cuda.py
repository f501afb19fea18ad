"""Plans executed on a GPU: every model of the zoo catalogue, the shipped models and the
control-flow models, run inside one arena with onnxruntime's CUDA provider.

Usage: python bench/bench_cuda.py [--jobs N] [--only NAME,...] [--out DIR] [--alignment B]

Each model is planned with the default options and ``--alignment 256`` (the CUDA
allocator's alignment; ``verify`` refuses less on CUDA), then ``verify --device cuda``:
the static proof, then every node run by onnxruntime's CUDA provider with its inputs and
outputs bound at their offsets in one device allocation (control-flow bodies node by
node, every Loop iteration and Scan step), the arena's slack filled with a sentinel
that is checked after each node, and the outputs compared with the same nodes run
outside the arena and with an ordinary whole-model CUDA session. Beside it,
onnxruntime's own peak on CUDA (``ORT_DISABLE_ALL``, its profiler's
``mem_bytes_requested_in_use`` over the CUDA provider's kernel events, counted over
the arena's tensors as ``onnxmem compare`` does).

Zoo and shipped models run as the zoo job runs them (one process per model,
``--jobs`` at a time, a per-model time limit); the control-flow models of
``bench/bench_controlflow.py`` run in this process with that script's inputs.
Prints a Markdown table and a summary line. Exit code 1 when a plan fails on the GPU.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import geomean  # noqa: E402
from bench_controlflow import INPUTS as CONTROL_FLOW_INPUTS  # noqa: E402

from onnxmem.core.errors import OnnxmemError  # noqa: E402
from onnxmem.planning.pipeline import PlanOptions, plan_model  # noqa: E402
from onnxmem.runtime.sessions import require_cuda  # noqa: E402
from onnxmem.zoo import ZooModel, ZooOptions, load_zoo, run_zoo, verify_and_measure  # noqa: E402
from tests.nested_models import CONTROL_FLOW_MODELS  # noqa: E402

#: the shipped models, with the dims README.md plans them at
SHIPPED = {"resnet_cnn": {}, "inception_block": {}, "transformer_block": {"batch": 1, "seq": 128},
           "external_data": {}, "control_flow": {}}


def zoo_rows(models: list[ZooModel], opts: PlanOptions, jobs: int, work: Path,
             timeout: float) -> list[dict[str, Any]]:
    rows = []
    options = ZooOptions(plan=opts, verify="cuda", jobs=jobs, work_dir=work, model_timeout=timeout)

    def show(r: Any) -> None:
        print(f"  {r.name}: {r.status} ({r.seconds:.1f} s)", file=sys.stderr, flush=True)

    for r in run_zoo(models, options, on_result=show):
        rows.append({"model": r.name, "nodes": r.nodes, "tensors": r.tensors, "arena": r.arena_size,
                     "bound": r.lower_bound, "ort": r.ort_peak, "verify": r.verify,
                     "detail": r.verify_detail or r.error or "", "seconds": r.seconds})
    return rows


def control_flow_rows(names: list[str], opts: PlanOptions, out: Path) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        build = CONTROL_FLOW_MODELS[name]
        path = out / f"{name}.onnx"
        onnx.save(build(), path)
        t0 = time.perf_counter()
        row: dict[str, Any] = {"model": name, "nodes": None, "tensors": None, "arena": None, "bound": None,
                               "ort": None, "verify": "error", "detail": "", "seconds": 0.0}
        try:
            planned = plan_model(path, opts)
            plan = planned.plan
            row.update(nodes=len(plan.order), tensors=len(plan.tensors), arena=plan.arena_size,
                       bound=plan.lower_bound)
            verdict, detail, peak = verify_and_measure(planned, path, "cuda", 0, CONTROL_FLOW_INPUTS.get(name))
            row.update(verify=verdict, detail=detail, ort=peak)
        except Exception as exc:  # noqa: BLE001 - a row records any failure and the table goes on
            row["detail"] = f"{type(exc).__name__}: {exc}"
        row["seconds"] = time.perf_counter() - t0
        print(f"  {name}: {row['verify']} ({row['seconds']:.1f} s)", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def cell(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=4, help="zoo models planned and verified at once")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--out", help="folder for runnable copies, plans and built models (default: temporary)")
    ap.add_argument("--alignment", type=int, default=256)
    ap.add_argument("--model-timeout", type=float, default=600.0)
    args = ap.parse_args()
    try:
        require_cuda()
    except OnnxmemError as exc:
        print(f"bench_cuda: {exc}", file=sys.stderr)
        return 1
    import onnxruntime as ort

    out = Path(args.out or tempfile.mkdtemp(prefix="onnxmem-cuda-"))
    out.mkdir(parents=True, exist_ok=True)
    only = {n for n in args.only.split(",") if n}
    opts = replace(PlanOptions(), alignment=args.alignment)
    zoo = load_zoo(ROOT / "models" / "zoo")
    zoo += [ZooModel(n, ROOT / "models" / f"{n}.onnx", dims) for n, dims in SHIPPED.items()]
    if only:
        zoo = [m for m in zoo if m.name in only]
    start = time.perf_counter()
    rows = zoo_rows(zoo, opts, args.jobs, out / "zoo", args.model_timeout)
    flow = [n for n in CONTROL_FLOW_MODELS if not only or n in only]
    if flow:
        (out / "control_flow").mkdir(exist_ok=True)
        rows += control_flow_rows(flow, opts, out / "control_flow")
    wall = time.perf_counter() - start

    print(f"machine: {platform.machine()}, Python {platform.python_version()}, onnx {onnx.__version__}, "
          f"onnxruntime {ort.__version__} ({', '.join(ort.get_available_providers())}); "
          f"--alignment {args.alignment}; {wall:.0f} s with --jobs {args.jobs}")
    print()
    print("| model | nodes | tensors | arena B | bound B | onnxruntime CUDA peak B | arena / ORT | verify on cuda "
          "| seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    ratios = []
    for r in rows:
        ratio = r["arena"] / r["ort"] if r["arena"] is not None and r["ort"] else None
        if ratio is not None:
            ratios.append(ratio)
        verdict = "verified" if r["verify"] == "pass" else f"{r['verify']}: {r['detail'][:160]}"
        print(f"| {r['model']} | {cell(r['nodes'])} | {cell(r['tensors'])} | {cell(r['arena'])} | {cell(r['bound'])} "
              f"| {cell(r['ort'])} | {'—' if ratio is None else f'{ratio:.3f}'} | {verdict} | {r['seconds']:.1f} |")
    passed = sum(r["verify"] == "pass" for r in rows)
    at_bound = sum(r["arena"] is not None and r["arena"] == r["bound"] for r in rows)
    below = sum(x <= 1.0 for x in ratios)
    geo = geomean(ratios)
    print()
    print(f"{passed} of {len(rows)} verified on cuda; {at_bound} at their lower bound; arena at or below "
          f"onnxruntime's CUDA peak on {below} of {len(ratios)} measured"
          + (f" (geomean {geo:.3f})" if geo is not None else ""))
    for r in rows:
        if r["verify"] == "pass" and r["detail"] and "outputs match" not in r["detail"]:
            print(f"- {r['model']}: {r['detail']}")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
