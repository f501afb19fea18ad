"""The in-place rules one provider's kernels declare (``PROVIDER_RULES``): each checked on this
machine's onnxruntime kernels with the output bound over the input it may reuse, bit for bit
against an out-of-place run; admitted only in a view of the graph onnxruntime built for that
provider, never in the graph as written."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.analysis.alias_rules import PROVIDER_RULES, RULES, alias_rule
from onnxmem.graph import Op
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.runtime.optimize import optimized_model

from .test_aliasing import Recipe, _check_in_place

_F32 = np.float32

#: how to run each input-0 rule of the CPU table (the harness of test_aliasing)
CPU_RECIPES: dict[tuple[str, str], Recipe] = {
    ("", "Clip"): Recipe(consts=lambda s: [np.array(-1.5, _F32), np.array(2.0, _F32)]),
    ("", "Softmax"): Recipe(attrs={"axis": -1}),
    ("", "LogSoftmax"): Recipe(attrs={"axis": -1}),
    ("", "Celu"): Recipe(attrs={"alpha": 0.7}),
}
_INPUT0 = sorted(k for k, r in PROVIDER_RULES["cpu"].items() if r.inputs == (0,))
_SUM = sorted(k for k, r in PROVIDER_RULES["cpu"].items() if r.inputs == (3,))


def test_provider_rules_are_not_portable_rules():
    for table in PROVIDER_RULES.values():
        assert not set(table) & set(RULES)
    assert set(_INPUT0) == set(CPU_RECIPES)
    assert set(_SUM) == {("com.microsoft", "FusedConv"), ("com.microsoft.nchwc", "Conv")}


@pytest.mark.parametrize("domain,op", [*_INPUT0, *_SUM])
def test_provider_rule_applies_only_to_its_provider(domain, op):
    node = Op(0, "n", op, domain, ("a", "b", "c", "d"), ("y",))
    assert alias_rule(node) is None  # the graph as written: every provider's rules only
    assert alias_rule(node, "cuda") is None
    assert alias_rule(node, "cpu") is PROVIDER_RULES["cpu"][domain, op]


@pytest.mark.parametrize("domain,op", _INPUT0, ids=[op for _, op in _INPUT0])
def test_cpu_kernel_is_correct_in_place(domain, op, monkeypatch):
    import tests.test_aliasing as harness

    monkeypatch.setitem(harness.RECIPES, (domain, op), CPU_RECIPES[domain, op])
    _check_in_place(domain, op, 0, TensorProto.FLOAT, "cpu")


def _residual_model(channels: int, h: int, w: int) -> onnx.ModelProto:
    """x -> Conv -> r; r -> Conv -> Relu -> Conv -> (+ r) -> Relu: the residual block that
    onnxruntime at ALL on CPU fuses into a com.microsoft.nchwc Conv with a ``Sum`` input."""
    rng = np.random.default_rng(channels * 1000 + h * 10 + w)
    weights = [numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(_F32) * 0.1, f"w{k}")
               for k in range(3)]
    biases = [numpy_helper.from_array(rng.standard_normal(channels).astype(_F32), f"b{k}") for k in range(3)]
    pads = {"pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["r"], **pads),
             helper.make_node("Conv", ["r", "w1", "b1"], ["c1"], **pads), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], **pads), helper.make_node("Add", ["c2", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    shape = [1, channels, h, w]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], weights + biases)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _fused_conv_model(channels: int, h: int, w: int) -> onnx.ModelProto:
    """One com.microsoft FusedConv (Relu) with a ``Sum`` input, inputs ``x`` and ``z``."""
    rng = np.random.default_rng(channels + h + w)
    weight = numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(_F32) * 0.1, "w")
    bias = numpy_helper.from_array(rng.standard_normal(channels).astype(_F32), "b")
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft", pads=[1, 1, 1, 1],
                            activation="Relu")
    shape = [1, channels, h, w]
    graph = helper.make_graph([node], "fused", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                                                for n in ("x", "z")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def _nchwc_conv_models(tmp_path, channels: int, h: int, w: int) -> list[tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    """Each nchwc Conv with a ``Sum`` input that onnxruntime builds at ALL from the residual
    block, alone, with the operands it reads in the built graph."""
    import onnxruntime as ort
    from onnx.external_data_helper import load_external_data_for_model

    src = tmp_path / "residual.onnx"
    onnx.save(_residual_model(channels, h, w), src)
    with optimized_model(src, "all", "cpu") as built:
        model = onnx.load(built.path, load_external_data=False)
        load_external_data_for_model(model, str(built.path.parent))
    nodes = [n for n in model.graph.node if (n.domain, n.op_type) == ("com.microsoft.nchwc", "Conv")
             and len(n.input) > 3 and n.input[3]]
    assert nodes, "onnxruntime built no nchwc Conv with a Sum input at ALL"
    wanted = sorted({n for node in nodes for n in (node.input[0], node.input[3])})
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in wanted)
    x = np.random.default_rng(1).standard_normal((1, channels, h, w)).astype(_F32)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = dict(zip(wanted, session.run(None, {"x": x})))
    inits = {t.name: t for t in model.graph.initializer}
    made = []
    for node in nodes:
        feeds = {node.input[0]: values[node.input[0]], node.input[3]: values[node.input[3]]}
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in feeds.items()]
        graph = helper.make_graph([node], "one", inputs, [helper.make_empty_tensor_value_info(node.output[0])],
                                  [inits[n] for n in node.input if n in inits])
        one = helper.make_model(graph, opset_imports=list(model.opset_import))
        one.ir_version = 10
        made.append((one, feeds))
    return made


def _check_sum_in_place(model: onnx.ModelProto, x_name: str, sum_name: str, feeds: dict[str, np.ndarray]) -> None:
    """The node's output bound over its ``Sum`` input's bytes gives bit for bit its out-of-place output."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)[0]
    out = model.graph.node[0].output[0]
    x0 = np.ascontiguousarray(feeds[x_name])
    buf = np.ascontiguousarray(feeds[sum_name]).copy()
    assert buf.nbytes == expected.nbytes
    binding = sess.io_binding()
    binding.bind_input(x_name, "cpu", 0, np.float32, list(x0.shape), x0.ctypes.data)
    binding.bind_input(sum_name, "cpu", 0, np.float32, list(buf.shape), buf.ctypes.data)
    binding.bind_output(out, "cpu", 0, np.float32, list(expected.shape), buf.ctypes.data)
    sess.run_with_iobinding(binding)
    diff = np.flatnonzero(buf.view(np.uint8).ravel() != expected.view(np.uint8).ravel())
    assert diff.size == 0, f"{model.graph.node[0].op_type} in place differs at byte {diff[0]} of {buf.nbytes}"


