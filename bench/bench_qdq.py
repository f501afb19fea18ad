"""QDQ models: the weights reported, the arena, and onnxruntime's peaks, with --fold on and off.

For each zoo fixture named (default resnet50 and mobilenet_v2) it gives the fixture seeded
weights, quantizes it with ``onnxruntime.quantization.quantize_static(...,
quant_format=QuantFormat.QDQ)`` (int8 weights and activations, calibrated on a few seeded
random inputs) into a temporary folder, plans the QDQ model with ``--fold on`` and ``--fold
off`` (default solver and order, alignment 64, ``--io internal``) and measures onnxruntime's
own activation peak on the graph each plan describes (``onnxmem.runtime.peak``, plus the graph
inputs, which the arena holds): at ``ORT_DISABLE_ALL`` and in its default session
(``ORT_ENABLE_ALL``, memory patterns on, run 2). It prints one Markdown table.

    python bench/bench_qdq.py
    python bench/bench_qdq.py --only mobilenet_v2 --samples 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from onnxmem.core.errors import OnnxmemError
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.zoo import load_zoo, machine_info, materialize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import mib, versions, with_errors  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("resnet50", "mobilenet_v2")


class _RandomReader:
    """A ``CalibrationDataReader`` of ``samples`` seeded random inputs."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], samples: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self._batches = iter([{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
                              for _ in range(samples)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def quantized(name: str, work: Path, samples: int) -> Path:
    """The QDQ model of the zoo fixture ``name``, written under ``work``."""
    from onnxruntime.quantization import QuantFormat, quantize_static

    m = next(z for z in load_zoo(ROOT / "models" / "zoo") if z.name == name)
    src = materialize(m.path, work / "weights", seed=0)
    shapes = {k: tuple(int(m.dims.get(d, d)) for d in v) for k, v in m.info["inputs"].items()}
    out = work / f"{name}_qdq.onnx"
    quantize_static(str(src), str(out), _RandomReader(shapes, samples), quant_format=QuantFormat.QDQ)
    return out


def measure(name: str, work: Path, samples: int) -> list[dict[str, Any]]:
    from onnxmem.runtime.peak import comparable_peak, ort_default_peak, ort_peak

    try:
        path = quantized(name, work, samples)
    except (OnnxmemError, StopIteration) as exc:
        return [{"model": name, "error": f"quantize: {exc}"}]
    rows = []
    for fold in (True, False):
        row: dict[str, Any] = {"model": f"{name}_qdq", "fold": "on" if fold else "off"}
        rows.append(row)
        try:
            p = plan_model(path, PlanOptions(fold=fold))
            row.update(weights=p.plan.weights_size, arena=p.plan.arena_size, folded=len(p.view.folded()))
            disable = ort_peak(p.model, p.view, level="disable", model_path=path).peak
            default = ort_default_peak(p.model, p.view, model_path=path).peak
            row.update(disable=comparable_peak(disable, p.view, p.plan.io),
                       default=comparable_peak(default, p.view, p.plan.io))
        except OnnxmemError as exc:
            row["error"] = str(exc)
    return rows


def _ratio(a: int | None, b: int | None) -> str:
    return f"{a / b:.3f}" if a and b else "—"


def table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "--fold", "folded values", "weights MiB", "arena MiB", "ORT DISABLE_ALL MiB",
            "arena / DISABLE_ALL", "ORT default session MiB", "arena / default session"]
    lines = ["| " + " | ".join(head) + " |", "|---|:---:" + "|---:" * (len(head) - 2) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([
            r["model"], r.get("fold", "—"), str(r.get("folded", "—")), mib(r.get("weights")), mib(r.get("arena")),
            mib(r.get("disable")), _ratio(r.get("arena"), r.get("disable")), mib(r.get("default")),
            _ratio(r.get("arena"), r.get("default"))]) + " |")
    return with_errors(lines, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=MODELS, help="zoo fixtures to quantize")
    ap.add_argument("--samples", type=int, default=4, help="calibration samples (seeded random)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="onnxmem-qdq-") as tmp:
        for name in args.only:
            rows += measure(name, Path(tmp), args.samples)
    print(table(rows))
    print(f"({versions(machine_info())}; {time.perf_counter() - t0:.0f} s)")
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
