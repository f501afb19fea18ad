"""Shapes of the classic machine-learning ops (``ai.onnx.ml``) by rule.

scikit-learn pipelines converted by skl2onnx (and the other converters of onnxmltools) write
Scaler, Normalizer, Binarizer, Imputer, LinearClassifier/LinearRegressor, the tree
ensembles, the SVMs, ArrayFeatureExtractor, OneHotEncoder and LabelEncoder. onnx's own
inference gives most of them a dtype and no shape; :data:`ML_RULES` gives each the shape
of the ai.onnx.ml spec, checked against onnxruntime's CPU kernels (``tests/test_mlops.py``):

* Scaler, Normalizer: float, the input's shape; Binarizer, Imputer: the input's dtype and shape.
* LinearRegressor: ``(N, targets)`` float; TreeEnsembleRegressor: ``(N, n_targets)`` float;
  TreeEnsemble (ai.onnx.ml 5): ``(N, n_targets)`` in the input's dtype; SVMRegressor ``(N, 1)``.
  ``N`` is the input's first axis (1 for a 1-D input).
* LinearClassifier, TreeEnsembleClassifier, SVMClassifier: the label ``(N,)`` (int64 for
  integer class labels; string labels have no static size and stay unknown) and the scores
  ``(N, E)`` float: ``E`` the class count, but 2 for a binary LinearClassifier with one
  coefficient row, and for a kernel SVMClassifier without probabilities one column per
  class pair (one-vs-one: ``E (E - 1) / 2``).
* ArrayFeatureExtractor: the input's axes but the last, then the index count.
* OneHotEncoder: the input's shape plus the category count (``zeros``: float).
* LabelEncoder: the input's shape, the dtype of its ``values_*`` attribute (int64, float;
  strings stay unknown).

ZipMap's output is a sequence of maps, not a tensor: onnxmem plans tensors only, and a model
that computes one is refused in one line that says how to convert it without ZipMap
(skl2onnx's ``zipmap: False`` option gives the probabilities as one tensor). CastMap and
DictVectorizer read maps and are not covered. A rule gives ``None`` for anything it cannot
size exactly.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from onnxmem.shapes.training import Rule, TypeShape, attribute, input_at

__all__ = ["ML", "ML_RULES"]

ML = "ai.onnx.ml"
_F = int(TensorProto.FLOAT)
_I64 = int(TensorProto.INT64)
Ins = list[TypeShape | None]
Vals = list[np.ndarray | None]
Outs = list[TypeShape | None]


def _rows(x: TypeShape | None) -> int | None:
    """N: the batch of a 1-D or 2-D input (1 for 1-D), ``None`` for other ranks."""
    if x is None or len(x[1]) not in (1, 2):
        return None
    return 1 if len(x[1]) == 1 else x[1][0]


def _same(dtype: int | None = None) -> Rule:
    """The input's shape, in ``dtype`` (the input's own where ``None``)."""

    def rule(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
        x = input_at(ins, 0)
        return [None if x is None else (dtype if dtype is not None else x[0], x[1])]

    return rule


def _count(node: onnx.NodeProto, *names: str) -> int:
    """The length of the first of ``names`` that the node has (0 for none)."""
    for name in names:
        value = attribute(node, name, None)
        if isinstance(value, (list, tuple)) and value:
            return len(value)
    return 0


def _label(node: onnx.NodeProto, n: int) -> TypeShape | None:
    """A classifier's label output: ``(N,)`` int64, or ``None`` for string labels."""
    return (_I64, (n,)) if _count(node, "classlabels_ints", "classlabels_int64s") else None


