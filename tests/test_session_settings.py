"""What every onnxruntime session onnxmem makes is set by: onnxmem and the user's flags, never the
model. Custom op libraries (``--custom-op-library``, here onnxruntime-extensions' real one) are
registered by each session, in this process and in the onnxruntime child; a model's
``ort_config`` (read by onnxruntime where ``ORT_LOAD_CONFIG_FROM_MODEL=1``) is ignored."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxmem.cli.main import main
from onnxmem.plans.reader import read_plan
from onnxmem.runtime.settings import (
    MODEL_CONFIG_VARIABLE,
    check_libraries,
    custom_op_fix,
    session_options,
)


def extensions_library() -> str | None:
    """onnxruntime-extensions' custom op library (the dev extra installs it), found without importing
    the package: its Python module is that library, and once loaded into a process its own protobuf
    changes how onnx there reads a model with invalid UTF-8 (the other tests' expected lines)."""
    spec = importlib.util.find_spec("onnxruntime_extensions")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("_extensions_pydll*")) if spec and \
        spec.submodule_search_locations else []
    return str(found[0]) if found else None


LIBRARY = extensions_library()
pytestmark = pytest.mark.skipif(LIBRARY is None, reason="needs onnxruntime-extensions (pip install -e '.[dev]')")
CONTRIB = "ai.onnx.contrib"
#: the weight whose inverse the model multiplies by (well conditioned)
W = (np.random.RandomState(0).randn(16, 16) * 0.1 + np.eye(16)).astype(np.float32)


