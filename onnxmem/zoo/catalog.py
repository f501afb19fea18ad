"""The zoo's catalogue: which models a zoo holds and how to bind their shapes.

A zoo is a folder with a ``catalog.json`` (written by ``tools/build_zoo.py`` through
``write_catalog``), a ``catalog.json`` itself, a folder of ``.onnx`` files, one ``.onnx``
file, ``onnx:NAME`` (a model of the onnx wheel), or a list file with one model per line::

    # comment
    models/resnet.onnx  batch=4                  # bind the symbolic dim 'batch' (--dim)
    models/detector.onnx  image=1x3x640x640      # pin input 'image' (--input-shape)
    models/vad.onnx  shape:sr=  shape:h=2x1x64   # 'shape:' pins any rank, '=' alone a scalar
    models/vad.onnx  input=1x512 inputs:sr16k.npz branch:If_0=then measure-shapes
    onnx:squeezenet

After the path, each word is ``NAME=N`` (a positive integer: binds the symbolic dim NAME),
``NAME=D1xD2[x...]`` (two or more positive integers joined by ``x``: pins the shape of input
NAME), ``shape:NAME=...`` (pins an input's shape of any rank, ``shape:NAME=`` for a
scalar), or one of the model's planning options (:class:`ModelOptions`): ``inputs:FILE.npz``
(``--inputs``), ``branch:IF=then|else`` (``--branch``, repeatable) and ``measure-shapes``
(``--measure-shapes``). A catalogue entry carries the same as ``"dims"``, ``"input_shapes"``,
``"input_values"`` (the ``.npz`` path), ``"branch"`` (``{IF: "then"|"else"}``) and ``"measure_shapes"`` (a
boolean). Relative paths are relative to the list's folder; an ``.npz`` file must lie inside
it once links resolve, and it is read as hostile, like ``--inputs``. Names cannot hold spaces.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from onnxmem.core.errors import OnnxmemError, one_line, show_name
from onnxmem.core.fileio import loads_json, write_text_atomic
from onnxmem.model import MAX_DIM, initializers, tensor_bytes

__all__ = [
    "LIGHT_MODELS",
    "ModelOptions",
    "ZooModel",
    "describe_inputs",
    "describe_model",
    "check_model_name",
    "light_model_path",
    "load_zoo",
    "parse_list_line",
    "write_catalog",
]

#: the models that ship inside the onnx wheel (``onnx/backend/test/data/light``)
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

#: the prefix of a list-file word that pins an input shape of any rank
SHAPE_PREFIX = "shape:"


#: the prefix of a list-file word that names the model's ``--inputs`` file
INPUTS_PREFIX = "inputs:"
#: the prefix of a list-file word that chooses an If's branch (``--branch``)
BRANCH_PREFIX = "branch:"
#: the list-file word that turns ``--measure-shapes`` on for its model
MEASURE_WORD = "measure-shapes"
#: the prefix of a list-file word that bounds its model's growing Loops (``--max-trips``)
TRIPS_PREFIX = "max-trips:"
#: the catalogue keys of a model's own options (besides ``name`` and ``file``)
#: (``inputs`` there is the builder's description of the graph inputs, so the values' file is
#: ``input_values``)
OPTION_KEYS = ("dims", "input_shapes", "input_values", "branch", "measure_shapes", "max_trips")


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """A model's own planning options in a list or catalogue, beside its shapes.

    ``inputs``: the ``.npz`` file of graph input values (``--inputs``), resolved inside the
    list's folder, and ``values`` its arrays (read when the zoo is loaded); ``branches``:
    ``{If path: "then_branch"|"else_branch"}`` (``--branch``); ``measure_shapes``
    (``--measure-shapes``); ``max_trips`` (``--max-trips``). The command line's flags add to
    these (its ``--branch`` wins for the same If, its ``--max-trips`` over the model's);
    ``--measure-shapes`` there turns it on for every model.
    """

    inputs: Path | None = None
    values: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    branches: dict[str, str] = field(default_factory=dict)
    measure_shapes: bool = False
    max_trips: int | None = None

    def describe(self) -> dict[str, Any]:
        """The options given, for the results (``{}`` for none)."""
        out: dict[str, Any] = {}
        if self.inputs is not None:
            out["inputs"] = self.inputs.name
        if self.branches:
            out["branch"] = dict(self.branches)
        if self.measure_shapes:
            out["measure_shapes"] = True
        if self.max_trips is not None:
            out["max_trips"] = self.max_trips
        return out


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One model of a zoo: where it is, and the shape binding to plan it with.

    ``dims`` binds symbolic dims (``--dim``); ``input_shapes`` pins graph inputs'
    shapes (``--input-shape``); ``info`` keeps the catalogue's other fields;
    ``options`` the model's own planning options.
    """

    name: str
    path: Path
    dims: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    options: ModelOptions = field(default_factory=ModelOptions)


def light_model_path(name: str) -> Path:
    """Path of one of the models that ship inside the onnx wheel, e.g. ``resnet50``."""
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    path = root / f"light_{name}.onnx"
    if not path.is_file():
        raise OnnxmemError(
            f"onnx wheel model {show_name(name)} not found at {show_name(str(path))}; the installed onnx package "
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


def describe_model(model: onnx.ModelProto) -> dict[str, Any]:
    """The catalogue fields that come from the model itself: inputs, symbolic dims, node
    count and the bytes of its initializers (at every graph level)."""
    inputs, symbols = describe_inputs(model)
    weights = sum(tensor_bytes(t.data_type, t.dims, t.name) for t in initializers(model.graph))
    return {"inputs": inputs, "symbolic_dims": symbols, "nodes": len(model.graph.node),
            "weights_bytes": weights}


def write_catalog(path: str | os.PathLike[str], entries: Sequence[Mapping[str, Any]],
                  order: Sequence[str], meta: Mapping[str, Any]) -> None:
    """Merge ``entries`` into the catalogue at ``path`` (by name) and write it atomically.

    Entries already in the file and not in ``entries`` are kept; the models are written in
    ``order`` and names not in ``order`` are dropped. ``meta`` goes before the models.
    """
    target = Path(path)
    merged: dict[str, Mapping[str, Any]] = {}
    if target.exists():
        merged = {e["name"]: e for e in _catalog_entries(target)}
    for e in entries:
        merged[e["name"]] = e
    rank = {name: i for i, name in enumerate(order)}
    models = sorted((e for e in merged.values() if e["name"] in rank), key=lambda e: rank[e["name"]])
    text = json.dumps({"schema_version": 1, **meta, "models": models}, indent=2) + "\n"
    write_text_atomic(target, text)


def load_zoo(source: str | os.PathLike[str], only: Sequence[str] = ()) -> list[ZooModel]:
    """The models of a zoo, in catalogue order.

    ``source`` is any of the forms in this module's docstring. ``only`` keeps the models
    whose name matches one of its shell patterns.
    """
    src = Path(source)
    if src.is_dir():
        catalog = src / "catalog.json"
        if catalog.is_file():
            models = _read_catalog(catalog)
        else:
            where = f"zoo folder '{src}'"
            base = _resolved(src, where)
            models = [ZooModel(check_model_name(p.stem, where), _inside(base, p, where))
                      for p in sorted(src.rglob("*.onnx"))]
            if not models:
                raise OnnxmemError(
                    f"zoo folder '{src}' has no catalog.json and no .onnx files; build one "
                    "with 'make zoo' or point at a folder of models"
                )
    elif src.is_file() and src.suffix == ".json":
        models = _read_catalog(src)
    elif src.is_file() and src.suffix == ".onnx":
        models = [ZooModel(check_model_name(src.stem, f"zoo model {show_name(str(src))}"), src)]
    elif src.is_file():
        models = _read_list(src)
    elif str(source).startswith("onnx:"):
        name = str(source)[5:]
        models = [ZooModel(f"onnx_{name}", light_model_path(name))]
    else:
        raise OnnxmemError(f"zoo '{source}' does not exist; give a folder, catalog.json or list file")
    if only:
        models = [m for m in models if any(fnmatch.fnmatchcase(m.name, pat) for pat in only)]
        if not models:
            raise OnnxmemError(f"no model of zoo '{source}' matches {', '.join(only)}")
    return models


def _resolved(file: Path, where: str, what: str = "model file") -> Path:
    """``file`` with its links resolved; a missing file or a link loop is a one-line error."""
    try:
        return file.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        reason = "is a link loop" if isinstance(exc, RuntimeError) else "does not exist"
        raise OnnxmemError(f"{where}: {what} {show_name(str(file))} {reason}; "
                           "fix the path (relative paths are read from the list's folder)") from None


def _inside(base: Path, file: Path, where: str, what: str = "model file") -> Path:
    """A file found in (or named by) a zoo, refused unless it lies inside ``base`` (the folder,
    resolved) once links resolve.

    The folder's files are not named by the user one by one: a link in it that leads out
    (to ``/dev/zero``, to a file elsewhere) or loops is a one-line error, not a file to read.
    """
    target = _resolved(file, where, what)
    if not target.is_relative_to(base):
        raise OnnxmemError(f"{where}: {what} {show_name(str(file))} leads to {show_name(str(target))}, "
                           f"outside the zoo's folder; copy it into the folder")
    return target


def _resolve(base: Path, file: str, where: str) -> Path:
    """A model named by a list or catalogue line: relative to ``base``, links resolved, refused
    unless it lies inside ``base`` (a list or catalogue may come from anyone: it may not lead the
    run to files elsewhere)."""
    if file.startswith("onnx:"):
        return light_model_path(file[5:])
    if "\0" in file:
        raise OnnxmemError(f"{where}: model file {show_name(file)} holds a NUL byte; fix the path")
    return _inside(_resolved(base, where, "folder"), base / file, where)


#: a model's name: it names its plan file (``plans/NAME.json``) and its rows
_NAME = re.compile(r"[A-Za-z0-9_][^/\\]{0,199}")


def check_model_name(name: str, where: str) -> str:
    """``name`` if it can name a model of a zoo: 1 to 200 printable characters, no ``/`` or
    ``\\``, starting with a letter, a digit or ``_`` (so no ``..``, no hidden file, no spreadsheet
    formula); else a one-line error naming ``where``."""
    if not name.isprintable() or not _NAME.fullmatch(name):
        raise OnnxmemError(f"{where}: model name {show_name(name)} cannot name a model: a name is 1 to 200 "
                           "printable characters without '/' or '\\', starting with a letter, digit or '_'; "
                           "rename it")
    return name


def _catalog_entries(path: Path) -> list[dict[str, Any]]:
    try:
        entries = loads_json(path.read_text(), unique_keys=True)["models"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TypeError("'models' is not a list of objects")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OnnxmemError(f"zoo catalogue {show_name(str(path))} cannot be read: {one_line(str(exc))}; rebuild it with "
                           "'make zoo'") from None
    return entries


def _read_catalog(path: Path) -> list[ZooModel]:
    models = []
    for i, e in enumerate(_catalog_entries(path)):
        try:
            name = str(e["name"])
            where = f"zoo catalogue {show_name(str(path))} model {show_name(name)}"
            check_model_name(name, f"zoo catalogue {show_name(str(path))} model {i}")
            options = _entry_options(path.parent, where, e)
            models.append(ZooModel(
                name=name,
                path=_resolve(path.parent, str(e["file"]), where),
                dims={str(k): _size(v, where, f"key 'dims' entry {show_name(k)}")
                      for k, v in e.get("dims", {}).items()},
                info={k: v for k, v in e.items() if k not in ("name", "file", *OPTION_KEYS)},
                input_shapes={str(k): tuple(_size(d, where, f"key 'input_shapes' entry {show_name(k)}")
                                            for d in v)
                              for k, v in e.get("input_shapes", {}).items()},
                options=options,
            ))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OnnxmemError(
                f"zoo catalogue '{path}': model {i} is malformed ({type(exc).__name__}: {exc}); "
                "each needs 'name' and 'file', and 'dims'/'input_shapes' of integers"
            ) from None
    return models


def _size(value: Any, where: str, what: str) -> int:
    """A dim a list line or a catalogue entry gives: a positive integer up to ``MAX_DIM`` (2^40),
    onnxmem's limit (not a boolean, not a fraction to round)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_DIM:
        raise OnnxmemError(f"{where}: {what} holds {one_line(json.dumps(value)[:60])}, which is not "
                           "a positive integer up to 2^40; write the size the model runs at")
    return value


def _entry_options(folder: Path, where: str, entry: Mapping[str, Any]) -> ModelOptions:
    """The ``inputs``, ``branch`` and ``measure_shapes`` of a catalogue entry, checked."""
    measure = entry.get("measure_shapes", False)
    if not isinstance(measure, bool):
        raise OnnxmemError(f"{where}: key 'measure_shapes' is not a boolean; write true or false")
    branch = entry.get("branch", {})
    if not isinstance(branch, dict):
        raise OnnxmemError(f"{where}: key 'branch' is not an object; write {{\"IF\": \"then\"}} "
                           "(IF: the If node's path)")
    file = entry.get("input_values")
    if file is not None and not isinstance(file, str):
        raise OnnxmemError(f"{where}: key 'input_values' is not a path; write the .npz file's path, "
                           "relative to the catalogue's folder")
    trips = entry.get("max_trips")
    if trips is not None and (isinstance(trips, bool) or not isinstance(trips, int) or trips < 1):
        raise OnnxmemError(f"{where}: key 'max_trips' is not a positive integer; write the most iterations "
                           "a growing Loop runs, e.g. 64")
    return replace(_options(folder, where, file, [(str(k), str(v)) for k, v in branch.items()], measure,
                            key="input_values"), max_trips=trips)


def _options(folder: Path, where: str, file: str | None, branches: Sequence[tuple[str, str]],
             measure: bool, key: str = "inputs") -> ModelOptions:
    """A model's options from a list line or a catalogue entry: each ``(IF, then|else)`` pair
    checked, and the ``.npz`` file read (inside ``folder``, as hostile as ``--inputs``);
    ``key`` names the file's key in messages."""
    from onnxmem.graph import BRANCH_NAMES

    chosen: dict[str, str] = {}
    for path, branch in branches:
        if not path or branch not in BRANCH_NAMES:
            raise OnnxmemError(f"{where}: key 'branch' holds {show_name(f'{path}={branch}')}, which is not "
                               "IF=then or IF=else (IF: the If node's path)")
        if path in chosen:
            raise OnnxmemError(f"{where}: key 'branch' names If {show_name(path)} twice; keep one")
        chosen[path] = BRANCH_NAMES[branch]
    if file is None:
        return ModelOptions(branches=chosen, measure_shapes=measure)
    if not file:
        raise OnnxmemError(f"{where}: key '{key}' is empty; give the .npz file's path")
    from onnxmem.runtime.inputs import read_inputs  # numpy

    target = _inside(folder.resolve(), folder / file, where, f"key '{key}': file")
    values = read_inputs(target, what=f"{where}: key '{key}':")
    return ModelOptions(inputs=target, values=values, branches=chosen, measure_shapes=measure)


def _read_list(path: Path) -> list[ZooModel]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise OnnxmemError(f"zoo list '{path}' cannot be read: {exc}") from None
    models = []
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path}:{lineno}"
        rest = [w for w in words[1:] if not _is_option_word(w)]
        dims, shapes = parse_list_line(rest, where)
        options = _list_options(path.parent, where, [w for w in words[1:] if _is_option_word(w)])
        file = _resolve(path.parent, words[0], f"zoo list '{path}' line {lineno}")
        if not file.is_file():
            raise OnnxmemError(f"zoo list '{path}' line {lineno}: model file {show_name(str(file))} does not exist; "
                               "fix the path (relative paths are read from the list's folder)")
        name = f"onnx_{words[0][5:]}" if words[0].startswith("onnx:") else file.stem
        check_model_name(name, where)
        models.append(ZooModel(name, file, dims, input_shapes=shapes, options=options))
    return models


def _is_option_word(word: str) -> bool:
    return word == MEASURE_WORD or word.startswith((INPUTS_PREFIX, BRANCH_PREFIX, TRIPS_PREFIX))


def _list_options(folder: Path, where: str, words: Sequence[str]) -> ModelOptions:
    """The options of a list line's ``measure-shapes``, ``inputs:FILE``, ``branch:IF=B`` and
    ``max-trips:N`` words."""
    files = [w[len(INPUTS_PREFIX):] for w in words if w.startswith(INPUTS_PREFIX)]
    if len(files) > 1:
        raise OnnxmemError(f"{where}: key 'inputs' is given {len(files)} times; give one .npz file")
    if words.count(MEASURE_WORD) > 1:
        raise OnnxmemError(f"{where}: {MEASURE_WORD!r} is given twice; keep one")
    pairs = [w[len(BRANCH_PREFIX):].rpartition("=") for w in words if w.startswith(BRANCH_PREFIX)]
    trips = [w[len(TRIPS_PREFIX):] for w in words if w.startswith(TRIPS_PREFIX)]
    if len(trips) > 1:
        raise OnnxmemError(f"{where}: key 'max-trips' is given {len(trips)} times; keep one")
    if trips and not re.fullmatch(_POSITIVE, trips[0]):
        raise OnnxmemError(f"{where}: key 'max-trips' holds {show_name(trips[0])}, which is not a positive integer; "
                           "write max-trips:N")
    return replace(_options(folder, where, files[0] if files else None, [(p, b) for p, _, b in pairs],
                            MEASURE_WORD in words), max_trips=int(trips[0]) if trips else None)


_POSITIVE = r"[1-9][0-9]*"
_DIM_WORD = re.compile(rf"([^=]+)=({_POSITIVE})")
_SHAPE_WORD = re.compile(rf"([^=]+)=({_POSITIVE}(?:x{_POSITIVE})+)")
_ANY_SHAPE = re.compile(rf"([^=]+)=((?:{_POSITIVE}(?:x{_POSITIVE})*)?)")


def parse_list_line(words: Sequence[str], where: str
                    ) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """The dim bindings and input shapes of one list-file line's words after the path.

    ``where`` (``FILE:LINE``) starts every error.

    >>> parse_list_line(["batch=2", "x=1x3x8x8", "shape:n=4", "shape:sr="], "zoo.txt:1")
    ({'batch': 2}, {'x': (1, 3, 8, 8), 'n': (4,), 'sr': ()})
    """
    dims: dict[str, int] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for word in words:
        any_rank = word.startswith(SHAPE_PREFIX)
        body = word[len(SHAPE_PREFIX):] if any_rank else word
        dim = None if any_rank else _DIM_WORD.fullmatch(body)
        shape = (_ANY_SHAPE if any_rank else _SHAPE_WORD).fullmatch(body)
        if dim is not None:
            name = dim.group(1)
            if name in dims:
                raise OnnxmemError(f"{where}: dim {name!r} is bound twice; keep one {name}=N")
            dims[name] = _size(int(dim.group(2)), where, f"dim {name!r}")
        elif shape is not None:
            name = shape.group(1)
            if name in shapes:
                raise OnnxmemError(f"{where}: input {name!r} is given two shapes; keep one")
            value = shape.group(2)
            shapes[name] = tuple(_size(int(d), where, f"input {name!r}") for d in value.split("x")) if value else ()
        else:
            raise OnnxmemError(
                f"{where}: {word!r} is neither a dim binding nor an input shape; write "
                "NAME=N (a positive integer), NAME=D1xD2... or shape:NAME=D1... "
                "(shape:NAME= for a scalar)"
            )
    return dims, shapes
