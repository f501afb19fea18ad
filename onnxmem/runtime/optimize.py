"""The graph onnxruntime builds from a model: optimized at a level for a provider, written to a
temporary folder, read back with the checked loader.

A user deploys the graph onnxruntime builds at session start (at its default level,
ORT_ENABLE_ALL: fused kernels, QLinear kernels from QDQ pairs, the NCHWc layout on CPU), not the
graph as written. :func:`optimized_model` gives that graph to plan, prove and verify:

1. level ``none``: the model as written, at its own path (nothing runs);
2. otherwise the model's external data is checked (each file inside the model's folder and
   present: onnxruntime reads it), then one onnxruntime session, in the command's onnxruntime
   child process (:mod:`onnxmem.runtime.isolation`, with its time and memory limits), optimizes
   the model at the level for the provider (``graph_optimization_level``) and writes the result
   (``optimized_model_filepath``) into a ``tempfile.TemporaryDirectory``, initializers of
   :data:`EXTERNAL_MIN_BYTES` or more in one external data file beside it, so models over
   2 GiB are written too;
3. the file is read back by :func:`onnxmem.model.load_model` (the limits and checks of any
   model file), its nodes are put in a canonical order and the names onnxruntime generated
   numbered in that order (:func:`canonical_names`: onnxruntime writes the same nodes for the
   same model, level, provider, version and CPU, but may write independent branches in
   another order, and numbers its generated names differently, from run to run), and the
   result is digested (:func:`graph_digest`, with its data file);
4. at ``all`` on CPU, where the graph has ops of the NCHWc layout, the NCHWc block size of
   this machine's MLAS kernels (8 with AVX2, 16 with AVX-512) is read from the graph
   onnxruntime builds of a one-Conv probe model: the filter of a 4-channel Conv is padded to
   one block (the probe's graph is written in the same temporary folder, and removed). A
   graph without those ops does not depend on the block size, and records none.

The folder and everything in it is removed when the ``with`` block ends. The graph's
com.microsoft and com.microsoft.nchwc ops are planned with the shape rules of
:mod:`onnxmem.shapes`. :func:`check_recorded` and :func:`check_rebuilt` hold a plan's record
(:mod:`onnxmem.plans.optimization`) to this machine, its onnxruntime and the graph it builds.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx

import onnxmem.runtime.standins as standins
from onnxmem.core.choices import DEVICES, OPTIMIZE_LEVELS
from onnxmem.core.errors import OnnxmemError, PlanError, RuntimeBackendError, flag_value, show_name
from onnxmem.core.toposort import stable_order
from onnxmem.model import (
    caller_state,
    captured_names,
    check_external_data,
    iter_graphs,
    load_model,
    subgraph_attributes,
)
from onnxmem.plans.optimization import AS_WRITTEN, Optimization

__all__ = [
    "EXTERNAL_MIN_BYTES",
    "ORT_LEVELS",
    "Optimized",
    "check_recorded",
    "check_rebuilt",
    "graph_digest",
    "onnxruntime_version",
    "optimized_model",
]

#: onnxruntime's GraphOptimizationLevel of each level but ``none``
ORT_LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
#: initializers of at least this many bytes go to the optimized graph's external data file
EXTERNAL_MIN_BYTES = 1024
#: the optimized graph's file and its data file, in the temporary folder
GRAPH_FILE = "optimized.onnx"
DATA_FILE = "optimized.onnx.data"
#: the NCHWc probe's graph (step 4), in the same folder
PROBE_FILE = "nchwc-probe.onnx"
#: the domain of onnxruntime's NCHWc ops
NCHWC_DOMAIN = "com.microsoft.nchwc"


@dataclass(frozen=True, slots=True)
class Optimized:
    """The graph to plan: ``model``, read from ``path`` (the user's ``source`` file at level
    ``none``, else a file in a temporary folder that lives as long as the ``with`` block);
    ``record``: how it was built; ``graph_sha256``: :func:`graph_digest` of its files (``None``
    at level ``none``)."""

    model: onnx.ModelProto
    path: Path
    source: str
    record: Optimization
    graph_sha256: str | None = None
    #: the graph inputs that are the caller's state (a training graph's parameters), as the model
    #: as written has them (:func:`onnxmem.model.caller_state`); ``None`` at level ``none``
    caller: dict[str, str] | None = None

    def model_record(self) -> dict[str, Any]:
        """What a plan adds to its ``model`` object: ``optimization`` and ``graph_sha256``
        (nothing at level ``none``, whose plans record nothing)."""
        if self.record.level == "none":
            return {}
        return {"graph_sha256": self.graph_sha256, "optimization": self.record.to_dict()}


@contextmanager
def optimized_model(path: str | os.PathLike[str], level: str = "none", device: str = "cpu", *,
                    model: onnx.ModelProto | None = None) -> Iterator[Optimized]:
    """The graph onnxruntime builds from the model at ``path`` at ``level`` for ``device``'s
    provider (the steps of this module), for the ``with`` block; ``model``: the model at ``path``
    when already loaded. Raises ``OnnxmemError`` for a bad level or device, missing weights,
    and a model onnxruntime cannot optimize."""
    if level not in OPTIMIZE_LEVELS:
        raise OnnxmemError(f"--optimize {show_name(level)} is not one of {', '.join(OPTIMIZE_LEVELS)}")
    if device not in DEVICES:
        raise OnnxmemError(f"--device {show_name(device)} is not one of {', '.join(DEVICES)}")
    source = model if model is not None else load_model(path)
    if level == "none":
        yield Optimized(source, Path(path), os.fspath(path), AS_WRITTEN)
        return
    _require_weights(source, path, level)
    from onnxmem.runtime.isolation import run_isolated

    with tempfile.TemporaryDirectory(prefix="onnxmem-optimize-") as tmp:
        out = Path(tmp) / GRAPH_FILE
        opsets = list(source.opset_import)  # for the advice where a kernel is missing
        record = run_isolated(_optimize, os.fspath(path), os.fspath(out), level, device, opsets)
        built = declared_interface(canonical_names(load_model(out)), source)
        if record.nchwc_block is not None and not _has_nchwc(built):
            record = replace(record, nchwc_block=None)  # a graph the block size did not shape
        inputs = {v.name for v in built.graph.input} - {t.name for t in built.graph.initializer}
        caller = {n: r for n, r in caller_state(source).items() if n in inputs}
        yield Optimized(built, out, os.fspath(path), record, graph_digest(built, out), caller)


def _has_nchwc(model: onnx.ModelProto) -> bool:
    """Whether a graph of ``model`` (a body too) has an op of the NCHWc layout."""
    return any(n.domain == NCHWC_DOMAIN for g in iter_graphs(model.graph) for n in g.node)


def _require_weights(model: onnx.ModelProto, path: str | os.PathLike[str], level: str) -> None:
    """onnxruntime reads every weight to optimize: each external data file must be there."""
    try:
        check_external_data(model, Path(path).parent, need_files=True)
    except OnnxmemError as exc:
        raise type(exc)(f"{exc} (onnxruntime reads the weights to optimize the model at --optimize {level}; "
                        "a weight-free zoo fixture is optimized by 'onnxmem zoo --optimize', which fills it)") from None


#: a name onnxruntime generates (``Graph::GenerateNodeName``/``GenerateNodeArgName``): BASE_token_N,
#: N a counter whose values depend on the order of its passes over unordered containers
_GENERATED = re.compile(r"^(.*)_token_\d+$", re.DOTALL)


def canonical_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (changed in place) with its main graph's nodes in a canonical order and the names
    onnxruntime generated there renumbered in that order (initializers, then each node's inputs
    and outputs, in node order).

    onnxruntime writes the same nodes for the same model, level, provider, version and CPU, but
    not always in the same order (the order of its passes over unordered containers: the
    branches of an inception block come out in any order), and it names the nodes and values
    it adds ``BASE``, ``BASE_token_N``, ... in that order too; the plan names nodes and values
    and the digest covers the graph, so neither may change from run to run. The nodes are put
    in a topological order that takes, of the nodes ready, the one whose key (what it computes,
    from what, under which of its names onnxruntime did not generate: :func:`_canonical_order`)
    is lowest; then every generated name (``BASE_token_N``, and ``BASE`` itself where a
    ``BASE_token_N`` exists) becomes ``BASE__K``, K counting up per kind (nodes, values),
    skipping names already used. The subgraph bodies' reads of renamed values are renamed with
    them; graph inputs and outputs, and the bodies' own values, keep their names.
    """
    g = model.graph
    io = {v.name for v in g.input} | {v.name for v in g.output}
    value_names = [t.name for t in g.initializer] + [x for n in g.node for x in (*n.input, *n.output)]
    generated = _generated_names(value_names, io | {""}), _generated_names([n.name for n in g.node], {""})
    _canonical_order(g, *generated)  # the same nodes and names: only their order changes
    used = {n.name for n in g.node} | set(value_names) | io | {v.name for v in g.value_info}
    counter = [0, 0]
    given: tuple[dict[str, str], dict[str, str]] = ({}, {})

    def rename(name: str, kind: int) -> str:
        if name not in generated[kind]:
            return name
        if name not in given[kind]:
            base = m.group(1) if (m := _GENERATED.match(name)) else name
            while f"{base}__{counter[kind]}" in used:
                counter[kind] += 1
            given[kind][name] = f"{base}__{counter[kind]}"
            used.add(given[kind][name])
        return given[kind][name]

    for t in g.initializer:
        t.name = rename(t.name, 0)
    for node in g.node:
        node.input[:] = [rename(x, 0) for x in node.input]
        node.output[:] = [rename(x, 0) for x in node.output]
        node.name = rename(node.name, 1)
    for vi in g.value_info:
        vi.name = rename(vi.name, 0)
    _rename_reads(g, given[0])
    return model


