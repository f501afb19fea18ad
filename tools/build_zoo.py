#!/usr/bin/env python
"""Build the model zoo: real architectures with random weights, exported to ONNX offline.

Usage::

    python tools/build_zoo.py                  # every model -> zoo/build/, fixtures -> models/zoo/
    python tools/build_zoo.py --only bert_base gpt2
    python tools/build_zoo.py --list

Needs the ``zoo`` extra (``pip install -e .[zoo]``: torch, torchvision, timm, transformers,
onnxscript). No weights are downloaded: every architecture is built from code or from a
configuration object and initialised from a fixed seed.

Steps, per model:

1. build the module (torchvision, timm, transformers, or a network defined here) in eval mode
   with ``torch.manual_seed(SEED)``;
2. export it with the dynamo exporter (clean graphs, static shapes everywhere) or the legacy
   TorchScript exporter (Constant nodes and runtime shape arithmetic), at fixed input shapes,
   or with some dimensions symbolic;
3. set the IR version to at most 10, so that onnxruntime reads the file;
4. write ``zoo/build/NAME.onnx`` with its weights in ``NAME.onnx.data`` (git-ignored);
5. write the weight-free fixture ``models/zoo/NAME.onnx``: every floating-point initializer of
   1 KiB or more becomes an external-data reference to ``NAME.weights.bin`` (a file that is
   never written) and records its value statistics in its ``doc_string``, so that
   ``onnxmem.zoo.fill_weights`` can put plausible random values back for execution (the
   format is ``onnxmem.zoo.fixtures``; the export step is ``onnxmem.zoo.export``);
6. record the model in ``catalog.json`` (both folders): source, exporter, input shapes,
   symbolic dimensions and a suggested ``--dim`` binding for each.

The nine models that ship inside the onnx wheel (``onnx/backend/test/data/light``) join both
catalogues by reference; they need no extra.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnxmem.model.generate import random_dag, wiring  # noqa: E402
from onnxmem.zoo import (  # noqa: E402
    FIXTURE_MIN_BYTES,
    LIGHT_MODELS,
    describe_model,
    light_model_path,
    strip_weights,
    write_catalog,
)
from onnxmem.zoo.export import SEED, Entry, Export, catalog_entry, export, import_torch  # noqa: E402

# --------------------------------------------------------------------------- architectures


def image(batch: int = 1, size: int = 224) -> Any:
    import torch

    return torch.randn(batch, 3, size, size)


def tokens(batch: int, length: int, vocab: int) -> Any:
    import torch

    return torch.randint(0, vocab, (batch, length), dtype=torch.int64)


def torchvision_model(arch: str, size: int = 224, **kw: Any) -> Callable[[], Export]:
    def build() -> Export:
        import torchvision

        model = getattr(torchvision.models, arch)(weights=None, **kw)
        return Export(model, (image(1, size),), ["image"], ["logits"])

    return build


def timm_model(arch: str, size: int) -> Callable[[], Export]:
    def build() -> Export:
        import timm

        model = timm.create_model(arch, pretrained=False)
        return Export(model, (image(1, size),), ["image"], ["logits"])

    return build


def unet() -> Export:
    """The U-Net of Ronneberger et al. (2015), padded convolutions, four levels, 32 base channels."""
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    class UNet(nn.Module):
        def __init__(self, cin: int = 3, classes: int = 2, base: int = 32, depth: int = 4):
            super().__init__()
            widths = [base * 2**i for i in range(depth + 1)]
            self.down = nn.ModuleList()
            prev = cin
            for w in widths:
                self.down.append(block(prev, w))
                prev = w
            self.pool = nn.MaxPool2d(2)
            self.up = nn.ModuleList()
            self.merge = nn.ModuleList()
            for w in reversed(widths[:-1]):
                self.up.append(nn.ConvTranspose2d(w * 2, w, 2, stride=2))
                self.merge.append(block(w * 2, w))
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
            return self.head(x)

    return Export(UNet(), (image(1, 256),), ["image"], ["mask"])


def randwire() -> Export:
    """RandWire-WS (Xie et al., 2019), small regime: three random stages WS(32, 4, 0.75), C=78.

    Each stage is a random DAG (``onnxmem.model.generate.random_dag``, seeds 0, 1, 2; edges oriented
    from lower to higher node index, wired by ``onnxmem.model.generate.wiring``); a node sums
    its inputs with learned sigmoid weights, then applies ReLU, a separable 3x3 convolution and
    batch normalisation. Nodes without predecessors read the stage input (stride 2); the stage
    output is the mean of the nodes without successors.
    """
    import torch
    from torch import nn

    class Node(nn.Module):
        def __init__(self, fan_in: int, cin: int, cout: int, stride: int):
            super().__init__()
            self.weights = nn.Parameter(torch.zeros(fan_in)) if fan_in > 1 else None
            self.op = nn.Sequential(
                nn.ReLU(),
                nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False),
                nn.Conv2d(cin, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )

        def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
            if self.weights is None:
                x = inputs[0]
            else:
                w = torch.sigmoid(self.weights)
                x = inputs[0] * w[0]
                for i in range(1, len(inputs)):
                    x = x + inputs[i] * w[i]
            return self.op(x)

    class Stage(nn.Module):
        def __init__(self, cin: int, cout: int, seed: int, n: int = 32, k: int = 4,
                     p: float = 0.75):
            super().__init__()
            wired = wiring(n, random_dag(n, "ws", seed, k=k, p=p))
            self.preds, self.sinks = wired.preds, wired.sinks
            self.nodes = nn.ModuleList(
                Node(max(1, len(self.preds[v])), cin if not self.preds[v] else cout, cout,
                     2 if not self.preds[v] else 1)
                for v in range(n)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: list[torch.Tensor] = []
            for v, node in enumerate(self.nodes):
                preds = self.preds[v]
                out.append(node([x] if not preds else [out[u] for u in preds]))
            y = out[self.sinks[0]]
            for v in self.sinks[1:]:
                y = y + out[v]
            return y / len(self.sinks)

    class RandWire(nn.Module):
        def __init__(self, c: int = 78, classes: int = 1000):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, c // 2, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c // 2),
                nn.ReLU(),
                nn.Conv2d(c // 2, c, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c),
            )
            self.stages = nn.Sequential(Stage(c, c, SEED), Stage(c, 2 * c, SEED + 1),
                                        Stage(2 * c, 4 * c, SEED + 2))
            self.head = nn.Sequential(
                nn.ReLU(),
                nn.Conv2d(4 * c, 1280, 1, bias=False),
                nn.BatchNorm2d(1280),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(1280, classes),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.stages(self.stem(x)))

    return Export(RandWire(), (image(1, 224),), ["image"], ["logits"])


def eager(config: Any) -> Any:
    config._attn_implementation = "eager"
    return config


def bert_base(batch: int = 1, length: int = 128) -> Callable[[], Export]:
    def build() -> Export:
        import torch
        from transformers import BertConfig, BertModel

        config = eager(BertConfig())  # bert-base-uncased: 12 layers, 768 wide, 12 heads

        class Bert(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = BertModel(config, add_pooling_layer=True)

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
                out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
                return out.last_hidden_state, out.pooler_output

        ids = tokens(batch, length, config.vocab_size)
        mask = torch.ones(batch, length, dtype=torch.int64)
        return Export(Bert(), (ids, mask), ["input_ids", "attention_mask"],
                      ["last_hidden_state", "pooler_output"])

    return build


def gpt2(length: int = 128) -> Export:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = eager(GPT2Config(use_cache=False))  # gpt2: 12 layers, 768 wide, 12 heads

    class GPT2(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = GPT2LMHeadModel(config)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=input_ids, use_cache=False).logits

    return Export(GPT2(), (tokens(1, length, config.vocab_size),), ["input_ids"], ["logits"])


def kv_step(lm: Any, layers: int, kv_heads: int, head_dim: int, past: int, new: int) -> Export:
    """One decoding step of the causal language model ``lm`` with a KV cache: ``new`` tokens
    after ``past`` cached positions, batch 1.

    Inputs: ``input_ids`` (1 x new), then ``past.I.key`` and ``past.I.value`` (1 x kv_heads x
    past x head_dim) for each layer ``I``; outputs: ``logits``, then ``present.I.key`` and
    ``present.I.value`` (the cache with the new positions appended).
    """
    import torch
    from transformers import DynamicCache

    config = lm.config

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids: torch.Tensor, *past_kv: torch.Tensor) -> Any:
            cache = DynamicCache(config=config)
            for i in range(layers):
                cache.update(past_kv[2 * i], past_kv[2 * i + 1], i)
            total = past_kv[0].shape[2] + input_ids.shape[1]
            mask = torch.ones(input_ids.shape[0], total, dtype=torch.int64)
            out = self.lm(input_ids=input_ids, past_key_values=cache, attention_mask=mask,
                          use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    kv = [torch.randn(1, kv_heads, past, head_dim) for _ in range(2 * layers)]
    names = [f"past.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return Export(Step(), (tokens(1, new, config.vocab_size), *kv), ["input_ids", *names], outs)


def past_dims(layers: int) -> dict[str, dict[int, str]]:
    """The ``dynamic`` map of a ``kv_step`` export whose past length is the dim ``past_sequence``."""
    return {f"past.{i}.{kv}": {2: "past_sequence"} for i in range(layers) for kv in ("key", "value")}


def gpt2_past(past: int = 128, new: int = 1) -> Export:
    """One decoding step of GPT-2: ``new`` tokens after ``past`` cached positions."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = eager(GPT2Config(use_cache=True))
    return kv_step(GPT2LMHeadModel(config), config.n_layer, config.n_head,
                   config.n_embd // config.n_head, past, new)


def vit_base(batch: int = 1) -> Callable[[], Export]:
    def build() -> Export:
        import torch
        from transformers import ViTConfig, ViTForImageClassification

        config = eager(ViTConfig(num_labels=1000))  # ViT-B/16 at 224

        class ViT(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.vit = ViTForImageClassification(config)

            def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
                return self.vit(pixel_values=pixel_values).logits

        return Export(ViT(), (image(batch, 224),), ["pixel_values"], ["logits"])

    return build


def t5_small(source: int = 128, target: int = 32) -> Export:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    config = eager(T5Config(  # t5-small
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
        use_cache=False,
    ))

    class T5(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t5 = T5ForConditionalGeneration(config)

        def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> Any:
            return self.t5(input_ids=input_ids, decoder_input_ids=decoder_input_ids,
                           use_cache=False).logits

    return Export(T5(), (tokens(1, source, 32128), tokens(1, target, 32128)),
                  ["input_ids", "decoder_input_ids"], ["logits"])


LLAMA = "transformers LlamaConfig (4 layers, 1024 wide, GQA 16/4)"


def llama_config(use_cache: bool) -> Any:
    """A Llama-style decoder: 4 layers, 1024 wide, 16 query heads over 4 key/value heads."""
    from transformers import LlamaConfig

    return eager(LlamaConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
        use_cache=use_cache, tie_word_embeddings=False,
    ))


def llama(length: int = 128) -> Callable[[], Export]:
    def build() -> Export:
        import torch
        from transformers import LlamaForCausalLM

        config = llama_config(use_cache=False)

        class Llama(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lm = LlamaForCausalLM(config)

            def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
                return self.lm(input_ids=input_ids, use_cache=False).logits

        return Export(Llama(), (tokens(1, length, 32000),), ["input_ids"], ["logits"])

    return build


def llama_past(past: int = 128, new: int = 1) -> Export:
    """One decoding step of the Llama-style decoder: ``new`` tokens after ``past`` cached
    positions (grouped-query attention: the cache holds 4 key/value heads of 64)."""
    from transformers import LlamaForCausalLM

    config = llama_config(use_cache=True)
    return kv_step(LlamaForCausalLM(config), config.num_hidden_layers,
                   config.num_key_value_heads, config.hidden_size // config.num_attention_heads,
                   past, new)


ENTRIES: list[Entry] = [
    Entry("resnet50", "torchvision", torchvision_model("resnet50")),
    Entry("resnet50_batch", "torchvision", torchvision_model("resnet50"),
          dynamic={"image": {0: "batch"}}, dims={"batch": 4}),
    Entry("resnet50_legacy", "torchvision", torchvision_model("resnet50"), exporter="legacy",
          dynamic={"image": {0: "batch"}}, dims={"batch": 2}),
    Entry("mobilenet_v2", "torchvision", torchvision_model("mobilenet_v2")),
    Entry("mobilenet_v2_legacy", "torchvision", torchvision_model("mobilenet_v2"),
          exporter="legacy"),
    Entry("efficientnet_b0", "torchvision", torchvision_model("efficientnet_b0")),
    Entry("densenet121", "torchvision", torchvision_model("densenet121")),
    Entry("inception_v3", "torchvision",
          torchvision_model("inception_v3", 299, aux_logits=False, init_weights=True)),
    Entry("unet", "onnxmem (Ronneberger et al. 2015)", unet),
    Entry("randwire_ws", "onnxmem (Xie et al. 2019)", randwire),
    Entry("nasnetalarge", "timm", timm_model("nasnetalarge", 331)),
    Entry("nasnetalarge_legacy", "timm", timm_model("nasnetalarge", 331), exporter="legacy"),
    Entry("pnasnet5large_legacy", "timm", timm_model("pnasnet5large", 331), exporter="legacy"),
    Entry("swin_t_legacy", "torchvision", torchvision_model("swin_t"), exporter="legacy"),
    Entry("bert_base", "transformers BertConfig()", bert_base()),
    Entry("bert_base_dynamic", "transformers BertConfig()", bert_base(),
          dynamic={"input_ids": {0: "batch", 1: "sequence"},
                   "attention_mask": {0: "batch", 1: "sequence"}},
          dims={"batch": 2, "sequence": 64}),
    Entry("bert_base_legacy", "transformers BertConfig()", bert_base(), exporter="legacy",
          dynamic={"input_ids": {0: "batch", 1: "sequence"},
                   "attention_mask": {0: "batch", 1: "sequence"}},
          dims={"batch": 1, "sequence": 128}),
    Entry("gpt2", "transformers GPT2Config()", gpt2),
    Entry("gpt2_past", "transformers GPT2Config()", gpt2_past,
          note="one decoding step after 128 cached positions"),
    Entry("gpt2_past_dynamic", "transformers GPT2Config()", gpt2_past,
          dynamic=past_dims(12), dims={"past_sequence": 255},
          note="one decoding step after a symbolic number of cached positions"),
    Entry("vit_base", "transformers ViTConfig()", vit_base()),
    Entry("vit_base_batch", "transformers ViTConfig()", vit_base(),
          dynamic={"pixel_values": {0: "batch"}}, dims={"batch": 2}),
    Entry("t5_small", "transformers T5Config (t5-small)", t5_small),
    Entry("llama_4l", LLAMA, llama()),
    Entry("llama_4l_dynamic", LLAMA, llama(), dynamic={"input_ids": {1: "sequence"}},
          dims={"sequence": 256}),
    Entry("llama_4l_past_dynamic", LLAMA, llama_past, dynamic=past_dims(4),
          dims={"past_sequence": 255},
          note="one decoding step after a symbolic number of cached positions"),
]


# --------------------------------------------------------------------------- files


def save_full(model: onnx.ModelProto, path: Path) -> None:
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=FIXTURE_MIN_BYTES)


def light_entries() -> list[dict[str, Any]]:
    entries = []
    for name in LIGHT_MODELS:
        model = onnx.load(str(light_model_path(name)), load_external_data=False)
        described = describe_model(model)
        entries.append({
            "name": f"onnx_{name}",
            "file": f"onnx:{name}",
            "source": "onnx wheel (backend/test/data/light)",
            "exporter": "onnx",
            "inputs": described["inputs"],
            "symbolic_dims": described["symbolic_dims"],
            "dims": {},
            "nodes": described["nodes"],
            "weights_bytes": described["weights_bytes"],
            "note": "weights made at run time by ConstantOfShape",
        })
    return entries


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "zoo" / "build")
    parser.add_argument("--fixtures", type=Path, default=ROOT / "models" / "zoo")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these models")
    parser.add_argument("--skip", nargs="+", metavar="NAME", default=[], help="leave these out")
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    args = parser.parse_args(argv)

    if args.list:
        for e in ENTRIES:
            print(f"{e.name:22} {e.exporter:7} {e.source}")
        return 0
    chosen = [e for e in ENTRIES if (not args.only or e.name in args.only) and e.name not in args.skip]
    unknown = set(args.only or []) - {e.name for e in ENTRIES}
    if unknown:
        parser.error(f"unknown model(s): {', '.join(sorted(unknown))}; see --list")

    torch = import_torch()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    args.out.mkdir(parents=True, exist_ok=True)
    args.fixtures.mkdir(parents=True, exist_ok=True)
    built: list[dict[str, Any]] = []
    fixtures: list[dict[str, Any]] = []
    failed = []
    for entry in chosen:
        start = time.perf_counter()
        print(f"[{entry.name}] exporting ({entry.exporter}) ...", flush=True)
        try:
            model = export(entry, torch)
        except Exception as exc:  # report and go on with the next model
            print(f"[{entry.name}] FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed.append(entry.name)
            continue
        seconds = time.perf_counter() - start
        full = args.out / f"{entry.name}.onnx"
        stripped, removed = strip_weights(model, entry.name)
        onnx.save_model(stripped, str(args.fixtures / f"{entry.name}.onnx"))
        built.append(catalog_entry(entry, model, full.name))
        fixtures.append(catalog_entry(entry, model, f"{entry.name}.onnx"))
        save_full(model, full)
        size = (args.fixtures / f"{entry.name}.onnx").stat().st_size
        print(f"[{entry.name}] {len(model.graph.node)} nodes, weights {removed / 2**20:.1f} MiB, "
              f"fixture {size / 1024:.0f} KiB, {seconds:.1f} s", flush=True)
        del model, stripped
        gc.collect()
    light = light_entries()
    order = [e.name for e in ENTRIES] + [f"onnx_{n}" for n in LIGHT_MODELS]
    write_catalog(args.out / "catalog.json", built + light, order, {"seed": SEED})
    write_catalog(args.fixtures / "catalog.json", fixtures + light, order, {"seed": SEED})
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
