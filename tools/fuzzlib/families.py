"""The mutated-model families: bytes, struct, dims, payload, extdata, nesting, huge, names
and outputs."""
from __future__ import annotations

import json
import os
import random
import stat
from pathlib import Path
from typing import Any

from .common import CANARY, Base, Case
from .corpus import (
    ABSURD_DIMS,
    BOMBS,
    HOSTILE_DIMS,
    HOSTILE_NAMES,
    PAYLOADS,
    Corpus,
    build_huge,
    build_nested,
)

# ------------------------------------------------------------------ case building


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _model_args(command: str, model: str, base_args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """argv, outputs and plan outputs of a model command."""
    if command == "plan":
        return (["plan", model, "-o", "out/plan.json", "--annotate", "out/annotated.onnx", *base_args],
                ["out/plan.json", "out/annotated.onnx"], ["out/plan.json"])
    if command == "measure":
        return (["plan", model, "--measure-shapes", "-o", "out/plan.json", *base_args],
                ["out/plan.json"], ["out/plan.json"])
    if command == "verify":
        return ["verify", model, *base_args], [], []
    return ["compare", model, *base_args], [], []


def _model_case(family: str, seed: int, command: str, folder: Path, base: Base,
                files: dict[str, bytes], note: str, extra_args: list[str] | None = None) -> Case:
    _write(folder / "model", files)
    args = base.args if extra_args is None else extra_args
    argv, outs, plans = _model_args(command, f"model/{base.main}", args)
    return Case(family, seed, command, argv, outs, plans, note=note,
                ok_codes=(3,) if command in ("verify", "compare") else ())


def _bytes_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = rng.choice(corpus.small() if command in ("verify", "compare", "measure") else corpus.bases)
    how = rng.choice(("flip", "flip", "truncate", "zero", "insert", "splice"))
    data, note = damage(bytearray(base.files[base.main]), how, rng)
    files = dict(base.files)
    files[base.main] = bytes(data)
    return _model_case("bytes", seed, command, folder, base, files, f"{base.name}: {note}")


def damage(data: bytearray, how: str, rng: random.Random) -> tuple[bytearray, str]:
    """``data`` damaged ``how`` (``flip``, ``truncate``, ``zero``, ``insert`` or ``splice``), and
    what was done."""
    if how == "flip":
        n = rng.randint(1, 16)
        for _ in range(n):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        note = f"{n} bit flips"
    elif how == "truncate":
        cut = rng.randrange(len(data))
        data = data[:cut]
        note = f"truncated to {cut} bytes"
    elif how == "zero":
        i = rng.randrange(len(data))
        n = rng.randint(1, 64)
        data[i:i + n] = b"\0" * len(data[i:i + n])
        note = f"{n} bytes zeroed at {i}"
    elif how == "insert":
        i = rng.randrange(len(data))
        blob = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
        data[i:i] = blob
        note = f"{len(blob)} random bytes inserted at {i}"
    else:
        i, j = sorted(rng.randrange(len(data)) for _ in range(2))
        k = rng.randrange(len(data))
        data[k:k] = data[i:j][:4096]
        note = f"bytes {i}:{j} copied to {k}"
    return data, note


def _struct_mutate(model: Any, rng: random.Random) -> str:
    from onnx import AttributeProto, TensorProto, helper

    g = model.graph
    nodes = list(g.node)
    what = rng.choice(("drop_node", "dup_node", "rename_input", "rename_output", "dup_output",
                       "reverse", "attr_type", "drop_init", "elem_type", "drop_output",
                       "output_is_input", "bad_op", "opset", "self_loop", "cycle", "drop_input",
                       "attr_garbage", "no_graph_output", "empty_names"))
    if not nodes and what in ("drop_node", "dup_node", "rename_input", "rename_output", "dup_output",
                              "attr_type", "self_loop", "cycle", "attr_garbage", "bad_op"):
        what = "reverse"
    if what == "drop_node":
        n = rng.randrange(len(nodes))
        del g.node[n]
        return f"node {n} dropped"
    if what == "dup_node":
        n = rng.choice(nodes)
        g.node.append(n)
        return f"node {n.name!r} duplicated"
    if what == "rename_input":
        n = rng.choice(nodes)
        if n.input:
            i = rng.randrange(len(n.input))
            n.input[i] = rng.choice(("ghost", "", g.output[0].name if g.output else "ghost"))
            return f"input {i} of {n.name!r} renamed to {n.input[i]!r}"
        return "no input to rename"
    if what == "rename_output":
        n = rng.choice(nodes)
        if n.output:
            n.output[0] = n.output[0] + "_renamed"
            return f"output of {n.name!r} renamed"
        return "no output"
    if what == "dup_output":
        a, b = rng.choice(nodes), rng.choice(nodes)
        if a.output and b.output:
            b.output[0] = a.output[0]
            return f"{b.name!r} also produces {a.output[0]!r}"
        return "no output"
    if what == "reverse":
        rev = list(reversed(nodes))
        del g.node[:]
        g.node.extend(rev)
        return "nodes in reverse order"
    if what in ("attr_type", "attr_garbage"):
        with_attrs = [n for n in nodes if n.attribute]
        if not with_attrs:
            n = rng.choice(nodes)
            n.attribute.append(helper.make_attribute("bogus", "x" * rng.choice((1, 70000))))
            return f"string attribute added to {n.name!r}"
        n = rng.choice(with_attrs)
        a = rng.choice(n.attribute)
        if what == "attr_type":
            name = a.name
            n.attribute.remove(a)
            value = rng.choice(("text", 1.5, 7, [1, 2, 3], [0.5], b"\xff\xfe", -(2**62), 2**62))
            n.attribute.append(helper.make_attribute(name, value))
            return f"attribute {name!r} of {n.name!r} now {value!r}"
        a.type = rng.choice((0, AttributeProto.GRAPH, AttributeProto.TENSOR, AttributeProto.STRINGS,
                             AttributeProto.SPARSE_TENSOR, AttributeProto.TYPE_PROTO))
        return f"attribute {a.name!r} of {n.name!r} has type {a.type}"
    if what == "drop_init":
        if g.initializer:
            del g.initializer[rng.randrange(len(g.initializer))]
            return "an initializer dropped"
        return "no initializer"
    if what == "elem_type":
        infos = [*g.input, *g.output, *g.value_info]
        if not infos:  # an earlier mutation dropped the only output of a graph without inputs
            return "no value info"
        vi = rng.choice(infos)
        vi.type.tensor_type.elem_type = rng.choice((0, 99, TensorProto.STRING, TensorProto.BOOL,
                                                    TensorProto.FLOAT8E4M3FN, TensorProto.INT4,
                                                    TensorProto.COMPLEX128, -5))
        return f"{vi.name!r} elem_type {vi.type.tensor_type.elem_type}"
    if what == "drop_output":
        if g.output:
            del g.output[0]
        return "first graph output dropped"
    if what == "output_is_input":
        if g.output and g.input:
            g.output[0].name = g.input[0].name
        return "graph output named like the input"
    if what == "bad_op":
        n = rng.choice(nodes)
        n.op_type = rng.choice(("", "NoSuchOp", "If", "Loop", "Scan", "Constant"))
        n.domain = rng.choice(("", "com.evil", "ai.onnx.ml", "com.microsoft"))
        return f"{n.name!r} is now {n.domain}:{n.op_type}"
    if what == "opset":
        model.opset_import[0].version = rng.choice((0, 1, 999, -3, 2**40))
        return f"opset {model.opset_import[0].version}"
    if what == "self_loop":
        n = rng.choice(nodes)
        if n.input and n.output:
            n.input[0] = n.output[0]
        return f"{n.name!r} reads its own output"
    if what == "cycle":
        if len(nodes) >= 2 and nodes[0].input and nodes[-1].output:
            nodes[0].input[0] = nodes[-1].output[0]
            return "first node reads the last node's output"
        return "too small for a cycle"
    if what == "drop_input":
        if g.input:
            del g.input[0]
        return "first graph input dropped"
    if what == "no_graph_output":
        del g.output[:]
        return "no graph outputs"
    for n in nodes:
        n.name = ""
    return "every node name empty"


def _struct_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = rng.choice(corpus.small())
    model = base.model()
    notes = [_struct_mutate(model, rng) for _ in range(rng.randint(1, 3))]
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("struct", seed, command, folder, base, files, f"{base.name}: {'; '.join(notes)}")


def _set_dim(vi: Any, rng: random.Random, value: int | str) -> None:
    shape = vi.type.tensor_type.shape
    if not len(shape.dim):
        shape.dim.add()
    d = shape.dim[rng.randrange(len(shape.dim))]
    if isinstance(value, str):
        d.dim_param = value
    else:
        d.dim_value = value


def _dims_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = rng.choice([b for b in corpus.small() if b.name in ("mlp", "views", "conv", "dynamic",
                                                                "external", "nested3")])
    model = base.model()
    g = model.graph
    where = rng.choice(("input", "input", "output", "value_info"))
    pool = {"input": list(g.input), "output": list(g.output), "value_info": list(g.value_info)}[where]
    if not pool:
        pool, where = list(g.input), "input"
    vi = rng.choice(pool)
    value: int | str
    if rng.random() < 0.45:
        value = rng.choice(ABSURD_DIMS)
    else:
        value = rng.choice((*HOSTILE_DIMS, *BOMBS))
    _set_dim(vi, rng, value)
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("dims", seed, command, folder, base, files,
                       f"{base.name}: {where} {vi.name!r} dim {str(value)[:60]!r}")


def _payload_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    """The code-execution payloads in every place a string of the model lives."""
    from onnx import helper

    payload = PAYLOADS[seed % len(PAYLOADS)]
    base = corpus.by_name(rng.choice(("mlp", "dynamic", "views")))
    model = base.model()
    g = model.graph
    where = rng.choice(("input dim", "output dim", "value_info dim", "input name", "node name",
                        "metadata", "attribute", "doc_string", "initializer name", "all dims", "ort_config"))
    if where == "input dim":
        _set_dim(g.input[0], rng, payload)
    elif where == "output dim":
        _set_dim(g.output[0], rng, payload)
    elif where == "value_info dim":
        if not g.value_info:
            g.value_info.append(helper.make_tensor_value_info(g.node[0].output[0], 1, [2, 32]))
        _set_dim(g.value_info[0], rng, payload)
    elif where == "input name":
        _rename_value(g, g.input[0].name, payload)
    elif where == "node name":
        g.node[0].name = payload
    elif where == "metadata":
        helper.set_model_props(model, {payload: payload})
    elif where == "ort_config":  # session options onnxruntime takes from the model (the worker sets the variable)
        helper.set_model_props(model, {"ort_config": json.dumps({"session_options": {
            "enable_profiling": 1, "graph_optimization_level": 0, "inter_op_num_threads": 64, "execution_mode": 1},
            "payload": payload})})
    elif where == "attribute":
        g.node[-1].attribute.append(helper.make_attribute("note", payload))
    elif where == "doc_string":
        model.doc_string = payload
        g.doc_string = payload
        g.node[0].doc_string = payload
    elif where == "initializer name":
        if g.initializer:
            _rename_value(g, g.initializer[0].name, payload)
    else:
        for vi in [*g.input, *g.output, *g.value_info]:
            for d in vi.type.tensor_type.shape.dim:
                d.dim_param = payload
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("payload", seed, command, folder, base, files,
                       f"{base.name}: payload {seed % len(PAYLOADS)} in {where}", extra_args=[])


def _rename_value(g: Any, old: str, new: str) -> None:
    for n in g.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for i, x in enumerate(n.output):
            if x == old:
                n.output[i] = new
    for coll in (g.input, g.output, g.value_info, g.initializer):
        for v in coll:
            if v.name == old:
                v.name = new


def _extdata_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    """Hostile external-data references: the checks must hold on every path that reads weights."""
    base = corpus.by_name("external")
    model = base.model()
    init = next(i for i in model.graph.initializer if i.external_data)
    info = {e.key: e.value for e in init.external_data}
    mdir = folder / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    what = rng.choice(("missing", "past_end", "huge_length", "nan_length", "text_offset",
                       "negative_offset", "float_offset", "nul_location", "symlink_out",
                       "symlink_loop", "absolute", "dotdot", "fifo", "dev_zero", "directory",
                       "long_location", "empty_location", "dup_keys", "proc", "newline_location",
                       "symlink_chain_out", "hardlink_like", "unknown_key"))
    canary_rel = "../outside/canary.bin"
    canary_abs = str(folder / CANARY)
    if what == "missing":
        info["location"] = "nope.bin"
    elif what == "past_end":
        info["offset"] = str(len(base.files["weights.bin"]) - 8)
    elif what == "huge_length":
        info["length"] = str(rng.choice((2**62, 2**64 + 1, 10**30)))
    elif what == "nan_length":
        info["length"] = rng.choice(("nan", "inf", "-inf", "1e400"))
    elif what == "text_offset":
        info["offset"] = rng.choice(("abc", "", "0x40", " 64", "6\x004", "٦٤"))
    elif what == "negative_offset":
        info["offset"] = str(rng.choice((-64, -(2**63))))
    elif what == "float_offset":
        info["offset"] = "64.0"
    elif what == "nul_location":
        info["location"] = "weights\x00.bin"
    elif what == "symlink_out":
        os.symlink(canary_rel, mdir / "link.bin")
        info["location"] = "link.bin"
    elif what == "symlink_chain_out":
        os.symlink("../outside", mdir / "sub")
        info["location"] = "sub/canary.bin"
    elif what == "symlink_loop":
        os.symlink("loop_b.bin", mdir / "loop_a.bin")
        os.symlink("loop_a.bin", mdir / "loop_b.bin")
        info["location"] = "loop_a.bin"
    elif what == "absolute":
        info["location"] = canary_abs
    elif what == "dotdot":
        info["location"] = canary_rel
    elif what == "fifo":
        os.mkfifo(mdir / "pipe.bin")
        info["location"] = "pipe.bin"
    elif what == "dev_zero":
        info["location"] = "/dev/zero"
    elif what == "directory":
        (mdir / "folder.bin").mkdir()
        info["location"] = "folder.bin"
    elif what == "long_location":
        info["location"] = "x" * 5000 + ".bin"
    elif what == "empty_location":
        info["location"] = rng.choice(("", ".", "./"))
    elif what == "proc":
        info["location"] = "/proc/self/environ"
    elif what == "newline_location":
        info["location"] = "weights\n.bin"
    elif what == "hardlink_like":
        info["location"] = "./sub/../weights.bin"
    del init.external_data[:]
    for k, v in info.items():
        e = init.external_data.add()
        e.key, e.value = k, v
    if what == "dup_keys":
        e = init.external_data.add()
        e.key, e.value = "location", canary_rel
    if what == "unknown_key":
        e = init.external_data.add()
        e.key, e.value = "evil\x1b[31m", "\n" * 3
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("extdata", seed, command, folder, base, files, f"external data: {what}")


def _nesting_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str,
                  max_depth: int) -> Case:
    depth = rng.randint(1, max_depth)
    kinds = [rng.choice(("if", "loop")) for _ in range(depth)]
    model = build_nested(depth, kinds)
    base = Base("nested", "model.onnx", {"model.onnx": model.SerializeToString()})
    return _model_case("nesting", seed, command, folder, base, dict(base.files),
                       f"depth {depth}: {''.join(k[0] for k in kinds)}")


