"""Seeded fuzzing of the ``onnxmem`` command line: mutation families, a runner, the checks.

A case is a pure function of ``(family, seed)``: the family builds the files of
the case (a mutated model, a corrupted plan, a hostile CSV) in a fresh folder and
names the command to run on them. Layout of a case folder, which is also the
working directory of the run::

    <case>/model/     the input files (model, external data, plan, CSV)
    <case>/outside/   a canary file the command must never read
    <case>/out/       the only place the command may write, and only the named outputs

The runner executes ``onnxmem`` in long-lived worker processes (each imports
onnxmem once, then runs ``onnxmem.cli.main`` per case with file descriptors 1 and
2 redirected to files, exactly as a subprocess would see them), under an address
space limit and a wall-clock bound enforced by the parent, which kills and
replaces a worker that overruns. An audit hook in the worker records every file
opened for reading outside the allowed paths, every write outside ``out/``, every
process started, and every compilation of source text that carries the payload
marker. The parent snapshots the case folder before and after and checks, per
case (``check_result``):

- exit 0 with every named output present and every plan valid against
  ``onnxmem/schema/plan.schema.json``, or exit 1 (3 from ``verify``: the plan is
  wrong; 4 from ``pack``: no fit) with exactly one line on stderr;
- no ``Traceback``; no raw control characters (names are printed escaped);
- no file created, changed or removed in the case folder except the named
  outputs, and no named output at all when the command failed (all or nothing);
- no read outside the model's folder (audit hook, and the canary's access time
  for reads made by native code); no payload trace (a ``PWNED`` file, a started
  process, payload text compiled);
- no run past the time bound, no ``MemoryError`` under the address space limit.

``tools/fuzz.py`` is the long run; ``tests/test_fuzz.py`` runs a small seeded
sample in the default suite.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import multiprocessing as mp
import os
import random
import shutil
import stat
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from onnxmem.solvers.pack import EXIT_NO_PLAN

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_MODELS = ROOT / "models"
SCHEMA_PATH = ROOT / "onnxmem" / "schema" / "plan.schema.json"
#: every code-execution payload names this file; its presence anywhere is a failure
MARK = "PWNED"
CANARY = "outside/canary.bin"

MODEL_COMMANDS = ("plan", "measure", "verify", "compare")
PLAN_COMMANDS = ("verify", "show", "plot")
MODEL_FAMILIES = ("bytes", "struct", "dims", "payload", "extdata", "nesting", "huge", "names",
                  "outputs")
FAMILIES = (*MODEL_FAMILIES, "plans", "csv")

#: failure classes, in report order
CLASSES = ("traceback", "hang", "partial", "stray-write", "stray-read", "pwned", "memory",
           "crash", "bad-exit", "noisy-error", "raw-control", "invalid-plan", "missing-output",
           "wrong-answer", "unsafe-accepted", "input-changed", "harness")


# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One run of the CLI, reproducible from ``(family, seed)``."""

    family: str
    seed: int
    command: str
    argv: list[str]
    #: paths (relative to the case folder) the command must create on success, and only then
    outputs: list[str] = field(default_factory=list)
    #: outputs that are JSON plans, validated against the schema on success
    plan_outputs: list[str] = field(default_factory=list)
    #: absolute paths outside the case folder the command is told to read (``/dev/zero``)
    named_reads: list[str] = field(default_factory=list)
    #: exit codes that mean a clean refusal besides 0 and 1
    ok_codes: tuple[int, ...] = ()
    note: str = ""
    #: for ``pack``: the CSV the answer is checked against
    csv_input: str | None = None
    #: the command must refuse (an output that is an input, another output or a special file)
    must_fail: bool = False

    @property
    def key(self) -> str:
        return f"{self.family}:{self.seed}"


@dataclass
class Base:
    """A model of the corpus: its files and the flags it needs to plan."""

    name: str
    main: str                      # file name of the model inside its folder
    files: dict[str, bytes]        # every file of the model's folder
    args: list[str] = field(default_factory=list)
    plan_json: str | None = None   # a valid plan of it, for the plan family

    def model(self) -> Any:
        import onnx

        return onnx.load_from_string(self.files[self.main])


def _rng(family: str, seed: int) -> random.Random:
    return random.Random(f"{family}:{seed}")


# ---------------------------------------------------------------- small real models


def _opset() -> list[Any]:
    from onnx import helper

    return [helper.make_opsetid("", 17)]


def _finish(graph: Any, name: str) -> Any:
    from onnx import helper

    model = helper.make_model(graph, opset_imports=_opset(), producer_name="onnxmem-fuzz")
    model.ir_version = 8
    return model


def _w(name: str, shape: list[int], seed: int) -> Any:
    import numpy as np
    from onnx import numpy_helper

    r = np.random.default_rng(seed)
    return numpy_helper.from_array(r.standard_normal(shape).astype(np.float32) * 0.1, name)


def build_mlp() -> Any:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
        helper.make_node("MatMul", ["a1", "w2"], ["h2"], name="mm2"),
        helper.make_node("Add", ["h2", "b2"], ["h3"], name="add2"),
        helper.make_node("Softmax", ["h3"], ["y"], name="softmax", axis=-1),
    ]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [_w("w1", [16, 32], 1), _w("w2", [32, 8], 2), _w("b2", [8], 3)],
        value_info=[helper.make_tensor_value_info("a1", TensorProto.FLOAT, [2, 32])],
    )
    return _finish(g, "mlp")


def build_views() -> Any:
    """Reshape, Transpose, Concat, Split, Slice: the aliasing rules' favourite ops."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array([2, 4, 8], dtype=np.int64), "shape3"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "s0"),
        numpy_helper.from_array(np.array([4], dtype=np.int64), "s4"),
        numpy_helper.from_array(np.array([4, 4], dtype=np.int64), "split"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape3"], ["v"], name="reshape"),
        helper.make_node("Transpose", ["v"], ["t"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Split", ["t", "split"], ["p", "q"], name="split", axis=2),
        helper.make_node("Concat", ["q", "p"], ["c"], name="concat", axis=2),
        helper.make_node("Slice", ["c", "s0", "s4"], ["sl"], name="slice"),
        helper.make_node("Sigmoid", ["sl"], ["y"], name="sigmoid"),
    ]
    g = helper.make_graph(
        nodes, "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return _finish(g, "views")


def build_conv() -> Any:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Conv", ["img", "k1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["m1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["m1", "k2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "m1"], ["s"], name="residual"),
        helper.make_node("GlobalAveragePool", ["s"], ["y"], name="gap"),
    ]
    g = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
        [_w("k1", [4, 3, 3, 3], 4), _w("k2", [4, 4, 3, 3], 5)],
    )
    return _finish(g, "conv")


def build_dynamic() -> Any:
    """An input with a symbolic batch: plans only with ``--dim batch=2``."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Tanh", ["h"], ["y"], name="tanh"),
    ]
    g = helper.make_graph(
        nodes, "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [_w("w", [16, 16], 6)],
    )
    return _finish(g, "dynamic")


def build_external() -> tuple[Any, bytes]:
    """The MLP with ``w1`` stored in ``weights.bin`` next to the model."""
    from onnx import TensorProto

    model = build_mlp()
    init = next(i for i in model.graph.initializer if i.name == "w1")
    raw = init.raw_data or _w("w1", [16, 32], 1).raw_data
    pad = b"\0" * 64
    blob = pad + raw
    init.ClearField("raw_data")
    init.ClearField("float_data")
    init.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", str(len(pad))), ("length", str(len(raw)))):
        e = init.external_data.add()
        e.key, e.value = k, v
    return model, blob


def build_nested(depth: int, kinds: list[str]) -> Any:
    """``depth`` levels of If (then branch nests further) and Loop (trip count 1) bodies.

    The innermost body reads the top-level input ``x`` from the outer scope. The
    graphs are filled in place (a copy of a message nested past protobuf's depth
    limit fails), so any depth can be written, including ones no reader accepts.
    """
    from onnx import AttributeProto, GraphProto, TensorProto, helper

    vec = [1, 8]

    def vi(name: str, elem: int, shape: list[int]) -> Any:
        return helper.make_tensor_value_info(name, elem, shape)

    def node(g: Any, op: str, inputs: list[str], outputs: list[str], name: str) -> Any:
        n = g.node.add()
        n.op_type, n.name = op, name
        n.input.extend(inputs)
        n.output.extend(outputs)
        return n

    def graph_attr(n: Any, name: str) -> Any:
        a = n.attribute.add()
        a.name, a.type = name, AttributeProto.GRAPH
        return a.g

    def fill(g: Any, i: int) -> str:
        if i == depth:
            node(g, "Relu", ["x"], [f"inner_{i}"], f"relu_{i}")
            return f"inner_{i}"
        if kinds[i] == "if":
            n = node(g, "If", ["c"], [f"out_{i}"], f"if_{i}")
            then_g = graph_attr(n, "then_branch")
            then_g.name = f"then_{i}"
            inner = fill(then_g, i + 1)
            then_g.output.add().CopyFrom(vi(inner, TensorProto.FLOAT, vec))
            else_g = graph_attr(n, "else_branch")
            else_g.name = f"else_{i}"
            node(else_g, "Neg", ["x"], [f"else_{i}"], f"neg_{i}")
            else_g.output.add().CopyFrom(vi(f"else_{i}", TensorProto.FLOAT, vec))
            return f"out_{i}"
        n = node(g, "Loop", ["trip", "c", "x"], [f"out_{i}"], f"loop_{i}")
        body: GraphProto = graph_attr(n, "body")
        body.name = f"body_{i}"
        for name, elem, shape in ((f"it_{i}", TensorProto.INT64, []), (f"cin_{i}", TensorProto.BOOL, []),
                                  (f"v_{i}", TensorProto.FLOAT, vec)):
            body.input.add().CopyFrom(vi(name, elem, shape))
        inner = fill(body, i + 1)
        node(body, "Identity", [f"cin_{i}"], [f"cout_{i}"], f"cond_{i}")
        node(body, "Add", [f"v_{i}", inner], [f"vout_{i}"], f"add_{i}")
        body.output.add().CopyFrom(vi(f"cout_{i}", TensorProto.BOOL, []))
        body.output.add().CopyFrom(vi(f"vout_{i}", TensorProto.FLOAT, vec))
        return f"out_{i}"

    model = _finish(helper.make_graph(
        [], "nested", [vi("x", TensorProto.FLOAT, vec), vi("c", TensorProto.BOOL, [])],
        [vi("y", TensorProto.FLOAT, vec)], [helper.make_tensor("trip", TensorProto.INT64, [], [1])],
    ), "nested")
    out = fill(model.graph, 0)
    node(model.graph, "Sigmoid", [out], ["y"], "sigmoid")
    return model


