#!/usr/bin/env python
"""Build the training set: forward+backward graphs made by onnxruntime's training artifact generator.

Usage (in the training environment, ``make training-env``)::

    .venv-training/bin/python tools/build_training.py            # every model
    .venv-training/bin/python tools/build_training.py --only mlp bert

Needs ``onnxruntime-training-cpu`` (``onnxruntime.training.artifacts``), torch and torchvision;
the main environment's onnxruntime has no training API. No weights are downloaded: every
architecture is built from code and initialised from a fixed seed.

Steps, per model:

1. build the module with ``torch.manual_seed(SEED)`` in training mode;
2. export it with the TorchScript exporter in training mode (Dropout keeps its ``training_mode``
   input, BatchNormalization its running statistics) at a fixed batch, opset 17;
3. ``generate_artifacts`` with a loss block (cross-entropy on integer labels), AdamW, the
   parameters the entry freezes in ``frozen_params`` and every other float parameter in
   ``requires_grad``: ``training_model.onnx``, ``eval_model.onnx``, ``optimizer_model.onnx``
   and a checkpoint, under ``training/build/NAME/`` (git-ignored); in the eval graph, the
   unread running-statistics outputs of BatchNormalization with ``training_mode=0`` are
   dropped (:func:`repair_eval`: onnxruntime refuses the generated graph otherwise);
4. write the fixtures ``models/training/NAME.train.onnx`` and ``NAME.eval.onnx``: the
   generated graphs with their IR version at most 10 and every floating-point initializer of
   1 KiB or more weight-free (``onnxmem.zoo.fixtures.strip_weights``). Parameters, gradient
   accumulation buffers and optimizer state are graph inputs of the generated graphs (their
   values live in the checkpoint), so the graphs themselves hold almost no weights.

``--dynamo`` builds the second set, :data:`DYNAMO`, through ``torch.onnx.export(...,
dynamo=True)`` (opset 18, the exporter's own graph optimizer on, as users export) and the
same generator, with the usual ``frozen_params``: every initializer of the export that is not
trainable, which makes the exporter's int64 constants (ReduceMean axes, Reshape targets)
frozen parameters, graph inputs whose values live in the checkpoint. The exporter writes
Dropout without its mask and LayerNormalization without its saved statistics, which the
generator's gradients read: the builder adds those outputs (:func:`add_saved_outputs`). Its fixtures keep the
generator's names, one folder per model: ``models/training/dynamo/NAME/training_model.onnx``,
``eval_model.onnx`` and ``checkpoint``; the committed checkpoint holds only the frozen
parameters that are constants rather than weights (:func:`onnxmem.model.value_type`: integer
and boolean tensors, floating-point scalars such as a Dropout ratio), written by onnxruntime's
own ``save_checkpoint``: a few hundred bytes where the generator's holds every weight, and all
that planning and ``verify`` read.
The generator's whole checkpoint stays under ``training/build/dynamo/NAME/`` (git-ignored).
``--frozen parameters`` lists only the module's own frozen parameters and buffers (the exporter's
constants stay in the graph) and ``--fusable-gelu`` writes the erf GELU in the order onnxruntime's
Gelu fusion matches (:func:`fusable_gelu`); either writes its artifacts under
``training/build/VARIANT/NAME/`` (:func:`variant`) and no fixture.
``models/training/dynamo/catalog.json`` records the set, and the models the exporter refuses
with its one-line reason.

The catalogue ``models/training/catalog.json`` records, per model, the architecture, batch,
input shapes, frozen and trainable parameter counts and the node count. The whole set is
deterministic; onnxruntime numbers its loss values with a counter that runs across the
models of one process (``onnx::loss::N``), so ``--only`` names them differently.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnxmem.core.fileio import write_bytes_atomic  # noqa: E402
from onnxmem.model import value_type  # noqa: E402
from onnxmem.zoo.export import MAX_IR_VERSION, SEED, import_torch  # noqa: E402
from onnxmem.zoo.fixtures import strip_weights  # noqa: E402

BUILD = ROOT / "training" / "build"
FIXTURES = ROOT / "models" / "training"
OPSET = 15
DYNAMO_OPSET = 18
#: the models exported with ``torch.onnx.export(..., dynamo=True)`` (``--dynamo``)
DYNAMO = ("mlp", "squeezenet", "mobilenet_v2", "unet", "bert", "resnet50")
DYNAMO_FIXTURES = FIXTURES / "dynamo"
#: what ``--dynamo`` hands the generator as ``frozen_params``: every initializer that is not trainable
#: (the exporter's constants included), or only the module's own parameters and buffers
FROZEN = ("initializers", "parameters")


@dataclass(frozen=True, slots=True)
class Arch:
    """One training model: the module, its example inputs, the labels' shape and class count,
    and which parameters stay frozen (a prefix match on the parameter name)."""

    name: str
    describe: str
    build: Callable[[], Any]
    inputs: Callable[[], tuple[Any, ...]]
    classes: int
    labels: tuple[int, ...]
    frozen: tuple[str, ...] = ()
    input_names: tuple[str, ...] = ("input",)
    notes: str = ""
    loss_axes: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- architectures


def _image(batch: int, size: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(batch, 3, size, size),)


def _tokens(batch: int, length: int, vocab: int) -> tuple[Any, ...]:
    import torch

    return (torch.randint(0, vocab, (batch, length), dtype=torch.int64),)


def mlp() -> Any:
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def mlp_dropout() -> Any:
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 256),
                         nn.GELU(), nn.Dropout(0.2), nn.Linear(256, 10))


def resnet18() -> Any:
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=100)


def resnet50() -> Any:
    import torchvision

    return torchvision.models.resnet50(weights=None, num_classes=100)


def mobilenet_v2() -> Any:
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None, num_classes=100)


def squeezenet() -> Any:
    import torchvision

    return torchvision.models.squeezenet1_1(weights=None, num_classes=100)


def unet() -> Any:
    """A three-level U-Net (padded convolutions, BatchNorm, transposed-convolution upsampling,
    24 base channels) whose per-pixel logits are flattened for the loss."""
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self, base: int = 24, depth: int = 3, classes: int = 4):
            super().__init__()
            widths = [base * 2**i for i in range(depth + 1)]
            self.down = nn.ModuleList()
            prev = 3
            for w in widths:
                self.down.append(block(prev, w))
                prev = w
            self.pool = nn.MaxPool2d(2)
            self.up = nn.ModuleList(nn.ConvTranspose2d(w * 2, w, 2, stride=2) for w in reversed(widths[:-1]))
            self.merge = nn.ModuleList(block(w * 2, w) for w in reversed(widths[:-1]))
            self.head = nn.Conv2d(base, classes, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            skips = []
            for i, down in enumerate(self.down):
                x = down(x)
                if i < len(self.down) - 1:
                    skips.append(x)
                    x = self.pool(x)
            for up, merge in zip(self.up, self.merge):
                x = merge(torch.cat([skips.pop(), up(x)], dim=1))
            y = self.head(x)  # [N, C, H, W] -> [N * H * W, C]
            return y.permute(0, 2, 3, 1).reshape(-1, y.shape[1])

    return UNet()


class _Encoder:
    """Builders of a BERT-style encoder (post-LN, GELU, learned positions) and a tied-weight
    language model. The residual stream is kept as token rows ``[batch * seq, hidden]``, so
    every Linear exports as one Gemm (weight read as it is, bias fused) rather than a MatMul
    over a transposed copy of the weight and an Add; attention uses explicit matmuls and
    softmax, so the exporter writes plain ONNX ops."""

    @staticmethod
    def layers(hidden: int, heads: int, ffn: int, depth: int, dropout: float) -> Any:
        import math

        import torch
        from torch import nn

        d = hidden // heads

        class Layer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.qkv = nn.Linear(hidden, 3 * hidden)
                self.out = nn.Linear(hidden, hidden)
                self.ln1 = nn.LayerNorm(hidden)
                self.ff1 = nn.Linear(hidden, ffn)
                self.ff2 = nn.Linear(ffn, hidden)
                self.ln2 = nn.LayerNorm(hidden)
                self.drop = nn.Dropout(dropout)

            def forward(self, x: torch.Tensor, b: int, s: int) -> torch.Tensor:  # x: [b * s, hidden]
                qkv = self.qkv(x).reshape(b, s, 3, heads, d)
                q = qkv[:, :, 0].permute(0, 2, 1, 3)  # [b, heads, s, d]
                k_t = qkv[:, :, 1].permute(0, 2, 3, 1)  # [b, heads, d, s]
                v = qkv[:, :, 2].permute(0, 2, 1, 3)
                att = torch.softmax((q @ k_t) * (1.0 / math.sqrt(d)), dim=-1)
                ctx = (self.drop(att) @ v).permute(0, 2, 1, 3).reshape(b * s, hidden)
                x = self.ln1(x + self.drop(self.out(ctx)))
                return self.ln2(x + self.drop(self.ff2(nn.functional.gelu(self.ff1(x)))))

        return nn.ModuleList(Layer() for _ in range(depth))


def bert() -> Any:
    """A BERT-style encoder: 12 layers, hidden 256, 4 heads, FFN 1024, dropout 0.1, sequence
    classification on the first token."""
    import torch
    from torch import nn

    class Bert(nn.Module):
        def __init__(self, vocab: int = 8000, length: int = 128, hidden: int = 256) -> None:
            super().__init__()
            self.hidden = hidden
            self.embed = nn.Embedding(vocab, hidden)
            self.pos = nn.Parameter(torch.zeros(1, length, hidden))
            self.ln = nn.LayerNorm(hidden)
            self.layers = _Encoder.layers(hidden, 4, 4 * hidden, 12, 0.1)
            self.pool = nn.Linear(hidden, hidden)
            self.cls = nn.Linear(hidden, 2)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            b, s = ids.shape
            x = self.ln((self.embed(ids) + self.pos).reshape(b * s, self.hidden))
            for layer in self.layers:
                x = layer(x, b, s)
            return self.cls(torch.tanh(self.pool(x.reshape(b, s, self.hidden)[:, 0])))

    return Bert()


def tied_lm() -> Any:
    """A four-layer decoder-sized language model whose output projection is the token
    embedding (one parameter, two uses: its gradient is the sum of both)."""
    import torch
    from torch import nn

    class TiedLM(nn.Module):
        def __init__(self, vocab: int = 4000, hidden: int = 192) -> None:
            super().__init__()
            self.hidden = hidden
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = _Encoder.layers(hidden, 4, 4 * hidden, 4, 0.0)
            self.ln = nn.LayerNorm(hidden)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            b, s = ids.shape
            x = self.embed(ids).reshape(b * s, self.hidden)
            for layer in self.layers:
                x = layer(x, b, s)
            return nn.functional.linear(self.ln(x), self.embed.weight)  # [b * s, vocab]

    return TiedLM()


def lstm() -> Any:
    """A two-layer LSTM sequence classifier over token embeddings (last step's hidden state)."""
    import torch
    from torch import nn

    class Lstm(nn.Module):
        def __init__(self, vocab: int = 2000, hidden: int = 256) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, 128)
            self.rnn1 = nn.LSTM(128, hidden, batch_first=True)
            self.rnn2 = nn.LSTM(hidden, hidden, batch_first=True)
            self.cls = nn.Linear(hidden, 5)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            y, _ = self.rnn1(self.embed(ids))
            y, _ = self.rnn2(y)
            return self.cls(y[:, -1])

    return Lstm()


