"""onnxruntime sessions for whole models: random inputs and measured shapes.

Imported lazily: planning a model with static shapes never loads onnxruntime.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

import onnxmem.runtime.standins as standins
from onnxmem.core.errors import RuntimeBackendError, ShapeError, cut_words, one_line, show_name
from onnxmem.model import (
    MAX_CAPTURED_ELEMENTS,
    BodyKey,
    body_captures,
    check_loops_end,
    check_tensor_data,
    copy_without,
    graph_inputs,
    graph_tensors,
    read_external_data,
    tensor_bytes,
)
from onnxmem.runtime.isolation import RUN_SECONDS, TimeLimitExceeded, available_memory
from onnxmem.runtime.settings import session_options, shared_arena
from onnxmem.shapes import ShapeInfo, infer_shapes

__all__ = [
    "IN_MEMORY", "NUMPY_DTYPES", "RUN_SECONDS", "apart_from_weights", "available_memory", "check_memory",
    "first_line", "foreign_dtype", "in_memory", "infer_measured_shapes", "make_session", "measure_shapes",
    "onnx_array", "onnx_bytes", "ort_value", "ort_values", "random_inputs", "run_bounded",
]

NUMPY_DTYPES: dict[int, Any] = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.UINT64: np.uint64,
    onnx.TensorProto.BOOL: np.bool_,
}


def make_session(model: onnx.ModelProto | bytes | str, *, providers: list[str] | None = None,
                 optimize: bool = False, profile_prefix: str | None = None,
                 initializers: Mapping[str, Any] | None = None, prepacking: bool = True,
                 shared: bool = False) -> Any:
    """An onnxruntime session (CPU unless ``providers`` says otherwise). ``initializers``: OrtValues
    of the main graph's initializers that ``model`` marks external (:func:`apart_from_weights`),
    which the session takes as they are (``SessionOptions.add_external_initializers``).
    ``prepacking=False``: kernels keep constant weights as they are (``session.disable_prepacking``),
    so each node computes what it computes in a session of its own with the weights bound as inputs.
    ``shared``: its CPU memory comes from the process's arena (:func:`shared_arena`)."""
    import onnxruntime as ort

    from onnxmem.runtime.isolation import end_run, start_run

    data: Any = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    options = session_options(optimize, profile_prefix)
    if not prepacking:
        options.add_session_config_entry("session.disable_prepacking", "1")
    if initializers:
        options.add_external_initializers(list(initializers), list(initializers.values()))
    if shared:
        shared_arena(options, "cpu")
    start_run("onnxruntime's loading of the model")
    try:
        return ort.InferenceSession(data, sess_options=options, providers=providers or ["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        fix = standins.no_kernel_fix(str(exc), model.opset_import) if isinstance(model, onnx.ModelProto) else ""
        raise RuntimeBackendError(f"onnxruntime cannot load the model: {first_line(exc)}{fix}") from None
    finally:
        end_run()


#: the location an initializer handed over in memory (:func:`apart_from_weights`) names; never read
IN_MEMORY = "onnxmem-in-memory"
#: the initializers :func:`apart_from_weights` hands over: floating-point ones of at least
#: ``APART_BYTES`` (onnxruntime's shape inference reads the values of shapes, axes and indices,
#: which must stay in the graph; it reads no large floating-point tensor)
APART_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE})
APART_BYTES = 1024


def in_memory(name: str, arr: Any) -> onnx.TensorProto | None:
    """The initializer ``name`` marked external at :data:`IN_MEMORY`, with ``arr``'s type and dims
    but none of its bytes, when ``arr`` is handed to onnxruntime apart from the model (a numpy
    array of :data:`APART_TYPES` of at least :data:`APART_BYTES`); else ``None``."""
    if not isinstance(arr, np.ndarray) or arr.nbytes < APART_BYTES:
        et = None
    else:
        et = next((t for t in APART_TYPES if NUMPY_DTYPES[t] is arr.dtype.type), None)
    if et is None:
        return None
    stub = onnx.TensorProto(name=name, data_type=et, dims=arr.shape, data_location=onnx.TensorProto.EXTERNAL)
    stub.external_data.add(key="location", value=IN_MEMORY)
    return stub


