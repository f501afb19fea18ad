"""onnxruntime session helpers for verification: one node alone, the whole model, CUDA.

Every failure of onnxruntime becomes a one-line ``RuntimeBackendError`` that
carries the first line of onnxruntime's message. Imported only by the
modules that run onnxruntime (``execution``, ``weights``, ``ortpeak``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

import onnxmem.runtime.standins as standins
from onnxmem.core.errors import RuntimeBackendError, cut_words, flag_value, one_line, show_name
from onnxmem.graph import RANDOM_OPS as GRAPH_RANDOM_OPS
from onnxmem.graph import GraphView, Op
from onnxmem.runtime.ort import (
    apart_from_weights,
    first_line,
    foreign_dtype,
    make_session,
    onnx_array,
    ort_values,
    run_bounded,
)
from onnxmem.runtime.settings import LOG_SEVERITY, session_options, shared_arena

__all__ = [
    "Alone",
    "CUDA_SESSIONS",
    "FEWEST_SESSIONS",
    "RecentSessions",
    "cuda_room",
    "cuda_available",
    "device_providers",
    "host_array",
    "first_line",
    "model_like",
    "node_alone",
    "node_session",
    "node_setup",
    "on_host",
    "binding_type",
    "value_names",
    "ortvalue_bytes",
    "warm_device",
    "warmed",
    "require_cuda",
    "run_model",
    "run_values",
]


#: onnxruntime's element type names -> ONNX element types (for runtimes without
#: ``OrtValue.tensor_size_in_bytes``, such as onnxruntime-training 1.19)
_ORT_TYPES = {
    f"tensor({name})": et for et, name in (
        (onnx.TensorProto.FLOAT, "float"), (onnx.TensorProto.DOUBLE, "double"),
        (onnx.TensorProto.FLOAT16, "float16"), (onnx.TensorProto.BFLOAT16, "bfloat16"),
        (onnx.TensorProto.INT8, "int8"), (onnx.TensorProto.UINT8, "uint8"),
        (onnx.TensorProto.INT16, "int16"), (onnx.TensorProto.UINT16, "uint16"),
        (onnx.TensorProto.INT32, "int32"), (onnx.TensorProto.UINT32, "uint32"),
        (onnx.TensorProto.INT64, "int64"), (onnx.TensorProto.UINT64, "uint64"),
        (onnx.TensorProto.BOOL, "bool"),
    )
}


@functools.cache
def binding_type(elem_type: int) -> Any:
    """The element type to give ``IOBinding.bind_input``/``bind_output``: the numpy dtype where
    there is a plain one (every onnxruntime takes it; 1.19 takes nothing else), else the ONNX
    element type (newer onnxruntime takes it for bfloat16, float8, int4...)."""
    if elem_type in _ORT_TYPES.values() and elem_type != onnx.TensorProto.BFLOAT16:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    return elem_type


#: onnxruntime's element type names -> ONNX element types, every one (``tensor(bfloat16)``...)
_EVERY_ORT_TYPE = {f"tensor({name.lower()})": et for name, et in onnx.TensorProto.DataType.items()}


@functools.cache
def _foreign(ort_type: str) -> bool:
    """Whether values of onnxruntime's element type ``ort_type`` have a type numpy lacks (:func:`foreign_dtype`)."""
    et = _EVERY_ORT_TYPE.get(ort_type)
    try:
        return et is not None and foreign_dtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(et)))
    except (KeyError, TypeError, ValueError):  # a type this onnx cannot give numpy at all
        return False