def _generated_names(names: list[str], keep: set[str]) -> set[str]:
    """The names of ``names`` onnxruntime generated (``BASE_token_N``, and ``BASE`` where a
    ``BASE_token_N`` is among them), but those in ``keep``."""
    bases = {m.group(1) for m in map(_GENERATED.match, names) if m}
    return {x for x in names if x not in keep and (x in bases or _GENERATED.match(x))}


def _canonical_order(g: onnx.GraphProto, values: set[str], node_names: set[str]) -> None:
    """``g``'s nodes (changed in place) in the order of :func:`canonical_names`: the topological
    order (:func:`onnxmem.core.toposort.stable_order`) that takes the ready node of lowest key,
    each key a digest of the node's op, attributes, the
    names of it that onnxruntime did not generate (``values``, ``node_names``: those it did), and
    the keys of the nodes its inputs come from (a generated initializer: its bytes). Nodes with
    the same key compute the same thing from the same values: either order is the same graph.
    A graph with a cycle keeps its order."""
    nodes = list(g.node)
    producer = {o: (i, k) for i, n in enumerate(nodes) for k, o in enumerate(n.output) if o}
    weights = {t.name: t for t in g.initializer}
    succ: list[set[int]] = [set() for _ in nodes]
    for i, n in enumerate(nodes):
        reads = [*n.input, *(x for _, sub in subgraph_attributes(n) for x in captured_names(sub))]
        for d in {producer[x][0] for x in reads if x in producer} - {i}:
            succ[d].add(i)
    keys: list[str] = [""] * len(nodes)

    def key(i: int) -> str:
        n = nodes[i]
        h = hashlib.sha256(repr((n.op_type, n.domain, "" if n.name in node_names else n.name)).encode())
        for a in sorted(n.attribute, key=lambda a: a.name):
            h.update(a.SerializeToString(deterministic=True))
        for x in n.input:
            if x not in values:
                h.update(b"n" + x.encode() + b"\0")
            elif x in producer:
                h.update(f"p{keys[producer[x][0]]}:{producer[x][1]}".encode())
            elif x in weights:
                h.update(b"w" + _tensor_digest(weights[x]).encode())
        h.update(repr([("" if o in values else o) for o in n.output]).encode())
        keys[i] = h.hexdigest()
        return keys[i]

    order = stable_order([sorted(x) for x in succ], priority=key)
    if len(order) != len(nodes) or order == list(range(len(nodes))):
        return
    ordered = []
    for i in order:
        copy = onnx.NodeProto()
        copy.CopyFrom(nodes[i])
        ordered.append(copy)
    del g.node[:]
    g.node.extend(ordered)


