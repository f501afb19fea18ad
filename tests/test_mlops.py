"""Shape rules of the classic ML ops (ai.onnx.ml), each checked against a real onnxruntime
session, and models made of them planned with no --measure-shapes and verified."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.core.errors import ShapeError
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.shapes import infer_shapes
from onnxmem.shapes.mlops import ML_RULES
from onnxmem.verify.run import VerifyOptions, verify_plan

N, C = 5, 4
ML = "ai.onnx.ml"


def _model(nodes, outputs, x_type=TensorProto.FLOAT, x_shape=(N, C), ml_opset=3, extra_inputs=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "ml", [helper.make_tensor_value_info("x", x_type, ["n", C][: len(x_shape)]
                                                                      if len(x_shape) == 2 else [C]),
                                        *extra_inputs],
                          [helper.make_tensor_value_info(o, TensorProto.INT64 if o == "label" else TensorProto.FLOAT, None)
                           for o in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])
    m.ir_version = 10
    return m


def _node(op, outputs, inputs=("x",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), domain=ML, name=op.lower(), **attrs)


_TREE = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
             nodes_values=[0.0, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
             nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0])
_SVM = dict(kernel_type="RBF", kernel_params=[0.1, 0.0, 3.0], vectors_per_class=[1, 1, 1],
            support_vectors=list(np.linspace(-1, 1, 3 * C)), coefficients=list(np.linspace(-1, 1, 2 * 3)),
            rho=[0.1, 0.2, 0.3], classlabels_ints=[0, 1, 2])

CASES = {
    "Scaler": _model([_node("Scaler", ["y"], offset=[0.5] * C, scale=[2.0] * C)], ["y"]),
    "Normalizer": _model([_node("Normalizer", ["y"], norm="L2")], ["y"]),
    "Binarizer": _model([_node("Binarizer", ["y"], threshold=0.2)], ["y"]),
    "Imputer": _model([_node("Imputer", ["y"], imputed_value_floats=[0.0] * C, replaced_value_float=np.nan)], ["y"]),
    "LinearRegressor": _model([_node("LinearRegressor", ["y"], coefficients=[0.5] * (2 * C), intercepts=[1.0, 2.0],
                                     targets=2)], ["y"]),
    "LinearClassifier": _model([_node("LinearClassifier", ["label", "scores"], coefficients=[0.5] * (3 * C),
                                      intercepts=[0.0, 1.0, 2.0], classlabels_ints=[0, 1, 2])], ["label", "scores"]),
    "LinearClassifier binary": _model([_node("LinearClassifier", ["label", "scores"], coefficients=[0.5] * C,
                                             intercepts=[0.1], classlabels_ints=[0, 1])], ["label", "scores"]),
    "TreeEnsembleRegressor": _model([_node("TreeEnsembleRegressor", ["y"], n_targets=2, target_treeids=[0, 0],
                                           target_nodeids=[1, 2], target_ids=[0, 1], target_weights=[1.0, 2.0],
                                           **_TREE)], ["y"]),
    "TreeEnsembleClassifier": _model([_node("TreeEnsembleClassifier", ["label", "scores"], class_treeids=[0, 0, 0],
                                            class_nodeids=[1, 2, 2], class_ids=[0, 1, 2],
                                            class_weights=[1.0, 1.0, 0.5], classlabels_int64s=[0, 1, 2],
                                            **_TREE)], ["label", "scores"]),
    "TreeEnsemble": _model([_node("TreeEnsemble", ["y"], n_targets=3, aggregate_function=1, tree_roots=[0],
                                  nodes_featureids=[0], nodes_splits=helper.make_tensor("s", TensorProto.FLOAT,
                                                                                        [1], [0.0]),
                                  nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [1], [0]),
                                  nodes_truenodeids=[0], nodes_falsenodeids=[1], nodes_trueleafs=[1],
                                  nodes_falseleafs=[1], leaf_targetids=[0, 2],
                                  leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0]))],
                           ["y"], ml_opset=5),
    "SVMRegressor": _model([_node("SVMRegressor", ["y"], kernel_type="LINEAR", kernel_params=[0.1, 0.0, 3.0], n_supports=2,
                                  support_vectors=[0.5] * (2 * C), coefficients=[1.0, -1.0], rho=[0.1])], ["y"]),
    "SVMClassifier ovo": _model([_node("SVMClassifier", ["label", "scores"], **_SVM)], ["label", "scores"]),
    "SVMClassifier prob": _model([_node("SVMClassifier", ["label", "scores"], prob_a=[-1.0, -1.0, -1.0],
                                        prob_b=[0.1, 0.1, 0.1], **_SVM)], ["label", "scores"]),
    "ArrayFeatureExtractor": _model([_node("ArrayFeatureExtractor", ["y"], inputs=("x", "idx"))], ["y"],
                                    extra_inputs=()),
    "OneHotEncoder": _model([_node("OneHotEncoder", ["y"], cats_int64s=[1, 2, 3, 4, 5], zeros=1)], ["y"],
                            x_type=TensorProto.INT64),
    "LabelEncoder": _model([_node("LabelEncoder", ["y"], keys_int64s=[1, 2], values_floats=[0.5, 1.5],
                                  default_float=0.0)], ["y"], x_type=TensorProto.INT64, ml_opset=2),
}
# ArrayFeatureExtractor's indices: a constant of three columns
CASES["ArrayFeatureExtractor"].graph.initializer.append(
    onnx.numpy_helper.from_array(np.array([0, 2, 3], dtype=np.int64), "idx"))


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = model.graph.input[0]
    if x.type.tensor_type.elem_type == TensorProto.INT64:
        return {"x": rng.integers(0, 6, size=(N, C)).astype(np.int64)}
    return {"x": rng.standard_normal((N, C)).astype(np.float32)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rule_gives_the_shapes_onnxruntime_writes(case):
    model = CASES[case]
    shapes = infer_shapes(model, input_shapes={"x": (N, C)})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, _feeds(model))
    for out, value in zip(model.graph.output, got):
        assert shapes.shapes[out.name] == tuple(value.shape), (case, out.name)
        assert np.dtype(onnx.helper.tensor_dtype_to_np_dtype(shapes.dtypes[out.name])) == value.dtype, (case, out.name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rule_alone_matches_onnxruntime(case):
    # onnx's own inference shapes some of these ops (the tree ensembles, LinearClassifier,
    # Binarizer...); the rule is checked on its own here, from the input's type alone
    model = CASES[case]
    node = model.graph.node[0]
    feeds = _feeds(model)
    x = feeds["x"]
    ins = [(onnx.helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    if len(node.input) > 1:
        ins.append((TensorProto.INT64, (3,)))
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    ruled = ML_RULES[(ML, node.op_type)](node, ins, [None] * len(ins))
    assert [(t[0], t[1]) for t in ruled] == [
        (onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for v in got], case


@pytest.mark.parametrize("case", ["LinearClassifier", "TreeEnsembleClassifier", "SVMClassifier prob", "TreeEnsemble"])
def test_models_of_these_ops_plan_without_measuring_and_verify(case, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(CASES[case], path)
    planned = plan_model(path, PlanOptions(input_shapes={"x": (N, C)}))
    report = verify_plan(planned.model, planned.plan, model_path=path, view=planned.view,
                         options=VerifyOptions(inputs=_feeds(CASES[case])))
    assert report.ok and report.execution is not None, report.first


def test_string_labels_and_zipmap_are_refused_in_one_line(tmp_path):
    model = _model([_node("LinearClassifier", ["label", "scores"], coefficients=[0.5] * (2 * C),
                          intercepts=[0.0, 1.0], classlabels_strings=["a", "b"]),
                    _node("ZipMap", ["probs"], inputs=("scores",), classlabels_strings=["a", "b"])],
                   ["label", "probs"])
    with pytest.raises(ShapeError, match="'probs' is a sequence or map .* not a tensor: onnxmem plans tensors only"):
        plan_model_of(model, tmp_path)
    path = tmp_path / "z.onnx"
    onnx.save(model, path)
    r = CliRunner().invoke(main, ["plan", str(path), "--input-shape", f"x={N}x{C}"])
    assert r.exit_code == 1 and "zipmap" in r.output and "Traceback" not in r.output


def plan_model_of(model: onnx.ModelProto, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return plan_model(path, PlanOptions(input_shapes={"x": (N, C)}))
