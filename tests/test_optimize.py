"""--optimize LEVEL: the graph onnxruntime builds, planned, recorded, proven, verified and refused
when the plan does not match it (onnxmem.runtime.optimize, onnxmem.plans.optimization)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil

import numpy as np
import onnx
import onnxruntime
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import PlanError
from onnxmem.plans.optimization import AS_WRITTEN, plan_optimization
from onnxmem.runtime.sessions import cuda_available

from .conftest import MODELS

DIMS = {"resnet_cnn.onnx": [], "transformer_block.onnx": ["--dim", "batch=1", "--dim", "seq=32"],
        "external_data.onnx": []}


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_line_error(result, code: int = 1) -> str:
    """The output of a refused command: exit ``code`` and one line, ``error: ...``."""
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def plan_file(tmp_path, name: str, level: str, *extra: str) -> tuple[str, dict]:
    out = tmp_path / f"{name}.{level}.json"
    r = run("plan", MODELS / name, "--optimize", level, "-o", out, *DIMS[name], *extra)
    assert r.exit_code == 0, r.output
    return str(out), json.loads(out.read_text())


@pytest.mark.parametrize("name", ["resnet_cnn.onnx", "transformer_block.onnx"])
@pytest.mark.parametrize("level", ["basic", "extended", "all"])
def test_each_level_plans_proves_and_verifies(tmp_path, name, level):
    path, data = plan_file(tmp_path, name, level)
    model = data["model"]
    assert model["optimization"]["level"] == level
    assert model["optimization"]["provider"] == "cpu"
    assert model["optimization"]["onnxruntime"] == onnxruntime.__version__
    # the plan names the user's file: its path and sha256, not the temporary graph's
    assert model["path"] == str(MODELS / name)
    assert model["sha256"] == hashlib.sha256((MODELS / name).read_bytes()).hexdigest()
    assert len(model["graph_sha256"]) == 64
    r = run("verify", MODELS / name, "--plan", path)
    assert r.exit_code == 0, r.output
    assert f"graph     onnxruntime's, level {level} for cpu" in r.output
    assert "static    ok" in r.output and r.output.strip().endswith("verified")


def test_all_on_cpu_plans_the_fused_nchwc_graph(tmp_path):
    _, data = plan_file(tmp_path, "resnet_cnn.onnx", "all")
    _, none = plan_file(tmp_path, "resnet_cnn.onnx", "none")
    assert "optimization" not in none["model"] and "graph_sha256" not in none["model"]
    assert "Conv" in none["op_types"] and "Relu" in none["op_types"]
    assert "Relu" not in data["op_types"]  # fused into onnxruntime's NCHWc Conv
    assert "ReorderOutput" in data["op_types"]
    assert "com.microsoft.nchwc" in data["model"]["opset"]
    assert data["model"]["optimization"]["nchwc_block"] in (4, 8, 16)


def test_the_same_model_level_and_machine_give_the_same_graph(tmp_path):
    _, a = plan_file(tmp_path, "resnet_cnn.onnx", "all")
    (tmp_path / "again").mkdir()
    _, b = plan_file(tmp_path / "again", "resnet_cnn.onnx", "all")
    assert a["model"]["graph_sha256"] == b["model"]["graph_sha256"]
    _, ext = plan_file(tmp_path, "resnet_cnn.onnx", "extended")
    assert ext["model"]["graph_sha256"] != a["model"]["graph_sha256"]
    assert "nchwc_block" not in ext["model"]["optimization"]


def test_a_plan_without_the_record_reads_as_the_graph_as_written():
    assert plan_optimization({"path": "m.onnx", "sha256": "0" * 64}) == AS_WRITTEN
    assert AS_WRITTEN.level == "none"


def _edited(tmp_path, data: dict, edit) -> str:
    changed = json.loads(json.dumps(data))
    edit(changed["model"])
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(changed))
    return str(out)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["optimization"].update(onnxruntime="1.20.0"),
     r"made for the graph onnxruntime 1.20.0 builds at level all; this is onnxruntime .*: plan the model again"),
    (lambda m: m["optimization"].update(level="extended"),
     r"made for an optimized graph with sha256 [0-9a-f]{8}…; onnxruntime builds [0-9a-f]{8}… from .* at level "
     r"extended: plan this model again"),
    (lambda m: m["optimization"].update(nchwc_block=m["optimization"]["nchwc_block"] * 2),
     r"made at --optimize all on a CPU whose NCHWc block size is \d+; this CPU's is \d+ .*plan the model again on "
     r"this machine"),
    (lambda m: m["optimization"].update(provider="cuda"),
     r"made for the graph onnxruntime builds for --device cuda, not --device cpu: verify it with --device cuda"),
    (lambda m: m.update(graph_sha256="0" * 64), r"made for an optimized graph with sha256 00000000…"),
    (lambda m: m.pop("optimization"), r"records no optimization level .* the plan was edited; re-plan the model"),
    (lambda m: m.pop("graph_sha256"), r"its digest, is missing: re-plan the model"),
])
def test_verify_refuses_a_plan_the_graph_built_here_does_not_match(tmp_path, edit, message):
    _, data = plan_file(tmp_path, "resnet_cnn.onnx", "all")
    edited = _edited(tmp_path, data, edit)
    line = one_line_error(run("verify", MODELS / "resnet_cnn.onnx", "--plan", edited))
    assert re.search(message, line), line
    assert one_line_error(run("compare", MODELS / "resnet_cnn.onnx", "--plan", edited)) == line


def test_verify_refuses_another_level_or_device(tmp_path):
    path, _ = plan_file(tmp_path, "resnet_cnn.onnx", "all")
    line = one_line_error(run("verify", MODELS / "resnet_cnn.onnx", "--plan", path, "--optimize", "basic"))
    assert "was made for level all for cpu" in line and "not --optimize basic: verify it with --optimize all" in line
    line = one_line_error(run("verify", MODELS / "resnet_cnn.onnx", "--plan", path, "--device", "cuda"))
    assert "for --device cpu, not --device cuda" in line
    _, plain = plan_file(tmp_path, "resnet_cnn.onnx", "none")
    line = one_line_error(run("verify", MODELS / "resnet_cnn.onnx", "--plan", tmp_path / "resnet_cnn.onnx.none.json",
                              "--optimize", "all"))
    assert "was made for the graph as written, not --optimize all" in line
    # the same level, given or not, verifies
    assert run("verify", MODELS / "resnet_cnn.onnx", "--plan", path, "--optimize", "all").exit_code == 0


def test_verify_plans_now_at_the_level_given(tmp_path):
    r = run("verify", MODELS / "transformer_block.onnx", "--optimize", "all", *DIMS["transformer_block.onnx"])
    assert r.exit_code == 0, r.output
    assert "graph     onnxruntime's, level all for cpu" in r.output and "FusedMatMul" not in r.output


def test_external_data_model_at_all(tmp_path):
    path, data = plan_file(tmp_path, "external_data.onnx", "all")
    assert "FusedGemm" in data["op_types"]
    r = run("verify", MODELS / "external_data.onnx", "--plan", path)
    assert r.exit_code == 0, r.output
    assert not any(p.name.startswith("onnxmem-optimize") for p in tmp_path.iterdir())


def test_flags_that_need_the_graph_as_written_are_refused(tmp_path):
    for flags in (["--annotate", tmp_path / "a.onnx"], ["--budget", "0.5x"]):
        r = run("plan", MODELS / "resnet_cnn.onnx", "--optimize", "all", *flags)
        assert r.exit_code == 2 and "works on the graph as written; leave out --optimize" in r.output
        assert not (tmp_path / "a.onnx").exists()


def test_missing_weights_are_one_line(tmp_path):
    model = onnx.load(MODELS / "external_data.onnx", load_external_data=False)
    onnx.save(model, tmp_path / "m.onnx")  # its data file is not beside it
    line = one_line_error(run("plan", tmp_path / "m.onnx", "--optimize", "all"))
    assert "onnxruntime reads the weights to optimize the model at --optimize all" in line


def test_range_plan_records_the_level(tmp_path):
    out = tmp_path / "range.json"
    r = run("plan", MODELS / "transformer_block.onnx", "--optimize", "basic", "--dim", "batch=1", "--dim",
            "seq=16:32", "-o", out)
    assert r.exit_code == 0, r.output
    model = json.loads(out.read_text())["range"]["model"]
    assert model["optimization"]["level"] == "basic" and len(model["graph_sha256"]) == 64
    point = tmp_path / "point.json"
    assert run("instantiate", out, "--dim", "seq=24", "-o", point).exit_code == 0
    assert json.loads(point.read_text())["model"]["optimization"]["level"] == "basic"
    r = run("verify", MODELS / "transformer_block.onnx", "--plan", point)
    assert r.exit_code == 0, r.output


def test_compare_puts_the_plan_beside_onnxruntime_at_the_same_level(tmp_path):
    path, _ = plan_file(tmp_path, "resnet_cnn.onnx", "extended")
    r = run("compare", MODELS / "resnet_cnn.onnx", "--plan", path)
    assert r.exit_code == 0, r.output
    peaks = [ln for ln in r.output.splitlines() if ln.startswith("onnxruntime peak")]
    assert len(peaks) == 2 and "ORT_ENABLE_EXTENDED" in peaks[0] and "default session" in peaks[1]


def _qdq_model(tmp_path) -> tuple[str, int]:
    """A Conv/Relu/Gemm model quantized to QDQ by onnxruntime's quantize_static, and the int8 bytes
    of its two weights."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (8, 3, 3, 3)), ("b1", (8,)), ("w2", (512, 10)), ("b2", (10,)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "float.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return str(tmp_path / "qdq.onnx"), 8 * 3 * 3 * 3 + 512 * 10