def host_array(value: Any) -> np.ndarray:
    """A numpy array that owns a host copy of the tensor an ``OrtValue`` holds; one of a type
    numpy lacks (bfloat16, float8, int4...: ``numpy()`` refuses it, or gives float8's bytes as
    uint8) read in ONNX's layout into the ``ml_dtypes`` array ONNX gives it (on the host only).

    ``numpy()`` of a value made over a numpy array (``ortvalue_from_numpy`` on the
    host) returns an array that views that buffer without keeping it alive (its base
    is a capsule of the C++ value, which does not own the bytes): once the Python
    value that held the buffer is gone, the view reads freed memory. Seen on CUDA
    (onnxruntime-gpu 1.31.1, H100): the reference run of a Loop whose body holds an
    If read its carried state as other bytes. The copy here is the array's own.
    """
    et = _EVERY_ORT_TYPE.get(value.data_type())
    if et is None or not _foreign(value.data_type()):
        return np.array(value.numpy(), copy=True)
    if str(value.device_name()).lower() != "cpu":
        raise RuntimeBackendError(f"onnxmem reads values of type {value.data_type()} from host memory only; "
                                  "run it with --device cpu")
    import ctypes

    return onnx_array(et, value.shape(), ctypes.string_at(value.data_ptr(), ortvalue_bytes(value)))


def ortvalue_bytes(value: Any) -> int:
    """Bytes of the tensor an ``OrtValue`` holds (onnxruntime's own count where it has one)."""
    if hasattr(value, "tensor_size_in_bytes"):
        return int(value.tensor_size_in_bytes())
    from onnxmem.model import tensor_bytes

    et = _ORT_TYPES.get(value.data_type())
    if et is None:
        raise RuntimeBackendError(f"onnxruntime returned a value of type {value.data_type()}, which onnxmem "
                                  "cannot size; use onnxruntime 1.20 or later")
    return tensor_bytes(et, [int(d) for d in value.shape()])


def model_like(model: onnx.ModelProto, graph: onnx.GraphProto) -> onnx.ModelProto:
    """A model of ``graph`` with ``model``'s IR version, opsets and functions."""
    m = onnx.ModelProto()
    m.ir_version = model.ir_version
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    m.graph.CopyFrom(graph)
    return m


#: ops whose outputs a node's session declares with their planned shapes: onnxruntime's
#: shape inference of MaxPoolGrad (onnxruntime-training 1.19) crashes the process on an
#: output without a shape
SHAPED_OUTPUTS = frozenset({"MaxPoolGrad"})
#: op -> {input position: dims} a node's session declares symbolic: onnxruntime's shape inference
#: of GroupQueryAttention (1.31) sizes ``present_key/value`` from a concrete ``past_key`` as the
#: past's length when ``total_sequence_length`` is not a constant, and its kernel then refuses
#: the ``max(past, total)`` it computes
SYMBOLIC_INPUT_DIMS: dict[str, dict[int, tuple[int, ...]]] = {"GroupQueryAttention": {3: (2,), 4: (2,)}}


def _declared(node: onnx.NodeProto, name: str, shape: Sequence[int], shared: bool = False) -> list[int | str]:
    """The dims ``node``'s session declares for its input ``name`` (:data:`SYMBOLIC_INPUT_DIMS`);
    ``shared``: every dim symbolic (the rank stays), so that nodes alike of any shapes share it."""
    if shared:
        return [f"d{k}" for k in range(len(shape))]
    loose = {d for p, dims in SYMBOLIC_INPUT_DIMS.get(node.op_type, {}).items()
             if p < len(node.input) and node.input[p] == name for d in dims}
    return [f"d{k}" if k in loose else int(d) for k, d in enumerate(shape)]


#: ops whose kernel draws random numbers: each node keeps a session of its own, as a fresh kernel
#: gives the same draws again (the training run makes a fresh one for Dropout's second run): the
#: graph's random ops, and Dropout whatever its inputs
RANDOM_OPS = GRAPH_RANDOM_OPS | {"Dropout"}


