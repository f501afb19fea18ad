"""Training checkpoints: the bounds-checked reader, the values it gives shape inference, the
checkpoint found beside a dynamo export's training graph, and the one-line errors.

The committed checkpoint ``models/training/dynamo/mlp/checkpoint`` was written by
onnxruntime's own ``save_checkpoint`` (``tools/build_training.py --dynamo``): the dynamo
exporter's Reshape target ``val_3`` = [64, 784] as a frozen int64 parameter. Tests that
generate artifacts or run the graphs need the training environment (``make training-env``:
onnxruntime-training, torch, onnxscript); they skip without it.
"""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import ModelError, RuntimeBackendError
from onnxmem.model import (
    find_checkpoint,
    load_model,
    read_checkpoint,
    recorded_values,
    small_values,
    with_values,
)
from onnxmem.planning.pipeline import PlanOptions, plan_model
from onnxmem.plans import read_plan
from onnxmem.runtime.training import no_kernel_error

from .conftest import MODELS

DYNAMO = MODELS / "training" / "dynamo"
CATALOG = json.loads((DYNAMO / "catalog.json").read_text())
BUILT = sorted(n for n, e in CATALOG.items() if "refused" not in e)
MLP = DYNAMO / "mlp"


def _cli(*args: object) -> tuple[int, str]:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, r.output


def _copy_model(tmp_path, checkpoint: bytes | None):
    """The dynamo MLP's training graph in a folder of its own, with ``checkpoint`` beside it."""
    shutil.copy(MLP / "training_model.onnx", tmp_path / "training_model.onnx")
    if checkpoint is not None:
        (tmp_path / "checkpoint").write_bytes(checkpoint)
    return tmp_path / "training_model.onnx"


# ---------------------------------------------------------------- the reader


def test_reader_reads_the_committed_checkpoint():
    ckpt = read_checkpoint(MLP / "checkpoint")
    assert ckpt.version == 2 and not ckpt.nominal
    [t] = ckpt.tensors
    assert (t.name, t.elem_type, t.dims, t.trainable) == ("val_3", 7, (2,), False)
    [(name, value)] = small_values(ckpt, ["val_3", "absent"]).items()
    assert name == "val_3" and value.dtype == np.int64 and value.tolist() == [64, 784]


def test_values_become_initializers_for_inference_only():
    model = load_model(MLP / "training_model.onnx")
    shaped = with_values(model, {"val_3": np.array([64, 784], np.int64)})
    assert "val_3" in {i.name for i in shaped.graph.initializer}
    assert "val_3" not in {i.name for i in model.graph.initializer}
    assert with_values(model, {}) is model


def test_recorded_values_take_only_constants():
    extra = {"checkpoint": {"values": {
        "a": {"dtype": "int64", "shape": [2], "values": [3, 4]},
        "ratio": {"dtype": "float32", "shape": [], "values": [0.25]},
        "f": {"dtype": "float32", "shape": [2], "values": [1.5, 2.5]},
        "i8": {"dtype": "int8", "shape": [1], "values": [1]},
        "long": {"dtype": "int64", "shape": [65], "values": list(range(65))},
        "bad": {"dtype": "int64", "shape": [3], "values": [1, 2]},
        "odd": "nonsense",
    }}}
    got = recorded_values(extra)
    assert list(got) == ["a", "ratio"] and got["a"].tolist() == [3, 4]
    assert got["ratio"].dtype == np.float32 and got["ratio"].shape == () and float(got["ratio"]) == 0.25
    assert recorded_values({}) == {} and recorded_values({"checkpoint": []}) == {}