def build_huge(n: int, shape: str, rng: random.Random) -> Any:
    """``n`` nodes: a chain of unary ops, a random DAG of Adds, or a wide fan-out."""
    from onnx import TensorProto, helper

    vec = [1, 8]
    nodes = []
    names = ["x"]
    for i in range(n):
        if shape == "chain":
            op = ("Relu", "Sigmoid", "Tanh", "Neg")[i % 4]
            nodes.append(helper.make_node(op, [names[-1]], [f"t{i}"], name=f"n{i}"))
        elif shape == "dag":
            a = names[rng.randrange(max(0, len(names) - 20), len(names))]
            b = names[-1]
            nodes.append(helper.make_node("Add", [a, b], [f"t{i}"], name=f"n{i}"))
        else:  # fan: every node reads x, the last sums a window
            if i % 50 == 49:
                nodes.append(helper.make_node("Sum", names[-49:], [f"t{i}"], name=f"n{i}"))
            else:
                nodes.append(helper.make_node("Relu", ["x"], [f"t{i}"], name=f"n{i}"))
        names.append(f"t{i}")
    g = helper.make_graph(
        nodes, f"huge_{shape}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, vec)],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, vec)],
    )
    return _finish(g, "huge")


# -------------------------------------------------------------------------- corpus


class Corpus:
    """Base models (built here and shipped in ``models/``) with a valid plan of each."""

    def __init__(self, root: Path, shipped: bool = True) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.bases: list[Base] = []
        for name, model in (("mlp", build_mlp()), ("views", build_views()),
                            ("conv", build_conv())):
            self.bases.append(Base(name, "model.onnx", {"model.onnx": model.SerializeToString()}))
        self.bases.append(Base("dynamic", "model.onnx",
                               {"model.onnx": build_dynamic().SerializeToString()},
                               ["--dim", "batch=2"]))
        ext, blob = build_external()
        self.bases.append(Base("external", "model.onnx",
                               {"model.onnx": ext.SerializeToString(), "weights.bin": blob}))
        self.bases.append(Base("nested3", "model.onnx",
                               {"model.onnx": build_nested(3, ["if", "loop", "if"]).SerializeToString()}))
        if shipped:
            for p in sorted(SHIPPED_MODELS.glob("*.onnx")):
                files = {p.name: p.read_bytes()}
                args: list[str] = []
                if p.name == "external_data.onnx":
                    files["external_data.bin"] = (SHIPPED_MODELS / "external_data.bin").read_bytes()
                if p.name == "transformer_block.onnx":
                    args = ["--dim", "batch=1", "--dim", "seq=8"]
                self.bases.append(Base(p.stem, p.name, files, args))
        self._plans_made = False

    def small(self) -> list[Base]:
        """The bases cheap enough to run through onnxruntime many times."""
        return [b for b in self.bases if sum(len(v) for v in b.files.values()) < 300_000]

    def by_name(self, name: str) -> Base:
        return next(b for b in self.bases if b.name == name)

    def ensure_plans(self) -> None:
        """Plan every base once with the library (the plans the plan family corrupts)."""
        if self._plans_made:
            return
        from onnxmem.pipeline import PlanOptions, plan_model

        for b in self.bases:
            folder = self.root / "bases" / b.name
            folder.mkdir(parents=True, exist_ok=True)
            for fname, data in b.files.items():
                (folder / fname).write_bytes(data)
            pairs = (b.args[i + 1].split("=") for i in range(0, len(b.args), 2) if b.args[i] == "--dim")
            opts = PlanOptions(dims={k: int(v) for k, v in pairs})  # the CLI's defaults
            try:
                data = json.loads(plan_model(str(folder / b.main), opts).plan.to_json())
            except Exception:  # a base this branch cannot plan gets no plan cases
                b.plan_json = None
                continue
            # timings and the corpus path vary between runs; fix them so a case is a
            # function of (family, seed) alone
            data["plan_seconds"] = 0.5
            if isinstance(data.get("solver"), dict):
                data["solver"]["seconds"] = 0.25
            if isinstance(data.get("model"), dict):
                data["model"]["path"] = f"model/{b.main}"
            b.plan_json = json.dumps(data, indent=1)
        self._plans_made = True
        if not any(b.plan_json for b in self.bases):
            raise RuntimeError("no base model could be planned; the plan family has nothing to corrupt")


# ---------------------------------------------------------------- hostile strings

PAYLOADS = (
    "__import__('os').system('touch PWNED')",
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__=='_wrap_close'][0]"
    ".__init__.__globals__['system']('touch PWNED')",
    "eval(\"__import__('os').system('touch PWNED')\")",
    "exec(\"import os; os.system('touch PWNED')\")",
    "open('PWNED', 'w').write('x')",
    "(lambda: __import__('os').system('touch PWNED'))()",
    "batch + __import__('os').system('touch PWNED')",
    "getattr(__import__('os'), 'system')('touch PWNED')",
    "__builtins__['__import__']('os').system('touch PWNED')",
    "[m for m in [__import__('os')]][0].system('touch PWNED')",
    "__import__('pathlib').Path('PWNED').touch()",
    "__import__('subprocess').call(['touch', 'PWNED'])",
    "batch\n__import__('os').system('touch PWNED')",
    "2*(__import__('os').system('touch PWNED'))",
    "Symbol('x').__class__.__init__.__globals__['__builtins__']['__import__']('os')"
    ".system('touch PWNED')",
    "max(batch, __import__('os').system('touch PWNED'))",
)
#: strings that hang or blow up an evaluator
BOMBS = ("9**9**9**9", "(2**2**40)", "10**10**10", "2**(2**64)", "factorial(10**9)",
         "'a'*10**12", "((((((((((((((((((((((((((((((((x))))))))))))))))))))))))))))))))" * 40)
HOSTILE_DIMS = (
    "", " ", "batch\nseq", "ba\x00tch", "b" * 100_000, "batch*seq+1", "batch//0", "batch % 0",
    "max(batch,seq)", "Symbol('x')", "x.__class__", "lambda: 0", "1e309", "nan", "oo", "zoo",
    "I", "E", "pi", "N", "S", "Q", "-1", "0", "2**62", "batch - batch", "\u202ebatch", "b\x1b[31mred",
    "Integer(2**70)", "Rational(1, 3)", "{}", "[]", "%s%n", "batch if 1 else 0", "(batch", "batch)",
)
HOSTILE_NAMES = (
    "new\nline", "car\rriage", "\x1b[31mRED\x1b[0m", "\x1b]0;title\x07", "nul\x00byte", "tab\tname",
    "n" * 100_000, "\u202eevil", "../../etc/passwd", "/abs/name", "%s%n%x", "{0}{1}", "'quote\"",
    "line1\nerror: fake second line", "\x7f\x08bs", "\u2028sep", "名前", " ", "a" * 4096 + "\n",
)
ABSURD_DIMS = (2**40, 2**62, 2**63 - 1, -1, -(2**40), 0, 2**31, 2**32 + 1, 10**6, -(2**63))