def _tensor_digest(t: onnx.TensorProto) -> str:
    """The sha256 of an initializer as stored, but its name."""
    name, t.name = t.name, ""
    try:
        return hashlib.sha256(t.SerializeToString(deterministic=True)).hexdigest()
    finally:
        t.name = name


def _rename_reads(g: onnx.GraphProto, renamed: dict[str, str]) -> None:
    """The reads of ``renamed``'s values (old name: new name) by ``g``'s subgraph bodies, at any
    depth, renamed with them; a body value of the same name hides the outer one."""
    if not renamed:
        return
    for node in g.node:
        for _, sub in subgraph_attributes(node):
            own = {v.name for v in sub.input} | {t.name for t in sub.initializer}
            own |= {o for n in sub.node for o in n.output}
            seen = {k: v for k, v in renamed.items() if k not in own}
            for n in sub.node:
                n.input[:] = [seen.get(x, x) for x in n.input]
            for v in (*sub.output, *sub.value_info):
                v.name = seen.get(v.name, v.name)
            _rename_reads(sub, seen)


def declared_interface(built: onnx.ModelProto, source: onnx.ModelProto) -> onnx.ModelProto:
    """``built`` (changed in place) with its graph inputs and outputs declared as the user's
    model declares them. onnxruntime writes its own inference of each graph output's shape into
    the file it saves, and that inference can be wrong: for GroupQueryAttention's ``present``
    it declares the past's length where the kernel writes past + new. The interface of the
    graph is the user's, so the user's declarations stand (a value not in the user's model
    keeps what onnxruntime wrote)."""
    for mine, theirs in ((built.graph.input, source.graph.input), (built.graph.output, source.graph.output)):
        declared = {v.name: v for v in theirs}
        for v in mine:
            if v.name in declared:
                v.type.CopyFrom(declared[v.name].type)
    return built