@pytest.mark.parametrize("damage, rule", [
    (lambda b: b[:6], "no ODTC file identifier"),
    (lambda b: b[:4] + b"XXXX" + b[8:], "no ODTC file identifier"),
    (lambda b: struct.pack("<I", 10**6) + b[4:], "past the end of the file"),
    (lambda b: b[:-40], "past the end of the file"),
    (lambda b: b"", "no ODTC file identifier"),
])
def test_a_corrupted_checkpoint_is_one_line_naming_the_file(tmp_path, damage, rule):
    bad = tmp_path / "checkpoint"
    bad.write_bytes(damage((MLP / "checkpoint").read_bytes()))
    with pytest.raises(ModelError) as err:
        read_checkpoint(bad)
    text = str(err.value)
    assert "\n" not in text and str(bad) in text and rule in text and "--checkpoint PATH" in text


def test_any_damage_is_a_model_error_or_a_checkpoint():
    data = (MLP / "checkpoint").read_bytes()
    rng = np.random.default_rng(0)
    damaged = [data[:n] for n in range(len(data))]
    for _ in range(400):
        b = bytearray(data)
        for at in rng.integers(0, len(b), size=int(rng.integers(1, 4))):
            b[at] = int(rng.integers(0, 256))
        damaged.append(bytes(b))
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint"
        for b in damaged:
            path.write_bytes(b)
            try:
                ckpt = read_checkpoint(path)
            except ModelError as exc:
                assert "\n" not in str(exc)
                continue
            for t in ckpt.tensors:  # what it read is bounded by the file
                assert len(t.name) <= len(b) and (t.raw is None or len(t.raw) <= len(b))


def test_a_checkpoint_is_found_beside_the_model_only_as_a_regular_file(tmp_path):
    model = _copy_model(tmp_path, None)
    assert find_checkpoint(model) is None
    (tmp_path / "checkpoint").symlink_to(MLP / "checkpoint")
    assert find_checkpoint(model) is None  # a link is not followed
    (tmp_path / "checkpoint").unlink()
    (tmp_path / "checkpoint").write_bytes((MLP / "checkpoint").read_bytes())
    assert find_checkpoint(model) == tmp_path / "checkpoint"


# ---------------------------------------------------------------- planning


def test_the_dynamo_mlp_plans_with_its_checkpoint_found_beside_it(tmp_path):
    code, out = _cli("plan", MLP / "training_model.onnx", "-o", tmp_path / "plan.json")
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("checkpoint"))
    assert "(beside the model, " in line and "1 frozen value known to shape inference and runs ('val_3')" in line
    plan = read_plan(tmp_path / "plan.json")  # checked against the plan schema
    record = plan.extra["checkpoint"]
    assert record["found"] == "beside the model" and record["path"].endswith("dynamo/mlp/checkpoint")
    assert record["values"] == {"val_3": {"dtype": "int64", "shape": [2], "values": [64, 784]}}
    assert "val_3" in {r["name"] for r in plan.extra["outside"]}  # still a frozen parameter, not arena
    assert recorded_values(plan.extra)["val_3"].tolist() == [64, 784]


def test_without_the_checkpoint_the_shapes_depend_on_data_and_the_flag_gives_it(tmp_path):
    model = _copy_model(tmp_path, None)
    code, out = _cli("plan", model)
    assert code == 1 and "depend on data" in out
    code, out = _cli("plan", model, "--checkpoint", MLP / "checkpoint", "-o", tmp_path / "plan.json")
    assert code == 0 and "(--checkpoint, " in out, out
    assert read_plan(tmp_path / "plan.json").extra["checkpoint"]["found"] == "--checkpoint"


def test_a_missing_or_corrupt_checkpoint_is_one_line_and_writes_nothing(tmp_path):
    model = _copy_model(tmp_path, b"ODTC but not a checkpoint")
    out_plan = tmp_path / "plan.json"
    code, out = _cli("plan", model, "-o", out_plan)
    assert code == 1 and out.count("\n") == 1 and "checkpoint" in out and "--checkpoint PATH" in out
    assert not out_plan.exists()
    code, out = _cli("plan", MLP / "training_model.onnx", "--checkpoint", tmp_path / "nowhere", "-o", out_plan)
    assert code == 1 and out.count("\n") == 1 and "nowhere" in out and not out_plan.exists()


