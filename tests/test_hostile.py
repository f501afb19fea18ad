"""Hostile files and outputs: every case is one line on stderr, exit 1, and no file written.

Each case builds real files under ``tmp_path`` (models with ``onnx.helper``,
plans written by ``onnxmem plan``, CSVs, links, FIFOs), runs the real CLI, and
checks that the folder is byte for byte what it was before: nothing written,
replaced or left behind.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli import main
from onnxmem.errors import OnnxmemError, one_line, show_name
from onnxmem.fileio import OutputSet

from .helpers import make_model, vi

ROOT = Path(__file__).resolve().parents[1]


def snapshot(folder: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under ``folder``: kind and content (links by target), without following links."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            mode = os.lstat(p).st_mode
            rel = str(p.relative_to(folder))
            if stat.S_ISLNK(mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(mode):
                out[rel] = ("file", p.read_bytes())
            else:
                out[rel] = ("dir" if stat.S_ISDIR(mode) else "other", "")
    return out


def assert_refused(args: list[str], folder: Path, pattern: str | None = None) -> str:
    """Run the CLI; assert exit 1, one ``error:`` line, no traceback, ``folder`` unchanged."""
    before = snapshot(folder)
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 1, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    if pattern is not None:
        assert pattern in lines[0], lines[0]
    assert snapshot(folder) == before
    return lines[0]


def run_subprocess(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, killed after 60 s (a read that blocks fails the test, not hangs it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "onnxmem", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def assert_refused_subprocess(args: list[str], folder: Path, pattern: str) -> None:
    before = snapshot(folder)
    r = run_subprocess(args, folder)
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and pattern in lines[0], r.stderr
    assert snapshot(folder) == before


# ---------------------------------------------------------------- models


def relu_model() -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])])


def matmul_model(w: TensorProto) -> onnx.ModelProto:
    """x[1,4] @ w[4,4] -> y; ``w`` may keep its data outside the file."""
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                      [vi("x", [1, 4])], [vi("y", [1, 4])], [w])


WEIGHTS = np.arange(16, dtype=np.float32).reshape(4, 4)


def external_weight(location: str | bytes, name: str = "w", **keys: str) -> TensorProto:
    w = helper.make_tensor(name, TensorProto.FLOAT, [4, 4], vals=[0.0] * 16)
    del w.float_data[:]
    w.data_location = TensorProto.EXTERNAL
    e = w.external_data.add()
    e.key = "location"
    e.value = location if isinstance(location, str) else "LOCATION"
    for k, v in keys.items():
        w.external_data.add(key=k, value=v)
    return w


def save_model(folder: Path, model: onnx.ModelProto, name: str = "m.onnx") -> Path:
    p = folder / name
    p.write_bytes(model.SerializeToString())
    return p


def external_case(case: str, folder: Path) -> tuple[Path, str]:
    """A model folder with one hostile external-data reference; returns the model and the expected words."""
    model_dir = folder / "model"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(WEIGHTS.tobytes())
    (folder / "secret.bin").write_bytes(WEIGHTS.tobytes())
    expect = {
        "missing file": ("absent.bin", {}, "does not exist"),
        "length past the end": ("w.bin", {"length": "128"}, "past the end"),
        "length huge": ("w.bin", {"length": "1" + "0" * 30}, "not a non-negative decimal integer"),
        "length NaN": ("w.bin", {"length": "NaN"}, "not a non-negative decimal integer"),
        "length negative": ("w.bin", {"length": "-64"}, "not a non-negative decimal integer"),
        "offset not a number": ("w.bin", {"offset": "12abc"}, "not a non-negative decimal integer"),
        "offset past the end": ("w.bin", {"offset": "65"}, "past the end"),
        "length wrong for the dtype": ("w.bin", {"length": "32"}, "takes 64"),
        "NUL byte": ("w.bin\0../secret.bin", {}, "NUL byte"),
        "absolute path": (str(folder / "secret.bin"), {}, "absolute path"),
        "dot dot": ("../secret.bin", {}, "outside the model's folder"),
        "link out of the folder": ("out.bin", {}, "outside the model's folder"),
        "link loop": ("loop_a", {}, "cannot be read"),
        "a folder": ("sub", {}, "not a regular file"),
        "a FIFO": ("pipe", {}, "not a regular file"),
        "not text": (b"\xff\xfe.bin", {}, "not text"),
    }
    location, keys, words = expect[case]
    (model_dir / "out.bin").symlink_to(folder / "secret.bin")
    (model_dir / "loop_a").symlink_to(model_dir / "loop_b")
    (model_dir / "loop_b").symlink_to(model_dir / "loop_a")
    (model_dir / "sub").mkdir()
    os.mkfifo(model_dir / "pipe")
    model = matmul_model(external_weight(location, **keys))
    data = model.SerializeToString()
    if isinstance(location, bytes):  # invalid UTF-8 in a string field reads back as bytes
        data = data.replace(b"LOCATION", location[:8].ljust(8, b"_"))
    path = model_dir / "m.onnx"
    path.write_bytes(data)
    return path, words


EXTERNAL_CASES = ["missing file", "length past the end", "length huge", "length NaN", "length negative",
                  "offset not a number", "offset past the end", "length wrong for the dtype", "NUL byte",
                  "absolute path", "dot dot", "link out of the folder", "link loop", "a folder", "a FIFO",
                  "not text"]
WEIGHT_COMMANDS = {
    "verify": ["verify", "{m}"],
    "compare": ["compare", "{m}"],
    "plan --measure-shapes": ["plan", "{m}", "--measure-shapes"],
    "plan": ["plan", "{m}", "-o", "{out}"],
}


@pytest.mark.parametrize("command", list(WEIGHT_COMMANDS))
@pytest.mark.parametrize("case", EXTERNAL_CASES)
def test_hostile_external_data(case, command, tmp_path):
    model, words = external_case(case, tmp_path)
    args = [a.format(m=model, out=tmp_path / "plan.json") for a in WEIGHT_COMMANDS[command]]
    if command == "plan" and case == "missing file":
        # planning reads shapes only: a data file that is not there yet is no error
        result = CliRunner().invoke(main, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / "plan.json").read_text())["arena_size"] > 0
        return
    assert_refused(args, tmp_path, words)


def test_external_weights_that_are_fine_are_read_and_run(tmp_path):
    # the checked reader gives onnxruntime the very bytes of the data file
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(b"\0" * 8 + WEIGHTS.tobytes())
    model = save_model(model_dir, matmul_model(external_weight("w.bin", offset="8", length="64")))
    from onnxmem.model import load_model
    from onnxmem.runtime import load_with_weights

    full = load_with_weights(load_model(model), model)
    assert np.array_equal(numpy_helper.to_array(full.graph.initializer[0]), WEIGHTS)
    r = CliRunner().invoke(main, ["verify", str(model)])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "verified" in r.stdout


# ---------------------------------------------------------------- input files


def fifo(folder: Path, name: str = "pipe") -> Path:
    p = folder / name
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("command", [
    ["plan", "{dev}"], ["show", "{dev}"], ["verify", "{dev}"], ["pack", "{dev}"],
    ["plot", "{dev}", "-o", "{folder}/p.html"], ["verify", "{model}", "--plan", "{dev}"],
    ["verify", "{model}", "--inputs", "{dev}"], ["zoo", "{dev}"], ["zoo", "{folder}", "--baseline", "{dev}"],
], ids=lambda c: " ".join(c[:1] + c[2:3]))
@pytest.mark.parametrize("device", ["/dev/zero", "FIFO"])
def test_input_that_is_not_a_regular_file(device, command, tmp_path):
    dev = str(fifo(tmp_path)) if device == "FIFO" else device
    model = save_model(tmp_path, relu_model())
    args = [a.format(dev=dev, folder=tmp_path, model=model) for a in command]
    assert_refused_subprocess(args, tmp_path, "not a regular file")


@pytest.mark.parametrize("command,size", [
    (["plan", "{f}"], 2**31), (["show", "{f}"], 2**28 + 1), (["verify", "{m}", "--plan", "{f}"], 2**28 + 1),
    (["pack", "{f}"], 2**30 + 1),
], ids=["model", "plan", "verify plan", "csv"])
def test_input_over_its_size_bound(command, size, tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as fh:  # sparse: no disk used
        fh.truncate(size)
    model = save_model(tmp_path, relu_model())
    args = [a.format(f=big, m=model) for a in command]
    assert_refused(args, tmp_path, "more than the")


def test_input_through_a_link_loop(tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    assert_refused(["show", tmp_path / "a.json"], tmp_path, "cannot open plan file")


# ---------------------------------------------------------------- plans


@pytest.fixture
def planned(tmp_path):
    """A model and the plan ``onnxmem plan`` wrote for it, in ``tmp_path``."""
    model = save_model(tmp_path, relu_model())
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", str(model), "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    return model, json.loads(out.read_text())


def _set(data, path, value):
    *head, last = path
    for k in head:
        data = data[k]
    data[last] = value


def hostile_plan(case: str, plan: dict, model: Path) -> tuple[bytes, str]:
    """The bytes of a corrupted plan, and words its error must contain."""
    edits = {
        "offset 2^70": (("tensors", 0, "offset"), 2**70, "not below 2^62"),
        "size 2^62": (("tensors", 0, "size"), 2**62, "not below 2^62"),
        "float offset": (("tensors", 0, "offset"), 1.5, "is not of type 'integer'"),
        "integral float offset": (("tensors", 0, "offset"), 64.0, "is not of type 'integer'"),
        "string size": (("tensors", 0, "size"), "64", "is not of type 'integer'"),
        "end past the order": (("tensors", 0, "end"), 99, "not inside the 1 steps"),
        "empty lifetime": (("tensors", 0, "start"), 1, "empty or not inside"),
        "peak step past the order": (("peak_step",), 5, "past the last"),
        "arena 2^70": (("arena_size",), 2**70, "not below 2^62"),
        "negative offset": (("tensors", 0, "offset"), -64, "less than the minimum"),
        "null tensors": (("tensors",), None, "is not of type 'array'"),
        "huge seconds": (("plan_seconds",), 1e400, "finite"),
    }
    if case in edits:
        path, value, words = edits[case]
        _set(plan, path, value)
        text = json.dumps(plan)
        return text.replace("Infinity", "1e400").encode(), words
    if case == "NaN":
        return json.dumps(plan).replace('"plan_seconds": ', '"plan_seconds": NaN, "x": ').encode(), "NaN"
    if case == "invalid UTF-8":
        return json.dumps(plan).encode().replace(b'"r"', b'"\xff\xfe"'), "not UTF-8"
    if case == "nested 100,000 deep":
        return ("[" * 100_000 + "]" * 100_000).encode(), "too deep"
    if case == "nested 70 deep in extra":
        plan["extra"] = {"x": json.loads("[" * 70 + "]" * 70)}
        return json.dumps(plan).encode(), "more than 64 deep"
    if case == "a 5,000-digit integer":
        return json.dumps(plan).replace('"arena_size": ', '"arena_size": ' + "9" * 5000 + ", \"y\": ").encode(), "digits"
    if case == "a model given as the plan":
        return model.read_bytes(), "give the JSON plan"
    if case == "truncated":
        return json.dumps(plan).encode()[:100], "not JSON"
    if case == "empty":
        return b"", "not JSON"
    raise KeyError(case)


PLAN_CASES = ["offset 2^70", "size 2^62", "float offset", "integral float offset", "string size",
              "end past the order", "empty lifetime", "peak step past the order", "arena 2^70",
              "negative offset", "null tensors", "huge seconds", "NaN", "invalid UTF-8",
              "nested 100,000 deep", "nested 70 deep in extra", "a 5,000-digit integer",
              "a model given as the plan", "truncated", "empty"]


@pytest.mark.parametrize("command", ["show", "plot", "verify", "verify --static-only"])
@pytest.mark.parametrize("case", PLAN_CASES)
def test_hostile_plan(case, command, planned, tmp_path):
    model, plan = planned
    data, words = hostile_plan(case, plan, model)
    bad = tmp_path / "bad.json"
    bad.write_bytes(data)
    args = {
        "show": ["show", bad],
        "plot": ["plot", bad, "-o", tmp_path / "p.html"],
        "verify": ["verify", model, "--plan", bad],
        "verify --static-only": ["verify", model, "--plan", bad, "--static-only"],
    }[command]
    assert_refused(args, tmp_path, words)


def test_hostile_plan_carried_by_an_annotated_model(planned, tmp_path):
    # verify reads the plan an annotated model carries by the same strict rules
    model, plan = planned
    annotated = onnx.load(model)
    annotated.metadata_props.add(key="onnxmem.plan", value="[" * 100_000 + "]" * 100_000)
    path = save_model(tmp_path, annotated, "annotated.onnx")
    assert_refused(["verify", path], tmp_path, "too deep")
    del annotated.metadata_props[:]
    plan["tensors"][0]["offset"] = 2**70
    annotated.metadata_props.add(key="onnxmem.plan", value=json.dumps(plan))
    path = save_model(tmp_path, annotated, "annotated.onnx")
    assert_refused(["verify", path], tmp_path, "not below 2^62")


def test_show_and_plot_on_a_model_file(planned, tmp_path):
    model, _ = planned
    # a model with weights is not UTF-8; the small one is, and is not JSON
    weights = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], WEIGHTS.tobytes(), raw=True)
    heavy = save_model(tmp_path, matmul_model(weights), "heavy.onnx")
    for path, words in ((model, "is not JSON"), (heavy, "is not UTF-8 text")):
        assert_refused(["show", path], tmp_path, words)
        assert_refused(["plot", path, "-o", tmp_path / "p.svg"], tmp_path, words)


# ---------------------------------------------------------------- CSVs


CSV_CASES = {
    "negative lower": (b"id,lower,upper,size\na,-1,2,8\n", "starts at step -1"),
    "size 1e30": (b"id,lower,upper,size\na,0,2,1e30\n", "not an integer"),
    "size 10^30": (b"id,lower,upper,size\na,0,2,1" + b"0" * 30 + b"\n", "not an integer of at most 20 digits"),
    "size 2^62 + 1": (b"id,lower,upper,size\na,0,2,4611686018427387905\n", "above 2^62"),
    "times past 2^62": (b"id,lower,upper,size\na,0,4611686018427387905,8\n", "above 2^62"),
    "overlapping 2^62 buffers": (b"id,lower,upper,size\na,0,2,4611686018427387904\n"
                                 b"b,1,3,4611686018427387904\n", "past 2^62"),
    "overlapping 2^61 buffers": (b"id,lower,upper,size\na,0,2,2305843009213693952\n"
                                 b"b,1,3,2305843009213693952\n", "past 2^62"),
    "field over the csv limit": (b"id,lower,upper,size\n" + b"a" * 200_000 + b",0,2,8\n", "field limit"),
    "non-UTF-8": (b"id,lower,upper,size\n\xff\xfe,0,2,8\n", "not UTF-8"),
    "name with a newline": (b'id,lower,upper,size\n"a\nerror: forged",0,0,8\n', "lifetime [0, 0)"),
    "empty lifetime": (b"id,lower,upper,size\na,3,3,8\n", "non-empty"),
}


@pytest.mark.parametrize("solver", ["greedy", "exact"])
@pytest.mark.parametrize("case", list(CSV_CASES))
def test_hostile_csv(case, solver, tmp_path):
    data, words = CSV_CASES[case]
    csv = tmp_path / "p.csv"
    csv.write_bytes(data)
    line = assert_refused(["pack", csv, "--solver", solver, "-o", tmp_path / "out.csv"], tmp_path, words)
    if case == "name with a newline":
        assert "'a\\nerror: forged'" in line


def test_csv_capacity_past_the_bound(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_bytes(b"id,lower,upper,size\na,0,2,8\n")
    assert_refused(["pack", csv, "--capacity", str(2**70)], tmp_path, "above 2^62")


def test_csv_times_up_to_2_62_are_solved_exactly(tmp_path):
    # far-apart times are no reason to allocate per step, and the bound is exact
    csv = tmp_path / "p.csv"
    csv.write_bytes(b"id,lower,upper,size\na,0,4611686018427387904,10\nb,1,2,5\nc,2,4611686018427387904,7\n")
    r = CliRunner().invoke(main, ["pack", str(csv), "--solver", "greedy"])
    assert r.exit_code == 0, r.stderr
    assert "lower bound  17" in r.stdout and "height       17" in r.stdout


@pytest.mark.parametrize("solver", ["greedy", "exact", "naive", "shared-greedy"])
def test_csv_at_the_bound_is_exact(solver, tmp_path):
    # two overlapping buffers whose sizes sum to just under 2^62: no int64 overflow anywhere
    size = 2**61 - 2
    csv = tmp_path / "p.csv"
    csv.write_text(f"id,lower,upper,size\na,0,2,{size}\nb,1,3,{size}\n")
    out = tmp_path / "o.csv"
    r = CliRunner().invoke(main, ["pack", str(csv), "--solver", solver, "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert f"lower bound  {2 * size:,}" in r.stdout and f"height       {2 * size:,}" in r.stdout
    rows = out.read_text().splitlines()[1:]
    assert sorted(int(row.split(",")[4]) for row in rows) == [0, size]


# ---------------------------------------------------------------- outputs


def model_with_bad_attribute() -> onnx.ModelProto:
    """Plans (shapes are declared) but fails onnx.checker, so its annotated form cannot be written."""
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    node.attribute.extend([helper.make_attribute("bogus", 1)])
    m = make_model([node], [vi("x", [1, 4])], [vi("y", [1, 4])])
    return m


def test_output_is_the_input_model(tmp_path):
    model = save_model(tmp_path, relu_model())
    assert_refused(["plan", model, "-o", model], tmp_path, "is the input file")


def test_output_is_a_link_to_the_input_model(tmp_path):
    model = save_model(tmp_path, relu_model())
    (tmp_path / "link.json").symlink_to(model)
    assert_refused(["plan", model, "-o", tmp_path / "link.json"], tmp_path, "is a symbolic link")


def test_output_is_a_link_out_of_its_folder(tmp_path):
    """Writing through a link would write where the user did not name: refused, target untouched."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.bin").write_bytes(b"keep")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "plan.json").symlink_to("../outside/keep.bin")
    model = save_model(tmp_path, relu_model())
    assert_refused(["plan", model, "-o", tmp_path / "out" / "plan.json"], tmp_path, "is a symbolic link")
    assert (tmp_path / "outside" / "keep.bin").read_bytes() == b"keep"


