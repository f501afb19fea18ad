"""Hostile training checkpoints, each a real file beside a real training graph, read by the real
CLI: every one is a one-line error (exit 1, no traceback, no plan file) or a right plan.

The files are written by the hand-made flatbuffer writer of ``tests/test_checkpoint.py``; the
graphs are the committed dynamo exports (``models/training/dynamo/``): the MLP's Reshape target
``val_3`` ([64, 784] for its [64, 1, 28, 28] image) and SqueezeNet's Dropout ratio ``val_3``.
"""

from __future__ import annotations

import os
import shutil
import struct

import numpy as np
import pytest

from onnxmem.core.errors import ModelError
from onnxmem.model import read_checkpoint, small_values

from .helpers import make_model, vi
from .test_checkpoint import DYNAMO, MLP, _checkpoint, _cli, _copy_model, _Flat

_TYPES = {np.dtype("int64"): 7, np.dtype("int32"): 6, np.dtype("float32"): 1, np.dtype("float64"): 11,
          np.dtype("bool"): 9}


def _target(values: list[int], elem_type: int = 7, dims: list[int] | None = None) -> dict:
    """The MLP's Reshape target ``val_3`` as a checkpoint holds it."""
    fmt = {7: "q", 6: "i", 9: "?"}[elem_type]
    return {"name": "val_3", "type": elem_type, "dims": [len(values)] if dims is None else dims,
            "raw": struct.pack(f"<{len(values)}{fmt}", *values)}


def _refused(out: str, code: int, *says: str) -> None:
    assert code == 1 and out.count("\n") == 1 and all(s in out for s in says), out


def _shared_dims(count: int, rank: int) -> bytes:
    """A checkpoint of ``count`` parameters of distinct names whose tables all point to one dims
    vector of ``rank`` dims: a small file whose parameters, read in full, hold far more."""
    fb = _Flat()
    root, (_, state_at) = fb.table([("i", 2), ("ref", None)])
    struct.pack_into("<I", fb.b, 0, root)
    state, (trainable_at, frozen_at, _, _) = fb.table([("ref", None), ("ref", None), ("B", 0), ("B", 0)])
    fb.point(state_at, state)
    fb.point(frozen_at, fb.tables_vector(0)[0])
    vec, slots = fb.tables_vector(count)
    fb.point(trainable_at, vec)
    refs = []
    for i, slot in enumerate(slots):
        pos, (name_at, _, dims_at, _) = fb.table([("ref", None), None, ("ref", None), ("i", 1)])
        fb.point(slot, pos)
        fb.point(name_at, fb.bytes_vector(f"w{i}".encode(), text=True))
        refs.append(dims_at)
    dims = fb.bytes_vector(struct.pack(f"<{rank}q", *[3] * rank), 8)  # after the tables: offsets point forward
    for at in refs:
        fb.point(at, dims)
    return bytes(fb.b)


# ---------------------------------------------------------------- the reader's work is bounded by the file


def test_parameters_sharing_one_dims_vector_are_refused_before_they_multiply(tmp_path):
    data = _shared_dims(2000, 64)  # 2,000 x 64 dims read from a file of ~50 KB
    path = tmp_path / "checkpoint"
    path.write_bytes(data)
    with pytest.raises(ModelError) as err:
        read_checkpoint(path)
    text = str(err.value)
    assert "more bytes than the file's" in text and f"{len(data):,}" in text and "\n" not in text


