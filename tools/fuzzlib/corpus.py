"""The base models of the fuzz corpus (small real models built here and the shipped ones),
each with a valid plan, and the hostile strings the families plant in them."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from .common import SHIPPED_MODELS, Base

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
        #: a range plan of ``dynamic`` over batch 1..8, for the exports family (``ensure_range_plan``)
        self.range_json: str | None = None

    def small(self) -> list[Base]:
        """The bases cheap enough to run through onnxruntime many times."""
        return [b for b in self.bases if sum(len(v) for v in b.files.values()) < 300_000]

    def by_name(self, name: str) -> Base:
        return next(b for b in self.bases if b.name == name)

    def ensure_plans(self) -> None:
        """Plan every base once with the library (the plans the plan family corrupts)."""
        if self._plans_made:
            return
        from onnxmem.planning.pipeline import PlanOptions, plan_model

        for b in self.bases:
            key = (b.name, tuple(b.args), tuple(sorted(b.files.items())))
            if key in _PLANS:  # planned by another corpus of this process: the same bases
                b.plan_json = _PLANS[key]
                continue
            folder = self.root / "bases" / b.name
            folder.mkdir(parents=True, exist_ok=True)
            for fname, data in b.files.items():
                (folder / fname).write_bytes(data)
            pairs = (b.args[i + 1].split("=") for i in range(0, len(b.args), 2) if b.args[i] == "--dim")
            opts = PlanOptions(dims={k: int(v) for k, v in pairs})  # the CLI's defaults
            try:
                data = json.loads(plan_model(str(folder / b.main), opts).plan.to_json())
            except Exception:  # a base this branch cannot plan gets no plan cases
                b.plan_json = _PLANS[key] = None
                continue
            # timings and the corpus path vary between runs; fix them so a case is a
            # function of (family, seed) alone
            _fix_seconds(data)
            if isinstance(data.get("model"), dict):
                data["model"]["path"] = f"model/{b.main}"
            b.plan_json = _PLANS[key] = json.dumps(data, indent=1)
        self._plans_made = True
        if not any(b.plan_json for b in self.bases):
            raise RuntimeError("no base model could be planned; the plan family has nothing to corrupt")

    def ensure_range_plan(self) -> str:
        """Plan ``dynamic`` over ``batch`` 1..8 once with the library (``plan --dim batch=1:8``)."""
        if self.range_json is not None:
            return self.range_json
        from onnxmem.model import load_model
        from onnxmem.planning import plan_range
        from onnxmem.planning.pipeline import PlanOptions
        from onnxmem.plans import render_range_plan

        b = self.by_name("dynamic")
        folder = self.root / "bases" / "range"
        folder.mkdir(parents=True, exist_ok=True)
        _write_files(folder, b.files)
        path = str(folder / b.main)
        data = json.loads(render_range_plan(plan_range(load_model(path), path, {"batch": (1, 8)},
                                                       PlanOptions())))
        _fix_seconds(data)  # so a case is a function of (family, seed)
        data["range"]["model"]["path"] = f"model/{b.main}"
        self.range_json = json.dumps(data, indent=1)
        return self.range_json


#: the plan of each base (its name, flags and files), made once per process
_PLANS: dict[tuple[Any, ...], str | None] = {}


def _fix_seconds(data: Any) -> None:
    """Set every timing of a plan (``plan_seconds`` 0.5, a solver's ``seconds`` 0.25, in
    subgraphs and pieces too) to a fixed value."""
    if isinstance(data, dict):
        for k, v in data.items():
            if k in ("plan_seconds", "seconds") and isinstance(v, (int, float)):
                data[k] = 0.5 if k == "plan_seconds" else 0.25
            else:
                _fix_seconds(v)
    elif isinstance(data, list):
        for v in data:
            _fix_seconds(v)


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    for fname, data in files.items():
        (folder / fname).write_bytes(data)


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
