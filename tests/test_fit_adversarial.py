"""`onnxmem fit` under hostile flags and models: a one-line error or an answer the point plans confirm."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.core.sizes import parse_size
from onnxmem.model import load_model
from onnxmem.planning import PlanOptions, plan_model
from onnxmem.planning.fit import fit_model
from onnxmem.runtime import footprint
from tests.helpers import batch_chain, saved_model

ROOT = Path(__file__).resolve().parent.parent
N = 256


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _one_line_error(r, code: int = 1) -> str:
    """The command failed with ``code`` and one line on stderr, no traceback."""
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == code, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``y = Relu(x @ w)``, ``x: float[batch, N]``."""
    return saved_model(tmp_path_factory, batch_chain(N), "fit_adv")


@pytest.mark.parametrize("text", ["9" * 400, "1" + "0" * 29 + "GiB", "9" * 5000])
def test_memory_with_huge_digits_is_one_line(chain: Path, text: str) -> None:
    # a number past a float's range was an OverflowError traceback
    err = _one_line_error(_invoke("fit", str(chain), "--memory", text, "--dim", "batch=1:8", "--runtime", "plan"))
    assert err.startswith("error: --memory")


def test_memory_is_read_exactly() -> None:
    # 2^53 + 1 bytes: a float rounds it to 2^53
    assert parse_size(str(2**53 + 1), "--memory") == 2**53 + 1
    assert parse_size("0.1KiB", "--memory") == 102  # 102.4 bytes, rounded down: never above what was given
    assert parse_size(str(2**62 - 1), "--memory") == 2**62 - 1
    with pytest.raises(OnnxmemError, match="over 2"):
        parse_size(str(2**62), "--memory")


def test_memory_in_other_scripts_digits_is_refused() -> None:
    # Python's \\d and float() read Arabic-Indic digits: "\u0663MiB" was taken as 3 MiB
    with pytest.raises(OnnxmemError, match="is not a size"):
        parse_size("\u0663MiB", "--memory")


@pytest.mark.parametrize("dims", [("batch=1:8", "batch=1:64"), ("batch=1:64", "batch=1:8"), ("batch=3", "batch=4")])
def test_a_dim_given_twice_is_refused(chain: Path, dims: tuple[str, str]) -> None:
    # the later --dim replaced the earlier one silently: fit answered over a range the user did not give first
    args = ["fit", str(chain), "--memory", "1GiB", "--runtime", "plan", "--optimize", "none"]
    for d in dims:
        args += ["--dim", d]
    err = _one_line_error(_invoke(*args))
    assert "'batch' is given twice" in err