@pytest.mark.parametrize("name", BUILT)
def test_dynamo_fixture_plans_with_no_flags(name):
    planned = plan_model(DYNAMO / name / "training_model.onnx", PlanOptions())
    record = planned.plan.extra["checkpoint"]
    assert record["found"] == "beside the model" and record["values"]
    assert planned.plan.arena_size >= planned.plan.lower_bound > 0
    assert not {t.name for t in planned.plan.tensors} & set(record["values"])


def test_the_catalogue_says_why_the_exporter_or_generator_refused():
    for entry in CATALOG.values():
        assert "refused" in entry or entry["frozen_constants"] >= 1
    assert len(BUILT) >= 4


# ---------------------------------------------------------------- the U-Net's message


def test_no_cpu_kernel_is_one_line_that_points_to_the_static_proof():
    exc = RuntimeBackendError("onnxruntime cannot load node 'g' (ConvTransposeGrad) alone: [ONNXRuntimeError] : 9 "
                              ": NOT_IMPLEMENTED : Could not find an implementation for ConvTransposeGrad(1) node")
    text = str(no_kernel_error(exc))
    assert text.startswith("onnxruntime has no CPU kernel for ConvTransposeGrad") and "\n" not in text
    assert "proven statically" in text and "onnxmem plan" in text and "docs/training.md" in text
    other = RuntimeBackendError("something else")
    assert no_kernel_error(other) is other


def test_unet_verifies_with_its_conv_transpose_grad_as_a_stand_in():
    """onnxruntime-training has no CPU kernel for ConvTransposeGrad: its nodes run as standard ops
    (onnxmem.runtime.standins), and verify says so."""
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    code, out = _cli("verify", MODELS / "training" / "unet.train.onnx")
    assert code == 0 and out.rstrip().endswith("verified"), out
    assert "ConvTransposeGrad: onnxruntime has no CPU kernel for it, so its nodes ran as standard ops" in out
    assert "MISMATCH" not in out and "no whole-model onnxruntime run" in out


# ---------------------------------------------------------------- the training runtime


def test_dynamo_mlp_verifies_with_the_checkpoint_values(tmp_path):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    code, out = _cli("plan", MLP / "training_model.onnx", "-o", tmp_path / "plan.json")
    assert code == 0 and "onnxruntime.training CheckpointState" in out, out
    code, out = _cli("verify", MLP / "training_model.onnx", "--plan", tmp_path / "plan.json")
    assert code == 0 and out.rstrip().endswith("verified"), out


def test_a_generated_checkpoint_reads_as_onnxruntime_reads_it(tmp_path):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript (make training-env)")
    torch = pytest.importorskip("torch")
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    module.train()
    program = torch.onnx.export(module, (torch.randn(4, 3, 4),), input_names=["x"], output_names=["logits"],
                                opset_version=18, dynamo=True, verbose=False)
    model = program.model_proto
    trainable = ["3.weight", "3.bias"]
    frozen = [i.name for i in model.graph.initializer if i.name not in trainable]
    artifacts.generate_artifacts(model, requires_grad=trainable, frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(tmp_path))
    ours = read_checkpoint(tmp_path / "checkpoint")
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    theirs = {n: p for n, p in state.parameters}
    assert {t.name for t in ours.tensors} == set(theirs)
    for t in ours.tensors:
        assert t.dims == theirs[t.name].data.shape and t.trainable == theirs[t.name].requires_grad
    values = small_values(ours, [t.name for t in ours.tensors])
    assert values and all(np.array_equal(v, theirs[n].data) for n, v in values.items())
    planned = plan_model(tmp_path / "training_model.onnx")
    assert set(planned.plan.extra["checkpoint"]["values"]) == set(values)


