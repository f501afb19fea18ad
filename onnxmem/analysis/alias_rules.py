"""The alias rules: which op's output may share which input's bytes (:data:`RULES`), and where a
Concat's inputs lie inside its output (:func:`concat_slices`). :mod:`onnxmem.analysis.aliasing`
applies them along an order; its docstring states the rules and why they are safe."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from onnx import TensorProto

from onnxmem.graph import GraphView, Op, draws_random

__all__ = [
    "CONCAT", "DECLARED_INPLACE", "INPLACE", "PROVIDER_RULES", "RULES", "VIEW", "Alias", "AliasRule", "alias_rule", "concat_slices",
]

VIEW = "view"
INPLACE = "inplace"
CONCAT = "concat"


def _always(op: Op) -> bool:
    return True


def _dropout_inference(op: Op) -> bool:
    """Dropout is an identity only without a ``training_mode`` input."""
    return not draws_random(op)


@dataclass(frozen=True, slots=True)
class AliasRule:
    """Output 0 of the op may take the bytes of ``inputs[k]`` (first that qualifies).

    ``kind``: ``"view"`` (same bytes, nothing computed) or ``"inplace"``
    (computed element by element over the input). ``when``: a condition on
    the node (attributes, optional inputs) for the rule to apply. ``dtypes``:
    the element types of the reused input the rule holds for (``None``: any).
    """

    kind: str
    inputs: tuple[int, ...]
    when: Callable[[Op], bool] = _always
    dtypes: frozenset[int] | None = None

    def holds_for(self, elem_type: int) -> bool:
        """Whether an input of element type ``elem_type`` may be reused."""
        return self.dtypes is None or elem_type in self.dtypes


_F = frozenset({TensorProto.FLOAT})
_FD = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})

#: views: onnxruntime's CPU and CUDA kernels of Reshape, Flatten, Squeeze,
#: Unsqueeze and Identity declare ``Alias(0, 0)`` (the output *is* the input's
#: buffer). Dropout at inference declares nothing, but its kernel copies the
#: input only when the buffers differ (``X != Y``), so bytes bound over
#: themselves stay as they are; a view computes nothing, so no vector width
#: can change it.
_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")

#: in-place ops: element types for which onnxruntime's kernel registrations
#: declare ``MayInplace(0, 0)`` on **both** CPU
#: (``core/providers/cpu/activation/activations.cc``: float, and double for
#: Relu, Sigmoid and Tanh) and CUDA (``core/providers/cuda/activation/activations.cc``:
#: half, float, double). onnxruntime then runs these kernels in place itself,
#: so every build of them (AVX2, AVX-512, NEON, CUDA) is correct that way. A
#: plan records no device, so an op declared on one provider only is left out:
#: Cast, Clip, Celu, Softmax and LogSoftmax (float) declare it on CPU only;
#: the com.microsoft gradients (ReluGrad, TanhGrad, GeluGrad, FastGeluGrad,
#: DropoutGrad, Scale) on CUDA only. Neither provider declares it for the
#: unary math ops (Abs, Exp, Erf, Sqrt, ...), the binary and variadic ones
#: (Add, Mul, Sum, ...), PRelu, BatchNormalization or Gelu (whose CPU kernel
#: writes ``x / sqrt(2)`` into the output and reads the input again after
#: MLAS's erf pass), so those never run in place.
DECLARED_INPLACE: dict[str, frozenset[int]] = {
    "Relu": _FD, "Sigmoid": _FD, "Tanh": _FD,
    **{op: _F for op in ("Elu", "HardSigmoid", "LeakyRelu", "Selu", "Softplus", "Softsign", "ThresholdedRelu")},
}

#: (domain, op_type) -> rule. Domain "" is ai.onnx. Ops absent here never alias.
RULES: dict[tuple[str, str], AliasRule] = {
    **{("", op): AliasRule(VIEW, (0,)) for op in _VIEWS},
    ("", "Dropout"): AliasRule(VIEW, (0,), _dropout_inference),
    **{("", op): AliasRule(INPLACE, (0,), dtypes=types) for op, types in DECLARED_INPLACE.items()},
}


#: in-place rules one provider's kernels declare and the other's do not, admitted only in a
#: view of the graph onnxruntime built for that provider (``plan --optimize LEVEL --device``,
#: :attr:`onnxmem.graph.GraphView.kernels`): such a plan holds for that provider only, and
#: verify refuses it on another. CPU (onnxruntime 1.31): ``MayInplace(0, 0)`` on Clip
#: (``cpu/math/clip.cc``), Softmax and LogSoftmax (``cpu/math/softmax.cc``) and Celu
#: (``cpu/activation/activations.cc``), float; ``MayInplace(3, 0)`` on the fused
#: convolutions' ``Sum`` input (the residual added to the result: com.microsoft FusedConv,
#: ``contrib_ops/cpu/fused_conv.cc``; com.microsoft.nchwc Conv, ``contrib_ops/cpu/nchwc_ops.cc``),
#: float. CUDA: none beyond :data:`RULES` (its in-place gradients run in training graphs,
#: which are planned as written).
PROVIDER_RULES: dict[str, dict[tuple[str, str], AliasRule]] = {
    "cpu": {
        **{("", op): AliasRule(INPLACE, (0,), dtypes=_F) for op in ("Clip", "Softmax", "LogSoftmax", "Celu")},
        ("com.microsoft", "FusedConv"): AliasRule(INPLACE, (3,), dtypes=_F),
        ("com.microsoft.nchwc", "Conv"): AliasRule(INPLACE, (3,), dtypes=_F),
    },
    "cuda": {},
}


def alias_rule(op: Op, kernels: str = "") -> AliasRule | None:
    """The rule for ``op``, or ``None`` when its output never shares an input's bytes.
    ``kernels``: ``""`` for the rules every provider's kernels allow (:data:`RULES`), or a
    provider whose own declarations (:data:`PROVIDER_RULES`) apply too."""
    domain = "" if op.domain in ("", "ai.onnx") else op.domain
    rule = RULES.get((domain, op.op_type))
    if rule is None and kernels:
        rule = PROVIDER_RULES[kernels].get((domain, op.op_type))
    if rule is None or not rule.when(op):
        return None
    return rule



def concat_slices(view: GraphView, op: Op) -> tuple[int, ...] | None:
    """Byte offset of each input inside the output of the Concat ``op``, or ``None``.

    ``None`` unless ``op`` is an ai.onnx Concat whose every input is one
    contiguous run of the output's bytes: every dim before the concat axis is
    1 (the axis is the one dim where an input's shape differs from the
    output's), and elements are whole bytes. Input ``i`` then occupies bytes
    ``[offsets[i], offsets[i] + size_i)`` of the output, ``offsets[i]`` being
    the sum of the sizes of inputs ``0 .. i-1``.

    Example: inputs ``[1, 3, 4, 4]`` and ``[1, 5, 4, 4]`` (float) concatenated
    on axis 1 give ``(0, 192)``; on a batch of 2 the slices interleave and the
    answer is ``None``.
    """
    if op.op_type != "Concat" or op.domain not in ("", "ai.onnx") or not op.outputs or not op.outputs[0]:
        return None
    out = view.tensors.get(op.outputs[0])
    ins = [view.tensors.get(n) for n in op.inputs]
    if out is None or not ins or any(t is None or len(t.shape) != len(out.shape) for t in ins):
        return None
    numel = math.prod(out.shape)
    if numel == 0 or out.size % numel:
        return None
    item = out.size // numel  # bytes per element; sub-byte types have none
    axes = {d for t in ins for d, (a, b) in enumerate(zip(t.shape, out.shape)) if a != b}  # type: ignore[union-attr]
    if len(axes) > 1 or (axes and math.prod(out.shape[: min(axes)]) != 1):
        return None
    offsets: list[int] = []
    at = 0
    for t in ins:
        if t.size != math.prod(t.shape) * item:  # type: ignore[union-attr]
            return None
        offsets.append(at)
        at += t.size  # type: ignore[union-attr]
    if at != out.size:
        return None
    return tuple(offsets)


@dataclass(frozen=True, slots=True)
class Alias:
    """Node ``node`` writes ``output`` sharing the bytes of ``input``.

    ``kind``: ``view``, ``inplace`` (both: the same bytes) or ``concat``
    (``input`` lies inside ``output`` at byte ``offset``).
    """

    node: int
    output: str
    input: str
    kind: str
    offset: int = 0
