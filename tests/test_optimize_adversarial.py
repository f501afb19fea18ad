"""--optimize under attack: graphs onnxruntime writes in another order from run to run, names
that look generated, bodies that read renamed values, measured shapes of the graph onnxruntime
built, and the temporary folder it is written to (onnxmem.runtime.optimize)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxmem.cli.main import main
from onnxmem.runtime.optimize import canonical_names

from .conftest import MODELS, ROOT
from .helpers import HANG_S, make_model, plan_then_verify, vi


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _branches(first: str) -> onnx.ModelProto:
    """x -> Relu and Sigmoid (two branches) -> Add -> y, the branch ``first`` written first, with
    the value and node names onnxruntime generates (``BASE_token_N``), numbered as they come."""
    relu = helper.make_node("Relu", ["x"], ["Reorder_token_7"], name="Reorder_token_3")
    sig = helper.make_node("Sigmoid", ["x"], ["Reorder_token_9"], name="Reorder_token_4")
    if first == "sigmoid":
        relu = helper.make_node("Relu", ["x"], ["Reorder_token_12"], name="Reorder_token_11")
        sig = helper.make_node("Sigmoid", ["x"], ["Reorder_token_2"], name="Reorder_token_1")
    pair = [relu, sig] if first == "relu" else [sig, relu]
    add = helper.make_node("Add", [relu.output[0], sig.output[0]], ["y"], name="add")
    return make_model([*pair, add], [vi("x", [2, 3])], [vi("y", [2, 3])])


def test_the_same_graph_written_in_another_order_is_the_same_canonical_graph():
    one, other = canonical_names(_branches("relu")), canonical_names(_branches("sigmoid"))
    assert one.SerializeToString(deterministic=True) == other.SerializeToString(deterministic=True)
    assert [n.op_type for n in one.graph.node][-1] == "Add"
    assert all("_token_" not in x for n in one.graph.node for x in (*n.input, *n.output, n.name))


def test_a_branching_model_gives_the_same_digest_each_time_and_verifies(tmp_path):
    """onnxruntime writes the inception block's branches in an order that changes from run to
    run at --optimize all: the plan made once is verified by the graph built again."""
    digests = set()
    for i in range(3):
        out = tmp_path / f"p{i}.json"
        r = run("plan", MODELS / "inception_block.onnx", "--optimize", "all", "-o", out)
        assert r.exit_code == 0, r.output
        digests.add(json.loads(out.read_text())["model"]["graph_sha256"])
    assert len(digests) == 1
    r = run("verify", MODELS / "inception_block.onnx", "--plan", tmp_path / "p0.json")
    assert r.exit_code == 0 and "verified" in r.output, r.output


def _captured_token(name: str) -> onnx.ModelProto:
    """``t = Relu(x)`` named ``name``, read by both branches of an If and by the Add after it."""
    then = helper.make_graph([helper.make_node("Neg", [name], ["a"])], "then", [], [vi("a", [4, 8])])
    other = helper.make_graph([helper.make_node("Abs", [name], ["b"])], "else", [], [vi("b", [4, 8])])
    nodes = [helper.make_node("Relu", ["x"], [name]),
             helper.make_node("If", ["c"], ["u"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["u", name], ["y"])]
    return make_model(nodes, [vi("x", [4, 8]), vi("c", [], TensorProto.BOOL)], [vi("y", [4, 8])])


def test_a_body_reads_a_value_whose_name_looks_generated(tmp_path):
    """A value named like onnxruntime's generated names is renamed in the main graph: the If's
    branches that read it read it under its new name (it was 'produced by no node')."""
    for level in ("basic", "all"):
        plan_then_verify(tmp_path, _captured_token("t_token_1"), {"x": _ones(), "c": _true()}, "--optimize", level)


def _ones():
    import numpy as np

    return np.ones((4, 8), np.float32)


def _true():
    import numpy as np

    return np.array(True)


def test_measured_shapes_of_the_graph_onnxruntime_built(tmp_path):
    """control_flow's Loop output depends on data; at extended and all its graph has FusedConv,
    which onnx cannot type, before the If and the Loop: the measuring run declares those values
    untyped (onnxruntime types them) instead of guessing their type from the If's bool condition
    (a session refused, nothing measured, 'pass --measure-shapes' to a run that passed it)."""
    for level in ("extended", "all"):
        out = tmp_path / f"{level}.json"
        r = run("plan", MODELS / "control_flow.onnx", "--optimize", level, "--measure-shapes", "-o", out)
        assert r.exit_code == 0, r.output
        assert "Relu" not in json.loads(out.read_text())["op_types"]  # fused into the Conv before it
        r = run("verify", MODELS / "control_flow.onnx", "--plan", out)
        assert r.exit_code == 0 and "verified" in r.output, r.output


def _long_chain(n: int) -> onnx.ModelProto:
    """x -> (Conv -> Relu) x ``n`` -> y, 8 channels: a graph onnxruntime takes a while to optimize."""
    import numpy as np

    rng = np.random.default_rng(0)
    nodes, weights, cur = [], [], "x"
    for i in range(n):
        weights.append(onnx.numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32), f"w{i}"))
        out = "y" if i == n - 1 else f"r{i}"
        nodes += [helper.make_node("Conv", [cur, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [out])]
        cur = out
    return make_model(nodes, [vi("x", [1, 8, 16, 16])], [vi("y", [1, 8, 16, 16])], weights)


def _interrupted(tmp_path, sig: int, group: bool) -> tuple[int, bytes]:
    """``onnxmem plan --optimize all`` of a long chain, sent ``sig`` (to its process group: a
    terminal's Ctrl-C reaches the onnxruntime child too) once onnxruntime has written the graph
    in its temporary folder: the exit code and the output, after checking that no folder and no
    plan were left (the command had not ended when the signal came)."""
    model, plan, tmp = tmp_path / "chain.onnx", tmp_path / "plan.json", tmp_path / "tmp"
    onnx.save(_long_chain(4000), model)
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    # SIGINT at its default in the command (a job started in the background, as a CI step may be,
    # inherits it ignored, and Python then installs no Ctrl-C handler)
    proc = subprocess.Popen([sys.executable, "-m", "onnxmem", "plan", str(model), "--optimize", "all", "-o", str(plan)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + HANG_S
    while not any((p / "optimized.onnx").exists() for p in tmp.glob("onnxmem-optimize-*")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.005)
    # the graph written: the command reads and plans its 4,000 fused nodes (seconds), the signal
    # sent at once lands before it can end, on a busy machine or an idle one
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=HANG_S)
    assert proc.returncode != 0, out.decode()
    assert b"Traceback" not in out, out.decode()
    assert [p.name for p in tmp.iterdir() if p.is_dir() or p.name.startswith("onnxmem")] == []
    assert not plan.exists()
    return proc.returncode, out


def test_sigterm_while_onnxruntime_optimizes_leaves_no_temporary_folder(tmp_path):
    """SIGTERM (kill, a job's time limit) while the optimized graph is being written: the command
    exits 143, its temporary folder is removed, and no plan is written."""
    code, out = _interrupted(tmp_path, signal.SIGTERM, group=False)
    assert code == 143, out


@pytest.mark.heavy
def test_ctrl_c_while_onnxruntime_optimizes_is_one_line(tmp_path):
    """Ctrl-C reaches the command and its onnxruntime child: the child prints no traceback of its
    own (it ignores SIGINT; the command stops it), the command aborts, nothing is left."""
    code, out = _interrupted(tmp_path, signal.SIGINT, group=True)
    assert code in (1, 130) and out.decode().strip().splitlines()[-1] == "Aborted!", out


def test_the_nchwc_probe_writes_only_in_the_folder_it_is_given(tmp_path, monkeypatch):
    """The block-size probe runs in the onnxruntime child: its graph goes to the command's own
    temporary folder (removed by the command even when the child is killed), in no folder of
    its own (here the default temporary folder does not exist)."""
    import tempfile

    from onnxmem.runtime.optimize import _probe_nchwc_block

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "absent"))
    folder = tmp_path / "optimize"
    folder.mkdir()
    assert _probe_nchwc_block(str(folder)) in (None, 4, 8, 16)
    assert list(folder.iterdir()) == [] and not (tmp_path / "absent").exists()


def test_optimize_with_pipeline_or_several_models_names_what_was_given(tmp_path):
    r = run("plan", MODELS / "resnet_cnn.onnx", "--pipeline", "--optimize", "all")
    assert r.exit_code == 2 and "--pipeline works on the graph as written; leave out --optimize" in r.output, r.output
    r = run("plan", MODELS / "resnet_cnn.onnx", MODELS / "inception_block.onnx", "--optimize", "all")
    assert r.exit_code == 2 and "planning several models works on the graph as written" in r.output, r.output


def test_a_graph_without_nchwc_ops_records_no_block_size(tmp_path):
    """The transformer block's graph at all has no NCHWc op: it does not depend on the CPU's
    vector width, so its plan records no block size (a plan made with AVX2 was refused with
    AVX-512, 'another vector width, another graph', for the same graph); a graph with NCHWc
    ops records it and is held to it."""
    out = tmp_path / "t.json"
    r = run("plan", MODELS / "transformer_block.onnx", "--optimize", "all", "--dim", "batch=1", "--dim", "seq=16",
            "-o", out)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert "nchwc_block" not in data["model"]["optimization"] and "NCHWc" not in r.output
    r = run("verify", MODELS / "transformer_block.onnx", "--plan", out)
    assert r.exit_code == 0 and "verified" in r.output, r.output
    cnn = tmp_path / "cnn.json"
    assert run("plan", MODELS / "resnet_cnn.onnx", "--optimize", "all", "-o", cnn).exit_code == 0
    block = json.loads(cnn.read_text())["model"]["optimization"]["nchwc_block"]
    assert block in (4, 8, 16)


@pytest.mark.heavy
def test_a_training_eval_graph_keeps_its_parameters_outside_the_arena(tmp_path):
    """onnxruntime's optimizer expands the eval graph's SoftmaxCrossEntropyLoss into its ops: the
    loss block that tells its parameters (graph inputs the caller holds) from its data is gone
    from the graph it builds. The plan of that graph takes the roles of the model as written:
    the parameters stay outside the arena (they were planned in it: 2.36 MiB for 324.50 KiB),
    and verify and compare hold the plan to the same roles (compare feeds the parameters to the
    default session it measures)."""
    model = MODELS / "training" / "mlp.eval.onnx"
    plans = {}
    for level in ("none", "all"):
        out = tmp_path / f"{level}.json"
        r = run("plan", model, "--optimize", level, "-o", out)
        assert r.exit_code == 0, r.output
        plans[level] = json.loads(out.read_text())
    params = [{o["name"] for o in p["outside"] if o["reason"] == "parameter"} for p in plans.values()]
    assert len(params[0]) == 6 and params[1] == params[0]
    assert plans["all"]["weights_size"] >= plans["none"]["weights_size"]
    assert plans["all"]["arena_size"] <= plans["none"]["arena_size"]
    r = run("verify", model, "--plan", tmp_path / "all.json")
    assert r.exit_code == 0 and "verified" in r.output, r.output
    for level in ("all", "none"):  # the default session is fed the parameters too (a KeyError before)
        r = run("compare", model, "--plan", tmp_path / f"{level}.json")
        assert r.exit_code == 0 and "measured     default session" in r.output, r.output


def test_the_checkpoint_beside_the_model_is_read_for_the_graph_onnxruntime_built(tmp_path):
    """The dynamo MLP's eval graph reads a frozen parameter its checkpoint holds (a Reshape's
    shape): at --optimize all the checkpoint beside the user's file is read as at none (it was
    looked for beside the temporary graph, and the parameters' roles in the graph onnxruntime
    built, which has no loss block: 'sizes of 9 tensors are unknown')."""
    model = MODELS / "training" / "dynamo" / "mlp" / "eval_model.onnx"
    out = tmp_path / "all.json"
    r = run("plan", model, "--optimize", "all", "-o", out)
    assert r.exit_code == 0, r.output
    assert "(beside the model, " in r.output and "1 frozen value known to shape inference" in r.output
    assert json.loads(out.read_text())["extra"]["checkpoint"]["found"] == "beside the model"
    r = run("verify", model, "--plan", out)
    assert r.exit_code == 0 and "verified" in r.output, r.output
