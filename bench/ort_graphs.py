"""The graphs onnxruntime's own tools make from the zoo's models: a model set to plan.

    python bench/ort_graphs.py --out DIR                        # every zoo model, every variant
    python bench/ort_graphs.py --out DIR --models mobilenet_v2 bert_base --variants qdq fp16
    python bench/ort_graphs.py --list                            # the variants and what makes each

For each model of ``models/zoo/catalog.json`` (``--zoo`` for another catalogue) the folder gets
``<model>.onnx`` (the model with its weights: a weight-free fixture is filled by
``onnxmem.zoo.materialize``, seeded) and one ``<model>.<variant>.onnx`` per variant that applies:

- ``fused``: ``onnxruntime.transformers.optimizer.optimize_model`` with the model type of a
  bert/gpt2-like model (``MODEL_TYPES`` below: bert, gpt2, vit, swin, t5), for the CPU, at
  ``opt_level=0`` (its own fusions: Attention, SkipLayerNormalization, ...; the levels above
  first run onnxruntime's optimizer, which the ``ort_*`` variants cover, and need torch);
- ``qdynamic``: ``onnxruntime.quantization.quantize_dynamic`` (int8 weights);
- ``qdq`` and ``qoperator``: ``quantize_static`` in QDQ and in QOperator format (uint8
  activations, int8 weights, MinMax), calibrated on ``SAMPLES`` seeded random inputs
  (``onnxmem.runtime.random_inputs``) at the catalogue's input shapes, on the CPU;
- ``fp16``: ``onnxruntime.transformers.float16.convert_float_to_float16`` with
  ``keep_io_types=True`` (graph inputs and outputs stay float32, as a user keeps their feed);
- ``ort_extended`` and ``ort_all``: the model as an onnxruntime CPU session saves it
  (``SessionOptions.optimized_model_filepath``) at ``ORT_ENABLE_EXTENDED`` and at
  ``ORT_ENABLE_ALL`` (the latter holds the CPU's NCHWc layout ops).

Each build runs in onnxmem's onnxruntime child process (``onnxmem.runtime.run_isolated``), under
a time limit, so a crash or a hang is one row. A variant is written under a temporary name
and renamed when whole: a failed build leaves no file. ``set.json`` in the folder lists every
(model, variant) with its file, its status (``built``, ``failed`` or ``n/a``), the error, and
the shape binding (``dims``, ``input_shapes``) the bench plans it with. Everything is seeded:
two builds give the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "models" / "zoo" / "catalog.json"
MANIFEST = "set.json"
#: calibration samples of quantize_static
SAMPLES = 2
SEED = 0
#: seconds one variant's build may take (a safety bound, no figure depends on it)
BUILD_SECONDS = 1800.0
#: the transformers optimizer's model type, by the first word of a zoo model's name
MODEL_TYPES = {"bert": "bert", "gpt2": "gpt2", "vit": "vit", "swin": "swin", "t5": "t5"}
VARIANTS = ("fused", "qdynamic", "qdq", "qoperator", "fp16", "ort_extended", "ort_all")
WHAT = {
    "fused": "transformers optimizer fusions (optimize_model, model type by name, opt_level 0)",
    "qdynamic": "quantize_dynamic, int8 weights",
    "qdq": f"quantize_static, QDQ format, uint8/int8, {SAMPLES} seeded samples",
    "qoperator": f"quantize_static, QOperator format, uint8/int8, {SAMPLES} seeded samples",
    "fp16": "float16 (onnxruntime.transformers.float16), keep_io_types",
    "ort_extended": "saved by onnxruntime at ORT_ENABLE_EXTENDED (CPU)",
    "ort_all": "saved by onnxruntime at ORT_ENABLE_ALL (CPU)",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One file of the set (``variant`` ``original``: the zoo's model itself)."""

    model: str
    variant: str
    file: str
    status: str  # built | failed | n/a
    error: str = ""
    dims: dict[str, int] = field(default_factory=dict)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)


# --------------------------------------------------------------------------- one variant (in the child)


