"""The ``feeds`` family: the other files a user names beside a model, made hostile.

* ``--inputs FILE.npz`` (graph input values, which may decide shapes) into ``plan``, ``plan
  --measure-shapes``, ``verify`` and ``compare``: arrays of the wrong dtype, rank or dim, for
  no input or a hostile name, NaN and huge shape values, object arrays whose pickle would
  create the payload file if it were ever loaded, headers declaring more than the member holds,
  members that are no ``.npy``, names climbing out with ``..``, an entry of a later zip version
  or encrypted, the bytes of the archive flipped or cut; the file a FIFO, a folder or a link to
  ``/dev/zero`` (a link the user names is theirs to follow).
* a training graph's checkpoint (onnxruntime's artifact generator writes ``checkpoint`` beside
  it; ``--checkpoint PATH`` names another): its bytes flipped, cut, zeroed or spliced; the file
  found beside the model a FIFO, a folder, a link out of the folder or to ``/dev/zero`` (found,
  not named: never to be read); the flag naming a folder, a missing file, ``/dev/zero``, the
  model itself.
* the record a plan keeps of the given values that sized it (``extra.sizing_inputs``, a plan
  ``plan --inputs`` made of the reshape model) into ``verify --plan`` and ``compare --plan``:
  another value, dtype, shape or element count, values of no number type, a hostile name, an
  entry added for another input, the record dropped; kept as ``sizing_inputs`` or moved to
  ``extra.measured_inputs``, as a plan ``plan --measure-shapes --inputs`` made records them.
"""

from __future__ import annotations

import io
import os
import pickle
import random
import zipfile
from pathlib import Path
from typing import Any

from .common import MARK, SHIPPED_MODELS, Case
from .corpus import HOSTILE_NAMES, Corpus, _finish, _fix_seconds, build_dynamic
from .families import _write, damage

#: the commands of this family; the seed picks one
COMMANDS = ("plan", "measure", "verify", "compare")
#: the shipped training graph whose checkpoint is made hostile
TRAINING = SHIPPED_MODELS / "training" / "dynamo" / "mlp"


class _Payload:
    """Unpickled, it would create the payload file (``MARK``) in the working folder."""

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (MARK, "w"))


def build_reshape_input() -> Any:
    """``y = Relu(Reshape(x, shape))``, ``x: float[2, 32]``, ``shape: int64[3]`` a graph input:
    its value decides ``y``'s shape (``--inputs`` gives it, or a measured run)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "reshape_input",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return _finish(g, "reshape_input")


def _npz(arrays: dict[str, Any]) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """An ``.npy`` header declaring ``shape`` with no data after it."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (63 - (len(text) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin-1")