def _seeded(opsets: Sequence[onnx.OperatorSetIdProto], node: onnx.NodeProto) -> None:
    """Give ``node``, a copy of a random op of the standard domain without a ``seed``, the seed 0
    (``opsets``: those of its graph or function): each session of it then draws the same numbers,
    as a seeded one does (the run before the arena and the arena run hold the same draws). Without
    one, onnxruntime's Dropout draws from one generator of the whole process, which every run
    moves on."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in RANDOM_OPS:
        return
    if any(a.name == "seed" for a in node.attribute):
        return
    if node.op_type == "Dropout":
        opset = max((o.version for o in opsets if o.domain in ("", "ai.onnx")), default=0)
        if opset >= 12:  # the first Dropout with a seed (before it, onnxruntime's is the identity)
            node.attribute.append(onnx.helper.make_attribute("seed", 0))
        return
    node.attribute.append(onnx.helper.make_attribute("seed", 0.0))


def value_names(op: Op) -> dict[str, str]:
    """The name each value ``op`` reads or writes has in its node session (:func:`node_session`):
    ``i0, i1...`` for its reads and ``o0, o1...`` for its outputs, so that nodes alike share one
    session; a node whose bodies read outer values (``captures``) keeps the real names."""
    if op.captures:
        return {n: n for n in (*op.reads, *op.outputs) if n}
    names = {n: f"i{k}" for k, n in enumerate(op.reads)}
    names.update({o: f"o{k}" for k, o in enumerate(op.outputs) if o})
    return names


#: the most node sessions a run on CUDA keeps at once. Each CUDA session is a provider of its
#: own, with its own cuBLAS and cuDNN handles (about 40 to 120 MiB of the device each, measured
#: on an H200) and (where the shared arena of :func:`onnxmem.runtime.settings.shared_arena` cannot be
#: registered) its own device arena, which keeps the largest convolution workspace it was ever
#: asked for: kept for every node, they took 38,881 MiB of an H200 to verify DenseNet-121's 8 MB
#: arena. Nodes alike share one (:func:`node_session`), so a zoo model needs 11 to 110; fewer
#: are kept where the device runs short (:func:`cuda_room`).
CUDA_SESSIONS = 128

#: the fewest node sessions a run keeps however short the device runs: dropping more would
#: make every node build its session again
FEWEST_SESSIONS = 4


class RecentSessions(OrderedDict):  # type: ignore[type-arg]
    """Sessions by key, at most ``limit`` of them: storing one more drops the one used longest ago
    (its session, and what it holds on the device, is freed once nothing else refers to it).
    ``room``: whether another session fits (:func:`cuda_room`); while it says no, the oldest are
    dropped too, down to :data:`FEWEST_SESSIONS`."""

    def __init__(self, limit: int, room: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.room = room

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.limit or (len(self) > FEWEST_SESSIONS and self.room is not None
                                         and not self.room()):
            self.popitem(last=False)


def cuda_room() -> Callable[[], bool] | None:
    """For :class:`RecentSessions` on CUDA: whether device 0 keeps an eighth of its memory (at least
    1 GiB) free for the kernels' workspaces and the arena's copies once one more session is made;
    ``None`` where the CUDA runtime does not say."""
    from onnxmem.runtime.isolation import cuda_memory

    got = cuda_memory()
    if got is None:
        return None
    reserve = max(got[1] // 8, 1 << 30)

    def room() -> bool:
        now = cuda_memory()
        return now is None or now[0] >= reserve

    return room


def node_setup(cuda: bool) -> tuple[Any, list[Any]]:
    """The session options and providers of every node session of a run (on CUDA with ``cuda``)."""
    options = session_options(memory_arena=False)  # one per node: cheap to make
    if not cuda:
        return options, ["CPUExecutionProvider"]
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    # deterministic algorithms only, each convolution's picked by cuDNN's heuristic for its shape (no
    # timed search): the runs of a node agree bit for bit. The default algorithm, the one convolution
    # without a search, ran NASNet-A Large's convolutions 11 times slower on an H200 (docs/cuda.md)
    options.use_deterministic_compute = True
    shared_arena(options, "cuda")
    return options, [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"})]


@dataclasses.dataclass(frozen=True)
class Alone:
    """A node as its session alone runs it (:func:`node_alone`)."""

    #: the node, renamed as its session runs it (its values by :func:`value_names`), seeded
    node: onnx.NodeProto
    declared_in: tuple[tuple[str, int, tuple[Any, ...]], ...]
    declared_out: tuple[tuple[str, int, tuple[Any, ...] | None], ...]
    #: the session's model is a function of this key (the model's IR version, opsets and functions are
    #: the same for every node): nodes alike find their session without building and serializing it;
    #: ``None`` for a node that shares no session
    key: Any

    def serialized(self, model: onnx.ModelProto) -> bytes:
        """The model of the node alone: a graph of it, with ``model``'s IR version, opsets and functions."""
        g = onnx.GraphProto()
        g.name = "node"
        g.node.add().CopyFrom(self.node)
        for name, et, dims in self.declared_in:
            g.input.append(onnx.helper.make_tensor_value_info(name, et, list(dims)))
        for name, et, shape in self.declared_out:
            g.output.append(onnx.helper.make_tensor_value_info(name, et, None if shape is None else list(shape)))
        alone = model_like(model, g)
        for f in alone.functions:  # a call of a local function that draws: its draws seeded too
            for fn in f.node:
                _seeded(f.opset_import or model.opset_import, fn)
        return bytes(alone.SerializeToString())