def test_output_is_a_hard_link_to_the_input_model(tmp_path):
    model = save_model(tmp_path, relu_model())
    os.link(model, tmp_path / "hard.json")
    assert_refused(["plan", model, "-o", tmp_path / "hard.json"], tmp_path, "is the input file")


def test_plan_and_annotate_to_one_path(tmp_path):
    model = save_model(tmp_path, relu_model())
    out = tmp_path / "x.onnx"
    assert_refused(["plan", model, "-o", out, "--annotate", out], tmp_path, "also the output of -o")


def test_output_over_the_external_data(tmp_path):
    (tmp_path / "w.bin").write_bytes(WEIGHTS.tobytes())
    model = save_model(tmp_path, matmul_model(external_weight("w.bin")))
    assert_refused(["plan", model, "-o", tmp_path / "w.bin"], tmp_path, "is the input file")


def test_annotate_that_fails_leaves_no_plan(tmp_path):
    # the plan JSON is rendered, the annotated model fails onnx.checker: neither is written
    model = save_model(tmp_path, model_with_bad_attribute())
    assert_refused(["plan", model, "-o", tmp_path / "plan.json", "--annotate", tmp_path / "a.onnx"],
                   tmp_path, "fails onnx.checker")


def test_annotate_away_from_external_data_leaves_no_plan(tmp_path):
    (tmp_path / "w.bin").write_bytes(WEIGHTS.tobytes())
    (tmp_path / "elsewhere").mkdir()
    model = save_model(tmp_path, matmul_model(external_weight("w.bin")))
    assert_refused(["plan", model, "-o", tmp_path / "plan.json", "--annotate", tmp_path / "elsewhere" / "a.onnx"],
                   tmp_path, "only resolve next to it")


