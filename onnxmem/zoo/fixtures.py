"""The weight-free fixture format: writing it (``strip_weights``) and reading it back into a
runnable model (``fill_weights``, ``materialize``).

A weight-free fixture keeps a model's graph and drops the values of its large floating-point
initializers. Each such initializer keeps its name, type and dims, points into a data file that
is never written (``NAME.weights.bin``, at its own offset), and records the statistics of the
values it had in its ``doc_string``::

    onnxmem.fill mean=M std=S min=A max=B

Planning needs no weights. For execution, ``fill_weights`` draws normal(M, S) values clipped to
[A, B] from a generator seeded by the tensor's name, so a fixture fills the same way every
time. ``tools/build_zoo.py`` writes fixtures with ``strip_weights``; the zoo runner reads them
with ``materialize``.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from onnxmem.core.errors import OnnxmemError, show_name
from onnxmem.model import initializers, load_model

__all__ = [
    "FILL_PREFIX",
    "FIXTURE_MIN_BYTES",
    "fill_weights",
    "has_missing_weights",
    "materialize",
    "strip_weights",
]

#: the ``doc_string`` prefix of a weight-free initializer's statistics
FILL_PREFIX = "onnxmem.fill"
#: float initializers of at least this many bytes lose their values in a fixture
FIXTURE_MIN_BYTES = 1024
#: external-data offsets of stripped tensors are multiples of this
_ALIGN = 64
_STATS = ("mean", "std", "min", "max")
_FLOAT_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.DOUBLE,
})


def strip_weights(model: onnx.ModelProto, name: str) -> tuple[onnx.ModelProto, int]:
    """A weight-free copy of ``model`` and the number of bytes of values it dropped.

    Every floating-point initializer of ``FIXTURE_MIN_BYTES`` or more gets an external-data
    reference to ``NAME.weights.bin`` and its statistics in its ``doc_string``. Integer and
    boolean tensors (indices, shapes, masks) and tensors with non-finite values stay inline:
    their values matter.
    """
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    location = f"{name}.weights.bin"
    offset = 0
    removed = 0
    for tensor in initializers(stripped.graph):
        if tensor.data_type not in _FLOAT_TYPES:
            continue
        array = numpy_helper.to_array(tensor)
        if array.nbytes < FIXTURE_MIN_BYTES:
            continue
        values = array.astype(np.float64)
        if not np.all(np.isfinite(values)):
            continue
        tensor.doc_string = (
            f"{FILL_PREFIX} mean={values.mean():.6g} std={values.std():.6g} "
            f"min={values.min():.6g} max={values.max():.6g}"
        )
        for attr in ("float_data", "double_data", "int32_data"):
            tensor.ClearField(attr)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", location), ("offset", str(offset)),
                           ("length", str(array.nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        offset += math.ceil(array.nbytes / _ALIGN) * _ALIGN
        removed += array.nbytes
    return stripped, removed


def _parse_stats(tensor: onnx.TensorProto) -> dict[str, float]:
    """The fill statistics of a weight-free initializer: four finite numbers, ``std`` >= 0 and
    ``min`` <= ``max`` (a fixture comes from anyone: anything else is a one-line error)."""
    text = tensor.doc_string
    name = show_name(tensor.name)
    if not text.startswith(FILL_PREFIX):
        raise OnnxmemError(
            f"initializer {name} has external data but no '{FILL_PREFIX}' statistics "
            "to fill it from; put its data file beside the model"
        )
    words = dict(word.partition("=")[::2] for word in text[len(FILL_PREFIX):].split())
    try:
        stats = {k: float(words[k]) for k in _STATS}
    except (KeyError, ValueError):
        stats = {}
    if (not stats or not all(math.isfinite(v) for v in stats.values()) or stats["std"] < 0
            or stats["min"] > stats["max"]):
        raise OnnxmemError(
            f"initializer {name} has malformed statistics {show_name(text)}; expected "
            f"'{FILL_PREFIX} mean=M std=S min=A max=B' (finite numbers, S >= 0, A <= B): rebuild the fixture"
        )
    return stats


def has_missing_weights(model: onnx.ModelProto, base_dir: str | os.PathLike[str]) -> bool:
    """Whether some initializer points into an external-data file that is not there."""
    base = Path(base_dir)
    for tensor in initializers(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if not (base / location).is_file():
                return True
    return False


def fill_weights(model: onnx.ModelProto, seed: int = 0) -> int:
    """Give every weight-free initializer of ``model`` random values, in place.

    Values are normal(mean, std) clipped to [min, max] (the constant mean when std is 0),
    drawn from a generator seeded by ``seed`` and the tensor's name. Returns the number of
    tensors filled. Raises ``OnnxmemError`` for an external initializer without statistics.
    """
    filled = 0
    for tensor in initializers(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        stats = _parse_stats(tensor)
        shape = tuple(int(d) for d in tensor.dims)
        digest = hashlib.sha256(f"{seed}:{tensor.name}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        if stats["std"] == 0.0:
            values = np.full(shape, stats["mean"], dtype=np.float32)
        else:
            # clipped before the cast: a draw beyond float32's range (an attention mask's
            # lowest float, say) becomes the bound, with no overflow on the way
            drawn = np.clip(rng.normal(stats["mean"], stats["std"], size=shape), stats["min"], stats["max"])
            values = drawn.astype(np.float32)
        new = numpy_helper.from_array(values.astype(dtype), tensor.name)
        tensor.ClearField("external_data")
        tensor.data_location = onnx.TensorProto.DEFAULT
        tensor.raw_data = new.raw_data
        filled += 1
    return filled


def materialize(path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                seed: int = 0, name: str | None = None) -> Path:
    """A runnable copy of a weight-free model: ``out_dir/NAME.onnx`` + ``NAME.onnx.data``.

    NAME is ``name`` (a zoo passes the model's unique name, so two models whose files share a
    file name get a copy each), else the source's file name without ``.onnx``.

    Returns ``path`` itself when all its weights are present. The copy is reused when it is
    newer than the source. Both files are written under a temporary name and then renamed,
    the data first, so a reader never sees a model without its whole data file.
    """
    src = Path(path)
    model = load_model(src)  # the checked reader: a regular file of bounded size, checked references
    if not has_missing_weights(model, src.parent):
        return src
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / (f"{name}.onnx" if name is not None else src.name)
    data = dest.with_name(dest.name + ".data")
    if dest.is_file() and data.is_file() and dest.stat().st_mtime >= src.stat().st_mtime:
        return dest
    fill_weights(model, seed)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=out))
    try:
        onnx.save_model(model, str(tmp / dest.name), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data.name,
                        size_threshold=FIXTURE_MIN_BYTES)
        os.replace(tmp / data.name, data)
        os.replace(tmp / dest.name, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