def _huge_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str,
               max_nodes: int) -> Case:
    n = rng.randint(max(1, max_nodes // 4), max_nodes)
    shape = rng.choice(("chain", "dag", "fan"))
    model = build_huge(n, shape, rng)
    base = Base("huge", "model.onnx", {"model.onnx": model.SerializeToString()})
    return _model_case("huge", seed, command, folder, base, dict(base.files), f"{shape} of {n} nodes")


def _names_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    from onnx import helper

    base = corpus.by_name(rng.choice(("mlp", "views", "conv", "external")))
    model = base.model()
    g = model.graph
    name = rng.choice(HOSTILE_NAMES)
    where = rng.choice(("input", "output", "intermediate", "initializer", "node", "metadata",
                        "attribute", "graph", "value_info"))
    if where == "input":
        _rename_value(g, g.input[0].name, name)
    elif where == "output":
        _rename_value(g, g.output[0].name, name)
    elif where == "intermediate":
        _rename_value(g, g.node[0].output[0], name)
    elif where == "initializer":
        if g.initializer:
            _rename_value(g, g.initializer[0].name, name)
    elif where == "node":
        for n in g.node:
            n.name = name if rng.random() < 0.5 else n.name + name
    elif where == "metadata":
        helper.set_model_props(model, {name: name, "k": name})
    elif where == "attribute":
        g.node[0].attribute.append(helper.make_attribute(name[:200] or "x", name))
    elif where == "graph":
        g.name = name
        model.producer_name = name
        model.domain = name
    else:
        g.value_info.append(helper.make_tensor_value_info(name, 1, [2, 2]))
    files = dict(base.files)
    files[base.main] = model.SerializeToString()
    return _model_case("names", seed, command, folder, base, files,
                       f"{base.name}: {where} named {name[:40]!r}")


def _outputs_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    """Output paths that must be refused: the input, another output, special files, symlinks."""
    base = corpus.by_name(rng.choice(("mlp", "conv")))
    mdir, odir = folder / "model", folder / "out"
    mdir.mkdir(parents=True, exist_ok=True)
    odir.mkdir(parents=True, exist_ok=True)
    _write(mdir, base.files)
    model = f"model/{base.main}"
    what = rng.choice(("output_is_model", "annotate_is_model", "output_is_annotate", "fifo",
                       "chardev", "symlink_out", "missing_folder", "folder", "plot_over_plan",
                       "generate_fifo"))
    argv: list[str]
    outs: list[str] = []
    if what == "output_is_model":
        argv = ["plan", model, "-o", model]
    elif what == "annotate_is_model":
        argv = ["plan", model, "--annotate", model]
    elif what == "output_is_annotate":
        argv = ["plan", model, "-o", "out/x", "--annotate", "out/x"]
        outs = ["out/x"]
    elif what == "fifo":
        os.mkfifo(odir / "plan.json")
        argv = ["plan", model, "-o", "out/plan.json"]
    elif what == "chardev":
        try:
            os.mknod(odir / "plan.json", 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
        except OSError:
            os.mkfifo(odir / "plan.json")
        argv = ["plan", model, "-o", "out/plan.json"]
    elif what == "symlink_out":
        os.symlink("../outside/canary.bin", odir / "plan.json")
        argv = ["plan", model, "-o", "out/plan.json"]
    elif what == "missing_folder":
        argv = ["plan", model, "-o", "out/none/plan.json"]
    elif what == "folder":
        (odir / "dir.json").mkdir()
        argv = ["plan", model, "-o", "out/dir.json"]
    elif what == "plot_over_plan":
        (mdir / "plan.json").write_text(corpus.by_name(base.name).plan_json or "{}")
        argv = ["plot", "model/plan.json", "-o", "model/plan.json"]
    else:
        os.mkfifo(odir / "net.onnx")
        argv = ["generate", "randwire", "out/net.onnx", "--size", "4"]
    return Case("outputs", seed, argv[0], argv, outs, [], note=f"{base.name}: {what}", must_fail=True)