def test_a_plan_with_a_hostile_checkpoint_record_is_refused(tmp_path):
    code, out = _cli("plan", MLP / "training_model.onnx", "-o", tmp_path / "plan.json")
    assert code == 0, out
    data = json.loads((tmp_path / "plan.json").read_text())
    data["extra"]["checkpoint"]["values"]["val_3"] = {"dtype": "int8", "shape": [2], "values": [1, 2]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, out = _cli("verify", MLP / "training_model.onnx", "--plan", bad, "--static-only")
    assert code == 1 and out.count("\n") == 1 and "checkpoint" in out


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILT)
def test_dynamo_fixture_verifies_in_one_arena_with_its_eval_graph(name):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from onnxmem.runtime.training import execute_in_one_arena
    from onnxmem.zoo.fixtures import fill_weights

    runs = []
    for kind in ("training", "eval"):
        path = DYNAMO / name / f"{kind}_model.onnx"
        planned = plan_model(path)
        model = load_model(path)
        fill_weights(model)
        runs.append((planned.plan, model, planned.view))
    _, results = execute_in_one_arena(runs)
    for result in results:
        assert result.findings == () and all(c.identical for c in result.outputs)
    if name == "unet":  # no CPU kernel for ConvTransposeGrad: its stand-in ran
        assert any("ConvTransposeGrad" in n for n in results[0].notes)


# ---------------------------------------------------------------- hand-made checkpoints


