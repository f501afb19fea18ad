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

from onnxmem.cli.main import main
from onnxmem.core.errors import OnnxmemError, one_line, show_name
from onnxmem.core.fileio import OutputSet

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
            elif stat.S_ISREG(mode):  # a sparse file of gigabytes the test made: its size, time and node
                st = os.lstat(p)
                out[rel] = ("file", p.read_bytes() if st.st_size <= 2**24
                            else f"{st.st_size} {st.st_mtime_ns} {st.st_ino}")
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
    from onnxmem.runtime.ort import load_with_weights

    full = load_with_weights(load_model(model), model)
    assert np.array_equal(numpy_helper.to_array(full.graph.initializer[0]), WEIGHTS)
    r = CliRunner().invoke(main, ["verify", str(model)])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "verified" in r.stdout


def test_damaged_inline_weight_beside_external_ones_is_refused_by_the_runtime(tmp_path):
    """The runtime's reader checks the inline tensors of a model whose other weights are in a data file
    (the external ones are held to their references' lengths as they are read)."""
    from onnxmem.core.errors import ModelError
    from onnxmem.runtime.ort import load_with_weights

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(WEIGHTS.tobytes())
    m = matmul_model(external_weight("w.bin", length="64"))
    bad = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "bad")
    bad.raw_data = b"\0" * 12
    m.graph.initializer.append(bad)
    with pytest.raises(ModelError, match="tensor 'bad' of dtype float32 and shape \\[4\\] holds 12 bytes of data "
                                         "where it needs 16"):
        load_with_weights(m, model_dir / "m.onnx")
    del m.graph.initializer[-1]
    full = load_with_weights(m, model_dir / "m.onnx")
    assert np.array_equal(numpy_helper.to_array(full.graph.initializer[0]), WEIGHTS)


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


def _two_outputs(tmp_path, *old: str) -> tuple[OutputSet, Path, Path]:
    """Outputs a.json and b.json with new text to write; those of ``old`` hold old text first."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    outs = OutputSet()
    for path, label in ((first, "-o"), (second, "--annotate")):
        if path.name in old:
            path.write_text(f"old {path.stem}")
        outs.add(path, label)
        outs.put(path, f"new {path.stem}")
    return outs, first, second


def test_a_failed_rename_puts_back_the_outputs_already_replaced(tmp_path, monkeypatch):
    outs, first, second = _two_outputs(tmp_path, "a.json")
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


@pytest.mark.parametrize("step", ["open", "link", "replace"])
@pytest.mark.parametrize("which", [0, 1])
def test_an_interruption_after_any_step_of_the_writes_leaves_the_old_files(tmp_path, monkeypatch, step, which):
    """A signal's exception (KeyboardInterrupt, as SIGINT raises it) right after a step of the
    writes returns, for either of two outputs: a temporary file just made, a backup link just
    made, a rename just done. The outputs hold their old bytes and nothing else is left."""
    outs, first, second = _two_outputs(tmp_path, "a.json", "b.json")
    real = getattr(os, step)
    seen = []

    def interrupted(*args, **kwargs):
        got = real(*args, **kwargs)
        seen.append(args)
        if len(seen) == which + 1:
            raise KeyboardInterrupt
        return got

    monkeypatch.setattr(os, step, interrupted)
    with pytest.raises(KeyboardInterrupt):
        outs.commit()
    monkeypatch.undo()
    assert first.read_text() == "old a" and second.read_text() == "old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_the_temporaries_of_a_stopped_writer_are_removed_and_no_others(tmp_path):
    """``remove_temporaries(folder, pid)``: the zoo removes what a model's process it stopped left
    in ``--out``; another process's files, and files of the same shape not named by a writer, stay."""
    from onnxmem.core.fileio import remove_temporaries

    names = [".m.json.4242.0a1b.tmp", ".m.json.4242.0a1b.tmp.old", ".m.json.4243.0a1b.tmp", "m.json",
             ".m.json.4242.txt", "x.4242.y.tmp"]
    for name in names:
        (tmp_path / name).write_text("x")
    remove_temporaries(tmp_path, 4242)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
    remove_temporaries(tmp_path / "missing", 4242)  # no folder: nothing to do


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


# ---------------------------------------------------------------- local functions


def call_model(functions: list[onnx.FunctionProto], op: str = "F", extra_nodes=()) -> onnx.ModelProto:
    """x[1,4] -> local::``op`` -> y, with ``functions`` as the model's local functions."""
    m = make_model([helper.make_node(op, ["x"], ["y"], domain="local", name="call"), *extra_nodes],
                   [vi("x", [1, 4])], [vi("y", [1, 4])])
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.extend(functions)
    return m