def custom_model(batch: int | str = 8, declared: bool = False) -> onnx.ModelProto:
    """x[batch,16] -> Relu -> NegPos (neg, pos) -> Sub -> MatMul by Inverse(w) -> Tanh: two ops of
    onnxruntime-extensions' domain, which neither onnx's inference nor onnxmem's rules size.
    ``declared``: value_info gives their outputs' shapes, as an exporter of custom ops writes them."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("NegPos", ["a"], ["neg", "pos"], domain=CONTRIB, name="negpos"),
             helper.make_node("Sub", ["pos", "neg"], ["b"], name="sub"),
             helper.make_node("Inverse", ["w"], ["winv"], domain=CONTRIB, name="inverse"),
             helper.make_node("MatMul", ["b", "winv"], ["c"], name="matmul"),
             helper.make_node("Tanh", ["c"], ["y"], name="tanh")]
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    info = [f("neg", [batch, 16]), f("pos", [batch, 16]), f("winv", [16, 16])] if declared else []
    graph = helper.make_graph(nodes, "custom", [f("x", [batch, 16])], [f("y", [batch, 16])],
                              [numpy_helper.from_array(W, "w")], value_info=info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(CONTRIB, 1)])
    model.ir_version = 8
    return model


def run(*args: object, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def one_line(r) -> str:
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.output, r.output
    return r.stderr


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "custom.onnx"
    onnx.save(custom_model(), path)
    return path


def test_a_custom_op_without_a_shape_names_the_library_flag(model):
    out = one_line(run("plan", model))
    assert "node 'negpos' (ai.onnx.contrib:NegPos) has no shape rule in onnxmem" in out, out
    assert "pass --measure-shapes with --custom-op-library PATH" in out and "value_info" in out, out


def test_measuring_without_the_library_says_to_give_it(model, tmp_path):
    out = one_line(run("plan", model, "--measure-shapes", "-o", tmp_path / "plan.json"))
    assert "is not a registered function/op" in out and "is a custom op: give the shared library" in out, out
    assert "--custom-op-library PATH" in out, out
    assert not (tmp_path / "plan.json").exists()


def test_measured_with_the_library_the_plan_holds_the_custom_ops_outputs(model, tmp_path):
    r = run("plan", model, "--measure-shapes", "--custom-op-library", LIBRARY, "-o", tmp_path / "plan.json")
    assert r.exit_code == 0, r.output
    plan = read_plan(tmp_path / "plan.json", "point")
    shapes = {t.name: tuple(t.shape) for t in plan.tensors}
    assert shapes["neg"] == shapes["pos"] == (8, 16) and shapes["winv"] == (16, 16)
    # at MatMul: b [8,16] and winv [16,16] are read, c [8,16] written: 512 + 1024 + 512 bytes
    assert plan.arena_size == plan.lower_bound == 512 + 1024 + 512


def test_verify_runs_the_custom_kernels_in_the_arena(model, tmp_path):
    x = np.random.RandomState(1).randn(8, 16).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    r = run("verify", model, "--measure-shapes", "--custom-op-library", LIBRARY, "--inputs", tmp_path / "x.npz",
            "--save-outputs", tmp_path / "y.npz")
    assert r.exit_code == 0, r.output
    assert "y: ok" in r.output and r.output.rstrip().endswith("verified"), r.output
    # NegPos splits relu(x) into its negative part (0) and positive part: pos - neg = relu(x)
    expected = np.tanh(np.maximum(x, 0) @ np.linalg.inv(W))
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("command", [("verify",), ("compare",), ("verify", "--optimize", "all")])
def test_the_commands_that_run_onnxruntime_register_the_library(model, command):
    r = run(*command, model, "--measure-shapes", "--custom-op-library", LIBRARY)
    assert r.exit_code == 0, r.output


def test_a_file_that_is_no_library_is_one_line(model):
    out = one_line(run("verify", model, "--measure-shapes", "--custom-op-library", model))
    assert out.startswith(f"error: --custom-op-library '{os.path.realpath(model)}': onnxruntime cannot load it ("), out
    assert "invalid ELF header" in out, out


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo"])
def test_a_path_that_is_no_file_is_refused_before_any_work(model, tmp_path, kind):
    path = tmp_path / "lib.so"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    out = one_line(run("verify", model, "--custom-op-library", path))
    expected = {"missing": "it does not exist", "folder": "is a folder", "fifo": "is not a regular file"}[kind]
    assert "--custom-op-library file" in out and expected in out, out


def test_a_bare_name_is_the_file_in_the_working_folder(model, tmp_path, monkeypatch):
    """onnxruntime loads a name without a slash from the system's library path; onnxmem hands it
    the file the user named, in the working folder."""
    shutil.copy(LIBRARY, tmp_path / "libcustom.so")
    monkeypatch.chdir(tmp_path)
    assert check_libraries(["libcustom.so", "./libcustom.so"]) == (str(tmp_path / "libcustom.so"),)
    r = run("verify", model, "--measure-shapes", "--custom-op-library", "libcustom.so")
    assert r.exit_code == 0, r.output


def test_no_output_overwrites_a_library(model, tmp_path):
    library = tmp_path / "lib.so"
    shutil.copy(LIBRARY, library)
    before = library.read_bytes()
    out = one_line(run("plan", model, "--measure-shapes", "--custom-op-library", library, "-o", library))
    assert "is the input file" in out, out
    assert library.read_bytes() == before


def test_declared_custom_outputs_size_a_range_and_fit_counts_the_library(tmp_path):
    """value_info on the custom ops' outputs, in the model's dim N: the ops past them are inferred at
    one point and over a range; fit measures onnxruntime's fixed cost with the library loaded (the
    graph onnxruntime builds, fit's default, needs it too)."""
    path = tmp_path / "declared.onnx"
    onnx.save(custom_model("N", declared=True), path)
    r = run("plan", path, "--dim", "N=8", "-o", tmp_path / "point.json")
    assert r.exit_code == 0, r.output
    assert read_plan(tmp_path / "point.json", "point").arena_size == 2048
    r = run("plan", path, "--dim", "N=1:4096", "-o", tmp_path / "range.json")
    assert r.exit_code == 0, r.output
    r = run("instantiate", tmp_path / "range.json", "--dim", "N=8", "-o", tmp_path / "at8.json")
    assert r.exit_code == 0, r.output
    assert read_plan(tmp_path / "at8.json", "point").arena_size == 2048
    fits = {}
    for given in ((), ("--custom-op-library", LIBRARY)):
        r = run("fit", path, "--dim", "N=1:4096", "--memory", "1GiB", "--runtime", "plan", "--optimize", "none",
                "--json", *given)
        assert r.exit_code == 0, r.output
        fits[bool(given)] = json.loads(r.stdout)
    assert fits[True]["fit"] == fits[False]["fit"] == {"N": 4096}
    # the library's code and state are part of the session's fixed cost, measured with it loaded
    assert fits[True]["items"]["fixed"] > fits[False]["items"]["fixed"], fits


def test_a_range_over_an_undeclared_custom_op_names_it(tmp_path):
    path = tmp_path / "undeclared.onnx"
    onnx.save(custom_model("N"), path)
    out = one_line(run("plan", path, "--dim", "N=1:64"))
    assert "unknown over the range" in out and "(ai.onnx.contrib:NegPos) has no shape rule" in out, out
    assert "value_info" in out, out


