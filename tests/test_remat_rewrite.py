"""The rewritten model (onnxmem.remat.rewrite): an original whose outputs nothing reads any
more is left out, its duplicate writes the value under the original's name, and the
rewrite computes what the original computes; verify's training reference names the
original's gradients."""

from __future__ import annotations

import numpy as np
import onnx

from onnxmem.planning.pipeline import PlanOptions
from onnxmem.remat.budget import node_costs, plan_with_budget
from onnxmem.remat.check import _training_reference
from onnxmem.remat.rewrite import SUFFIX, left_out
from onnxmem.remat.training import train_encoder

from .test_remat import run
from .test_training import mlp_training_graph


def _unread(model: onnx.ModelProto) -> set[str]:
    """Names of the nodes none of whose outputs is read or a graph output."""
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    return {n.name for n in model.graph.node if not any(o in read for o in n.output if o)}


def test_an_original_nothing_reads_is_left_out_and_its_value_keeps_its_name(tmp_path):
    # the BERT-style encoder step at 0.5x with greedy: 'matmul_232' is dropped right after
    # its write (every read is after the gap), so its original MatMul would compute it for
    # nothing; the rewrite leaves it out and MatMul_233__remat writes 'matmul_232' itself
    # (in the planner's order: onnxruntime's holds more, and 0.5x is out of its reach)
    model = train_encoder(3, 0, seq=128, dim=16)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    got = plan_with_budget(model, path, PlanOptions(), factor=0.5, algorithm="greedy", keep="planner")
    rewritten = got.rewritten
    assert rewritten is not None and got.choice is not None
    moved = got.planned.plan.extra["remat"]["moved"]
    assert moved == ["matmul_232"]
    gone = left_out(got.original.view, rewritten)
    assert [got.original.view.ops[k].name for k in gone] == ["MatMul_233"]
    writers = {o: n.name for n in rewritten.graph.node for o in n.output}
    assert writers["matmul_232"] == "MatMul_233__remat" and "matmul_232" + SUFFIX not in writers
    # nothing is computed for nothing, beyond what the original leaves unread
    assert _unread(rewritten) == _unread(model)
    # the left-out node's run is no extra compute
    costs = node_costs(got.original, path, "flops")
    assert got.extra == got.choice.cost - costs[gone[0]] > 0
    assert got.planned.plan.arena_size <= got.budget
    onnx.checker.check_model(rewritten)
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    want, have = run(model, {"x": x}), run(rewritten, {"x": x})
    assert want.keys() == have.keys()
    for k in want:
        assert want[k].tobytes() == have[k].tobytes(), k


def test_training_reference_names_the_originals_gradients():
    # verify --original of a training graph compares each gradient buffer with the gradient
    # the original computes: under the original's name, whatever the rewrite reads
    original = mlp_training_graph()
    reference, grads = _training_reference(original)
    written = {o for n in original.graph.node for o in n.output}
    assert grads == {f"{p}_grad.buffer": f"{p}_grad" for p in ("W1", "b1", "W2", "b2")}
    assert set(grads.values()) <= written
    assert set(grads.values()) <= {o.name for o in reference.graph.output}


def test_an_unread_optional_output_is_left_unnamed():
    # onnxruntime holds a written output nothing reads until the end of its run (measured:
    # MaxPool's Indices on the resnet50 training step, 3,276,800 B at its peak); the rewrite
    # leaves such an output unnamed where the op's schema makes it optional, and the model
    # computes the same
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from onnxmem.remat.rewrite import omit_unread_outputs

    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2]),
             helper.make_node("Dropout", ["y", "ratio", "train"], ["d", "mask"]),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["d", "m"], ["out"]),
             helper.make_node("TopK", ["x", "k"], ["top", "where"], axis=-1)]
    graph = helper.make_graph(
        nodes, "unread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, 2, 2]),
         helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, 1, 4, 2])],
        [helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("train", TensorProto.BOOL, [], [False]),
         helper.make_tensor("k", TensorProto.INT64, [1], [2])])
    graph.value_info.append(helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 1, 2, 2]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    assert omit_unread_outputs(changed.graph, 17) == 1
    # MaxPool's Indices go; Dropout's mask is read; TopK's Indices are not optional
    assert [list(n.output) for n in changed.graph.node] == [["y"], ["d", "mask"], ["m"], ["out"], ["top", "where"]]
    assert [vi.name for vi in changed.graph.value_info] == []
    onnx.checker.check_model(changed)
    x = np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)
    got = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
           for m in (model, changed)]
    assert all(np.array_equal(a, b) for a, b in zip(*got, strict=True))
