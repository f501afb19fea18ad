"""The ``ranges`` family: ranged dims into ``plan --dim NAME=LO:HI`` (a range plan) and ``fit``.

The models are small ones with named dims (a batch, a sequence, an image's height and width)
and a one-layer decoder with its KV cache, as built or mutated (a node's structure, a dim made
hostile, absurd or an expression of another, a dim declared on a tensor whose size cannot
follow it); the flags are ranges and memory sizes, sensible and hostile. A range plan written
is checked against its schema; an answer of ``fit --json`` is checked on its own figures
(``checks._check_fit``): the value found lies in the range, its total is within the memory and
the next value's is over it. The valid fixed-cost cache ``fit`` reads is this machine's, measured
once per run (:func:`cost_cache`): of a case's files it alone may differ between two runs.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

from .common import Base, Case
from .corpus import ABSURD_DIMS, BOMBS, HOSTILE_DIMS, Corpus, build_conv, build_mlp, build_views
from .families import _set_dim, _struct_mutate, _write

#: the commands of this family; the seed picks one
COMMANDS = ("range", "fit")
#: ranges given to ``--dim``: sensible ones, and empty, inverted, stepped, huge and not numbers
RANGES = ("1:8", "1:64", "1:4096", "2:64:2", "1:1", "16:512", "1:100000", "3:7")
HOSTILE_RANGES = ("8:1", "0:16", "-4:4", "1:64:0", "1:64:-1", "1:8:3", "1:1099511627776",
                  "1:9223372036854775807", "a:b", "1:", ":8", "1.5:8", "1:8:2:2", "0:0", "1:2**40", "1e3:1e4")
#: sizes given to ``fit --memory``: sensible ones, and none, negative, absurd and not sizes
MEMORIES = ("10MiB", "16MiB", "64MiB", "1GiB", "8GiB", "9500KiB", "12 MiB", "1.5GiB", "1 TB")
HOSTILE_MEMORIES = ("0", "-1", "1", "1e999", "NaN", "99999999999999999999999PiB", "0x10", "", "2**30", "inf")
#: what is done to the model first
KINDS = ("valid", "valid", "struct", "dim", "expr", "contradiction", "second_dim")
#: dim expressions of the ranged dim (sizes polynomial, or not, in it)
EXPRESSIONS = ("2*batch", "batch+1", "batch-1", "batch*batch", "batch//2", "batch**3", "batch*seq",
               "2**batch", "batch/0", "-batch", "batch*10**12")


#: fixed-cost caches fit must refuse as they are (none is a cache fit wrote, so none is rewritten:
#: a change to the file is a stray write)
HOSTILE_CACHES = (b"not json", b"[1, 2]", b'"cost"', b"[" * 100_000 + b"]" * 100_000, b"{\"a\": 1}",
                  b"\x00\xff" * 64, b'{"cpu": {"session": 1}, "x": []}', b"NaN")


@functools.cache
def cost_cache() -> bytes:
    """A fixed-cost cache of this machine's CPU provider, measured once (in this process's fresh
    onnxruntime child) and written as ``fit --cache`` writes it: the fuzz workers run the
    command in a process that may not start the fresh child a measurement needs."""
    import tempfile

    from onnxmem.runtime.footprint import cache_text, fixed_cost

    with tempfile.TemporaryDirectory() as tmp:
        return cache_text(Path(tmp) / "cost.json", fixed_cost("cpu")).encode()


def _dynamic(model: Any, dims: dict[str, list[int]]) -> Any:
    """``model`` with the named dims written over the given axes of its graph input and output,
    and its value_info dropped (its fixed shapes would contradict the names)."""
    g = model.graph
    for vi in (g.input[0], g.output[0]):
        shape = vi.type.tensor_type.shape
        for name, axes in dims.items():
            for ax in axes:
                if ax < len(shape.dim):
                    shape.dim[ax].dim_param = name
    del g.value_info[:]
    return model


def _bases(corpus: Corpus) -> list[tuple[Base, list[str]]]:
    """Each base model with its named dims (the first is the one ranged)."""
    out: list[tuple[Base, list[str]]] = [(corpus.by_name("dynamic"), ["batch"])]
    out += [(Base(f"{name}_dynamic", "model.onnx", {"model.onnx": data}), list(dims)) for name, data, dims in _made()]
    shipped = [b for b in corpus.bases if b.name == "transformer_block"]
    out += [(b, ["batch", "seq"]) for b in shipped]
    out.append((Base("decoder", "model.onnx", {"model.onnx": _decoder()}), ["past_seq", "batch", "seq"]))
    return out


@functools.cache
def _made() -> tuple[tuple[str, bytes, tuple[str, ...]], ...]:
    """The corpus's MLP, CNN (two ways) and graph of views with named dims, serialized once."""
    made = (("mlp", build_mlp(), {"batch": [0]}),
            ("conv", build_conv(), {"batch": [0], "H": [2], "W": [3]}),
            ("conv_hw", build_conv(), {"H": [2], "W": [3]}),
            ("views", build_views(), {"batch": [0]}))
    return tuple((name, bytes(_dynamic(model, dims).SerializeToString()), tuple(dims)) for name, model, dims in made)


