"""Small ONNX graphs built in tests, with the IR version onnxruntime reads."""

from __future__ import annotations

import contextlib
import threading
import time

import onnx
from onnx import TensorProto, helper

#: seconds after which a test's subprocess or wait counts as hung: a guard against a hang, never a
#: speed check (each call it bounds takes seconds, at most a minute on a loaded 2-core machine)
HANG_S = 600


def make_model(nodes, inputs, outputs, inits=(), opset=17, value_info=()) -> onnx.ModelProto:
    g = helper.make_graph(list(nodes), "t", list(inputs), list(outputs), list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def two_convs_model() -> onnx.ModelProto:
    """Two convolutions of the same weights over 16x16 and 8x8 images, a Relu after each and a
    MaxPool between: x -> c1 -> r1 -> pool -> c2 -> r2 -> y; three kinds of node, the two
    convolutions alike but for their shapes, and the two Relus."""
    import numpy as np

    w = onnx.numpy_helper.from_array(np.linspace(-1, 1, 4 * 4 * 9, dtype=np.float32).reshape(4, 4, 3, 3), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"], name="r1"),
             helper.make_node("MaxPool", ["b"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w"], ["c"], name="c2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="r2")]
    return make_model(nodes, [vi("x", [1, 4, 16, 16])], [vi("y", [1, 4, 8, 8])], [w])


def diamond_model(width: int, rows: int) -> onnx.ModelProto:
    """x -> sig=Sigmoid(x) -> tan=Tanh(sig) -> sum=Add(sig, tan) -> y=MatMul(sum, W), x of
    ``rows`` x ``width``: a value read twice, by a node before the last and by the last."""
    import numpy as np

    w = onnx.numpy_helper.from_array(np.random.default_rng(1).standard_normal((width, width)).astype(np.float32), "W")
    nodes = [helper.make_node("Sigmoid", ["x"], ["sig"], name="sigmoid"),
             helper.make_node("Tanh", ["sig"], ["tan"], name="tanh"),
             helper.make_node("Add", ["sig", "tan"], ["sum"], name="add"),
             helper.make_node("MatMul", ["sum", "W"], ["y"], name="matmul")]
    return make_model(nodes, [vi("x", [rows, width])], [vi("y", [rows, width])], [w])


def batch_chain(n: int) -> onnx.ModelProto:
    """``y = Relu(x @ w)``, ``x: float[batch, n]``, ``w: float[n, n]`` of 0.01: hand-computable totals."""
    import numpy as np

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])
    w = onnx.numpy_helper.from_array(np.full((n, n), 0.01, np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def saved_model(tmp_path_factory, model: onnx.ModelProto, folder: str):
    """``model`` saved as ``chain.onnx`` in a fresh folder of ``tmp_path_factory`` (a module fixture's)."""
    path = tmp_path_factory.mktemp(folder) / "chain.onnx"
    onnx.save(model, str(path))
    return path


def reshape_target(src: str, index: str, rest: str, axes: str, suffix: str = "", rest_first: bool = False):
    """Shape arithmetic as exporters write it: Shape(src) -> Gather(index) -> Unsqueeze(axes) ->
    Concat with ``rest`` (after it, or before it with ``rest_first``): the nodes, named shape,
    gather, unsqueeze and concat (with ``suffix``), and the name of the target they make."""
    s, g, u, t = (f"{k}{suffix}" for k in "sgut")
    parts = [rest, u] if rest_first else [u, rest]
    return [helper.make_node("Shape", [src], [s], name=f"shape{suffix}"),
            helper.make_node("Gather", [s, index], [g], name=f"gather{suffix}", axis=0),
            helper.make_node("Unsqueeze", [g, axes], [u], name=f"unsqueeze{suffix}"),
            helper.make_node("Concat", parts, [t], name=f"concat{suffix}", axis=0)], t


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
    from onnxmem.shapes import infer_shapes

    v = build_view(model, infer_shapes(model))
    return v, tuple(range(len(v.ops)))


def plan_file_order(model: onnx.ModelProto, tmp_path, **opts):
    """Save ``model`` under ``tmp_path`` and plan it: greedy, file order, alignment 1 unless ``opts`` say otherwise."""
    from onnxmem.planning.pipeline import PlanOptions, plan_loaded

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return plan_loaded(model, path, PlanOptions(**{"solver": "greedy", "order": "file", "alignment": 1, **opts}))


def plan_layout(model: onnx.ModelProto, tmp_path, layout, order=None, *, prove: bool = True):
    """Plan ``model`` in file order (or ``order``) with the alias ``layout`` given
    (greedy, alignment 1), as :func:`onnxmem.planning.pipeline.plan_liveness` records
    and proves it. ``prove=False`` records the plan without the planner's own
    proof, so a test can hand it to the proof itself."""
    import contextlib
    from unittest import mock

    from onnxmem.analysis.liveness import build_liveness
    from onnxmem.graph import build_view
    from onnxmem.planning import pipeline
    from onnxmem.planning.pipeline import PlanOptions, plan_liveness
    from onnxmem.shapes import infer_shapes

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    shapes = infer_shapes(model)
    view = build_view(model, shapes)
    live = build_liveness(view, tuple(range(len(view.ops))) if order is None else order, layout, alignment=1)
    opts = PlanOptions(solver="greedy", order="file", alignment=1)
    skip = contextlib.nullcontext() if prove else mock.patch.object(pipeline, "prove_plan", lambda *a, **k: [])
    with skip:
        return plan_liveness(model, path, shapes, view, live, opts)


@contextlib.contextmanager
def slowed_machine(monkeypatch, factor: float = 100.0):
    """Inside: ``time.perf_counter`` and ``time.monotonic`` run ``factor`` times fast (as on a
    machine that many times slower) and a second thread keeps a core busy."""
    real = {name: getattr(time, name) for name in ("perf_counter", "monotonic")}
    for name, clock in real.items():
        zero = clock()
        monkeypatch.setattr(time, name, lambda clock=clock, zero=zero: zero + (clock() - zero) * factor)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    hog = threading.Thread(target=spin, daemon=True)
    hog.start()
    try:
        yield
    finally:
        stop.set()
        hog.join()
        for name, clock in real.items():
            monkeypatch.setattr(time, name, clock)


def plan_then_verify(tmp_path, model: onnx.ModelProto, feeds: dict | None = None, *plan_args: str) -> None:
    """``model`` saved in ``tmp_path``, planned (``plan_args`` added) and verified with its plan
    (``feeds``: the ``--inputs`` values): both exit 0."""
    import numpy as np
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    path, plan = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(model, path)
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(plan), *plan_args])
    assert r.exit_code == 0, r.output
    extra = []
    if feeds is not None:
        np.savez(tmp_path / "feeds.npz", **feeds)
        extra = ["--inputs", str(tmp_path / "feeds.npz")]
    r = CliRunner().invoke(main, ["verify", str(path), "--plan", str(plan), *extra])
    assert r.exit_code == 0, r.output


def plan_refused(tmp_path, model: onnx.ModelProto, *says: str) -> None:
    """``model`` saved in ``tmp_path`` and planned: refused in words holding each of ``says``,
    with no traceback and no plan file."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    path, plan = tmp_path / "m.onnx", tmp_path / "p.json"
    onnx.save(model, path)
    r = CliRunner().invoke(main, ["plan", str(path), "-o", str(plan)])
    assert r.exit_code != 0 and all(s in r.output for s in says), r.output
    assert "Traceback" not in r.output and not plan.exists()