def ort_values(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """OrtValues over ``arrays`` (host memory, no copy of a C-ordered array: :func:`ort_value`) for
    :func:`make_session`'s ``initializers``; keep them while the session lives."""
    return {n: ort_value(a) for n, a in arrays.items()}


def foreign_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one numpy lacks, of ``ml_dtypes`` (bfloat16, float8, int4...: the
    arrays ONNX gives values of those types), which onnxruntime's numpy functions refuse."""
    return dtype.type.__module__ != "numpy"


def onnx_bytes(arr: np.ndarray) -> np.ndarray:
    """The bytes of ``arr`` in ONNX's layout, as a flat uint8 array (a view where numpy has its type;
    int4 and uint4 packed two to a byte)."""
    if not foreign_dtype(arr.dtype):
        return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return np.frombuffer(onnx.numpy_helper.from_array(np.ascontiguousarray(arr)).raw_data, np.uint8)


def onnx_array(elem_type: int, shape: Sequence[int], raw: bytes | np.ndarray) -> np.ndarray:
    """The array of ONNX element type ``elem_type`` and ``shape`` whose bytes in ONNX's layout
    are the first of ``raw`` (:func:`onnx_bytes` undone)."""
    used = tensor_bytes(elem_type, [int(d) for d in shape])
    t = onnx.TensorProto(data_type=elem_type, dims=[int(d) for d in shape], raw_data=bytes(raw[:used]))
    return onnx.numpy_helper.to_array(t)


def ort_value(arr: np.ndarray, device: str = "cpu") -> Any:
    """An OrtValue of ``arr`` on ``device`` (its first one): over the array's own bytes on the host
    where numpy has its element type (no copy of a C-ordered array), else a copy in onnxruntime's
    own host memory, in ONNX's layout (bfloat16, float8, int4 and uint4 packed two to a byte:
    numpy holds those as ``ml_dtypes`` arrays, which ``ortvalue_from_numpy`` refuses; a kernel
    on the device gets it copied there by onnxruntime)."""
    import ctypes

    import onnxruntime as ort

    arr = np.require(arr, requirements="C")  # a 0-d array stays 0-d
    if not foreign_dtype(arr.dtype):
        return ort.OrtValue.ortvalue_from_numpy(arr, device, 0)
    raw = onnx_bytes(arr).tobytes()
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), onnx.helper.np_dtype_to_tensor_dtype(arr.dtype),
                                                      "cpu", 0)
    if raw:
        ctypes.memmove(value.data_ptr(), raw, len(raw))
    return value


