#!/usr/bin/env python
"""``verify`` on every model of the onnx wheel's backend test data: what it proves, what it refuses.

The onnx wheel ships small real models with their test inputs under
``onnx/backend/test/data/``: ``simple`` (sequences, string normalization, Expand, Gradient),
``pytorch-converted`` and ``pytorch-operator`` (PyTorch's early exports, ai.onnx opset 6);
``light`` holds the nine architectures the zoo already runs. For each model this runs
``onnxmem verify MODEL`` as a user does, one process each, with the inputs of the model's first
test data set where every one is numeric (``--inputs``), and sorts what it printed: verified
(with the arena and whether every graph output equals the reference bit for bit, and, on the test
inputs, the outputs the arena run left (``--save-outputs``) against those the test data expects,
within the onnx backend tests' tolerance), or the first words of its one-line error; then the same with ``--optimize all``, the graph onnxruntime runs by
default. Where the line says to convert an old opset, the model converted as
it says (``onnx.version_converter.convert_version(model, 17)``) is verified too: the advice is
held to what it promises. No figure is timed; the table is the same on any machine with the same
onnx and onnxruntime (but for StringNormalizer at ``--optimize all``, which onnxruntime loads only
where the machine has the ``en_US.UTF-8`` locale).

    python bench/bench_backend.py            # the table, and docs/backend-models.md's section (make bench-backend)
    python bench/bench_backend.py --no-doc
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import publish  # noqa: E402
from bench_scale import machine  # noqa: E402

DOC = ROOT / "docs" / "backend-models.md"
DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
SETS = ("simple", "pytorch-converted", "pytorch-operator")
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
#: the kinds of one-line error, by what the line says (the first that matches)
KINDS = (
    ("convert it (onnx.version_converter", "onnxruntime has no kernel at the model's opset (before 7)"),
    ("is a sequence (the output of", "a sequence value: onnxmem plans tensors only"),
    ("is a string tensor", "a string input: onnxmem plans numeric tensors only"),
    ("has dtype string", "a string tensor: onnxmem plans numeric tensors only"),
    ("is not a registered function/op", "an op onnxruntime does not know (Gradient)"),
    ("Failed to construct locale", "onnxruntime's StringNormalizer: the machine lacks the locale"),
)


def _array(pb: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(pb.read_bytes())
    return numpy_helper.to_array(tensor)


def test_inputs(model_path: Path, out: Path) -> Path | None:
    """The inputs of the model's first test data set as an npz file, where each is numeric; else ``None``."""
    sets = sorted(model_path.parent.glob("test_data_set_*"))
    if not sets:
        return None
    model = onnx.load(model_path, load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in weights]
    arrays = {}
    for k, name in enumerate(names):
        pb = sets[0] / f"input_{k}.pb"
        if not pb.is_file():
            return None
        try:
            array = _array(pb)
        except Exception:  # noqa: BLE001 - a sequence or map input is another proto
            return None
        if array.dtype.kind not in "biuf":
            return None
        arrays[name] = array
    np.savez(out, **arrays)
    return out


def verify(model_path: Path, inputs: Path | None, *flags: str) -> tuple[int, str, str]:
    """``onnxmem verify MODEL [--inputs FILE] [FLAGS]`` in a process of its own: exit code, stdout, stderr."""
    cmd = [sys.executable, "-m", "onnxmem", "verify", str(model_path), *flags]
    if inputs is not None:
        cmd += ["--inputs", str(inputs)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600, check=False)
    return done.returncode, done.stdout, done.stderr


def verified_cell(out: str) -> str:
    """``arena N B; outputs identical`` (or ``within tolerance``) from verify's lines."""
    arena = re.search(r"^arena\s+(?:([\d,]+) B|\S+ \S+ \(([\d,]+) B\))", out, re.M)
    outputs = re.findall(r"^  output  .*?: ok, against the reference: (\w+)", out, re.M)
    same = "identical" if outputs and all(o == "identical" for o in outputs) else "within tolerance"
    return f"arena {(arena.group(1) or arena.group(2)) if arena else '?'} B; {len(outputs)} outputs {same}"