def _calibration(model_path: str, shapes: dict[str, tuple[int, ...]], seed: int) -> Any:
    import onnx
    from onnxruntime.quantization import CalibrationDataReader

    from onnxmem.runtime import random_inputs

    model = onnx.load(model_path, load_external_data=False)
    samples = [random_inputs(model, shapes, seed + i) for i in range(SAMPLES)]

    class Samples(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._left = iter(samples)

        def get_next(self) -> dict[str, Any] | None:
            return next(self._left, None)

    return Samples()


def _fused(src: str, dest: str, model_type: str | None, shapes: Any, seed: int) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    # opt_level 0: the optimizer's own fusions alone (a level above 0 first runs onnxruntime, which
    # the ort_* variants cover, and needs torch installed)
    optimize_model(src, model_type=model_type or "bert", opt_level=0, use_gpu=False).save_model_to_file(dest)


def _qdynamic(src: str, dest: str, model_type: str | None, shapes: Any, seed: int) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, dest, weight_type=QuantType.QInt8)


def _qstatic(fmt: str) -> Callable[..., None]:
    def build(src: str, dest: str, model_type: str | None, shapes: Any, seed: int) -> None:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

        quantize_static(src, dest, _calibration(src, shapes, seed), quant_format=QuantFormat[fmt],
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibration_providers=["CPUExecutionProvider"])
    return build


def _fp16(src: str, dest: str, model_type: str | None, shapes: Any, seed: int) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(src), keep_io_types=True), dest)


def _saved_at(level: str) -> Callable[..., None]:
    def build(src: str, dest: str, model_type: str | None, shapes: Any, seed: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        options.optimized_model_filepath = dest
        ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])
    return build


BUILDERS: dict[str, Callable[..., None]] = {
    "fused": _fused, "qdynamic": _qdynamic, "qdq": _qstatic("QDQ"), "qoperator": _qstatic("QOperator"),
    "fp16": _fp16, "ort_extended": _saved_at("ORT_ENABLE_EXTENDED"), "ort_all": _saved_at("ORT_ENABLE_ALL"),
}


def build_variant(variant: str, src: str, dest: str, model_type: str | None,
                  shapes: dict[str, tuple[int, ...]], seed: int = SEED) -> str:
    """Write ``variant`` of the model at ``src`` to ``dest``; ``""`` when built, else the error in
    one line. The file is written in a temporary folder beside ``dest`` and moved when whole."""
    from onnxmem.core.errors import one_line
    from onnxmem.runtime.isolation import end_run, start_run

    out = Path(dest)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        work = Path(tmp) / out.name
        start_run(f"the build of {out.name}")
        try:
            BUILDERS[variant](src, str(work), model_type, shapes, seed)
        except Exception as exc:  # noqa: BLE001 - a tool's failure is the variant's row
            text = str(exc).strip().splitlines()
            return one_line(f"{type(exc).__name__}: {text[-1] if text else ''}")[:400]
        finally:
            end_run()
        if not work.is_file():
            return f"{variant} wrote no model file"
        for part in sorted(Path(tmp).iterdir()):  # external data files beside the model, if any
            if part != work:
                os.replace(part, out.parent / part.name)
        os.replace(work, out)
    return ""


# --------------------------------------------------------------------------- the set