# ------------------------------------------------------------------ case building


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _model_args(command: str, model: str, base_args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """argv, outputs and plan outputs of a model command."""
    if command == "plan":
        return (["plan", model, "-o", "out/plan.json", "--annotate", "out/annotated.onnx", *base_args],
                ["out/plan.json", "out/annotated.onnx"], ["out/plan.json"])
    if command == "measure":
        return (["plan", model, "--measure-shapes", "-o", "out/plan.json", *base_args],
                ["out/plan.json"], ["out/plan.json"])
    if command == "verify":
        return ["verify", model, *base_args], [], []
    return ["compare", model, *base_args], [], []


def _model_case(family: str, seed: int, command: str, folder: Path, base: Base,
                files: dict[str, bytes], note: str, extra_args: list[str] | None = None) -> Case:
    _write(folder / "model", files)
    args = base.args if extra_args is None else extra_args
    argv, outs, plans = _model_args(command, f"model/{base.main}", args)
    return Case(family, seed, command, argv, outs, plans, note=note,
                ok_codes=(3,) if command == "verify" else ())


def _bytes_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = rng.choice(corpus.small() if command in ("verify", "compare", "measure") else corpus.bases)
    data = bytearray(base.files[base.main])
    how = rng.choice(("flip", "flip", "truncate", "zero", "insert", "splice"))
    if how == "flip":
        n = rng.randint(1, 16)
        for _ in range(n):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        note = f"{n} bit flips"
    elif how == "truncate":
        cut = rng.randrange(len(data))
        data = data[:cut]
        note = f"truncated to {cut} bytes"
    elif how == "zero":
        i = rng.randrange(len(data))
        n = rng.randint(1, 64)
        data[i:i + n] = b"\0" * len(data[i:i + n])
        note = f"{n} bytes zeroed at {i}"
    elif how == "insert":
        i = rng.randrange(len(data))
        blob = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
        data[i:i] = blob
        note = f"{len(blob)} random bytes inserted at {i}"
    else:
        i, j = sorted(rng.randrange(len(data)) for _ in range(2))
        k = rng.randrange(len(data))
        data[k:k] = data[i:j][:4096]
        note = f"bytes {i}:{j} copied to {k}"
    files = dict(base.files)
    files[base.main] = bytes(data)
    return _model_case("bytes", seed, command, folder, base, files, f"{base.name}: {note}")


def _struct_mutate(model: Any, rng: random.Random) -> str:
    from onnx import AttributeProto, TensorProto, helper

    g = model.graph
    nodes = list(g.node)
    what = rng.choice(("drop_node", "dup_node", "rename_input", "rename_output", "dup_output",
                       "reverse", "attr_type", "drop_init", "elem_type", "drop_output",
                       "output_is_input", "bad_op", "opset", "self_loop", "cycle", "drop_input",
                       "attr_garbage", "no_graph_output", "empty_names"))
    if not nodes and what in ("drop_node", "dup_node", "rename_input", "rename_output", "dup_output",
                              "attr_type", "self_loop", "cycle", "attr_garbage", "bad_op"):
        what = "reverse"
    if what == "drop_node":
        n = rng.randrange(len(nodes))
        del g.node[n]
        return f"node {n} dropped"
    if what == "dup_node":
        n = rng.choice(nodes)
        g.node.append(n)
        return f"node {n.name!r} duplicated"
    if what == "rename_input":
        n = rng.choice(nodes)
        if n.input:
            i = rng.randrange(len(n.input))
            n.input[i] = rng.choice(("ghost", "", g.output[0].name if g.output else "ghost"))
            return f"input {i} of {n.name!r} renamed to {n.input[i]!r}"
        return "no input to rename"
    if what == "rename_output":
        n = rng.choice(nodes)
        if n.output:
            n.output[0] = n.output[0] + "_renamed"
            return f"output of {n.name!r} renamed"
        return "no output"
    if what == "dup_output":
        a, b = rng.choice(nodes), rng.choice(nodes)
        if a.output and b.output:
            b.output[0] = a.output[0]
            return f"{b.name!r} also produces {a.output[0]!r}"
        return "no output"
    if what == "reverse":
        rev = list(reversed(nodes))
        del g.node[:]
        g.node.extend(rev)
        return "nodes in reverse order"
    if what in ("attr_type", "attr_garbage"):
        with_attrs = [n for n in nodes if n.attribute]
        if not with_attrs:
            n = rng.choice(nodes)
            n.attribute.append(helper.make_attribute("bogus", "x" * rng.choice((1, 70000))))
            return f"string attribute added to {n.name!r}"
        n = rng.choice(with_attrs)
        a = rng.choice(n.attribute)
        if what == "attr_type":
            name = a.name
            n.attribute.remove(a)
            value = rng.choice(("text", 1.5, 7, [1, 2, 3], [0.5], b"\xff\xfe", -(2**62), 2**62))
            n.attribute.append(helper.make_attribute(name, value))
            return f"attribute {name!r} of {n.name!r} now {value!r}"
        a.type = rng.choice((0, AttributeProto.GRAPH, AttributeProto.TENSOR, AttributeProto.STRINGS,
                             AttributeProto.SPARSE_TENSOR, AttributeProto.TYPE_PROTO))
        return f"attribute {a.name!r} of {n.name!r} has type {a.type}"
    if what == "drop_init":
        if g.initializer:
            del g.initializer[rng.randrange(len(g.initializer))]
            return "an initializer dropped"
        return "no initializer"
    if what == "elem_type":
        vi = rng.choice([*g.input, *g.output, *g.value_info])
        vi.type.tensor_type.elem_type = rng.choice((0, 99, TensorProto.STRING, TensorProto.BOOL,
                                                    TensorProto.FLOAT8E4M3FN, TensorProto.INT4,
                                                    TensorProto.COMPLEX128, -5))
        return f"{vi.name!r} elem_type {vi.type.tensor_type.elem_type}"
    if what == "drop_output":
        if g.output:
            del g.output[0]
        return "first graph output dropped"
    if what == "output_is_input":
        if g.output and g.input:
            g.output[0].name = g.input[0].name
        return "graph output named like the input"
    if what == "bad_op":
        n = rng.choice(nodes)
        n.op_type = rng.choice(("", "NoSuchOp", "If", "Loop", "Scan", "Constant"))
        n.domain = rng.choice(("", "com.evil", "ai.onnx.ml", "com.microsoft"))
        return f"{n.name!r} is now {n.domain}:{n.op_type}"
    if what == "opset":
        model.opset_import[0].version = rng.choice((0, 1, 999, -3, 2**40))
        return f"opset {model.opset_import[0].version}"
    if what == "self_loop":
        n = rng.choice(nodes)
        if n.input and n.output:
            n.input[0] = n.output[0]
        return f"{n.name!r} reads its own output"
    if what == "cycle":
        if len(nodes) >= 2 and nodes[0].input and nodes[-1].output:
            nodes[0].input[0] = nodes[-1].output[0]
            return "first node reads the last node's output"
        return "too small for a cycle"
    if what == "drop_input":
        if g.input:
            del g.input[0]
        return "first graph input dropped"
    if what == "no_graph_output":
        del g.output[:]
        return "no graph outputs"
    for n in nodes:
        n.name = ""
    return "every node name empty"


def _struct_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = rng.choice(corpus.small())
    model = base.model()
    notes = [_struct_mutate(model, rng) for _ in range(rng.randint(1, 3))]
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("struct", seed, command, folder, base, files, f"{base.name}: {'; '.join(notes)}")


def _set_dim(vi: Any, rng: random.Random, value: int | str) -> None:
    shape = vi.type.tensor_type.shape
    if not len(shape.dim):
        shape.dim.add()
    d = shape.dim[rng.randrange(len(shape.dim))]
    if isinstance(value, str):
        d.dim_param = value
    else:
        d.dim_value = value


def _dims_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = rng.choice([b for b in corpus.small() if b.name in ("mlp", "views", "conv", "dynamic",
                                                                "external", "nested3")])
    model = base.model()
    g = model.graph
    where = rng.choice(("input", "input", "output", "value_info"))
    pool = {"input": list(g.input), "output": list(g.output), "value_info": list(g.value_info)}[where]
    if not pool:
        pool, where = list(g.input), "input"
    vi = rng.choice(pool)
    value: int | str
    if rng.random() < 0.45:
        value = rng.choice(ABSURD_DIMS)
    else:
        value = rng.choice((*HOSTILE_DIMS, *BOMBS))
    _set_dim(vi, rng, value)
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("dims", seed, command, folder, base, files,
                       f"{base.name}: {where} {vi.name!r} dim {str(value)[:60]!r}")


def _payload_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    """The code-execution payloads in every place a string of the model lives."""
    from onnx import helper

    payload = PAYLOADS[seed % len(PAYLOADS)]
    base = corpus.by_name(rng.choice(("mlp", "dynamic", "views")))
    model = base.model()
    g = model.graph
    where = rng.choice(("input dim", "output dim", "value_info dim", "input name", "node name",
                        "metadata", "attribute", "doc_string", "initializer name", "all dims"))
    if where == "input dim":
        _set_dim(g.input[0], rng, payload)
    elif where == "output dim":
        _set_dim(g.output[0], rng, payload)
    elif where == "value_info dim":
        if not g.value_info:
            g.value_info.append(helper.make_tensor_value_info(g.node[0].output[0], 1, [2, 32]))
        _set_dim(g.value_info[0], rng, payload)
    elif where == "input name":
        _rename_value(g, g.input[0].name, payload)
    elif where == "node name":
        g.node[0].name = payload
    elif where == "metadata":
        helper.set_model_props(model, {payload: payload})
    elif where == "attribute":
        g.node[-1].attribute.append(helper.make_attribute("note", payload))
    elif where == "doc_string":
        model.doc_string = payload
        g.doc_string = payload
        g.node[0].doc_string = payload
    elif where == "initializer name":
        if g.initializer:
            _rename_value(g, g.initializer[0].name, payload)
    else:
        for vi in [*g.input, *g.output, *g.value_info]:
            for d in vi.type.tensor_type.shape.dim:
                d.dim_param = payload
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("payload", seed, command, folder, base, files,
                       f"{base.name}: payload {seed % len(PAYLOADS)} in {where}", extra_args=[])


def _rename_value(g: Any, old: str, new: str) -> None:
    for n in g.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for i, x in enumerate(n.output):
            if x == old:
                n.output[i] = new
    for coll in (g.input, g.output, g.value_info, g.initializer):
        for v in coll:
            if v.name == old:
                v.name = new


def _extdata_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    """Hostile external-data references: the checks must hold on every path that reads weights."""
    base = corpus.by_name("external")
    model = base.model()
    init = next(i for i in model.graph.initializer if i.external_data)
    info = {e.key: e.value for e in init.external_data}
    mdir = folder / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    what = rng.choice(("missing", "past_end", "huge_length", "nan_length", "text_offset",
                       "negative_offset", "float_offset", "nul_location", "symlink_out",
                       "symlink_loop", "absolute", "dotdot", "fifo", "dev_zero", "directory",
                       "long_location", "empty_location", "dup_keys", "proc", "newline_location",
                       "symlink_chain_out", "hardlink_like", "unknown_key"))
    canary_rel = "../outside/canary.bin"
    canary_abs = str(folder / CANARY)
    if what == "missing":
        info["location"] = "nope.bin"
    elif what == "past_end":
        info["offset"] = str(len(base.files["weights.bin"]) - 8)
    elif what == "huge_length":
        info["length"] = str(rng.choice((2**62, 2**64 + 1, 10**30)))
    elif what == "nan_length":
        info["length"] = rng.choice(("nan", "inf", "-inf", "1e400"))
    elif what == "text_offset":
        info["offset"] = rng.choice(("abc", "", "0x40", " 64", "6\x004", "٦٤"))
    elif what == "negative_offset":
        info["offset"] = str(rng.choice((-64, -(2**63))))
    elif what == "float_offset":
        info["offset"] = "64.0"
    elif what == "nul_location":
        info["location"] = "weights\x00.bin"
    elif what == "symlink_out":
        os.symlink(canary_rel, mdir / "link.bin")
        info["location"] = "link.bin"
    elif what == "symlink_chain_out":
        os.symlink("../outside", mdir / "sub")
        info["location"] = "sub/canary.bin"
    elif what == "symlink_loop":
        os.symlink("loop_b.bin", mdir / "loop_a.bin")
        os.symlink("loop_a.bin", mdir / "loop_b.bin")
        info["location"] = "loop_a.bin"
    elif what == "absolute":
        info["location"] = canary_abs
    elif what == "dotdot":
        info["location"] = canary_rel
    elif what == "fifo":
        os.mkfifo(mdir / "pipe.bin")
        info["location"] = "pipe.bin"
    elif what == "dev_zero":
        info["location"] = "/dev/zero"
    elif what == "directory":
        (mdir / "folder.bin").mkdir()
        info["location"] = "folder.bin"
    elif what == "long_location":
        info["location"] = "x" * 5000 + ".bin"
    elif what == "empty_location":
        info["location"] = rng.choice(("", ".", "./"))
    elif what == "proc":
        info["location"] = "/proc/self/environ"
    elif what == "newline_location":
        info["location"] = "weights\n.bin"
    elif what == "hardlink_like":
        info["location"] = "./sub/../weights.bin"
    del init.external_data[:]
    for k, v in info.items():
        e = init.external_data.add()
        e.key, e.value = k, v
    if what == "dup_keys":
        e = init.external_data.add()
        e.key, e.value = "location", canary_rel
    if what == "unknown_key":
        e = init.external_data.add()
        e.key, e.value = "evil\x1b[31m", "\n" * 3
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("extdata", seed, command, folder, base, files, f"external data: {what}")


def _nesting_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str,
                  max_depth: int) -> Case:
    depth = rng.randint(1, max_depth)
    kinds = [rng.choice(("if", "loop")) for _ in range(depth)]
    model = build_nested(depth, kinds)
    base = Base("nested", "model.onnx", {"model.onnx": model.SerializeToString()})
    return _model_case("nesting", seed, command, folder, base, dict(base.files),
                       f"depth {depth}: {''.join(k[0] for k in kinds)}")


