"""The model zoo: catalogues, weight-free fixtures, and the job that plans every model.

A zoo is a folder with a ``catalog.json`` (written by ``tools/build_zoo.py``), a folder of
``.onnx`` files, or a text file listing model paths. Each model is planned, and optionally
verified, in a worker process; one model's failure is recorded with its error and the job
goes on.

Weight-free fixtures (``models/zoo/*.onnx``) keep their graphs and drop the values of their
large floating-point initializers: each one points into a data file that does not exist and
records ``mean std min max`` of the original values in its ``doc_string``.
``fill_weights`` draws random values with those statistics (seeded by the tensor's name), so
that the model can run.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import re
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import OnnxmemError, PlanInvalid
from .fileio import write_text_atomic

__all__ = [
    "EXECUTORS",
    "FILL_PREFIX",
    "LIGHT_MODELS",
    "VERIFY_DEVICES",
    "Regression",
    "ZooModel",
    "ZooOptions",
    "ZooResult",
    "compare_baseline",
    "machine_info",
    "read_baseline",
    "results_csv",
    "results_markdown",
    "run_model",
    "run_zoo",
    "write_baseline",
    "write_results",
    "describe_inputs",
    "fill_weights",
    "has_missing_weights",
    "light_model_path",
    "load_zoo",
    "materialize",
]

FILL_PREFIX = "onnxmem.fill"

LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


def light_model_path(name: str) -> Path:
    """Path of one of the models that ship inside the onnx wheel, e.g. ``resnet50``."""
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    path = root / f"light_{name}.onnx"
    if not path.is_file():
        raise OnnxmemError(
            f"onnx wheel model '{name}' not found at '{path}'; the installed onnx package "
            f"ships {', '.join(sorted(p.stem[6:] for p in root.glob('light_*.onnx')))}"
        )
    return path


def describe_inputs(model: onnx.ModelProto) -> tuple[dict[str, list[int | str]], list[str]]:
    """Graph inputs that are not initializers, as ``{name: shape}``, and their symbolic dims.

    >>> m = onnx.helper.make_model(onnx.helper.make_graph([], "g",
    ...     [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3])], []))
    >>> describe_inputs(m)
    ({'x': ['batch', 3]}, ['batch'])
    """
    weights = {t.name for t in model.graph.initializer}
    inputs: dict[str, list[int | str]] = {}
    symbols: list[str] = []
    for value in model.graph.input:
        if value.name in weights:
            continue
        shape: list[int | str] = []
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            else:
                symbol = dim.dim_param or "?"
                shape.append(symbol)
                if symbol not in symbols:
                    symbols.append(symbol)
        inputs[value.name] = shape
    return inputs, symbols


# --------------------------------------------------------------------------- catalogue


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One model of a zoo: where it is, and the dimension binding to plan it with."""

    name: str
    path: Path
    dims: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def load_zoo(source: str | os.PathLike[str], only: Sequence[str] = ()) -> list[ZooModel]:
    """The models of a zoo, in catalogue order.

    ``source`` is a folder with ``catalog.json``, a ``catalog.json`` itself, a folder of
    ``.onnx`` files, a single ``.onnx`` file, or a text file with one model per line:
    ``PATH [DIM=VALUE ...]`` (``#`` starts a comment; relative paths are relative to the
    list's folder; ``onnx:NAME`` names a model of the onnx wheel). ``only`` keeps the models
    whose name matches one of its shell patterns.
    """
    src = Path(source)
    if src.is_dir():
        catalog = src / "catalog.json"
        if catalog.is_file():
            models = _read_catalog(catalog)
        else:
            models = [ZooModel(p.stem, p) for p in sorted(src.rglob("*.onnx"))]
            if not models:
                raise OnnxmemError(
                    f"zoo folder '{src}' has no catalog.json and no .onnx files; build one "
                    "with 'make zoo' or point at a folder of models"
                )
    elif src.is_file() and src.suffix == ".json":
        models = _read_catalog(src)
    elif src.is_file() and src.suffix == ".onnx":
        models = [ZooModel(src.stem, src)]
    elif src.is_file():
        models = _read_list(src)
    elif str(source).startswith("onnx:"):
        name = str(source)[5:]
        models = [ZooModel(f"onnx_{name}", light_model_path(name))]
    else:
        raise OnnxmemError(f"zoo '{source}' does not exist; give a folder, catalog.json or list file")
    if only:
        import fnmatch

        models = [m for m in models if any(fnmatch.fnmatchcase(m.name, pat) for pat in only)]
        if not models:
            raise OnnxmemError(f"no model of zoo '{source}' matches {', '.join(only)}")
    return models