def node_alone(model: onnx.ModelProto, node: onnx.NodeProto, op: Op, view: GraphView,
               shapes: Mapping[str, tuple[int, ...]], share: bool) -> Alone:
    """``node`` as :func:`node_session` runs it alone, its key set where ``share`` and nodes alike
    may share a session (a node of the standard domain, not a random op)."""
    names = value_names(op)
    n = onnx.NodeProto()
    n.CopyFrom(node)
    n.name = "node"  # the name, documentation and metadata of a node change nothing it computes
    n.ClearField("doc_string")
    n.ClearField("metadata_props")
    _seeded(model.opset_import, n)
    n.input[:] = [names.get(i, i) if i else "" for i in node.input]
    n.output[:] = [names.get(o, o) if o else "" for o in node.output]
    share = share and node.domain in ("", "ai.onnx") and node.op_type not in RANDOM_OPS
    shaped = node.op_type in SHAPED_OUTPUTS
    declared_in = tuple((names[name], view.tensors[name].elem_type,
                         tuple(_declared(node, name, shapes.get(name, view.tensors[name].shape), share)))
                        for name in op.reads)
    declared_out = tuple((names[o], view.tensors[o].elem_type, tuple(view.tensors[o].shape) if shaped else None)
                         for o in node.output if o)
    key = (n.SerializeToString(deterministic=True), declared_in, declared_out) if share else None
    return Alone(n, declared_in, declared_out, key)


def node_session(model: onnx.ModelProto, node: onnx.NodeProto, op: Op, view: GraphView,
                 shapes: Mapping[str, tuple[int, ...]], options: Any, providers: Sequence[Any],
                 cache: dict[Any, Any] | None = None, alone: Alone | None = None) -> Any:
    """A session that runs ``node`` alone: its inputs at ``shapes`` (else the view's), its outputs typed only,
    every value under its name of :func:`value_names`.

    The kernel computes the output shapes; the caller's binding checks them. ``cache``: the
    sessions made so far, by the model they run: a node of the standard domain declares its
    inputs with symbolic dims (their ranks and types only), and one with the same attributes,
    input ranks and types as one before it gets that one's session, whatever the shapes, on
    either provider (a kernel holds no state between runs but a random op's draws,
    :data:`RANDOM_OPS`, which never share; one without a seed gets the seed 0 in its session,
    :func:`_seeded`; a CUDA kernel that picks its algorithm by shape picks it in each run, the
    same for the run outside the arena and the run in it). The cache's key is the node
    (renamed) with its declared inputs and outputs (:class:`Alone`), so a node that finds its
    session builds no model for it. ``alone``: :func:`node_alone`'s answer for this node with
    ``share``, where the caller has it (the sessions built ahead made it); taken with a cache only.
    """
    import onnxruntime as ort

    if alone is None or cache is None:
        alone = node_alone(model, node, op, view, shapes, share=cache is not None)
    if alone.key is not None and alone.key in cache:  # type: ignore[operator]
        return cache[alone.key]  # type: ignore[index]
    try:
        sess = ort.InferenceSession(alone.serialized(model), sess_options=options, providers=list(providers))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        sess = _stand_in_session(alone.node, op.name, list(alone.declared_in), model.ir_version, options,
                                 providers, exc)
        if sess is None:
            what = f"node {show_name(op.name)} ({flag_value(op.op_type)})"
            raise RuntimeBackendError(
                f"onnxruntime cannot load {what} alone: {one_line(first_line(exc))}"
                f"{standins.no_kernel_fix(str(exc), model.opset_import)}"
            ) from None
    if alone.key is not None:
        cache[alone.key] = sess  # type: ignore[index]
    return sess