def _inputs_file(base: str, rng: random.Random) -> tuple[bytes, str]:
    """The bytes of a hostile ``.npz`` for model ``base`` (``reshape`` or ``dynamic``), and what it is."""
    import numpy as np

    good = ({"x": np.ones((2, 32), np.float32), "shape": np.array([2, 4, 8], np.int64)} if base == "reshape"
            else {"x": np.ones((3, 16), np.float32)})
    what = rng.choice(("valid", "dtype", "rank", "dim", "unknown_name", "hostile_name", "nan", "shape_value",
                       "object", "pickle_member", "declares_more", "not_npy", "dotdot", "flip", "truncate",
                       "big_endian", "fortran", "empty_zip", "scalar", "zip_version", "encrypted"))
    arrays = dict(good)
    if what == "dtype":
        arrays["x"] = arrays["x"].astype(rng.choice((np.float64, np.int32, np.bool_, np.complex64)))
    elif what == "rank":
        arrays["x"] = arrays["x"].reshape(-1)
    elif what == "dim":
        arrays["x"] = np.ones((2, rng.choice((0, 1, 31, 33))), np.float32)
    elif what == "unknown_name":
        arrays["ghost"] = np.zeros(3, np.float32)
    elif what == "hostile_name":
        arrays[rng.choice(HOSTILE_NAMES)[:200]] = np.zeros(3, np.float32)
    elif what == "nan":
        arrays["x"] = np.full(arrays["x"].shape, rng.choice((np.nan, np.inf, -np.inf)), np.float32)
    elif what == "shape_value":
        arrays["shape"] = np.array(rng.choice(([2, 4, 9], [-1, -1, 8], [0, 4, 8], [2**62, 1, 1], [-5, 4, 8],
                                               [2, 4, 8, 1])), np.int64)
    elif what == "object":
        buf = io.BytesIO()
        np.save(buf, np.array([_Payload()], dtype=object), allow_pickle=True)
        return _zip({**{f"{k}.npy": _one_npy(v) for k, v in good.items()}, "x.npy": buf.getvalue()}), what
    elif what == "pickle_member":
        return _zip({"x.npy": pickle.dumps(_Payload())}), what
    elif what == "declares_more":
        return _zip({"x.npy": _npy_header(rng.choice(((2**40,), (2**20, 2**20), (2, 32))))}), what
    elif what == "not_npy":
        return _zip({"x.txt": b"1 2 3", "shape.npy": b"not an array"}), what
    elif what == "dotdot":
        return _zip({"../outside/x.npy": _one_npy(good["x"]), "/etc/x.npy": _one_npy(good["x"])}), what
    elif what == "big_endian":
        arrays["x"] = arrays["x"].astype(">f4")
    elif what == "fortran":
        arrays["x"] = np.asfortranarray(arrays["x"])
    elif what == "empty_zip":
        return _zip({}), what
    elif what == "scalar":
        arrays["x"] = np.float32(1.0)
    data = bytearray(_npz(arrays))
    if what in ("zip_version", "encrypted"):  # an entry Python's zip reader refuses: a later version, a password
        central, local = data.index(b"PK\x01\x02"), data.index(b"PK\x03\x04")
        if what == "zip_version":
            data[central + 6:central + 8] = rng.choice((173, 999, 65535)).to_bytes(2, "little")
        else:
            data[central + 8] |= 1
            data[local + 6] |= 1
    elif what in ("flip", "truncate"):
        data, done = damage(data, what, rng)
        what = done
    return bytes(data), what


def _one_npy(array: Any) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _special(folder: Path, rel: str, kind: str) -> None:
    """Make ``folder/rel`` a FIFO, a folder or a link out of the model's folder."""
    p = folder / rel
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "folder":
        p.mkdir()
    elif kind == "link_out":
        os.symlink(os.path.relpath(folder / "outside" / "canary.bin", p.parent), p)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", p)


