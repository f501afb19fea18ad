"""Small ONNX graphs built in tests, with the IR version onnxruntime reads."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def make_model(nodes, inputs, outputs, inits=(), opset=17, value_info=()) -> onnx.ModelProto:
    g = helper.make_graph(list(nodes), "t", list(inputs), list(outputs), list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def chain(n_relu: int = 3, shape=(1, 16)) -> onnx.ModelProto:
    """x -> Relu -> Relu ... -> y."""
    nodes = []
    prev = "x"
    for i in range(n_relu):
        out = "y" if i == n_relu - 1 else f"t{i}"
        nodes.append(helper.make_node("Relu", [prev], [out], name=f"relu{i}"))
        prev = out
    return make_model(nodes, [vi("x", list(shape))], [vi("y", list(shape))])


def file_order_view(model: onnx.ModelProto):
    """The planning view of ``model`` and its file order (node indices)."""
    from onnxmem.graph import build_view
    from onnxmem.model import infer_shapes

    v = build_view(model, infer_shapes(model))
    return v, tuple(range(len(v.ops)))


def plan_file_order(model: onnx.ModelProto, tmp_path, **opts):
    """Save ``model`` under ``tmp_path`` and plan it: greedy, file order, alignment 1 unless ``opts`` say otherwise."""
    from onnxmem.pipeline import PlanOptions, plan_loaded

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return plan_loaded(model, path, PlanOptions(**{"solver": "greedy", "order": "file", "alignment": 1, **opts}))