def test_a_rank_past_numpys_limit_is_refused(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(_shared_dims(1, 1000))  # 1,000 dims of 3: a product of 1,585 bits for one tensor
    with pytest.raises(ModelError, match="has rank 1000, more than 64"):
        read_checkpoint(path)
    path.write_bytes(_shared_dims(1, 64))  # numpy's limit itself reads
    assert read_checkpoint(path).tensors[0].dims == (3,) * 64


# ---------------------------------------------------------------- values that would make the plan wrong


@pytest.mark.parametrize("target", [[32, 784], [128, 784], [0, 784], [1, 784]])
def test_a_reshape_target_of_another_element_count_is_refused(tmp_path, target):
    model = _copy_model(tmp_path, _checkpoint([_target(target)]))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    _refused(out, code, "Reshape node 'node_view'", "[64, 1, 28, 28] (50,176 elements)", f"into {target}",
             "'val_3'", "--checkpoint PATH")
    assert not (tmp_path / "plan.json").exists()


def test_a_reshape_target_of_the_same_element_count_plans(tmp_path):
    model = _copy_model(tmp_path, _checkpoint([_target([-1, 784])]))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    assert code == 0 and (tmp_path / "plan.json").exists(), out


def test_a_reshape_initializer_of_another_element_count_is_refused(tmp_path):
    import onnx
    from onnx import helper, numpy_helper

    target = numpy_helper.from_array(np.array([32, 784], np.int64), "t")
    model = make_model([helper.make_node("Reshape", ["x", "t"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                       [vi("x", [64, 784])], [vi("y", None)], [target])
    onnx.save(model, tmp_path / "m.onnx")
    code, out = _cli("plan", tmp_path / "m.onnx", "-o", tmp_path / "plan.json")
    _refused(out, code, "Reshape node 'r' makes 'x' of shape [64, 784]", "check the value of its target 't'")
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize("entry, says", [
    (_target([64, 784], 6), "is int32 [2], but the model's graph input of that name is int64 [2]"),
    (_target([64, 784], 7, [1, 2]), "is int64 [1, 2], but the model's graph input of that name is int64 [2]"),
    (_target([64, 784, 1]), "is int64 [3], but"),
    (_target([1, 1], 9), "is bool [2], but"),
    ({**_target([64, 784]), "type": 1}, "is float32 [2], but"),  # not a type whose value is read
    ({**_target([64, 784]), "type": 999}, "is element type 999 [2], but"),
])
def test_a_value_of_another_type_or_shape_than_the_graph_input_is_named(tmp_path, entry, says):
    model = _copy_model(tmp_path, _checkpoint([entry]))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    _refused(out, code, "parameter 'val_3' " + says, "--checkpoint PATH")
    assert not (tmp_path / "plan.json").exists()


def _dynamo(tmp_path, name: str, **over: np.ndarray):
    """The dynamo export ``name``'s training graph beside a checkpoint of its constants, ``over``
    replacing some."""
    ckpt = read_checkpoint(DYNAMO / name / "checkpoint")
    values = {**small_values(ckpt, [t.name for t in ckpt.tensors]), **over}
    shutil.copy(DYNAMO / name / "training_model.onnx", tmp_path / "training_model.onnx")
    (tmp_path / "checkpoint").write_bytes(_checkpoint(
        [{"name": n, "type": _TYPES[v.dtype], "dims": list(v.shape), "raw": v.tobytes()} for n, v in values.items()]))
    return tmp_path / "training_model.onnx"


@pytest.mark.parametrize("ratio", [np.nan, np.inf])
def test_a_ratio_that_is_not_a_finite_number_is_refused(tmp_path, ratio):
    model = _dynamo(tmp_path, "squeezenet", val_3=np.array(ratio, np.float32))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    _refused(out, code, f"parameter 'val_3' holds {ratio}, not a finite number")
    assert not (tmp_path / "plan.json").exists()


def test_a_finite_ratio_plans_and_is_recorded(tmp_path):
    from onnxmem.plans import read_plan

    model = _dynamo(tmp_path, "squeezenet", val_3=np.array(0.25, np.float32))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    assert code == 0, out
    assert read_plan(tmp_path / "plan.json").extra["checkpoint"]["values"]["val_3"]["values"] == [0.25]


def test_a_ratio_of_another_float_type_is_named(tmp_path):
    model = _dynamo(tmp_path, "squeezenet", val_3=np.array(0.5, np.float64))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    _refused(out, code, "parameter 'val_3' is float64 [], but the model's graph input of that name is float32 []")


def test_a_reshape_target_the_gradient_graph_contradicts_is_refused(tmp_path):
    """BERT's attention split [4, 128, 3, 4, 64] as [4, 128, 3, 2, 128]: the same elements, so
    the forward reshapes, but the gradient graph keeps [4, 128, 4, 64] as a constant, and its
    FusedMatMul then reads operands that do not multiply (onnxruntime-training's run refuses
    them); the X_grad name rule had sized its output from the forward value all the same."""
    model = _dynamo(tmp_path, "bert", val_12=np.array([4, 128, 3, 2, 128], np.int64))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    _refused(out, code, "FusedMatMul node 'node_matmul_23_Grad/FusedMatMul_1' reads 'getitem_66' [4, 2, 128, 128] "
             "and 'matmul_23_grad' [4, 4, 128, 64], which do not multiply")
    assert not (tmp_path / "plan.json").exists()


# ---------------------------------------------------------------- the format version


def _with_version(data: bytes, version: int) -> bytes:
    """``data`` (a real checkpoint) with its root table's ``version`` field (field 0) set to ``version``."""
    out = bytearray(data)
    root = struct.unpack_from("<I", out, 0)[0]
    vtable = root - struct.unpack_from("<i", out, root)[0]
    field = struct.unpack_from("<H", out, vtable + 4)[0]
    assert field, "the committed checkpoint writes its version"
    struct.pack_into("<i", out, root + field, version)
    return bytes(out)


@pytest.mark.parametrize("version", [0, 1, 3, 4, -1, 2**31 - 1])
def test_a_checkpoint_of_another_format_version_is_refused(tmp_path, version):
    data = (MLP / "checkpoint").read_bytes()
    assert read_checkpoint(MLP / "checkpoint").version == 2  # what onnxruntime-training 1.19.2 writes
    model = _copy_model(tmp_path, _with_version(data, version))
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    _refused(out, code, f"checkpoint '{tmp_path / 'checkpoint'}' is of format version {version}",
             "it reads version 2)", "onnxruntime-training 1.19", "--checkpoint PATH")
    assert not (tmp_path / "plan.json").exists()
    given = tmp_path / "given"  # given with --checkpoint: the same line, naming that file
    given.write_bytes(_with_version(data, version))
    code, out = _cli("plan", MLP / "training_model.onnx", "--checkpoint", given)
    _refused(out, code, f"checkpoint '{given}' is of format version {version}")


def test_a_checkpoint_of_the_version_the_reader_reads_plans(tmp_path):
    """Version 2, what onnxruntime-training writes and loads (version 1, which it no longer loads,
    is refused above), read from a copy beside a copy of the model."""
    model = _copy_model(tmp_path, _with_version((MLP / "checkpoint").read_bytes(), 2))
    assert read_checkpoint(tmp_path / "checkpoint").version == 2
    code, out = _cli("plan", model, "-o", tmp_path / "plan.json")
    assert code == 0 and (tmp_path / "plan.json").exists(), out


# ---------------------------------------------------------------- the file itself


def test_no_output_replaces_the_checkpoint_found_beside_the_model(tmp_path):
    model = _copy_model(tmp_path, (MLP / "checkpoint").read_bytes())
    code, out = _cli("plan", model, "-o", tmp_path / "checkpoint")
    _refused(out, code, "is the input file", "checkpoint", "choose another output path")
    assert (tmp_path / "checkpoint").read_bytes() == (MLP / "checkpoint").read_bytes()


def test_names_are_printed_escaped(tmp_path):
    model = _copy_model(tmp_path, _checkpoint([_target([64, 784], 7, [-1]) | {"name": "\x1b[31mred\nx"}]))
    code, out = _cli("plan", model)
    _refused(out, code, r"parameter '\x1b[31mred\nx' has a negative dim")
    assert "\x1b" not in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_folder_is_never_read_as_a_checkpoint(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, out = _cli("plan", MLP / "training_model.onnx", "--checkpoint", fifo)  # given: refused, not blocked on
    _refused(out, code, "is not a regular file (a device, FIFO or socket)")
    for make in (os.mkfifo, os.mkdir):  # beside the model: not read, so the shapes are unknown
        folder = tmp_path / make.__name__
        folder.mkdir()
        model = _copy_model(folder, None)
        make(folder / "checkpoint")
        code, out = _cli("plan", model)
        _refused(out, code, "depend on data")


def test_the_file_found_beside_the_model_is_read_without_following_a_link(tmp_path):
    """find_checkpoint looks before it reads: a link put in the file's place between the two is
    refused when the file is opened, not followed out of the model's folder."""
    link = tmp_path / "checkpoint"
    link.symlink_to(MLP / "checkpoint")
    with pytest.raises(ModelError) as err:
        read_checkpoint(link, links=False)
    assert "is a link, which onnxmem does not follow" in str(err.value) and "\n" not in str(err.value)
    assert read_checkpoint(link).tensors[0].name == "val_3"  # a link the user names is the user's choice
