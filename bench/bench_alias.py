"""Aliasing benchmark: lower bound and arena with --inplace off and on, against onnxruntime.

For each model (the nine onnx-wheel models, the shipped ``models/*.onnx``, and
with ``--zoo`` the catalogue in ``models/zoo``) it plans twice, with aliasing
off and on, and, unless ``--no-ort``, verifies the aliased plan on CPU and
measures onnxruntime's own activation peak at ORT_DISABLE_ALL
(``onnxmem.runtime.peak``: requested bytes in use, weights and graph inputs
excluded; the arena holds the graph inputs, as ``--io internal`` plans do).
It prints one Markdown table with geometric means.

    python bench/bench_alias.py                 # wheel + shipped models
    python bench/bench_alias.py --zoo --no-ort  # planning figures only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnx

from onnxmem.core.errors import OnnxmemError
from onnxmem.planning.pipeline import PlanOptions, default_solver, plan_model
from onnxmem.zoo import ZooModel, describe_inputs, load_zoo, machine_info, materialize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import geomean, mib, versions, with_errors  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: bindings for symbolic dims of models without a catalogue entry
DEFAULT_DIMS = {"batch": 1, "batch_size": 1, "N": 1, "seq": 32, "sequence": 32, "seq_len": 32,
                "sequence_length": 32}


def models(zoo: bool) -> list[ZooModel]:
    found = [ZooModel(p.stem.removeprefix("light_"), p) for p in sorted(LIGHT.glob("light_*.onnx"))]
    for p in sorted((ROOT / "models").glob("*.onnx")):
        _, symbols = describe_inputs(onnx.load(str(p), load_external_data=False))
        found.append(ZooModel(p.stem, p, {s: DEFAULT_DIMS.get(s, 1) for s in symbols}))
    if zoo and (ROOT / "models" / "zoo").is_dir():  # its onnx-wheel entries are listed already
        found += [m for m in load_zoo(ROOT / "models" / "zoo") if LIGHT not in m.path.parents]
    return found


def best_plan_seconds(path: Path, opts: PlanOptions, repeat: int) -> float:
    return min(plan_model(path, opts).plan.plan_seconds for _ in range(repeat))


def measure(m: ZooModel, ort: bool, work: Path, repeat: int, solver: str) -> dict[str, Any]:
    base = PlanOptions(dims=m.dims, solver=solver)
    row: dict[str, Any] = {"model": m.name}
    try:
        path = materialize(m.path, work, seed=0) if ort else m.path  # weight-free fixtures get weights
        off = plan_model(path, replace(base, inplace=False)).plan
        row.update(bound_off=off.lower_bound, arena_off=off.arena_size)
        planned = plan_model(path, replace(base, inplace=True))
        on = planned.plan
        row.update(bound_on=on.lower_bound, arena_on=on.arena_size,
                   groups=len({t.group for t in on.tensors if t.group != t.name}),
                   seconds=best_plan_seconds(path, replace(base, inplace=True), repeat))
    except OnnxmemError as exc:
        row["error"] = f"plan: {exc}"
        return row
    if not ort:
        return row
    from onnxmem.runtime.peak import comparable_peak, ort_peak
    from onnxmem.verify.run import VerifyOptions, verify_plan

    try:
        report = verify_plan(planned.model, on, model_path=path, view=planned.view,
                             options=VerifyOptions(device="cpu"))
        row["verify"] = "pass" if report.ok else "FAIL"
        if not report.ok:
            row["error"] = f"verify: {report.first}"
        raw = ort_peak(planned.model, planned.view, level="disable", model_path=path).peak
        # counted over the tensors the arena holds: plus the graph inputs (io internal)
        row["ort"] = comparable_peak(raw, planned.view, on.io)
    except OnnxmemError as exc:
        row["error"] = f"onnxruntime: {exc}"
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "bound off MiB", "arena off MiB", "bound on MiB", "arena on MiB", "on/off",
            "onnxruntime + inputs MiB", "arena/onnxruntime", "groups", "plan s", "verify"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 2) + "|:---:|"]
    on_off: list[float] = []
    over_ort: list[float] = []
    for r in rows:
        ratio = r["arena_on"] / r["arena_off"] if r.get("arena_off") else None
        vs_ort = r["arena_on"] / r["ort"] if r.get("ort") and r.get("arena_on") else None
        if ratio:
            on_off.append(ratio)
        if vs_ort:
            over_ort.append(vs_ort)
        lines.append("| " + " | ".join([
            r["model"], mib(r.get("bound_off")), mib(r.get("arena_off")), mib(r.get("bound_on")),
            mib(r.get("arena_on")), "—" if ratio is None else f"{ratio:.3f}", mib(r.get("ort")),
            "—" if vs_ort is None else f"{vs_ort:.3f}", str(r.get("groups", "—")),
            "—" if "seconds" not in r else f"{r['seconds']:.3f}", r.get("verify", "not run"),
        ]) + " |")
    g1, g2 = geomean(on_off), geomean(over_ort)
    lines.append(f"| **geomean** | | | | | {'—' if g1 is None else f'{g1:.3f}'} | | "
                 f"{'—' if g2 is None else f'**{g2:.3f}**'} | | | |")
    above = [r["model"] for r in rows if r.get("ort") and r.get("arena_on", 0) > r["ort"]]
    lines += ["", f"Models above onnxruntime's peak: {', '.join(above) if above else 'none'}."]
    return with_errors(lines, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", action="store_true", help="also the catalogue in models/zoo")
    ap.add_argument("--no-ort", action="store_true", help="skip verify and onnxruntime's peak")
    ap.add_argument("--only", nargs="*", default=(), help="model names to keep")
    ap.add_argument("--solver", default=default_solver(), help="solver for every plan")
    ap.add_argument("--repeat", type=int, default=3, help="plan runs per model; the best time is shown")
    args = ap.parse_args(argv)
    chosen = [m for m in models(args.zoo) if not args.only or m.name in args.only]
    info = machine_info()
    print(f"{versions(info)}, solver {args.solver}\n")
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in chosen:
            rows.append(measure(m, not args.no_ort, Path(tmp), args.repeat, args.solver))
            print(f"  {m.name} done", file=sys.stderr)
    print(table(rows))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