def test_the_zoo_registers_the_library_in_its_workers(model, tmp_path):
    listing = tmp_path / "zoo.txt"
    listing.write_text(f"{model.name} measure-shapes\n")
    out = tmp_path / "out"
    r = run("zoo", listing, "--out", out, "--verify", "cpu", "--custom-op-library", LIBRARY)
    assert r.exit_code == 0, r.output
    results = json.loads((out / "results.json").read_text())
    assert [(m["status"], m["verify"]) for m in results["models"]] == [("ok", "pass")], results["models"]
    assert results["options"]["custom_op_library"] == [os.path.realpath(LIBRARY)]
    r = run("zoo", listing, "--out", out, "--verify", "cpu")
    assert r.exit_code == 1 and "--custom-op-library" in json.loads((out / "results.json").read_text())["models"][0]["error"]


def test_the_fix_is_for_custom_domains_only():
    message = "[ONNXRuntimeError] : 1 : FAIL : Fatal error: {}:Foo(-1) is not a registered function/op"
    assert custom_op_fix(message.format("com.microsoft"), ()) == ""  # onnxruntime's own domain: a typo, no library
    assert custom_op_fix("Could not find an implementation for Relu(1)", ()) == ""
    assert "'my.ops:Foo' is a custom op: give the shared library" in custom_op_fix(message.format("my.ops"), ())
    given = custom_op_fix(message.format("my.ops"), ("/opt/lib/a.so",))
    assert "none of the custom op libraries given registers 'my.ops:Foo' (--custom-op-library '/opt/lib/a.so')" in given


def test_every_session_registers_the_libraries_of_the_limits_in_force(tmp_path):
    """The library API: ``run_limits(custom_ops=...)`` and each session of ``session_options()``.
    In a process of its own: a library loaded stays loaded (here, its own protobuf beside onnx's)."""
    onnx.save(custom_model(), tmp_path / "m.onnx")
    code = (
        "import sys, numpy as np, onnxruntime as ort\n"
        "from onnxmem.runtime.isolation import run_limits\n"
        "from onnxmem.runtime.settings import check_libraries, session_options\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "try:\n"
        "    ort.InferenceSession(data, session_options(), providers=['CPUExecutionProvider'])\n"
        "except Exception as exc:\n"
        "    print('without:', 'is not a registered function/op' in str(exc))\n"
        "with run_limits(custom_ops=check_libraries([sys.argv[2]])):\n"
        "    options = session_options()\n"
        "sess = ort.InferenceSession(data, options, providers=['CPUExecutionProvider'])\n"
        "np.save(sys.argv[3], sess.run(None, {'x': np.ones((8, 16), np.float32)})[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.onnx"), LIBRARY, str(tmp_path / "y.npy")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout == "without: True\n", done.stdout + done.stderr
    expected = np.tanh(np.ones((8, 16)) @ np.linalg.inv(W))
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)


def config_model() -> onnx.ModelProto:
    """A model whose ``ort_config`` asks onnxruntime for profiling (a file in the working folder) and
    no graph optimization."""
    f = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 4])  # noqa: E731
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])],
                              "configured", [f("x")], [f("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"ort_config": json.dumps(
        {"session_options": {"enable_profiling": 1, "graph_optimization_level": 0}})})
    return model


@pytest.mark.parametrize("command", ["verify", "compare"])
def test_a_models_ort_config_is_ignored(tmp_path, monkeypatch, command):
    """With ``ORT_LOAD_CONFIG_FROM_MODEL=1`` onnxruntime would profile every session of this model and
    write the profiles into the working folder: a write outside the outputs the user named, decided
    by the file."""
    (tmp_path / "model").mkdir()
    onnx.save(config_model(), tmp_path / "model" / "m.onnx")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = run(command, tmp_path / "model" / "m.onnx", env={MODEL_CONFIG_VARIABLE: "1"})
    assert r.exit_code == 0, r.output
    assert os.listdir(work) == [] and os.listdir(tmp_path / "model") == ["m.onnx"]


def test_onnxruntime_would_follow_the_models_config(tmp_path, monkeypatch):
    """The hazard is real in this onnxruntime: a session of plain options, the variable set, writes
    the profile the model asks for; onnxmem's options remove the variable first."""
    import onnxruntime as ort

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(MODEL_CONFIG_VARIABLE, "1")
    data = config_model().SerializeToString()
    sess = ort.InferenceSession(data, ort.SessionOptions(), providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.ones((4, 4), np.float32)})
    sess.end_profiling()
    assert any(name.startswith("onnxruntime_profile_") for name in os.listdir(tmp_path))
    for name in os.listdir(tmp_path):
        os.remove(name)
    sess = ort.InferenceSession(data, session_options(), providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.ones((4, 4), np.float32)})
    assert sess.end_profiling() == ""  # no profile: profiling was never on
    del sess
    assert MODEL_CONFIG_VARIABLE not in os.environ and os.listdir(tmp_path) == []
