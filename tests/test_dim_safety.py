"""No string of a model file reaches an evaluator: dims are opaque names, expressions a grammar.

Each payload below, placed wherever a dim or a name can sit in a file, must end
in a plan or a one-line error, leave no file behind, and take well under a
second of parsing (timed by the fuzz run, not here); none may be evaluated.
"""

from __future__ import annotations

import subprocess
import sys
import time

import onnx
import pytest
from onnx import TensorProto, helper

from onnxmem.core import dimexpr
from onnxmem.model import MAX_NESTING, check_graph_limits, load_model
from onnxmem.shapes import infer_shapes

from .helpers import make_model, vi

MARK = "PWNED"
SHELL = f"touch {MARK}"
PAYLOADS = [
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__=='_wrap_close']"
    f"[0].__init__.__globals__['system']('{SHELL}')",
    f"__import__('os').system('{SHELL}')",
    f"exec(\"import os; os.system('{SHELL}')\")",
    f"eval(\"__import__('os').system('{SHELL}')\")",
    f"(lambda: __import__('os').system('{SHELL}'))()",
    f"open('{MARK}', 'w')",
    f"Symbol('x').__class__.__init__.__globals__['__builtins__']['__import__']('os').system('{SHELL}')",
    "9**9**9**9",
    "(2**2**40)",
    "10**10**10",
    "(" * 5000 + "1" + ")" * 5000,
    "batch\nsize",
    "a\x00b",
    "x" * 100_000,
    "Max(batch, __import__('os'))",
    "floor(seq/0)",
]


def _model(where: str, dim: str) -> onnx.ModelProto:
    """A two-node model whose ``where`` carries ``dim`` as a dim_param."""
    x = vi("x", [dim if where == "input" else "n", 8])
    y = vi("y", [dim if where == "output" else "n", 8])
    value_info = [vi("t", [dim, 8])] if where == "value_info" else []
    nodes = [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    if where == "subgraph":
        body = helper.make_graph(
            [helper.make_node("Identity", ["t"], ["b"])], "body", [], [vi("b", [dim, 8])]
        )
        nodes[1] = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)
        x2 = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
        return make_model(nodes, [x, x2], [y])
    m = make_model(nodes, [x], [y], value_info=value_info)
    if where == "metadata":
        onnx.helper.set_model_props(m, {dim[:1000]: dim})
    return m


@pytest.mark.parametrize("where", ["input", "output", "value_info", "subgraph", "metadata"])
@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"p{i}" for i in range(len(PAYLOADS))])
def test_payload_is_never_evaluated(tmp_path, monkeypatch, where, payload):
    monkeypatch.chdir(tmp_path)
    m = _model(where, payload)
    try:
        infer_shapes(m, dims={"n": 2})
    except Exception as exc:  # noqa: BLE001 - any error must be onnxmem's one-line kind
        from onnxmem.core.errors import OnnxmemError

        assert isinstance(exc, OnnxmemError), repr(exc)
        assert "\n" not in str(exc) and len(str(exc)) < 2000
    assert list(tmp_path.iterdir()) == []


def test_payload_through_the_cli_leaves_no_trace(tmp_path):
    """The issue's own case: a plain ``onnxmem plan model.onnx`` on the payload."""
    path = tmp_path / "m.onnx"
    onnx.save(_model("input", PAYLOADS[0]), path)
    r = subprocess.run([sys.executable, "-m", "onnxmem", "plan", str(path)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "graph inputs have unbound dims" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_hostile_names_bind_as_opaque_names():
    """A name that is not an identifier still binds with --dim, by its exact text."""
    name = "p2o.DynamicDimension.0"
    shapes = infer_shapes(_model("input", name), dims={name: 3, "n": 3})
    assert shapes.shapes["y"] == (3, 8)


def test_dims_computed_by_symbolic_inference_are_evaluated():
    """onnxruntime's symbolic inference writes expressions over the safe names; they evaluate."""
    x = vi("x", ["seq", 4])
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=0),
             helper.make_node("Relu", ["c"], ["y"])]
    m = make_model(nodes, [x], [vi("y", None)])
    shapes = infer_shapes(m, dims={"seq": 5})
    assert shapes.shapes["c"] == (10, 4)


def test_unbound_dim_message_names_the_files_dim_escaped():
    from onnxmem.core.errors import ShapeError

    with pytest.raises(ShapeError) as err:
        infer_shapes(_model("input", "batch\nsize"))
    msg = str(err.value)
    assert "\n" not in msg and "'batch\\nsize'" in msg


@pytest.mark.parametrize(
    "text,value",
    [("2*s + 1", 15), ("floor(s/2)", 3), ("ceiling(s/2)", 4), ("Max(1, b, s)", 7), ("min(s, b)", 3),
     ("Mod(s, 4)", 3), ("s % 4", 3), ("s // 2", 3), ("-s + 10", 3), ("2**10", 1024), ("(s)", 7),
     ("s/7", 1), ("s/2", None), ("2**62", 2**62), ("2**63", None), ("9**9**9**9", None),
     ("s.real", None), ("s[0]", None), ("1e3", None), ("0x10", None), ("q", None), ("", None),
     ("__import__('os')", None), ("max()", None), ("s 1", None), ("Mod(s, 0)", None)],
)
def test_grammar(text, value):
    assert dimexpr.evaluate(text, {"s": 7, "b": 3}) == value


def test_grammar_bounds_are_fast():
    # CPU seconds of this process (not wall-clock), with a wide margin: a guard against a
    # quadratic parse, not a speed target
    t0 = time.process_time()
    for text in ("(" * 100_000, "-" * 100_000 + "1", "1+" * 3000 + "1", "9**" * 1000 + "9"):
        assert dimexpr.evaluate(text, {}) is None
    assert dimexpr.evaluate("1+" * 2000 + "1", {}) == 2001  # within MAX_CHARS: a real sum
    assert time.process_time() - t0 < 5


def test_nesting_limit(tmp_path):
    inner = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"])], "g0", [], [vi("o0", [1])])
    for depth in range(1, MAX_NESTING + 3):
        leaf = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{depth}"])], f"e{depth}", [],
                                 [vi(f"e{depth}", [1])])
        node = helper.make_node("If", ["c"], [f"o{depth}"], then_branch=inner, else_branch=leaf)
        inner = helper.make_graph([node], f"g{depth}", [], [vi(f"o{depth}", [1])])
    m = make_model(list(inner.node), [vi("x", [1]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                   [vi(inner.output[0].name, [1])])
    from onnxmem.core.errors import ModelError

    with pytest.raises(ModelError, match=f"limit of {MAX_NESTING}"):
        check_graph_limits(m, "model 'deep'")
    path = tmp_path / "deep.onnx"
    onnx.save(m, path)
    with pytest.raises(ModelError, match="nests subgraphs"):
        load_model(path)


def test_nesting_past_protobufs_limit_is_one_line(tmp_path):
    """Deeper than protobuf decodes: the file's bytes are written by hand, one level at a time."""
    def field(num: int, payload: bytes) -> bytes:  # a length-delimited protobuf field
        n, out = len(payload), b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                break
        return bytes([(num << 3) | 2]) + out + payload

    graph = b""
    for _ in range(60):  # GraphProto.node(1) -> NodeProto.attribute(5) -> AttributeProto.g(6)
        graph = field(1, field(5, field(6, graph)))
    path = tmp_path / "deeper.onnx"
    path.write_bytes(bytes([0x08, 10]) + field(7, graph))  # ir_version 10, graph
    from onnxmem.core.errors import ModelError

    with pytest.raises(ModelError, match="nests messages deeper"):
        load_model(path)
