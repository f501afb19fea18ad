"""`onnxmem zoo` against hostile or broken user files: a list or catalogue from a pull request,
a hand-edited baseline, model strings made to inject into the reports, and a Ray cluster that is
not there. Every case runs the real CLI on small real models."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem import __version__
from onnxmem.cli.main import main
from onnxmem.zoo import (
    ZooModel,
    ZooOptions,
    ZooResult,
    run_model,
    run_zoo,
    strip_weights,
    write_baseline,
)
from tests.helpers import HANG_S


def relu_model(input_name: str = "x", width: int = 64, nodes: int = 2) -> onnx.ModelProto:
    """input[1, width] -> Relu x nodes -> y."""
    names = [input_name] + [f"r{i}" for i in range(nodes - 1)] + ["y"]
    graph = helper.make_graph(
        [helper.make_node("Relu", [a], [b], name=f"relu{i}") for i, (a, b) in enumerate(zip(names, names[1:]))],
        "g", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def zoo(tmp_path: Path, entries: list[dict] | None = None) -> Path:
    """A folder ``z`` with a.onnx and b.onnx and a catalogue of ``entries`` (default: a and b)."""
    folder = tmp_path / "z"
    folder.mkdir()
    onnx.save(relu_model(), folder / "a.onnx")
    onnx.save(relu_model(nodes=3), folder / "b.onnx")
    entries = entries if entries is not None else [{"name": "a", "file": "a.onnx"}, {"name": "b", "file": "b.onnx"}]
    (folder / "catalog.json").write_text(json.dumps({"models": entries}))
    return folder / "catalog.json"


def run_cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["zoo", *args, "--executor", "inline", "--model-timeout", "0"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.exit_code, res.output


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


# --------------------------------------------------------------------------- names and paths


@pytest.mark.parametrize("name", ["../../evil", "a/b", "..", ".hidden", "", "a\nb", "red\x1b[31m", "=cmd()",
                                  "x" * 201])
def test_a_catalogue_name_that_cannot_name_a_file_is_refused_before_anything_is_written(tmp_path, name):
    catalog = zoo(tmp_path, [{"name": name, "file": "a.onnx"}])
    before = files_under(tmp_path)
    code, output = run_cli(str(catalog), "--out", str(tmp_path / "out"))
    assert code == 1 and "cannot name a model" in output and "rename it" in output
    assert "\x1b" not in output and len(output.strip().splitlines()) == 1
    assert files_under(tmp_path) == before  # no plan written at out/plans/../../evil.json, no results


def test_a_model_file_whose_name_holds_an_escape_sequence_is_refused(tmp_path):
    folder = tmp_path / "z"
    folder.mkdir()
    onnx.save(relu_model(), folder / "e\x1b[31m.onnx")
    (tmp_path / "zoo.txt").write_text("z/e\x1b[31m.onnx\n")
    for source in (folder, tmp_path / "zoo.txt"):
        code, output = run_cli(str(source), "--out", str(tmp_path / "out"))
        assert code == 1 and "cannot name a model" in output and "\x1b" not in output
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["dotdot", "absolute", "link"])
@pytest.mark.parametrize("form", ["list", "catalogue"])
def test_a_model_file_outside_the_lists_folder_is_refused(tmp_path, how, form):
    onnx.save(relu_model(), tmp_path / "outside.onnx")
    folder = tmp_path / "z"
    folder.mkdir()
    file = {"dotdot": "../outside.onnx", "absolute": str(tmp_path / "outside.onnx"), "link": "link.onnx"}[how]
    if how == "link":
        os.symlink(tmp_path / "outside.onnx", folder / "link.onnx")
    if form == "list":
        (folder / "zoo.txt").write_text(f"{file}\n")
        source = folder / "zoo.txt"
    else:
        (folder / "catalog.json").write_text(json.dumps({"models": [{"name": "m", "file": file}]}))
        source = folder / "catalog.json"
    code, output = run_cli(str(source), "--out", str(tmp_path / "out"))
    assert code == 1 and "outside the zoo's folder; copy it into the folder" in output
    assert not (tmp_path / "out").exists()


def test_a_model_file_path_with_a_nul_byte_is_a_one_line_error(tmp_path):
    catalog = zoo(tmp_path, [{"name": "m", "file": "a.onnx\x00.txt"}])
    code, output = run_cli(str(catalog), "--out", str(tmp_path / "out"))
    assert code == 1 and "NUL byte" in output and "Traceback" not in output


def test_duplicate_names_are_refused_naming_them(tmp_path):
    catalog = zoo(tmp_path, [{"name": "m", "file": "a.onnx"}, {"name": "m", "file": "b.onnx"}])
    code, output = run_cli(str(catalog), "--out", str(tmp_path / "out"))
    assert code == 1 and "several models named 'm'" in output and "rename all but one" in output
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- the reports


def test_model_strings_reach_the_reports_and_the_terminal_as_text(tmp_path):
    """A graph input named like rich markup and HTML fails to plan (its dim is unbound): the
    progress line, the table and results.md show the error as text, and the run goes on."""
    folder = tmp_path / "z"
    folder.mkdir()
    hostile = "in[/]<img src=x onerror=alert(1)>"
    model = relu_model(hostile)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, folder / "bad.onnx")
    onnx.save(relu_model(), folder / "good.onnx")
    (folder / "catalog.json").write_text(json.dumps({"models": [
        {"name": "bad", "file": "bad.onnx"}, {"name": "good", "file": "good.onnx"},
        {"name": "x<img src=x onerror=alert(2)>", "file": "good.onnx"}]}))
    out = tmp_path / "out"
    code, output = run_cli(str(folder / "catalog.json"), "--out", str(out))
    assert code == 1, output  # bad failed; the others ran
    assert "in[/]" in output and "Traceback" not in output  # the progress line printed it, no MarkupError
    rows = {m["name"]: m for m in json.loads((out / "results.json").read_text())["models"]}
    assert rows["bad"]["status"] == "failed" and rows["good"]["status"] == "ok"
    assert rows["x<img src=x onerror=alert(2)>"]["status"] == "ok"
    md = (out / "results.md").read_text()
    assert "<img" not in md and "x&lt;img src=x onerror=alert(2)&gt;" in md
    assert "in\\[/\\]&lt;img" in md


def test_two_models_whose_files_share_a_name_get_a_runnable_copy_each(tmp_path):
    """Weight-free files d1/m.onnx and d2/m.onnx (different graphs) verified in one run: each is
    verified from its own copy, not the one the other left in out/models."""
    folder = tmp_path / "z"
    for sub, nodes in (("d1", 2), ("d2", 4)):
        (folder / sub).mkdir(parents=True)
        model = relu_model(width=512, nodes=nodes)
        weight = numpy_helper.from_array(np.linspace(-1, 1, 512, dtype=np.float32).reshape(1, 512), "w")
        model.graph.initializer.append(weight)
        model.graph.node.append(helper.make_node("Add", ["y", "w"], ["z"], name="add"))
        model.graph.output[0].name = "z"
        stripped, removed = strip_weights(model, "m")
        assert removed == 2048
        onnx.save(stripped, folder / sub / "m.onnx")
    (folder / "catalog.json").write_text(json.dumps({"models": [
        {"name": "x", "file": "d1/m.onnx"}, {"name": "y", "file": "d2/m.onnx"}]}))
    out = tmp_path / "out"
    code, output = run_cli(str(folder / "catalog.json"), "--out", str(out), "--verify", "cpu")
    assert code == 0, output
    rows = {m["name"]: m for m in json.loads((out / "results.json").read_text())["models"]}
    assert (rows["x"]["nodes"], rows["y"]["nodes"]) == (3, 5)
    assert {p.name for p in (out / "models").iterdir()} == {"x.onnx", "x.onnx.data", "y.onnx", "y.onnx.data"}


def test_a_runnable_copy_may_not_replace_an_input_model(tmp_path):
    """The zoo is out/models itself: the copy of its weight-free model would be written over it."""
    folder = tmp_path / "out" / "models"
    folder.mkdir(parents=True)
    model = relu_model(width=512)
    model.graph.initializer.append(numpy_helper.from_array(np.ones((1, 512), np.float32), "w"))
    model.graph.node.append(helper.make_node("Add", ["y", "w"], ["z"], name="add"))
    model.graph.output[0].name = "z"
    onnx.save(strip_weights(model, "m")[0], folder / "m.onnx")
    before = (folder / "m.onnx").read_bytes()
    code, output = run_cli(str(folder), "--out", str(tmp_path / "out"), "--verify", "cpu")
    assert code == 1 and "would destroy the input" in output
    assert (folder / "m.onnx").read_bytes() == before and not (tmp_path / "out" / "results.json").exists()


# --------------------------------------------------------------------------- the baseline


@pytest.mark.parametrize("text,message", [
    ('{"arena_size": {"a": Infinity}}', "Infinity is not a JSON number"),
    ('{"arena_size": {"a": NaN}}', "NaN is not a JSON number"),
    ('{"arena_size": {"a": -5, "b": 512}}', "entry 'a': arena -5 is not a byte count"),
    ('{"arena_size": {"a": 512, "b": 1e30}}', "entry 'b': arena 1e+30 is not a byte count"),
    ('{"arena_size": {"a": 512.5}}', "entry 'a': arena 512.5 is not a byte count"),
    ('{"arena_size": {"a": true}}', "entry 'a': arena true is not a byte count"),
    ('{"arena_size": {"a": "999999"}}', "entry 'a': arena \"999999\" is not a byte count"),
    ('{"arena_size": {"a": 1, "a": 999999}}', "key 'a' is given twice"),
    ('{"arena_size": {}}', "records no model"),
    ('{"arena_size": {"zz": 1}}', "records none of the 2 models of this run"),
    ('{"schema_version": 2, "arena_size": {"a": 512}}', "schema_version '2'"),
    ('{"arena_size": [1]}', "no 'arena_size' object"),
    ('{"arena_size": {"a": 512', "cannot be read"),
    ('\xff\xfe', "cannot be read"),
])
def test_a_broken_baseline_is_an_error_before_the_run(tmp_path, text, message):
    catalog = zoo(tmp_path)
    (tmp_path / "base.json").write_bytes(text.encode("latin-1"))
    code, output = run_cli(str(catalog), "--out", str(tmp_path / "out"), "--baseline", str(tmp_path / "base.json"))
    assert code == 1 and message in output and "base.json" in output, output
    assert "rewrite it with --write-baseline" in output or "write one with --write-baseline" in output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before any model ran


def test_what_a_baseline_leaves_unchecked_is_said(tmp_path):
    catalog = zoo(tmp_path)
    out, base = tmp_path / "out", tmp_path / "base.json"
    assert run_cli(str(catalog), "--out", str(out), "--write-baseline", str(base))[0] == 0
    doc = json.loads(base.read_text())
    assert doc["made_with"]["onnxmem"] == __version__ and doc["made_with"]["onnxruntime"]
    doc["made_with"]["onnxmem"] = "0.0.1"
    doc["arena_size"]["gone"] = doc["arena_size"].pop("b")
    base.write_text(json.dumps(doc))
    code, output = run_cli(str(catalog), "--out", str(out), "--baseline", str(base))
    assert code == 0, output
    assert f"made with onnxmem '0.0.1' (now {__version__})" in output
    assert "model 'b' is not in baseline" in output and "entry 'gone' names no model of the zoo" in output


def test_a_plan_that_failed_verification_is_not_written_to_the_baseline(tmp_path):
    results = [ZooResult("ok", "ok.onnx", "ok", arena_size=64), ZooResult("bad", "bad.onnx", "wrong", arena_size=8)]
    write_baseline(results, tmp_path / "base.json")
    assert json.loads((tmp_path / "base.json").read_text())["arena_size"] == {"ok": 64}


# --------------------------------------------------------------------------- executors


def crashing_run(model: ZooModel, options: ZooOptions) -> ZooResult:
    """run_model, except that model 'a' kills its own process as a crashing kernel would."""
    if model.name == "a":
        os.kill(os.getpid(), signal.SIGSEGV)
    return run_model(model, options)


@pytest.mark.parametrize("executor", ["local", "inline"])
def test_a_model_whose_process_crashes_is_reported_and_the_run_goes_on(tmp_path, executor):
    onnx.save(relu_model(), tmp_path / "m.onnx")
    models = [ZooModel("a", tmp_path / "m.onnx"), ZooModel("b", tmp_path / "m.onnx")]
    results = run_zoo(models, ZooOptions(executor=executor, jobs=2, model_timeout=HANG_S), task=crashing_run)
    assert [(r.name, r.status) for r in results] == [("a", "failed"), ("b", "ok")]
    assert "signal 11" in (results[0].error or "")


@pytest.mark.parametrize("address,message", [
    ("127.0.0.1:9", "no Ray head answers there"),
    ("ray://127.0.0.1:9", "no Ray head answers there"),
    ("nowhere", "is not HOST:PORT"),
    ("\x1b[31m:1", "no Ray head answers there"),
])
def test_ray_at_an_address_that_does_not_answer_is_a_one_line_error(tmp_path, monkeypatch, address, message):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", address)
    catalog = zoo(tmp_path)
    res = CliRunner().invoke(main, ["zoo", str(catalog), "--out", str(tmp_path / "out"), "--executor", "ray"])
    assert res.exit_code == 1 and message in res.output and "\x1b" not in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_ray_missing_is_a_one_line_error(tmp_path, monkeypatch):
    """A Python without Ray (a 'ray' module that cannot be imported stands for it)."""
    import subprocess
    import sys

    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no ray here')\n")
    catalog = zoo(tmp_path)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(tmp_path / "noray")])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "onnxmem", "zoo", str(catalog), "--out", str(tmp_path / "out"),
                           "--executor", "ray"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "--executor ray needs Ray: pip install 'onnxmem[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("key,value,shown", [
    ("dims", {"batch": -1}, "key 'dims' entry 'batch' holds -1"),
    ("dims", {"batch": 0}, "key 'dims' entry 'batch' holds 0"),
    ("dims", {"batch": True}, "key 'dims' entry 'batch' holds true"),
    ("dims", {"batch": 2.7}, "key 'dims' entry 'batch' holds 2.7"),
    ("dims", {"batch": 10**23}, "key 'dims' entry 'batch' holds 100000000000000000000000"),
    ("input_shapes", {"x": [True, 64]}, "key 'input_shapes' entry 'x' holds true"),
    ("input_shapes", {"x": [-1, 64]}, "key 'input_shapes' entry 'x' holds -1"),
])
def test_a_catalogue_dim_that_is_not_a_positive_integer_is_refused(tmp_path, key, value, shown):
    """Not rounded (2.7 -> 2), not read as 1 (true), not passed on to fail inside the planner."""
    catalog = zoo(tmp_path, [{"name": "a", "file": "a.onnx", key: value}])
    code, output = run_cli(str(catalog), "--out", str(tmp_path / "out"))
    assert code == 1 and shown in output and "not a positive integer up to 2^40" in output, output
    assert not (tmp_path / "out").exists()


def test_a_list_dim_past_the_limit_is_refused(tmp_path):
    zoo(tmp_path)
    (tmp_path / "z" / "zoo.txt").write_text("a.onnx batch=100000000000000000000000\n")
    code, output = run_cli(str(tmp_path / "z" / "zoo.txt"), "--out", str(tmp_path / "out"))
    assert code == 1 and "zoo.txt:1: dim 'batch' holds 100000000000000000000000" in output, output


def stalling_run(model: ZooModel, options: ZooOptions) -> ZooResult:
    """Writes this process's id to the work folder, then never ends (a model that hangs)."""
    import time

    assert options.work_dir is not None
    (options.work_dir / f"{model.name}.pid").write_text(str(os.getpid()))
    time.sleep(600)
    return ZooResult(model.name, str(model.path), "ok")