def _mnist(batch: int) -> Callable[[], tuple[Any, ...]]:
    def make() -> tuple[Any, ...]:
        import torch

        return (torch.randn(batch, 1, 28, 28),)

    return make


ARCHS: tuple[Arch, ...] = (
    Arch("mlp", "MLP 784-512-256-10, batch 64", mlp, _mnist(64), 10, (64,), frozen=("1.",)),
    Arch("mlp_dropout", "MLP 784-512-256-10 with GELU and two Dropout(0.2), batch 64", mlp_dropout,
         _mnist(64), 10, (64,), frozen=("1.",)),
    Arch("resnet18", "ResNet-18 (torchvision), 100 classes, batch 8 at 64x64", resnet18,
         lambda: _image(8, 64), 100, (8,), frozen=("conv1.", "bn1.", "layer1.")),
    Arch("mobilenet_v2", "MobileNetV2 (torchvision), 100 classes, batch 8 at 64x64", mobilenet_v2,
         lambda: _image(8, 64), 100, (8,), frozen=("features.0.", "features.1.")),
    Arch("squeezenet", "SqueezeNet 1.1 (torchvision, Dropout 0.5), 100 classes, batch 8 at 64x64", squeezenet,
         lambda: _image(8, 64), 100, (8,), frozen=("features.0.",)),
    Arch("unet", "U-Net, 3 levels, 24 base channels, per-pixel 4 classes, batch 2 at 64x64", unet,
         lambda: _image(2, 64), 4, (2 * 64 * 64,), frozen=("down.0.",)),
    Arch("bert", "BERT-style encoder, 12 layers, hidden 256, 4 heads, dropout 0.1, batch 4 x 128 tokens", bert,
         lambda: _tokens(4, 128, 8000), 2, (4,), frozen=("embed.", "pos"), input_names=("input_ids",)),
    Arch("tied_lm", "4-layer language model, output projection tied to the embedding, batch 4 x 64 tokens",
         tied_lm, lambda: _tokens(4, 64, 4000), 4000, (4 * 64,), frozen=("layers.0.",),
         input_names=("input_ids",)),
    Arch("lstm", "two-layer LSTM classifier (hidden 256) over 32 tokens, batch 16", lstm,
         lambda: _tokens(16, 32, 2000), 5, (16,), frozen=("embed.",), input_names=("input_ids",)),
    # last: onnxruntime's loss counter runs across the models of one process, so a model placed
    # before others would rename their losses (see the docstring)
    Arch("resnet50", "ResNet-50 (torchvision), 100 classes, batch 4 at 160x160", resnet50,
         lambda: _image(4, 160), 100, (4,), frozen=("conv1.", "bn1.", "layer1.")),
)


