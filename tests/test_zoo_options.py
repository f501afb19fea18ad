"""A zoo list's per-model options: ``inputs:FILE.npz``, ``branch:IF=then|else`` and
``measure-shapes`` (and the same catalogue keys), so one run plans a mixed catalogue."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError
from onnxmem.zoo import load_zoo

from .helpers import make_model, vi
from .nested_models import if_sample_rate


def nonzero_model() -> onnx.ModelProto:
    """x[2,3] -> NonZero -> Cast: a shape only a run measures (``--measure-shapes``)."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT)]
    return make_model(nodes, [vi("x", [2, 3])], [vi("y", [2, None])])


@pytest.fixture
def zoo_dir(tmp_path):
    onnx.save(nonzero_model(), tmp_path / "nz.onnx")
    onnx.save(if_sample_rate(), tmp_path / "if_sr.onnx")
    np.savez(tmp_path / "sr16k.npz", sr=np.array(16000, dtype=np.int64))
    return tmp_path


def _run(listing, out, *flags):
    return CliRunner().invoke(main, ["zoo", str(listing), "--out", str(out), "--executor", "inline",
                                     "--model-timeout", "0", *flags])


def test_one_list_plans_a_model_that_needs_measured_shapes_and_one_that_needs_values(zoo_dir):
    listing = zoo_dir / "zoo.txt"
    listing.write_text("nz.onnx measure-shapes\nif_sr.onnx x=8x64 inputs:sr16k.npz branch:run_net=then\n")
    out = zoo_dir / "out"
    r = _run(listing, out, "--verify", "cpu")
    assert r.exit_code == 0, r.output
    rows = {m["name"]: m for m in json.loads((out / "results.json").read_text())["models"]}
    assert rows["nz"]["options"] == {"measure_shapes": True}
    assert rows["if_sr"]["options"] == {"inputs": "sr16k.npz", "branch": {"run_net": "then_branch"}}
    assert all(row["status"] == "ok" and row["verify"] == "pass" for row in rows.values()), rows
    plan = json.loads((out / "plans" / "if_sr.json").read_text())
    assert plan["extra"]["assumed_inputs"]["sr"]["values"] == [16000]
    assert plan["extra"]["branches_decided"] == {"run_net": {"branch": "then_branch", "inputs": ["sr"]}}
    # NonZero of a random [2, 3] float: all 6 non-zero, y is [2, 6] float
    assert json.loads((out / "plans" / "nz.json").read_text())["lower_bound"] >= 2 * 6 * 4

    # without the options neither model can be planned, and each says why
    listing.write_text("nz.onnx\nif_sr.onnx x=8x64\n")
    r = _run(listing, out)
    assert r.exit_code == 1
    rows = {m["name"]: m for m in json.loads((out / "results.json").read_text())["models"]}
    assert "--measure-shapes" in rows["nz"]["error"] and rows["if_sr"]["status"] == "failed"


def test_catalogue_entries_carry_the_same_options(zoo_dir):
    catalog = zoo_dir / "catalog.json"
    catalog.write_text(json.dumps({"models": [
        {"name": "nz", "file": "nz.onnx", "measure_shapes": True},
        {"name": "sr", "file": "if_sr.onnx", "input_shapes": {"x": [8, 64]}, "input_values": "sr16k.npz",
         "branch": {"run_net": "then"}, "inputs": {"x": ["batch", 64], "sr": []}}]}))
    nz, sr = load_zoo(catalog)
    assert nz.options.measure_shapes and nz.options.inputs is None
    assert sr.options.inputs == (zoo_dir / "sr16k.npz").resolve()
    assert sr.options.values["sr"] == 16000 and sr.options.branches == {"run_net": "then_branch"}
    assert sr.info == {"inputs": {"x": ["batch", 64], "sr": []}}  # the builder's description
    r = _run(catalog, zoo_dir / "out", "--only", "sr")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("words,message", [
    ("inputs:../secret.npz", r"zoo.txt:1: key 'inputs': file .*secret.npz' leads to .*, outside the zoo's folder"),
    ("inputs:missing.npz", r"zoo.txt:1: key 'inputs': file .*missing.npz' does not exist"),
    ("inputs:bad.npz", r"zoo.txt:1: key 'inputs': .*bad.npz' is not an .npz file"),
    ("inputs:sr16k.npz inputs:sr16k.npz", r"zoo.txt:1: key 'inputs' is given 2 times; give one .npz file"),
    ("inputs:", r"zoo.txt:1: key 'inputs' is empty"),
    ("branch:run_net=maybe", r"zoo.txt:1: key 'branch' holds 'run_net=maybe', which is not IF=then or IF=else"),
    ("branch:=then", r"zoo.txt:1: key 'branch' holds '=then'"),
    ("branch:a=then branch:a=else", r"zoo.txt:1: key 'branch' names If 'a' twice"),
    ("measure-shapes measure-shapes", r"zoo.txt:1: 'measure-shapes' is given twice"),
])
def test_bad_list_options_are_one_line_errors_naming_the_line_and_key(zoo_dir, words, message):
    sub = zoo_dir / "zoo"
    sub.mkdir()
    (zoo_dir / "secret.npz").write_bytes((zoo_dir / "sr16k.npz").read_bytes())
    (sub / "sr16k.npz").write_bytes((zoo_dir / "sr16k.npz").read_bytes())
    (sub / "bad.npz").write_bytes(b"not a zip")
    (sub / "if_sr.onnx").write_bytes((zoo_dir / "if_sr.onnx").read_bytes())
    listing = sub / "zoo.txt"
    listing.write_text(f"if_sr.onnx {words}\n")
    with pytest.raises(OnnxmemError, match=message):
        load_zoo(listing)
    r = CliRunner().invoke(main, ["zoo", str(listing), "--out", str(zoo_dir / "out")])
    assert r.exit_code == 1 and r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    assert not (zoo_dir / "out").exists()


@pytest.mark.parametrize("entry,message", [
    ({"measure_shapes": "yes"}, r"model 'm': key 'measure_shapes' is not a boolean; write true or false"),
    ({"branch": ["run_net=then"]}, r"model 'm': key 'branch' is not an object"),
    ({"branch": {"run_net": "other"}}, r"model 'm': key 'branch' holds 'run_net=other'"),
    ({"input_values": 3}, r"model 'm': key 'input_values' is not a path"),
    ({"input_values": "/etc/passwd"},
     r"model 'm': key 'input_values': file '/etc/passwd' leads to .*outside the zoo's folder"),
])
def test_bad_catalogue_options_name_the_entry_and_key(zoo_dir, entry, message):
    catalog = zoo_dir / "catalog.json"
    catalog.write_text(json.dumps({"models": [{"name": "m", "file": "if_sr.onnx", **entry}]}))
    with pytest.raises(OnnxmemError, match=message):
        load_zoo(catalog)
