"""No output of any command may be one of its inputs.

Every command's every output option is given, in turn, the path of each kind of
input that command reads (the model, the plan, ``--inputs``, a model's external
data file, a zoo's models, list and baseline): the command must stop with a
one-line error and a non-zero exit, and the input must keep its bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxmem.cli.main import main

from .helpers import make_model, vi


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def relu_chain(dim: str | int, n: int = 3) -> onnx.ModelProto:
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Relu", [prev], [out], name=f"relu{i}"))
        prev = out
    return make_model(nodes, [vi("x", [dim, 16])], [vi("y", [dim, 16])])


def with_external_weight() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((2, 16), np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["y"], name="r")]
    return make_model(nodes, [vi("x", [2, 16])], [vi("y", [2, 16])], inits=[w])


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """A folder with one input file of each kind, and the plans made from them."""
    d = tmp_path_factory.mktemp("io")
    onnx.save(relu_chain("n"), d / "m.onnx")
    onnx.save(relu_chain("n", 2), d / "m2.onnx")
    onnx.save(with_external_weight(), d / "e.onnx", save_as_external_data=True, location="e.data",
              size_threshold=0)
    np.savez(d / "in.npz", x=np.ones((2, 16), np.float32))
    (d / "p.csv").write_text("id,lower,upper,size\na,0,2,64\nb,1,3,64\n")
    assert run("plan", str(d / "m.onnx"), "--dim", "n=2", "-o", str(d / "p.json")).exit_code == 0
    assert run("plan", str(d / "m.onnx"), "--dim", "n=1:4", "-o", str(d / "r.json")).exit_code == 0
    (d / "z").mkdir()
    onnx.save(relu_chain(2), d / "z" / "a.onnx")
    (d / "list.txt").write_text("z/a.onnx\n")
    (d / "base.json").write_text('{"schema_version": 1, "arena_size": {}}\n')
    return d


#: (command line, the input its output is pointed at); {d}: the folder of ``files``
CASES = [
    ("plan {d}/m.onnx --dim n=2 -o {d}/m.onnx", "m.onnx"),
    ("plan {d}/m.onnx --dim n=2 --annotate {d}/m.onnx", "m.onnx"),
    ("plan {d}/m.onnx --dim n=2 --inputs {d}/in.npz -o {d}/in.npz", "in.npz"),
    ("plan {d}/m.onnx --dim n=2 --inputs {d}/in.npz --annotate {d}/in.npz", "in.npz"),
    ("plan {d}/m.onnx --dim n=2 --budget 1KiB --rewrite-out {d}/m.onnx", "m.onnx"),
    ("plan {d}/m.onnx --dim n=2 --budget-sweep {d}/m.onnx", "m.onnx"),
    ("plan {d}/m.onnx --dim n=1:4 -o {d}/m.onnx", "m.onnx"),
    ("plan {d}/m.onnx --dim n=1:4 --inputs {d}/in.npz -o {d}/in.npz", "in.npz"),
    ("plan {d}/m.onnx {d}/m2.onnx --dim n=2 -o {d}/m2.onnx", "m2.onnx"),
    ("plan {d}/e.onnx -o {d}/e.data", "e.data"),
    ("plan {d}/e.onnx --annotate {d}/e.data", "e.data"),
    ("plan {d}/e.onnx --optimize basic -o {d}/e.data", "e.data"),
    ("plan {d}/e.onnx --budget 1KiB -o {d}/e.data", "e.data"),
    ("plan {d}/e.onnx --dim n=1:4 -o {d}/e.data", "e.data"),
    ("pack {d}/p.csv -o {d}/p.csv", "p.csv"),
    ("export {d}/p.json --format json -o {d}/p.json", "p.json"),
    ("export {d}/p.json --format c -o {d}/p.json", "p.json"),
    ("export {d}/p.json --format tflm --model {d}/m.onnx -o {d}/m.onnx", "m.onnx"),
    ("export {d}/p.json --format onnx --model {d}/m.onnx -o {d}/m.onnx", "m.onnx"),
    ("export {d}/r.json --format c -o {d}/r.json", "r.json"),
    ("instantiate {d}/r.json --dim n=2 -o {d}/r.json", "r.json"),
    ("plot {d}/p.json -o {d}/p.json", "p.json"),
    ("plot {d}/p.json --model {d}/m.onnx -o {d}/m.onnx", "m.onnx"),
    ("zoo {d}/z --out {d}/res --write-baseline {d}/z/a.onnx", "z/a.onnx"),
    ("zoo {d}/list.txt --out {d}/res --write-baseline {d}/list.txt", "list.txt"),
    ("zoo {d}/list.txt --out {d}/res --write-baseline {d}/z/a.onnx", "z/a.onnx"),
    ("zoo {d}/z --out {d}/res --baseline {d}/base.json --write-baseline {d}/base.json", "base.json"),
]


@pytest.mark.parametrize("line,target", CASES, ids=[c[0].split(" {d}")[0] + f"->{c[1]}" for c in CASES])
def test_an_output_never_replaces_an_input(files, line, target):
    before = (files / target).read_bytes()
    r = run(*line.format(d=files).split())
    assert r.exit_code != 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert "input" in lines[0], lines[0]
    assert (files / target).read_bytes() == before


def test_a_zoo_output_under_out_is_no_model_of_the_zoo(tmp_path):
    """A model listed at the path the run would write its plan to (OUT/plans/NAME.json)."""
    (tmp_path / "res" / "plans").mkdir(parents=True)
    model = tmp_path / "res" / "plans" / "a.json"
    onnx.save(relu_chain(2), model)
    before = model.read_bytes()
    (tmp_path / "list.txt").write_text("res/plans/a.json\n")
    r = run("zoo", str(tmp_path / "list.txt"), "--out", str(tmp_path / "res"))
    assert r.exit_code != 0 and "input" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert model.read_bytes() == before
