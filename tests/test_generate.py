"""Generated irregular networks: deterministic, valid ONNX, runnable, plannable."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxmem.graph import build_view
from onnxmem.model.generate import Wiring, nasnet, random_dag, randwire, transformer, wiring
from onnxmem.scheduling import stable_topological_order
from onnxmem.scheduling.cost import order_peak
from onnxmem.shapes import infer_shapes


def run(model: onnx.ModelProto) -> list[np.ndarray]:
    from onnxmem.runtime.ort import make_session

    sess = make_session(model)
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
             for i in sess.get_inputs()}
    return sess.run(None, feeds)


@pytest.mark.parametrize("kind", ["ws", "er", "ba"])
def test_random_dag_is_seeded_and_oriented(kind):
    a = random_dag(20, kind, seed=3)
    assert a == random_dag(20, kind, seed=3)
    assert all(i < j for i, j in a)
    assert a != random_dag(20, kind, seed=4)


def test_wiring_literal():
    # 0 -> 2, 1 -> 2, 1 -> 3: 0 and 1 read the stage input; 2 and 3 are the sinks
    assert wiring(4, [(1, 3), (0, 2), (1, 2)]) == Wiring(((), (), (0, 1), (1,)), (2, 3))
    assert wiring(2, []) == Wiring(((), ()), (0, 1))


@pytest.mark.parametrize("kind", ["ws", "er", "ba"])
def test_randwire_is_its_wiring(kind):
    """Every generated node reads exactly its predecessors (Sum of their convs), and the
    head sums exactly the sinks: the ONNX graph is the wiring of ``random_dag``."""
    n = 24
    wired = wiring(n, random_dag(n, kind, seed=4))
    model = randwire(n, kind, 4)
    producer = {o: node for node in model.graph.node for o in node.output}
    convs = [node for node in model.graph.node if node.op_type == "Conv"][1:]  # after the stem
    stem = model.graph.node[0].output[0]
    assert len(convs) == n

    def sources(tensor: str) -> list[str]:
        node = producer[tensor]
        return list(node.input) if node.op_type == "Sum" else [tensor]

    for v, conv in enumerate(convs):
        relu = producer[conv.input[0]]
        want = [convs[u].output[0] for u in wired.preds[v]] or [stem]
        assert sources(relu.input[0]) == want, v
    head = next(node for node in model.graph.node if node.name == "head")
    assert sources(head.input[0]) == [convs[v].output[0] for v in wired.sinks]


def test_same_seed_same_bytes():
    assert randwire(12, "er", 5).SerializeToString() == randwire(12, "er", 5).SerializeToString()
    assert nasnet(2, 1).SerializeToString() == nasnet(2, 1).SerializeToString()


@pytest.mark.parametrize("model", [randwire(16, "ws", 0), randwire(16, "er", 1), randwire(16, "ba", 2),
                                   nasnet(2, 0), transformer(2, 0)],
                         ids=["ws", "er", "ba", "nasnet", "transformer"])
def test_generated_models_check_and_run(model):
    assert model.ir_version == 10
    onnx.checker.check_model(model, full_check=True)
    (y,) = run(model)
    assert np.isfinite(y).all()


def test_randwire_plans_reorders_and_runs_in_planned_order(tmp_path):
    from onnxmem.export.annotate import annotate_model
    from onnxmem.planning.pipeline import PlanOptions, plan_model

    path = tmp_path / "rw.onnx"
    onnx.save(randwire(24, "ba", 2), path)
    planned = plan_model(path, PlanOptions(order="auto"))
    plan = planned.plan
    assert plan.order_strategy == "auto"
    assert plan.lower_bound <= plan.extra["file_order_lower_bound"]
    assert plan.lower_bound < plan.extra["file_order_lower_bound"]  # this graph gains
    annotated = annotate_model(planned.model, plan)
    assert [n.name for n in annotated.graph.node] == list(plan.order)
    onnx.checker.check_model(annotated)
    np.testing.assert_allclose(run(annotated)[0], run(planned.model)[0], rtol=1e-5)


def test_transformer_size():
    m = transformer(3, 0)
    assert len(m.graph.node) == 3 * 25 + 1
    view = build_view(m, infer_shapes(m))
    assert order_peak(view, stable_topological_order(view)) > 0