def test_qdq_model_at_all_is_planned_as_its_qlinear_graph(tmp_path):
    from onnxmem.planning.pipeline import PlanOptions, plan_model

    path, int8_bytes = _qdq_model(tmp_path)
    # onnxmem has no shape rule for com.microsoft QLinearConv yet: measured shapes
    planned = plan_model(path, PlanOptions(optimize="all", measure_shapes=True))
    ops = set(planned.plan.op_types)
    assert {"QLinearConv", "QGemm"} <= ops
    assert "Conv" not in ops and "Gemm" not in ops
    # weights at their int8 size (plus int32 biases, scales and zero points), not float's 4 bytes each
    assert int8_bytes <= planned.plan.weights_size < int8_bytes + 256
    float_plan = plan_model(str(tmp_path / "float.onnx"))
    assert float_plan.plan.weights_size > 3 * planned.plan.weights_size
    out = tmp_path / "q.json"
    assert run("plan", path, "--optimize", "all", "--measure-shapes", "-o", out).exit_code == 0
    r = run("verify", path, "--plan", out)
    assert r.exit_code == 0, r.output


def test_zoo_optimize_all_on_a_one_model_list(tmp_path):
    listing = tmp_path / "zoo.txt"
    shutil.copy(MODELS / "resnet_cnn.onnx", tmp_path)  # a list's models lie in its folder
    listing.write_text("resnet_cnn.onnx\n")
    r = run("zoo", listing, "--optimize", "all", "--verify", "cpu", "--out", tmp_path / "out", "--executor", "inline")
    assert r.exit_code == 0, r.output
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    (row,) = results["models"]
    assert row["status"] == "ok" and row["verify"] == "pass"
    plan = json.loads((tmp_path / "out" / "plans" / "resnet_cnn.json").read_text())
    assert plan["model"]["optimization"]["level"] == "all"
    assert results["options"]["optimize"] == "all"