_SHAPES = [(16, 5, 5), (32, 7, 9), (16, 33, 3), (48, 16, 16), (8, 1, 1)]


@pytest.mark.parametrize("channels,h,w", _SHAPES)
def test_fused_conv_sum_is_correct_in_place(channels, h, w):
    """com.microsoft FusedConv (``MayInplace(3, 0)`` on CPU) with its output over ``Sum``."""
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((1, channels, h, w)).astype(_F32) for n in ("x", "z")}
    _check_sum_in_place(_fused_conv_model(channels, h, w), "x", "z", feeds)


@pytest.mark.parametrize("channels,h,w", _SHAPES[:4])
def test_nchwc_conv_sum_is_correct_in_place(tmp_path, channels, h, w):
    """com.microsoft.nchwc Conv (``MayInplace(3, 0)`` on CPU), as onnxruntime builds it at ALL on
    this machine (its block size), with its output over ``Sum``, at shapes that hit vector tails."""
    for model, feeds in _nchwc_conv_models(tmp_path, channels, h, w):
        node = model.graph.node[0]
        _check_sum_in_place(model, node.input[0], node.input[3], feeds)


def test_residual_plan_at_all_shares_the_sum_and_verifies(tmp_path):
    """At ``all`` on CPU the nchwc Conv that adds the residual writes its output over the
    residual's bytes. Hand count, one activation 16*8*8*4 = 4096 B: as written, the Add step
    holds the residual ``r``, ``c2`` and ``s`` (3 activations; Relu runs in place); at ``all``
    the fused Conv step holds ``r`` (its Sum, blocked), ``r1`` (its input) and its output over
    ``r``: 2 activations. The plan is proven and verified by running it."""
    src = tmp_path / "residual.onnx"
    onnx.save(_residual_model(16, 8, 8), src)
    act = 16 * 8 * 8 * 4
    assert plan_model(src, PlanOptions()).plan.arena_size == 3 * act
    made = plan_model(src, PlanOptions(optimize="all", device="cpu"))
    assert made.plan.arena_size == 2 * act
    offsets = {t.name: t.offset for t in made.plan.tensors}
    fused = [n for n in made.model.graph.node if n.domain == "com.microsoft.nchwc" and n.op_type == "Conv"
             and len(n.input) > 3 and n.input[3]]
    assert len(fused) == 1
    assert offsets[fused[0].output[0]] == offsets[fused[0].input[3]]
    plan = tmp_path / "plan.json"
    for args in (["plan", str(src), "--optimize", "all", "-o", str(plan)], ["verify", str(src), "--plan", str(plan)]):
        done = subprocess.run([sys.executable, "-m", "onnxmem", *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout
