"""The model zoo: catalogue, weight-free fixtures, the zoo job and its results."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import multiprocessing
import os
import socket
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.zoo import (
    DEFAULT_MODEL_TIMEOUT,
    LIGHT_MODELS,
    ResultsWriter,
    ZooModel,
    ZooOptions,
    ZooResult,
    compare_baseline,
    describe_model,
    fill_weights,
    has_missing_weights,
    light_model_path,
    load_zoo,
    materialize,
    read_baseline,
    results_csv,
    results_markdown,
    run_model,
    run_zoo,
    strip_weights,
    write_baseline,
    write_catalog,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "models" / "zoo"
CATALOG = FIXTURES / "catalog.json"
needs_fixtures = pytest.mark.skipif(not CATALOG.is_file(), reason="zoo fixtures not built")


def conv_model() -> onnx.ModelProto:
    """x[1,3,8,8] -> Conv(w[16,3,3,3]: 1728 B, b[16]: 64 B) -> Relu -> Reshape(s: int64) -> y."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(0.0, 0.2, (16, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.full(16, 0.5, np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "s")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "s"], ["y"], name="flat"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])], [w, b, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


# --------------------------------------------------------------------------- fixtures, weights


def test_a_weight_near_float32s_lowest_fills_within_its_bounds_without_overflow():
    """An attention mask's lowest float (t5_small has one) has a spread beyond float32's range:
    its draws are clipped to the recorded bounds before the cast, so no value overflows."""
    import warnings

    mask = np.zeros((32, 32), np.float32)
    mask[np.triu_indices(32, 1)] = np.finfo(np.float32).min
    model = conv_model()
    model.graph.initializer.append(numpy_helper.from_array(mask, "mask"))
    stripped, _ = strip_weights(model, "conv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fill_weights(stripped, seed=0)
    filled = numpy_helper.to_array(next(t for t in stripped.graph.initializer if t.name == "mask"))
    assert np.isfinite(filled).all()
    assert filled.min() >= np.finfo(np.float32).min and filled.max() <= 0.0


def test_strip_then_fill_runs_like_a_model():
    model = conv_model()
    stripped, removed = strip_weights(model, "conv")
    w = {t.name: t for t in stripped.graph.initializer}
    # the 1728-byte float weight goes; the 64-byte bias and the int64 shape stay inline
    assert removed == 16 * 3 * 3 * 3 * 4
    assert w["w"].data_location == TensorProto.EXTERNAL and not w["w"].raw_data
    assert w["w"].doc_string.startswith("onnxmem.fill mean=")
    assert w["b"].data_location != TensorProto.EXTERNAL
    assert numpy_helper.to_array(w["s"]).tolist() == [1, -1]
    assert has_missing_weights(stripped, "/nonexistent")

    assert fill_weights(stripped, seed=3) == 1
    filled = numpy_helper.to_array(next(t for t in stripped.graph.initializer if t.name == "w"))
    original = numpy_helper.to_array(model.graph.initializer[0])
    assert filled.shape == original.shape and filled.dtype == np.float32
    assert filled.min() >= original.min() and filled.max() <= original.max()
    assert abs(filled.std() - original.std()) < 0.05
    assert not has_missing_weights(stripped, "/nonexistent")

    import onnxruntime as ort

    session = ort.InferenceSession(stripped.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    assert y.shape == (1, 1024) and np.isfinite(y).all() and (y >= 0).all()


def test_fill_is_deterministic_and_seeded():
    a, _ = strip_weights(conv_model(), "conv")
    b, _ = strip_weights(conv_model(), "conv")
    c, _ = strip_weights(conv_model(), "conv")
    fill_weights(a, seed=0)
    fill_weights(b, seed=0)
    fill_weights(c, seed=1)
    assert a.graph.initializer[0].raw_data == b.graph.initializer[0].raw_data
    assert a.graph.initializer[0].raw_data != c.graph.initializer[0].raw_data


def test_fill_refuses_external_data_without_statistics(tmp_path):
    model = conv_model()
    onnx.save_model(model, str(tmp_path / "m.onnx"), save_as_external_data=True,
                    location="m.data", size_threshold=0)
    bare = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    with pytest.raises(OnnxmemError, match="initializer 'w' has external data but no"):
        fill_weights(bare)


@needs_fixtures
def test_committed_fixtures_are_weight_free_and_small():
    catalog = json.loads(CATALOG.read_text())["models"]
    names = {e["name"] for e in catalog}
    for required in ("resnet50", "mobilenet_v2", "efficientnet_b0", "densenet121", "inception_v3",
                     "unet", "randwire_ws", "bert_base", "gpt2", "gpt2_past", "vit_base",
                     "t5_small", "llama_4l", "llama_4l_past_dynamic"):
        assert required in names
    assert {f"onnx_{n}" for n in LIGHT_MODELS} <= names
    assert any(e["exporter"] == "legacy" for e in catalog)
    total = 0
    for e in catalog:
        assert set(e["dims"]) <= set(e["symbolic_dims"]), e["name"]
        if e["file"].startswith("onnx:"):
            continue
        path = FIXTURES / e["file"]
        total += path.stat().st_size
        assert path.stat().st_size < 3 * 2**20, e["name"]
        assert not (FIXTURES / f"{e['name']}.weights.bin").exists()
    assert total < 20 * 2**20
    assert any(e["symbolic_dims"] for e in catalog)


def _legacy_entries() -> list[dict]:
    if not CATALOG.is_file():
        return []
    return [e for e in json.loads(CATALOG.read_text())["models"] if e["exporter"] == "legacy"]


#: TorchScript exports quick enough for the default run; the others are slow (Swin-T's alone
#: runs 16 rounds of shape evaluation over 6,261 nodes)
FAST_LEGACY = {"mobilenet_v2_legacy", "resnet50_legacy", "nasnetalarge_legacy"}


@needs_fixtures
@pytest.mark.parametrize("entry", [
    pytest.param(e, id=e["name"], marks=() if e["name"] in FAST_LEGACY else pytest.mark.slow)
    for e in _legacy_entries()
])
def test_every_torchscript_export_plans_from_its_fixture_with_no_flags(entry):
    """Each ``*_legacy`` fixture (weights stripped, shapes computed at run time by Shape ->
    Gather -> ... -> Pad/Reshape chains) plans statically: no --measure-shapes, no weights, no
    flag but the catalogue's binding of the dims its graph inputs declare symbolic, and its
    arena is at most the one recorded (and verified) in docs/zoo-baseline.json (growth is a
    regression, as for ``onnxmem zoo --baseline``)."""
    from onnxmem.model import load_model
    from onnxmem.planning.pipeline import PlanOptions, plan_model
    from onnxmem.shapes import infer_shapes

    path = FIXTURES / entry["file"]
    assert set(entry["dims"]) == set(entry["symbolic_dims"])
    info = infer_shapes(load_model(path), dims=entry["dims"])
    assert "measured" not in set(info.sources.values())
    plan = plan_model(path, PlanOptions(dims=entry["dims"])).plan
    baseline = read_baseline(ROOT / "docs" / "zoo-baseline.json")
    assert 0 < plan.lower_bound <= plan.arena_size <= baseline[entry["name"]]


@pytest.mark.heavy
@needs_fixtures
def test_the_llama_kv_cache_fixture_plans_over_the_whole_cache_range():
    """``llama_4l_past_dynamic``: one decoding step of the Llama-style decoder after a KV cache
    whose length is the graph's one symbolic dim (4 layers x key and value, 4 heads of 64:
    grouped-query attention). It plans from the weight-free fixture with no flag but the
    catalogue's binding, within its baseline arena, and one range plan over past lengths
    0:1023 is proven on the whole box and, at the two corners, is within one alignment unit
    of a plan made there."""
    from onnxmem.model import load_model
    from onnxmem.planning import plan_range
    from onnxmem.planning.pipeline import PlanOptions, plan_loaded, plan_model
    from onnxmem.proof import prove_range_plan

    entry = {e["name"]: e for e in json.loads(CATALOG.read_text())["models"]}["llama_4l_past_dynamic"]
    assert entry["symbolic_dims"] == ["past_sequence"] and entry["dims"] == {"past_sequence": 255}
    caches = {k: v for k, v in entry["inputs"].items() if k.startswith("past.")}
    assert entry["inputs"]["input_ids"] == [1, 1]
    assert len(caches) == 8 and all(v == [1, 4, "past_sequence", 64] for v in caches.values())

    path = FIXTURES / entry["file"]
    plan = plan_model(path, PlanOptions(dims=entry["dims"])).plan
    baseline = read_baseline(ROOT / "docs" / "zoo-baseline.json")
    assert 0 < plan.lower_bound <= plan.arena_size <= baseline["llama_4l_past_dynamic"]

    model = load_model(path)
    rp = plan_range(model, path, {"past_sequence": (0, 1023)}, PlanOptions())
    assert prove_range_plan(rp) == []
    cache = {t.name: str(t.size) for t in rp.pieces[0].tensors}["past.0.key"]
    assert cache == "1024*past_sequence"  # 4 heads x 64 x fp32
    for point in ({"past_sequence": 0}, {"past_sequence": 1023}):
        direct = plan_loaded(model, path, PlanOptions(dims=point)).plan.arena_size
        assert direct <= rp.arena_at(point) <= direct + 64  # at most one alignment unit of rounding room


def test_the_legacy_zoo_holds_the_hard_torchscript_exports():
    names = {e["name"] for e in _legacy_entries()}
    assert {"nasnetalarge_legacy", "pnasnet5large_legacy", "swin_t_legacy"} <= names


@needs_fixtures
def test_materialize_makes_a_runnable_copy(tmp_path):
    src = FIXTURES / "mobilenet_v2.onnx"
    out = materialize(src, tmp_path)
    assert out == tmp_path / "mobilenet_v2.onnx"
    assert (tmp_path / "mobilenet_v2.onnx.data").stat().st_size > 10 * 2**20
    assert materialize(src, tmp_path) == out  # reused
    light = light_model_path("squeezenet")
    assert materialize(light, tmp_path) == light  # nothing missing: the model itself

    import onnxruntime as ort

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"image": np.random.default_rng(0).normal(size=(1, 3, 224, 224))
                              .astype(np.float32)})
    assert y.shape == (1, 1000) and np.isfinite(y).all()


# --------------------------------------------------------------------------- catalogue, lists


@needs_fixtures
def test_load_zoo_reads_the_catalog_and_filters():
    models = load_zoo(FIXTURES)
    assert all(m.path.is_file() for m in models)
    light = {m.name: m for m in models}["onnx_squeezenet"]
    assert light.path == light_model_path("squeezenet")
    only = load_zoo(FIXTURES, ["resnet50*"])
    assert [m.name for m in only] == ["resnet50", "resnet50_batch", "resnet50_legacy"]
    assert only[1].dims == {"batch": 4}
    with pytest.raises(OnnxmemError, match="no model of zoo"):
        load_zoo(FIXTURES, ["nothing*"])


def symbolic_model() -> onnx.ModelProto:
    """x[batch, 3, h, w] -> Conv(8 channels, 3x3, pads 1) -> Relu -> y: needs its shape bound."""
    w = numpy_helper.from_array(np.full((8, 3, 3, 3), 0.1, np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, "h", "w"])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_load_zoo_list_file(tmp_path):
    (tmp_path / "a.onnx").write_bytes(b"")
    listing = tmp_path / "zoo.txt"
    listing.write_text("# models\na.onnx batch=2 seq=8  # comment\n\nonnx:squeezenet\n"
                       "a.onnx x=1x3x224x224 batch=1 shape:n=4 shape:sr=\n")
    models = load_zoo(listing)
    assert [(m.name, m.dims, m.input_shapes) for m in models] == [
        ("a", {"batch": 2, "seq": 8}, {}),
        ("onnx_squeezenet", {}, {}),
        ("a", {"batch": 1}, {"x": (1, 3, 224, 224), "n": (4,), "sr": ()}),
    ]
    assert models[0].path == (tmp_path / "a.onnx").resolve()
    with pytest.raises(OnnxmemError, match="does not exist"):
        load_zoo(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OnnxmemError, match="no catalog.json and no .onnx"):
        load_zoo(empty)


def test_zoo_folder_links_that_leave_it_or_loop_are_refused(tmp_path):
    """A zoo folder's models are read from the folder: a link out of it or a loop is one error."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.onnx").write_bytes(b"not for the zoo")
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "a.onnx").write_bytes(b"")
    (zoo / "b.onnx").symlink_to(outside / "secret.onnx")
    with pytest.raises(OnnxmemError, match=r"leads to .*secret.onnx', outside the zoo's folder"):
        load_zoo(zoo)
    (zoo / "b.onnx").unlink()
    (zoo / "b.onnx").symlink_to(zoo / "c.onnx")
    (zoo / "c.onnx").symlink_to(zoo / "b.onnx")
    with pytest.raises(OnnxmemError, match="is a link loop"):
        load_zoo(zoo)
    (zoo / "b.onnx").unlink()
    (zoo / "c.onnx").unlink()
    (zoo / "b.onnx").symlink_to(zoo / "a.onnx")  # a link inside the folder is read
    assert [m.path for m in load_zoo(zoo)] == [(zoo / "a.onnx").resolve()] * 2
    listing = tmp_path / "zoo.txt"
    (tmp_path / "loop.onnx").symlink_to(tmp_path / "loop.onnx")
    listing.write_text("loop.onnx\n")
    with pytest.raises(OnnxmemError, match=r"zoo list '.*zoo.txt' line 1: model file .*loop.onnx' is a link loop"):
        load_zoo(listing)


@pytest.mark.parametrize("line,message", [
    ("a.onnx batch", r"zoo.txt:2: 'batch' is neither a dim binding nor an input shape; write NAME=N"),
    ("a.onnx batch=0", r"zoo.txt:2: 'batch=0' is neither"),
    ("a.onnx batch=-1", r"zoo.txt:2: 'batch=-1' is neither"),
    ("a.onnx x=1x3xx8", r"zoo.txt:2: 'x=1x3xx8' is neither"),
    ("a.onnx x=1x0x8", r"zoo.txt:2: 'x=1x0x8' is neither"),
    ("a.onnx x=1,3,8", r"zoo.txt:2: 'x=1,3,8' is neither"),
    ("a.onnx shape:x=4x", r"zoo.txt:2: 'shape:x=4x' is neither"),
    ("a.onnx =4", r"zoo.txt:2: '=4' is neither"),
    ("a.onnx batch=1 batch=2", r"zoo.txt:2: dim 'batch' is bound twice"),
    ("a.onnx x=1x2 shape:x=3", r"zoo.txt:2: input 'x' is given two shapes"),
])
def test_list_file_lines_are_parsed_strictly(tmp_path, line, message):
    (tmp_path / "a.onnx").write_bytes(b"")
    listing = tmp_path / "zoo.txt"
    listing.write_text(f"onnx:squeezenet\n{line}\n")
    with pytest.raises(OnnxmemError, match=message):
        load_zoo(listing)


def test_catalog_written_by_the_builder_reads_back(tmp_path):
    model = symbolic_model()
    onnx.save(model, tmp_path / "sym.onnx")
    described = describe_model(model)
    assert described == {"inputs": {"x": ["batch", 3, "h", "w"]},
                         "symbolic_dims": ["batch", "h", "w"], "nodes": 2,
                         "weights_bytes": 8 * 3 * 3 * 3 * 4}
    catalog = tmp_path / "catalog.json"
    entry = {"name": "sym", "file": "sym.onnx", "dims": {"batch": 1}, **described,
             "input_shapes": {"x": [1, 3, 16, 16]}}
    write_catalog(catalog, [entry, {"name": "dropped", "file": "x.onnx"}], ["sym", "light"],
                  {"seed": 0})
    write_catalog(catalog, [{"name": "light", "file": "onnx:squeezenet"}], ["light", "sym"],
                  {"seed": 0})  # merged by name, written in the order given
    sq, sym = load_zoo(catalog)
    assert [sq.name, sym.name] == ["light", "sym"]
    assert sym.path == tmp_path / "sym.onnx" and sym.dims == {"batch": 1}
    assert sym.input_shapes == {"x": (1, 3, 16, 16)}
    assert sym.info["weights_bytes"] == 864 and sq.path == light_model_path("squeezenet")
    catalog.write_text(json.dumps({"models": [{"file": "sym.onnx"}]}))
    with pytest.raises(OnnxmemError, match=r"model 0 is malformed .* needs 'name' and 'file'"):
        load_zoo(catalog)


# --------------------------------------------------------------------------- the job


def light(name: str) -> ZooModel:
    return ZooModel(f"onnx_{name}", light_model_path(name))


def broken(tmp_path: Path) -> ZooModel:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"this is not a protobuf")
    return ZooModel("broken", path)


def test_a_failing_model_is_reported_and_the_run_goes_on(tmp_path):
    seen: list[str] = []
    models = [light("squeezenet"), broken(tmp_path), light("bvlc_alexnet")]
    options = ZooOptions(executor="inline", work_dir=tmp_path / "out")
    assert options.model_timeout == DEFAULT_MODEL_TIMEOUT == 600  # a limit by default
    results = run_zoo(models, options, lambda r: seen.append(r.name))
    assert seen == ["onnx_squeezenet", "broken", "onnx_bvlc_alexnet"]
    ok, bad, ok2 = results
    assert ok.status == ok2.status == "ok"
    assert bad.status == "failed" and "not a readable ONNX model" in bad.error
    assert bad.arena_size is None
    assert 0 < ok.lower_bound <= ok.arena_size <= ok.naive_size
    assert Path(ok.plan_file).is_file()
    assert ok.verify == "not run" and ok.ort_peak is None


def test_local_executor_runs_models_in_processes(tmp_path):
    models = [light("squeezenet"), broken(tmp_path), light("bvlc_alexnet")]
    here = run_zoo(models, ZooOptions(executor="inline", model_timeout=0))  # this process
    local = run_zoo(models, ZooOptions(executor="local", jobs=2))
    assert [r.name for r in local] == [m.name for m in models]  # input order, not finish order
    assert [(r.status, r.arena_size) for r in local] == [(r.status, r.arena_size) for r in here]


def stalling_run(model: ZooModel, options: ZooOptions) -> ZooResult:
    """``run_model``, except that the model named 'stall' hangs (a child process imports this
    module by name to run it)."""
    if model.name == "stall":
        time.sleep(300)
    return run_model(model, options)


def stalling_zoo() -> list[ZooModel]:
    return [light("squeezenet"), ZooModel("stall", light_model_path("squeezenet")),
            light("bvlc_alexnet")]


# each case waits out a 20 s limit: both run behind the slow marker (make test-slow)
@pytest.mark.slow
@pytest.mark.parametrize("executor,jobs", [("inline", 1), ("local", 2)])
def test_a_model_that_hangs_is_stopped_and_later_models_come_out(tmp_path, executor, jobs):
    from onnxmem.runtime.isolation import end_child

    end_child()  # the child an earlier test's library call left to this process: the run's own are counted
    seen: list[tuple[str, str]] = []
    t0 = time.monotonic()
    # the limit leaves a good model room on a loaded machine (a spawned child plans one in ~3 s)
    results = run_zoo(stalling_zoo(), ZooOptions(executor=executor, jobs=jobs, model_timeout=20),
                      lambda r: seen.append((r.name, r.status)), task=stalling_run)
    assert time.monotonic() - t0 < 150  # not the 300 s the model would take
    assert sorted(seen) == [("onnx_bvlc_alexnet", "ok"), ("onnx_squeezenet", "ok"),
                            ("stall", "timeout")]
    first, stalled, last = results
    assert stalled.status == "timeout" and stalled.arena_size is None
    assert "ran past the per-model limit of 20 s" in stalled.error
    assert "--model-timeout" in stalled.error and stalled.seconds >= 20
    assert first.arena_size and last.arena_size and last.status == "ok"
    if executor == "inline":  # one at a time: the model after the stalled one came out last
        assert [name for name, _ in seen] == ["onnx_squeezenet", "stall", "onnx_bvlc_alexnet"]
    assert multiprocessing.active_children() == []


def half_writing_run(model: ZooModel, options: ZooOptions) -> ZooResult:
    """``stalling_run``, but the model named 'stall' first leaves a plan half written in ``--out``,
    named as an output being written is (``.NAME.PID.HEX.tmp``)."""
    if model.name == "stall" and options.work_dir is not None:
        plans = Path(options.work_dir) / "plans"
        plans.mkdir(parents=True, exist_ok=True)
        (plans / f".stall.json.{os.getpid()}.00ff.tmp").write_text("{")
    return stalling_run(model, options)


def test_an_interrupted_run_leaves_no_half_written_plan(tmp_path):
    """A model's process stopped while it wrote its plan leaves no temporary file in --out."""
    out = tmp_path / "out"

    def interrupt(r: ZooResult) -> None:
        if r.name == "onnx_squeezenet":
            deadline = time.monotonic() + 60
            while not list(out.glob("plans/.stall.json.*.tmp")) and time.monotonic() < deadline:
                time.sleep(0.05)  # 'stall' has its plan half written
            assert list(out.glob("plans/.stall.json.*.tmp"))
            raise KeyboardInterrupt  # as ctrl-C while 'stall' runs

    with pytest.raises(KeyboardInterrupt):
        run_zoo(stalling_zoo(), ZooOptions(executor="local", jobs=2, work_dir=out), interrupt,
                task=half_writing_run)
    assert multiprocessing.active_children() == []
    assert sorted(p.name for p in (out / "plans").iterdir()) == ["onnx_squeezenet.json"]