# --------------------------------------------------------------------------- generation


def export_forward(arch: Arch, dynamo: bool = False,
                   frozen_kind: str = "initializers") -> tuple[onnx.ModelProto, list[str], list[str]]:
    """The forward model in training mode, and its (trainable, frozen) parameter names.

    TorchScript (the default): the frozen ones are the float parameters ``arch.frozen`` names.
    ``dynamo``: ``torch.onnx.export(..., dynamo=True)`` at :data:`DYNAMO_OPSET`, and the frozen
    ones are, by ``frozen_kind`` (:data:`FROZEN`), every initializer that is not trainable (the
    exporter's constants included: ``frozen_params = [i.name for i in model.graph.initializer if
    i.name not in requires_grad]``, the usual way to write it) or only the module's parameters and
    buffers that are not trainable (the generator then keeps every other initializer in the graph
    as a constant: ``onnxblock``'s ``_move_initializers_to_inputs`` moves only the names listed)."""
    torch = import_torch()
    torch.manual_seed(SEED)
    module = arch.build()
    module.train()
    args = arch.inputs()
    if dynamo:
        program = torch.onnx.export(module, args, input_names=list(arch.input_names), output_names=["logits"],
                                    opset_version=DYNAMO_OPSET, dynamo=True, verbose=False)
        model = program.model_proto
    else:
        buf = io.BytesIO()
        torch.onnx.export(module, args, buf, input_names=list(arch.input_names), output_names=["logits"],
                          opset_version=OPSET, do_constant_folding=False, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, export_params=True,
                          keep_initializers_as_inputs=False)
        model = onnx.load_from_string(buf.getvalue())
    names = {i.name for i in model.graph.initializer}
    floats = [n for n, p in module.named_parameters() if n in names and p.dtype.is_floating_point]
    frozen = [n for n in floats if n.startswith(arch.frozen)] if arch.frozen else []
    trainable = [n for n in floats if n not in frozen]
    if dynamo and frozen_kind == "initializers":
        frozen = [i.name for i in model.graph.initializer if i.name not in trainable]
    elif dynamo:
        frozen = [n for n in module.state_dict() if n in names and n not in trainable]
    return model, trainable, frozen


