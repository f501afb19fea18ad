"""`onnxmem fit`: the largest value of a ranged dim whose deployment fits, on real files and sessions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.core.sizes import parse_size
from onnxmem.model import load_model
from onnxmem.planning import PlanOptions
from onnxmem.planning.fit import fit_model, fit_to_dict
from onnxmem.runtime import fixed_cost, session_peak

ROOT = Path(__file__).resolve().parent.parent
N = 256
#: the chain's weights: one float matrix N x N
WEIGHTS = N * N * 4
#: its arena per batch row: x and MatMul's output live together (Relu writes over its input)
ARENA_PER_ROW = 2 * N * 4


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``y = Relu(x @ w)``, ``x: float[batch, N]``, ``w: float[N, N]``: hand-computable totals."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", N])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N])
    w = numpy_helper.from_array(np.full((N, N), 0.01, np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path_factory.mktemp("fit") / "chain.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("batch", [1, 7, 100, 1000])
def test_chain_largest_batch_is_exact(chain: Path, batch: int) -> None:
    fixed = 12345
    memory = WEIGHTS + ARENA_PER_ROW * batch + fixed
    fit = fit_model(load_model(chain), chain, memory, {"batch": (1, 1024)}, fixed=fixed).answer
    assert fit.value == batch
    assert fit.at.arena == ARENA_PER_ROW * batch and fit.at.weights == WEIGHTS
    assert fit.at.total == memory and fit.margin == 0
    assert fit.next is not None and fit.next.total == memory + ARENA_PER_ROW > memory
    assert fit.monotone


def test_chain_io_external_adds_inputs_and_outputs(chain: Path) -> None:
    # outside the arena: x and y are N*4 bytes per row each; the arena holds h alone
    per_row = N * 4 + 2 * N * 4
    memory = WEIGHTS + per_row * 50
    fit = fit_model(load_model(chain), chain, memory, {"batch": (1, 1024)}, PlanOptions(io="external")).answer
    assert fit.value == 50
    assert (fit.at.inputs, fit.at.outputs, fit.at.arena) == (N * 4 * 50, N * 4 * 50, N * 4 * 50)


def test_whole_range_fits(chain: Path) -> None:
    fit = fit_model(load_model(chain), chain, 2**30, {"batch": (1, 64)}).answer
    assert fit.value == 64 and fit.next is None and "every value" in fit.reason


def test_frontier_of_two_dims(tmp_path: Path) -> None:
    # y = Relu(x) with x: float[batch, seq, 16]: the arena holds x and y (a graph input is not
    # written over), 2 * 64*batch*seq bytes
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    report = fit_model(load_model(path), path, 2 * 64 * 1200, {"batch": (1, 4), "seq": (1, 1000)})
    assert [f.value for f in report.fits] == [1000, 600, 400, 300]
    assert fit_to_dict(report)["fit"] == {"batch": 4, "seq": 300}


def test_cli_json_keys_and_exact_answer(chain: Path, tmp_path: Path) -> None:
    cache = tmp_path / "fixed.json"
    fixed = fixed_cost("cpu").session
    memory = WEIGHTS + ARENA_PER_ROW * 300 + fixed
    r = run("fit", str(chain), "--memory", str(memory), "--dim", "batch=1:1024", "--json", "--cache", str(cache))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["fit"] == {"batch": 300}
    assert set(data["items"]) == {"weights", "arena", "inputs", "outputs", "kv_cache", "io_outside_arena",
                                  "fixed", "total"}
    assert data["items"]["fixed"] == fixed and data["items"]["total"] == memory and data["margin"] == 0
    assert data["next"]["items"]["total"] == memory + ARENA_PER_ROW
    assert {"reason", "memory", "device", "optimize", "box", "monotone"} <= set(data)
    entry = next(iter(json.loads(cache.read_text()).values()))
    assert entry["session"] == fixed and entry["device"] == "cpu"


def test_cli_text_and_plot(chain: Path, tmp_path: Path) -> None:
    png = tmp_path / "fit.png"
    r = run("fit", str(chain), "--memory", "64MiB", "--dim", "batch=1:1024", "--plot", str(png))
    assert r.exit_code == 0, r.output
    for item in ("weights", "arena", "inputs", "outputs", "fixed", "total", "margin"):
        assert any(line.startswith(item) for line in r.output.splitlines()), item
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_smallest_does_not_fit_exits_2(chain: Path, tmp_path: Path) -> None:
    png = tmp_path / "never.png"
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "100KiB", "--dim", "batch=1:8", "--json",
                                  "--plot", str(png)])
    assert r.exit_code == 2
    data = json.loads(r.stdout)
    assert data["fit"] == {"batch": None}
    over = data["items"]["total"] - 100 * 1024
    assert over > 0 and f"{over:,} B over the memory" in data["reason"]
    assert r.stderr.startswith("error: does not fit: even batch=1 needs") and r.stderr.count("\n") == 1
    assert png.exists()  # the picture shows how far over it is


@pytest.mark.parametrize("text", ["8 GiBs", "-1", "0", "abc", "1e9", "", "9" * 30, "1.5.GiB"])
def test_bad_memory_is_one_line(chain: Path, text: str) -> None:
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", text, "--dim", "batch=1:8"])
    assert r.exit_code == 1 and r.exception is None or isinstance(r.exception, SystemExit)
    assert r.exit_code == 1
    assert r.stderr.startswith("error: --memory") and r.stderr.count("\n") == 1


def test_parse_size_units() -> None:
    assert parse_size("8GiB", "--memory") == 8 * 2**30
    assert parse_size("1.5 kib", "--memory") == 1536
    assert parse_size("2GB", "--memory") == 2 * 10**9
    assert parse_size("4096", "--memory") == 4096
    with pytest.raises(OnnxmemError, match="--memory 'x' is not a size"):
        parse_size("x", "--memory")


def test_needs_a_ranged_dim(chain: Path) -> None:
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "1GiB", "--dim", "batch=4"])
    assert r.exit_code == 1 and "give --dim NAME=LO:HI" in r.stderr


def test_optimize_levels_other_than_none_are_refused(chain: Path) -> None:
    with pytest.raises(OnnxmemError, match="optimize level 'all'"):
        fit_model(load_model(chain), chain, 2**30, {"batch": (1, 8)}, optimize="all")


@pytest.mark.slow
def test_zoo_answer_runs_within_budget(tmp_path: Path) -> None:
    """The Llama-style decoder over its prompt length, at the budget of sequence 45's total rounded
    up to a MiB: the answer's real session (ORT_ENABLE_BASIC, memory patterns off) stays within it.
    (The vision models do not: onnxruntime's arena and kernel scratch go past the plan; docs/fit.md.)"""
    from onnxmem.zoo import materialize

    path = materialize(ROOT / "models" / "zoo" / "llama_4l_dynamic.onnx", tmp_path)
    model = load_model(path)
    fixed = fixed_cost("cpu").session
    box = {"sequence": (1, 2048)}
    total = fit_model(model, path, 2**62, box, fixed=fixed).footprint({"sequence": 45}).total
    budget = -(-total // 2**20) * 2**20
    fit = fit_model(model, path, budget, box, fixed=fixed).answer
    assert fit.value is not None and fit.value >= 45
    assert fit.next is not None and fit.next.total > budget
    peak = session_peak(path, {"input_ids": (1, fit.value)}, level="ORT_ENABLE_BASIC", mem_pattern=False).peak
    assert peak <= budget


def test_bad_cache_and_output_paths_are_one_line(chain: Path, tmp_path: Path) -> None:
    bad = tmp_path / "cache.json"
    bad.write_text("[1, 2")
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "1GiB", "--dim", "batch=1:8", "--cache", str(bad)])
    assert r.exit_code == 1 and "is not a fixed-cost cache" in r.stderr and r.stderr.count("\n") == 1
    assert bad.read_text() == "[1, 2"
    r = CliRunner().invoke(main, ["fit", str(chain), "--memory", "1GiB", "--dim", "batch=1:8", "--plot", str(chain)])
    assert r.exit_code == 1 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert chain.read_bytes()[:1] != b"\x89"
