"""Shape engines: every intermediate tensor gets a dtype and a concrete shape.

The public interface of the shapes layer; higher layers import from here
(``from onnxmem.shapes import infer_shapes``):

* :func:`infer_shapes` (:mod:`~onnxmem.shapes.infer`): a loop over the engines of
  :mod:`~onnxmem.shapes.steps` (onnx inference with data propagation, onnxmem's op rules by
  partial evaluation, spec rules, training rules, onnxruntime's symbolic inference, measured
  shapes the caller passes in, the exporter's value_info), then the subgraphs
  (:mod:`~onnxmem.shapes.subgraphs`; Loops whose carried values grow per iteration, sized for a
  trip bound, in :mod:`~onnxmem.shapes.loops`); :func:`infer_symbolic_shapes` for range plans;
  where sizes stay unknown, the one line that leads to the fix (:mod:`~onnxmem.shapes.unknown`);
* :class:`ShapeInfo`, the frozen result;
* :mod:`~onnxmem.shapes.shapeeval`: the interpreter of shape arithmetic (op rules in
  :mod:`~onnxmem.shapes.evalops`); :mod:`~onnxmem.shapes.training`: gradient op rules.

This layer imports onnx and the model layer; onnxruntime only inside the symbolic engine,
when it runs (so importing the package stays cheap).
"""

from onnxmem.shapes.evalbase import MAX_ELEMENTS, tensor_value
from onnxmem.shapes.infer import infer_shapes, infer_symbolic_shapes, top_level_values
from onnxmem.shapes.info import ShapeInfo
from onnxmem.shapes.loops import LoopBound
from onnxmem.shapes.shapeeval import evaluate_values, needed_values, opset_version
from onnxmem.shapes.steps import STEPS, Inference, Step, TypedShape
from onnxmem.shapes.unknown import stuck_node

__all__ = [
    "MAX_ELEMENTS",
    "STEPS",
    "Inference",
    "LoopBound",
    "ShapeInfo",
    "Step",
    "TypedShape",
    "evaluate_values",
    "infer_shapes",
    "infer_symbolic_shapes",
    "needed_values",
    "opset_version",
    "stuck_node",
    "tensor_value",
    "top_level_values",
]