@pytest.mark.parametrize("command", [
    ["plan", "{m}", "-o", "/dev/full"], ["plan", "{m}", "--annotate", "/dev/null"],
    ["plot", "{p}", "-o", "{fifo}"], ["pack", "{csv}", "-o", "/dev/full"],
    ["generate", "transformer", "/dev/full"], ["zoo", "{d}", "--write-baseline", "/dev/full"],
], ids=["plan -o", "plan --annotate", "plot -o", "pack -o", "generate", "zoo --write-baseline"])
def test_output_that_is_a_device_or_fifo_is_never_replaced(command, tmp_path):
    zoo_dir = tmp_path / "zoo"
    zoo_dir.mkdir()
    model = save_model(tmp_path, relu_model())
    save_model(zoo_dir, relu_model())
    plan = tmp_path / "plan.json"
    assert CliRunner().invoke(main, ["plan", str(model), "-o", str(plan)]).exit_code == 0
    csv = tmp_path / "p.csv"
    csv.write_bytes(b"id,lower,upper,size\na,0,2,8\n")
    pipe = fifo(tmp_path, "pipe.html")
    args = [a.format(m=model, p=plan, csv=csv, fifo=pipe, d=zoo_dir) for a in command]
    assert_refused(args, tmp_path, "not a regular file")
    for dev in ("/dev/full", "/dev/null"):
        assert stat.S_ISCHR(os.stat(dev).st_mode)