def test_an_interrupted_run_leaves_the_finished_rows(tmp_path):
    models = stalling_zoo()
    writer = ResultsWriter(tmp_path, [m.name for m in models], {"command": "test"})

    def add_then_interrupt(r: ZooResult) -> None:
        writer.add(r)
        if r.name == "onnx_squeezenet":
            raise KeyboardInterrupt  # as ctrl-C while 'stall' runs

    with pytest.raises(KeyboardInterrupt):
        run_zoo(models, ZooOptions(executor="local", jobs=2), add_then_interrupt,
                task=stalling_run)
    assert multiprocessing.active_children() == []  # the stalled worker was killed
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["command"] == "test" and doc["complete"] is False and doc["pending"] == 2
    assert [m["name"] for m in doc["models"]] == ["onnx_squeezenet"]
    assert doc["models"][0]["arena_size"] > 0
    assert "Run not finished: 2 more models pending." in (tmp_path / "results.md").read_text()
    assert (tmp_path / "results.csv").read_text().count("\n") == 2

    for r in (result("onnx_bvlc_alexnet", 100), result("stall", None, "timeout")):
        writer.add(r)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["complete"] is True and doc["pending"] == 0
    assert [m["name"] for m in doc["models"]] == [m.name for m in models]  # catalogue order
    assert "| stall |" in (tmp_path / "results.md").read_text()
    assert "| timeout |" in (tmp_path / "results.md").read_text()