def against_expected(model_path: Path, saved: Path) -> tuple[bool, str]:
    """The outputs ``verify --save-outputs`` wrote against those the model's first test data set
    expects, within the onnx backend tests' tolerance (rtol 1e-3, atol 1e-7; NaN where NaN is expected):
    ``(all within, cell)``."""
    model = onnx.load(model_path, load_external_data=False)
    got = dict(np.load(saved))
    worst, ok = 0.0, True
    for k, out in enumerate(model.graph.output):
        expected = _array(sorted(model_path.parent.glob("test_data_set_*"))[0] / f"output_{k}.pb")
        value = got[out.name]
        same = value.shape == expected.shape and np.allclose(value, expected, rtol=1e-3, atol=1e-7, equal_nan=True)
        ok = ok and same
        if value.shape == expected.shape and value.size:
            worst = max(worst, float(np.nanmax(np.abs(value.astype(np.float64) - expected.astype(np.float64)),
                                               initial=0.0)))  # NaN where both are NaN (sqrt of -1)
    return ok, f"{'within' if ok else 'NOT within'} the test data's tolerance (max abs diff {worst:.3g})"


def kind_of(err: str) -> str:
    return next((kind for said, kind in KINDS if said in err), "other: " + err.strip().splitlines()[-1][:160])


def bench(tmp: Path) -> tuple[list[str], Counter[str]]:
    rows, kinds = [], Counter()
    for path in sorted(p for s in SETS for p in (DATA / s).glob("*/model.onnx")):
        name = f"{path.parent.parent.name}/{path.parent.name}"
        inputs = test_inputs(path, tmp / "inputs.npz")
        saved = tmp / "outputs.npz"
        saved.unlink(missing_ok=True)
        code, out, err = verify(path, inputs, *(("--save-outputs", str(saved)) if inputs else ()))
        nodes = len(onnx.load(path, load_external_data=False).graph.node)
        if code == 0:
            kind, cell = "verified", verified_cell(out)
            if inputs:
                within, said = against_expected(path, saved)
                cell += "; " + said
                kinds[f"verified on the test inputs, outputs {'within' if within else 'NOT within'} the "
                      "test data's tolerance"] += 1
        else:
            kind, cell = kind_of(err), f"exit {code}"
            if "convert it (onnx.version_converter" in err:
                converted = tmp / "converted.onnx"
                onnx.save(onnx.version_converter.convert_version(onnx.load(path), 17), converted)
                again, out, err = verify(converted, inputs)
                cell += ("; converted as the line says: verified, " + verified_cell(out) if again == 0
                         else f"; converted as the line says: exit {again}, {kind_of(err)}")
                kinds[f"(an opset before 7) converted as the line says, then {'verified' if again == 0 else 'refused'}"] += 1
        kinds[kind] += 1
        code, out, err = verify(path, inputs, "--optimize", "all")  # the graph onnxruntime runs by default
        optimized = "verified, " + verified_cell(out) if code == 0 else kind_of(err)
        kinds[f"with --optimize all: {'verified' if code == 0 else 'refused'}"] += 1
        rows.append(f"| {name} | {nodes} | {'yes' if inputs else 'random'} | {kind} | {cell} | {optimized} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows, kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-doc", action="store_true", help="print the table, leave docs/backend-models.md alone")
    args = parser.parse_args(argv)
    started = machine()
    with tempfile.TemporaryDirectory(prefix="onnxmem-backend-") as tmp:
        rows, kinds = bench(Path(tmp))
    lines = [
        "- command: `python bench/bench_backend.py` (`make bench-backend`)",
        f"- machine: {started}",
        f"- onnx {onnx.__version__}, onnxruntime {__import__('onnxruntime').__version__}; "
        f"{len(rows)} models of {', '.join(SETS)}",
        "",
        "| outcome | models |",
        "|---|---:|",
        *(f"| {k} | {n} |" for k, n in kinds.most_common() if not k.startswith(("(an opset", "with --", "verified on"))),
        *(f"| {k} | {n} |" for k, n in sorted(kinds.items()) if k.startswith(("(an opset", "with --", "verified on"))),
        "",
        "| model | nodes | test inputs | outcome | what verify printed | `verify --optimize all` |",
        "|---|---:|---|---|---|---|",
        *rows,
    ]
    return publish(DOC, "bench-backend", "\n".join(lines) + "\n", doc=not args.no_doc)


if __name__ == "__main__":
    raise SystemExit(main())