class _Flat:
    """A minimal flatbuffer writer for checkpoints made by hand: each table's vtable just
    before it, children after their parents (offsets point forward), patched once placed."""

    def __init__(self) -> None:
        self.b = bytearray(struct.pack("<I", 0) + b"ODTC")

    def _align(self, n: int) -> None:
        self.b.extend(b"\0" * (-len(self.b) % n))

    def table(self, fields: list[tuple[str, object] | None]) -> tuple[int, list[int]]:
        """``fields``: ``(struct format, value)``, ``("ref", None)`` for an offset patched later,
        or ``None`` (absent). Returns the table's position and each field's."""
        sizes = [0 if f is None else (4 if f[0] == "ref" else struct.calcsize("<" + f[0])) for f in fields]
        offsets, at = [], 4
        for size in sizes:
            offsets.append(at if size else 0)
            at += size
        self._align(4)
        vtable = len(self.b)
        self.b += struct.pack(f"<HH{len(fields)}H", 4 + 2 * len(fields), at, *offsets)
        self._align(4)
        pos = len(self.b)
        self.b += struct.pack("<i", pos - vtable)
        for f in fields:
            if f is not None:
                self.b += struct.pack("<I", 0) if f[0] == "ref" else struct.pack("<" + f[0], f[1])
        return pos, [pos + o if o else 0 for o in offsets]

    def point(self, at: int, target: int) -> None:
        struct.pack_into("<I", self.b, at, target - at)

    def bytes_vector(self, data: bytes, width: int = 1, text: bool = False) -> int:
        """A vector of ``width``-byte elements, aligned to them; ``text``: a string (NUL after it)."""
        self._align(4)
        while (len(self.b) + 4) % max(width, 4):
            self.b += b"\0"
        pos = len(self.b)
        self.b += struct.pack("<I", len(data) // width) + data + (b"\0" if text else b"")
        return pos

    def tables_vector(self, count: int) -> tuple[int, list[int]]:
        self._align(4)
        pos = len(self.b)
        self.b += struct.pack("<I", count) + b"\0" * (4 * count)
        return pos, [pos + 4 + 4 * i for i in range(count)]


def _checkpoint(tensors: list[dict], external: bool = False) -> bytes:
    """A checkpoint whose frozen parameters are ``tensors`` (``name``, ``type``, ``dims``,
    ``raw``, optional ``external``: an external_data_offset)."""
    fb = _Flat()
    root, (_, state_at) = fb.table([("i", 2), ("ref", None)])
    struct.pack_into("<I", fb.b, 0, root)
    state, (trainable_at, frozen_at, _, _) = fb.table([("ref", None), ("ref", None), ("B", 0),
                                                        ("B", int(external))])
    fb.point(state_at, state)
    fb.point(trainable_at, fb.tables_vector(0)[0])  # no trainable parameters
    vec, slots = fb.tables_vector(len(tensors))
    fb.point(frozen_at, vec)
    for slot, t in zip(slots, tensors):
        offset = ("q", t["external"]) if "external" in t else None
        pos, (name_at, _, dims_at, _, raw_at, _, _) = fb.table(
            [("ref", None), None, ("ref", None), ("i", t["type"]), ("ref", None), None, offset])
        fb.point(slot, pos)
        fb.point(name_at, fb.bytes_vector(t["name"].encode(), text=True))
        fb.point(dims_at, fb.bytes_vector(struct.pack(f"<{len(t['dims'])}q", *t["dims"]), 8))
        fb.point(raw_at, fb.bytes_vector(t["raw"]))
    return bytes(fb.b)


SHAPE = {"name": "shape", "type": 7, "dims": [2], "raw": struct.pack("<2q", 4, -1)}
RATIO = {"name": "ratio", "type": 1, "dims": [], "raw": struct.pack("<f", 0.125)}
FLAG = {"name": "flag", "type": 9, "dims": [1], "raw": b"\x01"}
WEIGHT = {"name": "w", "type": 1, "dims": [3], "raw": struct.pack("<3f", 1, 2, 3)}


def test_a_hand_made_checkpoint_reads_its_constants_and_no_weights(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(_checkpoint([SHAPE, RATIO, FLAG, WEIGHT]))
    ckpt = read_checkpoint(path)
    assert [(t.name, t.dims, t.trainable) for t in ckpt.tensors] == [
        ("shape", (2,), False), ("ratio", (), False), ("flag", (1,), False), ("w", (3,), False)]
    values = small_values(ckpt, ["shape", "ratio", "flag", "w"])
    assert list(values) == ["shape", "ratio", "flag"]  # a float tensor of 3 is a weight: not read
    assert values["shape"].tolist() == [4, -1] and values["flag"].dtype == np.bool_
    assert values["ratio"].dtype == np.float32 and float(values["ratio"]) == 0.125


@pytest.mark.parametrize("tensors, external, rule", [
    ([{**SHAPE, "external": 0}], False, "keeps its data in an external file"),
    ([SHAPE], True, "keeps its parameters in an external data file"),
    ([SHAPE, SHAPE], False, "is listed twice"),
    ([{**SHAPE, "raw": b"\0" * 12}], False, "holds 12 bytes for 2 elements"),
    ([{**SHAPE, "dims": [-2]}], False, "negative dim"),
    ([{**SHAPE, "name": "caf\xe9"}], False, None),
])
def test_a_hand_made_checkpoint_is_refused_by_its_rule(tmp_path, tensors, external, rule):
    path = tmp_path / "checkpoint"
    path.write_bytes(_checkpoint(tensors, external))
    if rule is None:  # a UTF-8 name reads as it is
        assert read_checkpoint(path).tensors[0].name == "caf\xe9"
        return
    with pytest.raises(ModelError) as err:
        read_checkpoint(path)
    assert rule in str(err.value) and "\n" not in str(err.value)
    if "external" in rule:
        assert "--checkpoint PATH" in str(err.value)


def test_a_hand_made_checkpoint_reads_the_same_through_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime.training", reason="needs onnxruntime-training (make training-env)")
    from onnxmem.runtime.checkpoint import ORT_READER, checkpoint_values

    path = tmp_path / "checkpoint"
    path.write_bytes(_checkpoint([SHAPE, RATIO, FLAG, WEIGHT]))
    _, values, reader = checkpoint_values(path, ["shape", "ratio", "flag", "w"], use_ort=True)
    assert reader == ORT_READER and list(values) == ["shape", "ratio", "flag"]
    assert values["shape"].tolist() == [4, -1] and float(values["ratio"]) == 0.125 and bool(values["flag"][0])


# ---------------------------------------------------------------- range plans and fit

#: the dynamo MLP's Reshape target for any batch (the committed checkpoint holds [64, 784])
ANY_BATCH = {"name": "val_3", "type": 7, "dims": [2], "raw": struct.pack("<2q", -1, 784)}
#: bytes of one sample: the 1x28x28 float image and its int64 label
SAMPLE = 784 * 4 + 8


def _ranged_mlp(tmp_path, checkpoint: bytes | None):
    """The dynamo MLP's training graph with a symbolic batch ``batch`` on its image and labels
    (no stored shapes inside), in a folder of its own with ``checkpoint`` beside it."""
    import onnx

    model = onnx.load(str(MLP / "training_model.onnx"))
    for vi in model.graph.input:
        if vi.name in ("input", "labels"):
            vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    del model.graph.value_info[:]
    path = tmp_path / "training_model.onnx"
    onnx.save(model, str(path))
    if checkpoint is not None:
        (tmp_path / "checkpoint").write_bytes(checkpoint)
    return path


def test_a_range_plan_reads_the_checkpoint_values(tmp_path):
    from onnxmem.planning import plan_range

    model = _ranged_mlp(tmp_path, None)
    code, out = _cli("plan", model, "--dim", "batch=1:64")
    assert code == 1 and "not polynomials in the ranged dims" in out and out.count("\n") == 1
    (tmp_path / "checkpoint").write_bytes(_checkpoint([ANY_BATCH]))
    code, out = _cli("plan", model, "--dim", "batch=1:64", "-o", tmp_path / "range.json")
    assert code == 0 and "proof        ok" in out, out
    plan = plan_range(load_model(model), model, {"batch": (1, 64)}, PlanOptions(alignment=64))
    point = plan_model(MLP / "training_model.onnx", PlanOptions(alignment=64)).plan
    assert plan.arena_at({"batch": 64}) == point.arena_size  # the committed graph is batch 64
    assert plan.arena_at({"batch": 1}) < plan.arena_at({"batch": 32}) < point.arena_size
    assert "val_3" not in {t for p in plan.pieces for t in p.tensors}  # still outside the arena
    assert plan.checkpoint["found"] == "beside the model"
    assert plan.checkpoint["values"]["val_3"] == {"dtype": "int64", "shape": [2], "values": [-1, 784]}
    written = read_plan(tmp_path / "range.json", "range")  # the file records it and reads back the same
    assert written.checkpoint == plan.checkpoint and written.checkpoint["path"] == str(tmp_path / "checkpoint")


def test_a_range_plan_takes_the_checkpoint_flag(tmp_path):
    (tmp_path / "m").mkdir()
    model = _ranged_mlp(tmp_path / "m", None)  # nothing beside it
    given = tmp_path / "elsewhere"
    given.write_bytes(_checkpoint([ANY_BATCH]))
    code, out = _cli("plan", model, "--dim", "batch=1:64", "--checkpoint", given, "-o", tmp_path / "range.json")
    assert code == 0 and "proof        ok" in out, out
    assert read_plan(tmp_path / "range.json", "range").checkpoint["found"] == "--checkpoint"


def test_fit_sizes_a_training_graph_without_counting_the_callers_state(tmp_path):
    model = _ranged_mlp(tmp_path, _checkpoint([ANY_BATCH]))
    code, out = _cli("fit", model, "--dim", "batch=1:4096", "--memory", "16MiB", "--optimize", "none",
                     "--runtime", "plan", "--json")
    assert code == 0, out
    answer = json.loads(out)
    batch, items = answer["fit"]["batch"], answer["items"]
    assert 1 <= batch < 4096
    assert items["inputs"] == batch * SAMPLE  # the image and labels; parameters and buffers are weights
    assert items["weights"] > 2 * 2**20 and items["total"] <= 16 * 2**20