@functools.cache
def _decoder() -> bytes:
    """A one-layer Llama-style decoder with a KV cache (``tools/build_decoder.py``: contrib ops,
    4-bit weights), whose ``past_seq`` fit ranges as a KV cache."""
    from build_decoder import DecoderConfig, build_decoder  # tools/, on the path as fuzzlib is

    cfg = DecoderConfig(layers=1, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256, max_seq=64)
    return bytes(build_decoder(cfg).SerializeToString())


def _mutate(model: Any, dims: list[str], kind: str, rng: random.Random) -> str:
    """Apply ``kind`` to ``model``; returns what was done."""
    from onnx import TensorProto, helper

    g = model.graph
    if kind == "struct":
        return _struct_mutate(model, rng)
    if kind == "dim":
        vi = rng.choice([*g.input, *g.output])
        value: int | str = rng.choice(ABSURD_DIMS) if rng.random() < 0.4 else rng.choice((*HOSTILE_DIMS, *BOMBS))
        _set_dim(vi, rng, value)
        return f"{vi.name!r} dim {str(value)[:60]!r}"
    if kind == "expr":
        expr = rng.choice(EXPRESSIONS).replace("batch", dims[0])
        shape = g.input[0].type.tensor_type.shape
        axis = next((i for i, d in enumerate(shape.dim) if d.dim_param == dims[0]), 0)
        shape.dim[axis].dim_param = expr
        return f"input dim {axis} is {expr!r}"
    if kind == "contradiction":  # a tensor inside declared to follow the dim, whose size is fixed
        node = rng.choice(list(g.node)) if len(g.node) else None
        if node is None or not node.output:
            return "no node"
        g.value_info.append(helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT,
                                                          [dims[0], rng.choice((3, 7, 16))]))
        return f"{node.output[0]!r} declared [{dims[0]}, n]"
    if kind == "second_dim":  # a second named dim, on another input, that no flag gives
        g.input.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["ghost", dims[0]]))
        return "an input 'extra' of dims [ghost, ranged]"
    return "as built"


def _dim_flags(dims: list[str], rng: random.Random) -> tuple[list[str], str]:
    """``--dim`` flags: the first dim ranged, the others bound, ranged or left out."""
    first = rng.choice(RANGES if rng.random() < 0.8 else HOSTILE_RANGES)
    flags = ["--dim", f"{dims[0]}={first}"]
    for d in dims[1:]:
        r = rng.random()
        if r < 0.75:
            flags += ["--dim", f"{d}={rng.choice(('1', '2', '4', '8', '1', '2', '4', '8', '0', '-2', 'x'))}"]
        elif r < 0.95:
            flags += ["--dim", f"{d}={rng.choice(RANGES if rng.random() < 0.8 else HOSTILE_RANGES)}"]
    if rng.random() < 0.1:
        flags += ["--dim", rng.choice(("ghost=1:8", f"{dims[0]}=4", f"{dims[0]}=1:2", "=1:8", "batch"))]
    return flags, " ".join(flags[1::2])


def ranges_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, _command: str) -> Case:
    command = COMMANDS[seed % len(COMMANDS)]
    base, dims = rng.choice(_bases(corpus))
    kind = rng.choice(KINDS)
    model = base.model()
    did = _mutate(model, dims, kind, rng)
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    _write(folder / "model", files)
    flags, shown = _dim_flags(dims, rng)
    path = f"model/{base.main}"
    note = f"{base.name}: {kind}: {did}; {shown}"
    if command == "range":
        argv = ["plan", path, *flags, "-o", "out/plan.json"]
        if rng.random() < 0.3:
            argv += ["--solver", rng.choice(("greedy", "exact", "auto"))]
        return Case("ranges", seed, "plan (range)", argv, ["out/plan.json"], ["out/plan.json"], note=note)
    memory = rng.choice(MEMORIES if rng.random() < 0.8 else HOSTILE_MEMORIES)
    runtime = rng.choice(("plan", "plan", "rule", "measure"))
    if rng.random() < 0.1:
        cache = rng.choice(HOSTILE_CACHES)
        note += f"; a hostile cache {cache[:24]!r}"
    else:
        cache = cost_cache()
    (folder / "out" / "cost.json").write_bytes(cache)  # fit rewrites it as it was, or refuses it
    argv = ["fit", path, "--memory", memory, *flags, "--runtime", runtime, "--json", "--cache", "out/cost.json"]
    outputs = []
    if rng.random() < 0.2:
        argv += ["--plot", "out/fit.png"]
        outputs.append("out/fit.png")
    if rng.random() < 0.2:
        argv += ["--optimize", rng.choice(("none", "basic"))]
    return Case("ranges", seed, f"fit --runtime {runtime}", argv, outputs, [], ok_codes=(2,),
                note=f"{note}; --memory {memory!r}", fit_json=True)