def _stand_in_session(node: onnx.NodeProto, name: str, declared: list[tuple[str, int, tuple[Any, ...]]],
                      ir_version: int, options: Any, providers: Sequence[Any], exc: Exception) -> Any:
    """Where ``exc`` says the CPU provider has no kernel for ``node``'s op (the node named ``name``
    in the model) and the op has a stand-in (:mod:`onnxmem.runtime.standins`), a session of the
    stand-in graph, with the node session's inputs (``declared``: as :func:`node_session` declares
    them) and outputs; else ``None``."""
    import onnxruntime as ort

    if list(providers) != ["CPUExecutionProvider"] or not standins.has_stand_in(node):
        return None
    if standins.missing_kernel(str(exc)) != node.op_type:
        return None
    model = standins.stand_in_model(node, name, declared, list(node.output), ir_version)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=list(providers))
    except Exception as again:  # noqa: BLE001 - onnxruntime raises its own types
        raise RuntimeBackendError(f"onnxruntime cannot load the standard-op stand-in of node "
                                  f"{show_name(name)} ({flag_value(node.op_type)}): "
                                  f"{one_line(first_line(again))}") from None
    return standins.mark_stand_in(sess)


def run_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], outputs: Sequence[str],
              weights: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """One ordinary whole-model onnxruntime run on the CPU: ``{output: array}``. ``weights``: the
    values of initializers already read (:func:`onnxmem.runtime.folding.compute_weights`), handed
    to onnxruntime as they are instead of serialized with the model again."""
    taken: Mapping[str, np.ndarray] = {}
    if weights:
        model, taken = apart_from_weights(model, weights)
    given = ort_values(taken)
    sess = make_session(model, initializers=given)
    if not any(_foreign(o.type) for o in sess.get_outputs() if o.name in outputs):
        values = run_bounded(sess, list(outputs), feeds, "as a whole")
        return {n: np.asarray(v) for n, v in zip(outputs, values)}
    # an output of a type numpy lacks: onnxruntime cannot give it as an array, only as an OrtValue
    values = run_bounded(sess, list(outputs), ort_values(feeds), "as a whole", as_ort_values=True)
    return {n: host_array(v) for n, v in zip(outputs, values)}


def run_values(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], values: Mapping[str, int],
               weights: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """One whole-model onnxruntime run on the CPU that gives every value of ``values`` (name ->
    element type; the graph's outputs and any other value of its main graph) as an OrtValue,
    on one thread, optimizations and prepacking off: each node runs the kernel, on the same
    inputs, that its session alone (:func:`node_session`) runs, so each value has the bits that
    node computes outside an arena. ``weights`` as for :func:`run_model`."""
    stubbed, taken = apart_from_weights(model, weights)
    have = {o.name for o in stubbed.graph.output}
    stubbed.graph.output.extend(onnx.helper.make_tensor_value_info(n, et, None)
                                for n, et in values.items() if n not in have)
    sess = make_session(stubbed, initializers=ort_values(taken), prepacking=False)
    got = run_bounded(sess, list(values), ort_values(feeds), "as a whole (the reference)", as_ort_values=True)
    return dict(zip(values, got))