def input_shapes(path: Path, dims: dict[str, int], pinned: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Every graph input's shape at the catalogue's binding; a ``ValueError`` naming a dim left unbound."""
    import onnx

    from onnxmem.core.errors import show_name
    from onnxmem.zoo import describe_inputs

    declared, _ = describe_inputs(onnx.load(str(path), load_external_data=False))
    shapes: dict[str, tuple[int, ...]] = {}
    for name, shape in declared.items():
        if name in pinned:
            shapes[name] = tuple(pinned[name])
            continue
        unbound = [d for d in shape if isinstance(d, str) and d not in dims]
        if unbound:
            raise ValueError(f"input {show_name(name)} has dim {show_name(unbound[0])} that the catalogue does not bind")
        shapes[name] = tuple(dims[d] if isinstance(d, str) else int(d) for d in shape)
    return shapes


def model_type(name: str) -> str | None:
    """The transformers optimizer's model type for a zoo model, ``None`` where it does not apply."""
    return MODEL_TYPES.get(name.split("_")[0])


def _original(source: Path, out: Path, name: str) -> Path:
    """``out/<name>.onnx``: the zoo's model with weights (filled, seeded, when it is a fixture)."""
    from onnxmem.zoo import materialize

    path = materialize(source, out, seed=SEED)
    if path.parent.resolve() != out.resolve():  # a model with its weights (onnx wheel): copied in
        path = shutil.copyfile(path, out / f"{name}.onnx")
    elif path.name != f"{name}.onnx":
        raise ValueError(f"zoo model {name} is in file {path.name}; the set names it {name}.onnx")
    return Path(path)


def build_set(out: Path, models: Sequence[str] = (), variants: Sequence[str] = VARIANTS,
              zoo: Path = ZOO, seconds: float = BUILD_SECONDS,
              log: Callable[[str], None] = lambda _: None) -> list[Entry]:
    """Build the set into ``out`` (created) and write its ``set.json`` (entries of an earlier
    build there that this one did not redo are kept); return this build's entries.

    ``models``: shell patterns of zoo names (all when empty). A variant that does not apply
    is an ``n/a`` entry; one that fails is a ``failed`` entry with its error.
    """
    from onnxmem.core.errors import one_line
    from onnxmem.core.fileio import write_text_atomic
    from onnxmem.runtime import run_isolated, run_limits
    from onnxmem.zoo import load_zoo

    unknown = [v for v in variants if v not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown variant {unknown[0]!r}; the variants are {', '.join(VARIANTS)}")
    out.mkdir(parents=True, exist_ok=True)
    entries: list[Entry] = []
    with run_limits(seconds=seconds):
        for zm in load_zoo(zoo, only=list(models)):
            log(f"[{zm.name}] original")
            pinned = {k: list(v) for k, v in zm.input_shapes.items()}
            try:
                shapes = input_shapes(zm.path, zm.dims, zm.input_shapes)
                base = _original(zm.path, out, zm.name)
            except Exception as exc:  # noqa: BLE001 - a model that cannot be read is its row
                entries.append(Entry(zm.name, "original", "", "failed", one_line(f"{type(exc).__name__}: {exc}")))
                continue
            entries.append(Entry(zm.name, "original", base.name, "built", "", zm.dims, pinned))
            for variant in variants:
                kind = model_type(zm.name)
                if variant == "fused" and kind is None:
                    entries.append(Entry(zm.name, variant, "", "n/a", "not a bert/gpt2-like model"))
                    continue
                log(f"[{zm.name}] {variant}")
                dest = out / f"{zm.name}.{variant}.onnx"
                try:
                    error = run_isolated(build_variant, variant, str(base), str(dest), kind, shapes)
                except Exception as exc:  # noqa: BLE001 - a crash or time-out of the child
                    error = one_line(f"{type(exc).__name__}: {exc}")
                entries.append(Entry(zm.name, variant, "" if error else dest.name,
                                     "failed" if error else "built", error, zm.dims, pinned))
    done = {(e.model, e.variant) for e in entries}
    kept = [e for e in read_set(out) if (e.model, e.variant) not in done] if (out / MANIFEST).is_file() else []
    write_text_atomic(out / MANIFEST, json.dumps({"seed": SEED, "samples": SAMPLES,
                                                  "entries": [asdict(e) for e in kept + entries]}, indent=1) + "\n")
    return entries


def read_set(folder: Path) -> list[Entry]:
    """The entries of a set built by :func:`build_set`."""
    data = json.loads((folder / MANIFEST).read_text())
    return [Entry(**e) for e in data["entries"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder to write the set into (default: a new temporary folder)")
    ap.add_argument("--zoo", type=Path, default=ZOO, help="zoo catalogue (default: models/zoo/catalog.json)")
    ap.add_argument("--models", nargs="+", default=[], metavar="NAME", help="zoo models (shell patterns)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS, metavar="VARIANT")
    ap.add_argument("--list", action="store_true", help="name the variants and exit")
    args = ap.parse_args(argv)
    if args.list:
        for v in VARIANTS:
            print(f"{v:13} {WHAT[v]}")
        return 0
    from onnxmem.core.errors import OnnxmemError

    out = args.out or Path(tempfile.mkdtemp(prefix="ort-graphs-"))
    try:
        entries = build_set(out, args.models, args.variants, args.zoo,
                            log=lambda s: print(s, file=sys.stderr, flush=True))
    except (OnnxmemError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for e in entries:
        print(f"{e.model:24} {e.variant:13} {e.status:7} {e.file or e.error}")
    print(f"set written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