@pytest.mark.parametrize("command", [
    ["pack", "{csv}", "-o", "{csv}"], ["plot", "{html}", "-o", "{html}"],
    ["zoo", "{d}", "--baseline", "{base}", "--write-baseline", "{base}"],
], ids=["pack", "plot", "zoo baseline"])
def test_output_that_is_the_input(command, tmp_path):
    zoo_dir = tmp_path / "zoo"
    zoo_dir.mkdir()
    save_model(zoo_dir, relu_model())
    csv = tmp_path / "p.csv"
    csv.write_bytes(b"id,lower,upper,size\na,0,2,8\n")
    model = save_model(tmp_path, relu_model())
    html = tmp_path / "plan.html"
    assert CliRunner().invoke(main, ["plan", str(model), "-o", str(html)]).exit_code == 0
    base = tmp_path / "base.json"
    base.write_text('{"arena_size": {}}')
    args = [a.format(csv=csv, html=html, d=zoo_dir, base=base) for a in command]
    assert_refused(args, tmp_path, "is the input file")


def test_output_folder_missing(tmp_path):
    model = save_model(tmp_path, relu_model())
    assert_refused(["plan", model, "-o", tmp_path / "plan.json", "--annotate", tmp_path / "no" / "a.onnx"],
                   tmp_path, "does not exist")