def device_providers(device: str) -> list[str]:
    """The providers of a session on ``device``, the one whose kernels run first (CUDA's falling back
    to the CPU's); ``--device cuda`` where CUDA cannot run is a one-line error (:func:`require_cuda`)."""
    if device == "cuda":
        require_cuda()
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def require_cuda() -> None:
    """Raise a one-line error when onnxruntime's CUDA provider cannot run here."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeBackendError(
            "--device cuda: this onnxruntime has no CUDA provider; install onnxruntime-gpu or use --device cpu"
        )
    try:
        ort.set_default_logger_severity(4)
        ort.OrtValue.ortvalue_from_shape_and_type([1], np.uint8, "cuda", 0)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        reason = cut_words(first_line(exc, width=10_000).rsplit(") ", 1)[-1], 160)
        raise RuntimeBackendError(
            f"--device cuda: onnxruntime's CUDA provider cannot run here ({reason}); use --device cpu"
        ) from None
    finally:
        ort.set_default_logger_severity(LOG_SEVERITY)


def cuda_available() -> bool:
    """Whether onnxruntime's CUDA provider can allocate on a GPU here."""
    try:
        require_cuda()
    except RuntimeBackendError:
        return False
    return True


#: the device :func:`warm_device` set up in this process, once it has
_WARMED: str | None = None


def _warm_model() -> bytes:
    """A convolution, a product of matrices and a sum over a 4x4 image: the first use of cuDNN, of
    cuBLAS and of the provider's own kernels, each of which loads its library and makes its handles
    then."""
    from onnx import TensorProto, helper

    def value(name: str, shape: list[int]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("MatMul", ["c", "m"], ["p"]),
             helper.make_node("Add", ["p", "c"], ["y"])]
    graph = helper.make_graph(nodes, "warm", [value("x", [1, 1, 4, 4]), value("w", [1, 1, 1, 1]),
                                               value("m", [4, 4])], [value("y", [1, 1, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # within what every supported onnxruntime reads
    return bytes(model.SerializeToString())


def warm_device(device: str) -> bool:
    """Set up ``device`` for the node sessions of a run before its first one: onnxruntime's provider
    loaded and, on CUDA, the device's context, the shared arena of the node sessions and the
    libraries of cuDNN and cuBLAS, by building a session of :func:`node_setup`'s kind for a small
    model and running it once. An onnxruntime child does this while its parent reads and plans
    the model (:func:`onnxmem.runtime.isolation.run_limits`, ``warm``); the run's first node
    session then finds it done. Whether it ran: ``False``, with nothing raised, where the device
    cannot run it (the run's own first session then says why)."""
    global _WARMED
    import onnxruntime as ort

    try:
        if device == "cuda":
            require_cuda()
        options, providers = node_setup(device == "cuda")
        sess = ort.InferenceSession(_warm_model(), sess_options=options, providers=providers)
        x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
        sess.run(None, {"x": x, "w": np.ones((1, 1, 1, 1), np.float32), "m": np.eye(4, dtype=np.float32)})
    except Exception:  # noqa: BLE001 - the run that needs the device reports its error itself
        return False
    _WARMED = device
    return True


def warmed() -> str | None:
    """The device :func:`warm_device` set up in this process (``None``: none)."""
    return _WARMED


def on_host(meminfo: Any) -> bool:
    """Whether an onnxruntime ``OrtMemoryInfo`` names host memory (the CUDA provider keeps some tensors there)."""
    name = str(getattr(meminfo, "name", ""))
    mem = str(getattr(meminfo, "mem_type", ""))
    return name == "Cpu" or mem.endswith(("CPU_INPUT", "CPU_OUTPUT", "CPU"))