def local_function(name: str, nodes: list[onnx.NodeProto]) -> onnx.FunctionProto:
    return helper.make_function("local", name, ["a"], ["b"], nodes,
                                [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def constant_function(value: TensorProto, nested: bool = False) -> onnx.FunctionProto:
    """local::F(a) = a + k, k a Constant of ``value`` (inside an If's branches with ``nested``)."""
    k = helper.make_node("Constant", [], ["k"], name="k", value=value)
    if nested:  # the Constant sits in both branches of an If in the function's body
        branches = {f"{b}_branch": helper.make_graph([k], b, [], [vi("k", [4, 4])]) for b in ("then", "else")}
        flag = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True]))
        k_nodes = [flag, helper.make_node("If", ["c"], ["k"], name="if", **branches)]
    else:
        k_nodes = [k]
    return local_function("F", [*k_nodes, helper.make_node("MatMul", ["a", "k"], ["b"])])


@pytest.mark.parametrize("nested", [False, True], ids=["function body", "If inside a function"])
@pytest.mark.parametrize("command", list(WEIGHT_COMMANDS))
@pytest.mark.parametrize("case", ["dot dot", "absolute path", "link out of the folder", "length past the end"])
def test_hostile_external_data_of_a_constant_in_a_local_function(case, command, nested, tmp_path):
    """A function's Constant whose value lies outside the model's folder: refused as an initializer is."""
    model, words = external_case(case, tmp_path)
    weight = onnx.load(model, load_external_data=False).graph.initializer[0]
    save_model(model.parent, call_model([constant_function(weight, nested)]))
    args = [a.format(m=model, out=tmp_path / "plan.json") for a in WEIGHT_COMMANDS[command]]
    line = assert_refused(args, tmp_path, words)
    assert "in local function 'local'::'F'" in line and "'Constant'" in line


def test_external_data_of_a_constant_in_a_local_function_is_read_from_the_model_folder(tmp_path):
    """A function's Constant with its data next to the model: read from there (not from the
    working folder) and run: the output is x @ the file's weights."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(WEIGHTS.tobytes())
    model = save_model(model_dir, call_model([constant_function(external_weight("w.bin"))]))
    from onnxmem.model import load_model
    from onnxmem.runtime.ort import load_with_weights

    full = load_with_weights(load_model(model), model)
    value = full.functions[0].node[0].attribute[0].t
    assert np.array_equal(numpy_helper.to_array(value), WEIGHTS)
    import onnxruntime as ort

    x = np.ones((1, 4), np.float32)
    y = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(y, x @ WEIGHTS)
    r = CliRunner().invoke(main, ["verify", str(model)])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "verified" in r.stdout


def test_damaged_constant_in_a_local_function(tmp_path):
    value = numpy_helper.from_array(np.ones(15, np.float32), "kv")
    del value.dims[:]
    value.dims.extend([4, 4])
    model = save_model(tmp_path, call_model([constant_function(value)]))
    line = assert_refused(["plan", model], tmp_path, "holds 60 bytes of data where it needs 64")
    assert "in local function 'local'::'F'" in line


def chain_of_functions(n: int, calls: int = 1) -> onnx.ModelProto:
    """local::F{k} calls F{k-1} ``calls`` times in a row; F0 is a Relu; the graph calls F{n-1}."""
    functions = [local_function("F0", [helper.make_node("Relu", ["a"], ["b"])])]
    for k in range(1, n):
        names = ["a", *[f"t{i}" for i in range(calls - 1)], "b"]
        functions.append(local_function(f"F{k}", [
            helper.make_node(f"F{k - 1}", [names[i]], [names[i + 1]], domain="local") for i in range(calls)]))
    return call_model(functions, op=f"F{n - 1}")


@pytest.mark.parametrize("command", [["verify"], ["compare"], ["plan", "--measure-shapes"], ["plan"]])
def test_a_deep_chain_of_functions_is_refused_before_it_is_expanded(command, tmp_path):
    """5,000 functions, each calling the next (308 KB): onnxruntime's inliner overflowed its stack."""
    model = save_model(tmp_path, chain_of_functions(5000))
    assert_refused_subprocess([command[0], model, *command[1:]], tmp_path,
                              "local function 'local'::'F25' nests calls and subgraphs 25 deep "
                              "('F25' -> 'F24' -> 'F23' -> ...), past onnxmem's limit of 24")