def test_bad_options_are_user_errors(tmp_path):
    with pytest.raises(OnnxmemError, match="executor 'spark' is unknown"):
        run_zoo([light("squeezenet")], ZooOptions(executor="spark"))
    with pytest.raises(OnnxmemError, match="--jobs 0"):
        run_zoo([light("squeezenet")], ZooOptions(jobs=0))
    with pytest.raises(OnnxmemError, match="several models named 'onnx_squeezenet'"):
        run_zoo([light("squeezenet"), light("squeezenet")], ZooOptions(executor="inline"))
    with pytest.raises(OnnxmemError, match=r"--model-timeout -1: use 0 \(no limit\) or more"):
        run_zoo([light("squeezenet")], ZooOptions(model_timeout=-1))


# --------------------------------------------------------------------------- results, baseline


def result(name: str, arena: int | None, status: str = "ok", **kw) -> ZooResult:
    return ZooResult(name, f"{name}.onnx", status, None if status == "ok" else "boom",
                     arena_size=arena, lower_bound=None if arena is None else arena // 2, **kw)


def test_markdown_and_csv_tables():
    rows = [result("a", 2 * 2**20, ort_peak=4 * 2**20, verify="pass", nodes=3),
            result("b|c", None, status="failed")]
    md = results_markdown(rows)
    header = md.splitlines()[0]
    for column in ("model", "nodes", "tensors", "weights", "naive", "onnxruntime peak",
                   "lower bound", "arena", "arena/bound", "arena/onnxruntime", "plan s", "verify"):
        assert column in header
    assert "| a | 3 | — | — | — | 4.00 | 1.00 | 2.00 | 2.000 | 0.500 | — | pass |" in md
    assert "b\\|c" in md and "- **b\\|c** (failed): boom" in md and "1 of 2 models ok" in md
    table = list(csv.DictReader(io.StringIO(results_csv(rows))))
    assert table[0]["arena_over_ort"] == "0.5" and table[1]["error"] == "boom"
    assert table[1]["arena_size"] == ""


def test_baseline_catches_growth_and_lost_models(tmp_path):
    path = tmp_path / "baseline.json"
    write_baseline([result("a", 1000), result("b", 2000), result("gone", None, "failed")], path)
    base = read_baseline(path)
    assert base == {"a": 1000, "b": 2000}
    now = [result("a", 1000), result("b", 2001), result("new", 10**9)]
    assert [r.name for r in compare_baseline(now, base)] == ["b"]
    assert compare_baseline(now, base, tolerance=0.01) == []
    regressions = compare_baseline([result("a", None, "failed")], base)
    assert "no arena now" in str(regressions[0])
    assert "+0.05%" in str(compare_baseline(now, base)[0])
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(OnnxmemError, match="cannot be read"):
        read_baseline(tmp_path / "bad.json")


def test_cli_zoo_writes_results_and_exit_code(tmp_path):
    (tmp_path / "broken.onnx").write_bytes(b"garbage")
    listing = tmp_path / "zoo.txt"
    listing.write_text(f"onnx:squeezenet\n{tmp_path / 'broken.onnx'}\n")
    out = tmp_path / "results"
    runner = CliRunner()
    res = runner.invoke(main, ["zoo", str(listing), "--out", str(out), "--executor", "inline",
                               "--write-baseline", str(tmp_path / "base.json")])
    assert res.exit_code == 1, res.output
    doc = json.loads((out / "results.json").read_text())
    by_name = {m["name"]: m for m in doc["models"]}
    assert by_name["broken"]["status"] == "failed"
    assert "not a readable ONNX model" in by_name["broken"]["error"]
    assert by_name["onnx_squeezenet"]["arena_size"] > 0
    assert doc["machine"]["cpus"] >= 1
    assert "| onnx_squeezenet |" in (out / "results.md").read_text()
    assert (out / "results.csv").read_text().startswith("name,status,")
    assert (out / "plans" / "onnx_squeezenet.json").is_file()

    # the good model alone passes against its own baseline, and fails when the baseline shrinks
    res = runner.invoke(main, ["zoo", "onnx:squeezenet", "--out", str(out), "--executor", "inline",
                               "--model-timeout", "0", "--baseline", str(tmp_path / "base.json")])
    assert res.exit_code == 0, res.output
    base = json.loads((tmp_path / "base.json").read_text())
    base["arena_size"]["onnx_squeezenet"] -= 64
    (tmp_path / "base.json").write_text(json.dumps(base))
    res = runner.invoke(main, ["zoo", "onnx:squeezenet", "--out", str(out), "--executor", "inline",
                               "--model-timeout", "0", "--baseline", str(tmp_path / "base.json")])
    assert res.exit_code == 1 and "regression: onnx_squeezenet" in res.output


def test_cli_zoo_list_lines_carry_input_shapes(tmp_path):
    onnx.save(symbolic_model(), tmp_path / "sym.onnx")
    listing = tmp_path / "zoo.txt"
    listing.write_text("sym.onnx x=2x3x16x16\n")
    runner = CliRunner()
    res = runner.invoke(main, ["zoo", str(listing), "--out", str(tmp_path / "out"),
                               "--executor", "inline", "--model-timeout", "0",
                               "--alignment", "1", "--io", "external"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads((tmp_path / "out" / "results.json").read_text())["models"]
    assert row["input_shapes"] == {"x": [2, 3, 16, 16]}
    assert row["arena_size"] == 2 * 8 * 16 * 16 * 4  # c only: x and y are outside the arena
    assert "x=2x3x16x16" in (tmp_path / "out" / "results.csv").read_text()

    listing.write_text("sym.onnx\n")  # without it the model cannot be planned
    res = runner.invoke(main, ["zoo", str(listing), "--out", str(tmp_path / "out"),
                               "--executor", "inline", "--model-timeout", "0"])
    assert res.exit_code == 1
    (row,) = json.loads((tmp_path / "out" / "results.json").read_text())["models"]
    assert row["status"] == "failed" and "batch" in row["error"]

    listing.write_text("sym.onnx\nsym.onnx x=2x3x16\u00d716\n")
    res = runner.invoke(main, ["zoo", str(listing)])
    assert res.exit_code == 1
    assert res.output.startswith("error: ") and res.output.count("\n") == 1
    assert "zoo.txt:2: 'x=2x3x16\u00d716' is neither a dim binding" in res.output


def test_cli_zoo_list_shape_words_pin_any_rank(tmp_path):
    """``shape:v=4`` pins a rank-1 input and ``shape:sr=`` a scalar whose rank the model leaves
    open, through the whole zoo job (plan and results)."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["sr"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["v", "f"], ["y"])],
        "g",
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, ["n"]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "vad.onnx")
    listing = tmp_path / "zoo.txt"
    listing.write_text("vad.onnx shape:v=1000 shape:sr=\n")
    res = CliRunner().invoke(main, ["zoo", str(listing), "--out", str(tmp_path / "out"),
                                    "--executor", "inline", "--model-timeout", "0", "--alignment", "1"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads((tmp_path / "out" / "results.json").read_text())["models"]
    assert row["input_shapes"] == {"v": [1000], "sr": []}
    # the peak is the Add: v (4000 B, a graph input: never written over), f (4 B) and y (4000 B);
    # sr (8 B) died at the Cast
    assert row["lower_bound"] == 4000 + 4 + 4000
    assert row["arena_size"] >= row["lower_bound"] and row["status"] == "ok"


def test_cli_zoo_help_states_the_default_time_limit():
    res = CliRunner().invoke(main, ["zoo", "--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "--model-timeout" in text and "[default: 600.0; x>=0]" in text
    assert "0: no limit" in text and "inline: one model at a time, each in a child process" in text


@needs_fixtures
def test_cli_zoo_over_committed_fixtures(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["zoo", str(FIXTURES), "--only", "unet,mobilenet_v2",
                               "--jobs", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [m["name"] for m in doc["models"]] == ["mobilenet_v2", "unet"]
    # the local executor runs each model in a fresh process: two workers, neither this one
    workers = {m["worker"] for m in doc["models"]}
    assert doc["workers"] == len(workers) == 2 and f"{socket.gethostname()}:{os.getpid()}" not in workers
    for m in doc["models"]:
        assert m["lower_bound"] <= m["arena_size"] < m["naive_size"]
        assert m["weights_size"] > 10 * 2**20


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("onnxmem.verify.run") is None, reason="no onnxmem.verify.run")
def test_zoo_verify_cpu_on_a_weight_free_fixture(tmp_path):
    results = run_zoo([ZooModel("mobilenet_v2", FIXTURES / "mobilenet_v2.onnx")],
                      ZooOptions(executor="inline", verify="cpu", work_dir=tmp_path))
    (r,) = results
    assert r.status == "ok", r.error
    assert r.verify == "pass" and r.ort_peak and r.ort_peak > 0


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the zoo extra")
@pytest.mark.parametrize("exporter", ["dynamo", "legacy"])
def test_build_zoo_exports_a_symbolic_model_onnxruntime_reads(tmp_path, exporter):
    from onnxmem.zoo import export as build_zoo

    torch = build_zoo.import_torch()

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 32)

        def forward(self, x, *rest):
            y = torch.relu(self.proj(x))
            for r in rest:
                y = y + r
            return y

    def build():
        x = torch.randn(2, 5, 16)
        return build_zoo.Export(Tiny(), (x, torch.randn(2, 5, 32)), ["x", "r"], ["y"])

    entry = build_zoo.Entry("tiny", "test", build, exporter=exporter,
                            dynamic={"x": {1: "sequence"}, "r": {1: "sequence"}},
                            dims={"sequence": 7})
    model = build_zoo.export(entry, torch)
    assert model.ir_version <= 10
    entry_json = build_zoo.catalog_entry(entry, model, "tiny.onnx")
    assert entry_json["inputs"]["x"] == [2, "sequence", 16]
    assert entry_json["dims"] == {"sequence": 7}

    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.zeros((2, 7, 16), np.float32),
                              "r": np.ones((2, 7, 32), np.float32)})
    assert y.shape == (2, 7, 32) and (y >= 1).all()
