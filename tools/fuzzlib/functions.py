"""The ``functions`` family: model-local functions (``model.functions``) that must be refused
or planned within bounds: external data on a Constant inside a body, recursion, bombs,
shadowing and hostile names; run through plan, plan --measure-shapes, verify and compare."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from .common import CANARY, Base, Case
from .corpus import HOSTILE_NAMES, PAYLOADS, Corpus, _finish
from .families import _model_case

LOCAL = "local.fuzz"
VEC = [1, 8]
#: where the Constant's external data points (relative to the model's folder unless absolute)
EXT_TARGETS = ("outside", "dotdot", "absolute", "dev_zero", "fifo", "symlink_out")
KINDS = (*(f"ext_{t}" for t in EXT_TARGETS), "self_recursion", "mutual_recursion", "chain_bomb",
         "doubling_bomb", "same_name", "shadows_standard_op", "domain_not_imported", "hostile_name",
         "payload_name", "hostile_io_names")


def _fn(name: str, nodes: list[Any], inputs: list[str] | None = None, outputs: list[str] | None = None,
        domain: str = LOCAL) -> Any:
    from onnx import helper

    return helper.make_function(domain, name, inputs or ["x"], outputs or ["y"], nodes,
                                [helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)])


def _call(op: str, x: str, y: str, name: str, domain: str = LOCAL) -> Any:
    from onnx import helper

    return helper.make_node(op, [x], [y], name=name, domain=domain)


def _model(functions: list[Any], op: str = "F", domain: str = LOCAL, imported: bool = True) -> Any:
    """``x -> op(x) -> Sigmoid -> y`` with ``functions`` in the model."""
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [_call(op, "x", "h", "call", domain), helper.make_node("Sigmoid", ["h"], ["y"], name="sigmoid")],
        "functions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, VEC)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, VEC)])
    model = _finish(g, "functions")
    if imported:
        model.opset_import.append(helper.make_opsetid(domain or LOCAL, 1))
    model.functions.extend(functions)
    return model


def _external_constant(target: str, folder: Path) -> Any:
    """A function whose body adds a Constant stored in external data at ``target``."""
    from onnx import TensorProto, helper

    mdir = folder / "model"
    # absolute, yet the same in every case folder: the run's working folder is the case folder
    canary_rel, canary_abs = "../outside/canary.bin", f"/proc/self/cwd/{CANARY}"
    location = {"outside": canary_rel, "dotdot": "sub/../../outside/canary.bin", "absolute": canary_abs,
                "dev_zero": "/dev/zero", "fifo": "pipe.bin", "symlink_out": "link.bin"}[target]
    if target == "fifo":
        os.mkfifo(mdir / "pipe.bin")
    elif target == "symlink_out":
        os.symlink(canary_rel, mdir / "link.bin")
    tensor = helper.make_tensor("c", TensorProto.FLOAT, VEC, [0.0] * 8)
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "32")):
        e = tensor.external_data.add()
        e.key, e.value = k, v
    const = helper.make_node("Constant", [], ["c"], name="const", value=tensor)
    return _model([_fn("F", [const, helper.make_node("Add", ["x", "c"], ["y"], name="add")])])


def _chain(levels: int, twice: bool) -> Any:
    """``f{k}`` calls ``f{k-1}`` (twice in a row when ``twice``); ``f0`` is a Relu."""
    from onnx import helper

    fns = [_fn("f0", [helper.make_node("Relu", ["x"], ["y"], name="relu")])]
    for k in range(1, levels + 1):
        if twice:
            body = [_call(f"f{k - 1}", "x", "t", "first"), _call(f"f{k - 1}", "t", "y", "second")]
        else:
            body = [_call(f"f{k - 1}", "x", "y", "inner")]
        fns.append(_fn(f"f{k}", body))
    return _model(fns, op=f"f{levels}")


def _build(kind: str, folder: Path, rng: random.Random) -> tuple[Any, str]:
    from onnx import helper

    relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
    if kind.startswith("ext_"):
        return _external_constant(kind[4:], folder), kind
    if kind == "self_recursion":
        return _model([_fn("F", [_call("F", "x", "y", "again")])]), kind
    if kind == "mutual_recursion":
        return _model([_fn("F", [_call("G", "x", "y", "to_g")]), _fn("G", [_call("F", "x", "y", "to_f")])]), kind
    if kind == "chain_bomb":
        return _chain(5000, twice=False), "5,000 nested functions"
    if kind == "doubling_bomb":
        return _chain(30, twice=True), "30 levels, each calling the one below twice"
    if kind == "same_name":
        neg = helper.make_node("Neg", ["x"], ["y"], name="neg")
        return _model([_fn("F", [relu]), _fn("F", [neg])]), kind
    if kind == "shadows_standard_op":
        neg = helper.make_node("Neg", ["x"], ["y"], name="neg")
        return _model([_fn("Relu", [neg], domain="")], op="Relu", domain=""), kind
    if kind == "domain_not_imported":
        return _model([_fn("F", [relu], domain="com.missing")], domain="com.missing", imported=False), kind
    if kind == "hostile_io_names":
        name = rng.choice(HOSTILE_NAMES)
        body = [helper.make_node("Relu", [name], ["y"], name=name)]
        return _model([_fn("F", body, inputs=[name])]), f"function input named {name[:40]!r}"
    name = rng.choice(HOSTILE_NAMES) if kind == "hostile_name" else rng.choice(PAYLOADS)
    where = rng.choice(("name", "domain"))
    if where == "name":
        return _model([_fn(name, [relu])], op=name), f"function named {name[:40]!r}"
    return _model([_fn("F", [relu], domain=name)], domain=name), f"function domain {name[:40]!r}"


def functions_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    kind = KINDS[seed % len(KINDS)] if rng.random() < 0.5 else rng.choice(KINDS)
    (folder / "model").mkdir(parents=True, exist_ok=True)
    model, note = _build(kind, folder, rng)
    base = Base("functions", "model.onnx", {"model.onnx": model.SerializeToString()})
    return _model_case("functions", seed, command, folder, base, dict(base.files), note)