def test_a_run_killed_outright_leaves_no_model_process_running(tmp_path):
    """SIGKILL (a CI job cancelled, the OOM killer) gives the run no time to stop its children:
    each model's process dies with it, instead of running on (a model that hangs, forever)."""
    import subprocess
    import sys
    import time

    onnx.save(relu_model(), tmp_path / "m.onnx")
    script = (
        "import sys; from pathlib import Path\n"
        "from onnxmem.zoo import ZooModel, ZooOptions, run_zoo\n"
        "from test_zoo_adversarial import stalling_run\n"
        "work = Path(sys.argv[1])\n"
        "run_zoo([ZooModel('a', work / 'm.onnx')], ZooOptions(executor='local', work_dir=work,"
        " model_timeout=600), task=stalling_run)\n"
    )
    root = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root.parent), str(root)])}
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env)
    try:
        pid_file = tmp_path / "a.pid"
        for _ in range(600):
            if pid_file.is_file() and pid_file.read_text():
                break
            time.sleep(0.1)
        child = int(pid_file.read_text())
    finally:
        proc.kill()
        proc.wait()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail(f"model process {child} ran on after its run was killed")


@pytest.mark.parametrize("stats", ["mean=nan std=1 min=-1 max=1", "mean=0 std=inf min=-inf max=inf",
                                   "mean=0 std=-1 min=1 max=-1", "mean=0 std=1 min=1 max=-1"])