def _inputs_case(seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    base = rng.choice(("reshape", "dynamic"))
    model = build_reshape_input() if base == "reshape" else build_dynamic()
    _write(folder / "model", {"model.onnx": model.SerializeToString()})
    if rng.random() < 0.12:  # a link the user names is theirs to follow: no link out here
        what = rng.choice(("fifo", "folder", "dev_zero"))
        _special(folder / "model", "in.npz", what)
    else:
        data, what = _inputs_file(base, rng)
        (folder / "model" / "in.npz").write_bytes(data)
    extra = ["--inputs", "model/in.npz"] + (["--dim", "batch=3"] if base == "dynamic" else [])
    return _case(seed, command, folder, "model/model.onnx", extra, f"{base}: --inputs {what}", what == "dev_zero")


#: the reshape model's plan at ``shape = [2, 4, 8]`` (``plan --inputs``), made once per process
_SIZED: list[str] = []


def _sized_plan() -> dict[str, Any]:
    """The plan ``plan --inputs`` makes of :func:`build_reshape_input` at ``shape = [2, 4, 8]``:
    its ``extra.sizing_inputs`` records that value (timings fixed: a case is a function of its seed)."""
    import json

    if not _SIZED:
        import tempfile

        import numpy as np

        from onnxmem.planning.pipeline import PlanOptions, plan_model

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            path.write_bytes(build_reshape_input().SerializeToString())
            given = {"x": np.ones((2, 32), np.float32), "shape": np.array([2, 4, 8], np.int64)}
            data = json.loads(plan_model(str(path), PlanOptions(inputs=given)).plan.to_json())
        _fix_seconds(data)
        data["model"]["path"] = "model/model.onnx"
        _SIZED.append(json.dumps(data))
    return json.loads(_SIZED[0])


def _record_case(seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    """``verify``/``compare --plan`` of a plan whose record of the values that sized it is hostile:
    another value, dtype, shape, element count or name, values of no type, an entry added; the
    record kept as ``sizing_inputs`` or moved to ``measured_inputs`` (as a measuring run writes it:
    the plan's view is then measured at its values)."""
    import json

    data = _sized_plan()
    key = rng.choice(("sizing_inputs", "measured_inputs"))
    data["extra"][key] = data["extra"].pop("sizing_inputs")
    rec = data["extra"][key]
    how = rng.choice(("value", "dtype", "shape", "count", "name", "type", "added", "dropped", "kept"))
    entry = rec["shape"]
    if how == "value":
        entry["values"] = rng.choice(([2, 4, 9], [-1, -1, 8], [0, 4, 8], [2**62, 1, 1], [-5, 4, 8], [64, 1, 1]))
    elif how == "dtype":
        entry["dtype"] = rng.choice(("int32", "float32", "bool", "uint64", "object", "<U3", "V8", "int64\n", "x"))
    elif how == "shape":
        entry["shape"] = rng.choice(([], [3, 1], [1, 3], [2**40], [0], [3, 0]))
    elif how == "count":
        entry["values"] = rng.choice(([], [2, 4], list(range(64)), [1e300, 2, 3], [True, False, True]))
    elif how == "name":
        rec[rng.choice(HOSTILE_NAMES)] = rec.pop("shape")
    elif how == "type":
        entry["values"] = rng.choice(([[2], [4], [8]], ["2", "4", "8"], [None, 4, 8], {"a": 1}, "248"))
    elif how == "added":
        rec[rng.choice(("x", "y", "r", rng.choice(HOSTILE_NAMES)))] = dict(entry)
    elif how == "dropped":
        del data["extra"][key]
    _write(folder / "model", {"model.onnx": build_reshape_input().SerializeToString(),
                              "plan.json": json.dumps(data).encode()})
    return Case("feeds", seed, command, [command, "model/model.onnx", "--plan", "model/plan.json"], [], [],
                note=f"reshape: plan's {key} {how}", ok_codes=(3,))


def _checkpoint_case(seed: int, folder: Path, rng: random.Random, command: str) -> Case:
    name = rng.choice(("eval_model.onnx", "training_model.onnx"))
    files = {name: (TRAINING / name).read_bytes()}
    data = bytearray((TRAINING / "checkpoint").read_bytes())
    how = rng.choice(("flip", "flip", "truncate", "zero", "splice", "insert", "special", "flag"))
    extra: list[str] = []
    named = False
    note = f"{name}: checkpoint {how}"
    if how in ("flip", "truncate", "zero", "splice", "insert"):
        data, done = damage(data, how, rng)
        note = f"{name}: checkpoint {done}"
    if how != "special":
        files["checkpoint"] = bytes(data)
    _write(folder / "model", files)
    if how == "special":
        kind = rng.choice(("fifo", "folder", "link_out", "dev_zero"))
        _special(folder / "model", "checkpoint", kind)
        note += f" ({kind})"
    elif how == "flag":
        target = rng.choice(("outside", "model/missing", "/dev/zero", "model", "model/" + name))
        extra = ["--checkpoint", target]
        named = target == "/dev/zero"
        note += f" --checkpoint {target}"
    return _case(seed, command, folder, f"model/{name}", extra, note, named)


def _case(seed: int, command: str, folder: Path, model: str, extra: list[str], note: str, dev_zero: bool) -> Case:
    from .families import _model_args

    argv, outs, plans = _model_args(command, model, extra)
    return Case("feeds", seed, command, argv, outs, plans, note=note, ok_codes=(3,) if command in
                ("verify", "compare") else (), named_reads=["/dev/zero"] if dev_zero else [])


def feeds_case(corpus: Corpus, seed: int, folder: Path, rng: random.Random, _command: str) -> Case:
    del corpus  # the models are built here or shipped
    command = COMMANDS[seed % len(COMMANDS)]
    if command in ("verify", "compare") and rng.random() < 0.25:
        return _record_case(seed, folder, rng, command)
    if rng.random() < 0.6:
        return _inputs_case(seed, folder, rng, command)
    return _checkpoint_case(seed, folder, rng, command)