def apart_from_weights(model: onnx.ModelProto, weights: Mapping[str, np.ndarray]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``model`` without the bytes of the main graph's large floating-point initializers
    (:func:`in_memory`) that ``weights`` holds as numpy arrays, and those arrays:
    ``(model, {name: array})``.

    Each such initializer keeps its name, type and dims and is marked external at
    :data:`IN_MEMORY`; give the arrays' OrtValues (:func:`ort_values`) to :func:`make_session`
    (``initializers``), which hands them to onnxruntime, so a large model's weights are neither
    copied nor serialized again. Other initializers (small ones, integers, strings, bodies', and
    those only a body reads) stay in the graph.
    """
    # only what a main-graph node reads: onnxruntime cannot replace an initializer that its graph
    # resolution has moved into a subgraph that reads it, or dropped as unread
    read = {name for node in model.graph.node for name in node.input}
    stubs = {}
    for init in model.graph.initializer:
        if init.name not in read:
            continue
        stub = in_memory(init.name, weights.get(init.name))
        if stub is not None and stub.data_type == init.data_type and stub.dims == init.dims:
            stubs[init.name] = stub
    m = copy_without(model, ("initializer",))
    for init in model.graph.initializer:
        m.graph.initializer.add().CopyFrom(stubs.get(init.name, init))
    return m, {n: weights[n] for n in stubs}


def check_memory(size: int, device: str, what: str, *, fix: str, slack: int = 0) -> None:
    """Raise a one-line error when ``what`` (``size`` bytes, plus ``slack``) cannot be allocated on ``device`` now."""
    have = available_memory(device)
    if have is not None and size + slack > have:
        where = "free on the GPU" if device == "cuda" else "of host memory available"
        raise RuntimeBackendError(
            f"{what} of {size} B ({size / 2**30:.2f} GiB) does not fit in the {have} B "
            f"({have / 2**30:.2f} GiB) {where}; {fix}"
        )


def random_inputs(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], seed: int = 0,
                  given: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Seeded random data for every real graph input, at the given shapes.

    Floats are uniform in [-1, 1); integers in [0, 4) so that they are valid
    indices, token ids and shape values for most models. ``given``: values for
    some inputs (``--inputs``, checked by :func:`onnxmem.runtime.inputs.check_inputs`),
    used as they are; the draws for the others do not depend on them.
    """
    given = given or {}
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    need = 0
    for vi in model.graph.input:
        if vi.name not in inits and vi.name in shapes and vi.name not in given:
            # the value and the float64 draw it is made from; dims past 2^40 are refused here
            et = vi.type.tensor_type.elem_type
            if len(shapes[vi.name]) > 64:  # numpy's most dims: no array of it can be made
                raise ShapeError(f"input {show_name(vi.name)} has rank {len(shapes[vi.name])}, past the 64 dims "
                                 "of a numpy array, which onnxruntime takes inputs as: the model cannot run "
                                 "here (plan and verify --static-only run none)")
            need += tensor_bytes(et, shapes[vi.name], vi.name) + 8 * math.prod(shapes[vi.name])
    check_memory(need, "cpu", "the random graph inputs", fix="give smaller input shapes (--dim, --input-shape)")
    out: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if vi.name in given:
            out[vi.name] = np.asarray(given[vi.name])
            continue
        et = vi.type.tensor_type.elem_type
        if et not in NUMPY_DTYPES:
            raise ShapeError(f"input {show_name(vi.name)} has a dtype onnxmem cannot generate data for; "
                             "pass --inputs")
        shape = shapes[vi.name]
        dt = NUMPY_DTYPES[et]
        if np.issubdtype(dt, np.floating):
            out[vi.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dt)
        elif dt is np.bool_:
            out[vi.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        else:
            out[vi.name] = rng.integers(0, 4, size=shape).astype(dt)
    return out


def load_with_weights(model: onnx.ModelProto, model_path: str | os.PathLike[str] | None) -> onnx.ModelProto:
    """A copy of ``model`` with its external weights read from disk.

    The one function that reads weights: every reference is checked first, by
    the same rules ``load_model`` applies (``model.check_external_data``), and
    a bad one is a ``ModelError`` that names the tensor.
    """
    has_external = any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in graph_tensors(model)
    )
    if has_external and model_path is None:
        raise ShapeError("the model keeps weights in external files; give its path")
    # the inline tensors (and every tensor's dims); read_external_data holds each external one to
    # its reference's length, which check_external_data holds to the tensor's dtype and dims
    check_tensor_data(model)
    if not has_external:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        return m
    return read_external_data(model, Path(str(model_path)).parent)


def load_weights(model: onnx.ModelProto,
                 model_path: str | os.PathLike[str] | None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """:func:`load_with_weights`, but the main graph's external floating-point initializers are read
    straight into numpy arrays: ``(model, {name: array})``. Those a main-graph node reads (and that
    :func:`apart_from_weights` takes) are marked external at :data:`IN_MEMORY` in ``model``; give
    the arrays to whatever runs it (:func:`onnxmem.runtime.folding.compute_weights`'s ``read``)."""
    if model_path is None or not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        return load_with_weights(model, model_path), {}
    check_tensor_data(model)
    arrays: dict[str, np.ndarray] = {}
    read = read_external_data(model, Path(str(model_path)).parent, arrays)
    full, taken = apart_from_weights(read, arrays)
    for t in full.graph.initializer:
        if t.name in arrays and t.name not in taken:  # one apart_from_weights leaves in the graph
            t.raw_data = arrays[t.name].tobytes()
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
    return full, arrays


def _input_shapes(model: onnx.ModelProto, dims: Mapping[str, int],
                  input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for name, declared in graph_inputs(model).items():
        if name in input_shapes:
            shapes[name] = tuple(input_shapes[name])
            continue
        sh: list[int] = []
        for axis, d in enumerate(declared or ()):
            if isinstance(d, int):
                sh.append(d)
            elif d is not None and d in dims:
                sh.append(dims[d])
            else:
                raise ShapeError(
                    f"input {show_name(name)} has unbound dim {show_name(d or f'axis {axis}')}; pass --dim "
                    f"{one_line(d or 'NAME')}=N or --input-shape {one_line(name)}=D1xD2..."
                )
        shapes[name] = tuple(sh)
    return shapes


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value onnx's inference can type (shapes may stay unknown)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]
    try:
        m = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - keep what the file declares
        pass
    g = m.graph
    types = {i.name: i.data_type for i in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def run_bounded(sess: Any, names: list[str] | None, feeds: Mapping[str, Any], why: str,
                seconds: float | None = None, *, as_ort_values: bool = False) -> list[Any]:
    """``sess.run(names, feeds)``, stopped after ``seconds`` (default: the time limit of
    :func:`onnxmem.runtime.isolation.run_limits`); any failure is one line naming ``why``.
    ``as_ort_values``: ``feeds`` are OrtValues and so are the results (``run_with_ort_values``:
    no copy into numpy arrays).

    The run is announced to :mod:`onnxmem.runtime.isolation` (:func:`~onnxmem.runtime.isolation.start_run`),
    so a crash or a run that ignores the stop is named in the parent's message."""
    import threading

    import onnxruntime as ort

    import onnxmem.runtime.isolation as isolation

    seconds = isolation.current_limits().seconds if seconds is None else seconds
    what = f"the run of the model {why}"
    isolation.start_run(what)
    options = ort.RunOptions()
    timer = threading.Timer(seconds, lambda: setattr(options, "terminate", True))
    timer.daemon = True
    token = isolation.thread_token()  # another thread may stop this run (a run beside whose values are not wanted)
    if token is not None:
        token.attach(options)
    timer.start()
    try:
        if as_ort_values:
            return list(sess.run_with_ort_values(names, feeds, options))
        return list(sess.run(names, feeds, options))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        if options.terminate and token is not None and token.stopped:
            raise RuntimeBackendError(f"{what} was stopped: its values were no longer wanted") from None
        if options.terminate:
            raise isolation.timed_out(what, seconds) from None
        raise RuntimeBackendError(f"onnxruntime failed to run the model {why}: {one_line(first_line(exc))}") from None
    finally:
        timer.cancel()
        if token is not None:
            token.detach()
        isolation.end_run()


#: a C++ source location in an onnxruntime message: ``path/file.h:91 namespace::function(arguments)``
_SOURCE_LOCATION = re.compile(r"(?<!\S)\S+\.(?:h|hpp|cc|cpp|cu|cuh):\d+\s+[\w:~<>,*& ]*?\([^()]*\)(?:\s*const)?")


def first_line(exc: BaseException, width: int = 400) -> str:
    """An exception's message as one line (its type when it has none), at most ``width`` characters.

    onnxruntime puts the facts on later lines (``index: 0 Got: 2 Expected:
    1``), so the lines are joined, runs of spaces made one, and the C++
    source location it names (``/onnxruntime_src/...h:91
    onnxruntime::ReshapeHelper::ReshapeHelper(...)``) is left out. A longer
    message is cut at the last space before ``width`` and ends in ``...``:
    never in the middle of a word.

    >>> first_line(ValueError("Got invalid dimensions\\n index: 0 Got: 2"), width=30)
    'Got invalid dimensions ...'
    """
    text = cut_words(_SOURCE_LOCATION.sub(" ", str(exc)), width)
    return text or type(exc).__name__


def measure_shapes(
    model: onnx.ModelProto,
    *,
    model_path: str | os.PathLike[str] | None = None,
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    seed: int = 0,
    inputs: Mapping[str, np.ndarray] | None = None,
    values: dict[str, np.ndarray] | None = None,
) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Run the model once on random inputs (``inputs``: the values of some, as given);
    ``{name: (elem_type, shape)}`` of every node output.

    ``values``, where given, receives the values of the run's small integer
    tensors (at most ``MAX_CAPTURED_ELEMENTS`` elements) that subgraph bodies
    read from the main graph, for sizing the bodies (both branches of an If)."""
    from onnxmem.runtime.isolation import run_isolated

    check_loops_end(model.graph)  # a Loop that never ends: no run, rather than one stopped at --time-limit
    out, captured = run_isolated(_measure, model, model_path=model_path, dims=dims, input_shapes=input_shapes,
                                 seed=seed, inputs=inputs, capture=values is not None)
    if values is not None:
        values.update(captured)
    return out


def _measure(
    model: onnx.ModelProto,
    *,
    model_path: str | os.PathLike[str] | None,
    dims: Mapping[str, int] | None,
    input_shapes: Mapping[str, tuple[int, ...]] | None,
    seed: int,
    inputs: Mapping[str, np.ndarray] | None,
    capture: bool,
) -> tuple[dict[str, tuple[int, tuple[int, ...]]], dict[str, np.ndarray]]:
    """:func:`measure_shapes` in the command's onnxruntime process: the shapes, and the values
    of the small integer tensors bodies read (when ``capture``)."""
    full = load_with_weights(model, model_path)
    given = {k: tuple(np.shape(v)) for k, v in (inputs or {}).items()}
    shapes = _input_shapes(full, dims or {}, {**(input_shapes or {}), **given})
    feeds = random_inputs(full, shapes, seed, given=inputs)
    g = full.graph
    elem_types = _element_types(full)
    have = {o.name for o in g.output}
    base = onnx.ModelProto()
    base.CopyFrom(full)
    del base.graph.value_info[:]
    untyped = False
    for node in g.node:
        for o in node.output:
            if not o or o in have:
                continue
            added = g.output.add()
            added.name = o
            have.add(o)
            if elem_types.get(o):
                added.type.tensor_type.elem_type = elem_types[o]
            else:
                # a value onnx's inference cannot type (after an op it has no schema for, such as
                # the com.microsoft ops of a graph onnxruntime optimized): an output declared
                # without a type, which onnxruntime types from its own inference
                untyped = True
    del g.value_info[:]
    try:
        sess = make_session(full)
    except RuntimeBackendError:
        if not untyped:
            raise
        sess = make_session(base)
    names = [o.name for o in sess.get_outputs()]
    try:
        values_run = run_bounded(sess, names, feeds, "to measure shapes")
    except RuntimeBackendError as exc:
        random = sorted(set(feeds) - set(inputs or {}))
        if not random or isinstance(exc, TimeLimitExceeded):
            raise
        raise RuntimeBackendError(
            f"{exc}; inputs {', '.join(show_name(n) for n in random)} had seeded random values: "
            "if the model needs real ones, give them with --inputs FILE.npz"
        ) from None
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    for name, val in list(zip(names, values_run)) + list(feeds.items()):
        if isinstance(val, np.ndarray) and val.dtype != object:
            et = int(onnx.helper.np_dtype_to_tensor_dtype(val.dtype))
            out[name] = (et, tuple(int(d) for d in val.shape))
    values: dict[str, np.ndarray] = {}
    if capture:
        captured = body_captures(g)
        for name, val in list(zip(names, values_run)) + list(feeds.items()):
            if (name in captured and isinstance(val, np.ndarray) and val.dtype.kind in "iub"
                    and val.size <= MAX_CAPTURED_ELEMENTS):
                values[name] = np.array(val)
    return out, values


def infer_measured_shapes(
    model: onnx.ModelProto,
    *,
    model_path: str | os.PathLike[str] | None = None,
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    seed: int = 0,
    strict_dims: bool = True,
    inputs: Mapping[str, np.ndarray] | None = None,
    excluded: frozenset[BodyKey] = frozenset(),
    max_trips: int | None = None,
) -> ShapeInfo:
    """:func:`onnxmem.shapes.infer_shapes` with the shapes of one run of the model.

    The model runs once in onnxruntime on seeded random inputs, or the values ``inputs`` gives
    (its weights are read then); every intermediate's real shape is used, which is the only way
    to size values whose shapes depend on data.
    """
    values: dict[str, np.ndarray] = {}
    measured = measure_shapes(model, model_path=model_path, dims=dims, input_shapes=input_shapes, seed=seed,
                              inputs=inputs, values=values)
    return infer_shapes(model, dims=dims, input_shapes=input_shapes, measured=measured, strict_dims=strict_dims,
                        measured_values=values, excluded=excluded, max_trips=max_trips)