def repair_eval(graph: onnx.ModelProto) -> int:
    """Make the generator's eval graph loadable: it keeps BatchNormalization's running-mean and
    running-var outputs while setting ``training_mode=0``, which onnxruntime refuses ("number
    of op outputs should be 1 when Training_mode = False"). Outputs that nothing reads are
    dropped; returns how many nodes changed."""
    read = {n for node in graph.graph.node for n in node.input} | {o.name for o in graph.graph.output}
    changed = 0
    for node in graph.graph.node:
        mode = next((a.i for a in node.attribute if a.name == "training_mode"), 0)
        if node.op_type == "BatchNormalization" and not mode and len(node.output) > 1:
            if not any(o in read for o in node.output[1:]):
                del node.output[1:]
                changed += 1
    return changed


#: the outputs the generator's gradients read that the dynamo exporter leaves off: Dropout's mask
#: (DropoutGrad), LayerNormalization's mean and inverse standard deviation (LayerNormalizationGrad)
SAVED_OUTPUTS = {"Dropout": ("mask",), "LayerNormalization": ("mean", "inv_std_dev")}


def add_saved_outputs(model: onnx.ModelProto) -> int:
    """Give every node of :data:`SAVED_OUTPUTS` written with its first output alone the outputs
    its gradient reads, in place: the generator's gradient builders index them and abort
    otherwise (``gradient_builder_base.h``: ``i < node_->OutputDefs().size()``). Returns how many
    nodes changed."""
    changed = 0
    for node in model.graph.node:
        extra = SAVED_OUTPUTS.get(node.op_type, ()) if (node.domain or "") in ("", "ai.onnx") else ()
        if extra and len(node.output) == 1:
            node.output.extend(f"{node.output[0]}_{suffix}" for suffix in extra)
            changed += 1
    return changed


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def write_fixture(graph: onnx.ModelProto, kind: str, target: Path, stem: str) -> int:
    """Write one generated graph as a weight-free fixture (IR version at most 10; an eval graph
    repaired, :func:`repair_eval`); returns its node count."""
    graph.ir_version = min(graph.ir_version, MAX_IR_VERSION)
    if kind == "eval":
        repair_eval(graph)
    stripped, _ = strip_weights(graph, stem)
    write_bytes_atomic(target, stripped.SerializeToString())
    return len(graph.graph.node)