def test_a_fixture_with_statistics_that_cannot_fill_it_fails_as_that_model(tmp_path, stats):
    """Not a model of NaN or infinite weights that verifies, not an internal error: the model
    fails with the initializer and the rule, and the run goes on."""
    folder = tmp_path / "z"
    folder.mkdir()
    model = relu_model(width=512)
    model.graph.initializer.append(numpy_helper.from_array(np.ones((1, 512), np.float32), "w\x1b"))
    model.graph.node.append(helper.make_node("Add", ["y", "w\x1b"], ["z"], name="add"))
    model.graph.output[0].name = "z"
    stripped = strip_weights(model, "m")[0]
    stripped.graph.initializer[0].doc_string = f"onnxmem.fill {stats}"
    onnx.save(stripped, folder / "m.onnx")
    onnx.save(relu_model(), folder / "ok.onnx")
    out = tmp_path / "out"
    code, output = run_cli(str(folder), "--out", str(out), "--verify", "cpu")
    assert code == 1, output
    rows = {m["name"]: m for m in json.loads((out / "results.json").read_text())["models"]}
    assert rows["ok"]["status"] == "ok" and rows["m"]["status"] == "failed"
    assert "initializer 'w\\x1b' has malformed statistics" in rows["m"]["error"]
    assert "finite numbers, S >= 0, A <= B" in rows["m"]["error"] and "internal error" not in rows["m"]["error"]
    assert not (out / "models" / "m.onnx").exists()


@pytest.mark.parametrize("text,message", [
    ('{"models": ' + "[" * 100_000 + "]" * 100_000 + "}", "it nests arrays or objects too deep"),
    ('{"models": [{"name": "a", "file": "a.onnx", "name": "b"}]}', "key 'name' is given twice"),
])
def test_a_catalogue_nested_too_deep_or_with_a_key_twice_is_a_one_line_error(tmp_path, text, message):
    catalog = zoo(tmp_path)
    catalog.write_text(text)
    code, output = run_cli(str(catalog), "--out", str(tmp_path / "out"))
    assert code == 1 and f"cannot be read: {message}" in output and "Traceback" not in output, output[-500:]


def test_a_baseline_nested_too_deep_is_a_one_line_error(tmp_path):
    catalog = zoo(tmp_path)
    (tmp_path / "base.json").write_text('{"arena_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, output = run_cli(str(catalog), "--out", str(tmp_path / "out"), "--baseline", str(tmp_path / "base.json"))
    assert code == 1 and "nests arrays or objects too deep" in output and "Traceback" not in output, output[-500:]
    assert not (tmp_path / "out").exists()
