"""Constant folding and the attention rule: arenas with --fold on and off against onnxruntime's peaks.

For each model (the zoo fixtures with run-time constants: the TorchScript
``*_legacy`` exports and the models whose graphs compute weights at run time;
and the attention-encoder layer of ``onnxmem generate attention`` at 1500
tokens, 384 channels, 6 heads) it plans with ``--fold off`` and ``--fold on``
(default solver and order, alignment 64, ``--io internal``), verifies the
folded plan on CPU, and measures onnxruntime's own activation peak
(``onnxmem.runtime.peak``, plus the graph inputs, which the arena holds) four ways:

* ``DISABLE_ALL, as given``: ORT_DISABLE_ALL on the graph ``--fold off`` plans
  (like for like with the arena off);
* ``DISABLE_ALL, folded``: ORT_DISABLE_ALL on the graph ``--fold on`` plans,
  its folded values as initializers (like for like with the arena on);
* ``ENABLE_BASIC``: onnxruntime's own constant folding, no fusion;
* ``ENABLE_ALL``: onnxruntime's default (fused).

It prints one Markdown table with geometric means of arena on / onnxruntime.

    python bench/bench_fold.py                       # every model
    python bench/bench_fold.py --only gpt2 attention_query
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

from onnxmem.core.errors import OnnxmemError
from onnxmem.model.generate import attention_encoder
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.zoo import ZooModel, load_zoo, machine_info, materialize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import geomean, mib, versions, with_errors  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: zoo fixtures whose graphs compute values from weights at run time (besides the *_legacy exports)
RUNTIME_CONSTANTS = ("bert_base", "gpt2", "gpt2_past", "vit_base", "t5_small", "llama_4l")
#: the attention layers: name -> (scale_at, mask)
ATTENTION = {"attention_query": ("query", False), "attention_scores_mask": ("scores", True)}
TOKENS = 1500
#: columns: (key, onnxruntime level, fold the graph onnxruntime runs as the plan does)
ORT_RUNS = (("ort_disable", "disable", False), ("ort_disable_folded", "disable", True),
            ("ort_basic", "basic", False), ("ort_all", "all", False))


def models(work: Path) -> list[ZooModel]:
    zoo = [m for m in load_zoo(ROOT / "models" / "zoo")
           if m.name.endswith("_legacy") or m.name in RUNTIME_CONSTANTS]
    for name, (scale_at, mask) in ATTENTION.items():
        path = work / f"{name}.onnx"
        onnx.save(attention_encoder(TOKENS, 0, scale_at=scale_at, mask=mask), path)
        zoo.append(ZooModel(name, path))
    return zoo


def measure(m: ZooModel, work: Path, verify: bool) -> dict[str, Any]:
    from onnxmem.runtime.peak import comparable_peak, ort_peak
    from onnxmem.verify.run import VerifyOptions, verify_plan

    base = PlanOptions(dims=m.dims, input_shapes=m.input_shapes, strict_dims=False)
    row: dict[str, Any] = {"model": m.name}
    try:
        path = materialize(m.path, work, seed=0)  # weight-free fixtures get seeded weights
        planned = {}
        for fold in (False, True):
            p = plan_model(path, PlanOptions(**{**_fields(base), "fold": fold}))
            planned[fold] = p
            key = "on" if fold else "off"
            row.update({f"arena_{key}": p.plan.arena_size, f"weights_{key}": p.plan.weights_size})
        row["folded"] = len(planned[True].view.folded())
    except OnnxmemError as exc:
        row["error"] = f"plan: {exc}"
        return row
    on = planned[True]
    if verify:
        try:
            report = verify_plan(on.model, on.plan, model_path=path, view=on.view, options=VerifyOptions())
            row["verify"] = "pass" if report.ok else "FAIL"
            if not report.ok:
                row["error"] = f"verify: {report.first}"
        except OnnxmemError as exc:
            row["verify"] = "error"
            row["error"] = f"verify: {exc}"
    for key, level, fold in ORT_RUNS:
        p = planned[fold]
        try:
            peak = ort_peak(p.model, p.view, level=level, model_path=path).peak
            row[key] = comparable_peak(peak, p.view, p.plan.io)
        except OnnxmemError as exc:
            row.setdefault("error", f"onnxruntime {level}: {exc}")
    return row


def _fields(opts: PlanOptions) -> dict[str, Any]:
    return {f: getattr(opts, f) for f in opts.__dataclass_fields__}


def _ratio(a: int | None, b: int | None) -> float | None:
    return a / b if a and b else None


def table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "folded values", "weights off MiB", "weights on MiB", "arena off MiB", "arena on MiB",
            "ORT DISABLE_ALL as given MiB", "ORT DISABLE_ALL folded MiB", "ORT ENABLE_BASIC MiB",
            "ORT ENABLE_ALL MiB", "on / DISABLE_ALL folded", "on / ENABLE_BASIC", "on / ENABLE_ALL", "verify"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 2) + "|:---:|"]
    ratios: dict[str, list[float]] = {"ort_disable_folded": [], "ort_basic": [], "ort_all": []}
    for r in rows:
        cells = [r["model"], str(r.get("folded", "—")), mib(r.get("weights_off")), mib(r.get("weights_on")),
                 mib(r.get("arena_off")), mib(r.get("arena_on"))]
        cells += [mib(r.get(k)) for k, _, _ in ORT_RUNS]
        for k in ratios:
            x = _ratio(r.get("arena_on"), r.get(k))
            if x is not None:
                ratios[k].append(x)
            cells.append("—" if x is None else f"{x:.3f}")
        cells.append(r.get("verify", "not run"))
        lines.append("| " + " | ".join(cells) + " |")
    means = [geomean(v) for v in ratios.values()]
    lines.append("| **geomean** | | | | | | | | | | "
                 + " | ".join("—" if g is None else f"**{g:.3f}**" for g in means) + " | |")
    for k, label in (("ort_disable_folded", "ORT_DISABLE_ALL on the folded graph"),
                     ("ort_basic", "ORT_ENABLE_BASIC")):
        above = [r["model"] for r in rows if r.get(k) and r.get("arena_on", 0) > r[k]]
        lines += ["", f"Arena (fold on) above {label}: {', '.join(above) if above else 'none'}."]
    return with_errors(lines, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=(), help="model names to keep")
    ap.add_argument("--no-verify", action="store_true", help="skip running the folded plans in the arena")
    args = ap.parse_args(argv)
    info = machine_info()
    print(f"{versions(info)}\n")
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="onnxmem-bench-fold-") as tmp:
        work = Path(tmp)
        for m in models(work):
            if args.only and m.name not in args.only:
                continue
            rows.append(measure(m, work, not args.no_verify))
            print(f"  {m.name} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    print(table(rows))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