def variant(frozen_kind: str, gelu: bool) -> str:
    """The folder under ``training/build`` of the dynamo artifacts generated with ``frozen_kind``
    (:data:`FROZEN`) and, with ``gelu``, :func:`fusable_gelu`: ``dynamo`` for the fixtures' own."""
    return "dynamo" + ("" if frozen_kind == FROZEN[0] else f"-{frozen_kind}") + ("-gelu" if gelu else "")


def _constant(model: onnx.ModelProto, name: str, value: float) -> bool:
    from onnx import numpy_helper

    init = next((i for i in model.graph.initializer if i.name == name), None)
    if init is None or math.prod(init.dims) != 1:
        return False
    got = numpy_helper.to_array(init).ravel()[0]
    return bool(got == got.dtype.type(value))  # sqrt(2) rounded to the constant's type


def fusable_gelu(model: onnx.ModelProto) -> int:
    """Write each erf GELU of the dynamo exporter, ``x * (0.5 * (1 + erf(x / sqrt 2)))``, as
    ``(x * 0.5) * (1 + erf(x / sqrt 2))``, the form onnxruntime's ``GeluFusion`` matches (its last
    Mul must read a ``Mul(x, 0.5)``), in place; the same value bit for bit (a product with 0.5 is
    exact). Returns how many changed."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)

    def only(name: str, op: str) -> onnx.NodeProto | None:
        nodes = readers.get(name, [])
        return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op else None

    changed = 0
    for div in [n for n in model.graph.node if n.op_type == "Div"]:
        x = div.input[0]
        erf = only(div.output[0], "Erf")
        add = erf and only(erf.output[0], "Add")
        half = add and only(add.output[0], "Mul")
        last = half and only(half.output[0], "Mul")
        if not (last and _constant(model, div.input[1], math.sqrt(2.0)) and list(last.input) in
                ([x, half.output[0]], [half.output[0], x])):
            continue
        c = next((i for i in half.input if i != add.output[0]), "")
        if not _constant(model, c, 0.5):
            continue
        del half.input[:]
        half.input.extend([x, c])  # x * 0.5
        del last.input[:]
        last.input.extend([half.output[0], add.output[0]])  # (x * 0.5) * (1 + erf)
        changed += 1
    return changed


def generate_dynamo(arch: Arch, frozen_kind: str = "initializers", gelu: bool = False) -> tuple[dict[str, Any], float]:
    """The dynamo set's fixtures of one model (module doc): its catalogue entry (with the
    exporter's or the generator's one-line error where one refuses it) and the seconds taken.
    ``frozen_kind="parameters"`` (:func:`export_forward`) or ``gelu`` (:func:`fusable_gelu`)
    generate the artifacts under ``training/build/VARIANT/NAME`` (:func:`variant`) only: no
    fixture is written."""
    from onnxruntime.training import artifacts, onnxblock

    t0 = time.perf_counter()
    entry: dict[str, Any] = {"name": arch.name, "architecture": arch.describe,
                             "inputs": {n: list(a.shape) for n, a in zip(arch.input_names, arch.inputs())},
                             "labels": list(arch.labels)}
    try:
        model, trainable, frozen = export_forward(arch, dynamo=True, frozen_kind=frozen_kind)
    except Exception as exc:  # the exporter's own refusal, recorded in the catalogue
        return {**entry, "refused": f"torch.onnx.export(dynamo=True): {_one_line(exc)}"}, time.perf_counter() - t0
    add_saved_outputs(model)
    if gelu:
        fusable_gelu(model)
    out = BUILD / variant(frozen_kind, gelu) / arch.name
    out.mkdir(parents=True, exist_ok=True)
    try:
        artifacts.generate_artifacts(
            model, requires_grad=trainable, frozen_params=frozen, loss=artifacts.LossType.CrossEntropyLoss,
            optimizer=artifacts.OptimType.AdamW, artifact_directory=str(out),
        )
    except Exception as exc:
        return {**entry, "refused": f"generate_artifacts: {_one_line(exc)}"}, time.perf_counter() - t0
    if variant(frozen_kind, gelu) != "dynamo":
        return {**entry, "frozen_tensors": len(frozen),
                "training_nodes": len(onnx.load(str(out / "training_model.onnx")).graph.node)}, time.perf_counter() - t0
    target = DYNAMO_FIXTURES / arch.name
    target.mkdir(parents=True, exist_ok=True)
    counts = {kind: write_fixture(onnx.load(str(out / f"{kind}_model.onnx")), kind, target / f"{kind}_model.onnx",
                                  f"{arch.name}.{kind}") for kind in ("training", "eval")}
    constants = [i for i in model.graph.initializer
                 if i.name in set(frozen) and value_type(i.data_type, math.prod(i.dims))]
    onnxblock.save_checkpoint(([], constants), target / "checkpoint")
    return {
        **entry,
        "exporter": f"torch.onnx.export(dynamo=True), opset {DYNAMO_OPSET}",
        "trainable_tensors": len(trainable),
        "frozen_tensors": len(frozen),
        "frozen_constants": len(constants),
        "checkpoint_bytes": (out / "checkpoint").stat().st_size,
        "training_nodes": counts["training"],
        "eval_nodes": counts["eval"],
    }, time.perf_counter() - t0


def build_artifacts(arch: Arch) -> tuple[onnx.ModelProto, list[str], list[str], Path]:
    """Export one model of the TorchScript set and generate its artifacts under ``training/build/NAME/``
    (the graphs, the optimizer and the generator's whole checkpoint, weights included; git-ignored),
    writing no fixture; the forward model, its trainable and frozen parameters and the folder."""
    from onnxruntime.training import artifacts

    model, trainable, frozen = export_forward(arch)
    out = BUILD / arch.name
    out.mkdir(parents=True, exist_ok=True)
    artifacts.generate_artifacts(
        model, requires_grad=trainable, frozen_params=frozen, loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.AdamW, artifact_directory=str(out),
    )
    return model, trainable, frozen, out


def generate(arch: Arch) -> tuple[dict[str, Any], float]:
    """Export, generate and write one model's fixtures; its catalogue entry and the seconds it took."""
    t0 = time.perf_counter()
    model, trainable, frozen, out = build_artifacts(arch)
    counts = {kind: write_fixture(onnx.load(str(out / f"{kind}_model.onnx")), kind,
                                  FIXTURES / f"{arch.name}.{'train' if kind == 'training' else 'eval'}.onnx",
                                  f"{arch.name}.{'train' if kind == 'training' else 'eval'}")
              for kind in ("training", "eval")}
    params = {i.name: i for i in model.graph.initializer}

    def numel(names: list[str]) -> int:
        total = 0
        for n in names:
            size = 1
            for d in params[n].dims:
                size *= d
            total += size
        return total

    return {
        "name": arch.name,
        "architecture": arch.describe,
        "inputs": {n: list(a.shape) for n, a in zip(arch.input_names, arch.inputs())},
        "labels": list(arch.labels),
        "trainable_parameters": numel(trainable),
        "frozen_parameters": numel(frozen),
        "trainable_tensors": len(trainable),
        "frozen_tensors": len(frozen),
        "training_nodes": counts["training"],
        "eval_nodes": counts["eval"],
    }, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="model names to build (default: all)")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--dynamo", action="store_true",
                   help=f"build the dynamo set ({', '.join(DYNAMO)}) under models/training/dynamo/")
    p.add_argument("--frozen", choices=FROZEN, default=FROZEN[0],
                   help="with --dynamo, what frozen_params lists: every initializer that is not trainable "
                        "(the fixtures), or only the module's parameters and buffers (artifacts under "
                        "training/build/dynamo-parameters/, no fixture)")
    p.add_argument("--fusable-gelu", action="store_true",
                   help="with --dynamo, write the exporter's erf GELU in the order onnxruntime's Gelu fusion "
                        "matches (artifacts under training/build/dynamo[-parameters]-gelu/, no fixture)")
    args = p.parse_args(argv)
    if args.list:
        for a in ARCHS:
            print(f"{a.name:14} {a.describe}")
        return 0
    chosen = [a for a in ARCHS if args.only is None or a.name in args.only]
    unknown = set(args.only or ()) - {a.name for a in ARCHS}
    if unknown:
        print(f"unknown model(s): {', '.join(sorted(unknown))}; see --list", file=sys.stderr)
        return 2
    if args.dynamo and variant(args.frozen, args.fusable_gelu) != "dynamo":
        for arch in (a for a in chosen if a.name in DYNAMO):
            entry, seconds = generate_dynamo(arch, args.frozen, args.fusable_gelu)
            print(f"{arch.name:14} {entry.get('refused') or entry['training_nodes']} ({seconds:.1f} s)", flush=True)
        return 0
    if args.dynamo:
        return build_dynamo([a for a in chosen if a.name in DYNAMO])
    def said(entry: dict[str, Any]) -> str:
        return (f"{entry['training_nodes']:5} training nodes, {entry['eval_nodes']:5} eval nodes, "
                f"{entry['trainable_parameters']:,} trainable / {entry['frozen_parameters']:,} frozen parameters")

    return build_catalog(FIXTURES, chosen, generate, said, [a.name for a in ARCHS])