def _resolve(base: Path, file: str) -> Path:
    if file.startswith("onnx:"):
        return light_model_path(file[5:])
    return (base / file).resolve() if not Path(file).is_absolute() else Path(file)


def _read_catalog(path: Path) -> list[ZooModel]:
    try:
        data = json.loads(path.read_text())
        entries = data["models"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OnnxmemError(f"zoo catalogue '{path}' cannot be read: {exc}") from exc
    models = []
    for e in entries:
        models.append(ZooModel(
            name=e["name"],
            path=_resolve(path.parent, e["file"]),
            dims={k: int(v) for k, v in e.get("dims", {}).items()},
            info={k: v for k, v in e.items() if k not in ("name", "file", "dims")},
        ))
    return models


def _read_list(path: Path) -> list[ZooModel]:
    models = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        dims: dict[str, int] = {}
        for word in words[1:]:
            m = re.fullmatch(r"([^=]+)=(\d+)", word)
            if not m:
                raise OnnxmemError(
                    f"{path}:{lineno}: '{word}' is not a dimension binding; write NAME=VALUE"
                )
            dims[m.group(1)] = int(m.group(2))
        file = _resolve(path.parent, words[0])
        name = f"onnx_{words[0][5:]}" if words[0].startswith("onnx:") else file.stem
        models.append(ZooModel(name, file, dims))
    return models


# --------------------------------------------------------------------------- weights


def has_missing_weights(model: onnx.ModelProto, base_dir: str | os.PathLike[str]) -> bool:
    """Whether some initializer points into an external-data file that is not there."""
    base = Path(base_dir)
    for tensor in _initializers(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            if not (base / location).is_file():
                return True
    return False


def fill_weights(model: onnx.ModelProto, seed: int = 0) -> int:
    """Give every weight-free initializer of ``model`` random values, in place.

    An initializer is weight-free when its data is external and its ``doc_string`` holds
    ``onnxmem.fill mean=M std=S min=A max=B``; it gets normal(M, S) values clipped to [A, B]
    (the constant M when S is 0), drawn from a generator seeded by ``seed`` and the tensor's
    name, so a model fills the same way every time. Returns the number of tensors filled.
    Raises ``OnnxmemError`` for an external initializer without statistics.
    """
    filled = 0
    for tensor in _initializers(model.graph):
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
            values = rng.normal(stats["mean"], stats["std"], size=shape).astype(np.float32)
            np.clip(values, stats["min"], stats["max"], out=values)
        array = values.astype(dtype)
        new = numpy_helper.from_array(array, tensor.name)
        tensor.ClearField("external_data")
        tensor.data_location = onnx.TensorProto.DEFAULT
        tensor.raw_data = new.raw_data
        filled += 1
    return filled


def _parse_stats(tensor: onnx.TensorProto) -> dict[str, float]:
    text = tensor.doc_string
    if not text.startswith(FILL_PREFIX):
        raise OnnxmemError(
            f"initializer '{tensor.name}' has external data but no '{FILL_PREFIX}' statistics "
            "to fill it from; put its data file beside the model"
        )
    stats = dict(word.split("=", 1) for word in text[len(FILL_PREFIX):].split())
    return {k: float(stats[k]) for k in ("mean", "std", "min", "max")}


def _initializers(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    tensors = list(graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                tensors += _initializers(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    tensors += _initializers(g)
    return tensors


def materialize(path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                seed: int = 0) -> Path:
    """A runnable copy of a weight-free model: ``out_dir/NAME.onnx`` + ``NAME.onnx.data``.

    Returns ``path`` itself when all its weights are present. The copy is reused when it is
    newer than the source.
    """
    src = Path(path)
    model = onnx.load(str(src), load_external_data=False)
    if not has_missing_weights(model, src.parent):
        return src
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / src.name
    data = dest.with_name(dest.name + ".data")
    if dest.is_file() and data.is_file() and dest.stat().st_mtime >= src.stat().st_mtime:
        return dest
    fill_weights(model, seed)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    onnx.save_model(model, str(tmp), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    os.replace(tmp, dest)
    return dest


# --------------------------------------------------------------------------- the zoo job