@pytest.fixture()
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixed cost as a new process knows it: nothing kept from an earlier command."""
    monkeypatch.setattr(footprint, "_memo", {})


@pytest.mark.parametrize("value", ["Infinity", "1e300", "true", "1.5"])
def test_a_hostile_fixed_cost_cache_entry_is_measured_again(chain: Path, tmp_path: Path, value: str,
                                                             fresh_process: None) -> None:
    # Infinity was an OverflowError traceback; 1e300 bytes was taken as the fixed cost (and written back)
    cache = tmp_path / "fixed.json"
    assert _invoke("fit", str(chain), "--memory", "64MiB", "--dim", "batch=1:8", "--runtime", "plan",
                   "--cache", str(cache)).exit_code == 0
    key, entry = next(iter(json.loads(cache.read_text()).items()))
    cache.write_text(json.dumps({key: {**entry, "session": "@"}}).replace('"@"', value))
    footprint._memo.clear()
    r = _invoke("fit", str(chain), "--memory", "64MiB", "--dim", "batch=1:8", "--runtime", "plan", "--json",
                "--cache", str(cache))
    assert r.exception is None and r.exit_code == 0, r.output
    fixed = json.loads(r.stdout)["items"]["fixed"]
    assert 2**20 < fixed < 2**30  # measured: a one-node session costs a few MiB
    assert json.loads(cache.read_text())[key]["session"] == fixed


def test_a_good_fixed_cost_cache_entry_is_used(chain: Path, tmp_path: Path, fresh_process: None) -> None:
    cache = tmp_path / "fixed.json"
    assert _invoke("fit", str(chain), "--memory", "64MiB", "--dim", "batch=1:8", "--runtime", "plan",
                   "--cache", str(cache)).exit_code == 0
    key, entry = next(iter(json.loads(cache.read_text()).items()))
    cache.write_text(json.dumps({key: {**entry, "session": 12345}}))
    footprint._memo.clear()
    r = _invoke("fit", str(chain), "--memory", "64MiB", "--dim", "batch=1:8", "--runtime", "plan", "--json",
                "--cache", str(cache))
    assert json.loads(r.stdout)["items"]["fixed"] == 12345


def test_a_negative_margin_is_signed_in_bytes_too(chain: Path) -> None:
    # the margin read "-7.42 MiB (7,775,232 B)": its exact count without the sign
    r = _invoke("fit", str(chain), "--memory", "1KiB", "--dim", "batch=1:8", "--runtime", "plan")
    assert r.exit_code == 2
    margin = next(line for line in r.stdout.splitlines() if line.startswith("margin"))
    total = int(next(line for line in r.stdout.splitlines() if line.startswith("total")).split("(")[1].split(" B")[0]
                .replace(",", ""))
    assert margin.split()[1].startswith("-") and f"(-{total - 1024:,} B)" in margin


def _strided_cnn(tmp_path: Path) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_models", ROOT / "models" / "build_models.py")
    assert spec is not None and spec.loader is not None
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    model = models.strided_cnn()
    model.ir_version = 10
    path = tmp_path / "strided_cnn.onnx"
    onnx.save(model, str(path))
    return path


def _point_total(path: Path, point: dict[str, int]) -> int:
    plan = plan_model(path, PlanOptions(dims=point)).plan
    return plan.weights_size + plan.arena_size


def test_strided_image_height_is_searched_on_every_residue_class(tmp_path: Path) -> None:
    # a stride over H makes sizes polynomials only per residue class: fit refused the model outright
    path = _strided_cnn(tmp_path)
    memory = _point_total(path, {"H": 81, "W": 64})
    report = fit_model(load_model(path), path, memory, {"H": (64, 96)}, PlanOptions(dims={"W": 64}),
                       optimize="none", runtime="plan")
    fit = report.answer
    assert fit.value is not None and 81 <= fit.value < 96
    assert fit.at.total == _point_total(path, {"H": fit.value, "W": 64}) <= memory
    assert fit.next is not None and fit.next.total == _point_total(path, {"H": fit.value + 1, "W": 64}) > memory
    assert fit.at.inputs == 3 * fit.value * 64 * 4  # the image, read on its residue class


@pytest.mark.heavy
def test_strided_image_height_on_the_command_line(tmp_path: Path) -> None:
    """The memory is the measured fixed cost (kept in --cache, so both runs count the same one,
    whatever this machine measures) plus the plan's total at H=500: the answer is bracketed."""
    path, cache = _strided_cnn(tmp_path), tmp_path / "fixed.json"
    flags = ["--dim", "H=64:1024", "--dim", "W=64", "--optimize", "none", "--runtime", "plan", "--cache", str(cache)]
    r = _invoke("fit", str(path), "--memory", "1GiB", *flags, "--json")
    assert r.exit_code == 0, r.output
    memory = json.loads(r.stdout)["items"]["fixed"] + _point_total(path, {"H": 500, "W": 64})
    r = _invoke("fit", str(path), "--memory", str(memory), *flags, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["planned"] == "range" and data["fit"]["H"] >= 500
    assert data["items"]["total"] <= memory < data["next"]["items"]["total"]
    r = _invoke("fit", str(path), "--memory", str(memory), *flags)
    assert "   32 pieces   " in r.stdout  # the plan's pieces, one per residue class of the stride 32


@pytest.mark.parametrize("dim", ["batch=1_0:2_0", "batch=\u0663:8", "batch=1:\uff18"])
def test_a_range_in_other_than_ascii_digits_is_refused(chain: Path, dim: str) -> None:
    # int() read "1_0" as 10 and Arabic-Indic or full-width digits as numbers
    err = _one_line_error(_invoke("fit", str(chain), "--memory", "1GiB", "--dim", dim, "--runtime", "plan"))
    assert "is not NAME=LO:HI" in err


def test_fit_without_a_range_names_the_dims_it_can_range(tmp_path: Path) -> None:
    """The error names the graph inputs' dims left unbound (what --dim NAME=LO:HI can range), the
    others to bind, and says so where none is left; a weight's dims are never offered."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "z"], ["s"]), helper.make_node("Add", ["s", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", 4]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, ["wdim"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), str(path))
    err = _one_line_error(_invoke("fit", str(path), "--memory", "1GiB"))
    assert "declare batch, seq, all unbound; range one (--dim batch=1:1024) and bind the others (--dim seq=N)" in err
    assert "wdim" not in err
    err = _one_line_error(_invoke("fit", str(path), "--memory", "1GiB", "--dim", "seq=8"))
    assert "declare batch, unbound; range it (--dim batch=1:1024)" in err
    err = _one_line_error(_invoke("fit", str(path), "--memory", "1GiB", "--dim", "seq=8", "--dim", "batch=2"))
    assert "batch is bound to 2; range it instead (--dim batch=1:1024)" in err
    err = _one_line_error(_invoke("fit", str(ROOT / "models" / "resnet_cnn.onnx"), "--memory", "1GiB"))
    assert "resnet_cnn.onnx' declare no named dim; plan it at its one shape (onnxmem plan MODEL)" in err
    assert not list(tmp_path.glob("*.json"))
