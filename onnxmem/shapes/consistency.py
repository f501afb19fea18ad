"""The shapes inference gives, checked against a rule onnxruntime enforces when it runs.

onnx's shape inference computes a Reshape's output shape from its target alone: it does not
check that the target holds as many elements as the data. A target whose value is wrong (a
training checkpoint's frozen parameter, an initializer of a hostile file: ``[32, 784]`` for
data of ``[64, 784]``) gives a shape onnxruntime refuses at run time (``The input tensor
cannot be reshaped to the requested shape``), and a plan sized from it would be the plan of
a graph that cannot run. :func:`check_reshapes` refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import onnx

from onnxmem.core.errors import ShapeError, show_name

__all__ = ["check_reshapes"]


def check_reshapes(model: onnx.ModelProto, known: Mapping[str, tuple[int, tuple[int, ...]]]) -> None:
    """``ShapeError`` for the first Reshape of ``model``'s graph whose data and output shapes in
    ``known`` (dtype, shape) hold different numbers of elements."""
    for node in model.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.input) < 2 or not node.output:
            continue
        data, out = known.get(node.input[0]), known.get(node.output[0])
        if data is None or out is None:
            continue
        have, made = math.prod(data[1]), math.prod(out[1])
        if have != made:
            raise ShapeError(
                f"Reshape node {show_name(node.name or node.output[0])} makes {show_name(node.input[0])} of shape "
                f"{list(data[1])} ({have:,} elements) into {list(out[1])} ({made:,}), which onnxruntime refuses; "
                f"check the value of its target {show_name(node.input[1])} (an initializer, or a training "
                "checkpoint's frozen parameter: --checkpoint PATH)")