def test_a_malformed_record_is_refused():
    with pytest.raises(PlanError, match="model/optimization .* needs level"):
        plan_optimization({"optimization": {"level": "fast", "provider": "cpu", "onnxruntime": "1"},
                           "graph_sha256": "0" * 64})


@pytest.mark.cuda
@pytest.mark.skipif(not cuda_available(), reason="onnxruntime's CUDA provider cannot run here")
@pytest.mark.parametrize("level", ["basic", "all"])
def test_cuda_graph_plans_and_verifies(tmp_path, level):
    out = tmp_path / "p.json"
    r = run("plan", MODELS / "resnet_cnn.onnx", "--optimize", level, "--device", "cuda", "--alignment", "256",
            "-o", out)
    assert r.exit_code == 0, r.output
    opt = json.loads(out.read_text())["model"]["optimization"]
    assert opt["provider"] == "cuda" and "nchwc_block" not in opt
    r = run("verify", MODELS / "resnet_cnn.onnx", "--plan", out, "--device", "cuda")
    assert r.exit_code == 0, r.output
    line = one_line_error(run("verify", MODELS / "resnet_cnn.onnx", "--plan", out))
    assert "for --device cuda, not --device cpu" in line


def _pools_model(path) -> None:
    """x[1,32,8,8] -> MaxPool -> Relu -> GlobalAveragePool: at ALL on CPU onnxruntime reorders x
    into NCHWc for the pools alone, so no NCHWc Conv weight records the block size."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Relu", ["p"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "pools", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)


def test_all_sizes_a_reorder_for_pools_by_the_block_it_was_built_with(tmp_path):
    """The block size the optimizing session used (recorded in the plan) sizes a ReorderInput
    that only pools read; a file saved by onnxruntime itself does not record it and is refused
    with the reason. Hand count of the plan at ALL: x and its reordered copy 8192 B each, the
    pooled 2048 B twice, the pooled means 128 B twice: peak x + copy = 16384 B."""
    src = tmp_path / "pools.onnx"
    _pools_model(src)
    out = tmp_path / "pools.json"
    r = run("plan", src, "--optimize", "all", "-o", out)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert "ReorderInput" in data["op_types"] and data["arena_size"] == 16384
    r = run("verify", src, "--plan", out)
    assert r.exit_code == 0 and r.output.strip().endswith("verified"), r.output
    saved = tmp_path / "saved.onnx"
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(saved)
    onnxruntime.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    line = one_line_error(run("plan", saved))
    assert "ReorderInput" in line and "block size" in line
