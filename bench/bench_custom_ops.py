#!/usr/bin/env python
"""Models with custom ops (onnxruntime-extensions' ``ai.onnx.contrib`` kernels) planned, verified and fitted.

A custom op runs in onnxruntime only through the library that implements it, and no shape
inference knows it. For each model this runs the commands a user runs, one process each: without
the library (what the one line says), then ``plan --measure-shapes --custom-op-library LIB``
(the shapes measured by running the model with the library), ``verify`` with it (every node in
one arena, the custom kernels too, against onnxruntime's ordinary run), and, for a model whose
value_info declares the custom ops' outputs in its batch dim, a range plan and ``fit`` over the
batch; and onnxruntime's fixed cost measured with and without the library loaded (``fit
--runtime plan``). No figure is timed: the table is the same on a busy machine and an idle one
but for the fixed cost and fit's measured session, which are resident sizes of real processes.

    python bench/bench_custom_ops.py            # the table, and docs/custom-ops.md's section (make bench-custom-ops)
    python bench/bench_custom_ops.py --no-doc
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import publish  # noqa: E402
from bench_scale import machine  # noqa: E402

DOC = ROOT / "docs" / "custom-ops.md"
CONTRIB = "ai.onnx.contrib"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
FLOAT = TensorProto.FLOAT


def _model(name: str, nodes: list, inputs: list, outputs: list, weights: dict[str, np.ndarray],
           info: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(v, k) for k, v in weights.items()],
                              value_info=info or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(CONTRIB, 1)])
    model.ir_version = 8
    return model


def negpos_inverse(batch: int | str, declared: bool = False) -> onnx.ModelProto:
    """x[batch,16] -> Relu -> NegPos -> Sub -> MatMul by Inverse(w) -> Tanh (``declared``: value_info
    gives NegPos's and Inverse's outputs, in the batch dim)."""
    rng = np.random.RandomState(0)
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("NegPos", ["a"], ["neg", "pos"], domain=CONTRIB),
             helper.make_node("Sub", ["pos", "neg"], ["b"]),
             helper.make_node("Inverse", ["w"], ["winv"], domain=CONTRIB),
             helper.make_node("MatMul", ["b", "winv"], ["c"]),
             helper.make_node("Tanh", ["c"], ["y"])]
    f = lambda n, s: helper.make_tensor_value_info(n, FLOAT, s)  # noqa: E731
    info = [f("neg", [batch, 16]), f("pos", [batch, 16]), f("winv", [16, 16])] if declared else None
    w = (rng.randn(16, 16) * 0.1 + np.eye(16)).astype(np.float32)
    return _model("negpos_inverse", nodes, [f("x", [batch, 16])], [f("y", [batch, 16])], {"w": w}, info)


def spectrogram_classifier(samples: int = 16000) -> onnx.ModelProto:
    """pcm[1,samples] -> StftNorm (n_fft 400, hop 160, Hann) -> log -> 2 dense layers over the
    frequencies, mean over time -> 10 scores: an audio front end computed by a custom kernel."""
    rng = np.random.RandomState(0)
    weights = {"n_fft": np.array(400, np.int64), "hop": np.array(160, np.int64),
               "window": np.hanning(400).astype(np.float32), "frame": np.array(400, np.int64),
               "eps": np.array(1e-6, np.float32), "w1": (rng.randn(201, 64) * 0.05).astype(np.float32),
               "w2": (rng.randn(64, 10) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("StftNorm", ["pcm", "n_fft", "hop", "window", "frame"], ["spec"], domain=CONTRIB),
             helper.make_node("Add", ["spec", "eps"], ["spec_eps"]),
             helper.make_node("Log", ["spec_eps"], ["logspec"]),
             helper.make_node("Transpose", ["logspec"], ["frames"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["frames", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["h_relu"]),
             helper.make_node("ReduceMean", ["h_relu"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["pooled", "w2"], ["scores"])]
    return _model("spectrogram", nodes, [helper.make_tensor_value_info("pcm", FLOAT, [1, samples])],
                  [helper.make_tensor_value_info("scores", FLOAT, [1, 10])], weights)


def onnxmem(*args: object, timeout: int = 900) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "onnxmem", *map(str, args)], capture_output=True, text=True,
                          env=ENV, cwd=ROOT, timeout=timeout, check=False)
    return done.returncode, done.stdout, done.stderr


def _said(err: str) -> str:
    line = err.strip().splitlines()[-1] if err.strip() else "(nothing)"
    cut = line.find("; ")
    return (line[cut + 2:] if cut > 0 else line)[:150].replace("|", "\\|")


def _planned(out: str) -> str:
    plan = json.loads(out)
    gap = "at the bound" if plan["arena_size"] == plan["lower_bound"] else f"bound {plan['lower_bound']:,} B"
    return f"arena {plan['arena_size']:,} B, {gap}; {len(plan['tensors'])} tensors"


def _verified(code: int, out: str, err: str) -> str:
    if code != 0:
        return f"exit {code}: {_said(err)}"
    outputs = re.findall(r"^  output  .*?: ok, against the reference: (\w+)", out, re.M)
    executed = re.search(r"^executed\s+(\d+) nodes in one cpu arena", out, re.M)
    return (f"verified: {executed.group(1) if executed else '?'} nodes in one arena, "
            f"{len(outputs)} outputs {'identical' if all(o == 'identical' for o in outputs) else 'within tolerance'}")


def model_rows(tmp: Path, library: str) -> list[str]:
    rows = []
    cases = [("negpos_inverse, batch 8", negpos_inverse(8), "NegPos, Inverse"),
             ("negpos_inverse, batch 4096", negpos_inverse(4096), "NegPos, Inverse"),
             ("spectrogram (1 s at 16 kHz)", spectrogram_classifier(), "StftNorm")]
    for name, model, ops in cases:
        path = tmp / "model.onnx"
        onnx.save(model, path)
        code, _, err = onnxmem("plan", path, "--measure-shapes")
        without = f"exit {code}: {_said(err)}"
        code, out, err = onnxmem("plan", path, "--measure-shapes", "--custom-op-library", library, "--json")
        planned = _planned(out) if code == 0 else f"exit {code}: {_said(err)}"
        verified = _verified(*onnxmem("verify", path, "--measure-shapes", "--custom-op-library", library))
        rows.append(f"| {name} | {ops} | {len(model.graph.node)} | {without} | {planned} | {verified} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def fit_lines(tmp: Path, library: str) -> list[str]:
    """The declared model over a batch range: the range plan, fit at 256 MiB, and the fixed cost
    measured with and without the library."""
    path = tmp / "declared.onnx"
    onnx.save(negpos_inverse("N", declared=True), path)
    code, out, err = onnxmem("plan", path, "--dim", "N=1:1000000", "-o", tmp / "range.json")
    pieces = json.loads((tmp / "range.json").read_text())["range"]["pieces"] if code == 0 else None
    ranged = (f"`plan --dim N=1:1000000` (no library needed: value_info sizes the custom ops): "
              f"{len(pieces)} piece, arena `{pieces[0]['arena']}` bytes" if pieces
              else f"range plan: exit {code}: {_said(err)}")
    code, out, err = onnxmem("fit", path, "--dim", "N=1:1000000", "--memory", "256MiB", "--json",
                             "--custom-op-library", library)
    fitted = (f"fit in 256 MiB (a default onnxruntime session of the graph it builds, measured): "
              f"N={json.loads(out)['fit']['N']:,}" if code == 0 else f"fit: exit {code}: {_said(err)}")
    fixed = {}
    for given in ((), ("--custom-op-library", library)):
        code, out, err = onnxmem("fit", path, "--dim", "N=1:64", "--memory", "1GiB", "--runtime", "plan",
                                 "--optimize", "none", "--json", *given)
        fixed[bool(given)] = json.loads(out)["items"]["fixed"] if code == 0 else None
    cost = (f"onnxruntime's fixed cost of a CPU session, measured: {fixed[False]:,} B without the library, "
            f"{fixed[True]:,} B with it loaded (+{fixed[True] - fixed[False]:,} B)"
            if None not in fixed.values() else f"fixed cost: not measured ({fixed})")
    return [f"- {ranged}", f"- {fitted}", f"- {cost}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-doc", action="store_true", help="print the table, leave docs/custom-ops.md alone")
    args = parser.parse_args(argv)
    import onnxruntime
    import onnxruntime_extensions

    library = onnxruntime_extensions.get_library_path()
    started = machine()
    with tempfile.TemporaryDirectory(prefix="onnxmem-custom-ops-") as tmp:
        rows = model_rows(Path(tmp), library)
        fits = fit_lines(Path(tmp), library)
    lines = [
        "- command: `python bench/bench_custom_ops.py` (`make bench-custom-ops`)",
        f"- machine: {started}",
        f"- onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"onnxruntime-extensions {onnxruntime_extensions.__version__}",
        "",
        "| model | custom ops | nodes | `plan --measure-shapes` without the library | with `--custom-op-library` "
        "| `verify` with it |",
        "|---|---|---:|---|---|---|",
        *rows,
        "",
        "The model `negpos_inverse` with value_info giving its custom ops' outputs in the batch dim `N`:",
        "",
        *fits,
    ]
    return publish(DOC, "bench-custom-ops", "\n".join(lines) + "\n", doc=not args.no_doc)


if __name__ == "__main__":
    raise SystemExit(main())