def graph_digest(model: onnx.ModelProto, path: str | os.PathLike[str]) -> str:
    """The sha256 of an optimized graph: ``model`` (its names made canonical), then the bytes of its
    data file beside ``path`` (when there)."""
    h = hashlib.sha256(model.SerializeToString(deterministic=True))
    data = Path(path).with_name(DATA_FILE)
    if data.is_file():
        with open(data, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _optimize(src: str, dst: str, level: str, device: str,
              opsets: list[onnx.OperatorSetIdProto] | None = None) -> Optimization:
    """Step 2, in the process that runs onnxruntime: write the optimized graph to ``dst``. ``opsets``:
    the source's opset imports (:func:`~onnxmem.runtime.standins.no_kernel_fix`)."""
    import onnxruntime as ort

    from onnxmem.runtime.isolation import end_run, start_run
    from onnxmem.runtime.ort import first_line
    from onnxmem.runtime.sessions import device_providers
    from onnxmem.runtime.settings import session_options

    providers = device_providers(device)
    so = session_options()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[level])
    so.optimized_model_filepath = dst
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA_FILE)
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                str(EXTERNAL_MIN_BYTES))
    start_run(f"onnxruntime's optimization of the model at level {level}")
    try:
        ort.InferenceSession(src, sess_options=so, providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        fix = standins.no_kernel_fix(str(exc), opsets) if opsets is not None else ""
        raise RuntimeBackendError(f"onnxruntime cannot optimize model {show_name(src)} at --optimize {level} for "
                                  f"--device {device}: {first_line(exc)}"
                                  f"{fix or '; plan the graph as written (--optimize none)'}") from None
    finally:
        end_run()
    if not os.path.isfile(dst):
        raise RuntimeBackendError(f"onnxruntime wrote no optimized graph of model {show_name(src)} at --optimize "
                                  f"{level}; plan the graph as written (--optimize none)")
    block = _nchwc_block(os.path.dirname(dst)) if device == "cpu" and level == "all" else None
    return Optimization(level, device, str(ort.__version__), block)


#: the NCHWc block size :func:`_nchwc_block` read, once per process
_probed: dict[str, int | None] = {}


def _nchwc_block(folder: str) -> int | None:
    """Step 4: the NCHWc block size of this CPU (``None`` when onnxruntime lays out no NCHWc
    graph here), read from the filter onnxruntime pads for a 4-channel Conv. The probe's graph
    is written in ``folder`` (the caller's temporary folder, which a process killed while it
    probes does not leave behind) and removed."""
    if "block" not in _probed:
        _probed["block"] = _probe_nchwc_block(folder)
    return _probed["block"]


def _probe_nchwc_block(folder: str) -> int | None:
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from onnxmem.runtime.settings import session_options

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])
    w = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")
    probe = helper.make_model(helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "probe", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    probe.ir_version = 8
    out = os.path.join(folder, PROBE_FILE)
    try:
        so = session_options()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = out
        ort.InferenceSession(probe.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
        built = onnx.load(out)
    finally:
        if os.path.exists(out):
            os.remove(out)
    dims = {t.name: list(t.dims) for t in built.graph.initializer}
    for node in built.graph.node:
        if node.domain == NCHWC_DOMAIN and node.op_type == "Conv" and node.input[1] in dims:
            return int(dims[node.input[1]][0])
    return None


def _version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def onnxruntime_version() -> str:
    """The version of the onnxruntime installed (asked of the command's onnxruntime process)."""
    from onnxmem.runtime.isolation import run_isolated

    return run_isolated(_version)


def check_recorded(recorded: Optimization, *, level: str | None, device: str, plan_name: str) -> str:
    """The level to rebuild a plan's graph at, once its record agrees with ``--optimize``
    (``level``; ``None``: not given), ``--device`` and the onnxruntime installed; else
    ``PlanError`` naming both sides and the fix. A plan of the graph as written agrees with
    every device and version."""
    where = f"plan {show_name(plan_name)}"
    if level is not None and level != recorded.level:
        raise PlanError(f"{where} was made for {recorded.describe()}, not --optimize {level}: verify it with "
                        f"--optimize {recorded.level}, or plan the model again with --optimize {level}")
    if recorded.level == "none":
        return "none"
    if recorded.provider != device:
        raise PlanError(f"{where} was made for the graph onnxruntime builds for --device {recorded.provider}, not "
                        f"--device {device}: verify it with --device {recorded.provider}, or plan the model again "
                        f"with --device {device}")
    have = onnxruntime_version()
    if have != recorded.onnxruntime:
        raise PlanError(f"{where} was made for the graph onnxruntime {flag_value(recorded.onnxruntime)} builds at "
                        f"level {recorded.level}; this is onnxruntime {have}, whose graph may differ: plan the "
                        f"model again with this onnxruntime (or plan with --optimize none, which holds for every "
                        "version)")
    return recorded.level


def check_rebuilt(recorded: Optimization, graph_sha256: str | None, rebuilt: Optimized, plan_name: str) -> None:
    """``PlanError`` unless the graph rebuilt here (``rebuilt``) is the one the plan was made for:
    the same NCHWc block size, then the same digest (``graph_sha256``, when the plan has one)."""
    where = f"plan {show_name(plan_name)}"
    if recorded.level == "all" and recorded.provider == "cpu" and recorded.nchwc_block != rebuilt.record.nchwc_block:
        raise PlanError(f"{where} was made at --optimize all on a CPU whose NCHWc block size is "
                        f"{recorded.nchwc_block}; this CPU's is {rebuilt.record.nchwc_block} (another vector "
                        "width, another graph): plan the model again on this machine, or plan with --optimize "
                        "extended or none, which hold on every CPU")
    if graph_sha256 and rebuilt.graph_sha256 != graph_sha256:
        raise PlanError(f"{where} was made for an optimized graph with sha256 {graph_sha256[:8]}…; onnxruntime "
                        f"builds {str(rebuilt.graph_sha256)[:8]}… from {show_name(rebuilt.source)} at level "
                        f"{recorded.level}: plan this model again")