@pytest.mark.parametrize("command", [["plan"], ["verify"]])
def test_functions_that_double_at_each_level_are_refused_before_they_are_expanded(command, tmp_path):
    """30 functions, each calling the one below twice: 2^29 nodes once inlined, from a 2 KB file."""
    model = save_model(tmp_path, chain_of_functions(30, calls=2))
    assert model.stat().st_size < 4096
    assert_refused_subprocess([command[0], model, *command[1:]], tmp_path,
                              "local function 'local'::'F24' expands to more than 10,000,000 nodes")


def test_a_chain_of_functions_within_the_limits_runs(tmp_path):
    """Ten nested functions, each calling the next twice (512 Relus once inlined): planned and verified."""
    model = save_model(tmp_path, chain_of_functions(10, calls=2))
    r = CliRunner().invoke(main, ["verify", str(model)])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "verified" in r.stdout


@pytest.mark.parametrize("case,words", [
    ("recursive", "local function 'local'::'F' calls itself ('F' -> 'G' -> 'F')"),
    ("duplicate", "defines local function 'local'::'F' twice"),
    ("shadowing", "local function ''::'Relu' has the name of the standard op 'Relu'"),
    ("name", "local function 'local'::'F\\n\\x1b[2J' calls itself"),
])
@pytest.mark.parametrize("command", ["plan", "verify"])
def test_hostile_function_tables(case, words, command, tmp_path):
    relu = [helper.make_node("Relu", ["a"], ["b"])]
    functions = {
        "recursive": [local_function("F", [helper.make_node("G", ["a"], ["b"], domain="local")]),
                      local_function("G", [helper.make_node("F", ["a"], ["b"], domain="local")])],
        "duplicate": [local_function("F", relu), local_function("F", relu)],
        "shadowing": [local_function("F", relu),
                      helper.make_function("", "Relu", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])],
                                           [helper.make_opsetid("", 17)])],
        "name": [local_function("F\n\x1b[2J", [helper.make_node("F\n\x1b[2J", ["a"], ["b"], domain="local")]),
                 local_function("F", relu)],
    }[case]
    model = save_model(tmp_path, call_model(functions))
    assert_refused([command, model], tmp_path, words)


# ---------------------------------------------------------------- flags and weights


DIM_COMMANDS = [["plan"], ["verify"], ["compare"], ["plan", "--measure-shapes"]]


@pytest.mark.parametrize("command", DIM_COMMANDS)
@pytest.mark.parametrize("flag", ["--dim n=9223372036854775808", "--dim n=1099511627777", "--dim n=-1",
                                  "--input-shape x=9223372036854775808x4",
                                  "--input-shape x=4x-1", "--input-shape x=1099511627777x4"])
def test_dims_out_of_bounds(command, flag, tmp_path):
    model = save_model(tmp_path, make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["n", 4])],
                                            [vi("y", ["n", 4])]))
    line = assert_refused([command[0], model, *command[1:], *flag.split()], tmp_path, "a dim must be")
    assert "2^40" in line or ">= 0" in line


def test_dims_out_of_bounds_in_zoo(tmp_path):
    (tmp_path / "zoo").mkdir()
    save_model(tmp_path / "zoo", relu_model())
    assert_refused(["zoo", tmp_path / "zoo", "--out", tmp_path / "results", "--dim", "n=9223372036854775808"],
                   tmp_path, "a dim must be at most 2^40")


@pytest.mark.parametrize("command", ["plan", "verify"])
def test_sparse_initializer_is_refused_by_name(command, tmp_path):
    values = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    indices = helper.make_tensor("w_indices", TensorProto.INT64, [2], [0, 5])
    m = matmul_model(helper.make_tensor("unused", TensorProto.FLOAT, [1], [0.0]))
    del m.graph.initializer[:]
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4, 4]))
    model = save_model(tmp_path, m)
    assert_refused([command, model], tmp_path, "sparse initializer 'w': onnxmem plans models whose weights "
                                               "are dense initializers only")