def _huge_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str,
               max_nodes: int) -> Case:
    n = rng.randint(max(1, max_nodes // 4), max_nodes)
    shape = rng.choice(("chain", "dag", "fan"))
    model = build_huge(n, shape, rng)
    base = Base("huge", "model.onnx", {"model.onnx": model.SerializeToString()})
    return _model_case("huge", seed, command, folder, base, dict(base.files), f"{shape} of {n} nodes")


def _names_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    from onnx import helper

    base = corpus.by_name(rng.choice(("mlp", "views", "conv", "external")))
    model = base.model()
    g = model.graph
    name = rng.choice(HOSTILE_NAMES)
    where = rng.choice(("input", "output", "intermediate", "initializer", "node", "metadata",
                        "attribute", "graph", "value_info"))
    if where == "input":
        _rename_value(g, g.input[0].name, name)
    elif where == "output":
        _rename_value(g, g.output[0].name, name)
    elif where == "intermediate":
        _rename_value(g, g.node[0].output[0], name)
    elif where == "initializer":
        if g.initializer:
            _rename_value(g, g.initializer[0].name, name)
    elif where == "node":
        for n in g.node:
            n.name = name if rng.random() < 0.5 else n.name + name
    elif where == "metadata":
        helper.set_model_props(model, {name: name, "k": name})
    elif where == "attribute":
        g.node[0].attribute.append(helper.make_attribute(name[:200] or "x", name))
    elif where == "graph":
        g.name = name
        model.producer_name = name
        model.domain = name
    else:
        g.value_info.append(helper.make_tensor_value_info(name, 1, [2, 2]))
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("names", seed, command, folder, base, files,
                       f"{base.name}: {where} named {name[:40]!r}")


def _outputs_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    """Output paths that must be refused: the input, another output, special files, symlinks."""
    base = corpus.by_name(rng.choice(("mlp", "conv")))
    mdir, odir = folder / "model", folder / "out"
    mdir.mkdir(parents=True, exist_ok=True)
    odir.mkdir(parents=True, exist_ok=True)
    _write(mdir, base.files)
    model = f"model/{base.main}"
    what = rng.choice(("output_is_model", "annotate_is_model", "output_is_annotate", "fifo",
                       "chardev", "symlink_out", "missing_folder", "folder", "plot_over_plan",
                       "generate_fifo"))
    argv: list[str]
    outs: list[str] = []
    if what == "output_is_model":
        argv = ["plan", model, "-o", model]
    elif what == "annotate_is_model":
        argv = ["plan", model, "--annotate", model]
    elif what == "output_is_annotate":
        argv = ["plan", model, "-o", "out/x", "--annotate", "out/x"]
        outs = ["out/x"]
    elif what == "fifo":
        os.mkfifo(odir / "plan.json")
        argv = ["plan", model, "-o", "out/plan.json"]
    elif what == "chardev":
        try:
            os.mknod(odir / "plan.json", 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
        except OSError:
            os.mkfifo(odir / "plan.json")
        argv = ["plan", model, "-o", "out/plan.json"]
    elif what == "symlink_out":
        os.symlink("../outside/canary.bin", odir / "plan.json")
        argv = ["plan", model, "-o", "out/plan.json"]
    elif what == "missing_folder":
        argv = ["plan", model, "-o", "out/none/plan.json"]
    elif what == "folder":
        (odir / "dir.json").mkdir()
        argv = ["plan", model, "-o", "out/dir.json"]
    elif what == "plot_over_plan":
        (mdir / "plan.json").write_text(corpus.by_name(base.name).plan_json or "{}")
        argv = ["plot", "model/plan.json", "-o", "model/plan.json"]
    else:
        os.mkfifo(odir / "net.onnx")
        argv = ["generate", "randwire", "out/net.onnx", "--size", "4"]
    return Case("outputs", seed, argv[0], argv, outs, [], note=f"{base.name}: {what}", must_fail=True)


# plans -------------------------------------------------------------------------


def _mutate_numbers(data: Any, rng: random.Random, value: Any) -> str:
    """Set one numeric field somewhere in the plan to ``value``."""
    spots: list[tuple[Any, Any]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    spots.append((x, k))
                walk(v)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    spots.append((x, i))
                walk(v)

    walk(data)
    if not spots:
        return "no number"
    holder, k = rng.choice(spots)
    holder[k] = value
    return f"field {k!r} = {str(value)[:30]}"


def _plan_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    corpus.ensure_plans()
    bases = [b for b in corpus.small() if b.plan_json]
    base = rng.choice(bases)
    mdir = folder / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    _write(mdir, base.files)
    text = base.plan_json or "{}"
    plan_arg = "model/plan.json"
    named: list[str] = []
    what = rng.choice(("number", "number", "number", "truncate", "flip", "utf8", "deep", "type",
                       "drop_key", "other_model", "model_as_plan", "fifo", "dev_zero", "empty",
                       "all_offsets_zero", "huge_arena", "swap_offsets", "bom", "names",
                       "duplicate_tensor", "many_tensors", "literal"))
    data = json.loads(text)
    raw: bytes | None = None
    note = what
    if what == "number":
        value = rng.choice((2**70, -1, -(2**63), 1.5, float("nan"), float("inf"), 1e308, "12", None,
                            True, 2**63, 10**400))
        note = _mutate_numbers(data, rng, value)
    elif what == "truncate":
        raw = text.encode()[: rng.randrange(len(text))]
    elif what == "flip":
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        raw = bytes(b)
    elif what == "utf8":
        b = bytearray(text.encode())
        i = rng.randrange(len(b))
        b[i:i] = rng.choice((b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80"))
        raw = bytes(b)
    elif what == "deep":
        depth = rng.choice((1000, 100_000))
        key = rng.choice(("tensors", "order", "extra", "model"))
        raw = text.replace(f'"{key}":', f'"{key}": ' + "[" * depth + "]" * depth + ', "x":', 1).encode()
    elif what == "type":
        key = rng.choice(list(data))
        data[key] = rng.choice(([], {}, "x", 0, None, [[]], {"a": 1}))
        note = f"{key} = {data[key]!r}"
    elif what == "drop_key":
        key = rng.choice(list(data))
        del data[key]
        if data.get("tensors") and rng.random() < 0.5:
            t = rng.choice(data["tensors"])
            t.pop(rng.choice(list(t)), None)
        note = f"{key} dropped"
    elif what == "other_model":
        other = rng.choice([b for b in bases if b is not base] or bases)
        data = json.loads(other.plan_json or "{}")
        note = f"plan of {other.name}"
    elif what == "model_as_plan":
        plan_arg = f"model/{base.main}"
    elif what == "fifo":
        os.mkfifo(mdir / "plan.json")
    elif what == "dev_zero":
        plan_arg = "/dev/zero"
        named.append("/dev/zero")
    elif what == "empty":
        raw = rng.choice((b"", b"null", b"[]", b"{}", b"0", b'"plan"', b"\n"))
    elif what == "all_offsets_zero":
        for t in data.get("tensors", []):
            t["offset"] = 0
    elif what == "huge_arena":
        shift = rng.choice((2**40, 2**50, 2**62))
        data["arena_size"] = int(data.get("arena_size", 0)) + shift
        for t in data.get("tensors", []):
            if isinstance(t.get("offset"), int):
                t["offset"] += shift
        note = f"arena and offsets shifted by {shift}"
    elif what == "swap_offsets":
        ts = [t for t in data.get("tensors", []) if t.get("offset") is not None]
        if len(ts) >= 2:
            a, b2 = rng.sample(ts, 2)
            a["offset"], b2["offset"] = b2["offset"], a["offset"]
    elif what == "bom":
        raw = b"\xef\xbb\xbf" + text.encode()
    elif what == "names":
        for t in data.get("tensors", [])[:3]:
            t["name"] = rng.choice(HOSTILE_NAMES)
        if data.get("order"):
            data["order"][0] = rng.choice(HOSTILE_NAMES)
    elif what == "duplicate_tensor":
        if data.get("tensors"):
            data["tensors"].append(dict(data["tensors"][0]))
    elif what == "many_tensors":
        if data.get("tensors"):
            t0 = data["tensors"][0]
            data["tensors"].extend(dict(t0, name=f"copy{i}") for i in range(rng.choice((1000, 50_000))))
    else:
        raw = rng.choice((b"NaN", b"Infinity", b"1" * 5000, b'{"schema_version": 1e999}',
                          b'{"a": "\\ud800"}', b"{" * 5000))
    if what not in ("model_as_plan", "fifo", "dev_zero"):
        if raw is None:
            raw = json.dumps(data).encode()
        (mdir / "plan.json").write_bytes(raw)
    outputs: list[str] = []
    # a plan whose live tensors of different groups share bytes must never verify
    unsafe = command == "verify" and what in ("all_offsets_zero", "swap_offsets") and _unsafe(data)
    if command == "verify":
        argv = ["verify", f"model/{base.main}", "--plan", plan_arg, *base.args]
    elif command == "show":
        argv = ["show", plan_arg]
    else:
        fmt = rng.choice((".html", ".html", ".svg", ".png"))
        argv = ["plot", plan_arg, "-o", f"out/plot{fmt}"]
        outputs = [f"out/plot{fmt}"]
    return Case("plans", seed, command, argv, outputs, [], named_reads=named,
                ok_codes=(3,) if command == "verify" else (), note=f"{base.name}: {what}: {note}",
                must_fail=unsafe)


def _unsafe(data: Any) -> bool:
    """Two tensors of different alias groups, both non-empty, live at once, overlapping bytes."""
    ts = [t for t in (data.get("tensors") or []) if isinstance(t, dict)
          and isinstance(t.get("offset"), int) and isinstance(t.get("size"), int) and t["size"] > 0
          and isinstance(t.get("start"), int) and isinstance(t.get("end"), int)]
    for i, a in enumerate(ts):
        for b in ts[i + 1:]:
            if a.get("group", a.get("name")) == b.get("group", b.get("name")):
                continue
            if a["start"] < b["end"] and b["start"] < a["end"] \
                    and a["offset"] < b["offset"] + b["size"] and b["offset"] < a["offset"] + a["size"]:
                return True
    return False


# csv ---------------------------------------------------------------------------


def _csv_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    mdir = folder / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    what = rng.choice(("negative", "huge", "overlap_huge", "non_utf8", "giant_field", "nul",
                       "bad_header", "extra_cols", "offsets", "bom", "many", "odd_ints", "ids",
                       "quoted", "empty", "reversed", "valid"))
    n = rng.randint(2, 12)
    rows: list[list[str]] = []
    for i in range(n):
        lo = rng.randrange(0, 20)
        rows.append([f"b{i}", str(lo), str(lo + rng.randint(1, 10)), str(rng.randint(1, 4096))])
    header = "id,lower,upper,size"
    raw: bytes | None = None
    solver = rng.choice(("exact", "greedy", "greedy", None))
    if what == "negative":
        r = rng.choice(rows)
        r[rng.randrange(1, 4)] = str(rng.choice((-1, -(2**62), -5)))
    elif what == "huge":
        r = rng.choice(rows)
        r[rng.randrange(1, 4)] = rng.choice(("1e30", str(2**62), str(2**63), str(2**64), "9" * 400))
    elif what == "overlap_huge":
        rows = [["a", "0", "2", str(2**62)], ["b", "1", "3", str(2**62)]]
        if rng.random() < 0.5:
            rows.append(["c", "0", "3", str(2**62 + rng.randrange(1000))])
    elif what == "non_utf8":
        raw = (header + "\n").encode() + b"\xff\xfe,0,1,8\n" + b"ok,0,1,\xe9\n"
    elif what == "giant_field":
        rows[0][0] = "x" * rng.choice((131_073, 1_000_000))
    elif what == "nul":
        raw = (header + "\n").encode() + b"a,0,1,8\x00\nb,0,1,8\n"
    elif what == "bad_header":
        header = rng.choice(("", "lower,upper,size", "id;lower;upper;size", "ID,LOWER,UPPER,SIZE",
                             "id,lower,upper,size,offset,more", "id,lower,upper,size,evil"))
    elif what == "extra_cols":
        rows[0].append("7")
    elif what == "offsets":
        header += ",offset"
        for r in rows:
            r.append(str(rng.choice((0, -1, 2**62, 64, 3))))
    elif what == "bom":
        raw = b"\xef\xbb\xbf" + (header + "\n" + "\n".join(",".join(r) for r in rows)).encode()
    elif what == "many":
        rows = []
        for i in range(rng.choice((500, 3000))):
            lo = rng.randrange(0, 1000)
            rows.append([f"b{i}", str(lo), str(lo + rng.randint(1, 50)), str(rng.randint(1, 1 << 20))])
        solver = "greedy"
    elif what == "odd_ints":
        r = rng.choice(rows)
        r[rng.randrange(1, 4)] = rng.choice(("١٢", "+5", " 7 ", "0x10", "1_000", "12.0", "nan", "inf", ""))
    elif what == "ids":
        for r in rows[:3]:
            r[0] = rng.choice(HOSTILE_NAMES).replace("\x00", "0")[:5000]
        rows[-1][0] = rows[0][0]
    elif what == "quoted":
        raw = (header + '\n"a\nb",0,1,8\n"c""d",1,2,16\n').encode()
    elif what == "empty":
        raw = rng.choice((b"", b"\n\n", header.encode(), b"\xef\xbb\xbf"))
    elif what == "reversed":
        r = rng.choice(rows)
        r[1], r[2] = r[2], r[1]
    if raw is None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        buf.write(header + "\n")
        for r in rows:
            w.writerow(r)
        raw = buf.getvalue().encode("utf-8", "surrogateescape")
    (mdir / "problem.csv").write_bytes(raw)
    argv = ["pack", "model/problem.csv", "-o", "out/solution.csv"]
    if solver:
        argv += ["--solver", solver]
    if solver in (None, "exact"):
        argv += ["--timeout", "2"]
    return Case("csv", seed, "pack", argv, ["out/solution.csv"], [], ok_codes=(EXIT_NO_PLAN,),
                note=f"{what} ({solver or 'default'})", csv_input="model/problem.csv")


@dataclass(frozen=True)
class Scale:
    """How big the generated cases get; the default suite keeps them small."""

    max_depth: int = 12
    max_nodes: int = 300


#: the default suite's sample (tests/test_fuzz.py, ``tools/fuzz.py --sample``): 260 cases;
#: every model family cycles through plan, plan --measure-shapes, verify and compare
SAMPLE_COUNTS = {"bytes": 28, "struct": 28, "dims": 28, "payload": 32, "extdata": 32, "nesting": 12,
                 "huge": 8, "names": 24, "outputs": 12, "plans": 30, "csv": 26}
SAMPLE_SCALE = Scale(max_depth=12, max_nodes=300)
#: seconds one run may take in the sample (the long run allows 30)
SAMPLE_BOUND = 10.0


def build_case(corpus: Corpus, family: str, seed: int, folder: Path, scale: Scale = Scale()) -> Case:
    """Write the files of case ``(family, seed)`` under ``folder`` and return the case."""
    rng = _rng(family, seed)
    for sub in ("model", "out", "outside"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    canary = folder / CANARY
    canary.write_bytes(b"canary: onnxmem must never read this file\n" * 64)
    if family in MODEL_FAMILIES:
        command = MODEL_COMMANDS[seed % len(MODEL_COMMANDS)]
        if family == "nesting":
            return _nesting_case(corpus, seed, folder, rng, command, scale.max_depth)
        if family == "huge":
            return _huge_case(corpus, seed, folder, rng, command, scale.max_nodes)
        maker: Callable[..., Case] = {
            "bytes": _bytes_case, "struct": _struct_case, "dims": _dims_case,
            "payload": _payload_case, "extdata": _extdata_case, "names": _names_case,
            "outputs": _outputs_case,
        }[family]
        return maker(corpus, seed, folder, rng, command)
    if family == "plans":
        return _plan_case(corpus, seed, folder, rng, PLAN_COMMANDS[seed % len(PLAN_COMMANDS)])
    if family == "csv":
        return _csv_case(corpus, seed, folder, rng, "pack")
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


# ------------------------------------------------------------------- snapshots


def snapshot(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``folder`` by relative path: kind, size, mtime and content hash.

    Special files are recorded by kind only (a FIFO is never opened).
    """
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, folder)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha1()
                with open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                out[rel] = ("file", st.st_size, h.hexdigest())
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


def _age_canary(folder: Path) -> float:
    """Make the canary's access time older than its change time, so a read moves it."""
    p = folder / CANARY
    st = os.stat(p)
    old = st.st_mtime - 3600
    os.utime(p, (old, st.st_mtime))
    return os.stat(p).st_atime


# ---------------------------------------------------------------------- worker

_EXEC_EVENTS = {"os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn",
                "os.fork", "os.forkpty", "pty.spawn"}
_WRITE_EVENTS = {"os.rename", "os.replace", "os.remove", "os.rmdir", "os.mkdir", "os.truncate",
                 "os.symlink", "os.link", "os.chmod", "os.chown", "os.utime", "os.mkfifo",
                 "os.mknod", "shutil.rmtree", "shutil.move", "shutil.copyfile"}
#: where each write event's folder descriptors sit in its audit arguments, per path argument
_DIR_FDS = {"os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.rename": (2, 3), "os.replace": (2, 3),
            "os.symlink": (2,), "os.link": (2, 3), "os.mkfifo": (2,), "os.mknod": (3,)}
#: write events that act on the target of a link rather than on the link
_FOLLOWING = {"os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.copyfile"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: system files any program may read: devices, and the OS identity (read by ``platform``)
_DEV_OK = ("/dev/null", "/dev/urandom", "/dev/random", "/dev/shm", "/etc/os-release",
           "/usr/lib/os-release")
#: files under /proc that hold the process's secrets; /proc is otherwise readable
_PROC_SECRETS = frozenset({"environ", "mem", "cmdline", "auxv", "maps", "pagemap"})
#: system folders a plot may read: the fonts matplotlib draws with
_FONT_ROOTS = ("/usr/share/fonts", "/usr/local/share/fonts", "/etc/fonts", "/usr/share/fontconfig")


class _Audit:
    """State of the audit hook: active only while a case runs in this worker."""

    def __init__(self) -> None:
        self.active = False
        self.busy = False
        self.read_roots: tuple[str, ...] = ()
        self.write_roots: tuple[str, ...] = ()
        self.named: frozenset[str] = frozenset()
        self.code_roots: tuple[str, ...] = ()
        self.reads: list[str] = []
        self.writes: list[str] = []
        self.execs: list[str] = []
        self.evals: list[str] = []

    @staticmethod
    def _under(path: str, roots: tuple[str, ...]) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    def _cache(self, path: str) -> bool:
        """Bytecode and numba caches in ``__pycache__`` folders of the code roots."""
        return "/__pycache__" in path and self._under(path, self.code_roots)

    def _resolve(self, p: Any, follow: bool = True) -> str | None:
        """The real path; with ``follow=False`` the last component stays unresolved
        (a rename or remove acts on a link, not on its target)."""
        if isinstance(p, int):
            return None
        try:
            s = os.fsdecode(p)
        except (TypeError, ValueError):
            return repr(p)
        if "\x00" in s:
            return s
        if follow:
            return os.path.realpath(s)
        head, tail = os.path.split(os.path.abspath(s))
        return os.path.join(os.path.realpath(head), tail)

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or self.busy:
            return
        if event == "open":
            self.busy = True
            try:
                self._open(args)
            finally:
                self.busy = False
        elif event in _WRITE_EVENTS:
            self.busy = True
            try:
                fds = _DIR_FDS.get(event, ())
                for k, a in enumerate(args[:2]):
                    if isinstance(a, (str, bytes, os.PathLike)):
                        fd = args[fds[k]] if k < len(fds) and fds[k] < len(args) else None
                        if isinstance(fd, int) and not os.path.isabs(os.fsdecode(a)):
                            # relative to a folder descriptor (shutil.rmtree removes this way)
                            with contextlib.suppress(OSError):
                                a = os.path.join(os.readlink(f"/proc/self/fd/{fd}"), os.fsdecode(a))
                        path = self._resolve(a, follow=event in _FOLLOWING)
                        if path is not None and not self._under(path, self.write_roots) \
                                and not self._cache(path):
                            self.writes.append(f"{event} {path}")
            finally:
                self.busy = False
        elif event in _EXEC_EVENTS:
            self.execs.append(f"{event} {str(args)[:300]}")
        elif event == "compile":
            src = args[0] if args else None
            if isinstance(src, (bytes, bytearray)):
                src = bytes(src).decode("utf-8", "replace")
            if isinstance(src, str) and MARK in src:
                self.evals.append(src[:300])

    def _open(self, args: tuple[Any, ...]) -> None:
        path_arg, mode, flags = (list(args) + [None, None, None])[:3]
        path = self._resolve(path_arg)
        if path is None:
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if writing:
            if not self._under(path, self.write_roots) and not self._cache(path):
                self.writes.append(f"open {path} {mode or flags}")
        elif not (self._under(path, self.read_roots) or path in self.named or path in _DEV_OK) \
                or (path.startswith("/proc/") and os.path.basename(path) in _PROC_SECRETS):
            self.reads.append(path)


_AUDIT = _Audit()


def _system_read_roots() -> tuple[str, ...]:
    """The Python installation, its packages, the onnxmem sources and install metadata."""
    import site
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(ROOT / "onnxmem"), "/proc", "/sys",
             *_FONT_ROOTS}
    # the package's own install metadata (an editable install keeps it beside the sources;
    # numba and click read entry points from it)
    roots.update(str(p) for p in ROOT.glob("*.egg-info"))
    roots.update(p for p in sysconfig.get_paths().values() if p)
    roots.update(site.getsitepackages())
    roots.add(os.path.realpath(os.path.dirname(os.__file__)))
    return tuple(sorted(os.path.realpath(r) for r in roots))


def _warm_compiled_code(folder: str) -> None:
    """Compile (or load from numba's cache) the compiled searches once, before any case: on a
    fresh install the first compile takes longer than a case's time bound, and it is set-up,
    not a case's work. The model is written into ``folder`` (cleared afterwards)."""
    import onnx

    from onnxmem.generate import randwire
    from onnxmem.pipeline import PlanOptions, plan_model

    path = os.path.join(folder, "warm.onnx")
    onnx.save(randwire(16, seed=0), path)
    for order, solver in (("exact", "exact"), ("file", "best-greedy"), ("file", "greedy")):
        plan_model(path, PlanOptions(order=order, solver=solver, timeout=60))


def _prepare(scratch: str, mem_limit: int) -> tuple[str, ...]:
    """Set up this process to run cases: limits, scratch folders, warm imports, the audit hook.

    Returns the read roots of the system.
    """
    import ctypes
    import resource
    import signal

    with contextlib.suppress(OSError, AttributeError):  # die with the parent (Linux prctl)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.makedirs(os.path.join(scratch, "tmp"), exist_ok=True)
    os.makedirs(os.path.join(scratch, "mpl"), exist_ok=True)
    os.environ["TMPDIR"] = os.path.join(scratch, "tmp")
    os.environ["MPLCONFIGDIR"] = os.path.join(scratch, "mpl")
    os.environ["MPLBACKEND"] = "Agg"
    tempfile.tempdir = None
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    if mem_limit:
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))
    os.chdir(scratch)
    # third-party imports that write at import time (onnxruntime's native module creates
    # $TMPDIR/.ses) happen here, once, not inside a case
    import matplotlib.font_manager  # noqa: F401  builds the font cache (runs fc-list) once
    import onnxruntime  # noqa: F401
    import sympy  # noqa: F401

    import onnxmem.cli  # noqa: F401  the imports every case shares
    import onnxmem.pipeline  # noqa: F401
    import onnxmem.report  # noqa: F401
    import onnxmem.verify  # noqa: F401
    _warm_compiled_code(os.path.join(scratch, "tmp"))

    _clear(os.path.join(scratch, "tmp"))
    system_roots = _system_read_roots()
    _AUDIT.code_roots = system_roots
    sys.addaudithook(_AUDIT.hook)
    return system_roots


def _worker_main(conn: Any, scratch: str, mem_limit: int) -> None:
    """Import onnxmem once, then run each case sent on ``conn`` in this process."""
    system_roots = _prepare(scratch, mem_limit)
    conn.send("ready")
    while True:
        try:
            req = conn.recv()
        except EOFError:  # the parent is gone
            return
        if req is None:
            return
        conn.send(_run_request(req, scratch, system_roots))


def _run_once(request_path: str, scratch: str, mem_limit: int) -> None:
    """Entry of ``SubprocessWorker``: one case in a fresh interpreter, the result as JSON."""
    system_roots = _prepare(scratch, mem_limit)
    with open(request_path) as fh:
        req = json.load(fh)
    res = _run_request(req, scratch, system_roots)
    with open(os.path.join(scratch, "result.json"), "w") as fh:
        json.dump(res, fh)


def _run_request(req: dict[str, Any], scratch: str, system_roots: tuple[str, ...]) -> dict[str, Any]:
    import onnxmem.cli as cli

    folder = req["folder"]
    out_path = os.path.join(scratch, "stdout")
    err_path = os.path.join(scratch, "stderr")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    code = 0
    exc_name = None
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        os.dup2(fo.fileno(), 1)
        os.dup2(fe.fileno(), 2)
        a = _AUDIT
        a.reads, a.writes, a.execs, a.evals = [], [], [], []
        a.read_roots = (*system_roots, os.path.realpath(os.path.join(folder, "model")),
                        os.path.realpath(os.path.join(folder, "out")), os.path.realpath(scratch))
        a.write_roots = (os.path.realpath(os.path.join(folder, "out")), os.path.realpath(scratch))
        a.named = frozenset(os.path.realpath(p) for p in req["named_reads"])
        old_argv = sys.argv
        sys.argv = ["onnxmem", *req["argv"]]
        os.chdir(folder)
        started = time.perf_counter()
        a.active = True
        try:
            cli.main.main(args=list(req["argv"]), prog_name="onnxmem", standalone_mode=True)
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException as exc:  # what the interpreter would print for an uncaught error
            a.active = False
            exc_name = type(exc).__name__
            with contextlib.suppress(BaseException):
                traceback.print_exc()
            code = 1
        finally:
            a.active = False
            seconds = time.perf_counter() - started
            sys.argv = old_argv
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
            with contextlib.suppress(BaseException):
                sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            os.chdir(scratch)
    leftovers = _clear(os.path.join(scratch, "tmp"))
    return {
        "code": code, "exc": exc_name, "seconds": seconds,
        "stdout": _read_capped(out_path), "stderr": _read_capped(err_path),
        "reads": sorted(set(_AUDIT.reads))[:50], "writes": _AUDIT.writes[:50],
        "execs": _AUDIT.execs[:20], "evals": _AUDIT.evals[:20],
        "tmp_leftovers": leftovers[:20],
        "recycle": exc_name in ("MemoryError", "RecursionError"),
    }


def _clear(folder: str) -> list[str]:
    """Empty ``folder``; return the names it held."""
    names = sorted(os.listdir(folder))
    for name in names:
        p = os.path.join(folder, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(p)
    return names


def _read_capped(path: str, cap: int = 1 << 20) -> dict[str, Any]:
    """Head and tail of a captured stream, its size, and whether it holds a traceback."""
    size = os.path.getsize(path)
    traceback_seen = False
    with open(path, "rb") as fh:
        head = fh.read(cap)
        tail = b""
        if size > cap:
            prev = b""
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                traceback_seen = traceback_seen or b"Traceback" in prev[-16:] + chunk
                prev = chunk
            fh.seek(max(cap, size - 4096))
            tail = fh.read()
    traceback_seen = traceback_seen or b"Traceback (most recent call last)" in head
    return {"head": head.decode("utf-8", "surrogateescape"), "tail": tail.decode("utf-8", "surrogateescape"),
            "size": size, "traceback": traceback_seen}


class Worker:
    """One long-lived worker process; the parent kills and replaces it on a hang."""

    def __init__(self, scratch: Path, mem_limit: int, max_cases: int = 150) -> None:
        self.scratch = scratch
        self.mem_limit = mem_limit
        self.max_cases = max_cases
        self.proc: Any = None
        self.conn: Any = None
        self.cases = 0

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, str(self.scratch.resolve()), self.mem_limit),
                                daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(300):
            raise RuntimeError("fuzz worker did not start in 300 s")
        msg = parent.recv()
        if msg != "ready":
            raise RuntimeError(f"fuzz worker said {msg!r}")
        self.cases = 0

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            self.conn.send(None)
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
            self.proc = None

    def run(self, req: dict[str, Any], bound: float) -> dict[str, Any]:
        if self.proc is None or self.cases >= self.max_cases:
            self.stop()
            self.start()
        self.cases += 1
        self.conn.send(req)
        if not self.conn.poll(bound):
            self.kill()
            return {"code": None, "hang": True, "seconds": bound,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        try:
            res: dict[str, Any] = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join()
            code = self.proc.exitcode
            self.proc = None
            return {"code": None, "crash": f"worker died (exit {code})", "seconds": 0.0,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        if res.get("recycle"):
            self.stop()
        return res


class SubprocessWorker:
    """One fresh interpreter per case (``tools/fuzz.py --subprocess``): nothing is shared
    between cases, and the bound includes the interpreter's start and imports."""

    def __init__(self, scratch: Path, mem_limit: int) -> None:
        self.scratch = scratch
        self.mem_limit = mem_limit

    def stop(self) -> None:
        """Nothing outlives a case."""

    def run(self, req: dict[str, Any], bound: float) -> dict[str, Any]:
        import signal
        import subprocess

        self.scratch.mkdir(parents=True, exist_ok=True)
        request = self.scratch / "request.json"
        result = self.scratch / "result.json"
        request.write_text(json.dumps(req))
        with contextlib.suppress(FileNotFoundError):
            result.unlink()
        for name in ("stdout", "stderr"):
            (self.scratch / name).write_bytes(b"")
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.fuzzing import _run_once; "
                "_run_once(sys.argv[2], sys.argv[3], int(sys.argv[4]))")
        proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(request), str(self.scratch),
                                 str(self.mem_limit)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        started = time.monotonic()
        try:
            proc.wait(bound)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"code": None, "hang": True, "seconds": bound,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        if not result.exists():
            return {"code": None, "crash": f"interpreter died (exit {proc.returncode})",
                    "seconds": time.monotonic() - started,
                    "stdout": _read_capped(str(self.scratch / "stdout")),
                    "stderr": _read_capped(str(self.scratch / "stderr"))}
        res: dict[str, Any] = json.loads(result.read_text())
        res["seconds"] = time.monotonic() - started
        return res


# ---------------------------------------------------------------------- checks

_CONTROL = {chr(c) for c in range(32) if chr(c) not in "\n\t"} | {"\x7f"}


@dataclass
class Outcome:
    case: Case
    code: int | None
    seconds: float
    classes: dict[str, str]
    stderr: str
    stdout: str

    def to_json(self) -> dict[str, Any]:
        return {"family": self.case.family, "seed": self.case.seed, "command": self.case.command,
                "argv": self.case.argv, "note": self.case.note, "code": self.code,
                "seconds": round(self.seconds, 3), "classes": self.classes,
                "stderr": self.stderr[-2000:], "stdout": self.stdout[-1000:]}


def _schema_errors(path: Path) -> str | None:
    import jsonschema

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"not JSON: {exc}"
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    err = next(iter(validator.iter_errors(data)), None)
    return None if err is None else f"{list(err.absolute_path)}: {err.message[:200]}"


def _check_pack(folder: Path, case: Case, stdout: str) -> str | None:
    """An independent check of a ``pack`` answer: offsets valid, bound and height consistent."""
    sol = folder / "out/solution.csv"
    if not sol.exists():
        return None
    try:
        rows = list(csv.reader(io.StringIO(sol.read_text(errors="replace"))))[1:]
        bufs = [(int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows if r]
    except (ValueError, IndexError) as exc:
        return f"solution CSV unreadable: {exc}"
    for lo, up, size, off in bufs:
        if off < 0 or size < 0 or lo < 0 or up < lo:
            return f"solution has negative or inverted numbers: {(lo, up, size, off)}"
    bufs.sort()
    active: list[tuple[int, int, int, int]] = []
    for b in bufs:
        active = [a for a in active if a[1] > b[0]]
        for a in active:
            if a[2] and b[2] and a[3] < b[3] + b[2] and b[3] < a[3] + a[2]:
                return f"buffers live together overlap: {a} and {b}"
        active.append(b)
    height = max((off + size for _lo, _up, size, off in bufs), default=0)
    stats = {}
    for line in stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            stats[parts[0] + (" " + parts[1].split()[0] if parts[0] == "lower" else "")] = parts[1]
    try:
        bound = int(stats.get("lower bound", "0").split()[1]) if "lower bound" in stats else None
    except (ValueError, IndexError):
        bound = None
    try:
        reported = int(stats["height"].split()[0]) if "height" in stats else None
    except ValueError:
        reported = None
    if reported is not None and reported < height:
        return f"reported height {reported} below the solution's {height}"
    if bound is not None and (bound < 0 or (reported is not None and bound > reported)):
        return f"lower bound {bound} impossible (height {reported})"
    return None


def check_result(case: Case, folder: Path, before: dict[str, tuple[Any, ...]],
                 after: dict[str, tuple[Any, ...]], res: dict[str, Any], canary_read: bool,
                 bound: float) -> dict[str, str]:
    """The failure classes of one run, each with its evidence (empty: the run is clean)."""
    bad: dict[str, str] = {}
    out = res["stdout"]["head"] + res["stdout"]["tail"]
    err = res["stderr"]["head"] + res["stderr"]["tail"]
    code = res.get("code")
    if res.get("hang"):
        bad["hang"] = f"killed after {bound:.0f} s"
    if res.get("crash"):
        bad["crash"] = res["crash"]
    if res["stdout"]["traceback"] or res["stderr"]["traceback"] or "Traceback (most recent" in out + err:
        last = [ln for ln in err.splitlines() if ln.strip()][-1:] or ["?"]
        bad["traceback"] = last[0][:300]
    if res.get("exc") in ("MemoryError",) or "MemoryError" in err[-3000:]:
        bad["memory"] = "MemoryError under the address space limit"
    # click's own refusal of a flag value (a path that is a folder): exit 2, its usage text
    usage = code == 2 and err.startswith("Usage: ") and "\nError: " in err
    if code is not None and not usage:
        ok = (0, 1, *case.ok_codes)
        if code not in ok:
            bad["bad-exit"] = f"exit {code}"
        elif code == 0 and case.must_fail and case.family == "plans":
            bad["unsafe-accepted"] = "verify exit 0 on a plan where live tensors share bytes"
        elif code == 0 and case.must_fail:
            bad["bad-exit"] = "exit 0 where the command must refuse"
        if code != 0 and "traceback" not in bad:
            lines = err.splitlines() if res["stderr"]["size"] < 1 << 20 else ["?"] * 3
            if code == EXIT_NO_PLAN and case.command == "pack" and not lines:
                pass
            elif len(lines) != 1 or not lines[0].strip():
                bad["noisy-error"] = f"exit {code} with {len(lines)} stderr lines: {err[:200]!r}"
    if any(c in _CONTROL for c in out + err):
        ch = next(c for c in out + err if c in _CONTROL)
        bad["raw-control"] = f"raw {ch!r} in the output"
    # files
    outputs = set(case.outputs)
    inputs_changed = []
    stray = []
    for rel in sorted(set(before) | set(after)):
        if before.get(rel) == after.get(rel):
            continue
        if rel in outputs and rel not in before:
            continue
        change = f"{rel}: {before.get(rel, ('absent',))[0]} -> {after.get(rel, ('absent',))[0]}"
        if rel.startswith("model"):
            inputs_changed.append(change)
        else:  # a new file, or an existing one (a FIFO, a device, a link) replaced or removed
            stray.append(change)
    if inputs_changed:
        bad["input-changed"] = "; ".join(inputs_changed)[:300]
    writes = list(res.get("writes", [])) + [f"temp file left: {t}" for t in res.get("tmp_leftovers", [])]
    if stray or writes:
        bad["stray-write"] = "; ".join(stray + writes)[:300]
    if any(MARK in rel for rel in after):
        bad["pwned"] = "payload file created"
    if res.get("execs") or res.get("evals"):
        bad["pwned"] = "; ".join(res.get("execs", []) + [f"compiled: {e!r}" for e in res.get("evals", [])])[:300]
    reads = list(res.get("reads", []))
    if canary_read:
        reads.append(f"{CANARY} (read by native code)")
    if reads:
        bad["stray-read"] = "; ".join(reads)[:300]
    created = [o for o in case.outputs if o in after and o not in before]
    if code not in (0, None) or res.get("hang") or res.get("crash"):
        if created:
            bad["partial"] = f"exit {code} left {', '.join(created)}"
    elif code == 0:
        if case.command == "pack" and "written" not in out:
            pass
        else:
            missing = [o for o in case.outputs if after.get(o, ("",))[0] != "file"]
            if missing:
                bad["missing-output"] = f"exit 0 without {', '.join(missing)}"
        for p in case.plan_outputs:
            if after.get(p, ("",))[0] == "file":
                why = _schema_errors(folder / p)
                if why:
                    bad["invalid-plan"] = why
    if case.csv_input and code == 0:
        why = _check_pack(folder, case, out)
        if why:
            bad["wrong-answer"] = why
    return bad


# ---------------------------------------------------------------------- runner


def copy_case(src: Path, dst: Path) -> None:
    """Copy a case folder for reproduction: files, links and FIFOs (never opened)."""
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = os.path.relpath(dirpath, src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in [*filenames, *[d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]]:
            s = os.path.join(dirpath, name)
            d = dst / rel / name
            st = os.lstat(s)
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(s), d)
                elif stat.S_ISFIFO(st.st_mode):
                    os.mkfifo(d)
                elif stat.S_ISREG(st.st_mode) and st.st_size < 64 << 20:
                    shutil.copyfile(s, d)


@dataclass
class RunConfig:
    workers: int = 2
    bound: float = 30.0
    mem_limit: int = 6 << 30
    scale: Scale = Scale()
    failures_dir: Path | None = None
    #: a fresh interpreter per case instead of long-lived workers
    subprocess: bool = False
    deadline: float | None = None  # time.monotonic() after which no new case starts
    keep: bool = False


def iter_cases(counts: dict[str, int], seed: int) -> Iterator[tuple[str, int]]:
    """``(family, seed)`` pairs, interleaved so a time-limited run covers every family."""
    queues = {f: list(range(seed, seed + n)) for f, n in counts.items()}
    while any(queues.values()):
        for f in list(queues):
            if queues[f]:
                yield f, queues[f].pop(0)


def run_cases(pairs: Iterable[tuple[str, int]], root: Path, config: RunConfig,
              on_result: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run every ``(family, seed)`` through the CLI with ``config.workers`` workers."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(root / "corpus")
    corpus.ensure_plans()
    pending = list(pairs)
    lock = threading.Lock()
    results: list[Outcome] = []

    def take() -> tuple[str, int] | None:
        with lock:
            if not pending or (config.deadline is not None and time.monotonic() > config.deadline):
                return None
            return pending.pop(0)

    def loop(index: int) -> None:
        worker: Worker | SubprocessWorker = (
            SubprocessWorker(root / f"worker{index}", config.mem_limit) if config.subprocess
            else Worker(root / f"worker{index}", config.mem_limit))
        try:
            while (item := take()) is not None:
                family, seed = item
                outcome = run_one(corpus, family, seed, root / "cases", worker, config)
                with lock:
                    results.append(outcome)
                    if on_result is not None:
                        on_result(outcome)
        finally:
            worker.stop()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(config.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.sort(key=lambda o: (FAMILIES.index(o.case.family), o.case.seed))
    return results


def run_one(corpus: Corpus, family: str, seed: int, cases_root: Path,
            worker: Worker | SubprocessWorker, config: RunConfig) -> Outcome:
    """Build, run and check one case; a failure of the harness itself is class ``harness``."""
    try:
        return _run_one(corpus, family, seed, cases_root, worker, config)
    except Exception:
        case = Case(family, seed, "?", [], note="the harness failed")
        return Outcome(case, None, 0.0, {"harness": traceback.format_exc()[-600:]}, "", "")


def _run_one(corpus: Corpus, family: str, seed: int, cases_root: Path,
             worker: Worker | SubprocessWorker, config: RunConfig) -> Outcome:
    folder = cases_root / f"{family}-{seed}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with _corpus_lock:
        case = build_case(corpus, family, seed, folder, config.scale)
    before = snapshot(folder)
    atime = _age_canary(folder)
    req = {"folder": str(folder), "argv": case.argv, "named_reads": case.named_reads}
    res = worker.run(req, config.bound)
    read_by_native = os.stat(folder / CANARY).st_atime != atime  # before the snapshot reads it
    after = snapshot(folder)
    classes = check_result(case, folder, before, after, res, read_by_native, config.bound)
    pwned = Path(worker.scratch) / MARK
    if pwned.exists():
        classes["pwned"] = f"payload file in the worker folder: {pwned}"
        pwned.unlink()
    outcome = Outcome(case, res.get("code"), float(res.get("seconds", 0.0)), classes,
                      res["stderr"]["head"][-4000:] + res["stderr"]["tail"], res["stdout"]["head"][-2000:])
    if classes and config.failures_dir is not None:
        dst = config.failures_dir / f"{family}-{case.command}-{seed}"
        if dst.exists():
            shutil.rmtree(dst)
        copy_case(folder, dst / "case")
        (dst / "result.json").write_text(json.dumps(outcome.to_json(), indent=1, ensure_ascii=True))
    if not config.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return outcome


_corpus_lock = threading.Lock()


# ---------------------------------------------------------------------- report


def summary_table(outcomes: list[Outcome]) -> str:
    """A markdown table: family x command -> cases, clean, and a count per failure class."""
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for o in outcomes:
        r = rows.setdefault((o.case.family, o.case.command), {"cases": 0, "clean": 0})
        r["cases"] += 1
        if not o.classes:
            r["clean"] += 1
        for c in o.classes:
            r[c] = r.get(c, 0) + 1
    cols = [c for c in CLASSES if any(c in r for r in rows.values())]
    head = ["family", "command", "cases", "clean", *cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total: dict[str, int] = {}
    for (fam, cmd), r in sorted(rows.items(), key=lambda kv: (FAMILIES.index(kv[0][0]), kv[0][1])):
        lines.append("| " + " | ".join([fam, cmd, *(str(r.get(c, 0)) for c in ["cases", "clean", *cols])]) + " |")
        for k, v in r.items():
            total[k] = total.get(k, 0) + v
    lines.append("| " + " | ".join(["**all**", "", *(str(total.get(c, 0)) for c in ["cases", "clean", *cols])]) + " |")
    return "\n".join(lines) + "\n"


def examples(outcomes: list[Outcome]) -> str:
    """One reproducing case per (failure class, family, command)."""
    seen: set[tuple[str, str, str]] = set()
    lines = []
    for o in outcomes:
        for c, why in o.classes.items():
            k = (c, o.case.family, o.case.command)
            if k in seen:
                continue
            seen.add(k)
            lines.append(f"- {c}: {o.case.family}:{o.case.seed} ({o.case.command}; {o.case.note[:80]!r}): "
                         f"{why[:200]!r}")
    return "\n".join(sorted(lines)) + ("\n" if lines else "")


def outcome_json(o: Outcome) -> str:
    return json.dumps(o.to_json(), ensure_ascii=True)


__all__ = ["CLASSES", "FAMILIES", "Case", "Corpus", "Outcome", "RunConfig", "Scale", "build_case",
           "check_result", "examples", "iter_cases", "run_cases", "summary_table"]