def test_a_failed_rename_puts_back_the_outputs_already_replaced(tmp_path, monkeypatch):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("old a")
    outs = OutputSet()
    outs.add(first, "-o")
    outs.add(second, "--annotate")
    outs.put(first, "new a")
    outs.put(second, "new b")
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(dst) == second:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OnnxmemError, match="No space left on device"):
        outs.commit()
    monkeypatch.undo()
    assert first.read_text() == "old a" and not second.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_outputs_are_written_together(tmp_path):
    model = save_model(tmp_path, relu_model())
    r = CliRunner().invoke(main, ["plan", str(model), "-o", str(tmp_path / "p.json"),
                                  "--annotate", str(tmp_path / "a.onnx")])
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp_path / "p.json").read_text())["arena_size"] > 0
    assert onnx.load(tmp_path / "a.onnx").metadata_props
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "m.onnx", "p.json"]


# ---------------------------------------------------------------- names


def test_show_name_escapes_and_cuts():
    assert show_name("a\nb") == "'a\\nb'"
    assert show_name("\x1b[31mred") == "'\\x1b[31mred'"
    assert show_name(b"\xff") == "'\\\\xff'"
    assert show_name("n" * 500).endswith("... (500 characters)")
    assert one_line("x\ny\rz\x00") == "x\\ny\\rz\\x00"