def _linear_regressor(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    n = _rows(input_at(ins, 0))
    targets = attribute(node, "targets", 1)
    return [None if n is None or not isinstance(targets, int) or targets < 1 else (_F, (n, targets))]


def _tree_regressor(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    n = _rows(input_at(ins, 0))
    targets = attribute(node, "n_targets", None)
    return [None if n is None or not isinstance(targets, int) or targets < 1 else (_F, (n, targets))]


def _tree_ensemble(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    x = input_at(ins, 0)
    n = _rows(x)
    targets = attribute(node, "n_targets", None)
    if x is None or n is None or not isinstance(targets, int) or targets < 1:
        return [None]
    return [(x[0], (n, targets))]


def _svm_regressor(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    n = _rows(input_at(ins, 0))
    return [None if n is None else (_F, (n, 1))]


def _classifier(columns: int) -> Rule:
    """Label ``(N,)`` and scores ``(N, columns)`` (``columns`` < 1: unknown)."""

    def rule(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
        n = _rows(input_at(ins, 0))
        if n is None:
            return [None, None]
        return [_label(node, n), (_F, (n, columns)) if columns >= 1 else None]

    return rule


def _linear_classifier(node: onnx.NodeProto, ins: Ins, v: Vals) -> Outs:
    classes = _count(node, "classlabels_ints", "classlabels_strings")
    rows = _count(node, "intercepts")
    # one coefficient row for two classes: onnxruntime writes both columns
    columns = 2 if classes == 2 and rows == 1 else rows
    return _classifier(columns)(node, ins, v)


def _tree_classifier(node: onnx.NodeProto, ins: Ins, v: Vals) -> Outs:
    classes = _count(node, "classlabels_int64s", "classlabels_strings")
    return _classifier(classes)(node, ins, v)


def _svm_classifier(node: onnx.NodeProto, ins: Ins, v: Vals) -> Outs:
    """Scores: one column per class with probabilities (``prob_a``) or a linear SVM; for
    one-vs-one without probabilities, one per class pair (two classes: one column)."""
    classes = _count(node, "classlabels_ints", "classlabels_strings")
    vectors = _count(node, "vectors_per_class")
    if vectors == 0 or _count(node, "prob_a"):
        columns = classes
    else:
        columns = classes * (classes - 1) // 2
    return _classifier(columns)(node, ins, v)


def _array_feature_extractor(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    x, idx = input_at(ins, 0), input_at(ins, 1)
    if x is None or idx is None or not x[1]:
        return [None]
    k = int(np.prod(idx[1], dtype=np.int64))
    return [(x[0], (1, k) if len(x[1]) == 1 else (*x[1][:-1], k))]


def _one_hot_encoder(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    x = input_at(ins, 0)
    cats = _count(node, "cats_int64s", "cats_strings")
    return [None if x is None or cats < 1 else (_F, (*x[1], cats))]


def _label_encoder(node: onnx.NodeProto, ins: Ins, _v: Vals) -> Outs:
    x = input_at(ins, 0)
    if x is None:
        return [None]
    if _count(node, "values_int64s"):
        return [(_I64, x[1])]
    if _count(node, "values_floats"):
        return [(_F, x[1])]
    return [None]


#: (domain, op_type) -> rule (module doc)
ML_RULES: dict[tuple[str, str], Rule] = {
    (ML, "Scaler"): _same(_F),
    (ML, "Normalizer"): _same(_F),
    (ML, "Binarizer"): _same(),
    (ML, "Imputer"): _same(),
    (ML, "LinearRegressor"): _linear_regressor,
    (ML, "LinearClassifier"): _linear_classifier,
    (ML, "TreeEnsembleRegressor"): _tree_regressor,
    (ML, "TreeEnsembleClassifier"): _tree_classifier,
    (ML, "TreeEnsemble"): _tree_ensemble,
    (ML, "SVMRegressor"): _svm_regressor,
    (ML, "SVMClassifier"): _svm_classifier,
    (ML, "ArrayFeatureExtractor"): _array_feature_extractor,
    (ML, "OneHotEncoder"): _one_hot_encoder,
    (ML, "LabelEncoder"): _label_encoder,
}