@pytest.mark.parametrize("command", ["plan", "verify"])
@pytest.mark.parametrize("dims,words", [
    ([4, -4], "tensor 'w' has negative dim -4 on axis 1; the file is damaged"),
    ([2**40, 2**40, 4], "tensor 'w' has dims [1099511627776, 1099511627776, 4], which make more than 2^62 bytes"),
    ([2**62, 2**62], "which make more than 2^62 bytes"),
    ([4, 5], "tensor 'w' of dtype float32 and shape [4, 5] holds 64 bytes of data where it needs 80"),
])
def test_weights_whose_dims_are_wrong(command, dims, words, tmp_path):
    w = numpy_helper.from_array(WEIGHTS, "w")
    del w.dims[:]
    w.dims.extend(dims)
    model = save_model(tmp_path, matmul_model(w))
    assert_refused([command, model], tmp_path, words)


def test_an_if_whose_condition_is_empty_is_one_line(tmp_path):
    """An If's condition of shape [0]: verify stops in one line naming the If and its condition
    (the arena run once indexed the empty array)."""
    branch = {f"{b}_branch": helper.make_graph([helper.make_node(op, ["x"], [f"y_{b}"])], b, [],
                                                 [vi(f"y_{b}", [1, 4])])
              for b, op in (("then", "Relu"), ("else", "Neg"))}
    m = make_model([helper.make_node("If", ["c"], ["y"], name="choose", **branch)],
                   [vi("c", [0], TensorProto.BOOL), vi("x", [1, 4])], [vi("y", [1, 4])])
    model = save_model(tmp_path, m)
    line = assert_refused(["verify", model], tmp_path, "its condition 'c' holds 0 elements")
    assert "'choose'" in line


def test_a_fifo_swapped_in_after_the_checks_is_refused_without_blocking(tmp_path):
    """A data file replaced by a FIFO after the loader checked it: neither the mapped read of
    the weights nor the plain one waits for a writer; one line says what the file is."""
    import threading

    from onnxmem.model.external import _mapped, _read, check_external_data

    (tmp_path / "w.bin").write_bytes(WEIGHTS.tobytes())
    model = matmul_model(external_weight("w.bin", length=str(WEIGHTS.nbytes)))
    (ref,) = check_external_data(model, tmp_path)
    (tmp_path / "w.bin").unlink()
    os.mkfifo(tmp_path / "w.bin")
    got: list[object] = []

    def read() -> None:
        got.append(_mapped(ref, {}))
        try:
            _read(ref)
        except OnnxmemError as exc:
            got.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading the weights waits on a FIFO"
    assert got[0] is None  # not mapped: read, and refused, as any other data file
    assert "not a regular file" in str(got[1]) and "\n" not in str(got[1])


def _run_into(args: list[str], stdout: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process with ``stdout`` (a file descriptor) as its standard output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "onnxmem", *map(str, args)], cwd=cwd, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120)


STDOUT_COMMANDS = [["plan", ROOT / "models" / "resnet_cnn.onnx"], ["verify", ROOT / "models" / "resnet_cnn.onnx"],
                   ["list"], ["--help"], ["--version"]]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", STDOUT_COMMANDS, ids=lambda a: str(a[0]))
def test_standard_output_on_a_full_device_is_one_line(tmp_path, args):
    """``> /dev/full``: every write fails with ENOSPC. It was click's OSError traceback (verify's
    lines, printed in the parent, the same); now one line names standard output and the fix."""
    with open("/dev/full", "w") as full:
        r = _run_into(args, full.fileno(), tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stderr == ("error: cannot write to standard output: No space left on device; send it to a file or "
                        "device with room\n"), r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", STDOUT_COMMANDS, ids=lambda a: str(a[0]))
def test_standard_output_into_a_closed_pipe_ends_quietly(tmp_path, args):
    """A reader that went away (``| head -c1``): no traceback and no message, exit 1."""
    read, write = os.pipe()
    os.close(read)
    try:
        r = _run_into(args, write, tmp_path)
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (1, "")
    assert list(tmp_path.iterdir()) == []


def test_onnxruntimes_log_never_reaches_the_terminal_with_a_models_strings(tmp_path: Path) -> None:
    """An initializer no node reads: onnxruntime's default session (``compare``'s measured one) logs
    a warning naming it as the file spells it, with colour codes. Every session onnxmem makes logs
    fatal messages only, so stderr carries neither the name's bytes nor onnxruntime's log."""
    unused = numpy_helper.from_array(np.ones(4, np.float32), "evil\x1b[31m\nname")
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])],
                       inits=[unused])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    got = run_subprocess(["compare", path], tmp_path)
    assert got.returncode == 0, got.stderr
    assert "measured     default session" in got.stdout
    assert "\x1b" not in got.stderr + got.stdout and "onnxruntime:" not in got.stderr, got.stderr