def build_catalog(folder: Path, chosen: list[Arch], make: Callable[[Arch], tuple[dict[str, Any], float]],
                  said: Callable[[dict[str, Any]], str], order: list[str]) -> int:
    """Make each of ``chosen`` with ``make`` and merge its entry into ``folder/catalog.json`` (kept in
    ``order``), printing what ``said`` says of each."""
    folder.mkdir(parents=True, exist_ok=True)
    catalog_path = folder / "catalog.json"
    catalog = json.loads(catalog_path.read_text()) if catalog_path.is_file() else {}
    for arch in chosen:
        entry, seconds = make(arch)
        catalog[arch.name] = entry
        print(f"{arch.name:14} {said(entry)} ({seconds:.1f} s)", flush=True)
    ordered = {n: catalog[n] for n in order if n in catalog}
    write_bytes_atomic(catalog_path, (json.dumps(ordered, indent=1) + "\n").encode())
    return 0


def build_dynamo(chosen: list[Arch]) -> int:
    """Build the dynamo set's fixtures and ``models/training/dynamo/catalog.json``."""
    def said(entry: dict[str, Any]) -> str:
        return entry.get("refused") or (f"{entry['training_nodes']:5} training nodes, {entry['eval_nodes']:5} eval "
                                         f"nodes, {entry['frozen_constants']} frozen constants")

    return build_catalog(DYNAMO_FIXTURES, chosen, generate_dynamo, said, list(DYNAMO))


if __name__ == "__main__":
    raise SystemExit(main())
