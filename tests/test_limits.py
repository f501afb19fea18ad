"""Every onnxruntime run bounded in time and memory, in one child process per command
(``onnxmem.runtime.isolation``): crashes, memory bombs and endless runs end in one line, exit 1."""

from __future__ import annotations

import os
import signal

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxmem.core.errors import RuntimeBackendError
from onnxmem.runtime.isolation import at_step, run_isolated, run_limits, start_run
from onnxmem.runtime.ort import measure_shapes
from tests.helpers import make_model, vi
from tests.test_hostile import assert_refused


def _save(tmp_path, model: onnx.ModelProto, name: str = "m.onnx") -> str:
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def fold_bomb() -> onnx.ModelProto:
    """A model of under 300 bytes whose weight-only subgraph asks for 4 TiB: ConstantOfShape
    of the constant shape [2^20, 2^20] (float), summed into the output."""
    shape = numpy_helper.from_array(np.array([2**20, 2**20], np.int64), "s")
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["big"], name="fill",
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("ReduceSum", ["big"], ["t"], keepdims=0),
        helper.make_node("Add", ["x", "t"], ["y"]),
    ]
    return make_model(nodes, [vi("x", [1])], [vi("y", [1])], [shape])


def loop_bomb(trips: int = 10**9) -> onnx.ModelProto:
    """y = x + 1 + 1 + ... (a Loop of ``trips`` iterations over a graph input)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [vi("i", [], TensorProto.INT64), vi("c_in", [], TensorProto.BOOL), vi("v_in", [1])],
        [vi("c_out", [], TensorProto.BOOL), vi("v_out", [1])],
        [numpy_helper.from_array(np.array([1.0], np.float32), "one")])
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "trip"),
             numpy_helper.from_array(np.array(True), "cond")]
    loop = helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop", body=body)
    return make_model([loop], [vi("x", [1])], [vi("y", [1])], inits)


def fold_bombs(count: int, each: int) -> onnx.ModelProto:
    """``count`` ConstantOfShape weights of ``each`` float32 values, summed into the output."""
    shape = numpy_helper.from_array(np.array([each], np.int64), "s")
    nodes = [helper.make_node("Add", ["x", "t0"], ["y0"])]
    for i in range(count):
        nodes += [helper.make_node("ConstantOfShape", ["s"], [f"big{i}"], name=f"fill{i}",
                                   value=numpy_helper.from_array(np.array([1.0], np.float32))),
                  helper.make_node("ReduceSum", [f"big{i}"], [f"t{i}"], keepdims=0)]
        if i:
            nodes.append(helper.make_node("Add", [f"y{i - 1}", f"t{i}"], [f"y{i}"]))
    return make_model(nodes, [vi("x", [1])], [vi(f"y{count - 1}", [1])], [shape])


def test_weights_that_fit_one_by_one_but_not_together_are_refused_before_allocating(tmp_path):
    """Three computed weights of 0.4x the memory available each: each fits, the three do not,
    and the line names them together."""
    from onnxmem.runtime.isolation import available_memory

    each = int(available_memory() * 0.4) // 4
    line = assert_refused(["verify", _save(tmp_path, fold_bombs(3, each))], tmp_path,
                          "the 6 weights computed from constant nodes of")  # three fills and their three sums
    assert f"of {3 * 4 * each + 3 * 4} B" in line and "of host memory available" in line


def test_a_weight_only_subgraph_too_large_for_memory_is_refused_before_allocating(tmp_path):
    """verify folds weight-only subgraphs: a 4 TiB ConstantOfShape is one line naming the value,
    its size and the limit, and nothing is allocated."""
    model = _save(tmp_path, fold_bomb())
    assert os.path.getsize(model) < 300
    line = assert_refused(["verify", model], tmp_path, "weight 'big', computed by node 'fill'")
    assert f"of {2**42} B (4096.00 GiB) does not fit in the" in line
    assert "of host memory available" in line


def test_verify_stops_a_run_past_its_time_limit(tmp_path):
    """A Loop of 10^9 iterations: the arena run stops at --time-limit, in one line that names
    the run and the flag."""
    model = _save(tmp_path, loop_bomb())
    line = assert_refused(["verify", model, "--time-limit", "1"], tmp_path,
                          "the arena run did not finish in 1 s and was stopped")
    assert "raise --time-limit" in line


def test_measuring_shapes_stops_at_the_time_limit(tmp_path):
    """plan --measure-shapes runs the whole model in onnxruntime: stopped at --time-limit
    (by onnxruntime's terminate flag, or by killing the child when a kernel does not stop)."""
    model = _save(tmp_path, loop_bomb())
    line = assert_refused(["plan", model, "--measure-shapes", "--time-limit", "1"], tmp_path,
                          "did not finish in 1 s and was stopped; raise --time-limit")
    assert "measure shapes" in line and "seeded random values" not in line  # the inputs are not to blame


def test_the_time_limit_is_not_a_result(tmp_path):
    """A plan verified under a short limit and a long one prints the same figures."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main

    model = _save(tmp_path, loop_bomb(trips=3))
    outs = []
    for limit in ("30", "600"):
        r = CliRunner().invoke(main, ["verify", model, "--time-limit", limit])
        assert r.exit_code == 0, r.output
        outs.append([ln for ln in r.stdout.splitlines() if ln.startswith(("arena", "  output"))])
    assert outs[0] == outs[1] and outs[0]


def crash_during_a_run() -> None:
    """Test entry point for the child: announce a run and a node, then die as a crashing kernel does."""
    start_run("the run of the model to measure shapes")
    at_step("node 'n' (Relu)")
    os.abort()


@pytest.mark.parametrize(("crash", "args", "signame"), [
    (signal.raise_signal, (signal.SIGSEGV,), "SIGSEGV"),
    (crash_during_a_run, (), "SIGABRT"),
])
def test_a_crash_in_the_child_is_one_line_and_the_next_call_works(crash, args, signame):
    with run_limits(seconds=30):
        with pytest.raises(RuntimeBackendError) as caught:
            run_isolated(crash, *args)
        msg = str(caught.value)
        assert msg.startswith(f"onnxruntime crashed ({signame}) during ") and "\n" not in msg
        assert caught.value.exit_code == 1
        if crash is crash_during_a_run:
            assert "during the run of the model to measure shapes, at node 'n' (Relu)" in msg
        assert run_isolated(os.getpid) != os.getpid()  # a new child took over


def made_and_crashed() -> None:
    """A temporary folder with a file, as onnxruntime's profile makes one, then a crash: the
    child unwinds nothing (no ``with`` block's exit runs)."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="onnxmem-ortpeak-")
    with open(os.path.join(folder, "profile.json"), "w") as fh:
        fh.write("[]")
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_child_stopped_mid_call_leaves_no_temporary_file(tmp_path, monkeypatch):
    """The child's temporary files go in a folder of the parent's, removed when the child is
    stopped: a crash (as here), a time limit or Ctrl-C (each stops it the same way)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with run_limits(seconds=30):
        assert run_isolated(tempfile.gettempdir) != str(tmp_path)  # the child's own folder, in ours
        assert [p.name.startswith("onnxmem-child-") for p in tmp_path.iterdir()] == [True]
        with pytest.raises(RuntimeBackendError, match="SIGKILL"):
            run_isolated(made_and_crashed)
    assert list(tmp_path.iterdir()) == []


def test_a_child_runs_every_call_of_a_command():
    """One child per command: calls inside one run_limits share it; it ends with the block."""
    with run_limits(seconds=30):
        first = run_isolated(os.getpid)
        assert run_isolated(os.getpid) == first != os.getpid()
    with run_limits(seconds=30):
        assert run_isolated(os.getpid) != first


def test_onnxruntime_in_the_child_is_held_to_its_memory_limit(tmp_path):
    """A run that needs 4 GiB in a child allowed 512 MiB more than it starts with: one line from
    onnxruntime's failed allocation, the machine untouched."""
    shape = numpy_helper.from_array(np.array([2**30], np.int64), "shape")
    m = make_model([helper.make_node("Expand", ["x", "shape"], ["big"]),
                    helper.make_node("ReduceMax", ["big"], ["y"], keepdims=0)],
                   [vi("x", [1])], [vi("y", [])], [shape])
    path = _save(tmp_path, m)
    with run_limits(seconds=60, memory=512 * 2**20):
        with pytest.raises(RuntimeBackendError) as caught:
            measure_shapes(onnx.load(path), model_path=path)
    assert "to measure shapes" in str(caught.value) and "\n" not in str(caught.value)


def test_zoo_verify_reads_models_through_the_checked_loader(tmp_path):
    """A zoo model symlinked to /dev/zero: the zoo refuses the link out of its folder in one
    line, and the fill-weights step reads through the checked loader, whose regular-file rule
    refuses a device before any byte is read (it once read one to the size limit)."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main
    from onnxmem.core.errors import OnnxmemError
    from onnxmem.zoo.fixtures import materialize

    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "zero.onnx").symlink_to("/dev/zero")
    r = CliRunner().invoke(main, ["zoo", str(zoo), "--verify", "cpu", "--executor", "inline",
                                  "--out", str(tmp_path / "out")])
    assert r.exit_code == 1, r.output
    assert "leads to '/dev/zero', outside the zoo's folder" in r.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(OnnxmemError, match="is not a regular file"):
        materialize(zoo / "zero.onnx", tmp_path / "filled")


@pytest.mark.heavy
def test_memory_running_out_in_the_command_itself_is_one_line(tmp_path):
    """verify run in the command's own process (no child: ``isolate=False``, as in a pool's
    worker) on a batch of a million images, under a 3 GiB address space: one line naming the
    command, exit 1, no traceback (the child reports its own MemoryError the same way)."""

    k1 = numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "k1")
    k2 = numpy_helper.from_array(np.full((4, 4, 3, 3), 0.1, np.float32), "k2")
    m = make_model([helper.make_node("Conv", ["img", "k1"], ["c1"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["c1"], ["r1"]),
                    helper.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
                    helper.make_node("Conv", ["m1", "k2"], ["c2"], pads=[1, 1, 1, 1]),
                    helper.make_node("Add", ["c2", "m1"], ["s"]),
                    helper.make_node("GlobalAveragePool", ["s"], ["y"])],
                   [vi("img", [1_000_000, 3, 8, 8])], [vi("y", None)], [k1, k2])
    path = _save(tmp_path, m)
    lines = _in_three_gib("verify", path)
    assert lines[-1].startswith("error: onnxmem ran out of memory during verify"), lines
    assert not any("Traceback" in ln for ln in lines)


def _in_three_gib(command: str, path: os.PathLike[str]) -> list[str]:
    """``onnxmem COMMAND PATH`` in the command's own process (no child: ``isolate=False``) under a
    3 GiB address space; its exit code asserted 1, the lines it printed on stderr."""
    import subprocess
    import sys

    script = ("import resource, sys\n"
              "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
              "from onnxmem.runtime.isolation import run_limits\n"
              "from onnxmem.cli.main import main\n"
              "with run_limits(isolate=False):\n"
              "    main([sys.argv[1], sys.argv[2]])\n")
    r = subprocess.run([sys.executable, "-c", script, command, str(path)], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 1, r.stderr[-2000:]
    return [ln for ln in r.stderr.splitlines() if ln.strip()]


def test_a_command_forks_its_child_and_a_process_with_numpy_spawns_it():
    """The child of a command's process (one thread, neither numpy nor onnxruntime loaded) is
    forked from it, and works as a spawned one does: a call, a crash as one line, the next call
    in a new child. A process that has loaded numpy spawns its child instead (this one)."""
    import subprocess
    import sys

    from onnxmem.runtime.isolation import start_method

    assert start_method() == "spawn"  # pytest's process has numpy
    script = ("import os, signal, sys\n"
              "from onnxmem.core.errors import RuntimeBackendError\n"
              "from onnxmem.runtime import isolation\n"
              "with isolation.run_limits(seconds=30, prestart=True):\n"
              "    print(isolation._worker.method, 'numpy' in sys.modules)\n"
              "    print(isolation.run_isolated(os.getppid) == os.getpid())\n"
              "    try:\n"
              "        isolation.run_isolated(signal.raise_signal, signal.SIGSEGV)\n"
              "    except RuntimeBackendError as exc:\n"
              "        print(str(exc).splitlines()[0].split(' during ')[0])\n"
              "    print(isolation.run_isolated(os.getppid) == os.getpid(), 'numpy' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["fork False", "True", "onnxruntime crashed (SIGSEGV)", "True False"]


def test_a_prestarted_child_sets_up_the_device_it_is_told_while_the_parent_plans():
    """``run_limits(prestart=True, warm=device)``: the forked child, once it has loaded onnxruntime,
    builds and runs a node session of that device's kind before the first call comes
    (``sessions.warm_device``); a device it cannot set up (CUDA without a GPU or without the
    provider) leaves it as it was, and the calls run as before. Without ``warm`` it sets up none."""
    import subprocess
    import sys

    from onnxmem.runtime import sessions

    script = ("import os, sys\n"
              "from onnxmem.runtime import isolation\n"
              "for warm in (sys.argv[1], None):\n"
              "    with isolation.run_limits(seconds=30, prestart=True, warm=warm):\n"
              "        from onnxmem.runtime.sessions import warmed\n"
              "        print(isolation._worker.method, isolation.run_isolated(warmed),\n"
              "              isolation.run_isolated(os.getppid) == os.getpid())\n")
    for device, warmed in (("cpu", "cpu"), ("cuda", "cuda" if sessions.cuda_available() else None)):
        r = subprocess.run([sys.executable, "-c", script, device], capture_output=True, text=True,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert r.returncode == 0, r.stderr[-2000:]
        # (the second child is spawned: asking the first what it set up loaded numpy here)
        assert r.stdout.splitlines() == [f"fork {warmed} True", "spawn None True"]


def test_the_cuda_runtime_taken_is_the_one_the_process_loaded(tmp_path):
    """``loaded_libraries`` lists the libraries this process mapped, by file name (onnxruntime's
    extension here); ``cuda_runtime`` takes a CUDA runtime the process loaded already (as
    onnxruntime's provider loads its own) over one the loader would find: a copy of the runtime
    loaded from another folder is the one it gives."""
    import shutil
    import subprocess
    import sys

    import onnxruntime.capi.onnxruntime_pybind11_state as ort_module

    from onnxmem.runtime.isolation import loaded_libraries

    paths = loaded_libraries("onnxruntime_pybind11_state")
    assert len(paths) == 1 and os.path.samefile(paths[0], ort_module.__file__)
    assert loaded_libraries("no-such-library-") == []
    real = _a_cuda_runtime()
    if real is None:
        pytest.skip("no CUDA runtime library loads here")
    copy = tmp_path / os.path.basename(real)
    shutil.copy(real, copy)
    script = ("import ctypes, sys\n"
              "ctypes.CDLL(sys.argv[1])\n"
              "from onnxmem.runtime.isolation import cuda_runtime\n"
              "print(cuda_runtime()._name)\n")
    r = subprocess.run([sys.executable, "-c", script, str(copy)], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str(copy)


def _a_cuda_runtime() -> str | None:
    """The path of a CUDA runtime library the loader finds here (loaded into this process to find it)."""
    import ctypes

    from onnxmem.runtime.isolation import loaded_libraries

    for lib in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            ctypes.CDLL(lib)
        except OSError:
            continue
        return loaded_libraries("libcudart.so")[0]
    return None


def test_warming_a_device_runs_a_node_session_of_its_kind_or_says_it_cannot(monkeypatch):
    """``warm_device``: on the CPU a session of the node sessions' options runs (the first use of
    each kernel); where the session cannot be built it says ``False`` and raises nothing."""
    import onnxruntime as ort

    from onnxmem.runtime import sessions

    built: list[list] = []
    real = ort.InferenceSession

    def counted(data, sess_options=None, providers=None):
        built.append(list(providers))
        return real(data, sess_options=sess_options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", counted)
    monkeypatch.setattr(sessions, "_WARMED", None)
    assert sessions.warm_device("cpu") is True and sessions.warmed() == "cpu"
    assert built == [sessions.node_setup(False)[1]]

    def refused(*args, **kwargs):
        raise RuntimeError("no provider")

    monkeypatch.setattr(ort, "InferenceSession", refused)
    monkeypatch.setattr(sessions, "_WARMED", None)
    assert sessions.warm_device("cpu") is False and sessions.warmed() is None


@pytest.mark.heavy
def test_memory_running_out_in_pack_names_what_pack_can_be_given(tmp_path):
    """pack of 60,000 buffers all live at once under a 3 GiB address space: the buffers' lists of
    those live beside them do not fit; the one line says what a pack problem can change, not the
    model's input shapes pack has no flag for."""
    problem = tmp_path / "dense.csv"
    problem.write_text("id,lower,upper,size\n" + "".join(f"b{i},0,1,{i % 97 + 1}\n" for i in range(60_000)))
    assert _in_three_gib("pack", problem) == [
        "error: onnxmem ran out of memory during pack; give a problem with fewer buffers live at once (the solvers "
        "keep, for each buffer, the buffers live beside it: n x n where all n are) or run it where more memory is free"]


def test_the_child_keeps_within_an_address_space_limit_the_user_set(tmp_path):
    """Under ``ulimit -v`` (a hard limit on the address space, as batch systems set) the child
    asked for its own limit above it: ``ValueError: not allowed to raise maximum limit``, a
    traceback, and every command that runs onnxruntime ended with 'the onnxruntime child process
    ended with exit code 1'. The child now takes the smaller of the two."""
    import resource
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    r = subprocess.run([sys.executable, "-m", "onnxmem", "verify", os.path.join(root, "models", "resnet_cnn.onnx")],
                       capture_output=True, text=True, cwd=tmp_path, preexec_fn=limited)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("verified"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_threads_past_the_bound_are_a_usage_error():
    """1,000 onnxruntime threads' stacks within a 6 GB address-space limit left onnxruntime
    waiting for threads it could not start (fuzz family flags, seed 1300000, flags:1300169)."""
    from click.testing import CliRunner

    from onnxmem.cli.main import main
    from onnxmem.cli.options import MAX_THREADS

    for command in ("compare", "verify"):
        r = CliRunner().invoke(main, [command, "m.onnx", "--threads", str(MAX_THREADS + 1)])
        assert r.exit_code == 2 and f"is not in the range 1<=x<={MAX_THREADS}" in r.output, r.output