@pytest.mark.parametrize("command", ["plan", "verify"])
def test_names_with_newlines_print_escaped(command, tmp_path):
    # a tensor name that would forge a second line of output stays on the first, escaped
    name = "w\nerror: all good\x1b[2J"
    model = save_model(tmp_path, matmul_model(external_weight("absent/../../x.bin", name=name)))
    line = assert_refused([command, model], tmp_path, "outside the model's folder")
    assert "'w\\nerror: all good\\x1b[2J'" in line


@pytest.mark.parametrize("command", ["verify", "compare"])
def test_weights_whose_data_does_not_match_their_shape(tmp_path, command):
    """An initializer with 256 bytes of data for 16 floats: one line, before any array is made."""
    w = numpy_helper.from_array(np.ones(64, np.float32), "w")
    del w.dims[:]
    w.dims.extend([16])
    m = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [16])], [vi("y", [16])], inits=[w])
    model = save_model(tmp_path, m)
    assert_refused([command, model], tmp_path, "holds 256 bytes of data where it needs 64")


def test_a_measuring_run_that_takes_too_long_is_stopped(tmp_path):
    """A legal but slow run (ten 512x512 MatMuls over 8,000 rows): stopped at --time-limit, in one line."""
    w = numpy_helper.from_array(np.full((512, 512), 0.01, np.float32), "w")
    names = ["x"] + [f"h{i}" for i in range(10)]
    nodes = [helper.make_node("MatMul", [names[i], "w"], [names[i + 1]]) for i in range(10)]
    m = make_model(nodes, [vi("x", ["n", 512])], [vi(names[-1], None)], inits=[w])
    model = save_model(tmp_path, m)
    assert_refused(["plan", model, "--measure-shapes", "--dim", "n=8000", "--time-limit", "0.01"], tmp_path,
                   "the run of the model to measure shapes did not finish in 0.01 s and was stopped")
